/* uring.c - the TCP transport's io_uring engine.
 *
 * The head of each socket's queue is one MSG_WAITALL transfer of the whole
 * rest of the request, in the kernel while the caller reduces; a short
 * completion goes back to the queues, which start it again for the rest.
 * The next request of a queue goes to the kernel as soon as the one ahead
 * completes, inside progress(), before it returns to the caller, so the
 * wire stays busy. */
#include "transport/tcp/tcp.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sock.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* io_uring results are 32-bit: a transfer takes at most this much payload
 * (and the header before it). */
#define TCP_MAX_IO (1u << 30)

/* A watched descriptor: a one-shot POLL_ADD in the kernel while armed. */
struct tcp_uring_watch {
    int fd;
    int armed;
} __attribute__((aligned(8)));

struct tcp_uring {
    struct io_uring ring; /* first: tcp_ring() */
    struct tcp_uring_watch **watch;
    int nwatch;
    int woken;
};

#define TCP_UD_WATCH 4u

static struct io_uring *tcp_ring(struct tcp_tp *tp)
{
    return tp->eng_state;
}

/* The transfers this engine needs, and io_uring_enter, must work too: a
 * sandbox may allow the ring's creation and still refuse the rest. */
static int tcp_uring_check(struct io_uring *ring, int *zc_ok)
{
    struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
    if (!probe)
        return -EOPNOTSUPP;
    int ok = io_uring_opcode_supported(probe, IORING_OP_SENDMSG) &&
             io_uring_opcode_supported(probe, IORING_OP_RECVMSG) &&
             io_uring_opcode_supported(probe, IORING_OP_RECV);
    *zc_ok = io_uring_opcode_supported(probe, IORING_OP_SENDMSG_ZC);
    io_uring_free_probe(probe);
    if (!ok)
        return -EOPNOTSUPP;
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe)
        return -EBUSY;
    io_uring_prep_nop(sqe);
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait(ring, 1);
    if (rc < 0)
        return rc;
    rc = io_uring_peek_cqe(ring, &cqe);
    if (rc < 0)
        return rc;
    rc = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    return rc < 0 ? rc : 0;
}

static int tcp_uring_init(struct tcp_tp *tp)
{
    struct tcp_uring *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    struct io_uring *ring = &e->ring;
    /* coop (the default, bench/RESULTS.md): completions are run when we
     * enter the kernel anyway, with no interrupting IPI. defer needs
     * SINGLE_ISSUER: a communicator must then be driven by the thread that
     * made it. */
    static const unsigned flags[] = {
        [TCP_URING_COOP] = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG,
        [TCP_URING_PLAIN] = 0,
        [TCP_URING_DEFER] = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        [TCP_URING_SQPOLL] = IORING_SETUP_SQPOLL,
    };
    struct io_uring_params p = {.flags = flags[tp->uring_setup], .sq_thread_idle = 100};
    int rc = io_uring_queue_init_params(tp->uring_entries, ring, &p);
    if (rc == -EINVAL || (rc == -EPERM && tp->uring_setup == TCP_URING_SQPOLL)) {
        HOOP_INFO("rank %d: tcp transport: this kernel refuses HOOP_URING_SETUP's flags (%s): a "
                  "plain io_uring instead", tp->rank, hoop_errno_str(rc));
        memset(&p, 0, sizeof(p));
        rc = io_uring_queue_init_params(tp->uring_entries, ring, &p);
    }
    if (rc < 0) {
        free(e);
        return rc;
    }
    int zc_ok = 0;
    if ((rc = tcp_uring_check(ring, &zc_ok)) < 0) {
        io_uring_queue_exit(ring);
        free(e);
        return rc;
    }
    if (tp->zc_min && !zc_ok) {
        HOOP_WARN("rank %d: tcp transport: this kernel's io_uring has no zero-copy send "
                  "(IORING_OP_SENDMSG_ZC, Linux 6.1): HOOP_TCP_ZEROCOPY is ignored", tp->rank);
        tp->zc_min = 0;
    }
    tp->eng_state = e;
    return 0;
}

