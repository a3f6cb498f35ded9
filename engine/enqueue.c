/* enqueue.c - hoop_engine.h's calls that enqueue an operation: their
 * checks (names, types, counts, the caller's shape against the counts),
 * the operation made from them, and its hand-over to the engine's thread
 * (api.c keeps the handles it returns). */
#include "engine/engine.h"
#include "common/clock.h"
#include "common/status.h"
#include "gpu/gpu.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static hoop_status_t check_common(hoop_engine_t *e, const char *name, int dtype, int has_op, int op,
                                  double pre, double post, hoop_engine_handle_t **handle)
{
    if (!e || !handle)
        return hoop_error(HOOP_ERR_INVALID, "engine: %s is NULL", !e ? "the engine" : "handle");
    *handle = NULL;
    if (!name || !*name || strlen(name) > HOOP_ENGINE_NAME_MAX)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: an operation needs a name of 1 to %d bytes (got %s)",
                          e->rank, HOOP_ENGINE_NAME_MAX, name ? "a longer one" : "NULL");
    if (dtype < 0 || dtype >= HOOP_DTYPE_COUNT)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': unknown dtype %d", e->rank, name,
                          dtype);
    if (has_op && (op < 0 || op >= HOOP_OP_COUNT))
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': unknown op %d", e->rank, name,
                          op);
    if (!isfinite(pre) || !isfinite(post))
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': scale factors must be finite",
                          e->rank, name);
    return HOOP_OK;
}

static eng_op_t *op_new(int kind, const char *name, int dtype, int op, double pre, double post,
                        hoop_engine_cb_t cb, void *cb_arg)
{
    eng_op_t *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->p.kind = (uint8_t)kind;
    o->p.dtype = (uint8_t)dtype;
    o->p.op = (uint8_t)op;
    o->p.root = -1;
    o->p.pre = pre;
    o->p.post = post;
    memcpy(o->p.name, name, strnlen(name, HOOP_ENGINE_NAME_MAX)); /* o is zeroed */
    o->send = &o->send1;
    o->recv = &o->recv1;
    o->cb = cb;
    o->cb_arg = cb_arg;
    o->refs = 2;
    o->last_joined = -1;
    o->gpu = -1;
    eng_mutex_init(&o->mu);
    pthread_cond_init(&o->cv, NULL);
    return o;
}

/* Where one tensor's buffers lie (either may be NULL: none given), asked
 * here once for the operation's life: the ranks compare it (p.device, set
 * in submit_shaped) and execute.c works from it without asking again. One
 * question where the sendbuf is the recvbuf, none where no GPU can be
 * used. Device memory is the GPU's; pinned and managed memory count as
 * host memory, as everywhere in the engine. Its GPU, the first time a
 * buffer is device memory: the sendbuf's before the recvbuf's where
 * send_first. 1 when either buffer is device memory. */
static int tensor_mem(eng_op_t *o, const void *send, const void *recv, int send_first)
{
    struct hoop_mem ks, kr;
    hoop_gpu_mem_kinds(send, recv, &ks, &kr);
    int sd = ks.kind == HOOP_MEM_DEVICE, rd = kr.kind == HOOP_MEM_DEVICE;
    o->send_dev |= (uint8_t)sd;
    o->recv_dev |= (uint8_t)rd;
    if (o->gpu < 0 && (sd || rd))
        o->gpu = send_first ? (sd ? ks.device : kr.device) : (rd ? kr.device : ks.device);
    return sd || rd;
}

static hoop_status_t no_memory(hoop_engine_t *e, const char *name)
{
    return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: '%s': out of memory to enqueue it", e->rank,
                      name);
}

/* The caller's shape (hoop_engine_op_args_t), checked against the
 * operation's counts: dims[0] is `rows` and the rest multiply to row_elems
 * where rows is not (size_t)-1, else all of them multiply to `total`.
 * HOOP_OK, or HOOP_ERR_INVALID naming what does not add up. */
