/* test_ofi.c - the libfabric transport (HOOP_TRANSPORT=ofi) on libfabric's
 * tcp and shm providers: that it is the one running and moves data right,
 * over the ring's and the direct connections; what a missing or mismatched
 * provider says; bytes that are not a frame where a chunk should be; and
 * its memory registrations. (The whole collective, mismatch and fault
 * suites also run over ofi: see the Makefile's test target.) */
#include <criterion/criterion.h>

#include "harness.h"
#include "hoop.h"
#include "collectives/comm.h"
#include "transport/ofi.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define OFI_COUNT ((1u << 20) + 7) /* i32: crosses chunks */

static int32_t ofi_input(int rank, size_t i)
{
    return (int32_t)((i * 2654435761u + (size_t)rank * 40503u) % 1000u);
}

/* The communicator runs over ofi with the provider asked for; a ring
 * allreduce, a small one (direct connections) and an alltoall come out
 * exact. */
static int ofi_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const char *want = arg;
    const char *got = hoop_comm_transport(comm);
    if (strncmp(got, "ofi/", 4) != 0 || !strstr(got, want))
        return harness_failf(rank, "hoop_comm_transport() is \"%s\", not ofi over %s", got, want);
    int32_t *buf = malloc(OFI_COUNT * sizeof(*buf));
    int32_t *a2a = malloc((size_t)size * 1000 * sizeof(*a2a));
    int32_t *a2b = malloc((size_t)size * 1000 * sizeof(*a2b));
    if (!buf || !a2a || !a2b)
        return harness_failf(rank, "out of memory");
    int rc = 0;
    size_t counts[2] = {OFI_COUNT, 13};
    for (int k = 0; k < 2 && !rc; k++) {
        size_t n = counts[k];
        for (size_t i = 0; i < n; i++)
            buf[i] = ofi_input(rank, i);
        hoop_status_t st = hoop_allreduce(comm, buf, buf, n, HOOP_I32, HOOP_SUM);
        if (st)
            rc = harness_fail(rank, "hoop_allreduce", st);
        for (size_t i = 0; i < n && !rc; i++) {
            int32_t w = 0;
            for (int r = 0; r < size; r++)
                w += ofi_input(r, i);
            if (buf[i] != w)
                rc = harness_failf(rank, "allreduce of %zu: element %zu is %d, not %d", n, i,
                                   buf[i], w);
        }
    }
    for (int r = 0; r < size && !rc; r++)
        for (int i = 0; i < 1000; i++)
            a2a[r * 1000 + i] = rank * 100000 + r * 1000 + i;
    hoop_status_t st = rc ? HOOP_OK : hoop_alltoall(comm, a2a, a2b, 1000, HOOP_I32);
    if (st)
        rc = harness_fail(rank, "hoop_alltoall", st);
    for (int r = 0; r < size && !rc; r++)
        for (int i = 0; i < 1000 && !rc; i++)
            if (a2b[r * 1000 + i] != r * 100000 + rank * 1000 + i)
                rc = harness_failf(rank, "alltoall: block %d element %d is %d", r, i,
                                   a2b[r * 1000 + i]);
    free(buf);
    free(a2a);
    free(a2b);
    return rc;
}

static void run_over(const char *prov, const char *want)
{
    setenv("HOOP_TRANSPORT", "ofi", 1);
    setenv("HOOP_OFI_PROVIDER", prov, 1);
    char report[8192];
    bool ok = harness_run(4, NULL, ofi_rank, (void *)want, 120, report, sizeof(report));
    unsetenv("HOOP_TRANSPORT");
    unsetenv("HOOP_OFI_PROVIDER");
    cr_assert(ok, "4 ranks over ofi/%s:\n%s", prov, report);
}

Test(ofi, runs_over_the_tcp_provider, .timeout = 180)
{
    run_over("tcp", "tcp");
}

Test(ofi, runs_over_the_shm_provider, .timeout = 180)
{
    run_over("shm", "shm");
}

/* Each rank sets its own environment before it makes its communicator. */
struct ofi_setting {
    const char *var[2], *val[2]; /* for every rank */
    int odd;                     /* the rank with odd_val instead of val[1] */
    const char *odd_val;
    hoop_status_t want;          /* of at least one rank; every rank must fail */
    const char *says[2];         /* in that rank's sentence */
};

static struct ofi_setting *setting_shared(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(p != MAP_FAILED, "mmap");
    return p;
}

