/* hash.h - FNV-1a (64-bit), the one hash of short keys: a host's identity,
 * a job's token and port, the block sizes a collective's frames carry. Not
 * for keys an attacker picks to collide. */
#ifndef HOOP_COMMON_HASH_H
#define HOOP_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HOOP_FNV1A_INIT 0xcbf29ce484222325ull

/* h (HOOP_FNV1A_INIT to begin) carried on over n bytes of data. */
static inline uint64_t hoop_fnv1a(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The same over a string's characters (not its terminating zero). */
static inline uint64_t hoop_fnv1a_str(uint64_t h, const char *s)
{
    return hoop_fnv1a(h, s, strlen(s));
}

#endif
