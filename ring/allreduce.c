/* allreduce.c - the chunked, pipelined ring allreduce.
 *
 * The buffer is cut into N segments (sizes differ by at most one element);
 * segment k is finished by rank k-1. 2(N-1) steps run as one stream:
 *   step t < N-1 (reduce-scatter): send segment r-t, receive segment r-t-1
 *     into a scratch slot and reduce it into recvbuf with our own input;
 *   step t >= N-1 (allgather, s = t-N+1): send segment r+1-s, receive
 *     segment r-s straight into recvbuf.
 * What a rank sends at step t is what it received at step t-1, so each
 * segment is cut into the same chunks at both ends, and chunk c of step t
 * may leave as soon as chunk c of step t-1 has been received (and reduced):
 * up to `depth` chunks travel in each direction while the CPU reduces the
 * one that has just arrived. Every rank sends 2(N-1)/N of the buffer. Each
 * element is reduced in one place, in ring order, and then copied: the
 * result is the same bits on every rank. */
#include "ring/ring.h"
#include "common/clock.h"
#include "common/status.h"
#include "ring/reduce.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct cursor {
    int t;    /* step */
    size_t c; /* chunk within the step's segment */
};

struct sched {
    int rank, n, steps;
    size_t count, base, extra, chunk_elems, esize;
};

static size_t seg_off(const struct sched *s, int seg)
{
    size_t k = (size_t)seg;
    return k * s->base + (k < s->extra ? k : s->extra);
}

