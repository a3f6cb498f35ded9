/* test_reduce.c - every reduction kernel against a plain scalar reference
 * written independently here, on random data, with dst aliasing a (in
 * place) and not. */
#include <criterion/criterion.h>

#include "ring/reduce.h"
#include "hoop.h"

#include <math.h>
#include <stdint.h>
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
        case HOOP_PROD: r = (ST)(UT)((UT)x * (UT)y); break;                     \
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

Test(reduce, every_kernel_matches_reference)
{
    const size_t n = 1037; /* odd: exercises the vector loops' tails */
    unsigned seed = 42;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++) {
        size_t es = hoop_dtype_size((hoop_dtype_t)dt);
        uint8_t *a = malloc(n * es), *b = malloc(n * es), *out = malloc(n * es),
                *inplace = malloc(n * es), *want = malloc(n * es);
        for (int op = 0; op < HOOP_OP_COUNT; op++) {
            for (int avg_n = 0; avg_n <= (op == HOOP_AVG ? 7 : 0); avg_n += 7) {
                fill((hoop_dtype_t)dt, a, n, &seed);
                fill((hoop_dtype_t)dt, b, n, &seed);
                for (size_t i = 0; i < n; i++)
                    ref_one((hoop_dtype_t)dt, (hoop_op_t)op, a + i * es, b + i * es, want + i * es,
                            avg_n);
                hoop_reduce_kernel(out, a, b, n, (hoop_dtype_t)dt, (hoop_op_t)op, avg_n);
                memcpy(inplace, a, n * es);
                hoop_reduce_kernel(inplace, inplace, b, n, (hoop_dtype_t)dt, (hoop_op_t)op, avg_n);
                for (size_t i = 0; i < n; i++) {
                    cr_assert_eq(memcmp(out + i * es, want + i * es, es), 0,
                                 "%s %s avg_n=%d: element %zu differs", hoop_dtype_str(dt),
                                 hoop_op_str(op), avg_n, i);
                    cr_assert_eq(memcmp(inplace + i * es, want + i * es, es), 0,
                                 "%s %s avg_n=%d in place: element %zu differs",
                                 hoop_dtype_str(dt), hoop_op_str(op), avg_n, i);
                }
            }
        }
        free(a), free(b), free(out), free(inplace), free(want);
    }
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
