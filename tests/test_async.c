/* test_async.c - the engine of hoop_engine.h (named operations enqueued from
 * any thread, negotiated, fused, cached) over real processes on loopback.
 *
 * (test_engine.c is about the TCP transport's engines, HOOP_TCP_ENGINE.)
 *
 * Each rank forms its own engine (a raw child: the engine owns its
 * communicator), with the case's HOOP_* variables set in the child only.
 * Inputs are small integers whose sums are exact, known to every rank, so
 * each rank checks every element it gets without trusting the library.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collectives/comm.h"
#include "collectives/mem.h"
#include "engine/engine.h"
#include "gpu/gpu.h"
#include "harness.h"
#include "hoop.h"
#include "hoop_engine.h"

#define WAIT_S 30.0

typedef int (*async_body_fn)(hoop_engine_t *e, int rank, int size, void *arg);

typedef struct async_case {
    async_body_fn body;
    void *arg;
    const char *env[8];      /* "NAME=VALUE", NULL-terminated */
    const char *stderr_path; /* when set, rank 0's stderr goes there (its log) */
    const char *env_rank1;   /* "NAME=VALUE" set on rank 1 only */
    int one_cpu;             /* each rank runs on one CPU (its first) */
    double boot_timeout_s;   /* the bootstrap's deadline (0: 30 s) */
} async_case_t;

static int async_rank(int rank, int size, int port, void *arg)
{
    async_case_t *c = arg;
    for (int i = 0; i < 8 && c->env[i]; i++)
        putenv((char *)c->env[i]);
    if (c->env_rank1 && rank == 1)
        putenv((char *)c->env_rank1);
    if (c->stderr_path && rank == 0) {
        int fd = open(c->stderr_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            close(fd);
        }
    }
    if (c->one_cpu) {
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0) {
            int first = 0;
            while (first < CPU_SETSIZE && !CPU_ISSET(first, &set))
                first++;
            CPU_ZERO(&set);
            CPU_SET(first, &set);
            if (sched_setaffinity(0, sizeof set, &set))
                return harness_failf(rank, "cannot pin to CPU %d", first);
        }
    }
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port,
                            c->boot_timeout_s > 0 ? c->boot_timeout_s : 30.0, root, token, NULL);
    hoop_engine_t *e;
    hoop_status_t st = hoop_engine_create(&e, &cfg);
    if (st)
        return harness_fail(rank, "hoop_engine_create", st);
    int rc = c->body(e, rank, size, c->arg);
    hoop_engine_destroy(e);
    return rc;
}

/* A new empty file named after the template path (mkstemp's XXXXXX). */
static void make_temp(char *path)
{
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp(%s) failed", path);
    close(fd);
}

static void run_case(int size, async_case_t *c, double deadline_s)
{
    char report[8192];
    bool ok = harness_run_raw(size, async_rank, c, deadline_s, report, sizeof report);
    cr_assert(ok, "%s", report);
}

static int wait_ok(hoop_engine_handle_t *h, int rank, const char *what)
{
    hoop_status_t st = hoop_engine_wait(h, WAIT_S);
    if (st)
        return harness_fail(rank, what, st);
    return 0;
}

/* A permutation of 0..n-1 that depends on seed. */
static void shuffle(int *p, int n, unsigned seed)
{
    for (int i = 0; i < n; i++)
        p[i] = i;
    for (int i = n - 1; i > 0; i--) {
        seed = seed * 1103515245u + 12345u;
        int j = (int)((seed >> 8) % (unsigned)(i + 1));
        int t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
}

static int32_t val(int rank, int t, size_t i)
{
    return (int32_t)(rank * 7 + t * 3 + (int)(i % 13));
}

/* ---- every operation, enqueued in a different order on every rank -------- */

#define NT 24 /* names: 6 of each of 4 kinds */

static int body_shuffled(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    int order[NT];
    shuffle(order, NT, 1234u + (unsigned)rank * 7919u);
    int32_t *in[NT], *out[NT];
    hoop_engine_handle_t *h[NT];
    size_t counts[NT];
    for (int t = 0; t < NT; t++) {
        counts[t] = 1 + (size_t)t * 37;
        in[t] = malloc(counts[t] * 4 * (size_t)size);
        out[t] = malloc(counts[t] * 4 * (size_t)size);
        if (!in[t] || !out[t])
            return harness_failf(rank, "out of memory");
    }
    for (int k = 0; k < NT; k++) {
        int t = order[k];
        char name[32];
        snprintf(name, sizeof name, "t%d", t);
        hoop_status_t st = HOOP_OK;
        switch (t % 4) {
        case 0: /* allreduce sum */
            for (size_t i = 0; i < counts[t]; i++)
                in[t][i] = val(rank, t, i);
            st = hoop_engine_allreduce(e, name, in[t], out[t], counts[t], HOOP_I32, HOOP_SUM, 1.0,
                                       1.0, NULL, NULL, &h[t]);
            break;
        case 1: /* allgather, rank r gives r + 1 rows of 3 */
            for (size_t i = 0; i < (size_t)(rank + 1) * 3; i++)
                in[t][i] = val(rank, t, i);
            st = hoop_engine_allgather(e, name, in[t], (size_t)rank + 1, 3, HOOP_I32, NULL, NULL,
                                       &h[t]);
            break;
        case 2: /* broadcast from rank t % size */
            for (size_t i = 0; i < counts[t]; i++)
                out[t][i] = rank == t % size ? val(rank, t, i) : -1;
            st = hoop_engine_broadcast(e, name, out[t], counts[t], HOOP_I32, t % size, NULL, NULL,
                                       &h[t]);
            break;
        case 3: { /* alltoall: rank r sends r + j + 1 elements to rank j */
            size_t splits[HARNESS_MAX_PROCS], off = 0;
            for (int j = 0; j < size; j++) {
                splits[j] = (size_t)(rank + j + 1);
                for (size_t i = 0; i < splits[j]; i++)
                    in[t][off + i] = val(rank, t, (size_t)j * 100 + i);
                off += splits[j];
            }
            st = hoop_engine_alltoall(e, name, in[t], splits, HOOP_I32, NULL, NULL, &h[t]);
            break;
        }
        }
        if (st)
            return harness_fail(rank, name, st);
    }
    int bad = 0;
    for (int t = 0; t < NT && !bad; t++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", t);
        if (wait_ok(h[t], rank, name))
            return 1;
        switch (t % 4) {
        case 0:
            for (size_t i = 0; i < counts[t] && !bad; i++) {
                int32_t want = 0;
                for (int r = 0; r < size; r++)
                    want += val(r, t, i);
                if (out[t][i] != want)
                    bad = harness_failf(rank, "%s[%zu] = %d, want %d", name, i, out[t][i], want);
            }
            break;
        case 1: {
            size_t n, rows[HARNESS_MAX_PROCS];
            int32_t *o = hoop_engine_output(h[t], &n);
            if (hoop_engine_counts(h[t], rows))
                return harness_fail(rank, "counts", HOOP_ERR_INVALID);
            size_t k = 0;
            for (int r = 0; r < size && !bad; r++) {
                if (rows[r] != (size_t)r + 1)
                    bad = harness_failf(rank, "%s: rank %d rows %zu", name, r, rows[r]);
                for (size_t i = 0; i < (size_t)(r + 1) * 3 && !bad; i++, k++)
                    if (k >= n || o[k] != val(r, t, i))
                        bad = harness_failf(rank, "%s: element %zu of rank %d wrong", name, i, r);
            }
            if (!bad && k != n)
                bad = harness_failf(rank, "%s: %zu elements, want %zu", name, n, k);
            break;
        }
        case 2:
            for (size_t i = 0; i < counts[t] && !bad; i++)
                if (out[t][i] != val(t % size, t, i))
                    bad = harness_failf(rank, "%s[%zu] = %d", name, i, out[t][i]);
            break;
        case 3: {
            size_t n, got[HARNESS_MAX_PROCS];
            int32_t *o = hoop_engine_output(h[t], &n);
            hoop_engine_counts(h[t], got);
            size_t k = 0;
            for (int r = 0; r < size && !bad; r++) {
                if (got[r] != (size_t)(r + rank + 1))
                    bad = harness_failf(rank, "%s: %zu from rank %d", name, got[r], r);
                for (size_t i = 0; i < got[r] && !bad; i++, k++)
                    if (o[k] != val(r, t, (size_t)rank * 100 + i))
                        bad = harness_failf(rank, "%s: element %zu from rank %d wrong", name, i, r);
            }
            if (!bad && k != n)
                bad = harness_failf(rank, "%s: %zu elements, want %zu", name, n, k);
            break;
        }
        }
    }
    for (int t = 0; t < NT; t++) {
        hoop_engine_release(h[t]);
        free(in[t]);
        free(out[t]);
    }
    return bad;
}

Test(async, shuffled_orders_every_kind_n3, .timeout = 60)
{
    async_case_t c = {.body = body_shuffled};
    run_case(3, &c, 40);
}

/* ---- scale factors, AVG, reduce_scatter, grouped, barrier ------------------ */

static int body_scaled(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    enum { N = 64 };
    float a[N], b[N];
    double g1[N], g2[2 * N], o1[N], o2[2 * N];
    int32_t rs_in[N * HARNESS_MAX_PROCS], rs_out[N], iv[N], io[N];
    for (int i = 0; i < N; i++)
        a[i] = (float)(rank + i);
    for (int i = 0; i < N; i++)
        g1[i] = rank + 1;
    for (int i = 0; i < 2 * N; i++)
        g2[i] = i;
    for (int i = 0; i < N * size; i++)
        rs_in[i] = rank + i;
    for (int i = 0; i < N; i++)
        iv[i] = 3 * rank + i - N / 2;
    hoop_engine_handle_t *h[5];
    /* AVG of (rank + i) * 2, then * 0.5: (mean rank + i) */
    hoop_status_t st =
        hoop_engine_allreduce(e, "avg", a, b, N, HOOP_F32, HOOP_AVG, 2.0, 0.5, NULL, NULL, &h[0]);
    const void *gs[2] = {g1, g2};
    void *gr[2] = {o1, o2};
    size_t gc[2] = {N, 2 * N};
    if (!st)
        st = hoop_engine_grouped_allreduce(e, "group", 2, gs, gr, gc, HOOP_F64, HOOP_SUM, 1.0, 4.0,
                                           NULL, NULL, &h[1]);
    if (!st)
        st = hoop_engine_reduce_scatter(e, "rs", rs_in, rs_out, N, HOOP_I32, HOOP_MAX, 1.0, 1.0,
                                        NULL, NULL, &h[2]);
    if (!st)
        st = hoop_engine_barrier(e, NULL, NULL, &h[3]);
    /* Integers as Horovod scales them: each truncated toward zero. */
    if (!st)
        st = hoop_engine_allreduce(e, "ints", iv, io, N, HOOP_I32, HOOP_SUM, 0.5, 3.0, NULL, NULL,
                                   &h[4]);
    if (st)
        return harness_failf(rank, "enqueue: %s", hoop_last_error());
    for (int k = 0; k < 5; k++)
        if (wait_ok(h[k], rank, "op"))
            return 1;
    for (int i = 0; i < N; i++) {
        int32_t want = 0;
        for (int r = 0; r < size; r++)
            want += (int32_t)((3 * r + i - N / 2) * 0.5); /* C's cast truncates toward zero */
        if (io[i] != 3 * want)
            return harness_failf(rank, "ints[%d] = %d, want %d", i, io[i], 3 * want);
    }
    double mean = (size - 1) / 2.0;
    for (int i = 0; i < N; i++)
        if (b[i] != (float)(mean + i))
            return harness_failf(rank, "avg[%d] = %g, want %g", i, b[i], mean + i);
    double sum_r1 = size * (size + 1) / 2.0;
    for (int i = 0; i < N; i++)
        if (o1[i] != 4.0 * sum_r1)
            return harness_failf(rank, "group[0][%d] = %g", i, o1[i]);
    for (int i = 0; i < 2 * N; i++)
        if (o2[i] != 4.0 * size * i)
            return harness_failf(rank, "group[1][%d] = %g", i, o2[i]);
    for (int i = 0; i < N; i++)
        if (rs_out[i] != size - 1 + rank * N + i)
            return harness_failf(rank, "rs[%d] = %d", i, rs_out[i]);
    for (int k = 0; k < 5; k++)
        hoop_engine_release(h[k]);
    return 0;
}

Test(async, scale_avg_group_reduce_scatter_barrier_n3, .timeout = 60)
{
    async_case_t c = {.body = body_scaled};
    run_case(3, &c, 40);
}

/* ---- per-rank counts from the caller: bounded, refused with a sentence ---- */

/* One enqueue that must be refused as invalid, saying `says`. */
static int refused(hoop_status_t st, int rank, const char *what, const char *says)
{
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), says))
        return harness_failf(rank, "%s gave %s (%s), not invalid saying '%s'", what,
                             hoop_status_str(st), hoop_last_error(), says);
    return 0;
}

static int body_bad_counts(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t in[8], out[8];
    size_t huge[HARNESS_MAX_PROCS], ones[HARNESS_MAX_PROCS];
    for (int k = 0; k < size; k++) {
        huge[k] = SIZE_MAX / 8; /* each fits; their sum's bytes do not */
        ones[k] = 1;
    }
    hoop_engine_handle_t *h = NULL;
    if (refused(hoop_engine_alltoall(e, "a2a", in, huge, HOOP_I32, NULL, NULL, &h), rank,
                "an alltoall of splits summing past SIZE_MAX", "splits too large") ||
        refused(hoop_engine_alltoall(e, "a2a", NULL, ones, HOOP_I32, NULL, NULL, &h), rank,
                "an alltoall with no sendbuf", "sendbuf is NULL") ||
        refused(hoop_engine_alltoall(e, "a2a", in, NULL, HOOP_I32, NULL, NULL, &h), rank,
                "an alltoall with no splits", "splits is NULL") ||
        refused(hoop_engine_reduce_scatterv(e, "rsv", in, out, huge, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                            NULL, NULL, &h),
                rank, "a reduce_scatterv of counts summing past SIZE_MAX", "recvcounts too large"))
        return 1;
    if (h)
        return harness_failf(rank, "a refused enqueue handed out a handle");
    /* Nothing was enqueued: the same names still work on every rank. */
    for (int i = 0; i < size; i++)
        in[i] = rank * 10 + i;
    hoop_status_t st = hoop_engine_alltoall(e, "a2a", in, ones, HOOP_I32, NULL, NULL, &h);
    if (st)
        return harness_fail(rank, "alltoall after the refusals", st);
    if (wait_ok(h, rank, "alltoall after the refusals"))
        return 1;
    size_t n = 0;
    const int32_t *o = hoop_engine_output(h, &n);
    if (n != (size_t)size || !o)
        return harness_failf(rank, "alltoall gave %zu elements, want %d", n, size);
    for (int j = 0; j < size; j++)
        if (o[j] != j * 10 + rank)
            return harness_failf(rank, "alltoall[%d] = %d, want %d", j, o[j], j * 10 + rank);
    hoop_engine_release(h);
    return 0;
}

