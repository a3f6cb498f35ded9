/* hooprun.c - start the ranks of a hoop job on this machine.
 *
 *   hooprun -np N [options] [--] prog [args...]
 *
 * Every rank is a child in a process group of its own, so that stopping a
 * rank also stops whatever it started. Its environment tells it where it
 * stands (HOOP_RANK, HOOP_SIZE, HOOP_ROOT, HOOP_TOKEN). Its stdout and stderr
 * come back through pipes and are forwarded whole lines at a time, tagged
 * with the rank, so that the lines of different ranks never mix mid-line.
 *
 * The first rank to fail brings the job down: the others get SIGTERM, then
 * SIGKILL after a grace period, and hooprun exits with the failed rank's
 * status, so that a broken job never looks like a good one and never sits
 * waiting for ranks that will not get their peer back.
 *
 * One poll() loop over a signalfd and every pipe does all the work: no
 * threads, no signal handlers, and every wait has a deadline once something
 * has gone wrong.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 4096
/* Longest line forwarded in one piece; longer ones are cut so that a rank
 * that never writes a newline cannot make hooprun buffer without bound. */
#define LINE_MAX_BYTES (64 * 1024)
#define GRACE_S 3.0
/* After SIGKILL a process normally vanishes at once; one stuck in the kernel
 * must still not keep hooprun from returning. */
#define REAP_WAIT_S 5.0
/* A descendant that left the rank's process group can hold its pipes open
 * forever; once every rank has exited, its output gets this long. */
#define DRAIN_S 3.0
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define EXIT_CANNOT_RUN 127

struct stream {
    int fd;       /* read end of the pipe, -1 once closed */
    char *buf;    /* the unfinished line, allocated when first needed */
    size_t len;
};

struct rank {
    pid_t pid;    /* also its process group */
    bool running; /* started and not reaped yet */
    struct stream io[2]; /* [0] its stdout, [1] its stderr */
};

/* Lines are gathered here so that one read from a rank becomes one write. */
struct outbuf {
    int fd;
    bool broken;  /* the reader went away: drop output, keep the job going */
    size_t chunk; /* largest write that cannot block once poll said POLLOUT */
    size_t len;
    char data[2 * (LINE_MAX_BYTES + 64)];
};

struct options {
    int np;
    int port;
    double timeout_s;
    bool tag;
    char **argv;
};

static struct {
    struct options opt;
    struct rank *ranks;
    int started;
    int running;
    int sigfd;
    pid_t self;
    char token[33];
    char root[32];
    bool stopping;
    bool killed;
    bool abandon;   /* leave now, dropping whatever is still pending */
    int exit_code;  /* -1 until the first failure decides it */
    uint64_t timeout_at, kill_at, give_up_at, drain_at; /* 0 = none */
    sigset_t orig_mask;
    struct sigaction orig_pipe;
    struct rlimit orig_nofile;
    bool nofile_raised;
    bool stdin_is_tty;
} J;

static struct outbuf out_stdout, out_stderr;
static char scratch[LINE_MAX_BYTES + 1];

static const char usage_text[] =
    "usage: hooprun -np N [options] [--] prog [args...]\n"
    "Start N ranks of prog on this machine. Each gets HOOP_RANK, HOOP_SIZE,\n"
    "HOOP_ROOT (127.0.0.1:PORT) and HOOP_TOKEN (fresh for every job).\n"
    "\n"
    "  -np N, -n N     number of ranks, 1..4096\n"
    "  --port P        port of the root on 127.0.0.1 (default: a free one)\n"
    "  --timeout SEC   stop every rank after SEC seconds and exit with 124\n"
    "  --no-tag        do not prefix output lines with \"[rank] \"\n"
    "  -h, --help      show this help\n"
    "\n"
    "Output of the ranks is forwarded line by line, stdout to stdout and\n"
    "stderr to stderr. Rank 0 reads hooprun's stdin unless it is a terminal;\n"
    "the others read /dev/null. When a rank fails, the others get SIGTERM,\n"
    "then SIGKILL after 3 s, and hooprun exits with the failed rank's status\n"
    "(128+S for signal S); SIGINT or SIGTERM to hooprun stops the job the same\n"
    "way (a second one kills at once).\n";

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t after_s(double s)
{
    return now_ns() + (uint64_t)(s * 1e9);
}

