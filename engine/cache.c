/* cache.c - the response cache: names that ran before, by slot.
 *
 * Every rank holds the same slots: a slot is filled, touched and erased only
 * at points of a cycle that every rank reaches with the same information
 * (after a response ran, after the sync words), in response or slot order.
 * So a rank can say "I have slot s ready" with one word of the sync
 * allreduce instead of announcing the name again.
 */
#include "engine/engine.h"

#include <stdlib.h>
#include <string.h>

int eng_cacheable(int kind)
{
    return kind == EK_ALLREDUCE || kind == EK_ALLGATHER || kind == EK_BROADCAST ||
           kind == EK_REDUCE_SCATTER;
}

void eng_cache_init(struct hoop_engine *e)
{
    for (int h = 0; h < ENG_HASH; h++)
        e->cache_head[h] = -1;
}

/* Through the slots whose names hash alike: a model of a thousand
 * gradients looks each up in a few compares, not a thousand. */
int eng_cache_find(struct hoop_engine *e, const char *name)
{
    for (int s = e->cache_head[eng_hash(name)]; s >= 0; s = e->cache[s].hnext)
        if (strcmp(e->cache[s].p.name, name) == 0)
            return s;
    return -1;
}

static void slot_link(struct hoop_engine *e, int s)
{
    unsigned h = eng_hash(e->cache[s].p.name);
    e->cache[s].hnext = e->cache_head[h];
    e->cache_head[h] = s;
}

static void slot_unlink(struct hoop_engine *e, int s)
{
    int *pp = &e->cache_head[eng_hash(e->cache[s].p.name)];
    while (*pp >= 0 && *pp != s)
        pp = &e->cache[*pp].hnext;
    if (*pp == s)
        *pp = e->cache[s].hnext;
}

int eng_cache_matches(struct hoop_engine *e, int s, const eng_op_t *op)
{
    const struct eng_cache_slot *c = &e->cache[s];
    char why[16];
    if (!eng_params_equal(&c->p, &op->p, e->size, why, sizeof(why), 0, 0))
        return 0;
    if (c->p.kind == EK_ALLGATHER && c->rows[e->rank] != op->p.count)
        return 0;
    return 1;
}

static void slot_free(struct eng_cache_slot *c)
{
    free(c->p.vals);
    free(c->rows);
    memset(c, 0, sizeof(*c));
}

void eng_cache_erase(struct hoop_engine *e, int s)
{
    /* This rank's op on the slot (a name is in flight once at most) goes
     * through the table again. */
    eng_op_t *o = e->slot_op[s];
    if (o && o->state == ES_CACHED && o->slot == s) {
        o->state = ES_NEW;
        o->slot = -1;
    }
    e->slot_op[s] = NULL;
    slot_unlink(e, s);
    slot_free(&e->cache[s]);
}

void eng_cache_put(struct hoop_engine *e, const struct eng_resp *r)
{
    if (e->cache_cap <= 0 || !r->cacheable)
        return;
    int s = eng_cache_find(e, r->p.name);
    if (s < 0)
        for (int i = 0; i < e->cache_used; i++)
            if (!e->cache[i].used) {
                s = i;
                break;
            }
    if (s < 0 && e->cache_used < e->cache_cap)
        s = e->cache_used++;
    if (s < 0) {
        s = 0;
        for (int i = 1; i < e->cache_used; i++)
            if (e->cache[i].last_use < e->cache[s].last_use)
                s = i;
    }
    if (e->cache[s].used)
        eng_cache_erase(e, s);
    struct eng_cache_slot *c = &e->cache[s];
    if (eng_params_copy(&c->p, &r->p))
        return;
    if (r->p.kind == EK_ALLGATHER) {
        c->rows = malloc(8 * (size_t)e->size);
        if (!c->rows) {
            slot_free(c);
            return;
        }
        memcpy(c->rows, r->rows, 8 * (size_t)e->size);
    }
    c->used = 1;
    c->last_use = ++e->use_clock;
    slot_link(e, s);
}

void eng_cache_free(struct hoop_engine *e)
{
    for (int s = 0; s < e->cache_used; s++)
        slot_free(&e->cache[s]);
    free(e->cache);
    e->cache = NULL;
    e->cache_used = 0;
    eng_cache_init(e);
}
