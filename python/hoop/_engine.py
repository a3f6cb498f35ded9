"""The process's one hoop engine and its handles, over raw buffers.

The numpy API (hoop) and the torch API (hoop.torch) both enqueue through
here: a buffer is an address, an element count and a hoop dtype, and each
operation returns a Handle whose synchronize() waits and gives its result.
"""
import array
import atexit
import collections
import ctypes
import os
import threading

from . import _lib
from ._lib import error, HoopError, HoopInvalidError

_state = None
_lock = threading.Lock()
_names = {}
# The C functions every gradient goes through, looked up once at init():
# the allreduce from a struct, wait, wait-and-release, test, status, release.
_fn_allreduce_args = _fn_enqueue = _fn_wait = _fn_wait_release = _fn_test = _fn_status = _fn_release = None
# Each thread packs its allreduces' arguments into a struct of its own.
_tls = threading.local()
_pack_args = _lib.ALLREDUCE_ARGS_PACK.pack_into
_ARGS_SIZE = ctypes.sizeof(_lib.AllreduceArgs)
# and, for an operation with a shape, into an OpArgs of its own.
_pack_op = [p.pack_into for p in _lib.OP_ARGS_PACK]
_OP_ARGS_SIZE = ctypes.sizeof(_lib.OpArgs)
_KIND_ALLREDUCE = _lib.KIND_ALLREDUCE
_DIMS_MAX = _lib.DIMS_MAX
_SIZE_T = "Q" if ctypes.sizeof(ctypes.c_size_t) == 8 else "I"  # array's code of a size_t


class _State:
    """An engine and where this rank is in it: the job's, or a process
    set's (ranks: the set's ranks in the job, in order; None for the job)."""

    def __init__(self, comm, transport, ranks=None):
        L = _lib.lib()
        self.ranks = ranks
        self.names = {}  # a process set's count of unnamed operations, by kind
        self.engine = None
        self.engine_addr = 0  # the engine's address, as an int (packed into AllreduceArgs)
        self.rank, self.size = L.hoop_comm_rank(comm), L.hoop_comm_size(comm)
        self.local_rank, self.local_size = L.hoop_comm_local_rank(comm), L.hoop_comm_local_size(comm)
        self.cross_rank, self.cross_size = L.hoop_comm_cross_rank(comm), L.hoop_comm_cross_size(comm)
        self.homogeneous = L.hoop_comm_is_homogeneous(comm) == 1
        self.transport = transport


def _over(comm, ranks=None):
    """A _State with an engine over comm, which the engine then owns; on
    failure comm is destroyed and hoop's error raised."""
    L = _lib.lib()
    s = _State(comm, (L.hoop_comm_transport(comm) or b"").decode(), ranks)
    eng = ctypes.c_void_p()
    st = L.hoop_engine_create_with(ctypes.byref(eng), comm)
    if st != _lib.OK:
        sentence = (L.hoop_last_error() or b"").decode(errors="replace")
        L.hoop_comm_destroy(comm)
        raise error(st, sentence)
    s.engine, s.engine_addr = eng, eng.value
    return s


def init():
    """Join the job: rank, size and root from HOOP_* (or torchrun's,
    horovodrun's, mpirun's variables); no variables: a one-rank job."""
    global _state
    with _lock:
        if _state is not None:
            return
        L = _lib.lib()
        comm = ctypes.c_void_p()
        st = L.hoop_comm_init(ctypes.byref(comm), None)
        if st != _lib.OK:
            raise error(st, (L.hoop_last_error() or b"").decode(errors="replace"))
        _state = _over(comm)
        _names.clear()
        global _fn_allreduce_args, _fn_enqueue, _fn_wait, _fn_wait_release, _fn_test, _fn_status, _fn_release
        _fn_allreduce_args, _fn_wait, _fn_test = L.hoop_engine_allreduce_args, L.hoop_engine_wait, L.hoop_engine_test
        _fn_enqueue = L.hoop_engine_enqueue
        _fn_wait_release = L.hoop_engine_wait_release
        _fn_status, _fn_release = L.hoop_engine_status, L.hoop_engine_release


def shutdown():
    """Leave the job: every rank calls it (the first to do so stops the
    others' engines). Pending operations fail with HoopAbortedError."""
    global _state
    with _lock:
        s, _state = _state, None
        if s is None:
            return
        st = _lib.lib().hoop_engine_destroy(s.engine)
        _reap()  # what was pending has failed (aborted): every dropped handle is done
    if st != _lib.OK:
        raise error(st, (_lib.lib().hoop_last_error() or b"").decode(errors="replace"))


