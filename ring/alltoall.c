/* alltoall.c - pairwise exchange over direct connections: every rank sends
 * block j to rank j and receives block j from rank j, all at once; each
 * byte crosses the network once, the least any alltoall can do. */
#include "ring/ring.h"
#include "common/clock.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

hoop_status_t hoop_ring_alltoall(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                 size_t count, hoop_dtype_t dtype, double timeout_s)
{
    const int n = r->size, me = r->rank;
    const size_t bytes = count * hoop_dtype_size(dtype);
    uint64_t seq = hoop_frame_begin(r, HOOP_COLL_ALLTOALL, count, dtype, -1, -1);
    uint64_t deadline = hoop_deadline_after(timeout_s);
    hoop_status_t st;
    int err = 0, bad_peer = -1, dir = 0;
    char what[96];
    snprintf(what, sizeof(what), "alltoall #%llu (%zu x %s per rank)", (unsigned long long)seq,
             count, hoop_dtype_str(dtype));
    /* Off the ring: the announcements on the ring let every rank compare
     * its collective with its predecessor's. */
    if ((err = hoop_frame_announce(r, 1, 1)))
        goto fail;
    int *list = r->p2p_list, np = 0;
    for (int q = 0; q < n; q++)
        if (q != me)
            list[np++] = q;
    if ((st = hoop_ring_peers(r, HOOP_PEERS_ALL, list, np, deadline))) {
        hoop_ring_cancel(r);
        if (r->fail_err)
            return st; /* the agreement's own sentence */
        r->fail_err = -ENOTCONN;
        r->fail_peer = r->prev;
        return hoop_error(st, "rank %d: alltoall #%llu: connecting to the other ranks: %s", me,
                          (unsigned long long)seq, hoop_last_error());
    }
    memcpy((char *)recvbuf + (size_t)me * bytes, (const char *)sendbuf + (size_t)me * bytes, bytes);
    for (int s = 1; s < n && !err; s++) {
        int to = (me + s) % n, from = (me - s + n) % n;
        struct hoop_tp_req *sq = &r->p2p_sreq[to].tp, *rq = &r->p2p_rreq[from].tp;
        sq->buf = (char *)sendbuf + (size_t)to * bytes;
        sq->len = bytes;
        hoop_frame_send(r, &r->p2p_sreq[to], 0, 0);
        rq->buf = (char *)recvbuf + (size_t)from * bytes;
        rq->len = bytes;
        hoop_frame_expect(r, &r->p2p_rreq[from], from, 0, 0);
        if ((err = r->ops->irecv(r->peer_rx[from], rq))) {
            bad_peer = from;
            dir = 1;
        } else if ((err = r->ops->isend(r->peer_tx[to], sq))) {
            bad_peer = to;
        }
    }
    int pending = !err;
    while (pending && !err) {
        int ann = hoop_frame_announced(r);
        if (ann < 0) {
            err = ann;
            bad_peer = r->prev;
            dir = 1;
            break;
        }
        pending = !ann;
        for (int p = 0; p < n && !err; p++) {
            if (p == me)
                continue;
            if (r->p2p_sreq[p].tp.state < 0) {
                err = r->p2p_sreq[p].tp.state;
                bad_peer = p;
                dir = 0;
            } else if (r->p2p_rreq[p].tp.state < 0) {
                err = r->p2p_rreq[p].tp.state;
                bad_peer = p;
                dir = 1;
            }
            pending |= r->p2p_sreq[p].tp.state == HOOP_REQ_PENDING ||
                       r->p2p_rreq[p].tp.state == HOOP_REQ_PENDING;
        }
        if (!pending || err)
            break;
        int rc = hoop_ring_progress(r, deadline);
        if (rc < 0)
            err = rc;
        else if (rc == 0 && hoop_now_ns() >= deadline)
            err = -ETIMEDOUT;
    }
    if (!err)
        return HOOP_OK;
fail:;
    /* Whom it still waits for, before the cancel ends every request. */
    int waiting = -1;
    for (int s = 1; s < n && waiting < 0 && err == -ETIMEDOUT; s++) {
        int p = (me - s + n) % n;
        if (r->p2p_rreq[p].tp.state == HOOP_REQ_PENDING)
            waiting = p;
    }
    if (waiting < 0)
        waiting = r->prev; /* its announcement, or nothing sent yet */
    hoop_ring_cancel(r);
    r->fail_err = err;
    r->fail_peer = bad_peer >= 0 ? bad_peer : err == -ETIMEDOUT ? waiting : r->prev;
    if ((st = hoop_frame_status(r, err, what)))
        return st;
    if (err == -ETIMEDOUT) {
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: alltoall #%llu (%zu x %s per rank) timed out after %.1f s: "
                          "still waiting for data from rank %d (%s)", me, (unsigned long long)seq,
                          count, hoop_dtype_str(dtype), timeout_s, waiting,
                          r->peers[waiting].host);
    }
    if (bad_peer < 0) /* the wait itself failed, not a request */
        return hoop_error(hoop_status_from_errno(err),
                          "rank %d: alltoall #%llu (%zu x %s per rank): waiting for the other "
                          "ranks failed: %s", me, (unsigned long long)seq, count,
                          hoop_dtype_str(dtype), hoop_ring_errno_str(r, err));
    return hoop_error(hoop_status_from_errno(err),
                      "rank %d: alltoall #%llu (%zu x %s per rank): %s rank %d (%s) failed: %s", me,
                      (unsigned long long)seq, count, hoop_dtype_str(dtype),
                      dir ? "receive from" : "send to", bad_peer, r->peers[bad_peer].host,
                      hoop_ring_errno_str(r, err));
}
