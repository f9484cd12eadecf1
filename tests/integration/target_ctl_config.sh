#!/usr/bin/env bash
# linerate-ctl and the config file (issue 15): `save` writes the running configuration back
# into the daemon's --config file (comments and layout of unchanged entries kept, changed ones
# rewritten, atomic with the file's mode), the saved file loads again, `reload` from it finds no
# difference and a daemon restarted from it serves the same LUNs and targets; `save FILE` for a
# daemon started without a config file. Live portals and allow entries: `add/remove portal`
# (a listener opened and closed, SendTargets and logins follow, a session on a removed portal
# carries on), `add/remove allow` (logins refused and let in again, `--force` logging out the
# sessions of a removed initiator, and those of the others when a first entry closes an open
# target, which carry on without it), and `reload` applying portal and allow-list differences
# (a file closing an open target: its session counted, then logged out by `reload --force`).
# Usage: target_ctl_config.sh  (LINERATE_TARGET from meson; linerate-ctl, linerate-bench beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need iscsi-ls iscsi-inq python3

ctl_setup
T2=iqn.2026-11.org.linerate:added

# The LUNs as show luns --json has them, without the commands in flight of the moment and
# the spec a LUN was opened with (a resized one was opened smaller; the saved file has its
# size, which `bytes` shows).
luns_of() {
    ctl --json show luns | python3 -c '
import json, sys
for l in json.load(sys.stdin):
    l.pop("commands", None)
    l.pop("store", None)
    print(json.dumps(l, sort_keys=True))'
}
targets_of() {
    ctl --json show targets | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    print(t["name"], t["alias"], sorted(t["portals"]), t["luns"], sorted(t["allow"]))'
}
# A free port other than $PORT in the test's range.
other_port() {
    local p i
    for ((i = 0; i < 50; i++)); do
        p=$(random_port)
        [ "$p" != "$PORT" ] && ! port_busy "$p" && echo "$p" && return 0
    done
    fail "no free port"
}

# --- save ---
note "save: a commented config changed at run time, written back"
cat >"$WORK/commented.conf" <<EOF
# linerate test configuration: every comment here must survive a save
ctl-socket = $SOCK      # the test's own socket
portal = 127.0.0.1:@PORT@

# the main target
[target $T]
alias = main disk       # a comment after a value
lun = ram:8M            # LUN 0: kept as it is
lun = ram:4M            # LUN 1: removed below
lun = ram:2M            # LUN 2: resized below
lun = ram:1M            # LUN 3: kept, says its number once LUN 2's line is not above it
# lun = file:/srv/x.img   (an example left commented)

# the end
EOF
start_target_config "$WORK/commented.conf"
chmod 0640 "$WORK/run.conf"
ino_before=$(stat -c %i "$WORK/run.conf")
ctl_ok remove lun "$T" 1
ctl_ok resize lun "$T" 2 4M
ctl_ok add lun "$T" ram:16M --lun 9
ctl_ok set lun "$T" 3 ro
ctl_ok set lun "$T" 3 iops=300,burst=1s
ctl_ok add target "$T2" --portal "127.0.0.1:$PORT" --lun ram:2M --lun null:1G \
    --allow iqn.2026-01.org.linerate:bench --alias "added at run time"
ctl_ok set log-level debug
luns_of >"$WORK/luns.before"
targets_of >"$WORK/targets.before"
ctl_ok --json save
python3 - "$WORK/ctl.out" <<'EOF' || fail "save: $(cat "$WORK/ctl.out")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["file"].endswith("/run.conf"), r
assert r["differences"] == [], r["differences"]
assert r["lines_removed"] == 1 and r["lines_kept"] >= 10, r
EOF
cp "$WORK/run.conf" "$WORK/saved.conf"
echo "--- saved:"
cat "$WORK/saved.conf"
for c in "# linerate test configuration: every comment here must survive a save" \
    "# the test's own socket" "# the main target" "# a comment after a value" \
    "# LUN 0: kept as it is" "# LUN 2: resized below" "# LUN 3: kept, says its number" \
    "# lun = file:/srv/x.img   (an example left commented)" "# the end"; do
    grep -qF -- "$c" "$WORK/saved.conf" || fail "the comment '$c' was lost"
