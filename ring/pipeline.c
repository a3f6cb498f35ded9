/* pipeline.c - run a collective's step table over the ring (see pipeline.h). */
#include "ring/run.h"
#include "common/clock.h"
#include "common/status.h"
#include "gpu/gpu.h"
#include "reduce/reduce.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

/* Fill x for running p on r: the buffers, how far the schedule reaches
 * into each, each step's send and receive number, the bytes to move. */
static void run_init(struct run *x, struct hoop_ring *r, const struct hoop_pipe *p)
{
    memset(x, 0, offsetof(struct run, meta));
    x->r = r;
    x->p = p;
    x->st = p->steps;
    x->nsteps = p->nsteps;
    x->depth = (unsigned)r->depth;
    x->es = hoop_dtype_size(p->dtype);
    size_t cb = p->chunk_bytes && p->chunk_bytes < r->chunk_bytes ? p->chunk_bytes : r->chunk_bytes;
    x->ce = cb / x->es ? cb / x->es : 1;
    x->group = 1; /* device buffers: run_device_init */
    x->bufs[HOOP_BUF_INPUT] = (char *)p->input;
    x->bufs[HOOP_BUF_OUTPUT] = p->output;
    x->bufs[HOOP_BUF_WORK] = (char *)r->work;
    x->slots = r->scratch;
    /* How far the schedule reaches into each buffer: the region a
     * registering transport covers with one registration. */
    for (int t = 0; t < x->nsteps; t++) {
        const struct hoop_step *s = &x->st[t];
        if (s->send_buf && s->send_off + s->send_len > x->extent[s->send_buf])
            x->extent[s->send_buf] = s->send_off + s->send_len;
        if (s->recv_buf && s->recv_off + s->recv_len > x->extent[s->recv_buf])
            x->extent[s->recv_buf] = s->recv_off + s->recv_len;
    }
    /* In place, input and output are one buffer: one region, not a short
     * one for the first sends and a longer one after. */
    if (x->bufs[HOOP_BUF_INPUT] == x->bufs[HOOP_BUF_OUTPUT]) {
        size_t m = x->extent[HOOP_BUF_INPUT] > x->extent[HOOP_BUF_OUTPUT]
                       ? x->extent[HOOP_BUF_INPUT]
                       : x->extent[HOOP_BUF_OUTPUT];
        x->extent[HOOP_BUF_INPUT] = x->extent[HOOP_BUF_OUTPUT] = m;
    }
    x->slot_free = x->depth >= 64 ? ~0ull : ((1ull << x->depth) - 1);
    unsigned long long sc = 0, rc = 0;
    for (int t = 0, ns = 0, nr = 0; t < x->nsteps; t++) {
        const struct hoop_step *s = &x->st[t], *nx = t + 1 < x->nsteps ? &x->st[t + 1] : NULL;
        p->steps[t].send_ord = ns;
        p->steps[t].recv_ord = nr;
        p->steps[t].send_first = sc;
        p->steps[t].recv_first = rc;
        sc += send_chunks(x, t);
        rc += recv_chunks(x, t);
        p->steps[t].recv_fwd = nx && s->recv_mode != HOOP_RECV_NONE && nx->send_dep &&
                               nx->send_buf == s->recv_buf && nx->send_off == s->recv_off &&
                               nx->send_len == s->recv_len;
        if (x->st[t].recv_mode != HOOP_RECV_NONE) {
            x->rbytes_left += x->st[t].recv_len * x->es;
            nr++;
        }
        if (x->st[t].send_buf != HOOP_BUF_NONE) {
            x->sbytes_left += x->st[t].send_len * x->es;
            ns++;
        }
    }
    normalize(x, &x->spost, 1);
    normalize(x, &x->rpost, 0);
    x->rdone = x->rtake = x->rpost;
    x->failed_dir = -1;
    x->cfm_r = p->confirm_from_prev;
    x->cfm_s = p->confirm_to_next;
}

/* hoop_tp_req.take for a reducing receive: fold the piece into place
 * straight from the transport's memory, with no copy to a scratch slot. */
static void fold_piece(struct hoop_tp_req *req, size_t off, const void *src, size_t n)
{
    struct hoop_ring_req *q =
        (struct hoop_ring_req *)((char *)req - offsetof(struct hoop_ring_req, tp));
    struct hoop_ring_fold *f = &q->fold;
    size_t es = hoop_dtype_size(f->dtype);
    hoop_reduce_kernel(f->dst + off, f->local + off, src, n / es, f->dtype, (hoop_op_t)f->op,
                       f->avg_n);
    f->done += n;
}

