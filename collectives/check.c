/* check.c - argument checks shared by every collective, and the broken
 * state after a failure. */
#include "collectives/comm.h"
#include "common/status.h"
#include "gpu/gpu.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

hoop_status_t hoop_coll_begin(hoop_comm_t *comm, const char *name)
{
    if (!comm)
        return hoop_error(HOOP_ERR_INVALID, "%s: the communicator is NULL", name);
    if (atomic_load_explicit(&comm->aborted, memory_order_acquire) == 2 && !comm->broken) {
        /* Aborted between collectives: the others may be in this one
         * already, waiting on this rank. Leave the ring and tell the root,
         * as an abort in the middle of a collective does. */
        if (comm->size > 1)
            hoop_ring_cancel(&comm->ring);
        comm->abort_before = name;
        return hoop_coll_end(comm, HOOP_ERR_ABORTED);
    }
    if (comm->ctl_later && comm->ctl_later <= comm->ring.seq + 1 && !comm->broken) {
        /* Another rank failed this call while this rank still ran the one
         * before (fail.c): it cannot end well, and the root's word on it
         * is known or coming. */
        hoop_error(HOOP_ERR_PEER, "rank %d: %s #%llu: another rank failed it before it began "
                   "here", comm->rank, name, (unsigned long long)comm->ring.seq + 1);
        comm->abort_before = name;
        comm->ring.fail_err = -EINTR;
        comm->ring.fail_peer = -1;
        return hoop_coll_end(comm, HOOP_ERR_PEER);
    }
    if (comm->broken)
        return hoop_error(comm->broken,
                          "rank %d: %s: the communicator is unusable after an earlier error (%s); "
                          "destroy it and create a new one", comm->rank, name, comm->broken_why);
    return HOOP_OK;
}

hoop_status_t hoop_coll_check_type(const hoop_comm_t *comm, const char *name, int dtype, int has_op,
                                   int op)
{
    if (dtype < 0 || dtype >= HOOP_DTYPE_COUNT)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: dtype %d is not a hoop_dtype_t",
                          comm->rank, name, dtype);
    if (has_op && (op < 0 || op >= HOOP_OP_COUNT))
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: op %d is not a hoop_op_t", comm->rank,
                          name, op);
    return HOOP_OK;
}

hoop_status_t hoop_coll_check_count(const hoop_comm_t *comm, const char *name, size_t count,
                                    size_t factor, int dtype)
{
    size_t bytes; /* count * es * factor, where it fits (no division on every call) */
    if (factor && (__builtin_mul_overflow(count, hoop_dtype_size((hoop_dtype_t)dtype), &bytes) ||
                   __builtin_mul_overflow(bytes, factor, &bytes)))
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: count %zu of %s overflows the address space",
                          comm->rank, name, count, hoop_dtype_str((hoop_dtype_t)dtype));
    return HOOP_OK;
}

/* Where each buffer lives (gpu/gpu.h): both on the host (plain, pinned or
 * managed, which the CPU reaches), or both on one GPU. Without CUDA or a
 * device, every pointer is host memory and this costs a flag. */
hoop_status_t hoop_coll_check_kinds(const hoop_comm_t *comm, const char *name, const void *send,
                                    const void *recv, int *device)
{
    struct hoop_mem s, r;
    hoop_gpu_mem_kinds(send, recv, &s, &r);
    int s_dev = send && s.kind == HOOP_MEM_DEVICE, r_dev = recv && r.kind == HOOP_MEM_DEVICE;
    *device = -1;
    if (!s_dev && !r_dev)
        return HOOP_OK;
    if (send && recv && s_dev != r_dev)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: sendbuf is %s memory and recvbuf is %s "
                          "memory; pass both on the host or both on the same GPU", comm->rank,
                          name, hoop_gpu_mem_str(s.kind), hoop_gpu_mem_str(r.kind));
    if (s_dev && r_dev && s.device != r.device)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: sendbuf is on GPU %d and recvbuf on "
                          "GPU %d; pass both on the same GPU (the caller's current device)",
                          comm->rank, name, s.device, r.device);
    *device = s_dev ? s.device : r.device;
    return HOOP_OK;
}

hoop_status_t hoop_coll_check_bufs(hoop_comm_t *comm, const char *name, const void *send,
                                   size_t send_bytes, const void *recv, size_t recv_bytes,
                                   int in_place)
{
    if (send_bytes && !send)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: sendbuf is NULL with %zu bytes to send",
                          comm->rank, name, send_bytes);
    if (recv_bytes && !recv)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: recvbuf is NULL with %zu bytes to receive",
                          comm->rank, name, recv_bytes);
    int device;
    hoop_status_t st = hoop_coll_check_kinds(comm, name, send_bytes ? send : NULL,
                                             recv_bytes ? recv : NULL, &device);
    if (st)
        return st;
    if (send_bytes && recv_bytes && !in_place) {
        uintptr_t s = (uintptr_t)send, d = (uintptr_t)recv;
        if (s < d + recv_bytes && d < s + send_bytes)
            return hoop_error(HOOP_ERR_INVALID,
                              "rank %d: %s: sendbuf and recvbuf overlap without being the in-place "
                              "layout (see hoop.h)", comm->rank, name);
    }
    if (device >= 0 && (st = hoop_ring_device_begin(&comm->ring, device, name)))
        return st == HOOP_ERR_INVALID ? st : hoop_coll_end(comm, st);
    return HOOP_OK;
}

hoop_status_t hoop_coll_copy(hoop_comm_t *comm, const char *name, void *dst, const void *src,
                             size_t bytes)
{
    if (!bytes || dst == src)
        return HOOP_OK;
    if (comm->ring.on_gpu)
        return hoop_ring_device_copy(&comm->ring, dst, src, bytes, name);
    memcpy(dst, src, bytes);
    return HOOP_OK;
}

hoop_status_t hoop_coll_check_root(const hoop_comm_t *comm, const char *name, int root)
{
    if (root < 0 || root >= comm->size)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: root %d is not a rank of this "
                          "communicator (0..%d)", comm->rank, name, root, comm->size - 1);
    return HOOP_OK;
}

hoop_status_t hoop_coll_end(hoop_comm_t *comm, hoop_status_t st)
{
    hoop_ring_device_end(&comm->ring);
    hoop_ring_call_end(&comm->ring);
    if (st && st != HOOP_ERR_INVALID) {
        st = hoop_comm_fail(comm, st);
        comm->broken = st;
        snprintf(comm->broken_why, sizeof(comm->broken_why), "%s", hoop_last_error());
    }
    return st;
}
