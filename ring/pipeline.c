/* pipeline.c - run a collective's step table over the ring (see pipeline.h). */
#include "ring/pipeline.h"
#include "common/clock.h"
#include "common/status.h"
#include "ring/reduce.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct cursor {
    int t;    /* step */
    size_t c; /* chunk within the step's span */
};

struct run {
    const struct hoop_pipe *p;
    const struct hoop_step *st;
    int nsteps;
    size_t ce; /* elements per chunk */
    size_t es;
    char *bufs[4];
};

static size_t span_chunks(const struct run *x, size_t len)
{
    return (len + x->ce - 1) / x->ce;
}

static size_t send_chunks(const struct run *x, int t)
{
    return x->st[t].send_buf == HOOP_BUF_NONE ? 0 : span_chunks(x, x->st[t].send_len);
}

static size_t recv_chunks(const struct run *x, int t)
{
    return x->st[t].recv_mode == HOOP_RECV_NONE ? 0 : span_chunks(x, x->st[t].recv_len);
}

/* Move past the end of a step (and over steps with nothing to move). */
static void normalize(const struct run *x, struct cursor *k, int sending)
{
    while (k->t < x->nsteps && k->c >= (sending ? send_chunks(x, k->t) : recv_chunks(x, k->t))) {
        k->t++;
        k->c = 0;
    }
}

/* Element offset within the span, and length, of chunk c of a span. */
static size_t chunk_len(const struct run *x, size_t span_len, size_t c)
{
    size_t left = span_len - c * x->ce;
    return left < x->ce ? left : x->ce;
}

struct rmeta {
    struct cursor k;
    size_t len;
};

static void phase_name(const struct run *x, int t, char *out, size_t n)
{
    if (t >= x->nsteps)
        t = x->nsteps - 1;
    if (t < 0) {
        snprintf(out, n, "its start");
        return;
    }
    const struct hoop_step *s = &x->st[t];
    if (s->phase_steps > 1)
        snprintf(out, n, "%s step %d of %d", s->phase, s->phase_step, s->phase_steps);
    else
        snprintf(out, n, "%s", s->phase);
}

