/* test_mem.c - hoop_mem_alloc: memory every rank of the host maps, and the
 * allreduce that reads and writes it in place: exact for every dtype and
 * op, in place and not, at sizes that cut segments and blocks unevenly;
 * the ring where one rank's buffers are elsewhere or shared memory is
 * off; a disagreement, a rank killed, one late past the deadline, one that
 * lies in its control page, and bad arguments fail every rank with a
 * sentence. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "collectives/comm.h"
#include "collectives/mem.h"
#include "harness.h"
#include "ring/frame.h"
#include "values.h"

static uint32_t mem_hash(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(x >> 32) ^ (uint32_t)x;
}

/* Above HOOP_SMALL_BYTES (64 KiB), so that the ring's path would be taken:
 * an odd count (segments that differ by one, blocks cut short). */
#define MEM_COUNT 100003u

static uint64_t mapped_calls(hoop_comm_t *comm)
{
    return comm->mem ? comm->mem->mapped : 0;
}

/* Two allocations of bytes each (every rank calls it): 0 or a harness_fail. */
static int shared_pair(hoop_comm_t *comm, int rank, size_t bytes, void **send, void **recv)
{
    hoop_status_t st;
    if ((st = hoop_mem_alloc(comm, bytes, send)) || (st = hoop_mem_alloc(comm, bytes, recv)))
        return harness_fail(rank, "hoop_mem_alloc", st);
    return 0;
}

/* One allreduce of count elements, in place or not, checked exactly
 * (every element, against values_put_expected); 0 or a harness_failf. */
static int one_call(hoop_comm_t *comm, int rank, int size, uint8_t *send, uint8_t *recv,
                    uint8_t *want, size_t count, hoop_dtype_t dt, hoop_op_t op, int in_place)
{
    size_t es = hoop_dtype_size(dt);
    values_put_input(send, 0, count, mem_hash, dt, op, size, rank);
    values_put_expected(want, 0, count, mem_hash, dt, op, size);
    uint8_t *out = in_place ? send : recv;
    if (!in_place)
        memset(recv, 0xa5, count * es);
    hoop_status_t st = hoop_allreduce(comm, send, out, count, dt, op);
    if (st)
        return harness_fail(rank, "allreduce", st);
    for (size_t i = 0; i < count; i++)
        if (memcmp(out + i * es, want + i * es, es))
            return harness_failf(rank, "%s %s %s, %zu elements: element %zu is wrong",
                                 hoop_dtype_str(dt), hoop_op_str(op),
                                 in_place ? "in place" : "out of place", count, i);
    return 0;
}

/* one_call of an f32 sum of MEM_COUNT elements out of place, with its own
 * buffer for the expected result: 0 or a harness_failf. */
static int sum_call(hoop_comm_t *comm, int rank, int size, void *send, void *recv)
{
    uint8_t *want = malloc(MEM_COUNT * 4);
    if (!want)
        return harness_failf(rank, "out of memory");
    int rc = one_call(comm, rank, size, send, recv, want, MEM_COUNT, HOOP_F32, HOOP_SUM, 0);
    free(want);
    return rc;
}

static int every_dtype_and_op(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    static const hoop_dtype_t dts[] = {HOOP_F32, HOOP_F64,  HOOP_I32, HOOP_U8,
                                       HOOP_F16, HOOP_BF16, HOOP_I64};
    static const hoop_op_t ops[] = {HOOP_SUM, HOOP_PROD, HOOP_MIN, HOOP_MAX, HOOP_AVG};
    const size_t counts[] = {MEM_COUNT, 3, (size_t)size * 4096 + 1};
    size_t bytes = MEM_COUNT * 8;
    void *send = NULL, *recv = NULL;
    if (shared_pair(comm, rank, bytes, &send, &recv))
        return 1;
    hoop_status_t st;
    uint8_t *want = malloc(bytes);
    if (!want)
        return harness_failf(rank, "out of memory");
    uint64_t before = mapped_calls(comm);
    int expect_mapped = 0;
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    size_t count = counts[k];
                    if (count * hoop_dtype_size(dts[d]) > bytes)
                        continue;
                    if (one_call(comm, rank, size, send, recv, want, count, dts[d], ops[o],
                                 in_place)) {
                        free(want);
                        return 1;
                    }
                    expect_mapped += size > 1 && count * hoop_dtype_size(dts[d]) > 65536;
                }
    free(want);
    /* Every call above the small-message threshold ran in place. */
    if (mapped_calls(comm) - before != (uint64_t)expect_mapped)
        return harness_failf(rank, "%llu calls ran in shared memory where %d should have",
                             (unsigned long long)(mapped_calls(comm) - before), expect_mapped);
    if ((st = hoop_mem_free(comm, send)) || (st = hoop_mem_free(comm, recv)))
        return harness_fail(rank, "hoop_mem_free", st);
    return 0;
}

