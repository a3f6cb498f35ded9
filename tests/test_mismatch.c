/* test_mismatch.c - ranks that call different things fail fast with
 * HOOP_ERR_MISMATCH and a sentence that gives both sides' values: another
 * count, dtype, op, root or collective, the small-message path against the
 * ring, a collective off the ring against one on it, allgatherv blocks that
 * differ while the totals agree. No rank hangs and no rank returns HOOP_OK.
 *
 * Every case runs at N = 4 with rank 2 as the odd one out; each rank keeps
 * its status, time and sentence in memory shared with the test. */
#include <criterion/criterion.h>

#include "harness.h"
#include "hoop.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MM_RANKS 4
#define MM_ODD 2
#define MM_TIMEOUT_S 30.0
/* A mismatch is seen within one step; the time allowed covers a loaded
 * machine, and is far below the collective's deadline. */
#define MM_LIMIT_S 10.0
#define MM_BIG ((size_t)1 << 20) /* elements: well above the small-message threshold */

enum mm_call { MM_ALLREDUCE, MM_REDUCE_SCATTER, MM_BROADCAST, MM_ALLTOALL, MM_ALLGATHERV,
               MM_REDUCE_SCATTERV };

struct mm_side {
    int call;
    size_t count;
    hoop_dtype_t dtype;
    hoop_op_t op;
    int root;
    int skew; /* allgatherv, reduce_scatterv: move this many elements from block 0 to 1 */
    size_t chunk; /* this side's chunk_bytes (0: the default) */
    const char *small; /* this side's HOOP_SMALL_BYTES (NULL: the default) */
    int warm; /* small allreduces made alike first: the direct connections
                 then exist, and no agreement runs before the call */
};

struct mm_case {
    struct mm_side usual, odd;
    const char *want[2]; /* in the sentence of a rank that saw the mismatch */
};

/* The rank that calls differently. */
static int mm_odd(int nranks)
{
    return nranks > MM_ODD ? MM_ODD : nranks - 1;
}

struct mm_result {
    int returned; /* in mm_results[0] only: how many ranks have returned */
    int status;
    double elapsed_s;
    char why[1024];
};

