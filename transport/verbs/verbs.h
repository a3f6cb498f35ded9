/* verbs.h - the RDMA verbs transport's objects, shared by its set-up
 * (verbs.c: device, port and GID, RC queue pairs and their states), its
 * data path (data.c: slots, credits, completions and waits) and its
 * memory registrations (mr.c).
 *
 * Each connection is one RC queue pair and, beside it, a connection of the
 * tcp transport (the side channel): the queue pairs' numbers, GIDs,
 * addresses and keys are swapped over it, and its end of stream is how a
 * rank learns at once that its peer's process has gone (an RC queue pair
 * learns it only after its retries, seconds later).
 *
 * The data path: a message (header and payload) goes as 8 bytes of total
 * length and then its bytes, cut into fragments of at most a slot. The
 * sender writes a fragment, with RDMA WRITE WITH IMM, into the receiver's
 * receive slot of the same index as its send slot; the immediate names the
 * slot and the fragment's length. What the fragment holds of the length
 * and header is copied into the registered send slot; its payload too for
 * small messages, while a payload of at least HOOP_IB_ZCOPY_BYTES goes
 * straight from the caller's memory, registered through the transports'
 * cache (mr_cache.h), as the write's second scatter-gather element. The
 * receiver copies the fragment out into the posted receive, in order, and
 * gives the slot back with a write of no bytes whose immediate carries how
 * many slots it frees (a credit). A sender never has more fragments under
 * way than the receiver has slots. */
#ifndef HOOP_TRANSPORT_VERBS_H
#define HOOP_TRANSPORT_VERBS_H

#include "transport/mr_cache.h"
#include "transport/transport.h"
#include "transport/watch.h"

#include <infiniband/verbs.h>
#include <stdint.h>

#define VERBS_SLOTS 16                 /* receive slots per connection */
#define VERBS_SLOT_BYTES (128u << 10)  /* bytes per slot */
#define VERBS_HANDLE_VERSION 1
#define VERBS_INFO_BYTES 44            /* a queue pair's description, on the side channel */

/* The immediate: kind (2 bits), slot (6 bits), length (24 bits). */
#define VERBS_IMM_DATA 1u
#define VERBS_IMM_CREDIT 2u
#define VERBS_IMM(kind, slot, len) (((uint32_t)(kind) << 30) | ((uint32_t)(slot) << 24) | (uint32_t)(len))
#define VERBS_IMM_KIND(imm) ((imm) >> 30)
#define VERBS_IMM_SLOT(imm) (((imm) >> 24) & 0x3f)
#define VERBS_IMM_LEN(imm) ((imm) & 0xffffff)

/* A send work request's id is its number on the connection; a receive's
 * is this. */
#define VERBS_WR_RECV UINT64_MAX
#define VERBS_SIGNAL_EVERY 8

struct verbs_tp;

/* A connection's set-up, finished by progress (verbs.c: verbs_conn_advance):
 * connect and accept only start it, since a rank connects to its next
 * neighbour before it accepts from its previous one, and a peer answers
 * only once it is past its own connects. */
enum verbs_conn_state {
    VERBS_CONN_INFO,  /* descriptions under way on the side channel */
    VERBS_CONN_READY, /* queue pair at RTS, receives posted; ready bytes under way */
    VERBS_CONN_RUN,   /* data moves */
};

struct verbs_conn {
    struct verbs_tp *tp;
    struct verbs_conn *next_conn;
    int peer;
    int channel;
    char peer_host[64];
    enum verbs_conn_state state;
    void *side;                  /* the tcp transport's connection */
    struct hoop_tp_req hs_out, hs_in; /* the set-up's side-channel messages */
    uint8_t info_out[VERBS_INFO_BYTES], info_in[VERBS_INFO_BYTES];
    uint8_t ready_out, ready_in;
    uint32_t psn;
    struct hoop_tp_req bye;      /* a receive on the side channel that ends only when
                                    the peer's process goes (or leaves) */
    uint8_t bye_byte;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *rx_mr, *tx_mr;
    uint8_t *rx, *tx;            /* VERBS_SLOTS slots each */
    uint64_t peer_rx;            /* the peer's receive slots: address, key */
    uint32_t peer_rkey;
    int err;                     /* the connection's first failure (-errno), or 0 */
    int peer_gone;               /* its side channel ended: nothing more will come */
    /* Sending. */
    struct hoop_tp_req *sq_head, *sq_tail; /* sends not yet written out */
    struct hoop_tp_req *sw_head, *sw_tail; /* sends written out, awaiting their completions */
    size_t tx_off;               /* bytes of sq_head written (8 of length first) */
    int credits;                 /* the peer's free slots */
    int tx_oldest;               /* the oldest send slot whose write has not completed */
    int tx_busy;                 /* slots from there on whose writes have not completed */
    uint64_t slot_wr[VERBS_SLOTS]; /* per busy slot: the number of its write */
    /* Work requests on the send queue, numbered as posted; only some are
     * signalled (the last fragment of a message, and one in
     * VERBS_SIGNAL_EVERY), and a signalled one's completion completes every
     * one before it (an RC queue pair completes in order). */
    uint64_t wr_posted;          /* posted so far */
    uint64_t wr_done;            /* of those, known complete */
    int unsignaled;              /* posted since the last signalled one */
    /* Receiving. */
    struct hoop_tp_req *rq_head, *rq_tail; /* receives in order */
    uint32_t rx_len[VERBS_SLOTS];/* per slot: the fragment's length, once arrived */
    int rx_arrived;              /* fragments arrived, not yet taken */
    int rx_next;                 /* the next slot to take */
    size_t rx_off;               /* bytes of the message being taken (8 of length first) */
    uint64_t rx_total;           /* its length, once the first 8 bytes are in */
    uint8_t rx_lenbuf[8];
    int rx_skip;                 /* the message being taken has no receive: its bytes go */
    int credit_owed;             /* slots taken, not yet given back */
};

