/* harness.c - see harness.h. */
#include "harness.h"
#include "common/clock.h"
#include "gpu/gpu.h"
#include "transport/ofi/ofi.h"

#include <criterion/criterion.h>
#include <liburing.h>

#include <arpa/inet.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if HARNESS_ASAN
#include <sanitizer/lsan_interface.h>
#endif

/* How much of a failed child's stderr goes into the report: enough for the
 * library's last messages (or a whole TSan report), small enough for
 * several ranks to fit. */
#define STDERR_TAIL (HARNESS_TSAN ? 4096 : 1536)

int harness_connect_root(int port, double timeout_s)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    double t0 = harness_now();
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0)
            return fd;
        close(fd);
        if (harness_now() - t0 > timeout_s)
            return -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

double harness_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double harness_since(double t0)
{
    return harness_now() - t0;
}

void harness_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool loopback_port_is_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    close(fd);
    return ok;
}

/* A loopback port that is free now, drawn from below the ephemeral range:
 * in that range the outgoing connections of the jobs running beside this
 * one could take it before the job's root listens (as hooprun draws). */
int harness_free_port(void)
{
    int lo = 20000, hi = 32767;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        int first;
        if (fscanf(f, "%d", &first) == 1 && first - 1 - lo >= 1000)
            hi = first - 1;
        fclose(f);
    }
    for (int i = 0; i < 64; i++) {
        uint32_t v;
        if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
            return -1;
        int port = lo + (int)(v % (uint32_t)(hi - lo + 1));
        if (loopback_port_is_free(port))
            return port;
    }
    errno = EADDRINUSE;
    return -1;
}

void harness_token(int port, char *buf, size_t len)
{
    snprintf(buf, len, "hoop-test-token-%d", port);
}

bool harness_job_init(harness_job_t *job)
{
    memset(job, 0, sizeof *job);
    job->port = harness_free_port();
    if (job->port <= 0) {
        snprintf(job->report, sizeof job->report, "no free loopback port: %s", strerror(errno));
        return false;
    }
    snprintf(job->root, sizeof job->root, "127.0.0.1:%d", job->port);
    harness_token(job->port, job->token, sizeof job->token);
    job->start_s = harness_now();
    return true;
}

void harness_make_config(hoop_config_t *cfg, const hoop_config_t *base, int rank, int size,
                         const char *root, const char *token)
{
    hoop_config_init(cfg);
    if (base) {
        cfg->bootstrap_timeout_s = base->bootstrap_timeout_s;
        cfg->timeout_s = base->timeout_s;
        cfg->chunk_bytes = base->chunk_bytes;
        cfg->pipeline_depth = base->pipeline_depth;
        if (base->token)
            token = base->token;
    }
    if (cfg->bootstrap_timeout_s <= 0)
        cfg->bootstrap_timeout_s = 30.0;
    if (cfg->timeout_s <= 0)
        cfg->timeout_s = 60.0;
    cfg->rank = rank;
    cfg->size = size;
    cfg->root = root;
    cfg->token = token;
}

int harness_fail(int rank, const char *what, hoop_status_t st)
{
    fprintf(stderr, "rank %d: %s: %s [%s]\n", rank, what, hoop_last_error(), hoop_status_str(st));
    return 1;
}

int harness_failf(int rank, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "rank %d: %s\n", rank, buf);
    return 1;
}

int harness_be_host(int rank, int k)
{
    if (k == 0)
        return 0;
    char name[64];
    snprintf(name, sizeof(name), "hoop-test-host-%d", k);
    if (unshare(CLONE_NEWUTS) != 0)
        return 77;
    if (sethostname(name, strlen(name)) != 0)
        return harness_failf(rank, "sethostname: %s", strerror(errno));
    return 0;
}

/* A rank that crashes says where, on its stderr (which the report shows),
 * then dies of the same signal: a crash that a loaded machine shows once in
 * many runs is then found from the report alone. Frames are the binary's or
 * a library's offsets (addr2line -e FILE OFFSET names the line). The
 * sanitizers keep their own, better reports. */
