/* frame.h - the header on every data message of the ring's collectives:
 * stamped by the sender with what it is doing (collective, sequence
 * number, count, dtype, op, root, step, chunk, length), checked by the
 * receiver against what it is doing itself as soon as the header is in.
 * Ranks that called different things fail with HOOP_ERR_MISMATCH and both
 * sides' values; bytes that are not a frame fail with HOOP_ERR_PEER.
 *
 * Every collective also makes sure each rank hears from its ring
 * predecessor once: a rank whose schedule sends nothing to its successor
 * sends it an announcement (a header with no payload) instead, so that
 * collectives off the ring (alltoall, the small-message allreduce) and the
 * ends of the chains are compared too. */
#ifndef HOOP_RING_FRAME_H
#define HOOP_RING_FRAME_H

#include "common/wire.h"
#include "transport/transport.h"
#include "hoop.h"

#include <stddef.h>
#include <stdint.h>

enum hoop_coll_kind {
    HOOP_COLL_ALLREDUCE = 1,
    HOOP_COLL_REDUCE_SCATTER,
    HOOP_COLL_ALLGATHER,
    HOOP_COLL_BROADCAST,
    HOOP_COLL_REDUCE,
    HOOP_COLL_ALLTOALL,
    HOOP_COLL_BARRIER,
    HOOP_COLL_ALLTOALLV, /* its frames' count is 0: the counts differ per pair */
};

/* The step of an announcement. */
#define HOOP_FRAME_ANNOUNCE 0xfffffffeu
/* The step of a chain's confirmation (pipeline.h): the end of the chain
 * has heard from every rank, and every rank made the same call. */
#define HOOP_FRAME_CONFIRM 0xfffffffdu
/* The steps of the small-message path: this plus its round, so that no
 * frame of it reads as a step of the ring. */
#define HOOP_FRAME_SMALL 0x80000000u

/* The blocks of a hierarchical allreduce's frames (ring.h), so that a rank
 * on the flat ring and one on the hierarchical path are told apart at
 * their first frame, whatever their lengths. */
#define HOOP_FRAME_HIER 0x6869657261726368ull

/* A reducing receive whose transport hands its payload over in place
 * (hoop_tp_req.take): where each piece is folded (pipeline.c). */
struct hoop_ring_fold {
    char *dst;         /* the chunk's destination */
    const char *local; /* this rank's own input for it */
    hoop_dtype_t dtype;
    int op;
    int avg_n;
    size_t done; /* payload bytes folded so far */
};

/* A transport request with room for its frame. */
struct hoop_ring_req {
    struct hoop_tp_req tp;
    struct hoop_frame expect; /* receives: what the header must say */
    uint8_t hdr[HOOP_FRAME_BYTES];
    struct hoop_ring_fold fold;
};

struct hoop_ring;

/* Start a collective: the next sequence number and what every frame of it
 * says. op and root are -1 where the collective has none. Returns the
 * sequence number. */
uint64_t hoop_frame_begin(struct hoop_ring *r, int coll, size_t count, hoop_dtype_t dtype, int op,
                          int root);

/* A digest of every rank's block count (allgatherv), for the frames: the
 * first frame then tells ranks given other counts apart. Never 0. */
uint64_t hoop_frame_blocks(const size_t *counts, int n);

/* Put the frame on a request whose buf and len are set: to send, or to
 * expect from rank `from`. An expected frame is checked before the
 * transport waits for its payload (check_first); a caller may clear that
 * on a request once an earlier frame of the collective from the same rank
 * has matched, since that settles every later length. */
void hoop_frame_send(struct hoop_ring *r, struct hoop_ring_req *q, uint32_t step, uint32_t chunk);
void hoop_frame_expect(struct hoop_ring *r, struct hoop_ring_req *q, int from, uint32_t step,
                       uint32_t chunk);

/* Post the announcements on the ring's connections (send to next, expect
 * from prev, either or both); 0 or -errno. hoop_frame_announced() is 1
 * once both are done, 0 while pending, or a request's -errno. */
int hoop_frame_announce(struct hoop_ring *r, int to_next, int from_prev);
/* In place of the announcement from prev, for a collective off the ring
 * whose schedule has a message from prev anyway: post its receive (step,
 * len bytes into buf) on the ring's connection at the start, so that a
 * predecessor in another collective is seen at once, whatever this rank
 * waits for meanwhile. hoop_frame_announced() covers it. 0 or -errno. */
int hoop_frame_expect_prev(struct hoop_ring *r, void *buf, size_t len, uint32_t step);
int hoop_frame_announced(const struct hoop_ring *r);
/* Progress until the announcements are done: 0, -ETIMEDOUT or -errno.
 * The deadline is *deadline_ns, or timeout_s from the first wait where it
 * is 0 (hoop_deadline_lazy). */
int hoop_frame_announce_wait(struct hoop_ring *r, uint64_t *deadline_ns, double timeout_s);

/* A failed request's -errno that came from a frame check (-EBADMSG: the
 * ranks called different things; -EPROTO: not a frame): the status and the
 * sentence "rank R: <what>: <why>", where why was kept by the check.
 * HOOP_OK for any other error. */
hoop_status_t hoop_frame_status(const struct hoop_ring *r, int err, const char *what);

/* "allreduce #5 (1000 x f32 sum, root 2)" */
void hoop_frame_what(const struct hoop_frame *f, char *out, size_t n);

/* "allreduce", ... */
const char *hoop_coll_str(int coll);

#endif