static struct mm_result *mm_shared(void)
{
    void *p = mmap(NULL, MM_RANKS * sizeof(struct mm_result), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(p != MAP_FAILED, "mmap");
    memset(p, 0, MM_RANKS * sizeof(struct mm_result));
    return p;
}

static struct mm_result *mm_results;

static hoop_status_t mm_call(hoop_comm_t *comm, const struct mm_side *s, void *a, void *b)
{
    size_t counts[MM_RANKS], displs[MM_RANKS], off = 0;
    switch (s->call) {
    case MM_ALLREDUCE:
        return hoop_allreduce(comm, a, b, s->count, s->dtype, s->op);
    case MM_REDUCE_SCATTER:
        return hoop_reduce_scatter(comm, a, b, s->count / MM_RANKS, s->dtype, s->op);
    case MM_BROADCAST:
        return hoop_broadcast(comm, a, b, s->count, s->dtype, s->root);
    case MM_ALLTOALL:
        return hoop_alltoall(comm, a, b, s->count / MM_RANKS, s->dtype);
    case MM_ALLGATHERV:
        for (int r = 0; r < MM_RANKS; r++) {
            counts[r] = s->count / MM_RANKS;
            displs[r] = off;
            off += counts[r];
        }
        counts[0] -= (size_t)s->skew;
        counts[1] += (size_t)s->skew;
        displs[1] -= (size_t)s->skew;
        return hoop_allgatherv(comm, (char *)a + displs[hoop_comm_rank(comm)] *
                                                    hoop_dtype_size(s->dtype),
                               b, counts, displs, s->dtype);
    case MM_REDUCE_SCATTERV:
        for (int r = 0; r < MM_RANKS; r++)
            counts[r] = s->count / MM_RANKS;
        counts[0] -= (size_t)s->skew;
        counts[1] += (size_t)s->skew;
        return hoop_reduce_scatterv(comm, a, b, counts, s->dtype, s->op);
    }
    return HOOP_ERR_INVALID;
}

static int mm_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const struct mm_case *c = arg;
    const struct mm_side *s = rank == mm_odd(size) ? &c->odd : &c->usual;
    size_t bytes = (s->count + 64) * hoop_dtype_size(s->dtype);
    void *a = calloc(1, bytes), *b = calloc(1, bytes);
    if (!a || !b)
        return harness_failf(rank, "out of memory");
    hoop_status_t st = HOOP_OK;
    for (int k = 0; k < s->warm && !st; k++)
        st = hoop_allreduce(comm, a, b, 16, HOOP_F32, HOOP_SUM);
    if (st)
        return harness_failf(rank, "a matched call before the mismatch failed: %s",
                             hoop_last_error());
    double t0 = harness_now();
    st = mm_call(comm, s, a, b);
    struct mm_result *res = &mm_results[rank];
    res->elapsed_s = harness_now() - t0;
    res->status = (int)st;
    snprintf(res->why, sizeof(res->why), "%s", st ? hoop_last_error() : "");
    free(a);
    free(b);
    /* Stay until every rank has returned: a rank whose own exchanges matched
     * may finish, and its leaving must not race the others' reports. */
    __atomic_add_fetch(&mm_results[0].returned, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&mm_results[0].returned, __ATOMIC_SEQ_CST) < size &&
           harness_now() - t0 < MM_LIMIT_S + 5) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void mm_run_n(const struct mm_case *c, int nranks)
{
    mm_results = mm_shared();
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = MM_TIMEOUT_S;
    hoop_config_t odd = base;
    if (c->odd.chunk)
        odd.chunk_bytes = c->odd.chunk;
    static harness_job_t job; /* its report is large: off the worker's stack */
    cr_assert(harness_job_init(&job), "no port for the job");
    for (int r = 0; r < nranks; r++) {
        /* A forked rank keeps the environment it was forked with. */
        if (r == mm_odd(nranks) && c->odd.small)
            setenv("HOOP_SMALL_BYTES", c->odd.small, 1);
        pid_t pid = harness_spawn_rank(&job, r, nranks, r == mm_odd(nranks) ? &odd : &base,
                                       mm_rank, (void *)c);
        unsetenv("HOOP_SMALL_BYTES");
        cr_assert(pid > 0, "could not start rank %d", r);
    }
    bool ok = harness_wait(&job, 90, 15.0);
    cr_assert(ok, "a rank crashed or hung:\n%s", job.report);
    int mismatches = 0;
    for (int r = 0; r < nranks; r++) {
        const struct mm_result *res = &mm_results[r];
        cr_log_info("rank %d: status %s after %.3f s: %s", r,
                    hoop_status_str((hoop_status_t)res->status), res->elapsed_s, res->why);
        if (r == mm_odd(nranks))
            cr_expect(res->status == HOOP_ERR_MISMATCH, "the odd rank %d did not see the mismatch",
                      r);
        cr_expect(res->elapsed_s < MM_LIMIT_S, "rank %d took %.1f s to see the mismatch", r,
                  res->elapsed_s);
        if (res->status != HOOP_ERR_MISMATCH)
            continue;
        mismatches++;
        /* A transport of whole messages (ofi) may lose all of a longer
         * message than the receive, header included (rxm's rendezvous):
         * the receiver then names its own call and the sender, and says
         * that the message was longer. */
        if (strstr(res->why, "sent a longer message than this rank expected")) {
            cr_expect(strstr(res->why, c->want[0]) || (c->want[1] && strstr(res->why, c->want[1])),
                      "rank %d's sentence names neither call: %s", r, res->why);
            continue;
        }
        for (int k = 0; k < 2 && c->want[k]; k++)
            cr_expect(strstr(res->why, c->want[k]) != NULL,
                      "rank %d's sentence lacks \"%s\": %s", r, c->want[k], res->why);
    }
    /* The rank that receives from a disagreeing one always sees it; a rank
     * whose own exchanges all matched may finish, and when it then leaves
     * the others hear of a departure rather than of the mismatch. */
    cr_expect(mismatches >= 1, "%d of %d ranks returned HOOP_ERR_MISMATCH", mismatches, nranks);
    munmap(mm_results, MM_RANKS * sizeof(struct mm_result));
}

