/* comm.c - creating and destroying communicators. */
#include "collectives/comm.h"
#include "collectives/mem.h"
#include "common/clock.h"
#include "common/cpus.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"
#include "gpu/gpu.h"
#include "reduce/reduce.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HOOP_CHUNK_MIN 64
#define HOOP_CHUNK_MAX (1ull << 30)

void hoop_config_init(hoop_config_t *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->struct_size = sizeof(*cfg);
    cfg->rank = -1;
    cfg->size = -1;
}

static hoop_status_t comm_tunables(hoop_comm_t *c, const hoop_config_t *cfg, size_t *chunk,
                                   int *depth)
{
    hoop_status_t st;
    unsigned long long v;
    if (cfg && cfg->timeout_s > 0)
        c->timeout_s = cfg->timeout_s;
    else if ((st = hoop_param_double("HOOP_TIMEOUT", 0.001, 1e7, &c->timeout_s)))
        return st;
    if (cfg && cfg->chunk_bytes) {
        if (cfg->chunk_bytes < HOOP_CHUNK_MIN || cfg->chunk_bytes > HOOP_CHUNK_MAX)
            return hoop_error(HOOP_ERR_INVALID, "chunk_bytes %zu is outside %d..%llu",
                              cfg->chunk_bytes, HOOP_CHUNK_MIN, HOOP_CHUNK_MAX);
        *chunk = cfg->chunk_bytes;
    } else {
        if ((st = hoop_param_u64("HOOP_CHUNK_BYTES", HOOP_CHUNK_MIN, HOOP_CHUNK_MAX, &v)))
            return st;
        *chunk = (size_t)v;
    }
    if (cfg && cfg->pipeline_depth) {
        if (cfg->pipeline_depth < 1 || cfg->pipeline_depth > HOOP_RING_DEPTH_MAX)
            return hoop_error(HOOP_ERR_INVALID, "pipeline_depth %d is outside 1..%d",
                              cfg->pipeline_depth, HOOP_RING_DEPTH_MAX);
        *depth = cfg->pipeline_depth;
    } else {
        if ((st = hoop_param_u64("HOOP_PIPELINE_DEPTH", 1, HOOP_RING_DEPTH_MAX, &v)))
            return st;
        *depth = (int)v;
    }
    if ((st = hoop_param_u64("HOOP_SHM_CHUNK_BYTES", 0, HOOP_CHUNK_MAX, &v)))
        return st;
    if (v && v < HOOP_CHUNK_MIN)
        return hoop_error(HOOP_ERR_INVALID,
                          "HOOP_SHM_CHUNK_BYTES=%llu is below %d bytes: set at least %d, or 0 "
                          "to keep HOOP_CHUNK_BYTES's chunks over shared memory too",
                          v, HOOP_CHUNK_MIN, HOOP_CHUNK_MIN);
    c->shm_chunk = (size_t)v;
    unsigned long long stage;
    if ((st = hoop_param_u64("HOOP_GPU_STAGING_CHUNKS", 0, HOOP_RING_STAGE_MAX, &stage)))
        return st;
    if (stage && stage < 3ull * (unsigned)*depth)
        return hoop_error(HOOP_ERR_INVALID, "HOOP_GPU_STAGING_CHUNKS=%llu is below 3 x the "
                          "pipeline depth (%d): the pipeline could stall on its own host "
                          "slots; set at least %d, or 0 for the default (4 x the depth)",
                          stage, *depth, 3 * *depth);
    c->stage_chunks = (int)stage;
    if ((st = hoop_param_u64("HOOP_SMALL_BYTES", 0, HOOP_CHUNK_MAX, &v)) ||
        (st = hoop_log_check_level()) || (st = hoop_reduce_isa_check()))
        return st;
    if ((st = hoop_param_auto01("HOOP_HIERARCHICAL", &c->hier_mode)))
        return st;
    /* Read before any failure can need it: a set-up that fails gathers the
     * ranks' reports for this long too (fail.c). */
    if ((st = hoop_param_double("HOOP_FAIL_GRACE", 0.05, 3600, &c->fail_grace_s)))
        return st;
    /* The small path keeps a whole message in one receive slot. */
    c->small_bytes = (size_t)v < *chunk ? (size_t)v : *chunk;
    return HOOP_OK;
}

/* HOOP_BUSY_POLL_US. auto: spinning pays where each rank has a CPU of its
 * own (N = 2 over loopback: 42 -> 25 us per small allreduce). Where ranks
 * outnumber the CPUs a plain spin takes the CPU from the rank being waited
 * for (N = 4 on 2 CPUs: 100 -> 118 us with 20 us of spinning, 215 us with
 * 100), so there a spin yields the CPU between its looks, and the rank stays
 * runnable instead of waiting to be woken: 89 -> 72 us at 8 B, 64 MiB
 * unchanged (bench/RESULTS.md). */
