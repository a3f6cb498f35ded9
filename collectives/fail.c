/* fail.c - a failed collective, seen from the whole job, and
 * hoop_comm_abort.
 *
 * When a rank's collective fails it sends the root a notice (what it saw,
 * whom it blames, and whether it saw the cause itself or only a neighbour
 * leaving) over the connection kept from the rendezvous, and waits for the
 * root's verdict. The root gathers notices until it knows the cause: a rank
 * whose connection closed without a notice died; a rank that saw a
 * mismatch, garbage or an abort saw the cause; when ranks only timed out,
 * the ranks that stay silent for HOOP_FAIL_GRACE are the stopped ones. It
 * then tells every rank, so that every survivor names the same culprit, not
 * the neighbour that happened to close on it first. The transport wakes on
 * the abort eventfd, so an abort ends any wait at once; a failure reaches
 * the ranks that are not next to it as their neighbours close. */
#include "collectives/comm.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* In a notice's status: the sender saw the cause itself. */
#define FAIL_PRIMARY 0x100
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

hoop_status_t hoop_comm_control_init(hoop_comm_t *c)
{
    c->abort_fd = -1;
    hoop_status_t st = hoop_param_double("HOOP_FAIL_GRACE", 0.05, 3600, &c->fail_grace_s);
    if (st || c->size == 1)
        return st;
    c->abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (c->abort_fd < 0)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: eventfd: %s", c->rank, hoop_errno_str(-errno));
    /* The connections to the root are read only once a collective has
     * failed: a rank that finished and left closes its connection too, and
     * must not fail the others' last collective. */
    return hoop_ring_watch(&c->ring, c->abort_fd);
}

enum { HEARD_NOTHING = 0, HEARD_NOTICE, HEARD_GONE };

/* The root: gather notices until the cause is known, name it. */
static void fail_gather(hoop_comm_t *c, const struct hoop_notice *mine, struct hoop_notice *v)
{
    const int n = c->size;
    int *heard = calloc((size_t)n, sizeof(*heard));
    struct hoop_notice *got = calloc((size_t)n, sizeof(*got));
    struct pollfd *pfd = calloc((size_t)n, sizeof(*pfd));
    int *who = calloc((size_t)n, sizeof(*who));
    *v = *mine;
    v->status &= ~FAIL_PRIMARY;
    if (!heard || !got || !pfd || !who)
        goto out;
    got[0] = *mine;
    heard[0] = HEARD_NOTICE;
    uint64_t deadline = hoop_deadline_after(c->fail_grace_s);
    int decided = (mine->status & FAIL_PRIMARY) != 0;
    while (!decided) {
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
            int e = hoop_notice_read(&c->bs, c->bs.fds[k], HOOP_HELLO_NOTICE, &got[k],
                                     hoop_deadline_after(FAIL_WRITE_S));
            heard[k] = e ? HEARD_GONE : HEARD_NOTICE;
            if (e || (got[k].status & FAIL_PRIMARY))
                decided = 1;
        }
    }
    /* A rank gone without a word died; one that saw the cause names it;
     * when all that is known is timeouts, the silent ranks are stuck. */
    int dead = -1, cause = -1, silent = -1, nsilent = 0, timeouts = 0;
    for (int k = 0; k < n; k++) {
        if (heard[k] == HEARD_GONE && dead < 0)
            dead = k;
        else if (heard[k] == HEARD_NOTICE && (got[k].status & FAIL_PRIMARY) &&
                 (cause < 0 || (got[k].status & 0xff) == HOOP_ERR_MISMATCH))
            cause = k;
        else if (heard[k] == HEARD_NOTHING && k > 0) {
            if (silent < 0)
                silent = k;
            nsilent++;
        }
        if (heard[k] == HEARD_NOTICE && (got[k].status & 0xff) == HOOP_ERR_TIMEOUT)
            timeouts++;
    }
    if (dead >= 0) {
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
    }
out:
    for (int k = 1; k < n; k++)
        if (!heard || heard[k] != HEARD_GONE)
            hoop_notice_write(&c->bs, c->bs.fds[k], HOOP_HELLO_VERDICT, v,
                              hoop_deadline_after(FAIL_WRITE_S));
    free(heard);
    free(got);
    free(pfd);
    free(who);
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
    struct hoop_notice mine = {.status = (int)st, .culprit = r->fail_peer};
    int aborted = atomic_load_explicit(&c->aborted, memory_order_acquire) == 2;
    int primary;
    if (aborted) {
        st = HOOP_ERR_ABORTED;
        hoop_error(st, "rank %d: %s: aborted by hoop_comm_abort on this rank: %s", c->rank, what,
                   c->abort_why);
        mine = (struct hoop_notice){.status = (int)st, .culprit = c->rank};
        primary = 1;
    } else if (err == -EINTR) {
        primary = 0; /* woken by the root's word, seen below */
        mine.culprit = HOOP_NOTICE_NOBODY;
    } else {
        primary = st != HOOP_ERR_TIMEOUT && err != -EPIPE && err != -ECONNRESET &&
                  err != -ECANCELED && err != -ENOTCONN;
    }
    snprintf(mine.why, sizeof(mine.why), "%s", hoop_last_error());
    mine.status |= primary ? FAIL_PRIMARY : 0;

    struct hoop_notice v;
    double waited = 0;
    if (c->rank == 0) {
        fail_gather(c, &mine, &v);
    } else {
        hoop_notice_write(&c->bs, c->bs.root_fd, HOOP_HELLO_NOTICE, &mine,
                          hoop_deadline_after(FAIL_WRITE_S));
        /* The abort is the cause, and the caller wants its wait over now,
         * not once the root has heard from everyone. */
        if (aborted)
            return hoop_error(st, "%s", mine.why);
        waited = 2 * c->fail_grace_s + FAIL_WRITE_S;
        int rc = hoop_notice_read(&c->bs, c->bs.root_fd, HOOP_HELLO_VERDICT, &v,
                                  hoop_deadline_after(waited));
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
            hoop_error(st, "%s", mine.why);
            hoop_error_append("; the root (rank 0, %s) named no culprit within %.1f s "
                              "(HOOP_FAIL_GRACE): it may be the rank that is stuck",
                              c->bs.peers[0].host, waited);
            return st;
        }
    }
    if (aborted || strcmp(v.why, mine.why) == 0)
        return hoop_error(st, "%s", mine.why);
    hoop_status_t vs = (hoop_status_t)v.status;
    if (vs == HOOP_ERR_ABORTED)
        vs = HOOP_ERR_PEER; /* another rank aborted */
    return hoop_error(vs, "rank %d: %s failed: %s", c->rank, what, v.why);
}
