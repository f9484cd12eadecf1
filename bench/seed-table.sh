#!/bin/bash
# Reproduce the seed table on this machine: linerate-target (digests off/on, 1 and 4 MC/S
# connections) and tgt alongside (digests off/on, the one connection it grants), the seed's
# sizes, read and write. Writes OUT/linerate.csv, OUT/tgt.csv, OUT/seed-table.md and
# OUT/seed-table.svg (bench/merge.py). Usage: bench/seed-table.sh [BUILD_DIR] [OUT] [SECONDS]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${2:-$root/bench/out}
secs=${3:-5}
mkdir -p "$out"
bench=$build/linerate-bench
sizes=512,1k,2k,4k,8k,16k,64k,128k,256k
port=$((20000 + RANDOM % 10000)) # tgtadm -C takes control ports below 32768

"$build/linerate-target" --listen "127.0.0.1:$port" --lun ram:1G --log-level warn \
  >"$out/target.url" 2>"$out/target.log" &
tpid=$!
peer=$root/../shared/tools/peer-tgt
tport=$((port + 1))
trap 'kill $tpid 2>/dev/null; [ -x "$peer" ] && "$peer" stop $tport >/dev/null 2>&1' EXIT
for _ in $(seq 50); do [ -s "$out/target.url" ] && break; sleep 0.1; done
url=$(head -1 "$out/target.url")

echo "linerate-target: $url" >&2
"$bench" --sizes $sizes --rw read,write --digest off,on --connections 1,4 --seconds "$secs" \
  --target-pid $tpid --format csv "$url" >"$out/linerate.csv"

if [ -x "$peer" ]; then
  turl=$("$peer" start $tport 1024)
  ctl=$((tport + 1000))
  # tgt refuses digests unless told to offer them
  tgtadm -C $ctl --lld iscsi --mode target --op update --tid 1 --name HeaderDigest --value CRC32C,None
  tgtadm -C $ctl --lld iscsi --mode target --op update --tid 1 --name DataDigest --value CRC32C,None
  echo "tgt: $turl" >&2
  "$bench" --sizes $sizes --rw read,write --digest off,on --connections 1 --seconds "$secs" \
    --format csv "$turl" >"$out/tgt.csv"
fi
python3 "$root/bench/merge.py" "$out/seed-table.md" "$out/seed-table.svg" \
  "linerate:$out/linerate.csv" ${turl:+"tgt:$out/tgt.csv"}
cat "$out/seed-table.md"
