/* fail.c - a failed collective, seen from the whole job; hoop_comm_abort;
 * the connections to the root, watched during collectives.
 *
 * When a rank's collective fails it sends the root a notice (what it saw,
 * whom it blames, and whether it saw the cause itself or only a neighbour
 * leaving) over the connection kept from the rendezvous, and waits for the
 * root's verdict. The root gathers notices until it knows the cause: a rank
 * whose connection closed without a notice died; a rank that saw a
 * mismatch, garbage or an abort saw the cause; when ranks only timed out,
 * the ranks that stay silent for HOOP_FAIL_GRACE are the stopped ones. It
 * then tells every rank, so that every survivor names the same culprit, not
 * the neighbour that happened to close on it first.
 *
 * Every wait of a collective also watches the abort eventfd, the
 * connections to the root (all of them, on the root) and the processes of
 * the other ranks on this host (pidfds), through one epoll descriptor. So
 * an abort ends any wait at once; a rank that dies is seen by the root at
 * once, and the root's verdict ends every other rank's wait; a root that
 * dies is seen by everyone; and the end of a process on this host is passed
 * to the transport, which then fails what can no longer come from it, as a
 * closed socket does over TCP (a shared-memory provider never tells a
 * neighbour that its peer is gone). A rank that leaves in order says
 * goodbye on its connection first (hoop_comm_destroy, and at exit for a
 * communicator left open), so that the others' last collective, which it
 * has done its part of, goes on. */
#include "collectives/comm.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

/* In a notice's status: the sender saw the cause itself; the sender is
 * the cause, leaving (exit) in the middle of the collective; and of a
 * mismatch, only that a message was longer than its receive (a transport
 * of whole messages may lose its header), so that another rank's account
 * with both sides' values is worth a moment's wait. */
#define FAIL_PRIMARY 0x100
#define FAIL_EXITED 0x200
#define FAIL_VAGUE 0x400
/* How long the root waits for a better account than a vague one. */
#define FAIL_VAGUE_WAIT_S 0.25
#define FAIL_WRITE_S 1.0

hoop_status_t hoop_comm_abort(hoop_comm_t *c, const char *reason)
{
    if (!c)
        return hoop_error(HOOP_ERR_INVALID, "hoop_comm_abort: the communicator is NULL");
    int expect = 0;
    if (atomic_compare_exchange_strong(&c->aborted, &expect, 1)) {
        snprintf(c->abort_why, sizeof(c->abort_why), "%s", reason ? reason : "no reason given");
        atomic_store_explicit(&c->aborted, 2, memory_order_release);
        if (c->abort_fd >= 0) {
            uint64_t one = 1;
            if (write(c->abort_fd, &one, sizeof(one)) < 0)
                HOOP_WARN("rank %d: hoop_comm_abort: cannot wake the communicator: %s", c->rank,
                          hoop_errno_str(-errno));
        }
    }
    return HOOP_OK;
}

/* What a connection to the root has said. */
enum { HEARD_NOTHING = 0, HEARD_NOTICE, HEARD_GONE, HEARD_LEFT };

/* In an epoll event: rank k's pidfd rather than its connection. */
#define CTL_PID 0x80000000u

/* The descriptor of rank k's connection to the root (on the root), or of
 * this rank's (elsewhere). */
static int ctl_fd(const hoop_comm_t *c, int k)
{
    return c->rank == 0 ? c->bs.fds[k] : c->bs.root_fd;
}

/* One message from rank k's control connection: a notice (or a verdict),
 * a goodbye, or nothing more (closed, or garbage). */
static int ctl_read(hoop_comm_t *c, int k, struct hoop_notice *m)
{
    int kind = 0;
    int e = hoop_notice_read(&c->bs, ctl_fd(c, k), &kind, m, hoop_deadline_after(FAIL_WRITE_S));
    return e ? HEARD_GONE : kind == HOOP_HELLO_GOODBYE ? HEARD_LEFT : HEARD_NOTICE;
}

/* A wait of a collective was woken: by an abort, or by a control
 * connection, whose message is kept for hoop_comm_fail. Only goodbyes, and
 * notices about a later collective, let the wait go on: a rank that is
 * already in the next call (this one done on its side) and fails it must
 * not fail this one here, which can still end well; the notice fails the
 * call it is about when this rank begins it (hoop_coll_begin). */
