#!/usr/bin/env bash
# Sourced by the host side of the interop tests (kernel_initiator.sh, kernel_multipath.sh),
# after ../integration/lt_lib.sh (note, fail, $WORK): builds the guest of build_guest.sh, boots
# it in qemu under TCG, follows its "LTI ..." lines on the serial console and judges its run.
# The caller defines show_console (what to print when the run failed) before guest_verdict.
# Sourcing it skips the test (exit 77) where qemu is missing.

command -v qemu-system-x86_64 >/dev/null 2>&1 ||
    skip "qemu-system-x86_64 is not installed (scripts/install-deps test installs qemu-system-x86)"

GUEST=${LINERATE_GUEST_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/linerate/interop-guest}
# Whole guest run, boot to poweroff: 2.5-5 minutes on 2 otherwise idle cores, but the
# user-mode network stalls for seconds at a time when the host is busy, and then the large
# I/O steps take several times longer.
QEMU_TIMEOUT_S=${QEMU_TIMEOUT_S:-900}
# A guest that does not reach its /init (bad image, kernel panic) is given up early.
BOOT_TIMEOUT_S=${BOOT_TIMEOUT_S:-180}
QPID=""

guest_image() {
    note "guest image ($GUEST)"
    "$HERE/build_guest.sh" "$GUEST" || fail "could not build the guest image (build_guest.sh)"
}

# guest_boot "KERNEL ARGS" [COMMAND...]: qemu in the background (QPID, timeout(1)'s pid), run
# through COMMAND when one is given (ha_run NODE: in a network namespace). -cpu max: the
# SSE4.2 crc32 instruction for the kernel's crc32c-intel (digests, ext4). -nodefaults: no
# emulated disks or VGA, so the iSCSI disks are the guest's only ones.
guest_boot() {
    local append=$1
    shift
    G_T0=$SECONDS
    : >"$WORK/console.log"
    "$@" timeout "$QEMU_TIMEOUT_S" qemu-system-x86_64 -nodefaults -machine pc -accel tcg -cpu max \
        -smp 2 -m 1024 -display none -no-reboot \
        -kernel "$GUEST/vmlinuz" -initrd "$GUEST/initrd.img" \
        -append "console=ttyS0 quiet loglevel=4 panic=-1 $append" \
        -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
        -serial "file:$WORK/console.log" >"$WORK/qemu.out" 2>&1 &
    QPID=$!
}

# TERM, not KILL: QPID is timeout(1), which passes TERM on to qemu but would leave it running
# if it were killed itself.
guest_stop() {
    [ -n "$QPID" ] && kill -TERM "$QPID" 2>/dev/null
    QPID=""
}

# guest_follow HANDLER: until qemu ends, show each new "LTI ..." line as it comes and call
# HANDLER LINE on it, in this shell (a handler may start and stop daemons). Leaves $WORK/lti.txt
# with every line and G_QRC with timeout(1)'s status.
guest_follow() {
    local n l shown=0
    while kill -0 "$QPID" 2>/dev/null; do
        tr -d '\r' <"$WORK/console.log" | grep -a '^LTI ' >"$WORK/lti.txt"
        n=$(wc -l <"$WORK/lti.txt")
        if [ "$n" -eq 0 ] && [ $((SECONDS - G_T0)) -gt "$BOOT_TIMEOUT_S" ]; then
            kill -TERM "$QPID"
            wait "$QPID"
            QPID=""
            echo "--- guest console (last 40 lines):" >&2
            tr -d '\r' <"$WORK/console.log" | tail -n 40 >&2
            fail "the guest did not reach its /init in ${BOOT_TIMEOUT_S}s"
        fi
        if [ "$n" -gt "$shown" ]; then
            while IFS= read -r l; do
                echo "$l"
                "$1" "$l" </dev/null # the handler does not read the lines meant for this loop
            done < <(sed -n "$((shown + 1)),${n}p" "$WORK/lti.txt")
            shown=$n
        fi
        sleep 0.2
    done
    wait "$QPID"
    G_QRC=$?
    QPID=""
    tr -d '\r' <"$WORK/console.log" | grep -a '^LTI ' >"$WORK/lti.txt"
    sed -n "$((shown + 1)),\$p" "$WORK/lti.txt"
    note "guest ran $((SECONDS - G_T0)) s"
}

# guest_verdict WANT WHAT: the guest finished in time, said DONE with no failure and passed
# WANT steps; WHAT names the run in the failure. Leaves the count in G_NPASS.
guest_verdict() {
    local done_line
    [ "$G_QRC" -eq 124 ] && { show_console; fail "the guest did not finish in ${QEMU_TIMEOUT_S}s"; }
    [ "$G_QRC" -eq 0 ] || { show_console; fail "qemu exited with $G_QRC"; }
    done_line=$(grep '^LTI DONE' "$WORK/lti.txt")
    [ -n "$done_line" ] || { show_console; fail "the guest stopped before LTI DONE"; }
    if grep -q '^LTI FAIL' "$WORK/lti.txt" || ! grep -q 'fail=0$' <<<"$done_line"; then
        show_console
        fail "$2 reported failures"
    fi
    G_NPASS=$(grep -c '^LTI PASS' "$WORK/lti.txt")
    [ "$G_NPASS" -eq "$1" ] || { show_console; fail "$G_NPASS steps passed, $1 expected"; }
}
