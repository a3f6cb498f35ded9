/* bootstrap.h - forming a job: who am I, where is the root, who are the
 * others.
 *
 * Rank 0 listens at the root address; every other rank connects (with retry
 * and backoff), presents a JOIN hello with the job token and its info (host
 * identity, pid, transport handle). The root checks token, size and rank
 * (refusing strangers, duplicates and garbage with a REFUSE that says why),
 * and once all have joined sends everyone the TABLE of all ranks' info. The
 * connections to the root stay open for the life of the communicator. */
#ifndef HOOP_BOOTSTRAP_H
#define HOOP_BOOTSTRAP_H

#include "common/sock.h"
#include "common/wire.h"
#include "hoop.h"

#include <stdint.h>
#include <sys/socket.h>

#define HOOP_HANDLE_MAX 160
#define HOOP_HOSTNAME_MAX 64

struct hoop_peer {
    uint64_t host_id; /* equal on ranks of the same machine */
    uint32_t pid;
    char host[HOOP_HOSTNAME_MAX + 1];
    uint16_t handle_len;
    uint8_t handle[HOOP_HANDLE_MAX];
};

struct hoop_boot_cfg {
    int rank;
    int size;
    int local_rank; /* as the launcher says, or -1 */
    char root_host[HOOP_HOST_MAX];
    uint16_t root_port;
    uint8_t token[HOOP_TOKEN_BYTES];
    double timeout_s;
    const char *launcher; /* where rank and size came from, see hoop_comm_launcher */
    /* Rank 0: serve on this bound listener instead of opening one at
     * root_host:root_port (hoop_comm_split's groups). The caller keeps it
     * and closes it. */
    int has_listener;
    int listener_fd;
};

/* Resolve rank, size, root, token and timeout from cfg (set fields) and the
 * environment (the rest). No variables at all: a one-rank job. Partial or
 * contradictory settings are HOOP_ERR_INVALID with what was found. */
hoop_status_t hoop_boot_cfg_resolve(const hoop_config_t *cfg, struct hoop_boot_cfg *out);

/* Fill this rank's transport handle, given the local address by which this
 * rank reaches the others (the root connection's local end). */
typedef hoop_status_t (*hoop_boot_handle_fn)(void *ctx, const struct sockaddr *local,
                                             socklen_t len, uint8_t *handle, uint16_t *handle_len);

struct hoop_bootstrap {
    int rank;
    int size;
    uint64_t comm_id;
    uint8_t token[HOOP_TOKEN_BYTES];
    int root_fd;             /* ranks > 0: connection to the root */
    int *fds;                /* rank 0: connection of each rank (fds[0] = -1) */
    struct hoop_peer *peers; /* the table, size entries */
};

/* Meet the others. On success bs->peers holds every rank's info. */
hoop_status_t hoop_bootstrap_init(struct hoop_bootstrap *bs, const struct hoop_boot_cfg *cfg,
                                  hoop_boot_handle_fn handle_fn, void *ctx);
void hoop_bootstrap_fini(struct hoop_bootstrap *bs);

/* After a failure the connections to the root carry notices: a rank tells
 * the root what it saw (HOOP_HELLO_NOTICE), and the root, once it has heard
 * enough, tells every rank who failed (HOOP_HELLO_VERDICT). A rank that
 * leaves in order says so first (HOOP_HELLO_GOODBYE, status 0), so that a
 * connection closing without it means a death. A notice or verdict names
 * the collective it is about by its number (the frame's seq): a rank still
 * finishing an earlier one keeps it for the call it is about. */
#define HOOP_NOTICE_MAX 1024
#define HOOP_NOTICE_NOBODY (-1)

struct hoop_notice {
    int status;  /* hoop_status_t */
    int culprit; /* the rank to blame, or HOOP_NOTICE_NOBODY */
    uint64_t seq; /* the collective it is about; 0: whichever runs now */
    char why[HOOP_NOTICE_MAX + 1];
};

/* 0 or -errno. */
int hoop_notice_write(const struct hoop_bootstrap *bs, int fd, int kind, const struct hoop_notice *n,
                      uint64_t deadline_ns);
/* One message from fd, of kind *kind (0: a notice, verdict or goodbye,
 * whichever comes; *kind is then set to it): 0, -EPIPE when the other end
 * has closed, -EPROTO for anything else (wrong kind, token or length), or
 * -errno. */
int hoop_notice_read(const struct hoop_bootstrap *bs, int fd, int *kind, struct hoop_notice *n,
                     uint64_t deadline_ns);

/* Internal to bootstrap/: this process's identity, the info codec, and the
 * root's side of the protocol. */
void hoop_peer_self(struct hoop_peer *p);
void hoop_peer_encode(struct hoop_buf *b, const struct hoop_peer *p);
int hoop_peer_decode(struct hoop_buf *b, struct hoop_peer *p);
/* Upper bound of a REFUSE's sentence (either way). */
#define HOOP_REFUSE_MAX 1024
/* Upper bound of one encoded peer, to bound a table before reading it. */
#define HOOP_PEER_WIRE_MAX (8 + 4 + 1 + HOOP_HOSTNAME_MAX + 2 + HOOP_HANDLE_MAX)

hoop_status_t hoop_bootstrap_root(struct hoop_bootstrap *bs, const struct hoop_boot_cfg *cfg,
                                  hoop_boot_handle_fn handle_fn, void *ctx);

#endif
