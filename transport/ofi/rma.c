/* rma.c - the libfabric transport's written messages: where the
 * provider can write into remote memory (FI_RMA, with remote CQ data), a
 * payload of at least HOOP_OFI_WRITE_BYTES goes straight into the
 * receiver's buffer with fi_writedata, without the copies a provider's own
 * rendezvous may make.
 *
 *   receiver: posts a receive of the header alone and registers its buffer
 *             for remote writes; once the header is in and has passed its
 *             check, sends the sender a CTS (address, key, length,
 *             cookie), tagged with the message's number;
 *   sender:   sends the header as a tagged message of its own at once,
 *             receives the CTS, and, when the lengths agree, writes the
 *             payload with the cookie as CQ data;
 *   receiver: the request ends once the header has passed its check and the
 *             CQ data has named the cookie (tcp;ofi_rxm reports such writes
 *             with length 0: the header's length is the one trusted).
 *
 * The header is checked as it comes, before any byte of the payload is
 * trusted, and nothing is written to a receiver whose check failed (a
 * sender whose length disagrees would not write either): a rank that
 * disagrees fails without a peer's writes under way, which rxm (1.17) does
 * not survive when the endpoint closes. The cookie is a write slot and its
 * generation, so that a late write to a slot given up (after a failure)
 * is recognised and ignored; a failed transport closes its registrations,
 * so that no late write can land in a buffer given back to the caller. */
#include "transport/ofi/ofi.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void slot_free(struct ofi_tp *tp, struct ofi_op *x)
{
    if (x->slot < 0)
        return;
    tp->wslot[x->slot] = NULL;
    tp->wgen[x->slot]++;
    x->slot = -1;
    x->parts--; /* the awaited write */
}

/* The request ends (once): with err, or with x's first error. */
static int xfer_end_request(struct ofi_tp *tp, struct ofi_op *x, int err)
{
    struct hoop_tp_req *q = x->req;
    if (!q)
        return 0;
    if (!err && !x->xerr)
        q->done = hoop_tp_req_total(q);
    q->state = err ? err : x->xerr;
    x->req = NULL;
    tp->inflight--;
    return 1;
}

/* x has no part left: it ends, and is let go. */
static int xfer_maybe_done(struct ofi_tp *tp, struct ofi_op *x)
{
    if (x->parts > 0)
        return 0;
    int ended = xfer_end_request(tp, x, 0);
    ofi_list_remove(&tp->xfers, x);
    ofi_op_release(tp, x);
    return ended;
}

/* A part of x, handed to the provider (or its waiting list): a message of
 * buf, or without buf a CTS (the bytes of cts, or room for them). */
static int xfer_part(struct ofi_tp *tp, struct ofi_op *x, int part, int is_send, uint64_t tag,
                     void *buf, size_t len, const uint8_t *cts)
{
    struct ofi_op *op = ofi_op_get(tp);
    if (!op)
        return -ENOMEM;
    op->kind = OFI_OP_PART;
    op->ctrl = 1;
    op->parent = x;
    op->part = part;
    op->is_send = is_send;
    op->conn = x->conn;
    op->tag = tag;
    if (cts)
        memcpy(op->cts, cts, OFI_CTS_BYTES);
    int rc = ofi_op_iov(tp, op, buf ? buf : op->cts, buf ? len : OFI_CTS_BYTES);
    if (!rc)
        rc = ofi_op_start(tp, op);
    if (rc) {
        ofi_op_release(tp, op);
        return rc;
    }
    x->parts++;
    return 0;
}

static void cts_put(uint8_t *p, uint64_t addr, uint64_t key, uint64_t len, uint32_t cookie)
{
    struct hoop_buf b = {.p = p, .len = OFI_CTS_BYTES};
    hoop_buf_put_u64(&b, addr);
    hoop_buf_put_u64(&b, key);
    hoop_buf_put_u64(&b, len);
    hoop_buf_put_u32(&b, cookie);
}

