/* reduce_bench - the reduction kernels' speed beside memcpy's on the same
 * buffers, for every instruction set this CPU runs.
 *
 *   reduce_bench [-s SIZE] [-t SECONDS] [-a]
 *
 * SIZE is the bytes of each buffer (default 1M, the ring's chunk: what one
 * reduction of the pipeline touches); -a times every op, not only sum. As
 * in STREAM, GB/s counts the bytes the loop moves: a kernel reads two
 * buffers and writes one (3 x SIZE), memcpy reads one and writes one
 * (2 x SIZE); "x memcpy" is the ratio of the two. GB = 1e9 bytes. Each
 * figure is the best of several timed batches of about SECONDS/10 (default
 * 0.2 s each). */
#include "hoop.h"
#include "reduce/reduce.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return v > 0 ? (size_t)v : 0;
}

struct job {
    int isa; /* -1: memcpy */
    void *d;
    const void *a, *b;
    size_t size, n;
    hoop_dtype_t dt;
    hoop_op_t op;
};

static void job_run(const struct job *j)
{
    if (j->isa < 0)
        memcpy(j->d, j->a, j->size);
    else
        hoop_reduce_kernel_isa(j->isa, j->d, j->d, j->b, j->n, j->dt, j->op, 0);
    __asm__ volatile("" ::: "memory"); /* the result is used */
}

/* Seconds per call: the best of 10 batches of about `batch` seconds. */
static double best_of(double batch, const struct job *j)
{
    long reps = 1;
    for (;;) { /* size the batch */
        double t0 = now_s();
        for (long r = 0; r < reps; r++)
            job_run(j);
        if (now_s() - t0 > batch / 4 || reps > (1L << 30))
            break;
        reps *= 2;
    }
    reps *= 4;
    double best = 1e30;
    for (int k = 0; k < 10; k++) {
        double t0 = now_s();
        for (long r = 0; r < reps; r++)
            job_run(j);
        double per = (now_s() - t0) / (double)reps;
        if (per < best)
            best = per;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t size = 1 << 20;
    double secs = 2.0;
    int all_ops = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc)
            size = parse_size(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            secs = atof(argv[++i]);
        else if (!strcmp(argv[i], "-a"))
            all_ops = 1;
        else {
            fprintf(stderr, "usage: %s [-s SIZE] [-t SECONDS] [-a]\n", argv[0]);
            return 2;
        }
    }
    if (size < 64 || secs <= 0) {
        fprintf(stderr, "reduce_bench: SIZE must be at least 64 bytes and SECONDS above 0\n");
        return 2;
    }
    double batch = secs / 10;
    unsigned char *a = aligned_alloc(64, size), *b = aligned_alloc(64, size),
                  *d = aligned_alloc(64, size);
    if (!a || !b || !d) {
        fprintf(stderr, "reduce_bench: out of memory for 3 x %zu bytes\n", size);
        return 1;
    }
    /* Small finite values of every type: no NaN or denormal slow paths. */
    for (size_t i = 0; i < size; i++) {
        a[i] = (unsigned char)(i % 7 + 1);
        b[i] = (unsigned char)(i % 5 + 1);
    }
    for (size_t i = 1; i < size; i += 2) { /* f16 and bf16: exponent near 1 */
        a[i] = 0x3c;
        b[i] = 0x3e;
    }
    memcpy(d, a, size);
    struct job copy = {.isa = -1, .d = d, .a = a, .size = size};
    double t_copy = best_of(batch, &copy);
    double copy_gbs = 2.0 * (double)size / t_copy / 1e9;
    printf("# reduce_bench: buffers of %zu bytes; memcpy %.2f GB/s (2 x size per call)\n", size,
           copy_gbs);
    printf("# kernels: the library picks %s\n", hoop_reduce_isa_name(hoop_reduce_isa_chosen()));
    printf("# %-8s %-5s %-4s %10s %9s\n", "isa", "dtype", "op", "GB/s", "x memcpy");
    for (int isa = 0; isa < hoop_reduce_isa_count(); isa++) {
        if (!hoop_reduce_isa_runs(isa)) {
            printf("# %-8s skipped: this CPU cannot run it\n", hoop_reduce_isa_name(isa));
            continue;
        }
        for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
            size_t n = size / hoop_dtype_size((hoop_dtype_t)dt);
            for (int op = 0; op < (all_ops ? HOOP_OP_COUNT : 1); op++) {
                /* In place into a copy of a, as the ring reduces a slot
                 * into its output; a fresh copy keeps products finite. */
                memcpy(d, a, size);
                struct job k = {.isa = isa, .d = d, .b = b, .size = size, .n = n,
                                .dt = (hoop_dtype_t)dt, .op = (hoop_op_t)op};
                double t = best_of(batch, &k);
                double gbs = 3.0 * (double)size / t / 1e9;
                printf("  %-8s %-5s %-4s %10.2f %9.2f\n", hoop_reduce_isa_name(isa),
                       hoop_dtype_str((hoop_dtype_t)dt), hoop_op_str((hoop_op_t)op), gbs,
                       gbs / copy_gbs);
            }
        }
    }
    free(a);
    free(b);
    free(d);
    return 0;
}
