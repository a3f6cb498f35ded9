/* poll.c - the TCP transport's poll() engine, for where io_uring is
 * refused (Docker's default seccomp profile since 25.0, the
 * kernel.io_uring_disabled sysctl, gVisor).
 *
 * Bytes move only inside progress(): poll() on the sockets that have work
 * until one is ready or the deadline passes, then non-blocking send() and
 * recv() on each ready direction until the kernel would block. Nothing is
 * left with the kernel between calls, so once progress() or cancel() has
 * returned no buffer is touched until the next progress(). */
#include "transport/tcp/tcp.h"
#include "common/clock.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

struct tcp_poll {
    struct pollfd *pfd;
    struct tcp_sock **sock; /* the socket of each pfd */
    size_t cap;
};

static int tcp_poll_init(struct tcp_tp *tp)
{
    struct tcp_poll *e = calloc(1, sizeof(*e));
    if (!e)
        return -ENOMEM;
    tp->eng_state = e;
    return 0;
}

static void tcp_poll_fini(struct tcp_tp *tp)
{
    struct tcp_poll *e = tp->eng_state;
    if (!e)
        return;
    free(e->pfd);
    free(e->sock);
    free(e);
    tp->eng_state = NULL;
}

static int tcp_poll_start(struct tcp_tp *tp, struct tcp_sock *s, int d)
{
    return 0; /* the bytes move in progress() */
}

/* Move direction d of s until the kernel would block. Returns the number of
 * requests completed. */
static int tcp_poll_io(struct tcp_tp *tp, struct tcp_sock *s, int d)
{
    int completed = 0;
    while (s->dir[d].busy) {
        struct hoop_tp_req *r = s->dir[d].head;
        /* The rest of the header and the payload in one call, which
         * never waits: a header is checked as soon as it is in, whether
         * or not some payload came with it. */
        struct iovec iov[2];
        int n_iov = 0;
        if (r->done < r->hdr_len)
            iov[n_iov++] = (struct iovec){(char *)r->hdr + r->done, r->hdr_len - r->done};
        if (r->len) {
            size_t off = r->done > r->hdr_len ? r->done - r->hdr_len : 0;
            iov[n_iov++] = (struct iovec){(char *)r->buf + off, r->len - off};
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
        ssize_t n = d == TCP_TX ? sendmsg(s->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT)
                                : recvmsg(s->fd, &mh, MSG_DONTWAIT);
        if (n < 0 && errno == EAGAIN)
            break;
        completed += tcp_queue_moved(tp, s, d, n < 0 ? -errno : (long)n);
    }
    return completed;
}

/* Entry k of the arrays, growing them as needed: the socket it moves, or
 * NULL for a watched descriptor. 0 or -ENOMEM. */
static int tcp_poll_add(struct tcp_poll *e, size_t k, int fd, short ev, struct tcp_sock *s)
{
    if (k == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 16;
        struct pollfd *pfd = realloc(e->pfd, cap * sizeof(*pfd));
        if (!pfd)
            return -ENOMEM;
        e->pfd = pfd;
        struct tcp_sock **sock = realloc(e->sock, cap * sizeof(*sock));
        if (!sock)
            return -ENOMEM;
        e->sock = sock;
        e->cap = cap;
    }
    e->pfd[k] = (struct pollfd){.fd = fd, .events = ev};
    e->sock[k] = s;
    return 0;
}

/* One pollfd per socket with a busy direction; the array grows with the
 * connections (alltoall's appear on first use) and is then reused. */
static int tcp_poll_gather(struct tcp_tp *tp, nfds_t *count)
{
    struct tcp_poll *e = tp->eng_state;
    size_t n = 0;
    for (struct tcp_conn *c = tp->conns; c; c = c->next_conn)
        for (int i = 0; i < c->nsocks; i++) {
            struct tcp_sock *s = &c->socks[i];
            short ev = (short)((s->dir[TCP_TX].busy ? POLLOUT : 0) |
                               (s->dir[TCP_RX].busy ? POLLIN : 0));
            if (!ev)
                continue;
            if (tcp_poll_add(e, n++, s->fd, ev, s))
                return -ENOMEM;
        }
    for (int i = 0; i < tp->watch.n; i++)
        if (tcp_poll_add(e, n++, tp->watch.fd[i], POLLIN, NULL))
            return -ENOMEM;
    *count = (nfds_t)n;
    return 0;
}

static int tcp_poll_watch(struct tcp_tp *tp)
{
    return 0; /* gathered with the sockets on every wait */
}

static int tcp_poll_progress(struct tcp_tp *tp, uint64_t deadline_ns)
{
    struct tcp_poll *e = tp->eng_state;
    /* HOOP_BUSY_POLL_US: polls that do not sleep until then. */
    uint64_t spin_until = tp->spin_ns ? hoop_now_ns() + tp->spin_ns : 0;
    int looked = 0;
    for (;;) {
        if (tp->inflight == 0)
            return -EDEADLK; /* nothing can complete: a caller bug, not a wait */
        nfds_t n;
        int rc = tcp_poll_gather(tp, &n);
        if (rc)
            return rc;
        uint64_t now = hoop_now_ns();
        uint64_t left = deadline_ns > now ? deadline_ns - now : 0;
        if (now < spin_until) {
            left = 0;
            if (tp->spin_yield && looked)
                sched_yield(); /* after a look that found nothing */
            looked = 1;
        }
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000ull),
                              .tv_nsec = (long)(left % 1000000000ull)};
        rc = ppoll(e->pfd, n, &ts, NULL);
        if (rc < 0 && errno != EINTR)
            return -errno;
        int completed = 0, woken = 0;
        for (nfds_t k = 0; rc > 0 && k < n; k++) {
            short re = e->pfd[k].revents;
            if (!re)
                continue;
            if (!e->sock[k]) {
                woken = 1;
                continue;
            }
            /* An error or hang-up shows itself as the result of the transfer. */
            short bad = re & (POLLERR | POLLHUP | POLLNVAL);
            if (re & (POLLOUT | bad))
                completed += tcp_poll_io(tp, e->sock[k], TCP_TX);
            if (re & (POLLIN | bad))
                completed += tcp_poll_io(tp, e->sock[k], TCP_RX);
        }
        if (completed)
            return completed;
        if (woken)
            return -EINTR;
        if (hoop_now_ns() >= deadline_ns)
            return 0;
    }
}

/* The kernel holds no buffer between calls: only the bookkeeping ends. */
static void tcp_poll_drain(struct tcp_tp *tp)
{
    for (struct tcp_conn *c = tp->conns; c; c = c->next_conn)
        for (int i = 0; i < c->nsocks; i++)
            for (int d = 0; d < 2; d++)
                c->socks[i].dir[d].busy = 0;
    tp->inflight = 0;
}

const struct tcp_engine tcp_engine_poll = {
    .name = "poll",
    .nonblocking = 1,
    .init = tcp_poll_init,
    .fini = tcp_poll_fini,
    .start = tcp_poll_start,
    .progress = tcp_poll_progress,
    .drain = tcp_poll_drain,
    .watch = tcp_poll_watch,
};
