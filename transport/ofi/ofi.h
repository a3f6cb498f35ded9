/* ofi.h - the libfabric transport's objects, shared by its set-up
 * (ofi.c), its choice of provider (prov.c), its data path (msg.c), its
 * completion queue and waits (cq.c), its memory registrations (mr.c) and
 * the loader of libfabric itself (lib.c).
 *
 * One reliable-datagram (FI_EP_RDM) endpoint per communicator. A
 * "connection" is a peer's address in the address vector plus a message
 * counter: every message is a tagged send whose tag names the kind, the
 * channel, the sending rank and the message's number on that connection,
 * and the receiver posts exactly that tag, so messages pair up in order
 * whatever order the provider delivers them in (transport.h's contract). */
#ifndef HOOP_TRANSPORT_OFI_H
#define HOOP_TRANSPORT_OFI_H

#include "common/log.h"
#include "common/wire.h"
#include "transport/mr_cache.h"
#include "transport/transport.h"
#include "transport/watch.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* The functions libfabric exports (the rest of its API is inline). */
struct ofi_lib {
    int loaded;
    int (*getinfo)(uint32_t version, const char *node, const char *service, uint64_t flags,
                   const struct fi_info *hints, struct fi_info **info);
    void (*freeinfo)(struct fi_info *info);
    struct fi_info *(*dupinfo)(const struct fi_info *info);
    int (*fabric)(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context);
    const char *(*strerror)(int errnum);
    uint32_t (*version)(void);
};

/* The signal handlers of the process, saved before a libfabric call that
 * may load or start a provider and put back after it (lib.c). */
struct ofi_sigs {
    struct sigaction sa[NSIG];
    unsigned char ok[NSIG];
};
void ofi_sigs_save(struct ofi_sigs *s);
void ofi_sigs_restore(const struct ofi_sigs *s);

/* libfabric, opened on first use (its functions here keep the signal
 * handlers as they were); NULL with *why set when it cannot be. */
const struct ofi_lib *ofi_lib(const char **why);

#define OFI_API_VERSION FI_VERSION(1, 10)
#define OFI_NAME_MAX 96 /* an endpoint name, as it travels in the handle */

/* Tag: kind (2 bits), channel (2), sending rank (28), message number (32).
 * A hangup (kind CTRL) is what a failing rank sends every peer it has a
 * connection with, as closing its sockets does over TCP: the peer's
 * transfers with it then end with -ECONNRESET. A CTS is a receiver's word
 * to the sender of a written message (rma.c): where to write it. */
enum { OFI_KIND_DATA = 0, OFI_KIND_HELLO = 1, OFI_KIND_CTRL = 2, OFI_KIND_CTS = 3 };
#define OFI_TAG(kind, channel, rank, seq)                                                   \
    (((uint64_t)(kind) << 62) | ((uint64_t)(channel) << 60) |                              \
     ((uint64_t)((uint32_t)(rank) & 0x0fffffffu) << 32) | (uint64_t)(uint32_t)(seq))
#define OFI_RANK_MAX 0x0fffffff

enum ofi_op_kind {
    OFI_OP_SEND,
    OFI_OP_RECV,
    OFI_OP_HELLO,
    OFI_OP_HANGUP,
    OFI_OP_XFER, /* a written message: its request, and the parts below */
    OFI_OP_PART, /* a provider operation of an XFER */
};

/* The parts of a written message (rma.c). */
enum ofi_part {
    OFI_PART_HDR_RECV, /* receiver: the header, a tagged message of its own */
    OFI_PART_CTS_SEND, /* receiver: where to write */
    OFI_PART_HDR_SEND, /* sender */
    OFI_PART_CTS_RECV, /* sender: then the write */
    OFI_PART_WRITE,    /* sender: fi_writedata, its CQ data the receiver's cookie */
};

/* A message's iovecs: the header and the payload. */
#define OFI_IOV_MAX 2
#define OFI_CTS_BYTES 28 /* u64 address, u64 key, u64 length, u32 cookie */
#define OFI_WSLOTS 4096  /* written messages being received at once, at most */

