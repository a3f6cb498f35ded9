/* test_collectives.c - reduce_scatter(v), allgather, allgatherv, broadcast,
 * reduce, alltoall(v) and barrier over real processes on loopback.
 *
 * Every rank can compute every other rank's input (inputs are a function of
 * rank, index and case), so each rank builds the exact image its output
 * buffer must hold after the call, canaries and untouched parts included,
 * and compares every byte without trusting the library. Reductions use
 * small integers whose sums and products are exact in the narrowest type,
 * so the result does not depend on the order of the reduction; collectives
 * that only move data use arbitrary bit patterns, which a copy must keep.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "hoop.h"
#include "canary.h"
#include "values.h"

#define CANARY_ELEMS 16

/* Small chunks make a few KiB of data cross many chunk boundaries and fill
 * the pipeline, where the interesting bugs are. */
#define SMALL_CHUNK_BYTES 4096
#define SMALL_PIPELINE_DEPTH 3

/* Elements left between the blocks of the gapped allgatherv layout. */
#define GAP_ELEMS 3

/* The report keeps the tail of each rank's stderr: after this many lines the
 * first failures, which are the informative ones, would scroll out of it. */
#define MAX_REPORTED 8

typedef enum coll_kind {
    K_REDUCE_SCATTER,
    K_ALLGATHER,
    K_ALLGATHERV,
    K_BROADCAST,
    K_REDUCE,
    K_ALLTOALL,
    K_REDUCE_SCATTERV,
    K_ALLTOALLV,
} coll_kind_t;

static const char *const kind_names[] = {
    "reduce_scatter", "allgather", "allgatherv", "broadcast", "reduce", "alltoall",
    "reduce_scatterv", "alltoallv",
};

static bool kind_has_op(coll_kind_t k)
{
    return k == K_REDUCE_SCATTER || k == K_REDUCE || k == K_REDUCE_SCATTERV;
}

static bool kind_has_root(coll_kind_t k)
{
    return k == K_BROADCAST || k == K_REDUCE;
}

/* ---- values ---------------------------------------------------------------- */

/* The index enters through a hash rather than linearly so that the input has
 * no short period: a chunk delivered to the wrong offset would otherwise
 * carry the very values expected there. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The hash through which an element's index enters a reduction input. */
static uint32_t index_hash(uint64_t i)
{
    return (uint32_t)mix64(i);
}

/* Data that is only moved: any bits at all, NaN patterns included, which a
 * copy must keep. tag names the block (sender, destination, case). */
static void put_moved(void *buf, size_t n, size_t es, uint64_t tag)
{
    uint8_t *b = buf;
    uint64_t t = mix64(tag);
    for (size_t k = 0; k < n; k++) {
        uint64_t v = mix64(t ^ (k * 0xD6E8FEB86659FD93ull));
        memcpy(b + k * es, &v, es);
    }
}

/* ---- one case -------------------------------------------------------------- */

typedef struct coll_case {
    coll_kind_t kind;
    hoop_dtype_t dtype;
    hoop_op_t op;       /* kinds with an op */
    size_t count;       /* the count argument; allgatherv: the base of the counts */
    int root;           /* kinds with a root */
    bool in_place;
    bool gapped;        /* allgatherv: blocks in reverse rank order with gaps between */
    bool null_unused;   /* pass NULL for the buffer hoop.h says a non-root does not use */
    uint64_t salt;      /* same on every rank: the case number */
} coll_case_t;

typedef struct coll_state {
    hoop_comm_t *comm;
    int rank;
    int nranks;
    /* send: the out-of-place sendbuf; ref: a copy of it; out: the buffer the
     * result lands in (the in-place buffer in place); want: what out must
     * hold afterwards, canary included. */
    uint8_t *send, *ref, *out, *want, *scratch;
    size_t cap_bytes;
    size_t counts[HARNESS_MAX_PROCS], displs[HARNESS_MAX_PROCS];
    size_t scounts[HARNESS_MAX_PROCS], sdispls[HARNESS_MAX_PROCS]; /* alltoallv's sends */
    int mismatches; /* cases whose check failed; the rank keeps going so the others do not hang */
    int reported;   /* failure lines printed so far */
} coll_state_t;

static void describe_case(char *buf, size_t len, const coll_state_t *s, const coll_case_t *c)
{
    int n = snprintf(buf, len, "%s N=%d dtype=%s", kind_names[c->kind], s->nranks,
                     hoop_dtype_str(c->dtype));
    if (kind_has_op(c->kind))
        n += snprintf(buf + n, len - (size_t)n, " op=%s", hoop_op_str(c->op));
    n += snprintf(buf + n, len - (size_t)n, " count=%zu", c->count);
    if (kind_has_root(c->kind))
        n += snprintf(buf + n, len - (size_t)n, " root=%d", c->root);
    if (c->kind == K_ALLGATHERV || c->kind == K_ALLTOALLV)
        n += snprintf(buf + n, len - (size_t)n, " %s", c->gapped ? "gapped" : "packed");
    if (c->null_unused && !c->in_place && kind_has_root(c->kind) && s->rank != c->root)
        n += snprintf(buf + n, len - (size_t)n, " %s=NULL",
                      c->kind == K_BROADCAST ? "sendbuf" : "recvbuf");
    snprintf(buf + n, len - (size_t)n, " %s", c->in_place ? "in place" : "out of place");
}

