/* frame.c - stamping and checking the header of every data message (see
 * frame.h). */
#include "ring/frame.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/status.h"
#include "ring/ring.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>

static const char *const coll_names[] = {
    [HOOP_COLL_ALLREDUCE] = "allreduce", [HOOP_COLL_REDUCE_SCATTER] = "reduce_scatter",
    [HOOP_COLL_ALLGATHER] = "allgather", [HOOP_COLL_BROADCAST] = "broadcast",
    [HOOP_COLL_REDUCE] = "reduce",       [HOOP_COLL_ALLTOALL] = "alltoall",
    [HOOP_COLL_BARRIER] = "barrier",     [HOOP_COLL_ALLTOALLV] = "alltoallv",
};

const char *hoop_coll_str(int coll)
{
    if (coll <= 0 || coll >= (int)(sizeof(coll_names) / sizeof(coll_names[0])))
        return "an unknown collective";
    return coll_names[coll];
}

uint64_t hoop_frame_begin(struct hoop_ring *r, int coll, size_t count, hoop_dtype_t dtype, int op,
                          int root)
{
    r->cur = (struct hoop_frame){
        .coll = (uint8_t)coll, .dtype = (uint8_t)dtype, .op = op < 0 ? 255 : (uint8_t)op,
        .root = root < 0 ? HOOP_FRAME_NONE : (uint32_t)root, .sender = (uint32_t)r->rank,
        .seq = ++r->seq, .count = count, .chunk_bytes = (uint32_t)r->chunk_bytes};
    r->ann_posted = 0;
    r->frame_vague = 0;
    r->frame_why[0] = '\0';
    r->fail_err = 0;
    r->fail_peer = -1;
    atomic_store_explicit(&r->running_coll, coll, memory_order_relaxed);
    atomic_store_explicit(&r->running_seq, r->seq, memory_order_release);
    return r->seq;
}

uint64_t hoop_frame_blocks(const size_t *counts, int n)
{
    /* FNV-1a over the counts' 8 little-endian bytes each. */
    uint64_t h = HOOP_FNV1A_INIT;
    for (int k = 0; k < n; k++) {
        uint8_t le[8];
        for (int b = 0; b < 8; b++)
            le[b] = (uint8_t)((uint64_t)counts[k] >> (8 * b));
        h = hoop_fnv1a(h, le, sizeof(le));
    }
    return h ? h : 1;
}

void hoop_frame_send(struct hoop_ring *r, struct hoop_ring_req *q, uint32_t step, uint32_t chunk)
{
    struct hoop_frame f = r->cur;
    f.step = step;
    f.chunk = chunk;
    f.len = q->tp.len;
    hoop_frame_encode(&f, q->hdr);
    q->tp.hdr = q->hdr;
    q->tp.hdr_len = HOOP_FRAME_BYTES;
    q->tp.check = NULL;
    q->tp.region = NULL; /* the caller may name one after */
    q->tp.region_len = 0;
}

static int frame_check(struct hoop_tp_req *req);

void hoop_frame_expect(struct hoop_ring *r, struct hoop_ring_req *q, int from, uint32_t step,
                       uint32_t chunk)
{
    q->expect = r->cur;
    q->expect.sender = (uint32_t)from;
    q->expect.step = step;
    q->expect.chunk = chunk;
    q->expect.len = q->tp.len;
    q->tp.hdr = q->hdr;
    q->tp.hdr_len = HOOP_FRAME_BYTES;
    q->tp.check = frame_check;
    q->tp.check_first = 1;
    q->tp.ctx = r;
    q->tp.region = NULL; /* the caller may name one after */
    q->tp.region_len = 0;
    q->tp.spill = NULL; /* the same */
    q->tp.spill_len = 0;
    q->tp.take = NULL; /* the same */
}

