#!/usr/bin/env bash
# The man pages tell the truth: every option each program's --help lists is in its man page,
# every linerate-ctl command of --help is in linerate-ctl(8), every config key of the key
# tables in docs/configuration.md and docs/limits.md is in linerate.conf(5) (the reference),
# and every page renders without a warning from man/groff.
# Usage: man_pages.sh BUILD-DIR SOURCE-DIR
set -u
build=$1
src=$2
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# roff writes '-' as '\-' in options: compare with the escapes removed.
page_text() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' "$src/man/$1"; }

check_options() { # PROGRAM PAGE
    local prog=$1 page=$2 opts n=0
    opts=$("$build/$prog" --help 2>&1 | grep -oE -- '(^|[ ,\[])--[a-z][a-z0-9-]*' |
        grep -oE -- '--[a-z0-9-]+' | sort -u)
    [ -n "$opts" ] || { fail "$prog --help lists no option"; return; }
    for o in $opts; do
        n=$((n + 1))
        page_text "$page" | grep -qE -- "(^|[^a-z0-9-])$o([^a-z0-9-]|$)" ||
            fail "$prog: $o is in --help but not in man/$page"
    done
    echo "ok: $prog: $n options of --help in man/$page"
}
check_options linerate-target linerate-target.8
check_options linerate-ctl linerate-ctl.8
check_options linerate-bench linerate-bench.1

# linerate-ctl's commands: the first words of each command line of --help ("  show luns").
n=0
while read -r verb obj; do
    n=$((n + 1))
    page_text linerate-ctl.8 | grep -qE "^\.(B|BI|BR) \"?$verb( $obj)?" ||
        fail "linerate-ctl: command '$verb $obj' is in --help but not in man/linerate-ctl.8"
done < <("$build/linerate-ctl" --help | sed -n '/^Commands:/,/^Options:/p' |
    grep -E '^  [a-z]' | awk '{ if ($2 ~ /^[a-z-]+$/ && $1 != "version" && $1 != "reload") print $1, $2; else print $1 }')
echo "ok: linerate-ctl: $n commands of --help in man/linerate-ctl.8"

# Config keys: the first column of the key tables of docs/configuration.md and docs/limits.md,
# e.g. | `max-sessions` | or | `lun = SPEC` / `lun N = SPEC` | (command-line options, `--x`,
# do not match).
keys=$(cat "$src/docs/configuration.md" "$src/docs/limits.md" | grep -E '^\| `' |
    cut -d'|' -f2 | grep -oE '`[a-z][a-z0-9-]*' | tr -d '`' | sort -u)
n=0
for k in $keys; do
    n=$((n + 1))
    page_text linerate.conf.5 | grep -qE "(^|[^a-z0-9-])$k([^a-z0-9-]|$)" ||
        fail "config key $k is in docs/ but not in man/linerate.conf.5"
done
[ "$n" -ge 30 ] || fail "only $n config keys found in the docs' key tables: the extraction broke"
echo "ok: $n config keys of docs/configuration.md and docs/limits.md in man/linerate.conf.5"

# Rendering: man --warnings (groff's own warnings), else groff alone.
for p in "$src"/man/*.[158]; do
    if command -v man >/dev/null 2>&1; then
        out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)
    elif command -v groff >/dev/null 2>&1; then
        out=$(groff -man -ww -z "$p" 2>&1)
    else
        echo "(no man or groff: rendering not checked)"
        break
    fi
    [ -z "$out" ] || fail "$(basename "$p") renders with warnings: $out"
done
echo "ok: the pages render without warnings"
[ "$fails" -eq 0 ] || { echo "$fails failure(s)" >&2; exit 1; }
