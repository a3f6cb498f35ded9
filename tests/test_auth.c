/* test_auth.c - the job token is proved, never sent: a listener in a child
 * process faces good, replayed, wrong, truncated, garbled and old-version
 * handshakes; a captured 4-rank job carries no byte of its token. */
#include <criterion/criterion.h>

#include "common/auth.h"
#include "common/clock.h"
#include "common/listener.h"
#include "common/sock.h"
#include "common/wire.h"
#include "harness.h"
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
