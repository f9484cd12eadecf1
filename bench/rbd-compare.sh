#!/bin/bash
# rbd-compare.sh: an RBD image served by linerate vs the same cluster driven directly with librbd
# (`rbd bench`), and tgt's bs_rbd if it can be had, in one run on one single-node cluster
# (scripts/ceph-mini: 1 mon, 1 mgr, 1 memstore OSD on loopback), and one initiator over two
# gateways vs over one (issue 13, "Performance").
#
#   bench/rbd-compare.sh [BUILD_DIR]
#
# Environment: SECS (seconds per linerate-bench cell, default 10), QD (queue depth, default 32),
# REPS (repetitions, default 3), PORT (linerate's port, default 14250; the second gateway gets
# PORT+2, tgt PORT+1), CEPH_MINI_PORT (default 16789), NO_TGT=1 (skip tgt), NO_MULTIGW=1 (skip
# the two-gateway cells), OUT (default bench/results).
#
# Each side gets its own 1 GiB image, filled once with 4 MiB sequential writes so that reads
# reach the OSD (librbd answers reads of objects that do not exist with zeros, locally). Then,
# at the same block size and queue depth:
#   rbd bench --io-type write|read --io-pattern rand --io-size 4K --io-threads QD   (librbd)
#   linerate-bench --rw randwrite,randread --sizes 4k --qd QD                         (iSCSI)
# and the same at 256 KiB sequential. linerate-bench is the iSCSI client for linerate and tgt
# alike. tgt needs Debian's tgt-rbd (bs_rbd); without it the tgt column is left out with a note
# (this script installs nothing).
#
# Two gateways: linerate-target runs as gateway A (ALUA group 1) and a second daemon as gateway
# B (group 2) on PORT+2, both active/optimized, the same images under the same target name, as
# tests/integration/target_multigw.sh configures them: LUN 0 is the linerate column's image,
# LUN 1 a third image created without exclusive-lock (`--image-feature layering`,
# docs/gateways.md: with the lock every write through the other gateway moves it). linerate-bench drives one portal per
# process, so the two-path cell is two bench processes started at once, one session to each
# gateway at QD/2, their IOPS summed; the one-path cell is one bench at QD against A.
#
# Every repetition runs every cell on every side, the sides' order reversed from one
# repetition to the next; the table gives medians over REPS, and for each cell the CPU seconds
# the OSD, the gateway and the client took per GB moved (utime+stime from /proc; the client's
# from bash's `times`) and the OSD's CPU use in cores. 2 CPUs are shared by the cluster, the
# gateway and the client (and whatever else runs on the machine): compare within one run.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${OUT:-$root/bench/results}
secs=${SECS:-10}
qd=${QD:-32}
reps=${REPS:-3}
port=${PORT:-14250}
tport=$((port + 1))
bport=$((port + 2))
peer=${PEER_TGT:-$root/../shared/tools/peer-tgt}
bench=$build/linerate-bench
target=$build/linerate-target
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
md=$out/rbd-$stamp.md
work=$(mktemp -d /tmp/rbd-compare.XXXXXX)
lt_pid=""
lb_pid=""
tgt_up=0
tgt_note=""
iqn=iqn.2026-11.org.linerate:rbdbench