/* The ranks of every test share memory unless it says otherwise, whatever
 * the pass's HOOP_SHM (the network passes turn it off). */
static void shm(const char *value)
{
    cr_assert(setenv("HOOP_SHM", value, 1) == 0);
}

static void run_ranks(int n, harness_rank_fn fn, void *arg)
{
    char report[8192];
    hoop_config_t base;
    hoop_config_init(&base);
    base.bootstrap_timeout_s = 30;
    base.timeout_s = 60;
    bool ok = harness_run(n, &base, fn, arg, 110.0, report, sizeof report);
    cr_assert(ok, "%s", report);
}

Test(mem, every_dtype_and_op_exact_ranks_1_to_4, .timeout = 240)
{
    shm("auto");
    for (int n = 1; n <= 4; n++)
        run_ranks(n, every_dtype_and_op, NULL);
}

/* One rank's buffers in its own heap (arg: that rank): every rank runs the
 * ring instead, exactly, and no call runs in shared memory. */
static int one_rank_elsewhere(hoop_comm_t *comm, int rank, int size, void *arg)
{
    int odd = *(const int *)arg;
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL, *recv = NULL;
    if (shared_pair(comm, rank, bytes, &send, &recv))
        return 1;
    uint8_t *mine = malloc(2 * bytes), *want = malloc(bytes);
    if (!mine || !want)
        return harness_failf(rank, "out of memory");
    uint8_t *s = rank == odd ? mine : send, *r = rank == odd ? mine + bytes : recv;
    int rc = one_call(comm, rank, size, s, r, want, MEM_COUNT, HOOP_F32, HOOP_SUM, 0) ||
             one_call(comm, rank, size, s, r, want, MEM_COUNT, HOOP_I32, HOOP_MAX, 1);
    free(mine);
    free(want);
    if (rc)
        return 1;
    if (mapped_calls(comm))
        return harness_failf(rank,
                             "%llu calls ran in shared memory with rank %d's buffers "
                             "outside it",
                             (unsigned long long)mapped_calls(comm), odd);
    /* And in place again, once every rank's buffers are shared. */
    if (sum_call(comm, rank, size, send, recv))
        return 1;
    if (mapped_calls(comm) != 1)
        return harness_failf(rank, "the call on shared buffers did not run in place");
    return 0;
}

Test(mem, a_rank_outside_shared_memory_sends_all_to_the_ring_n3, .timeout = 120)
{
    int odd = 1;
    shm("auto");
    run_ranks(3, one_rank_elsewhere, &odd);
}

/* HOOP_SHM=0: the memory is each rank's own, and the ring (over TCP)
 * reduces it exactly. */
static int shm_off(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL, *recv = NULL;
    if (shared_pair(comm, rank, bytes, &send, &recv))
        return 1;
    if (sum_call(comm, rank, size, send, recv))
        return 1;
    if (mapped_calls(comm) || hoop_mem_ctl_region(comm))
        return harness_failf(rank, "memory was shared with HOOP_SHM=0");
    return 0;
}

Test(mem, shared_memory_off_keeps_each_rank_its_own_n2, .timeout = 120)
{
    shm("0");
    run_ranks(2, shm_off, NULL);
}

/* Rank 2 gives one more element: every rank fails with HOOP_ERR_MISMATCH,
 * saying the counts. */