static int comm_on_wake(void *ctx)
{
    hoop_comm_t *c = ctx;
    if (atomic_load_explicit(&c->aborted, memory_order_acquire))
        return -EINTR;
    struct epoll_event ev[16];
    int n = epoll_wait(c->ctl_epfd, ev, 16, 0);
    int stop = 0, ended = 0;
    for (int i = 0; i < n; i++) {
        int k = (int)(ev[i].data.u32 & ~CTL_PID);
        if (ev[i].data.u32 & CTL_PID) {
            /* Whether it left in order or died, nothing more comes from it:
             * the transport fails what waits for it, after what it sent. */
            epoll_ctl(c->ctl_epfd, EPOLL_CTL_DEL, c->ctl_pidfd[k], NULL);
            hoop_ring_peer_ended(&c->ring, k);
            ended = 1;
            continue;
        }
        struct hoop_notice m;
        int heard = ctl_read(c, k, &m);
        int later = heard == HEARD_NOTICE && m.seq > c->ring.cur.seq;
        if (later && (!c->ctl_later || m.seq < c->ctl_later))
            c->ctl_later = m.seq;
        /* Whatever it said, the connection is read from now on only by
         * hoop_comm_fail. */
        epoll_ctl(c->ctl_epfd, EPOLL_CTL_DEL, ctl_fd(c, k), NULL);
        if (c->rank == 0) {
            if (c->ctl_heard[k] == HEARD_NOTHING) {
                c->ctl_heard[k] = heard;
                c->ctl_got[k] = m;
            }
        } else {
            c->ctl_root = heard;
            c->ctl_verdict = m;
        }
        HOOP_DEBUG("rank %d: the control connection of rank %d: %s%s", c->rank, k,
                   heard == HEARD_LEFT ? "goodbye" : heard == HEARD_GONE ? "closed" : "a notice",
                   later ? ", about a later collective" : "");
        stop |= heard != HEARD_LEFT && !later;
    }
    return stop ? -EINTR : ended;
}

/* Communicators still open, told goodbye at exit. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static hoop_comm_t **live;
static int nlive, live_cap;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void comm_goodbye(hoop_comm_t *c)
{
    struct hoop_notice bye = {.status = HOOP_OK, .culprit = HOOP_NOTICE_NOBODY};
    for (int k = c->rank == 0 ? 1 : 0; k < (c->rank == 0 ? c->size : 1); k++)
        if (ctl_fd(c, k) >= 0)
            hoop_notice_write(&c->bs, ctl_fd(c, k), HOOP_HELLO_GOODBYE, &bye,
                              hoop_deadline_after(FAIL_WRITE_S));
}

/* This process is ending (exit() on another thread, or main returned)
 * while c's collective runs: that is no leaving in order, and the others,
 * who cannot finish it, must name this rank. The root hears a notice that
 * is the cause (the root itself tells every rank its verdict). */
static void comm_exit_notice(hoop_comm_t *c, uint64_t seq)
{
    const struct hoop_peer *p = &c->bs.peers[c->rank];
    struct hoop_notice m = {.status = HOOP_ERR_PEER, .culprit = c->rank, .seq = seq};
    snprintf(m.why, sizeof(m.why),
             "rank %d (%s, pid %u) exited during %s #%llu: the process called exit() (or main "
             "returned) while the collective was running, so the others cannot finish it",
             c->rank, p->host, p->pid,
             hoop_coll_str(atomic_load_explicit(&c->ring.running_coll, memory_order_relaxed)),
             (unsigned long long)seq);
    if (c->rank != 0) {
        m.status |= FAIL_PRIMARY | FAIL_EXITED;
        hoop_notice_write(&c->bs, c->bs.root_fd, HOOP_HELLO_NOTICE, &m,
                          hoop_deadline_after(FAIL_WRITE_S));
        return;
    }
    for (int k = 1; k < c->size; k++)
        if (c->bs.fds[k] >= 0)
            hoop_notice_write(&c->bs, c->bs.fds[k], HOOP_HELLO_VERDICT, &m,
                              hoop_deadline_after(FAIL_WRITE_S));
}

