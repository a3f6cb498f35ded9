/* test_api.c - the parts of the public API that need no second process:
 * argument checking, names, f16/bf16 conversions, the parameter table.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hoop.h"
#include "common/param.h"

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- bad arguments -------------------------------------------------------- */

static hoop_comm_t *one_rank_comm(void)
{
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.rank = 0;
    cfg.size = 1;
    cfg.bootstrap_timeout_s = 10.0;
    cfg.timeout_s = 10.0;
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    cr_assert_eq(st, HOOP_OK, "one-rank hoop_comm_init: %s: %s", hoop_status_str(st),
                 hoop_last_error());
    cr_assert_not_null(comm);
    return comm;
}

static void expect_invalid_call(const char *what, hoop_comm_t *comm, const void *send,
                                void *recv, size_t count, hoop_dtype_t dt, hoop_op_t op)
{
    hoop_status_t st = hoop_allreduce(comm, send, recv, count, dt, op);
    const char *msg = hoop_last_error();
    cr_assert_eq(st, HOOP_ERR_INVALID, "allreduce with %s: got %s (%s), expected %s", what,
                 hoop_status_str(st), msg, hoop_status_str(HOOP_ERR_INVALID));
    cr_assert(msg && msg[0], "allreduce with %s: HOOP_ERR_INVALID but no message", what);
    cr_assert(strstr(msg, "allreduce"), "allreduce with %s: message does not name the "
                                        "operation \"allreduce\": %s",
              what, msg);
}

Test(api, allreduce_rejects_bad_arguments)
{
    hoop_comm_t *comm = one_rank_comm();
    float buf[17], out[16];
    for (int i = 0; i < 17; i++)
        buf[i] = (float)i * 1.5f - 3.0f;

    expect_invalid_call("a NULL communicator", NULL, buf, out, 16, HOOP_F32, HOOP_SUM);
    expect_invalid_call("a NULL sendbuf", comm, NULL, out, 16, HOOP_F32, HOOP_SUM);
    expect_invalid_call("a NULL recvbuf", comm, buf, NULL, 16, HOOP_F32, HOOP_SUM);
    expect_invalid_call("NULL sendbuf and recvbuf", comm, NULL, NULL, 1, HOOP_F32, HOOP_SUM);
    expect_invalid_call("dtype HOOP_DTYPE_COUNT", comm, buf, out, 16, HOOP_DTYPE_COUNT,
                        HOOP_SUM);
    expect_invalid_call("dtype -1", comm, buf, out, 16, (hoop_dtype_t)-1, HOOP_SUM);
    expect_invalid_call("dtype 1000", comm, buf, out, 16, (hoop_dtype_t)1000, HOOP_SUM);
    expect_invalid_call("op HOOP_OP_COUNT", comm, buf, out, 16, HOOP_F32, HOOP_OP_COUNT);
    expect_invalid_call("op -1", comm, buf, out, 16, HOOP_F32, (hoop_op_t)-1);
    expect_invalid_call("recvbuf one element after sendbuf", comm, buf, buf + 1, 16, HOOP_F32,
                        HOOP_SUM);
    expect_invalid_call("recvbuf one element before sendbuf", comm, buf + 1, buf, 16,
                        HOOP_F32, HOOP_SUM);

    /* Rejected calls must leave the communicator usable. */
    for (int i = 0; i < 16; i++)
        out[i] = -99.0f;
    hoop_status_t st = hoop_allreduce(comm, buf, out, 16, HOOP_F32, HOOP_SUM);
    cr_assert_eq(st, HOOP_OK, "valid allreduce after rejected ones: %s: %s",
                 hoop_status_str(st), hoop_last_error());
    cr_assert(memcmp(buf, out, sizeof out) == 0,
              "a one-rank f32 sum after rejected calls is not a copy of the input");
    st = hoop_allreduce(comm, NULL, NULL, 0, HOOP_F32, HOOP_SUM);
    cr_assert_eq(st, HOOP_OK, "allreduce of 0 elements with NULL buffers: %s: %s",
                 hoop_status_str(st), hoop_last_error());
    cr_assert_eq(hoop_comm_destroy(comm), HOOP_OK, "%s", hoop_last_error());
}

