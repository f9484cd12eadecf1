#!/bin/bash
# Network partitions, for real (issue 30 item 4; docs/ha.md): the Ceph mini cluster, two
# linerate-target gateways of one rbd LUN in alua-mode = failover, and the initiator, each in a
# network namespace of its own (tests/ha/netns.sh), while tests/ha/ha_writer.py writes stamped
# blocks with FUA through the gateway that answers. Each round cuts one link and restores it:
#
#   cluster  the active/optimized gateway <-> the cluster (both sides; the gateway's side
#            only; the cluster's side only, in turn): the other gateway fences it and takes
#            over; the fenced one is restarted (a new Ceph client) after the restore, standby
#   path     the initiator <-> the active/optimized gateway (both sides or one, in turn): the
#            gateway still beats through the cluster, so nothing fails over; the writer waits
#            on the standby's NOT READY until the path is back
#   hb       gateway <-> gateway only: the heartbeats go through RADOS, so this cuts nothing
#            the design uses; it must change nothing (same AO, same epoch, nobody fenced)
#
# After the rounds the image is exported (rbd export, from the cluster's namespace) and checked:
# acknowledged writes lost, stale reads and a fenced gateway's writes on the image must all be
# 0; the pause per kind (last acknowledgement before the cut to the first after) is printed.
#
#   tests/ha/partition.sh BUILD_DIR   (root; make ha)
#   HA_ROUNDS=N     rounds of each kind (default 2)
#   HA_KINDS="cluster path hb"   the kinds, in this order each round
#   HA_HB=500ms HA_TIMEOUT=3s    failover-heartbeat and failover-timeout
#   HA_PATH_CUT_S=4  how long a path cut lasts; an hb cut lasts 2 timeouts
#   HA_KEEP=DIR     copy the writer's log, the marks and the gateways' logs there
# Exit 0 when every check holds, 1 on a failure, 77 when it cannot run here (not root, no ip
# netns, no Ceph, no rbd in this build).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${1:?usage: tests/ha/partition.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
LT=$BUILD/linerate-target
CTL=$BUILD/linerate-ctl

