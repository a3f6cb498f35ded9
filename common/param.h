/* param.h - every HOOP_* variable, declared once in the table in param.c
 * (name, default, one line of doc). The README's table and
 * `ring_bench --params` come from the same place. */
#ifndef HOOP_COMMON_PARAM_H
#define HOOP_COMMON_PARAM_H

#include "hoop.h"

/* The variable's value from the environment, or its default when unset or
 * empty. Unknown names give "" (a bug in the caller). */
const char *hoop_param_str(const char *name);

/* 1 when the variable is set (non-empty) in the environment. */
int hoop_param_is_set(const char *name);

/* Parse `text` (named `name` in the error sentence) as an unsigned integer
 * with an optional K/M/G suffix (powers of 1024), within [min, max]. */
hoop_status_t hoop_param_parse_u64(const char *name, const char *text, unsigned long long min,
                                   unsigned long long max, unsigned long long *out);
hoop_status_t hoop_param_parse_double(const char *name, const char *text, double min, double max,
                                      double *out);

/* The same, reading the variable (or its default). */
hoop_status_t hoop_param_u64(const char *name, unsigned long long min, unsigned long long max,
                             unsigned long long *out);
hoop_status_t hoop_param_double(const char *name, double min, double max, double *out);

/* A variable that is auto or a whole number in [min, max] (K/M/G as
 * above): *is_auto 1 for auto (*out untouched), else 0 and the number in
 * *out; else HOOP_ERR_INVALID, "NAME='V' is neither auto nor a whole
 * number between MIN and MAX". */
hoop_status_t hoop_param_auto_u64(const char *name, unsigned long long min, unsigned long long max,
                                  int *is_auto, unsigned long long *out);

/* A variable that is auto, 0 or 1: *out 0, 1 or HOOP_PARAM_AUTO; else
 * HOOP_ERR_INVALID, "NAME=V is not auto, 0 or 1". */
#define HOOP_PARAM_AUTO 2
hoop_status_t hoop_param_auto01(const char *name, int *out);

/* Log a warning for each HOOP_* variable in the environment that the table
 * does not know (a typo would otherwise be ignored in silence). */
void hoop_param_warn_unknown(void);

#endif