/* A process that ends without hoop_comm_destroy (returning from main,
 * exit()) between collectives still leaves in order; one that ends in the
 * middle of a collective (another thread called exit()) does not, nor one
 * that is killed or crashes, and the others hear of it. */
static void comm_goodbye_all(void)
{
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < nlive; i++) {
        uint64_t seq = atomic_load_explicit(&live[i]->ring.running_seq, memory_order_acquire);
        if (seq)
            comm_exit_notice(live[i], seq);
        else
            comm_goodbye(live[i]);
    }
    nlive = 0;
    pthread_mutex_unlock(&live_lock);
}

static void live_at_exit(void)
{
    atexit(comm_goodbye_all);
}

static void live_add(hoop_comm_t *c)
{
    pthread_once(&live_once, live_at_exit);
    pthread_mutex_lock(&live_lock);
    if (nlive == live_cap) {
        int cap = live_cap ? 2 * live_cap : 8;
        hoop_comm_t **l = realloc(live, (size_t)cap * sizeof(*l));
        if (l) {
            live = l;
            live_cap = cap;
        }
    }
    if (nlive < live_cap)
        live[nlive++] = c;
    pthread_mutex_unlock(&live_lock);
}

void hoop_comm_leave(hoop_comm_t *c)
{
    if (c->size == 1)
        return;
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < nlive; i++)
        if (live[i] == c)
            live[i] = live[--nlive];
    pthread_mutex_unlock(&live_lock);
    comm_goodbye(c);
}

hoop_status_t hoop_comm_control_init(hoop_comm_t *c)
{
    c->abort_fd = -1;
    c->ctl_epfd = -1;
    if (c->size == 1)
        return HOOP_OK;
    c->abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->abort_fd < 0)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: eventfd: %s", c->rank, hoop_errno_str(-errno));
    c->ctl_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->ctl_epfd < 0)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: epoll_create1: %s", c->rank,
                          hoop_errno_str(-errno));
    if (c->rank == 0) {
        c->ctl_heard = calloc((size_t)c->size, sizeof(*c->ctl_heard));
        c->ctl_got = calloc((size_t)c->size, sizeof(*c->ctl_got));
        if (!c->ctl_heard || !c->ctl_got)
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory", c->rank);
    }
    for (int k = c->rank == 0 ? 1 : 0; k < (c->rank == 0 ? c->size : 1); k++) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)k};
        if (epoll_ctl(c->ctl_epfd, EPOLL_CTL_ADD, ctl_fd(c, k), &ev))
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: epoll_ctl: %s", c->rank,
                              hoop_errno_str(-errno));
    }
    /* The other ranks of this host (the host id covers the PID namespace,
     * so their pids are theirs here); a pidfd is readable once its process
     * has ended. Where pidfds are refused, deaths are still seen through
     * the transport and the root. */
    if (!(c->ctl_pidfd = malloc((size_t)c->size * sizeof(*c->ctl_pidfd))))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory", c->rank);
    for (int k = 0; k < c->size; k++) {
        c->ctl_pidfd[k] = -1;
        const struct hoop_peer *p = &c->bs.peers[k];
        if (k == c->rank || p->host_id != c->bs.peers[c->rank].host_id)
            continue;
        int fd = (int)syscall(SYS_pidfd_open, (pid_t)p->pid, 0);
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = CTL_PID | (uint32_t)k};
        if (fd >= 0 && epoll_ctl(c->ctl_epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
            c->ctl_pidfd[k] = fd;
        } else {
            HOOP_DEBUG("rank %d: cannot watch rank %d's process %u: %s", c->rank, k, p->pid,
                       hoop_errno_str(-errno));
            if (fd >= 0)
                close(fd);
        }
    }
    hoop_status_t st;
    if ((st = hoop_ring_watch(&c->ring, c->abort_fd)) ||
        (st = hoop_ring_watch(&c->ring, c->ctl_epfd)))
        return st;
    c->ring.on_wake = comm_on_wake;
    c->ring.wake_ctx = c;
    live_add(c);
    return HOOP_OK;
}

