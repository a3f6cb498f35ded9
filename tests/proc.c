/* proc.c - see proc.h. */
#include "proc.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
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

void proc_text_append(struct proc_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (t->len + n + 1 > cap)
            cap *= 2;
        char *q = realloc(t->p, cap);
        if (!q) {
            fprintf(stderr, "proc_text_append: out of memory\n");
            abort();
        }
        t->p = q;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static bool all_present(const char *text, const char *const *needles)
{
    for (size_t i = 0; needles[i]; i++)
        if (!strstr(text, needles[i]))
            return false;
    return true;
}

bool proc_capture(struct proc_capture *res, const struct proc_capture_opts *o, int exec_fail,
                  const char *const *argv)
{
    memset(res, 0, sizeof *res);
    res->mark_s = -1;
    proc_text_append(&res->out, "", 0);
    proc_text_append(&res->err, "", 0);
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        return false;
    if (pipe2(err, O_CLOEXEC) != 0) {
        int e = errno;
        close(out[0]);
        close(out[1]);
        errno = e;
        return false;
    }
    double start = now_s();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(out[0]);
        close(out[1]);
        close(err[0]);
        close(err[1]);
        errno = e;
        return false;
    }
    if (pid == 0) {
        if (o->own_group)
            setpgid(0, 0);
        if (o->netns) {
            char path[128];
            snprintf(path, sizeof path, "/run/netns/%s", o->netns);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
                _exit(125);
        }
        if (o->cwd && chdir(o->cwd) < 0)
            _exit(125);
        int nul = open("/dev/null", O_RDONLY);
        if (nul < 0 || dup2(nul, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0)
            _exit(126);
        if (o->env_name)
            setenv(o->env_name, o->env_value, 1);
        execv(argv[0], (char *const *)argv);
        _exit(exec_fail);
    }
    if (o->own_group)
        setpgid(pid, pid);
    close(out[1]);
    close(err[1]);

    struct pollfd pf[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
    struct proc_text *dst[2] = {&res->out, &res->err};
    bool signalled = o->wait_for == NULL, exited = false, killed = false;
    int status = 0;
    while (pf[0].fd >= 0 || pf[1].fd >= 0 || !exited) {
        double left = start + o->limit_s - now_s();
        if (left <= 0 && !killed) {
            if (o->own_group)
                kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            killed = true;
        }
        if (killed && left < -5.0)
            break; /* even its pipes stay open: give up on them */
        if (!exited && waitpid(pid, &status, WNOHANG) == pid)
            exited = true;
        /* Short polls, since the child's exit is not among the events. */
        int pr = poll(pf, 2, 20);
        if (pr < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !pf[i].revents)
                continue;
            char chunk[8192];
            ssize_t got = read(pf[i].fd, chunk, sizeof chunk);
            if (got > 0) {
                proc_text_append(dst[i], chunk, (size_t)got);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(pf[i].fd);
                pf[i].fd = -1;
            }
        }
        if (o->mark && res->mark_s < 0 && strstr(res->out.p, o->mark))
            res->mark_s = now_s() - start;
        if (!signalled && all_present(res->out.p, o->wait_for)) {
            kill(pid, o->sig);
            signalled = true;
        }
    }
    for (int i = 0; i < 2; i++)
        if (pf[i].fd >= 0)
            close(pf[i].fd);
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    res->elapsed_s = now_s() - start;
    if (killed)
        res->status = -1;
    else if (WIFEXITED(status))
        res->status = WEXITSTATUS(status);
    else
        res->status = 128 + WTERMSIG(status);
    return true;
}

void proc_capture_free(struct proc_capture *res)
{
    free(res->out.p);
    free(res->err.p);
    res->out.p = res->err.p = NULL;
}

int proc_tagged(const char *tag, char *report, size_t len, const char *indent, bool kill_them)
{
    report[0] = '\0';
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int found = 0;
    size_t used = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0]) || atoi(e->d_name) == getpid())
            continue;
        char path[300], cmd[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t n = fread(cmd, 1, sizeof cmd - 1, f);
        fclose(f);
        for (size_t i = 0; i < n; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        cmd[n] = '\0';
        if (!strstr(cmd, tag))
            continue;
        found++;
        if (kill_them)
            kill(atoi(e->d_name), SIGKILL);
        if (used < len) {
            int k = snprintf(report + used, len - used, "%s%s: %.200s\n", indent, e->d_name, cmd);
            used += k > 0 ? (size_t)k : 0;
        }
    }
    closedir(d);
    return found;
}
