#!/usr/bin/env bash
# The Debian package (issue 15): `dpkg-buildpackage -us -uc -b` on a copy of the tree, then
#  - the .deb holds the programs, man pages, unit, example, and the config as a conffile, and
#    its postinst enables and starts the unit (Debian's convention);
#  - lintian finds no error (nor, here, any warning);
#  - `dpkg --root` installs it into a throwaway root (maintainer scripts run: the unit is
#    enabled there) and purges it again (conffile and enablement gone);
#  - the installed daemon, with the installed config (its portal moved to a free port, a
#    private control socket), tells a NOTIFY_SOCKET listener READY=1 and STOPPING=1, and the
#    installed linerate-ctl answers `show targets` (tests/integration/target_service.py);
#  - `make install BUILD=<fresh dir> PREFIX=/usr DESTDIR=<stage>` in the same copy puts the
#    programs, the four man pages, the unit, the config and the example under the stage;
#  - in a container booted with systemd-nspawn from an overlay of this host's tree (systemd
#    PID 1 there, the host untouched), `dpkg -i` installs the .deb and its postinst starts the
#    service; systemctl, linerate-ctl and iscsi-inq check it, reload, stop and purge it
#    (tests/package/in_container.sh). Skipped, saying so, without systemd-nspawn or root, or
#    where the container cannot boot.
# SKIP (77) without dpkg-buildpackage, debhelper or lintian (scripts/install-deps package), or
# outside a git checkout.
# Usage: package.sh SOURCE-DIR
set -u
src=$1
command -v dpkg-buildpackage >/dev/null 2>&1 && command -v dh >/dev/null 2>&1 &&
    command -v lintian >/dev/null 2>&1 ||
    { echo "SKIP: needs dpkg-dev, debhelper, lintian (scripts/install-deps package)"; exit 77; }
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "SKIP: $src is not a git checkout"; exit 77; }

work=$(mktemp -d /tmp/linerate-pkg.XXXXXX)
NS_MOUNTS="" # the booted check's overlay of / and its tmpfs: unmounted before anything is removed
cleanup() {
    local m
    for m in $NS_MOUNTS; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
            { echo "cannot unmount $m: $work left in place" >&2; return; }
    done
    if [ -d "$work/root/var/lib/dpkg" ] && dpkg --root="$work/root" -s linerate >/dev/null 2>&1; then
        dpkg --root="$work/root" --force-script-chrootless --purge linerate >/dev/null 2>&1
    fi
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "== $*"; }

note "dpkg-buildpackage -us -uc -b on the tracked and new files of $src"
mkdir "$work/src"
(cd "$src" && git ls-files -co --exclude-standard -z | grep -zv '^debian/linerate/' |
    tar --null -cf - -T -) | tar -xf - -C "$work/src" || fail "cannot copy the tree"
# nocheck: the unit tests run on their own in this suite; parallel=2: this machine's cores.
(cd "$work/src" && DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b) \
    >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; fail "dpkg-buildpackage failed"; }
deb=$(ls "$work"/linerate_*_"$(dpkg --print-architecture)".deb 2>/dev/null)
[ -f "$deb" ] || fail "no .deb in $work: $(ls "$work")"
echo "ok: built $(basename "$deb") ($(stat -c %s "$deb") bytes)"

note "contents"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's#^\./#/#' >"$work/files"
for f in /usr/sbin/linerate-target /usr/sbin/linerate-ctl /usr/bin/linerate-bench \
    /usr/share/man/man8/linerate-target.8.gz /usr/share/man/man8/linerate-ctl.8.gz \
    /usr/share/man/man1/linerate-bench.1.gz /usr/share/man/man5/linerate.conf.5.gz \
    /lib/systemd/system/linerate-target.service /etc/linerate/linerate.conf \
    /usr/share/doc/linerate/examples/linerate.conf /usr/share/doc/linerate/copyright; do
    grep -qx "$f" "$work/files" || fail "$f is not in the package: $(cat "$work/files")"
done
# README.md links into docs/: both ship, the docs under docs/ as in the tree (dh_compress
# may have gzipped the larger ones).
for f in README.md docs/configuration.md docs/operating.md docs/security.md; do
    grep -qE "^/usr/share/doc/linerate/$f(\.gz)?\$" "$work/files" ||
        fail "/usr/share/doc/linerate/$f is not in the package"
done
dpkg-deb --ctrl-tarfile "$deb" | tar -xf - -C "$work" ./conffiles ./postinst ./prerm ./postrm ||
    fail "no maintainer scripts or conffiles"
grep -qx /etc/linerate/linerate.conf "$work/conffiles" || fail "the config is not a conffile"
grep -q "deb-systemd-helper enable 'linerate-target.service'" "$work/postinst" ||
    fail "postinst does not enable the unit"
grep -q "deb-systemd-invoke \$_dh_action 'linerate-target.service'" "$work/postinst" ||
    fail "postinst does not start the unit"
echo "ok: programs, man pages, unit, example, README and docs, config as conffile; postinst enables and starts"

