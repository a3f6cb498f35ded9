/* fdpass.h - one message and descriptors beside it (SCM_RIGHTS) on a Unix
 * socket: how the shared-memory transport and hoop_mem_alloc hand a memfd
 * to another rank of the host. */
#ifndef HOOP_COMMON_FDPASS_H
#define HOOP_COMMON_FDPASS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

/* A listener's name in the abstract namespace (nothing on any file
 * system, nothing left after a SIGKILL): "<kind>.<pid>.<nonce in hex>".
 * Returns the address's length. */
socklen_t hoop_fdpass_addr(struct sockaddr_un *a, const char *kind, uint32_t pid, uint64_t nonce);

/* The most descriptors one message may carry. */
#define HOOP_FDPASS_MAX 8

/* Send len bytes and nfds (at most HOOP_FDPASS_MAX) descriptors in one
 * sendmsg, never raising SIGPIPE: 0, or -errno (-EPIPE when cut short). */
int hoop_fdpass_send(int sock, const void *msg, size_t len, const int *fds, int nfds);

/* Receive one message of at most len bytes from a non-blocking socket,
 * polling until deadline_ns: the bytes received, or -errno (-ETIMEDOUT at
 * the deadline). *nfds is how many descriptors came with it; the first
 * maxfds of them land in fds (close-on-exec), the caller's to close, and
 * any more are closed here. Where the kernel dropped some for want of room
 * (a sender of more than HOOP_FDPASS_MAX), *nfds is -1 and none is kept. */
ssize_t hoop_fdpass_recv(int sock, void *msg, size_t len, int *fds, int maxfds, int *nfds,
                         uint64_t deadline_ns);

#endif
