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
#   4. An initiator entry's caps: a second daemon from a config file, one RAM LUN (no cap of
#      its own) that two [host] entries map, "capped" (iops=IOPS, then mbps=MBPS, set by a
#      reload) and "free" (none); linerate-bench --initiator-name logs in as each: the capped
#      entry with 1, 2 and 4 sessions of the one name against its cap, then the free host
#      alone and beside the capped one (2 sessions pushing past the cap), twice in turns.
# Each bench run lasts SECS (default 4) plus its login: at most 10 s (the machine is shared).
# Caps are per gateway: this is one daemon. Prints markdown tables; OUT=FILE writes them there.
#
#   bench/limits.sh [BUILD_DIR]        IOPS (2000), MBPS (50), SECS (4), OUT;
#                                      PARTS=entry for part 4 alone, PARTS=lun for 1-3
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd) || exit 2
iops=${IOPS:-2000}
mbps=${MBPS:-50}
secs=${SECS:-4}
. "$root/tests/integration/bench_lib.sh"
work=$(mktemp -d /tmp/linerate-limits.XXXXXX)
tpid="" epid=""
trap '[ -n "$tpid" ] && kill "$tpid" 2>/dev/null; [ -n "$epid" ] && kill "$epid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
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

parts=${PARTS:-lun,entry}
sum() { python3 -c "import sys; print(sum(float(x) for x in sys.argv[1:]))" "$@"; }
# turns: run_free alone, then beside run_capped (2 sessions past the cap), twice in turns;
# IOPS into alone, beside, capped
turns() {
  alone=() beside=() capped=()
  for _ in 1 2; do
    run_free "$work/alone.json"
    alone+=("$(field "$work/alone.json" iops)")
    run_capped "$work/capped.json" &
    bpid=$!
    run_free "$work/beside.json"
    wait "$bpid"
    beside+=("$(field "$work/beside.json" iops)")
    capped+=("$(field "$work/capped.json" iops)")
  done
}
# beside_table WHAT CAPPED-CAP CAPPED-NAME
beside_table() {
  echo
  echo "| $1 | IOPS, run 1 | IOPS, run 2 |"
  echo "|---|---|---|"
  echo "| alone | ${alone[0]} | ${alone[1]} |"
  echo "| beside $2 (2 sessions pushing past it) | ${beside[0]} | ${beside[1]} |"
  echo "| beside / alone (both runs) | $(ratio "$(sum "${beside[@]}")" "$(sum "${alone[@]}")") | |"
  echo "| $3 meanwhile, / its cap | $(ratio "${capped[0]}" "$iops") | $(ratio "${capped[1]}" "$iops") |"
}
lun_part() {
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
run_free() { bench "$url1" 1 4k "$1"; }
run_capped() { bench "$url0" 2 4k "$1"; }
turns

echo "| cap (LUN 0) | load | sessions | measured | measured / cap |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
beside_table "uncapped LUN 1, 1 session 4 KiB reads QD 32" "LUN 0 at iops=$iops" "LUN 0"
}

# --- 4. an initiator entry's caps ---
entry_part() {
  local cap=iqn.2026-12.org.linerate:capped free=iqn.2026-12.org.linerate:free
  local tgt=iqn.2026-12.org.linerate:entries eport
  eport=$(free_port) || exit 2
  printf '%s\n' "portal = 127.0.0.1:$eport" "threads = 2" "log-level = warn" \
    "ctl-socket = $work/ectl.sock" "[target $tgt]" "lun = ram:64M" "[host $cap]" "map = 0 0" \
    "iops = $iops" "[host $free]" "map = 0 0" >"$work/entries.conf"
  "$build/linerate-target" --config "$work/entries.conf" >/dev/null 2>"$work/etarget.log" &
  epid=$!
  for _ in $(seq 100); do [ -S "$work/ectl.sock" ] && break; sleep 0.1; done
  local url="iscsi://127.0.0.1:$eport/$tgt/0"
  ereload() { "$build/linerate-ctl" --socket "$work/ectl.sock" reload >/dev/null || exit 1; }
  ebench() { # SESSIONS SIZE NAME OUTFILE
    "$build/linerate-bench" --initiator-name "$3" --sizes "$2" --rw read --seconds "$secs" \
      --qd 32 --sessions "$1" --format json "$url" >"$4" 2>"$work/bench.err" ||
      { cat "$work/bench.err" "$work/etarget.log" >&2; exit 1; }
  }
  local erows=() s got mib
  for s in 1 2 4; do
    ebench "$s" 4k "$cap" "$work/c.json"
    got=$(field "$work/c.json" iops)
    erows+=("| iops=$iops | 4 KiB reads | $s | $got IOPS | $(ratio "$got" "$iops") |")
  done
  sed -i "s/^iops = $iops\$/mbps = $mbps/" "$work/entries.conf"
  ereload
  for s in 1 2 4; do
    ebench "$s" 64k "$cap" "$work/c.json"
    mib=$(python3 -c "import sys; print(f'{float(sys.argv[1]) * 1e6 / 1048576:.2f}')" \
      "$(field "$work/c.json" mb_per_s)")
    erows+=("| mbps=$mbps | 64 KiB reads | $s | $mib MiB/s | $(ratio "$mib" "$mbps") |")
  done
  sed -i "s/^mbps = $mbps\$/iops = $iops/" "$work/entries.conf"
  ereload
  run_free() { ebench 1 4k "$free" "$1"; }
  run_capped() { ebench 2 4k "$cap" "$1"; }
  turns
  kill "$epid"; wait "$epid" 2>/dev/null; epid=""
  echo
  echo "| cap (entry capped, its LUN uncapped) | load | sessions of the one name | measured | measured / cap |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${erows[@]}"
  beside_table "host without caps (same LUN), 1 session 4 KiB reads QD 32" \
    "the entry at iops=$iops" "capped entry"
}

[ -n "${OUT:-}" ] && exec > >(tee "$OUT")
case ",$parts," in *,lun,*) lun_part ;; esac
case ",$parts," in *,entry,*) entry_part ;; esac
