#!/usr/bin/env bash
# The Linux kernel initiator with dm-multipath (issue 30 item 5) in front of two linerate-target
# gateways of one target in failover mode (alua-mode = failover, docs/gateways.md) serving one
# rbd LUN of scripts/ceph-mini's cluster. The Ceph cluster, each gateway and the initiator live
# in network namespaces of their own (tests/ha/netns.sh: veth pairs on a bridge, 10.77.0.0/24);
# qemu runs in the initiator's, its user-mode network reaching the gateways there. The guest of
# build_guest.sh (TCG) runs guest_mpath.sh: a session per gateway, one dm-multipath map grouped
# by ALUA priority, fio with crc32c verify on the map while this script, on the guest's
# "LTI DO VERB GW", kills the active/optimized gateway A (SIGKILL), restarts it (it comes back
# standby), then cuts the link of B, active/optimized by then (ip link down on both sides: B
# loses the cluster and the initiator at once), and restores it. fio must see no error and
# verify every block; the guest prints the longest time no write completed at each failover
# ("LTI PAUSE"). Exit 77 without qemu-system-x86_64, Ceph, root or ip netns. About 4-5 min
# (TCG): `make ha`, not ./scripts/test.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../integration/lt_lib.sh"
. "$HERE/interop_lib.sh"

need timeout rbd setpriv
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces)"
ip netns list >/dev/null 2>&1 || skip "no ip netns (iproute2) here"
. "$HERE/../ha/netns.sh"

IQN=iqn.2026-11.org.linerate:mpath
declare -A GPID=()

keep_logs() {
    [ -n "${INTEROP_LOGS:-}" ] || return 0
    mkdir -p "$INTEROP_LOGS" && cp "$WORK"/console.log "$WORK"/gw-*.log "$INTEROP_LOGS"/ 2>/dev/null
}
stop_all() {
    local g
    guest_stop
    for g in "${!GPID[@]}"; do
        kill -KILL "${GPID[$g]}" 2>/dev/null
        { wait "${GPID[$g]}"; } 2>/dev/null
    done
}

guest_image

ha_setup || fail "network namespaces (tests/ha/netns.sh)"
trap 'stop_all; keep_logs; ha_cleanup; it_cleanup' EXIT
{ ha_node ini 1 && ha_node ceph 2 && ha_node A 11 && ha_node B 12; } || fail "namespaces"
ha_ceph ceph 2 || fail "the Ceph cluster in its namespace"
ha_ceph_cli ceph rbd create --size 256M rbd/it-mpath || fail "rbd create rbd/it-mpath failed"
declare -A GN=([A]=11 [B]=12)

# gw_conf NAME GROUP STATE PEER: gateway NAME listens on $HA_NET.N:3260 in its namespace
gw_conf() {
    cat >"$WORK/gw-$1.conf" <<EOF
ctl-socket = none
state-dir = $WORK/st-$1
log-level = info
threads = 2
[target $IQN]
portal = $HA_NET.${GN[$1]}:3260
alua-mode = failover
alua-group = $2
alua-state = $3
alua-peer = $4
failover-heartbeat = 500ms
failover-timeout = 3s
lun 0 = rbd:rbd/it-mpath
EOF
}
gw_start() { # NAME
    local i
    # every exec: the pid is the daemon's; killed with the script (parent-death signal)
    setpriv --pdeathsig KILL ip netns exec "$(ha_ns "$1")" env CEPH_CONF="$CEPH_CONF" \
        "$LT" --config "$WORK/gw-$1.conf" >/dev/null 2>>"$WORK/gw-$1.log" &
    GPID[$1]=$!
    for ((i = 0; i < 600; i++)); do
        grep -q "listening on" "$WORK/gw-$1.log" 2>/dev/null &&
            [ "$(grep -c "listening on" "$WORK/gw-$1.log")" -gt "${2:-0}" ] && return 0
        kill -0 "${GPID[$1]}" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$WORK/gw-$1.log" >&2
    fail "gateway $1 did not start listening"
}
gw_conf A 1 active/optimized 2:standby
gw_conf B 2 standby 1:active/optimized
gw_start A
gw_start B
note "gateways A on $HA_NET.11:3260 (AO), B on $HA_NET.12:3260 (standby); booting the guest in $(ha_ns ini)"

guest_boot "lt_mode=mpath lt_pa=$HA_NET.11:3260 lt_pb=$HA_NET.12:3260 lt_iqn=$IQN" ha_run ini

# Follow the console; act on "LTI DO VERB GW" at once (the guest times the I/O around it).
act() { # VERB GW
    case $1 in
    kill) kill -KILL "${GPID[$2]}" && { wait "${GPID[$2]}"; } 2>/dev/null ;;
    start) gw_start "$2" "$(grep -c "listening on" "$WORK/gw-$2.log")" ;;
    cut) ha_cut "$2" both ;;
    restore) ha_restore "$2" ;;
    *) echo "unknown action $1" >&2 ;;
    esac
    echo "== $(date +%T) host: $1 gateway $2"
}
on_line() {
    # shellcheck disable=SC2086 # the words of the line
    case $1 in "LTI DO "*) set -- $1; act "$3" "$4" ;; esac
}
guest_follow on_line

show_console() {
    echo "--- guest console (last 100 lines):" >&2
    tr -d '\r' <"$WORK/console.log" | tail -n 100 >&2
    [ -s "$WORK/qemu.out" ] && { echo "--- qemu:" >&2; cat "$WORK/qemu.out" >&2; }
    for g in A B; do
        echo "--- gateway $g's log (last 15 lines):" >&2
        tail -n 15 "$WORK/gw-$g.log" >&2
    done
}
guest_verdict "${MPATH_WANT_PASS:-8}" "the kernel initiator with dm-multipath"
note "PASS: dm-multipath, $G_NPASS steps"
