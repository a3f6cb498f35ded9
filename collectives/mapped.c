/* mapped.c - the allreduce in place in memory every rank of the host maps
 * (mem.h).
 *
 * The call opens with the ring's announcements (frame.h), as every
 * collective's does, so that a neighbour in another call is a mismatch at
 * once. Each rank then announces where its buffers lie in its control page
 * and waits until every rank has announced the same call. Every rank reads
 * every announcement, so all decide alike: a disagreement (count, dtype, op)
 * fails the call on every rank; a rank whose buffers are not all in shared
 * memory sends every rank to the ring instead. Otherwise rank k reduces
 * segment k of the buffer from every rank's sendbuf, in rank order, a block
 * at a time through a buffer in its cache, and writes the block into every
 * rank's recvbuf: each input byte is read once, each output byte written
 * once, and no rank's other segments are touched, so the buffers may be in
 * place on any rank. Every rank then says it is done and returns once all
 * are, so that no buffer is read or written after its rank returned. Every
 * wait watches the deadline, the communicator's abort and its root, and the
 * other ranks' processes. */
#include "collectives/comm.h"
#include "collectives/mem.h"
#include "common/clock.h"
#include "common/relax.h"
#include "common/status.h"
#include "reduce/reduce.h"
#include "ring/frame.h"
#include "ring/pipeline.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

/* Spin (then yield) this long before each look at the watched descriptors
 * sleeps a little: a peer that is in the call is seen at once. */
#define MAPPED_SPIN_NS 2000000ull
/* The reduction's block: the sum of every rank's piece stays in L1/L2. */
#define MAPPED_BLOCK 16384

static struct hoop_mem_ctl *ctl_of(const struct hoop_mem_region *g, int k)
{
    return (struct hoop_mem_ctl *)g->peer[k];
}

/* Whether anything watched asks this wait to end: 0 (go on), -EINTR (an
 * abort, or the root's word), -EPIPE (rank *who's process ended). */
static int watched(hoop_comm_t *c, int k, int *who, int sleep_ms)
{
    struct pollfd p[3];
    int np = 0;
    if (c->abort_fd >= 0)
        p[np++] = (struct pollfd){.fd = c->abort_fd, .events = POLLIN};
    if (c->ctl_epfd >= 0)
        p[np++] = (struct pollfd){.fd = c->ctl_epfd, .events = POLLIN};
    if (c->ctl_pidfd && c->ctl_pidfd[k] >= 0)
        p[np++] = (struct pollfd){.fd = c->ctl_pidfd[k], .events = POLLIN};
    if (poll(p, (nfds_t)np, sleep_ms) <= 0)
        return 0;
    if (c->ctl_pidfd && c->ctl_pidfd[k] >= 0 && (p[np - 1].revents & POLLIN)) {
        *who = k;
        return -EPIPE;
    }
    if (atomic_load_explicit(&c->aborted, memory_order_acquire))
        return -EINTR;
    if (c->ctl_epfd >= 0 && (p[c->abort_fd >= 0].revents & POLLIN) && c->ring.on_wake &&
        c->ring.on_wake(c->ring.wake_ctx) < 0)
        return -EINTR;
    return 0;
}

/* Wait until every other rank's ready (done: 1) word holds seq. 0, or
 * -ETIMEDOUT, -EINTR or -EPIPE with *who the rank waited for. */
static int wait_all(hoop_comm_t *c, const struct hoop_mem_region *g, int done, uint64_t seq,
                    uint64_t deadline, int *who)
{
    uint64_t spin_until = 0;
    for (int k = 0, looks = 0;; looks++) {
        while (k < c->size) {
            const struct hoop_mem_ctl *p = ctl_of(g, k);
            if (k != c->rank &&
                atomic_load_explicit(done ? &p->done : &p->ready, memory_order_acquire) != seq)
                break;
            k++;
        }
        if (k == c->size)
            return 0;
        *who = k;
        /* Pause for the first looks (the peer is in the call, a cache
         * line away); then give up the CPU between looks (a peer may need
         * this core), with the clock and the watch every 16th. */
        if (looks < 64) {
            hoop_cpu_relax();
            continue;
        }
        if (looks % 16) {
            sched_yield();
            continue;
        }
        uint64_t now = hoop_now_ns();
        if (!spin_until)
            spin_until = now + MAPPED_SPIN_NS;
        if (now >= deadline)
            return -ETIMEDOUT;
        int rc = watched(c, k, who, now < spin_until ? 0 : 1);
        if (rc)
            return rc;
    }
}

