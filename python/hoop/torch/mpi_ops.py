"""horovod.torch's collectives over hoop's engine, on torch tensors.

CPU tensors are handed to hoop in place when contiguous. CUDA tensors: the
tensor's current stream is synchronized first (hoop.h's contract); where
libhoop is built with CUDA, allreduces (grouped or not) hand hoop the
device memory itself, which it moves through its own pinned buffers and
reduces on the GPU; the other collectives, and every one where libhoop has
no CUDA, go through a copy on the CPU.
"""
import torch

from .. import _engine, _lib, check_op
from .. import Average, Sum, Min, Max, Product, Adasum  # noqa: F401 (re-exported)
from .._engine import Handle, HandleGroup
from ..process_sets import group_of, state_of

_DTYPES = {torch.int8: _lib.I8, torch.uint8: _lib.U8, torch.int16: _lib.I16, torch.int32: _lib.I32,
           torch.int64: _lib.I64,
           torch.float16: _lib.F16, torch.bfloat16: _lib.BF16, torch.float32: _lib.F32,
           torch.float64: _lib.F64}


def _dtype(t, what):
    dt = _DTYPES.get(t.dtype)
    if dt is None:
        raise TypeError("hoop: %s: tensor dtype %s is not one hoop reduces (uint8, int8, int16, int32, "
                        "int64, float16, bfloat16, float32, float64)" % (what, t.dtype))
    return dt


def _host(t):
    """A contiguous CPU tensor with t's values (t itself when it can be)."""
    t = t.detach()
    if t.device.type != "cpu":
        if t.is_cuda:
            torch.cuda.current_stream(t.device).synchronize()
        return t.to("cpu").contiguous()
    return t if t.is_contiguous() else t.contiguous()


_CUDA_BUILT = None


def _device_ok(t):
    """t itself (contiguous, its stream synchronized) where hoop takes its
    device memory, else a CPU copy (_host)."""
    global _CUDA_BUILT
    if t.is_cuda:
        if _CUDA_BUILT is None:
            _CUDA_BUILT = bool(_lib.lib().hoop_cuda_built())
        if _CUDA_BUILT:
            t = t.detach()
            t = t if t.is_contiguous() else t.contiguous()
            torch.cuda.current_stream(t.device).synchronize()
            return t
    return _host(t)


def _ptr(t):
    return t.data_ptr() if t.numel() else None


_OPS = (Average, Sum, Min, Max, Product)


def _op(average, op):
    if average is None and op in _OPS:
        return op
    if average is not None:
        if op is not None:
            raise ValueError("hoop: give op or the deprecated average, not both")
        return Average if average else Sum
    return check_op(Average if op is None else op)


