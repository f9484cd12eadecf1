# Helpers for the linerate-bench integration scripts (sourced): free loopback ports, checks.
# Every load runs for a bounded time (--seconds) under `timeout`, so a hang fails the test.

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
note() { echo "== $*" >&2; }

port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# free_port: a port P with P and P+1000 free (tgt_peer.sh's control port is P+1000, and
# tgtadm -C takes at most 32767, so P stays below 31767).
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 11000))
    port_free "$p" && port_free $((p + 1000)) && { echo "$p"; return 0; }
  done
  return 1
}

# gw_start BINARY DIR: starts the daemon BINARY --config DIR/gw.conf (stdout DIR/out, stderr
# appended to DIR/log) and waits until it printed its URLs: 0 with GW_PID set; 1 when it died
# or never got ready (then killed and reaped).
gw_start() {
  "$1" --config "$2/gw.conf" >"$2/out" 2>>"$2/log" &
  GW_PID=$!
  for _ in $(seq 600); do
    grep -q '^iscsi://' "$2/out" 2>/dev/null && return 0
    kill -0 "$GW_PID" 2>/dev/null || break
    sleep 0.1
  done
  grep -q '^iscsi://' "$2/out" && return 0
  kill -KILL "$GW_PID" 2>/dev/null
  wait "$GW_PID" 2>/dev/null
  return 1
}

# csv_check FILE CELLS: the exact header, CELLS data lines, every mb_per_s > 0.
csv_check() {
  local f=$1 cells=$2
  local header='size,rw,digest,connections,qd,mb_per_s,iops,lat_p50_us,lat_p99_us,initiator_us_per_kb,target_us_per_kb'
  [ "$(head -1 "$f")" = "$header" ] || fail "csv header: $(head -1 "$f")"
  [ "$(tail -n +2 "$f" | wc -l)" -eq "$cells" ] || fail "expected $cells csv cells, got: $(cat "$f")"
  awk -F, 'NR > 1 && !($6 > 0) { bad = 1 } END { exit bad }' "$f" || fail "a cell moved no data: $(cat "$f")"
  awk -F, 'NR > 1 && NF != 11 { bad = 1 } END { exit bad }' "$f" || fail "csv lines must have 11 fields"
}
