/* ring.c - the ring's transport, its connections and its reusable memory. */
#include "ring/ring.h"
#include "gpu/gpu.h"
#include "ring/mixed.h"
#include "ring/pipeline.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* A rank's handle in the table is the transport's name (a length byte and
 * the name), then the transport's own handle, so that ranks whose
 * HOOP_TRANSPORT chose differently are told so before anything else; the
 * transport's handle starts with the per-link choice's block (mixed.h). */
#define RING_NAME_MAX 15
_Static_assert(HOOP_TP_HANDLE_MAX + HOOP_MIXED_BLOCK_MAX + 1 + RING_NAME_MAX == HOOP_HANDLE_MAX,
               "a transport handle and its name must fit the bootstrap's");

hoop_status_t hoop_ring_choose(struct hoop_ring *r, int rank)
{
    memset(r, 0, sizeof(*r));
    const char *tname = hoop_param_str("HOOP_TRANSPORT");
    if (strcmp(tname, "auto") == 0) {
        char why[768];
        r->ops = hoop_transport_auto(why, sizeof(why));
        HOOP_INFO("rank %d: HOOP_TRANSPORT=auto chose %s (%s)", rank, r->ops->name, why);
    } else if (!(r->ops = hoop_transport_find(tname))) {
        char names[64];
        hoop_transport_list(names, sizeof(names));
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: HOOP_TRANSPORT=%s is not a transport; this build has %s, and "
                          "auto", rank, tname, names);
    }
    return HOOP_OK;
}

hoop_status_t hoop_ring_open(struct hoop_ring *r, int rank, int size, const uint8_t *token,
                             size_t chunk_bytes, int depth)
{
    const struct hoop_transport_ops *ops = r->ops;
    memset(r, 0, sizeof(*r));
    r->ops = ops;
    r->rank = rank;
    r->size = size;
    r->next = (rank + 1) % size;
    r->prev = (rank + size - 1) % size;
    r->chunk_bytes = chunk_bytes;
    r->depth = depth;
    r->stage_chunks = 4 * depth; /* HOOP_GPU_STAGING_CHUNKS's default */
    /* The slots' pages are made now: a first-touch page fault inside a
     * collective costs more than the transfer it delays. The kernel makes
     * them all in one call (a quarter cheaper than faulting and zeroing
     * them one by one: 4 MiB per rank with the defaults). */
    r->scratch_bytes = chunk_bytes * (size_t)depth;
    r->scratch = mmap(NULL, r->scratch_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (r->scratch == MAP_FAILED)
        r->scratch = NULL;
    r->sreq = calloc((size_t)depth, sizeof(*r->sreq));
    r->rreq = calloc((size_t)depth, sizeof(*r->rreq));
    r->steps = calloc(2 * (size_t)size, sizeof(*r->steps));
    r->counts = calloc((size_t)size, sizeof(*r->counts));
    r->displs = calloc((size_t)size, sizeof(*r->displs));
    r->peer_tx = calloc((size_t)size, sizeof(*r->peer_tx));
    r->peer_rx = calloc((size_t)size, sizeof(*r->peer_rx));
    r->p2p_sreq = calloc((size_t)size, sizeof(*r->p2p_sreq));
    r->p2p_rreq = calloc((size_t)size, sizeof(*r->p2p_rreq));
    r->p2p_list = calloc((size_t)size, sizeof(*r->p2p_list));
    r->at = calloc((size_t)size, sizeof(*r->at));
    r->where = calloc((size_t)size, sizeof(*r->where));
    if (!r->scratch || !r->sreq || !r->rreq || !r->steps || !r->counts || !r->displs ||
        !r->peer_tx || !r->peer_rx || !r->p2p_sreq || !r->p2p_rreq || !r->p2p_list || !r->at ||
        !r->where) {
        hoop_ring_close(r);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory for %d ring slots of %zu bytes",
                          rank, depth, chunk_bytes);
    }
    for (int k = 0; k < size; k++)
        r->at[k] = r->where[k] = k;
    r->pos = rank;
    struct hoop_tp_params p = {.rank = rank, .size = size, .token = token};
    /* The configured transport, and shared memory to this host's ranks. */
    hoop_status_t st = hoop_mixed_create(ops, &p, &r->tp, &r->ops);
    if (st) {
        r->tp = NULL;
        hoop_ring_close(r);
        return st;
    }
    hoop_mixed_bind(r->tp, r);
    return st;
}

