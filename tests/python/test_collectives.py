"""Every collective of hoop (numpy) and hoop.torch, exact on integer values.
Run on every rank: hooprun -np N python3 -m pytest tests/python/test_collectives.py"""
import ctypes
import gc
import json
import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

import hoop
import hoop.torch as hvd
from hoop import _engine

hvd.init()
R, N = hvd.rank(), hvd.size()
SUM_R = N * (N - 1) // 2  # sum of the ranks

NP_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32, np.float64]
TORCH_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                torch.float32, torch.float64]


def test_basics():
    assert hvd.is_initialized()
    assert 0 <= R < N and hvd.size() == hoop.size()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    # One host: each local rank is on it alone.
    assert hvd.local_size() == N and hvd.local_rank() == R
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0 and hvd.is_homogeneous() is True
    assert hoop.cross_size() == 1 and hoop.is_homogeneous() is True
    assert hvd.mpi_built() is False and hvd.gloo_built() is False and hvd.nccl_built() is False
    assert hoop.library_path().endswith(".so") or ".so." in hoop.library_path()


@pytest.mark.parametrize("dt", NP_DTYPES)
def test_numpy_allreduce_every_op(dt):
    x = (np.arange(10) % 4 + R + 1).astype(dt)
    per_rank = [(np.arange(10) % 4 + r + 1) for r in range(N)]
    assert np.array_equal(hoop.allreduce(x, op=hoop.Sum), sum(per_rank).astype(dt))
    assert np.array_equal(hoop.allreduce(x, op=hoop.Min), np.min(per_rank, axis=0).astype(dt))
    assert np.array_equal(hoop.allreduce(x, op=hoop.Max), np.max(per_rank, axis=0).astype(dt))
    if N <= 3:
        assert np.array_equal(hoop.allreduce(x, op=hoop.Product), np.prod(per_rank, axis=0).astype(dt))
    avg = hoop.allreduce(x, op=hoop.Average)
    want = sum(per_rank) / N
    if np.issubdtype(dt, np.integer):
        want = np.trunc(want)
    assert np.allclose(avg.astype(np.float64), want)


def test_numpy_async_and_others():
    h = hoop.allreduce_async(np.full(5, R, np.int64), op=hoop.Sum, name="np.async")
    h2 = hoop.grouped_allreduce_async([np.full(3, R, np.int32), np.full(2, 2 * R, np.int32)], op=hoop.Sum)
    assert np.array_equal(hoop.synchronize(h), np.full(5, SUM_R))
    g = h2.synchronize()
    assert np.array_equal(g[0], np.full(3, SUM_R)) and np.array_equal(g[1], np.full(2, 2 * SUM_R))
    assert hoop.poll(h)
    gathered = hoop.allgather(np.full((R + 1, 2), R, np.int32))
    assert np.array_equal(gathered, np.concatenate([np.full((r + 1, 2), r, np.int32) for r in range(N)]))
    assert np.array_equal(hoop.broadcast(np.full(4, R, np.float64), N - 1), np.full(4, N - 1.0))
    out, recv = hoop.alltoall(np.arange(N, dtype=np.int32) + 100 * R, splits=[1] * N)
    assert np.array_equal(out, 100 * np.arange(N) + R) and list(recv) == [1] * N
    rs = hoop.reducescatter(np.arange(2 * N, dtype=np.int64).reshape(2 * N, 1) + R, op=hoop.Sum)
    assert np.array_equal(rs.ravel(), N * np.arange(2 * R, 2 * R + 2) + SUM_R)
    hoop.barrier()


@pytest.mark.parametrize("dt", TORCH_DTYPES)
def test_torch_allreduce_dtypes(dt):
    x = (torch.arange(12) % 5 + R).to(dt)
    want = sum((torch.arange(12) % 5 + r) for r in range(N)).to(dt)
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum), want)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Max)
    assert torch.equal(y, (torch.arange(12) % 5 + N - 1).to(dt))
    z = x.clone()
    hvd.synchronize(hvd.allreduce_async_(z, op=hvd.Min))
    assert torch.equal(z, (torch.arange(12) % 5).to(dt))
    h = hvd.allreduce_async(x, op=hvd.Sum)
    assert torch.equal(hvd.synchronize(h), want) and torch.equal(x, (torch.arange(12) % 5 + R).to(dt))