/* Received chunks, in order: reduce into place (unless the transport
 * handed the payload to fold_piece), free the slot. Returns 1
 * when one was taken in, 0 when none, -errno when one failed. */
static int take_recvs(struct run *x)
{
    struct hoop_ring *r = x->r;
    const unsigned D = x->depth;
    int moved = 0;
    while (x->rhead < x->rtail && r->rreq[x->rhead % D].tp.state != HOOP_REQ_PENDING) {
        unsigned i = (unsigned)(x->rhead % D);
        struct hoop_tp_req *q = &r->rreq[i].tp;
        if (q->state < 0) {
            x->failed_dir = 1;
            return q->state;
        }
        const struct hoop_step *s = &x->st[x->meta[i].k.t];
        if (x->p->device) {
            if (x->ftail - x->fhead >= GPU_FIFO)
                break;
            int rc = run_gpu_take(x, i, s, q->buf);
            if (rc < 0)
                return rc;
            if (rc) { /* its group's work is queued */
                x->rtake = x->meta[i].k;
                x->rtake.c++;
                normalize(x, &x->rtake, 0);
            }
            x->rhead++;
            moved = 1;
            continue;
        }
        if (s->recv_mode == HOOP_RECV_REDUCE && r->rreq[i].fold.done != q->len) {
            size_t at = x->meta[i].k.c * x->ce;
            hoop_reduce_kernel(x->bufs[s->recv_buf] + (s->recv_off + at) * x->es,
                               x->bufs[HOOP_BUF_INPUT] + (s->local_off + at) * x->es, q->buf,
                               x->meta[i].len, x->p->dtype, (hoop_op_t)x->p->op, s->avg_n);
        }
        if (s->recv_mode == HOOP_RECV_REDUCE)
            x->slot_free |= 1ull << x->slot_of[i];
        x->rbytes_left -= x->meta[i].len * x->es;
        x->rdone = x->meta[i].k;
        x->rdone.c++;
        normalize(x, &x->rdone, 0);
        x->rhead++;
        moved = 1;
    }
    return moved;
}

/* Sent chunks, in order. Returns 1 when one ended, 0 when none, -errno
 * when one failed. */
static int take_sends(struct run *x)
{
    struct hoop_ring *r = x->r;
    int moved = 0;
    while (x->shead < x->stail && r->sreq[x->shead % x->depth].tp.state != HOOP_REQ_PENDING) {
        struct hoop_tp_req *q = &r->sreq[x->shead % x->depth].tp;
        if (q->state < 0) {
            x->failed_dir = 0;
            return q->state;
        }
        x->sbytes_left -= q->len;
        if (x->p->device) {
            unsigned m = (unsigned)(x->shead % (2 * x->depth));
            if (x->stage_slot[m] >= 0 && x->stage_end[m])
                x->hs[x->stage_slot[m]].use &= (unsigned char)~HS_SEND;
        }
        x->shead++;
        moved = 1;
    }
    return moved;
}

/* Post receives while a request (and, to reduce, a scratch slot) is free.
 * Returns 1 when one was posted, 0 when none, -errno when posting failed. */
