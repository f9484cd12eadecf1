#!/bin/bash
# Per-entry metrics (issue 29 item 7): a target with a [host] entry and a [group] of two
# initiators; each initiator does known I/O through qemu-io (which takes an initiator name),
# then `linerate-ctl stats --raw` and a scrape of /metrics show, per entry and target LUN,
# exactly the READ and WRITE commands and bytes each did (a group's members summed under its
# one name). A reload then removes the host entry and moves the group to another LUN, live:
# the host's series go, the group's new LUN counts from zero, the old one is no longer shown.
. "$(dirname "$0")/lt_lib.sh"
need qemu-io curl python3
[ "${LT_METRICS:-1}" = 0 ] && skip "built with -Dmetrics=false: no counters"
P=iqn.2026-12.org.linerate
A=$P:host-a B=$P:host-b C=$P:host-c T=$P:disks

ctl_setup
for ((i = 0; i < 50; i++)); do
    MPORT=$((30000 + RANDOM % 10000))
    [ -n "${LT_PORT_BASE:-}" ] &&
        MPORT=$((LT_PORT_BASE + ${LT_PORT_SPAN:-10000} + RANDOM % ${LT_PORT_SPAN:-10000}))
    port_busy "$MPORT" || break
done
{
    printf 'portal = 127.0.0.1:@PORT@\nctl-socket = %s\nmetrics = 127.0.0.1:%s\n' "$SOCK" "$MPORT"
    hosts_conf $T 4M $A $B $C
} >"$WORK/hm.conf"
start_target_config "$WORK/hm.conf"
h=127.0.0.1:$PORT
qio() { echo "driver=iscsi,transport=tcp,portal=$h,target=$T,lun=$2,initiator-name=$1"; }

note "known I/O per initiator"
ok "host-a writes 64k to LUN 0" qemu-io --image-opts "$(qio "$A" 0)" -c "write -P 0x0a 0 64k"
# (what it wrote: qemu reads no unallocated block, GET LBA STATUS says they are zeros)
ok "host-a reads 64k of LUN 0" qemu-io -r --image-opts "$(qio "$A" 0)" -c "read -P 0x0a 0 64k"
ok "host-b writes 32k to its LUN 0 (LUN 1)" qemu-io --image-opts "$(qio "$B" 0)" \
    -c "write -P 0x0b 1M 32k"
ok "host-c reads 16k of its LUN 0 (LUN 1)" qemu-io -r --image-opts "$(qio "$C" 0)" \
    -c "read -P 0x0b 1M 16k"

# raw_is WHO LUN OP COMMANDS BYTES: the `stats --raw` entry of WHO (host IQN or group NAME)
# for target LUN counts exactly that for OP (read, write)
raw_is() {
    local got
    got=$(jget "' '.join('%d %d' % (e['counters']['$3']['commands'], e['counters']['$3']['bytes'])
        for e in d['hosts'] if e.get('host', e.get('group')) == '$1' and e['lun'] == $2)" \
        <"$WORK/raw.json")
    [ "$got" = "$4 $5" ] || {
        grep -E 'linerate_(lun|host)_(commands_total|read_bytes)' "$WORK/m.txt" >&2
        fail "stats --raw: $1 LUN $2 $3: '$got', not '$4 $5'"
    }
}
# prom_is SERIES VALUE: the scrape has exactly that line
prom_is() {
    grep -qxF "$1 $2" "$WORK/m.txt" || {
        grep "^${1%%\{*}" "$WORK/m.txt" >&2
        fail "/metrics: no '$1 $2'"
    }
}
scrape() {
    ctl stats --raw >"$WORK/raw.json" 2>&1 || fail "stats --raw: $(cat "$WORK/raw.json")"
    curl -s -o "$WORK/m.txt" --max-time 10 "http://127.0.0.1:$MPORT/metrics" ||
        fail "curl: no answer from the metrics endpoint"
    python3 "$IT_DIR/prom_check.py" "$WORK/m.txt" >"$WORK/pc.out" 2>&1 ||
        fail "the scrape is not valid exposition format: $(cat "$WORK/pc.out")"
}

note "stats --raw and /metrics: per entry and LUN"
scrape
raw_is "$A" 0 write 1 65536
raw_is "$A" 0 read 1 65536
raw_is "$A" 1 read 0 0
raw_is "$A" 1 write 0 0
raw_is cluster 1 write 1 32768
raw_is cluster 1 read 1 16384
ha="target=\"$T\",host=\"$A\"" gc="target=\"$T\",group=\"cluster\""
prom_is "linerate_host_commands_total{$ha,lun=\"0\",op=\"write\"}" 1
prom_is "linerate_host_write_bytes_total{$ha,lun=\"0\"}" 65536
prom_is "linerate_host_commands_total{$ha,lun=\"0\",op=\"read\"}" 1
prom_is "linerate_host_read_bytes_total{$ha,lun=\"0\"}" 65536
prom_is "linerate_host_read_bytes_total{$ha,lun=\"1\"}" 0
prom_is "linerate_host_commands_total{$gc,lun=\"1\",op=\"write\"}" 1
prom_is "linerate_host_commands_total{$gc,lun=\"1\",op=\"read\"}" 1
prom_is "linerate_host_write_bytes_total{$gc,lun=\"1\"}" 32768
prom_is "linerate_host_read_bytes_total{$gc,lun=\"1\"}" 16384
prom_is "linerate_host_latency_seconds_count{$gc,lun=\"1\",op=\"read\"}" 1
# one label value per entry: no series names a member of the group, an ISID or a session
grep "^linerate_host_" "$WORK/m.txt" | grep -qE "$B|$C|isid|tsih" &&
    fail "/metrics: a group member or session in a linerate_host_ label"
n=$(grep -c "^linerate_host_commands_total" "$WORK/m.txt")
[ "$n" = 9 ] || fail "/metrics: $n linerate_host_commands_total series, not 3 rows x 3 ops"
ctl stats --json --interval 0.1 >"$WORK/json.out" 2>&1 || fail "stats --json: $(cat "$WORK/json.out")"
got=$(jget "sorted('%s/%d' % (e.get('host', e.get('group')), e['lun']) for e in d['hosts'])" \
    <"$WORK/json.out")
[ "$got" = "['cluster/1', '$A/0', '$A/1']" ] || fail "stats --json hosts: $got"
ctl stats --interval 0.1 >"$WORK/table.out" 2>&1 || fail "stats: $(cat "$WORK/table.out")"
grep -q "^$T/1 group cluster " "$WORK/table.out" || fail "stats table: $(cat "$WORK/table.out")"

note "reload: host-a's entry removed, the group moved to LUN 0, live"
sed -i -e "/^\[host $A\]/,/^map = 1 1/d" -e "s/^map = 0 1$/map = 0 0/" "$WORK/run.conf"
ctl_ok --json reload
[ "$(jget 'd["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] || fail "reload: $(cat "$WORK/ctl.out")"
ok "host-b writes 4k to its LUN 0 (now LUN 0)" qemu-io --image-opts "$(qio "$B" 0)" \
    -c "write -P 0x0c 0 4k"
scrape
raw_is cluster 0 write 1 4096
raw_is cluster 0 read 0 0
prom_is "linerate_host_write_bytes_total{$gc,lun=\"0\"}" 4096
grep -q "^linerate_host_.*host=" "$WORK/m.txt" && fail "/metrics: the removed host entry is still shown"
grep -q "^linerate_host_.*lun=\"1\"" "$WORK/m.txt" && fail "/metrics: LUN 1 still shown for the group"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC after SIGTERM"
echo "PASS"
