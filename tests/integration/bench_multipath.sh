#!/bin/bash
# Multipath in linerate's own initiator (issue 30 item 3): two linerate-target gateways of one
# target share one file: LUN (testing only, docs/gateways.md), each its own target port group;
# linerate-bench --portal runs one session per gateway as one multipath device.
#   1. choice by REPORT TARGET PORT GROUPS: gateway B (active/non-optimized) is the URL's
#      portal, the first path, and A (active/optimized) the second: every command goes to A,
#      none to B, while A lives, even with A's alua-peer picture of B stale (AO);
#   2. failover to an active/non-optimized path: --verify with A killed (SIGKILL) once half
#      the writes are acknowledged, the rest in flight: zero failed commands, zero verify
#      errors, B carried the rest; the longest I/O pause is printed;
#   3. failover to a standby path: B is standby; A is killed the same way and B made
#      active/optimized by `linerate-ctl set alua` (by hand: automatic failover between
#      gateways is issue 30 item 2). Commands wait for a usable path meanwhile (never sent to
#      a standby port), then go to B: zero failures, zero verify errors.
#   4. a state change without a death: A made standby midway (2Ah/06h): everything moves to B.
#   5. ErrorRecoveryLevel 2, a connection lost, not the gateway: A stopped (SIGSTOP) midway
#      for longer than the command timeout, so the commands in flight time out and the
#      connection closes; A's session recovers by itself once A runs again. Path A is not
#      declared lost (its target may still hold and run those commands, RFC 7143 §7.1.4): the
#      timed-out commands wait for the recovery and complete on A; nothing fails, verify passes.
#   6. failback: A killed midway and started again; the same device logs in to A again, RTPG
#      says active/optimized and the read-back of --verify goes through A.
# MPATH_RUNS=N repeats 2 and 3 N times and prints the pauses' median and worst (docs).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/bench_lib.sh"
build=${1:?usage: bench_multipath.sh BUILD_DIR}
bench=$build/linerate-bench target=$build/linerate-target ctl=$build/linerate-ctl
for b in "$bench" "$target" "$ctl"; do [ -x "$b" ] || fail "$b not built"; done
runs=${MPATH_RUNS:-1}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
iqn=iqn.2026-11.org.linerate:mpath
truncate -s 64M "$tmp/lun.img"

# gateway NAME GROUP STATE PEER_GROUP PEER_STATE [GLOBAL_LINES]: starts it; sets PID_<NAME>,
# PORT_<NAME> (each start its own files: a SIGKILLed daemon leaves its control socket behind)
starts=0
gateway() {
  local name=$1 group=$2 state=$3 pgroup=$4 pstate=$5 extra=${6:-} port try d
  for try in $(seq 20); do
    port=$(free_port) || fail "no free loopback port"
    starts=$((starts + 1))
    d=$tmp/gw$starts
    mkdir -p "$d/st"
    eval "DIR_$name=$d"
    cat >"$d/gw.conf" <<CONF
ctl-socket = $d/ctl.sock
state-dir = $d/st
log-level = warn
threads = 1
$extra
[target $iqn]
portal = 127.0.0.1:$port
alua-group = $group
alua-state = $state
alua-peer = $pgroup:$pstate
lun 0 = file:$tmp/lun.img
CONF
    if gw_start "$target" "$d"; then
      pids+=("$GW_PID")
      eval "PID_$name=$GW_PID PORT_$name=$port"
      return 0
    fi
    grep -q "in use" "$d/log" || { cat "$d/log" >&2; fail "gateway $name did not start"; }
  done
  fail "gateway $name: no free port"
}

stop_all() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  pids=()
}

# path_commands LOG PORT: the commands the run completed through the path on PORT
path_commands() {
  sed -n "s/^linerate-bench: session 0: path [0-9]* 127.0.0.1:$2 .*: \([0-9]*\) commands.*/\1/p" "$1"
}

# no_loss LOG WHAT: verify passed, nothing failed, no path lost through WHAT
no_loss() {
  grep -q "verify passed" "$1" || fail "verify did not pass through $2"
  grep -q "command failed\|commands failed" "$1" && fail "commands failed through $2"
  grep -q "0 paths lost" "$1" || fail "a path was declared lost through $2"
}