Test(async, counts_past_the_bound_are_refused_n2, .timeout = 60)
{
    async_case_t c = {.body = body_bad_counts};
    run_case(2, &c, 30);
}

/* ---- reduce_scatterv: uneven blocks, twice (the cache), and a mismatch ---- */

static int body_rsv(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    /* Static: a rank that fails returns while its engine may still use them. */
    static int32_t in[64], out[32], bad_in[64], bad_out[32];
    size_t counts[HARNESS_MAX_PROCS], bad[HARNESS_MAX_PROCS], total = 0, off = 0;
    for (int k = 0; k < size; k++) {
        counts[k] = k == 1 ? 0 : (size_t)(3 + 2 * k); /* uneven, one empty */
        bad[k] = counts[k] + (rank == 1 && k == 0 ? 1 : 0);
        if (k < rank)
            off += counts[k];
        total += counts[k];
    }
    for (int step = 0; step < 2; step++) {
        for (size_t i = 0; i < total; i++)
            in[i] = rank + (int)i + step;
        memset(out, 0xff, sizeof(out));
        hoop_engine_handle_t *h;
        hoop_status_t st = hoop_engine_reduce_scatterv(e, "rsv", in, out, counts, HOOP_I32,
                                                       HOOP_SUM, 1.0, 1.0, NULL, NULL, &h);
        if (st)
            return harness_fail(rank, "enqueue rsv", st);
        if (wait_ok(h, rank, "rsv"))
            return 1;
        hoop_engine_release(h);
        int rsum = size * (size - 1) / 2;
        for (size_t i = 0; i < counts[rank]; i++)
            if (out[i] != rsum + size * ((int)(off + i) + step))
                return harness_failf(rank, "step %d: rsv[%zu] = %d, want %d", step, i, out[i],
                                     rsum + size * ((int)(off + i) + step));
        if (counts[rank] < 32 && out[counts[rank]] != -1)
            return harness_failf(rank, "rsv wrote past this rank's block");
    }
    hoop_engine_handle_t *hb;
    hoop_status_t st = hoop_engine_reduce_scatterv(e, "rsbad", bad_in, bad_out, bad, HOOP_I32,
                                                   HOOP_SUM, 1.0, 1.0, NULL, NULL, &hb);
    if (st)
        return harness_fail(rank, "enqueue rsbad", st);
    st = hoop_engine_wait(hb, WAIT_S);
    const char *why = "";
    hoop_engine_status(hb, &why);
    if (st != HOOP_ERR_MISMATCH)
        return harness_failf(rank, "'rsbad' gave %s, not a mismatch: %s", hoop_status_str(st),
                             why);
    if (!strstr(why, "'rsbad'") || !strstr(why, "rank 0's block"))
        return harness_failf(rank, "the sentence does not name the tensor and the block: %s",
                             why);
    hoop_engine_release(hb);
    return 0;
}

Test(async, reduce_scatterv_uneven_cached_and_mismatched_n3, .timeout = 60)
{
    async_case_t c = {.body = body_rsv};
    run_case(3, &c, 40);
}

/* ---- fusion: 200 tensors, far fewer collectives ---------------------------- */

#define NF 200

static int body_fused(hoop_engine_t *e, int rank, int size, void *arg)
{
    size_t *nmax = arg;
    int32_t *buf[NF];
    size_t cnt[NF];
    hoop_engine_handle_t *h[NF];
    for (int t = 0; t < NF; t++) {
        cnt[t] = 1 + (size_t)(t * 7919 % 4000); /* 4 B to 16 KiB */
        buf[t] = malloc(cnt[t] * 4);
        if (!buf[t])
            return harness_failf(rank, "out of memory");
        for (size_t i = 0; i < cnt[t]; i++)
            buf[t][i] = val(rank, t, i);
    }
    hoop_engine_stats_t s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    hoop_engine_stats(e, &s0);
    int order[NF];
    shuffle(order, NF, 99u + (unsigned)rank);
    for (int k = 0; k < NF; k++) {
        int t = order[k];
        char name[32];
        snprintf(name, sizeof name, "grad.%d", t);
        hoop_status_t st = hoop_engine_allreduce(e, name, buf[t], buf[t], cnt[t], HOOP_I32,
                                                 HOOP_SUM, 1.0, 1.0, NULL, NULL, &h[t]);
        if (st)
            return harness_fail(rank, name, st);
    }
    for (int t = 0; t < NF; t++) {
        if (wait_ok(h[t], rank, "grad"))
            return 1;
        for (size_t i = 0; i < cnt[t]; i++) {
            int32_t want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, t, i);
            if (buf[t][i] != want)
                return harness_failf(rank, "grad.%d[%zu] = %d, want %d", t, i, buf[t][i], want);
        }
        hoop_engine_release(h[t]);
        free(buf[t]);
    }
    hoop_engine_stats(e, &s1);
    uint64_t colls = s1.collectives - s0.collectives;
    fprintf(stderr, "rank %d: %d tensors in %llu collectives (%llu fused), %llu cycles\n", rank, NF,
            (unsigned long long)colls, (unsigned long long)(s1.fused_ops - s0.fused_ops),
            (unsigned long long)(s1.cycles - s0.cycles));
    if (colls > *nmax || colls == 0)
        return harness_failf(rank, "%d tensors took %llu collectives, want 1..%zu", NF,
                             (unsigned long long)colls, *nmax);
    return 0;
}

Test(async, two_hundred_tensors_fused_n2, .timeout = 60)
{
    /* Enqueued within a cycle of 20 ms, the 200 (about 8 MiB) fit one
     * 64 MiB fusion buffer: a few collectives, not 200. */
    size_t nmax = 20;
    async_case_t c = {.body = body_fused, .arg = &nmax, .env = {"HOOP_CYCLE_TIME=20"}};
    run_case(2, &c, 40);
}

Test(async, fusion_off_runs_one_collective_each_n2, .timeout = 60)
{
    size_t nmax = NF;
    async_case_t c = {
        .body = body_fused, .arg = &nmax, .env = {"HOOP_CYCLE_TIME=20", "HOOP_FUSION_THRESHOLD=0"}};
    run_case(2, &c, 40);
}

/* ---- a name with different counts: an error everywhere, the rest runs ------ */

static int body_mismatch(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    /* Static: a rank that fails returns while its engine may still use them. */
    static int32_t a[200], b[16];
    for (int i = 0; i < 16; i++)
        b[i] = rank;
    hoop_engine_handle_t *hb, *hg;
    size_t n = rank == 1 ? 200 : 100;
    hoop_status_t st =
        hoop_engine_allreduce(e, "bad", a, a, n, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &hb);
    if (!st)
        st = hoop_engine_allreduce(e, "good", b, b, 16, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                   &hg);
    if (st)
        return harness_fail(rank, "enqueue", st);
    st = hoop_engine_wait(hb, WAIT_S);
    const char *why = "";
    hoop_engine_status(hb, &why);
    fprintf(stderr, "rank %d: bad: %s: %s\n", rank, hoop_status_str(st), why);
    if (st != HOOP_ERR_MISMATCH)
        return harness_failf(rank, "'bad' gave %s, not a mismatch", hoop_status_str(st));
    /* Rank 1 is the odd one: the sentence names it against another rank. */
    if (!strstr(why, "'bad'") || !strstr(why, "rank 1 gives count 200") ||
        !strstr(why, "count 100"))
        return harness_failf(rank,
                             "the sentence does not name the tensor, the ranks and both "
                             "counts: %s",
                             why);
    if (wait_ok(hg, rank, "good"))
        return 1;
    int want = size * (size - 1) / 2;
    for (int i = 0; i < 16; i++)
        if (b[i] != want)
            return harness_failf(rank, "good[%d] = %d, want %d", i, b[i], want);
    /* The engine goes on. */
    hoop_engine_handle_t *h2;
    b[0] = 1;
    if (hoop_engine_allreduce(e, "after", b, b, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &h2) ||
        wait_ok(h2, rank, "after"))
        return 1;
    if (b[0] != size)
        return harness_failf(rank, "after = %d", b[0]);
    hoop_engine_release(hb);
    hoop_engine_release(hg);
    hoop_engine_release(h2);
    return 0;
}

Test(async, mismatched_count_fails_on_every_rank_n3, .timeout = 60)
{
    async_case_t c = {.body = body_mismatch};
    run_case(3, &c, 40);
}

/* ---- shapes: compared as Horovod compares them ------------------------------ */

/* One operation through hoop_engine_enqueue; its status (and the sentence
 * in *why once completed, or the refusal's). */
static hoop_status_t shaped(hoop_engine_t *e, hoop_engine_op_args_t a, const char *name,
                            hoop_engine_handle_t **h, const char **why)
{
    a.struct_size = sizeof a;
    a.engine = e;
    *h = hoop_engine_enqueue(&a, name);
    if (!*h) {
        *why = hoop_last_error();
        return (hoop_status_t)a.status;
    }
    hoop_status_t st = hoop_engine_wait(*h, WAIT_S);
    hoop_engine_status(*h, why);
    return st;
}

static int body_shapes(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    /* Static: a rank that fails returns while its engine may still use them. */
    static float x[17 * 1311], y[64];
    hoop_engine_handle_t *h;
    const char *why = "";
    /* The same count in other shapes (Horovod's [17, 1311] and [17, 23, 57]). */
    hoop_engine_op_args_t a = {.kind = HOOP_ENGINE_ALLREDUCE,
                               .dtype = HOOP_F32,
                               .op = HOOP_SUM,
                               .sendbuf = x,
                               .recvbuf = x,
                               .count = 17 * 1311,
                               .prescale = 1.0,
                               .postscale = 1.0,
                               .ndims = rank == 1 ? 3 : 2};
    a.dims[0] = 17;
    a.dims[1] = rank == 1 ? 23 : 1311;
    a.dims[2] = 57;
    hoop_status_t st = shaped(e, a, "reshaped", &h, &why);
    if (st != HOOP_ERR_MISMATCH || !strstr(why, "'reshaped'") ||
        !strstr(why, "rank 1 gives shape [17, 23, 57]") || !strstr(why, "gives shape [17, 1311]"))
        return harness_failf(rank, "reshaped: %s: %s", hoop_status_str(st), why);
    hoop_engine_release(h);
    /* A plain allreduce (no shape) is one dimension: against [4, 4] it differs. */
    if (rank == 0) {
        st = hoop_engine_allreduce(e, "flat", y, y, 16, HOOP_F32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                   &h);
        if (!st)
            st = hoop_engine_wait(h, WAIT_S);
        hoop_engine_status(h, &why);
    } else {
        hoop_engine_op_args_t f = {.kind = HOOP_ENGINE_ALLREDUCE,
                                   .dtype = HOOP_F32,
                                   .op = HOOP_SUM,
                                   .sendbuf = y,
                                   .recvbuf = y,
                                   .count = 16,
                                   .prescale = 1.0,
                                   .postscale = 1.0,
                                   .ndims = 2,
                                   .dims = {4, 4}};
        st = shaped(e, f, "flat", &h, &why);
    }
    if (st != HOOP_ERR_MISMATCH || !strstr(why, "rank 0 gives shape [16]") ||
        !strstr(why, "gives shape [4, 4]"))
        return harness_failf(rank, "flat: %s: %s", hoop_status_str(st), why);
    hoop_engine_release(h);
    /* An alltoall whose rows differ in size: refused, not delivered. */
    hoop_engine_op_args_t t = {.kind = HOOP_ENGINE_ALLTOALL,
                               .dtype = HOOP_F32,
                               .sendbuf = x,
                               .ndims = 3,
                               .dims = {size, rank == 0 ? 4 : 2, 3}};
    size_t splits[8];
    for (int j = 0; j < size; j++)
        splits[j] = 1;
    t.counts = splits;
    t.row_elems = (size_t)(t.dims[1] * t.dims[2]);
    st = shaped(e, t, "rows", &h, &why);
    if (st != HOOP_ERR_MISMATCH || !strstr(why, "rank 0 gives rows of shape [*, 4, 3]") ||
        !strstr(why, "gives rows of shape [*, 2, 3]"))
        return harness_failf(rank, "rows: %s: %s", hoop_status_str(st), why);
    hoop_engine_release(h);
    /* A shape that does not hold the count is refused at once. */
    hoop_engine_op_args_t w = a;
    w.ndims = 2;
    w.dims[1] = 1310;
    st = shaped(e, w, "wrong", &h, &why);
    if (st != HOOP_ERR_INVALID || h ||
        !strstr(why, "holds 22270 elements where the operation has 22287"))
        return harness_failf(rank, "wrong: %s: %s", hoop_status_str(st), why);
    /* A struct of another version, or none, is refused without a handle. */
    w.struct_size = sizeof w - 8;
    w.engine = e;
    if (hoop_engine_enqueue(&w, "old") || !strstr(hoop_last_error(), "struct_size is"))
        return harness_failf(rank, "a short struct: %s", hoop_last_error());
    if (hoop_engine_enqueue(NULL, "none") || !strstr(hoop_last_error(), "needs its struct"))
        return harness_failf(rank, "no struct: %s", hoop_last_error());
    /* Agreeing shapes run, the allgather's first dimension free, and the
     * alltoall in rows. */
    for (int i = 0; i < 64; i++)
        y[i] = (float)(rank + 1);
    hoop_engine_op_args_t ok = {.kind = HOOP_ENGINE_ALLREDUCE,
                                .dtype = HOOP_F32,
                                .op = HOOP_SUM,
                                .sendbuf = y,
                                .recvbuf = y,
                                .count = 12,
                                .prescale = 1.0,
                                .postscale = 1.0,
                                .ndims = 3,
                                .dims = {2, 3, 2}};
    if ((st = shaped(e, ok, "ok", &h, &why)))
        return harness_failf(rank, "ok: %s: %s", hoop_status_str(st), why);
    hoop_engine_release(h);
    if (y[11] != (float)(size * (size + 1) / 2) || y[12] != (float)(rank + 1))
        return harness_failf(rank, "ok: y[11] = %g, y[12] = %g", y[11], y[12]);
    hoop_engine_op_args_t b = {.kind = HOOP_ENGINE_BROADCAST,
                               .dtype = HOOP_F32,
                               .root = 1,
                               .recvbuf = y,
                               .count = 6,
                               .ndims = 2,
                               .dims = {2, 3}};
    for (int i = 0; i < 6; i++)
        y[i] = (float)(10 * rank + i);
    if ((st = shaped(e, b, "bcast", &h, &why)))
        return harness_failf(rank, "bcast: %s: %s", hoop_status_str(st), why);
    hoop_engine_release(h);
    if (y[0] != 10.0f || y[5] != 15.0f)
        return harness_failf(rank, "bcast: y[0] = %g, y[5] = %g, want 10 and 15", y[0], y[5]);
    hoop_engine_op_args_t g = {.kind = HOOP_ENGINE_ALLGATHER,
                               .dtype = HOOP_F32,
                               .sendbuf = y,
                               .count = (size_t)rank + 1,
                               .row_elems = 2,
                               .ndims = 2,
                               .dims = {rank + 1, 2}};
    if ((st = shaped(e, g, "gather", &h, &why)))
        return harness_failf(rank, "gather: %s: %s", hoop_status_str(st), why);
    size_t n = 0;
    hoop_engine_output(h, &n);
    hoop_engine_release(h);
    if (n != (size_t)(size * (size + 1)))
        return harness_failf(rank, "gather: %zu elements, want %d", n, size * (size + 1));
    for (int i = 0; i < 64; i++)
        y[i] = (float)(100 * rank + i / 3);
    t.dims[1] = 1;
    t.row_elems = 3;
    t.sendbuf = y;
    if ((st = shaped(e, t, "rows2", &h, &why)))
        return harness_failf(rank, "rows2: %s: %s", hoop_status_str(st), why);
    size_t counts[8];
    float *out = hoop_engine_output(h, &n);
    hoop_engine_counts(h, counts);
    for (int j = 0; j < size; j++)
        if (counts[j] != 3 || out[3 * j] != (float)(100 * j + rank))
            return harness_failf(rank, "rows2: from rank %d %zu elements, first %g", j, counts[j],
                                 out[3 * j]);
    hoop_engine_release(h);
    return 0;
}

