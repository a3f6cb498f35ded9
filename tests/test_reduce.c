/* test_reduce.c - every reduction kernel against a plain scalar reference
 * written independently here, on random data, with dst aliasing a (in
 * place) and not. */
#include <criterion/criterion.h>

#include "reduce/reduce.h"
#include "hoop.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reference: element i of a op b, written into out (esize bytes). */
static void ref_one(hoop_dtype_t dt, hoop_op_t op, const void *a, const void *b, void *out,
                    int avg_n)
{
#define INTREF(ST, UT)                                                          \
    do {                                                                        \
        ST x, y, r;                                                             \
        memcpy(&x, a, sizeof(x));                                               \
        memcpy(&y, b, sizeof(y));                                               \
        switch (op) {                                                           \
        case HOOP_SUM: r = (ST)(UT)((UT)x + (UT)y); break;                      \
        case HOOP_PROD: r = (ST)(UT)(1u * (UT)x * (UT)y); break;                \
        case HOOP_MIN: r = x < y ? x : y; break;                                \
        case HOOP_MAX: r = x > y ? x : y; break;                                \
        default:                                                                \
            r = (ST)(UT)((UT)x + (UT)y);                                        \
            if (avg_n)                                                          \
                r = (ST)(r / (ST)avg_n);                                        \
        }                                                                       \
        memcpy(out, &r, sizeof(r));                                             \
    } while (0)
#define FLTREF(T)                                                               \
    do {                                                                        \
        T x, y, r;                                                              \
        memcpy(&x, a, sizeof(x));                                               \
        memcpy(&y, b, sizeof(y));                                               \
        switch (op) {                                                           \
        case HOOP_SUM: r = x + y; break;                                        \
        case HOOP_PROD: r = x * y; break;                                       \
        case HOOP_MIN: r = fmin(x, y); break;                                   \
        case HOOP_MAX: r = fmax(x, y); break;                                   \
        default: r = avg_n ? (x + y) / (T)avg_n : x + y;                        \
        }                                                                       \
        memcpy(out, &r, sizeof(r));                                             \
    } while (0)
    switch (dt) {
    case HOOP_I8: INTREF(int8_t, uint8_t); break;
    case HOOP_U8: INTREF(uint8_t, uint8_t); break;
    case HOOP_I16: INTREF(int16_t, uint16_t); break;
    case HOOP_U16: INTREF(uint16_t, uint16_t); break;
    case HOOP_I32: INTREF(int32_t, uint32_t); break;
    case HOOP_U32: INTREF(uint32_t, uint32_t); break;
    case HOOP_I64: INTREF(int64_t, uint64_t); break;
    case HOOP_U64: INTREF(uint64_t, uint64_t); break;
    case HOOP_F32: FLTREF(float); break;
    case HOOP_F64: FLTREF(double); break;
    case HOOP_F16:
    case HOOP_BF16: {
        uint16_t x, y;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        int h = dt == HOOP_F16;
        float fx = h ? hoop_f16_to_f32(x) : hoop_bf16_to_f32(x);
        float fy = h ? hoop_f16_to_f32(y) : hoop_bf16_to_f32(y);
        float r;
        switch (op) {
        case HOOP_SUM: r = fx + fy; break;
        case HOOP_PROD: r = fx * fy; break;
        case HOOP_MIN: r = fminf(fx, fy); break;
        case HOOP_MAX: r = fmaxf(fx, fy); break;
        default: r = avg_n ? (fx + fy) / (float)avg_n : fx + fy;
        }
        uint16_t o = h ? hoop_f32_to_f16(r) : hoop_f32_to_bf16(r);
        memcpy(out, &o, 2);
        break;
    }
    default: break;
    }
}

