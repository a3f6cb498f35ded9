/* test_engine.c - the TCP transport's two engines, and the choice between
 * them (HOOP_TCP_ENGINE).
 *
 * Where io_uring is refused (Docker's default seccomp profile, the
 * io_uring_disabled sysctl, gVisor) the transport must fall back to poll by
 * itself. build/no_uring refuses io_uring the way Docker's profile does, so
 * the fallback is tested for real: the benchmark runs under it as users run
 * it, through hooprun. Programs run with fork/exec, their output captured
 * and their run bounded, so that a hang fails the test.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* These tests are about the TCP transport's own ways (its engines, its
 * sockets, what it reports), so same-host ranks use it, not shared memory. */
static void over_tcp(void)
{
    setenv("HOOP_SHM", "0", 1);
}
TestSuite(engine, .init = over_tcp);
#include "proc.h"
#include "hoop.h"

/* Far above what any run here needs, far below Criterion's own timeout. */
#define RUN_LIMIT_S 60.0

#define built harness_built

/* Run argv (NULL-terminated) with HOOP_TCP_ENGINE=engine, in its own process
 * group so that a run past RUN_LIMIT_S is killed with everything it
 * started. */
static void run_prog(struct proc_capture *res, const char *engine, const char *const *argv)
{
    const struct proc_capture_opts o = {.limit_s = RUN_LIMIT_S,
                                        .env_name = "HOOP_TCP_ENGINE",
                                        .env_value = engine,
                                        .own_group = true};
    cr_assert(proc_capture(res, &o, 126, argv), "cannot run %s: %s", argv[0], strerror(errno));
    cr_assert(res->status != -1, "%s did not finish within %.0f s\nstdout:\n%s\nstderr:\n%s",
              argv[0], RUN_LIMIT_S, res->out.p, res->err.p);
}

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* no_uring exits 125 when this kernel cannot install its filter. */
static void skip_without_seccomp(const struct proc_capture *r)
{
    if (r->status == 125 && strstr(r->err.p, "no_uring:"))
        cr_skip_test("io_uring cannot be refused on this machine, so the fallback cannot be "
                     "tested: %s", r->err.p);
}

Test(engine, refused_io_uring_falls_back_to_poll, .timeout = 120)
{
    struct proc_capture r;
    run_prog(&r, "auto",
             ARGS(built("no_uring"), built("hooprun"), "-np", "4", built("ring_bench"), "-b", "8",
                  "-e", "4M"));
    skip_without_seccomp(&r);
    cr_assert_eq(r.status, 0, "ring_bench under no_uring exited with %d\nstdout:\n%s\nstderr:\n%s",
                 r.status, r.out.p, r.err.p);
    cr_assert(strstr(r.out.p, "Out of bounds values : 0 OK"),
              "ring_bench did not report 0 wrong rows\nstdout:\n%s", r.out.p);
    cr_assert(strstr(r.err.p, "io_uring refused") && strstr(r.err.p, "using the poll engine"),
              "the log does not say that the poll engine replaced io_uring\nstderr:\n%s", r.err.p);
    proc_capture_free(&r);
}

Test(engine, forcing_refused_io_uring_fails_cleanly, .timeout = 120)
{
    struct proc_capture r;
    run_prog(&r, "uring",
             ARGS(built("no_uring"), built("hooprun"), "-np", "2", built("ring_bench"), "-b", "8",
                  "-e", "8"));
    skip_without_seccomp(&r);
    cr_assert(r.status != 0 && r.status != -1,
              "HOOP_TCP_ENGINE=uring where io_uring is refused exited with %d\nstdout:\n%s\n"
              "stderr:\n%s", r.status, r.out.p, r.err.p);
    /* Refused before any rank waits for another: no timeout is involved. */
    cr_assert_lt(r.elapsed_s, 20.0, "the refusal took %.1f s\nstderr:\n%s", r.elapsed_s, r.err.p);
    cr_assert(strstr(r.err.p, "HOOP_TCP_ENGINE=uring") && strstr(r.err.p, "io_uring") &&
                  strstr(r.err.p, "HOOP_TCP_ENGINE=auto or poll"),
              "the error does not say that io_uring was refused and what to set\nstderr:\n%s",
              r.err.p);
    cr_assert(!strstr(r.err.p, "using the poll engine"),
              "a forced io_uring fell back to poll\nstderr:\n%s", r.err.p);
    proc_capture_free(&r);
}

