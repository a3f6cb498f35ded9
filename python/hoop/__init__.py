"""hoop: collectives between processes, over libhoop's engine (numpy API).

    import hoop, numpy as np
    hoop.init()
    x = hoop.allreduce(np.ones(4, np.float32), op=hoop.Sum, name="x")
    hoop.shutdown()

Run under `hooprun -np N python3 prog.py` (or torchrun, horovodrun, mpirun).
hoop.torch is the same over torch tensors, with horovod.torch's names.
Process sets (add_process_set, process_set= on each collective) are
hoop.torch's, shared: a set added through either serves both.
"""
import ctypes

from . import _engine, _lib
from . import process_sets as _process_sets
from ._engine import Handle, is_initialized, join, start_timeline, stop_timeline, engine_stats
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from ._lib import (HoopError, HoopInvalidError, HoopTimeoutError, HoopPeerError, HoopMismatchError,
                   HoopUnsupportedError, HoopSystemError, HoopAbortedError, library_path)

try:
    import numpy as _np
except ImportError:  # the torch API works without numpy's
    _np = None

__version__ = "0.1.0"

# Reduction operations, as horovod names them.
Average = _lib.AVG
Sum = _lib.SUM
Min = _lib.MIN
Max = _lib.MAX
Product = _lib.PROD
Adasum = "Adasum"


def init(process_sets=None):
    """Join the job: rank, size and root from HOOP_* (or torchrun's,
    horovodrun's, mpirun's variables); no variables: a one-rank job.
    process_sets: ProcessSet objects every rank then adds, in order."""
    sets = _process_sets.checked(process_sets)
    _engine.init()
    _process_sets.add_all(sets)


def shutdown():
    """Leave the job: every rank calls it (the first to do so stops the
    others' engines); the process sets go first. Pending operations fail
    with HoopAbortedError."""
    _process_sets.forget()
    _engine.shutdown()


def barrier(process_set=None):
    """Wait until every rank (of process_set) has called it."""
    _engine.barrier(_process_sets.group_of(process_set))


def rank():
    return _engine.state().rank


def size():
    return _engine.state().size


def local_rank():
    return _engine.state().local_rank


def local_size():
    return _engine.state().local_size


def cross_rank():
    """This rank's place among the ranks with its local rank (one on each
    host that has it), in rank order: Horovod's cross rank."""
    return _engine.state().cross_rank


def cross_size():
    """How many hosts have this rank's local rank."""
    return _engine.state().cross_size


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return _engine.state().homogeneous


def transport():
    """Which transport carries the data (tcp, ofi, verbs)."""
    return _engine.state().transport


def check_op(op):
    if op == Adasum or (isinstance(op, str) and op.lower() == "adasum"):
        raise _engine.not_supported("Adasum (use Average or Sum)")
    if op not in (Average, Sum, Min, Max, Product):
        raise ValueError("hoop: unknown reduction op %r (Average, Sum, Min, Max, Product)" % (op,))
    return op


if _np is not None:
    _NP_DTYPES = {_np.dtype(_np.int8): _lib.I8, _np.dtype(_np.uint8): _lib.U8, _np.dtype(_np.int16): _lib.I16,
                  _np.dtype(_np.uint16): _lib.U16, _np.dtype(_np.int32): _lib.I32, _np.dtype(_np.uint32): _lib.U32, _np.dtype(_np.int64): _lib.I64,
                  _np.dtype(_np.uint64): _lib.U64, _np.dtype(_np.float16): _lib.F16,
                  _np.dtype(_np.float32): _lib.F32, _np.dtype(_np.float64): _lib.F64}


def _np_dtype(a, what):
    if _np is None:
        raise ImportError("hoop's numpy API needs numpy")
    dt = _NP_DTYPES.get(_np.dtype(a.dtype))
    if dt is None:
        raise TypeError("hoop: %s: numpy dtype %s is not one hoop reduces (int8, uint8, int16, uint16, int32, "
                        "uint32, int64, uint64, float16, float32, float64)" % (what, a.dtype))
    return dt


def _arr(a, what):
    a = _np.ascontiguousarray(a)
    return a, _np_dtype(a, what)


def _ptr(a):
    return a.ctypes.data if a.size else None


