#!/usr/bin/env bash
# The metrics (issue 15): linerate-target --metrics on a loopback port, a linerate-bench load,
# a real scrape with curl checked by `promtool check metrics` when installed and always by the
# strict parser prom_check.py; the counters moved by what the bench reports (bytes written and
# read, commands, R2Ts for writes beyond FirstBurstLength, digest errors under injected
# corruption at ERL 1, on the portal and the LUN); per-session series while a session is logged
# in; `linerate-ctl stats` (table and --json) shows the LUN and the session with their rates;
# task management from a raw session (metrics_tmf.py: ABORT TASK, LOGICAL UNIT RESET, TARGET
# WARM RESET) moves the abort and reset counters and the queue depths of the LUN, the session
# and the portal by exactly what it did, by scrape and linerate-ctl stats. Then the endpoint's
# defences: non-GET, wrong path, a garbage request line, a huge request head, a slowloris
# sender, more clients than the limit: each gets a 4xx/503 or is closed, and the daemon scrapes
# fine afterwards and exits 0 on SIGTERM. Every family of each kind (LUN, session, portal) has
# its HELP and TYPE; the bench's power-on unit attentions count under
# sense_key="unit_attention". And the option's own checks, and the config key `metrics`.
# A build without counters (meson -Dmetrics=false, LT_METRICS=0 from meson): the endpoint
# answers 501 and `linerate-ctl stats` fails, both saying so, then the test skips (77).
# Usage: target_metrics.sh  (LINERATE_TARGET from meson; linerate-ctl and linerate-bench beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need curl python3

ctl_setup
CHECK=$IT_DIR/prom_check.py

# scrape NAME: the endpoint's body into $WORK/NAME.txt, checked; its series in $WORK/NAME.json
scrape() {
    local code
    code=$(curl -s -o "$WORK/$1.txt" -w '%{http_code} %{content_type}' --max-time 10 \
        "http://$MADDR/metrics") || fail "curl: no answer from http://$MADDR/metrics"
    case "$code" in
    "200 text/plain; version=0.0.4"*) ;;
    *) fail "scrape: HTTP $code" ;;
    esac
    if command -v promtool >/dev/null 2>&1; then
        promtool check metrics <"$WORK/$1.txt" >"$WORK/promtool.out" 2>&1 || {
            cat "$WORK/promtool.out" >&2
            fail "promtool check metrics rejects the scrape ($1)"
        }
    fi
    python3 "$CHECK" "$WORK/$1.txt" --dump "$WORK/$1.json" || fail "prom_check rejects the scrape ($1)"
}
# val NAME SERIES: the value of a series (labels sorted) in scrape NAME, 0 if absent
val() {
    python3 -c 'import json,sys; print(int(float(json.load(open(sys.argv[1])).get(sys.argv[2], 0))))' \
        "$WORK/$1.json" "$2"
}
LUN0="target=\"$T\""
# lun_series SUFFIX [LABEL]: LUN 0's series, labels in sorted order (lun, op, target)
lun_series() { echo "linerate_lun_$1{lun=\"0\",${2:+$2,}$LUN0}"; }

# --- the option's own checks ---
note "--metrics: a port is required, an address must be numeric"
for bad in 127.0.0.1 localhost:9100 127.0.0.1:0 127.0.0.1:x; do
    "$LT" --metrics "$bad" >/dev/null 2>"$WORK/err.txt"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--metrics" "$WORK/err.txt" || fail "--metrics $bad: exit $rc"
done

# A free loopback port for the endpoint (start_target picks the iSCSI one, in random_port's
# range): from the span just above that range when LT_PORT_BASE is given, else 30000..39999.
pick_mport() {
    local i
    for ((i = 0; i < 50; i++)); do
        if [ -n "${LT_PORT_BASE:-}" ]; then
            MPORT=$((LT_PORT_BASE + ${LT_PORT_SPAN:-10000} + RANDOM % ${LT_PORT_SPAN:-10000}))
        else
            MPORT=$((30000 + RANDOM % 10000))
        fi
        port_busy "$MPORT" || break
    done
    MADDR=127.0.0.1:$MPORT
}
pick_mport

note "start with --metrics $MADDR (and ERL 1 allowed, for the digest test)"
start_target --lun ram:64M --lun ram:16M --threads 2 --ctl-socket "$SOCK" --metrics "$MADDR" \
    --error-recovery-level 1