Test(api, null_handles)
{
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.rank = 0;
    cfg.size = 1;
    hoop_status_t st = hoop_comm_init(NULL, &cfg);
    cr_assert_eq(st, HOOP_ERR_INVALID, "hoop_comm_init(NULL, cfg) returned %s",
                 hoop_status_str(st));
    cr_assert(hoop_last_error()[0] != '\0', "hoop_comm_init(NULL, cfg): no message");
    cr_assert_eq(hoop_comm_destroy(NULL), HOOP_OK, "hoop_comm_destroy(NULL)");
    cr_assert_eq(hoop_comm_rank(NULL), -1);
    cr_assert_eq(hoop_comm_size(NULL), -1);
    cr_assert_eq(hoop_comm_local_rank(NULL), -1);
    cr_assert_eq(hoop_comm_local_size(NULL), -1);
    cr_assert_eq(hoop_comm_cross_rank(NULL), -1);
    cr_assert_eq(hoop_comm_cross_size(NULL), -1);
    cr_assert_eq(hoop_comm_is_homogeneous(NULL), -1);
}

Test(api, config_init_marks_everything_unset)
{
    hoop_config_t cfg;
    memset(&cfg, 0x5a, sizeof cfg);
    hoop_config_init(&cfg);
    cr_assert_eq(cfg.struct_size, sizeof(hoop_config_t));
    cr_assert_eq(cfg.rank, -1);
    cr_assert_eq(cfg.size, -1);
    cr_assert_null(cfg.root);
    cr_assert_null(cfg.token);
    cr_assert(cfg.bootstrap_timeout_s <= 0);
    cr_assert(cfg.timeout_s <= 0);
    cr_assert_eq(cfg.chunk_bytes, 0);
    cr_assert_eq(cfg.pipeline_depth, 0);
}

/* ---- names ---------------------------------------------------------------- */

static void expect_distinct_names(const char *kind, const char *(*name_of)(int), int n)
{
    for (int i = 0; i < n; i++) {
        const char *a = name_of(i);
        cr_assert(a && a[0], "%s %d has no name", kind, i);
        for (int j = 0; j < i; j++)
            cr_assert(strcmp(a, name_of(j)) != 0, "%s %d and %d are both called \"%s\"", kind,
                      j, i, a);
    }
}

static const char *status_name(int i)
{
    return hoop_status_str((hoop_status_t)i);
}

static const char *dtype_name(int i)
{
    return hoop_dtype_str((hoop_dtype_t)i);
}

static const char *op_name(int i)
{
    return hoop_op_str((hoop_op_t)i);
}

Test(api, names_are_distinct_and_parse_back)
{
    expect_distinct_names("status", status_name, HOOP_ERR_ABORTED + 1);
    expect_distinct_names("dtype", dtype_name, HOOP_DTYPE_COUNT);
    expect_distinct_names("op", op_name, HOOP_OP_COUNT);
    for (int i = 0; i < HOOP_DTYPE_COUNT; i++)
        cr_assert_eq(hoop_dtype_parse(dtype_name(i)), i, "hoop_dtype_parse(\"%s\")",
                     dtype_name(i));
    for (int i = 0; i < HOOP_OP_COUNT; i++)
        cr_assert_eq(hoop_op_parse(op_name(i)), i, "hoop_op_parse(\"%s\")", op_name(i));
    cr_assert_eq(hoop_dtype_parse("nope"), -1);
    cr_assert_eq(hoop_op_parse("nope"), -1);
    cr_assert_eq(hoop_dtype_parse(""), -1);
    cr_assert_eq(hoop_op_parse(""), -1);
}

