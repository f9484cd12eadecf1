#!/usr/bin/env bash
# What a new admin trips on (issue 34), against a daemon started from a config file:
# - reload keeps what linerate-ctl added and the file never had (a LUN with data, a portal):
#   refused without --force, naming each and how to keep it; after `save` the same edit
#   reloads and the LUN's data is still there; --force drops; what the file itself had goes
#   without --force as before;
# - remove lun of a target's last LUN is refused without --force (a target without LUNs cannot
#   be saved); with --force, save refuses naming the user's file, never a temporary one;
# - linerate-ctl's edges: options anywhere (show luns --json), one "linerate-ctl:" and no
#   repeated reason in an error, a socket the user may not open said so, `ls` and `delete`
#   taken, show portals without a removed portal, STORE with the resized size;
# - CHAP users and secrets changed by reload: a qemu-io session logged in before goes on
#   reading and writing, a new login needs the new secret, show sessions names the CHAP user;
# - a portal already in use is said once on stderr.
# Usage: target_admin.sh  (LINERATE_TARGET from meson; linerate-ctl beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need iscsi-inq qemu-io python3

ctl_setup
T2=iqn.2026-11.org.linerate:second
cat >"$WORK/admin.conf" <<EOF
ctl-socket = $SOCK
portal = 127.0.0.1:@PORT@
[target $T]
lun 0 = ram:8M
[target $T2]
lun 0 = ram:4M
EOF
start_target_config "$WORK/admin.conf"
URL="iscsi://127.0.0.1:$PORT/$T"

note "reload refuses to drop a LUN added with linerate-ctl"
ctl_ok add lun "$T" ram:64M
run_to 60 qemu-io -f raw -c "write -P 0x5a 0 1M" "$URL/1" || { show_cmd_out; fail "write LUN 1"; }
echo "lun 5 = ram:1M" >>"$WORK/run.conf" # in [target $T2], the last section
ctl reload >"$WORK/ctl.out" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "reload dropping a live LUN: exit $rc: $(cat "$WORK/ctl.out")"
for want in "target $T: LUN 1 (ram:64M)" "linerate-ctl save" "reload --force" "Nothing changed"; do
    grep -qF "$want" "$WORK/ctl.out" || fail "the refusal does not say '$want': $(cat "$WORK/ctl.out")"
done
ctl_ok --json show luns
[ "$(jget 'sorted((l["target"][-6:], l["lun"]) for l in d)' <"$WORK/ctl.out")" = \
    "[('efault', 0), ('efault', 1), ('second', 0)]" ] || fail "the refused reload changed the LUNs: $(cat "$WORK/ctl.out")"

note "save, the same edit again, reload: the LUN and its data stay"
ctl_ok save
grep -qx "lun 1 = ram:64M" "$WORK/run.conf" || fail "save did not write LUN 1: $(cat "$WORK/run.conf")"
echo "lun 5 = ram:1M" >>"$WORK/run.conf"
ctl_ok --json reload
[ "$(jget 'd["applied"]' <"$WORK/ctl.out")" = "['target $T2: LUN 5 added (ram:1M)']" ] ||
    fail "reload after save: $(cat "$WORK/ctl.out")"
run_to 60 qemu-io -f raw -c "read -P 0x5a 0 1M" "$URL/1" || { show_cmd_out; fail "LUN 1's data after the reload"; }

note "what the file had goes without --force; a live portal goes only with --force"
P2=$(random_port)
port_busy "$P2" && P2=$(random_port)
ctl_ok add portal "$T2" "127.0.0.1:$P2"
sed -i '/^lun 5 = ram:1M$/d' "$WORK/run.conf"
ctl reload >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -qF "target $T2: portal 127.0.0.1:$P2" "$WORK/ctl.out" &&
    ! grep -q "LUN 5" "$WORK/ctl.out" || fail "reload with a live portal: $(cat "$WORK/ctl.out")"