static void describe_fail(coll_state_t *s, const coll_case_t *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void describe_fail(coll_state_t *s, const coll_case_t *c, const char *fmt, ...)
{
    if (s->reported++ >= MAX_REPORTED)
        return;
    char what[512], which[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    describe_case(which, sizeof which, s, c);
    fprintf(stderr, "rank %d: %s: %s\n", s->rank, which, what);
}

static bool ensure_capacity(coll_state_t *s, size_t bytes)
{
    if (bytes <= s->cap_bytes)
        return true;
    uint8_t **bufs[] = {&s->send, &s->ref, &s->out, &s->want, &s->scratch};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) {
        free(*bufs[k]);
        *bufs[k] = malloc(bytes);
        if (!*bufs[k]) {
            s->cap_bytes = 0;
            return false;
        }
    }
    s->cap_bytes = bytes;
    return true;
}

static void state_free(coll_state_t *s)
{
    free(s->send);
    free(s->ref);
    free(s->out);
    free(s->want);
    free(s->scratch);
}

/* Uneven contributions, a third of them empty, and none at all for a base
 * count of 0. */
static void set_agv_layout(coll_state_t *s, const coll_case_t *c)
{
    size_t at = 0;
    for (int k = 0; k < s->nranks; k++) {
        /* Reverse order: block r no longer sits at r times anything. */
        int r = c->gapped ? s->nranks - 1 - k : k;
        size_t n = c->count == 0 || r % 3 == 1 ? 0 : c->count + (size_t)r * (c->count / 4 + 1);
        s->counts[r] = n;
        s->displs[r] = at;
        at += n + (c->gapped ? GAP_ELEMS : 0);
    }
}

/* alltoallv: what rank i sends rank j, uneven and a third of it empty (none
 * at all for a base count of 0). */
static size_t a2av_count(const coll_case_t *c, int i, int j)
{
    if (c->count == 0 || (i + 2 * j) % 3 == 1)
        return 0;
    return c->count + (size_t)((i * 7 + j * 3) % 5);
}

/* alltoallv: sends packed in rank order; receives packed, or in reverse
 * rank order with gaps. */
static void set_a2av_layout(coll_state_t *s, const coll_case_t *c)
{
    size_t at = 0;
    for (int j = 0; j < s->nranks; j++) {
        s->scounts[j] = a2av_count(c, s->rank, j);
        s->sdispls[j] = at;
        at += s->scounts[j];
    }
    at = 0;
    for (int k = 0; k < s->nranks; k++) {
        int i = c->gapped ? s->nranks - 1 - k : k;
        s->counts[i] = a2av_count(c, i, s->rank);
        s->displs[i] = at;
        at += s->counts[i] + (c->gapped ? GAP_ELEMS : 0);
    }
}

static uint64_t move_tag(const coll_case_t *c, int from, int to)
{
    return c->salt * 4096 + (uint64_t)from * 64 + (uint64_t)to;
}

/* Where the bytes of out stand against the expected image: names the
 * first differing element for the report. */
static void report_out_mismatch(coll_state_t *s, const coll_case_t *c, size_t data_elems,
                                size_t es)
{
    size_t total = data_elems * es + CANARY_ELEMS * es;
    size_t first = SIZE_MAX, wrong = 0;
    for (size_t e = 0; e * es < total; e++) {
        if (memcmp(s->out + e * es, s->want + e * es, es) != 0) {
            if (first == SIZE_MAX)
                first = e;
            wrong++;
        }
    }
    if (first == SIZE_MAX)
        return;
    char got[40], want[40];
    values_hex_elem(got, sizeof got, s->out, first, es);
    values_hex_elem(want, sizeof want, s->want, first, es);
    if (first >= data_elems) {
        describe_fail(s, c, "wrote past the end of its output (element %zu after the last)",
                      first - data_elems);
        return;
    }
    /* Which block the element belongs to, for the collectives with blocks. */
    char where[96] = "";
    if (c->kind == K_ALLGATHERV) {
        snprintf(where, sizeof where, " (in a gap between blocks)");
        for (int r = 0; r < s->nranks; r++)
            if (first >= s->displs[r] && first < s->displs[r] + s->counts[r])
                snprintf(where, sizeof where, " (block of rank %d, element %zu)", r,
                         first - s->displs[r]);
    } else if ((c->kind == K_ALLGATHER || c->kind == K_ALLTOALL ||
                (c->kind == K_REDUCE_SCATTER && c->in_place)) &&
               c->count) {
        snprintf(where, sizeof where, " (block %zu, element %zu)", first / c->count,
                 first % c->count);
    }
    describe_fail(s, c, "%zu wrong elements; first at index %zu%s: got 0x%s, expected 0x%s", wrong,
                  first, where, got, want);
}

/* Returns -1 when the library returned an error (the communicator is then
 * unusable and the rank stops), else 0; value mismatches only count. */
static int run_case(coll_state_t *s, const coll_case_t *c)
{
    const int me = s->rank, n = s->nranks;
    const size_t es = hoop_dtype_size(c->dtype), N = (size_t)n, cnt = c->count;
    const size_t canary = CANARY_ELEMS * es;
    const bool is_root = me == c->root;
    size_t send_elems = 0, out_elems = 0;

    if (c->kind == K_ALLGATHERV || c->kind == K_REDUCE_SCATTERV)
        set_agv_layout(s, c);
    if (c->kind == K_ALLTOALLV)
        set_a2av_layout(s, c);
    /* reduce_scatterv: the blocks one after the other. */
    size_t rsv_total = 0;
    for (int r = 0; r < n && c->kind == K_REDUCE_SCATTERV; r++) {
        s->displs[r] = rsv_total;
        rsv_total += s->counts[r];
    }
    switch (c->kind) {
    case K_REDUCE_SCATTER:
        send_elems = N * cnt;
        out_elems = c->in_place ? N * cnt : cnt;
        break;
    case K_ALLGATHER:
        send_elems = cnt;
        out_elems = N * cnt;
        break;
    case K_ALLGATHERV:
        send_elems = s->counts[me];
        for (int r = 0; r < n; r++)
            if (s->displs[r] + s->counts[r] > out_elems)
                out_elems = s->displs[r] + s->counts[r];
        /* The gap after the last block is checked too. */
        if (c->gapped)
            out_elems += GAP_ELEMS;
        break;
    case K_ALLTOALL:
        send_elems = out_elems = N * cnt;
        break;
    case K_REDUCE_SCATTERV:
        send_elems = rsv_total;
        out_elems = c->in_place ? rsv_total : s->counts[me];
        break;
    case K_ALLTOALLV:
        for (int r = 0; r < n; r++) {
            send_elems += s->scounts[r];
            if (s->displs[r] + s->counts[r] > out_elems)
                out_elems = s->displs[r] + s->counts[r];
        }
        if (c->gapped)
            out_elems += GAP_ELEMS;
        break;
    default: send_elems = out_elems = cnt; break;
    }
    size_t need = (send_elems > out_elems ? send_elems : out_elems) * es + canary;
    if (!ensure_capacity(s, need)) {
        harness_failf(me, "out of memory for %zu bytes", need);
        return -1;
    }

    /* The out-of-place sendbuf: this rank's input, then a canary. */
    switch (c->kind) {
    case K_REDUCE_SCATTER:
    case K_REDUCE_SCATTERV:
    case K_REDUCE:
        values_put_input(s->send, 0, send_elems, index_hash, c->dtype, c->op, n, me);
        break;
    case K_ALLTOALLV:
        for (int j = 0; j < n; j++)
            put_moved(s->send + s->sdispls[j] * es, s->scounts[j], es, move_tag(c, me, j));
        break;
    case K_ALLTOALL:
        for (int j = 0; j < n; j++)
            put_moved(s->send + (size_t)j * cnt * es, cnt, es, move_tag(c, me, j));
        break;
    default: put_moved(s->send, send_elems, es, move_tag(c, me, me)); break;
    }
    canary_fill(s->send + send_elems * es, canary, canary_send(me));
    memcpy(s->ref, s->send, send_elems * es + canary);

    /* want: the image of out after the call; out: its image before, which
     * is the complement wherever a result must land (an element the library
     * never writes cannot pass for a result), and what must survive
     * elsewhere. */
    uint8_t *w = s->want;
    bool touched_out = true; /* out is passed to the call at all */
    switch (c->kind) {
    case K_REDUCE_SCATTER:
        if (c->in_place) {
            values_put_input(w, 0, N * cnt, index_hash, c->dtype, c->op, n, me);
            memcpy(s->out, w, N * cnt * es);
            /* sendbuf is const: the other ranks' blocks must survive. */
            values_put_expected(w + (size_t)me * cnt * es, (size_t)me * cnt, cnt, index_hash,
                                c->dtype, c->op, n);
        } else {
            values_put_expected(w, (size_t)me * cnt, cnt, index_hash, c->dtype, c->op, n);
            memcpy(s->out, w, cnt * es);
            canary_invert(s->out, cnt * es);
        }
        break;
    case K_ALLGATHER:
        for (int r = 0; r < n; r++)
            put_moved(w + (size_t)r * cnt * es, cnt, es, move_tag(c, r, r));
        memcpy(s->out, w, out_elems * es);
        canary_invert(s->out, out_elems * es);
        if (c->in_place)
            memcpy(s->out + (size_t)me * cnt * es, s->send, cnt * es);
        break;
    case K_ALLGATHERV:
        /* Gaps hold canary bytes, which the call must leave alone. */
        canary_fill(w, out_elems * es, canary_out(me));
        for (int r = 0; r < n; r++)
            put_moved(w + s->displs[r] * es, s->counts[r], es, move_tag(c, r, r));
        memcpy(s->out, w, out_elems * es);
        for (int r = 0; r < n; r++)
            canary_invert(s->out + s->displs[r] * es, s->counts[r] * es);
        if (c->in_place)
            memcpy(s->out + s->displs[me] * es, s->send, s->counts[me] * es);
        break;
    case K_BROADCAST:
        put_moved(w, cnt, es, move_tag(c, c->root, c->root));
        memcpy(s->out, w, cnt * es);
        if (!(c->in_place && is_root))
            canary_invert(s->out, cnt * es);
        break;
    case K_REDUCE:
        if (is_root) {
            values_put_expected(w, 0, cnt, index_hash, c->dtype, c->op, n);
            memcpy(s->out, w, cnt * es);
            if (c->in_place)
                memcpy(s->out, s->send, cnt * es);
            else
                canary_invert(s->out, cnt * es);
        } else if (c->in_place) {
            /* A non-root's buffer is its sendbuf, which is only read. */
            memcpy(w, s->send, cnt * es);
            memcpy(s->out, w, cnt * es);
        } else if (c->null_unused) {
            touched_out = false;
        } else {
            /* Not used on a non-root: it must come back as it went. */
            put_moved(w, cnt, es, ~c->salt);
            memcpy(s->out, w, cnt * es);
        }
        break;
    case K_ALLTOALL:
        for (int i = 0; i < n; i++)
            put_moved(w + (size_t)i * cnt * es, cnt, es, move_tag(c, i, me));
        memcpy(s->out, w, out_elems * es);
        canary_invert(s->out, out_elems * es);
        break;
    case K_REDUCE_SCATTERV: {
        size_t mc = s->counts[me], mo = s->displs[me];
        if (c->in_place) {
            values_put_input(w, 0, rsv_total, index_hash, c->dtype, c->op, n, me);
            memcpy(s->out, w, rsv_total * es);
            values_put_expected(w + mo * es, mo, mc, index_hash, c->dtype, c->op, n);
        } else {
            values_put_expected(w, mo, mc, index_hash, c->dtype, c->op, n);
            memcpy(s->out, w, mc * es);
            canary_invert(s->out, mc * es);
        }
        break;
    }
    case K_ALLTOALLV:
        canary_fill(w, out_elems * es, canary_out(me));
        for (int i = 0; i < n; i++)
            put_moved(w + s->displs[i] * es, s->counts[i], es, move_tag(c, i, me));
        memcpy(s->out, w, out_elems * es);
        for (int i = 0; i < n; i++)
            canary_invert(s->out + s->displs[i] * es, s->counts[i] * es);
        break;
    }
    canary_fill(w + out_elems * es, canary, canary_out(me));
    canary_fill(s->out + out_elems * es, canary, canary_out(me));

    /* The buffers as each placement passes them. */
    const void *sendp = s->send;
    void *recvp = s->out;
    if (c->in_place) {
        switch (c->kind) {
        case K_REDUCE_SCATTER:
            sendp = s->out;
            recvp = s->out + (size_t)me * cnt * es;
            break;
        case K_ALLGATHER: sendp = s->out + (size_t)me * cnt * es; break;
        case K_ALLGATHERV: sendp = s->out + s->displs[me] * es; break;
        case K_REDUCE_SCATTERV:
            sendp = s->out;
            recvp = s->out + s->displs[me] * es;
            break;
        default: sendp = s->out; break;
        }
    }
    if (c->null_unused && !c->in_place && !is_root) {
        if (c->kind == K_BROADCAST)
            sendp = NULL;
        else if (c->kind == K_REDUCE)
            recvp = NULL;
    }

    hoop_status_t st = HOOP_OK;
    switch (c->kind) {
    case K_REDUCE_SCATTER:
        st = hoop_reduce_scatter(s->comm, sendp, recvp, cnt, c->dtype, c->op);
        break;
    case K_ALLGATHER: st = hoop_allgather(s->comm, sendp, recvp, cnt, c->dtype); break;
    case K_ALLGATHERV:
        st = hoop_allgatherv(s->comm, sendp, recvp, s->counts, s->displs, c->dtype);
        break;
    case K_BROADCAST: st = hoop_broadcast(s->comm, sendp, recvp, cnt, c->dtype, c->root); break;
    case K_REDUCE: st = hoop_reduce(s->comm, sendp, recvp, cnt, c->dtype, c->op, c->root); break;
    case K_ALLTOALL: st = hoop_alltoall(s->comm, sendp, recvp, cnt, c->dtype); break;
    case K_REDUCE_SCATTERV:
        st = hoop_reduce_scatterv(s->comm, sendp, recvp, s->counts, c->dtype, c->op);
        break;
    case K_ALLTOALLV:
        st = hoop_alltoallv(s->comm, sendp, s->scounts, s->sdispls, recvp, s->counts, s->displs,
                            c->dtype);
        break;
    }
    if (st != HOOP_OK) {
        s->reported = 0; /* this ends the rank: always say why */
        describe_fail(s, c, "returned %s: %s", hoop_status_str(st), hoop_last_error());
        return -1;
    }

    bool bad = false;
    if (touched_out && memcmp(s->out, w, out_elems * es + canary) != 0) {
        report_out_mismatch(s, c, out_elems, es);
        bad = true;
    }
    size_t sent = send_elems * es + canary, k;
    if (!c->in_place && (k = canary_first_diff(s->send, s->ref, sent)) < sent) {
        describe_fail(s, c, "modified sendbuf (byte %zu of %zu, canary included)", k, sent);
        bad = true;
    }
    if (bad)
        s->mismatches++;
    return 0;
}

/* ---- the cases of one job ---------------------------------------------------- */

typedef struct coll_plan {
    coll_kind_t kind;
} coll_plan_t;

static size_t counts_for(coll_kind_t k, int nranks, size_t es, size_t *counts)
{
    size_t n = 0;
    counts[n++] = 0;
    counts[n++] = 1;
    if (k == K_ALLTOALL || k == K_ALLTOALLV) {
        counts[n++] = 5;
        /* Every pairwise block spans several chunks. */
        counts[n++] = 3 * SMALL_CHUNK_BYTES / es + 5;
        return n;
    }
    counts[n++] = 7;
    counts[n++] = 1000u * (size_t)nranks + 3;
    /* Per rank (or per step of the chain) more chunks than the pipeline
     * holds, and a partial one at the end. */
    counts[n++] = (SMALL_PIPELINE_DEPTH + 2) * SMALL_CHUNK_BYTES / es + 11;
    return n;
}

static int roots_for(coll_kind_t k, int nranks, int *roots)
{
    if (!kind_has_root(k)) {
        roots[0] = 0;
        return 1;
    }
    if (nranks <= 4) {
        for (int r = 0; r < nranks; r++)
            roots[r] = r;
        return nranks;
    }
    roots[0] = 0;
    roots[1] = nranks - 1;
    roots[2] = nranks / 2;
    return 3;
}

static int coll_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const coll_plan_t *plan = arg;
    coll_kind_t k = plan->kind;
    coll_state_t s = {.comm = comm, .rank = rank, .nranks = size};
    int roots[8];
    int nroots = roots_for(k, size, roots);
    int nops = kind_has_op(k) ? HOOP_OP_COUNT : 1;
    int nplace = k == K_ALLTOALL || k == K_ALLTOALLV ? 1 : 2;
    int nlayouts = k == K_ALLGATHERV || k == K_ALLTOALLV ? 2 : 1;
    uint64_t salt = 0;
    int rc = 0;

    for (int dt = 0; dt < HOOP_DTYPE_COUNT && rc == 0; dt++) {
        size_t counts[8];
        size_t ncounts = counts_for(k, size, hoop_dtype_size((hoop_dtype_t)dt), counts);
        for (int op = 0; op < nops && rc == 0; op++)
            for (int ri = 0; ri < nroots && rc == 0; ri++)
                for (size_t ci = 0; ci < ncounts && rc == 0; ci++)
                    for (int lay = 0; lay < nlayouts && rc == 0; lay++)
                        for (int ip = 0; ip < nplace && rc == 0; ip++) {
                            coll_case_t c = {
                                .kind = k,
                                .dtype = (hoop_dtype_t)dt,
                                .op = (hoop_op_t)op,
                                .count = counts[ci],
                                .root = roots[ri],
                                .in_place = ip == 1,
                                .gapped = lay == 1,
                                /* Both ways for each count, in turn. */
                                .null_unused = ((ci + (size_t)dt) & 1) == 0,
                                .salt = ++salt,
                            };
                            if (run_case(&s, &c) != 0)
                                rc = 1;
                        }
    }
    if (rc == 0 && s.mismatches > 0)
        rc = harness_failf(rank, "%d cases gave a wrong result (the first %d above)",
                           s.mismatches, s.mismatches < MAX_REPORTED ? s.mismatches : MAX_REPORTED);
    state_free(&s);
    return rc;
}

