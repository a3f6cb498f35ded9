/* test_shm.c - shared memory between ranks of one host (transport/shm and
 * the per-link choice of ring/mixed.c): the transport driven directly in
 * one process (messages around slot boundaries, a corrupted segment, a
 * peer gone), and real ranks: every collective exact at N = 1..8, a rank
 * killed mid-allreduce, rings mixing shared memory and TCP, HOOP_SHM
 * refused or disagreeing. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stddef.h>
#include <netinet/in.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "harness.h"
#include "transport/shm/conn.h"

/* ---- the transport alone, two ends in one process ----------------------- */

struct pair {
    void *tp[2];
    void *tx; /* rank 0 -> rank 1 */
    void *rx;
};

static const uint8_t pair_token[HOOP_TOKEN_BYTES] = "test_shm pair token";

static void pair_open(struct pair *p)
{
    const struct hoop_transport_ops *o = &hoop_transport_shm;
    uint8_t h[2][HOOP_TP_HANDLE_MAX];
    uint16_t hl[2];
    struct sockaddr_in any = {.sin_family = AF_INET};
    for (int r = 0; r < 2; r++) {
        struct hoop_tp_params prm = {.rank = r, .size = 2, .token = pair_token};
        cr_assert_eq(o->create(&prm, &p->tp[r]), HOOP_OK, "create: %s", hoop_last_error());
        cr_assert_eq(o->listen(p->tp[r], (struct sockaddr *)&any, sizeof(any), h[r], &hl[r]),
                     HOOP_OK, "listen: %s", hoop_last_error());
        o->set_busy_poll(p->tp[r], 1000, 0);
    }
    uint64_t deadline = hoop_now_ns() + 5000000000ull;
    cr_assert_eq(o->connect(p->tp[0], 1, HOOP_CHANNEL_RING, "here", h[1], hl[1], 7, deadline,
                            &p->tx), HOOP_OK, "connect: %s", hoop_last_error());
    cr_assert_eq(o->accept(p->tp[1], 0, HOOP_CHANNEL_RING, "here", 7, deadline, &p->rx), HOOP_OK,
                 "accept: %s", hoop_last_error());
}

static void pair_close(struct pair *p)
{
    const struct hoop_transport_ops *o = &hoop_transport_shm;
    if (p->tx)
        o->close(p->tx);
    if (p->rx)
        o->close(p->rx);
    o->destroy(p->tp[0]);
    o->destroy(p->tp[1]);
}

/* Wait for req (on tp) to end; its state. */
static int pair_wait(void *tp, struct hoop_tp_req *req)
{
    uint64_t deadline = hoop_now_ns() + 5000000000ull;
    while (req->state == HOOP_REQ_PENDING && hoop_now_ns() < deadline) {
        int rc = hoop_transport_shm.progress(tp, deadline);
        if (rc < 0)
            return rc;
    }
    return req->state;
}

/* A connection proves the job token without carrying it: the hello that
 * reaches a listener holds no byte of the token, and a listener whose
 * rank holds another token refuses it with a sentence. */
Test(shm, hello_proves_the_token_without_carrying_it, .timeout = 60)
{
    const struct hoop_transport_ops *o = &hoop_transport_shm;
    static const uint8_t other[HOOP_TOKEN_BYTES] = "test_shm another job's token";
    struct sockaddr_in any = {.sin_family = AF_INET};
    char path[64];
    snprintf(path, sizeof(path), "/tmp/hoop-shm-token-%d.log", (int)getpid());
    for (int wrong = 0; wrong < 2; wrong++) {
        void *tp[2];
        uint8_t h[2][HOOP_TP_HANDLE_MAX];
        uint16_t hl[2];
        for (int r = 0; r < 2; r++) {
            struct hoop_tp_params prm = {.rank = r, .size = 2,
                                         .token = r == 1 && wrong ? other : pair_token};
            cr_assert_eq(o->create(&prm, &tp[r]), HOOP_OK, "create: %s", hoop_last_error());
            cr_assert_eq(o->listen(tp[r], (struct sockaddr *)&any, sizeof(any), h[r], &hl[r]),
                         HOOP_OK, "listen: %s", hoop_last_error());
        }
        void *tx = NULL, *rx = NULL;
        uint64_t deadline = hoop_now_ns() + 5000000000ull;
        cr_assert_eq(o->connect(tp[0], 1, HOOP_CHANNEL_RING, "here", h[1], hl[1], 7, deadline,
                                &tx), HOOP_OK, "connect: %s", hoop_last_error());
        if (!wrong) {
            /* Read the hello off rank 1's listening socket by hand. */
            int fd = accept(((struct shm_tp *)tp[1])->lfd, NULL, NULL);
            cr_assert(fd >= 0, "accept: %s", strerror(errno));
            uint8_t m[256];
            union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int) * 8)];
            } cm;
            struct iovec iov = {.iov_base = m, .iov_len = sizeof(m)};
            struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                                .msg_controllen = sizeof(cm.b)};
            ssize_t got = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
            for (struct cmsghdr *ch = CMSG_FIRSTHDR(&mh); ch; ch = CMSG_NXTHDR(&mh, ch))
                for (size_t i = 0; i < (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                    int f;
                    memcpy(&f, CMSG_DATA(ch) + i * sizeof(int), sizeof(int));
                    close(f);
                }
            cr_assert(got >= 64, "a hello of %zd bytes", got);
            cr_assert(memmem(m, (size_t)got, pair_token, strlen((const char *)pair_token)) ==
                          NULL,
                      "the hello carries the job token");
            close(fd);
        } else {
            int saved = harness_stderr_to(path);
            hoop_status_t st = o->accept(tp[1], 0, HOOP_CHANNEL_RING, "here", 7,
                                         hoop_now_ns() + 1000000000ull, &rx);
            static char log[8192];
            harness_stderr_back(saved, path, log, sizeof(log));
            cr_assert_neq(st, HOOP_OK, "a rank of another token must not be taken");
            cr_assert(strstr(log, "did not prove this job's token (its HOOP_TOKEN differs"),
                      "the refusal must say why:\n%s", log);
        }
        o->close(tx);
        if (rx)
            o->close(rx);
        o->destroy(tp[0]);
        o->destroy(tp[1]);
    }
}

/* Messages of every length around the slots' edges (64 KiB slots, a
 * 64-byte header counted in), more than the ring holds, interleaved so
 * that the sender waits for room: every byte arrives, in order. */
