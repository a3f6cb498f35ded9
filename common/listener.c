/* listener.c - a poll loop over the listening socket and the connections
 * that have not finished their hello yet. */
#include "common/listener.h"
#include "common/clock.h"
#include "common/sock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Connections held for their hello at once. Each is a descriptor: the
 * bound keeps a flood of strangers from taking this process's last ones. */
#define HOOP_PENDING_MAX 64
/* Descriptors whose reading ends a serve, at most. */
#define HOOP_LISTENER_WAKE_MAX 8
/* A real peer sends its hello right after connecting. */
#define HOOP_HELLO_GRACE_NS 5000000000ull
/* ... and is never evicted for a newcomer before it has had this long,
 * however loaded the machine: a flood then waits in the kernel's backlog
 * instead of pushing out the rank that came just before it. */
#define HOOP_HELLO_SHIELD_NS 250000000ull

struct hoop_listen_pending {
    int fd;
    uint64_t since;    /* accepted */
    uint64_t deadline; /* since + grace */
    size_t got;        /* bytes of hello + body received */
    uint8_t head[HOOP_HELLO_BYTES];
    struct hoop_hello_msg msg;
    uint8_t *body;
};

int hoop_listener_open(struct hoop_listener *l, int lfd, size_t max_body, const char *who)
{
    memset(l, 0, sizeof(*l));
    l->lfd = lfd;
    l->max_body = max_body;
    snprintf(l->who, sizeof(l->who), "%s", who);
    l->pend = calloc(HOOP_PENDING_MAX, sizeof(*l->pend));
    if (!l->pend)
        return -ENOMEM;
    for (int i = 0; i < HOOP_PENDING_MAX; i++)
        l->pend[i].fd = -1;
    return 0;
}

