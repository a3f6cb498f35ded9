/* test_hier.c - the hierarchical allreduce (ring/hier.c) on emulated hosts:
 * each rank is put on a host by a UTS namespace named for it
 * (harness_be_host), so that the ring goes host by host and the hosts'
 * shape decides the path. Every dtype and op exact at several shapes and
 * counts, on the hierarchical path and on the flat ring alike; the same
 * bits on every rank where the op rounds; device buffers (emulated); the
 * flat ring where the shape does not allow it; ranks that disagree on
 * HOOP_HIERARCHICAL told so; a rank killed mid-allreduce. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define HJ_MAX 8

struct hier_job {
    int host[HJ_MAX];            /* per rank: its emulated host (0: this one) */
    const char *mode[HJ_MAX];    /* HOOP_HIERARCHICAL per rank */
    int gpu_emulate;             /* every buffer taken for device memory */
    int small;                   /* keep the small-message path (else the ring for all) */
    const char *want;            /* in hoop_comm_transport() */
    int want_flat;               /* "hierarchical" must not be there */
    int kill_rank;               /* > 0: this rank kills itself mid-allreduce */
    size_t count;                /* of the failing calls (0: 1 Mi f32) */
    /* filled by the ranks */
    uint64_t hash[HJ_MAX];       /* of the rounding f32 sum's result */
    int status[HJ_MAX];
    char why[HJ_MAX][640];
};

/* Inputs that every op and dtype below reduces exactly: small integers,
 * whose sums and products stay exact in the narrowest type. */
static int64_t small_val(int rank, size_t i)
{
    return (int64_t)((i * 7919u + (size_t)rank * 104729u) % 7u) + 1;
}

struct hier_case {
    hoop_dtype_t dtype;
    hoop_op_t op;
};

static const struct hier_case hier_cases[] = {
    {HOOP_I32, HOOP_SUM},  {HOOP_U8, HOOP_MAX},   {HOOP_I64, HOOP_PROD}, {HOOP_F64, HOOP_AVG},
    {HOOP_F32, HOOP_MIN},  {HOOP_BF16, HOOP_SUM}, {HOOP_F16, HOOP_SUM},  {HOOP_U64, HOOP_SUM},
};

static double want_of(hoop_op_t op, int size, size_t i)
{
    double acc = (double)small_val(0, i);
    for (int r = 1; r < size; r++) {
        double v = (double)small_val(r, i);
        acc = op == HOOP_MAX   ? fmax(acc, v)
              : op == HOOP_MIN ? fmin(acc, v)
              : op == HOOP_PROD ? acc * v
                                : acc + v;
    }
    return op == HOOP_AVG ? acc / size : acc;
}

static void put_val(void *buf, hoop_dtype_t dt, size_t i, double v)
{
    switch (dt) {
    case HOOP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HOOP_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HOOP_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case HOOP_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case HOOP_F64: ((double *)buf)[i] = v; break;
    case HOOP_F32: ((float *)buf)[i] = (float)v; break;
    case HOOP_BF16: ((uint16_t *)buf)[i] = hoop_f32_to_bf16((float)v); break;
    case HOOP_F16: ((uint16_t *)buf)[i] = hoop_f32_to_f16((float)v); break;
    default: break;
    }
}

static double get_val(const void *buf, hoop_dtype_t dt, size_t i)
{
    switch (dt) {
    case HOOP_I32: return ((const int32_t *)buf)[i];
    case HOOP_U8: return ((const uint8_t *)buf)[i];
    case HOOP_I64: return (double)((const int64_t *)buf)[i];
    case HOOP_U64: return (double)((const uint64_t *)buf)[i];
    case HOOP_F64: return ((const double *)buf)[i];
    case HOOP_F32: return ((const float *)buf)[i];
    case HOOP_BF16: return hoop_bf16_to_f32(((const uint16_t *)buf)[i]);
    case HOOP_F16: return hoop_f16_to_f32(((const uint16_t *)buf)[i]);
    default: return NAN;
    }
}

/* Counts below one element per rank (the flat ring), from one per rank up
 * around the segments' edges (count / L per host segment, / N per cross
 * segment), and past a chunk. */
#define HIER_NCOUNTS 11
static void hier_counts(int size, size_t c[HIER_NCOUNTS])
{
    size_t n = (size_t)size;
    size_t v[HIER_NCOUNTS] = {0, 1, n - 1, n, n + 1, 2 * n - 1, 5 * n + 3, 1000, 4099, 65537,
                              300007};
    memcpy(c, v, sizeof(v));
}

