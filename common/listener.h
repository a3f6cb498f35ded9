/* listener.h - accept connections and read their hellos concurrently.
 *
 * Used by the bootstrap root and by the TCP transport's accept. Every
 * connection gets its own short deadline, so a stranger that connects and
 * says nothing (or says garbage) costs nothing but a log line; the hello is
 * checked and its body bounded before any allocation. */
#ifndef HOOP_COMMON_LISTENER_H
#define HOOP_COMMON_LISTENER_H

#include "common/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct hoop_hello_msg {
    int fd;
    struct hoop_hello hello;
    const uint8_t *body; /* hello.body_len bytes, valid during the callback */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char addr_str[64];
};

/* Called for each complete hello (+ body). Return 1 to keep msg->fd (the
 * callback then owns it), 0 to have it closed. Set *done when finished. */
typedef int (*hoop_hello_cb)(void *ctx, const struct hoop_hello_msg *msg, int *done);

/* Serve lfd until the callback says done (0) or the deadline (-ETIMEDOUT).
 * who names the listener in log lines ("rank 0: bootstrap root"). With
 * drain, connections already accepted when the callback says done still get
 * their hellos read and handed to the callback (it may keep them for
 * later), each within its short grace; without, they are closed. */
int hoop_listener_serve(int lfd, uint64_t deadline_ns, size_t max_body, hoop_hello_cb cb, void *ctx,
                        const char *who, int drain);

#endif
