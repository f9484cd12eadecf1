#!/bin/bash
# pair.sh: is one build faster than another on a few cells? Two linerate-targets, A and B, run
# side by side on CPU 0 (--threads 1, each its own LUN), the client on CPU 1; each cell runs
# against A and B in turn (which goes first alternates by round), and the median of the
# per-round ratios B / A is printed for the IOPS and for the target's CPU per KB moved. Cheaper
# than bench/ab.sh (which runs all of compare.sh per build) when a change touches a few cells.
#
#   BA=build-old BB=build bench/pair.sh
#
# Environment: BA, BB (build dirs; default build-base, build), ROUNDS (6), SECS (linerate-bench
# seconds per cell, 2), BENCH_ARGS (extra linerate-bench options, e.g. "--digest on"), LUN
# (ram:1G,prealloc; LUNA / LUNB: each side its own, e.g. one build with ",send-min=off" on A),
# ARGSA / ARGSB (extra linerate-target options), CELLS (default
# "read:4k:1 write:4k:1 read:4k:8"): RW:SIZE:SESSIONS[:CONNECTIONS] for linerate-bench
# (`--sessions`, `--connections`: MC/S), or RW:SIZE:q for qemu-img bench at QD 32 (6 GiB or
# 200000 requests; the target's CPU from /proc/PID/stat), RW:SIZE:qN at QD N (fewer requests
# below 32: a QD 1 cell is 26250), STEAL_MAX (10): a round in which
# the hypervisor took more than this percentage of the CPUs' time (steal in /proc/stat) is
# printed but left out of the medians; on a shared host one such round can read 3x either way.
# Per-round figures, with each round's steal, go to stderr.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
BA=${BA:-$root/build-base}; BB=${BB:-$root/build}
ROUNDS=${ROUNDS:-6}; SECS=${SECS:-2}; LUN=${LUN:-ram:1G,prealloc}
CELLS=${CELLS:-"read:4k:1 write:4k:1 read:4k:8"}
for b in "$BA" "$BB"; do
  [ -x "$b/linerate-target" ] || { echo "pair.sh: no $b/linerate-target" >&2; exit 2; }
done
w=$(mktemp -d /tmp/linerate-pair.XXXXXX)
pa=; pb=
trap 'kill $pa $pb 2>/dev/null; wait 2>/dev/null; rm -rf "$w"' EXIT
port=$((20000 + RANDOM % 10000))
start() { # build port extra-args
  taskset -c 0 "$1/linerate-target" --listen 127.0.0.1:$2 --threads 1 --lun "$4" \
    --ctl-socket none --log-level warn $3 >"$w/$2.url" 2>"$w/$2.log" &
}
start "$BA" $port "${ARGSA:-}" "${LUNA:-$LUN}"; pa=$!
start "$BB" $((port + 1)) "${ARGSB:-}" "${LUNB:-$LUN}"; pb=$!
for _ in $(seq 300); do [ -s "$w/$port.url" ] && [ -s "$w/$((port + 1)).url" ] && break; sleep 0.1; done
ua=$(head -1 "$w/$port.url"); ub=$(head -1 "$w/$((port + 1)).url")
[ -n "$ua" ] && [ -n "$ub" ] || { echo "pair.sh: a target did not start" >&2; cat "$w"/*.log >&2; exit 1; }
# fill both LUNs (a thin region reads as zeros without being read)
for u in "$ua" "$ub"; do
  taskset -c 1 "$BB/linerate-bench" --sizes 1m --rw write --seconds 2 "$u" >/dev/null 2>&1
done

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # url pid rw size sessions|q connections -> "iops target-us-per-KB"
  if [ "${5:0:1}" = q ]; then
    local by c wr="" qd=${5#q}; qd=${qd:-32}; by=$(numfmt --from=iec "${4^^}"); c=$(((6 << 30) / by))
    [ $c -gt 200000 ] && c=200000
    [ "$qd" -lt 32 ] && [ $c -gt $((200000 * qd / 32 + 20000)) ] && c=$((200000 * qd / 32 + 20000))
    [ "$3" = write ] && wr=-w
    local t0 s0 s1 t1; t0=$(ticks "$2"); s0=$(date +%s.%N)
    taskset -c 1 qemu-img bench -f raw -t none -n $wr -s "$by" -d "$qd" -c $c "$1" >/dev/null 2>&1
    s1=$(date +%s.%N); t1=$(ticks "$2")
    awk -v c=$c -v a="$s0" -v b="$s1" -v t=$((t1 - t0)) -v by="$by" -v hz="$(getconf CLK_TCK)" \
      'BEGIN { printf "%.0f %.4f\n", c / (b - a), t / hz * 1e6 / (c * by / 1024) }'
    return
  fi
  taskset -c 1 "$BB/linerate-bench" --format csv --seconds "$SECS" --sizes "$4" --rw "$3" \
    --sessions "$5" --connections "${6:-1}" ${BENCH_ARGS:-} --target-pid "$2" "$1" 2>/dev/null | tail -n +2 | awk -F, '{print $7, $11}'
}
cpu_times() { awk '/^cpu /{print $9, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
steal_pct() { # "steal total" before, after -> percent of the CPUs' time stolen in between
  echo "$1 $2" | awk '{ d = $4 - $2; printf "%.0f", (d > 0 ? 100 * ($3 - $1) / d : 0) }'
}
med() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print NR == 0 ? "n/a" : (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "# pair.sh: A $BA (${LUNA:-$LUN}), B $BB (${LUNB:-$LUN}), $ROUNDS rounds"
for c in $CELLS; do
  IFS=: read -r rw sz ss cn <<<"$c"
  ri=; rc=; stolen=0
  for r in $(seq "$ROUNDS"); do
    t0=$(cpu_times)
    if [ $((r % 2)) = 1 ]; then a=$(run "$ua" $pa "$rw" "$sz" "$ss" "$cn"); b=$(run "$ub" $pb "$rw" "$sz" "$ss" "$cn")
    else b=$(run "$ub" $pb "$rw" "$sz" "$ss" "$cn"); a=$(run "$ua" $pa "$rw" "$sz" "$ss" "$cn"); fi
    st=$(steal_pct "$t0" "$(cpu_times)")
    echo "  $c round $r  A: $a  B: $b  steal $st%" >&2
    read -r ai ac <<<"$a"; read -r bi bc <<<"$b"
    [ -n "${ai:-}" ] && [ -n "${bi:-}" ] || continue
    if [ "$st" -gt "${STEAL_MAX:-10}" ]; then stolen=$((stolen + 1)); continue; fi
    ri="$ri $(awk -v x="$ai" -v y="$bi" 'BEGIN { printf "%.3f", y / x }')"
    rc="$rc $(awk -v x="$ac" -v y="$bc" 'BEGIN { printf "%.3f", (x > 0 ? y / x : 0) }')"
  done
  left=""; [ $stolen -gt 0 ] && left="  ($stolen round(s) left out: steal over ${STEAL_MAX:-10}%)"
  echo "$c  IOPS B/A $(echo "$ri" | med) [$ri ]  target CPU/KB B/A $(echo "$rc" | med) [$rc ]$left"
done
