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
from .. import (init as _init, shutdown, is_initialized, rank, size, local_rank, local_size, cross_rank,
                cross_size, is_homogeneous, library_path, Average, Sum, Min, Max, Product, Adasum, HoopError,
                HoopInvalidError, HoopTimeoutError, HoopPeerError, HoopMismatchError, HoopUnsupportedError,
                HoopSystemError, HoopAbortedError, start_timeline, stop_timeline, _engine)
from .. import _lib
from .. import process_sets as _process_sets
from ..process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
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
    sets = _process_sets.checked(process_sets)  # before the job is joined
    taken = horovod_env.apply()
    try:
        _init()
    except HoopError as e:
        if not taken:
            raise
        raise type(e)(horovod_env.explain(str(e), taken), e.status) from e
    _process_sets.add_all(sets)


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
