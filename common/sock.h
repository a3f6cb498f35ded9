/* sock.h - TCP socket helpers with deadlines: addresses, listen, connect
 * with retry and backoff, whole reads and writes. Return 0 or -errno. */
#ifndef HOOP_COMMON_SOCK_H
#define HOOP_COMMON_SOCK_H

#include "hoop.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define HOOP_HOST_MAX 256
#define HOOP_ADDR_STR_MAX 64

/* "host:port" or "[v6addr]:port"; the port must be 1..65535. */
hoop_status_t hoop_sock_parse_hostport(const char *what, const char *s, char *host, size_t hostlen,
                                       uint16_t *port);
hoop_status_t hoop_sock_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss,
                                socklen_t *len);

/* Listening socket bound to addr (port 0 = any), non-blocking, CLOEXEC. */
int hoop_sock_listen(const struct sockaddr *addr, socklen_t len, int *fd_out);

/* Connect, retrying refused/unreachable with backoff (10 ms doubling to
 * 500 ms) until deadline. The socket returned is non-blocking. */
int hoop_sock_connect_retry(const struct sockaddr *addr, socklen_t len, uint64_t deadline_ns,
                            int *fd_out);
/* The same, to a listener that exists already (a rank's data port, from
 * the table): a refusal means it is gone, and is returned at once. */
int hoop_sock_connect_listening(const struct sockaddr *addr, socklen_t len, uint64_t deadline_ns,
                                int *fd_out);

/* Whole transfers on a non-blocking socket, with poll until deadline:
 * -ETIMEDOUT at the deadline, -EPIPE when the peer closed. */
int hoop_sock_write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
int hoop_sock_read_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

int hoop_sock_set_blocking(int fd, int blocking);

/* TCP_NODELAY, keepalive (idle 10 s, interval 2 s, 5 probes),
 * TCP_USER_TIMEOUT, buffers when bufsize > 0, and the congestion control
 * when cc is not empty (checked beforehand with hoop_sock_check_cc). */
void hoop_sock_set_data_opts(int fd, int bufsize, unsigned user_timeout_ms, const char *cc);

/* 0 when this process may give a TCP socket congestion control `cc`, else
 * -errno (-ENOENT: the kernel has no such algorithm; -EPERM: it is not in
 * net.ipv4.tcp_allowed_congestion_control). */
int hoop_sock_check_cc(const char *cc);

/* "1.2.3.4:5" / "[::1]:5", and the address alone. */
void hoop_sock_addr_str(const struct sockaddr *sa, char *out, size_t outlen);
void hoop_sock_ip_str(const struct sockaddr *sa, char *out, size_t outlen);

/* A phrase for a negative errno that a user understands. */
const char *hoop_errno_str(int neg_errno);

#endif
