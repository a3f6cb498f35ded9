/* alltoall.c - hoop_alltoall: checks, then the pairwise exchange. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

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
    if (comm->size == 1) {
        memcpy(recvbuf, sendbuf, bytes);
        return HOOP_OK;
    }
    return hoop_coll_end(comm, hoop_ring_alltoall(&comm->ring, sendbuf, recvbuf, count, dtype,
                                                  comm->timeout_s));
}
