/* mem.c - hoop_mem_alloc and hoop_mem_free: memory every rank of one host
 * maps (mem.h).
 *
 * An allocation is one collective call. Each rank makes its memfd and a
 * listener in the abstract namespace (nothing on any file system, nothing
 * left after a SIGKILL), and an allgather tells every rank the others'
 * listeners and sizes. Each rank then connects to every other's listener
 * and sends its memfd with a hello (SCM_RIGHTS) without waiting to be
 * accepted; once an allreduce says that every send went out, each accepts
 * the others' hellos, already queued, and checks each: the kernel's word
 * on who sent it (this user, the pid that rank published), a MAC keyed by
 * the job token over the hello and this listener's address, the
 * allocation's number and size, a sealed memfd of that size. A last
 * allreduce says whether every rank mapped every other's: if one did not,
 * no rank keeps the others' mappings, and the memory is each rank's own.
 * Strangers on the listener are refused and said in the log. */
#include "collectives/comm.h"
#include "collectives/mem.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/fdpass.h"
#include "common/log.h"
#include "common/status.h"
#include "common/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MEM_VERSION 1
#define MEM_REC_BYTES 32            /* version, status, pid, nonce, bytes */
#define MEM_HELLO_MAGIC 0x4d4f4f48u /* "HOOM" */
#define MEM_HELLO_BYTES 80
#define MEM_HELLO_MAC 48
/* How long an accepted socket may take to show its hello (it was sent
 * before the allreduce that let this rank accept). */
#define MEM_HELLO_WAIT_NS 2000000000ull
_Static_assert(MEM_HELLO_BYTES >= HOOP_HELLO_BYTES,
               "the MAC binds the first 64 bytes and the rest");

static struct hoop_mem_set *mem_set(hoop_comm_t *c)
{
    if (!c->mem && (c->mem = calloc(1, sizeof(*c->mem))) &&
        !(c->mem->bufs = calloc(2 * (size_t)c->size, sizeof(*c->mem->bufs)))) {
        free(c->mem);
        c->mem = NULL;
    }
    return c->mem;
}

static void region_unmap_peers(hoop_comm_t *c, struct hoop_mem_region *g)
{
    if (g->peer)
        for (int k = 0; k < c->size; k++)
            if (k != c->rank && g->peer[k])
                munmap(g->peer[k], g->peer_map[k]);
    free(g->peer);
    free(g->peer_bytes);
    free(g->peer_map);
    g->peer = NULL;
    g->peer_bytes = g->peer_map = NULL;
    g->shared = 0;
}

static void region_free(hoop_comm_t *c, struct hoop_mem_region *g)
{
    region_unmap_peers(c, g);
    if (g->base)
        munmap(g->base, g->map_bytes);
    free(g);
}

struct hoop_mem_region *hoop_mem_ctl_region(const hoop_comm_t *c)
{
    for (struct hoop_mem_region *g = c->mem ? c->mem->regions : NULL; g; g = g->next)
        if (g->shared)
            return g;
    return NULL;
}

struct hoop_mem_region *hoop_mem_find(const hoop_comm_t *c, const void *p, size_t n, uint64_t *off)
{
    uintptr_t a = (uintptr_t)p;
    for (struct hoop_mem_region *g = c->mem ? c->mem->regions : NULL; g; g = g->next) {
        uintptr_t lo = (uintptr_t)g->base + HOOP_MEM_CTL_BYTES;
        if (g->shared && a >= lo && a - lo <= g->bytes && n <= g->bytes - (a - lo)) {
            *off = a - lo;
            return g;
        }
    }
    return NULL;
}

void hoop_mem_fini(hoop_comm_t *c)
{
    if (!c->mem)
        return;
    while (c->mem->regions) {
        struct hoop_mem_region *g = c->mem->regions;
        c->mem->regions = g->next;
        region_free(c, g);
    }
    free(c->mem->bufs);
    free(c->mem);
    c->mem = NULL;
}

