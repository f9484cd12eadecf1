#!/bin/bash
# metrics-cost.sh: what the metrics cost on the data path (issue 15). Two builds of the same
# tree, OLD configured with `meson setup -Dmetrics=false` (the counting compiled out, see
# src/util/iostats.h) and NEW with the default -Dmetrics=true, e.g.
#   meson setup build-nometrics -Dmetrics=false --buildtype=release -Db_ndebug=false
#   PIN=1 bench/metrics-cost.sh build-nometrics build
# each serving a RAM LUN (--threads 1, the target pinned to CPU
# 0 and linerate-bench to CPU 1 when PIN=1), NEW also with --metrics on and scraped with curl
# every second while the bench runs. linerate-bench 4 KiB write and read (QD 32) against each,
# the two builds taking turns in alternating order (A B, B A, ...) so the machine's drift hits
# both alike. Prints per op the median IOPS and target CPU per KB of each build, and the median
# of the per-round ratios NEW / OLD; writes OUT/metrics-cost-DATE.md (and .raw).
#
# With PERF=1 the target runs under `perf stat -e instructions:u,cycles:u` and the table also
# gives user-space instructions and cycles per command (commands from the bench's IOPS times
# its seconds, login and setup included): the counting's cost without the machine's noise.
# Where the machine has no hardware counters (a VM: perf says <not supported>), PERF=callgrind
# counts the target's instructions under valgrind's callgrind instead, from once it listens
# (callgrind_control -i on) to its exit: login and commands, not the LUN's setup. It runs
# many times slower, so IOPS and CPU/KB of such a run say nothing; instructions per command do.
#
#   bench/metrics-cost.sh OLD_BUILD_DIR NEW_BUILD_DIR    REPS (8), SECS (3), QD (32),
#                                                        PIN (1), PERF (0, 1, callgrind),
#                                                        OUT (bench/results), SCRAPE (1: NEW
#                                                        with --metrics, scraped; 0: neither,
#                                                        the data path's counting alone),
#                                                        PORT (iSCSI on the first free pair from
#                                                        PORT on, metrics on the next; default any)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# = 2 ] || { echo "usage: bench/metrics-cost.sh OLD_BUILD_DIR NEW_BUILD_DIR" >&2; exit 2; }
a=$(cd "$1" && pwd) || exit 2
b=$(cd "$2" && pwd) || exit 2
reps=${REPS:-8}
secs=${SECS:-3}
qd=${QD:-32}
pin=${PIN:-1}
perf=${PERF:-0}
scrape=${SCRAPE:-1}
out=${OUT:-$root/bench/results}
. "$root/tests/integration/bench_lib.sh"
mkdir -p "$out"
stamp=$(date +%Y%m%d-%H%M%S)
raw=$out/metrics-cost-$stamp.raw
md=$out/metrics-cost-$stamp.md
work=$(mktemp -d /tmp/linerate-mcost.XXXXXX)
tpid=""
spid=""
cleanup() {
  [ -n "$spid" ] && kill "$spid" 2>/dev/null
  [ -n "$tpid" ] && kill "$tpid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
cpu() { [ "$pin" = 1 ] && echo "taskset -c $1"; }

run_one() {   # label build_dir round
  local label=$1 dir=$2 r=$3 port mport extra=() try p=${PORT:-} ppid
  # With PORT, a shared machine's range: another program's connections may hold the port the
  # moment the target binds it, so a refused bind moves on to the next free ones.
  for try in $(seq 20); do
    if [ -n "${PORT:-}" ]; then
      # two ports no socket has, TIME-WAIT included (others' outgoing connections end there,
      # and a bind over one fails): the iSCSI one and the metrics one
      port="" mport=""
      while [ "$p" -lt $((PORT + 1000)) ] && [ -z "$mport" ]; do
        if ! ss -Htan "sport = :$p" | grep -q .; then
          if [ -z "$port" ]; then port=$p; else mport=$p; fi
        fi
        p=$((p + 1))
      done
      [ -n "$mport" ] || { echo "metrics-cost: no free ports from $PORT" >&2; exit 2; }
    else
      port=$(free_port) || { echo "metrics-cost: no free port" >&2; exit 2; }
      mport=$((port + 1000)) # free_port checked it
    fi
    extra=()
    [ "$label" = B ] && [ "$scrape" = 1 ] && extra=(--metrics "127.0.0.1:$mport")
    : >"$work/url"
    local wrap=()
    [ "$perf" = 1 ] && wrap=(perf stat -e instructions:u,cycles:u -x, -o "$work/perf.txt" --)
  [ "$perf" = callgrind ] &&
    wrap=(valgrind -q --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/cg.out")
    $(cpu 0) "${wrap[@]}" "$dir/linerate-target" --listen "127.0.0.1:$port" --lun ram:256M,prealloc \
      --threads 1 --ctl-socket none --log-level warn "${extra[@]}" >"$work/url" 2>"$work/target.log" &
    tpid=$!
    for _ in $(seq 600); do
      [ -s "$work/url" ] && break
      kill -0 "$tpid" 2>/dev/null || break
      sleep 0.1
    done
    ppid=$tpid
    [ -s "$work/url" ] && break
    wait "$ppid" 2>/dev/null
    tpid=""
    grep -q "Address already in use" "$work/target.log" || break
  done
  [ "$perf" = 1 ] && tpid=$(pgrep -P "$ppid" | head -1)
  [ -s "$work/url" ] || { echo "metrics-cost: target $label did not start" >&2; cat "$work/target.log" >&2; exit 1; }
  [ "$perf" = callgrind ] && callgrind_control -i on "$tpid" >/dev/null 2>&1
  if [ "$label" = B ] && [ "$scrape" = 1 ]; then
    (while sleep 1; do curl -s -o /dev/null "http://127.0.0.1:$mport/metrics"; done) &
    spid=$!
  fi
  $(cpu 1) "$dir/linerate-bench" --sizes 4k --rw write,read --seconds "$secs" --qd "$qd" \
    --format json --target-pid "$tpid" "$(head -1 "$work/url")" >"$work/bench.json" 2>"$work/bench.err" ||
    echo "metrics-cost: bench against $label round $r failed" >&2
  [ -n "$spid" ] && { kill "$spid"; wait "$spid" 2>/dev/null; spid=""; }
  kill "$tpid"; wait "$ppid" 2>/dev/null; tpid=""
  if [ "$perf" = callgrind ]; then # as perf stat -x, writes it: VALUE,,EVENT
    echo "$(awk '/^(summary|totals):/ { print $2; exit }' "$work/cg.out"),,instructions:u" >"$work/perf.txt"
    rm -f "$work/cg.out"*
  fi
  python3 - "$work/bench.json" "$label" "$r" "$secs" "$work/perf.txt" "$perf" >>"$raw" <<'EOF'
import json, sys
cells = json.load(open(sys.argv[1]))
ins = cyc = 0.0
if sys.argv[6] != "0":
    for line in open(sys.argv[5]):
        f = line.split(",")
        if len(f) > 2 and f[2].startswith("instructions"):
            ins = float(f[0])
        if len(f) > 2 and f[2].startswith("cycles"):
            cyc = float(f[0])
cmds = sum(c["iops"] for c in cells) * float(sys.argv[4])
for c in cells:
    print(sys.argv[2], sys.argv[3], c["rw"], c["iops"], c["target_us_per_kb"],
          ins / cmds if cmds else 0, cyc / cmds if cmds else 0)
EOF
  rm -f "$work/perf.txt"
}

for r in $(seq "$reps"); do
  if ((r % 2)); then order="A B"; else order="B A"; fi
  for label in $order; do
    dir=$a; [ "$label" = B ] && dir=$b
    echo "metrics-cost: round $r/$reps, $label" >&2
    run_one "$label" "$dir" "$r"
  done
done

python3 - "$raw" "$a" "$b" "$reps" "$secs" "$qd" "$pin" "$perf" "$scrape" >"$md" <<'EOF'
import statistics as st, sys
raw, a, b, reps, secs, qd, pin, perf, scrape = sys.argv[1:]
rows = [l.split() for l in open(raw)]
v = {}
for label, r, rw, iops, cpukb, ins, cyc in rows:
    v.setdefault((rw, label), {})[int(r)] = (float(iops), float(cpukb), float(ins), float(cyc))
print(f"# Metrics cost: {a} (A, -Dmetrics=false: no counters) vs {b} (B, counters"
      + (" + --metrics scraped every 1 s)" if scrape == "1" else ", no --metrics)"))
print()
print(f"linerate-bench 4 KiB, QD {qd}, {secs} s per cell, {reps} rounds alternating (A B, B A, ...),")
print(f"RAM LUN (prealloc), target --threads 1{' on CPU 0, bench on CPU 1' if pin == '1' else ''}"
      + (", the target under callgrind (IOPS and CPU/KB are valgrind's, not the target's)."
         if perf == "callgrind" else "."))
print("Ratios are B / A per round (paired), then the median; CPU/KB is the target's utime+stime")
print("per KB moved (lower is better).")
print()
print("| op | A IOPS (median) | B IOPS (median) | B/A IOPS (median of paired) | min..max | A tgt us/KB | B tgt us/KB | B/A us/KB (median of paired) | min..max |")
print("|---|---|---|---|---|---|---|---|---|")
for rw in ("write", "read"):
    A, B = v.get((rw, "A"), {}), v.get((rw, "B"), {})
    rounds = sorted(set(A) & set(B))
    if not rounds:
        continue
    ri = [B[r][0] / A[r][0] for r in rounds if A[r][0] > 0]
    rc = [B[r][1] / A[r][1] for r in rounds if A[r][1] > 0]
    print(f"| {rw} | {st.median(x[0] for x in A.values()):.0f} | {st.median(x[0] for x in B.values()):.0f} "
          f"| {st.median(ri):.3f} | {min(ri):.3f}..{max(ri):.3f} "
          f"| {st.median(x[1] for x in A.values()):.3f} | {st.median(x[1] for x in B.values()):.3f} "
          f"| {st.median(rc):.3f} | {min(rc):.3f}..{max(rc):.3f} |")
A, B = v.get(("write", "A"), {}), v.get(("write", "B"), {})
rounds = sorted(set(A) & set(B))
if rounds and all(A[r][2] > 0 and B[r][2] > 0 for r in rounds):
    print()
    print("Under perf stat or callgrind (user space, the whole run of both cells, per command):")
    print()
    print("| | A (median) | B (median) | B - A | B/A (median of paired) | min..max |")
    print("|---|---|---|---|---|---|")
    for k, name in ((2, "instructions"), (3, "cycles")):
        if not all(A[r][k] > 0 and B[r][k] > 0 for r in rounds):
            continue  # callgrind counts no cycles
        ma, mb = st.median(A[r][k] for r in rounds), st.median(B[r][k] for r in rounds)
        rr = [B[r][k] / A[r][k] for r in rounds]
        print(f"| {name} | {ma:.0f} | {mb:.0f} | {mb - ma:+.0f} | {st.median(rr):.3f} | {min(rr):.3f}..{max(rr):.3f} |")
print()
print("Per round (IOPS, us/KB):")
print()
print("| round | op | A | B |")
print("|---|---|---|---|")
for rw in ("write", "read"):
    A, B = v.get((rw, "A"), {}), v.get((rw, "B"), {})
    for r in sorted(set(A) | set(B)):
        fa = f"{A[r][0]:.0f}, {A[r][1]:.3f}" if r in A else "-"
        fb = f"{B[r][0]:.0f}, {B[r][1]:.3f}" if r in B else "-"
        print(f"| {r} | {rw} | {fa} | {fb} |")
EOF
cat "$md"
echo "metrics-cost: wrote $md and $raw" >&2
