/* conn.h - the shared-memory transport's objects, shared by its set-up
 * (shm.c) and its data path (data.c). */
#ifndef HOOP_TRANSPORT_SHM_CONN_H
#define HOOP_TRANSPORT_SHM_CONN_H

#include "common/wire.h"
#include "transport/shm/shm.h"
#include "transport/shm/slot.h"
#include "transport/watch.h"

#include <stdint.h>

enum { SHM_TX = 0, SHM_RX = 1 };

/* With HOOP_SHM_SINGLE_COPY=1 on both ends, payloads of at least this many
 * bytes stay in the sender's memory and are read with one copy
 * (process_vm_readv) where the kernel lets the receiver read it; smaller
 * ones, and all without it, go through the slots. */
#define SHM_REMOTE_MIN (128u << 10)
_Static_assert(SHM_COMPACT_MAX < SHM_REMOTE_MIN, "no payload read in place fits a compact slot");

/* Epoll tags, in the low bits of a connection's address. */
#define SHM_TAG_EFD 1u
#define SHM_TAG_SOCK 2u

struct shm_conn {
    struct shm_tp *tp;
    struct shm_conn *next_conn;
    int peer;
    int channel;
    int dir;            /* SHM_TX: this rank produces; SHM_RX: it consumes */
    int sock;           /* the Unix socket, kept open to see the peer go */
    int efd_self;       /* rung by the peer to wake this side */
    int efd_peer;       /* rung by this side to wake the peer */
    uint8_t *seg;
    size_t seg_bytes;
    struct shm_ctl *ctl;
    uint32_t nslots;    /* the geometry the handshake settled */
    uint32_t slot_bytes;
    uint64_t pos;       /* this side's position: head (TX) or tail (RX) */
    uint64_t tail_seen; /* TX: the consumer's tail when last read from the segment */
    uint64_t msg;       /* the number of the message at the queue's head */
    uint64_t msg_len;   /* RX: the length the head message's first slot gave */
    struct hoop_tp_req *head, *tail; /* queued, oldest first; TX: req->lent is the
                                      * position the consumer must pass before a
                                      * payload read in place is the caller's again */
    int err;            /* first failure; later requests end with it */
    int ended;          /* the peer's process or its end of the socket is gone */
    int armed;          /* this side said, in the segment, that it sleeps */
    struct hoop_tp_req *pub; /* TX: the first request not wholly in the ring yet */
    int cma_pid;        /* RX: the producer's pid, for process_vm_readv (0: no single copy) */
    /* The last request header sent (TX) or received (RX) on this
     * connection: what a compact slot's header is written against. */
    uint8_t base[8 * SHM_BASE_WORDS];
} __attribute__((aligned(8)));

/* A connection accepted for another accept (rank, channel) than the one
 * that took it. */
struct shm_stashed {
    struct shm_stashed *next;
    struct shm_conn *c;
};

struct shm_tp {
    int rank;
    int size;
    uint8_t token[HOOP_TOKEN_BYTES];
    int lfd;
    uint64_t nonce;
    uint32_t *pids;     /* size entries: what each rank's handle said (0: unknown) */
    int epfd;           /* the eventfds, the sockets, the watched descriptors */
    struct hoop_watch watch;
    struct shm_conn *conns;
    struct shm_stashed *stash;
    int nstash;
    uint64_t spin_ns;
    int spin_yield;
    int single_copy;    /* HOOP_SHM_SINGLE_COPY: large payloads read in place where allowed */
    int unreported;     /* requests ended inside isend/irecv, for the next progress */
    char why[512];      /* the first failure that its errno does not tell */
};

int shm_isend(void *conn, struct hoop_tp_req *req);
int shm_irecv(void *conn, struct hoop_tp_req *req);
int shm_progress(void *tp, uint64_t deadline_ns);
void shm_peer_ended(void *tp, int peer);
/* End every request queued on c with err (counted as ended). */
int shm_conn_fail_all(struct shm_conn *c, int err);
/* Say in the segment that this side will not move again, and wake the peer. */
void shm_conn_shut(struct shm_conn *c);
/* Copy out what can move on every connection, without waiting: the number
 * of requests ended. */
int shm_move_all(struct shm_tp *tp);
/* Take what the epoll set says without waiting: 1 when a watched
 * descriptor is readable, else 0. */
int shm_take_events(struct shm_tp *tp, int timeout_ms);

#endif
