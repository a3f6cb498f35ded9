/* comm.h - the communicator object, shared by the files of collectives/. */
#ifndef HOOP_COLLECTIVES_COMM_H
#define HOOP_COLLECTIVES_COMM_H

#include "bootstrap/bootstrap.h"
#include "ring/ring.h"
#include "hoop.h"

#include <stdint.h>

struct hoop_comm {
    int rank;
    int size;
    int local_rank;
    int local_size;
    int cross_rank;  /* among the ranks of this local rank, in rank order */
    int cross_size;  /* the hosts that have this local rank */
    int homogeneous; /* every host has local_size ranks */
    double timeout_s;
    size_t small_bytes; /* allreduce at or below this uses recursive doubling */
    int hier_mode;      /* HOOP_HIERARCHICAL: 0, 1 or HOOP_PARAM_AUTO */
    int stage_chunks;   /* HOOP_GPU_STAGING_CHUNKS; 0: the ring's default */
    size_t shm_chunk;   /* HOOP_SHM_CHUNK_BYTES; 0: off */
    int hier;           /* ring allreduces run hierarchical (ring/hier.c) */
    size_t hier_small;  /* hier: small ones of at least this many bytes do too */
    struct hoop_bootstrap bs;
    struct hoop_ring ring;
    /* After a failed collective the ranks' streams are out of step: every
     * later call fails with the first error. */
    hoop_status_t broken;
    char broken_why[2048];
    /* hoop_comm_abort: 0, 1 while the reason is written, 2 once it is. */
    _Atomic int aborted;
    char abort_why[256];
    int abort_fd; /* eventfd the transport watches; -1 for one rank */
    int ctl_epfd; /* the connections to the root, watched by every wait (fail.c) */
    /* What they said to a collective's wait, for hoop_comm_fail: on the
     * root, per rank; elsewhere, the root's connection. */
    int *ctl_heard;
    struct hoop_notice *ctl_got;
    int ctl_root;
    struct hoop_notice ctl_verdict;
    /* The earliest collective that a notice kept for later is about: one
     * heard while this rank still ran an earlier call (0: none). */
    uint64_t ctl_later;
    int *ctl_pidfd; /* per rank of this host, its process (-1: not watched) */
    const char *abort_before; /* the call an abort stopped before it began */
    double fail_grace_s;
    char transport[512];
    const char *launcher;
    double boot_timeout_s; /* the bootstrap's deadline, which a split's groups keep */
    uint64_t splits;       /* hoop_comm_split calls so far */
    struct hoop_mem_set *mem; /* hoop_mem_alloc's allocations (mem.h); NULL: none yet */
};

/* hoop_comm_init's work once the bootstrap's settings are resolved (and
 * hoop_comm_split's, with settings it makes). */
hoop_status_t hoop_comm_create(hoop_comm_t **out, const hoop_config_t *cfg,
                               const struct hoop_boot_cfg *bcfg);

/* Checks shared by every collective; each returns HOOP_OK or
 * HOOP_ERR_INVALID (or the broken state) with a sentence naming `name`. */
hoop_status_t hoop_coll_begin(hoop_comm_t *comm, const char *name);
/* op is checked only when has_op. */
hoop_status_t hoop_coll_check_type(const hoop_comm_t *comm, const char *name, int dtype, int has_op,
                                   int op);
/* count * factor elements of dtype must fit in memory. */
hoop_status_t hoop_coll_check_count(const hoop_comm_t *comm, const char *name, size_t count,
                                    size_t factor, int dtype);
/* Both buffers (NULL: none) on the host, or both on one GPU: *device is
 * that GPU, or -1 for host memory. */
hoop_status_t hoop_coll_check_kinds(const hoop_comm_t *comm, const char *name, const void *send,
                                    const void *recv, int *device);
/* Non-NULL when non-empty, the memory kinds as hoop_coll_check_kinds
 * wants, and no overlap unless the caller found the collective's in-place
 * layout. Device buffers begin the call on the ring's GPU pipe
 * (hoop_ring_device_begin), which hoop_coll_end ends: from here on every
 * return goes through hoop_coll_end. */
hoop_status_t hoop_coll_check_bufs(hoop_comm_t *comm, const char *name, const void *send,
                                   size_t send_bytes, const void *recv, size_t recv_bytes,
                                   int in_place);
hoop_status_t hoop_coll_check_root(const hoop_comm_t *comm, const char *name, int root);
/* Copy bytes from src to dst: memcpy, or on the GPU for a call on device
 * buffers (waiting for it). */
hoop_status_t hoop_coll_copy(hoop_comm_t *comm, const char *name, void *dst, const void *src,
                             size_t bytes);
/* After the ring: a failure other than a bad argument breaks the
 * communicator (the ranks' streams are out of step). Returns st. */
hoop_status_t hoop_coll_end(hoop_comm_t *comm, hoop_status_t st);

/* fail.c: after a failed collective, tell the root and hear its verdict
 * (the root gathers the others' reports and names the culprit); returns the
 * status to give the caller, with its sentence set. */
hoop_status_t hoop_comm_fail(hoop_comm_t *comm, hoop_status_t st);
/* fail.c: hoop_comm_init failed on this rank after the rendezvous: tell the
 * root (the others, on the root) why, so that the first collective of the
 * ranks whose init went through names this rank and its reason instead of
 * a rank that left without a word. The root, whose failure only says that
 * a peer went, first gathers the others' reports and names the cause.
 * Returns the status to give the caller, with its sentence set. */
hoop_status_t hoop_comm_fail_init(hoop_comm_t *comm, hoop_status_t st);
/* Set up the communicator's control: the abort eventfd and the watches. */
hoop_status_t hoop_comm_control_init(hoop_comm_t *comm);
void hoop_comm_control_fini(hoop_comm_t *comm);
/* Say goodbye to the root (to everyone, on the root): this rank leaves in
 * order. */
void hoop_comm_leave(hoop_comm_t *comm);

#endif
