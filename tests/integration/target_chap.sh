#!/bin/bash
# CHAP with real initiators (issue 11): the secrets file refused at start when group- or
# world-accessible, not ours, short or missing a user (exit 2, the file named, no secret
# printed); then a config with a one-way target, a mutual target, a CHAP target with an
# allow-list, an open target, and discovery CHAP (mutual) and, for each of iscsi-inq,
# iscsi-ls, qemu-img and linerate-bench: success, wrong secret, wrong user, missing mutual.
# Discovery lists only what the asker may log in to. No secret ever reaches the log.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-inq iscsi-ls qemu-img
BENCH=$(dirname "$LT")/linerate-bench
[ -x "$BENCH" ] || fail "$BENCH is not built"

A=iqn.2026-11.org.linerate:chap-a # one-way, user alice
B=iqn.2026-11.org.linerate:chap-b # mutual, user bob, answers as tgt-bob
C=iqn.2026-11.org.linerate:chap-c # one-way alice + allow-list
O=iqn.2026-11.org.linerate:open
FRIEND=iqn.2026-11.org.linerate:friend
S_ALICE=alice-secret-0123
S_BOB=bob-secret-456789
S_TGT=target-secret-bob-1
S_DISC=disco-secret1 # 13 bytes: accepted with a warning
SECRETS=("$S_ALICE" "$S_BOB" "$S_TGT" "$S_DISC")

sec=$WORK/chap-secrets
write_secrets() {
    {
        echo "# name secret"
        echo "alice $S_ALICE"
        echo "bob $S_BOB"
        echo "tgt-bob $S_TGT"
        echo "disco-t $S_DISC"
    } >"$sec"
    chmod 600 "$sec"
}
write_secrets

# expect_refused WORD ARGS...: exit 2, WORD in the message, no secret in it.
expect_refused() {
    local word=$1 rc s
    shift
    timeout 20 "$LT" "$@" >"$WORK/o" 2>"$WORK/e"
    rc=$?
    [ $rc -eq 2 ] || fail "'$*' exited $rc, not 2 ($(cat "$WORK/e"))"
    grep -qF -- "$word" "$WORK/e" || fail "'$*': message does not say '$word': $(cat "$WORK/e")"
    for s in "${SECRETS[@]}" short-secr; do
        grep -qF -- "$s" "$WORK/e" "$WORK/o" && fail "'$*' printed a secret"
    done
    return 0
}
cli=(--listen 127.0.0.1:1 --lun ram:1M --chap-user alice)

note "secrets file: refused unless private, ours, complete, secrets >= 12 bytes"
chmod 640 "$sec"
expect_refused "$sec" "${cli[@]}" --chap-secrets "$sec"
expect_refused "chmod 600" "${cli[@]}" --chap-secrets "$sec"
chmod 604 "$sec"
expect_refused "$sec" "${cli[@]}" --chap-secrets "$sec"
chmod 600 "$sec"
if [ "$(id -u)" -eq 0 ]; then
    chown 65534 "$sec"
    expect_refused "owned by uid 65534" "${cli[@]}" --chap-secrets "$sec"
    chown 0 "$sec"
fi
expect_refused "no secret for CHAP user carol" --listen 127.0.0.1:1 --lun ram:1M \
    --chap-user carol --chap-secrets "$sec"
expect_refused "cannot open" "${cli[@]}" --chap-secrets "$WORK/none"
expect_refused "no chap-secrets" "${cli[@]}"
echo "carol short-secr" >>"$sec" # 10 bytes
expect_refused "secret of user carol is 10 bytes" --listen 127.0.0.1:1 --lun ram:1M \
    --chap-user carol --chap-secrets "$sec"
write_secrets
echo "twin $S_ALICE" >>"$sec"
expect_refused "same secret" "${cli[@]}" --chap-mutual-user twin --chap-secrets "$sec"
write_secrets
expect_refused "--config cannot be combined" --config /dev/null --chap-user alice
printf 'chap-user = alice\n' >"$WORK/bad.conf"
expect_refused "$WORK/bad.conf:1: 'chap-user' belongs in a [target IQN] section" \
    --config "$WORK/bad.conf"
printf 'chap-algorithms = sha1\n' >"$WORK/bad.conf"
expect_refused "$WORK/bad.conf:1: bad value 'sha1' for chap-algorithms" --config "$WORK/bad.conf"

note "start: one-way, mutual, allow-list + CHAP, open; discovery CHAP with mutual"
cat >"$WORK/chap.conf" <<EOF
threads = 2
portal = 127.0.0.1:@PORT@
chap-secrets = $sec
discovery-chap-user = alice
discovery-chap-mutual-user = disco-t
[target $A]
lun = ram:16M
chap-user = alice
[target $B]
lun = ram:16M
chap-user = bob
chap-mutual-user = tgt-bob
[target $C]
lun = ram:16M
chap-user = alice
allow = $FRIEND
[target $O]
lun = ram:16M
EOF
start_target_config "$WORK/chap.conf"
grep -q "secret of user disco-t is 13 bytes; 16 or more are recommended" "$WORK/target.log" ||
    fail "no warning about the 13-byte secret"
