/* bootstrap.c - a rank's side of the bootstrap: reach the root, join, and
 * read the table (rank 0 runs the root instead, see root.c). */
#include "bootstrap/bootstrap.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/netif.h"
#include "common/status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* This rank reached the root but cannot join (out of descriptors for its
 * data port, say): tell the root why, so that it fails the job at once
 * with this rank's reason instead of waiting for it and blaming the
 * configuration. Keeps the sentence. */
static hoop_status_t boot_cannot_join(struct hoop_bootstrap *bs, const struct hoop_boot_cfg *cfg,
                                      hoop_status_t st)
{
    const char *why = hoop_last_error();
    struct hoop_hello h = {.kind = HOOP_HELLO_REFUSE, .rank = (uint32_t)cfg->rank,
                           .size = (uint32_t)cfg->size, .aux = (uint32_t)st,
                           .body_len = (uint32_t)strnlen(why, HOOP_REFUSE_MAX)};
    uint8_t head[HOOP_HELLO_BYTES], reply[HOOP_AUTH_BYTES];
    hoop_hello_encode(&h, head);
    uint64_t dl = hoop_now_ns() + 1000000000ull;
    /* The root hears it only from a rank that proves the token. */
    if (hoop_auth_nonce(head) == 0 && hoop_sock_write_all(bs->root_fd, head, sizeof(head), dl) == 0 &&
        hoop_sock_write_all(bs->root_fd, why, h.body_len, dl) == 0)
        hoop_auth_connect(bs->root_fd, cfg->token, head, why, h.body_len, dl, reply);
    return st;
}

