/* split.c - hoop_comm_split: communicators of groups of a communicator's
 * ranks, as MPI_Comm_split and ncclCommSplit make them.
 *
 * Every rank of the parent takes part. A rank that joins a group opens a
 * listener on the address its peers reach it by; one allgather over the
 * parent then tells every rank each rank's color, key and listener. Each
 * group forms its communicator as a job of its own: its first rank (by
 * key, then parent rank) serves the bootstrap on the listener it opened,
 * under a token derived from the parent's, so that nobody without the
 * parent's token can join, and no group's ranks can join another's. A last
 * allreduce over the parent tells every rank whether every group formed:
 * if one did not, no rank keeps its communicator, and all return an error
 * naming the rank that failed. */
#include "collectives/comm.h"
#include "common/auth.h"
#include "common/log.h"
#include "common/netif.h"
#include "common/sock.h"
#include "common/status.h"
#include "common/wire.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SPLIT_VERSION 1
/* version, status, color, key, port, host */
#define SPLIT_REC_BYTES (4 + 4 + 4 + 4 + 2 + HOOP_HOST_MAX)

struct split_rec {
    uint32_t version;
    int32_t status; /* hoop_status_t: this rank could not open its listener */
    int32_t color;
    int32_t key;
    uint16_t port;
    char host[HOOP_HOST_MAX];
};

static void rec_encode(const struct split_rec *r, uint8_t *out)
{
    struct hoop_buf b = {.p = out, .len = SPLIT_REC_BYTES};
    hoop_buf_put_u32(&b, r->version);
    hoop_buf_put_u32(&b, (uint32_t)r->status);
    hoop_buf_put_u32(&b, (uint32_t)r->color);
    hoop_buf_put_u32(&b, (uint32_t)r->key);
    hoop_buf_put_u16(&b, r->port);
    hoop_buf_put_bytes(&b, r->host, HOOP_HOST_MAX);
}

/* 0, or -EPROTO for a record no rank of this version sends. */
static int rec_decode(const uint8_t *in, struct split_rec *r)
{
    struct hoop_buf b = {.p = (uint8_t *)in, .len = SPLIT_REC_BYTES};
    r->version = hoop_buf_get_u32(&b);
    r->status = (int32_t)hoop_buf_get_u32(&b);
    r->color = (int32_t)hoop_buf_get_u32(&b);
    r->key = (int32_t)hoop_buf_get_u32(&b);
    r->port = hoop_buf_get_u16(&b);
    hoop_buf_get_bytes(&b, r->host, HOOP_HOST_MAX);
    if (r->version != SPLIT_VERSION || r->color < HOOP_SPLIT_NONE || r->status < 0 ||
        r->status > HOOP_ERR_ABORTED || memchr(r->host, 0, HOOP_HOST_MAX) == NULL)
        return -EPROTO;
    return 0;
}

/* A listener on the address by which this rank's peers reach it: that of
 * its connection to the parent's root (the root: that of its connection
 * to rank 1), as HOOP_SOCKET_IFNAME chooses it. */
static hoop_status_t split_listen(hoop_comm_t *c, int *lfd, struct split_rec *me)
{
    int fd = c->rank == 0 ? c->bs.fds[1] : c->bs.root_fd;
    struct sockaddr_storage local, peer, adv;
    socklen_t llen = sizeof(local), plen = sizeof(peer), alen = 0;
    if (getsockname(fd, (struct sockaddr *)&local, &llen) < 0 ||
        (c->rank > 0 && getpeername(fd, (struct sockaddr *)&peer, &plen) < 0))
        return hoop_error(HOOP_ERR_SYSTEM,
                          "rank %d: hoop_comm_split: the address of the "
                          "connection to the root: %s",
                          c->rank, hoop_errno_str(-errno));
    hoop_status_t st = hoop_netif_advertise(c->rank, (struct sockaddr *)(c->rank ? &peer : &local),
                                            (struct sockaddr *)&local, &adv, &alen);
    if (st)
        return st;
    int rc = hoop_sock_listen((struct sockaddr *)&adv, alen, lfd);
    if (rc)
        return hoop_error(HOOP_ERR_SYSTEM,
                          "rank %d: hoop_comm_split: cannot listen for its "
                          "group: %s",
                          c->rank, hoop_errno_str(rc));
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(*lfd, (struct sockaddr *)&bound, &blen) < 0 ||
        (rc = getnameinfo((struct sockaddr *)&adv, alen, me->host, sizeof(me->host), NULL, 0,
                          NI_NUMERICHOST)) != 0) {
        close(*lfd);
        *lfd = -1;
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: hoop_comm_split: the listener's address: %s",
                          c->rank, rc ? gai_strerror(rc) : hoop_errno_str(-errno));
    }
    me->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
    return HOOP_OK;
}

