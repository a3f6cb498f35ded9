/* test_soak.c - thousands of collectives in a row on one communicator, every
 * result checked exactly, and memory that stays flat.
 *
 * Four ranks run a long sequence of collectives (every kind, type, op, root
 * and placement, sizes from nothing to SOAK_MAX_BYTES) drawn from a seed
 * that every rank shares, so that all ranks make the same calls. Inputs are
 * those of values.c, with a hash salted per call so that no call's result
 * can pass for the previous one's; each rank builds the exact image its
 * output must hold, canary included, and compares every byte. Each rank
 * reads its resident set after a warm-up that ran the largest size of every
 * collective and again at the end: a library that keeps anything per call
 * (connections, buffers, requests) shows up as growth.
 *
 * HOOP_SOAK_SEED=S repeats a run (the seed is printed), HOOP_SOAK_OPS=N runs
 * N calls instead of SOAK_DEFAULT_OPS (at most SOAK_MAX_OPS, which still
 * fit in the timeout): N = k + 1 stops right after a failure at call k.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "hoop.h"
#include "canary.h"
#include "values.h"

#define SOAK_RANKS 4
/* Under TSan every call costs about ten times as much, and the point there
 * is the races, which a fifth of the calls reach as well. */
#define SOAK_DEFAULT_OPS (HARNESS_TSAN ? 2000 : 10000)
#define SOAK_MAX_OPS 50000ul

/* 10,000 calls cost about 20 s of CPU in all at -O2, nearly all of it in
 * the checking (the calls alone take 3 s): 13 to 15 s on an idle 2-core
 * machine, 20 to 50 s with the machine busy with other jobs (load average
 * 4 to 9); 23 to 47 s under ASan and UBSan (-O1, both engines, the machine
 * as busy); 99 s under TSan on an idle machine, which runs 2,000. The ranks get SOAK_DEADLINE_S before the harness kills them
 * and says so, the test SOAK_TIMEOUT_S. */
#define SOAK_DEADLINE_S 270.0
#define SOAK_TIMEOUT_S 300

/* The largest call: the bytes of its largest buffer (both buffers of
 * allreduce, broadcast, reduce; sendbuf of reduce_scatter, recvbuf of
 * allgather and allgatherv, either of alltoall, as nccl-tests counts). */
#define SOAK_MAX_BYTES ((size_t)4 << 20)

/* Several chunks per ring segment at the largest sizes, so that the
 * pipeline fills and turns over, rather than the default 1 MiB chunk that
 * a 4 MiB allreduce over 4 ranks sends in one piece per step. */
#define SOAK_CHUNK_BYTES ((size_t)256 << 10)

#define CANARY_ELEMS 16
#define CANARY_BYTES (CANARY_ELEMS * 8)

/* Largest gap between allgatherv blocks, in elements. */
#define MAX_GAP 7

/* How much a rank's resident set may grow between the end of the warm-up
 * and the end of the run. By then every buffer of the test and of the
 * library has reached its largest size (the warm-up ran every collective at
 * SOAK_MAX_BYTES, in each placement and at each root, opened the alltoall
 * connections and filled their shared-memory slots), so nothing need grow.
 * What may still appear are first touches of file-backed pages, the code of
 * paths the warm-up did not take (the kernels of the other types and ops,
 * the report): bounded by the text of the test binary and its libraries
 * that is actually used, 0.3 to 0.5 MiB measured, and the ASan build's
 * whole text is 2 MiB. Hence 4 MiB in all; and 1 MiB for the part that is
 * not file-backed (resident minus shared in statm), the heap, stacks and
 * anonymous mappings, where anything the library kept would land: it grew
 * by 0 KiB in the -O2 build and by 12 KiB under ASan over 10,000 calls.
 * That line is crossed by a library keeping 105 bytes per call, or one
 * 4 MiB buffer too many. (Under ASan, freed blocks wait in its quarantine,
 * so memory allocated and freed in every call would show here too.) */
#define RSS_GROWTH_LIMIT_KIB (4 * 1024)
#define ANON_GROWTH_LIMIT_KIB 1024

/* The warm-up's alltoalls that fill the shared-memory slots: blocks of
 * 127 KiB (a slot holds 64 KiB, the single copy starts at 128 KiB), so
 * that each message fills two slots of a link's 16; 16 calls go round
 * every ring of slots twice. */
#define WARM_SLOT_CALLS 16
#define WARM_SLOT_BLOCK_BYTES ((size_t)127 << 10)

/* The report keeps the tail of each rank's stderr: after this many lines the
 * first failures, which are the informative ones, would scroll out of it. */