Test(shm, messages_around_slot_boundaries_arrive_whole, .timeout = 60)
{
    struct pair p;
    pair_open(&p);
    const size_t slot = 64u << 10, hdr = 64;
    const size_t lens[] = {0, 1, slot - hdr - 1, slot - hdr, slot - hdr + 1, slot, 2 * slot - hdr,
                           2 * slot - hdr + 1, 16 * slot, 16 * slot + 3, 40 * slot + 5};
    size_t max = 40 * slot + 5;
    uint8_t *src = malloc(max), *dst = malloc(max + 1); /* + 1: a guard byte */
    cr_assert(src && dst);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t n = lens[i];
        uint8_t sh[64], rh[64];
        for (size_t k = 0; k < n; k++)
            src[k] = (uint8_t)(k * 31 + i);
        memset(sh, (int)(0xA0 + i), sizeof(sh));
        memset(dst, 0, n + 1);
        memset(rh, 0, sizeof(rh));
        struct hoop_tp_req s = {.buf = src, .len = n, .hdr = sh, .hdr_len = hdr};
        struct hoop_tp_req r = {.buf = dst, .len = n, .hdr = rh, .hdr_len = hdr};
        cr_assert_eq(hoop_transport_shm.isend(p.tx, &s), 0);
        cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
        while (s.state == HOOP_REQ_PENDING || r.state == HOOP_REQ_PENDING) {
            if (s.state == HOOP_REQ_PENDING)
                hoop_transport_shm.progress(p.tp[0], hoop_now_ns() + 1000000);
            if (r.state == HOOP_REQ_PENDING)
                hoop_transport_shm.progress(p.tp[1], hoop_now_ns() + 1000000);
        }
        cr_assert_eq(s.state, 0, "send of %zu bytes: %d", n, s.state);
        cr_assert_eq(r.state, 0, "receive of %zu bytes: %d (%s)", n, r.state,
                     hoop_transport_shm.last_error(p.tp[1]));
        cr_assert(memcmp(sh, rh, hdr) == 0, "header of the %zu-byte message differs", n);
        cr_assert(n == 0 || memcmp(src, dst, n) == 0, "payload of %zu bytes differs", n);
        cr_assert_eq(dst[n], 0, "a receive of %zu bytes wrote past its end", n);
    }
    free(src);
    free(dst);
    pair_close(&p);
}

/* Large payloads go through the slots unless HOOP_SHM_SINGLE_COPY=1 asks
 * for them to be read in place (where ptrace rules allow); a value that is
 * neither is refused with a sentence naming the setting. */
static void single_copy_send(struct pair *p, uint32_t *flags)
{
    static uint8_t src[300000], dst[300000];
    uint8_t sh[64] = {1}, rh[64];
    for (size_t i = 0; i < sizeof(src); i++)
        src[i] = (uint8_t)(i * 13);
    struct hoop_tp_req s = {.buf = src, .len = sizeof(src), .hdr = sh, .hdr_len = sizeof(sh)};
    struct hoop_tp_req r = {.buf = dst, .len = sizeof(dst), .hdr = rh, .hdr_len = sizeof(rh)};
    struct shm_conn *tx = p->tx;
    uint64_t first = tx->pos;
    cr_assert_eq(hoop_transport_shm.isend(p->tx, &s), 0);
    struct shm_slot_hdr h;
    memcpy(&h, tx->seg + shm_slot_off((uint32_t)(first & (tx->nslots - 1)), tx->slot_bytes),
           sizeof(h));
    *flags = h.flags;
    cr_assert_eq(hoop_transport_shm.irecv(p->rx, &r), 0);
    cr_assert_eq(pair_wait(p->tp[1], &r), 0, "receive: %s",
                 hoop_transport_shm.last_error(p->tp[1]));
    cr_assert_eq(pair_wait(p->tp[0], &s), 0);
    cr_assert(memcmp(src, dst, sizeof(src)) == 0 && memcmp(sh, rh, sizeof(sh)) == 0);
}

Test(shm, single_copy_only_when_asked, .timeout = 60)
{
    struct pair p;
    uint32_t flags;
    unsetenv("HOOP_SHM_SINGLE_COPY"); /* the default, whatever the pass sets */
    pair_open(&p);
    cr_assert_eq(((struct shm_conn *)p.rx)->cma_pid, 0, "single copy set up though not asked for");
    single_copy_send(&p, &flags);
    cr_assert_eq(flags & SHM_SLOT_REMOTE, 0, "a payload was lent in place by default");
    pair_close(&p);

    setenv("HOOP_SHM_SINGLE_COPY", "2", 1);
    struct hoop_tp_params prm = {.rank = 0, .size = 2, .token = pair_token};
    void *tp = NULL;
    cr_assert_eq(hoop_transport_shm.create(&prm, &tp), HOOP_ERR_INVALID);
    cr_assert(strstr(hoop_last_error(), "HOOP_SHM_SINGLE_COPY"), "the sentence \"%s\"",
              hoop_last_error());

    setenv("HOOP_SHM_SINGLE_COPY", "1", 1);
    pair_open(&p);
    int cma = ((struct shm_conn *)p.rx)->cma_pid != 0;
    single_copy_send(&p, &flags);
    pair_close(&p);
    if (!cma)
        cr_skip_test("this process may not read its own memory with process_vm_readv (a seccomp "
                     "profile?): the default's half passed, the single copy's cannot be tried");
    cr_assert_neq(flags & SHM_SLOT_REMOTE, 0, "HOOP_SHM_SINGLE_COPY=1: the slots took the payload");
}

/* Send s and receive r on the pair, both to their end. */
static void pair_move(struct pair *p, struct hoop_tp_req *s, struct hoop_tp_req *r)
{
    cr_assert_eq(hoop_transport_shm.isend(p->tx, s), 0);
    cr_assert_eq(hoop_transport_shm.irecv(p->rx, r), 0);
    uint64_t deadline = hoop_now_ns() + 5000000000ull;
    while ((s->state == HOOP_REQ_PENDING || r->state == HOOP_REQ_PENDING) &&
           hoop_now_ns() < deadline) {
        if (s->state == HOOP_REQ_PENDING)
            hoop_transport_shm.progress(p->tp[0], hoop_now_ns() + 1000000);
        if (r->state == HOOP_REQ_PENDING)
            hoop_transport_shm.progress(p->tp[1], hoop_now_ns() + 1000000);
    }
}

/* The magic of the slot the sender wrote last. */
static uint32_t pair_last_magic(struct pair *p)
{
    struct shm_conn *tx = p->tx;
    uint32_t magic;
    memcpy(&magic,
           tx->seg + shm_slot_off((uint32_t)((tx->pos - 1) & (tx->nslots - 1)), tx->slot_bytes), 4);
    return magic;
}

/* A receive that takes its payload in place (hoop_tp_req.take, the ring's
 * reducing receives): a message of the bulk path is handed over in pieces
 * in order, each byte once, each piece starting at a multiple of 8 bytes,
 * only after the header passed its check, and its buffer is never written;
 * a message small enough for a compact slot (its stream, a changed header
 * word and the payload, at most SHM_COMPACT_MAX bytes) lands in the buffer
 * as usual. */
struct lend_log {
    struct hoop_tp_req r; /* first: take gets &log->r */
    int checked;
    int pieces;
    int misaligned;
    int before_check;
    size_t next; /* the offset the next piece must start at */
    uint8_t *got;
};

static int lend_check(struct hoop_tp_req *req)
{
    ((struct lend_log *)req)->checked = 1;
    return 0;
}

static void lend_take(struct hoop_tp_req *req, size_t off, const void *src, size_t n)
{
    struct lend_log *l = (struct lend_log *)req;
    l->pieces++;
    l->misaligned += off % 8 != 0;
    l->before_check += !l->checked;
    cr_assert_eq(off, l->next, "a piece at %zu where %zu was next", off, l->next);
    cr_assert_leq(off + n, req->len, "a piece past the payload's end");
    memcpy(l->got + off, src, n);
    l->next = off + n;
}

