#!/bin/bash
# libiscsi's reservation suites (iscsi-test-cu SCSI.Prin*, SCSI.Prout*, SCSI.Reserve6) across
# two initiator entries of one target (issue 29 item 3): host-a (-i) and host-b (-I) each have a
# boot disk of their own as LUN 0 and see the shared LUN as 5. iscsi-test-cu logs its second
# initiator in with the very URL of the first, so both address the shared LUN by one number:
# numbers that differ per host cannot be run through it (test_host_map.c and
# target_hosts_live.py's raw initiators cover those). Every test of those suites that passes in
# target_testcu.sh's ram pass (testcu-expected-pass.txt) must pass here.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-test-cu awk
P=iqn.2026-11.org.linerate
A=$P:host-a B=$P:host-b SHARED=$P:shared
suites=(PrinReadKeys PrinServiceactionRange PrinReportCapabilities ProutRegister ProutReserve
    ProutClear ProutPreempt Reserve6)
# the shared LUN as the hosts know it, and the target LUN host-b's number 5 reaches (0: the
# shared one; TESTCU_PR_B_LUN=1, a LUN host-a does not know as 5, must make the suites fail)
b_lun=${TESTCU_PR_B_LUN:-0}
cat >"$WORK/pr.conf" <<CONF
threads = 2
[target $SHARED]
portal = 127.0.0.1:@PORT@
target-cold-reset = yes
lun 0 = ram:64M
lun 1 = ram:16M
lun 2 = ram:16M
[host $A]
map = 0 1
map = 5 0
[host $B]
map = 0 2
map = 5 $b_lun
CONF
start_target_config "$WORK/pr.conf"
log=$WORK/testcu-pr.log
: >"$log"
for s in "${suites[@]}"; do
    timeout 300 iscsi-test-cu -d -i "$A" -I "$B" -t "SCSI.$s" \
        "iscsi://127.0.0.1:$PORT/$SHARED/5" >>"$log" 2>&1
done
awk -f "$IT_DIR/testcu-summary.awk" "$log" >"$WORK/summary"
kill -0 "$LT_PID" 2>/dev/null || fail "linerate-target died during iscsi-test-cu"
re=$(IFS='|'; echo "^(${suites[*]})\.")
grep -E "$re" "$IT_DIR/testcu-expected-pass.txt" | sed 's/[[:space:]]*$//' | sort -u >"$WORK/want"
awk '$1 == "passed" { print $2 }' "$WORK/summary" | sort -u >"$WORK/passed"
comm -23 "$WORK/want" "$WORK/passed" >"$WORK/regressed"
echo "iscsi-test-cu reservation suites, $A and $B on LUN 5: tests=$(wc -l <"$WORK/summary")" \
    "passed=$(wc -l <"$WORK/passed") expected=$(wc -l <"$WORK/want")"
[ -s "$WORK/want" ] || fail "no reservation tests in testcu-expected-pass.txt"
testcu_verdict "reservations across two host entries"
