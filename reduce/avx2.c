/* avx2.c - the reduction kernels built for AVX2 and F16C (the
 * Makefile gives this file -mavx2 -mf16c on x86-64); reduce/reduce.c calls
 * them only on a CPU that has both. */
#if defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__)
#define HOOP_REDUCE_ISA avx2
#define HOOP_REDUCE_F16C 1
#include "reduce/kernels.h"
#else
typedef int hoop_reduce_avx2_not_built; /* another architecture: nothing here */
#endif