/* The MAC at MEM_HELLO_MAC, keyed by the token, over the hello (that field
 * zeroed) and the address of the listener it goes to. */
static void mem_mac(const uint8_t *token, const uint8_t m[MEM_HELLO_BYTES], uint32_t pid,
                    uint64_t nonce, uint8_t mac[HOOP_MAC_BYTES])
{
    uint8_t h[MEM_HELLO_BYTES], where[HOOP_AUTH_NONCE_BYTES] = {0};
    memcpy(h, m, sizeof(h));
    memset(h + MEM_HELLO_MAC, 0, HOOP_MAC_BYTES);
    hoop_put_le(where, pid, 4);
    hoop_put_le(where + 4, nonce, 8);
    hoop_auth_mac(token, 'G', h, h + HOOP_HELLO_BYTES, MEM_HELLO_BYTES - HOOP_HELLO_BYTES, where,
                  mac);
}

struct mem_rec {
    uint32_t version, status, pid;
    uint64_t nonce, bytes;
};

static void rec_encode(const struct mem_rec *r, uint8_t *out)
{
    hoop_put_le(out, r->version, 4);
    hoop_put_le(out + 4, r->status, 4);
    hoop_put_le(out + 8, r->pid, 4);
    hoop_put_le(out + 12, 0, 4);
    hoop_put_le(out + 16, r->nonce, 8);
    hoop_put_le(out + 24, r->bytes, 8);
}

static void rec_decode(const uint8_t *in, struct mem_rec *r)
{
    r->version = (uint32_t)hoop_get_le(in, 4);
    r->status = (uint32_t)hoop_get_le(in + 4, 4);
    r->pid = (uint32_t)hoop_get_le(in + 8, 4);
    r->nonce = hoop_get_le(in + 16, 8);
    r->bytes = hoop_get_le(in + 24, 8);
}

/* The caller's bytes after the control page, rounded up to pages: 0 when
 * that does not fit a size_t. */
static size_t map_len(uint64_t bytes)
{
    size_t page = HOOP_MEM_CTL_BYTES;
    if (bytes > SIZE_MAX - 2 * page)
        return 0;
    return page + ((size_t)bytes + page - 1) / page * page;
}

/* This rank's memory: a sealed memfd, mapped (*fd), or where no memfd can
 * be made (a seccomp profile, a limit), private memory that no other rank
 * can map (*fd -1, and *nofd says why). 0, or -errno where no memory at
 * all can be had (what says which call). */
