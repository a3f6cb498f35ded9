/* mixed.h - the transport chosen per link: shared memory (transport/shm)
 * to the ranks of this host that can take it, the configured transport
 * (tcp, ofi, verbs) to the others, behind one ops table, so that the
 * schedules see one transport.
 *
 * Each rank's handle starts with a block saying whether it takes shared
 * memory (HOOP_SHM), its host and its network namespace (the shm
 * transport's socket lives in it), and the shm transport's handle; then the
 * configured transport's handle. Both ends of a link work its kind out
 * alike from the two blocks, so no link is shm on one side and tcp on the
 * other; HOOP_SHM=1 against 0 on one host is told to both. */
#ifndef HOOP_RING_MIXED_H
#define HOOP_RING_MIXED_H

#include "transport/transport.h"

#include <stddef.h>
#include <stdint.h>

/* The bytes the block takes before the configured transport's handle. */
#define HOOP_MIXED_BLOCK_MAX 32

struct hoop_ring;

/* Create the configured transport `net` and, unless HOOP_SHM=0 (or it
 * cannot work here, said in the log), the shm transport; *ops is the
 * composite's table, named as net (valid until destroy). */
hoop_status_t hoop_mixed_create(const struct hoop_transport_ops *net,
                                const struct hoop_tp_params *p, void **tp,
                                const struct hoop_transport_ops **ops);
/* The ring whose table (r->peers) gives each rank's handle to accept. */
void hoop_mixed_bind(void *tp, const struct hoop_ring *r);
/* The configured transport's own transport object inside the table's
 * (for tests that look into it: its registrations, its settings). */
void *hoop_mixed_net(void *tp);
/* A connection's own object in the configured transport, or NULL where
 * the link is shared memory (for tests, as above). */
void *hoop_mixed_conn_net(void *conn);
/* 1 when the link between the two handles' ranks is shared memory. */
int hoop_mixed_link_is_shm(const uint8_t *a, uint16_t alen, const uint8_t *b, uint16_t blen);
/* How many of r's ring links are shared memory, and of how many (1 for
 * two ranks): the same on every rank, from the table. links, when not
 * NULL, gets them in words ("0>1 3>0"). */
int hoop_mixed_shm_links(const struct hoop_ring *r, int *nlinks, char *links, size_t cap);

#endif