static int count_mismatch(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    size_t bytes = (MEM_COUNT + 1) * 4;
    void *send = NULL, *recv = NULL;
    if (shared_pair(comm, rank, bytes, &send, &recv))
        return 1;
    memset(send, 0, bytes);
    hoop_status_t st =
        hoop_allreduce(comm, send, recv, MEM_COUNT + (rank == 2), HOOP_F32, HOOP_SUM);
    if (st != HOOP_ERR_MISMATCH)
        return harness_failf(rank, "returned %s, not HOOP_ERR_MISMATCH: %s", hoop_status_str(st),
                             hoop_last_error());
    if (!strstr(hoop_last_error(), "100003") && !strstr(hoop_last_error(), "100004"))
        return harness_failf(rank, "the sentence does not give the counts: %s", hoop_last_error());
    return 0;
}

Test(mem, a_count_mismatch_fails_every_rank_n3, .timeout = 120)
{
    shm("auto");
    run_ranks(3, count_mismatch, NULL);
}

/* A rank killed on its way into the call: every other rank fails within
 * seconds (not at the 30 s deadline), naming it. */
static int dying_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    const int victim = *(const int *)arg;
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL;
    hoop_status_t st = hoop_mem_alloc(comm, bytes, &send);
    if (st)
        return harness_fail(rank, "hoop_mem_alloc", st);
    memset(send, 0, bytes);
    if (rank == victim)
        raise(SIGKILL);
    double t0 = harness_now();
    st = hoop_allreduce(comm, send, send, MEM_COUNT, HOOP_F32, HOOP_SUM);
    if (st == HOOP_OK)
        return harness_failf(rank, "the allreduce returned HOOP_OK with rank %d dead", victim);
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    if (!strstr(hoop_last_error(), want))
        return harness_failf(rank, "the sentence does not name %s: %s", want, hoop_last_error());
    if (harness_since(t0) > 10.0)
        return harness_failf(rank, "told after %.1f s", harness_since(t0));
    return 0;
}

