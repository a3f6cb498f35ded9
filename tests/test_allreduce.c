/* test_allreduce.c - hoop_allreduce gives the exact result, bit for bit, on
 * every rank, for every dtype and op, over real processes on loopback.
 *
 * Every rank can compute every other rank's input (inputs are a function of
 * rank and index), so each rank checks its own result without trusting the
 * library. Inputs are chosen so that the exact result does not depend on the
 * order in which the ring adds things up: small integers whose sums and
 * products stay exactly representable in the narrowest type.
 */
#include <criterion/criterion.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/hash.h"
#include "harness.h"
#include "hoop.h"
#include "values.h"

#define CANARY_ELEMS 16

/* Small chunks make a few KiB of data cross many chunk boundaries and fill
 * the pipeline, where the interesting bugs are. */
#define SMALL_CHUNK_BYTES 4096
#define SMALL_PIPELINE_DEPTH 3

/* The index enters through a hash rather than linearly so that the input has
 * no short period: a chunk delivered to the wrong offset would otherwise
 * carry the very values expected there. */
static uint32_t mix(uint64_t i)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

static uint8_t canary_byte(size_t k)
{
    return (uint8_t)(0xC3u ^ (k * 37u));
}

static void fill_canary(void *buf, size_t from_byte, size_t nbytes)
{
    uint8_t *b = buf;
    for (size_t k = 0; k < nbytes; k++)
        b[from_byte + k] = canary_byte(k);
}

/* Index of the first byte that lost its canary, or SIZE_MAX. */
static size_t check_canary(const void *buf, size_t from_byte, size_t nbytes)
{
    const uint8_t *b = buf;
    for (size_t k = 0; k < nbytes; k++)
        if (b[from_byte + k] != canary_byte(k))
            return k;
    return SIZE_MAX;
}


typedef struct ar_case {
    hoop_dtype_t dtype;
    hoop_op_t op;
    size_t count;
    bool in_place;
} ar_case_t;

typedef struct ar_state {
    hoop_comm_t *comm;
    int rank;
    int nranks;
    uint8_t *send, *recv, *expect, *ref;
    size_t cap_bytes; /* of each buffer, canary included */
    uint64_t *hashes;
    size_t ncases, cap_cases;
    int mismatches; /* cases whose check failed; the rank keeps going so the others do not hang */
    int reported;   /* failure lines printed so far */
} ar_state_t;

/* The report keeps the tail of each rank's stderr: after this many lines the
 * first failures, which are the informative ones, would scroll out of it. */
#define MAX_REPORTED 8

static int describe_fail(ar_state_t *s, const ar_case_t *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int describe_fail(ar_state_t *s, const ar_case_t *c, const char *fmt, ...)
{
    if (s->reported++ >= MAX_REPORTED)
        return 1;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: allreduce N=%d dtype=%s op=%s count=%zu %s: %s\n", s->rank,
            s->nranks, hoop_dtype_str(c->dtype), hoop_op_str(c->op), c->count,
            c->in_place ? "in place" : "out of place", what);
    return 1;
}

static bool ensure_capacity(ar_state_t *s, size_t bytes)
{
    if (bytes <= s->cap_bytes)
        return true;
    uint8_t **bufs[] = {&s->send, &s->recv, &s->expect, &s->ref};
    for (size_t k = 0; k < 4; k++) {
        free(*bufs[k]);
        *bufs[k] = malloc(bytes);
        if (!*bufs[k])
            return false;
    }
    s->cap_bytes = bytes;
    return true;
}

/* Returns -1 when the library returned an error (the communicator is then
 * unusable and the rank stops), else 0; value mismatches only count. */
