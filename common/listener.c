/* listener.c - a poll loop over the listening socket and the connections
 * that have not finished their hello yet. */
#include "common/listener.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/sock.h"
#include "hoop.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
/* A real peer sends its hello right after connecting, and its proof
 * right after the challenge: the grace covers both. */
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
    int challenged;    /* the challenge is sent (or not due): reading the proof */
    int early;         /* a data connection: its proof is against the published nonce */
    size_t pgot;       /* bytes of the proof received */
    uint8_t head[HOOP_HELLO_BYTES];
    uint8_t proof[HOOP_AUTH_BYTES];
    struct hoop_auth_msg chal;
    struct hoop_hello_msg msg;
    uint8_t *body;
};

/* An outgoing connection waiting for its peer's challenge (or reply). */
struct hoop_listen_out {
    int fd;
    int peer;
    int early; /* the early proof was sent against nonce: a reply is due */
    uint8_t nonce[HOOP_AUTH_NONCE_BYTES];
    int state; /* 1 waiting, 0 proved, or -errno */
    uint64_t deadline;
    size_t got;
    uint8_t hello[HOOP_HELLO_BYTES];
    uint8_t chal[HOOP_AUTH_BYTES]; /* the challenge, or the reply */
};

int hoop_listener_open(struct hoop_listener *l, int lfd, size_t max_body, const char *who,
                       int rank, const uint8_t token[HOOP_TOKEN_BYTES])
{
    memset(l, 0, sizeof(*l));
    l->lfd = lfd;
    l->max_body = max_body;
    l->rank = rank;
    memcpy(l->token, token, HOOP_TOKEN_BYTES);
    snprintf(l->who, sizeof(l->who), "%s", who);
    l->pend = calloc(HOOP_PENDING_MAX, sizeof(*l->pend));
    l->pfd = calloc(HOOP_PENDING_MAX + 1 + HOOP_LISTENER_WAKE_MAX, sizeof(*l->pfd));
    if (!l->pend || !l->pfd) {
        free(l->pend);
        free(l->pfd);
        l->pend = NULL;
        l->pfd = NULL;
        return -ENOMEM;
    }
    for (int i = 0; i < HOOP_PENDING_MAX; i++)
        l->pend[i].fd = -1;
    return 0;
}

int hoop_listener_publish(struct hoop_listener *l, uint8_t nonce[HOOP_AUTH_NONCE_BYTES])
{
    int rc = hoop_auth_random(l->nonce, sizeof(l->nonce));
    if (rc)
        return rc;
    memcpy(nonce, l->nonce, sizeof(l->nonce));
    l->published = 1;
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
    free(l->out);
    free(l->pfd);
    l->pend = NULL;
    l->out = NULL;
    l->pfd = NULL;
    l->nout = l->outcap = 0;
    hoop_log_limit_flush(&l->log, l->who);
    memset(l->token, 0, sizeof(l->token));
}

static void pending_drop(struct hoop_listener *l, struct hoop_listen_pending *p, const char *why)
{
    hoop_log_limited(&l->log, l->who, "%s: refused connection from %s: %s", l->who,
                     p->msg.addr_str, why);
    pending_free(p);
}

/* Tell the peer why it is refused (a hello of kind REFUSE in its own
 * version, body the sentence; never waits), log it, and drop it. */
