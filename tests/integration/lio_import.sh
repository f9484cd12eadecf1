#!/usr/bin/env bash
# linerate-ctl import lio (issue 31 items 1, 3, 4, 5): LIO's saveconfig.json fixtures (lio/)
# become a linerate.conf and a mode-600 secrets file that `linerate-target --check` takes; what
# does not carry over is reported and makes the exit non-zero; malformed and truncated input
# writes nothing. The imported file then serves (its block device, file and RBD paths replaced
# by scratch files and RAM, its IPv6 portal dropped: loopback only), and libiscsi's iscsi-inq,
# logging in as each ACL's initiator with its CHAP, reads LIO's identity back: vendor, product,
# VPD 80h = the wwn, VPD 83h = the NAA computed by lio_naa.py from the documented rule, and both
# pages byte for byte as LIO lays them out (lio_vpd.py, raw and through iscsi-inq); a host whose
# CHAP user is not the discovery user finds its target by discovery, as with LIO.
# `linerate-ctl import lio FILE --check` then finds no difference, and finds the ones made.
# Usage: lio_import.sh  (LINERATE_TARGET from meson; linerate-ctl beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need iscsi-inq python3

ctl_setup
FIX=$IT_DIR/lio
SH=iqn.2003-01.org.linux-iscsi.store1:shared
LAB=iqn.2003-01.org.linux-iscsi.store1:lab
HA=iqn.1994-05.com.redhat:host-a
HB=iqn.1994-05.com.redhat:host-b

# import FIXTURE: exit code in RC, report in $WORK/report
import() {
    "$CTL_BIN" import lio "$FIX/$1" -o "$WORK/$1.conf" --secrets "$WORK/$1.secrets" \
        2>"$WORK/report"
    RC=$?
}

note "a whole deployment: config, secrets of mode 600; hosts see what they saw: exit 0"
import full.json
# ACLs with CHAP users other than the discovery user: SendTargets lists their target to every
# discovery session, as LIO's did (discovery-chap-match = no, docs/migrate.md "Discovery")
[ $RC -eq 0 ] && ! grep -q "NOT CARRIED" "$WORK/report" || fail "full.json: exit $RC: $(cat "$WORK/report")"
grep -q "note: targets\[0\]: target $SH: 2 ACL(s) with CHAP: discovery-chap-match = no" \
    "$WORK/report" || fail "full.json: $(cat "$WORK/report")"
C=$WORK/full.json.conf
[ "$(stat -c %a "$WORK/full.json.secrets")" = 600 ] || fail "secrets mode $(stat -c %a "$WORK/full.json.secrets")"
for want in "discover disc-secret-0001" "disc-target disc-mutual-0002" "host-a host-a-secret-01" \
    "store1 store1-mutual-01" "host-b host-b-secret-02"; do
    grep -qxF "$want" "$WORK/full.json.secrets" || fail "secrets lack '$want'"
done
grep -qE "secret-0|mutual-0" "$C" && fail "a secret in the config: $(grep -E "secret-0|mutual-0" "$C")"
# the ACLs' maps, write-protect and CHAP users; both TPGs' portals; discovery CHAP
python3 - "$C" "$WORK/full.json.secrets" <<'PY' || fail "config: $(cat "$C")"
import sys
t = open(sys.argv[1]).read()
need = ["chap-secrets = " + sys.argv[2], "discovery-chap-match = no\n", "discovery-chap-user = discover",
        "discovery-chap-mutual-user = disc-target",
        "[target iqn.2003-01.org.linux-iscsi.store1:shared]\nportal = 127.0.0.1:3260\nportal = [::1]:3261\n",
        "[host iqn.1994-05.com.redhat:host-a]\nchap-user = host-a\nchap-mutual-user = store1\nmap = 0 0\nmap = 1 1\nmap = 2 3\n",
        "[host iqn.1994-05.com.redhat:host-b]\nchap-user = host-b\nmap = 0 2\nmap = 5 0,ro\n",
        "lun 3 = rbd:vmpool/vm-disk-1,size=16777216,", "lun 1 = file:/dev/vg0/logs,",
        # tcmu-runner's VPD layout, the object's config string in VPD 83h (tcmu_vpd.py)
        ",naa=6001405f3a0c9e27b614d289e451c2b3,vpd-style=tcmu,tcmu-config=rbd/vmpool/vm-disk-1\n"]
