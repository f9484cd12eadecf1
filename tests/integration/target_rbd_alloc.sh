#!/bin/bash
# The allocation an rbd: LUN reports against the cluster's own view (issue 13), over
# scripts/ceph-mini's cluster; skips (77) without Ceph or librbd, never a mock.
# target_rbd_alloc.py: VPD B0h's OPTIMAL UNMAP GRANULARITY is the image's object size, READ
# CAPACITY(16) and VPD B2h say thin with LBPRZ; after writes of known extents the mapped
# ranges of GET LBA STATUS over the whole LUN are exactly the objects written and the same
# whole-object extents as `rbd diff --whole-object`, summing to `rbd du`'s used size; after
# UNMAP (and WRITE SAME with UNMAP) of whole objects both say deallocated and the blocks read
# zeros; UNMAP of part of an object zeroes it and both keep the object allocated.
. "$(dirname "$0")/lt_lib.sh"
need python3
start_ceph

iqn=iqn.2026-12.org.linerate:it-rbd-alloc
start_target --target-name "$iqn" --threads 2 --lun rbd:rbd/alloc-disk,size=64M
note "GET LBA STATUS against rbd diff and rbd du"
run_to 240 python3 "$IT_DIR/target_rbd_alloc.py" "$PORT" "$iqn" rbd/alloc-disk ||
    { show_cmd_out; fail "allocation of the rbd LUN"; }
sed 's/^/   /' "$WORK/cmd.out"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
echo PASS
