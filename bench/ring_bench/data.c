/* data.c - inputs and expected results: the tables of values each rank
 * sends, and the check of what came back, element by element. */
#include "bench/ring_bench/ring_bench.h"

static uint64_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* The bits of a value in dtype. Integer types take the low bits of u, which is
 * the wraparound the library's integer arithmetic has; float types take d. */
static uint64_t value_bits(hoop_dtype_t dt, uint64_t u, double d)
{
    switch (dt) {
    case HOOP_F16: return hoop_f32_to_f16((float)d);
    case HOOP_BF16: return hoop_f32_to_bf16((float)d);
    case HOOP_F32: return f32_bits((float)d);
    case HOOP_F64: return f64_bits(d);
    default: break;
    }
    size_t bits = 8 * hoop_dtype_size(dt);
    return bits < 64 ? u & (((uint64_t)1 << bits) - 1) : u;
}

/* Average as the library defines it: the sum divided in the accumulation
 * type, f32 for the 16-bit floats; integers truncate toward zero. */
static uint64_t avg_bits(hoop_dtype_t dt, uint64_t sum, int n)
{
    float f = (float)sum / (float)n;
    switch (dt) {
    case HOOP_F16: return hoop_f32_to_f16(f);
    case HOOP_BF16: return hoop_f32_to_bf16(f);
    case HOOP_F32: return f32_bits(f);
    case HOOP_F64: return f64_bits((double)sum / n);
    default: return value_bits(dt, sum / (uint64_t)n, 0.0);
    }
}

/* Largest input M such that a sum of nranks inputs in 0..M stays an exact
 * integer in dtype whatever the order of the additions. */
static uint64_t sum_input_max(hoop_dtype_t dt, int nranks)
{
    uint64_t limit, cap = UINT64_MAX;
    switch (dt) {
    case HOOP_I8: limit = 127; break;
    case HOOP_U8: limit = 255; break;
    case HOOP_BF16: limit = 256; break;
    case HOOP_F16: limit = 2048; break;
    case HOOP_I32: case HOOP_U32: case HOOP_F32: limit = (uint64_t)1 << 24; cap = 1000; break;
    default: limit = UINT64_MAX; cap = 1000; break;
    }
    uint64_t m = limit / (uint64_t)nranks;
    if (m > cap)
        m = cap;
    return m < 1 ? 1 : m;
}

/* Every input is a small non-negative integer, exact in every dtype, chosen
 * so that the reduction has one right answer in any order: sums stay below
 * the dtype's exact-integer limit, products are powers of two. */
static uint64_t input_value(hoop_op_t op, uint64_t sum_max, uint64_t i, uint64_t r)
{
    switch (op) {
    case HOOP_SUM: case HOOP_AVG: return (i * 7 + r * 13) % (sum_max + 1);
    case HOOP_PROD: return 1 + (i + r) % 2;
    default: return (i * 7 + r * 13) % 97;
    }
}

/* Collectives that only move data need no headroom for a reduction: their
 * values span every integer the dtype holds exactly (up to a period that
 * keeps the tables small), which makes a block delivered to the wrong place
 * less likely to carry the values expected there. */
static uint64_t move_period(hoop_dtype_t dt)
{
    switch (dt) {
    case HOOP_I8: return 128;
    case HOOP_U8: return 256;
    case HOOP_BF16: return 257;
    case HOOP_F16: return 2049;
    default: return 1009;
    }
}

/* 7 is prime to every period above, so one period holds each value once:
 * an offset by less than a period always shows. */
static uint64_t move_value(uint64_t period, uint64_t i, uint64_t tag)
{
    return (i * 7 + tag * 13) % period;
}