static size_t seg_len(const struct sched *s, int seg)
{
    return s->base + ((size_t)seg < s->extra ? 1 : 0);
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

static int seg_sent(const struct sched *s, int t)
{
    return t < s->n - 1 ? mod(s->rank - t, s->n) : mod(s->rank + 1 - (t - (s->n - 1)), s->n);
}

static int seg_recvd(const struct sched *s, int t)
{
    return t < s->n - 1 ? mod(s->rank - t - 1, s->n) : mod(s->rank - (t - (s->n - 1)), s->n);
}

static size_t nchunks(const struct sched *s, int seg)
{
    return (seg_len(s, seg) + s->chunk_elems - 1) / s->chunk_elems;
}

/* Skip past the end of a step's segment (and over empty segments). */
static void normalize(const struct sched *s, struct cursor *k, int sending)
{
    while (k->t < s->steps && k->c >= nchunks(s, sending ? seg_sent(s, k->t) : seg_recvd(s, k->t))) {
        k->t++;
        k->c = 0;
    }
}

/* Element offset and length of chunk k. */
static void chunk_at(const struct sched *s, const struct cursor *k, int sending, size_t *off,
                     size_t *len)
{
    int seg = sending ? seg_sent(s, k->t) : seg_recvd(s, k->t);
    size_t first = k->c * s->chunk_elems;
    size_t left = seg_len(s, seg) - first;
    *off = seg_off(s, seg) + first;
    *len = left < s->chunk_elems ? left : s->chunk_elems;
}

static void step_name(const struct sched *s, int t, char *out, size_t n)
{
    if (t >= s->steps)
        t = s->steps - 1;
    if (t < s->n - 1)
        snprintf(out, n, "reduce-scatter step %d of %d", t + 1, s->n - 1);
    else
        snprintf(out, n, "allgather step %d of %d", t - s->n + 2, s->n - 1);
}

struct rmeta {
    struct cursor k;
    size_t off, len;
};

hoop_status_t hoop_ring_allreduce(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                  size_t count, hoop_dtype_t dtype, hoop_op_t op,
                                  double timeout_s)
{
    const struct hoop_transport_ops *ops = r->ops;
    const int D = r->depth;
    uint64_t seq = ++r->seq;
    uint64_t deadline = hoop_deadline_after(timeout_s);
    struct sched s = {.rank = r->rank, .n = r->size, .steps = 2 * (r->size - 1), .count = count,
                      .esize = hoop_dtype_size(dtype)};
    s.base = count / (size_t)s.n;
    s.extra = count % (size_t)s.n;
    s.chunk_elems = r->chunk_bytes / s.esize;
    if (s.chunk_elems == 0)
        s.chunk_elems = 1;
    const char *src = sendbuf;
    char *dst = recvbuf;
    const size_t es = s.esize;

    struct rmeta meta[64];
    if (D > 64)
        return hoop_error(HOOP_ERR_INVALID, "rank %d: allreduce: pipeline depth %d > 64", r->rank, D);

    struct cursor spost = {0, 0}, rpost = {0, 0}, rdone;
    normalize(&s, &spost, 1);
    normalize(&s, &rpost, 0);
    rdone = rpost;
    unsigned long long shead = 0, stail = 0, rhead = 0, rtail = 0;
    size_t rbytes_left = (count - seg_len(&s, r->rank)) * es +
                         (count - seg_len(&s, mod(r->rank + 1, s.n))) * es;
    size_t sbytes_left = (count - seg_len(&s, mod(r->rank + 1, s.n))) * es +
                         (count - seg_len(&s, mod(r->rank + 2, s.n))) * es;
    int failed_dir = -1; /* 0 send, 1 recv */
    int err = 0;

    for (;;) {
        int moved = 0;
        /* Received chunks, in order: reduce (reduce-scatter) or nothing
         * (allgather, it landed in place). */
        while (rhead < rtail && r->rreq[rhead % (unsigned)D].state != HOOP_REQ_PENDING) {
            struct hoop_tp_req *q = &r->rreq[rhead % (unsigned)D];
            if (q->state < 0) {
                err = q->state;
                failed_dir = 1;
                goto fail;
            }
            struct rmeta *m = &meta[rhead % (unsigned)D];
            if (m->k.t < s.n - 1) {
                int avg_n = (op == HOOP_AVG && m->k.t == s.n - 2) ? s.n : 0;
                hoop_reduce_kernel(dst + m->off * es, src + m->off * es, q->buf, m->len, dtype, op, avg_n);
            }
            rbytes_left -= m->len * es;
            rdone = m->k;
            rdone.c++;
            normalize(&s, &rdone, 0);
            rhead++;
            moved = 1;
        }
        while (shead < stail && r->sreq[shead % (unsigned)D].state != HOOP_REQ_PENDING) {
            struct hoop_tp_req *q = &r->sreq[shead % (unsigned)D];
            if (q->state < 0) {
                err = q->state;
                failed_dir = 0;
                goto fail;
            }
            sbytes_left -= q->len;
            shead++;
            moved = 1;
        }
        while (rtail - rhead < (unsigned)D && rpost.t < s.steps) {
            unsigned slot = (unsigned)(rtail % (unsigned)D);
            struct rmeta *m = &meta[slot];
            struct hoop_tp_req *q = &r->rreq[slot];
            m->k = rpost;
            chunk_at(&s, &rpost, 0, &m->off, &m->len);
            q->buf = rpost.t < s.n - 1 ? (void *)(r->scratch + (size_t)slot * r->chunk_bytes)
                                       : (void *)(dst + m->off * es);
            q->len = m->len * es;
            int rc = ops->irecv(r->rx, q);
            if (rc) {
                err = rc;
                failed_dir = 1;
                goto fail;
            }
            rtail++;
            rpost.c++;
            normalize(&s, &rpost, 0);
            moved = 1;
        }
        /* A chunk leaves once the same chunk of the step before is in. */
        while (stail - shead < (unsigned)D && spost.t < s.steps &&
               (spost.t == 0 || rdone.t > spost.t - 1 ||
                (rdone.t == spost.t - 1 && rdone.c > spost.c))) {
            struct hoop_tp_req *q = &r->sreq[stail % (unsigned)D];
            size_t off, len;
            chunk_at(&s, &spost, 1, &off, &len);
            q->buf = (void *)((spost.t == 0 ? src : dst) + off * es);
            q->len = len * es;
            int rc = ops->isend(r->tx, q);
            if (rc) {
                err = rc;
                failed_dir = 0;
                goto fail;
            }
            stail++;
            spost.c++;
            normalize(&s, &spost, 1);
            moved = 1;
        }
        if (rdone.t >= s.steps && spost.t >= s.steps && shead == stail)
            return HOOP_OK;
        if (moved)
            continue;
        int rc = ops->progress(r->tp, deadline);
        if (rc < 0) {
            err = rc;
            goto fail;
        }
        if (rc == 0 && hoop_now_ns() >= deadline) {
            err = -ETIMEDOUT;
            goto fail;
        }
    }

fail:;
    char step[64];
    step_name(&s, rdone.t, step, sizeof(step));
    ops->cancel(r->tp);
    if (err == -ETIMEDOUT) {
        int on_recv = rhead < rtail || rdone.t < s.steps;
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: allreduce #%llu (%zu x %s %s) timed out after %.1f s in %s: "
                          "waiting for %s %s; %zu bytes still to receive from %s, %zu to send to "
                          "%s (is that rank stopped, or slower than HOOP_TIMEOUT allows?)",
                          r->rank, (unsigned long long)seq, count, hoop_dtype_str(dtype),
                          hoop_op_str(op), timeout_s, step, on_recv ? "data from" : "room at",
                          on_recv ? r->prev_desc : r->next_desc, rbytes_left, r->prev_desc,
                          sbytes_left, r->next_desc);
    }
    char what[2 * sizeof(r->next_desc) + 32];
    if (failed_dir == 0)
        snprintf(what, sizeof(what), "send to %s", r->next_desc);
    else if (failed_dir == 1)
        snprintf(what, sizeof(what), "receive from %s", r->prev_desc);
    else
        snprintf(what, sizeof(what), "waiting on %s and %s", r->prev_desc, r->next_desc);
    return hoop_error(hoop_status_from_errno(err),
                      "rank %d: allreduce #%llu (%zu x %s %s) failed in %s: %s: %s", r->rank,
                      (unsigned long long)seq, count, hoop_dtype_str(dtype), hoop_op_str(op), step,
                      what, hoop_errno_str(err));
}
