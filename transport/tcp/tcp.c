/* tcp.c - the TCP transport: choosing its engine, listening, connecting
 * and accepting ring neighbours (each connection opened with an
 * authenticated hello), and the ops table. The data path is in
 * queue.c, over the engine of uring.c or poll.c. */
#include "transport/tcp/tcp.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/listener.h"
#include "common/log.h"
#include "common/param.h"
#include "common/sock.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TCP_HANDLE_VERSION 3
/* version, family, port, 16 address bytes, nsocks (0 = auto), then the
 * nonce that connections to this rank prove the token against */
#define TCP_HANDLE_NONCE 21
#define TCP_HANDLE_BYTES (TCP_HANDLE_NONCE + HOOP_AUTH_NONCE_BYTES)
#define TCP_NSOCKS_MAX 16 /* a bit each in tcp_tp.claimed */
/* HOOP_TCP_NSOCKS=auto to a rank on another host: two streams kept a
 * shaped 5 Gbit/s link 4 % fuller than one (bench/RESULTS.md, "Sockets per
 * neighbour"); over loopback a second stream only costs CPU (20 % at N = 2). */
#define TCP_NSOCKS_REMOTE 2

/* Where io_uring is refused, the refusal is the same for every
 * communicator of the process: say it once. */
static atomic_int tcp_fallback_said;

/* HOOP_TCP_ENGINE: uring, poll, or auto (io_uring, else poll). */
static hoop_status_t tcp_engine_open(struct tcp_tp *tp)
{
    const char *want = hoop_param_str("HOOP_TCP_ENGINE");
    int only_uring = strcmp(want, "uring") == 0, only_poll = strcmp(want, "poll") == 0;
    if (!only_uring && !only_poll && strcmp(want, "auto") != 0)
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: tcp transport: HOOP_TCP_ENGINE='%s' is not one of uring, poll "
                          "or auto", tp->rank, want);
    int rc;
    if (!only_poll) {
        tp->eng = &tcp_engine_uring;
        if ((rc = tp->eng->init(tp)) == 0)
            return HOOP_OK;
        /* Out of descriptors is no refusal: the poll engine's sockets
         * would fail next. */
        if (rc == -EMFILE || rc == -ENFILE)
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: io_uring cannot be set "
                              "up: %s", tp->rank, hoop_errno_str(rc));
        if (only_uring) {
            int refused = rc == -EPERM || rc == -ENOSYS || rc == -EACCES || rc == -EOPNOTSUPP;
            return hoop_error(refused ? HOOP_ERR_UNSUPPORTED : HOOP_ERR_SYSTEM,
                              "rank %d: tcp transport: HOOP_TCP_ENGINE=uring, but io_uring cannot "
                              "be set up: %s%s", tp->rank, hoop_errno_str(rc),
                              refused ? " (refused by a seccomp profile, the "
                                        "kernel.io_uring_disabled sysctl or a sandbox; "
                                        "HOOP_TCP_ENGINE=auto or poll uses the poll engine)"
                                      : "");
        }
        if (atomic_exchange(&tcp_fallback_said, 1) == 0)
            HOOP_WARN("rank %d: tcp transport: io_uring refused (%s): using the poll engine",
                      tp->rank, hoop_errno_str(rc));
    }
    tp->eng = &tcp_engine_poll;
    if ((rc = tp->eng->init(tp)))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: poll engine: %s", tp->rank,
                          hoop_errno_str(rc));
    return HOOP_OK;
}

