/* cq.c - the libfabric transport's completion queue: reading it (which
 * is what makes a provider with manual progress move data), turning its
 * entries and errors into request states, waiting on it, and cancelling
 * everything at once.
 *
 * A wait spins on the queue first (HOOP_BUSY_POLL_US, yielding the CPU
 * between looks where ranks outnumber CPUs), then sleeps: on the queue's
 * file descriptor where the provider gives one (fi_trywait first, as its
 * contract asks), else in short, growing naps between looks, since such a
 * provider (shm) moves data only while the queue is read. Watched
 * descriptors end any wait with -EINTR. */
#include "transport/ofi/ofi.h"
#include "common/clock.h"
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OFI_CQ_BATCH 16
/* With no wait object, look at least this long before napping, and nap at
 * most this long: a nap delays the data a provider with manual progress
 * moves only while it is polled. */
#define OFI_NOWAIT_SPIN_NS 50000ull
#define OFI_NAP_MAX_NS 1000000ull
/* Looks between two checks of the watched descriptors while spinning. */
#define OFI_WATCH_EVERY 256

void ofi_note(struct ofi_tp *tp, const char *what, int fi_rc)
{
    int e = fi_rc < 0 ? -fi_rc : fi_rc;
    snprintf(tp->err_text, sizeof(tp->err_text), "%s: %s", what, tp->lib->strerror(e));
    HOOP_WARN("rank %d: ofi transport (%s): %s", tp->rank, tp->prov, tp->err_text);
}

/* libfabric's error numbers are errno values below FI_ERRNO_OFFSET
 * (shm 1.17 reports them negated). */
static int ofi_errno(int fi_err)
{
    if (fi_err < 0)
        fi_err = -fi_err;
    if (fi_err == FI_ETRUNC)
        return -EMSGSIZE;
    if (fi_err > 0 && fi_err < FI_ERRNO_OFFSET)
        return -fi_err;
    return -EIO;
}

/* Returns how many requests ended (a hangup ends those of its peer). */
static int ofi_complete(struct ofi_tp *tp, struct ofi_op *op, int err, size_t len)
{
    if (!op->posted) {
        /* rxm reports some cancelled operations twice; during a shutdown
         * that is expected, elsewhere worth a word. */
        hoop_log(tp->dead ? HOOP_LOG_DEBUG : HOOP_LOG_WARN,
                 "rank %d: ofi transport (%s): a second completion (%d) of an operation: ignored",
                 tp->rank, tp->prov, err);
        return 0;
    }
    ofi_posted_remove(tp, op);
    if (op->kind == OFI_OP_PART)
        return ofi_part_ended(tp, op, err, len);
    if (op->kind == OFI_OP_HANGUP) {
        tp->hangup_rx[op->peer] = NULL;
        int peer = op->peer;
        ofi_op_release(tp, op);
        if (!err && !tp->dead && !tp->hung[peer]) {
            HOOP_INFO("rank %d: ofi transport: rank %d hung up", tp->rank, peer);
            tp->hung[peer] = 1;
            tp->hangups++;
        }
        return 0;
    }
    if (op->ctrl || op->orphan) { /* this rank's own hangup, sent; or an orphan */
        ofi_op_release(tp, op);
        return 0;
    }
    tp->inflight--;
    struct hoop_tp_req *q = op->req;
    if (!q) { /* a hello: its owner reads the outcome */
        op->done = 1;
        op->err = err;
        op->len = len;
        return 1;
    }
    if (op->is_send) {
        if (!err)
            q->done = hoop_tp_req_total(q);
    } else if (err == -EMSGSIZE) {
        /* Longer than expected. Whether the provider put any of it in the
         * buffer differs (rxm's rendezvous puts nothing): done 0 tells the
         * check that the header, cleared before the post, may not be in. */
        q->done = 0;
        int c = q->check ? q->check(q) : 0;
        err = c ? c : -EMSGSIZE;
    } else if (!err) {
        /* Shorter: the header, when it is in, says what the sender is doing. */
        size_t want = hoop_tp_req_total(q);
        q->done = len < want ? len : want;
        int c = q->check && q->done >= q->hdr_len ? q->check(q) : 0;
        if (c)
            err = c;
        else if (len != want)
            err = -EMSGSIZE;
    }
    q->state = err;
    ofi_op_release(tp, op);
    return 1;
}

