/* alloc.c - device memory and devices for the layers, programs and tests
 * above the library's collectives (the engine's fusion buffer, ring_bench
 * -G, the GPU tests): allocation, copies, which device, and a device in
 * words. Under HOOP_GPU_EMULATE=1 "device memory" is host memory, and the
 * memory calls work on it as the CPU would. */
#include "gpu/gpu.h"
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The emulation's side of the memory calls: 1 when it took the call. */
static int emu_malloc(void **p, size_t bytes, char *why, size_t why_len, int *rc)
{
    if (!hoop_gpu_emulated())
        return 0;
    *p = malloc(bytes ? bytes : 1);
    *rc = *p ? 0 : -1;
    if (!*p && why && why_len)
        snprintf(why, why_len, "out of memory for %zu bytes (emulated device memory)", bytes);
    return 1;
}

static int emu_copy(void *dst, const void *src, size_t bytes)
{
    if (!hoop_gpu_emulated())
        return 0;
    if (bytes)
        memmove(dst, src, bytes);
    return 1;
}

static int emu_set(void *p, int v, size_t bytes)
{
    if (!hoop_gpu_emulated())
        return 0;
    memset(p, v, bytes);
    return 1;
}

#ifdef HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>

/* -1 with why saying that no GPU can be used here, else 0. */
static int no_gpu(const char *what, char *why, size_t why_len)
{
    const char *reason = NULL;
    if (hoop_gpu_available(&reason))
        return 0;
    if (why && why_len)
        snprintf(why, why_len, "%s: %s", what, reason);
    return -1;
}

/* -1 with why saying "<what> failed (<error name>: <error string>)". */
static int cuda_failed(cudaError_t e, const char *what, char *why, size_t why_len)
{
    if (why && why_len)
        snprintf(why, why_len, "%s failed (%s: %s)", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
    /* Not sticky: taken off the thread so that the caller's next
     * cudaGetLastError does not report it as theirs. */
    cudaGetLastError();
    return -1;
}

int hoop_gpu_malloc(void **p, size_t bytes, char *why, size_t why_len)
{
    char what[96];
    int rc;
    if (emu_malloc(p, bytes, why, why_len, &rc))
        return rc;
    *p = NULL;
    if (no_gpu("cannot allocate device memory", why, why_len))
        return -1;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        snprintf(what, sizeof(what), "cudaMalloc of %zu bytes", bytes);
        return cuda_failed(e, what, why, why_len);
    }
    return 0;
}

void hoop_gpu_free(void *p)
{
    if (hoop_gpu_emulated()) {
        free(p);
        return;
    }
    if (p && hoop_gpu_available(NULL) && cudaFree(p) != cudaSuccess)
        cudaGetLastError();
}

/* cudaMemcpy between two device buffers and cudaMemset of device memory
 * return before the device is done: wait for the legacy default stream,
 * where both queued their work. */
static int finish(const char *call, size_t bytes, char *why, size_t why_len)
{
    char what[96];
    cudaError_t e = cudaStreamSynchronize(0);
    if (e == cudaSuccess)
        return 0;
    snprintf(what, sizeof(what), "waiting for a %s of %zu bytes", call, bytes);
    return cuda_failed(e, what, why, why_len);
}

int hoop_gpu_memcpy(void *dst, const void *src, size_t bytes, char *why, size_t why_len)
{
    char what[96];
    if (emu_copy(dst, src, bytes))
        return 0;
    if (no_gpu("cannot copy to or from device memory", why, why_len))
        return -1;
    if (bytes == 0)
        return 0;
    cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault);
    if (e != cudaSuccess) {
        snprintf(what, sizeof(what), "cudaMemcpy of %zu bytes", bytes);
        return cuda_failed(e, what, why, why_len);
    }
    return finish("cudaMemcpy", bytes, why, why_len);
}

int hoop_gpu_memset(void *p, int v, size_t bytes, char *why, size_t why_len)
{
    char what[96];
    if (emu_set(p, v, bytes))
        return 0;
    if (no_gpu("cannot set device memory", why, why_len))
        return -1;
    if (bytes == 0)
        return 0;
    cudaError_t e = cudaMemset(p, v, bytes);
    if (e != cudaSuccess) {
        snprintf(what, sizeof(what), "cudaMemset of %zu bytes", bytes);
        return cuda_failed(e, what, why, why_len);
    }
    return finish("cudaMemset", bytes, why, why_len);
}

