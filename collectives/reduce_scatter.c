/* reduce_scatter.c - hoop_reduce_scatter: checks, then the ring. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

hoop_status_t hoop_reduce_scatter(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                  size_t recvcount, hoop_dtype_t dtype, hoop_op_t op)
{
    static const char name[] = "reduce_scatter";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) || (st = hoop_coll_check_type(comm, name, dtype, 1, op)) ||
        (st = hoop_coll_check_count(comm, name, recvcount, (size_t)comm->size, dtype)))
        return st;
    size_t bytes = recvcount * hoop_dtype_size(dtype);
    int in_place = sendbuf && (uintptr_t)recvbuf == (uintptr_t)sendbuf + (size_t)comm->rank * bytes;
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, bytes * (size_t)comm->size, recvbuf, bytes,
                                   in_place)))
        return st;
    if (!recvcount && comm->size > 1) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_REDUCE_SCATTER, dtype,
                                                   op, -1, 0, comm->timeout_s));
    if (comm->size == 1)
        return hoop_coll_end(comm, hoop_coll_copy(comm, name, recvbuf, sendbuf, bytes));
    return hoop_coll_end(comm, hoop_ring_reduce_scatter(&comm->ring, sendbuf, recvbuf, recvcount,
                                                        dtype, op, comm->timeout_s));
}
