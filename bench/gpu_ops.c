/* gpu_ops.c - the GPU work a device allreduce asks for: the copies and
 * kernels the ring's pipeline queues per call (the ring's gpu_ops
 * counter), and how many of them copied a chunk from the GPU again
 * (gpu_restaged), for f32 sums of 1 MiB to 16 MiB, in place. Device
 * memory where a GPU can be used, else the pipeline emulated over host
 * memory (HOOP_GPU_EMULATE), which queues the same work. Run it with
 * hooprun -np N; rank 0 prints one line per size (bench/RESULTS.md). */
#include "collectives/comm.h"
#include "gpu/gpu.h"
#include "hoop.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CALLS 5
#define MAX_BYTES (16u << 20)

int main(void)
{
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    hoop_comm_t *comm = NULL;
    if (hoop_comm_init(&comm, &cfg)) {
        fprintf(stderr, "gpu_ops: %s\n", hoop_last_error());
        return 1;
    }
    char why[256];
    int real = hoop_gpu_available(NULL);
    void *buf = NULL;
    if (real ? hoop_gpu_set_device(0, why, sizeof(why)) ||
                   hoop_gpu_malloc(&buf, MAX_BYTES, why, sizeof(why)) ||
                   hoop_gpu_memset(buf, 0, MAX_BYTES, why, sizeof(why))
             : !(buf = calloc(1, MAX_BYTES))) {
        fprintf(stderr, "gpu_ops: no buffer of %u bytes: %s\n", MAX_BYTES,
                real ? why : "out of memory");
        hoop_comm_destroy(comm);
        return 1;
    }
    if (!real)
        hoop_gpu_emulate_force(1);
    const struct hoop_ring *r = &comm->ring;
    int rc = 0;
    for (size_t bytes = 1u << 20; bytes <= MAX_BYTES && !rc; bytes *= 2) {
        uint64_t ops = r->gpu_ops, again = r->gpu_restaged;
        for (int i = 0; i < CALLS && !rc; i++)
            if (hoop_allreduce(comm, buf, buf, bytes / 4, HOOP_F32, HOOP_SUM)) {
                fprintf(stderr, "gpu_ops: %s\n", hoop_last_error());
                rc = 1;
            }
        if (!rc && hoop_comm_rank(comm) == 0)
            printf("N=%d %6zu KiB: %6.1f GPU operations per call, %5.1f copied again (%s, %s)\n",
                   hoop_comm_size(comm), bytes >> 10, (double)(r->gpu_ops - ops) / CALLS,
                   (double)(r->gpu_restaged - again) / CALLS, real ? "GPU 0" : "emulated",
                   hoop_comm_transport(comm));
    }
    if (!real) {
        hoop_gpu_emulate_force(0);
        free(buf);
    } else {
        hoop_gpu_free(buf);
    }
    hoop_comm_destroy(comm);
    return rc;
}