/* hooprun's own messages: one write each so that they stay whole lines, and
 * no waiting on a stalled stderr, since they matter less than acting. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[512];
    int n = snprintf(line, sizeof line, "hooprun: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    const char *p = line;
    while (len > 0) {
        ssize_t w = write(STDERR_FILENO, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        len -= (size_t)w;
    }
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hooprun: %s\n%s", line, usage_text);
    exit(EXIT_USAGE);
}

static const char *signal_name(int sig, char *buf, size_t len)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
#define S(x) {x, #x}
        S(SIGHUP),  S(SIGINT),  S(SIGQUIT), S(SIGILL),    S(SIGTRAP), S(SIGABRT),
        S(SIGBUS),  S(SIGFPE),  S(SIGKILL), S(SIGUSR1),   S(SIGSEGV), S(SIGUSR2),
        S(SIGPIPE), S(SIGALRM), S(SIGTERM), S(SIGCHLD),   S(SIGCONT), S(SIGSTOP),
        S(SIGTSTP), S(SIGTTIN), S(SIGTTOU), S(SIGURG),    S(SIGXCPU), S(SIGXFSZ),
        S(SIGVTALRM), S(SIGPROF), S(SIGWINCH), S(SIGSYS),
#ifdef SIGSTKFLT
        S(SIGSTKFLT),
#endif
#ifdef SIGIO
        S(SIGIO),
#endif
#ifdef SIGPWR
        S(SIGPWR),
#endif
#undef S
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    if (sig >= SIGRTMIN && sig <= SIGRTMAX)
        snprintf(buf, len, "SIGRTMIN+%d", sig - SIGRTMIN);
    else
        snprintf(buf, len, "SIG%d", sig);
    return buf;
}

/* ---- stopping the job ---------------------------------------------------- */

static void set_exit(int code)
{
    if (J.exit_code < 0)
        J.exit_code = code;
}

static int signal_running(int sig)
{
    int n = 0;
    for (int r = 0; r < J.started; r++) {
        if (!J.ranks[r].running)
            continue;
        /* Should setpgid have failed on both sides of the fork, the rank
         * leads no group of its own; it can still be reached alone. */
        if (kill(-J.ranks[r].pid, sig) < 0 && errno == ESRCH)
            kill(J.ranks[r].pid, sig);
        n++;
    }
    return n;
}

static void begin_stop(void)
{
    if (J.stopping)
        return;
    J.stopping = true;
    J.timeout_at = 0;
    signal_running(SIGTERM);
    J.kill_at = after_s(GRACE_S);
    J.give_up_at = J.kill_at + (uint64_t)(REAP_WAIT_S * 1e9);
}

static void kill_now(void)
{
    int n = signal_running(SIGKILL);
    if (n > 0)
        say("%d rank%s still running; sending SIGKILL", n, n == 1 ? "" : "s");
    J.killed = true;
    J.kill_at = 0;
    /* With every rank gone, only output is left, and the grace period for
     * it is over too. */
    J.give_up_at = J.running > 0 ? after_s(REAP_WAIT_S) : now_ns();
}

static void on_stop_signal(int sig)
{
    char buf[32];
    const char *name = signal_name(sig, buf, sizeof buf);
    if (!J.stopping) {
        say("got %s; stopping all ranks", name);
        set_exit(128 + sig);
        begin_stop();
    } else if (!J.killed) {
        /* Asking while the job is already stopping means the grace period
         * is not wanted. */
        say("got %s while stopping; killing all ranks", name);
        kill_now();
    }
}

static void check_deadlines(void)
{
    uint64_t now = now_ns();
    if (J.timeout_at && now >= J.timeout_at) {
        say("timeout of %g s expired; stopping all ranks", J.opt.timeout_s);
        set_exit(EXIT_TIMEOUT);
        begin_stop();
    }
    if (J.kill_at && now >= J.kill_at)
        kill_now();
    if (J.give_up_at && now >= J.give_up_at && !J.abandon) {
        if (J.running > 0)
            say("%d rank%s did not exit after SIGKILL; leaving without them", J.running,
                J.running == 1 ? "" : "s");
        J.abandon = true;
    }
}

/* The drain deadline only bounds the wait for the ranks' pipes; a slow
 * reader of hooprun's own output is waited for, as any filter would. */
static uint64_t next_deadline(bool with_drain)
{
    uint64_t d = 0;
    uint64_t all[] = {J.timeout_at, J.kill_at, J.give_up_at, with_drain ? J.drain_at : 0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] && (d == 0 || all[i] < d))
            d = all[i];
    return d;
}

