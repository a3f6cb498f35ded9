/* hosts.c - the hosts: -H lists and host files, which of them are this machine,
 * the remote shell, and on which host each rank runs. */
#include "tools/hooprun/hooprun.h"

static void add_host(struct host *h)
{
    static int cap;
    if (J.nhosts == cap) {
        cap = cap ? 2 * cap : 16;
        J.hosts = realloc(J.hosts, (size_t)cap * sizeof *J.hosts);
        if (!J.hosts) {
            fprintf(stderr, "hooprun: out of memory\n");
            exit(1);
        }
    }
    J.hosts[J.nhosts++] = *h;
}

/* One host: [user@]host or [user@]host:N, with an IPv6 address in brackets
 * ([fe80::1]:2), since its colons would be taken for the slots otherwise.
 * Returns NULL, or why the text is not a host. */
static const char *parse_host(const char *text, size_t len, struct host *h, bool *slots_given)
{
    char buf[HOST_MAX + 16];
    if (len == 0)
        return "an empty host name";
    if (len >= sizeof buf)
        return "the name is too long";
    memcpy(buf, text, len);
    buf[len] = '\0';
    /* The name becomes an argument of the remote shell, where a leading
     * dash would make it an option. */
    if (buf[0] == '-')
        return "a host name cannot start with '-'";
    /* What host names, IPv6 addresses (with a zone) and user names are
     * made of, and nothing that a shell or the remote shell's own parsing
     * would take for something else. */
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)buf[i]) && !strchr("._-:%@[]", buf[i]))
            return "a character that no host name has";
    char *at = strrchr(buf, '@');
    char *rest = at ? at + 1 : buf;
    size_t user_len = at ? (size_t)(rest - buf) : 0;
    if (at == buf)
        return "an empty user name before '@'";
    char *addr = rest, *slots = NULL;
    if (rest[0] == '[') {
        char *close = strchr(rest, ']');
        if (!close)
            return "a '[' without its ']'";
        addr = rest + 1;
        *close = '\0';
        if (close[1] == ':')
            slots = close + 2;
        else if (close[1] != '\0')
            return "something other than ':N' after ']'";
    } else {
        char *colon = strchr(rest, ':');
        if (colon && strchr(colon + 1, ':'))
            return "more than one ':' (write an IPv6 address in brackets, as in [fe80::1]:2)";
        if (colon) {
            *colon = '\0';
            slots = colon + 1;
        }
    }
    if (!*addr)
        return "an empty host name";
    if (strlen(addr) + user_len > HOST_MAX)
        return "the name is too long";
    *slots_given = slots != NULL;
    h->slots = 1;
    if (slots && !parse_int(slots, 1, MAX_RANKS, &h->slots))
        return "the slots after ':' must be a number 1..4096";
    h->name = malloc(user_len + strlen(addr) + 1);
    if (!h->name)
        return "out of memory";
    memcpy(h->name, buf, user_len);
    strcpy(h->name + user_len, addr);
    h->addr = h->name + user_len;
    h->local = false;
    return NULL;
}

static void parse_host_list(const char *list)
{
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ",");
        struct host h;
        bool slots_given;
        const char *why = parse_host(p, n, &h, &slots_given);
        if (why)
            usage_error("bad host '%.*s' in -H %s: %s", (int)(n > 300 ? 300 : n), p, list, why);
        add_host(&h);
        if (p[n] == '\0')
            break;
        p += n + 1;
    }
}

static void hostfile_error(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void hostfile_error(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hooprun: %s:%d: %s\n", file, line, msg);
    exit(EXIT_USAGE);
}

/* Lines of "host", "host:N" or "host slots=N"; '#' starts a comment. */
static void read_hostfile(const char *file)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        fprintf(stderr, "hooprun: cannot read the hostfile %s: %s\n", file, strerror(errno));
        exit(EXIT_USAGE);
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    int before = J.nhosts;
    while (getline(&line, &cap, f) >= 0) {
        lineno++;
        line[strcspn(line, "#")] = '\0';
        static const char blanks[] = " \t\r\n\v\f";
        char *p = line + strspn(line, blanks);
        if (!*p)
            continue;
        size_t n = strcspn(p, blanks);
        struct host h;
        bool slots_given;
        const char *why = parse_host(p, n, &h, &slots_given);
        if (why)
            hostfile_error(file, lineno, "bad host '%.*s': %s", (int)(n > 300 ? 300 : n), p, why);
        for (p += n; *(p += strspn(p, blanks));) {
            n = strcspn(p, blanks);
            if (n > 6 && strncmp(p, "slots=", 6) == 0) {
                char num[16];
                snprintf(num, sizeof num, "%.*s", (int)(n - 6), p + 6);
                if (slots_given)
                    hostfile_error(file, lineno, "the slots of %s are given twice", h.name);
                if (n - 6 >= sizeof num || !parse_int(num, 1, MAX_RANKS, &h.slots))
                    hostfile_error(file, lineno, "'%.*s': the slots must be a number 1..%d",
                                   (int)(n > 300 ? 300 : n), p, MAX_RANKS);
                slots_given = true;
            } else {
                hostfile_error(file, lineno, "'%.*s' is not slots=N", (int)(n > 300 ? 300 : n),
                               p);
            }
            p += n;
        }
        add_host(&h);
    }
    bool failed = ferror(f);
    free(line);
    fclose(f);
    if (failed) {
        fprintf(stderr, "hooprun: cannot read the hostfile %s\n", file);
        exit(EXIT_USAGE);
    }
    if (J.nhosts == before) {
        fprintf(stderr, "hooprun: the hostfile %s names no host\n", file);
        exit(EXIT_USAGE);
    }
}