static int region_make(struct hoop_mem_region *g, int *fd, const char **what, char *nofd, size_t n)
{
    int rc = 0;
    *what = "memfd_create";
    if ((*fd = memfd_create("hoop-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING)) < 0)
        rc = -errno;
    else if ((*what = "ftruncate", ftruncate(*fd, (off_t)g->map_bytes)))
        rc = -errno;
    else if ((*what = "F_ADD_SEALS",
              fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)))
        rc = -errno;
    if (rc) {
        snprintf(nofd, n, "%s: %s", *what, hoop_errno_str(rc));
        if (*fd >= 0)
            close(*fd);
        *fd = -1;
    }
    *what = "mmap";
    void *p = mmap(NULL, g->map_bytes, PROT_READ | PROT_WRITE,
                   (*fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS) | MAP_POPULATE, *fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    g->base = p;
    return 0;
}

static int mem_listen(uint32_t pid, uint64_t nonce, int backlog, int *lfd)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un a;
    socklen_t al = hoop_fdpass_addr(&a, "hoop-mem", pid, nonce);
    if (bind(fd, (struct sockaddr *)&a, al) || listen(fd, backlog)) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    *lfd = fd;
    return 0;
}

/* Send rank k this rank's memfd with its hello, without waiting to be
 * accepted. 0 or -errno. */
static int mem_give(hoop_comm_t *c, const struct mem_rec *to, int memfd, uint64_t id,
                    const struct hoop_mem_region *g, uint64_t deadline)
{
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_un a;
    socklen_t al = hoop_fdpass_addr(&a, "hoop-mem", to->pid, to->nonce);
    int rc = 0;
    /* A full backlog (strangers) is waited out within the deadline. */
    while (connect(s, (struct sockaddr *)&a, al)) {
        rc = -errno;
        if ((rc != -EAGAIN && rc != -EINTR) || hoop_now_ns() >= deadline)
            break;
        poll(NULL, 0, 1);
        rc = 0;
    }
    if (!rc) {
        uint8_t m[MEM_HELLO_BYTES] = {0};
        hoop_put_le(m, MEM_HELLO_MAGIC, 4);
        hoop_put_le(m + 4, MEM_VERSION, 2);
        hoop_put_le(m + 8, (uint64_t)c->rank, 4);
        hoop_put_le(m + 12, (uint64_t)c->size, 4);
        hoop_put_le(m + 16, c->bs.comm_id, 8);
        hoop_put_le(m + 24, id, 8);
        hoop_put_le(m + 32, g->bytes, 8);
        hoop_put_le(m + 40, g->map_bytes, 8);
        mem_mac(c->bs.token, m, to->pid, to->nonce, m + MEM_HELLO_MAC);
        rc = hoop_fdpass_send(s, m, sizeof(m), &memfd, 1);
    }
    close(s);
    return rc;
}

/* Read one hello from an accepted socket and map what it brings into g
 * for its rank: 0, or -errno with why said (the connection refused). */
static int mem_take(hoop_comm_t *c, int fd, const struct mem_rec *recs, uint64_t my_nonce,
                    uint64_t id, struct hoop_mem_region *g, char *why, size_t n)
{
    uint8_t m[MEM_HELLO_BYTES];
    int memfd = -1, nfds = 0;
    ssize_t got =
        hoop_fdpass_recv(fd, m, sizeof(m), &memfd, 1, &nfds, hoop_now_ns() + MEM_HELLO_WAIT_NS);
    if (got == -ETIMEDOUT) {
        snprintf(why, n, "said nothing in time");
        return -ETIMEDOUT;
    }
    int rc = 0;
    uint32_t rank = 0;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    uint8_t mac[HOOP_MAC_BYTES];
    uint64_t bytes = 0, mapb = 0;
    if (got < 0) {
        snprintf(why, n, "could not be read: %s", hoop_errno_str((int)got));
        rc = (int)got;
    } else if (got != (ssize_t)sizeof(m)) {
        snprintf(why, n, "sent %zd bytes for its %d-byte hello", got, MEM_HELLO_BYTES);
        rc = -EPROTO;
    } else if (nfds != 1) {
        snprintf(why, n, "sent other than one descriptor with its hello");
        rc = -EPROTO;
    } else if (hoop_get_le(m, 4) != MEM_HELLO_MAGIC || hoop_get_le(m + 4, 2) != MEM_VERSION) {
        snprintf(why, n, "is not a hoop allocation's hello of this version");
        rc = -EPROTO;
    } else if (mem_mac(c->bs.token, m, (uint32_t)getpid(), my_nonce, mac),
               !hoop_mac_equal(mac, m + MEM_HELLO_MAC)) {
        snprintf(why, n, "did not prove this job's token (its HOOP_TOKEN differs: another job?)");
        rc = -EACCES;
    } else if (hoop_get_le(m + 16, 8) != c->bs.comm_id ||
               hoop_get_le(m + 12, 4) != (uint64_t)c->size || hoop_get_le(m + 24, 8) != id) {
        snprintf(why, n, "belongs to another communicator or allocation");
        rc = -EPROTO;
    } else if ((rank = (uint32_t)hoop_get_le(m + 8, 4)) >= (uint32_t)c->size ||
               rank == (uint32_t)c->rank) {
        snprintf(why, n, "claims a rank that cannot send it");
        rc = -EPROTO;
    } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cred.uid != geteuid() ||
               (uint32_t)cred.pid != recs[rank].pid) {
        snprintf(why, n, "claims rank %u but its process is not that rank's of this user", rank);
        rc = -EACCES;
    } else if (g->peer[rank]) {
        snprintf(why, n, "claims rank %u, whose memory is already here", rank);
        rc = -EPROTO;
    } else if ((bytes = hoop_get_le(m + 32, 8)) != recs[rank].bytes ||
               (mapb = hoop_get_le(m + 40, 8)) != map_len(bytes) || !mapb) {
        snprintf(why, n, "from rank %u gives a size that is not the one it published", rank);
        rc = -EPROTO;
    }
    if (!rc) {
        struct stat st;
        int seals = fcntl(memfd, F_GET_SEALS);
        void *p;
        if (fstat(memfd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != mapb ||
            seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
            snprintf(why, n, "from rank %u sent memory that is not a sealed memfd of %llu bytes",
                     rank, (unsigned long long)mapb);
            rc = -EPROTO;
        } else if ((p = mmap(NULL, (size_t)mapb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                             memfd, 0)) == MAP_FAILED) {
            rc = -errno;
            snprintf(why, n, "from rank %u sent memory this rank cannot map: %s", rank,
                     hoop_errno_str(rc));
        } else {
            g->peer[rank] = p;
            g->peer_bytes[rank] = (size_t)bytes;
            g->peer_map[rank] = (size_t)mapb;
        }
    }
    if (memfd >= 0)
        close(memfd);
    return rc;
}

/* Accept the other ranks' hellos (queued before the allreduce that let
 * this rank accept), refusing strangers. 0, or -errno with why. */
static int mem_take_all(hoop_comm_t *c, int lfd, const struct mem_rec *recs, uint64_t my_nonce,
                        uint64_t id, struct hoop_mem_region *g, uint64_t deadline, char *why,
                        size_t n)
{
    for (int have = 0; have < c->size - 1;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
                snprintf(why, n, "accept: %s", hoop_errno_str(-errno));
                return -errno;
            }
            int ms = hoop_ms_left(deadline);
            if (ms == 0) {
                snprintf(why, n, "%d of the other ranks' memory did not come in time",
                         c->size - 1 - have);
                return -ETIMEDOUT;
            }
            struct pollfd p = {.fd = lfd, .events = POLLIN};
            poll(&p, 1, ms);
            continue;
        }
        char w[200];
        int rc = mem_take(c, fd, recs, my_nonce, id, g, w, sizeof(w));
        close(fd);
        if (rc)
            HOOP_WARN("rank %d: hoop_mem_alloc: refused a connection to its listener: it %s",
                      c->rank, w);
        else
            have++;
    }
    return 0;
}

