#!/usr/bin/env bash
# tests/gpu/run.sh - the GPU checks, run on a machine with an NVIDIA GPU.
#
#   tests/gpu/run.sh [OUT]
#
# Everything it learns goes to OUT (default build/gpu-results), one log per
# step, and OUT/summary.txt at the end: each step ok or FAILED with its
# reason, the test results, and the benchmark table; then the whole of OUT
# in one archive beside it, OUT.tar.xz. Each step has a time
# limit, and the whole run a budget (GPUCHECK_BUDGET_S, 450 s): a step that
# would start past it is skipped, saying so, so the run ends within 8
# minutes whatever hangs. Exit status: 0 when every step passed, 1
# otherwise.
#
# The tree it runs: a BUILD folder (default <repo>/build/gpu) that
# tests/gpu/pack.sh filled on a machine with nvcc (the GPU machine needs
# neither nvcc nor Criterion nor liburing: BUILD/lib holds the libraries
# the test suite needs, put on LD_LIBRARY_PATH for hoop's programs only);
# or, without BUILD/PACKED, one this script builds with make CUDA=1 (needs
# nvcc and the headers of Criterion, liburing and libibverbs).
#
# The steps:
#   machine       nvidia-smi, the driver, the OS, nvcc, python3's torch
#   packaging     the NEEDED entries of libhoop.so and the programs
#                 (readelf, else what pack.sh recorded) and ldd of each
#   tests-gpu     gpu/*, gpu_alloc/* and ring_bench/device_* with
#                 HOOP_TEST_REQUIRE_GPU=1: a GPU that cannot be used fails
#   ring-*        ring_bench allreduce (f32 sum, 64 KiB..256 MiB by 4x,
#                 20 timed calls) under hooprun at N = 2 and 4, all ranks
#                 on GPU 0: host buffers, then -G device buffers
#   ring_device_mid-*  ring_bench -G 1..16 MiB at N = 2 and 4 with the
#                 shared-memory chunk rule (the default) and without it
#                 (HOOP_SHM_CHUNK_BYTES=0), twice each, interleaved
#   gloo-*        torch.distributed gloo allreduce on CUDA tensors, the
#                 same N and sizes (bench/torch_gloo_bench.py --cuda)
#   compare       the table: busbw host, -G, gloo; -G/host, -G/gloo; the
#                 64 KiB times; issue 15's targets met or missed
#   tests-gpu-all every gpu* suite (the collectives on device buffers),
#                 with what is left of the budget
#   torch_cuda-*  hoop.torch on CUDA tensors against CPU tensors
#                 (tests/gpu/torch_cuda.py) at N = 2 and 4
#   engine_targets the engine's and hoop.torch's targets on this machine's
#                 cores (bench/engine_targets.sh)
#   manycore      N = 8 on one host, host buffers: hoop (the ring over
#                 shared memory, and ring_bench -R: the allreduce in place
#                 in memory from hoop_mem_alloc) beside torch's gloo on
#                 loopback, 64 and 256 MiB, two repeats (bench/manycore.sh)
#
# Environment:
#   CUDA_HOME            the CUDA toolkit (default /usr/local/cuda)
#   HOOP_GPU_BUILD       the build tree (default <repo>/build/gpu)
#   HOOP_GPU_PREBUILT    1: use HOOP_GPU_BUILD as it is; 0: build it here;
#                        default 1 where pack.sh left HOOP_GPU_BUILD/PACKED
#   PYTHON               the python with torch (default python3)
#   GPUCHECK_BUDGET_S    the run's time budget in seconds (default 450)
#   GPUCHECK_MAX_BYTES   the benchmarks' largest size (default 256M)
#   GPUCHECK_ITERS       the benchmarks' timed calls per size (default 20)
#   GPUCHECK_STEPS       the steps to run, space-separated names or name
#                        prefixes (e.g. "tests-gpu-all ring_device_mid
#                        manycore"); default all. machine and packaging
#                        always run; a step left out shows as skipped
#   CUDA_VISIBLE_DEVICES the benchmarks' GPUs (default 0: every rank on GPU 0)
set -u

repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/build/gpu-results}
build=${HOOP_GPU_BUILD:-$repo/build/gpu}
prebuilt=${HOOP_GPU_PREBUILT:-}
[ -n "$prebuilt" ] || { [ -f "$build/PACKED" ] && prebuilt=1 || prebuilt=0; }
# The library names every HOOP_* variable it does not know in its log:
# these two are this script's, not the programs'.
unset HOOP_GPU_BUILD HOOP_GPU_PREBUILT
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PYTHON=${PYTHON:-python3}
max_bytes=${GPUCHECK_MAX_BYTES:-256M}
iters=${GPUCHECK_ITERS:-20}
budget=${GPUCHECK_BUDGET_S:-450}
only=${GPUCHECK_STEPS:-}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
mkdir -p "$build" && build=$(cd "$build" && pwd)
jobs=$(nproc 2>/dev/null || echo 4)
export repo out build max_bytes iters
summary=()
failed=0
t_start=$(date +%s)

# step NAME LIMIT_S COMMAND...: run it, its output to OUT/NAME.log, within
# LIMIT_S and what is left of the budget.
step() {
    local name=$1 limit=$2
    shift 2
    local t0 rc left want
    if [ -n "$only" ] && [ "$name" != machine ] && [ "$name" != packaging ]; then
        for want in $only; do
            [ "${name#"$want"}" != "$name" ] && break
            want=
        done
        if [ -z "$want" ]; then
            summary+=("skipped $name (not in GPUCHECK_STEPS)")
            return 0
        fi
    fi
    t0=$(date +%s)
    left=$((t_start + budget - t0))
    if [ $left -lt 10 ]; then
        summary+=("FAILED  $name: not run, the run's ${budget} s budget is spent")
        failed=1
        return 1
    fi
    [ $limit -le $left ] || limit=$left
    # bash -c: a step may be one of the functions below (exported).
    # timeout signals the whole process group, ranks included.
    timeout --kill-after=10 "$limit" bash -c '"$@"' "$name" "$@" >"$out/$name.log" 2>&1
    rc=$?
    local took=$(($(date +%s) - t0))
    if [ $rc = 0 ]; then
        summary+=("ok      $name (${took} s)")
    else
        local why
        # The first line that names the trouble, else the last line.
        why=$(grep -m1 -E 'ring_bench: rank|error:|Error|not found' "$out/$name.log" ||
            grep -v '^\s*$' "$out/$name.log" | tail -n 1)
        why=$(echo "$why" | cut -c1-240)
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            summary+=("FAILED  $name: over its ${limit} s limit: $why")
        else
            summary+=("FAILED  $name: exit $rc (${took} s): $why")
        fi
        failed=1
    fi
    return $rc
}

finish() {
    {
        echo "== hoop GPU checks: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(hostname)," \
            "$(($(date +%s) - t_start)) s"
        grep -m1 '^gpu:' "$out/machine.log" 2>/dev/null
        grep -m1 '^commit' "$build/PACKED" 2>/dev/null | sed 's/^/binaries of /'
        printf '%s\n' "${summary[@]}"
        local t
        for t in tests-gpu tests-gpu-all; do
            [ -f "$out/$t.log" ] || continue
            echo "-- $t:"
            grep -E '^\[(PASS|FAIL|SKIP)\]' "$out/$t.log" | grep -v 'Test is disabled'
            grep -E '^\[----\]' "$out/$t.log" | grep -v 'Criterion v' | awk '!seen[$0]++' |
                head -n 40
            grep -E 'Synthesis' "$out/$t.log"
        done
        if [ -f "$out/compare.log" ]; then
            echo "-- benchmarks:"
            cat "$out/compare.log"
        fi
        [ $failed = 0 ] && echo "== all passed" || echo "== FAILED"
        echo "== results in $out and, all in one file, $out.tar.xz"
    } | tee "$out/summary.txt"
    # One file to copy back from the GPU machine, logs and all.
    tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")" ||
        echo "run.sh: could not write $out.tar.xz" >&2
    exit $failed
}

