/* test_bootstrap.c - forming a communicator over loopback, and refusing to
 * form a wrong one: environment-only setup, wrong tokens, garbage at the
 * root, ranks that never come or come twice, bad configurations.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "common/wire.h"
#include "proc.h"
#include "hoop.h"

extern char **environ;

/* A deadline for whole jobs that form quickly or fail quickly: generous
 * against a loaded machine, still far below Criterion's timeout. */
#define JOB_DEADLINE_S 60.0

/* Exit codes of raw children whose outcome the parent inspects. */
enum {
    OUT_OK = 0,             /* formed, and an allreduce gave the exact result */
    OUT_FAILED_AS_EXPECTED = 10,
    OUT_FAILED_OTHERWISE = 20,
    OUT_BROKEN_AFTER_INIT = 30,
};

static void clear_hoop_env(void)
{
    /* Collect first: unsetenv changes environ under the loop. */
    char names[64][128];
    int n = 0;
    for (char **e = environ; *e && n < 64; e++) {
        if (strncmp(*e, "HOOP_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        if (len >= sizeof names[0])
            continue;
        memcpy(names[n], *e, len);
        names[n][len] = '\0';
        n++;
    }
    for (int k = 0; k < n; k++)
        unsetenv(names[k]);
}

/* An allreduce whose result each rank can predict, to show that the
 * communicator that formed really connects the ranks it claims. */
static int check_sum(hoop_comm_t *comm, int rank, int size)
{
    enum { COUNT = 1000 };
    int32_t in[COUNT], out[COUNT];
    for (int i = 0; i < COUNT; i++) {
        in[i] = rank * 1000 + i;
        out[i] = -1;
    }
    hoop_status_t st = hoop_allreduce(comm, in, out, COUNT, HOOP_I32, HOOP_SUM);
    if (st != HOOP_OK)
        return harness_fail(rank, "allreduce after forming the communicator", st);
    for (int i = 0; i < COUNT; i++) {
        int32_t want = 1000 * (size * (size - 1) / 2) + size * i;
        if (out[i] != want)
            return harness_failf(rank, "allreduce element %d is %d, expected %d", i,
                                 (int)out[i], (int)want);
    }
    return 0;
}

static int check_sum_fn(hoop_comm_t *comm, int rank, int size, void *arg)
{
    return check_sum(comm, rank, size);
}

/* ---- environment only ---------------------------------------------------- */

static int env_only_rank(int rank, int size, int port, void *arg)
{
    char buf[64], token[64];
    clear_hoop_env();
    snprintf(buf, sizeof buf, "%d", rank);
    setenv("HOOP_RANK", buf, 1);
    snprintf(buf, sizeof buf, "%d", size);
    setenv("HOOP_SIZE", buf, 1);
    snprintf(buf, sizeof buf, "127.0.0.1:%d", port);
    setenv("HOOP_ROOT", buf, 1);
    harness_token(port, token, sizeof token);
    setenv("HOOP_TOKEN", token, 1);
    /* Bounded even when the library gets the deadlines wrong: the harness
     * deadline is the backstop. */
    setenv("HOOP_BOOTSTRAP_TIMEOUT", "20", 1);
    setenv("HOOP_TIMEOUT", "30", 1);

    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, NULL);
    if (st != HOOP_OK)
        return harness_fail(rank, "hoop_comm_init(&comm, NULL) from HOOP_* variables", st);
    int rc = 0;
    if (hoop_comm_rank(comm) != rank || hoop_comm_size(comm) != size)
        rc = harness_failf(rank, "rank/size %d/%d, expected %d/%d", hoop_comm_rank(comm),
                           hoop_comm_size(comm), rank, size);
    else if (hoop_comm_local_rank(comm) != rank || hoop_comm_local_size(comm) != size)
        rc = harness_failf(rank, "local rank/size %d/%d, expected %d/%d (all on one host)",
                           hoop_comm_local_rank(comm), hoop_comm_local_size(comm), rank, size);
    else if (!hoop_comm_transport(comm) || !hoop_comm_transport(comm)[0])
        rc = harness_failf(rank, "empty transport name");
    else
        rc = check_sum(comm, rank, size);
    hoop_comm_destroy(comm);
    return rc;
}

Test(bootstrap, from_environment_only, .timeout = 120)
{
    char report[8192];
    bool ok = harness_run_raw(3, env_only_rank, NULL, JOB_DEADLINE_S, report, sizeof report);
    cr_assert(ok, "3 ranks configured by HOOP_RANK/SIZE/ROOT/TOKEN only:\n%s", report);
}

/* ---- no configuration at all ---------------------------------------------- */

static int no_env_rank(int rank, int size, int port, void *arg)
{
    /* No launcher's variables either, or the CI machine's could count. */
    clear_hoop_env();
    proc_clear_launcher_env();
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, NULL);
    if (st != HOOP_OK)
        return harness_fail(0, "hoop_comm_init(&comm, NULL) without any HOOP_* variable", st);
    int rc = 0;
    if (hoop_comm_rank(comm) != 0 || hoop_comm_size(comm) != 1 ||
        hoop_comm_local_rank(comm) != 0 || hoop_comm_local_size(comm) != 1) {
        rc = harness_failf(0, "rank/size %d/%d, local %d/%d; expected a one-rank communicator",
                           hoop_comm_rank(comm), hoop_comm_size(comm),
                           hoop_comm_local_rank(comm), hoop_comm_local_size(comm));
    }
    enum { COUNT = 257 };
    double in[COUNT], out[COUNT];
    int32_t inplace[COUNT];
    for (int i = 0; rc == 0 && i < COUNT; i++) {
        in[i] = (i - 128) * 0.375 + 1e-3 * i; /* not integers: a copy, not a re-computation */
        out[i] = -7.0;
        inplace[i] = i * 12345 - 999;
    }
    if (rc == 0) {
        st = hoop_allreduce(comm, in, out, COUNT, HOOP_F64, HOOP_SUM);
        if (st != HOOP_OK)
            rc = harness_fail(0, "f64 sum on a one-rank communicator", st);
        else if (memcmp(in, out, sizeof in) != 0)
            rc = harness_failf(0, "f64 sum on one rank is not a copy of the input");
    }
    if (rc == 0) {
        st = hoop_allreduce(comm, inplace, inplace, COUNT, HOOP_I32, HOOP_SUM);
        if (st != HOOP_OK)
            rc = harness_fail(0, "in-place i32 sum on a one-rank communicator", st);
        for (int i = 0; rc == 0 && i < COUNT; i++)
            if (inplace[i] != i * 12345 - 999)
                rc = harness_failf(0, "in-place i32 sum on one rank changed element %d", i);
    }
    hoop_comm_destroy(comm);
    return rc;
}