/* "allreduce #5 (1000 x f32 sum, root 2)" */
void hoop_frame_what(const struct hoop_frame *f, char *out, size_t n)
{
    char op[24] = "", root[24] = "";
    if (f->op != 255)
        snprintf(op, sizeof(op), " %s",
                 f->op < HOOP_OP_COUNT ? hoop_op_str((hoop_op_t)f->op) : "(unknown op)");
    if (f->root != HOOP_FRAME_NONE)
        snprintf(root, sizeof(root), ", root %u", f->root);
    if (f->coll == HOOP_COLL_ALLTOALLV) { /* no count of its own */
        snprintf(out, n, "%s #%llu (%s)", hoop_coll_str(f->coll), (unsigned long long)f->seq,
                 f->dtype < HOOP_DTYPE_COUNT ? hoop_dtype_str((hoop_dtype_t)f->dtype) : "?");
        return;
    }
    snprintf(out, n, "%s #%llu (%llu x %s%s%s)", hoop_coll_str(f->coll),
             (unsigned long long)f->seq, (unsigned long long)f->count,
             f->dtype < HOOP_DTYPE_COUNT ? hoop_dtype_str((hoop_dtype_t)f->dtype) : "?", op, root);
}

/* "step 3 chunk 0 (4096 bytes)", "round 2 of recursive doubling (400
 * bytes)" or "its announcement" */
static void frame_where(const struct hoop_frame *f, char *out, size_t n)
{
    if (f->step == HOOP_FRAME_ANNOUNCE)
        snprintf(out, n, "its announcement");
    else if (f->step == HOOP_FRAME_CONFIRM)
        snprintf(out, n, "its confirmation");
    else if (f->step >= HOOP_FRAME_SMALL)
        snprintf(out, n, "round %u of recursive doubling (%llu bytes)",
                 f->step - HOOP_FRAME_SMALL, (unsigned long long)f->len);
    else
        snprintf(out, n, "step %u chunk %u (%llu bytes)", f->step + 1, f->chunk,
                 (unsigned long long)f->len);
}

static int frame_blank(const uint8_t *h)
{
    for (int i = 0; i < HOOP_FRAME_BYTES; i++)
        if (h[i])
            return 0;
    return 1;
}

/* The arguments of f that differ from g's: "root 0 and count 5". */
static void frame_args(const struct hoop_frame *f, const struct hoop_frame *g, char *out, size_t n)
{
    size_t l = 0;
    out[0] = 0;
#define ARG(...)                                                                                  \
    do {                                                                                          \
        if (l < n)                                                                                \
            l += (size_t)snprintf(out + l, n - l, "%s", l ? " and " : "");                        \
        if (l < n)                                                                                \
            l += (size_t)snprintf(out + l, n - l, __VA_ARGS__);                                   \
    } while (0)
    if (f->root != g->root) {
        if (f->root == HOOP_FRAME_NONE)
            ARG("no root");
        else
            ARG("root %u", f->root);
    }
    if (f->count != g->count)
        ARG("count %llu", (unsigned long long)f->count);
    if (f->dtype != g->dtype)
        ARG("dtype %s", f->dtype < HOOP_DTYPE_COUNT ? hoop_dtype_str((hoop_dtype_t)f->dtype) : "?");
    if (f->op != g->op)
        ARG("op %s", f->op < HOOP_OP_COUNT ? hoop_op_str((hoop_op_t)f->op) : "(none)");
#undef ARG
}