bool is_loopback_name(const char *a)
{
    struct in_addr v4;
    struct in6_addr v6;
    if (strcasecmp(a, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, a, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    return inet_pton(AF_INET6, a, &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

/* An address literal that one of this machine's interfaces has. */
static bool is_local_address(const char *a)
{
    struct in_addr v4;
    struct in6_addr v6;
    int family;
    if (inet_pton(AF_INET, a, &v4) == 1)
        family = AF_INET;
    else if (inet_pton(AF_INET6, a, &v6) == 1)
        family = AF_INET6;
    else
        return false;
    struct ifaddrs *all;
    if (getifaddrs(&all) < 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = all; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family)
            continue;
        if (family == AF_INET)
            found = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == v4.s_addr;
        else
            found = memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, &v6, sizeof v6) == 0;
    }
    freeifaddrs(all);
    return found;
}

/* This machine's name, with or without its domain ("node1" is also
 * "node1.example.org"). Names are not looked up: a slow resolver must not
 * stall the start, and a name that resolves here may mean another host to
 * the ranks. */
static bool is_own_name(const char *a)
{
    char self[HOST_MAX + 1];
    if (gethostname(self, sizeof self) < 0)
        return false;
    self[HOST_MAX] = '\0';
    if (strcasecmp(a, self) == 0)
        return true;
    size_t la = strcspn(a, "."), ls = strcspn(self, ".");
    if (a[la] && self[ls])
        return false;
    return la == ls && strncasecmp(a, self, la) == 0;
}

/* Ranks on this machine are started directly. A host given with a user
 * ("alice@node1") always goes through the remote shell, which is what can
 * log in as someone else. */
static bool host_is_local(const struct host *h)
{
    if (h->addr != h->name)
        return false;
    return is_loopback_name(h->addr) || is_local_address(h->addr) || is_own_name(h->addr);
}

static void split_rsh(const char *cmd)
{
    static const char blanks[] = " \t";
    J.rsh = calloc(strlen(cmd) / 2 + 2, sizeof *J.rsh);
    char *copy = strdup(cmd);
    if (!J.rsh || !copy) {
        fprintf(stderr, "hooprun: out of memory\n");
        exit(1);
    }
    char *save = NULL;
    for (char *w = strtok_r(copy, blanks, &save); w; w = strtok_r(NULL, blanks, &save))
        J.rsh[J.nrsh++] = w;
    if (J.nrsh == 0)
        usage_error("the remote shell command is empty");
    const char *base = strrchr(J.rsh[0], '/');
    J.rsh_is_ssh = strcmp(base ? base + 1 : J.rsh[0], "ssh") == 0;
}

/* Read the hosts, settle the number of ranks and where each one runs. */
void setup_hosts(void)
{
    for (int i = 0; i < J.opt.n_host_lists; i++)
        parse_host_list(J.opt.host_lists[i]);
    if (J.opt.hostfile)
        read_hostfile(J.opt.hostfile);
    if (J.nhosts == 0)
        return;
    long slots = 0;
    for (int h = 0; h < J.nhosts; h++)
        slots += J.hosts[h].slots;
    if (J.opt.np == 0) {
        if (slots > MAX_RANKS)
            usage_error("the hosts have %ld slots, more than %d ranks: give -np", slots, MAX_RANKS);
        J.opt.np = (int)slots;
    }
    if (J.opt.np > slots)
        usage_error("%d ranks need %d slots, but the hosts have only %ld", J.opt.np, J.opt.np,
                    slots);
    /* Only the hosts that get a rank matter from here on. */
    int used = 0;
    for (long left = J.opt.np; left > 0; used++)
        left -= J.hosts[used].slots;
    J.nhosts = used;
    bool any_remote = false;
    for (int h = 0; h < J.nhosts; h++) {
        J.hosts[h].local = host_is_local(&J.hosts[h]);
        any_remote |= !J.hosts[h].local;
    }
    const char *env_rsh = getenv("HOOP_RSH");
    if (J.opt.rsh)
        split_rsh(J.opt.rsh);
    else if (any_remote)
        split_rsh(env_rsh && *env_rsh ? env_rsh : "ssh");
}

void place_ranks(void)
{
    int h = 0, left = J.nhosts ? J.hosts[0].slots : 0;
    J.nremote = 0;
    for (int r = 0; r < J.opt.np; r++) {
        struct rank *k = &J.ranks[r];
        k->io[0].fd = k->io[1].fd = -1;
        k->stdin_w = -1;
        k->host = -1;
        if (J.nhosts == 0)
            continue;
        if (left == 0)
            left = J.hosts[++h].slots;
        left--;
        k->host = h;
        k->remote = !J.hosts[h].local;
        if (k->remote)
            J.nremote++;
    }
}