Test(async, shapes_are_compared_as_horovod_compares_them_n3, .timeout = 60)
{
    async_case_t c = {.body = body_shapes};
    run_case(3, &c, 40);
}

/* A group's tensors' shapes, compared tensor by tensor: the same counts in
 * other shapes fail the group on every rank, naming the tensor and both
 * shapes; a rank without shapes counts each tensor as one dimension. */
static int group_shaped(hoop_engine_t *e, const char *name, float *a, float *b, const int *ndims,
                        const size_t *dims, hoop_status_t want, const char *says, int rank)
{
    const void *s[2] = {a, b};
    void *r[2] = {a, b};
    size_t counts[2] = {12, 6};
    hoop_engine_handle_t *h;
    hoop_status_t st =
        ndims ? hoop_engine_grouped_allreduce_shaped(e, name, 2, s, r, counts, ndims, dims,
                                                     HOOP_F32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &h)
              : hoop_engine_grouped_allreduce(e, name, 2, s, r, counts, HOOP_F32, HOOP_SUM, 1.0,
                                              1.0, NULL, NULL, &h);
    if (st)
        return harness_failf(rank, "%s: enqueue: %s", name, hoop_last_error());
    st = hoop_engine_wait(h, WAIT_S);
    const char *why = "";
    hoop_engine_status(h, &why);
    int bad = st != want || (says && !strstr(why, says));
    if (bad)
        harness_failf(rank, "%s: %s (%s), want %s saying \"%s\"", name, hoop_status_str(st), why,
                      hoop_status_str(want), says ? says : "");
    hoop_engine_release(h);
    return bad;
}

static int body_group_shapes(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static float a[12], b[6];
    for (int i = 0; i < 12; i++)
        a[i] = (float)(rank + i);
    for (int i = 0; i < 6; i++)
        b[i] = (float)(2 * rank + i);
    int nd[2] = {2, 1};
    size_t same[3] = {3, 4, 6};
    /* agreeing shapes: exact sums */
    if (group_shaped(e, "g.same", a, b, nd, same, HOOP_OK, NULL, rank))
        return 1;
    int sr = size * (size - 1) / 2;
    if (a[11] != (float)(sr + size * 11) || b[5] != (float)(2 * sr + size * 5))
        return harness_failf(rank, "g.same: a[11] = %g, b[5] = %g", a[11], b[5]);
    /* tensor 0 transposed on the last rank */
    size_t other[3] = {4, 3, 6};
    if (group_shaped(e, "g.transposed", a, b, nd, rank == size - 1 ? other : same,
                     HOOP_ERR_MISMATCH, "tensor 0 of the group shape [", rank))
        return 1;
    /* no shapes on rank 0 against one-dimensional ones: agree; against
     * two dimensions: not */
    int flat[2] = {1, 1};
    size_t flat_dims[2] = {12, 6};
    if (group_shaped(e, "g.flat", a, b, rank ? flat : NULL, flat_dims, HOOP_OK, NULL, rank) ||
        group_shaped(e, "g.flat2", a, b, rank ? nd : NULL, same, HOOP_ERR_MISMATCH, "[12]", rank))
        return 1;
    /* a shape that does not hold its count: refused at once */
    size_t wrong[3] = {3, 5, 6};
    const void *s[2] = {a, b};
    void *r[2] = {a, b};
    size_t counts[2] = {12, 6};
    hoop_engine_handle_t *h;
    if (hoop_engine_grouped_allreduce_shaped(e, "g.wrong", 2, s, r, counts, nd, wrong, HOOP_F32,
                                             HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                             &h) != HOOP_ERR_INVALID ||
        !strstr(hoop_last_error(), "tensor 0 of the group"))
        return harness_failf(rank, "a shape not holding its count: %s", hoop_last_error());
    /* the cache keeps shapes: the same name again in another shape fails */
    if (group_shaped(e, "g.same", a, b, nd, same, HOOP_OK, NULL, rank) ||
        group_shaped(e, "g.same", a, b, nd, rank == 0 ? other : same, HOOP_ERR_MISMATCH,
                     "tensor 0 of the group", rank))
        return 1;
    return 0;
}

Test(async, a_groups_shapes_are_compared_tensor_by_tensor_n3, .timeout = 60)
{
    async_case_t c = {.body = body_group_shapes};
    run_case(3, &c, 40);
}

/* ---- where the data lies: host against device memory ---------------------- */

/* A rank's buffers are "device memory" while it forces the emulation on
 * (gpu.h: every buffer is GPU 0's, the device pipeline run over host
 * memory), host memory while it forces it off: each rank is a process, its
 * switch its own, whatever HOOP_GPU_EMULATE the pass sets. */

/* A lone allreduce (sum of 16 i32, in place) or a group of three tensors
 * (5 elements, none, 3) of the same; its status, the sentence in *why. */
static hoop_status_t where_op(hoop_engine_t *e, const char *name, int group, int32_t *x, int32_t *y,
                              const char **why)
{
    hoop_engine_handle_t *h;
    hoop_status_t st;
    *why = "";
    if (group) {
        const void *s[3] = {x, NULL, y};
        void *r[3] = {x, NULL, y};
        size_t counts[3] = {5, 0, 3};
        st = hoop_engine_grouped_allreduce(e, name, 3, s, r, counts, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                           NULL, NULL, &h);
    } else {
        st = hoop_engine_allreduce(e, name, x, x, 16, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &h);
    }
    if (st) {
        *why = hoop_last_error();
        return st;
    }
    st = hoop_engine_wait(h, WAIT_S);
    if (st == HOOP_OK)
        st = hoop_engine_status(h, why);
    else
        hoop_engine_status(h, why);
    static char kept[2048];
    snprintf(kept, sizeof kept, "%s", *why);
    *why = kept;
    hoop_engine_release(h);
    return st;
}

/* name on every rank, rank 0's buffers on the (emulated) GPU and rank 1's
 * on the host: a mismatch on both, the sentence naming both kinds. */
static int where_refused(hoop_engine_t *e, const char *name, int group, int rank)
{
    static int32_t x[16], y[3];
    hoop_gpu_emulate_force(rank == 0);
    const char *why;
    hoop_status_t st = where_op(e, name, group, x, y, &why);
    hoop_gpu_emulate_force(0);
    char quoted[64];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    int named = strstr(why, "rank 0 gives device (GPU) memory but rank 1 gives host memory") ||
                strstr(why, "rank 1 gives host memory but rank 0 gives device (GPU) memory");
    if (st != HOOP_ERR_MISMATCH || !named || !strstr(why, quoted))
        return harness_failf(rank,
                             "%s on device memory on rank 0, host memory on rank 1: %s (%s); "
                             "wanted a mismatch naming both ranks and where each one's data lies",
                             name, hoop_status_str(st), why);
    fprintf(stderr, "rank %d: %s\n", rank, why);
    return 0;
}

/* name on every rank, every rank's buffers on the host (dev 0) or the
 * (emulated) GPU: exact sums. */
static int where_agreed(hoop_engine_t *e, const char *name, int group, int dev, int rank, int size)
{
    static int32_t x[16], y[3];
    for (int i = 0; i < 16; i++)
        x[i] = val(rank, 1, (size_t)i);
    for (int i = 0; i < 3; i++)
        y[i] = val(rank, 2, (size_t)i);
    hoop_gpu_emulate_force(dev);
    const char *why;
    hoop_status_t st = where_op(e, name, group, x, y, &why);
    hoop_gpu_emulate_force(0);
    if (st)
        return harness_failf(rank, "%s on %s memory on every rank: %s (%s)", name,
                             dev ? "device" : "host", hoop_status_str(st), why);
    for (int i = 0; i < (group ? 5 : 16); i++) {
        int32_t want = 0;
        for (int r = 0; r < size; r++)
            want += val(r, 1, (size_t)i);
        if (x[i] != want)
            return harness_failf(rank, "%s[%d] = %d, want %d", name, i, x[i], want);
    }
    for (int i = 0; group && i < 3; i++) {
        int32_t want = 0;
        for (int r = 0; r < size; r++)
            want += val(r, 2, (size_t)i);
        if (y[i] != want)
            return harness_failf(rank, "%s: tensor 2 [%d] = %d, want %d", name, i, y[i], want);
    }
    return 0;
}

static int body_where(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    int rc = where_refused(e, "w.lone", 0, rank) || where_refused(e, "w.group", 1, rank) ||
             /* the engine goes on, on either side (a group's tensor of no
              * elements and no buffer takes no side) */
             where_agreed(e, "w.after", 0, 0, rank, size) ||
             where_agreed(e, "w.after.group", 1, 0, rank, size) ||
             where_agreed(e, "w.after.dev", 0, 1, rank, size) ||
             where_agreed(e, "w.after.dev.group", 1, 1, rank, size) ||
             /* a name the cache holds, agreed on the host, then given on
              * the GPU by rank 0: not taken from the cache, refused */
             where_agreed(e, "w.cached", 0, 0, rank, size) ||
             where_agreed(e, "w.cached", 0, 0, rank, size) ||
             where_refused(e, "w.cached", 0, rank) || where_agreed(e, "w.cached", 0, 0, rank, size);
    /* The fusion buffer on the "GPU" was allocated under the emulation: the
     * engine frees it under it too. */
    hoop_gpu_emulate_force(1);
    return rc;
}

Test(async, host_against_device_memory_fails_on_every_rank_n2, .timeout = 60)
{
    async_case_t c = {.body = body_where};
    run_case(2, &c, 40);
}

/* An allgather's rank of no rows gives no buffer and takes no side: rank 0
 * announces first and gives none, and ranks 1 and 2, giving rows on the
 * (emulated) GPU, agree; with one of them on the host they do not (the
 * first rank that gives rows is the one the others are compared with). */
static int body_where_rows(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t in[6];
    for (int i = 0; i < 6; i++)
        in[i] = rank * 100 + i;
    /* Round 0, whose output lies on the "GPU", comes last, and the
     * emulation stays as it was for it: the engine's thread may drop its
     * reference to the handle (freeing that output) after this thread has
     * released it, and it must do so under the same emulation. */
    static const int rounds[3] = {1, 2, 0};
    for (int k = 0; k < 3; k++) {
        int round = rounds[k];
        char name[32];
        snprintf(name, sizeof name, "rows.%d", round);
        if (rank > 0) /* rank 0's announcement is the first */
            harness_sleep_ms(200);
        /* round 0: ranks 1 and 2 on the GPU; 1: rank 1 only; 2: rank 2 only */
        int dev = round == 0 ? rank > 0 : rank == round;
        hoop_gpu_emulate_force(dev);
        hoop_engine_handle_t *h;
        hoop_status_t st = hoop_engine_allgather(e, name, rank ? in : NULL, rank ? 2 : 0, 3,
                                                 HOOP_I32, NULL, NULL, &h);
        if (st)
            return harness_fail(rank, name, st);
        st = hoop_engine_wait(h, WAIT_S);
        const char *why = "";
        hoop_engine_status(h, &why);
        if (round == 0) {
            size_t n = 0;
            const int32_t *out = st ? NULL : hoop_engine_output(h, &n);
            if (st || n != 12)
                return harness_failf(rank, "%s: %s (%s), %zu elements", name, hoop_status_str(st),
                                     why, n);
            for (size_t i = 0; i < 12; i++)
                if (out[i] != (int32_t)((1 + i / 6) * 100 + i % 6))
                    return harness_failf(rank, "%s[%zu] = %d", name, i, out[i]);
        } else if (st != HOOP_ERR_MISMATCH || !strstr(why, "rank 1 gives ") ||
                   !strstr(why, "rank 2 gives ") ||
                   !strstr(why, round == 1 ? "rank 1 gives device (GPU) memory"
                                           : "rank 2 gives device (GPU) memory")) {
            return harness_failf(rank, "%s: %s (%s), wanted a mismatch of ranks 1 and 2", name,
                                 hoop_status_str(st), why);
        }
        hoop_engine_release(h);
        if (round)
            hoop_gpu_emulate_force(0);
    }
    (void)size;
    return 0;
}

