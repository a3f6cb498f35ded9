/* pipe.c - the pipeline's stream, events and pinned buffers (gpu.h). With
 * HOOP_GPU_EMULATE=1 the same calls go to emulate.c; built without CUDA,
 * only those. */
#include "gpu/emulate.h"
#include "gpu/gpu.h"
#include "common/param.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

struct hoop_gpu_pipe {
    int device;
    int emulated;
    struct hoop_gpu_emu *emu; /* emulated: the queue and the buffers */
    void *slots;
    size_t slots_bytes;
    void *host[HOOP_GPU_HOST_N];
    size_t host_bytes[HOOP_GPU_HOST_N];
    void *dwork; /* device memory for partial sums */
    size_t dwork_bytes;
    int prev_device; /* the caller's, kept by enter; -1 none */
#ifdef HOOP_HAVE_CUDA
    cudaStream_t stream;
    cudaEvent_t ev[HOOP_GPU_EVENTS];
    int nev;
#endif
};

static pthread_once_t emu_once = PTHREAD_ONCE_INIT;
static int emu_on;
static _Atomic int emu_forced = -1;

static void emu_read(void)
{
    const char *v = hoop_param_str("HOOP_GPU_EMULATE");
    emu_on = v && v[0] == '1' && !v[1];
}

int hoop_gpu_emulated(void)
{
    int f = atomic_load_explicit(&emu_forced, memory_order_relaxed);
    if (f >= 0)
        return f;
    pthread_once(&emu_once, emu_read);
    return emu_on;
}

void hoop_gpu_emulate_force(int on)
{
    atomic_store_explicit(&emu_forced, on < 0 ? -1 : !!on, memory_order_relaxed);
}

#ifdef HOOP_HAVE_CUDA
static int cuda_failed(cudaError_t e, const char *what, int device, char *why, size_t len)
{
    snprintf(why, len, "GPU %d: %s: %s: %s", device, what, cudaGetErrorName(e),
             cudaGetErrorString(e));
    cudaGetLastError(); /* not the caller's to find later */
    return (int)e ? (int)e : -1;
}
#define CUDA_TRY(g, call, what)                                                                    \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return cuda_failed(e_, what, (g)->device, why, why_len);                               \
    } while (0)
#endif

/* The two refusals every call shares. */
static int bad_event(unsigned ev, char *why, size_t why_len)
{
    snprintf(why, why_len, "GPU event %u is not one of the pipeline's %d", ev, HOOP_GPU_EVENTS);
    return -1;
}

#ifndef HOOP_HAVE_CUDA
static int no_cuda(char *why, size_t why_len)
{
    snprintf(why, why_len, "libhoop was built without CUDA");
    return -1;
}
#endif

