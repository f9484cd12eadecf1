#!/bin/bash
# compare.sh: the five figures of issue 4, measured side by side in one run on loopback.
#
#   bench/compare.sh [BUILD_DIR]          full run, about 8-12 minutes
#   QUICK=1 bench/compare.sh              one repetition of everything, about 3 minutes
#
# Environment: REPS (repetitions of each pair, default 5; QUICK=1 sets 1), SECS (seconds per
# linerate-bench cell, default 1.5), QSECS (seconds per qemu-img cell, default 2; QUICK=1
# sets 1; each follows a warm-up run of qbench's size that sets its request count), OUT
# (directory for the results, default bench/results),
# PORT (first of five loopback ports to use: linerate, null LUN, tgt, iperf3, SPDK; default free
# ports picked at random), PIN=1 (issue 14's setup: every target and the iperf3 server on CPU 0,
# linerate-target with --threads 1, every client on CPU 1), NO_SPDK=1 (leave SPDK out),
# LR_LUN (linerate's LUN, default ram:1G,prealloc), PEER_SPDK_HUGE (default 1: SPDK on 2 MiB
# hugepages, as SPDK is deployed; each SPDK start then takes ~25 s while DPDK zeroes them).
#
# It starts linerate-target (LR_LUN, default --threads), a second one on a null LUN
# (the client's ceiling for figure 1: a LUN that does no work), tgt (../shared/tools/peer-tgt,
# RAM-file LUN in /dev/shm, digests offered) and an iperf3 server on free loopback ports, fills
# both LUNs once (so reads move real data: qemu answers reads of regions a thin LUN reports
# unmapped with zeros, without reading), then repeats each pair of measurements REPS times,
# alternating the targets, and takes medians:
#   1. qemu-img bench over libiscsi (QD 32, as ../shared/tools/qbench runs it, for about
#      QSECS seconds) 4 KiB read and write IOPS, linerate / tgt
#   2. the same at 256 KiB, read and write MB/s / iperf3 single-stream loopback MB/s
#   3. 64 KiB reads the same way: target CPU (utime+stime of the target process
#      from /proc/PID/stat over the run) per KB moved, linerate / tgt
#   4. linerate-bench, 1 connection, 4k..256k read and write: digests on vs off, each size's
#      two cells back to back; the figure is the median over repetitions of on/off
#   5. linerate-bench 4 KiB: 2-connection MC/S vs 1 connection at the same QD (median of the
#      paired ratios; the bench runs the two connections on two initiator threads), and
#      --sessions 8 aggregate IOPS against linerate vs against tgt
# SPDK's iscsi_tgt (../shared/tools/peer-spdk, one reactor on CPU 0, RAM bdev) is the third
# column of figures 1, 2, 3 and 5b (issue 14's goals: 4 KiB IOPS >= 1.2x, 256 KiB MB/s >= 1x,
# 64 KiB CPU per KB <= SPDK's). Its reactor busy-polls CPU 0, so it runs only for its own
# measurements in each repetition (started, filled, measured, stopped) with the clients pinned
# to CPU 1; without peer-spdk or a second CPU those rows are left out with a note.
# Prints the table of ratios with their goals (PASS/FAIL) and writes OUT/compare-DATE.md and
# OUT/compare-DATE.raw (one measurement per line: test target rep key value).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${OUT:-$root/bench/results}
quick=${QUICK:-0}
reps=${REPS:-$([ "$quick" = 1 ] && echo 1 || echo 5)}
secs=${SECS:-$([ "$quick" = 1 ] && echo 1 || echo 1.5)}
qsecs=${QSECS:-$([ "$quick" = 1 ] && echo 1 || echo 2)}
peer=${PEER_TGT:-$root/../shared/tools/peer-tgt}
spdk=${PEER_SPDK:-$root/../shared/tools/peer-spdk}
pin=${PIN:-0}
# Like for like with SPDK's RAM bdev (malloc, allocated and touched at start, 2 MiB hugepages
# with PEER_SPDK_HUGE=1, the default here): linerate's RAM LUN preallocated too (huge pages
# where the system grants them). A thin ram: LUN pays a page fault per first-touched page and
# a TLB miss per 4 KiB page; LR_LUN=ram:1G measures that default instead.
lr_lun=${LR_LUN:-ram:1G,prealloc}
export PEER_SPDK_HUGE=${PEER_SPDK_HUGE:-1}
bench=$build/linerate-bench
target=$build/linerate-target
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
raw=$out/compare-$stamp.raw
md=$out/compare-$stamp.md
work=$(mktemp -d /tmp/linerate-compare.XXXXXX)
hz=$(getconf CLK_TCK)
t_start=$(date +%s)

