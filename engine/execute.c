/* execute.c - run a cycle's responses, in their order, on the engine's
 * thread: allreduces of the same dtype, op and scale factors fused into the
 * fusion buffer up to the threshold, everything else one collective each.
 * A tensor of a MiB or more runs alone, where it lies. Only hoop.h's
 * collectives are called. Allreduces of device buffers (a group with any)
 * are fused in a buffer on the GPU, copied and scaled there (gpu/gpu.h).
 */
#include "engine/engine.h"
#include "common/log.h"
#include "common/status.h"
#include "gpu/gpu.h"
#include "reduce/reduce.h"

#include <stdlib.h>
#include <string.h>

static void unlink_pending(struct hoop_engine *e, eng_op_t *op)
{
    for (eng_op_t **pp = &e->pending; *pp; pp = &(*pp)->next)
        if (*pp == op) {
            *pp = op->next;
            op->next = NULL;
            return;
        }
}

/* The n members of one collective end with st (and msg): every one done
 * before the first waiter is woken (eng_op_settle). */
static void finish_all(struct hoop_engine *e, struct eng_resp **m, int n, hoop_status_t st,
                       const char *msg)
{
    for (int k = 0; k < n; k++) {
        m[k]->done = 1;
        if (m[k]->op) {
            unlink_pending(e, m[k]->op);
            eng_op_settle(e, m[k]->op, st, msg);
        }
    }
    for (int k = 0; k < n; k++)
        if (m[k]->op) {
            eng_op_wake(m[k]->op);
            m[k]->op = NULL;
        }
}

static void tl_all(struct hoop_engine *e, struct eng_resp **g, int n, const char *activity)
{
    if (!e->tl)
        return;
    for (int i = 0; i < n; i++) {
        if (activity)
            eng_timeline_begin(e->tl, g[i]->p.name, activity);
        else
            eng_timeline_end(e->tl, g[i]->p.name, NULL);
    }
}

static void count_collective(struct hoop_engine *e, int fused)
{
    pthread_mutex_lock(&e->smu);
    e->stats.collectives++;
    if (fused > 1)
        e->stats.fused_ops += (uint64_t)fused;
    pthread_mutex_unlock(&e->smu);
}

static void scale(void *buf, size_t n, int dtype, double f)
{
    hoop_reduce_scale(buf, n, (hoop_dtype_t)dtype, f);
}

/* Where an operation's buffers lie was asked once, when it was enqueued
 * (eng_op_t's send_dev, recv_dev and gpu): nothing here asks the driver
 * about a pointer again. */

/* The engine's thread works on the GPU of op's device buffers (its copies,
 * kernels and fusion buffer), whatever device it was on. */
static hoop_status_t use_gpu_of(struct hoop_engine *e, const char *name, const eng_op_t *op)
{
    char why[256];
    if (op->gpu >= 0 && hoop_gpu_set_device(op->gpu, why, sizeof(why)))
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': GPU %d: %s", e->rank, name,
                          op->gpu, why);
    return HOOP_OK;
}

/* scale(), on the GPU where buf is device memory (on_dev). */
static hoop_status_t scale_any(struct hoop_engine *e, const char *name, void *buf, size_t n,
                               int dtype, double f, int on_dev)
{
    if (f == 1.0 || !n)
        return HOOP_OK;
    if (!on_dev) {
        scale(buf, n, dtype, f);
        return HOOP_OK;
    }
    char why[256];
    if (hoop_gpu_scale(buf, n, (hoop_dtype_t)dtype, f, why, sizeof(why)))
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': %s", e->rank, name, why);
    return HOOP_OK;
}

/* memcpy, or where either side may be device memory (may_dev), cudaMemcpy,
 * which finds the direction itself (cudaMemcpyDefault). */
