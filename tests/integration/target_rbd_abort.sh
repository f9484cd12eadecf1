#!/bin/bash
# No aborted write lands after its abort was answered, on an rbd LUN: target_abort_lands.py's
# rounds (ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET, PREEMPT AND ABORT, a
# connection reset, a session reinstatement) against an image of scripts/ceph-mini's cluster,
# the aborted 256 KiB writes held in librbd's path by --inject store-delay. Skipped (77)
# without Ceph or librbd; never a mock.
. "$(dirname "$0")/lt_lib.sh"
need python3
start_ceph
trap it_cleanup EXIT

note "aborts against rbd/abort-disk"
python3 "$IT_DIR/target_abort_lands.py" "$LT" "rbd:rbd/abort-disk,size=64M" >"$WORK/abort.out" 2>&1 ||
    { cat "$WORK/abort.out" >&2; fail "target_abort_lands.py on rbd"; }
cat "$WORK/abort.out"
echo "PASS: target_rbd_abort"
