#!/bin/bash
# Network partitions for the HA work (issue 30 item 4), first step: network namespaces of our
# own joined by veth pairs to a bridge, two linerate-target gateways in them, and links cut and
# restored with `ip link set ... down|up`. Every address is inside these namespaces (10.77.0.0/24
# on a bridge in a namespace of its own): nothing is added to the host's network.
#
#   tests/ha/netns.sh BUILD_DIR     the self-check below (root; about 10 s); exit 0 when it holds
#   . tests/ha/netns.sh             the functions, for the harnesses that come next
#
# Layout, for a run whose shell has pid P (names carry it, so that runs do not meet):
#   lrhaP-sw    the switch: bridge br0 and one port s-NODE per node
#   lrhaP-NODE  a node (ini, gw1, gw2, ...): eth0 (10.77.0.N) to s-NODE, and lo
# ha_cut NODE [both|node|switch] takes the link down on the switch's side, the node's or both
# (a one-sided cut: the node still sees its carrier go, or not); ha_restore NODE brings both up.
# ha_ceph NODE N puts scripts/ceph-mini's cluster in node NODE (address $HA_NET.N) and exports
# CEPH_CONF for the clients of every other node (the file is shared, the network is not);
# ha_cut_pair A AN B BN / ha_restore_pair A AN B BN cut only the traffic between two nodes (a
# blackhole route in each, or in one), the rest of their links untouched.
#
# Cleanup: on exit and on INT, TERM and HUP the gateways are stopped and the namespaces deleted
# (which deletes the veths and the bridge). The daemons are started with a parent-death signal
# (setpriv --pdeathsig KILL), so a SIGKILLed harness leaves no daemon behind; the namespaces it
# leaves (bind mounts with no process) and its /tmp/lrhaP.* directory are deleted by the next
# run, which removes every lrhaP-* whose P is no longer a running process.
set -u

HA_NET=10.77.0
HA_P="lrha$$"
HA_NODES=()
HA_PIDS=()
HA_WORK=""
HA_CEPH_DIR=""
HA_CEPH_MINI=${HA_CEPH_MINI:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/ceph-mini}

ha_ns() { echo "$HA_P-$1"; }