static hoop_status_t copy_any(struct hoop_engine *e, const char *name, void *dst, const void *src,
                              size_t bytes, int may_dev)
{
    if (!bytes || dst == src)
        return HOOP_OK;
    if (!may_dev) {
        memcpy(dst, src, bytes);
        return HOOP_OK;
    }
    char why[256];
    if (hoop_gpu_memcpy(dst, src, bytes, why, sizeof(why)))
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': %s", e->rank, name, why);
    return HOOP_OK;
}

/* The fusion buffer on the GPU, at least bytes long (kept, grown). */
static hoop_status_t dscratch(struct hoop_engine *e, size_t bytes, uint8_t **buf)
{
    if (!e->dfusion || e->dfusion_cap < bytes) {
        size_t cap = e->fusion_threshold > bytes ? (size_t)e->fusion_threshold : bytes;
        char why[256];
        void *p = NULL;
        hoop_gpu_free(e->dfusion);
        e->dfusion = NULL;
        e->dfusion_cap = 0;
        if (hoop_gpu_malloc(&p, cap ? cap : 1, why, sizeof(why)))
            return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: a fusion buffer of %zu bytes on "
                              "the GPU (HOOP_FUSION_THRESHOLD): %s", e->rank, cap, why);
        e->dfusion = p;
        e->dfusion_cap = cap;
    }
    *buf = e->dfusion;
    return HOOP_OK;
}

/* The fusion buffer in host memory, at least bytes long (kept, grown).
 * Over several ranks it comes from hoop_mem_alloc, so that where every
 * rank of the host maps every other's, a fused allreduce runs in place in
 * it with no copy through the transport. hoop_mem_alloc is collective: it
 * grows where every rank is, before a fused group runs (eng_execute: the
 * same groups on every rank), never where only this rank's buffers lead
 * (a joined rank's, a device group's). */
static hoop_status_t fusion_reserve(struct hoop_engine *e, size_t bytes)
{
    if (e->fusion && bytes <= e->fusion_cap)
        return HOOP_OK;
    size_t cap = e->fusion_threshold > bytes ? (size_t)e->fusion_threshold : bytes;
    if (e->size == 1) {
        uint8_t *p = realloc(e->fusion, cap ? cap : 1);
        if (!p)
            return hoop_error(HOOP_ERR_SYSTEM,
                              "engine rank %d: out of memory for a fusion buffer of %zu bytes "
                              "(HOOP_FUSION_THRESHOLD)",
                              e->rank, cap);
        e->fusion = p;
        e->fusion_cap = cap;
        return HOOP_OK;
    }
    hoop_status_t st;
    void *p = NULL;
    if (e->fusion && (st = hoop_mem_free(e->comm, e->fusion)))
        return st;
    e->fusion = NULL;
    e->fusion_cap = 0;
    if ((st = hoop_mem_alloc(e->comm, cap ? cap : 1, &p)))
        return hoop_error(
            st, "engine rank %d: a fusion buffer of %zu bytes (HOOP_FUSION_THRESHOLD): %s", e->rank,
            cap, hoop_last_error());
    e->fusion = p;
    e->fusion_cap = cap;
    return HOOP_OK;
}

/* Where a group is fused on the host: the fusion buffer where it fits (it
 * was reserved for the group), else memory of its own (*temp). */
static hoop_status_t scratch(struct hoop_engine *e, size_t bytes, uint8_t **buf, int *temp)
{
    *temp = 0;
    if (e->fusion && bytes <= e->fusion_cap) {
        *buf = e->fusion;
        return HOOP_OK;
    }
    *buf = malloc(bytes ? bytes : 1);
    if (!*buf)
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory for %zu bytes", e->rank,
                          bytes);
    *temp = 1;
    return HOOP_OK;
}

static int nseg(const struct eng_resp *r)
{
    return r->p.nvals ? (int)r->p.nvals : 1;
}

static uint64_t seg_count(const struct eng_resp *r, int i)
{
    return r->p.nvals ? r->p.vals[i] : r->p.count;
}

