"""Data-parallel training with DistributedOptimizer: every rank trains on its
shard of each batch and must end where one process trained on the whole
batch ends (and where torch's DistributedDataParallel over gloo ends).
Run on every rank: hooprun -np N python3 -m pytest tests/python/test_training.py"""
import time

from ports import free_ports

import pytest
import torch
import torch.nn.functional as F

import hoop.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
STEPS, BATCH = 20, 8 * 4  # BATCH splits evenly for N = 1, 2, 4


def model(dtype=torch.float64, out=2):
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(), torch.nn.Linear(16, out)).to(dtype)


def batch(step, dtype=torch.float64):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, 5, generator=g).to(dtype)
    y = (x[:, :2] * 3).sin()
    return x, y


def shard(t):
    per = t.shape[0] // N
    return t[R * per:(R + 1) * per]


def params_of(m):
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def assert_same_on_every_rank(m):
    mine = params_of(m)
    every = hvd.allgather(mine.unsqueeze(0))
    for r in range(N):
        assert torch.equal(every[r], mine), "rank %d's parameters differ from rank %d's" % (r, R)


def train(m, opt, steps, passes=1, shard_it=True):
    for s in range(steps):
        opt.zero_grad()
        for k in range(passes):
            x, y = batch(s * passes + k, next(m.parameters()).dtype)
            if shard_it:
                x, y = shard(x), shard(y)
            F.mse_loss(m(x), y).backward()
        opt.step()


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
@pytest.mark.parametrize("passes", [1, 2])
def test_matches_one_process_on_the_whole_batch(passes):
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters(), backward_passes_per_step=passes)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    train(m, opt, STEPS, passes)
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    train(ref, ref_opt, STEPS, passes, shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-10), \
        (params_of(m) - params_of(ref)).abs().max()
    assert not torch.equal(params_of(m), params_of(model())), "training did not move the parameters"


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
def test_post_accumulate_grad_hooks(monkeypatch):
    """torch >= 2.1 gives each parameter a hook after its gradient is
    accumulated, and the optimizer takes it there. Where torch lacks it
    (1.13), the same signature is emulated on the grad accumulator, so
    that this path runs here too."""
    kept = []
    if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
        def emulated(self, hook):
            acc = self.expand_as(self).grad_fn.next_functions[0][0]
            kept.append(acc)
            return acc.register_hook(lambda *ignore: hook(self))
        monkeypatch.setattr(torch.Tensor, "register_post_accumulate_grad_hook", emulated, raising=False)
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters())
    if kept:
        assert len(kept) == 4 and not opt._grad_accs, "the optimizer did not take the post-accumulate hooks"
    x, y = batch(0)
    F.mse_loss(m(shard(x)), shard(y)).backward()
    assert len(opt._started) == 4, "backward's hooks started %d allreduces of 4" % len(opt._started)
    opt.step()
    train(m, opt, STEPS)
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    train(ref, ref_opt, 1, shard_it=False)  # the step above
    train(ref, ref_opt, STEPS, shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-10), \
        (params_of(m) - params_of(ref)).abs().max()


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
def test_unnamed_parameters_in_several_groups():
    """Without named_parameters each parameter is named by its group and
    its place in it (horovod.torch's names): unique across groups."""
    m = model()
    groups = [{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.05}]
    train(m, hvd.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1)), STEPS)
    ref = model()
    train(ref, torch.optim.SGD([{"params": ref[0].parameters()}, {"params": ref[2].parameters(), "lr": 0.05}],
                               lr=0.1), STEPS, shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-10)


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
def test_predivide_factor_sum_op_and_explicit_synchronize():
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                   gradient_predivide_factor=2.0)
    train(m, opt, STEPS)
    s = model()
    sopt = hvd.DistributedOptimizer(torch.optim.SGD(s.parameters(), lr=0.1 / N),
                                    named_parameters=[("s." + k, v) for k, v in s.named_parameters()], op=hvd.Sum)
    for step in range(STEPS):  # synchronize, clip, then step without a second synchronize
        x, y = batch(step)
        sopt.zero_grad()
        F.mse_loss(s(shard(x)), shard(y)).backward()
        sopt.synchronize()
        torch.nn.utils.clip_grad_norm_(s.parameters(), 1e9)
        with sopt.skip_synchronize():
            sopt.step()
    ref = model()
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.1), STEPS, shard_it=False)
    for mm in (m, s):
        assert_same_on_every_rank(mm)
        assert torch.allclose(params_of(mm), params_of(ref), rtol=0, atol=1e-10)


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
def test_groups_and_fp16_compression():
    m = model(torch.float32)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                   compression=hvd.Compression.fp16, groups=2)
    train(m, opt, STEPS)
    ref = model(torch.float32)
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.1), STEPS, shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=2e-3), (params_of(m) - params_of(ref)).abs().max()


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
def test_groups_as_lists_of_parameters():
    m = model()
    w0, b0, w1, b1 = m.parameters()
    b1.requires_grad_(False)  # in a group, but it takes no gradient: nothing waits for it
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters(), groups=[[w1, b0], [b1], [w0]])
    train(m, opt, STEPS)
    ref = model()
    ref[2].bias.requires_grad_(False)
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), STEPS, shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-10), \
        (params_of(m) - params_of(ref)).abs().max()
    assert not torch.equal(w1.detach(), model()[2].weight.detach()), "training did not move the parameters"
    for bad, why in (([[w0, b0], [w0]], "only appear once"), ([[w0, "b0"]], "torch.Tensor")):
        with pytest.raises(ValueError, match=why):
            hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1),
                                     named_parameters=m.named_parameters(), groups=bad)


