/* reap.c - ranks that ended: reaping them, and what their end means for the
 * job. */
#include "tools/hooprun/hooprun.h"

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
void reap(bool may_drain)
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

void child_fail(const char *what, int err)
{
    char line[512];
    int n = snprintf(line, sizeof line, "hooprun: %s: %s\n", what, strerror(err));
    if (n > 0) {
        ssize_t w = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        (void)w;
    }
    _exit(EXIT_CANNOT_RUN);
}
