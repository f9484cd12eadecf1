#!/usr/bin/env bash
# linerate-ctl against a running linerate-target (issue 15): while a qemu-img load runs against
# LUN 0, the daemon is changed only through linerate-ctl (add a LUN, resize it and see the new
# size with iscsi-readcapacity16, a session kept open getting the unit attentions of both
# (ctl_ua.py), write-protect it, remove it with I/O in flight (which ends at once with LOGICAL
# UNIT NOT SUPPORTED while a linerate-bench --verify on LUN 5 passes), show sessions and
# connections, log a session out, drop a connection, change the log level); the load sees no
# error. Then the control socket's defences: mode 0600, a non-root user refused (by the file mode,
# and by SO_PEERCRED when the mode lets it through), malformed JSON, unknown methods, a huge line,
# 1000 clients at once; the daemon answers throughout and exits 0 on SIGTERM, removing its socket.
# And the option's own checks (relative path, a socket in use, none). Last, reload from a config
# file: LUNs, bad files, SIGHUP, whole targets, and a target dropped while a session is on it:
# draining (no new login, not in SendTargets) until that session ends, or gone at once with
# --force, and served again if the file has it again meanwhile.
# Usage: target_ctl.sh  (LINERATE_TARGET from meson; linerate-ctl and linerate-bench beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need qemu-img iscsi-readcapacity16 python3 setpriv

ctl_setup
chmod 0711 "$WORK" # so that uid 65534 can reach the socket file at all (the refusal tests)

# --- the option's own checks ---
note "--ctl-socket: a relative path is refused; none means no socket"
"$LT" --ctl-socket relative.sock >/dev/null 2>"$WORK/err.txt"
[ $? -eq 2 ] && grep -q "ctl-socket" "$WORK/err.txt" || fail "relative --ctl-socket not refused"
start_target --lun ram:16M --ctl-socket none
grep -q "control socket" "$WORK/target.log" && fail "--ctl-socket none still made a socket"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"

# --- the daemon under test ---
note "start with --ctl-socket $SOCK"
start_target --lun ram:64M --threads 2 --ctl-socket "$SOCK"
URL="iscsi://127.0.0.1:$PORT/$T"
[ -S "$SOCK" ] || fail "no socket at $SOCK"
[ "$(stat -c '%a %U' "$SOCK")" = "600 root" ] || fail "socket mode/owner: $(stat -c '%a %U' "$SOCK")"

note "a second daemon asking for the same socket does not start (and leaves it alone)"
"$LT" --listen "127.0.0.1:$((PORT + 1))" --ctl-socket "$SOCK" >/dev/null 2>"$WORK/err2.txt"
rc=$?
[ $rc -eq 1 ] && grep -q "another linerate-target" "$WORK/err2.txt" ||
    fail "second daemon on the same socket: exit $rc, $(cat "$WORK/err2.txt")"
[ -S "$SOCK" ] || fail "the second daemon removed the first one's socket"

note "show targets / portals / luns"
ctl_ok show targets
grep -q "$T" "$WORK/ctl.out" || fail "show targets: $(cat "$WORK/ctl.out")"
ctl_ok show portals
grep -q "127.0.0.1:$PORT.*listening" "$WORK/ctl.out" || fail "show portals: $(cat "$WORK/ctl.out")"
ctl_ok --json show luns
[ "$(jget 'len(d)' <"$WORK/ctl.out")" = 1 ] || fail "show luns: $(cat "$WORK/ctl.out")"

# --- a load on LUN 0 that must see no error while everything below happens ---
note "qemu-img load on LUN 0 (writes and reads, in rounds until told to stop)"
(
    n=0
    while [ ! -e "$WORK/load.stop" ]; do
        if ((n % 2)); then rw=(); else rw=(-w); fi
        if ! timeout 120 qemu-img bench -f raw -c 20000 -d 8 -s 4096 "${rw[@]}" "$URL/0" \
            >>"$WORK/load.log" 2>&1; then
            echo "round $n failed" >"$WORK/load.fail"
            break
        fi
        n=$((n + 1))
        echo "$n" >"$WORK/load.rounds"
    done
) &
LOAD_PID=$!
sleep 1

