/* timing.c - timing the calls: each placement (in or out of place) of a
 * size, warm-up then timed iterations, and the barrier's own timing. */
#include "bench/ring_bench/ring_bench.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Lines the ranks up around the timed loops. An allreduce rather than
 * hoop_barrier, so that the timing of a broken barrier does not depend on
 * the barrier itself. */
static hoop_status_t sync_ranks(hoop_comm_t *comm)
{
    unsigned char x = 0;
    return hoop_allreduce(comm, &x, &x, 1, HOOP_U8, HOOP_MAX);
}

static hoop_status_t call(struct bench *b, const struct shape *s, int in_place)
{
    const struct options *o = &b->opt;
    unsigned char *rbuf = b->call_recv;
    const void *send = in_place ? b->call_recv : b->call_send;
    void *recv = b->call_recv;
    size_t me = (size_t)b->rank, es = b->esize;

    switch (o->coll) {
    case COLL_ALLREDUCE: return hoop_allreduce(b->comm, send, recv, s->pcount, o->dtype, o->op);
    case COLL_REDUCE_SCATTER:
        if (in_place)
            recv = rbuf + me * s->pcount * es;
        return hoop_reduce_scatter(b->comm, send, recv, s->pcount, o->dtype, o->op);
    case COLL_ALLGATHER:
        if (in_place)
            send = rbuf + me * s->pcount * es;
        return hoop_allgather(b->comm, send, recv, s->pcount, o->dtype);
    case COLL_ALLGATHERV:
        if (in_place)
            send = rbuf + b->agv_displs[me] * es;
        return hoop_allgatherv(b->comm, send, recv, b->agv_counts, b->agv_displs, o->dtype);
    case COLL_BROADCAST: return hoop_broadcast(b->comm, send, recv, s->pcount, o->dtype, o->root);
    case COLL_REDUCE:
        /* hoop.h lets non-roots pass no recvbuf: out of place they do. */
        if (!in_place && b->rank != o->root)
            recv = NULL;
        return hoop_reduce(b->comm, send, recv, s->pcount, o->dtype, o->op, o->root);
    case COLL_ALLTOALL: return hoop_alltoall(b->comm, send, recv, s->pcount, o->dtype);
    default: return hoop_barrier(b->comm);
    }
}

/* Times iters calls after warmup ones; *t is the average over ranks of the
 * seconds per call. */
static hoop_status_t time_calls(struct bench *b, const struct shape *s, int in_place, double *t)
{
    const struct options *o = &b->opt;
    hoop_status_t st;
    for (int i = 0; i < o->warmup; i++)
        if ((st = call(b, s, in_place)) != HOOP_OK)
            return st;
    /* Without it a rank that left the warm-up early would time its wait for
     * the others. */
    if ((st = sync_ranks(b->comm)) != HOOP_OK)
        return st;
    double t0 = now_s();
    for (int i = 0; i < o->iters; i++)
        if ((st = call(b, s, in_place)) != HOOP_OK)
            return st;
    *t = (now_s() - t0) / o->iters;
    if ((st = hoop_allreduce(b->comm, t, t, 1, HOOP_F64, HOOP_SUM)) != HOOP_OK)
        return st;
    *t /= b->nranks;
    return HOOP_OK;
}

int run_placement(struct bench *b, const struct shape *s, int in_place, struct result *res)
{
    hoop_status_t st;
    double t;

    memset(res, 0, sizeof *res);
    prepare(b, s, in_place);
    if (device_put(b, s))
        return -1;
    if ((st = time_calls(b, s, in_place, &t)) != HOOP_OK)
        goto fail;
    res->ran = 1;
    res->time_us = t * 1e6;
    res->algbw = t > 0 ? (double)s->bytes / t / 1e9 : 0.0;
    res->busbw = res->algbw * bus_factor(b->opt.coll, b->nranks);

    if (b->opt.check) {
        /* A result left over from the timed loop must not pass for this one. */
        prepare(b, s, in_place);
        if (device_put(b, s))
            return -1;
        if ((st = call(b, s, in_place)) != HOOP_OK)
            goto fail;
        if (device_get(b, s))
            return -1;
        uint64_t wrong = count_wrong(b, s, in_place);
        if ((st = hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_U64, HOOP_SUM)) != HOOP_OK)
            goto fail;
        res->checked = 1;
        res->wrong = wrong;
    }
    return 0;
fail:
    report_hoop_error(b, st);
    return -1;
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The barrier's check needs one clock for every rank: it is made only when
 * all ranks share a machine. The last rank enters late; no rank may leave
 * before the last one entered. */
int run_barrier(struct bench *b, struct result *res)
{
    struct shape s;
    hoop_status_t st;
    double t;

    memset(&s, 0, sizeof s);
    memset(res, 0, sizeof *res);
    if ((st = time_calls(b, &s, 0, &t)) != HOOP_OK)
        goto fail;
    res->ran = 1;
    res->time_us = t * 1e6;

    if (b->opt.check && hoop_comm_local_size(b->comm) == b->nranks) {
        if ((st = sync_ranks(b->comm)) != HOOP_OK)
            goto fail;
        if (b->rank == b->nranks - 1) {
            struct timespec late = {0, 20 * 1000 * 1000};
            nanosleep(&late, NULL);
        }
        int64_t entry = realtime_ns();
        if ((st = hoop_barrier(b->comm)) != HOOP_OK)
            goto fail;
        int64_t exit_ns = realtime_ns(), last_entry = entry;
        if ((st = hoop_allreduce(b->comm, &entry, &last_entry, 1, HOOP_I64, HOOP_MAX)) != HOOP_OK)
            goto fail;
        uint64_t wrong = exit_ns < last_entry;
        if (wrong)
            report_error(b, "barrier: left %.3f ms before the last rank entered",
                         (double)(last_entry - exit_ns) / 1e6);
        if ((st = hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_U64, HOOP_SUM)) != HOOP_OK)
            goto fail;
        res->checked = 1;
        res->wrong = wrong;
    }
    return 0;
fail:
    report_hoop_error(b, st);
    return -1;
}
