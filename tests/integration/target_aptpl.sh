#!/bin/bash
# A persistent reservation made with APTPL=1 outlives the daemon (SPC-4 §5.13.5): initiator A
# registers a key with APTPL=1 and reserves Write Exclusive through a raw initiator
# (target_aptpl.py, on hostile.py's), the daemon is SIGTERM'd (exit 0) and started again with
# the same --state-dir, and then READ KEYS / READ RESERVATION still show A's key and
# reservation, initiator B's WRITE is RESERVATION CONFLICT and its READ GOOD. Without APTPL the
# same steps leave nothing after the restart. And with APTPL=1 in force and the state file out
# of reach (the state directory replaced by a regular file: root cannot write below it either),
# a PERSISTENT RESERVE OUT fails HARDWARE ERROR 44h/00h and changes nothing; after kill -9 and
# a restart with the directory back, the reservation is what the initiators were told.
. "$(dirname "$0")/lt_lib.sh"
need python3

iqn=iqn.2026-11.org.linerate:default
step() { python3 "$IT_DIR/target_aptpl.py" "$PORT" "$iqn" "$@" >"$WORK/step.out" 2>&1; }
step_ok() {
    step "$@" || { cat "$WORK/step.out" >&2; fail "target_aptpl.py $*"; }
    sed 's/^/  /' "$WORK/step.out"
}
stop_ok() {
    stop_target
    [ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
}

for aptpl in 1 0; do
    state=$WORK/state$aptpl
    args=(--lun "file:$WORK/lun$aptpl.img,size=64M" --state-dir "$state" --threads 1)
    note "APTPL=$aptpl: register and reserve Write Exclusive, then restart"
    start_target "${args[@]}"
    step_ok reserve "$aptpl"
    files=$(find "$state" -name '*.pr' 2>/dev/null | wc -l)
    if [ "$aptpl" = 1 ]; then
        [ "$files" -eq 1 ] || fail "APTPL=1: expected one state file under $state, found $files"
    else
        [ "$files" -eq 0 ] || fail "APTPL=0: state file written under $state"
    fi
    stop_ok
    start_target "${args[@]}"
    if [ "$aptpl" = 1 ]; then
        note "APTPL=1: the key and the reservation are back"
        step_ok check-kept
    else
        note "APTPL=0: the restart forgot them"
        step_ok check-forgotten
    fi
    stop_ok
done

state=$WORK/state-unsaved
args=(--lun "file:$WORK/lun-unsaved.img,size=64M" --state-dir "$state" --threads 1)
note "APTPL=1, then the state file out of reach: changes refused, then kill -9 and restart"
start_target "${args[@]}"
step_ok reserve 1
mv "$state" "$state.moved" && : >"$state"
step_ok refused
kill -KILL "$LT_PID"
wait "$LT_PID" 2>/dev/null
LT_PID=""
rm "$state" && mv "$state.moved" "$state"
start_target "${args[@]}"
step_ok check-kept
stop_ok
echo PASS
