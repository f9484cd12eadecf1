#!/bin/bash
# Caps per initiator entry (issue 29 item 5): --check refuses a bad cap or one outside an
# entry; two hosts share one LUN, host-a's entry capped at 2 IOPS, host-b's not: host-a's
# writes through qemu-io all complete and `stats --json` counts some of them delayed under its
# entry, host-b's none (counts only, never rates); `show hosts` shows the caps; a reload moves
# the cap from host-a to host-b live, and `save` writes it.
. "$(dirname "$0")/lt_lib.sh"
need qemu-io
P=iqn.2026-12.org.linerate
A=$P:host-a B=$P:host-b
T=$P:capped

note "--check: a bad cap, or a cap outside an entry, is refused"
ctl_setup
cat >"$WORK/caps.conf" <<EOF
portal = 127.0.0.1:@PORT@
ctl-socket = $SOCK
[target $T]
lun = ram:8M
[host $A]
map = 0 0
iops = 2
burst = 0
[host $B]
map = 0 0
EOF
sed 's/@PORT@/1/' "$WORK/caps.conf" >"$WORK/check.conf"
"$LT" --check --config "$WORK/check.conf" >"$WORK/o" 2>&1 || fail "good config refused: $(cat "$WORK/o")"
# refused SED-EXPR WORDS: the config edited by SED-EXPR exits 2 naming WORDS
refused() { conf_refused "$WORK/check.conf" "$@"; }
refused 's/^iops = 2$/iops = two/' "bad.conf:7: bad iops= 'two'"
refused 's/^burst = 0$/burst = 2m/' "bad.conf:8: bad burst= '2m'"
refused "s/^lun = ram:8M$/&\nmbps = 10/" "bad.conf:5: 'mbps' belongs in a [host IQN] or [group NAME]"

note "host-a capped at 2 IOPS, host-b not: both complete, only host-a's commands wait"
start_target_config "$WORK/caps.conf"
h=127.0.0.1:$PORT
qio() { echo "driver=iscsi,transport=tcp,portal=$h,target=$T,lun=0,initiator-name=$1"; }
writes=()
for i in 0 1 2 3 4; do writes+=(-c "write -P 0x1$i ${i}k 1k"); done
ok "host-a's five writes" qemu-io --image-opts "$(qio "$A")" "${writes[@]}"
[ "$(grep -c "^wrote 1024/1024 bytes" "$WORK/cmd.out")" = 5 ] || { show_cmd_out; fail "host-a: not 5 writes done"; }
ok "host-b's five writes" qemu-io --image-opts "$(qio "$B")" "${writes[@]}"
[ "$(grep -c "^wrote 1024/1024 bytes" "$WORK/cmd.out")" = 5 ] || { show_cmd_out; fail "host-b: not 5 writes done"; }
ok "host-b reads host-a's data" qemu-io -r --image-opts "$(qio "$B")" -c "read -P 0x14 4k 1k"
ctl_ok --json stats
# hosts: [name, delayed] per entry; the LUN (uncapped) delayed nothing
got=$(jget '" ".join("%s=%d" % (e["name"].split(":")[-1], e["throttle"]["delayed"] > 0) for e in d["host_limits"])' <"$WORK/ctl.out")
[ "$got" = "host-a=1 host-b=0" ] || fail "stats: entries delayed '$got', not host-a=1 host-b=0"
[ "$(jget 'd["luns"][0]["throttle"]["delayed"]' <"$WORK/ctl.out")" = 0 ] || fail "stats: the uncapped LUN delayed commands"
ctl_ok --json show hosts "$T"
got=$(jget '" ".join("%s:%s" % (e["name"].split(":")[-1], e["limits"]["text"]) for e in d)' <"$WORK/ctl.out")
[ "$got" = "host-a:iops=2 host-b:" ] || fail "show hosts: caps '$got'"

note "reload: the cap moves to host-b, live; save writes it"
sed -i -e '/^iops = 2$/d' -e '/^burst = 0$/d' "$WORK/run.conf"
printf 'write-mbps = 1\nburst = 50ms\n' >>"$WORK/run.conf"
ctl_ok --json reload
jget '" ".join(d["applied"])' <"$WORK/ctl.out" | grep -q "2 entries with new caps" || fail "reload: $(cat "$WORK/ctl.out")"
[ "$(jget 'd["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] || fail "reload: $(cat "$WORK/ctl.out")"
ctl_ok --json show hosts "$T"
got=$(jget '" ".join("%s:%s" % (e["name"].split(":")[-1], e["limits"]["text"]) for e in d)' <"$WORK/ctl.out")
[ "$got" = "host-a: host-b:write-mbps=1,burst=50ms" ] || fail "show hosts after reload: '$got'"
ctl_ok save "$WORK/saved.conf"
sed -n "/^\[host $B\]/,\$p" "$WORK/saved.conf" | grep -qx "write-mbps = 1" || { cat "$WORK/saved.conf"; fail "saved.conf lacks host-b's cap"; }
"$LT" --check --config "$WORK/saved.conf" >"$WORK/o" 2>&1 || fail "saved.conf: $(cat "$WORK/o")"
ctl_ok --json reload
[ "$(jget 'd["applied"] + d["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] || fail "a second reload: $(cat "$WORK/ctl.out")"

note "a member leaves a capped group for its own entry: the group keeps its limiter"
# (before, the entry listed first took the limiter of the member it has: host-a's new entry
# got the group's, with its counts, and the group a new one)
sed -i "/^\[host $A\]/,\$d" "$WORK/run.conf"
printf '[group g]\ninitiator = %s\ninitiator = %s\nmap = 0 0\niops = 2\nburst = 0\n' "$A" "$B" >>"$WORK/run.conf"
ctl_ok --json reload
ok "host-a's five writes in the group" qemu-io --image-opts "$(qio "$A")" "${writes[@]}"
sed -i "/^\[group g\]/,\$d" "$WORK/run.conf"
printf '[host %s]\nmap = 0 0\n[group g]\ninitiator = %s\nmap = 0 0\niops = 2\nburst = 0\n' "$A" "$B" >>"$WORK/run.conf"
ctl_ok --json reload
[ "$(jget 'd["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] || fail "reload: $(cat "$WORK/ctl.out")"
ctl_ok --json stats
got=$(jget '" ".join("%s=%d" % (e["name"].split(":")[-1], e["throttle"]["delayed"] > 0) for e in d["host_limits"])' <"$WORK/ctl.out")
[ "$got" = "host-a=0 g=1" ] || fail "stats after host-a left the group: '$got', not host-a=0 g=1"
stop_target
echo "PASS"