note "add lun: the next free number, 1"
ctl_ok --json add lun "$T" ram:16M
[ "$(jget 'd["lun"]' <"$WORK/ctl.out")" = 1 ] || fail "add lun: $(cat "$WORK/ctl.out")"
run_to 30 iscsi-readcapacity16 "$URL/1" || {
    show_cmd_out
    fail "iscsi-readcapacity16 of the new LUN"
}
grep -q "Total size:16777216" "$WORK/cmd.out" || fail "new LUN size: $(cat "$WORK/cmd.out")"

note "a session kept open sees the unit attentions of add lun (3Fh/0Eh) and resize (2Ah/09h)"
# ctl_ua.py (one raw session) clears its unit attentions and stops at DIR/NAME.ready until the
# shell, having made the change, writes DIR/NAME.go; it checks the sense and READ CAPACITY(16).
mkdir -p "$WORK/ua"
python3 "$IT_DIR/ctl_ua.py" "$PORT" "$T" "$WORK/ua" $((16 << 20)) $((32 << 20)) \
    >"$WORK/ua.out" 2>&1 &
UA_PID=$!
wait_stage() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ -e "$WORK/ua/$1.ready" ] && return 0
        kill -0 "$UA_PID" 2>/dev/null || break
        sleep 0.1
    done
    fail "ctl_ua.py did not reach $1: $(cat "$WORK/ua.out")"
}
wait_stage add
ctl_ok add lun "$T" ram:8M --lun 5
touch "$WORK/ua/add.go"
ctl_ok --json show luns "$T"
[ "$(jget '[l["lun"] for l in d]' <"$WORK/ctl.out")" = "[0, 1, 5]" ] ||
    fail "show luns after add: $(cat "$WORK/ctl.out")"
ctl add lun "$T" ram:8M --lun 5 >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "already has LUN 5" "$WORK/ctl.out" || fail "LUN 5 added twice"
ctl add lun "$T" bogus:1M >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] || fail "a bad spec was accepted"

note "resize lun 1 to 32M: iscsi-readcapacity16 sees it"
run_to 60 qemu-img bench -f raw -c 64 -d 1 -s 65536 -w "$URL/1" || {
    show_cmd_out
    fail "writing LUN 1"
}
wait_stage resize
# the issue's spelling names no target: the daemon's only one is meant
ctl_ok resize lun 1 32M
touch "$WORK/ua/resize.go"
grep -q "32 MiB" "$WORK/ctl.out" || fail "resize: $(cat "$WORK/ctl.out")"
run_to 30 iscsi-readcapacity16 "$URL/1" || {
    show_cmd_out
    fail "iscsi-readcapacity16 after resize"
}
grep -q "Total size:33554432" "$WORK/cmd.out" || fail "resized LUN: $(cat "$WORK/cmd.out")"
wait "$UA_PID" || fail "the open session's unit attentions: $(cat "$WORK/ua.out")"
ctl resize lun "$T" 1 16M >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "cannot shrink" "$WORK/ctl.out" || fail "shrinking was not refused"
# the new half is there to write and read
run_to 60 qemu-img bench -f raw -c 64 -d 4 -s 65536 -o $((16 << 20)) -w "$URL/1" || {
    show_cmd_out
    fail "writing the grown part of LUN 1"
}

note "set lun 1 ro: writes refused, reads fine; rw again"
ctl_ok set lun 1 ro
grep -q "^$T  1 .* ro " "$WORK/ctl.out" || fail "set lun 1 ro: $(cat "$WORK/ctl.out")"
run_to 60 qemu-img bench -f raw -c 16 -d 1 -s 4096 -w "$URL/1" && fail "a write to a ro LUN worked"
run_to 60 qemu-img bench -f raw -c 16 -d 1 -s 4096 "$URL/1" || {
    show_cmd_out
    fail "a read of the ro LUN failed"
}
ctl_ok set lun "$T" 1 rw
run_to 60 qemu-img bench -f raw -c 16 -d 1 -s 4096 -w "$URL/1" || {
    show_cmd_out
    fail "a write after rw failed"
}

note "set lun 1 iops=10: shown; writes over the cap wait and complete; none clears it"
ctl_ok set lun 1 iops=10
grep -q "^$T  1 .* iops=10 " "$WORK/ctl.out" || fail "set lun 1 iops=10: $(cat "$WORK/ctl.out")"
# 16 writes 8 at a time at 10 IOPS without a burst: all but the first wait (1.5 s in all)
run_to 60 qemu-img bench -f raw -c 16 -d 8 -s 4096 -w "$URL/1" || {
    show_cmd_out
    fail "writes under a cap failed"
}
ctl_ok --json stats --interval 0.1
[ "$(jget '[l for l in d["luns"] if l["lun"] == 1][0]["throttle"]["delayed"] >= 7' \
    <"$WORK/ctl.out")" = True ] || fail "stats: no command waited: $(cat "$WORK/ctl.out")"
