/* pipeline.c - run a collective's step table over the ring (see pipeline.h). */
#include "ring/pipeline.h"
#include "common/clock.h"
#include "common/status.h"
#include "gpu/gpu.h"
#include "reduce/reduce.h"

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct cursor {
    int t;    /* step */
    size_t c; /* chunk within the step's span */
};

/* What a posted receive carries: its chunk, and that chunk's length. */
struct rmeta {
    struct cursor k;
    size_t len;
};

/* Device buffers: a received chunk whose copy or reduction is queued on
 * the GPU, in order; done when event (its index % GPU_FIFO) has passed.
 * Sends of the caller's data wait for the copy to the host under event
 * GPU_FIFO + (send number % depth). */
struct gwork {
    struct cursor k;
    size_t len;
    int slot;  /* the receive slot it frees, or -1 */
    int hslot; /* the host chunk it reads or writes, or -1 */
};

/* Device buffers: a pinned host chunk of the pipe (its STAGE buffer) and
 * what holds it. A chunk is free when nothing does. HS_FWD alone (the data
 * is final and also on the device, its send not yet staged) may be given
 * up for another use: the send then copies its chunk from the device. */
enum { HS_RECV = 1, /* a receive lands in it, or GPU work reads or writes it */
       HS_FWD = 2,  /* it holds what send number send_no will send */
       HS_SEND = 4  /* a staged or posted send leaves from it */ };
struct hslot {
    unsigned char use;
    unsigned long long send_no;
};
#define GPU_FIFO (2 * HOOP_RING_DEPTH_MAX)
_Static_assert(GPU_FIFO + HOOP_RING_DEPTH_MAX <= HOOP_GPU_EVENTS, "the pipe has too few events");

/* One hoop_ring_run: the table, the buffers, and how far sends and
 * receives have gone. Requests live in the ring's depth slots, request n
 * of a direction in slot n % depth; head..tail are the ones posted. */
