/* mr_cache.c - the transports' cache of memory registrations (mr_cache.h
 * says what it keeps, and for how long). */
#include "transport/mr_cache.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

void hoop_mr_init(struct hoop_mr_cache *c, const struct hoop_mr_ops *ops, void *ctx,
                  enum hoop_mr_keep keep, int max)
{
    *c = (struct hoop_mr_cache){.ops = ops, .ctx = ctx, .keep = keep, .max = max > 0 ? max : 1};
}

static void mr_drop(struct hoop_mr_cache *c, struct hoop_mr *m)
{
    struct hoop_mr **pp = &c->head;
    while (*pp && *pp != m)
        pp = &(*pp)->next;
    if (*pp)
        *pp = m->next;
    c->n--;
    c->ops->dereg(c->ctx, m);
    free(m);
}

static struct hoop_mr *mr_find(struct hoop_mr_cache *c, uintptr_t lo, uintptr_t hi)
{
    for (struct hoop_mr *m = c->head; m; m = m->next)
        if (m->base <= lo && hi <= m->base + m->len)
            return m;
    return NULL;
}

static int mr_get(struct hoop_mr_cache *c, const void *buf, size_t len, int on_device,
                  struct hoop_mr **out)
{
    uintptr_t lo = (uintptr_t)buf, hi = lo + (len ? len : 1);
    struct hoop_mr *m = mr_find(c, lo, hi);
    if (!m) {
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t base = lo & ~(page - 1), end = (hi + page - 1) & ~(page - 1);
        /* Room: the least recently used registration nobody holds. */
        while (c->n >= c->max) {
            struct hoop_mr *old = NULL;
            for (struct hoop_mr *x = c->head; x; x = x->next)
                if (!x->refs && (!old || x->last_use < old->last_use))
                    old = x;
            if (!old)
                break;
            mr_drop(c, old);
        }
        if (!(m = calloc(1, sizeof(*m))))
            return -ENOMEM;
        m->base = base;
        m->len = end - base;
        m->on_device = on_device;
        int rc = c->ops->reg(c->ctx, m);
        if (rc) {
            free(m);
            return rc < 0 ? rc : -EIO;
        }
        m->next = c->head;
        c->head = m;
        c->n++;
        c->regs++;
    }
    m->refs++;
    m->last_use = ++c->clock;
    *out = m;
    return 0;
}

int hoop_mr_get(struct hoop_mr_cache *c, const void *buf, size_t len, struct hoop_mr **out)
{
    return mr_get(c, buf, len, 0, out);
}

int hoop_mr_get_req(struct hoop_mr_cache *c, const struct hoop_tp_req *req, struct hoop_mr **out)
{
    const char *b = req->buf, *r = req->region;
    if (r && b >= r && b + req->len <= r + req->region_len)
        return mr_get(c, req->region, req->region_len, req->on_device, out);
    return mr_get(c, req->buf, req->len, req->on_device, out);
}

void hoop_mr_put(struct hoop_mr_cache *c, struct hoop_mr *m)
{
    if (!m)
        return;
    if (--m->refs == 0 && c->keep == HOOP_MR_KEEP_WHILE_HELD)
        mr_drop(c, m);
}

void hoop_mr_idle(struct hoop_mr_cache *c)
{
    if (c->keep != HOOP_MR_KEEP_UNTIL_IDLE)
        return;
    struct hoop_mr *m = c->head;
    while (m) {
        struct hoop_mr *next = m->next;
        if (!m->refs)
            mr_drop(c, m);
        m = next;
    }
}

void hoop_mr_fini(struct hoop_mr_cache *c)
{
    while (c->head)
        mr_drop(c, c->head);
}
