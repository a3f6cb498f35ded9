/* mem.c - whether CUDA is here, and the memory kind of a pointer. */
#include "gpu/gpu.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef HOOP_HAVE_CUDA
/* cuda.h for the driver's types and enum values only: libcuda is never
 * linked, its functions are reached through the runtime's entry points. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static int gpu_here;
static char gpu_why[256];

#ifdef HOOP_HAVE_CUDA
/* The driver's cuPointerGetAttributes, once a device is known to be here;
 * NULL where the driver does not give it (the runtime answers then). The
 * runtime's cudaPointerGetAttributes makes the primary context of a device
 * when none exists yet, hundreds of MB of GPU memory for a process that
 * only ever passes host buffers; the driver's call answers without one. */
typedef CUresult (*pointer_attrs_fn)(unsigned int n, CUpointer_attribute *attrs, void **data,
                                     CUdeviceptr ptr);
static pointer_attrs_fn drv_pointer_attrs;

/* The ABI of the driver functions asked for: CUDA 12.0's, which every
 * driver that runs this runtime has. */
#define DRIVER_ABI_VERSION 12000

void *hoop_gpu_driver_fn(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e =
        cudaGetDriverEntryPointByVersion(name, &fn, DRIVER_ABI_VERSION, cudaEnableDefault, &q);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return q == cudaDriverEntryPointSuccess ? fn : NULL;
}
#else
void *hoop_gpu_driver_fn(const char *name)
{
    return NULL;
}
#endif

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
    drv_pointer_attrs = (pointer_attrs_fn)hoop_gpu_driver_fn("cuPointerGetAttributes");
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

static struct hoop_mem mem_kind(const void *p, int emulated)
{
    struct hoop_mem m = {HOOP_MEM_HOST, -1};
    if (p && emulated) {
        /* HOOP_GPU_EMULATE=1 (pipe.c): every buffer is GPU 0's. */
        m.kind = HOOP_MEM_DEVICE;
        m.device = 0;
        return m;
    }
    if (!p || !hoop_gpu_available(NULL))
        return m;
#ifdef HOOP_HAVE_CUDA
    if (drv_pointer_attrs) {
        CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                     CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     CU_POINTER_ATTRIBUTE_IS_MANAGED};
        /* Each answer lands in eight zeroed bytes, whatever width the
         * driver writes (an enum, an int, a boolean). */
        uint64_t type = 0, ordinal = 0, managed = 0;
        void *data[3] = {&type, &ordinal, &managed};
        /* A pointer CUDA does not know gets CUDA_SUCCESS and zeros; an
         * error (a pointer of no UVA context) is no CUDA memory either.
         * The driver keeps no sticky last error to clear. */
        if (drv_pointer_attrs(3, at, data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
            return m;
        int32_t dev;
        memcpy(&dev, &ordinal, sizeof dev);
        if (managed) {
            m.kind = HOOP_MEM_MANAGED;
            m.device = dev;
        } else if ((uint32_t)type == CU_MEMORYTYPE_DEVICE) {
            m.kind = HOOP_MEM_DEVICE;
            m.device = dev;
        } else if ((uint32_t)type == CU_MEMORYTYPE_HOST) {
            m.kind = HOOP_MEM_PINNED;
        }
        return m;
    }
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

struct hoop_mem hoop_gpu_mem_kind(const void *p)
{
    return mem_kind(p, hoop_gpu_emulated());
}

void hoop_gpu_mem_kinds(const void *a, const void *b, struct hoop_mem *ka, struct hoop_mem *kb)
{
    int emulated = hoop_gpu_emulated();
    if (!emulated && !hoop_gpu_available(NULL)) {
        /* No device here: every pointer is host memory, asked once. */
        *ka = *kb = (struct hoop_mem){HOOP_MEM_HOST, -1};
        return;
    }
    *ka = mem_kind(a, emulated);
    /* In place: one question to the driver, not two. */
    *kb = b == a ? *ka : mem_kind(b, emulated);
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
