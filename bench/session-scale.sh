#!/bin/bash
# session-scale.sh: aggregate 4 KiB IOPS and target memory as the number of sessions grows
# (issue 14, "Scale with sessions").
#
#   bench/session-scale.sh [BUILD_DIR]
#
# For each session count N (SESSIONS, default 1,8,64,256) a fresh linerate-target
# (--threads THREADS, default 1; LUN LUN, default ram:256M,prealloc so that reads move real
# memory and writes pay no first-touch fault) is started, its VmRSS read once it listens (idle),
# then `linerate-bench --sessions N --qd QD --sizes 4k` runs each of RWS (default
# randread,randwrite) for SECS seconds (default 5) while VmRSS is sampled every 0.2 s; the
# highest sample is the RSS at N sessions, and (RSS at N - idle RSS) / N the memory per session.
# REPS (default 1) repeats the whole sweep, the session counts in turn within each repetition.
# PIN=1 (default) runs the target on CPU 0 and the bench on CPU 1 (taskset), as in issue 14;
# PIN=0 leaves both unpinned. PORT (default 15700) is the target's port. OUT (default
# bench/results) gets session-scale-DATE.md (table) and session-scale-DATE.raw (one line per
# cell: rep sessions rw iops p50_us p99_us target_us_per_kb rss_idle_kib rss_kib user_us_io
# sys_us_io). The target's user and system CPU per I/O (from /proc/PID/stat around the bench
# run, logins included) are steadier than IOPS on a shared machine: the user part is what the
# target's own code costs per command, the system part mostly loopback TCP.
#
# SPDK=1 (with PIN=1) runs the same cells against SPDK's iscsi_tgt in each repetition
# (../shared/tools/peer-spdk, PEER_SPDK; one reactor on CPU 0, a RAM bdev the size of the LUN on
# 2 MiB hugepages unless PEER_SPDK_HUGE=0), up to 64 sessions, the most peer-spdk admits; its
# IOPS are a column of the table. Its reactor busy-polls CPU 0, so it runs only for its cells.
#
# QD is per session (the bench's --qd): 256 sessions keep 256 x QD commands outstanding. The
# machine's load average is recorded with the figures: on a shared machine they are rough.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
out=${OUT:-$root/bench/results}
sessions=${SESSIONS:-1,8,64,256}
rws=${RWS:-randread,randwrite}
secs=${SECS:-5}
qd=${QD:-32}
reps=${REPS:-1}
threads=${THREADS:-1}
lun=${LUN:-ram:256M,prealloc}
port=${PORT:-15700}
pin=${PIN:-1}
spdk=${PEER_SPDK:-$root/../shared/tools/peer-spdk}
with_spdk=${SPDK:-0}
spdk_max=64 # peer-spdk's max_sessions
spdk_up=
bench=$build/linerate-bench
target=$build/linerate-target
stamp=$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
raw=$out/session-scale-$stamp.raw
md=$out/session-scale-$stamp.md
work=$(mktemp -d /tmp/linerate-sscale.XXXXXX)

for x in "$bench" "$target"; do
    [ -x "$x" ] || { echo "session-scale.sh: $x is missing (run make)" >&2; exit 2; }
done
if [ "$pin" = 1 ] && [ "$(nproc --all)" -lt 2 ]; then
    echo "session-scale.sh: PIN=1 needs two CPUs; PIN=0 to run unpinned" >&2
    exit 2
fi
if [ "$with_spdk" = 1 ] && { [ "$pin" != 1 ] || [ ! -x "$spdk" ]; }; then
    echo "session-scale.sh: SPDK=1 needs PIN=1 and peer-spdk at $spdk" >&2
    exit 2
fi
export PEER_SPDK_HUGE=${PEER_SPDK_HUGE:-1}
tpin=(); bpin=()
if [ "$pin" = 1 ]; then tpin=(taskset -c 0); bpin=(taskset -c 1); fi

