/* output.c - the ranks' output: read from their pipes, forwarded whole lines at
 * a time, tagged with the rank. */
#include "tools/hooprun/hooprun.h"

struct outbuf out_stdout, out_stderr;
static char scratch[LINE_MAX_BYTES + 1];

void outbuf_init(struct outbuf *o, int fd)
{
    struct stat st;
    o->fd = fd;
    o->len = 0;
    o->broken = false;
    /* A pipe or socket that polls writable takes PIPE_BUF bytes without
     * blocking; a larger write could block with the job left unattended. */
    if (fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
        o->chunk = SIZE_MAX;
    else
        o->chunk = PIPE_BUF;
}

/* Write everything, waiting while the reader is slow. The wait also watches
 * the signalfd and the deadlines, so that a reader that stopped reading does
 * not keep hooprun from stopping the job; once the job is abandoned, what
 * cannot be written is dropped. */
void out_flush(struct outbuf *o)
{
    const char *p = o->data;
    size_t n = o->len;
    o->len = 0;
    while (n > 0 && !o->broken && !J.abandon) {
        struct pollfd pf[2] = {{.fd = o->fd, .events = POLLOUT}, {.fd = J.sigfd, .events = POLLIN}};
        int pr = poll(pf, 2, ms_until(next_deadline(false)));
        if (pr < 0 && errno != EINTR) {
            o->broken = true;
            break;
        }
        if (pr > 0 && pf[1].revents)
            read_signals();
        /* Without reaping here, a rank that died while the reader stalled
         * would be counted as alive, and the job not stopped for it. */
        reap(false);
        check_deadlines();
        if (pr <= 0 || !pf[0].revents)
            continue;
        ssize_t w = write(o->fd, p, n < o->chunk ? n : o->chunk);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            continue;
        } else {
            /* EPIPE and the like: nobody reads any more. The ranks may still
             * be doing useful work, so the job goes on. */
            o->broken = true;
        }
    }
}

static void emit(int rank, struct outbuf *o, const char *p, size_t n, bool has_newline)
{
    char prefix[16];
    size_t plen = 0;
    if (J.opt.tag) {
        int k = snprintf(prefix, sizeof prefix, "[%d] ", rank);
        plen = k > 0 ? (size_t)k : 0;
    }
    /* Tagged output must end every piece with a newline, or the next tag
     * would land mid-line; untagged output is passed through as it came. */
    size_t extra = J.opt.tag && !has_newline ? 1 : 0;
    if (o->len + plen + n + extra > sizeof o->data)
        out_flush(o);
    memcpy(o->data + o->len, prefix, plen);
    memcpy(o->data + o->len + plen, p, n);
    o->len += plen + n;
    if (extra)
        o->data[o->len++] = '\n';
}

/* Forward the whole lines of data[0..len) and the pieces of an over-long
 * line; return how many bytes were consumed (the rest is an unfinished
 * line of at most LINE_MAX_BYTES). */
static size_t emit_lines(int rank, struct outbuf *o, const char *data, size_t len)
{
    size_t start = 0;
    for (;;) {
        const char *nl = memchr(data + start, '\n', len - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - data) + 1;
        emit(rank, o, data + start, end - start, true);
        start = end;
    }
    while (len - start > LINE_MAX_BYTES) {
        emit(rank, o, data + start, LINE_MAX_BYTES, false);
        start += LINE_MAX_BYTES;
    }
    return start;
}

static struct outbuf *dest_of(int which)
{
    return which == 0 ? &out_stdout : &out_stderr;
}

void stream_close(int rank, int which)
{
    struct stream *s = &J.ranks[rank].io[which];
    if (s->len > 0) {
        emit(rank, dest_of(which), s->buf, s->len, false);
        out_flush(dest_of(which));
    }
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
    close(s->fd);
    s->fd = -1;
}

/* One read from a rank's pipe. Returns false when nothing more is to be had
 * now (would block, or the pipe was closed). */
bool stream_read(int rank, int which)
{
    struct stream *s = &J.ranks[rank].io[which];
    struct outbuf *o = dest_of(which);
    char *base = s->buf ? s->buf : scratch;
    ssize_t n = read(s->fd, base + s->len, LINE_MAX_BYTES + 1 - s->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    if (n <= 0) {
        stream_close(rank, which);
        return false;
    }
    size_t total = s->len + (size_t)n;
    size_t used = emit_lines(rank, o, base, total);
    size_t rest = total - used;
    if (rest > 0 && !s->buf) {
        s->buf = malloc(LINE_MAX_BYTES + 1);
        if (!s->buf) {
            /* Better a line cut in two than output lost. */
            emit(rank, o, base + used, rest, false);
            used = total;
            rest = 0;
        }
    }
    if (rest > 0)
        memmove(s->buf, base + used, rest);
    s->len = rest;
    out_flush(o);
    return true;
}

/* Take in what a rank left in its pipes before saying that it failed, so
 * that its last words come before hooprun's. Bounded, because a descendant
 * may still be writing. */
void drain_rank(int rank)
{
    for (int which = 0; which < 2; which++)
        for (int i = 0; i < 64 && J.ranks[rank].io[which].fd >= 0; i++)
            if (!stream_read(rank, which))
                break;
}
