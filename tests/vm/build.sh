#!/usr/bin/env bash
# tests/vm/build.sh - build the kernel and initramfs that tests/vm/run.sh boots.
#
#   tests/vm/build.sh [--force]
#
# The guest is Debian's own amd64 kernel plus a busybox initramfs that holds
# the modules for virtio-9p, a dummy netdev and Soft-RoCE (rdma_rxe, rdma_ucm),
# iproute2's `rdma` tool, the rxe verbs provider, and every shared library that
# the programs hoop builds (build/hoop_tests, build/hooprun, build/ring_bench)
# and the libraries hoop dlopens (libibverbs, librdmacm, libfabric) need.
#
# Files come from Debian packages: a package installed on this machine is
# copied from it (same versions as the binaries were linked against, no
# download); the others (the kernel, busybox-static when it is not installed)
# are fetched once with `apt-get download` into the cache. Run as root, the
# script also apt-get installs the host tools it and run.sh use.
#
# Everything lives in $HOOP_TEST_VM_CACHE (default: build/vm of the repository).
# A second run only checks its inputs (script, init, library files) and
# exits; --force rebuilds the kernel step and the initramfs.
#
# Environment:
#   HOOP_TEST_VM_CACHE    cache directory (default <repo>/build/vm)
#   HOOP_TEST_VM_KERNEL   kernel package (default: what linux-image-amd64 depends on)
#   HOOP_TEST_VM_BINS     more host programs or libraries (paths, blank-separated)
#                    whose shared libraries the guest must have
#
# Exit status: 0 ready, 77 when the image cannot be made here (no network for
# the download, host tools missing and not root; the last line on stderr
# says why), anything else is a failure.
set -euo pipefail
shopt -s nullglob

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${HOOP_TEST_VM_CACHE:-$repo/build/vm}
force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    *) echo "usage: tests/vm/build.sh [--force]" >&2; exit 2 ;;
esac

say() { echo "tests/vm/build: $*" >&2; }
# skip: the one line that run.sh passes on as the reason the VM tests cannot run
skip() { echo "tests/vm: $*" >&2; exit 77; }
die() { say "error: $*"; exit 1; }

mkdir -p "$cache/debs"
cache=$(cd "$cache" && pwd)
exec 9>"$cache/.lock"
flock 9

root_user=0
[ "$(id -u)" = 0 ] && root_user=1
export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_update() {
    [ $apt_updated = 1 ] && return 0
    apt_updated=1
    say "apt-get update"
    apt-get update -qq >&2
}

