#!/bin/bash
# linerate-bench against linerate-target: the 16 cells of issue 3 with real 4-connection MC/S
# sessions (4 TCP connections open at once), --verify over 2 connections, one connection of a
# 4-connection session cut mid-run by --inject kill-connection (the other three carry on, the
# failures are counted, the target stays healthy), a target that cuts connections itself
# (linerate-target --inject), --inject digest-error at ERL 0, --inject and --erl refusals,
# three 2-connection sessions sharing the initiator's threads, command timeouts when the target
# stops answering, and a digest-on capture decoded by tshark with good header and data digests.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
build=${1:?usage: bench_target.sh BUILD_DIR}
bench=$build/linerate-bench target=$build/linerate-target
[ -x "$bench" ] || fail "$bench not built"
[ -x "$target" ] || skip "$target not built"
port=$(free_port) || skip "no free loopback port"
tmp=$(mktemp -d)
tpid=
cleanup() { [ -n "$tpid" ] && kill "$tpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$target" --listen "127.0.0.1:$port" --lun ram:256M --log-level warn >"$tmp/url" 2>"$tmp/target.log" &
tpid=$!
for _ in $(seq 50); do [ -s "$tmp/url" ] && break; sleep 0.1; done
url=$(head -1 "$tmp/url")
case $url in iscsi://*) ;; *) cat "$tmp/target.log"; fail "linerate-target printed no URL";; esac
run() { timeout 120 "$bench" "$@"; }
alive() { kill -0 "$tpid" 2>/dev/null || { cat "$tmp/target.log"; fail "linerate-target died"; }; }
# still_serving CONNS WHAT: the target is alive and runs a short cell with CONNS connections
still_serving() {
  alive
  run --sizes 4k --rw read --connections "$1" --seconds 0.3 --format csv "$url" >"$tmp/after.csv" \
    2>"$tmp/err" || { cat "$tmp/err"; fail "target unhealthy after $2"; }
  csv_check "$tmp/after.csv" 1
}

note "16 cells: 4k,256k x read,write x digest off,on x 1,4 connections"
run --sizes 4k,256k --rw read,write --digest off,on --connections 1,4 --seconds 0.5 \
  --format csv "$url" >"$tmp/cells.csv" 2>"$tmp/err" || { cat "$tmp/err"; fail "bench failed"; }
csv_check "$tmp/cells.csv" 16
# order: (off,1) (off,4) (on,1) (on,4), four cells each
awk -F, 'NR > 1 { want = (int((NR - 2) / 4) % 2) ? 4 : 1; dig = (NR - 2 < 8) ? "off" : "on";
         if ($4 != want || $3 != dig) bad = 1 } END { exit bad }' "$tmp/cells.csv" \
  || { cat "$tmp/cells.csv"; fail "connections/digest columns do not show real 4-connection sessions"; }
alive

note "4 TCP connections open at once in one session"
run --sizes 64k --rw read --connections 4 --seconds 3 --format csv "$url" >/dev/null 2>&1 &
bpid=$!
sleep 1.5
n=$(ss -Htn state established "dport = :$port" | wc -l)
wait $bpid || fail "4-connection run failed"
[ "$n" -ge 4 ] || fail "expected 4 established connections, saw $n"

note "--verify over 2 connections"
run --verify --sizes 64k --rw randread --connections 2 --seconds 0.3 --format csv "$url" \
  >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; fail "verify failed"; }
grep -q "verify passed" "$tmp/err" || fail "no verify verdict"
grep -q "2 connections each" "$tmp/err" || { cat "$tmp/err"; fail "verify did not use 2 connections"; }
# with two CPUs the two connections run on two initiator threads (the session's lock, hand-over
# of commands between threads, and the move back for logout are what this run exercises)
if [ "$(nproc)" -ge 2 ]; then
  grep -q "on 2 initiator threads" "$tmp/err" || { cat "$tmp/err"; fail "the 2 connections did not get 2 threads"; }
fi

note "3 MC/S sessions of 2 connections sharing the initiator threads, with --verify"
# Each thread carries one session's home and another session's connection: a logout that
# waited for its connections' threads would wait for itself (timeout 120 would fail it).
run --verify --sizes 4k --rw read,write --sessions 3 --connections 2 --seconds 0.3 --format csv \
  "$url" >"$tmp/share.csv" 2>"$tmp/err" || { cat "$tmp/err"; fail "3 sessions x 2 connections failed"; }
csv_check "$tmp/share.csv" 2
grep -q "3 sessions logged in, 2 connections each" "$tmp/err" || { cat "$tmp/err"; fail "not 3 x 2"; }
grep -q "verify passed" "$tmp/err" || { cat "$tmp/err"; fail "no verify verdict"; }
alive

note "--inject kill-connection: one connection of a 4-connection session cut mid-run"
# One cut in a 2 s cell (at 1.2 s): at ERL 0 the other three go on, the cut connection's
# commands fail, and the bench says so (summary line, exit 1 when any command failed).
run --inject kill-connection=1.2 --sizes 64k --rw write --connections 4 --seconds 2 \
  --format csv "$url" >"$tmp/kill.csv" 2>"$tmp/err"
