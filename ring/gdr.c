/* gdr.c - GPUDirect RDMA's selection chain (gdr.h). */
#include "ring/gdr.h"

#include <stdio.h>

/* Append one reason to the list in buf, after "; " where it has one. */
static void add_reason(char *buf, size_t cap, size_t *used, const char *text)
{
    if (*used < cap)
        *used += (size_t)snprintf(buf + *used, cap - *used, "%s%s", *used ? "; " : "", text);
}

enum hoop_gdr hoop_gdr_choose(const struct hoop_gdr_facts *f, char *why, size_t len)
{
    if (f->setting == 0) {
        snprintf(why, len, "GPUDirect RDMA off (HOOP_GPU_DIRECT=0): device data moves through "
                 "pinned host memory");
        return HOOP_GDR_STAGING;
    }
    if (f->emulated) {
        if (f->setting == 1) {
            snprintf(why, len, "emulated device memory (HOOP_GPU_EMULATE=1) is host memory: "
                     "sends leave from it directly, as with GPUDirect RDMA (HOOP_GPU_DIRECT=1)");
            return HOOP_GDR_EMULATED;
        }
        snprintf(why, len, "emulated device memory (HOOP_GPU_EMULATE=1): staged through pinned "
                 "host memory, as without an RDMA NIC (HOOP_GPU_DIRECT=1 sends from it)");
        return HOOP_GDR_STAGING;
    }
    if (!f->transport_can) {
        snprintf(why, len, "%sthe %s transport moves host memory only: device data moves "
                 "through pinned host memory (GPUDirect RDMA needs an RDMA NIC, under the verbs "
                 "transport or the ofi one with a provider that has FI_HMEM)",
                 f->setting == 1 ? "HOOP_GPU_DIRECT=1, but " : "", f->transport);
        return f->setting == 1 ? HOOP_GDR_REFUSED : HOOP_GDR_STAGING;
    }
    const char *ro = "(receives land in pinned host memory)";
    if ((f->kinds & HOOP_DEVMEM_BIT(HOOP_DEVMEM_DMABUF)) && f->dmabuf_rc == 0) {
        snprintf(why, len, "GPUDirect RDMA by dma-buf: the %s transport registered device "
                 "memory, so sends leave from the GPU %s", f->transport, ro);
        return HOOP_GDR_DMABUF;
    }
    /* The reasons of the kinds the transport tried, in order. */
    char reasons[768] = "";
    size_t used = 0;
    if (f->kinds & HOOP_DEVMEM_BIT(HOOP_DEVMEM_DMABUF))
        add_reason(reasons, sizeof(reasons), &used,
                   f->dmabuf_rc == 1                   ? "dma-buf not tried"
                   : f->dmabuf_why && *f->dmabuf_why ? f->dmabuf_why
                                                     : "dma-buf refused");
    if (f->kinds & HOOP_DEVMEM_BIT(HOOP_DEVMEM_PEERMEM)) {
        if (f->peermem_loaded && f->peermem_rc == 0) {
            snprintf(why, len, "GPUDirect RDMA by nvidia-peermem (%s): the %s transport "
                     "registered device memory, so sends leave from the GPU %s", reasons,
                     f->transport, ro);
            return HOOP_GDR_PEERMEM;
        }
        add_reason(reasons, sizeof(reasons), &used,
                   !f->peermem_loaded ? "nvidia-peermem not loaded (no /sys/module/nvidia_peermem)"
                   : f->peermem_why && *f->peermem_why ? f->peermem_why
                                                       : "nvidia-peermem refused");
    }
    if (f->kinds & HOOP_DEVMEM_BIT(HOOP_DEVMEM_HMEM)) {
        if (f->hmem_rc == 0) {
            snprintf(why, len, "GPUDirect RDMA through libfabric's FI_HMEM: the %s transport "
                     "registered device memory, so sends leave from the GPU %s", f->transport, ro);
            return HOOP_GDR_HMEM;
        }
        add_reason(reasons, sizeof(reasons), &used,
                   f->hmem_rc == 1                 ? "FI_HMEM not tried"
                   : f->hmem_why && *f->hmem_why ? f->hmem_why
                                                 : "FI_HMEM refused");
    }
    snprintf(why, len, "%sno GPUDirect RDMA on the %s transport (%s): device data moves "
             "through pinned host memory", f->setting == 1 ? "HOOP_GPU_DIRECT=1, but " : "",
             f->transport, reasons);
    return f->setting == 1 ? HOOP_GDR_REFUSED : HOOP_GDR_STAGING;
}
