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
# the CPUs allowed, both systems, through taskset and sched_setaffinity),
# HOOP_* variables pass to hoop's ranks as they are. Every repeat runs
# every N with hoop then torch's gloo, so both see the same machine. Both
# run f32 sums in place (ring_bench also times out of place) on 127.0.0.1.
# Raw outputs go to OUT_DIR/N<n>/ (default bench/results/manycore) as
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
BUILD="$HERE/build"
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

# Rank r of hooprun on CPU r modulo the CPUs allowed, with BIND=1.
HOOP_CMD=("$BUILD/ring_bench")
GLOO_BIND=()
if [ "$BIND" = 1 ]; then
  export PYTHON
  HOOP_CMD=(sh -c 'cpu=$("$PYTHON" -c "import os, sys; c = sorted(os.sched_getaffinity(0)); print(c[int(sys.argv[1]) % len(c)])" "$HOOP_RANK")
exec taskset -c "$cpu" "$0" "$@"' "$BUILD/ring_bench")
  GLOO_BIND=(--bind)
fi

for rep in $REPS; do
  for n in $NS; do
    echo "[$(date +%T)] rep $rep N=$n" >&2
    mkdir -p "$OUT/N$n"
    timeout 600 "$BUILD/hooprun" -np "$n" --no-tag "${HOOP_CMD[@]}" -b "$MINSIZE" -e "$SIZE" \
      -f "$STEP" -n "$ITERS" -w "$WARMUP" > "$OUT/N$n/hoop_r$rep.txt"
    timeout 600 "$PYTHON" "$HERE/bench/torch_gloo_bench.py" -np "$n" -b "$MINSIZE" -e "$SIZE" \
      -f "$STEP" -n "$ITERS" -w "$WARMUP" "${GLOO_BIND[@]}" > "$OUT/N$n/tgloo_r$rep.txt"
  done
done

python3 "$HERE/bench/summarize.py" --in-place --spread $(for n in $NS; do echo "$OUT/N$n"; done)