static hoop_status_t tcp_create(const struct hoop_tp_params *p, void **out)
{
    struct tcp_tp *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: out of memory", p->rank);
    tp->rank = p->rank;
    tp->size = p->size;
    tp->lfd = -1;
    memcpy(tp->token, p->token, HOOP_TOKEN_BYTES);
    unsigned long long v;
    hoop_status_t st;
    tp->claimed = calloc((size_t)p->size * (HOOP_CHANNEL_P2P + 1), sizeof(*tp->claimed));
    if (!tp->claimed) {
        st = hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: out of memory", p->rank);
        goto err_free;
    }
    int nsocks_auto;
    if (hoop_param_auto_u64("HOOP_TCP_NSOCKS", 1, TCP_NSOCKS_MAX, &nsocks_auto, &v)) {
        st = hoop_error(HOOP_ERR_INVALID, "rank %d: %s", p->rank, hoop_last_error());
        goto err_free;
    }
    tp->nsocks = nsocks_auto ? 0 : (int)v;
    if (gethostname(tp->hostname, sizeof(tp->hostname) - 1))
        tp->hostname[0] = '\0';
    if ((st = hoop_param_u64("HOOP_TCP_SOCKBUF", 0, 1ull << 30, &v)))
        goto err_free;
    tp->sockbuf = (int)v;
    if ((st = hoop_param_u64("HOOP_TCP_ZEROCOPY", 0, 1ull << 30, &v)))
        goto err_free;
    tp->zc_min = (size_t)v;
    double ut;
    if ((st = hoop_param_double("HOOP_TCP_USER_TIMEOUT", 0, 86400, &ut)))
        goto err_free;
    tp->user_timeout_ms = (unsigned)(ut * 1000);
    const char *cc = hoop_param_str("HOOP_TCP_CONGESTION");
    int ccrc = 0;
    if (*cc && (strlen(cc) >= sizeof(tp->cc) || (ccrc = hoop_sock_check_cc(cc)))) {
        st = hoop_error(HOOP_ERR_INVALID,
                        "rank %d: HOOP_TCP_CONGESTION='%s' cannot be set on a socket here (%s): "
                        "net.ipv4.tcp_available_congestion_control lists what this kernel has, "
                        "and net.ipv4.tcp_allowed_congestion_control what a process without "
                        "CAP_NET_ADMIN may choose", p->rank, cc,
                        ccrc == -ENOENT ? "this kernel has no such algorithm"
                        : ccrc          ? hoop_errno_str(ccrc)
                                        : "the name is too long");
        goto err_free;
    }
    snprintf(tp->cc, sizeof(tp->cc), "%s", cc);
    if ((st = hoop_param_u64("HOOP_URING_ENTRIES", 4, 4096, &v)))
        goto err_free;
    tp->uring_entries = (unsigned)v;
    static const char *const setups[] = {"coop", "plain", "defer", "sqpoll"};
    const char *setup = hoop_param_str("HOOP_URING_SETUP");
    tp->uring_setup = -1;
    for (int i = 0; i < 4; i++)
        if (strcmp(setup, setups[i]) == 0)
            tp->uring_setup = i;
    if (tp->uring_setup < 0) {
        st = hoop_error(HOOP_ERR_INVALID, "rank %d: tcp transport: HOOP_URING_SETUP='%s' is not "
                        "one of coop, plain, defer or sqpoll", p->rank, setup);
        goto err_free;
    }
    const char *submit = hoop_param_str("HOOP_URING_SUBMIT");
    if (strcmp(submit, "batch") != 0 && strcmp(submit, "each") != 0) {
        st = hoop_error(HOOP_ERR_INVALID, "rank %d: tcp transport: HOOP_URING_SUBMIT='%s' is "
                        "neither batch nor each", p->rank, submit);
        goto err_free;
    }
    tp->uring_submit_each = strcmp(submit, "each") == 0;
    if ((st = tcp_engine_open(tp)))
        goto err_free;
    snprintf(tp->desc, sizeof(tp->desc), "tcp/%s", tp->eng->name);
    *out = tp;
    return HOOP_OK;
err_free:
    free(tp->claimed);
    free(tp);
    return st;
}

