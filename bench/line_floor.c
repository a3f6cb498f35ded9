/* line_floor.c - the floor under a small allreduce of two ranks on one
 * host: two processes, each writes a counter into a cache line of its own
 * in shared memory and waits for the other's to reach the same value.
 * One round is one such exchange, what any shared-memory allreduce of two
 * ranks pays at least once per call. The figure depends on where the
 * machine places the two processes (two cores of one complex, or further
 * apart): bench/small_latency.py prints it beside each run, so that the
 * runs compared are known to have had the same placement.
 *
 *   build/line_floor [ROUNDS]      prints: line_floor_ns=<ns per round> */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct line {
    _Atomic unsigned long v;
    char pad[64 - sizeof(unsigned long)];
};

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 1000000;
    if (rounds < 1) {
        fprintf(stderr, "usage: line_floor [ROUNDS >= 1]\n");
        return 2;
    }
    struct line *l = mmap(NULL, 2 * sizeof(struct line), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (l == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    int me = pid == 0;
    double t0 = now_ns();
    for (unsigned long i = 1; i <= (unsigned long)rounds; i++) {
        atomic_store(&l[me].v, i);
        while (atomic_load(&l[!me].v) < i) {
        }
    }
    double t = now_ns() - t0;
    if (me)
        return 0;
    waitpid(pid, NULL, 0);
    printf("line_floor_ns=%.1f\n", t / (double)rounds);
    return 0;
}
