/* test_verbs.c - the RDMA verbs transport (HOOP_TRANSPORT=verbs): that it
 * is the one running and moves messages of one slot, many slots and none
 * exactly; what a missing device or a GID index past the table says; bytes
 * that are not a frame; its registrations of send buffers across free and
 * reallocation; ring_bench over it. The collective, mismatch and fault
 * suites also run over verbs, in a guest with a Soft-RoCE device where this
 * machine has no RDMA (the Makefile's verbs pass, tests/vm/suite.sh),
 * natively where it has. */
#include <criterion/criterion.h>

#include "garbage.h"
#include "harness.h"
#include "hoop.h"
#include "proc.h"
#include "remap.h"
#include "collectives/comm.h"
#include "gpu/gpu.h"
#include "ring/mixed.h"
#include "transport/verbs/verbs.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 when a device with an ACTIVE port is here. */
static int verbs_device_here(void)
{
    int n = 0, found = 0;
    struct ibv_device **d = ibv_get_device_list(&n);
    for (int i = 0; d && i < n && !found; i++) {
        struct ibv_context *ctx = ibv_open_device(d[i]);
        struct ibv_port_attr pa;
        if (ctx && ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE)
            found = 1;
        if (ctx)
            ibv_close_device(ctx);
    }
    if (d)
        ibv_free_device_list(d);
    return found;
}

static void need_device(void)
{
    if (!verbs_device_here())
        cr_skip_test("no RDMA device with an ACTIVE port here; `make test` runs this suite in "
                     "a guest with a Soft-RoCE device (the verbs-vm pass) where qemu can run");
}

/* Counts: none, one, odd across a slot's edge, many slots and chunks. */
static const size_t verbs_counts[] = {0, 1, 32767, (1u << 20) + 7};

static int verbs_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const char *got = hoop_comm_transport(comm);
    if (strncmp(got, "verbs/", 6) != 0)
        return harness_failf(rank, "hoop_comm_transport() is \"%s\", not verbs", got);
    size_t most = verbs_counts[sizeof(verbs_counts) / sizeof(verbs_counts[0]) - 1];
    int32_t *buf = malloc(most * sizeof(*buf) + 4);
    if (!buf)
        return harness_failf(rank, "out of memory");
    int rc = 0;
    for (size_t k = 0; k < sizeof(verbs_counts) / sizeof(verbs_counts[0]) && !rc; k++)
        rc = harness_allreduce_i32_checked(comm, rank, size, buf, verbs_counts[k]);
    free(buf);
    return rc;
}

Test(verbs, runs_and_moves_messages_exactly, .timeout = 300)
{
    need_device();
    setenv("HOOP_TRANSPORT", "verbs", 1);
    char report[8192];
    bool ok = harness_run(3, NULL, verbs_rank, NULL, 240, report, sizeof(report));
    unsetenv("HOOP_TRANSPORT");
    cr_assert(ok, "3 ranks over verbs:\n%s", report);
}

/* Each rank's communicator is refused with `want`, its sentence holding
 * `says`. */
struct verbs_refusal {
    const char *var, *val;
    hoop_status_t want;
    const char *says;
};

static int refused_rank(int rank, int size, int port, void *arg)
{
    const struct verbs_refusal *s = arg;
    setenv("HOOP_TRANSPORT", "verbs", 1);
    if (s->var)
        setenv(s->var, s->val, 1);
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port, 20.0, root, token, NULL);
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (st == HOOP_OK) {
        hoop_comm_destroy(comm);
        return harness_failf(rank, "hoop_comm_init succeeded");
    }
    if (st != s->want)
        return harness_failf(rank, "gave %s, not %s: %s", hoop_status_str(st),
                             hoop_status_str(s->want), hoop_last_error());
    if (!strstr(hoop_last_error(), s->says) || !strstr(hoop_last_error(), "verbs transport"))
        return harness_failf(rank, "the sentence lacks \"%s\": %s", s->says, hoop_last_error());
    return 0;
}

