/* hooprun.c - start the ranks of a hoop job, on this machine or on several.
 *
 *   hooprun -np N [options] [--] prog [args...]
 *   hooprun -np N -H hostA:4,hostB:4 [options] [--] prog [args...]
 *
 * Every rank is a child in a process group of its own, so that stopping a
 * rank also stops whatever it started. Its environment tells it where it
 * stands (HOOP_RANK, HOOP_SIZE, HOOP_ROOT, HOOP_TOKEN). Its stdout and stderr
 * come back through pipes and are forwarded whole lines at a time, tagged
 * with the rank, so that the lines of different ranks never mix mid-line.
 *
 * A rank on another host is a local remote-shell client (ssh) whose output
 * comes back through the same pipes; how stopping it reaches the remote
 * process is told at remote_wrapper.
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
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
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
#include <strings.h>
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
/* Where the root listens when it is on another host: no free port can be
 * probed there, so one is drawn from a range that ephemeral ports (32768..
 * on Linux) overlap only in part and well-known services seldom use. */
#define REMOTE_PORT_LO 20000
#define REMOTE_PORT_HI 59999
#define HOST_MAX 255

struct stream {
    int fd;       /* read end of the pipe, -1 once closed */
    char *buf;    /* the unfinished line, allocated when first needed */
    size_t len;
};

struct rank {
    pid_t pid;    /* also its process group */
    bool running; /* started and not reaped yet */
    struct stream io[2]; /* [0] its stdout, [1] its stderr */
    int host;     /* index into J.hosts, -1 when no hosts were given */
    bool remote;  /* pid is the remote shell client */
    int stdin_w;  /* a remote rank's lifeline (see remote_wrapper), or -1 */
};

struct host {
    char *name;       /* as given, less IPv6 brackets: what the remote shell reaches */
    const char *addr; /* name past any "user@": where ranks connect */
    int slots;
    bool local;       /* its ranks run here, without a remote shell */
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
    const char **host_lists; /* every -H value, in order */
    int n_host_lists;
    const char *hostfile;
    const char *rsh;         /* --rsh, else HOOP_RSH, else "ssh" */
    const char *root_addr;
    const char **xvars;      /* -x NAME or NAME=VALUE, in order */
    int nx;
};

