/* direct.c - what GPUDirect RDMA asks of the GPU (gpu.h): a dma-buf of
 * device memory for a NIC to register. Driver functions only through
 * hoop_gpu_driver_fn. (NICs only read device memory here: receives land
 * in pinned host memory, so no flush of NIC writes is ever needed.) */
#include "gpu/gpu.h"

#include <stdio.h>

#ifdef HOOP_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

typedef CUresult (*range_handle_fn)(void *handle, CUdeviceptr dptr, size_t size,
                                    CUmemRangeHandleType type, unsigned long long flags);
typedef CUresult (*error_name_fn)(CUresult e, const char **s);

int hoop_gpu_dmabuf_export(const void *p, size_t len, int *fd, uint64_t *offset, size_t *mapped,
                           char *why, size_t why_len)
{
    *fd = -1;
    if (hoop_gpu_emulated()) {
        snprintf(why, why_len, "dma-buf: emulated device memory is host memory");
        return -1;
    }
    const char *reason = NULL;
    if (!hoop_gpu_available(&reason)) {
        snprintf(why, why_len, "dma-buf: %s", reason);
        return -1;
    }
    range_handle_fn get = (range_handle_fn)hoop_gpu_driver_fn("cuMemGetHandleForAddressRange");
    if (!get) {
        snprintf(why, why_len, "dma-buf: the driver has no cuMemGetHandleForAddressRange");
        return -1;
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, base = a & ~((uintptr_t)page - 1);
    size_t size = ((a + len - base) + (size_t)page - 1) & ~((size_t)page - 1);
    int h = -1;
    CUresult e = get(&h, (CUdeviceptr)base, size, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (e != CUDA_SUCCESS) {
        const char *name = NULL;
        error_name_fn en = (error_name_fn)hoop_gpu_driver_fn("cuGetErrorName");
        if (!en || en(e, &name) != CUDA_SUCCESS)
            name = NULL;
        if (name)
            snprintf(why, why_len, "dma-buf refused: cuMemGetHandleForAddressRange: %s", name);
        else
            snprintf(why, why_len, "dma-buf refused: cuMemGetHandleForAddressRange: error %d",
                     (int)e);
        return -1;
    }
    *fd = h;
    *offset = a - base;
    *mapped = size;
    return 0;
}

#else

int hoop_gpu_dmabuf_export(const void *p, size_t len, int *fd, uint64_t *offset, size_t *mapped,
                           char *why, size_t why_len)
{
    *fd = -1;
    snprintf(why, why_len, "dma-buf: %s",
             hoop_gpu_emulated() ? "emulated device memory is host memory"
                                 : "libhoop was built without CUDA");
    return -1;
}

#endif
