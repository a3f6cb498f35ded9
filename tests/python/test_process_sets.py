"""Process sets, as horovod.torch's, in hoop.torch and hoop's numpy API:
added and removed on every rank, each set's collectives exact among its
ranks alone, beside the job's, and refused where they cannot run.
Run on every rank: hooprun -np N python3 -m pytest tests/python/test_process_sets.py"""
import numpy as np
import pytest
import torch

import hoop
import hoop.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
EVEN = list(range(0, N, 2))
ODD = list(range(1, N, 2))


@pytest.fixture
def sets():
    """Evens and odds (odds empty on one rank: then only evens)."""
    even = hvd.add_process_set(EVEN)
    odd = hvd.add_process_set(ODD) if ODD else None
    mine = even if R % 2 == 0 else odd
    yield even, odd, mine
    if odd is not None:
        assert hvd.remove_process_set(odd)
    assert hvd.remove_process_set(even)


def test_added_sets_know_their_ranks(sets):
    even, odd, mine = sets
    assert even.process_set_id not in (None, 0)
    if odd is not None:
        assert odd.process_set_id not in (None, 0, even.process_set_id)
    ranks = EVEN if R % 2 == 0 else ODD
    assert mine.ranks == ranks and mine.size() == len(ranks) and mine.rank() == ranks.index(R)
    assert mine.included()
    if odd is not None:
        other = odd if mine is even else even
        assert not other.included() and other.rank() == -1
    # the same ranks again: refused on every rank, as in Horovod
    with pytest.raises(ValueError, match="duplicate"):
        hvd.add_process_set(EVEN)
    with pytest.raises(ValueError, match="distinct ranks"):
        hvd.add_process_set([0, N])


def test_collectives_are_exact_within_each_set(sets):
    _, _, mine = sets
    ranks = mine.ranks
    me = ranks.index(R)
    total = sum(ranks)
    # allreduce, in place and not, and grouped
    x = torch.arange(6, dtype=torch.int64) + R
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=mine),
                       torch.arange(6, dtype=torch.int64) * len(ranks) + total)
    y = torch.full((2, 3), float(R))
    hvd.allreduce_(y, op=hvd.Sum, process_set=mine)
    assert torch.equal(y, torch.full((2, 3), float(total)))
    g = hvd.grouped_allreduce([torch.full((3,), R, dtype=torch.int32), torch.full((2, 2), 2 * R, dtype=torch.int32)],
                              op=hvd.Sum, process_set=mine)
    assert torch.equal(g[0], torch.full((3,), total, dtype=torch.int32))
    assert torch.equal(g[1], torch.full((2, 2), 2 * total, dtype=torch.int32))
    # allgather in the set's order, each rank its own number of rows
    got = hvd.allgather(torch.full((R + 1, 2), R, dtype=torch.int16), process_set=mine)
    want = torch.cat([torch.full((r + 1, 2), r, dtype=torch.int16) for r in ranks])
    assert torch.equal(got, want)
    # broadcast from the set's last rank, named by its rank in the job
    root = ranks[-1]
    b = hvd.broadcast(torch.full((4,), float(R)), root, process_set=mine)
    assert torch.equal(b, torch.full((4,), float(root)))
    # alltoall: row j of rank r goes to the set's j-th rank
    a, recv = hvd.alltoall(torch.full((len(ranks), 3), R, dtype=torch.int64), splits=[1] * len(ranks),
                           process_set=mine)
    assert torch.equal(a, torch.tensor([[r] * 3 for r in ranks], dtype=torch.int64))
    assert recv.tolist() == [1] * len(ranks)
    # reducescatter: this rank's share of the sum
    rs = hvd.reducescatter(torch.arange(len(ranks) * 2, dtype=torch.float32).reshape(len(ranks), 2) * (R + 1),
                           op=hvd.Sum, process_set=mine)
    scale = sum(r + 1 for r in ranks)
    assert torch.equal(rs, torch.tensor([[2.0 * me, 2.0 * me + 1]]) * scale)
    hvd.barrier(process_set=mine)
    assert hvd.broadcast_object({"from": R}, root_rank=root, process_set=mine) == {"from": root}
    assert hvd.allgather_object(R * 10, process_set=mine) == [r * 10 for r in ranks]


