/* main.c - hooprun: start the ranks of a hoop job, on this machine or on several.
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
#include "tools/hooprun/hooprun.h"

struct job J;

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
    if (!setup_binding())
        return 1;
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