#define COMM_BUSY_POLL_AUTO_US 20
#define COMM_BUSY_POLL_SHARED_US 200
/* HOOP_HIERARCHICAL=auto: small allreduces gather on one rank per host
 * from this size. Two emulated hosts of two ranks on 1 Gbit/s links: 1.6x
 * faster than recursive doubling among all ranks at 16 KiB and 2.0-2.1x at
 * 32-64 KiB, where the link's bytes decide; 5-10 % slower up to 8 KiB,
 * where its two more hops inside the host do (bench/RESULTS.md). */
#define COMM_HIER_SMALL_AUTO (16 * 1024)

/* Whether ring allreduces run hierarchical (ring/hier.c): where the hosts'
 * shape allows, unless HOOP_HIERARCHICAL=0; and from which size small ones
 * do. Said in the log and in the transport's description. */
static void comm_hier(hoop_comm_t *c)
{
    char why[128];
    int can = hoop_ring_hier_can(&c->ring, why, sizeof(why));
    c->hier = can && c->hier_mode != 0;
    c->hier_small = c->hier_mode == 1 ? 0 : COMM_HIER_SMALL_AUTO;
    if (c->hier_mode == 1 && !can)
        HOOP_WARN("rank %d: HOOP_HIERARCHICAL=1, but %s: allreduces take the flat ring",
                  c->rank, why);
    else
        HOOP_INFO("rank %d: allreduces take the %s (HOOP_HIERARCHICAL=%s; %s)", c->rank,
                  c->hier ? "hierarchical path" : "flat ring",
                  hoop_param_str("HOOP_HIERARCHICAL"), why);
    if (c->hier) {
        size_t l = strlen(c->transport);
        snprintf(c->transport + l, sizeof(c->transport) - l, "; hierarchical allreduce (%s)",
                 why);
    }
}

struct host_rank {
    uint64_t host_id;
    int rank;
};

