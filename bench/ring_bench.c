/* ring_bench - allreduce bandwidth and correctness, in the layout of
 * nccl-tests' all_reduce_perf so that the numbers can be read side by side.
 *
 * Run one process per rank: hooprun -np 4 ./ring_bench -b 8 -e 256M -f 4,
 * or set HOOP_RANK, HOOP_SIZE, HOOP_ROOT and HOOP_TOKEN by hand. Rank 0
 * prints the table; every rank reports its own errors on stderr. Exit status:
 * 0 all good, 1 a call failed or a result was wrong, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define BENCH_VERSION                                                                              \
    STR(HOOP_VERSION_MAJOR) "." STR(HOOP_VERSION_MINOR) "." STR(HOOP_VERSION_PATCH)

/* Width of the leading columns (size .. root) and of one placement's group
 * (time .. #wrong) in a table row; the header is laid out from them. */
#define ROW_LEAD_WIDTH 52
#define ROW_GROUP_WIDTH 33

struct options {
    size_t min_bytes;
    size_t max_bytes;
    size_t step_bytes; /* 0: multiply by step_factor instead */
    long step_factor;
    int iters;
    int warmup;
    int check;
    hoop_dtype_t dtype;
    hoop_op_t op;
};

struct bench {
    struct options opt;
    hoop_comm_t *comm;
    int have_rank; /* rank is known (the communicator was made) */
    int rank;
    int nranks;
    size_t esize;
    void *sendbuf;
    void *recvbuf;
    /* Inputs and expected results repeat in the element index, so both are
     * laid out once as blocks of a whole number of periods: filling is then
     * memcpy and checking memcmp, which keeps multi-GiB checks short. */
    size_t block_count;           /* elements per block */
    unsigned char *input_block;   /* this rank's input */
    unsigned char *expected_block; /* the reduced value every rank must get */
};

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

static void report_hoop_error(const struct bench *b, hoop_status_t st)
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

static void report_error(const struct bench *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void report_error(const struct bench *b, const char *fmt, ...)
{
    char buf[32];
    va_list ap;
    fprintf(stderr, "ring_bench: rank %s: ", rank_label(b, buf, sizeof buf));
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- command line ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ring_bench [options]\n"
            "Times hoop_allreduce over a range of sizes and checks every result.\n"
            "Run one process per rank (hooprun -np N ./ring_bench ...), or set HOOP_RANK,\n"
            "HOOP_SIZE, HOOP_ROOT and HOOP_TOKEN by hand; with none set it runs as one rank.\n"
            "\n"
            "  -b, --minbytes SIZE      smallest size in bytes (default 8)\n"
            "  -e, --maxbytes SIZE      largest size in bytes (default 32M)\n"
            "  -f, --stepfactor F       multiply the size by F from row to row (default 2)\n"
            "  -i, --stepbytes SIZE     add SIZE bytes from row to row instead\n"
            "  -n, --iters N            timed iterations per size (default 20)\n"
            "  -w, --warmup_iters N     untimed iterations before timing (default 5)\n"
            "  -c, --check 0|1          check the results (default 1)\n"
            "  -d, --datatype TYPE      ");
    for (int i = 0; i < HOOP_DTYPE_COUNT; i++)
        fprintf(f, "%s ", hoop_dtype_str((hoop_dtype_t)i));
    fprintf(f, "(default f32)\n"
               "  -o, --op OP              ");
    for (int i = 0; i < HOOP_OP_COUNT; i++)
        fprintf(f, "%s ", hoop_op_str((hoop_op_t)i));
    fprintf(f, "(default sum)\n"
               "      --params             list the HOOP_* environment variables and exit\n"
               "  -h, --help               show this help and exit\n"
               "\n"
               "SIZE is a number of bytes with an optional suffix K, M or G (powers of 1024).\n");
}

static int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int bad_usage(const char *fmt, ...)
{
    va_list ap;
    fputs("ring_bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'ring_bench -h' for help.\n", stderr);
    return 2;
}

static int parse_size(const char *s, size_t *out)
{
    /* strtoull would quietly wrap "-1" around to a huge size. */
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end != '\0' || v > (unsigned long long)SIZE_MAX >> shift)
        return -1;
    *out = (size_t)v << shift;
    return 0;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    if ((*s < '0' || *s > '9') && *s != '-')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Only rank 0 writes to stdout; before there is a communicator the launcher's
 * HOOP_RANK is all there is to go by. */
