/* netif.c - see netif.h. */
#include "common/netif.h"
#include "common/log.h"
#include "common/param.h"
#include "common/sock.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NETIF_ITEMS_MAX 32

enum netif_kind { NETIF_PREFIX, NETIF_EXACT, NETIF_CIDR };

struct netif_item {
    int exclude;
    enum netif_kind kind;
    char name[IF_NAMESIZE];
    int family;
    uint8_t net[16];
    int prefix;
};

static const uint8_t *addr_bytes(const struct sockaddr *sa, int *len)
{
    if (sa->sa_family == AF_INET) {
        *len = 4;
        return (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    }
    if (sa->sa_family == AF_INET6) {
        *len = 16;
        return ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    }
    *len = 0;
    return NULL;
}

int hoop_netif_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

int hoop_netif_is_link_local(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 16) == 0xa9fe;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return 0;
}

static int addr_unspecified(const struct sockaddr *sa)
{
    int len;
    const uint8_t *b = addr_bytes(sa, &len);
    for (int i = 0; i < len; i++)
        if (b[i])
            return 0;
    return 1;
}

static int addr_usable(const struct sockaddr *sa, int root_loopback)
{
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
        return 0;
    if (addr_unspecified(sa))
        return 0;
    if (sa->sa_family == AF_INET6 && hoop_netif_is_link_local(sa))
        return 0;
    if (!root_loopback && (hoop_netif_is_loopback(sa) || hoop_netif_is_link_local(sa)))
        return 0;
    return 1;
}

static int addr_equal(const struct sockaddr *a, const struct sockaddr *b)
{
    int la, lb;
    const uint8_t *pa = addr_bytes(a, &la), *pb = addr_bytes(b, &lb);
    return la && la == lb && memcmp(pa, pb, (size_t)la) == 0;
}

static hoop_status_t netif_parse(const char *spec, struct netif_item *items, int *nitems)
{
    char buf[1024];
    if (strlen(spec) >= sizeof(buf))
        return hoop_error(HOOP_ERR_INVALID, "HOOP_SOCKET_IFNAME is longer than %zu characters",
                          sizeof(buf) - 1);
    snprintf(buf, sizeof(buf), "%s", spec);
    int n = 0, all_excluded = -1;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ' || *tok == '\t')
            tok++;
        size_t tl = strlen(tok);
        while (tl && (tok[tl - 1] == ' ' || tok[tl - 1] == '\t'))
            tok[--tl] = '\0';
        if (!*tok)
            continue;
        if (n == NETIF_ITEMS_MAX)
            return hoop_error(HOOP_ERR_INVALID, "HOOP_SOCKET_IFNAME=%s has more than %d items",
                              spec, NETIF_ITEMS_MAX);
        struct netif_item *it = &items[n];
        memset(it, 0, sizeof(*it));
        it->exclude = *tok == '^';
        if (it->exclude)
            tok++;
        if (all_excluded < 0)
            all_excluded = it->exclude;
        it->exclude |= all_excluded;
        const char *item = tok;
        char *slash = strchr(tok, '/');
        if (slash)
            *slash = '\0';
        uint8_t a[16];
        if (inet_pton(AF_INET, tok, a) == 1 || inet_pton(AF_INET6, tok, a) == 1) {
            it->kind = NETIF_CIDR;
            it->family = strchr(tok, ':') ? AF_INET6 : AF_INET;
            int bits = it->family == AF_INET6 ? 128 : 32;
            memcpy(it->net, a, (size_t)bits / 8);
            it->prefix = bits;
            if (slash) {
                char *end;
                errno = 0;
                long p = strtol(slash + 1, &end, 10);
                if (errno || end == slash + 1 || *end || p < 0 || p > bits)
                    return hoop_error(HOOP_ERR_INVALID,
                                      "HOOP_SOCKET_IFNAME item '%s/%s' is not a CIDR range "
                                      "(address/prefix with a prefix of 0..%d)",
                                      item, slash + 1, bits);
                it->prefix = (int)p;
            }
        } else if (slash) {
            return hoop_error(HOOP_ERR_INVALID,
                              "HOOP_SOCKET_IFNAME item '%s/%s' is not a CIDR range: '%s' is not "
                              "an IPv4 or IPv6 address", item, slash + 1, item);
        } else {
            it->kind = *tok == '=' ? NETIF_EXACT : NETIF_PREFIX;
            if (*tok == '=')
                tok++;
            if (!*tok || strlen(tok) >= IF_NAMESIZE)
                return hoop_error(HOOP_ERR_INVALID,
                                  "HOOP_SOCKET_IFNAME item '%s' is not an interface name "
                                  "(1..%d characters), a CIDR range or an address",
                                  item, IF_NAMESIZE - 1);
            snprintf(it->name, sizeof(it->name), "%s", tok);
        }
        n++;
    }
    if (n == 0)
        return hoop_error(HOOP_ERR_INVALID, "HOOP_SOCKET_IFNAME='%s' names no interface", spec);
    *nitems = n;
    return HOOP_OK;
}

