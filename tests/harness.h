/* harness.h - start real ranks as processes over loopback for the tests.
 *
 * Every rank is a forked child of the Criterion test process. Children never
 * use Criterion asserts (a failed assert in a child would be reported as if
 * it came from a different process, or not at all); they exit with a code,
 * and the parent turns codes, signals and hangs into one report to assert on.
 */
#ifndef HOOP_TESTS_HARNESS_H
#define HOOP_TESTS_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bootstrap/bootstrap.h"
#include "hoop.h"
#include "ring/ring.h"

/* 1 in a ThreadSanitizer build (gcc defines the first, clang has the
 * second), else 0. */
#if defined(__SANITIZE_THREAD__)
#define HARNESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HARNESS_TSAN 1
#endif
#endif
#ifndef HARNESS_TSAN
#define HARNESS_TSAN 0
#endif

/* 1 in an AddressSanitizer build, else 0. */
#if defined(__SANITIZE_ADDRESS__)
#define HARNESS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HARNESS_ASAN 1
#endif
#endif
#ifndef HARNESS_ASAN
#define HARNESS_ASAN 0
#endif

#define HARNESS_MAX_PROCS 16
#define HARNESS_DEFAULT_DEADLINE_S 120.0

/* Per-rank body run after hoop_comm_init succeeded. Return 0 on success;
 * on failure print what went wrong to stderr (harness_fail helps). */
typedef int (*harness_rank_fn)(hoop_comm_t *comm, int rank, int size, void *arg);

/* Per-process body that forms (or fails to form) its communicator itself;
 * port is the root's port on 127.0.0.1. The return value is the exit code. */
typedef int (*harness_raw_fn)(int rank, int size, int port, void *arg);

typedef struct harness_proc {
    pid_t pid;
    int rank;
    int memfd;       /* the child's stderr, kept for the report */
    bool done;
    bool hung;       /* killed by the harness at the deadline */
    int exit_code;   /* valid when done, not hung and signal == 0 */
    int signal;      /* the signal that ended the child, 0 if it exited */
    double elapsed_s;/* from spawn to exit */
} harness_proc_t;

typedef struct harness_job {
    int port;
    char root[64];   /* "127.0.0.1:PORT" */
    char token[64];  /* per port, so that a stray rank of another job cannot join */
    int nprocs;
    double start_s;
    harness_proc_t procs[HARNESS_MAX_PROCS];
    char report[8192];
} harness_job_t;

/* Connect to a root's port on 127.0.0.1, retrying while nobody listens
 * there yet; the socket, or -1 after timeout_s. */
int harness_connect_root(int port, double timeout_s);

/* The path of a program the build made (hooprun, ring_bench, no_uring), from
 * HOOP_BUILD_DIR, which `make test` sets; skips the test when it is unset
 * and fails it when the program is not there. Four calls may be in use at
 * once. */
const char *harness_built(const char *name);

/* A fake rank: formed as collectives/comm.c forms one (the library's
 * bootstrap, ring and the transport given), so that the real ranks cannot
 * tell it from one of theirs; after that, the test drives the ring's
 * connections itself. */
typedef struct harness_fake {
    struct hoop_boot_cfg bcfg;
    struct hoop_bootstrap bs;
    struct hoop_ring ring;
    int joined;
} harness_fake_t;

hoop_status_t harness_fake_join(harness_fake_t *f, const hoop_config_t *cfg,
                                const struct hoop_transport_ops *ops);
void harness_fake_fini(harness_fake_t *f);
/* Send a message (header hdr of hdr_len bytes, then len bytes) to rank + 1
 * on the ring's connection and wait for it: 0 or -errno. */
int harness_fake_send(harness_fake_t *f, const void *hdr, size_t hdr_len, const void *buf,
                      size_t len, double timeout_s);

/* The transport this run of the suite uses (HOOP_TRANSPORT: "tcp", "ofi",
 * ...; unset means the library's default), and for ofi the provider asked
 * for (HOOP_OFI_PROVIDER, else FI_PROVIDER; "" when neither). */
const char *harness_transport(void);
/* 1 when the suite runs in the emulated guest of tests/vm (HOOP_TEST_VM),
 * where a 64 MiB allreduce of 4 ranks takes seconds, not a fraction of one. */
int harness_emulated(void);

/* An in-place i32 sum of n elements of buf, whose inputs every rank can
 * compute (filled here), checked exactly: 0, or a harness_failf. */
int harness_allreduce_i32_checked(hoop_comm_t *comm, int rank, int size, int32_t *buf, size_t n);
const char *harness_ofi_provider(void);

/* Skip the calling test, saying why, where the suite runs over libfabric's
 * shm provider of a version whose spin locks in shared memory let a rank
 * that is killed or stopped inside one stall the others inside libfabric,
 * beyond any deadline hoop can keep. `what` names what the test does. */
void harness_skip_if_shm_stalls(const char *what);

/* Skip the calling test, saying why, where this process cannot set up an
 * io_uring (a container's seccomp profile, the kernel.io_uring_disabled
 * sysctl, gVisor): `what` names what the test does on the io_uring engine. */
