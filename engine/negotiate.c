/* negotiate.c - the table of names some ranks have announced, and the
 * responses made from it.
 *
 * Every rank holds the same table: it is changed only by the lists of a
 * cycle, applied in rank order, so every rank finds the same names ready in
 * the same order. A name is ready once every rank that has not joined has
 * announced it; it then becomes a response (an error response when the
 * ranks disagree on it) and leaves the table.
 */
#include "engine/engine.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int eng_params_copy(struct eng_params *dst, const struct eng_params *src)
{
    *dst = *src;
    dst->vals = NULL;
    size_t words = (size_t)src->nvals + src->nshape;
    if (words) {
        dst->vals = malloc(8 * words);
        if (!dst->vals)
            return -1;
        memcpy(dst->vals, src->vals, 8 * words);
    }
    return 0;
}

/* A shape as "[17, 23, 57]", the first dimension "*" when skip. */
static void shape_str(char *buf, size_t len, int ndims, const uint64_t *dims, int skip)
{
    size_t n = 0;
    n += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndims && n < len; i++) {
        if (i == 0 && skip)
            n += (size_t)snprintf(buf + n, len - n, "*");
        else
            n += (size_t)snprintf(buf + n, len - n, "%s%llu", i ? ", " : "",
                                  (unsigned long long)dims[i]);
    }
    if (n < len)
        snprintf(buf + n, len - n, "]");
}

/* 1 when a (announced by rank ra) and b (by rb) describe the same
 * operation; else 0 and a sentence in why. */
int eng_params_equal(const struct eng_params *a, const struct eng_params *b, int size, char *why,
                     size_t why_len, int ra, int rb)
{
    (void)size;
#define DIFF(fmt, va, vb, what)                                                                    \
    do {                                                                                           \
        snprintf(why, why_len, "rank %d gives %s " fmt " but rank %d gives %s " fmt, ra, what, va, \
                 rb, what, vb);                                                                    \
        return 0;                                                                                  \
    } while (0)
    if (a->kind != b->kind)
        DIFF("%s", eng_kind_name(a->kind), eng_kind_name(b->kind), "operation");
    if (a->dtype != b->dtype)
        DIFF("%s", hoop_dtype_str(a->dtype), hoop_dtype_str(b->dtype), "dtype");
    int has_op = a->kind == EK_ALLREDUCE || a->kind == EK_REDUCE_SCATTER;
    if (has_op && a->op != b->op)
        DIFF("%s", hoop_op_str(a->op), hoop_op_str(b->op), "op");
    if (a->root != b->root)
        DIFF("%d", (int)a->root, (int)b->root, "root");
    if (a->pre != b->pre)
        DIFF("%g", a->pre, b->pre, "prescale");
    if (a->post != b->post)
        DIFF("%g", a->post, b->post, "postscale");
    /* Where the data lies, as Horovod refuses a mix of CPU and GPU tensors,
     * between ranks that give data (one of no rows or no sends takes no
     * side). */
    if (a->device != b->device && eng_gives_data(a) && eng_gives_data(b)) {
        snprintf(why, why_len, "rank %d gives %s memory but rank %d gives %s memory", ra,
                 eng_device_str(a->device), rb, eng_device_str(b->device));
        return 0;
    }
    /* Shapes where both ranks gave one (Horovod's check): all dimensions
     * but the first for the kinds whose first may differ. */
    int skip = a->kind == EK_ALLGATHER || a->kind == EK_ALLTOALL;
    int na = a->ndims, nb = b->ndims;
    const uint64_t *da = a->dims, *db = b->dims;
    if (a->kind == EK_ALLREDUCE && !a->nvals && (na || nb)) {
        /* against a shape, an allreduce given none is one dimension */
        if (!na) {
            na = 1;
            da = &a->count;
        }
        if (!nb) {
            nb = 1;
            db = &b->count;
        }
    }
    if (na && nb) {
        int same = na == nb;
        for (int i = skip; same && i < na; i++)
            same = da[i] == db[i];
        if (!same) {
            char sa[8 * 24], sb[8 * 24];
            shape_str(sa, sizeof sa, na, da, skip);
            shape_str(sb, sizeof sb, nb, db, skip);
            const char *what = skip ? "rows of shape" : "shape";
            snprintf(why, why_len, "rank %d gives %s %s but rank %d gives %s %s", ra, what, sa, rb,
                     what, sb);
            return 0;
        }
    }
    if (a->kind == EK_ALLTOALL && a->row && b->row && a->row != b->row)
        DIFF("%llu", (unsigned long long)a->row, (unsigned long long)b->row, "elements per row");
    if (a->kind == EK_ALLGATHER) {
        if (a->row != b->row)
            DIFF("%llu", (unsigned long long)a->row, (unsigned long long)b->row,
                 "elements per row");
    } else if (a->kind != EK_ALLTOALL && a->count != b->count &&
               !(a->kind == EK_REDUCE_SCATTER && a->nvals && b->nvals)) {
        /* (Uneven reduce_scatters compare their blocks below, which says more.) */
        DIFF("%llu", (unsigned long long)a->count, (unsigned long long)b->count, "count");
    }
    if (a->kind == EK_REDUCE_SCATTER) {
        /* Uneven blocks (reduce_scatterv): every rank gives the same. */
        if (a->nvals != b->nvals) {
            snprintf(why, why_len, "rank %d calls %s but rank %d calls %s", ra,
                     a->nvals ? "reduce_scatterv" : "reduce_scatter", rb,
                     b->nvals ? "reduce_scatterv" : "reduce_scatter");
            return 0;
        }
        for (uint32_t i = 0; i < a->nvals; i++)
            if (a->vals[i] != b->vals[i]) {
                snprintf(why, why_len,
                         "rank %d gives rank %u's block %llu elements but rank %d gives %llu",
                         ra, (unsigned)i, (unsigned long long)a->vals[i], rb,
                         (unsigned long long)b->vals[i]);
                return 0;
            }
    }
    if (a->kind == EK_ALLREDUCE) {
        if (a->nvals != b->nvals)
            DIFF("%u", (unsigned)a->nvals, (unsigned)b->nvals, "tensors in the group");
        for (uint32_t i = 0; i < a->nvals; i++)
            if (a->vals[i] != b->vals[i]) {
                snprintf(why, why_len,
                         "rank %d gives tensor %u of the group %llu elements but rank "
                         "%d gives %llu",
                         ra, (unsigned)i, (unsigned long long)a->vals[i], rb,
                         (unsigned long long)b->vals[i]);
                return 0;
            }
        /* Each tensor's shape where a rank gave them (one given none is
         * one dimension of its count, as a lone allreduce). */
        const uint64_t *sa = a->vals + a->nvals, *sb = b->vals + b->nvals;
        for (uint32_t i = 0; (a->nshape || b->nshape) && i < a->nvals; i++) {
            uint64_t one = a->vals[i];
            int ka = a->nshape ? (int)*sa++ : 1, kb = b->nshape ? (int)*sb++ : 1;
            const uint64_t *xa = a->nshape ? sa : &one, *xb = b->nshape ? sb : &one;
            int same = ka == kb;
            for (int d = 0; same && d < ka; d++)
                same = xa[d] == xb[d];
            if (!same) {
                char ta[8 * 24], tb[8 * 24];
                shape_str(ta, sizeof ta, ka, xa, 0);
                shape_str(tb, sizeof tb, kb, xb, 0);
                snprintf(why, why_len,
                         "rank %d gives tensor %u of the group shape %s but rank %d gives "
                         "shape %s",
                         ra, (unsigned)i, ta, rb, tb);
                return 0;
            }
            sa += a->nshape ? ka : 0;
            sb += b->nshape ? kb : 0;
        }
    }
#undef DIFF
    return 1;
}

