#!/usr/bin/env bash
# tests/gpu/run.sh - the GPU checks, run on a machine with an NVIDIA GPU.
#
#   tests/gpu/run.sh [OUT]
#
# Builds hoop with CUDA (make CUDA=1, in build/gpu), runs the gpu suite with
# HOOP_TEST_REQUIRE_GPU=1 (so that a GPU that cannot be used fails instead
# of skipping) and the packaging suite, and prints a summary. Everything it
# learns goes to OUT (default build/gpu-results): the machine (nvidia-smi,
# nvcc), the build log, libhoop.so's NEEDED entries, each suite's log. Each
# step has a time limit; the whole takes well under 8 minutes (the build
# about a minute on 16 cores, the tests seconds).
#
# The gpu suite today: the memory kind of cudaMalloc'd, cudaMallocHost'd,
# managed and malloc'd memory, the collectives' checks of where their
# buffers live, and every reduction kernel (each dtype and op, in place
# and apart, random data) against reduce/'s CPU kernels, bit for bit.
#
# Environment:
#   CUDA_HOME            the CUDA toolkit (default /usr/local/cuda)
#   HOOP_GPU_BUILD       the build tree (default <repo>/build/gpu)
#   HOOP_GPU_PREBUILT=1  use HOOP_GPU_BUILD as it is, without make (a tree
#                        built elsewhere, on a machine with the headers)
#
# Building needs, beside nvcc: a C compiler, make, pkg-config, and the
# headers of Criterion, liburing and libibverbs (Debian/Ubuntu:
# libcriterion-dev liburing-dev libibverbs-dev); the script names any that
# is missing. Exit status: 0 when every step passed, 1 otherwise.
set -u

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/build/gpu-results}
build=${HOOP_GPU_BUILD:-$repo/build/gpu}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
jobs=$(nproc 2>/dev/null || echo 4)
export repo out build
summary=()
failed=0

# step NAME LIMIT_S COMMAND...: run it, its output to OUT/NAME.log.
step() {
    local name=$1 limit=$2
    shift 2
    local t0 rc
    t0=$(date +%s)
    # bash -c: a step may be one of the functions below (exported).
    timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >"$out/$name.log" 2>&1
    rc=$?
    local took=$(( $(date +%s) - t0 ))
    if [ $rc = 0 ]; then
        summary+=("ok      $name (${took} s)")
    else
        [ $rc = 124 ] && summary+=("FAILED  $name: over its ${limit} s limit") ||
            summary+=("FAILED  $name: exit $rc (${took} s), see $out/$name.log")
        failed=1
    fi
    return $rc
}

finish() {
    {
        echo "== hoop GPU checks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)"
        grep -m1 -i 'driver version' "$out/machine.log" 2>/dev/null
        grep -m1 'release' "$out/machine.log" 2>/dev/null
        printf '%s\n' "${summary[@]}"
        if [ -f "$out/tests.log" ]; then
            echo "-- tests:"
            grep -E '^\[(PASS|FAIL|SKIP)\]' "$out/tests.log" | grep -v 'Test is disabled'
            grep -E '^\[----\]' "$out/tests.log" | head -n 40
            grep -E 'Synthesis' "$out/tests.log"
        fi
        [ $failed = 0 ] && echo "== all passed" || echo "== FAILED"
        echo "== results in $out"
    } | tee "$out/summary.txt"
    exit $failed
}

machine() {
    uname -a
    cat /etc/os-release 2>/dev/null | grep -E '^(NAME|VERSION)='
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi
        nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv
    else
        echo "no nvidia-smi on PATH"
    fi
    "$CUDA_HOME/bin/nvcc" --version || echo "no nvcc at $CUDA_HOME/bin/nvcc"
    nproc
}
export -f machine
step machine 60 machine

# What the build needs, named before it starts.
needs() {
    local miss=()
    [ -x "$CUDA_HOME/bin/nvcc" ] || miss+=("nvcc ($CUDA_HOME/bin/nvcc; set CUDA_HOME)")
    command -v make >/dev/null || miss+=("make")
    command -v cc >/dev/null || miss+=("a C compiler (cc)")
    local h
    for h in criterion/criterion.h liburing.h infiniband/verbs.h; do
        echo "#include <$h>" | cc -E -x c - >/dev/null 2>&1 || miss+=("the header <$h>")
    done
    if [ ${#miss[@]} -gt 0 ]; then
        printf 'missing: %s\n' "${miss[@]}"
        echo "(Debian/Ubuntu: apt-get install build-essential pkg-config libcriterion-dev" \
             "liburing-dev libibverbs-dev; or build elsewhere and set HOOP_GPU_PREBUILT=1)"
        return 1
    fi
    echo "all there"
}

export -f needs
if [ "${HOOP_GPU_PREBUILT:-0}" = 1 ]; then
    summary+=("skipped build: HOOP_GPU_PREBUILT=1, using $build as it is")
else
    step build-needs 60 needs || finish
    step build 420 make -C "$repo" -j"$jobs" CUDA=1 BUILD="$build" all "$build/hoop_tests" ||
        finish
fi
for f in "$build/libhoop.so" "$build/hoop_tests" "$build/hooprun" "$build/ring_bench"; do
    [ -e "$f" ] || { summary+=("FAILED  no $f"); failed=1; finish; }
done

needed() { readelf -d "$build/libhoop.so" | grep NEEDED; }
export -f needed
step needed 30 needed

# The tests run in a scratch folder (what a crash leaves stays out of the
# source tree); one job, so that the suites do not share the GPU.
mkdir -p "$out/cwd"
tests() {
    cd "$out/cwd" &&
        HOOP_TEST_REQUIRE_GPU=1 HOOP_BUILD_DIR="$build" HOOP_SOURCE_DIR="$repo" \
            "$build/hoop_tests" --jobs 1 --verbose --filter='@(gpu|packaging)/*'
}
export -f tests
step tests 240 tests
finish