static int is_quiet_rank(void)
{
    const char *env = getenv("HOOP_RANK");
    long r;
    return env && *env && parse_long(env, LONG_MIN, LONG_MAX, &r) == 0 && r != 0;
}

static void print_params(void)
{
    int n = hoop_param_count();
    int name_w = 8, def_w = 7;
    for (int i = 0; i < n; i++) {
        const char *def = NULL, *doc = NULL;
        const char *name = hoop_param_info(i, &def, &doc);
        if (!name)
            break;
        if ((int)strlen(name) > name_w)
            name_w = (int)strlen(name);
        if (def && (int)strlen(def) > def_w)
            def_w = (int)strlen(def);
    }
    printf("# %-*s  %-*s  %s\n", name_w - 2, "variable", def_w, "default", "meaning");
    for (int i = 0; i < n; i++) {
        const char *def = NULL, *doc = NULL;
        const char *name = hoop_param_info(i, &def, &doc);
        if (!name)
            break;
        printf("%-*s  %-*s  %s\n", name_w, name, def_w, def && *def ? def : "-",
               doc ? doc : "");
    }
}

/* Returns -1 to go on, otherwise the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_PARAMS = 1000 };
    static const struct option longopts[] = {
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"stepbytes", required_argument, NULL, 'i'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"params", no_argument, NULL, OPT_PARAMS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    long v;

    o->min_bytes = 8;
    o->max_bytes = (size_t)32 << 20;
    o->step_bytes = 0;
    o->step_factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->check = 1;
    o->dtype = HOOP_F32;
    o->op = HOOP_SUM;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":b:e:f:i:n:w:c:d:o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (parse_size(optarg, &o->min_bytes))
                return bad_usage("-b: '%s' is not a size (examples: 8, 64K, 256M, 2G)", optarg);
            break;
        case 'e':
            if (parse_size(optarg, &o->max_bytes))
                return bad_usage("-e: '%s' is not a size (examples: 8, 64K, 256M, 2G)", optarg);
            break;
        case 'f':
            if (parse_long(optarg, 2, LONG_MAX, &v))
                return bad_usage("-f: '%s' is not a whole number of at least 2", optarg);
            o->step_factor = v;
            break;
        case 'i':
            if (parse_size(optarg, &o->step_bytes) || o->step_bytes == 0)
                return bad_usage("-i: '%s' is not a size of at least 1 byte", optarg);
            break;
        case 'n':
            if (parse_long(optarg, 1, INT_MAX, &v))
                return bad_usage("-n: '%s' is not a whole number of at least 1", optarg);
            o->iters = (int)v;
            break;
        case 'w':
            if (parse_long(optarg, 0, INT_MAX, &v))
                return bad_usage("-w: '%s' is not a whole number of at least 0", optarg);
            o->warmup = (int)v;
            break;
        case 'c':
            if (parse_long(optarg, 0, 1, &v))
                return bad_usage("-c: '%s' is neither 0 nor 1", optarg);
            o->check = (int)v;
            break;
        case 'd': {
            int d = hoop_dtype_parse(optarg);
            if (d < 0)
                return bad_usage("-d: unknown data type '%s'", optarg);
            o->dtype = (hoop_dtype_t)d;
            break;
        }
        case 'o': {
            int op = hoop_op_parse(optarg);
            if (op < 0)
                return bad_usage("-o: unknown reduction '%s'", optarg);
            o->op = (hoop_op_t)op;
            break;
        }
        case 'h':
            if (!is_quiet_rank())
                usage(stdout);
            return 0;
        case OPT_PARAMS:
            if (!is_quiet_rank())
                print_params();
            return 0;
        case ':':
            return bad_usage("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt)
                return bad_usage("unknown option -%c", optopt);
            return bad_usage("unknown option %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_usage("unexpected argument '%s'", argv[optind]);
    if (o->min_bytes > o->max_bytes)
        return bad_usage("-b (%zu) is larger than -e (%zu)", o->min_bytes, o->max_bytes);
    if (o->min_bytes == 0 && o->step_bytes == 0)
        return bad_usage("-b 0 never grows by a factor; give -b 1 or more, or -i");
    return -1;
}

/* Advances *size along -b/-e/-f/-i; 0 when the sequence is over. */
static int next_size(const struct options *o, size_t *size)
{
    size_t next;
    if (o->step_bytes) {
        if (*size > SIZE_MAX - o->step_bytes)
            return 0;
        next = *size + o->step_bytes;
    } else {
        if (*size > SIZE_MAX / (size_t)o->step_factor)
            return 0;
        next = *size * (size_t)o->step_factor;
    }
    if (next > o->max_bytes)
        return 0;
    *size = next;
    return 1;
}

