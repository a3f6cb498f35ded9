/* root.c - rank 0's side of the bootstrap: listen at HOOP_ROOT, check each
 * joining rank, then hand everyone the table. */
#include "bootstrap/bootstrap.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/listener.h"
#include "common/log.h"
#include "common/netif.h"
#include "common/status.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct root_ctx {
    const struct hoop_boot_cfg *cfg;
    struct hoop_bootstrap *bs;
    int joined;
    int failed; /* a rank that said it cannot join, or -1 */
    hoop_status_t failed_status;
    char failed_why[HOOP_REFUSE_MAX + 1];
    char who[HOOP_HOST_MAX + 48];
};

/* Tell a refused peer why, briefly; it may be gone or hostile, so this
 * never waits long and never sends the job token. */
static void root_refuse(int fd, const struct hoop_boot_cfg *cfg, hoop_status_t code,
                        const char *reason)
{
    struct hoop_hello h = {.kind = HOOP_HELLO_REFUSE, .rank = 0, .size = (uint32_t)cfg->size,
                           .aux = (uint32_t)code, .body_len = (uint32_t)strlen(reason)};
    uint8_t head[HOOP_HELLO_BYTES];
    hoop_hello_encode(&h, head);
    uint64_t dl = hoop_now_ns() + 1000000000ull;
    if (hoop_sock_write_all(fd, head, sizeof(head), dl) == 0)
        hoop_sock_write_all(fd, reason, h.body_len, dl);
}

static int root_on_hello(void *vctx, const struct hoop_hello_msg *m, int *done)
{
    struct root_ctx *c = vctx;
    const struct hoop_boot_cfg *cfg = c->cfg;
    const struct hoop_hello *h = &m->hello;
    char why[256];
    hoop_status_t code = HOOP_ERR_INVALID;

    /* The listener hands over only peers that proved the job token. */
    if (h->kind == HOOP_HELLO_REFUSE && h->rank > 0 &&
        h->rank < (uint32_t)cfg->size && c->bs->fds[h->rank] < 0) {
        /* A rank of this job that cannot join: the job cannot form. */
        c->failed = (int)h->rank;
        c->failed_status = h->aux >= HOOP_ERR_INVALID && h->aux <= HOOP_ERR_ABORTED
                               ? (hoop_status_t)h->aux : HOOP_ERR_PEER;
        size_t n = h->body_len < HOOP_REFUSE_MAX ? h->body_len : HOOP_REFUSE_MAX;
        memcpy(c->failed_why, m->body, n);
        c->failed_why[n] = '\0';
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c->failed_why[i] < 0x20 || (unsigned char)c->failed_why[i] > 0x7e)
                c->failed_why[i] = '?';
        *done = 1;
        return 0;
    }
    if (h->kind != HOOP_HELLO_JOIN) {
        snprintf(why, sizeof(why), "expected a join hello, got kind %u", h->kind);
    } else if (h->size != (uint32_t)cfg->size) {
        code = HOOP_ERR_MISMATCH;
        snprintf(why, sizeof(why), "rank %u says the job has %u ranks, rank 0 says %d", h->rank,
                 h->size, cfg->size);
    } else if (h->rank == 0 || h->rank >= (uint32_t)cfg->size) {
        snprintf(why, sizeof(why), "rank %u is not in 1..%d", h->rank, cfg->size - 1);
    } else if (c->bs->fds[h->rank] >= 0) {
        snprintf(why, sizeof(why), "rank %u has already joined; two processes claim rank %u",
                 h->rank, h->rank);
    } else {
        struct hoop_buf b = {.p = (uint8_t *)m->body, .len = h->body_len};
        struct hoop_peer p;
        if (hoop_peer_decode(&b, &p) == 0 && b.pos == b.len) {
            c->bs->fds[h->rank] = m->fd;
            c->bs->peers[h->rank] = p;
            c->joined++;
            HOOP_DEBUG("%s: rank %u joined from %s (%s, pid %u)", c->who, h->rank, m->addr_str,
                       p.host, p.pid);
            if (c->joined == cfg->size - 1)
                *done = 1;
            return 1;
        }
        snprintf(why, sizeof(why), "malformed join message from rank %u", h->rank);
    }
    hoop_log_limited(m->log, c->who, "%s: refused %s: %s", c->who, m->addr_str, why);
    root_refuse(m->fd, cfg, code, why);
    return 0;
}

