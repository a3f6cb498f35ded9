#!/usr/bin/env python3
"""torch_step_bench.py - what hoop.torch's DistributedOptimizer adds to a
training step of many small tensors. Under hooprun:

    hooprun -np N python3 bench/torch_step_bench.py [-l 50] [-w 32] [-b 8]
                                                   [-k 250] [--ddp PORT] [-m]

The model is -l Linear(w, w) layers (2 l tensors), a batch of -b random
rows, SGD with a learning rate of 0 (the weights stay, every step is
alike). Two copies of it run in turns: one with the plain optimizer, one
wrapped in hoop.torch.DistributedOptimizer (its hooks start each
gradient's allreduce as backward produces it; step() waits for them).
Rank 0 prints the median step of each over -k steps (after 50 untimed
ones), twice, and the difference: hoop's share of a step. --ddp PORT adds
a third copy, torch's DistributedDataParallel over gloo (its rendezvous on
127.0.0.1:PORT), timed in the same turns: the peer a torch user would
compare with. -m prints key=value lines for scripts.
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
    ap.add_argument("-l", "--layers", type=int, default=50)
    ap.add_argument("-w", "--width", type=int, default=32)
    ap.add_argument("-b", "--batch", type=int, default=8)
    ap.add_argument("-k", "--steps", type=int, default=250)
    ap.add_argument("--ddp", type=int, default=0, metavar="PORT",
                    help="also time torch DDP over gloo, rendezvous on this port")
    ap.add_argument("-m", "--keyval", action="store_true")
    args = ap.parse_args()
    if min(args.layers, args.width, args.batch, args.steps) < 1:
        ap.error("need -l, -w, -b and -k >= 1")
    hvd.init()
    torch.set_num_threads(1)

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width) for _ in range(args.layers)])

    plain_model, hoop_model = model(), model()
    plain = torch.optim.SGD(plain_model.parameters(), lr=0.0)
    wrapped = hvd.DistributedOptimizer(torch.optim.SGD(hoop_model.parameters(), lr=0.0),
                                       named_parameters=hoop_model.named_parameters())
    x = torch.randn(args.batch, args.width)
    runs = [("plain", plain_model, plain), ("hoop", hoop_model, wrapped)]
    if args.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.ddp, rank=hvd.rank(),
                                world_size=hvd.size())
        ddp_model = torch.nn.parallel.DistributedDataParallel(model())
        runs.append(("ddp", ddp_model, torch.optim.SGD(ddp_model.parameters(), lr=0.0)))

    def median_step(m, opt):
        times = []
        for s in range(50 + args.steps):
            t0 = time.perf_counter()
            opt.zero_grad()
            m(x).sum().backward()
            opt.step()
            if s >= 50:
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3

    res = {k: [] for k, _, _ in runs}
    for _ in range(2):
        for k, m, opt in runs:
            res[k].append(median_step(m, opt))
    p, h = min(res["plain"]), min(res["hoop"])
    d = min(res["ddp"]) if args.ddp else None
    if hvd.rank() == 0:
        if args.keyval:
            print("ranks=%d\ntensors=%d\nplain_step_ms=%.4f\nhoop_step_ms=%.4f\nhoop_share_ms=%.4f"
                  % (hvd.size(), 2 * args.layers, p, h, h - p), flush=True)
            if d is not None:
                print("ddp_step_ms=%.4f\nddp_share_ms=%.4f" % (d, d - p), flush=True)
        else:
            print("# hoop.torch DistributedOptimizer, N=%d, %d tensors (%d Linear(%d, %d)), batch %d, torch %s"
                  % (hvd.size(), 2 * args.layers, args.layers, args.width, args.width, args.batch,
                     torch.__version__))
            print("  plain optimizer step     %9.3f ms" % p)
            print("  DistributedOptimizer     %9.3f ms" % h)
            print("  hoop's share             %9.3f ms (%.1f us per tensor)" % (h - p, (h - p) * 1e3 / (2 * args.layers)),
                  flush=True)
            if d is not None:
                print("  torch DDP over gloo      %9.3f ms (its share %.3f ms)" % (d, d - p), flush=True)
    if args.ddp:
        dist.destroy_process_group()
    hvd.shutdown()


if __name__ == "__main__":
    main()