static void run_kind(coll_kind_t k, int nranks)
{
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = SMALL_CHUNK_BYTES;
    base.pipeline_depth = SMALL_PIPELINE_DEPTH;
    coll_plan_t plan = {k};
    static char report[8192];
    bool ok = harness_run(nranks, &base, coll_rank, &plan, 100.0, report, sizeof report);
    cr_assert(ok, "%s with %d ranks (chunk_bytes %d, pipeline_depth %d) failed:\n%s",
              kind_names[k], nranks, SMALL_CHUNK_BYTES, SMALL_PIPELINE_DEPTH, report);
}

#define KIND_TESTS(kind, name)                                                                     \
    Test(collectives, name##_1, .timeout = 150) { run_kind(kind, 1); }                             \
    Test(collectives, name##_2, .timeout = 150) { run_kind(kind, 2); }                             \
    Test(collectives, name##_3, .timeout = 150) { run_kind(kind, 3); }                             \
    Test(collectives, name##_4, .timeout = 150) { run_kind(kind, 4); }                             \
    Test(collectives, name##_5, .timeout = 150) { run_kind(kind, 5); }                             \
    Test(collectives, name##_6, .timeout = 150) { run_kind(kind, 6); }                             \
    Test(collectives, name##_7, .timeout = 150) { run_kind(kind, 7); }                             \
    Test(collectives, name##_8, .timeout = 150) { run_kind(kind, 8); }

KIND_TESTS(K_REDUCE_SCATTER, reduce_scatter_ranks)
KIND_TESTS(K_ALLGATHER, allgather_ranks)
KIND_TESTS(K_ALLGATHERV, allgatherv_ranks)
KIND_TESTS(K_BROADCAST, broadcast_ranks)
KIND_TESTS(K_REDUCE, reduce_ranks)
KIND_TESTS(K_ALLTOALL, alltoall_ranks)
KIND_TESTS(K_REDUCE_SCATTERV, reduce_scatterv_ranks)
KIND_TESTS(K_ALLTOALLV, alltoallv_ranks)

/* ---- barrier ----------------------------------------------------------------- */

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define BARRIER_STAGGER_MS 50

/* All ranks share this machine's clock: after the barrier every rank's
 * clock must be past the moment the last rank entered it. Twice, the late
 * rank at either end of the ring. */
static int barrier_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    for (int round = 0; round < 2; round++) {
        int delay = round == 0 ? rank : size - 1 - rank;
        harness_sleep_ms((long)delay * BARRIER_STAGGER_MS);
        int64_t entry = realtime_ns();
        hoop_status_t st = hoop_barrier(comm);
        int64_t left = realtime_ns();
        if (st != HOOP_OK)
            return harness_fail(rank, round == 0 ? "barrier (round 1)" : "barrier (round 2)", st);

        int64_t entries[HARNESS_MAX_PROCS];
        st = hoop_allgather(comm, &entry, entries, 1, HOOP_I64);
        if (st != HOOP_OK)
            return harness_fail(rank, "allgather of the barrier entry times", st);
        if (entries[rank] != entry)
            return harness_failf(rank, "allgather put %lld at my block, not my entry time %lld",
                                 (long long)entries[rank], (long long)entry);
        int last = 0;
        for (int r = 1; r < size; r++)
            if (entries[r] > entries[last])
                last = r;
        if (left < entries[last])
            return harness_failf(rank,
                                 "round %d: left the barrier %.3f ms before rank %d entered it "
                                 "(ranks entered %d ms apart)",
                                 round + 1, (double)(entries[last] - left) / 1e6, last,
                                 BARRIER_STAGGER_MS);
    }
    return 0;
}

static void run_barrier(int nranks)
{
    static char report[8192];
    bool ok = harness_run(nranks, NULL, barrier_rank, NULL, 60.0, report, sizeof report);
    cr_assert(ok, "barrier with %d ranks failed:\n%s", nranks, report);
}

Test(collectives, barrier_ranks_1, .timeout = 90) { run_barrier(1); }
Test(collectives, barrier_ranks_2, .timeout = 90) { run_barrier(2); }
Test(collectives, barrier_ranks_3, .timeout = 90) { run_barrier(3); }
Test(collectives, barrier_ranks_4, .timeout = 90) { run_barrier(4); }
Test(collectives, barrier_ranks_5, .timeout = 90) { run_barrier(5); }
Test(collectives, barrier_ranks_6, .timeout = 90) { run_barrier(6); }
Test(collectives, barrier_ranks_7, .timeout = 90) { run_barrier(7); }
Test(collectives, barrier_ranks_8, .timeout = 90) { run_barrier(8); }

/* ---- bad arguments ----------------------------------------------------------- */

static bool is_name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || ch == '_';
}

/* name as a word of msg: "allgather" is not found in "allgatherv". */
static bool names_word(const char *msg, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(msg, name); p; p = strstr(p + 1, name))
        if ((p == msg || !is_name_char(p[-1])) && !is_name_char(p[len]))
            return true;
    return false;
}

static int expect_invalid(int rank, const char *name, const char *what, hoop_status_t st)
{
    const char *msg = hoop_last_error();
    if (st != HOOP_ERR_INVALID)
        return harness_failf(rank, "%s with %s: got %s (%s), expected %s", name, what,
                             hoop_status_str(st), msg, hoop_status_str(HOOP_ERR_INVALID));
    if (!msg || !msg[0])
        return harness_failf(rank, "%s with %s: HOOP_ERR_INVALID but no message", name, what);
    if (!names_word(msg, name))
        return harness_failf(rank, "%s with %s: the message does not name \"%s\": %s", name,
                             what, name, msg);
    return 0;
}

#define BAD_ELEMS 16

/* Every rank makes the same bad calls, each one refused on every rank, so
 * that no rank goes on to wait for the others. Calls that are bad on one
 * rank only (a root's NULL buffer) run in a one-rank job, where that rank
 * is every rank. */
static int bad_args_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    float a[BAD_ELEMS * HARNESS_MAX_PROCS], b[BAD_ELEMS * HARNESS_MAX_PROCS];
    size_t counts[HARNESS_MAX_PROCS], displs[HARNESS_MAX_PROCS];
    const hoop_dtype_t f = HOOP_F32, bad_dt = HOOP_DTYPE_COUNT;
    const hoop_op_t sum = HOOP_SUM, bad_op = HOOP_OP_COUNT;
    const size_t c = 4;
    int fails = 0;

    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    for (int r = 0; r < size; r++) {
        counts[r] = c;
        displs[r] = (size_t)r * c;
    }

#define BAD(name, what, call) fails += expect_invalid(rank, name, what, (call))
    BAD("reduce_scatter", "a NULL communicator", hoop_reduce_scatter(NULL, a, b, c, f, sum));
    BAD("reduce_scatter", "a NULL sendbuf", hoop_reduce_scatter(comm, NULL, b, c, f, sum));
    BAD("reduce_scatter", "a NULL recvbuf", hoop_reduce_scatter(comm, a, NULL, c, f, sum));
    BAD("reduce_scatter", "an unknown dtype", hoop_reduce_scatter(comm, a, b, c, bad_dt, sum));
    BAD("reduce_scatter", "an unknown op", hoop_reduce_scatter(comm, a, b, c, f, bad_op));
    /* Overlapping, but not the in-place layout (recvbuf = block `rank`). */
    BAD("reduce_scatter", "recvbuf overlapping sendbuf off the in-place block",
        hoop_reduce_scatter(comm, a, a + (size_t)rank * c + 1, c, f, sum));

    BAD("allgather", "a NULL communicator", hoop_allgather(NULL, a, b, c, f));
    BAD("allgather", "a NULL sendbuf", hoop_allgather(comm, NULL, b, c, f));
    BAD("allgather", "a NULL recvbuf", hoop_allgather(comm, a, NULL, c, f));
    BAD("allgather", "an unknown dtype", hoop_allgather(comm, a, b, c, bad_dt));
    BAD("allgather", "sendbuf overlapping recvbuf off the in-place block",
        hoop_allgather(comm, b + (size_t)rank * c + 1, b, c, f));

    BAD("allgatherv", "a NULL communicator", hoop_allgatherv(NULL, a, b, counts, displs, f));
    BAD("allgatherv", "NULL recvcounts", hoop_allgatherv(comm, a, b, NULL, displs, f));
    BAD("allgatherv", "NULL displs", hoop_allgatherv(comm, a, b, counts, NULL, f));
    BAD("allgatherv", "a NULL sendbuf", hoop_allgatherv(comm, NULL, b, counts, displs, f));
    BAD("allgatherv", "a NULL recvbuf", hoop_allgatherv(comm, a, NULL, counts, displs, f));
    BAD("allgatherv", "an unknown dtype", hoop_allgatherv(comm, a, b, counts, displs, bad_dt));
    if (size > 1) {
        size_t ov[HARNESS_MAX_PROCS];
        memcpy(ov, displs, sizeof ov);
        ov[1] = 1; /* rank 1's block starts inside rank 0's */
        BAD("allgatherv", "overlapping blocks", hoop_allgatherv(comm, a, b, counts, ov, f));
    }

    BAD("broadcast", "a NULL communicator", hoop_broadcast(NULL, a, b, c, f, 0));
    BAD("broadcast", "root -1", hoop_broadcast(comm, a, b, c, f, -1));
    BAD("broadcast", "root == size", hoop_broadcast(comm, a, b, c, f, size));
    BAD("broadcast", "an unknown dtype", hoop_broadcast(comm, a, b, c, bad_dt, 0));
    BAD("broadcast", "a NULL recvbuf", hoop_broadcast(comm, a, NULL, c, f, 0));

    BAD("reduce", "a NULL communicator", hoop_reduce(NULL, a, b, c, f, sum, 0));
    BAD("reduce", "root -1", hoop_reduce(comm, a, b, c, f, sum, -1));
    BAD("reduce", "root == size", hoop_reduce(comm, a, b, c, f, sum, size));
    BAD("reduce", "an unknown dtype", hoop_reduce(comm, a, b, c, bad_dt, sum, 0));
    BAD("reduce", "an unknown op", hoop_reduce(comm, a, b, c, f, bad_op, 0));
    BAD("reduce", "a NULL sendbuf", hoop_reduce(comm, NULL, b, c, f, sum, 0));

    BAD("alltoall", "a NULL communicator", hoop_alltoall(NULL, a, b, c, f));
    BAD("alltoall", "a NULL sendbuf", hoop_alltoall(comm, NULL, b, c, f));
    BAD("alltoall", "a NULL recvbuf", hoop_alltoall(comm, a, NULL, c, f));
    BAD("alltoall", "an unknown dtype", hoop_alltoall(comm, a, b, c, bad_dt));
    BAD("alltoall", "sendbuf == recvbuf (there is no in-place alltoall)",
        hoop_alltoall(comm, a, a, c, f));
    BAD("alltoall", "recvbuf one element after sendbuf", hoop_alltoall(comm, a, a + 1, c, f));

    BAD("reduce_scatterv", "a NULL communicator", hoop_reduce_scatterv(NULL, a, b, counts, f, sum));
    BAD("reduce_scatterv", "NULL recvcounts", hoop_reduce_scatterv(comm, a, b, NULL, f, sum));
    BAD("reduce_scatterv", "a NULL sendbuf", hoop_reduce_scatterv(comm, NULL, b, counts, f, sum));
    BAD("reduce_scatterv", "a NULL recvbuf", hoop_reduce_scatterv(comm, a, NULL, counts, f, sum));
    BAD("reduce_scatterv", "an unknown dtype",
        hoop_reduce_scatterv(comm, a, b, counts, bad_dt, sum));
    BAD("reduce_scatterv", "an unknown op", hoop_reduce_scatterv(comm, a, b, counts, f, bad_op));
    BAD("reduce_scatterv", "recvbuf overlapping sendbuf off the in-place block",
        hoop_reduce_scatterv(comm, a, a + (size_t)rank * c + 1, counts, f, sum));
    {
        size_t huge[HARNESS_MAX_PROCS];
        for (int r = 0; r < size; r++)
            huge[r] = SIZE_MAX / 2;
        BAD("reduce_scatterv", "a count past the address space",
            hoop_reduce_scatterv(comm, a, b, huge, f, sum));
        BAD("alltoallv", "a count past the address space",
            hoop_alltoallv(comm, a, huge, displs, b, counts, displs, f));
        for (int r = 0; r < size; r++)
            huge[r] = SIZE_MAX / 4 - 1; /* each fits, two do not */
        if (size > 1)
            BAD("reduce_scatterv", "recvcounts that add up past the address space",
                hoop_reduce_scatterv(comm, a, b, huge, f, sum));
    }

    BAD("alltoallv", "a NULL communicator",
        hoop_alltoallv(NULL, a, counts, displs, b, counts, displs, f));
    BAD("alltoallv", "NULL sendcounts", hoop_alltoallv(comm, a, NULL, displs, b, counts, displs, f));
    BAD("alltoallv", "NULL sdispls", hoop_alltoallv(comm, a, counts, NULL, b, counts, displs, f));
    BAD("alltoallv", "NULL recvcounts", hoop_alltoallv(comm, a, counts, displs, b, NULL, displs, f));
    BAD("alltoallv", "NULL rdispls", hoop_alltoallv(comm, a, counts, displs, b, counts, NULL, f));
    BAD("alltoallv", "a NULL sendbuf",
        hoop_alltoallv(comm, NULL, counts, displs, b, counts, displs, f));
    BAD("alltoallv", "a NULL recvbuf",
        hoop_alltoallv(comm, a, counts, displs, NULL, counts, displs, f));
    BAD("alltoallv", "an unknown dtype",
        hoop_alltoallv(comm, a, counts, displs, b, counts, displs, bad_dt));
    BAD("alltoallv", "sendbuf == recvbuf", hoop_alltoallv(comm, a, counts, displs, a, counts,
                                                          displs, f));
    if (size > 1) {
        size_t ov[HARNESS_MAX_PROCS];
        memcpy(ov, displs, sizeof ov);
        ov[1] = 1; /* rank 1's block starts inside rank 0's */
        BAD("alltoallv", "overlapping receive blocks",
            hoop_alltoallv(comm, a, counts, displs, b, counts, ov, f));
    }

    BAD("barrier", "a NULL communicator", hoop_barrier(NULL));

    if (size == 1) {
        BAD("broadcast", "the root's sendbuf NULL", hoop_broadcast(comm, NULL, b, c, f, 0));
        BAD("reduce", "the root's recvbuf NULL", hoop_reduce(comm, a, NULL, c, f, sum, 0));
    }
#undef BAD
    if (fails)
        return 1;

    /* Refused calls send nothing and leave the communicator usable. */
    for (size_t i = 0; i < c; i++)
        a[i] = (float)(rank * 10 + (int)i);
    memset(b, 0, sizeof b);
    hoop_status_t st = hoop_allgather(comm, a, b, c, f);
    if (st != HOOP_OK)
        return harness_fail(rank, "allgather after the refused calls", st);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < c; i++)
            if (b[(size_t)r * c + i] != (float)(r * 10 + (int)i))
                return harness_failf(rank, "allgather after the refused calls: element %zu of "
                                     "block %d is %g, expected %d",
                                     i, r, (double)b[(size_t)r * c + i], r * 10 + (int)i);
    st = hoop_barrier(comm);
    if (st != HOOP_OK)
        return harness_fail(rank, "barrier after the refused calls", st);
    return 0;
}

static void run_bad_args(int nranks)
{
    static char report[8192];
    bool ok = harness_run(nranks, NULL, bad_args_rank, NULL, 60.0, report, sizeof report);
    cr_assert(ok, "bad arguments with %d ranks:\n%s", nranks, report);
}

Test(collectives, bad_arguments_ranks_1, .timeout = 90) { run_bad_args(1); }
Test(collectives, bad_arguments_ranks_3, .timeout = 90) { run_bad_args(3); }

/* ---- the small allreduce and alltoall in either order ------------------------ */

/* Both make direct connections on first use, each its own set: the small
 * allreduce's partners (at N not a power of two, some rank then holds a
 * connection to every other), every pair for alltoall. Whether a call
 * must first agree and connect is the same answer on every rank, or the
 * ranks that skip it leave the others waiting. */
#define MIX_TIMEOUT_S 20.0

static int mix_allreduce(hoop_comm_t *comm, int rank, int size, int call)
{
    uint8_t in = (uint8_t)(rank + 1 + call), out = 0, want = 0;
    for (int r = 0; r < size; r++)
        want = (uint8_t)(want + r + 1 + call);
    hoop_status_t st = hoop_allreduce(comm, &in, &out, 1, HOOP_U8, HOOP_SUM);
    if (st != HOOP_OK)
        return harness_failf(rank, "call %d, allreduce of 1 byte: %s: %s", call,
                             hoop_status_str(st), hoop_last_error());
    if (out != want)
        return harness_failf(rank, "call %d, allreduce of 1 byte: %u, expected %u", call, out,
                             want);
    return 0;
}

static int mix_alltoall(hoop_comm_t *comm, int rank, int size, int call)
{
    int32_t in[HARNESS_MAX_PROCS], out[HARNESS_MAX_PROCS];
    for (int r = 0; r < size; r++) {
        in[r] = rank * 1000 + r * 10 + call;
        out[r] = -1;
    }
    hoop_status_t st = hoop_alltoall(comm, in, out, 1, HOOP_I32);
    if (st != HOOP_OK)
        return harness_failf(rank, "call %d, alltoall of 1 element: %s: %s", call,
                             hoop_status_str(st), hoop_last_error());
    for (int r = 0; r < size; r++)
        if (out[r] != r * 1000 + rank * 10 + call)
            return harness_failf(rank, "call %d, alltoall: block %d is %d, expected %d", call, r,
                                 out[r], r * 1000 + rank * 10 + call);
    return 0;
}

/* arg: the order, 'r' for the allreduce, 'a' for the alltoall. */
static int mix_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const char *order = arg;
    for (int k = 0; order[k]; k++) {
        int rc = order[k] == 'r' ? mix_allreduce(comm, rank, size, k)
                                 : mix_alltoall(comm, rank, size, k);
        if (rc)
            return rc;
    }
    return 0;
}

static void run_mix(int nranks, const char *order)
{
    static char report[8192];
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = MIX_TIMEOUT_S;
    bool ok = harness_run(nranks, &base, mix_rank, (void *)order, 3 * MIX_TIMEOUT_S, report,
                          sizeof report);
    cr_assert(ok, "%d ranks, calls \"%s\" (r: allreduce of 1 byte, a: alltoall):\n%s", nranks,
              order, report);
}

#define MIX_TESTS(n)                                                                            \
    Test(collectives, small_allreduce_then_alltoall_ranks_##n, .timeout = 120)                  \
    {                                                                                           \
        run_mix(n, "rara");                                                                     \
    }                                                                                           \
    Test(collectives, alltoall_then_small_allreduce_ranks_##n, .timeout = 120)                  \
    {                                                                                           \
        run_mix(n, "arar");                                                                     \
    }
MIX_TESTS(3)
MIX_TESTS(5)
MIX_TESTS(6)
