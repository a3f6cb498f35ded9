/* remap.c - a buffer freed and mapped anew at the same address under a
 * transport's registration cache (remap.h). */
#include "remap.h"
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

/* One allreduce of n floats in buf (in place) whose exact sum is checked;
 * seed makes each call's values its own. */
static int remap_allreduce(hoop_comm_t *comm, int rank, int size, float *buf, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)((i * 7 + (size_t)seed * 13 + (size_t)rank) % 251);
    hoop_status_t st = hoop_allreduce(comm, buf, buf, n, HOOP_F32, HOOP_SUM);
    if (st)
        return harness_fail(rank, "hoop_allreduce", st);
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += (float)((i * 7 + (size_t)seed * 13 + (size_t)r) % 251);
        if (buf[i] != want)
            return harness_failf(rank, "call %d: element %zu is %g, not %g", seed, i,
                                 (double)buf[i], (double)want);
    }
    return 0;
}

int remap_run(hoop_comm_t *comm, int rank, int size, unsigned long (*regs)(hoop_comm_t *comm),
              struct remap_counts *out)
{
    size_t bytes = REMAP_COUNT * sizeof(float);
    float *buf = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return harness_failf(rank, "mmap: %s", strerror(errno));
    munmap(buf + REMAP_COUNT, bytes); /* the upper half free: room to grow in place */
    int rc = remap_allreduce(comm, rank, size, buf, REMAP_COUNT, 0);
    out->first = regs(comm);
    for (int k = 1; k <= 10 && !rc; k++)
        rc = remap_allreduce(comm, rank, size, buf, REMAP_COUNT, k);
    out->reused = regs(comm);
    /* Freed, and new memory at the same address: new pages, new contents. */
    munmap(buf, bytes);
    float *again = rc ? MAP_FAILED : mmap(buf, bytes, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                                            -1, 0);
    if (!rc && again != buf)
        rc = harness_failf(rank, "could not map again at %p", (void *)buf);
    for (int k = 20; k <= 22 && !rc; k++)
        rc = remap_allreduce(comm, rank, size, again, REMAP_COUNT, k);
    out->remapped = regs(comm);
    /* Larger, at the same address. */
    if (!rc) {
        munmap(again, bytes);
        again = mmap(buf, 2 * bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (again != buf)
            rc = harness_failf(rank, "could not map %zu bytes at %p", 2 * bytes, (void *)buf);
    }
    for (int k = 30; k <= 32 && !rc; k++)
        rc = remap_allreduce(comm, rank, size, again, 2 * REMAP_COUNT, k);
    out->grown = regs(comm);
    if (again != MAP_FAILED)
        munmap(again, rc ? bytes : 2 * bytes);
    return rc;
}
