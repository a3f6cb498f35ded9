/* fdpass.c - a message and its descriptors on a Unix socket (fdpass.h). */
#include "common/fdpass.h"
#include "common/clock.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

socklen_t hoop_fdpass_addr(struct sockaddr_un *a, const char *kind, uint32_t pid, uint64_t nonce)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "%s.%u.%016llx", kind, pid,
                     (unsigned long long)nonce);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int hoop_fdpass_send(int sock, const void *msg, size_t len, const int *fds, int nfds)
{
    if (nfds < 0 || nfds > HOOP_FDPASS_MAX)
        return -EINVAL;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * HOOP_FDPASS_MAX)];
    } cm;
    memset(&cm, 0, sizeof(cm));
    struct iovec iov = {.iov_base = (void *)msg, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds) {
        mh.msg_control = cm.b;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *ch = CMSG_FIRSTHDR(&mh);
        ch->cmsg_level = SOL_SOCKET;
        ch->cmsg_type = SCM_RIGHTS;
        ch->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(ch), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n == (ssize_t)len)
        return 0;
    return n < 0 ? -errno : -EPIPE;
}

ssize_t hoop_fdpass_recv(int sock, void *msg, size_t len, int *fds, int maxfds, int *nfds,
                         uint64_t deadline_ns)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * HOOP_FDPASS_MAX)];
    } cm;
    struct iovec iov = {.iov_base = msg, .iov_len = len};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
    ssize_t got;
    *nfds = 0;
    for (;;) {
        got = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        if (got >= 0)
            break;
        if (errno != EAGAIN && errno != EINTR)
            return -errno;
        int ms = hoop_ms_left(deadline_ns);
        if (ms == 0)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = sock, .events = POLLIN};
        poll(&p, 1, ms);
    }
    int n = 0;
    for (struct cmsghdr *ch = CMSG_FIRSTHDR(&mh); ch; ch = CMSG_NXTHDR(&mh, ch)) {
        if (ch->cmsg_level != SOL_SOCKET || ch->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (ch->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int f;
            memcpy(&f, CMSG_DATA(ch) + i * sizeof(int), sizeof(int));
            if (n < maxfds)
                fds[n] = f;
            else
                close(f);
            n++;
        }
    }
    if (mh.msg_flags & MSG_CTRUNC) {
        /* Some were dropped: the message is refused, nothing kept. */
        for (int i = 0; i < n && i < maxfds; i++) {
            close(fds[i]);
            fds[i] = -1;
        }
        n = -1;
    }
    *nfds = n;
    return got;
}
