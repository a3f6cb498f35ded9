/* args.c - hooprun's command line: its options and the usage text. */
#include "tools/hooprun/hooprun.h"

const char usage_text[] =
    "usage: hooprun -np N [options] [--] prog [args...]\n"
    "Start N ranks of prog, on this machine or on the hosts given. Each gets\n"
    "HOOP_RANK, HOOP_SIZE, HOOP_ROOT (127.0.0.1:PORT on one machine) and\n"
    "HOOP_TOKEN (fresh for every job).\n"
    "\n"
    "  -np N, -n N       number of ranks, 1..4096 (with hosts: all their slots)\n"
    "  -H, --hosts LIST  hosts to run on, host[:slots],... (slots default to 1);\n"
    "                    ranks fill the first host's slots, then the next one's\n"
    "  --hostfile FILE   hosts from FILE, a line each: host, host:N or\n"
    "                    host slots=N; '#' starts a comment\n"
    "  --rsh CMD         remote shell for hosts other than this one, split on\n"
    "                    spaces (default: $HOOP_RSH, else ssh)\n"
    "  -x NAME[=VALUE]   pass NAME (hooprun's value, or VALUE) to every rank\n"
    "  --root-addr ADDR  address of the first host that every rank can reach\n"
    "                    (default: the first host's name, or 127.0.0.1)\n"
    "  --port P          port of the root (default: a free one here; on a remote\n"
    "                    first host, a random one in 20000..32767)\n"
    "  --timeout SEC     stop every rank after SEC seconds and exit with 124\n"
    "  --no-tag          do not prefix output lines with \"[rank] \"\n"
    "  --bind-to WHAT    core: the ranks on this machine each on one of the CPUs\n"
    "                    hooprun may use, in rank order, round robin; none: not\n"
    "                    bound (default)\n"
    "  -h, --help        show this help\n"
    "\n"
    "Output of the ranks is forwarded line by line, stdout to stdout and\n"
    "stderr to stderr. Rank 0 reads hooprun's stdin unless it is a terminal or\n"
    "rank 0 is remote; the others read /dev/null. When a rank fails, the others\n"
    "get SIGTERM, then SIGKILL after 3 s, and hooprun exits with the failed\n"
    "rank's status (128+S for signal S); SIGINT or SIGTERM to hooprun stops the\n"
    "job the same way (a second one kills at once). Remote ranks run in the\n"
    "same directory as hooprun, and are stopped when their remote shell ends.\n";

bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

/* Does argv[*i] name the option `name`? Its value comes from "name=value" or
 * from the next argument. */
static bool take_option(int argc, char **argv, int *i, const char *name, const char **value)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return false;
    if (a[n] == '=') {
        *value = a + n + 1;
        return true;
    }
    if (a[n] != '\0')
        return false;
    if (*i + 1 >= argc)
        usage_error("%s needs a value", name);
    *value = argv[++*i];
    return true;
}

static bool valid_var_name(const char *s, size_t n)
{
    if (n == 0 || n > 255 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return false;
    return true;
}

void parse_args(int argc, char **argv, struct options *opt)
{
    opt->np = 0;
    opt->port = 0;
    opt->timeout_s = 0;
    opt->tag = true;
    opt->host_lists = calloc((size_t)argc, sizeof *opt->host_lists);
    opt->xvars = calloc((size_t)argc, sizeof *opt->xvars);
    if (!opt->host_lists || !opt->xvars) {
        fprintf(stderr, "hooprun: out of memory\n");
        exit(1);
    }
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i], *v;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        } else if (strcmp(a, "--no-tag") == 0) {
            opt->tag = false;
        } else if (take_option(argc, argv, &i, "--bind-to", &v)) {
            if (strcmp(v, "core") != 0 && strcmp(v, "none") != 0)
                usage_error("--bind-to takes core or none, not '%s'", v);
            opt->bind = strcmp(v, "core") == 0;
        } else if (take_option(argc, argv, &i, "-np", &v) || take_option(argc, argv, &i, "-n", &v)) {
            if (!parse_int(v, 1, MAX_RANKS, &opt->np))
                usage_error("the number of ranks must be 1..%d, not '%s'", MAX_RANKS, v);
        } else if (take_option(argc, argv, &i, "--port", &v)) {
            if (!parse_int(v, 1, 65535, &opt->port))
                usage_error("the port must be 1..65535, not '%s'", v);
        } else if (take_option(argc, argv, &i, "--timeout", &v)) {
            char *end;
            double t = strtod(v, &end);
            /* The upper bound keeps the deadline in nanoseconds within 64 bits. */
            if (end == v || *end != '\0' || !isfinite(t) || t <= 0 || t > 1e8)
                usage_error("the timeout must be a number of seconds > 0, not '%s'", v);
            opt->timeout_s = t;
        } else if (take_option(argc, argv, &i, "-H", &v) ||
                   take_option(argc, argv, &i, "--hosts", &v)) {
            opt->host_lists[opt->n_host_lists++] = v;
        } else if (take_option(argc, argv, &i, "--hostfile", &v)) {
            if (opt->hostfile)
                usage_error("--hostfile can be given only once");
            opt->hostfile = v;
        } else if (take_option(argc, argv, &i, "--rsh", &v)) {
            opt->rsh = v;
        } else if (take_option(argc, argv, &i, "--root-addr", &v)) {
            size_t n = strlen(v);
            if (n == 0 || n > HOST_MAX || strpbrk(v, " \t\n'\"") || v[0] == '-')
                usage_error("--root-addr needs a host name or address, not '%s'", v);
            opt->root_addr = v;
        } else if (take_option(argc, argv, &i, "-x", &v)) {
            if (!valid_var_name(v, strcspn(v, "=")))
                usage_error("-x needs NAME or NAME=VALUE with a variable name, not '%s'", v);
            opt->xvars[opt->nx++] = v;
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (opt->n_host_lists > 0 && opt->hostfile)
        usage_error("give the hosts with -H or with --hostfile, not both");
    if (opt->np == 0 && opt->n_host_lists == 0 && !opt->hostfile)
        usage_error("-np N is required");
    if (i >= argc)
        usage_error("no program to run");
    opt->argv = argv + i;
}
