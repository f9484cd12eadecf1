#!/usr/bin/env bash
# linerate-ctl and the config file (issue 15): `save` writes the running configuration back
# into the daemon's --config file (comments and layout of unchanged entries kept, changed ones
# rewritten, atomic with the file's mode), the saved file loads again, `reload` from it finds no
# difference and a daemon restarted from it serves the same LUNs and targets; `save FILE` for a
# daemon started without a config file. Live portals and allow entries: `add/remove portal`
# (a listener opened and closed, SendTargets and logins follow, a session on a removed portal
# carries on), `add/remove allow` (logins refused and let in again, `--force` logging out the
# sessions of a removed initiator), and `reload` applying portal and allow-list differences.
# Usage: target_ctl_config.sh  (LINERATE_TARGET from meson; linerate-ctl, linerate-bench beside it)
set -u
source "$(dirname "$0")/lt_lib.sh"
need iscsi-ls iscsi-inq python3

BUILD=$(dirname "$LT")
CTL_BIN=$BUILD/linerate-ctl
BENCH=$BUILD/linerate-bench
[ -x "$CTL_BIN" ] || fail "$CTL_BIN is not built"
[ -x "$BENCH" ] || fail "$BENCH is not built"
T=iqn.2026-11.org.linerate:default
T2=iqn.2026-11.org.linerate:added
SOCK=$WORK/ctl.sock

ctl() { "$CTL_BIN" --socket "$SOCK" "$@"; }
# ctl_ok ARGS...: must succeed; output in $WORK/ctl.out
ctl_ok() {
    ctl "$@" >"$WORK/ctl.out" 2>&1 || {
        cat "$WORK/ctl.out" >&2
        fail "linerate-ctl $* failed"
    }
}
jget() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
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
grep -qE "^lun 3 = ram:1M,ro +# LUN 3" "$WORK/saved.conf" || fail "LUN 3's line"
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
start_target --lun ram:32M --ctl-socket "$SOCK" --threads 1
ctl save >"$WORK/ctl.out" 2>&1
[ $? -eq 1 ] && grep -q "without --config" "$WORK/ctl.out" || fail "save without a file"
ctl_ok add lun "$T" ram:8M,ro
luns_of >"$WORK/luns.before"
(cd "$WORK" && "$CTL_BIN" --socket "$SOCK" save fresh.conf >"$WORK/ctl.out" 2>&1) ||
    fail "save fresh.conf: $(cat "$WORK/ctl.out")"
grep -q "still differs" "$WORK/ctl.out" && fail "save fresh.conf: $(cat "$WORK/ctl.out")"
stop_target
FIXED_PORT=$PORT start_target_config "$WORK/fresh.conf"
luns_of >"$WORK/luns.after"
diff "$WORK/luns.before" "$WORK/luns.after" || fail "LUNs from the fresh file differ"
stop_target
[ "$STOP_RC" -eq 0 ] || fail "exit $STOP_RC"
echo "PASS"