void hoop_comm_control_fini(hoop_comm_t *c)
{
    if (c->abort_fd >= 0)
        close(c->abort_fd);
    if (c->ctl_epfd >= 0)
        close(c->ctl_epfd);
    c->abort_fd = c->ctl_epfd = -1;
    for (int k = 0; c->ctl_pidfd && k < c->size; k++)
        if (c->ctl_pidfd[k] >= 0)
            close(c->ctl_pidfd[k]);
    free(c->ctl_pidfd);
    free(c->ctl_heard);
    free(c->ctl_got);
    c->ctl_pidfd = NULL;
    c->ctl_heard = NULL;
    c->ctl_got = NULL;
}

static void fail_gather(hoop_comm_t *c, const struct hoop_notice *mine, struct hoop_notice *v);

hoop_status_t hoop_comm_fail_init(hoop_comm_t *c, hoop_status_t st)
{
    if (c->size == 1)
        return st;
    /* Only what this rank saw of its own (not a peer that went away or
     * never answered) is a cause. */
    int primary = st != HOOP_ERR_TIMEOUT && st != HOOP_ERR_PEER;
    struct hoop_notice n = {.status = (int)st | (primary ? FAIL_PRIMARY : 0), .culprit = c->rank};
    snprintf(n.why, sizeof(n.why), "%s", hoop_last_error());
    if (c->rank != 0) {
        /* What the root's first collective reads from this connection. */
        hoop_notice_write(&c->bs, c->bs.root_fd, HOOP_HELLO_NOTICE, &n,
                          hoop_deadline_after(FAIL_WRITE_S));
        if (primary)
            return st;
        /* A peer that went away or never answered: one rank's failure
         * takes the others' sockets down in a cascade (a rank refused by
         * one that left, refused in turn), and what this rank saw may name
         * only the last of them. The root's verdict names the cause, as
         * after a collective; without it, what this rank saw stands. */
        struct hoop_notice v;
        int kind = HOOP_HELLO_VERDICT;
        double waited = 2 * c->fail_grace_s + FAIL_WRITE_S;
        if (hoop_notice_read(&c->bs, c->bs.root_fd, &kind, &v, hoop_deadline_after(waited)) ||
            !(v.status & 0xff) || strcmp(v.why, n.why) == 0)
            return hoop_error(st, "%s", n.why);
        return hoop_error((hoop_status_t)(v.status & 0xff),
                          "rank %d: forming the communicator failed: %s (this rank saw: %s)",
                          c->rank, v.why, n.why);
    }
    /* The root whose set-up failed because a peer went (a rank that failed
     * its own set-up left, and its sockets with it): the others' reports
     * name the cause, as after a collective (fail_gather). */
    struct hoop_notice v;
    fail_gather(c, &n, &v);
    if (primary || strcmp(v.why, n.why) == 0)
        return hoop_error(st, "%s", n.why);
    return hoop_error((hoop_status_t)v.status,
                      "rank 0: forming the communicator failed: %s (this rank saw: %s)", v.why,
                      n.why);
}

/* Whether a notice (or a closed connection) settles the cause: 1, or 2
 * when it does only vaguely (FAIL_VAGUE), or 0. */
static int fail_decides(const struct hoop_notice *m, int heard)
{
    if (heard == HEARD_GONE)
        return 1;
    if (heard != HEARD_NOTICE || !(m->status & FAIL_PRIMARY))
        return 0;
    return m->status & FAIL_VAGUE ? 2 : 1;
}

/* Of two causes seen, the better account: a mismatch with both sides'
 * values, then a mismatch known only by a length, then anything else. */
static int fail_rank_of(const struct hoop_notice *m)
{
    if ((m->status & 0xff) != HOOP_ERR_MISMATCH)
        return 0;
    return m->status & FAIL_VAGUE ? 1 : 2;
}