static hoop_status_t boot_join(struct hoop_bootstrap *bs, const struct hoop_boot_cfg *cfg,
                               hoop_boot_handle_fn handle_fn, void *ctx)
{
    uint64_t deadline = hoop_deadline_after(cfg->timeout_s);
    const char *rh = cfg->root_host;
    unsigned rp = cfg->root_port;
    struct sockaddr_storage ss;
    socklen_t len;
    hoop_status_t st = hoop_sock_resolve(rh, cfg->root_port, &ss, &len);
    if (st)
        return hoop_error(st, "rank %d: bootstrap root (HOOP_ROOT): %s", cfg->rank,
                          hoop_last_error());
    int rc = hoop_sock_connect_retry((struct sockaddr *)&ss, len, deadline, &bs->root_fd);
    if (rc && rc != -ETIMEDOUT && rc != -ECONNREFUSED)
        return hoop_error(hoop_status_from_errno(rc),
                          "rank %d: cannot connect to the bootstrap root at %s:%u: %s", cfg->rank,
                          rh, rp, hoop_errno_str(rc));
    if (rc)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: could not reach the bootstrap root at %s:%u within %.1f s (%s): "
                          "is rank 0 running, and is HOOP_ROOT the address where it listens?",
                          cfg->rank, rh, rp, cfg->timeout_s, hoop_errno_str(rc));

    struct hoop_peer *me = &bs->peers[cfg->rank];
    hoop_peer_self(me);
    struct sockaddr_storage local, adv;
    socklen_t llen = sizeof(local), alen;
    if (getsockname(bs->root_fd, (struct sockaddr *)&local, &llen) < 0)
        return boot_cannot_join(bs, cfg,
                                hoop_error(HOOP_ERR_SYSTEM, "rank %d: getsockname: %s", cfg->rank,
                                           hoop_errno_str(-errno)));
    if ((st = hoop_netif_advertise(cfg->rank, (struct sockaddr *)&ss, (struct sockaddr *)&local,
                                   &adv, &alen)))
        return boot_cannot_join(bs, cfg, st);
    if ((st = handle_fn(ctx, (struct sockaddr *)&adv, alen, me->handle, &me->handle_len)))
        return boot_cannot_join(bs, cfg, st);

    uint8_t msg[HOOP_HELLO_BYTES + HOOP_PEER_WIRE_MAX];
    struct hoop_buf b = {.p = msg + HOOP_HELLO_BYTES, .len = HOOP_PEER_WIRE_MAX};
    hoop_peer_encode(&b, me);
    struct hoop_hello h = {.kind = HOOP_HELLO_JOIN, .rank = (uint32_t)cfg->rank,
                           .size = (uint32_t)cfg->size, .body_len = (uint32_t)b.pos};
    hoop_hello_encode(&h, msg);
    rc = hoop_auth_nonce(msg);
    if (rc == 0)
        rc = hoop_sock_write_all(bs->root_fd, msg, HOOP_HELLO_BYTES + b.pos, deadline);
    if (rc)
        return hoop_error(hoop_status_from_errno(rc), "rank %d: sending join to the root %s:%u: %s",
                          cfg->rank, rh, rp, hoop_errno_str(rc));

    /* Each side proves the token; a root that answers with a hello has
     * refused this rank before that (another wire version, say). */
    uint8_t head[HOOP_HELLO_BYTES];
    rc = hoop_auth_connect(bs->root_fd, cfg->token, msg, msg + HOOP_HELLO_BYTES, b.pos, deadline,
                           head);
    int wrong_token = rc == -EACCES;
    if (rc == -EPROTONOSUPPORT) {
        char why[160];
        hoop_wire_version_why(hoop_wire_peer_version(head), why, sizeof(why));
        return hoop_error(HOOP_ERR_MISMATCH, "rank %d: the bootstrap root %s:%u %s", cfg->rank,
                          rh, rp, why);
    }
    if (rc == -EPROTO)
        return hoop_error(HOOP_ERR_PEER,
                          "rank %d: the root %s:%u answered the join with something that is not "
                          "a hoop token challenge (not a hoop root, or another hoop build?)",
                          cfg->rank, rh, rp);
    if (rc < 0 && rc != -EACCES && rc != -ETIMEDOUT)
        return hoop_error(HOOP_ERR_PEER,
                          "rank %d: the bootstrap root %s:%u closed the connection during the "
                          "token handshake (%s): is it a root of another hoop build? run the same "
                          "hoop build everywhere", cfg->rank, rh, rp, hoop_errno_str(rc));
    if (rc == 1) {
        rc = 0; /* its refusal is in head */
    } else if (rc == 0 || wrong_token) {
        /* A root that knows the token refuses a wrong one with its
         * sentence at once; one that does not answers nothing. */
        uint64_t dl = wrong_token ? hoop_now_ns() + 1000000000ull : deadline;
        rc = hoop_sock_read_all(bs->root_fd, head, sizeof(head), dl < deadline ? dl : deadline);
    }
    if (rc && wrong_token)
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: the bootstrap root %s:%u could not prove this job's token: "
                          "wrong job token: rank %d's HOOP_TOKEN differs from rank 0's (another "
                          "job?)", cfg->rank, rh, rp, cfg->rank);
    if (rc == -ETIMEDOUT)
        return hoop_error(HOOP_ERR_TIMEOUT,
                          "rank %d: joined the root %s:%u but no table came within %.1f s: some "
                          "ranks never arrived (rank 0's error names them)",
                          cfg->rank, rh, rp, cfg->timeout_s);
    if (rc)
        return hoop_error(HOOP_ERR_PEER, "rank %d: waiting for the table from the root %s:%u: %s",
                          cfg->rank, rh, rp, hoop_errno_str(rc));
    size_t table_max = (size_t)cfg->size * HOOP_PEER_WIRE_MAX;
    rc = hoop_hello_decode(head, table_max > HOOP_REFUSE_MAX ? table_max : HOOP_REFUSE_MAX, &h);
    if (rc)
        return hoop_error(HOOP_ERR_PEER, "rank %d: the root %s:%u answered garbage: %s", cfg->rank,
                          rh, rp, hoop_hello_strerror(rc));
    if (h.kind == HOOP_HELLO_REFUSE) {
        char why[HOOP_REFUSE_MAX + 1] = {0};
        size_t n = h.body_len < HOOP_REFUSE_MAX ? h.body_len : HOOP_REFUSE_MAX;
        hoop_sock_read_all(bs->root_fd, why, n, hoop_now_ns() + 1000000000ull);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)why[i] < 0x20 || (unsigned char)why[i] > 0x7e)
                why[i] = '?';
        hoop_status_t code = (h.aux >= HOOP_ERR_INVALID && h.aux <= HOOP_ERR_ABORTED)
                                 ? (hoop_status_t)h.aux : HOOP_ERR_PEER;
        return hoop_error(code, "rank %d: the bootstrap root %s:%u refused this rank: %s",
                          cfg->rank, rh, rp, why);
    }
    if (h.kind != HOOP_HELLO_TABLE || wrong_token || h.size != (uint32_t)cfg->size)
        return hoop_error(HOOP_ERR_PEER,
                          "rank %d: the root %s:%u answered with something that is not this job's "
                          "table (kind %u, size %u)", cfg->rank, rh, rp, h.kind, h.size);
    uint8_t *body = malloc(h.body_len ? h.body_len : 1);
    if (!body)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory for the table", cfg->rank);
    rc = hoop_sock_read_all(bs->root_fd, body, h.body_len, deadline);
    if (rc) {
        free(body);
        return hoop_error(hoop_status_from_errno(rc), "rank %d: reading the table from %s:%u: %s",
                          cfg->rank, rh, rp, hoop_errno_str(rc));
    }
    if (!hoop_auth_sealed(cfg->token, head, body, h.body_len)) {
        free(body);
        return hoop_error(HOOP_ERR_PEER, "rank %d: the table from the root %s:%u is not sealed with "
                          "this job's token", cfg->rank, rh, rp);
    }
    struct hoop_buf tb = {.p = body, .len = h.body_len};
    int bad = 0;
    for (int r = 0; r < cfg->size && !bad; r++)
        bad = hoop_peer_decode(&tb, &bs->peers[r]);
    free(body);
    if (bad || tb.pos != tb.len)
        return hoop_error(HOOP_ERR_PEER, "rank %d: the table from the root %s:%u is malformed",
                          cfg->rank, rh, rp);
    bs->comm_id = h.comm_id;
    return HOOP_OK;
}

