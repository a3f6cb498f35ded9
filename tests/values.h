/* values.h - the data ranks reduce in the collective tests: inputs every
 * rank can compute for every other rank (a function of dtype, op, rank and
 * a hash of the element index), chosen so that the exact result does not
 * depend on the order of the reduction, and that exact result. */
#ifndef HOOP_TESTS_VALUES_H
#define HOOP_TESTS_VALUES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hoop.h"

/* The hash through which element i enters its value: a caller's choice, so
 * that the input has no short period (a chunk delivered to the wrong offset
 * would otherwise carry the very values expected there). */
typedef uint32_t (*values_hash_fn)(uint64_t i);

bool values_is_float(hoop_dtype_t dt);
bool values_is_signed(hoop_dtype_t dt);

/* Rank `rank`'s input at element i. */
int64_t values_input(values_hash_fn hash, hoop_dtype_t dt, hoop_op_t op, int nranks, int rank,
                     size_t i);

/* Store v as element i of buf: integers modulo 2^bits, floats rounded to dt. */
void values_put_int(void *buf, size_t i, hoop_dtype_t dt, uint64_t v);
void values_put_float(void *buf, size_t i, hoop_dtype_t dt, double v);
void values_put_value(void *buf, size_t i, hoop_dtype_t dt, int64_t v);

/* Elements [0, n) of buf get rank's input at elements [from, from + n). */
void values_put_input(void *buf, size_t from, size_t n, values_hash_fn hash, hoop_dtype_t dt,
                      hoop_op_t op, int nranks, int rank);

/* Elements [0, n) of buf get the reduction over all ranks of elements
 * [from, from + n). */
void values_put_expected(void *buf, size_t from, size_t n, values_hash_fn hash, hoop_dtype_t dt,
                         hoop_op_t op, int nranks);

/* Element i (es bytes) of buf in hex, most significant byte first. */
void values_hex_elem(char *out, size_t outlen, const void *buf, size_t i, size_t es);

#endif