static int exact_cases(hoop_comm_t *comm, int rank, int size)
{
    size_t counts[HIER_NCOUNTS];
    hier_counts(size, counts);
    size_t maxn = counts[HIER_NCOUNTS - 1];
    uint8_t *a = malloc(maxn * 8), *b = malloc(maxn * 8);
    if (!a || !b)
        return harness_failf(rank, "out of memory");
    int rc = 0;
    for (size_t c = 0; !rc && c < sizeof(hier_cases) / sizeof(hier_cases[0]); c++) {
        const struct hier_case *hc = &hier_cases[c];
        for (size_t k = 0; !rc && k < HIER_NCOUNTS; k++) {
            size_t n = counts[k];
            for (size_t i = 0; i < n; i++)
                put_val(a, hc->dtype, i, (double)small_val(rank, i));
            memset(b, 0xa5, n * hoop_dtype_size(hc->dtype));
            for (int in_place = 0; !rc && in_place < 2; in_place++) {
                void *out = in_place ? a : b;
                hoop_status_t st = hoop_allreduce(comm, a, out, n, hc->dtype, hc->op);
                if (st) {
                    rc = harness_fail(rank, "allreduce", st);
                    break;
                }
                for (size_t i = 0; i < n; i++) {
                    double got = get_val(out, hc->dtype, i), want = want_of(hc->op, size, i);
                    if (got != want) {
                        rc = harness_failf(rank, "allreduce%s of %zu x %s %s: element %zu is "
                                           "%g, not %g", in_place ? " in place" : "", n,
                                           hoop_dtype_str(hc->dtype), hoop_op_str(hc->op), i,
                                           got, want);
                        break;
                    }
                }
                /* In place, a now holds the result: the input again. */
                for (size_t i = 0; in_place && i < n; i++)
                    put_val(a, hc->dtype, i, (double)small_val(rank, i));
            }
        }
    }
    free(a);
    free(b);
    return rc;
}

/* An f32 sum that rounds: every rank must still end with the same bits. */
static int rounding_sum(hoop_comm_t *comm, int rank, struct hier_job *j)
{
    const size_t n = 200003;
    float *a = malloc(n * sizeof(*a));
    if (!a)
        return harness_failf(rank, "out of memory");
    uint32_t x = 2463534242u + (uint32_t)rank * 2654435761u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        a[i] = (float)x / 4294967296.0f * (i % 2 ? 1e-3f : 1e3f);
    }
    hoop_status_t st = hoop_allreduce(comm, a, a, n, HOOP_F32, HOOP_SUM);
    if (st) {
        free(a);
        return harness_fail(rank, "the rounding f32 allreduce", st);
    }
    uint64_t h = 1469598103934665603ull;
    const uint8_t *p = (const uint8_t *)a;
    for (size_t i = 0; i < n * sizeof(*a); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    j->hash[rank] = h;
    free(a);
    return 0;
}

static int check_desc(hoop_comm_t *comm, int rank, const struct hier_job *j)
{
    const char *d = hoop_comm_transport(comm);
    if (j->want && !strstr(d, j->want))
        return harness_failf(rank, "hoop_comm_transport() is \"%s\", without \"%s\"", d, j->want);
    if (j->want_flat && strstr(d, "hierarchical"))
        return harness_failf(rank, "hoop_comm_transport() is \"%s\": the flat ring was due", d);
    return 0;
}

/* This rank on its host, in the job's communicator with the job's
 * settings: 0, or the rank's exit code (77: no UTS namespace here). */
static int hier_join(hoop_comm_t **comm, struct hier_job *j, int rank, int size, int port)
{
    int rc = harness_be_host(rank, j->host[rank]);
    if (rc)
        return rc;
    setenv("HOOP_HIERARCHICAL", j->mode[rank] ? j->mode[rank] : "auto", 1);
    /* The ring for every count, so that the smallest ones take this path;
     * or the small-message path up to its default. */
    if (j->small)
        unsetenv("HOOP_SMALL_BYTES");
    else
        setenv("HOOP_SMALL_BYTES", "0", 1);
    if (j->gpu_emulate)
        setenv("HOOP_GPU_EMULATE", "1", 1);
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    cfg.chunk_bytes = 64 * 1024;
    cfg.timeout_s = 30.0;
    hoop_status_t st = hoop_comm_init(comm, &cfg);
    return st ? harness_fail(rank, "hoop_comm_init", st) : 0;
}

