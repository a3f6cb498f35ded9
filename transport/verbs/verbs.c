/* verbs.c - the RDMA verbs transport's set-up: the device, port and GID it
 * uses, its RC queue pairs (INIT, RTR, RTS with their attributes set from
 * the port and HOOP_IB_*), and the side channel (a tcp transport) over
 * which queue pairs are described to each other. The data path is in
 * data.c; verbs.h draws both. */
#include "transport/verbs/verbs.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "common/clock.h"
#include "common/sock.h"
#include "common/wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A GID that carries an IPv4 address (::ffff:a.b.c.d). */
static int gid_is_ipv4(const union ibv_gid *g)
{
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g->raw, pre, sizeof(pre)) == 0;
}

static void gid_str(const union ibv_gid *g, char *out, size_t n)
{
    if (!inet_ntop(AF_INET6, g->raw, out, (socklen_t)n))
        snprintf(out, n, "?");
}

/* The software devices (rxe, siw): RDMA emulated by the kernel over a
 * socket, slower than the tcp transport on the same link. */
static int dev_is_software(const char *name)
{
    return strncmp(name, "rxe", 3) == 0 || strncmp(name, "siw", 3) == 0;
}

/* The port to use on ctx: `want` (1..), or the first ACTIVE one; 0 if none. */
static uint8_t pick_port(struct ibv_context *ctx, unsigned want, struct ibv_port_attr *pa,
                         char *seen, size_t n)
{
    struct ibv_device_attr da;
    if (verbs_ib.query_device(ctx, &da))
        return 0;
    size_t used = strlen(seen);
    for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
        if (want && p != want)
            continue;
        if (verbs_query_port(ctx, (uint8_t)p, pa))
            continue;
        if (used < n)
            used += (size_t)snprintf(seen + used, n - used, "%s%s port %u %s", used ? ", " : "",
                                     verbs_ib.get_device_name(ctx->device), p,
                                     verbs_ib.port_state_str(pa->state));
        if (pa->state == IBV_PORT_ACTIVE)
            return (uint8_t)p;
    }
    return 0;
}

/* Open the device (HOOP_IB_DEVICE, or the first with an ACTIVE port) and
 * choose its port and GID. */
