#!/usr/bin/env bash
# engine_targets.sh [-q] [-o DIR] [BUILD_DIR] - the targets of the engine
# (issue 16) and of hoop.torch (issue 17), measured in one run on this
# machine, over loopback, and printed as one table:
#   (a) a step of ResNet-50's 161 gradients through the engine against one
#       blocking hoop_allreduce of the same bytes, N = 2 and 4 (goal <= 1.15);
#   (b) one 8-byte allreduce through enqueue and wait against twice the
#       blocking call plus one HOOP_CYCLE_TIME (goal <= 1);
#   (c) the synthetic benchmark (small convnet, CPU) through hoop.torch's
#       DistributedOptimizer against torch DDP over gloo, img/s, N = 2 and 4
#       (goal >= 1.1): up to three pairs of runs, hoop then DDP, the second
#       and third after every other step while the budget lasts; the
#       median of the pairs' ratios (and of each side's img/s);
#   (d) a step of 100 tensors of 1024 f32 through hoop.torch against the same
#       through the C engine, N = 2 and 4 (goal <= 1.1).
# BUILD_DIR (default build) holds hooprun, engine_bench and libhoop.so
# (make all). PYTHON names the interpreter (default: the first of python3 and
# /usr/bin/python3 that imports torch and numpy; torch 1.13 or 2.x, CPU is
# enough). -q: a few steps of each, to check that the script works (its
# figures mean nothing). -o DIR keeps every step's raw output there (default:
# a new temporary folder, named at the end). Every step runs under timeout,
# and none past 170 s from the start: the whole run stays under 3 minutes
# (about one on an idle 16-core machine). Exit status 0 when every step ran
# (whatever the figures), 1 otherwise.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
quick=0
out=
while getopts qo:h opt; do
    case $opt in
    q) quick=1 ;;
    o) out=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
build=${1:-$src/build}
die() { echo "engine_targets: $*" >&2; exit 2; }
[ -d "$build" ] || die "no build folder $build (make all, or pass the folder)"
build=$(cd "$build" && pwd)
for f in hooprun engine_bench libhoop.so; do
    [ -e "$build/$f" ] || die "$build/$f is missing: run make all (or pass the build folder)"
done
if [ -n "${PYTHON:-}" ]; then
    py=$PYTHON
    "$py" -c 'import torch, numpy' 2>/dev/null || die "PYTHON=$py cannot import torch and numpy"
else
    py=
    for c in python3 /usr/bin/python3; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch, numpy' 2>/dev/null; then
            py=$(command -v "$c")
            break
        fi
    done
    [ -n "$py" ] || die "neither python3 nor /usr/bin/python3 imports torch and numpy: set PYTHON"
fi
if [ -z "$out" ]; then
    out=$(mktemp -d "${TMPDIR:-/tmp}/engine_targets.XXXXXX") || die "no temporary folder"
else
    mkdir -p "$out" || die "cannot make $out"
fi
export PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH} HOOP_LIBRARY=$build/libhoop.so
export PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1

if [ "$quick" = 1 ]; then
    eb_args=(-n 3 -w 1 -s 200); many_steps=20
    syn_args=(--num-warmup-batches 2 --num-batches-per-iter 3 --num-iters 2)
else
    eb_args=(-n 15 -w 3 -s 2000); many_steps=200
    syn_args=(--num-warmup-batches 5 --num-batches-per-iter 10 --num-iters 5)
fi

failed=0
# The whole run stays under 3 minutes: no step runs past this.
budget_end=$(($(date +%s) + 170))
# run NAME LIMIT_S CMD...: CMD's output (rank prefixes dropped) in $out/NAME,
# under timeout: LIMIT_S, or what is left of the budget when that is less.
run() {
    local name=$1 limit=$2 left
    shift 2
    left=$((budget_end - $(date +%s)))
    [ "$left" -lt "$limit" ] && limit=$left
    : >"$out/$name"
    if [ "$limit" -lt 5 ]; then
        echo "-- $name: not run, the 170 s budget is spent" >&2
        failed=1
        return
    fi
    local s0=$(date +%s)
    echo "-- $name (at most $limit s): $*" >&2
    timeout -k 5 "$limit" "$@" >"$out/$name.raw" 2>&1
    local rc=$?
    sed 's/^\[[0-9]*\] //' "$out/$name.raw" >"$out/$name"
    if [ "$rc" != 0 ]; then
        echo "   failed (exit $rc$([ "$rc" = 124 ] && echo ", past ${limit} s")): see $out/$name.raw" >&2
        failed=1
    else
        echo "   $(($(date +%s) - s0)) s" >&2
    fi
}
# kv NAME KEY: the value rank 0 printed, or "-".
kv() {
    local v
    v=$(sed -n "s/^$2=//p" "$out/$1" 2>/dev/null | head -n 1)
    echo "${v:--}"
}
# A port below the ephemeral range (tests/python/ports.py says why).
free_port() {
    "$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import ports; print(ports.free_ports(1))' \
        "$src/tests/python"
}

# syn_pair N REP: one run of the synthetic benchmark through hoop.torch,
# then one through DDP, as syn_hoop_nN_rREP and syn_ddp_nN_rREP.
syn_pair() {
    run "syn_hoop_n$1_r$2" 40 "$build/hooprun" -np "$1" "$py" \
        "$src/bench/torch_synthetic_compare.py" --backend hoop "${syn_args[@]}" -m
    # gloo finds its address from the host name unless told: loopback, as hoop.
    run "syn_ddp_n$1_r$2" 40 env GLOO_SOCKET_IFNAME="${GLOO_SOCKET_IFNAME:-lo}" \
        "$build/hooprun" -np "$1" "$py" \
        "$src/bench/torch_synthetic_compare.py" --backend ddp --port "$(free_port)" \
        "${syn_args[@]}" -m
}