static hoop_status_t shape_check(const hoop_engine_t *e, const char *name,
                                 const hoop_engine_op_args_t *a, uint64_t total, size_t rows,
                                 size_t row_elems)
{
    if (a->ndims < 0 || a->ndims > HOOP_ENGINE_DIMS_MAX)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: '%s': a shape of %d dimensions (0 to %d can be given)",
                          e->rank, name, (int)a->ndims, HOOP_ENGINE_DIMS_MAX);
    if (!a->ndims)
        return HOOP_OK;
    int by_rows = rows != (size_t)-1;
    uint64_t prod = 1;
    for (int i = 0; i < a->ndims; i++) {
        if (a->dims[i] < 0)
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': dimension %d is %lld",
                              e->rank, name, i, (long long)a->dims[i]);
        if (i == 0 && by_rows)
            continue;
        if (__builtin_mul_overflow(prod, (uint64_t)a->dims[i], &prod))
            prod = UINT64_MAX;
    }
    if (by_rows && ((uint64_t)a->dims[0] != rows || prod != row_elems))
        return hoop_error(
            HOOP_ERR_INVALID,
            "engine rank %d: '%s': the shape's first dimension (%lld) and the "
            "elements of the others (%llu) are not the %zu rows of %zu elements given",
            e->rank, name, (long long)a->dims[0], (unsigned long long)prod, rows, row_elems);
    if (!by_rows && prod != total)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: '%s': the shape (%d dimensions) holds %llu elements "
                          "where the operation has %llu",
                          e->rank, name, (int)a->ndims, (unsigned long long)prod,
                          (unsigned long long)total);
    return HOOP_OK;
}

/* Hand op to the engine's thread, or refuse it (and free it) when the name
 * is already in flight or the engine has stopped; a->ndims > 0: op carries
 * that shape. */
static hoop_status_t submit_shaped(hoop_engine_t *e, eng_op_t *op, const hoop_engine_op_args_t *a,
                                   hoop_engine_handle_t **handle)
{
    if (a && a->ndims > 0) {
        op->p.ndims = (uint8_t)a->ndims;
        for (int i = 0; i < a->ndims; i++)
            op->p.dims[i] = (uint64_t)a->dims[i];
    }
    /* Where this rank's data lies, for the ranks to compare (a rank that
     * gives none takes no side). */
    op->p.device = (op->send_dev || op->recv_dev) && eng_gives_data(&op->p) ? ENG_DEVICE : ENG_HOST;
    op->t_enq_ns = hoop_now_ns();
    pthread_mutex_lock(&e->mu);
    hoop_status_t st = HOOP_OK;
    if (e->dead)
        st = hoop_error(e->dead, "%s", e->dead_msg);
    else if (e->stop || e->stopped)
        st = hoop_error(HOOP_ERR_ABORTED, "engine rank %d: '%s' enqueued after the engine stopped",
                        e->rank, op->p.name);
    else if (eng_find_inflight(e, op->p.name))
        st = hoop_error(HOOP_ERR_INVALID,
                        "engine rank %d: '%s' is already in flight: a name may be enqueued again "
                        "only once its previous operation has completed",
                        e->rank, op->p.name);
    if (st) {
        pthread_mutex_unlock(&e->mu);
        op->refs = 1;
        eng_op_unref(op);
        return st;
    }
    unsigned h = eng_hash(op->p.name);
    op->hnext = e->inflight[h];
    e->inflight[h] = op;
    op->next = NULL;
    if (e->q_tail)
        e->q_tail->next = op;
    else
        e->q_head = op;
    e->q_tail = op;
    __atomic_add_fetch(&e->pokes, 1, __ATOMIC_RELEASE);
    if (e->quiet) {
        /* One wake is enough: the thread takes the whole queue. */
        e->quiet = 0;
        e->wakes++;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->mu);
    *handle = op;
    return HOOP_OK;
}

static hoop_status_t submit(hoop_engine_t *e, eng_op_t *op, hoop_engine_handle_t **handle)
{
    return submit_shaped(e, op, NULL, handle);
}

