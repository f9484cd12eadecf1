#!/bin/sh
# Sourced by the interop guest's scripts (guest_init.sh as /init, guest_mpath.sh as /mpath.sh;
# build_guest.sh installs this file as /lib/lti.sh): the verdict lines the host reads on the
# serial console ("LTI PASS name", "LTI FAIL name: why", "LTI DONE pass=N fail=M") and the
# boot steps both share: the initiator's modules, the user-mode network, open-iscsi's files.
# busybox sh: POSIX only.

npass=0
nfail=0
T0=$(cut -d. -f1 /proc/uptime)
say() { echo "LTI $*"; }
# the guest's seconds since the previous verdict: where the time goes under TCG
lap() {
    t=$(cut -d. -f1 /proc/uptime)
    LAP="[$((t - T0)) s]"
    T0=$t
}
pass() { lap; say "PASS $* $LAP"; npass=$((npass + 1)); }
fail() { lap; say "FAIL $* $LAP"; nfail=$((nfail + 1)); }
guest_dmesg() {
    echo "--- guest dmesg (last 60 lines)"
    dmesg | tail -n 60
}
# what a failed run shows before its DONE line; a script with more to show defines its own
# guest_report after sourcing this file
guest_report() { guest_dmesg; }
finish() {
    [ "$nfail" -eq 0 ] || guest_report
    say "DONE pass=$npass fail=$nfail"
    sync
    poweroff -f
    sleep 60
}
die() { fail "$*"; finish; }
# show the last lines of what a failed step printed
tailof() { tail -n "${2:-15}" "$1" | sed 's/^/    | /'; }

HOST=10.0.2.2

# guest_arg KEY: the value of KEY= on the kernel command line, empty when it is not there
guest_arg() {
    for w in $(cat /proc/cmdline); do
        case $w in "$1="*) echo "${w#"$1"=}" && return ;; esac
    done
}

# guest_modules LIST...: insmod the modules the files /lib/modules/LIST name, in order
guest_modules() {
    for m in $(for l in "$@"; do cat "/lib/modules/$l"; done); do
        if ! insmod "/lib/modules/$m" 2>/tmp/insmod.err; then
            # the SSE4.2 CRC32C is only a faster provider; crc32c_generic is the one relied on
            case $m in crc32c-intel.ko) ;; *) tailof /tmp/insmod.err; die "boot: insmod $m" ;; esac
        fi
    done
}

# qemu's user-mode network: the guest is 10.0.2.15, the host's loopback 10.0.2.2
guest_net() {
    ip link set lo up
    ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via "$HOST" ||
        die "boot: network"
}

# guest_iscsi NAME REPLACEMENT_S NOOP_INTERVAL_S NOOP_TIMEOUT_S: open-iscsi's files for the
# initiator iqn.2026-11.org.linerate:NAME with those timeouts (the rest the same for every run)
guest_iscsi() {
    mkdir -p /etc/iscsi /run/lock/iscsi /var/lock /var/lib/iscsi
    # iscsid serves only iscsiadm processes whose peer uid getpwuid() names "root"
    echo "root:x:0:0:root:/:/bin/sh" >/etc/passwd
    echo "root:x:0:" >/etc/group
    echo "InitiatorName=iqn.2026-11.org.linerate:$1" >/etc/iscsi/initiatorname.iscsi
    cat >/etc/iscsi/iscsid.conf <<CONF
node.startup = manual
node.session.timeo.replacement_timeout = $2
node.conn[0].timeo.login_timeout = 15
node.conn[0].timeo.logout_timeout = 15
node.conn[0].timeo.noop_out_interval = $3
node.conn[0].timeo.noop_out_timeout = $4
node.session.err_timeo.abort_timeout = 15
node.session.err_timeo.lu_reset_timeout = 30
node.session.initial_login_retry_max = 4
node.conn[0].iscsi.HeaderDigest = None
node.conn[0].iscsi.DataDigest = None
CONF
}

guest_iscsid() {
    iscsid || die "boot: iscsid did not start"
    sleep 1
}