static int ofi_poll_cq(struct ofi_tp *tp)
{
    struct fi_cq_tagged_entry e[OFI_CQ_BATCH];
    int n = 0;
    for (;;) {
        ssize_t rc = fi_cq_read(tp->cq, e, OFI_CQ_BATCH);
        if (rc > 0) {
            tp->cq_entries += (uint64_t)rc;
            for (ssize_t i = 0; i < rc; i++) {
                /* A peer's write: its context is no operation of this rank
                 * (shm 1.17 fills in something there). */
                if ((e[i].flags & FI_REMOTE_CQ_DATA) && !(e[i].flags & FI_RECV))
                    n += ofi_write_arrived(tp, e[i].data);
                else if (e[i].op_context)
                    n += ofi_complete(tp, e[i].op_context, 0, e[i].len);
            }
            if (rc < OFI_CQ_BATCH)
                return n;
            continue;
        }
        if (rc == -FI_EAGAIN)
            return n;
        if (rc != -FI_EAVAIL) {
            ofi_note(tp, "fi_cq_read", (int)rc);
            return n ? n : -EIO;
        }
        struct fi_cq_err_entry ee;
        memset(&ee, 0, sizeof(ee));
        if ((rc = fi_cq_readerr(tp->cq, &ee, 0)) < 0) {
            if (rc == -FI_EAGAIN)
                continue;
            ofi_note(tp, "fi_cq_readerr", (int)rc);
            return n ? n : -EIO;
        }
        tp->cq_entries++;
        int err = ofi_errno(ee.err);
        const struct ofi_op *eop = ee.op_context;
        if (err != -ECANCELED && err != -EMSGSIZE && !(eop && eop->orphan)) {
            char prov[160];
            const char *ps = fi_cq_strerror(tp->cq, ee.prov_errno, ee.err_data, prov, sizeof(prov));
            snprintf(tp->err_text, sizeof(tp->err_text), "%s (provider: %s)",
                     tp->lib->strerror(ee.err < 0 ? -ee.err : ee.err), ps ? ps : "no detail");
            HOOP_WARN("rank %d: ofi transport (%s): an operation failed: %s", tp->rank, tp->prov,
                      tp->err_text);
        }
        if (ee.op_context)
            n += ofi_complete(tp, ee.op_context, err, ee.len);
    }
}

int ofi_pending_with(const struct ofi_tp *tp, int peer, unsigned which)
{
    for (int l = 0; l < (which & OFI_WITH_XFERS ? 2 : 1); l++)
        for (const struct ofi_op *op = l ? tp->xfers : tp->posted; op; op = op->next)
            if (op->req && op->conn && op->conn->peer == peer &&
                which & (op->is_send ? OFI_WITH_SENDS : OFI_WITH_RECVS))
                return 1;
    return 0;
}

/* Ranks hung up. A hangup can be read before what its sender did earlier
 * has said so here: libfabric's shm provider reads a receiver's word that
 * a send was delivered from one queue and messages from another, and
 * leaves the first for a later read when the receiver holds its region's
 * lock, but goes on to the second. A peer that finished a collective and
 * then failed the next one must not fail this rank's part of the one it
 * finished (its sends there were delivered), so the transfers with the
 * hung ranks may end by themselves first: what the peer had taken or sent
 * needs only this rank's reads, so the reads go on while they bring
 * something, until OFI_HANGUP_QUIET_NS bring nothing (what is left then
 * waits for what will never come) or OFI_HANGUP_SETTLE_NS in all. Only
 * what is left then fails. How many requests ended. */