hoop_status_t hoop_engine_allreduce(hoop_engine_t *e, const char *name, const void *sendbuf,
                                    void *recvbuf, size_t count, hoop_dtype_t dtype, hoop_op_t op,
                                    double pre, double post, hoop_engine_cb_t cb, void *cb_arg,
                                    hoop_engine_handle_t **handle)
{
    const void *s[1] = {sendbuf};
    void *r[1] = {recvbuf};
    return hoop_engine_grouped_allreduce(e, name, -1, s, r, &count, dtype, op, pre, post, cb,
                                         cb_arg, handle);
}

/* A group's shapes (hoop_engine_grouped_allreduce_shaped) checked against
 * its counts: the words they take in p.vals after the counts, or 0 with
 * the sentence set. */
static size_t group_shape_words(const hoop_engine_t *e, const char *name, int n,
                                const size_t *counts, const int *ndims, const size_t *dims)
{
    size_t words = 0, at = 0;
    for (int i = 0; i < n; i++) {
        if (ndims[i] < 0 || ndims[i] > HOOP_ENGINE_DIMS_MAX) {
            hoop_error(HOOP_ERR_INVALID,
                       "engine rank %d: '%s': tensor %d of the group has a shape of %d "
                       "dimensions (0 to %d can be given)",
                       e->rank, name, i, ndims[i], HOOP_ENGINE_DIMS_MAX);
            return 0;
        }
        uint64_t prod = 1;
        for (int d = 0; d < ndims[i]; d++)
            if (__builtin_mul_overflow(prod, (uint64_t)dims[at + (size_t)d], &prod))
                prod = UINT64_MAX;
        if (ndims[i] && prod != counts[i]) {
            hoop_error(HOOP_ERR_INVALID,
                       "engine rank %d: '%s': tensor %d of the group: its shape (%d "
                       "dimensions) holds %llu elements where its count is %zu",
                       e->rank, name, i, ndims[i], (unsigned long long)prod, counts[i]);
            return 0;
        }
        at += (size_t)ndims[i];
        words += 1 + (size_t)(ndims[i] ? ndims[i] : 1); /* none: one dimension of its count */
    }
    return words;
}

/* n < 0: a plain allreduce (one segment, no group); sh: its shape, or NULL;
 * gndims, gdims: a group's shapes, or NULL. */