hoop_status_t hoop_ring_run(struct hoop_ring *r, const struct hoop_pipe *p, double timeout_s)
{
    const struct hoop_transport_ops *ops = r->ops;
    const unsigned D = (unsigned)r->depth;
    if (!p->keep_frame) {
        hoop_frame_begin(r, p->coll, p->count, p->dtype, p->op, p->root);
        r->cur.blocks = p->blocks;
    }
    uint64_t deadline = hoop_deadline_after(timeout_s);
    struct run x = {.p = p, .st = p->steps, .nsteps = p->nsteps, .es = hoop_dtype_size(p->dtype)};
    x.ce = r->chunk_bytes / x.es ? r->chunk_bytes / x.es : 1;
    x.bufs[HOOP_BUF_INPUT] = (char *)p->input;
    x.bufs[HOOP_BUF_OUTPUT] = p->output;
    x.bufs[HOOP_BUF_WORK] = (char *)r->work;
    const size_t es = x.es;
    /* How far the schedule reaches into each buffer: the region a
     * registering transport covers with one registration. */
    size_t extent[4] = {0, 0, 0, 0};
    for (int t = 0; t < x.nsteps; t++) {
        const struct hoop_step *s = &x.st[t];
        if (s->send_buf && s->send_off + s->send_len > extent[s->send_buf])
            extent[s->send_buf] = s->send_off + s->send_len;
        if (s->recv_buf && s->recv_off + s->recv_len > extent[s->recv_buf])
            extent[s->recv_buf] = s->recv_off + s->recv_len;
    }
    /* In place, input and output are one buffer: one region, not a short
     * one for the first sends and a longer one after. */
    if (x.bufs[HOOP_BUF_INPUT] == x.bufs[HOOP_BUF_OUTPUT]) {
        size_t m = extent[HOOP_BUF_INPUT] > extent[HOOP_BUF_OUTPUT] ? extent[HOOP_BUF_INPUT]
                                                                      : extent[HOOP_BUF_OUTPUT];
        extent[HOOP_BUF_INPUT] = extent[HOOP_BUF_OUTPUT] = m;
    }
    struct rmeta meta[HOOP_RING_DEPTH_MAX];
    uint64_t slot_free = D >= 64 ? ~0ull : ((1ull << D) - 1);
    unsigned char slot_of[HOOP_RING_DEPTH_MAX];

    size_t rbytes_left = 0, sbytes_left = 0;
    for (int t = 0, ns = 0, nr = 0; t < x.nsteps; t++) {
        p->steps[t].send_ord = ns;
        p->steps[t].recv_ord = nr;
        if (x.st[t].recv_mode != HOOP_RECV_NONE) {
            rbytes_left += x.st[t].recv_len * es;
            nr++;
        }
        if (x.st[t].send_buf != HOOP_BUF_NONE) {
            sbytes_left += x.st[t].send_len * es;
            ns++;
        }
    }

    struct cursor spost = {0, 0}, rpost = {0, 0}, rdone;
    normalize(&x, &spost, 1);
    normalize(&x, &rpost, 0);
    rdone = rpost;
    unsigned long long shead = 0, stail = 0, rhead = 0, rtail = 0;
    int failed_dir = -1; /* 0 send, 1 receive */
    /* The confirmation (pipeline.h): 0 not due, 1 to post, 2 posted. */
    int cfm_r = p->confirm_from_prev, cfm_s = p->confirm_to_next;
    /* A rank that sends its successor no chunk announces itself instead,
     * so that every rank compares its collective with its predecessor's. */
    int err = hoop_frame_announce(r, sbytes_left == 0, rbytes_left == 0);
    if (err)
        goto fail;

    for (;;) {
        int moved = 0;
        /* Received chunks, in order: reduce into place, free the slot. */
        while (rhead < rtail && r->rreq[rhead % D].tp.state != HOOP_REQ_PENDING) {
            unsigned i = (unsigned)(rhead % D);
            struct hoop_tp_req *q = &r->rreq[i].tp;
            if (q->state < 0) {
                err = q->state;
                failed_dir = 1;
                goto fail;
            }
            const struct hoop_step *s = &x.st[meta[i].k.t];
            if (s->recv_mode == HOOP_RECV_REDUCE) {
                size_t at = meta[i].k.c * x.ce;
                hoop_reduce_kernel(x.bufs[s->recv_buf] + (s->recv_off + at) * es,
                                   x.bufs[HOOP_BUF_INPUT] + (s->local_off + at) * es, q->buf,
                                   meta[i].len, p->dtype, (hoop_op_t)p->op, s->avg_n);
                slot_free |= 1ull << slot_of[i];
            }
            rbytes_left -= meta[i].len * es;
            rdone = meta[i].k;
            rdone.c++;
            normalize(&x, &rdone, 0);
            rhead++;
            moved = 1;
        }
        while (shead < stail && r->sreq[shead % D].tp.state != HOOP_REQ_PENDING) {
            struct hoop_tp_req *q = &r->sreq[shead % D].tp;
            if (q->state < 0) {
                err = q->state;
                failed_dir = 0;
                goto fail;
            }
            sbytes_left -= q->len;
            shead++;
            moved = 1;
        }
        while (rtail - rhead < D && rpost.t < x.nsteps) {
            const struct hoop_step *s = &x.st[rpost.t];
            unsigned i = (unsigned)(rtail % D);
            struct hoop_tp_req *q = &r->rreq[i].tp;
            size_t at = rpost.c * x.ce;
            meta[i].k = rpost;
            meta[i].len = chunk_len(&x, s->recv_len, rpost.c);
            if (s->recv_mode == HOOP_RECV_REDUCE) {
                if (!slot_free)
                    break;
                int slot = __builtin_ctzll(slot_free);
                slot_free &= ~(1ull << slot);
                slot_of[i] = (unsigned char)slot;
                q->buf = r->scratch + (size_t)slot * r->chunk_bytes;
            } else {
                q->buf = x.bufs[s->recv_buf] + (s->recv_off + at) * es;
            }
            q->len = meta[i].len * es;
            hoop_frame_expect(r, &r->rreq[i], r->prev, (uint32_t)s->recv_ord, (uint32_t)rpost.c);
            if (s->recv_mode == HOOP_RECV_REDUCE) {
                q->region = r->scratch;
                q->region_len = (size_t)D * r->chunk_bytes;
            } else {
                q->region = x.bufs[s->recv_buf];
                q->region_len = extent[s->recv_buf] * es;
            }
            /* Only the first is checked before its payload is waited for:
             * received in order, it settles the length of every later one,
             * which then comes in one transfer with its header. */
            q->check_first = rtail == 0;
            int rc = ops->irecv(r->rx, q);
            if (rc) {
                err = rc;
                failed_dir = 1;
                goto fail;
            }
            rtail++;
            rpost.c++;
            normalize(&x, &rpost, 0);
            moved = 1;
        }
        while (stail - shead < D && spost.t < x.nsteps &&
               (!x.st[spost.t].send_dep || rdone.t > spost.t - 1 ||
                (rdone.t == spost.t - 1 && rdone.c > spost.c))) {
            const struct hoop_step *s = &x.st[spost.t];
            struct hoop_tp_req *q = &r->sreq[stail % D].tp;
            q->buf = x.bufs[s->send_buf] + (s->send_off + spost.c * x.ce) * es;
            q->len = chunk_len(&x, s->send_len, spost.c) * es;
            hoop_frame_send(r, &r->sreq[stail % D], (uint32_t)s->send_ord, (uint32_t)spost.c);
            q->region = x.bufs[s->send_buf];
            q->region_len = extent[s->send_buf] * es;
            int rc = ops->isend(r->tx, q);
            if (rc) {
                err = rc;
                failed_dir = 0;
                goto fail;
            }
            stail++;
            spost.c++;
            normalize(&x, &spost, 1);
            moved = 1;
        }
        /* After every chunk on the connection, so that it is the last
         * message either way: received once all receives are posted, sent
         * once every send is, and by the end once its first chunk is in. */
        if (cfm_r == 1 && rpost.t >= x.nsteps) {
            r->cfm_r.tp.buf = NULL;
            r->cfm_r.tp.len = 0;
            hoop_frame_expect(r, &r->cfm_r, r->prev, HOOP_FRAME_CONFIRM, 0);
            if ((err = ops->irecv(r->rx, &r->cfm_r.tp))) {
                failed_dir = 1;
                goto fail;
            }
            cfm_r = 2;
            moved = 1;
        }
        if (cfm_r == 2 && r->cfm_r.tp.state < 0) {
            err = r->cfm_r.tp.state;
            failed_dir = 1;
            goto fail;
        }
        if (cfm_s == 1 && spost.t >= x.nsteps &&
            (p->confirm_from_prev ? cfm_r == 2 && r->cfm_r.tp.state == 0
                                  : rhead > 0 || rdone.t >= x.nsteps)) {
            r->cfm_s.tp.buf = NULL;
            r->cfm_s.tp.len = 0;
            hoop_frame_send(r, &r->cfm_s, HOOP_FRAME_CONFIRM, 0);
            if ((err = ops->isend(r->tx, &r->cfm_s.tp))) {
                failed_dir = 0;
                goto fail;
            }
            cfm_s = 2;
            moved = 1;
        }
        if (cfm_s == 2 && r->cfm_s.tp.state < 0) {
            err = r->cfm_s.tp.state;
            failed_dir = 0;
            goto fail;
        }
        int ann = hoop_frame_announced(r);
        if (ann < 0) {
            err = ann;
            goto fail;
        }
        int confirmed = (!cfm_r || (cfm_r == 2 && r->cfm_r.tp.state == 0)) &&
                        (!cfm_s || (cfm_s == 2 && r->cfm_s.tp.state == 0));
        if (rdone.t >= x.nsteps && spost.t >= x.nsteps && shead == stail && ann && confirmed)
            return HOOP_OK;
        if (moved)
            continue;
        int rc = hoop_ring_progress(r, deadline);
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
    char step[96], what[160];
    int at_t = failed_dir == 0 ? spost.t : rdone.t;
    phase_name(&x, at_t, step, sizeof(step));
    /* The call as its frames say it; a part of a call (keep_frame) adds
     * what it does there. */
    hoop_frame_what(&r->cur, what, sizeof(what));
    if (p->keep_frame && p->what) {
        size_t wl = strlen(what);
        snprintf(what + wl, sizeof(what) - wl, ", %s", p->what);
    }
    hoop_ring_cancel(r);
    r->fail_err = err;
    r->fail_peer = failed_dir == 0 ? r->next : r->prev;
    hoop_status_t fst = hoop_frame_status(r, err, what);
    if (fst)
        return fst;
    if (err == -ETIMEDOUT && cfm_r == 2 && rdone.t >= x.nsteps && shead == stail &&
        r->cfm_r.tp.state != 0)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: %s timed out after %.1f s: its part is done, but %s did not "
                          "pass on the confirmation that every rank made the same call (is a "
                          "rank stopped, or slower than HOOP_TIMEOUT allows?)",
                          r->rank, what, timeout_s, r->prev_desc);
    if (err == -ETIMEDOUT) {
        int on_recv = rhead < rtail || rdone.t < x.nsteps;
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: %s timed out after %.1f s in %s: waiting for %s %s; %zu bytes "
                          "still to receive from %s, %zu to send to %s (is that rank stopped, or "
                          "slower than HOOP_TIMEOUT allows?)",
                          r->rank, what, timeout_s, step, on_recv ? "data from" : "room at",
                          on_recv ? r->prev_desc : r->next_desc, rbytes_left, r->prev_desc,
                          sbytes_left, r->next_desc);
    }
    char peer[2 * sizeof(r->next_desc) + 32];
    if (failed_dir == 0)
        snprintf(peer, sizeof(peer), "send to %s", r->next_desc);
    else if (failed_dir == 1)
        snprintf(peer, sizeof(peer), "receive from %s", r->prev_desc);
    else
        snprintf(peer, sizeof(peer), "waiting on %s and %s", r->prev_desc, r->next_desc);
    return hoop_error(hoop_status_from_errno(err), "rank %d: %s failed in %s: %s: %s", r->rank,
                      what, step, peer, hoop_ring_errno_str(r, err));
}