#define MAX_REPORTED 4

typedef enum soak_kind {
    K_ALLREDUCE,
    K_REDUCE_SCATTER,
    K_ALLGATHER,
    K_ALLGATHERV,
    K_BROADCAST,
    K_REDUCE,
    K_ALLTOALL,
    K_BARRIER,
    K_COUNT
} soak_kind_t;

static const char *const kind_names[K_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "allgatherv",
    "broadcast", "reduce",         "alltoall",  "barrier",
};

static bool kind_has_op(soak_kind_t k)
{
    return k == K_ALLREDUCE || k == K_REDUCE_SCATTER || k == K_REDUCE;
}

static bool kind_has_root(soak_kind_t k)
{
    return k == K_BROADCAST || k == K_REDUCE;
}

static bool kind_has_data(soak_kind_t k)
{
    return k != K_BARRIER;
}

static bool kind_has_in_place(soak_kind_t k)
{
    return k != K_ALLTOALL && k != K_BARRIER;
}

/* Blocks of `count` elements in the largest buffer of the call. */
static size_t kind_blocks(soak_kind_t k, int nranks)
{
    return k == K_REDUCE_SCATTER || k == K_ALLGATHER || k == K_ALLTOALL ? (size_t)nranks : 1;
}

/* ---- the shared random sequence ------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

typedef struct rng {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return mix64(r->s);
}

static uint64_t rng_below(rng_t *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

/* Uniform in [0, 1). */
static double rng_unit(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* The salt of the call being checked: the index enters the values through
 * it, so that consecutive calls with the same arguments expect different
 * bits and a stale result cannot pass. */
static uint64_t g_salt;

static uint32_t soak_hash(uint64_t i)
{
    return (uint32_t)mix64(i ^ g_salt);
}

/* ---- one call ------------------------------------------------------------------ */

typedef struct soak_op {
    long index;         /* position in the sequence; negative: warm-up */
    soak_kind_t kind;
    hoop_dtype_t dtype;
    hoop_op_t op;       /* kinds with an op */
    int root;           /* kinds with a root */
    bool in_place;
    bool null_unused;   /* NULL for a buffer the call does not use here (passes_null) */
    size_t count;       /* the count argument; allgatherv: the total of recvcounts */
    bool gapped;        /* allgatherv: blocks in reverse rank order, gaps between */
    size_t gap;         /* allgatherv: elements after each block */
    size_t counts[HARNESS_MAX_PROCS], displs[HARNESS_MAX_PROCS];
} soak_op_t;

/* The size of a call, in elements of its largest buffer's blocks,
 * 0..maxcount (maxcount: SOAK_MAX_BYTES). Log-uniform, so that every order
 * of magnitude gets its share: 2 % of calls have 0 elements, 2 % have 1,
 * 0.2 % (about 20) maxcount; of the others, SIZE_P_FULL are log-uniform over
 * all of [1, maxcount], the rest over [1, maxcount * SIZE_SMALL_BYTES /
 * SOAK_MAX_BYTES]. A plain log-uniform draw over 22 octaves averages 1/15
 * of the top, 270 KiB a call, and checking 10,000 of those element by
 * element on every rank took a minute; this one averages about 100 KiB, and
 * still puts 1.5 to 2 % of the calls (150 to 200) between 2 and 4 MiB. */
#define SIZE_P_ZERO 0.02
#define SIZE_P_ONE 0.02
#define SIZE_P_MAX 0.002
#define SIZE_P_FULL 0.3
#define SIZE_SMALL_BYTES ((size_t)64 << 10)

/* Log-uniform in [1, maxcount]. */
static size_t draw_log_uniform(rng_t *r, size_t maxcount)
{
    size_t c = (size_t)exp(rng_unit(r) * log((double)maxcount + 1.0));
    return c < 1 ? 1 : c > maxcount ? maxcount : c;
}

static size_t draw_count(rng_t *r, size_t maxcount)
{
    double u = rng_unit(r);
    if (u < SIZE_P_ZERO)
        return 0;
    if (u < SIZE_P_ZERO + SIZE_P_ONE)
        return 1;
    if (u < SIZE_P_ZERO + SIZE_P_ONE + SIZE_P_MAX)
        return maxcount;
    if (rng_unit(r) < SIZE_P_FULL)
        return draw_log_uniform(r, maxcount);
    return draw_log_uniform(r, maxcount / (SOAK_MAX_BYTES / SIZE_SMALL_BYTES));
}

/* Split total elements among the ranks: uneven, some blocks empty, packed
 * in rank order or reversed with gaps. The whole layout stays within
 * maxcount elements. */
static void draw_agv_layout(rng_t *r, soak_op_t *o, int nranks, size_t maxcount)
{
    unsigned w[HARNESS_MAX_PROCS], wsum = 0;
    size_t gap = o->gap = o->gapped ? 1 + rng_below(r, MAX_GAP) : 0;
    for (int k = 0; k < nranks; k++) {
        w[k] = (unsigned)rng_below(r, 4); /* 0: an empty block */
        wsum += w[k];
    }
    size_t total = o->count;
    if (total + (size_t)nranks * gap > maxcount)
        total = maxcount - (size_t)nranks * gap;
    size_t given = 0;
    for (int k = 0; k < nranks; k++) {
        size_t n = wsum ? total / wsum * w[k] : 0;
        o->counts[k] = n;
        given += n;
    }
    /* The remainder to the last non-empty block, so that the total is exact. */
    for (int k = nranks - 1; k >= 0; k--)
        if (w[k] || wsum == 0) {
            o->counts[k] += total - given;
            break;
        }
    size_t at = 0;
    for (int k = 0; k < nranks; k++) {
        int rk = o->gapped ? nranks - 1 - k : k;
        o->displs[rk] = at;
        at += o->counts[rk] + gap;
    }
    o->count = total;
}

static void draw_op(rng_t *r, soak_op_t *o, long index, int nranks)
{
    memset(o, 0, sizeof *o);
    o->index = index;
    o->kind = (soak_kind_t)rng_below(r, K_COUNT);
    o->dtype = (hoop_dtype_t)rng_below(r, HOOP_DTYPE_COUNT);
    o->op = (hoop_op_t)rng_below(r, HOOP_OP_COUNT);
    o->root = (int)rng_below(r, (uint64_t)nranks);
    uint64_t flags = rng_next(r);
    o->in_place = (flags & 1) && kind_has_in_place(o->kind);
    o->null_unused = (flags & 2) != 0;
    o->gapped = (flags & 4) != 0 && o->kind == K_ALLGATHERV;
    size_t maxcount =
        SOAK_MAX_BYTES / hoop_dtype_size(o->dtype) / kind_blocks(o->kind, nranks);
    o->count = kind_has_data(o->kind) ? draw_count(r, maxcount) : 0;
    if (o->kind == K_ALLGATHERV)
        draw_agv_layout(r, o, nranks, maxcount);
}

/* ---- checking -------------------------------------------------------------------- */

typedef struct soak_stats {
    long ops[K_COUNT];
    long top[K_COUNT];    /* calls of more than SOAK_MAX_BYTES / 2 */
    long at_max;          /* calls of SOAK_MAX_BYTES */
    double bytes;         /* of the largest buffer, summed over calls */
    size_t rss_warm_kib, rss_end_kib;
    size_t anon_warm_kib, anon_end_kib;
    double warm_s, run_s;
    double lib_s;         /* of run_s, inside the library */
    int done;
} soak_stats_t;

typedef struct soak_state {
    hoop_comm_t *comm;
    int rank, nranks;
    uint8_t *send, *ref, *out, *want; /* SOAK_MAX_BYTES + CANARY_BYTES each */
    long mismatches;
    int reported;
    soak_stats_t *stats;
} soak_state_t;

/* The resident set in KiB and, in *anon_kib, its part not backed by files
 * (resident minus shared in /proc/self/statm): the heap, the stacks and
 * the anonymous mappings, where anything the library kept would be. */
static size_t rss_kib(size_t *anon_kib)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0, shared = 0;
    *anon_kib = 0;
    if (!f)
        return 0;
    int n = fscanf(f, "%lu %lu %lu", &size, &resident, &shared);
    fclose(f);
    if (n != 3)
        return 0;
    size_t page_kib = (size_t)sysconf(_SC_PAGESIZE) / 1024;
    *anon_kib = (size_t)(resident - shared) * page_kib;
    return (size_t)resident * page_kib;
}