ctl_ok set lun 1 none
grep -q "^$T  1 .* rw  *[0-9]*  *-  " "$WORK/ctl.out" || fail "set lun 1 none: $(cat "$WORK/ctl.out")"

note "show sessions / connections while the load runs"
# The qemu-img load logs in and out between its rounds, so the session checked is one of our
# own that stays up meanwhile: a linerate-bench read load on LUN 0.
victim_tsih() {
    ctl --json show sessions | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["initiator"].endswith(":bench"):
        print(s["tsih"], s["connections"][0]["cid"]); break'
}
wait_bench_session() {
    ids=""
    for ((i = 0; i < 100; i++)); do
        ids=$(victim_tsih)
        [ -n "$ids" ] && return 0
        sleep 0.1
    done
    fail "no linerate-bench session showed up"
}
"$BENCH" --sizes 4k --rw read --qd 4 --seconds 20 --format csv "$URL/0" >"$WORK/bench-show.log" 2>&1 &
BPID=$!
wait_bench_session
ctl_ok --json show sessions
python3 - "$WORK/ctl.out" <<'EOF' || fail "show sessions: $(cat "$WORK/ctl.out")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s, "no session"
x = s[0]
for k in ("tsih", "isid", "initiator", "target", "age_seconds", "commands_in_flight",
          "connections", "parameters"):
    assert k in x, k
c = x["connections"][0]
for k in ("cid", "peer", "portal", "reactor", "header_digest", "data_digest"):
    assert k in c, k
assert "max_burst_length" in x["parameters"]
EOF
ctl_ok show sessions
grep -q "TSIH" "$WORK/ctl.out" || fail "show sessions table: $(cat "$WORK/ctl.out")"
ctl_ok show connections
grep -q "REACTOR" "$WORK/ctl.out" || fail "show connections table"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null

note "remove lun 1 with I/O in flight on it: that I/O ends cleanly, LUN 0's load goes on"
timeout 120 qemu-img bench -f raw -c 400000 -d 16 -s 4096 -w "$URL/1" >"$WORK/victim.log" 2>&1 &
VICTIM=$!
sleep 1
# A linerate-bench --verify on another LUN across the removal: its stamped blocks must read
# back, and its timed cells after the verify (exit 1 on any failed command) take the REPORTED
# LUNS DATA HAS CHANGED unit attention in their stride. LUN 5, as the qemu-img rounds write LUN
# 0 meanwhile and would overwrite the stamps. The removal waits for its first login, so that it
# lands in the verify or in the timed cells, not before them.
"$BENCH" --verify --sizes 4k --rw randwrite,randread --qd 8 --seconds 2 --format csv "$URL/5" \
    >"$WORK/bench-verify.log" 2>&1 &
VPID=$!
for ((i = 0; i < 100; i++)); do
    grep -q "logged in" "$WORK/bench-verify.log" && break
    sleep 0.05
done
kill -0 $VICTIM 2>/dev/null || fail "the load on LUN 1 ended before the removal: $(cat "$WORK/victim.log")"
t0=$(date +%s%N)
ctl_ok --json remove lun "$T" 1
[ "$(jget 'd["closed"]' <"$WORK/ctl.out")" = True ] || fail "remove lun: $(cat "$WORK/ctl.out")"
wait $VICTIM
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ $rc -ne 0 ] || fail "the load on the removed LUN did not notice"
[ $rc -ne 124 ] && [ $ms -lt 5000 ] ||
    fail "the load on the removed LUN ended by timeout (exit $rc after $ms ms), not by an error"
# New commands get CHECK CONDITION, ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED (25h/00h)
grep -q "SENSE KEY:ILLEGAL_REQUEST(5) ASCQ:LOGICAL_UNIT_NOT_SUPPORTED" "$WORK/victim.log" || {
    tail -n 5 "$WORK/victim.log" >&2
    fail "the load on the removed LUN did not end with LOGICAL UNIT NOT SUPPORTED"
}
wait $VPID || {
    cat "$WORK/bench-verify.log" >&2
    fail "linerate-bench --verify on LUN 5 failed across the removal"
}
grep -q "verify passed" "$WORK/bench-verify.log" || fail "no verify verdict on LUN 5"
ctl_ok remove lun "$T" 5
ctl_ok --json show luns
[ "$(jget '[l["lun"] for l in d]' <"$WORK/ctl.out")" = "[0]" ] ||
    fail "show luns after remove: $(cat "$WORK/ctl.out")"
