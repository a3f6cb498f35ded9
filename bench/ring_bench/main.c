/* main.c - ring_bench: bandwidth and correctness of every hoop collective,
 * in the layout of nccl-tests (all_reduce_perf, reduce_scatter_perf, ...) so that
 * the numbers can be read side by side.
 *
 * Run one process per rank: hooprun -np 4 ./ring_bench -C allgather -b 8 -e 256M -f 4,
 * or set HOOP_RANK, HOOP_SIZE, HOOP_ROOT and HOOP_TOKEN by hand. Rank 0
 * prints the table; every rank reports its own errors on stderr. With -G the
 * buffers are CUDA device memory (device.c). Exit status: 0 all good, 1 a
 * call failed or a result was wrong, 2 bad usage (or -G without a GPU).
 */
#include "bench/ring_bench/ring_bench.h"

static void *alloc_touched(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        return NULL;
    if (posix_memalign(&p, 4096, bytes) != 0)
        return NULL;
    /* A page fault can cost more than moving the page, notably in virtual
     * machines: take them all here, outside the timed loops. */
    memset(p, 0, bytes);
    return p;
}

/* -R: both buffers from hoop_mem_alloc (every rank calls it), touched. */
static int alloc_registered(struct bench *b)
{
    hoop_status_t st;
    if ((st = hoop_mem_alloc(b->comm, b->buf_bytes, &b->sendbuf)) ||
        (st = hoop_mem_alloc(b->comm, b->buf_bytes, (void **)&b->recvbuf))) {
        report_hoop_error(b, st);
        return 1;
    }
    memset(b->sendbuf, 0, b->buf_bytes);
    memset(b->recvbuf, 0, b->buf_bytes);
    return 0;
}