Test(shm, payloads_taken_in_place_arrive_whole_and_once, .timeout = 60)
{
    struct pair p;
    unsetenv("HOOP_SHM_SINGLE_COPY");
    pair_open(&p);
    const size_t slot = 64u << 10, hdr = 64;
    const size_t lens[] = {8,          SHM_COMPACT_MAX - 8, SHM_COMPACT_MAX, slot - hdr - 8,
                           slot - hdr, slot - hdr + 8,      2 * slot,        16 * slot + 8,
                           40 * slot};
    size_t max = 40 * slot;
    uint8_t *src = malloc(max), *dst = calloc(1, max), *got = malloc(max);
    cr_assert(src && dst && got);
    /* The connection's first header goes whole: later ones may be compact. */
    uint8_t wh[64], wr[64];
    memset(wh, 0x50, sizeof(wh));
    struct hoop_tp_req ws = {.buf = src, .len = 8, .hdr = wh, .hdr_len = hdr};
    struct hoop_tp_req wq = {.buf = got, .len = 8, .hdr = wr, .hdr_len = hdr};
    pair_move(&p, &ws, &wq);
    cr_assert(ws.state == 0 && wq.state == 0);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t n = lens[i];
        for (size_t k = 0; k < n; k++)
            src[k] = (uint8_t)(k * 7 + i);
        uint8_t sh[64], rh[64] = {0};
        memset(sh, 0x50, sizeof(sh));
        sh[8] = (uint8_t)i; /* one word changes */
        memset(got, 0, n);
        struct hoop_tp_req s = {.buf = src, .len = n, .hdr = sh, .hdr_len = hdr};
        struct lend_log l = {.r = {.buf = dst,
                                   .len = n,
                                   .hdr = rh,
                                   .hdr_len = hdr,
                                   .check = lend_check,
                                   .take = lend_take},
                             .got = got};
        pair_move(&p, &s, &l.r);
        cr_assert_eq(s.state, 0, "send of %zu bytes: %d", n, s.state);
        cr_assert_eq(l.r.state, 0, "receive of %zu bytes: %d (%s)", n, l.r.state,
                     hoop_transport_shm.last_error(p.tp[1]));
        cr_assert(memcmp(sh, rh, hdr) == 0, "header of the %zu-byte message differs", n);
        int compact = pair_last_magic(&p) == SHM_SLOT_MAGIC_COMPACT;
        cr_assert_eq(compact, n + 8 <= SHM_COMPACT_MAX, "a %zu-byte message %s a compact slot", n,
                     compact ? "in" : "not in");
        if (compact) {
            cr_assert_eq(l.pieces, 0, "a %zu-byte message in a compact slot was lent", n);
            cr_assert(memcmp(src, dst, n) == 0, "compact payload of %zu bytes differs", n);
            memset(dst, 0, n);
            continue;
        }
        cr_assert_gt(l.pieces, 0, "the %zu-byte payload was copied, not handed over", n);
        cr_assert_eq(l.next, n, "%zu of %zu bytes handed over", l.next, n);
        cr_assert_eq(l.misaligned, 0, "%d pieces of %zu bytes off a multiple of 8", l.misaligned,
                     n);
        cr_assert_eq(l.before_check, 0, "%d pieces handed over before the check", l.before_check);
        cr_assert(memcmp(src, got, n) == 0, "payload of %zu bytes handed over differs", n);
        for (size_t k = 0; k < n; k++)
            cr_assert_eq(dst[k], 0, "byte %zu of the lent %zu-byte receive's buffer written", k, n);
    }
    free(src);
    free(dst);
    free(got);
    pair_close(&p);
}

/* Small messages go in compact slots, their header written as the words
 * that changed since the last header on the connection: messages whose
 * headers change in no word, one, five (the most the first line holds),
 * six and all eight, of lengths around the first line's and the compact
 * slot's ends, headers of no word, two and nine words, a payload read in
 * place between them: every header and payload arrives whole, and the
 * slots are compact exactly where the stream fits. */
Test(shm, small_messages_travel_in_compact_slots, .timeout = 60)
{
    struct pair p;
    pair_open(&p);
    const size_t lens[] = {0, 1, 7, 8, 32, 33, 40, 41, 100, 983, 984, 985, 1016, 1024, 1025, 5000};
    const int changes[] = {0, 1, 5, 6, 8, 3};
    static uint8_t src[200000], dst[200000 + 1];
    uint8_t sh[72] = {0}, rh[72];
    int compact = 0, full = 0, k = 0;
    for (int round = 0; round < 3; round++)
        for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
            for (size_t ci = 0; ci < sizeof(changes) / sizeof(changes[0]); ci++, k++) {
                size_t n = lens[li], hdr = round == 0 ? 64 : round == 1 ? 16 : 0;
                int changed = changes[ci] * (int)hdr / 64;
                for (int w = 0; w < changed; w++)
                    sh[8 * w] = (uint8_t)(sh[8 * w] + 1 + w); /* word w changes */
                for (size_t b = 0; b < n; b++)
                    src[b] = (uint8_t)(b * 7 + (size_t)k);
                memset(dst, 0, n + 1);
                memset(rh, 0xee, sizeof(rh));
                struct hoop_tp_req s = {.buf = src, .len = n, .hdr = sh, .hdr_len = hdr};
                struct hoop_tp_req r = {.buf = dst, .len = n, .hdr = rh, .hdr_len = hdr};
                pair_move(&p, &s, &r);
                cr_assert_eq(s.state, 0, "send %d (%zu bytes): %d", k, n, s.state);
                cr_assert_eq(r.state, 0, "receive %d (%zu bytes): %d (%s)", k, n, r.state,
                             hoop_transport_shm.last_error(p.tp[1]));
                cr_assert(memcmp(sh, rh, hdr) == 0,
                          "header of message %d (%zu bytes, %d words changed) differs", k, n,
                          changed);
                cr_assert(n == 0 || memcmp(src, dst, n) == 0,
                          "payload of message %d (%zu bytes, %d words changed) differs", k, n,
                          changed);
                cr_assert_eq(dst[n], 0, "message %d wrote past its end", k);
                int want = changed <= 5 && 8 * (size_t)changed + n <= SHM_COMPACT_MAX;
                uint32_t magic = pair_last_magic(&p);
                cr_assert_eq(magic, want ? SHM_SLOT_MAGIC_COMPACT : SHM_SLOT_MAGIC,
                             "message %d (%zu bytes, %zu-byte header, %d words changed) went in "
                             "a %s slot",
                             k, n, hdr, changed,
                             magic == SHM_SLOT_MAGIC_COMPACT ? "compact" : "full");
                compact += want;
                full += !want;
            }
    cr_assert(compact > 100 && full > 50, "%d compact and %d full slots", compact, full);
    /* A header that is not whole words, and one longer than a base, go
     * whole; a payload read in place between small ones leaves the base in
     * step; a receive that cuts the same bytes elsewhere gets them alike. */
    const size_t odd[][3] = {{72, 8, 72}, {12, 8, 12}, {64, 200000, 64},
                             {64, 8, 64}, {8, 10, 0},  {64, 8, 64}};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        size_t sh_len = odd[i][0], n = odd[i][1], rh_len = odd[i][2];
        sh[24] = (uint8_t)(sh[24] + 1);
        memset(src, (int)(0x30 + i), n);
        memset(dst, 0, n + sh_len - rh_len + 1);
        memset(rh, 0xee, sizeof(rh));
        struct hoop_tp_req s = {.buf = src, .len = n, .hdr = sh, .hdr_len = sh_len};
        struct hoop_tp_req r = {
            .buf = dst, .len = n + sh_len - rh_len, .hdr = rh, .hdr_len = rh_len};
        pair_move(&p, &s, &r);
        cr_assert_eq(r.state, 0, "odd receive %zu: %d (%s)", i, r.state,
                     hoop_transport_shm.last_error(p.tp[1]));
        cr_assert(memcmp(sh, rh, rh_len) == 0, "odd header %zu differs", i);
        cr_assert(memcmp(sh + rh_len, dst, sh_len - rh_len) == 0,
                  "odd header %zu, as payload, differs", i);
        cr_assert(memcmp(src, dst + sh_len - rh_len, n) == 0, "odd payload %zu differs", i);
        cr_assert_eq(dst[n + sh_len - rh_len], 0, "odd message %zu wrote past its end", i);
        cr_assert_eq(pair_last_magic(&p) == SHM_SLOT_MAGIC_COMPACT,
                     sh_len <= 64 && sh_len % 8 == 0 && n < 1000, "odd message %zu", i);
    }
    pair_close(&p);
}