static int item_match(const struct netif_item *it, const char *name, const struct sockaddr *sa)
{
    if (it->kind == NETIF_PREFIX)
        return strncmp(name, it->name, strlen(it->name)) == 0;
    if (it->kind == NETIF_EXACT)
        return strcmp(name, it->name) == 0;
    int len;
    const uint8_t *b = addr_bytes(sa, &len);
    if (sa->sa_family != it->family)
        return 0;
    int full = it->prefix / 8, rest = it->prefix % 8;
    if (memcmp(b, it->net, (size_t)full) != 0)
        return 0;
    if (rest) {
        uint8_t mask = (uint8_t)(0xff00 >> rest);
        if ((b[full] & mask) != (it->net[full] & mask))
            return 0;
    }
    return 1;
}

static int excluded(const struct netif_item *items, int n, const char *name,
                    const struct sockaddr *sa)
{
    for (int i = 0; i < n; i++)
        if (items[i].exclude && item_match(&items[i], name, sa))
            return 1;
    return 0;
}

static const char *name_of(const struct hoop_netif *ifs, int n, const struct sockaddr *sa)
{
    for (int i = 0; i < n; i++)
        if (addr_equal((const struct sockaddr *)&ifs[i].addr, sa))
            return ifs[i].name;
    return "";
}

/* The first usable address among ifs that pass `want` (NULL: all), the
 * root's family before the other; -1 when none. */
static int netif_first(const struct hoop_netif *ifs, int n, int family, int root_loopback,
                       const struct netif_item *items, int nitems, const struct netif_item *want)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const struct sockaddr *sa = (const struct sockaddr *)&ifs[i].addr;
            if ((sa->sa_family == family) != (pass == 0))
                continue;
            if (!(ifs[i].flags & IFF_UP) || !addr_usable(sa, root_loopback))
                continue;
            if (want && !item_match(want, ifs[i].name, sa))
                continue;
            if (items && excluded(items, nitems, ifs[i].name, sa))
                continue;
            return i;
        }
    return -1;
}

static void set_out(struct sockaddr_storage *out, const struct sockaddr *sa)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)out;
        *a = *(const struct sockaddr_in6 *)sa;
        a->sin6_port = 0;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)out;
        *a = *(const struct sockaddr_in *)sa;
        a->sin_port = 0;
    }
}

static void list_str(const struct hoop_netif *ifs, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 1 < len; i++) {
        char ip[HOOP_ADDR_STR_MAX];
        hoop_sock_ip_str((const struct sockaddr *)&ifs[i].addr, ip, sizeof(ip));
        int w = snprintf(buf + used, len - used, "%s%s %s%s", i ? ", " : "", ifs[i].name, ip,
                         ifs[i].flags & IFF_UP ? "" : " (down)");
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (n == 0)
        snprintf(buf, len, "no address at all");
}

hoop_status_t hoop_netif_choose(const char *spec, const struct hoop_netif *ifs, int n,
                                const struct sockaddr *root, const struct sockaddr *route,
                                struct sockaddr_storage *out, char *why, size_t whylen)
{
    int root_lb = hoop_netif_is_loopback(root);
    int family = root->sa_family;
    char root_ip[HOOP_ADDR_STR_MAX], route_ip[HOOP_ADDR_STR_MAX], have[512];
    hoop_sock_ip_str(root, root_ip, sizeof(root_ip));
    hoop_sock_ip_str(route, route_ip, sizeof(route_ip));
    const char *route_name = name_of(ifs, n, route);
    const char *unusable = root_lb ? "" : "; loopback and link-local addresses do not count, "
                                          "since the root is not a loopback address";

    if (!spec || !*spec) {
        if (addr_usable(route, root_lb)) {
            set_out(out, route);
            snprintf(why, whylen, "interface %s, the route to the root %s",
                     *route_name ? route_name : "?", root_ip);
            return HOOP_OK;
        }
        /* Only a root on this very host is reached from such an address,
         * and the other hosts cannot answer it; they do reach the root's. */
        int i = -1;
        for (int k = 0; k < n && i < 0; k++)
            if ((ifs[k].flags & IFF_UP) && addr_equal((const struct sockaddr *)&ifs[k].addr, root) &&
                addr_usable(root, root_lb))
                i = k;
        if (i < 0)
            i = netif_first(ifs, n, family, root_lb, NULL, 0, NULL);
        if (i < 0) {
            list_str(ifs, n, have, sizeof(have));
            return hoop_error(HOOP_ERR_INVALID,
                              "the route to the root %s leaves from %s, which other hosts cannot "
                              "reach, and no other interface has an address they could (this "
                              "host has: %s): set HOOP_SOCKET_IFNAME to the interface the other "
                              "hosts reach this one by",
                              root_ip, route_ip, have);
        }
        set_out(out, (const struct sockaddr *)&ifs[i].addr);
        snprintf(why, whylen,
                 "interface %s: the route to the root %s leaves from %s, which other hosts "
                 "cannot reach", ifs[i].name, root_ip, route_ip);
        return HOOP_OK;
    }

