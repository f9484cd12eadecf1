#!/bin/bash
# One target, many hosts (issue 29): [host IQN] and [group NAME] entries with real initiators.
# --check refuses a bad entry with FILE:LINE; examples/three-hosts.conf is served as it is
# (its portal moved to a free port): each host logs in and sees exactly LUNs 0 and 1 (REPORT
# LUNS through iscsi-ls -s), its own boot disk as 0 and the shared disk as 1 (qemu-io, which
# takes an initiator name: data written through one host's number reads back through
# another's, host-c's mapping is write protected); an initiator without an entry does not log
# in, and discovery lists the target only to the hosts; a reload changes entries live (and adds
# a target with one), `show hosts` and `save` report them; then a target with CHAP whose entries
# override its user (one-way and mutual, for a host and a group): each entry logs in with its
# own credentials only, and discovery lists the target to a host only when the discovery
# session authenticated as the user that host logs in with.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-inq iscsi-ls qemu-io
SRC=$(cd "$IT_DIR/../.." && pwd)
P=iqn.2026-11.org.linerate
A=$P:host-a B=$P:host-b C=$P:host-c D=$P:host-d X=$P:stranger
SHARED=$P:shared


note "--check: a bad entry is refused with FILE:LINE"
good=$WORK/good.conf
{
    echo "portal = 127.0.0.1:1"
    hosts_conf $SHARED 1M $A $B $C ,ro
} >"$good"
"$LT" --check --config "$good" >"$WORK/o" 2>&1 || { cat "$WORK/o"; fail "good config refused"; }
# refused SED-EXPR WORDS: the config edited by SED-EXPR exits 2 naming WORDS
refused() { conf_refused "$good" "$@"; }
refused 's/^map = 1 1$/map = 1 2/' "bad.conf:7: host $A maps LUN 2, which target $SHARED does not have"
refused 's/^map = 1 1$/map = 0 1/' "bad.conf:7: host LUN 0 is mapped twice (first at line 6)"
refused "s/^initiator = $C/initiator = $A/" "bad.conf:10: initiator $A is in two entries"
refused "s/^initiator = $C/initiator = $P:host_c/" "bad.conf:10: bad iSCSI name '$P:host_c'"
refused "s/^\[host $A\]/[host iqn.host-a]/" "bad.conf:5: bad iSCSI name 'iqn.host-a'"
refused 's/^map = 0 1,ro/map = 0 1,rw/' "bad.conf:11: bad map '0 1,rw'"
refused "s/^\[target .*/&\nmap = 0 0/" "bad.conf:3: 'map' belongs in a [host IQN] or [group NAME]"
refused "s/^\[group cluster\]/[group cluster]\nlun = ram:1M/" "bad.conf:9: 'lun' cannot stand in a [group] section"
refused "/^initiator/d" "bad.conf:8: group cluster has no initiator"
refused "s/^\[target .*/&\nallow = $A/" "initiator $B has an entry but target $SHARED's allow list does not admit it"

note "examples/three-hosts.conf: the three hosts log in, no one else"
ctl_setup
sed -e "s/^portal = 127.0.0.1:3260$/portal = 127.0.0.1:@PORT@\nctl-socket = $(echo "$SOCK" | sed 's/[\/&]/\\&/g')/" \
    "$SRC/examples/three-hosts.conf" >"$WORK/three.conf"
grep -q @PORT@ "$WORK/three.conf" || fail "examples/three-hosts.conf has no 'portal = 127.0.0.1:3260'"
start_target_config "$WORK/three.conf"
h=127.0.0.1:$PORT
for i in $A $B $C; do
    ok "$i logs in" iscsi-inq -i "$i" "iscsi://$h/$SHARED/0"
    grep -q "^Vendor:LINERATE" "$WORK/cmd.out" || { show_cmd_out; fail "$i: no INQUIRY data"; }
done
# qio INITIATOR LUN: qemu-io's --image-opts for that initiator on that host LUN of $SHARED
qio() { echo "driver=iscsi,transport=tcp,portal=$h,target=$SHARED,lun=$2,initiator-name=$1"; }
note "each host sees its map: LUN 0 its boot disk, LUN 1 the shared one"
for i in $A $B $C; do
    ok "REPORT LUNS as $i" iscsi-ls -s -i "$i" "iscsi://$h"
    luns=$(grep -o "^Lun:[0-9]*" "$WORK/cmd.out" | tr '\n' ' ')
    [ "$luns" = "Lun:0 Lun:1 " ] || { show_cmd_out; fail "$i sees '$luns', not LUNs 0 and 1"; }
