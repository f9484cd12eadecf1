#!/bin/bash
# libiscsi's conformance suite against linerate-target (iqn.2026-11.org.linerate:default), one
# pass per invocation; the argument picks the LUN and the tests:
#   ram   (default) iscsi-test-cu -d -S -t ALL through two portals (MultipathIO runs) against
#         --lun ram:1G,removable (so PreventAllow, StartStopUnit and NoMedia really run);
#         expected list testcu-expected-pass.txt
#   file  the same against --lun file:$WORK/lun.img,size=1G,removable (io_uring file store,
#         holes punched by UNMAP); testcu-expected-pass-file.txt
#   ro    -t ALL.ReadOnly against --lun ram:64M,ro (ReadOnly.ReadOnlySBC needs a write-protected
#         LUN: it is skipped otherwise); testcu-expected-pass-ro.txt
# Every test listed in the pass's expected list must pass (a regression fails the build); tests
# that pass and are not listed are reported. The verbose log is kept in $TESTCU_LOG (default:
# the build directory), with the mode in its name for file and ro.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-test-cu awk

mode=${1:-ram}
iqn=iqn.2026-11.org.linerate:default
log=${TESTCU_LOG:-$WORK/testcu.log}
case $mode in
ram)
    expected=$IT_DIR/testcu-expected-pass.txt
    lun=ram:1G,removable
    tests=ALL
    ;;
file)
    expected=$IT_DIR/testcu-expected-pass-file.txt
    lun=file:$WORK/lun.img,size=1G,removable
    tests=ALL
    log=${log%.log}-file.log
    ;;
ro)
    expected=$IT_DIR/testcu-expected-pass-ro.txt
    lun=ram:64M,ro
    tests=ALL.ReadOnly
    log=${log%.log}-ro.log
    ;;
*) fail "usage: $0 [ram|file|ro]" ;;
esac
[ -f "$expected" ] || fail "$expected is missing"

# Two portals of one target, so that the MultipathIO tests run; -S allows SANITIZE.
SECOND_PORTAL=1 start_target --threads 2 --lun "$lun"
url=iscsi://127.0.0.1:$PORT/$iqn/0
url2=iscsi://127.0.0.2:$PORT/$iqn/0
urls=("$url" "$url2")
[ "$mode" = ro ] && urls=("$url")
note "[$mode] --lun $lun: iscsi-test-cu -d -S -t $tests ${urls[*]} (log: $log)"
timeout 1500 iscsi-test-cu -d -S -t "$tests" "${urls[@]}" >"$log" 2>&1
rc=$?
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

stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC after iscsi-test-cu, not 0"
if [ -s "$WORK/regressed" ]; then
    echo "expected to pass but did not ($(wc -l <"$WORK/regressed")):" >&2
    sed 's/^/  /' "$WORK/regressed" >&2
    fail "iscsi-test-cu regressions"
fi
echo PASS
