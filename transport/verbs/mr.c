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

#include <errno.h>

#define VERBS_MR_CACHED 64

static int verbs_mr_reg(void *ctx, struct hoop_mr *m)
{
    struct verbs_tp *tp = ctx;
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
