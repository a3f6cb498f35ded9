"""hoop.torch: horovod.torch's API over hoop's engine.

    import hoop.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Process sets (add_process_set, process_set=) run over communicators of
their own, split from the job's. Not supported (NotImplementedError naming
it): Adasum, elastic training. CUDA tensors: allreduces take the device memory itself where
libhoop is built with CUDA; the other collectives copy through host memory.
"""
import atexit

from .. import (init as _init, shutdown as _shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
                cross_size, is_homogeneous, library_path, Average, Sum, Min, Max, Product, Adasum, HoopError,
                HoopInvalidError, HoopTimeoutError, HoopPeerError, HoopMismatchError, HoopUnsupportedError,
                HoopSystemError, HoopAbortedError, start_timeline, stop_timeline, _engine)
from .. import _lib
from . import horovod_env
from .compression import Compression
from .functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .mpi_ops import (allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
                      alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                      broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce,
                      grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
                      grouped_reducescatter, grouped_reducescatter_async, join, poll, reducescatter,
                      reducescatter_async, sparse_allreduce_async, synchronize)
from .optimizer import DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

# As horovod names its internal failure: the error a broken job raises.
HorovodInternalError = HoopError


def init(comm=None, process_sets=None):
    """Join the job, as hoop.init() does, after taking Horovod's runtime
    variables (HOROVOD_FUSION_THRESHOLD, HOROVOD_CYCLE_TIME,
    HOROVOD_TIMELINE, ...) for the hoop ones left unset (horovod_env)."""
    if comm is not None:
        raise _engine.not_supported("init(comm=...): an MPI communicator (hoop needs no MPI)")
    if process_sets is not None and process_sets != "dynamic":
        sets = list(process_sets)  # checked before the job is joined
        for ps in sets:
            if not isinstance(ps, ProcessSet):
                raise ValueError("hoop: init(process_sets=...) takes ProcessSet objects or \"dynamic\", "
                                 "not %r" % (ps,))
    taken = horovod_env.apply()
    try:
        _init()
    except HoopError as e:
        if not taken:
            raise
        raise type(e)(horovod_env.explain(str(e), taken), e.status) from e
    if process_sets is not None and process_sets != "dynamic":
        for ps in sets:  # every rank adds them in the same order
            if ps.process_set_id is None:
                add_process_set(ps)


def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def nccl_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True when libhoop takes CUDA tensors itself (built with CUDA): their
    allreduces then run on the GPU path, without a copy to the CPU."""
    return bool(_lib.lib().hoop_cuda_built())


def rocm_built():
    return False


class _Elastic:
    def __getattr__(self, name):
        raise _engine.not_supported("elastic training (hoop.torch.elastic.%s)" % name)


elastic = _Elastic()


# What ProcessSet is given for the global set: every rank, however many.
_EVERY_RANK = object()
# The sets added and not removed, by id; and the next id.
_sets = {}
_next_id = [1]


class ProcessSet:
    """horovod.torch's ProcessSet: the ranks (of the job) a collective given
    process_set= runs among. add_process_set() registers it on every rank
    (process_set_id is then set), and the ranks in it get a communicator
    and an engine of their own; a collective on it runs on those, in its
    own order, beside the job's. root_rank and ranks stay the job's ranks;
    results come in the set's rank order (rank())."""

    def __init__(self, ranks_or_comm):
        self._group = None  # the set's engine, on the ranks in it
        if ranks_or_comm is _EVERY_RANK:  # global_process_set
            self._ranks, self.process_set_id = None, 0
            return
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise _engine.not_supported("a process set from an MPI communicator (hoop needs no MPI)")
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks_or_comm):
            raise ValueError("ProcessSet should be initialized with a list of process ranks")
        self._ranks = sorted(ranks_or_comm)
        self.process_set_id = None

    @property
    def ranks(self):
        """The set's ranks; the global set's are every rank of the job,
        known once init() has run."""
        return list(range(size())) if self._ranks is None else self._ranks

    def included(self):
        return rank() in self.ranks

    def size(self):
        """How many ranks the set has; None until it is added."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's place in the set (-1 where it is not in it);
        None until the set is added."""
        if self.process_set_id is None:
            return None
        r, ranks = rank(), self.ranks
        return ranks.index(r) if r in ranks else -1

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __str__ = __repr__


# Every rank of the job: what a collective without process_set runs over.
global_process_set = ProcessSet(_EVERY_RANK)


def add_process_set(process_set):
    """Register a process set (a ProcessSet or a list of ranks) and return
    it. Every rank of the job calls it, with the same ranks, in the same
    order as its other add_process_set and remove_process_set calls; the
    ranks in the set form a communicator of their own. A set of the same
    ranks as one already added is a ValueError, as in Horovod."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError("hoop: %s was added already" % ps)
    n = size()
    ranks = ps.ranks
    if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= n:
        raise ValueError("hoop: a process set takes distinct ranks of this %d-rank job, not %s" % (n, ranks))
    if any(other._ranks == ranks for other in _sets.values()):
        raise ValueError("Attempted to add a duplicate process set: %s" % ps)
    ps._group = _engine.split(ranks)
    ps.process_set_id = _next_id[0]
    _next_id[0] += 1
    _sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregister a process set added before; every rank of the job calls
    it. Its communicator goes (pending operations on it fail). False for
    the global set or one that was never added."""
    psid = getattr(process_set, "process_set_id", None)
    if not psid or _sets.get(psid) is not process_set:
        return False
    del _sets[psid]
    g, process_set._group = process_set._group, None
    process_set.process_set_id = None
    if g is not None:
        _engine.destroy(g)
    return True


def _forget_process_sets():
    """At shutdown: the sets go with the job (their engines first)."""
    for ps in list(_sets.values()):
        g, ps._group, ps.process_set_id = ps._group, None, None
        if g is not None:
            try:
                _engine.destroy(g)
            except HoopError:
                pass
    _sets.clear()
    _next_id[0] = 1


def shutdown():
    _forget_process_sets()
    _shutdown()


# Before the job's engine goes at exit (atexit runs the last registered
# first): a set's engine stops while the job's can still say so.
atexit.register(_forget_process_sets)
