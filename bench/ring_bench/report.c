/* report.c - a rank's errors on stderr, each naming the rank. */
#include "bench/ring_bench/ring_bench.h"

static const char *rank_label(const struct bench *b, char *buf, size_t len)
{
    if (b && b->have_rank) {
        snprintf(buf, len, "%d", b->rank);
        return buf;
    }
    /* Before the communicator exists the rank is whatever the launcher said. */
    const char *env = getenv("HOOP_RANK");
    return env && *env ? env : "0";
}

void report_hoop_error(const struct bench *b, hoop_status_t st)
{
    char buf[32];
    const char *msg = hoop_last_error();
    if (!msg || !*msg)
        msg = hoop_status_str(st);
    /* The library's sentences name the rank already. */
    if (strncmp(msg, "rank ", 5) == 0)
        fprintf(stderr, "ring_bench: %s\n", msg);
    else
        fprintf(stderr, "ring_bench: rank %s: %s\n", rank_label(b, buf, sizeof buf), msg);
}

void report_error(const struct bench *b, const char *fmt, ...)
{
    char buf[32];
    va_list ap;
    fprintf(stderr, "ring_bench: rank %s: ", rank_label(b, buf, sizeof buf));
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