static struct eng_entry *table_find(struct hoop_engine *e, const char *name, int *index)
{
    for (int i = 0; i < e->ntab; i++)
        if (strcmp(e->tab[i]->p.name, name) == 0) {
            if (index)
                *index = i;
            return e->tab[i];
        }
    return NULL;
}

static void entry_free(struct eng_entry *en)
{
    if (!en)
        return;
    free(en->p.vals);
    free(en->got);
    free(en->rows);
    free(en->splits);
    free(en->mismatch);
    free(en);
}

static hoop_status_t oom(struct hoop_engine *e)
{
    return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory for the negotiation table",
                      e->rank);
}

hoop_status_t eng_table_record(struct hoop_engine *e, int from, int rec, const struct eng_params *p,
                               const char *name)
{
    if (rec == ER_JOIN) {
        if (!e->joined[from]) {
            e->joined[from] = 1;
            e->njoined++;
        }
        e->last_joined = from;
        return HOOP_OK;
    }
    if (rec == ER_FAIL) {
        struct eng_entry *en = table_find(e, name, NULL);
        if (en)
            en->timed_out = 1;
        return HOOP_OK;
    }
    struct eng_entry *en = table_find(e, p->name, NULL);
    if (!en) {
        if (e->ntab == e->tab_cap) {
            int cap = e->tab_cap ? 2 * e->tab_cap : 64;
            struct eng_entry **t = realloc(e->tab, sizeof(*t) * (size_t)cap);
            if (!t)
                return oom(e);
            e->tab = t;
            e->tab_cap = cap;
        }
        en = calloc(1, sizeof(*en));
        if (!en || eng_params_copy(&en->p, p) || !(en->got = calloc((size_t)e->size, 1)) ||
            (p->kind == EK_ALLGATHER && !(en->rows = calloc((size_t)e->size, 8))) ||
            (p->kind == EK_ALLTOALL &&
             !(en->splits = calloc((size_t)e->size * (size_t)e->size, 8)))) {
            entry_free(en);
            return oom(e);
        }
        en->first_rank = from;
        en->first_ns = hoop_now_ns();
        en->last_warn_ns = en->first_ns;
        e->tab[e->ntab++] = en;
        if (e->tl) {
            char act[48];
            snprintf(act, sizeof(act), "NEGOTIATE_%s", eng_kind_upper(p->kind));
            eng_timeline_begin(e->tl, p->name, act);
        }
    } else if (!en->mismatch) {
        char why[400];
        if (en->got[from])
            snprintf(why, sizeof(why), "rank %d announced it twice", from);
        if (en->got[from] ||
            !eng_params_equal(&en->p, p, e->size, why, sizeof(why), en->first_rank, from)) {
            size_t n = strlen(why) + strlen(p->name) + 200;
            en->mismatch = malloc(n);
            if (!en->mismatch)
                return oom(e);
            snprintf(en->mismatch, n,
                     "engine rank %d: '%s': %s; every rank must enqueue '%s' with the same "
                     "operation and arguments",
                     e->rank, p->name, why, p->name);
        } else if (!eng_gives_data(&en->p) && eng_gives_data(p)) {
            /* The ranks so far gave no data (an allgather's ranks of no
             * rows, an alltoall's that send nothing): the first that does
             * is the one the rest are compared with, where its data lies
             * included, and the one the cache keeps. The same on every
             * rank: every rank applies the same lists in the same order. */
            struct eng_params np;
            if (eng_params_copy(&np, p))
                return oom(e);
            free(en->p.vals);
            en->p = np;
            en->first_rank = from;
        }
    }
    en->got[from] = 1;
    if (en->rows)
        en->rows[from] = p->count;
    if (en->splits && p->nvals == (uint32_t)e->size)
        memcpy(en->splits + (size_t)from * (size_t)e->size, p->vals, 8 * (size_t)e->size);
    if (e->tl)
        eng_timeline_tick(e->tl, p->name, from);
    return HOOP_OK;
}

