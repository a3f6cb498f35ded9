/* pair_floor.c - the floor under a large allreduce of two ranks on one
 * host: the least memory any algorithm must move, timed. Two forked
 * processes map both ranks' input and output buffers; each adds its half
 * of the two inputs, read where they lie, and writes the sums into both
 * outputs. Every input byte is read once and every output byte written
 * once, with no copy through a slot or the kernel: more than two
 * processes that cannot map each other's buffers can do (shared memory
 * passes bytes through slots, CMA through the kernel). ring_bench over
 * shared memory, in the same run, is set beside it (bench/RESULTS.md).
 *
 * -s writes the outputs with streaming stores (x86-64), which skip the
 * read a cache line's first store costs: the floor where the outputs are
 * not read again soon.
 *
 *   build/pair_floor [-b MIN] [-e MAX] [-f FACTOR] [-i ITERS] [-w WARMUP] [-s]
 *
 * Sizes take K, M, G. One line per size: bytes, median time (us) of the
 * iterations, busbw (GB/s; at two ranks, the algorithm's bandwidth),
 * wrong elements (f32 sums of integers, exact). */
#include "common/clock.h"
#include "common/param.h"
#include "common/status.h"

#include <getopt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#define WAIT_S 30.0
#define MAX_ITERS 1000

struct word {
    _Atomic uint64_t v;
    char pad[64 - sizeof(uint64_t)];
};

/* Shared: each rank's barrier count, and its times of the last size. */
struct head {
    struct word arrived[2];
    double times[2][MAX_ITERS];
    _Atomic int failed;
};

/* Both ranks here; 0, or -1 when the other did not come within WAIT_S. */
static int meet(struct head *h, int me, uint64_t *gen)
{
    ++*gen;
    atomic_store_explicit(&h->arrived[me].v, *gen, memory_order_release);
    uint64_t end = hoop_deadline_after(WAIT_S);
    while (atomic_load_explicit(&h->arrived[!me].v, memory_order_acquire) < *gen)
        if (atomic_load(&h->failed) || hoop_now_ns() > end) {
            atomic_store(&h->failed, 1);
            return -1;
        }
    return 0;
}

/* As the library's kernels, for the widest vectors the CPU has. */
#if defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
static void
add_both(const float *restrict a, const float *restrict b, float *restrict o0, float *restrict o1,
         size_t lo, size_t hi, int stream)
{
#if defined(__x86_64__)
    if (stream) {
        size_t i = lo;
        for (; i < hi && ((uintptr_t)(o0 + i) & 15); i++)
            o0[i] = o1[i] = a[i] + b[i];
        for (; i + 4 <= hi; i += 4) {
            __m128 s = _mm_add_ps(_mm_loadu_ps(a + i), _mm_loadu_ps(b + i));
            _mm_stream_ps(o0 + i, s);
            _mm_stream_ps(o1 + i, s);
        }
        for (; i < hi; i++)
            o0[i] = o1[i] = a[i] + b[i];
        _mm_sfence();
        return;
    }
#else
    (void)stream;
#endif
    for (size_t i = lo; i < hi; i++) {
        float s = a[i] + b[i];
        o0[i] = s;
        o1[i] = s;
    }
}