struct member {
    int32_t key;
    int rank;
};

static int member_cmp(const void *a, const void *b)
{
    const struct member *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Form this rank's group from the gathered records. */
static hoop_status_t split_form(hoop_comm_t *c, const struct split_rec *recs, int lfd,
                                hoop_comm_t **child)
{
    const int color = recs[c->rank].color;
    struct member *m = malloc((size_t)c->size * sizeof(*m));
    if (!m)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: hoop_comm_split: out of memory", c->rank);
    int n = 0, me = -1;
    for (int r = 0; r < c->size; r++)
        if (recs[r].color == color)
            m[n++] = (struct member){recs[r].key, r};
    qsort(m, (size_t)n, sizeof(*m), member_cmp);
    for (int i = 0; i < n; i++)
        if (m[i].rank == c->rank)
            me = i;
    const int leader = m[0].rank;
    free(m);

    struct hoop_boot_cfg b = {.rank = me,
                              .size = n,
                              .local_rank = -1,
                              .timeout_s = c->boot_timeout_s,
                              .launcher = HOOP_LAUNCHER_SPLIT,
                              .root_port = recs[leader].port};
    snprintf(b.root_host, sizeof(b.root_host), "%s", recs[leader].host);
    if (me == 0 && n > 1) {
        b.has_listener = 1;
        b.listener_fd = lfd;
    }
    /* The group's token: the parent's, the communicator's id, which split
     * this is, and the color. */
    uint8_t what[8 + 8 + 4];
    struct hoop_buf wb = {.p = what, .len = sizeof(what)};
    hoop_buf_put_u64(&wb, c->bs.comm_id);
    hoop_buf_put_u64(&wb, c->splits);
    hoop_buf_put_u32(&wb, (uint32_t)color);
    hoop_auth_derive(c->bs.token, what, sizeof(what), b.token);

    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.timeout_s = c->timeout_s;
    if (c->size > 1) {
        cfg.chunk_bytes = c->ring.chunk_bytes;
        cfg.pipeline_depth = c->ring.depth;
    }
    hoop_status_t st = hoop_comm_create(child, &cfg, &b);
    memset(b.token, 0, sizeof(b.token));
    if (st)
        hoop_error(st,
                   "rank %d: hoop_comm_split: the group of color %d (%d ranks, this one "
                   "its rank %d) did not form: %s",
                   c->rank, color, n, me, hoop_last_error());
    return st;
}

hoop_status_t hoop_comm_split(hoop_comm_t *c, int color, int key, hoop_comm_t **out)
{
    if (!c || !out)
        return hoop_error(HOOP_ERR_INVALID, "hoop_comm_split: %s is NULL",
                          !c ? "the communicator" : "the output pointer");
    *out = NULL;
    if (color < HOOP_SPLIT_NONE)
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: hoop_comm_split: color %d: give 0 or more, "
                          "or HOOP_SPLIT_NONE (-1) to join no group",
                          c->rank, color);
    c->splits++;
    struct split_rec mine = {.version = SPLIT_VERSION, .color = color, .key = key};
    int lfd = -1;
    char why[1024] = "";
    if (color >= 0 && c->size > 1) {
        hoop_status_t st = split_listen(c, &lfd, &mine);
        if (st) {
            /* Said to the others in the records, so that all fail. */
            mine.status = (int32_t)st;
            snprintf(why, sizeof(why), "%s", hoop_last_error());
        }
    }
    uint8_t *wire = malloc((size_t)c->size * SPLIT_REC_BYTES * 2);
    struct split_rec *recs = malloc((size_t)c->size * sizeof(*recs));
    if (!wire || !recs) {
        free(wire);
        free(recs);
        if (lfd >= 0)
            close(lfd);
        /* The others wait in the allgather until their deadline, and are
         * told this rank failed. */
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: hoop_comm_split: out of memory", c->rank);
    }
    uint8_t *all = wire + (size_t)c->size * SPLIT_REC_BYTES;
    rec_encode(&mine, wire);
    hoop_status_t st = hoop_allgather(c, wire, all, SPLIT_REC_BYTES, HOOP_U8);
    if (st) {
        hoop_error(st, "rank %d: hoop_comm_split: gathering the ranks' colors: %s", c->rank,
                   hoop_last_error());
        goto out;
    }
    for (int r = 0; r < c->size && !st; r++)
        if (rec_decode(all + (size_t)r * SPLIT_REC_BYTES, &recs[r]))
            st = hoop_error(HOOP_ERR_PEER,
                            "rank %d: hoop_comm_split: rank %d sent a record no "
                            "rank of this version sends (another version of hoop?)",
                            c->rank, r);
    for (int r = 0; r < c->size && !st; r++)
        if (recs[r].status)
            st = r == c->rank ? hoop_error((hoop_status_t)mine.status, "%s", why)
                              : hoop_error((hoop_status_t)recs[r].status,
                                           "rank %d: hoop_comm_split: rank %d could not prepare "
                                           "its group (see its log); no rank forms one",
                                           c->rank, r);
    if (st)
        goto out;

    hoop_comm_t *child = NULL;
    hoop_status_t mine_st = color >= 0 ? split_form(c, recs, lfd, &child) : HOOP_OK;
    if (mine_st)
        snprintf(why, sizeof(why), "%s", hoop_last_error());
    /* Whether every group formed, and whose did not: the first rank that
     * failed by itself, else the first that waited in vain (a group's
     * other ranks time out waiting for the one that failed). */
    int32_t failed = !mine_st                      ? INT32_MAX
                     : mine_st == HOOP_ERR_TIMEOUT ? c->size + c->rank
                                                   : c->rank;
    st = hoop_allreduce(c, &failed, &failed, 1, HOOP_I32, HOOP_MIN);
    if (!st && failed != INT32_MAX && failed >= c->size)
        failed -= c->size;
    if (!st && failed != INT32_MAX && (failed < 0 || failed >= c->size))
        st = hoop_error(HOOP_ERR_PEER,
                        "rank %d: hoop_comm_split: the ranks' agreement names "
                        "rank %d, which is no rank of %d: a rank lies or runs another version",
                        c->rank, (int)failed, c->size);
    else if (st) {
        hoop_error(st, "rank %d: hoop_comm_split: agreeing that every group formed: %s%s%s",
                   c->rank, hoop_last_error(), mine_st ? "; and this rank's had failed: " : "",
                   mine_st ? why : "");
    } else if (mine_st) {
        st = hoop_error(mine_st, "%s", why);
    } else if (failed != INT32_MAX) {
        st = hoop_error(HOOP_ERR_PEER,
                        "rank %d: hoop_comm_split: the group of rank %d (color "
                        "%d) did not form (see its log), so no rank keeps its group",
                        c->rank, (int)failed, recs[failed].color);
    }
    if (st)
        hoop_comm_destroy(child);
    else
        *out = child;
out:
    if (lfd >= 0)
        close(lfd);
    free(wire);
    free(recs);
    return st;
}