static void mm_run(const struct mm_case *c)
{
    mm_run_n(c, MM_RANKS);
}

#define SIDE(call_, count_, dtype_, op_, root_) \
    {.call = (call_), .count = (count_), .dtype = (dtype_), .op = (op_), .root = (root_)}

Test(mismatch, count_on_the_ring, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, MM_BIG + 4, HOOP_F32, HOOP_SUM, 0),
                        {"1048576 x f32 sum", "1048580 x f32 sum"}};
    mm_run(&c);
}

Test(mismatch, count_on_the_small_path, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, 999, HOOP_F32, HOOP_SUM, 0),
                        {"1000 x f32 sum", "999 x f32 sum"}};
    mm_run(&c);
}

Test(mismatch, small_path_against_the_ring, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, 100, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        {"100 x f32 sum", "1048576 x f32 sum"}};
    mm_run(&c);
}

/* At N = 2 the small path's exchange goes over the ring's connections. */
Test(mismatch, count_on_the_small_path_of_two_ranks, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, 999, HOOP_F32, HOOP_SUM, 0),
                        {"1000 x f32 sum", "999 x f32 sum"}};
    mm_run_n(&c, 2);
}

/* The same count, but one rank takes the ring (HOOP_SMALL_BYTES=0): its
 * first frame names another step than the small path's. */
Test(mismatch, small_path_against_the_ring_of_two_ranks, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                        {"1000 x f32 sum", "HOOP_SMALL_BYTES must be the same"}};
    c.odd.small = "0";
    mm_run_n(&c, 2);
}

/* Once the small path's connections exist no agreement runs: the ring's
 * connections carry the rounds between neighbours, and those frames (or
 * the announcements, where N is not a power of two) must tell a rank in
 * another call. */
static void mm_warm_small(int nranks)
{
    struct mm_case count = {SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                            SIDE(MM_ALLREDUCE, 999, HOOP_F32, HOOP_SUM, 0),
                            {"1000 x f32 sum", "999 x f32 sum"}};
    count.usual.warm = count.odd.warm = 1;
    mm_run_n(&count, nranks);
    struct mm_case path = {SIDE(MM_ALLREDUCE, 100, HOOP_F32, HOOP_SUM, 0),
                           SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                           {"100 x f32 sum", "1048576 x f32 sum"}};
    path.usual.warm = path.odd.warm = 1;
    mm_run_n(&path, nranks);
    struct mm_case threshold = {SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                                SIDE(MM_ALLREDUCE, 1000, HOOP_F32, HOOP_SUM, 0),
                                {"1000 x f32 sum", "HOOP_SMALL_BYTES must be the same"}};
    threshold.usual.warm = threshold.odd.warm = 1;
    threshold.odd.small = "64";
    mm_run_n(&threshold, nranks);
}

Test(mismatch, small_path_after_its_connections_exist, .timeout = 240)
{
    mm_warm_small(4);
}

Test(mismatch, small_path_with_an_extra_rank_after_its_connections_exist, .timeout = 240)
{
    mm_warm_small(3);
}

Test(mismatch, dtype, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, MM_BIG, HOOP_I32, HOOP_SUM, 0),
                        {"x f32 sum", "x i32 sum"}};
    mm_run(&c);
}

Test(mismatch, op, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, 5000, HOOP_F64, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, 5000, HOOP_F64, HOOP_MAX, 0),
                        {"f64 sum", "f64 max"}};
    mm_run(&c);
}

Test(mismatch, collective_on_the_ring, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_REDUCE_SCATTER, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        {"allreduce #1", "reduce_scatter #1"}};
    mm_run(&c);
}

Test(mismatch, root, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_BROADCAST, MM_BIG, HOOP_U8, 0, 0),
                        SIDE(MM_BROADCAST, MM_BIG, HOOP_U8, 0, 1),
                        {"root 0", "root 1"}};
    mm_run(&c);
}