# Namespaces of runs whose shell is gone (a harness killed with SIGKILL).
ha_sweep_stale() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^lrha[0-9]+-'); do
        pid=${ns#lrha}
        pid=${pid%%-*}
        [ -d "/proc/$pid" ] && continue
        ha_kill_ns "$ns"
        ip netns del "$ns" 2>/dev/null
    done
    local dir
    for dir in /tmp/lrha[0-9]*.??????; do
        [ -d "$dir" ] || continue
        pid=${dir#/tmp/lrha}
        pid=${pid%%.*}
        [ -d "/proc/$pid" ] || rm -rf "$dir"
    done
}

# Every process left in namespace NS (the Ceph daemons fork away from the harness: neither its
# pids nor a parent-death signal reach them), by pid.
ha_kill_ns() {
    local p
    for p in $(ip netns pids "$1" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
}

ha_cleanup() {
    local pid n
    trap - EXIT INT TERM HUP
    [ -n "$HA_CEPH_DIR" ] && "$HA_CEPH_MINI" stop "$HA_CEPH_DIR" >/dev/null 2>&1
    HA_CEPH_DIR=""
    for pid in "${HA_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
    for pid in "${HA_PIDS[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    HA_PIDS=()
    for n in "${HA_NODES[@]}"; do
        ha_kill_ns "$(ha_ns "$n")"
        ip netns del "$(ha_ns "$n")" 2>/dev/null
    done
    ip netns del "$(ha_ns sw)" 2>/dev/null
    HA_NODES=()
    [ -n "$HA_WORK" ] && rm -rf "$HA_WORK"
}

# The switch namespace and its bridge; the traps.
ha_setup() {
    [ "$(id -u)" = 0 ] || { echo "netns.sh: needs root (ip netns)" >&2; return 2; }
    ha_sweep_stale
    trap ha_cleanup EXIT
    trap 'ha_cleanup; exit 130' INT
    trap 'ha_cleanup; exit 143' TERM
    trap 'ha_cleanup; exit 129' HUP
    HA_WORK=$(mktemp -d "/tmp/$HA_P.XXXXXX")
    local sw
    sw=$(ha_ns sw)
    ip netns add "$sw" || return 1
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
}

# ha_node NAME N: a namespace with eth0 = $HA_NET.N/24 on the bridge.
ha_node() {
    local name=$1 n=$2 ns sw
    ns=$(ha_ns "$name")
    sw=$(ha_ns sw)
    ip netns add "$ns" || return 1
    HA_NODES+=("$name")
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "s-$name" type veth peer name eth0 netns "$ns" || return 1
    ip -n "$sw" link set "s-$name" master br0
    ip -n "$sw" link set "s-$name" up
    ip -n "$ns" addr add "$HA_NET.$n/24" dev eth0
    ip -n "$ns" link set eth0 up
}

# ha_run NODE CMD...: CMD inside the node's namespace.
ha_run() {
    local ns
    ns=$(ha_ns "$1")
    shift
    ip netns exec "$ns" "$@"
}

# ha_gateway NODE N GROUP PEER LINERATE_TARGET [more options]: a gateway listening on
# $HA_NET.N:3260 in NODE, ALUA group GROUP, told of PEER ("ID:STATE"); log and control socket
# in $HA_WORK/NODE.{log,sock}. Returns when it listens.
ha_gateway() {
    local node=$1 n=$2 group=$3 peer=$4 bin=$5
    shift 5
    setpriv --pdeathsig KILL ip netns exec "$(ha_ns "$node")" "$bin" \
        --listen "$HA_NET.$n:3260" --target-name "$HA_TARGET" --threads 1 \
        --ctl-socket "$HA_WORK/$node.sock" --state-dir "$HA_WORK/$node.state" \
        --alua-group "$group" --alua-peer "$peer" "$@" >"$HA_WORK/$node.log" 2>&1 &
    HA_PIDS+=("$!")
    local _
    for _ in $(seq 100); do
        [ -S "$HA_WORK/$node.sock" ] && return 0
        kill -0 "$!" 2>/dev/null || break
        sleep 0.1
    done
    echo "netns.sh: gateway $node did not start:" >&2
    cat "$HA_WORK/$node.log" >&2
    return 1
}

# ha_cut NODE [both|node|switch]; ha_restore NODE
ha_cut() {
    local side=${2:-both}
    [ "$side" = node ] || ip -n "$(ha_ns sw)" link set "s-$1" down
    [ "$side" = switch ] || ip -n "$(ha_ns "$1")" link set eth0 down
}

ha_restore() {
    ip -n "$(ha_ns sw)" link set "s-$1" up
    ip -n "$(ha_ns "$1")" link set eth0 up
}

# ha_ceph NODE N: scripts/ceph-mini's one-OSD cluster in NODE (already made with ha_node NODE
# N), its daemons bound to $HA_NET.N (mon port 6789: the namespace is ours alone), state in
# $HA_WORK/ceph; exports CEPH_CONF. No mgr unless HA_CEPH_MGR=1 (rbd I/O, locks and blocklists
# need the mon and the OSD only). Stopped by ha_cleanup. About 10-20 s.
ha_ceph() {
    local node=$1 n=$2
    HA_CEPH_DIR=$HA_WORK/ceph
    local nomgr=1
    [ "${HA_CEPH_MGR:-0}" = 1 ] && nomgr=""
    if ! ha_run "$node" env CEPH_MINI_ADDR="$HA_NET.$n" CEPH_MINI_PORT=6789 \
        CEPH_MINI_NO_MGR="$nomgr" "$HA_CEPH_MINI" start "$HA_CEPH_DIR" \
        >"$HA_WORK/ceph.env" 2>"$HA_WORK/ceph.err"; then
        cat "$HA_WORK/ceph.err" >&2
        HA_CEPH_DIR=""
        return 1
    fi
    export CEPH_CONF=$HA_CEPH_DIR/ceph.conf
}

# ha_ceph_cli NODE CMD...: a Ceph client command (rbd, rados, ceph) run from NODE.
ha_ceph_cli() {
    local node=$1
    shift
    ha_run "$node" env CEPH_CONF="$CEPH_CONF" "$@"
}

# ha_cut_pair A AN B BN [both|a]; ha_restore_pair A AN B BN: the traffic between nodes A
# ($HA_NET.AN) and B ($HA_NET.BN) only, cut by a blackhole route to the other in each node's
# own namespace (no firewall needed), or in A's alone (one-sided: A's packets to B vanish, B's
# still reach A, whose answers vanish); each node keeps its other links.
ha_cut_pair() {
    ha_run "$1" ip route add blackhole "$HA_NET.$4/32" || return 1
    [ "${5:-both}" = a ] || ha_run "$3" ip route add blackhole "$HA_NET.$2/32"
}

ha_restore_pair() {
    ha_run "$1" ip route del blackhole "$HA_NET.$4/32" 2>/dev/null
    ha_run "$3" ip route del blackhole "$HA_NET.$2/32" 2>/dev/null
    return 0
}

HA_TARGET=iqn.2026-11.org.linerate:ha

# --- the self-check ---

ha_fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# ha_inq NODE N [S]: INQUIRY of LUN 0 of the gateway at $HA_NET.N from NODE (libiscsi's
# iscsi-inq), given at most S seconds (default 10); its status.
ha_inq() {
    ha_run "$1" timeout "${3:-10}" iscsi-inq "iscsi://$HA_NET.$2:3260/$HA_TARGET/0" >/dev/null 2>&1
}

ha_selfcheck() {
    local build=$1
    command -v iscsi-inq >/dev/null || { echo "netns.sh: iscsi-inq (libiscsi-bin) missing" >&2; exit 77; }
    ha_setup || exit $?
    { ha_node ini 1 && ha_node gw1 11 && ha_node gw2 12; } || ha_fail "namespaces"
    ha_gateway gw1 11 1 2:active/non-optimized "$build/linerate-target" --lun ram:16M ||
        ha_fail "gateway 1"
    ha_gateway gw2 12 2 1:active/optimized "$build/linerate-target" --lun ram:16M \
        --alua-state active/non-optimized || ha_fail "gateway 2"
    { ha_inq ini 11 && ha_inq ini 12; } || ha_fail "the initiator does not reach both gateways"
    echo "both gateways reached from the initiator's namespace"
    ! ip -o addr show | grep -q "$HA_NET\." || ha_fail "an address of the harness in the host's namespace"
    local side
    for side in both switch node; do
        ha_cut gw1 "$side"
        ! ha_inq ini 11 3 || ha_fail "gateway 1 still answers with its link cut ($side)"
        ha_inq ini 12 || ha_fail "gateway 2 lost while gateway 1's link was cut ($side)"
        ha_restore gw1
        ha_inq ini 11 || ha_fail "gateway 1 does not answer after its link came back ($side)"
        echo "gw1 cut ($side side) and restored: gw2 served throughout, gw1 back"
    done
    local pid
    for pid in "${HA_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || ha_fail "a gateway died"; done
    echo "ok"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    [ $# -eq 1 ] || { echo "usage: tests/ha/netns.sh BUILD_DIR" >&2; exit 2; }
    ha_selfcheck "$1"
fi