grep -q "metrics at http://$MADDR/metrics" "$WORK/target.log" || fail "no metrics line in the log"
if [ "${LT_METRICS:-1}" = 0 ]; then
    note "a -Dmetrics=false build: no counters, and it says so instead of showing zeros"
    code=$(curl -s -o "$WORK/off.txt" -w '%{http_code}' --max-time 10 "http://$MADDR/metrics")
    [ "$code" = 501 ] && grep -q -- "-Dmetrics=false" "$WORK/off.txt" ||
        fail "endpoint of a build without counters: HTTP $code $(cat "$WORK/off.txt")"
    ctl stats >"$WORK/ctl.out" 2>&1
    [ $? -eq 1 ] && grep -q -- "-Dmetrics=false" "$WORK/ctl.out" ||
        fail "stats of a build without counters: $(cat "$WORK/ctl.out")"
    grep -q -- "-Dmetrics=false" "$WORK/target.log" || fail "no warning in the log"
    stop_target
    [ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
    skip "built with -Dmetrics=false: the counters cannot be checked"
fi
URL="iscsi://127.0.0.1:$PORT/$T/0"

note "a scrape before any I/O: every family present, the LUN's counters at 0"
scrape m0
# Every family stats.c writes, for each of the three kinds of entry.
for kind in lun session portal; do
    for f in commands_total read_bytes_total write_bytes_total latency_seconds errors_total \
        queue_depth digest_errors_total r2ts_total aborts_total resets_total; do
        grep -q "^# TYPE linerate_${kind}_$f " "$WORK/m0.txt" || fail "no # TYPE linerate_${kind}_$f"
        grep -q "^# HELP linerate_${kind}_$f " "$WORK/m0.txt" || fail "no # HELP linerate_${kind}_$f"
    done
done
grep -q '^# TYPE linerate_errors_total counter' "$WORK/m0.txt" || fail "no linerate_errors_total"
[ "$(val m0 "$(lun_series write_bytes_total)")" = 0 ] || fail "LUN 0 wrote before any I/O"
grep -q "^linerate_lun_latency_seconds_bucket{target=\"$T\",lun=\"0\",op=\"read\",le=\"+Inf\"} 0" \
    "$WORK/m0.txt" || fail "no empty read histogram for LUN 0"

note "linerate-bench 4k write then read, 2 s each"
"$BENCH" --sizes 4k --rw write,read --seconds 2 --qd 16 --format json "$URL" \
    >"$WORK/bench.json" 2>"$WORK/bench.err" || {
    cat "$WORK/bench.err" >&2
    fail "linerate-bench failed"
}
scrape m1
# What the bench says it did: iops * seconds commands of 4096 bytes each.
read -r bw br < <(python3 -c '
import json, sys
cells = {c["rw"]: c for c in json.load(open(sys.argv[1]))}
assert cells["write"]["errors"] == 0 and cells["read"]["errors"] == 0, cells
print(int(cells["write"]["iops"] * 2 * 4096), int(cells["read"]["iops"] * 2 * 4096))' "$WORK/bench.json") ||
    fail "cannot read the bench's report: $(cat "$WORK/bench.json")"
W=$(val m1 "$(lun_series write_bytes_total)")
R=$(val m1 "$(lun_series read_bytes_total)")
WC=$(val m1 "$(lun_series commands_total 'op="write"')")
RC=$(val m1 "$(lun_series commands_total 'op="read"')")
echo "bench: ~$bw bytes written, ~$br read; target: $W written ($WC commands), $R read ($RC)"
# The bench's own figure is rounded (iops over its measured interval); its commands still in
# flight when the interval closed complete later and count here too, so the target's count is
# at least 99% of it, and at most what another second at that rate could add.
python3 - "$W" "$bw" "$R" "$br" <<'EOF' || fail "byte counters do not match the bench"
import sys
w, bw, r, br = map(int, sys.argv[1:])
assert w >= 0.99 * bw and w <= 1.5 * bw + 16 * 4096, (w, bw)
assert r >= 0.99 * br and r <= 1.5 * br + 16 * 4096, (r, br)
EOF
[ "$W" -eq $((WC * 4096)) ] || fail "write bytes $W != 4096 * $WC write commands"
[ "$R" -eq $((RC * 4096)) ] || fail "read bytes $R != 4096 * $RC read commands"
for s in "linerate_portal_write_bytes_total{portal=\"127.0.0.1:$PORT\"}" \
    "linerate_portal_read_bytes_total{portal=\"127.0.0.1:$PORT\"}"; do
    pv=$(val m1 "$s")
    case "$s" in *write*) lv=$W ;; *) lv=$R ;; esac
    [ "$pv" -eq "$lv" ] || fail "$s = $pv, the only LUN says $lv"
