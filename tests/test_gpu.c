/* test_gpu.c - gpu/: the memory kind of a pointer, the collectives'
 * checks of where their buffers live, and the device reduction kernels
 * against reduce/'s CPU kernels, bit for bit. Where no GPU can be used (no
 * CUDA in the build, no driver, no device) every pointer must be host
 * memory and the GPU tests skip saying why; HOOP_TEST_REQUIRE_GPU=1 (as
 * tests/gpu/run.sh sets) turns that skip into a failure. */
#include <criterion/criterion.h>

#include "hoop.h"
#include "collectives/comm.h"
#include "gpu/gpu.h"
#include "harness.h"
#include "reduce/reduce.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int static_word;

Test(gpu, host_pointers_are_host)
{
    int stack_word = 0;
    char *heap = malloc(4096);
    cr_assert_not_null(heap);
    const void *ptrs[] = {&stack_word, &static_word, heap, heap + 4095};
    for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
        struct hoop_mem m = hoop_gpu_mem_kind(ptrs[i]);
        cr_expect_eq(m.kind, HOOP_MEM_HOST, "pointer %zu is %s memory, not host", i,
                     hoop_gpu_mem_str(m.kind));
        cr_expect_eq(m.device, -1, "host pointer %zu has device %d", i, m.device);
    }
    cr_expect_eq(hoop_gpu_mem_kind(NULL).kind, HOOP_MEM_HOST);
    free(heap);
}

/* Where no GPU can be used (this build or this machine), the answer is
 * said once and kept: a sentence, the same each time, and every pointer,
 * even one that looks like a device address, is host memory. */
Test(gpu, without_a_gpu_every_pointer_is_host)
{
    const char *why = NULL;
    if (hoop_gpu_available(&why))
        cr_skip_test("a GPU can be used here: this test is for machines without one");
    cr_assert(why && strlen(why) > 10, "no sentence says why no GPU can be used");
    const char *again = NULL;
    cr_assert_eq(hoop_gpu_available(&again), 0);
    cr_assert_eq(why, again, "the answer is not kept: asked twice, two sentences");
    if (hoop_gpu_built())
        cr_assert(strstr(why, "cuda") || strstr(why, "CUDA"), "'%s' names no CUDA error", why);
    else
        cr_assert(strstr(why, "without CUDA"), "'%s' does not say the build has no CUDA", why);
    const void *looks_device = (const void *)(uintptr_t)0x7f0000000000ull;
    cr_assert_eq(hoop_gpu_mem_kind(looks_device).kind, HOOP_MEM_HOST);
    /* and the collectives' check lets host buffers through */
    hoop_comm_t comm;
    memset(&comm, 0, sizeof(comm));
    int a = 0, b = 0, dev = 7;
    cr_assert_eq(hoop_coll_check_kinds(&comm, "allreduce", &a, &b, &dev), HOOP_OK);
    cr_assert_eq(dev, -1, "host buffers said to be on GPU %d", dev);
    cr_assert_eq(hoop_coll_check_kinds(&comm, "allreduce", looks_device, NULL, &dev), HOOP_OK);
    cr_assert_eq(dev, -1);
    char why_r[256];
    if (!hoop_gpu_built())
        cr_assert_neq(hoop_gpu_reduce(&a, &a, &b, 1, HOOP_I32, HOOP_SUM, 0, NULL, why_r,
                                      sizeof(why_r)), 0, "a reduction on the device ran "
                      "in a build without CUDA");
}

Test(gpu, a_gpu_is_here)
{
    harness_need_gpu();
    cr_assert(hoop_gpu_built());
}

#ifdef HOOP_HAVE_CUDA
#define CUDA_OK(call)                                                                       \
    do {                                                                                    \
        cudaError_t e_ = (call);                                                            \
        cr_assert_eq(e_, cudaSuccess, "%s: %s (%s)", #call, cudaGetErrorName(e_),           \
                     cudaGetErrorString(e_));                                               \
    } while (0)
#endif

