/* canary.h - guard bytes around the buffers of the collective tests, and
 * bytes inverted so that a result the library did not write cannot pass
 * for one it did. */
#ifndef HOOP_TESTS_CANARY_H
#define HOOP_TESTS_CANARY_H

#include <stddef.h>

/* Output buffers and sendbufs, and each rank, get different canaries: a
 * call that copies one element too many from a sendbuf, or from another
 * rank's buffer, must not write the very bytes the output's canary holds. */
unsigned canary_out(int rank);
unsigned canary_send(int rank);

/* nbytes of buf get the canary pattern of seed. */
void canary_fill(void *buf, size_t nbytes, unsigned seed);

/* The index of the first of n bytes where a and b differ, or n. */
size_t canary_first_diff(const void *a, const void *b, size_t n);

/* Every bit of bytes of buf flipped. */
void canary_invert(void *buf, size_t bytes);

#endif
