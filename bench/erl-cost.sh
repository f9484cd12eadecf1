#!/bin/bash
# erl-cost.sh: what ErrorRecoveryLevel 1 recovery costs in throughput (issue 12). Two targets
# at error-recovery-level 1 on loopback: one clean, one corrupting the data digest of RATE of
# the Data-In PDUs it sends; linerate-bench --erl 1 --digest on runs each cell against the
# clean target without faults and against the faulty one with --inject digest-error=RATE (so
# the bench corrupts the same share of its Data-Out), the two alternating, REPS times. Prints
# per cell the median MB/s clean and under faults, their ratio (goal >= 0.95 at 1 in 10,000),
# and how many digests were corrupted; writes OUT/erl-cost-DATE.md.
#
#   bench/erl-cost.sh [BUILD_DIR]      RATE (default 0.0001), REPS (3), SECS (3),
#                                      SIZES (4k,64k,256k), CONNS (1), OUT (bench/results)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rate=${RATE:-0.0001}
reps=${REPS:-3}
secs=${SECS:-3}
sizes=${SIZES:-4k,64k,256k}
conns=${CONNS:-1}
out=${OUT:-$root/bench/results}
. "$root/tests/integration/bench_lib.sh"
mkdir -p "$out"
work=$(mktemp -d /tmp/linerate-erlcost.XXXXXX)
# start() runs in a command substitution (a subshell): the targets' PIDs go to a file, or the
# cleanup would not know them and the targets would outlive the script
cleanup() {
  [ -s "$work/pids" ] && while read -r p; do kill "$p" 2>/dev/null; done <"$work/pids"
  wait 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
[ -n "${KEEP:-}" ] && echo "erl-cost: work in $work" >&2

start() {   # name extra-args...
  local name=$1 port; shift
  port=$(free_port) || { echo "erl-cost: no free port" >&2; exit 2; }
  "$build/linerate-target" --listen "127.0.0.1:$port" --lun ram:256M,prealloc --threads 1 \
    --error-recovery-level 1 --log-level warn "$@" >"$work/$name.url" 2>"$work/$name.log" &
  echo $! >>"$work/pids"
  for _ in $(seq 100); do [ -s "$work/$name.url" ] && break; sleep 0.1; done
  head -1 "$work/$name.url"
}
clean_url=$(start clean)
fault_url=$(start faulty --inject "digest-error=$rate")
# fill both LUNs once so reads move real data
for u in "$clean_url" "$fault_url"; do
  "$build/linerate-bench" --sizes 256k --rw write --seconds 2 --format csv "$u" >/dev/null 2>&1
done

raw=$work/raw
for rep in $(seq "$reps"); do
  for who in clean faulty; do
    [ $((rep % 2)) = 0 ] && { [ $who = clean ] && who=faulty || who=clean; }
    if [ $who = clean ]; then url=$clean_url inj=(); else url=$fault_url inj=(--inject "digest-error=$rate"); fi
    "$build/linerate-bench" --erl 1 --digest on --connections "$conns" --sizes "$sizes" \
      --rw read,write --seconds "$secs" --format csv "${inj[@]}" "$url" >"$work/cells.csv" \
      2>"$work/err" || { echo "erl-cost: bench failed ($who):" >&2; tail -5 "$work/err" >&2; exit 1; }
    tail -n +2 "$work/cells.csv" | while IFS=, read -r size rw _ _ _ mbs _; do
      echo "$who $rep ${rw}_$size $mbs" >>"$raw"
    done
    grep "Injected:" "$work/err" | sed "s/^/$who rep $rep: /" >>"$work/injected"
  done
done

md=$out/erl-cost-$(date +%Y%m%d-%H%M%S).md
{
  echo "# ERL 1 recovery cost: digest-error=$rate on both ends vs clean ($reps reps, ${secs}s cells, $conns conn)"
  echo
  echo "| cell | clean MB/s | faulty MB/s | faulty / clean | median of per-rep ratios |"
  echo "|---|---|---|---|---|"
  # per-rep ratio: the clean and faulty run of one repetition ran back to back, so their ratio
  # is less exposed to load that comes and goes on a shared machine than the ratio of medians
  awk '{v[$3, $1] = v[$3, $1] " " $4; r[$3, $2, $1] = $4; n[$3] = $2 > n[$3] ? $2 : n[$3]}
    function med(s,   n, x, i, j, t) { n = split(s, x, " "); if (!n) return 0
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
      return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
    END { for (c in n) { a = med(v[c, "clean"]); b = med(v[c, "faulty"]); p = ""
        for (i = 1; i <= n[c]; i++) if (r[c, i, "clean"] > 0) p = p " " r[c, i, "faulty"] / r[c, i, "clean"]
        printf "| %s | %.0f | %.0f | %.3f | %.3f |\n", c, a, b, (a > 0 ? b / a : 0), med(p) } }' "$raw" | sort
  echo
  echo "Faults injected by the bench (the target corrupts its Data-In digests at the same rate):"
  echo
  sed 's/^/    /' "$work/injected"
} >"$md"
cat "$md"
echo "erl-cost: wrote $md" >&2
