/* data.c - the shared-memory transport's data path: requests copied into
 * and out of the slots, and its waits (shm.h). */
#include "transport/shm/conn.h"
#include "common/clock.h"
#include "common/relax.h"
#include "common/sock.h"
#include "common/status.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* A spin that makes no system call is never rescheduled before the tick:
 * where another task holds the CPU the peer needs (a loaded machine, the
 * peer sharing this rank's CPU), the peer's message would wait out the
 * whole busy-poll time. So the spin gives up the CPU this often; with no
 * other task waiting for it, sched_yield returns at once. */
#define SHM_SPIN_YIELD_NS 4000

/* Between two looks the spin pauses once for the first SHM_SPIN_QUICK_NS,
 * then twice as often each time up to this many: a small message's answer,
 * which comes within a microsecond, is seen at once, and a long wait (the
 * peer copying a chunk) leaves the core's resources to the copy. Always 16
 * made an 8-byte allreduce of two ranks take twice as long; always 1 made
 * the large ones up to 18 % slower; doubling from the first look made the
 * 8-byte one 13 % slower than pausing once for its first microsecond. */
#define SHM_SPIN_RELAX_MAX 16
#define SHM_SPIN_QUICK_NS 1000

static void shm_ring(int efd)
{
    uint64_t one = 1;
    if (write(efd, &one, sizeof(one)) < 0) {
        /* Full (never in practice) or the peer's end is gone: it is awake,
         * or nothing will wake it. */
    }
}

/* A position word of the segment (the tail, a slot's ready word) that the
 * peer could not have written. */
static const char shm_bad_position[] =
    "wrote a position into the segment that is not one (the segment is corrupt)";

/* A payload lent in place that cannot be read: from a producer still in
 * its call, and from one that gave up (its caller may have freed it). */
static const char shm_unreadable[] = "left a payload this rank could not read from its memory";
static const char shm_gave_up[] =
    "stopped sending (it failed, or left) before this rank had read a payload it left in its "
    "memory";

/* The first failure that an errno does not tell, kept for last_error. */
static int shm_fail(struct shm_conn *c, int err, const char *fmt, const char *what)
{
    struct shm_tp *tp = c->tp;
    if (!tp->why[0])
        snprintf(tp->why, sizeof(tp->why), fmt, c->peer, what);
    if (!c->err)
        c->err = err;
    return err;
}

static void shm_end(struct shm_conn *c, int state)
{
    struct hoop_tp_req *r = c->head;
    c->head = r->next;
    if (!c->head)
        c->tail = NULL;
    r->next = NULL;
    r->state = state;
}

int shm_conn_fail_all(struct shm_conn *c, int err)
{
    int n = 0;
    c->pub = NULL;
    while (c->head) {
        shm_end(c, err);
        n++;
    }
    return n;
}

void shm_conn_shut(struct shm_conn *c)
{
    if (!c->ctl)
        return;
    atomic_store(c->dir == SHM_TX ? &c->ctl->prod_closed : &c->ctl->cons_closed, 1);
    if (c->efd_peer >= 0)
        shm_ring(c->efd_peer);
    if (c->sock >= 0)
        shutdown(c->sock, SHUT_RDWR);
}

/* Copy bytes [off, off + n) of the request's message (header, then
 * payload) to p. */
static void shm_copy_out(const struct hoop_tp_req *r, size_t off, uint8_t *p, size_t n)
{
    if (off < r->hdr_len) {
        size_t k = r->hdr_len - off < n ? r->hdr_len - off : n;
        memcpy(p, (const uint8_t *)r->hdr + off, k);
        off += k;
        p += k;
        n -= k;
    }
    if (n)
        memcpy(p, (const uint8_t *)r->buf + (off - r->hdr_len), n);
}

/* The producer: read the consumer's tail from the segment (only when the
 * ring looks full or a payload lent in place waits for it: the line is
 * the consumer's, and reading it costs a transfer between the cores). */
static uint64_t shm_read_tail(struct shm_conn *c)
{
    uint64_t tail = atomic_load(&c->ctl->tail);
    if (!c->err && (c->pos - tail > c->nslots || tail < c->tail_seen))
        shm_fail(c, -EPROTO, "rank %d %s", shm_bad_position);
    else
        c->tail_seen = tail;
    return c->tail_seen;
}

/* The slot for the producer's next position, or NULL while the ring is
 * full (or the connection failed looking). */
static inline uint8_t *shm_free_slot(struct shm_conn *c)
{
    if (c->pos - c->tail_seen == c->nslots && (c->pos - shm_read_tail(c) == c->nslots || c->err))
        return NULL;
    return c->seg + shm_slot_off((uint32_t)(c->pos & (c->nslots - 1)), c->slot_bytes);
}

/* Publish the slot just written at the producer's position. */
static void shm_post(struct shm_conn *c, uint8_t *slot)
{
    c->pos++;
    /* Publish, then look whether the consumer sleeps: it says so before
     * its last look at the ready word. Both sides' store-then-load are
     * sequentially consistent, so one of them sees the other's. */
    atomic_store(shm_slot_ready(slot), c->pos);
    if (atomic_load(&c->ctl->cons_wait) && atomic_exchange(&c->ctl->cons_wait, 0))
        shm_ring(c->efd_peer);
}

/* Whether r's header can be a base: whole words, no more than the base. */
static inline int shm_base_fits(const struct shm_conn *c, const struct hoop_tp_req *r)
{
    return r->hdr_len % 8 == 0 && r->hdr_len <= sizeof(c->base);
}

/* The words of hdr (n of them) that differ from base's, as a mask; each
 * is written at out + *at, and *at moves past the ones that differ. */
static unsigned shm_diff(const void *hdr, const uint8_t *base, size_t n, uint8_t *out, size_t *at)
{
    unsigned mask = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a, b;
        memcpy(&a, (const uint8_t *)hdr + 8 * i, 8);
        memcpy(&b, base + 8 * i, 8);
        memcpy(out + *at, &a, 8);
        unsigned d = a != b;
        mask |= d << i;
        *at += 8 * (size_t)d;
    }
    return mask;
}