pauses_an=() pauses_sb=()
# failover B_STATE RUN: A active/optimized, B B_STATE; A killed mid --verify
failover() {
  local bstate=$1 run=$2 log=$tmp/bench-${1%%/*}-$2.log midway
  gateway A 1 active/optimized 2 "$bstate"
  gateway B 2 "$bstate" 1 active/optimized
  midway="kill -KILL $PID_A"
  [ "$bstate" = standby ] &&
    midway="$midway; $ctl --socket $DIR_B/ctl.sock set alua $iqn active/optimized >$tmp/ctl.out 2>&1 &"
  note "[$bstate, run $run] --verify through A (127.0.0.1:$PORT_A) and B, A killed midway"
  timeout 300 "$bench" --verify --verify-midway "$midway" --sizes 4k --rw write --seconds 1 \
    --qd 16 --portal "127.0.0.1:$PORT_A" "iscsi://127.0.0.1:$PORT_B/$iqn/0" \
    >"$tmp/out" 2>"$log"
  local rc=$?
  grep -E "multipath|verify|path [0-9]|failed|midway" "$log" >&2
  [ "$rc" = 0 ] || { tail -n 30 "$log" >&2; fail "[$bstate] linerate-bench exited $rc"; }
  grep -q "verify passed" "$log" || fail "[$bstate] verify did not pass"
  grep -q "commands failed\|command failed" "$log" && fail "[$bstate] commands failed"
  grep -q "1 path lost" "$log" || fail "[$bstate] the bench did not see path A lost"
  local b
  b=$(path_commands "$log" "$PORT_B")
  [ -n "$b" ] && [ "$b" -gt 0 ] || fail "[$bstate] path B carried nothing after the failover"
  [ "$bstate" = standby ] && { grep -q "active/optimized" "$tmp/ctl.out" || cat "$tmp/ctl.out" >&2; }
  local p
  p=$(sed -n 's/.*longest I\/O pause \([0-9.]*\) ms.*/\1/p' "$log" | head -1)
  [ -n "$p" ] || fail "[$bstate] no I/O pause printed"
  if [ "$bstate" = standby ]; then pauses_sb+=("$p"); else pauses_an+=("$p"); fi
  stop_all
}

# A's picture of B is stale (B active/optimized, as if nobody had told A that B was made
# active/non-optimized): each port's word on its own group counts, so B still gets nothing.
note "path choice by RTPG: B (active/non-optimized) first in the list, A (active/optimized) second"
gateway A 1 active/optimized 2 active/optimized
gateway B 2 active/non-optimized 1 active/optimized
timeout 120 "$bench" --sizes 4k --rw randwrite,randread --seconds 1 --qd 8 \
  --portal "127.0.0.1:$PORT_A" "iscsi://127.0.0.1:$PORT_B/$iqn/0" >"$tmp/out" 2>"$tmp/choice.log" ||
  { tail -n 20 "$tmp/choice.log" >&2; fail "linerate-bench with two portals failed"; }
grep -E "path [0-9]" "$tmp/choice.log" >&2
a=$(path_commands "$tmp/choice.log" "$PORT_A")
b=$(path_commands "$tmp/choice.log" "$PORT_B")
[ -n "$a" ] && [ "$a" -gt 100 ] || fail "the active/optimized path A carried ${a:-no} commands"
[ "$b" = 0 ] || fail "the active/non-optimized path B carried ${b:-?} commands while A lived"
stop_all

# 4. no death, a state change: A made standby by `linerate-ctl set alua` midway through
#    --verify: its next command gets UNIT ATTENTION 2Ah/06h (or NOT READY 04h/0Bh), RTPG tells
#    standby, and the rest goes to B: no path lost, nothing fails, B carried the rest.
note "A made standby midway through --verify (no gateway dies)"
gateway A 1 active/optimized 2 active/non-optimized
gateway B 2 active/non-optimized 1 active/optimized
timeout 300 "$bench" --verify --sizes 4k --rw write --seconds 1 --qd 16 \
  --verify-midway "$ctl --socket $DIR_A/ctl.sock set alua $iqn standby >$tmp/ctl-a.out 2>&1" \
  --portal "127.0.0.1:$PORT_A" "iscsi://127.0.0.1:$PORT_B/$iqn/0" >"$tmp/out" 2>"$tmp/change.log" ||
  { tail -n 20 "$tmp/change.log" >&2; fail "linerate-bench through a state change failed"; }
grep -E "multipath|path [0-9]|verify" "$tmp/change.log" >&2
no_loss "$tmp/change.log" "the state change"
grep -q "path 1 127.0.0.1:$PORT_A group 1 standby" "$tmp/change.log" ||
  fail "the bench did not learn that A is standby"
b=$(path_commands "$tmp/change.log" "$PORT_B")
[ -n "$b" ] && [ "$b" -gt 0 ] || fail "B carried nothing after A went standby"
stop_all

# 5. ERL 2: A stopped midway; continued (in the background, the bench going on) only once the
#    bench logged the command timeout that closed A's connection
note "ERL 2: A stopped midway past the command timeout; its session recovers by itself"
cat >"$tmp/cont.sh" <<EOF
for _ in \$(seq 600); do
  grep -q "lost: command timeout" "$tmp/erl2.log" && break
  sleep 0.1
done
kill -CONT \$1
EOF
gateway A 1 active/optimized 2 active/non-optimized \
  "$(printf '%s\n' "error-recovery-level = 2" "default-time2wait = 0" "default-time2retain = 20")"
gateway B 2 active/non-optimized 1 active/optimized \
  "$(printf '%s\n' "error-recovery-level = 2" "default-time2wait = 0" "default-time2retain = 20")"
timeout 300 "$bench" --erl 2 --cmd-timeout 1000 --verify --sizes 4k --rw write --seconds 1 \
  --qd 16 --verify-midway "kill -STOP $PID_A; sh $tmp/cont.sh $PID_A &" \
  --portal "127.0.0.1:$PORT_A" "iscsi://127.0.0.1:$PORT_B/$iqn/0" >"$tmp/out" 2>"$tmp/erl2.log" ||
  { kill -CONT "$PID_A"; tail -n 30 "$tmp/erl2.log" >&2; fail "linerate-bench at ERL 2 failed"; }
kill -CONT "$PID_A" 2>/dev/null
grep -E "multipath|path [0-9]|verify|timed out|timeout" "$tmp/erl2.log" >&2
grep -q "lost: command timeout" "$tmp/erl2.log" || fail "no command timed out on A"
no_loss "$tmp/erl2.log" "A's ERL 2 session recovery"
grep -q "path 1 127.0.0.1:$PORT_A group 1 active/optimized:" "$tmp/erl2.log" ||
  fail "A is not the live active/optimized path after its recovery"
b=$(path_commands "$tmp/erl2.log" "$PORT_B")
[ "$b" = 0 ] || fail "B carried ${b:-?} commands: A's commands were moved off it"
stop_all

# 6. failback inside one device: A (active/optimized) killed midway through --verify and
#    started again on its port before I/O goes on; the writes after the kill go to B, path A
#    logs in again by itself (RTPG: active/optimized) and --verify-paths 2 holds the read-back
#    until it is up, so every block written through B is read back through A. Before the
#    re-login existed a lost path stayed lost: the bench waited its 60 s and failed.
note "failback: A killed midway through --verify and started again; the device logs in to it"
gateway A 1 active/optimized 2 active/non-optimized
gateway B 2 active/non-optimized 1 active/optimized
cat >"$tmp/restart.sh" <<EOF
d=$tmp/gw-again
mkdir -p "\$d/st"
sed -e "s|^ctl-socket = .*|ctl-socket = \$d/ctl.sock|" -e "s|^state-dir = .*|state-dir = \$d/st|" \
  "$DIR_A/gw.conf" >"\$d/gw.conf"
"$target" --config "\$d/gw.conf" >"\$d/out" 2>"\$d/log" </dev/null &
echo \$! >"$tmp/again.pid"
for _ in \$(seq 600); do
  grep -q '^iscsi://' "\$d/out" 2>/dev/null && exit 0
  sleep 0.1
done
exit 1
EOF
timeout 300 "$bench" --verify --verify-paths 2 --sizes 4k --rw write --seconds 1 --qd 16 \
  --verify-midway "kill -KILL $PID_A; sh $tmp/restart.sh" \
  --portal "127.0.0.1:$PORT_A" "iscsi://127.0.0.1:$PORT_B/$iqn/0" >"$tmp/out" 2>"$tmp/back.log"
rc=$?
[ -s "$tmp/again.pid" ] && pids+=("$(cat "$tmp/again.pid")")
grep -E "multipath|path [0-9]|verify" "$tmp/back.log" >&2
[ "$rc" = 0 ] || { tail -n 30 "$tmp/back.log" >&2; fail "linerate-bench through a failback exited $rc"; }
grep -q "midway: the command exited" "$tmp/back.log" && fail "gateway A did not start again"
grep -q "verify passed" "$tmp/back.log" || fail "verify did not pass through the failback"
grep -q "command failed\|commands failed" "$tmp/back.log" && fail "commands failed through the failback"
grep -q "1 path lost" "$tmp/back.log" || fail "the bench did not see path A lost"
line=$(grep "path 1 127.0.0.1:$PORT_A " "$tmp/back.log")
echo "$line" | grep -q "group 1 active/optimized: .*logged in again 1 times" ||
  fail "path A is not back, active/optimized: $line"
since=$(echo "$line" | sed -n 's/.*, \([0-9]*\) commands since$/\1/p')
[ -n "$since" ] && [ "$since" -gt 0 ] || fail "path A carried nothing after it came back: $line"
b=$(path_commands "$tmp/back.log" "$PORT_B")
[ -n "$b" ] && [ "$b" -gt 0 ] || fail "path B carried nothing while A was down"
stop_all

for run in $(seq "$runs"); do
  failover active/non-optimized "$run"
  failover standby "$run"
done
# summary NAME PAUSES...: every pause, and median and worst over more than one
summary() {
  local name=$1
  shift
  note "longest I/O pause, failover to $name (ms): $*"
  [ $# -gt 1 ] || return 0
  printf '%s\n' "$@" | sort -g | awk -v name="$name" '{ v[NR] = $1 } END {
    printf "== %s: %d failovers, pause median %.1f ms, worst %.1f ms\n", name, NR,
      (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR] }' >&2
}
summary active/non-optimized "${pauses_an[@]}"
summary "standby made active/optimized" "${pauses_sb[@]}"
echo "PASS: bench_multipath"