Test(mismatch, alltoall_against_allreduce, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, 4096, HOOP_I64, HOOP_SUM, 0),
                        SIDE(MM_ALLTOALL, 4096, HOOP_I64, 0, 0),
                        {"allreduce #1", "alltoall #1"}};
    mm_run(&c);
}

/* Chunk sizes fix the length of every message after a collective's first,
 * which is the only one checked before its payload is waited for: ranks
 * that cut differently must be told so by that first message. */
Test(mismatch, chunk_bytes, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_ALLREDUCE, MM_BIG, HOOP_F32, HOOP_SUM, 0),
                        {"cuts chunks of", "HOOP_CHUNK_BYTES"}};
    c.odd.chunk = 256 * 1024;
    mm_run(&c);
}

Test(mismatch, allgatherv_blocks_with_equal_totals, .timeout = 120)
{
    struct mm_case c = {SIDE(MM_ALLGATHERV, 4000, HOOP_F32, 0, 0),
                        SIDE(MM_ALLGATHERV, 4000, HOOP_F32, 0, 0),
                        {"allgather #1", "do the ranks pass the same counts?"}};
    c.odd.skew = 10;
    mm_run(&c);
}

Test(mismatch, reduce_scatterv_blocks_with_equal_totals, .timeout = 120)
{
    /* Over libfabric's shm provider a receive that meets a longer message
     * than it posted never ends (the ofi transport's known fault, see the
     * skips below): every rank would sit out HOOP_TIMEOUT. */
    if (strcmp(harness_transport(), "ofi") == 0 && strcmp(harness_ofi_provider(), "shm") == 0)
        cr_skip_test("over ofi's shm provider a receive that meets a longer message never ends "
                     "there (a known fault of the ofi transport); tcp and ofi-tcp run it");
    struct mm_case c = {SIDE(MM_REDUCE_SCATTERV, 4000, HOOP_F32, HOOP_SUM, 0),
                        SIDE(MM_REDUCE_SCATTERV, 4000, HOOP_F32, HOOP_SUM, 0),
                        {"reduce_scatter #1", "do the ranks pass the same counts?"}};
    c.odd.skew = 10;
    mm_run(&c);
}

/* alltoallv: rank MM_ODD sends rank 0 one element more than rank 0
 * expects. Every rank must return HOOP_ERR_MISMATCH naming that pair and
 * both counts, and the communicator must then still work: the ranks agree
 * on the counts before anything moves. */
#define A2AV_C 4
static int a2av_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    size_t sc[MM_RANKS], sd[MM_RANKS], rc[MM_RANKS], rd[MM_RANKS];
    int32_t a[MM_RANKS * (A2AV_C + 1)], b[MM_RANKS * (A2AV_C + 1)];
    for (int j = 0; j < size; j++) {
        sc[j] = rc[j] = A2AV_C;
        sd[j] = rd[j] = (size_t)j * (A2AV_C + 1);
    }
    for (int k = 0; k < MM_RANKS * (A2AV_C + 1); k++)
        a[k] = rank * 1000 + k;
    if (rank == MM_ODD)
        sc[0] = A2AV_C + 1;
    hoop_status_t st = hoop_alltoallv(comm, a, sc, sd, b, rc, rd, HOOP_I32);
    char want[160];
    snprintf(want, sizeof(want), "rank %d sends %d elements to rank 0, which expects %d", MM_ODD,
             A2AV_C + 1, A2AV_C);
    if (st != HOOP_ERR_MISMATCH)
        return harness_failf(rank, "alltoallv with disagreeing counts returned %s (%s), expected "
                             "HOOP_ERR_MISMATCH", hoop_status_str(st), hoop_last_error());
    if (!strstr(hoop_last_error(), want))
        return harness_failf(rank, "the sentence lacks \"%s\": %s", want, hoop_last_error());
    /* Then the same call with agreeing counts goes through. */
    sc[0] = A2AV_C;
    memset(b, 0xff, sizeof(b));
    if ((st = hoop_alltoallv(comm, a, sc, sd, b, rc, rd, HOOP_I32)))
        return harness_fail(rank, "alltoallv after the mismatch", st);
    for (int i = 0; i < size; i++)
        for (int k = 0; k < A2AV_C; k++)
            if (b[rd[i] + (size_t)k] != i * 1000 + (int)sd[rank] + k)
                return harness_failf(rank, "alltoallv after the mismatch: element %d from rank "
                                     "%d is %d, expected %d", k, i, (int)b[rd[i] + (size_t)k],
                                     i * 1000 + (int)sd[rank] + k);
    return 0;
}