/* The entries of /dev/shm (-1 where there is none to read). */
static int dev_shm_entries(void)
{
    DIR *d = opendir("/dev/shm");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ... and nothing is left on a file system after it (the memory is
 * anonymous memfds, the listeners abstract sockets). */
Test(mem, a_rank_killed_fails_every_other_rank_n3, .timeout = 120)
{
    shm("auto");
    int shm_before = dev_shm_entries();
    for (int victim = 0; victim < 3; victim += 2) { /* the root, then another */
        hoop_config_t base;
        hoop_config_init(&base);
        base.timeout_s = 30;
        char report[8192];
        cr_assert(
            harness_run_victim(3, &base, dying_rank, &victim, victim, 60.0, report, sizeof report),
            "%s", report);
    }
    cr_assert_eq(dev_shm_entries(), shm_before, "/dev/shm had %d entries, now %d", shm_before,
                 dev_shm_entries());
}

/* Bad arguments: refused with HOOP_ERR_INVALID, on every rank alike, and
 * the memory still works afterwards. */
static int bad_arguments(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    void *p = NULL, *q = NULL;
    hoop_status_t st;
    if (hoop_mem_alloc(comm, 0, &p) != HOOP_ERR_INVALID || p)
        return harness_failf(rank, "0 bytes were not refused");
    if (hoop_mem_alloc(comm, 64, NULL) != HOOP_ERR_INVALID)
        return harness_failf(rank, "a NULL output was not refused");
    if (hoop_mem_alloc(NULL, 64, &p) != HOOP_ERR_INVALID)
        return harness_failf(rank, "a NULL communicator was not refused");
    if ((st = hoop_mem_alloc(comm, 1 << 20, &p)) || (st = hoop_mem_alloc(comm, 1 << 20, &q)))
        return harness_fail(rank, "hoop_mem_alloc", st);
    if (((uintptr_t)p & 4095) || ((uintptr_t)q & 4095))
        return harness_failf(rank, "the memory is not page-aligned");
    int heap;
    /* A pointer of no allocation (on one rank, then on all). */
    st = hoop_mem_free(comm, rank == size - 1 ? (void *)&heap : p);
    if (size > 1 && st != HOOP_ERR_INVALID)
        return harness_failf(rank, "ranks freeing different memory: %s", hoop_status_str(st));
    if (size > 1 && !strstr(hoop_last_error(), "different allocations"))
        return harness_failf(rank, "the sentence: %s", hoop_last_error());
    /* Different allocations on different ranks. */
    if (size > 1 && hoop_mem_free(comm, rank ? p : q) != HOOP_ERR_INVALID)
        return harness_failf(rank, "ranks freeing different allocations were not refused");
    /* Nothing was freed: the memory still reduces in place. */
    float *f = p, *g = q;
    for (int i = 0; i < (1 << 18); i++)
        f[i] = (float)(rank + i % 7);
    if ((st = hoop_allreduce(comm, f, g, 1 << 18, HOOP_F32, HOOP_SUM)))
        return harness_fail(rank, "allreduce after the refusals", st);
    for (int i = 0; i < (1 << 18); i++)
        if (g[i] != (float)(size * (size - 1) / 2 + size * (i % 7)))
            return harness_failf(rank, "element %d: %g", i, (double)g[i]);
    if (size > 1 && mapped_calls(comm) != 1)
        return harness_failf(rank, "the allreduce did not run in place");
    if ((st = hoop_mem_free(comm, p)) || (st = hoop_mem_free(comm, q)))
        return harness_fail(rank, "hoop_mem_free", st);
    if (hoop_mem_free(comm, p) != HOOP_ERR_INVALID)
        return harness_failf(rank, "a second free was not refused");
    return 0;
}

Test(mem, bad_arguments_are_refused_ranks_1_and_3, .timeout = 120)
{
    shm("auto");
    run_ranks(1, bad_arguments, NULL);
    run_ranks(3, bad_arguments, NULL);
}

/* A rank that lies in its control page (arg: what it says): it announces
 * the next call with a buffer outside its memory, or in an allocation it
 * never made, and never calls. Every other rank fails at once with
 * HOOP_ERR_PEER naming it, and touches nothing outside what was shared. */
struct liar {
    int rank;
    int unknown_id; /* 1: an allocation number it never made; 0: an offset past its end */
};

static int lying_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    const struct liar *l = arg;
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL;
    hoop_status_t st = hoop_mem_alloc(comm, bytes, &send);
    if (st)
        return harness_fail(rank, "hoop_mem_alloc", st);
    memset(send, 0, bytes);
    if (rank == l->rank) {
        struct hoop_mem_region *g = hoop_mem_ctl_region(comm);
        if (!g)
            return harness_failf(rank, "the memory is not shared");
        /* The call's announcements on the ring, as an honest rank's. */
        struct hoop_ring *r = &comm->ring;
        uint64_t dl = 0;
        hoop_frame_begin(r, HOOP_COLL_ALLREDUCE, MEM_COUNT, HOOP_F32, HOOP_SUM, -1);
        int rc = hoop_frame_announce(r, 1, 1);
        if (rc || (rc = hoop_frame_announce_wait(r, &dl, 10.0)))
            return harness_failf(rank, "the ring's announcements: %s", strerror(-rc));
        struct hoop_mem_ctl *ctl = (struct hoop_mem_ctl *)g->base;
        ctl->count = MEM_COUNT;
        ctl->dtype = HOOP_F32;
        ctl->op = HOOP_SUM;
        ctl->mapped = 1;
        ctl->send_id = ctl->recv_id = l->unknown_id ? 77 : g->id;
        ctl->send_off = ctl->recv_off = l->unknown_id ? 0 : bytes - 4;
        atomic_store(&ctl->ready, comm->mem->seq + 1);
        harness_sleep_ms(3000);
        return 0;
    }
    double t0 = harness_now();
    st = hoop_allreduce(comm, send, send, MEM_COUNT, HOOP_F32, HOOP_SUM);
    char want[64];
    snprintf(want, sizeof want, "rank %d announced a buffer outside", l->rank);
    if (st != HOOP_ERR_PEER || !strstr(hoop_last_error(), want))
        return harness_failf(rank, "returned %s: %s", hoop_status_str(st), hoop_last_error());
    if (harness_since(t0) > 10.0)
        return harness_failf(rank, "told after %.1f s", harness_since(t0));
    return 0;
}

Test(mem, a_rank_that_lies_in_its_control_page_fails_the_others_n3, .timeout = 120)
{
    shm("auto");
    for (int unknown = 0; unknown < 2; unknown++) {
        struct liar l = {.rank = 1, .unknown_id = unknown};
        run_ranks(3, lying_rank, &l);
    }
}