done
grep -q "LUN 1: removed" "$WORK/saved.conf" && fail "the removed LUN's line is still there"
grep -qx "lun = ram:8M            # LUN 0: kept as it is" "$WORK/saved.conf" ||
    fail "an unchanged line was rewritten"
grep -qx "alias = main disk       # a comment after a value" "$WORK/saved.conf" ||
    fail "an unchanged alias line was rewritten"
grep -qE "^lun 2 = ram:4M +# LUN 2: resized below$" "$WORK/saved.conf" ||
    fail "the resized LUN's line"
grep -qE "^lun 3 = ram:1M,ro,iops=300,burst=1000ms +# LUN 3" "$WORK/saved.conf" ||
    fail "LUN 3's line"
grep -qx "lun 9 = ram:16M" "$WORK/saved.conf" || fail "the added LUN's line"
grep -qx "log-level = debug" "$WORK/saved.conf" || fail "the log level"
grep -qx "\[target $T2\]" "$WORK/saved.conf" || fail "the added target's section"
[ "$(stat -c %a "$WORK/run.conf")" = 640 ] || fail "mode $(stat -c %a "$WORK/run.conf"), not 640"
[ "$(stat -c %i "$WORK/run.conf")" != "$ino_before" ] || fail "written in place, not renamed"
ls -A "$WORK" | grep -q '^\.run\.conf\.' && fail "a temporary file was left"
ctl_ok --json reload
[ "$(jget 'd["applied"] + d["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] ||
    fail "reload from the saved file: $(cat "$WORK/ctl.out")"
ctl_ok save "$WORK/again.conf"
cmp -s "$WORK/again.conf" "$WORK/run.conf" || fail "a second save differs from the first"
ctl save "$WORK/no/such/dir/x.conf" >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "cannot create" "$WORK/ctl.out" || fail "save into a missing directory"

note "restart from the saved file: the same LUNs and targets"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
FIXED_PORT=$PORT start_target_config "$WORK/saved.conf"
luns_of >"$WORK/luns.after"
targets_of >"$WORK/targets.after"
diff "$WORK/luns.before" "$WORK/luns.after" || fail "LUNs after the restart differ"
diff "$WORK/targets.before" "$WORK/targets.after" || fail "targets after the restart differ"
ctl_ok --json version
[ "$(jget 'd["log_level"]' <"$WORK/ctl.out")" = debug ] || fail "log level after the restart"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"

note "save FILE from a daemon started without --config"
start_target --lun ram:32M --ctl-socket "$SOCK" --threads 1 --poll-us 0
ctl save >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "without --config" "$WORK/ctl.out" || fail "save without a file"
ctl_ok add lun "$T" ram:8M,ro
ctl_ok set log-level debug
luns_of >"$WORK/luns.before"
(cd "$WORK" && "$CTL_BIN" --socket "$SOCK" save fresh.conf >"$WORK/ctl.out" 2>&1) ||
    fail "save fresh.conf: $(cat "$WORK/ctl.out")"
grep -q "still differs" "$WORK/ctl.out" && fail "save fresh.conf: $(cat "$WORK/ctl.out")"
[ "$(grep -c '^log-level = debug$' "$WORK/fresh.conf")" = 1 ] || fail "fresh.conf: log-level"
grep -qx "poll-us = 0" "$WORK/fresh.conf" || fail "fresh.conf: no 'poll-us = 0'"
stop_target
FIXED_PORT=$PORT start_target_config "$WORK/fresh.conf"
luns_of >"$WORK/luns.after"
diff "$WORK/luns.before" "$WORK/luns.after" || fail "LUNs from the fresh file differ"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"