Test(mismatch, alltoallv_counts_on_every_rank, .timeout = 120)
{
    static char report[8192];
    bool ok = harness_run(MM_RANKS, NULL, a2av_rank, NULL, 60.0, report, sizeof report);
    cr_assert(ok, "alltoallv with disagreeing counts:\n%s", report);
}

/* ---- every rank fails alike ------------------------------------------------ */

/* The cases below hold every rank to the same answer: a call one rank
 * makes with another count (0 among them) or another root fails with
 * HOOP_ERR_MISMATCH on every rank, none returns HOOP_OK, and every rank's
 * sentence names the disagreeing rank and both values. The call's count is
 * what the caller passes (per rank for reduce_scatter, allgather and
 * alltoall; every block for allgatherv). */
#define EV_MAX 8

enum ev_call { EV_ALLREDUCE, EV_BROADCAST, EV_REDUCE, EV_REDUCE_SCATTER, EV_ALLGATHER,
               EV_ALLGATHERV, EV_ALLTOALL };

struct ev_side {
    int call;
    size_t count;
    int root;
};

struct ev_case {
    int nranks;
    int odd; /* the rank that calls differently */
    struct ev_side usual, odd_side;
    const char *want[3]; /* in every rank's sentence */
    int all_ok;          /* no mismatch: every rank must return HOOP_OK */
};

static hoop_status_t ev_call(hoop_comm_t *comm, const struct ev_side *s, int size, int32_t *a,
                             int32_t *b)
{
    size_t counts[EV_MAX], displs[EV_MAX];
    switch (s->call) {
    case EV_ALLREDUCE:
        return hoop_allreduce(comm, a, b, s->count, HOOP_I32, HOOP_SUM);
    case EV_BROADCAST:
        return hoop_broadcast(comm, a, b, s->count, HOOP_I32, s->root);
    case EV_REDUCE:
        return hoop_reduce(comm, a, b, s->count, HOOP_I32, HOOP_SUM, s->root);
    case EV_REDUCE_SCATTER:
        return hoop_reduce_scatter(comm, a, b, s->count, HOOP_I32, HOOP_SUM);
    case EV_ALLGATHER:
        return hoop_allgather(comm, a, b, s->count, HOOP_I32);
    case EV_ALLGATHERV:
        for (int r = 0; r < size; r++) {
            counts[r] = s->count;
            displs[r] = (size_t)r * s->count;
        }
        return hoop_allgatherv(comm, a, b, counts, displs, HOOP_I32);
    case EV_ALLTOALL:
        return hoop_alltoall(comm, a, b, s->count, HOOP_I32);
    }
    return HOOP_ERR_INVALID;
}

static struct mm_result *ev_results;

static int ev_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const struct ev_case *c = arg;
    const struct ev_side *s = rank == c->odd ? &c->odd_side : &c->usual;
    size_t elems = (s->count + 16) * (size_t)size;
    int32_t *a = calloc(elems, sizeof(*a)), *b = calloc(elems, sizeof(*b));
    if (!a || !b)
        return harness_failf(rank, "out of memory");
    for (size_t i = 0; i < elems; i++)
        a[i] = rank + 1;
    double t0 = harness_now();
    hoop_status_t st = ev_call(comm, s, size, a, b);
    struct mm_result *res = &ev_results[rank];
    res->elapsed_s = harness_now() - t0;
    res->status = (int)st;
    snprintf(res->why, sizeof(res->why), "%s", st ? hoop_last_error() : "");
    int rc = 0;
    /* Where every rank agreed, the next call must pair with the same call
     * on every rank: an allreduce whose sum is checked. */
    if (!st && c->all_ok) {
        int32_t x = rank + 1, sum = 0;
        st = hoop_allreduce(comm, &x, &sum, 1, HOOP_I32, HOOP_SUM);
        if (st)
            rc = harness_fail(rank, "the allreduce after the call", st);
        else if (sum != size * (size + 1) / 2)
            rc = harness_failf(rank, "the allreduce after the call gave %d, expected %d", sum,
                               size * (size + 1) / 2);
    }
    free(a);
    free(b);
    __atomic_add_fetch(&ev_results[0].returned, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&ev_results[0].returned, __ATOMIC_SEQ_CST) < size &&
           harness_now() - t0 < MM_LIMIT_S + 5) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