/* A setting (in the environment the ranks inherit) that every rank refuses
 * in hoop_comm_init with HOOP_ERR_INVALID and a sentence containing arg.
 * In-process, so that the status itself is checked. */
static int invalid_setting_rank(int rank, int size, int port, void *arg)
{
    const char *says = arg;
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port, 10.0, root, token, NULL);
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (st == HOOP_OK) {
        hoop_comm_destroy(comm);
        return harness_failf(rank, "hoop_comm_init succeeded where it should say \"%s\"", says);
    }
    if (st != HOOP_ERR_INVALID || !strstr(hoop_last_error(), says))
        return harness_failf(rank, "gave %s, not %s saying \"%s\": %s", hoop_status_str(st),
                             hoop_status_str(HOOP_ERR_INVALID), says, hoop_last_error());
    return 0;
}

Test(engine, unknown_engine_is_invalid, .timeout = 60)
{
    setenv("HOOP_TCP_ENGINE", "bogus", 1);
    char report[8192];
    bool ok = harness_run_raw(2, invalid_setting_rank, "HOOP_TCP_ENGINE='bogus'", 30.0, report,
                              sizeof report);
    cr_assert(ok, "HOOP_TCP_ENGINE=bogus:\n%s", report);
}

/* Inputs that cross many chunks and every socket of the stripe; sums of
 * small integers, exact in i32. */
#define ENGINE_COUNT ((1u << 20) + 7)

static int32_t engine_input(int rank, size_t i)
{
    return (int32_t)((i * 2654435761u + (size_t)rank * 40503u) % 1000u);
}

static int engine_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const char *expect = arg;
    const char *got = hoop_comm_transport(comm);
    if (!got || strcmp(got, expect) != 0)
        return harness_failf(rank, "hoop_comm_transport() is \"%s\", not \"%s\"",
                             got ? got : "(null)", expect);
    int32_t *buf = malloc(ENGINE_COUNT * sizeof *buf);
    if (!buf)
        return harness_failf(rank, "out of memory");
    int rc = 0;
    for (int round = 0; round < 2 && rc == 0; round++) {
        for (size_t i = 0; i < ENGINE_COUNT; i++)
            buf[i] = engine_input(rank, i + (size_t)round);
        hoop_status_t st = hoop_allreduce(comm, buf, buf, ENGINE_COUNT, HOOP_I32, HOOP_SUM);
        if (st != HOOP_OK) {
            rc = harness_fail(rank, "hoop_allreduce", st);
            break;
        }
        for (size_t i = 0; i < ENGINE_COUNT; i++) {
            int32_t want = 0;
            for (int r = 0; r < size; r++)
                want += engine_input(r, i + (size_t)round);
            if (buf[i] != want) {
                rc = harness_failf(rank, "round %d, element %zu: %d, expected %d", round, i,
                                   buf[i], want);
                break;
            }
        }
    }
    free(buf);
    return rc;
}

/* Small chunks, a deep pipeline and three sockets per neighbour: many
 * requests queued per socket and direction, whose order on the wire the
 * engine must keep. */