/* Responses g[0..n-1]: allreduces of one dtype, op and scale factors. */
static hoop_status_t run_allreduce(struct hoop_engine *e, struct eng_resp **g, int n)
{
    struct eng_resp *r0 = g[0];
    size_t es = hoop_dtype_size(r0->p.dtype);
    hoop_status_t st;
    tl_all(e, g, n, NULL); /* QUEUE */
    if (n == 1 && !r0->p.nvals && r0->op) {
        /* One tensor: no copy through the fusion buffer. */
        eng_op_t *op = r0->op;
        const void *src = op->send[0];
        if (op->recv_dev && (st = use_gpu_of(e, r0->p.name, op)))
            return st;
        if (r0->p.pre != 1.0 && r0->p.count) {
            if ((st = copy_any(e, r0->p.name, op->recv[0], op->send[0], r0->p.count * es,
                               op->send_dev || op->recv_dev)) ||
                (st = scale_any(e, r0->p.name, op->recv[0], r0->p.count, r0->p.dtype, r0->p.pre,
                                op->recv_dev)))
                return st;
            src = op->recv[0];
        }
        tl_all(e, g, n, "HOOP_ALLREDUCE");
        st = hoop_allreduce(e->comm, src, op->recv[0], r0->p.count, r0->p.dtype, r0->p.op);
        tl_all(e, g, n, NULL);
        count_collective(e, 1);
        if (st)
            return st;
        return scale_any(e, r0->p.name, op->recv[0], r0->p.count, r0->p.dtype, r0->p.post,
                         op->recv_dev);
    }
    size_t total = 0;
    const eng_op_t *dev_op = NULL; /* the first of this rank's with device buffers */
    for (int i = 0; i < n; i++) {
        total += g[i]->p.count;
        if (!dev_op && g[i]->op && (g[i]->op->send_dev || g[i]->op->recv_dev))
            dev_op = g[i]->op;
    }
    int dev = dev_op != NULL;
    if (dev && (st = use_gpu_of(e, r0->p.name, dev_op)))
        return st;
    /* A group with device buffers is fused on the GPU (which group a
     * tensor is in was agreed by every rank; where it is fused is this
     * rank's own business). */
    uint8_t *buf;
    int temp = 0;
    if ((st = dev ? dscratch(e, total * es, &buf) : scratch(e, total * es, &buf, &temp)))
        return st;
    tl_all(e, g, n, "MEMCPY_IN_FUSION_BUFFER");
    size_t off = 0;
    for (int i = 0; i < n && !st; i++)
        for (int s = 0; s < nseg(g[i]) && !st; s++) {
            size_t b = seg_count(g[i], s) * es;
            if (!g[i]->op && !dev) {
                memset(buf + off, 0, b); /* a joined rank gives zeros */
            } else if (!g[i]->op) {
                char why[256];
                if (hoop_gpu_memset(buf + off, 0, b, why, sizeof(why)))
                    st = hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: %s", e->rank, why);
            } else {
                st = copy_any(e, g[i]->p.name, buf + off, g[i]->op->send[s], b, dev);
            }
            off += b;
        }
    if (!st)
        st = scale_any(e, r0->p.name, buf, total, r0->p.dtype, r0->p.pre, dev);
    tl_all(e, g, n, NULL);
    if (st) {
        if (temp)
            free(buf);
        return st;
    }
    tl_all(e, g, n, "HOOP_ALLREDUCE");
    st = hoop_allreduce(e->comm, buf, buf, total, r0->p.dtype, r0->p.op);
    tl_all(e, g, n, NULL);
    count_collective(e, n);
    if (!st)
        st = scale_any(e, r0->p.name, buf, total, r0->p.dtype, r0->p.post, dev);
    if (!st) {
        tl_all(e, g, n, "MEMCPY_OUT_FUSION_BUFFER");
        off = 0;
        for (int i = 0; i < n && !st; i++)
            for (int s = 0; s < nseg(g[i]) && !st; s++) {
                size_t b = seg_count(g[i], s) * es;
                if (g[i]->op && b)
                    st = copy_any(e, g[i]->p.name, g[i]->op->recv[s], buf + off, b, dev);
                off += b;
            }
        tl_all(e, g, n, NULL);
    }
    if (temp)
        free(buf);
    return st;
}