static void ev_run(const struct ev_case *c)
{
    cr_assert(c->nranks <= EV_MAX);
    ev_results = mmap(NULL, EV_MAX * sizeof(struct mm_result), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(ev_results != MAP_FAILED, "mmap");
    memset(ev_results, 0, EV_MAX * sizeof(struct mm_result));
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = MM_TIMEOUT_S;
    static char report[8192];
    bool ok = harness_run(c->nranks, &base, ev_rank, (void *)c, 90, report, sizeof report);
    cr_assert(ok, "a rank crashed, hung or failed:\n%s", report);
    char odd_named[2][16];
    snprintf(odd_named[0], sizeof(odd_named[0]), "rank %d (", c->odd);
    snprintf(odd_named[1], sizeof(odd_named[1]), "rank %d:", c->odd);
    for (int r = 0; r < c->nranks; r++) {
        const struct mm_result *res = &ev_results[r];
        cr_log_info("rank %d: status %s after %.3f s: %s", r,
                    hoop_status_str((hoop_status_t)res->status), res->elapsed_s, res->why);
        if (c->all_ok) {
            cr_expect(res->status == HOOP_OK, "rank %d: %s: %s", r,
                      hoop_status_str((hoop_status_t)res->status), res->why);
            continue;
        }
        cr_expect(res->status == HOOP_ERR_MISMATCH, "rank %d returned %s, not HOOP_ERR_MISMATCH: %s",
                  r, hoop_status_str((hoop_status_t)res->status), res->why);
        cr_expect(res->elapsed_s < MM_LIMIT_S, "rank %d took %.1f s to see the mismatch", r,
                  res->elapsed_s);
        cr_expect(strstr(res->why, odd_named[0]) || strstr(res->why, odd_named[1]),
                  "rank %d's sentence does not name rank %d: %s", r, c->odd, res->why);
        /* Over a transport of whole messages (ofi) the receiver of a
         * longer message than it expected may get none of it: it names
         * its own call and the sender, and says the message was longer. */
        if (strstr(res->why, "sent a longer message than this rank expected")) {
            cr_expect(strstr(res->why, c->want[0]) || (c->want[1] && strstr(res->why, c->want[1])),
                      "rank %d's sentence names neither call: %s", r, res->why);
            continue;
        }
        for (int k = 0; k < 3 && c->want[k]; k++)
            cr_expect(strstr(res->why, c->want[k]) != NULL,
                      "rank %d's sentence lacks \"%s\": %s", r, c->want[k], res->why);
    }
    munmap(ev_results, EV_MAX * sizeof(struct mm_result));
}

/* Count 0 on one rank, 1024 on the others (the small path's size for
 * allreduce), and the other way round: a count-0 call takes part in the
 * matching like any other. */
static void ev_zero(int call, const char *zero, const char *full)
{
    struct ev_case c = {.nranks = 4, .odd = 1, .usual = {call, 1024, 0}, .odd_side = {call, 0, 0},
                        .want = {zero, full}};
    ev_run(&c);
    /* The rank after the root of a reduce expects a header alone (the
     * root's announcement), and gets the root's longer frame of count 0:
     * see ev_root for what libfabric's shm provider does then. */
    if (call == EV_REDUCE && strcmp(harness_transport(), "ofi") == 0 &&
        strcmp(harness_ofi_provider(), "shm") == 0) {
        /* A note, not a Criterion warning: a warning makes the run exit 1. */
        fprintf(stderr, "note: skipping 1024 among 0 over ofi's shm provider: a receive of a "
                        "header alone that meets a longer message never ends there (a known "
                        "fault of the ofi transport)\n");
        return;
    }
    c.usual.count = 0;
    c.odd_side.count = 1024;
    ev_run(&c);
}

Test(mismatch, count_zero_allreduce, .timeout = 120)
{
    ev_zero(EV_ALLREDUCE, "(0 x i32 sum", "(1024 x i32 sum");
}

Test(mismatch, count_zero_allreduce_on_the_ring, .timeout = 120)
{
    struct ev_case c = {.nranks = 4, .odd = 1, .usual = {EV_ALLREDUCE, MM_BIG, 0},
                        .odd_side = {EV_ALLREDUCE, 0, 0},
                        .want = {"(0 x i32 sum", "(1048576 x i32 sum"}};
    ev_run(&c);
}

Test(mismatch, count_zero_broadcast, .timeout = 120)
{
    ev_zero(EV_BROADCAST, "(0 x i32, root 0)", "(1024 x i32, root 0)");
}

Test(mismatch, count_zero_reduce, .timeout = 120)
{
    ev_zero(EV_REDUCE, "(0 x i32 sum, root 0)", "(1024 x i32 sum, root 0)");
}

Test(mismatch, count_zero_reduce_scatter, .timeout = 120)
{
    ev_zero(EV_REDUCE_SCATTER, "(0 x i32 sum", "(1024 x i32 sum");
}

/* allgather's frames give the total of the blocks. */
Test(mismatch, count_zero_allgather, .timeout = 120)
{
    ev_zero(EV_ALLGATHER, "(0 x i32", "(4096 x i32");
}

Test(mismatch, count_zero_allgatherv, .timeout = 120)
{
    ev_zero(EV_ALLGATHERV, "(0 x i32", "(4096 x i32");
}

Test(mismatch, count_zero_alltoall, .timeout = 120)
{
    ev_zero(EV_ALLTOALL, "(0 x i32", "(1024 x i32");
}

/* Calls of count 0 on every rank are matched too: each returns HOOP_OK
 * and the call after pairs with the same call everywhere; another
 * collective of count 0 on one rank is a mismatch. */
Test(mismatch, count_zero_everywhere, .timeout = 240)
{
    static const int calls[] = {EV_ALLREDUCE, EV_BROADCAST, EV_REDUCE, EV_REDUCE_SCATTER,
                                EV_ALLGATHER, EV_ALLGATHERV, EV_ALLTOALL};
    for (int n = 2; n <= 5; n += 3)
        for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]); k++) {
            struct ev_case c = {.nranks = n, .odd = 1, .usual = {calls[k], 0, 0},
                                .odd_side = {calls[k], 0, 0}, .all_ok = 1};
            ev_run(&c);
        }
    struct ev_case other = {.nranks = 4, .odd = 1, .usual = {EV_ALLREDUCE, 0, 0},
                            .odd_side = {EV_REDUCE, 0, 0},
                            .want = {"allreduce #1", "reduce #1"}};
    ev_run(&other);
}

/* One rank passes another root: broadcast and reduce, one chunk and many,
 * at N = 2, 3 and 4. */
static void ev_root(int call)
{
    static const size_t counts[] = {100, MM_BIG};
    /* At N = 2 both ranks think they are the root: each sends its data
     * where the other expects a header alone (an announcement). Over
     * libfabric (rxm's rendezvous, shm) such a receive would never end,
     * had it not room for the chunk (frame.c). */
    for (int n = 2; n <= 4; n++)
        for (int k = 0; k < 2; k++) {
            struct ev_case c = {.nranks = n, .odd = n - 1, .usual = {call, counts[k], 0},
                                .odd_side = {call, counts[k], 1}, .want = {"root 0", "root 1"}};
            ev_run(&c);
        }
}

Test(mismatch, root_of_broadcast_on_every_rank, .timeout = 300)
{
    ev_root(EV_BROADCAST);
}

Test(mismatch, root_of_reduce_on_every_rank, .timeout = 300)
{
    ev_root(EV_REDUCE);
}
