/* avx512.c - the reduction kernels built for AVX-512 (F, BW, VL,
 * DQ) with 512-bit vectors, and F16C for f16 (the Makefile gives this file
 * those flags on x86-64); reduce/reduce.c calls them only on a CPU that has
 * them all. */
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__F16C__)
#define HOOP_REDUCE_ISA avx512
#define HOOP_REDUCE_F16C 1
#include "reduce/kernels.h"
#else
typedef int hoop_reduce_avx512_not_built; /* another architecture: nothing here */
#endif