static int run_case(ar_state_t *s, const ar_case_t *c)
{
    size_t es = hoop_dtype_size(c->dtype);
    size_t data = c->count * es;
    size_t canary = CANARY_ELEMS * es;
    if (!ensure_capacity(s, data + canary)) {
        harness_failf(s->rank, "out of memory for %zu bytes", data + canary);
        return -1;
    }
    values_put_input(s->send, 0, c->count, mix, c->dtype, c->op, s->nranks, s->rank);
    fill_canary(s->send, data, canary);
    memcpy(s->ref, s->send, data + canary);
    values_put_expected(s->expect, 0, c->count, mix, c->dtype, c->op, s->nranks);
    uint8_t *out = s->send;
    if (!c->in_place) {
        out = s->recv;
        /* The complement of the answer: an element the library never writes
         * cannot pass for a result. */
        for (size_t b = 0; b < data; b++)
            out[b] = (uint8_t)~s->expect[b];
        fill_canary(out, data, canary);
    }
    hoop_status_t st = hoop_allreduce(s->comm, s->send, out, c->count, c->dtype, c->op);
    if (st != HOOP_OK) {
        s->reported = 0; /* this ends the rank: always say why */
        describe_fail(s, c, "returned %s: %s", hoop_status_str(st), hoop_last_error());
        return -1;
    }

    bool bad = false;
    if (memcmp(out, s->expect, data) != 0) {
        size_t first = SIZE_MAX, wrong = 0;
        for (size_t i = 0; i < c->count; i++) {
            if (memcmp(out + i * es, s->expect + i * es, es) != 0) {
                if (first == SIZE_MAX)
                    first = i;
                wrong++;
            }
        }
        char got[40], want[40];
        values_hex_elem(got, sizeof got, out, first, es);
        values_hex_elem(want, sizeof want, s->expect, first, es);
        describe_fail(s, c, "%zu wrong elements; first at index %zu: got 0x%s, expected 0x%s",
                      wrong, first, got, want);
        bad = true;
    }
    size_t k = check_canary(out, data, canary);
    if (k != SIZE_MAX) {
        describe_fail(s, c, "wrote past the end of recvbuf (byte %zu after the last element)", k);
        bad = true;
    }
    if (!c->in_place && memcmp(s->send, s->ref, data + canary) != 0) {
        describe_fail(s, c, "modified sendbuf");
        bad = true;
    }
    if (bad)
        s->mismatches++;

    if (s->ncases == s->cap_cases) {
        s->cap_cases = s->cap_cases ? 2 * s->cap_cases : 1024;
        s->hashes = realloc(s->hashes, s->cap_cases * sizeof *s->hashes);
        if (!s->hashes) {
            harness_failf(s->rank, "out of memory for hashes");
            return -1;
        }
    }
    uint64_t key[4] = {(uint64_t)c->dtype, (uint64_t)c->op, c->count, c->in_place};
    uint64_t h = hoop_fnv1a(HOOP_FNV1A_INIT, key, sizeof key);
    s->hashes[s->ncases++] = hoop_fnv1a(h, out, data);
    return 0;
}

/* The exact check already pins every rank to the same value; this also
 * covers elements the exact check might share a blind spot with, using the
 * library itself: if all ranks agree, max and min of each hash are equal. */
static int check_hashes_agree(ar_state_t *s)
{
    size_t n = s->ncases;
    if (n == 0)
        return 0;
    uint64_t *mx = malloc(n * sizeof *mx), *mn = malloc(n * sizeof *mn);
    if (!mx || !mn) {
        free(mx);
        free(mn);
        return harness_failf(s->rank, "out of memory for hash check");
    }
    int rc = 0;
    hoop_status_t st = hoop_allreduce(s->comm, s->hashes, mx, n, HOOP_U64, HOOP_MAX);
    if (st != HOOP_OK)
        rc = harness_fail(s->rank, "allreduce of result hashes (u64 max)", st);
    if (rc == 0) {
        st = hoop_allreduce(s->comm, s->hashes, mn, n, HOOP_U64, HOOP_MIN);
        if (st != HOOP_OK)
            rc = harness_fail(s->rank, "allreduce of result hashes (u64 min)", st);
    }
    for (size_t k = 0; rc == 0 && k < n; k++) {
        if (mx[k] != mn[k] || mx[k] != s->hashes[k])
            rc = harness_failf(s->rank,
                               "case %zu: results differ between ranks (hash max %016llx, "
                               "min %016llx, mine %016llx)",
                               k, (unsigned long long)mx[k], (unsigned long long)mn[k],
                               (unsigned long long)s->hashes[k]);
    }
    free(mx);
    free(mn);
    return rc;
}

