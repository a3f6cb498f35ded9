/* mixed.c - shared memory to same-host ranks, the configured transport to
 * the others, behind one ops table (mixed.h). */
#include "ring/mixed.h"
#include "ring/ring.h"
#include "bootstrap/bootstrap.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/param.h"
#include "common/sock.h"
#include "common/status.h"
#include "transport/shm/shm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MIXED_VERSION 1
enum { SHM_OFF = 0, SHM_ON = 1, SHM_AUTO = HOOP_PARAM_AUTO };

struct mixed_block {
    int mode;
    uint64_t host_id;
    uint64_t netns;
    const uint8_t *shm; /* the shm transport's handle, or NULL */
    uint16_t shm_len;
    const uint8_t *net; /* the configured transport's */
    uint16_t net_len;
};

struct mixed_tp {
    struct hoop_transport_ops ops; /* this table, named as net */
    const struct hoop_transport_ops *net;
    void *ntp;
    void *stp;          /* NULL: shared memory is off here */
    /* Watched by the configured transport; holds the shm transport's
     * descriptor only while a wait sleeps there, so that nothing else
     * (an accept) is woken by shared memory. */
    int gate;
    int rank;
    int mode;
    uint64_t host_id;
    uint64_t netns;
    const struct hoop_ring *ring;
    int pids_known;
    int nshm, nnet;     /* open connections of each kind */
    uint64_t spin_ns;
    int spin_yield;
    char desc[512];
};

struct mixed_conn {
    struct mixed_tp *tp;
    int shm;
    void *c;
};

static int mixed_parse(const uint8_t *h, uint16_t len, struct mixed_block *b)
{
    if (len < 19 || h[0] != MIXED_VERSION || h[1] > SHM_AUTO)
        return -1;
    b->mode = h[1];
    memcpy(&b->host_id, h + 2, 8);
    memcpy(&b->netns, h + 10, 8);
    b->shm_len = h[18];
    if ((b->shm_len != 0 && b->shm_len != HOOP_SHM_HANDLE_BYTES) || 19u + b->shm_len > len ||
        (b->mode != SHM_OFF) != (b->shm_len != 0))
        return -1;
    b->shm = b->shm_len ? h + 19 : NULL;
    b->net = h + 19 + b->shm_len;
    b->net_len = (uint16_t)(len - 19 - b->shm_len);
    return 0;
}

static const char *mode_name(int m)
{
    return m == SHM_OFF ? "0" : m == SHM_ON ? "1" : "auto";
}

/* The link's kind from both ends' blocks: 1 shm, 0 the configured
 * transport, -1 when they disagree (why says so). Symmetric. */
static int mixed_link(const struct mixed_block *a, const struct mixed_block *b, char *why,
                      size_t n)
{
    if (a->host_id != b->host_id)
        return 0;
    int forced = a->mode == SHM_ON || b->mode == SHM_ON;
    if (a->mode != SHM_OFF && b->mode != SHM_OFF && a->netns == b->netns)
        return 1;
    if (!forced)
        return 0;
    if (a->mode == SHM_OFF || b->mode == SHM_OFF)
        snprintf(why, n, "is on this host with HOOP_SHM=%s where this rank has HOOP_SHM=%s (or "
                 "shared memory cannot work on one of them, as its log says): set HOOP_SHM the "
                 "same on every rank of a host", mode_name(b->mode), mode_name(a->mode));
    else
        snprintf(why, n, "is on this host but in another network namespace, where shared "
                 "memory cannot reach it, and HOOP_SHM=1 insists on it: use HOOP_SHM=auto");
    return -1;
}

int hoop_mixed_link_is_shm(const uint8_t *a, uint16_t alen, const uint8_t *b, uint16_t blen)
{
    struct mixed_block x, y;
    char why[8];
    return mixed_parse(a, alen, &x) == 0 && mixed_parse(b, blen, &y) == 0 &&
           mixed_link(&x, &y, why, sizeof(why)) == 1;
}

static uint64_t self_netns(void)
{
    char ns[64];
    ssize_t nl = readlink("/proc/self/ns/net", ns, sizeof(ns));
    return nl > 0 ? hoop_fnv1a(HOOP_FNV1A_INIT, ns, (size_t)nl) : 0;
}