def test_torch_average_scales_and_grad():
    x = torch.full((3, 2), float(R), requires_grad=True)
    y = hvd.allreduce(x)  # Average by default
    assert torch.allclose(y, torch.full((3, 2), SUM_R / N))
    y.sum().backward()
    assert torch.allclose(x.grad, torch.ones(3, 2))
    s = hvd.allreduce(torch.ones(4), op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.equal(s, torch.full((4,), float(N)))
    assert torch.equal(hvd.allreduce(torch.ones(2), average=False), torch.full((2,), float(N)))
    c = hvd.allreduce(torch.full((5,), 1.0 + R), op=hvd.Sum, compression=hvd.Compression.fp16)
    assert c.dtype == torch.float32 and torch.equal(c, torch.full((5,), float(N + SUM_R)))


@pytest.mark.parametrize("dt", [torch.int8, torch.uint8, torch.int32, torch.int64])
def test_torch_integer_scales_truncate_as_horovod(dt):
    """horovod.torch scales integer tensors in double and truncates toward
    zero (its own tests check prescale and postscale on int tensors)."""
    def of(r):  # rank r's values
        v = torch.arange(-6, 6) + 3 * r
        return v.abs() if dt == torch.uint8 else v

    x = of(R)
    want = sum(of(r).double().mul(0.7).trunc() for r in range(N))
    s = hvd.allreduce(x.to(dt), op=hvd.Sum, prescale_factor=0.7, postscale_factor=2.0)
    assert s.dtype == dt and torch.equal(s, want.mul(2.0).to(dt)), (s, want)
    g = hvd.grouped_allreduce([x.to(dt), x.to(dt)], op=hvd.Sum, prescale_factor=0.7)
    assert all(torch.equal(t, want.to(dt)) for t in g)


def test_torch_grouped_allreduce():
    ts = [torch.full((i + 1,), float(R + i)) for i in range(3)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for i, o in enumerate(outs):
        assert torch.equal(o, torch.full((i + 1,), float(SUM_R + N * i)))
    hvd.grouped_allreduce_(ts, op=hvd.Sum)
    assert torch.equal(ts[2], outs[2])
    h = hvd.grouped_allreduce_async([torch.ones(2, dtype=torch.int64)], op=hvd.Sum)
    assert torch.equal(hvd.synchronize(h)[0], torch.full((2,), N))


def test_torch_grouped_allreduce_in_place_mixes_layouts():
    # Contiguous tensors are reduced in their own memory; a transposed
    # view and an empty tensor go through a copy that is written back.
    a = torch.full((4,), float(R))
    m = torch.arange(6, dtype=torch.float32).reshape(2, 3) + R
    v = m.t()
    e = torch.zeros(0)
    ptr = a.data_ptr()
    outs = hvd.synchronize(hvd.grouped_allreduce_async_([a, v, e], op=hvd.Sum))
    assert outs[0] is a and outs[1] is v and outs[2] is e and a.data_ptr() == ptr
    assert torch.equal(a, torch.full((4,), float(SUM_R)))
    want = (torch.arange(6, dtype=torch.float32).reshape(2, 3) * N + SUM_R).t()
    assert torch.equal(v, want) and torch.equal(m.t(), want)


def test_torch_grouped_allreduce_refuses_mixed_or_foreign_dtypes():
    with pytest.raises(TypeError, match="one dtype"):
        hvd.grouped_allreduce_async_([torch.ones(2), torch.ones(2, dtype=torch.float64)], name="mixed")
    with pytest.raises(TypeError, match="not one hoop reduces"):
        hvd.grouped_allreduce_async_([torch.ones(2), torch.ones(2, dtype=torch.complex64)], name="cplx")
    with pytest.raises(TypeError, match="not one hoop reduces"):
        hvd.grouped_allreduce_async_([torch.ones(2, dtype=torch.bool)], name="bool")


def test_torch_allgather_broadcast():
    t = torch.full((R + 1, 3), R, dtype=torch.int32)
    g = hvd.allgather(t)
    assert torch.equal(g, torch.cat([torch.full((r + 1, 3), r, dtype=torch.int32) for r in range(N)]))
    assert torch.equal(hvd.synchronize(hvd.allgather_async(torch.tensor([R]))), torch.arange(N))
    b = torch.full((4,), float(R))
    out = hvd.broadcast(b, 0)
    assert torch.equal(out, torch.zeros(4)) and torch.equal(b, torch.full((4,), float(R)))
    hvd.broadcast_(b, N - 1)
    assert torch.equal(b, torch.full((4,), float(N - 1)))
    c = torch.full((2, 2), R, dtype=torch.bfloat16)
    hvd.synchronize(hvd.broadcast_async_(c, 0))
    assert torch.equal(c, torch.zeros(2, 2, dtype=torch.bfloat16))
    nc = torch.arange(6.).reshape(2, 3).t() + R  # not contiguous
    hvd.broadcast_(nc, 0)
    assert torch.equal(nc, torch.arange(6.).reshape(2, 3).t())


def test_torch_allgather_and_broadcast_gradients():
    x = torch.full((R + 1, 2), float(R), requires_grad=True)
    g = hvd.allgather(x)
    (g * torch.arange(1.0, g.shape[0] + 1).unsqueeze(1)).sum().backward()
    start = sum(r + 1 for r in range(R))  # every rank weighs row i by i + 1: the average is i + 1
    assert torch.equal(x.grad, torch.arange(start + 1.0, start + R + 2).unsqueeze(1).expand(R + 1, 2))
    y = torch.full((3,), float(R), requires_grad=True)
    b = hvd.broadcast(y, root_rank=0)
    assert torch.equal(b, torch.zeros(3))
    (b * (R + 1)).sum().backward()
    assert torch.equal(y.grad, torch.full((3,), (N + 1) / 2 if R == 0 else 0.0))  # the average of r + 1


def test_torch_grouped_allreduce_alltoall_and_reducescatter_gradients():
    """Differentiable as in horovod.torch: a grouped allreduce's gradients
    are reduced with its op, an alltoall's go back the way the rows came,
    a reducescatter's are gathered (times the ranks for Sum, times the
    scale factors)."""
    xs = [torch.ones(3, requires_grad=True), torch.ones(2, 2, requires_grad=True)]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum(y.sum() for y in ys).mul(R + 1).backward()
    for x in xs:
        assert torch.equal(x.grad, torch.full(x.shape, float(N * (N + 1) // 2)))
    a = torch.full((N, 2), float(R), requires_grad=True)  # row j goes to rank j
    out = hvd.alltoall(a)
    assert torch.equal(out, torch.arange(N, dtype=torch.float32).unsqueeze(1).expand(N, 2))
    (out * (10 * R + torch.arange(N, dtype=torch.float32)).unsqueeze(1)).sum().backward()
    # row j of rank R's input reached rank j as its row R, weighed 10 j + R there
    assert torch.equal(a.grad, (10 * torch.arange(N, dtype=torch.float32) + R).unsqueeze(1).expand(N, 2))
    for op, pre, factor in ((hvd.Sum, 1.0, N), (hvd.Average, 2.0, 2.0)):
        x = torch.ones(2 * N, 3, requires_grad=True)
        rs = hvd.reducescatter(x, op=op, prescale_factor=pre)
        (rs * (R + 1)).sum().backward()
        want = factor * torch.arange(1.0, N + 1).repeat_interleave(2).unsqueeze(1).expand(2 * N, 3)
        assert torch.equal(x.grad, want), (op, x.grad)
    g = torch.ones(N, requires_grad=True)
    (hvd.grouped_reducescatter([g], op=hvd.Sum)[0] * (R + 1)).sum().backward()
    assert torch.equal(g.grad, N * torch.arange(1.0, N + 1))


def test_torch_alltoall_splits():
    # rank R sends j + 1 rows to rank j, each row [R, j]
    rows = [[R, j] for j in range(N) for _ in range(j + 1)]
    out, recv = hvd.alltoall(torch.tensor(rows, dtype=torch.int64), splits=[j + 1 for j in range(N)])
    assert recv.tolist() == [R + 1] * N
    assert out.tolist() == [[i, R] for i in range(N) for _ in range(R + 1)]
    even = hvd.alltoall(torch.arange(2 * N) + 10 * R)
    assert even.tolist() == [10 * i + 2 * R + k for i in range(N) for k in range(2)]


def test_torch_reducescatter():
    x = torch.arange(2 * N * 3, dtype=torch.float32).reshape(2 * N, 3) + R
    out = hvd.reducescatter(x, op=hvd.Sum)
    assert torch.equal(out, N * torch.arange(2 * N * 3.).reshape(2 * N, 3)[2 * R:2 * R + 2] + SUM_R)
    uneven = hvd.reducescatter(torch.ones(N + 1, 2), op=hvd.Sum)  # rank 0 gets 2 rows
    assert uneven.shape == ((2 if R == 0 else 1), 2) and torch.equal(uneven, torch.full(uneven.shape, float(N)))
    with pytest.raises(hvd.HoopInvalidError, match="a scalar has no first dimension"):
        hvd.reducescatter(torch.tensor(1.0))
    with pytest.raises(hvd.HoopInvalidError, match="tensor 1 is a scalar"):
        hvd.grouped_reducescatter([torch.ones(N), torch.tensor(1.0)])
    assert len(_engine._orphans) == 0, "the group's first tensor was enqueued before the refusal"
    avg = hvd.synchronize(hvd.reducescatter_async(torch.full((N,), float(R))))
    assert torch.equal(avg, torch.full((1,), SUM_R / N))


def test_torch_grouped_allgather_and_reducescatter():
    a = torch.full((R + 1, 2), float(R))  # rank r: r + 1 rows of r
    b = torch.arange(3, dtype=torch.int64) * (R + 1)
    outs = hvd.grouped_allgather([a, b], name="gag")
    assert torch.equal(outs[0], torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)]))
    assert torch.equal(outs[1], torch.cat([torch.arange(3, dtype=torch.int64) * (r + 1) for r in range(N)]))
    h = hvd.grouped_allgather_async([b])
    assert torch.equal(hvd.synchronize(h)[0], outs[1]) and hvd.poll(h)
    # differentiable: each input gets the average of every rank's gradient for its rows
    x = torch.ones(2, 3, requires_grad=True)
    y, = hvd.grouped_allgather([x])
    (y * (R + 1)).sum().backward()
    assert torch.equal(x.grad, torch.full((2, 3), (N + 1) / 2))
    xs = [torch.arange(2 * N * 3, dtype=torch.float32).reshape(2 * N, 3) + R, torch.ones(N, dtype=torch.int32)]
    rs = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    assert torch.equal(rs[0], N * torch.arange(2 * N * 3.).reshape(2 * N, 3)[2 * R:2 * R + 2] + SUM_R)
    assert torch.equal(rs[1], torch.full((1,), N, dtype=torch.int32))


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Average])
def test_torch_sparse_allreduce(op):
    # rank r: entries at rows r and r + 1, one index twice (entries add up)
    def mine(r):
        return torch.sparse_coo_tensor(torch.tensor([[r, r + 1, r + 1], [0, 1, 1]]), torch.tensor([12., 24., 36.]),
                                       (N + 1, 2))
    h = hvd.sparse_allreduce_async(mine(R), name="sparse.%s" % op, op=op)
    got = h()  # callable, as Horovod's
    want = sum(mine(r).to_dense() for r in range(N))
    assert got.is_sparse and torch.equal(got.to_dense(), want / N if op == hvd.Average else want)
    # the last rank has no entries at all
    empty = torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.int64), torch.zeros(0), (N + 1, 2))
    got = hvd.synchronize(hvd.sparse_allreduce_async(empty if R == N - 1 else mine(R), op=op))
    want = sum([mine(r).to_dense() for r in range(N - 1)], torch.zeros(N + 1, 2))
    assert torch.equal(got.to_dense(), want / N if op == hvd.Average else want)
    with pytest.raises(NotImplementedError, match="Sum and Average"):
        hvd.sparse_allreduce_async(mine(R), op=hvd.Max)


