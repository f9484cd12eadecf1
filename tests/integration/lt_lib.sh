# Helpers for the linerate-target integration tests (sourced): a scratch directory, starting
# the daemon on a random free loopback port (retrying when the port is taken), stopping it with
# SIGTERM and collecting its exit code, failing with the daemon's log as context, linerate-ctl
# on its control socket and a Ceph cluster for rbd: LUNs.
# Meson passes LINERATE_TARGET (the binary under test: build/ or build-asan/).
set -u

LT=${LINERATE_TARGET:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/linerate-target}
IT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WORK=$(mktemp -d /tmp/linerate-it.XXXXXX)
LT_PID=""
PORT=""
STOP_RC=""
# Generous: the ASan build starts and stops slowly on a loaded 2-core CI machine.
READY_TIMEOUT_S=${READY_TIMEOUT_S:-60}
STOP_TIMEOUT_S=${STOP_TIMEOUT_S:-30}

it_cleanup() {
    if [ -n "$LT_PID" ]; then
        kill -KILL "$LT_PID" 2>/dev/null
        wait "$LT_PID" 2>/dev/null
    fi
    [ -n "${CEPH_MINI_DIR:-}" ] && "$CEPH_MINI" stop "$CEPH_MINI_DIR" >/dev/null 2>&1
    rm -rf "$WORK"
}
trap it_cleanup EXIT

note() { echo "== $*"; }

fail() {
    echo "FAIL: $*" >&2
    if [ -s "$WORK/target.log" ]; then
        echo "--- linerate-target log (last 40 lines):" >&2
        tail -n 40 "$WORK/target.log" >&2
    fi
    exit 1
}

# Exit code 77 makes meson report SKIP.
skip() {
    echo "SKIP: $*" >&2
    exit 77
}

need() {
    for t in "$@"; do
        command -v "$t" >/dev/null 2>&1 || skip "$t is not installed (scripts/install-deps test)"
    done
}

[ -x "$LT" ] || fail "$LT is not built"

port_busy() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A port to try: LT_PORT_BASE + [0, LT_PORT_SPAN) (default 20000..29999), so that parallel
# runs on one machine can be kept apart.
random_port() {
    echo $((${LT_PORT_BASE:-20000} + RANDOM % ${LT_PORT_SPAN:-10000}))
}

# Wait until the daemon printed its URLs (it is listening by then) or died.
wait_ready() {
    local i
    for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
        grep -q '^iscsi://' "$WORK/target.out" 2>/dev/null && return 0
        kill -0 "$LT_PID" 2>/dev/null || return 1
        sleep 0.1
    done
    fail "linerate-target did not become ready in ${READY_TIMEOUT_S}s"
}

# start_target [ARGS...]: --listen 127.0.0.1:$PORT is added. Sets PORT and LT_PID.
# start_target_config FILE: FILE may contain @PORT@, replaced by the chosen port.
# start_common raw [ARGS...]: ARGS as they are, with FIXED_PORT set to the port they use.
# A port taken between the check and the bind is retried with another.
start_target() { start_common args "$@"; }
start_target_config() { start_common config "$1"; }

start_common() {
    local mode=$1 try rc
    shift
    for ((try = 0; try < 30; try++)); do
        if [ -z "${FIXED_PORT:-}" ]; then
            PORT=$(random_port)
            port_busy "$PORT" && continue
        else
            PORT=$FIXED_PORT
        fi
        : >"$WORK/target.out"
        if [ "$mode" = config ]; then
            sed "s/@PORT@/$PORT/g" "$1" >"$WORK/run.conf"
            "$LT" --config "$WORK/run.conf" >"$WORK/target.out" 2>>"$WORK/target.log" &
        elif [ "$mode" = raw ]; then
            "$LT" "$@" >"$WORK/target.out" 2>>"$WORK/target.log" &
        elif [ -n "${SECOND_PORTAL:-}" ]; then
            # the same target through a second portal (libiscsi's MultipathIO tests)
            "$LT" --listen "127.0.0.1:$PORT" --listen "127.0.0.2:$PORT" "$@" \
                >"$WORK/target.out" 2>>"$WORK/target.log" &
        else
            "$LT" --listen "127.0.0.1:$PORT" "$@" >"$WORK/target.out" 2>>"$WORK/target.log" &
        fi
        LT_PID=$!
        wait_ready && return 0
        wait "$LT_PID"
        rc=$?
        LT_PID=""
        if [ -z "${FIXED_PORT:-}" ] && tail -n 3 "$WORK/target.log" | grep -q "in use"; then
            continue
        fi
        fail "linerate-target exited with $rc at start"
    done
    fail "no free loopback port found"
}