static int host_rank_cmp(const void *a, const void *b)
{
    const struct host_rank *x = a, *y = b;
    if (x->host_id != y->host_id)
        return x->host_id < y->host_id ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Where this rank is, Horovod's way: its place among the ranks of its
 * host (in rank order), and among the ranks with its local rank (one a
 * host, in rank order); and whether every host has as many ranks. From
 * the bootstrap's table, so every rank agrees. */
static hoop_status_t comm_places(hoop_comm_t *c)
{
    const int n = c->size;
    struct host_rank *hr = malloc((size_t)n * sizeof(*hr));
    int *lr = calloc((size_t)n, sizeof(*lr));
    if (!hr || !lr) {
        free(hr);
        free(lr);
        return hoop_error(HOOP_ERR_SYSTEM,
                          "rank %d: out of memory for the table of %d ranks' hosts", c->rank, n);
    }
    for (int r = 0; r < n; r++)
        hr[r] = (struct host_rank){c->bs.peers[r].host_id, r};
    qsort(hr, (size_t)n, sizeof(*hr), host_rank_cmp);
    c->homogeneous = 1;
    for (int i = 0, first = -1; i < n;) {
        int j = i;
        while (j < n && hr[j].host_id == hr[i].host_id) {
            lr[hr[j].rank] = j - i;
            j++;
        }
        if (hr[i].host_id == c->bs.peers[c->rank].host_id)
            c->local_size = j - i;
        if (first < 0)
            first = j - i;
        else if (j - i != first)
            c->homogeneous = 0;
        i = j;
    }
    c->local_rank = lr[c->rank];
    c->cross_rank = c->cross_size = 0;
    for (int r = 0; r < n; r++)
        if (lr[r] == c->local_rank) {
            c->cross_rank += r < c->rank;
            c->cross_size++;
        }
    free(hr);
    free(lr);
    return HOOP_OK;
}

static hoop_status_t comm_busy_poll(hoop_comm_t *c)
{
    unsigned long long us;
    int is_auto;
    if (hoop_param_auto_u64("HOOP_BUSY_POLL_US", 0, 1000000, &is_auto, &us))
        return hoop_error(HOOP_ERR_INVALID, "rank %d: %s (microseconds)", c->rank,
                          hoop_last_error());
    int shared = c->local_size > hoop_usable_cpus();
    if (is_auto)
        us = shared ? COMM_BUSY_POLL_SHARED_US : COMM_BUSY_POLL_AUTO_US;
    hoop_ring_set_busy_poll(&c->ring, us * 1000, shared);
    HOOP_INFO("rank %d: waits busy-poll for %llu us before they sleep%s", c->rank, us,
              shared && us ? ", yielding the CPU between looks (more ranks than CPUs here)" : "");
    return HOOP_OK;
}

hoop_status_t hoop_comm_init(hoop_comm_t **out, const hoop_config_t *cfg)
{
    if (!out)
        return hoop_error(HOOP_ERR_INVALID, "hoop_comm_init: the output pointer is NULL");
    if (cfg && cfg->struct_size != sizeof(*cfg))
        return hoop_error(HOOP_ERR_INVALID,
                          "hoop_comm_init: cfg->struct_size is %zu, not %zu: initialise the "
                          "config with hoop_config_init()", cfg->struct_size, sizeof(*cfg));
    hoop_param_warn_unknown();

    struct hoop_boot_cfg bcfg;
    hoop_status_t st = hoop_boot_cfg_resolve(cfg, &bcfg);
    if (st)
        return st;
    return hoop_comm_create(out, cfg, &bcfg);
}

hoop_status_t hoop_comm_create(hoop_comm_t **out, const hoop_config_t *cfg,
                               const struct hoop_boot_cfg *boot)
{
    struct hoop_boot_cfg bcfg = *boot;
    hoop_status_t st;
    /* Whether CUDA is here, asked once per process: the first call loads
     * the driver (or searches the library path for it in vain, 0.1 ms).
     * Asked now, while the other ranks are still starting, the first
     * collective does not pay it, nor the ranks waiting for this one. */
    const char *no_gpu = NULL;
    if (hoop_gpu_built() && !hoop_gpu_available(&no_gpu))
        HOOP_DEBUG("rank %d: device buffers are not taken here: %s", bcfg.rank, no_gpu);
    hoop_comm_t *c = calloc(1, sizeof(*c));
    if (!c)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory", bcfg.rank);
    c->rank = bcfg.rank;
    c->size = bcfg.size;
    c->abort_fd = -1;
    c->ctl_epfd = -1;
    c->launcher = bcfg.launcher;
    c->boot_timeout_s = bcfg.timeout_s;
    size_t chunk = 0;
    int depth = 0;
    if ((st = comm_tunables(c, cfg, &chunk, &depth))) {
        hoop_error(st, "rank %d: %s", c->rank, hoop_last_error());
        goto err_free;
    }
    if ((st = hoop_ring_choose(&c->ring, c->rank)))
        goto err_free;
    uint64_t deadline = hoop_deadline_after(bcfg.timeout_s);
    if (c->size > 1 &&
        (st = hoop_ring_open(&c->ring, c->rank, c->size, bcfg.token, chunk, depth)))
        goto err_free;
    if (c->stage_chunks) /* else the ring's default */
        c->ring.stage_chunks = c->stage_chunks;
    c->ring.shm_chunk = c->shm_chunk;
    snprintf(c->transport, sizeof(c->transport), "%s", hoop_ring_describe(&c->ring));
    if ((st = hoop_bootstrap_init(&c->bs, &bcfg, hoop_ring_listen, &c->ring)))
        goto err_ring;
    if ((st = comm_places(c)))
        goto err_boot;
    if (c->size > 1 && (st = hoop_ring_connect(&c->ring, c->bs.peers, c->bs.comm_id, deadline)))
        goto err_boot;
    /* Again, now that the links are known: which are shared memory. */
    snprintf(c->transport, sizeof(c->transport), "%s", hoop_ring_describe(&c->ring));
    if (c->size > 1)
        comm_hier(c);
    if (c->size > 1 && (st = comm_busy_poll(c)))
        goto err_boot;
    if ((st = hoop_comm_control_init(c)))
        goto err_boot;
    HOOP_INFO("rank %d of %d (local %d of %d) on %s: communicator ready over %s", c->rank, c->size,
              c->local_rank, c->local_size, c->bs.peers[c->rank].host, c->transport);
    *out = c;
    return HOOP_OK;

err_boot:
    if (c->size > 1) {
        /* The data connections go first: a peer still waiting on one of
         * them (a handshake this rank will never answer) fails at once
         * instead of while this rank waits for the root's verdict. */
        char why[HOOP_NOTICE_MAX + 1];
        snprintf(why, sizeof(why), "%s", hoop_last_error());
        hoop_ring_close(&c->ring);
        hoop_error(st, "%s", why);
    }
    st = hoop_comm_fail_init(c, st);
    hoop_bootstrap_fini(&c->bs);
    hoop_comm_control_fini(c);
    free(c);
    return st;
err_ring:
    if (c->size > 1)
        hoop_ring_close(&c->ring);
err_free:
    free(c);
    return st;
}

hoop_status_t hoop_comm_destroy(hoop_comm_t *c)
{
    if (!c)
        return HOOP_OK;
    hoop_comm_leave(c);
    hoop_mem_fini(c);
    if (c->size > 1)
        hoop_ring_close(&c->ring);
    hoop_bootstrap_fini(&c->bs);
    hoop_comm_control_fini(c);
    free(c);
    return HOOP_OK;
}

int hoop_comm_rank(const hoop_comm_t *c)
{
    return c ? c->rank : -1;
}

int hoop_comm_size(const hoop_comm_t *c)
{
    return c ? c->size : -1;
}

int hoop_comm_local_rank(const hoop_comm_t *c)
{
    return c ? c->local_rank : -1;
}

int hoop_comm_local_size(const hoop_comm_t *c)
{
    return c ? c->local_size : -1;
}

int hoop_comm_cross_rank(const hoop_comm_t *c)
{
    return c ? c->cross_rank : -1;
}

int hoop_comm_cross_size(const hoop_comm_t *c)
{
    return c ? c->cross_size : -1;
}

int hoop_comm_is_homogeneous(const hoop_comm_t *c)
{
    return c ? c->homogeneous : -1;
}

const char *hoop_comm_transport(const hoop_comm_t *c)
{
    return c ? c->transport : "none";
}

const char *hoop_comm_launcher(const hoop_comm_t *c)
{
    return c ? c->launcher : "none";
}