def test_timeline_at_run_time(tmp_path):
    """horovod.torch's start_timeline/stop_timeline: rank 0 writes the
    file, with cycle marks when asked; the others write none."""
    path = str(tmp_path / "timeline.json")
    with pytest.raises(ValueError):
        hvd.start_timeline("")
    hvd.start_timeline(path, mark_cycles=True)
    for i in range(6):
        hvd.allreduce(torch.ones(3), name="tl.%d" % (i % 2))
    hvd.stop_timeline()
    for _ in range(3):  # cycles in which the engine takes the stop
        hvd.allreduce(torch.ones(3), name="tl.0")
    if R != 0:
        assert not os.path.exists(path)
        return
    with open(path) as f:
        ev = json.load(f)
    names = {e.get("name") for e in ev} | {e.get("args", {}).get("name") for e in ev}
    assert {"tl.0", "tl.1", "ALLREDUCE", "CYCLE_START"} <= names, names


def test_process_sets():
    g = hvd.global_process_set
    assert g.process_set_id == 0 and g.size() == N and g.rank() == R and g.included()
    assert g.ranks == list(range(N))
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=g), torch.full((1,), float(N)))
    # not added yet: no size, no rank, and no collective (tests/python/test_process_sets.py has the rest)
    ps = hvd.ProcessSet([0])
    assert ps.size() is None and ps.rank() is None and ps.included() == (R == 0)
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    with pytest.raises(ValueError, match="has not been added"):
        hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1), process_set=ps)


