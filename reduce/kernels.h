/* kernels.h - the bodies of the reduction kernels, compiled once per
 * instruction set. Each reduce/<isa>.c defines HOOP_REDUCE_ISA (its
 * name, a C identifier), and HOOP_REDUCE_F16C where f16 conversions may use
 * the F16C instructions, includes this file, and is built with that set's
 * compiler flags: the same plain loops are then vectorised for it, and
 * reduce/reduce.c picks the widest table the CPU runs. Every variant gives
 * the same bits: the operations are element-wise, in the same order, with
 * the same rounding. */
#ifndef HOOP_REDUCE_ISA
#error "define HOOP_REDUCE_ISA before including reduce/kernels.h"
#endif

#include "reduce/half.h"
#include "reduce/reduce.h"

#include <stdint.h>

/* dst is a (in place) or apart from both inputs: said with restrict, so
 * that no compiler falls back to scalar code on a run-time overlap check
 * (dst == a overlaps, and is safe: element i is read before it is written). */
#define LOOP_OVER(T, EXPR, X)                         \
    for (size_t i = 0; i < n; i++) {                  \
        T p = (X)[i], q = y_[i];                      \
        d_[i] = (T)(EXPR);                            \
    }
#define LOOP(T, EXPR)                                 \
    do {                                              \
        T *restrict d_ = dst;                         \
        const T *restrict y_ = b;                     \
        if ((const void *)d_ == a) {                  \
            LOOP_OVER(T, EXPR, d_)                    \
        } else {                                      \
            const T *restrict x_ = a;                 \
            LOOP_OVER(T, EXPR, x_)                    \
        }                                             \
    } while (0)

/* Integers: sums and products in the unsigned type (wraparound is defined
 * there and gives the same bits as two's complement; products at least in
 * unsigned int, where u16 would promote to int and overflow it); order in
 * the signed type when ST is signed. */
#define INT_KERNEL(NAME, UT, ST)                                                           \
    static void NAME(void *dst, const void *a, const void *b, size_t n, hoop_op_t op,       \
                     int avg_n)                                                           \
    {                                                                                      \
        switch (op) {                                                                      \
        case HOOP_SUM: LOOP(UT, p + q); break;                                             \
        case HOOP_PROD: LOOP(UT, 1u * p * q); break;                                       \
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
INT_KERNEL(reduce_i16, uint16_t, int16_t)
INT_KERNEL(reduce_u16, uint16_t, uint16_t)
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

/* 16-bit floats: widen to f32, combine, round back once (to nearest even).
 * bf16 widens and rounds by integer shifts, which vectorise as they are. */
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

#ifdef HOOP_REDUCE_F16C
#include <immintrin.h>

/* 16-bit floats, vectorised by hand: widened to f32, combined, rounded
 * back to nearest even, giving the bits of the scalar conversions in
 * half.h. f16 converts with F16C, 8 elements at a time. bf16 widens by
 * interleaving each element with a zero below it and rounds by the integer
 * arithmetic of hoop_f2bf, 16 elements at a time (gcc vectorised the
 * scalar rounding only in part: 0.25x memcpy). min and max keep the
 * winner's own bits. Tails go through the scalar conversions. */
#define HALF_TAIL(SEXPR)                                                                    \
    for (; i < n; i++) {                                                                    \
        uint16_t p = x_[i], q = y_[i];                                                      \
        d_[i] = (uint16_t)(SEXPR);                                                          \
    }

/* VEXPR: the 8 results (__m128i) of the f32 vectors p and q, widened from
 * the f16 vectors hp and hq. */
#define F16_VEC_LOOP(VEXPR, SEXPR)                                                          \
    do {                                                                                    \
        uint16_t *d_ = dst;                                                                 \
        const uint16_t *x_ = a, *y_ = b;                                                    \
        size_t i = 0;                                                                       \
        for (; i + 8 <= n; i += 8) {                                                        \
            __m128i hp = _mm_loadu_si128((const __m128i *)(x_ + i));                        \
            __m128i hq = _mm_loadu_si128((const __m128i *)(y_ + i));                        \
            __m256 p = _mm256_cvtph_ps(hp), q = _mm256_cvtph_ps(hq);                        \
            _mm_storeu_si128((__m128i *)(d_ + i), (VEXPR));                                 \
        }                                                                                   \
        HALF_TAIL(SEXPR)                                                                    \
    } while (0)

#define F16C_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
static inline __m128i f16_narrow(__m256 v)
{
    return _mm256_cvtps_ph(v, F16C_RNE);
}

/* The lanes where the 32-bit mask m is set take q's bits, the others p's. */
static inline __m128i f16_pick(__m128i hp, __m128i hq, __m256 m)
{
    __m256i wide = _mm256_castps_si256(m);
    __m128i m16 = _mm_packs_epi32(_mm256_castsi256_si128(wide), _mm256_extracti128_si256(wide, 1));
    return _mm_blendv_epi8(hp, hq, m16);
}
#define F16_PICK(hp, hq, p, q, m) f16_pick(hp, hq, m)

/* VEXPR: 8 results, each in the low 16 bits of its 32-bit lane, of the f32
 * vectors p and q. Unpacking and packing both work within each 128-bit
 * half, so the pack puts every result back in its element's place. */
#define BF16_VEC_LOOP(VEXPR, SEXPR)                                                         \
    do {                                                                                    \
        uint16_t *d_ = dst;                                                                 \
        const uint16_t *x_ = a, *y_ = b;                                                    \
        const __m256i zero_ = _mm256_setzero_si256();                                       \
        size_t i = 0;                                                                       \
        for (; i + 16 <= n; i += 16) {                                                      \
            __m256i hp = _mm256_loadu_si256((const __m256i *)(x_ + i));                     \
            __m256i hq = _mm256_loadu_si256((const __m256i *)(y_ + i));                     \
            __m256 p = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero_, hp));               \
            __m256 q = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero_, hq));               \
            __m256i lo_ = (VEXPR);                                                          \
            p = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero_, hp));                      \
            q = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero_, hq));                      \
            __m256i hi_ = (VEXPR);                                                          \
            _mm256_storeu_si256((__m256i *)(d_ + i), _mm256_packus_epi32(lo_, hi_));        \
        }                                                                                   \
        HALF_TAIL(SEXPR)                                                                    \
    } while (0)

