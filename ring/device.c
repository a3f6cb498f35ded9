/* device.c - collectives on device buffers: the ring's GPU pipe, made on
 * the first such call and kept, and the whole-buffer staging of the paths
 * that do not run on the pipeline (recursive doubling, alltoall, one
 * rank). The pipelined schedules use the pipe in pipeline.c. */
#include "ring/ring.h"
#include "common/status.h"
#include "gpu/gpu.h"

#include <stdio.h>

hoop_status_t hoop_ring_device_begin(struct hoop_ring *r, int device, const char *what)
{
    char why[320];
    if (!r->gpu) {
        size_t slot = r->chunk_bytes ? r->chunk_bytes : 4096;
        int n = r->depth > 0 ? r->depth : 1;
        if (hoop_gpu_pipe_open(&r->gpu, device, slot, n, why, sizeof(why)))
            return hoop_error(HOOP_ERR_SYSTEM, "rank %d: %s on device buffers: cannot set up the "
                              "GPU pipeline: %s", r->rank, what, why);
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
