/* clock.h - monotonic time and deadlines, in nanoseconds. */
#ifndef HOOP_COMMON_CLOCK_H
#define HOOP_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t hoop_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t hoop_deadline_after(double seconds)
{
    return hoop_now_ns() + (uint64_t)(seconds * 1e9);
}

/* A deadline read from the clock when a wait first needs it (*deadline
 * is 0 until then): a call whose messages are in when it looks waits for
 * nothing, and reading the clock costs as much as a look (about 20 ns in a
 * virtual machine). It starts a few microseconds after the call at most. */
static inline uint64_t hoop_deadline_lazy(uint64_t *deadline, double seconds)
{
    if (!*deadline)
        *deadline = hoop_deadline_after(seconds);
    return *deadline;
}

/* Milliseconds left until deadline, for poll(2): 0 when passed, capped. */
static inline int hoop_ms_left(uint64_t deadline_ns)
{
    uint64_t now = hoop_now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > 1000000000ull ? 1000000000 : (int)ms;
}

#endif