/* A tensor of at least this many bytes is reduced where it lies, alone:
 * copying it into the fusion buffer and out again costs more than the one
 * collective it would save (a MiB takes about as long to copy in and out
 * as a collective's fixed cost over a few ranks), and the copies, on this
 * thread, are serial with the allreduces. */
#define ENG_ALONE_BYTES (1u << 20)

static int runs_alone(const struct eng_resp *r)
{
    return !r->p.nvals && r->p.count * hoop_dtype_size(r->p.dtype) >= ENG_ALONE_BYTES;
}

static int same_fusion(const struct eng_resp *a, const struct eng_resp *b)
{
    return !runs_alone(b) && !b->done && !b->err && b->p.kind == EK_ALLREDUCE &&
           a->p.dtype == b->p.dtype && a->p.op == b->p.op && a->p.pre == b->p.pre &&
           a->p.post == b->p.post && a->p.device == b->p.device;
}

/* The output of an allgather or alltoall, bytes long: on the GPU of the
 * caller's sendbuf where that is device memory, so that device data stays
 * there, else on the host. */
static hoop_status_t out_alloc(struct hoop_engine *e, eng_op_t *op, const char *name,
                               size_t bytes, void **out)
{
    op->out_on_gpu = op->send_dev;
    *out = NULL;
    if (!op->out_on_gpu) {
        if (!(*out = malloc(bytes ? bytes : 1)))
            return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': out of memory for %zu "
                              "bytes of output", e->rank, name, bytes);
        return HOOP_OK;
    }
    hoop_status_t st = use_gpu_of(e, name, op);
    char why[256];
    if (!st && hoop_gpu_malloc(out, bytes ? bytes : 1, why, sizeof(why)))
        st = hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': %zu bytes of output on the GPU: "
                        "%s", e->rank, name, bytes, why);
    return st;
}

void eng_out_free(const eng_op_t *op, void *out)
{
    if (op->out_on_gpu)
        hoop_gpu_free(out);
    else
        free(out);
}

static hoop_status_t run_allgather(struct hoop_engine *e, struct eng_resp *r)
{
    eng_op_t *op = r->op;
    size_t es = hoop_dtype_size(r->p.dtype);
    size_t *counts = malloc(sizeof(size_t) * 2 * (size_t)e->size);
    if (!counts)
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
    size_t *displs = counts + e->size;
    size_t total = 0, limit = (SIZE_MAX / 4) / es;
    int too_much = 0;
    /* Sizes came from the other ranks: refuse what cannot be allocated
     * (every rank finds the same, so every rank fails it alike). */
    for (int i = 0; i < e->size; i++) {
        if (r->p.row && r->rows[i] > limit / r->p.row)
            too_much = 1;
        counts[i] = too_much ? 0 : (size_t)(r->rows[i] * r->p.row);
        displs[i] = total;
        if (counts[i] > limit - total)
            too_much = 1;
        else
            total += counts[i];
    }
    if (too_much) {
        free(counts);
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: '%s': the ranks' rows add up to too "
                          "much to allocate",
                          e->rank, r->p.name);
    }
    uint64_t *rows = malloc(8 * (size_t)e->size);
    void *outv = NULL;
    hoop_status_t st = rows ? out_alloc(e, op, r->p.name, total * es, &outv)
                            : hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
    uint8_t *out = outv;
    if (st) {
        free(counts);
        free(rows);
        return st;
    }
    memcpy(rows, r->rows, 8 * (size_t)e->size);
    /* With no rows of its own, this rank's block is empty: the block's
     * place in the output (in place, nothing read) stands for sendbuf, on
     * the output's side of the host/device line. */
    const void *send = counts[e->rank] ? op->send[0] : out + displs[e->rank] * es;
    struct eng_resp *g[1] = {r};
    tl_all(e, g, 1, "HOOP_ALLGATHERV");
    st = total ? hoop_allgatherv(e->comm, send, out, counts, displs, r->p.dtype) : HOOP_OK;
    tl_all(e, g, 1, NULL);
    if (total)
        count_collective(e, 1);
    free(counts);
    if (st) {
        eng_out_free(op, out);
        free(rows);
        return st;
    }
    op->out = out;
    op->out_count = total;
    op->counts = rows;
    op->ncounts = e->size;
    return HOOP_OK;
}

