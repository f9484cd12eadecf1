#!/bin/sh
# /init of the interop guest (busybox sh, PID 1): loads the initiator's modules, brings up the
# qemu user-mode network (the host's loopback is 10.0.2.2), and drives linerate-target with
# the Linux kernel initiator (open-iscsi + iscsi_tcp), digests off and then on: SendTargets,
# login, a dd round trip on each LUN, the target dropping the connection in the middle of I/O,
# ext4 + fsck, fio randrw with verify, logout. Every step prints "LTI PASS name" or
# "LTI FAIL name: why" on the serial console; "LTI DROP" asks the host to destroy the
# target's sockets; "LTI DONE pass=N fail=M" ends the run, then the guest powers off.
# Then, once and digests off, CHAP against the second target daemon (lt_cport): SendTargets
# with and without discovery CHAP, one-way and mutual logins with a dd round trip, a wrong
# secret, a wrong user and a missing mutual pair refused, a target answering with the wrong
# mutual secret refused by the initiator, SHA3-256 and SHA-256 logins. Last, a target with host
# LUN maps: the guest logs in as its entry and sees only its LUNs.
# Parameters come from the kernel command line: lt_port= lt_iqn= lt_drop=0|1, and lt_cport=
# with the CHAP secrets lt_sa= (alice) lt_sb= (bob) lt_st= (tgt-bob) lt_sd= (disco-t).
export PATH=/sbin:/bin LD_LIBRARY_PATH=/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
exec </dev/null >/dev/console 2>&1
# the dm-multipath scenario (kernel_multipath.sh) is a script of its own
grep -q 'lt_mode=mpath' /proc/cmdline && exec /bin/sh /mpath.sh

. /lib/lti.sh

PORT=$(guest_arg lt_port)
IQN=$(guest_arg lt_iqn)
DROP=$(guest_arg lt_drop)
DROP=${DROP:-1}
CPORT=$(guest_arg lt_cport)
S_ALICE=$(guest_arg lt_sa)
S_BOB=$(guest_arg lt_sb)
S_TGT=$(guest_arg lt_st)
S_DISC=$(guest_arg lt_sd)
[ -n "$PORT" ] && [ -n "$IQN" ] || die "boot: no lt_port= / lt_iqn= on the kernel command line"
[ -n "$CPORT" ] && [ -n "$S_ALICE" ] && [ -n "$S_BOB" ] && [ -n "$S_TGT" ] && [ -n "$S_DISC" ] ||
    die "boot: no lt_cport= / lt_sa= / lt_sb= / lt_st= / lt_sd= on the kernel command line"
PORTAL=$HOST:$PORT
CPORTAL=$HOST:$CPORT
MB=64   # dd round trip per LUN
FIO_MB=16

guest_modules load.order
guest_net
mkdir -p /mnt
# Timeouts for a slow (TCG) guest: pings every 5 s but 15 s to answer; a lost connection is
# retried for 120 s before its commands fail (the drop test must see them retried, not failed).
guest_iscsi interop-guest 120 5 15
guest_iscsid
say "BOOTED $(uname -r), crc32c by $(awk '/^name/ {n = $3} /^driver/ {d = $3} /^priority/ && n == "crc32c" {print d, $3}' /proc/crypto | sort -k2n | tail -n 1 | cut -d' ' -f1)"

dd if=/dev/urandom of=/tmp/pat bs=1M count=$MB 2>/dev/null
PAT=$(sha256sum </tmp/pat | cut -d' ' -f1)
PAT16=$(head -c $((16 << 20)) /tmp/pat | sha256sum | cut -d' ' -f1)

# The sd device of LUN $1 of the (only) iSCSI session, waiting for the kernel's scan.
lun_dev() {
    i=0
    while [ $i -lt 300 ]; do
        for d in /sys/class/scsi_disk/*:*:*:"$1"/device/block/*; do
            [ -e "$d" ] && [ -b "/dev/${d##*/}" ] && { echo "/dev/${d##*/}"; return 0; }
        done
        sleep 0.1
        i=$((i + 1))
    done
    return 1
}