static void tcp_uring_fini(struct tcp_tp *tp)
{
    struct tcp_uring *e = tp->eng_state;
    if (!e)
        return;
    io_uring_queue_exit(&e->ring); /* ends the armed polls too */
    for (int i = 0; i < e->nwatch; i++)
        free(e->watch[i]);
    free(e->watch);
    free(e);
    tp->eng_state = NULL;
}

/* user_data: the socket's address with the direction in bit 0. */
static int tcp_uring_start(struct tcp_tp *tp, struct tcp_sock *s, int d)
{
    struct io_uring *ring = tcp_ring(tp);
    struct tcp_dir *q = &s->dir[d];
    struct hoop_tp_req *r = q->head;
    size_t hdr_left = r->done < r->hdr_len ? r->hdr_len - r->done : 0;
    size_t off = r->done > r->hdr_len ? r->done - r->hdr_len : 0;
    size_t left = r->len - off;
    unsigned n = left > TCP_MAX_IO ? TCP_MAX_IO : (unsigned)left;
    if (io_uring_sq_space_left(ring) < 1) {
        io_uring_submit(ring);
        if (io_uring_sq_space_left(ring) < 1)
            return -EBUSY;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    int k = 0;
    if (hdr_left)
        q->iov[k++] = (struct iovec){(char *)r->hdr + r->done, hdr_left};
    if (n)
        q->iov[k++] = (struct iovec){(char *)r->buf + off, n};
    q->mh = (struct msghdr){.msg_iov = q->iov, .msg_iovlen = (size_t)k};
    if (d == TCP_TX && tp->zc_min && n >= tp->zc_min) {
        /* Two completions: the transfer's, flagged MORE when it holds the
         * pages, and later the notice that gives them back. */
        io_uring_prep_sendmsg_zc(sqe, s->fd, &q->mh, MSG_WAITALL | MSG_NOSIGNAL);
    } else if (d == TCP_TX) {
        io_uring_prep_sendmsg(sqe, s->fd, &q->mh, MSG_WAITALL | MSG_NOSIGNAL);
    } else if (k == 1) {
        io_uring_prep_recv(sqe, s->fd, q->iov[0].iov_base, (unsigned)q->iov[0].iov_len,
                           MSG_WAITALL);
    } else {
        /* Header and payload in one transfer: one completion per chunk. A
         * header to be checked first is asked for without MSG_WAITALL, so
         * the transfer ends with whatever has come (the whole message, or
         * at least part of the header); the check runs, and the rest goes
         * in a MSG_WAITALL transfer that cannot wait for bytes a sender
         * who disagrees will never send. */
        io_uring_prep_recvmsg(sqe, s->fd, &q->mh, hdr_left && r->check_first ? 0 : MSG_WAITALL);
    }
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)s | (uint64_t)d);
    /* Not while a token reply is still due on a connection this rank
     * opened (settle reads it): a receive posted before that (the verbs
     * side channel's, at connect) would take the reply's bytes. It goes
     * in with the next progress, as in batch mode. */
    if (tp->uring_submit_each && !tp->listener.nout)
        io_uring_submit(ring);
    return 0;
}

static int tcp_uring_reap(struct tcp_tp *tp)
{
    struct io_uring *ring = tcp_ring(tp);
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    int completed = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
        seen++;
        uint64_t ud = cqe->user_data;
        if (ud & TCP_UD_WATCH) {
            struct tcp_uring_watch *w = (struct tcp_uring_watch *)(uintptr_t)(ud & ~(uint64_t)7);
            w->armed = 0;
            ((struct tcp_uring *)tp->eng_state)->woken = 1;
            continue;
        }
        int d = (int)(ud & 1);
        struct tcp_sock *s = (struct tcp_sock *)(uintptr_t)(ud & ~(uint64_t)7);
        if (cqe->flags & IORING_CQE_F_NOTIF) {
            completed += tcp_queue_returned(tp, s);
            continue;
        }
        if (d == TCP_TX && (cqe->flags & IORING_CQE_F_MORE))
            tcp_queue_lent(tp, s);
        completed += tcp_queue_moved(tp, s, d, cqe->res);
    }
    io_uring_cq_advance(ring, seen);
    return completed;
}

