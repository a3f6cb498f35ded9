/* engine_bench - the engine (hoop_engine.h) beside the blocking calls on the
 * same ranks, under hooprun:
 *
 *   hooprun -np 4 engine_bench [-n STEPS] [-w WARMUP] [-s SMALL_ITERS]
 *                              [-t TENSORS [-e ELEMS] [-k STEPS] [-o]] [-m]
 *
 * 1. A training step of ResNet-50's gradients: its 161 tensors (25.6 M f32,
 *    102 MB; the shapes of torchvision's resnet50) enqueued as allreduces in
 *    the order backpropagation gives them (last layer first), then waited
 *    for; beside one hoop_allreduce of the same total bytes.
 * 2. One 8-byte allreduce through enqueue and wait, beside hoop_allreduce
 *    of 8 bytes.
 * 3. With -t: a step of TENSORS tensors of ELEMS f32 each (default 1024),
 *    AVG, through the engine: one allreduce each, enqueued then waited for,
 *    and one grouped allreduce of all of them; -k steps (default 100), the
 *    median. The yardstick of a binding's overhead (bench/engine_targets.sh
 *    sets hoop.torch beside it). -o runs only this part.
 *
 * -m prints key=value lines for scripts instead of the table.
 *
 * The blocking baselines run first on the communicator, which is then handed
 * to the engine. Times are medians over the steps (rank 0 prints them);
 * HOOP_FUSION_THRESHOLD, HOOP_CYCLE_TIME and HOOP_CACHE_CAPACITY apply. */
#include "hoop.h"
#include "hoop_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NT_MAX 200

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ResNet-50's parameter tensors in forward order: conv1 and its batch norm,
 * the 16 bottlenecks of layers 1-4 (3, 4, 6, 3 blocks of width 64, 128,
 * 256, 512, output 4 x width; the first block of each layer with a
 * projection), then the classifier. Each batch norm has a weight and a
 * bias. Returns the count (161). */
static int resnet50_sizes(size_t *n)
{
    int k = 0;
    n[k++] = 64 * 3 * 7 * 7;
    n[k++] = 64;
    n[k++] = 64;
    static const int blocks[4] = {3, 4, 6, 3}, width[4] = {64, 128, 256, 512};
    size_t in = 64;
    for (int l = 0; l < 4; l++) {
        size_t w = (size_t)width[l], out = 4 * w;
        for (int b = 0; b < blocks[l]; b++) {
            n[k++] = w * in; /* 1x1 */
            n[k++] = w;
            n[k++] = w;
            n[k++] = w * w * 9; /* 3x3 */
            n[k++] = w;
            n[k++] = w;
            n[k++] = out * w; /* 1x1 */
            n[k++] = out;
            n[k++] = out;
            if (b == 0) { /* projection */
                n[k++] = out * in;
                n[k++] = out;
                n[k++] = out;
            }
            in = out;
        }
    }
    n[k++] = 1000 * 2048;
    n[k++] = 1000;
    return k;
}

static int fail(const char *what, hoop_status_t st)
{
    fprintf(stderr, "engine_bench: %s: %s: %s\n", what, hoop_status_str(st), hoop_last_error());
    return 1;
}

/* Part 3: medians of a step of nt tensors of elems f32, one allreduce each
 * and grouped. */
static int many_small(hoop_engine_t *e, int nt, size_t elems, int steps, int warmup, double *each_s,
                      double *grouped_s, double *each_cycles, double *each_colls)
{
    hoop_engine_stats_t s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)};
    float *data = malloc((size_t)nt * elems * sizeof(float));
    const void **src = malloc(sizeof(*src) * (size_t)nt);
    void **dst = malloc(sizeof(*dst) * (size_t)nt);
    size_t *counts = malloc(sizeof(*counts) * (size_t)nt);
    hoop_engine_handle_t **h = malloc(sizeof(*h) * (size_t)nt);
    double *times = malloc(sizeof(double) * (size_t)steps);
    int rc = 1;
    if (!data || !src || !dst || !counts || !h || !times)
        goto out;
    for (size_t i = 0; i < (size_t)nt * elems; i++)
        data[i] = 1.0f;
    for (int t = 0; t < nt; t++) {
        src[t] = dst[t] = data + (size_t)t * elems;
        counts[t] = elems;
    }
    hoop_status_t st;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup)
            hoop_engine_stats(e, &s0);
        double t0 = now_s();
        for (int k = 0; k < nt; k++) {
            int t = nt - 1 - k;
            char name[32];
            snprintf(name, sizeof(name), "small.%d", t);
            if ((st = hoop_engine_allreduce(e, name, dst[t], dst[t], elems, HOOP_F32, HOOP_AVG,
                                            1.0, 1.0, NULL, NULL, &h[t]))) {
                fail(name, st);
                goto out;
            }
        }
        for (int t = 0; t < nt; t++) {
            if ((st = hoop_engine_wait(h[t], 600))) {
                fail("wait", st);
                goto out;
            }
            hoop_engine_release(h[t]);
        }
        if (s >= warmup)
            times[s - warmup] = now_s() - t0;
    }
    hoop_engine_stats(e, &s1);
    *each_s = median(times, steps);
    *each_cycles = (double)(s1.cycles - s0.cycles) / steps;
    *each_colls = (double)(s1.collectives - s0.collectives) / steps;
    for (int s = 0; s < warmup + steps; s++) {
        double t0 = now_s();
        if ((st = hoop_engine_grouped_allreduce(e, "small.group", nt, src, dst, counts, HOOP_F32,
                                                HOOP_AVG, 1.0, 1.0, NULL, NULL, &h[0])) ||
            (st = hoop_engine_wait(h[0], 600))) {
            fail("grouped", st);
            goto out;
        }
        hoop_engine_release(h[0]);
        if (s >= warmup)
            times[s - warmup] = now_s() - t0;
    }
    *grouped_s = median(times, steps);
    rc = 0;