static void refused(struct verbs_refusal s)
{
    char report[8192];
    bool ok = harness_run_raw(2, refused_rank, &s, 60.0, report, sizeof(report));
    cr_assert(ok, "%s", report);
}

/* Without a device (this machine, or one named that is not there) the
 * transport is refused, saying what it found. */
Test(verbs, no_device_is_unsupported_and_says_what_there_is, .timeout = 90)
{
    if (verbs_device_here())
        refused((struct verbs_refusal){"HOOP_IB_DEVICE", "no-such-device", HOOP_ERR_UNSUPPORTED,
                                       "no ACTIVE port on device no-such-device"});
    else
        refused((struct verbs_refusal){NULL, NULL, HOOP_ERR_UNSUPPORTED, "no "});
}

Test(verbs, a_gid_index_past_the_table_is_invalid, .timeout = 90)
{
    need_device();
    refused((struct verbs_refusal){"HOOP_IB_GID_INDEX", "100000", HOOP_ERR_INVALID,
                                   "HOOP_IB_GID_INDEX=100000"});
}

/* A fake rank's random header where its first chunk should be: every real
 * rank fails naming it (garbage.c). */
Test(verbs, garbage_instead_of_a_frame, .timeout = 150)
{
    need_device();
    garbage_instead_of_a_frame(&hoop_transport_verbs, "verbs");
}

/* ---- registrations of send buffers ----------------------------------------- */

static struct verbs_tp *verbs_tp_of(hoop_comm_t *comm)
{
    return (struct verbs_tp *)hoop_mixed_net(((struct hoop_comm *)comm)->ring.tp);
}

static unsigned long verbs_regs(hoop_comm_t *comm)
{
    return verbs_tp_of(comm)->mr.regs;
}

/* Payloads go from the caller's memory, registered once per call where
 * the device pins pages (Soft-RoCE does) and nothing is kept between
 * calls, or once for good where it pages on demand; memory freed and
 * mapped anew at the same address gives exact results either way (a
 * registration kept from before would send the old pages). */
static int verbs_mr_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    struct verbs_tp *tp = verbs_tp_of(comm);
    struct remap_counts n;
    int rc = remap_run(comm, rank, size, verbs_regs, &n);
    fprintf(stderr, "rank %d: %s pages; registrations: %lu after the first call, %lu after 10 "
                    "more, %lu after the remapping, %lu after growing; %d kept now\n",
            rank, tp->odp ? "on-demand" : "pinned", n.first, n.reused, n.remapped, n.grown,
            tp->mr.n);
    if (rc)
        return rc;
    if (n.first == 0)
        return harness_failf(rank, "no payload was sent from the caller's memory");
    if (tp->odp && n.reused != n.first)
        return harness_failf(rank, "on-demand paging, yet 10 more calls on the same buffer "
                                   "made %lu registrations", n.reused - n.first);
    if (!tp->odp && n.reused - n.first > 10)
        return harness_failf(rank, "10 more calls on the same buffer made %lu registrations: "
                                   "more than one a call", n.reused - n.first);
    if (!tp->odp && tp->mr.n != 0)
        return harness_failf(rank, "%d registrations of pinned pages kept between calls",
                             tp->mr.n);
    return 0;
}