/* The words of the base (n of them) that the mask names, from p on in
 * turn; the pointer past the last one taken. */
static const uint8_t *shm_patch(uint8_t *base, size_t n, unsigned mask, const uint8_t *p)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t w, b;
        unsigned keep = (mask >> i) & 1u;
        memcpy(&w, p, 8);
        memcpy(&b, base + 8 * i, 8);
        b = keep ? w : b;
        memcpy(base + 8 * i, &b, 8);
        p += 8 * keep;
    }
    return p;
}

/* Publish request r (none of it out yet) whole in one compact slot
 * (slot.h) where its header and payload fit one: 1 once published, 0
 * while the ring is full, -1 where they do not fit. */
static int shm_publish_compact(struct shm_conn *c, struct hoop_tp_req *r)
{
    if (!shm_base_fits(c, r) || r->len > SHM_COMPACT_MAX)
        return -1;
    /* The first line as it will be: the compact header, the header's
     * words that differ from the base, the payload's start. Every word is
     * written where the next changed one goes, and kept only if it
     * differs: no branch per word, and room for all of them. */
    uint8_t line[sizeof(struct shm_slot_compact) + sizeof(c->base) + 8] = {0};
    size_t at = sizeof(struct shm_slot_compact);
    unsigned mask = shm_diff(r->hdr, c->base, r->hdr_len / 8, line, &at);
    size_t changed = at - sizeof(struct shm_slot_compact);
    if (changed > SHM_COMPACT_LINE || changed + r->len > SHM_COMPACT_MAX ||
        changed + r->len > SHM_COMPACT_LINE + c->slot_bytes)
        return -1;
    uint8_t *slot = shm_free_slot(c);
    if (!slot)
        return 0;
    struct shm_slot_compact h = {.magic = SHM_SLOT_MAGIC_COMPACT,
                                 .msg = (uint32_t)c->msg,
                                 .len = (uint16_t)r->len,
                                 .words = (uint8_t)(r->hdr_len / 8),
                                 .mask = (uint8_t)mask};
    memcpy(line, &h, sizeof(h));
    size_t in_line = r->len < SHM_SLOT_READY_OFF - at ? r->len : SHM_SLOT_READY_OFF - at;
    if (in_line)
        memcpy(line + at, r->buf, in_line);
    /* The rest first: the consumer looks at the first line, and the line
     * should leave this core once, with the ready word. */
    if (r->len > in_line)
        memcpy(slot + SHM_SLOT_HDR, (const uint8_t *)r->buf + in_line, r->len - in_line);
    memcpy(slot, line, SHM_SLOT_READY_OFF);
    if (r->hdr_len)
        memcpy(c->base, r->hdr, r->hdr_len);
    r->done = hoop_tp_req_total(r);
    shm_post(c, slot);
    r->lent = 0;
    c->msg++;
    return 1;
}

