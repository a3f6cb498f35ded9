/* ring.h - a ring of ranks: each sends to next = rank+1 and receives from
 * prev = rank-1 through the transport, and the schedules that run on it. */
#ifndef HOOP_RING_H
#define HOOP_RING_H

#include "bootstrap/bootstrap.h"
#include "ring/frame.h"
#include "transport/transport.h"
#include "hoop.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HOOP_RING_DEPTH_MAX 64
/* The most pinned host chunks the pipeline stages device buffers through
 * (HOOP_GPU_STAGING_CHUNKS). */
#define HOOP_RING_STAGE_MAX (4 * HOOP_RING_DEPTH_MAX)

struct hoop_step;
struct hoop_gpu_pipe;

struct hoop_ring {
    const struct hoop_transport_ops *ops;
    void *tp;
    void *tx; /* connection to next */
    void *rx; /* connection from prev */
    int rank;
    int size;
    /* The ring's order: host by host (hoop_ring_connect), so that each
     * host's ranks are neighbours and the network is crossed once into
     * and once out of each host. pos is this rank's place, at[p] the rank
     * at place p, where[k] rank k's place; next and prev are ranks. */
    int pos;
    int *at;
    int *where;
    int next;
    int prev;
    /* The hosts' shape on the ring (hier.c): hier_hosts hosts of
     * hier_local ranks each, this rank the hier_li-th of host hier_host in
     * ring order; hier_local 0 where the hosts' rank counts differ. */
    int hier_hosts;
    int hier_local;
    int hier_host;
    int hier_li;
    char next_desc[HOOP_HOSTNAME_MAX + 32]; /* "rank 3 (host)" for sentences */
    char prev_desc[HOOP_HOSTNAME_MAX + 32];
    size_t chunk_bytes;
    int depth;
    int shm_ring; /* every ring link is shared memory (the same on every rank) */
    size_t shm_chunk; /* HOOP_SHM_CHUNK_BYTES: mid-size allreduces' chunk on such a ring; 0: off */
    uint8_t *scratch; /* depth receive slots of chunk_bytes, reused by every call */
    size_t scratch_bytes; /* its mapping's length */
    struct hoop_ring_req *sreq;
    struct hoop_ring_req *rreq;
    struct hoop_step *steps; /* 2 * size entries: the table of the collective running */
    size_t *counts;          /* size entries each, for allgather's spans */
    size_t *displs;
    const struct hoop_peer *peers; /* the bootstrap's table (owned by the communicator) */
    uint64_t comm_id;
    void **peer_tx;          /* size entries: direct connections, made on first use */
    void **peer_rx;
    struct hoop_ring_req *p2p_sreq; /* size entries each */
    struct hoop_ring_req *p2p_rreq;
    int *p2p_list;           /* size entries: scratch for hoop_ring_peers' lists */
    unsigned p2p_made;       /* the sets of direct connections made (HOOP_PEERS_*) */
    uint8_t *work;           /* partial reductions of reduce_scatter and reduce */
    size_t work_bytes;
    uint64_t seq; /* collectives run so far */
    /* The seq of the collective running (0 between calls) and its kind, set
     * by hoop_frame_begin and cleared by hoop_ring_call_end; read by another
     * thread (a rank's exit handler, collectives/fail.c). */
    _Atomic uint64_t running_seq;
    _Atomic int running_coll;
    struct hoop_frame cur;   /* what the running collective's frames say */
    struct hoop_ring_req ann_s, ann_r; /* its announcements (frame.h) */
    int ann_posted;          /* bit 0: ann_s, bit 1: ann_r */
    struct hoop_ring_req cfm_s, cfm_r; /* a chain's confirmation (pipeline.h) */
    char frame_why[640];     /* what the last failed frame check found */
    int frame_vague;         /* 1: only that a message was longer (its header lost) */
    /* Device buffers (device.c): the GPU pipe, made by the first call on
     * them, and whether the running call's buffers are on it. */
    struct hoop_gpu_pipe *gpu;
    int on_gpu;
    int stage_chunks;      /* pinned host chunks device buffers go through (pipeline_device.c) */
    uint64_t gpu_restaged; /* chunks the pipeline copied from the GPU again: their host
                            * copy was given up, or never made, for want of a slot */
    uint64_t gpu_ops;      /* copies and kernels the pipeline queued on the GPU */
    int gdr_send; /* GPUDirect RDMA chosen (gdr.h): sends leave from device memory */
    int gdr_nic;  /* ... which the transport registers (not under the emulation) */
    /* small.c's plans, flat [0] and hierarchical [1], made on first use. */
    struct hoop_small_plan *small_plan[2];
    int fail_err;            /* the last failure's -errno, and the rank it implicates */
    int fail_peer;
    /* Called when a watched descriptor wakes a wait: 0 when what woke it
     * needs nothing of the wait (it goes on), > 0 when requests may have
     * ended (the wait returns, as after completions), -errno to end it. */
    int (*on_wake)(void *ctx);
    void *wake_ctx;
};