done
cnt=$(val m1 "linerate_lun_latency_seconds_count{lun=\"0\",op=\"write\",$LUN0}")
[ "$cnt" -eq "$WC" ] || fail "write latency count $cnt != $WC write commands"
# The bench sees REPORT LUNS / READ CAPACITY etc. and the power-on unit attention.
[ "$(val m1 "$(lun_series commands_total 'op="other"')")" -gt 0 ] || fail "no 'other' commands"
# Each bench run is a new I_T nexus: its first command on LUN 0 that is not INQUIRY, REPORT
# LUNS or REQUEST SENSE gets CHECK CONDITION, UNIT ATTENTION (POWER ON OCCURRED, SAM-5 5.14);
# the bench retries it. Counted by sense key on the LUN, the portal and daemon-wide.
UA=$(val m1 "$(lun_series errors_total 'sense_key="unit_attention"')")
[ "$UA" -gt 0 ] || fail "no unit attention counted on LUN 0: $(grep errors_total "$WORK/m1.txt")"
PUA=$(val m1 "linerate_portal_errors_total{portal=\"127.0.0.1:$PORT\",sense_key=\"unit_attention\"}")
echo "unit attentions: $UA on LUN 0, $PUA on the portal"
[ "$PUA" -ge "$UA" ] || fail "the portal counted $PUA unit attentions, LUN 0 $UA"
[ "$(val m1 'linerate_errors_total{sense_key="unit_attention"}')" -eq "$PUA" ] ||
    fail "linerate_errors_total{sense_key=\"unit_attention\"} is not the portal's $PUA"

note "while a session is logged in: its series, and linerate-ctl stats"
# 8 s: the scrape and the three stats samples below (about 3 s, more on a loaded machine)
# must all fall inside the session's life.
"$BENCH" --sizes 4k --rw randwrite --seconds 8 --qd 8 "$URL" >"$WORK/bench2.out" 2>&1 &
BPID=$!
sleep 1.5
scrape m2
grep -q "^linerate_session_commands_total{target=\"$T\",initiator=\"[^\"]*\",isid=\"0x[0-9a-f]*\",tsih=\"[0-9]*\",op=\"write\"} [1-9]" \
    "$WORK/m2.txt" || fail "no live session series: $(grep session_commands "$WORK/m2.txt")"
ctl stats --interval 0.5 >"$WORK/stats.txt" 2>&1 || fail "linerate-ctl stats: $(cat "$WORK/stats.txt")"
cat "$WORK/stats.txt"
grep -q "^$T/0 " "$WORK/stats.txt" || fail "linerate-ctl stats has no LUN 0 line"
awk -v t="$T/0" '$1 == t && $2 > 0 { ok = 1 } END { exit !ok }' "$WORK/stats.txt" ||
    fail "linerate-ctl stats: LUN 0 shows no IOPS under load"
grep -q "iqn.2026-01.org.linerate:bench" "$WORK/stats.txt" || fail "linerate-ctl stats: no session"
ctl stats --json --watch 0.5 --count 2 >"$WORK/stats.json" 2>&1 || fail "stats --json failed"
python3 - "$WORK/stats.json" "$T" <<'EOF' || fail "stats --json: $(cat "$WORK/stats.json")"
import json, sys
text = open(sys.argv[1]).read()
dec, objs, i = json.JSONDecoder(), [], 0
while i < len(text):
    if text[i].isspace():
        i += 1
        continue
    o, i = dec.raw_decode(text, i)
    objs.append(o)
assert len(objs) == 2, len(objs)
for o in objs:
    lun = [l for l in o["luns"] if l["target"] == sys.argv[2] and l["lun"] == 0][0]
    assert lun["iops"] > 0 and lun["write_mb_per_s"] > 0, lun
    assert lun["p50_s"] is not None and 0 < lun["p50_s"] <= lun["p99_s"], lun
    assert o["sessions"] and o["sessions"][0]["iops"] > 0, o["sessions"]