ctl remove lun "$T" 1 >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] || fail "removing a removed LUN succeeded"
ctl_ok add lun "$T" ram:4M
grep -q "^$T  1 " "$WORK/ctl.out" || fail "LUN 1 not reused: $(cat "$WORK/ctl.out")"

note "logout session and drop connection (linerate-bench sessions on LUN 0)"
# Asked to log out (Async Message event 1, RFC 7143 §11.9.1), the bench's session of two
# connections (on two threads) logs out and logs in anew (issue 35): the old session goes, a
# new one comes, and the bench's run ends with no command failed (exit 0). A dropped
# connection at ERL 0 only goes.
for what in logout drop; do
    secs=20 conns=1
    [ $what = logout ] && secs=5 conns=2
    "$BENCH" --sizes 4k --rw read --qd 4 --seconds $secs --connections $conns --log-level info \
        --format csv "$URL/0" \
        >"$WORK/bench-$what.log" 2>&1 &
    BPID=$!
    wait_bench_session
    set -- $ids
    if [ $what = logout ]; then
        ctl_ok logout session "$1" --timeout 3
    else
        ctl_ok drop connection "$1" "$2"
    fi
    for ((i = 0; i < 50; i++)); do
        ctl --json show sessions | grep -q "\"tsih\": $1," || break
        sleep 0.1
    done
    ctl --json show sessions | grep -q "\"tsih\": $1," && fail "session $1 still there after $what"
    if [ $what = logout ]; then
        wait "$BPID" ||
            fail "the bench failed after the logout it was asked for: $(tail -5 "$WORK/bench-$what.log")"
        grep -q "initiator: logged in again (TSIH" "$WORK/bench-$what.log" ||
            fail "the bench did not log in again after the logout it was asked for: $(tail -8 "$WORK/bench-$what.log")"
        continue
    fi
    kill "$BPID" 2>/dev/null
    wait "$BPID" 2>/dev/null
done
ctl logout session 60000 >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "no session" "$WORK/ctl.out" || fail "logout of a missing session"

note "set log-level"
ctl_ok set log-level debug
ctl_ok --json version
[ "$(jget 'd["log_level"]' <"$WORK/ctl.out")" = debug ] || fail "log level not debug"
ctl_ok set log-level info
ctl set log-level loud >/dev/null 2>&1
[ $? -eq 1 ] || fail "a bad log level was accepted"

note "add target on a new portal; remove target: refused with a session, then --force"
T2=iqn.2026-11.org.linerate:second
for ((i = 0; i < 30; i++)); do
    P2=$(random_port)
    port_busy "$P2" || break
done
ctl_ok add target "$T2" --portal "127.0.0.1:$P2" --lun ram:8M --lun null:1G --alias second
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$P2" || {
    show_cmd_out
    fail "iscsi-ls of the added target"
}
grep -q "Target:$T2" "$WORK/cmd.out" && grep -q "Lun:1" "$WORK/cmd.out" ||
    fail "the added target is not served: $(cat "$WORK/cmd.out")"
ctl_ok show portals
grep -q "127.0.0.1:$P2.*listening.*$T2" "$WORK/ctl.out" || fail "show portals: $(cat "$WORK/ctl.out")"
ctl add target "$T2" --portal "127.0.0.1:$P2" >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] || fail "the same target added twice"
for args in "set lun 0 ro" "resize lun 0 128M" "remove lun 0"; do
    ctl $args >"$WORK/ctl.out" 2>&1
    [ $? -eq 1 ] && grep -q "several targets: name one (TARGET N)" "$WORK/ctl.out" ||
        fail "$args with two targets: $(cat "$WORK/ctl.out")"
done
ctl set lun 0 >"$WORK/ctl.out" 2>&1
[ $? -eq 2 ] && grep -q "usage: set lun \[TARGET\] N ro|rw" "$WORK/ctl.out" ||
    fail "set lun without a mode: $(cat "$WORK/ctl.out")"
"$BENCH" --sizes 4k --rw read --qd 4 --seconds 20 --format csv "iscsi://127.0.0.1:$P2/$T2/0" \
    >"$WORK/bench-t2.log" 2>&1 &