/* Choose the transport HOOP_TRANSPORT names (auto: by what this machine
 * has), for hoop_ring_open; HOOP_ERR_INVALID when it names none. */
hoop_status_t hoop_ring_choose(struct hoop_ring *r, int rank);
/* Create the transport hoop_ring_choose chose and the reusable buffers
 * (before the bootstrap). */
hoop_status_t hoop_ring_open(struct hoop_ring *r, int rank, int size, const uint8_t *token,
                             size_t chunk_bytes, int depth);
/* The transport in words, as it describes itself ("none (one rank)" when
 * the ring was not opened). */
const char *hoop_ring_describe(const struct hoop_ring *r);
/* How long waits spin before they sleep, and whether they yield the CPU
 * between looks (see the transport's set_busy_poll). */
void hoop_ring_set_busy_poll(struct hoop_ring *r, uint64_t spin_ns, int shared);
/* A hoop_boot_handle_fn: listen and publish the handle (ctx = the ring). */
hoop_status_t hoop_ring_listen(void *ring, const struct sockaddr *local, socklen_t len,
                               uint8_t *handle, uint16_t *handle_len);
/* Rank q's transport handle, inside its entry in the table. */
void hoop_ring_peer_handle(const struct hoop_ring *r, int q, const uint8_t **h, uint16_t *len);
/* Connect to next and accept prev, after the bootstrap; HOOP_ERR_MISMATCH
 * when the ranks chose different transports. */
hoop_status_t hoop_ring_connect(struct hoop_ring *r, const struct hoop_peer *peers,
                                uint64_t comm_id, uint64_t deadline_ns);
void hoop_ring_close(struct hoop_ring *r);

/* End every transfer in progress and shut the connections, so that the
 * neighbours see this rank leave at once; the ring must not be used again. */
void hoop_ring_cancel(struct hoop_ring *r);

/* The sets of direct connections a collective needs (hoop_ring_peers). */
enum { HOOP_PEERS_SMALL = 1, HOOP_PEERS_ALL = 2, HOOP_PEERS_HIER = 4, HOOP_PEERS_HSMALL = 8 };

/* Make sure the direct connections (both directions) with each of
 * peers[0..npeers), this rank's part of `set`, exist. Collective: every
 * rank calls it with the same set, and each of those peers lists this
 * rank. Whether a set is made yet is the same on every rank (the calls so
 * far), unlike which connections this rank holds: only that decides
 * whether the ranks agree and connect, so that all do it or none. */
hoop_status_t hoop_ring_peers(struct hoop_ring *r, unsigned set, const int *peers, int npeers,
                              uint64_t deadline_ns);

/* Make the work buffer at least `bytes` long. It only grows, and is kept
 * (and its pages touched once) so that later calls fault nothing in. */
hoop_status_t hoop_ring_reserve_work(struct hoop_ring *r, size_t bytes);

/* Rank k's process has ended (see the transport's peer_ended). */
void hoop_ring_peer_ended(struct hoop_ring *r, int k);

/* Watch fd in every wait of the ring (see the transport's watch). */
hoop_status_t hoop_ring_watch(struct hoop_ring *r, int fd);

/* The transport's progress, for every wait of the ring's schedules: a wake
 * by a watched descriptor goes to on_wake, and the wait goes on when that
 * says so. Returns what progress returns. */
int hoop_ring_progress(struct hoop_ring *r, uint64_t deadline_ns);
/* The collective that ran on r has ended (collectives/check.c). */
void hoop_ring_call_end(struct hoop_ring *r);
/* What a request's -errno says, and the transport's own word on it when it
 * has one (transport.h: last_error); valid until the next call. */
const char *hoop_ring_errno_str(struct hoop_ring *r, int err);

/* Device buffers (device.c). A collective on buffers of GPU `device`
 * begins with hoop_ring_device_begin (the pipe is made on the first call;
 * the calling thread's current device is the pipe's until the end) and
 * ends with hoop_ring_device_end. The pipelined schedules then run over
 * the pipe (pipeline.c); the others stage the whole buffer through the
 * pipe's pinned host buffers with the calls below, each of which waits
 * for its copy. `what` names the collective for sentences. */
hoop_status_t hoop_ring_device_begin(struct hoop_ring *r, int device, const char *what);
void hoop_ring_device_end(struct hoop_ring *r);
/* *host: pinned buffer `which` (gpu.h: enum hoop_gpu_host) of at least
 * bytes, holding a copy of src's bytes when src is not NULL. */
hoop_status_t hoop_ring_stage_in(struct hoop_ring *r, int which, const void *src, size_t bytes,
                                 void **host, const char *what);
/* Copy bytes from src to dst (device or pinned, either way) and wait. */
hoop_status_t hoop_ring_device_copy(struct hoop_ring *r, void *dst, const void *src, size_t bytes,
                                    const char *what);