/* Publish what there is room for of request r (from r->done on): 1 once
 * all of it is in the ring, 0 when the ring is full first. */
static int shm_publish(struct shm_conn *c, struct hoop_tp_req *r)
{
    size_t total = hoop_tp_req_total(r);
    int remote = r->done == 0 && r->len >= SHM_REMOTE_MIN && r->hdr_len &&
                 r->hdr_len <= c->slot_bytes && c->tp->single_copy &&
                 atomic_load_explicit(&c->ctl->cma_ok, memory_order_acquire);
    if (r->done == 0 && !remote) {
        int rc = shm_publish_compact(c, r);
        if (rc >= 0)
            return rc;
    }
    do {
        uint8_t *slot = shm_free_slot(c);
        if (!slot)
            return 0;
        size_t n = remote ? r->hdr_len
                 : total - r->done < c->slot_bytes ? total - r->done : c->slot_bytes;
        shm_copy_out(r, r->done, slot + SHM_SLOT_HDR, n);
        struct shm_slot_hdr h = {.magic = SHM_SLOT_MAGIC, .pos = c->pos, .msg = c->msg,
                                 .msg_len = total, .offset = r->done, .len = (uint32_t)n};
        if (remote) {
            h.flags = SHM_SLOT_REMOTE;
            h.remote = (uint64_t)(uintptr_t)r->buf;
        }
        if (r->done == 0 && r->hdr_len && shm_base_fits(c, r)) {
            /* The whole header is in the first slot (slot_bytes > 64). */
            h.flags |= SHM_SLOT_BASE | (uint32_t)(r->hdr_len / 8) << 8;
            memcpy(c->base, r->hdr, r->hdr_len);
        }
        memcpy(slot, &h, sizeof(h));
        r->done = remote ? total : r->done + n;
        shm_post(c, slot);
    } while (r->done < total);
    /* A payload read in place is the sender's until its slot is taken. */
    r->lent = remote ? c->pos : 0;
    c->msg++;
    return 1;
}

/* The producer: fill the free slots with the queue's messages (from
 * c->pub, the first not wholly in the ring), and end the requests at the
 * head that are in, in order: one whose payload is read in place once the
 * consumer has taken its slot. */
static int shm_produce(struct shm_conn *c)
{
    int ended = 0;
    struct shm_ctl *ctl = c->ctl;
    for (int pass = 0; !c->err && pass < 2; pass++) {
        /* What the consumer has taken is done, even if it has left since. */
        if (c->head && c->head != c->pub && c->head->lent && c->tail_seen < c->head->lent)
            shm_read_tail(c);
        while (!c->err && c->head && c->head != c->pub &&
               (!c->head->lent || c->tail_seen >= c->head->lent)) {
            c->head->lent = 0;
            shm_end(c, 0);
            ended++;
        }
        if (!c->head)
            break;
        if (c->err)
            break;
        if (atomic_load_explicit(&ctl->cons_closed, memory_order_acquire) || c->ended) {
            uint64_t seen = c->tail_seen;
            if (shm_read_tail(c) != seen && !c->err) {
                pass--;
                continue;
            }
            if (c->err)
                break;
            shm_fail(c, -EPIPE, "rank %d %s", "stopped taking messages (it failed, or left)");
            break;
        }
        if (pass == 0)
            while (c->pub && shm_publish(c, c->pub))
                c->pub = c->pub->next;
    }
    if (c->err) {
        c->pub = NULL;
        ended += shm_conn_fail_all(c, c->err);
    }
    return ended;
}