BPID=$!
for ((i = 0; i < 100; i++)); do
    ctl --json show sessions | grep -q "\"target\": \"$T2\"" && break
    sleep 0.1
done
ctl remove target "$T2" >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "has 1 session" "$WORK/ctl.out" ||
    fail "removing a target with a session: $(cat "$WORK/ctl.out")"
ctl_ok --json remove target "$T2" --force --timeout 2
[ "$(jget 'd["luns_removed"]' <"$WORK/ctl.out")" = 2 ] || fail "remove target: $(cat "$WORK/ctl.out")"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
ctl_ok --json show targets
[ "$(jget '[t["name"] for t in d]' <"$WORK/ctl.out")" = "['$T']" ] ||
    fail "targets after remove: $(cat "$WORK/ctl.out")"
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$P2"
grep -q "Target:$T2" "$WORK/cmd.out" && fail "the removed target is still listed"

note "stop the load: it must have seen no error"
touch "$WORK/load.stop"
wait $LOAD_PID
[ -e "$WORK/load.fail" ] && {
    tail -n 20 "$WORK/load.log" >&2
    fail "the load on LUN 0 failed: $(cat "$WORK/load.fail")"
}
[ "$(cat "$WORK/load.rounds" 2>/dev/null || echo 0)" -ge 1 ] || fail "the load never completed a round"

# --- the socket's defences ---
note "non-root: refused by the file mode, and by SO_PEERCRED when the mode lets it in"
setpriv --reuid 65534 --regid 65534 --clear-groups "$CTL_BIN" --socket "$SOCK" show targets \
    >"$WORK/ctl.out" 2>&1
[ $? -eq 3 ] || fail "uid 65534 got through the 0600 socket: $(cat "$WORK/ctl.out")"
chmod 0666 "$SOCK"
setpriv --reuid 65534 --regid 65534 --clear-groups "$CTL_BIN" --socket "$SOCK" show targets \
    >"$WORK/ctl.out" 2>&1
rc=$?
chmod 0600 "$SOCK"
[ $rc -eq 1 ] && grep -q "permission denied" "$WORK/ctl.out" ||
    fail "uid 65534 was not refused by the daemon (exit $rc): $(cat "$WORK/ctl.out")"

note "bad requests: malformed JSON, not JSON-RPC, unknown method, bad params, huge line, 1000 clients"
python3 - "$SOCK" <<'EOF' || fail "bad-request checks"
import json, resource, socket, sys, time
path = sys.argv[1]

def talk(payload, expect_close=False):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(path)
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # turned away mid-request (a huge line): the answer is still there to read
    buf = b""
    while b"\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf.split(b"\n")[0])

def code(payload):
    r = talk(payload)
    assert "error" in r, r
    return r["error"]["code"]

assert code(b"{not json\n") == -32700
assert code(b"[1,2,3]\n") == -32600
assert code(b'{"jsonrpc":"1.0","id":1,"method":"version"}\n') == -32600
assert code(b'{"jsonrpc":"2.0","id":7,"method":"no_such_thing"}\n') == -32601
assert code(b'{"jsonrpc":"2.0","id":7,"method":"remove_lun","params":[1]}\n') == -32602
assert code(b'{"jsonrpc":"2.0","id":7,"method":"remove_lun","params":{"target":5}}\n') == -32602
assert code(b'{"jsonrpc":"2.0","id":7,"method":"set_lun","params":{"target":"x","lun":0}}\n') == -32004
r = talk(b'{"jsonrpc":"2.0","id":"abc","method":"version"}\n')
assert r["id"] == "abc" and "result" in r, r
# a line past the cap (64 KiB): one error, then the daemon closes that client
assert code(b"x" * (1 << 20)) == -32003
# deep nesting is a parse error, not a crash
assert code(b"[" * 100000 + b"\n") in (-32700, -32003)
# 1000 clients at once: every one gets an answer, a result or 'busy' (past the first 64)
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
socks = []
for i in range(1000):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)  # blocking: waits while the backlog is full
    s.settimeout(30)
    socks.append(s)
for s in socks:
    try:
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"version"}\n')
    except (BrokenPipeError, ConnectionResetError):
        pass  # told busy and closed already: its answer is waiting