/* A rank that does not come (it sleeps past the others' 2 s deadline):
 * every other rank fails with a sentence naming it, after about the
 * deadline, not before and not much later. */
static int slow_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL;
    hoop_status_t st = hoop_mem_alloc(comm, bytes, &send);
    if (st)
        return harness_fail(rank, "hoop_mem_alloc", st);
    memset(send, 0, bytes);
    if (rank == 2) {
        harness_sleep_ms(6000);
        return 0;
    }
    double t0 = harness_now();
    st = hoop_allreduce(comm, send, send, MEM_COUNT, HOOP_F32, HOOP_SUM);
    double took = harness_since(t0);
    if (st == HOOP_OK || !strstr(hoop_last_error(), "rank 2"))
        return harness_failf(rank, "returned %s: %s", hoop_status_str(st), hoop_last_error());
    if (took < 1.5 || took > 15.0)
        return harness_failf(rank, "told after %.1f s with a 2 s deadline", took);
    return 0;
}

Test(mem, a_rank_that_does_not_come_fails_the_others_at_the_deadline_n3, .timeout = 120)
{
    shm("auto");
    char report[8192];
    hoop_config_t base;
    hoop_config_init(&base);
    base.bootstrap_timeout_s = 30;
    base.timeout_s = 2;
    cr_assert(harness_run(3, &base, slow_rank, NULL, 60.0, report, sizeof report), "%s", report);
}

/* A rank that cannot make a memfd (its descriptor limit reached, as a
 * seccomp profile or a limit would refuse it): hoop_mem_alloc still gives
 * every rank memory, none shares it, and the allreduce goes through the
 * ring, exactly. */
static int no_memfd(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)arg;
    struct rlimit before;
    if (getrlimit(RLIMIT_NOFILE, &before))
        return harness_failf(rank, "getrlimit: %s", strerror(errno));
    int rc = rank == 1 ? harness_leave_descriptors(0) : 0;
    if (rc)
        return harness_failf(rank, "cannot lower RLIMIT_NOFILE: %s", strerror(-rc));
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL, *recv = NULL;
    if (shared_pair(comm, rank, bytes, &send, &recv))
        return 1;
    if (rank == 1 && setrlimit(RLIMIT_NOFILE, &before))
        return harness_failf(rank, "setrlimit: %s", strerror(errno));
    if (hoop_mem_ctl_region(comm))
        return harness_failf(rank, "the memory was shared though rank 1 made no memfd");
    if (sum_call(comm, rank, size, send, recv))
        return 1;
    if (mapped_calls(comm))
        return harness_failf(rank, "a call ran in shared memory that is not shared");
    return 0;
}

Test(mem, a_rank_without_memfd_keeps_every_rank_its_own_n2, .timeout = 120)
{
    shm("auto");
    run_ranks(2, no_memfd, NULL);
}

/* Rank 1's count puts its call at or below HOOP_SMALL_BYTES, where the
 * others' go in place: every rank fails at once with HOOP_ERR_MISMATCH
 * (the ring's announcements meet the small path's messages), not at the
 * 30 s deadline. */
static int small_against_mapped(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    size_t bytes = MEM_COUNT * 4;
    void *send = NULL, *recv = NULL;
    if (shared_pair(comm, rank, bytes, &send, &recv))
        return 1;
    memset(send, 0, bytes);
    double t0 = harness_now();
    hoop_status_t st =
        hoop_allreduce(comm, send, recv, rank == 1 ? 1000 : MEM_COUNT, HOOP_F32, HOOP_SUM);
    if (st != HOOP_ERR_MISMATCH)
        return harness_failf(rank, "returned %s, not HOOP_ERR_MISMATCH: %s", hoop_status_str(st),
                             hoop_last_error());
    if (harness_since(t0) > 10.0)
        return harness_failf(rank, "told after %.1f s", harness_since(t0));
    return 0;
}

Test(mem, a_count_at_or_below_the_small_threshold_is_a_mismatch_n3, .timeout = 120)
{
    shm("auto");
    run_ranks(3, small_against_mapped, NULL);
}
