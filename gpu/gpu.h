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
#include <stdint.h>

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
/* The kinds of a call's two buffers under one reading of the emulation's
 * switch, which a test may turn on another thread (hoop_gpu_emulate_force):
 * never one buffer emulated and the other not. */
void hoop_gpu_mem_kinds(const void *a, const void *b, struct hoop_mem *ka, struct hoop_mem *kb);

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
/* The same, writing the result to dst and to dst2 in one pass (either may
 * be NULL; pinned host memory is reached through its mapping): the ring's
 * fused step, which keeps the device accumulator and fills the host slot
 * the next send leaves from. */
int hoop_gpu_reduce2(void *dst, void *dst2, const void *a, const void *b, size_t n,
                     hoop_dtype_t dtype, hoop_op_t op, int avg_n, void *stream, char *why,
                     size_t why_len);

/* ---- The pipeline's stream (pipe.c) ----
 *
 * What a communicator holds for the collectives on device buffers: one
 * stream on the buffers' GPU, events numbered 0..HOOP_GPU_EVENTS-1, pinned
 * receive slots, and pinned host buffers the transport moves the data
 * from and into (grown to the largest call, kept). The ring queues copies
 * and reductions on the stream, marks events after them, and asks whether
 * an event has passed from its progress loop: nothing here blocks but
 * hoop_gpu_pipe_drain. Every function returns 0, or non-zero with a
 * sentence in why (at least 128 bytes) naming the CUDA error.
 *
 * HOOP_GPU_EMULATE=1 (for tests, on machines without a GPU) makes every
 * buffer a collective is given "device memory" of GPU 0 and runs the same
 * pipeline over host memory: copies and reductions are queued and done
 * late, in order, when an event after them is asked about, so that a use
 * of data before its event has passed gives wrong results. */
#define HOOP_GPU_EVENTS 256

/* The pinned host buffers: IN and OUT for the paths that stage a whole
 * (small or pairwise) call; STAGE for the pipeline's host slots, a fixed
 * number of chunks whatever the size of the call. */
enum hoop_gpu_host { HOOP_GPU_HOST_IN = 0, HOOP_GPU_HOST_OUT, HOOP_GPU_HOST_STAGE, HOOP_GPU_HOST_N };

struct hoop_gpu_pipe;

/* 1 when HOOP_GPU_EMULATE=1 (read once), or as forced. */
int hoop_gpu_emulated(void);
/* For tests: 1 or 0 overrides HOOP_GPU_EMULATE from now on (so that one
 * process can run a collective on host buffers, then the same on
 * emulated device buffers); -1 gives the variable back its say. A pipe
 * keeps the mode it was made in. */
void hoop_gpu_emulate_force(int on);

/* Make the pipe for GPU `device`, with nslots receive slots of slot_bytes
 * each (pinned). */
int hoop_gpu_pipe_open(struct hoop_gpu_pipe **g, int device, size_t slot_bytes, int nslots,
                       char *why, size_t why_len);
/* Waits for the stream, then frees everything. NULL is fine. */
void hoop_gpu_pipe_close(struct hoop_gpu_pipe *g);
int hoop_gpu_pipe_device(const struct hoop_gpu_pipe *g);
/* The receive slots: nslots * slot_bytes of pinned memory. */
void *hoop_gpu_pipe_slots(const struct hoop_gpu_pipe *g);
/* Make the calling thread's current device the pipe's for one call (the
 * previous one is kept and given back by hoop_gpu_pipe_leave). */
int hoop_gpu_pipe_enter(struct hoop_gpu_pipe *g, char *why, size_t why_len);
void hoop_gpu_pipe_leave(struct hoop_gpu_pipe *g);
/* Pinned host buffer `which`, at least bytes long (it only grows). */
int hoop_gpu_pipe_host(struct hoop_gpu_pipe *g, enum hoop_gpu_host which, size_t bytes,
                       void **p, char *why, size_t why_len);
/* Device memory for partial sums (the pipeline's work buffer), at least
 * bytes long, on the pipe's GPU (it only grows; waits for the stream
 * before it does). */
int hoop_gpu_pipe_dwork(struct hoop_gpu_pipe *g, size_t bytes, void **p, char *why,
                        size_t why_len);
/* The bytes of pinned host memory the pipe holds: its receive slots and
 * host buffers. */
size_t hoop_gpu_pipe_pinned(const struct hoop_gpu_pipe *g);
/* Queue a copy of bytes (any direction, either side device or pinned). */
int hoop_gpu_pipe_copy(struct hoop_gpu_pipe *g, void *dst, const void *src, size_t bytes,
                       char *why, size_t why_len);
/* Queue hoop_gpu_reduce2 on the stream. */
int hoop_gpu_pipe_reduce(struct hoop_gpu_pipe *g, void *dst, void *dst2, const void *a,
                         const void *b, size_t n, hoop_dtype_t dtype, hoop_op_t op, int avg_n,
                         char *why, size_t why_len);
/* Mark event ev (0..HOOP_GPU_EVENTS-1) after what is queued so far. */
int hoop_gpu_pipe_mark(struct hoop_gpu_pipe *g, unsigned ev, char *why, size_t why_len);
/* 1 when everything queued before the last mark of ev is done, 0 when not
 * yet, < 0 with why on an error. */
int hoop_gpu_pipe_passed(struct hoop_gpu_pipe *g, unsigned ev, char *why, size_t why_len);
/* Wait until everything queued is done. */
int hoop_gpu_pipe_drain(struct hoop_gpu_pipe *g, char *why, size_t why_len);

/* ---- Device memory and devices for what is above the collectives (alloc.c,
 * scale.cu): the engine's fusion buffer, ring_bench -G, the GPU tests; the
 * collectives never allocate with these. Each returns 0, or -1 with a
 * sentence in why (a why_len of at least 128 bytes holds it) saying what
 * failed and the CUDA error; built without CUDA, or where no GPU can be
 * used (hoop_gpu_available), -1 at once saying so. Under HOOP_GPU_EMULATE=1
 * the memory calls work on host memory. */

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

/* buf[i] *= f for n floating-point elements of device memory, with the
 * bits of reduce/'s hoop_reduce_scale (f16 and bf16 through f32; f32
 * times (float)f), and waits for it; integers are left as they are. */
int hoop_gpu_scale(void *buf, size_t n, hoop_dtype_t dtype, double f, char *why, size_t why_len);

/* A driver function by name (cudaGetDriverEntryPointByVersion, CUDA 12.0's
 * ABI), or NULL where the driver has none; never -lcuda. Built without
 * CUDA: NULL. */
void *hoop_gpu_driver_fn(const char *name);

/* ---- GPUDirect RDMA (direct.c): what the selection chain asks ----
 * A dma-buf file descriptor for the device memory [p, p + len), for a NIC
 * to register (ibv_reg_dmabuf_mr): the range is widened to whole pages,
 * *offset is where p lies in it, *mapped its length. The caller closes
 * *fd. 0, or non-zero with a sentence in why (the driver's error, such
 * as CUDA_ERROR_NOT_SUPPORTED where the kernel or the GPU cannot). */
int hoop_gpu_dmabuf_export(const void *p, size_t len, int *fd, uint64_t *offset, size_t *mapped,
                           char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
