/* hoop_engine.h - named collectives enqueued from any thread, Horovod-style.
 *
 * An engine owns one communicator and one background thread that runs every
 * collective on it. Any thread enqueues a named operation and gets a handle
 * at once; the ranks may enqueue the same names in different orders. Each
 * cycle (HOOP_CYCLE_TIME) the engines agree on which names every rank has
 * enqueued, check that the ranks agree on what each one is (its kind,
 * dtype, op, root, scale factors, counts and shapes, and whether its data
 * lies in a GPU's device memory or in host memory: pinned and managed
 * memory are host memory here, and a rank that gives no data, such as an
 * allgather's of no rows, takes no side; a disagreement fails that name on
 * every rank with HOOP_ERR_MISMATCH, as Horovod refuses a CPU tensor on one
 * rank against a GPU tensor on another), pack ready
 * allreduces of the same dtype, op and scale factors into one fusion buffer
 * (HOOP_FUSION_THRESHOLD) and run them in one order on every rank. Names that
 * ran before are agreed by one small allreduce (HOOP_CACHE_CAPACITY).
 *
 * ("engine" here is this layer; HOOP_TCP_ENGINE is something else: how the
 * TCP transport moves bytes.)
 *
 * A handle completes once: poll it (hoop_engine_test), wait for it
 * (hoop_engine_wait) or be called back (the callback runs on the engine's
 * thread and must not block or enqueue-and-wait). Every handle is released
 * once with hoop_engine_release, before or after it completed.
 *
 * After a collective fails (a peer died, a deadline passed, an abort) the
 * communicator is broken: every pending handle fails with that collective's
 * status and sentence, and so does every later enqueue.
 */
#ifndef HOOP_ENGINE_H
#define HOOP_ENGINE_H

#include "hoop.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hoop_engine hoop_engine_t;
typedef struct hoop_engine_handle hoop_engine_handle_t;

/* Called once on the engine's thread when h completes, after h is done (it
 * may read the status and output through h; a waiter may return before it
 * runs); h stays valid until released, and at least until it returns. */
typedef void (*hoop_engine_cb_t)(hoop_engine_handle_t *h, hoop_status_t status, void *arg);

/* Names are at most this many bytes (not counting the terminating NUL). */
#define HOOP_ENGINE_NAME_MAX 200

/* Create an engine over a new communicator (cfg as for hoop_comm_init; NULL:
 * from the environment). Every rank calls it. */
HOOP_API hoop_status_t hoop_engine_create(hoop_engine_t **engine, const hoop_config_t *cfg);

/* Create an engine over comm, which the engine then owns (destroys it), and
 * which no other thread may use any more. On failure comm is not taken. */
HOOP_API hoop_status_t hoop_engine_create_with(hoop_engine_t **engine, hoop_comm_t *comm);

/* Stop the engine: the ranks agree to stop (every rank calls it; the first
 * to do so stops the others' engines too, failing what is pending there
 * with HOOP_ERR_ABORTED), then the communicator is destroyed. No other
 * call on this engine may run during or after it; handles not yet released
 * stay valid. NULL is accepted. */
HOOP_API hoop_status_t hoop_engine_destroy(hoop_engine_t *engine);

HOOP_API int hoop_engine_rank(const hoop_engine_t *engine);
HOOP_API int hoop_engine_size(const hoop_engine_t *engine);

/* Allreduce of count elements, sendbuf to recvbuf (in place when equal):
 * each element is multiplied by prescale before the reduction and by
 * postscale after it (integers as Horovod scales them: in double,
 * truncated toward zero, held to the type's range). HOOP_AVG divides the
 * sum by the number of ranks, joined ranks included. */
HOOP_API hoop_status_t hoop_engine_allreduce(hoop_engine_t *engine, const char *name,
                                             const void *sendbuf, void *recvbuf, size_t count,
                                             hoop_dtype_t dtype, hoop_op_t op, double prescale,
                                             double postscale, hoop_engine_cb_t cb, void *cb_arg,
                                             hoop_engine_handle_t **handle);

/* hoop_engine_allreduce with its arguments in a struct, for bindings whose
 * calls cost by the argument (Python's ctypes converts each one: its twelve
 * cost about a microsecond, a pointer and a name a third of that, on every
 * gradient of a step). No callback. Returns the handle, or NULL with
 * a->status set to why (and hoop_last_error()'s sentence); a struct_size
 * other than sizeof(hoop_engine_allreduce_args_t) is HOOP_ERR_INVALID. */
