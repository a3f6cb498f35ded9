/* generic.c - the reduction kernels for the baseline of the target
 * (SSE2 on x86-64), which every CPU of the architecture runs. */
#define HOOP_REDUCE_ISA generic
#include "reduce/kernels.h"
