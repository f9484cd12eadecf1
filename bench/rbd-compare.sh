#!/bin/bash
# rbd-compare.sh: an RBD image served by linerate vs the same cluster driven directly with librbd
# (`rbd bench`), and tgt's bs_rbd if it can be had, in one run on one single-node cluster
# (scripts/ceph-mini: 1 mon, 1 mgr, 1 memstore OSD on loopback). Issue 13's first figures.
#
#   bench/rbd-compare.sh [BUILD_DIR]
#
# Environment: SECS (seconds per linerate-bench cell, default 10), QD (queue depth, default 32),
# PORT (linerate's port, default 14250; tgt gets PORT+1), CEPH_MINI_PORT (default 16789),
# NO_TGT=1 (skip tgt), OUT (default bench/results).
#
# Each side gets its own 1 GiB image, filled once with 4 MiB sequential writes so that reads
# reach the OSD (librbd answers reads of objects that do not exist with zeros, locally). Then,
# at the same block size and queue depth:
#   rbd bench --io-type write|read --io-pattern rand --io-size 4K --io-threads QD   (librbd)
#   linerate-bench --rw randwrite,randread --sizes 4k --qd QD                         (iSCSI)
# and the same at 256 KiB sequential. linerate-bench is the iSCSI client for linerate and tgt
# alike. One run, no repetitions: a first look, not a verdict (2 CPUs shared by the cluster,
# the gateway and the client).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${OUT:-$root/bench/results}
secs=${SECS:-10}
qd=${QD:-32}
port=${PORT:-14250}
tport=$((port + 1))
peer=${PEER_TGT:-$root/../shared/tools/peer-tgt}
bench=$build/linerate-bench
target=$build/linerate-target
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
md=$out/rbd-$stamp.md
work=$(mktemp -d /tmp/rbd-compare.XXXXXX)
lt_pid=""
tgt_up=0

cleanup() {
    [ -n "$lt_pid" ] && kill -TERM "$lt_pid" 2>/dev/null && wait "$lt_pid" 2>/dev/null
    [ "$tgt_up" = 1 ] && "$peer" stop "$tport" >/dev/null 2>&1
    [ -f "$work/ceph/ceph.conf" ] && "$root/scripts/ceph-mini" stop "$work/ceph" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

echo "== starting the cluster"
"$root/scripts/ceph-mini" start "$work/ceph" >"$work/env" || exit 1
export CEPH_CONF=$work/ceph/ceph.conf

fill() { # IMAGE: write all of it once
    rbd bench --io-type write --io-size 4M --io-threads 4 --io-total 1G --io-pattern seq "$1" \
        >/dev/null 2>&1
}

# rbd bench IMAGE TYPE PATTERN SIZE TOTAL BYTES: prints "IOPS MB/s" (MB = 10^6 bytes, from the
# IOPS: rbd bench prints bytes/sec rounded in binary units)
rbdbench() {
    rbd bench --io-type "$2" --io-pattern "$3" --io-size "$4" --io-threads "$qd" --io-total "$5" \
        "$1" 2>&1 | awk -v b="$6" '/^elapsed:/ { printf "%.0f %.1f\n", $6, $6 * b / 1e6 }'
}

# lbench URL RW SIZE BYTES: prints "IOPS MB/s" from linerate-bench's csv
lbench() {
    "$bench" --sizes "$3" --rw "$2" --qd "$qd" --seconds "$secs" --format csv "$1" 2>/dev/null |
        awk -F, -v b="$4" 'NR > 1 { printf "%s %.1f\n", $7, $7 * b / 1e6 }'
}

rbd create --size 1G rbd/bench-direct && fill rbd/bench-direct
rbd create --size 1G rbd/bench-lr && fill rbd/bench-lr

echo "== linerate-target on 127.0.0.1:$port"
"$target" --listen "127.0.0.1:$port" --lun rbd:rbd/bench-lr >"$work/lt.out" 2>"$work/lt.log" &
lt_pid=$!
for _ in $(seq 100); do grep -q '^iscsi://' "$work/lt.out" && break; sleep 0.1; done
lt_url=$(head -n 1 "$work/lt.out")
[ -n "$lt_url" ] || { cat "$work/lt.log"; exit 1; }

tgt_url=""
if [ -z "${NO_TGT:-}" ] && [ -x "$peer" ]; then
    echo "== tgt (bs_rbd) on 127.0.0.1:$tport"
    rbd create --size 1G rbd/bench-tgt && fill rbd/bench-tgt
    # peer-tgt installs tgt-rbd on first use; tgtd then has to start again to load it
    dpkg-query -W -f='${Status}' tgt-rbd 2>/dev/null | grep -q "install ok" ||
        apt-get install -y -q tgt-rbd >/dev/null 2>&1
    tgt_up=1 # stop even a half-started tgtd on exit
    if ! tgt_url=$(PEER_RBD_IMAGE=rbd/bench-tgt "$peer" start "$tport" 1024 rbd 2>"$work/tgt.err"); then
        echo "tgt not available: $(tail -n 2 "$work/tgt.err")"
        tgt_url=""
    fi
fi

declare -A r
total4k=$((qd * 4096 * 2000)) # rbd bench moves a fixed total: ~2000 full queues of 4 KiB
[ $total4k -lt $((64 << 20)) ] && total4k=$((64 << 20))
for cell in "randwrite write rand 4K $total4k 4k 4096" "randread read rand 4K $total4k 4k 4096" \
    "write write seq 256K 2G 256k 262144" "read read seq 256K 2G 256k 262144"; do
    set -- $cell
    name=$1-$6
    echo "== $name"
    r[direct,$name]=$(rbdbench rbd/bench-direct "$2" "$3" "$4" "$5" "$7")
    r[lr,$name]=$(lbench "$lt_url" "$1" "$6" "$7")
    [ -n "$tgt_url" ] && r[tgt,$name]=$(lbench "$tgt_url" "$1" "$6" "$7")
    echo "   librbd: ${r[direct,$name]:-?}   linerate: ${r[lr,$name]:-?}   tgt: ${r[tgt,$name]:--}"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
{
    echo "# RBD: linerate vs direct librbd$([ -n "$tgt_url" ] && echo " vs tgt bs_rbd"), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "bench/rbd-compare.sh, one run on $(nproc) CPUs; scripts/ceph-mini (1 mon, 1 mgr, 1 memstore"
    echo "OSD, pool size 1) on loopback; queue depth $qd everywhere; 1 GiB images filled first."
    echo "Direct: \`rbd bench\` (--io-threads $qd). iSCSI: linerate-bench, 1 connection, ${secs} s per"
    echo "cell, against linerate-target ($(git -C "$root" rev-parse --short HEAD)) and tgt's bs_rbd."
    echo
    echo "| test | librbd IOPS | linerate IOPS | tgt IOPS | linerate / librbd | linerate / tgt | librbd MB/s | linerate MB/s | tgt MB/s |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for name in randwrite-4k randread-4k write-256k read-256k; do
        read -r di dm <<<"${r[direct,$name]:-0 0}"
        read -r li lm <<<"${r[lr,$name]:-0 0}"
        read -r ti tm <<<"${r[tgt,$name]:-0 0}"
        echo "| $name | $di | $li | ${ti/#0/-} | $(ratio "$li" "$di") | $(ratio "$li" "$ti") | $dm | $lm | ${tm/#0/-} |"
    done
    echo
    echo "Goals (issue 13): 4 KiB random IOPS >= 0.8 x librbd and >= 3 x tgt; 256 KiB sequential"
    echo "MB/s >= 0.9 x librbd."
} >"$md"
cat "$md"
echo "written: $md"