static int tcp_uring_watch(struct tcp_tp *tp)
{
    struct tcp_uring *e = tp->eng_state;
    struct tcp_uring_watch *w = calloc(1, sizeof(*w));
    struct tcp_uring_watch **all = realloc(e->watch, (size_t)(e->nwatch + 1) * sizeof(*all));
    if (!w || !all) {
        free(w);
        if (all)
            e->watch = all;
        return -ENOMEM;
    }
    w->fd = tp->watch.fd[tp->watch.n - 1];
    e->watch = all;
    all[e->nwatch++] = w;
    return 0;
}

/* Arm the watches that are not: a readable descriptor completes its poll
 * at once, so a notice that came while nobody waited is seen too. */
static void tcp_uring_arm(struct tcp_uring *e)
{
    for (int i = 0; i < e->nwatch; i++) {
        struct tcp_uring_watch *w = e->watch[i];
        if (w->armed)
            continue;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
        if (!sqe) {
            io_uring_submit(&e->ring);
            if (!(sqe = io_uring_get_sqe(&e->ring)))
                return;
        }
        io_uring_prep_poll_add(sqe, w->fd, POLLIN);
        io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)w | TCP_UD_WATCH);
        w->armed = 1;
    }
}

static int tcp_uring_progress(struct tcp_tp *tp, uint64_t deadline_ns)
{
    struct tcp_uring *e = tp->eng_state;
    struct io_uring *ring = &e->ring;
    tcp_uring_arm(e);
    int completed = tcp_uring_reap(tp);
    if (e->woken && !completed) {
        e->woken = 0;
        return -EINTR;
    }
    e->woken = 0;
    if (completed) {
        io_uring_submit(ring);
        return completed;
    }
    if (tp->inflight == 0 && tp->lent_out == 0)
        return -EDEADLK; /* nothing can complete: a caller bug, not a wait */
    uint64_t now = hoop_now_ns();
    if (tp->spin_ns) {
        /* Busy-poll: completions wait as task work until this task enters
         * the kernel (COOP_TASKRUN), which the TASKRUN flag asks for. */
        io_uring_submit(ring);
        uint64_t until = now + tp->spin_ns < deadline_ns ? now + tp->spin_ns : deadline_ns;
        do {
            if (!io_uring_cq_ready(ring))
                io_uring_get_events(ring);
            completed = tcp_uring_reap(tp);
            if (completed || e->woken)
                break;
            if (tp->spin_yield)
                sched_yield();
            now = hoop_now_ns();
        } while (now < until);
        if (e->woken && !completed) {
            e->woken = 0;
            return -EINTR;
        }
        e->woken = 0;
        if (completed) {
            if (io_uring_sq_ready(ring))
                io_uring_submit(ring);
            return completed;
        }
    }
    uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
    struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000ull),
                                   .tv_nsec = (long long)(left % 1000000000ull)};
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN)
        return rc;
    completed = tcp_uring_reap(tp);
    if (io_uring_sq_ready(ring))
        io_uring_submit(ring);
    if (e->woken && !completed) {
        e->woken = 0;
        return -EINTR;
    }
    e->woken = 0;
    return completed;
}

/* A transfer's SQE points into the caller's buffer until its CQE is reaped.
 * Pages lent to a zero-copy send stay pinned by the kernel until it gives
 * them back, which on a dead stream may be at close: not waited for. */
static void tcp_uring_drain(struct tcp_tp *tp)
{
    struct io_uring *ring = tcp_ring(tp);
    io_uring_submit(ring);
    uint64_t deadline = hoop_now_ns() + 5000000000ull;
    while (tp->inflight > 0 && hoop_now_ns() < deadline) {
        struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
        struct io_uring_cqe *cqe;
        io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
        tcp_uring_reap(tp);
    }
    if (tp->inflight)
        HOOP_WARN("rank %d: tcp transport: %u transfers did not end within 5 s of shutdown",
                  tp->rank, tp->inflight);
}

const struct tcp_engine tcp_engine_uring = {
    .name = "io_uring",
    /* Blocking sockets: io_uring then waits for readiness itself instead of
     * failing the transfer with EAGAIN. */
    .nonblocking = 0,
    .init = tcp_uring_init,
    .fini = tcp_uring_fini,
    .start = tcp_uring_start,
    .progress = tcp_uring_progress,
    .drain = tcp_uring_drain,
    .watch = tcp_uring_watch,
};
