#!/bin/bash
# rbd-profile.sh: where the time goes when linerate serves an RBD image, next to `rbd bench`
# on the same cluster (issue 13: "where a figure cannot hold on this 2-CPU machine, show the
# profile that says where the time goes").
#
#   bench/rbd-profile.sh [BUILD_DIR]
#
# Environment: CELLS (default "read-256k randread-4k"), SECS (default 10), QD (32), REPS (2),
# PORT (linerate's port, default 14260), CEPH_MINI_PORT, OUT (default /tmp/rbd-profile-DATE),
# NO_PERF=1 (no perf record: counters and CPU only).
#
# scripts/ceph-mini, a filled 1 GiB image per side, linerate-target (an rbd: LUN). For each
# cell and side (direct: rbd bench; lr: linerate-bench through linerate-target), alternating:
#   - CPU seconds of the OSD, of linerate-target and of the client (/proc/PID/stat);
#   - the OSD's op count and mean op latency (perf dump on its admin socket), and the number of
#     OSD ops the client's librados has in flight (objecter op_active, sampled every 0.1 s from
#     the client's admin socket: linerate-target's or rbd bench's);
#   - with perf: `perf record -g` of linerate-target (lr), of rbd bench (direct) and of the OSD,
#     in a repetition of its own (REPS+1) so that the sampling does not weigh on the figures.
# Writes OUT/summary.txt and OUT/CELL-SIDE-PROC.perf.txt (perf report by thread and by symbol).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
secs=${SECS:-10}
qd=${QD:-32}
reps=${REPS:-2}
port=${PORT:-14260}
cells=${CELLS:-read-256k randread-4k}
out=${OUT:-/tmp/rbd-profile-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
work=$(mktemp -d /tmp/rbd-profile.XXXXXX)
lt_pid=""
cleanup() {
    [ -n "$lt_pid" ] && kill -TERM "$lt_pid" 2>/dev/null && wait "$lt_pid" 2>/dev/null
    [ -f "$work/ceph/ceph.conf" ] && "$root/scripts/ceph-mini" stop "$work/ceph" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

"$root/scripts/ceph-mini" start "$work/ceph" >/dev/null || exit 1
export CEPH_CONF=$work/ceph/ceph.conf
run=$work/ceph/run
osd_pid=$(cat "$run/osd.0.pid")
hz=$(getconf CLK_TCK)
for img in bench-direct bench-lr; do
    rbd create --size 1G "rbd/$img" &&
        rbd bench --io-type write --io-size 4M --io-threads 4 --io-total 1G --io-pattern seq \
            "rbd/$img" >/dev/null 2>&1
done
"$build/linerate-target" --listen "127.0.0.1:$port" --lun rbd:rbd/bench-lr --ctl-socket none \
    --state-dir "$work" >"$work/lt.out" 2>"$work/lt.log" &
lt_pid=$!
for _ in $(seq 100); do grep -q '^iscsi://' "$work/lt.out" && break; sleep 0.1; done
url=$(head -n 1 "$work/lt.out")
[ -n "$url" ] || { cat "$work/lt.log"; exit 1; }

cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
pdump() { # ASOK: "op_r op_r_lat_sum op_w op_w_lat_sum" of an OSD
    ceph --admin-daemon "$1" perf dump 2>/dev/null | python3 -c '
import json, sys
o = json.load(sys.stdin)["osd"]
print(o["op_r"], o["op_r_latency"]["sum"], o["op_w"], o["op_w_latency"]["sum"])'
}
# inflight ASOK_PID WATCH_PID: sample objecter.op_active of the librados client with pid
# ASOK_PID every 0.1 s until WATCH_PID exits; print the mean. Speaks the admin socket protocol
# itself (command, NUL; 4-byte big-endian length, JSON): a `ceph --admin-daemon` per sample
# would cost more CPU than what it measures.
inflight() {
    python3 - "$run" "$1" "$2" <<'PY'
import glob, json, os, socket, struct, sys, time
run, apid, wpid = sys.argv[1], sys.argv[2], int(sys.argv[3])
def alive():
    try:
        os.kill(wpid, 0)
        return True
    except OSError:
        return False
def ask(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.sendall(json.dumps({"prefix": "perf dump", "logger": "objecter"}).encode() + b"\0")
    data = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        data += c
    s.close()
    n = struct.unpack(">I", data[:4])[0]
    return json.loads(data[4:4 + n])["objecter"]["op_active"]
vals = []
while alive():
    p = glob.glob("%s/client.*.%s.asok" % (run, apid))
    if p:
        try:
            vals.append(ask(p[0]))
        except Exception:
            pass
    time.sleep(0.1)
print("%.1f" % (sum(vals) / len(vals)) if vals else "-")
PY
}

# one CELL SIDE PERF: run it, append a summary line
one() {
    local cell=$1 side=$2 prof=$3 rw type pattern size bsize total cpid o0 o1 g0 g1 t0 t1 d0 d1
    case $cell in
    read-256k) rw=read type=read pattern=seq size=256K bsize=262144 total=2G ;;
    write-256k) rw=write type=write pattern=seq size=256K bsize=262144 total=2G ;;
    randread-4k) rw=randread type=read pattern=rand size=4K bsize=4096 total=$((qd * 4096 * 2000)) ;;
    randwrite-4k) rw=randwrite type=write pattern=rand size=4K bsize=4096 total=$((qd * 4096 * 2000)) ;;
    esac
    d0=$(pdump "$run/osd.0.asok")
    o0=$(cpu_of "$osd_pid")
    g0=$(cpu_of "$lt_pid")
    t0=$(date +%s.%N)
    rm -f "$work/cpid" "$work/times"
    (
        if [ "$side" = direct ]; then
            rbd bench --io-type $type --io-pattern $pattern --io-size $size --io-threads "$qd" \
                --io-total $total rbd/bench-direct >"$work/client.out" 2>&1 &
        else
            "$build/linerate-bench" --sizes $size --rw $rw --qd "$qd" --seconds "$secs" \
                --format csv "$url" >"$work/client.out" 2>/dev/null &
        fi
        echo $! >"$work/cpid"
        wait $!
        times >"$work/times" # user and system time of the client, once waited for
    ) &
    local spid=$!
    for _ in $(seq 50); do [ -s "$work/cpid" ] && break; sleep 0.02; done
    cpid=$(cat "$work/cpid")
    local perfs=()
    if [ "$prof" = 1 ]; then
        local p=$cpid
        [ "$side" = lr ] && p=$lt_pid
        perf record -q --call-graph "${CALLGRAPH:-dwarf,8192}" -F 199 -p "$p" -o "$work/gw.data" 2>/dev/null &
        perfs+=($!)
        perf record -q -g -F 499 -p "$osd_pid" -o "$work/osd.data" 2>/dev/null &
        perfs+=($!)
    fi
    local fl
    if [ "$side" = direct ]; then fl=$(inflight "$cpid" "$cpid"); else fl=$(inflight "$lt_pid" "$cpid"); fi
    wait "$spid"
    local cpu_client
    cpu_client=$(awk 'NR == 2 { gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4 }' "$work/times")
    t1=$(date +%s.%N)
    for p in "${perfs[@]}"; do kill -INT "$p" 2>/dev/null; done
    for p in "${perfs[@]}"; do wait "$p" 2>/dev/null; done
    o1=$(cpu_of "$osd_pid")
    g1=$(cpu_of "$lt_pid")
    d1=$(pdump "$run/osd.0.asok")
    local iops
    if [ "$side" = direct ]; then
        iops=$(awk '/^elapsed:/ { printf "%.0f", $6 }' "$work/client.out")
    else
        iops=$(awk -F, 'NR > 1 { print $7 }' "$work/client.out")
    fi
    read -r r0 rl0 w0 wl0 <<<"$d0"
    read -r r1 rl1 w1 wl1 <<<"$d1"
    awk -v cell="$cell" -v side="$side" -v prof="$prof" -v iops="${iops:-0}" -v b="$bsize" \
        -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v hz="$hz" \
        -v o="$((o1 - o0))" -v g="$((g1 - g0))" -v ccpu="${cpu_client:-0}" -v fl="$fl" \
        -v ops="$((r1 - r0 + w1 - w0))" -v lat="$(awk -v a="$rl0" -v b="$rl1" -v c="$wl0" -v d="$wl1" 'BEGIN { print b - a + d - c }')" \
        'BEGIN { gb = iops * b * wall / 1e9
                 printf "%-12s %-6s %s  %6d IOPS %7.1f MB/s | CPU s/GB: osd %5.2f gw %5.2f client %5.2f | osd cores %.2f | osd ops/s %6.0f  mean op lat %6.2f ms  osd-side in flight %5.1f | client objecter in flight %s\n",
                        cell, side, prof ? "perf" : "    ", iops, iops * b / 1e6, o / hz / gb,
                        side == "lr" ? g / hz / gb : 0, ccpu / gb, o / hz / wall, ops / wall,
                        ops ? lat / ops * 1e3 : 0, lat / wall, fl }' | tee -a "$out/summary.txt"
    if [ "$prof" = 1 ]; then
        local proc=rbdbench
        [ "$side" = lr ] && proc=linerate
        for d in gw:$proc osd:osd; do
            local f=$work/${d%%:*}.data dst=$out/$cell-$side-${d#*:}.perf.txt
            {
                echo "### by thread"
                perf report -i "$f" --no-children --sort comm --stdio -g none 2>/dev/null | grep -v '^[#]' | grep -v '^$' | head -n 30
                echo "### by symbol (self)"
                perf report -i "$f" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
                    grep -v '^[#]' | grep -v '^$' | head -n 60
                echo "### call graph (caller), top"
                perf report -i "$f" --children --sort sym --stdio -g caller,0.5,callee --percent-limit 3 2>/dev/null |
                    grep -v '^$' | head -n 200
            } >"$dst"
            cp "$f" "$out/$cell-$side-${d#*:}.perf.data"
        done
    fi
}

for cell in $cells; do
    for ((rep = 1; rep <= reps; rep++)); do
        if ((rep % 2)); then one "$cell" direct 0; one "$cell" lr 0; else one "$cell" lr 0; one "$cell" direct 0; fi
    done
    if [ -z "${NO_PERF:-}" ]; then
        one "$cell" direct 1
        one "$cell" lr 1
    fi
done
echo "written: $out"
