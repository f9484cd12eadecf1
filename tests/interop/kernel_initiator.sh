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

command -v qemu-system-x86_64 >/dev/null 2>&1 ||
    skip "qemu-system-x86_64 is not installed: the kernel-initiator interop test needs it (scripts/install-deps test installs qemu-system-x86)"
need ss timeout

GUEST=${LINERATE_GUEST_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/linerate/interop-guest}
# Whole guest run, boot to poweroff: 2.5-4 minutes on 2 otherwise idle cores, but the
# user-mode network stalls for seconds at a time when the host is busy (the same with tgt as
# the target), and then the large dd round trips take several times longer.
QEMU_TIMEOUT_S=${QEMU_TIMEOUT_S:-900}
# A guest that does not reach its /init (bad image, kernel panic) is given up early.
BOOT_TIMEOUT_S=${BOOT_TIMEOUT_S:-180}
IQN=iqn.2026-11.org.linerate:interop
QPID=""
CPID=""

# INTEROP_LOGS=DIR keeps the guest console and the target's log there.
keep_logs() {
    [ -n "${INTEROP_LOGS:-}" ] || return 0
    mkdir -p "$INTEROP_LOGS" && cp "$WORK"/console.log "$WORK"/{target,chap}.log "$INTEROP_LOGS"/ 2>/dev/null
}
# TERM, not KILL: QPID is timeout(1), which passes TERM on to qemu but would leave it running
# if it were killed itself.
trap '[ -n "$QPID" ] && kill -TERM "$QPID" 2>/dev/null
[ -n "$CPID" ] && kill -KILL "$CPID" 2>/dev/null
keep_logs; it_cleanup' EXIT

note "guest image ($GUEST)"
"$HERE/build_guest.sh" "$GUEST" || fail "could not build the guest image (build_guest.sh)"

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
t0=$SECONDS
: >"$WORK/console.log"
# -cpu max: the SSE4.2 crc32 instruction for the kernel's crc32c-intel (digests, ext4).
# -nodefaults: no emulated disks or VGA, so the iSCSI disks are the guest's only ones.
timeout "$QEMU_TIMEOUT_S" qemu-system-x86_64 -nodefaults -machine pc -accel tcg -cpu max \
    -smp 2 -m 1024 -display none -no-reboot \
    -kernel "$GUEST/vmlinuz" -initrd "$GUEST/initrd.img" \
    -append "console=ttyS0 quiet loglevel=4 panic=-1 lt_port=$PORT lt_iqn=$IQN lt_drop=$drop $chap" \
    -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
    -serial "file:$WORK/console.log" >"$WORK/qemu.out" 2>&1 &
QPID=$!

# Follow the console: show the guest's verdicts as they come, and answer each "LTI DROP" by
# destroying the target's end of every connection on its port (the accepted sockets, whose
# local port is the target's; the listening socket is not established and stays).
shown=0
while kill -0 "$QPID" 2>/dev/null; do
    tr -d '\r' <"$WORK/console.log" | grep -a '^LTI ' >"$WORK/lti.txt"
    n=$(wc -l <"$WORK/lti.txt")
    if [ "$n" -eq 0 ] && [ $((SECONDS - t0)) -gt "$BOOT_TIMEOUT_S" ]; then
        kill -TERM "$QPID"
        wait "$QPID"
        QPID=""
        echo "--- guest console (last 40 lines):" >&2
        tr -d '\r' <"$WORK/console.log" | tail -n 40 >&2
        fail "the guest did not reach its /init in ${BOOT_TIMEOUT_S}s"
    fi
    if [ "$n" -gt "$shown" ]; then
        sed -n "$((shown + 1)),${n}p" "$WORK/lti.txt" | while IFS= read -r l; do
            echo "$l"
            if [ "$l" = "LTI DROP" ]; then
                ss -K -Htn state established "sport = :$PORT" >/dev/null ||
                    echo "ss -K failed" >&2
            fi
        done
        shown=$n
    fi
    sleep 0.2
done
wait "$QPID"
qrc=$?
QPID=""
tr -d '\r' <"$WORK/console.log" | grep -a '^LTI ' >"$WORK/lti.txt"
sed -n "$((shown + 1)),\$p" "$WORK/lti.txt"
note "guest ran $((SECONDS - t0)) s"

show_console() {
    echo "--- guest console (last 80 lines):" >&2
    tr -d '\r' <"$WORK/console.log" | tail -n 80 >&2
    [ -s "$WORK/qemu.out" ] && { echo "--- qemu:" >&2; cat "$WORK/qemu.out" >&2; }
    echo "--- the CHAP linerate-target's log (last 20 lines):" >&2
    tail -n 20 "$WORK/chap.log" >&2
}
[ "$qrc" -eq 124 ] && { show_console; fail "the guest did not finish in ${QEMU_TIMEOUT_S}s"; }
[ "$qrc" -eq 0 ] || { show_console; fail "qemu exited with $qrc"; }
done_line=$(grep '^LTI DONE' "$WORK/lti.txt")
[ -n "$done_line" ] || { show_console; fail "the guest stopped before LTI DONE"; }
if grep -q '^LTI FAIL' "$WORK/lti.txt" || ! grep -q 'fail=0$' <<<"$done_line"; then
    show_console
    fail "the kernel initiator reported failures"
fi
npass=$(grep -c '^LTI PASS' "$WORK/lti.txt")
# 2 modes x (discovery, login, 2 dd, 2 drops, 2 ext4, 2 fio, logout), the CHAP steps and the
# host map's (login, what the kernel sees)
nchap=13 nhosts=2
want=$((2 * (9 + 2 * drop) + nchap + nhosts))
[ "$npass" -eq "$want" ] || { show_console; fail "$npass steps passed, $want expected"; }

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
note "PASS: kernel initiator, $npass steps ($nchap of them CHAP)"
