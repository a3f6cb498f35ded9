/* ring_bench - bandwidth and correctness of every hoop collective, in the
 * layout of nccl-tests (all_reduce_perf, reduce_scatter_perf, ...) so that
 * the numbers can be read side by side.
 *
 * Run one process per rank: hooprun -np 4 ./ring_bench -C allgather -b 8 -e 256M -f 4,
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

enum coll {
    COLL_ALLREDUCE,
    COLL_REDUCE_SCATTER,
    COLL_ALLGATHER,
    COLL_ALLGATHERV,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_BARRIER,
    COLL_COUNT
};

static const char *const coll_names[COLL_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "allgatherv",
    "broadcast", "reduce",         "alltoall",  "barrier",
};

static int coll_has_op(enum coll c)
{
    return c == COLL_ALLREDUCE || c == COLL_REDUCE_SCATTER || c == COLL_REDUCE;
}

static int coll_has_root(enum coll c)
{
    return c == COLL_BROADCAST || c == COLL_REDUCE;
}

/* alltoall has no in-place form in hoop.h, and a barrier moves no data. */
static int coll_has_in_place(enum coll c)
{
    return c != COLL_ALLTOALL && c != COLL_BARRIER;
}

/* nccl-tests' busbw factors: what each rank must move, relative to the size
 * column, with the best algorithm. */
static double bus_factor(enum coll c, int n)
{
    switch (c) {
    case COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case COLL_REDUCE_SCATTER:
    case COLL_ALLGATHER:
    case COLL_ALLGATHERV:
    case COLL_ALLTOALL: return (double)(n - 1) / n;
    case COLL_BROADCAST:
    case COLL_REDUCE: return 1.0;
    default: return 0.0;
    }
}

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
    enum coll coll;
    int root;
    /* --sweep NAME=V1,V2,...: the whole run once per value, each with a
     * fresh communicator made with NAME set to it. */
    const char *sweep_name;
    char *sweep_values; /* NAME=... copy, cut at the commas */
    int sweep_n;
};

#define SWEEP_MAX 32

/* One row's buffers, in elements, as nccl-tests derives them from the size. */
struct shape {
    size_t count;      /* the count column */
    size_t bytes;      /* the size column */
    size_t pcount;     /* the count argument: per rank for reduce_scatter, allgather, alltoall */
    size_t send_elems; /* sendbuf of the out-of-place call */
    size_t recv_elems; /* recvbuf */
    size_t agv_base;   /* allgatherv: rank r contributes agv_base + r elements */
};

/* A run of elements of a buffer that must hold a table's values, the
 * table read from element `phase` on (wrapping at block_count). */