static hoop_status_t run_alltoall(struct hoop_engine *e, struct eng_resp *r)
{
    eng_op_t *op = r->op;
    int n = e->size, me = e->rank;
    if (n < 1)
        return hoop_error(HOOP_ERR_INVALID, "engine: no ranks");
    size_t es = hoop_dtype_size(r->p.dtype);
    const uint64_t *S = r->splits; /* S[i*n+j]: what rank i sends rank j */
    uint64_t mine = 0, moved = 0;
    for (int i = 0; i < n; i++)
        mine += S[(size_t)i * n + me];
    for (int i = 0; i < n * n; i++)
        moved |= S[i];
    if (mine > (SIZE_MAX / 4) / es)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': splits too large", e->rank,
                          r->p.name);
    /* sc, sd, rc, rd: the per peer counts and offsets of hoop_alltoallv;
     * the blocks one after the other on both sides, so the output needs no
     * copy and nothing is padded. */
    size_t *v = malloc(4 * sizeof(size_t) * (size_t)n);
    uint64_t *counts = malloc(8 * (size_t)n);
    void *out = NULL;
    hoop_status_t st = v && counts ? out_alloc(e, op, r->p.name, (size_t)mine * es, &out)
                                   : hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': out of "
                                                "memory", e->rank, r->p.name);
    if (st) {
        free(v);
        free(counts);
        return st;
    }
    size_t *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n, so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        sc[j] = (size_t)S[(size_t)me * n + j];
        sd[j] = so;
        so += sc[j];
        rc[j] = (size_t)S[(size_t)j * n + me];
        rd[j] = ro;
        ro += rc[j];
        counts[j] = rc[j];
    }
    struct eng_resp *g[1] = {r};
    tl_all(e, g, 1, "HOOP_ALLTOALL");
    /* The negotiation agreed on every rank's splits: a call with nothing
     * to move anywhere is skipped on every rank alike. */
    /* Sending nothing, this rank may have no sendbuf: the output (nothing
     * of it read) stands for it, on the output's side of the host/device
     * line. */
    const void *send = op->send[0] ? op->send[0] : out;
    st = moved ? hoop_alltoallv(e->comm, send, sc, sd, out, rc, rd, r->p.dtype) : HOOP_OK;
    tl_all(e, g, 1, NULL);
    if (moved)
        count_collective(e, 1);
    free(v);
    if (st) {
        eng_out_free(op, out);
        free(counts);
        return st;
    }
    op->out = out;
    op->out_count = (size_t)mine;
    op->counts = counts;
    op->ncounts = n;
    return HOOP_OK;
}