static hoop_status_t verbs_open(struct verbs_tp *tp)
{
    int ndev = 0;
    struct ibv_device **devs = verbs_ib.get_device_list(&ndev);
    if (!devs || ndev == 0) {
        if (devs)
            verbs_ib.free_device_list(devs);
        return hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: verbs transport: no RDMA device "
                          "(ibv_get_device_list found none: is a driver loaded and "
                          "/dev/infiniband there?)", tp->rank);
    }
    const char *want_dev = hoop_param_str("HOOP_IB_DEVICE");
    unsigned long long want_port;
    hoop_status_t st = hoop_param_u64("HOOP_IB_PORT", 0, 255, &want_port);
    if (st) {
        verbs_ib.free_device_list(devs);
        return st;
    }
    char seen[512] = "";
    struct ibv_port_attr pa;
    for (int i = 0; i < ndev && !tp->ctx; i++) {
        const char *name = verbs_ib.get_device_name(devs[i]);
        if (*want_dev && strcmp(name, want_dev) != 0)
            continue;
        struct ibv_context *ctx = verbs_ib.open_device(devs[i]);
        if (!ctx)
            continue;
        uint8_t port = pick_port(ctx, (unsigned)want_port, &pa, seen, sizeof(seen));
        if (!port) {
            verbs_ib.close_device(ctx);
            continue;
        }
        tp->ctx = ctx;
        tp->port = port;
        snprintf(tp->dev_name, sizeof(tp->dev_name), "%s", name);
    }
    verbs_ib.free_device_list(devs);
    if (!tp->ctx)
        return hoop_error(HOOP_ERR_UNSUPPORTED,
                          "rank %d: verbs transport: no ACTIVE port%s%s%s (found: %s; "
                          "HOOP_IB_DEVICE and HOOP_IB_PORT choose one)", tp->rank,
                          *want_dev ? " on device " : "", want_dev,
                          want_port ? " at the port asked for" : "",
                          seen[0] ? seen : "no device could be opened");
    tp->link_layer = pa.link_layer;
    tp->lid = pa.lid;
    tp->mtu = pa.active_mtu;
    unsigned long long gi = 0;
    int given = hoop_param_is_set("HOOP_IB_GID_INDEX");
    if (given && (st = hoop_param_u64("HOOP_IB_GID_INDEX", 0, 1ull << 31, &gi)))
        return st;
    if (tp->link_layer == IBV_LINK_LAYER_INFINIBAND && !given) {
        tp->gid_index = 0; /* addressed by LID; the GID goes along all the same */
    } else if (given) {
        if ((int)gi >= pa.gid_tbl_len)
            return hoop_error(HOOP_ERR_INVALID, "rank %d: verbs transport: HOOP_IB_GID_INDEX=%llu, "
                              "but %s port %u has %d GIDs", tp->rank, gi, tp->dev_name, tp->port,
                              pa.gid_tbl_len);
        tp->gid_index = (int)gi;
    } else {
        /* RoCE: a RoCE v2 GID that carries an IPv4 address (routable, and
         * what the peers' addresses are), else any RoCE v2 one, else 0. */
        int v2 = -1, v4 = -1;
        for (int k = 0; k < pa.gid_tbl_len && v4 < 0; k++) {
            struct ibv_gid_entry e;
            if (verbs_query_gid_ex(tp->ctx, tp->port, (uint32_t)k, &e))
                continue;
            if (e.gid_type != IBV_GID_TYPE_ROCE_V2)
                continue;
            if (v2 < 0)
                v2 = k;
            if (gid_is_ipv4((const union ibv_gid *)&e.gid))
                v4 = k;
        }
        tp->gid_index = v4 >= 0 ? v4 : v2 >= 0 ? v2 : 0;
    }
    if (verbs_ib.query_gid(tp->ctx, tp->port, tp->gid_index, &tp->gid))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: cannot read GID %d of %s "
                          "port %u: %s", tp->rank, tp->gid_index, tp->dev_name, tp->port,
                          hoop_errno_str(-errno));
    return HOOP_OK;
}

static void verbs_destroy(void *vtp);

static hoop_status_t verbs_create(const struct hoop_tp_params *p, void **out)
{
    struct verbs_tp *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: out of memory", p->rank);
    tp->rank = p->rank;
    tp->size = p->size;
    unsigned long long v;
    hoop_status_t st;
    const char *no_lib;
    if (verbs_lib_load_once(&no_lib)) {
        st = hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: verbs transport: %s; pick another "
                        "transport (HOOP_TRANSPORT=tcp)", p->rank, no_lib);
        goto fail;
    }
    if ((st = hoop_param_u64("HOOP_IB_TIMEOUT", 1, 31, &v)))
        goto fail;
    tp->timeout = (unsigned)v;
    if ((st = hoop_param_u64("HOOP_IB_RETRY_CNT", 0, 7, &v)))
        goto fail;
    tp->retry_cnt = (unsigned)v;
    tp->rnr_retry = 7;
    if ((st = hoop_param_u64("HOOP_IB_ZCOPY_BYTES", 0, 1ull << 40, &v)))
        goto fail;
    tp->zcopy_min = (size_t)v;
    if ((st = verbs_open(tp)))
        goto fail;
    if (!(tp->pd = verbs_ib.alloc_pd(tp->ctx))) {
        st = hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: ibv_alloc_pd on %s: %s",
                        tp->rank, tp->dev_name, hoop_errno_str(-errno));
        goto fail;
    }
    verbs_mr_init(tp);
    if (!(tp->chan = verbs_ib.create_comp_channel(tp->ctx)) ||
        fcntl(tp->chan->fd, F_SETFL, fcntl(tp->chan->fd, F_GETFL) | O_NONBLOCK)) {
        st = hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: completion channel on %s: "
                        "%s", tp->rank, tp->dev_name, hoop_errno_str(-errno));
        goto fail;
    }
    tp->side_ops = &hoop_transport_tcp;
    if ((st = tp->side_ops->create(p, &tp->side)))
        goto fail;
    /* Waits sleep in the side channel's engine: completions wake it. */
    int rc = tp->side_ops->watch(tp->side, tp->chan->fd);
    if (rc) {
        st = hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: watching the completion "
                        "channel: %s", tp->rank, hoop_errno_str(rc));
        goto fail;
    }
    char g[INET6_ADDRSTRLEN];
    gid_str(&tp->gid, g, sizeof(g));
    snprintf(tp->desc, sizeof(tp->desc), "verbs/%s:%u (%s, GID %d %s, MTU %d)", tp->dev_name,
             tp->port, tp->link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "RoCE",
             tp->gid_index, g, 128 << tp->mtu);
    HOOP_INFO("rank %d: %s; payloads of %zu bytes and more sent from the caller's memory%s",
              tp->rank, tp->desc, tp->zcopy_min,
              tp->odp ? ", registrations kept across calls (on-demand paging)"
                      : ", registered once per call (pinned pages)");
    *out = tp;
    return HOOP_OK;
