#!/bin/bash
# rbd: LUNs over a real single-node Ceph cluster (scripts/ceph-mini: one mon, one mgr, one
# memstore OSD on loopback), never a mock; skips when Ceph or librbd is not installed.
#   - the image is created by size=, its size is the LUN's, and a read-only rbd LUN of the same
#     image (opened read-only) reads the data and refuses a qemu-img write; both have the same
#     NAA designator (VPD 0x83, from the image id), a LUN of another image another one;
#     VPD 0xB0 says MAXIMUM COMPARE AND WRITE LENGTH 1 (what librbd 16 compares atomically),
#     0 on a 4 KiB-block LUN, and the gateway keeps to it: one block is compared and written
#     by the cluster, longer ones and any on the 4 KiB LUN are refused (target_rbd_caw.py);
#   - qemu-img convert round trip of a random 64 MiB image, compared byte for byte, and the
#     same bytes read with `rbd export` straight from the cluster (the data is in Ceph, not in
#     the gateway);
#   - restart: the image keeps the data when the gateway stops (SIGTERM, exit 0) and opens it
#     again;
#   - linerate-bench --verify (stamped blocks written and read back over 2 connections), and
#     a short 4k random write/read run through the asynchronous path with queue depth 32;
#   - linerate-ctl resize grows the image (rbd_resize, on the control thread) and takes an
#     image already grown by `rbd resize`; READ CAPACITY says so; an rbd LUN is added and
#     removed live; the data is unchanged;
#   - `rbd resize` behind the gateway's back (grow, then shrink): librbd's update watch tells
#     it, every nexus gets CAPACITY DATA HAS CHANGED and READ CAPACITY the new size
#     (target_rbd_resize.py; iscsi-readcapacity16 from a new session agrees);
#   - bad specs are refused at start with a reason (missing pool, malformed spec);
#   - a LUN with conf=PATH,id=admin and no CEPH_CONF in the environment reads the image;
#   - (the OSD stopped under a LUN: target_rbd_stall.sh, test target-rbd-stall);
#   - the gateway's Ceph client blocklisted (ceph osd blocklist add, its address from the
#     log): every command then ends in NOT READY / MANUAL INTERVENTION REQUIRED, at once after
#     the first, the log says the LUN was given up, and SIGTERM exits 1 (the LUN could not be
#     flushed) without hanging (target_rbd_fence.py).
. "$(dirname "$0")/lt_lib.sh"
need qemu-img cmp sha256sum
qemu-img --help 2>/dev/null | grep -qw iscsi ||
    skip "qemu-img has no iscsi driver (apt-get install qemu-block-extra)"
BENCH=${LINERATE_BENCH:-$(dirname "$LT")/linerate-bench}
[ -x "$BENCH" ] || fail "$BENCH is not built"
start_ceph

iqn=iqn.2026-11.org.linerate:it-rbd
img=$WORK/random.img
head -c 64M /dev/urandom >"$img"

note "spec errors are refused at start"
"$LT" --listen 127.0.0.1:1 --lun rbd:nopool-$$/x,size=1M >"$WORK/bad.out" 2>&1 &&
    fail "a missing pool was accepted"
grep -q "opening the pool" "$WORK/bad.out" || fail "no reason for the missing pool: $(cat "$WORK/bad.out")"
"$LT" --listen 127.0.0.1:1 --lun rbd:justapool >"$WORK/bad.out" 2>&1 && fail "rbd:POOL accepted"
grep -q "expected rbd:POOL/IMAGE" "$WORK/bad.out" || fail "no reason for rbd:POOL: $(cat "$WORK/bad.out")"
# a config with no monitor in it (librados answers ENOENT, as for a missing key)
env -u CEPH_CONF "$LT" --listen 127.0.0.1:1 --lun rbd:rbd/x,conf=/dev/null >"$WORK/bad.out" 2>&1 &&
    fail "a conf= without monitors was accepted"
grep -q "no monitor address (mon_host)" "$WORK/bad.out" ||
    fail "no reason for a conf= without monitors: $(cat "$WORK/bad.out")"

start_target --target-name "$iqn" --threads 2 --lun rbd:rbd/it-disk,size=64M \
    --lun rbd:rbd/it-disk,ro --lun rbd:rbd/it-other,size=8M,bs=4096
grep -q "rbd:rbd/it-disk: created" "$WORK/target.log" || fail "size= did not create the image"
rbd info rbd/it-disk >"$WORK/info" 2>&1 || fail "rbd info: $(cat "$WORK/info")"
grep -q "size 64 MiB" "$WORK/info" || fail "image size is not 64 MiB: $(cat "$WORK/info")"
url=iscsi://127.0.0.1:$PORT/$iqn/0