h=127.0.0.1:$PORT
mutual="target_user=tgt-bob&target_password=$S_TGT"


note "iscsi-inq: one-way"
ok "one-way" iscsi-inq "iscsi://alice%$S_ALICE@$h/$A/0"
grep -q "^Vendor:LINERATE" "$WORK/cmd.out" || { show_cmd_out; fail "no INQUIRY data"; }
no "wrong secret" iscsi-inq "iscsi://alice%wrong-secret-000@$h/$A/0"
grep -q "Authentication failure" "$WORK/cmd.out" || { show_cmd_out; fail "not 0201h"; }
no "wrong user" iscsi-inq "iscsi://bob%$S_ALICE@$h/$A/0"
no "no CHAP" iscsi-inq "iscsi://$h/$A/0"
ok "a target without CHAP, credentials offered" iscsi-inq "iscsi://alice%$S_ALICE@$h/$O/0"

note "iscsi-inq: mutual (libiscsi's target_user/target_password)"
ok "mutual" iscsi-inq "iscsi://bob%$S_BOB@$h/$B/0?$mutual"
no "mutual, wrong target secret" \
    iscsi-inq "iscsi://bob%$S_BOB@$h/$B/0?target_user=tgt-bob&target_password=wrong-secret-000"
grep -q "Invalid CHAP_R" "$WORK/cmd.out" || { show_cmd_out; fail "libiscsi did not refuse the target's CHAP_R"; }
no "mutual missing (the target requires it)" iscsi-inq "iscsi://bob%$S_BOB@$h/$B/0"
no "mutual asked of a one-way target" \
    iscsi-inq "iscsi://alice%$S_ALICE@$h/$A/0?target_user=tgt-bob&target_password=$S_TGT"
ok "mutual through libiscsi's environment" env LIBISCSI_CHAP_TARGET_USERNAME=tgt-bob \
    LIBISCSI_CHAP_TARGET_PASSWORD="$S_TGT" iscsi-inq "iscsi://bob%$S_BOB@$h/$B/0"

note "allow-list and CHAP: both must pass"
ok "allowed + right secret" iscsi-inq -i "$FRIEND" "iscsi://alice%$S_ALICE@$h/$C/0"
no "not allowed + right secret" iscsi-inq "iscsi://alice%$S_ALICE@$h/$C/0"
no "allowed + wrong secret" iscsi-inq -i "$FRIEND" "iscsi://alice%wrong-secret-000@$h/$C/0"

note "iscsi-ls: discovery CHAP (mutual) lists only what the asker may log in to"
disc="target_user=disco-t&target_password=$S_DISC"
ok "discovery" iscsi-ls "iscsi://alice%$S_ALICE@$h?$disc"
grep -q "Target:$A Portal:$h,1" "$WORK/cmd.out" || { show_cmd_out; fail "$A not listed"; }
grep -q "Target:$O Portal:$h,1" "$WORK/cmd.out" || { show_cmd_out; fail "$O not listed"; }
grep -q "Target:$B " "$WORK/cmd.out" && { show_cmd_out; fail "$B (user bob) listed to alice"; }
grep -q "Target:$C " "$WORK/cmd.out" && { show_cmd_out; fail "$C listed to a stranger"; }
ok "discovery, allowed initiator" iscsi-ls -i "$FRIEND" "iscsi://alice%$S_ALICE@$h?$disc"
grep -q "Target:$C Portal:$h,1" "$WORK/cmd.out" || { show_cmd_out; fail "$C not listed to $FRIEND"; }
no "discovery without CHAP" iscsi-ls "iscsi://$h"
no "discovery, wrong secret" iscsi-ls "iscsi://alice%wrong-secret-000@$h?$disc"
no "discovery, mutual missing" iscsi-ls "iscsi://alice%$S_ALICE@$h"

note "qemu-img (libiscsi in QEMU): one-way"
ok "qemu-img info" qemu-img info "iscsi://alice%$S_ALICE@$h/$A/0"
grep -q "virtual size: 16 MiB" "$WORK/cmd.out" || { show_cmd_out; fail "qemu-img: size"; }
no "qemu-img, wrong secret" qemu-img info "iscsi://alice%wrong-secret-000@$h/$A/0"

note "linerate-bench: one-way and mutual"
bopt=(--sizes 4k --rw read,write --seconds 0.5 --format csv --verify)
ok "bench one-way (URL)" "$BENCH" "${bopt[@]}" "iscsi://alice%$S_ALICE@$h/$A/0"
grep -q "verify passed" "$WORK/cmd.out" || { show_cmd_out; fail "bench one-way: no verify"; }
ok "bench mutual (--chap-secrets), 2-connection MC/S" "$BENCH" "${bopt[@]}" --connections 2 \
    --chap-secrets "$sec" --chap-user bob --chap-mutual-user tgt-bob "iscsi://$h/$B/0"
