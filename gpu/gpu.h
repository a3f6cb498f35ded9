/* gpu.h - what the library knows of CUDA memory, and the reduction kernels
 * on the device. The only way into gpu/ for the layers above (ring/ for
 * staging, collectives/ for argument checks); no CUDA type crosses it, so
 * those layers build the same with and without CUDA.
 *
 * Built with CUDA (make finds nvcc; HOOP_HAVE_CUDA), the CUDA runtime is
 * linked statically and never needs libcuda.so to load: on a machine
 * without a driver or a device the first question gets the runtime's
 * answer once, it is kept, and every pointer is host memory from then on.
 * Built without CUDA the same holds, with "built without CUDA" as the
 * answer. Driver functions, when the pipeline needs them, are reached only
 * through cudaGetDriverEntryPointByVersion, never by linking libcuda. */
#ifndef HOOP_GPU_GPU_H
#define HOOP_GPU_GPU_H

#include "hoop.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum hoop_mem_kind {
    HOOP_MEM_HOST = 0, /* plain host memory (or any pointer CUDA does not know) */
    HOOP_MEM_PINNED,   /* host memory CUDA pinned (cudaMallocHost, cudaHostRegister) */
    HOOP_MEM_MANAGED,  /* cudaMallocManaged */
    HOOP_MEM_DEVICE,   /* cudaMalloc: on GPU `device` */
};

struct hoop_mem {
    enum hoop_mem_kind kind;
    int device; /* the device ordinal for DEVICE and MANAGED, else -1 */
};

/* 1 when the library was built with CUDA. */
int hoop_gpu_built(void);

/* 1 when a CUDA driver and at least one device are here; else 0 and, when
 * why is not NULL, a sentence saying why (the runtime's error, such as
 * cudaErrorInsufficientDriver or cudaErrorNoDevice, or "built without
 * CUDA"). Asked once per process; the answer is kept. */
int hoop_gpu_available(const char **why);

/* The memory kind of p. Without CUDA, a driver or a device: HOST, at the
 * cost of reading a flag. With them, the driver's cuPointerGetAttributes
 * answers (reached through the runtime's entry points), which makes no
 * CUDA context: a process that passes only host buffers never gets one.
 * Where the driver does not give that function, the runtime's
 * cudaPointerGetAttributes answers (and may make the context). */
struct hoop_mem hoop_gpu_mem_kind(const void *p);

/* A memory kind in words ("host", "pinned host", "managed", "device"). */
const char *hoop_gpu_mem_str(enum hoop_mem_kind kind);

/* dst[i] = a[i] op b[i] for n elements of device (or managed) memory, on
 * the CUDA stream `stream` (a cudaStream_t; NULL for the legacy default
 * stream), with the bits of reduce/'s CPU kernels (hoop_reduce_kernel, the
 * same avg_n): f16 and bf16 widen to f32, combine, round to nearest even
 * once. Asynchronous: the kernel is queued, not waited for. 0, or the CUDA
 * error's number with a sentence in why (at least 128 bytes); built
 * without CUDA, -1 with why saying so. */
int hoop_gpu_reduce(void *dst, const void *a, const void *b, size_t n, hoop_dtype_t dtype,
                    hoop_op_t op, int avg_n, void *stream, char *why, size_t why_len);

/* Device memory and devices for the programs and tests above the library
 * (ring_bench -G, the GPU tests); the collectives never allocate with
 * these. Each returns 0, or -1 with a sentence in why (a why_len of at
 * least 128 bytes holds it) saying what failed and the CUDA error; built
 * without CUDA, or where no GPU can be used (hoop_gpu_available), -1 at
 * once saying so. */

/* cudaMalloc of bytes on the current device into *p (NULL on failure). */
int hoop_gpu_malloc(void **p, size_t bytes, char *why, size_t why_len);

/* cudaFree; NULL is nothing to free. */
void hoop_gpu_free(void *p);

/* bytes from src to dst, each host or device memory (cudaMemcpyDefault),
 * finished when it returns. */
int hoop_gpu_memcpy(void *dst, const void *src, size_t bytes, char *why, size_t why_len);

/* bytes of device memory at p set to (unsigned char)v, finished when it
 * returns. */
int hoop_gpu_memset(void *p, int v, size_t bytes, char *why, size_t why_len);

/* The number of devices this process can use; 0 where no GPU can be used. */
int hoop_gpu_device_count(void);

/* cudaSetDevice(dev) for the calling thread. */
int hoop_gpu_set_device(int dev, char *why, size_t why_len);

/* The calling thread's device (cudaGetDevice), -1 where no GPU can be used. */
int hoop_gpu_current_device(void);

/* Device dev in words, "GPU 0: NVIDIA H100 80GB HBM3, sm_90, PCI
 * 0000:17:00.0", into out; 0, or -1 with a sentence in out. */
int hoop_gpu_device_describe(int dev, char *out, size_t len);

#ifdef __cplusplus
}
#endif

#endif
