/* transport.h - the one interface between the ring and the wire.
 *
 * An ops table with a leading size (so it can grow), filled with designated
 * initialisers. Set-up calls (create, listen, connect, accept) return a
 * hoop_status_t and leave a sentence; data calls return 0 or -errno and
 * never block: isend/irecv queue a request, progress moves the engine and
 * waits (until the deadline) for at least one completion, and the caller
 * reads req->state. A transport may have several requests queued per
 * connection; it keeps their order on the wire (the k-th isend on one side
 * pairs with the k-th irecv on the other). */
#ifndef HOOP_TRANSPORT_H
#define HOOP_TRANSPORT_H

#include "hoop.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define HOOP_REQ_PENDING 1

/* The most bytes a transport's handle may take (the bootstrap carries it
 * as HOOP_HANDLE_MAX; ring.c checks that they agree). */
#define HOOP_TP_HANDLE_MAX 112

/* Connections between two ranks are per channel: the ring's, and the
 * direct ones that alltoall and the small-message path make on first use. */
enum { HOOP_CHANNEL_RING = 0, HOOP_CHANNEL_P2P = 1 };

/* A message is an optional header of hdr_len bytes and a payload of len
 * bytes, one after the other on the wire. On a receive, check (when set) is
 * called as soon as the header is in, before anything of the message is
 * trusted; a nonzero return, -errno, ends the request with it. When
 * check_first is set the transport calls it before it waits for any payload
 * byte, so a receiver learns that a sender is doing something else (or is
 * not a hoop rank at all) without waiting for bytes that will never come;
 * the caller sets it on the first message of a collective from a peer, and
 * leaves it clear where an earlier header has settled the length, so that
 * the transport may take header and payload in one transfer. A transport
 * of whole messages that meets a longer message than the receive calls
 * check with done 0 and a header of zeros where the provider did not
 * deliver it, and ends the request with check's error, else -EMSGSIZE. */
struct hoop_tp_req {
    void *buf;                 /* set by the caller */
    size_t len;                /* set by the caller */
    void *hdr;                 /* set by the caller; NULL when hdr_len is 0 */
    size_t hdr_len;
    int (*check)(struct hoop_tp_req *req); /* receives only; may be NULL */
    int check_first;           /* receives: check before waiting for the payload */
    void *ctx;                 /* the caller's, for check */
    /* Optional: the whole buffer buf lies in (NULL: buf itself), for a
     * transport that registers memory: one registration serves every chunk
     * of it. */
    void *region;
    size_t region_len;
    /* Receives only, optional: where a longer message than expected may
     * put what lies past len (spill_len bytes), so that a transport of
     * whole messages takes it and check reads its header, instead of a
     * truncation that a provider may never end (libfabric's rxm
     * rendezvous, shm). A message longer still ends as today. */
    void *spill;
    size_t spill_len;
    /* Receives only, optional: a transport that holds a message's payload
     * in memory the caller can read (shared memory) may hand it over in
     * pieces instead of copying it to buf: take(req, off, src, n) for
     * payload bytes [off, off + n), in order, each byte once, only after
     * check passed, every piece starting at a multiple of 8 bytes; either
     * every byte of a message goes through take or none does (then buf
     * holds them as usual). The caller (the ring: a reducing receive folds
     * each piece into place) counts what it was given. */
    void (*take)(struct hoop_tp_req *req, size_t off, const void *src, size_t n);
    /* Sends only: buf (and region) is device memory, which the transport
     * registers as use_device_memory said; set only after it accepted. */
    int on_device;
    size_t done;               /* bytes moved so far, header included */
    int state;                 /* HOOP_REQ_PENDING, 0 when complete, or -errno */
    struct hoop_tp_req *next;  /* the transport's queue */
    uint64_t lent;             /* the transport's: zero-copy sends it waits on (tcp/queue.c) */
    void *held;                /* the transport's: the registration a send holds (verbs) */
};

static inline size_t hoop_tp_req_total(const struct hoop_tp_req *r)
{
    return r->hdr_len + r->len;
}

struct hoop_tp_params {
    int rank;
    int size;
    const uint8_t *token; /* HOOP_TOKEN_BYTES, presented on every connection */
};

/* GPUDirect RDMA: how a transport registers device memory (verbs: by
 * dma-buf or through nvidia-peermem; ofi: libfabric's FI_HMEM). */
enum { HOOP_DEVMEM_DMABUF = 1, HOOP_DEVMEM_PEERMEM = 2, HOOP_DEVMEM_HMEM = 3 };
#define HOOP_DEVMEM_BIT(kind) (1u << (kind))
/* A dma-buf of the device memory [p, p + len) (gpu.h's
 * hoop_gpu_dmabuf_export, handed down by the ring). */
typedef int (*hoop_dmabuf_export_fn)(const void *p, size_t len, int *fd, uint64_t *offset,
                                     size_t *mapped, char *why, size_t why_len);