# SIGTERM the daemon, wait for it; STOP_RC is its exit code.
stop_target() {
    local i
    [ -n "$LT_PID" ] || fail "stop_target: no daemon running"
    kill -TERM "$LT_PID"
    for ((i = 0; i < STOP_TIMEOUT_S * 10; i++)); do
        kill -0 "$LT_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$LT_PID" 2>/dev/null; then
        kill -KILL "$LT_PID"
        wait "$LT_PID" 2>/dev/null
        LT_PID=""
        fail "linerate-target did not exit within ${STOP_TIMEOUT_S}s of SIGTERM"
    fi
    wait "$LT_PID"
    STOP_RC=$?
    LT_PID=""
}

# run_to SECONDS CMD...: run with a timeout, output into $WORK/cmd.out (shown on failure).
run_to() {
    local t=$1
    shift
    timeout "$t" "$@" >"$WORK/cmd.out" 2>&1
}

# ok WHAT CMD...: must succeed; no WHAT CMD...: must fail (an initiator's login, say).
ok() {
    local what=$1
    shift
    run_to 60 "$@" || { show_cmd_out; fail "$what: exited $?"; }
}
no() {
    local what=$1
    shift
    if run_to 60 "$@"; then
        show_cmd_out
        fail "$what: succeeded"
    fi
    return 0
}

show_cmd_out() {
    echo "--- output of the last command:" >&2
    tail -n 30 "$WORK/cmd.out" >&2
}

# conf_refused GOOD SED-EXPR WORDS: the config file GOOD edited by SED-EXPR, given to --check,
# exits 2 with a message that says WORDS.
conf_refused() {
    sed "$2" "$1" >"$WORK/bad.conf"
    timeout 20 "$LT" --check --config "$WORK/bad.conf" >"$WORK/o" 2>&1
    local rc=$?
    [ $rc -eq 2 ] || fail "'$2': exited $rc, not 2 ($(cat "$WORK/o"))"
    grep -qF -- "$3" "$WORK/o" || fail "'$2': message does not say '$3': $(cat "$WORK/o")"
}

# hosts_conf TARGET SIZE HOST GROUP-A GROUP-B [MAP-OPTS]: the entries the host tests start from,
# as config lines: [target TARGET] with two RAM LUNs of SIZE, [host HOST] seeing them as 0 and 1,
# and [group cluster] of GROUP-A and GROUP-B seeing LUN 1 as 0 (MAP-OPTS after it, e.g. ",ro").
hosts_conf() {
    printf '[target %s]\nlun = ram:%s\nlun = ram:%s\n' "$1" "$2" "$2"
    printf '[host %s]\nmap = 0 0\nmap = 1 1\n' "$3"
    printf '[group cluster]\ninitiator = %s\ninitiator = %s\nmap = 0 1%s\n' "$4" "$5" "${6:-}"
}

