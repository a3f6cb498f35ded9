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
 * own connection, where every collective compares its frames with the
 * predecessor's (frame.h). Only where the schedule has no such message (N
 * not a power of two) does a rank send an announcement instead: at N = 2, 4
 * and 8 a call is its exchanges and nothing more.
 *
 * On the hierarchical path (where the job spans hosts of equal size, ring.h)
 * a host's ranks hand their input to its first rank instead, which combines
 * them in place order; the first ranks of the hosts run the same recursive
 * doubling among themselves, and hand the result back. Each round then
 * sends one message per host through the network, not one per rank, at the
 * cost of two more hops inside the host. Ranks that are not ring neighbours
 * there announce themselves as above.
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
#include <stdlib.h>
#include <string.h>

/* The hand-over, up to 31 rounds of doubling, the hand-back; and on the
 * hierarchical path a host's gather and broadcast besides (hosts of at
 * most SMALL_LOCAL_MAX ranks). */
#define SMALL_DOUBLING_MAX 33
#define SMALL_LOCAL_MAX 64
#define SMALL_ROUNDS_MAX (SMALL_DOUBLING_MAX + 2 * SMALL_LOCAL_MAX)

/* A round of one rank's schedule: send its partial result to `to` and
 * receive from `from` (ranks; -1: nothing), the message's frame naming
 * `step` at both ends; what is received is combined with the partial
 * result (this rank's data first when mine_first; an average divides
 * after the last combine) or, where copy, is the result. */
struct small_round {
    int to, from;
    int step;
    int copy;
    int mine_first;
    int last;
};

struct small_sched {
    int n;
    struct small_round rd[SMALL_ROUNDS_MAX];
};

/* A rank's whole plan for one shape (flat or hierarchical): the rounds,
 * the partners (for the direct connections), and the rounds whose message
 * comes from the ring predecessor and goes to the successor (-1: none).
 * It depends only on the ring's order, which never changes after set-up,
 * so each shape's is made on its first call and kept (r->small_plan). */
