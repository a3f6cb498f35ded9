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
#include <stdio.h>

#define OFI_MR_CACHED 256

/* Register [p, p + len), host memory or memory of GPU `device` (>= 0)
 * through FI_HMEM, and bind it to the endpoint where the provider wants
 * that. 0 or a negative libfabric error (nothing left registered). */
static int ofi_mr_regattr(struct ofi_tp *tp, void *p, size_t len, int device,
                          struct fid_mr **out)
{
    struct iovec iov = {.iov_base = p, .iov_len = len};
    /* Keys are unique per communicator (each has its own domain); the
     * provider picks them itself where it says so. */
    struct fi_mr_attr attr = {.mr_iov = &iov, .iov_count = 1, .access = tp->mr_access,
                              .requested_key = tp->mr_mode & FI_MR_PROV_KEY ? 0
                                                                            : tp->mr_next_key++,
                              .iface = device >= 0 ? FI_HMEM_CUDA : FI_HMEM_SYSTEM};
    attr.device.cuda = device >= 0 ? device : 0;
    struct fid_mr *mr = NULL;
    int rc = fi_mr_regattr(tp->domain, &attr, 0, &mr);
    if (!rc && (tp->mr_mode & FI_MR_ENDPOINT)) {
        if (!(rc = fi_mr_bind(mr, &tp->ep->fid, 0)))
            rc = fi_mr_enable(mr);
        if (rc)
            fi_close(&mr->fid);
    }
    *out = rc ? NULL : mr;
    return rc;
}

static int ofi_mr_reg(void *ctx, struct hoop_mr *m)
{
    struct ofi_tp *tp = ctx;
    struct fid_mr *mr = NULL;
    int rc = ofi_mr_regattr(tp, (void *)m->base, m->len, m->on_device ? tp->devmem_device : -1,
                            &mr);
    if (rc) {
        ofi_note(tp, "fi_mr_reg", rc);
        return rc < 0 && rc > -4096 ? rc : -EIO;
    }
    m->handle = mr;
    m->desc = fi_mr_desc(mr);
    m->key = fi_mr_key(mr);
    HOOP_DEBUG("rank %d: ofi transport: registered %zu bytes of %s memory at %p (key %llu), "
               "%d kept", tp->rank, m->len, m->on_device ? "device" : "host", (void *)m->base,
               (unsigned long long)m->key, tp->mr.n + 1);
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

int ofi_device_memory_trial(void *vtp, int kind, int device, void *p, size_t len, int fd,
                            uint64_t off, char *why, size_t n)
{
    struct ofi_tp *tp = vtp;
    if (kind != HOOP_DEVMEM_HMEM) {
        snprintf(why, n, "the ofi transport registers device memory through libfabric's FI_HMEM "
                 "only");
        return -EOPNOTSUPP;
    }
    if (!tp->hmem) {
        snprintf(why, n, "%s", tp->hmem_why);
        return -EOPNOTSUPP;
    }
    struct fid_mr *mr = NULL;
    int rc = ofi_mr_regattr(tp, p, len, device, &mr);
    if (rc) {
        snprintf(why, n, "FI_HMEM: libfabric's %s provider cannot register memory of GPU %d: "
                 "fi_mr_regattr: %s", tp->prov, device, tp->lib->strerror(rc < 0 ? -rc : rc));
        return rc < 0 && rc > -4096 ? rc : -EIO;
    }
    fi_close(&mr->fid);
    return 0;
}

void ofi_use_device_memory(void *vtp, int kind, int device, hoop_dmabuf_export_fn export_fn)
{
    struct ofi_tp *tp = vtp;
    tp->devmem_device = device;
}