static int exact_rank(int rank, int size, int port, void *arg)
{
    struct hier_job *j = arg;
    hoop_comm_t *comm;
    int rc = hier_join(&comm, j, rank, size, port);
    if (rc)
        return rc;
    if (!(rc = check_desc(comm, rank, j)) && !(rc = exact_cases(comm, rank, size)))
        rc = rounding_sum(comm, rank, j);
    hoop_comm_destroy(comm);
    return rc;
}

static struct hier_job *job_new(const struct hier_job *tmpl)
{
    struct hier_job *j = mmap(NULL, sizeof(*j), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                              -1, 0);
    cr_assert(j != MAP_FAILED, "mmap: %s", strerror(errno));
    *j = *tmpl;
    return j;
}

static void skip_if_no_hosts(bool ok, const char *report)
{
    if (!ok && strstr(report, "exit code 77"))
        cr_skip_test("this test cannot make a UTS namespace (it needs CAP_SYS_ADMIN):\n%s",
                     report);
}

static void run_exact(const struct hier_job *tmpl, int n)
{
    struct hier_job *j = job_new(tmpl);
    static char report[16384];
    bool ok = harness_run_raw(n, exact_rank, j, 280.0, report, sizeof(report));
    skip_if_no_hosts(ok, report);
    cr_assert(ok, "%s", report);
    for (int r = 1; r < n; r++)
        cr_assert(j->hash[r] == j->hash[0],
                  "the rounding f32 sum gave rank %d other bits than rank 0 (%016llx, %016llx)", r,
                  (unsigned long long)j->hash[r], (unsigned long long)j->hash[0]);
    munmap(j, sizeof(*j));
}

/* Two hosts of two, the ranks given alternately (as torchrun may). */
Test(hier, two_hosts_of_two_interleaved_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 0, 1},
                         .want = "hierarchical allreduce (2 hosts of 2 ranks)"};
    run_exact(&j, 4);
}

/* The same with the small-message path up to 64 KiB: from 16 KiB each
 * host's first rank gathers, the first ranks double, each hands the result
 * back; below, recursive doubling among all ranks by ring place. */
Test(hier, small_messages_on_interleaved_hosts_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 0, 1}, .small = 1,
                         .want = "hierarchical allreduce (2 hosts of 2 ranks)"};
    run_exact(&j, 4);
}

/* Three hosts of two: the third host's first rank hands its host's sum
 * over and gets the result back, as recursive doubling's extra rank. */
Test(hier, small_messages_on_three_hosts_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 2, 0, 1, 2}, .small = 1,
                         .want = "hierarchical allreduce (3 hosts of 2 ranks)"};
    run_exact(&j, 6);
}

/* Two hosts of three, HOOP_HIERARCHICAL=1: every small allreduce gathers
 * on one rank per host; a host's third rank hears nothing from its ring
 * predecessor, and announces itself. */
Test(hier, small_messages_on_two_hosts_of_three_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 0, 1, 1, 0, 1}, .mode = {"1", "1", "1", "1", "1", "1"},
                         .small = 1,
                         .want = "hierarchical allreduce (2 hosts of 3 ranks)"};
    run_exact(&j, 6);
}

/* The flat small path on interleaved hosts: recursive doubling by ring
 * place, its first round inside each host. */
Test(hier, small_messages_flat_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 0, 1}, .mode = {"0", "0", "0", "0"}, .small = 1,
                         .want_flat = 1};
    run_exact(&j, 4);
}

/* The same job on the flat ring: the same exact results. */
Test(hier, the_flat_ring_gives_the_same_results, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 0, 1}, .mode = {"0", "0", "0", "0"}, .want_flat = 1};
    run_exact(&j, 4);
}

Test(hier, three_hosts_of_two_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 2, 0, 1, 2},
                         .want = "hierarchical allreduce (3 hosts of 2 ranks)"};
    run_exact(&j, 6);
}

/* Three ranks a host, given out of order: the host's ring has a middle rank
 * (both its links the ring's own), and the hosts' segments differ in size. */
Test(hier, two_hosts_of_three_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 0, 1, 1, 0, 1}, .mode = {"1", "1", "1", "1", "1", "1"},
                         .want = "hierarchical allreduce (2 hosts of 3 ranks)"};
    run_exact(&j, 6);
}

/* Hosts of 3 and 1 ranks: HOOP_HIERARCHICAL=1 cannot, and the flat ring
 * runs (with a warning in the log). */
