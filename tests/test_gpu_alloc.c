/* test_gpu_alloc.c - gpu/alloc.c, the device memory and devices of the
 * programs and tests (ring_bench -G): allocation, copies both ways and
 * between devices' buffers, memset, which device, a device in words; and
 * that asking the memory kind of a host pointer makes no CUDA context.
 * Where no GPU can be used every call refuses at once with a sentence; the
 * GPU tests skip saying why (HOOP_TEST_REQUIRE_GPU=1 fails them). */
#include <criterion/criterion.h>

#include "gpu/gpu.h"
#include "harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HOOP_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

Test(gpu_alloc, without_a_gpu_each_call_says_why)
{
    const char *reason = NULL;
    if (hoop_gpu_available(&reason))
        cr_skip_test("a GPU can be used here: this test is for machines without one");
    char why[256];
    void *p = (void *)1;
    int x = 7, y = 0;

    why[0] = '\0';
    cr_assert_eq(hoop_gpu_malloc(&p, 4096, why, sizeof(why)), -1);
    cr_assert_null(p, "a failed allocation left %p", p);
    cr_assert(strstr(why, "cannot allocate device memory: ") && strstr(why, reason),
              "'%s' does not say it cannot allocate and why ('%s')", why, reason);

    why[0] = '\0';
    cr_assert_eq(hoop_gpu_memcpy(&y, &x, sizeof(x), why, sizeof(why)), -1);
    cr_assert(strstr(why, "cannot copy") && strstr(why, reason), "'%s'", why);
    cr_assert_eq(y, 0, "a refused copy copied");

    why[0] = '\0';
    cr_assert_eq(hoop_gpu_memset(&x, 0, sizeof(x), why, sizeof(why)), -1);
    cr_assert(strstr(why, "cannot set device memory") && strstr(why, reason), "'%s'", why);
    cr_assert_eq(x, 7, "a refused memset wrote");

    why[0] = '\0';
    cr_assert_eq(hoop_gpu_set_device(0, why, sizeof(why)), -1);
    cr_assert(strstr(why, "cannot choose a GPU") && strstr(why, reason), "'%s'", why);

    why[0] = '\0';
    cr_assert_eq(hoop_gpu_device_describe(0, why, sizeof(why)), -1);
    cr_assert(strstr(why, "no GPU to describe") && strstr(why, reason), "'%s'", why);

    cr_assert_eq(hoop_gpu_device_count(), 0);
    cr_assert_eq(hoop_gpu_current_device(), -1);
    hoop_gpu_free(NULL);
    /* A sentence cut to a short buffer still ends in a NUL. */
    char small[8];
    memset(small, 'x', sizeof(small));
    cr_assert_eq(hoop_gpu_malloc(&p, 1, small, sizeof(small)), -1);
    cr_assert_eq(strlen(small), sizeof(small) - 1);
}

