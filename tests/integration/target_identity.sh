#!/usr/bin/env bash
# LUN identity (issue 29 item 6): vendor=, product=, revision=, serial=, naa= and rotation= of a
# LUN are what a host reads in INQUIRY and VPD 80h/83h/B1h (through the raw initiator of
# target_identity.py and libiscsi's iscsi-inq); vpd-style=tcmu lays VPD 80h and 83h out as
# tcmu-runner does, its tcmu-config= in them (tcmu_vpd.py); a LUN without them keeps the
# defaults; bad values and an NAA two LUNs would share are refused naming the option, from the
# command line, the config file and linerate-ctl; a LUN added live keeps its identity, and
# `save` and a restart from the saved file keep every LUN's identity byte for byte.
# Usage: target_identity.sh  (LINERATE_TARGET from meson; linerate-ctl beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need iscsi-inq python3

ctl_setup
ID_PY=$IT_DIR/target_identity.py
NAA6=600140512345678901234567890abcde
NAA3=3123456789abcdef

# ident LUN: the identity line a host reads of LUN (target_identity.py)
ident() {
    python3 "$ID_PY" "$PORT" "$T" "$1" 2>&1 || fail "reading LUN $1's identity: $(python3 "$ID_PY" "$PORT" "$T" "$1" 2>&1)"
}
inq() { run_to 30 iscsi-inq -i iqn.2026-11.org.linerate:identity-inq "$@" "iscsi://127.0.0.1:$PORT/$T/1"; }

# expect_usage WORD ARGS...: linerate-target refuses ARGS with exit 2 and a message naming WORD
expect_usage() {
    local word=$1 rc
    shift
    timeout 20 "$LT" --check "$@" >"$WORK/o" 2>"$WORK/e"
    rc=$?
    [ $rc -eq 2 ] || fail "'$*' exited $rc, not 2 ($(cat "$WORK/e"))"
    grep -qF -- "$word" "$WORK/e" || fail "'$*': message does not name '$word': $(cat "$WORK/e")"
}

note "bad values refused, the option named"
expect_usage "naa=" --lun ram:1M,naa=4123456789abcdef          # NAA 4h: no such format
expect_usage "naa=" --lun ram:1M,naa=6123456789abcdef          # 6h takes 16 bytes
expect_usage "naa=" --lun ram:1M,naa=3123456789abcdef00        # 9 bytes
expect_usage "naa=" --lun ram:1M,naa=312345678gabcdef          # not hex
expect_usage "vendor=" --lun ram:1M,vendor=NINECHARS          # 8 at most (SPC-4 §6.6.2)
expect_usage "product=" --lun ram:1M,product=SEVENTEEN-CHARS-X
expect_usage "revision=" --lun ram:1M,revision=12345
expect_usage "serial=" --lun "ram:1M,serial=$(printf 'x%.0s' {1..65})"
expect_usage "vendor=" --lun "ram:1M,vendor= ACME"            # would vanish in the padding
expect_usage "product=" --lun "$(printf 'ram:1M,product=a\tb')"
expect_usage "rotation=" --lun ram:1M,rotation=1024            # 0401h is the lowest rate
expect_usage "rotation=" --lun ram:1M,rotation=fast
expect_usage "vpd-style=" --lun ram:1M,vpd-style=tgt           # linerate, lio or tcmu
expect_usage "tcmu-config=" --lun "ram:1M,tcmu-config=$(printf 'x%.0s' {1..255})" # 254 at most
expect_usage "two LUNs may not share an NAA" --lun "ram:1M,naa=$NAA3" --lun "ram:1M,naa=0x$NAA3"
cat >"$WORK/dup.conf" <<EOF2
portal = 127.0.0.1:3260
[target $T]
lun = ram:1M,naa=$NAA6
[target $T:other]
lun = ram:1M,naa=naa.${NAA6^^}
EOF2
expect_usage "dup.conf:5: naa=$NAA6 of target $T:other LUN 0 is already the NAA of target $T LUN 0" \
    --config "$WORK/dup.conf"