Test(api, dtype_sizes)
{
    static const size_t want[HOOP_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 2, 2};
    for (int i = 0; i < HOOP_DTYPE_COUNT; i++)
        cr_assert_eq(hoop_dtype_size((hoop_dtype_t)i), want[i], "hoop_dtype_size(%s) = %zu",
                     dtype_name(i), hoop_dtype_size((hoop_dtype_t)i));
    cr_assert_eq(hoop_dtype_size(HOOP_DTYPE_COUNT), 0, "size of an unknown dtype");
}

/* ---- f16 ------------------------------------------------------------------ */

static bool f16_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

/* Decoding written out from the format, independent of the library. */
static float f16_ref(uint16_t h)
{
    int exp = (h >> 10) & 0x1f;
    int mant = h & 0x3ff;
    float mag;
    if (exp == 0)
        mag = ldexpf((float)mant, -24);
    else if (exp == 31)
        mag = mant ? NAN : INFINITY;
    else
        mag = ldexpf((float)(1024 + mant), exp - 25);
    return (h & 0x8000u) ? -mag : mag;
}

Test(api, f16_decodes_every_pattern)
{
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        float got = hoop_f16_to_f32((unsigned short)h);
        if (f16_is_nan((uint16_t)h)) {
            cr_assert(isnan(got), "f16 0x%04x is a NaN, decoded as %g", h, (double)got);
            continue;
        }
        float want = f16_ref((uint16_t)h);
        cr_assert_eq(f32_bits(got), f32_bits(want), "f16 0x%04x decodes to %a, expected %a", h,
                     (double)got, (double)want);
    }
}

Test(api, f16_round_trips_every_pattern)
{
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        unsigned short back = hoop_f32_to_f16(hoop_f16_to_f32((unsigned short)h));
        if (f16_is_nan((uint16_t)h))
            cr_assert(f16_is_nan(back), "NaN 0x%04x came back as 0x%04x", h, back);
        else
            cr_assert_eq(back, h, "f16 0x%04x came back as 0x%04x", h, back);
    }
}