def test_a_set_runs_beside_the_job(sets):
    _, _, mine = sets
    # started on the set, then the job's, then waited for: two engines
    h = hvd.allreduce_async(torch.full((5,), float(R)), op=hvd.Sum, name="beside", process_set=mine)
    whole = hvd.allreduce(torch.full((5,), float(R)), op=hvd.Sum, name="beside")
    assert torch.equal(whole, torch.full((5,), float(N * (N - 1) // 2)))
    assert torch.equal(hvd.synchronize(h), torch.full((5,), float(sum(mine.ranks))))
    # unnamed operations are counted per set: the job's names stay in step
    # however many each set ran
    for _ in range(R % 2 + 1):
        hvd.allreduce(torch.ones(1), process_set=mine)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_gradients_flow_within_the_set(sets):
    _, _, mine = sets
    x = torch.full((3,), float(R + 1), requires_grad=True)
    out = hvd.allgather(x.reshape(1, 3), process_set=mine)
    (out.sum() * (R + 1)).backward()
    # this rank's rows of the average of every member's gradient
    assert torch.allclose(x.grad, torch.full((3,), sum(r + 1 for r in mine.ranks) / len(mine.ranks)))


def test_refused_where_it_cannot_run(sets):
    even, odd, mine = sets
    if odd is not None:
        other = odd if mine is even else even
        with pytest.raises(ValueError, match="rank %d is not in" % R):
            hvd.allreduce(torch.ones(1), process_set=other)
        with pytest.raises(hvd.HoopInvalidError, match="not in the process set"):
            hvd.broadcast(torch.ones(1), other.ranks[0], process_set=mine)
    # a shape that differs on one rank of the set: every rank of it is told
    if mine.size() > 1:
        shape = (3, 4) if mine.rank() == 0 else (4, 3)
        with pytest.raises(hvd.HoopMismatchError, match=r"\[3, 4\]"):
            hvd.allreduce(torch.ones(shape), name="set.shape", process_set=mine)
    # the job's engine is not hurt
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_a_removed_set_is_gone():
    ps = hvd.add_process_set(list(range(N)))
    assert ps.size() == N
    for _ in range(3):
        hvd.allreduce(torch.ones(1), process_set=ps)
    assert hvd.remove_process_set(ps) and ps.process_set_id is None
    assert not hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    # the same ranks may be added again once removed; its unnamed
    # operations are counted afresh (whatever Python object it reuses)
    again = hvd.add_process_set(list(range(N)))
    h = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, process_set=again)
    assert h.name == "allreduce.noname.0"
    assert hvd.synchronize(h).item() == N
    assert hvd.remove_process_set(again)


def test_init_takes_process_sets():
    ps = hvd.ProcessSet(EVEN)
    hvd.init(process_sets=[ps])  # already initialized: the sets are added
    try:
        assert ps.process_set_id not in (None, 0) and ps.size() == len(EVEN)
    finally:
        hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="ProcessSet objects"):
        hvd.init(process_sets=[[0]])


def test_distributed_optimizer_on_a_set(sets):
    even, _, _ = sets
    torch.manual_seed(0)  # one model everywhere
    model = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=even)
    torch.manual_seed(R + 1)  # data of its own on every rank
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(8, 4)
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    opt.step()
    w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    if R % 2 == 0:
        # the evens applied the average of their gradients: the same weights,
        # which the gradients gathered over the set give
        every = hvd.allgather(w.reshape(1, -1), process_set=even)
        assert all(torch.equal(every[0], every[i]) for i in range(len(EVEN)))
        gs = [hvd.allgather(g.reshape(1, -1), process_set=even).mean(0) for g in grads]
        want = torch.cat([b.reshape(-1) - 0.1 * g for b, g in zip(before, gs)])
        assert torch.allclose(w, want, atol=1e-6)
    else:
        # an odd rank stepped on its own gradient
        want = torch.cat([(b - 0.1 * g).reshape(-1) for b, g in zip(before, grads)])
        assert torch.allclose(w, want)


