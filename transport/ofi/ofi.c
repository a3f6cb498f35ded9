/* ofi.c - the libfabric transport: opening the provider's fabric, domain,
 * address vector, completion queue and endpoint, the handle that carries
 * the endpoint's name through the bootstrap, the hello that opens every
 * connection, and the ops table. Choosing the provider is in prov.c, the
 * data path in msg.c, completions and waits in cq.c, registrations in
 * mr.c. */
#include "transport/ofi/ofi.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/sock.h"
#include "common/status.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The handle: version, the provider's name (a length byte and the name),
 * HOOP_OFI_WRITE_BYTES as this rank applies it (u32, little endian), the
 * endpoint's name (a length byte and the name). */
#define OFI_HANDLE_VERSION 2

struct ofi_handle {
    const char *prov;
    size_t plen;
    uint32_t write_min;
    const uint8_t *name;
    size_t nlen;
};

static int ofi_handle_parse(const uint8_t *h, uint16_t len, struct ofi_handle *out)
{
    if (len < 2 || h[0] != OFI_HANDLE_VERSION)
        return -1;
    size_t plen = h[1];
    if ((size_t)len < 2 + plen + 4 + 1)
        return -1;
    size_t nlen = h[2 + plen + 4];
    if ((size_t)len != 2 + plen + 4 + 1 + nlen || nlen == 0 || nlen > OFI_NAME_MAX)
        return -1;
    const uint8_t *w = h + 2 + plen;
    *out = (struct ofi_handle){.prov = (const char *)h + 2, .plen = plen,
                               .write_min = (uint32_t)w[0] | (uint32_t)w[1] << 8 |
                                            (uint32_t)w[2] << 16 | (uint32_t)w[3] << 24,
                               .name = h + 2 + plen + 5, .nlen = nlen};
    return 0;
}

/* 0 when a peer with handle h can talk with this rank, else why not. */
static int ofi_handle_agrees(const struct ofi_tp *tp, const struct ofi_handle *h, char *why,
                             size_t n)
{
    if (h->plen != strlen(tp->prov) || memcmp(h->prov, tp->prov, h->plen) != 0) {
        snprintf(why, n, "uses libfabric provider %.*s and this rank %s: HOOP_OFI_PROVIDER (or "
                 "FI_PROVIDER) must pick the same provider on every rank", (int)h->plen, h->prov,
                 tp->prov);
        return -1;
    }
    if (h->write_min != (uint32_t)tp->write_min) {
        snprintf(why, n, "writes payloads of %u bytes and more and this rank of %zu "
                 "(HOOP_OFI_WRITE_BYTES, 0: never): it must be the same on every rank",
                 h->write_min, tp->write_min);
        return -1;
    }
    return 0;
}

static hoop_status_t ofi_create(const struct hoop_tp_params *p, void **out)
{
    const char *why = NULL;
    const struct ofi_lib *lib = ofi_lib(&why);
    if (!lib)
        return hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: HOOP_TRANSPORT=ofi: %s", p->rank, why);
    if (p->size - 1 > OFI_RANK_MAX)
        return hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: ofi transport: %d ranks are more than "
                          "its tags can name (%d)", p->rank, p->size, OFI_RANK_MAX + 1);
    const char *want = hoop_param_str("HOOP_OFI_PROVIDER");
    struct fi_info *hints = ofi_hints(lib, want), *info = NULL;
    if (!hints)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport: out of memory", p->rank);
    int rc = lib->getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &info);
    lib->freeinfo(hints);
    if (rc || !info) {
        char found[256];
        ofi_list_providers(lib, found, sizeof(found));
        const char *filter = getenv("FI_PROVIDER");
        uint32_t v = lib->version();
        return hoop_error(HOOP_ERR_UNSUPPORTED,
                          "rank %d: HOOP_TRANSPORT=ofi: libfabric %u.%u has no provider%s%s%s%s%s "
                          "with tagged messages on reliable-datagram endpoints (%s); it offers: "
                          "%s", p->rank, FI_MAJOR(v), FI_MINOR(v), *want ? " '" : "", want,
                          *want ? "'" : "", filter ? " within FI_PROVIDER=" : "",
                          filter ? filter : "", lib->strerror(rc < 0 ? -rc : rc), found);
    }
    struct ofi_tp *tp = calloc(1, sizeof(*tp));
    if (!tp) {
        lib->freeinfo(info);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport: out of memory", p->rank);
    }
    tp->lib = lib;
    tp->rank = p->rank;
    tp->size = p->size;
    tp->wait_fd = -1;
    memcpy(tp->token, p->token, HOOP_TOKEN_BYTES);
    snprintf(tp->prov, sizeof(tp->prov), "%s", info->fabric_attr->prov_name);
    snprintf(tp->desc, sizeof(tp->desc), "ofi/%s", tp->prov);
    lib->freeinfo(info);
    *out = tp;
    return HOOP_OK;
}

