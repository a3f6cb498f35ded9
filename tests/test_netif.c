/* test_netif.c - which address a rank advertises (HOOP_SOCKET_IFNAME, the
 * route rule, never loopback or link-local for a job that may span hosts).
 *
 * The matcher is checked on a made-up list of interfaces; then three ranks
 * run in three network namespaces joined by a bridge, as on three hosts,
 * one of them beside a docker0 decoy that must never be advertised.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/netif.h"
#include "hoop.h"
#include "proc.h"

/* ---- the matcher, on a made-up host ------------------------------------- */

static struct sockaddr_storage sa(const char *ip)
{
    struct sockaddr_storage s;
    memset(&s, 0, sizeof s);
    if (strchr(ip, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&s;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(4242);
        cr_assert_eq(inet_pton(AF_INET6, ip, &a->sin6_addr), 1, "bad test address %s", ip);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&s;
        a->sin_family = AF_INET;
        a->sin_port = htons(4242);
        cr_assert_eq(inet_pton(AF_INET, ip, &a->sin_addr), 1, "bad test address %s", ip);
    }
    return s;
}

static struct hoop_netif fake[12];
static int nfake;

static void add(const char *name, const char *ip, int up)
{
    struct hoop_netif *f = &fake[nfake++];
    memset(f, 0, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->addr = sa(ip);
    f->flags = up ? IFF_UP : 0;
}

/* In the kernel's order: a decoy before the real interfaces, as docker's
 * bridge often is. */
static void fake_host(void)
{
    nfake = 0;
    add("lo", "127.0.0.1", 1);
    add("docker0", "172.17.0.1", 1);
    add("eth0", "10.1.2.3", 1);
    add("eth0", "fd00::5", 1);
    add("eth0", "fe80::1", 1);
    add("eth1", "192.168.7.9", 1);
    add("ib0", "10.200.0.4", 1);
    add("wlan0", "169.254.3.3", 1);
    add("eth2", "10.9.9.9", 0);
    add("lo", "::1", 1);
}

/* Choose with spec for a root at root_ip reached from route_ip. */
static hoop_status_t choose(const char *spec, const char *root_ip, const char *route_ip,
                            char *ip, size_t iplen, char *why, size_t whylen)
{
    fake_host();
    struct sockaddr_storage root = sa(root_ip), route = sa(route_ip), out;
    hoop_status_t st = hoop_netif_choose(spec, fake, nfake, (struct sockaddr *)&root,
                                         (struct sockaddr *)&route, &out, why, whylen);
    if (st == HOOP_OK) {
        const void *a = out.ss_family == AF_INET6
                            ? (const void *)&((struct sockaddr_in6 *)&out)->sin6_addr
                            : (const void *)&((struct sockaddr_in *)&out)->sin_addr;
        inet_ntop(out.ss_family, a, ip, (socklen_t)iplen);
        unsigned port = out.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&out)->sin6_port
                                                   : ((struct sockaddr_in *)&out)->sin_port;
        cr_assert_eq(port, 0, "the advertised address must carry no port");
    }
    return st;
}

static void picks(const char *spec, const char *root_ip, const char *route_ip, const char *want,
                  const char *want_ifname)
{
    char ip[64], why[384];
    hoop_status_t st = choose(spec, root_ip, route_ip, ip, sizeof ip, why, sizeof why);
    cr_assert_eq(st, HOOP_OK, "HOOP_SOCKET_IFNAME='%s', root %s, route %s: %s", spec, root_ip,
                 route_ip, hoop_last_error());
    cr_assert_str_eq(ip, want, "HOOP_SOCKET_IFNAME='%s', root %s, route %s: %s (%s), expected %s",
                     spec, root_ip, route_ip, ip, why, want);
    char iface[32];
    snprintf(iface, sizeof iface, "interface %s", want_ifname);
    cr_assert(strstr(why, iface), "the reason does not name %s: %s", want_ifname, why);
}

static void refuses(const char *spec, const char *root_ip, const char *route_ip,
                    const char *needle)
{
    char ip[64] = "", why[384] = "";
    hoop_status_t st = choose(spec, root_ip, route_ip, ip, sizeof ip, why, sizeof why);
    cr_assert_eq(st, HOOP_ERR_INVALID,
                 "HOOP_SOCKET_IFNAME='%s', root %s, route %s: chose %s (%s)", spec, root_ip,
                 route_ip, ip, why);
    cr_assert(strstr(hoop_last_error(), "HOOP_SOCKET_IFNAME"),
              "the sentence does not name HOOP_SOCKET_IFNAME: %s", hoop_last_error());
    if (needle)
        cr_assert(strstr(hoop_last_error(), needle), "the sentence does not say '%s': %s",
                  needle, hoop_last_error());
}

Test(netif, route_rule)
{
    picks("", "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    picks(NULL, "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    picks("", "127.0.0.1", "127.0.0.1", "127.0.0.1", "lo");
    /* A route that leaves from loopback towards a root that is not: the
     * root's own address when it is this host's, else another interface,
     * never loopback or link-local. */
    picks("", "10.1.2.3", "127.0.0.1", "10.1.2.3", "eth0");
    char ip[64], why[384];
    cr_assert_eq(choose("", "10.1.2.1", "127.0.0.1", ip, sizeof ip, why, sizeof why), HOOP_OK,
                 "%s", hoop_last_error());
    cr_assert(strncmp(ip, "127.", 4) != 0 && strncmp(ip, "169.254.", 8) != 0 &&
                  strncmp(ip, "fe80:", 5) != 0 && strcmp(ip, "::1") != 0,
              "advertises %s (%s) for a root that is not loopback", ip, why);
    /* IPv6 link-local routes carry a scope the handle cannot: another
     * address of the root's family. */
    picks("", "fe80::2", "fe80::1", "fd00::5", "eth0");
}

Test(netif, names_and_prefixes)
{
    picks("eth", "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    picks("eth1", "10.1.2.1", "10.1.2.3", "192.168.7.9", "eth1");
    picks("=eth1", "10.1.2.1", "10.1.2.3", "192.168.7.9", "eth1");
    picks(" ib , eth ", "10.1.2.1", "10.1.2.3", "10.200.0.4", "ib0");
    /* The root's family first, the other one when that is all there is. */
    picks("eth0", "fd00::1", "fd00::5", "fd00::5", "eth0");
    refuses("=eth", "10.1.2.1", "10.1.2.3", "this host has");
    refuses("eth2", "10.1.2.1", "10.1.2.3", "(down)");
    refuses("nothing", "10.1.2.1", "10.1.2.3", NULL);
}

Test(netif, exclusions)
{
    /* Exclusions only keep the route rule among what they leave. */
    picks("^docker", "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    picks("^docker,lo", "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    /* The route leaves from the decoy: the first other usable address. */
    picks("^docker", "172.17.0.5", "172.17.0.1", "10.1.2.3", "eth0");
    /* '^' before the first item excludes every item, as in NCCL. */
    picks("^docker,lo,eth", "10.1.2.1", "10.1.2.3", "10.200.0.4", "ib0");
    /* Otherwise an exclusion trims the inclusions. */
    picks("eth,^eth0", "10.1.2.1", "10.1.2.3", "192.168.7.9", "eth1");
    picks("eth,^10.0.0.0/8", "10.1.2.1", "10.1.2.3", "192.168.7.9", "eth1");
    picks("eth0,^10.0.0.0/8", "10.1.2.1", "10.1.2.3", "fd00::5", "eth0");
    refuses("^docker,lo,eth,ib,wlan", "10.1.2.1", "10.1.2.3", NULL);
}

Test(netif, cidr_ranges)
{
    picks("10.200.0.0/16", "10.1.2.1", "10.1.2.3", "10.200.0.4", "ib0");
    picks("10.0.0.0/8", "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    picks("10.1.2.0/25", "10.1.2.1", "10.1.2.3", "10.1.2.3", "eth0");
    picks("192.168.7.9", "10.1.2.1", "10.1.2.3", "192.168.7.9", "eth1");
    picks("fd00::/8", "10.1.2.1", "10.1.2.3", "fd00::5", "eth0");
    picks("fd00::5/128", "10.1.2.1", "10.1.2.3", "fd00::5", "eth0");
    picks("0.0.0.0/0", "10.1.2.1", "10.1.2.3", "172.17.0.1", "docker0");
    refuses("10.1.2.128/25", "10.1.2.1", "10.1.2.3", NULL);
    refuses("10.9.0.0/16", "10.1.2.1", "10.1.2.3", NULL); /* eth2 is down */
}

Test(netif, loopback_and_link_local_only_for_a_loopback_root)
{
    refuses("lo", "10.1.2.1", "10.1.2.3", "loopback");
    refuses("127.0.0.0/8", "10.1.2.1", "10.1.2.3", NULL);
    refuses("wlan", "10.1.2.1", "10.1.2.3", "link-local");
    picks("lo", "127.0.0.1", "127.0.0.1", "127.0.0.1", "lo");
    picks("wlan", "127.0.0.1", "127.0.0.1", "169.254.3.3", "wlan0");
    picks("eth1", "127.0.0.1", "127.0.0.1", "192.168.7.9", "eth1");
    /* Never IPv6 link-local: the handle has no room for its scope. */
    refuses("fe80::/10", "127.0.0.1", "127.0.0.1", NULL);
    refuses("fe80::/10", "::1", "::1", NULL);
    picks("lo", "::1", "::1", "::1", "lo");
}

Test(netif, malformed_lists)
{
    refuses("10.0.0.0/33", "10.1.2.1", "10.1.2.3", "10.0.0.0/33");
    refuses("fd00::/129", "10.1.2.1", "10.1.2.3", "fd00::/129");
    refuses("10.0.0.0/", "10.1.2.1", "10.1.2.3", NULL);
    refuses("eth0/24", "10.1.2.1", "10.1.2.3", "eth0/24");
    refuses("^", "10.1.2.1", "10.1.2.3", NULL);
    refuses("=", "10.1.2.1", "10.1.2.3", NULL);
    refuses(",,", "10.1.2.1", "10.1.2.3", NULL);
    refuses("a-name-far-too-long-for-linux", "10.1.2.1", "10.1.2.3", NULL);
}

Test(netif, address_classes)
{
    struct sockaddr_storage s = sa("127.3.4.5");
    cr_assert(hoop_netif_is_loopback((struct sockaddr *)&s));
    s = sa("::ffff:127.0.0.1");
    cr_assert(hoop_netif_is_loopback((struct sockaddr *)&s));
    s = sa("::1");
    cr_assert(hoop_netif_is_loopback((struct sockaddr *)&s));
    s = sa("128.0.0.1");
    cr_assert(!hoop_netif_is_loopback((struct sockaddr *)&s));
    s = sa("169.254.0.1");
    cr_assert(hoop_netif_is_link_local((struct sockaddr *)&s));
    s = sa("169.253.0.1");
    cr_assert(!hoop_netif_is_link_local((struct sockaddr *)&s));
    s = sa("fe80::1");
    cr_assert(hoop_netif_is_link_local((struct sockaddr *)&s));
    s = sa("fd00::1");
    cr_assert(!hoop_netif_is_link_local((struct sockaddr *)&s));
}

Test(netif, this_hosts_list)
{
    struct hoop_netif *ifs = NULL;
    int n = -1;
    cr_assert_eq(hoop_netif_list(&ifs, &n), HOOP_OK, "%s", hoop_last_error());
    int lo = 0;
    for (int i = 0; i < n; i++) {
        cr_assert(ifs[i].addr.ss_family == AF_INET || ifs[i].addr.ss_family == AF_INET6);
        lo |= strcmp(ifs[i].name, "lo") == 0;
    }
    free(ifs);
    cr_assert(lo, "no address on lo in this host's list of %d addresses", n);
}

/* ---- three hosts in network namespaces ---------------------------------- */

#define NS_RANKS 3
#define NS_JOB_LIMIT_S 40.0

struct lab {
    char br[32];
    char ns[NS_RANKS][32];
    int made_br, made_ns[NS_RANKS];
    char failed[2048]; /* the setup command that failed, and what it said */
};

/* Run "ip" with the words of a formatted command line; false with
 * lab->failed set when it fails. */
static bool ipcmd(struct lab *lab, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool ipcmd(struct lab *lab, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *argv[32];
    int n = 0;
    argv[n++] = "ip";
    char *save = NULL;
    for (char *w = strtok_r(line, " ", &save); w && n < 31; w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    struct proc p;
    char **env = proc_env_clean(NULL);
    bool started = proc_run(&p, argv, env, 15.0);
    proc_env_free(env);
    bool ok = started && p.status == 0 && !p.timed_out;
    if (!ok && !lab->failed[0]) {
        char cmd[512] = "";
        for (int i = 0; i < n; i++)
            snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), "%s%s", i ? " " : "", argv[i]);
        snprintf(lab->failed, sizeof lab->failed, "'%s' failed (status %d): %s", cmd,
                 started ? p.status : -1, started ? p.out : strerror(errno));
    }
    if (started)
        proc_free(&p);
    return ok;
}

static void lab_down(struct lab *lab)
{
    char keep[sizeof lab->failed];
    memcpy(keep, lab->failed, sizeof keep);
    for (int i = 0; i < NS_RANKS; i++)
        if (lab->made_ns[i])
            ipcmd(lab, "netns del %s", lab->ns[i]);
    if (lab->made_br)
        ipcmd(lab, "netns del %s", lab->br);
    memcpy(lab->failed, keep, sizeof keep);
}

/* A bridge in its own namespace, and rank i's namespace on it through a
 * veth with 198.18.0.(i+1)/24 (the benchmarking range, seen only here).
 * Ranks 0 and 1 also get a bridge named docker0 with 172.17.0.1/16 that
 * is up, made first so that it comes before the real interface. */
static bool lab_up(struct lab *lab)
{
    int pid = (int)getpid();
    snprintf(lab->br, sizeof lab->br, "hoopbr%d", pid);
    if (!ipcmd(lab, "netns add %s", lab->br))
        return false;
    lab->made_br = 1;
    if (!ipcmd(lab, "-n %s link add br0 type bridge", lab->br) ||
        !ipcmd(lab, "-n %s link set br0 up", lab->br))
        return false;
    for (int i = 0; i < NS_RANKS; i++) {
        snprintf(lab->ns[i], sizeof lab->ns[i], "hoopr%d_%d", pid, i);
        if (!ipcmd(lab, "netns add %s", lab->ns[i]))
            return false;
        lab->made_ns[i] = 1;
        if (!ipcmd(lab, "-n %s link set lo up", lab->ns[i]))
            return false;
        if (i < 2 && (!ipcmd(lab, "-n %s link add docker0 type bridge", lab->ns[i]) ||
                      !ipcmd(lab, "-n %s addr add 172.17.0.1/16 dev docker0", lab->ns[i]) ||
                      !ipcmd(lab, "-n %s link set docker0 up", lab->ns[i])))
            return false;
        if (!ipcmd(lab, "-n %s link add name veth%d type veth peer name eth0 netns %s", lab->br, i,
                   lab->ns[i]) ||
            !ipcmd(lab, "-n %s link set veth%d master br0", lab->br, i) ||
            !ipcmd(lab, "-n %s link set veth%d up", lab->br, i) ||
            !ipcmd(lab, "-n %s addr add 198.18.0.%d/24 dev eth0", lab->ns[i], i + 1) ||
            !ipcmd(lab, "-n %s link set eth0 up", lab->ns[i]))
            return false;
    }
    return true;
}

/* One job of NS_RANKS ring_bench ranks, rank i in namespace i, each with
 * HOOP_SOCKET_IFNAME=ifname[i] (NULL: unset). Appends what went wrong to
 * report; true when every rank advertised its 198.18.0.x address and the
 * allreduce was exact. */
static bool lab_job(const struct lab *lab, const char *bench, const char *const *ifname,
                    const char *title, char *report, size_t rlen)
{
    struct proc ps[NS_RANKS];
    bool ok = true;
    int started = 0;
    for (int i = 0; i < NS_RANKS; i++) {
        char rank[32], ifn[128], token[64];
        snprintf(rank, sizeof rank, "HOOP_RANK=%d", i);
        snprintf(token, sizeof token, "HOOP_TOKEN=netns-%d", (int)getpid());
        snprintf(ifn, sizeof ifn, "HOOP_SOCKET_IFNAME=%s", ifname[i] ? ifname[i] : "");
        const char *extra[] = {rank, "HOOP_SIZE=3", "HOOP_ROOT=198.18.0.1:29500", token,
                               "HOOP_BOOTSTRAP_TIMEOUT=15", "HOOP_TIMEOUT=20",
                               "HOOP_LOG_LEVEL=info", ifname[i] ? ifn : NULL, NULL};
        const char *argv[] = {"ip", "netns", "exec", lab->ns[i], bench, "-b", "8", "-e", "1M",
                              NULL};
        char **env = proc_env_clean(extra);
        if (env && proc_start(&ps[i], argv, env))
            started++;
        else
            ok = false;
        proc_env_free(env);
        if (!ok)
            break;
    }
    proc_wait_all(ps, started, NS_JOB_LIMIT_S);
    for (int i = 0; i < started; i++) {
        char want[64];
        snprintf(want, sizeof want, "rank %d: advertises 198.18.0.%d ", i, i + 1);
        const char *bad = NULL;
        if (ps[i].timed_out)
            bad = "did not finish in time";
        else if (ps[i].status != 0)
            bad = "failed";
        else if (!strstr(ps[i].out, want))
            bad = "did not advertise its 198.18.0.x address";
        else if (strstr(ps[i].out, "advertises 172.17."))
            bad = "advertised the docker0 decoy";
        else if (i == 0 && (!strstr(ps[i].out, "Out of bounds values : 0 OK") ||
                            !strstr(ps[i].out, "# nranks 3 ")))
            bad = "did not report an exact 3-rank allreduce";
        if (bad) {
            ok = false;
            size_t used = strlen(report);
            snprintf(report + used, rlen - used, "%s: rank %d in %s %s (status %d):\n%.3000s\n",
                     title, i, lab->ns[i], bad, ps[i].status, ps[i].out);
        }
        proc_free(&ps[i]);
    }
    if (started < NS_RANKS) {
        size_t used = strlen(report);
        snprintf(report + used, rlen - used, "%s: could only start %d ranks\n", title, started);
    }
    return ok;
}

Test(netif, three_hosts_in_namespaces, .timeout = 150)
{
    char ippath[4096], bench[4096];
    if (geteuid() != 0)
        cr_skip_test("network namespaces need root; this suite runs as uid %d", (int)geteuid());
    if (!proc_which("ip", ippath, sizeof ippath))
        cr_skip_test("the ip command (iproute2) is not installed");
    const char *dir = getenv("HOOP_BUILD_DIR");
    if (!dir || !*dir)
        cr_skip_test("HOOP_BUILD_DIR is not set, so the built ring_bench cannot be found (run "
                     "the suite with 'make test')");
    snprintf(bench, sizeof bench, "%s/ring_bench", dir);
    cr_assert(access(bench, X_OK) == 0, "%s is not an executable: %s", bench, strerror(errno));

    static struct lab lab;
    memset(&lab, 0, sizeof lab);
    bool up = lab_up(&lab);
    static char report[16384];
    report[0] = '\0';
    bool excl = false, route = false;
    if (up) {
        const char *caret[NS_RANKS] = {"^docker", "^docker", "198.18.0.0/24"};
        const char *none[NS_RANKS] = {NULL, NULL, NULL};
        excl = lab_job(&lab, bench, caret, "HOOP_SOCKET_IFNAME=^docker (rank 2: 198.18.0.0/24)",
                       report, sizeof report);
        route = lab_job(&lab, bench, none, "HOOP_SOCKET_IFNAME unset (the route rule)", report,
                        sizeof report);
    }
    /* Down before any assertion, so that a failure leaves nothing behind. */
    lab_down(&lab);
    if (!up && !lab.made_br)
        cr_skip_test("ip netns is refused here: %s", lab.failed);
    if (!up)
        cr_skip_test("this kernel cannot build the namespaces' network: %s", lab.failed);
    cr_assert(excl && route, "an allreduce across three namespaces failed:\n%s", report);
}