static hoop_status_t wait_failed(hoop_comm_t *c, int rc, int who, uint64_t seq, int done)
{
    struct hoop_ring *r = &c->ring;
    r->fail_err = rc;
    r->fail_peer = who;
    const struct hoop_peer *p = &c->bs.peers[who];
    const char *what = done ? "finish its part" : "begin it";
    if (rc == -EPIPE)
        return hoop_error(HOOP_ERR_PEER,
                          "rank %d: allreduce #%llu in shared memory: rank %d "
                          "(%s, pid %u) ended before it could %s",
                          c->rank, (unsigned long long)seq, who, p->host, p->pid, what);
    if (rc == -ETIMEDOUT)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: allreduce #%llu in shared memory timed out "
                          "after %.1f s waiting for rank %d (%s, pid %u) to %s (is that rank "
                          "stopped, or slower than HOOP_TIMEOUT allows?)",
                          c->rank, (unsigned long long)seq, c->timeout_s, who, p->host, p->pid,
                          what);
    return hoop_error(HOOP_ERR_ABORTED,
                      "rank %d: allreduce #%llu in shared memory: woken while "
                      "waiting for rank %d to %s",
                      c->rank, (unsigned long long)seq, who, what);
}

/* The ring's announcements failed (err): cancelled, and said. */
static hoop_status_t announce_failed(hoop_comm_t *c, int err)
{
    struct hoop_ring *r = &c->ring;
    char what[160];
    hoop_frame_what(&r->cur, what, sizeof(what));
    hoop_ring_cancel(r);
    r->fail_err = err;
    r->fail_peer = r->prev;
    hoop_status_t st = hoop_frame_status(r, err, what);
    if (st)
        return st;
    const struct hoop_peer *p = &c->bs.peers[r->prev];
    if (err == -ETIMEDOUT)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: %s in shared memory timed out after %.1f s waiting for rank "
                          "%d (%s, pid %u) to begin it (is that rank stopped, or slower than "
                          "HOOP_TIMEOUT allows?)",
                          c->rank, what, c->timeout_s, r->prev, p->host, p->pid);
    return hoop_error(hoop_status_from_errno(err), "rank %d: %s in shared memory: rank %d: %s",
                      c->rank, what, r->prev, hoop_ring_errno_str(r, err));
}

/* Rank k's buffer as its announcement names it: its start in this rank's
 * mapping of k's allocation, or NULL when no shared allocation of k holds
 * bytes bytes there. */
static uint8_t *peer_buf(const hoop_comm_t *c, int k, uint64_t id, uint64_t off, size_t bytes)
{
    for (const struct hoop_mem_region *g = c->mem->regions; g; g = g->next)
        if (g->id == id && g->shared)
            return off <= g->peer_bytes[k] && bytes <= g->peer_bytes[k] - off
                       ? g->peer[k] + HOOP_MEM_CTL_BYTES + off
                       : NULL;
    return NULL;
}

/* Segment `me` of every rank's output: the reduction in rank order of every
 * rank's input, a block at a time. */
static void reduce_mine(int n, int me, uint8_t *const *in, uint8_t *const *out, size_t count,
                        hoop_dtype_t dtype, hoop_op_t op)
{
    _Alignas(64) uint8_t tmp[MAPPED_BLOCK];
    size_t es = hoop_dtype_size(dtype), per = MAPPED_BLOCK / es;
    size_t off = hoop_ring_seg_off(count, n, me), len = hoop_ring_seg_len(count, n, me);
    int avg_n = op == HOOP_AVG ? n : 0;
    for (size_t b = 0; b < len; b += per) {
        size_t m = len - b < per ? len - b : per, at = (off + b) * es;
        hoop_reduce_kernel(tmp, in[0] + at, in[1] + at, m, dtype, op, n == 2 ? avg_n : 0);
        for (int k = 2; k < n; k++)
            hoop_reduce_kernel(tmp, tmp, in[k] + at, m, dtype, op, k == n - 1 ? avg_n : 0);
        for (int k = 0; k < n; k++)
            memcpy(out[k] + at, tmp, m * es);
    }
}

