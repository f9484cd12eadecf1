#!/bin/sh
# The dm-multipath scenario of the interop guest (/mpath.sh, run by /init when the kernel
# command line says lt_mode=mpath; kernel_multipath.sh drives it): two linerate-target
# gateways A and B of one target (alua-mode = failover, one rbd LUN) at the portals lt_pa= and
# lt_pb= (in network namespaces of the host, reached through qemu's user-mode network). The guest logs in to both, multipath builds one map of two path groups by ALUA
# priority (prio alua, hardware_handler "1 alua", group_by_prio), multipathd watches it, and
# fio writes with crc32c verify on the dm device while the host kills the active/optimized
# gateway (kill -9), restarts it, then cuts the other one's link (a network partition: it
# loses the cluster and this initiator at once) and restores it. Each step prints "LTI PASS name" or "LTI FAIL name: why"; "LTI DO VERB GW"
# asks the host to act on a gateway (kill, start, cut, restore); "LTI PAUSE name MS" is the
# longest time fio saw no write complete; "LTI DONE pass=N fail=M" ends the run.
export PATH=/sbin:/bin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu
exec </dev/null >/dev/console 2>&1

. /lib/lti.sh
guest_report() {
    echo "--- multipath -ll"
    multipath -ll 2>&1
    guest_dmesg
    echo "--- multipathd (last 40 lines)"
    tail -n 40 /tmp/multipathd.log
}

PA=$(guest_arg lt_pa)
PB=$(guest_arg lt_pb)
IQN=$(guest_arg lt_iqn)
[ -n "$PA" ] && [ -n "$PB" ] && [ -n "$IQN" ] || die "boot: no lt_pa= / lt_pb= / lt_iqn="

guest_modules load.order load.mpath
guest_net
mkdir -p /etc/multipath
# The settings docs/multipath.md documents for dm-multipath in front of linerate gateways:
# a lost connection fails its commands after replacement_timeout (then dm-multipath moves them
# to another path), a hung gateway is noticed by the NOP-Out ping within interval + timeout.
guest_iscsi interop-mpath 5 2 3
# No udev in this guest: the WWID comes from VPD page 0x83 in sysfs (uid_attribute ""),
# and multipathd is told of each path by hand (multipath -v2 after the logins).
cat >/etc/multipath.conf <<CONF
defaults {
    polling_interval 1
    max_polling_interval 4
    find_multipaths no
    user_friendly_names no
    uid_attribute ""
}
devices {
    device {
        vendor "LINERATE"
        product ".*"
        path_grouping_policy group_by_prio
        prio alua
        hardware_handler "1 alua"
        path_checker tur
        path_selector "service-time 0"
        failback immediate
        no_path_retry 60
    }
}
CONF
guest_iscsid
say "BOOTED $(uname -r)"

node() { # PORTAL
    iscsiadm -m node -o new -T "$IQN" -p "$1" >/tmp/node.out 2>&1 &&
        iscsiadm -m node -T "$IQN" -p "$1" --login >/tmp/login.out 2>&1
}
node "$PA" || { tailof /tmp/login.out; die "login to gateway A"; }
node "$PB" || { tailof /tmp/login.out; die "login to gateway B"; }
i=0
while [ "$(ls -d /sys/class/scsi_disk/*:*:*:0/device/block/* 2>/dev/null | wc -l)" -lt 2 ]; do
    i=$((i + 1))
    [ $i -lt 300 ] || die "the kernel did not find both paths' disks"
    sleep 0.1
done
pass "two sessions, one per gateway: $(ls /sys/class/scsi_disk/*/device/block | grep sd | tr '\n' ' ')"

# libudev calls a device that has no entry in udev's database uninitialized, and multipath
# skips those: with no udevd here, each path gets the entry udevd would have written (only
# the "initialized" mark; the WWID is read from sysfs, uid_attribute "" above).
mkdir -p /run/udev/data
for b in /sys/block/sd*; do
    echo "I:1" >"/run/udev/data/b$(cat "$b/dev")"
done
multipathd -d -s -v3 >/tmp/multipathd.log 2>&1 &
sleep 2
multipath -v3 >/tmp/mp.out 2>&1
i=0
while [ "$(multipath -ll 2>/dev/null | grep -c ' running')" -lt 2 ]; do
    i=$((i + 1))
    [ $i -lt 60 ] || { tailof /tmp/mp.out; tailof /tmp/multipathd.log 30; die "no multipath map"; }
    sleep 1
