/* log.c - one line per call on stderr, written with a single write(2) so that
 * lines of several ranks sharing a terminal do not interleave mid-line. */
#include "common/log.h"
#include "common/clock.h"
#include "common/param.h"
#include "common/status.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int hoop_log_level = HOOP_LOG_WARN;
static pthread_once_t hoop_log_once = PTHREAD_ONCE_INIT;

static const char *const hoop_log_names[] = {"error", "warn", "info", "debug"};

static void hoop_log_read_level(void)
{
    const char *v = hoop_param_str("HOOP_LOG_LEVEL");
    for (int i = 0; i < 4; i++)
        if (strcasecmp(v, hoop_log_names[i]) == 0)
            hoop_log_level = i;
}

hoop_status_t hoop_log_check_level(void)
{
    const char *v = hoop_param_str("HOOP_LOG_LEVEL");
    for (int i = 0; i < 4; i++)
        if (strcasecmp(v, hoop_log_names[i]) == 0)
            return HOOP_OK;
    return hoop_error(HOOP_ERR_INVALID,
                      "HOOP_LOG_LEVEL='%s' is not one of error, warn, info or debug", v);
}

int hoop_log_enabled(enum hoop_log_level level)
{
    pthread_once(&hoop_log_once, hoop_log_read_level);
    return (int)level <= hoop_log_level;
}

__attribute__((format(printf, 2, 0))) static void hoop_vlog(enum hoop_log_level level,
                                                         const char *fmt, va_list ap)
{
    static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if (!hoop_log_enabled(level))
        return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "hoop %s [pid %d]: ", tags[level], (int)getpid());
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void hoop_log(enum hoop_log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hoop_vlog(level, fmt, ap);
    va_end(ap);
}

#define HOOP_LOG_LIMIT_WINDOW_NS 10000000000ull

void hoop_log_limit_flush(struct hoop_log_limit *lim, const char *who)
{
    if (lim->held)
        hoop_log(HOOP_LOG_WARN, "%s: %lu more like the above in %.0f s, not logged one by one",
                 who, lim->held, HOOP_LOG_LIMIT_WINDOW_NS / 1e9);
    lim->held = 0;
}

void hoop_log_limited(struct hoop_log_limit *lim, const char *who, const char *fmt, ...)
{
    uint64_t now = hoop_now_ns();
    if (now >= lim->window_end) {
        hoop_log_limit_flush(lim, who);
        lim->window_end = now + HOOP_LOG_LIMIT_WINDOW_NS;
        lim->shown = 0;
    }
    if (lim->shown >= HOOP_LOG_LIMIT_LINES) {
        lim->held++;
        return;
    }
    lim->shown++;
    va_list ap;
    va_start(ap, fmt);
    hoop_vlog(HOOP_LOG_WARN, fmt, ap);
    va_end(ap);
}
