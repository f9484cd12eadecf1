#!/bin/bash
# The Ceph monitor lost under an rbd: LUN doing I/O (issue 13, "a lost cluster connection is
# retried"), over scripts/ceph-mini's cluster; skips (77) without Ceph or librbd, never a mock.
# target_rbd_mon.py drives two sessions of stamped writes and read-backs while the only mon is
# SIGSTOPped, then SIGKILLed (I/O goes on GOOD: librbd talks to the OSD), a LUN added then
# fails after timeout= with a reason, the mon is started again from the same directory and
# port (the gateway's Ceph client rejoins it by itself, a LUN added now opens), and finally
# mon and OSD are both SIGSTOPped (commands end in the retryable TIMEOUT ON LOGICAL UNIT, I/O
# GOOD again after SIGCONT). Every read returns what was last written; the daemon is never
# restarted and exits 0 on SIGTERM. Then a daemon started while the mon is down fails after
# timeout= with the reason and exit 1 (not 2, a bad config: the systemd unit restarts on 1),
# and starts once the mon is back.
. "$(dirname "$0")/lt_lib.sh"
need python3
start_ceph

iqn=iqn.2026-12.org.linerate:it-rbd-mon
tmo=5
start_target --target-name "$iqn" --threads 2 --ctl-socket "$WORK/ctl.sock" \
    --lun "rbd:rbd/mon-disk,size=64M,timeout=$tmo"
addr=$(grep -o 'rbd:rbd/mon-disk: image id .*Ceph client .*' "$WORK/target.log" | tail -n 1 |
    awk '{ print $NF }')
[ -n "$addr" ] || fail "no Ceph client address in the log"

note "mon stopped, killed, started again; then the whole cluster stopped (timeout=$tmo)"
run_to 240 python3 "$IT_DIR/target_rbd_mon.py" "$PORT" "$iqn" "$CEPH_MINI" "$CEPH_MINI_DIR" \
    "$tmo" "$addr" "$(dirname "$LT")/linerate-ctl" "$WORK/ctl.sock" || {
    kill -CONT $(cat "$CEPH_MINI_DIR"/run/*.pid 2>/dev/null) 2>/dev/null
    show_cmd_out
    fail "mon loss under I/O"
}
sed 's/^/   /' "$WORK/cmd.out"
kill -0 "$LT_PID" 2>/dev/null || fail "linerate-target died"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
grep -q "blocklisted" "$WORK/target.log" && fail "the gateway says it was blocklisted"

note "a gateway started while the mon is down: exit 1 (restarted by systemd), not 2"
run_to 30 "$CEPH_MINI" stop-mon "$CEPH_MINI_DIR" || { show_cmd_out; fail "ceph-mini stop-mon"; }
t0=$SECONDS
"$LT" --listen 127.0.0.1:1 --target-name "$iqn" --lun "rbd:rbd/mon-disk,timeout=3" \
    >"$WORK/down.out" 2>&1
rc=$?
echo "   exit $rc after $((SECONDS - t0)) s: $(grep -o 'cannot open LUN.*' "$WORK/down.out")"
[ "$rc" = 1 ] || fail "start with the mon down: exit $rc, not 1: $(tail -n 3 "$WORK/down.out")"
grep -q "no monitor answered within 3 s" "$WORK/down.out" ||
    fail "start with the mon down: no reason: $(tail -n 3 "$WORK/down.out")"
run_to 60 "$CEPH_MINI" start-mon "$CEPH_MINI_DIR" || { show_cmd_out; fail "ceph-mini start-mon"; }
# what systemd's restart does: the same start, now with the cluster there
start_target --target-name "$iqn" --threads 2 --lun "rbd:rbd/mon-disk,timeout=$tmo"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
echo PASS