hoop_status_t hoop_ring_listen(void *ring, const struct sockaddr *local, socklen_t len,
                               uint8_t *handle, uint16_t *handle_len)
{
    struct hoop_ring *r = ring;
    size_t nl = strlen(r->ops->name);
    if (nl > RING_NAME_MAX)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: transport name %s is too long", r->rank,
                          r->ops->name);
    handle[0] = (uint8_t)nl;
    memcpy(handle + 1, r->ops->name, nl);
    uint16_t tl = 0;
    hoop_status_t st = r->ops->listen(r->tp, local, len, handle + 1 + nl, &tl);
    *handle_len = (uint16_t)(1 + nl + tl);
    return st;
}

void hoop_ring_peer_handle(const struct hoop_ring *r, int q, const uint8_t **h, uint16_t *len)
{
    const struct hoop_peer *p = &r->peers[q];
    size_t nl = p->handle_len ? p->handle[0] : 0;
    if (p->handle_len < 1 + nl) {
        *h = p->handle;
        *len = 0;
        return;
    }
    *h = p->handle + 1 + nl;
    *len = (uint16_t)(p->handle_len - 1 - nl);
}

/* Every rank must have chosen the same transport. */
static hoop_status_t ring_check_transports(const struct hoop_ring *r)
{
    size_t nl = strlen(r->ops->name);
    for (int q = 0; q < r->size; q++) {
        const struct hoop_peer *p = &r->peers[q];
        size_t ql = p->handle_len ? p->handle[0] : 0;
        if (p->handle_len >= 1 + ql && ql == nl && memcmp(p->handle + 1, r->ops->name, nl) == 0) {
            const uint8_t *h;
            uint16_t hl;
            char why[256];
            hoop_ring_peer_handle(r, q, &h, &hl);
            if (q == r->rank || !r->ops->handle_check ||
                r->ops->handle_check(r->tp, h, hl, why, sizeof(why)) == 0)
                continue;
            return hoop_error(HOOP_ERR_MISMATCH, "rank %d: rank %d (%s) %s", r->rank, q, p->host,
                              why);
        }
        return hoop_error(HOOP_ERR_MISMATCH,
                          "rank %d: rank %d (%s) uses the %.*s transport and this rank %s: "
                          "HOOP_TRANSPORT must come to the same transport on every rank (auto "
                          "chooses by what each machine has: set it by name)", r->rank, q,
                          p->host, (int)(p->handle_len >= 1 + ql ? ql : 0),
                          (const char *)p->handle + 1, r->ops->name);
    }
    return HOOP_OK;
}

/* The ring host by host: the hosts in the order of their lowest rank, and
 * each host's ranks in rank order. Every rank computes it from the same
 * table, so all agree; with one host it is rank order. */
static void ring_follow_hosts(struct hoop_ring *r, const struct hoop_peer *peers)
{
    const int n = r->size;
    int placed = 0;
    for (int k = 0; k < n; k++)
        r->where[k] = -1;
    for (int k = 0; k < n; k++) {
        if (r->where[k] >= 0)
            continue;
        for (int q = k; q < n; q++)
            if (r->where[q] < 0 && peers[q].host_id == peers[k].host_id) {
                r->where[q] = placed;
                r->at[placed++] = q;
            }
    }
    r->pos = r->where[r->rank];
    r->next = r->at[(r->pos + 1) % n];
    r->prev = r->at[(r->pos + n - 1) % n];
}

hoop_status_t hoop_ring_connect(struct hoop_ring *r, const struct hoop_peer *peers,
                                uint64_t comm_id, uint64_t deadline_ns)
{
    ring_follow_hosts(r, peers);
    const struct hoop_peer *n = &peers[r->next], *p = &peers[r->prev];
    r->peers = peers;
    hoop_ring_hier_shape(r);
    int nlinks;
    r->shm_ring = hoop_mixed_shm_links(r, &nlinks, NULL, 0) == nlinks;
    r->comm_id = comm_id;
    hoop_status_t st = ring_check_transports(r);
    if (st)
        return st;
    const uint8_t *nh;
    uint16_t nhl;
    hoop_ring_peer_handle(r, r->next, &nh, &nhl);
    snprintf(r->next_desc, sizeof(r->next_desc), "rank %d (%s)", r->next, n->host);
    snprintf(r->prev_desc, sizeof(r->prev_desc), "rank %d (%s)", r->prev, p->host);
    /* Connect first: every listener exists before the table is handed out,
     * so the connect completes in the peer's backlog and nobody waits on
     * anybody's accept. */
    st = r->ops->connect(r->tp, r->next, HOOP_CHANNEL_RING, n->host, nh, nhl, comm_id,
                         deadline_ns, &r->tx);
    if (st)
        return st;
    st = r->ops->accept(r->tp, r->prev, HOOP_CHANNEL_RING, p->host, comm_id, deadline_ns, &r->rx);
    /* The connect's token reply, checked now that nothing more is awaited. */
    if (!st && r->ops->settle)
        st = r->ops->settle(r->tp, comm_id, deadline_ns);
    return st;
}

