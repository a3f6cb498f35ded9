/* iscale.h - an integer times the engine's prescale or postscale, as
 * Horovod scales integer tensors: in double, truncated toward zero as a
 * cast does, and held to the type's range (where a cast would be
 * undefined). Inline for the CPU's loop (scale.c) and compiled by nvcc for
 * the GPU's kernel (gpu/scale.cu), so that both give the same integers. */
#ifndef HOOP_REDUCE_ISCALE_H
#define HOOP_REDUCE_ISCALE_H

#include <stdint.h>

#ifdef __CUDACC__
#define HOOP_ISCALE_FN static inline __host__ __device__
#else
#define HOOP_ISCALE_FN static inline
#endif

/* (double)HI rounds up to a power of two for the 64-bit types: a v below
 * it converts exactly; one at or above it is out of range. */
#define HOOP_ISCALE_DEFINE(T, NAME, LO, HI)                                                        \
    HOOP_ISCALE_FN T NAME(T x, double f)                                                           \
    {                                                                                              \
        double v = (double)x * f;                                                                  \
        return v <= (double)(LO) ? (T)(LO) : v >= (double)(HI) ? (T)(HI) : (T)v;                   \
    }

HOOP_ISCALE_DEFINE(int8_t, hoop_iscale_i8, INT8_MIN, INT8_MAX)
HOOP_ISCALE_DEFINE(uint8_t, hoop_iscale_u8, 0, UINT8_MAX)
HOOP_ISCALE_DEFINE(int16_t, hoop_iscale_i16, INT16_MIN, INT16_MAX)
HOOP_ISCALE_DEFINE(uint16_t, hoop_iscale_u16, 0, UINT16_MAX)
HOOP_ISCALE_DEFINE(int32_t, hoop_iscale_i32, INT32_MIN, INT32_MAX)
HOOP_ISCALE_DEFINE(uint32_t, hoop_iscale_u32, 0, UINT32_MAX)
HOOP_ISCALE_DEFINE(int64_t, hoop_iscale_i64, INT64_MIN, INT64_MAX)
HOOP_ISCALE_DEFINE(uint64_t, hoop_iscale_u64, 0, UINT64_MAX)

#endif