int hoop_mem_allreduce(hoop_comm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                       hoop_dtype_t dtype, hoop_op_t op, hoop_status_t *st)
{
    struct hoop_mem_region *cg = c->size > 1 ? hoop_mem_ctl_region(c) : NULL;
    if (!cg || c->ring.on_gpu)
        return 0;
    const int n = c->size;
    size_t bytes = count * hoop_dtype_size(dtype);
    uint64_t seq = ++c->mem->seq;
    uint64_t deadline = hoop_deadline_after(c->timeout_s);
    struct hoop_ring *r = &c->ring;
    hoop_frame_begin(r, HOOP_COLL_ALLREDUCE, count, dtype, op, -1);
    /* The ring's announcements first, as every collective makes them: a
     * neighbour in another call (a count that puts it at or below
     * HOOP_SMALL_BYTES, another collective) is a mismatch at once, told
     * as on the ring, not a wait on a control page to the deadline. */
    uint64_t adl = deadline;
    int err = hoop_frame_announce(r, 1, 1);
    if (!err)
        err = hoop_frame_announce_wait(r, &adl, c->timeout_s);
    if (err) {
        *st = announce_failed(c, err);
        return 1;
    }
    uint64_t soff = 0, roff = 0;
    struct hoop_mem_region *sg = hoop_mem_find(c, sendbuf, bytes, &soff);
    struct hoop_mem_region *rg = hoop_mem_find(c, recvbuf, bytes, &roff);
    struct hoop_mem_ctl *mine = ctl_of(cg, c->rank);
    mine->count = count;
    mine->dtype = (uint32_t)dtype;
    mine->op = (uint32_t)op;
    mine->mapped = sg && rg;
    mine->send_id = sg ? sg->id : 0;
    mine->send_off = soff;
    mine->recv_id = rg ? rg->id : 0;
    mine->recv_off = roff;
    atomic_store_explicit(&mine->ready, seq, memory_order_release);
    int who = -1, rc = wait_all(c, cg, 0, seq, deadline, &who);
    if (rc) {
        *st = wait_failed(c, rc, who, seq, 0);
        return 1;
    }
    /* Every rank reads the same announcements: a disagreement fails the
     * call everywhere, a rank outside shared memory sends all to the ring. */
    int all_mapped = 1;
    for (int k = 0; k < n; k++) {
        const struct hoop_mem_ctl *p = ctl_of(cg, k);
        if (p->count != count || p->dtype != (uint32_t)dtype || p->op != (uint32_t)op) {
            *st = hoop_error(HOOP_ERR_MISMATCH,
                             "rank %d: allreduce #%llu in shared memory: rank %d calls it with "
                             "%llu elements of %s, op %s, but this rank with %zu of %s, op %s",
                             c->rank, (unsigned long long)seq, k, (unsigned long long)p->count,
                             hoop_dtype_str((hoop_dtype_t)p->dtype), hoop_op_str((hoop_op_t)p->op),
                             count, hoop_dtype_str(dtype), hoop_op_str(op));
            c->ring.fail_peer = k;
            return 1;
        }
        all_mapped &= p->mapped == 1;
    }
    if (!all_mapped)
        return 0;
    uint8_t **in = c->mem->bufs, **out = c->mem->bufs + n;
    for (int k = 0; k < n; k++) {
        const struct hoop_mem_ctl *p = ctl_of(cg, k);
        /* Each word read once: the peer could change it meanwhile. */
        uint64_t sid = p->send_id, so = p->send_off, rid = p->recv_id, ro = p->recv_off;
        in[k] = peer_buf(c, k, sid, so, bytes);
        out[k] = peer_buf(c, k, rid, ro, bytes);
        if (!in[k] || !out[k]) {
            c->ring.fail_peer = k;
            *st = hoop_error(HOOP_ERR_PEER,
                             "rank %d: allreduce #%llu in shared memory: rank %d "
                             "announced a buffer outside the memory it shares (the control page "
                             "is corrupt, or that rank lies)",
                             c->rank, (unsigned long long)seq, k);
            return 1;
        }
    }
    reduce_mine(n, c->rank, in, out, count, dtype, op);
    atomic_store_explicit(&mine->done, seq, memory_order_release);
    if ((rc = wait_all(c, cg, 1, seq, deadline, &who))) {
        *st = wait_failed(c, rc, who, seq, 1);
        return 1;
    }
    c->mem->mapped++;
    *st = HOOP_OK;
    return 1;
}
