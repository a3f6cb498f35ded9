/* alltoall.c - hoop_alltoall and hoop_alltoallv: checks, then the pairwise
 * exchange. */
#include "collectives/comm.h"
#include "common/status.h"
#include "gpu/gpu.h"

#include <stdint.h>
#include <string.h>
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

/* One side's counts and element offsets: bounded, and the extent of the
 * buffer they span in *extent (elements). Receive blocks must not overlap
 * (each is written once, in place); send blocks may. */
static hoop_status_t alltoallv_side(hoop_comm_t *comm, const char *name, const char *side,
                                    const size_t *counts, const size_t *displs, hoop_dtype_t dtype,
                                    int disjoint, size_t *extent)
{
    static const char *const cn[] = {"sendcounts", "recvcounts"};
    static const char *const dn[] = {"sdispls", "rdispls"};
    int recv = side[0] == 'r';
    if (!counts || !displs)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: %s is NULL", comm->rank, name,
                          !counts ? cn[recv] : dn[recv]);
    size_t es = hoop_dtype_size(dtype), end = 0;
    for (int k = 0; k < comm->size; k++) {
        hoop_status_t st;
        if ((st = hoop_coll_check_count(comm, name, counts[k], 1, dtype)) ||
            (st = hoop_coll_check_count(comm, name, displs[k], 1, dtype)))
            return st;
        if (counts[k] > SIZE_MAX / es - displs[k])
            return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: %s[%d] + %s[%d] (%zu + %zu) "
                              "overflows the address space", comm->rank, name, dn[recv], k,
                              cn[recv], k, displs[k], counts[k]);
        if (counts[k] && displs[k] + counts[k] > end)
            end = displs[k] + counts[k];
        for (int j = 0; j < k && disjoint; j++)
            if (counts[k] && counts[j] && displs[k] < displs[j] + counts[j] &&
                displs[j] < displs[k] + counts[k])
                return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: the %s blocks of ranks %d and "
                                  "%d overlap in %sbuf", comm->rank, name, side, j, k, side);
    }
    *extent = end;
    return HOOP_OK;
}

hoop_status_t hoop_alltoallv(hoop_comm_t *comm, const void *sendbuf, const size_t *sendcounts,
                             const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                             const size_t *rdispls, hoop_dtype_t dtype)
{
    static const char name[] = "alltoallv";
    hoop_status_t st;
    size_t send_end = 0, recv_end = 0;
    if ((st = hoop_coll_begin(comm, name)) ||
        (st = hoop_coll_check_type(comm, name, dtype, 0, 0)) ||
        (st = alltoallv_side(comm, name, "send", sendcounts, sdispls, dtype, 0, &send_end)) ||
        (st = alltoallv_side(comm, name, "recv", recvcounts, rdispls, dtype, 1, &recv_end)))
        return st;
    size_t es = hoop_dtype_size(dtype);
    /* No in-place form: a block could be overwritten before it is sent. */
    if ((st = hoop_coll_check_bufs(comm, name, sendbuf, send_end * es, recvbuf, recv_end * es, 0)))
        return st;
    if (comm->size == 1) {
        if (sendcounts[0] != recvcounts[0]) {
            hoop_ring_device_end(&comm->ring);
            return hoop_error(HOOP_ERR_MISMATCH, "rank 0: %s: rank 0 sends %zu elements to "
                              "rank 0, which expects %zu from it: sendcounts[0] must equal "
                              "recvcounts[0] (nothing was sent)", name, sendcounts[0],
                              recvcounts[0]);
        }
        return hoop_coll_end(comm, hoop_coll_copy(comm, name, (char *)recvbuf + rdispls[0] * es,
                                                  (const char *)sendbuf + sdispls[0] * es,
                                                  sendcounts[0] * es));
    }
    /* Device buffers: the exchange runs over pinned host copies of both,
     * the send extent staged whole, the received blocks copied back. */
    const void *send = sendbuf;
    void *recv = recvbuf;
    if (comm->ring.on_gpu) {
        void *in = NULL, *out = NULL;
        if ((st = hoop_ring_stage_in(&comm->ring, HOOP_GPU_HOST_IN, sendbuf, send_end * es, &in,
                                     name)) ||
            (st = hoop_ring_stage_in(&comm->ring, HOOP_GPU_HOST_OUT, NULL, recv_end * es, &out,
                                     name)))
            return hoop_coll_end(comm, st);
        send = in;
        recv = out;
    }
    int agreed = 0;
    st = hoop_ring_alltoallv(&comm->ring, send, sendcounts, sdispls, recv, recvcounts, rdispls,
                             dtype, comm->timeout_s, &agreed);
    if (agreed) {
        /* Every rank found the same mismatch before any data moved: the
         * ranks are still in step, and the communicator stays usable. */
        hoop_ring_device_end(&comm->ring);
        hoop_ring_call_end(&comm->ring);
        return st;
    }
    /* Back block by block: what lies between the blocks is the caller's. */
    for (int k = 0; !st && recv != recvbuf && k < comm->size; k++)
        if (recvcounts[k])
            st = hoop_ring_device_copy(&comm->ring, (char *)recvbuf + rdispls[k] * es,
                                       (char *)recv + rdispls[k] * es, recvcounts[k] * es, name);
    return hoop_coll_end(comm, st);
}
