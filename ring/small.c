/* small.c - allreduce for small messages: recursive doubling.
 *
 * The ring needs 2(N-1) hops one after the other; for a few KiB the hops'
 * latency is all there is. Recursive doubling needs log2(P) exchanges (P the
 * largest power of two <= N): in round k, rank r swaps its partial result
 * with rank r ^ 2^k and both combine them. The N-P extra ranks first hand
 * their input to rank r-P and get the result back at the end. Every combine
 * puts the lower rank's data first, so both partners compute the same bits
 * (min/max of signed zeros or NaNs would otherwise depend on the order), and
 * every rank ends with the same result. */
#include "ring/ring.h"
#include "common/clock.h"
#include "common/status.h"
#include "ring/reduce.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The connections to a partner: the ring's own when the partner is the
 * ring neighbour in both directions (N = 2), else the direct ones. */
static void *small_tx(struct hoop_ring *r, int to)
{
    return r->size == 2 ? r->tx : r->peer_tx[to];
}

static void *small_rx(struct hoop_ring *r, int from)
{
    return r->size == 2 ? r->rx : r->peer_rx[from];
}

/* Send `sb` to `to` and receive `rb` from `from` (either may be -1). */
static int small_exchange(struct hoop_ring *r, int round, int to, const void *sb, int from,
                          void *rb, size_t bytes, uint64_t deadline, int *bad_peer)
{
    struct hoop_tp_req *sq = &r->sreq[0].tp, *rq = &r->rreq[0].tp;
    sq->state = rq->state = 0;
    int rc;
    if (from >= 0) {
        rq->buf = rb;
        rq->len = bytes;
        hoop_frame_expect(r, &r->rreq[0], from, (uint32_t)round, 0);
        if ((rc = r->ops->irecv(small_rx(r, from), rq))) {
            *bad_peer = from;
            return rc;
        }
    }
    if (to >= 0) {
        sq->buf = (void *)sb;
        sq->len = bytes;
        hoop_frame_send(r, &r->sreq[0], (uint32_t)round, 0);
        if ((rc = r->ops->isend(small_tx(r, to), sq))) {
            *bad_peer = to;
            return rc;
        }
    }
    for (;;) {
        if (rq->state < 0) {
            *bad_peer = from;
            return rq->state;
        }
        if (sq->state < 0) {
            *bad_peer = to;
            return sq->state;
        }
        if ((rc = hoop_frame_announced(r)) < 0) {
            *bad_peer = r->prev;
            return rc;
        }
        if (rq->state != HOOP_REQ_PENDING && sq->state != HOOP_REQ_PENDING)
            return 0;
        rc = r->ops->progress(r->tp, deadline);
        if (rc < 0) {
            *bad_peer = from >= 0 ? from : to;
            return rc;
        }
        if (rc == 0 && hoop_now_ns() >= deadline) {
            *bad_peer = rq->state == HOOP_REQ_PENDING ? from : to;
            return -ETIMEDOUT;
        }
    }
}

