#!/usr/bin/env bash
# Builds the guest that runs the Linux kernel initiator against linerate-target under qemu:
# Debian 12's own kernel (linux-image-amd64) and an initramfs with busybox-static, open-iscsi
# (iscsid + iscsiadm), e2fsprogs and fio, all taken from Debian packages (apt-get download +
# dpkg-deb -x, so no root filesystem, no debootstrap and no kernel build), the shared
# libraries they load and the kernel modules the initiator needs, plus guest_init.sh as /init
# and guest_lib.sh, the functions the guest's scripts share, as /lib/lti.sh.
#
#   tests/interop/build_guest.sh [OUTDIR]      (default ~/.cache/linerate/interop-guest)
#
# For the dm-multipath scenario (guest_mpath.sh, /mpath.sh in the image) it also carries
# multipath-tools (multipath, multipathd and the tur checker and alua prioritizer plugins they
# load) and the dm-multipath, round-robin/service-time and scsi_dh_alua modules, listed apart
# (lib/modules/load.mpath) so that the plain initiator run does not load them.
#
# Leaves OUTDIR/vmlinuz and OUTDIR/initrd.img. Idempotent: nothing is done when OUTDIR/stamp
# matches this script, guest_init.sh and the kernel version apt would pick today; the .debs
# stay in OUTDIR/debs, so a rebuild after a script change downloads nothing. Needs apt-get
# (Debian 12, the host is assumed to be the guest's release) and network to the archive once.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/linerate/interop-guest}
mkdir -p "$OUT/debs"
OUT=$(cd "$OUT" && pwd)

msg() { echo "build-guest: $*" >&2; }
die() { msg "$*"; exit 1; }

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
    die "needs apt-get and dpkg-deb (Debian 12)"

# The kernel the metapackage points at today: a point release changes it, and then the
# image is rebuilt with the new one.
kpkg_of() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
kpkg=$(kpkg_of)
if [ -z "$kpkg" ] && [ "$(id -u)" -eq 0 ]; then
    # a fresh container has no package lists yet
    apt-get update -qq >/dev/null 2>&1 || true
    kpkg=$(kpkg_of)