static int post_recvs(struct run *x)
{
    struct hoop_ring *r = x->r;
    const unsigned D = x->depth;
    int moved = 0;
    while (x->rtail - x->rhead < D && x->rpost.t < x->nsteps) {
        const struct hoop_step *s = &x->st[x->rpost.t];
        unsigned i = (unsigned)(x->rtail % D);
        struct hoop_tp_req *q = &r->rreq[i].tp;
        size_t at = x->rpost.c * x->ce;
        /* Where in its group's slot or host chunk it lands (0 on host
         * buffers); the group's first takes one. */
        size_t sub = x->rpost.c % x->group;
        x->meta[i].k = x->rpost;
        x->meta[i].len = chunk_len(x, s->recv_len, x->rpost.c);
        if (s->recv_mode == HOOP_RECV_REDUCE) {
            if (!sub) {
                if (!x->slot_free)
                    break;
                x->rgroup = __builtin_ctzll(x->slot_free);
                x->slot_free &= ~(1ull << x->rgroup);
            }
            x->slot_of[i] = (unsigned char)x->rgroup;
            q->buf = x->slots + (size_t)x->rgroup * r->chunk_bytes + sub * x->ce * x->es;
        } else if (x->p->device) {
            /* Into a host chunk; a copy places it on the device. */
            if (!sub) {
                int slot = run_pool_take(x, 1);
                if (slot < 0)
                    break;
                int fwd = s->recv_fwd && !x->gsend; /* sent on from here */
                x->hs[slot].use = (unsigned char)(HS_RECV | (fwd ? HS_FWD : 0));
                x->hs[slot].send_no = fwd ? x->st[x->rpost.t + 1].send_first + x->rpost.c : 0;
                x->rgroup = slot;
            }
            x->land_slot[i] = (short)x->rgroup;
            q->buf = run_pool_at(x, x->rgroup) + sub * x->ce * x->es;
        } else {
            q->buf = x->bufs[s->recv_buf] + (s->recv_off + at) * x->es;
        }
        q->len = x->meta[i].len * x->es;
        hoop_frame_expect(r, &r->rreq[i], r->prev, (uint32_t)s->recv_ord, (uint32_t)x->rpost.c);
        if (s->recv_mode == HOOP_RECV_REDUCE) {
            q->region = x->slots;
            q->region_len = (size_t)D * r->chunk_bytes;
            /* Host buffers fold what lands in place; on a device a GPU
             * kernel reduces it from the slot (run_gpu_take). */
            if (!x->p->device) {
                r->rreq[i].fold = (struct hoop_ring_fold){
                    .dst = x->bufs[s->recv_buf] + (s->recv_off + at) * x->es,
                    .local = x->bufs[HOOP_BUF_INPUT] + (s->local_off + at) * x->es,
                    .dtype = x->p->dtype,
                    .op = x->p->op,
                    .avg_n = s->avg_n,
                };
                q->take = fold_piece;
            }
        } else if (x->p->device) {
            q->region = x->pool;
            q->region_len = (size_t)x->npool * r->chunk_bytes;
        } else {
            q->region = x->bufs[s->recv_buf];
            q->region_len = x->extent[s->recv_buf] * x->es;
        }
        /* Only the first is checked before its payload is waited for:
         * received in order, it settles the length of every later one,
         * which then comes in one transfer with its header. */
        q->check_first = x->rtail == 0;
        int rc = r->ops->irecv(r->rx, q);
        if (rc) {
            x->failed_dir = 1;
            return rc;
        }
        x->rtail++;
        x->rpost.c++;
        normalize(x, &x->rpost, 0);
        moved = 1;
    }
    return moved;
}

/* Post sends while a request is free and, for a step that forwards what
 * the step before received, its chunk is in. Returns 1 when one was
 * posted, 0 when none, -errno when posting failed. */
static int post_sends(struct run *x)
{
    struct hoop_ring *r = x->r;
    const unsigned D = x->depth;
    int moved = 0;
    while (x->stail - x->shead < D && x->spost.t < x->nsteps &&
           (!x->st[x->spost.t].send_dep || x->rdone.t > x->spost.t - 1 ||
            (x->rdone.t == x->spost.t - 1 && x->rdone.c > x->spost.c))) {
        if (x->p->device) {
            int ready = run_gpu_send_ready(x);
            if (ready < 0)
                return ready;
            if (!ready)
                break;
        }
        const struct hoop_step *s = &x->st[x->spost.t];
        struct hoop_tp_req *q = &r->sreq[x->stail % D].tp;
        int slot = x->p->device ? x->stage_slot[x->stail % (2 * D)] : -1;
        /* Host buffers; or device ones the NIC reads (GPUDirect RDMA); or
         * a host chunk of the pipe's. */
        char *sb = slot >= 0 ? x->pool
                   : x->p->device ? x->dbufs[s->send_buf] : x->bufs[s->send_buf];
        q->buf = slot >= 0 ? run_pool_at(x, slot) + (x->spost.c % x->group) * x->ce * x->es
                           : sb + (s->send_off + x->spost.c * x->ce) * x->es;
        q->len = chunk_len(x, s->send_len, x->spost.c) * x->es;
        /* The frame first: it clears the region, named after it. */
        hoop_frame_send(r, &r->sreq[x->stail % D], (uint32_t)s->send_ord, (uint32_t)x->spost.c);
        q->on_device = slot < 0 && x->p->device && r->gdr_nic;
        q->region = sb;
        q->region_len = slot >= 0 ? (size_t)x->npool * r->chunk_bytes
                                  : x->extent[s->send_buf] * x->es;
        int rc = r->ops->isend(r->tx, q);
        if (rc) {
            x->failed_dir = 0;
            return rc;
        }
        x->stail++;
        x->spost.c++;
        normalize(x, &x->spost, 1);
        moved = 1;
    }
    return moved;
}

