/* hooprun.h - what the files of hooprun share: its limits, the job's state
 * (J) and each file's functions. Internal to hooprun; see main.c for what
 * the program does. */
#ifndef HOOPRUN_H
#define HOOPRUN_H

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
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
 * probed there, so one is drawn from below Linux's default ephemeral range
 * (32768..60999), where no outgoing connection of that host can hold it,
 * and above the ports well-known services use. */
#define REMOTE_PORT_LO 20000
#define REMOTE_PORT_HI 32767
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
    bool bind;               /* --bind-to core: a local rank to a CPU each */
    char **argv;
    const char **host_lists; /* every -H value, in order */
    int n_host_lists;
    const char *hostfile;
    const char *rsh;         /* --rsh, else HOOP_RSH, else "ssh" */
    const char *root_addr;
    const char **xvars;      /* -x NAME or NAME=VALUE, in order */
    int nx;
};

/* The job: one per hooprun process (main.c). */
struct job {
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
    int *cpus;       /* with --bind-to core: the CPUs hooprun may run on */
    int ncpus;
    int nlocal;      /* local ranks started, the next one's CPU index */
};
extern struct job J;

/* args.c */
extern const char usage_text[];
bool parse_int(const char *s, long lo, long hi, int *out);
void parse_args(int argc, char **argv, struct options *opt);

/* hosts.c */
bool is_loopback_name(const char *a);
void setup_hosts(void);
void place_ranks(void);

/* root.c */
bool setup_root(void);
bool make_token(char out[33]);

/* spawn.c */
bool setup_binding(void);
bool spawn(int rank);

/* remote.c */
bool xvar(int i, char *name, size_t len, const char **value);
char *remote_command(int rank);
char **remote_argv(int rank, char *cmd);

/* output.c: hooprun's stdout and stderr, where the ranks' lines go */
extern struct outbuf out_stdout, out_stderr;
void outbuf_init(struct outbuf *o, int fd);
void out_flush(struct outbuf *o);
void stream_close(int rank, int which);
bool stream_read(int rank, int which);
void drain_rank(int rank);

/* reap.c */
void reap(bool may_drain);
void child_fail(const char *what, int err) __attribute__((noreturn));

/* stop.c */
uint64_t now_ns(void);
uint64_t after_s(double s);
void set_exit(int code);
void close_lifeline(struct rank *k);
int signal_running(int sig);
void begin_stop(void);
void check_deadlines(void);
uint64_t next_deadline(bool with_drain);
int ms_until(uint64_t deadline);
void read_signals(void);

/* say.c */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
const char *signal_name(int sig, char *buf, size_t len);

#endif
