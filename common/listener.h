/* listener.h - accept connections and read their hellos concurrently.
 *
 * Used by the bootstrap root and by the TCP transport's accept. Every
 * connection gets its own short deadline, so a stranger that connects and
 * says nothing (or says garbage) costs nothing but a log line (rate-limited:
 * a flood of strangers logs a count, not a line each); the hello is checked
 * and its body bounded before any allocation. A listener keeps the
 * connections whose hello is not complete from one serve to the next, so
 * that a serve returns as soon as its callback is done, whoever else is
 * still connected. Hellos already sent are read before anyone is evicted,
 * and the table of connections that have not said their hello is bounded:
 * when it is full, the connection silent longest makes room, but never one
 * that has had less than a moment to speak, nor one that sent a whole
 * header.
 *
 * No connection reaches the callback before it has proved the job token
 * (auth.h): once its hello and body are in, the listener sends its
 * challenge and reads the proof, in the same non-blocking loop and within
 * the same grace, so a peer slow in its handshake holds up no one. A data
 * connection (HOOP_HELLO_DATA) is not challenged: it comes to a listener
 * that published a nonce (hoop_listener_publish), and its early proof
 * against that nonce follows the hello; the listener replies with its own
 * MAC and hands it to the callback at once. A peer
 * with another token or another wire version is refused with a sentence
 * (sent back, and logged). The listener also finishes this process's own
 * outgoing handshakes (hoop_listener_expect): a rank that connected to a
 * peer answers that peer's challenge while it waits for its own peers, so
 * that no rank waits on one that is itself waiting. */
#ifndef HOOP_COMMON_LISTENER_H
#define HOOP_COMMON_LISTENER_H

#include "common/auth.h"
#include "common/log.h"
#include "common/wire.h"

#include <stddef.h>
#include <stdint.h>
#include <poll.h>
#include <sys/socket.h>

struct hoop_hello_msg {
    int fd;
    struct hoop_hello hello;
    const uint8_t *body; /* hello.body_len bytes, valid during the callback */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char addr_str[64];
    /* The listener's limit on warnings: a callback that refuses the
     * connection logs why through it (hoop_log_limited). */
    struct hoop_log_limit *log;
};

/* Called for each complete hello (+ body). Return 1 to keep msg->fd (the
 * callback then owns it), 0 to have it closed. Set *done when finished. */
typedef int (*hoop_hello_cb)(void *ctx, const struct hoop_hello_msg *msg, int *done);

struct hoop_listen_pending;
struct hoop_listen_out;

struct hoop_listener {
    int lfd; /* the caller's: the listener never closes it */
    size_t max_body;
    char who[128]; /* names the listener in log lines ("rank 0: bootstrap root") */
    int rank; /* names this side in refusals */
    uint8_t token[HOOP_TOKEN_BYTES];
    uint8_t nonce[HOOP_AUTH_NONCE_BYTES]; /* published: data connections prove against it */
    int published;
    struct hoop_listen_pending *pend;
    struct hoop_listen_out *out; /* outgoing handshakes, nout of outcap */
    int nout, outcap;
    struct pollfd *pfd;
    struct hoop_log_limit log;
};

/* 0, or -ENOMEM. rank and token are this side's. */
int hoop_listener_open(struct hoop_listener *l, int lfd, size_t max_body, const char *who,
                       int rank, const uint8_t token[HOOP_TOKEN_BYTES]);
/* Closes the connections still pending (not lfd). A zeroed listener may be
 * closed. */
void hoop_listener_close(struct hoop_listener *l);

/* Make the nonce that data connections to this listener prove against,
 * for the caller to publish (in its handle). 0 or -errno. */
int hoop_listener_publish(struct hoop_listener *l, uint8_t nonce[HOOP_AUTH_NONCE_BYTES]);

/* Serve until the callback says done (0), the deadline (-ETIMEDOUT), one
 * of the nwake descriptors of wake is readable (-EINTR), or this process
 * cannot take one more connection: -EMFILE or -ENFILE (out of
 * descriptors), -ENOBUFS or -ENOMEM, once no connection it holds for a
 * hello could make room. Connections still pending when it returns stay
 * for the next serve. */
int hoop_listener_serve(struct hoop_listener *l, uint64_t deadline_ns, const int *wake, int nwake,
                        hoop_hello_cb cb, void *ctx);

/* An outgoing connection to peer whose hello (body-less, already sent) is
 * hello: its challenge is answered by every serve from now on, until
 * hoop_listener_finish says how it went. With nonce (the peer's published
 * one; the early proof went behind the hello), the peer's reply is read
 * and checked instead. fd stays the caller's. 0 or -ENOMEM. */
int hoop_listener_expect(struct hoop_listener *l, int fd, int peer,
                         const uint8_t hello[HOOP_HELLO_BYTES],
                         const uint8_t nonce[HOOP_AUTH_NONCE_BYTES]);
/* Forget an outgoing connection (the caller closes it). */
void hoop_listener_forget(struct hoop_listener *l, int fd);
/* Serve (handing hellos to cb, whose done is ignored) until every
 * outgoing handshake is over, then forget them all: 0 when each peer
 * proved the token; else *peer is one that did not and the result says
 * why: -EACCES (another token), -ECONNREFUSED (it refused this rank),
 * -EPROTO, -EPROTONOSUPPORT (another wire version), -ECONNRESET, or as
 * hoop_listener_serve. */
int hoop_listener_finish(struct hoop_listener *l, uint64_t deadline_ns, const int *wake, int nwake,
                         hoop_hello_cb cb, void *ctx, int *peer);
/* A rank that gives up still answers the challenges of the connections
 * it opened (accepting nothing), until deadline: its peers then see a
 * connection that proved the token and closes, and fail at once, instead
 * of waiting for one that never finished its handshake. */
void hoop_listener_answer(struct hoop_listener *l, uint64_t deadline_ns);

#endif