/* ---- data: inputs and expected results ---- */

static uint64_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* The bits of a value in dtype. Integer types take the low bits of u, which is
 * the wraparound the library's integer arithmetic has; float types take d. */
static uint64_t value_bits(hoop_dtype_t dt, uint64_t u, double d)
{
    switch (dt) {
    case HOOP_F16: return hoop_f32_to_f16((float)d);
    case HOOP_BF16: return hoop_f32_to_bf16((float)d);
    case HOOP_F32: return f32_bits((float)d);
    case HOOP_F64: return f64_bits(d);
    default: break;
    }
    size_t bits = 8 * hoop_dtype_size(dt);
    return bits < 64 ? u & (((uint64_t)1 << bits) - 1) : u;
}

/* Average as the library defines it: the sum divided in the accumulation
 * type, f32 for the 16-bit floats; integers truncate toward zero. */
static uint64_t avg_bits(hoop_dtype_t dt, uint64_t sum, int n)
{
    float f = (float)sum / (float)n;
    switch (dt) {
    case HOOP_F16: return hoop_f32_to_f16(f);
    case HOOP_BF16: return hoop_f32_to_bf16(f);
    case HOOP_F32: return f32_bits(f);
    case HOOP_F64: return f64_bits((double)sum / n);
    default: return value_bits(dt, sum / (uint64_t)n, 0.0);
    }
}

/* Largest input M such that a sum of nranks inputs in 0..M stays an exact
 * integer in dtype whatever the order of the additions. */
static uint64_t sum_input_max(hoop_dtype_t dt, int nranks)
{
    uint64_t limit, cap = UINT64_MAX;
    switch (dt) {
    case HOOP_I8: limit = 127; break;
    case HOOP_U8: limit = 255; break;
    case HOOP_BF16: limit = 256; break;
    case HOOP_F16: limit = 2048; break;
    case HOOP_I32: case HOOP_U32: case HOOP_F32: limit = (uint64_t)1 << 24; cap = 1000; break;
    default: limit = UINT64_MAX; cap = 1000; break;
    }
    uint64_t m = limit / (uint64_t)nranks;
    if (m > cap)
        m = cap;
    return m < 1 ? 1 : m;
}

/* Every input is a small non-negative integer, exact in every dtype, chosen
 * so that the reduction has one right answer in any order: sums stay below
 * the dtype's exact-integer limit, products are powers of two. */
static uint64_t input_value(hoop_op_t op, uint64_t sum_max, uint64_t i, uint64_t r)
{
    switch (op) {
    case HOOP_SUM: case HOOP_AVG: return (i * 7 + r * 13) % (sum_max + 1);
    case HOOP_PROD: return 1 + (i + r) % 2;
    default: return (i * 7 + r * 13) % 97;
    }
}

