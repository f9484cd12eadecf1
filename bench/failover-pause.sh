#!/bin/bash
# The I/O pause at an automatic failover as linerate's own initiator sees it (issue 30,
# docs/multipath.md "Measured"): two rbd gateways of one target with alua-mode = failover on
# scripts/ceph-mini's cluster, A configured active/optimized, B standby; linerate-bench
# --portal (lr_mpath, one session per gateway) runs --verify and A is killed (SIGKILL) once
# half the writes are acknowledged. B fences A and takes the role after failover-timeout of
# silence; lr_mpath's commands wait (RTPG every 200 ms) and go to B once it says
# active/optimized. The bench's "longest I/O pause" is the pause; each round is a fresh image
# (its own "ao" object) and fresh gateways. Prints every pause and the median and worst.
#   usage: bench/failover-pause.sh [ROUNDS] (default 20)
#   FO_HB=1s FO_TIMEOUT=5s: failover-heartbeat and failover-timeout (the defaults)
#   LINERATE_TARGET: the daemon (default build/linerate-target; the bench and ctl beside it)
set -u
rounds=${1:-20}
hb=${FO_HB:-1s} to=${FO_TIMEOUT:-5s}
. "$(dirname "$0")/../tests/integration/bench_lib.sh" # gw_start
. "$(dirname "$0")/../tests/integration/lt_lib.sh"
bench=$(dirname "$LT")/linerate-bench
[ -x "$bench" ] || fail "$bench is not built"
start_ceph
iqn=iqn.2026-11.org.linerate:pause
pids=()
stop_gw() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  pids=()
}
trap 'stop_gw; it_cleanup' EXIT

# gw NAME GROUP STATE PEER IMAGE: starts a gateway; sets PID_<NAME>, PORT_<NAME>
gw() {
  local name=$1 d=$WORK/$1-$5 port try
  mkdir -p "$d"
  for try in $(seq 10); do
    port=$(random_port)
    cat >"$d/gw.conf" <<CONF
ctl-socket = none
state-dir = $d
log-level = info
threads = 2
[target $iqn]
portal = 127.0.0.1:$port
alua-group = $2
alua-state = $3
alua-peer = $4
alua-mode = failover
failover-heartbeat = $hb
failover-timeout = $to
lun 0 = rbd:rbd/$5,timeout=10
CONF
    if gw_start "$LT" "$d"; then
      pids+=("$GW_PID")
      eval "PID_$name=$GW_PID PORT_$name=$port"
      return 0
    fi
  done
  fail "gateway $name did not start: $(tail -n 5 "$d/log")"
}

pauses=()
for r in $(seq "$rounds"); do
  img=pause-$r
  rbd create --size 16M "rbd/$img" || fail "rbd create rbd/$img"
  gw A 1 active/optimized 2:standby "$img"
  gw B 2 standby 1:active/optimized "$img"
  log=$WORK/bench-$r.log
  timeout 300 "$bench" --verify --sizes 4k --rw write --seconds 1 --qd 16 \
    --verify-midway "kill -KILL $PID_A" \
    --portal "127.0.0.1:$PORT_A" "iscsi://127.0.0.1:$PORT_B/$iqn/0" >/dev/null 2>"$log" ||
    { tail -n 20 "$log" >&2; fail "round $r: linerate-bench failed"; }
  grep -q "verify passed" "$log" || fail "round $r: verify did not pass"
  grep -q "command failed\|commands failed" "$log" && fail "round $r: commands failed"
  p=$(sed -n 's/.*longest I\/O pause \([0-9.]*\) ms.*/\1/p' "$log" | head -1)
  [ -n "$p" ] || fail "round $r: no pause printed"
  # where the time went, from B's log: A's silence noticed, the fence asked, the role taken
  why=$(grep -E "lost the heartbeat|fencing group|takes over" "$WORK/B-$img/log" |
    sed -E 's/^([0-9:.]+) .*(lost the heartbeat|fencing group|takes over).*\(epoch [0-9]+, ([0-9]+ ms after its last heartbeat)\).*/\1 \2 \3/; s/^([0-9:.]+) .*(lost the heartbeat|fencing group|takes over).*/\1 \2/' |
    paste -sd';')
  echo "round $r: longest I/O pause $p ms; B: $why"
  pauses+=("$p")
  stop_gw
  rbd rm "rbd/$img" >/dev/null 2>&1
done
printf '%s\n' "${pauses[@]}" | sort -g | awk -v hb="$hb" -v to="$to" '{ v[NR] = $1 } END {
  printf "failover pause through lr_mpath (heartbeat %s, timeout %s): %d rounds, median %.0f ms, worst %.0f ms\n",
    hb, to, NR, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[NR] }'
