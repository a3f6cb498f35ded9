/* mr_cache.h - memory registrations of the transports that register
 * memory (ofi, verbs), cached by one design.
 *
 * A registration covers whole pages around the buffer asked for, and is
 * found again for any buffer inside it, so a buffer used again (the ring's
 * slots, a training loop's gradient buffer) is not registered again while
 * the registration may be kept. At most `max` are kept; the least recently
 * used one that no operation holds makes room. How long one may be kept
 * is the transport's to say, from what it knows of its memory:
 *
 *   HOOP_MR_KEEP_ALWAYS      the device reaches memory through the page
 *                            tables when it moves data (libfabric's software
 *                            providers; a verbs device with on-demand
 *                            paging), so a registration stays right for
 *                            whatever is mapped at its addresses, across
 *                            free and reallocation;
 *   HOOP_MR_KEEP_WHILE_HELD  the pages are pinned: a registration lives only
 *                            while operations hold it (libfabric's hardware
 *                            providers, whose own cache watches unmapping);
 *   HOOP_MR_KEEP_UNTIL_IDLE  the pages are pinned, and the transport drops
 *                            what nobody holds when a collective call ends
 *                            (hoop_mr_idle, from the transport's call_end):
 *                            a buffer is registered once per call, and
 *                            memory freed between calls is never reached
 *                            through a registration of the pages it had.
 *
 * Not thread-safe: a communicator's transport is driven by one thread. */
#ifndef HOOP_TRANSPORT_MR_CACHE_H
#define HOOP_TRANSPORT_MR_CACHE_H

#include "transport/transport.h"

#include <stddef.h>
#include <stdint.h>

enum hoop_mr_keep { HOOP_MR_KEEP_ALWAYS, HOOP_MR_KEEP_WHILE_HELD, HOOP_MR_KEEP_UNTIL_IDLE };

/* A registration of [base, base + len). */
struct hoop_mr {
    uintptr_t base;
    size_t len;
    void *handle;             /* the transport's: struct fid_mr *, struct ibv_mr * */
    void *desc;               /* what the transport names it by locally ... */
    uint64_t key;             /* ... and remotely */
    uint64_t last_use;
    int refs;                 /* operations holding it */
    int on_device;            /* device memory (GPUDirect RDMA) */
    struct hoop_mr *next;
};

/* The transport's side: register [m->base, m->base + m->len) and fill
 * m->handle, desc and key (0 or -errno); undo it. */
struct hoop_mr_ops {
    int (*reg)(void *ctx, struct hoop_mr *m);
    void (*dereg)(void *ctx, struct hoop_mr *m);
};

struct hoop_mr_cache {
    const struct hoop_mr_ops *ops;
    void *ctx;
    enum hoop_mr_keep keep;
    int max;                  /* registrations kept at most */
    struct hoop_mr *head;
    int n;
    uint64_t clock;
    unsigned long regs;       /* registrations made, for tests and logs */
};

void hoop_mr_init(struct hoop_mr_cache *c, const struct hoop_mr_ops *ops, void *ctx,
                  enum hoop_mr_keep keep, int max);
/* A registration covering [buf, buf + len), held until hoop_mr_put;
 * registered on first use. 0 or -errno (the transport's reg). */
int hoop_mr_get(struct hoop_mr_cache *c, const void *buf, size_t len, struct hoop_mr **out);
/* The same for a request: its whole region when it has one (one
 * registration for every chunk of a buffer), else its payload; device
 * memory (req->on_device) is registered as such (hoop_mr.on_device). */
int hoop_mr_get_req(struct hoop_mr_cache *c, const struct hoop_tp_req *req, struct hoop_mr **out);
void hoop_mr_put(struct hoop_mr_cache *c, struct hoop_mr *m);
/* A collective call has ended: under HOOP_MR_KEEP_UNTIL_IDLE, drop every
 * registration nobody holds. */
void hoop_mr_idle(struct hoop_mr_cache *c);
/* Drop them all (no operation may hold one). */
void hoop_mr_fini(struct hoop_mr_cache *c);

#endif
