/* msg.c - the libfabric transport's data path: a message is one tagged
 * send of its header and payload (two iovecs), received by a tagged
 * receive of exactly its tag. Where the provider has no room for an
 * operation (-FI_EAGAIN), it waits in a list, in order, and progress()
 * posts it again. */
#include "transport/ofi/ofi.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Operations come from a free list that grows in blocks and is kept: a
 * collective in steady state allocates nothing. */
#define OFI_OPS_BLOCK 64

struct ofi_op *ofi_op_get(struct ofi_tp *tp)
{
    if (!tp->free_ops) {
        struct ofi_op **blocks = realloc(tp->op_blocks, (size_t)(tp->nblocks + 1) * sizeof(*blocks));
        if (!blocks)
            return NULL;
        tp->op_blocks = blocks;
        struct ofi_op *blk = calloc(OFI_OPS_BLOCK, sizeof(*blk));
        if (!blk)
            return NULL;
        tp->op_blocks[tp->nblocks++] = blk;
        for (int i = 0; i < OFI_OPS_BLOCK; i++) {
            blk[i].free = 0;
            ofi_op_put(tp, &blk[i]);
        }
    }
    struct ofi_op *op = tp->free_ops;
    tp->free_ops = op->next;
    if (!tp->free_ops)
        tp->free_tail = NULL;
    memset(op, 0, sizeof(*op));
    return op;
}

void ofi_op_put(struct ofi_tp *tp, struct ofi_op *op)
{
    if (op->free || op->posted) {
        HOOP_WARN("rank %d: ofi transport: operation %p let go twice (%s)", tp->rank, (void *)op,
                  op->free ? "already free" : "still with the provider");
        return;
    }
    op->free = 1;
    op->next = NULL;
    if (tp->free_tail)
        tp->free_tail->next = op;
    else
        tp->free_ops = op;
    tp->free_tail = op;
}

void ofi_op_release(struct ofi_tp *tp, struct ofi_op *op)
{
    for (int i = 0; i < OFI_IOV_MAX; i++) {
        hoop_mr_put(&tp->mr, op->mr[i]);
        op->mr[i] = NULL;
    }
    ofi_op_put(tp, op);
}

void ofi_posted_add(struct ofi_tp *tp, struct ofi_op *op)
{
    op->posted = 1;
    ofi_list_add(&tp->posted, op);
}

void ofi_posted_remove(struct ofi_tp *tp, struct ofi_op *op)
{
    ofi_list_remove(&tp->posted, op);
    op->posted = 0;
}

/* One attempt at handing op to the provider: 0, -EAGAIN (no room), or
 * another -errno. */
static int ofi_op_post(struct ofi_tp *tp, struct ofi_op *op)
{
    ssize_t rc;
    const char *what = op->is_send ? "fi_tsendv" : "fi_trecvv";
    if (op->kind == OFI_OP_PART && op->part == OFI_PART_WRITE) {
        rc = fi_writedata(tp->ep, op->iov[0].iov_base, op->iov[0].iov_len, op->desc[0], op->rdata,
                          op->conn->addr, op->raddr, op->rkey, &op->ctx);
        what = "fi_writedata";
    } else if (op->is_send && tp->delivery_complete && op->req) {
        struct fi_msg_tagged m = {.msg_iov = op->iov, .desc = op->desc, .iov_count = op->niov,
                                  .addr = op->conn->addr, .tag = op->tag, .context = &op->ctx};
        rc = fi_tsendmsg(tp->ep, &m, FI_DELIVERY_COMPLETE);
    } else if (op->is_send)
        rc = fi_tsendv(tp->ep, op->iov, op->desc, op->niov, op->conn->addr, op->tag, &op->ctx);
    else
        rc = fi_trecvv(tp->ep, op->iov, op->desc, op->niov, FI_ADDR_UNSPEC, op->tag, 0, &op->ctx);
    if (rc == 0) {
        ofi_posted_add(tp, op);
        return 0;
    }
    if (rc == -FI_EAGAIN)
        return -EAGAIN;
    ofi_note(tp, what, (int)rc);
    return rc < 0 && rc > -4096 ? (int)rc : -EIO;
}