    struct netif_item items[NETIF_ITEMS_MAX];
    int nitems = 0;
    hoop_status_t st = netif_parse(spec, items, &nitems);
    if (st)
        return st;
    int includes = 0;
    for (int k = 0; k < nitems; k++)
        includes += !items[k].exclude;
    int pick = -1;
    if (!includes) {
        if (addr_usable(route, root_lb) && !excluded(items, nitems, route_name, route)) {
            set_out(out, route);
            snprintf(why, whylen, "interface %s, the route to the root %s, not excluded by "
                     "HOOP_SOCKET_IFNAME=%s", *route_name ? route_name : "?", root_ip, spec);
            return HOOP_OK;
        }
        pick = netif_first(ifs, n, family, root_lb, items, nitems, NULL);
    }
    for (int k = 0; k < nitems && pick < 0; k++)
        if (!items[k].exclude)
            pick = netif_first(ifs, n, family, root_lb, items, nitems, &items[k]);
    if (pick < 0) {
        list_str(ifs, n, have, sizeof(have));
        return hoop_error(HOOP_ERR_INVALID,
                          "HOOP_SOCKET_IFNAME=%s selects no usable address (this host has: "
                          "%s%s): change HOOP_SOCKET_IFNAME",
                          spec, have, unusable);
    }
    set_out(out, (const struct sockaddr *)&ifs[pick].addr);
    snprintf(why, whylen, "interface %s, selected by HOOP_SOCKET_IFNAME=%s", ifs[pick].name, spec);
    return HOOP_OK;
}

hoop_status_t hoop_netif_list(struct hoop_netif **out, int *n)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) < 0)
        return hoop_error(HOOP_ERR_SYSTEM, "getifaddrs: %s", hoop_errno_str(-errno));
    int count = 0;
    for (struct ifaddrs *a = all; a; a = a->ifa_next)
        count += a->ifa_addr && (a->ifa_addr->sa_family == AF_INET ||
                                 a->ifa_addr->sa_family == AF_INET6);
    struct hoop_netif *ifs = calloc(count ? (size_t)count : 1, sizeof(*ifs));
    if (!ifs) {
        freeifaddrs(all);
        return hoop_error(HOOP_ERR_SYSTEM, "out of memory for %d interface addresses", count);
    }
    int k = 0;
    for (struct ifaddrs *a = all; a && k < count; a = a->ifa_next) {
        if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET &&
                             a->ifa_addr->sa_family != AF_INET6))
            continue;
        snprintf(ifs[k].name, sizeof(ifs[k].name), "%s", a->ifa_name);
        memcpy(&ifs[k].addr, a->ifa_addr, a->ifa_addr->sa_family == AF_INET6
                                              ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in));
        ifs[k].flags = a->ifa_flags;
        k++;
    }
    freeifaddrs(all);
    *out = ifs;
    *n = k;
    return HOOP_OK;
}

/* hoop_error formats into the buffer hoop_last_error() returns. */
static hoop_status_t netif_fail(hoop_status_t st, int rank, const char *what)
{
    char msg[900];
    snprintf(msg, sizeof(msg), "%s", hoop_last_error());
    return hoop_error(st, "rank %d: %s%s", rank, what, msg);
}

hoop_status_t hoop_netif_advertise(int rank, const struct sockaddr *root,
                                   const struct sockaddr *route, struct sockaddr_storage *out,
                                   socklen_t *out_len)
{
    const char *spec = hoop_param_str("HOOP_SOCKET_IFNAME");
    struct hoop_netif *ifs = NULL;
    int n = 0;
    hoop_status_t st = hoop_netif_list(&ifs, &n);
    if (st)
        return netif_fail(st, rank, "listing interfaces: ");
    char why[384];
    st = hoop_netif_choose(spec, ifs, n, root, route, out, why, sizeof(why));
    free(ifs);
    if (st)
        return netif_fail(st, rank, "");
    *out_len = out->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                          : sizeof(struct sockaddr_in);
    char ip[HOOP_ADDR_STR_MAX];
    hoop_sock_ip_str((const struct sockaddr *)out, ip, sizeof(ip));
    HOOP_INFO("rank %d: advertises %s (%s)", rank, ip, why);
    return HOOP_OK;
}