static struct {
    struct options opt;
    struct rank *ranks;
    int started;
    int running;
    int sigfd;
    pid_t self;
    char token[33];
    char root[HOST_MAX + 16];
    struct host *hosts;
    int nhosts;
    int nremote;     /* ranks started through the remote shell */
    char **rsh;      /* the remote shell's words, NULL-terminated */
    int nrsh;
    bool rsh_is_ssh;
    char *cwd;       /* where remote ranks start */
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
    "                    first host, a random one in 20000..59999)\n"
    "  --timeout SEC     stop every rank after SEC seconds and exit with 124\n"
    "  --no-tag          do not prefix output lines with \"[rank] \"\n"
    "  -h, --help        show this help\n"
    "\n"
    "Output of the ranks is forwarded line by line, stdout to stdout and\n"
    "stderr to stderr. Rank 0 reads hooprun's stdin unless it is a terminal or\n"
    "rank 0 is remote; the others read /dev/null. When a rank fails, the others\n"
    "get SIGTERM, then SIGKILL after 3 s, and hooprun exits with the failed\n"
    "rank's status (128+S for signal S); SIGINT or SIGTERM to hooprun stops the\n"
    "job the same way (a second one kills at once). Remote ranks run in the\n"
    "same directory as hooprun, and are stopped when their remote shell ends.\n";

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

static void close_lifeline(struct rank *k)
{
    if (k->stdin_w >= 0) {
        close(k->stdin_w);
        k->stdin_w = -1;
    }
}

static int signal_running(int sig)
{
    int n = 0;
    for (int r = 0; r < J.started; r++) {
        struct rank *k = &J.ranks[r];
        if (!k->running)
            continue;
        n++;
        /* SIGTERM to the remote shell client would only cut the connection:
         * the remote process would get no signal, and its last output would
         * be lost. Closing the lifeline asks the remote side to stop it, and
         * the client then exits with it; SIGKILL still ends the client. */
        if (k->remote) {
            close_lifeline(k);
            if (sig == SIGTERM)
                continue;
        }
        /* Should setpgid have failed on both sides of the fork, the rank
         * leads no group of its own; it can still be reached alone. */
        if (kill(-k->pid, sig) < 0 && errno == ESRCH)
            kill(k->pid, sig);
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
    struct rank *k = &J.ranks[rank];
    close_lifeline(k);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    /* Once the job is stopping, later deaths are mostly its consequence. */
    if (J.stopping)
        return;
    if (may_drain)
        drain_rank(rank);
    char where[HOST_MAX + 8] = "";
    if (k->remote)
        snprintf(where, sizeof where, " on %s", J.hosts[k->host].name);
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        say("rank %d%s exited with status %d%s; stopping the other ranks", rank, where, code,
            k->remote && J.rsh_is_ssh && code == 255 ? " (also ssh's status when it cannot connect)"
                                                     : "");
        set_exit(code);
    } else {
        char buf[32];
        int sig = WTERMSIG(status);
        say("rank %d%s was killed by signal %s (%d); stopping the other ranks", rank, where,
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

/* ---- remote ranks -------------------------------------------------------- */

/* How a remote rank runs, as an sh script with the program and its
 * arguments as "$@". A remote shell started without a terminal sends no
 * signal to the remote side when its client is killed or its connection
 * drops, and a terminal (ssh -tt) would mangle the output; so the client's
 * stdin is the rank's lifeline instead. hooprun writes the job token into it
 * first, then keeps it open for the life of the rank. Once it closes - hooprun
 * stops the job, or hooprun, the client or the connection dies - the watcher
 * sees EOF and sends SIGTERM, then SIGKILL 3 s later, to the program's
 * process group (its own session under setsid, so that its descendants go
 * too). When the program ends by itself, whatever is left in its group is
 * killed as well: it would hold the connection open, and a local rank's
 * leftovers are not waited for either. The watcher's trap takes its sleep
 * along when it is told to go, so that nothing outlives the rank.
 *
 * The token travels on stdin rather than in the command line, where every
 * user of either host could read it with ps. The program's own stdin is
 * /dev/null, and, as for any command that sh runs in the background, SIGINT
 * and SIGQUIT are ignored in it; hooprun stops ranks with SIGTERM. The
 * script exits with the program's status (128+S when it was killed by signal
 * S), which the client passes on; the redirection on wait keeps dash from
 * reporting such a death as rank output. */
static const char remote_wrapper[] =
    "IFS= read -r HOOP_TOKEN || exit 1; export HOOP_TOKEN; "
    "exec 3<&0 </dev/null; "
    "if command -v setsid >/dev/null 2>&1; then setsid \"$@\" 3<&- & g=-$!; "
    "else \"$@\" 3<&- & g=$!; fi; pid=$!; "
    "{ trap 'kill $s; exit' TERM; cat >/dev/null; kill -s TERM -- $g; "
    "sleep 3 & s=$!; wait $s; kill -s KILL -- $g; } <&3 >/dev/null 2>&1 & "
    "w=$!; exec 3<&-; wait $pid 2>/dev/null; rc=$?; "
    "kill $w 2>/dev/null; kill -s KILL -- $g 2>/dev/null; exit $rc";

struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* One word for a POSIX shell, whatever it holds: inside single quotes only
 * the quote itself is special, and it is written as '\''. */
static void sb_word(struct sbuf *b, const char *s)
{
    if (b->len > 0)
        sb_add(b, " ", 1);
    sb_add(b, "'", 1);
    for (const char *q; (q = strchr(s, '\'')); s = q + 1) {
        sb_add(b, s, (size_t)(q - s));
        sb_add(b, "'\\''", 4);
    }
    sb_str(b, s);
    sb_add(b, "'", 1);
}

static void sb_assign(struct sbuf *b, const char *name, const char *value)
{
    struct sbuf w = {0};
    sb_str(&w, name);
    sb_add(&w, "=", 1);
    sb_str(&w, value);
    if (w.failed)
        b->failed = true;
    else
        sb_word(b, w.p);
    free(w.p);
}

/* The -x variables that have a value, as NAME and VALUE. */
static bool xvar(int i, char *name, size_t len, const char **value)
{
    const char *x = J.opt.xvars[i], *eq = strchr(x, '=');
    size_t n = eq ? (size_t)(eq - x) : strlen(x);
    if (n >= len)
        return false;
    memcpy(name, x, n);
    name[n] = '\0';
    *value = eq ? eq + 1 : getenv(name);
    return *value != NULL;
}

/* What the remote user's shell runs:
 *   cd 'CWD' && exec env 'NAME=VALUE'... 'HOOP_RANK=R' 'HOOP_SIZE=N' 'HOOP_ROOT=H:P'
 *       sh -c 'WRAPPER' sh 'PROG' 'ARG'...
 * Every word is quoted, so that any argument reaches the program intact;
 * the HOOP_ variables come last, so that -x cannot change them. */
static char *remote_command(int rank)
{
    struct sbuf b = {0};
    char num[16], name[256];
    const char *value;
    sb_word(&b, "cd");
    sb_word(&b, J.cwd);
    sb_str(&b, " && exec");
    sb_word(&b, "env");
    for (int i = 0; i < J.opt.nx; i++)
        if (xvar(i, name, sizeof name, &value))
            sb_assign(&b, name, value);
    snprintf(num, sizeof num, "%d", rank);
    sb_assign(&b, "HOOP_RANK", num);
    snprintf(num, sizeof num, "%d", J.opt.np);
    sb_assign(&b, "HOOP_SIZE", num);
    sb_assign(&b, "HOOP_ROOT", J.root);
    sb_word(&b, "sh");
    sb_word(&b, "-c");
    sb_word(&b, remote_wrapper);
    sb_word(&b, "sh");
    for (char **a = J.opt.argv; *a; a++)
        sb_word(&b, *a);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The remote shell's words, then for ssh -T (a terminal would mangle the
 * output and keep EOF on the lifeline from reaching the remote side) and
 * BatchMode (a password prompt would hang the job unseen), then the host and
 * the command. The user's -o options come first, so they win where they
 * disagree: ssh keeps the first value it gets of each. */
static char **remote_argv(int rank, char *cmd)
{
    char **av = calloc((size_t)J.nrsh + 6, sizeof *av);
    if (!av)
        return NULL;
    int n = 0;
    for (int i = 0; i < J.nrsh; i++)
        av[n++] = J.rsh[i];
    if (J.rsh_is_ssh) {
        av[n++] = "-T";
        av[n++] = "-o";
        av[n++] = "BatchMode=yes";
    }
    av[n++] = J.hosts[J.ranks[rank].host].name;
    av[n++] = cmd;
    av[n] = NULL;
    return av;
}

/* ---- starting ranks ------------------------------------------------------ */

/* In the child, between fork and exec. hooprun has a single thread, so
 * malloc-using calls (setenv) are safe here. */
static void run_child(int rank, int out_w, int err_w, int in_r, char **remote)
    __attribute__((noreturn));
static void run_child(int rank, int out_w, int err_w, int in_r, char **remote)
{
    setpgid(0, 0);
    /* Ranks must not outlive a hooprun that was killed outright: they would
     * wait for peers that never come. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != J.self)
        _exit(128 + SIGTERM);

    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0)
        _exit(EXIT_CANNOT_RUN);
    if (remote) {
        if (dup2(in_r, STDIN_FILENO) < 0)
            _exit(EXIT_CANNOT_RUN);
    } else if (rank != 0 || J.stdin_is_tty) {
        /* A rank in a background process group that reads the terminal
         * would be stopped by SIGTTIN and hang the job; several ranks
         * sharing one input would split it unpredictably. */
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || dup2(fd, STDIN_FILENO) < 0)
            child_fail("cannot open /dev/null", errno);
    }

    sigaction(SIGPIPE, &J.orig_pipe, NULL);
    sigprocmask(SIG_SETMASK, &J.orig_mask, NULL);
    if (J.nofile_raised)
        setrlimit(RLIMIT_NOFILE, &J.orig_nofile);

    if (remote) {
        execvp(remote[0], remote);
        char what[300];
        snprintf(what, sizeof what, "cannot run the remote shell '%s'", remote[0]);
        child_fail(what, errno);
    }

    int rc = 0;
    char num[16], name[256];
    const char *value;
    for (int i = 0; i < J.opt.nx; i++)
        if (strchr(J.opt.xvars[i], '=') && xvar(i, name, sizeof name, &value))
            rc |= setenv(name, value, 1);
    snprintf(num, sizeof num, "%d", rank);
    rc |= setenv("HOOP_RANK", num, 1);
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
    struct rank *r = &J.ranks[rank];
    int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1};
    char *cmd = NULL, **remote = NULL;
    if (r->remote) {
        cmd = remote_command(rank);
        remote = cmd ? remote_argv(rank, cmd) : NULL;
        if (!remote) {
            say("cannot start rank %d: out of memory", rank);
            goto fail;
        }
    }
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
        (r->remote && pipe2(in, O_CLOEXEC) < 0)) {
        say("cannot start rank %d: pipe: %s", rank, strerror(errno));
        goto fail;
    }
    if (r->remote) {
        /* Far less than a pipe holds, so it cannot block. */
        char line[sizeof J.token + 1];
        int n = snprintf(line, sizeof line, "%s\n", J.token);
        if (write(in[1], line, (size_t)n) != n) {
            say("cannot start rank %d: writing to its pipe: %s", rank, strerror(errno));
            goto fail;
        }
    }
    pid_t pid = fork();
    if (pid < 0) {
        say("cannot start rank %d: fork: %s", rank, strerror(errno));
        goto fail;
    }
    if (pid == 0)
        run_child(rank, out[1], err[1], in[0], remote);
    /* Also here, so that the group exists before the parent may signal it,
     * whichever of the two runs first. */
    setpgid(pid, pid);
    close(out[1]);
    close(err[1]);
    if (in[0] >= 0)
        close(in[0]);
    free(remote);
    free(cmd);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    r->pid = pid;
    r->running = true;
    r->io[0].fd = out[0];
    r->io[1].fd = err[0];
    r->stdin_w = in[1];
    J.started++;
    J.running++;
    return true;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (err[i] >= 0)
            close(err[i]);
        if (in[i] >= 0)
            close(in[i]);
    }
    free(remote);
    free(cmd);
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