int ofi_op_start(struct ofi_tp *tp, struct ofi_op *op)
{
    if (!op->ctrl)
        tp->inflight++;
    /* Behind others of its direction that wait, so that a connection's
     * order holds. */
    int d = op->is_send != 0;
    int rc = tp->wait_head[d] ? -EAGAIN : ofi_op_post(tp, op);
    if (rc == -EAGAIN) {
        op->next = NULL;
        if (tp->wait_tail[d])
            tp->wait_tail[d]->next = op;
        else
            tp->wait_head[d] = op;
        tp->wait_tail[d] = op;
        return 0;
    }
    if (rc && !op->ctrl)
        tp->inflight--;
    return rc;
}

int ofi_post_waiting(struct ofi_tp *tp)
{
    int ended = 0;
    for (int d = 0; d < 2; d++)
        while (tp->wait_head[d]) {
            struct ofi_op *op = tp->wait_head[d];
            struct ofi_op *after = op->next;
            int rc = ofi_op_post(tp, op);
            if (rc == -EAGAIN)
                break;
            tp->wait_head[d] = after;
            if (!after)
                tp->wait_tail[d] = NULL;
            if (rc && op->kind == OFI_OP_PART) {
                ended += ofi_part_ended(tp, op, rc, 0);
            } else if (rc) {
                /* This request fails (an ending the caller must see); the
                 * others may still go. */
                if (!op->ctrl)
                    tp->inflight--;
                ended++;
                if (op->req) {
                    op->req->state = rc;
                    ofi_op_release(tp, op);
                } else if (op->ctrl) {
                    ofi_op_release(tp, op);
                } else {
                    op->done = 1;
                    op->err = rc;
                }
            }
        }
    return ended;
}

/* An iovec of op, [buf, buf + len) of req (its payload, or its header
 * when req is NULL), and its descriptor where the provider wants the
 * memory registered: all of it for host memory under FI_MR_LOCAL, and
 * device memory always (FI_MR_HMEM); a payload's registration covers all
 * of its region, when it has one. */
static int ofi_op_iov_of(struct ofi_tp *tp, struct ofi_op *op, void *buf, size_t len,
                         const struct hoop_tp_req *req)
{
    size_t i = op->niov;
    op->iov[i] = (struct iovec){.iov_base = buf, .iov_len = len};
    op->desc[i] = NULL;
    if ((tp->mr_mode & FI_MR_LOCAL) || (req && req->on_device)) {
        int rc = req ? hoop_mr_get_req(&tp->mr, req, &op->mr[i])
                     : hoop_mr_get(&tp->mr, buf, len, &op->mr[i]);
        if (rc)
            return rc;
        op->desc[i] = op->mr[i]->desc;
    }
    op->niov++;
    return 0;
}

int ofi_op_iov(struct ofi_tp *tp, struct ofi_op *op, void *buf, size_t len)
{
    return ofi_op_iov_of(tp, op, buf, len, NULL);
}

/* The iovecs of a message: the header, then the payload, leaving out what
 * is empty (some providers refuse zero-length entries). */
static int ofi_op_fill(struct ofi_tp *tp, struct ofi_op *op, struct hoop_tp_req *req)
{
    int rc = 0;
    op->niov = 0;
    if (req->hdr_len && !op->is_send)
        memset(req->hdr, 0, req->hdr_len); /* what a truncated message leaves (cq.c) */
    if (req->hdr_len)
        rc = ofi_op_iov(tp, op, req->hdr, req->hdr_len);
    if (!rc && req->len)
        rc = ofi_op_iov_of(tp, op, req->buf, req->len, req);
    else if (!rc && !op->is_send && req->spill && req->spill_len)
        rc = ofi_op_iov(tp, op, req->spill, req->spill_len); /* completion: cq.c */
    return rc;
}

