/* shm.c - the shared-memory transport's set-up: segments, the Unix socket
 * that hands them over, connections, and the end of them (shm.h). */
#include "transport/shm/conn.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/fdpass.h"
#include "common/log.h"
#include "common/param.h"
#include "common/sock.h"
#include "common/status.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

/* The geometry of every segment this rank makes: 16 slots of 64 KiB. */
#define SHM_NSLOTS 16
#define SHM_SLOT_BYTES (64u << 10)

/* The connecting rank's first message on the socket, with the segment and
 * the two eventfds beside it. */
#define SHM_HELLO_MAGIC 0x43485348u /* "HSHC" */
#define SHM_HELLO_BYTES 72
/* 2: a MAC where version 1 carried the job token itself; 3: slots published
 * by their ready word (slot.h), which a peer of version 2 would not write;
 * 4: compact slots and the base flag (slot.h) */
#define SHM_HELLO_VERSION 4
_Static_assert(SHM_HELLO_BYTES > HOOP_HELLO_BYTES, "the hello's tail is the MAC's body");
#define SHM_HELLO_FDS 3 /* memfd, the receiver's eventfd, the sender's */

/* How long an accepted socket may take to send its hello. */
#define SHM_HELLO_WAIT_NS 2000000000ull

static int shm_seal_wanted(void)
{
    return F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
}

int hoop_shm_usable(char *why, size_t n)
{
    int fd = memfd_create("hoop-shm-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        snprintf(why, n, "memfd_create: %s", hoop_errno_str(-errno));
        return 0;
    }
    int ok = ftruncate(fd, 4096) == 0 && fcntl(fd, F_ADD_SEALS, shm_seal_wanted()) == 0;
    void *p = ok ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (!ok || p == MAP_FAILED)
        snprintf(why, n, "a sealed memfd cannot be made and mapped: %s", hoop_errno_str(-errno));
    else
        munmap(p, 4096);
    close(fd);
    return ok && p != MAP_FAILED;
}

static hoop_status_t shm_create(const struct hoop_tp_params *p, void **out)
{
    struct shm_tp *tp = calloc(1, sizeof(*tp));
    if (tp)
        tp->pids = calloc((size_t)p->size, sizeof(*tp->pids));
    if (!tp || !tp->pids) {
        if (tp)
            free(tp);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: out of memory", p->rank);
    }
    tp->rank = p->rank;
    tp->size = p->size;
    memcpy(tp->token, p->token, HOOP_TOKEN_BYTES);
    tp->lfd = -1;
    tp->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (tp->epfd < 0) {
        int e = -errno;
        free(tp->pids);
        free(tp);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: epoll_create1: %s", p->rank,
                          hoop_errno_str(e));
    }
    tp->spin_ns = 20000;
    unsigned long long single;
    hoop_status_t st = hoop_param_u64("HOOP_SHM_SINGLE_COPY", 0, 1, &single);
    if (st) {
        close(tp->epfd);
        free(tp->pids);
        free(tp);
        return hoop_error(st, "rank %d: %s", p->rank, hoop_last_error());
    }
    tp->single_copy = (int)single;
    *out = tp;
    return HOOP_OK;
}

static hoop_status_t shm_listen(void *vtp, const struct sockaddr *local, socklen_t len,
                                uint8_t *handle, uint16_t *handle_len)
{
    struct shm_tp *tp = vtp;
    if (getrandom(&tp->nonce, sizeof(tp->nonce), GRND_NONBLOCK) != sizeof(tp->nonce))
        tp->nonce = hoop_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)tp;
    uint32_t pid = (uint32_t)getpid();
    struct sockaddr_un a;
    socklen_t al = hoop_fdpass_addr(&a, "hoop-shm", pid, tp->nonce);
    tp->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (tp->lfd < 0 || bind(tp->lfd, (struct sockaddr *)&a, al) || listen(tp->lfd, 256))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: cannot listen on an abstract "
                          "Unix socket: %s", tp->rank, hoop_errno_str(-errno));
    memcpy(handle, &pid, 4);
    memcpy(handle + 4, &tp->nonce, 8);
    *handle_len = HOOP_SHM_HANDLE_BYTES;
    return HOOP_OK;
}

