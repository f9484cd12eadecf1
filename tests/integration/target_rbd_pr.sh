#!/bin/bash
# Persistent reservations that hold across gateways (issue 13): two linerate daemons export one
# rbd image of scripts/ceph-mini's cluster under the same target name, each on its own port;
# target_rbd_pr.py drives initiators through both (reservation through A against writes
# through B, RELEASE, PREEMPT with its unit attention on the other gateway, CLEAR, SPC-2
# RESERVE(6), concurrent REGISTERs through both gateways, one ISID through both: two I_T
# nexuses, gateway B being target port 2); libiscsi's reservation suites run
# with one URL per gateway (their second initiator goes through B). Then gateway B is
# restarted: it reads the state back from the cluster. Skipped (77) without Ceph or librbd; never a mock.
. "$(dirname "$0")/lt_lib.sh"
need python3
start_ceph

iqn=iqn.2026-12.org.linerate:it-rbd-pr
lun=rbd:rbd/pr-disk,size=64M

B_PID=""
B_RC=""
stop_b() {
    if [ -n "$B_PID" ]; then
        kill -TERM "$B_PID" 2>/dev/null
        wait "$B_PID" 2>/dev/null
        B_RC=$?
        B_PID=""
    fi
}
stop_b_ok() {
    stop_b
    [ "$B_RC" = 0 ] || fail "gateway B exited $B_RC, not 0: $(tail -n 20 "$WORK/b.log")"
}
trap 'stop_b; it_cleanup' EXIT

# start_b: gateway B, the same target and image on another free port (PORT_B), target port 2
# (gateway A is target port 1): one ISID through both is two I_T nexuses.
start_b() {
    local try i
    for ((try = 0; try < 30; try++)); do
        PORT_B=$((20000 + RANDOM % 10000))
        [ "$PORT_B" = "$PORT" ] && continue
        port_busy "$PORT_B" && continue
        : >"$WORK/b.out"
        "$LT" --listen "127.0.0.1:$PORT_B" --target-name "$iqn" --threads 2 --lun "$lun" \
            --alua-group 2 --alua-peer 1:active/optimized >"$WORK/b.out" 2>>"$WORK/b.log" &
        B_PID=$!
        for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
            grep -q '^iscsi://' "$WORK/b.out" 2>/dev/null && return 0
            kill -0 "$B_PID" 2>/dev/null || break
            sleep 0.1
        done
        wait "$B_PID"
        B_PID=""
        tail -n 3 "$WORK/b.log" | grep -q "in use" && continue
        fail "gateway B did not start: $(tail -n 5 "$WORK/b.log")"
    done
    fail "no free port for gateway B"
}

note "two gateways on rbd/pr-disk"
start_target --target-name "$iqn" --threads 2 --lun "$lun" --alua-peer 2:active/optimized
start_b
python3 "$IT_DIR/target_rbd_pr.py" "$PORT" "$PORT_B" "$iqn" >"$WORK/pr.out" 2>&1 ||
    { cat "$WORK/pr.out" >&2; echo "--- gateway B log:" >&2; tail -n 20 "$WORK/b.log" >&2; fail "target_rbd_pr.py"; }
sed 's/^/  /' "$WORK/pr.out"

# libiscsi's reservation tests take their second initiator from the second URL when given two
# (mp_sds[1]): with one URL per gateway every two-initiator test runs across gateways.
if command -v iscsi-test-cu >/dev/null 2>&1; then
    for suite in ProutRegister ProutReserve ProutClear ProutPreempt PrinReadKeys \
        PrinReportCapabilities PrinServiceactionRange Reserve6; do
        timeout 300 iscsi-test-cu -d -t "SCSI.$suite" "iscsi://127.0.0.1:$PORT/$iqn/0" \
            "iscsi://127.0.0.1:$PORT_B/$iqn/0" >"$WORK/tcu.out" 2>&1
        # the "tests" row of the run summary: Total Ran Passed Failed Inactive
        read -r total ran passed failed _ < <(awk '$1 == "tests" { print $2, $3, $4, $5, $6 }' \
            "$WORK/tcu.out")
        note "iscsi-test-cu SCSI.$suite through A and B: ${passed:-0}/${total:-0} passed"
        [ -n "${total:-}" ] && [ "$total" -gt 0 ] && [ "$passed" = "$total" ] && [ "$failed" = 0 ] ||
            { grep -E "Test:|FAILED|CU_ASSERT" "$WORK/tcu.out" | head -n 20 >&2; fail "iscsi-test-cu SCSI.$suite across gateways"; }
    done
else
    note "iscsi-test-cu is not installed: libiscsi's reservation tests across gateways not run"
fi

note "the state is in the cluster: rados -p rbd get pr-disk.linerate-pr"
rados -p rbd get pr-disk.linerate-pr "$WORK/obj" || fail "no reservation object in the pool"
head -n 1 "$WORK/obj" | grep -q "^linerate-pr 1" || fail "reservation object: $(cat "$WORK/obj")"

note "a key registered through A survives gateway B's restart (read back from the cluster)"
IT_DIR=$IT_DIR python3 - "$PORT" "$iqn" <<'PY' || fail "register through A"
import os, struct, sys
sys.path.insert(0, os.environ["IT_DIR"])
import hostile
hostile.TARGET = sys.argv[2]
s = hostile.Session(int(sys.argv[1]), name="iqn.2026-12.org.linerate:pr-keep").login()
s.scsi_retry_ua(b"\0" * 6)
param = struct.pack(">QQ4xB3x", 0, 0x5151515151515151, 0)
st, sense, _ = s.scsi(struct.pack(">BBBxxIB", 0x5F, 0, 0, len(param), 0), write_data=param, timeout=30)
sys.exit(0 if st == 0 else 1)
PY
stop_b_ok
start_b
IT_DIR=$IT_DIR python3 - "$PORT_B" "$iqn" <<'PY' || fail "READ KEYS through the restarted gateway B"
import os, struct, sys
sys.path.insert(0, os.environ["IT_DIR"])
import hostile
hostile.TARGET = sys.argv[2]
s = hostile.Session(int(sys.argv[1]), name="iqn.2026-12.org.linerate:pr-look").login()
s.scsi_retry_ua(b"\0" * 6)
st, sense, d = s.scsi(struct.pack(">BBxxxxxHB", 0x5E, 0, 256, 0), read_len=256, timeout=30)
n = struct.unpack(">I", d[4:8])[0] // 8
keys = [struct.unpack(">Q", d[8 + 8 * i:16 + 8 * i])[0] for i in range(n)]
print("  READ KEYS through B after its restart:", [hex(k) for k in keys])
sys.exit(0 if st == 0 and keys == [0x5151515151515151] else 1)
PY
stop_b_ok
stop_target
[ "$STOP_RC" -eq 0 ] || fail "gateway A exited $STOP_RC, not 0"
note "passed"