static int frame_check(struct hoop_tp_req *req)
{
    struct hoop_ring_req *q = (struct hoop_ring_req *)((char *)req - offsetof(struct hoop_ring_req, tp));
    struct hoop_ring *r = req->ctx;
    const struct hoop_frame *want = &q->expect;
    const struct hoop_peer *p = &r->peers[want->sender];
    struct hoop_frame got;
    char gw[96], ww[96], gs[64], ws[64];
    int rc = hoop_frame_decode(q->hdr, &got);
    if (rc && req->done < req->hdr_len && frame_blank(q->hdr)) {
        /* A message longer than this receive, whose header the transport
         * could not deliver (transport.h): another call, or other counts. */
        hoop_frame_what(want, ww, sizeof(ww));
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "in %s, rank %u (%s) sent a longer message than this rank expected: the ranks "
                 "called different collectives, pass different counts, or differ in a setting "
                 "(HOOP_CHUNK_BYTES, HOOP_SMALL_BYTES)", ww, want->sender, p->host);
        r->frame_vague = 1;
        return -EBADMSG;
    }
    if (rc || got.sender != want->sender) {
        const uint8_t *h = q->hdr;
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "rank %u (%s) sent bytes that are not a hoop data frame where %s was due "
                 "(%s; first bytes %02x %02x %02x %02x %02x %02x %02x %02x): a stray writer on "
                 "the connection, memory corruption, or another program",
                 want->sender, p->host, want->step == HOOP_FRAME_ANNOUNCE ? "an announcement"
                                                                         : "a data chunk",
                 rc == -EPROTONOSUPPORT ? "another version of the frame format"
                 : rc                   ? "bad magic"
                                        : "the frame names another sender",
                 h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
        return -EPROTO;
    }
    if (got.coll != want->coll || got.seq != want->seq) {
        hoop_frame_what(&got, gw, sizeof(gw));
        hoop_frame_what(want, ww, sizeof(ww));
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "ranks called different collectives: rank %u (%s) is in %s, this rank in %s",
                 want->sender, p->host, gw, ww);
        return -EBADMSG;
    }
    if (got.count != want->count || got.dtype != want->dtype || got.op != want->op ||
        got.root != want->root) {
        /* The same call with other arguments: say which. */
        char theirs[96], mine[96];
        frame_args(&got, want, theirs, sizeof(theirs));
        frame_args(want, &got, mine, sizeof(mine));
        hoop_frame_what(&got, gw, sizeof(gw));
        hoop_frame_what(want, ww, sizeof(ww));
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "rank %u (%s) passed %s where this rank passed %s: it is in %s, this rank in %s",
                 want->sender, p->host, theirs, mine, gw, ww);
        return -EBADMSG;
    }
    if (got.chunk_bytes != want->chunk_bytes) {
        hoop_frame_what(want, ww, sizeof(ww));
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "in %s, rank %u (%s) cuts chunks of %u bytes and this rank of %u: "
                 "HOOP_CHUNK_BYTES (or the config's chunk_bytes) must be the same on every rank",
                 ww, want->sender, p->host, got.chunk_bytes, want->chunk_bytes);
        return -EBADMSG;
    }
    if ((got.blocks == HOOP_FRAME_HIER) != (want->blocks == HOOP_FRAME_HIER)) {
        hoop_frame_what(want, ww, sizeof(ww));
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "in %s, rank %u (%s) runs the %s allreduce and this rank the %s one: "
                 "HOOP_HIERARCHICAL must be the same on every rank", ww, want->sender, p->host,
                 got.blocks == HOOP_FRAME_HIER ? "hierarchical" : "flat",
                 got.blocks == HOOP_FRAME_HIER ? "flat" : "hierarchical");
        return -EBADMSG;
    }
    if (got.blocks != want->blocks) {
        hoop_frame_what(want, ww, sizeof(ww));
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "in %s, rank %u (%s) was given other block counts than this rank (do the ranks "
                 "pass the same counts?)", ww, want->sender, p->host);
        return -EBADMSG;
    }
    if (got.step != want->step || got.chunk != want->chunk || got.len != want->len) {
        frame_where(&got, gs, sizeof(gs));
        frame_where(want, ws, sizeof(ws));
        hoop_frame_what(want, ww, sizeof(ww));
        /* The same call, one rank on the ring and the other on the small
         * path: their thresholds differ. An announcement against a chunk
         * in the same allreduce says so too: with the same count the ring
         * sends chunks all round, and only the small path at N not a power
         * of two announces (which of the two comes first is a race). */
        int got_ann = got.step == HOOP_FRAME_ANNOUNCE, want_ann = want->step == HOOP_FRAME_ANNOUNCE;
        int other_path = (!got_ann && !want_ann &&
                          (got.step >= HOOP_FRAME_SMALL) != (want->step >= HOOP_FRAME_SMALL)) ||
                         (got_ann != want_ann && want->coll == HOOP_COLL_ALLREDUCE);
        /* A chunk of another length in the same place of an allreduce over
         * shared memory: the ranks may cut mid-size ones differently. */
        int other_cut = !other_path && want->coll == HOOP_COLL_ALLREDUCE && r->shm_ring &&
                        got.step == want->step && got.chunk == want->chunk;
        snprintf(r->frame_why, sizeof(r->frame_why),
                 "in %s, rank %u (%s) sent %s where this rank expected %s (%s%s)", ww, want->sender,
                 p->host, gs, ws,
                 other_path ? "one took the small-message path, the other the ring: "
                              "HOOP_SMALL_BYTES must be the same on every rank"
                            : "do the ranks pass the same counts?",
                 other_cut ? " HOOP_SHM_CHUNK_BYTES must be the same on every rank" : "");
        return -EBADMSG;
    }
    return 0;
}