done
ok "host-a writes its LUN 0" qemu-io --image-opts "$(qio "$A" 0)" -c "write -P 0x0a 0 64k"
ok "host-b writes its LUN 0" qemu-io --image-opts "$(qio "$B" 0)" -c "write -P 0x0b 0 64k"
ok "host-c writes its LUN 0" qemu-io --image-opts "$(qio "$C" 0)" -c "write -P 0x0c 0 64k"
ok "host-a's boot disk is its own" qemu-io -r --image-opts "$(qio "$A" 0)" -c "read -P 0x0a 0 64k"
ok "host-b's boot disk is its own" qemu-io -r --image-opts "$(qio "$B" 0)" -c "read -P 0x0b 0 64k"
ok "host-a writes the shared disk" qemu-io --image-opts "$(qio "$A" 1)" -c "write -P 0x5a 1M 64k"
ok "host-b reads it through its LUN 1" qemu-io -r --image-opts "$(qio "$B" 1)" -c "read -P 0x5a 1M 64k"
ok "host-c reads it through its LUN 1" qemu-io -r --image-opts "$(qio "$C" 1)" -c "read -P 0x5a 1M 64k"
no "host-c may not write it" qemu-io --image-opts "$(qio "$C" 1)" -c "write -P 0x5c 1M 64k"
grep -q "write protected" "$WORK/cmd.out" || { show_cmd_out; fail "host-c: not write protected"; }
no "host-a has no LUN 2" iscsi-inq -i "$A" "iscsi://$h/$SHARED/2"
grep -q "LOGICAL_UNIT_NOT_SUPPORTED" "$WORK/cmd.out" || { show_cmd_out; fail "LUN 2: not 25h/00h"; }
note "an initiator without an entry"
no "an initiator without an entry" iscsi-inq -i "$X" "iscsi://$h/$SHARED/0"
grep -q "Authorization failure" "$WORK/cmd.out" || { show_cmd_out; fail "stranger: not 0202h"; }
no "libiscsi's default initiator name" iscsi-inq "iscsi://$h/$SHARED/0"
note "discovery: the target is listed to its hosts only"
for i in $A $B $C; do
    ok "discovery as $i" iscsi-ls -i "$i" "iscsi://$h"
    grep -q "Target:$SHARED Portal:$h,1" "$WORK/cmd.out" || { show_cmd_out; fail "not listed to $i"; }
done
ok "discovery as a stranger" iscsi-ls -i "$X" "iscsi://$h"
grep -q "Target:$SHARED" "$WORK/cmd.out" && { show_cmd_out; fail "listed to a stranger"; }

note "reload: host-b's entry becomes host-d's, host-c's LUN 1 writable, a new target; live"
sed -i -e "s/^\[host $B\]/[host $D]/" -e "s/^map = 1 3,ro/map = 1 3/" "$WORK/run.conf"
printf '[target %s]\nlun = ram:1M\n[host %s]\nmap = 5 0\n' "$P:second" "$A" >>"$WORK/run.conf"
ctl_ok --json reload
jget '" ".join(d["applied"])' <"$WORK/ctl.out" | grep -q "host entries: 1 initiator added, 1 with a new map, 1 removed" ||
    fail "reload: $(cat "$WORK/ctl.out")"
