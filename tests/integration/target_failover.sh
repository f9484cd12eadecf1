#!/bin/bash
# Automatic failover between two rbd gateways (issue 30 item 2, docs/gateways.md "Failover"):
# two linerate daemons of one target with alua-mode = failover over one RBD image of
# scripts/ceph-mini's cluster; target_failover.py does the SCSI: a gateway killed with
# SIGKILL under FUA writes (the survivor fences it, takes over within the timeout, 2Ah/06h,
# RTPG, acknowledged writes read back, the blocklist holds the old address), failback by
# linerate-ctl, and a hung gateway (SIGSTOP) fenced, whose writes after SIGCONT never reach
# the image; then, on a second image, the gateway configured active/optimized down at start:
# the other one takes the role after the failover-timeout. Skipped (77) without Ceph or
# librbd. LT_FAILOVER_ROUNDS=N repeats the kill to measure the pause (median and worst
# printed). Before that, an image whose own configuration sets rbd_cache true must be refused
# at start (a cache would hide write errors), and a daemon stopped (SIGTERM) with a write
# stuck in librbd (the OSD SIGSTOPped) must exit 1 with its reason at once, not hang in its
# last flush nor abort. After it, target_ats.py: ESXi's ATS heartbeat (COMPARE AND WRITE every
# second from two lr_mpath hosts) through a cut path, kill -9, failback and SIGSTOP: no false
# miscompare, no long gap.
. "$(dirname "$0")/lt_lib.sh"
need python3
CTL=$(dirname "$LT")/linerate-ctl
[ -x "$CTL" ] || fail "$CTL is not built"
start_ceph
rbd create --size 64M rbd/it-fo || fail "rbd create rbd/it-fo failed"
note "an image whose own configuration turns librbd's cache on is refused (docs/rbd.md)"
rbd create --size 16M rbd/it-fo-cache || fail "rbd create rbd/it-fo-cache failed"
rbd config image set rbd/it-fo-cache rbd_cache true || fail "rbd config image set failed"
timeout 60 "$LT" --listen 127.0.0.1:1 --lun rbd:rbd/it-fo-cache >"$WORK/cache.out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "an image with rbd_cache on: exit $rc, not 2: $(tail -n 3 "$WORK/cache.out")"
grep -q "rbd_cache is true for this image" "$WORK/cache.out" ||
    fail "no reason given for refusing rbd_cache on: $(tail -n 3 "$WORK/cache.out")"
note "SIGTERM with a write stuck in librbd (the OSD stopped): exit 1 with a reason, not a crash"
# tests/ha/partition.sh found it with a gateway cut from the cluster: the connection outlives
# the shutdown's drain, and freeing its LUN and reactor under the store's pending completion
# aborted the daemon (scsi_lun_free's assertion). SIGSTOP of the only OSD holds the write the
# same way on loopback.
rbd create --size 16M rbd/it-fo-stuck || fail "rbd create rbd/it-fo-stuck failed"
start_target --target-name iqn.2026-11.org.linerate:stuck --lun rbd:rbd/it-fo-stuck
OSD_PID=$(cat "$CEPH_MINI_DIR/run/osd.0.pid") || fail "no OSD pid file"
kill -STOP "$OSD_PID"
python3 - "$PORT" "$IT_DIR" <<'PY' || { kill -CONT "$OSD_PID"; fail "the stuck write step failed"; }
import socket, struct, sys
sys.path.insert(0, sys.argv[2])
import hostile
hostile.TARGET = "iqn.2026-11.org.linerate:stuck"
s = hostile.Session(int(sys.argv[1])).login()
s.scsi_retry_ua(bytes(10))  # TEST UNIT READY: the power-on unit attention out of the way
try:
    st, _, _ = s.scsi(bytes([0x2A, 0x08, 0, 0, 0, 0, 0, 0, 1, 0]), write_data=b"s" * 512, timeout=2)
    sys.exit("the write through a stopped OSD was answered (status 0x%02x)" % st)
except (socket.timeout, TimeoutError):
    pass
s.c.close()  # the initiator gives up on it: the task is aborted, its write still in librbd
PY
sleep 0.5
stop_target
rc=$STOP_RC
kill -CONT "$OSD_PID"
[ "$rc" = 1 ] || fail "SIGTERM with a write stuck in the store: exit $rc, not 1: $(tail -n 3 "$WORK/target.log")"
grep -q "still had commands in a store" "$WORK/target.log" ||
    fail "no reason logged for the exit: $(tail -n 3 "$WORK/target.log")"
note "two gateways, alua-mode = failover, heartbeat 500ms, timeout 3s"
LT_FO_WORK=$WORK timeout 900 python3 "$IT_DIR/target_failover.py" "$LT" "$CTL" rbd/it-fo \
    "${LT_FAILOVER_ROUNDS:-1}" >"$WORK/fo.out" 2>&1 ||
    { cat "$WORK/fo.out" >&2; fail "target_failover.py failed"; }
cat "$WORK/fo.out"
note "ESXi's ATS heartbeat through the failovers (target_ats.py, issue 30 item 6)"
ATS=$(dirname "$LT")/tests/integration/ats_heartbeat
[ -x "$ATS" ] || fail "$ATS is not built"
for img in it-ats it-ats-fo; do
    rbd create --size 16M rbd/$img || fail "rbd create rbd/$img failed"
done
# under ASan (make asan-check sets ASAN_OPTIONS) the all-AO phase alone: the new lr_mpath code
phases=all
[ -n "${ASAN_OPTIONS:-}" ] && phases=ao
LT_ATS_PHASES=$phases LT_FO_WORK=$WORK timeout 600 python3 "$IT_DIR/target_ats.py" "$LT" "$CTL" \
    "$ATS" rbd/it-ats rbd/it-ats-fo >"$WORK/ats.out" 2>&1 ||
    { cat "$WORK/ats.out" >&2; fail "target_ats.py failed"; }
cat "$WORK/ats.out"
echo PASS