ok = busy = 0
other = []
for i, s in enumerate(socks):
    buf, err = b"", None
    try:
        while b"\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except OSError as e:
        err = e
    r = json.loads(buf.split(b"\n")[0]) if b"\n" in buf else None
    if r and "result" in r:
        ok += 1
    elif r and r.get("error", {}).get("code") == -32002:
        busy += 1
    else:
        other.append((i, buf[:200], err))
    s.close()
assert ok >= 1 and ok + busy == 1000, (ok, busy, other[:10])
print("1000 clients:", ok, "served,", busy, "told busy")
# and it still answers, once it has seen those clients go (their closes reach its thread
# after ours returned; under ThreadSanitizer that took long enough to be told 'busy')
for _ in range(50):
    r = talk(b'{"jsonrpc":"2.0","id":2,"method":"show_targets"}\n')
    if "busy" not in r.get("error", {}).get("message", ""):
        break
    time.sleep(0.1)
assert "result" in r, r
EOF
ctl_ok version
ctl reload >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "without --config" "$WORK/ctl.out" || fail "reload without --config"

note "SIGTERM: exit 0, socket removed"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
[ -e "$SOCK" ] && fail "the socket file is still there"

note "out of descriptors: clients are told busy at once, the daemon does not spin"
SOCK=$WORK/lim.sock
start_target --lun ram:1M --threads 1 --ctl-socket "$SOCK"
# a few descriptors to spare: the rest of 300 clients find it at its limit
prlimit --pid "$LT_PID" --nofile=$(($(ls "/proc/$LT_PID/fd" | wc -l) + 8)) ||
    fail "prlimit --pid $LT_PID failed"
python3 - "$SOCK" "$LT_PID" <<'EOF' || fail "out of descriptors"
import json, os, resource, socket, sys, time
path, pid = sys.argv[1], int(sys.argv[2])

def cpu():  # the daemon's user + system time, s (proc(5): fields 14, 15)
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
socks = []
for i in range(300):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    s.settimeout(30)
    socks.append(s)
time.sleep(0.5)
c0 = cpu()
time.sleep(2)
spent = cpu() - c0
ok = busy = 0
for s in socks:
    try:
        s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"version"}\n')
    except OSError:
        pass
for s in socks:
    buf = b""
    try:
        while b"\n" not in buf:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
    except OSError:
        pass
    r = json.loads(buf.split(b"\n")[0]) if b"\n" in buf else {}
    if "result" in r:
        ok += 1
    elif r.get("error", {}).get("code") == -32002:
        busy += 1
    s.close()
print("300 clients at the descriptor limit:", ok, "served,", busy, "told busy;",
      "%.2f s of CPU in 2 s" % spent)
assert ok >= 1 and busy >= 1 and ok + busy == 300, (ok, busy)
assert spent < 0.5, "the daemon spun at its descriptor limit: %.2f s of CPU in 2 s" % spent
EOF
grep -q "client refused: busy: out of file descriptors" "$WORK/target.log" ||
    fail "no refusal logged at the descriptor limit"
ctl_ok version
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"

note "ctl-socket from the config file; reload (good and bad files) and SIGHUP"
conf_lines() { # the config with these LUN (and other) lines in the target's section
    printf 'ctl-socket = %s\n[target %s]\nportal = 127.0.0.1:%s\n' "$WORK/conf.sock" "$T" "$1"
    shift
    printf '%s\n' "$@"
}
conf_lines @PORT@ "lun 0 = ram:8M" "lun 1 = ram:4M" "lun 2 = ram:4M" >"$WORK/ctl.conf"
start_target_config "$WORK/ctl.conf"
SOCK=$WORK/conf.sock
ctl_ok show luns
grep -q "8 MiB" "$WORK/ctl.out" || fail "config ctl-socket: $(cat "$WORK/ctl.out")"
URL="iscsi://127.0.0.1:$PORT/$T"
timeout 120 qemu-img bench -f raw -c 60000 -d 8 -s 4096 -w "$URL/0" >"$WORK/load2.log" 2>&1 &
LOAD_PID=$!
# the daemon reads $WORK/run.conf (start_target_config's copy): change that one
conf_lines "$PORT" "lun 0 = ram:8M" "lun 2 = ram:4M,ro" "lun 3 = ram:2M" >"$WORK/run.conf"
ctl_ok --json reload
python3 - "$WORK/ctl.out" <<'EOF' || fail "reload: $(cat "$WORK/ctl.out")"
import json, sys
r = json.load(open(sys.argv[1]))
a = " | ".join(r["applied"])
assert "LUN 1 removed" in a and "LUN 2 read-only" in a and "LUN 3 added" in a, a
assert not r["needs_restart"], r["needs_restart"]
EOF
ctl_ok --json show luns
[ "$(jget '[(l["lun"], l["read_only"]) for l in d]' <"$WORK/ctl.out")" = \
    "[(0, False), (2, True), (3, False)]" ] || fail "LUNs after reload: $(cat "$WORK/ctl.out")"