/* The allreduce of one status word (the largest wins), over the comm. */
static hoop_status_t agree_max(hoop_comm_t *c, uint32_t *v)
{
    return hoop_allreduce(c, v, v, 1, HOOP_U32, HOOP_MAX);
}

/* Share g (this rank's, mapped; its memfd fd) with every other rank.
 * HOOP_OK, with g->shared set when every rank maps every other's, else
 * with why said (the memory each rank's own, on every rank); or the status
 * of a failed collective. */
static hoop_status_t mem_share(hoop_comm_t *c, struct hoop_mem_region *g, int fd, const char *nofd,
                               struct mem_rec *recs, uint8_t *wire, char *why, size_t n)
{
    uint64_t deadline = hoop_deadline_after(c->timeout_s);
    uint64_t nonce = 0;
    int lfd = -1, rc = 0;
    struct mem_rec mine = {.version = MEM_VERSION, .pid = (uint32_t)getpid(), .bytes = g->bytes};
    if (fd < 0) {
        mine.status = 1;
        snprintf(why, n, "rank %d cannot make a memfd (%s)", c->rank, nofd);
    } else if ((rc = hoop_auth_random(&nonce, sizeof(nonce))) ||
               (rc = mem_listen(mine.pid, nonce, c->size, &lfd))) {
        mine.status = 1;
        snprintf(why, n, "rank %d cannot listen for the others' memory: %s", c->rank,
                 hoop_errno_str(rc));
    }
    mine.nonce = nonce;
    uint8_t *all = wire + MEM_REC_BYTES;
    rec_encode(&mine, wire);
    hoop_status_t st = hoop_allgather(c, wire, all, MEM_REC_BYTES, HOOP_U8);
    if (st)
        goto out;
    uint32_t refused = 0;
    for (int k = 0; k < c->size; k++) {
        rec_decode(all + (size_t)k * MEM_REC_BYTES, &recs[k]);
        if (recs[k].version != MEM_VERSION || !map_len(recs[k].bytes)) {
            st = hoop_error(HOOP_ERR_PEER,
                            "rank %d: hoop_mem_alloc: rank %d sent a record no "
                            "rank of this version sends (another version of hoop?)",
                            c->rank, k);
            goto out;
        }
        if (recs[k].status && !refused) {
            refused = 1;
            if (k != c->rank)
                snprintf(why, n, "rank %d could not take part (see its log)", k);
        }
    }
    if (refused)
        goto out;
    g->peer = calloc((size_t)c->size, sizeof(*g->peer));
    g->peer_bytes = calloc((size_t)c->size, sizeof(*g->peer_bytes));
    g->peer_map = calloc((size_t)c->size, sizeof(*g->peer_map));
    uint32_t failed = !g->peer || !g->peer_bytes || !g->peer_map;
    if (failed)
        snprintf(why, n, "rank %d: out of memory", c->rank);
    for (int k = 0; k < c->size && !failed; k++)
        if (k != c->rank && (rc = mem_give(c, &recs[k], fd, g->id, g, deadline))) {
            failed = 1;
            snprintf(why, n,
                     "rank %d cannot reach rank %d's listener: %s (is it in another "
                     "network namespace?)",
                     c->rank, k, hoop_errno_str(rc));
        }
    if ((st = agree_max(c, &failed)))
        goto out;
    if (failed) {
        if (!why[0])
            snprintf(why, n, "another rank could not send its memory (see its log)");
        goto out;
    }
    char w[240];
    if (mem_take_all(c, lfd, recs, nonce, g->id, g, deadline, w, sizeof(w))) {
        failed = 1;
        snprintf(why, n, "rank %d: %s", c->rank, w);
    }
    if ((st = agree_max(c, &failed)))
        goto out;
    if (failed) {
        if (!why[0])
            snprintf(why, n, "another rank could not map this rank's memory (see its log)");
        goto out;
    }
    g->peer[c->rank] = g->base;
    g->peer_bytes[c->rank] = g->bytes;
    g->peer_map[c->rank] = g->map_bytes;
    g->shared = 1;
out:
    if (lfd >= 0)
        close(lfd);
    if (!g->shared) {
        if (g->peer)
            g->peer[c->rank] = NULL;
        region_unmap_peers(c, g);
    }
    return st;
}

