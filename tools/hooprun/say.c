/* say.c - hooprun's own messages: its lines on stderr, the usage error, a
 * signal's name. */
#include "tools/hooprun/hooprun.h"

/* hooprun's own messages: one write each so that they stay whole lines, and
 * no waiting on a stalled stderr, since they matter less than acting. */
void say(const char *fmt, ...)
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

void usage_error(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hooprun: %s\n%s", line, usage_text);
    exit(EXIT_USAGE);
}

const char *signal_name(int sig, char *buf, size_t len)
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
