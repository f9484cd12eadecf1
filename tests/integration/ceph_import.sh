#!/usr/bin/env bash
# linerate-ctl import ceph-iscsi (issue 31 items 2 and 4): ceph-iscsi's gateway.conf, hand-written
# in versions 3, 4 and 11 (ceph-iscsi/: two gateways, host groups, mutual CHAP, disks in other pools
# than rbd), becomes one linerate.conf per gateway that `linerate-target --check` takes, with
# each gateway its own ALUA group and the others its peers, the disk's owner active/optimized,
# LIO's identity on every LUN, and a mode-600 secrets file; what does not carry is reported
# and makes the exit 1; malformed, truncated and other versions exit 2 and write nothing.
#   ceph_import.sh        the files only (no cluster)
#   ceph_import.sh rbd    on scripts/ceph-mini's cluster: the version 11 object (what ceph-iscsi
#                         3.x keeps) written with `rados put`, imported through librados, both
#                         gateways started from the two files; the hosts log in with the
#                         imported CHAP, see their maps and LIO's VPD 80h/83h through each
#                         gateway, any host the acl_enabled false target's LUN with its CHAP
#                         (skipped, 77, without Ceph)
set -u
source "$(dirname "$0")/lt_lib.sh"
need python3
mode=${1:-files}
CTL_BIN=${LINERATE_CTL:-$(dirname "$LT")/linerate-ctl}
[ -x "$CTL_BIN" ] || fail "$CTL_BIN is not built"
FIX=$IT_DIR/ceph-iscsi
IGW=iqn.2003-01.com.redhat.iscsi-gw:iscsi-igw
HA=iqn.1994-05.com.redhat:host-a

# has FILE TEXT...: every TEXT (may span lines) is in FILE
has() {
    python3 - "$@" <<'PY' || fail "$1 lacks what is expected:
$(cat "$1")"
import sys
t = open(sys.argv[1]).read()
miss = [n for n in sys.argv[2:] if n not in t]
sys.exit("missing: %r" % miss if miss else 0)
PY
}
# refused WHAT MESSAGE ARGS...: exit 2, MESSAGE on stderr, nothing written to $WORK/keep
refused() {
    local what=$1 msg=$2
    shift 2
    rm -rf "$WORK/keep" && mkdir "$WORK/keep"
    "$CTL_BIN" import ceph-iscsi "$@" -o "$WORK/keep" --secrets "$WORK/keep/secrets" \
        >"$WORK/stdout" 2>"$WORK/report"
    local rc=$?
    [ $rc -eq 2 ] || fail "$what: exit $rc, not 2: $(cat "$WORK/report")"
    [ -z "$(ls -A "$WORK/keep")" ] && [ ! -s "$WORK/stdout" ] ||
        fail "$what: something written: $(ls -A "$WORK/keep")"
    grep -qF -- "$msg" "$WORK/report" && grep -q "nothing written" "$WORK/report" ||
        fail "$what: $(cat "$WORK/report")"
}