Test(async, a_rank_of_no_rows_takes_no_side_n3, .timeout = 60)
{
    async_case_t c = {.body = body_where_rows};
    run_case(3, &c, 40);
}

/* ---- the cache: the second step is agreed without the gather --------------- */

static int body_cache(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    enum { T = 10 };
    int32_t buf[T][64];
    hoop_engine_handle_t *h[T];
    hoop_engine_stats_t s = {.struct_size = sizeof s};
    uint64_t hits_before = 0;
    for (int step = 0; step < 4; step++) {
        /* Step 3 changes every tensor's count: the entries are stale. */
        size_t n = step == 3 ? 32 : 64;
        for (int t = 0; t < T; t++) {
            char name[32];
            snprintf(name, sizeof name, "w%d", t);
            for (size_t i = 0; i < n; i++)
                buf[t][i] = val(rank, t + step, i);
            if (hoop_engine_allreduce(e, name, buf[t], buf[t], n, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                      NULL, NULL, &h[t]))
                return harness_fail(rank, name, HOOP_ERR_INVALID);
        }
        for (int t = 0; t < T; t++) {
            if (wait_ok(h[t], rank, "w"))
                return 1;
            hoop_engine_release(h[t]);
            for (size_t i = 0; i < n; i++) {
                int32_t want = 0;
                for (int r = 0; r < size; r++)
                    want += val(r, t + step, i);
                if (buf[t][i] != want)
                    return harness_failf(rank, "step %d w%d[%zu] = %d, want %d", step, t, i,
                                         buf[t][i], want);
            }
        }
        hoop_engine_stats(e, &s);
        if (step == 0)
            hits_before = s.cache_hits;
        fprintf(stderr, "rank %d step %d: cache hits %llu negotiations %llu\n", rank, step,
                (unsigned long long)s.cache_hits, (unsigned long long)s.negotiations);
    }
    if (hits_before != 0)
        return harness_failf(rank, "%llu cache hits in the first step",
                             (unsigned long long)hits_before);
    if (s.cache_hits < 2 * T)
        return harness_failf(rank, "%llu cache hits after steps 1 and 2, want at least %d",
                             (unsigned long long)s.cache_hits, 2 * T);
    return 0;
}

Test(async, cache_agrees_after_the_first_step_n3, .timeout = 60)
{
    async_case_t c = {.body = body_cache};
    run_case(3, &c, 40);
}

/* Names that share a bucket of the cache's index, more of them than the
 * cache holds: slots are evicted and refilled inside one chain, and the
 * names kept are still found through it. */
static int body_cache_chain(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    enum { T = 6, KEPT = 4, STEPS = 7 };
    char names[T][32];
    int found = 0;
    unsigned bucket = eng_hash("c0");
    for (int d = 0; d < 1000000 && found < T; d++) {
        char n[32];
        snprintf(n, sizeof n, "c%d", d);
        if (eng_hash(n) == bucket)
            snprintf(names[found++], sizeof names[0], "%s", n);
    }
    if (found < T)
        return harness_failf(rank, "found %d names in one bucket, want %d", found, T);
    int32_t buf[T][16];
    hoop_engine_handle_t *h[T];
    hoop_engine_stats_t s = {.struct_size = sizeof s};
    uint64_t hits_at[STEPS];
    for (int step = 0; step < STEPS; step++) {
        /* Steps 0-2: all six (the cache holds four); then the first four. */
        int nt = step < 3 ? T : KEPT;
        for (int t = 0; t < nt; t++) {
            for (int i = 0; i < 16; i++)
                buf[t][i] = val(rank, t + step, (size_t)i);
            if (hoop_engine_allreduce(e, names[t], buf[t], buf[t], 16, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                      NULL, NULL, &h[t]))
                return harness_fail(rank, names[t], HOOP_ERR_INVALID);
        }
        for (int t = 0; t < nt; t++) {
            if (wait_ok(h[t], rank, names[t]))
                return 1;
            hoop_engine_release(h[t]);
            for (int i = 0; i < 16; i++) {
                int32_t want = 0;
                for (int r = 0; r < size; r++)
                    want += val(r, t + step, (size_t)i);
                if (buf[t][i] != want)
                    return harness_failf(rank, "step %d %s[%d] = %d, want %d", step, names[t], i,
                                         buf[t][i], want);
            }
        }
        hoop_engine_stats(e, &s);
        hits_at[step] = s.cache_hits;
    }
    /* By step 5 the four names are in the cache: each step after is
     * agreed through it. */
    if (hits_at[STEPS - 1] - hits_at[STEPS - 3] < 2 * KEPT)
        return harness_failf(rank, "%llu cache hits in the last two steps, want %d",
                             (unsigned long long)(hits_at[STEPS - 1] - hits_at[STEPS - 3]),
                             2 * KEPT);
    return 0;
}

Test(async, cache_evicts_and_finds_within_one_bucket_n2, .timeout = 60)
{
    async_case_t c = {.body = body_cache_chain, .env = {"HOOP_CACHE_CAPACITY=4"}};
    run_case(2, &c, 40);
}

Test(async, cache_off_still_exact_n2, .timeout = 60)
{
    async_case_t c = {.body = body_scaled, .env = {"HOOP_CACHE_CAPACITY=0"}};
    run_case(2, &c, 40);
}

/* ---- stalls: rank 0 logs the missing rank; a shutdown time fails it -------- */

static int read_file(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 0;
}

static int body_stall(hoop_engine_t *e, int rank, int size, void *arg)
{
    const char *log_path = arg;
    int32_t x = 1;
    hoop_engine_handle_t *h;
    if (rank == 1) {
        struct timespec ts = {2, 500000000};
        nanosleep(&ts, NULL);
    }
    if (hoop_engine_allreduce(e, "late", &x, &x, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &h) ||
        wait_ok(h, rank, "late"))
        return 1;
    hoop_engine_release(h);
    if (x != size)
        return harness_failf(rank, "late = %d", x);
    if (rank == 0) {
        char text[16384];
        if (read_file(log_path, text, sizeof text))
            return harness_failf(rank, "cannot read its log %s", log_path);
        if (!strstr(text, "'late'") || !strstr(text, "rank(s) 1 "))
            return harness_failf(rank, "the log does not name 'late' and rank 1:\n%s", text);
        fprintf(stdout, "%s", ""); /* keep stdout untouched by the library */
    }
    return 0;
}

Test(async, stall_is_logged_with_the_missing_rank_n2, .timeout = 60)
{
    char path[] = "/tmp/hoop_stall_XXXXXX";
    make_temp(path);
    async_case_t c = {
        .body = body_stall, .arg = path, .env = {"HOOP_STALL_CHECK_TIME=1"}, .stderr_path = path};
    run_case(2, &c, 40);
    unlink(path);
}

static int body_stall_shutdown(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    static int32_t x = 1;
    hoop_engine_handle_t *h, *b;
    if (rank == 0) {
        double t0 = harness_now();
        if (hoop_engine_allreduce(e, "never", &x, &x, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                  &h))
            return harness_failf(rank, "enqueue");
        hoop_status_t st = hoop_engine_wait(h, WAIT_S);
        const char *why = "";
        hoop_engine_status(h, &why);
        fprintf(stderr, "rank 0: never: %s after %.1f s: %s\n", hoop_status_str(st),
                harness_now() - t0, why);
        if (st != HOOP_ERR_TIMEOUT || !strstr(why, "'never'") || !strstr(why, "rank(s) 1 "))
            return harness_failf(rank, "want a timeout naming 'never' and rank 1");
        hoop_engine_release(h);
    } else {
        /* Enqueue the barrier about when rank 0 does, after its 'never'
         * failed (at 2 s): early, the barrier would stall past 2 s too. */
        struct timespec ts = {2, 500000000};
        nanosleep(&ts, NULL);
    }
    if (hoop_engine_barrier(e, NULL, NULL, &b) || wait_ok(b, rank, "barrier"))
        return 1;
    hoop_engine_release(b);
    return 0;
}

Test(async, stall_shutdown_fails_the_name_naming_the_rank_n2, .timeout = 60)
{
    async_case_t c = {.body = body_stall_shutdown,
                      .env = {"HOOP_STALL_CHECK_TIME=1", "HOOP_STALL_SHUTDOWN_TIME=2"}};
    run_case(2, &c, 40);
}

/* ---- join: uneven step counts ----------------------------------------------- */

static int body_join(hoop_engine_t *e, int rank, int size, void *arg)
{
    /* arg non-NULL: the same names every step, so that after the first
     * the cache answers, joined ranks saying yes for their zeros. */
    int same_names = arg != NULL;
    static int32_t s[8];
    static float a[8];
    int steps = rank + 2;
    for (int k = 0; k < steps; k++) {
        char n1[32], n2[32];
        snprintf(n1, sizeof n1, "sum.%d", same_names ? 0 : k);
        snprintf(n2, sizeof n2, "avg.%d", same_names ? 0 : k);
        for (int i = 0; i < 8; i++) {
            s[i] = 1;
            a[i] = 3.0f;
        }
        hoop_engine_handle_t *h1, *h2;
        if (hoop_engine_allreduce(e, n1, s, s, 8, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &h1) ||
            hoop_engine_allreduce(e, n2, a, a, 8, HOOP_F32, HOOP_AVG, 1.0, 1.0, NULL, NULL, &h2) ||
            wait_ok(h1, rank, n1) || wait_ok(h2, rank, n2))
            return 1;
        hoop_engine_release(h1);
        hoop_engine_release(h2);
        int active = 0;
        for (int r = 0; r < size; r++)
            active += r + 2 > k;
        /* Joined ranks give zeros; AVG divides by every rank. */
        for (int i = 0; i < 8; i++)
            if (s[i] != active || a[i] != 3.0f * (float)active / (float)size)
                return harness_failf(rank, "step %d: sum %d avg %g, want %d and %g", k, s[i], a[i],
                                     active, 3.0 * active / size);
    }
    if (same_names) {
        hoop_engine_stats_t st = {.struct_size = sizeof st};
        hoop_engine_stats(e, &st);
        if (st.cache_hits < (uint64_t)(2 * (steps - 1)))
            return harness_failf(rank, "%llu cache hits in %d steps of 2 names",
                                 (unsigned long long)st.cache_hits, steps);
    }
    if (rank == size - 1) {
        /* Everyone else has joined: an allgather cannot go on. */
        static int32_t v = 5;
        hoop_engine_handle_t *g;
        if (hoop_engine_allgather(e, "gather_after_join", &v, 1, 1, HOOP_I32, NULL, NULL, &g))
            return harness_failf(rank, "enqueue allgather");
        hoop_status_t st = hoop_engine_wait(g, WAIT_S);
        const char *why = "";
        hoop_engine_status(g, &why);
        if (st != HOOP_ERR_INVALID || !strstr(why, "joined"))
            return harness_failf(rank, "allgather after the others joined: %s: %s",
                                 hoop_status_str(st), why);
        hoop_engine_release(g);
    }
    hoop_engine_handle_t *j;
    if (hoop_engine_join(e, NULL, NULL, &j) || wait_ok(j, rank, "join"))
        return 1;
    int last = hoop_engine_last_joined(j);
    hoop_engine_release(j);
    if (last != size - 1)
        return harness_failf(rank, "join says rank %d joined last, want %d", last, size - 1);
    /* Everyone joined: the engine is back to normal. */
    s[0] = 1;
    hoop_engine_handle_t *h;
    if (hoop_engine_allreduce(e, "after_join", s, s, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                              &h) ||
        wait_ok(h, rank, "after_join"))
        return 1;
    hoop_engine_release(h);
    if (s[0] != size)
        return harness_failf(rank, "after_join = %d", s[0]);
    return 0;
}

Test(async, join_with_uneven_steps_n3, .timeout = 60)
{
    async_case_t c = {.body = body_join};
    run_case(3, &c, 40);
}

Test(async, join_with_uneven_steps_through_the_cache_n3, .timeout = 60)
{
    static int yes = 1;
    async_case_t c = {.body = body_join, .arg = &yes};
    run_case(3, &c, 40);
}

/* ---- a rank killed while handles are pending ------------------------------- */