static hoop_status_t ofi_fail(struct ofi_tp *tp, const char *what, int rc)
{
    return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport (%s): %s: %s", tp->rank, tp->prov,
                      what, tp->lib->strerror(rc < 0 ? -rc : rc));
}

static hoop_status_t ofi_listen(void *vtp, const struct sockaddr *local, socklen_t len,
                                uint8_t *handle, uint16_t *handle_len)
{
    struct ofi_tp *tp = vtp;
    int rc = ofi_getinfo_open(tp, local, len);
    if (rc || !tp->info)
        return ofi_fail(tp, "fi_getinfo", rc);
    struct fi_info *fi = tp->info;
    if (fi->tx_attr->iov_limit < 2 || fi->rx_attr->iov_limit < 2)
        return hoop_error(HOOP_ERR_UNSUPPORTED,
                          "rank %d: ofi transport: provider %s takes %zu iovecs per send and %zu "
                          "per receive; the header and the payload of a message need 2",
                          tp->rank, tp->prov, fi->tx_attr->iov_limit, fi->rx_attr->iov_limit);
    if ((rc = tp->lib->fabric(fi->fabric_attr, &tp->fabric, NULL)))
        return ofi_fail(tp, "fi_fabric", rc);
    struct ofi_sigs sigs;
    ofi_sigs_save(&sigs);
    rc = fi_domain(tp->fabric, fi, &tp->domain, NULL);
    ofi_sigs_restore(&sigs);
    if (rc)
        return ofi_fail(tp, "fi_domain", rc);
    /* A send of shm completes once its bytes are in shared memory, and a
     * receiver that takes them after the sender's process has ended finds
     * them gone (the last collective before a rank exits failed on its
     * peers): there data sends wait until the receiver has them. */
    tp->delivery_complete = strstr(tp->prov, "shm") != NULL;
    tp->mr_mode = fi->domain_attr->mr_mode;
    tp->mr_access = FI_SEND | FI_RECV;
    ofi_mr_init(tp);
    if ((fi->caps & FI_RMA) && fi->domain_attr->cq_data_size >= 4) {
        unsigned long long w;
        hoop_status_t st = hoop_param_u64("HOOP_OFI_WRITE_BYTES", 0, 1ull << 30, &w);
        if (st)
            return st;
        tp->write_min = (size_t)w;
        uint32_t v = tp->lib->version();
        if (w && strstr(tp->prov, "rxm") && FI_MAJOR(v) == 1 && FI_MINOR(v) < 18)
            HOOP_WARN("rank %d: ofi transport: payloads written over %s with libfabric %u.%u, "
                      "whose rxm can segfault inside fi_close of the endpoint when a failure "
                      "(a peer's mismatch or exit) interrupted a write (about 1 job in 40 of "
                      "hoop's tests); written payloads are no faster there than messages",
                      tp->rank, tp->prov, FI_MAJOR(v), FI_MINOR(v));
        tp->mr_access |= FI_WRITE | FI_REMOTE_WRITE;
        tp->wslot = calloc(OFI_WSLOTS, sizeof(*tp->wslot));
        tp->wgen = calloc(OFI_WSLOTS, sizeof(*tp->wgen));
        if (!tp->wslot || !tp->wgen)
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport: out of memory", tp->rank);
    }
    struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC};
    if ((rc = fi_av_open(tp->domain, &av_attr, &tp->av, NULL)))
        return ofi_fail(tp, "fi_av_open", rc);
    /* A queue with a file descriptor to sleep on, where the provider has
     * one; else waits poll the queue (cq.c). */
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
    if (fi_cq_open(tp->domain, &cq_attr, &tp->cq, NULL) == 0 &&
        fi_control(&tp->cq->fid, FI_GETWAIT, &tp->wait_fd) != 0) {
        fi_close(&tp->cq->fid);
        tp->cq = NULL;
    }
    if (!tp->cq) {
        tp->wait_fd = -1;
        cq_attr.wait_obj = FI_WAIT_NONE;
        if ((rc = fi_cq_open(tp->domain, &cq_attr, &tp->cq, NULL)))
            return ofi_fail(tp, "fi_cq_open", rc);
    }
    if ((rc = fi_endpoint(tp->domain, fi, &tp->ep, NULL)))
        return ofi_fail(tp, "fi_endpoint", rc);
    if ((rc = fi_ep_bind(tp->ep, &tp->av->fid, 0)) ||
        (rc = fi_ep_bind(tp->ep, &tp->cq->fid, FI_TRANSMIT | FI_RECV)))
        return ofi_fail(tp, "fi_ep_bind", rc);
    if ((rc = fi_enable(tp->ep)))
        return ofi_fail(tp, "fi_enable", rc);
    tp->enabled = 1;
    size_t nlen = sizeof(tp->name);
    if ((rc = fi_getname(&tp->ep->fid, tp->name, &nlen)))
        return ofi_fail(tp, "fi_getname", rc);
    tp->name_len = nlen;
    size_t plen = strlen(tp->prov);
    if (7 + plen + nlen > HOOP_TP_HANDLE_MAX)
        return hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: ofi transport: provider %s's endpoint "
                          "name (%zu bytes) does not fit a handle", tp->rank, tp->prov, nlen);
    tp->peer_addr = malloc((size_t)tp->size * sizeof(*tp->peer_addr));
    tp->hangup_rx = calloc((size_t)tp->size, sizeof(*tp->hangup_rx));
    tp->gone = calloc((size_t)tp->size, 1);
    tp->ended = calloc((size_t)tp->size, 1);
    tp->hung = calloc((size_t)tp->size, 1);
    if (!tp->peer_addr || !tp->hangup_rx || !tp->gone || !tp->ended || !tp->hung)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport: out of memory", tp->rank);
    for (int r = 0; r < tp->size; r++)
        tp->peer_addr[r] = FI_ADDR_NOTAVAIL;
    uint8_t *p = handle;
    *p++ = OFI_HANDLE_VERSION;
    *p++ = (uint8_t)plen;
    memcpy(p, tp->prov, plen);
    p += plen;
    for (int b = 0; b < 4; b++)
        *p++ = (uint8_t)((uint32_t)tp->write_min >> (8 * b));
    *p++ = (uint8_t)nlen;
    memcpy(p, tp->name, nlen);
    p += nlen;
    *handle_len = (uint16_t)(p - handle);
    HOOP_INFO("rank %d: ofi transport: provider %s, fabric %s, domain %s, %s; payloads %s", tp->rank,
              tp->prov, fi->fabric_attr->name, fi->domain_attr->name,
              tp->wait_fd >= 0 ? "waits sleep on the completion queue"
                               : "waits poll the completion queue",
              tp->write_min ? "of HOOP_OFI_WRITE_BYTES and more written (fi_writedata)"
                            : "sent as tagged messages");
    return HOOP_OK;
}

