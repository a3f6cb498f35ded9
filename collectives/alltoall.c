/* alltoall.c - hoop_alltoall: checks, then the pairwise exchange. */
#include "collectives/comm.h"
#include "common/status.h"
#include "gpu/gpu.h"

/* Device buffers: the pairwise exchange runs over the pinned host copies
 * of both, staged whole. */
static hoop_status_t alltoall_on_gpu(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, hoop_dtype_t dtype, size_t bytes)
{
    static const char name[] = "alltoall";
    struct hoop_ring *r = &comm->ring;
    void *in, *out;
    hoop_status_t st;
    if ((st = hoop_ring_stage_in(r, HOOP_GPU_HOST_IN, sendbuf, bytes, &in, name)) ||
        (st = hoop_ring_stage_in(r, HOOP_GPU_HOST_OUT, NULL, bytes, &out, name)) ||
        (st = hoop_ring_alltoall(r, in, out, count, dtype, comm->timeout_s)))
        return st;
    return hoop_ring_device_copy(r, recvbuf, out, bytes, name);
}

hoop_status_t hoop_alltoall(hoop_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                            hoop_dtype_t dtype)
{
    static const char name[] = "alltoall";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) ||
        (st = hoop_coll_check_type(comm, name, dtype, 0, 0)) ||
        (st = hoop_coll_check_count(comm, name, count, (size_t)comm->size, dtype)))
        return st;
    size_t bytes = count * hoop_dtype_size(dtype) * (size_t)comm->size;
    /* No in-place form: a block would be overwritten before it is sent. */
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, bytes, recvbuf, bytes, 0)))
        return st;
    if (!count && comm->size > 1) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_ALLTOALL, dtype, -1, -1,
                                                   0, comm->timeout_s));
    if (comm->size == 1)
        return hoop_coll_end(comm, hoop_coll_copy(comm, name, recvbuf, sendbuf, bytes));
    if (comm->ring.on_gpu)
        return hoop_coll_end(comm, alltoall_on_gpu(comm, sendbuf, recvbuf, count, dtype, bytes));
    return hoop_coll_end(comm, hoop_ring_alltoall(&comm->ring, sendbuf, recvbuf, count, dtype,
                                                  comm->timeout_s));
}
