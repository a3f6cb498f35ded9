#!/usr/bin/env python3
"""small_latency.py - nanoseconds per small allreduce on one host, builds of
hoop side by side (and OpenMPI's shared-memory BTL, vader, when given), in
one run, interleaved (the order turning each repeat), with the cache-line
floor of the two processes' placement before each repeat.

    bench/small_latency.py [-n RANKS] [-s BYTES] [-r REPS] [--mpi-bench PATH]
                           NAME=BUILD_DIR [NAME=BUILD_DIR ...]

ring_bench prints times to a hundredth of a microsecond; this times a run
of ITERS calls (out of place and in place each) against a run of 10 and
divides the difference, so a call of 200 ns is known to a few ns. hoop
runs with HOOP_SHM=1; f32 sums. Prints each repeat, then the medians.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def hoop_ns(build, ranks, size, iters, env):
    def run(n):
        t0 = time.perf_counter()
        subprocess.run([os.path.join(TOP, "build", "hooprun"), "-np", str(ranks), "--no-tag",
                        os.path.join(build, "ring_bench"), "-b", str(size), "-e", str(size),
                        "-n", str(n), "-w", "100", "-c", "0"],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t0
    long_s, short_s = run(iters), run(10)
    return (long_s - short_s) * 1e9 / (2 * (iters - 10))


def mpi_ns(bench, ranks, size):
    out = subprocess.run(["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "--mca", "btl",
                          "self,vader", "-np", str(ranks), bench, "--minbytes", str(size),
                          "--maxbytes", str(size), "--target", "0.5", "--miniters", "200",
                          "--warmup", "0.1"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == str(size):
            return float(f[3]) * 1000
    raise RuntimeError("no line for %d bytes in the MPI bench's output:\n%s" % (size, out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--ranks", type=int, default=2)
    ap.add_argument("-s", "--size", type=int, default=8)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-i", "--iters", type=int, default=400000)
    ap.add_argument("--mpi-bench", help="the baseline harness's mpi_bench built against OpenMPI")
    ap.add_argument("builds", nargs="+", metavar="NAME=BUILD_DIR")
    a = ap.parse_args()
    builds = []
    for b in a.builds:
        name, _, path = b.partition("=")
        if not path or not os.path.exists(os.path.join(path, "ring_bench")):
            ap.error("%s: want NAME=BUILD_DIR holding ring_bench" % b)
        builds.append((name, path))
    floor = os.path.join(TOP, "build", "line_floor")
    env = dict(os.environ, HOOP_SHM="1")
    res = {"floor": []}
    for r in range(a.reps):
        out = subprocess.run([floor, "300000"], capture_output=True, text=True, check=True).stdout
        res["floor"].append(float(out.strip().split("=")[1]))
        # The order turns by one each repeat: whichever runs first after
        # the floor's measurement reads slower (by up to 10 %).
        systems = [(name, path) for name, path in builds]
        if a.mpi_bench:
            systems.append(("ompi_vader", None))
        k = r % len(systems)
        for name, path in systems[k:] + systems[:k]:
            ns = mpi_ns(a.mpi_bench, a.ranks, a.size) if path is None else \
                hoop_ns(path, a.ranks, a.size, a.iters, env)
            res.setdefault(name, []).append(ns)
        print("rep %d: " % (r + 1) + "  ".join("%s %.0f" % (k, v[-1]) for k, v in res.items()),
              flush=True)
    print("# N=%d, %d B, ns per call, median of %d:" % (a.ranks, a.size, a.reps))
    print("  ".join("%s %.0f" % (k, statistics.median(v)) for k, v in res.items()))


if __name__ == "__main__":
    sys.exit(main())