sess_state() { cat /sys/class/iscsi_session/session*/state 2>/dev/null | head -n 1; }
conn_errors() { dmesg | grep -c 'detected conn error'; }

# dd round trip: the pattern written with O_DIRECT, read back with O_DIRECT, compared.
t_dd() { # NAME DEV
    if ! dd if=/tmp/pat of="$2" bs=1M oflag=direct conv=fsync 2>/tmp/dd.err; then
        tailof /tmp/dd.err
        fail "$1: dd write $MB MiB"
        return
    fi
    got=$(dd if="$2" bs=1M count=$MB iflag=direct 2>/tmp/dd.err | sha256sum | cut -d' ' -f1)
    if [ "$got" = "$PAT" ]; then pass "$1: dd $MB MiB write + read, checksum equal"; else
        tailof /tmp/dd.err
        fail "$1: dd read back differs ($got)"
    fi
}

# ext4: mkfs, files written, umount, fsck -n clean, remount (page cache dropped), checksums.
t_fs() { # NAME DEV
    mkfs.ext4 -q -F "$2" >/tmp/fs.out 2>&1 || { tailof /tmp/fs.out; fail "$1: mkfs.ext4"; return; }
    mount -t ext4 "$2" /mnt || { fail "$1: mount"; return; }
    for i in 1 2 3 4 5 6; do
        dd if=/dev/urandom of=/mnt/f$i bs=64k count=$((i * 8)) 2>/dev/null
    done
    mkdir /mnt/d && cp /sbin/iscsid /sbin/e2fsck /mnt/d/
    (cd /mnt && sha256sum f* d/*) >/tmp/sums
    umount /mnt || { fail "$1: umount"; return; }
    if ! e2fsck -f -n "$2" >/tmp/fs.out 2>&1; then
        tailof /tmp/fs.out
        fail "$1: e2fsck -n after umount"
        return
    fi
    echo 3 >/proc/sys/vm/drop_caches
    mount -t ext4 "$2" /mnt || { fail "$1: remount"; return; }
    if (cd /mnt && sha256sum -c /tmp/sums) >/tmp/fs.out 2>&1; then
        pass "$1: mkfs.ext4, 8 files, umount, fsck -n clean, remount, checksums equal"
    else
        tailof /tmp/fs.out
        fail "$1: file checksums after remount"
    fi
    umount /mnt
}

t_fio() { # NAME DEV
    if timeout 240 fio --name=lt --filename="$2" --direct=1 --ioengine=libaio --iodepth=16 \
        --rw=randrw --bs=4k --size=${FIO_MB}M --verify=crc32c --verify_fatal=1 \
        --do_verify=1 >/tmp/fio.out 2>&1 && grep -q 'err= 0' /tmp/fio.out; then
        grep -E '^ +(read|write):|verify' /tmp/fio.out | sed 's/^ */    | /'
        pass "$1: fio 4k randrw $FIO_MB MiB iodepth 16 with crc32c verify"
    else
        tailof /tmp/fio.out 25
        fail "$1: fio randrw verify"
    fi
}

# The target drops the connection in the middle of I/O (the host destroys its sockets with
# ss -K on "LTI DROP"): a writer on LUN 0 and a reader on LUN 1 keep going through the
# drop, the kernel logs in again and retries, and neither sees an error or wrong data.
t_drop() { # NAME DEV0 DEV1 (DEV1 holds the pattern)
    rm -f /tmp/stop /tmp/bad.*
    n0=$(conn_errors)
    (while [ ! -e /tmp/stop ]; do
        dd if=/tmp/pat of="$2" bs=256k count=64 oflag=direct 2>/tmp/w.err ||
            { cp /tmp/w.err /tmp/bad.write; break; }
    done) &
    wp=$!
    (while [ ! -e /tmp/stop ]; do
        got=$(dd if="$3" bs=256k count=64 iflag=direct 2>/tmp/r.err | sha256sum | cut -d' ' -f1)
        [ "$got" = "$PAT16" ] || { echo "read $got" | cat - /tmp/r.err >/tmp/bad.read; break; }
    done) &
    rp=$!
    sleep 2
    say "DROP"
    i=0
    while [ "$(conn_errors)" -eq "$n0" ] && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if [ "$(conn_errors)" -eq "$n0" ]; then
        touch /tmp/stop
        wait
        fail "$1: the connection was not dropped within 60 s of LTI DROP"
        return
    fi
    midio=yes
    kill -0 $wp 2>/dev/null && kill -0 $rp 2>/dev/null || midio=no
    i=0
    while [ "$(sess_state)" != LOGGED_IN ] && [ $i -lt 1200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    st=$(sess_state)
    sleep 3 # I/O goes on over the new connection
    touch /tmp/stop
    wait
    if [ "$st" != LOGGED_IN ]; then
        fail "$1: session is $st 120 s after the drop"
        return
    fi
    for b in /tmp/bad.*; do
        [ -e "$b" ] || continue
        tailof "$b"
        fail "$1: ${b#/tmp/bad.} failed across the drop"
        return
    done
    [ $midio = yes ] || { fail "$1: the I/O had stopped before the drop was seen"; return; }
    got=$(dd if="$2" bs=256k count=64 iflag=direct 2>/dev/null | sha256sum | cut -d' ' -f1)
    [ "$got" = "$PAT16" ] || { fail "$1: LUN 0 differs after the drop"; return; }
    # what the kernel said about the drop and the recovery, for the log
    dmesg | grep -E 'connection|session' | tail -n 6 | sed 's/^/    | /'
    pass "$1: target dropped the connection mid-I/O, session back, writer + reader saw no error"
}

# The same drop under fio: 16 4 KiB commands in flight at any time, so the kernel has a
# queue of them to retry on the new session, and every block written is read back.
t_drop_fio() { # NAME DEV
    n0=$(conn_errors)
    timeout 300 fio --name=lt --filename="$2" --direct=1 --ioengine=libaio --iodepth=16 \
        --rw=randrw --bs=4k --size=48M --verify=crc32c --verify_fatal=1 --do_verify=1 \
        >/tmp/fio.out 2>&1 &
    fp=$!
    sleep 2
    say "DROP"
    i=0
    while [ "$(conn_errors)" -eq "$n0" ] && [ $i -lt 600 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    midio=yes
    kill -0 $fp 2>/dev/null || midio=no
    wait $fp
    rc=$?
    if [ "$(conn_errors)" -eq "$n0" ]; then
        fail "$1: the connection was not dropped within 60 s of LTI DROP"
    elif [ $rc -ne 0 ] || ! grep -q 'err= 0' /tmp/fio.out; then
        tailof /tmp/fio.out 25
        fail "$1: fio failed across the drop (exit $rc)"
    elif [ $midio = no ]; then
        fail "$1: fio had finished before the drop was seen"
    else
        grep -E '^ +(read|write):' /tmp/fio.out | sed 's/^ */    | /'
        pass "$1: target dropped the connection under fio randrw iodepth 16, verify clean"
    fi
}

run_mode() { # None|CRC32C
    dg=$1
    m="digest=$dg"
    if iscsiadm -m discovery -t sendtargets -p "$PORTAL" >/tmp/disc.out 2>&1 &&
        grep -q ":$PORT,1 $IQN\$" /tmp/disc.out; then
        pass "$m: sendtargets discovery lists $IQN"
    else
        tailof /tmp/disc.out
        fail "$m: sendtargets discovery"
    fi
    # SendTargets answers with the target's own portal (127.0.0.1:PORT on the host), which the
    # guest reaches through the user-mode network's 10.0.2.2: log in there instead.
    iscsiadm -m node -o delete >/dev/null 2>&1
    iscsiadm -m node -o new -T "$IQN" -p "$PORTAL" >/dev/null 2>&1 || die "$m: iscsiadm -o new"
    for k in HeaderDigest DataDigest; do
        iscsiadm -m node -T "$IQN" -p "$PORTAL" -o update -n "node.conn[0].iscsi.$k" -v "$dg" ||
            die "$m: iscsiadm -o update $k"
    done
    if ! iscsiadm -m node -T "$IQN" -p "$PORTAL" --login >/tmp/login.out 2>&1; then
        tailof /tmp/login.out
        die "$m: login"
    fi
    iscsiadm -m session -P 2 >/tmp/sess.out 2>&1
    if grep -q "HeaderDigest: $dg" /tmp/sess.out && grep -q "DataDigest: $dg" /tmp/sess.out; then
        pass "$m: login, HeaderDigest and DataDigest $dg negotiated"
    else
        tailof /tmp/sess.out 40
        fail "$m: login did not negotiate digests $dg"
    fi
    d0=$(lun_dev 0) || die "$m: no disk for LUN 0"
    d1=$(lun_dev 1) || die "$m: no disk for LUN 1"
    # The user-mode network of a TCG guest on a busy host stalls for seconds: give commands
    # 120 s (not 30) before the SCSI layer aborts them, so a stall is not taken for a hang.
    for d in $d0 $d1; do echo 120 >"/sys/block/${d#/dev/}/device/timeout"; done
    t_dd "$m ram LUN 0" "$d0"
    t_dd "$m file LUN 1" "$d1"
    [ "$DROP" = 1 ] && t_drop "$m drop" "$d0" "$d1"
    [ "$DROP" = 1 ] && t_drop_fio "$m drop fio LUN 1" "$d1"
    t_fs "$m ram LUN 0" "$d0"
    t_fs "$m file LUN 1" "$d1"
    t_fio "$m ram LUN 0" "$d0"
    t_fio "$m file LUN 1" "$d1"
    if iscsiadm -m node -T "$IQN" -p "$PORTAL" --logout >/tmp/logout.out 2>&1 &&
        ! iscsiadm -m session >/dev/null 2>&1 && [ ! -e "$d0" ]; then
        pass "$m: logout, no session left, disks gone"
    else
        tailof /tmp/logout.out
        die "$m: logout"
    fi
    # no I/O error reached the block layer in this mode
    if dmesg | grep -E 'I/O error|critical (target|medium)|Buffer I/O' >/tmp/ioerr.out; then
        tailof /tmp/ioerr.out
        fail "$m: the kernel logged I/O errors"
    fi
    dmesg -c >/dev/null
}

# ---- CHAP (the second daemon), once, digests off ----
# iscsiadm's exit status when the target answers a login with 0201h (authentication failure)
EAUTH=24
CMB=4 # dd round trip per CHAP login
dd if=/tmp/pat of=/tmp/pat4 bs=1M count=$CMB 2>/dev/null
PAT4=$(sha256sum </tmp/pat4 | cut -d' ' -f1)

# cnode IQN [NAME=VALUE...]: a fresh node record for IQN at the CHAP portal with those settings
cnode() {
    t=$1
    shift
    iscsiadm -m node -T "$t" -p "$CPORTAL" -o delete >/dev/null 2>&1
    iscsiadm -m node -o new -T "$t" -p "$CPORTAL" >/tmp/node.out 2>&1 || return 1
    for kv in "$@"; do
        iscsiadm -m node -T "$t" -p "$CPORTAL" -o update -n "${kv%%=*}" -v "${kv#*=}" \
            >>/tmp/node.out 2>&1 || return 1
    done
}
clogin() { iscsiadm -m node -T "$1" -p "$CPORTAL" --login >/tmp/login.out 2>&1; }
clogout() {
    iscsiadm -m node -T "$1" -p "$CPORTAL" --logout >/tmp/logout.out 2>&1 &&
        ! iscsiadm -m session >/dev/null 2>&1
}
# c_ok NAME IQN USER [dd]: log in (node record set up by the caller), check the session is
# CHAP as USER, optionally a dd round trip on LUN 0, log out.
c_ok() {
    if ! clogin "$2"; then
        tailof /tmp/login.out
        fail "$1: login failed"
        return
    fi
    iscsiadm -m session -P 2 >/tmp/sess.out 2>&1
    if grep -q "username: $3\$" /tmp/sess.out; then
        pass "$1: login"
    else
        tailof /tmp/sess.out 40
        fail "$1: the session does not show CHAP user $3"
    fi
    if [ "${4:-}" = dd ]; then
        if d=$(lun_dev 0); then
            echo 120 >"/sys/block/${d#/dev/}/device/timeout"
            if dd if=/tmp/pat4 of="$d" bs=1M oflag=direct conv=fsync 2>/tmp/dd.err &&
                got=$(dd if="$d" bs=1M count=$CMB iflag=direct 2>>/tmp/dd.err |
                    sha256sum | cut -d' ' -f1) && [ "$got" = "$PAT4" ]; then
                pass "$1: dd $CMB MiB write + read, checksum equal"
            else
                tailof /tmp/dd.err
                fail "$1: dd round trip"
            fi
        else
            fail "$1: no disk for LUN 0"
        fi
    fi
    clogout "$2" || { tailof /tmp/logout.out; fail "$1: logout"; }
}
# c_refused NAME IQN: the login must fail with the authentication-failure status
c_refused() {
    clogin "$2"
    rc=$?
    if [ $rc -eq $EAUTH ]; then
        pass "$1: refused (iscsiadm exit $rc, authorization failure)"
    else
        tailof /tmp/login.out
        fail "$1: iscsiadm login exited $rc, not $EAUTH"
        iscsiadm -m session >/dev/null 2>&1 && clogout "$2"
    fi
}

run_chap() {
    m=chap
    T1=$IQN-oneway TM=$IQN-mutual T3=$IQN-sha3 T2=$IQN-sha256
    iscsiadm -m node -o delete >/dev/null 2>&1
    # SendTargets without credentials: the target wants discovery CHAP
    iscsiadm -m discovery -t sendtargets -p "$CPORTAL" >/tmp/disc.out 2>&1
    rc=$?
    if [ $rc -ne 0 ] && ! grep -q "$IQN" /tmp/disc.out; then
        pass "$m: sendtargets without credentials refused (iscsiadm exit $rc)"
    else
        tailof /tmp/disc.out
        fail "$m: sendtargets without credentials: exit $rc"
    fi
    # with discovery CHAP, mutual: lists the targets alice may use, not bob's
    iscsiadm -m discoverydb -t sendtargets -p "$CPORTAL" -o delete >/dev/null 2>&1
    iscsiadm -m discoverydb -t sendtargets -p "$CPORTAL" -o new >/tmp/disc.out 2>&1
    for kv in authmethod=CHAP username=alice "password=$S_ALICE" username_in=disco-t \
        "password_in=$S_DISC"; do
        iscsiadm -m discoverydb -t sendtargets -p "$CPORTAL" -o update \
            -n "discovery.sendtargets.auth.${kv%%=*}" -v "${kv#*=}" >>/tmp/disc.out 2>&1
    done
    if iscsiadm -m discoverydb -t sendtargets -p "$CPORTAL" --discover >/tmp/disc.out 2>&1 &&
        grep -q ":$CPORT,1 $T1\$" /tmp/disc.out && grep -q ":$CPORT,1 $T3\$" /tmp/disc.out &&
        grep -q ":$CPORT,1 $T2\$" /tmp/disc.out && ! grep -q "$TM" /tmp/disc.out; then
        pass "$m: sendtargets with mutual discovery CHAP lists alice's 3 targets, not bob's"
    else
        tailof /tmp/disc.out
        fail "$m: sendtargets with discovery CHAP"
    fi
    iscsiadm -m node -o delete >/dev/null 2>&1
    a=node.session.auth
    # failures alternate with successes: the target delays the answer to each failure in a
    # row from one address (1 s, 2 s, 4 s...), and a success starts that over
    cnode "$T1" $a.authmethod=CHAP $a.username=alice "$a.password=$S_ALICE" ||
        { tailof /tmp/node.out; die "$m: iscsiadm -o new/update"; }
    c_ok "$m one-way" "$T1" alice dd
    cnode "$T1" $a.authmethod=CHAP $a.username=alice $a.password=wrong-secret-0000
    c_refused "$m one-way, wrong secret" "$T1"
    cnode "$TM" $a.authmethod=CHAP $a.username=bob "$a.password=$S_BOB" \
        $a.username_in=tgt-bob "$a.password_in=$S_TGT"
    c_ok "$m mutual" "$TM" bob dd
    # the target's answer checked by the initiator: with the wrong secret for tgt-bob it
    # must not log in (the target, having authenticated bob, sees no failure)
    cnode "$TM" $a.authmethod=CHAP $a.username=bob "$a.password=$S_BOB" \
        $a.username_in=tgt-bob $a.password_in=wrong-secret-0000
    clogin "$TM"
    rc=$?
    if [ $rc -ne 0 ] && ! iscsiadm -m session >/dev/null 2>&1; then
        pass "$m mutual, wrong target secret: the initiator refused the target (exit $rc)"
    else
        tailof /tmp/login.out
        fail "$m mutual, wrong target secret: iscsiadm login exited $rc"
        clogout "$TM"
    fi
    cnode "$T1" $a.authmethod=CHAP $a.username=mallory "$a.password=$S_ALICE"
    c_refused "$m one-way, wrong user" "$T1"
    if ! iscsiadm -m node -T "$T1" -p "$CPORTAL" -o show | grep -q "^$a.chap_algs = "; then
        fail "$m: this open-iscsi has no $a.chap_algs"
    fi
    # a target allowing only SHA3-256 (only SHA-256): the login proves the digest was used
    cnode "$T3" $a.authmethod=CHAP $a.username=alice "$a.password=$S_ALICE" \
        $a.chap_algs=SHA3-256
    c_ok "$m SHA3-256 only" "$T3" alice
    cnode "$TM" $a.authmethod=CHAP $a.username=bob "$a.password=$S_BOB"
    c_refused "$m mutual target, no username_in/password_in" "$TM"
    cnode "$T2" $a.authmethod=CHAP $a.username=alice "$a.password=$S_ALICE" $a.chap_algs=SHA256
    c_ok "$m SHA256 only" "$T2" alice
    cnode "$T3" $a.authmethod=CHAP $a.username=alice "$a.password=$S_ALICE" $a.chap_algs=MD5
    c_refused "$m SHA3-256-only target, MD5 offered" "$T3"
    iscsiadm -m node -o delete >/dev/null 2>&1
    if dmesg | grep -E 'I/O error|critical (target|medium)|Buffer I/O' >/tmp/ioerr.out; then
        tailof /tmp/ioerr.out
        fail "$m: the kernel logged I/O errors"
    fi
}

# ---- host LUN maps (issue 29), once: target $IQN-hosts of the second daemon has an entry for
# this guest's initiator name mapping its LUN 2 (40 MiB) as 0 and its LUN 1 (24 MiB) as 3, and
# its LUN 0 (16 MiB) only for another host. The kernel's scan must find exactly those two
# disks, under those numbers, of those sizes.
run_hosts() {
    m=hosts
    TH=$IQN-hosts
    cnode "$TH" || { tailof /tmp/node.out; fail "$m: node record"; return; }
    if ! clogin "$TH"; then
        tailof /tmp/login.out
        fail "$m: login as $(sed -n 's/^InitiatorName=//p' /etc/iscsi/initiatorname.iscsi)"
        return
    fi
    pass "$m: login as this guest's entry"
    lun_dev 0 >/dev/null && lun_dev 3 >/dev/null || fail "$m: no disk for LUN 0 or 3"
    got=""
    for s in /sys/class/scsi_device/*; do
        l=${s##*:}
        b=""
        for d in "$s"/device/block/*; do [ -e "$d" ] && b=${d##*/}; done
        mb=x
        [ -n "$b" ] && mb=$(($(cat "/sys/block/$b/size") / 2048))
        got="$got $l:${mb}M"
    done
    if [ "$got" = " 0:40M 3:24M" ]; then
        pass "$m: the kernel sees its map only: LUN 0 (40 MiB) and LUN 3 (24 MiB)"
    else
        fail "$m: the kernel sees LUN:size '$got', want ' 0:40M 3:24M'"
    fi
    clogout "$TH" || { tailof /tmp/logout.out; fail "$m: logout"; }
    iscsiadm -m node -o delete >/dev/null 2>&1
}

run_mode None
run_mode CRC32C
run_chap
run_hosts
finish