static int ms_until(uint64_t deadline)
{
    if (deadline == 0)
        return -1;
    uint64_t now = now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* SIGCHLD needs no action here: the main loop reaps on every turn. */
static void read_signals(void)
{
    struct signalfd_siginfo si[16];
    for (;;) {
        ssize_t n = read(J.sigfd, si, sizeof si);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        for (size_t i = 0; i < (size_t)n / sizeof si[0]; i++) {
            int sig = (int)si[i].ssi_signo;
            if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
                on_stop_signal(sig);
        }
    }
}

/* ---- output -------------------------------------------------------------- */

static void reap(bool may_drain);

static void outbuf_init(struct outbuf *o, int fd)
{
    struct stat st;
    o->fd = fd;
    o->len = 0;
    o->broken = false;
    /* A pipe or socket that polls writable takes PIPE_BUF bytes without
     * blocking; a larger write could block with the job left unattended. */
    if (fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)))
        o->chunk = SIZE_MAX;
    else
        o->chunk = PIPE_BUF;
}

/* Write everything, waiting while the reader is slow. The wait also watches
 * the signalfd and the deadlines, so that a reader that stopped reading does
 * not keep hooprun from stopping the job; once the job is abandoned, what
 * cannot be written is dropped. */
static void out_flush(struct outbuf *o)
{
    const char *p = o->data;
    size_t n = o->len;
    o->len = 0;
    while (n > 0 && !o->broken && !J.abandon) {
        struct pollfd pf[2] = {{.fd = o->fd, .events = POLLOUT}, {.fd = J.sigfd, .events = POLLIN}};
        int pr = poll(pf, 2, ms_until(next_deadline(false)));
        if (pr < 0 && errno != EINTR) {
            o->broken = true;
            break;
        }
        if (pr > 0 && pf[1].revents)
            read_signals();
        /* Without reaping here, a rank that died while the reader stalled
         * would be counted as alive, and the job not stopped for it. */
        reap(false);
        check_deadlines();
        if (pr <= 0 || !pf[0].revents)
            continue;
        ssize_t w = write(o->fd, p, n < o->chunk ? n : o->chunk);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            continue;
        } else {
            /* EPIPE and the like: nobody reads any more. The ranks may still
             * be doing useful work, so the job goes on. */
            o->broken = true;
        }
    }
}

static void emit(int rank, struct outbuf *o, const char *p, size_t n, bool has_newline)
{
    char prefix[16];
    size_t plen = 0;
    if (J.opt.tag) {
        int k = snprintf(prefix, sizeof prefix, "[%d] ", rank);
        plen = k > 0 ? (size_t)k : 0;
    }
    /* Tagged output must end every piece with a newline, or the next tag
     * would land mid-line; untagged output is passed through as it came. */
    size_t extra = J.opt.tag && !has_newline ? 1 : 0;
    if (o->len + plen + n + extra > sizeof o->data)
        out_flush(o);
    memcpy(o->data + o->len, prefix, plen);
    memcpy(o->data + o->len + plen, p, n);
    o->len += plen + n;
    if (extra)
        o->data[o->len++] = '\n';
}

/* Forward the whole lines of data[0..len) and the pieces of an over-long
 * line; return how many bytes were consumed (the rest is an unfinished
 * line of at most LINE_MAX_BYTES). */
static size_t emit_lines(int rank, struct outbuf *o, const char *data, size_t len)
{
    size_t start = 0;
    for (;;) {
        const char *nl = memchr(data + start, '\n', len - start);
        if (!nl)
            break;
        size_t end = (size_t)(nl - data) + 1;
        emit(rank, o, data + start, end - start, true);
        start = end;
    }
    while (len - start > LINE_MAX_BYTES) {
        emit(rank, o, data + start, LINE_MAX_BYTES, false);
        start += LINE_MAX_BYTES;
    }
    return start;
}

static struct outbuf *dest_of(int which)
{
    return which == 0 ? &out_stdout : &out_stderr;
}

static void stream_close(int rank, int which)
{
    struct stream *s = &J.ranks[rank].io[which];
    if (s->len > 0) {
        emit(rank, dest_of(which), s->buf, s->len, false);
        out_flush(dest_of(which));
    }
    free(s->buf);
    s->buf = NULL;
    s->len = 0;
    close(s->fd);
    s->fd = -1;
}