fail:
    verbs_destroy(tp);
    return st;
}

static hoop_status_t verbs_listen(void *vtp, const struct sockaddr *local, socklen_t len,
                                  uint8_t *handle, uint16_t *handle_len)
{
    struct verbs_tp *tp = vtp;
    uint16_t n = 0;
    hoop_status_t st = tp->side_ops->listen(tp->side, local, len, handle + 2, &n);
    if (st)
        return st;
    if (n + 2 > HOOP_TP_HANDLE_MAX)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: the side channel's handle is too long",
                          tp->rank);
    handle[0] = VERBS_HANDLE_VERSION;
    handle[1] = (uint8_t)n;
    *handle_len = (uint16_t)(n + 2);
    return HOOP_OK;
}

/* A queue pair's description: version, MTU, link layer, QP number, PSN,
 * GID, LID, and where its receive slots are. */
static void info_put(const struct verbs_conn *c, uint8_t *p)
{
    const struct verbs_tp *tp = c->tp;
    struct hoop_buf b = {.p = p, .len = VERBS_INFO_BYTES};
    hoop_buf_put_u8(&b, VERBS_HANDLE_VERSION);
    hoop_buf_put_u8(&b, (uint8_t)tp->mtu);
    hoop_buf_put_u8(&b, (uint8_t)tp->link_layer);
    hoop_buf_put_u8(&b, 0);
    hoop_buf_put_u32(&b, c->qp->qp_num);
    hoop_buf_put_u32(&b, c->psn);
    hoop_buf_put_bytes(&b, tp->gid.raw, 16);
    hoop_buf_put_u16(&b, tp->lid);
    hoop_buf_put_u16(&b, 0);
    hoop_buf_put_u64(&b, (uint64_t)(uintptr_t)c->rx);
    hoop_buf_put_u32(&b, c->rx_mr->rkey);
}

struct verbs_peer_info {
    unsigned version, mtu, link_layer;
    uint32_t qpn, psn, rkey;
    uint8_t gid[16];
    uint16_t lid;
    uint64_t rx;
};

static void info_get(const uint8_t *p, struct verbs_peer_info *o)
{
    struct hoop_buf b = {.p = (uint8_t *)p, .len = VERBS_INFO_BYTES};
    o->version = hoop_buf_get_u8(&b);
    o->mtu = hoop_buf_get_u8(&b);
    o->link_layer = hoop_buf_get_u8(&b);
    (void)hoop_buf_get_u8(&b);
    o->qpn = hoop_buf_get_u32(&b);
    o->psn = hoop_buf_get_u32(&b);
    hoop_buf_get_bytes(&b, o->gid, 16);
    o->lid = hoop_buf_get_u16(&b);
    (void)hoop_buf_get_u16(&b);
    o->rx = hoop_buf_get_u64(&b);
    o->rkey = hoop_buf_get_u32(&b);
}

static void verbs_close(void *vconn);