int hoop_gpu_pipe_open(struct hoop_gpu_pipe **out, int device, size_t slot_bytes, int nslots,
                       char *why, size_t why_len)
{
    *out = NULL;
    struct hoop_gpu_pipe *g = calloc(1, sizeof(*g));
    if (!g) {
        snprintf(why, why_len, "out of memory for the GPU pipeline");
        return -1;
    }
    g->device = device;
    g->prev_device = -1;
    g->slots_bytes = slot_bytes * (size_t)nslots;
    if (hoop_gpu_emulated()) {
        g->emulated = 1;
        g->emu = hoop_gpu_emu_open(g->slots_bytes, &g->slots);
        if (!g->emu) {
            free(g);
            snprintf(why, why_len, "out of memory for the emulated GPU pipeline");
            return -1;
        }
        *out = g;
        return 0;
    }
#ifdef HOOP_HAVE_CUDA
    int rc = 0, prev = -1;
    cudaError_t e;
    if ((e = cudaGetDevice(&prev)) != cudaSuccess ||
        (prev != device && (e = cudaSetDevice(device)) != cudaSuccess)) {
        rc = cuda_failed(e, "selecting the device", device, why, why_len);
        goto fail;
    }
    if ((e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        rc = cuda_failed(e, "creating the pipeline's stream", device, why, why_len);
        goto fail;
    }
    for (; g->nev < HOOP_GPU_EVENTS; g->nev++)
        if ((e = cudaEventCreateWithFlags(&g->ev[g->nev], cudaEventDisableTiming)) !=
            cudaSuccess) {
            rc = cuda_failed(e, "creating the pipeline's events", device, why, why_len);
            goto fail;
        }
    if ((e = cudaHostAlloc(&g->slots, g->slots_bytes, cudaHostAllocPortable | cudaHostAllocMapped)) !=
        cudaSuccess) {
        g->slots = NULL;
        rc = cuda_failed(e, "allocating pinned receive slots", device, why, why_len);
        goto fail;
    }
    memset(g->slots, 0, g->slots_bytes);
    if (prev >= 0 && prev != device)
        cudaSetDevice(prev);
    *out = g;
    return 0;
fail:
    hoop_gpu_pipe_close(g);
    if (prev >= 0 && prev != device)
        cudaSetDevice(prev);
    return rc;
#else
    free(g);
    snprintf(why, why_len, "libhoop was built without CUDA (no nvcc, or CUDA=0)");
    return -1;
#endif
}

void hoop_gpu_pipe_close(struct hoop_gpu_pipe *g)
{
    if (!g)
        return;
    if (g->emulated) {
        hoop_gpu_emu_close(g->emu);
        for (int i = 0; i < HOOP_GPU_HOST_N; i++)
            free(g->host[i]);
        free(g->dwork);
        free(g);
        return;
    }
#ifdef HOOP_HAVE_CUDA
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != g->device)
        cudaSetDevice(g->device);
    if (g->stream)
        cudaStreamSynchronize(g->stream);
    for (int i = 0; i < g->nev; i++)
        cudaEventDestroy(g->ev[i]);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    if (g->slots)
        cudaFreeHost(g->slots);
    for (int i = 0; i < HOOP_GPU_HOST_N; i++)
        if (g->host[i])
            cudaFreeHost(g->host[i]);
    if (g->dwork)
        cudaFree(g->dwork);
    if (prev >= 0 && prev != g->device)
        cudaSetDevice(prev);
    cudaGetLastError();
#endif
    free(g);
}

int hoop_gpu_pipe_device(const struct hoop_gpu_pipe *g)
{
    return g->device;
}

void *hoop_gpu_pipe_slots(const struct hoop_gpu_pipe *g)
{
    return g->slots;
}

int hoop_gpu_pipe_enter(struct hoop_gpu_pipe *g, char *why, size_t why_len)
{
    g->prev_device = -1;
    if (g->emulated)
        return 0;
#ifdef HOOP_HAVE_CUDA
    int cur = -1;
    CUDA_TRY(g, cudaGetDevice(&cur), "asking for the current device");
    if (cur != g->device) {
        CUDA_TRY(g, cudaSetDevice(g->device), "selecting the device");
        g->prev_device = cur;
    }
    return 0;
#else
    return no_cuda(why, why_len);
#endif
}

void hoop_gpu_pipe_leave(struct hoop_gpu_pipe *g)
{
#ifdef HOOP_HAVE_CUDA
    if (!g->emulated && g->prev_device >= 0)
        cudaSetDevice(g->prev_device);
#endif
    g->prev_device = -1;
}

/* A round size to grow to, so that a loop of slowly growing calls does
 * not allocate each time. */
static size_t grown(size_t bytes)
{
    size_t want = 1u << 20;
    while (want < bytes && want < ((size_t)1 << 62))
        want <<= 1;
    return want;
}

/* *buf (of *have bytes) grown to hold bytes: pinned host memory, or
 * device memory on the pipe's GPU. *p is the buffer. */
static int grow(struct hoop_gpu_pipe *g, void **buf, size_t *have, size_t bytes, int on_device,
                void **p, char *why, size_t why_len)
{
    if (*buf && *have >= bytes) {
        *p = *buf;
        return 0;
    }
    size_t want = grown(bytes);
    void *n = NULL;
    if (g->emulated) {
        n = aligned_alloc(64, want);
        if (!n) {
            snprintf(why, why_len, "out of memory for %zu bytes of (emulated) %s memory", want,
                     on_device ? "device" : "pinned");
            return -1;
        }
        hoop_gpu_emu_drain(g->emu); /* nothing queued may still reach the old one */
        free(*buf);
    } else {
#ifdef HOOP_HAVE_CUDA
        CUDA_TRY(g, cudaStreamSynchronize(g->stream), "waiting for the pipeline's stream");
        cudaError_t e = on_device ? cudaMalloc(&n, want)
                                  : cudaHostAlloc(&n, want, cudaHostAllocPortable | cudaHostAllocMapped);
        if (e != cudaSuccess) {
            char what[112];
            snprintf(what, sizeof(what), "allocating %zu bytes of %s", want,
                     on_device ? "device memory for partial sums" : "pinned host memory");
            return cuda_failed(e, what, g->device, why, why_len);
        }
        if (*buf && on_device)
            cudaFree(*buf);
        else if (*buf)
            cudaFreeHost(*buf);
#else
        return no_cuda(why, why_len);
#endif
    }
    *buf = n;
    *have = want;
    *p = n;
    return 0;
}