def _share(rows, r):
    base, extra = divmod(rows, N)
    start = r * base + min(r, extra)
    return start, start + base + (1 if r < extra else 0)


@pytest.mark.parametrize("rows", [2 * N + 1, N - 1, 3 * N + N // 2])
def test_torch_reducescatter_uneven_rows(rows):
    # Horovod's split: the first rows % N ranks one row more; only this
    # rank's rows come back, exact.
    base = torch.arange(rows * 3, dtype=torch.int64).reshape(rows, 3)
    start, stop = _share(rows, R)
    out = hvd.reducescatter(base * (R + 1), op=hvd.Sum, name="rs.uneven.%d" % rows)
    assert out.shape == (stop - start, 3)
    assert torch.equal(out, base[start:stop] * (N * (N + 1) // 2))
    f = hvd.reducescatter(torch.full((rows, 2), float(R)), op=hvd.Average, prescale_factor=2.0,
                          postscale_factor=0.5)
    assert f.shape == (stop - start, 2) and torch.equal(f, torch.full((stop - start, 2), SUM_R / N))


def test_numpy_reducescatter_uneven_rows():
    rows = 2 * N + 1
    x = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2) + R
    start, stop = _share(rows, R)
    out = hoop.reducescatter(x, op=hoop.Sum, name="np.rs.uneven")
    want = N * np.arange(rows * 2, dtype=np.float64).reshape(rows, 2)[start:stop] + SUM_R
    assert out.shape == (stop - start, 2) and np.array_equal(out, want)


def test_torch_alltoall_empty_and_uneven_splits():
    # rank R sends nothing to rank R + 1 and R + j + 1 rows to every other
    # rank j, each row [R, j, k]
    sp = [0 if j == (R + 1) % N and N > 1 else R + j + 1 for j in range(N)]
    rows = [[R, j, k] for j in range(N) for k in range(sp[j])]
    out, recv = hvd.alltoall(torch.tensor(rows, dtype=torch.int32).reshape(-1, 3), splits=sp)
    got = [0 if R == (i + 1) % N and N > 1 else i + R + 1 for i in range(N)]
    assert recv.tolist() == got
    assert out.tolist() == [[i, R, k] for i in range(N) for k in range(got[i])]


def test_torch_objects_and_state():
    assert hvd.broadcast_object({"rank": R, "l": [1, 2]}, root_rank=N - 1) == {"rank": N - 1, "l": [1, 2]}
    assert hvd.allgather_object(("r", R)) == [("r", r) for r in range(N)]
    m = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(m.weight, float(R))
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    assert torch.equal(m.weight, torch.zeros(2, 3))
    hvd.barrier()


def test_errors_and_unsupported():
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(torch.ones(1), op=hvd.Adasum)
    with pytest.raises(NotImplementedError, match="elastic"):
        hvd.elastic.run
    with pytest.raises(TypeError, match="complex64"):
        hvd.allreduce(torch.ones(1, dtype=torch.complex64))
    with pytest.raises(hvd.HoopInvalidError, match="root_rank"):
        hvd.broadcast(torch.ones(1), N)
    # a name enqueued with another count on the last rank fails on every rank
    if N > 1:
        with pytest.raises(hvd.HoopMismatchError, match="'mismatch'"):
            hvd.allreduce(torch.ones(4 + (R == N - 1)), name="mismatch")
    assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum), torch.full((1,), float(N)))


@pytest.mark.skipif(N < 2, reason="shapes are compared between ranks: needs 2 or more")
def test_shapes_are_compared_as_horovod_compares_them():
    last = R == N - 1
    # the same number of elements in other shapes: an error on every rank, naming both
    with pytest.raises(hvd.HoopMismatchError, match=r"(?=.*gives shape \[17, 1311\])(?=.*gives shape \[17, 23, 57\])"):
        hvd.allreduce(torch.ones([17, 23, 57] if last else [17, 1311]), name="shape.ar")
    with pytest.raises(hvd.HoopMismatchError, match=r"gives shape \[289\]"):  # one dimension against two
        hvd.allreduce(torch.ones([17, 17] if last else [289]), name="shape.flat")
    with pytest.raises(hvd.HoopMismatchError, match="shape"):
        hvd.reducescatter(torch.ones([N, 6] if last else [N, 2, 3]), name="shape.rs")
    with pytest.raises(hvd.HoopMismatchError, match="shape"):
        hvd.broadcast(torch.ones([2, 3] if last else [3, 2]), 0, name="shape.bc")
    # rows of another size: refused, where they used to be delivered and misread
    with pytest.raises(hvd.HoopMismatchError, match=r"(?=.*rows of shape \[\*, 10, 3\])(?=.*rows of shape \[\*, 20, 3\])"):
        hvd.alltoall(torch.ones([N, 10 * (1 + last), 3]), name="shape.a2a")
    with pytest.raises(hoop.HoopMismatchError, match=r"rows of shape \[\*, 2\]"):
        hoop.allgather(np.ones((1, 2 + last), dtype=np.float32), name="shape.ag")
    # the first dimension of an allgather or alltoall may differ; the rest may not
    out = hvd.allgather(torch.full((R + 1, 2, 3), float(R)))
    assert out.shape == (N * (N + 1) // 2, 2, 3)
    got, recv = hvd.alltoall(torch.full((N * (R + 1), 2), float(R)), [R + 1] * N)
    assert recv.tolist() == [j + 1 for j in range(N)]
    assert got.shape == (N * (N + 1) // 2, 2)
    # a group's tensors, each by its shape (torch and numpy alike)
    with pytest.raises(hvd.HoopMismatchError, match=r"(?=.*tensor 1 of the group shape)(?=.*\[4, 3\])(?=.*\[3, 4\])"):
        hvd.grouped_allreduce([torch.ones(5), torch.ones([4, 3] if last else [3, 4])], name="shape.group")
    with pytest.raises(hoop.HoopMismatchError, match="tensor 0 of the group shape"):
        hoop.grouped_allreduce([np.ones((2, 3) if last else (6,), np.float32)], name="shape.npgroup")
    g = hvd.grouped_allreduce([torch.ones(2, 3), torch.ones([1] * 9 + [2])], op=hvd.Sum, name="shape.gdeep")
    assert g[0].shape == (2, 3) and torch.all(g[1] == N)
    # more dimensions than the engine compares: the counts alone are
    t = hvd.allreduce(torch.ones([1] * 9 + [2]), op=hvd.Sum, name="shape.deep")
    assert t.shape == tuple([1] * 9 + [2]) and torch.all(t == N)


def test_enqueue_refused_and_from_threads():
    # refused at the enqueue: hoop's status and sentence, nothing enqueued
    with pytest.raises(hvd.HoopInvalidError, match="a name of 1 to 200 bytes"):
        hvd.allreduce_async_(torch.ones(1), name="n" * 201)
    # Threads enqueue at once, each packing its own arguments: switching
    # threads every microsecond, a shared struct would mix one thread's
    # tensor with another's name.
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        K, T = 6, 120
        out, errors, structs = {}, [], []

        def worker(k):
            try:
                ts = [torch.full((7 + i % 5,), float(R * 1000 + k * 100 + i)) for i in range(T)]
                order = list(range(T)) if R % 2 == 0 else list(reversed(range(T)))
                hs = {i: hvd.allreduce_async_(ts[i], name="thread.%d.%d" % (k, i), op=hvd.Sum) for i in order}
                structs.append(_engine._tls.args[0])  # this thread's struct, kept alive
                for i in range(T):
                    hvd.synchronize(hs[i])
                out[k] = ts
            except Exception as e:  # reported below, on the main thread
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(K)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)
        addrs = [ctypes.addressof(a) for a in structs]
        assert len(set(addrs)) == K, "threads shared an AllreduceArgs: %s" % addrs
        for k in range(K):
            for i in range(T):
                want = float(sum(r * 1000 for r in range(N)) + N * (k * 100 + i))
                assert torch.equal(out[k][i], torch.full((7 + i % 5,), want)), (k, i, out[k][i])
    finally:
        sys.setswitchinterval(old)


@pytest.mark.skipif(N == 1, reason="needs a rank that enqueues the name later")
@pytest.mark.parametrize("elems", [4096, 65536])
def test_a_dropped_handle_keeps_its_buffers(elems):
    """horovod.torch's own tests drop the handle of an allreduce_async that
    the other ranks enqueue later. The engine writes the result when they
    do: into the handle's buffer still, not into memory Python has given
    to other tensors since."""
    if R == 0:
        hvd.allreduce_async(torch.zeros(elems), name="dropped.%d" % elems, op=hvd.Sum)  # dropped at once
        gc.collect()
        assert len(_engine._orphans) == 1
        later = [torch.full((elems,), -1.0) for _ in range(8)]  # where a freed buffer would go
    hvd.barrier()  # rank 0's allreduce still waits for the others
    if R != 0:
        assert torch.equal(hvd.allreduce(torch.ones(elems), name="dropped.%d" % elems, op=hvd.Sum),
                           torch.full((elems,), float(N - 1)))
    hvd.barrier()
    if R == 0:
        for t in later:
            assert torch.equal(t, torch.full((elems,), -1.0)), "the engine wrote into a freed buffer"
    hvd.allreduce(torch.ones(1), name="after.dropped.%d" % elems)
    assert len(_engine._orphans) == 0, "a done, dropped handle was not let go"


@pytest.mark.skipif(N < 3, reason="needs two ranks still running beside the one that joined")
def test_after_a_join_other_collectives_fail_at_once_whatever_their_names():
    """As in Horovod, a collective other than allreduce fails once a rank
    has joined, without waiting for the other ranks still running: they
    may have named it differently (unnamed operations are counted per
    rank, and the joined rank skipped one). Here each running rank names
    its allgather its own way."""
    if R == 0:
        last = hvd.join()
    else:
        h = hvd.allgather_async(torch.ones(2), name="after.join.%d" % R)
        t0 = time.time()
        while not hvd.poll(h) and time.time() - t0 < 20:
            time.sleep(0.01)
        assert hvd.poll(h), "the allgather waited for the other running ranks' name"
        with pytest.raises(hvd.HoopInvalidError, match="not supported once a rank has joined"):
            hvd.synchronize(h)
        last = hvd.join()
    assert hvd.allgather_object(last) == [last] * N


def test_join_last():
    last = hvd.join()
    assert 0 <= last < N
    assert hvd.allgather_object(last) == [last] * N
