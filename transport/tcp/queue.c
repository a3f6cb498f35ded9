/* queue.c - the TCP transport's requests, whichever engine moves them.
 *
 * Requests are queued per socket and per direction, and striped round-robin
 * over the connection's sockets; only the head of a queue is on the wire,
 * so at most one send and one recv are in progress per socket (a second
 * recv on the same stream could be filled out of order). A short transfer
 * is resumed for the rest. A received header is checked the moment it is
 * complete. The first error of a socket sticks: every request queued on
 * it, and every later one, fails with it. */
#include "transport/tcp/tcp.h"
#include "transport/req_queue.h"
#include "common/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>

/* Returns the number of requests it ended. A request still lending its
 * pages to a zero-copy send fails too: its stream is dead, so whatever the
 * kernel may yet read from them reaches nobody. */
static int tcp_fail_queue(struct tcp_sock *s, int d, int err)
{
    int n = 0;
    for (struct hoop_tp_req *r = s->dir[d].head; r; r = r->next, n++)
        r->state = err;
    for (struct hoop_tp_req *r = s->dir[d].lent_head; r; r = r->next, n++)
        r->state = err;
    s->dir[d].head = s->dir[d].tail = NULL;
    s->dir[d].lent_head = s->dir[d].lent_tail = NULL;
    return n;
}

/* Complete finished heads and hand the next one to the engine. Returns the
 * number of requests completed. */
static int tcp_advance(struct tcp_tp *tp, struct tcp_sock *s, int d)
{
    int completed = 0;
    struct tcp_dir *q = &s->dir[d];
    while (q->head && !q->busy) {
        struct hoop_tp_req *r = q->head;
        if (s->err) {
            completed += tcp_fail_queue(s, d, s->err);
            break;
        }
        if (r->done == hoop_tp_req_total(r)) {
            hoop_req_queue_pop(&q->head, &q->tail);
            if (r->lent > q->zc_done) {
                /* All on the stream, but the kernel may still read its
                 * pages: done when they come back. */
                hoop_req_queue_push(&q->lent_head, &q->lent_tail, r);
                continue;
            }
            r->state = 0;
            completed++;
            continue;
        }
        int rc = tp->eng->start(tp, s, d);
        if (rc) {
            s->err = rc;
            continue;
        }
        q->busy = 1;
        tp->inflight++;
    }
    return completed;
}

/* res more bytes of the head's transfer moved; a receive's header is
 * checked the moment it is complete. Returns 1 when the check failed the
 * request. */
static int tcp_queue_part(struct tcp_sock *s, int d, size_t res)
{
    struct hoop_tp_req *r = s->dir[d].head;
    if (!r)
        return 0;
    size_t before = r->done;
    r->done += res;
    if (d != TCP_RX || !r->check || before >= r->hdr_len || r->done < r->hdr_len)
        return 0;
    int rc = r->check(r);
    if (!rc)
        return 0;
    /* The request ends now, and its socket fails: nothing more read from
     * that stream can be trusted. */
    if (!s->err)
        s->err = rc;
    r->state = rc;
    return 1;
}

int tcp_queue_moved(struct tcp_tp *tp, struct tcp_sock *s, int d, long res)
{
    struct tcp_dir *q = &s->dir[d];
    int completed = 0;
    q->busy = 0;
    tp->inflight--;
    if (res == -EINTR || res == -EAGAIN) {
        /* started again by tcp_advance */
    } else if (res < 0) {
        /* TCP's own timeout (HOOP_TCP_USER_TIMEOUT, keepalive) says the
         * peer's host or the link is gone; -ETIMEDOUT above the transport
         * means a collective's deadline passed. */
        if (!s->err)
            s->err = res == -ETIMEDOUT ? -ENOLINK : (int)res;
    } else if (res == 0) {
        /* Nothing moved on a transfer that was not empty: the peer has
         * closed its end, or TCP gave up on the connection (a read then
         * ends as at a close, and the socket keeps the reason). */
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (!s->err)
            s->err = getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
                             soerr == ETIMEDOUT ? -ENOLINK : -EPIPE;
    } else {
        completed = tcp_queue_part(s, d, (size_t)res);
    }
    if (completed) /* the head, failed by its check: already counted */
        hoop_req_queue_pop(&q->head, &q->tail);
    return completed + tcp_advance(tp, s, d);
}