/* A compact slot the peer wrote wrong (another message's number, header
 * words that do not exist, more bytes than a compact slot holds) is an
 * error with a sentence, and nothing is read past the slot. */
static void compact_corrupt_and_expect(size_t at, const void *bytes, size_t n,
                                       const char *expect_words)
{
    struct pair p;
    pair_open(&p);
    uint8_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8], sh[64] = {0}, rh[64];
    struct hoop_tp_req s = {.buf = src, .len = sizeof(src), .hdr = sh, .hdr_len = sizeof(sh)};
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s), 0);
    cr_assert_eq(pair_last_magic(&p), SHM_SLOT_MAGIC_COMPACT);
    struct shm_conn *rx = p.rx;
    memcpy(rx->seg + shm_slot_off(0, rx->slot_bytes) + at, bytes, n);
    struct hoop_tp_req r = {.buf = dst, .len = sizeof(dst), .hdr = rh, .hdr_len = sizeof(rh)};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
    int st = pair_wait(p.tp[1], &r);
    const char *why = hoop_transport_shm.last_error(p.tp[1]);
    cr_assert_eq(st, -EPROTO, "the receive ended with %d (%s)", st, why ? why : "no sentence");
    cr_assert(why && strstr(why, "corrupt slot header") && strstr(why, expect_words),
              "the sentence \"%s\" does not say \"%s\"", why ? why : "(none)", expect_words);
    hoop_transport_shm.cancel(p.tp[0]);
    pair_close(&p);
}

Test(shm, corrupt_compact_slots_fail_cleanly, .timeout = 60)
{
    const uint32_t msg = 7;
    compact_corrupt_and_expect(offsetof(struct shm_slot_compact, msg), &msg, 4, "message 7");
    const uint8_t words[2] = {2, 0x04}; /* words, mask: word 2 of a 2-word header */
    compact_corrupt_and_expect(offsetof(struct shm_slot_compact, words), words, 2,
                               "2 words, of which 0x04");
    const uint8_t nine[2] = {9, 0};
    compact_corrupt_and_expect(offsetof(struct shm_slot_compact, words), nine, 2, "9 words");
    const uint8_t many[2] = {8, 0x3f}; /* six changed words: more than the line */
    compact_corrupt_and_expect(offsetof(struct shm_slot_compact, words), many, 2,
                               "6 changed header words");
    const uint16_t huge = 0xffff;
    compact_corrupt_and_expect(offsetof(struct shm_slot_compact, len), &huge, 2,
                               "65535 bytes, more than a compact slot's");
}

/* The receiving end's view of the segment, to corrupt it as a hostile or
 * broken peer could. */
static struct shm_conn *pair_rx(struct pair *p)
{
    return p->rx;
}

static void corrupt_and_expect_hdr(void (*corrupt)(struct shm_conn *), int expect_err,
                                   const char *expect_words, size_t hdr_len)
{
    struct pair p;
    if (hdr_len) /* a payload read in place */
        setenv("HOOP_SHM_SINGLE_COPY", "1", 1);
    pair_open(&p);
    if (hdr_len && !((struct shm_conn *)p.rx)->cma_pid) {
        pair_close(&p);
        cr_skip_test("this process may not read its own memory with process_vm_readv (a "
                     "seccomp profile?): payloads are not read in place here");
    }
    uint8_t src[200000], dst[200000], sh[64] = {0}, rh[64];
    memset(src, 7, sizeof(src));
    struct hoop_tp_req s = {.buf = src, .len = sizeof(src), .hdr = sh, .hdr_len = hdr_len};
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s), 0); /* fills what the ring holds */
    corrupt(pair_rx(&p));
    struct hoop_tp_req r = {.buf = dst, .len = sizeof(dst), .hdr = rh, .hdr_len = hdr_len};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
    int st = pair_wait(p.tp[1], &r);
    const char *why = hoop_transport_shm.last_error(p.tp[1]);
    cr_assert_eq(st, expect_err, "the receive ended with %d, not %d (%s)", st, expect_err,
                 why ? why : "no sentence");
    cr_assert(why && strstr(why, expect_words), "the sentence \"%s\" does not say \"%s\"",
              why ? why : "(none)", expect_words);
    /* The connection stays failed: a later receive ends at once. */
    struct hoop_tp_req r2 = {.buf = dst, .len = 8};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r2), 0);
    cr_assert_eq(pair_wait(p.tp[1], &r2), expect_err);
    hoop_transport_shm.cancel(p.tp[0]);
    pair_close(&p);
}

/* Messages without a header of their own go through the slots; with one,
 * a payload this long stays in the sender and is read in place. */
static void corrupt_and_expect(void (*corrupt)(struct shm_conn *), int expect_err,
                               const char *expect_words)
{
    corrupt_and_expect_hdr(corrupt, expect_err, expect_words, 0);
}

static void bad_remote(struct shm_conn *c)
{
    struct shm_slot_hdr *h = (struct shm_slot_hdr *)(c->seg + shm_slot_off(0, c->slot_bytes));
    h->remote = 4096; /* nothing is mapped there */
}

static void bad_magic(struct shm_conn *c)
{
    memset(c->seg + shm_slot_off(0, c->slot_bytes), 0x5a, 4);
}

static void huge_len(struct shm_conn *c)
{
    struct shm_slot_hdr *h = (struct shm_slot_hdr *)(c->seg + shm_slot_off(1, c->slot_bytes));
    h->len = 0xfffffff0u;
}

static void short_slot(struct shm_conn *c)
{
    struct shm_slot_hdr *h = (struct shm_slot_hdr *)(c->seg + shm_slot_off(0, c->slot_bytes));
    h->len = 3; /* the message goes on in the next slot */
}

static void wrong_pos(struct shm_conn *c)
{
    struct shm_slot_hdr *h = (struct shm_slot_hdr *)(c->seg + shm_slot_off(0, c->slot_bytes));
    h->pos = 12345;
}