Test(bootstrap, no_environment_gives_one_rank, .timeout = 60)
{
    char report[8192];
    bool ok = harness_run_raw(1, no_env_rank, NULL, 30.0, report, sizeof report);
    cr_assert(ok, "hoop_comm_init(NULL) with no HOOP_* variable:\n%s", report);
}

/* hoop_comm_init with cfg, for a rank expected to fail: its status and in
 * *took how long it took; a communicator it formed after all is destroyed. */
static hoop_status_t timed_init(const hoop_config_t *cfg, double *took)
{
    hoop_comm_t *comm = NULL;
    double t0 = harness_now();
    hoop_status_t st = hoop_comm_init(&comm, cfg);
    *took = harness_since(t0);
    if (st == HOOP_OK)
        hoop_comm_destroy(comm);
    return st;
}

/* ---- wrong token ---------------------------------------------------------- */

static int wrong_token_rank(int rank, int size, int port, void *arg)
{
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 3.0, root, token,
                            rank == 1 ? "not-the-job-token" : NULL);
    double took;
    hoop_status_t st = timed_init(&cfg, &took);
    if (st == HOOP_OK)
        return harness_failf(rank, "hoop_comm_init succeeded although rank 1 has a wrong token");
    const char *msg = hoop_last_error();
    if (rank == 0) {
        if (st != HOOP_ERR_TIMEOUT)
            return harness_failf(rank, "root returned %s, expected %s: %s", hoop_status_str(st),
                                 hoop_status_str(HOOP_ERR_TIMEOUT), msg);
        if (!strstr(msg, "rank 1"))
            return harness_failf(rank, "root's error does not name \"rank 1\": %s", msg);
    } else if (!strstr(msg, "refused this rank: wrong job token: rank 1's HOOP_TOKEN differs "
                           "from rank 0's (another job?)")) {
        /* The root proves nothing to it and refuses it with its sentence. */
        return harness_failf(rank, "error of the rank with the wrong token (%s) is not the "
                                   "root's refusal of a wrong token: %s",
                             hoop_status_str(st), msg);
    }
    if (took > 15.0)
        return harness_failf(rank, "took %.1f s to give up with a 3 s bootstrap timeout", took);
    return 0;
}

