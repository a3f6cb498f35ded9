#!/usr/bin/env bash
# compare_shm.sh - hoop's shared memory (HOOP_SHM=1), the same with large
# payloads read in place (HOOP_SHM_SINGLE_COPY=1), the same with buffers
# from hoop_mem_alloc (ring_bench -R), hoop over loopback TCP (HOOP_SHM=0)
# and OpenMPI's default (its shared-memory BTL, vader), all ranks on this
# machine, in one run, interleaved.
#
#   bench/compare_shm.sh [OUT_DIR]
#
# Env: NS="2 4" rank counts, REPS="1 2 3", MINSIZE=1M, SIZE=64M, STEP=4,
# ITERS=10, HOOPS="tcp shm shm1 reg" the hoop variants; MPI_BENCH, the
# baseline harness's mpi_bench built against OpenMPI (left out when unset).
# Raw outputs go to OUT_DIR/N<n>/ (default bench/results/shm) as
# {tcp,shm,shm1,reg,ompi}_r<rep>.txt. f32 sums; hoop out of place and in
# place, OpenMPI in place.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$HERE/bench/results/shm}"
NS="${NS:-2 4}"
REPS="${REPS:-1 2 3}"
MINSIZE="${MINSIZE:-1M}"
SIZE="${SIZE:-64M}"
STEP="${STEP:-4}"
ITERS="${ITERS:-10}"
HOOPS="${HOOPS:-tcp shm shm1 reg}"
BUILD="$HERE/build"
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184
[ -x "$BUILD/ring_bench" ] || make -C "$HERE" -j2 >/dev/null
for rep in $REPS; do
  for n in $NS; do
    echo "[$(date +%T)] rep $rep N=$n" >&2
    mkdir -p "$OUT/N$n"
    for name in $HOOPS; do
      shm=$([ $name = tcp ] && echo 0 || echo 1)
      single=$([ $name = shm1 ] && echo 1 || echo 0)
      reg=$([ $name = reg ] && echo -R || true)
      HOOP_SHM=$shm HOOP_SHM_SINGLE_COPY=$single timeout 300 "$BUILD/hooprun" -np "$n" --no-tag \
        "$BUILD/ring_bench" $reg -b "$MINSIZE" -e "$SIZE" -f "$STEP" -n "$ITERS" -w 3 \
        > "$OUT/N$n/${name}_r$rep.txt"
    done
    if [ -n "${MPI_BENCH:-}" ]; then
      timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" "$MPI_BENCH" \
        --minbytes "$MINSIZE" --maxbytes "$SIZE" --step "$STEP" --target 1.0 \
        --miniters "$ITERS" --warmup 0.2 > "$OUT/N$n/ompi_r$rep.txt" 2>/dev/null
    fi
  done
done
