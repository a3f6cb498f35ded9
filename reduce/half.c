/* half.c - the exported conversions (the library itself uses half.h). */
#include "hoop.h"
#include "reduce/half.h"

float hoop_f16_to_f32(unsigned short h)
{
    return hoop_h2f(h);
}

unsigned short hoop_f32_to_f16(float f)
{
    return hoop_f2h(f);
}

float hoop_bf16_to_f32(unsigned short h)
{
    return hoop_bf2f(h);
}

unsigned short hoop_f32_to_bf16(float f)
{
    return hoop_f2bf(f);
}