static int body_killed(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t x[4][64];
    hoop_engine_handle_t *h;
    if (hoop_engine_allreduce(e, "first", x[0], x[0], 64, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                              &h) ||
        wait_ok(h, rank, "first"))
        return 1;
    hoop_engine_release(h);
    if (rank == size - 1) {
        /* Not at once: a process killed just as a collective ends may
         * reset its connections before the others have read the end of
         * that collective (unread bytes make the kernel send a reset), so
         * "first" could fail on them. 300 ms later the engines are in their
         * cycles, with handles pending on the others. */
        struct timespec ts = {0, 300000000};
        nanosleep(&ts, NULL);
        raise(SIGKILL);
    }
    hoop_engine_handle_t *p[3];
    for (int k = 0; k < 3; k++) {
        char name[32];
        snprintf(name, sizeof name, "pending.%d", k);
        if (hoop_engine_allreduce(e, name, x[k + 1], x[k + 1], 64, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                  NULL, NULL, &p[k]))
            return harness_failf(rank, "enqueue %s", name);
    }
    char dead[32];
    snprintf(dead, sizeof dead, "rank %d", size - 1);
    for (int k = 0; k < 3; k++) {
        hoop_status_t st = hoop_engine_wait(p[k], WAIT_S);
        const char *why = "";
        hoop_engine_status(p[k], &why);
        fprintf(stderr, "rank %d: pending.%d: %s: %s\n", rank, k, hoop_status_str(st), why);
        if (st == HOOP_OK || st == HOOP_ERR_TIMEOUT || !strstr(why, dead))
            return harness_failf(rank, "pending.%d: want a failure naming %s", k, dead);
        hoop_engine_release(p[k]);
    }
    /* And so does what comes after. */
    hoop_status_t st = hoop_engine_allreduce(e, "later", x[0], x[0], 1, HOOP_I32, HOOP_SUM, 1.0,
                                             1.0, NULL, NULL, &h);
    if (st == HOOP_OK)
        return harness_failf(rank, "an enqueue after the failure was taken");
    return 0;
}

Test(async, killed_rank_fails_every_pending_handle_n3, .timeout = 60)
{
    static harness_job_t job;
    cr_assert(harness_job_init(&job));
    async_case_t c = {.body = body_killed};
    for (int r = 0; r < 3; r++)
        cr_assert(harness_spawn_raw(&job, r, 3, async_rank, &c) > 0);
    harness_wait(&job, 40, 20);
    for (int r = 0; r < 2; r++)
        cr_expect(!job.procs[r].hung && job.procs[r].signal == 0 && job.procs[r].exit_code == 0,
                  "survivor %d failed:\n%s", r, job.report);
    cr_expect(job.procs[2].signal == SIGKILL, "rank 2 was to die by SIGKILL:\n%s", job.report);
}

/* ---- the timeline ------------------------------------------------------------ */

/* Exit status of python3 checking that path is a JSON array holding every
 * name of want (comma-separated) among its events' names and its tracks'
 * names. */
static int timeline_check(const char *path, const char *want)
{
    char cmd[2048];
    snprintf(
        cmd, sizeof cmd,
        "python3 -c 'import json,sys\n"
        "ev = json.load(open(sys.argv[1]))\n"
        "assert isinstance(ev, list), \"not an array\"\n"
        "names = {e.get(\"name\") for e in ev} | {e.get(\"args\", {}).get(\"name\") for e in ev}\n"
        "missing = [w for w in sys.argv[2].split(\",\") if w not in names]\n"
        "assert not missing, \"missing: %%s\" %% missing\n"
        "print(\"%%d events\" %% len(ev), file=sys.stderr)' %s %s",
        path, want);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static int body_timeline(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)size;
    int kill_at = *(int *)arg;
    static int32_t w[4][256];
    for (int step = 0; step < 30; step++) {
        hoop_engine_handle_t *h[4];
        for (int t = 0; t < 4; t++) {
            char name[32];
            snprintf(name, sizeof name, "w%d", t);
            if (hoop_engine_allreduce(e, name, w[t], w[t], 256, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL,
                                      NULL, &h[t]))
                return harness_failf(rank, "enqueue");
        }
        for (int t = 0; t < 4; t++) {
            if (wait_ok(h[t], rank, "w"))
                return 1;
            hoop_engine_release(h[t]);
        }
        if (step == kill_at)
            raise(SIGKILL);
    }
    return 0;
}

static const char timeline_names[] =
    "NEGOTIATE_ALLREDUCE,ALLREDUCE,QUEUE,MEMCPY_IN_FUSION_BUFFER,HOOP_ALLREDUCE,"
    "MEMCPY_OUT_FUSION_BUFFER,w0,w3";

Test(async, timeline_is_json_with_horovods_activities_n2, .timeout = 60)
{
    char path[] = "/tmp/hoop_timeline_XXXXXX";
    make_temp(path);
    char env[64 + sizeof path];
    snprintf(env, sizeof env, "HOOP_TIMELINE=%s", path);
    int never = -1;
    async_case_t c = {.body = body_timeline, .arg = &never, .env = {env, "HOOP_CYCLE_TIME=5"}};
    run_case(2, &c, 40);
    cr_expect(timeline_check(path, timeline_names) == 0,
              "the timeline %s does not parse or lacks "
              "events",
              path);
    unlink(path);
}

static int engine_split(hoop_engine_t *e, int rank, int color, hoop_status_t want,
                        hoop_comm_t **child);

/* A process set's engine (over a split) leaves the job's timeline alone:
 * every rank of a set that started with rank 0's file name would write
 * over it. */
static int body_timeline_split(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    static int32_t w[64];
    hoop_engine_handle_t *h;
    if (hoop_engine_allreduce(e, "in.job", w, w, 64, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                              &h) ||
        wait_ok(h, rank, "in.job"))
        return 1;
    hoop_engine_release(h);
    hoop_comm_t *child;
    if (engine_split(e, rank, rank % 2, HOOP_OK, &child))
        return 1;
    hoop_engine_t *ce;
    if (hoop_engine_create_with(&ce, child))
        return harness_failf(rank, "an engine over the set: %s", hoop_last_error());
    if (hoop_engine_allreduce(e, "after.set", w, w, 64, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                              &h) ||
        wait_ok(h, rank, "after.set"))
        return 1;
    hoop_engine_release(h);
    /* the set's operations last, each a track of its own in any timeline
     * the set's engine would write */
    for (int i = 0; i < 40; i++) {
        char name[32];
        snprintf(name, sizeof name, "in.set.%d", i);
        if (hoop_engine_allreduce(ce, name, w, w, 64, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                  &h) ||
            wait_ok(h, rank, name))
            return 1;
        hoop_engine_release(h);
    }
    hoop_engine_destroy(ce);
    return 0;
}

Test(async, a_process_sets_engine_leaves_the_timeline_alone_n3, .timeout = 60)
{
    char path[] = "/tmp/hoop_timeline_XXXXXX";
    make_temp(path);
    char env[64 + sizeof path];
    snprintf(env, sizeof env, "HOOP_TIMELINE=%s", path);
    async_case_t c = {.body = body_timeline_split, .env = {env, "HOOP_CYCLE_TIME=5"}};
    run_case(3, &c, 40);
    cr_expect(timeline_check(path, "in.job,after.set") == 0,
              "the job's timeline %s does not parse or lost its events", path);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "grep -q in.set %s", path);
    cr_expect(system(cmd) != 0, "the set's operation is in the job's timeline %s", path);
    unlink(path);
}

Test(async, timeline_parses_after_a_kill_n1, .timeout = 60)
{
    char path[] = "/tmp/hoop_timeline_XXXXXX";
    make_temp(path);
    char env[64 + sizeof path];
    snprintf(env, sizeof env, "HOOP_TIMELINE=%s", path);
    int at = 20;
    async_case_t c = {.body = body_timeline, .arg = &at, .env = {env, "HOOP_CYCLE_TIME=1"}};
    static harness_job_t job;
    cr_assert(harness_job_init(&job));
    cr_assert(harness_spawn_raw(&job, 0, 1, async_rank, &c) > 0);
    harness_wait(&job, 40, 5);
    cr_assert(job.procs[0].signal == SIGKILL, "the rank was to die by SIGKILL:\n%s", job.report);
    cr_expect(timeline_check(path, "NEGOTIATE_ALLREDUCE,w0") == 0,
              "the timeline %s of a killed rank does not parse", path);
    unlink(path);
}

/* Exit status of python3 checking that every E event of the timeline at
 * path follows a B of its track (none ends what it never began). */
static int timeline_balanced(const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys\n"
             "open_ = {}\n"
             "for e in json.load(open(sys.argv[1])):\n"
             "    p = e.get(\"pid\")\n"
             "    open_[p] = open_.get(p, 0) + {\"B\": 1, \"E\": -1}.get(e.get(\"ph\"), 0)\n"
             "    assert open_[p] >= 0, \"an E with no B on track %%s\" %% p' %s",
             path);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

/* Steps of four named allreduces; rank 0's timeline started at run time
 * in step 5, while that step's allreduces are under way, with cycle
 * marks, and stopped before step 20: by step 25 the engine has taken the
 * stop, and the file must not grow after it. */
static int body_timeline_at_run_time(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)size;
    const char *path = arg;
    static int32_t w[5][256];
    long stopped_size = -1;
    hoop_status_t st;
    for (int step = 0; step < 30; step++) {
        if (step == 20 && (st = hoop_engine_timeline_stop(e)))
            return harness_fail(rank, "hoop_engine_timeline_stop", st);
        if (step == 25 && rank == 0)
            stopped_size = file_size(path);
        /* At step 5 rank 1 comes late, so that rank 0's operations are
         * under way when its timeline starts. */
        if (step == 5 && rank == 1)
            harness_sleep_ms(20);
        /* Step 5 also has a name not seen before, whose negotiation has
         * begun on rank 0 when its timeline starts. */
        hoop_engine_handle_t *h[5];
        int n = step == 5 ? 5 : 4;
        for (int t = 0; t < n; t++) {
            char name[32] = "fresh";
            if (t < 4)
                snprintf(name, sizeof name, "w%d", t);
            if (hoop_engine_allreduce(e, name, w[t], w[t], 256, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL,
                                      NULL, &h[t]))
                return harness_failf(rank, "enqueue");
        }
        if (step == 5 && rank == 0)
            harness_sleep_ms(5);
        if (step == 5 && (st = hoop_engine_timeline_start(e, path, 1)))
            return harness_fail(rank, "hoop_engine_timeline_start", st);
        for (int t = 0; t < n; t++) {
            if (wait_ok(h[t], rank, "w"))
                return 1;
            hoop_engine_release(h[t]);
        }
    }
    if (rank == 0 && (stopped_size <= 0 || file_size(path) != stopped_size))
        return harness_failf(rank,
                             "the timeline was %ld bytes five steps after the stop and %ld "
                             "at the end: it was still written to",
                             stopped_size, file_size(path));
    return 0;
}

Test(async, timeline_started_and_stopped_at_run_time_n2, .timeout = 60)
{
    char path[] = "/tmp/hoop_timeline_XXXXXX";
    make_temp(path);
    unlink(path); /* made by the start, by rank 0 only */
    async_case_t c = {.body = body_timeline_at_run_time, .arg = path, .env = {"HOOP_CYCLE_TIME=2"}};
    run_case(2, &c, 40);
    cr_expect(timeline_check(path, "ALLREDUCE,QUEUE,CYCLE_START,w0,w3") == 0,
              "the timeline %s started at run time does not parse or lacks events", path);
    cr_expect(timeline_balanced(path) == 0, "the timeline %s ends what it did not begin", path);
    unlink(path);
}

/* A path that cannot be created: HOOP_ERR_INVALID at once on rank 0,
 * naming it; rank 1 writes no timeline and is not asked to. */
static int body_timeline_bad_path(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    const char *bad = "/nonexistent-dir-of-hoop/timeline.json";
    hoop_status_t st = hoop_engine_timeline_start(e, bad, 0);
    if (rank != 0)
        return st ? harness_fail(rank, "hoop_engine_timeline_start on rank 1", st) : 0;
    if (st != HOOP_ERR_INVALID)
        return harness_failf(rank, "a timeline at %s: wanted HOOP_ERR_INVALID, got %s", bad,
                             hoop_status_str(st));
    if (!strstr(hoop_last_error(), bad))
        return harness_failf(rank, "the sentence does not name the path: %s", hoop_last_error());
    if (hoop_engine_timeline_start(e, "", 0) != HOOP_ERR_INVALID)
        return harness_failf(rank, "an empty path was taken");
    return 0;
}

Test(async, timeline_start_names_a_path_it_cannot_write_n2, .timeout = 60)
{
    async_case_t c = {.body = body_timeline_bad_path};
    run_case(2, &c, 40);
}

/* ---- autotune ------------------------------------------------------------------ */

static int body_autotune(hoop_engine_t *e, int rank, int size, void *arg)
{
    const char *log_path = arg;
    static int32_t w[4][1024];
    for (int step = 0; step < 90; step++) {
        hoop_engine_handle_t *h[4];
        for (int t = 0; t < 4; t++) {
            char name[32];
            snprintf(name, sizeof name, "w%d", t);
            if (hoop_engine_allreduce(e, name, w[t], w[t], 1024, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL,
                                      NULL, &h[t]))
                return harness_failf(rank, "enqueue");
        }
        for (int t = 0; t < 4; t++) {
            if (wait_ok(h[t], rank, "w"))
                return 1;
            hoop_engine_release(h[t]);
        }
    }
    /* Every rank fuses with rank 0's threshold. */
    hoop_engine_stats_t s = {.struct_size = sizeof s};
    hoop_engine_stats(e, &s);
    static uint64_t thr[2];
    thr[0] = s.fusion_threshold;
    thr[1] = ~s.fusion_threshold;
    hoop_engine_handle_t *h;
    if (hoop_engine_allreduce(e, "thr", thr, thr, 2, HOOP_U64, HOOP_MAX, 1.0, 1.0, NULL, NULL,
                              &h) ||
        wait_ok(h, rank, "thr"))
        return 1;
    hoop_engine_release(h);
    if (thr[0] != s.fusion_threshold || ~thr[1] != s.fusion_threshold)
        return harness_failf(rank, "ranks fuse up to different thresholds (this one %llu)",
                             (unsigned long long)s.fusion_threshold);
    if (rank == 0) {
        char text[4096];
        if (read_file(log_path, text, sizeof text))
            return harness_failf(rank, "no autotune log");
        int lines = 0;
        for (char *p = text; (p = strchr(p, '\n')); p++)
            lines++;
        int best = strstr(text, ",1\n") != NULL;
        fprintf(stderr, "autotune log:\n%s", text);
        if (strncmp(text, "cycle_time_ms,tensor_fusion_threshold,score,best\n", 49) != 0 ||
            lines != 8 || !best)
            return harness_failf(rank, "want a header, 6 pairs and the pair kept");
        char want[64];
        snprintf(want, sizeof want, ",%llu,", (unsigned long long)s.fusion_threshold);
        if (!strstr(text, want))
            return harness_failf(rank, "the threshold in use (%llu) is not in the log",
                                 (unsigned long long)s.fusion_threshold);
    }
    (void)size;
    return 0;
}