static void run_engine(const char *engine, const char *expect)
{
    setenv("HOOP_TCP_ENGINE", engine, 1);
    setenv("HOOP_TCP_NSOCKS", "3", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = 64 * 1024;
    base.pipeline_depth = 8;
    char report[8192];
    bool ok = harness_run(3, &base, engine_rank, (void *)expect, 90.0, report, sizeof report);
    cr_assert(ok, "allreduce over %s failed:\n%s", expect, report);
}

Test(engine, poll_is_reported_and_striped_in_order, .timeout = 120)
{
    run_engine("poll", "tcp/poll");
}

Test(engine, uring_is_reported_and_striped_in_order, .timeout = 120)
{
    harness_skip_without_io_uring("an allreduce striped over sockets");
    run_engine("uring", "tcp/io_uring");
}

/* The same with waits that busy-poll before they sleep. */
Test(engine, poll_busy_polls_in_order, .timeout = 120)
{
    setenv("HOOP_BUSY_POLL_US", "200", 1);
    run_engine("poll", "tcp/poll");
}

Test(engine, uring_busy_polls_in_order, .timeout = 120)
{
    harness_skip_without_io_uring("an allreduce with busy-polling waits");
    setenv("HOOP_BUSY_POLL_US", "200", 1);
    run_engine("uring", "tcp/io_uring");
}

/* Rank 1 leaves after one allreduce; rank 0's next one must fail with
 * HOOP_ERR_PEER at once, not wait for its timeout. */
static int leaver_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    static int32_t buf[1 << 18];
    hoop_status_t st = hoop_allreduce(comm, buf, buf, 1 << 18, HOOP_I32, HOOP_SUM);
    if (st != HOOP_OK)
        return harness_fail(rank, "the first hoop_allreduce", st);
    if (rank == 1)
        return 0;
    double start = harness_now();
    st = hoop_allreduce(comm, buf, buf, 1 << 18, HOOP_I32, HOOP_SUM);
    double took = harness_now() - start;
    if (st != HOOP_ERR_PEER)
        return harness_failf(rank, "after rank 1 left, hoop_allreduce gave %s, not %s: %s",
                             hoop_status_str(st), hoop_status_str(HOOP_ERR_PEER),
                             hoop_last_error());
    if (took > 10.0)
        return harness_failf(rank, "the peer's departure took %.1f s to notice", took);
    if (!strstr(hoop_last_error(), "rank 1"))
        return harness_failf(rank, "the error does not name rank 1: %s", hoop_last_error());
    return 0;
}

static void run_leaver(const char *engine)
{
    setenv("HOOP_TCP_ENGINE", engine, 1);
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = 30.0;
    base.chunk_bytes = 64 * 1024;
    char report[8192];
    bool ok = harness_run(2, &base, leaver_rank, NULL, 60.0, report, sizeof report);
    cr_assert(ok, "HOOP_TCP_ENGINE=%s:\n%s", engine, report);
}

Test(engine, poll_sees_a_peer_leave, .timeout = 90)
{
    run_leaver("poll");
}

Test(engine, uring_sees_a_peer_leave, .timeout = 90)
{
    harness_skip_without_io_uring("a peer that leaves");
    run_leaver("uring");
}

/* ---- HOOP_TCP_NSOCKS=auto ------------------------------------------------- */

/* A rank of a 2-rank job that counts its socket descriptors once the
 * communicator is made and one allreduce is through; with `apart` it first
 * moves into a UTS namespace of its own under another host name, so that
 * the two ranks are on different hosts as the library sees them. */
struct nsocks_job {
    const char *nsocks; /* HOOP_TCP_NSOCKS */
    bool apart;
    char cc[16];        /* HOOP_TCP_CONGESTION, and count only sockets that use it; "" neither */
    int *counts;        /* shared with the parent: one per rank */
};

/* This process's sockets; with cc, only the TCP ones whose congestion
 * control is cc. */
static int count_socket_fds(const char *cc)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    char path[300], target[64];
    while ((e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0)
            continue;
        target[len] = '\0';
        if (strncmp(target, "socket:", 7) != 0)
            continue;
        char got[16] = "";
        socklen_t glen = sizeof got - 1;
        n += !cc || (getsockopt(atoi(e->d_name), IPPROTO_TCP, TCP_CONGESTION, got, &glen) == 0 &&
                     strcmp(got, cc) == 0);
    }
    closedir(d);
    return n;
}

