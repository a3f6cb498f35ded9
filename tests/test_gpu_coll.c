/* test_gpu_coll.c - every collective on device buffers, each dtype and op,
 * in place and out, at N = 1..4 ranks sharing GPU 0: the result must be
 * the bits the same call gives on host buffers (the host path runs first,
 * in the same rank, on the same inputs). Floats are random and inexact,
 * so only the same order of reduction gives the same bits.
 *
 * Where a GPU is usable (asked in a child process, so that this process
 * never starts CUDA before it forks the ranks) the device buffers are
 * cudaMalloc'd. Elsewhere the same tests run on the emulated pipeline
 * (gpu.h: HOOP_GPU_EMULATE), saying so; HOOP_TEST_REQUIRE_GPU=1 turns
 * that into a failure. */
#include <criterion/criterion.h>

#include "collectives/comm.h"
#include "gpu/gpu.h"
#include "harness.h"
#include "hoop.h"
#include "hoop_engine.h"
#include "values.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HOOP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

enum coll { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_ALLGATHERV, C_BROADCAST, C_REDUCE,
            C_ALLTOALL, C_REDUCE_SCATTERV, C_ALLTOALLV };
static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather",
                                         "allgatherv", "broadcast", "reduce", "alltoall",
                                         "reduce_scatterv", "alltoallv"};