Test(hier, hosts_of_unequal_size_take_the_flat_ring, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 0, 0}, .mode = {"1", "1", "1", "1"}, .want_flat = 1};
    run_exact(&j, 4);
}

/* Device buffers: the pipeline's device path (over host memory here) in
 * every part. */
Test(hier, device_buffers_exact, .timeout = 300)
{
    struct hier_job j = {.host = {0, 1, 0, 1}, .gpu_emulate = 1,
                         .want = "hierarchical allreduce (2 hosts of 2 ranks)"};
    run_exact(&j, 4);
}

/* ---- ranks that disagree, a rank killed ---------------------------------- */

static void *kill_soon(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGKILL);
    return NULL;
}

static int failing_rank(int rank, int size, int port, void *arg)
{
    struct hier_job *j = arg;
    hoop_comm_t *comm;
    int rc = hier_join(&comm, j, rank, size, port);
    if (rc)
        return rc;
    hoop_status_t st = HOOP_OK;
    const size_t n = j->count ? j->count : (size_t)1 << 20;
    float *a = calloc(n, sizeof(*a));
    if (!a)
        return harness_failf(rank, "out of memory");
    for (int call = 0; call < 200 && st == HOOP_OK; call++) {
        pthread_t killer;
        /* A millisecond into the fourth call, once every connection is up. */
        if (rank == j->kill_rank && call == 3 &&
            pthread_create(&killer, NULL, kill_soon, NULL) != 0)
            return harness_failf(rank, "pthread_create failed");
        st = hoop_allreduce(comm, a, a, n, HOOP_F32, HOOP_SUM);
    }
    j->status[rank] = (int)st;
    snprintf(j->why[rank], sizeof(j->why[rank]), "%s", st ? hoop_last_error() : "");
    free(a);
    hoop_comm_destroy(comm);
    return 0;
}

static void run_failing(const struct hier_job *tmpl, int n, struct hier_job **out)
{
    struct hier_job *j = job_new(tmpl);
    static char report[16384];
    bool ok = harness_run_raw(n, failing_rank, j, 120.0, report, sizeof(report));
    skip_if_no_hosts(ok, report);
    if (j->kill_rank > 0)
        cr_assert(strstr(report, "died of signal 9"),
                  "rank %d was not killed:\n%s", j->kill_rank, report);
    else
        cr_assert(ok, "%s", report);
    *out = j;
}

/* Rank 2 keeps the flat ring while the others take the hierarchical path:
 * every rank fails its first allreduce, and the ranks that see it say
 * why. */
static void disagree(size_t count, int small)
{
    struct hier_job *j, t = {.host = {0, 1, 0, 1}, .mode = {"auto", "auto", "0", "auto"},
                             .count = count, .small = small};
    run_failing(&t, 4, &j);
    int told = 0;
    for (int r = 0; r < 4; r++) {
        cr_log_info("rank %d: %s: %s", r, hoop_status_str((hoop_status_t)j->status[r]),
                    j->why[r]);
        cr_expect(j->status[r] != HOOP_OK, "rank %d returned HOOP_OK", r);
        told += j->status[r] == HOOP_ERR_MISMATCH &&
                strstr(j->why[r], "HOOP_HIERARCHICAL must be the same") != NULL;
    }
    cr_expect(told >= 1, "no rank said that HOOP_HIERARCHICAL differs");
    munmap(j, sizeof(*j));
}

Test(hier, ranks_that_disagree_are_told, .timeout = 150)
{
    disagree(0, 0);
}

/* The same on the small-message path (32 KiB: gathered per host). */
Test(hier, ranks_that_disagree_on_small_messages_are_told, .timeout = 150)
{
    disagree(8192, 1);
}

/* Rank 3 is killed in its fourth allreduce: every other rank fails it (or
 * the next), naming rank 3, within the collective's deadline. */
Test(hier, a_rank_killed_mid_allreduce_fails_the_others, .timeout = 150)
{
    struct hier_job *j, t = {.host = {0, 1, 0, 1}, .kill_rank = 3};
    run_failing(&t, 4, &j);
    for (int r = 0; r < 3; r++) {
        cr_log_info("rank %d: %s: %s", r, hoop_status_str((hoop_status_t)j->status[r]),
                    j->why[r]);
        cr_expect(j->status[r] != HOOP_OK, "rank %d returned HOOP_OK", r);
        cr_expect(strstr(j->why[r], "rank 3") != NULL, "rank %d does not name rank 3: %s", r,
                  j->why[r]);
    }
    munmap(j, sizeof(*j));
}
