/* allreduce.c - hoop_allreduce: checks, then the ring. */
#include "collectives/comm.h"
#include "collectives/mem.h"
#include "common/status.h"
#include "gpu/gpu.h"

/* Recursive doubling on device buffers: the buffer is small (at most a
 * chunk), so it is staged whole through pinned host memory. */
static hoop_status_t small_on_gpu(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, hoop_dtype_t dtype, hoop_op_t op, size_t bytes,
                                  int hier)
{
    static const char name[] = "allreduce";
    struct hoop_ring *r = &comm->ring;
    void *in, *out;
    hoop_status_t st;
    if ((st = hoop_ring_stage_in(r, HOOP_GPU_HOST_IN, sendbuf, bytes, &in, name)) ||
        (st = hoop_ring_stage_in(r, HOOP_GPU_HOST_OUT, NULL, bytes, &out, name)) ||
        (st = hoop_ring_allreduce_small(r, in, out, count, dtype, op, hier, comm->timeout_s)))
        return st;
    return hoop_ring_device_copy(r, recvbuf, out, bytes, name);
}

hoop_status_t hoop_allreduce(hoop_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             hoop_dtype_t dtype, hoop_op_t op)
{
    static const char name[] = "allreduce";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) || (st = hoop_coll_check_type(comm, name, dtype, 1, op)) ||
        (st = hoop_coll_check_count(comm, name, count, 1, dtype)))
        return st;
    size_t bytes = count * hoop_dtype_size(dtype);
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, bytes, recvbuf, bytes,
                                   sendbuf == recvbuf)))
        return st;
    if (!count && comm->size > 1) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_ALLREDUCE, dtype, op, -1,
                                                   0, comm->timeout_s));
    if (comm->size == 1) /* the reduction of one rank is its input (an average divides by 1) */
        return hoop_coll_end(comm, hoop_coll_copy(comm, name, recvbuf, sendbuf, bytes));
    /* Below the threshold the ring's 2(N-1) hops in a row cost more than
     * recursive doubling's log2(N) exchanges; both give the same bits on
     * every rank. */
    int hier_small = comm->hier && bytes >= comm->hier_small;
    if (bytes <= comm->small_bytes && comm->ring.on_gpu)
        return hoop_coll_end(comm, small_on_gpu(comm, sendbuf, recvbuf, count, dtype, op, bytes,
                                                hier_small));
    if (bytes <= comm->small_bytes)
        return hoop_coll_end(comm, hoop_ring_allreduce_small(&comm->ring, sendbuf, recvbuf, count,
                                                             dtype, op, hier_small,
                                                             comm->timeout_s));
    /* Memory every rank maps (hoop_mem_alloc): read and written in place,
     * where every rank's buffers lie in it. */
    if (comm->mem && hoop_mem_allreduce(comm, sendbuf, recvbuf, count, dtype, op, &st))
        return hoop_coll_end(comm, st);
    /* Every segment of the hierarchical path holds an element on every
     * rank; the ranks decide alike, since all know every count. */
    if (comm->hier && count >= (size_t)comm->size)
        return hoop_coll_end(comm, hoop_ring_allreduce_hier(&comm->ring, sendbuf, recvbuf, count,
                                                            dtype, op, comm->timeout_s));
    return hoop_coll_end(comm, hoop_ring_allreduce(&comm->ring, sendbuf, recvbuf, count, dtype, op,
                                                   comm->timeout_s));
}