int hoop_gpu_pipe_host(struct hoop_gpu_pipe *g, enum hoop_gpu_host which, size_t bytes, void **p,
                       char *why, size_t why_len)
{
    return grow(g, &g->host[which], &g->host_bytes[which], bytes ? bytes : 1, 0, p, why, why_len);
}

int hoop_gpu_pipe_dwork(struct hoop_gpu_pipe *g, size_t bytes, void **p, char *why,
                        size_t why_len)
{
    return grow(g, &g->dwork, &g->dwork_bytes, bytes ? bytes : 1, 1, p, why, why_len);
}

size_t hoop_gpu_pipe_pinned(const struct hoop_gpu_pipe *g)
{
    size_t b = g->slots_bytes;
    for (int i = 0; i < HOOP_GPU_HOST_N; i++)
        b += g->host[i] ? g->host_bytes[i] : 0;
    return b;
}

int hoop_gpu_pipe_copy(struct hoop_gpu_pipe *g, void *dst, const void *src, size_t bytes,
                       char *why, size_t why_len)
{
    if (g->emulated)
        return hoop_gpu_emu_copy(g->emu, dst, src, bytes, why, why_len);
#ifdef HOOP_HAVE_CUDA
    CUDA_TRY(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g->stream), "queueing a copy");
    return 0;
#else
    return no_cuda(why, why_len);
#endif
}

int hoop_gpu_pipe_reduce(struct hoop_gpu_pipe *g, void *dst, void *dst2, const void *a,
                         const void *b, size_t n, hoop_dtype_t dtype, hoop_op_t op, int avg_n,
                         char *why, size_t why_len)
{
    if (g->emulated)
        return hoop_gpu_emu_reduce(g->emu, dst, dst2, a, b, n, dtype, op, avg_n, why, why_len);
#ifdef HOOP_HAVE_CUDA
    int rc = hoop_gpu_reduce2(dst, dst2, a, b, n, dtype, op, avg_n, g->stream, why, why_len);
    if (rc) {
        size_t l = strlen(why);
        snprintf(why + l, why_len - l, " (GPU %d)", g->device);
    }
    return rc;
#else
    return no_cuda(why, why_len);
#endif
}

int hoop_gpu_pipe_mark(struct hoop_gpu_pipe *g, unsigned ev, char *why, size_t why_len)
{
    if (ev >= HOOP_GPU_EVENTS)
        return bad_event(ev, why, why_len);
    if (g->emulated)
        return hoop_gpu_emu_mark(g->emu, ev);
#ifdef HOOP_HAVE_CUDA
    CUDA_TRY(g, cudaEventRecord(g->ev[ev], g->stream), "recording an event");
    return 0;
#else
    return no_cuda(why, why_len);
#endif
}

int hoop_gpu_pipe_passed(struct hoop_gpu_pipe *g, unsigned ev, char *why, size_t why_len)
{
    if (ev >= HOOP_GPU_EVENTS)
        return bad_event(ev, why, why_len);
    if (g->emulated)
        return hoop_gpu_emu_passed(g->emu, ev);
#ifdef HOOP_HAVE_CUDA
    cudaError_t e = cudaEventQuery(g->ev[ev]);
    if (e == cudaSuccess)
        return 1;
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return 0;
    }
    cuda_failed(e, "waiting for the pipeline's copies and reductions", g->device, why, why_len);
    return -1;
#else
    return no_cuda(why, why_len);
#endif
}

int hoop_gpu_pipe_drain(struct hoop_gpu_pipe *g, char *why, size_t why_len)
{
    if (g->emulated) {
        hoop_gpu_emu_drain(g->emu);
        return 0;
    }
#ifdef HOOP_HAVE_CUDA
    CUDA_TRY(g, cudaStreamSynchronize(g->stream), "waiting for the pipeline's stream");
    return 0;
#else
    return no_cuda(why, why_len);
#endif
}