note "the rbd store in linerate-rbd"
# A machine without Ceph installs linerate alone: no Ceph library among its dependencies,
# nor in the daemon's; the module, in its own package, is what needs librbd (issue 34).
dpkg-deb -f "$deb" Depends | grep -qE 'librbd|librados' &&
    fail "linerate depends on Ceph's libraries: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -x "$deb" "$work/x"
readelf -d "$work/x/usr/sbin/linerate-target" | grep -qE 'librbd|librados' &&
    fail "linerate-target links Ceph's libraries"
rdeb=$(ls "$work"/linerate-rbd_*_"$(dpkg --print-architecture)".deb 2>/dev/null)
[ -f "$rdeb" ] || fail "no linerate-rbd .deb in $work: $(ls "$work")"
dpkg-deb -f "$rdeb" Depends | grep -q librbd1 && dpkg-deb -f "$rdeb" Depends | grep -q 'linerate (=' ||
    fail "linerate-rbd's dependencies: $(dpkg-deb -f "$rdeb" Depends)"
dpkg-deb -x "$rdeb" "$work/xr"
mod=$(find "$work/xr" -name linerate-rbd.so)
[ -n "$mod" ] && strings "$work/x/usr/sbin/linerate-target" | grep -qx "${mod#"$work/xr"}" ||
    fail "the module is not where the daemon looks for it: ${mod#"$work/xr"}"
# What the module takes from the daemon, the daemon exports (it is loaded with RTLD_NOW).
nm -D --undefined-only "$mod" | awk '{print $2}' | grep -vE '^(rbd_|rados_|_)|@' |
    while read -r sym; do
        nm -D --defined-only "$work/x/usr/sbin/linerate-target" | awk '{print $3}' |
            grep -qx "$sym" || echo "$sym"
    done >"$work/unresolved"
[ -s "$work/unresolved" ] && fail "the daemon does not export for the module: $(cat "$work/unresolved")"
echo "ok: linerate without Ceph libraries, linerate-rbd with the module and librbd1"

note "lintian"
lintian --fail-on error "$deb" >"$work/lintian" 2>&1 ||
    { cat "$work/lintian"; fail "lintian reports errors"; }
grep -v 'root privileges' "$work/lintian" | sed 's/^/  /'
echo "ok: lintian: no error ($(grep -c '^W:' "$work/lintian") warnings)"

note "dpkg --root: install into a throwaway root, maintainer scripts included"
root=$work/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
touch "$root/var/lib/dpkg/status"
# The root has no libraries and no shell: dependencies are the host's, scripts run outside.
dpkg --root="$root" --force-depends --force-script-chrootless -i "$deb" >"$work/dpkg.log" 2>&1 ||
    { cat "$work/dpkg.log"; fail "dpkg -i into $root failed"; }
[ -L "$root/etc/systemd/system/multi-user.target.wants/linerate-target.service" ] ||
    fail "the unit is not enabled in the root after install"
echo "ok: installed; linerate-target.service enabled (multi-user.target.wants)"
# The dependencies dpkg computed must be what this host has (the binaries run below).
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/^ *([a-z0-9.+-]+).*/\1/')
for p in $deps; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        fail "dependency $p is not installed on this host"
done
echo "ok: dependencies $(echo $deps) are installed here"

note "the installed daemon and config under a NOTIFY_SOCKET listener"
python3 "$src/tests/integration/target_service.py" "$root/usr/sbin/linerate-target" \
    "$root/usr/sbin/linerate-ctl" "$root/etc/linerate/linerate.conf" ||
    fail "the installed daemon does not behave as a Type=notify service"

note "dpkg --purge"
dpkg --root="$root" --force-script-chrootless --purge linerate >"$work/dpkg.log" 2>&1 ||
    { cat "$work/dpkg.log"; fail "purge failed"; }
[ ! -e "$root/etc/linerate/linerate.conf" ] || fail "the conffile survived purge"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/linerate-target.service" ] ||
    fail "the unit is still enabled after purge"
[ ! -e "$root/usr/sbin/linerate-target" ] || fail "the daemon survived purge"
echo "ok: purged: programs, conffile and enablement gone"

note "make install BUILD=... PREFIX=/usr DESTDIR=... in the same copy of the tree"
# The Makefile's own target, as an operator without the package runs it: it sets up the
# build directory (here a fresh one in the throwaway copy: the target reconfigures its
# prefix, which the tree under test's build/ must not suffer), builds and installs.
stage=$work/stage
(cd "$work/src" && make install BUILD="$work/mi-build" PREFIX=/usr DESTDIR="$stage") \
    >"$work/make-install.log" 2>&1 ||
    { tail -n 40 "$work/make-install.log"; fail "make install failed"; }
for f in /usr/sbin/linerate-target /usr/sbin/linerate-ctl /usr/bin/linerate-bench \
    /usr/share/man/man8/linerate-target.8 /usr/share/man/man8/linerate-ctl.8 \
    /usr/share/man/man1/linerate-bench.1 /usr/share/man/man5/linerate.conf.5 \
    /usr/lib/systemd/system/linerate-target.service /etc/linerate/linerate.conf \
    /usr/share/doc/linerate/examples/linerate.conf; do
    [ -f "$stage$f" ] || fail "make install: no $f in $stage: $(cd "$stage" && find . -type f)"
