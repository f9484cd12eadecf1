#!/bin/bash
# A thin file LUN on a file system that fills up (SBC-4 §4.7.3.6: a thin LUN out of space fails
# the WRITE with DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT). The file store copies a
# WRITE whose pages are cached into its shared mapping; a write fault the file system refuses
# raises SIGBUS there, and the WRITE must then go through the kernel's write path, fail with
# ENOSPC, never be acknowledged, and the daemon live on. Root only: a loop-mounted ext4 of
# 24 MiB under a 64 MiB sparse LUN whose holes were read first, so that their pages are cached.
# (Steps 1-2 below; 3 shrinks a LUN's file to a size that is not a multiple of the page.)
#   1. with space: 8 MiB of 64 KiB WRITEs, all acknowledged; SYNCHRONIZE CACHE (qemu-io's
#      flush) leaves none of the file's pages dirty (cachestat(2): fdatasync wrote the pages the
#      mapping dirtied), nor does the daemon's exit after more WRITEs; after a remount the data
#      is in the file.
#   2. the file system filled by another file: every WRITE to the LUN's holes fails with that
#      sense; the first one met the SIGBUS in the mapping (the log says so: no WRITE before it
#      could have sent the LUN's WRITEs to io_uring for a while); the data of 1 reads back.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
build=${1:?usage: target_file_full.sh BUILD_DIR}
target=$build/linerate-target
[ -x "$target" ] || fail "$target not built"
[ "$(id -u)" = 0 ] || skip "needs root (mounts a loop device)"
command -v mkfs.ext4 >/dev/null || skip "no mkfs.ext4"
command -v qemu-io >/dev/null || fail "qemu-io missing (scripts/install-deps test installs qemu-utils)"
tmp=$(mktemp -d)
mnt=$tmp/mnt
tpid=
cleanup() {
  [ -n "$tpid" ] && kill "$tpid" 2>/dev/null
  wait 2>/dev/null
  mountpoint -q "$mnt" && umount "$mnt"
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$mnt"
truncate -s 24M "$tmp/fs.img"
mkfs.ext4 -q -F "$tmp/fs.img" || fail "mkfs.ext4"
mount -o loop "$tmp/fs.img" "$mnt" 2>"$tmp/err" || skip "cannot loop-mount: $(cat "$tmp/err")"

# start_target [FILE SIZE]: the LUN (default lun.img, 64M), all of it read once
start_target() {
  local port file=${1:-lun.img} size=${2:-64M}
  port=$(free_port) || fail "no free loopback port"
  : >"$tmp/url"
  "$target" --listen "127.0.0.1:$port" --lun "file:$mnt/$file,size=$size" --threads 1 \
    --ctl-socket none --log-level debug >"$tmp/url" 2>"$tmp/target.log" &
  tpid=$!
  for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.1; done
  url=$(head -1 "$tmp/url")
  case $url in iscsi://*) ;; *) cat "$tmp/target.log"; fail "linerate-target printed no URL" ;; esac
  note "read the whole LUN: its pages, holes too, are now in the page cache"
  timeout 120 qemu-io -f raw -c "read 0 $size" "$url" >/dev/null 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "reading the LUN"; }
}
stop_target() {
  kill -0 "$tpid" 2>/dev/null || { tail -20 "$tmp/target.log"; fail "linerate-target died"; }
  kill "$tpid"
  wait "$tpid" 2>/dev/null
  tpid=
}
# write_all FROM TO: a 64 KiB WRITE of 0xa5 at every 64 KiB from FROM to TO (bytes); sets
# acked, enospc and sense. -t unsafe: qemu-io's default (writethrough) sets FUA on every
# WRITE, and FUA always goes through the kernel's write path (RWF_DSYNC), never the mapping;
# writeback would still send SYNCHRONIZE CACHE when qemu-io closes the LUN.
write_all() {
  local cmds=() off n=$((($2 - $1) / 65536))
  for ((off = $1; off < $2; off += 65536)); do cmds+=(-c "write -P 0xa5 $off 64k"); done
  timeout 300 qemu-io -f raw -t unsafe "${cmds[@]}" "$url" >"$tmp/writes" 2>"$tmp/writes.err"
  acked=$(grep -c '^wrote 65536/65536 bytes at offset' "$tmp/writes")
  enospc=$(grep -c 'write failed: No space left on device' "$tmp/writes")
  # qemu's iscsi driver names the sense of each failure
  sense=$(grep -c 'SENSE KEY:DATA PROTECTION(7) .*(0x2707)' "$tmp/writes.err")
  echo "writes: $acked acknowledged, $enospc failed with ENOSPC ($sense with the sense 7/27/07)" >&2
  [ $((acked + enospc)) = "$n" ] ||
    { cat "$tmp/writes.err" >&2; fail "$acked + $enospc answers for $n WRITEs"; }
}
# dirty_pages: the LUN file's dirty and under-writeback pages (cachestat(2), Linux 6.5)
dirty_pages() {
  python3 - "$mnt/lun.img" <<'EOF'
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
rng = (ctypes.c_uint64 * 2)(0, 0)   # off 0, len 0: to the end of the file
cs = (ctypes.c_uint64 * 5)()        # nr_cache, nr_dirty, nr_writeback, nr_evicted, ...
fd = os.open(sys.argv[1], os.O_RDONLY)
if libc.syscall(451, fd, rng, cs, 0) < 0:
    sys.exit("cachestat: " + os.strerror(ctypes.get_errno()))
print(cs[1] + cs[2])
EOF
}
# file_check: the first 8 MiB of the LUN's file read 0xa5, from the medium (a fresh mount)
file_check() {
  umount "$mnt" && mount -o loop "$tmp/fs.img" "$mnt" || fail "remount"
  python3 - "$mnt/lun.img" <<'EOF' || fail "acknowledged data missing from the file"
import sys
with open(sys.argv[1], "rb") as f:
    bad = [i for i in range(128) if f.read(65536) != b"\xa5" * 65536]
print("%d of 128 acknowledged 64 KiB ranges in the file as written" % (128 - len(bad)),
      file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

note "1. with space: 8 MiB written, all of it acknowledged"
start_target
# the kernel without cachestat(2) (before 6.5): the store never writes through the mapping
grep -q "cachestat(2):" "$tmp/target.log" && skip "no cachestat(2): WRITEs skip the mapping"
write_all 0 $((8 << 20))
[ "$acked" = 128 ] || fail "only $acked of 128 WRITEs acknowledged with space left"
[ "$(dirty_pages)" -gt 0 ] || fail "no dirty page after 8 MiB of WRITEs without FUA"
# qemu sends SYNCHRONIZE CACHE only after a WRITE of its own: one more 64 KiB first
timeout 60 qemu-io -f raw -t writeback -c "write -P 0xa5 0 64k" -c flush "$url" >/dev/null \
  2>"$tmp/err" || { cat "$tmp/err"; fail "SYNCHRONIZE CACHE failed"; }
d=$(dirty_pages)
[ "$d" = 0 ] || fail "$d pages of the file still dirty after SYNCHRONIZE CACHE"
write_all 0 $((8 << 20))
[ "$acked" = 128 ] || fail "only $acked of 128 WRITEs acknowledged the second time"
stop_target
d=$(dirty_pages)
[ "$d" = 0 ] || fail "$d pages of the file still dirty after the daemon's exit"
file_check

note "2. the file system full: every WRITE to a hole fails, the first in the mapping"
dd if=/dev/zero of="$mnt/filler" bs=64k status=none 2>/dev/null
sync
start_target
write_all $((8 << 20)) $((64 << 20))
[ "$acked" = 0 ] || fail "$acked WRITEs acknowledged on a full file system"
[ "$sense" = "$enospc" ] || fail "$enospc ENOSPC failures but $sense with SPACE ALLOCATION FAILED"
grep -q "took SIGBUS: written again through io_uring" "$tmp/target.log" ||
  { tail -20 "$tmp/target.log"; fail "the first WRITE into the mapping did not meet the full file system"; }
timeout 60 qemu-io -f raw -c "read -P 0xa5 0 8M" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "the data written with space left does not read back"; }
stop_target
file_check
note "3. the file shrunk under the LUN to 4 MiB + 512: a WRITE of its last page extends it"
# A shrink leaves the page holding the new end cached and mapped, and a store past the end in it
# raises no SIGBUS but is dropped at writeback: such a WRITE must take the kernel's write path,
# which extends the file, as it did before the mapping.
rm -f "$mnt/filler"
start_target small.img 8M
timeout 60 qemu-io -f raw -t writeback -c "write -P 0x11 0 8M" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "writing the small LUN"; }
truncate -s $(((4 << 20) + 512)) "$mnt/small.img"
timeout 60 qemu-io -f raw -t writeback -c "write -P 0xa5 4M 4k" -c flush "$url" >/dev/null \
  2>"$tmp/err" || { cat "$tmp/err"; fail "the WRITE over the file's new end"; }
stop_target
size=$(stat -c %s "$mnt/small.img")
[ "$size" = $(((4 << 20) + 4096)) ] || fail "file size $size after the WRITE, not 4 MiB + 4 KiB"
python3 - "$mnt/small.img" <<'EOF' || fail "the WRITE over the file's new end lost data"
import sys
with open(sys.argv[1], "rb") as f:
    f.seek(4 << 20)
    sys.exit(0 if f.read() == b"\xa5" * 4096 else 1)
EOF
echo "PASS: a thin file LUN on a full file system: 128 WRITEs kept, $enospc refused with ENOSPC; a shrunk file's last page" >&2
