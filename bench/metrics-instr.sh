#!/bin/bash
# metrics-instr.sh: user-space instructions per command of a target build, counted by valgrind's
# callgrind (no hardware counters needed, and the machine's load does not change the count), so
# two builds can be compared where timing is too noisy (issue 15: what the metrics cost).
# Instrumentation is switched on only while linerate-bench runs 4 KiB writes then reads (QD 8,
# SECS each); commands are the calls into scsi_task_exec, counted by callgrind.
#
#   bench/metrics-instr.sh BUILD_DIR...      SECS (3); prints one line per build and round
#                                            (ROUNDS, default 2, alternating the builds)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: bench/metrics-instr.sh BUILD_DIR..." >&2; exit 2; }
command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
  { echo "metrics-instr: valgrind is not installed" >&2; exit 2; }
secs=${SECS:-3}
rounds=${ROUNDS:-2}
. "$root/tests/integration/bench_lib.sh"
work=$(mktemp -d /tmp/linerate-minstr.XXXXXX)
vpid=""
trap '[ -n "$vpid" ] && kill "$vpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for r in $(seq "$rounds"); do
  for dir in "$@"; do
    port=$(free_port) || exit 2
    : >"$work/url"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.out" \
      "$dir/linerate-target" --listen "127.0.0.1:$port" --lun ram:16M --threads 1 \
      --ctl-socket none --log-level warn >"$work/url" 2>"$work/target.log" &
    vpid=$!
    for _ in $(seq 300); do [ -s "$work/url" ] && break; sleep 0.1; done
    callgrind_control -i on "$vpid" >/dev/null 2>&1
    "$dir/linerate-bench" --sizes 4k --rw write,read --seconds "$secs" --qd 8 --format json \
      "$(head -1 "$work/url")" >"$work/bench.json" 2>"$work/bench.err"
    callgrind_control -i off "$vpid" >/dev/null 2>&1
    kill "$vpid"; wait "$vpid"; vpid=""
    ir=$(callgrind_annotate "$work/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    # Commands counted exactly: the calls into scsi_task_exec, which every SCSI command passes
    # once (the caller tree's "<" lines of its block). The bench's IOPS times SECS is only an
    # estimate, off by a few % at the run's edges; it stays the fallback for older builds.
    calls=$(callgrind_annotate --tree=caller "$work/cg.out" 2>/dev/null |
      awk 'BEGIN { RS = "" } /\* +[^ ]*:scsi_task_exec / { print }' |
      sed -n 's/.*< .*(\([0-9,]*\)x).*/\1/p' | tr -d , | awk '{ n += $1 } END { print n + 0 }')
    python3 - "$work/bench.json" "$ir" "$dir" "$r" "$secs" "$calls" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))
cmds, how = float(sys.argv[6]), "commands"
if cmds <= 0:
    cmds, how = sum(c["iops"] for c in cells) * float(sys.argv[5]), "commands (estimated)"
ir = float(sys.argv[2])
print(f"round {sys.argv[4]} {sys.argv[3]}: {ir:.0f} instructions, {cmds:.0f} {how}, "
      f"{ir / cmds:.0f} per command")
PY
    rm -f "$work/cg.out"
  done
done