static void state_free(ar_state_t *s)
{
    free(s->send);
    free(s->recv);
    free(s->expect);
    free(s->ref);
    free(s->hashes);
}

/* Which cases a job runs. */
typedef struct ar_plan {
    bool all_counts;      /* the count list of the chunked tests */
    size_t fixed_count;   /* otherwise: this one count */
    int dtype;            /* -1: every dtype */
} ar_plan_t;

static size_t counts_for(const ar_plan_t *plan, int nranks, size_t es, size_t *counts)
{
    if (!plan->all_counts) {
        counts[0] = plan->fixed_count;
        return 1;
    }
    size_t n = 0;
    counts[n++] = 0;
    counts[n++] = 1;
    if (nranks - 1 > 1 && nranks - 1 != 7)
        counts[n++] = (size_t)nranks - 1;
    counts[n++] = 7;
    counts[n++] = 1000u * (size_t)nranks + 3; /* segments of unequal length */
    /* At least three chunks in every rank's segment, whatever the type. */
    size_t multi = 3u * SMALL_CHUNK_BYTES * (size_t)nranks / es + 11;
    counts[n++] = multi > 20011 ? multi : 20011;
    return n;
}

static int allreduce_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const ar_plan_t *plan = arg;
    ar_state_t s = {.comm = comm, .rank = rank, .nranks = size};
    int rc = 0;

    /* count 0 is the one case where the buffers may be NULL. */
    hoop_status_t st = hoop_allreduce(comm, NULL, NULL, 0, HOOP_F32, HOOP_SUM);
    if (st != HOOP_OK) {
        state_free(&s);
        return harness_fail(rank, "allreduce of 0 elements with NULL buffers", st);
    }

    for (int dt = 0; dt < HOOP_DTYPE_COUNT && rc == 0; dt++) {
        if (plan->dtype >= 0 && dt != plan->dtype)
            continue;
        size_t counts[8];
        size_t ncounts = counts_for(plan, size, hoop_dtype_size((hoop_dtype_t)dt), counts);
        for (int op = 0; op < HOOP_OP_COUNT && rc == 0; op++) {
            for (size_t ci = 0; ci < ncounts && rc == 0; ci++) {
                for (int ip = 0; ip < 2 && rc == 0; ip++) {
                    ar_case_t c = {(hoop_dtype_t)dt, (hoop_op_t)op, counts[ci], ip == 1};
                    if (run_case(&s, &c) != 0)
                        rc = 1;
                }
            }
        }
    }
    if (rc == 0)
        rc = check_hashes_agree(&s);
    if (rc == 0 && s.mismatches > 0)
        rc = harness_failf(rank, "%d cases gave a wrong result (the first %d above)",
                           s.mismatches, s.mismatches < MAX_REPORTED ? s.mismatches : MAX_REPORTED);
    state_free(&s);
    return rc;
}

static void run_chunked(int nranks)
{
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = SMALL_CHUNK_BYTES;
    base.pipeline_depth = SMALL_PIPELINE_DEPTH;
    ar_plan_t plan = {.all_counts = true, .dtype = -1};
    static char report[8192];
    bool ok = harness_run(nranks, &base, allreduce_rank, &plan, 150.0, report, sizeof report);
    cr_assert(ok, "allreduce with %d ranks (chunk_bytes %d, pipeline_depth %d) failed:\n%s",
              nranks, SMALL_CHUNK_BYTES, SMALL_PIPELINE_DEPTH, report);
}

Test(allreduce, ranks_1, .timeout = 200) { run_chunked(1); }
Test(allreduce, ranks_2, .timeout = 200) { run_chunked(2); }
Test(allreduce, ranks_3, .timeout = 200) { run_chunked(3); }
Test(allreduce, ranks_4, .timeout = 200) { run_chunked(4); }
Test(allreduce, ranks_5, .timeout = 200) { run_chunked(5); }
Test(allreduce, ranks_6, .timeout = 200) { run_chunked(6); }
Test(allreduce, ranks_7, .timeout = 200) { run_chunked(7); }
Test(allreduce, ranks_8, .timeout = 200) { run_chunked(8); }

