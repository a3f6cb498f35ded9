/* timeline.c - Chrome trace-event JSON (chrome://tracing, Perfetto), in
 * Horovod's layout: one track (pid) per tensor name, B/E pairs per
 * activity, an X event of no length per rank that announced the name.
 *
 * The file is a JSON array that is valid at every moment: it always ends
 * with "\n]", and the events of a cycle are written with one pwrite over
 * that ending (",\n{...},\n{...}\n]"), so a process killed between two
 * writes leaves a file that parses.
 *
 * A timeline started while operations are under way (hoop_engine_timeline_
 * start) would see ends of activities whose beginnings it never saw: each
 * track counts what it has open, and an end with nothing open is left
 * out, so that every E follows its B.
 */
#include "engine/engine.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TL_HASH 4096

struct tl_name {
    char *name;
    int pid;
    int open; /* B events not ended yet */
    struct tl_name *next;
};

struct eng_timeline {
    int fd;
    off_t end; /* where the closing "\n]" starts */
    uint64_t t0_ns;
    char *buf;
    size_t len, cap;
    int failed;
    int npids;
    struct tl_name *names[TL_HASH];
};

static void tl_append(struct eng_timeline *tl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void tl_append(struct eng_timeline *tl, const char *fmt, ...)
{
    if (tl->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tl->buf + tl->len, tl->cap - tl->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            tl->failed = 1;
            return;
        }
        if ((size_t)n < tl->cap - tl->len) {
            tl->len += (size_t)n;
            return;
        }
        size_t cap = tl->cap * 2 + (size_t)n;
        char *b = realloc(tl->buf, cap);
        if (!b) {
            tl->failed = 1;
            return;
        }
        tl->buf = b;
        tl->cap = cap;
    }
}

/* A tensor name as a JSON string body: quotes, backslashes and every byte
 * outside printable ASCII escaped (names are bytes, JSON is UTF-8). */
static void json_escape(const char *s, char *out, size_t len)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 7 < len; p++) {
        if (*p == '"' || *p == '\\') {
            out[n++] = '\\';
            out[n++] = (char)*p;
        } else if (*p < 0x20 || *p >= 0x7f) {
            n += (size_t)snprintf(out + n, len - n, "\\u%04x", *p);
        } else {
            out[n++] = (char)*p;
        }
    }
    out[n] = '\0';
}

static uint64_t tl_us(struct eng_timeline *tl)
{
    return (hoop_now_ns() - tl->t0_ns) / 1000;
}

/* The track of a tensor name, made (and named in the file) on first use;
 * NULL once out of memory. */
static struct tl_name *tl_track(struct eng_timeline *tl, const char *name)
{
    unsigned h = 2166136261u;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++)
        h = (h ^ *s) * 16777619u;
    h %= TL_HASH;
    for (struct tl_name *t = tl->names[h]; t; t = t->next)
        if (strcmp(t->name, name) == 0)
            return t;
    struct tl_name *t = calloc(1, sizeof(*t));
    if (!t || !(t->name = strdup(name))) {
        free(t);
        tl->failed = 1;
        return NULL;
    }
    t->pid = ++tl->npids;
    t->next = tl->names[h];
    tl->names[h] = t;
    char esc[HOOP_ENGINE_NAME_MAX * 6 + 8];
    json_escape(name, esc, sizeof(esc));
    tl_append(tl,
              ",\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": "
              "\"%s\"}},\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, "
              "\"args\": {\"sort_index\": %d}}",
              t->pid, esc, t->pid, t->pid);
    return t;
}

struct eng_timeline *eng_timeline_open(const char *path, int rank, char *err, size_t err_len)
{
    struct eng_timeline *tl = calloc(1, sizeof(*tl));
    if (!tl) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    tl->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (tl->fd < 0) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        free(tl);
        return NULL;
    }
    tl->cap = 1 << 16;
    tl->buf = malloc(tl->cap);
    if (!tl->buf) {
        close(tl->fd);
        free(tl);
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    tl->t0_ns = hoop_now_ns();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    unsigned long long epoch_us =
        (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000;
    /* The array's first element has no leading comma; every later one
     * does, so it is written as part of the opening. */
    tl_append(tl,
              "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"name\": "
              "\"hoop rank %d\", \"start_time_since_epoch_in_micros\": %llu}}",
              rank, epoch_us);
    tl_append(tl, ",\n{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": "
                  "{\"sort_index\": 0}}");
    tl->end = 0;
    eng_timeline_flush(tl);
    return tl;
}

struct eng_timeline *eng_timeline_for(const struct hoop_engine *e, const char *path, char *err,
                                      size_t err_len)
{
    err[0] = '\0';
    if (e->rank != 0 && !e->tl_all)
        return NULL;
    char p[4200];
    if (e->tl_all)
        snprintf(p, sizeof(p), "%s.%d", path, e->rank);
    else
        snprintf(p, sizeof(p), "%s", path);
    return eng_timeline_open(p, e->rank, err, err_len);
}

void eng_timeline_begin(struct eng_timeline *tl, const char *tensor, const char *activity)
{
    struct tl_name *t = tl_track(tl, tensor);
    if (!t)
        return;
    t->open++;
    tl_append(tl, ",\n{\"ph\": \"B\", \"name\": \"%s\", \"ts\": %llu, \"pid\": %d, \"tid\": 0}",
              activity, (unsigned long long)tl_us(tl), t->pid);
}

void eng_timeline_end(struct eng_timeline *tl, const char *tensor, const char *args)
{
    struct tl_name *t = tl_track(tl, tensor);
    if (!t || !t->open) /* begun before this timeline started */
        return;
    t->open--;
    tl_append(tl, ",\n{\"ph\": \"E\", \"ts\": %llu, \"pid\": %d, \"tid\": 0%s%s}",
              (unsigned long long)tl_us(tl), t->pid, args ? ", \"args\": " : "", args ? args : "");
}

void eng_timeline_tick(struct eng_timeline *tl, const char *tensor, int rank)
{
    struct tl_name *t = tl_track(tl, tensor);
    if (!t)
        return;
    tl_append(tl,
              ",\n{\"ph\": \"X\", \"name\": \"%d\", \"ts\": %llu, \"dur\": 0, \"pid\": %d, "
              "\"tid\": 0}",
              rank, (unsigned long long)tl_us(tl), t->pid);
}

void eng_timeline_cycle(struct eng_timeline *tl)
{
    tl_append(tl,
              ",\n{\"ph\": \"i\", \"name\": \"CYCLE_START\", \"ts\": %llu, \"pid\": 0, "
              "\"tid\": 0, \"s\": \"g\"}",
              (unsigned long long)tl_us(tl));
}

void eng_timeline_flush(struct eng_timeline *tl)
{
    if (!tl || tl->failed || !tl->len)
        return;
    tl_append(tl, "\n]");
    if (tl->failed)
        return;
    size_t done = 0;
    while (done < tl->len) {
        ssize_t w = pwrite(tl->fd, tl->buf + done, tl->len - done, tl->end + (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            tl->failed = 1; /* the disk is full or gone: stop writing, keep running */
            return;
        }
        done += (size_t)w;
    }
    tl->end += (off_t)tl->len - 2;
    tl->len = 0;
}

void eng_timeline_close(struct eng_timeline *tl)
{
    if (!tl)
        return;
    eng_timeline_flush(tl);
    close(tl->fd);
    for (int i = 0; i < TL_HASH; i++)
        for (struct tl_name *t = tl->names[i], *n; t; t = n) {
            n = t->next;
            free(t->name);
            free(t);
        }
    free(tl->buf);
    free(tl);
}