skip() {
    echo "SKIP: $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
ip netns list >/dev/null 2>&1 || skip "no ip netns (iproute2) here"
for b in ceph-mon ceph-osd ceph rados rbd monmaptool python3; do
    command -v "$b" >/dev/null 2>&1 || skip "$b is not installed (scripts/install-deps test)"
done
[ -x "$LT" ] && [ -x "$CTL" ] || { echo "FAIL: $LT or $CTL not built" >&2; exit 1; }
[ -e "$BUILD/src/bs/linerate-rbd.so" ] || skip "this build has no rbd store (install librbd-dev librados-dev)"

. "$HERE/netns.sh"

ROUNDS=${HA_ROUNDS:-2}
KINDS=${HA_KINDS:-cluster path hb}
HB=${HA_HB:-500ms}
TIMEOUT=${HA_TIMEOUT:-3s}
TIMEOUT_S=${TIMEOUT%s}
PATH_CUT_S=${HA_PATH_CUT_S:-4}
IMAGE=rbd/ha

fail() {
    echo "FAIL: $*" >&2
    [ -n "${HA_KEEP:-}" ] && keep
    exit 1
}

now() { date +%s.%N; }

declare -A GW_N=([gw1]=11 [gw2]=12) GW_GROUP=([gw1]=1 [gw2]=2) GW_PID=()

# start_gw NODE STATE: the gateway of NODE (a new process, a new Ceph client), its config in
# $HA_WORK/NODE.conf; waits until its control socket answers.
start_gw() {
    local node=$1 state=$2 peer
    [ "$node" = gw1 ] && peer=2 || peer=1
    rm -f "$HA_WORK/$node.sock"
    cat >"$HA_WORK/$node.conf" <<EOF
ctl-socket = $HA_WORK/$node.sock
state-dir = $HA_WORK/$node.state
log-level = info
threads = 2
[target $HA_TARGET]
portal = $HA_NET.${GW_N[$node]}:3260
alua-group = ${GW_GROUP[$node]}
alua-peer = $peer:standby
alua-state = $state
alua-mode = failover
failover-heartbeat = $HB
failover-timeout = $TIMEOUT
lun 0 = rbd:$IMAGE
EOF
    setpriv --pdeathsig KILL ip netns exec "$(ha_ns "$node")" env CEPH_CONF="$CEPH_CONF" \
        "$LT" --config "$HA_WORK/$node.conf" >>"$HA_WORK/$node.log" 2>&1 &
    GW_PID[$node]=$!
    HA_PIDS+=("$!")
    local _
    for _ in $(seq 300); do
        "$CTL" --socket "$HA_WORK/$node.sock" show luns >/dev/null 2>&1 && return 0
        kill -0 "${GW_PID[$node]}" 2>/dev/null || break
        sleep 0.1
    done
    fail "gateway $node did not start: $(tail -n 5 "$HA_WORK/$node.log")"
}

# stop_gw NODE: SIGTERM, as an operator restarts a fenced gateway. A fenced gateway exits 1
# (its last flush is refused: "1 LUN failed to flush"), as it should; one that dies of a
# signal is counted in ABORTS: a gateway stopped while commands were stuck in a store cut from
# the cluster has been seen to abort at exit (scsi_lun_free's assertion; docs/ha.md).
ABORTS=0
stop_gw() {
    local pid=${GW_PID[$1]} rc
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    rc=$?
    if [ "$rc" -ge 128 ]; then
        ABORTS=$((ABORTS + 1))
        echo "  gateway $1 died of signal $((rc - 128)) at SIGTERM: $(grep -E "Assertion|still open" "$HA_WORK/$1.log" | tail -n 1 | tail -c 160)"
    fi
}

# alua NODE: "AO EPOCH FENCED" of LUN 0 as NODE's gateway reports it ("- - -" if it does not).
alua() {
    "$CTL" --socket "$HA_WORK/$1.sock" --json show luns 2>/dev/null | python3 -c '
import json, sys
try:
    r = json.load(sys.stdin)
    luns = r.get("luns", r.get("result")) if isinstance(r, dict) else r
    f = luns[0]["alua"]["failover"]
    print(f["ao"], f["epoch"], int(bool(f["fenced"])))
except Exception:
    print("- - -")'
}

# wait_until SECONDS WHAT CMD...
wait_until() {
    local t=$1 what=$2 i
    shift 2
    for ((i = 0; i < t * 10; i++)); do
        "$@" && return 0
        sleep 0.1
    done
    fail "$what: not within $t s"
}

acks() { awk '{print $2}' "$HA_WORK/w/status" 2>/dev/null || echo 0; }
writer_alive() { kill -0 "$WRITER" 2>/dev/null || fail "the writer died: $(tail -n 5 "$HA_WORK/writer.err")"; }
acks_past() { writer_alive; [ "$(acks)" -ge "$1" ]; }
ao_is() { [ "$(alua "$1" | awk '{print $1}')" = "$2" ]; }
# joined NODE GROUP: NODE's gateway says GROUP is active/optimized and it is not fenced
joined() {
    local ao fenced
    read -r ao _ fenced <<<"$(alua "$1")"
    [ "$ao" = "$2" ] && [ "$fenced" = 0 ]
}

# The node whose group the cluster names active/optimized, asked of the given gateway.
ao_node() {
    case $(alua "$1" | awk '{print $1}') in
    1) echo gw1 ;;
    2) echo gw2 ;;
    *) echo "" ;;
    esac
}