conf_lines "$PORT" "lun 0 = ram:8M" "lun 2 = ram:4M,ro" "lun 3 = ram:2M" "lun 4 = ram:1M" \
    "lun 5 = file:$WORK/missing/x.img" >"$WORK/run.conf"
ctl reload >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "run.conf:8: cannot open LUN 5" "$WORK/ctl.out" ||
    fail "a store that cannot be opened: $(cat "$WORK/ctl.out")"
conf_lines "$PORT" "lun 0 = ram:8M" "lun 4 = ram:1M" "this is not a key" >"$WORK/run.conf"
ctl reload >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "run.conf:6:" "$WORK/ctl.out" ||
    fail "a syntax error: $(cat "$WORK/ctl.out")"
ctl_ok --json show luns
[ "$(jget '[l["lun"] for l in d]' <"$WORK/ctl.out")" = "[0, 2, 3]" ] ||
    fail "a bad reload changed something: $(cat "$WORK/ctl.out")"
# SIGHUP does the same
conf_lines "$PORT" "lun 0 = ram:8M" "lun 2 = ram:4M" "lun 3 = ram:2M" "lun 4 = ram:1M" \
    >"$WORK/run.conf"
kill -HUP "$LT_PID"
for ((i = 0; i < 50; i++)); do
    ctl --json show luns | grep -q '"lun": 4' && break
    sleep 0.1
done
ctl_ok --json show luns
[ "$(jget '[(l["lun"], l["read_only"]) for l in d]' <"$WORK/ctl.out")" = \
    "[(0, False), (2, False), (3, False), (4, False)]" ] ||
    fail "LUNs after SIGHUP: $(cat "$WORK/ctl.out")"
grep -q "SIGHUP: reloading" "$WORK/target.log" || fail "SIGHUP not logged"
# SIGHUP with a bad file: the log says FILE:LINE: why, and nothing changed (not even the
# changes on the good lines before the bad one)
conf_lines "$PORT" "lun 0 = ram:8M" "lun 2 = ram:4M,ro" "lun 5 = ram:1M" "this is not a key" \
    >"$WORK/run.conf"
kill -HUP "$LT_PID"
for ((i = 0; i < 50; i++)); do
    grep -q "reload: .*run.conf:7: .*nothing changed" "$WORK/target.log" && break
    sleep 0.1
done
grep -q "ERROR reload: $WORK/run.conf:7: .*; nothing changed" "$WORK/target.log" ||
    fail "SIGHUP with a bad file: no FILE:LINE: in the log: $(tail -n 3 "$WORK/target.log")"
ctl_ok --json show luns
[ "$(jget '[(l["lun"], l["read_only"]) for l in d]' <"$WORK/ctl.out")" = \
    "[(0, False), (2, False), (3, False), (4, False)]" ] ||
    fail "SIGHUP with a bad file changed the LUNs: $(cat "$WORK/ctl.out")"
# whole targets through reload
conf_lines "$PORT" "lun 0 = ram:8M" "lun 2 = ram:4M" "lun 3 = ram:2M" "lun 4 = ram:1M" \
    "[target $T:third]" "portal = 127.0.0.1:$PORT" "lun = ram:1M" >"$WORK/run.conf"
ctl_ok reload
grep -q "target $T:third added" "$WORK/ctl.out" || fail "reload add target: $(cat "$WORK/ctl.out")"
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$PORT"
grep -q "Target:$T:third" "$WORK/cmd.out" || fail "reloaded target not served: $(cat "$WORK/cmd.out")"
conf_lines "$PORT" "lun 0 = ram:8M" "lun 2 = ram:4M" "lun 3 = ram:2M" "lun 4 = ram:1M" \
    >"$WORK/run.conf"
ctl_ok reload
grep -q "target $T:third removed" "$WORK/ctl.out" || fail "reload remove target: $(cat "$WORK/ctl.out")"