static int setting_rank(int rank, int size, int port, void *arg)
{
    const struct ofi_setting *s = arg;
    for (int k = 0; k < 2 && s->var[k]; k++)
        setenv(s->var[k], k == 1 && rank == s->odd ? s->odd_val : s->val[k], 1);
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port, 20.0, root, token, NULL);
    hoop_comm_t *comm = NULL;
    double t0 = harness_now();
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    double took = harness_now() - t0;
    if (st == HOOP_OK) {
        hoop_comm_destroy(comm);
        return harness_failf(rank, "hoop_comm_init succeeded");
    }
    if (took > 10.0)
        return harness_failf(rank, "took %.1f s to refuse: %s", took, hoop_last_error());
    if (st != s->want)
        return harness_failf(rank, "gave %s, not %s: %s", hoop_status_str(st),
                             hoop_status_str(s->want), hoop_last_error());
    for (int k = 0; k < 2 && s->says[k]; k++)
        if (!strstr(hoop_last_error(), s->says[k]))
            return harness_failf(rank, "the sentence lacks \"%s\": %s", s->says[k],
                                 hoop_last_error());
    return 0;
}

static void refused(const struct ofi_setting *in, int n)
{
    struct ofi_setting *s = setting_shared();
    *s = *in;
    char report[8192];
    bool ok = harness_run_raw(n, setting_rank, s, 60.0, report, sizeof(report));
    munmap(s, 4096);
    cr_assert(ok, "%s", report);
}

/* Asking for a provider that is not there: what libfabric has instead. */
Test(ofi, a_missing_provider_is_unsupported_and_says_what_there_is, .timeout = 90)
{
    struct ofi_setting s = {{"HOOP_TRANSPORT", "HOOP_OFI_PROVIDER"}, {"ofi", "no-such-fabric"},
                            -1, NULL, HOOP_ERR_UNSUPPORTED,
                            {"no provider 'no-such-fabric'", "it offers: "}};
    refused(&s, 2);
}

/* Ranks on two providers cannot talk: every rank is told so at once. */
Test(ofi, ranks_on_different_providers_are_a_mismatch, .timeout = 90)
{
    struct ofi_setting s = {{"HOOP_TRANSPORT", "HOOP_OFI_PROVIDER"}, {"ofi", "tcp"}, 2, "shm",
                            HOOP_ERR_MISMATCH, {"uses libfabric provider", "HOOP_OFI_PROVIDER"}};
    refused(&s, 4);
}

/* Nor can ranks on two transports. */
Test(ofi, ranks_on_different_transports_are_a_mismatch, .timeout = 90)
{
    struct ofi_setting s = {{"HOOP_OFI_PROVIDER", "HOOP_TRANSPORT"}, {"tcp", "ofi"}, 1, "tcp",
                            HOOP_ERR_MISMATCH, {"transport", "HOOP_TRANSPORT must"}};
    refused(&s, 4);
}

/* ---- bytes that are not a frame ----------------------------------------- */

#define GARBAGE_RANKS 4
#define GARBAGE_FAKE 3 /* its ring successor is rank 0 */
#define GARBAGE_COUNT (4u << 20)

struct garbage_board {
    int done[GARBAGE_RANKS];
    int status[GARBAGE_RANKS];
    double took[GARBAGE_RANKS];
    char why[GARBAGE_RANKS][512];
};

static struct garbage_board *gboard;

/* Rank 3 joins over ofi like a real rank, then sends, where its first chunk
 * should be, a message of the right length whose header is random bytes,
 * and stays until every real rank has returned. */
