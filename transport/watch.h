/* watch.h - the descriptors a transport's waits watch for the caller (the
 * communicator's abort eventfd, its bootstrap connections: the ops table's
 * watch): progress returns -EINTR as soon as one is readable. Every
 * transport keeps its list in one of these. */
#ifndef HOOP_TRANSPORT_WATCH_H
#define HOOP_TRANSPORT_WATCH_H

struct hoop_watch {
    int *fd; /* the caller's descriptors, still the caller's */
    int n;
};

/* Add fd at the end. 0 or -ENOMEM. */
int hoop_watch_add(struct hoop_watch *w, int fd);
/* 1 when one of the descriptors is readable now (does not wait). */
int hoop_watch_readable(const struct hoop_watch *w);
/* Forget the list (the descriptors are not closed). */
void hoop_watch_fini(struct hoop_watch *w);

#endif