struct run {
    struct hoop_ring *r;
    const struct hoop_pipe *p;
    const struct hoop_step *st;
    int nsteps;
    unsigned depth;
    size_t ce; /* elements per chunk */
    size_t es;
    char *bufs[4];    /* what the transport moves from and into */
    size_t extent[4]; /* elements of each buffer the schedule reaches */
    uint8_t *slots;   /* the receive slots of reducing receives */
    uint64_t slot_free; /* scratch slots free for a reducing receive */
    size_t rbytes_left, sbytes_left;
    struct cursor spost, rpost, rdone; /* next send, next receive to post, next not in */
    unsigned long long shead, stail, rhead, rtail;
    int failed_dir; /* 0 send, 1 receive, -1 neither */
    /* The confirmation (pipeline.h): 0 not due, 1 to post, 2 posted. */
    int cfm_r, cfm_s;
    /* Device buffers (hoop_pipe.device): dbufs[] are the caller's and the
     * pipe's device memory for partial sums (WORK); the transport moves
     * the data through the pipe's npool host chunks. */
    struct hoop_gpu_pipe *g;
    char *dbufs[4];
    int gsend;                /* GPUDirect RDMA: sends leave from dbufs */
    char *pool;
    unsigned npool;
    unsigned long long fhead, ftail; /* received chunks with GPU work queued */
    struct cursor sstage;     /* the next send to stage */
    struct cursor rtake;      /* the next receive whose GPU work is not queued yet */
    unsigned long long gstage; /* sends staged so far (those needing no copy too) */
    int gpu_failed;
    const char *gpu_what; /* what failed on the GPU (or NULL), and the pipe's sentence */
    char gpu_why[320];
    /* Per receive slot (not cleared: written when a receive is posted). */
    struct rmeta meta[HOOP_RING_DEPTH_MAX];
    unsigned char slot_of[HOOP_RING_DEPTH_MAX];
    struct gwork fifo[GPU_FIFO];
    unsigned char staged_copy[HOOP_RING_DEPTH_MAX]; /* per send number % depth */
    short stage_slot[2 * HOOP_RING_DEPTH_MAX]; /* per send number % 2 depth: its host chunk */
    short land_slot[HOOP_RING_DEPTH_MAX];      /* per receive request: its host chunk */
    struct hslot hs[HOOP_RING_STAGE_MAX];      /* device buffers: cleared by device_init */
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

/* A failure of the GPU pipe: its sentence is kept for hoop_ring_run. */
static int gpu_fail(struct run *x, const char *what)
{
    x->gpu_what = what;
    x->gpu_failed = 1;
    return -EIO;
}

/* Device buffers: the pipe's host chunks the transport moves the data
 * through, and its device memory for partial sums. 0, or -EIO with the
 * sentence kept. */
static int device_init(struct run *x)
{
    struct hoop_ring *r = x->r;
    const struct hoop_pipe *p = x->p;
    x->g = r->gpu;
    x->dbufs[HOOP_BUF_INPUT] = (char *)p->input;
    x->dbufs[HOOP_BUF_OUTPUT] = p->output;
    x->dbufs[HOOP_BUF_WORK] = NULL;
    void *h;
    if (x->extent[HOOP_BUF_WORK]) {
        if (hoop_gpu_pipe_dwork(x->g, x->extent[HOOP_BUF_WORK] * x->es, &h, x->gpu_why,
                                sizeof(x->gpu_why)))
            return gpu_fail(x, NULL);
        x->dbufs[HOOP_BUF_WORK] = h;
    }
    x->npool = (unsigned)r->stage_chunks;
    if (x->npool > HOOP_RING_STAGE_MAX)
        x->npool = HOOP_RING_STAGE_MAX;
    if (hoop_gpu_pipe_host(x->g, HOOP_GPU_HOST_STAGE, (size_t)x->npool * r->chunk_bytes, &h,
                           x->gpu_why, sizeof(x->gpu_why)))
        return gpu_fail(x, NULL);
    x->pool = h;
    memset(x->hs, 0, x->npool * sizeof(x->hs[0]));
    x->slots = hoop_gpu_pipe_slots(x->g);
    /* With GPUDirect RDMA the NIC reads the device buffers themselves. */
    x->gsend = r->gdr_send;
    normalize(x, &x->sstage, 1);
    return 0;
}

static char *pool_at(const struct run *x, int slot)
{
    return x->pool + (size_t)slot * x->r->chunk_bytes;
}

/* A free host chunk, or -1. reclaim: else one held only for a send not
 * yet staged (the latest such send: the last to need it), whose send
 * will copy its chunk from the device instead. */
static int pool_take(struct run *x, int reclaim)
{
    int victim = -1;
    for (unsigned i = 0; i < x->npool; i++) {
        if (!x->hs[i].use)
            return (int)i;
        if (reclaim && x->hs[i].use == HS_FWD &&
            (victim < 0 || x->hs[i].send_no > x->hs[victim].send_no))
            victim = (int)i;
    }
    if (victim >= 0)
        x->hs[victim].use = 0;
    return victim;
}

/* The host chunk that holds what send number m sends, or -1. */
static int pool_find(const struct run *x, unsigned long long m)
{
    for (unsigned i = 0; i < x->npool; i++)
        if ((x->hs[i].use & HS_FWD) && x->hs[i].send_no == m)
            return (int)i;
    return -1;
}

/* Device buffers: a received chunk is in its slot or host buffer. Queue
 * its reduction (into the device buffer and, where it is sent on, the
 * host copy) or its copy to the device, and an event after it. */
static int gpu_take(struct run *x, unsigned i, const struct hoop_step *s, void *landed)
{
    size_t at = x->meta[i].k.c * x->ce, n = x->meta[i].len;
    size_t off = (s->recv_off + at) * x->es;
    struct gwork *w = &x->fifo[x->ftail % GPU_FIFO];
    w->k = x->meta[i].k;
    w->len = n;
    w->slot = w->hslot = -1;
    if (s->recv_mode == HOOP_RECV_REDUCE) {
        /* The sum goes to the device and, where the next step sends it on
         * and a host chunk is free, to that chunk in the same pass. */
        char *hd = NULL;
        if (s->recv_fwd && !x->gsend && (w->hslot = pool_take(x, 0)) >= 0) {
            x->hs[w->hslot].use = HS_RECV | HS_FWD;
            x->hs[w->hslot].send_no = x->st[w->k.t + 1].send_first + w->k.c;
            hd = pool_at(x, w->hslot);
        }
        if (hoop_gpu_pipe_reduce(x->g, x->dbufs[s->recv_buf] + off, hd,
                                 x->dbufs[HOOP_BUF_INPUT] + (s->local_off + at) * x->es, landed, n,
                                 x->p->dtype, (hoop_op_t)x->p->op, s->avg_n, x->gpu_why,
                                 sizeof(x->gpu_why)))
            return gpu_fail(x, "queueing a reduction");
        w->slot = x->slot_of[i];
    } else {
        w->hslot = x->land_slot[i];
        if (hoop_gpu_pipe_copy(x->g, x->dbufs[s->recv_buf] + off, landed, n * x->es, x->gpu_why,
                               sizeof(x->gpu_why)))
            return gpu_fail(x, "queueing a copy to the device");
    }
    if (hoop_gpu_pipe_mark(x->g, (unsigned)(x->ftail % GPU_FIFO), x->gpu_why, sizeof(x->gpu_why)))
        return gpu_fail(x, NULL);
    x->ftail++;
    return 0;
}

/* Device buffers: received chunks whose GPU work is done, in order: free
 * the slot, count the chunk in. 1 when one was, 0 when none, -EIO. */
static int gpu_done(struct run *x)
{
    int moved = 0;
    while (x->fhead < x->ftail) {
        unsigned f = (unsigned)(x->fhead % GPU_FIFO);
        int rc = hoop_gpu_pipe_passed(x->g, f, x->gpu_why, sizeof(x->gpu_why));
        if (rc < 0)
            return gpu_fail(x, NULL);
        if (rc == 0)
            break;
        struct gwork *w = &x->fifo[f];
        if (w->slot >= 0)
            x->slot_free |= 1ull << w->slot;
        if (w->hslot >= 0)
            x->hs[w->hslot].use &= (unsigned char)~HS_RECV;
        x->rbytes_left -= w->len * x->es;
        x->rdone = w->k;
        x->rdone.c++;
        normalize(x, &x->rdone, 0);
        x->fhead++;
        moved = 1;
    }
    return moved;
}

/* Whether cursor k has gone past chunk c of step t. */
static int past(struct cursor k, int t, size_t c)
{
    return k.t > t || (k.t == t && k.c > c);
}

/* Device buffers: give each send, up to depth sends ahead, the host chunk
 * it leaves from: the one a received chunk to be sent on went to, else a
 * free one and an asynchronous copy of the chunk from the device (the
 * caller's data; or a received chunk whose host copy was given up or
 * never made), with an event the send waits for. With GPUDirect RDMA
 * sends leave from the device, and nothing is staged. 1 when one was
 * staged, 0 when none, -EIO. */
static int gpu_stage(struct run *x)
{
    const unsigned D = x->depth;
    int moved = 0;
    while (x->gstage - x->stail < D && x->sstage.t < x->nsteps) {
        const struct hoop_step *s = &x->st[x->sstage.t];
        /* What a step sends on: once the GPU work of its chunk is queued
         * (a copy from the device then comes after it on the stream). */
        if (s->send_dep && !past(x->rtake, x->sstage.t - 1, x->sstage.c))
            break;
        unsigned j = (unsigned)(x->gstage % D);
        int slot = -1;
        x->staged_copy[j] = 0;
        if (!x->gsend) {
            slot = s->send_dep ? pool_find(x, x->gstage) : -1;
            if (slot >= 0) {
                x->hs[slot].use = (unsigned char)((x->hs[slot].use & ~HS_FWD) | HS_SEND);
            } else {
                if ((slot = pool_take(x, 1)) < 0)
                    break;
                size_t off = (s->send_off + x->sstage.c * x->ce) * x->es;
                size_t len = chunk_len(x, s->send_len, x->sstage.c) * x->es;
                if (hoop_gpu_pipe_copy(x->g, pool_at(x, slot), x->dbufs[s->send_buf] + off, len,
                                       x->gpu_why, sizeof(x->gpu_why)))
                    return gpu_fail(x, "queueing a copy to the host");
                if (hoop_gpu_pipe_mark(x->g, GPU_FIFO + j, x->gpu_why, sizeof(x->gpu_why)))
                    return gpu_fail(x, NULL);
                x->hs[slot].use = HS_SEND;
                x->staged_copy[j] = 1;
                if (s->send_dep)
                    x->r->gpu_restaged++;
            }
        }
        x->stage_slot[x->gstage % (2 * D)] = (short)slot;
        x->gstage++;
        x->sstage.c++;
        normalize(x, &x->sstage, 1);
        moved = 1;
    }
    return moved;
}

/* Device buffers: whether the next send (number stail) may go: staged,
 * and its copy to the host done. 1, 0, or -EIO. */
static int gpu_send_ready(struct run *x)
{
    if (x->gstage <= x->stail)
        return 0;
    unsigned j = (unsigned)(x->stail % x->depth);
    if (!x->staged_copy[j])
        return 1;
    int rc = hoop_gpu_pipe_passed(x->g, GPU_FIFO + j, x->gpu_why, sizeof(x->gpu_why));
    return rc < 0 ? gpu_fail(x, NULL) : rc;
}

/* Received chunks, in order: reduce into place, free the slot. Returns 1
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
            int rc = gpu_take(x, i, s, q->buf);
            if (rc < 0)
                return rc;
            x->rtake = x->meta[i].k;
            x->rtake.c++;
            normalize(x, &x->rtake, 0);
            x->rhead++;
            moved = 1;
            continue;
        }
        if (s->recv_mode == HOOP_RECV_REDUCE) {
            size_t at = x->meta[i].k.c * x->ce;
            hoop_reduce_kernel(x->bufs[s->recv_buf] + (s->recv_off + at) * x->es,
                               x->bufs[HOOP_BUF_INPUT] + (s->local_off + at) * x->es, q->buf,
                               x->meta[i].len, x->p->dtype, (hoop_op_t)x->p->op, s->avg_n);
            x->slot_free |= 1ull << x->slot_of[i];
        }
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
            int slot = x->stage_slot[x->shead % (2 * x->depth)];
            if (slot >= 0)
                x->hs[slot].use &= (unsigned char)~HS_SEND;
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
        x->meta[i].k = x->rpost;
        x->meta[i].len = chunk_len(x, s->recv_len, x->rpost.c);
        if (s->recv_mode == HOOP_RECV_REDUCE) {
            if (!x->slot_free)
                break;
            int slot = __builtin_ctzll(x->slot_free);
            x->slot_free &= ~(1ull << slot);
            x->slot_of[i] = (unsigned char)slot;
            q->buf = x->slots + (size_t)slot * r->chunk_bytes;
        } else if (x->p->device) {
            /* Into a host chunk; a copy places it on the device. */
            int slot = pool_take(x, 1);
            if (slot < 0)
                break;
            int fwd = s->recv_fwd && !x->gsend; /* sent on from here */
            x->hs[slot].use = (unsigned char)(HS_RECV | (fwd ? HS_FWD : 0));
            x->hs[slot].send_no = fwd ? x->st[x->rpost.t + 1].send_first + x->rpost.c : 0;
            x->land_slot[i] = (short)slot;
            q->buf = pool_at(x, slot);
        } else {
            q->buf = x->bufs[s->recv_buf] + (s->recv_off + at) * x->es;
        }
        q->len = x->meta[i].len * x->es;
        hoop_frame_expect(r, &r->rreq[i], r->prev, (uint32_t)s->recv_ord, (uint32_t)x->rpost.c);
        if (s->recv_mode == HOOP_RECV_REDUCE) {
            q->region = x->slots;
            q->region_len = (size_t)D * r->chunk_bytes;
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
            int ready = gpu_send_ready(x);
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
        q->buf = slot >= 0 ? pool_at(x, slot)
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
        if ((rc = gpu_done(x)) < 0)
            return rc;
        moved |= rc;
        if ((rc = gpu_stage(x)) < 0)
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

/* After the GPU pipe failed on this rank: cancel the transport (so that
 * the neighbours see this rank leave at once), let the queued work end,
 * say what failed. */
static hoop_status_t run_gpu_failed(struct run *x)
{
    struct hoop_ring *r = x->r;
    char what[160], why[320];
    hoop_frame_what(&r->cur, what, sizeof(what));
    hoop_ring_cancel(r);
    if (x->g)
        hoop_gpu_pipe_drain(x->g, why, sizeof(why));
    r->fail_err = -EIO;
    r->fail_peer = -1;
    return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers failed on this rank's GPU: "
                      "%s%s%s", r->rank, what, x->gpu_what ? x->gpu_what : "",
                      x->gpu_what ? ": " : "", x->gpu_why);
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
    if (p->device && device_init(&x))
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