static hoop_status_t run_reduce_scatter(struct hoop_engine *e, struct eng_resp *r)
{
    eng_op_t *op = r->op;
    size_t es = hoop_dtype_size(r->p.dtype);
    /* Equal blocks (p.count each), or a count per rank (p.vals; p.count is
     * then their sum). */
    int uneven = r->p.nvals != 0;
    size_t all = uneven ? (size_t)r->p.count : (size_t)r->p.count * (size_t)e->size;
    size_t mine = uneven ? (size_t)r->p.vals[e->rank] : (size_t)r->p.count;
    size_t *counts = NULL;
    if (uneven) {
        counts = malloc(sizeof(size_t) * (size_t)e->size);
        if (!counts)
            return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': out of memory", e->rank,
                              r->p.name);
        for (int k = 0; k < e->size; k++)
            counts[k] = (size_t)r->p.vals[k];
    }
    const void *src = op->send[0];
    void *tmp = NULL;
    int dev = op->send_dev || op->recv_dev;
    hoop_status_t st = dev ? use_gpu_of(e, r->p.name, op) : HOOP_OK;
    if (!st && r->p.pre != 1.0 && all) {
        /* Scaled in a copy, where the input lives. */
        char why[256];
        if (dev && hoop_gpu_malloc(&tmp, all * es, why, sizeof(why)))
            st = hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': %s", e->rank, r->p.name, why);
        else if (!dev && !(tmp = malloc(all * es)))
            st = hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': out of memory", e->rank,
                            r->p.name);
        if (!st)
            st = copy_any(e, r->p.name, tmp, src, all * es, dev);
        if (!st)
            st = scale_any(e, r->p.name, tmp, all, r->p.dtype, r->p.pre, dev);
        src = tmp;
    }
    if (st) {
        dev ? hoop_gpu_free(tmp) : free(tmp);
        free(counts);
        return st;
    }
    struct eng_resp *g[1] = {r};
    tl_all(e, g, 1, "HOOP_REDUCESCATTER");
    st = uneven ? hoop_reduce_scatterv(e->comm, src, op->recv[0], counts, r->p.dtype, r->p.op)
                : hoop_reduce_scatter(e->comm, src, op->recv[0], mine, r->p.dtype, r->p.op);
    tl_all(e, g, 1, NULL);
    count_collective(e, 1);
    dev ? hoop_gpu_free(tmp) : free(tmp);
    free(counts);
    if (!st)
        st = scale_any(e, r->p.name, op->recv[0], mine, r->p.dtype, r->p.post, op->recv_dev);
    return st;
}

static hoop_status_t run_one(struct hoop_engine *e, struct eng_resp *r)
{
    struct eng_resp *g[1] = {r};
    hoop_status_t st = HOOP_OK;
    tl_all(e, g, 1, NULL); /* QUEUE */
    if (!r->op && r->p.kind != EK_JOIN)
        return hoop_error(HOOP_ERR_PEER,
                          "engine rank %d: '%s' (%s) is to run here but this rank never enqueued "
                          "it: the ranks' negotiation tables differ (a bug)",
                          e->rank, r->p.name, eng_kind_name(r->p.kind));
    switch (r->p.kind) {
    case EK_ALLGATHER: st = run_allgather(e, r); break;
    case EK_BROADCAST:
        tl_all(e, g, 1, "HOOP_BROADCAST");
        st = hoop_broadcast(e->comm, r->op->recv[0], r->op->recv[0], (size_t)r->p.count, r->p.dtype,
                            r->p.root);
        tl_all(e, g, 1, NULL);
        count_collective(e, 1);
        break;
    case EK_ALLTOALL: st = run_alltoall(e, r); break;
    case EK_REDUCE_SCATTER: st = run_reduce_scatter(e, r); break;
    case EK_BARRIER:
        tl_all(e, g, 1, "HOOP_BARRIER");
        st = hoop_barrier(e->comm);
        tl_all(e, g, 1, NULL);
        count_collective(e, 1);
        break;
    case EK_SPLIT:
        tl_all(e, g, 1, "HOOP_SPLIT");
        st = hoop_comm_split(e->comm, r->op->split_color, r->op->split_key, &r->op->split_comm);
        tl_all(e, g, 1, NULL);
        count_collective(e, 1);
        break;
    case EK_JOIN:
        if (r->op)
            r->op->last_joined = r->last_joined;
        break;
    default: break;
    }
    return st;
}