struct seg {
    size_t at;
    size_t n;
    const unsigned char *tab;
    size_t phase;
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
    /* Inputs and expected results repeat in the element index, so each is
     * laid out once as a block of a whole number of periods: filling is then
     * memcpy and checking memcmp, which keeps multi-GiB checks short. */
    size_t block_count;      /* elements per table */
    unsigned char *tab_mem;  /* every table below */
    const unsigned char *mine;   /* this rank's input */
    const unsigned char *expect; /* the reduction, for the collectives with an op */
    /* allgather(v), broadcast: rank r's input; alltoall: what rank r sends
     * to this rank. */
    const unsigned char **peer_tabs;
    const unsigned char **send_tabs; /* alltoall: what this rank sends to rank j */
    size_t *agv_counts;
    size_t *agv_displs;
    struct seg *segs; /* scratch, nranks + 1 */
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
            "Times a hoop collective over a range of sizes and checks every result.\n"
            "Run one process per rank (hooprun -np N ./ring_bench ...), or set HOOP_RANK,\n"
            "HOOP_SIZE, HOOP_ROOT and HOOP_TOKEN by hand; with none set it runs as one rank.\n"
            "\n"
            "  -C, --collective NAME    allreduce (default), reduce_scatter, allgather,\n"
            "                           allgatherv, broadcast, reduce, alltoall, barrier\n"
            "  -r, --root R             root of broadcast and reduce (default 0)\n"
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
    fprintf(f, "(default sum; allreduce, reduce_scatter and reduce)\n"
               "  -S, --sweep VAR=V1,V2,... run everything once per value of the HOOP_* variable\n"
               "                           VAR, a fresh communicator each time, and end with a\n"
               "                           table of the values' bus bandwidths\n"
               "  -T, --transport NAME     tcp, ofi, verbs or auto: HOOP_TRANSPORT for this run (the\n"
               "                           header names the transport and provider used)\n"
               "      --params             list the HOOP_* environment variables and exit\n"
               "  -h, --help               show this help and exit\n"
               "\n"
               "SIZE is a number of bytes with an optional suffix K, M or G (powers of 1024).\n"
               "As in nccl-tests, the size column is the largest buffer of a rank: the\n"
               "sendbuf of reduce_scatter, the recvbuf of allgather, and count is the count\n"
               "argument (per rank for reduce_scatter, allgather and alltoall). allgatherv:\n"
               "rank r contributes base + r elements; size and count are the totals.\n"
               "alltoall has no in-place form; barrier prints one row of size 0.\n");
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

/* NAME=V1,V2,...: NAME one of the library's variables, but not one that
 * says who the ranks are (every value must form the same job). */
static int parse_sweep(const char *arg, struct options *o)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || !eq[1]) {
        bad_usage("--sweep: '%s' is not VAR=V1,V2,... (example: HOOP_CHUNK_BYTES=256K,1M,4M)", arg);
        return -1;
    }
    size_t nlen = (size_t)(eq - arg);
    const char *known = NULL;
    for (int i = 0; i < hoop_param_count() && !known; i++) {
        const char *name = hoop_param_info(i, NULL, NULL);
        if (name && strlen(name) == nlen && strncmp(name, arg, nlen) == 0)
            known = name;
    }
    if (!known) {
        bad_usage("--sweep: %.*s is not a hoop variable (ring_bench --params lists them)",
                  (int)nlen, arg);
        return -1;
    }
    static const char *const fixed[] = {"HOOP_RANK", "HOOP_SIZE", "HOOP_ROOT", "HOOP_TOKEN"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(known, fixed[i]) == 0) {
            bad_usage("--sweep: %s says who the ranks are and cannot change within a job", known);
            return -1;
        }
    free(o->sweep_values);
    o->sweep_values = strdup(eq + 1);
    if (!o->sweep_values) {
        bad_usage("out of memory");
        return -1;
    }
    o->sweep_name = known;
    o->sweep_n = 1;
    for (char *c = o->sweep_values; *c; c++) {
        if (*c != ',')
            continue;
        if (c == o->sweep_values || c[1] == ',' || c[1] == '\0') {
            bad_usage("--sweep: an empty value in '%s'", arg);
            return -1;
        }
        *c = '\0';
        if (++o->sweep_n > SWEEP_MAX) {
            bad_usage("--sweep: more than %d values", SWEEP_MAX);
            return -1;
        }
    }
    return 0;
}

/* Returns -1 to go on, otherwise the exit status. */
static int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_PARAMS = 1000 };
    static const struct option longopts[] = {
        {"collective", required_argument, NULL, 'C'},
        {"root", required_argument, NULL, 'r'},
        {"minbytes", required_argument, NULL, 'b'},
        {"maxbytes", required_argument, NULL, 'e'},
        {"stepfactor", required_argument, NULL, 'f'},
        {"stepbytes", required_argument, NULL, 'i'},
        {"iters", required_argument, NULL, 'n'},
        {"warmup_iters", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},
        {"op", required_argument, NULL, 'o'},
        {"sweep", required_argument, NULL, 'S'},
        {"transport", required_argument, NULL, 'T'},
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
    o->coll = COLL_ALLREDUCE;
    o->root = 0;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":C:r:b:e:f:i:n:w:c:d:o:S:T:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'C': {
            int k = 0;
            while (k < COLL_COUNT && strcmp(optarg, coll_names[k]) != 0)
                k++;
            if (k == COLL_COUNT)
                return bad_usage("-C: unknown collective '%s' (allreduce, reduce_scatter, "
                                 "allgather, allgatherv, broadcast, reduce, alltoall, barrier)",
                                 optarg);
            o->coll = (enum coll)k;
            break;
        }
        case 'r':
            /* The upper bound needs the communicator: checked in main. */
            if (parse_long(optarg, 0, INT_MAX, &v))
                return bad_usage("-r: '%s' is not a rank (a whole number of at least 0)", optarg);
            o->root = (int)v;
            break;
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
        case 'S':
            if (parse_sweep(optarg, o))
                return 2;
            break;
        case 'T':
            /* As HOOP_TRANSPORT says it, for every communicator made here. */
            if (setenv("HOOP_TRANSPORT", optarg, 1))
                return bad_usage("cannot set HOOP_TRANSPORT=%s", optarg);
            break;
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

/* The buffers of the row for `size` bytes; 0 when the row is skipped (no
 * element to move). */