static int shm_epoll_add(struct shm_tp *tp, int fd, uint64_t tag)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static void shm_conn_free(struct shm_conn *c)
{
    struct shm_tp *tp = c->tp;
    if (c->sock >= 0) {
        epoll_ctl(tp->epfd, EPOLL_CTL_DEL, c->sock, NULL);
        close(c->sock);
    }
    if (c->efd_self >= 0) {
        epoll_ctl(tp->epfd, EPOLL_CTL_DEL, c->efd_self, NULL);
        close(c->efd_self);
    }
    if (c->efd_peer >= 0)
        close(c->efd_peer);
    if (c->seg)
        munmap(c->seg, c->seg_bytes);
    free(c);
}

/* How a segment is mapped. A ring link carries the bulk of every
 * collective: its pages are made and mapped at once, so that no ring step
 * takes a page fault. The links to every other rank (alltoall, made on
 * first use) are mapped as they are touched: populating N x (N - 1)
 * segments up front made the first alltoall of 8 ranks take 30 ms instead
 * of 3, for slots a small exchange never reaches. */
static int shm_map_flags(int channel)
{
    return MAP_SHARED | (channel == HOOP_CHANNEL_RING ? MAP_POPULATE : 0);
}

static struct shm_conn *shm_conn_new(struct shm_tp *tp, int peer, int channel, int dir)
{
    struct shm_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->tp = tp;
    c->peer = peer;
    c->channel = channel;
    c->dir = dir;
    c->sock = c->efd_self = c->efd_peer = -1;
    return c;
}

/* Watch the connection's eventfd and socket, and list it. */
static int shm_conn_add(struct shm_tp *tp, struct shm_conn *c)
{
    int rc = shm_epoll_add(tp, c->efd_self, (uint64_t)(uintptr_t)c | SHM_TAG_EFD);
    if (!rc && (rc = shm_epoll_add(tp, c->sock, (uint64_t)(uintptr_t)c | SHM_TAG_SOCK)))
        epoll_ctl(tp->epfd, EPOLL_CTL_DEL, c->efd_self, NULL);
    if (rc)
        return rc;
    c->next_conn = tp->conns;
    tp->conns = c;
    return 0;
}

static void shm_conn_unlist(struct shm_tp *tp, struct shm_conn *c)
{
    for (struct shm_conn **pp = &tp->conns; *pp; pp = &(*pp)->next_conn)
        if (*pp == c) {
            *pp = c->next_conn;
            return;
        }
}

/* The MAC a hello carries at 32..63, keyed by the token: over the hello
 * (that field zeroed) and the address of the listener it goes to (the pid
 * and nonce of its handle), so that it proves nothing anywhere else. */
static void shm_hello_mac(const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t m[SHM_HELLO_BYTES],
                          uint32_t pid, uint64_t nonce, uint8_t mac[HOOP_MAC_BYTES])
{
    uint8_t h[HOOP_HELLO_BYTES], where[HOOP_AUTH_NONCE_BYTES] = {0};
    memcpy(h, m, sizeof(h));
    memset(h + 32, 0, HOOP_MAC_BYTES);
    hoop_put_le(where, pid, 4);
    hoop_put_le(where + 4, nonce, 8);
    hoop_auth_mac(token, 'M', h, m + HOOP_HELLO_BYTES, SHM_HELLO_BYTES - HOOP_HELLO_BYTES, where,
                  mac);
}

static int shm_send_hello(struct shm_tp *tp, struct shm_conn *c, int memfd, int efd_cons,
                          int efd_prod, uint64_t comm_id, uint32_t pid, uint64_t nonce)
{
    uint8_t m[SHM_HELLO_BYTES] = {0};
    hoop_put_le(m, SHM_HELLO_MAGIC, 4);
    hoop_put_le(m + 4, SHM_HELLO_VERSION, 2);
    hoop_put_le(m + 6, (uint64_t)c->channel, 2);
    hoop_put_le(m + 8, (uint64_t)tp->rank, 4);
    hoop_put_le(m + 12, (uint64_t)tp->size, 4);
    hoop_put_le(m + 16, comm_id, 8);
    hoop_put_le(m + 24, c->nslots, 4);
    hoop_put_le(m + 28, c->slot_bytes, 4);
    hoop_put_le(m + 64, (uint64_t)(uintptr_t)&c->ctl->probe, 8);
    shm_hello_mac(tp->token, m, pid, nonce, m + 32);
    int fds[SHM_HELLO_FDS] = {memfd, efd_cons, efd_prod};
    return hoop_fdpass_send(c->sock, m, sizeof(m), fds, SHM_HELLO_FDS);
}

