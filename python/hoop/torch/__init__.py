"""hoop.torch: horovod.torch's API over hoop's engine.

    import hoop.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)

Not supported (NotImplementedError naming it): Adasum, elastic training,
process sets. CUDA tensors: allreduces take the device memory itself where
libhoop is built with CUDA; the other collectives copy through host memory.
"""
from .. import (init as _init, shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
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
    if process_sets:
        raise _engine.not_supported("process sets (every collective spans the whole job)")
    taken = horovod_env.apply()
    try:
        _init()
    except HoopError as e:
        if not taken:
            raise
        raise type(e)(horovod_env.explain(str(e), taken), e.status) from e


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


class ProcessSet:
    """horovod.torch's ProcessSet. hoop runs every collective over the
    whole job: a set other than global_process_set is never registered
    (process_set_id stays None), and a collective given one raises
    NotImplementedError."""

    def __init__(self, ranks_or_comm):
        if ranks_or_comm is _EVERY_RANK:  # global_process_set
            self._ranks, self.process_set_id = None, 0
            return
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise _engine.not_supported("a process set from an MPI communicator (hoop needs no MPI)")
        self._ranks = sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None

    @property
    def ranks(self):
        """The set's ranks; the global set's are every rank of the job,
        known once init() has run."""
        return list(range(size())) if self._ranks is None else self._ranks

    def included(self):
        return rank() in self.ranks

    def size(self):
        return len(self.ranks)

    def rank(self):
        """This process's place in the set, or -1 where it is not in it."""
        r, ranks = rank(), self.ranks
        return ranks.index(r) if r in ranks else -1

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


# Every rank of the job: what every hoop collective runs over.
global_process_set = ProcessSet(_EVERY_RANK)


def add_process_set(*args, **kwargs):
    raise _engine.not_supported("process sets (every collective spans the whole job)")


def remove_process_set(*args, **kwargs):
    raise _engine.not_supported("process sets (every collective spans the whole job)")