Test(bootstrap, wrong_token_is_refused, .timeout = 90)
{
    char report[8192];
    bool ok = harness_run_raw(2, wrong_token_rank, NULL, 40.0, report, sizeof report);
    cr_assert(ok, "rank 1 presents a wrong token:\n%s", report);
}

/* ---- garbage sent to the root --------------------------------------------- */

/* The root may drop the connection halfway: an error here is its right. */
static void send_best_effort(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

enum { NPROBES = 4 };

/* What a hostile or confused client sends before the real rank 1 arrives;
 * every connection stays open until the job is over. */
static size_t make_probe(int k, int port, uint8_t *buf, size_t cap, const char **what)
{
    switch (k) {
    case 0: {
        uint32_t x = 0x12345678u;
        for (size_t i = 0; i < cap; i++) {
            x = x * 1664525u + 1013904223u;
            buf[i] = (uint8_t)(x >> 24);
        }
        buf[0] = 'X'; /* not the start of the magic */
        *what = "4 KiB of random bytes";
        return cap;
    }
    case 1:
        memcpy(buf, "HOOP", 4);
        memset(buf + 4, 0xff, 60); /* every field, the length included, 0xff.. */
        *what = "\"HOOP\" followed by 0xff bytes (a length of 0xffffffff)";
        return 64;
    case 2: {
        /* A join hello as laid out in the wire format (64 bytes, little
         * endian: magic, u16 version 1, u16 kind 1 = join, 32-byte token,
         * rank, size, u64 comm id, aux, u32 body length), with the job's own
         * token and rank 1, announcing a 4 GiB body: it must be refused on
         * its length, not admitted as rank 1. */
        char token[64];
        harness_token(port, token, sizeof token);
        memset(buf, 0, 64);
        memcpy(buf, "HOOP", 4);
        hoop_put_le(buf + 4, 1, 2);
        hoop_put_le(buf + 6, 1, 2);
        memcpy(buf + 8, token, strlen(token) < 32 ? strlen(token) : 32);
        hoop_put_le(buf + 40, 1, 4);
        hoop_put_le(buf + 44, 2, 4);
        hoop_put_le(buf + 48, 0, 8);
        hoop_put_le(buf + 56, 0, 4);
        hoop_put_le(buf + 60, 0xffffffffu, 4);
        *what = "a join hello for rank 1 with the job's token and a 0xffffffff-byte body";
        return 64;
    }
    default:
        /* Says nothing: a root that waits on it would never let rank 1 in. */
        *what = "a connection that sends nothing";
        return 0;
    }
}

Test(bootstrap, garbage_at_root_is_ignored, .timeout = 120)
{
    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    hoop_config_t base;
    hoop_config_init(&base);
    base.bootstrap_timeout_s = 30.0;
    cr_assert(harness_spawn_rank(&job, 0, 2, &base, check_sum_fn, NULL) > 0, "fork failed");

    int fds[NPROBES];
    const char *failed_probe = NULL;
    int probe_errno = 0;
    static uint8_t buf[4096];
    for (int k = 0; k < NPROBES; k++)
        fds[k] = -1;
    for (int k = 0; k < NPROBES && !failed_probe; k++) {
        const char *what;
        size_t n = make_probe(k, job.port, buf, sizeof buf, &what);
        /* The first connect also waits for rank 0 to listen. */
        fds[k] = harness_connect_root(job.port, k == 0 ? 20.0 : 10.0);
        if (fds[k] < 0) {
            failed_probe = what;
            probe_errno = errno;
        } else {
            send_best_effort(fds[k], buf, n);
        }
    }
    bool spawned = !failed_probe && harness_spawn_rank(&job, 1, 2, &base, check_sum_fn, NULL) > 0;
    bool ok = harness_wait(&job, JOB_DEADLINE_S, 15.0);
    for (int k = 0; k < NPROBES; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    cr_assert(!failed_probe,
              "could not connect to the root to send %s (%s); an earlier probe may have "
              "broken it. Ranks:\n%s",
              failed_probe, strerror(probe_errno), job.report);
    cr_assert(spawned, "could not start rank 1");
    cr_assert(ok,
              "after random bytes, \"HOOP\" + 0xff.., a join hello announcing 0xffffffff bytes "
              "and a silent connection, rank 1 could not join rank 0:\n%s",
              job.report);
}

/* ---- a rank that never arrives -------------------------------------------- */

static int missing_rank(int rank, int size, int port, void *arg)
{
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 2.0, root, token, NULL);
    double took;
    hoop_status_t st = timed_init(&cfg, &took);
    if (st == HOOP_OK)
        return harness_failf(rank, "hoop_comm_init succeeded with rank 2 of 3 missing");
    const char *msg = hoop_last_error();
    if (took > 10.0)
        return harness_failf(rank, "took %.1f s to fail with a 2 s bootstrap timeout (%s: %s)",
                             took, hoop_status_str(st), msg);
    if (rank == 0 && st != HOOP_ERR_TIMEOUT)
        return harness_failf(rank, "root returned %s, expected %s: %s", hoop_status_str(st),
                             hoop_status_str(HOOP_ERR_TIMEOUT), msg);
    if (rank == 0 && !strstr(msg, "rank 2"))
        return harness_failf(rank, "root's timeout does not name the missing \"rank 2\": %s",
                             msg);
    return 0;
}

Test(bootstrap, missing_rank_times_out, .timeout = 90)
{
    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    cr_assert(harness_spawn_raw(&job, 0, 3, missing_rank, NULL) > 0, "fork failed");
    cr_assert(harness_spawn_raw(&job, 1, 3, missing_rank, NULL) > 0, "fork failed");
    bool ok = harness_wait(&job, 30.0, 15.0);
    cr_assert(ok, "size 3 with only ranks 0 and 1 started:\n%s", job.report);
}

/* ---- two processes claim the same rank ------------------------------------ */

/* A rank of a job in which two processes claim rank 1: how its
 * hoop_comm_init ended, as an OUT_* exit code, plus the status when
 * status_in_exit. */
static int claim_rank(int rank, int size, int port, double bootstrap_s, bool status_in_exit)
{
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, bootstrap_s, root, token, NULL);
    cfg.timeout_s = 10.0;
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (st != HOOP_OK) {
        const char *msg = hoop_last_error();
        fprintf(stderr, "rank %d: hoop_comm_init: %s: %s\n", rank, hoop_status_str(st), msg);
        return (strstr(msg, "rank 1") ? OUT_FAILED_AS_EXPECTED : OUT_FAILED_OTHERWISE) +
               (status_in_exit ? (int)st : 0);
    }
    int rc = check_sum(comm, rank, size);
    hoop_comm_destroy(comm);
    return rc == 0 ? OUT_OK : OUT_BROKEN_AFTER_INIT;
}

