/* remap.h - the registration caches' hardest case, for any transport that
 * registers memory: a buffer used again and again, then freed and mapped
 * anew at the same address (new pages, new contents), then at twice the
 * size there; every allreduce on it must come out exact. */
#ifndef HOOP_TESTS_REMAP_H
#define HOOP_TESTS_REMAP_H

#include "hoop.h"

/* The transport's count of registrations made so far, read at each phase. */
struct remap_counts {
    unsigned long first;  /* after the first call */
    unsigned long reused; /* after 10 more calls on the same buffer */
    unsigned long remapped; /* after 3 calls on new memory at the same address */
    unsigned long grown;  /* after 3 calls on a mapping twice as large there */
};

#define REMAP_COUNT (1u << 20) /* f32, 4 MiB: four chunks of 1 MiB */

/* Run the phases on this rank (a harness_run body's work), reading the
 * count with regs(comm). 0, or a harness_failf. */
int remap_run(hoop_comm_t *comm, int rank, int size, unsigned long (*regs)(hoop_comm_t *comm),
              struct remap_counts *out);

#endif