Test(gpu, pointer_kinds_of_cuda_memory)
{
    harness_need_gpu();
#ifdef HOOP_HAVE_CUDA
    int dev = -1;
    CUDA_OK(cudaGetDevice(&dev));
    void *d = NULL, *h = NULL, *m = NULL;
    CUDA_OK(cudaMalloc(&d, 1 << 20));
    CUDA_OK(cudaMallocHost(&h, 1 << 20));
    CUDA_OK(cudaMallocManaged(&m, 1 << 20, cudaMemAttachGlobal));
    void *plain = malloc(1 << 20);
    struct hoop_mem k = hoop_gpu_mem_kind(d);
    cr_expect_eq(k.kind, HOOP_MEM_DEVICE, "cudaMalloc'd memory is %s", hoop_gpu_mem_str(k.kind));
    cr_expect_eq(k.device, dev, "cudaMalloc'd memory on device %d, not %d", k.device, dev);
    k = hoop_gpu_mem_kind((char *)d + 12345);
    cr_expect_eq(k.kind, HOOP_MEM_DEVICE, "inside a cudaMalloc'd block: %s",
                 hoop_gpu_mem_str(k.kind));
    k = hoop_gpu_mem_kind(h);
    cr_expect_eq(k.kind, HOOP_MEM_PINNED, "cudaMallocHost'd memory is %s",
                 hoop_gpu_mem_str(k.kind));
    k = hoop_gpu_mem_kind(m);
    cr_expect_eq(k.kind, HOOP_MEM_MANAGED, "managed memory is %s", hoop_gpu_mem_str(k.kind));
    k = hoop_gpu_mem_kind(plain);
    cr_expect_eq(k.kind, HOOP_MEM_HOST, "malloc'd memory is %s", hoop_gpu_mem_str(k.kind));

    /* The collectives' checks. */
    hoop_comm_t comm;
    memset(&comm, 0, sizeof(comm));
    int on = -2;
    hoop_status_t st = hoop_coll_check_kinds(&comm, "allreduce", d, plain, &on);
    cr_expect_eq(st, HOOP_ERR_INVALID, "device send, host recv: %s", hoop_last_error());
    cr_expect(strstr(hoop_last_error(), "sendbuf is device memory and recvbuf is host"), "%s",
              hoop_last_error());
    st = hoop_coll_check_kinds(&comm, "allreduce", d, d, &on);
    cr_expect_eq(st, HOOP_OK, "device buffers: %s", hoop_last_error());
    cr_expect_eq(on, dev, "device buffers of GPU %d said to be on %d", dev, on);
    cr_expect_eq(hoop_coll_check_kinds(&comm, "allreduce", h, m, &on), HOOP_OK, "pinned and "
                 "managed memory are reached by the CPU: %s", hoop_last_error());
    cr_expect_eq(on, -1, "pinned and managed memory taken for GPU %d's", on);
    int n = 0;
    CUDA_OK(cudaGetDeviceCount(&n));
    if (n >= 2) {
        void *d1 = NULL;
        CUDA_OK(cudaSetDevice(dev == 0 ? 1 : 0));
        CUDA_OK(cudaMalloc(&d1, 4096));
        CUDA_OK(cudaSetDevice(dev));
        st = hoop_coll_check_kinds(&comm, "allreduce", d, d1, &on);
        cr_expect_eq(st, HOOP_ERR_INVALID, "two GPUs: %s", hoop_last_error());
        cr_expect(strstr(hoop_last_error(), "on the same GPU"), "%s", hoop_last_error());
        cudaFree(d1);
    }
    free(plain);
    cudaFree(d);
    cudaFreeHost(h);
    cudaFree(m);
#endif
}