rc=$?
[ $rc -le 1 ] || { cat "$tmp/err"; fail "bench exited $rc"; }
grep -q "cutting connection 0" "$tmp/err" || { cat "$tmp/err"; fail "--inject kill-connection did not fire"; }
[ "$(grep -c "cutting connection" "$tmp/err")" -eq 1 ] || { cat "$tmp/err"; fail "expected exactly one cut"; }
grep -q "3 of 4 connections left" "$tmp/err" || { cat "$tmp/err"; fail "the other three did not go on"; }
grep -q "Injected: kill-connection=1.2 over 1 cell: 1 connection cut, [0-9]* commands\? failed (ErrorRecoveryLevel 0)" "$tmp/err" ||
  { cat "$tmp/err"; fail "no injection summary"; }
failed=$(sed -n 's/.*connection cut, \([0-9]*\) command.*/\1/p' "$tmp/err")
if [ "$failed" -gt 0 ]; then
  [ $rc -eq 1 ] || fail "$failed commands failed but the bench exited $rc"
fi
csv_check "$tmp/kill.csv" 1
still_serving 4 "the cut"

note "--verify under --inject kill-connection: the cut is reported, and so is its outcome"
# At ERL 0 a command in flight on the cut connection fails and the verdict names it; when the
# cut finds none in flight (re-sent elsewhere, or between commands) every block still checks.
# Either way the bench may not call it a pass with a failed command, nor hide the cut.
run --verify --inject kill-connection=0.05 --sizes 4k --rw read --connections 2 --seconds 0.3 \
  --format csv "$url" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -le 1 ] || { cat "$tmp/err"; fail "bench exited $rc"; }
# How many cuts land in the run depends on the machine's speed (0 when --verify ends before the
# first period on a slow start, 2 or more on a fast one): the count must be stated, whatever it is.
grep -Eq -- "--inject: [0-9]+ connections? cut during --verify" "$tmp/err" || { cat "$tmp/err"; fail "cuts during --verify not reported"; }
if grep -q "verify FAILED" "$tmp/err"; then
  # "connection lost: ..." for a command on the cut connection, "no connection left in the
  # session" when both were cut before it could be sent again: either names the loss
  grep -Eq "verify FAILED in session 0: .*failed: (connection|no connection left)" "$tmp/err" || { cat "$tmp/err"; fail "verdict does not name the lost connection"; }
  [ $rc -eq 1 ] || fail "verify failed but the bench exited $rc"
else
  grep -q "verify passed" "$tmp/err" || { cat "$tmp/err"; fail "no verify verdict"; }
fi
alive

note "linerate-target --inject kill-connection: the target cuts one connection every 0.5 s"
port2=$(free_port) || skip "no free loopback port"
"$target" --listen "127.0.0.1:$port2" --lun ram:64M --threads 1 --inject kill-connection=0.5 \
  >"$tmp/url2" 2>"$tmp/target2.log" &
tpid2=$!
for _ in $(seq 50); do [ -s "$tmp/url2" ] && break; sleep 0.1; done
url2=$(head -1 "$tmp/url2")
run --sizes 64k --rw write --connections 4 --seconds 1.3 --format csv "$url2" >"$tmp/tkill.csv" \
  2>"$tmp/err"
rc=$?
kill "$tpid2"; wait "$tpid2"
trc=$?
[ $trc -eq 0 ] || { cat "$tmp/target2.log"; fail "the --inject target exited $trc"; }
[ $rc -eq 1 ] || { cat "$tmp/err"; fail "connections cut under load: bench exited $rc, not 1"; }
grep -q 'event=conn-closed .*reason="--inject kill-connection=0.5 (cut 1)"' "$tmp/target2.log" ||
  { cat "$tmp/target2.log"; fail "the target did not cut a connection"; }
cuts=$(grep -c 'event=conn-closed .*reason="--inject kill-connection' "$tmp/target2.log")
# one every 0.5 s from the first login, over a 1.3 s cell plus login and logout, 4 at most
[ "$cuts" -ge 2 ] && [ "$cuts" -le 4 ] || { cat "$tmp/target2.log"; fail "expected 2 to 4 cuts, saw $cuts"; }
grep -q "connection closed by the target" "$tmp/err" || { cat "$tmp/err"; fail "the bench saw no cut"; }
grep -q "commands failed in this cell" "$tmp/err" || { cat "$tmp/err"; fail "failed commands not counted"; }
alive

note "--inject: bad lists are refused before connecting, naming the item"
for bad in "" "kill-connection" "kill-connection=0" "kill-connection=1,kill-connection=2" \
    "digest-error=1" "drop-pdu=-0.1" "bogus=1"; do
  "$bench" --inject "$bad" "$url" >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] || fail "--inject '$bad' exited $rc, not 2"
  grep -q "^linerate-bench: --inject: " "$tmp/err" || fail "--inject '$bad': $(cat "$tmp/err")"
done