def test_numpy_collectives_are_exact_within_each_set(sets):
    _, _, mine = sets
    ranks = mine.ranks
    me = ranks.index(R)
    total = sum(ranks)
    x = np.arange(6, dtype=np.int64) + R
    assert np.array_equal(hoop.allreduce(x, op=hoop.Sum, process_set=mine),
                          np.arange(6, dtype=np.int64) * len(ranks) + total)
    g = hoop.grouped_allreduce([np.full(3, R, np.int32), np.full((2, 2), 2 * R, np.int32)], op=hoop.Sum,
                               process_set=mine)
    assert np.array_equal(g[0], np.full(3, total, np.int32))
    assert np.array_equal(g[1], np.full((2, 2), 2 * total, np.int32))
    got = hoop.allgather(np.full((R + 1, 2), R, np.int16), process_set=mine)
    assert np.array_equal(got, np.concatenate([np.full((r + 1, 2), r, np.int16) for r in ranks]))
    root = ranks[-1]
    assert np.array_equal(hoop.broadcast(np.full(4, float(R)), root, process_set=mine), np.full(4, float(root)))
    a, recv = hoop.alltoall(np.full((len(ranks), 3), R, np.int64), splits=[1] * len(ranks), process_set=mine)
    assert np.array_equal(a, np.array([[r] * 3 for r in ranks], np.int64))
    assert recv.tolist() == [1] * len(ranks)
    # an even split, then an uneven one (the set's first ranks one row more)
    rs = hoop.reducescatter(np.arange(len(ranks) * 2, dtype=np.float32).reshape(len(ranks), 2) * (R + 1),
                            op=hoop.Sum, process_set=mine)
    scale = sum(r + 1 for r in ranks)
    assert np.array_equal(rs, np.array([[2.0 * me, 2.0 * me + 1]], np.float32) * scale)
    rows = len(ranks) + 1
    rs = hoop.reducescatter(np.arange(rows, dtype=np.float64).reshape(rows, 1), op=hoop.Sum, process_set=mine)
    first = 0 if me == 0 else me + 1
    assert rs.ravel().tolist() == [float(i * len(ranks)) for i in range(first, first + (2 if me == 0 else 1))]
    hoop.barrier(process_set=mine)


def test_one_set_serves_both_apis():
    assert hoop.ProcessSet is hvd.ProcessSet and hoop.global_process_set is hvd.global_process_set
    # added through hoop, used through hoop.torch
    ps = hoop.add_process_set(list(range(N)))
    try:
        t = hvd.allreduce(torch.full((2,), float(R)), op=hvd.Sum, process_set=ps)
        assert torch.equal(t, torch.full((2,), float(N * (N - 1) // 2)))
        # unnamed operations from both count on the set's one engine
        h = hoop.allreduce_async(np.ones(1), op=hoop.Sum, process_set=ps)
        h2 = hvd.allreduce_async(torch.ones(1), op=hvd.Sum, process_set=ps)
        assert (h.name, h2.name) == ("allreduce.noname.1", "allreduce.noname.2")
        assert h.synchronize().tolist() == [N] and hvd.synchronize(h2).item() == N
        with pytest.raises(ValueError, match="duplicate"):
            hvd.add_process_set(list(range(N)))
    finally:
        assert hvd.remove_process_set(ps)
    # added through hoop.torch, used and removed through hoop
    even = hvd.add_process_set(EVEN)
    try:
        if R % 2 == 0:
            assert hoop.allreduce(np.ones(2), op=hoop.Sum, process_set=even).tolist() == [len(EVEN)] * 2
    finally:
        assert hoop.remove_process_set(even)


def test_numpy_refused_where_it_cannot_run(sets):
    even, odd, mine = sets
    if odd is not None:
        other = odd if mine is even else even
        with pytest.raises(ValueError, match="rank %d is not in" % R):
            hoop.allgather(np.ones(1), process_set=other)
        with pytest.raises(hoop.HoopInvalidError, match="not in the process set"):
            hoop.broadcast(np.ones(1), other.ranks[0], process_set=mine)
    with pytest.raises(ValueError, match="has not been added"):
        hoop.allreduce(np.ones(1), process_set=hoop.ProcessSet(EVEN))
    if mine.size() > 1:
        shape = (3, 4) if mine.rank() == 0 else (4, 3)
        with pytest.raises(hoop.HoopMismatchError, match=r"\[3, 4\]"):
            hoop.allreduce(np.ones(shape), name="set.np.shape", process_set=mine)
    assert hoop.allreduce(np.ones(1), op=hoop.Sum).tolist() == [N]


def test_numpy_init_takes_process_sets():
    ps = hoop.ProcessSet(EVEN)
    hoop.init(process_sets=[ps])  # already initialized: the sets are added
    try:
        assert ps.process_set_id not in (None, 0) and ps.size() == len(EVEN)
        if R % 2 == 0:
            assert hoop.allreduce(np.ones(1), op=hoop.Sum, process_set=ps).tolist() == [len(EVEN)]
    finally:
        assert hoop.remove_process_set(ps)
    with pytest.raises(ValueError, match="ProcessSet objects"):
        hoop.init(process_sets=[[0]])