static hoop_status_t tcp_listen(void *vtp, const struct sockaddr *local, socklen_t len,
                                uint8_t *handle, uint16_t *handle_len)
{
    struct tcp_tp *tp = vtp;
    struct sockaddr_storage ss;
    memcpy(&ss, local, len);
    /* Same interface as the bootstrap connection, any port. */
    if (ss.ss_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
    int rc = hoop_sock_listen((struct sockaddr *)&ss, len, &tp->lfd);
    char ip[HOOP_ADDR_STR_MAX];
    hoop_sock_ip_str(local, ip, sizeof(ip));
    if (rc)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: cannot listen on %s: %s",
                          tp->rank, ip, hoop_errno_str(rc));
    char who[64];
    snprintf(who, sizeof(who), "rank %d: tcp transport", tp->rank);
    if ((rc = hoop_listener_open(&tp->listener, tp->lfd, 0, who, tp->rank, tp->token)))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: %s", tp->rank,
                          hoop_errno_str(rc));
    socklen_t sl = sizeof(ss);
    getsockname(tp->lfd, (struct sockaddr *)&ss, &sl);
    memset(handle, 0, TCP_HANDLE_BYTES);
    handle[0] = TCP_HANDLE_VERSION;
    handle[1] = ss.ss_family == AF_INET6 ? 6 : 4;
    if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
        memcpy(handle + 2, &a->sin6_port, 2);
        memcpy(handle + 4, &a->sin6_addr, 16);
    } else {
        const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
        memcpy(handle + 2, &a->sin_port, 2);
        memcpy(handle + 4, &a->sin_addr, 4);
    }
    handle[20] = (uint8_t)tp->nsocks;
    if ((rc = hoop_listener_publish(&tp->listener, handle + TCP_HANDLE_NONCE)))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: no random numbers for the "
                          "listener's nonce: %s", tp->rank, hoop_errno_str(rc));
    *handle_len = TCP_HANDLE_BYTES;
    char as[HOOP_ADDR_STR_MAX];
    hoop_sock_addr_str((struct sockaddr *)&ss, as, sizeof(as));
    if (tp->nsocks)
        HOOP_INFO("rank %d: tcp transport listens on %s (%d socket%s per neighbour)", tp->rank,
                  as, tp->nsocks, tp->nsocks > 1 ? "s" : "");
    else
        HOOP_INFO("rank %d: tcp transport listens on %s (1 socket per neighbour on this host, "
                  "%d per neighbour on another)", tp->rank, as, TCP_NSOCKS_REMOTE);
    return HOOP_OK;
}

/* The number of sockets HOOP_TCP_NSOCKS=auto gives a connection: both ends
 * work it out alike, each from the other's host name and its own. */
static int tcp_auto_nsocks(const struct tcp_tp *tp, const char *peer_host)
{
    return tp->hostname[0] && strcmp(peer_host, tp->hostname) == 0 ? 1 : TCP_NSOCKS_REMOTE;
}

static struct tcp_conn *tcp_conn_new(struct tcp_tp *tp, int peer, int nsocks)
{
    struct tcp_conn *c = calloc(1, sizeof(*c) + (size_t)nsocks * sizeof(struct tcp_sock));
    if (!c)
        return NULL;
    c->tp = tp;
    c->peer = peer;
    c->nsocks = nsocks;
    for (int i = 0; i < nsocks; i++)
        c->socks[i].fd = -1;
    return c;
}

static void tcp_close(void *vc)
{
    struct tcp_conn *c = vc;
    if (!c)
        return;
    struct tcp_tp *tp = c->tp;
    tcp_conn_quiesce(tp, c);
    for (struct tcp_conn **pp = &tp->conns; *pp; pp = &(*pp)->next_conn)
        if (*pp == c) {
            *pp = c->next_conn;
            break;
        }
    for (int i = 0; i < c->nsocks; i++)
        if (c->socks[i].fd >= 0) {
            hoop_listener_forget(&tp->listener, c->socks[i].fd);
            close(c->socks[i].fd);
        }
    free(c);
}

static int tcp_ready_socket(struct tcp_tp *tp, int fd)
{
    hoop_sock_set_data_opts(fd, tp->sockbuf, tp->user_timeout_ms, tp->cc);
    return hoop_sock_set_blocking(fd, !tp->eng->nonblocking);
}

static void tcp_conn_add(struct tcp_tp *tp, struct tcp_conn *c)
{
    c->next_conn = tp->conns;
    tp->conns = c;
}

/* The hello's aux: channel in the high half, socket index in the low. */
#define TCP_AUX(channel, index) (((uint32_t)(channel) << 16) | (uint32_t)(index))

/* A connect completes in the peer's listen backlog and writes its hello
 * and proof; nothing moves on it until a request is posted. */
static int tcp_connect_early(void *vtp)
{
    return 1;
}

