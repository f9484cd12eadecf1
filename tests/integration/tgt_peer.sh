#!/bin/bash
# tgt_peer.sh: Debian's tgt (tgtd, the Linux SCSI target framework) as a private iSCSI peer for
# the integration tests, so they need nothing beside the clone (scripts/install-deps test
# installs tgt).
#
#   tgt_peer.sh start PORT [SIZE_MiB]   start tgtd on 127.0.0.1:PORT with one LUN, print its URL
#   tgt_peer.sh stop PORT               stop exactly the tgtd started for PORT, remove its files
#
# The target is $TGT_PEER_IQN (LUN 1, tgt's rdwr backing store on a sparse file, in /dev/shm
# when it is writable so the LUN lives in RAM), open to every initiator. tgtd's management
# channel is the Unix socket /var/run/tgtd/socket.<PORT+1000>: use `tgtadm -C $((PORT + 1000))`
# to reconfigure it (tgtadm takes at most 32767, hence PORT <= 31767; bench_lib.sh free_port
# picks such ports). The packaged tgt service, if running, uses 0.0.0.0:3260 and socket.0, so
# it never meets this one.
#
# Exit status of start: 0 started; 75 PORT or its control socket is taken by someone else (pick
# another port and retry); 69 tgtd is not installed; 1 anything else (tgtd's log on stderr).
set -u
# tgtd and tgtadm live in /usr/sbin, which a non-login PATH may lack.
PATH=$PATH:/usr/sbin:/sbin

usage() { echo "usage: tgt_peer.sh start PORT [SIZE_MiB] | stop PORT" >&2; exit 2; }
cmd=${1:-}
port=${2:-}
[[ $port =~ ^[0-9]+$ ]] || usage
ctl=$((port + 1000))
((port >= 1 && ctl <= 32767)) || { echo "tgt_peer.sh: PORT must be 1..31767" >&2; exit 2; }
iqn=${TGT_PEER_IQN:-iqn.2026-12.org.linerate.test:tgt}
# One directory per port, found again by `stop PORT` from the port alone.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then base=/dev/shm; else base=${TMPDIR:-/tmp}; fi
dir=$base/linerate-tgt-peer.$port
sock=/var/run/tgtd/socket.$ctl

# alive PID: PID exists and is not a zombie.
alive() {
  local pid=$1 state
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ "$state" != Z ]
}

# ours PID: PID is alive and is the tgtd that start ran for this control port; a pid file alone
# could name a recycled pid.
ours() {
  alive "$1" || return 1
  tr '\0' ' ' <"/proc/$1/cmdline" | grep -q "^tgtd -f -C $ctl --iscsi portal=127.0.0.1:$port "
}

stop() {
  local pid=
  [ -f "$dir/pid" ] && pid=$(cat "$dir/pid")
  if ours "$pid"; then
    # The orderly way, as tgt's own init script does it: tgtd ignores SIGTERM while it has a
    # target, and leaves once its last target is gone and the system is deleted.
    tgtadm -C "$ctl" --op update --mode sys --name State -v offline >/dev/null 2>&1
    tgtadm -C "$ctl" --lld iscsi --op delete --mode target --tid 1 --force >/dev/null 2>&1
    tgtadm -C "$ctl" --op delete --mode system >/dev/null 2>&1
    for _ in $(seq 30); do ours "$pid" || break; sleep 0.1; done
    # Still there (a stuck session, say): its LUN is a scratch file, nothing to lose.
    if ours "$pid"; then
      kill -KILL "$pid" 2>/dev/null
      for _ in $(seq 30); do ours "$pid" || break; sleep 0.1; done
    fi
    # tgtd leaves its socket and lock file behind; they were ours, so they go too.
    ours "$pid" || rm -f "$sock" "$sock.lock"
  fi
  rm -rf "$dir"
}

start() {
  local size=${1:-1024} pid
  [[ $size =~ ^[0-9]+$ ]] && ((size > 0)) || usage
  if ! command -v tgtd >/dev/null || ! command -v tgtadm >/dev/null; then
    echo "tgt_peer.sh: tgtd/tgtadm not found (Debian package tgt; scripts/install-deps test)" >&2
    exit 69
  fi
  if [ -f "$dir/pid" ] && ours "$(cat "$dir/pid")"; then
    echo "tgt_peer.sh: a tgtd started by tgt_peer.sh already runs on port $port" >&2
    exit 75
  fi
  rm -rf "$dir"
  mkdir -m 700 "$dir" || exit 1
  mkdir -p /var/run/tgtd || { rm -rf "$dir"; exit 1; }
  truncate -s "${size}M" "$dir/lun.img" || { rm -rf "$dir"; exit 1; }
  # -f keeps tgtd in the foreground, so $! is its pid and stays in the caller's process group
  # (a test runner killing the group on timeout takes tgtd with it). NOTIFY_SOCKET goes so a
  # run under a systemd unit does not see tgtd's sd_notify as its own.
  env -u NOTIFY_SOCKET tgtd -f -C "$ctl" --iscsi "portal=127.0.0.1:$port" \
    </dev/null >"$dir/tgtd.log" 2>&1 &
  pid=$!
  echo "$pid" >"$dir/pid"
  # Ready when tgtd answers on its control socket. tgtd opens that socket and then binds its
  # portals before it serves, so by then the portal is bound or never will be: a tgtd that
  # could not bind the port keeps running without it, so check who listens there.
  # Until the child has exec'd tgtd its command line is still the shell's or env's (seen on a
  # loaded machine), so only liveness counts here; `ours` holds once tgtd answers.
  local up=
  for _ in $(seq 100); do
    alive "$pid" || break
    if tgtadm -C "$ctl" --op show --mode sys >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
  done
  if ! alive "$pid"; then
    if grep -q "another tgtd is using" "$dir/tgtd.log"; then
      echo "tgt_peer.sh: control socket $sock is taken (port $port)" >&2
      rm -rf "$dir"
      exit 75
    fi
    echo "tgt_peer.sh: tgtd exited at start:" >&2
    cat "$dir/tgtd.log" >&2
    rm -rf "$dir"
    exit 1
  fi
  if [ -z "$up" ]; then
    echo "tgt_peer.sh: tgtd does not answer on $sock:" >&2
    cat "$dir/tgtd.log" >&2
    stop
    exit 1
  fi
  if ! ss -Hltnp "sport = :$port" | grep -q "pid=$pid,"; then
    echo "tgt_peer.sh: port $port is taken" >&2
    stop
    exit 75
  fi
  if ! tgtadm -C "$ctl" --lld iscsi --op new --mode target --tid 1 -T "$iqn" ||
    ! tgtadm -C "$ctl" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 \
      --bstype rdwr --backing-store "$dir/lun.img" ||
    ! tgtadm -C "$ctl" --lld iscsi --op bind --mode target --tid 1 --initiator-address ALL; then
    echo "tgt_peer.sh: tgtadm could not set up the target:" >&2
    cat "$dir/tgtd.log" >&2
    stop
    exit 1
  fi
  echo "iscsi://127.0.0.1:$port/$iqn/1"
}

case $cmd in
start) start "${3:-}" ;;
stop) stop ;;
*) usage ;;
esac
