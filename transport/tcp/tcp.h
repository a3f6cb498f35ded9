/* tcp.h - the TCP transport's objects, shared by its connection set-up
 * (tcp.c), its request queues (queue.c) and its two engines, io_uring
 * (uring.c) and poll (poll.c), which differ only in how they move
 * bytes and wait. */
#ifndef HOOP_TRANSPORT_TCP_H
#define HOOP_TRANSPORT_TCP_H

#include "common/listener.h"
#include "common/wire.h"
#include "transport/transport.h"
#include "transport/watch.h"

#include <sys/socket.h>
#include <sys/uio.h>

enum { TCP_TX = 0, TCP_RX = 1 };

struct tcp_dir {
    struct hoop_tp_req *head, *tail; /* queued; head is on the wire when busy */
    int busy;                        /* the engine is moving head's bytes */
    /* The io_uring engine's transfer in the kernel: one sendmsg or recvmsg
     * of the rest of the header and the payload. */
    struct msghdr mh;
    struct iovec iov[2];
    /* Zero-copy sends (HOOP_TCP_ZEROCOPY): requests whose bytes are all
     * queued but whose pages the kernel may still read, oldest first; a
     * request is done once zc_done reaches its `lent` mark. */
    struct hoop_tp_req *lent_head, *lent_tail;
    uint64_t zc_sent; /* zero-copy transfers started that hold pages */
    uint64_t zc_done; /* ... whose pages the kernel has given back */
};

/* Aligned so the low bits of its address can carry the direction and the
 * part of a transfer in an io_uring user_data. */
struct tcp_sock {
    int fd;
    int err; /* first error seen; later requests fail with it at once */
    struct tcp_dir dir[2];
} __attribute__((aligned(8)));

struct tcp_conn {
    struct tcp_tp *tp;
    struct tcp_conn *next_conn;
    int peer;
    int nsocks;
    unsigned rr[2]; /* next socket per direction: chunks are striped */
    struct tcp_sock socks[];
};

/* A connection that arrived while another was being accepted. */
struct tcp_stashed {
    struct tcp_stashed *next;
    int fd;
    int rank;
    int channel;
    int index;
};

struct tcp_tp;

/* How bytes move. The queues (queue.c) call start() when a head needs
 * the wire and learn every transfer's result from tcp_queue_moved(), so
 * that ordering, striping, errors and completion are the same whichever
 * engine runs. */
struct tcp_engine {
    const char *name;  /* describe() says "tcp/<name>" */
    int nonblocking;   /* data sockets get O_NONBLOCK */
    int (*init)(struct tcp_tp *tp); /* 0 or -errno */
    void (*fini)(struct tcp_tp *tp);
    /* Begin moving the rest of s->dir[d].head; 0 or -errno. */
    int (*start)(struct tcp_tp *tp, struct tcp_sock *s, int d);
    /* The transport's progress(): at least one completion, or the deadline. */
    int (*progress)(struct tcp_tp *tp, uint64_t deadline_ns);
    /* Every socket is shut: return once the kernel holds no buffer. */
    void (*drain)(struct tcp_tp *tp);
    /* tp->watch has a new entry (at the end). 0 or -errno. */
    int (*watch)(struct tcp_tp *tp);
};

/* HOOP_URING_SETUP: how the io_uring of the TCP engine is made. */
enum tcp_uring_setup {
    TCP_URING_COOP,   /* COOP_TASKRUN | TASKRUN_FLAG: completions run at the next entry */
    TCP_URING_PLAIN,  /* no flags: completions run by an interrupting task work */
    TCP_URING_DEFER,  /* SINGLE_ISSUER | DEFER_TASKRUN: only when the waiter asks */
    TCP_URING_SQPOLL, /* a kernel thread polls the submission queue */
};

extern const struct tcp_engine tcp_engine_uring;
extern const struct tcp_engine tcp_engine_poll;

struct tcp_tp {
    const struct tcp_engine *eng;
    void *eng_state;
    unsigned inflight; /* busy directions, over every socket */
    unsigned lent_out; /* zero-copy transfers whose pages the kernel still holds */
    unsigned uring_entries;
    int uring_setup;   /* HOOP_URING_SETUP (enum tcp_uring_setup) */
    int uring_submit_each; /* HOOP_URING_SUBMIT=each: into the kernel at once, not at progress */
    int rank;
    int size;
    uint8_t token[HOOP_TOKEN_BYTES];
    int lfd;
    struct hoop_listener listener; /* over lfd: the connections whose hello is still due */
    int nsocks;        /* HOOP_TCP_NSOCKS; 0 = auto (tcp_auto_nsocks) */
    int sockbuf;
    uint64_t spin_ns;  /* busy-poll this long before sleeping (set_busy_poll) */
    int spin_yield;    /* sched_yield() between the polls */
    size_t zc_min;     /* HOOP_TCP_ZEROCOPY: sends of this many bytes or more lend their pages; 0 off */
    char hostname[256]; /* this host's name, to tell neighbours on it from others */
    unsigned user_timeout_ms;
    char cc[16];       /* HOOP_TCP_CONGESTION; empty: the system's */
    struct hoop_watch watch; /* descriptors whose reading wakes progress() */
    struct tcp_conn *conns;
    struct tcp_stashed *stash;
    int nstash;
    uint16_t *claimed; /* [rank][channel]: a bit for each socket whose hello has come */
    char desc[48];
};

int tcp_isend(void *conn, struct hoop_tp_req *req);
int tcp_irecv(void *conn, struct hoop_tp_req *req);
int tcp_progress(void *tp, uint64_t deadline_ns);
int tcp_watch(void *tp, int fd);
void tcp_cancel(void *tp);
/* Before connection c is freed: when requests are still queued on it (a
 * receive left waiting for its peer), shut its sockets, let the engine give
 * back what the kernel holds of them (5 s at most) and end them with
 * -ECANCELED, so that nothing refers to c or to their buffers afterwards. */
void tcp_conn_quiesce(struct tcp_tp *tp, struct tcp_conn *c);
/* An engine's report on a busy direction: res bytes moved, 0 when the peer
 * closed, or -errno (-EAGAIN and -EINTR: nothing moved, try again).
 * Returns the number of requests it completed. */
int tcp_queue_moved(struct tcp_tp *tp, struct tcp_sock *s, int d, long res);

/* The engine's zero-copy send on s now holds the head's pages (call before
 * tcp_queue_moved for that transfer), and one such transfer gave them back;
 * the latter returns the number of requests that completed with it. */
void tcp_queue_lent(struct tcp_tp *tp, struct tcp_sock *s);
int tcp_queue_returned(struct tcp_tp *tp, struct tcp_sock *s);

#endif
