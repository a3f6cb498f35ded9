/* check.c - argument checks shared by every collective, and the broken
 * state after a failure. */
#include "collectives/comm.h"
#include "common/status.h"

#include <stdint.h>
#include <stdio.h>

hoop_status_t hoop_coll_check(const hoop_comm_t *comm, const char *op_name, const void *sendbuf,
                              const void *recvbuf, size_t count, int dtype, int op)
{
    if (!comm)
        return hoop_error(HOOP_ERR_INVALID, "%s: the communicator is NULL", op_name);
    int r = comm->rank;
    if (dtype < 0 || dtype >= HOOP_DTYPE_COUNT)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: dtype %d is not a hoop_dtype_t", r,
                          op_name, dtype);
    if (op < 0 || op >= HOOP_OP_COUNT)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: op %d is not a hoop_op_t", r, op_name, op);
    size_t es = hoop_dtype_size((hoop_dtype_t)dtype);
    if (count > SIZE_MAX / es)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: count %zu of %s overflows the address space",
                          r, op_name, count, hoop_dtype_str((hoop_dtype_t)dtype));
    if (count && (!sendbuf || !recvbuf))
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: %s is NULL with count %zu", r, op_name,
                          !sendbuf ? "sendbuf" : "recvbuf", count);
    if (count && sendbuf != recvbuf) {
        uintptr_t s = (uintptr_t)sendbuf, d = (uintptr_t)recvbuf, n = count * es;
        if (s < d + n && d < s + n)
            return hoop_error(HOOP_ERR_INVALID,
                              "rank %d: %s: sendbuf and recvbuf overlap without being equal "
                              "(pass the same pointer for in place)", r, op_name);
    }
    if (comm->broken)
        return hoop_error(comm->broken,
                          "rank %d: %s: the communicator is unusable after an earlier error (%s); "
                          "destroy it and create a new one", r, op_name, comm->broken_why);
    return HOOP_OK;
}

void hoop_coll_mark_broken(hoop_comm_t *comm, hoop_status_t st)
{
    comm->broken = st;
    snprintf(comm->broken_why, sizeof(comm->broken_why), "%s", hoop_last_error());
}
