/* test_paths.c - the allreduce's two algorithms, each forced, give exact
 * results on every rank: the ring (HOOP_SMALL_BYTES=0) and recursive
 * doubling (a threshold above the message), with N a power of two and not
 * (where extra ranks fold into partners first), every dtype and op. */
#include <criterion/criterion.h>

#include "harness.h"
#include "hoop.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>

#define PATH_COUNT 1001

/* Small integers (exact in every type and in any order for sum at N <= 8),
 * 1 or 2 for prod, anything for min/max; signed types get negatives. */
static double input(int dt, int op, int rank, size_t i)
{
    unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(rank * 40503u);
    int neg = dt == HOOP_I8 || dt == HOOP_I16 || dt == HOOP_I32 || dt == HOOP_I64 ||
              dt == HOOP_F16 || dt == HOOP_BF16 || dt == HOOP_F32 || dt == HOOP_F64;
    if (op == HOOP_PROD)
        return 1 + ((h >> 7) & 1);
    double v = (double)((h >> 3) % 15);
    return neg && (h & 1) && v != 0 ? -v : v; /* never -0: min(-0, +0) may be either */
}

static void store(int dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case HOOP_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case HOOP_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HOOP_I16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case HOOP_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case HOOP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HOOP_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case HOOP_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case HOOP_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case HOOP_F16: ((uint16_t *)buf)[i] = hoop_f32_to_f16((float)v); break;
    case HOOP_BF16: ((uint16_t *)buf)[i] = hoop_f32_to_bf16((float)v); break;
    case HOOP_F32: ((float *)buf)[i] = (float)v; break;
    case HOOP_F64: ((double *)buf)[i] = v; break;
    default: break;
    }
}

/* The exact result of element i, in the type's bits. */
static void expect(int dt, int op, int n, size_t i, void *out)
{
    double acc = op == HOOP_PROD ? 1 : op == HOOP_MIN ? 1e300 : op == HOOP_MAX ? -1e300 : 0;
    for (int r = 0; r < n; r++) {
        double v = input(dt, op, r, i);
        if (op == HOOP_SUM || op == HOOP_AVG) acc += v;
        else if (op == HOOP_PROD) acc *= v;
        else if (op == HOOP_MIN) acc = v < acc ? v : acc;
        else acc = v > acc ? v : acc;
    }
    if (op == HOOP_AVG) {
        if (dt == HOOP_F16 || dt == HOOP_BF16 || dt == HOOP_F32) {
            float f = (float)acc / (float)n;
            if (dt == HOOP_F32) { memcpy(out, &f, 4); return; }
            uint16_t h = dt == HOOP_F16 ? hoop_f32_to_f16(f) : hoop_f32_to_bf16(f);
            memcpy(out, &h, 2);
            return;
        }
        if (dt == HOOP_F64) { acc = acc / n; memcpy(out, &acc, 8); return; }
        acc = (double)((long long)acc / n); /* integers truncate toward zero */
    }
    store(dt, out, 0, acc);
}

static int paths_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    int bad = 0;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
        size_t es = hoop_dtype_size((hoop_dtype_t)dt);
        uint8_t *buf = malloc(PATH_COUNT * es), *want = malloc(es);
        for (int op = 0; op < HOOP_OP_COUNT; op++) {
            for (size_t i = 0; i < PATH_COUNT; i++)
                store(dt, buf, i, input(dt, op, rank, i));
            hoop_status_t st = hoop_allreduce(comm, buf, buf, PATH_COUNT, (hoop_dtype_t)dt,
                                              (hoop_op_t)op);
            if (st) {
                fprintf(stderr, "rank %d: %s %s: %s\n", rank, hoop_dtype_str(dt), hoop_op_str(op),
                        hoop_last_error());
                return 1;
            }
            for (size_t i = 0; i < PATH_COUNT; i++) {
                expect(dt, op, size, i, want);
                if (memcmp(buf + i * es, want, es) != 0 && bad++ < 3)
                    fprintf(stderr, "rank %d: %s %s: element %zu wrong\n", rank,
                            hoop_dtype_str(dt), hoop_op_str(op), i);
            }
        }
        free(buf);
        free(want);
    }
    return bad != 0;
}

static void run_path(int n, const char *small_bytes)
{
    /* The children inherit the variable; the library reads it at init. */
    setenv("HOOP_SMALL_BYTES", small_bytes, 1);
    char report[8192];
    bool ok = harness_run(n, NULL, paths_rank, NULL, 120, report, sizeof(report));
    unsetenv("HOOP_SMALL_BYTES");
    cr_assert(ok, "N=%d HOOP_SMALL_BYTES=%s:\n%s", n, small_bytes, report);
}