static int ofi_hangups_end(struct ofi_tp *tp)
{
    tp->settling = 1;
    int n = 0;
    uint64_t now = hoop_now_ns(), until = now + OFI_HANGUP_SETTLE_NS;
    uint64_t quiet = now + OFI_HANGUP_QUIET_NS;
    for (;;) {
        int busy = 0;
        for (int p = 0; p < tp->size && !busy; p++)
            busy = tp->hung[p] &&
                   ofi_pending_with(tp, p, OFI_WITH_SENDS | OFI_WITH_RECVS | OFI_WITH_XFERS);
        if (!busy)
            break;
        /* A read after every pause, however long this process slept. */
        int k = ofi_poll_cq(tp);
        if (k < 0)
            break;
        n += k;
        now = hoop_now_ns();
        if (k > 0)
            quiet = now + OFI_HANGUP_QUIET_NS;
        if (now >= quiet || now >= until)
            break;
        if (k == 0)
            nanosleep(&(struct timespec){0, 50000}, NULL);
    }
    for (int p = 0; p < tp->size; p++) {
        if (!tp->hung[p])
            continue;
        tp->hung[p] = 0;
        if (!tp->gone[p])
            n += 1 + ofi_peer_gone(tp, p);
    }
    tp->hangups = 0;
    tp->settling = 0;
    return n;
}

int ofi_poll(struct ofi_tp *tp)
{
    int n = ofi_poll_cq(tp);
    if (n >= 0 && tp->hangups && !tp->settling)
        n += ofi_hangups_end(tp);
    return n;
}

/* Sleep until the queue's descriptor or a watched one is readable, or
 * ns have passed. */
static void ofi_sleep(struct ofi_tp *tp, uint64_t ns, int on_queue)
{
    struct pollfd p[9];
    nfds_t n = 0;
    if (on_queue)
        p[n++] = (struct pollfd){.fd = tp->wait_fd, .events = POLLIN};
    for (int i = 0; i < tp->watch.n && n < 9; i++)
        p[n++] = (struct pollfd){.fd = tp->watch.fd[i], .events = POLLIN};
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
                          .tv_nsec = (long)(ns % 1000000000ull)};
    ppoll(p, n, &ts, NULL);
}

/* Read the queue until something completes (its count), a watched
 * descriptor is readable (-EINTR, when `watch`), or the deadline (0). */
static int ofi_wait(struct ofi_tp *tp, uint64_t deadline_ns, int watch)
{
    uint64_t now = hoop_now_ns();
    uint64_t spin = tp->spin_ns;
    if (tp->wait_fd < 0 && spin < OFI_NOWAIT_SPIN_NS)
        spin = OFI_NOWAIT_SPIN_NS;
    uint64_t spin_until = now + spin, nap = 10000;
    for (unsigned looks = 0;; looks++) {
        int n = ofi_poll(tp);
        if (n >= 0)
            n += ofi_post_waiting(tp);
        if (n)
            return n;
        now = hoop_now_ns();
        if (now >= deadline_ns) {
            /* A short wait (a loop that also looks at a GPU's events)
             * may end before the spin looks at the caller's descriptors:
             * look once at its end, so that no wake is missed. */
            if (watch && hoop_watch_readable(&tp->watch))
                return -EINTR;
            return 0;
        }
        if (now < spin_until) {
            if (watch && looks % OFI_WATCH_EVERY == OFI_WATCH_EVERY - 1 && hoop_watch_readable(&tp->watch))
                return -EINTR;
            if (tp->spin_yield && looks)
                sched_yield();
            continue;
        }
        if (watch && hoop_watch_readable(&tp->watch))
            return -EINTR;
        uint64_t left = deadline_ns - now;
        if (tp->wait_fd >= 0) {
            struct fid *f = &tp->cq->fid;
            if (fi_trywait(tp->fabric, &f, 1) == FI_SUCCESS)
                ofi_sleep(tp, left < 1000000000ull ? left : 1000000000ull, 1);
        } else {
            ofi_sleep(tp, nap < left ? nap : left, 0);
            if (nap < OFI_NAP_MAX_NS)
                nap *= 2;
        }
    }
}

