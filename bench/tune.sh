#!/usr/bin/env bash
# tune.sh - the sweeps that chose hoop's TCP defaults: each tunable swept
# with ring_bench --sweep, on loopback and on shaped links (bench/netns.sh),
# REPS times, raw outputs kept and medians printed by bench/summarize.py.
#
#   bench/tune.sh [OUT_DIR]      (default bench/results/tuning; needs root)
#
# Env: REPS ("1 2 3"), SIZE (64M), ITERS (10), WHERE ("lo:2 lo:4 5gbit:2
# 2gbit:4": loopback or a TBF rate, and the rank count), SWEEPS (the
# variables, default below). A sweep's values run one after another within
# each repeat, so every value sees the same machine.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$HERE/bench/results/tuning}"
REPS="${REPS:-1 2 3}"
SIZE="${SIZE:-64M}"
ITERS="${ITERS:-10}"
WHERE="${WHERE:-lo:2 lo:4 5gbit:2 2gbit:4}"
SWEEPS="${SWEEPS:-HOOP_TCP_NSOCKS=1,2,4 HOOP_TCP_SOCKBUF=0,512K,1M,4M HOOP_CHUNK_BYTES=256K,1M,4M HOOP_PIPELINE_DEPTH=2,4,8 HOOP_TCP_ZEROCOPY=0,256K HOOP_URING_SETUP=coop,plain,defer,sqpoll HOOP_URING_SUBMIT=batch,each}"
BUILD="$HERE/build"
[[ -x "$BUILD/ring_bench" ]] || make -C "$HERE" -j2 >/dev/null
export MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=17179869184

dirs=()
for w in $WHERE; do
    link="${w%%:*}" n="${w##*:}"
    for sw in $SWEEPS; do
        var="${sw%%=*}"
        d="$OUT/${link}_N${n}/${var#HOOP_}"
        mkdir -p "$d"
        dirs+=("$d")
        args=(-b "$SIZE" -e "$SIZE" -n "$ITERS" -w 2 -S "$sw")
        if [[ "$link" == lo ]]; then
            for rep in $REPS; do
                echo "[$(date +%T)] loopback N=$n $sw rep $rep" >&2
                timeout 600 "$BUILD/hooprun" -np "$n" --no-tag "$BUILD/ring_bench" "${args[@]}" \
                    >"$d/hoop_r$rep.txt"
            done
        else
            "$HERE/bench/netns.sh" -n "$n" -R "$link" -r "$REPS" -s hoop -o "$d" -- "${args[@]}" \
                >/dev/null
        fi
    done
done
python3 "$HERE/bench/summarize.py" "${dirs[@]}"
