#!/bin/bash
# Discovery and identification with libiscsi's tools: iscsi-ls lists the target and its portal
# (IPv4 and IPv6), iscsi-inq reports vendor LINERATE, iscsi-readcapacity16 the LUN's size; a
# config with two targets on one portal lists both, and an allow-list refuses other initiators.
. "$(dirname "$0")/lt_lib.sh"
need iscsi-ls iscsi-inq iscsi-readcapacity16

iqn=iqn.2026-11.org.linerate:it-discovery
ipv6=0
if [ -e /proc/net/if_inet6 ] && grep -q '^0\{31\}1 ' /proc/net/if_inet6; then ipv6=1; fi
note "start: RAM LUN 0 (64 MiB), file LUN 1 (32 MiB, 4096-byte blocks)"
if [ $ipv6 = 1 ]; then
    # The IPv6 portal uses the same port number; a clash there is retried like any other.
    start_target_v6() {
        local try
        for ((try = 0; try < 10; try++)); do
            PORT=$((20000 + RANDOM % 10000))
            port_busy "$PORT" && continue
            FIXED_PORT=$PORT start_common raw --listen "127.0.0.1:$PORT" --listen "[::1]:$PORT" "$@" \
                && return 0
        done
        fail "could not start on IPv4 + IPv6"
    }
    start_target_v6 --target-name "$iqn" --lun ram:64M --lun "file:$WORK/f.img,size=32M,bs=4096"
else
    start_target --target-name "$iqn" --lun ram:64M --lun "file:$WORK/f.img,size=32M,bs=4096"
fi
base=iscsi://127.0.0.1:$PORT

note "iscsi-ls: target and portal"
run_to 60 iscsi-ls -s "$base" || { show_cmd_out; fail "iscsi-ls exited $?"; }
grep -q "Target:$iqn Portal:127.0.0.1:$PORT,1" "$WORK/cmd.out" ||
    { show_cmd_out; fail "iscsi-ls does not list $iqn at 127.0.0.1:$PORT,1"; }
grep -Eq "Lun:0 +Type:DIRECT_ACCESS" "$WORK/cmd.out" || { show_cmd_out; fail "LUN 0 not listed"; }
grep -Eq "Lun:1 +Type:DIRECT_ACCESS" "$WORK/cmd.out" || { show_cmd_out; fail "LUN 1 not listed"; }
if [ $ipv6 = 1 ]; then
    grep -q "Portal:\[::1\]:$PORT,1" "$WORK/cmd.out" ||
        { show_cmd_out; fail "SendTargets does not report the IPv6 portal"; }
    note "iscsi-ls over IPv6"
    run_to 60 iscsi-ls "iscsi://[::1]:$PORT" || { show_cmd_out; fail "iscsi-ls over IPv6 exited $?"; }
    grep -q "Target:$iqn" "$WORK/cmd.out" || { show_cmd_out; fail "no target over IPv6"; }
fi

note "iscsi-inq: vendor LINERATE"
run_to 60 iscsi-inq "$base/$iqn/0" || { show_cmd_out; fail "iscsi-inq exited $?"; }
grep -q "^Vendor:LINERATE" "$WORK/cmd.out" || { show_cmd_out; fail "vendor is not LINERATE"; }
grep -q "Peripheral Device Type:DIRECT_ACCESS" "$WORK/cmd.out" || { show_cmd_out; fail "not a disk"; }

# capacity URL BYTES BLOCKLEN
capacity() {
    run_to 60 iscsi-readcapacity16 "$1" || { show_cmd_out; fail "iscsi-readcapacity16 $1 exited $?"; }
    local lba len
    lba=$(sed -n 's/^RETURNED LOGICAL BLOCK ADDRESS:\([0-9]*\).*/\1/p' "$WORK/cmd.out")
    len=$(sed -n 's/^LOGICAL BLOCK LENGTH IN BYTES:\([0-9]*\).*/\1/p' "$WORK/cmd.out")
    [ -n "$lba" ] && [ -n "$len" ] || { show_cmd_out; fail "cannot parse READ CAPACITY(16) of $1"; }
    [ "$len" -eq "$3" ] || { show_cmd_out; fail "$1: block length $len, expected $3"; }
    [ $(((lba + 1) * len)) -eq "$2" ] || { show_cmd_out; fail "$1: $(((lba + 1) * len)) bytes, expected $2"; }
}
note "iscsi-readcapacity16: sizes and block lengths"
capacity "$base/$iqn/0" $((64 << 20)) 512
capacity "$base/$iqn/1" $((32 << 20)) 4096
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"

note "config: two targets on one portal, one with an allow-list"
cat >"$WORK/two.conf" <<CONF
threads = 2
portal = 127.0.0.1:@PORT@
[target iqn.2026-11.org.linerate:open]
lun = ram:16M
[target iqn.2026-11.org.linerate:closed]
alias = only for friends
lun = ram:8M
allow = iqn.2026-11.org.linerate:friend
CONF
start_target_config "$WORK/two.conf"
base=iscsi://127.0.0.1:$PORT
run_to 60 iscsi-ls -i iqn.2026-11.org.linerate:friend "$base" || { show_cmd_out; fail "iscsi-ls exited $?"; }
grep -q "Target:iqn.2026-11.org.linerate:open Portal:127.0.0.1:$PORT,1" "$WORK/cmd.out" ||
    { show_cmd_out; fail "target 'open' not listed"; }
grep -q "Target:iqn.2026-11.org.linerate:closed Portal:127.0.0.1:$PORT,1" "$WORK/cmd.out" ||
    { show_cmd_out; fail "target 'closed' not listed to an allowed initiator"; }
capacity "$base/iqn.2026-11.org.linerate:open/0" $((16 << 20)) 512
run_to 60 iscsi-inq -i iqn.2026-11.org.linerate:friend "$base/iqn.2026-11.org.linerate:closed/0" ||
    { show_cmd_out; fail "allowed initiator could not log in"; }
if run_to 60 iscsi-inq -i iqn.2026-11.org.linerate:stranger "$base/iqn.2026-11.org.linerate:closed/0"; then
    show_cmd_out
    fail "an initiator not on the allow-list logged in"
fi
stop_target
[ "$STOP_RC" -eq 0 ] || fail "SIGTERM'd daemon exited $STOP_RC, not 0"
echo PASS