Test(paths, ring_n3) { run_path(3, "0"); }
Test(paths, ring_n4) { run_path(4, "0"); }
Test(paths, recursive_doubling_n3) { run_path(3, "1M"); }
Test(paths, recursive_doubling_n4) { run_path(4, "1M"); }
Test(paths, recursive_doubling_n6) { run_path(6, "1M"); }
Test(paths, recursive_doubling_n8) { run_path(8, "1M"); }

/* The same bits on every rank, and from one call to the next, where the
 * order of the additions shows: f32 of many magnitudes and bf16 (rounded
 * after every combine), and for min and max zeros of both signs, whose
 * winner depends on the order of the operands. Each rank leaves its results
 * in shared memory for the test to compare. */
#define SAME_COUNT 3001
#define SAME_RANKS_MAX 8
#define SAME_OPS 4
static const hoop_op_t same_ops[SAME_OPS] = {HOOP_SUM, HOOP_AVG, HOOP_MIN, HOOP_MAX};
static const hoop_dtype_t same_dts[2] = {HOOP_F32, HOOP_BF16};
#define SAME_SLOT (2 * SAME_OPS * SAME_COUNT * sizeof(float))
static uint8_t *same_out;

static float same_value(hoop_op_t op, int rank, size_t i, unsigned *seed)
{
    if ((op == HOOP_MIN || op == HOOP_MAX) && (i + (size_t)rank) % 3 != 2)
        return (i + (size_t)rank) % 3 ? 0.0f : -0.0f;
    float m = (float)rand_r(seed) / (float)RAND_MAX - 0.5f;
    return ldexpf(m, rand_r(seed) % 40 - 20);
}

static int same_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size, (void)arg;
    unsigned seed = 7919u * (unsigned)rank + 1;
    uint8_t *in = malloc(SAME_COUNT * 4), *again = malloc(SAME_COUNT * 4);
    uint8_t *out = same_out + (size_t)rank * SAME_SLOT;
    if (!in || !again)
        return 1;
    int bad = 0;
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < SAME_OPS; o++) {
            hoop_dtype_t dt = same_dts[d];
            size_t es = hoop_dtype_size(dt);
            for (size_t i = 0; i < SAME_COUNT; i++) {
                float v = same_value(same_ops[o], rank, i, &seed);
                if (dt == HOOP_F32)
                    memcpy(in + i * 4, &v, 4);
                else
                    ((uint16_t *)in)[i] = hoop_f32_to_bf16(v);
            }
            uint8_t *res = out + (size_t)(d * SAME_OPS + o) * SAME_COUNT * 4;
            hoop_status_t st = hoop_allreduce(comm, in, res, SAME_COUNT, dt, same_ops[o]);
            if (!st)
                st = hoop_allreduce(comm, in, again, SAME_COUNT, dt, same_ops[o]);
            if (st) {
                fprintf(stderr, "rank %d: %s\n", rank, hoop_last_error());
                return 1;
            }
            if (memcmp(res, again, SAME_COUNT * es) != 0 && bad++ < 3)
                fprintf(stderr, "rank %d: %s %s: two calls gave other bits\n", rank,
                        hoop_dtype_str(dt), hoop_op_str(same_ops[o]));
        }
    free(in);
    free(again);
    return bad != 0;
}

static void run_same(int n, const char *small_bytes)
{
    same_out = mmap(NULL, SAME_RANKS_MAX * SAME_SLOT, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(same_out != MAP_FAILED, "mmap");
    setenv("HOOP_SMALL_BYTES", small_bytes, 1);
    char report[8192];
    bool ok = harness_run(n, NULL, same_rank, NULL, 120, report, sizeof(report));
    unsetenv("HOOP_SMALL_BYTES");
    cr_assert(ok, "N=%d HOOP_SMALL_BYTES=%s:\n%s", n, small_bytes, report);
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < SAME_OPS; o++) {
            size_t off = (size_t)(d * SAME_OPS + o) * SAME_COUNT * 4;
            size_t len = SAME_COUNT * hoop_dtype_size(same_dts[d]);
            for (int r = 1; r < n; r++)
                cr_assert(memcmp(same_out + off, same_out + (size_t)r * SAME_SLOT + off, len) == 0,
                          "N=%d HOOP_SMALL_BYTES=%s %s %s: rank %d's bits differ from rank 0's", n,
                          small_bytes, hoop_dtype_str(same_dts[d]), hoop_op_str(same_ops[o]), r);
        }
    munmap(same_out, SAME_RANKS_MAX * SAME_SLOT);
}

Test(paths, same_bits_on_every_rank_ring) { run_same(3, "0"); run_same(4, "0"); }
Test(paths, same_bits_on_every_rank_recursive_doubling_n2_to_5)
{
    for (int n = 2; n <= 5; n++)
        run_same(n, "1M");
}
Test(paths, same_bits_on_every_rank_recursive_doubling_n6_to_8)
{
    for (int n = 6; n <= 8; n++)
        run_same(n, "1M");
}