static uint64_t load_elem(const void *buf, size_t i, size_t esize)
{
    const unsigned char *p = (const unsigned char *)buf + i * esize;
    switch (esize) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void store_elem(void *buf, size_t i, size_t esize, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf + i * esize;
    switch (esize) {
    case 1: *p = (unsigned char)bits; break;
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
    default: memcpy(p, &bits, 8); break;
    }
}

static int build_tables(struct bench *b)
{
    hoop_dtype_t dt = b->opt.dtype;
    hoop_op_t op = b->opt.op;
    uint64_t sum_max = sum_input_max(dt, b->nranks);
    size_t period;

    switch (op) {
    case HOOP_SUM: case HOOP_AVG: period = (size_t)sum_max + 1; break;
    case HOOP_PROD: period = 2; break;
    default: period = 97; break;
    }
    /* Long enough that a memcmp per block costs little more than the bytes. */
    b->block_count = period * ((4096 + period - 1) / period);
    b->input_block = malloc(b->block_count * b->esize);
    b->expected_block = malloc(b->block_count * b->esize);
    if (!b->input_block || !b->expected_block)
        return -1;

    for (size_t j = 0; j < period; j++) {
        uint64_t v = input_value(op, sum_max, j, (uint64_t)b->rank);
        store_elem(b->input_block, j, b->esize, value_bits(dt, v, (double)v));

        uint64_t sum = 0, prod = 1, lo = UINT64_MAX, hi = 0;
        double dprod = 1.0;
        for (int r = 0; r < b->nranks; r++) {
            uint64_t x = input_value(op, sum_max, j, (uint64_t)r);
            sum += x;
            prod *= x;
            dprod *= (double)x;
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        uint64_t e;
        switch (op) {
        case HOOP_SUM: e = value_bits(dt, sum, (double)sum); break;
        case HOOP_PROD: e = value_bits(dt, prod, dprod); break;
        case HOOP_MIN: e = value_bits(dt, lo, (double)lo); break;
        case HOOP_MAX: e = value_bits(dt, hi, (double)hi); break;
        default: e = avg_bits(dt, sum, b->nranks); break;
        }
        store_elem(b->expected_block, j, b->esize, e);
    }
    for (size_t j = period; j < b->block_count; j += period) {
        memcpy(b->input_block + j * b->esize, b->input_block, period * b->esize);
        memcpy(b->expected_block + j * b->esize, b->expected_block, period * b->esize);
    }
    return 0;
}

static void fill_input(const struct bench *b, void *buf, size_t count)
{
    for (size_t i = 0; i < count; i += b->block_count) {
        size_t n = count - i < b->block_count ? count - i : b->block_count;
        memcpy((unsigned char *)buf + i * b->esize, b->input_block, n * b->esize);
    }
}

/* Counts the elements of recvbuf that differ from the expected result and,
 * when sendbuf is given, those of sendbuf that no longer hold this rank's
 * input; sendbuf is put back so that later sizes start from the right input. */
static size_t count_wrong(const struct bench *b, const void *recv, void *send, size_t count,
                          const char *placement, size_t bytes)
{
    const unsigned char *rp = recv;
    unsigned char *sp = send;
    size_t es = b->esize;
    size_t wrong = 0, changed = 0, first = SIZE_MAX;
    uint64_t got = 0, want = 0;

    for (size_t i = 0; i < count; i += b->block_count) {
        size_t n = count - i < b->block_count ? count - i : b->block_count;
        int recv_ok = memcmp(rp + i * es, b->expected_block, n * es) == 0;
        int send_ok = !sp || memcmp(sp + i * es, b->input_block, n * es) == 0;
        if (recv_ok && send_ok)
            continue;
        for (size_t j = 0; j < n; j++) {
            uint64_t r = load_elem(rp, i + j, es);
            uint64_t e = load_elem(b->expected_block, j, es);
            int bad = r != e;
            if (bad && first == SIZE_MAX) {
                first = i + j;
                got = r;
                want = e;
            }
            if (!send_ok && load_elem(sp, i + j, es) != load_elem(b->input_block, j, es)) {
                changed++;
                bad = 1;
            }
            wrong += (size_t)bad;
        }
        if (!send_ok)
            memcpy(sp + i * es, b->input_block, n * es);
    }
    if (first != SIZE_MAX)
        report_error(b,
                     "%zu B %s %s %s: %zu of %zu elements wrong; first at index %zu: got 0x%0*" PRIx64
                     ", expected 0x%0*" PRIx64,
                     bytes, hoop_dtype_str(b->opt.dtype), hoop_op_str(b->opt.op), placement, wrong,
                     count, first, (int)(2 * es), got, (int)(2 * es), want);
    if (changed)
        report_error(b, "%zu B %s %s %s: the send buffer changed at %zu elements", bytes,
                     hoop_dtype_str(b->opt.dtype), hoop_op_str(b->opt.op), placement, changed);
    return wrong;
}

/* ---- timing ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hoop_status_t barrier(hoop_comm_t *comm)
{
    unsigned char x = 0;
    return hoop_allreduce(comm, &x, &x, 1, HOOP_U8, HOOP_MAX);
}

struct result {
    double time_us; /* average over ranks */
    double algbw;   /* GB/s */
    double busbw;
    uint64_t wrong; /* summed over ranks */
};

static int run_placement(struct bench *b, int in_place, size_t count, struct result *res)
{
    const struct options *o = &b->opt;
    void *send = in_place ? b->recvbuf : b->sendbuf;
    void *recv = b->recvbuf;
    size_t bytes = count * b->esize;
    hoop_status_t st;
    double t0, t;

    for (int i = 0; i < o->warmup; i++)
        if ((st = hoop_allreduce(b->comm, send, recv, count, o->dtype, o->op)) != HOOP_OK)
            goto fail;
    /* Without it a rank that left the warm-up early would time its wait for
     * the others. */
    if ((st = barrier(b->comm)) != HOOP_OK)
        goto fail;
    t0 = now_s();
    for (int i = 0; i < o->iters; i++)
        if ((st = hoop_allreduce(b->comm, send, recv, count, o->dtype, o->op)) != HOOP_OK)
            goto fail;
    t = (now_s() - t0) / o->iters;
    if ((st = hoop_allreduce(b->comm, &t, &t, 1, HOOP_F64, HOOP_SUM)) != HOOP_OK)
        goto fail;
    t /= b->nranks;
    res->time_us = t * 1e6;
    res->algbw = t > 0 ? (double)bytes / t / 1e9 : 0.0;
    res->busbw = res->algbw * 2.0 * (b->nranks - 1) / b->nranks;
    res->wrong = 0;

    if (o->check) {
        const char *placement = in_place ? "in-place" : "out-of-place";
        if (in_place) {
            memcpy(recv, b->sendbuf, bytes);
        } else {
            /* A result left over from the timed loop must not pass for this one. */
            memset(recv, 0xa5, bytes);
        }
        if ((st = hoop_allreduce(b->comm, send, recv, count, o->dtype, o->op)) != HOOP_OK)
            goto fail;
        uint64_t wrong = count_wrong(b, recv, in_place ? NULL : b->sendbuf, count, placement,
                                     bytes);
        if ((st = hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_U64, HOOP_SUM)) != HOOP_OK)
            goto fail;
        res->wrong = wrong;
    }
    return 0;
fail:
    report_hoop_error(b, st);
    return -1;
}