static hoop_status_t tcp_connect(void *vtp, int peer, int channel, const char *peer_host,
                                 const uint8_t *handle, uint16_t handle_len, uint64_t comm_id,
                                 uint64_t deadline_ns, void **out)
{
    struct tcp_tp *tp = vtp;
    if (handle_len != TCP_HANDLE_BYTES || handle[0] != TCP_HANDLE_VERSION ||
        (handle[1] != 4 && handle[1] != 6) || handle[20] > TCP_NSOCKS_MAX)
        return hoop_error(HOOP_ERR_PEER,
                          "rank %d: tcp transport: rank %d (%s) published a handle this version "
                          "cannot read (%u bytes)", tp->rank, peer, peer_host, handle_len);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    if (handle[1] == 6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_port, handle + 2, 2);
        memcpy(&a->sin6_addr, handle + 4, 16);
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_port, handle + 2, 2);
        memcpy(&a->sin_addr, handle + 4, 4);
        len = sizeof(*a);
    }
    char as[HOOP_ADDR_STR_MAX];
    hoop_sock_addr_str((struct sockaddr *)&ss, as, sizeof(as));
    /* Both ends must stripe over the same number of sockets: the
     * listener's count wins, and where it is auto both ends work out the
     * same one. */
    int nsocks = handle[20] ? handle[20] : tcp_auto_nsocks(tp, peer_host);
    struct tcp_conn *c = tcp_conn_new(tp, peer, nsocks);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: out of memory", tp->rank);
    hoop_status_t st = HOOP_OK;
    for (int i = 0; i < nsocks && st == HOOP_OK; i++) {
        int rc = hoop_sock_connect_listening((struct sockaddr *)&ss, len, deadline_ns,
                                             &c->socks[i].fd);
        if (rc == 0) {
            struct hoop_hello h = {.kind = HOOP_HELLO_DATA, .rank = (uint32_t)tp->rank,
                                   .size = (uint32_t)tp->size, .comm_id = comm_id,
                                   .aux = TCP_AUX(channel, i)};
            /* The hello and, right behind it, the proof against the
             * nonce the peer published: one write. */
            uint8_t msg[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES];
            hoop_hello_encode(&h, msg);
            rc = hoop_auth_nonce(msg);
            if (rc == 0) {
                hoop_auth_make(tp->token, HOOP_AUTH_EARLY, msg, NULL, 0, handle + TCP_HANDLE_NONCE,
                               msg + HOOP_HELLO_BYTES);
                rc = hoop_sock_write_all(c->socks[i].fd, msg, sizeof(msg), deadline_ns);
            }
            /* The peer's reply is read while this rank waits for its own
             * peers (tcp_accept), never here: a connect must not wait for
             * a peer that may be connecting to us. */
            if (rc == 0)
                rc = hoop_listener_expect(&tp->listener, c->socks[i].fd, peer, msg,
                                          handle + TCP_HANDLE_NONCE);
        }
        if (rc == 0)
            rc = tcp_ready_socket(tp, c->socks[i].fd);
        if (rc)
            st = hoop_error(hoop_status_from_errno(rc),
                            "rank %d: tcp transport: connecting to rank %d (%s, %s), socket %d of "
                            "%d: %s%s", tp->rank, peer, peer_host, as, i + 1, nsocks,
                            hoop_errno_str(rc),
                            rc == -ECONNREFUSED ? " (it listened there once: it has failed or left)"
                                                : "");
    }
    if (st) {
        tcp_close(c);
        return st;
    }
    tcp_conn_add(tp, c);
    *out = c;
    return HOOP_OK;
}

struct tcp_accept_ctx {
    struct tcp_tp *tp;
    struct tcp_conn *c;
    int peer;
    int channel;
    uint64_t comm_id;
    int have;
};

/* Take a socket for the connection being accepted; 1 when it was wanted. */
static int tcp_accept_take(struct tcp_accept_ctx *a, int rank, int channel, int index, int fd)
{
    if (rank != a->peer || channel != a->channel || index >= a->c->nsocks ||
        a->c->socks[index].fd >= 0)
        return 0;
    a->c->socks[index].fd = fd;
    a->have++;
    return 1;
}

/* Whether rank's socket index of channel has come already (its hello was
 * taken or stashed); with set, now it has. A communicator takes each of
 * them once: a second one is a handshake played again. */
static int tcp_claimed(struct tcp_tp *tp, int rank, int channel, int index, int set)
{
    uint16_t *w = &tp->claimed[rank * (HOOP_CHANNEL_P2P + 1) + channel];
    int was = (*w >> index) & 1;
    if (set)
        *w |= (uint16_t)(1u << index);
    return was;
}