note "NAA designator from the image id: one per image, whichever LUN opens it"
naa() { # LUN: the NAA designator of VPD 0x83 in hex (iscsi-inq -c takes a decimal page)
    run_to 30 iscsi-inq -e 1 -c 131 "iscsi://127.0.0.1:$PORT/$iqn/$1" ||
        { show_cmd_out; fail "iscsi-inq VPD 0x83 of LUN $1"; }
    # the designator is printed raw (it may hold a newline byte): its lines up to the next one
    sed -n '/Designator Type:(3) NAA/,/^DEVICE DESIGNATOR/p' "$WORK/cmd.out" |
        grep -v '^DEVICE DESIGNATOR' | od -An -tx1 | tr -d ' \n'
}
naa0=$(naa 0) naa1=$(naa 1) naa2=$(naa 2)
[ -n "$naa0" ] || fail "no NAA designator in VPD 0x83 of LUN 0"
[ "$naa0" = "$naa1" ] || fail "LUNs 0 and 1 of one image have different NAA designators"
[ "$naa0" != "$naa2" ] || fail "LUNs of two images have the same NAA designator"

note "MAXIMUM COMPARE AND WRITE LENGTH is what the cluster does atomically: 1 block, 0 at 4 KiB"
max_caw() { # LUN: VPD 0xB0's MAXIMUM COMPARE AND WRITE LENGTH
    run_to 30 iscsi-inq -e 1 -c 176 "iscsi://127.0.0.1:$PORT/$iqn/$1" ||
        { show_cmd_out; fail "iscsi-inq VPD 0xB0 of LUN $1"; }
    sed -n 's/^maximum compare and write length://p' "$WORK/cmd.out"
}
caw0=$(max_caw 0) caw2=$(max_caw 2)
[ "$caw0" = 1 ] || fail "512-byte rbd LUN: MAXIMUM COMPARE AND WRITE LENGTH '$caw0', not 1"
[ "$caw2" = 0 ] || fail "4 KiB rbd LUN: MAXIMUM COMPARE AND WRITE LENGTH '$caw2', not 0"
run_to 60 python3 "$IT_DIR/target_rbd_caw.py" "$PORT" "$iqn" ||
    { show_cmd_out; fail "COMPARE AND WRITE on rbd"; }
sed 's/^/   /' "$WORK/cmd.out"

note "qemu-img convert round trip, 64 MiB"
run_to 300 qemu-img convert -n -f raw -O raw "$img" "$url" || { show_cmd_out; fail "write"; }
run_to 300 qemu-img convert -f raw -O raw "$url" "$WORK/back.img" || { show_cmd_out; fail "read"; }
want=$(sha256sum <"$img" | cut -d' ' -f1)
[ "$(sha256sum <"$WORK/back.img" | cut -d' ' -f1)" = "$want" ] || fail "data read back differs"
run_to 120 rbd export rbd/it-disk "$WORK/export.img" || { show_cmd_out; fail "rbd export"; }
[ "$(sha256sum <"$WORK/export.img" | cut -d' ' -f1)" = "$want" ] ||
    fail "the image in the cluster differs from what was written"

note "read-only LUN of the same image: reads the data, refuses writes"
run_to 120 qemu-img convert -f raw -O raw "iscsi://127.0.0.1:$PORT/$iqn/1" "$WORK/ro.img" ||
    { show_cmd_out; fail "read from the read-only LUN"; }
[ "$(sha256sum <"$WORK/ro.img" | cut -d' ' -f1)" = "$want" ] || fail "read-only LUN reads other data"
if run_to 60 qemu-img convert -n -f raw -O raw "$img" "iscsi://127.0.0.1:$PORT/$iqn/1"; then
    fail "a write to the read-only rbd LUN succeeded"
fi

note "restart: the data stays in the cluster"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
start_target --target-name "$iqn" --threads 2 --lun rbd:rbd/it-disk --ctl-socket "$WORK/ctl.sock"
url=iscsi://127.0.0.1:$PORT/$iqn/0
rm -f "$WORK/back.img"
run_to 300 qemu-img convert -f raw -O raw "$url" "$WORK/back.img" || { show_cmd_out; fail "read"; }
[ "$(sha256sum <"$WORK/back.img" | cut -d' ' -f1)" = "$want" ] || fail "data differs after restart"

note "linerate-bench --verify over 2 connections"
run_to 300 "$BENCH" --verify --sizes 4k,64k --rw randread --connections 2 --seconds 0.5 \
    --format csv "$url" || { show_cmd_out; fail "verify failed"; }
grep -q "verify passed" "$WORK/cmd.out" || { show_cmd_out; fail "no verify verdict"; }

note "4k random write and read at queue depth 32"
run_to 120 "$BENCH" --sizes 4k --rw randwrite,randread --qd 32 --seconds 2 --format csv "$url" ||
    { show_cmd_out; fail "bench failed"; }
grep "randwrite\|randread" "$WORK/cmd.out" | sed "s/^/   /"