/* The connection's queue pair and slots, and its description sent to the
 * peer over the side channel; the rest is verbs_conn_advance's. */
static hoop_status_t conn_begin(struct verbs_tp *tp, struct verbs_conn *c)
{
    const int depth = 2 * VERBS_SLOTS + 4;
    const size_t bytes = (size_t)VERBS_SLOTS * VERBS_SLOT_BYTES;
    int err = 0;
    const char *what = NULL;
    if (!(c->cq = verbs_ib.create_cq(tp->ctx, 2 * depth, c, tp->chan, 0))) {
        what = "ibv_create_cq";
        goto sys;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0, /* data.c signals some writes (post_write) */
        .cap = {.max_send_wr = depth, .max_recv_wr = depth, .max_send_sge = 2,
                .max_recv_sge = 1},
    };
    if (!(c->qp = verbs_ib.create_qp(tp->pd, &qa))) {
        what = "ibv_create_qp";
        goto sys;
    }
    c->rx = aligned_alloc(4096, bytes);
    c->tx = aligned_alloc(4096, bytes);
    if (!c->rx || !c->tx) {
        errno = ENOMEM;
        what = "slots";
        goto sys;
    }
    memset(c->rx, 0, bytes);
    memset(c->tx, 0, bytes);
    if (!(c->rx_mr = verbs_ib.reg_mr(tp->pd, c->rx, bytes,
                                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) ||
        !(c->tx_mr = verbs_ib.reg_mr(tp->pd, c->tx, bytes, IBV_ACCESS_LOCAL_WRITE))) {
        what = "ibv_reg_mr of the slots (is RLIMIT_MEMLOCK high enough? ulimit -l)";
        goto sys;
    }
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = tp->port,
        .qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
    };
    if ((err = verbs_ib.modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_ACCESS_FLAGS))) {
        what = "queue pair to INIT";
        goto fail;
    }
    c->psn = (uint32_t)(hoop_now_ns() ^ ((uint64_t)tp->rank << 12)) & 0xffffff;
    info_put(c, c->info_out);
    c->hs_out = (struct hoop_tp_req){.buf = c->info_out, .len = sizeof(c->info_out)};
    c->hs_in = (struct hoop_tp_req){.buf = c->info_in, .len = sizeof(c->info_in)};
    if ((err = tp->side_ops->irecv(c->side, &c->hs_in)) ||
        (err = tp->side_ops->isend(c->side, &c->hs_out))) {
        what = "sending its queue pair's description over the side channel";
        goto fail;
    }
    c->state = VERBS_CONN_INFO;
    return HOOP_OK;
sys:
    err = errno ? -errno : -EIO;
fail:
    if (err > 0)
        err = -err; /* ibv_modify_qp returns a positive errno */
    return hoop_error(hoop_status_from_errno(err),
                      "rank %d: verbs transport: connecting with rank %d (%s) over %s: %s: %s",
                      tp->rank, c->peer, c->peer_host, tp->dev_name, what, hoop_errno_str(err));
}

/* Say why c's set-up failed, and fail it: how many requests that ended. */
static int conn_setup_failed(struct verbs_conn *c, const char *what, int err)
{
    struct verbs_tp *tp = c->tp;
    if (err > 0)
        err = -err;
    verbs_note(tp, "setting up the queue pair with rank %d (%s) over %s: %s: %s", c->peer,
               c->peer_host, tp->dev_name, what, hoop_errno_str(err));
    return verbs_conn_fail(c, err);
}

/* The peer's description in: the queue pair to RTR (receives posted) and
 * RTS, and a ready byte each way, since neither end may write before the
 * other's queue pair is at RTR with its receives posted. */