/* One read from a rank's pipe. Returns false when nothing more is to be had
 * now (would block, or the pipe was closed). */
static bool stream_read(int rank, int which)
{
    struct stream *s = &J.ranks[rank].io[which];
    struct outbuf *o = dest_of(which);
    char *base = s->buf ? s->buf : scratch;
    ssize_t n = read(s->fd, base + s->len, LINE_MAX_BYTES + 1 - s->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return false;
    if (n <= 0) {
        stream_close(rank, which);
        return false;
    }
    size_t total = s->len + (size_t)n;
    size_t used = emit_lines(rank, o, base, total);
    size_t rest = total - used;
    if (rest > 0 && !s->buf) {
        s->buf = malloc(LINE_MAX_BYTES + 1);
        if (!s->buf) {
            /* Better a line cut in two than output lost. */
            emit(rank, o, base + used, rest, false);
            used = total;
            rest = 0;
        }
    }
    if (rest > 0)
        memmove(s->buf, base + used, rest);
    s->len = rest;
    out_flush(o);
    return true;
}

/* Take in what a rank left in its pipes before saying that it failed, so
 * that its last words come before hooprun's. Bounded, because a descendant
 * may still be writing. */
static void drain_rank(int rank)
{
    for (int which = 0; which < 2; which++)
        for (int i = 0; i < 64 && J.ranks[rank].io[which].fd >= 0; i++)
            if (!stream_read(rank, which))
                break;
}

/* ---- ranks --------------------------------------------------------------- */

static void rank_ended(int rank, int status, bool may_drain)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    /* Once the job is stopping, later deaths are mostly its consequence. */
    if (J.stopping)
        return;
    if (may_drain)
        drain_rank(rank);
    if (WIFEXITED(status)) {
        say("rank %d exited with status %d; stopping the other ranks", rank, WEXITSTATUS(status));
        set_exit(WEXITSTATUS(status));
    } else {
        char buf[32];
        int sig = WTERMSIG(status);
        say("rank %d was killed by signal %s (%d); stopping the other ranks", rank,
            signal_name(sig, buf, sizeof buf), sig);
        set_exit(128 + sig);
    }
    begin_stop();
}

static int rank_of_pid(pid_t pid)
{
    for (int r = 0; r < J.started; r++)
        if (J.ranks[r].pid == pid)
            return r;
    return -1;
}

/* may_drain is false while output is being written, which draining would
 * re-enter. */
static void reap(bool may_drain)
{
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        /* Look before reaping: while the leader is an unreaped zombie, its
         * process group id cannot be reused, so the group can still be
         * signalled safely. */
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        pid_t pid = si.si_pid;
        if (pid == 0)
            return;
        int r = rank_of_pid(pid);
        bool failed = !(si.si_code == CLD_EXITED && si.si_status == 0);
        /* Once the job is being torn down, whatever is left in the group of
         * a rank that is gone would be orphaned: a descendant that ignored
         * SIGTERM, or one forked just as the group was signalled and so
         * never got it. This is the last chance to stop it. */
        if (r >= 0 && J.ranks[r].running && (J.stopping || failed))
            kill(-pid, SIGKILL);
        int status;
        pid_t got;
        do
            got = waitpid(pid, &status, 0);
        while (got < 0 && errno == EINTR);
        if (got != pid || r < 0 || !J.ranks[r].running)
            continue;
        J.ranks[r].running = false;
        J.running--;
        rank_ended(r, status, may_drain);
    }
}

static void child_fail(const char *what, int err) __attribute__((noreturn));
static void child_fail(const char *what, int err)
{
    char line[512];
    int n = snprintf(line, sizeof line, "hooprun: %s: %s\n", what, strerror(err));
    if (n > 0) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)w;
    }
    _exit(EXIT_CANNOT_RUN);
}

/* In the child, between fork and exec. hooprun has a single thread, so
 * malloc-using calls (setenv) are safe here. */
