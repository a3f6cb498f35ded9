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

#define HOOP_WARN(...) hoop_log(HOOP_LOG_WARN, __VA_ARGS__)
#define HOOP_INFO(...) hoop_log(HOOP_LOG_INFO, __VA_ARGS__)
#define HOOP_DEBUG(...) hoop_log(HOOP_LOG_DEBUG, __VA_ARGS__)

#endif