struct hoop_small_plan {
    struct small_sched sc;
    int list[2 * SMALL_ROUNDS_MAX];
    int np;
    int prev_round, next_round;
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

static struct small_round *small_add(struct small_sched *s, int to, int from, int step)
{
    struct small_round *x = &s->rd[s->n++];
    *x = (struct small_round){.to = to, .from = from, .step = step};
    return x;
}

/* Recursive doubling among n members, this rank member me; member k is
 * the rank at ring place k * stride, and the frames' steps are step0 and
 * up (at most SMALL_DOUBLING_MAX of them). */
static void small_doubling(struct small_sched *s, const struct hoop_ring *r, int n, int me,
                           int stride, int step0)
{
    int p2 = 1, rounds = 0;
    while (p2 <= n / 2) {
        p2 *= 2;
        rounds++;
    }
#define MEMBER(k) (r->at[(k) * stride])
    if (me >= p2) {
        small_add(s, MEMBER(me - p2), -1, step0);
        small_add(s, -1, MEMBER(me - p2), step0 + rounds + 1)->copy = 1;
        return;
    }
    if (me < n - p2) {
        struct small_round *x = small_add(s, -1, MEMBER(me + p2), step0);
        x->mine_first = 1;
        x->last = rounds == 0;
    }
    const unsigned vme = small_vrank((unsigned)me);
    for (int k = 1; k <= rounds; k++) {
        unsigned vp = vme ^ (1u << (k - 1));
        int partner = MEMBER((int)small_rank_of(vp));
        struct small_round *x = small_add(s, partner, partner, step0 + k);
        x->mine_first = vme < vp;
        x->last = k == rounds;
    }
    if (me < n - p2)
        small_add(s, MEMBER(me + p2), -1, step0 + rounds + 1);
#undef MEMBER
}

/* The hierarchical path (ring.h: hier_*): the host's ranks hand their
 * input to its first rank, which combines them in place order; the first
 * ranks of the hosts run recursive doubling; each hands the result back
 * to its host's ranks. Only one message per host crosses the network in
 * each round. */
static void small_hier(struct small_sched *s, const struct hoop_ring *r)
{
    const int L = r->hier_local, H = r->hier_hosts, h = r->hier_host, i = r->hier_li;
    const int leader = r->at[h * L];
    const int cross0 = L - 1, bcast0 = cross0 + SMALL_DOUBLING_MAX;
    if (i > 0) {
        small_add(s, leader, -1, i - 1);
        small_add(s, -1, leader, bcast0 + i - 1)->copy = 1;
        return;
    }
    for (int j = 1; j < L; j++)
        small_add(s, -1, r->at[h * L + j], j - 1)->mine_first = 1;
    small_doubling(s, r, H, h, L, cross0);
    for (int j = 1; j < L; j++)
        small_add(s, r->at[h * L + j], -1, bcast0 + j - 1);
}

static void small_plan_make(struct hoop_small_plan *pl, const struct hoop_ring *r, int hier)
{
    struct small_sched *sc = &pl->sc;
    sc->n = 0;
    if (hier)
        small_hier(sc, r);
    else
        small_doubling(sc, r, r->size, r->pos, 1, 0);
    pl->np = 0;
    pl->prev_round = pl->next_round = -1;
    for (int k = 0; k < sc->n; k++) {
        const struct small_round *x = &sc->rd[k];
        if (x->from >= 0 && x->from == r->prev && pl->prev_round < 0)
            pl->prev_round = k;
        if (x->to >= 0 && x->to == r->next)
            pl->next_round = k;
        if (x->to >= 0)
            pl->list[pl->np++] = x->to;
        if (x->from >= 0 && x->from != x->to)
            pl->list[pl->np++] = x->from;
    }
}

void hoop_ring_small_free(struct hoop_ring *r)
{
    for (int i = 0; i < 2; i++) {
        free(r->small_plan[i]);
        r->small_plan[i] = NULL;
    }
}

/* Send `sb` to `to` and receive from `from` (either may be -1) with frames
 * of step `round`, over the ring's connection where the peer is the ring
 * neighbour that way, else the direct one. The message from prev was
 * posted at the start (into its own buffer) where `posted`; *got is where
 * the received bytes are. */
static int small_exchange(struct hoop_ring *r, int round, int to, const void *sb, int from,
                          int posted, void *rb, size_t bytes, uint64_t *deadline, double timeout_s,
                          int *bad_peer, const void **got)
{
    const uint32_t step = HOOP_FRAME_SMALL + (uint32_t)round;
    struct hoop_tp_req *sq = &r->sreq[0].tp, *rq = NULL;
    sq->state = 0;
    int rc;
    if (from >= 0 && posted) {
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
        rc = hoop_ring_progress(r, hoop_deadline_lazy(deadline, timeout_s));
        if (rc < 0) {
            *bad_peer = from >= 0 ? from : to;
            return rc;
        }
        if (rc == 0 && hoop_now_ns() >= *deadline) {
            *bad_peer = rs == HOOP_REQ_PENDING ? from : to;
            return -ETIMEDOUT;
        }
    }
}

hoop_status_t hoop_ring_allreduce_small(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                        size_t count, hoop_dtype_t dtype, hoop_op_t op, int hier,
                                        double timeout_s)
{
    const int n = r->size, me = r->rank;
    const size_t bytes = count * hoop_dtype_size(dtype);
    uint64_t seq = hoop_frame_begin(r, HOOP_COLL_ALLREDUCE, count, dtype, op, -1);
    /* The hierarchical schedule's rounds are bounded (SMALL_ROUNDS_MAX);
     * every rank knows the hosts' shape alike. */
    hier = hier && r->hier_local <= SMALL_LOCAL_MAX;
    if (hier)
        r->cur.blocks = HOOP_FRAME_HIER;
    uint64_t deadline = 0; /* hoop_deadline_lazy */
    hoop_status_t st;
    const int avg_n = op == HOOP_AVG ? n : 0;
    /* The plan is kept from the first call; without memory for it, one on
     * the stack (about 5 KiB) serves this call. */
    struct hoop_small_plan *pl = r->small_plan[hier], here;
    if (!pl && (pl = malloc(sizeof(*pl))) != NULL) {
        small_plan_make(pl, r, hier);
        r->small_plan[hier] = pl;
    } else if (!pl) {
        small_plan_make(&here, r, hier);
        pl = &here;
    }
    const struct small_sched *const sc = &pl->sc;
    const int prev_round = pl->prev_round, next_round = pl->next_round;
    /* The message from prev lands in a buffer of its own, the work buffer
     * (kept across calls): it may arrive while earlier rounds use the
     * scratch slot. */
    if (prev_round >= 0 && (st = hoop_ring_reserve_work(r, bytes)))
        return st;
    /* Beyond N = 2 the partners are not all ring neighbours both ways: the
     * direct connections (made on the first call). */
    st = n > 2 ? hoop_ring_peers(r, hier ? HOOP_PEERS_HSMALL : HOOP_PEERS_SMALL, pl->list, pl->np,
                                 hoop_deadline_lazy(&deadline, timeout_s))
               : HOOP_OK;
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
    err = prev_round >= 0
              ? hoop_frame_expect_prev(r, r->work, bytes,
                                       HOOP_FRAME_SMALL + (uint32_t)sc->rd[prev_round].step)
              : hoop_frame_announce(r, 0, 1);
    if (!err && next_round < 0) {
        phase = "announcing itself";
        bad = r->next;
        err = hoop_frame_announce(r, 1, 0);
    }
    if (err)
        goto fail;

    /* The partial result: the input until the first combine writes
     * recvbuf (a send before that sends the input itself). */
    const void *acc = sendbuf;
    void *tmp = r->scratch; /* bytes <= the scratch size, checked by the caller */
    for (int k = 0; k < sc->n && !err; k++) {
        const struct small_round *x = &sc->rd[k];
        const void *got = tmp;
        void *rb = x->copy ? recvbuf : tmp;
        phase = x->copy                         ? "receiving the result"
                : x->to >= 0 && x->from >= 0    ? "exchanging partial results"
                : x->to >= 0                    ? "handing on its partial result"
                                                : "taking a partner's partial result";
        err = small_exchange(r, x->step, x->to, acc, x->from, k == prev_round, rb, bytes, &deadline,
                             timeout_s, &bad, &got);
        if (err || x->from < 0)
            continue;
        if (x->copy) {
            if (got != recvbuf)
                memcpy(recvbuf, got, bytes);
        } else if (x->mine_first)
            hoop_reduce_kernel(recvbuf, acc, got, count, dtype, op, x->last ? avg_n : 0);
        else
            hoop_reduce_kernel(recvbuf, got, acc, count, dtype, op, x->last ? avg_n : 0);
        acc = recvbuf;
    }
    if (!err && acc != recvbuf)
        memcpy(recvbuf, acc, bytes);
    if (!err) {
        phase = "waiting for its predecessor's announcement";
        bad = r->prev;
        err = hoop_frame_announce_wait(r, &deadline, timeout_s);
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