/* The peer's address, inserted once whatever the channel. */
static int ofi_peer_addr(struct ofi_tp *tp, int peer, const void *name, fi_addr_t *out)
{
    if (tp->peer_addr[peer] == FI_ADDR_NOTAVAIL) {
        fi_addr_t a;
        int rc = fi_av_insert(tp->av, name, 1, &a, 0, NULL);
        if (rc != 1) {
            ofi_note(tp, "fi_av_insert", rc < 0 ? rc : -FI_EINVAL);
            return rc < 0 ? rc : -EINVAL;
        }
        tp->peer_addr[peer] = a;
    }
    *out = tp->peer_addr[peer];
    return 0;
}

static struct ofi_conn *ofi_conn_new(struct ofi_tp *tp, int peer, int channel, int is_tx)
{
    struct ofi_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->tp = tp;
    c->peer = peer;
    c->channel = channel;
    c->is_tx = is_tx;
    c->next_conn = tp->conns;
    tp->conns = c;
    return c;
}

static void ofi_close(void *vconn)
{
    struct ofi_conn *c = vconn;
    for (struct ofi_conn **pp = &c->tp->conns; *pp; pp = &(*pp)->next_conn)
        if (*pp == c) {
            *pp = c->next_conn;
            break;
        }
    free(c);
}

