/* allreduce.c - hoop_allreduce: checks, then the ring. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

hoop_status_t hoop_allreduce(hoop_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             hoop_dtype_t dtype, hoop_op_t op)
{
    hoop_status_t st = hoop_coll_check(comm, "allreduce", sendbuf, recvbuf, count, (int)dtype,
                                       (int)op);
    if (st || count == 0)
        return st;
    if (comm->size == 1) {
        /* The reduction of one rank is its input (an average divides by 1). */
        if (sendbuf != recvbuf)
            memcpy(recvbuf, sendbuf, count * hoop_dtype_size(dtype));
        return HOOP_OK;
    }
    st = hoop_ring_allreduce(&comm->ring, sendbuf, recvbuf, count, dtype, op, comm->timeout_s);
    if (st)
        hoop_coll_mark_broken(comm, st);
    return st;
}