struct hoop_transport_ops {
    size_t size; /* sizeof(struct hoop_transport_ops) */
    const char *name;
    hoop_status_t (*create)(const struct hoop_tp_params *p, void **tp);
    /* Listen on the interface of `local`; fill an opaque handle that others
     * pass to connect (<= HOOP_HANDLE_MAX bytes). */
    hoop_status_t (*listen)(void *tp, const struct sockaddr *local, socklen_t len, uint8_t *handle,
                            uint16_t *handle_len);
    /* Open the connection to `peer` on `channel`; accept is its other end.
     * A connection from another rank or channel that arrives during accept
     * is kept for the accept that wants it. */
    hoop_status_t (*connect)(void *tp, int peer, int channel, const char *peer_host,
                             const uint8_t *handle, uint16_t handle_len, uint64_t comm_id,
                             uint64_t deadline_ns, void **conn);
    /* HOOP_ERR_ABORTED when a watched descriptor became readable first
     * (where the transport can wait on them): nothing is lost, and the
     * caller may accept again. */
    hoop_status_t (*accept)(void *tp, int peer, int channel, const char *peer_host,
                            uint64_t comm_id, uint64_t deadline_ns, void **conn);
    int (*isend)(void *conn, struct hoop_tp_req *req);
    int (*irecv)(void *conn, struct hoop_tp_req *req);
    /* Returns the number of requests completed (0 at the deadline), or
     * -errno; -EINTR as soon as a watched descriptor is readable. */
    int (*progress)(void *tp, uint64_t deadline_ns);
    /* Wake every progress() while fd is readable (the communicator's abort
     * eventfd, its bootstrap connections). fd stays the caller's and must
     * stay open until destroy. 0 or -errno. */
    int (*watch)(void *tp, int fd);
    /* Shut every connection and wait until no request can touch its buffer
     * again; queued requests end with -ECANCELED. The transport is then
     * only good for close/destroy. */
    void (*cancel)(void *tp);
    void (*close)(void *conn);
    void (*destroy)(void *tp);
    const char *(*describe)(void *tp);
    /* How well this transport suits this machine, for HOOP_TRANSPORT=auto:
     * 0 when it cannot run here, higher when faster; why says what it found
     * (a sentence, "" allowed). Called before create. */
    int (*probe)(char *why, size_t n);
    /* Optional: 0 when a peer's handle (what its listen published) can be
     * connected to from this rank, else -1 with why said in a sentence; the
     * ring asks it of every rank's handle before connecting any, so that
     * ranks that cannot talk are all told at once. */
    int (*handle_check)(void *tp, const uint8_t *handle, uint16_t len, char *why, size_t n);
    /* Optional: rank peer's process has ended (seen through its pidfd). A
     * transport that learns nothing of it by itself (shared memory) takes in
     * what the peer had sent, then fails what still waits for it, as a
     * socket's end of stream does over TCP. */
    void (*peer_ended)(void *tp, int peer);
    /* Optional, GPUDirect RDMA: register len bytes of memory at p on GPU
     * `device` once and drop it again, as a trial of kind
     * (HOOP_DEVMEM_DMABUF: the dma-buf fd, p at offset off in it;
     * HOOP_DEVMEM_PEERMEM: p itself, which nvidia-peermem lets the NIC
     * reach; HOOP_DEVMEM_HMEM: p itself, through the transport's library).
     * 0, or -errno with why. A transport without it moves host memory only. */
    int (*device_memory_trial)(void *tp, int kind, int device, void *p, size_t len, int fd,
                               uint64_t off, char *why, size_t n);
    /* Optional, after a trial of kind passed: sends with on_device set come
     * from memory of GPU `device` from now on, registered that way (export
     * makes the dma-buf of a range). */
    void (*use_device_memory)(void *tp, int kind, int device, hoop_dmabuf_export_fn export_fn);
    /* With device_memory_trial: the kinds it tries (HOOP_DEVMEM_BIT). */
    unsigned device_memory_kinds;
    /* Waits look for completions this long without sleeping, then sleep;
     * with yield set they give up the CPU between looks (for ranks that
     * outnumber the CPUs, where the rank being waited for needs it). */
    void (*set_busy_poll)(void *tp, uint64_t ns, int yield);
    /* Optional: a sentence on the transport's first failure that its errno
     * does not tell (a verbs work completion's status and what to check),
     * or NULL; the ring adds it to the sentence of the request that failed. */
    const char *(*last_error)(void *tp);
    /* Optional: a collective call has ended, and no request of it is left;
     * the caller may now free or reuse the memory it passed (a transport
     * that registers memory lets go of what it registered of it). */
    void (*call_end)(void *tp);
    /* Optional: finish what connect left (tcp: check the peers' replies
     * to the token proofs of the connections this rank opened). The ring
     * calls it once every connect and accept of a set-up is made, before
     * any of those connections carries data: by then the replies are
     * in, and no accept waited for them. As accept: HOOP_ERR_ABORTED when
     * a watched descriptor woke it (then call it again). */
    hoop_status_t (*settle)(void *tp, uint64_t comm_id, uint64_t deadline_ns);
    /* Optional: 1 when a connect may be made before its peer is known to
     * be in the same set-up (ring/peers.c makes it before the ranks agree
     * on the collective): it completes whatever the peer does (in its
     * listen backlog) and starts no traffic that progress would move (tcp,
     * shared memory). Without it, connects wait for the agreement
     * (libfabric's waits until its hello is taken; verbs' starts swapping
     * queue pairs over its side channel). */
    int (*connect_early)(void *tp);
};

/* The transport called `name` (HOOP_TRANSPORT), or NULL. */
const struct hoop_transport_ops *hoop_transport_find(const char *name);
/* HOOP_TRANSPORT=auto: the usable transport with the best probe, and in
 * why what each found. Never NULL (tcp runs everywhere). */
const struct hoop_transport_ops *hoop_transport_auto(char *why, size_t n);
/* "tcp, ofi": the transports built in. */
void hoop_transport_list(char *out, size_t n);

extern const struct hoop_transport_ops hoop_transport_tcp;
extern const struct hoop_transport_ops hoop_transport_ofi;
extern const struct hoop_transport_ops hoop_transport_verbs;

#endif
