#!/bin/bash
# rbd: LUNs on a cluster with cephx (issue 13): scripts/ceph-mini with CEPH_MINI_AUTH=cephx
# (keys for every daemon, client.admin for the CLI, and client.linerate with only mon
# 'profile rbd' osd 'profile rbd pool=rbd'); skips (77) without Ceph or librbd, never a mock.
#   - the cluster does check keys: a user with no key is refused by `rados`;
#   - a LUN rbd:rbd/IMG,conf=...,id=linerate (no CEPH_CONF in the daemon's environment) creates
#     the image as that user and serves it: a qemu-img round trip of 16 MiB of random data,
#     the same bytes in `rbd export` by client.admin;
#   - a user without a keyring (id=nobody), a keyring holding a key the cluster does not know
#     for its user, and a user whose caps do not cover the pool: at start the daemon refuses
#     to start with that reason (exit 2); added live (linerate-ctl add lun) each fails with its
#     reason, said by linerate-ctl and in the daemon's log, while LUN 0 keeps serving the same
#     data; the daemon exits 0 on SIGTERM.
. "$(dirname "$0")/lt_lib.sh"
need qemu-img cmp sha256sum
qemu-img --help 2>/dev/null | grep -qw iscsi ||
    skip "qemu-img has no iscsi driver (apt-get install qemu-block-extra)"
command -v ceph-authtool >/dev/null 2>&1 || skip "ceph-authtool is not installed (ceph-common)"
export CEPH_MINI_AUTH=cephx
start_ceph
conf=$CEPH_CONF
keys=$CEPH_MINI_DIR
iqn=iqn.2026-12.org.linerate:it-rbd-cephx
CTL=$(dirname "$LT")/linerate-ctl

# ceph_cli ARGS...: the ceph CLI as client.admin, retried: a 16.2 CLI may ask before it has
# the monmap and get EPERM "problem getting command descriptions" (scripts/ceph-mini's cephc)
ceph_cli() {
    local try
    for try in 1 2 3 4 5; do
        run_to 30 ceph -c "$conf" "$@" && return 0
        grep -q "problem getting command descriptions" "$WORK/cmd.out" || return 1
        sleep 0.5
    done
    return 1
}

note "cephx is on: a user without a key is refused, client.linerate has its keyring"
[ -s "$keys/client.linerate.keyring" ] || fail "ceph-mini wrote no keyring for client.linerate"
if run_to 30 rados -c "$conf" --id nobody --connect-timeout 10 -p rbd ls; then
    fail "the cluster let a user without a key in: auth is not cephx"
fi
ceph_cli auth get client.linerate || { show_cmd_out; fail "ceph auth get"; }
grep -q "profile rbd pool=rbd" "$WORK/cmd.out" || { show_cmd_out; fail "client.linerate's caps"; }

# the wrong key: client.wrong exists in the cluster, its keyring holds another key
ceph_cli auth get-or-create client.wrong mon 'profile rbd' osd 'profile rbd pool=rbd' ||
    { show_cmd_out; fail "ceph auth get-or-create client.wrong"; }
ceph-authtool --create-keyring "$keys/client.wrong.keyring" --gen-key -n client.wrong >/dev/null ||
    fail "ceph-authtool"
# caps for another pool only
ceph_cli auth get-or-create client.otherpool mon 'profile rbd' \
    osd 'profile rbd pool=other' -o "$keys/client.otherpool.keyring" ||
    { show_cmd_out; fail "ceph auth get-or-create client.otherpool"; }

unset CEPH_CONF # the daemon finds the cluster and its key through conf= and id= alone
spec="rbd:rbd/cx-disk,size=16M,conf=$conf,id=linerate"

note "bad users refused at start, with the reason"
bad_start() { # SPEC-TAIL WANT: the daemon refuses --lun rbd:...SPEC-TAIL saying WANT
    "$LT" --listen 127.0.0.1:1 --lun ram:16M --lun "rbd:rbd/cx-bad,size=16M,conf=$conf,$1" \
        >"$WORK/bad.out" 2>&1
    local rc=$?
    [ "$rc" = 2 ] || fail "--lun ...,$1: exit $rc, not 2: $(tail -n 3 "$WORK/bad.out")"
    grep -q "$2" "$WORK/bad.out" || fail "--lun ...,$1: no '$2' in: $(tail -n 3 "$WORK/bad.out")"
    echo "   $(grep -o 'cannot open LUN.*' "$WORK/bad.out")"
}
bad_start id=nobody "no key for client.nobody (cephx): none of the keyrings exists (keyring = $keys/client.nobody.keyring)"
bad_start id=wrong "as client.wrong: refused by the cluster (cephx)"
bad_start id=otherpool "client.otherpool's caps do not allow it"

note "id=linerate: the image created and served as client.linerate"
start_target --target-name "$iqn" --threads 2 --ctl-socket "$WORK/ctl.sock" --lun "$spec"
grep -q "rbd:rbd/cx-disk: created" "$WORK/target.log" || fail "size= did not create the image"
url=iscsi://127.0.0.1:$PORT/$iqn/0
head -c 16M /dev/urandom >"$WORK/random.img"
want=$(sha256sum <"$WORK/random.img" | cut -d' ' -f1)
run_to 120 qemu-img convert -n -f raw -O raw "$WORK/random.img" "$url" || { show_cmd_out; fail "write"; }
run_to 120 qemu-img convert -f raw -O raw "$url" "$WORK/back.img" || { show_cmd_out; fail "read"; }
[ "$(sha256sum <"$WORK/back.img" | cut -d' ' -f1)" = "$want" ] || fail "data read back differs"
run_to 120 rbd -c "$conf" export rbd/cx-disk "$WORK/export.img" || { show_cmd_out; fail "rbd export"; }
[ "$(sha256sum <"$WORK/export.img" | cut -d' ' -f1)" = "$want" ] ||
    fail "the image in the cluster differs from what was written"

note "bad users added live: refused with the reason, LUN 0 unharmed"
bad_add() { # SPEC-TAIL WANT
    if run_to 120 "$CTL" --socket "$WORK/ctl.sock" add lun "$iqn" \
        "rbd:rbd/cx-bad,size=16M,conf=$conf,$1"; then
        fail "linerate-ctl add lun ...,$1 succeeded"
    fi
    grep -q "$2" "$WORK/cmd.out" || { show_cmd_out; fail "linerate-ctl add lun ...,$1: no '$2'"; }
    grep "LUN 1 not added" "$WORK/target.log" | tail -n 1 | grep -q "$2" ||
        fail "the daemon's log does not say why LUN 1 (...,$1) was not added"
    echo "   $(grep -o 'LUN 1 not added.*' "$WORK/target.log" | tail -n 1)"
}
bad_add id=nobody "no key for client.nobody (cephx)"
bad_add id=wrong "as client.wrong: refused by the cluster (cephx)"
bad_add id=otherpool "client.otherpool's caps do not allow it"
kill -0 "$LT_PID" 2>/dev/null || fail "linerate-target died"
rm -f "$WORK/back.img"
run_to 120 qemu-img convert -f raw -O raw "$url" "$WORK/back.img" || { show_cmd_out; fail "read"; }
[ "$(sha256sum <"$WORK/back.img" | cut -d' ' -f1)" = "$want" ] || fail "LUN 0 reads other data"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
echo PASS