out:
    free(data);
    free(src);
    free(dst);
    free(counts);
    free(h);
    free(times);
    return rc;
}


int main(int argc, char **argv)
{
    int steps = 10, warmup = 2, small_iters = 2000, c;
    int many = 0, many_steps = 100, only_many = 0, keyval = 0;
    long many_elems = 1024;
    while ((c = getopt(argc, argv, "n:w:s:t:e:k:omh")) != -1) {
        switch (c) {
        case 'n': steps = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 's': small_iters = atoi(optarg); break;
        case 't': many = atoi(optarg); break;
        case 'e': many_elems = atol(optarg); break;
        case 'k': many_steps = atoi(optarg); break;
        case 'o': only_many = 1; break;
        case 'm': keyval = 1; break;
        default:
            fprintf(stderr, "usage: engine_bench [-n STEPS] [-w WARMUP] [-s SMALL_ITERS] "
                            "[-t TENSORS [-e ELEMS] [-k STEPS] [-o]] [-m]\n");
            return c == 'h' ? 0 : 2;
        }
    }
    if (steps < 1 || warmup < 0 || small_iters < 1 || many < 0 || many > 100000 ||
        many_elems < 1 || many_elems > (1L << 24) || many_steps < 1 || (only_many && !many)) {
        fprintf(stderr, "engine_bench: bad arguments (-t 1..100000, -e 1..16M, -o needs -t)\n");
        return 2;
    }
    size_t sizes[NT_MAX], total = 0;
    int nt = resnet50_sizes(sizes);
    for (int t = 0; t < nt; t++)
        total += sizes[t];
    float **bufs = calloc((unsigned)nt, sizeof(*bufs));
    float *flat = malloc(total * sizeof(float));
    unsigned most = (unsigned)(steps > small_iters ? steps : small_iters);
    double *times = malloc(sizeof(double) * (size_t)most);
    if (!bufs || !flat || !times)
        return 1;
    for (int t = 0; t < nt; t++) {
        bufs[t] = malloc(sizes[t] * sizeof(float));
        if (!bufs[t])
            return 1;
        for (size_t i = 0; i < sizes[t]; i++)
            bufs[t][i] = 1.0f;
    }
    for (size_t i = 0; i < total; i++)
        flat[i] = 1.0f;

    hoop_comm_t *comm;
    hoop_status_t st = hoop_comm_init(&comm, NULL);
    if (st)
        return fail("hoop_comm_init", st);
    int rank = hoop_comm_rank(comm), size = hoop_comm_size(comm);
    char transport[64];
    snprintf(transport, sizeof(transport), "%s", hoop_comm_transport(comm));

    /* Baselines: the blocking calls. */
    for (int s = 0; s < warmup + steps && !only_many; s++) {
        double t0 = now_s();
        if ((st = hoop_allreduce(comm, flat, flat, total, HOOP_F32, HOOP_SUM)))
            return fail("hoop_allreduce", st);
        if (s >= warmup)
            times[s - warmup] = now_s() - t0;
    }
    double base_step = only_many ? 0 : median(times, steps);
    uint64_t one = 1;
    for (int i = 0; i < small_iters + 100 && !only_many; i++) {
        double t0 = now_s();
        if ((st = hoop_allreduce(comm, &one, &one, 1, HOOP_U64, HOOP_SUM)))
            return fail("hoop_allreduce 8 B", st);
        if (i >= 100)
            times[i - 100] = now_s() - t0;
    }
    double base_small = only_many ? 0 : median(times, small_iters);

    hoop_engine_t *e;
    if ((st = hoop_engine_create_with(&e, comm)))
        return fail("hoop_engine_create_with", st);
    hoop_engine_handle_t *h[NT_MAX];
    hoop_engine_stats_t s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)};
    for (int s = 0; s < warmup + steps && !only_many; s++) {
        if (s == warmup)
            hoop_engine_stats(e, &s0);
        double t0 = now_s();
        for (int k = 0; k < nt; k++) {
            int t = nt - 1 - k;
            char name[32];
            snprintf(name, sizeof(name), "grad.%d", t);
            if ((st = hoop_engine_allreduce(e, name, bufs[t], bufs[t], sizes[t], HOOP_F32, HOOP_AVG,
                                            1.0, 1.0, NULL, NULL, &h[t])))
                return fail(name, st);
        }
        for (int t = 0; t < nt; t++) {
            if ((st = hoop_engine_wait(h[t], 600)))
                return fail("wait", st);
            hoop_engine_release(h[t]);
        }
        if (s >= warmup)
            times[s - warmup] = now_s() - t0;
    }
    hoop_engine_stats(e, &s1);
    double eng_step = only_many ? 0 : median(times, steps);
    for (int i = 0; i < small_iters + 100 && !only_many; i++) {
        double t0 = now_s();
        if ((st = hoop_engine_allreduce(e, "small", &one, &one, 1, HOOP_U64, HOOP_SUM, 1.0, 1.0,
                                        NULL, NULL, &h[0])) ||
            (st = hoop_engine_wait(h[0], 600)))
            return fail("small", st);
        hoop_engine_release(h[0]);
        if (i >= 100)
            times[i - 100] = now_s() - t0;
    }
    double eng_small = only_many ? 0 : median(times, small_iters);
    hoop_engine_stats_t s2 = {.struct_size = sizeof(s2)};
    hoop_engine_stats(e, &s2);
    double many_each = 0, many_grouped = 0, many_cycles = 0, many_colls = 0;
    if (many && many_small(e, many, (size_t)many_elems, many_steps, 5, &many_each, &many_grouped,
                           &many_cycles, &many_colls))
        return 1;
    if (rank == 0 && keyval) {
        printf("ranks=%d\ntransport=%s\ncycle_ms=%g\nfusion_threshold=%llu\n", size, transport,
               s1.cycle_time_ms, (unsigned long long)s1.fusion_threshold);
        if (!only_many)
            printf("resnet_tensors=%d\nresnet_bytes=%zu\nresnet_engine_ms=%.4f\n"
                   "resnet_blocking_ms=%.4f\nsmall_engine_us=%.3f\nsmall_blocking_us=%.3f\n",
                   nt, total * 4, eng_step * 1e3, base_step * 1e3, eng_small * 1e6,
                   base_small * 1e6);
        if (many)
            printf("many_tensors=%d\nmany_elems=%ld\nmany_each_ms=%.4f\nmany_grouped_ms=%.4f\n"
                   "many_each_cycles=%.1f\nmany_each_collectives=%.1f\n",
                   many, many_elems, many_each * 1e3, many_grouped * 1e3, many_cycles, many_colls);
    } else if (rank == 0 && only_many) {
        printf("# engine_bench: N=%d, transport %s, cycle %.3g ms\n", size, transport,
               s1.cycle_time_ms);
    } else if (rank == 0) {
        printf("# engine_bench: N=%d, transport %s, fusion threshold %llu B, cycle %.3g ms\n", size,
               transport, (unsigned long long)s1.fusion_threshold, s1.cycle_time_ms);
        printf("resnet50 step: %d tensors, %zu f32 (%.1f MB)\n", nt, total,
               (double)total * 4 / 1e6);
        printf("  engine, 161 allreduces     %9.2f ms  (%.1f collectives, %.1f cycles, %.1f "
               "cache hits per step)\n",
               eng_step * 1e3, (double)(s1.collectives - s0.collectives) / steps,
               (double)(s1.cycles - s0.cycles) / steps,
               (double)(s1.cache_hits - s0.cache_hits) / steps);
        printf("  one hoop_allreduce          %9.2f ms  (engine / blocking %.2f)\n",
               base_step * 1e3, eng_step / base_step);
        printf("8-byte allreduce:\n");
        printf("  engine enqueue + wait      %9.1f us  (%llu cycles for %d calls)\n",
               eng_small * 1e6, (unsigned long long)(s2.cycles - s1.cycles), small_iters + 100);
        printf("  hoop_allreduce              %9.1f us\n", base_small * 1e6);
    }
    if (rank == 0 && many && !keyval)
        printf("%d tensors of %ld f32, AVG:\n  engine, one allreduce each  %9.3f ms  (%.1f "
               "collectives, %.1f cycles per step)\n"
               "  engine, grouped             %9.3f ms\n",
               many, many_elems, many_each * 1e3, many_colls, many_cycles, many_grouped * 1e3);
    st = hoop_engine_destroy(e);
    for (int t = 0; t < nt; t++)
        free(bufs[t]);
    free(bufs);
    free(flat);
    free(times);
    return st ? fail("hoop_engine_destroy", st) : 0;
}
