/* proc.c - see proc.h. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void out_append(struct proc *p, const char *s, size_t n)
{
    if (p->len + n + 1 > p->cap) {
        size_t cap = p->cap ? p->cap : 4096;
        while (p->len + n + 1 > cap)
            cap *= 2;
        char *q = realloc(p->out, cap);
        if (!q)
            return;
        p->out = q;
        p->cap = cap;
    }
    memcpy(p->out + p->len, s, n);
    p->len += n;
    p->out[p->len] = '\0';
}

bool proc_start(struct proc *p, const char *const *argv, char *const *envp)
{
    memset(p, 0, sizeof *p);
    p->fd = -1;
    p->pid = -1;
    out_append(p, "", 0);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return false;
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        /* Its own group, so that the deadline also ends what it started. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[1], 2) < 0)
            _exit(127);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        execvpe(argv[0], (char *const *)argv, envp);
        dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    p->fd = fds[0];
    p->start_s = now_s();
    return true;
}

static void proc_reap(struct proc *p, int status, double now)
{
    p->done = true;
    p->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    p->elapsed_s = now - p->start_s;
}

void proc_wait_all(struct proc *ps, int n, double limit_s)
{
    double deadline = now_s() + limit_s;
    bool killed = false;
    for (;;) {
        int open_fds = 0, running = 0;
        struct pollfd pf[16];
        int map[16];
        int np = 0;
        double now = now_s();
        for (int i = 0; i < n; i++) {
            struct proc *p = &ps[i];
            if (!p->done && p->pid > 0) {
                int status;
                if (waitpid(p->pid, &status, WNOHANG) == p->pid)
                    proc_reap(p, status, now);
                else
                    running++;
            }
            if (p->fd >= 0 && np < 16) {
                pf[np] = (struct pollfd){.fd = p->fd, .events = POLLIN};
                map[np++] = i;
                open_fds++;
            }
        }
        if (!running && !open_fds)
            break;
        if (now >= deadline && !killed) {
            for (int i = 0; i < n; i++)
                if (!ps[i].done && ps[i].pid > 0) {
                    kill(-ps[i].pid, SIGKILL);
                    kill(ps[i].pid, SIGKILL);
                    ps[i].timed_out = true;
                }
            killed = true;
        }
        /* Something it started may hold the pipe open past the kill. */
        if (killed && now >= deadline + 5.0 && !running)
            break;
        if (poll(pf, (nfds_t)np, 20) < 0 && errno != EINTR)
            break;
        for (int k = 0; k < np; k++) {
            if (!pf[k].revents)
                continue;
            struct proc *p = &ps[map[k]];
            char buf[8192];
            ssize_t got = read(p->fd, buf, sizeof buf);
            if (got > 0) {
                out_append(p, buf, (size_t)got);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(p->fd);
                p->fd = -1;
            }
        }
    }
    for (int i = 0; i < n; i++) {
        if (ps[i].fd >= 0) {
            close(ps[i].fd);
            ps[i].fd = -1;
        }
        if (!ps[i].done && ps[i].pid > 0) {
            int status;
            while (waitpid(ps[i].pid, &status, 0) < 0 && errno == EINTR) {
            }
            proc_reap(&ps[i], status, now_s());
        }
    }
}

bool proc_run(struct proc *p, const char *const *argv, char *const *envp, double limit_s)
{
    if (!proc_start(p, argv, envp))
        return false;
    proc_wait_all(p, 1, limit_s);
    return true;
}

void proc_free(struct proc *p)
{
    if (p->fd >= 0)
        close(p->fd);
    free(p->out);
    memset(p, 0, sizeof *p);
    p->fd = -1;
}

const char *proc_which(const char *prog, char *buf, size_t len)
{
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t dl = colon ? (size_t)(colon - path) : strlen(path);
        if (dl && (size_t)snprintf(buf, len, "%.*s/%s", (int)dl, path, prog) < len &&
            access(buf, X_OK) == 0)
            return buf;
        path += dl + (colon ? 1 : 0);
    }
    return NULL;
}

int proc_is_launcher_var(const char *name)
{
    static const char *const prefixes[] = {"HOOP_", "HOROVOD_", "OMPI_", "PMIX_", "PMI_",
                                           "SLURM_", "TORCHELASTIC_"};
    static const char *const names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                        "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                                        "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                        "MPI_LOCALNRANKS", "MPI_LOCALRANKID"};
    size_t len = strcspn(name, "=");
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == len && strncmp(name, names[i], len) == 0)
            return 1;
    return 0;
}

char **proc_env_clean(const char *const *extra)
{
    size_t n = 0, m = 0;
    for (char **e = environ; *e; e++)
        n++;
    for (const char *const *x = extra; x && *x; x++)
        m++;
    char **env = calloc(n + m + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (!proc_is_launcher_var(*e))
            env[k++] = strdup(*e);
    for (const char *const *x = extra; x && *x; x++)
        env[k++] = strdup(*x);
    env[k] = NULL;
    return env;
}

void proc_env_free(char **env)
{
    for (char **e = env; e && *e; e++)
        free(*e);
    free(env);
}

void proc_clear_launcher_env(void)
{
    /* Collect first: unsetenv changes environ under the loop. */
    for (;;) {
        char name[256] = "";
        for (char **e = environ; *e; e++)
            if (proc_is_launcher_var(*e)) {
                size_t len = strcspn(*e, "=");
                if (len < sizeof name) {
                    memcpy(name, *e, len);
                    name[len] = '\0';
                    break;
                }
            }
        if (!name[0] || unsetenv(name) != 0)
            return;
    }
}
