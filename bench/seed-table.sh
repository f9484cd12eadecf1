#!/bin/bash
# Reproduce the seed table on this machine: linerate-target (digests off/on, 1 and 4 MC/S
# connections), tgt alongside (digests off/on, the one connection it grants) and SPDK's
# iscsi_tgt (digests off/on, 1 connection), the seed's sizes, read and write. Writes
# OUT/linerate.csv, OUT/tgt.csv, OUT/spdk.csv, OUT/seed-table.md and OUT/seed-table.svg
# (bench/merge.py). Usage: bench/seed-table.sh [BUILD_DIR] [OUT] [SECONDS]
#
# Environment: SIZES (default the seed's 512..256k), PORT (linerate's port; tgt takes PORT+1,
# SPDK PORT+2; default random), NO_TGT=1 / NO_SPDK=1 leave a column out, PIN=1 runs every
# target on CPU 0 and the bench on CPU 1, LR_LUN (linerate's LUN, default ram:1G,prealloc),
# PEER_SPDK_HUGE (default 1: SPDK's RAM bdev on 2 MiB hugepages).
# SPDK (../shared/tools/peer-spdk, one reactor on CPU 0, mask 0x1, RAM bdev) busy-polls its core,
# so the bench runs pinned to CPU 1 against it whatever PIN says, and the SPDK column needs two
# CPUs; without peer-spdk (or when it does not start) the column is left out with a note.
# SPDK is measured with one connection per session: it grants MC/S, but closes a connection
# whose command arrives with a CmdSN below the ExpCmdSN another connection of the session has
# already moved past ("CmdSN(3) ignore (ExpCmdSN=10 ...)", "Critical error is detected. Close
# the connection"): it does not reorder commands across connections (RFC 7143 §3.2.2.1).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${2:-$root/bench/out}
secs=${3:-5}
mkdir -p "$out"
bench=$build/linerate-bench
sizes=${SIZES:-512,1k,2k,4k,8k,16k,64k,128k,256k}
port=${PORT:-$((20000 + RANDOM % 10000))} # tgtadm -C takes control ports below 32768
tport=$((port + 1))
sport=$((port + 2))
# Like for like with SPDK's RAM bdev (allocated at start, on hugepages: PEER_SPDK_HUGE=1 is the
# default here): linerate's LUN preallocated too. LR_LUN=ram:1G measures the thin default.
lr_lun=${LR_LUN:-ram:1G,prealloc}
export PEER_SPDK_HUGE=${PEER_SPDK_HUGE:-1}
tpin=() bpin=()
if [ "${PIN:-0}" = 1 ]; then tpin=(taskset -c 0) bpin=(taskset -c 1); fi

peer=${PEER_TGT:-$root/../shared/tools/peer-tgt}
spdk=${PEER_SPDK:-$root/../shared/tools/peer-spdk}
spdk_started=
cleanup() {
    if [ -n "$tpid" ]; then kill $tpid 2>/dev/null || true; fi
    if [ -x "$peer" ] && [ "${NO_TGT:-0}" != 1 ]; then "$peer" stop $tport >/dev/null 2>&1; fi
    if [ -n "$spdk_started" ]; then "$spdk" stop $sport >/dev/null 2>&1; fi
}
tpid=
trap cleanup EXIT
rm -f "$out/spdk.csv" "$out/tgt.csv"
notes=()

"${tpin[@]}" "$build/linerate-target" --listen "127.0.0.1:$port" --lun "$lr_lun" --log-level warn \
    --ctl-socket none >"$out/target.url" 2>"$out/target.log" &
tpid=$!
for _ in $(seq 300); do [ -s "$out/target.url" ] && break; sleep 0.1; done
url=$(head -1 "$out/target.url")

echo "linerate-target: $url" >&2
"${bpin[@]}" "$bench" --sizes $sizes --rw read,write --digest off,on --connections 1,4 \
    --seconds "$secs" --target-pid $tpid --format csv "$url" >"$out/linerate.csv" ||
    notes+=("linerate: some commands failed (linerate-bench exit $?).")
kill $tpid
wait $tpid 2>/dev/null || true
tpid=

if [ -x "$peer" ] && [ "${NO_TGT:-0}" != 1 ]; then
    turl=$("${tpin[@]}" "$peer" start $tport 1024)
    ctl=$((tport + 1000))
    # tgt refuses digests unless told to offer them
    tgtadm -C $ctl --lld iscsi --mode target --op update --tid 1 --name HeaderDigest --value CRC32C,None
    tgtadm -C $ctl --lld iscsi --mode target --op update --tid 1 --name DataDigest --value CRC32C,None
    echo "tgt: $turl" >&2
    "${bpin[@]}" "$bench" --sizes $sizes --rw read,write --digest off,on --connections 1 \
        --seconds "$secs" --target-pid "$(cat /tmp/peer-tgt-$tport/pid)" --format csv "$turl" \
        >"$out/tgt.csv" || notes+=("tgt: some commands failed (linerate-bench exit $?).")
    "$peer" stop $tport >/dev/null 2>&1 || true
fi

if [ "${NO_SPDK:-0}" = 1 ]; then
    notes+=("SPDK iscsi_tgt left out (NO_SPDK=1).")
elif [ ! -x "$spdk" ]; then
    notes+=("SPDK iscsi_tgt left out: no peer-spdk at $spdk.")
elif [ "$(nproc --all)" -lt 2 ]; then
    notes+=("SPDK iscsi_tgt left out: its reactor busy-polls a core and this machine has one CPU.")
elif ! surl=$("$spdk" start $sport 1024 0x1 2>"$out/spdk.log"); then
    notes+=("SPDK iscsi_tgt left out: peer-spdk did not start ($(tail -1 "$out/spdk.log")).")
    "$spdk" stop $sport >/dev/null 2>&1 || true
else
    spdk_started=1
    echo "spdk: $surl" >&2
    # its reactor polls CPU 0 at 100%: the bench must not share that CPU
    taskset -c 1 "$bench" --sizes $sizes --rw read,write --digest off,on --connections 1 \
        --seconds "$secs" --target-pid "$(cat /tmp/peer-spdk-$sport/pid)" --format csv "$surl" \
        >"$out/spdk.csv" || notes+=("SPDK: some commands failed (linerate-bench exit $?).")
    "$spdk" stop $sport >/dev/null 2>&1 || true
    spdk_started=
    notes+=("SPDK iscsi_tgt (peer-spdk, one reactor on CPU 0 busy-polling, RAM bdev $([ "$PEER_SPDK_HUGE" = 1 ] && echo "on 2 MiB hugepages" || echo "without hugepages")): the bench pinned to CPU 1, one connection (SPDK closes MC/S connections whose commands arrive out of CmdSN order); its target CPU per KB counts the polling.")
fi

labels=("linerate:$out/linerate.csv")
[ -s "$out/tgt.csv" ] && labels+=("tgt:$out/tgt.csv")
[ -s "$out/spdk.csv" ] && labels+=("spdk:$out/spdk.csv")
python3 "$root/bench/merge.py" "$out/seed-table.md" "$out/seed-table.svg" "${labels[@]}"
{
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), ${secs}s per cell, $(nproc --all) CPUs, load: $(cut -d' ' -f1-3 /proc/loadavg)$([ "${PIN:-0}" = 1 ] && echo ", targets on CPU 0 and the bench on CPU 1")."
    echo "linerate's LUN: $lr_lun."
    for n in "${notes[@]}"; do echo "$n"; done
} >>"$out/seed-table.md"
cat "$out/seed-table.md"
