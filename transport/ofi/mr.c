/* mr.c - memory registrations of the libfabric transport, in the
 * transports' cache (mr_cache.h).
 *
 * Freeing memory and getting new memory at the same address must not leave
 * a registration pointing at the old pages. Providers that reach memory by
 * its virtual address when they move data (the software ones: tcp, shm,
 * sockets, udp, and rxm/rxd over them) hold no pages, so a registration
 * stays right for whatever is mapped at its addresses, and is kept across
 * operations. Any other provider may pin the pages: there a registration
 * lives only while operations hold it, and each new operation registers
 * again, which libfabric's own registration cache, with its memory
 * monitors that see memory being unmapped, answers cheaply and correctly. */
#include "transport/ofi/ofi.h"
#include "common/log.h"

#include <errno.h>

#define OFI_MR_CACHED 256

static int ofi_mr_reg(void *ctx, struct hoop_mr *m)
{
    struct ofi_tp *tp = ctx;
    struct fid_mr *mr = NULL;
    /* Keys are unique per communicator (each has its own domain); the
     * provider picks them itself where it says so. */
    uint64_t key = tp->mr_mode & FI_MR_PROV_KEY ? 0 : tp->mr_next_key++;
    int rc = fi_mr_reg(tp->domain, (void *)m->base, m->len, tp->mr_access, 0, key, 0, &mr, NULL);
    if (!rc && (tp->mr_mode & FI_MR_ENDPOINT)) {
        if (!(rc = fi_mr_bind(mr, &tp->ep->fid, 0)))
            rc = fi_mr_enable(mr);
        if (rc)
            fi_close(&mr->fid);
    }
    if (rc) {
        ofi_note(tp, "fi_mr_reg", rc);
        return rc < 0 && rc > -4096 ? rc : -EIO;
    }
    m->handle = mr;
    m->desc = fi_mr_desc(mr);
    m->key = fi_mr_key(mr);
    HOOP_DEBUG("rank %d: ofi transport: registered %zu bytes at %p (key %llu), %d kept",
               tp->rank, m->len, (void *)m->base, (unsigned long long)m->key, tp->mr.n + 1);
    return 0;
}

static void ofi_mr_dereg(void *ctx, struct hoop_mr *m)
{
    (void)ctx;
    fi_close(&((struct fid_mr *)m->handle)->fid);
}

static const struct hoop_mr_ops ofi_mr_ops = {.reg = ofi_mr_reg, .dereg = ofi_mr_dereg};

void ofi_mr_init(struct ofi_tp *tp)
{
    hoop_mr_init(&tp->mr, &ofi_mr_ops, tp,
                 ofi_prov_software(tp->prov) ? HOOP_MR_KEEP_ALWAYS : HOOP_MR_KEEP_WHILE_HELD,
                 OFI_MR_CACHED);
    tp->mr_next_key = 1;
}
