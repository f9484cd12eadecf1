#!/bin/bash
# Two gateways of one target (issue 13, "More than one gateway"): two linerate daemons export
# the same store under the same target name, each on its own port, each its own target port
# group (alua-group 1 and 2, told of each other with alua-peer). target_alua.py starts them.
#   target_multigw.sh file   the shared store is a file both daemons open (testing only: one
#                            host's page cache makes that coherent; nothing crosses hosts)
#   target_multigw.sh rbd    the shared store is an RBD image on scripts/ceph-mini's cluster;
#                            skipped (77) without Ceph or librbd
# Each mode:
#   1. target_alua.py: INQUIRY TPGS, VPD 0x83 and REPORT TARGET PORT GROUPS from both paths
#      (same bytes), standby refusals, cross-path reads, and gateway loss (SIGKILL of A while
#      writes with FUA go through it: every acknowledged write reads back through B);
#   2. iscsi-test-cu -d -t ALL.MultipathIO with one URL per gateway (libiscsi's two-URL mode):
#      Simple, CompareAndWrite and CompareAndWriteAsync pass; Reset (LOGICAL UNIT RESET through
#      one path, a unit attention wanted on every path) passes on rbd, where the resetting
#      gateway tells the other through the cluster before it answers (see below);
#   3. linerate-bench --verify, one session per gateway at once (A on LUN 0, B on LUN 2, two
#      stores so that the two runs' stamps do not overwrite each other), A killed with SIGKILL
#      mid-run: the run through B still passes its verify, the run through A fails.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-test-cu python3
mode=${1:-file}
BENCH=${LINERATE_BENCH:-$(dirname "$LT")/linerate-bench}
[ -x "$BENCH" ] || fail "$BENCH is not built"
iqn=iqn.2026-11.org.linerate:alua
py_args=()
if [ "$mode" = rbd ]; then
    start_ceph
    rbd create --size 64M rbd/it-mgw || fail "rbd create rbd/it-mgw failed"
    rbd create --size 64M rbd/it-mgw2 || fail "rbd create rbd/it-mgw2 failed"
    py_args=(--rbd rbd/it-mgw)
fi

note "[$mode] ALUA and gateway loss through two gateways (target_alua.py)"
python3 "$IT_DIR/target_alua.py" "$LT" "${py_args[@]}" >"$WORK/alua.out" 2>&1 ||
    { cat "$WORK/alua.out" >&2; fail "target_alua.py failed"; }
cat "$WORK/alua.out"

# Two gateways kept running for the libiscsi and bench parts.
GW_PID=""
start_gateways() {
    local extra=()
    [ "$mode" = rbd ] && extra=(--lun2 rbd:rbd/it-mgw2)
    rm -f "$WORK/gw.pids"
    python3 "$IT_DIR/target_alua.py" "$LT" "${py_args[@]}" "${extra[@]}" \
        --keep-running "$WORK/gw.pids" >"$WORK/gw.out" 2>&1 &
    GW_PID=$!
    local i
    for ((i = 0; i < 600; i++)); do
        [ -s "$WORK/gw.pids" ] && break
        kill -0 "$GW_PID" 2>/dev/null || { cat "$WORK/gw.out" >&2; fail "gateways did not start"; }
        sleep 0.1
    done
    read -r PID_A PORT_A PID_B PORT_B <"$WORK/gw.pids" || fail "no gateway pids"
}
stop_gateways() {
    [ -n "$GW_PID" ] || return 0
    kill -TERM "$GW_PID" 2>/dev/null
    wait "$GW_PID" 2>/dev/null
    GW_PID=""
}
trap 'stop_gateways; it_cleanup' EXIT

start_gateways
url_a=iscsi://127.0.0.1:$PORT_A/$iqn/0
url_b=iscsi://127.0.0.1:$PORT_B/$iqn/0
log=$WORK/testcu-mpio.log
note "[$mode] iscsi-test-cu -d -t ALL.MultipathIO $url_a $url_b"
timeout 600 iscsi-test-cu -d -t ALL.MultipathIO "$url_a" "$url_b" >"$log" 2>&1
rc=$?
grep -E "^ +Test: " "$log"
# MultipathIO.Reset sends LOGICAL UNIT RESET through each path in turn and wants a unit
# attention on every path afterwards: SAM-5 §6.3.3 gives the UA to every I_T nexus of the
# logical unit, and the gateways are target ports of one SCSI target device (one LU
# designator, a target port group each). On rbd the resetting gateway notifies the others on
# the image's shared object and answers the TMF once they raised the UA. On a shared file
# (testing only) the daemons have no channel between them: Reset fails there.
must=(Simple CompareAndWrite CompareAndWriteAsync)
[ "$mode" = rbd ] && must+=(Reset)
for t in "${must[@]}"; do
    grep -Eq "^ +Test: $t \.\.\.passed" "$log" ||
        { tail -n 40 "$log" >&2; fail "MultipathIO.$t did not pass (iscsi-test-cu rc $rc)"; }
done
grep -Eq "^ +Test: Reset \.\.\.(passed|FAILED)" "$log" || fail "MultipathIO.Reset did not run"
kill -0 "$PID_A" 2>/dev/null && kill -0 "$PID_B" 2>/dev/null || fail "a gateway died in MultipathIO"

note "[$mode] linerate-bench --verify through A (LUN 0) and B (LUN 2) at once; A killed -9"
"$BENCH" --verify --sizes 4k --rw randwrite,randread --qd 16 --seconds 3 \
    "iscsi://127.0.0.1:$PORT_A/$iqn/0" >"$WORK/bench-a.out" 2>&1 &
bench_a=$!
"$BENCH" --verify --sizes 4k --rw randwrite,randread --qd 16 --seconds 3 \
    "iscsi://127.0.0.1:$PORT_B/$iqn/2" >"$WORK/bench-b.out" 2>&1 &
bench_b=$!
sleep 2
kill -KILL "$PID_A"
wait "$bench_b"
rc_b=$?
wait "$bench_a"
rc_a=$?
[ "$rc_b" -eq 0 ] || { cat "$WORK/bench-b.out" >&2; fail "bench through the surviving gateway exited $rc_b"; }
grep -q "verify passed" "$WORK/bench-b.out" || { cat "$WORK/bench-b.out" >&2; fail "no verify through B"; }
grep "verify passed" "$WORK/bench-b.out"
[ "$rc_a" -ne 0 ] || { cat "$WORK/bench-a.out" >&2; fail "bench through the killed gateway passed"; }
echo "bench through the killed gateway A exited $rc_a (expected: its gateway is gone)"
kill -0 "$PID_B" 2>/dev/null || fail "gateway B died with A"
stop_gateways
echo "PASS [$mode]"