int hoop_gpu_device_count(void)
{
    int n = 0;
    if (!hoop_gpu_available(NULL))
        return 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int hoop_gpu_set_device(int dev, char *why, size_t why_len)
{
    char what[96];
    if (hoop_gpu_emulated())
        return 0;
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == dev)
        return 0;
    if (no_gpu("cannot choose a GPU", why, why_len))
        return -1;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        snprintf(what, sizeof(what), "cudaSetDevice(%d) of %d devices", dev,
                 hoop_gpu_device_count());
        return cuda_failed(e, what, why, why_len);
    }
    return 0;
}

int hoop_gpu_current_device(void)
{
    int dev = -1;
    if (!hoop_gpu_available(NULL))
        return -1;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return dev;
}

int hoop_gpu_device_describe(int dev, char *out, size_t len)
{
    char what[64], pci[32];
    struct cudaDeviceProp prop;
    cudaError_t e;
    if (no_gpu("no GPU to describe", out, len))
        return -1;
    snprintf(what, sizeof(what), "cudaGetDeviceProperties of GPU %d", dev);
    if ((e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        return cuda_failed(e, what, out, len);
    snprintf(what, sizeof(what), "cudaDeviceGetPCIBusId of GPU %d", dev);
    if ((e = cudaDeviceGetPCIBusId(pci, (int)sizeof(pci), dev)) != cudaSuccess)
        return cuda_failed(e, what, out, len);
    prop.name[sizeof(prop.name) - 1] = '\0';
    snprintf(out, len, "GPU %d: %s, sm_%d%d, PCI %s", dev, prop.name, prop.major, prop.minor, pci);
    return 0;
}

#else /* built without CUDA */

#define WITHOUT_CUDA "libhoop was built without CUDA (no nvcc, or CUDA=0)"

int hoop_gpu_malloc(void **p, size_t bytes, char *why, size_t why_len)
{
    int rc;
    if (emu_malloc(p, bytes, why, why_len, &rc))
        return rc;
    *p = NULL;
    if (why && why_len)
        snprintf(why, why_len, "cannot allocate device memory: " WITHOUT_CUDA);
    return -1;
}

void hoop_gpu_free(void *p)
{
    if (hoop_gpu_emulated())
        free(p);
}

int hoop_gpu_memcpy(void *dst, const void *src, size_t bytes, char *why, size_t why_len)
{
    if (emu_copy(dst, src, bytes))
        return 0;
    if (why && why_len)
        snprintf(why, why_len, "cannot copy to or from device memory: " WITHOUT_CUDA);
    return -1;
}

int hoop_gpu_memset(void *p, int v, size_t bytes, char *why, size_t why_len)
{
    if (emu_set(p, v, bytes))
        return 0;
    if (why && why_len)
        snprintf(why, why_len, "cannot set device memory: " WITHOUT_CUDA);
    return -1;
}

int hoop_gpu_device_count(void)
{
    return 0;
}

int hoop_gpu_set_device(int dev, char *why, size_t why_len)
{
    if (hoop_gpu_emulated())
        return 0;
    if (why && why_len)
        snprintf(why, why_len, "cannot choose a GPU: " WITHOUT_CUDA);
    return -1;
}

int hoop_gpu_current_device(void)
{
    return -1;
}

int hoop_gpu_device_describe(int dev, char *out, size_t len)
{
    if (out && len)
        snprintf(out, len, "no GPU to describe: " WITHOUT_CUDA);
    return -1;
}

int hoop_gpu_scale(void *buf, size_t n, hoop_dtype_t dtype, double f, char *why, size_t why_len)
{
    if (hoop_gpu_emulated()) {
        hoop_reduce_scale(buf, n, dtype, f);
        return 0;
    }
    if (why && why_len)
        snprintf(why, why_len, "cannot scale device memory: " WITHOUT_CUDA);
    return -1;
}

#endif