# The gateways are started in a command substitution, so they are not this shell's children:
# wait for them by polling, and stop the cluster only after they are gone (a gateway closing
# its image on a cluster that is gone hangs in librbd).
stop_pid() {
    [ -n "$1" ] && kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null
}
cleanup() {
    stop_pid "$lt_pid"
    stop_pid "$lb_pid"
    [ "$tgt_up" = 1 ] && "$peer" stop "$tport" >/dev/null 2>&1
    [ -f "$work/ceph/ceph.conf" ] && "$root/scripts/ceph-mini" stop "$work/ceph" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

echo "== starting the cluster"
# four filled 1 GiB images: more than ceph-mini's default 4 GiB memstore
CEPH_MINI_OSD_BYTES=${CEPH_MINI_OSD_BYTES:-8589934592} \
    "$root/scripts/ceph-mini" start "$work/ceph" >"$work/env" || exit 1
export CEPH_CONF=$work/ceph/ceph.conf
osd_pid=$(cat "$work/ceph/run/osd.0.pid")

fill() { # IMAGE: write all of it once
    rbd bench --io-type write --io-size 4M --io-threads 4 --io-total 1G --io-pattern seq "$1" \
        >/dev/null 2>&1
}

cpu_of() { # PID: utime+stime in clock ticks
    awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0
}
hz=$(getconf CLK_TCK)

# In the subshell that ran the client: its user+system seconds. `times` itself, not in a
# pipeline or a command substitution, which would fork a shell that has no children.
cputime() {
    times >"$work/times.$BASHPID"
    awk 'NR == 2 { gsub(/[ms]/, " "); print $1 * 60 + $2 + $3 * 60 + $4 }' "$work/times.$BASHPID"
}

# rbd bench IMAGE TYPE PATTERN SIZE TOTAL: prints "IOPS CLIENT_CPU_S" (rbd bench's IOPS)
rbdbench() {
    (
        rbd bench --io-type "$2" --io-pattern "$3" --io-size "$4" --io-threads "$qd" \
            --io-total "$5" "$1" 2>&1 | awk '/^elapsed:/ { printf "%.0f ", $6 }'
        cputime
    )
}

# lbench URL RW SIZE QD: prints "IOPS CLIENT_CPU_S" from linerate-bench's csv
lbench() {
    (
        "$bench" --sizes "$3" --rw "$2" --qd "$4" --seconds "$secs" --format csv "$1" \
            2>/dev/null | awk -F, 'NR > 1 { printf "%s ", $7 }'
        cputime
    )
}

rbd create --size 1G rbd/bench-direct && fill rbd/bench-direct
rbd create --size 1G rbd/bench-lr && fill rbd/bench-lr
# The two-gateway cells' image: without exclusive-lock, as docs/gateways.md says for an initiator that
# spreads I/O over all paths (with it, every write through the other gateway moves the lock).
[ -z "${NO_MULTIGW:-}" ] && rbd create --size 1G --image-feature layering rbd/bench-gw &&
    fill rbd/bench-gw

start_gw() { # PORT GROUP PEER OUTFILE: start a gateway (LUN 0 rbd/bench-lr, LUN 1 rbd/bench-gw)
    local luns=(--lun rbd:rbd/bench-lr)
    [ -z "${NO_MULTIGW:-}" ] && luns+=(--lun rbd:rbd/bench-gw)
    mkdir -p "$work/st-$2"
    "$target" --listen "127.0.0.1:$1" --target-name "$iqn" "${luns[@]}" \
        --alua-group "$2" --alua-peer "$3:active/optimized" --ctl-socket none \
        --state-dir "$work/st-$2" >"$4" 2>"$4.log" &
    echo $!
}
wait_url() { # OUTFILE
    for _ in $(seq 100); do grep -q '^iscsi://' "$1" && break; sleep 0.1; done
    head -n 1 "$1"
}

echo "== linerate-target (gateway A) on 127.0.0.1:$port"
lt_pid=$(start_gw "$port" 1 2 "$work/lt.out")
lt_url=$(wait_url "$work/lt.out")
[ -n "$lt_url" ] || { cat "$work/lt.out.log"; exit 1; }
lb_url=""
if [ -z "${NO_MULTIGW:-}" ]; then
    echo "== linerate-target (gateway B) on 127.0.0.1:$bport"
    lb_pid=$(start_gw "$bport" 2 1 "$work/lb.out")
    lb_url=$(wait_url "$work/lb.out")
    [ -n "$lb_url" ] || { cat "$work/lb.out.log"; exit 1; }
    ga_url=${lt_url%/*}/1
    gb_url=${lb_url%/*}/1
fi

tgt_url=""
tgt_pid=""
if [ -n "${NO_TGT:-}" ]; then
    tgt_note="tgt left out (NO_TGT=1)."
elif [ ! -x "$peer" ]; then
    tgt_note="tgt left out: no $peer."
elif ! dpkg-query -W -f='${Status}' tgt-rbd 2>/dev/null | grep -q "install ok"; then
    tgt_note="tgt left out: Debian's tgt-rbd (tgt's bs_rbd) is not installed."
else
    echo "== tgt (bs_rbd) on 127.0.0.1:$tport"
    rbd create --size 1G rbd/bench-tgt && fill rbd/bench-tgt
    tgt_up=1 # stop even a half-started tgtd on exit
    if ! tgt_url=$(PEER_RBD_IMAGE=rbd/bench-tgt "$peer" start "$tport" 1024 rbd 2>"$work/tgt.err"); then
        tgt_note="tgt not available: $(tail -n 2 "$work/tgt.err")"
        tgt_url=""
    else
        tgt_pid=$(cat "/tmp/peer-tgt-$tport/pid" 2>/dev/null)
    fi
fi
[ -n "$tgt_note" ] && echo "$tgt_note"

# measure SIDE CELL...: one measurement; appends "IOPS OSD_CPU GW_CPU CLIENT_CPU WALL" (CPU in
# seconds) to $work/SIDE,NAME
measure() {
    local side=$1 name=$2 rw=$3 type=$4 pattern=$5 size=$6 total=$7 bsize=$8
    local o0 g0 t0 o1 g1 t1 res gwp=""
    case $side in lr | gw1) gwp=$lt_pid ;; tgt) gwp=$tgt_pid ;; esac
    o0=$(cpu_of "$osd_pid")
    g0=0; [ -n "$gwp" ] && g0=$(cpu_of "$gwp")
    [ "$side" = gw2 ] && g0=$(($(cpu_of "$lt_pid") + $(cpu_of "$lb_pid")))
    t0=$(date +%s.%N)
    case $side in
    direct) res=$(rbdbench rbd/bench-direct "$type" "$pattern" "$size" "$total") ;;
    lr) res=$(lbench "$lt_url" "$rw" "$bsize" "$qd") ;;
    gw1) res=$(lbench "$ga_url" "$rw" "$bsize" "$qd") ;;
    tgt) res=$(lbench "$tgt_url" "$rw" "$bsize" "$qd") ;;
    gw2)
        lbench "$ga_url" "$rw" "$bsize" $((qd / 2)) >"$work/gw2a" &
        lbench "$gb_url" "$rw" "$bsize" $((qd - qd / 2)) >"$work/gw2b"
        wait
        res=$(cat "$work/gw2a" "$work/gw2b" | awk '{ i += $1; c += $2 } END { print i, c }')
        ;;
    esac
    t1=$(date +%s.%N)
    o1=$(cpu_of "$osd_pid")
    g1=0; [ -n "$gwp" ] && g1=$(cpu_of "$gwp")
    [ "$side" = gw2 ] && g1=$(($(cpu_of "$lt_pid") + $(cpu_of "$lb_pid")))
    read -r iops ccpu <<<"$res"
    echo "${iops:-0} $(awk -v a="$o0" -v b="$o1" -v h="$hz" 'BEGIN { print (b - a) / h }') \
$(awk -v a="$g0" -v b="$g1" -v h="$hz" 'BEGIN { print (b - a) / h }') ${ccpu:-0} \
$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" >>"$work/$side,$name"
    echo "   $side: ${iops:-?} IOPS"
}

total4k=$((qd * 4096 * 2000)) # rbd bench moves a fixed total: ~2000 full queues of 4 KiB
[ $total4k -lt $((64 << 20)) ] && total4k=$((64 << 20))
cells=("randwrite-4k randwrite write rand 4K $total4k 4k 4096"
    "randread-4k randread read rand 4K $total4k 4k 4096"
    "write-256k write write seq 256K 2G 256k 262144"
    "read-256k read read seq 256K 2G 256k 262144")
sides=(direct lr)
[ -n "$tgt_url" ] && sides+=(tgt)
for ((rep = 1; rep <= reps; rep++)); do
    order=("${sides[@]}")
    if ((rep % 2 == 0)); then
        order=()
        for ((i = ${#sides[@]} - 1; i >= 0; i--)); do order+=("${sides[i]}"); done
    fi
    for cell in "${cells[@]}"; do
        set -- $cell
        echo "== rep $rep: $1 (${order[*]})"
        for side in "${order[@]}"; do measure "$side" "$@"; done
    done
    if [ -n "$lb_url" ]; then
        for cell in "${cells[@]:0:2}"; do
            set -- $cell
            gorder=(gw1 gw2)
            ((rep % 2 == 0)) && gorder=(gw2 gw1)
            echo "== rep $rep: two gateways, $1 (${gorder[*]})"
            for side in "${gorder[@]}"; do measure "$side" "$@"; done
        done
    fi
done

# med SIDE NAME: median IOPS, and the medians of OSD, gateway and client CPU s per GB and of
# the OSD's cores, over the repetitions
med() {
    local f=$work/$1,$2 b=$3
    [ -s "$f" ] || { echo "0 - - - -"; return; }
    awk -v b="$b" '
        { n++; i[n] = $1; gb = $1 * $5 * b / 1e9;
          o[n] = gb > 0 ? $2 / gb : 0; g[n] = gb > 0 ? $3 / gb : 0; c[n] = gb > 0 ? $4 / gb : 0;
          oc[n] = $5 > 0 ? $2 / $5 : 0 }
        function m(a,   k, j, t) { for (k = 1; k <= n; k++) for (j = k + 1; j <= n; j++)
                                    if (a[j] < a[k]) { t = a[k]; a[k] = a[j]; a[j] = t }
                                 return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        END { printf "%.0f %.1f %.1f %.1f %.2f\n", m(i), m(o), m(g), m(c), m(oc) }' "$f"
}
all() { # SIDE NAME: every repetition's IOPS
    [ -s "$work/$1,$2" ] && awk '{ printf "%s%s", (NR > 1 ? " " : ""), $1 }' "$work/$1,$2" || echo -
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
mbs() { awk -v i="$1" -v b="$2" 'BEGIN { printf "%.1f", i * b / 1e6 }'; }
{
    echo "# RBD: linerate vs direct librbd$([ -n "$tgt_url" ] && echo " vs tgt bs_rbd"), $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "bench/rbd-compare.sh, $reps repetitions (sides alternating in order), medians, on $(nproc)"
    echo "CPUs shared with other work (load at the end: $(cut -d' ' -f1-3 /proc/loadavg));"
    echo "scripts/ceph-mini (1 mon, 1 mgr, 1 memstore OSD, pool size 1) on loopback; queue depth"
    echo "$qd everywhere; 1 GiB images filled first. Direct: \`rbd bench\` (--io-threads $qd)."
    echo "iSCSI: linerate-bench, 1 session, 1 connection, ${secs} s per cell, against"
    echo "linerate-target ($(git -C "$root" rev-parse --short HEAD))$([ -n "$tgt_url" ] && echo " and tgt's bs_rbd")."
    [ -n "$tgt_note" ] && echo "$tgt_note"
    echo
    echo "| test | librbd IOPS | linerate IOPS | tgt IOPS | linerate / librbd | linerate / tgt | librbd MB/s | linerate MB/s | tgt MB/s |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for cell in "${cells[@]}"; do
        set -- $cell
        read -r di _ <<<"$(med direct "$1" "$8")"
        read -r li _ <<<"$(med lr "$1" "$8")"
        read -r ti _ <<<"$(med tgt "$1" "$8")"
        echo "| $1 | $di | $li | ${ti/#0/-} | $(ratio "$li" "$di") | $(ratio "$li" "$ti") | $(mbs "$di" "$8") | $(mbs "$li" "$8") | $([ "$ti" = 0 ] && echo - || mbs "$ti" "$8") |"
    done
    if [ -n "$lb_url" ]; then
        echo
        echo "One initiator over two gateways (two bench processes at once, one session each at"
        echo "QD $((qd / 2)), IOPS summed) vs over one (one session at QD $qd to gateway A), on an"
        echo "image of its own created with \`--image-feature layering\` (no exclusive-lock):"
        echo
        echo "| test | one gateway IOPS | two gateways IOPS | two / one |"
        echo "|---|---|---|---|"
        for cell in "${cells[@]:0:2}"; do
            set -- $cell
            read -r g1 _ <<<"$(med gw1 "$1" "$8")"
            read -r g2 _ <<<"$(med gw2 "$1" "$8")"
            echo "| $1 | $g1 | $g2 | $(ratio "$g2" "$g1") |"
        done
    fi
    echo
    echo "CPU seconds per GB moved (medians; the gateway is linerate-target, tgtd, or both"
    echo "gateways; the client is rbd bench or linerate-bench), and the OSD's CPU use in cores:"
    echo
    echo "| test | side | IOPS per repetition | OSD s/GB | gateway s/GB | client s/GB | OSD cores |"
    echo "|---|---|---|---|---|---|---|"
    for cell in "${cells[@]}"; do
        set -- $cell
        for side in "${sides[@]}" gw1 gw2; do
            [ -s "$work/$side,$1" ] || continue
            read -r _ o g c oc <<<"$(med "$side" "$1" "$8")"
            echo "| $1 | $side | $(all "$side" "$1") | $o | $g | $c | $oc |"
        done
    done
    echo
    echo "Goals (issue 13): 4 KiB random IOPS >= 0.8 x librbd and >= 3 x tgt; 256 KiB sequential"
    echo "MB/s >= 0.9 x librbd; two gateways >= 1.5 x one gateway's 4 KiB IOPS."
} >"$md"
cat "$md"
echo "written: $md"