atexit.register(lambda: shutdown() if _state is not None else None)


def is_initialized():
    return _state is not None


def state():
    if _state is None:
        raise ValueError("hoop has not been initialized; call hoop.init() (or hoop.torch.init()) first")
    return _state


def auto_name(kind, name, g=None):
    """Horovod names unnamed operations by kind and call count; every rank
    must then call them in the same order. Counted per engine (g: a process
    set's), so that the job's names do not depend on what the sets did."""
    if name is not None:
        if not isinstance(name, str):
            raise TypeError("name must be a str, not %s" % type(name).__name__)
        return name
    names = _names if g is None else g.names
    n = names.get(kind, 0)
    names[kind] = n + 1
    return "%s.noname.%d" % (kind, n)


def split(ranks):
    """A process set's engine: every rank of the job calls it with the same
    ranks (sorted, unique); those in ranks get a _State over a communicator
    of theirs (ranked in that order), the others None. The split runs in
    the job engine's order, as its other operations do."""
    s = state()
    L = _lib.lib()
    color = 0 if s.rank in ranks else _lib.SPLIT_NONE
    h = ctypes.c_void_p()
    _check(L.hoop_engine_split(s.engine, color, s.rank, None, None, ctypes.byref(h)), "split")
    comm = []
    Handle(h, "split", [], lambda hd: comm.append(L.hoop_engine_take_comm(hd._h))).synchronize()
    if not comm[0]:
        return None
    return _over(ctypes.c_void_p(comm[0]), list(ranks))


def destroy(g):
    """Stop a process set's engine (every rank of the set calls it)."""
    if g.engine is None:
        return
    eng, g.engine, g.engine_addr = g.engine, None, 0
    st = _lib.lib().hoop_engine_destroy(eng)
    _reap()
    if st != _lib.OK:
        raise error(st, (_lib.lib().hoop_last_error() or b"").decode(errors="replace"))


# Handles dropped while their operation was in flight, each with the
# buffers the engine still reads or writes: (C handle, keep, finish). They
# are let go once the operation is done (at the next enqueue, drop or
# shutdown); freed earlier, the engine would write into memory that Python
# gave to something else. A deque: append and popleft hold no lock that a
# __del__ run by the garbage collector inside _reap could wait on.
_orphans = collections.deque()


def _reap():
    """Release the dropped handles whose operations are done."""
    L = _lib.lib()
    for _ in range(len(_orphans)):
        try:
            o = _orphans.popleft()
        except IndexError:  # another thread took the last
            return
        if L.hoop_engine_test(o[0]):
            L.hoop_engine_release(o[0])
        else:
            _orphans.append(o)


class Handle:
    """An operation in flight: poll() says whether it is done, synchronize()
    waits for it and returns its result (or raises hoop's error). Dropped
    before that, it keeps its buffers alive until the operation is done
    (as horovod.torch keeps a handle's tensors until it is synchronized)."""

    # Done once _h, the C handle, is None (released). Every gradient makes
    # one: no field it does not need.
    __slots__ = ("_h", "name", "_keep", "_finish", "_result", "_error", "__weakref__")

    def __init__(self, h, name, keep, finish, result=None):
        if _orphans:
            _reap()
        self._h = h
        self.name = name
        self._keep = keep          # buffers the engine reads or writes until completion
        self._finish = finish      # called with the handle once it succeeded: the result
        self._result = result      # the result when there is no finish
        self._error = None

    def poll(self):
        if self._h is None:
            return True
        return bool(_lib.lib().hoop_engine_test(self._h))

    def output(self, dtype_size):
        """The engine-allocated output as bytes (allgather, alltoall)."""
        n = ctypes.c_size_t()
        p = _lib.lib().hoop_engine_output(self._h, ctypes.byref(n))
        return ctypes.string_at(p, n.value * dtype_size) if p and n.value else b""

    def counts(self, size):
        arr = (ctypes.c_size_t * size)()
        st = _lib.lib().hoop_engine_counts(self._h, arr)
        if st != _lib.OK:
            raise error(st, "hoop: counts of '%s' unavailable" % self.name)
        return list(arr)

    def last_joined(self):
        return _lib.lib().hoop_engine_last_joined(self._h)

    def synchronize(self):
        h = self._h
        if h is None:
            if self._error is not None:
                raise self._error
            return self._result
        if self._finish is None and _fn_wait_release(h, 0.2) == _OK:
            # A gradient's path: one C call waits and lets the handle go.
            self._h = self._keep = None
            return self._result
        # Wait in slices, so that Python signals (Ctrl-C) get through. A
        # wait that returns OK is a success: one C call on that path; any
        # other return is a slice that ran out or a failure (test tells).
        st = _fn_wait(h, 0.2)
        while st != _OK and not _fn_test(h):
            st = _fn_wait(h, 0.2)
        try:
            if st != _OK:
                why = ctypes.c_char_p()
                st = _fn_status(h, ctypes.byref(why))
            if st != _OK:
                self._error = error(st, (why.value or b"").decode(errors="replace"))
            elif self._finish is not None:
                try:
                    self._result = self._finish(self)
                except Exception as e:  # keep it for a second synchronize()
                    self._error = e
        finally:
            _fn_release(h)
            self._h = None
            self._keep = None
            self._finish = None
        if self._error is not None:
            raise self._error
        return self._result

    wait = synchronize

    def __del__(self):
        h = self._h
        if h is None:
            return
        try:
            if _lib.lib().hoop_engine_test(h):
                _lib.lib().hoop_engine_release(h)
            else:
                _orphans.append((h, self._keep, self._finish))
        except Exception:  # the interpreter is going away
            pass


