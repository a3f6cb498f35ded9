/* wire.c - a rank's list of new requests for one cycle, and its parsing.
 *
 * A list is records one after the other: a type byte, then
 *   ER_REQ:  kind, dtype, op, device (bytes: device is ENG_HOST or
 *            ENG_DEVICE, and ENG_HOST where the request gives no data),
 *            root (i32), prescale, postscale (f64), count, row (u64),
 *            ndims (u8), ndims u64 dimensions, nvals, nshape (u32), name
 *            length (u16), the name, nvals + nshape u64 values;
 *   ER_JOIN: nothing;
 *   ER_FAIL: name length (u16), the name (rank 0: its stall shutdown).
 * Numbers are in the host's byte order: the ranks of a job run one build
 * (the sync words start with a magic that a foreign order would break).
 * Every length read is checked against what is left and against the
 * bounds of engine.h before use.
 */
#include "engine/engine.h"
#include "common/status.h"

#include <stdlib.h>
#include <string.h>

static int list_reserve(struct hoop_engine *e, size_t more)
{
    if (e->mylist_len + more <= e->mylist_cap)
        return 0;
    size_t cap = e->mylist_cap ? e->mylist_cap : 4096;
    while (cap < e->mylist_len + more)
        cap *= 2;
    uint8_t *p = realloc(e->mylist, cap);
    if (!p)
        return -1;
    e->mylist = p;
    e->mylist_cap = cap;
    return 0;
}

static void put(struct hoop_engine *e, const void *v, size_t n)
{
    memcpy(e->mylist + e->mylist_len, v, n);
    e->mylist_len += n;
}

int eng_list_add_req(struct hoop_engine *e, const struct eng_params *p)
{
    uint16_t nl = (uint16_t)strlen(p->name);
    size_t need = 1 + 4 + 4 + 16 + 16 + 1 + 8 * (size_t)p->ndims + 4 + 4 + 2 + nl +
                  8 * ((size_t)p->nvals + p->nshape);
    if (e->mylist_len + need > ENG_LIST_MAX || list_reserve(e, need))
        return -1;
    uint8_t t = ER_REQ;
    put(e, &t, 1);
    put(e, &p->kind, 1);
    put(e, &p->dtype, 1);
    put(e, &p->op, 1);
    put(e, &p->device, 1);
    put(e, &p->root, 4);
    put(e, &p->pre, 8);
    put(e, &p->post, 8);
    put(e, &p->count, 8);
    put(e, &p->row, 8);
    put(e, &p->ndims, 1);
    put(e, p->dims, 8 * (size_t)p->ndims);
    put(e, &p->nvals, 4);
    put(e, &p->nshape, 4);
    put(e, &nl, 2);
    put(e, p->name, nl);
    if (p->nvals)
        put(e, p->vals, 8 * ((size_t)p->nvals + p->nshape));
    return 0;
}

int eng_list_add_join(struct hoop_engine *e)
{
    if (list_reserve(e, 1))
        return -1;
    uint8_t t = ER_JOIN;
    put(e, &t, 1);
    return 0;
}

int eng_list_add_fail(struct hoop_engine *e, const char *name)
{
    uint16_t nl = (uint16_t)strlen(name);
    if (list_reserve(e, 3 + (size_t)nl))
        return -1;
    uint8_t t = ER_FAIL;
    put(e, &t, 1);
    put(e, &nl, 2);
    put(e, name, nl);
    return 0;
}

struct reader {
    const uint8_t *p;
    size_t left;
};

static int get(struct reader *r, void *v, size_t n)
{
    if (r->left < n)
        return -1;
    memcpy(v, r->p, n);
    r->p += n;
    r->left -= n;
    return 0;
}

static int get_name(struct reader *r, char *name)
{
    uint16_t nl;
    if (get(r, &nl, 2) || nl == 0 || nl > HOOP_ENGINE_NAME_MAX || get(r, name, nl))
        return -1;
    name[nl] = '\0';
    if (strlen(name) != nl)
        return -1; /* a NUL inside */
    return 0;
}

/* A group's shapes (p->nshape words after its counts): one per tensor, of
 * 1..HOOP_ENGINE_DIMS_MAX dimensions whose product is its count, taking
 * every word. */
