/* run.h - one hoop_ring_run's state and its cursors, shared by the step
 * table's host half (pipeline.c) and its device half (pipeline_device.c);
 * private to ring/. */
#ifndef HOOP_RING_RUN_H
#define HOOP_RING_RUN_H

#include "ring/pipeline.h"
#include "gpu/gpu.h"

#include <stddef.h>
#include <stdint.h>

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
enum {
    HS_RECV = 1, /* a receive lands in it, or GPU work reads or writes it */
    HS_FWD = 2,  /* it holds what send number send_no will send */
    HS_SEND = 4  /* a staged or posted send leaves from it */
};
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
    /* Device buffers: consecutive chunks of a step's span that share one
     * copy or kernel on the GPU (1 on host buffers). Where the run's
     * chunks are smaller than the ring's (allreduce.c's shared-memory
     * rule), as many as fit in one of the ring's chunks: each GPU
     * operation covers as many bytes as without the rule. A group lands
     * in one slot or host chunk and leaves from one host chunk. */
    size_t group;
    char *bufs[4];      /* what the transport moves from and into */
    size_t extent[4];   /* elements of each buffer the schedule reaches */
    uint8_t *slots;     /* the receive slots of reducing receives */
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
    int gsend; /* GPUDirect RDMA: sends leave from dbufs */
    char *pool;
    unsigned npool;
    unsigned long long fhead, ftail; /* received chunks with GPU work queued */
    struct cursor sstage;            /* the next send to stage */
    struct cursor rtake;             /* the next receive whose GPU work is not queued yet */
    unsigned long long gstage;       /* sends staged so far (those needing no copy too) */
    int rgroup;                      /* the slot or host chunk the posted group lands in */
    int sgroup;                      /* the host chunk the staged group leaves from */
    int gpu_failed;
    const char *gpu_what; /* what failed on the GPU (or NULL), and the pipe's sentence */
    char gpu_why[320];
    /* Per receive slot (not cleared: written when a receive is posted). */
    struct rmeta meta[HOOP_RING_DEPTH_MAX];
    unsigned char slot_of[HOOP_RING_DEPTH_MAX];
    struct gwork fifo[GPU_FIFO];
    unsigned char staged_copy[HOOP_RING_DEPTH_MAX]; /* per send number % depth */
    short stage_slot[2 * HOOP_RING_DEPTH_MAX];      /* per send number % 2 depth: its host chunk */
    unsigned char stage_end[2 * HOOP_RING_DEPTH_MAX]; /* ... and whether it ends its group */
    short land_slot[HOOP_RING_DEPTH_MAX];           /* per receive request: its host chunk */
    struct hslot hs[HOOP_RING_STAGE_MAX];           /* device buffers: cleared by run_device_init */
};

static inline size_t span_chunks(const struct run *x, size_t len)
{
    return (len + x->ce - 1) / x->ce;
}

static inline size_t send_chunks(const struct run *x, int t)
{
    return x->st[t].send_buf == HOOP_BUF_NONE ? 0 : span_chunks(x, x->st[t].send_len);
}

static inline size_t recv_chunks(const struct run *x, int t)
{
    return x->st[t].recv_mode == HOOP_RECV_NONE ? 0 : span_chunks(x, x->st[t].recv_len);
}

/* Move past the end of a step (and over steps with nothing to move). */
static inline void normalize(const struct run *x, struct cursor *k, int sending)
{
    while (k->t < x->nsteps && k->c >= (sending ? send_chunks(x, k->t) : recv_chunks(x, k->t))) {
        k->t++;
        k->c = 0;
    }
}

/* Element offset within the span, and length, of chunk c of a span. */
static inline size_t chunk_len(const struct run *x, size_t span_len, size_t c)
{
    size_t left = span_len - c * x->ce;
    return left < x->ce ? left : x->ce;
}

/* Device buffers: the first chunk of chunk c's group, and the group's
 * elements in a span of span_len. */
static inline size_t group_first(const struct run *x, size_t c)
{
    return c - c % x->group;
}

static inline size_t group_len(const struct run *x, size_t span_len, size_t first)
{
    size_t left = span_len - first * x->ce, whole = x->group * x->ce;
    return left < whole ? left : whole;
}

/* Whether chunk c of a span of span_len is its group's last. */
static inline int group_ends(const struct run *x, size_t span_len, size_t c)
{
    return (c + 1) % x->group == 0 || (c + 1) * x->ce >= span_len;
}

/* Device buffers: host chunk slot of the pipe's pool (every chunk's send
 * and receive asks). */
static inline char *run_pool_at(const struct run *x, int slot)
{
    return x->pool + (size_t)slot * x->r->chunk_bytes;
}

/* Whether cursor k has gone past chunk c of step t. */
static inline int past(struct cursor k, int t, size_t c)
{
    return k.t > t || (k.t == t && k.c > c);
}

/* pipeline_device.c: device buffers through the pipe's pinned host chunks.
 * Each returns as the host half's steps do (1 when something moved, 0 when
 * nothing did, -EIO once the GPU pipe failed, its sentence kept in x). */
int run_device_init(struct run *x);
/* A free host chunk (reclaim: a chunk held only for a send may be given
 * up), or -1. */
int run_pool_take(struct run *x, int reclaim);
int run_gpu_take(struct run *x, unsigned i, const struct hoop_step *s, void *landed);
int run_gpu_done(struct run *x);
int run_gpu_stage(struct run *x);
int run_gpu_send_ready(struct run *x);
/* After the GPU pipe failed: cancel, drain, the sentence. */
hoop_status_t run_gpu_failed(struct run *x);

#endif