/* Default chunk size and depth: several default chunks per segment, which
 * the small-chunk tests above never reach with the default settings. */
Test(allreduce, default_chunks_4_ranks_f32, .timeout = 200)
{
    ar_plan_t plan = {.all_counts = false, .fixed_count = 3u * 1024 * 1024 + 1,
                      .dtype = HOOP_F32};
    static char report[8192];
    bool ok = harness_run(4, NULL, allreduce_rank, &plan, 150.0, report, sizeof report);
    cr_assert(ok, "allreduce of %zu f32 with default chunks, 4 ranks, failed:\n%s",
              plan.fixed_count, report);
}

/* Over 2^31 bytes: any int used for a byte count or offset shows up here. */
#define HUGE_COUNT (((size_t)1 << 31) + 4099)
#define HUGE_BLOCK ((size_t)1 << 20)

/* Cheap enough for 2^31 elements per rank, and without a short period: the
 * high bits of the index reach the value, so a block misplaced by any
 * offset below 2^27 is noticed. Values < 128: the sum of two fits in u8. */
static inline uint8_t huge_value(size_t i, int rank)
{
    return (uint8_t)(((i * 7u) ^ (i >> 7) ^ (i >> 17) ^ (i >> 27) ^ ((size_t)rank * 13u)) &
                     0x7fu);
}

static int huge_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    size_t count = HUGE_COUNT;
    size_t bytes = count + CANARY_ELEMS;
    /* Populated up front: taking 2 GiB one page fault at a time costs
     * several times more than filling it. */
    uint8_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    uint8_t *want = malloc(HUGE_BLOCK);
    if (buf == MAP_FAILED || !want) {
        if (buf != MAP_FAILED)
            munmap(buf, bytes);
        free(want);
        return harness_failf(rank, "cannot allocate %zu bytes", bytes);
    }
    for (size_t i = 0; i < count; i++)
        buf[i] = huge_value(i, rank);
    fill_canary(buf, count, CANARY_ELEMS);

    int rc = 0;
    hoop_status_t st = hoop_allreduce(comm, buf, buf, count, HOOP_U8, HOOP_SUM);
    if (st != HOOP_OK)
        rc = harness_fail(rank, "in-place u8 sum of 2^31 + 4099 elements", st);
    for (size_t from = 0; rc == 0 && from < count; from += HUGE_BLOCK) {
        size_t n = count - from < HUGE_BLOCK ? count - from : HUGE_BLOCK;
        for (size_t k = 0; k < n; k++) {
            uint8_t v = 0;
            for (int r = 0; r < size; r++)
                v = (uint8_t)(v + huge_value(from + k, r));
            want[k] = v;
        }
        if (memcmp(buf + from, want, n) != 0) {
            size_t k = 0;
            while (buf[from + k] == want[k])
                k++;
            rc = harness_failf(rank, "u8 sum of %zu elements: element %zu is %u, expected %u",
                               count, from + k, buf[from + k], want[k]);
        }
    }
    if (rc == 0 && check_canary(buf, count, CANARY_ELEMS) != SIZE_MAX)
        rc = harness_failf(rank, "wrote past the end of a %zu-byte buffer", count);
    munmap(buf, bytes);
    free(want);
    return rc;
}

static long long mem_available_mib(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1)
            break;
    fclose(f);
    return kib < 0 ? -1 : kib / 1024;
}

Test(allreduce, over_2_gib_u8_2_ranks, .timeout = 280)
{
    /* Two ranks of 2 GiB each, plus the kernel's socket buffers: on a
     * smaller machine the OOM killer, not the library, would decide. */
    if (HARNESS_TSAN)
        cr_skip_test("TSan's shadow memory would make this several times bigger");
    long long avail = mem_available_mib();
    if (avail >= 0 && avail < 6 * 1024)
        cr_skip_test("needs about 6 GiB of available memory for two 2 GiB ranks; %lld MiB "
                     "available",
                     avail);
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = 200.0;
    static char report[8192];
    bool ok = harness_run(2, &base, huge_rank, NULL, 240.0, report, sizeof report);
    cr_assert(ok, "in-place u8 sum of 2^31 + 4099 elements on 2 ranks failed:\n%s", report);
}
