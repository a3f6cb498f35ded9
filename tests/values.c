/* values.c - see values.h. */
#include "values.h"

#include <stdio.h>

bool values_is_float(hoop_dtype_t dt)
{
    return dt == HOOP_F16 || dt == HOOP_BF16 || dt == HOOP_F32 || dt == HOOP_F64;
}

bool values_is_signed(hoop_dtype_t dt)
{
    return dt == HOOP_I8 || dt == HOOP_I16 || dt == HOOP_I32 || dt == HOOP_I64 ||
           values_is_float(dt);
}

/* Largest total a sum of non-negative inputs may reach and stay exact in dt:
 * i8/u8 range, and the integers that bf16 (8 significant bits) and f16 (11)
 * hold exactly. */
static int64_t sum_limit(hoop_dtype_t dt)
{
    switch (dt) {
    case HOOP_I8: return 127;
    case HOOP_U8: return 255;
    case HOOP_BF16: return 256;
    case HOOP_F16: return 2048;
    default: return 1000;
    }
}

int64_t values_input(values_hash_fn hash, hoop_dtype_t dt, hoop_op_t op, int nranks, int rank,
                     size_t i)
{
    uint32_t h = hash(i);
    switch (op) {
    case HOOP_SUM:
    case HOOP_AVG: {
        int64_t m = sum_limit(dt) / nranks;
        if (m < 1)
            m = 1;
        int64_t v = (int64_t)(((uint64_t)h * 7u + (uint64_t)rank * 13u) % (uint64_t)(m + 1));
        /* Centred on zero for signed types: the sum still stays within
         * N * (m + 1) / 2 of zero, and a negative sum shows whether avg
         * truncates toward zero. */
        return values_is_signed(dt) ? v - (m + 1) / 2 : v;
    }
    case HOOP_PROD:
        /* 1 or 2: every partial product is a power of two (at most 2^8),
         * exact in any float type; i8/u8 wrap at 2^7/2^8. */
        return 1 + (int64_t)((h >> rank) & 1u);
    case HOOP_MIN:
    case HOOP_MAX: {
        int64_t v = (int64_t)(((uint64_t)h + (uint64_t)rank * 13u) % 97u);
        /* Negative values catch a signed type compared as unsigned. */
        return values_is_signed(dt) ? v - 48 : v;
    }
    default: return 0;
    }
}

/* Integers are stored modulo 2^bits (two's complement), which is also how
 * the product of signed integers is expected to wrap. */
void values_put_int(void *buf, size_t i, hoop_dtype_t dt, uint64_t v)
{
    switch (dt) {
    case HOOP_I8:
    case HOOP_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HOOP_I16:
    case HOOP_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
    case HOOP_I32:
    case HOOP_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case HOOP_I64:
    case HOOP_U64: ((uint64_t *)buf)[i] = v; break;
    default: break;
    }
}

void values_put_float(void *buf, size_t i, hoop_dtype_t dt, double v)
{
    switch (dt) {
    case HOOP_F16: ((uint16_t *)buf)[i] = hoop_f32_to_f16((float)v); break;
    case HOOP_BF16: ((uint16_t *)buf)[i] = hoop_f32_to_bf16((float)v); break;
    case HOOP_F32: ((float *)buf)[i] = (float)v; break;
    case HOOP_F64: ((double *)buf)[i] = v; break;
    default: break;
    }
}

void values_put_value(void *buf, size_t i, hoop_dtype_t dt, int64_t v)
{
    if (values_is_float(dt))
        values_put_float(buf, i, dt, (double)v);
    else
        values_put_int(buf, i, dt, (uint64_t)v);
}

void values_put_input(void *buf, size_t from, size_t n, values_hash_fn hash, hoop_dtype_t dt,
                      hoop_op_t op, int nranks, int rank)
{
    for (size_t k = 0; k < n; k++)
        values_put_value(buf, k, dt, values_input(hash, dt, op, nranks, rank, from + k));
}

void values_put_expected(void *buf, size_t from, size_t n, values_hash_fn hash, hoop_dtype_t dt,
                         hoop_op_t op, int nranks)
{
    for (size_t k = 0; k < n; k++) {
        size_t i = from + k;
        int64_t acc = values_input(hash, dt, op, nranks, 0, i);
        uint64_t prod = (uint64_t)acc;
        double fprod = (double)acc;
        for (int r = 1; r < nranks; r++) {
            int64_t v = values_input(hash, dt, op, nranks, r, i);
            switch (op) {
            case HOOP_SUM:
            case HOOP_AVG: acc += v; break;
            case HOOP_PROD:
                prod *= (uint64_t)v;
                fprod *= (double)v;
                break;
            case HOOP_MIN: acc = v < acc ? v : acc; break;
            case HOOP_MAX: acc = v > acc ? v : acc; break;
            default: break;
            }
        }
        if (op == HOOP_PROD) {
            if (values_is_float(dt))
                values_put_float(buf, k, dt, fprod);
            else
                values_put_int(buf, k, dt, prod);
        } else if (op == HOOP_AVG) {
            switch (dt) {
            case HOOP_F64: values_put_float(buf, k, dt, (double)acc / nranks); break;
            case HOOP_F32:
            case HOOP_F16:
            case HOOP_BF16:
                values_put_float(buf, k, dt, (double)((float)acc / (float)nranks));
                break;
            default: values_put_int(buf, k, dt, (uint64_t)(acc / nranks)); break;
            }
        } else {
            values_put_value(buf, k, dt, acc);
        }
    }
}

void values_hex_elem(char *out, size_t outlen, const void *buf, size_t i, size_t es)
{
    const uint8_t *b = (const uint8_t *)buf + i * es;
    size_t used = 0;
    out[0] = '\0';
    /* Little-endian machine: print the most significant byte first. */
    for (size_t k = es; k-- > 0 && used + 3 < outlen;)
        used += (size_t)snprintf(out + used, outlen - used, "%02x", b[k]);
}