typedef struct hoop_engine_allreduce_args {
    size_t struct_size; /* sizeof(hoop_engine_allreduce_args_t) */
    hoop_engine_t *engine;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    int32_t dtype; /* hoop_dtype_t */
    int32_t op;    /* hoop_op_t */
    double prescale;
    double postscale;
    int32_t status; /* out: HOOP_OK, or why the call returned NULL */
} hoop_engine_allreduce_args_t;

HOOP_API hoop_engine_handle_t *hoop_engine_allreduce_args(hoop_engine_allreduce_args_t *a,
                                                          const char *name);

/* An operation of any kind but a group, its arguments in one struct, with
 * the shape of the tensor behind its buffers: the ranks compare shapes as
 * Horovod does (every dimension for an allreduce, broadcast or
 * reduce_scatter; all but the first for an allgather or alltoall, whose
 * first dimension may differ), and a difference fails the name on every
 * rank with HOOP_ERR_MISMATCH naming both shapes. Shapes are compared
 * where both ranks gave one (ndims > 0); counts always are. Returns the
 * handle, or NULL with a->status set to why (and hoop_last_error()'s
 * sentence). struct_size must be sizeof(hoop_engine_op_args_t). */
#define HOOP_ENGINE_DIMS_MAX 8

typedef enum hoop_engine_kind {
    HOOP_ENGINE_ALLREDUCE = 1,
    HOOP_ENGINE_ALLGATHER,
    HOOP_ENGINE_BROADCAST,
    HOOP_ENGINE_ALLTOALL,
    HOOP_ENGINE_REDUCE_SCATTER,
} hoop_engine_kind_t;

typedef struct hoop_engine_op_args {
    size_t struct_size; /* sizeof(hoop_engine_op_args_t) */
    hoop_engine_t *engine;
    int32_t kind;  /* hoop_engine_kind_t */
    int32_t dtype; /* hoop_dtype_t */
    int32_t op;    /* hoop_op_t: allreduce, reduce_scatter */
    int32_t root;  /* broadcast */
    /* allreduce, allgather, alltoall, reduce_scatter */
    const void *sendbuf;
    /* allreduce, reduce_scatter (allgather and alltoall: the engine's);
     * broadcast: the buffer, sent from root and received elsewhere */
    void *recvbuf;
    /* allreduce, broadcast: elements; reduce_scatter: the elements each
     * rank gets; allgather: this rank's rows */
    size_t count;
    /* allgather, alltoall: elements per row */
    size_t row_elems;
    /* alltoall: rows to each rank (hoop_engine_counts then gives the
     * elements from each); reduce_scatter: NULL, or each rank's elements
     * (as hoop_engine_reduce_scatterv) */
    const size_t *counts;
    double prescale, postscale; /* allreduce, reduce_scatter */
    int32_t ndims;              /* 0 (no shape) to HOOP_ENGINE_DIMS_MAX */
    int32_t status;             /* out: HOOP_OK, or why the call returned NULL */
    int64_t dims[HOOP_ENGINE_DIMS_MAX];
} hoop_engine_op_args_t;

HOOP_API hoop_engine_handle_t *hoop_engine_enqueue(hoop_engine_op_args_t *a, const char *name);

/* n allreduces that run together, fused, once all are ready on all ranks:
 * tensor i is counts[i] elements from sendbufs[i] to recvbufs[i]. One
 * handle for the group, named `name`. On one rank the group's tensors are
 * all device memory or all host memory (a tensor of no elements takes no
 * side): a group of both is refused at once (HOOP_ERR_INVALID). */
HOOP_API hoop_status_t hoop_engine_grouped_allreduce(
    hoop_engine_t *engine, const char *name, int n, const void *const *sendbufs,
    void *const *recvbufs, const size_t *counts, hoop_dtype_t dtype, hoop_op_t op, double prescale,
    double postscale, hoop_engine_cb_t cb, void *cb_arg, hoop_engine_handle_t **handle);

/* The same with each tensor's shape, which the ranks compare as a lone
 * allreduce's (every dimension; a rank that gives none for a tensor, or
 * calls hoop_engine_grouped_allreduce, counts as one dimension of its
 * count): tensor i has ndims[i] dimensions (0: none given, up to
 * HOOP_ENGINE_DIMS_MAX), which follow one another in dims. A shape that
 * does not hold its tensor's count is refused (HOOP_ERR_INVALID). */
HOOP_API hoop_status_t hoop_engine_grouped_allreduce_shaped(
    hoop_engine_t *engine, const char *name, int n, const void *const *sendbufs,
    void *const *recvbufs, const size_t *counts, const int *ndims, const size_t *dims,
    hoop_dtype_t dtype, hoop_op_t op, double prescale, double postscale, hoop_engine_cb_t cb,
    void *cb_arg, hoop_engine_handle_t **handle);