static int tcp_on_hello(void *vctx, const struct hoop_hello_msg *m, int *done)
{
    struct tcp_accept_ctx *a = vctx;
    struct tcp_tp *tp = a->tp;
    const struct hoop_hello *h = &m->hello;
    const char *why = NULL;
    int channel = (int)(h->aux >> 16), index = (int)(h->aux & 0xffff);
    if (h->kind != HOOP_HELLO_DATA)
        why = "not a data connection";
    else if (h->comm_id != a->comm_id)
        why = "belongs to another communicator";
    else if (h->rank >= (uint32_t)tp->size || channel > HOOP_CHANNEL_P2P ||
             index >= TCP_NSOCKS_MAX)
        why = "claims a rank, channel or socket that does not exist";
    else if (tcp_claimed(tp, (int)h->rank, channel, index, 0))
        why = "that rank's socket of this channel has come already (a handshake recorded and "
              "played again?)";
    if (!why && tcp_accept_take(a, (int)h->rank, channel, index, m->fd)) {
        tcp_claimed(tp, (int)h->rank, channel, index, 1);
        if (a->have == a->c->nsocks)
            *done = 1;
        return 1;
    }
    if (!why && tp->nstash < 4 * tp->size * TCP_NSOCKS_MAX) {
        /* A genuine peer that is ahead of us: keep it for its accept. */
        struct tcp_stashed *k = malloc(sizeof(*k));
        if (k) {
            *k = (struct tcp_stashed){.next = tp->stash, .fd = m->fd, .rank = (int)h->rank,
                                      .channel = channel, .index = index};
            tp->stash = k;
            tp->nstash++;
            tcp_claimed(tp, (int)h->rank, channel, index, 1);
            return 1;
        }
    }
    hoop_log_limited(m->log, tp->listener.who,
                     "rank %d: tcp transport: refused connection from %s (claims rank %u): %s",
                     tp->rank, m->addr_str, h->rank, why ? why : "too many early connections");
    return 0;
}

/* The replies (and challenges) of the connections this rank opened
 * (transport.h: settle). */
static hoop_status_t tcp_settle(void *vtp, uint64_t comm_id, uint64_t deadline_ns)
{
    struct tcp_tp *tp = vtp;
    if (!tp->listener.nout)
        return HOOP_OK;
    struct tcp_accept_ctx later = {.tp = tp, .c = NULL, .peer = -1, .comm_id = comm_id};
    int bad = -1;
    int rc = hoop_listener_finish(&tp->listener, deadline_ns, tp->watch.fd, tp->watch.n,
                                  tcp_on_hello, &later, &bad);
    if (rc == 0)
        return HOOP_OK;
    if (rc == -EINTR)
        return hoop_error(HOOP_ERR_ABORTED, "rank %d: tcp transport: finishing the handshakes of "
                          "the connections this rank opened: woken by a watched descriptor",
                          tp->rank);
    uint64_t soon = hoop_now_ns() + 1000000000ull;
    hoop_listener_answer(&tp->listener, soon < deadline_ns ? soon : deadline_ns);
    if (bad >= 0)
        return hoop_error(rc == -EACCES ? HOOP_ERR_INVALID : HOOP_ERR_PEER,
                          "rank %d: tcp transport: rank %d did not prove this job's token on the "
                          "connection this rank opened to it: %s", tp->rank, bad,
                          rc == -EACCES ? "wrong job token: its HOOP_TOKEN differs from this "
                                          "rank's (another job?)"
                          : rc == -ECONNREFUSED ? "it refused this rank (its log says why)"
                          : rc == -EPROTONOSUPPORT ? "it speaks another hoop wire version: run "
                                                     "the same hoop build everywhere"
                                                   : hoop_errno_str(rc));
    return hoop_error(hoop_status_from_errno(rc), "rank %d: tcp transport: finishing the "
                      "handshakes of the connections this rank opened: %s", tp->rank,
                      hoop_errno_str(rc));
}

