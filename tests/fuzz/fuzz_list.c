/* fuzz_list.c - libFuzzer target: the engine's list of new requests
 * (engine/wire.c), which every rank gathers from every other each cycle.
 * The input is the job's size and the sender (two bytes), then the list.
 * What parses must lie within the bounds of engine.h (a kind, dtype and op
 * that exist, a device kind of host or GPU and host where the request gives
 * no data, a name of 1 to HOOP_ENGINE_NAME_MAX bytes without a NUL, at
 * most HOOP_ENGINE_DIMS_MAX dimensions, the values an alltoall or an uneven
 * reduce_scatter needs, a group's shapes only on a grouped allreduce); each
 * request, encoded again and parsed again, must come back the same. */
#include "engine/engine.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct hoop_engine again; /* the encoder's (large: not on the stack) */
static struct eng_params first;

static int same(const struct eng_params *a, const struct eng_params *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->device == b->device &&
           a->root == b->root && !memcmp(&a->pre, &b->pre, 8) && !memcmp(&a->post, &b->post, 8) &&
           a->count == b->count && a->row == b->row && a->ndims == b->ndims &&
           !memcmp(a->dims, b->dims, 8 * (size_t)a->ndims) && a->nvals == b->nvals &&
           a->nshape == b->nshape &&
           (!a->nvals || !memcmp(a->vals, b->vals, 8 * ((size_t)a->nvals + a->nshape))) &&
           !strcmp(a->name, b->name);
}

static hoop_status_t reparsed(struct hoop_engine *e, int from, int rec, const struct eng_params *p,
                              const char *name)
{
    (void)e;
    (void)from;
    (void)name;
    if (rec != ER_REQ || !same(p, &first))
        __builtin_trap();
    return HOOP_OK;
}

static hoop_status_t parsed(struct hoop_engine *e, int from, int rec, const struct eng_params *p,
                            const char *name)
{
    size_t nl = name ? strlen(name) : 0;
    if (rec == ER_JOIN)
        return HOOP_OK;
    if (nl < 1 || nl > HOOP_ENGINE_NAME_MAX)
        __builtin_trap();
    if (rec == ER_FAIL) {
        if (from != 0)
            __builtin_trap();
        return HOOP_OK;
    }
    if (rec != ER_REQ || p->kind <= EK_NONE || p->kind >= EK_KIND_COUNT || p->kind == EK_JOIN ||
        p->dtype >= HOOP_DTYPE_COUNT || p->op >= HOOP_OP_COUNT || p->device > ENG_DEVICE ||
        (p->device && !eng_gives_data(p)) || p->ndims > HOOP_ENGINE_DIMS_MAX ||
        p->nvals > ENG_VALS_MAX || (p->nvals && !p->vals) ||
        (p->nshape && (p->kind != EK_ALLREDUCE || !p->nvals ||
                       p->nshape > p->nvals * (1u + HOOP_ENGINE_DIMS_MAX))) ||
        (p->kind == EK_ALLTOALL && p->nvals != (uint32_t)e->size) ||
        (p->kind == EK_BROADCAST && (p->root < 0 || p->root >= e->size)) || strcmp(p->name, name))
        __builtin_trap();
    /* Encoded again, it parses to the same fields. */
    first = *p;
    again.size = e->size;
    again.mylist_len = 0;
    if (eng_list_add_req(&again, p) ||
        eng_list_parse(&again, from, again.mylist, again.mylist_len, reparsed) != HOOP_OK)
        __builtin_trap();
    return HOOP_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct hoop_engine e;
    if (size < 2)
        return 0;
    e.size = 1 + data[0] % 16;
    e.rank = 0;
    (void)eng_list_parse(&e, data[1] % e.size, data + 2, size - 2, parsed);
    return 0;
}
