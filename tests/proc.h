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
