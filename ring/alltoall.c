/* alltoall.c - pairwise exchange over direct connections: every rank sends
 * block j to rank j and receives block j from rank j, all at once; each
 * byte crosses the network once, the least any alltoall can do. alltoallv
 * is the same exchange with a count per pair, after the ranks agree on
 * those counts. */
#include "ring/ring.h"
#include "common/clock.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The blocks: equal (the counts NULL: block j is count elements at j *
 * count) or one count and element offset per peer. */
struct a2a {
    const size_t *sc, *sd, *rc, *rd;
    size_t count, es;
};

static size_t a2a_len(const struct a2a *a, int send, int j)
{
    const size_t *c = send ? a->sc : a->rc;
    return (c ? c[j] : a->count) * a->es;
}

static size_t a2a_off(const struct a2a *a, int send, int j)
{
    const size_t *d = send ? a->sd : a->rd;
    return (d ? d[j] : (size_t)j * a->count) * a->es;
}

/* The exchange, the frame begun (and agreed, or announced) by the caller;
 * what names the call in sentences. */
static hoop_status_t exchange(struct hoop_ring *r, const struct a2a *a, const void *sendbuf,
                              void *recvbuf, const char *what, double timeout_s, int err)
{
    const int n = r->size, me = r->rank;
    uint64_t deadline = hoop_deadline_after(timeout_s);
    hoop_status_t st;
    int bad_peer = -1, dir = 0;
    if (err)
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
        return hoop_error(st, "rank %d: %s: connecting to the other ranks: %s", me, what,
                          hoop_last_error());
    }
    if (a2a_len(a, 1, me))
        memcpy((char *)recvbuf + a2a_off(a, 0, me), (const char *)sendbuf + a2a_off(a, 1, me),
               a2a_len(a, 1, me));
    for (int s = 1; s < n && !err; s++) {
        int to = (me + s) % n, from = (me - s + n) % n;
        struct hoop_tp_req *sq = &r->p2p_sreq[to].tp, *rq = &r->p2p_rreq[from].tp;
        sq->buf = (char *)sendbuf + a2a_off(a, 1, to);
        sq->len = a2a_len(a, 1, to);
        hoop_frame_send(r, &r->p2p_sreq[to], 0, 0);
        rq->buf = (char *)recvbuf + a2a_off(a, 0, from);
        rq->len = a2a_len(a, 0, from);
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
                          "rank %d: %s timed out after %.1f s: still waiting for data from rank "
                          "%d (%s)", me, what, timeout_s, waiting, r->peers[waiting].host);
    }
    if (bad_peer < 0) /* the wait itself failed, not a request */
        return hoop_error(hoop_status_from_errno(err),
                          "rank %d: %s: waiting for the other ranks failed: %s", me, what,
                          hoop_ring_errno_str(r, err));
    return hoop_error(hoop_status_from_errno(err),
                      "rank %d: %s: %s rank %d (%s) failed: %s", me, what,
                      dir ? "receive from" : "send to", bad_peer, r->peers[bad_peer].host,
                      hoop_ring_errno_str(r, err));
}

hoop_status_t hoop_ring_alltoall(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                 size_t count, hoop_dtype_t dtype, double timeout_s)
{
    uint64_t seq = hoop_frame_begin(r, HOOP_COLL_ALLTOALL, count, dtype, -1, -1);
    char what[96];
    snprintf(what, sizeof(what), "alltoall #%llu (%zu x %s per rank)", (unsigned long long)seq,
             count, hoop_dtype_str(dtype));
    struct a2a a = {.count = count, .es = hoop_dtype_size(dtype)};
    /* Off the ring: the announcements on the ring let every rank compare
     * its collective with its predecessor's. */
    return exchange(r, &a, sendbuf, recvbuf, what, timeout_s, hoop_frame_announce(r, 1, 1));
}

/* One pair's term of the agreement: a mix of (from, to, count), so that
 * the terms of a pair cancel only when both sides give the same count. */
