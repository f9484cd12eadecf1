#!/usr/bin/env bash
# `meson install` (what `make install` runs) into a scratch DESTDIR: the programs (daemon and
# ctl in sbin, bench in bin), the four man pages, the example, the default config (and a
# second install leaves an edited config alone), and a systemd unit that names the installed
# programs and config, has the hardening of issue 15, and passes `systemd-analyze verify`
# without a word.
# Usage: install.sh BUILD-DIR
set -u
build=$1
dest=$(mktemp -d /tmp/linerate-install.XXXXXX)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

meson install -C "$build" --no-rebuild --destdir "$dest" >"$dest.log" 2>&1 ||
    { cat "$dest.log"; rm -f "$dest.log"; fail "meson install failed"; }
rm -f "$dest.log"
one() { # PATTERN: exactly one installed file whose path matches
    local n
    n=$(cd "$dest" && find . -type f -path "$1" | wc -l)
    [ "$n" -eq 1 ] || fail "expected one installed file like $1, found $n: $(cd "$dest" && find . -type f)"
    (cd "$dest" && find . -type f -path "$1" | sed 's/^\.//')
}
target=$(one '*/sbin/linerate-target')
ctl=$(one '*/sbin/linerate-ctl')
one '*/bin/linerate-bench' >/dev/null
for m in man8/linerate-target.8 man8/linerate-ctl.8 man1/linerate-bench.1 man5/linerate.conf.5; do
    page=$(one "*/share/man/$m")
    grep -q '@VERSION@' "$dest$page" && fail "$page: @VERSION@ not substituted"
done
one '*/share/doc/linerate/examples/linerate.conf' >/dev/null
conf=$(one '*/linerate/linerate.conf')
unit=$(one '*/systemd/system/linerate-target.service')
echo "ok: installed $target $ctl $conf $unit, bench, 4 man pages, example"

grep -qx "ExecStart=$target --config $conf" "$dest$unit" ||
    fail "ExecStart does not run $target --config $conf: $(grep ExecStart "$dest$unit")"
grep -qE "^ExecReload=$ctl( --socket [^ ]+)? reload$" "$dest$unit" ||
    fail "ExecReload is not $ctl reload: $(grep ExecReload "$dest$unit")"
for kv in Type=notify ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
    StateDirectory=linerate RuntimeDirectory=linerate CapabilityBoundingSet=CAP_NET_BIND_SERVICE \
    LimitNOFILE= LimitMEMLOCK= WantedBy=multi-user.target; do
    grep -q "^$kv" "$dest$unit" || fail "the unit has no $kv"
done
echo "ok: the unit runs the installed programs, Type=notify, hardened"

# systemd-analyze verify checks the executables exist: point the unit at the DESTDIR copies.
if command -v systemd-analyze >/dev/null 2>&1; then
    mkdir -p "$dest/verify"
    sed -e "s#$target#$dest$target#" -e "s#$ctl#$dest$ctl#" "$dest$unit" \
        >"$dest/verify/linerate-target.service"
    out=$(systemd-analyze verify --man=no "$dest/verify/linerate-target.service" 2>&1) ||
        fail "systemd-analyze verify: $out"
    [ -z "$out" ] || fail "systemd-analyze verify has something to say: $out"
    echo "ok: systemd-analyze verify is silent"
else
    echo "(no systemd-analyze: the unit is not verified)"
fi

# A second install keeps an operator's config.
echo "# edited" >>"$dest$conf"
meson install -C "$build" --no-rebuild --destdir "$dest" >/dev/null 2>&1 || fail "second install failed"
tail -n 1 "$dest$conf" | grep -qx "# edited" || fail "a second install overwrote $conf"
echo "ok: a second install leaves the edited $conf alone"