ctl_ok --json reload --force
[ "$(jget 'sorted(d["applied"])' <"$WORK/ctl.out")" = \
    "['target $T2: LUN 5 removed', 'target $T2: portal 127.0.0.1:$P2 removed (its listener closed; sessions on it carry on)']" ] ||
    fail "reload --force: $(cat "$WORK/ctl.out")"

note "remove lun of a target's last LUN needs --force; save then names the config file"
ctl remove lun "$T2" 0 >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "last LUN of target $T2.*cannot be saved.*--force" "$WORK/ctl.out" ||
    fail "removing the last LUN: $(cat "$WORK/ctl.out")"
ctl_ok show luns "$T2"
grep -q "4 MiB" "$WORK/ctl.out" || fail "the refused remove took the LUN: $(cat "$WORK/ctl.out")"
ctl_ok remove lun "$T2" 0 --force
cp "$WORK/run.conf" "$WORK/before-save.conf"
ctl save >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] || fail "save of a target without LUNs: $(cat "$WORK/ctl.out")"
grep -q "$WORK/run.conf" "$WORK/ctl.out" && ! grep -q '\.run\.conf\.' "$WORK/ctl.out" ||
    fail "save's refusal names a temporary file, not the config: $(cat "$WORK/ctl.out")"
cmp -s "$WORK/run.conf" "$WORK/before-save.conf" || fail "the refused save changed the file"

note "linerate-ctl: options after the command, aliases, errors said once"
ctl_ok show luns "$T" --json
[ "$(jget 'len(d)' <"$WORK/ctl.out")" = 2 ] || fail "show luns TARGET --json: $(cat "$WORK/ctl.out")"
ctl_ok ls luns --json
[ "$(jget 'len(d)' <"$WORK/ctl.out")" = 2 ] || fail "ls luns --json: $(cat "$WORK/ctl.out")"
ctl_ok resize lun "$T" 1 128M
ctl_ok show luns "$T"
grep -qE "^$T +1 +128 MiB .* ram:128M$" "$WORK/ctl.out" || fail "STORE after resize: $(cat "$WORK/ctl.out")"
ctl_ok show portals
grep -q "127.0.0.1:$P2" "$WORK/ctl.out" && fail "show portals lists the removed portal: $(cat "$WORK/ctl.out")"
for bad in "ram" "ram:1M,bogus"; do
    ctl add lun "$T" "$bad" >"$WORK/ctl.out" 2>&1
    [ $? -eq 1 ] || fail "add lun $bad: $(cat "$WORK/ctl.out")"
    [ "$(grep -o "linerate-ctl" "$WORK/ctl.out" | wc -l)" = 1 ] &&
        [ "$(grep -o "'$bad'" "$WORK/ctl.out" | wc -l)" = 1 ] ||
        fail "add lun $bad: the error repeats itself: $(cat "$WORK/ctl.out")"
done
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    chmod 755 "$WORK"
    setpriv --reuid=65534 --regid=65534 --clear-groups "$CTL_BIN" --socket "$SOCK" show luns \
        >"$WORK/ctl.out" 2>&1
    rc=$?
    chmod 700 "$WORK"
    [ $rc -eq 3 ] && grep -q "root and the daemon's user" "$WORK/ctl.out" &&
        ! grep -q "running?" "$WORK/ctl.out" || fail "permission refused: $(cat "$WORK/ctl.out")"
fi
ctl_ok delete lun "$T" 1
ctl_ok --json show luns "$T"
[ "$(jget 'len(d)' <"$WORK/ctl.out")" = 1 ] || fail "delete lun: $(cat "$WORK/ctl.out")"