done
multipath -ll >/tmp/ll.out 2>&1
sed 's/^/    | /' /tmp/ll.out
DM=/dev/$(ls /sys/block | grep '^dm-' | head -n 1)
[ -b "$DM" ] || die "no dm device"
# path_line HCTL-PREFIX: its line in multipath -ll (sda is gateway A's, host 0; sdb B's, host 1)
path_line() { multipath -ll 2>/dev/null | grep " $1:0:0:0 "; }
# prio of the path group holding host $1's path (50 active/optimized, 1 standby: prio alua)
path_prio() {
    multipath -ll 2>/dev/null | awk -v h=" $1:0:0:0 " '/prio=/ {
        for (i = 1; i <= NF; i++) if ($i ~ /^prio=/) p = substr($i, 6) }
        index($0, h) {print p; exit}'
}
if [ "$(path_prio 0)" = 50 ] && [ "$(path_prio 1)" = 1 ] &&
    path_line 0 | grep -q 'active ready running' && path_line 1 | grep -q 'active ghost running'; then
    pass "one map ($DM), two path groups by ALUA: A active/optimized (prio 50, ready), B standby (prio 1, ghost)"
else
    fail "the map is not A active/optimized (prio 50) + B standby (prio 1)"
fi

# fio NAME VERB GW: 4k random writes with crc32c, then the verify pass reading every block
# back, on the map; 8 s into the writes the host is asked to VERB gateway GW. fio must finish
# with no error; the longest gap between two write completions is the pause it saw.
FIO_MB=24
t_fio() {
    rm -f /tmp/lat*
    # bounded: I/O that dm-multipath keeps retrying (a path that fails every command but
    # passes its checker) would otherwise never end
    timeout 300 fio --name=mp --filename="$DM" --direct=1 --ioengine=libaio --iodepth=8 --rw=randwrite \
        --bs=4k --size=${FIO_MB}M --rate_iops=200 --verify=crc32c --verify_fatal=1 \
        --do_verify=1 --write_lat_log=/tmp/lat --log_avg_msec=0 >/tmp/fio.out 2>&1 &
    fpid=$!
    sleep 8
    say "DO $2 $3"
    wait $fpid
    rc=$?
    # lat log: time (ms since the start, at completion), latency, direction (1 write), ...
    pause=$(awk -F', *' '$3 == 1 {t = $1 + 0; if (n++ && t - p > m) m = t - p; p = t}
        END {print m + 0}' /tmp/lat_lat.1.log)
    nw=$(awk -F', *' '$3 == 1' /tmp/lat_lat.1.log | wc -l)
    say "PAUSE $1 $pause ms"
    if [ $rc -eq 0 ] && grep -q 'err= 0' /tmp/fio.out && ! grep -qi 'verify.*fail\|bad magic\|crc32c' /tmp/fio.out &&
        [ "$nw" -eq $((FIO_MB * 256)) ]; then
        grep -E '^ +(read|write):' /tmp/fio.out | sed 's/^ */    | /'
        pass "$1: fio $FIO_MB MiB 4k randwrite + crc32c verify on $DM, $nw writes, no error; longest write gap $pause ms"
    else
        tailof /tmp/fio.out 25
        fail "$1: fio exit $rc, $nw writes logged"
    fi
}
# wait_path HOST STATE PRIO: until host $1's path is "active STATE running" (ready: usable,
# ghost: standby) in a path group of priority PRIO, 120 s at most. multipathd re-reads a
# reinstated path's priority a checker round after its state, so both are waited for.
wait_path() {
    i=0
    while ! { path_line "$1" | grep -q "active $2 *running" && [ "$(path_prio "$1")" = "$3" ]; }; do
        i=$((i + 1))
        [ $i -lt 120 ] || return 1
        sleep 1
    done
}
# the path's state and priority now, for a failure message
path_now() { echo "$(path_line "$1" | awk '{print $(NF - 2), $(NF - 1), $NF}'), prio $(path_prio "$1")"; }

# failover STEP VERB GW BACK AFTER BACKED: fio on the map while the host does VERB to gateway
# GW; then the other gateway's path must be active/optimized (ready, prio 50). The host then
# does BACK to GW, whose path must come back standby (ghost, prio 1). AFTER and BACKED name
# the two moments in the verdicts.
failover() {
    case $3 in A) h=0 other=1 ot=B ;; *) h=1 other=0 ot=A ;; esac
    t_fio "$1" "$2" "$3"
    if wait_path $other ready 50; then
        pass "$5: $ot's path is active/optimized (ready, prio 50)"
    else
        fail "$5: $ot's path is $(path_now $other), not ready with prio 50"
    fi
    say "DO $4 $3"
    if wait_path $h ghost 1; then
        multipath -ll 2>&1 | sed 's/^/    | /'
        pass "$6: its path is back in the map, standby (ghost, prio 1)"
    else
        fail "$6: its path is $(path_now $h), not back as standby (ghost, prio 1)"
    fi
}

# A killed; restarted, it comes back standby: the cluster gave the role to B
failover kill-A kill A start "after the kill" "A restarted"
# A partition: B (now active/optimized) cut off from everything; A fences it and takes over.
# The initiator sees B's connection go silent: the NOP-Out ping fails it, replacement_timeout
# fails its commands, dm-multipath moves them to A. B comes back fenced: it refuses every
# command as standby until restarted.
failover cut-B cut B restore "after the cut" "B's link restored (B fenced)"
finish