static int usage(void)
{
    fprintf(stderr,
            "usage: pair_floor [-b MIN >= 64] [-e MAX] [-f FACTOR >= 2] "
            "[-i ITERS (1..%d)] [-w WARMUP] [-s]\nsizes take K, M, G\n",
            MAX_ITERS);
    return 2;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
    size_t min = 64u << 20, max = 256u << 20, factor = 4;
    int iters = 8, warmup = 2, stream = 0, o;
    unsigned long long v = 0;
    while ((o = getopt(argc, argv, "b:e:f:i:w:s")) != -1) {
        /* values through the library's own parser (K, M, G suffixes) */
        char name[3] = {'-', (char)o, 0};
        if (o != 's' && o != '?' &&
            hoop_param_parse_u64(name, optarg, 0, SIZE_MAX, &v) != HOOP_OK) {
            fprintf(stderr, "pair_floor: %s\n", hoop_last_error());
            return usage();
        }
        switch (o) {
        case 'b': min = v; break;
        case 'e': max = v; break;
        case 'f': factor = v; break;
        case 'i': iters = v > MAX_ITERS ? 0 : (int)v; break;
        case 'w': warmup = v > MAX_ITERS ? -1 : (int)v; break;
        case 's': stream = 1; break;
        default: return usage();
        }
    }
    if (optind != argc || min < 64 || max < min || factor < 2 || iters < 1 || warmup < 0)
        return usage();
    struct head *h = map(sizeof(*h));
    float *in[2], *out[2];
    for (int r = 0; r < 2; r++) {
        in[r] = map(max + 4096);
        out[r] = map(max + 4096);
    }
    if (!h || !in[0] || !in[1] || !out[0] || !out[1]) {
        perror("pair_floor: mmap");
        return 1;
    }
    /* The four buffers at different offsets in their pages: at the same
     * offset, a load can wait on an unrelated store to the same address
     * modulo 4 KiB (4K aliasing), which costs more than the memory. */
    in[1] += 64;
    out[0] += 128;
    out[1] += 192;
    printf("# pair_floor: two processes, f32 sum, out of place, %s stores\n",
           stream ? "streaming" : "plain");
    printf("#%11s %12s %8s %8s\n", "size (B)", "time (us)", "busbw", "#wrong");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        perror("pair_floor: fork");
        return 1;
    }
    const int me = pid == 0;
    uint64_t gen = 0;
    int rc = 0;
    for (size_t bytes = min; bytes <= max && !rc; bytes *= factor) {
        size_t n = bytes / sizeof(float), half = n / 2;
        size_t lo = me ? half : 0, hi = me ? n : half;
        for (size_t i = lo; i < hi; i++) { /* each rank writes its half of both */
            in[0][i] = (float)(i % 1024);
            in[1][i] = (float)(i % 512);
            out[0][i] = out[1][i] = -1;
        }
        for (int it = 0; it < warmup + iters && !rc; it++) {
            if (meet(h, me, &gen)) {
                rc = 1;
                break;
            }
            uint64_t t0 = hoop_now_ns();
            add_both(in[0], in[1], out[0], out[1], lo, hi, stream);
            if (meet(h, me, &gen)) {
                rc = 1;
                break;
            }
            if (it >= warmup)
                h->times[me][it - warmup] = (double)(hoop_now_ns() - t0) * 1e-9;
        }
        if (rc || meet(h, me, &gen)) {
            rc = 1;
            break;
        }
        if (me == 0) {
            size_t wrong = 0;
            for (int r = 0; r < 2; r++)
                for (size_t i = 0; i < n; i++)
                    wrong += out[r][i] != (float)(i % 1024 + i % 512);
            double t[MAX_ITERS];
            for (int i = 0; i < iters; i++) /* a call ends when both ranks are done */
                t[i] = h->times[0][i] > h->times[1][i] ? h->times[0][i] : h->times[1][i];
            qsort(t, (size_t)iters, sizeof(double), cmp_double);
            double med = t[iters / 2];
            printf("%12zu %12.1f %8.2f %8zu\n", bytes, med * 1e6, (double)bytes / med / 1e9, wrong);
            fflush(stdout);
            if (wrong) {
                rc = 1;
                atomic_store(&h->failed, 1); /* the other stops too */
            }
        }
        if (meet(h, me, &gen) || atomic_load(&h->failed))
            rc = 1;
    }
    if (me)
        return rc;
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
        rc = 1;
    if (rc)
        fprintf(stderr,
                "pair_floor: failed: wrong sums, or a process waited %.0f s for the other\n",
                WAIT_S);
    return rc;
}
