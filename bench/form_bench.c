/* form_bench.c - what forming a job and the first alltoall's connection
 * set-up cost: each rank times hoop_comm_init and its first and second
 * alltoall (the first connects every pair), and rank 0 prints the slowest
 * rank's figures in milliseconds. Run it with hooprun -np N.
 *
 * With FORM_BENCH_START set (seconds since the epoch, CLOCK_REALTIME),
 * every rank sleeps until that moment before it calls hoop_comm_init, so
 * that formation is timed from one start for all, once every process is
 * loaded: without it, the first rank's figure also holds the launcher's
 * spawning of the others, and on a machine with fewer cores than ranks,
 * whatever their own start takes from it. */
#include "hoop.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(void)
{
    enum { COUNT = 64 };
    static int32_t in[COUNT * 64], out[COUNT * 64];
    const char *start = getenv("FORM_BENCH_START");
    if (start && *start) {
        double at = strtod(start, NULL);
        struct timespec ts = {.tv_sec = (time_t)at,
                              .tv_nsec = (long)((at - (double)(time_t)at) * 1e9)};
        while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
    }
    hoop_comm_t *comm = NULL;
    double t0 = now_ms();
    hoop_status_t st = hoop_comm_init(&comm, NULL);
    double t1 = now_ms();
    if (st) {
        fprintf(stderr, "form_bench: %s\n", hoop_last_error());
        return 1;
    }
    int size = hoop_comm_size(comm);
    if (size > 64) {
        fprintf(stderr, "form_bench: at most 64 ranks\n");
        hoop_comm_destroy(comm);
        return 1;
    }
    st = hoop_alltoall(comm, in, out, COUNT, HOOP_I32);
    double t2 = now_ms();
    if (!st)
        st = hoop_alltoall(comm, in, out, COUNT, HOOP_I32);
    double t3 = now_ms();
    double ms[3] = {t1 - t0, t2 - t1, t3 - t2};
    if (!st)
        st = hoop_allreduce(comm, ms, ms, 3, HOOP_F64, HOOP_MAX);
    if (st) {
        fprintf(stderr, "form_bench: %s\n", hoop_last_error());
        hoop_comm_destroy(comm);
        return 1;
    }
    if (hoop_comm_rank(comm) == 0)
        printf("N=%d init_ms=%.2f first_alltoall_ms=%.2f second_alltoall_ms=%.2f\n", size,
               ms[0], ms[1], ms[2]);
    hoop_comm_destroy(comm);
    return 0;
}