static struct ofi_op *xfer_new(struct ofi_conn *c, struct hoop_tp_req *req, int is_send)
{
    struct ofi_tp *tp = c->tp;
    struct ofi_op *x = ofi_op_get(tp);
    if (!x)
        return NULL;
    x->kind = OFI_OP_XFER;
    x->is_send = is_send;
    x->req = req;
    x->conn = c;
    x->slot = -1;
    req->done = 0;
    req->state = HOOP_REQ_PENDING;
    tp->inflight++;
    ofi_list_add(&tp->xfers, x);
    return x;
}

/* A start that failed part-way: what was posted ends on its own. */
static int xfer_abandon(struct ofi_tp *tp, struct ofi_op *x, int rc)
{
    struct hoop_tp_req *q = x->req;
    x->req = NULL;
    tp->inflight--;
    q->state = 0;
    slot_free(tp, x);
    xfer_maybe_done(tp, x);
    return rc;
}

int ofi_write_irecv(struct ofi_conn *c, struct hoop_tp_req *req, uint32_t seq)
{
    struct ofi_tp *tp = c->tp;
    struct ofi_op *x = xfer_new(c, req, 0);
    if (!x)
        return -ENOMEM;
    /* The payload's registration is held until the message ends. */
    int rc = hoop_mr_get_req(&tp->mr, req, &x->mr[0]);
    if (rc)
        return xfer_abandon(tp, x, rc);
    int idx = -1;
    for (int i = 0; i < OFI_WSLOTS; i++) {
        int k = (tp->wnext + i) % OFI_WSLOTS;
        if (!tp->wslot[k]) {
            idx = k;
            break;
        }
    }
    if (idx < 0)
        return xfer_abandon(tp, x, -EBUSY);
    tp->wnext = (idx + 1) % OFI_WSLOTS;
    tp->wslot[idx] = x;
    x->slot = idx;
    x->parts = 1; /* the write itself */
    const struct hoop_mr *m = x->mr[0];
    uint64_t addr = tp->mr_mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)req->buf
                                                  : (uint64_t)((uintptr_t)req->buf - m->base);
    uint32_t cookie = ((uint32_t)tp->wgen[idx] << 16) | (uint32_t)idx;
    cts_put(x->cts, addr, m->key, req->len, cookie); /* sent once the header has passed */
    x->tag = OFI_TAG(OFI_KIND_CTS, c->channel, tp->rank, seq);
    memset(req->hdr, 0, req->hdr_len); /* what a truncated header leaves (cq.c) */
    if ((rc = xfer_part(tp, x, OFI_PART_HDR_RECV, 0,
                        OFI_TAG(OFI_KIND_DATA, c->channel, c->peer, seq), req->hdr,
                        req->hdr_len, NULL)))
        return xfer_abandon(tp, x, rc);
    return 0;
}

int ofi_write_isend(struct ofi_conn *c, struct hoop_tp_req *req, uint32_t seq)
{
    struct ofi_tp *tp = c->tp;
    struct ofi_op *x = xfer_new(c, req, 1);
    if (!x)
        return -ENOMEM;
    int rc;
    if ((rc = xfer_part(tp, x, OFI_PART_CTS_RECV, 0,
                        OFI_TAG(OFI_KIND_CTS, c->channel, c->peer, seq), NULL, 0, NULL)) ||
        (rc = xfer_part(tp, x, OFI_PART_HDR_SEND, 1,
                        OFI_TAG(OFI_KIND_DATA, c->channel, tp->rank, seq), req->hdr,
                        req->hdr_len, NULL)))
        return xfer_abandon(tp, x, rc);
    return 0;
}

