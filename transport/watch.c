/* watch.c - the descriptors a transport's waits watch for the caller. */
#include "transport/watch.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>

int hoop_watch_add(struct hoop_watch *w, int fd)
{
    int *fds = realloc(w->fd, (size_t)(w->n + 1) * sizeof(*fds));
    if (!fds)
        return -ENOMEM;
    w->fd = fds;
    fds[w->n++] = fd;
    return 0;
}

int hoop_watch_readable(const struct hoop_watch *w)
{
    struct pollfd p[16];
    for (int i = 0; i < w->n;) {
        nfds_t n = 0;
        for (; i < w->n && n < sizeof(p) / sizeof(p[0]); i++)
            p[n++] = (struct pollfd){.fd = w->fd[i], .events = POLLIN};
        if (poll(p, n, 0) > 0)
            return 1;
    }
    return 0;
}

void hoop_watch_fini(struct hoop_watch *w)
{
    free(w->fd);
    w->fd = NULL;
    w->n = 0;
}