EOF
wait "$BPID" || fail "the bench under stats failed: $(cat "$WORK/bench2.out")"

note "R2Ts: 256k writes beyond FirstBurstLength are solicited"
"$BENCH" --sizes 256k --rw write --seconds 1 --qd 4 "$URL" >"$WORK/bench3.out" 2>&1 ||
    fail "256k bench failed: $(cat "$WORK/bench3.out")"
scrape m3
[ "$(val m3 "$(lun_series r2ts_total)")" -gt 0 ] || fail "no R2T counted on LUN 0"
[ "$(val m3 "linerate_portal_r2ts_total{portal=\"127.0.0.1:$PORT\"}")" -gt 0 ] ||
    fail "no R2T counted on the portal"

note "digest errors: ERL 1 with corrupted data digests"
"$BENCH" --sizes 64k --rw write --seconds 1 --qd 4 --digest on --erl 1 \
    --inject digest-error=0.02 "$URL" >"$WORK/bench4.out" 2>&1
grep -q "ErrorRecoveryLevel=1" "$WORK/bench4.out" || fail "ERL 1 not negotiated: $(cat "$WORK/bench4.out")"
scrape m4
dg=$(val m4 "linerate_portal_digest_errors_total{portal=\"127.0.0.1:$PORT\"}")
echo "digest errors counted on the portal: $dg"
[ "$dg" -gt 0 ] || fail "no digest error counted"
# Only data digests are corrupted, each in a WRITE's data: LUN 0's count is the portal's.
ldg=$(val m4 "$(lun_series digest_errors_total)")
[ "$ldg" -eq "$dg" ] || fail "LUN 0 counted $ldg digest errors, the portal $dg"

note "task management: aborts, resets and queue depths per LUN, session and portal"
# metrics_tmf.py (one raw session) aborts a WRITE in Data-Out, leaves two more waiting for
# their Data-Out (scraped then: queue depth 2), and resets LUN 0 (aborting both) and the
# target, stopping at DIR/NAME.ready until the shell writes DIR/NAME.go.
# Baselines from m4: the bench sessions before may have counted on LUN 0 and the portal.
PS="portal=\"127.0.0.1:$PORT\""
PA0=$(val m4 "linerate_portal_aborts_total{$PS}")
PR0=$(val m4 "linerate_portal_resets_total{$PS}")
LA0=$(val m4 "$(lun_series aborts_total)")
LR0=$(val m4 "$(lun_series resets_total)")
LUN1="linerate_lun_%s{lun=\"1\",$LUN0}"
mkdir -p "$WORK/tmf"
python3 "$IT_DIR/metrics_tmf.py" "$PORT" "$T" "$WORK/tmf" >"$WORK/tmf.out" 2>&1 &
TPID=$!
# wait_stage NAME: metrics_tmf.py reached it (or fail with its output)
wait_stage() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ -e "$WORK/tmf/$1.ready" ] && return 0
        kill -0 "$TPID" 2>/dev/null || break
        sleep 0.1
    done
    fail "metrics_tmf.py did not reach $1: $(cat "$WORK/tmf.out")"
}
# expect SCRAPE SERIES WANT: the series is there and has that value
expect() {
    local got
    got=$(python3 -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("absent" if v is None else int(float(v)))' \
        "$WORK/$1.json" "$2")
    [ "$got" = "$3" ] || fail "$1: $2 = $got, expected $3"
}
wait_stage busy
read -r TSIH ISID < <(python3 -c 'import json,sys; i=json.load(open(sys.argv[1])); print(i["tsih"], i["isid"])' \
    "$WORK/tmf/busy.ready")
SS="initiator=\"iqn.2026-11.org.linerate:hostile-good\",isid=\"$ISID\",target=\"$T\",tsih=\"$TSIH\""
scrape m6
expect m6 "linerate_portal_queue_depth{$PS}" 2
expect m6 "$(lun_series queue_depth)" 2
expect m6 "linerate_session_queue_depth{$SS}" 2
expect m6 "$(printf "$LUN1" queue_depth)" 0
expect m6 "linerate_portal_aborts_total{$PS}" $((PA0 + 1))
expect m6 "$(lun_series aborts_total)" $((LA0 + 1))
expect m6 "linerate_session_aborts_total{$SS}" 1
expect m6 "linerate_session_resets_total{$SS}" 0
ctl stats --json --interval 0.2 >"$WORK/stats-busy.json" 2>&1 || fail "stats --json: $(cat "$WORK/stats-busy.json")"
python3 - "$WORK/stats-busy.json" "$T" "$TSIH" "127.0.0.1:$PORT" <<'EOF2' || fail "stats --json while busy: $(cat "$WORK/stats-busy.json")"
import json, sys
o = json.load(open(sys.argv[1]))
lun = {l["lun"]: l for l in o["luns"] if l["target"] == sys.argv[2]}
sess = [x for x in o["sessions"] if x["tsih"] == int(sys.argv[3])][0]
portal = [p for p in o["portals"] if p["portal"] == sys.argv[4]][0]
assert lun[0]["queue_depth"] == 2 and lun[1]["queue_depth"] == 0, lun
assert sess["queue_depth"] == 2 and portal["queue_depth"] == 2, (sess, portal)
for e in (lun[0], lun[1], sess, portal):
    assert e["aborts"] == 0 and e["resets"] == 0, e  # nothing happened in the interval
EOF2
touch "$WORK/tmf/busy.go"

wait_stage reset
scrape m7
expect m7 "linerate_portal_queue_depth{$PS}" 0
expect m7 "$(lun_series queue_depth)" 0
expect m7 "linerate_session_queue_depth{$SS}" 0
# ABORT TASK, then LOGICAL UNIT RESET aborting the two waiting WRITEs; none on LUN 1
expect m7 "linerate_portal_aborts_total{$PS}" $((PA0 + 3))
expect m7 "$(lun_series aborts_total)" $((LA0 + 3))
expect m7 "linerate_session_aborts_total{$SS}" 3
# LOGICAL UNIT RESET of LUN 0, TARGET WARM RESET of the session's target (each of its LUNs)
expect m7 "$(lun_series resets_total)" $((LR0 + 2))
expect m7 "linerate_session_resets_total{$SS}" 2
expect m7 "linerate_portal_resets_total{$PS}" $((PR0 + 2))
expect m7 "$(printf "$LUN1" aborts_total)" 0
expect m7 "$(printf "$LUN1" resets_total)" 1
ctl stats --raw >"$WORK/stats-raw.json" 2>&1 || fail "stats --raw: $(cat "$WORK/stats-raw.json")"
python3 - "$WORK/stats-raw.json" "$T" "$TSIH" "127.0.0.1:$PORT" "$PA0" "$PR0" <<'EOF2' || fail "stats --raw after the resets: $(cat "$WORK/stats-raw.json")"
import json, sys
o = json.load(open(sys.argv[1]))
lun = {l["lun"]: l for l in o["luns"] if l["target"] == sys.argv[2]}
sess = [x for x in o["sessions"] if x["tsih"] == int(sys.argv[3])][0]
portal = [p for p in o["portals"] if p["portal"] == sys.argv[4]][0]
pa0, pr0 = int(sys.argv[5]), int(sys.argv[6])
c = sess["counters"]
assert (c["aborts"], c["resets"], sess["queue_depth"]) == (3, 2, 0), sess
c = portal["counters"]
assert (c["aborts"] - pa0, c["resets"] - pr0, portal["queue_depth"]) == (3, 2, 0), portal
assert portal["counters"]["digest_errors"] > 0, portal  # the ERL 1 bench above
c = lun[1]["counters"]
assert (c["aborts"], c["resets"], lun[1]["queue_depth"]) == (0, 1, 0), lun[1]
EOF2
touch "$WORK/tmf/reset.go"
wait "$TPID" || fail "metrics_tmf.py: $(cat "$WORK/tmf.out")"
cat "$WORK/tmf.out"

note "bad HTTP requests get 4xx/503 or are closed; the daemon goes on"
python3 - "$MPORT" <<'EOF' || fail "bad HTTP requests"
import socket, sys, time
port = int(sys.argv[1])

def ask(data, wait=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        s.sendall(data)
    except OSError:
        pass
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return out

def status(resp):
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.1 ") else None

checks = [
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405),
    (b"HEAD /metrics HTTP/1.1\r\n\r\n", 405),
    (b"GET / HTTP/1.1\r\n\r\n", 404),
    (b"GET /metrics/../etc/passwd HTTP/1.1\r\n\r\n", 404),
    (b"GET /metricsX HTTP/1.0\r\n\r\n", 404),
    (b"HELLO\r\n\r\n", 400),
    (b"GET /metrics SPDY/3\r\n\r\n", 400),
    (b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100000 + b"\r\n\r\n", 431),
]
for req, want in checks:
    got = status(ask(req))
    assert got == want, (req[:40], got, want)
r = ask(b"GET /metrics?x=1 HTTP/1.0\n\n")
assert status(r) == 200 and b"linerate_lun_commands_total" in r, r[:100]

# slowloris: one byte a second never completes a head; closed within the 1 s deadline
s = socket.create_connection(("127.0.0.1", port))
t0, closed = time.time(), False
for c in b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"z" * 30:
    try:
        s.send(bytes([c]))
        s.settimeout(1.0)
        if s.recv(1) == b"":
            closed = True
            break
    except socket.timeout:
        continue
    except OSError:
        closed = True
        break
took = time.time() - t0
s.close()
assert closed and took < 4, (closed, took)

# more clients from one address than its bound (4): the extra ones get 503 at once
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
time.sleep(0.3)
r = ask(b"GET /metrics HTTP/1.1\r\n\r\n")
assert status(r) == 503, r[:60]
for s in idle:
    s.close()
time.sleep(0.3)
r = ask(b"GET /metrics HTTP/1.1\r\n\r\n")
assert status(r) == 200, r[:60]
# a client that connects and resets at once
for _ in range(50):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
print("bad requests: all refused as they should be")
EOF
kill -0 "$LT_PID" 2>/dev/null || fail "the daemon died"
scrape m5

note "out of descriptors: the endpoint pauses accepting rather than spinning"
# first more 503 refusals than a log limiter lets through in its window (LOG_LIMIT_BURST, 10 in
# 10 s): their warnings must not silence the one about pausing accepts below
fds_before=$(ls "/proc/$LT_PID/fd" | wc -l)
python3 - "${MADDR##*:}" <<'EOF' || fail "503 refusals before the descriptor limit"
import socket, sys, time
port = int(sys.argv[1])
idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
time.sleep(0.3)
for _ in range(12):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    r = s.recv(64)
    s.close()
    assert r.startswith(b"HTTP/1.1 503 "), r
for s in idle:
    s.close()
EOF
# the idle clients' descriptors closed on the daemon's side too, so the limit below is as tight
for ((i = 0; i < 50; i++)); do
    [ "$(ls "/proc/$LT_PID/fd" | wc -l)" -le "$fds_before" ] && break
    sleep 0.1
done
# a few descriptors to spare, then 40 scrapers held open: accept4 fails with EMFILE while the
# connections wait in the backlog; the daemon must not burn its CPU retrying, and serves
# scrapes again once descriptors are free
prlimit --pid "$LT_PID" --nofile=$(($(ls "/proc/$LT_PID/fd" | wc -l) + 4)) ||
    fail "prlimit --pid $LT_PID failed"
python3 - "${MADDR##*:}" "$LT_PID" <<'EOF' || fail "out of descriptors"
import os, socket, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])