/* One operation handed to the provider. The context comes first: the
 * provider gives its address back in the completion. */
struct ofi_op {
    struct fi_context2 ctx;
    int kind;
    int posted;               /* the provider has it (else it waits for room) */
    int free;                 /* on the free list */
    int ctrl;                 /* the transport's own: not counted in inflight */
    int peer;                 /* a hangup's rank */
    int orphan;               /* its request ended without it (its peer hung up): it is
                                 let go when the provider gives it back */
    uint64_t small;           /* a hangup's bytes */
    struct ofi_op *parent;    /* a PART: its XFER */
    int part;                 /* a PART: which (enum ofi_part) */
    int parts;                /* an XFER: parts not yet ended (the awaited write is one) */
    int xerr;                 /* an XFER: its first error */
    int slot;                 /* an XFER receive: its write slot, or -1 */
    uint8_t cts[OFI_CTS_BYTES]; /* a CTS part's bytes */
    uint64_t raddr, rkey;     /* a WRITE part: where, in the receiver's registration */
    uint32_t rdata;           /* a WRITE part: its CQ data (the receiver's cookie) */
    struct hoop_tp_req *req;  /* the ring's request; NULL for a hello */
    struct ofi_conn *conn;
    uint64_t tag;
    struct iovec iov[OFI_IOV_MAX];
    void *desc[OFI_IOV_MAX];
    struct hoop_mr *mr[OFI_IOV_MAX]; /* the registrations behind desc, held until
                                             completion */
    size_t niov;
    int is_send;
    /* A hello's own outcome (it has no request). */
    int done;
    int err;
    size_t len;
    struct ofi_op *next;      /* the posted list, the waiting list or the free list */
    struct ofi_op *pprev;     /* the posted list's other link */
};

struct ofi_conn {
    struct ofi_tp *tp;
    struct ofi_conn *next_conn;
    int peer;
    int channel;
    int is_tx;
    fi_addr_t addr;
    uint32_t seq; /* messages posted on this connection so far */
};

struct ofi_tp {
    const struct ofi_lib *lib;
    int rank;
    int size;
    uint8_t token[HOOP_TOKEN_BYTES];
    struct hoop_log_limit strangers; /* hellos without this job's seal, ignored */
    struct fi_info *info;       /* the provider chosen at create, then the one opened */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    int wait_fd;                /* the completion queue's wait object, or -1 */
    int delivery_complete;      /* data sends complete once the receiver has them */
    uint64_t mr_mode;
    uint64_t mr_access;         /* what every registration allows */
    uint8_t name[OFI_NAME_MAX];
    size_t name_len;
    char prov[48];
    char desc[64];
    fi_addr_t *peer_addr;       /* per rank; FI_ADDR_NOTAVAIL until known */
    struct ofi_op **hangup_rx;  /* per rank: the receive of its hangup, once connected */
    uint8_t *gone;              /* per rank: it hung up, or its process ended (below) */
    uint8_t *hung;              /* per rank: its hangup was read, its transfers not yet
                                   ended (cq.c: they settle first) */
    int hangups;                /* how many ranks are hung, not yet gone */
    int settling;               /* the hangups are being settled: reads leave new ones */
    uint8_t *ended;             /* per rank: its process ended; what it sent can still
                                   be received */
    struct ofi_conn *conns;
    struct ofi_op *posted;      /* in the provider's hands */
    struct ofi_op *xfers;       /* written messages under way (rma.c) */
    size_t write_min;           /* HOOP_OFI_WRITE_BYTES where the provider can write; 0: never */
    struct ofi_op **wslot;      /* per write slot: the XFER receiving, or NULL */
    uint16_t *wgen;             /* per write slot: its generation, in the cookie */
    int wnext;
    /* Refused for room (-FI_EAGAIN), posted later in their order: [0]
     * receives, [1] sends and writes. Apart, so that a send the provider
     * holds back until the peer receives (shm) never keeps this rank's
     * receives from the peer's sends: both ranks would wait. */
    struct ofi_op *wait_head[2], *wait_tail[2];
    struct ofi_op *free_ops, *free_tail; /* oldest first: a late second completion
                                            (rxm) finds its operation still free */
    struct ofi_op **op_blocks;  /* what the free list is carved from, freed at destroy */
    int nblocks;
    unsigned inflight;          /* posted or waiting */
    uint64_t cq_entries;        /* completions read, errors included */
    int dead;                   /* cancelled: only close and destroy are left */
    /* The endpoint held transfers it would not give back (a peer stopped
     * mid-message) and its provider crashes closing it so (libfabric's tcp
     * provider frees a half-received message twice): it is never
     * progressed or closed again, and destroy keeps the transport, with
     * everything the provider may point into, on a list (cq.c). */
    int parked;
    struct fid_ep *parked_ep;
    struct ofi_tp *parked_next;
    int enabled;                /* fi_enable of ep succeeded: its queues may be read */
    struct hoop_watch watch;
    uint64_t spin_ns;
    int spin_yield;
    struct hoop_mr_cache mr;    /* registrations (mr.c) */
    uint64_t mr_next_key;       /* requested keys, where the provider does not pick them */
    int hmem;                   /* opened with FI_HMEM: the provider takes device memory */
    char hmem_why[192];         /* else why not, in a sentence */
    int devmem_device;          /* the GPU of on_device sends (FI_HMEM), once chosen */
    char err_text[256];         /* the provider's account of the last failed operation */
};