static int ofi_data(void *vconn, struct hoop_tp_req *req, int is_send)
{
    struct ofi_conn *c = vconn;
    struct ofi_tp *tp = c->tp;
    if (tp->dead)
        return -ECANCELED;
    if (tp->gone[c->peer] && (is_send || !tp->ended[c->peer]))
        return -ECONNRESET;
    if (tp->write_min && req->len >= tp->write_min) {
        int rc = is_send ? ofi_write_isend(c, req, c->seq)
                         : ofi_write_irecv(c, req, c->seq);
        if (rc)
            return rc;
        c->seq++;
        if (!is_send && tp->ended[c->peer]) {
            ofi_settle(tp, c->peer);
            if (req->state == HOOP_REQ_PENDING)
                ofi_xfers_end(tp, c->peer, -ECONNRESET);
        }
        return 0;
    }
    struct ofi_op *op = ofi_op_get(tp);
    if (!op)
        return -ENOMEM;
    op->kind = is_send ? OFI_OP_SEND : OFI_OP_RECV;
    op->is_send = is_send;
    op->req = req;
    op->conn = c;
    /* The sender's rank names the message on both ends. */
    op->tag = OFI_TAG(OFI_KIND_DATA, c->channel, is_send ? tp->rank : c->peer, c->seq);
    int rc = ofi_op_fill(tp, op, req);
    if (rc) {
        ofi_op_release(tp, op);
        return rc;
    }
    req->done = 0;
    req->state = HOOP_REQ_PENDING;
    if ((rc = ofi_op_start(tp, op))) {
        req->state = 0;
        ofi_op_release(tp, op);
        return rc;
    }
    c->seq++;
    if (!is_send && tp->ended[c->peer]) {
        /* From a process that has ended: only what it sent before can
         * come, and it is here already. */
        ofi_settle(tp, c->peer);
        if (req->state == HOOP_REQ_PENDING && op->posted && op->req == req) {
            req->state = -ECONNRESET;
            op->req = NULL;
            op->orphan = 1;
            tp->inflight--;
        }
    }
    return 0;
}

int ofi_isend(void *conn, struct hoop_tp_req *req)
{
    return ofi_data(conn, req, 1);
}

int ofi_irecv(void *conn, struct hoop_tp_req *req)
{
    return ofi_data(conn, req, 0);
}

int ofi_hangup_expect(struct ofi_tp *tp, int peer)
{
    if (tp->hangup_rx[peer])
        return 0;
    struct ofi_op *op = ofi_op_get(tp);
    if (!op)
        return -ENOMEM;
    op->kind = OFI_OP_HANGUP;
    op->ctrl = 1;
    op->peer = peer;
    op->tag = OFI_TAG(OFI_KIND_CTRL, 0, peer, 0);
    int rc = ofi_op_iov(tp, op, &op->small, sizeof(op->small));
    if (!rc)
        rc = ofi_op_start(tp, op);
    if (rc) {
        ofi_op_release(tp, op);
        return rc;
    }
    tp->hangup_rx[peer] = op;
    return 0;
}

int ofi_peer_gone(struct ofi_tp *tp, int peer)
{
    tp->gone[peer] = 1;
    int ended = 0;
    /* Those the provider holds end now, and stay with it until it gives
     * them back (cancelling one whose completion is already queued makes
     * rxm report it twice); the ring cancels the whole transport before
     * the caller gets its buffers back. */
    for (struct ofi_op *op = tp->posted; op; op = op->next)
        if (op->req && op->conn && op->conn->peer == peer) {
            op->req->state = -ECONNRESET;
            op->req = NULL;
            op->orphan = 1;
            tp->inflight--;
            ended++;
        }
    ended += ofi_xfers_end(tp, peer, -ECONNRESET);
    /* Those still waiting for room end here. */
    for (int d = 0; d < 2; d++) {
        struct ofi_op **pp = &tp->wait_head[d], *last = NULL;
        while (*pp) {
            struct ofi_op *op = *pp;
            if (op->req && op->conn && op->conn->peer == peer) {
                *pp = op->next;
                tp->inflight--;
                op->req->state = -ECONNRESET;
                ofi_op_release(tp, op);
                ended++;
            } else {
                last = op;
                pp = &op->next;
            }
        }
        tp->wait_tail[d] = last;
    }
    return ended;
}