/* The sender has the CTS: write, if the lengths agree. */
static int xfer_write(struct ofi_tp *tp, struct ofi_op *x, const uint8_t *cts)
{
    struct hoop_buf b = {.p = (uint8_t *)cts, .len = OFI_CTS_BYTES};
    uint64_t addr = hoop_buf_get_u64(&b), key = hoop_buf_get_u64(&b);
    uint64_t len = hoop_buf_get_u64(&b);
    uint32_t cookie = hoop_buf_get_u32(&b);
    struct hoop_tp_req *q = x->req;
    if (!q)
        return 0; /* ended already: nothing to write */
    if (len != q->len)
        return -EMSGSIZE; /* the receiver's check of the header says why */
    struct ofi_op *op = ofi_op_get(tp);
    if (!op)
        return -ENOMEM;
    /* Counted from now: a completion read while the provider has no room
     * must not end x under this write. */
    x->parts++;
    op->kind = OFI_OP_PART;
    op->ctrl = 1;
    op->parent = x;
    op->part = OFI_PART_WRITE;
    op->is_send = 1;
    op->conn = x->conn;
    op->raddr = addr;
    op->rkey = key;
    op->rdata = cookie;
    op->niov = 1;
    op->iov[0] = (struct iovec){.iov_base = q->buf, .iov_len = q->len};
    int rc = 0;
    if ((tp->mr_mode & FI_MR_LOCAL) || q->on_device) {
        if (!(rc = hoop_mr_get_req(&tp->mr, q, &op->mr[0])))
            op->desc[0] = op->mr[0]->desc;
    }
    /* Posted now, or queued behind others where the provider has no room
     * (never a read of the queue from here: this runs inside one). */
    if (!rc)
        rc = ofi_op_start(tp, op);
    if (rc) {
        ofi_op_release(tp, op);
        x->parts--;
    }
    return rc;
}

int ofi_part_ended(struct ofi_tp *tp, struct ofi_op *part, int err, size_t len)
{
    struct ofi_op *x = part->parent;
    int which = part->part;
    uint8_t cts[OFI_CTS_BYTES];
    if (which == OFI_PART_CTS_RECV && !err)
        memcpy(cts, part->cts, sizeof(cts));
    ofi_op_release(tp, part);
    x->parts--;
    int ended = 0;
    struct hoop_tp_req *q = x->req;
    if (which == OFI_PART_HDR_RECV && q && (!err || err == -EMSGSIZE)) {
        /* The header alone is due; anything longer is a sender of another
         * length (or protocol), which the header says when the provider
         * delivered it (done 0: it may not have, as in cq.c). */
        q->done = err ? 0 : q->hdr_len;
        int c = q->check ? q->check(q) : 0;
        if (c || err || len != q->hdr_len)
            err = c ? c : -EMSGSIZE;
        else
            err = xfer_part(tp, x, OFI_PART_CTS_SEND, 1, x->tag, NULL, 0, x->cts);
    }
    if (which == OFI_PART_CTS_RECV && !err)
        err = xfer_write(tp, x, cts);
    if (err && !x->xerr) {
        x->xerr = err;
        /* A receive that failed waits for no write: the slot goes, and a
         * late write to it is ignored. */
        slot_free(tp, x);
        ended += xfer_end_request(tp, x, err);
    }
    return ended + xfer_maybe_done(tp, x);
}

int ofi_write_arrived(struct ofi_tp *tp, uint64_t data)
{
    uint32_t idx = (uint32_t)data & 0xffff, gen = ((uint32_t)data >> 16) & 0xffff;
    if (idx >= OFI_WSLOTS || !tp->wslot[idx] || tp->wgen[idx] != gen) {
        HOOP_DEBUG("rank %d: ofi transport: a write for slot %u (generation %u) nobody awaits",
                   tp->rank, idx, gen);
        return 0;
    }
    struct ofi_op *x = tp->wslot[idx];
    slot_free(tp, x);
    return xfer_maybe_done(tp, x);
}

int ofi_xfers_end(struct ofi_tp *tp, int peer, int err)
{
    int ended = 0;
    for (struct ofi_op *x = tp->xfers, *after; x; x = after) {
        after = x->next;
        if (peer >= 0 && x->conn->peer != peer)
            continue;
        if (!x->xerr)
            x->xerr = err;
        slot_free(tp, x);
        ended += xfer_end_request(tp, x, err);
        ended += xfer_maybe_done(tp, x);
    }
    return ended;
}