def cpu():  # the daemon's user + system time, s (proc(5): fields 14, 15)
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

socks = []
for i in range(40):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    socks.append(s)
time.sleep(0.5)
c0 = cpu()
time.sleep(2)
spent = cpu() - c0
for s in socks:
    s.close()
print("40 scrapers at the descriptor limit: %.2f s of CPU in 2 s" % spent)
assert spent < 0.5, "the daemon spun at its descriptor limit: %.2f s of CPU in 2 s" % spent
EOF
grep -q "metrics: accept: .*; pausing accepts" "$WORK/target.log" ||
    fail "no warning about pausing accepts after the 503 warnings"
sleep 0.5
scrape m6

note "SIGTERM: exit 0"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"

note "the config key: metrics = ADDR:PORT in --config serves the same endpoint"
pick_mport
cat >"$WORK/metrics.conf" <<EOF
ctl-socket = $WORK/conf.sock
metrics = $MADDR
[target $T]
portal = 127.0.0.1:@PORT@
lun = ram:16M
EOF
: >"$WORK/target.log"
start_target_config "$WORK/metrics.conf"
grep -q "metrics at http://$MADDR/metrics" "$WORK/target.log" ||
    fail "no metrics line in the log with the config key"
scrape m8
expect m8 "$(lun_series commands_total 'op="read"')" 0
expect m8 "linerate_portal_queue_depth{portal=\"127.0.0.1:$PORT\"}" 0
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
echo "PASS"
