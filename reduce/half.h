/* half.h - f16 and bf16 to and from f32, round to nearest even, inline so
 * the reduction loops can use them. Compiled by nvcc too (gpu/reduce.cu),
 * for the device: the GPU's kernels round with these very functions. */
#ifndef HOOP_RING_HALF_H
#define HOOP_RING_HALF_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define HOOP_HALF_FN static inline __host__ __device__
#else
#define HOOP_HALF_FN static inline
#endif

HOOP_HALF_FN uint32_t hoop_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

HOOP_HALF_FN float hoop_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

HOOP_HALF_FN float hoop_h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t rest = (uint32_t)(h & 0x7fff) << 13; /* exponent and mantissa in place */
    uint32_t exp = h & 0x7c00;
    if (exp == 0x7c00) /* inf, NaN */
        return hoop_bits_f32(sign | 0x7f800000 | rest);
    if (exp == 0) {
        /* Zero or subnormal: scale the mantissa as a float by 2^-24, exact. */
        float m = (float)(h & 0x3ff) * 5.9604644775390625e-8f;
        return hoop_bits_f32(sign | hoop_f32_bits(m));
    }
    return hoop_bits_f32(sign | (rest + (112u << 23)));
}

HOOP_HALF_FN uint16_t hoop_f2h(float f)
{
    uint32_t x = hoop_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffff;
    if (x > 0x7f800000) /* NaN: keep it quiet and a NaN */
        return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
    if (x >= 0x477ff000) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00);
    if (x < 0x38800000) { /* below 2^-14: subnormal or zero */
        if (x < 0x33000000) /* below 2^-25, or exactly half of 2^-24: zero */
            return sign;
        uint32_t e = x >> 23;
        uint32_t m = (x & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t r = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (x - 0x38000000) >> 13; /* rebias 127 -> 15 */
    uint32_t rem = x & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1)))
        r++; /* a carry into the exponent is still the right encoding */
    return (uint16_t)(sign | r);
}

HOOP_HALF_FN float hoop_bf2f(uint16_t h)
{
    return hoop_bits_f32((uint32_t)h << 16);
}

HOOP_HALF_FN uint16_t hoop_f2bf(float f)
{
    uint32_t x = hoop_f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