static uint64_t pair_term(int from, int to, size_t count)
{
    uint64_t x = ((uint64_t)(uint32_t)from << 32 | (uint32_t)to) * 0x9e3779b97f4a7c15ull;
    x ^= (uint64_t)count + 0x632be59bd9b4e019ull + (x << 6) + (x >> 2);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    return x | 1; /* never 0: a count that differs never cancels to nothing */
}

/* The counts disagree somewhere: every rank learns the whole table (one
 * ring allreduce) and names the same first pair. Tables too large for
 * that are not gathered. */
#define A2AV_NAME_MAX 512
static hoop_status_t alltoallv_mismatch(struct hoop_ring *r, const size_t *sc, const size_t *rc,
                                        const char *what, double timeout_s, int *agreed)
{
    const int n = r->size, me = r->rank;
    size_t nn = (size_t)n * (size_t)n;
    uint64_t *t = n <= A2AV_NAME_MAX ? calloc(2 * nn, sizeof(uint64_t)) : NULL;
    if (t) {
        /* t[i*n+j]: what i sends j; t[nn + i*n+j]: what j expects from i. */
        for (int j = 0; j < n; j++) {
            t[(size_t)me * n + j] = sc[j];
            t[nn + (size_t)j * n + me] = rc[j];
        }
        hoop_status_t st = hoop_ring_agree_sum(r, "gathering the counts to name the pair", t,
                                               2 * nn, timeout_s);
        if (st) {
            free(t);
            return st;
        }
        for (size_t k = 0; k < nn; k++)
            if (t[k] != t[nn + k]) {
                int i = (int)(k / (size_t)n), j = (int)(k % (size_t)n);
                unsigned long long s = t[k], e = t[nn + k];
                free(t);
                *agreed = 1;
                return hoop_error(HOOP_ERR_MISMATCH,
                                  "rank %d: %s: rank %d sends %llu elements to rank %d, which "
                                  "expects %llu from it: sendcounts[%d] on rank %d must equal "
                                  "recvcounts[%d] on rank %d (nothing was sent)",
                                  me, what, i, s, j, e, j, i, i, j);
            }
        free(t); /* the digests disagreed and the tables agree: cannot be */
    }
    *agreed = 1;
    return hoop_error(HOOP_ERR_MISMATCH,
                      "rank %d: %s: the counts disagree: some rank sends another number of "
                      "elements than its peer expects (sendcounts[j] on rank i must equal "
                      "recvcounts[i] on rank j; nothing was sent)", me, what);
}

hoop_status_t hoop_ring_alltoallv(struct hoop_ring *r, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  hoop_dtype_t dtype, double timeout_s, int *agreed)
{
    const int n = r->size, me = r->rank;
    *agreed = 0;
    uint64_t seq = hoop_frame_begin(r, HOOP_COLL_ALLTOALLV, 0, dtype, -1, -1);
    char what[96];
    snprintf(what, sizeof(what), "alltoallv #%llu (%s)", (unsigned long long)seq,
             hoop_dtype_str(dtype));
    /* The agreement: each rank adds its sends' terms and subtracts its
     * receives'; the sum is 0 on every rank when every pair agrees. It runs
     * on the ring, so every rank also compares its call with its
     * predecessor's before anything moves. */
    uint64_t *v = calloc((size_t)n, sizeof(uint64_t)); /* one per rank: every hop compares */
    if (!v)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s: out of memory", me, what);
    for (int j = 0; j < n; j++)
        v[me] += pair_term(me, j, sendcounts[j]) - pair_term(j, me, recvcounts[j]);
    hoop_status_t st = hoop_ring_agree_sum(r, "agreeing on the counts", v, (size_t)n, timeout_s);
    uint64_t sum = 0;
    for (int j = 0; j < n; j++)
        sum += v[j];
    free(v);
    if (st)
        return st;
    if (sum)
        return alltoallv_mismatch(r, sendcounts, recvcounts, what, timeout_s, agreed);
    struct a2a a = {.sc = sendcounts, .sd = sdispls, .rc = recvcounts, .rd = rdispls,
                    .es = hoop_dtype_size(dtype)};
    return exchange(r, &a, sendbuf, recvbuf, what, timeout_s, 0);
}