static void wild_ready(struct shm_conn *c)
{
    atomic_store(shm_slot_ready(c->seg + shm_slot_off(0, c->slot_bytes)), (uint64_t)1 << 62);
}

Test(shm, corrupted_slot_magic_fails_cleanly, .timeout = 60)
{
    corrupt_and_expect(bad_magic, -EPROTO, "corrupt slot header");
}

Test(shm, slot_length_beyond_the_slot_fails_cleanly, .timeout = 60)
{
    corrupt_and_expect(huge_len, -EPROTO, "more than a slot's");
}

Test(shm, short_slot_before_the_message_end_fails_cleanly, .timeout = 60)
{
    corrupt_and_expect(short_slot, -EPROTO, "neither a full slot nor the message's end");
}

Test(shm, slot_from_elsewhere_in_the_ring_fails_cleanly, .timeout = 60)
{
    corrupt_and_expect(wrong_pos, -EPROTO, "says it is slot 12345");
}

Test(shm, payload_pointer_outside_the_sender_fails_cleanly, .timeout = 60)
{
    corrupt_and_expect_hdr(bad_remote, -EPROTO, "could not read", 64);
}

Test(shm, wild_position_fails_cleanly, .timeout = 60)
{
    corrupt_and_expect(wild_ready, -EPROTO, "segment is corrupt");
}

/* A sender whose collective failed gives up its payloads lent in place
 * (cancel), and its caller may free them at once: the receiver that cannot
 * read one then says the sender stopped (a symptom, not a lie about the
 * payload). */
Test(shm, payload_freed_after_the_sender_gave_up_is_a_reset, .timeout = 60)
{
    struct pair p;
    setenv("HOOP_SHM_SINGLE_COPY", "1", 1);
    pair_open(&p);
    if (!((struct shm_conn *)p.rx)->cma_pid) {
        pair_close(&p);
        cr_skip_test("this process may not read its own memory with process_vm_readv (a "
                     "seccomp profile?): payloads are not read in place here");
    }
    const size_t len = 1u << 20; /* read in place (SHM_REMOTE_MIN and more) */
    uint8_t *src = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert(src != MAP_FAILED);
    static uint8_t dst[1u << 20];
    uint8_t sh[64] = {0}, rh[64];
    struct hoop_tp_req s = {.buf = src, .len = len, .hdr = sh, .hdr_len = sizeof(sh)};
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s), 0);
    hoop_transport_shm.cancel(p.tp[0]);
    munmap(src, len);
    struct hoop_tp_req r = {.buf = dst, .len = len, .hdr = rh, .hdr_len = sizeof(rh)};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
    int st = pair_wait(p.tp[1], &r);
    const char *why = hoop_transport_shm.last_error(p.tp[1]);
    cr_assert_eq(st, -ECONNRESET, "the receive ended with %d (%s)", st, why ? why : "no sentence");
    cr_assert(why && strstr(why, "stopped sending"), "the sentence \"%s\"", why ? why : "(none)");
    pair_close(&p);
}

/* The producer reads the consumer's tail only when the ring is full: a
 * tail that no consumer could have written fails the send with a sentence,
 * and a send that fits in the ring never looks. */
Test(shm, wild_tail_fails_the_sender_cleanly, .timeout = 60)
{
    struct pair p;
    pair_open(&p);
    struct shm_conn *tx = p.tx;
    static uint8_t big[4u << 20];
    uint8_t small[100] = {0};
    struct hoop_tp_req s1 = {.buf = small, .len = sizeof(small)};
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s1), 0);
    cr_assert_eq(pair_wait(p.tp[0], &s1), 0, "a send that fits the ring waits for no one");
    atomic_store(&tx->ctl->tail, (uint64_t)1 << 62);
    struct hoop_tp_req s2 = {.buf = big, .len = sizeof(big)}; /* more than the ring holds */
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s2), 0);
    int st = pair_wait(p.tp[0], &s2);
    const char *why = hoop_transport_shm.last_error(p.tp[0]);
    cr_assert_eq(st, -EPROTO, "the send ended with %d (%s)", st, why ? why : "no sentence");
    cr_assert(why && strstr(why, "segment is corrupt"), "the sentence \"%s\"",
              why ? why : "(none)");
    pair_close(&p);
}

/* A message longer than the receive is an error with a sentence, not an
 * overrun; the check sees its header first. */
Test(shm, longer_message_than_the_receive_fails_cleanly, .timeout = 60)
{
    struct pair p;
    pair_open(&p);
    uint8_t src[1000], dst[600 + 1] = {0};
    struct hoop_tp_req s = {.buf = src, .len = sizeof(src)};
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s), 0);
    struct hoop_tp_req r = {.buf = dst, .len = 600};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
    cr_assert_eq(pair_wait(p.tp[1], &r), -EMSGSIZE);
    cr_assert_eq(dst[600], 0);
    pair_close(&p);
}

/* The sender's end closes (a rank that failed or left): what it sent
 * arrives, then a receive that waits for more fails, within its deadline. */
Test(shm, receive_fails_once_the_sender_is_gone, .timeout = 60)
{
    struct pair p;
    pair_open(&p);
    uint8_t a[100] = {1}, b[100];
    struct hoop_tp_req s = {.buf = a, .len = sizeof(a)};
    cr_assert_eq(hoop_transport_shm.isend(p.tx, &s), 0);
    hoop_transport_shm.close(p.tx);
    p.tx = NULL;
    struct hoop_tp_req r = {.buf = b, .len = sizeof(b)};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
    cr_assert_eq(pair_wait(p.tp[1], &r), 0, "what was sent before the close is lost");
    cr_assert_eq(b[0], 1);
    struct hoop_tp_req r2 = {.buf = b, .len = sizeof(b)};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r2), 0);
    double t0 = harness_now();
    cr_assert_eq(pair_wait(p.tp[1], &r2), -ECONNRESET);
    cr_assert(harness_since(t0) < 2.0, "the receive took %.1f s to fail", harness_since(t0));
    pair_close(&p);
}

/* A wait with nothing coming returns at its deadline, not before, not long
 * after. */
Test(shm, wait_keeps_its_deadline, .timeout = 60)
{
    struct pair p;
    pair_open(&p);
    uint8_t b[16];
    struct hoop_tp_req r = {.buf = b, .len = sizeof(b)};
    cr_assert_eq(hoop_transport_shm.irecv(p.rx, &r), 0);
    double t0 = harness_now();
    int rc = hoop_transport_shm.progress(p.tp[1], hoop_now_ns() + 200000000ull);
    double took = harness_since(t0);
    cr_assert_eq(rc, 0);
    cr_assert_eq(r.state, HOOP_REQ_PENDING);
    cr_assert(took >= 0.19 && took < 2.0, "a 200 ms wait took %.3f s", took);
    hoop_transport_shm.cancel(p.tp[1]);
    cr_assert_eq(r.state, -ECANCELED);
    pair_close(&p);
}

/* ---- real ranks --------------------------------------------------------- */

static int32_t val(int rank, size_t i)
{
    return (int32_t)((i * 2654435761u + (size_t)rank * 40503u) % 1000u);
}

/* Element counts around the slots' edges for i32 (64 KiB slots, a 64-byte
 * frame in front of each chunk) and the chunk's (128 KiB here). */