static int root_listen(const struct hoop_boot_cfg *cfg, int *lfd)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (hoop_sock_resolve(cfg->root_host, cfg->root_port, &ss, &len))
        return -EDESTADDRREQ; /* the sentence is set */
    int rc = hoop_sock_listen((struct sockaddr *)&ss, len, lfd);
    if (rc != -EADDRNOTAVAIL)
        return rc;
    /* The root's name may resolve to an address this host does not own
     * (NAT, a service address): listen on every address instead. */
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 any = {.sin6_family = AF_INET6, .sin6_port = htons(cfg->root_port),
                                   .sin6_addr = in6addr_any};
        return hoop_sock_listen((struct sockaddr *)&any, sizeof(any), lfd);
    }
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons(cfg->root_port),
                              .sin_addr.s_addr = htonl(INADDR_ANY)};
    return hoop_sock_listen((struct sockaddr *)&any, sizeof(any), lfd);
}

static hoop_status_t root_timeout(struct root_ctx *c)
{
    const struct hoop_boot_cfg *cfg = c->cfg;
    char missing[512];
    size_t n = 0;
    int nmiss = 0;
    missing[0] = '\0';
    for (int r = 1; r < cfg->size; r++) {
        if (c->bs->fds[r] >= 0)
            continue;
        if (nmiss < 16 && n < sizeof(missing))
            n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%srank %d", nmiss ? ", " : "",
                                  r);
        nmiss++;
    }
    if (nmiss > 16 && n < sizeof(missing))
        snprintf(missing + n, sizeof(missing) - n, " and %d more", nmiss - 16);
    hoop_error(HOOP_ERR_TIMEOUT,
               "rank 0: bootstrap root %s:%u waited %.1f s; %s never arrived (%d of %d ranks "
               "joined): check that every rank was started with the same HOOP_SIZE, HOOP_ROOT "
               "and HOOP_TOKEN",
               cfg->root_host, cfg->root_port, cfg->timeout_s, missing, c->joined + 1, cfg->size);
    char reason[700];
    snprintf(reason, sizeof(reason), "rank 0 gave up after %.1f s: %s never arrived",
             cfg->timeout_s, missing);
    for (int r = 1; r < cfg->size; r++)
        if (c->bs->fds[r] >= 0)
            root_refuse(c->bs->fds[r], cfg, HOOP_ERR_TIMEOUT, reason);
    return HOOP_ERR_TIMEOUT;
}

/* The root cannot go on (out of descriptors): say so, and tell the ranks
 * that have joined, so that they do not wait for a table or blame their
 * configuration. */
static hoop_status_t root_failed(struct root_ctx *c, int rc)
{
    const struct hoop_boot_cfg *cfg = c->cfg;
    hoop_error(HOOP_ERR_SYSTEM, "%s: cannot take the connections of the ranks: %s", c->who,
               hoop_errno_str(rc));
    char reason[700];
    snprintf(reason, sizeof(reason), "%s", hoop_last_error());
    for (int r = 1; r < cfg->size; r++)
        if (c->bs->fds[r] >= 0)
            root_refuse(c->bs->fds[r], cfg, HOOP_ERR_SYSTEM, reason);
    return hoop_error(HOOP_ERR_SYSTEM, "%s", reason);
}