note "session keys beyond what a session uses are refused with the real range"
for kv in "max-connections = 16:1..8" "max-outstanding-r2t = 9:1..8" \
    "max-recv-data-segment-length = 1M:512..262144"; do
    printf '%s\n' "${kv%:*}" "[target $T]" "portal = 127.0.0.1:1" "lun = ram:1M" >"$WORK/keys.conf"
    "$LT" --config "$WORK/keys.conf" --check >"$WORK/keys.out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -q "keys.conf:1: .*expected ${kv##*:}" "$WORK/keys.out" ||
        fail "'${kv%:*}': exit $rc: $(cat "$WORK/keys.out")"
done

note "a portal in use: said once"
timeout 30 "$LT" --listen "127.0.0.1:$PORT" --ctl-socket none --lun ram:1M >/dev/null 2>"$WORK/busy.err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c "cannot listen on 127.0.0.1:$PORT" "$WORK/busy.err")" = 1 ] ||
    fail "a second daemon on the same portal: exit $rc: $(cat "$WORK/busy.err")"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"

note "CHAP changed by reload: a session logged in carries on, new logins need the new secret"
S_OLD=host-a-secret-0001
S_NEW=host-a-secret-0002
printf 'host-a %s\n' "$S_OLD" >"$WORK/chap-secrets"
chmod 600 "$WORK/chap-secrets"
printf '%s\n' "ctl-socket = $SOCK" "chap-secrets = $WORK/chap-secrets" "portal = 127.0.0.1:@PORT@" \
    "[target $T]" "lun 0 = ram:8M" "chap-user = host-a" >"$WORK/chap.conf"
start_target_config "$WORK/chap.conf"
inq_as() { # inq_as SECRET: iscsi-inq logs in as host-a with SECRET
    run_to 30 iscsi-inq -i iqn.2026-01.org.linerate:admin-test \
        "iscsi://host-a%$1@127.0.0.1:$PORT/$T/0"
}
inq_as "$S_OLD" || { show_cmd_out; fail "login with the secret of the file"; }
# qemu-io is the session that carries on: commands written to it one at a time, each waited for
mkfifo "$WORK/qio.in"
exec 7<>"$WORK/qio.in"
timeout 300 qemu-io -f raw "iscsi://host-a%$S_OLD@127.0.0.1:$PORT/$T/0" <&7 >"$WORK/qio.out" 2>&1 &
QIO_PID=$!
QIO_N=0
qio() { # qio COMMAND PATTERN: run COMMAND, wait until PATTERN matched once more than before
    local i
    QIO_N=$((QIO_N + 1))
    echo "$1" >&7
    for ((i = 0; i < 600; i++)); do
        [ "$(grep -c "$2" "$WORK/qio.out")" -ge "$QIO_N" ] && return 0
        kill -0 "$QIO_PID" 2>/dev/null || break
        sleep 0.1
    done
    fail "qemu-io '$1': $(cat "$WORK/qio.out")"
}
qio "write -P 0x11 0 64k" "65536/65536 bytes"
ctl_ok show sessions
grep -q "CHAP user host-a" "$WORK/ctl.out" || fail "show sessions without the CHAP user: $(cat "$WORK/ctl.out")"
printf 'host-a %s\n' "$S_NEW" >"$WORK/chap-secrets"
ctl_ok --json reload
[ "$(jget '(len(d["applied"]), d["needs_restart"])' <"$WORK/ctl.out")" = "(1, [])" ] &&
    grep -qF "target $T: CHAP: new logins use the file's (sessions logged in carry on)" \
        "$WORK/ctl.out" ||
    fail "reload of a changed secret: $(cat "$WORK/ctl.out")"
inq_as "$S_OLD" && fail "a new login with the old secret was let in after the reload"
inq_as "$S_NEW" || { show_cmd_out; fail "a new login with the new secret"; }
qio "read -P 0x11 0 64k" "65536/65536 bytes"
qio "write -P 0x22 64k 64k" "65536/65536 bytes"
grep -qi "fail\|error\|mismatch" "$WORK/qio.out" && fail "the session had an error: $(cat "$WORK/qio.out")"
echo quit >&7
wait "$QIO_PID" || fail "qemu-io exited with an error: $(cat "$WORK/qio.out")"
exec 7>&-
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
echo "target-admin: OK"
