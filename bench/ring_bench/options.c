/* options.c - ring_bench's command line: its options, the --sweep lists and
 * the usage text. */
#include "bench/ring_bench/ring_bench.h"

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
    fprintf(f,
            "(default sum; allreduce, reduce_scatter and reduce)\n"
            "  -S, --sweep VAR=V1,V2,... run everything once per value of the HOOP_* variable\n"
            "                           VAR, a fresh communicator each time, and end with a\n"
            "                           table of the values' bus bandwidths\n"
            "  -G, --device cuda        buffers in CUDA device memory (cudaMalloc), on the GPU\n"
            "                           of the rank's local rank (HOOP_LOCAL_RANK, else the\n"
            "                           launcher's, else HOOP_RANK) modulo the devices; the\n"
            "                           data go in and the results are checked through host\n"
            "                           memory. --device host (the default): host buffers\n"
            "  -R, --registered         host buffers from hoop_mem_alloc, which every rank of the\n"
            "                           host maps: an allreduce then reads and writes them in\n"
            "                           place (as nccl-tests' -R registers its buffers)\n"
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

int bad_usage(const char *fmt, ...)
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
int parse_options(int argc, char **argv, struct options *o)
{
    enum { OPT_PARAMS = 1000, OPT_DEVICE };
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
        {"device", required_argument, NULL, OPT_DEVICE},
        {"registered", no_argument, NULL, 'R'},
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
    while ((c = getopt_long(argc, argv, ":C:r:b:e:f:i:n:w:c:d:o:S:T:GRh", longopts, NULL)) != -1) {
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
        case 'G':
            o->device = 1;
            break;
        case 'R': o->registered = 1; break;
        case OPT_DEVICE:
            if (strcmp(optarg, "cuda") != 0 && strcmp(optarg, "host") != 0)
                return bad_usage("--device: '%s' is neither cuda nor host", optarg);
            o->device = strcmp(optarg, "cuda") == 0;
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
    if (o->registered && o->device)
        return bad_usage("-R and -G: hoop_mem_alloc gives host memory only");
    if (device_check_usable(o))
        return 2;
    return -1;
}