ok "REPORT LUNS of the new target as host-a" iscsi-ls -s -i "$A" "iscsi://$h"
luns=$(awk -v t="Target:$P:second" '$1 == t {on = 1; next} /^Target:/ {on = 0} on && /^Lun:/ {printf "%s ", $1}' "$WORK/cmd.out")
[ "$luns" = "Lun:5 " ] || { show_cmd_out; fail "host-a sees '$luns' of the new target, not LUN 5"; }
no "the new target admits no stranger" iscsi-inq -i "$X" "iscsi://$h/$P:second/5"
[ "$(jget 'd["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] || fail "reload: $(cat "$WORK/ctl.out")"
no "host-b after the reload" iscsi-inq -i "$B" "iscsi://$h/$SHARED/0"
ok "host-d has host-b's boot disk as LUN 0" qemu-io -r --image-opts "$(qio "$D" 0)" -c "read -P 0x0b 0 64k"
ok "host-d has the shared disk as LUN 1" qemu-io -r --image-opts "$(qio "$D" 1)" -c "read -P 0x5a 1M 64k"
ok "host-c may write it now" qemu-io --image-opts "$(qio "$C" 1)" -c "write -P 0x5c 1M 64k"
ok "host-a reads host-c's write" qemu-io -r --image-opts "$(qio "$A" 1)" -c "read -P 0x5c 1M 64k"
ok "discovery as host-d" iscsi-ls -i "$D" "iscsi://$h"
grep -q "Target:$SHARED" "$WORK/cmd.out" || { show_cmd_out; fail "not listed to host-d"; }
ctl_ok --json show hosts "$SHARED"
got=$(jget '" ".join("%s:%s" % (h["name"].split(":")[-1], ",".join("%d=%d%s" % (m["host_lun"], m["lun"], "ro" if m["read_only"] else "") for m in h["maps"])) for h in d)' <"$WORK/ctl.out")
[ "$got" = "host-a:0=0,1=3 host-d:0=1,1=3 host-c:0=2,1=3" ] || fail "show hosts: $got"
ctl_ok show targets
grep -q "3 host entries" "$WORK/ctl.out" || fail "show targets: $(cat "$WORK/ctl.out")"
ctl remove lun "$SHARED" 3 >"$WORK/ctl.out" 2>&1 && fail "remove lun 3 (mapped) succeeded"
grep -q "LUN 3 of target $SHARED is mapped for host $A" "$WORK/ctl.out" ||
    fail "remove lun 3: $(cat "$WORK/ctl.out")"
note "a reload past the SCSI bounds (4096 initiators with entries) is refused whole"
# (before, the entries were admitted and kept though the maps failed: save wrote a file that
# does not start)
cp "$WORK/run.conf" "$WORK/run.keep"
{ echo "[group big]"; seq -f "initiator = $P:big-%g" 1 4096; echo "map = 6 0"; } >>"$WORK/run.conf"
ctl --json reload >"$WORK/ctl.out" 2>&1 && fail "reload past the bounds succeeded"
grep -q "4097 initiators with entries.*the most a target has is 4096" "$WORK/ctl.out" ||
    fail "reload past the bounds: $(cat "$WORK/ctl.out")"
ctl_ok --json show hosts "$P:second"
[ "$(jget 'len(d)' <"$WORK/ctl.out")" = 1 ] || fail "show hosts after the refused reload: $(cat "$WORK/ctl.out")"
no "a member of the refused group" iscsi-inq -i "$P:big-7" "iscsi://$h/$P:second/6"
cp "$WORK/run.keep" "$WORK/run.conf"
"$LT" --check --config "$WORK/run.conf" >"$WORK/o" 2>&1 || fail "run.conf: $(cat "$WORK/o")"
note "save writes the entries; the saved file loads and reloads to no change"
ctl_ok save "$WORK/saved.conf"
grep -qx "\[host $D\]" "$WORK/saved.conf" && grep -qx "map = 1 3" "$WORK/saved.conf" ||
    { cat "$WORK/saved.conf"; fail "saved.conf lacks host-d's entry"; }
"$LT" --check --config "$WORK/saved.conf" >"$WORK/o" 2>&1 || fail "saved.conf: $(cat "$WORK/o")"
ctl_ok --json reload
[ "$(jget 'd["applied"] + d["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] ||
    fail "a second reload: $(cat "$WORK/ctl.out")"
note "remove lun --force drops the maps of it: a new LUN at its number is shown to nobody"
# (before, host-a's 'map = 5 0' stayed: host-a saw the new disk as its LUN 5, writable)
ctl_ok --json remove lun "$P:second" 0 --force
[ "$(jget 'd["maps_dropped"]' <"$WORK/ctl.out")" = 1 ] || fail "remove lun --force: $(cat "$WORK/ctl.out")"
ctl_ok add lun "$P:second" ram:1M --lun 0
no "host-a's LUN 5 after the new LUN 0" iscsi-inq -i "$A" "iscsi://$h/$P:second/5"
ctl_ok --json show hosts "$P:second"
[ "$(jget '[len(h["maps"]) for h in d]' <"$WORK/ctl.out")" = "[0]" ] ||
    fail "show hosts after remove lun --force: $(cat "$WORK/ctl.out")"
