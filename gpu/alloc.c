/* alloc.c - device memory for the layers above gpu/ (gpu.h). Under
 * HOOP_GPU_EMULATE=1 "device memory" is host memory, and these work on it
 * as the CPU would. */
#include "gpu/gpu.h"
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int emulated_malloc(void **p, size_t bytes, char *why, size_t why_len)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p) {
        snprintf(why, why_len, "out of memory for %zu bytes (emulated device memory)", bytes);
        return -1;
    }
    return 0;
}

#ifdef HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>

static int failed(cudaError_t e, const char *what, char *why, size_t len)
{
    snprintf(why, len, "%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    cudaGetLastError();
    return (int)e;
}

int hoop_gpu_set_device(int device, char *why, size_t why_len)
{
    if (hoop_gpu_emulated())
        return 0;
    int cur = -1;
    cudaError_t e = cudaGetDevice(&cur);
    if (e == cudaSuccess && cur != device)
        e = cudaSetDevice(device);
    return e == cudaSuccess ? 0 : failed(e, "selecting the device", why, why_len);
}

int hoop_gpu_malloc(void **p, size_t bytes, char *why, size_t why_len)
{
    if (hoop_gpu_emulated())
        return emulated_malloc(p, bytes, why, why_len);
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *p = NULL;
        char what[64];
        snprintf(what, sizeof(what), "cudaMalloc of %zu bytes", bytes);
        return failed(e, what, why, why_len);
    }
    return 0;
}

void hoop_gpu_free(void *p)
{
    if (hoop_gpu_emulated())
        free(p);
    else if (p)
        cudaFree(p);
}

int hoop_gpu_memcpy(void *dst, const void *src, size_t bytes, char *why, size_t why_len)
{
    if (hoop_gpu_emulated()) {
        memmove(dst, src, bytes);
        return 0;
    }
    cudaError_t e = bytes ? cudaMemcpy(dst, src, bytes, cudaMemcpyDefault) : cudaSuccess;
    return e == cudaSuccess ? 0 : failed(e, "cudaMemcpy", why, why_len);
}

int hoop_gpu_memset(void *p, int v, size_t bytes, char *why, size_t why_len)
{
    if (hoop_gpu_emulated()) {
        memset(p, v, bytes);
        return 0;
    }
    cudaError_t e = bytes ? cudaMemset(p, v, bytes) : cudaSuccess;
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : failed(e, "cudaMemset", why, why_len);
}

#else

static int without(char *why, size_t len)
{
    snprintf(why, len, "libhoop was built without CUDA");
    return -1;
}

int hoop_gpu_set_device(int device, char *why, size_t why_len)
{
    return hoop_gpu_emulated() ? 0 : without(why, why_len);
}

int hoop_gpu_malloc(void **p, size_t bytes, char *why, size_t why_len)
{
    if (hoop_gpu_emulated())
        return emulated_malloc(p, bytes, why, why_len);
    *p = NULL;
    return without(why, why_len);
}

void hoop_gpu_free(void *p)
{
    if (hoop_gpu_emulated())
        free(p);
}

int hoop_gpu_memcpy(void *dst, const void *src, size_t bytes, char *why, size_t why_len)
{
    if (hoop_gpu_emulated()) {
        memmove(dst, src, bytes);
        return 0;
    }
    return without(why, why_len);
}

int hoop_gpu_memset(void *p, int v, size_t bytes, char *why, size_t why_len)
{
    if (hoop_gpu_emulated()) {
        memset(p, v, bytes);
        return 0;
    }
    return without(why, why_len);
}

int hoop_gpu_scale(void *buf, size_t n, hoop_dtype_t dtype, double f, char *why, size_t why_len)
{
    if (hoop_gpu_emulated()) {
        hoop_reduce_scale(buf, n, dtype, f);
        return 0;
    }
    return without(why, why_len);
}

#endif