static int duplicate_rank(int rank, int size, int port, void *arg)
{
    return claim_rank(rank, size, port, 3.0, false);
}

static const char *outcome_str(const harness_proc_t *p)
{
    static char buf[8][96];
    static int next;
    char *b = buf[next++ % 8];
    if (p->hung)
        snprintf(b, sizeof buf[0], "hung (killed)");
    else if (p->signal)
        snprintf(b, sizeof buf[0], "died of signal %d", p->signal);
    else if (p->exit_code == OUT_OK)
        snprintf(b, sizeof buf[0], "formed a working communicator");
    else if (p->exit_code == OUT_FAILED_AS_EXPECTED)
        snprintf(b, sizeof buf[0], "refused, error names rank 1");
    else if (p->exit_code == OUT_FAILED_OTHERWISE)
        snprintf(b, sizeof buf[0], "refused, error does not name rank 1");
    else if (p->exit_code == OUT_BROKEN_AFTER_INIT)
        snprintf(b, sizeof buf[0], "formed, then its allreduce failed");
    else
        snprintf(b, sizeof buf[0], "exit code %d", p->exit_code);
    return b;
}

Test(bootstrap, duplicate_rank_is_refused, .timeout = 90)
{
    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    for (int k = 0; k < 3; k++)
        cr_assert(harness_spawn_raw(&job, k == 0 ? 0 : 1, 2, duplicate_rank, NULL) > 0,
                  "fork failed");
    /* No grace period: refusals exit non-zero by design. */
    harness_wait(&job, 40.0, 0.0);
    const harness_proc_t *root = &job.procs[0], *a = &job.procs[1], *b = &job.procs[2];
    char summary[512];
    snprintf(summary, sizeof summary, "rank 0: %s; first rank 1: %s; second rank 1: %s",
             outcome_str(root), outcome_str(a), outcome_str(b));

    for (int k = 0; k < 3; k++)
        cr_assert(!job.procs[k].hung && job.procs[k].signal == 0, "%s\n%s", summary,
                  job.report);
    cr_assert(!(a->exit_code == OUT_OK && b->exit_code == OUT_OK),
              "both processes claiming rank 1 formed a communicator: %s", summary);
    cr_assert((a->exit_code == OUT_OK || a->exit_code == OUT_FAILED_AS_EXPECTED) &&
                  (b->exit_code == OUT_OK || b->exit_code == OUT_FAILED_AS_EXPECTED),
              "a refused rank 1 must get an error that names \"rank 1\": %s\n%s", summary,
              job.report);
    cr_assert(root->exit_code == OUT_OK || root->exit_code == OUT_FAILED_AS_EXPECTED ||
                  root->exit_code == OUT_FAILED_OTHERWISE,
              "rank 0 formed a communicator that does not work: %s\n%s", summary, job.report);
    if (root->exit_code == OUT_OK)
        cr_assert(a->exit_code == OUT_OK || b->exit_code == OUT_OK,
                  "rank 0 formed a communicator with no rank 1: %s", summary);
}

