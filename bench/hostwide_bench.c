/* hostwide_bench.c - the ceiling of a design, measured before it is built:
 * an allreduce of N processes of one host through one segment they all
 * map, instead of a ring of links. Per chunk of the buffer, each rank
 * copies its part of the input into the segment; rank j reduces the j-th
 * piece of that chunk from every rank's copy, while it is still in the
 * shared cache, into a result area; every rank copies the reduced chunk
 * out. Each rank reads its input once and writes its output once from
 * memory, about two bytes per byte of the buffer, where a ring of N ranks
 * moves about 2 (N - 1) / N times through its slots and its output.
 *
 * No frames, no deadlines but one per wait (a stalled run exits), no
 * failure handling: the fastest this design can be on a machine, to set
 * beside ring_bench over shared memory in the same run (bench/manycore.sh
 * does, HOSTWIDE=1). The ranks are forked here, f32 sums out of place,
 * every result checked (inputs whose sums are exact).
 *
 *   build/hostwide_bench [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR]
 *                        [-c CHUNK] [-d DEPTH] [-i ITERS] [-w WARMUP]
 *
 * Sizes take K, M, G. Prints one line per size, ring_bench's columns:
 * bytes, count, type, op, time (us), algbw and busbw (GB/s), wrong. */
#include "common/param.h"
#include "reduce/reduce.h"

#include <getopt.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
#define MAX_RANKS 64
#define WAIT_S 30.0

/* A counter of one rank, alone on its cache line. */
struct word {
    _Atomic uint64_t v;
    char pad[LINE - sizeof(uint64_t)];
};

/* The segment's head: what each rank has done, in chunks since the start. */
struct head {
    struct word arrived[MAX_RANKS];  /* its input chunk is in the segment */
    struct word reduced[MAX_RANKS];  /* its piece of the chunk is reduced */
    struct word consumed[MAX_RANKS]; /* it has copied the chunk out */
    struct word barrier[MAX_RANKS];  /* between sizes */
    struct word failed;
};

struct job {
    int n, depth, iters, warmup;
    size_t chunk, min, max, factor;
    struct head *h;
    char *slots; /* depth slots of (n + 1) chunks: every rank's input, the result */
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Wait until every rank's word w[] has reached v; 0, or -1 after WAIT_S
 * (or when another rank has failed). */
static int wait_all(struct job *j, struct word *w, uint64_t v)
{
    double until = 0;
    for (int r = 0; r < j->n; r++) {
        for (unsigned spins = 0; atomic_load_explicit(&w[r].v, memory_order_acquire) < v; spins++) {
            if (spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
                continue;
            }
            sched_yield(); /* more ranks than CPUs: let the one awaited run */
            if (spins % 1024 == 0) {
                double t = now_s();
                if (!until)
                    until = t + WAIT_S;
                if (t > until || atomic_load(&j->h->failed.v))
                    return -1;
            }
        }
    }
    return 0;
}

static char *slot_input(struct job *j, uint64_t g, int r)
{
    return j->slots + (size_t)(g % (uint64_t)j->depth) * (size_t)(j->n + 1) * j->chunk +
           (size_t)r * j->chunk;
}

/* One allreduce of count f32, from chunk g on; the next chunk's number. */
static int64_t allreduce(struct job *j, int me, const float *in, float *out, size_t count,
                         uint64_t g)
{
    const size_t per = j->chunk / sizeof(float);
    for (size_t off = 0; off < count; off += per, g++) {
        size_t len = count - off < per ? count - off : per;
        if (g >= (uint64_t)j->depth && wait_all(j, j->h->consumed, g - (uint64_t)j->depth + 1))
            return -1;
        memcpy(slot_input(j, g, me), in + off, len * sizeof(float));
        atomic_store_explicit(&j->h->arrived[me].v, g + 1, memory_order_release);
        if (wait_all(j, j->h->arrived, g + 1))
            return -1;
        /* This rank's piece: 16-element (64-byte) units split evenly. */
        size_t units = (len + 15) / 16;
        size_t lo = units * (size_t)me / (size_t)j->n * 16;
        size_t hi = units * (size_t)(me + 1) / (size_t)j->n * 16;
        if (hi > len)
            hi = len;
        if (lo < hi) {
            float *res = (float *)slot_input(j, g, j->n) + lo;
            if (j->n == 1) {
                memcpy(res, (float *)slot_input(j, g, 0) + lo, (hi - lo) * sizeof(float));
            } else {
                hoop_reduce_kernel(res, (float *)slot_input(j, g, 0) + lo,
                                   (float *)slot_input(j, g, 1) + lo, hi - lo, HOOP_F32, HOOP_SUM,
                                   0);
                for (int r = 2; r < j->n; r++)
                    hoop_reduce_kernel(res, res, (float *)slot_input(j, g, r) + lo, hi - lo,
                                       HOOP_F32, HOOP_SUM, 0);
            }
        }
        atomic_store_explicit(&j->h->reduced[me].v, g + 1, memory_order_release);
        if (wait_all(j, j->h->reduced, g + 1))
            return -1;
        memcpy(out + off, slot_input(j, g, j->n), len * sizeof(float));
        atomic_store_explicit(&j->h->consumed[me].v, g + 1, memory_order_release);
    }
    return (int64_t)g;
}

static int barrier(struct job *j, int me, uint64_t *round)
{
    ++*round;
    atomic_store_explicit(&j->h->barrier[me].v, *round, memory_order_release);
    return wait_all(j, j->h->barrier, *round);
}

static int rank_main(struct job *j, int me)
{
    size_t most = j->max / sizeof(float);
    float *in = malloc(most * sizeof(float)), *out = malloc(most * sizeof(float));
    if (!in || !out) {
        fprintf(stderr, "rank %d: out of memory for two buffers of %zu bytes\n", me, j->max);
        return 1;
    }
    for (size_t i = 0; i < most; i++)
        in[i] = (float)(me + 1) + (float)(i % 7);
    memset(out, 0, most * sizeof(float));
    uint64_t g = 0, round = 0;
    for (size_t bytes = j->min; bytes <= j->max; bytes *= j->factor) {
        size_t count = bytes / sizeof(float);
        double t0 = 0;
        for (int it = 0; it < j->warmup + j->iters; it++) {
            if (it == j->warmup) {
                if (barrier(j, me, &round))
                    goto stalled;
                t0 = now_s();
            }
            int64_t next = allreduce(j, me, in, out, count, g);
            if (next < 0)
                goto stalled;
            g = (uint64_t)next;
        }
        if (barrier(j, me, &round))
            goto stalled;
        double t = (now_s() - t0) / j->iters;
        size_t wrong = 0;
        float base = (float)j->n * (float)(j->n + 1) / 2;
        for (size_t i = 0; i < count; i++)
            wrong += out[i] != base + (float)j->n * (float)(i % 7);
        if (me == 0 || wrong) {
            double algbw = (double)bytes / t * 1e-9;
            printf("%12zu %12zu %7s %6s %10.1f %7.2f %7.2f %6zu%s\n", bytes, count, "f32", "sum",
                   t * 1e6, algbw, algbw * 2.0 * (j->n - 1) / j->n, wrong,
                   me ? " (another rank)" : "");
            fflush(stdout);
        }
        if (wrong) {
            atomic_store(&j->h->failed.v, 1);
            return 1;
        }
        if (bytes > j->max / j->factor)
            break;
    }
    free(in);
    free(out);
    return 0;
stalled:
    atomic_store(&j->h->failed.v, 1);
    fprintf(stderr, "rank %d: a wait on the other ranks passed %.0f s (or one failed)\n", me,
            WAIT_S);
    return 1;
}

/* An option's value through the library's own parser (K, M, G suffixes). */
static int option(int o, const char *text, unsigned long long *v)
{
    char name[3] = {'-', (char)o, 0};
    if (hoop_param_parse_u64(name, text, 0, SIZE_MAX, v) == HOOP_OK)
        return 0;
    fprintf(stderr, "hostwide_bench: %s\n", hoop_last_error());
    return -1;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: hostwide_bench [-n RANKS (1..%d)] [-b MIN] [-e MAX] [-f FACTOR >= 2] "
            "[-c CHUNK] [-d DEPTH >= 1] [-i ITERS >= 1] [-w WARMUP]\n"
            "sizes take K, M, G; MIN and CHUNK are multiples of 64 bytes\n",
            MAX_RANKS);
    return 2;
}