Test(api, f16_known_values)
{
    cr_assert_eq(hoop_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(hoop_f32_to_f16(65504.0f), 0x7bff);
    cr_assert_eq(hoop_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    cr_assert_eq(hoop_f32_to_f16(-0.0f), 0x8000);
    cr_assert_eq(hoop_f32_to_f16(0.0f), 0x0000);
    cr_assert_eq(hoop_f32_to_f16(INFINITY), 0x7c00);
    cr_assert_eq(hoop_f32_to_f16(-INFINITY), 0xfc00);
    cr_assert_eq(hoop_f32_to_f16(-2.0f), 0xc000);
    cr_assert_eq(hoop_f32_to_f16(ldexpf(1.0f, -14)), 0x0400, "smallest normal");
    cr_assert_eq(f32_bits(hoop_f16_to_f32(0x3c00)), f32_bits(1.0f));
    cr_assert_eq(f32_bits(hoop_f16_to_f32(0x8000)), f32_bits(-0.0f));
    cr_assert_eq(f32_bits(hoop_f16_to_f32(0x7c00)), f32_bits(INFINITY));
}

Test(api, f16_rounds_to_nearest_even)
{
    /* Ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 (even: 1). */
    cr_assert_eq(hoop_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    cr_assert_eq(hoop_f32_to_f16(1.0f + 3.0f * ldexpf(1.0f, -11)), 0x3c02);
    cr_assert_eq(hoop_f32_to_f16(-(1.0f + 3.0f * ldexpf(1.0f, -11))), 0xbc02);
    /* Just above a tie goes up. */
    cr_assert_eq(hoop_f32_to_f16(nextafterf(1.0f + ldexpf(1.0f, -11), 2.0f)), 0x3c01);
    /* Subnormal ties: 2^-25 lies between 0 and 2^-24, 3 * 2^-25 between 1 and 2 ulps. */
    cr_assert_eq(hoop_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);
    cr_assert_eq(hoop_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);
    cr_assert_eq(hoop_f32_to_f16(-ldexpf(1.0f, -25)), 0x8000);
    cr_assert_eq(hoop_f32_to_f16(1e-10f), 0x0000, "underflow to zero");
    cr_assert_eq(hoop_f32_to_f16(-1e-10f), 0x8000, "underflow keeps the sign");
}

Test(api, f16_overflows_to_infinity)
{
    cr_assert_eq(hoop_f32_to_f16(65520.0f), 0x7c00, "65520 is the tie above the maximum");
    cr_assert_eq(hoop_f32_to_f16(-65520.0f), 0xfc00);
    cr_assert_eq(hoop_f32_to_f16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    cr_assert_eq(hoop_f32_to_f16(1e10f), 0x7c00);
    cr_assert_eq(hoop_f32_to_f16(FLT_MAX), 0x7c00);
    cr_assert_eq(hoop_f32_to_f16(-FLT_MAX), 0xfc00);
}

Test(api, f16_keeps_nan)
{
    /* Payloads only in the low bits would truncate to an infinity. */
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                    0x7fffffffu, 0x7f801000u};
    for (size_t k = 0; k < sizeof nans / sizeof nans[0]; k++) {
        unsigned short h = hoop_f32_to_f16(f32_from_bits(nans[k]));
        cr_assert(f16_is_nan(h), "f32 NaN 0x%08x became f16 0x%04x", nans[k], h);
    }
}

/* Every midpoint between neighbouring f16 values is a tie that must go to the
 * even one, and one f32 ulp either side must go to the nearer one. */
Test(api, f16_rounds_every_midpoint)
{
    for (uint32_t h = 0; h < 0x7bff; h++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t sign = neg ? 0x8000 : 0;
            uint16_t lo = (uint16_t)(h | sign), hi = (uint16_t)((h + 1) | sign);
            float a = f16_ref(lo), b = f16_ref(hi);
            float mid = (a + b) / 2.0f;
            uint16_t even = (h & 1u) ? hi : lo;
            cr_assert_eq(hoop_f32_to_f16(mid), even, "tie %a between 0x%04x and 0x%04x",
                         (double)mid, lo, hi);
            cr_assert_eq(hoop_f32_to_f16(nextafterf(mid, a)), lo, "just below %a", (double)mid);
            cr_assert_eq(hoop_f32_to_f16(nextafterf(mid, b)), hi, "just above %a", (double)mid);
        }
    }
}

/* ---- bf16 ----------------------------------------------------------------- */

static bool bf16_is_nan(uint16_t h)
{
    return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0;
}

static float bf16_ref(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

Test(api, bf16_decodes_and_round_trips_every_pattern)
{
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        float got = hoop_bf16_to_f32((unsigned short)h);
        unsigned short back = hoop_f32_to_bf16(got);
        if (bf16_is_nan((uint16_t)h)) {
            cr_assert(isnan(got), "bf16 0x%04x is a NaN, decoded as %g", h, (double)got);
            cr_assert(bf16_is_nan(back), "NaN 0x%04x came back as 0x%04x", h, back);
            continue;
        }
        cr_assert_eq(f32_bits(got), f32_bits(bf16_ref((uint16_t)h)),
                     "bf16 0x%04x decodes to %a", h, (double)got);
        cr_assert_eq(back, h, "bf16 0x%04x came back as 0x%04x", h, back);
    }
}

Test(api, bf16_known_values_and_rounding)
{
    cr_assert_eq(hoop_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(hoop_f32_to_bf16(-0.0f), 0x8000);
    cr_assert_eq(hoop_f32_to_bf16(INFINITY), 0x7f80);
    cr_assert_eq(hoop_f32_to_bf16(-INFINITY), 0xff80);
    cr_assert_eq(hoop_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80, "tie goes to even");
    cr_assert_eq(hoop_f32_to_bf16(1.0f + 3.0f * ldexpf(1.0f, -8)), 0x3f82, "tie goes to even");
    cr_assert_eq(hoop_f32_to_bf16(nextafterf(1.0f + ldexpf(1.0f, -8), 2.0f)), 0x3f81);
    cr_assert_eq(hoop_f32_to_bf16(FLT_MAX), 0x7f80, "FLT_MAX is above the last tie");
    cr_assert_eq(hoop_f32_to_bf16(-FLT_MAX), 0xff80);
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,
                                    0x7fffffffu, 0x7f808000u};
    for (size_t k = 0; k < sizeof nans / sizeof nans[0]; k++) {
        unsigned short h = hoop_f32_to_bf16(f32_from_bits(nans[k]));
        cr_assert(bf16_is_nan(h), "f32 NaN 0x%08x became bf16 0x%04x", nans[k], h);
    }
}

Test(api, bf16_rounds_every_midpoint)
{
    /* 0x7f7f to 0x7f80 included: the tie above the maximum rounds to infinity. */
    for (uint32_t h = 0; h < 0x7f80; h++) {
        for (int neg = 0; neg < 2; neg++) {
            uint16_t sign = neg ? 0x8000 : 0;
            uint16_t lo = (uint16_t)(h | sign), hi = (uint16_t)((h + 1) | sign);
            /* The midpoint has one more significant bit than bf16: exact in f32. */
            uint32_t mid_bits = ((uint32_t)lo << 16) | 0x8000u;
            float mid = f32_from_bits(mid_bits);
            uint16_t even = (h & 1u) ? hi : lo;
            cr_assert_eq(hoop_f32_to_bf16(mid), even, "tie 0x%08x between 0x%04x and 0x%04x",
                         mid_bits, lo, hi);
            cr_assert_eq(hoop_f32_to_bf16(f32_from_bits(mid_bits - 1)), lo,
                         "just below the tie 0x%08x", mid_bits);
            cr_assert_eq(hoop_f32_to_bf16(f32_from_bits(mid_bits + 1)), hi,
                         "just above the tie 0x%08x", mid_bits);
        }
    }
}

/* ---- parameters ----------------------------------------------------------- */

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap)
            break;
        cap *= 2;
        char *grown = realloc(buf, cap + 1);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
    }
    fclose(f);
    if (buf)
        buf[len] = '\0';
    return buf;
}