static const size_t coll_counts[] = {0, 1, 5, 16368, 16369, 16384, 32768 + 3, 100003};

static int check_i32(int rank, const char *what, size_t n, const int32_t *got,
                     int32_t (*want)(size_t i, void *ctx), void *ctx)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want(i, ctx))
            return harness_failf(rank, "%s of %zu: element %zu is %d, not %d", what, n, i, got[i],
                                 want(i, ctx));
    return 0;
}

struct sum_ctx {
    int size;
    size_t off;
};

static int32_t want_sum(size_t i, void *vctx)
{
    struct sum_ctx *c = vctx;
    int32_t s = 0;
    for (int r = 0; r < c->size; r++)
        s += val(r, c->off + i);
    return s;
}

struct rank_ctx {
    int rank;
    size_t off;
};

static int32_t want_rank(size_t i, void *vctx)
{
    struct rank_ctx *c = vctx;
    return val(c->rank, c->off + i);
}

/* An i32 sum of n elements out of place, then in place, each checked
 * element by element: 0, or the harness's failure. */
static int allreduce_both_ways(hoop_comm_t *comm, int rank, int size, int32_t *a, int32_t *b,
                               size_t n)
{
    struct sum_ctx sc = {.size = size};
    hoop_status_t st;
    for (size_t i = 0; i < n; i++)
        a[i] = val(rank, i);
    if ((st = hoop_allreduce(comm, a, b, n, HOOP_I32, HOOP_SUM)))
        return harness_fail(rank, "allreduce", st);
    int rc = check_i32(rank, "allreduce", n, b, want_sum, &sc);
    if (!rc && (st = hoop_allreduce(comm, a, a, n, HOOP_I32, HOOP_SUM)))
        return harness_fail(rank, "allreduce in place", st);
    return rc ? rc : check_i32(rank, "allreduce in place", n, a, want_sum, &sc);
}

static int every_collective(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const char *want_desc = arg;
    if (size > 1 && !strstr(hoop_comm_transport(comm), want_desc))
        return harness_failf(rank, "hoop_comm_transport() is \"%s\", without \"%s\"",
                             hoop_comm_transport(comm), want_desc);
    size_t maxn = 100003 * (size_t)size + 16;
    int32_t *a = malloc(maxn * sizeof(*a)), *b = malloc(maxn * sizeof(*b));
    if (!a || !b)
        return harness_failf(rank, "out of memory");
    int rc = 0;
    hoop_status_t st;
    for (size_t k = 0; !rc && k < sizeof(coll_counts) / sizeof(coll_counts[0]); k++) {
        size_t n = coll_counts[k];
        struct sum_ctx sc = {.size = size};
        if ((rc = allreduce_both_ways(comm, rank, size, a, b, n)))
            break;
        /* reduce_scatter: n elements per rank */
        for (size_t i = 0; i < n * (size_t)size; i++)
            a[i] = val(rank, i);
        if ((st = hoop_reduce_scatter(comm, a, b, n, HOOP_I32, HOOP_SUM)))
            return harness_fail(rank, "reduce_scatter", st);
        sc.off = (size_t)rank * n;
        if ((rc = check_i32(rank, "reduce_scatter", n, b, want_sum, &sc)))
            break;
        /* allgather: n elements from each */
        for (size_t i = 0; i < n; i++)
            a[i] = val(rank, i);
        if ((st = hoop_allgather(comm, a, b, n, HOOP_I32)))
            return harness_fail(rank, "allgather", st);
        for (int r = 0; !rc && r < size; r++) {
            struct rank_ctx c = {.rank = r};
            rc = check_i32(rank, "allgather", n, b + (size_t)r * n, want_rank, &c);
        }
        /* broadcast from the last rank, in place */
        int root = size - 1;
        for (size_t i = 0; i < n; i++)
            a[i] = rank == root ? val(root, i) : -1;
        if (!rc && (st = hoop_broadcast(comm, a, a, n, HOOP_I32, root)))
            return harness_fail(rank, "broadcast", st);
        struct rank_ctx rc_root = {.rank = root};
        if (!rc)
            rc = check_i32(rank, "broadcast", n, a, want_rank, &rc_root);
        /* reduce to rank 1 (on another host where the ring is mixed) */
        int rroot = 1 % size;
        for (size_t i = 0; i < n; i++)
            a[i] = val(rank, i);
        sc.off = 0;
        if (!rc && (st = hoop_reduce(comm, a, b, n, HOOP_I32, HOOP_SUM, rroot)))
            return harness_fail(rank, "reduce", st);
        if (!rc && rank == rroot)
            rc = check_i32(rank, "reduce", n, b, want_sum, &sc);
        /* reduce_scatterv and allgatherv with blocks of different sizes:
         * rank r's block is n >> r elements (plus r), after the others'. */
        size_t cnt[8], dsp[8], tot = 0;
        for (int r = 0; r < size; r++) {
            cnt[r] = (n >> (r % 8)) + (size_t)r;
            dsp[r] = tot;
            tot += cnt[r];
        }
        for (size_t i = 0; i < tot; i++)
            a[i] = val(rank, i);
        if (!rc && (st = hoop_reduce_scatterv(comm, a, b, cnt, HOOP_I32, HOOP_SUM)))
            return harness_fail(rank, "reduce_scatterv", st);
        sc.off = dsp[rank];
        if (!rc)
            rc = check_i32(rank, "reduce_scatterv", cnt[rank], b, want_sum, &sc);
        sc.off = 0;
        for (size_t i = 0; i < cnt[rank]; i++)
            a[i] = val(rank, i);
        if (!rc && (st = hoop_allgatherv(comm, a, b, cnt, dsp, HOOP_I32)))
            return harness_fail(rank, "allgatherv", st);
        for (int r = 0; !rc && r < size; r++) {
            struct rank_ctx c = {.rank = r};
            rc = check_i32(rank, "allgatherv", cnt[r], b + dsp[r], want_rank, &c);
        }
        /* alltoall of small blocks (a 16th of n, at least 1) */
        size_t m = n / 16 + 1;
        for (int r = 0; r < size; r++)
            for (size_t i = 0; i < m; i++)
                a[(size_t)r * m + i] = val(rank, (size_t)r * 1000003u + i);
        if (!rc && (st = hoop_alltoall(comm, a, b, m, HOOP_I32)))
            return harness_fail(rank, "alltoall", st);
        for (int r = 0; !rc && r < size; r++) {
            struct rank_ctx c = {.rank = r, .off = (size_t)rank * 1000003u};
            rc = check_i32(rank, "alltoall", m, b + (size_t)r * m, want_rank, &c);
        }
        if (!rc && (st = hoop_barrier(comm)))
            return harness_fail(rank, "barrier", st);
    }
    free(a);
    free(b);
    return rc;
}