static hoop_status_t mixed_listen(void *vtp, const struct sockaddr *local, socklen_t len,
                                  uint8_t *handle, uint16_t *handle_len)
{
    struct mixed_tp *tp = vtp;
    uint16_t sl = 0, nl = 0;
    hoop_status_t st;
    handle[0] = MIXED_VERSION;
    handle[1] = (uint8_t)(tp->stp ? tp->mode : SHM_OFF);
    memcpy(handle + 2, &tp->host_id, 8);
    memcpy(handle + 10, &tp->netns, 8);
    if (tp->stp &&
        (st = hoop_transport_shm.listen(tp->stp, local, len, handle + 19, &sl)))
        return st;
    handle[18] = (uint8_t)sl;
    st = tp->net->listen(tp->ntp, local, len, handle + 19 + sl, &nl);
    *handle_len = (uint16_t)(19 + sl + nl);
    return st;
}

static int mixed_handle_check(void *vtp, const uint8_t *handle, uint16_t len, char *why,
                              size_t n)
{
    struct mixed_tp *tp = vtp;
    struct mixed_block b, self = {.mode = tp->stp ? tp->mode : SHM_OFF, .host_id = tp->host_id,
                                  .netns = tp->netns};
    if (mixed_parse(handle, len, &b)) {
        snprintf(why, n, "published a handle this rank cannot read (%u bytes): run the same "
                 "hoop build everywhere", len);
        return -1;
    }
    int kind = mixed_link(&self, &b, why, n);
    if (kind < 0)
        return -1;
    if (kind == 0 && tp->net->handle_check)
        return tp->net->handle_check(tp->ntp, b.net, b.net_len, why, n);
    return 0;
}

/* Rank q's block, from the ring's table; -1 when it cannot be read. */
static int mixed_peer(struct mixed_tp *tp, int q, struct mixed_block *b)
{
    const uint8_t *h;
    uint16_t hl;
    if (!tp->ring || !tp->ring->peers)
        return -1;
    hoop_ring_peer_handle(tp->ring, q, &h, &hl);
    return mixed_parse(h, hl, b);
}

static int mixed_kind(struct mixed_tp *tp, const struct mixed_block *b)
{
    struct mixed_block self = {.mode = tp->stp ? tp->mode : SHM_OFF, .host_id = tp->host_id,
                               .netns = tp->netns};
    char why[8];
    return tp->stp && mixed_link(&self, b, why, sizeof(why)) == 1;
}

/* The pid of every rank that may connect through shared memory. */
static void mixed_learn_pids(struct mixed_tp *tp)
{
    if (tp->pids_known || !tp->stp || !tp->ring || !tp->ring->peers)
        return;
    for (int q = 0; q < tp->ring->size; q++) {
        struct mixed_block b;
        if (q != tp->rank && mixed_peer(tp, q, &b) == 0 && b.shm) {
            uint32_t pid;
            memcpy(&pid, b.shm, 4);
            hoop_shm_expect_pid(tp->stp, q, pid);
        }
    }
    tp->pids_known = 1;
}

static hoop_status_t mixed_wrap(struct mixed_tp *tp, int shm, void *c, void **out)
{
    struct mixed_conn *m = malloc(sizeof(*m));
    if (!m) {
        (shm ? &hoop_transport_shm : tp->net)->close(c);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory", tp->rank);
    }
    *m = (struct mixed_conn){.tp = tp, .shm = shm, .c = c};
    if (shm)
        tp->nshm++;
    else
        tp->nnet++;
    *out = m;
    return HOOP_OK;
}

static hoop_status_t mixed_connect(void *vtp, int peer, int channel, const char *peer_host,
                                   const uint8_t *handle, uint16_t handle_len, uint64_t comm_id,
                                   uint64_t deadline_ns, void **out)
{
    struct mixed_tp *tp = vtp;
    struct mixed_block b;
    if (mixed_parse(handle, handle_len, &b))
        return hoop_error(HOOP_ERR_PEER, "rank %d: rank %d (%s) published a handle this rank "
                          "cannot read (%u bytes)", tp->rank, peer, peer_host, handle_len);
    mixed_learn_pids(tp);
    int shm = mixed_kind(tp, &b);
    void *c = NULL;
    hoop_status_t st =
        shm ? hoop_transport_shm.connect(tp->stp, peer, channel, peer_host, b.shm, b.shm_len,
                                         comm_id, deadline_ns, &c)
            : tp->net->connect(tp->ntp, peer, channel, peer_host, b.net, b.net_len, comm_id,
                               deadline_ns, &c);
    return st ? st : mixed_wrap(tp, shm, c, out);
}