/* Send or receive a hello (a message of the transport's own) and wait for
 * it; 0 or -errno, with the received length in *got. */
static int ofi_hello(struct ofi_tp *tp, struct ofi_conn *c, int is_send, void *buf, size_t len,
                     uint64_t deadline_ns, size_t *got)
{
    struct ofi_op *op = ofi_op_get(tp);
    if (!op)
        return -ENOMEM;
    op->kind = OFI_OP_HELLO;
    op->is_send = is_send;
    op->conn = c;
    op->tag = OFI_TAG(OFI_KIND_HELLO, c->channel, is_send ? tp->rank : c->peer, 0);
    int rc = ofi_op_iov(tp, op, buf, len);
    if (!rc)
        rc = ofi_op_start(tp, op);
    if (!rc)
        rc = ofi_wait_op(tp, op, deadline_ns);
    if (rc == -ETIMEDOUT && op->posted) {
        /* Not taken in time: the provider must let go of the buffer. */
        fi_cancel(&tp->ep->fid, &op->ctx);
        uint64_t until = hoop_now_ns() + 1000000000ull;
        while (!op->done && hoop_now_ns() < until)
            ofi_poll(tp);
        if (!op->done)
            return rc; /* the op stays with the provider; the endpoint goes at destroy */
    }
    *got = op->len;
    ofi_op_release(tp, op);
    return rc;
}

static int ofi_handle_check(void *vtp, const uint8_t *handle, uint16_t handle_len, char *why,
                            size_t n)
{
    struct ofi_handle h;
    if (ofi_handle_parse(handle, handle_len, &h)) {
        snprintf(why, n, "published an ofi handle this version cannot read (%u bytes)",
                 handle_len);
        return -1;
    }
    return ofi_handle_agrees(vtp, &h, why, n);
}

static hoop_status_t ofi_connect(void *vtp, int peer, int channel, const char *peer_host,
                                 const uint8_t *handle, uint16_t handle_len, uint64_t comm_id,
                                 uint64_t deadline_ns, void **out)
{
    struct ofi_tp *tp = vtp;
    struct ofi_handle oh;
    char why[256];
    if (ofi_handle_parse(handle, handle_len, &oh))
        return hoop_error(HOOP_ERR_PEER, "rank %d: ofi transport: rank %d (%s) published a handle "
                          "this version cannot read (%u bytes)", tp->rank, peer, peer_host,
                          handle_len);
    if (ofi_handle_agrees(tp, &oh, why, sizeof(why)))
        return hoop_error(HOOP_ERR_MISMATCH, "rank %d: ofi transport: rank %d (%s) %s", tp->rank,
                          peer, peer_host, why);
    struct ofi_conn *c = ofi_conn_new(tp, peer, channel, 1);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport: out of memory", tp->rank);
    int rc = ofi_peer_addr(tp, peer, oh.name, &c->addr);
    if (rc) {
        ofi_close(c);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport (%s): rank %d (%s)'s address: "
                          "%s", tp->rank, tp->prov, peer, peer_host, tp->err_text);
    }
    /* The hello: who this is, for which job and communicator, and where it
     * can be answered. */
    uint8_t msg[HOOP_HELLO_BYTES + OFI_NAME_MAX];
    struct hoop_hello h = {.kind = HOOP_HELLO_DATA, .rank = (uint32_t)tp->rank,
                           .size = (uint32_t)tp->size, .comm_id = comm_id,
                           .aux = (uint32_t)channel, .body_len = (uint32_t)tp->name_len};
    hoop_hello_encode(&h, msg);
    memcpy(msg + HOOP_HELLO_BYTES, tp->name, tp->name_len);
    /* Sealed with the token, never carrying it; bound to this
     * communicator, rank, channel and endpoint. */
    hoop_auth_seal(tp->token, msg, msg + HOOP_HELLO_BYTES, tp->name_len);
    size_t got;
    rc = ofi_hello(tp, c, 1, msg, HOOP_HELLO_BYTES + tp->name_len, deadline_ns, &got);
    if (!rc)
        rc = ofi_hangup_expect(tp, peer);
    if (rc) {
        ofi_close(c);
        return hoop_error(hoop_status_from_errno(rc), "rank %d: ofi transport (%s): the hello to "
                          "rank %d (%s): %s%s%s", tp->rank, tp->prov, peer, peer_host,
                          hoop_errno_str(rc), tp->err_text[0] ? "; " : "", tp->err_text);
    }
    *out = c;
    return HOOP_OK;
}