static hoop_status_t allreduce_sh(hoop_engine_t *e, const char *name, int n,
                                  const void *const *sendbufs, void *const *recvbufs,
                                  const size_t *counts, hoop_dtype_t dtype, hoop_op_t op,
                                  double pre, double post, hoop_engine_cb_t cb, void *cb_arg,
                                  hoop_engine_handle_t **handle, const hoop_engine_op_args_t *sh,
                                  const int *gndims, const size_t *gdims)
{
    hoop_status_t st = check_common(e, name, dtype, 1, op, pre, post, handle);
    if (st)
        return st;
    int grouped = n >= 0;
    int nseg = grouped ? n : 1;
    if (nseg < 1 || nseg > (int)ENG_VALS_MAX || !sendbufs || !recvbufs || !counts)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: '%s': a group needs 1 to %u tensors and their buffers "
                          "and counts (got %d)",
                          e->rank, name, ENG_VALS_MAX, n);
    size_t es = hoop_dtype_size(dtype);
    uint64_t total = 0;
    for (int i = 0; i < nseg; i++) {
        if (counts[i] > (SIZE_MAX / 2) / es - total)
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': counts too large", e->rank,
                              name);
        total += counts[i];
        if (counts[i] && (!sendbufs[i] || !recvbufs[i]))
            return hoop_error(HOOP_ERR_INVALID,
                              "engine rank %d: '%s': tensor %d has %zu elements and a NULL buffer",
                              e->rank, name, i, counts[i]);
    }
    if (sh && (st = shape_check(e, name, sh, total, (size_t)-1, 0)))
        return st;
    size_t shape_words = 0;
    if (grouped && gndims) {
        if (!gdims)
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': ndims given, dims NULL",
                              e->rank, name);
        if (!(shape_words = group_shape_words(e, name, nseg, counts, gndims, gdims)))
            return HOOP_ERR_INVALID;
    }
    eng_op_t *o = op_new(EK_ALLREDUCE, name, dtype, op, pre, post, cb, cb_arg);
    if (!o)
        return no_memory(e, name);
    o->p.count = total;
    if (grouped) {
        o->p.nvals = (uint32_t)nseg;
        o->p.nshape = (uint32_t)shape_words;
        o->p.vals = malloc(sizeof(uint64_t) * ((size_t)nseg + shape_words));
        o->send = malloc(sizeof(void *) * (size_t)nseg);
        o->recv = malloc(sizeof(void *) * (size_t)nseg);
        if (!o->p.vals || !o->send || !o->recv) {
            o->refs = 1;
            eng_op_unref(o);
            return no_memory(e, name);
        }
    }
    /* A group's tensors lie on one side on this rank, all on the GPU or all
     * on the host (a tensor of no elements takes no side): the ranks
     * compare one kind for the group, and it is fused on that side. */
    int first = -1, first_dev = 0;
    for (int i = 0; i < nseg; i++) {
        if (grouped)
            o->p.vals[i] = counts[i];
        o->send[i] = sendbufs[i];
        o->recv[i] = recvbufs[i];
        if (!counts[i])
            continue;
        int dev = tensor_mem(o, sendbufs[i], recvbufs[i], 0);
        if (first < 0) {
            first = i;
            first_dev = dev;
        } else if (dev != first_dev) {
            o->refs = 1;
            eng_op_unref(o);
            return hoop_error(HOOP_ERR_INVALID,
                              "engine rank %d: '%s': tensor %d of the group is %s memory but "
                              "tensor %d is %s memory: a group's tensors must all be on the GPU "
                              "or all on the host (enqueue them as two groups, or copy some "
                              "across)",
                              e->rank, name, first, eng_device_str(first_dev), i,
                              eng_device_str(dev));
        }
    }
    if (shape_words) {
        uint64_t *w = o->p.vals + nseg;
        for (int i = 0, at = 0; i < nseg; at += gndims[i], i++) {
            *w++ = (uint64_t)(gndims[i] ? gndims[i] : 1);
            if (!gndims[i])
                *w++ = counts[i];
            for (int d = 0; d < gndims[i]; d++)
                *w++ = gdims[at + d];
        }
    }
    return submit_shaped(e, o, sh, handle);
}

hoop_status_t hoop_engine_grouped_allreduce(hoop_engine_t *e, const char *name, int n,
                                            const void *const *sendbufs, void *const *recvbufs,
                                            const size_t *counts, hoop_dtype_t dtype, hoop_op_t op,
                                            double pre, double post, hoop_engine_cb_t cb,
                                            void *cb_arg, hoop_engine_handle_t **handle)
{
    return allreduce_sh(e, name, n, sendbufs, recvbufs, counts, dtype, op, pre, post, cb, cb_arg,
                        handle, NULL, NULL, NULL);
}

hoop_status_t hoop_engine_grouped_allreduce_shaped(
    hoop_engine_t *e, const char *name, int n, const void *const *sendbufs, void *const *recvbufs,
    const size_t *counts, const int *ndims, const size_t *dims, hoop_dtype_t dtype, hoop_op_t op,
    double pre, double post, hoop_engine_cb_t cb, void *cb_arg, hoop_engine_handle_t **handle)
{
    if (n < 1 || !ndims)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine: '%s': a shaped group needs 1 or more "
                          "tensors and their ndims (got %d%s)",
                          name ? name : "", n, ndims ? "" : ", ndims NULL");
    return allreduce_sh(e, name, n, sendbufs, recvbufs, counts, dtype, op, pre, post, cb, cb_arg,
                        handle, NULL, ndims, dims);
}

/* 1 when an args struct cannot be read (NULL, or of another version's
 * size), with the error set, and in *status too where the struct is at
 * least as large as this library's. */
