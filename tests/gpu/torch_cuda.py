#!/usr/bin/env python3
"""torch_cuda.py - hoop.torch on CUDA tensors, checked against CPU tensors.

    hooprun -np N python3 tests/gpu/torch_cuda.py

Every rank uses GPU 0 (the GPU machine has one). Allreduce (sum, average,
min, max, with prescale and postscale), in place and not, grouped
allreduce, the other collectives, an allreduce on a process set, and a
few steps of DistributedOptimizer training a small model:
the CUDA results must equal the CPU results bit for bit (the same ring
order; the GPU kernels round as the CPU's do), and the CUDA allreduces
must take the GPU path (hoop.torch.cuda_built()). Exits 1 with a message
on any difference; needs torch with CUDA and a libhoop built with CUDA
(PYTHONPATH and HOOP_LIBRARY as tests/python/run.sh sets them).
"""
import sys

import torch

import hoop.torch as hvd


def fail(msg):
    print("rank %d: torch_cuda: %s" % (hvd.rank(), msg), file=sys.stderr, flush=True)
    sys.exit(1)


def same(a, b, what):
    a, b = a.detach().cpu(), b.detach().cpu()
    if a.dtype != b.dtype or a.shape != b.shape:
        fail("%s: %s %s against %s %s" % (what, a.dtype, tuple(a.shape), b.dtype, tuple(b.shape)))
    ai = a.view(torch.int16) if a.element_size() == 2 else a.view(torch.int32) if a.element_size() == 4 \
        else a.view(torch.int64)
    bi = b.view(torch.int16) if b.element_size() == 2 else b.view(torch.int32) if b.element_size() == 4 \
        else b.view(torch.int64)
    diff = (ai != bi).nonzero()
    if diff.numel():
        i = diff[0].tolist()
        fail("%s: element %s is %r on CUDA, %r on CPU" % (what, i, a[tuple(i)].item(), b[tuple(i)].item()))


def main():
    hvd.init()
    if not torch.cuda.is_available():
        fail("torch sees no CUDA device")
    if not hvd.cuda_built():
        fail("libhoop was built without CUDA: the CUDA path cannot be checked")
    torch.cuda.set_device(0)
    r, n = hvd.rank(), hvd.size()
    g = torch.Generator().manual_seed(1234 + r)
    checks = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32):
        for numel in (1, 1000, 300000):
            x = (torch.rand(numel, generator=g, dtype=torch.float64) * 200 - 100).to(dtype)
            ops = [hvd.Sum, hvd.Min, hvd.Max] + ([hvd.Average] if dtype.is_floating_point else [])
            for op in ops:
                # integers are scaled too (truncated toward zero): the device kernel against the CPU loop
                scale = (0.5, 3.0) if op == hvd.Average or (op == hvd.Sum and not dtype.is_floating_point) \
                    else (1.0, 1.0)
                name = "t.%s.%d.%s" % (str(dtype), numel, op)
                cpu = hvd.allreduce(x, name=name + ".cpu", op=op, prescale_factor=scale[0],
                                    postscale_factor=scale[1])
                cuda = hvd.allreduce(x.cuda(), name=name + ".cuda", op=op, prescale_factor=scale[0],
                                     postscale_factor=scale[1])
                if not cuda.is_cuda:
                    fail("%s: the result is not on the GPU" % name)
                same(cuda, cpu, name)
                y = x.cuda()
                hvd.allreduce_(y, name=name + ".inplace", op=op, prescale_factor=scale[0],
                               postscale_factor=scale[1])
                same(y, cpu, name + " in place")
                checks += 2
    ts = [torch.randn(k, generator=g) for k in (5, 70000, 1, 4096)]
    cpu = hvd.grouped_allreduce(ts, name="group.cpu", op=hvd.Average)
    cuda = hvd.grouped_allreduce([t.cuda() for t in ts], name="group.cuda", op=hvd.Average)
    for i, (a, b) in enumerate(zip(cuda, cpu)):
        same(a, b, "grouped allreduce tensor %d" % i)
        checks += 1

    # The other collectives on CUDA tensors of two dimensions (their shapes
    # go to the engine), against the same on CPU; alltoall's received
    # splits on the splits' device (horovod.torch's).
    m = torch.randn(2 * n, 3, generator=g)
    for what, f in (("allgather", lambda t, k: hvd.allgather(t, name="ag." + k)),
                    ("broadcast", lambda t, k: hvd.broadcast(t, 0, name="bc." + k)),
                    ("reducescatter", lambda t, k: hvd.reducescatter(t, name="rs." + k, op=hvd.Sum))):
        cuda, cpu = f(m.cuda(), "cuda"), f(m, "cpu")
        if not cuda.is_cuda:
            fail("%s: the result is not on the GPU" % what)
        same(cuda, cpu, what)
        checks += 1
    splits = torch.tensor([2] * n, dtype=torch.int32, device="cuda")
    out, recv = hvd.alltoall(m.cuda(), splits, name="a2a.cuda")
    if not out.is_cuda or recv.device.type != "cuda" or recv.tolist() != [2] * n:
        fail("alltoall: output on %s, received splits %s on %s" % (out.device, recv.tolist(), recv.device))
    same(out, hvd.alltoall(m, [2] * n, name="a2a.cpu")[0], "alltoall")
    checks += 1

    # A process set of the even ranks (the odd ones of their own): its
    # allreduce takes the device path of its own communicator, which must
    # give what the CPU gives over the same set.
    evens = hvd.add_process_set(list(range(0, n, 2)))
    odds = hvd.add_process_set(list(range(1, n, 2))) if n > 1 else None
    mine = evens if r % 2 == 0 else odds
    v = torch.randn(70000, generator=g)
    cuda = hvd.allreduce(v.cuda(), name="set.cuda", op=hvd.Sum, process_set=mine)
    if not cuda.is_cuda:
        fail("process set allreduce: the result is not on the GPU")
    same(cuda, hvd.allreduce(v, name="set.cpu", op=hvd.Sum, process_set=mine), "process set allreduce")
    checks += 1
    if odds is not None:
        hvd.remove_process_set(odds)
    hvd.remove_process_set(evens)

    # Training: the same model and data on CPU and on CUDA, 5 steps.
    def train(device):
        torch.manual_seed(7)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        model = model.to(device)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=[(device + "." + k, v)
                                                         for k, v in model.named_parameters()])
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        dg = torch.Generator().manual_seed(99 + r)
        for _ in range(5):
            xb = torch.randn(16, 32, generator=dg).to(device)
            yb = torch.randint(0, 4, (16,), generator=dg).to(device)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]
    for i, (a, b) in enumerate(zip(train("cuda"), train("cpu"))):
        # The forward and backward passes differ between CPU and GPU; the
        # allreduced gradients then differ a little too.
        if not torch.allclose(a, b, rtol=1e-3, atol=1e-4):
            fail("training: parameter %d differs on CUDA from CPU by %g" % (i, (a - b).abs().max().item()))
        checks += 1
    if r == 0:
        print("torch_cuda: %d checks passed on %d rank(s), torch %s" % (checks, n, torch.__version__))
    hvd.shutdown()


if __name__ == "__main__":
    main()
