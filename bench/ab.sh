#!/bin/bash
# ab.sh: is a change a step back in speed? Runs bench/compare.sh against two builds in turn
# (A, B, A, B, ...: alternating, so drift of the machine hits both alike) and prints, for every
# figure linerate itself produced, the median of A, the median of B, each run, and B / A.
#
#   bench/ab.sh OLD_BUILD_DIR NEW_BUILD_DIR        ROUNDS=2 rounds of QUICK=1 compare runs
#
# Environment: ROUNDS (default 2), QUICK (passed on, default 1), OUT (default bench/results;
# the table goes to OUT/ab-DATE.md, the raw lines of every run to OUT/ab-DATE.raw, prefixed
# with the build label and round).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# = 2 ] || { echo "usage: bench/ab.sh OLD_BUILD_DIR NEW_BUILD_DIR" >&2; exit 2; }
a=$(cd "$1" && pwd) || exit 2
b=$(cd "$2" && pwd) || exit 2
rounds=${ROUNDS:-2}
out=${OUT:-$root/bench/results}
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
raw=$out/ab-$stamp.raw
md=$out/ab-$stamp.md
work=$(mktemp -d /tmp/linerate-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT

for r in $(seq "$rounds"); do
  for label in A B; do
    dir=$a; [ $label = B ] && dir=$b
    echo "ab: round $r/$rounds, build $label ($dir)" >&2
    rm -rf "$work/run" && mkdir -p "$work/run"
    QUICK=${QUICK:-1} OUT="$work/run" "$root/bench/compare.sh" "$dir" >"$work/run.log" 2>&1 ||
      echo "ab: compare.sh on $label round $r reported failed goals (figures kept)" >&2
    f=$(ls "$work"/run/compare-*.raw 2>/dev/null | head -1)
    [ -n "$f" ] || { echo "ab: no results from $label round $r" >&2; tail -5 "$work/run.log" >&2; continue; }
    # linerate's own figures (lr and the null LUN); iperf3 for the wire's ceiling
    awk -v l=$label -v r=$r '$2 == "lr" || $2 == "null" || $2 == "iperf3" {print l, r, $0}' "$f" >>"$raw"
  done
done

{
  echo "# A/B: $a (A) vs $b (B), $rounds rounds, alternating"
  echo
  echo "| test | who | figure | A median | B median | B / A | A runs | B runs |"
  echo "|---|---|---|---|---|---|---|---|"
  awk '{k = $3 " " $4 " " $6; v[k, $1] = v[k, $1] " " $7; keys[k] = 1}
    function med(s,   n, x, i, j, t) {
      n = split(s, x, " "); if (!n) return ""
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
      return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2 }
    END { for (k in keys) {
        split(k, p, " "); ma = med(v[k, "A"]); mb = med(v[k, "B"])
        ratio = (ma != "" && mb != "" && ma + 0 > 0) ? sprintf("%.3f", mb / ma) : "n/a"
        printf "| %s | %s | %s | %s | %s | %s |%s |%s |\n", p[1], p[2], p[3], ma, mb, ratio, v[k, "A"], v[k, "B"] } }' "$raw" |
    sort -t'|' -k2,2 -k4,4
} >"$md"
cat "$md"
echo "ab: wrote $md and $raw" >&2