static int conn_to_rts(struct verbs_conn *c)
{
    struct verbs_tp *tp = c->tp;
    struct verbs_peer_info pi;
    info_get(c->info_in, &pi);
    if (pi.version != VERBS_HANDLE_VERSION || pi.qpn == 0 || pi.mtu < IBV_MTU_256 ||
        pi.mtu > IBV_MTU_4096 || pi.link_layer != (unsigned)tp->link_layer)
        return conn_setup_failed(c, "the peer's queue pair description (another version, or "
                                 "another link layer)", -EPROTO);
    c->peer_rx = pi.rx;
    c->peer_rkey = pi.rkey;
    enum ibv_mtu mtu = (enum ibv_mtu)(pi.mtu < (unsigned)tp->mtu ? pi.mtu : (unsigned)tp->mtu);
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = mtu,
        .dest_qp_num = pi.qpn,
        .rq_psn = pi.psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = 12,
        .ah_attr = {.dlid = pi.lid, .sl = 0, .src_path_bits = 0, .port_num = tp->port},
    };
    if (tp->link_layer != IBV_LINK_LAYER_INFINIBAND) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, pi.gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)tp->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    int err = verbs_ib.modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (err)
        return conn_setup_failed(c, "queue pair to RTR (check HOOP_IB_GID_INDEX and that both "
                                 "ports share a subnet and MTU)", err);
    if ((err = verbs_conn_start(c)))
        return conn_setup_failed(c, "posting receives", err);
    a = (struct ibv_qp_attr){
        .qp_state = IBV_QPS_RTS,
        .timeout = (uint8_t)tp->timeout,
        .retry_cnt = (uint8_t)tp->retry_cnt,
        .rnr_retry = (uint8_t)tp->rnr_retry,
        .sq_psn = c->psn,
        .max_rd_atomic = 1,
    };
    if ((err = verbs_ib.modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                        IBV_QP_MAX_QP_RD_ATOMIC)))
        return conn_setup_failed(c, "queue pair to RTS", err);
    c->ready_out = 1;
    c->ready_in = 0;
    c->hs_out = (struct hoop_tp_req){.buf = &c->ready_out, .len = 1};
    c->hs_in = (struct hoop_tp_req){.buf = &c->ready_in, .len = 1};
    if ((err = tp->side_ops->irecv(c->side, &c->hs_in)) ||
        (err = tp->side_ops->isend(c->side, &c->hs_out)))
        return conn_setup_failed(c, "sending the ready byte over the side channel", err);
    c->state = VERBS_CONN_READY;
    return 0;
}

int verbs_conn_advance(struct verbs_conn *c)
{
    struct verbs_tp *tp = c->tp;
    if (c->err || c->state == VERBS_CONN_RUN)
        return 0;
    if (c->hs_out.state == HOOP_REQ_PENDING || c->hs_in.state == HOOP_REQ_PENDING)
        return 0;
    int err = c->hs_out.state ? c->hs_out.state : c->hs_in.state;
    if (c->state == VERBS_CONN_INFO) {
        if (err)
            return conn_setup_failed(c, "swapping queue pair descriptions over the side channel "
                                     "(the peer left, or is not a verbs rank)", err);
        return conn_to_rts(c);
    }
    if (err)
        return conn_setup_failed(c, "waiting for the peer's queue pair to be ready", err);
    if (c->ready_in != 1)
        return conn_setup_failed(c, "the peer's ready byte", -EPROTO);
    /* The side channel's last receive: it ends only when the peer goes. */
    c->bye = (struct hoop_tp_req){.buf = &c->bye_byte, .len = 1};
    if ((err = tp->side_ops->irecv(c->side, &c->bye)))
        return conn_setup_failed(c, "the side channel's watch", err);
    c->credits = VERBS_SLOTS;
    c->state = VERBS_CONN_RUN;
    HOOP_DEBUG("rank %d: verbs transport: queue pair %u with rank %d (%s) is running", tp->rank,
               c->qp->qp_num, c->peer, c->peer_host);
    return 0;
}

static hoop_status_t conn_open(struct verbs_tp *tp, int peer, int channel, const char *peer_host,
                               void *side, void **out)
{
    struct verbs_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        tp->side_ops->close(side);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: verbs transport: out of memory", tp->rank);
    }
    c->tp = tp;
    c->peer = peer;
    c->channel = channel;
    c->side = side;
    snprintf(c->peer_host, sizeof(c->peer_host), "%s", peer_host);
    c->next_conn = tp->conns;
    tp->conns = c;
    hoop_status_t st = conn_begin(tp, c);
    if (st) {
        verbs_close(c);
        return st;
    }
    *out = c;
    return HOOP_OK;
}