machine() {
    uname -a
    grep -E '^(NAME|VERSION)=' /etc/os-release 2>/dev/null
    echo "cpus: $(nproc)"
    if command -v nvidia-smi >/dev/null; then
        echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,pci.bus_id \
            --format=csv,noheader 2>&1 | head -n 4 | tr '\n' ';')"
        nvidia-smi
    else
        echo "gpu: none (no nvidia-smi on PATH)"
    fi
    cat /proc/driver/nvidia/version 2>/dev/null || echo "no /proc/driver/nvidia/version"
    "$CUDA_HOME/bin/nvcc" --version 2>/dev/null || echo "no nvcc at $CUDA_HOME/bin/nvcc"
    "$PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
"available", torch.cuda.is_available(), "gloo", torch.distributed.is_gloo_available())' 2>&1 |
        tail -n 1
    [ -f "$build/PACKED" ] && cat "$build/PACKED"
    # Facts only: a machine without a GPU is the tests' to report.
    return 0
}
export -f machine
step machine 30 machine

# What a build here needs, named before it starts.
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
            "liburing-dev libibverbs-dev; or run tests/gpu/pack.sh on a machine with nvcc" \
            "and carry build/gpu here)"
        return 1
    fi
    echo "all there"
}
export -f needs
if [ "$prebuilt" = 1 ]; then
    summary+=("        build: none, $build as pack.sh left it")
else
    step build-needs 30 needs || finish
    step build 240 make -C "$repo" -j"$jobs" CUDA=1 BUILD="$build" all "$build/hoop_tests" ||
        finish
