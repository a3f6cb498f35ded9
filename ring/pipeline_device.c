/* pipeline_device.c - the step table's device half: a run on device
 * buffers moves its chunks through the GPU pipe's pinned host chunks, with
 * the copies and reductions queued on the GPU and their events polled by
 * the host half's loop (pipeline.c, pipeline.h). */
#include "ring/run.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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
int run_device_init(struct run *x)
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
    x->group = r->chunk_bytes / (x->ce * x->es);
    if (!x->group)
        x->group = 1;
    /* With GPUDirect RDMA the NIC reads the device buffers themselves. */
    x->gsend = r->gdr_send;
    normalize(x, &x->sstage, 1);
    return 0;
}

/* A free host chunk, or -1. reclaim: else one held only for a send not
 * yet staged (the latest such send: the last to need it), whose send
 * will copy its chunk from the device instead. */
int run_pool_take(struct run *x, int reclaim)
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

/* Device buffers: a received chunk is in its slot or host buffer. When it
 * ends its group, queue the group's reduction (into the device buffer
 * and, where it is sent on, the host copy) or its copy to the device, and
 * an event after it: 1. A chunk before the end of its group waits in the
 * group's slot or host chunk: 0. */
int run_gpu_take(struct run *x, unsigned i, const struct hoop_step *s, void *landed)
{
    size_t c = x->meta[i].k.c, first = group_first(x, c);
    if (!group_ends(x, s->recv_len, c))
        return 0;
    landed = (char *)landed - (c - first) * x->ce * x->es; /* the group's start */
    size_t at = first * x->ce, n = group_len(x, s->recv_len, first);
    size_t off = (s->recv_off + at) * x->es;
    struct gwork *w = &x->fifo[x->ftail % GPU_FIFO];
    w->k = x->meta[i].k;
    w->len = n;
    w->slot = w->hslot = -1;
    if (s->recv_mode == HOOP_RECV_REDUCE) {
        /* The sum goes to the device and, where the next step sends it on
         * and a host chunk is free, to that chunk in the same pass. */
        char *hd = NULL;
        if (s->recv_fwd && !x->gsend && (w->hslot = run_pool_take(x, 0)) >= 0) {
            x->hs[w->hslot].use = HS_RECV | HS_FWD;
            x->hs[w->hslot].send_no = x->st[w->k.t + 1].send_first + first;
            hd = run_pool_at(x, w->hslot);
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
    x->r->gpu_ops++;
    return 1;
}

/* Device buffers: received chunks whose GPU work is done, in order: free
 * the slot, count the chunk in. 1 when one was, 0 when none, -EIO. */
int run_gpu_done(struct run *x)
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

/* Device buffers: give each send, up to depth sends ahead, the host chunk
 * it leaves from. A group's first send finds one for the whole group: the
 * one a received group to be sent on went to, else a free one and an
 * asynchronous copy of the group from the device (the caller's data; or
 * a received group whose host copy was given up or never made), with an
 * event the send waits for; the group's other sends leave from the same
 * chunk, after it. With GPUDirect RDMA sends leave from the device, and
 * nothing is staged. 1 when one was staged, 0 when none, -EIO. */
int run_gpu_stage(struct run *x)
{
    const unsigned D = x->depth;
    int moved = 0;
    while (x->gstage - x->stail < D && x->sstage.t < x->nsteps) {
        const struct hoop_step *s = &x->st[x->sstage.t];
        size_t c = x->sstage.c, first = group_first(x, c);
        size_t glen = group_len(x, s->send_len, first);
        /* What a step sends on: once the GPU work of its group is queued
         * (a copy from the device then comes after it on the stream). */
        if (s->send_dep && !past(x->rtake, x->sstage.t - 1, first + span_chunks(x, glen) - 1))
            break;
        unsigned j = (unsigned)(x->gstage % D);
        int slot = -1;
        x->staged_copy[j] = 0;
        if (!x->gsend && c != first) {
            slot = x->sgroup;
        } else if (!x->gsend) {
            slot = s->send_dep ? pool_find(x, x->gstage) : -1;
            if (slot >= 0) {
                x->hs[slot].use = (unsigned char)((x->hs[slot].use & ~HS_FWD) | HS_SEND);
            } else {
                if ((slot = run_pool_take(x, 1)) < 0)
                    break;
                size_t off = (s->send_off + first * x->ce) * x->es;
                if (hoop_gpu_pipe_copy(x->g, run_pool_at(x, slot), x->dbufs[s->send_buf] + off,
                                       glen * x->es, x->gpu_why, sizeof(x->gpu_why)))
                    return gpu_fail(x, "queueing a copy to the host");
                if (hoop_gpu_pipe_mark(x->g, GPU_FIFO + j, x->gpu_why, sizeof(x->gpu_why)))
                    return gpu_fail(x, NULL);
                x->hs[slot].use = HS_SEND;
                x->staged_copy[j] = 1;
                x->r->gpu_ops++;
                if (s->send_dep)
                    x->r->gpu_restaged++;
            }
            x->sgroup = slot;
        }
        x->stage_slot[x->gstage % (2 * D)] = (short)slot;
        x->stage_end[x->gstage % (2 * D)] = (unsigned char)group_ends(x, s->send_len, c);
        x->gstage++;
        x->sstage.c++;
        normalize(x, &x->sstage, 1);
        moved = 1;
    }
    return moved;
}

/* Device buffers: whether the next send (number stail) may go: staged,
 * and its copy to the host done. 1, 0, or -EIO. */
int run_gpu_send_ready(struct run *x)
{
    if (x->gstage <= x->stail)
        return 0;
    unsigned j = (unsigned)(x->stail % x->depth);
    if (!x->staged_copy[j])
        return 1;
    int rc = hoop_gpu_pipe_passed(x->g, GPU_FIFO + j, x->gpu_why, sizeof(x->gpu_why));
    return rc < 0 ? gpu_fail(x, NULL) : rc;
}

/* After the GPU pipe failed on this rank: cancel the transport (so that
 * the neighbours see this rank leave at once), let the queued work end,
 * say what failed. */
hoop_status_t run_gpu_failed(struct run *x)
{
    struct hoop_ring *r = x->r;
    char what[160], why[320];
    hoop_frame_what(&r->cur, what, sizeof(what));
    hoop_ring_cancel(r);
    if (x->g)
        hoop_gpu_pipe_drain(x->g, why, sizeof(why));
    r->fail_err = -EIO;
    r->fail_peer = -1;
    return hoop_error(HOOP_ERR_SYSTEM,
                      "rank %d: %s on device buffers failed on this rank's GPU: "
                      "%s%s%s",
                      r->rank, what, x->gpu_what ? x->gpu_what : "", x->gpu_what ? ": " : "",
                      x->gpu_why);
}