class HandleGroup:
    """Several operations behind one handle (a grouped or a sparse
    collective made of others): done once all are; synchronize() waits for
    every one (each is released, whatever the others do), then returns
    finish(their results), or raises the first error."""

    __slots__ = ("_handles", "_finish", "_done", "_result", "_error", "name", "__weakref__")

    def __init__(self, handles, finish, name):
        self._handles = list(handles)
        self._finish = finish
        self._done = False
        self._result = self._error = None
        self.name = name

    def poll(self):
        return self._done or all(h.poll() for h in self._handles)

    def synchronize(self):
        if not self._done:
            results = []
            for h in self._handles:
                try:
                    results.append(h.synchronize())
                except Exception as e:  # the others are still waited for and released
                    if self._error is None:
                        self._error = e
            self._done = True
            if self._error is None:
                try:
                    self._result = self._finish(results)
                except Exception as e:
                    self._error = e
            self._handles = self._finish = None
        if self._error is not None:
            raise self._error
        return self._result

    wait = synchronize
    # horovod.torch's sparse allreduce hands back a callable
    __call__ = synchronize


def _check(st, name):
    if st != _lib.OK:
        raise error(st, (_lib.lib().hoop_last_error() or b"").decode(errors="replace")
                    or "hoop: '%s' refused (status %d)" % (name, st))


_OK = _lib.OK
_c_void_p = ctypes.c_void_p
_byref = ctypes.byref


def _enqueue(kind, name, dtype, shape, send=None, recv=None, count=0, row_elems=0, counts=None, op=0,
             root=0, pre=1.0, post=1.0, g=None):
    """hoop_engine_enqueue: the C handle, or raises. shape: the tensor's
    (the ranks compare it; one of more than DIMS_MAX dimensions is not
    given, and the counts alone are compared). g: a process set's engine
    (None: the job's)."""
    s = g if g is not None else _state if _state is not None else state()
    try:
        a, addr = _tls.op_args
    except AttributeError:
        a = _lib.OpArgs()
        _tls.op_args = a, addr = a, ctypes.addressof(a)
    nd = len(shape)
    if nd > _lib.DIMS_MAX:
        shape, nd = (), 0
    _pack_op[nd](a, 0, _OP_ARGS_SIZE, s.engine_addr, kind, dtype, op, root, send or 0, recv or 0, count,
                 row_elems, ctypes.addressof(counts) if counts is not None else 0, pre, post, nd, 0, *shape)
    h = _fn_enqueue(addr, name.encode())
    if not h:
        _check(a.status, name)
    return h


