/* log.h - the library's log, on stderr only (never stdout).
 * HOOP_LOG_LEVEL = error | warn | info | debug (default warn). */
#ifndef HOOP_COMMON_LOG_H
#define HOOP_COMMON_LOG_H

#include "hoop.h"

enum hoop_log_level { HOOP_LOG_ERROR = 0, HOOP_LOG_WARN, HOOP_LOG_INFO, HOOP_LOG_DEBUG };

/* HOOP_ERR_INVALID, with a sentence, when HOOP_LOG_LEVEL is set to none of
 * the levels (hoop_comm_init refuses it). */
hoop_status_t hoop_log_check_level(void);
int hoop_log_enabled(enum hoop_log_level level);
void hoop_log(enum hoop_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Warnings that someone outside the job can cause (a flood of strangers on
 * a port) go through a limit: the first HOOP_LOG_LIMIT_LINES of each
 * 10 s window are logged, the rest only counted, and the count is logged
 * as one line (starting with `who`) when the window is over, at the next
 * warning or at hoop_log_limit_flush. Zeroed is a fresh limit. */
#define HOOP_LOG_LIMIT_LINES 5
struct hoop_log_limit {
    unsigned long long window_end; /* ns, 0: no window yet */
    unsigned shown;                /* lines logged in this window */
    unsigned long held;            /* lines counted since the last count was logged */
};

void hoop_log_limited(struct hoop_log_limit *lim, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void hoop_log_limit_flush(struct hoop_log_limit *lim, const char *who);

#define HOOP_WARN(...) hoop_log(HOOP_LOG_WARN, __VA_ARGS__)
#define HOOP_INFO(...) hoop_log(HOOP_LOG_INFO, __VA_ARGS__)
#define HOOP_DEBUG(...) hoop_log(HOOP_LOG_DEBUG, __VA_ARGS__)

#endif
