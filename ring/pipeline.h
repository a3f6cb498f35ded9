/* pipeline.h - the chunked pipeline every ring collective runs on.
 *
 * A collective is a table of steps. At step t a rank sends one span to next
 * and receives one span from prev; each span is cut into chunks of the
 * ring's chunk size, up to `depth` chunks travel in each direction, and a
 * received chunk is either left where it landed (DIRECT) or landed in a
 * scratch slot and reduced with the rank's own input into its destination
 * (REDUCE). When a step's send forwards what the step before received
 * (send_dep), chunk c leaves as soon as chunk c of the step before is in.
 * Reduced data always goes to a buffer (the output or the ring's work
 * buffer), never back out of a slot: a slot is free again as soon as its
 * reduction is done, so no rank's receiving ever waits on its own sending,
 * and the ring cannot deadlock on its slots. */
#ifndef HOOP_RING_PIPELINE_H
#define HOOP_RING_PIPELINE_H

#include "ring/ring.h"

enum hoop_buf_id { HOOP_BUF_NONE = 0, HOOP_BUF_INPUT, HOOP_BUF_OUTPUT, HOOP_BUF_WORK };
enum hoop_recv_mode { HOOP_RECV_NONE = 0, HOOP_RECV_DIRECT, HOOP_RECV_REDUCE };

struct hoop_step {
    int send_buf;      /* enum hoop_buf_id; NONE = nothing to send */
    size_t send_off;   /* element offsets and lengths */
    size_t send_len;
    int send_dep;      /* chunk c waits for chunk c of the step before */
    int recv_mode;     /* enum hoop_recv_mode */
    int recv_buf;      /* where the data (or its reduction) ends up */
    size_t recv_off;
    size_t recv_len;
    size_t local_off;  /* REDUCE: offset of this rank's own input */
    int avg_n;         /* REDUCE: divide by this after the last sum of an average */
    int send_ord;      /* filled by hoop_ring_run: which send (and receive) of the */
    int recv_ord;      /* collective this is, the step number both ends agree on */
    unsigned long long send_first; /* filled by hoop_ring_run: the number of the */
    unsigned long long recv_first; /* step's first send (receive) chunk in the call */
    int recv_fwd;      /* filled by hoop_ring_run: the next step sends what this one
                        * receives, chunk for chunk */
    const char *phase; /* for sentences: "reduce-scatter", "allgather", ... */
    int phase_step;    /* 1-based */
    int phase_steps;
};

struct hoop_pipe {
    int coll;         /* enum hoop_coll_kind, for the frames */
    int root;         /* for the frames; -1 for none */
    int keep_frame;   /* part of the collective already begun: its frames, its number */
    const char *what; /* keep_frame: what this part does, for sentences; or NULL */
    const void *input;
    void *output;
    size_t count;     /* for the frames */
    hoop_dtype_t dtype;
    int op;           /* hoop_op_t, or -1 for none */
    uint64_t blocks;  /* allgatherv: hoop_frame_blocks() of the block counts; 0 */
    /* input and output are device memory on the ring's GPU pipe (device.c):
     * the transport moves the data through a fixed number of pinned host
     * chunks (the ring's stage_chunks), whatever the size of the call,
     * and partial sums live in device memory. A send of the caller's data
     * (a step without send_dep) leaves once an asynchronous copy of its
     * chunk to a host chunk is done; a received chunk is reduced by a
     * kernel that reads the pinned slot and writes the device result and,
     * where the next step sends it on, a host chunk for that send in the
     * same pass; a chunk received as it is lands in a host chunk, goes on
     * from there, and a copy places it on the device. Where no host chunk
     * is free for a copy to be sent on, the send copies its chunk from the
     * device again when its turn comes. Events after each, polled by the
     * loop, say when a chunk is done. Chunks smaller than the ring's
     * (chunk_bytes below) go in groups that fill one of the ring's: one
     * copy or kernel per group (run.h). */
    int device;
    /* A chain (chain.c): only its end hears, through the chunks, from
     * every rank, so only it knows that every rank made the same call.
     * Once its first chunk has matched it sends a confirmation to next,
     * which passes it on once its own chunks are sent, around the ring to
     * the rank before the end; no rank returns before it has it, so none
     * returns HOOP_OK while another fails the call. */
    int confirm_from_prev; /* wait for the confirmation from prev */
    int confirm_to_next;   /* send it to next (the end: first) */
    int nsteps;
    struct hoop_step *steps; /* the ring's table, filled by the caller */
    /* The bytes of a chunk for this run, at most the ring's chunk_bytes
     * (its slots' size); 0: chunk_bytes. Every rank must choose the same
     * from what all of them know (the count, the ring). */
    size_t chunk_bytes;
};

/* a mod n in 0..n-1 for any a: schedules name segments as rank - step. */
static inline int hoop_ring_mod(int a, int n)
{
    return ((a % n) + n) % n;
}

/* The ring allreduce's segments: count elements cut into n, segment k at
 * element offset hoop_ring_seg_off (sizes differ by at most one). */
static inline size_t hoop_ring_seg_off(size_t count, int n, int k)
{
    size_t base = count / (size_t)n, extra = count % (size_t)n;
    return (size_t)k * base + ((size_t)k < extra ? (size_t)k : extra);
}

static inline size_t hoop_ring_seg_len(size_t count, int n, int k)
{
    return count / (size_t)n + ((size_t)k < count % (size_t)n ? 1 : 0);
}

/* The ring allreduce's 2(n-1) steps (allreduce.c) for the rank at place me
 * of a ring of n: the reduce-scatter's n-1, then the allgather's n-1. The
 * last reduction divides by avg_n (0: none). */
void hoop_ring_allreduce_steps(struct hoop_step *st, int n, int me, size_t count, int avg_n);

/* Run the steps. On failure the transport is cancelled (no buffer is
 * touched afterwards) and the sentence names the step and the peer. */
hoop_status_t hoop_ring_run(struct hoop_ring *r, const struct hoop_pipe *p, double timeout_s);

#endif