/* Whether o passes NULL for a buffer rank does not use: a non-root's
 * sendbuf of broadcast and recvbuf of reduce, both buffers of an allreduce
 * of 0 elements. */
static bool passes_null(const soak_op_t *o, int rank)
{
    if (!o->null_unused || o->in_place)
        return false;
    if (o->kind == K_BROADCAST || o->kind == K_REDUCE)
        return rank != o->root;
    return o->kind == K_ALLREDUCE && o->count == 0;
}

static void describe_op(char *buf, size_t len, const soak_state_t *s, const soak_op_t *o)
{
    buf[0] = '\0';
    if (o->index < 0)
        harness_appendf(buf, len, "warm-up call %ld: %s", -o->index - 1, kind_names[o->kind]);
    else
        harness_appendf(buf, len, "call %ld: %s", o->index, kind_names[o->kind]);
    if (!kind_has_data(o->kind))
        return;
    harness_appendf(buf, len, " dtype=%s", hoop_dtype_str(o->dtype));
    if (kind_has_op(o->kind))
        harness_appendf(buf, len, " op=%s", hoop_op_str(o->op));
    harness_appendf(buf, len, " count=%zu", o->count);
    if (kind_has_root(o->kind))
        harness_appendf(buf, len, " root=%d", o->root);
    if (o->kind == K_ALLGATHERV) {
        harness_appendf(buf, len, " counts@displs=");
        for (int r = 0; r < s->nranks; r++)
            harness_appendf(buf, len, "%s%zu@%zu", r ? "," : "", o->counts[r], o->displs[r]);
    }
    harness_appendf(buf, len, " %s", o->in_place ? "in place" : "out of place");
    if (passes_null(o, s->rank))
        harness_appendf(buf, len, " (%s NULL)",
                o->kind == K_BROADCAST ? "sendbuf" : o->kind == K_REDUCE ? "recvbuf" : "buffers");
}

