#!/bin/bash
# libiscsi's conformance suite against linerate-target (iqn.2026-11.org.linerate:default), one
# pass per invocation; the argument picks the LUN and the tests:
#   ram   (default) iscsi-test-cu -d -S -t ALL through two portals (MultipathIO runs) against
#         --lun ram:1G,removable,pbs=4k (so PreventAllow, StartStopUnit and NoMedia really run,
#         and the tests that need LOGICAL BLOCKS PER PHYSICAL BLOCK > 1 too);
#         expected list testcu-expected-pass.txt
#   file  the same against --lun file:$WORK/lun.img,size=1G,removable,pbs=4k (io_uring file
#         store, holes punched by UNMAP); testcu-expected-pass-file.txt
#   rbd   the same against --lun rbd:rbd/testcu,size=1G,removable,pbs=4k on a single-node Ceph
#         cluster started for the pass (scripts/ceph-mini; skipped without Ceph or librbd);
#         testcu-expected-pass-rbd.txt
#   ro    -t ALL.ReadOnly against --lun ram:64M,ro (ReadOnly.ReadOnlySBC needs a write-protected
#         LUN: it is skipped otherwise); testcu-expected-pass-ro.txt
#   single  the two tests that cannot pass in the two-portal run, each for a reason in the
#         test suite (see testcu-expected-pass.txt), through one portal:
#         -t SCSI.Sanitize (Sanitize.Reset: the run through two portals leaves the RESERVE(6)
#         of Sanitize.Reservations in place on the second path, so its SANITIZE meets a
#         RESERVATION CONFLICT) and -t SCSI.GetLBAStatus (UnmapSingle wants a descriptor that
#         does not start at the STARTING LBA when there are several blocks per physical block),
#         against --lun ram:256M,removable; testcu-expected-pass-single.txt. Sanitize.Reset
#         sleeps 60 s without answering NOP-Ins, so this target waits 120 s for an answer.
#         Its SANITIZE writes at 32 MiB/s (sanitize-rate), slow enough that Sanitize.Reset finds
#         the overwrite still running after its resets and reconnect (~4 s), as on a real disk.
# The suite's PreventAllow.ColdReset, Reserve6.TargetColdReset and Sanitize.Reset send TARGET
# COLD RESET, refused by default (target-cold-reset): the target under test allows it (libiscsi
# counts a refused reset as a skipped test, which would hide what the reset must do).
# Every test listed in the pass's expected list must pass (a regression fails the build); tests
# that pass and are not listed are reported. The verbose log is kept in $TESTCU_LOG (default:
# the build directory), with the mode in its name for file, ro and single.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-test-cu awk

mode=${1:-ram}
iqn=iqn.2026-11.org.linerate:default
log=${TESTCU_LOG:-$WORK/testcu.log}
case $mode in
ram)
    expected=$IT_DIR/testcu-expected-pass.txt
    lun=ram:1G,removable,pbs=4k
    tests=(ALL)
    ;;
file)
    expected=$IT_DIR/testcu-expected-pass-file.txt
    lun=file:$WORK/lun.img,size=1G,removable,pbs=4k
    tests=(ALL)
    log=${log%.log}-file.log
    ;;
rbd)
    expected=$IT_DIR/testcu-expected-pass-rbd.txt
    lun=rbd:rbd/testcu,size=1G,removable,pbs=4k
    tests=(ALL)
    log=${log%.log}-rbd.log
    ;;
ro)
    expected=$IT_DIR/testcu-expected-pass-ro.txt
    lun=ram:64M,ro
    tests=(ALL.ReadOnly)
    log=${log%.log}-ro.log
    ;;
single)
    expected=$IT_DIR/testcu-expected-pass-single.txt
    lun=ram:256M,removable,sanitize-rate=32M
    tests=(SCSI.Sanitize SCSI.GetLBAStatus)
    log=${log%.log}-single.log
    ;;
*) fail "usage: $0 [ram|file|rbd|ro|single]" ;;
esac
[ -f "$expected" ] || fail "$expected is missing"
[ "$mode" = rbd ] && start_ceph

if [ "$mode" = single ]; then
    cat >"$WORK/single.conf" <<EOF
threads = 2
nop-timeout = 120
[target $iqn]
portal = 127.0.0.1:@PORT@
lun = $lun
target-cold-reset = yes
EOF
    start_target_config "$WORK/single.conf"
else
    # Two portals of one target, so that the MultipathIO tests run; -S allows SANITIZE.
    SECOND_PORTAL=1 start_target --threads 2 --lun "$lun" --target-cold-reset yes
fi
url=iscsi://127.0.0.1:$PORT/$iqn/0
url2=iscsi://127.0.0.2:$PORT/$iqn/0
urls=("$url" "$url2")
if [ "$mode" = ro ] || [ "$mode" = single ]; then urls=("$url"); fi
: >"$log"
rc=0
for t in "${tests[@]}"; do
    note "[$mode] --lun $lun: iscsi-test-cu -d -S -t $t ${urls[*]} (log: $log)"
    timeout 1500 iscsi-test-cu -d -S -t "$t" "${urls[@]}" >>"$log" 2>&1 || rc=$?
done
[ $rc -eq 124 ] && echo "iscsi-test-cu timed out; tests without a verdict count as failed" >&2
awk -f "$IT_DIR/testcu-summary.awk" "$log" >"$WORK/summary"
kill -0 "$LT_PID" 2>/dev/null || fail "linerate-target died during iscsi-test-cu"

total=$(wc -l <"$WORK/summary")
declare -A count=([passed]=0 [skipped]=0 [failed]=0)
while read -r st _; do count[$st]=$((${count[$st]:-0} + 1)); done <"$WORK/summary"
echo "iscsi-test-cu [$mode]: tests=$total passed=${count[passed]:-0} skipped=${count[skipped]:-0} failed=${count[failed]:-0}"
[ "$total" -gt 0 ] || fail "no test results in $log (iscsi-test-cu exited $rc): $(tail -n 5 "$log")"

grep -v '^[[:space:]]*\(#\|$\)' "$expected" | sed 's/[[:space:]]*$//' | sort -u >"$WORK/want"
awk '$1 == "passed" { print $2 }' "$WORK/summary" | sort -u >"$WORK/passed"
comm -23 "$WORK/want" "$WORK/passed" >"$WORK/regressed"
comm -13 "$WORK/want" "$WORK/passed" >"$WORK/new"
if [ -s "$WORK/new" ]; then
    echo "passing but not in $(basename "$expected") ($(wc -l <"$WORK/new")): add them:"
    sed 's/^/  /' "$WORK/new"
fi
echo "skipped:"
awk '$1 == "skipped" { print "  " $2 }' "$WORK/summary"
echo "failed:"
awk '$1 == "failed" { print "  " $2 }' "$WORK/summary"

testcu_verdict "iscsi-test-cu regressions"