static int group_shapes_ok(const struct eng_params *p)
{
    const uint64_t *w = p->vals + p->nvals, *end = w + p->nshape;
    for (uint32_t i = 0; i < p->nvals; i++) {
        if (w >= end || *w < 1 || *w > HOOP_ENGINE_DIMS_MAX || (uint64_t)(end - w) < 1 + *w)
            return 0;
        uint64_t k = *w++, prod = 1;
        for (uint64_t d = 0; d < k; d++)
            if (__builtin_mul_overflow(prod, w[d], &prod))
                return 0;
        if (prod != p->vals[i])
            return 0;
        w += k;
    }
    return w == end;
}

hoop_status_t eng_list_parse(struct hoop_engine *e, int from, const uint8_t *buf, size_t len,
                             eng_rec_fn fn)
{
    struct reader r = {buf, len};
    struct eng_params p;
    uint64_t *vals = NULL;
    const char *what = "";
    while (r.left) {
        uint8_t t;
        get(&r, &t, 1);
        memset(&p, 0, sizeof(p));
        if (t == ER_REQ) {
            if (get(&r, &p.kind, 1) || get(&r, &p.dtype, 1) || get(&r, &p.op, 1) ||
                get(&r, &p.device, 1) || get(&r, &p.root, 4) || get(&r, &p.pre, 8) ||
                get(&r, &p.post, 8) || get(&r, &p.count, 8) || get(&r, &p.row, 8) ||
                get(&r, &p.ndims, 1) || p.ndims > HOOP_ENGINE_DIMS_MAX ||
                get(&r, p.dims, 8 * (size_t)p.ndims) || get(&r, &p.nvals, 4) ||
                get(&r, &p.nshape, 4) || get_name(&r, p.name)) {
                what = "a request cut short, or of more than HOOP_ENGINE_DIMS_MAX dimensions";
                goto bad;
            }
            if (p.kind <= EK_NONE || p.kind >= EK_KIND_COUNT || p.kind == EK_JOIN ||
                p.dtype >= HOOP_DTYPE_COUNT || p.op >= HOOP_OP_COUNT) {
                what = "a request of unknown kind, dtype or op";
                goto bad;
            }
            if (p.device > ENG_DEVICE || (p.device == ENG_DEVICE && !eng_gives_data(&p))) {
                what = "a request whose device kind is neither host nor GPU, or GPU where it "
                       "gives no data";
                goto bad;
            }
            if (p.kind == EK_BROADCAST && (p.root < 0 || p.root >= e->size)) {
                what = "a broadcast from a root that is not a rank";
                goto bad;
            }
            if (p.nvals > ENG_VALS_MAX ||
                (p.nshape && (p.kind != EK_ALLREDUCE || !p.nvals ||
                              p.nshape > p.nvals * (1u + HOOP_ENGINE_DIMS_MAX))) ||
                ((size_t)p.nvals + p.nshape) * 8 > r.left ||
                (p.kind == EK_ALLTOALL && p.nvals != (uint32_t)e->size) ||
                (p.kind == EK_REDUCE_SCATTER && p.nvals && p.nvals != (uint32_t)e->size)) {
                what = "a request with a bad number of values";
                goto bad;
            }
            if (p.nvals) {
                size_t words = (size_t)p.nvals + p.nshape;
                vals = malloc(8 * words);
                if (!vals)
                    return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory for a list",
                                      e->rank);
                get(&r, vals, 8 * words);
                p.vals = vals;
                if (p.nshape && !group_shapes_ok(&p)) {
                    free(vals);
                    what = "a group whose shapes do not hold its tensors";
                    goto bad;
                }
            }
            hoop_status_t st = fn(e, from, ER_REQ, &p, p.name);
            free(vals);
            vals = NULL;
            if (st)
                return st;
        } else if (t == ER_JOIN) {
            hoop_status_t st = fn(e, from, ER_JOIN, NULL, NULL);
            if (st)
                return st;
        } else if (t == ER_FAIL && from == 0) {
            if (get_name(&r, p.name)) {
                what = "a failure record cut short";
                goto bad;
            }
            hoop_status_t st = fn(e, from, ER_FAIL, NULL, p.name);
            if (st)
                return st;
        } else {
            what = "an unknown record";
            goto bad;
        }
    }
    return HOOP_OK;
bad:
    return hoop_error(HOOP_ERR_PEER,
                      "engine rank %d: the list of new requests from rank %d holds %s (%zu of %zu "
                      "bytes read): the ranks run different builds of hoop, or memory was "
                      "overwritten",
                      e->rank, from, what, len - r.left, len);
}
