/* tcp.h - the TCP transport's objects, shared by its connection set-up
 * (tcp.c) and its io_uring engine (tcp_uring.c). */
#ifndef HOOP_TRANSPORT_TCP_H
#define HOOP_TRANSPORT_TCP_H

#include "common/wire.h"
#include "transport/transport.h"

#include <liburing.h>

enum { TCP_TX = 0, TCP_RX = 1 };

struct tcp_dir {
    struct hoop_tp_req *head, *tail; /* queued; head is on the wire when busy */
    int busy;                        /* an SQE for head is in the kernel */
};

/* Aligned so the low bit of its address can carry the direction in
 * user_data. */
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

struct tcp_tp {
    struct io_uring ring;
    int ring_ok;
    unsigned inflight; /* SQEs whose CQE has not been reaped */
    int rank;
    int size;
    uint8_t token[HOOP_TOKEN_BYTES];
    int lfd;
    int nsocks;
    int sockbuf;
    unsigned user_timeout_ms;
    struct tcp_conn *conns;
    char desc[48];
};

hoop_status_t tcp_uring_init(struct tcp_tp *tp, unsigned entries);
int tcp_isend(void *conn, struct hoop_tp_req *req);
int tcp_irecv(void *conn, struct hoop_tp_req *req);
int tcp_progress(void *tp, uint64_t deadline_ns);
void tcp_cancel(void *tp);

#endif