static void report(soak_state_t *s, const soak_op_t *o, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(soak_state_t *s, const soak_op_t *o, const char *fmt, ...)
{
    if (s->reported++ >= MAX_REPORTED)
        return;
    char what[512], which[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    describe_op(which, sizeof which, s, o);
    fprintf(stderr, "rank %d: %s: %s\n", s->rank, which, what);
}

/* Data that collectives only move: rank `from`'s input at the elements
 * [at, at + n), which differ from every other rank's at every element. */
static void put_moved(void *buf, size_t at, size_t n, const soak_op_t *o, int nranks, int from)
{
    values_put_input(buf, at, n, soak_hash, o->dtype, HOOP_MIN, nranks, from);
}

/* Names the first element of out that differs from want. */
static void report_out_mismatch(soak_state_t *s, const soak_op_t *o, size_t out_elems,
                                size_t es)
{
    size_t total = out_elems + CANARY_ELEMS, first = SIZE_MAX, wrong = 0;
    for (size_t e = 0; e < total; e++)
        if (memcmp(s->out + e * es, s->want + e * es, es) != 0) {
            if (first == SIZE_MAX)
                first = e;
            wrong++;
        }
    if (first == SIZE_MAX)
        return;
    char got[40], want[40], where[96] = "";
    values_hex_elem(got, sizeof got, s->out, first, es);
    values_hex_elem(want, sizeof want, s->want, first, es);
    if (first >= out_elems) {
        report(s, o, "wrote past the end of its output (element %zu after the last): got 0x%s, "
                     "expected 0x%s",
               first - out_elems, got, want);
        return;
    }
    if (o->kind == K_ALLGATHERV) {
        snprintf(where, sizeof where, " (in a gap between blocks)");
        for (int r = 0; r < s->nranks; r++)
            if (first >= o->displs[r] && first < o->displs[r] + o->counts[r])
                snprintf(where, sizeof where, " (block of rank %d, element %zu)", r,
                         first - o->displs[r]);
    } else if (out_elems > o->count && o->count) {
        snprintf(where, sizeof where, " (block %zu, element %zu)", first / o->count,
                 first % o->count);
    }
    report(s, o, "%zu wrong elements; first at index %zu%s: got 0x%s, expected 0x%s", wrong, first,
           where, got, want);
}

/* Runs and checks one call. Returns -1 when the library returned an error
 * (the communicator is then unusable and the rank stops), else 0; wrong
 * results only count, so that the ranks stay in step. */
static int run_op(soak_state_t *s, const soak_op_t *o)
{
    const int me = s->rank, n = s->nranks;
    const soak_kind_t k = o->kind;
    const hoop_dtype_t dt = o->dtype;
    const size_t es = hoop_dtype_size(dt), N = (size_t)n, cnt = o->count;
    const size_t canary = CANARY_ELEMS * es;
    const bool is_root = me == o->root;
    size_t send_elems = 0, out_elems = 0;
    hoop_status_t st;

    s->stats->ops[k]++;
    if (k == K_BARRIER) {
        double t0 = harness_now();
        st = hoop_barrier(s->comm);
        s->stats->lib_s += harness_now() - t0;
        if (st != HOOP_OK) {
            s->reported = 0; /* this ends the rank: always say why */
            report(s, o, "returned %s: %s", hoop_status_str(st), hoop_last_error());
            return -1;
        }
        return 0;
    }
    g_salt = mix64((uint64_t)o->index * 0xD6E8FEB86659FD93ull);

    switch (k) {
    case K_REDUCE_SCATTER:
        send_elems = N * cnt;
        out_elems = o->in_place ? N * cnt : cnt;
        break;
    case K_ALLGATHER:
        send_elems = cnt;
        out_elems = N * cnt;
        break;
    case K_ALLGATHERV:
        send_elems = o->counts[me];
        for (int r = 0; r < n; r++)
            if (o->displs[r] + o->counts[r] > out_elems)
                out_elems = o->displs[r] + o->counts[r];
        /* The gap after the last block is checked too. */
        out_elems += o->gap;
        break;
    case K_ALLTOALL: send_elems = out_elems = N * cnt; break;
    default: send_elems = out_elems = cnt; break;
    }
    size_t big = (send_elems > out_elems ? send_elems : out_elems) * es;
    s->stats->bytes += (double)big;
    if (big > SOAK_MAX_BYTES / 2)
        s->stats->top[k]++;
    if (big == SOAK_MAX_BYTES)
        s->stats->at_max++;

    /* The out-of-place sendbuf: this rank's input, then a canary. */
    switch (k) {
    case K_ALLREDUCE:
    case K_REDUCE_SCATTER:
    case K_REDUCE:
        values_put_input(s->send, 0, send_elems, soak_hash, dt, o->op, n, me);
        break;
    case K_ALLGATHERV: put_moved(s->send, o->displs[me], send_elems, o, n, me); break;
    case K_ALLGATHER: put_moved(s->send, (size_t)me * cnt, cnt, o, n, me); break;
    default: put_moved(s->send, 0, send_elems, o, n, me); break;
    }
    canary_fill(s->send + send_elems * es, canary, canary_send(me));

    /* want: the image of out after the call; out: its image before, the
     * complement wherever a result must land (an element the library never
     * writes cannot pass for a result), and what must survive elsewhere. */
    uint8_t *w = s->want;
    bool check_out = true;
    switch (k) {
    case K_ALLREDUCE:
        values_put_expected(w, 0, cnt, soak_hash, dt, o->op, n);
        if (o->in_place) {
            memcpy(s->out, s->send, cnt * es);
        } else {
            memcpy(s->out, w, cnt * es);
            canary_invert(s->out, cnt * es);
        }
        break;
    case K_REDUCE_SCATTER:
        if (o->in_place) {
            memcpy(s->out, s->send, N * cnt * es);
            memcpy(w, s->send, N * cnt * es);
            /* sendbuf is const: the other ranks' blocks must survive. */
            values_put_expected(w + (size_t)me * cnt * es, (size_t)me * cnt, cnt, soak_hash, dt,
                                o->op, n);
        } else {
            values_put_expected(w, (size_t)me * cnt, cnt, soak_hash, dt, o->op, n);
            memcpy(s->out, w, cnt * es);
            canary_invert(s->out, cnt * es);
        }
        break;
    case K_ALLGATHER:
        for (int r = 0; r < n; r++)
            put_moved(w + (size_t)r * cnt * es, (size_t)r * cnt, cnt, o, n, r);
        memcpy(s->out, w, out_elems * es);
        canary_invert(s->out, out_elems * es);
        if (o->in_place)
            memcpy(s->out + (size_t)me * cnt * es, s->send, cnt * es);
        break;
    case K_ALLGATHERV:
        /* Gaps hold canary bytes, which the call must leave alone. */
        canary_fill(w, out_elems * es, canary_out(me));
        for (int r = 0; r < n; r++)
            put_moved(w + o->displs[r] * es, o->displs[r], o->counts[r], o, n, r);
        memcpy(s->out, w, out_elems * es);
        for (int r = 0; r < n; r++)
            canary_invert(s->out + o->displs[r] * es, o->counts[r] * es);
        if (o->in_place)
            memcpy(s->out + o->displs[me] * es, s->send, send_elems * es);
        break;
    case K_BROADCAST:
        put_moved(w, 0, cnt, o, n, o->root);
        memcpy(s->out, w, cnt * es);
        if (!(o->in_place && is_root))
            canary_invert(s->out, cnt * es);
        break;
    case K_REDUCE:
        if (is_root) {
            values_put_expected(w, 0, cnt, soak_hash, dt, o->op, n);
            if (o->in_place) {
                memcpy(s->out, s->send, cnt * es);
            } else {
                memcpy(s->out, w, cnt * es);
                canary_invert(s->out, cnt * es);
            }
        } else if (o->in_place) {
            /* A non-root's buffer is its sendbuf, which is only read. */
            memcpy(w, s->send, cnt * es);
            memcpy(s->out, w, cnt * es);
        } else if (passes_null(o, me)) {
            check_out = false;
        } else {
            /* Not used on a non-root: it must come back as it went. */
            canary_fill(w, cnt * es, canary_out(me) ^ 0x11u);
            memcpy(s->out, w, cnt * es);
        }
        break;
    case K_ALLTOALL:
        for (int i = 0; i < n; i++)
            put_moved(w + (size_t)i * cnt * es, (size_t)me * cnt, cnt, o, n, i);
        memcpy(s->out, w, out_elems * es);
        canary_invert(s->out, out_elems * es);
        break;
    default: break;
    }
    canary_fill(w + out_elems * es, canary, canary_out(me));
    canary_fill(s->out + out_elems * es, canary, canary_out(me));
    if (!o->in_place)
        memcpy(s->ref, s->send, send_elems * es + canary);

    /* The buffers as each placement passes them. */
    const void *sendp = s->send;
    void *recvp = s->out;
    if (o->in_place) {
        switch (k) {
        case K_REDUCE_SCATTER:
            sendp = s->out;
            recvp = s->out + (size_t)me * cnt * es;
            break;
        case K_ALLGATHER: sendp = s->out + (size_t)me * cnt * es; break;
        case K_ALLGATHERV: sendp = s->out + o->displs[me] * es; break;
        default: sendp = s->out; break;
        }
    }
    if (passes_null(o, me)) {
        if (k != K_REDUCE)
            sendp = NULL;
        if (k != K_BROADCAST)
            recvp = NULL;
    }

    double t0 = harness_now();
    switch (k) {
    case K_ALLREDUCE: st = hoop_allreduce(s->comm, sendp, recvp, cnt, dt, o->op); break;
    case K_REDUCE_SCATTER: st = hoop_reduce_scatter(s->comm, sendp, recvp, cnt, dt, o->op); break;
    case K_ALLGATHER: st = hoop_allgather(s->comm, sendp, recvp, cnt, dt); break;
    case K_ALLGATHERV: st = hoop_allgatherv(s->comm, sendp, recvp, o->counts, o->displs, dt); break;
    case K_BROADCAST: st = hoop_broadcast(s->comm, sendp, recvp, cnt, dt, o->root); break;
    case K_REDUCE: st = hoop_reduce(s->comm, sendp, recvp, cnt, dt, o->op, o->root); break;
    case K_ALLTOALL: st = hoop_alltoall(s->comm, sendp, recvp, cnt, dt); break;
    default: st = HOOP_ERR_INVALID; break;
    }
    s->stats->lib_s += harness_now() - t0;
    if (st != HOOP_OK) {
        s->reported = 0; /* this ends the rank: always say why */
        report(s, o, "returned %s: %s", hoop_status_str(st), hoop_last_error());
        return -1;
    }

    bool bad = false;
    if (check_out && memcmp(s->out, w, out_elems * es + canary) != 0) {
        report_out_mismatch(s, o, out_elems, es);
        bad = true;
    }
    size_t sent = send_elems * es + canary, b;
    if (!o->in_place && sendp == s->send && (b = canary_first_diff(s->send, s->ref, sent)) < sent) {
        report(s, o, "modified sendbuf (byte %zu of %zu, canary included)", b, sent);
        bad = true;
    }
    if (bad)
        s->mismatches++;
    return 0;
}

/* ---- the job ---------------------------------------------------------------------- */

typedef struct soak_plan {
    uint64_t seed;
    long ops;
    soak_stats_t *stats; /* shared with the test process, one per rank */
} soak_plan_t;

/* Every collective at SOAK_MAX_BYTES, in each placement and at each root,
 * so that whatever the library sizes to the largest call exists before the
 * first reading of the resident set. Types and ops rotate. */
static int warm_up(soak_state_t *s)
{
    long idx = 0;
    for (int k = 0; k < K_COUNT; k++) {
        int nplace = kind_has_in_place((soak_kind_t)k) ? 2 : 1;
        int nroots = kind_has_root((soak_kind_t)k) ? s->nranks : 1;
        for (int ip = 0; ip < nplace; ip++)
            for (int root = 0; root < nroots; root++) {
                soak_op_t o;
                memset(&o, 0, sizeof o);
                o.index = -1 - idx;
                o.kind = (soak_kind_t)k;
                o.dtype = (hoop_dtype_t)(idx % HOOP_DTYPE_COUNT);
                o.op = (hoop_op_t)(idx % HOOP_OP_COUNT);
                o.root = root;
                o.in_place = ip == 1;
                idx++;
                size_t maxcount = SOAK_MAX_BYTES / hoop_dtype_size(o.dtype) /
                                  kind_blocks(o.kind, s->nranks);
                o.count = kind_has_data(o.kind) ? maxcount : 0;
                if (o.kind == K_ALLGATHERV)
                    for (int r = 0; r < s->nranks; r++) {
                        o.counts[r] = maxcount / (size_t)s->nranks;
                        o.displs[r] = (size_t)r * o.counts[r];
                    }
                if (run_op(s, &o) != 0)
                    return -1;
            }
    }
    /* The shared-memory links to the other ranks (alltoall's, the small
     * allreduce's) are mapped page by page as their slots are first used
     * (docs/transports.md), and the calls above sent whole blocks in place
     * (single copy), touching one page of a slot: alltoalls of blocks
     * below the single-copy size fill whole slots, and WARM_SLOT_CALLS of
     * them go round every link's ring of slots twice. */
    for (int i = 0; i < WARM_SLOT_CALLS; i++) {
        soak_op_t o;
        memset(&o, 0, sizeof o);
        o.index = -1 - idx++;
        o.kind = K_ALLTOALL;
        o.dtype = HOOP_F32;
        o.count = WARM_SLOT_BLOCK_BYTES / 4;
        if (run_op(s, &o) != 0)
            return -1;
    }
    return 0;
}

static int soak_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const soak_plan_t *plan = arg;
    soak_state_t s = {.comm = comm, .rank = rank, .nranks = size, .stats = &plan->stats[rank]};
    size_t cap = SOAK_MAX_BYTES + CANARY_BYTES;
    s.send = malloc(cap);
    s.ref = malloc(cap);
    s.out = malloc(cap);
    s.want = malloc(cap);
    int rc = 0;
    if (!s.send || !s.ref || !s.out || !s.want) {
        rc = harness_failf(rank, "out of memory for 4 buffers of %zu bytes", cap);
        goto out;
    }
    /* Resident from the start, whatever the calls touch. */
    memset(s.send, 0, cap);
    memset(s.ref, 0, cap);
    memset(s.out, 0, cap);
    memset(s.want, 0, cap);

    double t0 = harness_now();
    if (warm_up(&s) != 0) {
        rc = 1;
        goto out;
    }
    s.stats->rss_warm_kib = rss_kib(&s.stats->anon_warm_kib);
    s.stats->warm_s = harness_now() - t0;
    /* The statistics are those of the random calls. */
    memset(s.stats->ops, 0, sizeof s.stats->ops);
    memset(s.stats->top, 0, sizeof s.stats->top);
    s.stats->at_max = 0;
    s.stats->bytes = 0;
    s.stats->lib_s = 0;

    rng_t rng = {plan->seed};
    t0 = harness_now();
    for (long i = 0; i < plan->ops; i++) {
        soak_op_t o;
        draw_op(&rng, &o, i, size);
        if (run_op(&s, &o) != 0) {
            rc = 1;
            goto out;
        }
    }
    s.stats->run_s = harness_now() - t0;
    s.stats->rss_end_kib = rss_kib(&s.stats->anon_end_kib);
    s.stats->done = 1;

    long growth = (long)s.stats->rss_end_kib - (long)s.stats->rss_warm_kib;
    long anon_growth = (long)s.stats->anon_end_kib - (long)s.stats->anon_warm_kib;
    fprintf(stderr, "rank %d: resident set %zu KiB after the warm-up, %zu KiB after %ld calls "
                    "(%+ld KiB; not file-backed: %zu KiB, %zu KiB)\n",
            rank, s.stats->rss_warm_kib, s.stats->rss_end_kib, plan->ops, growth,
            s.stats->anon_warm_kib, s.stats->anon_end_kib);
    if (s.mismatches > 0)
        rc = harness_failf(rank, "%ld of %ld calls gave a wrong result (the first %d above)",
                           s.mismatches, plan->ops,
                           s.mismatches < MAX_REPORTED ? (int)s.mismatches : MAX_REPORTED);
    if (strcmp(harness_transport(), "ofi") == 0) {
        /* libfabric's software providers touch their buffer pools a little
         * further with every message until all of them have been used
         * (tcp;ofi_rxm: a plateau of about 125 MB after some 160,000
         * messages of 8 B, flat from there to 800,000; shm: pages of its
         * shared region): growth over 10,000 calls says nothing of leaks
         * there. The results are still checked. */
        if (rank == 0)
            fprintf(stderr, "soak: the resident set is not checked over ofi (libfabric's "
                            "buffer pools fill as they are used)\n");
    } else if (s.stats->rss_warm_kib == 0 || s.stats->rss_end_kib == 0)
        rc = harness_failf(rank, "cannot read the resident set from /proc/self/statm");
    else if (growth > RSS_GROWTH_LIMIT_KIB)
        rc = harness_failf(rank, "resident set grew by %ld KiB over %ld calls (limit %d KiB)",
                           growth, plan->ops, RSS_GROWTH_LIMIT_KIB);
    else if (anon_growth > ANON_GROWTH_LIMIT_KIB)
        rc = harness_failf(rank, "resident set not backed by files grew by %ld KiB over %ld "
                                 "calls (limit %d KiB)",
                           anon_growth, plan->ops, ANON_GROWTH_LIMIT_KIB);
out:
    free(s.send);
    free(s.ref);
    free(s.out);
    free(s.want);
    return rc;
}

/* A variable of this test, read and then removed from the environment: the
 * ranks inherit it, and the library warns about HOOP_ variables it does not
 * know. */
static bool take_env_u64(const char *name, unsigned long long *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    cr_assert(errno == 0 && *end == '\0' && v[0] != '-', "%s='%s' is not a whole number", name,
              v);
    *out = x;
    cr_assert(unsetenv(name) == 0);
    return true;
}

Test(soak, ten_thousand_collectives_n4, .timeout = SOAK_TIMEOUT_S)
{
    unsigned long long seed, ops = SOAK_DEFAULT_OPS;
    if (!take_env_u64("HOOP_SOAK_SEED", &seed)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
               (uint64_t)getpid();
    }
    take_env_u64("HOOP_SOAK_OPS", &ops);
    cr_assert(ops <= SOAK_MAX_OPS, "HOOP_SOAK_OPS=%llu: at most %lu", ops, SOAK_MAX_OPS);
    fprintf(stderr, "soak: seed %llu (HOOP_SOAK_SEED=%llu repeats it), %llu calls on %d ranks%s\n",
            seed, seed, ops, SOAK_RANKS,
            HARNESS_TSAN && ops == SOAK_DEFAULT_OPS ? " (fewer under TSan)" : "");

    soak_stats_t *stats = mmap(NULL, SOAK_RANKS * sizeof *stats, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(stats != MAP_FAILED, "mmap: %s", strerror(errno));
    memset(stats, 0, SOAK_RANKS * sizeof *stats);

    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = SOAK_CHUNK_BYTES;
    soak_plan_t plan = {.seed = seed, .ops = (long)ops, .stats = stats};
    static char report_buf[8192];
    double t0 = harness_now();
    bool ok = harness_run(SOAK_RANKS, &base, soak_rank, &plan, SOAK_DEADLINE_S, report_buf,
                          sizeof report_buf);
    double elapsed = harness_now() - t0;

    /* What rank 0 saw (every rank draws the same calls), and each rank's
     * resident set. */
    const soak_stats_t *st0 = &stats[0];
    if (st0->done) {
        char mix[512] = "";
        for (int k = 0; k < K_COUNT; k++)
            harness_appendf(mix, sizeof mix, "%s%s %ld (%ld over %zu MiB)", k ? ", " : "", kind_names[k],
                    st0->ops[k], st0->top[k], SOAK_MAX_BYTES >> 21);
        fprintf(stderr,
                "soak: %.1f s in all (warm-up %.1f s, calls %.1f s, of which %.1f s in the "
                "library), %.0f MiB per rank, %ld calls of %zu MiB; %s\n",
                elapsed, st0->warm_s, st0->run_s, st0->lib_s, st0->bytes / (1 << 20),
                st0->at_max, SOAK_MAX_BYTES >> 20, mix);
    }
    for (int r = 0; r < SOAK_RANKS; r++) {
        const soak_stats_t *sr = &stats[r];
        if (sr->done)
            fprintf(stderr, "soak: rank %d: resident set %zu KiB after the warm-up, %zu KiB at "
                            "the end (%+ld KiB, of which %+ld KiB not file-backed)\n",
                    r, sr->rss_warm_kib, sr->rss_end_kib,
                    (long)sr->rss_end_kib - (long)sr->rss_warm_kib,
                    (long)sr->anon_end_kib - (long)sr->anon_warm_kib);
        else
            fprintf(stderr, "soak: rank %d did not finish its calls\n", r);
    }
    munmap(stats, SOAK_RANKS * sizeof *stats);
    cr_assert(ok, "soak of %llu calls on %d ranks, seed %llu (HOOP_SOAK_SEED=%llu repeats it), "
                  "failed:\n%s",
              ops, SOAK_RANKS, seed, seed, report_buf);
}