Test(async, autotune_tries_pairs_and_keeps_one_n2, .timeout = 90)
{
    char path[] = "/tmp/hoop_autotune_XXXXXX";
    make_temp(path);
    char env[64 + sizeof path];
    snprintf(env, sizeof env, "HOOP_AUTOTUNE_LOG=%s", path);
    async_case_t c = {.body = body_autotune,
                      .arg = path,
                      .env = {"HOOP_AUTOTUNE=1", env, "HOOP_AUTOTUNE_STEPS_PER_SAMPLE=2"}};
    run_case(2, &c, 70);
    unlink(path);
}

/* ---- callbacks ------------------------------------------------------------------- */

typedef struct cb_seen {
    int calls;
    hoop_status_t st;
    size_t n;
    int32_t first;
    int done_inside;
} cb_seen_t;

static void on_done(hoop_engine_handle_t *h, hoop_status_t st, void *arg)
{
    cb_seen_t *s = arg;
    s->st = st;
    s->done_inside = hoop_engine_test(h);
    int32_t *o = hoop_engine_output(h, &s->n);
    s->first = o && s->n ? o[0] : -1;
    __atomic_add_fetch(&s->calls, 1, __ATOMIC_RELEASE);
}

static int body_callback(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t v[2];
    static cb_seen_t seen;
    v[0] = rank + 10;
    v[1] = rank + 20;
    hoop_engine_handle_t *h;
    if (hoop_engine_allgather(e, "cb", v, 1, 2, HOOP_I32, on_done, &seen, &h) ||
        wait_ok(h, rank, "cb"))
        return 1;
    /* The callback runs on the engine's thread once the handle is done: a
     * waiter may return first. */
    for (int i = 0; i < 1000 && !__atomic_load_n(&seen.calls, __ATOMIC_ACQUIRE); i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    hoop_engine_release(h);
    if (seen.calls != 1 || seen.st != HOOP_OK || !seen.done_inside || seen.n != (size_t)size * 2 ||
        seen.first != 10)
        return harness_failf(rank, "callback: %d calls, %s, done %d, %zu elements, first %d",
                             seen.calls, hoop_status_str(seen.st), seen.done_inside, seen.n,
                             seen.first);
    return 0;
}

Test(async, callback_sees_status_and_output_n2, .timeout = 60)
{
    async_case_t c = {.body = body_callback};
    run_case(2, &c, 40);
}

/* ---- a fused collective's members are all done before any is woken ------- */

#define NMEMBERS 8

typedef struct {
    hoop_engine_handle_t *h[NMEMBERS];
    int in_gate, go;         /* the gate's callback holds the engine until go */
    int done_seen[NMEMBERS]; /* members done when member k's callback ran */
    int ran;                 /* member callbacks that have run */
} members_t;

/* Wait, at most ms milliseconds, until *v (set by another thread) is at
 * least want. */
static void await_count(int *v, int want, long ms)
{
    for (long i = 0; i < ms && __atomic_load_n(v, __ATOMIC_ACQUIRE) < want; i++)
        harness_sleep_ms(1);
}

static void gate_cb(hoop_engine_handle_t *h, hoop_status_t st, void *arg)
{
    members_t *m = arg;
    __atomic_store_n(&m->in_gate, 1, __ATOMIC_RELEASE);
    await_count(&m->go, 1, 10000);
}

static members_t *members_of;

static void member_cb(hoop_engine_handle_t *h, hoop_status_t st, void *arg)
{
    int k = (int)(intptr_t)arg, done = 0;
    for (int j = 0; j < NMEMBERS; j++)
        done += hoop_engine_test(members_of->h[j]);
    __atomic_store_n(&members_of->done_seen[k], done, __ATOMIC_RELEASE);
    __atomic_add_fetch(&members_of->ran, 1, __ATOMIC_RELEASE);
}

static int body_members(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static members_t m;
    static int32_t gate, v[NMEMBERS][4];
    members_of = &m;
    hoop_engine_stats_t s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    hoop_engine_stats(e, &s0);
    /* The gate's callback holds the engine's thread while the members are
     * enqueued, so that its next cycle takes all of them, on every rank:
     * one fused collective. */
    hoop_engine_handle_t *g;
    gate = rank;
    if (hoop_engine_allreduce(e, "gate", &gate, &gate, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, gate_cb, &m,
                              &g))
        return harness_failf(rank, "gate refused: %s", hoop_last_error());
    await_count(&m.in_gate, 1, 20000);
    for (int k = 0; k < NMEMBERS; k++) {
        char name[32];
        snprintf(name, sizeof name, "member.%d", k);
        for (int i = 0; i < 4; i++)
            v[k][i] = rank * 100 + k * 4 + i;
        hoop_status_t st = hoop_engine_allreduce(e, name, v[k], v[k], 4, HOOP_I32, HOOP_SUM, 1.0,
                                                 1.0, member_cb, (void *)(intptr_t)k, &m.h[k]);
        if (st)
            return harness_fail(rank, name, st);
    }
    __atomic_store_n(&m.go, 1, __ATOMIC_RELEASE);
    if (wait_ok(g, rank, "gate"))
        return 1;
    hoop_engine_release(g);
    for (int k = 0; k < NMEMBERS; k++)
        if (wait_ok(m.h[k], rank, "member"))
            return 1;
    /* A waiter may return before its callback has run: wait for them all. */
    await_count(&m.ran, NMEMBERS, 10000);
    hoop_engine_stats(e, &s1);
    for (int k = 0; k < NMEMBERS; k++)
        hoop_engine_release(m.h[k]);
    for (int k = 0; k < NMEMBERS; k++)
        for (int i = 0; i < 4; i++) {
            int32_t want = 0;
            for (int r = 0; r < size; r++)
                want += r * 100 + k * 4 + i;
            if (v[k][i] != want)
                return harness_failf(rank, "member.%d[%d] = %d, want %d", k, i, v[k][i], want);
        }
    uint64_t colls = s1.collectives - s0.collectives;
    if (colls != 2)
        return harness_failf(rank,
                             "the gate and %d members took %llu collectives, want 2 (the "
                             "members fused in one): the test's premise failed",
                             NMEMBERS, (unsigned long long)colls);
    for (int k = 0; k < NMEMBERS; k++)
        if (m.done_seen[k] != NMEMBERS)
            return harness_failf(rank,
                                 "when member.%d's callback ran, %d of the %d members of its "
                                 "collective were done, want all: a waiter woken for one would "
                                 "sleep again on the next",
                                 k, m.done_seen[k], NMEMBERS);
    return 0;
}

Test(async, fused_members_are_all_done_before_any_is_woken_n2, .timeout = 60)
{
    async_case_t c = {.body = body_members, .env = {"HOOP_CYCLE_TIME=5"}};
    run_case(2, &c, 50);
}

/* ---- hoop_engine_allreduce_args: the same allreduce, its arguments in a struct */

static int body_args(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t v[5];
    static float f[3], g[3];
    for (int i = 0; i < 5; i++)
        v[i] = rank * 10 + i;
    for (int i = 0; i < 3; i++)
        f[i] = (float)(rank + i);
    hoop_engine_allreduce_args_t a = {.struct_size = sizeof a,
                                      .engine = e,
                                      .sendbuf = v,
                                      .recvbuf = v,
                                      .count = 5,
                                      .dtype = HOOP_I32,
                                      .op = HOOP_SUM,
                                      .prescale = 1.0,
                                      .postscale = 1.0,
                                      .status = -1};
    hoop_engine_handle_t *h = hoop_engine_allreduce_args(&a, "args.in_place");
    if (!h || a.status != HOOP_OK)
        return harness_failf(rank, "args.in_place: NULL, status %d: %s", a.status,
                             hoop_last_error());
    if (wait_ok(h, rank, "args.in_place"))
        return 1;
    hoop_engine_release(h);
    for (int i = 0; i < 5; i++)
        if (v[i] != 10 * size * (size - 1) / 2 + size * i)
            return harness_failf(rank, "args.in_place[%d] = %d", i, v[i]);
    /* Out of place, scaled: (2 x) summed, then halved, is the sum. */
    a = (hoop_engine_allreduce_args_t){.struct_size = sizeof a,
                                       .engine = e,
                                       .sendbuf = f,
                                       .recvbuf = g,
                                       .count = 3,
                                       .dtype = HOOP_F32,
                                       .op = HOOP_SUM,
                                       .prescale = 2.0,
                                       .postscale = 0.5};
    if (!(h = hoop_engine_allreduce_args(&a, "args.scaled")) || wait_ok(h, rank, "args.scaled"))
        return harness_failf(rank, "args.scaled: status %d: %s", a.status, hoop_last_error());
    hoop_engine_release(h);
    for (int i = 0; i < 3; i++)
        if (g[i] != (float)(size * (size - 1) / 2 + size * i) || f[i] != (float)(rank + i))
            return harness_failf(rank, "args.scaled[%d] = %g (input now %g)", i, g[i], f[i]);
    /* Refused: the status says why, and nothing is enqueued. */
    char longname[HOOP_ENGINE_NAME_MAX + 2];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    a.status = -1;
    if (hoop_engine_allreduce_args(&a, longname) || a.status != HOOP_ERR_INVALID ||
        !strstr(hoop_last_error(), "a name of 1 to"))
        return harness_failf(rank, "a name too long: status %d, '%s'", a.status, hoop_last_error());
    a.struct_size = sizeof a - sizeof(double);
    a.status = -1;
    if (hoop_engine_allreduce_args(&a, "args.small") || a.status != -1 ||
        !strstr(hoop_last_error(), "struct_size is"))
        return harness_failf(rank, "a struct of another size: status %d, '%s'", a.status,
                             hoop_last_error());
    if (hoop_engine_allreduce_args(NULL, "args.null") || !strstr(hoop_last_error(), "NULL"))
        return harness_failf(rank, "NULL args: '%s'", hoop_last_error());
    return 0;
}

Test(async, allreduce_args_is_the_allreduce_n2, .timeout = 60)
{
    async_case_t c = {.body = body_args};
    run_case(2, &c, 40);
}

/* ---- hoop_engine_wait_release: released on success only ----------------- */

static int body_wait_release(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t late[3], go, bad[4];
    for (int i = 0; i < 3; i++)
        late[i] = rank + i;
    hoop_engine_handle_t *hl = NULL, *hg;
    hoop_status_t st;
    /* Rank 1 enqueues "late" only after "go", which rank 0 enqueues only
     * after its first wait on "late" has run out: pending, so held. */
    if (rank == 0) {
        if (hoop_engine_allreduce(e, "late", late, late, 3, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL,
                                  NULL, &hl))
            return harness_failf(rank, "late: %s", hoop_last_error());
        if ((st = hoop_engine_wait_release(hl, 0.05)) != HOOP_ERR_TIMEOUT)
            return harness_failf(rank, "late, before rank 1 enqueued it: %s, want timed out",
                                 hoop_status_str(st));
        if (hoop_engine_test(hl)) /* still held: a released handle would be freed memory */
            return harness_failf(rank, "late is done before rank 1 enqueued it");
    }
    if (hoop_engine_allreduce(e, "go", &go, &go, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                              &hg) ||
        (st = hoop_engine_wait_release(hg, WAIT_S)))
        return harness_failf(rank, "go: %s", hoop_last_error());
    if (rank != 0 && hoop_engine_allreduce(e, "late", late, late, 3, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                           NULL, NULL, &hl))
        return harness_failf(rank, "late: %s", hoop_last_error());
    if ((st = hoop_engine_wait_release(hl, WAIT_S)))
        return harness_failf(rank, "late: %s", hoop_last_error());
    for (int i = 0; i < 3; i++)
        if (late[i] != size * (size - 1) / 2 + size * i)
            return harness_failf(rank, "late[%d] = %d", i, late[i]);
    /* A failure leaves the handle held: its sentence is still there. */
    hoop_engine_handle_t *hb;
    if (hoop_engine_allreduce(e, "bad", bad, bad, rank ? 4 : 3, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL,
                              NULL, &hb))
        return harness_failf(rank, "bad: %s", hoop_last_error());
    if ((st = hoop_engine_wait_release(hb, WAIT_S)) != HOOP_ERR_MISMATCH)
        return harness_failf(rank, "bad: %s, want a mismatch", hoop_status_str(st));
    const char *why = NULL;
    if (hoop_engine_status(hb, &why) != HOOP_ERR_MISMATCH || !why || !strstr(why, "'bad'"))
        return harness_failf(rank, "bad's status after the failed wait: '%s'", why ? why : "");
    hoop_engine_release(hb);
    return 0;
}

Test(async, wait_release_lets_go_on_success_only_n2, .timeout = 60)
{
    async_case_t c = {.body = body_wait_release};
    run_case(2, &c, 40);
}

/* ---- hoop_engine_split: an engine per group, the parent goes on ---------- */

/* One split of the engine's communicator: this rank's communicator (NULL
 * for none), or exits through harness_failf with want's status. */
static int engine_split(hoop_engine_t *e, int rank, int color, hoop_status_t want,
                        hoop_comm_t **child)
{
    hoop_engine_handle_t *h;
    *child = (hoop_comm_t *)1;
    if (hoop_engine_split(e, color, -rank, NULL, NULL, &h))
        return harness_failf(rank, "split: %s", hoop_last_error());
    hoop_status_t st = hoop_engine_wait(h, WAIT_S);
    *child = hoop_engine_take_comm(h);
    const char *why = "";
    hoop_engine_status(h, &why);
    if (st != want) {
        hoop_engine_release(h);
        return harness_failf(rank, "split: %s (%s), want %s", hoop_status_str(st), why,
                             hoop_status_str(want));
    }
    hoop_engine_release(h);
    return 0;
}

static int body_split(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    hoop_comm_t *child;
    /* Evens and odds, ranked backwards; rank 4 (of 5) in none. */
    int color = rank == 4 ? HOOP_SPLIT_NONE : rank % 2;
    if (engine_split(e, rank, color, HOOP_OK, &child))
        return 1;
    if (color == HOOP_SPLIT_NONE) {
        if (child)
            return harness_failf(rank, "HOOP_SPLIT_NONE gave a communicator");
    } else {
        hoop_engine_t *ce;
        int n = rank % 2 ? size / 2 : (size - 1 + 1) / 2; /* 0, 2 / 1, 3 */
        if (!child || hoop_comm_size(child) != n || hoop_comm_rank(child) != (n - 1) - rank / 2)
            return harness_failf(rank, "group rank %d of %d", hoop_comm_rank(child),
                                 hoop_comm_size(child));
        if (hoop_engine_create_with(&ce, child))
            return harness_failf(rank, "an engine over the group: %s", hoop_last_error());
        int32_t v[5] = {rank, rank, rank, rank, rank};
        hoop_engine_handle_t *h;
        if (hoop_engine_allreduce(ce, "in.the.group", v, v, 5, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL,
                                  NULL, &h) ||
            hoop_engine_wait_release(h, WAIT_S))
            return harness_failf(rank, "allreduce in the group: %s", hoop_last_error());
        int want = rank % 2 ? 1 + 3 : 0 + 2;
        if (v[0] != want || v[4] != want)
            return harness_failf(rank, "group sum %d, not %d", v[0], want);
        if (hoop_engine_destroy(ce))
            return harness_failf(rank, "group engine destroy: %s", hoop_last_error());
    }
    /* A group that cannot form (rank 1's setting): every rank's split
     * fails alike, and the engine goes on. */
    if (rank == 1)
        setenv("HOOP_SHM_CHUNK_BYTES", "10", 1);
    hoop_status_t want = rank == 1   ? HOOP_ERR_INVALID /* its setting */
                         : rank == 3 ? HOOP_ERR_TIMEOUT /* its group's root waited for rank 1 */
                                     : HOOP_ERR_PEER;   /* rank 1's group did not form */
    if (engine_split(e, rank, rank % 2, want, &child))
        return 1;
    if (rank == 1)
        unsetenv("HOOP_SHM_CHUNK_BYTES");
    if (child)
        return harness_failf(rank, "a failed split gave a communicator");
    int32_t v = rank;
    hoop_engine_handle_t *h;
    if (hoop_engine_allreduce(e, "after", &v, &v, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                              &h) ||
        hoop_engine_wait_release(h, WAIT_S) || v != size * (size - 1) / 2)
        return harness_failf(rank, "the engine after a failed split: %d, %s", v, hoop_last_error());
    /* Untaken, a split's communicator goes with its handle. */
    if (hoop_engine_split(e, 0, rank, NULL, NULL, &h) || hoop_engine_wait(h, WAIT_S))
        return harness_failf(rank, "split of all: %s", hoop_last_error());
    hoop_engine_release(h);
    return 0;
}

Test(async, split_makes_groups_and_the_engine_goes_on_n5, .timeout = 90)
{
    /* The failed group's other rank waits this long for the one that
     * failed. */
    async_case_t c = {.body = body_split, .boot_timeout_s = 3};
    run_case(5, &c, 80);
}

/* ---- a quiet engine looks for enqueues before it sleeps ------------------ */

#define NLONE 200

typedef struct {
    long gap_ms;                 /* the caller's pause between two operations */
    int most_wakes, least_wakes; /* bounds on the enqueues that woke the thread */
    const char *log_path;        /* when set: the log must say want_log, */
    const char *want_log;
    const char *not_log; /* and not this (when set) */
} lone_arg_t;

/* NLONE operations one after the other, each enqueued gap_ms after the one
 * before it is done, when the engine's thread has gone quiet. */
static int body_lone(hoop_engine_t *e, int rank, int size, void *arg)
{
    lone_arg_t *a = arg;
    static int32_t x;
    for (int k = 0; k < NLONE; k++) {
        hoop_engine_handle_t *h;
        if (a->gap_ms)
            harness_sleep_ms(a->gap_ms);
        x = rank + k;
        if (hoop_engine_allreduce(e, "lone", &x, &x, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                  &h) ||
            hoop_engine_wait_release(h, WAIT_S))
            return harness_failf(rank, "lone %d: %s", k, hoop_last_error());
        if (x != size * (size - 1) / 2 + size * k)
            return harness_failf(rank, "lone %d = %d", k, x);
    }
    hoop_engine_stats_t s = {.struct_size = sizeof s};
    hoop_engine_stats(e, &s);
    fprintf(stderr, "rank %d: %llu of %d enqueues woke the engine's thread\n", rank,
            (unsigned long long)s.wakes, NLONE);
    if ((int)s.wakes > a->most_wakes || (int)s.wakes < a->least_wakes)
        return harness_failf(rank, "%llu of %d enqueues woke the engine's thread, want %d to %d",
                             (unsigned long long)s.wakes, NLONE, a->least_wakes, a->most_wakes);
    if (a->log_path) {
        char text[16384];
        if (read_file(a->log_path, text, sizeof text))
            return harness_failf(rank, "cannot read its log %s", a->log_path);
        if (!strstr(text, a->want_log))
            return harness_failf(rank, "the log does not say '%s':\n%s", a->want_log, text);
        if (a->not_log && strstr(text, a->not_log))
            return harness_failf(rank, "the log says '%s':\n%s", a->not_log, text);
    }
    return 0;
}

/* 2 ms between operations: the thread has long gone quiet when the next
 * comes. Looking for a second, it sees every enqueue come (even under a
 * sanitizer on a loaded machine); not looking, it sleeps, and every
 * enqueue wakes it. */
Test(async, a_spinning_engine_is_not_woken_by_each_enqueue_n1, .timeout = 60)
{
    lone_arg_t a = {.gap_ms = 2, .most_wakes = 10, .least_wakes = 0};
    async_case_t c = {.body = body_lone, .arg = &a, .env = {"HOOP_BUSY_POLL_US=1000000"}};
    run_case(1, &c, 50);
}

Test(async, without_busy_poll_each_enqueue_wakes_the_engine_n1, .timeout = 60)
{
    lone_arg_t a = {.gap_ms = 2, .most_wakes = NLONE, .least_wakes = NLONE * 9 / 10};
    async_case_t c = {.body = body_lone, .arg = &a, .env = {"HOOP_BUSY_POLL_US=0"}};
    run_case(1, &c, 50);
}

Test(async, a_quiet_engine_yields_where_cpus_are_fewer_than_threads_n1, .timeout = 60)
{
    char path[] = "/tmp/hoop_spin_XXXXXX";
    make_temp(path);
    /* One CPU for the caller and the engine: the spin yields it. */
    lone_arg_t a = {.most_wakes = NLONE,
                    .log_path = path,
                    .want_log = "for 20 us before it sleeps, yielding the CPU"};
    async_case_t c = {.body = body_lone,
                      .arg = &a,
                      .env = {"HOOP_LOG_LEVEL=info"},
                      .stderr_path = path,
                      .one_cpu = 1};
    run_case(1, &c, 50);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 2) {
        /* Two: a plain spin. */
        lone_arg_t b = {.most_wakes = NLONE,
                        .log_path = path,
                        .want_log = "looks for enqueues for 20 us before it sleeps",
                        .not_log = "yielding"};
        async_case_t d = {
            .body = body_lone, .arg = &b, .env = {"HOOP_LOG_LEVEL=info"}, .stderr_path = path};
        run_case(1, &d, 50);
    } else {
        fprintf(stderr, "a_quiet_engine_yields: this process has one CPU: the case of two is not "
                        "run\n");
    }
    unlink(path);
}