static int run(struct bench *b, double *avg_busbw)
{
    const struct options *o = &b->opt;
    size_t rows = 0, bad_rows = 0, groups = 0;
    double busbw_sum = 0.0;
    struct shape s;
    struct result res[2];

    if (build_tables(b)) {
        report_error(b, "out of memory");
        return 1;
    }

    if (b->rank == 0)
        print_header(b);

    if (o->coll == COLL_BARRIER) {
        memset(&s, 0, sizeof s);
        memset(res, 0, sizeof res);
        if (run_barrier(b, &res[0]))
            return 1;
        rows = groups = 1;
        bad_rows = res[0].wrong != 0;
        if (b->rank == 0)
            print_row(b, &s, res);
    } else {
        /* Both buffers serve as the in-place buffer too: each is as large as
         * the largest of either in any row. */
        size_t elems = 0, size = o->min_bytes;
        do {
            if (shape_of(b, size, &s)) {
                elems = s.send_elems > elems ? s.send_elems : elems;
                elems = s.recv_elems > elems ? s.recv_elems : elems;
            }
        } while (next_size(o, &size));
        if (elems) {
            b->buf_bytes = elems * b->esize;
            if (o->registered) {
                if (alloc_registered(b))
                    return 1;
            } else {
                b->sendbuf = alloc_touched(b->buf_bytes);
                b->recvbuf = alloc_touched(b->buf_bytes);
            }
            if (!b->sendbuf || !b->recvbuf) {
                report_error(b, "cannot allocate two buffers of %zu bytes", b->buf_bytes);
                return 1;
            }
        }
        if (device_alloc(b))
            return 1;

        size_t prev_bytes = SIZE_MAX;
        size = o->min_bytes;
        do {
            /* Small sizes can round to the row before (allgatherv's totals):
             * the same row twice would only weigh it twice in the average. */
            if (!shape_of(b, size, &s) || s.bytes == prev_bytes)
                continue;
            prev_bytes = s.bytes;
            if (o->coll == COLL_ALLGATHERV)
                set_agv(b, &s);
            memset(res, 0, sizeof res);
            for (int p = 0; p < 2; p++) {
                if (p == 1 && !coll_has_in_place(o->coll))
                    continue;
                if (run_placement(b, &s, p, &res[p]))
                    return 1;
                busbw_sum += res[p].busbw;
                groups++;
            }
            rows++;
            if (res[0].wrong || res[1].wrong)
                bad_rows++;
            if (b->rank == 0)
                print_row(b, &s, res);
        } while (next_size(o, &size));
    }

    if (b->rank == 0) {
        printf("# Out of bounds values : %zu %s\n", bad_rows, bad_rows ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", groups ? busbw_sum / (double)groups : 0.0);
        *avg_busbw = groups ? busbw_sum / (double)groups : 0.0;
        printf("#\n");
        fflush(stdout);
    }
    return bad_rows ? 1 : 0;
}

static void bench_free(struct bench *b)
{
    device_free(b);
    free(b->sendbuf);
    free(b->recvbuf);
    free(b->tab_mem);
    free(b->peer_tabs);
    free(b->send_tabs);
    free(b->agv_counts);
    free(b->agv_displs);
    free(b->segs);
    b->sendbuf = b->recvbuf = NULL;
    b->buf_bytes = 0;
    b->tab_mem = NULL;
    b->peer_tabs = b->send_tabs = NULL;
    b->agv_counts = b->agv_displs = NULL;
    b->segs = NULL;
}

/* One job: make the communicator, run every size, close it. */
static int run_job(struct bench *b, double *avg_busbw)
{
    int rc;
    hoop_status_t st = hoop_comm_init(&b->comm, NULL);
    if (st != HOOP_OK) {
        report_hoop_error(b, st);
        return 1;
    }
    b->have_rank = 1;
    b->rank = hoop_comm_rank(b->comm);
    b->nranks = hoop_comm_size(b->comm);

    if (b->opt.root >= b->nranks) {
        /* Every rank sees the same mistake; one message is enough. */
        rc = b->rank == 0 ? bad_usage("-r: root %d is not a rank of this job (0..%d)",
                                      b->opt.root, b->nranks - 1)
                          : 2;
    } else {
        rc = run(b, avg_busbw);
    }

    /* Closing promptly also tells the other ranks, if this one failed, that
     * it is gone instead of leaving them to time out. */
    st = hoop_comm_destroy(b->comm);
    b->comm = NULL;
    if (b->opt.registered) /* freed with the communicator */
        b->sendbuf = b->recvbuf = NULL;
    if (st != HOOP_OK) {
        report_hoop_error(b, st);
        rc = 1;
    }
    bench_free(b);
    return rc;
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof b);

    int rc = parse_options(argc, argv, &b.opt);
    if (rc >= 0) {
        free(b.opt.sweep_values);
        return rc;
    }
    b.esize = hoop_dtype_size(b.opt.dtype);
    if (device_choose(&b)) {
        free(b.opt.sweep_values);
        return 1;
    }
    if (!b.opt.sweep_name)
        return run_job(&b, &(double){0});

    double avg[SWEEP_MAX];
    const char *val[SWEEP_MAX];
    const char *v = b.opt.sweep_values;
    for (int i = 0; i < b.opt.sweep_n; i++, v += strlen(v) + 1) {
        val[i] = v;
        avg[i] = 0.0;
        if (setenv(b.opt.sweep_name, v, 1)) {
            report_error(&b, "cannot set %s: %s", b.opt.sweep_name, strerror(errno));
            rc = 1;
            break;
        }
        rc = run_job(&b, &avg[i]);
        if (rc)
            break;
    }
    if (rc == 0 && b.rank == 0) {
        printf("# sweep of %s: average bus bandwidth (GB/s) over the sizes and placements\n",
               b.opt.sweep_name);
        for (int i = 0; i < b.opt.sweep_n; i++)
            printf("# sweep %-24s %8.3f\n", val[i], avg[i]);
        fflush(stdout);
    }
    free(b.opt.sweep_values);
    return rc;
}