/* ---- output ---- */

/* Like nccl-tests' getFloatStr: two decimals, fewer when the column is too
 * narrow, and an exponent as a last resort. */
static void format_float(char *out, size_t len, double v, int width)
{
    for (int prec = 2; prec >= 0; prec--) {
        snprintf(out, len, "%.*f", prec, v);
        if ((int)strlen(out) <= width)
            return;
    }
    for (int prec = 1; prec >= 0; prec--) {
        snprintf(out, len, "%.*e", prec, v);
        if ((int)strlen(out) <= width)
            return;
    }
}

static void print_trimmed(char *line)
{
    size_t n = strlen(line);
    while (n > 0 && line[n - 1] == ' ')
        line[--n] = '\0';
    puts(line);
}

static void print_header(const struct bench *b)
{
    const struct options *o = &b->opt;
    char line[256];
    int n;

    printf("# hoop ring_bench %s: allreduce\n", BENCH_VERSION);
    printf("# nranks %d local_size %d transport %s minBytes %zu maxBytes %zu step: ", b->nranks,
           hoop_comm_local_size(b->comm), hoop_comm_transport(b->comm), o->min_bytes,
           o->max_bytes);
    if (o->step_bytes)
        printf("%zu(bytes)", o->step_bytes);
    else
        printf("%ld(factor)", o->step_factor);
    printf(" warmup iters: %d iters: %d validation: %d\n#\n", o->warmup, o->iters, o->check);

    static const char *const groups[2] = {"out-of-place", "in-place"};
    memset(line, ' ', ROW_LEAD_WIDTH + 2 * ROW_GROUP_WIDTH);
    line[0] = '#';
    line[ROW_LEAD_WIDTH + 2 * ROW_GROUP_WIDTH] = '\0';
    for (int g = 0; g < 2; g++) {
        size_t len = strlen(groups[g]);
        size_t at = ROW_LEAD_WIDTH + (size_t)g * ROW_GROUP_WIDTH + (ROW_GROUP_WIDTH - len) / 2 + 1;
        memcpy(line + at, groups[g], len);
    }
    print_trimmed(line);

    n = snprintf(line, sizeof line, "#%11s  %12s  %8s  %6s  %6s", "size", "count", "type",
                 "redop", "root");
    for (int g = 0; g < 2; g++)
        n += snprintf(line + n, sizeof line - (size_t)n, "  %7s  %6s  %6s  %6s", "time", "algbw",
                      "busbw", "#wrong");
    print_trimmed(line);

    n = snprintf(line, sizeof line, "#%11s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "",
                 "");
    for (int g = 0; g < 2; g++)
        n += snprintf(line + n, sizeof line - (size_t)n, "  %7s  %6s  %6s  %6s", "(us)",
                      "(GB/s)", "(GB/s)", "");
    print_trimmed(line);
    fflush(stdout);
}