Test(async, timeline_of_every_rank_n2, .timeout = 60)
{
    char path[] = "/tmp/hoop_timeline_XXXXXX";
    make_temp(path);
    char env[64 + sizeof path];
    snprintf(env, sizeof env, "HOOP_TIMELINE=%s", path);
    int never = -1;
    async_case_t c = {.body = body_timeline,
                      .arg = &never,
                      .env = {env, "HOOP_TIMELINE_ALL_RANKS=1", "HOOP_CYCLE_TIME=5"}};
    run_case(2, &c, 40);
    for (int r = 0; r < 2; r++) {
        char p[sizeof path + 16];
        snprintf(p, sizeof p, "%s.%d", path, r);
        cr_expect(timeline_check(p, timeline_names) == 0,
                  "rank %d's timeline %s does not parse "
                  "or lacks events",
                  r, p);
        unlink(p);
    }
    unlink(path);
}

/* ---- the lists the ranks exchange: bounded, refused when malformed --------- */

static int parsed_reqs;
static char parsed_name[HOOP_ENGINE_NAME_MAX + 1];
static uint64_t parsed_vals[4];
static struct eng_params parsed_shape;

static hoop_status_t count_rec(struct hoop_engine *e, int from, int rec, const struct eng_params *p,
                               const char *name)
{
    (void)e;
    (void)from;
    if (rec == ER_REQ) {
        parsed_reqs++;
        snprintf(parsed_name, sizeof parsed_name, "%s", name);
        for (uint32_t i = 0; i < p->nvals && i < 4; i++)
            parsed_vals[i] = p->vals[i];
        parsed_shape.ndims = p->ndims;
        memcpy(parsed_shape.dims, p->dims, sizeof p->dims);
        parsed_shape.device = p->device;
    }
    return HOOP_OK;
}

Test(async, request_lists_round_trip_and_refuse_garbage)
{
    struct hoop_engine e;
    memset(&e, 0, sizeof e);
    e.size = 3;
    uint64_t splits[3] = {7, 8, 9};
    struct eng_params p = {.kind = EK_ALLTOALL,
                           .dtype = HOOP_F32,
                           .device = ENG_DEVICE,
                           .root = -1,
                           .pre = 1.0,
                           .post = 1.0,
                           .count = 24,
                           .row = 2,
                           .ndims = 3,
                           .dims = {12, 1, 2},
                           .nvals = 3,
                           .vals = splits};
    snprintf(p.name, sizeof p.name, "layer.weight");
    cr_assert_eq(eng_list_add_req(&e, &p), 0);
    cr_assert_eq(eng_list_add_join(&e), 0);
    size_t len = e.mylist_len;
    parsed_reqs = 0;
    cr_assert_eq(eng_list_parse(&e, 1, e.mylist, len, count_rec), HOOP_OK, "%s", hoop_last_error());
    cr_expect_eq(parsed_reqs, 1);
    cr_expect_str_eq(parsed_name, "layer.weight");
    cr_expect(parsed_vals[0] == 7 && parsed_vals[2] == 9);
    cr_expect(parsed_shape.ndims == 3 && parsed_shape.dims[0] == 12 && parsed_shape.dims[2] == 2);
    cr_expect_eq(parsed_shape.device, ENG_DEVICE);
    /* Every cut short of the whole is refused, naming the sender. */
    for (size_t cut = 1; cut < len - 1; cut++) {
        hoop_status_t st = eng_list_parse(&e, 1, e.mylist, cut, count_rec);
        cr_expect(st == HOOP_ERR_PEER, "a list cut to %zu of %zu bytes gave %s", cut, len,
                  hoop_status_str(st));
        cr_expect(strstr(hoop_last_error(), "rank 1") != NULL, "%s", hoop_last_error());
    }
    /* Random bytes never crash it; what it accepts it accepts whole. */
    uint8_t junk[256];
    unsigned seed = 12345;
    for (int round = 0; round < 2000; round++) {
        for (size_t i = 0; i < sizeof junk; i++) {
            seed = seed * 1103515245u + 12345u;
            junk[i] = (uint8_t)(seed >> 16);
        }
        junk[0] = (uint8_t)(1 + round % 3);
        (void)eng_list_parse(&e, round % 3, junk, 1 + (size_t)round % sizeof junk, count_rec);
    }
    /* An alltoall whose splits do not number the ranks is refused. */
    e.size = 4;
    cr_expect_eq(eng_list_parse(&e, 0, e.mylist, len, count_rec), HOOP_ERR_PEER);
    /* Where the data lies: host or device, and host where a request gives
     * no data (the byte after op: type, kind, dtype, op). */
    e.size = 3;
    size_t at_device = 1 + 3;
    cr_assert_eq(e.mylist[at_device], ENG_DEVICE);
    e.mylist[at_device] = 2;
    cr_expect_eq(eng_list_parse(&e, 1, e.mylist, len, count_rec), HOOP_ERR_PEER);
    cr_expect(strstr(hoop_last_error(), "device kind") != NULL, "%s", hoop_last_error());
    e.mylist[at_device] = ENG_HOST;
    parsed_shape.device = ENG_DEVICE;
    cr_expect_eq(eng_list_parse(&e, 1, e.mylist, len, count_rec), HOOP_OK, "%s", hoop_last_error());
    cr_expect_eq(parsed_shape.device, ENG_HOST);
    e.mylist[at_device] = ENG_DEVICE;
    /* More dimensions than a shape may have are refused (the byte after
     * row: type, kind, dtype, op, device, root, pre, post, count, row). */
    size_t at_ndims = 1 + 4 + 4 + 8 + 8 + 8 + 8;
    cr_assert_eq(e.mylist[at_ndims], 3);
    e.mylist[at_ndims] = HOOP_ENGINE_DIMS_MAX + 1;
    cr_expect_eq(eng_list_parse(&e, 1, e.mylist, len, count_rec), HOOP_ERR_PEER);
    cr_expect(strstr(hoop_last_error(), "HOOP_ENGINE_DIMS_MAX") != NULL, "%s", hoop_last_error());
    /* A group's shapes travel after its counts; shapes that do not hold
     * the counts, or shapes on another kind, are refused. */
    e.mylist_len = 0;
    uint64_t group[2 + 5] = {12, 6, 2, 3, 4, 1, 6};
    struct eng_params gp = {.kind = EK_ALLREDUCE,
                            .dtype = HOOP_F32,
                            .root = -1,
                            .pre = 1.0,
                            .post = 1.0,
                            .count = 18,
                            .nvals = 2,
                            .nshape = 5,
                            .vals = group};
    snprintf(gp.name, sizeof gp.name, "grouped");
    cr_assert_eq(eng_list_add_req(&e, &gp), 0);
    parsed_reqs = 0;
    cr_expect_eq(eng_list_parse(&e, 1, e.mylist, e.mylist_len, count_rec), HOOP_OK, "%s",
                 hoop_last_error());
    cr_expect_eq(parsed_reqs, 1);
    uint64_t bad_shapes[][7] = {
        {12, 6, 2, 3, 5, 1, 6}, /* 15 elements for 12 */
        {12, 6, 9, 3, 4, 1, 6}, /* 9 dimensions */
        {12, 6, 0, 3, 4, 1, 6}, /* none */
        {12, 6, 2, 3, 4, 2, 6}, /* runs past the words */
    };
    for (size_t k = 0; k < sizeof bad_shapes / sizeof bad_shapes[0]; k++) {
        e.mylist_len = 0;
        gp.vals = bad_shapes[k];
        cr_assert_eq(eng_list_add_req(&e, &gp), 0);
        cr_expect_eq(eng_list_parse(&e, 1, e.mylist, e.mylist_len, count_rec), HOOP_ERR_PEER,
                     "bad group shapes %zu accepted", k);
    }
    e.mylist_len = 0;
    gp.vals = group;
    gp.kind = EK_ALLGATHER;
    cr_assert_eq(eng_list_add_req(&e, &gp), 0);
    cr_expect_eq(eng_list_parse(&e, 1, e.mylist, e.mylist_len, count_rec), HOOP_ERR_PEER,
                 "shapes of a group on an allgather accepted");
    /* Device memory on a request that gives no data (a barrier; an
     * allreduce of no elements) is refused. */
    struct eng_params bp = {.kind = EK_BARRIER, .device = ENG_DEVICE, .root = -1};
    snprintf(bp.name, sizeof bp.name, "hoop.barrier.0");
    struct eng_params zp = gp;
    zp.kind = EK_ALLREDUCE;
    zp.vals = NULL;
    zp.nvals = zp.nshape = 0;
    zp.count = 0;
    zp.device = ENG_DEVICE;
    struct eng_params *nodata[2] = {&bp, &zp};
    for (int k = 0; k < 2; k++) {
        e.mylist_len = 0;
        cr_assert_eq(eng_list_add_req(&e, nodata[k]), 0);
        cr_expect_eq(eng_list_parse(&e, 1, e.mylist, e.mylist_len, count_rec), HOOP_ERR_PEER,
                     "device memory on a request of no data accepted (%d)", k);
        nodata[k]->device = ENG_HOST;
        e.mylist_len = 0;
        cr_assert_eq(eng_list_add_req(&e, nodata[k]), 0);
        cr_expect_eq(eng_list_parse(&e, 1, e.mylist, e.mylist_len, count_rec), HOOP_OK, "%s",
                     hoop_last_error());
    }
    /* Only rank 0 may fail a name. */
    e.mylist_len = 0;
    cr_assert_eq(eng_list_add_fail(&e, "x"), 0);
    cr_expect_eq(eng_list_parse(&e, 0, e.mylist, e.mylist_len, count_rec), HOOP_OK);
    cr_expect_eq(eng_list_parse(&e, 2, e.mylist, e.mylist_len, count_rec), HOOP_ERR_PEER);
    free(e.mylist);
}

