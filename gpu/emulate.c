/* emulate.c - the pipeline's stream over host memory (emulate.h). */
#include "gpu/emulate.h"
#include "gpu/gpu.h"
#include "common/clock.h"
#include "reduce/reduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_COPY, OP_REDUCE, OP_MARK };

struct emu_op {
    int kind;
    void *dst, *dst2;
    const void *a, *b;
    size_t n; /* bytes for a copy, elements for a reduction */
    hoop_dtype_t dtype;
    hoop_op_t op;
    int avg_n;
    unsigned ev;
    uint64_t ready_ns; /* done no earlier than this */
};

/* Each queued op takes this long after the one before it (or after it was
 * queued): like a GPU, the work ends while the host does other things,
 * and the transport may have nothing in flight meanwhile. */
#define EMU_OP_NS 20000ull

/* A ring of queued work; when it is full the oldest is done at once (the
 * order is kept, only the lateness is less). */
#define EMU_QUEUE 1024

struct hoop_gpu_emu {
    struct emu_op q[EMU_QUEUE];
    unsigned long long head, tail;
    /* Per event: the queue position of its last mark, and whether done. */
    unsigned long long mark_at[HOOP_GPU_EVENTS];
    unsigned char marked[HOOP_GPU_EVENTS];
    uint64_t last_ready; /* ready_ns of the last op queued */
    void *slots;
};

struct hoop_gpu_emu *hoop_gpu_emu_open(size_t slots_bytes, void **slots)
{
    struct hoop_gpu_emu *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    e->slots = aligned_alloc(64, slots_bytes ? (slots_bytes + 63) & ~(size_t)63 : 64);
    if (!e->slots) {
        free(e);
        return NULL;
    }
    memset(e->slots, 0, slots_bytes);
    *slots = e->slots;
    return e;
}

static void run_one(struct hoop_gpu_emu *e)
{
    struct emu_op *o = &e->q[e->head % EMU_QUEUE];
    switch (o->kind) {
    case OP_COPY:
        memmove(o->dst, o->a, o->n);
        break;
    case OP_REDUCE: {
        size_t bytes = o->n * hoop_dtype_size(o->dtype);
        if (o->dst) {
            hoop_reduce_kernel(o->dst, o->a, o->b, o->n, o->dtype, o->op, o->avg_n);
            if (o->dst2)
                memcpy(o->dst2, o->dst, bytes);
        } else if (o->dst2) {
            hoop_reduce_kernel(o->dst2, o->a, o->b, o->n, o->dtype, o->op, o->avg_n);
        }
        break;
    }
    default:
        break;
    }
    e->head++;
}

void hoop_gpu_emu_drain(struct hoop_gpu_emu *e)
{
    while (e->head < e->tail)
        run_one(e);
}

void hoop_gpu_emu_close(struct hoop_gpu_emu *e)
{
    if (!e)
        return;
    hoop_gpu_emu_drain(e);
    free(e->slots);
    free(e);
}

static struct emu_op *push(struct hoop_gpu_emu *e)
{
    if (e->tail - e->head >= EMU_QUEUE)
        run_one(e);
    struct emu_op *o = &e->q[e->tail % EMU_QUEUE];
    memset(o, 0, sizeof(*o));
    uint64_t now = hoop_now_ns();
    o->ready_ns = (e->last_ready > now ? e->last_ready : now) + EMU_OP_NS;
    e->last_ready = o->ready_ns;
    e->tail++;
    return o;
}

int hoop_gpu_emu_copy(struct hoop_gpu_emu *e, void *dst, const void *src, size_t bytes, char *why,
                      size_t why_len)
{
    (void)why;
    (void)why_len;
    struct emu_op *o = push(e);
    o->kind = OP_COPY;
    o->dst = dst;
    o->a = src;
    o->n = bytes;
    return 0;
}

int hoop_gpu_emu_reduce(struct hoop_gpu_emu *e, void *dst, void *dst2, const void *a,
                        const void *b, size_t n, hoop_dtype_t dtype, hoop_op_t op, int avg_n,
                        char *why, size_t why_len)
{
    if ((unsigned)op >= HOOP_OP_COUNT || (unsigned)dtype >= HOOP_DTYPE_COUNT) {
        snprintf(why, why_len, "emulated device reduction: dtype %d or op %d is not one of "
                 "hoop.h's", (int)dtype, (int)op);
        return -1;
    }
    struct emu_op *o = push(e);
    o->kind = OP_REDUCE;
    o->dst = dst;
    o->dst2 = dst2;
    o->a = a;
    o->b = b;
    o->n = n;
    o->dtype = dtype;
    o->op = op;
    o->avg_n = avg_n;
    return 0;
}

int hoop_gpu_emu_mark(struct hoop_gpu_emu *e, unsigned ev)
{
    struct emu_op *o = push(e);
    o->kind = OP_MARK;
    o->ev = ev;
    e->mark_at[ev] = e->tail; /* passed once head reaches it */
    e->marked[ev] = 1;
    return 0;
}

int hoop_gpu_emu_passed(struct hoop_gpu_emu *e, unsigned ev)
{
    /* The work whose time has come is done. */
    uint64_t now = hoop_now_ns();
    while (e->head < e->tail && e->q[e->head % EMU_QUEUE].ready_ns <= now)
        run_one(e);
    if (!e->marked[ev])
        return 1; /* never marked: nothing to wait for (as cudaEventQuery) */
    return e->head >= e->mark_at[ev];
}