static int args_refused(const void *a, const size_t *struct_size, size_t want, int32_t *status,
                        const char *fn)
{
    if (!a) {
        hoop_error(HOOP_ERR_INVALID, "engine: %s needs its struct (got NULL)", fn);
        return 1;
    }
    if (*struct_size == want)
        return 0;
    hoop_status_t st = hoop_error(HOOP_ERR_INVALID,
                                  "engine: %s: struct_size is %zu, this library's struct is %zu "
                                  "bytes: the caller was built for another version of "
                                  "hoop_engine.h",
                                  fn, *struct_size, want);
    if (*struct_size >= want)
        *status = st;
    return 1;
}

hoop_engine_handle_t *hoop_engine_allreduce_args(hoop_engine_allreduce_args_t *a, const char *name)
{
    if (args_refused(a, a ? &a->struct_size : NULL, sizeof(*a), a ? &a->status : NULL,
                     "allreduce_args"))
        return NULL;
    hoop_engine_handle_t *h = NULL;
    a->status = hoop_engine_allreduce(a->engine, name, a->sendbuf, a->recvbuf, a->count,
                                      (hoop_dtype_t)a->dtype, (hoop_op_t)a->op, a->prescale,
                                      a->postscale, NULL, NULL, &h);
    return a->status == HOOP_OK ? h : NULL;
}

static hoop_status_t allgather_sh(hoop_engine_t *e, const char *name, const void *sendbuf,
                                  size_t rows, size_t row_elems, hoop_dtype_t dtype,
                                  hoop_engine_cb_t cb, void *cb_arg, hoop_engine_handle_t **handle,
                                  const hoop_engine_op_args_t *sh)
{
    hoop_status_t st = check_common(e, name, dtype, 0, 0, 1.0, 1.0, handle);
    if (st)
        return st;
    size_t es = hoop_dtype_size(dtype);
    if (row_elems && rows > (SIZE_MAX / 4) / es / row_elems)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': %zu rows of %zu are too many",
                          e->rank, name, rows, row_elems);
    if (rows && row_elems && !sendbuf)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': sendbuf is NULL", e->rank, name);
    if (sh && (st = shape_check(e, name, sh, 0, rows, row_elems)))
        return st;
    eng_op_t *o = op_new(EK_ALLGATHER, name, dtype, 0, 1.0, 1.0, cb, cb_arg);
    if (!o)
        return no_memory(e, name);
    o->p.count = rows;
    o->p.row = row_elems;
    o->send1 = sendbuf;
    /* (asked even of no rows: the output lies on the sendbuf's side) */
    if (sendbuf)
        tensor_mem(o, sendbuf, NULL, 1);
    return submit_shaped(e, o, sh, handle);
}

hoop_status_t hoop_engine_allgather(hoop_engine_t *e, const char *name, const void *sendbuf,
                                    size_t rows, size_t row_elems, hoop_dtype_t dtype,
                                    hoop_engine_cb_t cb, void *cb_arg,
                                    hoop_engine_handle_t **handle)
{
    return allgather_sh(e, name, sendbuf, rows, row_elems, dtype, cb, cb_arg, handle, NULL);
}

static hoop_status_t broadcast_sh(hoop_engine_t *e, const char *name, void *buf, size_t count,
                                  hoop_dtype_t dtype, int root, hoop_engine_cb_t cb, void *cb_arg,
                                  hoop_engine_handle_t **handle, const hoop_engine_op_args_t *sh)
{
    hoop_status_t st = check_common(e, name, dtype, 0, 0, 1.0, 1.0, handle);
    if (st)
        return st;
    if (root < 0 || root >= e->size)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': root %d is not a rank (0..%d)",
                          e->rank, name, root, e->size - 1);
    if (count && !buf)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': buf is NULL", e->rank, name);
    if (sh && (st = shape_check(e, name, sh, count, (size_t)-1, 0)))
        return st;
    eng_op_t *o = op_new(EK_BROADCAST, name, dtype, 0, 1.0, 1.0, cb, cb_arg);
    if (!o)
        return no_memory(e, name);
    o->p.count = count;
    o->p.root = root;
    o->send1 = buf;
    o->recv1 = buf;
    if (count)
        tensor_mem(o, buf, buf, 1);
    return submit_shaped(e, o, sh, handle);
}