static int garbage_fake(int rank, int size, int port, void *arg)
{
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    cfg.chunk_bytes = 256 << 10;
    harness_fake_t f;
    hoop_status_t st = harness_fake_join(&f, &cfg, &hoop_transport_ofi);
    if (st)
        return harness_fail(rank, "fake rank: joining the job", st);
    static uint8_t hdr[64], body[256 << 10];
    unsigned seed = 7;
    for (size_t i = 0; i < sizeof(hdr); i++)
        hdr[i] = (uint8_t)rand_r(&seed);
    /* What rank 0 expects from rank 3 first: its step-0 chunk of segment 3. */
    int rc = harness_fake_send(&f, hdr, sizeof(hdr), body, cfg.chunk_bytes, 20.0);
    if (rc)
        fprintf(stderr, "rank %d: fake rank: the garbage did not go: %s\n", rank, strerror(-rc));
    double t0 = harness_now();
    for (;;) {
        int all = 1;
        for (int r = 0; r < size; r++)
            all &= r == rank || __atomic_load_n(&gboard->done[r], __ATOMIC_SEQ_CST);
        if (all || harness_now() - t0 > 40.0)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    harness_fake_fini(&f);
    return 0;
}

static int garbage_victim(hoop_comm_t *comm, int rank, int size, void *arg)
{
    float *in = malloc(GARBAGE_COUNT * sizeof(float)), *out = malloc(GARBAGE_COUNT * sizeof(float));
    if (!in || !out)
        return harness_failf(rank, "out of memory");
    for (size_t i = 0; i < GARBAGE_COUNT; i++)
        in[i] = (float)(i % 1024);
    double t0 = harness_now();
    hoop_status_t st = hoop_allreduce(comm, in, out, GARBAGE_COUNT, HOOP_F32, HOOP_SUM);
    gboard->took[rank] = harness_now() - t0;
    gboard->status[rank] = (int)st;
    snprintf(gboard->why[rank], sizeof(gboard->why[rank]), "%s", st ? hoop_last_error() : "");
    __atomic_store_n(&gboard->done[rank], 1, __ATOMIC_SEQ_CST);
    free(in);
    free(out);
    return 0;
}

static void garbage_over(const char *prov)
{
    setenv("HOOP_TRANSPORT", "ofi", 1);
    setenv("HOOP_OFI_PROVIDER", prov, 1);
    gboard = mmap(NULL, sizeof(*gboard), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                  0);
    cr_assert(gboard != MAP_FAILED, "mmap");
    memset(gboard, 0, sizeof(*gboard));
    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = 20.0;
    base.chunk_bytes = 256 << 10;
    for (int r = 0; r < GARBAGE_RANKS; r++) {
        pid_t pid = r == GARBAGE_FAKE
                        ? harness_spawn_raw(&job, r, GARBAGE_RANKS, garbage_fake, NULL)
                        : harness_spawn_rank(&job, r, GARBAGE_RANKS, &base, garbage_victim, NULL);
        cr_assert(pid > 0, "could not start rank %d", r);
    }
    bool ok = harness_wait(&job, 90, 15.0);
    unsetenv("HOOP_TRANSPORT");
    unsetenv("HOOP_OFI_PROVIDER");
    cr_assert(ok, "a rank crashed or hung:\n%s", job.report);
    for (int r = 0; r < GARBAGE_RANKS; r++) {
        if (r == GARBAGE_FAKE)
            continue;
        cr_log_info("rank %d: %s after %.3f s: %s", r,
                    hoop_status_str((hoop_status_t)gboard->status[r]), gboard->took[r],
                    gboard->why[r]);
        cr_expect_eq(gboard->status[r], HOOP_ERR_PEER, "rank %d returned %s: %s", r,
                     hoop_status_str((hoop_status_t)gboard->status[r]), gboard->why[r]);
        cr_expect(strstr(gboard->why[r], "rank 3") != NULL, "rank %d does not name rank 3: %s",
                  r, gboard->why[r]);
        cr_expect_lt(gboard->took[r], 10.0, "rank %d took %.1f s", r, gboard->took[r]);
    }
    cr_expect(strstr(gboard->why[0], "not a hoop data frame") != NULL,
              "rank 0, which read the bytes, does not say what they were: %s", gboard->why[0]);
    munmap(gboard, sizeof(*gboard));
}

Test(ofi, garbage_instead_of_a_frame_over_tcp, .timeout = 150)
{
    garbage_over("tcp");
}

Test(ofi, garbage_instead_of_a_frame_over_shm, .timeout = 150)
{
    garbage_over("shm");
}

/* ---- written messages and their registrations ------------------------------ */

/* Every payload written (HOOP_OFI_WRITE_BYTES=1): the same exact results. */
Test(ofi, written_payloads_over_the_tcp_provider, .timeout = 180)
{
    setenv("HOOP_OFI_WRITE_BYTES", "1", 1);
    run_over("tcp", "tcp");
    unsetenv("HOOP_OFI_WRITE_BYTES");
}

Test(ofi, written_payloads_over_the_shm_provider, .timeout = 180)
{
    setenv("HOOP_OFI_WRITE_BYTES", "1", 1);
    run_over("shm", "shm");
    unsetenv("HOOP_OFI_WRITE_BYTES");
}

/* Ranks that would write and ranks that would send cannot pair up. */
Test(ofi, ranks_that_write_and_ranks_that_send_are_a_mismatch, .timeout = 90)
{
    struct ofi_setting s = {{"HOOP_TRANSPORT", "HOOP_OFI_WRITE_BYTES"}, {"ofi", "64K"}, 1, "0",
                            HOOP_ERR_MISMATCH, {"HOOP_OFI_WRITE_BYTES", "the same on every rank"}};
    refused(&s, 3);
}

#define MR_COUNT (1u << 20) /* f32, 4 MiB: four chunks of 1 MiB, every one written */

static struct ofi_tp *mr_tp(hoop_comm_t *comm)
{
    return (struct ofi_tp *)((struct hoop_comm *)comm)->ring.tp;
}

/* One allreduce of n floats in buf (in place) whose exact sum is checked;
 * seed makes each call's values its own. */
static int mr_allreduce(hoop_comm_t *comm, int rank, int size, float *buf, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)((i * 7 + (size_t)seed * 13 + (size_t)rank) % 251);
    hoop_status_t st = hoop_allreduce(comm, buf, buf, n, HOOP_F32, HOOP_SUM);
    if (st)
        return harness_fail(rank, "hoop_allreduce", st);
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += (float)((i * 7 + (size_t)seed * 13 + (size_t)r) % 251);
        if (buf[i] != want)
            return harness_failf(rank, "call %d: element %zu is %g, not %g", seed, i,
                                 (double)buf[i], (double)want);
    }
    return 0;
}