struct eng_resp *eng_resp_add(struct hoop_engine *e)
{
    if (e->nresp == e->resp_cap) {
        int cap = e->resp_cap ? 2 * e->resp_cap : 64;
        struct eng_resp *r = realloc(e->resp, sizeof(*r) * (size_t)cap);
        if (!r)
            return NULL;
        e->resp = r;
        e->resp_cap = cap;
    }
    struct eng_resp *r = &e->resp[e->nresp++];
    memset(r, 0, sizeof(*r));
    r->last_joined = -1;
    return r;
}

void eng_resp_clear(struct hoop_engine *e)
{
    for (int i = 0; i < e->nresp; i++) {
        free(e->resp[i].p.vals);
        free(e->resp[i].msg);
        free(e->resp[i].rows);
        free(e->resp[i].splits);
    }
    e->nresp = 0;
}

void eng_resp_queued(struct hoop_engine *e, const struct eng_resp *r)
{
    eng_timeline_begin(e->tl, r->p.name, eng_kind_upper(r->p.kind));
    eng_timeline_begin(e->tl, r->p.name, "QUEUE");
}

static char *sentence(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *sentence(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* "1, 3" into buf: the ranks that neither announced en nor joined. */
static void missing_ranks(const struct hoop_engine *e, const struct eng_entry *en, char *buf,
                          size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int r = 0; r < e->size && n + 12 < len; r++)
        if (!en->got[r] && !e->joined[r])
            n += (size_t)snprintf(buf + n, len - n, "%s%d", n ? ", " : "", r);
}

static eng_op_t *local_op(struct hoop_engine *e, const char *name)
{
    for (eng_op_t *o = e->pending; o; o = o->next)
        if (o->state == ES_SENT && strcmp(o->p.name, name) == 0)
            return o;
    return NULL;
}

int eng_table_collect(struct hoop_engine *e)
{
    int kept = 0;
    for (int i = 0; i < e->ntab; i++) {
        struct eng_entry *en = e->tab[i];
        int ready = 1, lacking_joined = -1;
        for (int r = 0; r < e->size; r++)
            if (!en->got[r]) {
                if (!e->joined[r])
                    ready = 0;
                else if (lacking_joined < 0)
                    lacking_joined = r;
            }
        /* Once a rank has joined without it, an operation other than an
         * allreduce fails at once, as in Horovod: the ranks still running
         * may name it differently (unnamed operations are counted per rank,
         * and the joined rank skipped one), and waiting for every one of
         * them could wait for ever. */
        int refused = lacking_joined >= 0 && en->p.kind != EK_ALLREDUCE;
        if (!ready && !en->timed_out && !refused) {
            e->tab[kept++] = en;
            continue;
        }
        struct eng_resp *r = eng_resp_add(e);
        if (!r)
            return -1;
        r->p = en->p;
        en->p.vals = NULL;
        r->rows = en->rows;
        en->rows = NULL;
        r->splits = en->splits;
        en->splits = NULL;
        r->neg_start_ns = en->first_ns;
        r->op = local_op(e, r->p.name);
        if (refused) {
            r->err = HOOP_ERR_INVALID;
            r->msg = sentence("engine rank %d: '%s': %s is not supported once a rank has joined "
                              "(rank %d joined without it); only allreduce goes on with zeros from "
                              "the joined ranks",
                              e->rank, r->p.name, eng_kind_name(r->p.kind), lacking_joined);
        } else if (!ready) {
            char miss[256];
            missing_ranks(e, en, miss, sizeof(miss));
            r->err = HOOP_ERR_TIMEOUT;
            r->msg =
                sentence("engine rank %d: '%s' (%s) waited more than %g s "
                         "(HOOP_STALL_SHUTDOWN_TIME) for rank(s) %s to enqueue it; it fails on "
                         "the ranks that did",
                         e->rank, r->p.name, eng_kind_name(r->p.kind), e->stall_shutdown_s, miss);
        } else if (en->mismatch) {
            r->err = HOOP_ERR_MISMATCH;
            r->msg = en->mismatch;
            en->mismatch = NULL;
        } else {
            r->cacheable = eng_cacheable(r->p.kind) && lacking_joined < 0;
        }
        if (e->tl) {
            eng_timeline_end(e->tl, r->p.name, NULL);
            eng_resp_queued(e, r);
        }
        entry_free(en);
    }
    e->ntab = kept;
    if (e->njoined == e->size) {
        struct eng_resp *r = eng_resp_add(e);
        if (!r)
            return -1;
        r->p.kind = EK_JOIN;
        snprintf(r->p.name, sizeof(r->p.name), "%s", e->join_op ? e->join_op->p.name : "hoop.join");
        r->last_joined = e->last_joined;
        r->op = e->join_op;
        e->join_op = NULL;
        if (e->tl)
            eng_resp_queued(e, r);
        memset(e->joined, 0, (size_t)e->size);
        e->njoined = 0;
        e->self_joined = 0;
    }
    return 0;
}

void eng_table_stall_check(struct hoop_engine *e, uint64_t now)
{
    if (e->stall_check_s <= 0)
        return;
    uint64_t warn_ns = (uint64_t)(e->stall_check_s * 1e9);
    uint64_t shut_ns = (uint64_t)(e->stall_shutdown_s * 1e9);
    for (int i = 0; i < e->ntab; i++) {
        struct eng_entry *en = e->tab[i];
        uint64_t age = now - en->first_ns;
        if (age < warn_ns)
            continue;
        char miss[256];
        missing_ranks(e, en, miss, sizeof(miss));
        if (!miss[0])
            continue;
        if (now - en->last_warn_ns >= warn_ns) {
            en->last_warn_ns = now;
            hoop_log(HOOP_LOG_WARN,
                     "engine rank 0: '%s' (%s) has waited %.1f s for rank(s) %s to enqueue it "
                     "(the others have): ranks enqueue different names, or some stopped "
                     "enqueueing; HOOP_STALL_SHUTDOWN_TIME fails it instead of waiting",
                     en->p.name, eng_kind_name(en->p.kind), (double)age / 1e9, miss);
        }
        if (shut_ns && age >= shut_ns && !en->fail_asked) {
            en->fail_asked = 1; /* the list makes it timed_out on every rank */
            if (e->nfail == e->fail_cap) {
                int cap = e->fail_cap ? 2 * e->fail_cap : 16;
                char **f = realloc(e->fail_names, sizeof(*f) * (size_t)cap);
                if (!f)
                    continue;
                e->fail_names = f;
                e->fail_cap = cap;
            }
            char *s = strdup(en->p.name);
            if (s)
                e->fail_names[e->nfail++] = s;
        }
    }
}

void eng_table_free(struct hoop_engine *e)
{
    for (int i = 0; i < e->ntab; i++)
        entry_free(e->tab[i]);
    free(e->tab);
    e->tab = NULL;
    e->ntab = e->tab_cap = 0;
    for (int i = 0; i < e->nfail; i++)
        free(e->fail_names[i]);
    free(e->fail_names);
    e->fail_names = NULL;
    e->nfail = 0;
}
