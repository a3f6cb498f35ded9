/* shape.c - the sizes a run steps through, and each size's buffers in
 * elements as nccl-tests derives them. */
#include "bench/ring_bench/ring_bench.h"

/* Advances *size along -b/-e/-f/-i; 0 when the sequence is over. */
int next_size(const struct options *o, size_t *size)
{
    size_t next;
    if (o->step_bytes) {
        if (*size > SIZE_MAX - o->step_bytes)
            return 0;
        next = *size + o->step_bytes;
    } else {
        if (*size > SIZE_MAX / (size_t)o->step_factor)
            return 0;
        next = *size * (size_t)o->step_factor;
    }
    if (next > o->max_bytes)
        return 0;
    *size = next;
    return 1;
}

/* The buffers of the row for `size` bytes; 0 when the row is skipped (no
 * element to move). */
int shape_of(const struct bench *b, size_t size, struct shape *s)
{
    size_t c = size / b->esize, n = (size_t)b->nranks;
    memset(s, 0, sizeof *s);
    switch (b->opt.coll) {
    case COLL_REDUCE_SCATTER:
        s->pcount = c / n;
        s->send_elems = s->pcount * n;
        s->recv_elems = s->pcount;
        s->count = s->pcount;
        s->bytes = s->send_elems * b->esize;
        break;
    case COLL_ALLGATHER:
        s->pcount = c / n;
        s->send_elems = s->pcount;
        s->recv_elems = s->pcount * n;
        s->count = s->pcount;
        s->bytes = s->recv_elems * b->esize;
        break;
    case COLL_ALLTOALL:
        s->pcount = c / n;
        s->send_elems = s->recv_elems = s->pcount * n;
        s->count = s->pcount;
        s->bytes = s->send_elems * b->esize;
        break;
    case COLL_ALLGATHERV: {
        /* Rank r adds r elements to an even share, so that the total stays
         * within the row's size whenever the size allows, and the small
         * rows give rank 0 nothing to send. */
        size_t tri = n * (n - 1) / 2;
        s->agv_base = c >= tri ? (c - tri) / n : 0;
        s->pcount = s->agv_base + (size_t)b->rank;
        s->send_elems = s->agv_base + n - 1;
        s->recv_elems = s->agv_base * n + tri;
        s->count = c ? s->recv_elems : 0;
        s->bytes = s->count * b->esize;
        break;
    }
    default:
        s->pcount = s->send_elems = s->recv_elems = s->count = c;
        s->bytes = c * b->esize;
        break;
    }
    return s->count != 0;
}
