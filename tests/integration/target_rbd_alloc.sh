#!/bin/bash
# The allocation an rbd: LUN reports against the cluster's own view (issue 13), over
# scripts/ceph-mini's cluster; skips (77) without Ceph or librbd, never a mock.
# target_rbd_alloc.py: VPD B0h's OPTIMAL UNMAP GRANULARITY is the image's object size, READ
# CAPACITY(16) and VPD B2h say thin with LBPRZ; after writes of known extents the mapped
# ranges of GET LBA STATUS over the whole LUN are exactly the objects written and the same
# whole-object extents as `rbd diff --whole-object`, summing to `rbd du`'s used size; after
# UNMAP (and WRITE SAME with UNMAP) of whole objects both say deallocated and the blocks read
# zeros; UNMAP of part of an object zeroes it and both keep the object allocated. A striped
# image (stripe unit below the object size) gives the object set as the granularity.
. "$(dirname "$0")/lt_lib.sh"
need python3 iscsi-inq
start_ceph

iqn=iqn.2026-12.org.linerate:it-rbd-alloc
start_target --target-name "$iqn" --threads 2 --lun rbd:rbd/alloc-disk,size=64M
note "GET LBA STATUS against rbd diff and rbd du"
run_to 240 python3 "$IT_DIR/target_rbd_alloc.py" "$PORT" "$iqn" rbd/alloc-disk ||
    { show_cmd_out; fail "allocation of the rbd LUN"; }
sed 's/^/   /' "$WORK/cmd.out"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"

# Fancy striping: 64 KiB stripe units over 8 objects of 4 MiB. An object-size range then
# touches 8 objects and frees none; only a whole object set (32 MiB) gives objects back, and
# that is the granularity VPD B0h must give (65536 blocks of 512 bytes).
note "striped image: OPTIMAL UNMAP GRANULARITY is the object set"
rbd create --size 128M --object-size 4M --stripe-unit 64K --stripe-count 8 rbd/alloc-striped ||
    fail "rbd create of a striped image failed"
start_target --target-name "$iqn" --threads 1 --lun rbd:rbd/alloc-striped
run_to 60 iscsi-inq -e 1 -c 176 "iscsi://127.0.0.1:$PORT/$iqn/0" ||
    { show_cmd_out; fail "iscsi-inq VPD B0h (page 176) exited $?"; }
grep -qx "optimal unmap granularity:65536" "$WORK/cmd.out" ||
    { show_cmd_out; fail "striped image: granularity is not the 32 MiB object set"; }
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
echo PASS
