/* rooted.c - hoop_broadcast and hoop_reduce: checks, then the chain. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

hoop_status_t hoop_broadcast(hoop_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             hoop_dtype_t dtype, int root)
{
    static const char name[] = "broadcast";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) ||
        (st = hoop_coll_check_type(comm, name, dtype, 0, 0)) ||
        (st = hoop_coll_check_count(comm, name, count, 1, dtype)) ||
        (st = hoop_coll_check_root(comm, name, root)))
        return st;
    size_t bytes = count * hoop_dtype_size(dtype);
    int is_root = comm->rank == root;
    if ((st = hoop_coll_check_bufs(comm, name, is_root ? sendbuf : NULL, is_root ? bytes : 0,
                                   recvbuf, bytes, sendbuf == recvbuf)))
        return st;
    if (!count && comm->size > 1) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_BROADCAST, dtype, -1,
                                                   root, 0, comm->timeout_s));
    if (is_root && (st = hoop_coll_copy(comm, name, recvbuf, sendbuf, bytes)))
        return hoop_coll_end(comm, st);
    if (comm->size == 1)
        return hoop_coll_end(comm, HOOP_OK);
    return hoop_coll_end(comm, hoop_ring_broadcast(&comm->ring, recvbuf, count, dtype, root,
                                                   comm->timeout_s));
}

hoop_status_t hoop_reduce(hoop_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                          hoop_dtype_t dtype, hoop_op_t op, int root)
{
    static const char name[] = "reduce";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) || (st = hoop_coll_check_type(comm, name, dtype, 1, op)) ||
        (st = hoop_coll_check_count(comm, name, count, 1, dtype)) ||
        (st = hoop_coll_check_root(comm, name, root)))
        return st;
    size_t bytes = count * hoop_dtype_size(dtype);
    int is_root = comm->rank == root;
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, bytes, is_root ? recvbuf : NULL,
                                   is_root ? bytes : 0, sendbuf == recvbuf)))
        return st;
    if (!count && comm->size > 1) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_REDUCE, dtype, op, root,
                                                   0, comm->timeout_s));
    if (comm->size == 1)
        return hoop_coll_end(comm, hoop_coll_copy(comm, name, recvbuf, sendbuf, bytes));
    return hoop_coll_end(comm, hoop_ring_reduce(&comm->ring, sendbuf, is_root ? recvbuf : NULL,
                                                count, dtype, op, root, comm->timeout_s));
}

hoop_status_t hoop_barrier(hoop_comm_t *comm)
{
    static const char name[] = "barrier";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) || comm->size == 1)
        return st;
    /* One byte around the ring and back: the result depends on every rank's
     * input, so no rank can leave before all have entered. */
    return hoop_coll_end(comm, hoop_ring_barrier(&comm->ring, comm->timeout_s));
}