/* A zero-copy transfer's pages are given back in the order the transfers
 * went out on the stream, except that a late retransmitted copy may still
 * hold earlier ones; by then every byte before the later transfer's is
 * acknowledged, so what the kernel reads there reaches nobody, and
 * counting the returns is enough. */
void tcp_queue_lent(struct tcp_tp *tp, struct tcp_sock *s)
{
    struct tcp_dir *q = &s->dir[TCP_TX];
    q->zc_sent++;
    if (q->head)
        q->head->lent = q->zc_sent;
    tp->lent_out++;
}

int tcp_queue_returned(struct tcp_tp *tp, struct tcp_sock *s)
{
    struct tcp_dir *q = &s->dir[TCP_TX];
    int completed = 0;
    q->zc_done++;
    tp->lent_out--;
    while (q->lent_head && q->lent_head->lent <= q->zc_done) {
        struct hoop_tp_req *r = hoop_req_queue_pop(&q->lent_head, &q->lent_tail);
        r->state = 0;
        completed++;
    }
    return completed;
}

static int tcp_post(struct tcp_conn *c, int d, struct hoop_tp_req *req)
{
    struct tcp_sock *s = &c->socks[c->rr[d]++ % (unsigned)c->nsocks];
    req->done = 0;
    req->lent = 0;
    if (s->err) {
        req->state = s->err;
        return s->err;
    }
    req->state = HOOP_REQ_PENDING;
    struct tcp_dir *q = &s->dir[d];
    hoop_req_queue_push(&q->head, &q->tail, req);
    if (!q->busy)
        tcp_advance(c->tp, s, d);
    return 0;
}

int tcp_isend(void *conn, struct hoop_tp_req *req)
{
    return tcp_post(conn, TCP_TX, req);
}

int tcp_irecv(void *conn, struct hoop_tp_req *req)
{
    return tcp_post(conn, TCP_RX, req);
}

int tcp_progress(void *vtp, uint64_t deadline_ns)
{
    struct tcp_tp *tp = vtp;
    return tp->eng->progress(tp, deadline_ns);
}

int tcp_watch(void *vtp, int fd)
{
    struct tcp_tp *tp = vtp;
    int rc = hoop_watch_add(&tp->watch, fd);
    return rc ? rc : tp->eng->watch(tp);
}

void tcp_conn_quiesce(struct tcp_tp *tp, struct tcp_conn *c)
{
    int queued = 0;
    for (int i = 0; i < c->nsocks; i++)
        for (int d = 0; d < 2; d++)
            queued |= c->socks[i].dir[d].head || c->socks[i].dir[d].lent_head;
    if (!queued)
        return;
    for (int i = 0; i < c->nsocks; i++) {
        /* Ends the kernel's transfers on it at once. */
        shutdown(c->socks[i].fd, SHUT_RDWR);
        if (!c->socks[i].err)
            c->socks[i].err = -ECANCELED;
    }
    uint64_t deadline = hoop_now_ns() + 5000000000ull;
    for (int busy = 1; busy && hoop_now_ns() < deadline;) {
        busy = 0;
        for (int i = 0; i < c->nsocks; i++)
            busy |= c->socks[i].dir[TCP_TX].busy || c->socks[i].dir[TCP_RX].busy;
        if (busy && tp->eng->progress(tp, hoop_now_ns() + 100000000ull) == -EDEADLK)
            break;
    }
    for (int i = 0; i < c->nsocks; i++)
        for (int d = 0; d < 2; d++)
            tcp_fail_queue(&c->socks[i], d, -ECANCELED);
}

void tcp_cancel(void *vtp)
{
    struct tcp_tp *tp = vtp;
    for (struct tcp_conn *c = tp->conns; c; c = c->next_conn)
        for (int i = 0; i < c->nsocks; i++) {
            struct tcp_sock *s = &c->socks[i];
            /* Shutting the socket ends the kernel's pending transfers on it
             * at once, and tells the peer this rank is leaving. */
            shutdown(s->fd, SHUT_RDWR);
            if (!s->err)
                s->err = -ECANCELED;
        }
    tp->eng->drain(tp);
    for (struct tcp_conn *c = tp->conns; c; c = c->next_conn)
        for (int i = 0; i < c->nsocks; i++)
            for (int d = 0; d < 2; d++)
                tcp_fail_queue(&c->socks[i], d, -ECANCELED);
}
