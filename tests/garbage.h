/* garbage.h - bytes that are not a frame where a chunk should be, sent by
 * a fake rank through a transport that is not a plain socket (ofi, verbs),
 * so that the test says what the receiver makes of them. */
#ifndef HOOP_TESTS_GARBAGE_H
#define HOOP_TESTS_GARBAGE_H

#include "transport/transport.h"

/* Three real ranks and a fake rank 3 over the transport `ops` (named
 * `name` for HOOP_TRANSPORT) in an allreduce: the fake rank's first chunk
 * has a random header, and every real rank must return HOOP_ERR_PEER
 * naming rank 3 within 10 s, rank 0 saying it was not a hoop data frame.
 * Asserts (Criterion). */
void garbage_instead_of_a_frame(const struct hoop_transport_ops *ops, const char *name);

#endif
