/* device.c - collectives on device buffers: the ring's GPU pipe, made on
 * the first such call and kept, and the whole-buffer staging of the paths
 * that do not run on the pipeline (recursive doubling, alltoall, one
 * rank). The pipelined schedules use the pipe in pipeline_device.c. */
#include "ring/ring.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "gpu/gpu.h"
#include "ring/gdr.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GDR_PROBE_BYTES (64u << 10)

/* GPUDirect RDMA's selection chain, once, when the pipe is made: the
 * facts (HOOP_GPU_DIRECT, the transport, a trial registration of a small
 * device buffer in each way the transport knows: by dma-buf, through
 * nvidia-peermem, through libfabric's FI_HMEM), the choice
 * (gdr.h), said at info level. */
static hoop_status_t gdr_select(struct hoop_ring *r, int device, const char *what)
{
    struct hoop_gdr_facts f = {.dmabuf_rc = 1, .peermem_rc = 1, .hmem_rc = 1};
    int setting;
    if (hoop_param_auto01("HOOP_GPU_DIRECT", &setting))
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s", r->rank, hoop_last_error());
    f.setting = setting == HOOP_PARAM_AUTO ? -1 : setting;
    r->gdr_send = r->gdr_nic = 0;
    if (!r->ops || !r->tp)
        return HOOP_OK; /* one rank: nothing leaves */
    f.emulated = hoop_gpu_emulated();
    f.transport = r->ops->name;
    f.transport_can = r->ops->device_memory_trial && r->ops->use_device_memory;
    f.kinds = f.transport_can ? r->ops->device_memory_kinds : 0;
    const unsigned dmabuf = HOOP_DEVMEM_BIT(HOOP_DEVMEM_DMABUF);
    char dwhy[256] = "", pwhy[256] = "", hwhy[256] = "", why[1024];
    if (f.setting != 0 && !f.emulated && f.kinds) {
        void *p = NULL;
        if (hoop_gpu_malloc(&p, GDR_PROBE_BYTES, dwhy, sizeof(dwhy))) {
            /* No trial can run: the allocation's failure is the reason. */
            f.dmabuf_rc = f.hmem_rc = -1;
            snprintf(hwhy, sizeof(hwhy), "%s", dwhy);
        } else {
            if (f.kinds & dmabuf) {
                int fd = -1;
                uint64_t off = 0;
                size_t mapped = 0;
                f.dmabuf_rc = hoop_gpu_dmabuf_export(p, GDR_PROBE_BYTES, &fd, &off, &mapped, dwhy,
                                                     sizeof(dwhy));
                if (!f.dmabuf_rc) {
                    f.dmabuf_rc = r->ops->device_memory_trial(r->tp, HOOP_DEVMEM_DMABUF, device,
                                                              p, GDR_PROBE_BYTES, fd, off, dwhy,
                                                              sizeof(dwhy));
                    close(fd);
                }
            }
            f.peermem_loaded = access("/sys/module/nvidia_peermem", F_OK) == 0;
            if ((f.kinds & HOOP_DEVMEM_BIT(HOOP_DEVMEM_PEERMEM)) && f.dmabuf_rc &&
                f.peermem_loaded)
                f.peermem_rc = r->ops->device_memory_trial(r->tp, HOOP_DEVMEM_PEERMEM, device, p,
                                                           GDR_PROBE_BYTES, -1, 0, pwhy,
                                                           sizeof(pwhy));
            if (f.kinds & HOOP_DEVMEM_BIT(HOOP_DEVMEM_HMEM))
                f.hmem_rc = r->ops->device_memory_trial(r->tp, HOOP_DEVMEM_HMEM, device, p,
                                                        GDR_PROBE_BYTES, -1, 0, hwhy,
                                                        sizeof(hwhy));
            hoop_gpu_free(p);
        }
    }
    f.dmabuf_why = dwhy;
    f.peermem_why = pwhy;
    f.hmem_why = hwhy;
    enum hoop_gdr g = hoop_gdr_choose(&f, why, sizeof(why));
    if (g == HOOP_GDR_REFUSED)
        return hoop_error(HOOP_ERR_UNSUPPORTED, "rank %d: %s on device buffers (GPU %d): %s",
                          r->rank, what, device, why);
    HOOP_INFO("rank %d: device buffers on GPU %d: %s", r->rank, device, why);
    int kind = g == HOOP_GDR_DMABUF    ? HOOP_DEVMEM_DMABUF
               : g == HOOP_GDR_PEERMEM ? HOOP_DEVMEM_PEERMEM
               : g == HOOP_GDR_HMEM    ? HOOP_DEVMEM_HMEM
                                       : 0;
    if (kind)
        r->ops->use_device_memory(r->tp, kind, device, hoop_gpu_dmabuf_export);
    r->gdr_send = g != HOOP_GDR_STAGING;
    r->gdr_nic = kind != 0;
    return HOOP_OK;
}

hoop_status_t hoop_ring_device_begin(struct hoop_ring *r, int device, const char *what)
{
    char why[320];
    if (!r->gpu) {
        size_t slot = r->chunk_bytes ? r->chunk_bytes : 4096;
        int n = r->depth > 0 ? r->depth : 1;
        if (hoop_gpu_pipe_open(&r->gpu, device, slot, n, why, sizeof(why)))
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers: cannot set up the "
                              "GPU pipeline: %s", r->rank, what, why);
        if (hoop_gpu_pipe_enter(r->gpu, why, sizeof(why)))
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers: %s", r->rank,
                              what, why);
        hoop_status_t st = gdr_select(r, device, what);
        hoop_gpu_pipe_leave(r->gpu);
        if (st) {
            hoop_gpu_pipe_close(r->gpu);
            r->gpu = NULL;
            return st;
        }
    } else if (hoop_gpu_pipe_device(r->gpu) != device) {
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s: the buffers are on GPU %d, but this "
                          "communicator's earlier device calls were on GPU %d; a communicator "
                          "works with one GPU (make one per GPU)", r->rank, what, device,
                          hoop_gpu_pipe_device(r->gpu));
    }
    if (hoop_gpu_pipe_enter(r->gpu, why, sizeof(why)))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers: %s", r->rank, what,
                          why);
    r->on_gpu = 1;
    return HOOP_OK;
}

void hoop_ring_device_end(struct hoop_ring *r)
{
    if (r->on_gpu && r->gpu)
        hoop_gpu_pipe_leave(r->gpu);
    r->on_gpu = 0;
}

hoop_status_t hoop_ring_stage_in(struct hoop_ring *r, int which, const void *src, size_t bytes,
                                 void **host, const char *what)
{
    char why[320];
    if (hoop_gpu_pipe_host(r->gpu, (enum hoop_gpu_host)which, bytes, host, why, sizeof(why)) ||
        (src && bytes &&
         (hoop_gpu_pipe_copy(r->gpu, *host, src, bytes, why, sizeof(why)) ||
          hoop_gpu_pipe_drain(r->gpu, why, sizeof(why)))))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers: staging %zu bytes "
                          "through pinned host memory: %s", r->rank, what, bytes, why);
    return HOOP_OK;
}

hoop_status_t hoop_ring_device_copy(struct hoop_ring *r, void *dst, const void *src, size_t bytes,
                                    const char *what)
{
    char why[320];
    if (bytes && (hoop_gpu_pipe_copy(r->gpu, dst, src, bytes, why, sizeof(why)) ||
                  hoop_gpu_pipe_drain(r->gpu, why, sizeof(why))))
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers: a copy of %zu bytes: "
                          "%s", r->rank, what, bytes, why);
    return HOOP_OK;
}