static void run_collectives(int n)
{
    setenv("HOOP_SHM", "1", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = 128 * 1024;
    char report[8192];
    bool ok = harness_run(n, &base, every_collective, "shm (every ring link", 240.0, report,
                          sizeof(report));
    cr_assert(ok, "every collective over shared memory at N = %d:\n%s", n, report);
}

Test(shm, every_collective_exact_n1, .timeout = 300) { run_collectives(1); }
Test(shm, every_collective_exact_n2, .timeout = 300) { run_collectives(2); }
Test(shm, every_collective_exact_n3, .timeout = 300) { run_collectives(3); }
Test(shm, every_collective_exact_n4, .timeout = 300) { run_collectives(4); }
Test(shm, every_collective_exact_n5, .timeout = 300) { run_collectives(5); }
Test(shm, every_collective_exact_n8, .timeout = 300) { run_collectives(8); }

/* HOOP_SHM=0: same-host ranks go over TCP, and the name says so. */
/* With the default chunk (1 MiB) an allreduce whose segments are at most
 * four chunks runs in chunks of 256 KiB over a ring of shared memory
 * (ring/allreduce.c), a longer one in chunks of 1 MiB: both sides of every
 * link must cut alike. Segments of 1 MiB and a few elements (256 KiB
 * chunks and a short one), exactly 4 MiB (the last size cut small) and one
 * element more (cut in MiB again), i32 sums checked element by element,
 * out of place and in place. */
static const size_t mid_counts[] = {3 * 262144 + 5, 3 * 1048576, 3 * 1048576 + 3};

static int mid_sizes(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    if (!strstr(hoop_comm_transport(comm), "shm (every ring link"))
        return harness_failf(rank, "hoop_comm_transport() is \"%s\"", hoop_comm_transport(comm));
    size_t maxn = mid_counts[2];
    int32_t *a = malloc(maxn * sizeof(*a)), *b = malloc(maxn * sizeof(*b));
    int rc = !a || !b ? harness_failf(rank, "out of memory") : 0;
    for (size_t k = 0; !rc && k < sizeof(mid_counts) / sizeof(mid_counts[0]); k++)
        rc = allreduce_both_ways(comm, rank, size, a, b, mid_counts[k]);
    free(a);
    free(b);
    return rc;
}

Test(shm, mid_sizes_cut_alike_around_the_small_chunk_limit, .timeout = 300)
{
    setenv("HOOP_SHM", "1", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    char report[8192];
    bool ok = harness_run(3, &base, mid_sizes, NULL, 240.0, report, sizeof(report));
    cr_assert(ok, "allreduces of segments around 4 MiB over shared memory at N = 3:\n%s", report);
}

/* HOOP_SHM_CHUNK_BYTES=0 on every rank: the same sizes in the ring's own
 * chunks, still exact. */
Test(shm, mid_sizes_exact_with_the_small_chunk_off, .timeout = 300)
{
    setenv("HOOP_SHM", "1", 1);
    setenv("HOOP_SHM_CHUNK_BYTES", "0", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    char report[8192];
    bool ok = harness_run(3, &base, mid_sizes, NULL, 240.0, report, sizeof(report));
    unsetenv("HOOP_SHM_CHUNK_BYTES");
    cr_assert(ok, "HOOP_SHM_CHUNK_BYTES=0, segments around 4 MiB at N = 3:\n%s", report);
}

/* One rank of three with HOOP_SHM_CHUNK_BYTES=0 cuts a mid-size allreduce
 * in other chunks than its neighbours: the first chunk's frame tells them,
 * no rank returns OK, and every rank's sentence names the setting. */
/* A raw rank's communicator over shared memory, with HOOP_SHM_CHUNK_BYTES
 * set to shm_chunk (NULL: the default). */
static hoop_status_t init_shm_chunk(int rank, int size, int port, const char *shm_chunk,
                                    hoop_comm_t **comm)
{
    setenv("HOOP_SHM", "1", 1);
    if (shm_chunk)
        setenv("HOOP_SHM_CHUNK_BYTES", shm_chunk, 1);
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    return hoop_comm_init(comm, &cfg);
}

static int chunk_odd_rank(int rank, int size, int port, void *arg)
{
    (void)arg;
    hoop_comm_t *comm;
    hoop_status_t st = init_shm_chunk(rank, size, port, rank == 1 ? "0" : NULL, &comm);
    if (st != HOOP_OK)
        return harness_fail(rank, "hoop_comm_init", st);
    size_t n = mid_counts[0];
    int32_t *a = calloc(n, sizeof(*a));
    if (!a) {
        hoop_comm_destroy(comm);
        return harness_failf(rank, "out of memory");
    }
    st = hoop_allreduce(comm, a, a, n, HOOP_I32, HOOP_SUM);
    char why[1024];
    snprintf(why, sizeof(why), "%s", hoop_last_error());
    free(a);
    hoop_comm_destroy(comm);
    if (st == HOOP_OK)
        return harness_failf(rank, "the allreduce returned OK with rank 1 cutting otherwise");
    /* Rank 1's successor sees a chunk of another length, and every rank
     * gets that sentence. */
    if (!strstr(why, "HOOP_SHM_CHUNK_BYTES must be the same"))
        return harness_failf(rank, "the error \"%s\" does not name the chunks", why);
    return 0;
}

Test(shm, a_rank_cutting_other_chunks_is_told_on_every_rank, .timeout = 120)
{
    char report[8192];
    bool ok = harness_run_raw(3, chunk_odd_rank, NULL, 60.0, report, sizeof(report));
    cr_assert(ok, "%s", report);
}

/* A chunk below the ring's least is refused at init, naming the setting. */
static int tiny_chunk_rank(int rank, int size, int port, void *arg)
{
    (void)arg;
    hoop_comm_t *comm;
    hoop_status_t st = init_shm_chunk(rank, size, port, "32", &comm);
    if (st == HOOP_OK) {
        hoop_comm_destroy(comm);
        return harness_failf(rank, "hoop_comm_init took HOOP_SHM_CHUNK_BYTES=32");
    }
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), "HOOP_SHM_CHUNK_BYTES=32"))
        return harness_failf(rank, "status %d, \"%s\"", st, hoop_last_error());
    return 0;
}

Test(shm, a_tiny_shm_chunk_is_refused, .timeout = 60)
{
    char report[8192];
    bool ok = harness_run_raw(2, tiny_chunk_rank, NULL, 30.0, report, sizeof(report));
    cr_assert(ok, "%s", report);
}