static bool is_name_char(char c)
{
    return isupper((unsigned char)c) || isdigit((unsigned char)c) || c == '_';
}

/* As a whole word, so that HOOP_LOG does not count as documented because
 * HOOP_LOG_LEVEL is. */
static bool mentions(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        bool start_ok = p == text || !is_name_char(p[-1]);
        if (start_ok && !is_name_char(p[n]))
            return true;
    }
    return false;
}

Test(api, parameters_are_documented)
{
    int n = hoop_param_count();
    cr_assert_gt(n, 0, "hoop_param_count() = %d", n);
    const char *ignored_def, *ignored_doc;
    cr_assert_null(hoop_param_info(n, &ignored_def, &ignored_doc),
                   "hoop_param_info(count) must be NULL");
    cr_assert_null(hoop_param_info(-1, &ignored_def, &ignored_doc),
                   "hoop_param_info(-1) must be NULL");

    const char *dir = getenv("HOOP_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s%sdocs/configuration.md", dir ? dir : "", dir ? "/" : "");
    char *doc_text = read_file(path);
    cr_assert_not_null(doc_text,
                       "cannot read %s (set HOOP_SOURCE_DIR to the source tree, or run from "
                       "it): every HOOP_* variable must be documented there",
                       path);

    for (int i = 0; i < n; i++) {
        const char *def = NULL, *doc = NULL;
        const char *name = hoop_param_info(i, &def, &doc);
        cr_assert_not_null(name, "parameter %d has no name", i);
        cr_assert(strncmp(name, "HOOP_", 5) == 0 && name[5], "parameter %d is called \"%s\"",
                  i, name);
        cr_assert_not_null(def, "%s has a NULL default", name);
        cr_assert(doc && doc[0], "%s has no documentation", name);
        for (int j = 0; j < i; j++)
            cr_assert(strcmp(name, hoop_param_info(j, &ignored_def, &ignored_doc)) != 0,
                      "%s is listed twice", name);
        cr_assert(mentions(doc_text, name), "%s is not mentioned in %s", name, path);
    }
    free(doc_text);
}