hoop_status_t hoop_bootstrap_root(struct hoop_bootstrap *bs, const struct hoop_boot_cfg *cfg,
                                  hoop_boot_handle_fn handle_fn, void *ctx)
{
    uint64_t deadline = hoop_deadline_after(cfg->timeout_s);
    struct root_ctx c = {.cfg = cfg, .bs = bs, .failed = -1};
    snprintf(c.who, sizeof(c.who), "rank 0: bootstrap root %s:%u", cfg->root_host, cfg->root_port);
    int lfd = cfg->has_listener ? cfg->listener_fd : -1;
    int rc = cfg->has_listener ? 0 : root_listen(cfg, &lfd);
    if (rc == -EDESTADDRREQ)
        return hoop_error(HOOP_ERR_INVALID,
                          "rank 0: bootstrap root (HOOP_ROOT) %s:%u: %s: set HOOP_ROOT to a name "
                          "or address of rank 0's host", cfg->root_host, cfg->root_port,
                          hoop_last_error());
    if (rc)
        return hoop_error(HOOP_ERR_SYSTEM, "%s: cannot listen: %s%s", c.who, hoop_errno_str(rc),
                          rc == -EADDRINUSE ? " (another job on this port? pick another HOOP_ROOT port)"
                                            : "");
    struct hoop_listener l;
    rc = hoop_listener_open(&l, lfd,
                            HOOP_PEER_WIRE_MAX > HOOP_REFUSE_MAX ? HOOP_PEER_WIRE_MAX : HOOP_REFUSE_MAX,
                            c.who, 0, cfg->token);
    if (rc == 0)
        rc = hoop_listener_serve(&l, deadline, NULL, 0, root_on_hello, &c);
    hoop_listener_close(&l);
    if (!cfg->has_listener)
        close(lfd);
    if (rc == -ETIMEDOUT)
        return root_timeout(&c);
    if (rc)
        return root_failed(&c, rc);
    if (c.failed >= 0) {
        hoop_error(c.failed_status, "%s: rank %d could not join: %s", c.who, c.failed,
                   c.failed_why);
        char reason[HOOP_REFUSE_MAX + 1];
        snprintf(reason, sizeof(reason), "%s", hoop_last_error());
        for (int r = 1; r < cfg->size; r++)
            if (bs->fds[r] >= 0)
                root_refuse(bs->fds[r], cfg, c.failed_status, reason);
        return hoop_error(c.failed_status, "%s", reason);
    }

    /* Rank 0's route to the root is the address the others used to reach
     * it, and that address also tells whether the job may span hosts. */
    struct sockaddr_storage local, adv;
    socklen_t llen = sizeof(local), alen;
    if (getsockname(bs->fds[1], (struct sockaddr *)&local, &llen) < 0)
        return hoop_error(HOOP_ERR_SYSTEM, "%s: getsockname: %s", c.who, hoop_errno_str(-errno));
    hoop_peer_self(&bs->peers[0]);
    hoop_status_t st = hoop_netif_advertise(0, (struct sockaddr *)&local,
                                            (struct sockaddr *)&local, &adv, &alen);
    if (st) {
        /* The others would only see the root hang up. */
        char reason[700];
        snprintf(reason, sizeof(reason), "%s", hoop_last_error());
        for (int r = 1; r < cfg->size; r++)
            root_refuse(bs->fds[r], cfg, st, reason);
        return st;
    }
    st = handle_fn(ctx, (struct sockaddr *)&adv, alen, bs->peers[0].handle,
                   &bs->peers[0].handle_len);
    if (st)
        return st;
    if (getrandom(&bs->comm_id, sizeof(bs->comm_id), 0) != sizeof(bs->comm_id))
        bs->comm_id = hoop_now_ns() ^ ((uint64_t)getpid() << 32);

    size_t cap = (size_t)cfg->size * HOOP_PEER_WIRE_MAX;
    uint8_t *body = malloc(cap);
    if (!body)
        return hoop_error(HOOP_ERR_SYSTEM, "%s: out of memory for the table", c.who);
    struct hoop_buf b = {.p = body, .len = cap};
    for (int r = 0; r < cfg->size; r++)
        hoop_peer_encode(&b, &bs->peers[r]);
    struct hoop_hello h = {.kind = HOOP_HELLO_TABLE, .rank = 0, .size = (uint32_t)cfg->size,
                           .comm_id = bs->comm_id, .body_len = (uint32_t)b.pos};
    uint8_t head[HOOP_HELLO_BYTES];
    hoop_hello_encode(&h, head);
    hoop_auth_seal(cfg->token, head, body, b.pos);
    st = HOOP_OK;
    for (int r = 1; r < cfg->size && st == HOOP_OK; r++) {
        rc = hoop_sock_write_all(bs->fds[r], head, sizeof(head), deadline);
        if (rc == 0)
            rc = hoop_sock_write_all(bs->fds[r], body, b.pos, deadline);
        if (rc)
            st = hoop_error(hoop_status_from_errno(rc),
                            "%s: sending the table to rank %d (%s) failed: %s", c.who, r,
                            bs->peers[r].host, hoop_errno_str(rc));
    }
    free(body);
    return st;
}
