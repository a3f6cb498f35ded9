/* sock.c - TCP socket helpers with deadlines. */
#include "common/sock.h"
#include "common/clock.h"
#include "common/status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

hoop_status_t hoop_sock_parse_hostport(const char *what, const char *s, char *host, size_t hostlen,
                                       uint16_t *port)
{
    const char *colon;
    const char *h = s;
    size_t hl;
    if (!s || !*s)
        return hoop_error(HOOP_ERR_INVALID, "%s is empty; expected host:port", what);
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            goto bad;
        h = s + 1;
        hl = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            goto bad;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        goto bad;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || *end || end == colon + 1 || p < 1 || p > 65535)
        goto bad;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (uint16_t)p;
    return HOOP_OK;
bad:
    return hoop_error(HOOP_ERR_INVALID, "%s='%s' is not host:port with a port in 1..65535", what, s);
}

hoop_status_t hoop_sock_resolve(const char *host, uint16_t port, struct sockaddr_storage *ss,
                                socklen_t *len)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", (unsigned)port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0 || !res)
        return hoop_error(HOOP_ERR_INVALID, "cannot resolve host '%s': %s", host,
                          rc ? gai_strerror(rc) : "no address");
    /* Prefer IPv4: it is what every launcher's variables usually mean. */
    struct addrinfo *pick = res;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    freeaddrinfo(res);
    return HOOP_OK;
}

int hoop_sock_listen(const struct sockaddr *addr, socklen_t len, int *fd_out)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* Deep enough for every rank of a big job to connect at once: direct
     * connections are made connect-all-then-accept. */
    if (bind(fd, addr, len) < 0 || listen(fd, 4096) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    *fd_out = fd;
    return 0;
}

static int sock_connect_once(const struct sockaddr *addr, socklen_t len, uint64_t deadline_ns,
                             int *fd_out)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, addr, len) < 0) {
        if (errno != EINPROGRESS) {
            int err = -errno;
            close(fd);
            return err;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int rc;
        do
            rc = poll(&p, 1, hoop_ms_left(deadline_ns));
        while (rc < 0 && errno == EINTR);
        if (rc <= 0) {
            close(fd);
            return rc == 0 ? -ETIMEDOUT : -errno;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr) {
            close(fd);
            return -soerr;
        }
    }
    *fd_out = fd;
    return 0;
}

static int sock_connect(const struct sockaddr *addr, socklen_t len, uint64_t deadline_ns,
                        int *fd_out, int retry_refused)
{
    /* Ranks started together find the root's process not listening yet
     * for the first milliseconds: the first retries come quickly, so that
     * none waits much longer than the root took (a refused connect costs
     * a round trip), then ever further apart. */
    uint64_t backoff_ns = 1000000ull;
    for (;;) {
        int rc = sock_connect_once(addr, len, deadline_ns, fd_out);
        if (rc == 0 || (rc == -ECONNREFUSED && !retry_refused))
            return rc;
        /* A root that has not started yet refuses; a network still coming up
         * is unreachable. Anything else will not get better by waiting. */
        if (rc != -ECONNREFUSED && rc != -ETIMEDOUT && rc != -EHOSTUNREACH && rc != -ENETUNREACH &&
            rc != -ECONNRESET && rc != -EAGAIN && rc != -EINTR)
            return rc;
        uint64_t now = hoop_now_ns();
        if (now >= deadline_ns)
            return rc == -ECONNREFUSED ? -ECONNREFUSED : -ETIMEDOUT;
        uint64_t sleep_ns = backoff_ns;
        if (now + sleep_ns > deadline_ns)
            sleep_ns = deadline_ns - now;
        struct timespec ts = {.tv_sec = (time_t)(sleep_ns / 1000000000ull),
                              .tv_nsec = (long)(sleep_ns % 1000000000ull)};
        nanosleep(&ts, NULL);
        if (backoff_ns < 500000000ull)
            backoff_ns *= 2;
    }
}

int hoop_sock_connect_retry(const struct sockaddr *addr, socklen_t len, uint64_t deadline_ns,
                            int *fd_out)
{
    return sock_connect(addr, len, deadline_ns, fd_out, 1);
}

int hoop_sock_connect_listening(const struct sockaddr *addr, socklen_t len, uint64_t deadline_ns,
                                int *fd_out)
{
    return sock_connect(addr, len, deadline_ns, fd_out, 0);
}

static int sock_wait(int fd, short events, uint64_t deadline_ns)
{
    struct pollfd p = {.fd = fd, .events = events};
    for (;;) {
        int rc = poll(&p, 1, hoop_ms_left(deadline_ns));
        if (rc > 0)
            return 0;
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

int hoop_sock_write_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = sock_wait(fd, POLLOUT, deadline_ns);
        if (rc)
            return rc;
    }
    return 0;
}

int hoop_sock_read_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    while (len) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return -EPIPE;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        int rc = sock_wait(fd, POLLIN, deadline_ns);
        if (rc)
            return rc;
    }
    return 0;
}

int hoop_sock_set_blocking(int fd, int blocking)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    fl = blocking ? (fl & ~O_NONBLOCK) : (fl | O_NONBLOCK);
    return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

int hoop_sock_check_cc(const char *cc)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) ? -errno : 0;
    close(fd);
    return rc;
}

void hoop_sock_set_data_opts(int fd, int bufsize, unsigned user_timeout_ms, const char *cc)
{
    int one = 1, idle = 10, intvl = 2, cnt = 5;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    if (user_timeout_ms)
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
    if (bufsize > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize));
    }
    if (cc && *cc)
        setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc));
}

void hoop_sock_ip_str(const struct sockaddr *sa, char *out, size_t outlen)
{
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)outlen);
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)outlen);
    else
        snprintf(out, outlen, "?");
}

void hoop_sock_addr_str(const struct sockaddr *sa, char *out, size_t outlen)
{
    char ip[INET6_ADDRSTRLEN];
    hoop_sock_ip_str(sa, ip, sizeof(ip));
    if (sa->sa_family == AF_INET6)
        snprintf(out, outlen, "[%s]:%u", ip, ntohs(((const struct sockaddr_in6 *)sa)->sin6_port));
    else if (sa->sa_family == AF_INET)
        snprintf(out, outlen, "%s:%u", ip, ntohs(((const struct sockaddr_in *)sa)->sin_port));
    else
        snprintf(out, outlen, "?");
}

const char *hoop_errno_str(int neg_errno)
{
    static _Thread_local char text[160];
    struct rlimit rl;
    switch (-neg_errno) {
    case EMFILE:
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
            snprintf(text, sizeof(text), "this process has run out of file descriptors (all %llu "
                     "in use): raise its limit, ulimit -n", (unsigned long long)rl.rlim_cur);
            return text;
        }
        return "this process has run out of file descriptors: raise its limit, ulimit -n";
    case ENFILE:
        return "the system has run out of file descriptors: raise fs.file-max (the limit of "
               "one process is ulimit -n)";
    case EPIPE: return "the peer closed the connection";
    case ECONNRESET: return "the connection was reset by the peer";
    case ETIMEDOUT: return "timed out";
    case ENOLINK:
        return "the connection timed out (nothing acknowledged within HOOP_TCP_USER_TIMEOUT, or "
               "keepalive found no peer): the peer's host or the network to it is down";
    case ECONNREFUSED: return "connection refused";
    default: return strerror(-neg_errno);
    }
}