/* Allgather along the first dimension: this rank gives `rows` rows of
 * row_elems elements each (rows may differ between ranks, row_elems may
 * not). The engine allocates the output, sized from what every rank
 * announced: hoop_engine_output gives it, rank r's rows first for r = 0, 1,
 * ..., and hoop_engine_counts each rank's rows. */
HOOP_API hoop_status_t hoop_engine_allgather(hoop_engine_t *engine, const char *name,
                                             const void *sendbuf, size_t rows, size_t row_elems,
                                             hoop_dtype_t dtype, hoop_engine_cb_t cb, void *cb_arg,
                                             hoop_engine_handle_t **handle);

/* root's buf (count elements) lands in every rank's buf. */
HOOP_API hoop_status_t hoop_engine_broadcast(hoop_engine_t *engine, const char *name, void *buf,
                                             size_t count, hoop_dtype_t dtype, int root,
                                             hoop_engine_cb_t cb, void *cb_arg,
                                             hoop_engine_handle_t **handle);

/* Alltoall with split sizes: splits[j] elements of sendbuf (in rank order,
 * one after the other) go to rank j; splits has hoop_engine_size entries.
 * The engine allocates the output (hoop_engine_output: what rank i sent here,
 * for i = 0, 1, ...) and hoop_engine_counts gives how many elements came
 * from each rank. */
HOOP_API hoop_status_t hoop_engine_alltoall(hoop_engine_t *engine, const char *name,
                                            const void *sendbuf, const size_t *splits,
                                            hoop_dtype_t dtype, hoop_engine_cb_t cb, void *cb_arg,
                                            hoop_engine_handle_t **handle);

/* Every rank gets block `rank` (recvcount elements) of the reduction of
 * every rank's sendbuf (size * recvcount elements); scale factors as for
 * allreduce. */
HOOP_API hoop_status_t hoop_engine_reduce_scatter(hoop_engine_t *engine, const char *name,
                                                  const void *sendbuf, void *recvbuf,
                                                  size_t recvcount, hoop_dtype_t dtype,
                                                  hoop_op_t op, double prescale, double postscale,
                                                  hoop_engine_cb_t cb, void *cb_arg,
                                                  hoop_engine_handle_t **handle);

/* Like reduce_scatter with a count per rank (hoop_reduce_scatterv): rank r
 * gets recvcounts[r] elements of the reduction of every rank's sendbuf,
 * which holds the blocks one after the other. Every rank passes the same
 * recvcounts (hoop_engine_size entries); ranks that differ fail the
 * operation on every rank with HOOP_ERR_MISMATCH. */
HOOP_API hoop_status_t hoop_engine_reduce_scatterv(hoop_engine_t *engine, const char *name,
                                                   const void *sendbuf, void *recvbuf,
                                                   const size_t *recvcounts, hoop_dtype_t dtype,
                                                   hoop_op_t op, double prescale, double postscale,
                                                   hoop_engine_cb_t cb, void *cb_arg,
                                                   hoop_engine_handle_t **handle);

/* Completes once every rank has enqueued its barrier (the k-th barrier of
 * each rank meets the k-th of the others). */
HOOP_API hoop_status_t hoop_engine_barrier(hoop_engine_t *engine, hoop_engine_cb_t cb, void *cb_arg,
                                           hoop_engine_handle_t **handle);

/* This rank has no more work: until every rank has joined, it takes part in
 * the others' allreduces with zeros (HOOP_AVG still divides by every rank);
 * the others' allgathers, broadcasts, alltoalls and reduce_scatters fail
 * with HOOP_ERR_INVALID. Completes on every rank once the last has joined;
 * hoop_engine_last_joined then names that rank. */
HOOP_API hoop_status_t hoop_engine_join(hoop_engine_t *engine, hoop_engine_cb_t cb, void *cb_arg,
                                        hoop_engine_handle_t **handle);

/* Split the engine's communicator as hoop_comm_split does, in the order
 * the ranks agree on with their other operations: every rank of the engine
 * calls it (the k-th split of each rank meets the k-th of the others),
 * with its own color and key. Once h has completed with HOOP_OK,
 * hoop_engine_take_comm gives this rank's new communicator (NULL for
 * HOOP_SPLIT_NONE), for hoop_engine_create_with or the caller's own use.
 * A group that cannot form fails the split on every rank; the engine goes
 * on. */
HOOP_API hoop_status_t hoop_engine_split(hoop_engine_t *engine, int color, int key,
                                         hoop_engine_cb_t cb, void *cb_arg,
                                         hoop_engine_handle_t **handle);