/* A message whose length is not the receive's: the header (what there is
 * of it) goes to check, which tells the caller what the sender does. */
static int shm_wrong_length(struct shm_conn *c, struct hoop_tp_req *r, const uint8_t *data,
                            const struct shm_slot_hdr *h)
{
    if (r->hdr_len && h->len >= r->hdr_len) {
        memcpy(r->hdr, data, r->hdr_len);
        r->done = r->hdr_len;
    } else if (r->hdr_len) {
        memset(r->hdr, 0, r->hdr_len);
        r->done = 0;
    }
    int rc = r->check ? r->check(r) : 0;
    char what[160];
    snprintf(what, sizeof(what), "sent a message of %llu bytes where this rank expected %zu",
             (unsigned long long)h->msg_len, hoop_tp_req_total(r));
    if (!rc)
        rc = shm_fail(c, -EMSGSIZE, "rank %d %s", what);
    c->err = c->err ? c->err : rc;
    return rc;
}

/* A slot whose payload stays in the producer: the header from the slot,
 * checked, then the payload read straight into the receive. 0, or -1 with
 * the connection failed. */
static int shm_take_remote(struct shm_conn *c, struct hoop_tp_req *r, const uint8_t *data,
                           const struct shm_slot_hdr *h)
{
    if (!c->cma_pid || h->len != r->hdr_len) {
        shm_fail(c, -EPROTO, "rank %d %s", "left a payload in its memory where this rank "
                 "cannot read it (the segment is corrupt)");
        return -1;
    }
    memcpy(r->hdr, data, r->hdr_len);
    r->done = r->hdr_len;
    int rc = r->check ? r->check(r) : 0;
    if (rc) {
        c->err = rc;
        return -1;
    }
    size_t left = r->len;
    uint8_t *dst = r->buf;
    uint64_t src = h->remote;
    while (left) {
        struct iovec lo = {.iov_base = dst, .iov_len = left};
        struct iovec re = {.iov_base = (void *)(uintptr_t)src, .iov_len = left};
        ssize_t got = process_vm_readv(c->cma_pid, &lo, 1, &re, 1, 0);
        if (got <= 0) {
            int e = got < 0 ? errno : EIO;
            /* A producer that has given up (its collective failed, the
             * buffer may be freed already) or gone: a symptom of the
             * failure, not a payload it lied about. */
            if (e == ESRCH || c->ended ||
                atomic_load_explicit(&c->ctl->prod_closed, memory_order_acquire)) {
                shm_fail(c, -ECONNRESET, "rank %d %s", shm_gave_up);
                return -1;
            }
            char what[160];
            snprintf(what, sizeof(what), "%s: process_vm_readv: %s", shm_unreadable,
                     hoop_errno_str(-e));
            shm_fail(c, -EPROTO, "rank %d %s", what);
            return -1;
        }
        dst += got;
        src += (uint64_t)got;
        left -= (size_t)got;
    }
    r->done = hoop_tp_req_total(r);
    return 0;
}

static void shm_corrupt(struct shm_conn *c, const char *why)
{
    char what[260];
    snprintf(what, sizeof(what), "wrote a corrupt slot header into the segment: %s", why);
    shm_fail(c, -EPROTO, "rank %d %s", what);
}

/* Copy n bytes of the head message (from r->done on) from data into r;
 * the header, once whole, goes to the check before any payload byte is
 * trusted. With lend (a slot of the bulk path, whose pieces start at
 * multiples of 8 bytes when the header's length is one) a receive that
 * takes its payload in place (hoop_tp_req.take) is handed it there
 * instead. 0, or -1 with the connection failed. */