hoop_status_t hoop_mem_alloc(hoop_comm_t *c, size_t bytes, void **ptr)
{
    static const char name[] = "hoop_mem_alloc";
    if (!c || !ptr)
        return hoop_error(HOOP_ERR_INVALID, "%s: %s is NULL", name,
                          !c ? "the communicator" : "the output pointer");
    *ptr = NULL;
    hoop_status_t st;
    if ((st = hoop_coll_begin(c, name)))
        return st;
    if (!bytes || !map_len(bytes))
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: %s: %zu bytes: give 1 or more, and less "
                          "than the address space",
                          c->rank, name, bytes);
    struct hoop_mem_set *set = mem_set(c);
    struct hoop_mem_region *g = calloc(1, sizeof(*g));
    uint8_t *wire = malloc((size_t)(c->size + 1) * MEM_REC_BYTES);
    struct mem_rec *recs = calloc((size_t)c->size, sizeof(*recs));
    int fd = -1, rc = 0;
    const char *what = "malloc";
    char why[400] = "", nofd[200] = "";
    if (!set || !g || !wire || !recs)
        rc = -ENOMEM;
    if (!rc) {
        g->id = set->next_id;
        g->bytes = bytes;
        g->map_bytes = map_len(bytes);
        rc = region_make(g, &fd, &what, nofd, sizeof(nofd));
    }
    if (rc) {
        /* Every rank still takes part in the collectives below (the
         * others would wait for it): its record says it failed. */
        snprintf(why, sizeof(why), "rank %d: %s: %s for %zu bytes: %s", c->rank, name, what, bytes,
                 hoop_errno_str(rc));
    }
    uint32_t failed = rc != 0;
    if (c->size > 1 && (st = agree_max(c, &failed)))
        goto out;
    if (failed) {
        st = rc ? hoop_error(HOOP_ERR_SYSTEM, "%s", why)
                : hoop_error(HOOP_ERR_PEER,
                             "rank %d: %s: another rank could not allocate its "
                             "memory (see its log); no rank keeps any",
                             c->rank, name);
        goto out;
    }
    set->next_id++;
    /* Every ring link shared memory: every rank on this host, HOOP_SHM on. */
    if (c->size > 1 && c->local_size == c->size && c->ring.shm_ring) {
        if ((st = mem_share(c, g, fd, nofd, recs, wire, why, sizeof(why))))
            goto out;
        if (!g->shared)
            HOOP_INFO("rank %d: %s: the allocation is this rank's alone, and collectives on it "
                      "go through the transport: %s",
                      c->rank, name, why);
    } else if (c->size > 1) {
        HOOP_DEBUG("rank %d: %s: the allocation is this rank's alone: %s", c->rank, name,
                   c->local_size < c->size ? "the ranks are on several hosts"
                                           : "shared memory is off (HOOP_SHM)");
    }
    struct hoop_mem_region **pp = &set->regions;
    while (*pp)
        pp = &(*pp)->next;
    *pp = g;
    *ptr = g->base + HOOP_MEM_CTL_BYTES;
    g = NULL;
