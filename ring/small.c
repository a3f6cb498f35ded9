/* small.c - allreduce for small messages: recursive doubling.
 *
 * The ring needs 2(N-1) hops one after the other; for a few KiB the hops'
 * latency is all there is. Recursive doubling needs log2(P) exchanges (P the
 * largest power of two <= N): in round k, a rank swaps its partial result
 * with the rank whose virtual rank differs from its own in bit k-1, and both
 * combine them. The N-P extra ranks (by ring place) first hand their input
 * to the rank P places before and get the result back at the end.
 *
 * A rank's virtual rank is the Gray code of its place on the ring (ring.h:
 * the ring goes host by host). Ring neighbours (places p and p+1, and P-1
 * and 0) differ in one bit, so a rank's ring predecessor is one of its
 * partners; and the first rounds pair places close on the ring, so that
 * with hosts of 2^j ranks the first j rounds stay inside each host (shared
 * memory) and only the last ones cross the network, whatever order the
 * launcher gave the ranks. The predecessor's message goes over the ring's
 * own connection,
 * where every collective compares its frames with the predecessor's
 * (frame.h). Only where the schedule has no such message (N not a power of
 * two) does a rank send an announcement instead: at N = 2, 4 and 8 a call is
 * its exchanges and nothing more.
 *
 * Every combine puts the lower virtual rank's data first, so every rank adds
 * up in the same tree and ends with the same bits (min/max of signed zeros
 * or NaNs would otherwise depend on the order). */
#include "ring/ring.h"
#include "common/clock.h"
#include "common/status.h"
#include "reduce/reduce.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The hand-over, up to 31 rounds of doubling, the hand-back. */
#define SMALL_ROUNDS_MAX 33

/* One rank's schedule: in round k it sends to to[k] and receives from
 * from[k] (ranks; -1: nothing). */
struct small_plan {
    int p2, rounds;
    int to[SMALL_ROUNDS_MAX];
    int from[SMALL_ROUNDS_MAX];
};

static unsigned small_vrank(unsigned rank)
{
    return rank ^ (rank >> 1);
}

static unsigned small_rank_of(unsigned v)
{
    for (unsigned s = 1; s < 32; s <<= 1)
        v ^= v >> s;
    return v;
}

/* The plan of the rank at place me, in places; small_to_ranks then makes
 * its places ranks. */
static void small_plan(int n, int me, struct small_plan *pl)
{
    int p2 = 1, rounds = 0;
    while (p2 <= n / 2) {
        p2 *= 2;
        rounds++;
    }
    pl->p2 = p2;
    pl->rounds = rounds;
    for (int k = 0; k <= rounds + 1; k++)
        pl->to[k] = pl->from[k] = -1;
    if (me >= p2) {
        pl->to[0] = pl->from[rounds + 1] = me - p2;
        return;
    }
    if (me < n - p2)
        pl->from[0] = pl->to[rounds + 1] = me + p2;
    for (int k = 1; k <= rounds; k++)
        pl->to[k] = pl->from[k] =
            (int)small_rank_of(small_vrank((unsigned)me) ^ (1u << (k - 1)));
}

static void small_to_ranks(const struct hoop_ring *r, struct small_plan *pl)
{
    for (int k = 0; k <= pl->rounds + 1; k++) {
        if (pl->to[k] >= 0)
            pl->to[k] = r->at[pl->to[k]];
        if (pl->from[k] >= 0)
            pl->from[k] = r->at[pl->from[k]];
    }
}

/* Round `round`: send `sb` to `to` and receive from `from` (either may be
 * -1), over the ring's connection where the peer is the ring neighbour
 * that way, else the direct one. The message from prev was posted at the
 * start (into its own buffer); *got is where the received bytes are. */
