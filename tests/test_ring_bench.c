/* test_ring_bench.c - ring_bench's parameter sweep (--sweep VAR=V1,V2,...):
 * every value runs as a job of its own, made with the variable set to it,
 * and bad sweeps are refused before any rank waits for another. The jobs
 * are real: hooprun starts the ranks, and the engine each table names is
 * the one the library reports it used. And -G, device buffers: refused in
 * one line where no GPU can be used, right results where one can. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
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

/* -G (--device cuda) where no GPU can be used: refused at once, one line
 * on stderr saying why, exit status 2, before any rank waits for another.
 * Under hooprun the job ends as fast, saying why. */
Test(ring_bench, device_buffers_without_a_gpu_are_refused, .timeout = 60)
{
    const char *why = NULL;
    if (hoop_gpu_available(&why))
        cr_skip_test("a GPU can be used here: this test is for machines without one "
                     "(ring_bench::device_buffers_on_a_gpu runs instead)");
    const char *forms[][2] = {{"-G", NULL}, {"--device", "cuda"}};
    for (int i = 0; i < 2; i++) {
        struct proc_capture r;
        run_bench(&r, forms[i][1] ? ARGS(harness_built("ring_bench"), forms[i][0], forms[i][1])
                                  : ARGS(harness_built("ring_bench"), forms[i][0]));
        cr_assert_eq(r.status, 2, "%s exited with %d\nstderr:\n%s", forms[i][0], r.status, r.err.p);
        cr_assert_eq(r.out.len, 0, "%s printed on stdout:\n%s", forms[i][0], r.out.p);
        cr_assert_eq(count_of(r.err.p, "\n"), 1, "%s: not one line on stderr:\n%s", forms[i][0],
                     r.err.p);
        cr_assert(strstr(r.err.p, "ring_bench: rank 0: -G: device buffers need a GPU, and none "
                                  "can be used here: ") &&
                      strstr(r.err.p, why),
                  "%s: stderr does not say that no GPU can be used, and why ('%s')\n%s",
                  forms[i][0], why, r.err.p);
        cr_assert_lt(r.elapsed_s, 5.0, "%s took %.1f s to be refused", forms[i][0], r.elapsed_s);
        proc_capture_free(&r);
    }
    struct proc_capture r;
    run_bench(&r, ARGS(harness_built("hooprun"), "-np", "2", harness_built("ring_bench"), "-G"));
    cr_assert_neq(r.status, 0, "hooprun -np 2 ring_bench -G succeeded without a GPU");
    /* hooprun stops the others when the first rank exits: one says why. */
    cr_assert(strstr(r.err.p, ": -G: device buffers need a GPU"), "no rank says why\n%s", r.err.p);
    cr_assert_lt(r.elapsed_s, 10.0, "the job took %.1f s to end", r.elapsed_s);
    proc_capture_free(&r);
    /* A device that is neither: bad usage. */
    run_bench(&r, ARGS(harness_built("ring_bench"), "--device", "gpu"));
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err.p, "--device: 'gpu' is neither cuda nor host"), "%s", r.err.p);
    proc_capture_free(&r);
}

/* On a GPU: a 2-rank allreduce on device buffers whose results are right
 * (checked through host memory as for host buffers), the header naming
 * the buffer kind and the GPU. */
Test(ring_bench, device_buffers_on_a_gpu, .timeout = 120)
{
    harness_need_gpu();
    struct proc_capture r;
    run_bench(&r,
              ARGS(harness_built("hooprun"), "-np", "2", "--no-tag", harness_built("ring_bench"),
                   "-G", "-b", "8", "-e", "4M", "-f", "8", "-n", "2", "-w", "1"));
    cr_assert_eq(r.status, 0, "ring_bench -G exited with %d\nstdout:\n%s\nstderr:\n%s", r.status,
                 r.out.p, r.err.p);
    cr_assert(strstr(r.out.p, "# buffers: device (cudaMalloc), rank 0 on GPU "), "%s", r.out.p);
    cr_assert(strstr(r.out.p, ", sm_") && strstr(r.out.p, ", PCI "), "%s", r.out.p);
    cr_assert(strstr(r.out.p, "Out of bounds values : 0 OK"), "%s", r.out.p);
    proc_capture_free(&r);
}

/* -R: buffers from hoop_mem_alloc, every result checked, the header
 * saying so; and with -G, refused. */
Test(ring_bench, registered_buffers_are_exact, .timeout = 120)
{
    setenv("HOOP_SHM", "auto", 1);
    struct proc_capture r;
    run_bench(&r, ARGS(harness_built("hooprun"), "-np", "3", "--no-tag",
                       harness_built("ring_bench"), "-R", "-b", "8", "-e", "4M", "-f", "8", "-n",
                       "3", "-w", "1", "-d", "bf16", "-o", "avg"));
    cr_assert_eq(r.status, 0, "ring_bench -R exited with %d\nstdout:\n%s\nstderr:\n%s", r.status,
                 r.out.p, r.err.p);
    cr_assert(strstr(r.out.p, "# buffers: host, from hoop_mem_alloc"), "%s", r.out.p);
    cr_assert(strstr(r.out.p, "# Out of bounds values : 0 OK"), "%s", r.out.p);
    run_bench(&r, ARGS(harness_built("ring_bench"), "-R", "-G"));
    cr_assert_eq(r.status, 2, "ring_bench -R -G exited with %d\n%s", r.status, r.err.p);
    cr_assert(strstr(r.err.p, "hoop_mem_alloc gives host memory only"), "%s", r.err.p);
}