static int nsocks_rank(int rank, int size, int port, void *arg)
{
    struct nsocks_job *j = arg;
    if (j->apart && rank == 1) {
        if (unshare(CLONE_NEWUTS) != 0)
            return 77; /* no right to: the parent skips */
        if (sethostname("hoop-test-other-host", strlen("hoop-test-other-host")) != 0)
            return harness_failf(rank, "sethostname: %s", strerror(errno));
    }
    setenv("HOOP_TCP_NSOCKS", j->nsocks, 1);
    if (j->cc[0])
        setenv("HOOP_TCP_CONGESTION", j->cc, 1);
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    hoop_comm_t *comm;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (st != HOOP_OK)
        return harness_fail(rank, "hoop_comm_init", st);
    int32_t v = rank + 1;
    st = hoop_allreduce(comm, &v, &v, 1, HOOP_I32, HOOP_SUM);
    int rc = 0;
    if (st != HOOP_OK)
        rc = harness_fail(rank, "hoop_allreduce", st);
    else if (v != 3)
        rc = harness_failf(rank, "the allreduce gave %d, not 3", v);
    j->counts[rank] = count_socket_fds(j->cc[0] ? j->cc : NULL);
    hoop_comm_destroy(comm);
    return rc;
}

static void nsocks_run_cc(const char *nsocks, bool apart, const char *cc, int counts[2])
{
    struct nsocks_job *j = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                -1, 0);
    cr_assert(j != MAP_FAILED);
    j->nsocks = nsocks;
    j->apart = apart;
    snprintf(j->cc, sizeof j->cc, "%s", cc);
    j->counts = (int *)(j + 1);
    char report[8192];
    bool ok = harness_run_raw(2, nsocks_rank, j, 60.0, report, sizeof report);
    if (!ok && apart && strstr(report, "exit code 77"))
        cr_skip_test("this test cannot make a UTS namespace (it needs CAP_SYS_ADMIN), so it "
                     "cannot put a rank on another host:\n%s", report);
    cr_assert(ok, "HOOP_TCP_NSOCKS=%s%s:\n%s", nsocks, apart ? " across hosts" : "", report);
    counts[0] = j->counts[0];
    counts[1] = j->counts[1];
    munmap(j, 4096);
}

static void nsocks_run(const char *nsocks, bool apart, int counts[2])
{
    nsocks_run_cc(nsocks, apart, "", counts);
}

Test(engine, auto_nsocks_is_one_on_a_host_and_two_across, .timeout = 120)
{
    int one[2], two[2], here[2], across[2];
    nsocks_run("1", false, one);
    nsocks_run("2", false, two);
    nsocks_run("auto", false, here);
    nsocks_run("auto", true, across);
    for (int r = 0; r < 2; r++) {
        /* Two sockets more per neighbour connection: one out, one in. */
        cr_assert_eq(two[r], one[r] + 2, "rank %d has %d sockets with 1 per neighbour and %d "
                     "with 2", r, one[r], two[r]);
        cr_assert_eq(here[r], one[r], "rank %d: auto on one host made %d sockets, 1 per "
                     "neighbour makes %d", r, here[r], one[r]);
        cr_assert_eq(across[r], two[r], "rank %d: auto across hosts made %d sockets, 2 per "
                     "neighbour makes %d", r, across[r], two[r]);
    }
}

/* HOOP_TCP_CONGESTION reaches every data socket, here an algorithm other
 * than the system's: each rank's connection out and in (one socket each on
 * one host) uses it, and the bootstrap's socket does not. */