Test(shm, off_means_tcp_between_same_host_ranks, .timeout = 300)
{
    setenv("HOOP_SHM", "0", 1);
    setenv("HOOP_TRANSPORT", "tcp", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = 128 * 1024;
    char report[8192];
    bool ok = harness_run(3, &base, every_collective, "tcp/", 240.0, report, sizeof(report));
    cr_assert(ok, "HOOP_SHM=0:\n%s", report);
    cr_assert(!strstr(report, "shm"), "%s", report);
}

/* Raw ranks that set their own HOOP_SHM (and, for one, another host)
 * before they form the communicator. */
struct mix_job {
    const char *shm[8];  /* HOOP_SHM per rank */
    int host[8];         /* per rank: 0, this host, or k, the emulated host k */
    int own_ipc;         /* this rank gets an IPC namespace of its own (-1: none) */
    const char *want;    /* in the transport's description, or in the error */
    int expect_fail;
};

static int mix_rank(int rank, int size, int port, void *arg)
{
    struct mix_job *j = arg;
    int hrc = harness_be_host(rank, j->host[rank]);
    if (hrc)
        return hrc;
    if (j->own_ipc == rank && unshare(CLONE_NEWIPC) != 0)
        return 77;
    setenv("HOOP_SHM", j->shm[rank], 1);
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    cfg.chunk_bytes = 128 * 1024;
    hoop_comm_t *comm;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (j->expect_fail) {
        if (st == HOOP_OK) {
            hoop_comm_destroy(comm);
            return harness_failf(rank, "hoop_comm_init succeeded with HOOP_SHM=%s",
                                 j->shm[rank]);
        }
        if (!strstr(hoop_last_error(), j->want))
            return harness_failf(rank, "the error \"%s\" does not say \"%s\"", hoop_last_error(),
                                 j->want);
        return 0;
    }
    if (st != HOOP_OK)
        return harness_fail(rank, "hoop_comm_init", st);
    int rc = every_collective(comm, rank, size, (void *)j->want);
    hoop_comm_destroy(comm);
    return rc;
}

static void run_mix(struct mix_job *tmpl, int n)
{
    struct mix_job *j = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0);
    cr_assert(j != MAP_FAILED);
    *j = *tmpl;
    char report[8192];
    bool ok = harness_run_raw(n, mix_rank, j, 240.0, report, sizeof(report));
    int apart = 0;
    for (int r = 0; r < n; r++)
        apart |= j->host[r];
    if (!ok && (apart || j->own_ipc >= 0) && strstr(report, "exit code 77"))
        cr_skip_test("this test cannot make a UTS or IPC namespace (it needs CAP_SYS_ADMIN):\n%s",
                     report);
    cr_assert(ok, "%s", report);
    munmap(j, 4096);
}

/* One rank of four refuses shared memory: its two links are TCP, the
 * others shared memory, in one ring, every collective exact. */
Test(shm, one_rank_refusing_makes_a_mixed_ring, .timeout = 300)
{
    struct mix_job j = {.shm = {"auto", "auto", "0", "auto"}, .own_ipc = -1,
                        .want = "shm on ring links 0>1 3>0"};
    run_mix(&j, 4);
}

/* One rank of four on another host (its own UTS namespace and host name):
 * the ring goes host by host (0 2 3, then 1), so the network is crossed
 * once each way (3>1, 1>0) and the other links are shared memory. */
Test(shm, a_rank_on_another_host_makes_a_mixed_ring, .timeout = 300)
{
    struct mix_job j = {.shm = {"auto", "auto", "auto", "auto"}, .host = {0, 1, 0, 0},
                        .own_ipc = -1, .want = "shm on ring links 0>2 2>3"};
    run_mix(&j, 4);
}

/* Two hosts of two ranks, the ranks given alternately (as torchrun or srun
 * may): the ring still goes host by host (0 2, then 1 3), each host's pair
 * over shared memory, and every collective's results land by rank. */
Test(shm, interleaved_hosts_ring_follows_the_hosts, .timeout = 300)
{
    struct mix_job j = {.shm = {"auto", "auto", "auto", "auto"}, .host = {0, 1, 0, 1},
                        .own_ipc = -1, .want = "shm on ring links 0>2 1>3"};
    run_mix(&j, 4);
}

/* Three hosts of two, interleaved: ring 0 3 1 4 2 5. */
Test(shm, three_interleaved_hosts_ring_follows_the_hosts, .timeout = 300)
{
    struct mix_job j = {.shm = {"auto", "auto", "auto", "auto", "auto", "auto"},
                        .host = {0, 1, 2, 0, 1, 2}, .own_ipc = -1,
                        .want = "shm on ring links 0>3 1>4 2>5"};
    run_mix(&j, 6);
}

/* A rank in an IPC namespace of its own (a container's default) still
 * shares memory with the others: a memfd needs no System V IPC and no
 * /dev/shm, and the segment travels over a socket. */
Test(shm, a_rank_in_its_own_ipc_namespace_still_uses_shm, .timeout = 300)
{
    struct mix_job j = {.shm = {"1", "1", "1"}, .own_ipc = 1,
                        .want = "shm (every ring link"};
    run_mix(&j, 3);
}

/* HOOP_SHM=1 against HOOP_SHM=0 on one host: both are told. */
Test(shm, insisting_against_refusing_fails_on_both, .timeout = 120)
{
    struct mix_job j = {.shm = {"1", "0"}, .own_ipc = -1,
                        .want = "set HOOP_SHM the same", .expect_fail = 1};
    run_mix(&j, 2);
}

/* ---- a rank killed mid-allreduce --------------------------------------- */

/* What a job of hoop's could leave behind: a file of its name in /dev/shm
 * (hoop's segments are memfds and should leave none), or a rank's listener
 * socket ("@hoop-shm.<pid>." in /proc/net/unix) still bound after the rank
 * is gone. Only this job's pids are looked for, so that tests running beside
 * this one do not count. */
static int hoop_leftovers(const harness_job_t *job, int nranks)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            n += strstr(e->d_name, "hoop") != NULL;
        closedir(d);
    }
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f)
        return n;
    char line[512];
    while (fgets(line, sizeof(line), f))
        for (int r = 0; r < nranks; r++) {
            char want[64];
            snprintf(want, sizeof(want), "@hoop-shm.%d.", (int)job->procs[r].pid);
            n += strstr(line, want) != NULL;
        }
    fclose(f);
    return n;
}

static int killed_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    size_t n = 8u << 20;
    float *a = malloc(n * sizeof(*a));
    if (!a)
        return harness_failf(rank, "out of memory");
    for (size_t i = 0; i < n; i++)
        a[i] = 1.0f;
    for (int it = 0; it < 1000; it++) {
        if (rank == 1 && it == 3) {
            /* In the middle of the next call, from another thread's view:
             * die while the others wait on this rank's slots. */
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            raise(SIGKILL);
        }
        hoop_status_t st = hoop_allreduce(comm, a, a, n, HOOP_F32, HOOP_SUM);
        if (st != HOOP_OK) {
            const char *why = hoop_last_error();
            free(a);
            if (!strstr(why, "rank 1"))
                return harness_failf(rank, "the failure does not name rank 1: %s", why);
            fprintf(stderr, "rank %d: %s\n", rank, why);
            return 0;
        }
    }
    free(a);
    return harness_failf(rank, "every allreduce succeeded although rank 1 was killed");
}

Test(shm, sigkill_mid_allreduce_is_named_and_leaves_nothing, .timeout = 180)
{
    setenv("HOOP_SHM", "1", 1);
    harness_job_t job;
    cr_assert(harness_job_init(&job));
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = 60.0;
    for (int r = 0; r < 3; r++)
        cr_assert(harness_spawn_rank(&job, r, 3, &base, killed_rank, NULL) > 0);
    double t0 = harness_now();
    harness_wait(&job, 120.0, 30.0);
    double took = harness_since(t0);
    cr_assert_eq(job.procs[1].signal, SIGKILL, "%s", job.report);
    for (int r = 0; r < 3; r += 2)
        cr_assert(job.procs[r].done && !job.procs[r].hung && job.procs[r].exit_code == 0,
                  "rank %d:\n%s", r, job.report);
    cr_assert(took < 40.0, "the survivors took %.1f s (HOOP_TIMEOUT is 60 s)", took);
    cr_assert_eq(hoop_leftovers(&job, 3), 0,
                 "the job left a file in /dev/shm or a listener socket bound");
}