int hoop_frame_expect_prev(struct hoop_ring *r, void *buf, size_t len, uint32_t step)
{
    r->ann_r.tp.buf = buf;
    r->ann_r.tp.len = len;
    hoop_frame_expect(r, &r->ann_r, r->prev, step, 0);
    if (!len) {
        /* A header alone may meet a chunk (ranks that disagree on a
         * root): over a transport of whole messages it lands in the
         * receive slots (only a call that fails puts anything there) and
         * the header check says what the predecessor does. */
        r->ann_r.tp.spill = r->scratch;
        r->ann_r.tp.spill_len = (size_t)r->depth * r->chunk_bytes;
    }
    int rc = r->ops->irecv(r->rx, &r->ann_r.tp);
    if (!rc)
        r->ann_posted |= 2;
    return rc;
}

int hoop_frame_announce(struct hoop_ring *r, int to_next, int from_prev)
{
    int rc;
    if (from_prev && (rc = hoop_frame_expect_prev(r, NULL, 0, HOOP_FRAME_ANNOUNCE)))
        return rc;
    if (to_next) {
        r->ann_s.tp.buf = NULL;
        r->ann_s.tp.len = 0;
        hoop_frame_send(r, &r->ann_s, HOOP_FRAME_ANNOUNCE, 0);
        if ((rc = r->ops->isend(r->tx, &r->ann_s.tp)))
            return rc;
        r->ann_posted |= 1;
    }
    return 0;
}

int hoop_frame_announced(const struct hoop_ring *r)
{
    int ss = r->ann_posted & 1 ? r->ann_s.tp.state : 0;
    int rs = r->ann_posted & 2 ? r->ann_r.tp.state : 0;
    if (rs < 0)
        return rs;
    if (ss < 0)
        return ss;
    return ss == HOOP_REQ_PENDING || rs == HOOP_REQ_PENDING ? 0 : 1;
}

int hoop_frame_announce_wait(struct hoop_ring *r, uint64_t *deadline_ns, double timeout_s)
{
    for (;;) {
        int a = hoop_frame_announced(r);
        if (a)
            return a < 0 ? a : 0;
        int rc = hoop_ring_progress(r, hoop_deadline_lazy(deadline_ns, timeout_s));
        if (rc < 0)
            return rc;
        if (rc == 0 && hoop_now_ns() >= *deadline_ns)
            return -ETIMEDOUT;
    }
}

hoop_status_t hoop_frame_status(const struct hoop_ring *r, int err, const char *what)
{
    /* Only a frame check says why in frame_why; a transport's -EPROTO (a
     * corrupt segment, a payload it could not read) is told by the
     * caller's sentence, with the transport's own words. */
    if ((err != -EBADMSG && err != -EPROTO) || !r->frame_why[0])
        return HOOP_OK;
    return hoop_error(err == -EBADMSG ? HOOP_ERR_MISMATCH : HOOP_ERR_PEER, "rank %d: %s: %s",
                      r->rank, what, r->frame_why);
}
