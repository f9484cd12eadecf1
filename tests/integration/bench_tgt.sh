#!/bin/bash
# linerate-bench against tgt, the interop peer (started by tgt_peer.sh): the seed's cells in
# csv, the MC/S fallback (tgt grants one connection; the bench says so), digests on when tgt
# offers them, --verify, and a refused login reported with its status class/detail.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
build=${1:?usage: bench_tgt.sh BUILD_DIR}
bench=$build/linerate-bench
[ -x "$bench" ] || fail "$bench not built"
# tgtd and tgtadm live in /usr/sbin, which a non-login PATH may lack.
PATH=$PATH:/usr/sbin:/sbin
# tgt is a test dependency (scripts/install-deps test installs it): skip only when it is truly
# absent, and say so.
command -v tgtd >/dev/null && command -v tgtadm >/dev/null ||
  skip "tgtd/tgtadm not found: install Debian's tgt (scripts/install-deps test)"
# The repo's own helper starts tgtd; a port someone takes between free_port and tgtd's bind
# (exit 75) is only bad luck, so try a few.
peer=$here/tgt_peer.sh
url= port=
for _ in 1 2 3 4 5; do
  port=$(free_port) || fail "no free loopback port"
  url=$("$peer" start "$port" 256)
  rc=$?
  [ "$rc" -eq 75 ] || break
done
[ "$rc" -eq 0 ] || fail "tgt_peer.sh could not start tgtd on port $port (exit $rc)"
tmp=$(mktemp -d)
trap '"$peer" stop "$port" >/dev/null 2>&1; rm -rf "$tmp"' EXIT
# An interrupted run still stops its tgtd (bash runs the EXIT trap on exit).
trap 'exit 1' INT TERM HUP
run() { timeout 120 "$bench" "$@"; }

note "16 cells, 1 and 4 connections asked: tgt grants 1, the bench falls back and says so"
run --sizes 4k,256k --rw read,write --digest off,on --connections 1,4 --seconds 0.4 --qd 16 \
  --format csv "$url" >"$tmp/out.csv" 2>"$tmp/err" || { cat "$tmp/err"; fail "bench exited $?"; }
csv_check "$tmp/out.csv" 16
awk -F, 'NR > 1 && $4 != 1 { bad = 1 } END { exit bad }' "$tmp/out.csv" \
  || fail "connections must be the number logged in (1 with tgt)"
grep -q "falling back to 1 connection" "$tmp/err" || { cat "$tmp/err"; fail "no fallback notice"; }
grep -q "refused CRC32C digests" "$tmp/err" || fail "tgt's refusal of digests not reported"

note "digests: with tgt configured for CRC32C both ways the cells run with digests"
tgtadm -C $((port + 1000)) --lld iscsi --mode target --op update --tid 1 \
  --name HeaderDigest --value CRC32C,None || fail "tgtadm"
tgtadm -C $((port + 1000)) --lld iscsi --mode target --op update --tid 1 \
  --name DataDigest --value CRC32C,None || fail "tgtadm"
run --sizes 4k,64k --rw read,write --digest on --seconds 0.4 --format csv "$url" \
  >"$tmp/dig.csv" 2>"$tmp/err" || { cat "$tmp/err"; fail "digest run failed"; }
csv_check "$tmp/dig.csv" 4
awk -F, 'NR > 1 && $3 != "on" { bad = 1 } END { exit bad }' "$tmp/dig.csv" \
  || fail "digests not in force: $(cat "$tmp/dig.csv")"

note "--verify (2 connections asked, 1 granted) and json on stdout only"
run --verify --sizes 16k --rw randread --connections 2 --seconds 0.3 --format json "$url" \
  >"$tmp/v.json" 2>"$tmp/err" || { cat "$tmp/err"; fail "verify failed"; }
grep -q "verify passed" "$tmp/err" || fail "no verify verdict"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[0]["mb_per_s"] > 0' \
  "$tmp/v.json" || fail "stdout is not the json result"

note "a refused login names the status class and detail"
bad=${url%/*}
bad=${bad%/*}/iqn.2026-11.org.peer:nosuch/1
if run --sizes 4k --rw read --seconds 0.2 "$bad" >"$tmp/out" 2>"$tmp/err"; then
  fail "login to a missing target succeeded"
fi
grep -q "status class 2 detail 3" "$tmp/err" || { cat "$tmp/err"; fail "no login status"; }

note "table output and SVG"
run --sizes 4k,64k --rw read --seconds 0.3 --svg "$tmp/b.svg" "$url" >"$tmp/table" 2>/dev/null \
  || fail "table run failed"
grep -q "^4k-read" "$tmp/table" || fail "table has no 4k-read row"
grep -q "<polyline" "$tmp/b.svg" && grep -q "MB/s" "$tmp/b.svg" || fail "svg incomplete"
echo "PASS: linerate-bench against tgt"
