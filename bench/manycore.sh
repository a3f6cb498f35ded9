#!/usr/bin/env bash
# manycore.sh - hoop's TCP ring beside torch.distributed's gloo backend on
# loopback, interleaved, at several rank counts: the comparison of a machine
# with CPUs to spare.
#
#   bench/manycore.sh [OUT_DIR]
#
# Env: NS="2 4 8" rank counts, REPS="1 2 3", MINSIZE=64M and SIZE=256M
# (sizes from one to the other in steps of STEP=4 times), ITERS=10 timed
# calls after WARMUP=3, PYTHON (default: the first of python3 and
# /usr/bin/python3 that imports torch), BIND=0 (1: rank r on CPU r modulo
# the CPUs allowed, both systems: hooprun --bind-to core, and
# bench/torch_gloo_bench.py --bind; "0 1": both ways, interleaved),
# PERF=1 (each run of either system under perf stat -e PERF_EVENTS, all
# its ranks counted, to <system>_perf_r<rep>.txt: ring_bench makes twice
# the calls, out of place and in place, and both count their start-up),
# REGISTERED=1 (0: not) also runs ring_bench -R, its buffers from
# hoop_mem_alloc (the allreduce in place in memory every rank maps), to
# hoopreg_r<rep>.txt, HOSTWIDE=0 (1: also) runs build/hostwide_bench, the
# ceiling of an allreduce through one segment every rank maps, copied in
# and out (the design hoop_mem_alloc's path replaced), unbound runs only,
# BUILD (default <repo>/build: where hooprun and ring_bench are), HOOP_*
# variables pass to hoop's ranks as they are. Every repeat runs
# every N with hoop then torch's gloo, so both see the same machine. Both
# run f32 sums in place (ring_bench also times out of place) on 127.0.0.1.
# Raw outputs go to OUT_DIR/N<n>/, bound ones to OUT_DIR/N<n>_bind/
# (default OUT_DIR: bench/results/manycore), as
# hoop_r<rep>.txt and tgloo_r<rep>.txt, with the machine (nproc, lscpu,
# kernel, load) in OUT_DIR/machine.txt; bench/summarize.py prints the
# medians with [min-max] and the slowest over the fastest repeat, and
# hoop's in-place busbw over gloo's.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$HERE/bench/results/manycore}"
NS="${NS:-2 4 8}"
REPS="${REPS:-1 2 3}"
SIZE="${SIZE:-256M}"
MINSIZE="${MINSIZE:-64M}"
STEP="${STEP:-4}"
ITERS="${ITERS:-10}"
WARMUP="${WARMUP:-3}"
BIND="${BIND:-0}"
PERF="${PERF:-0}"
HOSTWIDE="${HOSTWIDE:-0}"
REGISTERED="${REGISTERED:-1}"
PERF_EVENTS="${PERF_EVENTS:-task-clock,context-switches,cpu-migrations,instructions,cycles}"
BUILD="${BUILD:-$HERE/build}"
if [ -z "${PYTHON:-}" ]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
      PYTHON="$p"
      break
    fi
  done
  [ -n "${PYTHON:-}" ] || { echo "no python3 here imports torch with gloo: set PYTHON" >&2; exit 1; }
fi
[ -x "$BUILD/ring_bench" ] && [ -x "$BUILD/hooprun" ] || make -C "$HERE" -j"$(nproc)" >/dev/null
mkdir -p "$OUT"
{
  echo "# $(date -u +%FT%TZ) nproc $(nproc) kernel $(uname -r)"
  echo "# NS=$NS REPS=$REPS MINSIZE=$MINSIZE SIZE=$SIZE STEP=$STEP ITERS=$ITERS WARMUP=$WARMUP BIND=$BIND"
  echo "# PYTHON=$PYTHON torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"
  env | grep '^HOOP_' | sed 's/^/# /' || true
  uptime
  lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node)' || true
} > "$OUT/machine.txt"
cat "$OUT/machine.txt" >&2

for rep in $REPS; do
  for n in $NS; do
    for bind in $BIND; do
      # BIND 1: rank r on CPU r modulo the CPUs allowed, both systems.
      dir="$OUT/N$n" hb=() gb=()
      [ "$bind" = 1 ] && dir="$OUT/N${n}_bind" hb=(--bind-to core) gb=(--bind)
      echo "[$(date +%T)] rep $rep N=$n bind=$bind" >&2
      mkdir -p "$dir"
      hp=() gp=()
      if [ "$PERF" = 1 ]; then
        hp=(perf stat -x, -e "$PERF_EVENTS" -o "$dir/hoop_perf_r$rep.txt" --)
        gp=(perf stat -x, -e "$PERF_EVENTS" -o "$dir/tgloo_perf_r$rep.txt" --)
      fi
      timeout 600 "${hp[@]}" "$BUILD/hooprun" -np "$n" --no-tag "${hb[@]}" "$BUILD/ring_bench" \
        -b "$MINSIZE" -e "$SIZE" -f "$STEP" -n "$ITERS" -w "$WARMUP" > "$dir/hoop_r$rep.txt"
      if [ "$REGISTERED" = 1 ]; then
        timeout 600 "$BUILD/hooprun" -np "$n" --no-tag "${hb[@]}" "$BUILD/ring_bench" -R \
          -b "$MINSIZE" -e "$SIZE" -f "$STEP" -n "$ITERS" -w "$WARMUP" > "$dir/hoopreg_r$rep.txt"
      fi
      timeout 600 "${gp[@]}" "$PYTHON" "$HERE/bench/torch_gloo_bench.py" -np "$n" -b "$MINSIZE" \
        -e "$SIZE" -f "$STEP" -n "$ITERS" -w "$WARMUP" "${gb[@]}" > "$dir/tgloo_r$rep.txt"
      if [ "$HOSTWIDE" = 1 ] && [ "$bind" = 0 ]; then
        timeout 600 "$BUILD/hostwide_bench" -n "$n" -b "$MINSIZE" -e "$SIZE" -f "$STEP" \
          -i "$ITERS" -w "$WARMUP" > "$dir/hostwide_r$rep.txt"
      fi
    done
  done
done

dirs=()
for n in $NS; do
  for bind in $BIND; do
    if [ "$bind" = 1 ]; then dirs+=("$OUT/N${n}_bind"); else dirs+=("$OUT/N$n"); fi
  done
done
python3 "$HERE/bench/summarize.py" --in-place --spread "${dirs[@]}"
