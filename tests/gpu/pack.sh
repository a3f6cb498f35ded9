#!/usr/bin/env bash
# tests/gpu/pack.sh - build the tree tests/gpu/run.sh runs, on a machine
# with nvcc, for a GPU machine that cannot build it (no nvcc, no Criterion,
# no liburing, no network).
#
#   tests/gpu/pack.sh [BUILD]
#
# Builds hoop with CUDA (make CUDA=1) into BUILD (default <repo>/build/gpu):
# the library, hooprun, ring_bench and the test suite; then copies beside
# it, into BUILD/lib, the shared libraries the programs need that a bare
# Ubuntu 24.04 lacks (libcriterion and what it needs, libibverbs and
# libnl): every library ldd finds except the C library's own (libc, libm,
# libpthread, libdl, librt, libresolv, ld-linux) and the compiler's
# (libgcc_s, libstdc++), which every Ubuntu has in a newer version. run.sh
# puts BUILD/lib on LD_LIBRARY_PATH for hoop's programs only.
#
# It ends by writing BUILD/PACKED (the commit, the toolkit, each program's
# NEEDED entries, the libraries copied), which run.sh reads: a BUILD with
# PACKED is used as it is, without make. It fails when a program still
# misses a library, or when BUILD is over 50 MiB.
#
# Environment: CUDA_HOME (default /usr/local/cuda), JOBS (make -j, default 2).
set -eu

repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$repo/build/gpu}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$build"
build=$(cd "$build" && pwd)
progs="libhoop.so hooprun ring_bench hoop_tests"

rm -f "$build/PACKED"
nice -n 19 make -C "$repo" -j"${JOBS:-2}" CUDA=1 BUILD="$build" all "$build/hoop_tests"

# The libraries to carry: what ldd resolves, less the C library's and the
# compiler's.
rm -rf "$build/lib"
mkdir -p "$build/lib"
for p in $progs; do
    ldd "$build/$p"
done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u |
    while read -r name path; do
        case $name in
        libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
            libutil.so.* | ld-linux* | libgcc_s.so.* | libstdc++.so.*) continue ;;
        esac
        cp -L "$path" "$build/lib/$name"
    done

# Each program finds every library it needs, the carried ones in lib/.
missing=0
for p in $progs; do
    if LD_LIBRARY_PATH="$build/lib" ldd "$build/$p" | grep -q 'not found'; then
        echo "pack.sh: $p still misses a library:" >&2
        LD_LIBRARY_PATH="$build/lib" ldd "$build/$p" | grep 'not found' >&2
        missing=1
    fi
done
[ $missing = 0 ] || exit 1

size_kib=$(du -sk "$build" | cut -f1)
if [ "$size_kib" -gt $((50 * 1024)) ]; then
    echo "pack.sh: $build is $((size_kib / 1024)) MiB, over 50 MiB" >&2
    exit 1
fi

{
    echo "packed $(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "commit $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)$(
        git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "nvcc $("$CUDA_HOME/bin/nvcc" --version | grep -o 'release [0-9.]*')"
    for p in $progs; do
        echo "needed $p: $(readelf -d "$build/$p" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' |
            tr '\n' ' ')"
    done
    echo "carried in lib/: $(ls "$build/lib" | tr '\n' ' ')"
    echo "size $((size_kib / 1024)) MiB"
} >"$build/PACKED"
cat "$build/PACKED"
echo "pack.sh: $build is ready; on the GPU machine: tests/gpu/run.sh OUT"