static hoop_status_t mixed_accept(void *vtp, int peer, int channel, const char *peer_host,
                                  uint64_t comm_id, uint64_t deadline_ns, void **out)
{
    struct mixed_tp *tp = vtp;
    struct mixed_block b;
    if (mixed_peer(tp, peer, &b))
        return hoop_error(HOOP_ERR_PEER, "rank %d: rank %d (%s) published a handle this rank "
                          "cannot read", tp->rank, peer, peer_host);
    mixed_learn_pids(tp);
    int shm = mixed_kind(tp, &b);
    void *c = NULL;
    hoop_status_t st =
        shm ? hoop_transport_shm.accept(tp->stp, peer, channel, peer_host, comm_id, deadline_ns,
                                        &c)
            : tp->net->accept(tp->ntp, peer, channel, peer_host, comm_id, deadline_ns, &c);
    if (st)
        return st;
    return mixed_wrap(tp, shm, c, out);
}

/* Shared memory's connect may go early: the configured transport's
 * decides. */
static int mixed_connect_early(void *vtp)
{
    struct mixed_tp *tp = vtp;
    return tp->net->connect_early && tp->net->connect_early(tp->ntp);
}

/* What this rank opened over the configured transport; shared memory
 * leaves nothing to finish. */
static hoop_status_t mixed_settle(void *vtp, uint64_t comm_id, uint64_t deadline_ns)
{
    struct mixed_tp *tp = vtp;
    return tp->nnet && tp->net->settle ? tp->net->settle(tp->ntp, comm_id, deadline_ns) : HOOP_OK;
}

static int mixed_isend(void *vc, struct hoop_tp_req *req)
{
    struct mixed_conn *m = vc;
    if (m->shm && req->on_device)
        return -EOPNOTSUPP; /* never offered: see mixed_device_memory_trial */
    return m->shm ? hoop_transport_shm.isend(m->c, req) : m->tp->net->isend(m->c, req);
}

/* GPUDirect RDMA: the configured transport's, while no connection of this
 * rank is shared memory (which takes host memory only; the ring's links
 * are made before the first call on device buffers asks). */
static int mixed_device_memory_trial(void *vtp, int kind, int device, void *p, size_t len,
                                     int fd, uint64_t off, char *why, size_t n)
{
    struct mixed_tp *tp = vtp;
    if (tp->nshm) {
        snprintf(why, n, "shared memory carries this rank's links to ranks of its host, and "
                 "takes host memory only");
        return -EOPNOTSUPP;
    }
    return tp->net->device_memory_trial(tp->ntp, kind, device, p, len, fd, off, why, n);
}

static void mixed_use_device_memory(void *vtp, int kind, int device,
                                    hoop_dmabuf_export_fn export_fn)
{
    struct mixed_tp *tp = vtp;
    tp->net->use_device_memory(tp->ntp, kind, device, export_fn);
}

static int mixed_irecv(void *vc, struct hoop_tp_req *req)
{
    struct mixed_conn *m = vc;
    return m->shm ? hoop_transport_shm.irecv(m->c, req) : m->tp->net->irecv(m->c, req);
}

/* Both kinds at once: look at each without waiting for the busy-poll
 * time, then sleep in the configured transport's wait, which watches the
 * shm transport's descriptor (armed first, so its peers ring it). */
static int mixed_progress(void *vtp, uint64_t deadline_ns)
{
    struct mixed_tp *tp = vtp;
    if (!tp->nshm)
        return tp->net->progress(tp->ntp, deadline_ns);
    if (!tp->nnet)
        return hoop_transport_shm.progress(tp->stp, deadline_ns);
    uint64_t now = hoop_now_ns();
    uint64_t spin_until = now + tp->spin_ns < deadline_ns ? now + tp->spin_ns : deadline_ns;
    for (;;) {
        int a = hoop_transport_shm.progress(tp->stp, 0);
        if (a < 0)
            return a; /* -EINTR: a watched descriptor */
        int b = tp->net->progress(tp->ntp, 0);
        if (b == -EDEADLK) /* nothing under way there: wait on shared memory alone */
            return a ? a : hoop_transport_shm.progress(tp->stp, deadline_ns);
        if (b < 0 && b != -EINTR)
            return b;
        if (a + (b > 0 ? b : 0) > 0)
            return a + (b > 0 ? b : 0);
        now = hoop_now_ns();
        if (now >= deadline_ns)
            return 0;
        if (now < spin_until) {
            if (tp->spin_yield)
                sched_yield();
            continue;
        }
        if ((a = hoop_shm_arm(tp->stp)) > 0)
            return a;
        struct epoll_event ev = {.events = EPOLLIN};
        if (epoll_ctl(tp->gate, EPOLL_CTL_ADD, hoop_shm_wait_fd(tp->stp), &ev))
            return -errno;
        b = tp->net->progress(tp->ntp, deadline_ns);
        epoll_ctl(tp->gate, EPOLL_CTL_DEL, hoop_shm_wait_fd(tp->stp), NULL);
        hoop_shm_disarm(tp->stp);
        if (b == -EDEADLK)
            continue;
        if (b > 0 || (b < 0 && b != -EINTR))
            return b;
        /* -EINTR: the shm side or a watched descriptor; the next look says. */
    }
}