static uint64_t load_elem(const void *buf, size_t i, size_t esize)
{
    const unsigned char *p = (const unsigned char *)buf + i * esize;
    switch (esize) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void store_elem(void *buf, size_t i, size_t esize, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf + i * esize;
    switch (esize) {
    case 1: *p = (unsigned char)bits; break;
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
    default: memcpy(p, &bits, 8); break;
    }
}

/* Repeats the first `period` elements of tab up to block_count. */
static void repeat_period(const struct bench *b, unsigned char *tab, size_t period)
{
    for (size_t j = period; j < b->block_count; j += period)
        memcpy(tab + j * b->esize, tab, period * b->esize);
}

static unsigned char *new_tab(struct bench *b, size_t *used)
{
    return b->tab_mem + (*used)++ * b->block_count * b->esize;
}

static int build_reduce_tables(struct bench *b)
{
    hoop_dtype_t dt = b->opt.dtype;
    hoop_op_t op = b->opt.op;
    uint64_t sum_max = sum_input_max(dt, b->nranks);
    size_t period, used = 0;

    switch (op) {
    case HOOP_SUM: case HOOP_AVG: period = (size_t)sum_max + 1; break;
    case HOOP_PROD: period = 2; break;
    default: period = 97; break;
    }
    /* Long enough that a memcmp per block costs little more than the bytes. */
    b->block_count = period * ((4096 + period - 1) / period);
    b->tab_mem = malloc(2 * b->block_count * b->esize);
    if (!b->tab_mem)
        return -1;
    unsigned char *in = new_tab(b, &used), *ex = new_tab(b, &used);

    for (size_t j = 0; j < period; j++) {
        uint64_t v = input_value(op, sum_max, j, (uint64_t)b->rank);
        store_elem(in, j, b->esize, value_bits(dt, v, (double)v));

        uint64_t sum = 0, prod = 1, lo = UINT64_MAX, hi = 0;
        double dprod = 1.0;
        for (int r = 0; r < b->nranks; r++) {
            uint64_t x = input_value(op, sum_max, j, (uint64_t)r);
            sum += x;
            prod *= x;
            dprod *= (double)x;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        uint64_t e;
        switch (op) {
        case HOOP_SUM: e = value_bits(dt, sum, (double)sum); break;
        case HOOP_PROD: e = value_bits(dt, prod, dprod); break;
        case HOOP_MIN: e = value_bits(dt, lo, (double)lo); break;
        case HOOP_MAX: e = value_bits(dt, hi, (double)hi); break;
        default: e = avg_bits(dt, sum, b->nranks); break;
        }
        store_elem(ex, j, b->esize, e);
    }
    repeat_period(b, in, period);
    repeat_period(b, ex, period);
    b->mine = in;
    b->expect = ex;
    return 0;
}

static void fill_move_tab(const struct bench *b, unsigned char *tab, size_t period, uint64_t tag)
{
    for (size_t j = 0; j < period; j++) {
        uint64_t v = move_value(period, j, tag);
        store_elem(tab, j, b->esize, value_bits(b->opt.dtype, v, (double)v));
    }
    repeat_period(b, tab, period);
}

static int build_move_tables(struct bench *b)
{
    size_t n = (size_t)b->nranks, period = (size_t)move_period(b->opt.dtype), used = 0;
    int a2a = b->opt.coll == COLL_ALLTOALL;

    b->block_count = period * ((4096 + period - 1) / period);
    b->tab_mem = malloc((a2a ? 2 : 1) * n * b->block_count * b->esize);
    b->peer_tabs = calloc(n, sizeof *b->peer_tabs);
    b->send_tabs = calloc(n, sizeof *b->send_tabs);
    if (!b->tab_mem || !b->peer_tabs || !b->send_tabs)
        return -1;
    for (size_t r = 0; r < n; r++) {
        unsigned char *t = new_tab(b, &used);
        /* alltoall: what rank r sends to this one, tagged by (sender, destination). */
        fill_move_tab(b, t, period, a2a ? r * n + (size_t)b->rank : r);
        b->peer_tabs[r] = t;
    }
    if (a2a) {
        for (size_t j = 0; j < n; j++) {
            unsigned char *t = new_tab(b, &used);
            fill_move_tab(b, t, period, (size_t)b->rank * n + j);
            b->send_tabs[j] = t;
        }
    } else {
        b->mine = b->peer_tabs[b->rank];
    }
    return 0;
}

int build_tables(struct bench *b)
{
    size_t n = (size_t)b->nranks;
    b->segs = calloc(n + 1, sizeof *b->segs);
    b->agv_counts = calloc(n, sizeof *b->agv_counts);
    b->agv_displs = calloc(n, sizeof *b->agv_displs);
    if (!b->segs || !b->agv_counts || !b->agv_displs)
        return -1;
    if (b->opt.coll == COLL_BARRIER)
        return 0;
    return coll_has_op(b->opt.coll) ? build_reduce_tables(b) : build_move_tables(b);
}

void set_agv(const struct bench *b, const struct shape *s)
{
    size_t at = 0;
    for (int r = 0; r < b->nranks; r++) {
        b->agv_counts[r] = s->agv_base + (size_t)r;
        b->agv_displs[r] = at;
        at += b->agv_counts[r];
    }
}

static size_t add_seg(struct seg *g, size_t k, size_t at, size_t n, const unsigned char *tab,
                      size_t phase)
{
    if (n == 0)
        return k;
    g[k].at = at;
    g[k].n = n;
    g[k].tab = tab;
    g[k].phase = phase;
    return k + 1;
}

/* Where this rank's input lies in the buffer the call reads: sendbuf out of
 * place, recvbuf in place. */
static size_t input_segs(const struct bench *b, const struct shape *s, int in_place, struct seg *g)
{
    size_t k = 0, me = (size_t)b->rank, pc = s->pcount;
    switch (b->opt.coll) {
    case COLL_ALLGATHER: return add_seg(g, k, in_place ? me * pc : 0, pc, b->mine, 0);
    case COLL_ALLGATHERV:
        return add_seg(g, k, in_place ? b->agv_displs[me] : 0, b->agv_counts[me], b->mine, 0);
    case COLL_BROADCAST:
        /* In place, a non-root's buffer is all output. */
        if (in_place && b->rank != b->opt.root)
            return 0;
        return add_seg(g, k, 0, pc, b->mine, 0);
    case COLL_ALLTOALL:
        for (size_t j = 0; j < (size_t)b->nranks; j++)
            k = add_seg(g, k, j * pc, pc, b->send_tabs[j], 0);
        return k;
    default: return add_seg(g, k, 0, s->send_elems, b->mine, 0);
    }
}

/* Where recvbuf must hold which values after the call. */
static size_t result_segs(const struct bench *b, const struct shape *s, int in_place,
                          struct seg *g)
{
    size_t k = 0, me = (size_t)b->rank, pc = s->pcount;
    switch (b->opt.coll) {
    case COLL_REDUCE_SCATTER:
        /* Block `rank` of the reduction of the whole send buffers. */
        return add_seg(g, k, in_place ? me * pc : 0, pc, b->expect, me * pc);
    case COLL_ALLGATHER:
    case COLL_ALLTOALL:
        for (size_t r = 0; r < (size_t)b->nranks; r++)
            k = add_seg(g, k, r * pc, pc, b->peer_tabs[r], 0);
        return k;
    case COLL_ALLGATHERV:
        for (size_t r = 0; r < (size_t)b->nranks; r++)
            k = add_seg(g, k, b->agv_displs[r], b->agv_counts[r], b->peer_tabs[r], 0);
        return k;
    case COLL_BROADCAST: return add_seg(g, k, 0, pc, b->peer_tabs[b->opt.root], 0);
    case COLL_REDUCE:
        if (b->rank != b->opt.root)
            return 0;
        return add_seg(g, k, 0, pc, b->expect, 0);
    default: return add_seg(g, k, 0, pc, b->expect, 0);
    }
}

static void put_seg(const struct bench *b, unsigned char *buf, const struct seg *g)
{
    size_t es = b->esize, bc = b->block_count;
    for (size_t j = 0; j < g->n;) {
        size_t from = (g->phase + j) % bc;
        size_t n = g->n - j < bc - from ? g->n - j : bc - from;
        memcpy(buf + (g->at + j) * es, g->tab + from * es, n * es);
        j += n;
    }
}

/* The complement of the expected values: an element the library never
 * writes cannot pass for a result. */
static void put_seg_inverted(const struct bench *b, unsigned char *buf, const struct seg *g)
{
    put_seg(b, buf, g);
    unsigned char *p = buf + g->at * b->esize;
    for (size_t k = 0; k < g->n * b->esize; k++)
        p[k] = (unsigned char)~p[k];
}

struct mismatch {
    size_t wrong;
    size_t first; /* element index in the buffer, SIZE_MAX if none */
    uint64_t got, want;
};

static void check_seg(const struct bench *b, const unsigned char *buf, const struct seg *g,
                      struct mismatch *m)
{
    size_t es = b->esize, bc = b->block_count;
    for (size_t j = 0; j < g->n;) {
        size_t from = (g->phase + j) % bc;
        size_t n = g->n - j < bc - from ? g->n - j : bc - from;
        const unsigned char *p = buf + (g->at + j) * es;
        if (memcmp(p, g->tab + from * es, n * es) != 0) {
            for (size_t k = 0; k < n; k++) {
                uint64_t got = load_elem(p, k, es), want = load_elem(g->tab, from + k, es);
                if (got == want)
                    continue;
                if (m->first == SIZE_MAX) {
                    m->first = g->at + j + k;
                    m->got = got;
                    m->want = want;
                }
                m->wrong++;
            }
        }
        j += n;
    }
}

/* Fills the buffers of one placement for a call: inputs where the call reads
 * them, the complement of the result where it must write. */
void prepare(struct bench *b, const struct shape *s, int in_place)
{
    struct seg *g = b->segs;
    unsigned char *in = in_place ? b->recvbuf : b->sendbuf;
    size_t n = result_segs(b, s, in_place, g);
    for (size_t k = 0; k < n; k++)
        put_seg_inverted(b, b->recvbuf, &g[k]);
    /* After the results: in place, the input overlaps them. */
    n = input_segs(b, s, in_place, g);
    for (size_t k = 0; k < n; k++)
        put_seg(b, in, &g[k]);
}

const char *op_label(const struct bench *b)
{
    return coll_has_op(b->opt.coll) ? hoop_op_str(b->opt.op) : "none";
}

/* Elements wrong in the result, plus the input elements that changed where
 * the input must stay (sendbuf out of place; in place, a non-root's buffer
 * in reduce, which the collective only reads). */
size_t count_wrong(struct bench *b, const struct shape *s, int in_place)
{
    const char *placement = in_place ? "in-place" : "out-of-place";
    struct seg *g = b->segs;
    struct mismatch res = {0, SIZE_MAX, 0, 0}, inp = {0, SIZE_MAX, 0, 0};
    size_t n = result_segs(b, s, in_place, g);
    for (size_t k = 0; k < n; k++)
        check_seg(b, b->recvbuf, &g[k], &res);
    if (!in_place || (b->opt.coll == COLL_REDUCE && b->rank != b->opt.root)) {
        n = input_segs(b, s, in_place, g);
        for (size_t k = 0; k < n; k++)
            check_seg(b, in_place ? b->recvbuf : b->sendbuf, &g[k], &inp);
    }
    int w = (int)(2 * b->esize);
    if (res.wrong)
        report_error(b,
                     "%s %zu B %s %s %s: %zu elements wrong; first at index %zu: got 0x%0*" PRIx64
                     ", expected 0x%0*" PRIx64,
                     coll_names[b->opt.coll], s->bytes, hoop_dtype_str(b->opt.dtype), op_label(b),
                     placement, res.wrong, res.first, w, res.got, w, res.want);
    if (inp.wrong)
        report_error(b,
                     "%s %zu B %s %s %s: the send buffer changed at %zu elements; first at index "
                     "%zu: 0x%0*" PRIx64 ", was 0x%0*" PRIx64,
                     coll_names[b->opt.coll], s->bytes, hoop_dtype_str(b->opt.dtype), op_label(b),
                     placement, inp.wrong, inp.first, w, inp.got, w, inp.want);
    return res.wrong + inp.wrong;
}
