/* test_auth.c - the job token is proved, never sent: a listener in a child
 * process faces good, replayed, wrong, truncated, garbled and old-version
 * handshakes; the TCP transport's data connections (an early proof against
 * the nonce its listener published, and its reply) face the same from a
 * raw peer on either end; a captured 4-rank job carries no byte of its
 * token. */
#include <criterion/criterion.h>

#include "common/auth.h"
#include "common/clock.h"
#include "common/listener.h"
#include "common/sock.h"
#include "common/wire.h"
#include "harness.h"
#include "transport/transport.h"
#include "hoop.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOB_TOKEN "auth-test-token-the-job"
#define MARKER "hoop-capture-control-marker"

/* ---- a listener in a child, and a raw client -------------------------- */

struct served {
    int lfd;
    uint16_t port;
    pid_t pid;
    char log[64]; /* the child's stderr */
};

/* Each connection that proves the token gets one byte 'K'. */
static int serve_cb(void *ctx, const struct hoop_hello_msg *m, int *done)
{
    (void)ctx;
    (void)done;
    (void)!send(m->fd, "K", 1, MSG_NOSIGNAL);
    return 0;
}

static void serve_start(struct served *s, double seconds)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(hoop_sock_listen((struct sockaddr *)&a, sizeof(a), &s->lfd), 0);
    socklen_t sl = sizeof(a);
    getsockname(s->lfd, (struct sockaddr *)&a, &sl);
    s->port = ntohs(a.sin_port);
    snprintf(s->log, sizeof(s->log), "/tmp/hoop-auth-%d.log", (int)getpid());
    fflush(stderr);
    s->pid = fork();
    cr_assert(s->pid >= 0, "fork: %s", strerror(errno));
    if (s->pid == 0) {
        FILE *f = freopen(s->log, "w", stderr);
        (void)f;
        uint8_t tok[HOOP_TOKEN_BYTES];
        hoop_token_from_string(JOB_TOKEN, tok);
        struct hoop_listener l;
        if (hoop_listener_open(&l, s->lfd, 512, "rank 0: test listener", 0, tok))
            _exit(2);
        hoop_listener_serve(&l, hoop_deadline_after(seconds), NULL, 0, serve_cb, NULL);
        hoop_listener_close(&l);
        fflush(stderr);
        _exit(0);
    }
}

/* The child's log, once it has exited. */
static void serve_stop(struct served *s, char *log, size_t n)
{
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
    close(s->lfd);
    FILE *f = fopen(s->log, "r");
    size_t got = f ? fread(log, 1, n - 1, f) : 0;
    log[got] = '\0';
    if (f)
        fclose(f);
    unlink(s->log);
}

