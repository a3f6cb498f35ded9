/* reduce.h - element-wise reduction kernels, one table per instruction set
 * (reduce/<isa>.c), chosen at run time. */
#ifndef HOOP_RING_REDUCE_H
#define HOOP_RING_REDUCE_H

#include "hoop.h"

#include <stddef.h>

/* dst[i] = a[i] op b[i] for n elements (dst may be a). For HOOP_AVG this is a
 * sum, and when avg_n > 0 (the last reduction of an average) the sum is then
 * divided by avg_n in the accumulation type: f32 for f16/bf16, integer
 * division (toward zero) for integers. Signed integer sums and products wrap
 * around as two's complement, with no undefined behaviour. Every
 * instruction set gives the same bits. */
/* buf[i] *= f for n elements of a floating-point dtype (f16 and bf16
 * through f32, f32 times (float)f); integers are left as they are. The
 * engine's prescale and postscale (scale.c). */
void hoop_reduce_scale(void *buf, size_t n, hoop_dtype_t dtype, double f);

void hoop_reduce_kernel(void *dst, const void *a, const void *b, size_t n, hoop_dtype_t dtype,
                        hoop_op_t op, int avg_n);

typedef void (*hoop_reduce_fn)(void *dst, const void *a, const void *b, size_t n, hoop_op_t op,
                               int avg_n);

/* The instruction sets built in, widest first; the last is the target's
 * baseline. hoop_reduce_kernel uses the widest this CPU runs, or the one
 * HOOP_REDUCE_ISA names. The rest is for the tests and bench/reduce_bench. */
int hoop_reduce_isa_count(void);
const char *hoop_reduce_isa_name(int isa);
int hoop_reduce_isa_runs(int isa); /* 1 when this CPU (and its OS) can run it */
int hoop_reduce_isa_chosen(void);  /* the one hoop_reduce_kernel uses */
/* HOOP_ERR_INVALID, with a sentence, when HOOP_REDUCE_ISA names none of
 * auto and the instruction sets built in (hoop_comm_init refuses it; one
 * built in that this CPU cannot run is only warned about). */
hoop_status_t hoop_reduce_isa_check(void);
void hoop_reduce_kernel_isa(int isa, void *dst, const void *a, const void *b, size_t n,
                            hoop_dtype_t dtype, hoop_op_t op, int avg_n);

#endif
