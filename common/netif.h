/* netif.h - which local address a rank advertises to the others.
 *
 * Without HOOP_SOCKET_IFNAME: the local end of the rank's connection to the
 * root, i.e. the interface that routes to rank 0. With it: the first address
 * of an interface the list selects. The list is comma-separated: a name
 * prefix (`eth` takes eth0, eth1), an exact name (`=eth0`), a CIDR range
 * (`10.0.0.0/8`, `fd00::/64`) or one address; `^` before an item excludes
 * what it matches, and `^` before the first item excludes every item, as
 * NCCL_SOCKET_IFNAME does (`^docker,lo`). Items are tried in their order.
 * A list of exclusions only keeps the route rule among what it leaves.
 *
 * When the root is not a loopback address (the job may span hosts),
 * loopback and link-local addresses are never advertised; IPv6 link-local
 * ones never are, since the handle has no room for their scope. */
#ifndef HOOP_COMMON_NETIF_H
#define HOOP_COMMON_NETIF_H

#include "hoop.h"

#include <net/if.h>
#include <sys/socket.h>

struct hoop_netif {
    char name[IF_NAMESIZE];
    struct sockaddr_storage addr;
    unsigned flags; /* IFF_UP, ... */
};

/* Every IPv4 and IPv6 address of this host's interfaces (malloc'd). */
hoop_status_t hoop_netif_list(struct hoop_netif **out, int *n);

int hoop_netif_is_loopback(const struct sockaddr *sa);
int hoop_netif_is_link_local(const struct sockaddr *sa);

/* The choice itself, on a given list of interfaces: spec is the value of
 * HOOP_SOCKET_IFNAME ("" or NULL for the route rule), root the root's
 * address, route the local end of the connection to it. On success *out
 * is the address (port 0) and why says which interface and by what rule.
 * HOOP_ERR_INVALID with a sentence naming HOOP_SOCKET_IFNAME otherwise. */
hoop_status_t hoop_netif_choose(const char *spec, const struct hoop_netif *ifs, int n,
                                const struct sockaddr *root, const struct sockaddr *route,
                                struct sockaddr_storage *out, char *why, size_t whylen);

/* hoop_netif_choose on this host's interfaces and HOOP_SOCKET_IFNAME, with
 * the choice in the log. */
hoop_status_t hoop_netif_advertise(int rank, const struct sockaddr *root,
                                   const struct sockaddr *route, struct sockaddr_storage *out,
                                   socklen_t *out_len);

#endif