static void run_child(int rank, int out_w, int err_w) __attribute__((noreturn));
static void run_child(int rank, int out_w, int err_w)
{
    setpgid(0, 0);
    /* Ranks must not outlive a hooprun that was killed outright: they would
     * wait for peers that never come. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != J.self)
        _exit(128 + SIGTERM);

    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0)
        _exit(EXIT_CANNOT_RUN);
    /* A rank in a background process group that reads the terminal would be
     * stopped by SIGTTIN and hang the job; several ranks sharing one input
     * would split it unpredictably. */
    if (rank != 0 || J.stdin_is_tty) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || dup2(fd, STDIN_FILENO) < 0)
            child_fail("cannot open /dev/null", errno);
    }

    sigaction(SIGPIPE, &J.orig_pipe, NULL);
    sigprocmask(SIG_SETMASK, &J.orig_mask, NULL);
    if (J.nofile_raised)
        setrlimit(RLIMIT_NOFILE, &J.orig_nofile);

    char num[16];
    snprintf(num, sizeof num, "%d", rank);
    int rc = setenv("HOOP_RANK", num, 1);
    snprintf(num, sizeof num, "%d", J.opt.np);
    rc |= setenv("HOOP_SIZE", num, 1);
    rc |= setenv("HOOP_ROOT", J.root, 1);
    rc |= setenv("HOOP_TOKEN", J.token, 1);
    if (rc != 0)
        child_fail("cannot set the environment", errno);

    execvp(J.opt.argv[0], J.opt.argv);
    char what[300];
    snprintf(what, sizeof what, "cannot run '%s'", J.opt.argv[0]);
    child_fail(what, errno);
}

static bool spawn(int rank)
{
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        say("cannot start rank %d: pipe: %s", rank, strerror(errno));
        goto fail;
    }
    pid_t pid = fork();
    if (pid < 0) {
        say("cannot start rank %d: fork: %s", rank, strerror(errno));
        goto fail;
    }
    if (pid == 0)
        run_child(rank, out[1], err[1]);
    /* Also here, so that the group exists before the parent may signal it,
     * whichever of the two runs first. */
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    struct rank *r = &J.ranks[rank];
    r->pid = pid;
    r->running = true;
    r->io[0].fd = out[0];
    r->io[1].fd = err[0];
    J.started++;
    J.running++;
    return true;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
    }
    return false;
}

/* ---- setup --------------------------------------------------------------- */

static bool parse_int(const char *s, long lo, long hi, int *out)
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

static void parse_args(int argc, char **argv, struct options *opt)
{
    opt->np = 0;
    opt->port = 0;
    opt->timeout_s = 0;
    opt->tag = true;
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
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (opt->np == 0)
        usage_error("-np N is required");
    if (i >= argc)
        usage_error("no program to run");
    opt->argv = argv + i;
}

/* A port that is free now; the root binds it a moment later. A race with
 * another program is possible but rare, and --port exists for when it bites. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

static bool make_token(char out[33])
{
    unsigned char raw[16];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[32] = '\0';
    return true;
}

/* A rank's pipe must never land on 0, 1 or 2, or dup2 in the child would
 * clobber it; so those are opened on /dev/null if hooprun got them closed. */
static void ensure_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
            if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0)
                exit(1);
}

/* Two pipes per rank plus a few: 4096 ranks need more than the usual soft
 * limit of 1024. The ranks get the original limit back. */
static bool raise_nofile(int np)
{
    rlim_t need = (rlim_t)np * 2 + 32;
    if (getrlimit(RLIMIT_NOFILE, &J.orig_nofile) < 0)
        return true;
    if (J.orig_nofile.rlim_cur == RLIM_INFINITY || J.orig_nofile.rlim_cur >= need)
        return true;
    if (J.orig_nofile.rlim_max != RLIM_INFINITY && J.orig_nofile.rlim_max < need) {
        say("%d ranks need %lu open files, but the limit is %lu", np, (unsigned long)need,
            (unsigned long)J.orig_nofile.rlim_max);
        return false;
    }
    struct rlimit rl = J.orig_nofile;
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        say("cannot raise the open file limit to %lu: %s", (unsigned long)need, strerror(errno));
        return false;
    }
    J.nofile_raised = true;
    return true;
}

static bool setup_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = SIG_IGN;
    /* A reader that goes away must not kill hooprun and orphan the job. */
    sigaction(SIGPIPE, &sa, &J.orig_pipe);
    /* An ignored SIGCHLD, inherited from whoever started us, would make the
     * kernel reap the ranks and hide their exit status. */
    sa.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &sa, NULL);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    if (sigprocmask(SIG_BLOCK, &set, &J.orig_mask) < 0)
        return false;
    J.sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    return J.sigfd >= 0;
}