/* The operations' lists (posted, written messages) are doubly linked
 * through next and pprev. */
static inline void ofi_list_add(struct ofi_op **head, struct ofi_op *op)
{
    op->next = *head;
    op->pprev = NULL;
    if (*head)
        (*head)->pprev = op;
    *head = op;
}

static inline void ofi_list_remove(struct ofi_op **head, struct ofi_op *op)
{
    if (op->pprev)
        op->pprev->next = op->next;
    else
        *head = op->next;
    if (op->next)
        op->next->pprev = op->pprev;
    op->next = op->pprev = NULL;
}

/* prov.c */
/* What the transport asks of a provider (HOOP_OFI_PROVIDER's, or any). */
struct fi_info *ofi_hints(const struct ofi_lib *lib, const char *prov);
/* "tcp;ofi_rxm, shm, ...": the providers libfabric offers for that. */
void ofi_list_providers(const struct ofi_lib *lib, char *out, size_t n);
/* The ops table's probe (HOOP_TRANSPORT=auto). */
int ofi_probe(char *why, size_t n);
/* tp->info for the endpoint: tp->prov again, on the interface of local,
 * with FI_HMEM where wanted and offered (tp->hmem, else tp->hmem_why) and
 * remote writes where offered. 0 or a libfabric error. */
int ofi_getinfo_open(struct ofi_tp *tp, const struct sockaddr *local, socklen_t len);

/* msg.c */
int ofi_isend(void *conn, struct hoop_tp_req *req);
int ofi_irecv(void *conn, struct hoop_tp_req *req);
struct ofi_op *ofi_op_get(struct ofi_tp *tp);
void ofi_op_put(struct ofi_tp *tp, struct ofi_op *op);
/* op is in the provider's hands (the posted list), or no longer. */
void ofi_posted_add(struct ofi_tp *tp, struct ofi_op *op);
void ofi_posted_remove(struct ofi_tp *tp, struct ofi_op *op);
/* Post the receive of rank peer's hangup, once per peer; 0 or -errno. */
int ofi_hangup_expect(struct ofi_tp *tp, int peer);
/* Rank peer hung up: fail every transfer with it. How many ended. */
int ofi_peer_gone(struct ofi_tp *tp, int peer);
/* Read the completion queue until it has nothing more. */
void ofi_drain(struct ofi_tp *tp);
/* Rank peer's process has ended: read the queue until nothing waits for
 * it, or for at most OFI_SETTLE_NS (what it sent is all here, and may take
 * a provider several reads to move: shm copies a segment at a time). */
void ofi_settle(struct ofi_tp *tp, int peer);
#define OFI_SETTLE_NS 1000000000ull
/* A peer hung up: how long the transfers with it may take to report what
 * it did before, at most and without a completion (cq.c). */
