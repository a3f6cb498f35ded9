/* gdr.h - GPUDirect RDMA's selection chain: from what this rank found
 * (the setting, the transport, the trial registrations), how device data
 * reaches the NIC, and the sentence that says why. A pure function, so
 * that every branch is tested on machines with no GPU and no NIC;
 * device.c gathers the facts and acts on the answer. */
#ifndef HOOP_RING_GDR_H
#define HOOP_RING_GDR_H

#include "transport/transport.h"

#include <stddef.h>

enum hoop_gdr {
    HOOP_GDR_STAGING = 0, /* through the pipe's pinned host memory */
    HOOP_GDR_DMABUF,      /* sends leave from device memory, registered by dma-buf */
    HOOP_GDR_PEERMEM,     /* the same, registered through nvidia-peermem */
    HOOP_GDR_HMEM,        /* the same, registered through libfabric's FI_HMEM */
    HOOP_GDR_EMULATED,    /* HOOP_GPU_EMULATE with HOOP_GPU_DIRECT=1: sends from "device" memory */
    HOOP_GDR_REFUSED,     /* HOOP_GPU_DIRECT=1 where none can be had: an error */
};

struct hoop_gdr_facts {
    int setting;           /* HOOP_GPU_DIRECT: -1 auto, 0, 1 */
    int emulated;          /* HOOP_GPU_EMULATE=1 */
    const char *transport; /* its name */
    int transport_can;     /* it has device_memory_trial */
    unsigned kinds;        /* the kinds that trial takes (HOOP_DEVMEM_BIT) */
    int dmabuf_rc;         /* the dma-buf trial: 0 passed, else failed; 1 not tried */
    const char *dmabuf_why;
    int peermem_loaded;    /* /sys/module/nvidia_peermem */
    int peermem_rc;        /* as dmabuf_rc */
    const char *peermem_why;
    int hmem_rc;           /* as dmabuf_rc */
    const char *hmem_why;
};

/* The choice, and why in a sentence (for HOOP_LOG_LEVEL=info, and the
 * error of HOOP_GDR_REFUSED). */
enum hoop_gdr hoop_gdr_choose(const struct hoop_gdr_facts *f, char *why, size_t len);

#endif