Test(gpu_alloc, copies_and_memset_round_trip)
{
    harness_need_gpu();
    char why[256];
    const size_t n = (size_t)4 << 20; /* bytes */
    unsigned char *h = malloc(n), *back = malloc(n);
    cr_assert(h && back);
    for (size_t i = 0; i < n; i++)
        h[i] = (unsigned char)(i * 131 + (i >> 12));
    void *d = NULL, *d2 = NULL;
    cr_assert_eq(hoop_gpu_malloc(&d, n, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(hoop_gpu_malloc(&d2, n, why, sizeof(why)), 0, "%s", why);
    cr_assert(d && d2);
    struct hoop_mem k = hoop_gpu_mem_kind(d);
    cr_assert_eq(k.kind, HOOP_MEM_DEVICE, "hoop_gpu_malloc gave %s memory",
                 hoop_gpu_mem_str(k.kind));
    cr_assert_eq(k.device, hoop_gpu_current_device(), "on device %d, not the current %d", k.device,
                 hoop_gpu_current_device());

    /* memset, read back through the host */
    cr_assert_eq(hoop_gpu_memset(d2, 0xa5, n, why, sizeof(why)), 0, "%s", why);
    memset(back, 0, n);
    cr_assert_eq(hoop_gpu_memcpy(back, d2, n, why, sizeof(why)), 0, "%s", why);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(back[i], 0xa5, "byte %zu after memset is 0x%02x", i, back[i]);

    /* host -> device -> device -> host */
    cr_assert_eq(hoop_gpu_memcpy(d, h, n, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(hoop_gpu_memcpy(d2, d, n, why, sizeof(why)), 0, "%s", why);
    memset(back, 0, n);
    cr_assert_eq(hoop_gpu_memcpy(back, d2, n, why, sizeof(why)), 0, "%s", why);
    cr_assert(memcmp(back, h, n) == 0, "the bytes did not come back as they went");
    /* a piece at an odd offset */
    cr_assert_eq(hoop_gpu_memcpy((char *)d2 + 3, h + 1000, 4093, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(hoop_gpu_memcpy(back, (char *)d2 + 3, 4093, why, sizeof(why)), 0, "%s", why);
    cr_assert(memcmp(back, h + 1000, 4093) == 0, "an odd-offset copy came back changed");

    hoop_gpu_free(d);
    hoop_gpu_free(d2);
    free(h);
    free(back);
}

Test(gpu_alloc, devices_in_words)
{
    harness_need_gpu();
    char why[256], out[256];
    int n = hoop_gpu_device_count();
    cr_assert_gt(n, 0, "a GPU is here but the device count is %d", n);
    int dev = hoop_gpu_current_device();
    cr_assert(dev >= 0 && dev < n, "current device %d of %d", dev, n);
    for (int d = 0; d < n; d++) {
        cr_assert_eq(hoop_gpu_device_describe(d, out, sizeof(out)), 0, "%s", out);
        char want[32];
        snprintf(want, sizeof(want), "GPU %d: ", d);
        cr_assert(strncmp(out, want, strlen(want)) == 0, "'%s' does not start '%s'", out, want);
        cr_assert(strstr(out, ", sm_") && strstr(out, ", PCI "), "'%s'", out);
        fprintf(stderr, "note: %s\n", out);
    }
    cr_assert_eq(hoop_gpu_set_device(n - 1, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(hoop_gpu_current_device(), n - 1);
    why[0] = '\0';
    cr_assert_eq(hoop_gpu_set_device(n, why, sizeof(why)), -1, "device %d of %d was set", n, n);
    cr_assert(strstr(why, "cudaSetDevice") && strstr(why, "failed"), "'%s'", why);
    cr_assert_eq(hoop_gpu_device_describe(n, out, sizeof(out)), -1);
    cr_assert(strstr(out, "failed"), "'%s'", out);
}

/* The runtime's cudaPointerGetAttributes makes the primary context of a
 * device when none exists; the driver's call, which hoop_gpu_mem_kind
 * uses, does not. Each Criterion test runs in a fresh process, so no
 * context exists when this starts. */
#ifdef HOOP_HAVE_CUDA
/* A driver function through the runtime's entry points (libcuda is never
 * linked), or a failed test. */
static void *driver_fn(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
    cr_assert(e == cudaSuccess && q == cudaDriverEntryPointSuccess && fn,
              "%s cannot be reached (%s, query %d)", name, cudaGetErrorName(e), (int)q);
    return fn;
}
#endif

Test(gpu_alloc, a_host_pointer_kind_makes_no_context)
{
    harness_need_gpu();
#ifdef HOOP_HAVE_CUDA
    typedef CUresult (*get_fn)(CUdevice * dev, int ordinal);
    typedef CUresult (*state_fn)(CUdevice dev, unsigned int *flags, int *active);
    get_fn get = (get_fn)driver_fn("cuDeviceGet");
    state_fn state = (state_fn)driver_fn("cuDevicePrimaryCtxGetState");
    int n = hoop_gpu_device_count();
    cr_assert_gt(n, 0);
    CUdevice dev[64];
    if (n > 64)
        n = 64;
    unsigned int flags = 0;
    int active = -1;
    for (int d = 0; d < n; d++) {
        CUresult r = get(&dev[d], d);
        cr_assert_eq(r, CUDA_SUCCESS, "cuDeviceGet(%d): CUresult %d", d, (int)r);
        r = state(dev[d], &flags, &active);
        cr_assert_eq(r, CUDA_SUCCESS, "cuDevicePrimaryCtxGetState(%d): CUresult %d", d, (int)r);
        cr_assert_eq(active, 0,
                     "GPU %d has a context before any pointer was asked about (made by "
                     "cudaGetDeviceCount or cudaGetDriverEntryPointByVersion?)",
                     d);
    }
    int word = 0;
    char *heap = malloc(1 << 20);
    cr_assert_not_null(heap);
    cr_assert_eq(hoop_gpu_mem_kind(&word).kind, HOOP_MEM_HOST);
    cr_assert_eq(hoop_gpu_mem_kind(heap).kind, HOOP_MEM_HOST);
    cr_assert_eq(hoop_gpu_mem_kind(heap + 12345).kind, HOOP_MEM_HOST);
    for (int d = 0; d < n; d++) {
        cr_assert_eq(state(dev[d], &flags, &active), CUDA_SUCCESS);
        cr_assert_eq(active, 0, "asking the memory kind of host pointers made a context on GPU %d",
                     d);
    }
    free(heap);
#endif
}