static int shm_take_bytes(struct shm_conn *c, struct hoop_tp_req *r, const uint8_t *data, size_t n,
                          int lend)
{
    size_t off = r->done;
    if (off < r->hdr_len) {
        size_t k = r->hdr_len - off < n ? r->hdr_len - off : n;
        memcpy((uint8_t *)r->hdr + off, data, k);
        r->done = off += k;
        data += k;
        n -= k;
        if (r->check && off == r->hdr_len) {
            int rc = r->check(r);
            if (rc) {
                c->err = rc;
                return -1;
            }
        }
    }
    if (!n)
        return 0;
    if (lend && r->take && r->hdr_len % 8 == 0)
        r->take(r, off - r->hdr_len, data, n);
    else
        memcpy((uint8_t *)r->buf + (off - r->hdr_len), data, n);
    r->done = off + n;
    return 0;
}

/* A slot with SHM_SLOT_BASE taken: the message's first n bytes, its
 * header, become the base. From the receive's header where it holds them
 * (this rank's memory: read again from the slot, the line would be asked
 * of the other core a second time while the first read is still under
 * way, which costs a small message up to a third of its time). */
static void shm_keep_base(struct shm_conn *c, const struct hoop_tp_req *r, const uint8_t *data,
                          size_t n)
{
    memcpy(c->base, r->hdr_len >= n ? (const uint8_t *)r->hdr : data, n);
}

/* A compact slot (slot.h): its line copied out and checked, the header
 * put together from the base and the words that changed, then the
 * message taken whole. 0, or -1 with the connection failed. */
static int shm_take_compact(struct shm_conn *c, struct hoop_tp_req *r, const uint8_t *slot)
{
    /* The line before the ready word, and zeros: the words are read
     * whether or not they are kept, so the last may be read past it. */
    uint8_t raw[SHM_SLOT_READY_OFF + 16];
    memcpy(raw, slot, SHM_SLOT_READY_OFF);
    memset(raw + SHM_SLOT_READY_OFF, 0, 16);
    struct shm_slot_expect e = {.pos = c->pos,
                                .msg = c->msg,
                                .offset = r->done,
                                .msg_len = c->msg_len,
                                .slot_bytes = c->slot_bytes};
    struct shm_slot_compact h;
    char why[200];
    if (shm_slot_parse_compact(raw, &e, &h, why, sizeof(why))) {
        shm_corrupt(c, why);
        return -1;
    }
    /* A stream that goes on past the first line: ask for the rest now,
     * not once the frame has been checked (h.len is bounded, checked). */
    for (size_t at = 0; at < h.len; at += 64)
        __builtin_prefetch(slot + SHM_SLOT_HDR + at);
    /* The header: each word the base's or the next that follows (at most
     * SHM_COMPACT_LINE bytes of them, checked), no branch per word. */
    const uint8_t *p = shm_patch(c->base, h.words, h.mask, raw + sizeof(h));
    size_t hdr = 8 * (size_t)h.words, left = (size_t)(raw + SHM_SLOT_READY_OFF - p);
    size_t in_line = h.len < left ? h.len : left;
    c->msg_len = hdr + h.len;
    if (c->msg_len != hoop_tp_req_total(r)) {
        struct shm_slot_hdr whole = {.msg_len = c->msg_len, .len = (uint32_t)hdr};
        shm_wrong_length(c, r, c->base, &whole);
        return -1;
    }
    if (shm_take_bytes(c, r, c->base, hdr, 0))
        return -1;
    if (r->hdr_len == hdr) {
        /* The receive's header is the message's (every frame): the
         * payload straight into place. */
        if (in_line)
            memcpy(r->buf, p, in_line);
        if (h.len > in_line)
            memcpy((uint8_t *)r->buf + in_line, slot + SHM_SLOT_HDR, h.len - in_line);
        r->done = c->msg_len;
        return 0;
    }
    if (shm_take_bytes(c, r, p, in_line, 0) ||
        shm_take_bytes(c, r, slot + SHM_SLOT_HDR, h.len - in_line, 0))
        return -1;
    return 0;
}