for x in "$bench" "$target" "$peer"; do
  [ -x "$x" ] || { echo "compare.sh: $x is missing (run make)" >&2; exit 2; }
done
for x in qemu-img iperf3 tgtd; do
  command -v $x >/dev/null || { echo "compare.sh: $x is not installed" >&2; exit 2; }
done

log() { echo "compare: $*" >&2; }
record() { echo "$*" >>"$raw"; }   # test target rep key value

port_free() { [ -z "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
free_port() {   # N: PORT+N if PORT is given; else a free port below 32768 (tgtadm -C's limit)
  local p
  if [ -n "${PORT:-}" ]; then
    p=$((PORT + $1))
    port_free $p || { echo "compare.sh: port $p is taken" >&2; exit 1; }
    echo $p; return
  fi
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 11000))   # tgtadm -C takes at most 32767
    port_free $p && port_free $((p + 1000)) && { echo $p; return; }
  done
  echo "compare.sh: no free port" >&2; exit 1
}

# PIN=1: targets on CPU 0, clients on CPU 1 (srv/cli prefix every command)
srv=(); cli=(); lr_threads=()
if [ "$pin" = 1 ]; then
  [ "$(nproc --all)" -ge 2 ] || { echo "compare.sh: PIN=1 needs two CPUs" >&2; exit 2; }
  srv=(taskset -c 0); cli=(taskset -c 1); lr_threads=(--threads 1)
fi
# SPDK: optional, and only with a second CPU for the clients
spdk_note=
if [ "${NO_SPDK:-0}" = 1 ]; then spdk_note="SPDK left out (NO_SPDK=1)."
elif [ ! -x "$spdk" ]; then spdk_note="SPDK left out: no peer-spdk at $spdk."
elif [ "$(nproc --all)" -lt 2 ]; then spdk_note="SPDK left out: its reactor busy-polls a core and this machine has one CPU."
fi

