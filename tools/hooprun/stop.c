/* stop.c - stopping the job: the first failure's exit status, SIGTERM then
 * SIGKILL to every rank, the deadlines, and the signals hooprun itself gets. */
#include "tools/hooprun/hooprun.h"

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t after_s(double s)
{
    return now_ns() + (uint64_t)(s * 1e9);
}

void set_exit(int code)
{
    if (J.exit_code < 0)
        J.exit_code = code;
}

void close_lifeline(struct rank *k)
{
    if (k->stdin_w >= 0) {
        close(k->stdin_w);
        k->stdin_w = -1;
    }
}

int signal_running(int sig)
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

void begin_stop(void)
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

void check_deadlines(void)
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
uint64_t next_deadline(bool with_drain)
{
    uint64_t d = 0;
    uint64_t all[] = {J.timeout_at, J.kill_at, J.give_up_at, with_drain ? J.drain_at : 0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i] && (d == 0 || all[i] < d))
            d = all[i];
    return d;
}

int ms_until(uint64_t deadline)
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
void read_signals(void)
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