/* ---- settings that must agree ---------------------------------------------- */

static int body_cache_cap_differs(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    static int32_t x = 1;
    hoop_engine_handle_t *h;
    hoop_status_t st =
        hoop_engine_allreduce(e, "x", &x, &x, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL, &h);
    if (!st) {
        st = hoop_engine_wait(h, WAIT_S);
        hoop_engine_release(h);
    }
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), "HOOP_CACHE_CAPACITY"))
        return harness_failf(rank, "want invalid naming HOOP_CACHE_CAPACITY, got %s: %s",
                             hoop_status_str(st), hoop_last_error());
    return 0;
}

Test(async, cache_capacity_must_agree_n2, .timeout = 60)
{
    async_case_t c = {.body = body_cache_cap_differs, .env_rank1 = "HOOP_CACHE_CAPACITY=10"};
    run_case(2, &c, 40);
}

/* ---- an idle engine slows its cycles, an enqueue wakes it -------------------- */

static int body_quiet(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t x;
    hoop_engine_handle_t *h;
    hoop_engine_stats_t a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    struct timespec settle = {0, 500000000}, second = {1, 0};
    /* Settle: until a tenth of a second has taken in at most 4 cycles
     * (quiet: 2; cycling: about 100, and still tens where the sanitizers
     * and other jobs load the machine), or 20 s. Neither a time nor a count
     * of cycles says when the engine's 100 idle cycles of 1 ms are over:
     * under load they take longer than 100 ms (a second measured from 0.5 s
     * on once took in 64 of them), and the first cycles of a job need not
     * be idle (at 110 cycles and 60 ms more, one took in 61). An engine
     * that never goes quiet passes here after 20 s and fails below. */
    double until = harness_now() + 20.0;
    hoop_engine_stats(e, &a);
    for (;;) {
        harness_sleep_ms(100);
        hoop_engine_stats(e, &b);
        int quiet = b.cycles - a.cycles <= 4;
        a = b;
        if (quiet || harness_now() >= until)
            break;
    }
    nanosleep(&second, NULL);
    hoop_engine_stats(e, &b);
    uint64_t idle = b.cycles - a.cycles;
    fprintf(stderr, "rank %d: %llu cycles in an idle second\n", rank, (unsigned long long)idle);
    /* Quiet: one per 50 ms (20); cycling: up to 1000. */
    if (idle > 60)
        return harness_failf(rank, "%llu cycles in an idle second, want at most 60",
                             (unsigned long long)idle);
    for (int k = 0; k < 3; k++) {
        x = rank + 1;
        if (hoop_engine_allreduce(e, "wake", &x, &x, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                  &h) ||
            wait_ok(h, rank, "wake"))
            return 1;
        hoop_engine_release(h);
        if (x != size * (size + 1) / 2)
            return harness_failf(rank, "wake = %d", x);
        nanosleep(&settle, NULL);
    }
    return 0;
}

Test(async, idle_engine_goes_quiet_and_wakes_n3, .timeout = 60)
{
    async_case_t c = {.body = body_quiet, .env = {"HOOP_CYCLE_TIME=1"}};
    run_case(3, &c, 40);
}

/* ---- a drained engine runs an enqueue at once, not at its next cycle -------- */

static int body_drained(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    static int32_t x;
    hoop_engine_handle_t *h;
    /* The cycle is a minute and every wait 20 s: only an engine that
     * starts a cycle on an enqueue when nothing is pending passes. */
    for (int k = 0; k < 5; k++) {
        x = rank + k;
        if (hoop_engine_allreduce(e, "lone", &x, &x, 1, HOOP_I32, HOOP_SUM, 1.0, 1.0, NULL, NULL,
                                  &h))
            return harness_fail(rank, "lone", HOOP_ERR_INVALID);
        hoop_status_t st = hoop_engine_wait(h, 20.0);
        if (st)
            return harness_fail(rank, "lone (a drained engine waited for its cycle)", st);
        hoop_engine_release(h);
        if (x != size * (size - 1) / 2 + size * k)
            return harness_failf(rank, "lone %d = %d", k, x);
    }
    return 0;
}

Test(async, drained_engine_runs_an_enqueue_at_once_n2, .timeout = 60)
{
    async_case_t c = {.body = body_drained, .env = {"HOOP_CYCLE_TIME=60000"}};
    run_case(2, &c, 50);
}

/* ---- a tensor of a MiB or more runs alone, in place or not, scaled ---------- */

#define NSMALL 10
#define BIG_ELEMS (1u << 19) /* 2 MiB of f32 */

static int body_big(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    enum { NB = 2, NALL = NSMALL + NB };
    float *in[NALL], *out[NALL];
    size_t cnt[NALL];
    hoop_engine_handle_t *h[NALL];
    for (int t = 0; t < NALL; t++) {
        cnt[t] = t < NSMALL ? 100 + (size_t)t : BIG_ELEMS + (size_t)t;
        in[t] = malloc(cnt[t] * 4);
        /* the last big one in place, the other out of place */
        out[t] = t == NALL - 1 ? in[t] : malloc(cnt[t] * 4);
        if (!in[t] || !out[t])
            return harness_failf(rank, "out of memory");
        for (size_t i = 0; i < cnt[t]; i++)
            in[t][i] = (float)val(rank, t, i);
    }
    hoop_engine_stats_t s0 = {.struct_size = sizeof s0}, s1 = {.struct_size = sizeof s1};
    hoop_engine_stats(e, &s0);
    for (int t = 0; t < NALL; t++) {
        char name[32];
        snprintf(name, sizeof name, "m.%d", t);
        /* x 0.5 before, x 2 after: the sum, exactly */
        hoop_status_t st = hoop_engine_allreduce(e, name, in[t], out[t], cnt[t], HOOP_F32,
                                                 HOOP_SUM, 0.5, 2.0, NULL, NULL, &h[t]);
        if (st)
            return harness_fail(rank, name, st);
    }
    for (int t = 0; t < NALL; t++) {
        if (wait_ok(h[t], rank, "m"))
            return 1;
        hoop_engine_release(h[t]);
        for (size_t i = 0; i < cnt[t]; i++) {
            float want = 0;
            for (int r = 0; r < size; r++)
                want += (float)val(r, t, i);
            if (out[t][i] != want)
                return harness_failf(rank, "m.%d[%zu] = %g, want %g", t, i, out[t][i], want);
        }
        /* out of place leaves the input alone */
        if (out[t] != in[t] && in[t][cnt[t] - 1] != (float)val(rank, t, cnt[t] - 1))
            return harness_failf(rank, "m.%d's input changed", t);
        if (out[t] != in[t])
            free(out[t]);
        free(in[t]);
    }
    hoop_engine_stats(e, &s1);
    uint64_t fused = s1.fused_ops - s0.fused_ops;
    if (fused > NSMALL)
        return harness_failf(rank, "%llu operations went through the fusion buffer, want at most "
                             "the %d small ones", (unsigned long long)fused, NSMALL);
    return 0;
}

Test(async, big_tensors_run_alone_n3, .timeout = 60)
{
    async_case_t c = {.body = body_big, .env = {"HOOP_CYCLE_TIME=20"}};
    run_case(3, &c, 50);
}

/* ---- fused groups in memory every rank maps ------------------------------- */

#define NS 12
#define NS_COUNT 30000 /* 117 KiB each: a group is past HOOP_SMALL_BYTES */

/* One step of NS tensors by the ranks that have not joined (the others
 * give zeros): exact, as their sum. grouped: one grouped allreduce, which
 * always goes through the fusion buffer; else one enqueue each within a
 * cycle (fused as the cycles catch them). */
static int shared_step(hoop_engine_t *e, int rank, int size, int step, int active, int grouped)
{
    static int32_t buf[NS][NS_COUNT];
    hoop_engine_handle_t *h[NS];
    const void *sb[NS];
    void *rb[NS];
    size_t cnt[NS];
    for (int t = 0; t < NS; t++) {
        for (int i = 0; i < NS_COUNT; i++)
            buf[t][i] = val(rank, t + step, (size_t)i);
        sb[t] = rb[t] = buf[t];
        cnt[t] = NS_COUNT;
    }
    if (grouped) {
        hoop_status_t st = hoop_engine_grouped_allreduce(e, "shared", NS, sb, rb, cnt, HOOP_I32,
                                                         HOOP_SUM, 1.0, 1.0, NULL, NULL, &h[0]);
        if (st)
            return harness_fail(rank, "shared", st);
    }
    for (int t = 0; t < NS && !grouped; t++) {
        char name[32];
        snprintf(name, sizeof name, "shared.%d", t);
        hoop_status_t st = hoop_engine_allreduce(e, name, buf[t], buf[t], NS_COUNT, HOOP_I32,
                                                 HOOP_SUM, 1.0, 1.0, NULL, NULL, &h[t]);
        if (st)
            return harness_fail(rank, name, st);
    }
    for (int t = 0; t < (grouped ? 1 : NS); t++) {
        if (wait_ok(h[t], rank, "shared"))
            return 1;
        hoop_engine_release(h[t]);
    }
    for (int t = 0; t < NS; t++) {
        for (int i = 0; i < NS_COUNT; i++) {
            int32_t want = 0;
            for (int r = 0; r < active; r++)
                want += val(r, t + step, (size_t)i);
            if (buf[t][i] != want)
                return harness_failf(rank, "step %d: shared.%d[%d] = %d, want %d (of %d ranks)",
                                     step, t, i, buf[t][i], want, size);
        }
    }
    return 0;
}

/* The fusion buffer comes from hoop_mem_alloc: a grouped allreduce runs in
 * place in it (the communicator counts it), exact; then with the last
 * rank joined, whose zeros go through its own copy of each tensor, the
 * others' tensors, fused as the cycles catch them, are still exact. */
static int body_shared_fusion(hoop_engine_t *e, int rank, int size, void *arg)
{
    (void)arg;
    if (shared_step(e, rank, size, 0, size, 1))
        return 1;
    /* The handles completed after the collective that counted. */
    uint64_t mapped = e->comm->mem ? e->comm->mem->mapped : 0;
    if (!mapped)
        return harness_failf(rank, "no fused group ran in place in the shared fusion buffer");
    if (rank < size - 1) {
        for (int step = 1; step < 3; step++)
            if (shared_step(e, rank, size, step, size - 1, 0))
                return 1;
    }
    hoop_engine_handle_t *j;
    if (hoop_engine_join(e, NULL, NULL, &j) || wait_ok(j, rank, "join"))
        return 1;
    hoop_engine_release(j);
    return 0;
}

Test(async, fused_groups_run_in_place_in_shared_memory_n3, .timeout = 60)
{
    /* Host buffers whatever the pass (the gpuemu pass takes every buffer
     * for device memory, whose groups fuse on the GPU). */
    async_case_t c = {.body = body_shared_fusion,
                      .env = {"HOOP_CYCLE_TIME=20", "HOOP_SHM=auto", "HOOP_GPU_EMULATE=0"}};
    run_case(3, &c, 40);
}
