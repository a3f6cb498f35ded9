/* peers.c - direct connections to any rank, for the collectives that do
 * not follow the ring (alltoall, the small-message allreduce). Made on
 * first use, on their own channel so they are never mistaken for the ring's
 * connections; every rank makes them in the same collective call. */
#include "ring/ring.h"
#include "common/clock.h"
#include "common/status.h"

#include <errno.h>

/* A wait of the set-up ended with st: 1 when it is to be made again (the
 * communicator's control woke it and the collective goes on), else 0. */
static int peers_wait_again(struct hoop_ring *r, hoop_status_t st, uint64_t deadline_ns)
{
    int w = st == HOOP_ERR_ABORTED && r->on_wake ? r->on_wake(r->wake_ctx) : -EINTR;
    if (w == -EINTR) {
        if (st == HOOP_ERR_ABORTED) {
            r->fail_err = -EINTR;
            r->fail_peer = -1;
        }
        return 0;
    }
    return !(w == 0 && hoop_now_ns() >= deadline_ns);
}

/* The connection to q, unless it is made. */
static hoop_status_t peers_connect(struct hoop_ring *r, int q, uint64_t deadline_ns)
{
    if (r->peer_tx[q])
        return HOOP_OK;
    const struct hoop_peer *p = &r->peers[q];
    const uint8_t *h;
    uint16_t hl;
    hoop_ring_peer_handle(r, q, &h, &hl);
    return r->ops->connect(r->tp, q, HOOP_CHANNEL_P2P, p->host, h, hl, r->comm_id, deadline_ns,
                           &r->peer_tx[q]);
}

hoop_status_t hoop_ring_peers(struct hoop_ring *r, unsigned set, const int *peers, int npeers,
                              uint64_t deadline_ns)
{
    hoop_status_t st;
    /* Not "does this rank miss a connection": at N = 3 the small path
     * leaves rank 0 connected to both others and ranks 1 and 2 not to each
     * other, and a rank 0 that skipped the agreement would leave them
     * waiting in it. */
    if (r->p2p_made & set)
        return HOOP_OK;
    /* Where a connect waits for no one and starts no traffic (tcp, shared
     * memory: transport.h, connect_early), the connects go first and
     * overlap the agreement below. A connect that fails here is made
     * again after it, which says better what went wrong (a rank in another
     * collective, or gone). */
    if (r->ops->connect_early && r->ops->connect_early(r->tp)) {
        for (int i = 0; i < npeers; i++)
            if (peers_connect(r, peers[i], deadline_ns))
                hoop_error_clear();
    }
    /* The ranks agree on the collective before any wait for a partner: a
     * rank whose neighbours are in another collective learns it here,
     * instead of waiting for connections that will never come. */
    uint64_t now = hoop_now_ns();
    double left = deadline_ns > now ? (double)(deadline_ns - now) / 1e9 : 0.001;
    if ((st = hoop_ring_agree(r, "agreeing before it connects to its partners", left)))
        return st;
    /* Every connect first, then every accept. A connect completes without
     * the peer doing anything (or, where it waits, once the peer serves
     * its accepts, which every rank here does next), so no rank ever waits
     * for one that is itself waiting: accepting pair by pair instead would
     * let 0 wait on 1, 1 on 2 and 2 on 0. */
    for (int i = 0; i < npeers; i++)
        if ((st = peers_connect(r, peers[i], deadline_ns)))
            return st;
    /* A wait here is woken, as every wait of a collective, by the
     * communicator's control: the word of the root that another rank
     * failed (maybe before it could connect to us) ends it. */
    for (int i = 0; i < npeers; i++) {
        int q = peers[i];
        while (!r->peer_rx[q]) {
            st = r->ops->accept(r->tp, q, HOOP_CHANNEL_P2P, r->peers[q].host, r->comm_id,
                                deadline_ns, &r->peer_rx[q]);
            if (st == HOOP_OK || !peers_wait_again(r, st, deadline_ns))
                break;
        }
        if (st)
            return st;
    }
    /* The connects' token replies, checked once every accept is made: by
     * now they are in, and no accept above waited for them. */
    while (r->ops->settle) {
        st = r->ops->settle(r->tp, r->comm_id, deadline_ns);
        if (st == HOOP_OK)
            break;
        if (!peers_wait_again(r, st, deadline_ns))
            return st;
    }
    /* Every pair covers the other sets' pairs too. */
    r->p2p_made |=
        set == HOOP_PEERS_ALL
            ? HOOP_PEERS_ALL | HOOP_PEERS_SMALL | HOOP_PEERS_HIER | HOOP_PEERS_HSMALL
            : set;
    return HOOP_OK;
}