def allreduce(name, send, recv, count, dtype, op, prescale, postscale, keep, finish, result=None, shape=None,
              g=None):
    """keep: what must live until completion; the result is finish(handle)
    when finish is given, else result. shape: the tensor's, compared across
    ranks where it is not one dimension (a rank that gives none counts as
    one dimension of count). The path every gradient takes: no work here
    that the call does not need."""
    if prescale == 1.0 and postscale == 1.0:  # a gradient's
        pre = post = 1.0
    else:
        pre, post = float(prescale), float(postscale)
    if shape is not None and len(shape) != 1:
        h = _enqueue(_KIND_ALLREDUCE, name, dtype, shape, send, recv, count, 0, None, op, 0, pre, post, g)
        return Handle(h, name, keep, finish, result)
    s = g if g is not None else _state if _state is not None else state()
    try:
        a, addr = _tls.args
    except AttributeError:
        a = _lib.AllreduceArgs()
        _tls.args = a, addr = a, ctypes.addressof(a)
    _pack_args(a, 0, _ARGS_SIZE, s.engine_addr, send or 0, recv or 0, count, dtype, op, pre, post)
    h = _fn_allreduce_args(addr, name.encode())
    if not h:
        _check(a.status, name)
    return Handle(h, name, keep, finish, result)


def grouped_allreduce(name, sends, recvs, counts, dtype, op, prescale, postscale, keep, finish,
                      result=None, g=None, shapes=None):
    """As allreduce, for a list of buffers; recvs may be sends itself (in
    place: one array for both). shapes: each tensor's, compared across the
    ranks (one of more than DIMS_MAX dimensions is compared by its count)."""
    pre, post = float(prescale), float(postscale)
    n = len(sends)
    s = (_c_void_p * n)(*sends)
    r = s if recvs is sends else (_c_void_p * n)(*recvs)
    c = (ctypes.c_size_t * n)(*counts)
    h = _c_void_p()
    eng = (g or state()).engine
    if shapes is None:
        _check(_lib.lib().hoop_engine_grouped_allreduce(eng, name.encode(), n, s, r, c, dtype, op,
                                                        pre, post, None, None, _byref(h)), name)
        return Handle(h, name, [keep, s, r, c], finish, result)
    # one pass, and the arrays through the array module: half the time of
    # ctypes arrays built from lists (18 against 37 us for 100 tensors)
    nds, flat = [], []
    for sh in shapes:
        if len(sh) <= _DIMS_MAX:
            nds.append(len(sh))
            flat += sh
        else:
            nds.append(0)
    na, fa = array.array("i", nds), array.array(_SIZE_T, flat or (0,))
    nd = (ctypes.c_int * n).from_buffer(na)
    dims = (ctypes.c_size_t * len(fa)).from_buffer(fa)
    _check(_lib.lib().hoop_engine_grouped_allreduce_shaped(eng, name.encode(), n, s, r, c, nd, dims, dtype, op,
                                                           pre, post, None, None, _byref(h)), name)
    return Handle(h, name, [keep, s, r, c], finish, result)


def allgather(name, send, shape, dtype, keep, finish, g=None):
    """shape: the tensor's, at least one dimension; rows (the first) may
    differ between ranks, the rest may not."""
    rows, row_elems = shape[0], _prod(shape[1:])
    h = _enqueue(_lib.KIND_ALLGATHER, name, dtype, shape, send, count=rows, row_elems=row_elems, g=g)
    return Handle(h, name, keep, finish)


def broadcast(name, buf, shape, dtype, root, keep, finish, g=None):
    """root: a rank of the job (of g's set: its place there is what the
    engine is given)."""
    s = g or state()
    if s.ranks is not None:
        if int(root) not in s.ranks:
            raise HoopInvalidError("hoop: broadcast '%s': root_rank %d is not in the process set of ranks %s"
                                   % (name, root, s.ranks), _lib.ERR_INVALID)
        root = s.ranks.index(int(root))
    elif not 0 <= int(root) < s.size:
        raise HoopInvalidError("hoop: broadcast '%s': root_rank %d is not a rank of this %d-rank job"
                               % (name, root, s.size), _lib.ERR_INVALID)
    h = _enqueue(_lib.KIND_BROADCAST, name, dtype, shape, recv=buf, count=_prod(shape), root=int(root), g=g)
    return Handle(h, name, keep, finish)


def alltoall(name, send, shape, splits, dtype, keep, finish, g=None):
    """splits: rows (first dimension of shape) to each rank."""
    sp = (ctypes.c_size_t * len(splits))(*splits)
    h = _enqueue(_lib.KIND_ALLTOALL, name, dtype, shape, send, row_elems=_prod(shape[1:]), counts=sp, g=g)
    return Handle(h, name, keep + [sp], finish)


