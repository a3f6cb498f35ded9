/* mr.c - memory registrations of the verbs transport: the callers'
 * send buffers, whose payloads are written from where they lie, in the
 * transports' cache (mr_cache.h).
 *
 * A registration pins its pages. Should the caller free a buffer and get
 * new memory at the same address, a registration kept from before would
 * still send the old pages, so on a device that does not page on demand
 * the cache keeps registrations for the length of a collective call (one
 * registration per buffer per call) and drops them when the call ends. A device with on-demand paging (IBV_ACCESS_ON_DEMAND:
 * it follows the page tables) keeps them across calls. */
#include "transport/verbs/verbs.h"
#include "common/log.h"

#include "common/sock.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#define VERBS_MR_CACHED 64

/* Device memory (GPUDirect RDMA): through a dma-buf of the range, or as
 * it is where nvidia-peermem lets the NIC reach it. */
static int verbs_mr_reg_device(struct verbs_tp *tp, struct hoop_mr *m)
{
    struct ibv_mr *mr = NULL;
    if (tp->devmem_kind == HOOP_DEVMEM_DMABUF && tp->devmem_export && verbs_ib.reg_dmabuf_mr) {
        int fd = -1;
        uint64_t off = 0;
        size_t mapped = 0;
        char why[256];
        if (tp->devmem_export((const void *)m->base, m->len, &fd, &off, &mapped, why,
                              sizeof(why))) {
            HOOP_WARN("rank %d: verbs transport: %s", tp->rank, why);
            return -EIO;
        }
        mr = verbs_ib.reg_dmabuf_mr(tp->pd, off, m->len, m->base, fd, 0);
        int e = errno;
        close(fd);
        errno = e;
    } else if (tp->devmem_kind == HOOP_DEVMEM_PEERMEM) {
        mr = verbs_ib.reg_mr(tp->pd, (void *)m->base, m->len, 0);
    } else {
        return -EOPNOTSUPP;
    }
    if (!mr)
        return errno ? -errno : -EIO;
    m->handle = mr;
    m->key = mr->lkey;
    HOOP_DEBUG("rank %d: verbs transport: registered %zu bytes of device memory at %p (%s)",
               tp->rank, m->len, (void *)m->base,
               tp->devmem_kind == HOOP_DEVMEM_DMABUF ? "dma-buf" : "nvidia-peermem");
    return 0;
}

int verbs_device_memory_trial(void *vtp, int kind, int device, void *p, size_t len, int fd,
                              uint64_t off, char *why, size_t n)
{
    struct verbs_tp *tp = vtp;
    (void)device; /* the registration finds the GPU from the memory */
    struct ibv_mr *mr = NULL;
    if (kind == HOOP_DEVMEM_DMABUF) {
        if (!verbs_ib.reg_dmabuf_mr) {
            snprintf(why, n, "dma-buf: this libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 "
                     "or later has)");
            return -ENOSYS;
        }
        errno = 0;
        mr = verbs_ib.reg_dmabuf_mr(tp->pd, off, len, (uint64_t)(uintptr_t)p, fd, 0);
        if (!mr) {
            int e = errno ? errno : EIO;
            snprintf(why, n, "dma-buf refused by %s: ibv_reg_dmabuf_mr: %s", tp->dev_name,
                     hoop_errno_str(-e));
            return -e;
        }
    } else {
        errno = 0;
        mr = verbs_ib.reg_mr(tp->pd, p, len, 0);
        if (!mr) {
            int e = errno ? errno : EIO;
            snprintf(why, n, "nvidia-peermem: %s cannot register device memory: ibv_reg_mr: %s",
                     tp->dev_name, hoop_errno_str(-e));
            return -e;
        }
    }
    verbs_ib.dereg_mr(mr);
    return 0;
}

void verbs_use_device_memory(void *vtp, int kind, int device, hoop_dmabuf_export_fn export_fn)
{
    (void)device;
    struct verbs_tp *tp = vtp;
    tp->devmem_kind = kind;
    tp->devmem_export = export_fn;
}

static int verbs_mr_reg(void *ctx, struct hoop_mr *m)
{
    struct verbs_tp *tp = ctx;
    if (m->on_device)
        return verbs_mr_reg_device(tp, m);
    /* Read by the device only: no access flags, so that read-only memory
     * registers too. */
    struct ibv_mr *mr = verbs_ib.reg_mr(tp->pd, (void *)m->base, m->len,
                                   tp->odp ? IBV_ACCESS_ON_DEMAND : 0);
    if (!mr)
        return errno ? -errno : -EIO;
    m->handle = mr;
    m->key = mr->lkey;
    HOOP_DEBUG("rank %d: verbs transport: registered %zu bytes at %p (lkey 0x%x), %d kept",
               tp->rank, m->len, (void *)m->base, mr->lkey, tp->mr.n + 1);
    return 0;
}

static void verbs_mr_dereg(void *ctx, struct hoop_mr *m)
{
    (void)ctx;
    verbs_ib.dereg_mr(m->handle);
}

static const struct hoop_mr_ops verbs_mr_ops = {.reg = verbs_mr_reg, .dereg = verbs_mr_dereg};

/* On-demand paging for what an RC requester reads (sends and writes). */
static int verbs_has_odp(struct ibv_context *ctx)
{
    struct ibv_device_attr_ex a;
    if (verbs_query_device_ex(ctx, &a))
        return 0;
    const uint32_t want = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE;
    return (a.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
           (a.odp_caps.per_transport_caps.rc_odp_caps & want) == want;
}

void verbs_mr_init(struct verbs_tp *tp)
{
    tp->odp = verbs_has_odp(tp->ctx);
    hoop_mr_init(&tp->mr, &verbs_mr_ops, tp,
                 tp->odp ? HOOP_MR_KEEP_ALWAYS : HOOP_MR_KEEP_UNTIL_IDLE, VERBS_MR_CACHED);
}