static int shape_of(const struct bench *b, size_t size, struct shape *s)
{
    size_t c = size / b->esize, n = (size_t)b->nranks;
    memset(s, 0, sizeof *s);
    switch (b->opt.coll) {
    case COLL_REDUCE_SCATTER:
        s->pcount = c / n;
        s->send_elems = s->pcount * n;
        s->recv_elems = s->pcount;
        s->count = s->pcount;
        s->bytes = s->send_elems * b->esize;
        break;
    case COLL_ALLGATHER:
        s->pcount = c / n;
        s->send_elems = s->pcount;
        s->recv_elems = s->pcount * n;
        s->count = s->pcount;
        s->bytes = s->recv_elems * b->esize;
        break;
    case COLL_ALLTOALL:
        s->pcount = c / n;
        s->send_elems = s->recv_elems = s->pcount * n;
        s->count = s->pcount;
        s->bytes = s->send_elems * b->esize;
        break;
    case COLL_ALLGATHERV: {
        /* Rank r adds r elements to an even share, so that the total stays
         * within the row's size whenever the size allows, and the small
         * rows give rank 0 nothing to send. */
        size_t tri = n * (n - 1) / 2;
        s->agv_base = c >= tri ? (c - tri) / n : 0;
        s->pcount = s->agv_base + (size_t)b->rank;
        s->send_elems = s->agv_base + n - 1;
        s->recv_elems = s->agv_base * n + tri;
        s->count = c ? s->recv_elems : 0;
        s->bytes = s->count * b->esize;
        break;
    }
    default:
        s->pcount = s->send_elems = s->recv_elems = s->count = c;
        s->bytes = c * b->esize;
        break;
    }
    return s->count != 0;
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

/* Collectives that only move data need no headroom for a reduction: their
 * values span every integer the dtype holds exactly (up to a period that
 * keeps the tables small), which makes a block delivered to the wrong place
 * less likely to carry the values expected there. */
static uint64_t move_period(hoop_dtype_t dt)
{
    switch (dt) {
    case HOOP_I8: return 128;
    case HOOP_U8: return 256;
    case HOOP_BF16: return 257;
    case HOOP_F16: return 2049;
    default: return 1009;
    }
}

/* 7 is prime to every period above, so one period holds each value once:
 * an offset by less than a period always shows. */
static uint64_t move_value(uint64_t period, uint64_t i, uint64_t tag)
{
    return (i * 7 + tag * 13) % period;
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

/* Repeats the first `period` elements of tab up to block_count. */
static void repeat_period(const struct bench *b, unsigned char *tab, size_t period)
{
    for (size_t j = period; j < b->block_count; j += period)
        memcpy(tab + j * b->esize, tab, period * b->esize);
}

static unsigned char *new_tab(struct bench *b, size_t *used)
{
    return b->tab_mem + (*used)++ * b->block_count * b->esize;
}

static int build_reduce_tables(struct bench *b)
{
    hoop_dtype_t dt = b->opt.dtype;
    hoop_op_t op = b->opt.op;
    uint64_t sum_max = sum_input_max(dt, b->nranks);
    size_t period, used = 0;

    switch (op) {
    case HOOP_SUM: case HOOP_AVG: period = (size_t)sum_max + 1; break;
    case HOOP_PROD: period = 2; break;
    default: period = 97; break;
    }
    /* Long enough that a memcmp per block costs little more than the bytes. */
    b->block_count = period * ((4096 + period - 1) / period);
    b->tab_mem = malloc(2 * b->block_count * b->esize);
    if (!b->tab_mem)
        return -1;
    unsigned char *in = new_tab(b, &used), *ex = new_tab(b, &used);

    for (size_t j = 0; j < period; j++) {
        uint64_t v = input_value(op, sum_max, j, (uint64_t)b->rank);
        store_elem(in, j, b->esize, value_bits(dt, v, (double)v));

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
        store_elem(ex, j, b->esize, e);
    }
    repeat_period(b, in, period);
    repeat_period(b, ex, period);
    b->mine = in;
    b->expect = ex;
    return 0;
}

static void fill_move_tab(const struct bench *b, unsigned char *tab, size_t period, uint64_t tag)
{
    for (size_t j = 0; j < period; j++) {
        uint64_t v = move_value(period, j, tag);
        store_elem(tab, j, b->esize, value_bits(b->opt.dtype, v, (double)v));
    }
    repeat_period(b, tab, period);
}

static int build_move_tables(struct bench *b)
{
    size_t n = (size_t)b->nranks, period = (size_t)move_period(b->opt.dtype), used = 0;
    int a2a = b->opt.coll == COLL_ALLTOALL;

    b->block_count = period * ((4096 + period - 1) / period);
    b->tab_mem = malloc((a2a ? 2 : 1) * n * b->block_count * b->esize);
    b->peer_tabs = calloc(n, sizeof *b->peer_tabs);
    b->send_tabs = calloc(n, sizeof *b->send_tabs);
    if (!b->tab_mem || !b->peer_tabs || !b->send_tabs)
        return -1;
    for (size_t r = 0; r < n; r++) {
        unsigned char *t = new_tab(b, &used);
        /* alltoall: what rank r sends to this one, tagged by (sender, destination). */
        fill_move_tab(b, t, period, a2a ? r * n + (size_t)b->rank : r);
        b->peer_tabs[r] = t;
    }
    if (a2a) {
        for (size_t j = 0; j < n; j++) {
            unsigned char *t = new_tab(b, &used);
            fill_move_tab(b, t, period, (size_t)b->rank * n + j);
            b->send_tabs[j] = t;
        }
    } else {
        b->mine = b->peer_tabs[b->rank];
    }
    return 0;
}

static int build_tables(struct bench *b)
{
    size_t n = (size_t)b->nranks;
    b->segs = calloc(n + 1, sizeof *b->segs);
    b->agv_counts = calloc(n, sizeof *b->agv_counts);
    b->agv_displs = calloc(n, sizeof *b->agv_displs);
    if (!b->segs || !b->agv_counts || !b->agv_displs)
        return -1;
    if (b->opt.coll == COLL_BARRIER)
        return 0;
    return coll_has_op(b->opt.coll) ? build_reduce_tables(b) : build_move_tables(b);
}

static void set_agv(const struct bench *b, const struct shape *s)
{
    size_t at = 0;
    for (int r = 0; r < b->nranks; r++) {
        b->agv_counts[r] = s->agv_base + (size_t)r;
        b->agv_displs[r] = at;
        at += b->agv_counts[r];
    }
}

static size_t add_seg(struct seg *g, size_t k, size_t at, size_t n, const unsigned char *tab,
                      size_t phase)
{
    if (n == 0)
        return k;
    g[k].at = at;
    g[k].n = n;
    g[k].tab = tab;
    g[k].phase = phase;
    return k + 1;
}

/* Where this rank's input lies in the buffer the call reads: sendbuf out of
 * place, recvbuf in place. */
static size_t input_segs(const struct bench *b, const struct shape *s, int in_place, struct seg *g)
{
    size_t k = 0, me = (size_t)b->rank, pc = s->pcount;
    switch (b->opt.coll) {
    case COLL_ALLGATHER: return add_seg(g, k, in_place ? me * pc : 0, pc, b->mine, 0);
    case COLL_ALLGATHERV:
        return add_seg(g, k, in_place ? b->agv_displs[me] : 0, b->agv_counts[me], b->mine, 0);
    case COLL_BROADCAST:
        /* In place, a non-root's buffer is all output. */
        if (in_place && b->rank != b->opt.root)
            return 0;
        return add_seg(g, k, 0, pc, b->mine, 0);
    case COLL_ALLTOALL:
        for (size_t j = 0; j < (size_t)b->nranks; j++)
            k = add_seg(g, k, j * pc, pc, b->send_tabs[j], 0);
        return k;
    default: return add_seg(g, k, 0, s->send_elems, b->mine, 0);
    }
}

/* Where recvbuf must hold which values after the call. */
static size_t result_segs(const struct bench *b, const struct shape *s, int in_place,
                          struct seg *g)
{
    size_t k = 0, me = (size_t)b->rank, pc = s->pcount;
    switch (b->opt.coll) {
    case COLL_REDUCE_SCATTER:
        /* Block `rank` of the reduction of the whole send buffers. */
        return add_seg(g, k, in_place ? me * pc : 0, pc, b->expect, me * pc);
    case COLL_ALLGATHER:
    case COLL_ALLTOALL:
        for (size_t r = 0; r < (size_t)b->nranks; r++)
            k = add_seg(g, k, r * pc, pc, b->peer_tabs[r], 0);
        return k;
    case COLL_ALLGATHERV:
        for (size_t r = 0; r < (size_t)b->nranks; r++)
            k = add_seg(g, k, b->agv_displs[r], b->agv_counts[r], b->peer_tabs[r], 0);
        return k;
    case COLL_BROADCAST: return add_seg(g, k, 0, pc, b->peer_tabs[b->opt.root], 0);
    case COLL_REDUCE:
        if (b->rank != b->opt.root)
            return 0;
        return add_seg(g, k, 0, pc, b->expect, 0);
    default: return add_seg(g, k, 0, pc, b->expect, 0);
    }
}

static void put_seg(const struct bench *b, unsigned char *buf, const struct seg *g)
{
    size_t es = b->esize, bc = b->block_count;
    for (size_t j = 0; j < g->n;) {
        size_t from = (g->phase + j) % bc;
        size_t n = g->n - j < bc - from ? g->n - j : bc - from;
        memcpy(buf + (g->at + j) * es, g->tab + from * es, n * es);
        j += n;
    }
}

/* The complement of the expected values: an element the library never
 * writes cannot pass for a result. */
static void put_seg_inverted(const struct bench *b, unsigned char *buf, const struct seg *g)
{
    put_seg(b, buf, g);
    unsigned char *p = buf + g->at * b->esize;
    for (size_t k = 0; k < g->n * b->esize; k++)
        p[k] = (unsigned char)~p[k];
}

struct mismatch {
    size_t wrong;
    size_t first; /* element index in the buffer, SIZE_MAX if none */
    uint64_t got, want;
};

static void check_seg(const struct bench *b, const unsigned char *buf, const struct seg *g,
                      struct mismatch *m)
{
    size_t es = b->esize, bc = b->block_count;
    for (size_t j = 0; j < g->n;) {
        size_t from = (g->phase + j) % bc;
        size_t n = g->n - j < bc - from ? g->n - j : bc - from;
        const unsigned char *p = buf + (g->at + j) * es;
        if (memcmp(p, g->tab + from * es, n * es) != 0) {
            for (size_t k = 0; k < n; k++) {
                uint64_t got = load_elem(p, k, es), want = load_elem(g->tab, from + k, es);
                if (got == want)
                    continue;
                if (m->first == SIZE_MAX) {
                    m->first = g->at + j + k;
                    m->got = got;
                    m->want = want;
                }
                m->wrong++;
            }
        }
        j += n;
    }
}

/* Fills the buffers of one placement for a call: inputs where the call reads
 * them, the complement of the result where it must write. */
static void prepare(struct bench *b, const struct shape *s, int in_place)
{
    struct seg *g = b->segs;
    unsigned char *in = in_place ? b->recvbuf : b->sendbuf;
    size_t n = result_segs(b, s, in_place, g);
    for (size_t k = 0; k < n; k++)
        put_seg_inverted(b, b->recvbuf, &g[k]);
    /* After the results: in place, the input overlaps them. */
    n = input_segs(b, s, in_place, g);
    for (size_t k = 0; k < n; k++)
        put_seg(b, in, &g[k]);
}

static const char *op_label(const struct bench *b)
{
    return coll_has_op(b->opt.coll) ? hoop_op_str(b->opt.op) : "none";
}

/* Elements wrong in the result, plus the input elements that changed where
 * the input must stay (sendbuf out of place; in place, a non-root's buffer
 * in reduce, which the collective only reads). */
static size_t count_wrong(struct bench *b, const struct shape *s, int in_place)
{
    const char *placement = in_place ? "in-place" : "out-of-place";
    struct seg *g = b->segs;
    struct mismatch res = {0, SIZE_MAX, 0, 0}, inp = {0, SIZE_MAX, 0, 0};
    size_t n = result_segs(b, s, in_place, g);
    for (size_t k = 0; k < n; k++)
        check_seg(b, b->recvbuf, &g[k], &res);
    if (!in_place || (b->opt.coll == COLL_REDUCE && b->rank != b->opt.root)) {
        n = input_segs(b, s, in_place, g);
        for (size_t k = 0; k < n; k++)
            check_seg(b, in_place ? b->recvbuf : b->sendbuf, &g[k], &inp);
    }
    int w = (int)(2 * b->esize);
    if (res.wrong)
        report_error(b,
                     "%s %zu B %s %s %s: %zu elements wrong; first at index %zu: got 0x%0*" PRIx64
                     ", expected 0x%0*" PRIx64,
                     coll_names[b->opt.coll], s->bytes, hoop_dtype_str(b->opt.dtype), op_label(b),
                     placement, res.wrong, res.first, w, res.got, w, res.want);
    if (inp.wrong)
        report_error(b,
                     "%s %zu B %s %s %s: the send buffer changed at %zu elements; first at index "
                     "%zu: 0x%0*" PRIx64 ", was 0x%0*" PRIx64,
                     coll_names[b->opt.coll], s->bytes, hoop_dtype_str(b->opt.dtype), op_label(b),
                     placement, inp.wrong, inp.first, w, inp.got, w, inp.want);
    return res.wrong + inp.wrong;
}

/* ---- timing ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Lines the ranks up around the timed loops. An allreduce rather than
 * hoop_barrier, so that the timing of a broken barrier does not depend on
 * the barrier itself. */
static hoop_status_t sync_ranks(hoop_comm_t *comm)
{
    unsigned char x = 0;
    return hoop_allreduce(comm, &x, &x, 1, HOOP_U8, HOOP_MAX);
}

struct result {
    int ran;        /* the placement exists for this collective */
    int checked;    /* #wrong means something */
    double time_us; /* average over ranks */
    double algbw;   /* GB/s */
    double busbw;
    uint64_t wrong; /* summed over ranks */
};

static hoop_status_t call(struct bench *b, const struct shape *s, int in_place)
{
    const struct options *o = &b->opt;
    unsigned char *rbuf = b->recvbuf;
    const void *send = in_place ? b->recvbuf : b->sendbuf;
    void *recv = b->recvbuf;
    size_t me = (size_t)b->rank, es = b->esize;

    switch (o->coll) {
    case COLL_ALLREDUCE: return hoop_allreduce(b->comm, send, recv, s->pcount, o->dtype, o->op);
    case COLL_REDUCE_SCATTER:
        if (in_place)
            recv = rbuf + me * s->pcount * es;
        return hoop_reduce_scatter(b->comm, send, recv, s->pcount, o->dtype, o->op);
    case COLL_ALLGATHER:
        if (in_place)
            send = rbuf + me * s->pcount * es;
        return hoop_allgather(b->comm, send, recv, s->pcount, o->dtype);
    case COLL_ALLGATHERV:
        if (in_place)
            send = rbuf + b->agv_displs[me] * es;
        return hoop_allgatherv(b->comm, send, recv, b->agv_counts, b->agv_displs, o->dtype);
    case COLL_BROADCAST: return hoop_broadcast(b->comm, send, recv, s->pcount, o->dtype, o->root);
    case COLL_REDUCE:
        /* hoop.h lets non-roots pass no recvbuf: out of place they do. */
        if (!in_place && b->rank != o->root)
            recv = NULL;
        return hoop_reduce(b->comm, send, recv, s->pcount, o->dtype, o->op, o->root);
    case COLL_ALLTOALL: return hoop_alltoall(b->comm, send, recv, s->pcount, o->dtype);
    default: return hoop_barrier(b->comm);
    }
}

/* Times iters calls after warmup ones; *t is the average over ranks of the
 * seconds per call. */
static hoop_status_t time_calls(struct bench *b, const struct shape *s, int in_place, double *t)
{
    const struct options *o = &b->opt;
    hoop_status_t st;
    for (int i = 0; i < o->warmup; i++)
        if ((st = call(b, s, in_place)) != HOOP_OK)
            return st;
    /* Without it a rank that left the warm-up early would time its wait for
     * the others. */
    if ((st = sync_ranks(b->comm)) != HOOP_OK)
        return st;
    double t0 = now_s();
    for (int i = 0; i < o->iters; i++)
        if ((st = call(b, s, in_place)) != HOOP_OK)
            return st;
    *t = (now_s() - t0) / o->iters;
    if ((st = hoop_allreduce(b->comm, t, t, 1, HOOP_F64, HOOP_SUM)) != HOOP_OK)
        return st;
    *t /= b->nranks;
    return HOOP_OK;
}

static int run_placement(struct bench *b, const struct shape *s, int in_place, struct result *res)
{
    hoop_status_t st;
    double t;

    memset(res, 0, sizeof *res);
    prepare(b, s, in_place);
    if ((st = time_calls(b, s, in_place, &t)) != HOOP_OK)
        goto fail;
    res->ran = 1;
    res->time_us = t * 1e6;
    res->algbw = t > 0 ? (double)s->bytes / t / 1e9 : 0.0;
    res->busbw = res->algbw * bus_factor(b->opt.coll, b->nranks);

    if (b->opt.check) {
        /* A result left over from the timed loop must not pass for this one. */
        prepare(b, s, in_place);
        if ((st = call(b, s, in_place)) != HOOP_OK)
            goto fail;
        uint64_t wrong = count_wrong(b, s, in_place);
        if ((st = hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_U64, HOOP_SUM)) != HOOP_OK)
            goto fail;
        res->checked = 1;
        res->wrong = wrong;
    }
    return 0;
fail:
    report_hoop_error(b, st);
    return -1;
}

static int64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The barrier's check needs one clock for every rank: it is made only when
 * all ranks share a machine. The last rank enters late; no rank may leave
 * before the last one entered. */
static int run_barrier(struct bench *b, struct result *res)
{
    struct shape s;
    hoop_status_t st;
    double t;

    memset(&s, 0, sizeof s);
    memset(res, 0, sizeof *res);
    if ((st = time_calls(b, &s, 0, &t)) != HOOP_OK)
        goto fail;
    res->ran = 1;
    res->time_us = t * 1e6;

    if (b->opt.check && hoop_comm_local_size(b->comm) == b->nranks) {
        if ((st = sync_ranks(b->comm)) != HOOP_OK)
            goto fail;
        if (b->rank == b->nranks - 1) {
            struct timespec late = {0, 20 * 1000 * 1000};
            nanosleep(&late, NULL);
        }
        int64_t entry = realtime_ns();
        if ((st = hoop_barrier(b->comm)) != HOOP_OK)
            goto fail;
        int64_t exit_ns = realtime_ns(), last_entry = entry;
        if ((st = hoop_allreduce(b->comm, &entry, &last_entry, 1, HOOP_I64, HOOP_MAX)) != HOOP_OK)
            goto fail;
        uint64_t wrong = exit_ns < last_entry;
        if (wrong)
            report_error(b, "barrier: left %.3f ms before the last rank entered",
                         (double)(last_entry - exit_ns) / 1e6);
        if ((st = hoop_allreduce(b->comm, &wrong, &wrong, 1, HOOP_U64, HOOP_SUM)) != HOOP_OK)
            goto fail;
        res->checked = 1;
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

    printf("# hoop ring_bench %s: %s\n", BENCH_VERSION, coll_names[o->coll]);
    printf("# nranks %d local_size %d transport %s minBytes %zu maxBytes %zu step: ", b->nranks,
           hoop_comm_local_size(b->comm), hoop_comm_transport(b->comm), o->min_bytes,
           o->max_bytes);
    if (o->step_bytes)
        printf("%zu(bytes)", o->step_bytes);
    else
        printf("%ld(factor)", o->step_factor);
    printf(" warmup iters: %d iters: %d validation: %d\n", o->warmup, o->iters, o->check);
    if (o->sweep_name)
        printf("# sweep %s=%s\n", o->sweep_name, getenv(o->sweep_name));
    printf("#\n");

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

static void print_row(const struct bench *b, const struct shape *s, const struct result res[2])
{
    int barrier = b->opt.coll == COLL_BARRIER;
    char line[256];
    int n = snprintf(line, sizeof line, "%12zu  %12zu  %8s  %6s  %6i", s->bytes, s->count,
                     barrier ? "none" : hoop_dtype_str(b->opt.dtype), op_label(b),
                     coll_has_root(b->opt.coll) ? b->opt.root : -1);
    for (int p = 0; p < 2; p++) {
        char t[32], alg[32], bus[32], wrong[32];
        if (!res[p].ran) {
            n += snprintf(line + n, sizeof line - (size_t)n, "  %7s  %6s  %6s  %6s", "N/A", "N/A",
                          "N/A", "N/A");
            continue;
        }
        format_float(t, sizeof t, res[p].time_us, 7);
        format_float(alg, sizeof alg, res[p].algbw, 6);
        format_float(bus, sizeof bus, res[p].busbw, 6);
        if (res[p].checked)
            snprintf(wrong, sizeof wrong, "%" PRIu64, res[p].wrong);
        else
            snprintf(wrong, sizeof wrong, "N/A");
        n += snprintf(line + n, sizeof line - (size_t)n, "  %7s  %6s  %6s  %6s", t, alg, bus,
                      wrong);
    }
    print_trimmed(line);
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

static int run(struct bench *b, double *avg_busbw)
{
    const struct options *o = &b->opt;
    size_t rows = 0, bad_rows = 0, groups = 0;
    double busbw_sum = 0.0;
    struct shape s;
    struct result res[2];

    if (build_tables(b)) {
        report_error(b, "out of memory");
        return 1;
    }

    if (b->rank == 0)
        print_header(b);

    if (o->coll == COLL_BARRIER) {
        memset(&s, 0, sizeof s);
        memset(res, 0, sizeof res);
        if (run_barrier(b, &res[0]))
            return 1;
        rows = groups = 1;
        bad_rows = res[0].wrong != 0;
        if (b->rank == 0)
            print_row(b, &s, res);
    } else {
        /* Both buffers serve as the in-place buffer too: each is as large as
         * the largest of either in any row. */
        size_t elems = 0, size = o->min_bytes;
        do {
            if (shape_of(b, size, &s)) {
                elems = s.send_elems > elems ? s.send_elems : elems;
                elems = s.recv_elems > elems ? s.recv_elems : elems;
            }
        } while (next_size(o, &size));
        if (elems) {
            b->sendbuf = alloc_touched(elems * b->esize);
            b->recvbuf = alloc_touched(elems * b->esize);
            if (!b->sendbuf || !b->recvbuf) {
                report_error(b, "cannot allocate two buffers of %zu bytes", elems * b->esize);
                return 1;
            }
        }

        size_t prev_bytes = SIZE_MAX;
        size = o->min_bytes;
        do {
            /* Small sizes can round to the row before (allgatherv's totals):
             * the same row twice would only weigh it twice in the average. */
            if (!shape_of(b, size, &s) || s.bytes == prev_bytes)
                continue;
            prev_bytes = s.bytes;
            if (o->coll == COLL_ALLGATHERV)
                set_agv(b, &s);
            memset(res, 0, sizeof res);
            for (int p = 0; p < 2; p++) {
                if (p == 1 && !coll_has_in_place(o->coll))
                    continue;
                if (run_placement(b, &s, p, &res[p]))
                    return 1;
                busbw_sum += res[p].busbw;
                groups++;
            }
            rows++;
            if (res[0].wrong || res[1].wrong)
                bad_rows++;
            if (b->rank == 0)
                print_row(b, &s, res);
        } while (next_size(o, &size));
    }

    if (b->rank == 0) {
        printf("# Out of bounds values : %zu %s\n", bad_rows, bad_rows ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g\n", groups ? busbw_sum / (double)groups : 0.0);
        *avg_busbw = groups ? busbw_sum / (double)groups : 0.0;
        printf("#\n");
        fflush(stdout);
    }
    return bad_rows ? 1 : 0;
}

static void bench_free(struct bench *b)
{
    free(b->sendbuf);
    free(b->recvbuf);
    free(b->tab_mem);
    free(b->peer_tabs);
    free(b->send_tabs);
    free(b->agv_counts);
    free(b->agv_displs);
    free(b->segs);
    b->sendbuf = b->recvbuf = NULL;
    b->tab_mem = NULL;
    b->peer_tabs = b->send_tabs = NULL;
    b->agv_counts = b->agv_displs = NULL;
    b->segs = NULL;
}

/* One job: make the communicator, run every size, close it. */
static int run_job(struct bench *b, double *avg_busbw)
{
    int rc;
    hoop_status_t st = hoop_comm_init(&b->comm, NULL);
    if (st != HOOP_OK) {
        report_hoop_error(b, st);
        return 1;
    }
    b->have_rank = 1;
    b->rank = hoop_comm_rank(b->comm);
    b->nranks = hoop_comm_size(b->comm);

    if (b->opt.root >= b->nranks) {
        /* Every rank sees the same mistake; one message is enough. */
        rc = b->rank == 0 ? bad_usage("-r: root %d is not a rank of this job (0..%d)",
                                      b->opt.root, b->nranks - 1)
                          : 2;
    } else {
        rc = run(b, avg_busbw);
    }

    /* Closing promptly also tells the other ranks, if this one failed, that
     * it is gone instead of leaving them to time out. */
    st = hoop_comm_destroy(b->comm);
    b->comm = NULL;
    if (st != HOOP_OK) {
        report_hoop_error(b, st);
        rc = 1;
    }
    bench_free(b);
    return rc;
}

int main(int argc, char **argv)
{
    struct bench b;
    memset(&b, 0, sizeof b);

    int rc = parse_options(argc, argv, &b.opt);
    if (rc >= 0) {
        free(b.opt.sweep_values);
        return rc;
    }
    b.esize = hoop_dtype_size(b.opt.dtype);
    if (!b.opt.sweep_name)
        return run_job(&b, &(double){0});

    double avg[SWEEP_MAX];
    const char *val[SWEEP_MAX];
    const char *v = b.opt.sweep_values;
    for (int i = 0; i < b.opt.sweep_n; i++, v += strlen(v) + 1) {
        val[i] = v;
        avg[i] = 0.0;
        if (setenv(b.opt.sweep_name, v, 1)) {
            report_error(&b, "cannot set %s: %s", b.opt.sweep_name, strerror(errno));
            rc = 1;
            break;
        }
        rc = run_job(&b, &avg[i]);
        if (rc)
            break;
    }
    if (rc == 0 && b.rank == 0) {
        printf("# sweep of %s: average bus bandwidth (GB/s) over the sizes and placements\n",
               b.opt.sweep_name);
        for (int i = 0; i < b.opt.sweep_n; i++)
            printf("# sweep %-24s %8.3f\n", val[i], avg[i]);
        fflush(stdout);
    }
    free(b.opt.sweep_values);
    return rc;
}