/* The root: gather notices until the cause is known, name it. */
static void fail_gather(hoop_comm_t *c, const struct hoop_notice *mine, struct hoop_notice *v)
{
    const int n = c->size;
    int *heard = calloc((size_t)n, sizeof(*heard));
    struct hoop_notice *got = calloc((size_t)n, sizeof(*got));
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    int *who = calloc((size_t)n, sizeof(*who));
    *v = *mine;
    v->status &= 0xff;
    if (!heard || !got || !pfd || !who)
        goto out;
    got[0] = *mine;
    heard[0] = HEARD_NOTICE;
    uint64_t deadline = hoop_deadline_after(c->fail_grace_s);
    /* 1: the cause is known; 2: only vaguely, and a better account may
     * come within FAIL_VAGUE_WAIT_S. */
    int decided = fail_decides(mine, HEARD_NOTICE);
    for (int k = 1; k < n && c->ctl_heard; k++) {
        /* What the collective's waits read already. */
        heard[k] = c->ctl_heard[k];
        got[k] = c->ctl_got[k];
        int d = fail_decides(&got[k], heard[k]);
        decided = d == 1 || decided == 1 ? 1 : d ? d : decided;
    }
    if (decided == 2 && hoop_deadline_after(FAIL_VAGUE_WAIT_S) < deadline)
        deadline = hoop_deadline_after(FAIL_VAGUE_WAIT_S);
    while (decided != 1) {
        int np = 0;
        for (int k = 1; k < n; k++)
            if (heard[k] == HEARD_NOTHING) {
                pfd[np] = (struct pollfd){.fd = c->bs.fds[k], .events = POLLIN};
                who[np++] = k;
            }
        uint64_t now = hoop_now_ns();
        if (!np || now >= deadline)
            break;
        int rc = poll(pfd, (nfds_t)np, (int)((deadline - now) / 1000000 + 1));
        if (rc < 0 && errno != EINTR)
            break;
        for (int i = 0; i < np && rc > 0; i++) {
            if (!pfd[i].revents)
                continue;
            int k = who[i];
            heard[k] = ctl_read(c, k, &got[k]);
            int d = fail_decides(&got[k], heard[k]);
            if (d == 2 && decided == 0 && hoop_deadline_after(FAIL_VAGUE_WAIT_S) < deadline)
                deadline = hoop_deadline_after(FAIL_VAGUE_WAIT_S);
            if (d == 1 || (d == 2 && decided == 0))
                decided = d;
        }
    }
    for (int k = 0; k < n; k++)
        HOOP_DEBUG("rank 0: the failure as rank %d saw it: %s", k,
                   heard[k] == HEARD_NOTHING ? "nothing heard"
                   : heard[k] == HEARD_GONE  ? "its connection closed"
                   : heard[k] == HEARD_LEFT  ? "it left in order"
                                             : got[k].why);
    /* A rank gone without a word died; one that saw the cause names it;
     * when all that is known is timeouts, the silent ranks are stuck. */
    int dead = -1, exited = -1, cause = -1, silent = -1, nsilent = 0, timeouts = 0, left = -1;
    for (int k = 0; k < n; k++) {
        if (heard[k] == HEARD_NOTICE && (got[k].status & FAIL_EXITED) && exited < 0)
            exited = k;
        else if (heard[k] == HEARD_LEFT && left < 0)
            left = k;
        else if (heard[k] == HEARD_GONE && dead < 0)
            dead = k;
        else if (heard[k] == HEARD_NOTICE && (got[k].status & FAIL_PRIMARY) &&
                 (cause < 0 || fail_rank_of(&got[k]) > fail_rank_of(&got[cause]) ||
                  (fail_rank_of(&got[k]) && fail_rank_of(&got[k]) == fail_rank_of(&got[cause]))))
            cause = k;
        else if (heard[k] == HEARD_NOTHING && k > 0) {
            if (silent < 0)
                silent = k;
            nsilent++;
        }
        if (heard[k] == HEARD_NOTICE && (got[k].status & 0xff) == HOOP_ERR_TIMEOUT)
            timeouts++;
    }
    /* Of the silent ranks, the one a report blames (the peer whose
     * connection it lost or waited on) is the one stopped or cut off; the
     * others are only waiting on it. */
    int blamed = -1, blamer = -1;
    for (int k = 0; k < n && blamed < 0; k++) {
        int q = got[k].culprit;
        if (heard[k] == HEARD_NOTICE && q > 0 && q < n && heard[q] == HEARD_NOTHING) {
            blamed = q;
            blamer = k;
        }
    }
    if (blamed >= 0)
        silent = blamed;
    if (exited >= 0) {
        *v = got[exited];
        v->status &= 0xff;
    } else if (dead >= 0) {
        const struct hoop_peer *p = &c->bs.peers[dead];
        *v = (struct hoop_notice){.status = HOOP_ERR_PEER, .culprit = dead};
        snprintf(v->why, sizeof(v->why),
                 "rank %d (%s, pid %u) died or left: its connection to the root closed without "
                 "a word", dead, p->host, p->pid);
    } else if (cause >= 0) {
        *v = got[cause];
        v->status &= 0xff;
    } else if (silent >= 0 && timeouts) {
        const struct hoop_peer *p = &c->bs.peers[silent];
        *v = (struct hoop_notice){.status = HOOP_ERR_TIMEOUT, .culprit = silent};
        snprintf(v->why, sizeof(v->why),
                 "rank %d (%s, pid %u)%s did not answer within HOOP_FAIL_GRACE (%.1f s) after the "
                 "others timed out: it is stopped, stuck, or not calling this collective",
                 silent, p->host, p->pid, nsilent > 1 ? " and others" : "", c->fail_grace_s);
    } else if (blamed >= 0) {
        /* Its neighbour lost its connection with it, and it told the root
         * nothing: its host or link died (TCP_USER_TIMEOUT, keepalive), or
         * it is stopped. */
        const struct hoop_peer *p = &c->bs.peers[blamed];
        *v = (struct hoop_notice){.status = HOOP_ERR_PEER, .culprit = blamed};
        snprintf(v->why, sizeof(v->why),
                 "rank %d (%s, pid %u) did not answer within HOOP_FAIL_GRACE (%.1f s) after rank "
                 "%d lost its connection with it: its host or its network link is down, or it is "
                 "stopped", blamed, p->host, p->pid, c->fail_grace_s, blamer);
    } else if (left >= 0) {
        /* It said goodbye (hoop_comm_destroy, or exit between two calls)
         * and then the others' collective failed: it left before them. */
        const struct hoop_peer *p = &c->bs.peers[left];
        *v = (struct hoop_notice){.status = HOOP_ERR_PEER, .culprit = left};
        snprintf(v->why, sizeof(v->why),
                 "rank %d (%s, pid %u) left the communicator (hoop_comm_destroy, or the process "
                 "ended) while the others were still calling collectives on it: every rank must "
                 "make the same calls before it leaves", left, p->host, p->pid);
    }
out:
    v->seq = mine->seq;
    for (int k = 1; k < n; k++)
        if (!heard || heard[k] == HEARD_NOTHING || heard[k] == HEARD_NOTICE)
            hoop_notice_write(&c->bs, c->bs.fds[k], HOOP_HELLO_VERDICT, v,
                              hoop_deadline_after(FAIL_WRITE_S));
    free(heard);
    free(got);
    free(pfd);
    free(who);
}