/* The ring collectives. Each needs size >= 2; counts may be 0. On failure
 * the transport is cancelled: the ring must not be used again. */
hoop_status_t hoop_ring_allreduce(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                  size_t count, hoop_dtype_t dtype, hoop_op_t op,
                                  double timeout_s);
/* Before a collective off the ring makes its first connections: a ring
 * allreduce of one byte per rank whose frames carry the collective begun,
 * so that every rank learns that the ranks agree, or fails, before any
 * waits for a connection. */
hoop_status_t hoop_ring_agree(struct hoop_ring *r, const char *what, double timeout_s);
/* The same with data: the u64 sum of every rank's vals (count entries,
 * in place; count >= size so that every hop compares frames). */
hoop_status_t hoop_ring_agree_sum(struct hoop_ring *r, const char *what, uint64_t *vals,
                                  size_t count, double timeout_s);
/* One byte around the ring and back, as its own collective in the frames. */
hoop_status_t hoop_ring_barrier(struct hoop_ring *r, double timeout_s);
/* Block k of sendbuf (counts[k] elements at element offset displs[k]; the
 * blocks one after the other) is reduced into rank k's recvbuf. The frames
 * say frame_count and blocks (hoop_frame_blocks of counts, or 0 where the
 * count says it all). */
hoop_status_t hoop_ring_reduce_scatterv(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                        const size_t *counts, const size_t *displs,
                                        size_t frame_count, uint64_t blocks, hoop_dtype_t dtype,
                                        hoop_op_t op, double timeout_s);
/* recvbuf already holds this rank's block (the caller copies it). */
hoop_status_t hoop_ring_allgatherv(struct hoop_ring *r, void *recvbuf, const size_t *counts,
                                   const size_t *displs, hoop_dtype_t dtype, double timeout_s);
/* recvbuf on root already holds the data. */
hoop_status_t hoop_ring_broadcast(struct hoop_ring *r, void *buf, size_t count,
                                  hoop_dtype_t dtype, int root, double timeout_s);
hoop_status_t hoop_ring_reduce(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                               size_t count, hoop_dtype_t dtype, hoop_op_t op, int root,
                               double timeout_s);
/* A call of count 0 on this rank (allgather: every block 0): no data, but
 * matched with the others' call like any other (empty.c). op and root are
 * -1 where the collective has none; blocks as for allgatherv, else 0. */
hoop_status_t hoop_ring_empty(struct hoop_ring *r, int coll, hoop_dtype_t dtype, int op, int root,
                              uint64_t blocks, double timeout_s);
/* Over direct connections, not the ring. */
hoop_status_t hoop_ring_alltoall(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                 size_t count, hoop_dtype_t dtype, double timeout_s);
/* Per peer counts and element offsets (size entries each). The ranks first
 * agree, in one small ring allreduce, that what each sends each is what
 * that one expects; when not, every rank returns HOOP_ERR_MISMATCH naming
 * the first such pair, with *agreed set: nothing has moved and the ring is
 * still in step. Any other failure leaves *agreed 0. */
hoop_status_t hoop_ring_alltoallv(struct hoop_ring *r, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  hoop_dtype_t dtype, double timeout_s, int *agreed);
/* The hierarchical allreduce (hier.c): a reduce-scatter among the ranks of
 * each host, an allreduce of each such segment across the hosts among the
 * ranks with its local index (one ring per local index, all at once), an
 * allgather in each host. Every link inside a host is then shared memory
 * where the host allows, and each host's network carries 2(H-1)/H of the
 * buffer instead of the flat ring's 2(N-1)/N. Needs hoop_ring_hier_can;
 * count >= size. */
hoop_status_t hoop_ring_allreduce_hier(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                       size_t count, hoop_dtype_t dtype, hoop_op_t op,
                                       double timeout_s);
/* Work out the hosts' shape from the ring's order (hoop_ring_connect). */
void hoop_ring_hier_shape(struct hoop_ring *r);
/* 1 when the shape allows the hierarchical allreduce (at least two hosts,
 * each with the same number of ranks, at least two); else 0 and why says
 * why not. */
int hoop_ring_hier_can(const struct hoop_ring *r, char *why, size_t n);
/* Recursive doubling for small messages; count * dtype size must fit in
 * one ring chunk (the scratch it uses). hier (where hoop_ring_hier_can):
 * each host's ranks hand their input to its first rank, the first ranks
 * run recursive doubling, and each hands the result back, so that one
 * message per host crosses the network in each round. */
hoop_status_t hoop_ring_allreduce_small(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                        size_t count, hoop_dtype_t dtype, hoop_op_t op, int hier,
                                        double timeout_s);
/* Free the plans the small-message path kept (hoop_ring_close). */
void hoop_ring_small_free(struct hoop_ring *r);

#endif
