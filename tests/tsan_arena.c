/* tsan_arena.c - lets Criterion start under ThreadSanitizer (make test-tsan);
 * empty in every other build.
 *
 * Criterion keeps its shared state in a BoxFort arena that it maps with
 * MAP_FIXED at 0x200000000000 + (rand_r() & 0x3fffff) * 16 MiB, skipping a
 * candidate whose pages are mapped and giving up after ten. Under TSan that
 * whole span is TSan's shadow or reserved memory, except the few TiB where
 * PIE programs live, so Criterion stops at start ("Could not initialize
 * inheritable arena") or crashes on a second arena it does not check. Calls
 * from libcriterion (or libboxfort, where BoxFort is a library of its own)
 * get from this rand_r only values whose 16 MiB slot is unmapped; every
 * other caller gets the real rand_r.
 */
#include "harness.h"

#if HARNESS_TSAN
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ARENA_BASE ((uintptr_t)0x200000000000)
#define ARENA_SLOT ((uintptr_t)1 << 24)
#define ARENA_MASK 0x3fffff
#define TRIES 100000

int rand_r(unsigned int *seed)
{
    static int (*next)(unsigned int *);
    if (!next)
        next = (int (*)(unsigned int *))dlsym(RTLD_NEXT, "rand_r");
    Dl_info info;
    if (!dladdr(__builtin_return_address(0), &info) || !info.dli_fname ||
        (!strstr(info.dli_fname, "libcriterion") && !strstr(info.dli_fname, "libboxfort")))
        return next(seed);
    int saved = errno;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    int r = 0;
    for (int i = 0; i < TRIES; i++) {
        r = next(seed);
        void *base = (void *)(ARENA_BASE + ((uintptr_t)r & ARENA_MASK) * ARENA_SLOT);
        unsigned char in_core;
        if (mincore(base, page, &in_core) == -1 && errno == ENOMEM)
            break;
    }
    errno = saved;
    return r;
}
#else
typedef int tsan_arena_unused;
#endif
