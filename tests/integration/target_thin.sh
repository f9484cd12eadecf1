#!/bin/bash
# A thin RAM LUN through real initiators (SBC-4 §4.7: a READ never maps a block): reading at
# least 1 GiB of a never-written ram:64G LUN with linerate-bench leaves the daemon's RSS within a
# few MiB and GET LBA STATUS (qemu-img map) still says "no data"; a write maps exactly its
# range, and UNMAP (qemu-img discard through qemu-io) gives it back. Holds whatever the kernel's
# transparent-huge-page or zero-page policy is: the store keeps its own allocation map. Then
# ram:SIZE,prealloc: resident from the start, all of it mapped (not thin), data round trip.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
build=${1:?usage: target_thin.sh BUILD_DIR}
bench=$build/linerate-bench target=$build/linerate-target
[ -x "$bench" ] || fail "$bench not built"
[ -x "$target" ] || fail "$target not built"
command -v qemu-img >/dev/null && command -v qemu-io >/dev/null ||
  fail "qemu-img/qemu-io missing (scripts/install-deps test installs qemu-utils)"
port=$(free_port) || fail "no free loopback port"
tmp=$(mktemp -d)
tpid=
cleanup() { [ -n "$tpid" ] && kill "$tpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
# Under ASan freed blocks sit in a quarantine (256 MiB by default), which would read as RSS
# growth that is not the LUN's; keep it small for this daemon.
ASAN_OPTIONS=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}quarantine_size_mb=4 \
  "$target" --listen "127.0.0.1:$port" --lun ram:64G --threads 2 --log-level warn \
  >"$tmp/url" 2>"$tmp/target.log" &
tpid=$!
for _ in $(seq 100); do [ -s "$tmp/url" ] && break; sleep 0.1; done
url=$(head -1 "$tmp/url")
case $url in iscsi://*) ;; *) cat "$tmp/target.log"; fail "linerate-target printed no URL" ;; esac
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$tpid/status"; }
# read_mib SECONDS: MiB read by one sequential 256 KiB read cell of that length
read_mib() {
  timeout 120 "$bench" --sizes 256k --rw read --qd 16 --seconds "$1" --format csv "$url" \
    >"$tmp/r.csv" 2>"$tmp/err" || { cat "$tmp/err"; fail "bench read failed"; }
  csv_check "$tmp/r.csv" 1
  awk -F, -v s="$1" 'NR == 2 { printf "%d\n", $6 * s * 1e6 / 1048576 }' "$tmp/r.csv"
}
# map_data: the "data" extents qemu-img map reports (from GET LBA STATUS), as "start+length"
map_data() {
  timeout 60 qemu-img map --output=json "$url" >"$tmp/map.json" 2>"$tmp/err" ||
    { cat "$tmp/err"; fail "qemu-img map failed"; }
  python3 -c 'import json,sys
print(" ".join("%d+%d" % (e["start"], e["length"]) for e in json.load(open(sys.argv[1])) if e["data"]))' \
    "$tmp/map.json"
}

note "warm-up: the daemon's buffers and threads in place before measuring"
read_mib 0.3 >/dev/null
rss0=$(rss_kib)

note "read at least 1 GiB of the never-written LUN"
total=0
for _ in $(seq 10); do
  total=$((total + $(read_mib 1)))
  [ "$total" -ge 1024 ] && break
done
[ "$total" -ge 1024 ] || fail "read only $total MiB in 10 runs"
rss1=$(rss_kib)
echo "read $total MiB; target RSS $rss0 KiB -> $rss1 KiB" >&2
[ $((rss1 - rss0)) -le 8192 ] || fail "RSS grew by $((rss1 - rss0)) KiB reading $total MiB of an unwritten LUN"

note "GET LBA STATUS after the reads: nothing mapped"
got=$(map_data)
[ -z "$got" ] || fail "qemu-img map shows data after reads only: $got"

note "a 64 KiB write at 1 MiB maps that range only; discarding it deallocates it again"
timeout 60 qemu-io -f raw -c "write -P 0x5a 1M 64k" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "qemu-io write failed"; }
got=$(map_data)
[ "$got" = "1048576+65536" ] || fail "expected data at 1048576+65536 only, qemu-img map says: $got"
timeout 60 qemu-io -f raw -c "read -P 0x5a 1M 64k" -c "read -P 0 0 1M" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "read back after the write"; }
timeout 60 qemu-io -f raw -c "discard 1M 64k" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "qemu-io discard failed"; }
got=$(map_data)
[ -z "$got" ] || fail "qemu-img map shows data after the discard: $got"
timeout 60 qemu-io -f raw -c "read -P 0 1M 64k" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "discarded range does not read as zeros"; }
kill -0 "$tpid" 2>/dev/null || { cat "$tmp/target.log"; fail "linerate-target died"; }
kill "$tpid"
wait "$tpid" 2>/dev/null
tpid=

note "ram:SIZE,prealloc: all of it resident from the start, fully provisioned, data round trip"
port=$(free_port) || fail "no free loopback port"
: >"$tmp/url"
ASAN_OPTIONS=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}quarantine_size_mb=4 \
  "$target" --listen "127.0.0.1:$port" --lun ram:64M,prealloc --threads 2 \
  >"$tmp/url" 2>"$tmp/target.log" &
tpid=$!
for _ in $(seq 300); do [ -s "$tmp/url" ] && break; sleep 0.1; done
url=$(head -1 "$tmp/url")
case $url in iscsi://*) ;; *) cat "$tmp/target.log"; fail "linerate-target printed no URL" ;; esac
grep -q "INFO .*67108864 bytes preallocated" "$tmp/target.log" ||
  { cat "$tmp/target.log"; fail "no 'preallocated' log line"; }
# resident memory: RSS, plus pages from the huge page pool (MAP_HUGETLB), which RSS leaves out
mem_kib() { awk '/^(VmRSS|HugetlbPages):/ { s += $2 } END { print s }' "/proc/$tpid/status"; }
rss=$(mem_kib)
[ "$rss" -ge 65536 ] || fail "resident $rss KiB, less than the 64 MiB LUN preallocated"
# GET LBA STATUS: a fully provisioned LUN (no LBPME) is all data, written or not
got=$(map_data)
[ "$got" = "0+67108864" ] || fail "expected data at 0+67108864, qemu-img map says: $got"
timeout 60 qemu-io -f raw -c "write -P 0xa5 3M 256k" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "qemu-io write to the preallocated LUN failed"; }
timeout 60 qemu-io -f raw -c "read -P 0xa5 3M 256k" -c "read -P 0 0 3M" "$url" >/dev/null 2>"$tmp/err" ||
  { cat "$tmp/err"; fail "read back from the preallocated LUN"; }
[ "$(mem_kib)" -le $((rss + 8192)) ] || fail "resident memory grew from $rss KiB writing a preallocated LUN"
kill -0 "$tpid" 2>/dev/null || { cat "$tmp/target.log"; fail "linerate-target died"; }
echo "PASS: thin RAM LUN, preallocated RAM LUN" >&2