static hoop_status_t ofi_accept(void *vtp, int peer, int channel, const char *peer_host,
                                uint64_t comm_id, uint64_t deadline_ns, void **out)
{
    struct ofi_tp *tp = vtp;
    struct ofi_conn *c = ofi_conn_new(tp, peer, channel, 0);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: ofi transport: out of memory", tp->rank);
    uint8_t msg[HOOP_HELLO_BYTES + OFI_NAME_MAX];
    size_t got = 0;
    const char *why = NULL;
    struct hoop_hello h;
    int rc, d;
    char who[64];
    snprintf(who, sizeof(who), "rank %d: ofi transport", tp->rank);
    /* Anyone who reaches this endpoint can send a message with the hello's
     * tag: one that does not carry this job's seal (garbage, a forged or
     * truncated hello, another token or wire version) is not the peer's,
     * and is logged and passed over while the peer's own is awaited. A
     * sealed one that does not fit (another communicator, rank or
     * channel) is the peer's, and refused. */
    for (;;) {
        got = 0;
        rc = ofi_hello(tp, c, 0, msg, sizeof(msg), deadline_ns, &got);
        if (rc == -EMSGSIZE) {
            why = "longer than any hello";
        } else if (rc) {
            break;
        } else {
            d = got >= HOOP_HELLO_BYTES ? hoop_hello_decode(msg, OFI_NAME_MAX, &h) : -EPROTO;
            /* Another version too: no peer of another build gets past
             * the join, which refuses it. */
            if (d)
                why = hoop_hello_strerror(d);
            else if (h.body_len == 0 || HOOP_HELLO_BYTES + h.body_len != got)
                why = "its endpoint name is not the length it says";
            else if (!hoop_auth_sealed(tp->token, msg, msg + HOOP_HELLO_BYTES, h.body_len))
                why = "it does not carry this job's seal (another HOOP_TOKEN, or forged)";
            else
                break;
        }
        hoop_log_limited(&tp->strangers, who,
                         "%s (%s): passed over a hello with rank %d's tag: %s; waiting for its own",
                         who, tp->prov, peer, why);
        why = NULL;
    }
    hoop_log_limit_flush(&tp->strangers, who);
    if (!rc) {
        d = hoop_hello_decode(msg, OFI_NAME_MAX, &h);
        if (d)
            why = hoop_hello_strerror(d);
        else if (h.kind != HOOP_HELLO_DATA)
            why = "not a data connection's hello";
        else if (h.comm_id != comm_id)
            why = "belongs to another communicator";
        else if (h.rank != (uint32_t)peer || h.aux != (uint32_t)channel)
            why = "claims another rank or channel";
    }
    if (!rc && !why && (rc = ofi_peer_addr(tp, peer, msg + HOOP_HELLO_BYTES, &c->addr)))
        why = tp->err_text;
    if (!rc && !why)
        rc = ofi_hangup_expect(tp, peer);
    if (rc || why) {
        ofi_close(c);
        if (why)
            return hoop_error(HOOP_ERR_PEER, "rank %d: ofi transport (%s): refused the hello of "
                              "rank %d (%s): %s", tp->rank, tp->prov, peer, peer_host, why);
        return hoop_error(hoop_status_from_errno(rc), "rank %d: ofi transport (%s): waiting for "
                          "the hello of rank %d (%s): %s%s%s", tp->rank, tp->prov, peer, peer_host,
                          hoop_errno_str(rc), tp->err_text[0] ? "; " : "", tp->err_text);
    }
    *out = c;
    return HOOP_OK;
}