static hoop_status_t shm_connect(void *vtp, int peer, int channel, const char *peer_host,
                                 const uint8_t *handle, uint16_t handle_len, uint64_t comm_id,
                                 uint64_t deadline_ns, void **out)
{
    struct shm_tp *tp = vtp;
    if (handle_len != HOOP_SHM_HANDLE_BYTES)
        return hoop_error(HOOP_ERR_PEER, "rank %d: shm transport: rank %d (%s) published a "
                          "handle this rank cannot read (%u bytes)", tp->rank, peer, peer_host,
                          handle_len);
    uint32_t pid;
    uint64_t nonce;
    memcpy(&pid, handle, 4);
    memcpy(&nonce, handle + 4, 8);
    struct shm_conn *c = shm_conn_new(tp, peer, channel, SHM_TX);
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: out of memory", tp->rank);
    c->nslots = SHM_NSLOTS;
    c->slot_bytes = SHM_SLOT_BYTES;
    c->seg_bytes = shm_seg_bytes(c->nslots, c->slot_bytes);
    const char *what = "memfd_create";
    int efd_cons = -1, rc = 0;
    int memfd = memfd_create("hoop-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0)
        goto sys_fail;
    what = "ftruncate";
    if (ftruncate(memfd, (off_t)c->seg_bytes))
        goto sys_fail;
    what = "F_ADD_SEALS";
    if (fcntl(memfd, F_ADD_SEALS, shm_seal_wanted()))
        goto sys_fail;
    what = "mmap";
    c->seg = mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE, shm_map_flags(channel), memfd, 0);
    if (c->seg == MAP_FAILED) {
        c->seg = NULL;
        goto sys_fail;
    }
    c->ctl = (struct shm_ctl *)c->seg;
    c->ctl->magic = SHM_SEG_MAGIC;
    c->ctl->version = SHM_VERSION;
    c->ctl->nslots = c->nslots;
    c->ctl->slot_bytes = c->slot_bytes;
    c->ctl->probe = hoop_now_ns() ^ ((uint64_t)(uintptr_t)c << 16) ^ SHM_SEG_MAGIC;
    what = "eventfd";
    if ((efd_cons = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
        (c->efd_self = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        goto sys_fail;
    what = "socket";
    /* Non-blocking: a full backlog is EAGAIN, waited out below within the
     * deadline, never a connect that blocks past it. */
    if ((c->sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
        goto sys_fail;
    struct sockaddr_un a;
    socklen_t al = hoop_fdpass_addr(&a, "hoop-shm", pid, nonce);
    /* The listener exists before the table is handed out; a full backlog
     * (EAGAIN) is waited out, within the deadline. */
    while (connect(c->sock, (struct sockaddr *)&a, al)) {
        rc = -errno;
        if (rc != -EAGAIN && rc != -EINTR)
            break;
        if (hoop_now_ns() >= deadline_ns)
            break;
        poll(NULL, 0, 1);
        rc = 0;
    }
    if (rc) {
        close(memfd);
        close(efd_cons);
        shm_conn_free(c);
        return hoop_error(HOOP_ERR_PEER, "rank %d: shm transport: cannot reach rank %d (%s) "
                          "through its Unix socket: %s (is it in another network namespace? "
                          "HOOP_SHM=0 turns shared memory off)", tp->rank, peer, peer_host,
                          hoop_errno_str(rc));
    }
    rc = shm_send_hello(tp, c, memfd, efd_cons, c->efd_self, comm_id, pid, nonce);
    close(memfd);
    memfd = -1;
    c->efd_peer = efd_cons;
    efd_cons = -1;
    if (!rc)
        rc = shm_conn_add(tp, c);
    if (rc) {
        shm_conn_free(c);
        return hoop_error(HOOP_ERR_PEER, "rank %d: shm transport: cannot hand rank %d (%s) its "
                          "segment: %s", tp->rank, peer, peer_host, hoop_errno_str(rc));
    }
    *out = c;
    return HOOP_OK;
sys_fail:
    rc = -errno;
    if (memfd >= 0)
        close(memfd);
    if (efd_cons >= 0)
        close(efd_cons);
    shm_conn_free(c);
    return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: %s for the segment to rank %d "
                      "(%s): %s (HOOP_SHM=0 turns shared memory off)", tp->rank, what, peer,
                      peer_host, hoop_errno_str(rc));
}

/* Read a hello and its descriptors from an accepted socket within its
 * grace; 0, or -errno with why said. The connection is filled and mapped. */
static int shm_take_hello(struct shm_tp *tp, int fd, uint64_t comm_id, uint64_t deadline_ns,
                          struct shm_conn **out, char *why, size_t n)
{
    uint8_t m[SHM_HELLO_BYTES];
    int fds[SHM_HELLO_FDS] = {-1, -1, -1}, nfds = 0, rc = 0;
    ssize_t got = hoop_fdpass_recv(fd, m, sizeof(m), fds, SHM_HELLO_FDS, &nfds, deadline_ns);
    if (got == -ETIMEDOUT) {
        snprintf(why, n, "said nothing in time");
        return -ETIMEDOUT;
    }
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    uint32_t rank = 0, channel = 0;
    uint8_t mac[HOOP_MAC_BYTES];
    if (got < 0) {
        snprintf(why, n, "could not be read: %s", hoop_errno_str((int)got));
        rc = (int)got;
    } else if (got != (ssize_t)sizeof(m)) {
        snprintf(why, n, "sent %zd bytes for its %d-byte hello", got, SHM_HELLO_BYTES);
        rc = -EPROTO;
    } else if (nfds != SHM_HELLO_FDS) {
        if (nfds < 0)
            snprintf(why, n, "sent more descriptors with its hello than %d", SHM_HELLO_FDS);
        else
            snprintf(why, n, "sent %d descriptors with its hello where %d belong", nfds,
                     SHM_HELLO_FDS);
        rc = -EPROTO;
    } else if (hoop_get_le(m, 4) != SHM_HELLO_MAGIC || hoop_get_le(m + 4, 2) != SHM_HELLO_VERSION) {
        snprintf(why, n, "is not a hoop shared-memory connection of this version");
        rc = -EPROTO;
    } else if (shm_hello_mac(tp->token, m, (uint32_t)getpid(), tp->nonce, mac),
               !hoop_mac_equal(mac, m + 32)) {
        snprintf(why, n, "did not prove this job's token (its HOOP_TOKEN differs: another job?)");
        rc = -EACCES;
    } else if (hoop_get_le(m + 16, 8) != comm_id || hoop_get_le(m + 12, 4) != (uint64_t)tp->size) {
        snprintf(why, n, "belongs to another communicator");
        rc = -EPROTO;
    } else if ((rank = (uint32_t)hoop_get_le(m + 8, 4)) >= (uint32_t)tp->size ||
               (channel = (uint32_t)hoop_get_le(m + 6, 2)) > HOOP_CHANNEL_P2P) {
        snprintf(why, n, "claims a rank or channel that does not exist");
        rc = -EPROTO;
    } else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cred.uid != geteuid() ||
               (tp->pids[rank] && (uint32_t)cred.pid != tp->pids[rank])) {
        snprintf(why, n, "claims rank %u but its process is not that rank's of this user", rank);
        rc = -EACCES;
    }
    struct shm_conn *c = NULL;
    if (!rc && !(c = shm_conn_new(tp, (int)rank, (int)channel, SHM_RX)))
        rc = -ENOMEM;
    if (!rc) {
        c->nslots = (uint32_t)hoop_get_le(m + 24, 4);
        c->slot_bytes = (uint32_t)hoop_get_le(m + 28, 4);
        c->seg_bytes = shm_seg_bytes(c->nslots, c->slot_bytes);
        struct stat st;
        int seals = fcntl(fds[0], F_GET_SEALS);
        if (!c->seg_bytes) {
            snprintf(why, n, "offers %u slots of %u bytes, out of bounds", c->nslots,
                     c->slot_bytes);
            rc = -EPROTO;
        } else if (fstat(fds[0], &st) || !S_ISREG(st.st_mode) ||
                   (uint64_t)st.st_size != c->seg_bytes || seals < 0 ||
                   !(seals & F_SEAL_SHRINK)) {
            snprintf(why, n, "sent a segment that is not a sealed memfd of %zu bytes",
                     c->seg_bytes);
            rc = -EPROTO;
        } else if ((c->seg = mmap(NULL, c->seg_bytes, PROT_READ | PROT_WRITE,
                                  shm_map_flags((int)channel), fds[0], 0)) == MAP_FAILED) {
            c->seg = NULL;
            rc = -errno;
            snprintf(why, n, "sent a segment this rank cannot map: %s", hoop_errno_str(rc));
        } else {
            c->ctl = (struct shm_ctl *)c->seg;
            c->sock = fd;
            c->efd_self = fds[1];
            c->efd_peer = fds[2];
            fds[1] = fds[2] = -1;
            c->pos = 0;
            /* Single copy, where asked for, works where this rank may
             * read the peer's memory (ptrace rules, a seccomp profile):
             * try it once. Else the slots carry everything. */
            if (tp->single_copy) {
                uint64_t v = 0, want = c->ctl->probe;
                struct iovec lo = {.iov_base = &v, .iov_len = 8};
                struct iovec re = {.iov_base = (void *)(uintptr_t)hoop_get_le(m + 64, 8),
                                   .iov_len = 8};
                if (process_vm_readv(cred.pid, &lo, 1, &re, 1, 0) == 8 && v == want) {
                    c->cma_pid = cred.pid;
                    atomic_store(&c->ctl->cma_ok, 1);
                } else {
                    HOOP_DEBUG("rank %d: shm transport: no single copy from rank %u: %s", tp->rank,
                               rank, hoop_errno_str(-errno));
                }
            }
        }
    }
    for (int i = 0; i < SHM_HELLO_FDS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (rc) {
        if (c) {
            c->sock = -1;
            shm_conn_free(c);
        }
        return rc;
    }
    *out = c;
    return 0;
}

static struct shm_conn *shm_unstash(struct shm_tp *tp, int peer, int channel)
{
    for (struct shm_stashed **pp = &tp->stash; *pp; pp = &(*pp)->next) {
        struct shm_stashed *k = *pp;
        if (k->c->peer == peer && k->c->channel == channel) {
            struct shm_conn *c = k->c;
            *pp = k->next;
            free(k);
            tp->nstash--;
            return c;
        }
    }
    return NULL;
}

static hoop_status_t shm_accept(void *vtp, int peer, int channel, const char *peer_host,
                                uint64_t comm_id, uint64_t deadline_ns, void **out)
{
    struct shm_tp *tp = vtp;
    struct shm_conn *c = shm_unstash(tp, peer, channel);
    while (!c) {
        int fd = accept4(tp->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: accept: %s",
                                  tp->rank, hoop_errno_str(-errno));
            if (hoop_watch_readable(&tp->watch))
                return hoop_error(HOOP_ERR_ABORTED, "rank %d: shm transport: woken while "
                                  "waiting for rank %d (%s) to connect", tp->rank, peer,
                                  peer_host);
            int ms = hoop_ms_left(deadline_ns);
            if (ms == 0)
                return hoop_error(HOOP_ERR_TIMEOUT, "rank %d: shm transport: rank %d (%s) did "
                                  "not connect in time", tp->rank, peer, peer_host);
            struct pollfd p[17];
            int np = 0;
            p[np++] = (struct pollfd){.fd = tp->lfd, .events = POLLIN};
            for (int i = 0; i < tp->watch.n && np < 17; i++)
                p[np++] = (struct pollfd){.fd = tp->watch.fd[i], .events = POLLIN};
            poll(p, (nfds_t)np, ms);
            continue;
        }
        char why[160];
        struct shm_conn *k = NULL;
        uint64_t grace = hoop_now_ns() + SHM_HELLO_WAIT_NS;
        int rc = shm_take_hello(tp, fd, comm_id, grace < deadline_ns ? grace : deadline_ns, &k,
                                why, sizeof(why));
        if (rc) {
            close(fd);
            HOOP_WARN("rank %d: shm transport: refused a connection: it %s", tp->rank, why);
            continue;
        }
        if (k->peer == peer && k->channel == channel) {
            c = k;
            break;
        }
        struct shm_stashed *s = tp->nstash < 4 * tp->size ? malloc(sizeof(*s)) : NULL;
        if (!s) {
            HOOP_WARN("rank %d: shm transport: refused a connection from rank %d: too many "
                      "early connections", tp->rank, k->peer);
            shm_conn_free(k);
            continue;
        }
        *s = (struct shm_stashed){.next = tp->stash, .c = k};
        tp->stash = s;
        tp->nstash++;
    }
    int rc = shm_conn_add(tp, c);
    if (rc) {
        shm_conn_free(c);
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: shm transport: epoll_ctl: %s", tp->rank,
                          hoop_errno_str(rc));
    }
    *out = c;
    return HOOP_OK;
}

static int shm_watch(void *vtp, int fd)
{
    struct shm_tp *tp = vtp;
    int rc = hoop_watch_add(&tp->watch, fd);
    if (!rc && (rc = shm_epoll_add(tp, fd, 0)))
        tp->watch.n--;
    return rc;
}

static void shm_cancel(void *vtp)
{
    struct shm_tp *tp = vtp;
    for (struct shm_conn *c = tp->conns; c; c = c->next_conn) {
        shm_conn_shut(c);
        tp->unreported += shm_conn_fail_all(c, -ECANCELED);
        if (!c->err)
            c->err = -ECANCELED;
    }
}

static void shm_close(void *vc)
{
    struct shm_conn *c = vc;
    if (!c)
        return;
    shm_conn_shut(c);
    shm_conn_fail_all(c, -ECANCELED);
    shm_conn_unlist(c->tp, c);
    shm_conn_free(c);
}

static void shm_destroy(void *vtp)
{
    struct shm_tp *tp = vtp;
    while (tp->conns)
        shm_close(tp->conns);
    while (tp->stash) {
        struct shm_stashed *k = tp->stash;
        tp->stash = k->next;
        shm_conn_free(k->c);
        free(k);
    }
    if (tp->lfd >= 0)
        close(tp->lfd);
    close(tp->epfd);
    hoop_watch_fini(&tp->watch);
    free(tp->pids);
    free(tp);
}

static const char *shm_describe(void *tp)
{
    return "shm";
}

static void shm_set_busy_poll(void *vtp, uint64_t ns, int yield)
{
    struct shm_tp *tp = vtp;
    tp->spin_ns = ns;
    tp->spin_yield = yield;
}

static const char *shm_last_error(void *vtp)
{
    struct shm_tp *tp = vtp;
    return tp->why[0] ? tp->why : NULL;
}

int hoop_shm_wait_fd(void *vtp)
{
    return ((struct shm_tp *)vtp)->epfd;
}

void hoop_shm_expect_pid(void *vtp, int peer, uint32_t pid)
{
    struct shm_tp *tp = vtp;
    if (peer >= 0 && peer < tp->size)
        tp->pids[peer] = pid;
}

const struct hoop_transport_ops hoop_transport_shm = {
    .size = sizeof(struct hoop_transport_ops),
    .name = "shm",
    .create = shm_create,
    .listen = shm_listen,
    .connect = shm_connect,
    .accept = shm_accept,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .progress = shm_progress,
    .watch = shm_watch,
    .cancel = shm_cancel,
    .close = shm_close,
    .destroy = shm_destroy,
    .describe = shm_describe,
    .peer_ended = shm_peer_ended,
    .set_busy_poll = shm_set_busy_poll,
    .last_error = shm_last_error,
};