hoop_status_t hoop_bootstrap_init(struct hoop_bootstrap *bs, const struct hoop_boot_cfg *cfg,
                                  hoop_boot_handle_fn handle_fn, void *ctx)
{
    memset(bs, 0, sizeof(*bs));
    bs->rank = cfg->rank;
    bs->size = cfg->size;
    memcpy(bs->token, cfg->token, HOOP_TOKEN_BYTES);
    bs->root_fd = -1;
    bs->peers = calloc((size_t)cfg->size, sizeof(*bs->peers));
    bs->fds = malloc((size_t)cfg->size * sizeof(int));
    if (!bs->peers || !bs->fds) {
        hoop_bootstrap_fini(bs);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory for %d peers", cfg->rank,
                          cfg->size);
    }
    for (int r = 0; r < cfg->size; r++)
        bs->fds[r] = -1;
    hoop_status_t st;
    if (cfg->size == 1) {
        hoop_peer_self(&bs->peers[0]);
        if (getrandom(&bs->comm_id, sizeof(bs->comm_id), 0) != sizeof(bs->comm_id))
            bs->comm_id = hoop_now_ns();
        st = HOOP_OK;
    } else if (cfg->rank == 0) {
        st = hoop_bootstrap_root(bs, cfg, handle_fn, ctx);
    } else {
        st = boot_join(bs, cfg, handle_fn, ctx);
    }
    if (st)
        hoop_bootstrap_fini(bs);
    return st;
}

void hoop_bootstrap_fini(struct hoop_bootstrap *bs)
{
    if (bs->root_fd >= 0)
        close(bs->root_fd);
    if (bs->fds)
        for (int r = 0; r < bs->size; r++)
            if (bs->fds[r] >= 0)
                close(bs->fds[r]);
    free(bs->fds);
    free(bs->peers);
    bs->fds = NULL;
    bs->peers = NULL;
    bs->root_fd = -1;
}