static int small_exchange(struct hoop_ring *r, int round, int to, const void *sb, int from,
                          void *rb, size_t bytes, uint64_t deadline, int *bad_peer,
                          const void **got)
{
    const uint32_t step = HOOP_FRAME_SMALL + (uint32_t)round;
    struct hoop_tp_req *sq = &r->sreq[0].tp, *rq = NULL;
    sq->state = 0;
    int rc;
    if (from >= 0 && from == r->prev) {
        rq = &r->ann_r.tp;
    } else if (from >= 0) {
        rq = &r->rreq[0].tp;
        rq->buf = rb;
        rq->len = bytes;
        hoop_frame_expect(r, &r->rreq[0], from, step, 0);
        if ((rc = r->ops->irecv(r->peer_rx[from], rq))) {
            *bad_peer = from;
            return rc;
        }
    }
    if (rq)
        *got = rq->buf;
    if (to >= 0) {
        sq->buf = (void *)sb;
        sq->len = bytes;
        hoop_frame_send(r, &r->sreq[0], step, 0);
        if ((rc = r->ops->isend(to == r->next ? r->tx : r->peer_tx[to], sq))) {
            *bad_peer = to;
            return rc;
        }
    }
    for (;;) {
        int rs = rq ? rq->state : 0;
        if (rs < 0) {
            *bad_peer = from;
            return rs;
        }
        if (sq->state < 0) {
            *bad_peer = to;
            return sq->state;
        }
        if ((rc = hoop_frame_announced(r)) < 0) {
            *bad_peer = r->prev;
            return rc;
        }
        if (rs != HOOP_REQ_PENDING && sq->state != HOOP_REQ_PENDING)
            return 0;
        rc = hoop_ring_progress(r, deadline);
        if (rc < 0) {
            *bad_peer = from >= 0 ? from : to;
            return rc;
        }
        if (rc == 0 && hoop_now_ns() >= deadline) {
            *bad_peer = rs == HOOP_REQ_PENDING ? from : to;
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
    hoop_status_t st;
    struct small_plan pl;
    small_plan(n, r->pos, &pl);
    small_to_ranks(r, &pl);
    const int last = pl.rounds + 1;
    int list[2 * SMALL_ROUNDS_MAX], np = 0, prev_round = -1, next_round = -1;
    for (int k = 0; k <= last; k++) {
        if (pl.from[k] >= 0 && pl.from[k] == r->prev)
            prev_round = k;
        if (pl.to[k] >= 0 && pl.to[k] == r->next)
            next_round = k;
        if (pl.to[k] >= 0)
            list[np++] = pl.to[k];
        else if (pl.from[k] >= 0)
            list[np++] = pl.from[k];
    }
    /* The message from prev lands in a buffer of its own, the work buffer
     * (kept across calls): it may arrive while earlier rounds use the
     * scratch slot. */
    if (prev_round >= 0 && (st = hoop_ring_reserve_work(r, bytes)))
        return st;
    /* Beyond N = 2 the partners are not all ring neighbours both ways: the
     * direct connections (made on the first call). */
    st = n > 2 ? hoop_ring_peers(r, HOOP_PEERS_SMALL, list, np, deadline) : HOOP_OK;
    if (st) {
        hoop_ring_cancel(r);
        if (r->fail_err)
            return st; /* the agreement's own sentence */
        r->fail_err = -ENOTCONN;
        r->fail_peer = r->prev;
        return hoop_error(st, "rank %d: allreduce #%llu (small): connecting to its partners: %s",
                          me, (unsigned long long)seq, hoop_last_error());
    }

    const char *phase = "posting its receive from its predecessor";
    int err = 0, bad = r->prev;
    err = prev_round >= 0 ? hoop_frame_expect_prev(r, r->work, bytes,
                                                   HOOP_FRAME_SMALL + (uint32_t)prev_round)
                          : hoop_frame_announce(r, 0, 1);
    if (!err && next_round < 0) {
        phase = "announcing itself";
        bad = r->next;
        err = hoop_frame_announce(r, 1, 0);
    }
    if (err)
        goto fail;

    void *tmp = r->scratch; /* bytes <= the scratch size, checked by the caller */
    const void *got = tmp;
    const unsigned vme = small_vrank((unsigned)r->pos);
    if (r->pos >= pl.p2) {
        phase = "handing input to its partner";
        err = small_exchange(r, 0, pl.to[0], sendbuf, -1, NULL, bytes, deadline, &bad, &got);
        if (!err) {
            phase = "receiving the result";
            err = small_exchange(r, last, -1, NULL, pl.from[last], recvbuf, bytes, deadline, &bad,
                                 &got);
            if (!err && got != recvbuf)
                memcpy(recvbuf, got, bytes);
        }
    } else {
        if (pl.from[0] >= 0) {
            phase = "taking its partner's input";
            err = small_exchange(r, 0, -1, NULL, pl.from[0], tmp, bytes, deadline, &bad, &got);
            if (!err)
                hoop_reduce_kernel(recvbuf, sendbuf, got, count, dtype, op,
                                   (op == HOOP_AVG && pl.rounds == 0) ? n : 0);
        } else if (recvbuf != sendbuf) {
            memcpy(recvbuf, sendbuf, bytes);
        }
        for (int k = 1; k <= pl.rounds && !err; k++) {
            int partner = pl.to[k];
            phase = "exchanging partial results";
            err = small_exchange(r, k, partner, recvbuf, partner, tmp, bytes, deadline, &bad,
                                 &got);
            if (err)
                break;
            int avg_n = (op == HOOP_AVG && k == pl.rounds) ? n : 0;
            if (vme < small_vrank((unsigned)r->where[partner]))
                hoop_reduce_kernel(recvbuf, recvbuf, got, count, dtype, op, avg_n);
            else
                hoop_reduce_kernel(recvbuf, got, recvbuf, count, dtype, op, avg_n);
        }
        if (!err && pl.to[last] >= 0) {
            phase = "returning the result";
            err = small_exchange(r, last, pl.to[last], recvbuf, -1, NULL, bytes, deadline, &bad,
                                 &got);
        }
    }
    if (!err) {
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
                      hoop_op_str(op), phase, bad, host, hoop_ring_errno_str(r, err));
}
