#!/bin/bash
# ErrorRecoveryLevel 1 end to end (issue 12): linerate-target at error-recovery-level 1 with
# --inject digest-error and drop-pdu, and linerate-bench --erl 1 --digest on --verify with the
# same faults, over 2 then 4 MC/S connections: zero mismatches, zero failed commands, and the
# faults really injected. What each end drops is what the other repairs at ERL 1 (RFC 7143
# §7.8, §7.9): the bench drops SCSI Commands (retried) and Data-Out (recovery R2T), the target
# Data-In (Data SNACK) and SCSI Responses (Status SNACK); corrupted data digests are Rejected
# (reason 0x02) by the target and SNACKed by the initiator.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
build=${1:?usage: bench_erl1.sh BUILD_DIR}
bench=$build/linerate-bench target=$build/linerate-target
[ -x "$bench" ] || fail "$bench not built"
[ -x "$target" ] || skip "$target not built"
port=$(free_port) || skip "no free loopback port"
tmp=$(mktemp -d)
tpid=
cleanup() { [ -n "$tpid" ] && kill "$tpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
faults=${ERL1_FAULTS:-digest-error=0.001,drop-pdu=0.001}

"$target" --listen "127.0.0.1:$port" --lun ram:256M --error-recovery-level 1 --inject "$faults" \
  --log-level warn >"$tmp/url" 2>"$tmp/target.log" &
tpid=$!
for _ in $(seq 50); do
  [ -s "$tmp/url" ] && break
  if ! kill -0 "$tpid" 2>/dev/null; then
    wait "$tpid"
    rc=$?
    tpid=
    cat "$tmp/target.log"
    fail "linerate-target exited $rc"
  fi
  sleep 0.1
done
url=$(head -1 "$tmp/url")
case $url in iscsi://*) ;; *) cat "$tmp/target.log"; fail "linerate-target printed no URL";; esac
alive() { kill -0 "$tpid" 2>/dev/null || { cat "$tmp/target.log"; fail "linerate-target died"; }; }

for conns in 2 4; do
  note "--erl 1 --verify --inject $faults, $conns connections, faults on both ends"
  timeout 300 "$bench" --erl 1 --digest on --verify --inject "$faults" --connections "$conns" \
    --sizes 4k,64k --rw randwrite,randread --seconds 2 --format csv "$url" \
    >"$tmp/cells.csv" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 0 ] || { cat "$tmp/err"; tail -50 "$tmp/target.log"; fail "bench exited $rc"; }
  grep -q "verify passed" "$tmp/err" || { cat "$tmp/err"; fail "no verify verdict"; }
  grep -q "$conns connections each" "$tmp/err" || { cat "$tmp/err"; fail "not $conns connections"; }
  line=$(grep "Injected: " "$tmp/err" | tail -1)
  echo "$line" >&2
  echo "$line" | grep -Eq " 0 commands failed \(ErrorRecoveryLevel 1\)$" \
    || { cat "$tmp/err"; fail "commands failed under recovery"; }
  corrupted=$(echo "$line" | sed -n 's/.* \([0-9]*\) data digests\{0,1\} corrupted.*/\1/p')
  dropped=$(echo "$line" | sed -n 's/.* \([0-9]*\) PDUs\{0,1\} dropped.*/\1/p')
  [ "${corrupted:-0}" -gt 0 ] || fail "no data digest corrupted by the bench: $line"
  [ "${dropped:-0}" -gt 0 ] || fail "no PDU dropped by the bench: $line"
  csv_check "$tmp/cells.csv" 4
  alive
done
echo "PASS: ERL 1 under injected faults, 2 and 4 connections, verify clean, nothing failed" >&2