/* hoop_f2bf on 8 lanes: a NaN keeps its top bits and turns quiet, any
 * other value rounds to nearest even. */
static inline __m256i bf16_narrow(__m256 v)
{
    __m256i x = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(x, 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    __m256i odd = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, nan);
}

/* Widened bf16 have zero low halves: the winner's f32 bits shifted down
 * are its own bf16 bits. */
static inline __m256i bf16_pick(__m256 p, __m256 q, __m256 m)
{
    return _mm256_srli_epi32(_mm256_castps_si256(_mm256_blendv_ps(p, q, m)), 16);
}
#define BF16_PICK(hp, hq, p, q, m) bf16_pick(p, q, m)

#define HALF_VEC_KERNEL(NAME, VLOOP, NARROW, PICK, TOF, FROMF)                              \
    static void NAME(void *dst, const void *a, const void *b, size_t n, hoop_op_t op,        \
                     int avg_n)                                                            \
    {                                                                                       \
        switch (op) {                                                                       \
        case HOOP_SUM:                                                                      \
            VLOOP(NARROW(_mm256_add_ps(p, q)), FROMF(TOF(p) + TOF(q)));                     \
            break;                                                                          \
        case HOOP_PROD:                                                                     \
            VLOOP(NARROW(_mm256_mul_ps(p, q)), FROMF(TOF(p) * TOF(q)));                     \
            break;                                                                          \
        case HOOP_MIN:                                                                      \
            VLOOP(PICK(hp, hq, p, q, _mm256_cmp_ps(q, p, _CMP_LT_OQ)),                      \
                  TOF(q) < TOF(p) ? q : p);                                                 \
            break;                                                                          \
        case HOOP_MAX:                                                                      \
            VLOOP(PICK(hp, hq, p, q, _mm256_cmp_ps(q, p, _CMP_GT_OQ)),                      \
                  TOF(q) > TOF(p) ? q : p);                                                 \
            break;                                                                          \
        case HOOP_AVG:                                                                      \
            if (avg_n > 0) {                                                                \
                float div_ = (float)avg_n;                                                  \
                __m256 vdiv_ = _mm256_set1_ps(div_);                                        \
                VLOOP(NARROW(_mm256_div_ps(_mm256_add_ps(p, q), vdiv_)),                    \
                      FROMF((TOF(p) + TOF(q)) / div_));                                     \
            } else {                                                                        \
                VLOOP(NARROW(_mm256_add_ps(p, q)), FROMF(TOF(p) + TOF(q)));                 \
            }                                                                               \
            break;                                                                          \
        default: break;                                                                     \
        }                                                                                   \
    }

HALF_VEC_KERNEL(reduce_f16, F16_VEC_LOOP, f16_narrow, F16_PICK, hoop_h2f, hoop_f2h)
HALF_VEC_KERNEL(reduce_bf16, BF16_VEC_LOOP, bf16_narrow, BF16_PICK, hoop_bf2f, hoop_f2bf)
#else
HALF_KERNEL(reduce_f16, hoop_h2f, hoop_f2h)
HALF_KERNEL(reduce_bf16, hoop_bf2f, hoop_f2bf)
#endif

#define HOOP_REDUCE_CAT_(x, y) x##y
#define HOOP_REDUCE_CAT(x, y) HOOP_REDUCE_CAT_(x, y)

const hoop_reduce_fn HOOP_REDUCE_CAT(hoop_reduce_table_, HOOP_REDUCE_ISA)[HOOP_DTYPE_COUNT] = {
    [HOOP_I8] = reduce_i8,     [HOOP_U8] = reduce_u8,     [HOOP_I32] = reduce_i32,
    [HOOP_U32] = reduce_u32,   [HOOP_I64] = reduce_i64,   [HOOP_U64] = reduce_u64,
    [HOOP_F16] = reduce_f16,   [HOOP_BF16] = reduce_bf16, [HOOP_F32] = reduce_f32,
    [HOOP_F64] = reduce_f64,   [HOOP_I16] = reduce_i16,   [HOOP_U16] = reduce_u16,
};