Test(verbs, registrations_are_right_after_free_and_remapping, .timeout = 300)
{
    need_device();
    setenv("HOOP_TRANSPORT", "verbs", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = 1 << 20;
    char report[8192];
    bool ok = harness_run(3, &base, verbs_mr_rank, NULL, 240, report, sizeof(report));
    unsetenv("HOOP_TRANSPORT");
    cr_assert(ok, "3 ranks over verbs:\n%s", report);
}

/* ---- ring_bench ------------------------------------------------------------- */

/* The benchmark over verbs, as a user runs it: 4 ranks, sizes up to 16 MiB,
 * every result checked (#wrong 0), its header naming the verbs device. */
Test(verbs, ring_bench_over_verbs_has_nothing_wrong, .timeout = 300)
{
    need_device();
    const char *const argv[] = {harness_built("hooprun"), "-np", "4", "--no-tag",
                                harness_built("ring_bench"), "-T", "verbs", "-b", "8", "-e",
                                "16M", "-f", "8", "-n", "2", "-w", "1", NULL};
    const struct proc_capture_opts o = {.limit_s = 240, .own_group = true};
    struct proc_capture r;
    cr_assert(proc_capture(&r, &o, 126, argv), "cannot run hooprun: %s", strerror(errno));
    cr_assert_eq(r.status, 0, "ring_bench over verbs exited with %d\nstdout:\n%s\nstderr:\n%s",
                 r.status, r.out.p, r.err.p);
    cr_assert(strstr(r.out.p, "transport verbs/"), "the header does not name verbs:\n%s", r.out.p);
    cr_assert(strstr(r.out.p, "# Out of bounds values : 0 OK"), "wrong results:\n%s", r.out.p);
    cr_assert(strstr(r.out.p, "16777216"), "the 16 MiB line is missing:\n%s", r.out.p);
    fprintf(stderr, "verbs/ring_bench_over_verbs_has_nothing_wrong:\n%s", r.out.p);
    proc_capture_free(&r);
}

/* Device buffers (emulated here) go through the pipeline's host chunks:
 * each send names the chunks' whole region, so a call registers them once
 * (or, where pages are pinned per call, once a call), not once a chunk. */
#define DEV_ELEMS (1u << 20) /* 4 MiB of f32: 64 chunks of 64 KiB */

static int verbs_device_regs_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    float *buf = malloc((size_t)DEV_ELEMS * 4);
    if (!buf)
        return harness_failf(rank, "out of memory");
    for (size_t i = 0; i < DEV_ELEMS; i++)
        buf[i] = (float)(i % 1024);
    hoop_gpu_emulate_force(1);
    unsigned long before = 0;
    hoop_status_t st = HOOP_OK;
    for (int call = 0; call < 11 && !st; call++) {
        if (call == 1)
            before = verbs_regs(comm);
        st = hoop_allreduce(comm, buf, buf, DEV_ELEMS, HOOP_F32, HOOP_MAX);
    }
    hoop_gpu_emulate_force(-1);
    unsigned long made = verbs_regs(comm) - before;
    int bad = 0;
    for (size_t i = 0; i < DEV_ELEMS && !bad; i++)
        bad = buf[i] != (float)(i % 1024);
    free(buf);
    if (st)
        return harness_fail(rank, "an allreduce of emulated device buffers", st);
    if (bad)
        return harness_failf(rank, "the allreduce of emulated device buffers gave wrong values");
    fprintf(stderr, "rank %d: 10 calls of %u chunks each made %lu registrations\n", rank,
            DEV_ELEMS * 4 / (64u << 10) * 2 * (size - 1) / size, made);
    if (made > 20)
        return harness_failf(rank, "10 allreduces of emulated device buffers made %lu "
                             "registrations: the sends do not name the host chunks' region",
                             made);
    return 0;
}

Test(verbs, device_buffers_register_their_host_chunks_once_a_call, .timeout = 300)
{
    need_device();
    setenv("HOOP_TRANSPORT", "verbs", 1);
    setenv("HOOP_GPU_DIRECT", "0", 1);
    hoop_config_t base;
    hoop_config_init(&base);
    base.chunk_bytes = 64 << 10;
    char report[8192];
    bool ok = harness_run(3, &base, verbs_device_regs_rank, NULL, 240, report, sizeof(report));
    unsetenv("HOOP_TRANSPORT");
    unsetenv("HOOP_GPU_DIRECT");
    cr_assert(ok, "3 ranks over verbs:\n%s", report);
}