if [ "$mode" = files ]; then
    note "version 4: one file per gateway, a secrets file of mode 600"
    mkdir "$WORK/v4"
    "$CTL_BIN" import ceph-iscsi "$FIX/v4.json" -o "$WORK/v4" --secrets "$WORK/v4/secrets" \
        2>"$WORK/report"
    RC=$?
    # exit 1: SendTargets through one gateway lists only its own portal, nothing else a host
    # sees; CHAP targets listed to every discovery session as LIO did (discovery-chap-match)
    [ $RC -eq 1 ] || fail "v4: exit $RC: $(cat "$WORK/report")"
    [ "$(grep -c "^NOT CARRIED: " "$WORK/report")" = 1 ] &&
        grep -q "^NOT CARRIED: target $IGW: SendTargets through one ceph-iscsi gateway listed every" "$WORK/report" &&
        grep -q "^note: target $IGW: 3 initiator(s) with CHAP: discovery-chap-match = no" "$WORK/report" &&
        grep -q '^note: targets\["'$IGW'"\].controls.immediate_data: ' "$WORK/report" ||
        fail "v4 report: $(cat "$WORK/report")"
    [ "$(ls "$WORK/v4")" = "gw-a.conf
gw-b.conf
secrets" ] || fail "v4 files: $(ls "$WORK/v4")"
    [ "$(stat -c %a "$WORK/v4/secrets")" = 600 ] || fail "secrets mode $(stat -c %a "$WORK/v4/secrets")"
    [ "$(sort "$WORK/v4/secrets")" = "disc-target disc-mutual-0002
discover disc-secret-0001
esx esx-cluster-secret
host-a host-a-secret-01
igw-target igw-mutual-001" ] || fail "secrets: $(cat "$WORK/v4/secrets")"
    grep -qE "secret-0|mutual-0|cluster-secret" "$WORK"/v4/*.conf && fail "a secret in a config"
    ID="vendor=LIO-ORG,product=TCMU device,revision=0002"
    # tcmu-runner's VPD 80h/83h, the config string ceph-iscsi gave it (POOL/IMAGE [TIMEOUT])
    tc() { echo ",vpd-style=tcmu,tcmu-config=rbd/$1;osd_op_timeout=${2:-30}"; }
    # the lines the importer writes, shared by the versions below:
    # tpg N: gateway N's portal 127.0.0.N:3260 and target port group (the other one its peer)
    tpg() {
        printf 'portal = 127.0.0.%s:3260\nalua-group = %s\nalua-state = active/non-optimized\nalua-peer = %s:active/non-optimized' \
            "$1" "$1" $((3 - $1))
    }
    # entries VAR ESX0 ESX3 HOST1: VAR = the [group esx] and [host $HA] entries, the group's
    # LUNs 0 and 3 mapped to ESX0 and ESX3, the host's LUN 1 to HOST1
    entries() {
        printf -v "$1" '\n[group esx]\ninitiator = iqn.1998-01.com.vmware:esx-1\ninitiator = iqn.1998-01.com.vmware:esx-2\nchap-user = esx\nmap = 0 %s\nmap = 3 %s\n\n[host %s]\nchap-user = host-a\nchap-mutual-user = igw-target\nmap = 0 0\nmap = 1 %s\n' \
            "$2" "$3" "$HA" "$4"
    }
    # common VAR DIR: VAR = the global lines, secrets in DIR and discovery CHAP
    common() {
        printf -v "$1" 'chap-secrets = %s/secrets\ndiscovery-chap-match = no\ndiscovery-chap-user = discover\ndiscovery-chap-mutual-user = disc-target\n' "$2"
    }
    # disk N POOL/IMAGE [TIMEOUT]: the LUN line of one of the fixtures' disks (v4 and v11)
    disk() {
        local sn naa
        case $2 in
        rbd/disk_1) sn=d27e5d89-8829-468b-90ce-4ef8c02f07fe naa=6001405d27e5d898829468b90ce4ef8c ;;
        rbd/disk_2) sn=7c0e2a4b-93d1-4f6e-b8a5-2d9e6f1c3b70 naa=60014057c0e2a4b93d14f6eb8a52d9e6 ;;
        vmpool/vm-disk) sn=5b9485a9-d431-4afc-92a5-e3b1222dbae9 naa=60014055b9485a9d4314afc92a5e3b12 ;;
        esac
        echo "lun $1 = rbd:$2,$ID,serial=$sn,naa=$naa$(tc "$2" "${3:-}")"
    }
    L0=$(disk 0 rbd/disk_1) L1=$(disk 1 rbd/disk_2) L2=$(disk 2 vmpool/vm-disk)
    entries ENTRIES 1 2 2
    common COMMON "$WORK/v4"
    has "$WORK/v4/gw-a.conf" "$COMMON" "[target $IGW]
$(tpg 1)
$L0,alua=active/optimized
$L1,alua-peer=2:active/optimized
$L2,alua=active/optimized
$ENTRIES"
    has "$WORK/v4/gw-b.conf" "$COMMON" "[target $IGW]
$(tpg 2)
$L0,alua-peer=1:active/optimized
$L1,alua=active/optimized
$L2,alua-peer=1:active/optimized
$ENTRIES"
    for g in gw-a gw-b; do
        run_to 30 "$LT" --check --config "$WORK/v4/$g.conf" || fail "--check $g: $(cat "$WORK/cmd.out")"
        grep -q "OK: 1 target, 3 LUNs, 1 portal" "$WORK/cmd.out" || fail "--check $g: $(cat "$WORK/cmd.out")"
    done

    note "version 3, one gateway: a group whose members have their own CHAP users"
    "$CTL_BIN" import ceph-iscsi "$FIX/v3.json" --gateway ceph-gw-2 -o "$WORK/v3.conf" \
        --secrets "$WORK/v3.secrets" 2>"$WORK/report"
    RC=$?
    [ $RC -eq 1 ] && [ "$(grep -c "^NOT CARRIED: " "$WORK/report")" = 1 ] &&
        grep -qF 'note: groups["backup"]: members with their own CHAP users' "$WORK/report" &&
        grep -qF "note: controls.dataout_timeout: " "$WORK/report" || fail "v3: exit $RC: $(cat "$WORK/report")"
    has "$WORK/v3.conf" "chap-secrets = $WORK/v3.secrets
discovery-chap-match = no
" "[target iqn.2003-01.com.redhat.iscsi-gw:ceph-igw]
$(tpg 2)
lun 0 = rbd:rbd/backup,$ID,serial=0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9,naa=60014050a1b2c3d4e5f40618293a4b5c$(tc rbd/backup),alua=active/optimized
lun 1 = rbd:ssd/sql-data,$ID,serial=9c8b7a69-5847-4362-a514-0f1e2d3c4b5a,naa=60014059c8b7a6958474362a5140f1e2$(tc ssd/sql-data),alua-peer=1:active/optimized
" "
[host iqn.2001-04.com.example:node-1]
chap-user = node-1
map = 2 0

[host iqn.2001-04.com.example:node-2]
chap-user = node-2
map = 2 0

[host iqn.1991-05.com.microsoft:win-1]
chap-user = win-1
map = 0 1
"
    grep -q "^discovery-chap-user" "$WORK/v3.conf" && fail "v3 has no discovery auth: $(cat "$WORK/v3.conf")"
    [ "$(stat -c %a "$WORK/v3.secrets")" = 600 ] || fail "v3 secrets mode"
    run_to 30 "$LT" --check --config "$WORK/v3.conf" || fail "--check v3: $(cat "$WORK/cmd.out")"

    note "version 11 (ceph-iscsi 3.x): POOL/IMAGE disks, lun_id, separate CHAP keys, FQDN names"
    mkdir "$WORK/v11"
    "$CTL_BIN" import ceph-iscsi "$FIX/v11.json" -o "$WORK/v11" --secrets "$WORK/v11/secrets" \
        2>"$WORK/report"
    RC=$?
    LAB=iqn.2003-01.com.redhat.iscsi-gw:lab
    # exit 1 for SendTargets only (once per target), as version 4
    [ $RC -eq 1 ] && [ "$(grep -c "^NOT CARRIED: " "$WORK/report")" = 2 ] &&
        grep -q "^NOT CARRIED: target $LAB: SendTargets through one" "$WORK/report" &&
        grep -q "^note: target $LAB: 1 target with CHAP: discovery-chap-match = no" "$WORK/report" &&
        ! grep -q "$LAB has no client" "$WORK/report" || fail "v11: exit $RC: $(cat "$WORK/report")"
    [ "$(ls "$WORK/v11")" = "gw-a.example.com.conf
gw-b.example.com.conf
secrets" ] || fail "v11 files: $(ls "$WORK/v11")"
    [ "$(sort "$WORK/v11/secrets")" = "disc-target disc-mutual-0002
discover disc-secret-0001
esx esx-cluster-secret
host-a host-a-secret-01
igw-target igw-mutual-001
lab lab-secret-0001" ] || fail "v11 secrets: $(cat "$WORK/v11/secrets")"
    # the target's LUNs by their lun_id (not the sorted order: vm-disk is 1, disk_2 is 2)
    M0=$(disk 0 rbd/disk_1 45) M1=$(disk 1 vmpool/vm-disk) M2=$(disk 2 rbd/disk_2)
    LABL="lun 0 = rbd:rbd/lab_disk,$ID,serial=3f6c1d2e-8a9b-4c7d-9e0f-1a2b3c4d5e6f,naa=60014053f6c1d2e8a9b4c7d9e0f1a2b3$(tc rbd/lab_disk)"
    entries ENTRIES11 2 1 1
    common COMMON11 "$WORK/v11"
    # acl_enabled false: no entries, the target's own CHAP user; every initiator sees its LUNs
    has "$WORK/v11/gw-a.example.com.conf" "$COMMON11" "[target $IGW]
$(tpg 1)
$M0,alua=active/optimized
$M1,alua=active/optimized
$M2,alua-peer=2:active/optimized
$ENTRIES11
[target $LAB]
$(tpg 1)
$LABL,alua-peer=2:active/optimized
chap-user = lab
"
    has "$WORK/v11/gw-b.example.com.conf" "$COMMON11" "[target $IGW]
$(tpg 2)
$M0,alua-peer=1:active/optimized
$M1,alua-peer=1:active/optimized
$M2,alua=active/optimized
$ENTRIES11
[target $LAB]
$(tpg 2)
$LABL,alua=active/optimized
chap-user = lab
"
    [ "$(grep -c '^\[host\|^\[group' "$WORK/v11/gw-a.example.com.conf")" = 2 ] ||
        fail "v11: entries in the acl_enabled false target"
    for g in gw-a gw-b; do
        run_to 30 "$LT" --check --config "$WORK/v11/$g.example.com.conf" || fail "--check v11 $g: $(cat "$WORK/cmd.out")"
        grep -q "OK: 2 targets, 4 LUNs, 1 portal" "$WORK/cmd.out" || fail "--check v11 $g: $(cat "$WORK/cmd.out")"
    done

    note "version 11, an encrypted password: the user kept, the secret reported as not carried"
    # variant NAME: the v11 fixture changed by the Python on stdin (d is its JSON), imported
    # into $WORK/NAME, the report in $WORK/report; RC is the exit code
    variant() {
        python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.stdin.read())
json.dump(d, open(sys.argv[2], "w"))' "$FIX/v11.json" "$WORK/$1.json" || fail "making $1.json"
        rm -rf "${WORK:?}/$1" && mkdir "$WORK/$1"
        "$CTL_BIN" import ceph-iscsi "$WORK/$1.json" -o "$WORK/$1" --secrets "$WORK/$1/secrets" \
            2>"$WORK/report"
        RC=$?
    }
    variant enc <<'PY'
a = d["targets"]["iqn.2003-01.com.redhat.iscsi-gw:iscsi-igw"]["clients"]["iqn.1994-05.com.redhat:host-a"]["auth"]
a["mutual_password"] = "QmFzZTY0IG9mIGFuIFJTQSBPQUVQIGNpcGhlcnRleHQ="
a["mutual_password_encryption_enabled"] = True
PY
    [ $RC -eq 1 ] && [ "$(grep -c "^NOT CARRIED: " "$WORK/report")" = 3 ] &&
        grep -qF "NOT CARRIED: targets[\"$IGW\"].clients[\"$HA\"].auth: the mutual CHAP password of 'igw-target' is encrypted with the gateways' key: not carried; decrypt it on a gateway (base64 -d | openssl pkeyutl -decrypt -inkey /etc/ceph/iscsi-gateway.key" "$WORK/report" ||
        fail "encrypted: exit $RC: $(cat "$WORK/report")"
    grep -q "^igw-target " "$WORK/enc/secrets" && fail "an encrypted secret in the secrets file"
    grep -qx "chap-mutual-user = igw-target" "$WORK/enc/gw-a.example.com.conf" ||
        fail "encrypted: the mutual user is not kept: $(cat "$WORK/enc/gw-a.example.com.conf")"

    note "version 11: a gateway with two addresses, a disk on the kernel's rbd backstore"
    variant multi <<'PY'
t = d["targets"]["iqn.2003-01.com.redhat.iscsi-gw:iscsi-igw"]
t["ip_list"] = ["127.0.0.1", "127.0.0.3", "127.0.0.2"]
t["portals"]["gw-a.example.com"]["portal_ip_addresses"] = ["127.0.0.1", "127.0.0.3"]
d["disks"]["rbd/lab_disk"]["backstore"] = "rbd"
PY
    [ $RC -eq 1 ] && [ "$(grep -c "^NOT CARRIED: " "$WORK/report")" = 4 ] &&
        grep -qF "NOT CARRIED: targets[\"$IGW\"].portals[\"gw-a.example.com\"]: several addresses, each a TPG of its own in LIO: linerate serves them all under the first one's group 1" "$WORK/report" &&
        grep -qF "NOT CARRIED: disks[\"rbd/lab_disk\"]: backstore 'rbd' (target_core_rbd): served as an RBD image" "$WORK/report" ||
        fail "multi: exit $RC: $(cat "$WORK/report")"
    # gw-a: both addresses under its group 1; gw-b's group is 3 (its address's place in ip_list)
    has "$WORK/multi/gw-a.example.com.conf" "[target $IGW]
portal = 127.0.0.1:3260
portal = 127.0.0.3:3260
alua-group = 1
alua-state = active/non-optimized
alua-peer = 3:active/non-optimized
$M0,alua=active/optimized
$M1,alua=active/optimized
$M2,alua-peer=3:active/optimized
"
    has "$WORK/multi/gw-b.example.com.conf" "[target $IGW]
portal = 127.0.0.2:3260
alua-group = 3
alua-state = active/non-optimized
alua-peer = 1:active/non-optimized
$M0,alua-peer=1:active/optimized
"
    run_to 30 "$LT" --check --config "$WORK/multi/gw-a.example.com.conf" || fail "--check multi: $(cat "$WORK/cmd.out")"

    note "a secret the secrets file cannot hold: the CHAP user kept, so no login without CHAP"
    python3 - "$FIX/v11.json" "$WORK/space.json" "$WORK/eq.json" <<'PY' || fail "making space.json"
import json, sys
d = json.load(open(sys.argv[1]))
a = d["targets"]["iqn.2003-01.com.redhat.iscsi-gw:iscsi-igw"]["clients"]["iqn.1994-05.com.redhat:host-a"]["auth"]
a["password"] = "a secret with spaces"
json.dump(d, open(sys.argv[2], "w"))
a["username"] = "host=a"
json.dump(d, open(sys.argv[3], "w"))
# users the config would read as a comment or without their quotes (v11 and v4 forms)
a["username"] = "#host-a"
json.dump(d, open(sys.argv[3].replace("eq.json", "hash.json"), "w"))
d = json.load(open(sys.argv[1].replace("v11.json", "v4.json")))
d["discovery_auth"]["chap_mutual"] = '"disc-target"/disc-mutual-0002'
json.dump(d, open(sys.argv[3].replace("eq.json", "quote.json"), "w"))
PY
    rm -rf "$WORK/space" && mkdir "$WORK/space"
    "$CTL_BIN" import ceph-iscsi "$WORK/space.json" -o "$WORK/space" --secrets "$WORK/space/secrets" \
        2>"$WORK/report"
    RC=$?
    [ $RC -eq 1 ] && grep -qF "NOT CARRIED: targets[\"$IGW\"].clients[\"$HA\"].auth: CHAP user or secret with characters the secrets file cannot hold: add 'host-a SECRET' by hand" "$WORK/report" ||
        fail "space: exit $RC: $(cat "$WORK/report")"
    has "$WORK/space/gw-a.example.com.conf" "[host $HA]
chap-user = host-a
chap-mutual-user = igw-target
"
    # the gateway refuses to start until the admin adds the secret
    run_to 30 "$LT" --check --config "$WORK/space/gw-a.example.com.conf" && fail "space: --check passed"
    grep -q "no secret for CHAP user host-a" "$WORK/cmd.out" || fail "space: $(cat "$WORK/cmd.out")"

    note "group members with one CHAP user but other secrets, disk keys with dots in them"
    python3 - "$FIX" "$WORK" <<'PY' || fail "making pw.json, dot7.json, dot3.json"
import json, sys
F, W = sys.argv[1:]
d = json.load(open(F + "/v11.json"))
a = d["targets"]["iqn.2003-01.com.redhat.iscsi-gw:iscsi-igw"]["clients"]["iqn.1998-01.com.vmware:esx-2"]["auth"]
a["password"] = "esx-2-own-secret"
json.dump(d, open(W + "/pw.json", "w"))
a["password"] = "esx-cluster-secret"
a["password_encryption_enabled"] = True
json.dump(d, open(W + "/enc2.json", "w"))
# a version 11 key splits at its '/', a version 3 key with two dots is ambiguous
for v, old, new in ((11, "rbd/lab_disk", "rbd.ssd/lab_disk"), (3, "rbd.backup", "rbd.ssd.backup")):
    d = json.load(open(F + "/v%d.json" % v))
    k = d["disks"][old]
    del k["pool"], k["image"]
    open(W + "/dot%d.json" % v, "w").write(json.dumps(d).replace('"%s"' % old, '"%s"' % new))
PY
    ESX2="NOT CARRIED: targets[\"$IGW\"].clients[\"iqn.1998-01.com.vmware:esx-2\"].auth:"
    for f in pw enc2 dot11 dot3; do
        rm -rf "$WORK/$f" && mkdir "$WORK/$f"
        "$CTL_BIN" import ceph-iscsi "$WORK/$f.json" -o "$WORK/$f" --secrets "$WORK/$f/secrets" \
            2>"$WORK/$f.report"
        [ $? -eq 1 ] || fail "$f: exit not 1: $(cat "$WORK/$f.report")"
    done
    # each member its own [host]; the second secret reported, never the first one's taken for it
    for f in pw enc2; do
        has "$WORK/$f/gw-a.example.com.conf" "[host iqn.1998-01.com.vmware:esx-1]
chap-user = esx" "[host iqn.1998-01.com.vmware:esx-2]
chap-user = esx"
        grep -q "^\[group esx\]" "$WORK/$f/gw-a.example.com.conf" && fail "$f: one [group] for both"
    done
    grep -qF "$ESX2 CHAP user 'esx' has another secret elsewhere" "$WORK/pw.report" ||
        fail "pw: $(cat "$WORK/pw.report")"
    grep -qF "$ESX2 the CHAP password of 'esx' is encrypted" "$WORK/enc2.report" ||
        fail "enc2: $(cat "$WORK/enc2.report")"
    grep -q "^lun 0 = rbd:rbd.ssd/lab_disk," "$WORK/dot11/gw-a.example.com.conf" ||
        fail "dot11: $(cat "$WORK/dot11.report" "$WORK/dot11/gw-a.example.com.conf")"
    grep -qF "NOT CARRIED: disks[\"rbd.ssd.backup\"]: no 'pool' and 'image', and the key has more than one '.'" "$WORK/dot3.report" ||
        fail "dot3: $(cat "$WORK/dot3.report")"
    grep -q "rbd.ssd.backup\|rbd/ssd.backup" "$WORK"/dot3/*.conf && fail "dot3: the ambiguous disk served"
    # imported again over the files: each keeps the mode its owner gave it
    chmod 640 "$WORK/pw/gw-a.example.com.conf" && chmod 400 "$WORK/pw/secrets"
    "$CTL_BIN" import ceph-iscsi "$WORK/pw.json" -o "$WORK/pw" --secrets "$WORK/pw/secrets" 2>/dev/null
    [ "$(stat -c %a "$WORK/pw/gw-a.example.com.conf" "$WORK/pw/gw-b.example.com.conf" "$WORK/pw/secrets")" = "640
644
400" ] || fail "modes not kept: $(stat -c '%a %n' "$WORK"/pw/*)"

    note "bad input: exit 2, the place named, nothing written"
    refused "a CHAP user a config line cannot hold" "CHAP user 'host=a' cannot be written into linerate.conf" "$WORK/eq.json"
    refused "a CHAP user beginning with '#'" "CHAP user '#host-a' cannot be written" "$WORK/hash.json"
    refused "a CHAP user in quotes" "CHAP user '\"disc-target\"' cannot be written" "$WORK/quote.json"
    python3 - "$FIX/v11.json" "$WORK/v12.json" <<'PY' || fail "making v12.json"
import json, sys
d = json.load(open(sys.argv[1]))
d["version"] = 12
json.dump(d, open(sys.argv[2], "w"))
PY
    refused "version 12" "v12.json: version: 12: this importer reads gateway.conf versions 3 to 11" "$WORK/v12.json"
    refused "malformed" "malformed.json: targets[\"$IGW\"].clients[\"$HA\"].luns[\"vmpool.vm-disk\"]: 'lun_id' is not an integer" \
        "$FIX/malformed.json"
    refused "truncated" "truncated.json:" "$FIX/truncated.json"
    grep -qE "truncated.json:[0-9]+:[0-9]+: not valid JSON" "$WORK/report" || fail "truncated: $(cat "$WORK/report")"
    refused "unknown gateway" "gateways: no gateway 'gw-c' (--gateway)" "$FIX/v4.json" --gateway gw-c
    refused "no such file" "nope.json: no such file, and not POOL/OBJECT" "$WORK/nope.json"
    # a string that would become lines of the config: refused
    python3 - "$FIX/v4.json" "$WORK/inject.json" <<'PY' || fail "making inject.json"
import json, sys
d = json.load(open(sys.argv[1]))
d["disks"]["rbd.disk_2"]["image"] = "disk_2\n[target iqn.x:evil]"
json.dump(d, open(sys.argv[2], "w"))
PY
    refused "injection" "the RBD pool/image 'rbd/disk_2" "$WORK/inject.json"
    # names longer than the importer's buffers: refused, never cut short into another image
    # (a 1100-byte pool lost its '/' and crashed the importer) nor written past their end
    python3 - "$FIX/v4.json" "$WORK" <<'PY' || fail "making the long-name variants"
import json, sys
d = json.load(open(sys.argv[1]))
d["disks"]["rbd.disk_2"]["pool"] = "p" * 1100
json.dump(d, open(sys.argv[2] + "/longpool.json", "w"))
d = json.load(open(sys.argv[1]))
t = d["targets"]
t["iqn.2003-01.x:" + "t" * 999] = t.pop("iqn.2003-01.com.redhat.iscsi-gw:iscsi-igw")
json.dump(d, open(sys.argv[2] + "/longtarget.json", "w"))
PY
    refused "a pool too long" "disks[\"rbd.disk_2\"]: the RBD pool/image is too long" "$WORK/longpool.json"
    refused "a target too long" "targets: a target name is longer than 223 bytes" "$WORK/longtarget.json"
    "$CTL_BIN" import ceph-iscsi "$FIX/v4.json" >/dev/null 2>"$WORK/report" && fail "CHAP without --secrets"
    grep -q "give --secrets" "$WORK/report" || fail "no --secrets: $(cat "$WORK/report")"
    # one file cannot be written: none is (the secrets and gw-a.conf are taken back)
    rm -rf "$WORK/half" && mkdir -p "$WORK/half/gw-b.conf"
    "$CTL_BIN" import ceph-iscsi "$FIX/v4.json" -o "$WORK/half" --secrets "$WORK/half/secrets" \
        2>"$WORK/report" && fail "import over a directory succeeded"
    [ "$(ls -A "$WORK/half")" = gw-b.conf ] || fail "half written: $(ls -A "$WORK/half")"
    note "PASS"
    exit 0
fi

note "the mini cluster: gateway.conf in RADOS, read through librados"
need iscsi-inq
start_ceph
ceph osd pool create vmpool 8 8 >/dev/null 2>&1 || fail "pool vmpool"
ceph osd pool set vmpool size 1 --yes-i-really-mean-it >/dev/null 2>&1
ceph osd pool application enable vmpool rbd >/dev/null 2>&1
for i in rbd/disk_1 rbd/disk_2 rbd/lab_disk vmpool/vm-disk; do
    rbd create --size 16M "$i" || fail "rbd create $i"
done
rados -p rbd put gateway.conf "$FIX/v11.json" || fail "rados put"
GA=gw-a.example.com
GB=gw-b.example.com
LAB=iqn.2003-01.com.redhat.iscsi-gw:lab
mkdir "$WORK/gw"
# the default object, rbd/gateway.conf (from a directory without such a file)
(cd "$WORK" && "$CTL_BIN" import ceph-iscsi -o gw --secrets gw/secrets) 2>"$WORK/report"
RC=$?
[ $RC -eq 1 ] && [ "$(grep -c "^NOT CARRIED: " "$WORK/report")" = 2 ] || fail "import: exit $RC: $(cat "$WORK/report")"
# what was read through librados is the fixture (printed: a "# ---- gateway" line first)
"$CTL_BIN" import ceph-iscsi "$FIX/v11.json" --gateway $GA --secrets "$WORK/gw/secrets" \
    2>/dev/null | tail -n +2 | cmp -s - "$WORK/gw/$GA.conf" || fail "librados and the file differ"
"$CTL_BIN" import ceph-iscsi rbd/nothing-here --secrets "$WORK/x" 2>"$WORK/report"
[ $? -eq 2 ] && grep -qF "rbd/nothing-here: stat of the object: No such file or directory" \
    "$WORK/report" || fail "a missing object: $(cat "$WORK/report")"

# The two gateways on 127.0.0.1 and 127.0.0.2 as the object says, on test ports for 3260.
gw_conf() { # NAME GATEWAY -> $WORK/NAME.run (with @PORT@)
    { echo "ctl-socket = $WORK/$1.sock"; echo "state-dir = $WORK/$1.state"; } >"$WORK/$1.run"
    sed 's/:3260$/:@PORT@/' "$WORK/gw/$2.conf" >>"$WORK/$1.run"
}
gw_conf gw-a $GA
gw_conf gw-b $GB
start_target_config "$WORK/gw-a.run"
PA=$PORT
PID_A=$LT_PID
cp "$WORK/target.out" "$WORK/a.out"
# gw-b, kept out of lt_lib's single LT_PID: started and stopped here
PID_B=""
trap '[ -n "$PID_B" ] && kill -KILL $PID_B 2>/dev/null; it_cleanup' EXIT
for ((try = 0; try < 20; try++)); do
    PB=$(random_port)
    port_busy "$PB" && continue
    sed "s/@PORT@/$PB/" "$WORK/gw-b.run" >"$WORK/gw-b.conf"
    "$LT" --config "$WORK/gw-b.conf" >"$WORK/b.out" 2>>"$WORK/target.log" &
    PID_B=$!
    for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
        grep -q '^iscsi://' "$WORK/b.out" 2>/dev/null && break 2
        kill -0 $PID_B 2>/dev/null || break
        sleep 0.1
    done
    wait $PID_B
    PID_B=""
done
[ -n "$PID_B" ] || fail "gw-b did not start"

# expected VPD 80h and the NAA designator of 83h as LIO gave them (lio_naa.py: the rule)
vpd() { # URL INITIATOR -> "SERIAL NAA"
    local serial naa
    run_to 30 iscsi-inq -i "$2" -e 1 -c 128 "$1" || fail "VPD 80h $1: $(cat "$WORK/cmd.out")"
    serial=$(sed -n 's/^Unit Serial Number:\[\(.*\)\]$/\1/p' "$WORK/cmd.out")
    run_to 30 iscsi-inq -i "$2" -e 1 -c 131 "$1" || fail "VPD 83h $1: $(cat "$WORK/cmd.out")"
    naa=$(python3 -c '
import sys
t = open(sys.argv[1], "rb").read()
m = b"Designator Type:(3) NAA\nDesignator:["
a = t.find(m) + len(m)
print(t[a:a + 16].hex() if t.find(m) >= 0 and t[a + 16:a + 17] == b"]" else "none")' "$WORK/cmd.out")
    echo "$serial $naa"
}
want() { echo "$1 $(python3 "$IT_DIR/lio_naa.py" "$1")"; }
A_URL="host-a%host-a-secret-01@127.0.0.1:$PA/$IGW"
B_URL="host-a%host-a-secret-01@127.0.0.2:$PB/$IGW"
MUT="target_user=igw-target&target_password=igw-mutual-001"
note "host-a through both gateways, mutual CHAP: its LUN 0 and 1 are LIO's disks"
for u in "$A_URL" "$B_URL"; do
    # standard INQUIRY as tcmu-runner's devices answered it behind LIO
    run_to 30 iscsi-inq -i $HA "iscsi://$u/0?$MUT" || fail "INQUIRY via $u: $(cat "$WORK/cmd.out")"
    [ "$(grep -E "^(Vendor|Product|Revision):" "$WORK/cmd.out")" = "Vendor:LIO-ORG 
Product:TCMU device     
Revision:0002" ] || fail "INQUIRY via $u: $(cat "$WORK/cmd.out")"
    [ "$(vpd "iscsi://$u/0?$MUT" $HA)" = "$(want d27e5d89-8829-468b-90ce-4ef8c02f07fe)" ] ||
        fail "host-a LUN 0 via $u: $(vpd "iscsi://$u/0?$MUT" $HA)"
    [ "$(vpd "iscsi://$u/1?$MUT" $HA)" = "$(want 5b9485a9-d431-4afc-92a5-e3b1222dbae9)" ] ||
        fail "host-a LUN 1 (vmpool) via $u"
    run_to 30 iscsi-inq -i $HA "iscsi://$u/2?$MUT" && fail "host-a sees a LUN 2 via $u"
done
run_to 30 iscsi-inq -i $HA "iscsi://$A_URL/0?target_user=igw-target&target_password=not-the-secret-1" &&
    fail "host-a accepted a gateway that did not know the mutual secret"
run_to 30 iscsi-inq -i $HA "iscsi://host-a%wrong-secret-0001@127.0.0.1:$PA/$IGW/0" &&
    fail "host-a logged in with a wrong secret"
run_to 30 iscsi-inq -i iqn.2026-11.org.linerate:stranger "iscsi://127.0.0.1:$PA/$IGW/0" &&
    fail "an initiator without an entry logged in"
note "an esx host (a group member): its map, LUN 0 and 3, through both gateways"
ESX=iqn.1998-01.com.vmware:esx-2
for p in "127.0.0.1:$PA" "127.0.0.2:$PB"; do
    u="iscsi://esx%esx-cluster-secret@$p/$IGW"
    [ "$(vpd "$u/0" $ESX)" = "$(want 7c0e2a4b-93d1-4f6e-b8a5-2d9e6f1c3b70)" ] || fail "esx LUN 0 via $p"
    [ "$(vpd "$u/3" $ESX)" = "$(want 5b9485a9-d431-4afc-92a5-e3b1222dbae9)" ] || fail "esx LUN 3 via $p"
    for l in 1 2; do
        run_to 30 iscsi-inq -i $ESX "$u/$l" && fail "esx sees a LUN $l via $p"
    done
done
note "the acl_enabled false target: any host, with the target's CHAP, sees its LUN"
LABH=iqn.2026-11.org.linerate:lab-host
for p in "127.0.0.1:$PA" "127.0.0.2:$PB"; do
    [ "$(vpd "iscsi://lab%lab-secret-0001@$p/$LAB/0" $LABH)" = "$(want 3f6c1d2e-8a9b-4c7d-9e0f-1a2b3c4d5e6f)" ] ||
        fail "lab LUN 0 via $p"
    run_to 30 iscsi-inq -i $LABH "iscsi://$p/$LAB/0" && fail "lab target without CHAP via $p"
done
note "discovery with the imported discovery CHAP: each gateway lists the targets, its own portal"
DMUT="target_user=disc-target&target_password=disc-mutual-0002"
for p in "127.0.0.1:$PA" "127.0.0.2:$PB"; do
    run_to 30 iscsi-ls -i $ESX "iscsi://discover%disc-secret-0001@$p?$DMUT" ||
        fail "discovery via $p: $(cat "$WORK/cmd.out")"
    tag=$([ "${p%%:*}" = 127.0.0.1 ] && echo 1 || echo 2)
    [ "$(grep -c "^Target:" "$WORK/cmd.out")" = 2 ] &&
        grep -qx "Target:$IGW Portal:$p,$tag" "$WORK/cmd.out" &&
        grep -qx "Target:$LAB Portal:$p,$tag" "$WORK/cmd.out" ||
        fail "discovery via $p: $(cat "$WORK/cmd.out")"
done
run_to 30 iscsi-ls -i $ESX "iscsi://discover%not-the-secret-01@127.0.0.1:$PA?$DMUT" &&
    fail "discovery with a wrong secret: $(cat "$WORK/cmd.out")"
note "ALUA: each disk active/optimized on its owner's gateway"
"$CTL_BIN" --socket "$WORK/gw-a.sock" --json show luns >"$WORK/a.luns" || fail "show luns a"
"$CTL_BIN" --socket "$WORK/gw-b.sock" --json show luns >"$WORK/b.luns" || fail "show luns b"
python3 - "$WORK/a.luns" "$WORK/b.luns" "$IGW" "$LAB" <<'PY' || fail "ALUA: $(cat "$WORK/a.luns" "$WORK/b.luns")"
import json, sys
# LUNs by their lun_id; the owners: disk_1 (LUN 0) and vm-disk (LUN 1) gw-a = group 1,
# disk_2 (LUN 2) and the lab target's lab_disk gw-b = group 2
igw, lab = sys.argv[3], sys.argv[4]
owner = {(igw, 0): 1, (igw, 1): 1, (igw, 2): 2, (lab, 0): 2}
for me, f in ((1, sys.argv[1]), (2, sys.argv[2])):
    luns = {(r["target"], r["lun"]): r["alua"] for r in json.load(open(f))}
    assert sorted(luns) == sorted(owner), luns
    for n, a in luns.items():
        want = {g: "active/optimized" if g == owner[n] else "active/non-optimized" for g in (1, 2)}
        got = {g["group"]: g["state"] for g in a["groups"]}
        assert a["group"] == me and got == want, (me, n, a)
PY
note "--check: each running gateway against what its ceph-iscsi gateway served"
for g in "a $GA" "b $GB"; do
    set -- $g
    run_to 30 "$CTL_BIN" --socket "$WORK/gw-$1.sock" import ceph-iscsi --gateway $2 --check ||
        fail "--check $2: $(cat "$WORK/cmd.out")"
    grep -qx "0 differences a host would see between gateway $2 of rbd/gateway.conf and the running linerate" \
        "$WORK/cmd.out" || fail "--check $2: $(cat "$WORK/cmd.out")"
done
"$CTL_BIN" --socket "$WORK/gw-a.sock" call set_lun "{\"target\": \"$IGW\", \"lun\": 1, \"read_only\": true}" \
    >/dev/null || fail "set_lun"
run_to 30 "$CTL_BIN" --socket "$WORK/gw-a.sock" import ceph-iscsi --gateway $GA --check
[ $? -eq 1 ] && [ "$(cat "$WORK/cmd.out")" = "target $IGW LUN 1: read-only differs from LIO
1 difference a host would see between gateway $GA of rbd/gateway.conf and the running linerate" ] ||
    fail "--check, LUN 1 read-only: $(cat "$WORK/cmd.out")"
# the version 4 object numbered the disks otherwise: another disk behind LUN 1 and 2
run_to 30 "$CTL_BIN" --socket "$WORK/gw-b.sock" import ceph-iscsi "$FIX/v4.json" --gateway gw-b --check
[ $? -eq 1 ] && grep -qx "target $IGW LUN 1: serial '5b9485a9-d431-4afc-92a5-e3b1222dbae9', LIO answered '7c0e2a4b-93d1-4f6e-b8a5-2d9e6f1c3b70'" "$WORK/cmd.out" &&
    grep -qx "target $LAB LUN 0: served, but not in the LIO configuration" "$WORK/cmd.out" ||
    fail "--check against v4: $(cat "$WORK/cmd.out")"
"$CTL_BIN" import ceph-iscsi "$FIX/v11.json" --check >/dev/null 2>&1
[ $? -eq 2 ] || fail "--check without --gateway"
kill -TERM $PID_B
wait $PID_B
RCB=$?
PID_B=""
stop_target
[ "$STOP_RC" = 0 ] && [ "$RCB" = 0 ] || fail "exit codes at stop: gw-a $STOP_RC, gw-b $RCB"
note "PASS"