keep() {
    mkdir -p "$HA_KEEP"
    cp "$HA_WORK"/w/log "$HA_WORK"/marks "$HA_WORK"/*.log "$HA_KEEP"/ 2>/dev/null
}

ha_setup || exit $?
{ ha_node ini 1 && ha_node ceph 2 && ha_node gw1 11 && ha_node gw2 12; } || fail "namespaces"
t0=$SECONDS
ha_ceph ceph 2 || fail "the Ceph cluster in its namespace"
echo "ceph up in namespace $(ha_ns ceph) at $HA_NET.2 in $((SECONDS - t0)) s"
ha_ceph_cli ceph rbd create --size 64M "$IMAGE" || fail "rbd create"
start_gw gw1 active/optimized
start_gw gw2 standby
wait_until 30 "gw1 active/optimized" ao_is gw1 1
wait_until 30 "gw2 sees gw1 active/optimized" ao_is gw2 1
echo "gateways up: gw1 ($HA_NET.11) active/optimized, gw2 ($HA_NET.12) standby"

mkdir "$HA_WORK/w"
: >"$HA_WORK/marks"
ha_run ini python3 "$HERE/ha_writer.py" run "$HA_WORK/w" "$HA_TARGET" "$HA_NET.11" "$HA_NET.12" \
    2>"$HA_WORK/writer.err" &
WRITER=$!
HA_PIDS+=("$WRITER")
wait_until 60 "the writer's first 50 acknowledgements" acks_past 50

# mark KIND CUT_T: the cut restored now
mark() { echo "$1 $2 $(now)" >>"$HA_WORK/marks"; }

round_cluster() {
    local i=$1 ao other side t a
    ao=$(ao_node gw1)
    [ "$ao" = gw1 ] && other=gw2 || other=gw1
    side=$(((i - 1) % 3))
    a=$(acks)
    t=$(now)
    case $side in
    0) ha_cut_pair "$ao" "${GW_N[$ao]}" ceph 2 ;;
    1) ha_cut_pair "$ao" "${GW_N[$ao]}" ceph 2 a ;;
    2) ha_cut_pair ceph 2 "$ao" "${GW_N[$ao]}" a ;;
    esac
    wait_until 60 "$other takes over from $ao" ao_is "$other" "${GW_GROUP[$other]}"
    a=$(acks)
    wait_until 60 "writes through $other after the takeover" acks_past $((a + 20))
    ha_restore_pair "$ao" "${GW_N[$ao]}" ceph 2
    mark cluster "$t"
    # the fenced gateway, a new process (a new Ceph client): standby
    stop_gw "$ao"
    start_gw "$ao" standby
    wait_until 30 "$ao back, standby" joined "$ao" "${GW_GROUP[$other]}"
    echo "cluster $i: $ao cut from the cluster ($(echo "both gateway-side cluster-side" |
        cut -d' ' -f$((side + 1)))): $other took over; $ao restarted standby"
}

round_path() {
    local i=$1 ao before t a
    ao=$(ao_node gw1)
    before=$(alua gw1)
    a=$(acks)
    t=$(now)
    if [ $((i % 2)) = 1 ]; then
        ha_cut_pair ini 1 "$ao" "${GW_N[$ao]}"
    else
        ha_cut_pair "$ao" "${GW_N[$ao]}" ini 1 a
    fi
    sleep "$PATH_CUT_S"
    ha_restore_pair ini 1 "$ao" "${GW_N[$ao]}"
    a=$(acks)
    wait_until 60 "writes after the path to $ao came back" acks_past $((a + 20))
    mark path "$t"
    [ "$(alua gw1)" = "$before" ] || fail "path cut $i: the AO state changed ($before -> $(alua gw1))"
    echo "path $i: initiator <-> $ao cut ${PATH_CUT_S} s and restored; no failover (none is due)"
}

round_hb() {
    local i=$1 b1 b2 t a
    b1=$(alua gw1)
    b2=$(alua gw2)
    t=$(now)
    ha_cut_pair gw1 11 gw2 12
    a=$(acks)
    sleep $((2 * ${TIMEOUT_S%.*} + 1))
    acks_past $((a + 10)) || fail "hb cut $i: writes stalled while only gw1 <-> gw2 was cut"
    ha_restore_pair gw1 11 gw2 12
    mark hb "$t"
    [ "$(alua gw1)" = "$b1" ] && [ "$(alua gw2)" = "$b2" ] ||
        fail "hb cut $i: the ALUA state changed: gw1 $b1 -> $(alua gw1), gw2 $b2 -> $(alua gw2)"
    echo "hb $i: gw1 <-> gw2 cut $((2 * ${TIMEOUT_S%.*} + 1)) s: same AO, same epoch ($b1), nobody fenced"
}

T0=$SECONDS
for ((r = 1; r <= ROUNDS; r++)); do
    for kind in $KINDS; do
        "round_$kind" "$r"
    done
done
echo "$ROUNDS rounds of [$KINDS] in $((SECONDS - T0)) s, $(acks) writes acknowledged"

touch "$HA_WORK/w/stop"
wait "$WRITER"
rc=$?
[ "$rc" = 0 ] || fail "the writer exited $rc: $(tail -n 5 "$HA_WORK/writer.err")"
for n in gw1 gw2; do stop_gw "$n"; done
ha_ceph_cli ceph rbd export "$IMAGE" "$HA_WORK/image" >/dev/null 2>&1 || fail "rbd export"
python3 "$HERE/ha_writer.py" check "$HA_WORK/w" "$HA_WORK/image" "$HA_WORK/marks"
rc=$?
[ -n "${HA_KEEP:-}" ] && keep
echo "gateways killed by a signal at SIGTERM (not by the harness): $ABORTS"
[ "$rc" = 0 ] || fail "lost, stale or fenced writes (above)"
echo "ok"