def reduce_scatter(name, send, recv, shape, recvcount, dtype, op, prescale, postscale, keep, finish, g=None):
    """shape: the tensor every rank gives; recvcount: elements each gets."""
    h = _enqueue(_lib.KIND_REDUCE_SCATTER, name, dtype, shape, send, recv, recvcount, op=op,
                 pre=float(prescale), post=float(postscale), g=g)
    return Handle(h, name, keep, finish)


def reduce_scatterv(name, send, recv, shape, recvcounts, dtype, op, prescale, postscale, keep, finish,
                    g=None):
    """recvcounts: one count per rank, the same list on every rank."""
    rc = (ctypes.c_size_t * len(recvcounts))(*recvcounts)
    h = _enqueue(_lib.KIND_REDUCE_SCATTER, name, dtype, shape, send, recv, counts=rc, op=op,
                 pre=float(prescale), post=float(postscale), g=g)
    return Handle(h, name, keep + [rc], finish)


def _prod(dims):
    n = 1
    for d in dims:
        n *= int(d)
    return n


def shares(rows, n):
    """Rows of each rank when rows are split among n ranks as evenly as
    possible, the first rows % n ranks one more (Horovod's split)."""
    base, extra = divmod(rows, n)
    return [base + (1 if k < extra else 0) for k in range(n)]


def splits_of(name, rows, splits, n):
    """An alltoall's rows to each of n ranks: splits (a sequence of ints)
    checked, or rows split evenly when it is None."""
    if splits is None:
        if rows % n:
            raise HoopInvalidError("hoop: alltoall '%s': %d rows do not split evenly among %d ranks; pass "
                                   "splits" % (name, rows, n), _lib.ERR_INVALID)
        return [rows // n] * n
    sp = [int(s) for s in splits]
    if len(sp) != n or any(s < 0 for s in sp) or sum(sp) != rows:
        raise HoopInvalidError("hoop: alltoall '%s': splits %s must have %d non-negative entries summing to "
                               "the %d rows" % (name, sp, n, rows), _lib.ERR_INVALID)
    return sp


def barrier(g=None):
    h = ctypes.c_void_p()
    _check(_lib.lib().hoop_engine_barrier((g or state()).engine, None, None, ctypes.byref(h)), "barrier")
    Handle(h, "barrier", [], None).synchronize()


def join():
    """Wait until every rank has joined; returns the last rank to join."""
    h = ctypes.c_void_p()
    _check(_lib.lib().hoop_engine_join(state().engine, None, None, ctypes.byref(h)), "join")
    return Handle(h, "join", [], lambda hd: hd.last_joined()).synchronize()


class _Stats(ctypes.Structure):  # hoop_engine_stats_t
    _fields_ = [("struct_size", ctypes.c_size_t), ("cycles", ctypes.c_uint64),
                ("negotiations", ctypes.c_uint64), ("cache_hits", ctypes.c_uint64),
                ("collectives", ctypes.c_uint64), ("fused_ops", ctypes.c_uint64),
                ("ops_done", ctypes.c_uint64), ("fusion_threshold", ctypes.c_uint64),
                ("cycle_time_ms", ctypes.c_double), ("wakes", ctypes.c_uint64)]


def engine_stats():
    """What this rank's engine has done so far, and its fusion threshold
    (bytes) and cycle time (ms) now: hoop_engine_stats as a dict."""
    s = _Stats(struct_size=ctypes.sizeof(_Stats))
    _check(_lib.lib().hoop_engine_stats(state().engine, ctypes.byref(s)), "engine_stats")
    return {name: getattr(s, name) for name, _ in _Stats._fields_[1:]}


def start_timeline(file_path, mark_cycles=False):
    """Write the engine's timeline (Chrome trace-event JSON) to file_path
    from its next cycle on: rank 0's, or every rank's to file_path.<rank>
    with HOOP_TIMELINE_ALL_RANKS=1; with mark_cycles, an instant event at
    each cycle's start. A timeline already being written is ended first."""
    if not file_path:
        raise ValueError("file_path must not be empty")
    path = os.fsencode(file_path)
    _check(_lib.lib().hoop_engine_timeline_start(state().engine, path, 1 if mark_cycles else 0),
           "start_timeline")


def stop_timeline():
    """Stop writing the timeline at the engine's next cycle (the file is a
    valid JSON array at every moment)."""
    _check(_lib.lib().hoop_engine_timeline_stop(state().engine), "stop_timeline")


def not_supported(what):
    return NotImplementedError("hoop does not support %s" % what)


__all__ = ["HoopError", "Handle", "HandleGroup"]
