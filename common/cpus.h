/* cpus.h - how many CPUs this process may run on: what the waits and the
 * engine's thread weigh the host's ranks against before they spin. */
#ifndef HOOP_COMMON_CPUS_H
#define HOOP_COMMON_CPUS_H

#include <sched.h>

/* The CPUs of this process's affinity mask; 1 where it cannot be read. */
static inline int hoop_usable_cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

#endif