/* With two ranks the root is done as soon as one rank 1 has joined, so the
 * second claimant may never reach it and the test above cannot tell a root
 * that refuses duplicates from one that lets the last claimant overwrite the
 * first. Here rank 2 is held back until the root has read both claims, so
 * the root must decide while it still waits: one claimant joins, the other
 * is refused outright rather than left to time out. */

typedef struct root_sockets {
    int clients;         /* established connections to the root port */
    int clients_unacked; /* of those, with bytes the root's kernel has not acked */
    int server_unread;   /* accepted sockets with bytes the root has not read */
} root_sockets_t;

static void scan_tcp_table(const char *path, int port, root_sockets_t *rs)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    if (!fgets(line, sizeof line, f)) { /* header */
        fclose(f);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        char laddr[64], raddr[64];
        unsigned lport, rport, st;
        unsigned long txq, rxq;
        if (sscanf(line, " %*d: %63[0-9A-Fa-f]:%x %63[0-9A-Fa-f]:%x %x %lx:%lx", laddr, &lport,
                   raddr, &rport, &st, &txq, &rxq) != 7)
            continue;
        if (st != 0x01) /* TCP_ESTABLISHED */
            continue;
        if ((int)rport == port) {
            rs->clients++;
            if (txq)
                rs->clients_unacked++;
        }
        if ((int)lport == port && rxq)
            rs->server_unread++;
    }
    fclose(f);
}