# --- live portals and allow entries ---
note "add/remove portal: listener opened and closed, SendTargets and logins follow"
T3=iqn.2026-11.org.linerate:neighbour
BI=iqn.2026-01.org.linerate:bench # linerate-bench's initiator name
cat >"$WORK/live.conf" <<EOF
ctl-socket = $SOCK
[target $T]
portal = 127.0.0.1:@PORT@
lun = ram:64M
[target $T3]           # shares the first portal's listener
portal = 127.0.0.1:@PORT@
lun = ram:1M
EOF
start_target_config "$WORK/live.conf"
inq() { # inq INITIATOR PORT TARGET: iscsi-inq of LUN 0 as INITIATOR, output in cmd.out
    run_to 30 iscsi-inq -i "$1" "iscsi://127.0.0.1:$2/$3/0"
}
bench_session() { # the TSIH of linerate-bench's session, once it shows
    local i ids
    for ((i = 0; i < 100; i++)); do
        ids=$(ctl --json show sessions | python3 -c '
import json, sys
for s in json.load(sys.stdin):
    if s["initiator"].endswith(":bench"):
        print(s["tsih"]); break')
        [ -n "$ids" ] && echo "$ids" && return 0
        sleep 0.1
    done
    fail "no linerate-bench session showed up"
}
P2=$(other_port)
ctl_ok add portal "$T" "127.0.0.1:$P2"
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$P2" || fail "iscsi-ls through the added portal"
grep -q "Target:$T Portal:127.0.0.1:$P2,1" "$WORK/cmd.out" ||
    fail "SendTargets does not list the added portal: $(cat "$WORK/cmd.out")"
inq iqn.2026-01.org.linerate:x "$P2" "$T" || fail "login through the added portal"
inq iqn.2026-01.org.linerate:x "$P2" "$T3" && fail "$T3 reached through $T's portal"
grep -qi "not found" "$WORK/cmd.out" || fail "wrong refusal: $(cat "$WORK/cmd.out")"
ctl add portal "$T" "127.0.0.1:$P2" >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "already" "$WORK/ctl.out" || fail "the same portal added twice"
ctl add portal "$T" "not-an-address" >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] || fail "a bad portal was accepted"

note "remove portal: a session on it carries on, its listener closes"
"$BENCH" --sizes 4k --rw mixed --qd 4 --seconds 6 --format csv "iscsi://127.0.0.1:$P2/$T/0" \
    >"$WORK/bench-portal.log" 2>&1 &
BPID=$!
bench_session >/dev/null
ctl_ok --json remove portal "$T" "127.0.0.1:$P2"
[ "$(jget '(d["listener_closed"], d["sessions_on_it"])' <"$WORK/ctl.out")" = "(True, 1)" ] ||
    fail "remove portal: $(cat "$WORK/ctl.out")"
port_busy "$P2" && fail "the removed portal still accepts connections"
run_to 30 iscsi-ls -s "iscsi://127.0.0.1:$PORT"
grep -q "127.0.0.1:$P2" "$WORK/cmd.out" && fail "SendTargets still lists the removed portal"
wait "$BPID" || {
    tail -n 5 "$WORK/bench-portal.log" >&2
    fail "the session on the removed portal did not carry on"
}
ctl remove portal "$T" "127.0.0.1:$PORT" >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "last portal" "$WORK/ctl.out" || fail "a target's last portal removed"
note "a portal shared with another target: the listener stays, the target is not behind it"
ctl_ok add portal "$T" "127.0.0.1:$P2"
ctl_ok --json remove portal "$T" "127.0.0.1:$PORT"
[ "$(jget 'd["listener_closed"]' <"$WORK/ctl.out")" = False ] || fail "$(cat "$WORK/ctl.out")"
inq iqn.2026-01.org.linerate:x "$PORT" "$T" && fail "$T still reached through a removed portal"
inq iqn.2026-01.org.linerate:x "$PORT" "$T3" || fail "$T3 lost its portal"
inq iqn.2026-01.org.linerate:x "$P2" "$T" || fail "$T through its portal"

note "add allow to an open target: the session of an initiator not on the list carries on"
# $BI, linerate-bench's name, is the initiator the list leaves out here
"$BENCH" --sizes 4k --rw read --qd 4 --seconds 60 --format csv "iscsi://127.0.0.1:$P2/$T/0" \
    >"$WORK/bench-open.log" 2>&1 &
