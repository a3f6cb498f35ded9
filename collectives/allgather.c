/* allgather.c - hoop_allgather and hoop_allgatherv: checks, this rank's
 * block into place, then the ring. */
#include "collectives/comm.h"
#include "common/status.h"

#include <string.h>

static hoop_status_t allgather_run(hoop_comm_t *comm, const char *name, const void *sendbuf,
                                   void *recvbuf, const size_t *counts, const size_t *displs,
                                   hoop_dtype_t dtype)
{
    size_t es = hoop_dtype_size(dtype);
    size_t mine = counts[comm->rank] * es;
    char *dst = (char *)recvbuf + displs[comm->rank] * es;
    size_t total = 0;
    for (int k = 0; k < comm->size; k++)
        total += counts[k];
    hoop_status_t st = hoop_coll_copy(comm, name, dst, sendbuf, mine);
    if (st || comm->size == 1)
        return hoop_coll_end(comm, st);
    if (total == 0) /* matched with the others' call all the same */
        return hoop_coll_end(comm, hoop_ring_empty(&comm->ring, HOOP_COLL_ALLGATHER, dtype, -1, -1,
                                                   hoop_frame_blocks(counts, comm->size),
                                                   comm->timeout_s));
    return hoop_coll_end(comm, hoop_ring_allgatherv(&comm->ring, recvbuf, counts, displs, dtype,
                                                    comm->timeout_s));
}

hoop_status_t hoop_allgather(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                             size_t sendcount, hoop_dtype_t dtype)
{
    static const char name[] = "allgather";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) ||
        (st = hoop_coll_check_type(comm, name, dtype, 0, 0)) ||
        (st = hoop_coll_check_count(comm, name, sendcount, (size_t)comm->size, dtype)))
        return st;
    size_t bytes = sendcount * hoop_dtype_size(dtype);
    int in_place = recvbuf && (uintptr_t)sendbuf == (uintptr_t)recvbuf + (size_t)comm->rank * bytes;
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, bytes, recvbuf, bytes * (size_t)comm->size,
                                   in_place)))
        return st;
    size_t *counts = comm->size > 1 ? comm->ring.counts : &sendcount;
    size_t zero = 0, *displs = comm->size > 1 ? comm->ring.displs : &zero;
    for (int k = 0; k < comm->size && comm->size > 1; k++) {
        counts[k] = sendcount;
        displs[k] = (size_t)k * sendcount;
    }
    return allgather_run(comm, name, sendbuf, recvbuf, counts, displs, dtype);
}

hoop_status_t hoop_allgatherv(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                              const size_t *recvcounts, const size_t *displs, hoop_dtype_t dtype)
{
    static const char name[] = "allgatherv";
    hoop_status_t st;
    if ((st = hoop_coll_begin(comm, name)) ||
        (st = hoop_coll_check_type(comm, name, dtype, 0, 0)))
        return st;
    if (!recvcounts || !displs)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: %s is NULL", comm->rank, name,
                          !recvcounts ? "recvcounts" : "displs");
    size_t es = hoop_dtype_size(dtype), end = 0;
    for (int k = 0; k < comm->size; k++) {
        if ((st = hoop_coll_check_count(comm, name, recvcounts[k], 1, dtype)) ||
            (st = hoop_coll_check_count(comm, name, displs[k], 1, dtype)))
            return st;
        if (recvcounts[k] && displs[k] + recvcounts[k] > end)
            end = displs[k] + recvcounts[k];
        /* Blocks must not overlap: each is received into place once. */
        for (int j = 0; j < k; j++)
            if (recvcounts[k] && recvcounts[j] && displs[k] < displs[j] + recvcounts[j] &&
                displs[j] < displs[k] + recvcounts[k])
                return hoop_error(HOOP_ERR_INVALID,
                                  "rank %d: %s: the blocks of ranks %d and %d overlap in recvbuf",
                                  comm->rank, name, j, k);
    }
    size_t mine = recvcounts[comm->rank] * es;
    int in_place = recvbuf &&
                   (uintptr_t)sendbuf == (uintptr_t)recvbuf + displs[comm->rank] * es;
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, mine, recvbuf, end * es, in_place)))
        return st;
    return allgather_run(comm, name, sendbuf, recvbuf, recvcounts, displs, dtype);
}