/* The chain's confirmation, after every chunk on the connection, so that
 * it is the last message either way: received once all receives are
 * posted, sent once every send is, and by the end once its first chunk is
 * in. Returns 1 when one was posted, 0 when none, -errno on a failure. */
static int post_confirm(struct run *x)
{
    struct hoop_ring *r = x->r;
    const struct hoop_pipe *p = x->p;
    int moved = 0, rc;
    if (x->cfm_r == 1 && x->rpost.t >= x->nsteps) {
        r->cfm_r.tp.buf = NULL;
        r->cfm_r.tp.len = 0;
        hoop_frame_expect(r, &r->cfm_r, r->prev, HOOP_FRAME_CONFIRM, 0);
        if ((rc = r->ops->irecv(r->rx, &r->cfm_r.tp))) {
            x->failed_dir = 1;
            return rc;
        }
        x->cfm_r = 2;
        moved = 1;
    }
    if (x->cfm_r == 2 && r->cfm_r.tp.state < 0) {
        x->failed_dir = 1;
        return r->cfm_r.tp.state;
    }
    if (x->cfm_s == 1 && x->spost.t >= x->nsteps &&
        (p->confirm_from_prev ? x->cfm_r == 2 && r->cfm_r.tp.state == 0
                              : x->rhead > 0 || x->rdone.t >= x->nsteps)) {
        r->cfm_s.tp.buf = NULL;
        r->cfm_s.tp.len = 0;
        hoop_frame_send(r, &r->cfm_s, HOOP_FRAME_CONFIRM, 0);
        if ((rc = r->ops->isend(r->tx, &r->cfm_s.tp))) {
            x->failed_dir = 0;
            return rc;
        }
        x->cfm_s = 2;
        moved = 1;
    }
    if (x->cfm_s == 2 && r->cfm_s.tp.state < 0) {
        x->failed_dir = 0;
        return r->cfm_s.tp.state;
    }
    return moved;
}

/* Whether the confirmations due have come and gone. */
static int run_confirmed(const struct run *x)
{
    const struct hoop_ring *r = x->r;
    return (!x->cfm_r || (x->cfm_r == 2 && r->cfm_r.tp.state == 0)) &&
           (!x->cfm_s || (x->cfm_s == 2 && r->cfm_s.tp.state == 0));
}

/* One turn of the engine: take in what ended, post what may go. Returns 1
 * when anything moved, 0 when nothing did, -errno on a failure. */
static int run_turn(struct run *x)
{
    int moved = 0, rc;
    if ((rc = take_recvs(x)) < 0)
        return rc;
    moved |= rc;
    if (x->p->device) {
        if ((rc = run_gpu_done(x)) < 0)
            return rc;
        moved |= rc;
        if ((rc = run_gpu_stage(x)) < 0)
            return rc;
        moved |= rc;
    }
    if ((rc = take_sends(x)) < 0)
        return rc;
    moved |= rc;
    if ((rc = post_recvs(x)) < 0)
        return rc;
    moved |= rc;
    if ((rc = post_sends(x)) < 0)
        return rc;
    moved |= rc;
    if ((rc = post_confirm(x)) < 0)
        return rc;
    return moved | rc;
}

/* After err: cancel the transport and say what failed, in which step,
 * with which peer. */
