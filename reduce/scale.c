/* scale.c - multiplying a buffer by a factor (the engine's prescale and
 * postscale), one definition for the engine and the GPU emulation. */
#include "reduce/half.h"
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
    default: break; /* integers are not scaled */
    }
}