static int mixed_watch(void *vtp, int fd)
{
    struct mixed_tp *tp = vtp;
    int rc = tp->net->watch(tp->ntp, fd);
    if (!rc && tp->stp)
        rc = hoop_transport_shm.watch(tp->stp, fd);
    return rc;
}

static void mixed_cancel(void *vtp)
{
    struct mixed_tp *tp = vtp;
    tp->net->cancel(tp->ntp);
    if (tp->stp)
        hoop_transport_shm.cancel(tp->stp);
}

static void mixed_close(void *vc)
{
    struct mixed_conn *m = vc;
    if (!m)
        return;
    if (m->shm) {
        hoop_transport_shm.close(m->c);
        m->tp->nshm--;
    } else {
        m->tp->net->close(m->c);
        m->tp->nnet--;
    }
    free(m);
}

static void mixed_destroy(void *vtp)
{
    struct mixed_tp *tp = vtp;
    tp->net->destroy(tp->ntp);
    if (tp->stp)
        hoop_transport_shm.destroy(tp->stp);
    if (tp->gate >= 0)
        close(tp->gate);
    free(tp);
}

int hoop_mixed_shm_links(const struct hoop_ring *r, int *nlinks, char *links, size_t cap)
{
    int nshm = 0;
    size_t used = 0;
    *nlinks = r->size == 2 ? 1 : r->size;
    if (!r->peers || r->size < 2)
        return 0;
    for (int p = 0; p < r->size; p++) {
        const uint8_t *a, *b;
        uint16_t al, bl;
        int q = r->at[p], q1 = r->at[(p + 1) % r->size]; /* in ring order */
        hoop_ring_peer_handle(r, q, &a, &al);
        hoop_ring_peer_handle(r, q1, &b, &bl);
        if (hoop_mixed_link_is_shm(a, al, b, bl)) {
            nshm++;
            if (links && used < cap)
                used += (size_t)snprintf(links + used, cap - used, "%s%d>%d", used ? " " : "",
                                         q, q1);
        }
    }
    return r->size == 2 ? (nshm ? 1 : 0) : nshm;
}

/* The configured transport's words, and which ring links are shared
 * memory (the same on every rank: from the table). */
static const char *mixed_describe(void *vtp)
{
    struct mixed_tp *tp = vtp;
    const char *net = tp->net->describe(tp->ntp);
    const struct hoop_ring *r = tp->ring;
    if (!r || !r->peers || r->size < 2)
        return net;
    char links[400] = "";
    int nlinks, nshm = hoop_mixed_shm_links(r, &nlinks, links, sizeof(links));
    if (nshm == 0)
        return net;
    if (nshm == nlinks)
        snprintf(tp->desc, sizeof(tp->desc), "shm (every ring link; %s to other hosts)", net);
    else
        snprintf(tp->desc, sizeof(tp->desc), "%s, shm on ring links %s", net, links);
    return tp->desc;
}

static int mixed_probe(char *why, size_t n)
{
    return 0;
}

static void mixed_peer_ended(void *vtp, int peer)
{
    struct mixed_tp *tp = vtp;
    if (tp->net->peer_ended)
        tp->net->peer_ended(tp->ntp, peer);
    if (tp->stp)
        hoop_transport_shm.peer_ended(tp->stp, peer);
}

static void mixed_set_busy_poll(void *vtp, uint64_t ns, int yield)
{
    struct mixed_tp *tp = vtp;
    tp->spin_ns = ns;
    tp->spin_yield = yield;
    if (tp->net->set_busy_poll)
        tp->net->set_busy_poll(tp->ntp, ns, yield);
    if (tp->stp)
        hoop_transport_shm.set_busy_poll(tp->stp, ns, yield);
}