static bool valid_var_name(const char *s, size_t n)
{
    if (n == 0 || n > 255 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_')
            return false;
    return true;
}

static void parse_args(int argc, char **argv, struct options *opt)
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

/* ---- hosts --------------------------------------------------------------- */

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

static bool is_loopback_name(const char *a)
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
static void setup_hosts(void)
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

static void place_ranks(void)
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

/* A port that is free now; the root binds it a moment later. A race with
 * another program is possible but rare, and --port exists for when it bites. */
static int free_port(uint32_t host_addr)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(host_addr);
    socklen_t len = sizeof addr;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}

static bool random_bytes(void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom((char *)buf + got, len - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

/* Where rank 0 listens: HOOP_ROOT. */
static bool setup_root(void)
{
    bool spread = J.nremote > 0;
    bool here = J.nhosts == 0 || J.hosts[0].local;
    const char *host;
    if (J.opt.root_addr)
        host = J.opt.root_addr;
    else if (!spread)
        host = "127.0.0.1";
    else if (is_loopback_name(J.hosts[0].addr))
        usage_error("the first host, %s, is this machine under a loopback name, which ranks on "
                    "other hosts cannot reach: name it so that they can, or give --root-addr ADDR",
                    J.hosts[0].name);
    else
        host = J.hosts[0].addr;

    int port = J.opt.port;
    if (port == 0 && here) {
        /* Probed on every address when other hosts connect: a port free
         * there is free on each address the root may bind. */
        bool any = spread || J.opt.root_addr;
        port = free_port(any ? INADDR_ANY : INADDR_LOOPBACK);
        if (port <= 0) {
            say("cannot find a free port on %s: %s", any ? "this machine" : "127.0.0.1",
                strerror(errno));
            return false;
        }
    } else if (port == 0) {
        uint32_t v;
        if (!random_bytes(&v, sizeof v)) {
            say("cannot get random bytes for the port: %s", strerror(errno));
            return false;
        }
        port = REMOTE_PORT_LO + (int)(v % (REMOTE_PORT_HI - REMOTE_PORT_LO + 1));
    }
    if (strchr(host, ':') && host[0] != '[')
        snprintf(J.root, sizeof J.root, "[%s]:%d", host, port);
    else
        snprintf(J.root, sizeof J.root, "%s:%d", host, port);
    return true;
}

static bool make_token(char out[33])
{
    unsigned char raw[16];
    if (!random_bytes(raw, sizeof raw))
        return false;
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

/* Two pipes per rank, a third for a remote one, plus a few: 4096 ranks need
 * more than the usual soft limit of 1024. The ranks get the original limit
 * back. */
static bool raise_nofile(int np, int nremote)
{
    rlim_t need = (rlim_t)np * 2 + (rlim_t)nremote + 32;
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
    setup_hosts();
    ensure_std_fds();
    J.self = getpid();
    J.stdin_is_tty = isatty(STDIN_FILENO);

    J.ranks = calloc((size_t)J.opt.np, sizeof *J.ranks);
    if (!J.ranks) {
        say("out of memory");
        return 1;
    }
    place_ranks();
    if (!setup_root())
        return 1;
    if (J.nremote > 0 && !(J.cwd = getcwd(NULL, 0))) {
        say("cannot get the current directory for the remote ranks: %s", strerror(errno));
        return 1;
    }
    if (!make_token(J.token)) {
        say("cannot get random bytes for the job token: %s", strerror(errno));
        return 1;
    }
    if (!raise_nofile(J.opt.np, J.nremote))
        return 1;
    if (!setup_signals()) {
        say("cannot set up signal handling: %s", strerror(errno));
        return 1;
    }
    outbuf_init(&out_stdout, STDOUT_FILENO);
    outbuf_init(&out_stderr, STDERR_FILENO);

    if (J.opt.timeout_s > 0)
        J.timeout_at = after_s(J.opt.timeout_s);
    for (int r = 0; r < J.opt.np; r++) {
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
