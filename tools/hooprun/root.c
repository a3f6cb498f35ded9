/* root.c - the job's root and token: a free port, where rank 0 listens, and the
 * token every rank presents. */
#include "tools/hooprun/hooprun.h"

static bool random_bytes(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom((char *)buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

/* Whether port is free now on host_addr; the root binds it a moment later. */
static bool port_is_free(uint32_t host_addr, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(host_addr);
    addr.sin_port = htons((uint16_t)port);
    bool ok = bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    close(fd);
    return ok;
}

/* The lowest port the kernel hands out for outgoing connections. */
static int ephemeral_low(void)
{
    int lo = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d", &lo) != 1 || lo < 1024 || lo > 65535)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

/* A port that is free now, drawn at random from below the ephemeral range:
 * a port in that range may be taken by any outgoing connection (the job's
 * own, or another program's) in the moment before the root binds it. A race
 * with a program that listens is still possible but rare, and --port exists
 * for when it bites. */
static int free_port(uint32_t host_addr)
{
    int lo = REMOTE_PORT_LO, hi = ephemeral_low() - 1;
    if (hi - lo < 1000) {
        lo = 1024;
        hi = 65535;
    }
    for (int i = 0; i < 64; i++) {
        uint32_t v;
        if (!random_bytes(&v, sizeof v))
            return -1;
        int port = lo + (int)(v % (uint32_t)(hi - lo + 1));
        if (port_is_free(host_addr, port))
            return port;
    }
    errno = EADDRINUSE;
    return -1;
}

/* Where rank 0 listens: HOOP_ROOT. */
bool setup_root(void)
{
    bool spread = J.nremote > 0;
    bool here = J.nhosts == 0 || J.hosts[0].local;
    const char *host;
    if (J.opt.root_addr)
        host = J.opt.root_addr;
    else if (!spread)
        host = "127.0.0.1";
    else if (is_loopback_name(J.hosts[0].addr))
        usage_error("the first host, %s, is this machine under a loopback name, which ranks on "
                    "other hosts cannot reach: name it so that they can, or give --root-addr ADDR",
                    J.hosts[0].name);
    else
        host = J.hosts[0].addr;

    int port = J.opt.port;
    if (port == 0 && here) {
        /* Probed on every address when other hosts connect: a port free
         * there is free on each address the root may bind. */
        bool any = spread || J.opt.root_addr;
        port = free_port(any ? INADDR_ANY : INADDR_LOOPBACK);
        if (port <= 0) {
            say("cannot find a free port on %s: %s", any ? "this machine" : "127.0.0.1",
                strerror(errno));
            return false;
        }
    } else if (port == 0) {
        uint32_t v;
        if (!random_bytes(&v, sizeof v)) {
            say("cannot get random bytes for the port: %s", strerror(errno));
            return false;
        }
        port = REMOTE_PORT_LO + (int)(v % (REMOTE_PORT_HI - REMOTE_PORT_LO + 1));
    }
    if (strchr(host, ':') && host[0] != '[')
        snprintf(J.root, sizeof J.root, "[%s]:%d", host, port);
    else
        snprintf(J.root, sizeof J.root, "%s:%d", host, port);
    return true;
}

bool make_token(char out[33])
{
    unsigned char raw[16];
    if (!random_bytes(raw, sizeof raw))
        return false;
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
    return true;
}