static void pending_refuse(struct hoop_listener *l, struct hoop_listen_pending *p,
                           unsigned version, hoop_status_t code, const char *why)
{
    uint8_t msg[HOOP_HELLO_BYTES + 256];
    size_t n = strnlen(why, 256);
    struct hoop_hello h = {.kind = HOOP_HELLO_REFUSE, .rank = (uint32_t)l->rank,
                           .aux = (uint32_t)code, .body_len = (uint32_t)n};
    hoop_hello_encode(&h, msg);
    msg[4] = (uint8_t)version;
    msg[5] = (uint8_t)(version >> 8);
    memcpy(msg + HOOP_HELLO_BYTES, why, n);
    /* Unread bytes at close would reset the connection before the peer
     * reads the sentence: take what it already sent. */
    uint8_t sink[4096];
    for (int i = 0; i < 16 && recv(p->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
        ;
    (void)!send(p->fd, msg, HOOP_HELLO_BYTES + n, MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(p->fd, SHUT_WR);
    pending_drop(l, p, why);
}

/* The hello and body are in: send the challenge. 0, or -1 when the
 * connection was dropped. */
static int pending_challenge(struct hoop_listener *l, struct hoop_listen_pending *p)
{
    uint8_t out[HOOP_AUTH_BYTES];
    int rc = hoop_auth_challenge(l->token, p->head, p->body, p->msg.hello.body_len, &p->chal, out);
    if (rc) {
        pending_drop(l, p, "no random numbers for its challenge");
        return -1;
    }
    /* 64 bytes on a connection that has sent nothing back yet: the
     * socket buffer takes them whole or the peer is broken. */
    ssize_t n = send(p->fd, out, sizeof(out), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof(out)) {
        pending_drop(l, p, n < 0 ? strerror(errno) : "challenge not sent whole");
        return -1;
    }
    p->challenged = 1;
    return 0;
}

/* The early proof holds: reply with this side's MAC. 0, or -1 when the
 * connection was dropped. */
static int pending_reply(struct hoop_listener *l, struct hoop_listen_pending *p)
{
    uint8_t out[HOOP_AUTH_BYTES];
    hoop_auth_make(l->token, HOOP_AUTH_REPLY, p->head, p->body, p->msg.hello.body_len, l->nonce,
                   out);
    /* As the challenge: the first bytes this side sends. */
    ssize_t n = send(p->fd, out, sizeof(out), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n != (ssize_t)sizeof(out)) {
        pending_drop(l, p, n < 0 ? strerror(errno) : "reply not sent whole");
        return -1;
    }
    return 0;
}

/* The proof is in: 1 when it holds, else -1 (refused and dropped). */
static int pending_check(struct hoop_listener *l, struct hoop_listen_pending *p)
{
    const struct hoop_hello *h = &p->msg.hello;
    int rc = p->early
                 ? hoop_auth_verify(l->token, HOOP_AUTH_EARLY, p->head, p->body, h->body_len,
                                    l->nonce, p->proof)
                 : hoop_auth_check(l->token, p->head, p->body, h->body_len, &p->chal, p->proof);
    if (rc == 0)
        return p->early && pending_reply(l, p) ? -1 : 1;
    char why[200];
    unsigned v = HOOP_WIRE_VERSION;
    hoop_status_t code = HOOP_ERR_INVALID;
    if (rc == -ESTALE) {
        /* Not the token: a peer of this job proves against the nonce it
         * read in this job's table. */
        code = HOOP_ERR_PEER;
        snprintf(why, sizeof(why),
                 "rank %u proved the token against another nonce than the one rank %d "
                 "published (a handshake recorded elsewhere and played again?)",
                 h->rank, l->rank);
    } else if (rc == -EACCES) {
        snprintf(why, sizeof(why),
                 "wrong job token: rank %u's HOOP_TOKEN differs from rank %d's (another job?)",
                 h->rank, l->rank);
    } else if (rc == -EPROTONOSUPPORT) {
        v = hoop_wire_peer_version(p->proof);
        code = HOOP_ERR_MISMATCH;
        hoop_wire_version_why(v, why, sizeof(why));
    } else {
        snprintf(why, sizeof(why), "rank %u %s something that is not a proof", h->rank,
                 p->early ? "sent" : "answered the token challenge with");
    }
    pending_refuse(l, p, v, code, why);
    return -1;
}

/* Read what is there; 1 when the message is complete and its sender has
 * proved the token, 0 when more is needed, -1 when the connection was
 * dropped. */
static int pending_read(struct hoop_listener *l, struct hoop_listen_pending *p)
{
    for (;;) {
        size_t want;
        uint8_t *dst;
        if (p->challenged) {
            want = HOOP_AUTH_BYTES - p->pgot;
            dst = p->proof + p->pgot;
        } else if (p->got < HOOP_HELLO_BYTES) {
            want = HOOP_HELLO_BYTES - p->got;
            dst = p->head + p->got;
        } else {
            size_t off = p->got - HOOP_HELLO_BYTES;
            want = p->msg.hello.body_len - off;
            dst = p->body + off;
        }
        if (want == 0 && p->challenged)
            return pending_check(l, p);
        if (want == 0 && p->msg.hello.kind == HOOP_HELLO_DATA) {
            /* Its early proof follows the hello: no challenge. */
            if (!l->published) {
                pending_refuse(l, p, HOOP_WIRE_VERSION, HOOP_ERR_PEER,
                               "a data connection to a listener that takes none");
                return -1;
            }
            p->challenged = p->early = 1;
            continue;
        }
        if (want == 0) {
            if (pending_challenge(l, p))
                return -1;
            continue;
        }
        ssize_t n = recv(p->fd, dst, want, MSG_DONTWAIT);
        if (n == 0) {
            pending_drop(l, p,
                         p->early        ? "closed before proving the token"
                         : p->challenged ? "closed before answering the token challenge"
                                         : "closed before finishing its hello");
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
        if (p->challenged) {
            p->pgot += (size_t)n;
            continue;
        }
        p->got += (size_t)n;
        if (p->got == HOOP_HELLO_BYTES) {
            int rc = hoop_hello_decode(p->head, l->max_body, &p->msg.hello);
            if (rc == -EPROTONOSUPPORT) {
                char why[160];
                unsigned v = hoop_wire_peer_version(p->head);
                hoop_wire_version_why(v, why, sizeof(why));
                pending_refuse(l, p, v, HOOP_ERR_MISMATCH, why);
                return -1;
            }
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
        /* The handshake is small messages each way: none may wait for
         * the peer's delayed acknowledgement. */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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

int hoop_listener_expect(struct hoop_listener *l, int fd, int peer,
                         const uint8_t hello[HOOP_HELLO_BYTES],
                         const uint8_t nonce[HOOP_AUTH_NONCE_BYTES])
{
    if (l->nout == l->outcap) {
        int cap = l->outcap ? 2 * l->outcap : 16;
        struct hoop_listen_out *o = realloc(l->out, (size_t)cap * sizeof(*o));
        struct pollfd *f = o ? realloc(l->pfd, (size_t)(HOOP_PENDING_MAX + 1 +
                                                         HOOP_LISTENER_WAKE_MAX + cap) *
                                                   sizeof(*f))
                             : NULL;
        if (o)
            l->out = o;
        if (!f)
            return -ENOMEM;
        l->pfd = f;
        l->outcap = cap;
    }
    struct hoop_listen_out *o = &l->out[l->nout++];
    memset(o, 0, sizeof(*o));
    o->fd = fd;
    o->peer = peer;
    o->state = 1;
    o->deadline = hoop_now_ns() + HOOP_HELLO_GRACE_NS;
    memcpy(o->hello, hello, HOOP_HELLO_BYTES);
    if (nonce) {
        o->early = 1;
        memcpy(o->nonce, nonce, HOOP_AUTH_NONCE_BYTES);
    }
    return 0;
}

void hoop_listener_forget(struct hoop_listener *l, int fd)
{
    for (int i = 0; i < l->nout; i++)
        if (l->out[i].fd == fd) {
            l->out[i--] = l->out[--l->nout];
        }
}

/* What a refusal that came instead of a reply says: its code, as
 * hoop_listener_finish tells it. */
static int out_refusal(const uint8_t head[HOOP_HELLO_BYTES])
{
    struct hoop_hello h;
    if (hoop_hello_decode(head, 256, &h) || h.kind != HOOP_HELLO_REFUSE)
        return -EPROTO;
    return h.aux == HOOP_ERR_INVALID    ? -EACCES
           : h.aux == HOOP_ERR_MISMATCH ? -EPROTONOSUPPORT
                                        : -ECONNREFUSED;
}

/* Read an outgoing connection's challenge and answer it (or its reply,
 * and check it). */
static void out_step(struct hoop_listener *l, struct hoop_listen_out *o)
{
    while (o->state == 1 && o->got < HOOP_AUTH_BYTES) {
        ssize_t n = recv(o->fd, o->chal + o->got, HOOP_AUTH_BYTES - o->got, MSG_DONTWAIT);
        if (n == 0) {
            o->state = -ECONNRESET;
        } else if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno != EINTR)
                o->state = -errno;
        } else {
            o->got += (size_t)n;
        }
    }
    if (o->state != 1)
        return;
    if (hoop_wire_peer_version(o->chal) != HOOP_WIRE_VERSION) {
        o->state = -EPROTONOSUPPORT;
        return;
    }
    if (o->chal[0] == 'H' && o->chal[1] == 'O' && o->chal[2] == 'O' && o->chal[3] == 'P') {
        /* a hello: its refusal */
        o->state = o->early ? out_refusal(o->chal) : -ECONNREFUSED;
        return;
    }
    if (o->early) {
        o->state =
            hoop_auth_verify(l->token, HOOP_AUTH_REPLY, o->hello, NULL, 0, o->nonce, o->chal);
        return;
    }
    uint8_t proof[HOOP_AUTH_BYTES];
    int verdict = hoop_auth_answer(l->token, o->hello, NULL, 0, o->chal, proof);
    if (verdict && verdict != -EACCES) {
        o->state = verdict;
        return;
    }
    ssize_t n = send(o->fd, proof, sizeof(proof), MSG_DONTWAIT | MSG_NOSIGNAL);
    o->state = verdict ? verdict : n == (ssize_t)sizeof(proof) ? 0 : n < 0 ? -errno : -EPIPE;
}

/* Whether an outgoing handshake still waits; with to_answer, only those
 * that wait for a challenge this side must answer (a reply asks nothing). */
static int out_waiting(const struct hoop_listener *l, int to_answer)
{
    for (int i = 0; i < l->nout; i++)
        if (l->out[i].state == 1 && !(to_answer && l->out[i].early))
            return 1;
    return 0;
}

/* Serve until the callback is done, or (outgoing 1) until no outgoing
 * handshake is waiting, or (outgoing 2) only answer outgoing handshakes
 * until none is waiting, accepting nothing. */
static int listener_loop(struct hoop_listener *l, uint64_t deadline_ns, const int *wake, int nwake,
                         hoop_hello_cb cb, void *ctx, int outgoing)
{
    struct pollfd *pfd = l->pfd;
    int done = 0, result = 0;
    if (nwake > HOOP_LISTENER_WAKE_MAX)
        nwake = HOOP_LISTENER_WAKE_MAX;
    for (;;) {
        for (int i = 0; i < l->nout; i++)
            out_step(l, &l->out[i]);
        /* Hellos that are there are read before anyone is dropped. */
        if (outgoing < 2)
            listener_read_all(l, cb, ctx, &done);
        if (outgoing) {
            done = 0;
            if (!out_waiting(l, outgoing == 2))
                break;
        } else if (done) {
            break;
        }
        uint64_t now = hoop_now_ns();
        if (now >= deadline_ns) {
            result = -ETIMEDOUT;
            break;
        }
        for (int i = 0; i < HOOP_PENDING_MAX; i++)
            if (l->pend[i].fd >= 0 && now >= l->pend[i].deadline)
                pending_drop(l, &l->pend[i],
                             l->pend[i].early        ? "no proof of the token within 5 s"
                             : l->pend[i].challenged ? "no answer to the token challenge within 5 s"
                                                     : "no complete hello within 5 s");
        for (int i = 0; i < l->nout; i++)
            if (l->out[i].state == 1 && now >= l->out[i].deadline)
                l->out[i].state = -ETIMEDOUT;
        uint64_t blocked = UINT64_MAX;
        int got = outgoing < 2 ? listener_accept(l, now, &blocked) : 0;
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
        for (int i = 0; i < HOOP_PENDING_MAX && outgoing < 2; i++) {
            if (l->pend[i].fd < 0)
                continue;
            if (l->pend[i].deadline < until)
                until = l->pend[i].deadline;
            pfd[n++] = (struct pollfd){.fd = l->pend[i].fd, .events = POLLIN};
        }
        for (int i = 0; i < l->nout; i++) {
            /* A reply asks nothing of this side: while it serves, one
             * that came is read at the next look, and none wakes it. */
            if (l->out[i].state != 1 || (l->out[i].early && !outgoing))
                continue;
            if (l->out[i].deadline < until)
                until = l->out[i].deadline;
            pfd[n++] = (struct pollfd){.fd = l->out[i].fd, .events = POLLIN};
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

int hoop_listener_serve(struct hoop_listener *l, uint64_t deadline_ns, const int *wake, int nwake,
                        hoop_hello_cb cb, void *ctx)
{
    return listener_loop(l, deadline_ns, wake, nwake, cb, ctx, 0);
}

int hoop_listener_finish(struct hoop_listener *l, uint64_t deadline_ns, const int *wake, int nwake,
                         hoop_hello_cb cb, void *ctx, int *peer)
{
    int rc = listener_loop(l, deadline_ns, wake, nwake, cb, ctx, 1);
    if (rc)
        return rc; /* those waiting stay for the next call */
    for (int i = 0; i < l->nout && !rc; i++)
        if (l->out[i].state) {
            rc = l->out[i].state;
            *peer = l->out[i].peer;
        }
    l->nout = 0;
    return rc;
}

void hoop_listener_answer(struct hoop_listener *l, uint64_t deadline_ns)
{
    if (out_waiting(l, 1))
        listener_loop(l, deadline_ns, NULL, 0, NULL, NULL, 2);
}