BPID=$!
tsih=$(bench_session)
ctl_ok --json add allow "$T" iqn.2026-01.org.linerate:ok
[ "$(jget '(d["was_open"], d["sessions"], d["sessions_ended"])' <"$WORK/ctl.out")" = \
    "(True, 1, False)" ] || fail "add allow: $(cat "$WORK/ctl.out")"
sleep 1
ctl --json show sessions | grep -q "\"tsih\": $tsih," || fail "add allow ended a session without --force"
note "any allow change with --force logs out the sessions the list does not let in"
ctl_ok --json add allow "$T" iqn.2026-01.org.linerate:ok2 --force --timeout 2
[ "$(jget '(d["was_open"], d["sessions"], d["sessions_ended"])' <"$WORK/ctl.out")" = \
    "(False, 1, True)" ] || fail "add allow --force: $(cat "$WORK/ctl.out")"
ctl --json show sessions | grep -q "\"tsih\": $tsih," && fail "add allow --force left the session"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
ctl_ok remove allow "$T" iqn.2026-01.org.linerate:ok2

note "add/remove allow: logins refused (0202h) and let in; --force logs sessions out"
inq iqn.2026-01.org.linerate:other "$P2" "$T" && fail "an initiator not allowed logged in"
grep -q "Authorization failure" "$WORK/cmd.out" || fail "not 0202h: $(cat "$WORK/cmd.out")"
inq iqn.2026-01.org.linerate:ok "$P2" "$T" || fail "the allowed initiator was refused"
ctl_ok add allow "$T" "$BI"
"$BENCH" --sizes 4k --rw read --qd 4 --seconds 20 --format csv "iscsi://127.0.0.1:$P2/$T/0" \
    >"$WORK/bench-allow.log" 2>&1 &
BPID=$!
tsih=$(bench_session)
ctl_ok --json remove allow "$T" "$BI"
[ "$(jget 'd["sessions"]' <"$WORK/ctl.out")" = 1 ] || fail "remove allow: $(cat "$WORK/ctl.out")"
sleep 1
ctl --json show sessions | grep -q "\"tsih\": $tsih," || fail "the session ended without --force"
inq "$BI" "$P2" "$T" && fail "a removed initiator logged in again"
ctl_ok add allow "$T" "$BI"
ctl_ok --json remove allow "$T" "$BI" --force --timeout 2
[ "$(jget '(d["sessions"], d["sessions_ended"])' <"$WORK/ctl.out")" = "(1, True)" ] ||
    fail "remove allow --force: $(cat "$WORK/ctl.out")"
ctl --json show sessions | grep -q "\"tsih\": $tsih," && fail "--force left the session"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
ctl remove allow "$T" iqn.2026-01.org.linerate:ok >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "last allow entry" "$WORK/ctl.out" || fail "the last allow entry removed"
ctl remove allow "$T" iqn.2026-01.org.linerate:nobody >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] || fail "removing an entry that is not there"

note "add allow --force to an open target: the others' sessions are logged out"
"$BENCH" --sizes 4k --rw read --qd 4 --seconds 60 --format csv "iscsi://127.0.0.1:$PORT/$T3/0" \
    >"$WORK/bench-close.log" 2>&1 &
BPID=$!
tsih=$(bench_session)
ctl_ok add allow "$T3" iqn.2026-01.org.linerate:y --force --timeout 2
grep -q "1 session of initiators no longer allowed logged out" "$WORK/ctl.out" ||
    fail "add allow --force: $(cat "$WORK/ctl.out")"
ctl --json show sessions | grep -q "\"tsih\": $tsih," && fail "add allow --force left the session"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
inq "$BI" "$PORT" "$T3" && fail "an initiator not allowed logged in to the closed target"

