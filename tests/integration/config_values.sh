#!/bin/bash
# Values the daemon would have taken and then used otherwise, without a word: a key given
# twice in a section (the last one won), an option given twice, "1Gb" (gigabits) read as
# 1 GiB. Each is refused, naming both places or the value. Thin RAM LUNs larger than the
# machine's memory are legal but unwise: --check, the start and linerate-ctl add lun warn,
# with the numbers.
. "$(dirname "$0")/lt_lib.sh"

# refused WORD ARGS...: exit 2 and a message containing WORD.
refused() {
    local word=$1 rc
    shift
    timeout 20 "$LT" --check "$@" >"$WORK/o" 2>"$WORK/e"
    rc=$?
    [ $rc -eq 2 ] || fail "'$*' exited $rc, not 2 ($(cat "$WORK/o" "$WORK/e"))"
    grep -qF -- "$word" "$WORK/e" || fail "'$*': message does not say '$word': $(cat "$WORK/e")"
}

note "a key given twice in one section"
printf 'nop-interval = 10\nlog-level = info\nnop-interval = 20\n[target iqn.2026-01.org.x:a]\nportal = 127.0.0.1:3260\nlun = ram:1M\n' \
    >"$WORK/global.conf"
refused "global.conf:3: nop-interval is given twice in this section (first at line 1)" \
    --config "$WORK/global.conf"
printf '[target iqn.2026-01.org.x:a]\nportal = 127.0.0.1:3260\nlun = ram:1M\nmax-burst-length = 1M\nmax-burst-length = 512k\n' \
    >"$WORK/target.conf"
refused "target.conf:5: max-burst-length is given twice" --config "$WORK/target.conf"
# a session key in the global section and again in a target is a default and its override
printf 'max-burst-length = 1M\n[target iqn.2026-01.org.x:a]\nlun = ram:1M\nmax-burst-length = 512k\nportal = 127.0.0.1:3261\nportal = 127.0.0.1:3262\n' \
    >"$WORK/ok.conf"
"$LT" --check --config "$WORK/ok.conf" >"$WORK/o" 2>&1 || fail "ok.conf refused: $(cat "$WORK/o")"

note "a failover-timeout shorter than the stall rule's 2 heartbeats + 1 s"
printf '[target iqn.2026-01.org.x:a]\nportal = 127.0.0.1:3260\nlun = ram:1M\nalua-mode = failover\nfailover-heartbeat = 2s\nfailover-timeout = 4s\n' \
    >"$WORK/fo.conf"
refused "fo.conf:6: target iqn.2026-01.org.x:a: failover-timeout 4000ms is below" --config "$WORK/fo.conf"
sed -i 's/^failover-timeout = 4s/failover-timeout = 5s/' "$WORK/fo.conf"
"$LT" --check --config "$WORK/fo.conf" >"$WORK/o" 2>&1 || fail "fo.conf refused: $(cat "$WORK/o")"

note "an option given twice"
refused "--threads given twice" --threads 2 --threads 3
refused "--log-level given twice" --log-level info --log-level debug

note "1Gb is bits, not bytes"
refused "bad size '1Gb'" --lun ram:1Gb
printf '[target iqn.2026-01.org.x:a]\nportal = 127.0.0.1:3260\nlun = null:4Gb\n' >"$WORK/bits.conf"
refused "bits.conf:3: null: bad size '4Gb'" --config "$WORK/bits.conf"
"$LT" --check --lun ram:1GiB --lun ram:1GB --lun null:1G >"$WORK/o" 2>&1 ||
    fail "1GiB/1GB refused: $(cat "$WORK/o")"

note "thin RAM beyond memory: a warning, not a refusal"
"$LT" --check --lun ram:1000T >"$WORK/o" 2>"$WORK/e" || fail "ram:1000T refused: $(cat "$WORK/e")"
grep -q "thin RAM LUN (1024000.0 GiB in all) exceeds this machine's memory" "$WORK/e" ||
    fail "no warning for ram:1000T: $(cat "$WORK/e")"
printf '[target iqn.2026-01.org.x:a]\nportal = 127.0.0.1:3260\nlun = ram:600T\nlun = ram:600T\n' >"$WORK/thin.conf"
"$LT" --check --config "$WORK/thin.conf" >"$WORK/o" 2>"$WORK/e" || fail "thin.conf refused"
grep -q "thin RAM LUNs (1228800.0 GiB in all) exceed" "$WORK/e" || fail "no warning: $(cat "$WORK/e")"
"$LT" --check --lun ram:1M >"$WORK/o" 2>"$WORK/e" || fail "ram:1M refused"
! grep -q "thin RAM" "$WORK/e" || fail "a warning for ram:1M: $(cat "$WORK/e")"

note "the same at start, and for a LUN linerate-ctl adds"
ctl_setup
start_target --ctl-socket "$SOCK" --lun ram:1M
! grep -q "thin RAM" "$WORK/target.log" || fail "a warning for ram:1M at start"
# twice the machine's memory: a store that opens (its allocation map is small), never written
big=$(($(awk '/^MemTotal:/ { print int($2 / 1048576) + 1 }' /proc/meminfo) * 2))G
ctl_ok add lun "$T" "ram:$big"
grep -q "thin RAM LUNs (.* GiB in all) exceed this machine's memory" "$WORK/target.log" ||
    fail "no warning for a live ram:$big: $(tail -n 5 "$WORK/target.log")"
stop_target

note "save (no --config: every key from the table's writer) writes what loads back"
start_target --ctl-socket "$SOCK" --lun ram:1M --max-task-buffers 64M --poll-us 20 \
    --target-cold-reset yes --error-recovery-level 1 --chap-algorithms sha256,md5
ctl_ok save "$WORK/saved.conf"
for want in "max-task-buffers = 67108864" "poll-us = 20" "target-cold-reset = yes" \
    "error-recovery-level = 1" "chap-algorithms = sha256,md5"; do
    grep -qxF "$want" "$WORK/saved.conf" || fail "saved file lacks '$want': $(cat "$WORK/saved.conf")"
done
"$LT" --check --config "$WORK/saved.conf" >"$WORK/o" 2>&1 || fail "saved file refused: $(cat "$WORK/o")"
stop_target
echo "ok"