hoop_status_t hoop_engine_broadcast(hoop_engine_t *e, const char *name, void *buf, size_t count,
                                    hoop_dtype_t dtype, int root, hoop_engine_cb_t cb, void *cb_arg,
                                    hoop_engine_handle_t **handle)
{
    return broadcast_sh(e, name, buf, count, dtype, root, cb, cb_arg, handle, NULL);
}

/* The sum of one count per rank, each bounded so that the total's bytes
 * fit: 0, or HOOP_ERR_INVALID naming `what`. */
static hoop_status_t sum_counts(const hoop_engine_t *e, const char *name, const size_t *counts,
                                size_t es, const char *what, uint64_t *total)
{
    *total = 0;
    for (int j = 0; j < e->size; j++) {
        if (counts[j] > (SIZE_MAX / 4) / es - *total)
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': %s too large", e->rank, name,
                              what);
        *total += counts[j];
    }
    return HOOP_OK;
}

/* The operation's per-rank counts (negotiated with it); 0, or -ENOMEM with
 * the operation freed. */
static int op_set_vals(eng_op_t *o, const size_t *counts, int n)
{
    o->p.nvals = (uint32_t)n;
    o->p.vals = malloc(sizeof(uint64_t) * (size_t)n);
    if (!o->p.vals) {
        o->refs = 1;
        eng_op_unref(o);
        return -ENOMEM;
    }
    for (int j = 0; j < n; j++)
        o->p.vals[j] = counts[j];
    return 0;
}

/* splits: elements to each rank; or, with sh, rows of row_elems elements
 * (the ranks then also compare row_elems). */
static hoop_status_t alltoall_sh(hoop_engine_t *e, const char *name, const void *sendbuf,
                                 const size_t *splits, size_t row_elems, hoop_dtype_t dtype,
                                 hoop_engine_cb_t cb, void *cb_arg, hoop_engine_handle_t **handle,
                                 const hoop_engine_op_args_t *sh)
{
    hoop_status_t st = check_common(e, name, dtype, 0, 0, 1.0, 1.0, handle);
    if (st)
        return st;
    if (!splits)
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': splits is NULL", e->rank, name);
    size_t es = hoop_dtype_size(dtype);
    size_t *elems = NULL;
    if (sh) {
        /* rows to elements, each bounded as sum_counts bounds them */
        if (!(elems = malloc(sizeof(size_t) * (size_t)e->size)))
            return no_memory(e, name);
        uint64_t rows = 0;
        for (int j = 0; j < e->size; j++) {
            size_t per = row_elems ? row_elems : 1;
            if (splits[j] > (SIZE_MAX / 4) / es / per - rows) {
                free(elems);
                return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': splits too large",
                                  e->rank, name);
            }
            rows += splits[j];
            elems[j] = splits[j] * row_elems;
        }
        if ((st = shape_check(e, name, sh, 0, (size_t)rows, row_elems))) {
            free(elems);
            return st;
        }
    }
    const size_t *counts = elems ? elems : splits;
    uint64_t total;
    if ((st = sum_counts(e, name, counts, es, "splits", &total))) {
        free(elems);
        return st;
    }
    if (total && !sendbuf) {
        free(elems);
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': sendbuf is NULL", e->rank, name);
    }
    eng_op_t *o = op_new(EK_ALLTOALL, name, dtype, 0, 1.0, 1.0, cb, cb_arg);
    int bad = !o || op_set_vals(o, counts, e->size);
    free(elems);
    if (bad)
        return no_memory(e, name);
    o->p.count = total;
    o->p.row = sh ? row_elems : 0;
    o->send1 = sendbuf;
    /* (asked even of nothing to send: the output lies on the sendbuf's side) */
    if (sendbuf)
        tensor_mem(o, sendbuf, NULL, 1);
    return submit_shaped(e, o, sh, handle);
}

hoop_status_t hoop_engine_alltoall(hoop_engine_t *e, const char *name, const void *sendbuf,
                                   const size_t *splits, hoop_dtype_t dtype, hoop_engine_cb_t cb,
                                   void *cb_arg, hoop_engine_handle_t **handle)
{
    return alltoall_sh(e, name, sendbuf, splits, 0, dtype, cb, cb_arg, handle, NULL);
}

