/* coll.c - what each collective is: its name, whether it takes an op, a
 * root or an in-place call, and its bus bandwidth factor. */
#include "bench/ring_bench/ring_bench.h"

const char *const coll_names[COLL_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "allgatherv",
    "broadcast", "reduce",         "alltoall",  "barrier",
};

int coll_has_op(enum coll c)
{
    return c == COLL_ALLREDUCE || c == COLL_REDUCE_SCATTER || c == COLL_REDUCE;
}

int coll_has_root(enum coll c)
{
    return c == COLL_BROADCAST || c == COLL_REDUCE;
}

/* alltoall has no in-place form in hoop.h, and a barrier moves no data. */
int coll_has_in_place(enum coll c)
{
    return c != COLL_ALLTOALL && c != COLL_BARRIER;
}

/* nccl-tests' busbw factors: what each rank must move, relative to the size
 * column, with the best algorithm. */
double bus_factor(enum coll c, int n)
{
    switch (c) {
    case COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER:
    case COLL_ALLGATHERV:
    case COLL_ALLTOALL: return (double)(n - 1) / n;
    case COLL_BROADCAST:
    case COLL_REDUCE: return 1.0;
    default: return 0.0;
    }
}