void harness_skip_without_io_uring(const char *what);
/* Whether an io_uring can be set up here (for a test that tries it beside
 * the poll engine and says when it cannot). */
bool harness_have_io_uring(void);

/* Skip the calling test, saying why, where no GPU can be used (a build
 * without CUDA, no driver, no device); with HOOP_TEST_REQUIRE_GPU=1 (as
 * tests/gpu/run.sh sets on a GPU machine) fail it instead. */
void harness_need_gpu(void);

/* A port that was free on 127.0.0.1 a moment ago, or -1. */
int harness_free_port(void);

/* Monotonic clock in seconds. */
double harness_now(void);
/* This process's stderr into a file at path (what the library logs in
 * this process), until harness_stderr_back puts it back and reads the
 * file into log (n bytes at most, NUL-terminated) and removes it. */
int harness_stderr_to(const char *path);
void harness_stderr_back(int saved, const char *path, char *log, size_t n);
/* Seconds since t0, a harness_now() value. */
double harness_since(double t0);
/* Sleep ms milliseconds, through signals. */
void harness_sleep_ms(long ms);

/* Pick a port and a token. Returns false if no port could be found. */
bool harness_job_init(harness_job_t *job);

/* Start one process of the job. harness_spawn_rank builds a hoop_config_t
 * from base (bootstrap_timeout_s, timeout_s, chunk_bytes, pipeline_depth,
 * token; base may be NULL) plus rank, size and the job's root, and calls fn
 * between hoop_comm_init and hoop_comm_destroy. Return the pid or -1. */
pid_t harness_spawn_rank(harness_job_t *job, int rank, int size, const hoop_config_t *base,
                         harness_rank_fn fn, void *arg);
pid_t harness_spawn_raw(harness_job_t *job, int rank, int size, harness_raw_fn fn, void *arg);

/* Wait for every process until deadline_s after the job started (<= 0: the
 * default). Once one process has failed, the others get grace_s more before
 * they are killed, so that a broken job does not sit out the whole deadline
 * (<= 0: no grace period, wait for the deadline). Stragglers are SIGKILLed.
 * Fills job->report with one line per process that failed, crashed or hung,
 * followed by the tail of its stderr. Returns true when every process exited
 * with 0. */
bool harness_wait(harness_job_t *job, double deadline_s, double grace_s);

/* printf at the end of the string in buf (len bytes in all), cut to fit. */
void harness_appendf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Build a job of size ranks that all run fn; report receives the failure
 * description. Returns true when every rank succeeded. */
bool harness_run(int size, const hoop_config_t *base, harness_rank_fn fn, void *arg,
                 double deadline_s, char *report, size_t report_len);

/* harness_run where rank `victim` kills itself (SIGKILL) in fn: true when
 * it died so and every other rank exited with 0 within deadline_s. */
bool harness_run_victim(int size, const hoop_config_t *base, harness_rank_fn fn, void *arg,
                        int victim, double deadline_s, char *report, size_t report_len);

/* For children: lower this process's limit on descriptors so that exactly
 * `spare` more can be opened: 0, or -errno. */
int harness_leave_descriptors(int spare);

/* Same with harness_raw_fn, one process per rank 0..size-1. */
bool harness_run_raw(int size, harness_raw_fn fn, void *arg, double deadline_s, char *report,
                     size_t report_len);

/* For children: print "rank R: what: hoop_last_error()" to stderr and
 * return 1, so that "return harness_fail(...)" reads naturally. */
int harness_fail(int rank, const char *what, hoop_status_t st);

/* For children: printf-style message prefixed with the rank; returns 1. */
int harness_failf(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* For raw children: make this process a rank of emulated host k (k > 0):
 * a UTS namespace of its own named for k, so that the ranks given one k
 * share a host name, and so a host (their network namespace stays this
 * one's). k = 0 leaves it on this host. Returns 0, 77 where no UTS
 * namespace can be made here (it needs CAP_SYS_ADMIN: skip), or 1 after
 * saying why on stderr. */
int harness_be_host(int rank, int k);

/* The token harness_spawn_rank uses for a job on port, so that raw children
 * can join a job or deliberately present a different token. */
void harness_token(int port, char *buf, size_t len);

/* Fill cfg as harness_spawn_rank does (unset timeouts become 30 s to form the
 * communicator and 60 s per collective, so that a stuck library reports an
 * error before the harness has to kill it); for raw children that want the
 * normal config with one change. root and token must outlive cfg. */
void harness_make_config(hoop_config_t *cfg, const hoop_config_t *base, int rank, int size,
                         const char *root, const char *token);

/* The loopback job of a raw child on port: root ("127.0.0.1:port") and the
 * job's token written to the caller's buffers (64 bytes each), cfg made by
 * harness_make_config with the job's token (other_token instead when not
 * NULL) and the given bootstrap timeout. root and token must outlive cfg. */
void harness_loopback_config(hoop_config_t *cfg, int rank, int size, int port,
                             double bootstrap_timeout_s, char root[64], char token[64],
                             const char *other_token);

#endif /* HOOP_TESTS_HARNESS_H */