note "a LUN without options: the defaults; with them: what a host reads"
cat >"$WORK/id.conf" <<EOF2
ctl-socket = $SOCK
portal = 127.0.0.1:@PORT@
[target $T]
lun = ram:8M
lun = ram:8M,vendor=ACME,product=Virtual Disk,revision=2.1,serial=ACME-000123,naa=$NAA6,rotation=7200
lun = null:8M,naa=naa.${NAA3^^},rotation=ssd
EOF2
start_target_config "$WORK/id.conf"
l0=$(ident 0)
# the default serial is the hash the NAA 3h designator carries in its low 60 bits
[[ $l0 =~ ^vendor=\'LINERATE\'\ product=\'RAMDISK\ {9}\'\ revision=\'0001\'\ serial=\'([0-9a-f]{16})\'\ naa=3([0-9a-f]{15})\ t10=\'LINERATE([0-9a-f]{16})\'\ rotation=1$ ]] ||
    fail "LUN 0 (no options): $l0"
[ "${BASH_REMATCH[1]:1}" = "${BASH_REMATCH[2]}" ] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[3]}" ] ||
    fail "LUN 0: serial and NAA disagree: $l0"
l1=$(ident 1)
[ "$l1" = "vendor='ACME    ' product='Virtual Disk    ' revision='2.1 ' serial='ACME-000123' naa=$NAA6 t10='ACME    ACME-000123' rotation=7200" ] ||
    fail "LUN 1: $l1"
l2=$(ident 2)
[[ $l2 =~ ^vendor=\'LINERATE\'\ product=\'NULLDISK\ {8}\'\ revision=\'0001\'\ serial=\'[0-9a-f]{16}\'\ naa=$NAA3\ t10=\'LINERATE[0-9a-f]{16}\'\ rotation=1$ ]] ||
    fail "LUN 2: $l2"
inq || fail "iscsi-inq: $(cat "$WORK/cmd.out")"
grep -qx "Vendor:ACME    " "$WORK/cmd.out" && grep -qx "Product:Virtual Disk    " "$WORK/cmd.out" &&
    grep -qx "Revision:2.1 " "$WORK/cmd.out" || fail "iscsi-inq, standard: $(cat "$WORK/cmd.out")"
inq -e 1 -c 128 || fail "iscsi-inq VPD 80h: $(cat "$WORK/cmd.out")"
grep -qx "Unit Serial Number:\[ACME-000123\]" "$WORK/cmd.out" ||
    fail "iscsi-inq VPD 80h: $(cat "$WORK/cmd.out")"
inq -e 1 -c 131 || fail "iscsi-inq VPD 83h: $(cat "$WORK/cmd.out")"
grep -qx "Designator:\[ACME    ACME-000123\]" "$WORK/cmd.out" ||
    fail "iscsi-inq VPD 83h: $(cat "$WORK/cmd.out")"

note "linerate-ctl add lun: identity kept, a shared NAA refused"
ctl add lun "$T" "ram:4M,naa=$NAA6" >"$WORK/ctl.out" 2>&1 && fail "add lun with LUN 1's NAA was taken"
grep -qF "naa=$NAA6 of target $T LUN 3 is already the NAA of target $T LUN 1" "$WORK/ctl.out" ||
    fail "add lun, shared NAA: $(cat "$WORK/ctl.out")"
ctl add lun "$T" "ram:4M,naa=5123" >"$WORK/ctl.out" 2>&1 && fail "add lun with a short NAA was taken"
grep -qF "bad naa= '5123'" "$WORK/ctl.out" || fail "add lun, bad NAA: $(cat "$WORK/ctl.out")"
ctl_ok add lun "$T" "ram:4M,serial=LIVE-3,naa=0x5000c50012345678,product=Added" --lun 3
l3=$(ident 3)
[[ $l3 == "vendor='LINERATE' product='Added           ' revision='0001' serial='LIVE-3' naa=5000c50012345678 t10='LINERATELIVE-3' rotation=1" ]] ||
    fail "LUN 3 (added live): $l3"

note "vpd-style=tcmu: VPD 80h and 83h as tcmu-runner lays them out (tcmu_vpd.py)"
TCMU_WWN=a1b2c3d4-e5f6-4789-8abc-def012345678
TCMU_NAA=6001405a1b2c3d4e5f647898abcdef01
TCMU_CFG="rbd/rbd/disk_1;osd_op_timeout=30"
TCMU_LUN="ram:4M,vendor=LIO-ORG,product=TCMU device,revision=0002,serial=$TCMU_WWN,naa=$TCMU_NAA,vpd-style=tcmu,tcmu-config=$TCMU_CFG"
tcmu_pages() {
    python3 "$IT_DIR/tcmu_vpd.py" "$PORT" "$T" 4 LIO-ORG "$TCMU_WWN" "$TCMU_NAA" "$TCMU_CFG" 2>"$WORK/vpd" ||
        fail "$1: $(cat "$WORK/vpd")"
}
ctl_ok add lun "$T" "$TCMU_LUN" --lun 4
tcmu_pages "LUN 4 (vpd-style=tcmu)"

note "save, reload and a restart from the saved file keep every identity"
ctl_ok save
grep -qx "lun 3 = ram:4M,product=Added,serial=LIVE-3,naa=5000c50012345678" "$WORK/run.conf" ||
    fail "saved LUN 3: $(grep '^lun' "$WORK/run.conf")"
grep -qxF "lun 4 = $TCMU_LUN" "$WORK/run.conf" || fail "saved LUN 4: $(grep '^lun' "$WORK/run.conf")"
ctl_ok --json reload
[ "$(jget 'd["applied"] + d["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] ||
    fail "reload from the saved file: $(cat "$WORK/ctl.out")"
cp "$WORK/run.conf" "$WORK/saved.conf"
stop_target
[ "$STOP_RC" = 0 ] || fail "exit code $STOP_RC at stop"
sed -i "s/^portal = 127.0.0.1:$PORT/portal = 127.0.0.1:@PORT@/" "$WORK/saved.conf"
start_target_config "$WORK/saved.conf"
for n in 0 1 2 3; do
    eval "was=\$l$n"
    now=$(ident $n)
    [ "$now" = "$was" ] || fail "LUN $n after a restart: '$now', was '$was'"
done
tcmu_pages "LUN 4 after a restart"
note "reload: a changed identity is a changed LUN"
sed -i "s/serial=LIVE-3/serial=LIVE-4/" "$WORK/run.conf"
ctl_ok --json reload
grep -qF "serial=LIVE-3" "$WORK/ctl.out" && grep -qF "serial=LIVE-4" "$WORK/ctl.out" ||
    fail "reload with LUN 3's serial changed: $(cat "$WORK/ctl.out")"

note "reload: a LUN moves, its NAA pinned, from a target the file drops to one it keeps"
TM=$T:moving
NAAM=5000c500abcd0001
printf '[target %s]\nlun = null:8M,naa=%s\n' "$TM" "$NAAM" >>"$WORK/run.conf"
ctl_ok --json reload
grep -qF "target $TM added" "$WORK/ctl.out" || fail "reload adding $TM: $(cat "$WORK/ctl.out")"
sed -i "/^\[target $TM\]\$/,\$d" "$WORK/run.conf" # its section, the last, dropped
sed -i "/^lun 3 = /a lun 8 = null:8M,naa=$NAAM" "$WORK/run.conf"
ctl_ok --json reload
grep -qF "target $TM removed" "$WORK/ctl.out" && grep -qF "target $T: LUN 8 added" "$WORK/ctl.out" ||
    fail "reload moving LUN 8: $(cat "$WORK/ctl.out")"
[[ $(ident 8) == *" naa=$NAAM "* ]] || fail "LUN 8 reads $(ident 8)"

note "a move: LUN 0's identity, read from show luns, pinned on the LUN that replaces it"
ctl_ok --json show luns
naa0=$(jget '[l["identity"]["naa"] for l in d if l["lun"] == 0][0]' <"$WORK/ctl.out")
serial0=$(jget '[l["identity"]["serial"] for l in d if l["lun"] == 0][0]' <"$WORK/ctl.out")
[[ $l0 == *"serial='$serial0' naa=$naa0 "* ]] || fail "show luns: serial $serial0 naa $naa0, a host reads $l0"
# while LUN 0 still has it (made, not set), no other LUN may take it
ctl add lun "$T" "null:8M,naa=$naa0" --lun 7 >"$WORK/ctl.out" 2>&1 && fail "LUN 0's NAA was taken by LUN 7"
grep -qF "its NAA $naa0 (naa=) is already the NAA of target $T LUN 0" "$WORK/ctl.out" ||
    fail "add lun with LUN 0's made NAA: $(cat "$WORK/ctl.out")"
ctl_ok remove lun "$T" 0
ctl_ok add lun "$T" "null:8M,product=RAMDISK,serial=$serial0,naa=$naa0" --lun 7
l7=$(ident 7)
[ "$l7" = "$l0" ] || fail "the moved disk reads '$l7', was '$l0'"
stop_target
echo "PASS"
