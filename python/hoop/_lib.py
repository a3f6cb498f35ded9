"""Finding and loading libhoop, its C prototypes, and hoop's errors.

The library is found, first match wins, at
  1. $HOOP_LIBRARY (a path to libhoop.so),
  2. the build/ directory of the source tree this package lies in
     (python/hoop/ -> ../../build/libhoop.so),
  3. an installed prefix: the lib directory beside an installed package
     (<prefix>/lib/python3/dist-packages/hoop -> <prefix>/lib), then
     ctypes.util.find_library("hoop") and the usual lib directories.
"""
import ctypes
import ctypes.util
import os
import struct

_HERE = os.path.dirname(os.path.abspath(__file__))

OK, ERR_INVALID, ERR_TIMEOUT, ERR_PEER, ERR_MISMATCH, ERR_UNSUPPORTED, ERR_SYSTEM, ERR_ABORTED = range(8)

# hoop_dtype_t
I8, U8, I32, U32, I64, U64, F16, BF16, F32, F64, I16, U16 = range(12)
DTYPE_SIZE = {I8: 1, U8: 1, I32: 4, U32: 4, I64: 8, U64: 8, F16: 2, BF16: 2, F32: 4, F64: 8, I16: 2, U16: 2}
# hoop_op_t
SUM, PROD, MIN, MAX, AVG = range(5)


class HoopError(RuntimeError):
    """A hoop operation failed; str() is hoop's sentence, .status its status."""

    status = None

    def __init__(self, sentence, status=None):
        super().__init__(sentence)
        if status is not None:
            self.status = status


class HoopInvalidError(HoopError, ValueError):
    """Bad argument or configuration (HOOP_ERR_INVALID)."""
    status = ERR_INVALID


class HoopTimeoutError(HoopError):
    """A deadline passed (HOOP_ERR_TIMEOUT)."""
    status = ERR_TIMEOUT


class HoopPeerError(HoopError):
    """A peer closed, died, or broke the protocol (HOOP_ERR_PEER)."""
    status = ERR_PEER


class HoopMismatchError(HoopError):
    """Ranks enqueued different things under one name (HOOP_ERR_MISMATCH)."""
    status = ERR_MISMATCH


class HoopUnsupportedError(HoopError):
    """The machine cannot do what was asked (HOOP_ERR_UNSUPPORTED)."""
    status = ERR_UNSUPPORTED


class HoopSystemError(HoopError):
    """A system call or allocation failed (HOOP_ERR_SYSTEM)."""
    status = ERR_SYSTEM


class HoopAbortedError(HoopError):
    """The job was aborted or shut down (HOOP_ERR_ABORTED)."""
    status = ERR_ABORTED


_ERRORS = {ERR_INVALID: HoopInvalidError, ERR_TIMEOUT: HoopTimeoutError, ERR_PEER: HoopPeerError,
           ERR_MISMATCH: HoopMismatchError, ERR_UNSUPPORTED: HoopUnsupportedError,
           ERR_SYSTEM: HoopSystemError, ERR_ABORTED: HoopAbortedError}


def error(status, sentence):
    """The exception for a hoop status and its sentence."""
    cls = _ERRORS.get(status, HoopError)
    if not sentence:
        sentence = "hoop failed with status %d" % status
    return cls(sentence, status)


def _candidates():
    env = os.environ.get("HOOP_LIBRARY")
    if env:
        return [env], True
    paths = [os.path.join(_HERE, "..", "..", "build", "libhoop.so")]
    # <prefix>/lib/python3/dist-packages/hoop -> <prefix>/lib
    paths.append(os.path.join(_HERE, "..", "..", "..", "libhoop.so.0"))
    found = ctypes.util.find_library("hoop")
    if found:
        paths.append(found)
    for d in ("/usr/local/lib", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
              "/usr/local/lib64", "/usr/lib64"):
        paths.append(os.path.join(d, "libhoop.so.0"))
    return paths, False