/* 1 when a GPU can be used; asked in a child, the answer's reason in why. */
static int gpu_usable(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        const char *w = NULL;
        int ok = hoop_gpu_available(&w);
        if (!ok && w && write(fds[1], w, strlen(w)) < 0)
            _exit(3);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    ssize_t n = pid > 0 ? read(fds[0], why, len - 1) : -1;
    why[n > 0 ? n : 0] = 0;
    close(fds[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* 1: a real GPU; 0: the emulation (or the test fails where a GPU is
 * required). */
static int gpu_mode(void)
{
    char why[256];
    if (gpu_usable(why, sizeof(why)))
        return 1;
    const char *req = getenv("HOOP_TEST_REQUIRE_GPU");
    if (req && strcmp(req, "1") == 0)
        cr_assert_fail("HOOP_TEST_REQUIRE_GPU=1 but no GPU can be used: %s", why);
    fprintf(stderr, "note: no GPU can be used here (%s): the device buffers are emulated in "
            "host memory (HOOP_GPU_EMULATE)\n", why);
    return 0;
}

/* Device memory: cudaMalloc'd on a real GPU, else plain memory that the
 * emulation takes for the device's. */
static void *dev_alloc(int real, size_t n)
{
    if (!n)
        n = 1;
#ifdef HOOP_HAVE_CUDA
    if (real) {
        void *p = NULL;
        return cudaMalloc(&p, n) == cudaSuccess ? p : NULL;
    }
#endif
    return malloc(n);
}

static void dev_free(int real, void *p)
{
#ifdef HOOP_HAVE_CUDA
    if (real) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

static int dev_put(int real, void *d, const void *h, size_t n)
{
#ifdef HOOP_HAVE_CUDA
    /* cudaMemcpy from pageable memory may return before the copy has
     * landed: the device is synchronized, as hoop.h asks of the caller. */
    if (real)
        return cudaMemcpy(d, h, n, cudaMemcpyHostToDevice) == cudaSuccess &&
                       cudaDeviceSynchronize() == cudaSuccess
                   ? 0
                   : -1;
#endif
    memcpy(d, h, n);
    return 0;
}

static int dev_get(int real, void *h, const void *d, size_t n)
{
#ifdef HOOP_HAVE_CUDA
    if (real)
        return cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
#endif
    memcpy(h, d, n);
    return 0;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random elements: integers any bits; floats in [-1000, 1000] with random
 * low bits (inexact sums; no NaN, whose payload the CPU and GPU choose
 * differently). */
static void fill(void *buf, size_t n, hoop_dtype_t dt, uint64_t seed)
{
    uint64_t s = seed | 1;
    uint8_t *p = buf;
    size_t es = hoop_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = rnd(&s);
        double f = ((double)(v >> 11) / (double)(1ull << 53)) * 2000.0 - 1000.0;
        switch (dt) {
        case HOOP_F32: {
            float x = (float)f;
            memcpy(p + i * es, &x, 4);
            break;
        }
        case HOOP_F64:
            memcpy(p + i * es, &f, 8);
            break;
        case HOOP_F16:
        case HOOP_BF16: {
            float x = (float)f;
            uint32_t u;
            memcpy(&u, &x, 4);
            uint16_t h;
            if (dt == HOOP_BF16) {
                h = (uint16_t)(u >> 16); /* truncation is fine for an input */
            } else {
                /* A value of f16's range: sign, exponent 10..24, mantissa. */
                h = (uint16_t)(((v >> 20) & 0x8000) | ((10 + (v % 15)) << 10) | ((v >> 32) & 0x3ff));
            }
            memcpy(p + i * es, &h, 2);
            break;
        }
        default:
            memcpy(p + i * es, &v, es);
            break;
        }
    }
}

struct layout {
    size_t region;   /* elements of the one buffer the case uses */
    size_t send_off; /* element offsets of sendbuf and recvbuf in it */
    size_t recv_off;
    size_t counts[HARNESS_MAX_PROCS]; /* allgatherv, reduce_scatterv; alltoallv's sends */
    size_t displs[HARNESS_MAX_PROCS];
    size_t rcounts[HARNESS_MAX_PROCS]; /* alltoallv's receives */
    size_t rdispls[HARNESS_MAX_PROCS];
};

/* alltoallv: what rank s sends rank d, uneven and known to both. */
static size_t a2av_count(size_t c, int s, int d)
{
    return c + (size_t)((s + 2 * d) % 3);
}

/* Where sendbuf and recvbuf lie for coll with count c at N ranks; 0 when
 * the collective has no such (in-place) form. */
static int lay_out(struct layout *l, int coll, int in_place, size_t c, int n, int rank)
{
    memset(l, 0, sizeof(*l));
    size_t N = (size_t)n, r = (size_t)rank;
    switch (coll) {
    case C_ALLREDUCE:
    case C_BROADCAST:
    case C_REDUCE:
        l->region = in_place ? c : 2 * c;
        l->recv_off = in_place ? 0 : c;
        return 1;
    case C_REDUCE_SCATTER:
        l->region = in_place ? N * c : N * c + c;
        l->recv_off = in_place ? r * c : N * c;
        return 1;
    case C_ALLGATHER:
        l->region = in_place ? N * c : c + N * c;
        l->send_off = in_place ? r * c : 0;
        l->recv_off = in_place ? 0 : c;
        return 1;
    case C_ALLGATHERV: {
        size_t total = 0;
        for (int k = 0; k < n; k++) {
            l->counts[k] = c + (size_t)k; /* uneven blocks */
            l->displs[k] = total;
            total += l->counts[k];
        }
        l->region = in_place ? total : l->counts[rank] + total;
        l->send_off = in_place ? l->displs[rank] : 0;
        l->recv_off = in_place ? 0 : l->counts[rank];
        return 1;
    }
    case C_ALLTOALL:
        if (in_place)
            return 0;
        l->region = 2 * N * c;
        l->recv_off = N * c;
        return 1;
    case C_REDUCE_SCATTERV: {
        size_t total = 0, mine_off = 0;
        for (int k = 0; k < n; k++) {
            l->counts[k] = c + (size_t)k;
            if (k == rank)
                mine_off = total;
            total += l->counts[k];
        }
        l->region = in_place ? total : total + l->counts[rank];
        l->recv_off = in_place ? mine_off : total;
        return 1;
    }
    case C_ALLTOALLV: {
        if (in_place)
            return 0;
        size_t so = 0, ro = 0;
        for (int k = 0; k < n; k++) {
            l->counts[k] = a2av_count(c, rank, k);
            l->displs[k] = so;
            so += l->counts[k];
            l->rcounts[k] = a2av_count(c, k, rank);
            l->rdispls[k] = ro + 1; /* a gap of one element before each block */
            ro += l->rcounts[k] + 1;
        }
        l->region = so + ro;
        l->recv_off = so;
        return 1;
    }
    }
    return 0;
}

static hoop_status_t run_coll(hoop_comm_t *comm, int coll, const struct layout *l, char *base,
                              size_t c, hoop_dtype_t dt, hoop_op_t op, size_t es)
{
    int n = hoop_comm_size(comm);
    void *s = base + l->send_off * es, *r = base + l->recv_off * es;
    switch (coll) {
    case C_ALLREDUCE: return hoop_allreduce(comm, s, r, c, dt, op);
    case C_REDUCE_SCATTER: return hoop_reduce_scatter(comm, s, r, c, dt, op);
    case C_ALLGATHER: return hoop_allgather(comm, s, r, c, dt);
    case C_ALLGATHERV: return hoop_allgatherv(comm, s, r, l->counts, l->displs, dt);
    case C_BROADCAST: return hoop_broadcast(comm, s, r, c, dt, n - 1);
    case C_REDUCE: return hoop_reduce(comm, s, r, c, dt, op, n / 2);
    case C_ALLTOALL: return hoop_alltoall(comm, s, r, c, dt);
    case C_REDUCE_SCATTERV: return hoop_reduce_scatterv(comm, s, r, l->counts, dt, op);
    case C_ALLTOALLV:
        return hoop_alltoallv(comm, s, l->counts, l->displs, r, l->rcounts, l->rdispls, dt);
    }
    return HOOP_ERR_INVALID;
}

struct coll_arg {
    int coll;
    int real; /* a real GPU, else the emulation */
    int late_rank; /* with late_ms: this rank starts each device call late */
    int late_ms;
};

static const size_t counts_tried[] = {1, 777, 40000};

/* One case: the host path, then the device path on the same inputs; the
 * whole buffer must come out the same bits. 0 or a harness_failf. */
static int one_case(hoop_comm_t *comm, int rank, int size, const struct coll_arg *a,
                    hoop_dtype_t dt, hoop_op_t op, int in_place, size_t c)
{
    struct layout l;
    if (!lay_out(&l, a->coll, in_place, c, size, rank))
        return 0;
    size_t es = hoop_dtype_size(dt), bytes = l.region * es;
    char *host = malloc(bytes), *back = malloc(bytes), *init = malloc(bytes);
    void *dev = dev_alloc(a->real, bytes);
    int rc = 0;
    char what[160];
    snprintf(what, sizeof(what), "%s of %zu %s (%s), %s", coll_names[a->coll], c,
             hoop_dtype_str(dt), hoop_op_str(op), in_place ? "in place" : "out of place");
    if (!host || !back || !init || !dev) {
        rc = harness_failf(rank, "%s: out of memory for %zu bytes", what, bytes);
        goto out;
    }
    fill(init, l.region, dt,
         0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) + (uint64_t)dt * 131 + (uint64_t)op * 7 + c);
    memcpy(host, init, bytes);
    if (!a->real)
        hoop_gpu_emulate_force(0);
    hoop_status_t st = run_coll(comm, a->coll, &l, host, c, dt, op, es);
    if (st) {
        rc = harness_failf(rank, "%s on host buffers: %s", what, hoop_last_error());
        goto out;
    }
    if (dev_put(a->real, dev, init, bytes)) {
        rc = harness_failf(rank, "%s: copying the inputs to the device failed", what);
        goto out;
    }
    if (a->late_ms && rank == a->late_rank)
        harness_sleep_ms(a->late_ms);
    if (!a->real)
        hoop_gpu_emulate_force(1);
    if (hoop_gpu_mem_kind(dev).kind != HOOP_MEM_DEVICE) {
        rc = harness_failf(rank, "%s: the library takes the device buffer for %s memory", what,
                           hoop_gpu_mem_str(hoop_gpu_mem_kind(dev).kind));
        goto out;
    }
    st = run_coll(comm, a->coll, &l, dev, c, dt, op, es);
    if (!a->real)
        hoop_gpu_emulate_force(0);
    if (st) {
        rc = harness_failf(rank, "%s on device buffers: %s", what, hoop_last_error());
        goto out;
    }
    if (dev_get(a->real, back, dev, bytes)) {
        rc = harness_failf(rank, "%s: copying the results from the device failed", what);
        goto out;
    }
    for (size_t i = 0; i < l.region; i++)
        if (memcmp(back + i * es, host + i * es, es)) {
            char hv[40], dv[40];
            values_hex_elem(hv, sizeof(hv), host, i, es);
            values_hex_elem(dv, sizeof(dv), back, i, es);
            rc = harness_failf(rank, "%s: element %zu of the buffer is %s on the device, %s on "
                               "the host", what, i, dv, hv);
            goto out;
        }
out:
    free(host);
    free(back);
    free(init);
    if (dev)
        dev_free(a->real, dev);
    return rc;
}

static int coll_rank(hoop_comm_t *comm, int rank, int size, void *varg)
{
    const struct coll_arg *a = varg;
#ifdef HOOP_HAVE_CUDA
    if (a->real && cudaSetDevice(0) != cudaSuccess)
        return harness_failf(rank, "cudaSetDevice(0) failed");
#endif
    int reducing = a->coll == C_ALLREDUCE || a->coll == C_REDUCE_SCATTER ||
                   a->coll == C_REDUCE || a->coll == C_REDUCE_SCATTERV;
    for (int dt = 0; dt < HOOP_DTYPE_COUNT; dt++)
        for (int op = 0; op < (reducing ? HOOP_OP_COUNT : 1); op++)
            for (int in_place = 0; in_place < 2; in_place++)
                for (size_t k = 0; k < sizeof(counts_tried) / sizeof(counts_tried[0]); k++) {
                    int rc = one_case(comm, rank, size, a, (hoop_dtype_t)dt, (hoop_op_t)op,
                                      in_place, counts_tried[k]);
                    if (rc)
                        return rc;
                }
    return 0;
}

static void coll_test(int coll, int n)
{
    struct coll_arg a = {.coll = coll, .real = gpu_mode()};
    /* Chunks of 64 KiB, so that 40000 elements cross several of them. */
    hoop_config_t base = {.timeout_s = 60, .chunk_bytes = 64 << 10, .pipeline_depth = 4};
    char report[8192];
    bool ok = harness_run(n, &base, coll_rank, &a, 240, report, sizeof(report));
    cr_assert(ok, "%s at N = %d on %s device buffers:\n%s", coll_names[coll], n,
              a.real ? "GPU" : "emulated", report);
}

#define COLL_TESTS(name, coll)                                                                     \
    Test(gpucoll, name##_ranks_1, .timeout = 300) { coll_test(coll, 1); }                          \
    Test(gpucoll, name##_ranks_2, .timeout = 300) { coll_test(coll, 2); }                          \
    Test(gpucoll, name##_ranks_3, .timeout = 300) { coll_test(coll, 3); }                          \
    Test(gpucoll, name##_ranks_4, .timeout = 300) { coll_test(coll, 4); }

COLL_TESTS(allreduce, C_ALLREDUCE)
COLL_TESTS(reduce_scatter, C_REDUCE_SCATTER)
COLL_TESTS(allgather, C_ALLGATHER)
COLL_TESTS(allgatherv, C_ALLGATHERV)
COLL_TESTS(broadcast, C_BROADCAST)
COLL_TESTS(reduce, C_REDUCE)
COLL_TESTS(alltoall, C_ALLTOALL)
COLL_TESTS(reduce_scatterv, C_REDUCE_SCATTERV)
COLL_TESTS(alltoallv, C_ALLTOALLV)

/* ---- the pinned memory device buffers go through ---- */

#define STAGE_CHUNK (64u << 10)
#define STAGE_DEPTH 2
#define STAGE_CHUNKS 6          /* HOOP_GPU_STAGING_CHUNKS: its least, 3 x the depth */
#define STAGE_ELEMS (1u << 20) /* f32 per rank's block: 4 MiB, 64 chunks */

/* The pipelined collectives on device buffers far larger than the host
 * chunks they go through, with a late rank so that the chunks to be sent
 * on pile up: the results must be the host path's bits, the pinned memory
 * the communicator holds afterwards a fixed amount, not the size of the
 * calls, and some chunk must have been copied from the GPU again (its
 * host copy given up or never made), or the test did not test that. */
static int stage_rank(hoop_comm_t *comm, int rank, int size, void *varg)
{
    const struct coll_arg *base = varg;
#ifdef HOOP_HAVE_CUDA
    if (base->real && cudaSetDevice(0) != cudaSuccess)
        return harness_failf(rank, "cudaSetDevice(0) failed");
#endif
    static const int colls[] = {C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE};
    for (size_t i = 0; i < sizeof(colls) / sizeof(colls[0]); i++) {
        struct coll_arg a = *base;
        a.coll = colls[i];
        for (int in_place = 0; in_place < 2; in_place++) {
            int rc = one_case(comm, rank, size, &a, HOOP_F32, HOOP_SUM, in_place, STAGE_ELEMS);
            if (rc)
                return rc;
        }
    }
    struct hoop_ring *r = &comm->ring;
    if (!r->gpu)
        return harness_failf(rank, "no device call made the GPU pipeline");
    /* The receive slots, the host chunks (grown to a power of two of at
     * least 1 MiB) and the small path's two buffers of at most a chunk
     * (1 MiB each, the least they grow to): 4.1 MiB, where the calls'
     * buffers were 16 MiB and more. */
    size_t pinned = hoop_gpu_pipe_pinned(r->gpu);
    size_t bound = (size_t)STAGE_DEPTH * STAGE_CHUNK + 3 * (1u << 20);
    if (pinned > bound)
        return harness_failf(rank, "the communicator holds %zu bytes of pinned memory after "
                             "calls of up to %zu bytes, more than its %zu", pinned,
                             (size_t)size * STAGE_ELEMS * 4, bound);
    uint64_t mine = r->gpu_restaged, all = 0;
    hoop_status_t st = hoop_allreduce(comm, &mine, &all, 1, HOOP_U64, HOOP_SUM);
    if (st)
        return harness_fail(rank, "adding up the chunks copied again", st);
    if (!all)
        return harness_failf(rank, "no rank copied a chunk from the GPU again: the host chunks "
                             "were never short, so the test did not test that path");
    fprintf(stderr, "rank %d: %zu bytes pinned, %llu chunks copied from the GPU again (all "
            "ranks: %llu)\n", rank, pinned, (unsigned long long)mine, (unsigned long long)all);
    return 0;
}

static void stage_test(int n)
{
    struct coll_arg a = {.real = gpu_mode(), .late_rank = n - 1, .late_ms = 200};
    hoop_config_t base = {.timeout_s = 60, .chunk_bytes = STAGE_CHUNK,
                          .pipeline_depth = STAGE_DEPTH};
    char report[8192];
    /* Host chunks only: under GPUDirect RDMA sends leave from the GPU. */
    const char *gdr = getenv("HOOP_GPU_DIRECT");
    char keep[16];
    snprintf(keep, sizeof(keep), "%s", gdr ? gdr : "");
    setenv("HOOP_GPU_STAGING_CHUNKS", "6", 1);
    setenv("HOOP_GPU_DIRECT", "0", 1);
    bool ok = harness_run(n, &base, stage_rank, &a, 240, report, sizeof(report));
    unsetenv("HOOP_GPU_STAGING_CHUNKS");
    if (gdr)
        setenv("HOOP_GPU_DIRECT", keep, 1);
    else
        unsetenv("HOOP_GPU_DIRECT");
    cr_assert(ok, "the pipelined collectives at N = %d on %s device buffers through %d host "
              "chunks:\n%s", n, a.real ? "GPU" : "emulated", STAGE_CHUNKS, report);
}

Test(gpucoll, bounded_pinned_memory_ranks_3, .timeout = 300) { stage_test(3); }
Test(gpucoll, bounded_pinned_memory_ranks_4, .timeout = 300) { stage_test(4); }

/* ---- allreduces in a shared-memory ring's small chunks ---- */

/* Over a ring of shared memory an allreduce whose segments are at most
 * four of the ring's chunks (1 MiB) moves in chunks of 256 KiB
 * (ring/allreduce.c); on device buffers the pipeline still copies and
 * reduces a group of four of them, a whole 1 MiB, per GPU operation.
 * Segments of one short group, of a group and a piece, and of four
 * groups less an element; f32, f64 and bf16; the host chunks at their
 * least and a late rank, so that groups kept to be sent on are given up
 * and copied from the GPU again. */
static const size_t rule_segs[] = {70001, 300007, 1048576};

static int rule_rank(hoop_comm_t *comm, int rank, int size, void *varg)
{
    const struct coll_arg *base = varg;
#ifdef HOOP_HAVE_CUDA
    if (base->real && cudaSetDevice(0) != cudaSuccess)
        return harness_failf(rank, "cudaSetDevice(0) failed");
#endif
    if (!strstr(hoop_comm_transport(comm), "shm (every ring link"))
        return harness_failf(rank, "hoop_comm_transport() is \"%s\"", hoop_comm_transport(comm));
    static const struct {
        hoop_dtype_t dt;
        hoop_op_t op;
    } kinds[] = {{HOOP_F32, HOOP_SUM}, {HOOP_F64, HOOP_AVG}, {HOOP_BF16, HOOP_MAX}};
    struct coll_arg a = *base;
    a.coll = C_ALLREDUCE;
    struct hoop_ring *r = &comm->ring;
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        for (size_t g = 0; g < sizeof(rule_segs) / sizeof(rule_segs[0]); g++)
            for (int in_place = 0; in_place < 2; in_place++) {
                size_t count = (size_t)size * rule_segs[g] - (g == 2 ? 1 : 0);
                size_t es = hoop_dtype_size(kinds[k].dt);
                /* Each of the 2 (N - 1) steps: a kernel or copy per 1 MiB
                 * group received, and at most a copy per group sent. */
                uint64_t groups = (rule_segs[g] * es + (1u << 20) - 1) >> 20;
                uint64_t bound = 2 * (uint64_t)(size - 1) * 2 * groups;
                uint64_t before = r->gpu_ops;
                int rc = one_case(comm, rank, size, &a, kinds[k].dt, kinds[k].op, in_place, count);
                if (rc)
                    return rc;
                uint64_t ops = r->gpu_ops - before;
                if (ops > bound)
                    return harness_failf(rank,
                                         "an allreduce of %zu %s on device buffers queued %llu "
                                         "copies and kernels on the GPU, more than the %llu of one "
                                         "per 1 MiB group of each step's receive and send",
                                         count, hoop_dtype_str(kinds[k].dt),
                                         (unsigned long long)ops, (unsigned long long)bound);
            }
    fprintf(stderr, "rank %d: %llu GPU operations in all, %llu groups copied from the GPU again\n",
            rank, (unsigned long long)r->gpu_ops, (unsigned long long)r->gpu_restaged);
    return 0;
}

static void rule_test(int n)
{
    struct coll_arg a = {.real = gpu_mode(), .late_rank = n - 1, .late_ms = 20};
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = 60;
    base.pipeline_depth = 4;
    char report[8192];
    setenv("HOOP_SHM", "1", 1);
    setenv("HOOP_GPU_STAGING_CHUNKS", "12", 1);
    bool ok = harness_run(n, &base, rule_rank, &a, 240, report, sizeof(report));
    unsetenv("HOOP_GPU_STAGING_CHUNKS");
    cr_assert(ok,
              "allreduces in 256 KiB chunks over shared memory at N = %d on %s device buffers:\n%s",
              n, a.real ? "GPU" : "emulated", report);
}

Test(gpucoll, small_shm_chunks_move_in_groups_ranks_2, .timeout = 300) { rule_test(2); }
Test(gpucoll, small_shm_chunks_move_in_groups_ranks_3, .timeout = 300) { rule_test(3); }

/* A setting below the least the pipeline can run on is refused. */
Test(gpucoll, staging_chunks_below_three_depths_is_refused)
{
    setenv("HOOP_GPU_STAGING_CHUNKS", "5", 1);
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.rank = 0;
    cfg.size = 1;
    cfg.pipeline_depth = 2;
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    unsetenv("HOOP_GPU_STAGING_CHUNKS");
    if (comm)
        hoop_comm_destroy(comm);
    cr_assert_eq(st, HOOP_ERR_INVALID, "HOOP_GPU_STAGING_CHUNKS=5 at depth 2: %s: %s",
                 hoop_status_str(st), hoop_last_error());
    cr_assert(strstr(hoop_last_error(), "HOOP_GPU_STAGING_CHUNKS=5") &&
                  strstr(hoop_last_error(), "at least 6"),
              "the sentence: %s", hoop_last_error());
}

/* ---- mixed kinds, and a rank that dies mid-call ---- */

#define KILL_RANK 2
#define KILL_ELEMS (4u << 20) /* 16 MiB of f32 */

static void *kill_soon(void *arg)
{
    (void)arg;
    harness_sleep_ms(150);
    raise(SIGKILL);
    return NULL;
}

/* Allreduces of KILL_ELEMS on device buffers until one fails; KILL_RANK
 * kills itself in the middle of them. The others must fail with
 * HOOP_ERR_PEER naming it. */
static int kill_rank_fn(hoop_comm_t *comm, int rank, int size, void *varg)
{
    const struct coll_arg *a = varg;
#ifdef HOOP_HAVE_CUDA
    if (a->real && cudaSetDevice(0) != cudaSuccess)
        return harness_failf(rank, "cudaSetDevice(0) failed");
#endif
    size_t bytes = (size_t)KILL_ELEMS * 4;
    void *d = dev_alloc(a->real, bytes);
    float *h = calloc(KILL_ELEMS, 4);
    if (!d || !h)
        return harness_failf(rank, "out of memory");
    dev_put(a->real, d, h, bytes);
    if (!a->real)
        hoop_gpu_emulate_force(1);
    hoop_status_t st = hoop_allreduce(comm, d, d, KILL_ELEMS, HOOP_F32, HOOP_SUM);
    if (st)
        return harness_fail(rank, "the first allreduce", st);
    pthread_t t;
    if (rank == KILL_RANK && pthread_create(&t, NULL, kill_soon, NULL))
        return harness_failf(rank, "pthread_create failed");
    for (int i = 0; i < 100000; i++) {
        st = hoop_allreduce(comm, d, d, KILL_ELEMS, HOOP_F32, HOOP_SUM);
        if (st)
            break;
    }
    if (rank == KILL_RANK)
        return harness_failf(rank, "still alive after its allreduces");
    if (st != HOOP_ERR_PEER)
        return harness_failf(rank, "wanted HOOP_ERR_PEER naming rank %d, got %s: %s", KILL_RANK,
                             hoop_status_str(st), hoop_last_error());
    char want[32];
    snprintf(want, sizeof(want), "rank %d", KILL_RANK);
    if (!strstr(hoop_last_error(), want))
        return harness_failf(rank, "the sentence does not name %s: %s", want, hoop_last_error());
    fprintf(stderr, "rank %d: %s\n", rank, hoop_last_error());
    return 0;
}

Test(gpucoll, rank_killed_mid_allreduce_on_device_buffers, .timeout = 120)
{
    harness_skip_if_shm_stalls("a rank killed mid-allreduce on device buffers");
    struct coll_arg a = {.coll = C_ALLREDUCE, .real = gpu_mode()};
    hoop_config_t base = {.timeout_s = 30};
    harness_job_t job;
    cr_assert(harness_job_init(&job));
    for (int r = 0; r < 3; r++)
        cr_assert_neq(harness_spawn_rank(&job, r, 3, &base, kill_rank_fn, &a), -1);
    harness_wait(&job, 90, 20);
    for (int r = 0; r < 3; r++) {
        harness_proc_t *p = &job.procs[r];
        if (r == KILL_RANK)
            cr_expect_eq(p->signal, SIGKILL, "rank %d was to die by SIGKILL:\n%s", r, job.report);
        else
            cr_expect(p->done && !p->hung && p->signal == 0 && p->exit_code == 0,
                      "rank %d did not fail as wanted:\n%s", r, job.report);
    }
}

/* ---- the engine: allreduces of device buffers, fused on the GPU ---- */

#define ENG_TENSORS 5

/* Quarters of small integers: their sums are exact whatever the order, so
 * that the comparison below does not depend on how the engine happened to
 * fuse the tensors (which cycle each was ready in moves it to another ring
 * segment, whose sum starts at another rank). */
static void exact_fill(float *p, size_t n, uint64_t seed)
{
    for (size_t j = 0; j < n; j++)
        p[j] = (float)((int)((seed * 2654435761u + j * 40503u) % 2001u) - 1000) * 0.25f;
}

/* An engine rank's start: GPU 0 (on a GPU), then the engine over
 * loopback. 0, or the harness's failure. */
static int engine_open(const struct coll_arg *a, int rank, int size, int port, hoop_engine_t **e)
{
#ifdef HOOP_HAVE_CUDA
    if (a->real && cudaSetDevice(0) != cudaSuccess)
        return harness_failf(rank, "cudaSetDevice(0) failed");
#else
    (void)a;
#endif
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    hoop_status_t st = hoop_engine_create(e, &cfg);
    return st ? harness_fail(rank, "hoop_engine_create", st) : 0;
}

/* Five f32 tensors of different lengths, allreduced (average, prescale 0.5,
 * postscale 3) through the engine twice: on host buffers, then on device
 * buffers (so fused into the GPU fusion buffer and scaled there); the
 * results must be the same bits. */
static int engine_rank(int rank, int size, int port, void *varg)
{
    const struct coll_arg *a = varg;
    hoop_engine_t *e;
    int orc = engine_open(a, rank, size, port, &e);
    if (orc)
        return orc;
    hoop_status_t st;
    static const size_t lens[ENG_TENSORS] = {1, 1000, 70000, 3, 300000};
    float *host[ENG_TENSORS], *back[ENG_TENSORS];
    void *dev[ENG_TENSORS];
    int rc = 0;
    for (int i = 0; i < ENG_TENSORS; i++) {
        host[i] = malloc(lens[i] * 4);
        back[i] = malloc(lens[i] * 4);
        dev[i] = dev_alloc(a->real, lens[i] * 4);
        if (!host[i] || !back[i] || !dev[i])
            return harness_failf(rank, "out of memory");
    }
    for (int pass = 0; pass < 2 && !rc; pass++) {
        int on_dev = pass == 1;
        hoop_engine_handle_t *h[ENG_TENSORS];
        for (int i = 0; i < ENG_TENSORS; i++) {
            exact_fill(host[i], lens[i], 77u * (uint64_t)(rank + 1) + (uint64_t)i);
            if (on_dev && dev_put(a->real, dev[i], host[i], lens[i] * 4))
                return harness_failf(rank, "copy to the device failed");
        }
        if (on_dev && !a->real)
            hoop_gpu_emulate_force(1);
        for (int i = ENG_TENSORS - 1; i >= 0 && !rc; i--) { /* another order than rank 0's? */
            int k = rank % 2 ? i : ENG_TENSORS - 1 - i;
            char name[32];
            snprintf(name, sizeof(name), "grad.%d", k);
            void *buf = on_dev ? dev[k] : (void *)host[k];
            st = hoop_engine_allreduce(e, name, buf, buf, lens[k], HOOP_F32, HOOP_AVG, 0.5, 3.0,
                                       NULL, NULL, &h[k]);
            if (st)
                rc = harness_fail(rank, "hoop_engine_allreduce", st);
        }
        for (int i = 0; i < ENG_TENSORS && !rc; i++) {
            st = hoop_engine_wait(h[i], 30);
            const char *why = "";
            if (st || (st = hoop_engine_status(h[i], &why)))
                rc = harness_failf(rank, "engine allreduce %d on %s buffers: %s", i,
                                   on_dev ? "device" : "host", why);
            hoop_engine_release(h[i]);
        }
        if (on_dev && !a->real)
            hoop_gpu_emulate_force(0);
        for (int i = 0; i < ENG_TENSORS && !rc; i++) {
            if (!on_dev) {
                memcpy(back[i], host[i], lens[i] * 4);
                continue;
            }
            float *got = malloc(lens[i] * 4);
            if (!got || dev_get(a->real, got, dev[i], lens[i] * 4))
                rc = harness_failf(rank, "copy from the device failed");
            for (size_t j = 0; !rc && j < lens[i]; j++)
                if (memcmp(&got[j], &back[i][j], 4))
                    rc = harness_failf(rank, "engine tensor %d element %zu: %a on the device, %a "
                                       "on the host", i, j, (double)got[j], (double)back[i][j]);
            free(got);
        }
    }
    for (int i = 0; i < ENG_TENSORS; i++) {
        free(host[i]);
        free(back[i]);
        dev_free(a->real, dev[i]);
    }
    /* The engine's fusion buffer on the "GPU" was allocated under the
     * emulation: it is freed under it too. */
    if (!a->real)
        hoop_gpu_emulate_force(1);
    hoop_engine_destroy(e);
    if (!a->real)
        hoop_gpu_emulate_force(0);
    return rc;
}

static void engine_test(int n)
{
    struct coll_arg a = {.real = gpu_mode()};
    char report[8192];
    bool ok = harness_run_raw(n, engine_rank, &a, 120, report, sizeof(report));
    cr_assert(ok, "engine at N = %d on %s device buffers:\n%s", n, a.real ? "GPU" : "emulated",
              report);
}

Test(gpucoll, engine_fuses_device_allreduces_ranks_2, .timeout = 150) { engine_test(2); }
Test(gpucoll, engine_fuses_device_allreduces_ranks_3, .timeout = 150) { engine_test(3); }

/* The engine's allgather (rank r gives r + 1 rows of 3 i32, the last rank
 * none and no sendbuf) and alltoall (rank r sends r + j + 1 elements to
 * rank j) on device buffers: the output the engine allocates is device
 * memory where the sendbuf was (on a GPU: its kind is checked), host
 * memory on the rank that gave none, and right on both. */
static int check_out(int rank, const char *what, int real, const void *out, int want_dev,
                     const int32_t *want, size_t n)
{
    if (real && want_dev != (hoop_gpu_mem_kind(out).kind == HOOP_MEM_DEVICE))
        return harness_failf(rank, "%s: the output is %s memory, wanted %s", what,
                             hoop_gpu_mem_str(hoop_gpu_mem_kind(out).kind),
                             want_dev ? "device" : "host");
    int32_t *got = malloc(n * 4 + 4);
    if (!got)
        return harness_failf(rank, "out of memory");
    int rc = want_dev ? dev_get(real, got, out, n * 4) : (memcpy(got, out, n * 4), 0);
    for (size_t i = 0; !rc && i < n; i++)
        if (got[i] != want[i])
            rc = harness_failf(rank, "%s element %zu: %d, wanted %d", what, i, got[i], want[i]);
    free(got);
    return rc;
}

static int engine_outputs_rank(int rank, int size, int port, void *varg)
{
    const struct coll_arg *a = varg;
    hoop_engine_t *e;
    int orc = engine_open(a, rank, size, port, &e);
    if (orc)
        return orc;
    hoop_status_t st;
    int last = rank == size - 1, rc = 0;
    size_t rows = last ? 0 : (size_t)rank + 1, nsend = 0;
    size_t splits[8];
    for (int j = 0; j < size; j++)
        nsend += splits[j] = (size_t)(rank + j + 1);
    int32_t in[64];
    for (size_t i = 0; i < 64; i++)
        in[i] = rank * 1000 + (int32_t)i;
    void *dev = dev_alloc(a->real, sizeof(in));
    if (!dev || dev_put(a->real, dev, in, sizeof(in)))
        return harness_failf(rank, "device buffer");
    if (!a->real)
        hoop_gpu_emulate_force(1);
    hoop_engine_handle_t *hg, *ha;
    if ((st = hoop_engine_allgather(e, "rows", last ? NULL : dev, rows, 3, HOOP_I32, NULL, NULL,
                                    &hg)) ||
        (st = hoop_engine_alltoall(e, "split", dev, splits, HOOP_I32, NULL, NULL, &ha)))
        rc = harness_fail(rank, "enqueue", st);
    const char *why = "";
    if (!rc && ((st = hoop_engine_wait(hg, 30)) || (st = hoop_engine_status(hg, &why)) ||
                (st = hoop_engine_wait(ha, 30)) || (st = hoop_engine_status(ha, &why))))
        rc = harness_failf(rank, "engine allgather or alltoall: %s", why);
    if (!a->real)
        hoop_gpu_emulate_force(0);
    int32_t want[256];
    size_t n = 0, count = 0;
    for (int r = 0; !rc && r < size - 1; r++)
        for (size_t i = 0; i < ((size_t)r + 1) * 3; i++)
            want[n++] = r * 1000 + (int32_t)i;
    void *out = rc ? NULL : hoop_engine_take_output(hg, &count);
    if (!rc && count != n)
        rc = harness_failf(rank, "allgather: %zu elements, wanted %zu", count, n);
    if (!rc)
        rc = check_out(rank, "allgather", a->real, out, !last, want, n);
    if (out) {
        if (!last && !a->real)
            hoop_gpu_emulate_force(1);
        last ? free(out) : hoop_gpu_free(out);
        if (!last && !a->real)
            hoop_gpu_emulate_force(0);
    }
    n = 0;
    for (int r = 0; !rc && r < size; r++) {
        size_t off = 0; /* where rank r's block for this rank starts in its sendbuf */
        for (int j = 0; j < rank; j++)
            off += (size_t)(r + j + 1);
        for (size_t i = 0; i < (size_t)(r + rank + 1); i++)
            want[n++] = r * 1000 + (int32_t)(off + i);
    }
    if (!rc && (out = (void *)hoop_engine_output(ha, &count)) && count == n)
        rc = check_out(rank, "alltoall", a->real, out, 1, want, n);
    else if (!rc)
        rc = harness_failf(rank, "alltoall: %zu elements, wanted %zu", count, n);
    /* The handles free device outputs under the kind they were made in. */
    if (!a->real)
        hoop_gpu_emulate_force(1);
    if (hg)
        hoop_engine_release(hg);
    if (ha)
        hoop_engine_release(ha);
    hoop_engine_destroy(e);
    if (!a->real)
        hoop_gpu_emulate_force(0);
    dev_free(a->real, dev);
    (void)nsend;
    return rc;
}

static void engine_outputs_test(int n)
{
    struct coll_arg a = {.real = gpu_mode()};
    char report[8192];
    bool ok = harness_run_raw(n, engine_outputs_rank, &a, 120, report, sizeof(report));
    cr_assert(ok, "engine allgather and alltoall at N = %d on %s device buffers:\n%s", n,
              a.real ? "GPU" : "emulated", report);
}

Test(gpucoll, engine_outputs_on_the_device_ranks_2, .timeout = 150) { engine_outputs_test(2); }
Test(gpucoll, engine_outputs_on_the_device_ranks_3, .timeout = 150) { engine_outputs_test(3); }

/* The engine refuses, as Horovod does, an allreduce whose data is on a GPU
 * on one rank and on the host on another: rank 0 gives device memory, the
 * others host memory, and it fails on every rank naming both. On a GPU, a
 * group of a device and a host tensor on one rank is refused at once (under
 * the emulation every buffer is device memory: that half needs a GPU). */
static int engine_where_rank(int rank, int size, int port, void *varg)
{
    const struct coll_arg *a = varg;
    hoop_engine_t *e;
    int orc = engine_open(a, rank, size, port, &e);
    if (orc)
        return orc;
    /* Static: a rank that fails returns while its engine may still use them. */
    static int32_t host[64];
    for (int i = 0; i < 64; i++)
        host[i] = rank + i;
    void *dev = dev_alloc(a->real, sizeof(host));
    if (!dev || dev_put(a->real, dev, host, sizeof(host)))
        return harness_failf(rank, "device buffer");
    int rc = 0;
    if (!a->real)
        hoop_gpu_emulate_force(rank == 0); /* (whatever HOOP_GPU_EMULATE says) */
    void *buf = rank == 0 ? dev : (void *)host;
    hoop_engine_handle_t *h = NULL;
    hoop_status_t st = hoop_engine_allreduce(e, "mixed", buf, buf, 64, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                             NULL, NULL, &h);
    const char *why = hoop_last_error();
    if (!st) {
        st = hoop_engine_wait(h, 30);
        hoop_engine_status(h, &why);
    }
    if (st != HOOP_ERR_MISMATCH || !strstr(why, "rank 0 gives device (GPU) memory") ||
        !strstr(why, "gives host memory"))
        rc = harness_failf(rank,
                           "device memory on rank 0, host memory on the others: %s (%s); "
                           "wanted a mismatch naming both",
                           hoop_status_str(st), why);
    else
        fprintf(stderr, "rank %d: %s\n", rank, why);
    if (h)
        hoop_engine_release(h);
    if (!a->real)
        hoop_gpu_emulate_force(0);
    if (!rc && a->real) {
        const void *s[2] = {dev, host};
        void *r[2] = {dev, host};
        size_t counts[2] = {64, 64};
        hoop_engine_handle_t *g = NULL;
        st = hoop_engine_grouped_allreduce(e, "half", 2, s, r, counts, HOOP_I32, HOOP_SUM, 1.0, 1.0,
                                           NULL, NULL, &g);
        if (st != HOOP_ERR_INVALID ||
            !strstr(hoop_last_error(),
                    "tensor 0 of the group is device (GPU) memory but tensor 1 is host memory"))
            rc = harness_failf(rank,
                               "a group of a device and a host tensor: %s (%s); wanted it "
                               "refused at once",
                               hoop_status_str(st), hoop_last_error());
        if (g)
            hoop_engine_release(g);
    }
    hoop_engine_destroy(e);
    dev_free(a->real, dev);
    return rc;
}

Test(gpucoll, engine_refuses_host_against_device_memory_ranks_2, .timeout = 150)
{
    struct coll_arg a = {.real = gpu_mode()};
    char report[8192];
    bool ok = harness_run_raw(2, engine_where_rank, &a, 120, report, sizeof(report));
    cr_assert(ok,
              "engine allreduce of device memory against host memory at N = 2 on %s device "
              "buffers:\n%s",
              a.real ? "GPU" : "emulated", report);
}

/* ---- GPUDirect RDMA: the dma-buf export, and HOOP_GPU_DIRECT=1 refused ---- */

Test(gpucoll, dma_buf_of_device_memory)
{
    if (!gpu_mode())
        cr_skip_test("needs a GPU: a dma-buf is exported from device memory");
#ifdef HOOP_HAVE_CUDA
    void *d = NULL;
    cr_assert_eq(cudaMalloc(&d, 1 << 20), cudaSuccess);
    int fd = -1;
    uint64_t off = 0;
    size_t mapped = 0;
    char why[256] = "";
    int rc = hoop_gpu_dmabuf_export((char *)d + 4100, 8192, &fd, &off, &mapped, why, sizeof(why));
    cr_expect_eq(rc, 0, "dma-buf export of device memory failed: %s", why);
    if (!rc) {
        long page = sysconf(_SC_PAGESIZE);
        cr_expect_geq(fd, 0);
        cr_expect_eq(off, 4100 % (uint64_t)page, "offset %llu", (unsigned long long)off);
        cr_expect_eq(mapped % (size_t)page, 0, "mapped %zu is not whole pages", mapped);
        cr_expect_geq(mapped, off + 8192);
        off_t end = lseek(fd, 0, SEEK_END);
        cr_expect_geq(end, (off_t)mapped, "the dma-buf is %lld bytes, not %zu",
                      (long long)end, mapped);
        close(fd);
    }
    cudaFree(d);
#endif
}

static int gdr_refused_rank(hoop_comm_t *comm, int rank, int size, void *varg)
{
    const struct coll_arg *a = varg;
#ifdef HOOP_HAVE_CUDA
    if (cudaSetDevice(0) != cudaSuccess)
        return harness_failf(rank, "cudaSetDevice(0) failed");
#endif
    setenv("HOOP_GPU_DIRECT", "1", 1);
    void *d = dev_alloc(a->real, 4096 * 4);
    if (!d)
        return harness_failf(rank, "out of memory");
    hoop_status_t st = hoop_allreduce(comm, d, d, 4096, HOOP_F32, HOOP_SUM);
    dev_free(a->real, d);
    if (st != HOOP_ERR_UNSUPPORTED)
        return harness_failf(rank, "wanted HOOP_ERR_UNSUPPORTED, got %s: %s", hoop_status_str(st),
                             hoop_last_error());
    if (!strstr(hoop_last_error(), "HOOP_GPU_DIRECT=1, but the tcp transport moves host memory "
                                   "only"))
        return harness_failf(rank, "the sentence does not say why: %s", hoop_last_error());
    return 0;
}

Test(gpucoll, gpu_direct_1_over_tcp_is_refused, .timeout = 60)
{
    struct coll_arg a = {.real = gpu_mode()};
    if (!a.real)
        cr_skip_test("needs a GPU: the emulation sends from device memory under "
                     "HOOP_GPU_DIRECT=1 instead of refusing");
    const char *t = harness_transport();
    if (t && *t && strcmp(t, "tcp"))
        cr_skip_test("runs over tcp, not %s", t);
    char report[8192];
    bool ok = harness_run(2, NULL, gdr_refused_rank, &a, 40, report, sizeof(report));
    cr_assert(ok, "HOOP_GPU_DIRECT=1 over tcp:\n%s", report);
}
