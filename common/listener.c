/* listener.c - a poll loop over the listening socket and the connections
 * that have not finished their hello yet. */
#include "common/listener.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sock.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOOP_PENDING_MAX 32
/* A real peer sends its hello right after connecting. */
#define HOOP_HELLO_GRACE_NS 5000000000ull

struct pending {
    int fd;
    uint64_t deadline;
    size_t got;      /* bytes of hello + body received */
    uint8_t head[HOOP_HELLO_BYTES];
    struct hoop_hello_msg msg;
    uint8_t *body;
};

static void pending_drop(struct pending *p, const char *who, const char *why)
{
    HOOP_WARN("%s: refused connection from %s: %s", who, p->msg.addr_str, why);
    close(p->fd);
    free(p->body);
    memset(p, 0, sizeof(*p));
    p->fd = -1;
}

/* Read what is there; 1 when the message is complete, 0 when more is
 * needed, -1 when the connection was dropped. */
static int pending_read(struct pending *p, size_t max_body, const char *who)
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
            pending_drop(p, who, "closed before finishing its hello");
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            pending_drop(p, who, strerror(errno));
            return -1;
        }
        p->got += (size_t)n;
        if (p->got == HOOP_HELLO_BYTES) {
            int rc = hoop_hello_decode(p->head, max_body, &p->msg.hello);
            if (rc) {
                pending_drop(p, who, hoop_hello_strerror(rc));
                return -1;
            }
            if (p->msg.hello.body_len) {
                p->body = malloc(p->msg.hello.body_len);
                if (!p->body) {
                    pending_drop(p, who, "out of memory");
                    return -1;
                }
            }
        }
    }
}

int hoop_listener_serve(int lfd, uint64_t deadline_ns, size_t max_body, hoop_hello_cb cb, void *ctx,
                        const char *who, int drain)
{
    struct pending pend[HOOP_PENDING_MAX];
    struct pollfd pfd[HOOP_PENDING_MAX + 1];
    int done = 0, result = 0;
    for (int i = 0; i < HOOP_PENDING_MAX; i++)
        pend[i].fd = -1;
    for (;;) {
        int npend = 0;
        for (int i = 0; i < HOOP_PENDING_MAX; i++)
            npend += pend[i].fd >= 0;
        if (done && (!drain || npend == 0))
            break;
        uint64_t now = hoop_now_ns();
        if (now >= deadline_ns) {
            result = -ETIMEDOUT;
            break;
        }
        uint64_t wake = deadline_ns;
        int n = 0;
        /* Once done, accept no one new; only finish the pending hellos. */
        pfd[n++] = (struct pollfd){.fd = done ? -1 : lfd, .events = POLLIN};
        int map[HOOP_PENDING_MAX];
        for (int i = 0; i < HOOP_PENDING_MAX; i++) {
            if (pend[i].fd < 0)
                continue;
            if (now >= pend[i].deadline) {
                pending_drop(&pend[i], who, "no complete hello within 5 s");
                continue;
            }
            if (pend[i].deadline < wake)
                wake = pend[i].deadline;
            map[n - 1] = i;
            pfd[n++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        }
        int rc = poll(pfd, (nfds_t)n, hoop_ms_left(wake));
        if (rc < 0 && errno != EINTR) {
            result = -errno;
            break;
        }
        if (rc <= 0)
            continue;
        for (int k = 1; k < n; k++) {
            if (!pfd[k].revents)
                continue;
            struct pending *p = &pend[map[k - 1]];
            int st = pending_read(p, max_body, who);
            if (st != 1)
                continue;
            p->msg.fd = p->fd;
            p->msg.body = p->body;
            int was_done = done;
            int keep = cb(ctx, &p->msg, &done);
            done |= was_done;
            if (!keep)
                close(p->fd);
            free(p->body);
            memset(p, 0, sizeof(*p));
            p->fd = -1;
        }
        if (done || !(pfd[0].revents & POLLIN))
            continue;
        for (;;) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof(ss);
            int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0)
                break;
            int slot = -1;
            for (int i = 0; i < HOOP_PENDING_MAX && slot < 0; i++)
                if (pend[i].fd < 0)
                    slot = i;
            if (slot < 0) {
                /* Full of connections that say nothing: make room by
                 * dropping the oldest, so a flood cannot lock peers out. */
                slot = 0;
                for (int i = 1; i < HOOP_PENDING_MAX; i++)
                    if (pend[i].deadline < pend[slot].deadline)
                        slot = i;
                pending_drop(&pend[slot], who, "too many connections without a hello");
            }
            struct pending *p = &pend[slot];
            memset(p, 0, sizeof(*p));
            p->fd = fd;
            p->deadline = hoop_now_ns() + HOOP_HELLO_GRACE_NS;
            memcpy(&p->msg.addr, &ss, sl);
            p->msg.addrlen = sl;
            hoop_sock_addr_str((struct sockaddr *)&ss, p->msg.addr_str, sizeof(p->msg.addr_str));
        }
    }
    for (int i = 0; i < HOOP_PENDING_MAX; i++)
        if (pend[i].fd >= 0) {
            close(pend[i].fd);
            free(pend[i].body);
        }
    return result;
}