fi
[ -n "$kpkg" ] || die "apt-cache does not know linux-image-amd64 (run apt-get update)"
kver=${kpkg#linux-image-}

# One builder at a time (make check and make interop may both ask); the second one waits,
# then finds the image built.
exec 9>"$OUT/lock"
flock 9

stamp=$(cat "$0" "$HERE/guest_lib.sh" "$HERE/guest_init.sh" "$HERE/guest_mpath.sh" | sha256sum | cut -c1-16)-$kver
if [ -f "$OUT/stamp" ] && [ "$(cat "$OUT/stamp")" = "$stamp" ] &&
    [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/initrd.img" ]; then
    exit 0
fi
msg "building the guest image in $OUT (kernel $kver)"

# The tools, and the library packages they need, recursively (only lib* packages: the
# tools' other dependencies are scripts, perl, udev... that the guest does without).
tools=(busybox-static open-iscsi e2fsprogs fio multipath-tools)
mapfile -t libs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${tools[@]}" 2>/dev/null |
    grep -E '^lib[a-z0-9.+-]+$' | grep -Ev 'perl|python' | sort -u)
pkgs=("${tools[@]}" "${libs[@]}" "$kpkg")
missing=()
for p in "${pkgs[@]}"; do
    compgen -G "$OUT/debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
    msg "apt-get download ${#missing[@]} packages"
    # apt-get's "download is performed unsandboxed" notice is only noise here
    (cd "$OUT/debs" && apt-get download -q "${missing[@]}" 2>&1 | grep -v -e unsandboxed -e '^Get:' >&2) ||
        true
    for p in "${missing[@]}"; do
        compgen -G "$OUT/debs/${p}_*.deb" >/dev/null && continue
        # stale package lists name versions the mirror no longer has: refresh them once
        if [ "$(id -u)" -eq 0 ] && [ -z "${BUILD_GUEST_UPDATED:-}" ]; then
            msg "apt-get download $p failed; apt-get update and again"
            apt-get update -qq >/dev/null 2>&1 || true
            BUILD_GUEST_UPDATED=1 exec "$0" "$OUT"
        fi
        die "apt-get download $p failed"
    done
fi

# Everything extracted into one tree: the libraries are looked up there first.
x=$OUT/extract
rm -rf "$x" "$OUT/root"
mkdir -p "$x"
for p in "${pkgs[@]}"; do
    for d in "$OUT/debs/${p}"_*.deb; do dpkg-deb -x "$d" "$x"; done
done
bb=$x/bin/busybox
[ -x "$bb" ] || die "no busybox in busybox-static"

r=$OUT/root
mkdir -p "$r"/{bin,sbin,etc,proc,sys,dev,tmp,run,mnt,var/lib,lib/x86_64-linux-gnu,lib64}
cp "$bb" "$r/bin/busybox"
for a in $("$bb" --list); do
    [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"
done
bins=(sbin/iscsid sbin/iscsiadm sbin/mkfs.ext4 sbin/mke2fs sbin/e2fsck usr/bin/fio
    sbin/multipath sbin/multipathd)
# multipath-tools' plugins, loaded by name from /lib/multipath (its multipath_dir)
plugins=(libchecktur.so libprioalua.so libprioconst.so libpriosysfs.so)
mkdir -p "$r/lib/multipath"
for p in "${plugins[@]}"; do
    [ -f "$x/lib/multipath/$p" ] || die "$p is not in multipath-tools"
    cp "$x/lib/multipath/$p" "$r/lib/multipath/"
done
for b in "${bins[@]}"; do
    [ -x "$x/$b" ] || die "$b is not in the extracted packages"
    cp "$x/$b" "$r/sbin/"
done

# Shared libraries: ldd (the host's loader: same release) resolves against the extracted tree
# first; a library that still comes from the host is taken from there. Flattened into one
# directory that the guest's LD_LIBRARY_PATH names (librados' RUNPATH points at a ceph/ one).
libpath=$(find "$x" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
for b in "${bins[@]}" "${plugins[@]/#/lib/multipath/}"; do
    out=$(LD_LIBRARY_PATH=$libpath ldd "$x/$b") || die "ldd $b failed"
    if grep -q 'not found' <<<"$out"; then
        die "$b: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"
    fi
    awk '/=> \// {print $3}' <<<"$out" | while read -r l; do
        cp -L "$l" "$r/lib/x86_64-linux-gnu/"
    done
done
cp -L "$x/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$r/lib64/"
ln -sf ../lib64/ld-linux-x86-64.so.2 "$r/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"

# Kernel modules: the initiator (iscsi_tcp and what it needs), SCSI disks, ext4, the virtio
# NIC, and the crypto the kernel asks for by name rather than by symbol (CRC32C for the
# digests and ext4 metadata, the T10 PI CRCs sd_mod's helpers allocate at load). modules.dep
# from busybox depmod (the package ships none); each module's dependencies are listed there
# in reverse load order, so walking them backwards gives an insmod order.
kx=$x/lib/modules/$kver
[ -d "$kx" ] || die "no /lib/modules/$kver in $kpkg"
"$bb" depmod -b "$x" "$kver"
want=(crc32c_generic crc32c-intel crct10dif_generic crc64_rocksoft_generic virtio_pci
    virtio_net iscsi_tcp sd_mod ext4)
declare -A loaded=()
order=()
dep_of() { awk -v m="$1" -F': *' '$1 == m {print $2; exit}' "$kx/modules.dep"; }
path_of() {
    awk -v n="/$1.ko" -F: 'substr($1, length($1) - length(n) + 1) == n {print $1; exit}' \
        "$kx/modules.dep"
}
add_mod() {
    local m=$1 d i deps
    [ -n "${loaded[$m]:-}" ] && return 0
    read -ra deps <<<"$(dep_of "$m")"
    for ((i = ${#deps[@]} - 1; i >= 0; i--)); do add_mod "${deps[i]}"; done
    loaded[$m]=1
    order+=("$m")
}
mkdir -p "$r/lib/modules"
# list NAME MODULE...: the modules and what they need that no earlier list loads
list() {
    local l=$1 w p m
    shift
    order=()
    for w in "$@"; do
        p=$(path_of "$w")
        [ -n "$p" ] || die "module $w not found in $kpkg"
        add_mod "$p"
    done
    : >"$r/lib/modules/$l"
    for m in "${order[@]}"; do
        cp "$kx/$m" "$r/lib/modules/"
        basename "$m" >>"$r/lib/modules/$l"
    done
}
list load.order "${want[@]}"
list load.mpath dm-multipath dm-round-robin dm-service-time scsi_dh_alua
cp "$x/boot/vmlinuz-$kver" "$OUT/vmlinuz.new"

install -m 755 "$HERE/guest_init.sh" "$r/init"
install -m 755 "$HERE/guest_mpath.sh" "$r/mpath.sh"
install -m 644 "$HERE/guest_lib.sh" "$r/lib/lti.sh"

# Uncompressed: under TCG the kernel unpacks it faster than it would inflate it.
(cd "$r" && find . | sort | "$bb" cpio -o -H newc 2>/dev/null) >"$OUT/initrd.img.new"
mv "$OUT/vmlinuz.new" "$OUT/vmlinuz"
mv "$OUT/initrd.img.new" "$OUT/initrd.img"
nmod=$(cat "$r"/lib/modules/load.* | wc -l)
rm -rf "$x" "$r"
echo "$stamp" >"$OUT/stamp"
msg "done: $(du -h "$OUT/initrd.img" | cut -f1) initramfs, $nmod modules"
