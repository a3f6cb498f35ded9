/* spawn.c - starting a rank: its pipes, its process group, its environment. */
#include "tools/hooprun/hooprun.h"

/* With --bind-to core: the CPUs hooprun may run on, in order; said once
 * when the local ranks outnumber them and so share some. */
bool setup_binding(void)
{
    if (!J.opt.bind)
        return true;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0) {
        say("--bind-to core: cannot read the CPUs this process may use: %s", strerror(errno));
        return false;
    }
    J.cpus = calloc(CPU_SETSIZE, sizeof *J.cpus);
    if (!J.cpus) {
        say("--bind-to core: out of memory");
        return false;
    }
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            J.cpus[J.ncpus++] = c;
    if (J.ncpus == 0) {
        say("--bind-to core: this process may use no CPU");
        return false;
    }
    int local = 0;
    for (int r = 0; r < J.opt.np; r++)
        local += !J.ranks[r].remote;
    if (local > J.ncpus)
        say("--bind-to core: %d ranks here, %d CPU%s to bind them to: rank k of this machine "
            "runs on CPU number k mod %d of those, so some share one",
            local, J.ncpus, J.ncpus == 1 ? "" : "s", J.ncpus);
    return true;
}

/* In the child, between fork and exec. hooprun has a single thread, so
 * malloc-using calls (setenv) are safe here. */
static void run_child(int rank, int out_w, int err_w, int in_r, char **remote, int cpu)
    __attribute__((noreturn));
static void run_child(int rank, int out_w, int err_w, int in_r, char **remote, int cpu)
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

    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) {
            char what[64];
            snprintf(what, sizeof what, "--bind-to core: cannot bind to CPU %d", cpu);
            child_fail(what, errno);
        }
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

bool spawn(int rank)
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
    int cpu = J.opt.bind && !r->remote ? J.cpus[J.nlocal++ % J.ncpus] : -1;
    pid_t pid = fork();
    if (pid < 0) {
        say("cannot start rank %d: fork: %s", rank, strerror(errno));
        goto fail;
    }
    if (pid == 0)
        run_child(rank, out[1], err[1], in[0], remote, cpu);
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