/* The consumer: copy the slots published into the queue's receives. */
static int shm_consume(struct shm_conn *c)
{
    int ended = 0, took = 0;
    struct shm_ctl *ctl = c->ctl;
    while (c->head) {
        struct hoop_tp_req *r = c->head;
        if (c->err) {
            shm_end(c, c->err);
            ended++;
            continue;
        }
        const uint8_t *slot = c->seg + shm_slot_off((uint32_t)(c->pos & (c->nslots - 1)),
                                                    c->slot_bytes);
        uint64_t ready = atomic_load(shm_slot_ready(slot));
        if (ready != c->pos + 1) {
            if (ready != shm_slot_before(c->pos, c->nslots)) {
                shm_fail(c, -EPROTO, "rank %d %s", shm_bad_position);
                continue;
            }
            /* Nothing more: was that all there will be? Closing is said
             * after the last publish, so look at the slot once more. */
            if (atomic_load_explicit(&ctl->prod_closed, memory_order_acquire) || c->ended) {
                if (atomic_load(shm_slot_ready(slot)) != ready)
                    continue;
                shm_fail(c, -ECONNRESET, "rank %d %s", "stopped sending (it failed, or left)");
                continue;
            }
            break;
        }
        uint32_t magic;
        memcpy(&magic, slot, sizeof(magic));
        if (magic == SHM_SLOT_MAGIC_COMPACT) {
            if (shm_take_compact(c, r, slot))
                continue;
            goto taken;
        }
        uint8_t raw[SHM_SLOT_HDR];
        memcpy(raw, slot, SHM_SLOT_HDR);
        size_t total = hoop_tp_req_total(r);
        struct shm_slot_expect e = {.pos = c->pos, .msg = c->msg, .offset = r->done,
                                    .msg_len = c->msg_len, .slot_bytes = c->slot_bytes};
        struct shm_slot_hdr h;
        char why[200];
        if (shm_slot_parse(raw, &e, &h, why, sizeof(why))) {
            shm_corrupt(c, why);
            continue;
        }
        const uint8_t *data = slot + SHM_SLOT_HDR;
        if (h.offset == 0) {
            c->msg_len = h.msg_len;
            if (h.msg_len != total) {
                shm_wrong_length(c, r, data, &h);
                continue;
            }
        }
        if ((h.flags & SHM_SLOT_REMOTE) ? shm_take_remote(c, r, data, &h)
                                        : shm_take_bytes(c, r, data, h.len, 1))
            continue;
        if (h.flags & SHM_SLOT_BASE)
            shm_keep_base(c, r, data, 8 * SHM_SLOT_BASE_WORDS(h.flags));
    taken:
        c->pos++;
        took = 1;
        atomic_store(&ctl->tail, c->pos);
        if (atomic_load(&ctl->prod_wait) &&
            atomic_exchange(&ctl->prod_wait, 0))
            shm_ring(c->efd_peer);
        if (r->done == hoop_tp_req_total(r)) {
            c->msg++;
            shm_end(c, 0);
            ended++;
        }
    }
    (void)took;
    return ended;
}

static int shm_move(struct shm_conn *c)
{
    return c->dir == SHM_TX ? shm_produce(c) : shm_consume(c);
}

int shm_move_all(struct shm_tp *tp)
{
    int n = tp->unreported;
    tp->unreported = 0;
    for (struct shm_conn *c = tp->conns; c; c = c->next_conn)
        if (c->head)
            n += shm_move(c);
    return n;
}

static int shm_queue(struct shm_conn *c, struct hoop_tp_req *req)
{
    req->state = HOOP_REQ_PENDING;
    req->done = 0;
    req->next = NULL;
    req->lent = 0;
    if (c->tail)
        c->tail->next = req;
    else
        c->head = req;
    c->tail = req;
    if (c->dir == SHM_TX && !c->pub)
        c->pub = req;
    /* Move at once what can move: a copy does not wait. */
    c->tp->unreported += shm_move(c);
    return 0;
}

int shm_isend(void *conn, struct hoop_tp_req *req)
{
    return shm_queue(conn, req);
}

int shm_irecv(void *conn, struct hoop_tp_req *req)
{
    return shm_queue(conn, req);
}