def _write_back(tensor, buf):
    if buf.data_ptr() != tensor.data_ptr() or buf.device != tensor.device:
        tensor.data.copy_(buf.view(tensor.shape))
    return tensor


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=None):
    g = None if process_set is None else group_of(process_set)
    op = Average if op is None and average is None else _op(average, op)
    if name.__class__ is not str:
        name = _engine.auto_name("allreduce", name, g)
    dt = _DTYPES.get(tensor.dtype)
    if dt is None:
        _dtype(tensor, "allreduce '%s'" % name)  # raises
    if tensor.is_cpu and tensor.is_contiguous():
        # The common case (every gradient of a CPU model): hoop reduces the
        # tensor's own memory, the result is the tensor; no copy, no view.
        n = tensor.numel()
        p = tensor.data_ptr() if n else None
        return _engine.allreduce(name, p, p, n, dt, op, prescale_factor, postscale_factor, tensor, None,
                                 tensor, tensor.shape, g)
    buf = _device_ok(tensor)
    return _engine.allreduce(name, _ptr(buf), _ptr(buf), buf.numel(), dt, op, prescale_factor,
                             postscale_factor, [buf, tensor], lambda h: _write_back(tensor, buf),
                             shape=tensor.shape, g=g)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=None):
    return allreduce_async_(tensor.detach().clone(), average, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=None):
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                            process_set).synchronize()


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.ps = op, prescale, postscale, process_set
        return allreduce_async(tensor, name=name, op=op, prescale_factor=prescale,
                               postscale_factor=postscale, process_set=process_set).synchronize()

    @staticmethod
    def backward(ctx, grad):
        g = allreduce_async(grad, op=ctx.op, prescale_factor=ctx.prescale,
                            postscale_factor=ctx.postscale, process_set=ctx.ps).synchronize()
        return g, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """The reduction of tensor over every rank (op: Average by default), as a
    new tensor; differentiable (the gradient is allreduced with the same op)."""
    from .compression import Compression
    op = _op(average, op)
    compression = compression or Compression.none
    t, ctx = compression.compress(tensor)
    out = _AllreduceFn.apply(t, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    g = None if process_set is None else group_of(process_set)
    op = _op(average, op)
    if name.__class__ is not str:
        name = _engine.auto_name("grouped_allreduce", name, g)
    tensors = list(tensors)
    if not tensors:
        raise ValueError("hoop: grouped allreduce '%s' of no tensors" % name)
    dt = _DTYPES.get(tensors[0].dtype)
    ptrs, counts, bufs, copied = [], [], [], []
    for t in tensors:
        if dt is None or _DTYPES.get(t.dtype) != dt:
            _dtype(t, "grouped allreduce '%s'" % name)  # raises on a dtype hoop lacks
            _dtype(tensors[0], "grouped allreduce '%s'" % name)
            raise TypeError("hoop: grouped allreduce '%s': every tensor must have one dtype" % name)
        # As allreduce_async_: a contiguous CPU tensor is reduced in its
        # own memory, with nothing to copy back.
        b = t if t.is_cpu and t.is_contiguous() else _device_ok(t)
        if b is not t:
            copied.append((t, b))
        n = b.numel()
        ptrs.append(b.data_ptr() if n else None)
        counts.append(n)
        bufs.append(b)
    if not copied:
        return _engine.grouped_allreduce(name, ptrs, ptrs, counts, dt, op, prescale_factor,
                                         postscale_factor, bufs, None, tensors, g, [t.shape for t in tensors])

    def finish(h):
        for t, b in copied:
            _write_back(t, b)
        return tensors
    return _engine.grouped_allreduce(name, ptrs, ptrs, counts, dt, op, prescale_factor,
                                     postscale_factor, bufs + tensors, finish, g=g,
                                     shapes=[t.shape for t in tensors])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    return grouped_allreduce_async_([t.detach().clone() for t in tensors], average, name, op,
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=None):
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                    process_set).synchronize()


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.ps = op, prescale, postscale, process_set
        return tuple(grouped_allreduce_async(list(tensors), name=name, op=op, prescale_factor=prescale,
                                             postscale_factor=postscale, process_set=process_set).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        gs = grouped_allreduce_async([g.contiguous() for g in grads], op=ctx.op, prescale_factor=ctx.prescale,
                                     postscale_factor=ctx.postscale, process_set=ctx.ps).synchronize()
        return (None, None, None, None, None) + tuple(gs)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    """grouped_allreduce_async's results, as new tensors; differentiable
    (as allreduce: the gradients are reduced together with the same op)."""
    from .compression import Compression
    op = _op(average, op)
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                     *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def _rows(t):
    if t.dim() == 0:
        t = t.reshape(1)
    rows = t.shape[0]
    row_elems = 1
    for d in t.shape[1:]:
        row_elems *= d
    return t, rows, row_elems


def _from_bytes(data, like, shape):
    out = torch.frombuffer(bytearray(data), dtype=like.dtype) if data else torch.empty(0, dtype=like.dtype)
    return out.reshape(shape).to(like.device)


def _allgather_async(tensor, name, process_set, with_counts):
    g = group_of(process_set)
    name = _engine.auto_name("allgather", name, g)
    dt = _dtype(tensor, "allgather '%s'" % name)
    buf = _rows(_host(tensor))[0]
    n = state_of(g).size

    def finish(h):
        counts = h.counts(n)
        out = _from_bytes(h.output(buf.element_size()), tensor, (sum(counts),) + tuple(buf.shape[1:]))
        return (out, counts) if with_counts else out
    return _engine.allgather(name, _ptr(buf), buf.shape, dt, [buf], finish, g)


def allgather_async(tensor, name=None, process_set=None):
    return _allgather_async(tensor, name, process_set, False)


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out, counts = _allgather_async(tensor, name, process_set, True).synchronize()
        r = state_of(group_of(process_set)).rank
        ctx.start, ctx.rows, ctx.ps = sum(counts[:r]), counts[r], process_set
        return out

    @staticmethod
    def backward(ctx, grad):
        # this rank's rows of the average of every rank's gradient (horovod.torch's)
        g = allreduce_async(grad.contiguous(), op=Average, process_set=ctx.ps).synchronize()
        return g.narrow(0, ctx.start, ctx.rows), None, None


def allgather(tensor, name=None, process_set=None):
    """Every rank's tensor concatenated along the first dimension, rank 0's
    first (the first dimension may differ between ranks); differentiable."""
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=None):
    """Each tensor's allgather, started together; synchronize() gives the
    list of results."""
    name = _engine.auto_name("grouped_allgather", name, group_of(process_set))
    hs = [_allgather_async(t, "%s.%d" % (name, i), process_set, False) for i, t in enumerate(tensors)]
    return HandleGroup(hs, list, name)


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        hs = [_allgather_async(t, "%s.%d" % (name, i), process_set, True) for i, t in enumerate(tensors)]
        outs = HandleGroup(hs, list, name).synchronize()
        r = state_of(group_of(process_set)).rank
        ctx.spans, ctx.ps = [(sum(counts[:r]), counts[r]) for _, counts in outs], process_set
        return tuple(out for out, _ in outs)

    @staticmethod
    def backward(ctx, *grads):
        # as allgather's: this rank's rows of the average of every rank's gradient
        hs = [allreduce_async(g.contiguous(), op=Average, process_set=ctx.ps) for g in grads]
        return (None, None) + tuple(h.synchronize().narrow(0, s, n) for h, (s, n) in zip(hs, ctx.spans))


