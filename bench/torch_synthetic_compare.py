#!/usr/bin/env python3
"""torch_synthetic_compare.py - the synthetic benchmark of
examples/torch_synthetic_benchmark.py (Horovod's pytorch_synthetic_benchmark
shape: a small convnet on random 32x32 images, CPU) through hoop.torch's
DistributedOptimizer or through torch's DistributedDataParallel over gloo,
same model, batch and steps. Under hooprun (which gives each rank
HOOP_RANK and HOOP_SIZE):

    hooprun -np N python3 bench/torch_synthetic_compare.py --backend hoop
    hooprun -np N python3 bench/torch_synthetic_compare.py --backend ddp --port P

--port: a free TCP port on 127.0.0.1 for gloo's rendezvous (ddp only).
Rank 0 prints img/sec per rank (mean over --num-iters iterations of
--num-batches-per-iter steps, after --num-warmup-batches) and in total (N
times that); -m prints key=value lines for scripts.
"""
import argparse
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["hoop", "ddp"], required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("-m", "--keyval", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(32 * (args.image_size // 4) ** 2, 10))
    if args.backend == "hoop":
        import hoop.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size)
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        net = model
        version = "hoop.torch (%s)" % hvd.library_path()
    else:
        import torch.distributed as dist
        if not args.port:
            p.error("--backend ddp needs --port")
        rank, size = int(os.environ["HOOP_RANK"]), int(os.environ["HOOP_SIZE"])
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % args.port, rank=rank,
                                world_size=size)
        net = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01 * size)
        version = "torch DDP over gloo"
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 10, (args.batch_size,))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(net(data), target).backward()
        optimizer.step()

    timeit.timeit(step, number=args.num_warmup_batches)
    rates = []
    for _ in range(args.num_iters):
        t = timeit.timeit(step, number=args.num_batches_per_iter)
        rates.append(args.batch_size * args.num_batches_per_iter / t)
    mean = sum(rates) / len(rates)
    if rank == 0:
        if args.keyval:
            print("backend=%s\nranks=%d\ntorch=%s\nimg_per_s_rank=%.2f\nimg_per_s_total=%.2f"
                  % (args.backend, size, torch.__version__, mean, size * mean), flush=True)
        else:
            print("%s, %d ranks, batch %d: %.1f img/sec per rank, %.1f in total"
                  % (version, size, args.batch_size, mean, size * mean), flush=True)
    if args.backend == "hoop":
        hvd.shutdown()
    else:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