struct verbs_tp {
    int rank;
    int size;
    const struct hoop_transport_ops *side_ops;
    void *side;                  /* the tcp transport */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan;
    char dev_name[64];
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    int link_layer;
    enum ibv_mtu mtu;
    unsigned timeout, retry_cnt, rnr_retry;
    struct verbs_conn *conns;
    int inflight;
    uint64_t spin_ns;
    int spin_yield;
    struct hoop_mr_cache mr;     /* registrations of the callers' send buffers */
    size_t zcopy_min;            /* HOOP_IB_ZCOPY_BYTES (0: every payload copied) */
    int odp;                     /* the device pages on demand (kept across calls) */
    int zcopy_failed;            /* a registration failed: said once, then copies */
    int devmem_kind;             /* GPUDirect: HOOP_DEVMEM_*, 0 for none */
    hoop_dmabuf_export_fn devmem_export;
    struct hoop_watch watch;     /* the caller's descriptors */
    char desc[160];
    char why[512];               /* the first failure, in a sentence (last_error) */
};

/* verbs.c: move c's set-up on as far as what has arrived allows. How many
 * requests ended: those queued on c when its set-up failed (said in the
 * log; c->err says how). */
int verbs_conn_advance(struct verbs_conn *c);

/* mr.c: tp->mr, the registrations of send buffers, set up for tp's
 * device (whether it pages on demand). */
void verbs_mr_init(struct verbs_tp *tp);
/* GPUDirect RDMA (mr.c): the transport ops of the same names. */
int verbs_device_memory_trial(void *vtp, int kind, int device, void *p, size_t len, int fd,
                              uint64_t off, char *why, size_t n);
void verbs_use_device_memory(void *vtp, int kind, int device, hoop_dmabuf_export_fn export_fn);

/* lib.c: libibverbs's exported functions, looked up at run time. */
struct verbs_lib {
    int loaded;
    struct ibv_device **(*get_device_list)(int *n);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *a);
    int (*query_port_compat)(struct ibv_context *ctx, uint8_t port,
                             struct _compat_ibv_port_attr *a);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    int (*query_gid_ex_sized)(struct ibv_context *ctx, uint32_t port, uint32_t index,
                              struct ibv_gid_entry *e, uint32_t flags, size_t size);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
    int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_ctx,
                                struct ibv_comp_channel *ch, int vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *a);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    /* rdma-core 34 and later; NULL before (GPUDirect by dma-buf refused). */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len,
                                    uint64_t iova, int fd, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    const char *(*port_state_str)(enum ibv_port_state s);
    const char *(*wc_status_str)(enum ibv_wc_status s);
};
extern struct verbs_lib verbs_ib;
/* Open libibverbs once: 0, or -1 with why pointing at a sentence that
 * begins "libibverbs could not be loaded". */
int verbs_lib_load_once(const char **why);
int verbs_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *pa);
int verbs_query_device_ex(struct ibv_context *ctx, struct ibv_device_attr_ex *a);
int verbs_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
                       struct ibv_gid_entry *e);

/* data.c */
/* Keep the first failure's sentence (printf-like) for last_error, and log it. */
void verbs_note(struct verbs_tp *tp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int verbs_isend(void *conn, struct hoop_tp_req *req);
int verbs_irecv(void *conn, struct hoop_tp_req *req);
int verbs_progress(void *tp, uint64_t deadline_ns);
/* Post the connection's receives, once it is ready to run: 0 or -errno. */
int verbs_conn_start(struct verbs_conn *c);
/* Fail every request of c with err (c->err keeps the first); how many
 * there were. */
int verbs_conn_fail(struct verbs_conn *c, int err);

#endif
