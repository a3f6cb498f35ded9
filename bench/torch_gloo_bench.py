#!/usr/bin/env python3
"""torch_gloo_bench.py - allreduce through torch.distributed's gloo backend.

    python3 bench/torch_gloo_bench.py -np N [-b 64M] [-e 256M] [-f 4]
                                      [-n 10] [-w 3] [--bind] [--cuda]

Starts N ranks on this machine (over 127.0.0.1, rank 0 the rendezvous),
each running in-place all_reduce of f32 sums on CPU tensors, sizes from -b
to -e bytes, multiplying by -f. Rank 0 prints a table in the baseline
harness's format (size_B count iters time_us tmax_us algbw_GBs busbw_GBs
check), so bench/summarize.py reads it as it reads gloo_bench's: time_us is
rank 0's mean time per call over -n timed calls after -w untimed ones,
tmax_us the slowest rank's; busbw = size / time * 2 (N - 1) / N. The
result of the first call at every size is checked (every rank gives
rank + 1, the sum is N (N + 1) / 2); the timed calls reduce zeros.
--bind pins rank r to CPU r modulo the CPUs this process may use.
--cuda puts the tensors on GPU r modulo the GPUs (several ranks may share
one), which gloo stages through host memory; the timed loop ends with
torch.cuda.synchronize(), so that a time counts the result on the device.
"""
import argparse
import datetime
import os
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1].upper()] if s[-1].upper() in mult else int(s)


def free_port():
    """A port below the ephemeral range (tests/python/ports.py says why)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "python"))
    import ports

    return ports.free_ports(1)


def rank_main(rank, args, port):
    import torch
    import torch.distributed as dist

    if args.bind:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    dev = "cpu"
    if args.cuda:
        torch.cuda.set_device(rank % torch.cuda.device_count())
        dev = f"cuda:{torch.cuda.current_device()}"

    def sync():
        if args.cuda:
            torch.cuda.synchronize()

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=args.np,
                            timeout=datetime.timedelta(seconds=args.timeout))
    n = args.np
    if rank == 0:
        print(f"# system=torch_gloo torch={torch.__version__} N={n} inplace=1 iters={args.iters} "
              f"warmup={args.warmup} bind={int(args.bind)} device={dev}"
              + (f" gpu={torch.cuda.get_device_name()!r}" if args.cuda else ""))
        print("#       size_B        count    iters      time_us      tmax_us  algbw_GBs  busbw_GBs"
              "    check", flush=True)
    size = args.minbytes
    while size <= args.maxbytes:
        count = size // 4
        t = torch.full((count,), float(rank + 1), dtype=torch.float32, device=dev)
        dist.all_reduce(t)
        want = n * (n + 1) / 2
        ok = torch.tensor([1 if bool((t == want).all()) else 0], dtype=torch.int32)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        t.zero_()
        for _ in range(args.warmup):
            dist.all_reduce(t)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        sync()
        us = (time.perf_counter() - t0) / args.iters * 1e6
        tmax = torch.tensor([us], dtype=torch.float64)
        dist.all_reduce(tmax, op=dist.ReduceOp.MAX)
        if rank == 0:
            algbw = size / us / 1e3
            busbw = algbw * 2 * (n - 1) / n
            print(f"{size:14d} {count:12d} {args.iters:8d} {us:12.2f} {tmax.item():12.2f} "
                  f"{algbw:10.4f} {busbw:10.4f} {'ok' if ok.item() else 'WRONG':>8}", flush=True)
        del t
        size *= args.stepfactor
    dist.destroy_process_group()
    if rank == 0:
        print("# done", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-np", type=int, required=True)
    ap.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("64M"))
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("256M"))
    ap.add_argument("-f", "--stepfactor", type=int, default=4)
    ap.add_argument("-n", "--iters", type=int, default=10)
    ap.add_argument("-w", "--warmup", type=int, default=3)
    ap.add_argument("--bind", action="store_true")
    ap.add_argument("--cuda", action="store_true",
                    help="CUDA tensors, on GPU rank modulo the GPUs")
    ap.add_argument("--timeout", type=int, default=120,
                    help="seconds a rank waits for the others (rendezvous, one call)")
    args = ap.parse_args()
    if args.np < 1 or args.minbytes < 4 or args.stepfactor < 2 or args.iters < 1:
        ap.error("need -np >= 1, -b >= 4, -f >= 2, -n >= 1")
    if args.cuda:
        import torch
        if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
            ap.error(f"--cuda: torch {torch.__version__} can use no CUDA device here "
                     f"(torch.cuda.is_available() is False)")
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=rank_main, args=(r, args, port)) for r in range(args.np)]
    for p in procs:
        p.start()
    # A rank that fails leaves the others waiting for it: stop them.
    rc = 0
    while any(p.is_alive() for p in procs):
        for p in procs:
            p.join(0.2)
            if p.exitcode:
                rc = rc or p.exitcode
        if rc:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            for p in procs:
                p.join()
            break
    rc = rc or next((p.exitcode for p in procs if p.exitcode), 0)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
