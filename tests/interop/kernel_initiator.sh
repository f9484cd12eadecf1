#!/usr/bin/env bash
# The Linux kernel initiator (open-iscsi + iscsi_tcp) against linerate-target: the host cannot
# load modules and has no KVM, so Debian 12's kernel runs in qemu under TCG with an initramfs
# from build_guest.sh (cached in ~/.cache/linerate/interop-guest, or $LINERATE_GUEST_DIR).
# linerate-target serves a RAM LUN 0 and a file LUN 1 on a free loopback port; the guest
# reaches it through the user-mode network as 10.0.2.2 and runs guest_init.sh's steps, digests
# off and on, printing "LTI PASS/FAIL" on the serial console. On "LTI DROP" this script
# destroys the target's side of the connections (ss -K), the drop the kernel must recover from.
# A second linerate-target on another port serves CHAP-protected targets (one-way, mutual, one
# allowing only SHA3-256 and one only SHA-256) behind mutual discovery CHAP; the guest then
# logs in to them once (digests off) with iscsiadm's node.session.auth.* and
# discovery.sendtargets.auth.*, and is refused with a wrong secret, a wrong user and without
# the mutual pair (and refuses the target itself when its mutual secret is wrong). The secrets are made up for each run and reach the guest on its command line.
# That daemon also serves a target with host entries (issue 29): the guest logs in as its
# entry and must see only the two LUNs mapped for it, under their numbers and sizes.
# Exit 77 (meson SKIP) when qemu-system-x86_64 is missing.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../integration/lt_lib.sh"
. "$HERE/interop_lib.sh"

need ss timeout

IQN=iqn.2026-11.org.linerate:interop
CPID=""

# INTEROP_LOGS=DIR keeps the guest console and the target's log there.
keep_logs() {
    [ -n "${INTEROP_LOGS:-}" ] || return 0
    mkdir -p "$INTEROP_LOGS" && cp "$WORK"/console.log "$WORK"/{target,chap}.log "$INTEROP_LOGS"/ 2>/dev/null
}
trap 'guest_stop
[ -n "$CPID" ] && kill -KILL "$CPID" 2>/dev/null
keep_logs; it_cleanup' EXIT

guest_image

# ss -K needs CONFIG_INET_DIAG_DESTROY; without it the drop step is left out, and said so.
drop=1
if ! ss -K -Htn "sport = :1" >/dev/null 2>&1; then
    echo "SKIP (part): ss -K not supported here, no connection drop" >&2
    drop=0
fi

# The CHAP daemon: users alice (one-way, and discovery), bob (mutual, the target answering as
# tgt-bob), the target answering discovery as disco-t. Its log goes to chap.log.
secret() { tr -dc A-Za-z0-9 </dev/urandom | head -c 20; }
S_ALICE=$(secret) S_BOB=$(secret) S_TGT=$(secret) S_DISC=$(secret)
(umask 077 && printf '%s\n' "alice $S_ALICE" "bob $S_BOB" "tgt-bob $S_TGT" \
    "disco-t $S_DISC" >"$WORK/chap-secrets")
cat >"$WORK/chap.conf" <<EOF
portal = 127.0.0.1:@PORT@
chap-secrets = $WORK/chap-secrets
discovery-chap-user = alice
discovery-chap-mutual-user = disco-t
[target $IQN-oneway]
lun = ram:16M
chap-user = alice
[target $IQN-mutual]
lun = ram:16M
chap-user = bob
chap-mutual-user = tgt-bob
[target $IQN-sha3]
lun = ram:16M
chap-user = alice
chap-algorithms = sha3-256
[target $IQN-sha256]
lun = ram:16M
chap-user = alice
chap-algorithms = sha256
[target $IQN-hosts]
lun = ram:16M
lun = ram:24M
lun = ram:40M
[host iqn.2026-11.org.linerate:interop-guest]
map = 0 2
map = 3 1
[host iqn.2026-11.org.linerate:interop-other]
map = 0 0
EOF
start_target_config "$WORK/chap.conf"
# shellcheck disable=SC2153 # PORT is set by start_target_config
CPORT=$PORT CPID=$LT_PID
LT_PID=""
mv "$WORK/target.log" "$WORK/chap.log" # the daemon keeps writing to it under the new name

start_target --target-name "$IQN" --lun ram:128M --lun "file:$WORK/lun1.img,size=128M"
note "linerate-target on 127.0.0.1:$PORT, the CHAP one on 127.0.0.1:$CPORT; booting the guest"

chap="lt_cport=$CPORT lt_sa=$S_ALICE lt_sb=$S_BOB lt_st=$S_TGT lt_sd=$S_DISC"
guest_boot "lt_port=$PORT lt_iqn=$IQN lt_drop=$drop $chap"

# Answer each "LTI DROP" by destroying the target's end of every connection on its port (the
# accepted sockets, whose local port is the target's; the listening socket is not established
# and stays).
on_line() {
    if [ "$1" = "LTI DROP" ]; then
        ss -K -Htn state established "sport = :$PORT" >/dev/null || echo "ss -K failed" >&2
    fi
}
guest_follow on_line

show_console() {
    echo "--- guest console (last 80 lines):" >&2
    tr -d '\r' <"$WORK/console.log" | tail -n 80 >&2
    [ -s "$WORK/qemu.out" ] && { echo "--- qemu:" >&2; cat "$WORK/qemu.out" >&2; }
    echo "--- the CHAP linerate-target's log (last 20 lines):" >&2
    tail -n 20 "$WORK/chap.log" >&2
}
# 2 modes x (discovery, login, 2 dd, 2 drops, 2 ext4, 2 fio, logout), the CHAP steps and the
# host map's (login, what the kernel sees)
nchap=13 nhosts=2
guest_verdict $((2 * (9 + 2 * drop) + nchap + nhosts)) "the kernel initiator"

stop_target
[ "$STOP_RC" -eq 0 ] || fail "linerate-target exited with $STOP_RC after SIGTERM"

# The CHAP daemon refused each bad login for the reason the guest meant, and logged no secret.
for why in "wrong CHAP_R (wrong secret)" "CHAP_N is not the configured user" \
    "mutual CHAP is configured and the initiator did not challenge us" \
    "no CHAP_A algorithm both sides allow"; do
    grep -qF "$why" "$WORK/chap.log" ||
        { tail -n 30 "$WORK/chap.log" >&2; fail "the CHAP target did not log '$why'"; }
done
for s in "$S_ALICE" "$S_BOB" "$S_TGT" "$S_DISC"; do
    grep -qF "$s" "$WORK/chap.log" "$WORK/target.log" && fail "a CHAP secret reached a target's log"
done
LT_PID=$CPID CPID=""
mv "$WORK/target.log" "$WORK/main.log" && mv "$WORK/chap.log" "$WORK/target.log" # fail shows it
stop_target
[ "$STOP_RC" -eq 0 ] || fail "the CHAP linerate-target exited with $STOP_RC after SIGTERM"
note "PASS: kernel initiator, $G_NPASS steps ($nchap of them CHAP)"