static hoop_status_t run_failed(struct run *x, int err, double timeout_s)
{
    struct hoop_ring *r = x->r;
    const struct hoop_pipe *p = x->p;
    char step[96], what[160];
    int at_t = x->failed_dir == 0 ? x->spost.t : x->rdone.t;
    if (x->g) {
        /* Nothing queued may reach the caller's buffers after the return. */
        char why[320];
        hoop_gpu_pipe_drain(x->g, why, sizeof(why));
    }
    phase_name(x, at_t, step, sizeof(step));
    /* The call as its frames say it; a part of a call (keep_frame) adds
     * what it does there. */
    hoop_frame_what(&r->cur, what, sizeof(what));
    if (p->keep_frame && p->what) {
        size_t wl = strlen(what);
        snprintf(what + wl, sizeof(what) - wl, ", %s", p->what);
    }
    hoop_ring_cancel(r);
    r->fail_err = err;
    r->fail_peer = x->failed_dir == 0 ? r->next : r->prev;
    hoop_status_t fst = hoop_frame_status(r, err, what);
    if (fst)
        return fst;
    if (err == -ETIMEDOUT && x->cfm_r == 2 && x->rdone.t >= x->nsteps && x->shead == x->stail &&
        r->cfm_r.tp.state != 0)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: %s timed out after %.1f s: its part is done, but %s did not "
                          "pass on the confirmation that every rank made the same call (is a "
                          "rank stopped, or slower than HOOP_TIMEOUT allows?)",
                          r->rank, what, timeout_s, r->prev_desc);
    if (err == -ETIMEDOUT) {
        int on_recv = x->rhead < x->rtail || x->rdone.t < x->nsteps;
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: %s timed out after %.1f s in %s: waiting for %s %s; %zu bytes "
                          "still to receive from %s, %zu to send to %s (is that rank stopped, or "
                          "slower than HOOP_TIMEOUT allows?)",
                          r->rank, what, timeout_s, step, on_recv ? "data from" : "room at",
                          on_recv ? r->prev_desc : r->next_desc, x->rbytes_left, r->prev_desc,
                          x->sbytes_left, r->next_desc);
    }
    char peer[2 * sizeof(r->next_desc) + 32];
    if (x->failed_dir == 0)
        snprintf(peer, sizeof(peer), "send to %s", r->next_desc);
    else if (x->failed_dir == 1)
        snprintf(peer, sizeof(peer), "receive from %s", r->prev_desc);
    else
        snprintf(peer, sizeof(peer), "waiting on %s and %s", r->prev_desc, r->next_desc);
    return hoop_error(hoop_status_from_errno(err), "rank %d: %s failed in %s: %s: %s", r->rank,
                      what, step, peer, hoop_ring_errno_str(r, err));
}

hoop_status_t hoop_ring_run(struct hoop_ring *r, const struct hoop_pipe *p, double timeout_s)
{
    if (!p->keep_frame) {
        hoop_frame_begin(r, p->coll, p->count, p->dtype, p->op, p->root);
        r->cur.blocks = p->blocks;
    }
    uint64_t deadline = hoop_deadline_after(timeout_s);
    struct run x;
    run_init(&x, r, p);
    if (p->device && run_device_init(&x))
        return run_gpu_failed(&x);
    /* A rank that sends its successor no chunk announces itself instead,
     * so that every rank compares its collective with its predecessor's. */
    int err = hoop_frame_announce(r, x.sbytes_left == 0, x.rbytes_left == 0);
    if (err)
        return run_failed(&x, err, timeout_s);
    for (;;) {
        int moved = run_turn(&x);
        if (moved < 0)
            return x.gpu_failed ? run_gpu_failed(&x) : run_failed(&x, moved, timeout_s);
        int ann = hoop_frame_announced(r);
        if (ann < 0)
            return run_failed(&x, ann, timeout_s);
        if (x.rdone.t >= x.nsteps && x.spost.t >= x.nsteps && x.shead == x.stail && ann &&
            run_confirmed(&x))
            return HOOP_OK;
        if (moved)
            continue;
        /* GPU work outstanding: the transport's wait cannot see it end, so
         * it looks again soon; and where the transport has nothing in
         * flight at all (it says so with -EDEADLK), only the GPU can move:
         * the loop looks at its events, giving up the CPU in between. */
        uint64_t until = deadline;
        int gpu_busy = p->device &&
                       (x.fhead < x.ftail ||
                        (x.gstage > x.stail && x.staged_copy[x.stail % x.depth] &&
                         x.stail - x.shead < x.depth));
        if (gpu_busy) {
            uint64_t soon = hoop_now_ns() + 20000;
            if (soon < until)
                until = soon;
        }
        int rc = hoop_ring_progress(r, until);
        if (rc == -EDEADLK && gpu_busy) {
            sched_yield();
            rc = 0;
        }
        if (rc < 0)
            return run_failed(&x, rc, timeout_s);
        if (rc == 0 && hoop_now_ns() >= deadline)
            return run_failed(&x, -ETIMEDOUT, timeout_s);
    }
}