lr_pid=; null_pid=; tgt_port=; iperf_pid=; spdk_port=; spdk_up=
cleanup() {
  [ -n "$spdk_up" ] && "$spdk" stop "$spdk_port" >/dev/null 2>&1
  [ -n "$lr_pid" ] && kill "$lr_pid" 2>/dev/null && wait "$lr_pid" 2>/dev/null
  [ -n "$null_pid" ] && kill "$null_pid" 2>/dev/null && wait "$null_pid" 2>/dev/null
  [ -n "$tgt_port" ] && "$peer" stop "$tgt_port" >/dev/null 2>&1
  [ -n "$iperf_pid" ] && kill "$iperf_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- daemons ----
lr_port=$(free_port 0) || exit 1
"${srv[@]}" "$target" --listen 127.0.0.1:$lr_port "${lr_threads[@]}" --lun "$lr_lun" --ctl-socket none \
  --log-level warn >"$work/lr.url" 2>"$work/lr.log" &
lr_pid=$!
for _ in $(seq 300); do [ -s "$work/lr.url" ] && break; sleep 0.1; done   # prealloc: ~3 s
lr_url=$(head -1 "$work/lr.url")
[ -n "$lr_url" ] || { echo "compare.sh: linerate-target did not start:" >&2; cat "$work/lr.log" >&2; exit 1; }

# The client's own ceiling: a second linerate-target whose LUN does no work (null store:
# reads return zeros, writes are dropped). What qemu-img reaches there is what it can drive.
null_port=$(free_port 1) || exit 1
"${srv[@]}" "$target" --listen 127.0.0.1:$null_port "${lr_threads[@]}" --lun null:1G --ctl-socket none \
  --log-level warn >"$work/null.url" 2>"$work/null.log" &
null_pid=$!
for _ in $(seq 50); do [ -s "$work/null.url" ] && break; sleep 0.1; done
null_url=$(head -1 "$work/null.url")
[ -n "$null_url" ] || { echo "compare.sh: the null-LUN target did not start:" >&2; cat "$work/null.log" >&2; exit 1; }

tgt_port=$(free_port 2) || exit 1
tgt_url=$("${srv[@]}" "$peer" start $tgt_port 1024) || { echo "compare.sh: tgt did not start" >&2; exit 1; }
tgt_pid=$(cat /tmp/peer-tgt-$tgt_port/pid)
# tgt refuses digests unless told to offer them (for the record; figure 4 is linerate's own)
tgtadm -C $((tgt_port + 1000)) --lld iscsi --mode target --op update --tid 1 --name HeaderDigest --value CRC32C,None
tgtadm -C $((tgt_port + 1000)) --lld iscsi --mode target --op update --tid 1 --name DataDigest --value CRC32C,None

iperf_port=$(free_port 3) || exit 1
"${srv[@]}" iperf3 -s -p $iperf_port -B 127.0.0.1 >/dev/null 2>&1 &
iperf_pid=$!
if [ -z "$spdk_note" ]; then spdk_port=$(free_port 4) || exit 1; fi

log "linerate-target pid $lr_pid $lr_url"
log "tgt pid $tgt_pid $tgt_url"
log "reps $reps, bench cell ${secs}s; raw numbers in $raw"
{
  echo "# compare.sh $stamp  reps=$reps secs=$secs"
  echo "# $(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# linerate $lr_url pid $lr_pid; tgt $tgt_url pid $tgt_pid; $(git -C "$root" rev-parse --short HEAD 2>/dev/null); pin=$pin; linerate LUN $lr_lun; SPDK hugepages=$PEER_SPDK_HUGE"
  echo "# uptime: $(uptime)"
} >"$raw"

# Fill both LUNs once: 1 GiB of 1 MiB writes.
for u in "$lr_url" "$tgt_url"; do
  "${cli[@]}" qemu-img bench -f raw -t none -n -w -s 1048576 -d 8 -c 1024 "$u" >/dev/null 2>&1 ||
    { echo "compare.sh: cannot fill $u" >&2; exit 1; }
done

cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat; }

# One qemu-img bench cell (QD 32) of about QSECS seconds. qbench's fixed size (min(1 GiB, 40000
# requests): 0.3 s at 4 KiB here) let a scheduler hiccup or the first round trips of a run swing
# a cell by 20 %; so a run of that size comes first (a warm-up, and the rate that sizes the
# next), then the measured run of rate x QSECS requests.
qemu_run() {   # op size count url -> seconds
  local w=""
  [ "$1" = write ] && w="-w"
  "${cli[@]}" qemu-img bench -f raw -t none -n $w -s "$2" -d 32 -c "$3" "$4" 2>&1 |
    sed -n 's/Run completed in \([0-9.]*\) seconds./\1/p'
}
# Prints "seconds count ticks" of the measured run, ticks being the CPU clock ticks process
# PID (if given) used during it; nothing if a run failed.
qemu_cell() {   # op size url [pid]
  local op=$1 size=$2 url=$3 pid=${4:-} c t k0=0 k1=0
  c=$(( (1 << 30) / size )); (( c > 40000 )) && c=40000
  t=$(qemu_run "$op" "$size" "$c" "$url")
  [ -n "$t" ] || return 0
  c=$(awk -v c=$c -v t=$t -v s="$qsecs" 'BEGIN{n = int(c / t * s); if (n < c) n = c; print n}')
  [ -n "$pid" ] && k0=$(cpu_ticks $pid)
  t=$(qemu_run "$op" "$size" "$c" "$url")
  [ -n "$pid" ] && k1=$(cpu_ticks $pid)
  [ -n "$t" ] && echo "$t $c $((k1 - k0))"
}