hoop_status_t eng_execute(struct hoop_engine *e)
{
    struct eng_resp **g = NULL;
    int gcap = 0;
    hoop_status_t st = HOOP_OK;
    for (int i = 0; i < e->nresp && !st; i++) {
        struct eng_resp *r = &e->resp[i];
        if (r->done)
            continue;
        if (hoop_log_enabled(HOOP_LOG_DEBUG))
            hoop_log(HOOP_LOG_DEBUG, "engine rank %d: runs '%s' (%s%s%s)", e->rank, r->p.name,
                     eng_kind_name(r->p.kind), r->from_cache ? ", cached" : "",
                     r->err ? ", an error" : "");
        if (r->err) {
            if (e->tl) {
                eng_timeline_end(e->tl, r->p.name, NULL); /* QUEUE */
                eng_timeline_end(e->tl, r->p.name, "{\"error\": true}");
            }
            finish_all(e, &r, 1, r->err, r->msg);
            continue;
        }
        int n = 1;
        if (r->p.kind == EK_ALLREDUCE) {
            if (gcap < e->nresp) {
                struct eng_resp **ng = realloc(g, sizeof(*g) * (size_t)e->nresp);
                if (!ng) {
                    st = hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
                    break;
                }
                g = ng;
                gcap = e->nresp;
            }
            g[0] = r;
            size_t es = hoop_dtype_size(r->p.dtype);
            uint64_t bytes = r->p.count * es;
            /* Later responses that fit join this one, skipping those that
             * do not match (Horovod's look-ahead), in list order. */
            for (int j = i + 1; j < e->nresp && e->fusion_threshold && !runs_alone(r); j++) {
                struct eng_resp *q = &e->resp[j];
                if (!same_fusion(r, q) || bytes + q->p.count * es > e->fusion_threshold)
                    continue;
                bytes += q->p.count * es;
                g[n++] = q;
            }
            /* A fused group on the host (the agreed kind: a group is of one
             * kind): every rank reserves its fusion buffer here, whatever
             * its own buffers (fusion_reserve). */
            if ((n > 1 || r->p.nvals) && r->p.device == ENG_HOST && bytes <= e->fusion_threshold)
                st = fusion_reserve(e, bytes);
            if (!st)
                st = run_allreduce(e, g, n);
        } else {
            st = run_one(e, r);
        }
        struct eng_resp **members = r->p.kind == EK_ALLREDUCE ? g : &r;
        if (st && r->p.kind == EK_SPLIT) {
            /* A group that did not form fails the split on every rank
             * (hoop_comm_split: its rank with its own status); the engine
             * goes on where its own communicator still works, as a
             * barrier tells, and stops where it does not. */
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", hoop_last_error());
            hoop_status_t bst = hoop_barrier(e->comm);
            if (bst == HOOP_OK) {
                finish_all(e, members, n, st, msg);
                st = HOOP_OK;
                continue;
            }
            st = bst;
        }
        if (st == HOOP_ERR_INVALID) {
            /* Refused before any collective ran, alike on every rank (the
             * same response, the same sizes): that operation fails, the
             * engine goes on. */
            char msg[1024];
            snprintf(msg, sizeof(msg), "%s", hoop_last_error());
            finish_all(e, members, n, st, msg);
            st = HOOP_OK;
            continue;
        }
        if (st)
            break;
        for (int k = 0; k < n; k++) {
            struct eng_resp *m = members[k];
            if (e->tl)
                eng_timeline_end(e->tl, m->p.name, NULL); /* the operation */
            if (!m->from_cache)
                eng_cache_put(e, m);
            if (m->p.kind == EK_ALLREDUCE)
                eng_tune_note(e, m->p.name, m->p.count * hoop_dtype_size(m->p.dtype));
        }
        finish_all(e, members, n, HOOP_OK, NULL);
    }
    free(g);
    return st;
}