/* auto, or a number within the bounds (suffixes as every number), or an
 * error that names the variable, the value and the bounds. */
Test(api, auto_or_number_parameters)
{
    static const struct {
        const char *v;
        int ok, is_auto;
        unsigned long long out;
    } cases[] = {
        {"auto", 1, 1, 77},    {"0", 1, 0, 0},     {"16", 1, 0, 16}, {"2K", 1, 0, 2048},
        {"1000001", 0, 0, 77}, {"fast", 0, 0, 77}, {"-1", 0, 0, 77}, {"autox", 0, 0, 77},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert(setenv("HOOP_BUSY_POLL_US", cases[i].v, 1) == 0);
        unsigned long long out = 77;
        int is_auto = -1;
        hoop_status_t st = hoop_param_auto_u64("HOOP_BUSY_POLL_US", 0, 1000000, &is_auto, &out);
        if (cases[i].ok) {
            cr_assert_eq(st, HOOP_OK, "'%s': %s", cases[i].v, hoop_last_error());
            cr_assert_eq(is_auto, cases[i].is_auto, "'%s': is_auto %d", cases[i].v, is_auto);
            cr_assert_eq(out, cases[i].out, "'%s': %llu", cases[i].v, out);
            continue;
        }
        cr_assert_eq(st, HOOP_ERR_INVALID, "'%s' was taken (%llu)", cases[i].v, out);
        char want[128];
        snprintf(want, sizeof want,
                 "HOOP_BUSY_POLL_US='%s' is neither auto nor a whole number between 0 and 1000000",
                 cases[i].v);
        cr_assert(strstr(hoop_last_error(), want), "'%s': %s", cases[i].v, hoop_last_error());
        cr_assert_eq(out, 77, "'%s' wrote %llu", cases[i].v, out);
    }
    unsetenv("HOOP_BUSY_POLL_US");
    unsigned long long out = 0;
    int is_auto = 0;
    cr_assert_eq(hoop_param_auto_u64("HOOP_BUSY_POLL_US", 0, 1000000, &is_auto, &out), HOOP_OK);
    cr_assert_eq(is_auto, 1, "unset is not the default, auto");
}

/* The log names each HOOP_* variable the library does not know, the whole
 * name, and only those: not a known one, not the test suite's own. */
Test(api, unknown_variables_are_named_whole, .init = cr_redirect_stderr)
{
    cr_assert(setenv("HOOP_B", "1", 1) == 0);          /* a prefix of HOOP_BUILD_DIR */
    cr_assert(setenv("HOOP_TIMEOUTS", "9", 1) == 0);   /* a known name plus a letter */
    cr_assert(setenv("HOOP_TIMEOUT", "300", 1) == 0);  /* known */
    cr_assert(setenv("HOOP_BUILD_DIR", "/nowhere", 1) == 0); /* the tests' own */
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.rank = 0;
    cfg.size = 1;
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    hoop_comm_destroy(comm);
    fflush(stderr);
    static char log[8192];
    FILE *f = cr_get_redirected_stderr();
    size_t n = fread(log, 1, sizeof(log) - 1, f);
    log[n] = '\0';
    cr_assert_eq(st, HOOP_OK, "%s", hoop_last_error());
    cr_assert(strstr(log, "unknown variable HOOP_B is ignored"), "HOOP_B not named:\n%s", log);
    cr_assert(strstr(log, "unknown variable HOOP_TIMEOUTS is ignored"),
              "HOOP_TIMEOUTS not named:\n%s", log);
    cr_assert(!strstr(log, "variable HOOP_TIMEOUT is") && !strstr(log, "HOOP_BUILD_DIR is"),
              "a known variable was called unknown:\n%s", log);
}