#ifdef HOOP_HAVE_CUDA
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Random elements; floats finite (a NaN's payload through an operation is
 * the hardware's choice, and x86 and the GPU choose differently). */
static void fill(void *buf, size_t n, hoop_dtype_t dt)
{
    size_t es = hoop_dtype_size(dt);
    uint8_t *p = buf;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = rnd();
        switch (dt) {
        case HOOP_F16:
            if ((v & 0x7c00) == 0x7c00)
                v &= ~(uint64_t)0x4000;
            break;
        case HOOP_BF16:
            if ((v & 0x7f80) == 0x7f80)
                v &= ~(uint64_t)0x4000;
            break;
        case HOOP_F32:
            if ((v & 0x7f800000) == 0x7f800000)
                v &= ~(uint64_t)0x40000000;
            break;
        case HOOP_F64:
            if ((v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull)
                v &= ~0x4000000000000000ull;
            break;
        default: break;
        }
        memcpy(p + i * es, &v, es);
    }
}
#endif

Test(gpu, reduce_kernels_match_the_cpu_bit_for_bit, .timeout = 120)
{
    harness_need_gpu();
#ifdef HOOP_HAVE_CUDA
    const size_t n = 100003; /* odd, past many blocks */
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));
    uint8_t *ha = malloc(n * 8), *hb = malloc(n * 8), *want = malloc(n * 8), *got = malloc(n * 8);
    void *da = NULL, *db = NULL, *dd = NULL;
    CUDA_OK(cudaMalloc(&da, n * 8));
    CUDA_OK(cudaMalloc(&db, n * 8));
    CUDA_OK(cudaMalloc(&dd, n * 8));
    int checked = 0;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
        size_t bytes = n * hoop_dtype_size((hoop_dtype_t)dt);
        for (int op = 0; op < HOOP_OP_COUNT; op++) {
            for (int avg_n = 0; avg_n <= (op == HOOP_AVG ? 3 : 0); avg_n += 3) {
                for (int in_place = 0; in_place < 2; in_place++) {
                    fill(ha, n, (hoop_dtype_t)dt);
                    fill(hb, n, (hoop_dtype_t)dt);
                    hoop_reduce_kernel(want, ha, hb, n, (hoop_dtype_t)dt, (hoop_op_t)op, avg_n);
                    CUDA_OK(cudaMemcpyAsync(da, ha, bytes, cudaMemcpyHostToDevice, s));
                    CUDA_OK(cudaMemcpyAsync(db, hb, bytes, cudaMemcpyHostToDevice, s));
                    void *dst = in_place ? da : dd;
                    char why[256] = "";
                    int rc = hoop_gpu_reduce(dst, da, db, n, (hoop_dtype_t)dt, (hoop_op_t)op,
                                             avg_n, s, why, sizeof(why));
                    cr_assert_eq(rc, 0, "%s", why);
                    CUDA_OK(cudaMemcpyAsync(got, dst, bytes, cudaMemcpyDeviceToHost, s));
                    CUDA_OK(cudaStreamSynchronize(s));
                    size_t es = hoop_dtype_size((hoop_dtype_t)dt);
                    for (size_t i = 0; i < n; i++) {
                        if (memcmp(got + i * es, want + i * es, es) == 0)
                            continue;
                        uint64_t g = 0, w = 0, x = 0, y = 0;
                        memcpy(&g, got + i * es, es);
                        memcpy(&w, want + i * es, es);
                        memcpy(&x, ha + i * es, es);
                        memcpy(&y, hb + i * es, es);
                        cr_assert_fail("%s %s avg_n %d%s: element %zu of %zu: GPU 0x%llx, "
                                       "CPU 0x%llx (inputs 0x%llx, 0x%llx)",
                                       hoop_dtype_str((hoop_dtype_t)dt),
                                       hoop_op_str((hoop_op_t)op), avg_n,
                                       in_place ? " in place" : "", i, n,
                                       (unsigned long long)g, (unsigned long long)w,
                                       (unsigned long long)x, (unsigned long long)y);
                    }
                    checked++;
                }
            }
        }
    }
    cr_assert_eq(checked, HOOP_DTYPE_COUNT * (HOOP_OP_COUNT + 1) * 2);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    cudaStreamDestroy(s);
    free(ha);
    free(hb);
    free(want);
    free(got);
#endif
}