static int client_connect(const struct served *s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(s->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = -1;
    cr_assert_eq(hoop_sock_connect_retry((struct sockaddr *)&a, sizeof(a),
                                         hoop_deadline_after(5.0), &fd), 0);
    return fd;
}

static void make_hello(uint8_t head[HOOP_HELLO_BYTES], unsigned rank)
{
    struct hoop_hello h = {.kind = HOOP_HELLO_JOIN, .rank = rank, .size = 4};
    hoop_hello_encode(&h, head);
    cr_assert_eq(hoop_auth_nonce(head), 0);
}

/* Read a refusal: a hello of kind REFUSE and its sentence. Returns the
 * version it was written in, or -1 when none came. */
static int read_refusal(int fd, char *why, size_t n)
{
    uint8_t head[HOOP_HELLO_BYTES];
    why[0] = '\0';
    uint64_t dl = hoop_deadline_after(5.0);
    if (hoop_sock_read_all(fd, head, sizeof(head), dl))
        return -1;
    unsigned v = hoop_wire_peer_version(head);
    head[4] = HOOP_WIRE_VERSION; /* decode it whatever its version */
    head[5] = 0;
    struct hoop_hello h;
    if (hoop_hello_decode(head, n - 1, &h) || h.kind != HOOP_HELLO_REFUSE)
        return -1;
    if (hoop_sock_read_all(fd, why, h.body_len, dl))
        return -1;
    why[h.body_len] = '\0';
    return (int)v;
}

Test(auth, handshakes_are_proved_and_replays_refused, .timeout = 60)
{
    struct served s;
    serve_start(&s, 20.0);
    uint8_t tok[HOOP_TOKEN_BYTES], bad[HOOP_TOKEN_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    hoop_token_from_string("another-job", bad);
    char why[512];
    uint64_t dl = hoop_deadline_after(10.0);

    /* A peer that stalls after its hello is held apart: it must not delay
     * the good handshake behind it (its grace is 5 s). */
    int stall = client_connect(&s);
    uint8_t stall_head[HOOP_HELLO_BYTES];
    make_hello(stall_head, 3);
    cr_assert_eq(hoop_sock_write_all(stall, stall_head, sizeof(stall_head), dl), 0);

    /* Good: both sides prove. Its hello and proof are kept for a replay. */
    int fd = client_connect(&s);
    uint8_t head[HOOP_HELLO_BYTES], chal[HOOP_AUTH_BYTES], proof[HOOP_AUTH_BYTES];
    make_hello(head, 1);
    cr_assert_eq(hoop_sock_write_all(fd, head, sizeof(head), dl), 0);
    cr_assert_eq(hoop_sock_read_all(fd, chal, sizeof(chal), dl), 0);
    cr_assert_eq(hoop_auth_answer(tok, head, NULL, 0, chal, proof), 0,
                 "the listener's own MAC must check out");
    cr_assert_eq(hoop_sock_write_all(fd, proof, sizeof(proof), dl), 0);
    char k = 0;
    cr_assert_eq(hoop_sock_read_all(fd, &k, 1, hoop_deadline_after(4.0)), 0,
                 "a good handshake must pass while another peer stalls in its own");
    cr_assert_eq(k, 'K');
    close(fd);
    cr_assert(memmem(head, sizeof(head), JOB_TOKEN, strlen(JOB_TOKEN)) == NULL);
    cr_assert(memmem(proof, sizeof(proof), JOB_TOKEN, strlen(JOB_TOKEN)) == NULL);

    /* Replay: the recorded hello and proof on a new connection. */
    fd = client_connect(&s);
    cr_assert_eq(hoop_sock_write_all(fd, head, sizeof(head), dl), 0);
    cr_assert_eq(hoop_sock_read_all(fd, chal, sizeof(chal), dl), 0);
    cr_assert_eq(hoop_sock_write_all(fd, proof, sizeof(proof), dl), 0);
    cr_assert_eq(read_refusal(fd, why, sizeof(why)), HOOP_WIRE_VERSION, "a replay is refused");
    cr_assert(strstr(why, "wrong job token"), "replay refused with: %s", why);
    close(fd);

    /* An old-version peer: a version 1 hello (it carried the token). */
    fd = client_connect(&s);
    uint8_t old[HOOP_HELLO_BYTES + 8] = {0};
    memcpy(old, "HOOP", 4);
    hoop_put_le(old + 4, 1, 2);
    hoop_put_le(old + 6, HOOP_HELLO_JOIN, 2);
    hoop_put_le(old + 40, 1, 4);
    hoop_put_le(old + 44, 4, 4);
    hoop_put_le(old + 60, 8, 4);
    cr_assert_eq(hoop_sock_write_all(fd, old, sizeof(old), dl), 0);
    cr_assert_eq(read_refusal(fd, why, sizeof(why)), 1,
                 "an old peer is refused in its own version, so that it can read why");
    char want[128];
    snprintf(want, sizeof(want), "speaks hoop wire version 1, this rank version %d: run the same "
             "hoop build everywhere", HOOP_WIRE_VERSION);
    cr_assert(strstr(why, want), "old version refused with: %s", why);
    close(fd);

    /* Truncated: half a proof, then the peer leaves. */
    fd = client_connect(&s);
    make_hello(head, 2);
    cr_assert_eq(hoop_sock_write_all(fd, head, sizeof(head), dl), 0);
    cr_assert_eq(hoop_sock_read_all(fd, chal, sizeof(chal), dl), 0);
    hoop_auth_answer(tok, head, NULL, 0, chal, proof);
    cr_assert_eq(hoop_sock_write_all(fd, proof, 20, dl), 0);
    close(fd);

    /* The stalled peer is dropped at its grace, with a sentence. */
    cr_assert_eq(hoop_sock_read_all(stall, chal, sizeof(chal), dl), 0, "the stalled peer "
                 "was challenged");
    char byte;
    struct pollfd pf = {.fd = stall, .events = POLLIN};
    poll(&pf, 1, 10000); /* until the listener drops it */
    ssize_t n = recv(stall, &byte, 1, MSG_DONTWAIT);
    cr_assert(n <= 0, "the stalled peer got %zd bytes instead of being dropped", n);
    close(stall);

    static char log[16384];
    serve_stop(&s, log, sizeof(log));
    cr_assert(strstr(log, "closed before answering the token challenge"),
              "the truncated handshake must be logged:\n%s", log);
    cr_assert(strstr(log, "no answer to the token challenge within 5 s"),
              "the stalled handshake must be logged:\n%s", log);
    cr_assert(strstr(log, "speaks hoop wire version 1"), "the old peer must be logged:\n%s", log);
    cr_assert(!strstr(log, JOB_TOKEN), "the token must not be logged:\n%s", log);
}

Test(auth, wrong_token_and_garbage_are_refused_with_a_sentence, .timeout = 60)
{
    struct served s;
    serve_start(&s, 20.0);
    uint8_t tok[HOOP_TOKEN_BYTES], bad[HOOP_TOKEN_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    hoop_token_from_string("another-job", bad);
    char why[512];
    uint64_t dl = hoop_deadline_after(10.0);
    uint8_t head[HOOP_HELLO_BYTES], chal[HOOP_AUTH_BYTES], proof[HOOP_AUTH_BYTES];
    int fd;

    /* Wrong token: the client sees the listener's MAC fail, and is refused. */
    fd = client_connect(&s);
    make_hello(head, 2);
    cr_assert_eq(hoop_sock_write_all(fd, head, sizeof(head), dl), 0);
    cr_assert_eq(hoop_auth_connect(fd, bad, head, NULL, 0, dl, chal), -EACCES);
    cr_assert_eq(read_refusal(fd, why, sizeof(why)), HOOP_WIRE_VERSION);
    cr_assert(strstr(why, "wrong job token: rank 2's HOOP_TOKEN differs from rank 0's"),
              "wrong token refused with: %s", why);
    close(fd);

    /* Garbage in place of the MAC, then garbage in place of the proof. */
    for (int whole = 0; whole < 2; whole++) {
        fd = client_connect(&s);
        make_hello(head, 2);
        cr_assert_eq(hoop_sock_write_all(fd, head, sizeof(head), dl), 0);
        cr_assert_eq(hoop_sock_read_all(fd, chal, sizeof(chal), dl), 0);
        hoop_auth_answer(tok, head, NULL, 0, chal, proof);
        memset(whole ? proof : proof + 32, 0x5a, whole ? sizeof(proof) : 32);
        cr_assert_eq(hoop_sock_write_all(fd, proof, sizeof(proof), dl), 0);
        cr_assert_eq(read_refusal(fd, why, sizeof(why)), HOOP_WIRE_VERSION);
        cr_assert(strstr(why, whole ? "not a proof" : "wrong job token"),
                  "garbage %s refused with: %s", whole ? "proof" : "MAC", why);
        close(fd);
    }

    static char log[16384];
    serve_stop(&s, log, sizeof(log));
    cr_assert(strstr(log, "wrong job token"), "the wrong token must be logged:\n%s", log);
    cr_assert(!strstr(log, JOB_TOKEN), "the token must not be logged:\n%s", log);
}

/* ---- data connections: the TCP transport against a raw peer ------------ */

#define DATA_COMM 77u

/* A TCP transport of rank `rank` of 2 listening on loopback; its handle. */
static void *data_tp(int rank, uint8_t *handle, uint16_t *hl)
{
    uint8_t tok[HOOP_TOKEN_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    struct hoop_tp_params p = {.rank = rank, .size = 2, .token = tok};
    void *tp = NULL;
    cr_assert_eq(hoop_transport_tcp.create(&p, &tp), HOOP_OK, "%s", hoop_last_error());
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(hoop_transport_tcp.listen(tp, (struct sockaddr *)&a, sizeof(a), handle, hl),
                 HOOP_OK, "%s", hoop_last_error());
    cr_assert(*hl > HOOP_AUTH_NONCE_BYTES + 4);
    return tp;
}

/* Where the listener's nonce sits in a handle: its last bytes. */
static const uint8_t *data_nonce(const uint8_t *handle, uint16_t hl)
{
    return handle + hl - HOOP_AUTH_NONCE_BYTES;
}

static int data_client(const uint8_t *handle)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    memcpy(&a.sin_port, handle + 2, 2);
    int fd = -1;
    cr_assert_eq(hoop_sock_connect_retry((struct sockaddr *)&a, sizeof(a),
                                         hoop_deadline_after(5.0), &fd), 0);
    return fd;
}

/* Rank 0's hello for its socket 0 of channel, and its early proof made
 * with token against nonce: what a data connection opens with. */
static void data_open(uint8_t msg[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES], int channel,
                      const uint8_t token[HOOP_TOKEN_BYTES], const uint8_t *nonce)
{
    struct hoop_hello h = {.kind = HOOP_HELLO_DATA, .rank = 0, .size = 2, .comm_id = DATA_COMM,
                           .aux = (uint32_t)channel << 16};
    hoop_hello_encode(&h, msg);
    cr_assert_eq(hoop_auth_nonce(msg), 0);
    hoop_auth_make(token, HOOP_AUTH_EARLY, msg, NULL, 0, nonce, msg + HOOP_HELLO_BYTES);
}

/* Let tp's listener serve what is waiting: an accept of a connection that
 * never comes, for a moment. */
static void data_serve(void *tp, double seconds)
{
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    void *c = NULL;
    hoop_status_t st = hoop_transport_tcp.accept(tp, 1, HOOP_CHANNEL_P2P, host, DATA_COMM,
                                                 hoop_deadline_after(seconds), &c);
    cr_assert_neq(st, HOOP_OK, "nothing may be accepted from a rank that never connected");
}

Test(auth, data_connections_prove_early_and_replays_are_refused, .timeout = 60)
{
    setenv("HOOP_TCP_NSOCKS", "1", 1);
    uint8_t handle[HOOP_TP_HANDLE_MAX];
    uint16_t hl = 0;
    void *tp = data_tp(1, handle, &hl);
    const uint8_t *nonce = data_nonce(handle, hl);
    uint8_t tok[HOOP_TOKEN_BYTES], bad[HOOP_TOKEN_BYTES], other[HOOP_AUTH_NONCE_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    hoop_token_from_string("another-job", bad);
    memset(other, 0x3c, sizeof(other));
    uint64_t dl = hoop_deadline_after(10.0);
    char path[64], why[512];
    snprintf(path, sizeof(path), "/tmp/hoop-auth-data-%d.log", (int)getpid());
    int saved = harness_stderr_to(path);

    /* Good: the hello and early proof in one write; the transport takes
     * the connection and replies with its own MAC over the same. */
    uint8_t good[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES], reply[HOOP_AUTH_BYTES];
    data_open(good, HOOP_CHANNEL_RING, tok, nonce);
    int fd = data_client(handle);
    cr_assert_eq(hoop_sock_write_all(fd, good, sizeof(good), dl), 0);
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    void *conn = NULL;
    hoop_status_t st = hoop_transport_tcp.accept(tp, 0, HOOP_CHANNEL_RING, host, DATA_COMM,
                                                 hoop_deadline_after(5.0), &conn);
    cr_assert_eq(st, HOOP_OK, "a good early proof must be taken: %s", hoop_last_error());
    cr_assert_eq(hoop_sock_read_all(fd, reply, sizeof(reply), dl), 0);
    cr_assert_eq(hoop_auth_verify(tok, HOOP_AUTH_REPLY, good, NULL, 0, nonce, reply), 0,
                 "the acceptor's reply must prove the token");
    cr_assert_eq(hoop_auth_verify(bad, HOOP_AUTH_REPLY, good, NULL, 0, nonce, reply), -EACCES);
    cr_assert(memmem(good, sizeof(good), JOB_TOKEN, strlen(JOB_TOKEN)) == NULL);

    /* Replay: the same bytes on a new connection prove the same, but that
     * rank's socket has come already: refused, never kept. */
    int replay = data_client(handle);
    cr_assert_eq(hoop_sock_write_all(replay, good, sizeof(good), dl), 0);
    data_serve(tp, 0.5);
    uint8_t sink[256];
    ssize_t n = 1;
    struct pollfd pf = {.fd = replay, .events = POLLIN};
    while (n > 0 && poll(&pf, 1, 5000) == 1)
        n = recv(replay, sink, sizeof(sink), MSG_DONTWAIT);
    cr_assert_eq(n, 0, "the replayed connection must be closed");
    close(replay);

    /* Truncated: the hello and half a proof, then the peer leaves. */
    fd = data_client(handle);
    uint8_t part[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES];
    data_open(part, HOOP_CHANNEL_P2P, tok, nonce);
    cr_assert_eq(hoop_sock_write_all(fd, part, HOOP_HELLO_BYTES + 20, dl), 0);
    close(fd);
    data_serve(tp, 0.3);

    /* Wrong token, a proof against another nonce, garbage in place of the
     * MAC and in place of the whole proof: each refused with a sentence
     * (the log holds the first few lines only). */
    struct {
        const char *what, *want;
    } cases[] = {
        {"wrong token", "wrong job token: rank 0's HOOP_TOKEN differs from rank 1's"},
        {"another nonce", "against another nonce than the one rank 1 published"},
        {"garbage MAC", "wrong job token"},
        {"garbage proof", "not a proof"},
    };
    for (int k = 0; k < 4; k++) {
        uint8_t msg[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES];
        data_open(msg, HOOP_CHANNEL_P2P, k == 0 ? bad : tok, k == 1 ? other : nonce);
        if (k == 2)
            memset(msg + HOOP_HELLO_BYTES + 32, 0x5a, 32);
        if (k == 3)
            memset(msg + HOOP_HELLO_BYTES, 0x5a, HOOP_AUTH_BYTES);
        fd = data_client(handle);
        cr_assert_eq(hoop_sock_write_all(fd, msg, sizeof(msg), dl), 0);
        data_serve(tp, 0.3);
        cr_assert_eq(read_refusal(fd, why, sizeof(why)), HOOP_WIRE_VERSION, "%s: no refusal",
                     cases[k].what);
        cr_assert(strstr(why, cases[k].want), "%s refused with: %s", cases[k].what, why);
        close(fd);
    }

    hoop_transport_tcp.close(conn);
    hoop_transport_tcp.destroy(tp);
    static char log[16384];
    harness_stderr_back(saved, path, log, sizeof(log));
    cr_assert(strstr(log, "has come already (a handshake recorded and played again?)"),
              "the replay must be logged:\n%s", log);
    cr_assert(strstr(log, "closed before proving the token"),
              "the truncated proof must be logged:\n%s", log);
    cr_assert(!strstr(log, JOB_TOKEN), "the token must not be logged:\n%s", log);
    unsetenv("HOOP_TCP_NSOCKS");
}

/* Rank 0's TCP transport, and rank 1's handle with a raw acceptor in place
 * of its listener (rank 1's transport only gives the handle its form). */
struct raw_peer {
    uint8_t handle[HOOP_TP_HANDLE_MAX], peer[HOOP_TP_HANDLE_MAX];
    uint16_t hl, pl;
    void *tp, *tp1;
    int lfd;        /* the acceptor's listening socket */
    uint8_t *nonce; /* in peer */
};

static void raw_peer_open(struct raw_peer *x)
{
    x->tp = data_tp(0, x->handle, &x->hl);
    x->tp1 = data_tp(1, x->peer, &x->pl);
    x->lfd = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(hoop_sock_listen((struct sockaddr *)&a, sizeof(a), &x->lfd), 0);
    socklen_t sl = sizeof(a);
    getsockname(x->lfd, (struct sockaddr *)&a, &sl);
    memcpy(x->peer + 2, &a.sin_port, 2);
    x->nonce = x->peer + x->pl - HOOP_AUTH_NONCE_BYTES;
}

static void raw_peer_close(struct raw_peer *x)
{
    close(x->lfd);
    hoop_transport_tcp.destroy(x->tp1);
    hoop_transport_tcp.destroy(x->tp);
}

/* The connecting side: its early proof checks out against the nonce of the
 * handle it was given, and a reply that does not prove the token fails
 * the set-up with a sentence. */
Test(auth, data_connection_replies_are_checked, .timeout = 60)
{
    setenv("HOOP_TCP_NSOCKS", "1", 1);
    struct raw_peer x;
    raw_peer_open(&x);
    uint8_t *nonce = x.nonce;
    memset(nonce, 0x71, HOOP_AUTH_NONCE_BYTES);
    uint8_t tok[HOOP_TOKEN_BYTES], bad[HOOP_TOKEN_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    hoop_token_from_string("another-job", bad);
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    uint64_t dl = hoop_deadline_after(10.0);

    for (int good = 0; good < 2; good++) {
        void *conn = NULL;
        int channel = good ? HOOP_CHANNEL_P2P : HOOP_CHANNEL_RING;
        cr_assert_eq(hoop_transport_tcp.connect(x.tp, 1, channel, host, x.peer, x.pl, DATA_COMM,
                                                hoop_deadline_after(5.0), &conn),
                     HOOP_OK, "a connect waits for no reply: %s", hoop_last_error());
        int fd = accept(x.lfd, NULL, NULL);
        cr_assert(fd >= 0);
        uint8_t msg[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES];
        cr_assert_eq(hoop_sock_read_all(fd, msg, sizeof(msg), dl), 0,
                     "the hello and early proof come in the first message");
        struct hoop_hello h;
        cr_assert_eq(hoop_hello_decode(msg, 0, &h), 0);
        cr_assert(h.kind == HOOP_HELLO_DATA && h.rank == 0 && h.comm_id == DATA_COMM &&
                  h.aux == (uint32_t)channel << 16);
        cr_assert_eq(
            hoop_auth_verify(tok, HOOP_AUTH_EARLY, msg, NULL, 0, nonce, msg + HOOP_HELLO_BYTES), 0,
            "the connecting rank's proof must hold against the nonce it was given");
        cr_assert(memmem(msg, sizeof(msg), JOB_TOKEN, strlen(JOB_TOKEN)) == NULL);
        uint8_t reply[HOOP_AUTH_BYTES];
        hoop_auth_make(good ? tok : bad, HOOP_AUTH_REPLY, msg, NULL, 0, nonce, reply);
        cr_assert_eq(hoop_sock_write_all(fd, reply, sizeof(reply), dl), 0);
        hoop_status_t st = hoop_transport_tcp.settle(x.tp, DATA_COMM, hoop_deadline_after(5.0));
        if (good) {
            cr_assert_eq(st, HOOP_OK, "a good reply must settle: %s", hoop_last_error());
        } else {
            cr_assert_neq(st, HOOP_OK, "a reply without the token must fail the set-up");
            cr_assert(strstr(hoop_last_error(), "rank 1 did not prove this job's token") &&
                          strstr(hoop_last_error(), "wrong job token"),
                      "said: %s", hoop_last_error());
        }
        hoop_transport_tcp.close(conn);
        close(fd);
    }
    raw_peer_close(&x);
    unsetenv("HOOP_TCP_NSOCKS");
}

/* A receive posted on a connection before its reply is checked (the
 * verbs transport posts its side channel's at connect) gets the data that
 * follows the reply, never the reply itself: under each engine, and with
 * io_uring submitting every transfer at once. */
Test(auth, a_receive_posted_early_does_not_take_the_reply, .timeout = 60)
{
    static const char *const modes[][2] = {
        {"poll", "batch"}, {"uring", "batch"}, {"uring", "each"}};
    setenv("HOOP_TCP_NSOCKS", "1", 1);
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        if (strcmp(modes[m][0], "uring") == 0 && !harness_have_io_uring()) {
            cr_log_warn("io_uring is refused here: HOOP_TCP_ENGINE=uring not tried");
            continue;
        }
        setenv("HOOP_TCP_ENGINE", modes[m][0], 1);
        setenv("HOOP_URING_SUBMIT", modes[m][1], 1);
        struct raw_peer x;
        raw_peer_open(&x);
        uint8_t tok[HOOP_TOKEN_BYTES];
        hoop_token_from_string(JOB_TOKEN, tok);
        char host[256] = "";
        gethostname(host, sizeof(host) - 1);
        uint64_t dl = hoop_deadline_after(10.0);
        void *conn = NULL;
        cr_assert_eq(hoop_transport_tcp.connect(x.tp, 1, HOOP_CHANNEL_P2P, host, x.peer, x.pl,
                                                DATA_COMM, hoop_deadline_after(5.0), &conn),
                     HOOP_OK, "%s", hoop_last_error());
        uint8_t got[HOOP_AUTH_BYTES] = {0};
        struct hoop_tp_req r = {.buf = got, .len = sizeof(got)};
        cr_assert_eq(hoop_transport_tcp.irecv(conn, &r), 0);
        /* The raw acceptor: the reply and, right behind it, data of the
         * reply's length. */
        int fd = accept(x.lfd, NULL, NULL);
        cr_assert(fd >= 0);
        uint8_t msg[HOOP_HELLO_BYTES + HOOP_AUTH_BYTES], out[2 * HOOP_AUTH_BYTES];
        cr_assert_eq(hoop_sock_read_all(fd, msg, sizeof(msg), dl), 0);
        hoop_auth_make(tok, HOOP_AUTH_REPLY, msg, NULL, 0, x.nonce, out);
        memset(out + HOOP_AUTH_BYTES, 0xab, HOOP_AUTH_BYTES);
        cr_assert_eq(hoop_sock_write_all(fd, out, sizeof(out), dl), 0);
        usleep(20000); /* both on this socket before anything reads it */
        hoop_status_t st = hoop_transport_tcp.settle(x.tp, DATA_COMM, hoop_deadline_after(5.0));
        cr_assert_eq(st, HOOP_OK, "%s/%s: the reply must settle: %s", modes[m][0], modes[m][1],
                     hoop_last_error());
        while (r.state == HOOP_REQ_PENDING && hoop_now_ns() < dl)
            cr_assert_geq(hoop_transport_tcp.progress(x.tp, dl), 0);
        cr_assert_eq(r.state, 0, "%s/%s: the receive ended with %d", modes[m][0], modes[m][1],
                     r.state);
        uint8_t want[HOOP_AUTH_BYTES];
        memset(want, 0xab, sizeof(want));
        cr_assert(memcmp(got, want, sizeof(want)) == 0,
                  "%s/%s: the receive got the reply's bytes, not the data behind it", modes[m][0],
                  modes[m][1]);
        hoop_transport_tcp.close(conn);
        close(fd);
        raw_peer_close(&x);
    }
    unsetenv("HOOP_TCP_ENGINE");
    unsetenv("HOOP_URING_SUBMIT");
    unsetenv("HOOP_TCP_NSOCKS");
}

Test(auth, seal_binds_header_and_body)
{
    uint8_t tok[HOOP_TOKEN_BYTES], bad[HOOP_TOKEN_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    hoop_token_from_string("another-job", bad);
    uint8_t head[HOOP_HELLO_BYTES], body[16] = "a notice body";
    struct hoop_hello h = {.kind = HOOP_HELLO_NOTICE, .rank = 2, .size = 4, .comm_id = 77,
                           .body_len = sizeof(body)};
    hoop_hello_encode(&h, head);
    hoop_auth_seal(tok, head, body, sizeof(body));
    cr_assert(hoop_auth_sealed(tok, head, body, sizeof(body)));
    cr_assert_not(hoop_auth_sealed(bad, head, body, sizeof(body)), "another token");
    body[0] ^= 1;
    cr_assert_not(hoop_auth_sealed(tok, head, body, sizeof(body)), "a changed body");
    body[0] ^= 1;
    head[48] ^= 1;
    cr_assert_not(hoop_auth_sealed(tok, head, body, sizeof(body)), "another communicator");
}

/* A split's groups each get a token of their own from the parent's. */
Test(auth, derived_tokens_differ_by_token_and_input)
{
    uint8_t tok[HOOP_TOKEN_BYTES], other[HOOP_TOKEN_BYTES];
    uint8_t a[HOOP_TOKEN_BYTES], a2[HOOP_TOKEN_BYTES], b[HOOP_TOKEN_BYTES], c[HOOP_TOKEN_BYTES];
    hoop_token_from_string(JOB_TOKEN, tok);
    hoop_token_from_string("another-job", other);
    hoop_auth_derive(tok, "group 0", 7, a);
    hoop_auth_derive(tok, "group 0", 7, a2);
    hoop_auth_derive(tok, "group 1", 7, b);
    hoop_auth_derive(other, "group 0", 7, c);
    cr_assert(memcmp(a, a2, sizeof(a)) == 0, "the same token and input give the same token");
    cr_assert(memcmp(a, b, sizeof(a)) != 0, "another group");
    cr_assert(memcmp(a, c, sizeof(a)) != 0, "another parent token");
    cr_assert(memcmp(a, tok, sizeof(a)) != 0, "not the parent's token");
}

/* ---- a captured job ---------------------------------------------------- */

static int allreduce_alltoall(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    enum { COUNT = 1024 };
    static int32_t in[COUNT * 8], out[COUNT * 8];
    for (int i = 0; i < COUNT * size; i++)
        in[i] = rank + i;
    hoop_status_t st = hoop_allreduce(comm, in, out, COUNT, HOOP_I32, HOOP_SUM);
    if (st == HOOP_OK)
        st = hoop_alltoall(comm, in, out, COUNT / size, HOOP_I32);
    if (st)
        return harness_failf(rank, "%s", hoop_last_error());
    return 0;
}

struct capture {
    int packets;
    int hits;
    int marks; /* packets with the control marker: payloads are seen */
    long bytes;
    char first_hit[160];
};

Test(auth, a_captured_job_carries_no_token_byte, .timeout = 120)
{
    enum { N = 4 };
    if (geteuid() != 0) {
        fprintf(stderr, "auth/a_captured_job_carries_no_token_byte: skipped: capturing on lo "
                        "needs root (a raw packet socket)\n");
        cr_skip_test("capturing on lo needs root");
    }
    int ps = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (ps < 0) {
        fprintf(stderr, "auth/a_captured_job_carries_no_token_byte: skipped: no packet socket: "
                        "%s\n", strerror(errno));
        cr_skip_test("no packet socket");
    }
    struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                             .sll_ifindex = (int)if_nametoindex("lo")};
    cr_assert(ll.sll_ifindex > 0 && bind(ps, (struct sockaddr *)&ll, sizeof(ll)) == 0,
              "bind the packet socket to lo: %s", strerror(errno));
    int big = 8 << 20;
    setsockopt(ps, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));

    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    const char *token = job.token;
    struct capture *cap = mmap(NULL, sizeof(*cap), PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(cap != MAP_FAILED);
    memset(cap, 0, sizeof(*cap));
    int stop[2];
    cr_assert_eq(pipe(stop), 0);
    fflush(stderr);
    pid_t sniffer = fork();
    cr_assert(sniffer >= 0);
    if (sniffer == 0) {
        /* Bounded in time: 90 s at most, or until the parent says stop. */
        close(stop[1]);
        static uint8_t pkt[1 << 16];
        uint64_t end = hoop_deadline_after(90.0);
        for (;;) {
            struct pollfd p[2] = {{.fd = ps, .events = POLLIN}, {.fd = stop[0], .events = POLLIN}};
            if (poll(p, 2, hoop_ms_left(end)) <= 0)
                break;
            if (p[0].revents) {
                ssize_t n = recv(ps, pkt, sizeof(pkt), MSG_DONTWAIT);
                if (n > 0) {
                    cap->packets++;
                    cap->bytes += n;
                    cap->marks += memmem(pkt, (size_t)n, MARKER, strlen(MARKER)) != NULL;
                    if (memmem(pkt, (size_t)n, token, strlen(token)) && !cap->hits++)
                        snprintf(cap->first_hit, sizeof(cap->first_hit),
                                 "packet %d of %zd bytes", cap->packets, n);
                }
                continue;
            }
            if (p[1].revents) {
                /* Drain what is queued, then stop. */
                ssize_t n;
                while ((n = recv(ps, pkt, sizeof(pkt), MSG_DONTWAIT)) > 0) {
                    cap->packets++;
                    cap->bytes += n;
                    if (memmem(pkt, (size_t)n, token, strlen(token)) && !cap->hits++)
                        snprintf(cap->first_hit, sizeof(cap->first_hit),
                                 "packet %d of %zd bytes", cap->packets, n);
                }
                break;
            }
        }
        _exit(0);
    }
    close(stop[0]);
    close(ps);
    usleep(100000); /* the sniffer is in its loop */
    /* The control: a datagram on lo that the capture must see. */
    int us = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(us >= 0);
    (void)!sendto(us, MARKER, strlen(MARKER), 0, (struct sockaddr *)&to, sizeof(to));
    close(us);
    for (int r = 0; r < N; r++)
        cr_assert(harness_spawn_rank(&job, r, N, NULL, allreduce_alltoall, NULL) > 0);
    bool ok = harness_wait(&job, 90.0, 15.0);
    close(stop[1]);
    waitpid(sniffer, NULL, 0);
    fprintf(stderr, "auth/a_captured_job_carries_no_token_byte: %d packets, %ld bytes captured, "
                    "%d with the token\n", cap->packets, cap->bytes, cap->hits);
    cr_assert(ok, "the job must run:\n%s", job.report);
    cr_assert(cap->marks > 0, "the capture missed the control datagram (%d packets seen)",
              cap->packets);
    cr_assert_eq(cap->hits, 0, "the token \"%s\" crossed the wire (%s first)", token,
                 cap->first_hit);
    munmap(cap, sizeof(*cap));
}