run_qemu() {   # test who rep url sizes
  local t=$1 who=$2 rep=$3 url=$4 sizes=$5 op s r secs n
  for op in read write; do
    for s in $sizes; do
      r=$(qemu_cell $op $s "$url")
      if [ -z "$r" ]; then record "$t $who $rep ${op}_${s}_failed 1"; continue; fi
      read -r secs n _ <<<"$r"
      record "$t $who $rep ${op}_${s}_mbs $(awk -v t=$secs -v c=$n -v s=$s 'BEGIN{printf "%.1f", c * s / t / 1e6}')"
      record "$t $who $rep ${op}_${s}_iops $(awk -v t=$secs -v c=$n 'BEGIN{printf "%.0f", c / t}')"
    done
  done
}

# 64 KiB reads, one qemu_cell; the target's CPU over the measured run.
run_cpu64() {   # who rep url pid
  local who=$1 rep=$2 r secs n ticks
  r=$(qemu_cell read 65536 "$3" "$4")
  [ -n "$r" ] || { record "3 $who $rep failed 1"; return; }
  read -r secs n ticks <<<"$r"
  record "3 $who $rep us_per_kb $(awk -v d=$ticks -v hz=$hz -v c=$n 'BEGIN{printf "%.4f", d * 1e6 / hz / (c * 64)}')"
  record "3 $who $rep read_65536_mbs $(awk -v t=$secs -v c=$n 'BEGIN{printf "%.1f", c * 65536 / t / 1e6}')"
}