grep -q "verify passed" "$WORK/cmd.out" || { show_cmd_out; fail "bench mutual: no verify"; }
grep -q "^4096,read,off,2," "$WORK/cmd.out" || { show_cmd_out; fail "bench mutual: not 2 connections"; }
ok "bench mutual (environment)" env LINERATE_CHAP_USER=bob LINERATE_CHAP_SECRET="$S_BOB" \
    LINERATE_CHAP_MUTUAL_USER=tgt-bob LINERATE_CHAP_MUTUAL_SECRET="$S_TGT" \
    "$BENCH" "${bopt[@]}" "iscsi://$h/$B/0"
no "bench wrong secret" "$BENCH" "${bopt[@]}" "iscsi://alice%wrong-secret-000@$h/$A/0"
grep -q "status class 2 detail 1" "$WORK/cmd.out" || { show_cmd_out; fail "bench: not 0201h"; }
no "bench wrong user" "$BENCH" "${bopt[@]}" "iscsi://bob%$S_ALICE@$h/$A/0"
no "bench wrong mutual secret" env LINERATE_CHAP_MUTUAL_SECRET=wrong-secret-000 \
    "$BENCH" "${bopt[@]}" --chap-mutual-user tgt-bob "iscsi://bob%$S_BOB@$h/$B/0"
grep -q "wrong mutual secret" "$WORK/cmd.out" || { show_cmd_out; fail "bench: target not checked"; }
no "bench mutual missing" "$BENCH" "${bopt[@]}" "iscsi://bob%$S_BOB@$h/$B/0"
no "bench mutual asked of a one-way target" env LINERATE_CHAP_MUTUAL_SECRET="$S_TGT" \
    "$BENCH" "${bopt[@]}" --chap-mutual-user tgt-bob "iscsi://alice%$S_ALICE@$h/$A/0"
for s in "${SECRETS[@]}" wrong-secret-000; do
    grep -qF -- "$s" "$WORK/cmd.out" && { show_cmd_out; fail "bench printed a secret"; }
done

if command -v iscsi-test-cu >/dev/null 2>&1; then
    # libiscsi's suite has no CHAP tests of its own; its iSCSI tests (CmdSN, DataSN, TMF) log
    # in again and again, here every time through mutual CHAP. (iSCSIResiduals is left to
    # target-testcu: its conformance is not what this test is about.)
    note "iscsi-test-cu through mutual CHAP: iSCSI CmdSN/DataSN/TMF, Inquiry, Read10, Write10, Reserve6"
    ok "iscsi-test-cu" iscsi-test-cu \
        -t iSCSI.iSCSIcmdsn,iSCSI.iSCSIdatasn,iSCSI.iSCSITMF,SCSI.Inquiry,SCSI.Read10,SCSI.Write10,SCSI.Reserve6 \
        "iscsi://bob%$S_BOB@$h/$B/0?$mutual"
    grep -Eq "tests +[0-9]+ +[0-9]+ +[0-9]+ +0 " "$WORK/cmd.out" || { show_cmd_out; fail "iscsi-test-cu: failures"; }
    grep -E "^ +tests " "$WORK/cmd.out"
fi

stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
note "the log: refusals at warn with address, initiator and target; no secret"
grep -q "WARN .*status 0x0201.*initiator iqn.*target $A: wrong CHAP_R.*from 127.0.0.1" \
    "$WORK/target.log" || fail "no warn line for a wrong secret"
for s in "${SECRETS[@]}" wrong-secret-000; do
    grep -qF -- "$s" "$WORK/target.log" && fail "a secret is in the log"
done
note "back-off within the login deadline: login-timeout = 4 caps the third answer at 2.5 s"
cat >"$WORK/short.conf" <<EOF
portal = 127.0.0.1:@PORT@
login-timeout = 4
chap-secrets = $sec
[target $A]
lun = ram:8M
chap-user = alice
EOF
start_target_config "$WORK/short.conf"
for i in 1 2 3; do
    t0=$(date +%s%N)
    no "wrong secret #$i" iscsi-inq "iscsi://alice%wrong-secret-000@127.0.0.1:$PORT/$A/0"
    t1=$(date +%s%N)
    grep -q "Authentication failure" "$WORK/cmd.out" || { show_cmd_out; fail "#$i: no 0201h answer"; }
done
ms=$(((t1 - t0) / 1000000))
echo "third failure answered after $ms ms"
[ "$ms" -ge 2000 ] && [ "$ms" -lt 3500 ] || fail "third failure answered after $ms ms, want ~2500"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
echo PASS
