#!/bin/bash
# qemu-ab.sh: qemu-img bench (libiscsi) against several linerate-target configurations, pinned
# as issue 14 measures (target on CPU 0 with --threads 1, qemu-img on CPU 1), the configurations
# taking turns run by run so that load from other jobs on a shared machine hits them alike.
#
#   bench/qemu-ab.sh LABEL=BUILD_DIR[,ENV=VALUE...][,lun=SPEC] ...
#
# e.g. bench/qemu-ab.sh old=/tmp/old new=build 'thp=build,lun=ram:1G,prealloc'
# Environment: REPS (rounds, default 8), DEPTHS (default "4 32"), SIZE (bytes, default 262144),
# BYTES (moved per run, default 512 MiB), RW (read or write, default read), PIN (1 default; 0
# runs everything unpinned with the target's default threads), OUT (directory for the .raw and
# .md files, default bench/results). Each target gets its own RAM LUN (default ram:1G), filled
# once with 1 MiB writes so reads move real data (qemu answers reads of unmapped ranges itself).
# Per run: MB/s, the target's CPU per KB (schedstat of all its threads: nanoseconds, not ticks)
# and qemu-img's (user+sys). The table gives medians and, for each configuration after the
# first, the median of its per-round ratios to the first (the paired figure; single runs on a
# 2-CPU machine shared with other jobs vary 2-5x).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
reps=${REPS:-8} depths=${DEPTHS:-"4 32"} size=${SIZE:-262144} bytes=${BYTES:-536870912}
rw=${RW:-read} pin=${PIN:-1} out=${OUT:-$root/bench/results}
command -v qemu-img >/dev/null || { echo "qemu-ab.sh: qemu-img is not installed" >&2; exit 2; }
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
raw=$out/qemu-ab-$stamp.raw md=$out/qemu-ab-$stamp.md
work=$(mktemp -d /tmp/linerate-qemu-ab.XXXXXX)
iqn=iqn.2026-11.org.linerate:default
tcpu=() ccpu=()
[ "$pin" = 1 ] && tcpu=(taskset -c 0) ccpu=(taskset -c 1)

port_free() { [ -z "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
labels=() pids=() urls=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for cfg in "$@"; do
  label=${cfg%%=*} rest=${cfg#*=}
  lun=ram:1G
  case $rest in *,lun=*) lun=${rest#*,lun=} rest=${rest%%,lun=*} ;; esac
  IFS=, read -ra parts <<<"$rest"
  dir=$(cd "${parts[0]}" && pwd) || exit 2
  [ -x "$dir/linerate-target" ] || { echo "qemu-ab.sh: $dir/linerate-target missing" >&2; exit 2; }
  port=
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 11000))
    port_free $p && { port=$p; break; }
  done
  [ -n "$port" ] || { echo "qemu-ab.sh: no free port" >&2; exit 1; }
  threads=(); [ "$pin" = 1 ] && threads=(--threads 1)
  env "${parts[@]:1}" "${tcpu[@]}" "$dir/linerate-target" --listen 127.0.0.1:$port "${threads[@]}" \
    --lun "$lun" --log-level warn >"$work/$label.url" 2>"$work/$label.log" &
  pids+=($!) labels+=("$label")
  for _ in $(seq 600); do [ -s "$work/$label.url" ] && break; sleep 0.1; done
  url=$(head -1 "$work/$label.url")
  case $url in iscsi://*) ;; *) cat "$work/$label.log" >&2; echo "qemu-ab.sh: $label did not start" >&2; exit 1 ;; esac
  urls+=("$url")
  "${ccpu[@]}" qemu-img bench -f raw -t none -n -w -s 1M -d 8 -c $((bytes >> 20)) "$url" >/dev/null 2>&1 ||
    { echo "qemu-ab.sh: filling $label failed" >&2; exit 1; }
done

target_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'; }
count=$((bytes / size))
w=; [ "$rw" = write ] && w=-w
echo "# qemu-ab $stamp: $rw, $size-byte requests, $count per run, depths $depths, pin=$pin" >"$raw"
for r in $(seq "$reps"); do
  for d in $depths; do
    for i in "${!labels[@]}"; do
      a=$(target_ns "${pids[$i]}")
      res=$( { /usr/bin/time -f "CPU %U %S" "${ccpu[@]}" qemu-img bench -f raw -t none -n $w -s "$size" \
               -d "$d" -c "$count" "${urls[$i]}"; } 2>&1)
      b=$(target_ns "${pids[$i]}")
      t=$(sed -n 's/Run completed in \([0-9.]*\) seconds./\1/p' <<<"$res")
      c=$(awk '/^CPU/ {print $2 + $3}' <<<"$res")
      [ -n "$t" ] || { echo "qemu-ab.sh: ${labels[$i]} QD$d round $r failed" >&2; continue; }
      awk -v l="${labels[$i]}" -v r=$r -v d=$d -v t="$t" -v n=$((b - a)) -v c="$c" -v B=$((count * size)) \
        'BEGIN { kb = B / 1024; printf "%s %d QD%d %.0f %.3f %.3f\n", l, r, d, B / t / 1e6, n / 1e3 / kb, c * 1e6 / kb }' >>"$raw"
    done
  done
  echo "qemu-ab: round $r/$reps done" >&2
done

{
  echo "# qemu-img $rw, $size bytes, $reps rounds alternating ($(date -u +%Y-%m-%d), pin=$pin)"
  echo
  echo "| config | depth | MB/s median | paired ratio to ${labels[0]} | target us/KB | qemu-img us/KB | MB/s runs |"
  echo "|---|---|---|---|---|---|---|"
  awk -v first="${labels[0]}" 'NR > 1 {
      k = $1 " " $3; v[k] = v[k] " " $4; tc[k] = tc[k] " " $5; cc[k] = cc[k] " " $6
      mb[$1, $3, $2] = $4; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
    function med(s,   m, x, i, j, t) {
      m = split(s, x, " "); if (!m) return 0
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
      return m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2 }
    END { for (i = 1; i <= n; i++) { split(order[i], p, " "); ratios = ""
        if (p[1] != first) for (r = 1; r <= 1000; r++) if ((p[1], p[2], r) in mb && (first, p[2], r) in mb && mb[first, p[2], r] > 0)
          ratios = ratios " " mb[p[1], p[2], r] / mb[first, p[2], r]
        printf "| %s | %s | %.0f | %s | %.3f | %.3f |%s |\n", p[1], p[2], med(v[order[i]]),
          ratios == "" ? "-" : sprintf("%.2f", med(ratios)), med(tc[order[i]]), med(cc[order[i]]), v[order[i]] } }' "$raw"
} >"$md"
cat "$md"
echo "qemu-ab: wrote $md and $raw" >&2