done
for f in /usr/sbin/linerate-target /usr/sbin/linerate-ctl /usr/bin/linerate-bench; do
    [ -x "$stage$f" ] || fail "make install: $f is not executable"
done
unit=$stage/usr/lib/systemd/system/linerate-target.service
grep -qx "ExecStart=/usr/sbin/linerate-target --config /etc/linerate/linerate.conf" "$unit" ||
    fail "make install: the unit does not run the installed daemon: $(grep ExecStart "$unit")"
cmp -s "$stage/etc/linerate/linerate.conf" "$src/dist/linerate.conf" ||
    fail "make install: /etc/linerate/linerate.conf is not dist/linerate.conf"
cmp -s "$stage/usr/share/doc/linerate/examples/linerate.conf" "$src/examples/linerate.conf" ||
    fail "make install: the example is not examples/linerate.conf"
"$stage/usr/sbin/linerate-target" --version >/dev/null 2>&1 ||
    fail "make install: the installed daemon does not run"
echo "ok: make install put the programs, 4 man pages, the unit, config and example under $stage"

note "systemd as PID 1: the .deb installed and its service run in a booted container"
# A container booted with systemd-nspawn from an overlay of this host's own tree (the upper
# layer a tmpfs, so the host is not touched and no image is downloaded): systemd is PID 1
# there whatever init this host runs, the unit's hardening (ProtectSystem=strict, namespaces,
# the system call filter) is applied for real, and its own network namespace has port 3260
# free. tests/package/in_container.sh runs there as a oneshot unit once the system is up.
booted_check() {
    command -v systemd-nspawn >/dev/null 2>&1 && [ -x /usr/lib/systemd/systemd ] || {
        echo "SKIP part: no systemd-nspawn or systemd here (scripts/install-deps package" \
            "installs systemd-container)"
        return 0
    }
    [ "$(id -u)" = 0 ] || { echo "SKIP part: booting a container needs root"; return 0; }
    local ns=$work/ns
    mkdir -p "$ns/layers" "$ns/root" "$ns/lt" "$ns/out"
    mount -t tmpfs tmpfs "$ns/layers" && mkdir "$ns/layers/upper" "$ns/layers/work" &&
        mount -t overlay overlay \
            -o "lowerdir=/,upperdir=$ns/layers/upper,workdir=$ns/layers/work" "$ns/root" || {
        echo "SKIP part: this kernel refuses an overlay of / (no booted check)"
        umount "$ns/layers" 2>/dev/null
        return 0
    }
    NS_MOUNTS="$ns/root $ns/layers"
    cp "$deb" "$ns/lt/linerate.deb" && cp "$src/tests/package/in_container.sh" "$ns/lt/" ||
        fail "cannot stage the container's files"
    local units=$ns/root/etc/systemd/system
    mkdir -p "$units/multi-user.target.wants"
    # After multi-user.target: dpkg starts the service the way it does on a booted machine.
    printf '%s\n' '[Unit]' 'Description=linerate package check' 'After=multi-user.target' \
        '[Service]' 'Type=oneshot' 'ExecStart=/bin/sh /lt/in_container.sh /lt/linerate.deb' \
        >"$units/lt-pkgcheck.service"
    ln -s /etc/systemd/system/lt-pkgcheck.service "$units/multi-user.target.wants/"
    # What this host enabled must not start there (tgt's service, say, would take port 3260,
    # and a linerate unit of the host's must not be there before dpkg adds it), and a build
    # image's policy-rc.d (exit 101: "start nothing", as in Docker images) must not stop dpkg
    # from starting the service as it does on a real machine. Removed in the overlay only.
    find "$units/multi-user.target.wants" -mindepth 1 ! -name lt-pkgcheck.service -delete
    rm -f "$ns/root/usr/sbin/policy-rc.d"
    # --register=no --keep-unit: no machined or system bus is needed on the host.
    timeout 300 systemd-nspawn -q -D "$ns/root" -M "lt-pkg-$$" --register=no --keep-unit \
        --private-network --bind-ro="$ns/lt:/lt" --bind="$ns/out:/lt-out" -b \
        >"$ns/console.log" 2>&1
    local rc=$?
    sed 's/^/  /' "$ns/out/log" 2>/dev/null
    if [ ! -e "$ns/out/log" ]; then
        # systemd never got as far as the check unit: this machine cannot boot a container
        # (a sandbox without the cgroups or namespaces nspawn needs), which says nothing
        # about the package; the checks above still hold.
        tail -n 15 "$ns/console.log"
        echo "SKIP part: the container did not boot here (systemd-nspawn exit $rc): see above"
        return 0
    fi
    if [ ! -s "$ns/out/result" ]; then
        tail -n 30 "$ns/console.log"
        fail "the check in the container (systemd-nspawn exit $rc) never finished: see above"
    fi
    [ "$(cat "$ns/out/result")" = PASS ] || fail "in the booted container: $(cat "$ns/out/result")"
    echo "ok: under systemd as PID 1 the package installed, started, answered, reloaded," \
        "stopped and purged"
}
booted_check