tpid=
cleanup() {
    [ -n "$spdk_up" ] && "$spdk" stop "$((port + 1))" >/dev/null 2>&1
    [ -n "$tpid" ] && kill "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "session-scale: $*" >&2; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
ticks() { awk '{print $14, $15}' "/proc/$1/stat"; } # utime stime
hz=$(getconf CLK_TCK)

start_target() {
    "${tpin[@]}" "$target" --listen "127.0.0.1:$port" --threads "$threads" --lun "$lun" \
        --ctl-socket none --log-level warn >"$work/url" 2>"$work/target.log" &
    tpid=$!
    # up to 2 minutes: the prealloc LUN is touched page by page at start (slow on a loaded VM)
    for _ in $(seq 1200); do
        [ -s "$work/url" ] && break
        kill -0 "$tpid" 2>/dev/null || break
        sleep 0.1
    done
    url=$(head -1 "$work/url")
    [ -n "$url" ] || { echo "session-scale.sh: linerate-target did not start:" >&2; cat "$work/target.log" >&2; exit 1; }
}
stop_target() {
    kill "$tpid" 2>/dev/null && wait "$tpid" 2>/dev/null
    tpid=
    for _ in $(seq 50); do [ -z "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] && break; sleep 0.1; done
}

# SPDK's cells of one repetition, as raw lines "spdk rep sessions rw iops p50_us p99_us".
spdk_rep() { # rep
    local rep=$1 surl mib
    mib=$(awk -v l="$lun" 'BEGIN { sub(/^ram:/, "", l); sub(/,.*/, "", l); n = l + 0
        u = substr(l, length(l)); print (u == "G" ? n * 1024 : n) }')
    if ! surl=$("$spdk" start "$((port + 1))" "$mib" 0x1 2>"$work/spdk.err"); then
        log "rep $rep: peer-spdk did not start: $(tail -1 "$work/spdk.err")"
        "$spdk" stop "$((port + 1))" >/dev/null 2>&1
        return 0
    fi
    spdk_up=1
    "${bpin[@]}" "$bench" --sizes 64k --rw write --seconds 2 "$surl" >/dev/null 2>&1 # fill
    for n in ${sessions//,/ }; do
        [ "$n" -le "$spdk_max" ] || continue
        for rw in ${rws//,/ }; do
            log "rep $rep/$reps: SPDK, $n sessions, 4k $rw"
            "${bpin[@]}" "$bench" --sizes 4k --rw "$rw" --sessions "$n" --qd "$qd" --seconds "$secs" \
                --format csv "$surl" 2>"$work/bench.err" | tail -n +2 |
                while IFS=, read -r _ r _ _ _ _ iops p50 p99 _; do
                    [ -n "$iops" ] && echo "spdk $rep $n $r $iops $p50 $p99" >>"$raw"
                done
        done
    done
    "$spdk" stop "$((port + 1))" >/dev/null 2>&1
    spdk_up=
}

{
    echo "# session-scale.sh $stamp sessions=$sessions rws=$rws secs=$secs qd=$qd reps=$reps threads=$threads lun=$lun pin=$pin"
    echo "# $(uname -r), $(nproc --all) CPUs, $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
    echo "# uptime at start: $(uptime)"
    echo "# rep sessions rw iops p50_us p99_us target_us_per_kb rss_idle_kib rss_kib user_us_io sys_us_io"
} >"$raw"

t0=$(date +%s)
for rep in $(seq "$reps"); do
    for n in ${sessions//,/ }; do
        start_target
        idle=$(rss_kib "$tpid")
        for rw in ${rws//,/ }; do
            log "rep $rep/$reps: $n sessions, 4k $rw"
            # sample the target's RSS while the bench runs; the highest sample is kept
            ( peak=0; while kill -0 "$tpid" 2>/dev/null; do
                  r=$(rss_kib "$tpid"); [ -n "$r" ] && [ "$r" -gt "$peak" ] && { peak=$r; echo "$peak" >"$work/peak"; }
                  sleep 0.2
              done ) &
            sampler=$!
            read -r u0 s0 < <(ticks "$tpid")
            "${bpin[@]}" "$bench" --sizes 4k --rw "$rw" --sessions "$n" --qd "$qd" --seconds "$secs" \
                --target-pid "$tpid" --format csv "$url" >"$work/csv" 2>"$work/bench.err" ||
                { log "bench failed ($n sessions, $rw):"; tail -3 "$work/bench.err" >&2; }
            read -r u1 s1 < <(ticks "$tpid")
            kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
            peak=$(cat "$work/peak" 2>/dev/null || echo 0); rm -f "$work/peak"
            # size,rw,digest,connections,qd,mb_per_s,iops,lat_p50_us,lat_p99_us,ini_us_per_kb,tgt_us_per_kb
            tail -n +2 "$work/csv" | while IFS=, read -r _ r _ _ _ _ iops p50 p99 _ tkb; do
                [ -n "$iops" ] || continue
                cpu=$(awk -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v n="$iops" -v t="$secs" \
                    'BEGIN { printf "%.3f %.3f", u * 1e6 / hz / (n * t), s * 1e6 / hz / (n * t) }')
                echo "$rep $n $r $iops $p50 $p99 ${tkb:-} $idle $peak $cpu" >>"$raw"
            done
        done
        stop_target
    done
    [ "$with_spdk" = 1 ] && spdk_rep "$rep"
done
elapsed=$(($(date +%s) - t0))

# ---- medians over repetitions ----
med() {   # sessions rw column [spdk] -> median (SPDK's lines: one column further right)
    awk -v n="$1" -v rw="$2" -v c="$3" -v who="${4:-}" '!/^#/ && (who == "spdk" ? $1 == "spdk" && $3 == n && $4 == rw : $1 != "spdk" && $2 == n && $3 == rw) && $c != "" {v[k++] = $c}
        END { if (!k) exit; for (i = 0; i < k; i++) for (j = i + 1; j < k; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
              m = k % 2 ? v[int(k / 2)] : (v[k / 2 - 1] + v[k / 2]) / 2; printf (m >= 100 ? "%.0f" : "%.3g"), m }' "$raw"
}
{
    echo "# linerate session scaling ($stamp)"
    echo
    echo "\`bench/session-scale.sh\`: linerate-target --threads $threads, LUN \`$lun\`, 4 KiB, QD $qd per session, ${secs}s per cell, $reps repetition(s) (medians)$([ "$pin" = 1 ] && echo ", target on CPU 0 and bench on CPU 1"). $(nproc --all) CPUs, $elapsed s."
    echo "Load at the start: \`$(sed -n 3p "$raw" | sed 's/^# uptime at start: *//')\`; at the end: \`$(uptime)\`."
    echo "Raw numbers: \`$(basename "$raw")\`."
    echo
    [ "$with_spdk" = 1 ] && echo "SPDK iscsi_tgt (peer-spdk, one reactor on CPU 0, RAM bdev$([ "$PEER_SPDK_HUGE" = 1 ] && echo " on 2 MiB hugepages"), at most $spdk_max sessions) under the same bench cells, in each repetition after linerate's." && echo
    echo "| sessions | rw | IOPS | p50 µs | p99 µs | target µs/KB | target user / sys µs per I/O | RSS idle KiB | RSS at N KiB | KiB/session |$([ "$with_spdk" = 1 ] && echo " SPDK IOPS | SPDK p99 µs |")"
    echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|$([ "$with_spdk" = 1 ] && echo "---:|---:|")"
    for n in ${sessions//,/ }; do
        for rw in ${rws//,/ }; do
            idle=$(med "$n" "$rw" 8); rss=$(med "$n" "$rw" 9)
            per=$(awk -v a="${rss:-0}" -v b="${idle:-0}" -v n="$n" 'BEGIN{printf "%.1f", (a - b) / n}')
            sp=
            [ "$with_spdk" = 1 ] && sp=" $(med "$n" "$rw" 5 spdk) | $(med "$n" "$rw" 7 spdk) |"
            echo "| $n | $rw | $(med "$n" "$rw" 4) | $(med "$n" "$rw" 5) | $(med "$n" "$rw" 6) | $(med "$n" "$rw" 7) | $(med "$n" "$rw" 10) / $(med "$n" "$rw" 11) | $idle | $rss | $per |$sp"
        done
    done
} >"$md"
cat "$md"
