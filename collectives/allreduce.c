/* allreduce.c - hoop_allreduce: checks, then the ring. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

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
    if (comm->size == 1) {
        /* The reduction of one rank is its input (an average divides by 1). */
        if (sendbuf != recvbuf)
            memcpy(recvbuf, sendbuf, bytes);
        return HOOP_OK;
    }
    /* Below the threshold the ring's 2(N-1) hops in a row cost more than
     * recursive doubling's log2(N) exchanges; both give the same bits on
     * every rank. */
    if (bytes <= comm->small_bytes)
        return hoop_coll_end(comm, hoop_ring_allreduce_small(&comm->ring, sendbuf, recvbuf, count,
                                                             dtype, op, comm->timeout_s));
    return hoop_coll_end(comm, hoop_ring_allreduce(&comm->ring, sendbuf, recvbuf, count, dtype, op,
                                                   comm->timeout_s));
}