static void ofi_destroy(void *vtp)
{
    struct ofi_tp *tp = vtp;
    struct ofi_sigs sigs; /* closing the fabric may stop providers */
    ofi_sigs_save(&sigs);
    HOOP_DEBUG("rank %d: ofi transport: %d blocks of operations, %lu registrations", tp->rank,
               tp->nblocks, tp->mr.regs);
    ofi_shutdown(tp, 0);
    while (tp->conns)
        ofi_close(tp->conns);
    if (tp->parked) {
        /* Its provider may still point into the operations, the
         * registrations and the queues: all of it stays (cq.c). */
        ofi_park_keep(tp);
        ofi_sigs_restore(&sigs);
        return;
    }
    /* The endpoint first: what it still has in flight (a peer's write
     * into a registration, say) ends with it, and only then may the
     * registrations go. */
    if (tp->ep)
        fi_close(&tp->ep->fid);
    hoop_mr_fini(&tp->mr);
    if (tp->cq)
        fi_close(&tp->cq->fid);
    if (tp->av)
        fi_close(&tp->av->fid);
    if (tp->domain)
        fi_close(&tp->domain->fid);
    if (tp->fabric)
        fi_close(&tp->fabric->fid);
    if (tp->info)
        tp->lib->freeinfo(tp->info);
    for (int i = 0; i < tp->nblocks; i++)
        free(tp->op_blocks[i]);
    free(tp->op_blocks);
    free(tp->peer_addr);
    free(tp->hangup_rx);
    free(tp->gone);
    free(tp->ended);
    free(tp->hung);
    free(tp->wslot);
    free(tp->wgen);
    hoop_watch_fini(&tp->watch);
    free(tp);
    ofi_sigs_restore(&sigs);
}

/* Take in every completion there is (what the peer sent before it ended
 * is all here by now), then fail what still waits for it. */
static void ofi_peer_ended(void *vtp, int peer)
{
    struct ofi_tp *tp = vtp;
    if (tp->dead || !tp->ep || tp->gone[peer])
        return;
    ofi_settle(tp, peer);
    /* A send it took may not have said so yet (shm completes a send on
     * delivery, and a receiver can take a message and end before the
     * sender reads the word): give that a moment, sleeping between looks,
     * before what is left fails. */
    uint64_t until = hoop_now_ns() + OFI_SEND_SETTLE_NS;
    while (ofi_pending_with(tp, peer, OFI_WITH_SENDS) && hoop_now_ns() < until) {
        int n = ofi_poll(tp);
        if (n < 0)
            break;
        if (n == 0) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    tp->ended[peer] = 1;
    if (ofi_peer_gone(tp, peer))
        HOOP_INFO("rank %d: ofi transport: rank %d's process ended with transfers left", tp->rank,
                  peer);
}

static const char *ofi_describe(void *vtp)
{
    return ((struct ofi_tp *)vtp)->desc;
}

static void ofi_set_busy_poll(void *vtp, uint64_t ns, int yield)
{
    struct ofi_tp *tp = vtp;
    tp->spin_ns = ns;
    tp->spin_yield = yield;
}

const struct hoop_transport_ops hoop_transport_ofi = {
    .size = sizeof(struct hoop_transport_ops),
    .name = "ofi",
    .create = ofi_create,
    .listen = ofi_listen,
    .connect = ofi_connect,
    .accept = ofi_accept,
    .isend = ofi_isend,
    .irecv = ofi_irecv,
    .progress = ofi_progress,
    .watch = ofi_watch,
    .cancel = ofi_cancel,
    .close = ofi_close,
    .destroy = ofi_destroy,
    .describe = ofi_describe,
    .probe = ofi_probe,
    .peer_ended = ofi_peer_ended,
    .handle_check = ofi_handle_check,
    .set_busy_poll = ofi_set_busy_poll,
    .device_memory_trial = ofi_device_memory_trial,
    .use_device_memory = ofi_use_device_memory,
    .device_memory_kinds = HOOP_DEVMEM_BIT(HOOP_DEVMEM_HMEM),
};
