/* proc.h - run programs (mpirun, torchrun, ip, ring_bench) from a test:
 * a chosen environment, stdout and stderr captured together, every run
 * bounded by a deadline after which its whole process group is killed.
 * Nothing here asserts: callers turn the results into Criterion reports. */
#ifndef HOOP_TESTS_PROC_H
#define HOOP_TESTS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct proc {
    pid_t pid;
    int fd;           /* read end of the child's stdout+stderr, -1 once closed */
    char *out;        /* what it wrote, NUL-terminated */
    size_t len, cap;
    int status;       /* exit code, 128 + signal, 127 when exec failed */
    bool done;
    bool timed_out;   /* killed at the deadline */
    double start_s, elapsed_s;
};

/* Start argv[0] (looked up on PATH) with envp; stdin is /dev/null. */
bool proc_start(struct proc *p, const char *const *argv, char *const *envp);

/* Collect the output of n started processes until all have exited, or
 * until limit_s from now, when the ones left are killed with their
 * process groups. */
void proc_wait_all(struct proc *ps, int n, double limit_s);

/* proc_start then proc_wait_all for one program. */
bool proc_run(struct proc *p, const char *const *argv, char *const *envp, double limit_s);

void proc_free(struct proc *p);

/* Output that grows as it comes, always NUL-terminated once appended to. */
struct proc_text {
    char *p;
    size_t len, cap;
};

void proc_text_append(struct proc_text *t, const char *s, size_t n);

/* A run whose stdout and stderr are kept apart. */
struct proc_capture {
    int status;       /* exit code, 128 + signal, or -1 when it had to be killed */
    double elapsed_s;
    double mark_s;    /* when stdout first held opts->mark, or -1 */
    struct proc_text out, err;
};

struct proc_capture_opts {
    double limit_s;               /* killed after this */
    const char *netns;            /* run in /run/netns/<netns>, or NULL for here */
    const char *cwd;              /* run there, or NULL for here */
    const char *env_name;         /* set to env_value in the child, or NULL */
    const char *env_value;
    bool own_group;               /* own process group, killed with the child */
    const char *mark;             /* see mark_s; or NULL */
    const char *const *wait_for;  /* NULL, or strings after all of which on stdout */
    int sig;                      /* ... sig is sent to the child, once */
};

/* Run argv (NULL-terminated, argv[0] a path) with stdin /dev/null, stdout
 * and stderr captured apart. The child exits 125 when it cannot enter netns
 * or cwd, 126 when it cannot set up its descriptors and exec_fail when exec
 * fails. False, with errno, when no child could be started. */
bool proc_capture(struct proc_capture *res, const struct proc_capture_opts *o, int exec_fail,
                  const char *const *argv);
void proc_capture_free(struct proc_capture *res);

/* The processes (other than this one) whose command line holds tag: their
 * number, or -1 with errno when /proc cannot be read. Each one's pid and
 * command line go to report, one line each after indent; with kill_them
 * they also get SIGKILL. */
int proc_tagged(const char *tag, char *report, size_t len, const char *indent, bool kill_them);

/* The full path of prog on PATH, or NULL. */
const char *proc_which(const char *prog, char *buf, size_t len);

/* 1 for a variable (name or "name=value") through which hoop or another
 * launcher could give a process its rank: HOOP_*, HOROVOD_*, RANK,
 * WORLD_SIZE, MASTER_ADDR, OMPI_*, PMIX_*, PMI_*, SLURM_*, ... */
int proc_is_launcher_var(const char *name);

/* A copy of this process's environment without launcher variables, plus
 * extra ("NAME=value" strings, NULL-terminated; may be NULL). */
char **proc_env_clean(const char *const *extra);
void proc_env_free(char **env);

/* Unset every launcher variable in this process. */
void proc_clear_launcher_env(void);

#endif