note "--inject digest-error at ERL 0: a bad digest closes the connection, failures are counted"
run --inject digest-error=0.05 --digest on --sizes 4k --rw write --seconds 0.5 --format csv \
  "$url" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] || { cat "$tmp/err"; fail "digest-error at ERL 0 exited $rc, not 1"; }
grep -Eq "Injected: digest-error=0.05 over 1 cell: [1-9][0-9]* data digests? corrupted, [1-9][0-9]* commands? failed \(ErrorRecoveryLevel 0\)" \
  "$tmp/err" || { cat "$tmp/err"; fail "corrupted digests or failed commands not reported"; }
grep -q "data digest error" "$tmp/target.log" || fail "the target saw no digest error"
alive
"$bench" --erl 3 "$url" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "expected 0, 1 or 2" "$tmp/err" || fail "--erl 3: $(cat "$tmp/err")"

note "one connection's socket destroyed from outside (ss -K) mid-run"
if ss -K -Htn "sport = :1" >/dev/null 2>&1; then
  run --sizes 64k --rw read --connections 4 --seconds 3 --format csv "$url" >"$tmp/ssk.csv" \
    2>"$tmp/err" &
  bpid=$!
  sleep 1
  lport=$(ss -Htn state established "dport = :$port" | awk '{print $3}' | head -1 | sed 's/.*://')
  [ -n "$lport" ] && ss -K -Htn "sport = :$lport" >/dev/null
  wait $bpid
  rc=$?
  [ $rc -le 1 ] || { cat "$tmp/err"; fail "bench exited $rc after ss -K"; }
  grep -q "3 of 4 connections left" "$tmp/err" || { cat "$tmp/err"; fail "ss -K: the other three did not go on"; }
  alive
else
  echo "SKIP (part): ss -K not supported here" >&2
fi

note "the target stops answering (SIGSTOP) under a 2-connection session on two threads"
# The session's timer (on one thread) finds the commands late and has each connection failed
# on its own thread; the cell ends with the failures counted and the bench exits 1.
run --sizes 4k --rw read --connections 2 --seconds 30 --format csv "$url" >"$tmp/stop.csv" \
  2>"$tmp/err" &
bpid=$!
sleep 2
kill -STOP "$tpid"
wait $bpid
rc=$?
kill -CONT "$tpid"
[ $rc -eq 1 ] || { cat "$tmp/err"; fail "bench exited $rc with the target stopped (want 1)"; }
grep -q "timed out on connection" "$tmp/err" || { cat "$tmp/err"; fail "no command timeout reported"; }
grep -q "0 of 2 connections left" "$tmp/err" || { cat "$tmp/err"; fail "the connections were not dropped"; }
csv_check "$tmp/stop.csv" 1
still_serving 2 "SIGCONT"

# stop_capture PID: SIGINT to the tshark that timeout(1) PID runs, then at most 10 s before
# tshark and its dumpcap are killed
stop_capture() {
  local ts
  ts=$(pgrep -P "$1" -x tshark)
  [ -n "$ts" ] && kill -INT "$ts" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then
    echo "tshark did not stop on SIGINT: killed" >&2
    [ -n "$ts" ] && kill -KILL $(pgrep -P "$ts") "$ts" 2>/dev/null
    kill -KILL "$1" 2>/dev/null
  fi
  wait "$1" 2>/dev/null
}

note "tshark decodes a digest-on run with good digests"
if ! command -v tshark >/dev/null; then
  echo "SKIP (part): tshark not installed (apt-get install -y tshark)" >&2
else
  # A capture can miss the start of a short run on a loaded machine (tshark needs the login
  # to know digests are on): up to three tries; a bad digest fails at once.
  for try in 1 2 3; do
    # bounded: tshark (its dumpcap) has been seen to ignore SIGINT on a loaded machine, and an
    # unbounded wait would hang the test until meson's timeout
    timeout -k 5 60 tshark -i lo -f "tcp port $port" -w "$tmp/cap.pcap" -q 2>"$tmp/tshark.err" &
    shark=$!
    for _ in $(seq 50); do grep -q "Capturing on" "$tmp/tshark.err" && break; sleep 0.1; done
    sleep 0.3
    run --sizes 4k,64k --rw read,write --digest on --qd 2 --seconds 0.2 --format csv "$url" \
      >/dev/null 2>"$tmp/err" || fail "digest run failed"
    sleep 0.5
    stop_capture $shark
    tshark -r "$tmp/cap.pcap" -o "iscsi.target_ports:$port" -Y iscsi -V 2>/dev/null >"$tmp/dec"
    good_h=$(grep -c "HeaderDigest: .*Good CRC32" "$tmp/dec")
    good_d=$(grep -c "DataDigest: .*Good CRC32" "$tmp/dec")
    bad=$(grep -c "Bad CRC32" "$tmp/dec")
    echo "tshark (try $try): $good_h good header digests, $good_d good data digests, $bad bad" >&2
    [ "$bad" -eq 0 ] || fail "tshark found bad digests"
    [ "$good_h" -gt 0 ] && [ "$good_d" -gt 0 ] && break
    [ "$try" -lt 3 ] || fail "tshark saw no good digests in three captures"
  done
fi
alive
echo "PASS: linerate-bench against linerate-target"