miss = [n for n in need if n not in t]
sys.exit("missing: %r" % miss if miss else 0)
PY
run_to 30 "$LT" --check --config "$C" || fail "--check of the import: $(cat "$WORK/cmd.out")"
grep -q "OK: 2 targets, 5 LUNs" "$WORK/cmd.out" || fail "--check: $(cat "$WORK/cmd.out")"

note "what does not carry over: reported, exit 1"
import lossy.json
[ $RC -eq 1 ] || fail "lossy.json: exit $RC, not 1: $(cat "$WORK/report")"
for want in "pscsi storage object 'tape'" "user:glfs storage object 'glfs'" "iSER or offload portal" \
    "targets[0].tpgs[1]: TPG with other LUNs" "already a LUN of target iqn.2003-01.org.linux-iscsi.store2:a" \
    "qla2xxx target" "CHAP user 'win1' has a secret of 8 bytes" "generate_node_acls with ACLs"; do
    grep -qF "NOT CARRIED: " "$WORK/report" && grep -F "$want" "$WORK/report" | grep -q "NOT CARRIED" ||
        fail "report lacks '$want': $(cat "$WORK/report")"
done
# the short secret is kept, so linerate-target refuses to start rather than serve without CHAP
run_to 30 "$LT" --check --config "$WORK/lossy.json.conf" && fail "--check took a short secret"
grep -qF "the secret of user win1 is 8 bytes" "$WORK/cmd.out" || fail "--check: $(cat "$WORK/cmd.out")"

# a CHAP user without its password (or one the secrets file cannot hold): the chap-user line
# is kept, so that initiator cannot log in until the admin adds the secret, never without CHAP
python3 - "$FIX/full.json" "$WORK/nopw.json" <<'PY' || fail "making nopw.json"
import json, sys
d = json.load(open(sys.argv[1]))
def drop(o):
    if isinstance(o, dict):
        if o.get("chap_userid") == "host-b":
            del o["chap_password"]
        for v in o.values():
            drop(v)
    elif isinstance(o, list):
        for v in o:
            drop(v)
drop(d)
json.dump(d, open(sys.argv[2], "w"))
PY
"$CTL_BIN" import lio "$WORK/nopw.json" -o "$WORK/nopw.conf" --secrets "$WORK/nopw.secrets" \
    2>"$WORK/report"
RC=$?
[ $RC -eq 1 ] && grep -q "^NOT CARRIED: .*chap_userid without chap_password: add 'host-b SECRET'" "$WORK/report" ||
    fail "nopw.json: exit $RC: $(cat "$WORK/report")"
grep -qx "chap-user = host-b" "$WORK/nopw.conf" || fail "nopw.json: host-b's CHAP user dropped: $(cat "$WORK/nopw.conf")"
run_to 30 "$LT" --check --config "$WORK/nopw.conf" && fail "--check took host-b without a secret"
grep -qF "no secret for CHAP user host-b" "$WORK/cmd.out" || fail "nopw --check: $(cat "$WORK/cmd.out")"

note "malformed and truncated input: exit 2, the place named, nothing written"
echo keep >"$WORK/keep.conf"
for f in malformed.json truncated.json; do
    "$CTL_BIN" import lio "$FIX/$f" -o "$WORK/keep.conf" --secrets "$WORK/$f.secrets" 2>"$WORK/report"
    RC=$?
    [ $RC -eq 2 ] || fail "$f: exit $RC, not 2"
    [ "$(cat "$WORK/keep.conf")" = keep ] && [ ! -e "$WORK/$f.secrets" ] || fail "$f: something written"
    grep -q "nothing written" "$WORK/report" || fail "$f: $(cat "$WORK/report")"
