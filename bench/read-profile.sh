#!/bin/bash
# read-profile.sh: where both ends spend a qemu-img READ cell, linerate against SPDK's
# iscsi_tgt, pinned as bench/compare.sh PIN=1 pins them (target on CPU 0, qemu-img on CPU 1).
# "For a cell that cannot hold here, a profile of both ends shows where the time goes."
#
#   bench/read-profile.sh [BUILD_DIR]
#
# Environment: SIZE (bytes per READ, default 262144), QD (32), SECS (seconds sampled, 4),
# OUT (default /tmp/read-profile-DATE), LR_LUN (default ram:1G,prealloc), NO_SPDK=1.
# For each target: start it, fill the LUN (qemu reads of unwritten regions never reach the
# target's data path), start a long qemu-img bench READ on CPU 1, wait 1 s, then
# `perf record -e cpu-clock -g -C 0` and `-C 1` together for SECS (the whole CPU: the target's
# kernel TCP work runs in softirq context that a per-process profile would miss), and the
# MB/s and target CPU per KB of a separate, unsampled run. Writes OUT/SIDE-cpuN.txt (perf
# report by symbol, top 40, no children) and
# OUT/summary.txt (MB/s and the top 12 symbols of each end). Not a test.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
size=${SIZE:-262144}
qd=${QD:-32}
secs=${SECS:-4}
out=${OUT:-/tmp/read-profile-$(date +%Y%m%d-%H%M%S)}
lr_lun=${LR_LUN:-ram:1G,prealloc}
spdk=${PEER_SPDK:-$root/../shared/tools/peer-spdk}
export PEER_SPDK_HUGE=${PEER_SPDK_HUGE:-1}
mkdir -p "$out"
command -v perf >/dev/null || { echo "read-profile.sh: perf is not installed (linux-perf)" >&2; exit 1; }
work=$(mktemp -d /tmp/read-profile.XXXXXX)
lr_pid=; spdk_port=
cleanup() {
    [ -n "$lr_pid" ] && kill "$lr_pid" 2>/dev/null && wait "$lr_pid" 2>/dev/null
    [ -n "$spdk_port" ] && "$spdk" stop "$spdk_port" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$((20000 + RANDOM % 20000))

# profile SIDE URL: fill, then sample both CPUs during a READ run
profile() {
    local side=$1 url=$2 count
    taskset -c 1 qemu-img bench -f raw -t none -n -w -s 1048576 -d 8 -c 1024 "$url" >/dev/null 2>&1
    count=$(( (secs + 6) * 4000000000 / size ))   # longer than the sampling at 4 GB/s
    taskset -c 1 qemu-img bench -f raw -t none -n -s "$size" -d "$qd" -c "$count" "$url" \
        >"$work/$side.bench" 2>&1 &
    local bench=$!
    sleep 1
    perf record -q -e cpu-clock -g -C 0 -o "$work/$side-cpu0.data" -- sleep "$secs" 2>/dev/null &
    local p0=$!
    perf record -q -e cpu-clock -g -C 1 -o "$work/$side-cpu1.data" -- sleep "$secs" 2>/dev/null
    wait "$p0"
    kill -INT "$bench" 2>/dev/null; wait "$bench" 2>/dev/null
    for c in 0 1; do
        perf report -i "$work/$side-cpu$c.data" --no-children -g none --sort comm,dso,sym --stdio 2>/dev/null |
            grep -E '^ +[0-9.]+%' | head -40 >"$out/$side-cpu$c.txt"
    done
}

# CPU ticks (utime + stime) of a process so far
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# "MB/s, target µs per KB" of a separate, unsampled run of the same cell; PID is the target's
rate() {
    local url=$1 pid=$2 count=$(( 2 * 4000000000 / size )) t c0 c1
    c0=$(ticks "$pid")
    t=$(taskset -c 1 qemu-img bench -f raw -t none -n -s "$size" -d "$qd" -c "$count" "$url" 2>&1 |
        sed -n 's/Run completed in \([0-9.]*\) seconds./\1/p')
    c1=$(ticks "$pid")
    awk -v c="$count" -v s="$size" -v t="$t" -v cpu=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { if (t > 0) printf "%.0f MB/s, target %.4f µs/KB", c * s / t / 1e6, cpu / hz * 1e6 / (c * s / 1024); else print "?" }'
}

taskset -c 0 "$build/linerate-target" --listen 127.0.0.1:$port --threads 1 --lun "$lr_lun" \
    --ctl-socket none --log-level warn >"$work/lr.url" 2>"$work/lr.log" &
lr_pid=$!
for _ in $(seq 300); do [ -s "$work/lr.url" ] && break; sleep 0.1; done
lr_url=$(head -1 "$work/lr.url")
[ -n "$lr_url" ] || { echo "read-profile.sh: linerate-target did not start" >&2; cat "$work/lr.log" >&2; exit 1; }
profile linerate "$lr_url"
lr_rate=$(rate "$lr_url" "$lr_pid")
kill "$lr_pid"; wait "$lr_pid" 2>/dev/null; lr_pid=

spdk_rate=
if [ "${NO_SPDK:-0}" != 1 ] && [ -x "$spdk" ]; then
    spdk_port=$((port + 1))
    spdk_url=$("$spdk" start "$spdk_port" 1024 0x1 2>"$work/spdk.err" | tail -1)
    if [[ "$spdk_url" == iscsi://* ]]; then
        profile spdk "$spdk_url"
        spdk_rate=$(rate "$spdk_url" "$(cat "/tmp/peer-spdk-$spdk_port/pid")")
    else
        echo "read-profile.sh: SPDK did not start: $(tail -1 "$work/spdk.err")" >&2
    fi
    "$spdk" stop "$spdk_port" >/dev/null 2>&1; spdk_port=
fi

{
    echo "# read-profile: $size-byte READs, QD $qd, qemu-img on CPU 1, target on CPU 0, $(date -u '+%F %T') UTC"
    echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "linerate ($lr_lun): $lr_rate${spdk_rate:+; SPDK: $spdk_rate (its polling counts)}"
    for f in "$out"/*-cpu[01].txt; do
        echo
        echo "## $(basename "$f" .txt) (perf cpu-clock, share of the CPU's samples, top 12)"
        head -12 "$f"
    done
} | tee "$out/summary.txt"
