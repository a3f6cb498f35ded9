/* reduce.h - element-wise reduction kernels. */
#ifndef HOOP_RING_REDUCE_H
#define HOOP_RING_REDUCE_H

#include "hoop.h"

#include <stddef.h>

/* dst[i] = a[i] op b[i] for n elements (dst may be a). For HOOP_AVG this is a
 * sum, and when avg_n > 0 (the last reduction of an average) the sum is then
 * divided by avg_n in the accumulation type: f32 for f16/bf16, integer
 * division (toward zero) for integers. Signed integer sums and products wrap
 * around as two's complement, with no undefined behaviour. */
void hoop_reduce_kernel(void *dst, const void *a, const void *b, size_t n, hoop_dtype_t dtype, hoop_op_t op,
                 int avg_n);

#endif