static hoop_status_t tcp_accept(void *vtp, int peer, int channel, const char *peer_host,
                                uint64_t comm_id, uint64_t deadline_ns, void **out)
{
    struct tcp_tp *tp = vtp;
    int nsocks = tp->nsocks ? tp->nsocks : tcp_auto_nsocks(tp, peer_host);
    struct tcp_conn *c = tcp_conn_new(tp, peer, nsocks);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: out of memory", tp->rank);
    struct tcp_accept_ctx a = {.tp = tp, .c = c, .peer = peer, .channel = channel,
                               .comm_id = comm_id};
    for (struct tcp_stashed **pp = &tp->stash; *pp;) {
        struct tcp_stashed *k = *pp;
        if (tcp_accept_take(&a, k->rank, k->channel, k->index, k->fd)) {
            *pp = k->next;
            tp->nstash--;
            free(k);
        } else {
            pp = &k->next;
        }
    }
    int rc = 0;
    if (a.have < c->nsocks)
        rc = hoop_listener_serve(&tp->listener, deadline_ns, tp->watch.fd, tp->watch.n, tcp_on_hello,
                                 &a);
    /* The replies to the connections this rank opened are checked by
     * settle, once every accept of the set-up is made (transport.h). */
    if (rc && rc != -EINTR) {
        uint64_t soon = hoop_now_ns() + 1000000000ull;
        hoop_listener_answer(&tp->listener, soon < deadline_ns ? soon : deadline_ns);
    }
    if (rc == -EINTR) {
        /* The communicator's control spoke: the sockets that came wait for
         * the next accept, which the caller makes unless it gives up. */
        for (int i = 0; i < c->nsocks; i++) {
            struct tcp_stashed *k = c->socks[i].fd >= 0 ? malloc(sizeof(*k)) : NULL;
            if (!k)
                continue;
            *k = (struct tcp_stashed){.next = tp->stash, .fd = c->socks[i].fd, .rank = peer,
                                      .channel = channel, .index = i};
            tp->stash = k;
            tp->nstash++;
            c->socks[i].fd = -1;
        }
        tcp_close(c);
        return hoop_error(HOOP_ERR_ABORTED,
                          "rank %d: tcp transport: waiting for rank %d (%s) to connect: woken by "
                          "a watched descriptor (%d of %d sockets arrived)", tp->rank, peer,
                          peer_host, a.have, nsocks);
    }
    for (int i = 0; rc == 0 && i < c->nsocks; i++)
        rc = tcp_ready_socket(tp, c->socks[i].fd);
    if (rc && rc != -ETIMEDOUT) {
        tcp_close(c);
        return hoop_error(hoop_status_from_errno(rc),
                          "rank %d: tcp transport: cannot take the connection of rank %d (%s): %s",
                          tp->rank, peer, peer_host, hoop_errno_str(rc));
    }
    if (rc) {
        tcp_close(c);
        return hoop_error(hoop_status_from_errno(rc),
                          "rank %d: tcp transport: waiting for rank %d (%s) to connect: %s "
                          "(%d of %d sockets arrived)", tp->rank, peer, peer_host,
                          hoop_errno_str(rc), a.have, nsocks);
    }
    tcp_conn_add(tp, c);
    *out = c;
    return HOOP_OK;
}

static void tcp_destroy(void *vtp)
{
    struct tcp_tp *tp = vtp;
    if (!tp)
        return;
    if (tp->inflight)
        tcp_cancel(tp);
    while (tp->conns)
        tcp_close(tp->conns);
    while (tp->stash) {
        struct tcp_stashed *k = tp->stash;
        tp->stash = k->next;
        close(k->fd);
        free(k);
    }
    tp->eng->fini(tp);
    hoop_watch_fini(&tp->watch);
    hoop_listener_close(&tp->listener);
    if (tp->lfd >= 0)
        close(tp->lfd);
    free(tp->claimed);
    free(tp);
}

/* TCP runs wherever the bootstrap does. */
static int tcp_probe(char *why, size_t n)
{
    snprintf(why, n, "runs everywhere");
    return 1;
}

static void tcp_set_busy_poll(void *vtp, uint64_t ns, int yield)
{
    struct tcp_tp *tp = vtp;
    tp->spin_ns = ns;
    tp->spin_yield = yield;
}

static const char *tcp_describe(void *vtp)
{
    return ((struct tcp_tp *)vtp)->desc;
}

const struct hoop_transport_ops hoop_transport_tcp = {
    .size = sizeof(struct hoop_transport_ops),
    .name = "tcp",
    .create = tcp_create,
    .listen = tcp_listen,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .progress = tcp_progress,
    .settle = tcp_settle,
    .connect_early = tcp_connect_early,
    .watch = tcp_watch,
    .cancel = tcp_cancel,
    .close = tcp_close,
    .destroy = tcp_destroy,
    .describe = tcp_describe,
    .probe = tcp_probe,
    .set_busy_poll = tcp_set_busy_poll,
};