out:
    if (fd >= 0)
        close(fd);
    if (g)
        region_free(c, g);
    free(wire);
    free(recs);
    return st;
}

hoop_status_t hoop_mem_free(hoop_comm_t *c, void *ptr)
{
    static const char name[] = "hoop_mem_free";
    if (!c)
        return hoop_error(HOOP_ERR_INVALID, "%s: the communicator is NULL", name);
    hoop_status_t st;
    if ((st = hoop_coll_begin(c, name)))
        return st;
    struct hoop_mem_region **pp = c->mem ? &c->mem->regions : NULL;
    while (pp && *pp && (*pp)->base + HOOP_MEM_CTL_BYTES != (uint8_t *)ptr)
        pp = &(*pp)->next;
    /* Every rank frees the same allocation at once: the largest and the
     * smallest number given must be one (none found: no number). */
    uint64_t id = pp && *pp ? (*pp)->id : UINT64_MAX;
    uint64_t v[2] = {id, ~id};
    if (c->size > 1 && (st = hoop_allreduce(c, v, v, 2, HOOP_U64, HOOP_MAX)))
        return st;
    if (c->size > 1 && v[0] != ~v[1])
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: %s: the ranks free different allocations "
                          "(this rank %s); every rank frees the memory of one hoop_mem_alloc "
                          "call at once, nothing was freed",
                          c->rank, name,
                          id == UINT64_MAX ? "gave a pointer hoop_mem_alloc did not return"
                                           : "gave its own");
    if (id == UINT64_MAX)
        return hoop_error(HOOP_ERR_INVALID,
                          "rank %d: %s: %p is not a pointer hoop_mem_alloc "
                          "returned on this communicator",
                          c->rank, name, ptr);
    struct hoop_mem_region *g = *pp;
    *pp = g->next;
    region_free(c, g);
    return HOOP_OK;
}