note "reload drops a target that has a session: it drains, then goes when the session ends"
T3=$T:third
WITH3=("[target $T3]" "portal = 127.0.0.1:$PORT" "lun = ram:1M")
BASE=("lun 0 = ram:8M" "lun 2 = ram:4M" "lun 3 = ram:2M" "lun 4 = ram:1M")
# bench_on_t3 NAME: a linerate-bench session on T3 (pid in $BPID), once show sessions has it
bench_on_t3() {
    "$BENCH" --sizes 4k --rw read --qd 2 --seconds 60 --format csv \
        "iscsi://127.0.0.1:$PORT/$T3/0" >"$WORK/bench-$1.log" 2>&1 &
    BPID=$!
    for ((i = 0; i < 100; i++)); do
        ctl --json show sessions | grep -q "\"target\": \"$T3\"" && return 0
        sleep 0.1
    done
    fail "no session on $T3: $(cat "$WORK/bench-$1.log")"
}
# t3_state: "absent", or "SESSIONS DRAINING" from show targets
t3_state() {
    ctl --json show targets | python3 -c '
import json, sys
t = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
print("absent" if not t else "%d %s" % (t[0]["sessions"], t[0]["draining"]))' "$T3"
}
conf_lines "$PORT" "${BASE[@]}" "${WITH3[@]}" >"$WORK/run.conf"
ctl_ok reload
grep -q "target $T3 added" "$WORK/ctl.out" || fail "reload add target: $(cat "$WORK/ctl.out")"
bench_on_t3 drain
conf_lines "$PORT" "${BASE[@]}" >"$WORK/run.conf"
ctl_ok --json reload
python3 - "$WORK/ctl.out" "$T3" <<'EOF' || fail "reload with a session on $T3: $(cat "$WORK/ctl.out")"
import json, sys
r = json.load(open(sys.argv[1]))
a = " | ".join(r["applied"])
assert "target %s draining" % sys.argv[2] in a and "1 session ends" in a, a
assert not r["needs_restart"], r["needs_restart"]
EOF
[ "$(t3_state)" = "1 True" ] || fail "$T3 after the reload: $(t3_state), not draining with 1 session"
ctl_ok show targets
grep -q "^$T3 .*1 (draining)" "$WORK/ctl.out" || fail "show targets table: $(cat "$WORK/ctl.out")"
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$PORT"
grep -q "Target:$T3" "$WORK/cmd.out" && fail "SendTargets still lists the draining $T3"
run_to 30 iscsi-readcapacity16 "iscsi://127.0.0.1:$PORT/$T3/0" &&
    fail "a new login to the draining $T3 worked"
kill -0 "$BPID" 2>/dev/null ||
    fail "the session on the draining $T3 ended: $(cat "$WORK/bench-drain.log")"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
for ((i = 0; i < 50; i++)); do
    [ "$(t3_state)" = absent ] && break
    sleep 0.1
done
[ "$(t3_state)" = absent ] || fail "$T3 still there 5 s after its last session ended: $(t3_state)"
grep -q "event=target-removed target=$T3 " "$WORK/target.log" || fail "no target-removed log line"

note "a draining target the file has again is served again; reload --force removes it at once"
conf_lines "$PORT" "${BASE[@]}" "${WITH3[@]}" >"$WORK/run.conf"
ctl_ok reload
bench_on_t3 force
conf_lines "$PORT" "${BASE[@]}" >"$WORK/run.conf"
ctl_ok reload
[ "$(t3_state)" = "1 True" ] || fail "$T3 not draining: $(t3_state)"
conf_lines "$PORT" "${BASE[@]}" "${WITH3[@]}" >"$WORK/run.conf"
ctl_ok reload
grep -q "target $T3 served again" "$WORK/ctl.out" || fail "undrain: $(cat "$WORK/ctl.out")"
[ "$(t3_state)" = "1 False" ] || fail "$T3 not served again: $(t3_state)"
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$PORT"
grep -q "Target:$T3" "$WORK/cmd.out" || fail "SendTargets does not list $T3 again"
conf_lines "$PORT" "${BASE[@]}" >"$WORK/run.conf"
ctl_ok reload --force
grep -q "target $T3 removed (1 session ended)" "$WORK/ctl.out" ||
    fail "reload --force with a session: $(cat "$WORK/ctl.out")"
[ "$(t3_state)" = absent ] || fail "$T3 still there after reload --force: $(t3_state)"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
wait $LOAD_PID || {
    tail -n 5 "$WORK/load2.log" >&2
    fail "the load on LUN 0 failed during the reloads"
}
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
echo "PASS"
