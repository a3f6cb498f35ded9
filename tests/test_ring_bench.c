/* test_ring_bench.c - ring_bench's parameter sweep (--sweep VAR=V1,V2,...):
 * every value runs as a job of its own, made with the variable set to it,
 * and bad sweeps are refused before any rank waits for another. The jobs
 * are real: hooprun starts the ranks, and the engine each table names is
 * the one the library reports it used. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "proc.h"

/* The header names the TCP engine each job ran on: same-host ranks use
 * TCP here, not shared memory. */
static void over_tcp(void)
{
    setenv("HOOP_SHM", "0", 1);
}
TestSuite(ring_bench, .init = over_tcp);

#define RUN_LIMIT_S 60.0
#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void run_bench(struct proc_capture *r, const char *const *argv)
{
    const struct proc_capture_opts o = {.limit_s = RUN_LIMIT_S, .own_group = true};
    cr_assert(proc_capture(r, &o, 126, argv), "cannot run %s: %s", argv[0], strerror(errno));
    cr_assert(r->status != -1, "%s did not finish within %.0f s\nstdout:\n%s\nstderr:\n%s",
              argv[0], RUN_LIMIT_S, r->out.p, r->err.p);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

Test(ring_bench, sweep_makes_a_job_per_value, .timeout = 120)
{
    harness_skip_without_io_uring("a sweep of HOOP_TCP_ENGINE over poll and uring");
    struct proc_capture r;
    run_bench(&r, ARGS(harness_built("hooprun"), "-np", "2", "--no-tag",
                       harness_built("ring_bench"), "-b", "4K", "-e", "1M", "-f", "16", "-n", "2",
                       "-w", "1", "--sweep", "HOOP_TCP_ENGINE=poll,uring,poll"));
    cr_assert_eq(r.status, 0, "the sweep exited with %d\nstdout:\n%s\nstderr:\n%s", r.status,
                 r.out.p, r.err.p);
    /* Each job says which engine it ran on: the variable reached it. */
    const char *poll = strstr(r.out.p, "transport tcp/poll");
    const char *uring = poll ? strstr(poll, "transport tcp/io_uring") : NULL;
    const char *poll2 = uring ? strstr(uring, "transport tcp/poll") : NULL;
    cr_assert(poll && uring && poll2,
              "the three tables do not name poll, io_uring and poll in that order\n%s", r.out.p);
    cr_assert_eq(count_of(r.out.p, "# sweep HOOP_TCP_ENGINE="), 3, "%s", r.out.p);
    cr_assert_eq(count_of(r.out.p, "Out of bounds values : 0 OK"), 3, "%s", r.out.p);
    /* The closing table has a line per value, each a positive bandwidth. */
    const char *sum = strstr(r.out.p, "# sweep of HOOP_TCP_ENGINE");
    cr_assert(sum, "no closing table\n%s", r.out.p);
    const char *vals[] = {"poll", "uring", "poll"};
    const char *at = strchr(sum, '\n');
    for (int i = 0; i < 3; i++) {
        char name[32];
        double bw = -1;
        cr_assert(at && sscanf(at, "\n# sweep %31s %lf", name, &bw) == 2,
                  "line %d of the closing table is not '# sweep VALUE GB/s'\n%s", i + 1, sum);
        cr_assert_str_eq(name, vals[i], "%s", sum);
        cr_assert_gt(bw, 0.0, "%s", sum);
        at = strchr(at + 1, '\n');
    }
    proc_capture_free(&r);
}

static void expect_refused(const char *sweep, const char *says)
{
    struct proc_capture r;
    run_bench(&r, ARGS(harness_built("ring_bench"), "--sweep", sweep));
    cr_assert_eq(r.status, 2, "--sweep %s exited with %d\nstderr:\n%s", sweep, r.status, r.err.p);
    cr_assert(strstr(r.err.p, says), "--sweep %s: stderr does not say '%s'\n%s", sweep, says,
              r.err.p);
    cr_assert_eq(r.out.len, 0, "--sweep %s printed on stdout:\n%s", sweep, r.out.p);
    cr_assert_lt(r.elapsed_s, 5.0, "--sweep %s took %.1f s to be refused", sweep, r.elapsed_s);
    proc_capture_free(&r);
}

Test(ring_bench, bad_sweeps_are_refused, .timeout = 60)
{
    expect_refused("HOOP_CHUNK_BYTES", "is not VAR=V1,V2");
    expect_refused("=1M", "is not VAR=V1,V2");
    expect_refused("HOOP_CHUNK_BYTES=", "is not VAR=V1,V2");
    expect_refused("HOOP_NO_SUCH=1,2", "HOOP_NO_SUCH is not a hoop variable");
    expect_refused("HOOP_RANK=0,1", "HOOP_RANK says who the ranks are");
    expect_refused("HOOP_ROOT=a:1,b:2", "HOOP_ROOT says who the ranks are");
    expect_refused("HOOP_CHUNK_BYTES=1M,,4M", "an empty value");
    expect_refused("HOOP_CHUNK_BYTES=1M,", "an empty value");
    expect_refused("HOOP_CHUNK_BYTES=,1M", "an empty value");
}
