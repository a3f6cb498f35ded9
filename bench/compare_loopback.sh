#!/usr/bin/env bash
# compare_loopback.sh - hoop beside Gloo and OpenMPI (TCP) on loopback, in
# one run, interleaved, so every system sees the same machine.
#
#   bench/compare_loopback.sh ANCHORS_DIR [OUT_DIR]
#
# ANCHORS_DIR holds the baseline harness (gloo_launch.sh and build/ with
# gloo_bench and mpi_bench_ompi, built by its setup.sh). Env: NS="2 4" rank
# counts, REPS="1 2 3", MINSIZE=64M and SIZE=256M (sizes from one to the
# other in steps of 4x), ITERS=10. Raw outputs go to OUT_DIR/N<n>/ (default
# OUT_DIR bench/results/loopback), as {hoop,gloo,ompi}_r<rep>.txt; the medians
# are printed as Markdown tables by bench/summarize.py at the end. Every system runs in place on float32 sums, with
# glibc told not to mmap/trim (as the anchors do for every system).
set -euo pipefail
ANCHORS="$(cd "${1:?usage: $0 ANCHORS_DIR [OUT_DIR]}" && pwd)"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${2:-$HERE/bench/results/loopback}"
NS="${NS:-2 4}"
REPS="${REPS:-1 2 3}"
SIZE="${SIZE:-256M}"
MINSIZE="${MINSIZE:-64M}"
ITERS="${ITERS:-10}"
BUILD="$HERE/build"
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184
mkdir -p "$OUT"
[ -x "$BUILD/ring_bench" ] || make -C "$HERE" -j2 >/dev/null
for b in gloo_bench mpi_bench_ompi; do
  [ -x "$ANCHORS/build/$b" ] || { echo "missing $ANCHORS/build/$b: run the anchors' setup.sh" >&2; exit 1; }
done
ANCHOR_ARGS=(--minbytes "$MINSIZE" --maxbytes "$SIZE" --step 4 --target 1.0 --miniters "$ITERS" --warmup 0.2)

for rep in $REPS; do
  for n in $NS; do
    echo "[$(date +%T)] rep $rep N=$n" >&2
    mkdir -p "$OUT/N$n"
    timeout 300 "$BUILD/hooprun" -np "$n" --no-tag "$BUILD/ring_bench" -b "$MINSIZE" -e "$SIZE" \
      -f 4 -n "$ITERS" -w 3 > "$OUT/N$n/hoop_r$rep.txt"
    timeout 300 "$ANCHORS/gloo_launch.sh" "$n" - "$OUT/N$n/logs" -- --host 127.0.0.1 \
      --algo ring_chunked "${ANCHOR_ARGS[@]}" > "$OUT/N$n/gloo_r$rep.txt" 2>/dev/null
    timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" \
      --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
      "$ANCHORS/build/mpi_bench_ompi" --label ompi_tcp "${ANCHOR_ARGS[@]}" \
      > "$OUT/N$n/ompi_r$rep.txt" 2>/dev/null
  done
done

python3 "$HERE/bench/summarize.py" $(for n in $NS; do echo "$OUT/N$n"; done)
