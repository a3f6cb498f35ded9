/* status.h - status codes and the per-thread error sentence.
 *
 * Functions inside the library return 0 or a negative errno-style code
 * (transport, sockets) or a hoop_status_t (everything public). When a public
 * call fails, the sentence set here is what hoop_last_error() shows. */
#ifndef HOOP_COMMON_STATUS_H
#define HOOP_COMMON_STATUS_H

#include "hoop.h"

/* Set this thread's error sentence and return status (so callers can write
 * `return hoop_error(HOOP_ERR_INVALID, "...")`). */
hoop_status_t hoop_error(hoop_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Append a clause to the current sentence (e.g. the detail of a cause). */
void hoop_error_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void hoop_error_clear(void);

/* Map a negative errno from a socket or io_uring to the status a user needs:
 * connection loss is HOOP_ERR_PEER, a deadline is HOOP_ERR_TIMEOUT, the rest
 * HOOP_ERR_SYSTEM. */
hoop_status_t hoop_status_from_errno(int neg_errno);

#endif
