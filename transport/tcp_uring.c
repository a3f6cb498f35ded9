/* tcp_uring.c - the TCP data path on io_uring.
 *
 * At most one send and one recv in flight per socket (a second recv on the
 * same stream could be filled out of order), each a MSG_WAITALL transfer of
 * the whole request; a short completion is resubmitted for the rest. More
 * requests wait in the socket's queue and go to the kernel as soon as the
 * one ahead completes, inside progress(), before it returns to the caller,
 * so the wire stays busy while the caller reduces. */
#include "transport/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

/* io_uring lengths are 32-bit. */
#define TCP_MAX_IO (1u << 30)

hoop_status_t tcp_uring_init(struct tcp_tp *tp, unsigned entries)
{
    /* COOP_TASKRUN: completions are run when we enter the kernel anyway, with
     * no interrupting IPI; no SINGLE_ISSUER, because a communicator may be
     * driven from different threads over its life. */
    struct io_uring_params p = {.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG};
    int rc = io_uring_queue_init_params(entries, &tp->ring, &p);
    if (rc == -EINVAL) {
        memset(&p, 0, sizeof(p));
        rc = io_uring_queue_init_params(entries, &tp->ring, &p);
    }
    if (rc < 0)
        return hoop_error(rc == -EPERM || rc == -ENOSYS ? HOOP_ERR_UNSUPPORTED : HOOP_ERR_SYSTEM,
                          "rank %d: tcp transport: io_uring_setup failed: %s%s", tp->rank,
                          strerror(-rc),
                          rc == -EPERM || rc == -ENOSYS
                              ? " (io_uring is refused here: a seccomp profile or the "
                                "kernel.io_uring_disabled sysctl)"
                              : "");
    tp->ring_ok = 1;
    return HOOP_OK;
}

static int tcp_arm(struct tcp_tp *tp, struct tcp_sock *s, int d)
{
    struct hoop_tp_req *r = s->dir[d].head;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&tp->ring);
    if (!sqe) {
        io_uring_submit(&tp->ring);
        sqe = io_uring_get_sqe(&tp->ring);
        if (!sqe)
            return -EBUSY;
    }
    size_t left = r->len - r->done;
    unsigned n = left > TCP_MAX_IO ? TCP_MAX_IO : (unsigned)left;
    char *p = (char *)r->buf + r->done;
    if (d == TCP_TX)
        io_uring_prep_send(sqe, s->fd, p, n, MSG_WAITALL | MSG_NOSIGNAL);
    else
        io_uring_prep_recv(sqe, s->fd, p, n, MSG_WAITALL);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)s | (uint64_t)d);
    s->dir[d].busy = 1;
    tp->inflight++;
    return 0;
}

static void tcp_fail_queue(struct tcp_sock *s, int d, int err)
{
    for (struct hoop_tp_req *r = s->dir[d].head; r; r = r->next)
        r->state = err;
    s->dir[d].head = s->dir[d].tail = NULL;
}

/* Complete finished heads, move on to the next request. Returns the number
 * of requests completed. */
static int tcp_advance(struct tcp_tp *tp, struct tcp_sock *s, int d)
{
    int completed = 0;
    struct tcp_dir *q = &s->dir[d];
    while (q->head && !q->busy) {
        struct hoop_tp_req *r = q->head;
        if (s->err) {
            completed++;
            tcp_fail_queue(s, d, s->err);
            break;
        }
        if (r->done == r->len) {
            r->state = 0;
            q->head = r->next;
            if (!q->head)
                q->tail = NULL;
            completed++;
            continue;
        }
        int rc = tcp_arm(tp, s, d);
        if (rc) {
            s->err = rc;
            continue;
        }
    }
    return completed;
}

static int tcp_post(struct tcp_conn *c, int d, struct hoop_tp_req *req)
{
    struct tcp_sock *s = &c->socks[c->rr[d]++ % (unsigned)c->nsocks];
    req->done = 0;
    req->next = NULL;
    if (s->err) {
        req->state = s->err;
        return s->err;
    }
    req->state = HOOP_REQ_PENDING;
    struct tcp_dir *q = &s->dir[d];
    if (q->tail)
        q->tail->next = req;
    else
        q->head = req;
    q->tail = req;
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

static int tcp_reap(struct tcp_tp *tp)
{
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    int completed = 0;
    io_uring_for_each_cqe(&tp->ring, head, cqe) {
        seen++;
        tp->inflight--;
        int d = (int)(cqe->user_data & 1);
        struct tcp_sock *s = (struct tcp_sock *)(uintptr_t)(cqe->user_data & ~(uint64_t)1);
        struct hoop_tp_req *r = s->dir[d].head;
        int res = cqe->res;
        s->dir[d].busy = 0;
        if (res == -EINTR || res == -EAGAIN) {
            /* retried by tcp_advance */
        } else if (res < 0) {
            s->err = res;
        } else if (res == 0) {
            /* A zero-byte completion of a non-empty transfer: the peer has
             * closed its end. */
            s->err = -EPIPE;
        } else if (r) {
            r->done += (size_t)res;
        }
        completed += tcp_advance(tp, s, d);
    }
    io_uring_cq_advance(&tp->ring, seen);
    return completed;
}

int tcp_progress(void *vtp, uint64_t deadline_ns)
{
    struct tcp_tp *tp = vtp;
    int completed = tcp_reap(tp);
    if (completed) {
        io_uring_submit(&tp->ring);
        return completed;
    }
    if (tp->inflight == 0)
        return -EDEADLK; /* nothing can complete: a caller bug, not a wait */
    uint64_t now = hoop_now_ns();
    uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
    struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000ull),
                                   .tv_nsec = (long long)(left % 1000000000ull)};
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait_timeout(&tp->ring, &cqe, 1, &ts, NULL);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN)
        return rc;
    completed = tcp_reap(tp);
    if (io_uring_sq_ready(&tp->ring))
        io_uring_submit(&tp->ring);
    return completed;
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
    if (!tp->ring_ok)
        return;
    io_uring_submit(&tp->ring);
    uint64_t deadline = hoop_now_ns() + 5000000000ull;
    while (tp->inflight > 0 && hoop_now_ns() < deadline) {
        struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
        struct io_uring_cqe *cqe;
        io_uring_submit_and_wait_timeout(&tp->ring, &cqe, 1, &ts, NULL);
        tcp_reap(tp);
    }
    if (tp->inflight)
        HOOP_WARN("rank %d: tcp transport: %u transfers did not end within 5 s of shutdown",
                  tp->rank, tp->inflight);
    for (struct tcp_conn *c = tp->conns; c; c = c->next_conn)
        for (int i = 0; i < c->nsocks; i++)
            for (int d = 0; d < 2; d++)
                tcp_fail_queue(&c->socks[i], d, -ECANCELED);
}