/* recvcounts NULL: every rank gets recvcount elements; else recvcounts[r]. */
static hoop_status_t reduce_scatter_sh(hoop_engine_t *e, const char *name, const void *sendbuf,
                                       void *recvbuf, size_t recvcount, const size_t *recvcounts,
                                       hoop_dtype_t dtype, hoop_op_t op, double pre, double post,
                                       hoop_engine_cb_t cb, void *cb_arg,
                                       hoop_engine_handle_t **handle,
                                       const hoop_engine_op_args_t *sh)
{
    hoop_status_t st = check_common(e, name, dtype, 1, op, pre, post, handle);
    if (st)
        return st;
    size_t es = hoop_dtype_size(dtype);
    uint64_t total;
    if (recvcounts) {
        if ((st = sum_counts(e, name, recvcounts, es, "recvcounts", &total)))
            return st;
        if ((total && !sendbuf) || (recvcounts[e->rank] && !recvbuf))
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': a buffer is NULL", e->rank,
                              name);
    } else {
        if (recvcount > (SIZE_MAX / 4) / es / (size_t)e->size)
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': recvcount too large",
                              e->rank, name);
        if (recvcount && (!sendbuf || !recvbuf))
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': a buffer is NULL", e->rank,
                              name);
        total = (uint64_t)recvcount * (uint64_t)e->size;
    }
    if (sh && (st = shape_check(e, name, sh, total, (size_t)-1, 0)))
        return st;
    eng_op_t *o = op_new(EK_REDUCE_SCATTER, name, dtype, op, pre, post, cb, cb_arg);
    if (!o)
        return no_memory(e, name);
    o->p.count = recvcounts ? total : recvcount;
    if (recvcounts && op_set_vals(o, recvcounts, e->size))
        return no_memory(e, name);
    o->send1 = sendbuf;
    o->recv1 = recvbuf;
    if (total)
        tensor_mem(o, sendbuf, recvbuf, 1);
    return submit_shaped(e, o, sh, handle);
}

hoop_status_t hoop_engine_reduce_scatter(hoop_engine_t *e, const char *name, const void *sendbuf,
                                         void *recvbuf, size_t recvcount, hoop_dtype_t dtype,
                                         hoop_op_t op, double pre, double post, hoop_engine_cb_t cb,
                                         void *cb_arg, hoop_engine_handle_t **handle)
{
    return reduce_scatter_sh(e, name, sendbuf, recvbuf, recvcount, NULL, dtype, op, pre, post, cb,
                             cb_arg, handle, NULL);
}

hoop_status_t hoop_engine_reduce_scatterv(hoop_engine_t *e, const char *name, const void *sendbuf,
                                          void *recvbuf, const size_t *recvcounts,
                                          hoop_dtype_t dtype, hoop_op_t op, double pre, double post,
                                          hoop_engine_cb_t cb, void *cb_arg,
                                          hoop_engine_handle_t **handle)
{
    if (e && handle && !recvcounts) {
        *handle = NULL;
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: '%s': recvcounts is NULL", e->rank,
                          name ? name : "(NULL)");
    }
    return reduce_scatter_sh(e, name, sendbuf, recvbuf, 0, recvcounts, dtype, op, pre, post, cb,
                             cb_arg, handle, NULL);
}