/* A buffer used again is not registered again; memory freed and mapped
 * anew at the same address (smaller, the same, and larger) gives exact
 * results; and a larger mapping there is registered for what it adds. */
static int mr_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    struct ofi_tp *tp = mr_tp(comm);
    if (!tp->write_min)
        return harness_failf(rank, "the provider cannot write here: nothing to test");
    size_t bytes = MR_COUNT * sizeof(float);
    float *buf = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return harness_failf(rank, "mmap: %s", strerror(errno));
    munmap(buf + MR_COUNT, bytes); /* the upper half free: room to grow in place */
    int rc = mr_allreduce(comm, rank, size, buf, MR_COUNT, 0);
    unsigned long first = tp->mr.regs;
    for (int k = 1; k <= 10 && !rc; k++)
        rc = mr_allreduce(comm, rank, size, buf, MR_COUNT, k);
    if (!rc && tp->mr.regs != first)
        rc = harness_failf(rank, "10 more calls on the same buffer made %lu registrations",
                           tp->mr.regs - first);
    /* Freed, and new memory at the same address: new pages, new contents. */
    munmap(buf, bytes);
    float *again = rc ? MAP_FAILED : mmap(buf, bytes, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                                            -1, 0);
    if (!rc && again != buf)
        rc = harness_failf(rank, "could not map again at %p", (void *)buf);
    for (int k = 20; k <= 22 && !rc; k++)
        rc = mr_allreduce(comm, rank, size, again, MR_COUNT, k);
    /* Larger, at the same address: what it adds is registered too. */
    unsigned long before = tp->mr.regs;
    if (!rc) {
        munmap(again, bytes);
        again = mmap(buf, 2 * bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (again != buf)
            rc = harness_failf(rank, "could not map %zu bytes at %p", 2 * bytes, (void *)buf);
    }
    for (int k = 30; k <= 32 && !rc; k++)
        rc = mr_allreduce(comm, rank, size, again, 2 * MR_COUNT, k);
    if (!rc && tp->mr.regs == before)
        rc = harness_failf(rank, "a buffer twice as large at the same address made no new "
                                 "registration");
    if (again != MAP_FAILED)
        munmap(again, rc ? bytes : 2 * bytes);
    fprintf(stderr, "rank %d: %lu registrations in all, %lu after the first call\n", rank,
            tp->mr.regs, first);
    return rc;
}

static void mr_over(const char *prov)
{
    setenv("HOOP_TRANSPORT", "ofi", 1);
    setenv("HOOP_OFI_PROVIDER", prov, 1);
    setenv("HOOP_OFI_WRITE_BYTES", "64K", 1); /* registrations serve writes (off by default) */
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = 1 << 20;
    char report[8192];
    bool ok = harness_run(3, &base, mr_rank, NULL, 120, report, sizeof(report));
    unsetenv("HOOP_TRANSPORT");
    unsetenv("HOOP_OFI_PROVIDER");
    unsetenv("HOOP_OFI_WRITE_BYTES");
    cr_assert(ok, "3 ranks over ofi/%s:\n%s", prov, report);
}

Test(ofi, registrations_are_cached_and_right_after_remapping_over_tcp, .timeout = 180)
{
    mr_over("tcp");
}

Test(ofi, registrations_are_cached_and_right_after_remapping_over_shm, .timeout = 180)
{
    mr_over("shm");
}