void hoop_ring_cancel(struct hoop_ring *r)
{
    if (r->ops && r->tp)
        r->ops->cancel(r->tp);
}

void hoop_ring_close(struct hoop_ring *r)
{
    if (r->ops && r->tp) {
        if (r->tx)
            r->ops->close(r->tx);
        if (r->rx)
            r->ops->close(r->rx);
        for (int i = 0; r->peer_tx && i < r->size; i++) {
            if (r->peer_tx[i])
                r->ops->close(r->peer_tx[i]);
            if (r->peer_rx[i])
                r->ops->close(r->peer_rx[i]);
        }
        r->ops->destroy(r->tp);
    }
    if (r->scratch)
        munmap(r->scratch, r->scratch_bytes);
    free(r->sreq);
    free(r->rreq);
    free(r->steps);
    free(r->counts);
    free(r->displs);
    free(r->peer_tx);
    free(r->peer_rx);
    free(r->p2p_sreq);
    free(r->p2p_rreq);
    free(r->p2p_list);
    free(r->at);
    free(r->where);
    free(r->work);
    hoop_ring_small_free(r);
    hoop_gpu_pipe_close(r->gpu);
    memset(r, 0, sizeof(*r));
}

const char *hoop_ring_describe(const struct hoop_ring *r)
{
    return r->ops && r->tp ? r->ops->describe(r->tp) : "none (one rank)";
}

void hoop_ring_set_busy_poll(struct hoop_ring *r, uint64_t spin_ns, int shared)
{
    if (r->ops && r->tp && r->ops->set_busy_poll)
        r->ops->set_busy_poll(r->tp, spin_ns, shared);
}

hoop_status_t hoop_ring_watch(struct hoop_ring *r, int fd)
{
    int rc = r->ops->watch(r->tp, fd);
    if (rc)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: cannot watch descriptor %d: %s", r->rank, fd,
                          hoop_errno_str(rc));
    return HOOP_OK;
}

void hoop_ring_peer_ended(struct hoop_ring *r, int k)
{
    if (r->ops->peer_ended)
        r->ops->peer_ended(r->tp, k);
}

int hoop_ring_progress(struct hoop_ring *r, uint64_t deadline_ns)
{
    for (;;) {
        int rc = r->ops->progress(r->tp, deadline_ns);
        if (rc != -EINTR || !r->on_wake || (rc = r->on_wake(r->wake_ctx)) != 0)
            return rc; /* > 0 from on_wake: requests may have ended */
        if (hoop_now_ns() >= deadline_ns)
            return 0;
    }
}

void hoop_ring_call_end(struct hoop_ring *r)
{
    atomic_store_explicit(&r->running_seq, 0, memory_order_release);
    if (r->ops && r->tp && r->ops->call_end)
        r->ops->call_end(r->tp);
}

const char *hoop_ring_errno_str(struct hoop_ring *r, int err)
{
    static _Thread_local char text[768];
    const char *why = r->ops && r->tp && r->ops->last_error ? r->ops->last_error(r->tp) : NULL;
    if (!why || !*why)
        return hoop_errno_str(err);
    snprintf(text, sizeof(text), "%s (%s)", hoop_errno_str(err), why);
    return text;
}

hoop_status_t hoop_ring_reserve_work(struct hoop_ring *r, size_t bytes)
{
    if (bytes <= r->work_bytes)
        return HOOP_OK;
    uint8_t *w = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!w)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory for a %zu-byte work buffer",
                          r->rank, bytes);
    memset(w, 0, bytes);
    free(r->work);
    r->work = w;
    r->work_bytes = bytes;
    return HOOP_OK;
}
