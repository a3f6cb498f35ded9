#!/usr/bin/env bash
# compare_loopback.sh - hoop beside Gloo and OpenMPI (TCP) on loopback, in
# one run, interleaved, so every system sees the same machine.
#
#   bench/compare_loopback.sh BASELINE_DIR [OUT_DIR]
#
# BASELINE_DIR holds the baseline harness (gloo_launch.sh, and build/ with
# gloo_bench and mpi_bench_ompi). Env: NS="2 4" rank counts, REPS="1 2 3",
# MINSIZE=64M and SIZE=256M (sizes from one to the other in steps of STEP=4
# times), ITERS=10 (at least; Gloo and OpenMPI run each size for about a
# second). Raw outputs go to OUT_DIR/N<n>/ (default bench/results/loopback),
# as {hoop,gloo,ompi}_r<rep>.txt; bench/summarize.py prints the medians at
# the end, as busbw and as time per call. hoop runs out of place and in
# place, the others in place; f32 sums; glibc told not to mmap/trim for
# every system alike.
set -euo pipefail
ANCHORS="$(cd "${1:?usage: $0 BASELINE_DIR [OUT_DIR]}" && pwd)"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${2:-$HERE/bench/results/loopback}"
NS="${NS:-2 4}"
REPS="${REPS:-1 2 3}"
SIZE="${SIZE:-256M}"
MINSIZE="${MINSIZE:-64M}"
STEP="${STEP:-4}"
ITERS="${ITERS:-10}"
BUILD="$HERE/build"
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184
mkdir -p "$OUT"
[ -x "$BUILD/ring_bench" ] || make -C "$HERE" -j2 >/dev/null
for b in gloo_bench mpi_bench_ompi; do
  [ -x "$ANCHORS/build/$b" ] || { echo "missing $ANCHORS/build/$b: build the baseline harness first" >&2; exit 1; }
done
ANCHOR_ARGS=(--minbytes "$MINSIZE" --maxbytes "$SIZE" --step "$STEP" --target 1.0 --miniters "$ITERS" --warmup 0.2)

for rep in $REPS; do
  for n in $NS; do
    echo "[$(date +%T)] rep $rep N=$n" >&2
    mkdir -p "$OUT/N$n"
    timeout 300 "$BUILD/hooprun" -np "$n" --no-tag "$BUILD/ring_bench" -b "$MINSIZE" -e "$SIZE" \
      -f "$STEP" -n "$ITERS" -w 3 > "$OUT/N$n/hoop_r$rep.txt"
    timeout 300 "$ANCHORS/gloo_launch.sh" "$n" - "$OUT/N$n/logs" -- --host 127.0.0.1 \
      --algo ring_chunked "${ANCHOR_ARGS[@]}" > "$OUT/N$n/gloo_r$rep.txt" 2>/dev/null
    timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" \
      --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
      "$ANCHORS/build/mpi_bench_ompi" --label ompi_tcp "${ANCHOR_ARGS[@]}" \
      > "$OUT/N$n/ompi_r$rep.txt" 2>/dev/null
  done
done

python3 "$HERE/bench/summarize.py" $(for n in $NS; do echo "$OUT/N$n"; done)
python3 "$HERE/bench/summarize.py" --us $(for n in $NS; do echo "$OUT/N$n"; done)
