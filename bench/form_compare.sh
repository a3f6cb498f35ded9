#!/usr/bin/env bash
# form_compare.sh - what forming a job and the first alltoall's connection
# set-up cost, for several builds side by side: bench/form_bench under
# each build's own hooprun, the builds interleaved in every repeat, each
# run under perf stat (all its ranks counted), then the medians.
#
#   bench/form_compare.sh OUT_DIR NAME=BUILD_DIR [NAME=BUILD_DIR ...]
#
# BUILD_DIR holds hooprun and form_bench (make build/form_bench; for
# another commit, build it in a worktree of its own, the same way). Env:
# NP=8 ranks, REPS=15 repeats, ENGINES="auto poll" (HOOP_TCP_ENGINE),
# PERF_EVENTS=task-clock,context-switches, START_AFTER=0.5: every rank
# starts hoop_comm_init at the same moment, this many seconds after the
# launch (form_bench's FORM_BENCH_START), so that formation is timed
# without the launcher's spawning; START_AFTER=0 times it from each
# rank's own start, the first rank's figure then holding the others'. Raw outputs go to
# OUT_DIR/<name>.<engine>.<rep>.out and .perf, the machine (nproc, lscpu,
# kernel, load before and after) to OUT_DIR/machine.txt; the table (median
# [min-max] of every figure, and each build's median over the first's) is
# printed and kept in OUT_DIR/summary.txt. Run the script again on an
# existing OUT_DIR with no builds to print the table only.
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: $0 OUT_DIR NAME=BUILD_DIR [NAME=BUILD_DIR ...]" >&2
    exit 2
fi
OUT="$1"
shift
NP="${NP:-8}"
REPS="${REPS:-15}"
ENGINES="${ENGINES:-auto poll}"
PERF_EVENTS="${PERF_EVENTS:-task-clock,context-switches}"
START_AFTER="${START_AFTER:-0.5}"
mkdir -p "$OUT"
if [ $# -gt 0 ]; then
    {
        echo "nproc: $(nproc)"
        lscpu | grep -E 'Model name|^CPU\(s\)' || true
        uname -r
        echo "load before: $(cat /proc/loadavg)"
        echo "START_AFTER=$START_AFTER"
    } > "$OUT/machine.txt"
    : > "$OUT/order.txt"
    for rep in $(seq "$REPS"); do
        for nb in "$@"; do
            name="${nb%%=*}"
            dir="${nb#*=}"
            for eng in $ENGINES; do
                f="$OUT/$name.$eng.$rep"
                echo "$name $eng $rep" >> "$OUT/order.txt"
                start=""
                if [ "$START_AFTER" != 0 ]; then
                    start=$(python3 -c "import time; print(f'{time.time() + $START_AFTER:.6f}')")
                fi
                FORM_BENCH_START="$start" HOOP_TCP_ENGINE="$eng" \
                    perf stat -x, -o "$f.perf" -e "$PERF_EVENTS" \
                    "$dir/hooprun" -np "$NP" -x HOOP_TCP_ENGINE -x FORM_BENCH_START "$dir/form_bench" > "$f.out" 2>&1 ||
                    echo "$name $eng $rep failed: $f.out" >&2
            done
        done
    done
    echo "load after: $(cat /proc/loadavg)" >> "$OUT/machine.txt"
fi
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import collections, glob, os, re, statistics, sys
out = sys.argv[1]
runs = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for f in sorted(glob.glob(os.path.join(out, '*.out'))):
    name, eng, _ = os.path.basename(f)[:-4].rsplit('.', 2)
    if name not in order:
        order.append(name)
    m = re.search(r'init_ms=([\d.]+) first_alltoall_ms=([\d.]+) second_alltoall_ms=([\d.]+)',
                  open(f).read())
    if not m:
        print(f'no figures in {f}', file=sys.stderr)
        continue
    r = runs[(name, eng)]
    for key, v in zip(('formation ms', 'first alltoall ms', 'second alltoall ms'), m.groups()):
        r[key].append(float(v))
    perf = f[:-4] + '.perf'
    for line in open(perf) if os.path.exists(perf) else []:
        p = line.strip().split(',')
        if len(p) > 2 and p[0].replace('.', '', 1).isdigit():
            r[p[2] + (' ms' if p[1] == 'msec' else '')].append(float(p[0]))
if os.path.exists(os.path.join(out, 'order.txt')):
    first = [l.split()[0] for l in open(os.path.join(out, 'order.txt')) if l.strip()]
    order = sorted(order, key=lambda n: first.index(n) if n in first else len(first))
engines = sorted({e for _, e in runs})
for eng in engines:
    keys = [k for k in runs[(order[0], eng)]]
    print(f'HOOP_TCP_ENGINE={eng}: median [min-max] of n runs; ratio: median over {order[0]}\'s')
    print('| figure | ' + ' | '.join(order) + ' |')
    print('|---|' + '---|' * len(order))
    for k in keys:
        cells = []
        base = statistics.median(runs[(order[0], eng)][k])
        for name in order:
            v = runs[(name, eng)].get(k, [])
            if not v:
                cells.append('-')
                continue
            med = statistics.median(v)
            cell = f'{med:.2f} [{min(v):.2f}-{max(v):.2f}] n={len(v)}'
            if name != order[0] and base:
                cell += f' ({med / base:.2f})'
            cells.append(cell)
        print(f'| {k} | ' + ' | '.join(cells) + ' |')
    print()
EOF