hoop_status_t hoop_ring_allreduce_small(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                        size_t count, hoop_dtype_t dtype, hoop_op_t op,
                                        double timeout_s)
{
    const int n = r->size, me = r->rank;
    const size_t bytes = count * hoop_dtype_size(dtype);
    uint64_t seq = hoop_frame_begin(r, HOOP_COLL_ALLREDUCE, count, dtype, op, -1);
    uint64_t deadline = hoop_deadline_after(timeout_s);
    int p2 = 1;
    while (p2 * 2 <= n)
        p2 *= 2;
    int extra = n - p2;
    hoop_status_t st;
    int list[40], np = 0;
    if (me >= p2)
        list[np++] = me - p2;
    else if (me < extra)
        list[np++] = me + p2;
    for (int bit = 1; bit < p2 && me < p2; bit <<= 1)
        list[np++] = me ^ bit;
    /* The partners are off the ring: the announcements on the ring let
     * every rank compare its collective with its predecessor's. At N = 2
     * the one partner is both ring neighbours and the exchange goes over
     * the ring's connections, its frame compared like any other: a rank on
     * the ring (another HOOP_SMALL_BYTES) is told from it by the step its
     * first frame names. */
    const char *phase = "announcing itself";
    int err = 0, bad = r->prev;
    if (n > 2 && (err = hoop_frame_announce(r, 1, 1)))
        goto fail;
    st = n > 2 ? hoop_ring_peers(r, list, np, deadline) : HOOP_OK;
    if (st) {
        hoop_ring_cancel(r);
        if (r->fail_err)
            return st; /* the agreement's own sentence */
        r->fail_err = -ENOTCONN;
        r->fail_peer = r->prev;
        return hoop_error(st, "rank %d: allreduce #%llu (small): connecting to its partners: %s",
                          me, (unsigned long long)seq, hoop_last_error());
    }

    void *tmp = r->scratch; /* bytes <= the scratch size, checked by the caller */
    int rounds = 0;
    for (int b = 1; b < p2; b <<= 1)
        rounds++;
    if (me >= p2) {
        phase = "handing input to its partner";
        err = small_exchange(r, 0, me - p2, sendbuf, -1, NULL, bytes, deadline, &bad);
        if (!err) {
            phase = "receiving the result";
            err = small_exchange(r, rounds + 1, -1, NULL, me - p2, recvbuf, bytes, deadline, &bad);
        }
    } else {
        if (me < extra) {
            phase = "taking its partner's input";
            err = small_exchange(r, 0, -1, NULL, me + p2, tmp, bytes, deadline, &bad);
            if (!err)
                hoop_reduce_kernel(recvbuf, sendbuf, tmp, count, dtype, op,
                                   (op == HOOP_AVG && rounds == 0) ? n : 0);
        } else if (recvbuf != sendbuf) {
            memcpy(recvbuf, sendbuf, bytes);
        }
        for (int bit = 1, k = 1; bit < p2 && !err; bit <<= 1, k++) {
            int partner = me ^ bit;
            phase = "exchanging partial results";
            err = small_exchange(r, k, partner, recvbuf, partner, tmp, bytes, deadline, &bad);
            if (err)
                break;
            int avg_n = (op == HOOP_AVG && k == rounds) ? n : 0;
            if (me < partner)
                hoop_reduce_kernel(recvbuf, recvbuf, tmp, count, dtype, op, avg_n);
            else
                hoop_reduce_kernel(recvbuf, tmp, recvbuf, count, dtype, op, avg_n);
        }
        if (!err && me < extra) {
            phase = "returning the result";
            err = small_exchange(r, rounds + 1, me + p2, recvbuf, -1, NULL, bytes, deadline, &bad);
        }
    }
    if (!err && n > 2) {
        phase = "waiting for its predecessor's announcement";
        bad = r->prev;
        err = hoop_frame_announce_wait(r, deadline);
    }
    if (!err)
        return HOOP_OK;
fail:
    hoop_ring_cancel(r);
    r->fail_err = err;
    r->fail_peer = bad;
    char what[96];
    snprintf(what, sizeof(what), "allreduce #%llu (%zu x %s %s, small-message path)",
             (unsigned long long)seq, count, hoop_dtype_str(dtype), hoop_op_str(op));
    if ((st = hoop_frame_status(r, err, what)))
        return st;
    const char *host = bad >= 0 ? r->peers[bad].host : "?";
    if (err == -ETIMEDOUT)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: allreduce #%llu (%zu x %s %s, small-message path) timed out "
                          "after %.1f s %s: waiting on rank %d (%s)", me, (unsigned long long)seq,
                          count, hoop_dtype_str(dtype), hoop_op_str(op), timeout_s, phase, bad,
                          host);
    return hoop_error(hoop_status_from_errno(err),
                      "rank %d: allreduce #%llu (%zu x %s %s, small-message path) failed %s: rank "
                      "%d (%s): %s", me, (unsigned long long)seq, count, hoop_dtype_str(dtype),
                      hoop_op_str(op), phase, bad, host, hoop_errno_str(err));
}
