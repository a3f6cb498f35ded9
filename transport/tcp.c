/* tcp.c - the TCP transport: listening, connecting and accepting ring
 * neighbours (each connection opened with an authenticated hello), and the
 * ops table. The data path is in tcp_uring.c. */
#include "transport/tcp.h"
#include "common/clock.h"
#include "common/listener.h"
#include "common/log.h"
#include "common/param.h"
#include "common/sock.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TCP_HANDLE_VERSION 1
#define TCP_HANDLE_BYTES 21 /* version, family, port, 16 address bytes, nsocks */
#define TCP_NSOCKS_MAX 16

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
    if ((st = hoop_param_u64("HOOP_TCP_NSOCKS", 1, TCP_NSOCKS_MAX, &v)))
        goto err_free;
    tp->nsocks = (int)v;
    if ((st = hoop_param_u64("HOOP_TCP_SOCKBUF", 0, 1ull << 30, &v)))
        goto err_free;
    tp->sockbuf = (int)v;
    double ut;
    if ((st = hoop_param_double("HOOP_TCP_USER_TIMEOUT", 0, 86400, &ut)))
        goto err_free;
    tp->user_timeout_ms = (unsigned)(ut * 1000);
    if ((st = hoop_param_u64("HOOP_URING_ENTRIES", 4, 4096, &v)))
        goto err_free;
    if ((st = tcp_uring_init(tp, (unsigned)v)))
        goto err_free;
    snprintf(tp->desc, sizeof(tp->desc), "tcp/io_uring");
    *out = tp;
    return HOOP_OK;
err_free:
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
    *handle_len = TCP_HANDLE_BYTES;
    char as[HOOP_ADDR_STR_MAX];
    hoop_sock_addr_str((struct sockaddr *)&ss, as, sizeof(as));
    HOOP_INFO("rank %d: tcp transport listens on %s (%d socket%s per neighbour)", tp->rank, as,
              tp->nsocks, tp->nsocks > 1 ? "s" : "");
    return HOOP_OK;
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
    for (struct tcp_conn **pp = &tp->conns; *pp; pp = &(*pp)->next_conn)
        if (*pp == c) {
            *pp = c->next_conn;
            break;
        }
    for (int i = 0; i < c->nsocks; i++)
        if (c->socks[i].fd >= 0)
            close(c->socks[i].fd);
    free(c);
}

/* Data sockets are blocking: io_uring then waits for readiness itself
 * instead of failing the transfer with EAGAIN. */
static int tcp_ready_socket(struct tcp_tp *tp, int fd)
{
    hoop_sock_set_data_opts(fd, tp->sockbuf, tp->user_timeout_ms);
    return hoop_sock_set_blocking(fd, 1);
}

static void tcp_conn_add(struct tcp_tp *tp, struct tcp_conn *c)
{
    c->next_conn = tp->conns;
    tp->conns = c;
}

static hoop_status_t tcp_connect(void *vtp, int peer, const char *peer_host, const uint8_t *handle,
                                 uint16_t handle_len, uint64_t comm_id, uint64_t deadline_ns,
                                 void **out)
{
    struct tcp_tp *tp = vtp;
    if (handle_len != TCP_HANDLE_BYTES || handle[0] != TCP_HANDLE_VERSION ||
        (handle[1] != 4 && handle[1] != 6) || handle[20] < 1 || handle[20] > TCP_NSOCKS_MAX)
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
     * listener's count wins. */
    int nsocks = handle[20];
    struct tcp_conn *c = tcp_conn_new(tp, peer, nsocks);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: out of memory", tp->rank);
    hoop_status_t st = HOOP_OK;
    for (int i = 0; i < nsocks && st == HOOP_OK; i++) {
        int rc = hoop_sock_connect_retry((struct sockaddr *)&ss, len, deadline_ns, &c->socks[i].fd);
        if (rc == 0) {
            struct hoop_hello h = {.kind = HOOP_HELLO_DATA, .rank = (uint32_t)tp->rank,
                                   .size = (uint32_t)tp->size, .comm_id = comm_id,
                                   .aux = (uint32_t)i};
            memcpy(h.token, tp->token, HOOP_TOKEN_BYTES);
            uint8_t head[HOOP_HELLO_BYTES];
            hoop_hello_encode(&h, head);
            rc = hoop_sock_write_all(c->socks[i].fd, head, sizeof(head), deadline_ns);
        }
        if (rc == 0)
            rc = tcp_ready_socket(tp, c->socks[i].fd);
        if (rc)
            st = hoop_error(hoop_status_from_errno(rc),
                            "rank %d: tcp transport: connecting to rank %d (%s, %s), socket %d of "
                            "%d: %s", tp->rank, peer, peer_host, as, i + 1, nsocks,
                            hoop_errno_str(rc));
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
    uint64_t comm_id;
    int have;
};

static int tcp_on_hello(void *vctx, const struct hoop_hello_msg *m, int *done)
{
    struct tcp_accept_ctx *a = vctx;
    const struct hoop_hello *h = &m->hello;
    const char *why = NULL;
    if (h->kind != HOOP_HELLO_DATA)
        why = "not a data connection";
    else if (!hoop_token_equal(h->token, a->tp->token))
        why = "wrong job token";
    else if (h->comm_id != a->comm_id)
        why = "belongs to another communicator";
    else if (h->rank != (uint32_t)a->peer)
        why = "not from the expected ring neighbour";
    else if (h->aux >= (uint32_t)a->c->nsocks || a->c->socks[h->aux].fd >= 0)
        why = "bad or repeated socket index";
    if (why) {
        HOOP_WARN("rank %d: tcp transport: refused connection from %s (claims rank %u): %s",
                  a->tp->rank, m->addr_str, h->rank, why);
        return 0;
    }
    a->c->socks[h->aux].fd = m->fd;
    if (++a->have == a->c->nsocks)
        *done = 1;
    return 1;
}

static hoop_status_t tcp_accept(void *vtp, int peer, const char *peer_host, uint64_t comm_id,
                                uint64_t deadline_ns, void **out)
{
    struct tcp_tp *tp = vtp;
    struct tcp_conn *c = tcp_conn_new(tp, peer, tp->nsocks);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: tcp transport: out of memory", tp->rank);
    struct tcp_accept_ctx a = {.tp = tp, .c = c, .peer = peer, .comm_id = comm_id};
    char who[64];
    snprintf(who, sizeof(who), "rank %d: tcp transport", tp->rank);
    int rc = hoop_listener_serve(tp->lfd, deadline_ns, 0, tcp_on_hello, &a, who);
    for (int i = 0; rc == 0 && i < c->nsocks; i++)
        rc = tcp_ready_socket(tp, c->socks[i].fd);
    if (rc) {
        tcp_close(c);
        return hoop_error(hoop_status_from_errno(rc),
                          "rank %d: tcp transport: waiting for rank %d (%s) to connect: %s "
                          "(%d of %d sockets arrived)", tp->rank, peer, peer_host,
                          hoop_errno_str(rc), a.have, tp->nsocks);
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
    if (tp->ring_ok)
        io_uring_queue_exit(&tp->ring);
    if (tp->lfd >= 0)
        close(tp->lfd);
    free(tp);
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
    .cancel = tcp_cancel,
    .close = tcp_close,
    .destroy = tcp_destroy,
    .describe = tcp_describe,
};