ctl_ok save "$WORK/saved2.conf"
grep -qx "map = 5 0" "$WORK/saved2.conf" && { cat "$WORK/saved2.conf"; fail "save kept the dropped map"; }
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC after SIGTERM"

note "CHAP per entry: over the target's user, for a host and for a group"
S_ALICE=alice-secret-0123 S_BOB=bob-secret-456789 S_CAROL=carol-secret-0123 S_TGT=tgt-carol-secret-9
sec=$WORK/chap-secrets
printf 'alice %s\nbob %s\ncarol %s\ntgt-carol %s\n' "$S_ALICE" "$S_BOB" "$S_CAROL" "$S_TGT" >"$sec"
chmod 600 "$sec"
cat >"$WORK/chap.conf" <<EOF
portal = 127.0.0.1:@PORT@
chap-secrets = $sec
discovery-chap-user = bob
[target $SHARED]
lun = ram:1M
chap-user = alice
[host $A]
map = 0 0
[host $B]
map = 0 0
chap-user = bob
[group cd]
initiator = $C
initiator = $D
map = 0 0
chap-user = carol
chap-mutual-user = tgt-carol
EOF
start_target_config "$WORK/chap.conf"
h=127.0.0.1:$PORT
u="$SHARED/0"
mutual="target_user=tgt-carol&target_password=$S_TGT"
# Each refusal follows a login that succeeded from the same address: the guard against
# guessing (1 s, 2 s, 4 s ... after failures in a row) then costs 1 s each.
ok "host-a as the target's user" iscsi-inq -i "$A" "iscsi://alice%$S_ALICE@$h/$u"
no "host-a as host-b's user" iscsi-inq -i "$A" "iscsi://bob%$S_BOB@$h/$u"
grep -q "Authentication failure" "$WORK/cmd.out" || { show_cmd_out; fail "host-a/bob: not 0201h"; }
ok "host-b as its own user" iscsi-inq -i "$B" "iscsi://bob%$S_BOB@$h/$u"
no "host-b as the target's user" iscsi-inq -i "$B" "iscsi://alice%$S_ALICE@$h/$u"
grep -q "Authentication failure" "$WORK/cmd.out" || { show_cmd_out; fail "host-b/alice: not 0201h"; }
ok "host-b again" iscsi-inq -i "$B" "iscsi://bob%$S_BOB@$h/$u"
no "host-b without CHAP" iscsi-inq -i "$B" "iscsi://$h/$u"
ok "$C as the group's user, mutual" iscsi-inq -i "$C" "iscsi://carol%$S_CAROL@$h/$u?$mutual"
no "$C, mutual missing" iscsi-inq -i "$C" "iscsi://carol%$S_CAROL@$h/$u"
ok "$D as the group's user, mutual" iscsi-inq -i "$D" "iscsi://carol%$S_CAROL@$h/$u?$mutual"
no "$D as the target's user" iscsi-inq -i "$D" "iscsi://alice%$S_ALICE@$h/$u"
no "a stranger with the target's user" iscsi-inq -i "$X" "iscsi://alice%$S_ALICE@$h/$u"
grep -q "Authorization failure" "$WORK/cmd.out" || { show_cmd_out; fail "stranger: not 0202h"; }
note "discovery CHAP (bob) lists the target to host-b (bob), not to host-a (alice)"
ok "discovery as host-b" iscsi-ls -i "$B" "iscsi://bob%$S_BOB@$h"
grep -q "Target:$SHARED Portal:$h,1" "$WORK/cmd.out" || { show_cmd_out; fail "not listed to host-b"; }
ok "discovery as host-a" iscsi-ls -i "$A" "iscsi://bob%$S_BOB@$h"
grep -q "Target:$SHARED" "$WORK/cmd.out" && { show_cmd_out; fail "listed to host-a"; }
for s in "$S_ALICE" "$S_BOB" "$S_CAROL" "$S_TGT"; do
    grep -qF -- "$s" "$WORK/target.log" && fail "a secret reached the log"
done
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC after SIGTERM"
echo "PASS"