done
# strings that would become lines or keys of the config (inject.json: a target wwn with a
# newline and a chap-secrets line; the others made from full.json here): refused, nothing written
python3 - "$FIX/full.json" "$WORK" <<'PY' || fail "making the injection variants"
import json, sys
for name, path, val in [
        ("inj-acl", ("targets", 0, "tpgs", 0, "node_acls", 0, "node_wwn"), "iqn.x:a]\n[target iqn.x:b"),
        ("inj-ip", ("targets", 0, "tpgs", 0, "portals", 0, "ip_address"), "127.0.0.1:1\nchap-secrets = /x\n#"),
        ("inj-rbd", ("storage_objects", 3, "config"), "rbd/vmpool/vm\n[target iqn.x:c]"),
        ("inj-hash", ("targets", 0, "wwn"), "iqn.x:a #c")]:
    d = json.load(open(sys.argv[1]))
    o = d
    for k in path[:-1]:
        o = o[k]
    assert path[-1] in o, name
    o[path[-1]] = val
    json.dump(d, open("%s/%s.json" % (sys.argv[2], name), "w"))
PY
for f in "$FIX/inject.json" "$WORK"/inj-*.json; do
    "$CTL_BIN" import lio "$f" -o "$WORK/keep.conf" --secrets "$WORK/inj.secrets" 2>"$WORK/report"
    RC=$?
    [ $RC -eq 2 ] || fail "$(basename "$f"): exit $RC, not 2: $(cat "$WORK/report")"
    [ "$(cat "$WORK/keep.conf")" = keep ] && [ ! -e "$WORK/inj.secrets" ] ||
        fail "$(basename "$f"): something written: $(cat "$WORK/keep.conf")"
    grep -q "nothing written" "$WORK/report" || fail "$(basename "$f"): $(cat "$WORK/report")"
done
# the operator's paths go into the config too: an input path with a newline (the header's
# comment) and a secrets path the chap-secrets line would read otherwise are refused
cp "$FIX/full.json" "$WORK/nl
chap-secrets = x.json"
for a in "$WORK/nl
chap-secrets = x.json|$WORK/inj.secrets|a control character" \
    "$FIX/full.json|$WORK/a #b.secrets|--secrets: path too long, or with a character" \
    "$FIX/full.json|$WORK/trail.secrets |--secrets: path too long, or with a character"; do
    IFS='|' read -r -d '' in sec msg <<<"$a"
    msg=${msg%$'\n'}
    "$CTL_BIN" import lio "$in" -o "$WORK/keep.conf" --secrets "$sec" 2>"$WORK/report"
    RC=$?
    [ $RC -eq 2 ] && [ "$(cat "$WORK/keep.conf")" = keep ] && [ ! -e "$sec" ] &&
        grep -qF -- "$msg" "$WORK/report" || fail "path '$in' '$sec': exit $RC: $(cat "$WORK/report")"
done
"$CTL_BIN" import lio "$FIX/malformed.json" 2>"$WORK/report" >"$WORK/stdout"
grep -qF "malformed.json: targets[0].tpgs[0].node_acls[1].mapped_luns[1]: 'tpg_lun' is not an integer" \
    "$WORK/report" && [ ! -s "$WORK/stdout" ] || fail "malformed: $(cat "$WORK/report")"
"$CTL_BIN" import lio "$FIX/truncated.json" 2>"$WORK/report"
grep -qE "truncated.json:[0-9]+:[0-9]+: not valid JSON" "$WORK/report" || fail "truncated: $(cat "$WORK/report")"
"$CTL_BIN" import lio "$FIX/full.json" >/dev/null 2>"$WORK/report" && fail "CHAP secrets without --secrets"
grep -q "give --secrets" "$WORK/report" || fail "no --secrets: $(cat "$WORK/report")"
# the config cannot be written (no such directory): the secrets are not left behind either
"$CTL_BIN" import lio "$FIX/full.json" -o "$WORK/nodir/x.conf" --secrets "$WORK/half.secrets" \
    2>"$WORK/report" && fail "import into a missing directory succeeded"