note "reload applies portal and allow-list differences"
P3=$(other_port)
printf '%s\n' "ctl-socket = $SOCK" "[target $T]" "portal = 127.0.0.1:$PORT" \
    "portal = 127.0.0.1:$P3" "lun = ram:64M,mbps=100" "allow = iqn.2026-01.org.linerate:new" \
    "[target $T3]" "portal = 127.0.0.1:$PORT" "lun = ram:1M" >"$WORK/run.conf"
# portal $P2 and the allow entries were added with linerate-ctl and the file never had them:
# a reload keeps them unless --force says to drop them (issue 34)
ctl reload >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "would drop what linerate-ctl added .*portal 127.0.0.1:$P2" "$WORK/ctl.out" ||
    fail "reload dropping live changes without --force: $(cat "$WORK/ctl.out")"
ctl_ok --json reload --force
python3 - "$WORK/ctl.out" "$PORT" "$P2" "$P3" <<'EOF' || fail "reload: $(cat "$WORK/ctl.out")"
import json, sys
r = json.load(open(sys.argv[1]))
port, p2, p3 = sys.argv[2:]
a = " | ".join(r["applied"])
for want in ("portal 127.0.0.1:%s added" % port, "portal 127.0.0.1:%s added" % p3,
             "portal 127.0.0.1:%s removed" % p2, "allow iqn.2026-01.org.linerate:new added",
             "allow iqn.2026-01.org.linerate:ok removed", "LUN 0 limits mbps=100"):
    assert want in a, (want, a)
assert r["needs_restart"] == [], r["needs_restart"]
EOF
inq iqn.2026-01.org.linerate:new "$P3" "$T" || fail "login through the reloaded portal"
inq iqn.2026-01.org.linerate:ok "$PORT" "$T" && fail "the initiator removed by reload logged in"
port_busy "$P2" && fail "the portal removed by reload still listens"
ctl_ok --json reload
[ "$(jget 'd["applied"] + d["needs_restart"]' <"$WORK/ctl.out")" = "[]" ] ||
    fail "a second reload: $(cat "$WORK/ctl.out")"
note "reload of a file that closes an open target: the others' session carries on, --force ends it"
"$BENCH" --sizes 4k --rw read --qd 4 --seconds 60 --format csv "iscsi://127.0.0.1:$PORT/$T3/0" \
    >"$WORK/bench-reload.log" 2>&1 &
BPID=$!
tsih=$(bench_session)
echo "allow = iqn.2026-01.org.linerate:z" >>"$WORK/run.conf" # in [target $T3], the last section
ctl_ok --json reload
python3 - "$WORK/ctl.out" "$T3" <<'EOF' || fail "reload closing $T3: $(cat "$WORK/ctl.out")"
import json, sys
r = json.load(open(sys.argv[1]))
t3 = sys.argv[2]
assert r["applied"] == ["target %s: allow iqn.2026-01.org.linerate:z added" % t3,
                        "target %s: 1 session of initiators no longer allowed carries on; "
                        "reload --force logs it out" % t3], r["applied"]
EOF
sleep 1
ctl --json show sessions | grep -q "\"tsih\": $tsih," || fail "reload ended a session without --force"
ctl_ok --json reload --force
[ "$(jget 'd["applied"]' <"$WORK/ctl.out")" = \
    "['target $T3: 1 session of initiators no longer allowed logged out']" ] ||
    fail "reload --force: $(cat "$WORK/ctl.out")"
ctl --json show sessions | grep -q "\"tsih\": $tsih," && fail "reload --force left the session"
kill "$BPID" 2>/dev/null
wait "$BPID" 2>/dev/null
note "a reload whose new portal cannot be listened on changes nothing"
sed -i -e "s/^allow = .*/allow = iqn.2026-01.org.linerate:changed/" \
    -e "s/^portal = 127.0.0.1:$P3/portal = 192.0.2.1:$P3/" "$WORK/run.conf"
ctl reload >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "run.conf:2: cannot listen on 192.0.2.1:$P3" "$WORK/ctl.out" ||
    fail "an address that cannot be bound: $(cat "$WORK/ctl.out")"
inq iqn.2026-01.org.linerate:new "$P3" "$T" || fail "the failed reload changed the target"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
echo "PASS"
