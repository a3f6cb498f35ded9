"""Synthetic data-parallel benchmark with hoop.torch, in the shape of
Horovod's pytorch_synthetic_benchmark: a small convnet on random images,
img/sec per rank and in total.

    build/hooprun -np 4 /usr/bin/python3 examples/torch_synthetic_benchmark.py
"""
import argparse
import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hoop.torch as hvd  # noqa: E402

p = argparse.ArgumentParser(description="hoop.torch synthetic benchmark")
p.add_argument("--batch-size", type=int, default=32, help="images per rank per step")
p.add_argument("--image-size", type=int, default=32)
p.add_argument("--num-warmup-batches", type=int, default=2)
p.add_argument("--num-batches-per-iter", type=int, default=5)
p.add_argument("--num-iters", type=int, default=5)
p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16 on the wire")
p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
args = p.parse_args()

hvd.init()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Flatten(), torch.nn.Linear(32 * (args.image_size // 4) ** 2, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
target = torch.randint(0, 10, (args.batch_size,))


def benchmark_step():
    optimizer.zero_grad()
    loss = F.cross_entropy(model(data), target)
    loss.backward()
    optimizer.step()


def log(s):
    if hvd.rank() == 0:
        print(s, flush=True)


log("Model: small convnet, batch size %d per rank, %d ranks, library %s" % (args.batch_size, hvd.size(),
                                                                          hvd.library_path()))
timeit.timeit(benchmark_step, number=args.num_warmup_batches)
img_secs = []
for i in range(args.num_iters):
    t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    rate = args.batch_size * args.num_batches_per_iter / t
    log("Iter #%d: %.1f img/sec per rank" % (i, rate))
    img_secs.append(rate)
mean = sum(img_secs) / len(img_secs)
var = sum((x - mean) ** 2 for x in img_secs) / len(img_secs)
conf = 1.96 * var ** 0.5
log("Img/sec per rank: %.1f +-%.1f" % (mean, conf))
log("Total img/sec on %d rank(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * mean, hvd.size() * conf))
hvd.shutdown()