static void print_row(const struct bench *b, size_t count, const struct result res[2])
{
    printf("%12zu  %12zu  %8s  %6s  %6i", count * b->esize, count, hoop_dtype_str(b->opt.dtype),
           hoop_op_str(b->opt.op), -1);
    for (int p = 0; p < 2; p++) {
        char t[32], alg[32], bus[32], wrong[32];
        format_float(t, sizeof t, res[p].time_us, 7);
        format_float(alg, sizeof alg, res[p].algbw, 6);
        format_float(bus, sizeof bus, res[p].busbw, 6);
        if (b->opt.check)
            snprintf(wrong, sizeof wrong, "%" PRIu64, res[p].wrong);
        else
            snprintf(wrong, sizeof wrong, "N/A");
        printf("  %7s  %6s  %6s  %6s", t, alg, bus, wrong);
    }
    putchar('\n');
    /* Under a launcher stdout is a pipe: without this nothing shows until exit. */
    fflush(stdout);
}

/* ---- main ---- */

static void *alloc_touched(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0)
        return NULL;
    if (posix_memalign(&p, 4096, bytes) != 0)
        return NULL;
    /* A page fault can cost more than moving the page, notably in virtual
     * machines: take them all here, outside the timed loops. */
    memset(p, 0, bytes);
    return p;
}

static int run(struct bench *b)
{
    const struct options *o = &b->opt;
    size_t max_count = o->max_bytes / b->esize;
    size_t rows = 0, bad_rows = 0;
    double busbw_sum = 0.0;
    int failed = 0;

    if (build_tables(b)) {
        report_error(b, "out of memory");
        return 1;
    }
    if (max_count) {
        b->sendbuf = alloc_touched(max_count * b->esize);
        b->recvbuf = alloc_touched(max_count * b->esize);
        if (!b->sendbuf || !b->recvbuf) {
            report_error(b, "cannot allocate two buffers of %zu bytes", max_count * b->esize);
            return 1;
        }
        /* The inputs do not depend on the size: filled once, each size uses
         * a prefix. */
        fill_input(b, b->sendbuf, max_count);
    }

    if (b->rank == 0)
        print_header(b);

    size_t size = o->min_bytes;
    do {
        size_t count = size / b->esize;
        if (count == 0)
            continue;
        struct result res[2];
        for (int p = 0; p < 2; p++)
            if (run_placement(b, p, count, &res[p]))
                return 1;
        rows++;
        busbw_sum += res[0].busbw + res[1].busbw;
        if (res[0].wrong || res[1].wrong)
            bad_rows++;
        if (b->rank == 0)
            print_row(b, count, res);
    } while (next_size(o, &size));

    if (bad_rows)
        failed = 1;
    if (b->rank == 0) {
        printf("# Out of bounds values : %zu %s\n", bad_rows, bad_rows ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", rows ? busbw_sum / (double)(2 * rows) : 0.0);
        printf("#\n");
        fflush(stdout);
    }
    return failed;
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof b);

    int rc = parse_options(argc, argv, &b.opt);
    if (rc >= 0)
        return rc;
    b.esize = hoop_dtype_size(b.opt.dtype);

    hoop_status_t st = hoop_comm_init(&b.comm, NULL);
    if (st != HOOP_OK) {
        report_hoop_error(&b, st);
        return 1;
    }
    b.have_rank = 1;
    b.rank = hoop_comm_rank(b.comm);
    b.nranks = hoop_comm_size(b.comm);

    rc = run(&b);

    /* Closing promptly also tells the other ranks, if this one failed, that
     * it is gone instead of leaving them to time out. */
    st = hoop_comm_destroy(b.comm);
    b.comm = NULL;
    if (st != HOOP_OK) {
        report_hoop_error(&b, st);
        rc = 1;
    }
    free(b.sendbuf);
    free(b.recvbuf);
    free(b.input_block);
    free(b.expected_block);
    return rc;
}
