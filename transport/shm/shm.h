/* shm.h - the shared-memory transport between two ranks of one host.
 *
 * A connection is one direction: the connecting rank (the sender) creates a
 * memfd segment of slots (slot.h), sealed against shrinking, and two
 * eventfds (one wakes the receiver, one the sender), and hands the three to
 * the accepting rank over a Unix socket in the abstract namespace (nothing
 * on any file system, nothing left after a SIGKILL), with SCM_RIGHTS. The
 * socket stays open: its end tells a rank at once that the other's process
 * is gone. The accepting rank checks the kernel's word on who connected
 * (SO_PEERCRED: this user, the pid its handle gave) and the job's token.
 *
 * Bytes move in isend, irecv and progress, copied into and out of the
 * slots with C11 atomics on the two positions (single producer, single
 * consumer); nothing is left under way between calls. A wait looks for
 * completions for the busy-poll time, then sleeps on an epoll descriptor
 * (the eventfds, the sockets, the caller's watched descriptors) until the
 * deadline; a side about to sleep says so in the segment, and the other
 * rings its eventfd only then.
 *
 * Not in the list of transports (it reaches only this host): the ring's
 * per-link choice (ring/mixed.c) uses it beside the configured one, and
 * the calls below. */
#ifndef HOOP_TRANSPORT_SHM_H
#define HOOP_TRANSPORT_SHM_H

#include "transport/transport.h"

#include <stdint.h>

/* The shm transport's handle: pid (4 bytes) and the nonce naming its
 * socket (8 bytes). */
#define HOOP_SHM_HANDLE_BYTES 12

extern const struct hoop_transport_ops hoop_transport_shm;

/* Whether shared memory can work in this process (a memfd can be made and
 * sealed, and mapped); why says what failed. 1 or 0. */
int hoop_shm_usable(char *why, size_t n);
/* The descriptor that is readable whenever a wait of the transport would
 * have something to do (a wake-up, a peer gone, a watched descriptor), for
 * a composite's wait on another transport. */
int hoop_shm_wait_fd(void *tp);
/* Before sleeping elsewhere: ask the peers to wake wait_fd once they have
 * moved. Returns > 0 when something can move now (the caller must not
 * sleep; the marks are cleared), else 0. disarm clears them after a sleep. */
int hoop_shm_arm(void *tp);
void hoop_shm_disarm(void *tp);
/* Rank `peer`'s process has this pid (from its handle): a connection that
 * claims that rank is accepted only from it. */
void hoop_shm_expect_pid(void *tp, int peer, uint32_t pid);

#endif