note "linerate-ctl: grow the image (rbd_resize on the control thread), take one grown by rbd resize, add and remove an rbd LUN live"
ctl() { run_to 120 "$(dirname "$LT")/linerate-ctl" --socket "$WORK/ctl.sock" "$@" || { show_cmd_out; fail "linerate-ctl $*"; }; }
capacity() { # URL: bytes, from READ CAPACITY(16)
    run_to 30 iscsi-readcapacity16 -s "$1" || { show_cmd_out; fail "iscsi-readcapacity16 $1"; }
    tail -n 1 "$WORK/cmd.out"
}
rm -f "$WORK/pre.img"
run_to 300 qemu-img convert -f raw -O raw "$url" "$WORK/pre.img" || { show_cmd_out; fail "read"; }
pre=$(sha256sum <"$WORK/pre.img" | cut -d' ' -f1)
ctl resize lun "$iqn" 0 96M
rbd info rbd/it-disk 2>/dev/null | grep -q "size 96 MiB" || fail "the image was not resized to 96 MiB"
[ "$(capacity "$url")" = 100663296 ] || fail "READ CAPACITY after resize: $(cat "$WORK/cmd.out")"
run_to 60 rbd resize --size 128M rbd/it-disk || { show_cmd_out; fail "rbd resize"; }
ctl resize lun "$iqn" 0 128M
[ "$(capacity "$url")" = 134217728 ] || fail "READ CAPACITY after rbd resize: $(cat "$WORK/cmd.out")"
ctl add lun "$iqn" rbd:rbd/it-live,size=8M
[ "$(capacity "iscsi://127.0.0.1:$PORT/$iqn/1")" = 8388608 ] || fail "live rbd LUN: $(cat "$WORK/cmd.out")"
ctl remove lun "$iqn" 1
rm -f "$WORK/back.img"
run_to 300 qemu-img convert -f raw -O raw "$url" "$WORK/back.img" || { show_cmd_out; fail "read"; }
[ "$(head -c 64M "$WORK/back.img" | sha256sum | cut -d' ' -f1)" = "$pre" ] ||
    fail "data differs after the resizes"
[ "$(tail -c +67108865 "$WORK/back.img" | tr -d '\0' | wc -c)" = 0 ] ||
    fail "the grown part does not read as zeros"

stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"

note "conf= and id= instead of CEPH_CONF: the same image, read"
conf=$CEPH_CONF
unset CEPH_CONF
start_target --target-name "$iqn" --threads 2 --lun "rbd:rbd/it-disk,conf=$conf,id=admin"
export CEPH_CONF=$conf
rm -f "$WORK/back.img"
run_to 300 qemu-img convert -f raw -O raw "iscsi://127.0.0.1:$PORT/$iqn/0" "$WORK/back.img" ||
    { show_cmd_out; fail "read with conf= and id="; }
[ "$(head -c 64M "$WORK/back.img" | sha256sum | cut -d' ' -f1)" = "$pre" ] ||
    fail "data differs with conf= and id="
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"

note "rbd resize behind the gateway: CAPACITY DATA HAS CHANGED on every nexus, the new size"
start_target --target-name "$iqn" --threads 2 --lun rbd:rbd/it-resize,size=64M
url=iscsi://127.0.0.1:$PORT/$iqn/0
run_to 180 python3 "$IT_DIR/target_rbd_resize.py" "$PORT" "$iqn" rbd/it-resize ||
    { show_cmd_out; fail "rbd resize behind the gateway"; }
sed 's/^/   /' "$WORK/cmd.out"
[ "$(capacity "$url")" = 83886080 ] ||
    fail "iscsi-readcapacity16 after rbd resize: $(cat "$WORK/cmd.out")"
grep -q "the medium was resized from 100663296 to 83886080 bytes" "$WORK/target.log" ||
    fail "the log does not say the image shrank"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"

note "the gateway blocklisted by the cluster gives the LUN up: NOT READY, said in the log"
start_target --target-name "$iqn" --threads 2 --lun rbd:rbd/it-fence,size=16M,timeout=10
addr=$(grep -o 'rbd:rbd/it-fence: image id .*Ceph client .*' "$WORK/target.log" | tail -n 1 |
    awk '{ print $NF }')
[ -n "$addr" ] || fail "no Ceph client address in the log"
run_to 180 python3 "$IT_DIR/target_rbd_fence.py" "$PORT" "$iqn" "$addr" ||
    { show_cmd_out; fail "blocklisted gateway"; }
sed 's/^/   /' "$WORK/cmd.out"
grep -q "was blocklisted by the Ceph cluster: giving up the LUN" "$WORK/target.log" ||
    fail "the log does not say the LUN was given up"
# SIGTERM: it exits (promptly), 1 because the fenced LUN could not be flushed
stop_target
[ "$STOP_RC" -eq 1 ] || fail "SIGTERM'd fenced daemon exited $STOP_RC, not 1"
grep -q "flush failed" "$WORK/target.log" || fail "no flush failure logged for the fenced LUN"
echo PASS
