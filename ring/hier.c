/* hier.c - the hierarchical allreduce (ring.h): reduce-scatter inside each
 * host, allreduce across the hosts, allgather inside each host.
 *
 * The ring goes host by host (ring.c), so with H hosts of L ranks each the
 * ranks of host h hold places hL .. hL+L-1, and the rank at place hL+i is
 * the i-th of its host. Three parts, each the ring pipeline (pipeline.h)
 * run over a smaller ring, a view of this one:
 *   1. the host's ring (its L ranks in place order; the last sends to the
 *      first over a direct connection): the ring allreduce's reduce-scatter
 *      of the whole buffer into L segments, after which the i-th rank holds
 *      segment i+1 summed over its host;
 *   2. the i-th ranks of all hosts (one ring per i, all at once, over
 *      direct connections): a ring allreduce of that segment;
 *   3. the host's ring again: the allgather of the L segments.
 * Every element is still reduced in one place (part 1 in the host's ring
 * order, part 2 in the hosts' ring order) and copied from there, so every
 * rank ends with the same bits. All parts carry the call's frames, marked
 * (HOOP_FRAME_HIER) so that a rank on the flat ring is told apart. */
#include "ring/pipeline.h"
#include "common/clock.h"
#include "common/status.h"

#include <stdio.h>
#include <string.h>

void hoop_ring_hier_shape(struct hoop_ring *r)
{
    const int n = r->size;
    int hosts = 0, local = 0, same = 1, run = 0;
    r->hier_hosts = r->hier_local = r->hier_host = r->hier_li = 0;
    for (int p = 0; p < n; p++) {
        int first = p == 0 || r->peers[r->at[p]].host_id != r->peers[r->at[p - 1]].host_id;
        if (first) {
            if (hosts && run != local)
                same = 0;
            hosts++;
            run = 0;
        }
        run++;
        if (hosts == 1)
            local = run;
        if (p == r->pos) {
            r->hier_host = hosts - 1;
            r->hier_li = run - 1;
        }
    }
    if (run != local)
        same = 0;
    r->hier_hosts = hosts;
    r->hier_local = same ? local : 0;
}

int hoop_ring_hier_can(const struct hoop_ring *r, char *why, size_t n)
{
    if (r->hier_hosts < 2) {
        snprintf(why, n, "every rank is on one host");
        return 0;
    }
    if (r->hier_local == 0) {
        snprintf(why, n, "the %d hosts do not all have the same number of ranks",
                 r->hier_hosts);
        return 0;
    }
    if (r->hier_local < 2) {
        snprintf(why, n, "each of the %d hosts has one rank", r->hier_hosts);
        return 0;
    }
    snprintf(why, n, "%d hosts of %d ranks", r->hier_hosts, r->hier_local);
    return 1;
}

/* What the pipeline reads of the ring that a view changes. */
struct hier_saved {
    int size, pos, next, prev;
    void *tx, *rx;
    char next_desc[sizeof(((struct hoop_ring *)0)->next_desc)];
    char prev_desc[sizeof(((struct hoop_ring *)0)->prev_desc)];
};

static void hier_save(const struct hoop_ring *r, struct hier_saved *s)
{
    *s = (struct hier_saved){.size = r->size, .pos = r->pos, .next = r->next, .prev = r->prev,
                             .tx = r->tx, .rx = r->rx};
    memcpy(s->next_desc, r->next_desc, sizeof(s->next_desc));
    memcpy(s->prev_desc, r->prev_desc, sizeof(s->prev_desc));
}

static void hier_restore(struct hoop_ring *r, const struct hier_saved *s)
{
    r->size = s->size;
    r->pos = s->pos;
    r->next = s->next;
    r->prev = s->prev;
    r->tx = s->tx;
    r->rx = s->rx;
    memcpy(r->next_desc, s->next_desc, sizeof(s->next_desc));
    memcpy(r->prev_desc, s->prev_desc, sizeof(s->prev_desc));
}

/* Make r a ring of n at place pos, whose next and prev are the ranks at
 * the whole ring's places next_at and prev_at; the connections are the
 * ring's own where those are its neighbours, else the direct ones. */