[ ! -e "$WORK/half.secrets" ] && ! ls "$WORK"/half.secrets.* >/dev/null 2>&1 ||
    fail "config not written but the secrets were: $(cat "$WORK/report")"
grep -q "nothing written" "$WORK/report" || fail "half: $(cat "$WORK/report")"
# where no hard link can be made (protected_hardlinks: files of another owner, in a directory
# the importer may write), the files replaced are copied to be put back, not refused; runs as
# root, the import as nobody
NB="setpriv --reuid=nobody --regid=nogroup --clear-groups"
if [ "$(id -u)" = 0 ] && [ "$(sysctl -n fs.protected_hardlinks 2>/dev/null)" = 1 ] &&
    chmod 711 "$WORK" && $NB "$CTL_BIN" --help >/dev/null 2>&1; then
    mkdir -m 755 "$WORK/nl" && cp "$FIX/full.json" "$WORK/nl/" && chmod 644 "$WORK/nl/full.json" &&
        mkdir "$WORK/nl/d" "$WORK/nl/d/adir" && chown nobody "$WORK/nl/d" || fail "nl setup"
    echo "old-user old-secret-000" >"$WORK/nl/d/s" && echo keep >"$WORK/nl/d/x.conf" &&
        chmod 644 "$WORK/nl/d/s" "$WORK/nl/d/x.conf" || fail "nl setup"
    $NB "$CTL_BIN" import lio "$WORK/nl/full.json" -o "$WORK/nl/d/adir" --secrets "$WORK/nl/d/s" \
        2>"$WORK/report" && fail "nl: import onto a directory succeeded"
    [ "$(cat "$WORK/nl/d/s")" = "old-user old-secret-000" ] && grep -q "Is a directory" "$WORK/report" ||
        fail "nl: the old secrets not put back: $(ls -la "$WORK/nl/d"; cat "$WORK/report")"
    $NB "$CTL_BIN" import lio "$WORK/nl/full.json" -o "$WORK/nl/d/x.conf" --secrets "$WORK/nl/d/s" \
        2>"$WORK/report" || fail "nl: no hard link, import refused: $(cat "$WORK/report")"
    grep -q "^# linerate.conf imported from LIO's" "$WORK/nl/d/x.conf" &&
        grep -q "^host-a host-a-secret-01$" "$WORK/nl/d/s" && [ "$(ls -A "$WORK/nl/d")" = "adir
s
x.conf" ] || fail "nl: $(ls -la "$WORK/nl/d"; cat "$WORK/report")"
else
    note "skipped the no-hard-link case (needs root and fs.protected_hardlinks = 1)"
fi
# a config rename that fails (its path is a directory) puts back the secrets file that was
# there before, and a file already at SECRETS.import-tmp is never written into: a descriptor
# opened on it before cannot read the secrets
mkdir -p "$WORK/adir" && echo "old-user old-secret-000" >"$WORK/old.secrets"
echo stale >"$WORK/old.secrets.import-tmp" && exec 3<"$WORK/old.secrets.import-tmp"
"$CTL_BIN" import lio "$FIX/full.json" -o "$WORK/adir" --secrets "$WORK/old.secrets" \
    2>"$WORK/report" && fail "import onto a directory succeeded"
[ "$(cat "$WORK/old.secrets")" = "old-user old-secret-000" ] ||
    fail "the old secrets file was not put back: $(ls -l "$WORK"; cat "$WORK/report")"
grep -q secret-0 <&3 && fail "the secrets went into the file that was at .import-tmp"
exec 3<&-
ls "$WORK"/old.secrets.* >/dev/null 2>&1 && fail "left behind: $(ls "$WORK"/old.secrets.*)"
# names too long for the importer's key of a storage object ("/backstores/KIND/NAME", 511
# bytes) are refused: cut short, 'keep' and a long name beginning with it would be one key,
# and the LUN naming 'keep' would be served from the long one's file; CHAP users the config
# or secrets file would read otherwise (a '#' comment, quotes taken off) are refused too
python3 - "$FIX/full.json" "$WORK" <<'PY' || fail "making the long-name and CHAP variants"
import copy, json, sys
d = json.load(open(sys.argv[1]))
so = d["storage_objects"]
keep = "k" * (511 - len("/backstores/fileio/"))
so[0]["name"] = keep
so.append(dict(so[0], name=keep + "-other", dev="/var/lib/lio/other.img"))
for t in d["targets"]:
    for tpg in t["tpgs"]:
        for lun in tpg["luns"]:
            if lun["storage_object"] == "/backstores/fileio/db":
                lun["storage_object"] = "/backstores/fileio/" + keep
json.dump(d, open(sys.argv[2] + "/long-so.json", "w"))
for name, path in [("chap-hash", ("targets", 0, "tpgs", 0, "node_acls", 0, "chap_userid")),
                   ("chap-quote", ("targets", 0, "tpgs", 0, "node_acls", 0, "chap_mutual_userid")),
                   ("chap-disc", ("fabric_modules", 0, "discovery_userid"))]:
    d = json.load(open(sys.argv[1]))
    o = d
    for k in path[:-1]:
        o = o[k]
    assert path[-1] in o, name
    o[path[-1]] = "#host-a" if name != "chap-quote" else '"store1"'
    json.dump(d, open("%s/%s.json" % (sys.argv[2], name), "w"))
PY
for f in long-so:"name too long" chap-hash:"CHAP user '#host-a' cannot" \
    chap-quote:"CHAP user '\"store1\"' cannot" chap-disc:"CHAP user '#host-a' cannot"; do
    "$CTL_BIN" import lio "$WORK/${f%%:*}.json" -o "$WORK/keep.conf" --secrets "$WORK/inj.secrets" \
        2>"$WORK/report"
    RC=$?
    [ $RC -eq 2 ] && grep -qF "${f#*:}" "$WORK/report" || fail "${f%%:*}: exit $RC: $(cat "$WORK/report")"
    [ "$(cat "$WORK/keep.conf")" = keep ] && [ ! -e "$WORK/inj.secrets" ] || fail "${f%%:*}: written"
done

note "the import serves; hosts read LIO's identity back"
# Test variant: scratch files for the block device and the file, RAM for the RBD image (no Ceph
# here), the test's port for LIO's, and no IPv6 portal.
sed -e "s|file:/var/lib/lio/db.img|file:$WORK/db.img|" -e "s|file:/dev/vg0/logs|file:$WORK/logs.img,size=8M|" \
    -e "s|rbd:vmpool/vm-disk-1,size=|ram:|" -e "s|127.0.0.1:3260|127.0.0.1:@PORT@|" -e '/\[::1\]/d' \
    "$C" >"$WORK/serve.conf"
echo "ctl-socket = $SOCK" >>"$WORK/serve.conf.head"
cat "$WORK/serve.conf.head" "$WORK/serve.conf" >"$WORK/serve2.conf"
start_target_config "$WORK/serve2.conf"
# expected: one line per LUN as a host sees it, the NAA from the rule
expect() { # WWN PRODUCT REVISION
    printf 'Vendor:LIO-ORG \nProduct:%-16s\nRevision:%-4s\nSerial:[%s]\nNAA:%s\n' "$2" "$3" "$1" \
        "$(python3 "$IT_DIR/lio_naa.py" "$1")" || fail "lio_naa.py"
}
# seen URL: what iscsi-inq reads (standard INQUIRY, VPD 80h, VPD 83h's NAA designator)
seen() {
    local out
    run_to 30 iscsi-inq "$@" || fail "iscsi-inq $*: $(cat "$WORK/cmd.out")"
    grep -E "^(Vendor|Product|Revision):" "$WORK/cmd.out"
    run_to 30 iscsi-inq -e 1 -c 128 "$@" || fail "iscsi-inq VPD 80h $*: $(cat "$WORK/cmd.out")"
    sed -n 's/^Unit Serial Number:/Serial:/p' "$WORK/cmd.out"
    run_to 30 iscsi-inq -e 1 -c 131 "$@" || fail "iscsi-inq VPD 83h $*: $(cat "$WORK/cmd.out")"
    python3 - "$WORK/cmd.out" <<'PY'
import sys
t = open(sys.argv[1], "rb").read()
# iscsi-inq prints a binary designator's bytes raw between [ and ]; an NAA 6h one is 16 bytes
mark = b"Designator Type:(3) NAA\nDesignator:["
at = t.find(mark)
d = t[at + len(mark):at + len(mark) + 17] if at >= 0 else b""
print("NAA:" + (d[:16].hex() if len(d) == 17 and d[16:] == b"]" else "none " + repr(d)))
PY
}
url() { echo "iscsi://$1%$2@127.0.0.1:$PORT/$3/$4?target_user=store1&target_password=store1-mutual-01"; }
check() { # WHAT WWN PRODUCT REVISION iscsi-inq-args...
    local what=$1 w=$2 p=$3 r=$4
    shift 4
    diff <(expect "$w" "$p" "$r") <(seen "$@") >"$WORK/diff" || fail "$what: $(cat "$WORK/diff")"
}
DB=d27e5d89-8829-468b-90ce-4ef8c02f07fe
LOGS=5b9485a9-d431-4afc-92a5-e3b1222dbae9
SCRATCH=0A1B2C3D-4E5F-4061-8293-A4B5C6D7E8F9
VM=f3a0c9e2-7b61-4d28-9e45-1c2b3a4d5e6f
check "host-a LUN 0 (fileio)" $DB FILEIO 4.0 -i $HA "$(url host-a host-a-secret-01 $SH 0)"
check "host-a LUN 1 (block)" $LOGS IBLOCK 4.0 -i $HA "$(url host-a host-a-secret-01 $SH 1)"
check "host-a LUN 2 (user:rbd)" $VM "TCMU device" 0002 -i $HA "$(url host-a host-a-secret-01 $SH 2)"
check "host-b LUN 0 (ramdisk)" $SCRATCH RAMDISK-MCP 4.0 -i $HB "iscsi://host-b%host-b-secret-02@127.0.0.1:$PORT/$SH/0"
check "host-b LUN 5 (fileio, write-protected)" $DB FILEIO 4.0 -i $HB "iscsi://host-b%host-b-secret-02@127.0.0.1:$PORT/$SH/5"
check "lab LUN 0 (any initiator)" 9c8b7a69-5847-4362-a514-0f1e2d3c4b5a RAMDISK-MCP 4.0 \
    -i iqn.2026-11.org.linerate:anyone "iscsi://127.0.0.1:$PORT/$LAB/0"
# VPD 80h and 83h byte for byte as LIO lays them out (vpd-style=lio), the expected pages built
# by lio_vpd.py from the documented rule (checked there against a host's published udev
# properties of a LIO disk): raw through hostile.py's initiator, and as libiscsi decodes them
python3 "$IT_DIR/lio_vpd.py" raw "$PORT" $LAB 0 9c8b7a69-5847-4362-a514-0f1e2d3c4b5a RAMDISK-MCP 1 \
    2>"$WORK/vpd" || fail "lab LUN 0: $(cat "$WORK/vpd")"
inq_pages() { # WHAT WWN PRODUCT URL
    run_to 30 iscsi-inq -i $HA -e 1 -c 128 "$4" && cp "$WORK/cmd.out" "$WORK/p80" &&
        run_to 30 iscsi-inq -i $HA -e 1 -c 131 "$4" && cp "$WORK/cmd.out" "$WORK/p83" ||
        fail "$1: iscsi-inq: $(cat "$WORK/cmd.out")"
    python3 "$IT_DIR/lio_vpd.py" inq "$WORK/p80" "$WORK/p83" $SH "$2" "$3" 2>"$WORK/vpd" ||
        fail "$1: $(cat "$WORK/vpd")"
}
inq_pages "host-a LUN 0 (fileio)" $DB FILEIO "$(url host-a host-a-secret-01 $SH 0)"
inq_pages "host-a LUN 1 (block)" $LOGS IBLOCK "$(url host-a host-a-secret-01 $SH 1)"
# discovery as with LIO: host-b (CHAP user host-b) discovers through discovery CHAP as
# "discover" (mutual as disc-target) and finds its target; a wrong discovery secret finds nothing
disc() { echo "iscsi://discover%$1@127.0.0.1:$PORT?target_user=disc-target&target_password=disc-mutual-0002"; }
run_to 30 iscsi-ls -i $HB "$(disc disc-secret-0001)" && grep -q "Target:$SH Portal:127.0.0.1:$PORT,1" \
    "$WORK/cmd.out" || fail "host-b's discovery: $(cat "$WORK/cmd.out")"
run_to 30 iscsi-ls -i $HB "$(disc wrong-secret-0001)" && fail "discovery with a wrong secret"
grep -q "$SH" "$WORK/cmd.out" && fail "a wrong discovery secret listed $SH: $(cat "$WORK/cmd.out")"
# write-protect and the ACLs hold
run_to 30 iscsi-inq -i iqn.2026-11.org.linerate:stranger "iscsi://127.0.0.1:$PORT/$SH/0" &&
    fail "an initiator without an ACL logged in"
run_to 30 iscsi-inq -i $HB "iscsi://host-b%wrong-secret-000@127.0.0.1:$PORT/$SH/0" &&
    fail "host-b logged in with a wrong secret"
# mutual CHAP: the target proves itself with the imported secret, and only with it
run_to 30 iscsi-inq -i $HA \
    "iscsi://host-a%host-a-secret-01@127.0.0.1:$PORT/$SH/0?target_user=store1&target_password=not-the-secret" &&
    fail "host-a accepted a target that did not know the mutual secret"

note "--check: the running linerate against the LIO configuration"
ctl import lio "$FIX/full.json" --check >"$WORK/check" 2>&1 || fail "--check: $(cat "$WORK/check")"
grep -qx "0 differences a host would see between $FIX/full.json and the running linerate" \
    "$WORK/check" || fail "--check: $(cat "$WORK/check")"
ctl_ok add lun $SH ram:1M --lun 9
ctl import lio "$FIX/full.json" --check >"$WORK/check" 2>&1 && fail "--check missed an added LUN"
grep -qx "target $SH LUN 9: served, but not in the LIO configuration" "$WORK/check" ||
    fail "--check, added LUN: $(cat "$WORK/check")"
stop_target
[ "$STOP_RC" = 0 ] || fail "exit code $STOP_RC at stop"
# another NAA for the file's LUN, linerate's VPD layout for the block device's, and host-b's
# write-protected map made writable
sed -e 's/naa=6001405d27e5d898829468b90ce4ef8c/naa=6001405d27e5d898829468b90ce4ef8d/' \
    -e '/^lun 1 = /s/,vpd-style=lio//' -e 's/^map = 5 0,ro$/map = 5 0/' "$WORK/serve2.conf" \
    >"$WORK/changed.conf"
start_target_config "$WORK/changed.conf"
ctl import lio "$FIX/full.json" --check >"$WORK/check" 2>&1 && fail "--check missed the changes"
grep -qx "target $SH LUN 0: naa '6001405d27e5d898829468b90ce4ef8d', LIO answered '6001405d27e5d898829468b90ce4ef8c'" \
    "$WORK/check" && grep -qx "target $SH host $HB: its LUN 5 is not what LIO mapped" "$WORK/check" &&
    grep -qx "target $SH LUN 1: vpd_style 'linerate', LIO answered 'lio'" "$WORK/check" &&
    grep -qx "3 differences a host would see between $FIX/full.json and the running linerate" \
        "$WORK/check" || fail "--check, changed: $(cat "$WORK/check")"
stop_target
[ "$STOP_RC" = 0 ] || fail "exit code $STOP_RC at stop"
note "PASS"