static void crash_report(int sig)
{
    void *frames[40];
    int n = backtrace(frames, 40);
    static const char head[] = "harness: this rank crashed with a signal; its stack:\n";
    if (write(STDERR_FILENO, head, sizeof(head) - 1) < 0) {
        /* Nothing to say it with. */
    }
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void crash_report_setup(void)
{
    if (HARNESS_ASAN || HARNESS_TSAN)
        return;
    void *warm[1];
    backtrace(warm, 1); /* loads libgcc's unwinder now, not in the handler */
    static const int crashes[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = crash_report;
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(crashes[i], &sa, NULL);
    }
}

/* The child side of a spawn: detach from everything the Criterion worker set
 * up that could turn a rank's crash or exit into a report of the worker. */
static void child_setup(int memfd, pid_t parent)
{
    /* A rank must not outlive the test (e.g. when Criterion kills the worker
     * at its timeout): it would hold ports and CPU for the rest of the run. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(98);
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGPIPE,
                               SIGTERM, SIGALRM, SIGINT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (memfd >= 0)
        dup2(memfd, STDERR_FILENO);
    crash_report_setup();
}

static harness_proc_t *new_proc(harness_job_t *job, int rank)
{
    if (job->nprocs >= HARNESS_MAX_PROCS)
        return NULL;
    harness_proc_t *p = &job->procs[job->nprocs];
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->pid = -1;
    p->memfd = memfd_create("hoop-rank-stderr", MFD_CLOEXEC);
    return p;
}

typedef struct rank_ctx {
    const harness_job_t *job;
    const hoop_config_t *base;
    harness_rank_fn fn;
    void *arg;
} rank_ctx_t;

static int run_rank(int rank, int size, const rank_ctx_t *ctx)
{
    hoop_config_t cfg;
    harness_make_config(&cfg, ctx->base, rank, size, ctx->job->root, ctx->job->token);
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (st != HOOP_OK)
        return harness_fail(rank, "hoop_comm_init", st);
    if (comm == NULL)
        return harness_failf(rank, "hoop_comm_init returned HOOP_OK and a NULL communicator");
    if (hoop_comm_rank(comm) != rank || hoop_comm_size(comm) != size) {
        harness_failf(rank, "communicator says rank %d of %d, expected rank %d of %d",
                      hoop_comm_rank(comm), hoop_comm_size(comm), rank, size);
        hoop_comm_destroy(comm);
        return 1;
    }
    int rc = ctx->fn(comm, rank, size, ctx->arg);
    st = hoop_comm_destroy(comm);
    if (st != HOOP_OK && rc == 0)
        rc = harness_fail(rank, "hoop_comm_destroy", st);
    return rc;
}

/* Shared by both spawn flavours: exactly one of fn / raw is set. */
static pid_t spawn(harness_job_t *job, int rank, int size, const rank_ctx_t *ctx,
                   harness_raw_fn raw, void *raw_arg)
{
    harness_proc_t *p = new_proc(job, rank);
    if (!p)
        return -1;
    pid_t parent = getpid();
    fflush(NULL); /* or the child would write the parent's pending output again */
#if HARNESS_TSAN
    /* The Criterion worker has threads of its own, and TSan stops checking
     * (and refuses new threads in) a child that fork() makes of a process
     * with threads. It does not intercept _Fork(), so the rank stays checked. */
    pid_t pid = _Fork();
#else
    pid_t pid = fork();
#endif
    if (pid < 0) {
        if (p->memfd >= 0)
            close(p->memfd);
        return -1;
    }
    if (pid == 0) {
        child_setup(p->memfd, parent);
        int rc = ctx ? run_rank(rank, size, ctx) : raw(rank, size, job->port, raw_arg);
#if HARNESS_ASAN
        /* _exit skips LeakSanitizer's check at exit, so a rank that
         * succeeded is checked here: whatever the library (or the rank)
         * allocated and no longer reaches fails the rank, with the
         * report in its stderr. */
        if (rc == 0 && __lsan_do_recoverable_leak_check())
            rc = harness_failf(rank, "LeakSanitizer found memory that is no longer reachable "
                                     "(report above)");
#endif
        fflush(NULL);
        /* _exit: the Criterion worker's atexit handlers belong to the worker. */
        _exit(rc & 0xff);
    }
    p->pid = pid;
    job->nprocs++;
    return pid;
}

pid_t harness_spawn_rank(harness_job_t *job, int rank, int size, const hoop_config_t *base,
                         harness_rank_fn fn, void *arg)
{
    rank_ctx_t ctx = {job, base, fn, arg};
    return spawn(job, rank, size, &ctx, NULL, NULL);
}

pid_t harness_spawn_raw(harness_job_t *job, int rank, int size, harness_raw_fn fn, void *arg)
{
    return spawn(job, rank, size, NULL, fn, arg);
}


static void record(harness_proc_t *p, int status, double now, double start)
{
    p->done = true;
    p->elapsed_s = now - start;
    if (WIFEXITED(status)) {
        p->exit_code = WEXITSTATUS(status);
        p->signal = 0;
    } else if (WIFSIGNALED(status)) {
        p->exit_code = -1;
        p->signal = WTERMSIG(status);
    }
}

static bool proc_ok(const harness_proc_t *p)
{
    return p->done && !p->hung && p->signal == 0 && p->exit_code == 0;
}

void harness_appendf(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

static void append_stderr_tail(char *buf, size_t len, int memfd)
{
    if (memfd < 0)
        return;
    off_t size = lseek(memfd, 0, SEEK_END);
    if (size <= 0)
        return;
    off_t from = size > STDERR_TAIL ? size - STDERR_TAIL : 0;
    char tail[STDERR_TAIL + 1];
    ssize_t n = pread(memfd, tail, (size_t)(size - from), from);
    if (n <= 0)
        return;
    tail[n] = '\0';
    harness_appendf(buf, len, "  --- stderr%s ---\n%s%s", from > 0 ? " (tail)" : "", tail,
           tail[n - 1] == '\n' ? "" : "\n");
}

bool harness_wait(harness_job_t *job, double deadline_s, double grace_s)
{
    if (deadline_s <= 0)
        deadline_s = HARNESS_DEFAULT_DEADLINE_S;
    double deadline = job->start_s + deadline_s;
    bool failed = false;
    int first_failed = -1;
    for (;;) {
        int running = 0;
        double now = harness_now();
        for (int i = 0; i < job->nprocs; i++) {
            harness_proc_t *p = &job->procs[i];
            if (p->done)
                continue;
            int status;
            pid_t r = waitpid(p->pid, &status, WNOHANG);
            if (r == p->pid) {
                record(p, status, now, job->start_s);
                if (!proc_ok(p) && !failed) {
                    failed = true;
                    first_failed = p->rank;
                    if (grace_s > 0 && now + grace_s < deadline)
                        deadline = now + grace_s;
                }
            } else if (r < 0 && errno == ECHILD) {
                p->done = true;
                p->exit_code = -1;
            } else {
                running++;
            }
        }
        if (running == 0 || harness_now() >= deadline)
            break;
        harness_sleep_ms(5);
    }
    for (int i = 0; i < job->nprocs; i++) {
        harness_proc_t *p = &job->procs[i];
        if (p->done)
            continue;
        kill(p->pid, SIGKILL);
        int status;
        while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
        }
        p->done = true;
        p->hung = true;
        p->exit_code = -1;
        p->signal = SIGKILL;
        p->elapsed_s = harness_now() - job->start_s;
    }

    bool all_ok = true;
    job->report[0] = '\0';
    for (int i = 0; i < job->nprocs; i++) {
        harness_proc_t *p = &job->procs[i];
        if (proc_ok(p))
            continue;
        all_ok = false;
        if (p->hung && first_failed >= 0 && grace_s > 0)
            harness_appendf(job->report, sizeof job->report,
                   "rank %d (pid %d) still running %.0f s after rank %d failed: killed after "
                   "%.1f s\n",
                   p->rank, (int)p->pid, grace_s, first_failed, p->elapsed_s);
        else if (p->hung)
            harness_appendf(job->report, sizeof job->report,
                   "rank %d (pid %d) hung: killed at the %.0f s deadline\n", p->rank,
                   (int)p->pid, p->elapsed_s);
        else if (p->signal)
            harness_appendf(job->report, sizeof job->report,
                   "rank %d (pid %d) died of signal %d (%s) after %.1f s\n", p->rank,
                   (int)p->pid, p->signal, strsignal(p->signal), p->elapsed_s);
        else
            harness_appendf(job->report, sizeof job->report,
                   "rank %d (pid %d) failed: exit code %d after %.1f s\n", p->rank,
                   (int)p->pid, p->exit_code, p->elapsed_s);
        append_stderr_tail(job->report, sizeof job->report, p->memfd);
    }
    for (int i = 0; i < job->nprocs; i++) {
        if (job->procs[i].memfd >= 0) {
            close(job->procs[i].memfd);
            job->procs[i].memfd = -1;
        }
    }
    return all_ok;
}

static void copy_report(const harness_job_t *job, char *report, size_t report_len)
{
    if (report && report_len > 0)
        snprintf(report, report_len, "%s", job->report);
}

/* Wait for a job's ranks and hand its report over; spawned is false when
 * not all size ranks could be started. */
static bool finish_run(harness_job_t *job, bool spawned, int size, double deadline_s, char *report,
                       size_t report_len)
{
    bool ok = harness_wait(job, deadline_s, 15.0);
    if (!spawned) {
        ok = false;
        harness_appendf(job->report, sizeof job->report, "could not start all %d ranks: %s\n", size,
               strerror(errno));
    }
    copy_report(job, report, report_len);
    return ok;
}

bool harness_run(int size, const hoop_config_t *base, harness_rank_fn fn, void *arg,
                 double deadline_s, char *report, size_t report_len)
{
    static harness_job_t job; /* 8 KiB report: keep it off the worker's stack */
    if (!harness_job_init(&job)) {
        copy_report(&job, report, report_len);
        return false;
    }
    bool spawned = true;
    for (int r = 0; r < size; r++)
        if (harness_spawn_rank(&job, r, size, base, fn, arg) < 0)
            spawned = false;
    return finish_run(&job, spawned, size, deadline_s, report, report_len);
}

bool harness_run_victim(int size, const hoop_config_t *base, harness_rank_fn fn, void *arg,
                        int victim, double deadline_s, char *report, size_t report_len)
{
    static harness_job_t job;
    if (!harness_job_init(&job)) {
        copy_report(&job, report, report_len);
        return false;
    }
    bool ok = true;
    for (int r = 0; r < size; r++)
        if (harness_spawn_rank(&job, r, size, base, fn, arg) < 0)
            ok = false;
    harness_wait(&job, deadline_s, 20.0);
    char head[512] = "";
    for (int i = 0; i < job.nprocs; i++) {
        const harness_proc_t *p = &job.procs[i];
        if (p->rank == victim && p->signal != SIGKILL) {
            ok = false;
            harness_appendf(head, sizeof head, "rank %d was not killed\n", victim);
        } else if (p->rank != victim && (p->hung || p->signal || p->exit_code)) {
            ok = false;
            harness_appendf(head, sizeof head, "rank %d failed with rank %d killed\n", p->rank,
                            victim);
        }
    }
    snprintf(report, report_len, "%s%s", head, job.report);
    return ok;
}

bool harness_run_raw(int size, harness_raw_fn fn, void *arg, double deadline_s, char *report,
                     size_t report_len)
{
    static harness_job_t job;
    if (!harness_job_init(&job)) {
        copy_report(&job, report, report_len);
        return false;
    }
    bool spawned = true;
    for (int r = 0; r < size; r++)
        if (harness_spawn_raw(&job, r, size, fn, arg) < 0)
            spawned = false;
    return finish_run(&job, spawned, size, deadline_s, report, report_len);
}

void harness_loopback_config(hoop_config_t *cfg, int rank, int size, int port,
                             double bootstrap_timeout_s, char root[64], char token[64],
                             const char *other_token)
{
    snprintf(root, 64, "127.0.0.1:%d", port);
    harness_token(port, token, 64);
    harness_make_config(cfg, NULL, rank, size, root, other_token ? other_token : token);
    cfg->bootstrap_timeout_s = bootstrap_timeout_s;
}

const char *harness_built(const char *name)
{
    static char paths[4][4096];
    static int next;
    const char *dir = getenv("HOOP_BUILD_DIR");
    if (!dir || !*dir)
        cr_skip_test("HOOP_BUILD_DIR is not set, so the built %s cannot be found (run the "
                     "suite with 'make test')", name);
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s/%s", dir, name);
    cr_assert(access(path, X_OK) == 0, "%s is not an executable: %s", path, strerror(errno));
    return path;
}

const char *harness_transport(void)
{
    const char *t = getenv("HOOP_TRANSPORT");
    return t && *t ? t : "auto";
}

static int32_t checked_input(int rank, size_t i)
{
    return (int32_t)((i * 2654435761u + (size_t)rank * 40503u) % 1000u);
}

int harness_allreduce_i32_checked(hoop_comm_t *comm, int rank, int size, int32_t *buf, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = checked_input(rank, i);
    hoop_status_t st = hoop_allreduce(comm, buf, buf, n, HOOP_I32, HOOP_SUM);
    if (st)
        return harness_fail(rank, "hoop_allreduce", st);
    for (size_t i = 0; i < n; i++) {
        int32_t w = 0;
        for (int r = 0; r < size; r++)
            w += checked_input(r, i);
        if (buf[i] != w)
            return harness_failf(rank, "allreduce of %zu: element %zu is %d, not %d", n, i, buf[i],
                                 w);
    }
    return 0;
}

int harness_emulated(void)
{
    const char *v = getenv("HOOP_TEST_VM");
    return v && *v && strcmp(v, "0") != 0;
}

const char *harness_ofi_provider(void)
{
    const char *p = getenv("HOOP_OFI_PROVIDER");
    if (!p || !*p)
        p = getenv("FI_PROVIDER");
    return p ? p : "";
}

void harness_skip_if_shm_stalls(const char *what)
{
    if (strcmp(harness_transport(), "ofi") != 0 || strcmp(harness_ofi_provider(), "shm") != 0)
        return;
    const char *why = NULL;
    const struct ofi_lib *lib = ofi_lib(&why);
    if (!lib)
        return;
    uint32_t v = lib->version();
    if (FI_MAJOR(v) > 1 || FI_MINOR(v) >= 18)
        return;
    cr_skip_test("%s over libfabric %u.%u's shm provider: its spin locks live in shared "
                 "memory, and a process killed or stopped while it holds one leaves every other "
                 "rank spinning inside libfabric (seen with gdb: pthread_spin_lock under "
                 "fi_cq_read and fi_tsendv), beyond any deadline hoop can keep; the same test "
                 "runs over ofi with the tcp provider and over the tcp transport",
                 what, FI_MAJOR(v), FI_MINOR(v));
}

/* 0 when an io_uring can be set up here, else its -errno. */
static int uring_refused(void)
{
    struct io_uring ring;
    int rc = io_uring_queue_init(2, &ring, 0);
    if (rc == 0)
        io_uring_queue_exit(&ring);
    return rc;
}

bool harness_have_io_uring(void)
{
    return uring_refused() == 0;
}

void harness_skip_without_io_uring(const char *what)
{
    int rc = uring_refused();
    if (rc == 0)
        return;
    cr_skip_test("%s: io_uring cannot be set up here (%s: refused by a seccomp profile, the "
                 "kernel.io_uring_disabled sysctl or a sandbox); the poll engine's tests run "
                 "instead",
                 what, strerror(-rc));
}

void harness_need_gpu(void)
{
    const char *why = NULL;
    if (hoop_gpu_available(&why))
        return;
    const char *req = getenv("HOOP_TEST_REQUIRE_GPU");
    if (req && strcmp(req, "1") == 0)
        cr_assert_fail("HOOP_TEST_REQUIRE_GPU=1 but no GPU can be used: %s", why);
    cr_skip_test("no GPU can be used here: %s", why);
}

hoop_status_t harness_fake_join(harness_fake_t *f, const hoop_config_t *cfg,
                                const struct hoop_transport_ops *ops)
{
    memset(f, 0, sizeof(*f));
    f->bs.root_fd = -1;
    hoop_status_t st = hoop_boot_cfg_resolve(cfg, &f->bcfg);
    if (st)
        return st;
    f->ring.ops = ops;
    if ((st = hoop_ring_open(&f->ring, f->bcfg.rank, f->bcfg.size, f->bcfg.token, 1 << 20, 4)))
        return st;
    f->joined = 1;
    uint64_t deadline = hoop_deadline_after(f->bcfg.timeout_s);
    if ((st = hoop_bootstrap_init(&f->bs, &f->bcfg, hoop_ring_listen, &f->ring)) ||
        (st = hoop_ring_connect(&f->ring, f->bs.peers, f->bs.comm_id, deadline)))
        harness_fake_fini(f);
    return st;
}

void harness_fake_fini(harness_fake_t *f)
{
    if (f->joined)
        hoop_ring_close(&f->ring);
    hoop_bootstrap_fini(&f->bs);
    memset(f, 0, sizeof(*f));
}

int harness_fake_send(harness_fake_t *f, const void *hdr, size_t hdr_len, const void *buf,
                      size_t len, double timeout_s)
{
    struct hoop_tp_req q = {.hdr = (void *)hdr, .hdr_len = hdr_len, .buf = (void *)buf,
                            .len = len};
    int rc = f->ring.ops->isend(f->ring.tx, &q);
    if (rc)
        return rc;
    uint64_t deadline = hoop_deadline_after(timeout_s);
    while (q.state == HOOP_REQ_PENDING) {
        rc = f->ring.ops->progress(f->ring.tp, deadline);
        if (rc < 0)
            return rc;
        if (rc == 0 && hoop_now_ns() >= deadline)
            return -ETIMEDOUT;
    }
    return q.state;
}

int harness_stderr_to(const char *path)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(saved >= 0 && fd >= 0, "redirecting stderr to %s: %s", path, strerror(errno));
    dup2(fd, 2);
    close(fd);
    return saved;
}

void harness_stderr_back(int saved, const char *path, char *log, size_t n)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(log, 1, n - 1, f) : 0;
    log[got] = '\0';
    if (f)
        fclose(f);
    unlink(path);
}

/* Lower this process's limit on descriptors so that exactly `spare` more
 * can be opened: 0, or -errno. */
int harness_leave_descriptors(int spare)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return -errno;
    rlim_t limit = 0;
    int free_below = 0;
    for (int fd = 0; fd < 65536 && (rlim_t)fd < rl.rlim_cur; fd++) {
        if (fcntl(fd, F_GETFD) < 0 && free_below++ == spare) {
            limit = (rlim_t)fd;
            break;
        }
    }
    if (!limit)
        return -ERANGE;
    rl.rlim_cur = limit;
    return setrlimit(RLIMIT_NOFILE, &rl) ? -errno : 0;
}