void ofi_drain(struct ofi_tp *tp)
{
    for (uint64_t seen = ~0ull; seen != tp->cq_entries;) {
        seen = tp->cq_entries;
        if (ofi_poll(tp) < 0)
            break;
    }
}

void ofi_settle(struct ofi_tp *tp, int peer)
{
    ofi_drain(tp);
    uint64_t until = hoop_now_ns() + OFI_SETTLE_NS;
    while (ofi_pending_with(tp, peer, OFI_WITH_RECVS | OFI_WITH_XFERS) && hoop_now_ns() < until)
        if (ofi_poll(tp) < 0)
            break;
}

int ofi_progress(void *vtp, uint64_t deadline_ns)
{
    struct ofi_tp *tp = vtp;
    if (tp->dead)
        return -ECANCELED;
    int n = ofi_poll(tp);
    if (n < 0)
        return n;
    n += ofi_post_waiting(tp);
    if (n)
        return n;
    if (tp->inflight == 0)
        return -EDEADLK; /* nothing can complete: a caller bug, not a wait */
    return ofi_wait(tp, deadline_ns, 1);
}

int ofi_wait_op(struct ofi_tp *tp, struct ofi_op *op, uint64_t deadline_ns)
{
    while (!op->done) {
        int rc = ofi_wait(tp, deadline_ns, 0);
        if (rc < 0)
            return rc;
        if (rc == 0 && !op->done && hoop_now_ns() >= deadline_ns)
            return -ETIMEDOUT;
    }
    return op->err;
}

int ofi_watch(void *vtp, int fd)
{
    struct ofi_tp *tp = vtp;
    return hoop_watch_add(&tp->watch, fd);
}

static void ofi_fail_op(struct ofi_tp *tp, struct ofi_op *op)
{
    if (op->kind == OFI_OP_PART) {
        ofi_part_ended(tp, op, -ECANCELED, 0);
        return;
    }
    if (op->ctrl || op->orphan) {
        if (op->kind == OFI_OP_HANGUP)
            tp->hangup_rx[op->peer] = NULL;
        ofi_op_release(tp, op);
        return;
    }
    tp->inflight--;
    if (op->req) {
        op->req->state = -ECANCELED;
        ofi_op_release(tp, op);
    } else {
        op->done = 1;
        op->err = -ECANCELED;
    }
}

/* Tell every peer this rank has a connection with that it leaves, and
 * give the provider a moment to deliver it. */
static void ofi_hangup_all(struct ofi_tp *tp)
{
    if (!tp->peer_addr)
        return;
    for (int peer = 0; peer < tp->size; peer++) {
        if (peer == tp->rank || tp->peer_addr[peer] == FI_ADDR_NOTAVAIL || tp->gone[peer])
            continue;
        struct ofi_op *op = ofi_op_get(tp);
        if (!op)
            return;
        op->kind = OFI_OP_HANGUP;
        op->ctrl = 1;
        op->is_send = 1;
        op->peer = peer;
        /* The address only: no connection object is needed to send. */
        struct ofi_conn to = {.addr = tp->peer_addr[peer]};
        op->conn = &to;
        op->tag = OFI_TAG(OFI_KIND_CTRL, 0, tp->rank, 0);
        if (ofi_op_iov(tp, op, &op->small, sizeof(op->small)) ||
            fi_tsendv(tp->ep, op->iov, op->desc, op->niov, to.addr, op->tag, &op->ctx)) {
            ofi_op_release(tp, op);
            continue;
        }
        op->conn = NULL;
        op->kind = OFI_OP_SEND; /* completes as a control send */
        ofi_posted_add(tp, op);
    }
}

