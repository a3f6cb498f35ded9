/* mem.h - memory that every rank of one host maps (hoop_mem_alloc, mem.c),
 * and the allreduce that reads and writes it in place (mapped.c).
 *
 * Each allocation is a sealed memfd of its own: a control page, then the
 * caller's bytes. Every rank makes one in the same collective call, and
 * hands it to every other rank of the host over a Unix socket in the
 * abstract namespace (SCM_RIGHTS; the kernel's word on the sender's pid,
 * and a MAC keyed by the job token), so that each rank maps every other
 * rank's. Where that cannot be done on every rank (ranks on several
 * hosts, in different network namespaces, no memfd), the memory is this
 * rank's alone, as any, and collectives on it go through the transport.
 *
 * The control page of the oldest allocation still shared is where each
 * rank says, for each allreduce, where its buffers lie and how far it has
 * got; only its owner writes it. */
#ifndef HOOP_COLLECTIVES_MEM_H
#define HOOP_COLLECTIVES_MEM_H

#include "hoop.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define HOOP_MEM_CTL_BYTES 4096

/* What a rank announces for a mapped allreduce. Its owner writes the
 * fields, then stores seq into ready (release); a reader loads ready
 * (acquire) and reads the fields only when it is the call's seq, and
 * trusts none of them (each is checked against what it knows). */
struct hoop_mem_ctl {
    _Atomic uint64_t ready;
    uint64_t count;
    uint64_t send_id, send_off; /* the allocation and offset of its sendbuf */
    uint64_t recv_id, recv_off;
    uint32_t dtype, op;
    uint32_t mapped; /* 1: both buffers lie in shared allocations */
    uint8_t pad0[64 - 5 * 8 - 3 * 4 - 8];
    _Atomic uint64_t done; /* seq once its part of the call is written */
    uint8_t pad1[56];
};
_Static_assert(sizeof(struct hoop_mem_ctl) == 128, "two cache lines");

struct hoop_mem_region {
    struct hoop_mem_region *next; /* younger ones follow */
    uint64_t id;                  /* the allocation's number, the same on every rank */
    uint8_t *base;                /* this rank's mapping: control page, then the bytes */
    size_t bytes;                 /* the caller's */
    size_t map_bytes;
    int shared;         /* every rank maps every other's */
    uint8_t **peer;     /* shared: per rank, its mapping here (this rank: base) */
    size_t *peer_bytes; /* shared: per rank, its caller's bytes */
    size_t *peer_map;   /* shared: per rank, the mapping's length */
};

struct hoop_mem_set {
    struct hoop_mem_region *regions; /* oldest first */
    uint64_t next_id;
    uint64_t seq;    /* mapped allreduces tried so far, the same on every rank */
    uint64_t mapped; /* of them, those that ran in place (for the tests) */
    uint8_t **bufs;  /* 2 x size: a call's inputs, then its outputs, in this rank's mappings */
};

/* The oldest shared allocation (whose control pages the calls use), or NULL. */
struct hoop_mem_region *hoop_mem_ctl_region(const hoop_comm_t *comm);
/* The shared allocation that holds [p, p + n) on this rank, and p's offset
 * in its caller's bytes; NULL when none does. */
struct hoop_mem_region *hoop_mem_find(const hoop_comm_t *comm, const void *p, size_t n,
                                      uint64_t *off);
/* Unmap everything (hoop_comm_destroy). */
void hoop_mem_fini(hoop_comm_t *comm);

/* The allreduce in place in the ranks' shared allocations: 1 when it ran
 * (its status in *st, to be ended by hoop_coll_end), 0 when some rank's
 * buffers do not lie in shared allocations (every rank finds the same,
 * from the same announcements, and runs the ring instead). Only where
 * every rank is on this host and the comm has a shared allocation. */
int hoop_mem_allreduce(hoop_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                       hoop_dtype_t dtype, hoop_op_t op, hoop_status_t *st);

#endif
