#!/usr/bin/env python3
"""compare.py - the side-by-side table of tests/gpu/run.sh's benchmarks.

    python3 tests/gpu/compare.py OUT

Reads OUT/ring_host_n<N>.log and OUT/ring_device_n<N>.log (ring_bench on
host buffers and with -G) and OUT/gloo_cuda_n<N>.log (torch_gloo_bench.py
--cuda), N = 2 and 4, and prints for 64 MiB and 256 MiB the out-of-place
busbw of each with the ratios -G/host and -G/gloo, then the time of one
64 KiB allreduce, then (OUT/ring_device_mid_n<N>.log) the -G times of 1 to
16 MiB with the shared-memory chunk rule and without it, then issue 15's
targets, each met or missed. A log that
is missing or holds no row for a size shows as '-'. Exit status 0 (the
table informs; run.sh's steps say what failed).
"""
import os
import statistics
import sys

SIZES = [64 << 20, 256 << 20]
SMALL = 64 << 10
NS = [2, 4]


def ring_rows(path):
    """{size: (time_us, busbw, wrong)}: ring_bench's out-of-place time and
    busbw, and the #wrong of both placements ('0' when both are 0)."""
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 9 and p[0].isdigit() and p[1].isdigit():
                    try:
                        wrong = [w for w in p[8:13:4] if w not in ("0", "N/A")]
                        rows[int(p[0])] = (float(p[5]), float(p[7]),
                                           "/".join(p[8:13:4]) if wrong else "0")
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def mid_runs(path):
    """{setting: [rows of one run, ...]} of a ring_device_mid log: runs
    of ring_bench, each after a line '## HOOP_SHM_CHUNK_BYTES=V'."""
    runs, cur = {}, None
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("## HOOP_SHM_CHUNK_BYTES="):
                    cur = {}
                    runs.setdefault(line.split("=", 1)[1].strip(), []).append(cur)
                    continue
                p = line.split()
                if cur is not None and len(p) >= 9 and p[0].isdigit() and p[1].isdigit():
                    try:
                        cur[int(p[0])] = (float(p[5]), float(p[9]))  # out-of-place, in-place us
                    except (ValueError, IndexError):
                        pass
    except OSError:
        pass
    return runs


def gloo_rows(path):
    """{size: (time_us, busbw, check)} of torch_gloo_bench.py's table."""
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                p = line.split()
                if len(p) >= 8 and p[0].isdigit() and p[1].isdigit():
                    try:
                        rows[int(p[0])] = (float(p[3]), float(p[6]), p[7])
                    except ValueError:
                        pass
    except OSError:
        pass
    return rows


def num(v, fmt="{:.2f}"):
    return "-" if v is None else fmt.format(v)


def ratio(a, b):
    return a / b if a is not None and b else None


def pick(rows, size, i):
    r = rows.get(size)
    return r[i] if r else None


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    out = sys.argv[1]
    host = {n: ring_rows(os.path.join(out, f"ring_host_n{n}.log")) for n in NS}
    dev = {n: ring_rows(os.path.join(out, f"ring_device_n{n}.log")) for n in NS}
    gloo = {n: gloo_rows(os.path.join(out, f"gloo_cuda_n{n}.log")) for n in NS}

    print("# allreduce f32 sum, busbw GB/s (out-of-place; gloo in place), ranks sharing GPU 0")
    print(f"{'N':>3} {'size':>8} {'host':>8} {'-G':>8} {'gloo-cuda':>10} {'-G/host':>8} "
          f"{'-G/gloo':>8}")
    targets = []
    for n in NS:
        for s in SIZES:
            h, d, g = pick(host[n], s, 1), pick(dev[n], s, 1), pick(gloo[n], s, 1)
            rh, rg = ratio(d, h), ratio(d, g)
            print(f"{n:>3} {s >> 20:>4} MiB {num(h):>8} {num(d):>8} {num(g):>10} "
                  f"{num(rh):>8} {num(rg):>8}")
            targets.append((f"-G/host >= 0.90 at N={n} {s >> 20} MiB", rh, 0.9, True))
            targets.append((f"-G/gloo >= 1.30 at N={n} {s >> 20} MiB", rg, 1.3, True))
    print()
    print("# 64 KiB allreduce, time per call (us)")
    print(f"{'N':>3} {'host':>8} {'-G':>8} {'gloo-cuda':>10}")
    for n in NS:
        h, d, g = pick(host[n], SMALL, 0), pick(dev[n], SMALL, 0), pick(gloo[n], SMALL, 0)
        print(f"{n:>3} {num(h, '{:.1f}'):>8} {num(d, '{:.1f}'):>8} {num(g, '{:.1f}'):>10}")
    targets.append(("-G 64 KiB at N=2 <= 100 us", pick(dev[2], SMALL, 0), 100.0, False))
    print()
    print("# -G mid sizes over shared memory: 256 KiB chunks (default) against the ring's own")
    print("# (HOOP_SHM_CHUNK_BYTES=0); median time per call (us) of the runs, out of place /")
    print("# in place, and default / 0 (out of place)")
    print(f"{'N':>3} {'size':>8} {'256K':>16} {'0':>16} {'256K/0':>8}")
    for n in NS:
        runs = mid_runs(os.path.join(out, f"ring_device_mid_n{n}.log"))
        sizes = sorted({s for rs in runs.values() for r in rs for s in r})
        for s in sizes:
            med = {}
            for v in ("256K", "0"):
                ts = [r[s] for r in runs.get(v, []) if s in r]
                med[v] = (statistics.median(t[0] for t in ts),
                          statistics.median(t[1] for t in ts)) if ts else None
            a, b = med["256K"], med["0"]
            cell = lambda m: "-" if m is None else f"{m[0]:.0f} / {m[1]:.0f}"
            print(f"{n:>3} {s >> 20:>4} MiB {cell(a):>16} {cell(b):>16} "
                  f"{num(ratio(a[0], b[0]) if a and b else None):>8}")
    print()
    print("# wrong results (ring_bench #wrong, gloo check), every size")
    bad = []
    for n in NS:
        for name, rows in (("host", host[n]), ("-G", dev[n])):
            bad += [f"ring_bench {name} N={n} {s} B: #wrong {r[2]} (out-of-place/in-place)"
                    for s, r in sorted(rows.items())
                    if r[2] != "0"]
        bad += [f"gloo-cuda N={n} {s} B: {r[2]}" for s, r in sorted(gloo[n].items())
                if r[2] != "ok"]
    print("\n".join(bad) if bad else "none")
    print()
    print("# issue 15's targets")
    for what, v, limit, at_least in targets:
        if v is None:
            state = "no figure"
        else:
            state = "met" if (v >= limit if at_least else v <= limit) else "MISSED"
        print(f"{state:>9}  {what} ({num(v)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
