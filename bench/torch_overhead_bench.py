#!/usr/bin/env python3
"""torch_overhead_bench.py - what hoop.torch adds over the C engine for a
step of many small tensors. Under hooprun:

    hooprun -np N python3 bench/torch_overhead_bench.py [-t 100] [-e 1024]
                                                         [-k 100] [-m]

A step is -t tensors of -e f32 each, averaged: either one
hvd.allreduce_async_ per tensor (named, as DistributedOptimizer's hooks
do) and then synchronize on each, or one hvd.grouped_allreduce_async_ of
all of them. Rank 0 prints the median step over -k steps (after 5 untimed
ones). `engine_bench -t 100 -e 1024 -k 100 -o` times the same steps
through the C engine directly; bench/engine_targets.sh sets them side by
side. -m prints key=value lines for scripts.

--floor also times what any Python layer over ctypes pays at least for
such a step, whatever it does inside: per tensor, the call the script
makes to start the allreduce and the one it makes to wait for it, each
going once into C (a libhoop function that does nothing), and the
tensor's data_ptr(). No engine work is in it.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import hoop.torch as hvd  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-t", "--tensors", type=int, default=100)
    ap.add_argument("-e", "--elems", type=int, default=1024)
    ap.add_argument("-k", "--steps", type=int, default=100)
    ap.add_argument("-m", "--keyval", action="store_true")
    ap.add_argument("--floor", action="store_true",
                    help="also time the least a Python layer over ctypes pays per step")
    args = ap.parse_args()
    if args.tensors < 1 or args.elems < 1 or args.steps < 1:
        ap.error("need -t, -e and -k >= 1")
    hvd.init()
    torch.set_num_threads(1)
    ts = [torch.ones(args.elems) for _ in range(args.tensors)]
    names = ["small.%d" % i for i in range(args.tensors)]

    def each():
        hs = [hvd.allreduce_async_(ts[i], name=names[i]) for i in reversed(range(args.tensors))]
        for h in hs:
            hvd.synchronize(h)

    def grouped():
        hvd.synchronize(hvd.grouped_allreduce_async_(ts, name="small.group"))

    # The floor: the two calls a script makes per tensor, each one call
    # into C that does nothing, and the pointer any enqueue must read.
    from hoop import _lib
    noop = _lib.lib().hoop_cuda_built

    def start(t):
        noop()
        return t.data_ptr()

    def wait(h):
        noop()

    def floor():
        hs = [start(ts[i]) for i in reversed(range(args.tensors))]
        for h in hs:
            wait(h)

    runs = [("each", each), ("grouped", grouped)] + ([("floor", floor)] if args.floor else [])
    res = {}
    for label, fn in runs:
        times = []
        for s in range(5 + args.steps):
            t0 = time.perf_counter()
            fn()
            if s >= 5:
                times.append(time.perf_counter() - t0)
        res[label] = statistics.median(times)
    if hvd.rank() == 0:
        if args.keyval:
            print("ranks=%d\ntorch=%s\ntorch_each_ms=%.4f\ntorch_grouped_ms=%.4f"
                  % (hvd.size(), torch.__version__, res["each"] * 1e3, res["grouped"] * 1e3), flush=True)
            if args.floor:
                print("python_floor_ms=%.4f" % (res["floor"] * 1e3), flush=True)
        else:
            print("# hoop.torch, N=%d, %d tensors of %d f32, Average, torch %s" % (
                hvd.size(), args.tensors, args.elems, torch.__version__))
            print("  one allreduce_async_ each  %9.3f ms" % (res["each"] * 1e3))
            print("  grouped_allreduce_async_   %9.3f ms" % (res["grouped"] * 1e3), flush=True)
            if args.floor:
                print("  floor of a ctypes layer    %9.3f ms" % (res["floor"] * 1e3), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