/* Random finite values of the type (no NaN: min/max of NaN is a choice). */
static void fill(hoop_dtype_t dt, void *p, size_t n, unsigned *seed)
{
    size_t es = hoop_dtype_size(dt);
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        float f = (float)((int)(rand_r(seed) % 2001) - 1000) / 8.0f;
        switch (dt) {
        case HOOP_F32: memcpy(b + i * es, &f, 4); break;
        case HOOP_F64: { double d = (double)f * 1.0000001; memcpy(b + i * es, &d, 8); break; }
        case HOOP_F16: { uint16_t h = hoop_f32_to_f16(f); memcpy(b + i * es, &h, 2); break; }
        case HOOP_BF16: { uint16_t h = hoop_f32_to_bf16(f); memcpy(b + i * es, &h, 2); break; }
        default:
            for (size_t k = 0; k < es; k++)
                b[i * es + k] = (uint8_t)rand_r(seed);
        }
    }
}

/* Every kernel of every instruction set this CPU runs, against the
 * reference; a set the CPU cannot run is named as skipped. */
Test(reduce, every_kernel_matches_reference)
{
    const size_t n = 1037; /* odd: exercises the vector loops' tails */
    int ran = 0;
    for (int isa = 0; isa < hoop_reduce_isa_count(); isa++) {
        if (!hoop_reduce_isa_runs(isa)) {
            fprintf(stderr, "reduction kernels %s: not checked, this CPU cannot run them\n",
                        hoop_reduce_isa_name(isa));
            continue;
        }
        ran++;
        unsigned seed = 42;
        for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
            size_t es = hoop_dtype_size((hoop_dtype_t)dt);
            uint8_t *a = malloc(n * es), *b = malloc(n * es), *out = malloc(n * es),
                    *inplace = malloc(n * es), *want = malloc(n * es);
            cr_assert(a && b && out && inplace && want, "out of memory");
            for (int op = 0; op < HOOP_OP_COUNT; op++) {
                for (int avg_n = 0; avg_n <= (op == HOOP_AVG ? 7 : 0); avg_n += 7) {
                    fill((hoop_dtype_t)dt, a, n, &seed);
                    fill((hoop_dtype_t)dt, b, n, &seed);
                    for (size_t i = 0; i < n; i++)
                        ref_one((hoop_dtype_t)dt, (hoop_op_t)op, a + i * es, b + i * es,
                                want + i * es, avg_n);
                    hoop_reduce_kernel_isa(isa, out, a, b, n, (hoop_dtype_t)dt, (hoop_op_t)op,
                                           avg_n);
                    memcpy(inplace, a, n * es);
                    hoop_reduce_kernel_isa(isa, inplace, inplace, b, n, (hoop_dtype_t)dt,
                                           (hoop_op_t)op, avg_n);
                    for (size_t i = 0; i < n; i++) {
                        cr_assert_eq(memcmp(out + i * es, want + i * es, es), 0,
                                     "%s: %s %s avg_n=%d: element %zu differs",
                                     hoop_reduce_isa_name(isa), hoop_dtype_str(dt),
                                     hoop_op_str(op), avg_n, i);
                        cr_assert_eq(memcmp(inplace + i * es, want + i * es, es), 0,
                                     "%s: %s %s avg_n=%d in place: element %zu differs",
                                     hoop_reduce_isa_name(isa), hoop_dtype_str(dt),
                                     hoop_op_str(op), avg_n, i);
                    }
                }
            }
            free(a), free(b), free(out), free(inplace), free(want);
        }
    }
    cr_assert(ran >= 1, "no instruction set ran, not even the baseline");
}