# ---------------------------------------------------------------- host tools
# tool:package pairs; qemu is only needed by run.sh, so its absence is not
# fatal here
missing=()
for tp in cpio:cpio depmod:kmod modinfo:kmod readelf:binutils xz:xz-utils \
          dpkg-deb:dpkg ldconfig:libc-bin qemu-system-x86_64:qemu-system-x86; do
    command -v "${tp%%:*}" >/dev/null 2>&1 || missing+=("${tp#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    if [ $root_user = 1 ]; then
        say "installing host packages: ${missing[*]}"
        if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
            apt_update || true
            apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
                skip "cannot apt-get install ${missing[*]} for the test VM (no network?)."
        fi
    else
        need=()
        for p in "${missing[@]}"; do [ "$p" = qemu-system-x86 ] || need+=("$p"); done
        [ ${#need[@]} -eq 0 ] ||
            skip "the test VM needs the packages ${need[*]} (run tools/install-deps as root)."
        say "note: qemu-system-x86 is not installed; run.sh will not be able to boot the guest"
    fi
fi

# ---------------------------------------------------------------- packages
# installed PKG: is it installed on this machine (then its files are used)?
installed() {
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]
}

# fetch PKG: print the path of a .deb of PKG in the cache, downloading the
# archive's candidate version when there is none yet
fetch() {
    local pkg=$1 debs=("$cache/debs/$1"_*.deb)
    if [ ${#debs[@]} -eq 0 ]; then
        say "downloading $pkg"
        if ! (cd "$cache/debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2); then
            [ $root_user = 1 ] && apt_update && (cd "$cache/debs" &&
                apt-get download -q -o APT::Sandbox::User=root "$pkg" >&2) ||
                skip "cannot download the Debian package $pkg for the test VM (apt-get download failed: no network?)."
        fi
        debs=("$cache/debs/$1"_*.deb)
        [ ${#debs[@]} -gt 0 ] || die "apt-get download left no $pkg .deb in $cache/debs"
    fi
    printf '%s\n' "${debs[@]}" | sort -V | tail -n 1
}

# The kernel: a package given by the user, else the one already in the cache,
# else the one Debian's linux-image-amd64 points at.
kpkg=${HOOP_TEST_VM_KERNEL:-}
if [ -z "$kpkg" ]; then
    cached=("$cache"/debs/linux-image-*-amd64_*.deb)
    if [ ${#cached[@]} -gt 0 ]; then
        kdeb=$(printf '%s\n' "${cached[@]}" | sort -V | tail -n 1)
        kpkg=$(basename "$kdeb"); kpkg=${kpkg%%_*}
    else
        kdep() { apt-cache depends linux-image-amd64 2>/dev/null |
                 awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'; }
        kpkg=$(kdep)
        if [ -z "$kpkg" ] && [ $root_user = 1 ]; then
            apt_update || true
            kpkg=$(kdep)
        fi
        [ -n "$kpkg" ] ||
            skip "apt knows no linux-image-amd64 package to boot the test VM with (no apt lists or no network?)."
    fi
fi
kdeb=$(fetch "$kpkg")
kver=${kpkg#linux-image-}
kver=${kver%-unsigned}

# Userspace packages of the guest. Those installed here are read from /, the
# others are unpacked into $cache/stage.
guest_pkgs=(libc6 libgcc-s1 busybox-static libibverbs1 ibverbs-providers librdmacm1
            libnl-3-200 libnl-route-3-200 iproute2 libmnl0 libelf1 libbsd0 libmd0
            libcap2 zlib1g libselinux1 libpcre2-8-0)
stage=$cache/stage
want=()
for p in "${guest_pkgs[@]}"; do
    installed "$p" && continue
    f=$(fetch "$p")
    want+=("$f")
done
stage_list=$(printf '%s\n' "${want[@]##*/}")
if [ ! -d "$stage" ] || [ "$(cat "$stage/.debs" 2>/dev/null)" != "$stage_list" ]; then
    rm -rf "$stage"
    mkdir -p "$stage"
    for f in "${want[@]}"; do dpkg-deb -x "$f" "$stage"; done
    printf '%s\n' "$stage_list" > "$stage/.debs"
fi
# sources: / first, then the stage
srcroots=("" "$stage")

# find REL...: the first of the given paths that exists under a source root
find_file() {
    local r rel
    for rel in "$@"; do
        for r in "${srcroots[@]}"; do
            if [ -e "$r/$rel" ]; then echo "$r/$rel"; return 0; fi
        done
    done
    return 1
}
find_lib() {
    find_file "usr/lib/x86_64-linux-gnu/$1" "lib/x86_64-linux-gnu/$1" "usr/lib/$1" "lib/$1"
}

# ---------------------------------------------------------------- kernel
# $cache/kernel: the bootable image, the modules the guest loads (in load
# order in modules.load) and modules.builtin*. Made from the kernel .deb once.
kmods_roots=(virtio_pci 9pnet_virtio 9p dummy rdma_rxe ib_uverbs rdma_ucm crc32_generic)
kdir=$cache/kernel
kstamp="$(basename "$kdeb") ${kmods_roots[*]} $(sha256sum < "$here/build.sh" | cut -c1-16)"
if [ $force = 1 ] || [ "$(cat "$kdir/stamp" 2>/dev/null)" != "$kstamp" ]; then
    say "unpacking $(basename "$kdeb")"
    tmp=$cache/kernel.unpack
    rm -rf "$tmp" "$kdir.new"
    mkdir -p "$tmp" "$kdir.new"
    dpkg-deb -x "$kdeb" "$tmp"
    mdir=$tmp/lib/modules/$kver
    [ -d "$mdir" ] || mdir=$tmp/usr/lib/modules/$kver
    [ -d "$mdir" ] || die "no modules for $kver in $kdeb"
    vmlinuz=$tmp/boot/vmlinuz-$kver
    [ -f "$vmlinuz" ] || die "no /boot/vmlinuz-$kver in $kdeb"

    # qemu boots an uncompressed ELF vmlinux through the PVH entry point,
    # which skips the BIOS and the guest's own decompression (several
    # seconds under TCG). The bzImage header gives where its compressed
    # payload lies: setup_sects at 0x1f1, payload_offset/length at 0x248.
    u8() { od -An -tu1 -j "$2" -N 1 "$1" | tr -d ' '; }
    u32() { od -An -tu4 -j "$2" -N 4 "$1" | tr -d ' '; }
    if grep -qx 'CONFIG_PVH=y' "$tmp/boot/config-$kver"; then
        setup=$(( ($(u8 "$vmlinuz" $((0x1f1))) + 1) * 512 ))
        poff=$(u32 "$vmlinuz" $((0x248)))
        plen=$(u32 "$vmlinuz" $((0x24c)))
        magic=$(od -An -tx1 -j $((setup + poff)) -N 2 "$vmlinuz" | tr -d ' ')
        case "$magic" in
            fd37) unpack=(xz -dc --single-stream) ;;
            1f8b) unpack=(gzip -dc) ;;
            28b5) unpack=(zstd -dcq) ;;
            *) die "unknown compression of the kernel payload (magic $magic)" ;;
        esac
        { tail -c +$((setup + poff + 1)) "$vmlinuz" | head -c "$plen" |
            "${unpack[@]}" > "$kdir.new/kernel"; } 2>/dev/null || true
        [ "$(od -An -tx1 -N 4 "$kdir.new/kernel" | tr -d ' ')" = 7f454c46 ] ||
            die "the payload of $vmlinuz did not unpack to an ELF vmlinux"
    else
        cp "$vmlinuz" "$kdir.new/kernel"
    fi
    cp "$tmp/boot/config-$kver" "$kdir.new/config"

    # Module closure from modinfo's depends= (no depmod over the whole tree),
    # emitted dependencies first.
    declare -A ko=() seen=()
    while IFS= read -r f; do
        n=${f##*/}; n=${n%%.ko*}; ko[${n//-/_}]=${f#"$mdir"/}
    done < <(find "$mdir" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst')
    : > "$kdir.new/modules.load"
    visit() {
        local m=${1//-/_} d rel
        [ -n "${seen[$m]:-}" ] && return 0
        seen[$m]=1
        if [ -z "${ko[$m]:-}" ]; then
            grep -Eq "/$1\.ko|/${m}\.ko" "$mdir/modules.builtin" && return 0
            die "kernel module $1 is in neither $kpkg's modules nor its built-ins"
        fi
        for d in $(modinfo -F depends "$mdir/${ko[$m]}" | tr ',' ' '); do visit "$d"; done
        rel=${ko[$m]%.xz}; rel=${rel%.zst}
        mkdir -p "$kdir.new/modules/$(dirname "$rel")"
        case "${ko[$m]}" in
            *.xz) xz -dc "$mdir/${ko[$m]}" > "$kdir.new/modules/$rel" ;;
            *.zst) zstd -dcq "$mdir/${ko[$m]}" > "$kdir.new/modules/$rel" ;;
            *) cp "$mdir/${ko[$m]}" "$kdir.new/modules/$rel" ;;
        esac
        echo "$rel" >> "$kdir.new/modules.load"
    }
    for m in "${kmods_roots[@]}"; do visit "$m"; done
    cp "$mdir"/modules.builtin* "$kdir.new/modules/" 2>/dev/null || true
    echo "$kver" > "$kdir.new/release"
    echo "$kstamp" > "$kdir.new/stamp"
    rm -rf "$kdir" "$tmp"
    mv "$kdir.new" "$kdir"
fi

# ---------------------------------------------------------------- manifest
# Lines "DEST SOURCE" of every file copied into the initramfs. The shared
# libraries are the closure of the guest's tools, the rxe provider, the host
# programs and the libraries programs dlopen, found with readelf.
manifest=()
add() { manifest+=("$1 $2"); }

busybox=$(find_file usr/bin/busybox bin/busybox) || die "no busybox found"
[ "$(readelf -d "$busybox" 2>/dev/null | grep -c NEEDED)" = 0 ] ||
    die "$busybox is linked dynamically (the guest needs busybox-static's)"
add usr/bin/busybox "$busybox"
rdma=$(find_file usr/sbin/rdma sbin/rdma usr/bin/rdma bin/rdma) || die "no rdma tool (iproute2) found"
add usr/bin/rdma "$rdma"
rxe=
for sr in "${srcroots[@]}"; do
    for f in "$sr"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so \
             "$sr"/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so; do
        rxe=$f; break 2
    done
done
[ -n "$rxe" ] || die "no rxe provider (ibverbs-providers) found"
add "usr/lib/x86_64-linux-gnu/libibverbs/${rxe##*/}" "$rxe"
f=$(find_file etc/libibverbs.d/rxe.driver) || die "no etc/libibverbs.d/rxe.driver (ibverbs-providers)"
add etc/libibverbs.d/rxe.driver "$f"
loader=$(find_lib ld-linux-x86-64.so.2) || die "no ld-linux-x86-64.so.2"
add usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$(readlink -f "$loader")"
# optional tools, when this machine has them
for t in ibv_devinfo ibv_devices; do
    f=$(find_file "usr/bin/$t") && add "usr/bin/$t" "$f"
done

# roots of the library closure: ELF files, then sonames
elf_roots=("$rdma" "$rxe")
for b in hoop_tests hooprun ring_bench; do
    [ -f "$repo/build/$b" ] && elf_roots+=("$repo/build/$b")
done
for b in ${HOOP_TEST_VM_BINS:-}; do
    case "$b" in /*) ;; *) b=$repo/$b ;; esac
    [ -f "$b" ] || die "HOOP_TEST_VM_BINS: no file $b"
    elf_roots+=("$b")
done
for f in "${manifest[@]}"; do
    case "$f" in usr/bin/ibv_*) elf_roots+=("${f#* }") ;; esac
done
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
queue=(libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2
       libgcc_s.so.1 libibverbs.so.1 librdmacm.so.1 libnl-3.so.200 libnl-route-3.so.200)
optional=(libfabric.so.1 liburing.so.2)   # dlopened or linked by hoop, when present
for so in "${optional[@]}"; do find_lib "$so" >/dev/null && queue+=("$so"); done
for f in "${elf_roots[@]}"; do
    mapfile -t -O ${#queue[@]} queue < <(needed "$f")
done
declare -A have=()
while [ ${#queue[@]} -gt 0 ]; do
    so=${queue[0]}
    queue=("${queue[@]:1}")
    [ -n "${have[$so]:-}" ] && continue
    have[$so]=1
    [ "$so" = ld-linux-x86-64.so.2 ] && continue
    f=$(find_lib "$so") || die "no shared library $so on this machine (install its package)"
    f=$(readlink -f "$f")
    add "usr/lib/x86_64-linux-gnu/$so" "$f"
    mapfile -t -O ${#queue[@]} queue < <(needed "$f")
done

initrd=$cache/initramfs.cpio.gz
stamp=$(
    sha256sum "$here/build.sh" "$here/init.sh" | cut -c1-64
    cat "$kdir/stamp"
    printf '%s\n' "${manifest[@]}"
    srcs=()
    for m in "${manifest[@]}"; do srcs+=("${m#* }"); done
    stat -L -c '%s %Y %n' "${srcs[@]}"
)
if [ $force = 0 ] && [ -f "$initrd" ] && [ "$(cat "$cache/initramfs.stamp" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi

# ---------------------------------------------------------------- initramfs
say "building the initramfs (kernel $kver)"
r=$cache/root
rm -rf "$r"
mkdir -p "$r"/{dev,proc,sys,tmp,run,root,mnt,etc/hoop-vm,usr/bin,usr/sbin,usr/lib64,usr/lib/x86_64-linux-gnu}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$r/$d"; done
for m in "${manifest[@]}"; do
    dst=$r/${m%% *}
    mkdir -p "$(dirname "$dst")"
    cp -L "${m#* }" "$dst"
done
ln -s ../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$r/usr/lib64/ld-linux-x86-64.so.2"
# busybox applets, as links in usr/bin and usr/sbin
while IFS= read -r a; do
    case "$a" in
        */*) ;;
        *) continue ;;
    esac
    name=${a##*/}
    dir=usr/bin
    case "$a" in sbin/* | usr/sbin/*) dir=usr/sbin ;; esac
    [ -e "$r/usr/bin/$name" ] || [ -e "$r/usr/sbin/$name" ] || ln -s /usr/bin/busybox "$r/$dir/$name"
done < <("$r/usr/bin/busybox" --list-full)
install -m 0755 "$here/init.sh" "$r/init"

# kernel modules, and depmod's tables so that the kernel's own
# request_module() (busybox modprobe) finds them too
mkdir -p "$r/usr/lib/modules/$kver"
cp -R "$kdir/modules/." "$r/usr/lib/modules/$kver/"
depmod -b "$r" "$kver"
cp "$kdir/modules.load" "$r/etc/hoop-vm/modules"
echo "$kver" > "$r/etc/hoop-vm/kernel-release"

cat > "$r/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
printf 'root:x:0:\nnogroup:x:65534:\n' > "$r/etc/group"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n192.0.2.1\thoop-vm\n' > "$r/etc/hosts"
printf 'passwd: files\ngroup: files\nhosts: files\n' > "$r/etc/nsswitch.conf"
echo hoop-vm > "$r/etc/hostname"
echo /usr/lib/x86_64-linux-gnu > "$r/etc/ld.so.conf"
ldconfig -r "$r"

(cd "$r" && find . -mindepth 1 -print0 | LC_ALL=C sort -z |
    cpio --null --create --format=newc --owner=0:0 --quiet) | gzip -1 > "$initrd.new"
mv "$initrd.new" "$initrd"
printf '%s\n' "$stamp" > "$cache/initramfs.stamp"
say "ready: $(du -h "$kdir/kernel" | cut -f1) kernel, $(du -h "$initrd" | cut -f1) initramfs ($(du -sh "$r" | cut -f1) unpacked)"
rm -rf "$r"
