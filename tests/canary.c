/* canary.c - see canary.h. */
#include "canary.h"

#include <stdint.h>

unsigned canary_out(int rank)
{
    return (0xC3u ^ (unsigned)rank * 0x25u) & 0xFFu;
}

unsigned canary_send(int rank)
{
    return (0x5Au ^ (unsigned)rank * 0x49u) & 0xFFu;
}

void canary_fill(void *buf, size_t nbytes, unsigned seed)
{
    uint8_t *b = buf;
    for (size_t k = 0; k < nbytes; k++)
        b[k] = (uint8_t)(seed ^ (k * 37u));
}

void canary_invert(void *buf, size_t bytes)
{
    uint8_t *b = buf;
    for (size_t k = 0; k < bytes; k++)
        b[k] = (uint8_t)~b[k];
}

size_t canary_first_diff(const void *a, const void *b, size_t n)
{
    const unsigned char *x = a, *y = b;
    size_t i = 0;
    while (i < n && x[i] == y[i])
        i++;
    return i;
}
