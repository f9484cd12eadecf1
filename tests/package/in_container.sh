#!/bin/sh
# Runs inside the systemd-nspawn container that package.sh boots (systemd is PID 1 there), as
# a oneshot unit once the system is up: installs the .deb the way an operator does, then
# checks what the operator would check. Every line goes to /lt-out/log; /lt-out/result gets
# PASS only if every step held. Powers the container off at the end either way.
# Usage (by lt-pkgcheck.service): in_container.sh /lt/linerate.deb
deb=$1
exec >/lt-out/log 2>&1
iqn=iqn.2026-11.org.linerate:default
finish() {
    echo "$1" >/lt-out/result
    systemctl --no-block poweroff
    exit 0
}
fail() {
    echo "FAIL: $*"
    systemctl --no-pager status linerate-target 2>&1 | head -n 30
    journalctl --no-pager -u linerate-target 2>&1 | tail -n 30
    finish "FAIL: $*"
}
ok() { echo "ok: $*"; }

[ "$(cat /proc/1/comm)" = systemd ] || fail "PID 1 is $(cat /proc/1/comm), not systemd"
ok "PID 1 is systemd $(systemctl --version | head -n 1 | cut -d' ' -f2)"

# Debian's way: the postinst enables and starts the unit (deb-systemd-invoke).
dpkg -i "$deb" || fail "dpkg -i $deb"
systemctl is-enabled --quiet linerate-target || fail "the unit is not enabled after dpkg -i"
systemctl is-active --quiet linerate-target || fail "the service is not active after dpkg -i"
ok "dpkg -i installed, enabled and started linerate-target.service"

# Type=notify: systemd saw READY=1 (else the start job would not have finished) and the
# daemon's STATUS= text.
[ "$(systemctl show -P Type linerate-target)" = notify ] || fail "the unit is not Type=notify"
status=$(systemctl show -P StatusText linerate-target)
[ -n "$status" ] || fail "no STATUS= text from the daemon"
ok "Type=notify, status: $status"

# The hardened service still serves: the control socket in RuntimeDirectory answers, and a
# real initiator reaches the LUN on the default portal.
[ "$(stat -c %a /run/linerate/ctl.sock)" = 600 ] || fail "ctl.sock mode $(stat -c %a /run/linerate/ctl.sock)"
linerate-ctl show targets | grep -q "$iqn" || fail "linerate-ctl show targets does not list $iqn"
ok "linerate-ctl show targets lists $iqn (ctl.sock mode 0600)"
if command -v iscsi-inq >/dev/null 2>&1; then
    iscsi-inq "iscsi://127.0.0.1:3260/$iqn/0" | grep -q "Peripheral Device Type:DIRECT_ACCESS" ||
        fail "iscsi-inq through the default portal"
    ok "iscsi-inq reads the LUN through 127.0.0.1:3260"
fi

# ExecReload= is linerate-ctl reload: the same process keeps running.
pid=$(systemctl show -P MainPID linerate-target)
systemctl reload linerate-target || fail "systemctl reload"
systemctl is-active --quiet linerate-target || fail "not active after reload"
[ "$(systemctl show -P MainPID linerate-target)" = "$pid" ] || fail "reload restarted the process"
ok "systemctl reload: still active, same PID $pid"

# The log reaches the journal in key=value form.
journalctl --no-pager -u linerate-target | grep -q "listening" ||
    fail "no listening line in the journal"
ok "the journal has the daemon's lines"

systemctl stop linerate-target || fail "systemctl stop"
systemctl is-active --quiet linerate-target && fail "still active after stop"
[ "$(systemctl show -P Result linerate-target)" = success ] ||
    fail "stop result $(systemctl show -P Result linerate-target)"
ok "systemctl stop: stopped cleanly (Result=success)"

systemctl start linerate-target || fail "systemctl start"
dpkg --purge linerate || fail "dpkg --purge"
systemctl is-active --quiet linerate-target && fail "still active after purge"
[ ! -e /etc/linerate/linerate.conf ] || fail "the conffile survived purge"
ok "dpkg --purge stopped the service and removed the conffile"
finish PASS