Test(engine, congestion_control_reaches_the_data_sockets, .timeout = 120)
{
    char sys[16] = "";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_congestion_control", "r");
    if (!f || !fgets(sys, sizeof sys, f))
        cr_skip_test("cannot read net.ipv4.tcp_congestion_control");
    fclose(f);
    sys[strcspn(sys, "\n")] = '\0';
    const char *alt = strcmp(sys, "reno") ? "reno" : "cubic";
    int with[2], all[2];
    nsocks_run_cc("1", false, alt, with);
    nsocks_run("1", false, all);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(with[r], 2, "rank %d: %d sockets use %s (the system's is %s), not its "
                     "connection out and in", r, with[r], alt, sys);
        cr_assert_lt(with[r], all[r], "rank %d: every one of its %d sockets uses %s, the "
                     "bootstrap's too", r, all[r], alt);
    }
}

Test(engine, unknown_congestion_control_is_invalid, .timeout = 60)
{
    setenv("HOOP_TCP_CONGESTION", "no-such-cc", 1);
    char report[8192];
    bool ok = harness_run_raw(2, invalid_setting_rank,
                              "HOOP_TCP_CONGESTION='no-such-cc' cannot be set on a socket here",
                              30.0, report, sizeof report);
    cr_assert(ok, "%s", report);
}

/* Both ranks refuse the value before either waits for the other. */
Test(engine, bad_busy_poll_is_invalid, .timeout = 60)
{
    setenv("HOOP_BUSY_POLL_US", "fast", 1);
    char report[8192];
    bool ok = harness_run_raw(2, invalid_setting_rank,
                              "HOOP_BUSY_POLL_US='fast' is neither auto nor", 30.0, report,
                              sizeof report);
    cr_assert(ok, "%s", report);
}

Test(engine, bad_nsocks_is_invalid, .timeout = 60)
{
    setenv("HOOP_TCP_NSOCKS", "two", 1);
    char report[8192];
    bool ok = harness_run_raw(2, invalid_setting_rank,
                              "HOOP_TCP_NSOCKS='two' is neither auto nor a whole number", 30.0,
                              report, sizeof report);
    cr_assert(ok, "%s", report);
}

/* Every way of making the io_uring (HOOP_URING_SETUP) and of submitting to
 * it (HOOP_URING_SUBMIT) keeps the order on the wire; a kernel that refuses
 * a setup's flags gets a plain ring, said in the log. */
Test(engine, uring_setups_and_submissions_in_order, .timeout = 300)
{
    harness_skip_without_io_uring("every io_uring setup and submission");
    static const char *const setups[][2] = {
        {"plain", "batch"}, {"defer", "batch"}, {"sqpoll", "batch"}, {"coop", "each"},
        {"defer", "each"},
    };
    for (size_t i = 0; i < sizeof(setups) / sizeof(setups[0]); i++) {
        setenv("HOOP_URING_SETUP", setups[i][0], 1);
        setenv("HOOP_URING_SUBMIT", setups[i][1], 1);
        cr_log_info("HOOP_URING_SETUP=%s HOOP_URING_SUBMIT=%s", setups[i][0], setups[i][1]);
        run_engine("uring", "tcp/io_uring");
    }
}

Test(engine, bad_uring_setup_is_invalid, .timeout = 60)
{
    setenv("HOOP_TCP_ENGINE", "uring", 1);
    setenv("HOOP_URING_SETUP", "iopoll", 1);
    char report[8192];
    bool ok = harness_run_raw(2, invalid_setting_rank,
                              "HOOP_URING_SETUP='iopoll' is not one of coop, plain, defer or "
                              "sqpoll", 30.0, report, sizeof report);
    cr_assert(ok, "%s", report);
}

Test(engine, bad_uring_submit_is_invalid, .timeout = 60)
{
    setenv("HOOP_TCP_ENGINE", "uring", 1);
    setenv("HOOP_URING_SUBMIT", "later", 1);
    char report[8192];
    bool ok = harness_run_raw(2, invalid_setting_rank,
                              "HOOP_URING_SUBMIT='later' is neither batch nor each", 30.0, report,
                              sizeof report);
    cr_assert(ok, "%s", report);
}