void shm_peer_ended(void *vtp, int peer)
{
    struct shm_tp *tp = vtp;
    for (struct shm_conn *c = tp->conns; c; c = c->next_conn)
        if (c->peer == peer)
            c->ended = 1;
}

int shm_take_events(struct shm_tp *tp, int timeout_ms)
{
    struct epoll_event ev[32];
    int n = epoll_wait(tp->epfd, ev, 32, timeout_ms);
    int woken = 0;
    for (int i = 0; i < n; i++) {
        uint64_t tag = ev[i].data.u64;
        if (tag == 0) {
            woken = 1;
            continue;
        }
        struct shm_conn *c = (struct shm_conn *)(uintptr_t)(tag & ~(uint64_t)3);
        if (tag & SHM_TAG_EFD) {
            uint64_t v;
            if (read(c->efd_self, &v, sizeof(v)) < 0) {
                /* EAGAIN: another look took it already */
            }
        } else {
            /* The peer's end of the socket is gone (nothing else is sent
             * on it): its process has ended or it closed the connection. */
            c->ended = 1;
            epoll_ctl(tp->epfd, EPOLL_CTL_DEL, c->sock, NULL);
        }
    }
    return woken;
}

int hoop_shm_arm(void *vtp)
{
    struct shm_tp *tp = vtp;
    for (struct shm_conn *c = tp->conns; c; c = c->next_conn)
        if (c->head && !c->armed) {
            atomic_store(c->dir == SHM_TX ? &c->ctl->prod_wait : &c->ctl->cons_wait, 1);
            c->armed = 1;
        }
    /* After the marks, one more look: what the peer did before it could see
     * them is found here. */
    int n = shm_move_all(tp);
    if (n)
        hoop_shm_disarm(tp);
    return n ? n : 0;
}

void hoop_shm_disarm(void *vtp)
{
    struct shm_tp *tp = vtp;
    for (struct shm_conn *c = tp->conns; c; c = c->next_conn)
        if (c->armed) {
            atomic_store_explicit(c->dir == SHM_TX ? &c->ctl->prod_wait : &c->ctl->cons_wait, 0,
                                  memory_order_relaxed);
            c->armed = 0;
        }
}

int shm_progress(void *vtp, uint64_t deadline_ns)
{
    struct shm_tp *tp = vtp;
    /* A look before the clock: reading it costs as much as a pause (about
     * 20 ns where the clock is a virtual machine's), and what is waited
     * for has often come already. */
    int n = shm_move_all(tp);
    if (n)
        return n;
    uint64_t now = hoop_now_ns();
    uint64_t spin_until = now + tp->spin_ns < deadline_ns ? now + tp->spin_ns : deadline_ns;
    uint64_t yield_at = now + SHM_SPIN_YIELD_NS, quick_until = now + SHM_SPIN_QUICK_NS;
    int relax = 1;
    unsigned looks = 0;
    /* Spin: pause (or yield), look, and so on until spin_until. */
    while (now < spin_until) {
        if (tp->spin_yield || now >= yield_at) {
            sched_yield();
            yield_at = now + SHM_SPIN_YIELD_NS;
        } else {
            for (int i = 0; i < relax; i++)
                hoop_cpu_relax();
            if (relax < SHM_SPIN_RELAX_MAX && now >= quick_until)
                relax *= 2;
        }
        if ((n = shm_move_all(tp)))
            return n;
        /* While it pauses once a look, the clock is read every fourth
         * look, so that a message is seen sooner after it lands. */
        if (relax == 1 && !tp->spin_yield && (++looks & 3))
            continue;
        now = hoop_now_ns();
    }
    /* Sleep until a peer moves, a watched descriptor or the deadline. */
    for (;;) {
        if ((n = hoop_shm_arm(tp)))
            return n;
        int woken = shm_take_events(tp, now >= deadline_ns ? 0 : hoop_ms_left(deadline_ns));
        hoop_shm_disarm(tp);
        if ((n = shm_move_all(tp)))
            return n;
        if (woken)
            return -EINTR;
        if ((now = hoop_now_ns()) >= deadline_ns)
            return 0;
    }
}