static void pending_free(struct hoop_listen_pending *p)
{
    if (p->fd >= 0)
        close(p->fd);
    free(p->body);
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

void hoop_listener_close(struct hoop_listener *l)
{
    if (!l->pend)
        return;
    for (int i = 0; i < HOOP_PENDING_MAX; i++)
        pending_free(&l->pend[i]);
    free(l->pend);
    l->pend = NULL;
    hoop_log_limit_flush(&l->log, l->who);
}

static void pending_drop(struct hoop_listener *l, struct hoop_listen_pending *p, const char *why)
{
    hoop_log_limited(&l->log, l->who, "%s: refused connection from %s: %s", l->who,
                     p->msg.addr_str, why);
    pending_free(p);
}

/* Read what is there; 1 when the message is complete, 0 when more is
 * needed, -1 when the connection was dropped. */
static int pending_read(struct hoop_listener *l, struct hoop_listen_pending *p)
{
    for (;;) {
        size_t want;
        uint8_t *dst;
        if (p->got < HOOP_HELLO_BYTES) {
            want = HOOP_HELLO_BYTES - p->got;
            dst = p->head + p->got;
        } else {
            size_t off = p->got - HOOP_HELLO_BYTES;
            want = p->msg.hello.body_len - off;
            dst = p->body + off;
        }
        if (want == 0)
            return 1;
        ssize_t n = recv(p->fd, dst, want, MSG_DONTWAIT);
        if (n == 0) {
            pending_drop(l, p, "closed before finishing its hello");
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            pending_drop(l, p, strerror(errno));
            return -1;
        }
        p->got += (size_t)n;
        if (p->got == HOOP_HELLO_BYTES) {
            int rc = hoop_hello_decode(p->head, l->max_body, &p->msg.hello);
            if (rc) {
                pending_drop(l, p, hoop_hello_strerror(rc));
                return -1;
            }
            if (p->msg.hello.body_len) {
                p->body = malloc(p->msg.hello.body_len);
                if (!p->body) {
                    pending_drop(l, p, "out of memory");
                    return -1;
                }
            }
        }
    }
}

/* Read every pending connection and hand each complete hello to the
 * callback; stops at done. */
static void listener_read_all(struct hoop_listener *l, hoop_hello_cb cb, void *ctx, int *done)
{
    for (int i = 0; i < HOOP_PENDING_MAX && !*done; i++) {
        struct hoop_listen_pending *p = &l->pend[i];
        if (p->fd < 0 || pending_read(l, p) != 1)
            continue;
        p->msg.fd = p->fd;
        p->msg.body = p->body;
        p->msg.log = &l->log;
        if (cb(ctx, &p->msg, done))
            p->fd = -1; /* the callback's now */
        pending_free(p);
    }
}

/* The connection to evict for a newcomer: the one silent longest, else the
 * one longest in the middle of its header, among those that have had their
 * moment; never one that sent a whole header. -1 when there is none; then
 * *wake is when there will be one. */
static int listener_victim(const struct hoop_listener *l, uint64_t now, uint64_t *wake)
{
    int best = -1, best_class = 2;
    for (int i = 0; i < HOOP_PENDING_MAX; i++) {
        const struct hoop_listen_pending *p = &l->pend[i];
        if (p->fd < 0 || p->got >= HOOP_HELLO_BYTES)
            continue;
        if (now < p->since + HOOP_HELLO_SHIELD_NS) {
            if (p->since + HOOP_HELLO_SHIELD_NS < *wake)
                *wake = p->since + HOOP_HELLO_SHIELD_NS;
            continue;
        }
        int cls = p->got > 0;
        if (cls < best_class || (cls == best_class && p->since < l->pend[best].since)) {
            best = i;
            best_class = cls;
        }
    }
    return best;
}

static int accept_error_is_fatal(int err)
{
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* Accept into free slots, evicting as listener_victim says. The number
 * accepted (0 when none was waiting or none could be placed: *blocked then
 * says until when the listening socket must not be polled), or -errno when
 * this process can take no more connections and holds none that could
 * make room. */
static int listener_accept(struct hoop_listener *l, uint64_t now, uint64_t *blocked)
{
    int n = 0;
    *blocked = 0;
    for (;;) {
        int slot = -1, npend = 0;
        for (int i = 0; i < HOOP_PENDING_MAX; i++) {
            if (l->pend[i].fd < 0)
                slot = slot < 0 ? i : slot;
            else
                npend++;
        }
        if (slot < 0) {
            if (n > 0)
                return n; /* read the newcomers before evicting anyone */
            uint64_t wake = UINT64_MAX;
            slot = listener_victim(l, now, &wake);
            if (slot < 0) {
                *blocked = wake;
                return 0;
            }
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(l->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return n;
            if (!accept_error_is_fatal(err))
                continue; /* that connection is gone (ECONNABORTED, a network error) */
            if (n > 0 || npend > 0) {
                /* Those held may finish or be dropped, giving back their
                 * descriptors: try again once one has. */
                *blocked = UINT64_MAX;
                return n;
            }
            return -err;
        }
        struct hoop_listen_pending *p = &l->pend[slot];
        if (p->fd >= 0)
            pending_drop(l, p, "too many connections without a hello; this one was silent longest");
        memset(p, 0, sizeof(*p));
        p->fd = fd;
        p->since = hoop_now_ns();
        p->deadline = p->since + HOOP_HELLO_GRACE_NS;
        memcpy(&p->msg.addr, &ss, sl);
        p->msg.addrlen = sl;
        hoop_sock_addr_str((struct sockaddr *)&ss, p->msg.addr_str, sizeof(p->msg.addr_str));
        n++;
    }
}

int hoop_listener_serve(struct hoop_listener *l, uint64_t deadline_ns, const int *wake, int nwake,
                        hoop_hello_cb cb, void *ctx)
{
    struct pollfd pfd[HOOP_PENDING_MAX + 1 + HOOP_LISTENER_WAKE_MAX];
    int done = 0, result = 0;
    if (nwake > HOOP_LISTENER_WAKE_MAX)
        nwake = HOOP_LISTENER_WAKE_MAX;
    for (;;) {
        /* Hellos that are there are read before anyone is dropped. */
        listener_read_all(l, cb, ctx, &done);
        if (done)
            break;
        uint64_t now = hoop_now_ns();
        if (now >= deadline_ns) {
            result = -ETIMEDOUT;
            break;
        }
        for (int i = 0; i < HOOP_PENDING_MAX; i++)
            if (l->pend[i].fd >= 0 && now >= l->pend[i].deadline)
                pending_drop(l, &l->pend[i], "no complete hello within 5 s");
        uint64_t blocked;
        int got = listener_accept(l, now, &blocked);
        if (got < 0) {
            result = got;
            break;
        }
        if (got > 0)
            continue; /* read them at once */
        uint64_t until = deadline_ns;
        int n = 0;
        for (int i = 0; i < nwake; i++)
            pfd[n++] = (struct pollfd){.fd = wake[i], .events = POLLIN};
        if (!blocked)
            pfd[n++] = (struct pollfd){.fd = l->lfd, .events = POLLIN};
        else if (blocked < until)
            until = blocked;
        for (int i = 0; i < HOOP_PENDING_MAX; i++) {
            if (l->pend[i].fd < 0)
                continue;
            if (l->pend[i].deadline < until)
                until = l->pend[i].deadline;
            pfd[n++] = (struct pollfd){.fd = l->pend[i].fd, .events = POLLIN};
        }
        if (poll(pfd, (nfds_t)n, hoop_ms_left(until)) < 0 && errno != EINTR) {
            result = -errno;
            break;
        }
        int woken = 0;
        for (int i = 0; i < nwake; i++)
            woken |= pfd[i].revents != 0;
        if (woken) {
            result = -EINTR;
            break;
        }
    }
    hoop_log_limit_flush(&l->log, l->who);
    return result;
}