#define OFI_HANGUP_SETTLE_NS 500000000ull
#define OFI_HANGUP_QUIET_NS 20000000ull
/* How long the sends to a peer whose process ended may take to report
 * their delivery before they fail (ofi.c). */
#define OFI_SEND_SETTLE_NS 100000000ull
/* Stop everything: with `hangup`, tell every connected peer first. */
void ofi_shutdown(struct ofi_tp *tp, int hangup);
/* Keep a parked transport for the life of the process (destroy's last
 * step for it). */
void ofi_park_keep(struct ofi_tp *tp);
/* Add an iovec of host memory to op, with its descriptor where the
 * provider wants one. */
int ofi_op_iov(struct ofi_tp *tp, struct ofi_op *op, void *buf, size_t len);
/* Hand op to the provider, or queue it until there is room; 0 or -errno. */
int ofi_op_start(struct ofi_tp *tp, struct ofi_op *op);
/* Retry the queued operations in order; how many of them failed (their
 * requests have ended). */
int ofi_post_waiting(struct ofi_tp *tp);

/* cq.c */
int ofi_progress(void *vtp, uint64_t deadline_ns);
/* Read the completion queue once: completions handled, or -errno. */
int ofi_poll(struct ofi_tp *tp);
/* Whether a transfer with rank peer is still under way: its sends
 * (OFI_WITH_SENDS), its receives (OFI_WITH_RECVS) or either, among the
 * posted messages and, with OFI_WITH_XFERS, the written ones too. */
#define OFI_WITH_SENDS 1u
#define OFI_WITH_RECVS 2u
#define OFI_WITH_XFERS 4u
int ofi_pending_with(const struct ofi_tp *tp, int peer, unsigned which);
/* Progress until op (a hello) is done or the deadline; 0 or -errno. */
int ofi_wait_op(struct ofi_tp *tp, struct ofi_op *op, uint64_t deadline_ns);
int ofi_watch(void *vtp, int fd);
void ofi_cancel(void *vtp);
/* Keep "what: libfabric's sentence" in tp->err_text and log it. */
void ofi_note(struct ofi_tp *tp, const char *what, int fi_rc);

/* rma.c: messages whose payload the sender writes (fi_writedata) into
 * the receiver's buffer, which the receiver names in a CTS; the header
 * travels as a tagged message of its own. 0 or -errno. */
int ofi_write_isend(struct ofi_conn *c, struct hoop_tp_req *req, uint32_t seq);
int ofi_write_irecv(struct ofi_conn *c, struct hoop_tp_req *req, uint32_t seq);
/* A part ended (from the completion queue, or failed): how many requests
 * ended with it. */
int ofi_part_ended(struct ofi_tp *tp, struct ofi_op *part, int err, size_t len);
/* CQ data of a remote write arrived: how many requests ended. */
int ofi_write_arrived(struct ofi_tp *tp, uint64_t data);
/* End the written messages with peer (or all, peer < 0) with err, their
 * parts let go as the provider gives them back; how many requests ended. */
int ofi_xfers_end(struct ofi_tp *tp, int peer, int err);

/* prov.c: 1 when every layer of provider prov (such as "tcp;ofi_rxm") is
 * one of libfabric's software providers, which move data with the CPU and
 * reach memory by its virtual address when they do. */
int ofi_prov_software(const char *prov);

/* mr.c: tp->mr, the registrations (mr_cache.h), set up for tp's
 * provider. */
void ofi_mr_init(struct ofi_tp *tp);
/* GPUDirect RDMA through FI_HMEM: the transport ops of the same names. */
int ofi_device_memory_trial(void *vtp, int kind, int device, void *p, size_t len, int fd,
                            uint64_t off, char *why, size_t n);
void ofi_use_device_memory(void *vtp, int kind, int device, hoop_dmabuf_export_fn export_fn);
/* Let go of what op holds (its registrations), and of op itself. */
void ofi_op_release(struct ofi_tp *tp, struct ofi_op *op);



#endif