/* A completed split's communicator, which the caller then owns; NULL when
 * there is none (HOOP_SPLIT_NONE, a failure, taken already). A handle
 * released with its communicator untaken destroys it. */
HOOP_API hoop_comm_t *hoop_engine_take_comm(hoop_engine_handle_t *h);

/* 1 once h has completed, else 0. */
HOOP_API int hoop_engine_test(hoop_engine_handle_t *h);

/* Wait for h at most timeout_s seconds (< 0: no limit); its status, or
 * HOOP_ERR_TIMEOUT with "still pending" when it has not completed (then it
 * still may: test or wait again). */
HOOP_API hoop_status_t hoop_engine_wait(hoop_engine_handle_t *h, double timeout_s);

/* hoop_engine_wait, then, when it returns HOOP_OK, hoop_engine_release: a
 * success leaves h released (not to be used again); any other status
 * leaves it held, to read its status, wait again or release. One call
 * where a binding's calls are dear (Horovod's wait_and_clear). */
HOOP_API hoop_status_t hoop_engine_wait_release(hoop_engine_handle_t *h, double timeout_s);

/* Status of a completed handle (HOOP_ERR_INVALID while pending) and its
 * sentence ("" on success), valid until release. */
HOOP_API hoop_status_t hoop_engine_status(hoop_engine_handle_t *h, const char **sentence);

/* Output the engine allocated (allgather, alltoall), of *count elements:
 * owned by the handle (freed at release) unless taken, then the caller
 * frees it with free(), or with cudaFree where it is device memory. It is
 * device memory, on the sendbuf's GPU, where this rank's sendbuf was; host
 * memory otherwise. NULL for other operations or none yet. */
HOOP_API void *hoop_engine_output(hoop_engine_handle_t *h, size_t *count);
HOOP_API void *hoop_engine_take_output(hoop_engine_handle_t *h, size_t *count);

/* Per rank counts of a completed allgather (rows) or alltoall (elements
 * received from each rank), into counts[hoop_engine_size] entries. */
HOOP_API hoop_status_t hoop_engine_counts(hoop_engine_handle_t *h, size_t *counts);

/* The last rank to join, for a completed join; -1 otherwise. */
HOOP_API int hoop_engine_last_joined(hoop_engine_handle_t *h);

/* Let go of h: freed once it has also completed. NULL is accepted. */
HOOP_API void hoop_engine_release(hoop_engine_handle_t *h);

/* What the engine's thread has done so far. */
typedef struct hoop_engine_stats {
    size_t struct_size;        /* set by the caller to sizeof(hoop_engine_stats_t) */
    uint64_t cycles;           /* cycles run */
    uint64_t negotiations;     /* cycles that gathered requests (not answered by the cache) */
    uint64_t cache_hits;       /* operations agreed through the cache */
    uint64_t collectives;      /* data collectives run (fused ones count once) */
    uint64_t fused_ops;        /* operations that ran inside a fused collective of several */
    uint64_t ops_done;         /* operations completed, with any status */
    uint64_t fusion_threshold; /* bytes, now (autotune changes it) */
    double cycle_time_ms;      /* now */
    uint64_t wakes;            /* enqueues that found the engine's thread asleep and woke it */
} hoop_engine_stats_t;

HOOP_API hoop_status_t hoop_engine_stats(hoop_engine_t *engine, hoop_engine_stats_t *stats);

/* Start writing the timeline (as HOOP_TIMELINE does from the start) to
 * path, from the engine's next cycle on: on rank 0, or on every rank to
 * path.<rank> with HOOP_TIMELINE_ALL_RANKS=1; on the other ranks nothing
 * is written and the call returns HOOP_OK. The file is opened (and
 * emptied) before the call returns, so a path that cannot be written is
 * HOOP_ERR_INVALID at once. A timeline already being written (this call's
 * or HOOP_TIMELINE's) is ended first, its file left whole. mark_cycles:
 * an instant event, CYCLE_START, at each cycle's start (as
 * HOOP_TIMELINE_MARK_CYCLES=1). Activities under way when it starts show
 * from their next step. Horovod's hvd.start_timeline. */
HOOP_API hoop_status_t hoop_engine_timeline_start(hoop_engine_t *engine, const char *path,
                                                  int mark_cycles);

/* Stop writing the timeline at the engine's next cycle; the file stays a
 * valid JSON array of what was written (it is at every moment). HOOP_OK
 * also where none is being written. Horovod's hvd.stop_timeline. */
HOOP_API hoop_status_t hoop_engine_timeline_stop(hoop_engine_t *engine);

#ifdef __cplusplus
}
#endif
#endif /* HOOP_ENGINE_H */