_lib = None
_lib_path = None


def library_path():
    """The path of the libhoop that was loaded (loading it if needed)."""
    lib()
    return _lib_path


def lib():
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    paths, from_env = _candidates()
    tried = []
    for p in paths:
        if not from_env and not os.path.exists(p) and os.sep in p:
            tried.append(p + " (absent)")
            continue
        try:
            handle = ctypes.CDLL(p)
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
            continue
        _lib_path = os.path.realpath(p) if os.path.exists(p) else p
        _prototypes(handle)
        _lib = handle
        return _lib
    raise ImportError("hoop: cannot load libhoop.so; tried: %s. Build it (make) or set HOOP_LIBRARY "
                      "to its path" % "; ".join(tried))


class AllreduceArgs(ctypes.Structure):
    """hoop_engine_allreduce_args_t: an allreduce's arguments in one struct,
    so that a gradient's enqueue converts two arguments, not twelve."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("engine", ctypes.c_void_p), ("sendbuf", ctypes.c_void_p),
                ("recvbuf", ctypes.c_void_p), ("count", ctypes.c_size_t), ("dtype", ctypes.c_int32),
                ("op", ctypes.c_int32), ("prescale", ctypes.c_double), ("postscale", ctypes.c_double),
                ("status", ctypes.c_int32)]


# The fields before status, packed in one call (struct.pack_into) into an
# AllreduceArgs: the layout checked against ctypes' own.
ALLREDUCE_ARGS_PACK = struct.Struct("@NPPPNiidd")
if ALLREDUCE_ARGS_PACK.size != AllreduceArgs.status.offset:
    raise ImportError("hoop: hoop_engine_allreduce_args_t's fields pack to %d bytes before status, where "
                      "ctypes places status at %d" % (ALLREDUCE_ARGS_PACK.size, AllreduceArgs.status.offset))


class OpArgs(ctypes.Structure):
    """hoop_engine_op_args_t: an operation of any kind but a group, with the
    shape of its tensor, which the ranks compare (hoop_engine_enqueue)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("engine", ctypes.c_void_p), ("kind", ctypes.c_int32),
                ("dtype", ctypes.c_int32), ("op", ctypes.c_int32), ("root", ctypes.c_int32),
                ("sendbuf", ctypes.c_void_p), ("recvbuf", ctypes.c_void_p), ("count", ctypes.c_size_t),
                ("row_elems", ctypes.c_size_t), ("counts", ctypes.c_void_p), ("prescale", ctypes.c_double),
                ("postscale", ctypes.c_double), ("ndims", ctypes.c_int32), ("status", ctypes.c_int32),
                ("dims", ctypes.c_int64 * 8)]


# hoop_engine_kind_t
KIND_ALLREDUCE, KIND_ALLGATHER, KIND_BROADCAST, KIND_ALLTOALL, KIND_REDUCE_SCATTER = 1, 2, 3, 4, 5
SPLIT_NONE = -1  # hoop_comm_split: join no group
DIMS_MAX = 8

# The fields up to the dimensions, then ndims of them, packed in one call
# into an OpArgs (status packed as 0): the layout checked against ctypes'.
OP_ARGS_PACK = [struct.Struct("@NPiiiiPPNNPddii%dq" % n) for n in range(DIMS_MAX + 1)]
if OP_ARGS_PACK[0].size != OpArgs.dims.offset or OP_ARGS_PACK[1].size != OpArgs.dims.offset + 8:
    raise ImportError("hoop: hoop_engine_op_args_t's fields pack to %d bytes before dims, where ctypes "
                      "places dims at %d" % (OP_ARGS_PACK[0].size, OpArgs.dims.offset))