static bool proc_exited(pid_t pid)
{
    siginfo_t info;
    memset(&info, 0, sizeof info);
    /* WNOWAIT: harness_wait must still be able to reap it. */
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

/* Until both claims of rank 1 are in and read by the root, or one claimant
 * has already been sent away. Returns false at the bound. */
static bool wait_root_read_claims(const harness_job_t *job, pid_t a, pid_t b, double bound_s)
{
    double t0 = harness_now();
    while (harness_since(t0) < bound_s) {
        if (proc_exited(a) || proc_exited(b))
            return true;
        root_sockets_t rs = {0, 0, 0};
        scan_tcp_table("/proc/net/tcp", job->port, &rs);
        scan_tcp_table("/proc/net/tcp6", job->port, &rs);
        if (rs.clients >= 2 && rs.clients_unacked == 0 && rs.server_unread == 0)
            return true;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return false;
}

#define DUP3_BOOTSTRAP_S 10.0

static int duplicate_rank_3(int rank, int size, int port, void *arg)
{
    /* The status goes into the exit code for the parent to judge. */
    return claim_rank(rank, size, port, DUP3_BOOTSTRAP_S, true);
}

Test(bootstrap, duplicate_rank_is_refused_while_root_waits, .timeout = 90)
{
    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    pid_t pids[3];
    pids[0] = harness_spawn_raw(&job, 0, 3, duplicate_rank_3, NULL);
    pids[1] = harness_spawn_raw(&job, 1, 3, duplicate_rank_3, NULL);
    pids[2] = harness_spawn_raw(&job, 1, 3, duplicate_rank_3, NULL);
    cr_assert(pids[0] > 0 && pids[1] > 0 && pids[2] > 0, "fork failed");
    bool settled = wait_root_read_claims(&job, pids[1], pids[2], DUP3_BOOTSTRAP_S / 2);
    cr_assert(harness_spawn_raw(&job, 2, 3, duplicate_rank_3, NULL) > 0, "fork failed");
    harness_wait(&job, 40.0, 0.0);

    const harness_proc_t *a = &job.procs[1], *b = &job.procs[2];
    char summary[512];
    snprintf(summary, sizeof summary,
             "rank 0: exit %d; first rank 1: exit %d; second rank 1: exit %d; rank 2: exit %d "
             "(0 formed and worked, 1x named rank 1, 2x did not, x = hoop_status_t)%s",
             job.procs[0].exit_code, a->exit_code, b->exit_code, job.procs[3].exit_code,
             settled ? "" : "; the root had not read both claims before rank 2 started");
    for (int k = 0; k < 4; k++)
        cr_assert(!job.procs[k].hung && job.procs[k].signal == 0, "%s\n%s", summary,
                  job.report);
    cr_assert(job.procs[0].exit_code == OUT_OK && job.procs[3].exit_code == OUT_OK,
              "ranks 0 and 2 must form a working communicator with one of the rank 1s: %s\n%s",
              summary, job.report);
    cr_assert((a->exit_code == OUT_OK) != (b->exit_code == OUT_OK),
              "exactly one process claiming rank 1 must join: %s\n%s", summary, job.report);
    const harness_proc_t *refused = a->exit_code == OUT_OK ? b : a;
    cr_assert(refused->exit_code > OUT_FAILED_AS_EXPECTED &&
                  refused->exit_code < OUT_FAILED_OTHERWISE,
              "the refused rank 1 must get an error that names \"rank 1\": %s\n%s", summary,
              job.report);
    cr_assert(refused->exit_code != OUT_FAILED_AS_EXPECTED + HOOP_ERR_TIMEOUT,
              "the second claimant of rank 1 was left to time out instead of being refused: "
              "%s\n%s",
              summary, job.report);
}

/* ---- bad configuration ---------------------------------------------------- */

static void expect_invalid(const char *what, int rank, int size, const char *root)
{
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.rank = rank;
    cfg.size = size;
    cfg.root = root;
    cfg.token = "bad-config-token";
    /* Long enough that waiting for the network cannot pass for "immediately". */
    cfg.bootstrap_timeout_s = 30.0;
    hoop_comm_t *sentinel = (hoop_comm_t *)(uintptr_t)0x1234;
    hoop_comm_t *comm = sentinel;
    double t0 = harness_now();
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    double took = harness_since(t0);
    if (st == HOOP_OK && comm != sentinel)
        hoop_comm_destroy(comm);
    cr_assert_eq(st, HOOP_ERR_INVALID, "%s (rank %d, size %d, root \"%s\"): got %s (%s), expected %s",
                 what, rank, size, root, hoop_status_str(st), hoop_last_error(),
                 hoop_status_str(HOOP_ERR_INVALID));
    cr_assert(comm == sentinel, "%s: *comm was written although hoop_comm_init failed", what);
    cr_assert(hoop_last_error()[0] != '\0', "%s: HOOP_ERR_INVALID with an empty message", what);
    cr_assert(took < 5.0, "%s: took %.1f s to reject a configuration it can check locally",
              what, took);
}

Test(bootstrap, bad_configuration_is_invalid, .timeout = 60)
{
    char root[64];
    int port = harness_free_port();
    cr_assert(port > 0, "no free loopback port");
    snprintf(root, sizeof root, "127.0.0.1:%d", port);
    expect_invalid("rank >= size", 2, 2, root);
    expect_invalid("rank >= size", 5, 3, root);
    expect_invalid("size 0", 0, 0, root);
    expect_invalid("root without a port", 0, 2, "nocolon");
    expect_invalid("root without a port", 1, 2, "nocolon");
    expect_invalid("port out of range", 0, 2, "host:99999");
    expect_invalid("port out of range", 1, 2, "host:99999");
}

/* expect_invalid, and the sentence names every word of `names`. */
static void expect_invalid_naming(const char *what, int rank, int size, const char *root,
                                  const char *const *names)
{
    expect_invalid(what, rank, size, root);
    const char *msg = hoop_last_error();
    for (int i = 0; names[i]; i++)
        cr_assert(strstr(msg, names[i]), "%s: the sentence does not name \"%s\": %s", what,
                  names[i], msg);
}

Test(bootstrap, bad_variables_are_invalid, .timeout = 60)
{
    char root[64];
    int port = harness_free_port();
    cr_assert(port > 0, "no free loopback port");
    snprintf(root, sizeof root, "127.0.0.1:%d", port);
    cr_assert(setenv("HOOP_LOG_LEVEL", "loud", 1) == 0);
    expect_invalid_naming("HOOP_LOG_LEVEL=loud", 0, 1, root,
                          (const char *const[]){"HOOP_LOG_LEVEL", "'loud'", "debug", NULL});
    expect_invalid_naming("HOOP_LOG_LEVEL=loud", 1, 2, root,
                          (const char *const[]){"rank 1", "HOOP_LOG_LEVEL", "'loud'", NULL});
    cr_assert(unsetenv("HOOP_LOG_LEVEL") == 0);
    cr_assert(setenv("HOOP_REDUCE_ISA", "bogus", 1) == 0);
    expect_invalid_naming("HOOP_REDUCE_ISA=bogus", 0, 1, root,
                          (const char *const[]){"HOOP_REDUCE_ISA", "'bogus'", "generic", NULL});
    expect_invalid_naming("HOOP_REDUCE_ISA=bogus", 1, 2, root,
                          (const char *const[]){"rank 1", "HOOP_REDUCE_ISA", "'bogus'", NULL});
    cr_assert(unsetenv("HOOP_REDUCE_ISA") == 0);
}

/* Rank 0 whose root names a host that does not resolve: the sentence names
 * the host and HOOP_ROOT (not the bind's "Cannot assign requested address"). */
Test(bootstrap, unresolvable_root_name_is_invalid, .timeout = 60)
{
    char root[96];
    snprintf(root, sizeof root, "no-such-host.invalid:%d", 29411);
    expect_invalid_naming("HOOP_ROOT that does not resolve", 0, 2, root,
                          (const char *const[]){"rank 0", "no-such-host.invalid", "HOOP_ROOT", NULL});
    expect_invalid_naming("HOOP_ROOT that does not resolve", 1, 2, root,
                          (const char *const[]){"rank 1", "no-such-host.invalid", "HOOP_ROOT", NULL});
}