static hoop_status_t verbs_connect(void *vtp, int peer, int channel, const char *peer_host,
                                   const uint8_t *handle, uint16_t handle_len, uint64_t comm_id,
                                   uint64_t deadline_ns, void **out)
{
    struct verbs_tp *tp = vtp;
    if (handle_len < 2 || handle[0] != VERBS_HANDLE_VERSION || handle[1] + 2 != handle_len)
        return hoop_error(HOOP_ERR_PEER, "rank %d: verbs transport: rank %d (%s) published a "
                          "handle this version cannot read (%u bytes)", tp->rank, peer, peer_host,
                          handle_len);
    void *side = NULL;
    hoop_status_t st = tp->side_ops->connect(tp->side, peer, channel, peer_host, handle + 2,
                                             handle[1], comm_id, deadline_ns, &side);
    if (st)
        return st;
    return conn_open(tp, peer, channel, peer_host, side, out);
}

/* The side connections are tcp's: their handshakes too (transport.h:
 * settle). */
static hoop_status_t verbs_settle(void *vtp, uint64_t comm_id, uint64_t deadline_ns)
{
    struct verbs_tp *tp = vtp;
    return tp->side_ops->settle ? tp->side_ops->settle(tp->side, comm_id, deadline_ns) : HOOP_OK;
}

static hoop_status_t verbs_accept(void *vtp, int peer, int channel, const char *peer_host,
                                  uint64_t comm_id, uint64_t deadline_ns, void **out)
{
    struct verbs_tp *tp = vtp;
    void *side = NULL;
    hoop_status_t st = tp->side_ops->accept(tp->side, peer, channel, peer_host, comm_id,
                                            deadline_ns, &side);
    if (st)
        return st;
    return conn_open(tp, peer, channel, peer_host, side, out);
}

/* The queue pair to ERR: what is posted is flushed, and the peer's writes
 * into this rank are refused from now on. */
static void qp_to_err(struct verbs_conn *c)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (c->qp)
        verbs_ib.modify_qp(c->qp, &a, IBV_QP_STATE);
}

/* What the queue has been given back (a closed queue pair's flushes). */
static void cq_empty(struct ibv_cq *cq)
{
    struct ibv_wc wc[16];
    while (ibv_poll_cq(cq, 16, wc) > 0)
        ;
}

static void verbs_close(void *vconn)
{
    struct verbs_conn *c = vconn;
    struct verbs_tp *tp = c->tp;
    for (struct verbs_conn **pp = &tp->conns; *pp; pp = &(*pp)->next_conn)
        if (*pp == c) {
            *pp = c->next_conn;
            break;
        }
    verbs_conn_fail(c, -ECANCELED);
    qp_to_err(c);
    if (c->qp)
        verbs_ib.destroy_qp(c->qp);
    if (c->cq) {
        cq_empty(c->cq);
        verbs_ib.destroy_cq(c->cq);
    }
    if (c->rx_mr)
        verbs_ib.dereg_mr(c->rx_mr);
    if (c->tx_mr)
        verbs_ib.dereg_mr(c->tx_mr);
    free(c->rx);
    free(c->tx);
    /* Ends the side channel's watch (and the set-up's messages) first. */
    if (c->side)
        tp->side_ops->close(c->side);
    free(c);
}

static int verbs_watch(void *vtp, int fd)
{
    struct verbs_tp *tp = vtp;
    int rc = hoop_watch_add(&tp->watch, fd);
    return rc ? rc : tp->side_ops->watch(tp->side, fd);
}

/* Every queue pair to ERR (what is posted is flushed, and no peer writes
 * into this rank again), every request ended; the side channel shut, so
 * that the peers learn at once that this rank is leaving. Payloads are
 * copied through the transport's own slots, so no caller's buffer is
 * touched after this. */
