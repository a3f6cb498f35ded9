/* reduce_scatter.c - hoop_reduce_scatter and hoop_reduce_scatterv: checks,
 * then the ring. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

/* counts and displs (size entries; displs the blocks one after the other)
 * checked; frame_count and blocks as the frames say the call. */
static hoop_status_t reduce_scatter_run(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                        const size_t *counts, const size_t *displs, size_t total,
                                        size_t frame_count, uint64_t blocks, hoop_dtype_t dtype,
                                        hoop_op_t op)
{
    if (comm->size == 1)
        return hoop_coll_end(comm, hoop_coll_copy(comm, "reduce_scatter", recvbuf, sendbuf,
                                                  counts[0] * hoop_dtype_size(dtype)));
    if (!total) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_REDUCE_SCATTER, dtype,
                                                   op, -1, blocks, comm->timeout_s));
    return hoop_coll_end(comm, hoop_ring_reduce_scatterv(&comm->ring, sendbuf, recvbuf, counts,
                                                         displs, frame_count, blocks, dtype, op,
                                                         comm->timeout_s));
}

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
    size_t *counts = comm->size > 1 ? comm->ring.counts : &recvcount;
    size_t zero = 0, *displs = comm->size > 1 ? comm->ring.displs : &zero;
    for (int k = 0; k < comm->size && comm->size > 1; k++) {
        counts[k] = recvcount;
        displs[k] = (size_t)k * recvcount;
    }
    return reduce_scatter_run(comm, sendbuf, recvbuf, counts, displs,
                              recvcount * (size_t)comm->size, recvcount, 0, dtype, op);
}

hoop_status_t hoop_reduce_scatterv(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   const size_t *recvcounts, hoop_dtype_t dtype, hoop_op_t op)
{
    static const char name[] = "reduce_scatterv";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) || (st = hoop_coll_check_type(comm, name, dtype, 1, op)))
        return st;
    if (!recvcounts)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: recvcounts is NULL", comm->rank, name);
    size_t es = hoop_dtype_size(dtype), total = 0, mine_off = 0;
    for (int k = 0; k < comm->size; k++) {
        if ((st = hoop_coll_check_count(comm, name, recvcounts[k], 1, dtype)))
            return st;
        if (recvcounts[k] > SIZE_MAX / es - total)
            return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: the recvcounts add up to more "
                              "elements of %s than the address space holds", comm->rank, name,
                              hoop_dtype_str(dtype));
        if (k == comm->rank)
            mine_off = total;
        total += recvcounts[k];
    }
    size_t mine = recvcounts[comm->rank] * es;
    int in_place = sendbuf && (uintptr_t)recvbuf == (uintptr_t)sendbuf + mine_off * es;
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, total * es, recvbuf, mine, in_place)))
        return st;
    if (comm->size == 1)
        return reduce_scatter_run(comm, sendbuf, recvbuf, recvcounts, &mine_off, total, total, 0,
                                  dtype, op);
    size_t *displs = comm->ring.displs;
    size_t off = 0;
    for (int k = 0; k < comm->size; k++) {
        displs[k] = off;
        off += recvcounts[k];
    }
    return reduce_scatter_run(comm, sendbuf, recvbuf, recvcounts, displs, total, total,
                              hoop_frame_blocks(recvcounts, comm->size), dtype, op);
}