def grouped_allgather(tensors, name=None, process_set=None):
    """allgather of each tensor, started together; differentiable."""
    name = _engine.auto_name("grouped_allgather", name, group_of(process_set))
    return list(_GroupedAllgatherFn.apply(name, process_set,
                                          *[t.reshape(1) if t.dim() == 0 else t for t in tensors]))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    g = group_of(process_set)
    name = _engine.auto_name("broadcast", name, g)
    dt = _dtype(tensor, "broadcast '%s'" % name)
    buf = _host(tensor)
    return _engine.broadcast(name, _ptr(buf), tensor.shape, dt, root_rank, [buf, tensor],
                             lambda h: _write_back(tensor, buf), g)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor.detach().clone(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor, root_rank, name, process_set).synchronize()


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.ps = root_rank, process_set
        return broadcast_async(tensor, root_rank, name, process_set).synchronize()

    @staticmethod
    def backward(ctx, grad):
        # the root's tensor gets the average of every rank's gradient, the
        # others none (horovod.torch's)
        g = allreduce_async(grad.contiguous(), op=Average, process_set=ctx.ps).synchronize()
        if _engine.state().rank != ctx.root_rank:
            g.zero_()
        return g, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor, as a new tensor on every rank; differentiable."""
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    g = group_of(process_set)
    name = _engine.auto_name("alltoall", name, g)
    dt = _dtype(tensor, "alltoall '%s'" % name)
    buf, rows, row_elems = _rows(_host(tensor))
    n = state_of(g).size
    sp = _engine.splits_of(name, rows, splits.tolist() if torch.is_tensor(splits) else splits, n)

    def finish(h):
        recv = [c // row_elems if row_elems else 0 for c in h.counts(n)]
        out = _from_bytes(h.output(buf.element_size()), tensor, (sum(recv),) + tuple(buf.shape[1:]))
        # on the splits tensor's device, as horovod.torch (the CPU without one)
        return out, torch.tensor(recv, dtype=torch.int32,
                                 device=splits.device if torch.is_tensor(splits) else "cpu")
    return _engine.alltoall(name, _ptr(buf), buf.shape, sp, dt, [buf], finish, g)


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, recv = alltoall_async(tensor, splits, name, process_set).synchronize()
        ctx.recv, ctx.shape, ctx.ps = recv, tensor.shape, process_set
        ctx.mark_non_differentiable(recv)
        return out, recv

    @staticmethod
    def backward(ctx, grad, *ignored):
        # each row's gradient goes back to the rank that sent the row
        g, _ = alltoall_async(grad.contiguous(), ctx.recv, process_set=ctx.ps).synchronize()
        return g.reshape(ctx.shape), None, None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Rows splits[j] (first dimension; equal shares when None) go to rank j.
    Returns what every rank sent here, in rank order, and, when splits was
    given, how many rows came from each rank; differentiable (the gradient
    goes back the way the rows came)."""
    out, recv = _AlltoallFn.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, recv)


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    g = group_of(process_set)
    check_op(op)
    name = _engine.auto_name("reducescatter", name, g)
    dt = _dtype(tensor, "reducescatter '%s'" % name)
    if tensor.dim() == 0:
        raise _lib.HoopInvalidError("hoop: reducescatter '%s': a scalar has no first dimension to scatter "
                                    "over the ranks; pass a tensor of at least one dimension" % name,
                                    _lib.ERR_INVALID)
    buf, rows, row_elems = _rows(_host(tensor))
    s = state_of(g)
    n, r = s.size, s.rank
    if rows % n == 0:
        out = torch.empty((rows // n,) + tuple(buf.shape[1:]), dtype=buf.dtype)
        return _engine.reduce_scatter(name, _ptr(buf), _ptr(out), buf.shape, out.numel(), dt, op,
                                      prescale_factor, postscale_factor, [buf, out],
                                      lambda h: out.to(tensor.device), g)
    # Uneven shares (the first rows % size ranks one row more, as Horovod
    # splits): each rank gets its rows only (reduce_scatterv).
    rows_of = _engine.shares(rows, n)
    out = torch.empty((rows_of[r],) + tuple(buf.shape[1:]), dtype=buf.dtype)
    return _engine.reduce_scatterv(name, _ptr(buf), _ptr(out), buf.shape, [k * row_elems for k in rows_of],
                                   dt, op, prescale_factor, postscale_factor, [buf, out],
                                   lambda h: out.to(tensor.device), g)


def _reducescatter_grads(ctx, grads):
    """What horovod.torch's reducescatter gives back: each rank's gradient
    scaled (by the ranks for Sum, by the scale factors), every rank's
    gathered."""
    n = state_of(group_of(ctx.ps)).size
    scaled = []
    for g in grads:
        if ctx.op == Sum:
            g = g * n
        if ctx.prescale != 1.0:
            g = g * ctx.prescale
        if ctx.postscale != 1.0:
            g = g * ctx.postscale
        scaled.append(g.contiguous())
    hs = [_allgather_async(g, None, ctx.ps, False) for g in scaled]
    return [h.synchronize() for h in hs]


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.op, ctx.prescale, ctx.postscale, ctx.ps = op, prescale, postscale, process_set
        return reducescatter_async(tensor, name, op, process_set, prescale_factor=prescale,
                                   postscale_factor=postscale).synchronize()

    @staticmethod
    def backward(ctx, grad):
        return _reducescatter_grads(ctx, [grad])[0], None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=None, prescale_factor=1.0,
                  postscale_factor=1.0):
    """This rank's share of the reduction; differentiable (horovod.torch's
    gradient: every rank's, scaled, gathered)."""
    from .compression import Compression
    check_op(op)
    compression = compression or Compression.none
    t, ctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(t, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Each tensor's reducescatter, started together; synchronize() gives
    the list of this rank's shares."""
    name = _engine.auto_name("grouped_reducescatter", name, group_of(process_set))
    tensors = list(tensors)
    for i, t in enumerate(tensors):  # refused before any is enqueued
        if t.dim() == 0:
            raise _lib.HoopInvalidError("hoop: grouped reducescatter '%s': tensor %d is a scalar, with no first "
                                        "dimension to scatter over the ranks" % (name, i), _lib.ERR_INVALID)
    hs = [reducescatter_async(t, "%s.%d" % (name, i), op, process_set, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor)
          for i, t in enumerate(tensors)]
    return HandleGroup(hs, list, name)


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.op, ctx.prescale, ctx.postscale, ctx.ps = op, prescale, postscale, process_set
        return tuple(grouped_reducescatter_async(list(tensors), name, op, process_set, prescale_factor=prescale,
                                                 postscale_factor=postscale).synchronize())

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, None, None) + tuple(_reducescatter_grads(ctx, grads))


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of each tensor, started together; differentiable."""
    from .compression import Compression
    check_op(op)
    compression = compression or Compression.none
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                         *[t for t, _ in pairs])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=None):
    """A sparse COO tensor's allreduce, as horovod.torch computes it: every
    rank's entries (indices and values) gathered into one sparse tensor
    (entries at one index add up when it is coalesced), the values divided
    by the number of ranks for Average. Only Sum and Average: the others do
    not survive the gathering. The handle is also callable, as Horovod's.

    One allgather under the name itself, each entry a row of bytes (its
    indices, then its values): a rank that enqueues something else under
    that name (a dense allreduce of a gradient that is missing there) is
    told so, as every other rank is, instead of a second gather waiting for
    it forever."""
    g = group_of(process_set)
    if op not in (Average, Sum):
        raise _engine.not_supported("a sparse allreduce with op %s (Sum and Average only)" % op)
    if not tensor.is_sparse:
        raise ValueError("hoop: sparse_allreduce_async takes a sparse COO tensor, not %s" % tensor.layout)
    name = _engine.auto_name("sparse_allreduce", name, g)
    t = tensor.detach()
    idx, val = t._indices().t(), t._values()
    nnz, ndim, dense = idx.shape[0], idx.shape[1], tuple(val.shape[1:])
    iw = ndim * idx.element_size()
    vw = val.element_size()
    for d in dense:
        vw *= d
    # flat first (a copy where the layout asks): a dimension of one may keep
    # any stride, which a view as bytes refuses
    rows = torch.cat([idx.reshape(-1).view(torch.uint8).reshape(nnz, iw),
                      val.reshape(-1).view(torch.uint8).reshape(nnz, vw)], dim=1)
    n = state_of(g).size

    def finish(gathered):
        total = gathered.shape[0]
        # flat first: a column slice may keep its row stride (one row)
        indices = gathered[:, :iw].reshape(-1).view(idx.dtype).reshape(total, ndim).t()
        values = gathered[:, iw:].reshape(-1).view(val.dtype).reshape((total,) + dense)
        if op == Average:
            values = values / n
        return torch.sparse_coo_tensor(indices, values, t.size(), dtype=values.dtype, device=t.device)
    return HandleGroup([_allgather_async(rows, name, process_set, False)], lambda r: finish(r[0]), name)


def poll(handle):
    """True once the operation behind handle has completed."""
    return handle.poll()


def synchronize(handle):
    """Wait for handle's operation; its result, or hoop's error raised."""
    return handle.synchronize()


def join(device=-1):
    """This rank has no more data: take part in the others' allreduces with
    zeros until every rank has joined. Returns the last rank to join."""
    return _engine.join()


def barrier(process_set=None):
    _engine.barrier(group_of(process_set))


__all__ = ["Handle"]