static const char *mixed_last_error(void *vtp)
{
    struct mixed_tp *tp = vtp;
    const char *s = tp->stp ? hoop_transport_shm.last_error(tp->stp) : NULL;
    if (s && *s)
        return s;
    return tp->net->last_error ? tp->net->last_error(tp->ntp) : NULL;
}

static void mixed_call_end(void *vtp)
{
    struct mixed_tp *tp = vtp;
    if (tp->net->call_end)
        tp->net->call_end(tp->ntp);
}

static const struct hoop_transport_ops mixed_template = {
    .size = sizeof(struct hoop_transport_ops),
    .listen = mixed_listen,
    .connect = mixed_connect,
    .accept = mixed_accept,
    .isend = mixed_isend,
    .irecv = mixed_irecv,
    .progress = mixed_progress,
    .watch = mixed_watch,
    .cancel = mixed_cancel,
    .close = mixed_close,
    .destroy = mixed_destroy,
    .describe = mixed_describe,
    .probe = mixed_probe,
    .handle_check = mixed_handle_check,
    .settle = mixed_settle,
    .connect_early = mixed_connect_early,
    .peer_ended = mixed_peer_ended,
    .set_busy_poll = mixed_set_busy_poll,
    .last_error = mixed_last_error,
    .call_end = mixed_call_end,
};

hoop_status_t hoop_mixed_create(const struct hoop_transport_ops *net,
                                const struct hoop_tp_params *p, void **out,
                                const struct hoop_transport_ops **ops)
{
    int mode;
    hoop_status_t st = hoop_param_auto01("HOOP_SHM", &mode);
    if (st)
        return hoop_error(st, "rank %d: %s", p->rank, hoop_last_error());
    struct mixed_tp *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory", p->rank);
    tp->ops = mixed_template;
    tp->ops.name = net->name;
    /* Only a configured transport that registers device memory gives the
     * table GPUDirect's ops (ring/gdr.c: one without them moves host
     * memory only). */
    if (net->device_memory_trial && net->use_device_memory) {
        tp->ops.device_memory_trial = mixed_device_memory_trial;
        tp->ops.use_device_memory = mixed_use_device_memory;
        tp->ops.device_memory_kinds = net->device_memory_kinds;
    }
    tp->net = net;
    tp->rank = p->rank;
    tp->mode = mode;
    struct hoop_peer self;
    hoop_peer_self(&self);
    tp->host_id = self.host_id;
    tp->netns = self_netns();
    tp->spin_ns = 20000;
    tp->gate = -1;
    st = net->create(p, &tp->ntp);
    if (st) {
        free(tp);
        return st;
    }
    char why[256];
    if (mode != SHM_OFF && !hoop_shm_usable(why, sizeof(why))) {
        if (mode == SHM_ON) {
            net->destroy(tp->ntp);
            free(tp);
            return hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: HOOP_SHM=1 but shared memory "
                              "cannot work in this process: %s", p->rank, why);
        }
        HOOP_INFO("rank %d: shared memory is off (%s): same-host ranks use %s", p->rank, why,
                  net->name);
    } else if (mode != SHM_OFF) {
        int rc = 0;
        if ((st = hoop_transport_shm.create(p, &tp->stp)) ||
            (tp->gate = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
            (rc = net->watch(tp->ntp, tp->gate)) != 0) {
            if (!st)
                st = hoop_error(HOOP_ERR_SYSTEM, "rank %d: cannot watch the shared-memory "
                                "transport's descriptor: %s", p->rank,
                                hoop_errno_str(tp->gate < 0 ? -errno : rc));
            if (tp->stp)
                hoop_transport_shm.destroy(tp->stp);
            if (tp->gate >= 0)
                close(tp->gate);
            net->destroy(tp->ntp);
            free(tp);
            return st;
        }
    }
    *out = tp;
    *ops = &tp->ops;
    return HOOP_OK;
}

void *hoop_mixed_net(void *vtp)
{
    return ((struct mixed_tp *)vtp)->ntp;
}

void *hoop_mixed_conn_net(void *vc)
{
    struct mixed_conn *m = vc;
    return m && !m->shm ? m->c : NULL;
}

void hoop_mixed_bind(void *vtp, const struct hoop_ring *r)
{
    ((struct mixed_tp *)vtp)->ring = r;
}
