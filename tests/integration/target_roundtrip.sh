#!/bin/bash
# Data integrity with QEMU's iSCSI client: a random 64 MiB image written with qemu-img convert
# into a RAM LUN and a file LUN and read back byte-identical, again with HeaderDigest=CRC32C
# and the file LUN read back identical after a SIGTERM (exit 0) and restart; a SIGTERM in the
# middle of a write still exits 0.
. "$(dirname "$0")/lt_lib.sh"
need qemu-img cmp
qemu-img --help 2>/dev/null | grep -qw iscsi ||
    skip "qemu-img has no iscsi driver (apt-get install qemu-block-extra)"

iqn=iqn.2026-11.org.linerate:it-roundtrip
img=$WORK/random.img
head -c 64M /dev/urandom >"$img"
head -c 64M /dev/urandom >"$WORK/random2.img"
disk=$WORK/disk.img
args=(--target-name "$iqn" --lun ram:64M --lun "file:$disk,size=64M" --threads 2)
start_target "${args[@]}"

# put IMAGE URL / get URL OUT: qemu-img convert into an existing LUN (-n) and back.
put() {
    run_to 300 qemu-img convert -n -f raw -O raw "$1" "$2" || { show_cmd_out; fail "write $1 -> $2"; }
}
get() {
    rm -f "$2"
    run_to 300 qemu-img convert -f raw -O raw "$1" "$2" || { show_cmd_out; fail "read $1 -> $2"; }
}
same() {
    cmp "$1" "$2" >"$WORK/cmp.out" 2>&1 || fail "$3: data differs: $(head -n 2 "$WORK/cmp.out")"
}

for lun in 0 1; do
    url=iscsi://127.0.0.1:$PORT/$iqn/$lun
    note "LUN $lun: 64 MiB random image in and out"
    put "$img" "$url"
    get "$url" "$WORK/back$lun.img"
    same "$img" "$WORK/back$lun.img" "LUN $lun round trip"
done

# Same with HeaderDigest=CRC32C through --image-opts (libiscsi offers no data digest), with a
# second image so that data left from the first pass cannot pass for a good read.
for lun in 0 1; do
    opts="driver=iscsi,transport=tcp,portal=127.0.0.1:$PORT,target=$iqn,lun=$lun,header-digest=crc32c"
    note "LUN $lun: round trip with HeaderDigest=CRC32C"
    run_to 300 qemu-img convert -n -f raw "$WORK/random2.img" --target-image-opts "$opts" ||
        { show_cmd_out; fail "write with header digest into LUN $lun"; }
    rm -f "$WORK/dback.img"
    run_to 300 qemu-img convert --image-opts "$opts" -O raw "$WORK/dback.img" ||
        { show_cmd_out; fail "read with header digest from LUN $lun"; }
    same "$WORK/random2.img" "$WORK/dback.img" "LUN $lun round trip with header digest"
done
# The engine logs each login's digests as "header-digest=... data-digest=..." (docs/logging.md).
grep -q "event=login .*header-digest=crc32c " "$WORK/target.log" ||
    fail "no login with HeaderDigest=CRC32C in the target's log"

# Put the first image back into the file LUN for the restart check.
put "$img" "iscsi://127.0.0.1:$PORT/$iqn/1"

note "restart: SIGTERM exits 0, the file LUN keeps its data"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
grep -q "shutting down" "$WORK/target.log" || fail "no 'shutting down' log line"
start_target "${args[@]}"
get "iscsi://127.0.0.1:$PORT/$iqn/1" "$WORK/after.img"
same "$img" "$WORK/after.img" "file LUN after restart"
same "$img" "$disk" "file LUN's backing file"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"

note "SIGTERM in the middle of a write: connections closed, exit 0"
start_target "${args[@]}"
timeout 120 qemu-img convert -n -f raw -O raw "$WORK/random2.img" \
    "iscsi://127.0.0.1:$PORT/$iqn/1" >"$WORK/busy.out" 2>&1 &
busy=$!
sleep 0.3
stop_target
kill "$busy" 2>/dev/null
wait "$busy" 2>/dev/null
[ "$STOP_RC" -eq 0 ] || fail "daemon SIGTERM'd during a write exited $STOP_RC, not 0"
echo PASS