int main(int argc, char **argv)
{
    struct job j = {.n = 4,
                    .depth = 2,
                    .iters = 10,
                    .warmup = 3,
                    .chunk = 256 << 10,
                    .min = 1 << 20,
                    .max = 256 << 20,
                    .factor = 4};
    int o;
    unsigned long long v;
    while ((o = getopt(argc, argv, "n:b:e:f:c:d:i:w:")) != -1) {
        if (!optarg || option(o, optarg, &v))
            return usage();
        switch (o) {
        case 'n': j.n = (int)v; break;
        case 'b': j.min = v; break;
        case 'e': j.max = v; break;
        case 'f': j.factor = v; break;
        case 'c': j.chunk = v; break;
        case 'd': j.depth = (int)v; break;
        case 'i': j.iters = (int)v; break;
        case 'w': j.warmup = (int)v; break;
        default: return usage();
        }
    }
    if (optind != argc || j.n < 1 || j.n > MAX_RANKS || j.factor < 2 || j.depth < 1 ||
        j.depth > 64 || j.iters < 1 || j.warmup < 0 || j.min < LINE || j.min % LINE ||
        j.chunk < LINE || j.chunk % LINE || j.chunk > (1u << 30) || j.max < j.min)
        return usage();
    size_t seg = sizeof(struct head) + (size_t)j.depth * (size_t)(j.n + 1) * j.chunk;
    char *m = mmap(NULL, seg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("hostwide_bench: mmap of the segment");
        return 1;
    }
    j.h = (struct head *)m;
    j.slots = m + sizeof(struct head);
    printf("# hostwide_bench: %d ranks, chunks of %zu bytes, depth %d, %d iterations after %d, "
           "reduction kernels: %s\n",
           j.n, j.chunk, j.depth, j.iters, j.warmup,
           hoop_reduce_isa_name(hoop_reduce_isa_chosen()));
    printf("# %10s %12s %7s %6s %10s %7s %7s %6s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("# %10s %12s %7s %6s %10s %7s %7s %6s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
    fflush(stdout);
    pid_t pid[MAX_RANKS];
    for (int r = 0; r < j.n; r++) {
        pid[r] = fork();
        if (pid[r] < 0) {
            perror("hostwide_bench: fork");
            atomic_store(&j.h->failed.v, 1);
            for (int k = 0; k < r; k++)
                waitpid(pid[k], NULL, 0);
            return 1;
        }
        if (pid[r] == 0)
            _exit(rank_main(&j, r));
    }
    int rc = 0;
    for (int r = 0; r < j.n; r++) {
        int status;
        if (waitpid(pid[r], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            rc = 1;
    }
    munmap(m, seg);
    return rc;
}