/* An error that only says a connection ended or cannot reach its peer:
 * the cause is at the peer's end (or between), not what this rank saw. */
static int fail_symptom(int err)
{
    switch (-err) {
    case EPIPE:
    case ECONNRESET:
    case ECANCELED:
    case ENOTCONN:
    case ECONNABORTED:
    case ENOLINK: /* TCP's user timeout or keepalive (transport/tcp_queue.c) */
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
        return 1;
    default:
        return 0;
    }
}

hoop_status_t hoop_comm_fail(hoop_comm_t *c, hoop_status_t st)
{
    if (c->size == 1)
        return st;
    struct hoop_ring *r = &c->ring;
    int err = r->fail_err;
    char what[128];
    if (c->abort_before)
        snprintf(what, sizeof(what), "%s (before it began)", c->abort_before);
    else
        hoop_frame_what(&r->cur, what, sizeof(what));
    /* The call that failed; one stopped before it began had no frame yet. */
    uint64_t seq = c->abort_before ? r->seq + 1 : r->cur.seq;
    struct hoop_notice mine = {.status = (int)st, .culprit = r->fail_peer, .seq = seq};
    int aborted = atomic_load_explicit(&c->aborted, memory_order_acquire) == 2;
    int primary;
    if (aborted) {
        st = HOOP_ERR_ABORTED;
        hoop_error(st, "rank %d: %s: aborted by hoop_comm_abort on this rank: %s", c->rank, what,
                   c->abort_why);
        mine = (struct hoop_notice){.status = (int)st, .culprit = c->rank, .seq = seq};
        primary = 1;
    } else if (err == -EINTR) {
        primary = 0; /* woken by the root's word, seen below */
        mine.culprit = HOOP_NOTICE_NOBODY;
    } else if (st == HOOP_ERR_SYSTEM) {
        /* This rank's own resources (descriptors, memory) failed it. */
        primary = 1;
        mine.culprit = c->rank;
    } else {
        primary = st != HOOP_ERR_TIMEOUT && !fail_symptom(err);
    }
    snprintf(mine.why, sizeof(mine.why), "%s", hoop_last_error());
    mine.status |= primary ? FAIL_PRIMARY : 0;
    mine.status |= primary && st == HOOP_ERR_MISMATCH && r->frame_vague ? FAIL_VAGUE : 0;

    struct hoop_notice v;
    double waited = 0;
    if (c->rank == 0) {
        fail_gather(c, &mine, &v);
    } else {
        int rc = 0;
        if (c->ctl_root == HEARD_NOTHING)
            hoop_notice_write(&c->bs, c->bs.root_fd, HOOP_HELLO_NOTICE, &mine,
                              hoop_deadline_after(FAIL_WRITE_S));
        /* The abort is the cause, and the caller wants its wait over now,
         * not once the root has heard from everyone. */
        if (aborted)
            return hoop_error(st, "%s", mine.why);
        waited = 2 * c->fail_grace_s + FAIL_WRITE_S;
        if (c->ctl_root == HEARD_NOTICE) {
            v = c->ctl_verdict; /* read by the wait it woke */
        } else if (c->ctl_root == HEARD_NOTHING) {
            int kind = HOOP_HELLO_VERDICT;
            rc = hoop_notice_read(&c->bs, c->bs.root_fd, &kind, &v, hoop_deadline_after(waited));
        } else {
            rc = -EPIPE; /* the root is gone, or left in order */
        }
        if ((rc == -EPIPE || rc == -ECONNRESET) && primary) {
            /* This rank saw the cause itself: the root's leaving adds nothing. */
            return hoop_error(st, "%s", mine.why);
        } else if (rc == -EPIPE || rc == -ECONNRESET) {
            const struct hoop_peer *p = &c->bs.peers[0];
            v = (struct hoop_notice){.status = HOOP_ERR_PEER, .culprit = 0};
            snprintf(v.why, sizeof(v.why),
                     "rank 0 (%s, pid %u), the root, died or left: its connection closed", p->host,
                     p->pid);
        } else if (rc) {
            if (err == -EINTR)
                return hoop_error(HOOP_ERR_PEER, "rank %d: %s: woken by the root, whose word "
                                  "could not be read: %s", c->rank, what, hoop_errno_str(rc));
            const struct hoop_peer *p = &c->bs.peers[0];
            if (primary) {
                /* This rank saw the cause itself (a mismatch, garbage):
                 * that stays its word, whatever became of the root. */
                hoop_error(st, "%s", mine.why);
                hoop_error_append("; the root (rank 0, %s) named no culprit within %.1f s "
                                  "(twice HOOP_FAIL_GRACE, and 1 s)", p->host, waited);
                return st;
            }
            /* This rank saw only its neighbours stop: every rank that waits
             * on the root then names it, whatever its neighbours did. */
            return hoop_error(HOOP_ERR_TIMEOUT,
                              "rank %d: %s failed: rank 0 (%s, pid %u), the root, named no culprit "
                              "within %.1f s (twice HOOP_FAIL_GRACE, and 1 s) of this rank's "
                              "report: it is stopped or stuck, or the network between it and "
                              "this rank is cut, or its own part of the collective succeeded "
                              "(then the cause is where this rank saw it); this rank saw: %s",
                              c->rank, what, p->host, p->pid, waited, mine.why);
        }
    }
    if (aborted || strcmp(v.why, mine.why) == 0)
        return hoop_error(st, "%s", mine.why);
    hoop_status_t vs = (hoop_status_t)v.status;
    if (vs == HOOP_ERR_ABORTED)
        vs = HOOP_ERR_PEER; /* another rank aborted */
    return hoop_error(vs, "rank %d: %s failed: %s", c->rank, what, v.why);
}