# testcu_verdict WHAT: the end of an iscsi-test-cu run: the daemon stopped with SIGTERM exits 0;
# the tests listed in $WORK/regressed (expected to pass, did not) fail WHAT; else PASS.
testcu_verdict() {
    stop_target
    [ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC after iscsi-test-cu, not 0"
    if [ -s "$WORK/regressed" ]; then
        echo "expected to pass but did not ($(wc -l <"$WORK/regressed")):" >&2
        sed 's/^/  /' "$WORK/regressed" >&2
        fail "$1"
    fi
    echo PASS
}

# --- linerate-ctl on the daemon under test ---
# ctl_setup: CTL_BIN and BENCH, the linerate-ctl and linerate-bench built beside $LT (failing
# when either is not), T the name of the daemon's default target, and SOCK the control socket
# to start it with (--ctl-socket "$SOCK", or ctl-socket = $SOCK in a config file).
ctl_setup() {
    local build
    build=$(dirname "$LT")
    CTL_BIN=$build/linerate-ctl
    BENCH=$build/linerate-bench
    [ -x "$CTL_BIN" ] || fail "$CTL_BIN is not built"
    [ -x "$BENCH" ] || fail "$BENCH is not built"
    T=iqn.2026-11.org.linerate:default
    SOCK=$WORK/ctl.sock
}

# ctl ARGS...: linerate-ctl on $SOCK as it is at the call (a test may move it to another socket).
ctl() { "$CTL_BIN" --socket "$SOCK" "$@"; }
# ctl_ok ARGS...: must succeed; output in $WORK/ctl.out
ctl_ok() {
    ctl "$@" >"$WORK/ctl.out" 2>&1 || {
        cat "$WORK/ctl.out" >&2
        fail "linerate-ctl $* failed"
    }
}
# jget EXPR: print the Python expression EXPR of the JSON on stdin, which it names d.
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# --- a Ceph cluster for rbd: LUNs (scripts/ceph-mini) ---
CEPH_MINI=$(cd "$IT_DIR/../.." && pwd)/scripts/ceph-mini
CEPH_MINI_DIR=""

# start_ceph: a single-node cluster with the pool rbd on a free loopback port, stopped on exit;
# exports CEPH_CONF. Skips (77) when this build has no rbd store (LT_HAVE_RBD=0 from meson) or
# the Ceph daemons are not installed: never a stand-in for Ceph. LT_CEPH_PORT (or
# CEPH_MINI_PORT) fixes the mon's port (the cluster then also binds PORT+11..PORT+110), for runs
# kept to a range of ports.
start_ceph() {
    [ "${LT_HAVE_RBD:-1}" = 1 ] ||
        skip "linerate-target was built without librbd (install librbd-dev librados-dev: scripts/install-deps test)"
    local b try
    for b in ceph-mon ceph-osd ceph-mgr ceph rados rbd monmaptool; do
        command -v "$b" >/dev/null 2>&1 ||
            skip "$b is not installed: no Ceph cluster for the rbd tests (scripts/install-deps test installs ceph-mon ceph-osd ceph-mgr ceph-common)"
    done
    # LT_CEPH_PORT (or CEPH_MINI_PORT) set by the caller: that port only (keeps parallel runs
    # apart, as LT_PORT_BASE does for the daemon)
    local fixed=${LT_CEPH_PORT:-${CEPH_MINI_PORT:-}}
    for ((try = 0; try < 10; try++)); do
        export CEPH_MINI_PORT=${fixed:-$((30000 + (RANDOM % 90) * 100 + 89))}
        if port_busy "$CEPH_MINI_PORT"; then
            [ -n "$fixed" ] && fail "the Ceph port $fixed (LT_CEPH_PORT/CEPH_MINI_PORT) is taken"
            continue
        fi
        CEPH_MINI_DIR=$WORK/ceph
        if "$CEPH_MINI" start "$CEPH_MINI_DIR" >"$WORK/ceph.env" 2>"$WORK/ceph.err"; then
            export CEPH_CONF=$CEPH_MINI_DIR/ceph.conf
            note "$(tail -n 1 "$WORK/ceph.err")"
            return 0
        fi
        CEPH_MINI_DIR=""
        [ -z "$fixed" ] && grep -q "is taken" "$WORK/ceph.err" && continue
        fail "scripts/ceph-mini start failed: $(tail -n 5 "$WORK/ceph.err")"
    done
    fail "no free port for the Ceph monitor"
}