def allreduce_async(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    check_op(op)
    g = _process_sets.group_of(process_set)
    name = _engine.auto_name("allreduce", name, g)
    a, dt = _arr(array, "allreduce '%s'" % name)
    out = _np.empty_like(a)
    return _engine.allreduce(name, _ptr(a), _ptr(out), a.size, dt, op, prescale_factor, postscale_factor,
                             [a, out], lambda h: out, shape=a.shape, g=g)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return allreduce_async(array, op, name, prescale_factor, postscale_factor, process_set).synchronize()


def grouped_allreduce_async(arrays, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=None):
    check_op(op)
    g = _process_sets.group_of(process_set)
    name = _engine.auto_name("grouped_allreduce", name, g)
    arrs = [_arr(a, "grouped allreduce '%s'" % name) for a in arrays]
    if not arrs:
        raise ValueError("hoop: grouped allreduce '%s' of no arrays" % name)
    dts = {dt for _, dt in arrs}
    if len(dts) != 1:
        raise TypeError("hoop: grouped allreduce '%s': every array must have one dtype" % name)
    ins = [a for a, _ in arrs]
    outs = [_np.empty_like(a) for a in ins]
    return _engine.grouped_allreduce(name, [_ptr(a) for a in ins], [_ptr(o) for o in outs],
                                     [a.size for a in ins], dts.pop(), op, prescale_factor, postscale_factor,
                                     ins + outs, lambda h: outs, g=g, shapes=[a.shape for a in ins])


def grouped_allreduce(arrays, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=None):
    return grouped_allreduce_async(arrays, op, name, prescale_factor, postscale_factor,
                                   process_set).synchronize()


def _rows(a):
    if a.ndim == 0:
        a = a.reshape(1)
    rows = a.shape[0]
    return a, rows, (a.size // rows if rows else int(_np.prod(a.shape[1:], dtype=_np.int64)))


def allgather_async(array, name=None, process_set=None):
    """Every rank's array (of process_set's ranks), in rank order, joined on
    the first dimension (whose length may differ between ranks)."""
    g = _process_sets.group_of(process_set)
    name = _engine.auto_name("allgather", name, g)
    a, dt = _arr(array, "allgather '%s'" % name)
    a, rows, row_elems = _rows(a)
    n = _process_sets.state_of(g).size

    def finish(h):
        data = h.output(a.itemsize)
        out = _np.frombuffer(data, dtype=a.dtype).copy()
        return out.reshape((-1,) + a.shape[1:]) if row_elems else out.reshape((sum(h.counts(n)),) + a.shape[1:])
    return _engine.allgather(name, _ptr(a), a.shape, dt, [a], finish, g)


def allgather(array, name=None, process_set=None):
    return allgather_async(array, name, process_set).synchronize()


def broadcast_async(array, root_rank, name=None, process_set=None):
    """root_rank's array on every rank (of process_set); root_rank is a rank
    of the job, in the set."""
    g = _process_sets.group_of(process_set)
    name = _engine.auto_name("broadcast", name, g)
    a, dt = _arr(array, "broadcast '%s'" % name)
    out = a.copy()
    return _engine.broadcast(name, _ptr(out), out.shape, dt, root_rank, [out], lambda h: out, g)


def broadcast(array, root_rank, name=None, process_set=None):
    return broadcast_async(array, root_rank, name, process_set).synchronize()


def alltoall_async(array, splits=None, name=None, process_set=None):
    """Rows splits[j] of the array (first dimension) go to rank j (the j-th
    of process_set's ranks); the result is what every rank sent here, in
    rank order, and the rows from each."""
    g = _process_sets.group_of(process_set)
    name = _engine.auto_name("alltoall", name, g)
    a, dt = _arr(array, "alltoall '%s'" % name)
    a, rows, row_elems = _rows(a)
    n = _process_sets.state_of(g).size
    sp = _engine.splits_of(name, rows, splits, n)

    def finish(h):
        counts = h.counts(n)
        out = _np.frombuffer(h.output(a.itemsize), dtype=a.dtype).copy()
        recv = [c // row_elems if row_elems else 0 for c in counts]
        return out.reshape((sum(recv),) + a.shape[1:]), _np.array(recv, dtype=_np.int32)
    return _engine.alltoall(name, _ptr(a), a.shape, sp, dt, [a], finish, g)


def alltoall(array, splits=None, name=None, process_set=None):
    out, recv = alltoall_async(array, splits, name, process_set).synchronize()
    return out if splits is None else (out, recv)


def reducescatter_async(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=None):
    """Rank r (of process_set) gets its share of the first dimension of the
    reduction (the first rows % size ranks one row more, as Horovod
    splits)."""
    check_op(op)
    g = _process_sets.group_of(process_set)
    name = _engine.auto_name("reducescatter", name, g)
    a, dt = _arr(array, "reducescatter '%s'" % name)
    a, rows, row_elems = _rows(a)
    s = _process_sets.state_of(g)
    n, r = s.size, s.rank
    if rows % n == 0:
        out = _np.empty((rows // n,) + a.shape[1:], dtype=a.dtype)
        return _engine.reduce_scatter(name, _ptr(a), _ptr(out), a.shape, out.size, dt, op, prescale_factor,
                                      postscale_factor, [a, out], lambda h: out, g)
    # Uneven shares: each rank gets its rows only (reduce_scatterv).
    rows_of = _engine.shares(rows, n)
    out = _np.empty((rows_of[r],) + a.shape[1:], dtype=a.dtype)
    return _engine.reduce_scatterv(name, _ptr(a), _ptr(out), a.shape, [k * row_elems for k in rows_of], dt, op,
                                   prescale_factor, postscale_factor, [a, out], lambda h: out, g)


def reducescatter(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return reducescatter_async(array, op, name, prescale_factor, postscale_factor, process_set).synchronize()


def poll(handle):
    return handle.poll()


def synchronize(handle):
    return handle.synchronize()
