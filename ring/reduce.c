/* reduce.c - element-wise reduction kernels, one plain loop per type and op
 * so that the compiler vectorises them (this file is built with -O3). */
#include "ring/reduce.h"
#include "ring/half.h"

#include <stdint.h>

#define LOOP(T, EXPR)                                 \
    do {                                              \
        T *d_ = dst;                                  \
        const T *x_ = a;                              \
        const T *y_ = b;                              \
        for (size_t i = 0; i < n; i++) {              \
            T p = x_[i], q = y_[i];                   \
            d_[i] = (T)(EXPR);                        \
        }                                             \
    } while (0)

/* Integers: sums and products in the unsigned type (wraparound is defined
 * there and gives the same bits as two's complement); order in the signed
 * type when ST is signed. */
#define INT_KERNEL(NAME, UT, ST)                                                           \
    static void NAME(void *dst, const void *a, const void *b, size_t n, hoop_op_t op,       \
                     int avg_n)                                                           \
    {                                                                                      \
        switch (op) {                                                                      \
        case HOOP_SUM: LOOP(UT, p + q); break;                                             \
        case HOOP_PROD: LOOP(UT, p * q); break;                                            \
        case HOOP_MIN: LOOP(ST, q < p ? q : p); break;                                     \
        case HOOP_MAX: LOOP(ST, q > p ? q : p); break;                                     \
        case HOOP_AVG:                                                                     \
            if (avg_n > 0) {                                                               \
                ST div_ = (ST)avg_n;                                                       \
                LOOP(ST, (ST)(UT)((UT)p + (UT)q) / div_);                                  \
            } else {                                                                       \
                LOOP(UT, p + q);                                                           \
            }                                                                              \
            break;                                                                         \
        default: break;                                                                    \
        }                                                                                  \
    }

INT_KERNEL(reduce_i8, uint8_t, int8_t)
INT_KERNEL(reduce_u8, uint8_t, uint8_t)
INT_KERNEL(reduce_i32, uint32_t, int32_t)
INT_KERNEL(reduce_u32, uint32_t, uint32_t)
INT_KERNEL(reduce_i64, uint64_t, int64_t)
INT_KERNEL(reduce_u64, uint64_t, uint64_t)

#define FLOAT_KERNEL(NAME, T)                                                               \
    static void NAME(void *dst, const void *a, const void *b, size_t n, hoop_op_t op,        \
                     int avg_n)                                                            \
    {                                                                                       \
        switch (op) {                                                                       \
        case HOOP_SUM: LOOP(T, p + q); break;                                               \
        case HOOP_PROD: LOOP(T, p * q); break;                                              \
        case HOOP_MIN: LOOP(T, q < p ? q : p); break;                                       \
        case HOOP_MAX: LOOP(T, q > p ? q : p); break;                                       \
        case HOOP_AVG:                                                                      \
            if (avg_n > 0) {                                                                \
                T div_ = (T)avg_n;                                                          \
                LOOP(T, (p + q) / div_);                                                    \
            } else {                                                                        \
                LOOP(T, p + q);                                                             \
            }                                                                               \
            break;                                                                          \
        default: break;                                                                     \
        }                                                                                   \
    }

FLOAT_KERNEL(reduce_f32, float)
FLOAT_KERNEL(reduce_f64, double)

/* 16-bit floats: widen to f32, combine, round back once. */
#define HALF_KERNEL(NAME, TOF, FROMF)                                                       \
    static void NAME(void *dst, const void *a, const void *b, size_t n, hoop_op_t op,        \
                     int avg_n)                                                            \
    {                                                                                       \
        switch (op) {                                                                       \
        case HOOP_SUM: LOOP(uint16_t, FROMF(TOF(p) + TOF(q))); break;                       \
        case HOOP_PROD: LOOP(uint16_t, FROMF(TOF(p) * TOF(q))); break;                      \
        case HOOP_MIN: LOOP(uint16_t, TOF(q) < TOF(p) ? q : p); break;                      \
        case HOOP_MAX: LOOP(uint16_t, TOF(q) > TOF(p) ? q : p); break;                      \
        case HOOP_AVG:                                                                      \
            if (avg_n > 0) {                                                                \
                float div_ = (float)avg_n;                                                  \
                LOOP(uint16_t, FROMF((TOF(p) + TOF(q)) / div_));                            \
            } else {                                                                        \
                LOOP(uint16_t, FROMF(TOF(p) + TOF(q)));                                     \
            }                                                                               \
            break;                                                                          \
        default: break;                                                                     \
        }                                                                                   \
    }

HALF_KERNEL(reduce_f16, hoop_h2f, hoop_f2h)
HALF_KERNEL(reduce_bf16, hoop_bf2f, hoop_f2bf)

typedef void (*reduce_fn)(void *, const void *, const void *, size_t, hoop_op_t, int);

static const reduce_fn reduce_table[HOOP_DTYPE_COUNT] = {
    [HOOP_I8] = reduce_i8,     [HOOP_U8] = reduce_u8,   [HOOP_I32] = reduce_i32,
    [HOOP_U32] = reduce_u32,   [HOOP_I64] = reduce_i64, [HOOP_U64] = reduce_u64,
    [HOOP_F16] = reduce_f16,   [HOOP_BF16] = reduce_bf16, [HOOP_F32] = reduce_f32,
    [HOOP_F64] = reduce_f64,
};

void hoop_reduce_kernel(void *dst, const void *a, const void *b, size_t n, hoop_dtype_t dtype, hoop_op_t op,
                 int avg_n)
{
    if ((unsigned)dtype < HOOP_DTYPE_COUNT)
        reduce_table[dtype](dst, a, b, n, op, avg_n);
}
