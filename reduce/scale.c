/* scale.c - multiplying a buffer by a factor (the engine's prescale and
 * postscale), one definition for the engine and the GPU emulation.
 * Integers as iscale.h says. */
#include "reduce/half.h"
#include "reduce/iscale.h"
#include "reduce/reduce.h"

void hoop_reduce_scale(void *buf, size_t n, hoop_dtype_t dtype, double f)
{
    if (f == 1.0)
        return;
    switch (dtype) {
    case HOOP_F32: {
        float *p = buf;
        float ff = (float)f;
        for (size_t i = 0; i < n; i++)
            p[i] *= ff;
        break;
    }
    case HOOP_F64: {
        double *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] *= f;
        break;
    }
    case HOOP_F16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = hoop_f2h(hoop_h2f(p[i]) * (float)f);
        break;
    }
    case HOOP_BF16: {
        uint16_t *p = buf;
        for (size_t i = 0; i < n; i++)
            p[i] = hoop_f2bf(hoop_bf2f(p[i]) * (float)f);
        break;
    }
#define ISCALE(T, FN)                                                                              \
    {                                                                                              \
        T *p = buf;                                                                                \
        for (size_t i = 0; i < n; i++)                                                             \
            p[i] = FN(p[i], f);                                                                    \
        break;                                                                                     \
    }
    case HOOP_I8: ISCALE(int8_t, hoop_iscale_i8)
    case HOOP_U8: ISCALE(uint8_t, hoop_iscale_u8)
    case HOOP_I16: ISCALE(int16_t, hoop_iscale_i16)
    case HOOP_U16: ISCALE(uint16_t, hoop_iscale_u16)
    case HOOP_I32: ISCALE(int32_t, hoop_iscale_i32)
    case HOOP_U32: ISCALE(uint32_t, hoop_iscale_u32)
    case HOOP_I64: ISCALE(int64_t, hoop_iscale_i64)
    case HOOP_U64: ISCALE(uint64_t, hoop_iscale_u64)
#undef ISCALE
    default: break;
    }
}