static int is_nan16(int dt, uint16_t h)
{
    return dt == HOOP_F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
                          : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

/* The 16-bit floats over every bit pattern of one operand (NaNs, infinities,
 * subnormals, both zeros) against a spread of the other: every instruction
 * set gives the baseline's bits, for every op (sums that overflow to
 * infinity and underflow to subnormals included), except which NaN a NaN
 * result is: with two NaN operands the hardware keeps the first one's
 * payload, and the compiler may swap the operands of a sum. (The ring still
 * gives every rank the same bits: each element is reduced in one place.) */
Test(reduce, half_kernels_agree_bit_for_bit_on_every_pattern)
{
    const size_t n = 65536;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *want = malloc(n * 2), *got = malloc(n * 2);
    cr_assert(a && b && want && got, "out of memory");
    const int base = hoop_reduce_isa_count() - 1;
    cr_assert_str_eq(hoop_reduce_isa_name(base), "generic");
    unsigned seed = 7;
    for (size_t i = 0; i < n; i++) {
        a[i] = (uint16_t)i;
        b[i] = (uint16_t)rand_r(&seed);
    }
    int compared = 0;
    for (int isa = 0; isa < base; isa++) {
        if (!hoop_reduce_isa_runs(isa)) {
            fprintf(stderr, "reduction kernels %s: not checked, this CPU cannot run them\n",
                        hoop_reduce_isa_name(isa));
            continue;
        }
        for (int dt = HOOP_F16; dt <= HOOP_BF16; dt++)
            for (int op = 0; op < HOOP_OP_COUNT; op++) {
                int avg_n = op == HOOP_AVG ? 3 : 0;
                hoop_reduce_kernel_isa(base, want, a, b, n, (hoop_dtype_t)dt, (hoop_op_t)op, avg_n);
                hoop_reduce_kernel_isa(isa, got, a, b, n, (hoop_dtype_t)dt, (hoop_op_t)op, avg_n);
                for (size_t i = 0; i < n; i++)
                    cr_assert(got[i] == want[i] || (is_nan16(dt, got[i]) && is_nan16(dt, want[i])),
                                 "%s %s %s: 0x%04x op 0x%04x gave 0x%04x, generic 0x%04x",
                                 hoop_reduce_isa_name(isa), hoop_dtype_str(dt), hoop_op_str(op),
                                 a[i], b[i], got[i], want[i]);
                compared++;
            }
    }
    if (!compared)
        fprintf(stderr, "only the generic kernels run on this CPU: nothing to compare them with\n");
    free(a), free(b), free(want), free(got);
}

Test(reduce, f16_sum_rounds_once_in_f32)
{
    /* 2048 + 1 is not an f16; combined in f32 and rounded to even: 2048. */
    uint16_t a = hoop_f32_to_f16(2048.0f), b = hoop_f32_to_f16(1.0f), d;
    hoop_reduce_kernel(&d, &a, &b, 1, HOOP_F16, HOOP_SUM, 0);
    cr_assert_eq(d, hoop_f32_to_f16(2048.0f));
    /* avg of 3 and 4 over 2 ranks = 3.5, exact in f16. */
    a = hoop_f32_to_f16(3.0f), b = hoop_f32_to_f16(4.0f);
    hoop_reduce_kernel(&d, &a, &b, 1, HOOP_F16, HOOP_AVG, 2);
    cr_assert_eq(d, hoop_f32_to_f16(3.5f));
}

Test(reduce, signed_integer_wraps)
{
    int8_t a = 127, b = 1, d;
    hoop_reduce_kernel(&d, &a, &b, 1, HOOP_I8, HOOP_SUM, 0);
    cr_assert_eq(d, -128);
    int64_t x = INT64_MAX, y = 2, z;
    hoop_reduce_kernel(&z, &x, &y, 1, HOOP_I64, HOOP_PROD, 0);
    cr_assert_eq(z, -2);
    int32_t p = -7, q = 0, r;
    hoop_reduce_kernel(&r, &p, &q, 1, HOOP_I32, HOOP_AVG, 2);
    cr_assert_eq(r, -3, "integer average truncates toward zero");
}

/* Integers are scaled as Horovod scales them: in double, truncated toward
 * zero; and held to the type's range, where a cast would be undefined. */
Test(reduce, integer_scaling_truncates_and_saturates)
{
    int8_t i8[] = {7, -7, 100, -100, 0, 1};
    hoop_reduce_scale(i8, 6, HOOP_I8, 1.5);
    int8_t i8_want[] = {10, -10, 127, -128, 0, 1};
    cr_assert_arr_eq(i8, i8_want, sizeof i8, "i8 times 1.5: %d %d %d %d %d %d", i8[0], i8[1], i8[2],
                     i8[3], i8[4], i8[5]);
    uint8_t u8[] = {3, 200, 9};
    hoop_reduce_scale(u8, 3, HOOP_U8, 0.5);
    uint8_t u8_want[] = {1, 100, 4};
    cr_assert_arr_eq(u8, u8_want, sizeof u8);
    hoop_reduce_scale(u8, 3, HOOP_U8, -3.0);
    cr_assert(u8[0] == 0 && u8[1] == 0 && u8[2] == 0, "u8 times -3 gave %u %u %u, not 0", u8[0],
              u8[1], u8[2]);
    int16_t i16[] = {300, -300, 30000, -30000};
    hoop_reduce_scale(i16, 4, HOOP_I16, 2.5);
    cr_assert(i16[0] == 750 && i16[1] == -750 && i16[2] == INT16_MAX && i16[3] == INT16_MIN,
              "i16 times 2.5 gave %d %d %d %d", i16[0], i16[1], i16[2], i16[3]);
    uint16_t u16[] = {7, 60000};
    hoop_reduce_scale(u16, 2, HOOP_U16, 1.5);
    cr_assert(u16[0] == 10 && u16[1] == UINT16_MAX, "u16 times 1.5 gave %u %u", u16[0], u16[1]);
    int32_t i32[] = {-99, 99, INT32_MAX, INT32_MIN};
    hoop_reduce_scale(i32, 4, HOOP_I32, 0.1);
    int32_t i32_want[] = {-9, 9, 214748364, -214748364};
    cr_assert_arr_eq(i32, i32_want, sizeof i32, "i32 times 0.1: %d %d %d %d", i32[0], i32[1],
                     i32[2], i32[3]);
    uint32_t u32[] = {UINT32_MAX, 5};
    hoop_reduce_scale(u32, 2, HOOP_U32, 2.0);
    cr_assert(u32[0] == UINT32_MAX && u32[1] == 10, "u32 times 2 gave %u %u", u32[0], u32[1]);
    int64_t i64[] = {INT64_MAX / 2 + 1, -(INT64_MAX / 2) - 2, 1000, -3};
    hoop_reduce_scale(i64, 4, HOOP_I64, 4.0);
    cr_assert(i64[0] == INT64_MAX && i64[1] == INT64_MIN && i64[2] == 4000 && i64[3] == -12,
              "i64 times 4 gave %lld %lld %lld %lld", (long long)i64[0], (long long)i64[1],
              (long long)i64[2], (long long)i64[3]);
    uint64_t u64[] = {UINT64_MAX / 2 + 1, 7};
    hoop_reduce_scale(u64, 2, HOOP_U64, 3.0);
    cr_assert(u64[0] == UINT64_MAX && u64[1] == 21, "u64 times 3 gave %llu %llu",
              (unsigned long long)u64[0], (unsigned long long)u64[1]);
    int32_t one[] = {5};
    hoop_reduce_scale(one, 1, HOOP_I32, 1.0);
    cr_assert_eq(one[0], 5);
}

/* HOOP_REDUCE_ISA names the kernels; a name that is not one falls back to
 * the widest the CPU runs (each Criterion test is its own process, so the
 * choice, made once per process, is made here). */
Test(reduce, isa_variable_picks_the_kernels)
{
    setenv("HOOP_REDUCE_ISA", "generic", 1);
    int chosen = hoop_reduce_isa_chosen();
    cr_assert_str_eq(hoop_reduce_isa_name(chosen), "generic");
}

Test(reduce, unknown_isa_falls_back_to_the_widest)
{
    setenv("HOOP_REDUCE_ISA", "sse9", 1);
    int widest = 0;
    while (!hoop_reduce_isa_runs(widest))
        widest++;
    cr_assert_eq(hoop_reduce_isa_chosen(), widest, "chose %s, the widest this CPU runs is %s",
                 hoop_reduce_isa_name(hoop_reduce_isa_chosen()), hoop_reduce_isa_name(widest));
}