@pytest.mark.skipif(BATCH % N != 0 or N == 1, reason="needs 2+ ranks and an even split")
def test_matches_distributed_data_parallel_over_gloo():
    import torch.distributed as dist
    port = None
    if R == 0:
        port = free_ports()
    port = hvd.broadcast_object(port, root_rank=0, name="gloo_port")
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=R, world_size=N)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model())
        train(ddp, torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9), STEPS)
        m = model()
        train(m, hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                          named_parameters=m.named_parameters()), STEPS)
        assert torch.allclose(params_of(m), params_of(ddp.module), rtol=0, atol=1e-10)
    finally:
        dist.destroy_process_group()


class Bag(torch.nn.Module):
    """A sparse embedding (its gradient a sparse tensor) under a linear layer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(99)
        self.emb = torch.nn.Embedding(40, 6, sparse=True).double()
        self.lin = torch.nn.Linear(6, 2).double()

    def forward(self, idx):
        return self.lin(self.emb(idx).mean(1))


def train_bag(m, opt, shard_it=True):
    for s in range(STEPS):
        g = torch.Generator().manual_seed(500 + s)
        idx = torch.randint(0, 40, (BATCH, 3), generator=g)
        y = torch.randn(BATCH, 2, generator=g, dtype=torch.float64)
        if shard_it:
            idx, y = shard(idx), shard(y)
        opt.zero_grad()
        F.mse_loss(m(idx), y).backward()
        opt.step()


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
@pytest.mark.parametrize("as_dense", [False, True])
def test_sparse_gradients_match_one_process(as_dense):
    # sparse_as_dense=False: the embedding's gradient is gathered as indices
    # and values (a sparse sum); True: allreduced as a dense tensor.
    m = Bag()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.5), named_parameters=m.named_parameters(),
                                   sparse_as_dense=as_dense)
    train_bag(m, opt)
    assert m.emb.weight.grad.is_sparse  # as horovod.torch: reduced dense or not, handed back sparse
    ref = Bag()
    train_bag(ref, torch.optim.SGD(ref.parameters(), lr=0.5), shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-10), \
        (params_of(m) - params_of(ref)).abs().max()
    assert not torch.equal(params_of(m), params_of(Bag())), "training did not move the parameters"


@pytest.mark.skipif(BATCH % N != 0, reason="the batch does not split evenly among these ranks")
@pytest.mark.parametrize("as_dense", [False, True])
def test_sparse_adam_takes_the_reduced_gradient(as_dense):
    """torch.optim.SparseAdam takes sparse gradients only: with
    sparse_as_dense too, the reduced gradient is handed back sparse."""
    def emb():
        torch.manual_seed(5)
        return torch.nn.Embedding(40, 6, sparse=True).double()

    def train_emb(m, opt, shard_it=True):
        for s in range(STEPS):
            g = torch.Generator().manual_seed(900 + s)
            idx = torch.randint(0, 40, (BATCH, 3), generator=g)
            y = torch.randn(BATCH, 3, 6, generator=g, dtype=torch.float64)
            if shard_it:
                idx, y = shard(idx), shard(y)
            opt.zero_grad()
            F.mse_loss(m(idx), y).backward()
            opt.step()

    m = emb()
    train_emb(m, hvd.DistributedOptimizer(torch.optim.SparseAdam(list(m.parameters()), lr=0.1),
                                          named_parameters=m.named_parameters(), sparse_as_dense=as_dense))
    ref = emb()
    train_emb(ref, torch.optim.SparseAdam(list(ref.parameters()), lr=0.1), shard_it=False)
    assert_same_on_every_rank(m)
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-9), \
        (params_of(m) - params_of(ref)).abs().max()
    assert not torch.equal(params_of(m), params_of(emb())), "training did not move the parameters"


@pytest.mark.skipif(N == 1, reason="needs 2+ ranks")
def test_a_sparse_gradient_missing_on_a_rank_is_told_everywhere():
    # Only rank 0's forward uses the embedding: the others give it a dense
    # zero gradient, rank 0 a sparse one. Every rank raises, naming it and
    # the way out, instead of waiting for the others forever.
    def step(m, opt):
        opt.zero_grad()
        x = m.emb(torch.tensor([[1, 2, 3]])).mean(1) if R == 0 else torch.ones(1, 6, dtype=torch.float64)
        m.lin(x).sum().backward()
        opt.step()
    m = Bag()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
    t0 = time.time()
    with pytest.raises(hvd.HoopMismatchError, match="sparse_as_dense=True") as e:
        step(m, opt)
    assert "'emb.weight'" in str(e.value) and time.time() - t0 < 30, str(e.value)
    # as the sentence says: dense everywhere, and it trains
    m = Bag()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                   sparse_as_dense=True)
    step(m, opt)
    assert_same_on_every_rank(m)


def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch():
    torch.manual_seed(7)
    x = torch.randn(4 * N, 3, 5, dtype=torch.float64)
    w = torch.randn(4 * N, 3, 5, dtype=torch.float64)
    ref = torch.nn.BatchNorm1d(3).double()
    torch.nn.init.uniform_(ref.weight)
    torch.nn.init.uniform_(ref.bias)
    bn = hvd.SyncBatchNorm(3).double()
    bn.load_state_dict(ref.state_dict())
    xf = x.clone().requires_grad_()
    ref_out = ref(xf)
    (ref_out * w).sum().backward()
    mine = slice(4 * R, 4 * R + 4)
    xs = x[mine].clone().requires_grad_()
    out = bn(xs)
    (out * w[mine]).sum().backward()
    assert torch.allclose(out, ref_out[mine].detach(), rtol=0, atol=1e-12)
    assert torch.allclose(xs.grad, xf.grad[mine], rtol=0, atol=1e-12)
    assert torch.allclose(bn.running_mean, ref.running_mean) and torch.allclose(bn.running_var, ref.running_var)
    assert torch.allclose(hvd.allreduce(bn.weight.grad, op=hvd.Sum), ref.weight.grad, rtol=0, atol=1e-12)
    assert torch.allclose(hvd.allreduce(bn.bias.grad, op=hvd.Sum), ref.bias.grad, rtol=0, atol=1e-12)
    bn.eval()
    ref.eval()
    assert torch.allclose(bn(x[mine]), ref(x[mine]))


def test_broadcast_optimizer_state_after_divergence():
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.05 * (R + 1), momentum=0.9)
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(100 + R), dtype=torch.float64)
    for _ in range(3):  # each rank on its own data: parameters and momentum diverge
        opt.zero_grad()
        m(x).pow(2).sum().backward()
        opt.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=m)  # horovod.torch's third argument
    assert_same_on_every_rank(m)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    bufs = torch.cat([opt.state[p]["momentum_buffer"].reshape(-1) for p in m.parameters()])
    every = hvd.allgather(bufs.unsqueeze(0))
    assert all(torch.equal(every[r], every[0]) for r in range(N))


def test_broadcast_optimizer_state_creates_a_new_state():
    # horovod.torch's: a new optimizer's state is made by a step of zero gradients
    m = model()
    m[0].bias.requires_grad_(False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=m.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert m[0].bias.grad is None
    for p in (m[0].weight, m[2].weight, m[2].bias):
        assert p.grad is not None and not p.grad.any()
        assert not opt.state[p]["momentum_buffer"].any()
    # the wrapped step reduced nothing; the optimizer then trains as before
    train(m, opt, 2)
    assert_same_on_every_rank(m)
    # a rank with state (root) and ranks without: every rank ends with root's
    m2 = model()
    adam = torch.optim.Adam(m2.parameters(), lr=0.01)
    if R == 0:
        m2(batch(0)[0]).pow(2).sum().backward()
        adam.step()
    hvd.broadcast_optimizer_state(adam, root_rank=0)
    steps = hvd.allgather(torch.tensor([float(adam.state[m2[0].weight]["step"])]))
    assert steps.tolist() == [1.0] * N
    avg = adam.state[m2[0].weight]["exp_avg"]
    every = hvd.allgather(avg.unsqueeze(0))
    assert all(torch.equal(every[r], every[0]) for r in range(N)) and avg.any()


def test_join_with_uneven_batches():
    m = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
    mine = 3 + R  # rank r has 3 + r batches
    for s in range(mine):
        x, y = batch(1000 + 10 * s + R)
        opt.zero_grad()
        F.mse_loss(m(x[:4]), y[:4]).backward()
        opt.step()
    assert hvd.join() == N - 1
    # one process replaying it: at step s the ranks that still have data
    # each give their gradient, the joined ones zeros, averaged over N
    ref = model()
    for s in range(mine):
        grads = []
        for r in range(N):
            if s >= 3 + r:
                continue
            ref.zero_grad()
            x, y = batch(1000 + 10 * s + r)
            F.mse_loss(ref(x[:4]), y[:4]).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        with torch.no_grad():
            for i, p in enumerate(ref.parameters()):
                p -= 0.1 * sum(g[i] for g in grads) / N
    assert torch.allclose(params_of(m), params_of(ref), rtol=0, atol=1e-10)


@pytest.mark.skipif(N == 1, reason="a mismatch needs 2+ ranks")
def test_parameter_of_another_shape_fails_on_every_rank():
    m = model(out=3 if R == N - 1 else 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters())
    m(torch.ones(2, 5, dtype=torch.float64)).sum().backward()
    with pytest.raises(hvd.HoopMismatchError, match=r"'2\.(weight|bias)'"):
        opt.step()
    opt.zero_grad()  # the failed step left nothing pending
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)))
