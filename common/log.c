/* log.c - one line per call on stderr, written with a single write(2) so that
 * lines of several ranks sharing a terminal do not interleave mid-line. */
#include "common/log.h"
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

void hoop_log(enum hoop_log_level level, const char *fmt, ...)
{
    static const char *tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    if (!hoop_log_enabled(level))
        return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "hoop %s [pid %d]: ", tags[level], (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