run_iperf() {   # rep
  local mbs
  mbs=$("${cli[@]}" iperf3 -c 127.0.0.1 -p $iperf_port -t 2 -O 0.5 -J 2>/dev/null |
        python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.1f" % (j["end"]["sum_received"]["bits_per_second"] / 8e6))' 2>/dev/null)
  [ -n "$mbs" ] && record "2 iperf3 $1 mbs $mbs"
}

# linerate-bench csv: size,rw,digest,connections,qd,mb_per_s,iops,...
run_bench() {   # test who rep url args...
  local t=$1 who=$2 rep=$3 url=$4; shift 4
  "${cli[@]}" "$bench" --format csv --seconds "$secs" "$@" "$url" >"$work/lb.csv" 2>"$work/lb.err" ||
    { record "$t $who $rep bench_failed 1"; tail -3 "$work/lb.err" >&2; }
  tail -n +2 "$work/lb.csv" | while IFS=, read -r size rw dg conns qd mbs iops _ _ ini tgt; do
    [ -n "$mbs" ] && record "$t $who $rep ${rw}_${size}_d${dg}_c${conns}_mbs $mbs"
    [ -n "$iops" ] && record "$t $who $rep ${rw}_${size}_d${dg}_c${conns}_iops $iops"
    # with --target-pid: CPU (initiator + target) per KB moved
    [ -n "${tgt:-}" ] && record "$t $who $rep ${rw}_${size}_d${dg}_c${conns}_cpukb $(awk -v a="$ini" -v b="$tgt" 'BEGIN{printf "%.4f", a + b}')"
  done
}

# SPDK's share of one repetition: start it (its reactor on CPU 0), fill its LUN, measure figures
# 1, 2, 3 and 5b with the clients on CPU 1, stop it (so its poller leaves CPU 0 to the others).
spdk_round() {   # rep
  local rep=$1 url pid saved=("${cli[@]}")
  [ -z "$spdk_note" ] || return 0
  if ! url=$("$spdk" start "$spdk_port" 1024 0x1 2>"$work/spdk.err"); then
    log "rep $rep: peer-spdk did not start: $(tail -1 "$work/spdk.err")"
    record "spdk spdk $rep start_failed 1"
    "$spdk" stop "$spdk_port" >/dev/null 2>&1
    return 0
  fi
  spdk_up=1
  pid=$(cat "/tmp/peer-spdk-$spdk_port/pid")
  cli=(taskset -c 1)
  log "rep $rep/$reps: SPDK $url pid $pid: fill, then 1, 2, 3 and 5b"
  if "${cli[@]}" qemu-img bench -f raw -t none -n -w -s 1048576 -d 8 -c 1024 "$url" >/dev/null 2>&1; then
    run_qemu 1 spdk $rep "$url" 4096
    run_qemu 2 spdk $rep "$url" 262144
    run_cpu64 spdk $rep "$url" "$pid"
    run_bench 5s spdk $rep "$url" --sizes 4k --rw read,write --sessions 8
  else
    log "rep $rep: cannot fill the SPDK LUN"
    record "spdk spdk $rep fill_failed 1"
  fi
  cli=("${saved[@]}")
  "$spdk" stop "$spdk_port" >/dev/null 2>&1
  spdk_up=
}

sizes4=4k,8k,16k,64k,128k,256k
for rep in $(seq "$reps"); do
  # alternate which target goes first from one repetition to the next (SPDK: first or last)
  if [ $((rep % 2)) = 1 ]; then order="lr tgt"; else order="tgt lr"; fi
  [ $((rep % 2)) = 1 ] && spdk_round "$rep"
  log "rep $rep/$reps: 1. qemu-img 4 KiB"
  for who in $order; do
    if [ $who = lr ]; then run_qemu 1 lr $rep "$lr_url" 4096; else run_qemu 1 tgt $rep "$tgt_url" 4096; fi
  done
  run_qemu 1 null $rep "$null_url" 4096
  log "rep $rep/$reps: 2. qemu-img 256 KiB and iperf3"
  run_iperf $rep
  run_qemu 2 lr $rep "$lr_url" 262144
  log "rep $rep/$reps: 3. 64 KiB reads, target CPU"
  for who in $order; do
    if [ $who = lr ]; then run_cpu64 lr $rep "$lr_url" $lr_pid; else run_cpu64 tgt $rep "$tgt_url" $tgt_pid; fi
  done
  log "rep $rep/$reps: 4. digests off/on"
  # each size's off and on cells back to back (first one, then the other, alternating by
  # repetition), so that a ratio compares two runs a few seconds apart
  if [ $((rep % 2)) = 1 ]; then dorder="off,on"; else dorder="on,off"; fi
  for s in ${sizes4//,/ }; do
    run_bench 4 lr $rep "$lr_url" --sizes $s --rw read,write --digest $dorder --connections 1 \
      --target-pid "$lr_pid"
  done
  log "rep $rep/$reps: 5. MC/S and 8 sessions"
  run_bench 5 lr $rep "$lr_url" --sizes 4k --rw read,write --connections 1,2
  for who in $order; do
    if [ $who = lr ]; then u=$lr_url; else u=$tgt_url; fi
    run_bench 5s $who $rep "$u" --sizes 4k --rw read,write --sessions 8
  done
  [ $((rep % 2)) = 0 ] && spdk_round "$rep"
done

# ---- medians and ratios ----
med() {   # test who key -> median over reps (empty if none)
  awk -v t="$1" -v w="$2" -v k="$3" '$1 == t && $2 == w && $4 == k {v[n++] = $5}
    END { if (!n) exit; for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
          m = n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2; printf (m >= 1000 ? "%.0f" : "%.4g"), m }' "$raw"
}
# test who key_a key_b -> median over reps of the ratio a/b measured in the same repetition
med_ratio() {
  awk -v t="$1" -v w="$2" -v ka="$3" -v kb="$4" '$1 == t && $2 == w && $4 == ka {a[$3] = $5}
    $1 == t && $2 == w && $4 == kb {b[$3] = $5}
    END { for (r in a) if ((r in b) && b[r] > 0) v[n++] = a[r] / b[r]; if (!n) exit
          for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
          printf "%.3f", n % 2 ? v[int(n / 2)] : (v[n / 2 - 1] + v[n / 2]) / 2 }' "$raw"
}
rows=(); fails=0
# verdict NAME NUM DEN OP GOAL DETAIL
ratio_row() {
  local name=$1 a=$2 b=$3 op=$4 goal=$5 detail=$6 r v
  if [ -z "$a" ] || [ -z "$b" ]; then
    r="n/a"; v=FAIL
  else
    r=$(awk -v a="$a" -v b="$b" 'BEGIN{ if (b == 0) print "inf"; else printf "%.2f", a / b }')
    v=$(awk -v r="$r" -v g="$goal" -v op="$op" 'BEGIN{ ok = (op == ">=") ? (r + 0 >= g) : (r + 0 <= g); print ok ? "PASS" : "FAIL" }')
  fi
  [ "$v" = FAIL ] && fails=$((fails + 1))
  rows+=("| $name | $detail | $r | $op $goal | $v |")
}

for op in read write; do
  a=$(med 1 lr ${op}_4096_iops); b=$(med 1 tgt ${op}_4096_iops)
  ratio_row "1. 4 KiB $op IOPS, linerate / tgt (qemu-img QD 32)" "$a" "$b" ">=" 2.5 "$a / $b IOPS"
done
ip=$(med 2 iperf3 mbs)
for op in read write; do
  a=$(med 2 lr ${op}_262144_mbs)
  ratio_row "2. 256 KiB $op MB/s, linerate (qemu-img) / iperf3 1 stream" "$a" "$ip" ">=" 0.8 "$a / $ip MB/s"
done
a=$(med 3 lr us_per_kb); b=$(med 3 tgt us_per_kb)
ratio_row "3. 64 KiB read, target CPU per KB, linerate / tgt" "$a" "$b" "<=" 0.5 \
  "$a / $b µs/KB ($(med 3 lr read_65536_mbs) / $(med 3 tgt read_65536_mbs) MB/s)"
worst=; worst_d=
for s in 4096 8192 16384 65536 131072 262144; do
  for op in read write; do
    on=$(med 4 lr ${op}_${s}_don_c1_mbs); off=$(med 4 lr ${op}_${s}_doff_c1_mbs)
    r=$(med_ratio 4 lr ${op}_${s}_don_c1_mbs ${op}_${s}_doff_c1_mbs)
    [ -n "$r" ] || { worst=0; worst_d="$op $s missing"; continue; }
    if [ -z "$worst" ] || awk -v r="$r" -v w="$worst" 'BEGIN{exit !(r < w)}'; then
      worst=$r; worst_d="$op $((s / 1024))k: median of paired ratios (medians $on / $off MB/s)"
    fi
  done
done
ratio_row "4. digests on / off MB/s, worst size 4k..256k (linerate-bench, 1 conn)" "$worst" 1 ">=" 0.95 "$worst_d"
for op in read write; do
  a=$(med 5 lr ${op}_4096_doff_c2_iops); b=$(med 5 lr ${op}_4096_doff_c1_iops)
  r=$(med_ratio 5 lr ${op}_4096_doff_c2_iops ${op}_4096_doff_c1_iops)
  ratio_row "5a. 4 KiB $op IOPS, 2-conn MC/S / 1 conn (QD 32)" "$r" 1 ">=" 1.3 \
    "median of paired ratios (medians $a / $b IOPS)"
done
for op in read write; do
  a=$(med 5s lr ${op}_4096_doff_c1_iops); b=$(med 5s tgt ${op}_4096_doff_c1_iops)
  ratio_row "5b. 4 KiB $op IOPS, --sessions 8, linerate / tgt" "$a" "$b" ">=" 2 "$a / $b IOPS"
done
# issue 14's goals against SPDK (core for core with PIN=1)
if [ -z "$spdk_note" ]; then
  for op in read write; do
    a=$(med 1 lr ${op}_4096_iops); b=$(med 1 spdk ${op}_4096_iops)
    ratio_row "1s. 4 KiB $op IOPS, linerate / SPDK (qemu-img QD 32)" "$a" "$b" ">=" 1.2 "$a / $b IOPS"
  done
  for op in read write; do
    a=$(med 2 lr ${op}_262144_mbs); b=$(med 2 spdk ${op}_262144_mbs)
    ratio_row "2s. 256 KiB $op MB/s, linerate / SPDK (qemu-img QD 32)" "$a" "$b" ">=" 1.0 "$a / $b MB/s"
  done
  a=$(med 3 lr us_per_kb); b=$(med 3 spdk us_per_kb)
  ratio_row "3s. 64 KiB read, target CPU per KB, linerate / SPDK (its polling counts)" "$a" "$b" "<=" 1.0 \
    "$a / $b µs/KB ($(med 3 lr read_65536_mbs) / $(med 3 spdk read_65536_mbs) MB/s)"
  for op in read write; do
    a=$(med 5s lr ${op}_4096_doff_c1_iops); b=$(med 5s spdk ${op}_4096_doff_c1_iops)
    ratio_row "5s. 4 KiB $op IOPS, --sessions 8 (linerate-bench), linerate / SPDK" "$a" "$b" ">=" 1.2 "$a / $b IOPS"
  done
fi

# what digests cost in CPU (initiator + target µs per KB, on / off, median of paired ratios):
# steadier than MB/s on a machine where the client and the target share the CPUs
cpu_worst=; cpu_worst_d=
for s in 4096 8192 16384 65536 131072 262144; do
  for op in read write; do
    r=$(med_ratio 4 lr ${op}_${s}_don_c1_cpukb ${op}_${s}_doff_c1_cpukb)
    [ -n "$r" ] || continue
    if [ -z "$cpu_worst" ] || awk -v r="$r" -v w="$cpu_worst" 'BEGIN{exit !(r > w)}'; then
      cpu_worst=$r; cpu_worst_d="$op $((s / 1024))k"
    fi
  done
done

# digest detail table (figure 4)
dtable() {
  echo "| size | read off | read on | write off | write on |"
  echo "|---:|---:|---:|---:|---:|"
  for s in 4096 8192 16384 65536 131072 262144; do
    echo "| $((s / 1024))k | $(med 4 lr read_${s}_doff_c1_mbs) | $(med 4 lr read_${s}_don_c1_mbs) | $(med 4 lr write_${s}_doff_c1_mbs) | $(med 4 lr write_${s}_don_c1_mbs) |"
  done
}

elapsed=$(($(date +%s) - t_start))
{
  echo "# linerate vs tgt, iperf3: issue 4 figures ($stamp)"
  echo
  echo "\`bench/compare.sh\` (reps=$reps, medians; linerate-bench cells ${secs}s, qemu-img cells ~${qsecs}s after a warm-up), $(nproc) CPUs, load average at the start $(sed -n 2p "$raw" | sed 's/.*load //'), at the end $(cut -d' ' -f1-3 /proc/loadavg), $elapsed s."
  if [ "$pin" = 1 ]; then
    echo "Pinned (PIN=1): targets and the iperf3 server on CPU 0 (linerate-target --threads 1), clients on CPU 1."
  else
    echo "Not pinned (PIN=1 pins): linerate-target runs $(nproc) reactor threads; the SPDK rows are then not core for core."
  fi
  echo "linerate's LUN: $lr_lun."
  if [ -n "$spdk_note" ]; then
    echo "$spdk_note"
  else
    echo "SPDK iscsi_tgt (peer-spdk: one reactor busy-polling CPU 0, RAM bdev $([ "$PEER_SPDK_HUGE" = 1 ] && echo "on 2 MiB hugepages" || echo "without hugepages"), started and filled in each repetition, clients on CPU 1)$(grep -q '^spdk spdk .* start_failed' "$raw" && echo "; it failed to start in $(grep -c '^spdk spdk .* start_failed' "$raw") repetition(s)")."
  fi
  echo "Raw numbers: \`$(basename "$raw")\`."
  echo
  echo "| figure | measured | ratio | goal | |"
  echo "|---|---|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Figure 4, linerate-bench MB/s by size, digests off/on (1 connection, QD 32):"
  echo
  dtable
  if [ -n "$cpu_worst" ]; then
    echo
    echo "Digests in CPU: initiator + target µs per KB moved, on / off, worst size: $cpu_worst ($cpu_worst_d; median of paired ratios)."
  fi
  echo
  echo "The client's ceiling (figure 1): qemu-img against a linerate-target whose LUN does no work (null store)"
  for op in read write; do
    n=$(med 1 null ${op}_4096_iops); b=$(med 1 tgt ${op}_4096_iops)
    [ -n "$n" ] && [ -n "$b" ] &&
      echo "- 4 KiB $op: $n IOPS, $(awk -v a="$n" -v b="$b" 'BEGIN{printf "%.2f", a / b}') × tgt's $b (the LUN does nothing: what this client and loopback TCP allow here)."
  done
} >"$md"
cat "$md"
log "$fails of ${#rows[@]} figures FAIL; summary in $md"
exit 0