hoop_engine_handle_t *hoop_engine_enqueue(hoop_engine_op_args_t *a, const char *name)
{
    if (args_refused(a, a ? &a->struct_size : NULL, sizeof(*a), a ? &a->status : NULL, "enqueue"))
        return NULL;
    hoop_engine_handle_t *h = NULL;
    hoop_engine_t *e = a->engine;
    hoop_dtype_t dt = (hoop_dtype_t)a->dtype;
    switch (a->kind) {
    case HOOP_ENGINE_ALLREDUCE: {
        const void *s[1] = {a->sendbuf};
        void *r[1] = {a->recvbuf};
        a->status = allreduce_sh(e, name, -1, s, r, &a->count, dt, (hoop_op_t)a->op, a->prescale,
                                 a->postscale, NULL, NULL, &h, a, NULL, NULL);
        break;
    }
    case HOOP_ENGINE_ALLGATHER:
        a->status =
            allgather_sh(e, name, a->sendbuf, a->count, a->row_elems, dt, NULL, NULL, &h, a);
        break;
    case HOOP_ENGINE_BROADCAST:
        a->status = broadcast_sh(e, name, a->recvbuf, a->count, dt, a->root, NULL, NULL, &h, a);
        break;
    case HOOP_ENGINE_ALLTOALL:
        a->status =
            alltoall_sh(e, name, a->sendbuf, a->counts, a->row_elems, dt, NULL, NULL, &h, a);
        break;
    case HOOP_ENGINE_REDUCE_SCATTER:
        a->status =
            reduce_scatter_sh(e, name, a->sendbuf, a->recvbuf, a->count, a->counts, dt,
                              (hoop_op_t)a->op, a->prescale, a->postscale, NULL, NULL, &h, a);
        break;
    default:
        a->status = hoop_error(HOOP_ERR_INVALID, "engine: enqueue: unknown kind %d", (int)a->kind);
    }
    return a->status == HOOP_OK ? h : NULL;
}

/* An operation that carries no data and no name of the caller's: named by
 * its kind and how many of them this engine has submitted, the same on
 * every rank that makes the same calls. NULL (the sentence set) when out
 * of memory. */
static eng_op_t *op_unnamed(hoop_engine_t *e, int kind, const char *prefix, uint64_t *seq,
                            hoop_engine_cb_t cb, void *cb_arg)
{
    char name[64];
    pthread_mutex_lock(&e->mu);
    unsigned long long k = (unsigned long long)(*seq)++;
    pthread_mutex_unlock(&e->mu);
    snprintf(name, sizeof(name), "%s.%llu", prefix, k);
    eng_op_t *o = op_new(kind, name, HOOP_U8, 0, 1.0, 1.0, cb, cb_arg);
    if (!o)
        no_memory(e, name);
    return o;
}

hoop_status_t hoop_engine_barrier(hoop_engine_t *e, hoop_engine_cb_t cb, void *cb_arg,
                                  hoop_engine_handle_t **handle)
{
    if (!e || !handle)
        return hoop_error(HOOP_ERR_INVALID, "engine: %s is NULL", !e ? "the engine" : "handle");
    eng_op_t *o = op_unnamed(e, EK_BARRIER, "hoop.barrier", &e->barrier_seq, cb, cb_arg);
    return o ? submit(e, o, handle) : HOOP_ERR_SYSTEM;
}

hoop_status_t hoop_engine_split(hoop_engine_t *e, int color, int key, hoop_engine_cb_t cb,
                                void *cb_arg, hoop_engine_handle_t **handle)
{
    if (!e || !handle)
        return hoop_error(HOOP_ERR_INVALID, "engine: %s is NULL", !e ? "the engine" : "handle");
    if (color < HOOP_SPLIT_NONE)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: split: color %d: give 0 or more, or "
                          "HOOP_SPLIT_NONE (-1) to join no group",
                          e->rank, color);
    eng_op_t *o = op_unnamed(e, EK_SPLIT, "hoop.split", &e->split_seq, cb, cb_arg);
    if (!o)
        return HOOP_ERR_SYSTEM;
    o->split_color = color;
    o->split_key = key;
    return submit(e, o, handle);
}

hoop_status_t hoop_engine_join(hoop_engine_t *e, hoop_engine_cb_t cb, void *cb_arg,
                               hoop_engine_handle_t **handle)
{
    if (!e || !handle)
        return hoop_error(HOOP_ERR_INVALID, "engine: %s is NULL", !e ? "the engine" : "handle");
    eng_op_t *o = op_unnamed(e, EK_JOIN, "hoop.join", &e->join_seq, cb, cb_arg);
    return o ? submit(e, o, handle) : HOOP_ERR_SYSTEM;
}