static void verbs_cancel(void *vtp)
{
    struct verbs_tp *tp = vtp;
    for (struct verbs_conn *c = tp->conns; c; c = c->next_conn) {
        qp_to_err(c);
        verbs_conn_fail(c, -ECANCELED);
    }
    tp->side_ops->cancel(tp->side);
}

static void verbs_destroy(void *vtp)
{
    struct verbs_tp *tp = vtp;
    if (!tp)
        return;
    while (tp->conns)
        verbs_close(tp->conns);
    if (tp->pd)
        hoop_mr_fini(&tp->mr);
    if (tp->side)
        tp->side_ops->destroy(tp->side);
    if (tp->chan)
        verbs_ib.destroy_comp_channel(tp->chan);
    if (tp->pd)
        verbs_ib.dealloc_pd(tp->pd);
    if (tp->ctx)
        verbs_ib.close_device(tp->ctx);
    hoop_watch_fini(&tp->watch);
    free(tp);
}

static const char *verbs_describe(void *vtp)
{
    return ((struct verbs_tp *)vtp)->desc;
}

/* A device with an ACTIVE port; one that is the kernel's emulation of RDMA
 * (rxe, siw) is usable but slower than tcp, so auto does not pick it. */
static int verbs_probe(char *why, size_t n)
{
    const char *no_lib;
    if (verbs_lib_load_once(&no_lib)) {
        snprintf(why, n, "%s", no_lib);
        return 0;
    }
    int ndev = 0;
    struct ibv_device **devs = verbs_ib.get_device_list(&ndev);
    int best = 0;
    char seen[256] = "";
    for (int i = 0; devs && i < ndev && best < 4; i++) {
        struct ibv_context *ctx = verbs_ib.open_device(devs[i]);
        if (!ctx)
            continue;
        struct ibv_port_attr pa;
        if (pick_port(ctx, 0, &pa, seen, sizeof(seen)))
            best = dev_is_software(verbs_ib.get_device_name(devs[i])) ? (best ? best : -1) : 4;
        verbs_ib.close_device(ctx);
    }
    if (devs)
        verbs_ib.free_device_list(devs);
    if (best == 4)
        snprintf(why, n, "%s", seen);
    else if (best < 0)
        snprintf(why, n, "only the kernel's software RDMA (%s), slower than tcp", seen);
    else
        snprintf(why, n, "no RDMA device with an ACTIVE port%s%s%s", seen[0] ? " (" : "", seen,
                 seen[0] ? ")" : "");
    return best > 0 ? best : 0;
}

/* Registrations of pinned pages go with the call (mr.c). */
static void verbs_call_end(void *vtp)
{
    hoop_mr_idle(&((struct verbs_tp *)vtp)->mr);
}

static const char *verbs_last_error(void *vtp)
{
    struct verbs_tp *tp = vtp;
    return tp->why[0] ? tp->why : NULL;
}

static void verbs_set_busy_poll(void *vtp, uint64_t ns, int yield)
{
    struct verbs_tp *tp = vtp;
    tp->spin_ns = ns;
    tp->spin_yield = yield;
}

const struct hoop_transport_ops hoop_transport_verbs = {
    .size = sizeof(struct hoop_transport_ops),
    .name = "verbs",
    .create = verbs_create,
    .listen = verbs_listen,
    .connect = verbs_connect,
    .accept = verbs_accept,
    .isend = verbs_isend,
    .irecv = verbs_irecv,
    .progress = verbs_progress,
    .watch = verbs_watch,
    .cancel = verbs_cancel,
    .close = verbs_close,
    .destroy = verbs_destroy,
    .describe = verbs_describe,
    .probe = verbs_probe,
    .set_busy_poll = verbs_set_busy_poll,
    .last_error = verbs_last_error,
    .call_end = verbs_call_end,
    .device_memory_trial = verbs_device_memory_trial,
    .use_device_memory = verbs_use_device_memory,
    .device_memory_kinds = HOOP_DEVMEM_BIT(HOOP_DEVMEM_DMABUF) | HOOP_DEVMEM_BIT(HOOP_DEVMEM_PEERMEM),
    .settle = verbs_settle,
};