void ofi_shutdown(struct ofi_tp *tp, int hangup)
{
    if (tp->dead)
        return;
    tp->dead = 1;
    /* An endpoint that never came up has nothing to say or to take in:
     * libfabric's shm provider crashes reading a queue whose endpoint
     * failed to enable. */
    int up = tp->ep && tp->enabled;
    if (hangup && up) {
        ofi_hangup_all(tp);
        uint64_t until = hoop_now_ns() + 100000000ull;
        int sends;
        do {
            ofi_poll(tp);
            sends = 0;
            for (struct ofi_op *op = tp->posted; op; op = op->next)
                sends += op->ctrl && op->is_send;
        } while (sends && hoop_now_ns() < until);
    }
    ofi_xfers_end(tp, -1, -ECANCELED);
    for (int d = 0; d < 2; d++) {
        while (tp->wait_head[d]) {
            struct ofi_op *op = tp->wait_head[d];
            tp->wait_head[d] = op->next;
            ofi_fail_op(tp, op);
        }
        tp->wait_tail[d] = NULL;
    }
    if (!up)
        return;
    /* Take what has completed first: only what is still in flight is
     * cancelled (see ofi_peer_gone). */
    ofi_drain(tp);
    for (struct ofi_op *op = tp->posted; op; op = op->next)
        fi_cancel(&tp->ep->fid, &op->ctx);
    uint64_t deadline = hoop_now_ns() + 200000000ull;
    while (tp->posted && hoop_now_ns() < deadline) {
        if (ofi_poll(tp) <= 0) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    if (tp->posted) {
        /* What the provider would not give back: closing the endpoint ends
         * its last hold on their buffers. Over libfabric's tcp provider a
         * message half received from a stopped peer is freed twice when
         * its connection closes (libfabric 1.17: a crash in about one
         * such failure in five); software moves no byte there without a
         * call, so the endpoint is parked instead: never read or closed
         * again, its buffers the caller's once more. A NIC's endpoint
         * must close: the hardware could still write. */
        int left = 0;
        for (struct ofi_op *op = tp->posted; op; op = op->next)
            left++;
        if (strstr(tp->prov, "tcp")) {
            HOOP_WARN("rank %d: ofi transport (%s): %d transfers were not given back 200 ms after "
                      "their cancel (a peer stopped mid-message); the endpoint is left open and "
                      "unused until the process exits, as closing it would crash the provider",
                      tp->rank, tp->prov, left);
            tp->parked = 1;
            tp->parked_ep = tp->ep;
        } else {
            HOOP_INFO("rank %d: ofi transport (%s): %d transfers not given back 200 ms after "
                      "their cancel: closing the endpoint ends them", tp->rank, tp->prov, left);
            fi_close(&tp->ep->fid);
        }
        tp->ep = NULL;
        while (tp->posted) {
            struct ofi_op *op = tp->posted;
            ofi_posted_remove(tp, op);
            ofi_fail_op(tp, op);
        }
    }
    /* No operation is left to hold a registration: close them all, so that
     * no late write of a peer lands in a buffer given back to the caller. */
    if (tp->xfers)
        HOOP_WARN("rank %d: ofi transport: written messages left after the shutdown", tp->rank);
    else if (!tp->parked) /* a parked endpoint's transfers may name them */
        hoop_mr_fini(&tp->mr);
}

static pthread_mutex_t ofi_parked_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ofi_tp *ofi_parked;

void ofi_park_keep(struct ofi_tp *tp)
{
    pthread_mutex_lock(&ofi_parked_lock);
    tp->parked_next = ofi_parked;
    ofi_parked = tp;
    pthread_mutex_unlock(&ofi_parked_lock);
}

void ofi_cancel(void *vtp)
{
    ofi_shutdown(vtp, 1);
}
