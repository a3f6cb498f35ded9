/* output.c - the table rank 0 prints: its header and a row per size, laid
 * out as nccl-tests lays its own. */
#include "bench/ring_bench/ring_bench.h"

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

void print_header(const struct bench *b)
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
    if (o->device)
        printf("# buffers: device (cudaMalloc), rank 0 on %s; rank r on GPU (its local rank "
               "modulo %d)\n",
               b->gpu_desc, hoop_gpu_device_count());
    else if (o->registered)
        printf("# buffers: host, from hoop_mem_alloc (read in place where every rank maps the "
               "others')\n");
    else
        printf("# buffers: host\n");
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

void print_row(const struct bench *b, const struct shape *s, const struct result res[2])
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