static void hier_view(struct hoop_ring *r, const struct hier_saved *s, int n, int pos,
                      int next_at, int prev_at)
{
    int next = r->at[next_at], prev = r->at[prev_at];
    r->size = n;
    r->pos = pos;
    r->tx = next == s->next ? s->tx : r->peer_tx[next];
    r->rx = prev == s->prev ? s->rx : r->peer_rx[prev];
    r->next = next;
    r->prev = prev;
    snprintf(r->next_desc, sizeof(r->next_desc), "rank %d (%s)", next, r->peers[next].host);
    snprintf(r->prev_desc, sizeof(r->prev_desc), "rank %d (%s)", prev, r->peers[prev].host);
}

static double hier_left(uint64_t deadline)
{
    uint64_t now = hoop_now_ns();
    return deadline > now ? (double)(deadline - now) / 1e9 : 0.001;
}

hoop_status_t hoop_ring_allreduce_hier(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                       size_t count, hoop_dtype_t dtype, hoop_op_t op,
                                       double timeout_s)
{
    const int H = r->hier_hosts, L = r->hier_local, h = r->hier_host, i = r->hier_li;
    const int first = h * L, up = ((h + 1) % H) * L + i, down = ((h + H - 1) % H) * L + i;
    uint64_t deadline = hoop_deadline_after(timeout_s);
    hoop_status_t st;
    hoop_frame_begin(r, HOOP_COLL_ALLREDUCE, count, dtype, op, -1);
    r->cur.blocks = HOOP_FRAME_HIER;
    /* The direct connections: the host's first and last rank close its
     * ring, and the i-th ranks of the hosts before and after this one. */
    int peers[4], np = 0;
    if (i == 0)
        peers[np++] = r->at[first + L - 1];
    if (i == L - 1)
        peers[np++] = r->at[first];
    peers[np++] = r->at[up];
    if (down != up)
        peers[np++] = r->at[down];
    if ((st = hoop_ring_peers(r, HOOP_PEERS_HIER, peers, np, deadline)))
        return st;

    struct hier_saved s;
    hier_save(r, &s);
    size_t es = hoop_dtype_size(dtype);
    size_t seg = (size_t)((i + 1) % L);
    size_t seg_off = hoop_ring_seg_off(count, L, (int)seg),
           seg_len = hoop_ring_seg_len(count, L, (int)seg);
    struct hoop_step *t = r->steps;
    struct hoop_pipe p = {.coll = HOOP_COLL_ALLREDUCE, .root = -1, .keep_frame = 1,
                          .count = count, .dtype = dtype, .op = op, .device = r->on_gpu};

    /* 1. The host's reduce-scatter: the first L-1 steps of its allreduce. */
    hier_view(r, &s, L, i, first + (i + 1) % L, first + (i + L - 1) % L);
    hoop_ring_allreduce_steps(t, L, i, count, 0);
    for (int k = 0; k < L - 1; k++)
        t[k].phase = "the reduce-scatter inside the host";
    p.what = "its reduce-scatter inside the host";
    p.input = sendbuf;
    p.output = recvbuf;
    p.nsteps = L - 1;
    p.steps = t;
    st = hoop_ring_run(r, &p, hier_left(deadline));

    /* 2. Segment i+1 across the hosts, in place, among the i-th ranks. */
    if (st == HOOP_OK) {
        hier_view(r, &s, H, h, up, down);
        hoop_ring_allreduce_steps(t, H, h, seg_len, op == HOOP_AVG ? s.size : 0);
        for (int k = 0; k < 2 * (H - 1); k++)
            t[k].phase = k < H - 1 ? "the reduce-scatter across the hosts"
                                   : "the allgather across the hosts";
        p.what = "its allreduce across the hosts";
        p.input = p.output = (uint8_t *)recvbuf + seg_off * es;
        p.nsteps = 2 * (H - 1);
        st = hoop_ring_run(r, &p, hier_left(deadline));
    }

    /* 3. The host's allgather: the last L-1 steps of its allreduce, the
     * first of which sends what part 2 left, not what a step before got. */
    if (st == HOOP_OK) {
        hier_view(r, &s, L, i, first + (i + 1) % L, first + (i + L - 1) % L);
        hoop_ring_allreduce_steps(t, L, i, count, 0);
        t += L - 1;
        t[0].send_dep = 0;
        for (int k = 0; k < L - 1; k++)
            t[k].phase = "the allgather inside the host";
        p.what = "its allgather inside the host";
        p.input = p.output = recvbuf;
        p.nsteps = L - 1;
        p.steps = t;
        st = hoop_ring_run(r, &p, hier_left(deadline));
    }
    hier_restore(r, &s);
    return st;
}
