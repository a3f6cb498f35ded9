#!/usr/bin/env bash
# compare_loopback.sh - hoop beside Gloo and OpenMPI (TCP) on loopback, in
# one run, interleaved, so every system sees the same machine.
#
#   bench/compare_loopback.sh ANCHORS_DIR [OUT_DIR]
#
# ANCHORS_DIR holds the baseline harness (gloo_launch.sh and build/ with
# gloo_bench and mpi_bench_ompi, built by its setup.sh). Env: NS="2 4" rank
# counts, REPS="1 2 3", SIZE=64M (one message size), ITERS=10. Raw outputs go
# to OUT_DIR (default bench/results/loopback); the medians are printed as a
# Markdown table at the end. Every system runs in place on float32 sums, with
# glibc told not to mmap/trim (as the anchors do for every system).
set -euo pipefail
ANCHORS="$(cd "${1:?usage: $0 ANCHORS_DIR [OUT_DIR]}" && pwd)"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${2:-$HERE/bench/results/loopback}"
NS="${NS:-2 4}"
REPS="${REPS:-1 2 3}"
SIZE="${SIZE:-64M}"
ITERS="${ITERS:-10}"
BUILD="$HERE/build"
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184
mkdir -p "$OUT"
[ -x "$BUILD/ring_bench" ] || make -C "$HERE" -j2 >/dev/null
for b in gloo_bench mpi_bench_ompi; do
  [ -x "$ANCHORS/build/$b" ] || { echo "missing $ANCHORS/build/$b: run the anchors' setup.sh" >&2; exit 1; }
done
ANCHOR_ARGS=(--minbytes "$SIZE" --maxbytes "$SIZE" --step 4 --target 1.0 --miniters "$ITERS" --warmup 0.2)

for rep in $REPS; do
  for n in $NS; do
    echo "[$(date +%T)] rep $rep N=$n" >&2
    timeout 300 "$BUILD/hooprun" -np "$n" --no-tag "$BUILD/ring_bench" -b "$SIZE" -e "$SIZE" \
      -n "$ITERS" -w 3 > "$OUT/hoop_N${n}_r$rep.txt"
    timeout 300 "$ANCHORS/gloo_launch.sh" "$n" - "$OUT/logs" -- --host 127.0.0.1 \
      --algo ring_chunked "${ANCHOR_ARGS[@]}" > "$OUT/gloo_rc_N${n}_r$rep.txt" 2>/dev/null
    timeout 300 mpirun.openmpi --allow-run-as-root --oversubscribe -np "$n" \
      --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
      "$ANCHORS/build/mpi_bench_ompi" --label ompi_tcp "${ANCHOR_ARGS[@]}" \
      > "$OUT/ompi_tcp_N${n}_r$rep.txt" 2>/dev/null
  done
done

# busbw: hoop's in-place column (the anchors run in place), the anchors'
# busbw_GBs column.
python3 - "$OUT" "$NS" <<'PY'
import glob, os, re, statistics, sys
out, ns = sys.argv[1], sys.argv[2].split()
def hoop(f):
    for line in open(f):
        p = line.split()
        if p and p[0].isdigit() and len(p) >= 13:
            return float(p[11])
def anchor(f):
    for line in open(f):
        p = line.split()
        if p and p[0].isdigit() and len(p) >= 8 and p[7] == "ok":
            return float(p[6])
rows = []
print("| N | hoop busbw GB/s | Gloo ring_chunked | OpenMPI tcp | hoop / Gloo | hoop / OpenMPI |")
print("|---|---|---|---|---|---|")
for n in ns:
    med = {}
    txt = {}
    for sysname, fn in (("hoop", hoop), ("gloo_rc", anchor), ("ompi_tcp", anchor)):
        vals = [v for v in (fn(f) for f in sorted(glob.glob(f"{out}/{sysname}_N{n}_r*.txt"))) if v is not None]
        med[sysname] = statistics.median(vals) if vals else float("nan")
        txt[sysname] = f"{med[sysname]:.3f} [{min(vals):.3f}-{max(vals):.3f}]" if vals else "n/a"
    print(f"| {n} | {txt['hoop']} | {txt['gloo_rc']} | {txt['ompi_tcp']} | "
          f"{med['hoop']/med['gloo_rc']:.2f} | {med['hoop']/med['ompi_tcp']:.2f} |")
PY
