/* mem.c - whether CUDA is here, and the memory kind of a pointer. */
#include "gpu/gpu.h"

#include <pthread.h>
#include <stdio.h>

#ifdef HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static int gpu_here;
static char gpu_why[256];

static void gpu_probe(void)
{
#ifdef HOOP_HAVE_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(gpu_why, sizeof(gpu_why), "no CUDA device can be used here (%s: %s)",
                 cudaGetErrorName(e), cudaGetErrorString(e));
        return;
    }
    if (n <= 0) {
        snprintf(gpu_why, sizeof(gpu_why), "the CUDA driver sees no device");
        return;
    }
    gpu_here = 1;
#else
    snprintf(gpu_why, sizeof(gpu_why), "libhoop was built without CUDA (no nvcc, or CUDA=0)");
#endif
}

HOOP_API int hoop_cuda_built(void)
{
    return hoop_gpu_built();
}

int hoop_gpu_built(void)
{
#ifdef HOOP_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int hoop_gpu_available(const char **why)
{
    pthread_once(&gpu_once, gpu_probe);
    if (!gpu_here && why)
        *why = gpu_why;
    return gpu_here;
}

struct hoop_mem hoop_gpu_mem_kind(const void *p)
{
    struct hoop_mem m = {HOOP_MEM_HOST, -1};
    if (p && hoop_gpu_emulated()) {
        /* HOOP_GPU_EMULATE=1 (pipe.c): every buffer is GPU 0's. */
        m.kind = HOOP_MEM_DEVICE;
        m.device = 0;
        return m;
    }
    if (!p || !hoop_gpu_available(NULL))
        return m;
#ifdef HOOP_HAVE_CUDA
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        /* A pointer CUDA does not know (older runtimes say so with an
         * error): host memory. The error is not sticky; it is taken off
         * the thread's last error so that the caller's next
         * cudaGetLastError does not report it as theirs. */
        cudaGetLastError();
        return m;
    }
    switch (a.type) {
    case cudaMemoryTypeDevice:
        m.kind = HOOP_MEM_DEVICE;
        m.device = a.device;
        break;
    case cudaMemoryTypeManaged:
        m.kind = HOOP_MEM_MANAGED;
        m.device = a.device;
        break;
    case cudaMemoryTypeHost:
        m.kind = HOOP_MEM_PINNED;
        break;
    default:
        break;
    }
#endif
    return m;
}

const char *hoop_gpu_mem_str(enum hoop_mem_kind kind)
{
    switch (kind) {
    case HOOP_MEM_HOST: return "host";
    case HOOP_MEM_PINNED: return "pinned host";
    case HOOP_MEM_MANAGED: return "managed";
    case HOOP_MEM_DEVICE: return "device";
    }
    return "unknown";
}

#ifndef HOOP_HAVE_CUDA
int hoop_gpu_reduce(void *dst, const void *a, const void *b, size_t n, hoop_dtype_t dtype,
                    hoop_op_t op, int avg_n, void *stream, char *why, size_t why_len)
{
    snprintf(why, why_len, "device reduction: libhoop was built without CUDA");
    return -1;
}

int hoop_gpu_reduce2(void *dst, void *dst2, const void *a, const void *b, size_t n,
                     hoop_dtype_t dtype, hoop_op_t op, int avg_n, void *stream, char *why,
                     size_t why_len)
{
    snprintf(why, why_len, "device reduction: libhoop was built without CUDA");
    return -1;
}
#endif
