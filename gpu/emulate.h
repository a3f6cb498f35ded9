/* emulate.h - the pipeline's stream over host memory (HOOP_GPU_EMULATE=1,
 * gpu.h), for the tests of machines without a GPU. Copies and reductions
 * are queued, not done: each ends some microseconds after the one before
 * it (as on a GPU, while the host does other things, and the transport
 * may have nothing in flight), and is done when an event is asked about
 * after that time, so that whoever reads data before its event has passed
 * reads what was there before. */
#ifndef HOOP_GPU_EMULATE_H
#define HOOP_GPU_EMULATE_H

#include "hoop.h"

#include <stddef.h>

struct hoop_gpu_emu;

/* The queue, and slots_bytes of "pinned" slots in *slots; NULL when out of
 * memory. */
struct hoop_gpu_emu *hoop_gpu_emu_open(size_t slots_bytes, void **slots);
void hoop_gpu_emu_close(struct hoop_gpu_emu *e);
int hoop_gpu_emu_copy(struct hoop_gpu_emu *e, void *dst, const void *src, size_t bytes, char *why,
                      size_t why_len);
int hoop_gpu_emu_reduce(struct hoop_gpu_emu *e, void *dst, void *dst2, const void *a,
                        const void *b, size_t n, hoop_dtype_t dtype, hoop_op_t op, int avg_n,
                        char *why, size_t why_len);
int hoop_gpu_emu_mark(struct hoop_gpu_emu *e, unsigned ev);
/* 1 when the work before ev's last mark is done (after doing the work
 * whose time has come), 0 when not yet. */
int hoop_gpu_emu_passed(struct hoop_gpu_emu *e, unsigned ev);
void hoop_gpu_emu_drain(struct hoop_gpu_emu *e);

#endif