static void run_loop(void)
{
    size_t cap = 1 + 2 * (size_t)J.started;
    struct pollfd *pf = calloc(cap, sizeof *pf);
    int *who = calloc(cap, sizeof *who); /* rank * 2 + which, per pollfd */
    if (!pf || !who) {
        say("out of memory");
        set_exit(1);
        begin_stop();
        /* Without the pipes nothing can be forwarded; stop and leave. */
        while (J.running > 0 && !J.abandon) {
            struct pollfd sp = {.fd = J.sigfd, .events = POLLIN};
            poll(&sp, 1, ms_until(next_deadline(false)));
            read_signals();
            reap(false);
            check_deadlines();
        }
        free(pf);
        free(who);
        return;
    }
    for (;;) {
        int open_streams = 0;
        size_t n = 1;
        pf[0].fd = J.sigfd;
        pf[0].events = POLLIN;
        for (int r = 0; r < J.started; r++)
            for (int w = 0; w < 2; w++)
                if (J.ranks[r].io[w].fd >= 0) {
                    pf[n].fd = J.ranks[r].io[w].fd;
                    pf[n].events = POLLIN;
                    who[n] = r * 2 + w;
                    n++;
                    open_streams++;
                }
        if (J.abandon || (J.running == 0 && open_streams == 0))
            break;
        if (J.running == 0 && J.drain_at == 0)
            J.drain_at = after_s(DRAIN_S);
        if (J.drain_at && now_ns() >= J.drain_at) {
            say("%d output pipe%s still open after every rank exited (a process left "
                "behind?); not waiting for %s",
                open_streams, open_streams == 1 ? "" : "s", open_streams == 1 ? "it" : "them");
            for (int r = 0; r < J.started; r++)
                for (int w = 0; w < 2; w++)
                    if (J.ranks[r].io[w].fd >= 0)
                        stream_close(r, w);
            break;
        }

        int pr = poll(pf, n, ms_until(next_deadline(true)));
        if (pr < 0 && errno != EINTR) {
            /* Nothing can be watched any more, so nothing can be waited for. */
            say("poll: %s; killing all ranks", strerror(errno));
            set_exit(1);
            signal_running(SIGKILL);
            break;
        }
        /* Pipes before signals: a rank's output then tends to come out
         * before the news of its death. */
        if (pr > 0)
            for (size_t i = 1; i < n; i++)
                if (pf[i].revents) {
                    int r = who[i] / 2, w = who[i] % 2;
                    if (J.ranks[r].io[w].fd >= 0)
                        stream_read(r, w);
                }
        if (pr > 0 && pf[0].revents)
            read_signals();
        reap(true);
        check_deadlines();
    }
    free(pf);
    free(who);
}

int main(int argc, char **argv)
{
    J.exit_code = -1;
    J.sigfd = -1;
    parse_args(argc, argv, &J.opt);
    ensure_std_fds();
    J.self = getpid();
    J.stdin_is_tty = isatty(STDIN_FILENO);

    int port = J.opt.port ? J.opt.port : free_port();
    if (port <= 0) {
        say("cannot find a free port on 127.0.0.1: %s", strerror(errno));
        return 1;
    }
    snprintf(J.root, sizeof J.root, "127.0.0.1:%d", port);
    if (!make_token(J.token)) {
        say("cannot get random bytes for the job token: %s", strerror(errno));
        return 1;
    }
    if (!raise_nofile(J.opt.np))
        return 1;
    J.ranks = calloc((size_t)J.opt.np, sizeof *J.ranks);
    if (!J.ranks) {
        say("out of memory");
        return 1;
    }
    if (!setup_signals()) {
        say("cannot set up signal handling: %s", strerror(errno));
        return 1;
    }
    outbuf_init(&out_stdout, STDOUT_FILENO);
    outbuf_init(&out_stderr, STDERR_FILENO);

    if (J.opt.timeout_s > 0)
        J.timeout_at = after_s(J.opt.timeout_s);
    for (int r = 0; r < J.opt.np; r++) {
        J.ranks[r].io[0].fd = J.ranks[r].io[1].fd = -1;
        if (!spawn(r)) {
            set_exit(1);
            say("stopping the %d rank%s already started", J.started, J.started == 1 ? "" : "s");
            begin_stop();
            break;
        }
    }
    run_loop();
    out_flush(&out_stdout);
    out_flush(&out_stderr);
    return J.exit_code < 0 ? 0 : J.exit_code;
}