def _prototypes(L):
    c_int, c_size_t, c_double, c_char_p, c_void_p = (ctypes.c_int, ctypes.c_size_t, ctypes.c_double,
                                                      ctypes.c_char_p, ctypes.c_void_p)
    P = ctypes.POINTER
    sig = {
        "hoop_comm_init": (c_int, [P(c_void_p), c_void_p]),
        "hoop_comm_destroy": (c_int, [c_void_p]),
        "hoop_comm_rank": (c_int, [c_void_p]),
        "hoop_comm_size": (c_int, [c_void_p]),
        "hoop_comm_local_rank": (c_int, [c_void_p]),
        "hoop_comm_local_size": (c_int, [c_void_p]),
        "hoop_comm_cross_rank": (c_int, [c_void_p]),
        "hoop_comm_cross_size": (c_int, [c_void_p]),
        "hoop_comm_is_homogeneous": (c_int, [c_void_p]),
        "hoop_comm_transport": (c_char_p, [c_void_p]),
        "hoop_last_error": (c_char_p, []),
        "hoop_status_str": (c_char_p, [c_int]),
        "hoop_cuda_built": (c_int, []),
        "hoop_engine_create_with": (c_int, [P(c_void_p), c_void_p]),
        "hoop_engine_destroy": (c_int, [c_void_p]),
        "hoop_engine_allreduce": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                                          c_double, c_double, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_allreduce_args": (c_void_p, [c_void_p, c_char_p]),
        "hoop_engine_enqueue": (c_void_p, [c_void_p, c_char_p]),
        "hoop_engine_grouped_allreduce": (c_int, [c_void_p, c_char_p, c_int, P(c_void_p), P(c_void_p),
                                                  P(c_size_t), c_int, c_int, c_double, c_double, c_void_p,
                                                  c_void_p, P(c_void_p)]),
        "hoop_engine_grouped_allreduce_shaped": (c_int, [c_void_p, c_char_p, c_int, P(c_void_p), P(c_void_p),
                                                         P(c_size_t), P(c_int), P(c_size_t), c_int, c_int,
                                                         c_double, c_double, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_allgather": (c_int, [c_void_p, c_char_p, c_void_p, c_size_t, c_size_t, c_int, c_void_p,
                                          c_void_p, P(c_void_p)]),
        "hoop_engine_broadcast": (c_int, [c_void_p, c_char_p, c_void_p, c_size_t, c_int, c_int, c_void_p,
                                          c_void_p, P(c_void_p)]),
        "hoop_engine_alltoall": (c_int, [c_void_p, c_char_p, c_void_p, P(c_size_t), c_int, c_void_p, c_void_p,
                                         P(c_void_p)]),
        "hoop_engine_reduce_scatter": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                                               c_double, c_double, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_reduce_scatterv": (c_int, [c_void_p, c_char_p, c_void_p, c_void_p, P(c_size_t), c_int,
                                                c_int, c_double, c_double, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_barrier": (c_int, [c_void_p, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_join": (c_int, [c_void_p, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_split": (c_int, [c_void_p, c_int, c_int, c_void_p, c_void_p, P(c_void_p)]),
        "hoop_engine_take_comm": (c_void_p, [c_void_p]),
        "hoop_engine_test": (c_int, [c_void_p]),
        "hoop_engine_wait": (c_int, [c_void_p, c_double]),
        "hoop_engine_wait_release": (c_int, [c_void_p, c_double]),
        "hoop_engine_status": (c_int, [c_void_p, P(c_char_p)]),
        "hoop_engine_output": (c_void_p, [c_void_p, P(c_size_t)]),
        "hoop_engine_counts": (c_int, [c_void_p, P(c_size_t)]),
        "hoop_engine_last_joined": (c_int, [c_void_p]),
        "hoop_engine_release": (None, [c_void_p]),
        "hoop_engine_timeline_start": (c_int, [c_void_p, c_char_p, c_int]),
        "hoop_engine_timeline_stop": (c_int, [c_void_p]),
        "hoop_engine_stats": (c_int, [c_void_p, c_void_p]),
    }
    for name, (res, args) in sig.items():
        f = getattr(L, name)
        f.restype = res
        f.argtypes = args
