#!/bin/bash
# limits.sh: a LUN's caps (docs/qos.md, issue 29 item 5) measured with linerate-bench. One
# target (--threads 2) with two RAM LUNs; LUN 0's caps are set live with linerate-ctl between
# runs, LUN 1 has none.
#   1. LUN 0 at IOPS (iops=N), 4 KiB reads, 1, 2 and 4 sessions at QD 32 pushing past it:
#      the measured IOPS against the cap;
#   2. LUN 0 at MBPS MiB/s (mbps=M), 64 KiB reads, 1, 2 and 4 sessions: the measured MiB/s;
#   3. LUN 1 (no cap, one session) alone, then beside LUN 0 capped at IOPS with 2 sessions
#      pushing past the cap, twice in turns: LUN 1's IOPS beside / alone (1.00: not slowed),
#      and LUN 0's rate meanwhile.
# Each bench run lasts SECS (default 4) plus its login: at most 10 s (the machine is shared).
# Caps are per gateway: this is one daemon. Prints a markdown table; OUT=FILE writes it there.
#
#   bench/limits.sh [BUILD_DIR]        IOPS (2000), MBPS (50), SECS (4), OUT
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd) || exit 2
iops=${IOPS:-2000}
mbps=${MBPS:-50}
secs=${SECS:-4}
. "$root/tests/integration/bench_lib.sh"
work=$(mktemp -d /tmp/linerate-limits.XXXXXX)
tpid=""
trap '[ -n "$tpid" ] && kill "$tpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
port=$(free_port) || exit 2
"$build/linerate-target" --listen "127.0.0.1:$port" --lun ram:64M --lun ram:64M --threads 2 \
  --ctl-socket "$work/ctl.sock" --log-level warn >"$work/url" 2>"$work/target.log" &
tpid=$!
for _ in $(seq 100); do [ "$(wc -l <"$work/url")" -ge 2 ] && break; sleep 0.1; done
url0=$(sed -n 1p "$work/url")
url1=$(sed -n 2p "$work/url")
[ -n "$url1" ] || { echo "limits: the target did not start" >&2; cat "$work/target.log" >&2; exit 1; }
ctl() { "$build/linerate-ctl" --socket "$work/ctl.sock" "$@" >/dev/null || exit 1; }
# bench URL SESSIONS SIZE OUTFILE: IOPS and MB/s (10^6) of one cell, as JSON
bench() {
  "$build/linerate-bench" --sizes "$3" --rw read --seconds "$secs" --qd 32 --sessions "$2" \
    --format json "$1" >"$4" 2>"$work/bench.err" || { cat "$work/bench.err" >&2; exit 1; }
}
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[0][sys.argv[2]])" "$1" "$2"; }
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.3f}')" "$1" "$2"; }

rows=()
ctl set lun 0 "iops=$iops"
for s in 1 2 4; do
  bench "$url0" "$s" 4k "$work/c.json"
  got=$(field "$work/c.json" iops)
  rows+=("| iops=$iops | 4 KiB reads | $s | $got IOPS | $(ratio "$got" "$iops") |")
done
ctl set lun 0 none
ctl set lun 0 "mbps=$mbps"
for s in 1 2 4; do
  bench "$url0" "$s" 64k "$work/c.json"
  mib=$(python3 -c "import sys; print(f'{float(sys.argv[1]) * 1e6 / 1048576:.2f}')" \
    "$(field "$work/c.json" mb_per_s)")
  rows+=("| mbps=$mbps | 64 KiB reads | $s | $mib MiB/s | $(ratio "$mib" "$mbps") |")
done
ctl set lun 0 none
ctl set lun 0 "iops=$iops"
# LUN 1 with one session: on one reactor whether the capped sessions share it or not (the
# listener places connections by count, so two sessions might land on one reactor beside two
# others and halve for that reason alone); alone and beside taken in turns, twice
alone=() beside=() capped=()
for _ in 1 2; do
  bench "$url1" 1 4k "$work/alone.json"
  alone+=("$(field "$work/alone.json" iops)")
  bench "$url0" 2 4k "$work/capped.json" &
  bpid=$!
  bench "$url1" 1 4k "$work/beside.json"
  wait "$bpid"
  beside+=("$(field "$work/beside.json" iops)")
  capped+=("$(field "$work/capped.json" iops)")
done
sum() { python3 -c "import sys; print(sum(float(x) for x in sys.argv[1:]))" "$@"; }

echo "| cap (LUN 0) | load | sessions | measured | measured / cap |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "| uncapped LUN 1, 1 session 4 KiB reads QD 32 | IOPS, run 1 | IOPS, run 2 |"
echo "|---|---|---|"
echo "| alone | ${alone[0]} | ${alone[1]} |"
echo "| beside LUN 0 at iops=$iops (2 sessions pushing past it) | ${beside[0]} | ${beside[1]} |"
echo "| beside / alone (both runs) | $(ratio "$(sum "${beside[@]}")" "$(sum "${alone[@]}")") | |"
echo "| LUN 0 meanwhile, / its cap | $(ratio "${capped[0]}" "$iops") | $(ratio "${capped[1]}" "$iops") |"