fi
# libhoop.so's links, where the tree came without them (a copy that
# drops symbolic links): the programs need none of them, the checks do.
for f in "$build"/libhoop.so.*.*.*; do
    [ -f "$f" ] || continue
    v=${f##*/libhoop.so.}
    [ -e "$build/libhoop.so.${v%%.*}" ] || ln -sf "libhoop.so.$v" "$build/libhoop.so.${v%%.*}"
    [ -e "$build/libhoop.so" ] || ln -sf "libhoop.so.${v%%.*}" "$build/libhoop.so"
done
# and the programs' mode bits, where the copy lost them.
for f in hoop_tests hooprun ring_bench; do
    [ ! -f "$build/$f" ] || [ -x "$build/$f" ] || chmod +x "$build/$f"
done
for f in libhoop.so hoop_tests hooprun ring_bench; do
    [ -e "$build/$f" ] || {
        summary+=("FAILED  no $build/$f (run tests/gpu/pack.sh, or build here)")
        failed=1
        finish
    }
done

# hoop's programs find the libraries pack.sh carried; python does not
# (torch brings its own, newer ones).
hoop_env() { LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
export -f hoop_env

packaging() {
    local p rc=0
    for p in libhoop.so ring_bench hooprun hoop_tests; do
        if command -v readelf >/dev/null; then
            echo "$p NEEDED: $(readelf -d "$build/$p" |
                sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')"
        else
            echo "$p NEEDED (as pack.sh recorded; no readelf here):" \
                "$(sed -n "s/^needed $p: //p" "$build/PACKED" 2>/dev/null)"
        fi
    done
    for p in libhoop.so ring_bench hooprun; do
        echo "-- ldd $p"
        ldd "$build/$p"
        ldd "$build/$p" | grep -q 'not found' && rc=1
    done
    echo "-- ldd hoop_tests (LD_LIBRARY_PATH=$build/lib)"
    hoop_env ldd "$build/hoop_tests"
    hoop_env ldd "$build/hoop_tests" | grep -q 'not found' && rc=1
    [ $rc = 0 ] || echo "a library is not found (see above)"
    return $rc
}
export -f packaging
step packaging 20 packaging

# The tests run in a scratch folder (what a crash leaves stays out of the
# source tree).
mkdir -p "$out/cwd"
suite() {
    local jobs=$1 filter=$2
    cd "$out/cwd" &&
        HOOP_TEST_REQUIRE_GPU=1 HOOP_BUILD_DIR="$build" HOOP_SOURCE_DIR="$repo" \
            hoop_env "$build/hoop_tests" --jobs "$jobs" --verbose --filter="$filter"
}
export -f suite
step tests-gpu 60 suite 2 '@(gpu/*|gpu_alloc/*|ring_bench/device_*)'

# The benchmarks' ranks all share GPU 0 (CUDA_VISIBLE_DEVICES, unless set).
bench_gpus=${CUDA_VISIBLE_DEVICES:-0}
export bench_gpus
# ring_bench N host|device
ring() {
    local flag=
    [ "$2" = device ] && flag=-G
    cd "$out/cwd" && CUDA_VISIBLE_DEVICES=$bench_gpus \
        "$build/hooprun" -np "$1" --no-tag "$build/ring_bench" $flag \
        -b 64K -e "$max_bytes" -f 4 -n "$iters" -w 5
}
# gloo N: torch's gloo on CUDA tensors
gloo() {
    cd "$out/cwd" && CUDA_VISIBLE_DEVICES=$bench_gpus GLOO_SOCKET_IFNAME=lo \
        "$PYTHON" "$repo/bench/torch_gloo_bench.py" \
        -np "$1" --cuda -b 64K -e "$max_bytes" -f 4 -n "$iters" -w 5 --timeout 60 &&
        ! grep -q WRONG "$out/gloo_cuda_n$1.log"
}
export -f ring gloo
for n in 2 4; do
    step ring_host_n$n 60 ring $n host
    step ring_device_n$n 60 ring $n device
done
# Mid sizes on device buffers over shared memory: the 256 KiB chunks
# (the default; the GPU works on groups of them, a ring chunk per
# operation) against the ring's own chunks (HOOP_SHM_CHUNK_BYTES=0),
# twice each, interleaved.
ring_mid() {
    local k v
    for k in 1 2; do
        for v in 256K 0; do
            echo "## HOOP_SHM_CHUNK_BYTES=$v"
            (cd "$out/cwd" && CUDA_VISIBLE_DEVICES=$bench_gpus HOOP_SHM_CHUNK_BYTES=$v \
                "$build/hooprun" -np "$1" --no-tag "$build/ring_bench" -G -b 1M -e 16M -f 2 \
                -n "$iters" -w 5) || return 1
        done
    done
}
export -f ring_mid
for n in 2 4; do
    step ring_device_mid_n$n 60 ring_mid $n
done
for n in 2 4; do
    step gloo_cuda_n$n 75 gloo $n
done
# compare.py needs no more than python3's standard library; it runs
# whatever is left of the budget (a second or two).
if timeout 20 python3 "$repo/tests/gpu/compare.py" "$out" >"$out/compare.log" 2>&1; then
    summary+=("ok      compare")
else
    summary+=("FAILED  compare: $(tail -n 1 "$out/compare.log")")
    failed=1
fi

# Every gpu* suite (gpu/* again, seconds), with the rest of the budget.
step tests-gpu-all 240 suite 4 'gpu*/*'

# hoop.torch on CUDA tensors against CPU tensors (tests/gpu/torch_cuda.py),
# at N = 2 and 4 on GPU 0.
torch_cuda() {
    cd "$out/cwd" && CUDA_VISIBLE_DEVICES=$bench_gpus PYTHONPATH="$repo/python" \
        HOOP_LIBRARY="$build/libhoop.so" PYTHONDONTWRITEBYTECODE=1 \
        "$build/hooprun" -np "$1" "$PYTHON" "$repo/tests/gpu/torch_cuda.py"
}
export -f torch_cuda
step torch_cuda_n2 90 torch_cuda 2
step torch_cuda_n4 90 torch_cuda 4

# The engine's and hoop.torch's targets (issues of the engine and of the
# Python package) on this machine's cores: bench/engine_targets.sh.
targets() {
    cd "$out/cwd" && PYTHON="$PYTHON" "$repo/bench/engine_targets.sh" -o "$out/engine_targets" \
        "$build"
}
export -f targets
step engine_targets 180 targets

# Issue 18's N = 8 on one host (host buffers, shared memory) beside
# torch's gloo: the ring through the slots, and the allreduce in place in
# memory every rank maps (ring_bench -R).
manycore() {
    REGISTERED=1 HOSTWIDE=0 NS=8 REPS="1 2" MINSIZE=64M SIZE=256M ITERS=8 WARMUP=2 \
        BUILD="$build" PYTHON="$PYTHON" "$repo/bench/manycore.sh" "$out/manycore"
}
export -f manycore
step manycore 150 manycore
finish
