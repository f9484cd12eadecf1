#!/bin/bash
# The only OSD of scripts/ceph-mini's cluster stopped (SIGSTOP) under an rbd: LUN, never a
# mock; skips when Ceph or librbd is not installed (target_rbd_stall.py does the SCSI):
#   - rbd-timeout = 4 from the config file (the global key, not the LUN's timeout=: it must
#     reach the LUN's spec): READ, WRITE and SYNCHRONIZE CACHE end in ABORTED COMMAND /
#     TIMEOUT ON LOGICAL UNIT after the timeout, not a hang; after SIGCONT the same READ is
#     GOOD with the data;
#   - one reactor (threads = 1) serving the rbd LUN and a ram: LUN: while the rbd READ waits
#     for the stopped OSD, WRITE and READ of the RAM LUN from another session are each GOOD
#     within 1 s (issue 13: no reactor blocks on the cluster);
#   - SIGTERM afterwards exits 0, and the gateway was never blocklisted.
. "$(dirname "$0")/lt_lib.sh"
start_ceph

iqn=iqn.2026-11.org.linerate:it-rbd-stall
note "the OSD stopped (SIGSTOP) under rbd-timeout = 4, a RAM LUN on the same reactor"
cat >"$WORK/stall.conf" <<EOF
threads = 1
portal = 127.0.0.1:@PORT@
rbd-timeout = 4
[target $iqn]
lun = rbd:rbd/it-stall,size=16M
lun = ram:16M
EOF
start_target_config "$WORK/stall.conf"
osd_pid=$(cat "$CEPH_MINI_DIR"/run/osd.*.pid)
run_to 120 python3 "$IT_DIR/target_rbd_stall.py" "$PORT" "$iqn" "$osd_pid" 4 1 ||
    { kill -CONT "$osd_pid" 2>/dev/null; show_cmd_out; fail "OSD stall"; }
sed 's/^/   /' "$WORK/cmd.out"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
grep -q "blocklisted" "$WORK/target.log" && fail "the gateway says it was blocklisted"
echo PASS