t0=$(date +%s)
for n in 2 4; do
    run "engine_n$n" 60 "$build/hooprun" -np "$n" "$build/engine_bench" "${eb_args[@]}" -m
    run "c_many_n$n" 20 "$build/hooprun" -np "$n" "$build/engine_bench" -t 100 -e 1024 \
        -k "$many_steps" -o -m
    run "torch_many_n$n" 30 "$build/hooprun" -np "$n" "$py" "$src/bench/torch_overhead_bench.py" \
        -t 100 -e 1024 -k "$many_steps" -m
    syn_pair "$n" 1
done
# More pairs of (c), whose ratio spreads by 0.2 between runs, while at
# least a minute of the budget is left.
for rep in 2 3; do
    for n in 2 4; do
        [ $((budget_end - $(date +%s))) -ge 60 ] && syn_pair "$n" "$rep"
    done
done
t1=$(date +%s)

# row LABEL N HOOP BASE RATIO GOAL_OP GOAL: one line of the table; the
# verdict from RATIO against GOAL.
row() {
    awk -v l="$1" -v n="$2" -v a="$3" -v b="$4" -v r="$5" -v op="$6" -v g="$7" 'BEGIN {
        v = "-"
        if (r != "-") v = (op == "<=" ? r + 0 <= g + 0 : r + 0 >= g + 0) ? "met" : "missed"
        printf "%-44s %2s %16s %22s %7s  %s %-5s %s\n", l, n, a, b, r, op, g, v }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f", a / b }'; }
fmt() { awk -v x="$1" -v u="$2" -v p="$3" 'BEGIN { if (x == "-") print "-"; else printf "%." p "f %s", x, u }'; }

echo
echo "== hoop engine and hoop.torch targets (issues 16, 17), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "   $(uname -n), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) CPUs, $(kv engine_n2 transport), cycle $(kv engine_n2 cycle_ms) ms," \
     "python $py, torch $(kv syn_hoop_n2_r1 torch)$([ "$quick" = 1 ] && echo ', QUICK RUN: figures mean nothing')"
printf "%-44s %2s %16s %22s %7s  %s\n" "target" "N" "hoop" "baseline" "ratio" "goal"
for n in 2 4; do
    e=$(kv "engine_n$n" resnet_engine_ms) b=$(kv "engine_n$n" resnet_blocking_ms)
    row "(a) ResNet-50 step: engine / 1 allreduce" "$n" "$(fmt "$e" ms 2)" "$(fmt "$b" ms 2)" \
        "$(ratio "$e" "$b")" "<=" 1.15
done
for n in 2 4; do
    e=$(kv "engine_n$n" small_engine_us) b=$(kv "engine_n$n" small_blocking_us)
    c=$(kv "engine_n$n" cycle_ms)
    bound=$(awk -v b="$b" -v c="$c" 'BEGIN { if (b == "-" || c == "-") print "-"; else printf "%.1f", 2 * b + 1000 * c }')
    row "(b) 8 B op: engine / (2 x blocking + cycle)" "$n" "$(fmt "$e" us 1)" \
        "$(fmt "$bound" "us (2x$(fmt "$b" "" 1 | tr -d ' ')+cyc)" 1)" "$(ratio "$e" "$bound")" "<=" 1
done
# median VALUES...: the median of the values that are not "-", or "-".
median() {
    printf '%s\n' "$@" | grep -v '^-$' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                                  else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
for n in 2 4; do
    hs=() ds=() rs=()
    for rep in 1 2 3; do
        [ -e "$out/syn_hoop_n${n}_r$rep" ] || continue
        h=$(kv "syn_hoop_n${n}_r$rep" img_per_s_total) d=$(kv "syn_ddp_n${n}_r$rep" img_per_s_total)
        hs+=("$h") ds+=("$d") rs+=("$(ratio "$h" "$d")")
    done
    row "(c) synthetic img/s: hoop.torch / DDP gloo" "$n" "$(fmt "$(median "${hs[@]}")" img/s 1)" \
        "$(fmt "$(median "${ds[@]}")" img/s 1)" "$(fmt "$(median "${rs[@]}")" "" 2 | tr -d " ")" ">=" 1.1
    echo "    ($n ranks: ${#rs[@]} pairs, ratios ${rs[*]})"
done
for n in 2 4; do
    p=$(kv "torch_many_n$n" torch_each_ms) c=$(kv "c_many_n$n" many_each_ms)
    row "(d) 100 tensors async: hoop.torch / C engine" "$n" "$(fmt "$p" ms 3)" "$(fmt "$c" ms 3)" \
        "$(ratio "$p" "$c")" "<=" 1.1
    p=$(kv "torch_many_n$n" torch_grouped_ms) c=$(kv "c_many_n$n" many_grouped_ms)
    row "    100 tensors grouped: hoop.torch / C" "$n" "$(fmt "$p" ms 3)" "$(fmt "$c" ms 3)" \
        "$(ratio "$p" "$c")" "<=" 1.1
done
echo "   measured in $((t1 - t0)) s; raw outputs in $out"
[ "$failed" = 0 ] || echo "   some steps failed (marked - above; their output is in $out)"
exit "$failed"
