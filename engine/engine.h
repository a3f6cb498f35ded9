/* engine.h - the engine's objects, shared by the files of engine/.
 *
 * The layer above collectives/: it reaches the communicator only through
 * hoop.h. One background thread per engine (loop.c) runs cycles; in each,
 * every rank contributes to one small allreduce (sync words: shutdown, the
 * length of its list of new requests, and one word per cache slot), then,
 * when some rank has new requests, an allgatherv of those lists (wire.c).
 * Every rank applies the same lists in rank order to the same table
 * (negotiate.c), so every rank computes the same responses in the same
 * order without a second round; rank 0 alone logs stalls and writes the
 * timeline, and decides stall shutdowns, which reach the others inside its
 * list. The responses run in execute.c.
 */
#ifndef HOOP_ENGINE_ENGINE_H
#define HOOP_ENGINE_ENGINE_H

#include "hoop.h"
#include "hoop_engine.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

enum eng_kind {
    EK_NONE = 0,
    EK_ALLREDUCE,
    EK_ALLGATHER,
    EK_BROADCAST,
    EK_ALLTOALL,
    EK_REDUCE_SCATTER,
    EK_BARRIER,
    EK_JOIN,
    EK_SPLIT,
    EK_KIND_COUNT
};

/* Bounds on what a list from another rank may hold. */
#define ENG_LIST_MAX (16u << 20) /* bytes of one rank's list in one cycle */
#define ENG_VALS_MAX (1u << 16)  /* segments of a group, or ranks of an alltoall */

/* What every rank must agree on for one name (for an allgather `count` is
 * this rank's rows and may differ). */
struct eng_params {
    uint8_t kind, dtype, op;
    uint8_t device; /* ENG_HOST or ENG_DEVICE: where this rank's data lies (eng_gives_data);
                       ENG_HOST where it gives none */
    int32_t root;
    double pre, post;
    uint64_t count; /* allreduce: elements in all; broadcast: count;
                       reduce_scatter: recvcount; allgather: rows */
    uint64_t row;   /* allgather, alltoall: elements per row (alltoall: 0, not given) */
    uint8_t ndims;  /* the caller's shape (0: none given) */
    uint64_t dims[HOOP_ENGINE_DIMS_MAX];
    uint32_t nvals; /* grouped allreduce: segment counts; alltoall: splits */
    uint32_t nshape; /* grouped allreduce: words of its tensors' shapes in vals after the
                        counts, each tensor's ndims then its dims (0: none given) */
    uint64_t *vals;  /* nvals + nshape words */
    char name[HOOP_ENGINE_NAME_MAX + 1];
};

/* eng_params.device. Pinned and managed memory are host memory here, as
 * everywhere in the engine: the CPU reaches them, and only device memory
 * (cudaMalloc) takes the GPU's copies and kernels. */
enum { ENG_HOST = 0, ENG_DEVICE = 1 };

/* "device (GPU)" or "host", for the sentences ("... memory"). */
static inline const char *eng_device_str(int device)
{
    return device ? "device (GPU)" : "host";
}

/* 1 when a rank that announced p gives data of its own, so that where it
 * lies is compared with the other ranks' (an allgather's rank of no rows, or
 * an alltoall's that sends nothing, may give no buffer at all, and takes no
 * side; the kinds whose counts the ranks share give data on every rank or
 * on none). */
static inline int eng_gives_data(const struct eng_params *p)
{
    switch (p->kind) {
    case EK_ALLREDUCE:
    case EK_BROADCAST:
    case EK_REDUCE_SCATTER:
    case EK_ALLTOALL: return p->count != 0;
    case EK_ALLGATHER: return p->count != 0 && p->row != 0;
    default: return 0;
    }
}

enum eng_state { ES_QUEUED = 0, ES_NEW, ES_SENT, ES_CACHED };

/* An operation, which is also the handle the caller holds. */
struct hoop_engine_handle {
    struct eng_params p;
    const void **send; /* nseg each (one but for a group) */
    void **recv;
    const void *send1; /* storage for the one-segment case */
    void *recv1;
    /* Where its buffers lie, asked once when it is enqueued (enqueue.c) and
     * used when it runs (execute.c): some sendbuf, some recvbuf is device
     * memory (a group's tensors are all of one kind), and the GPU of the
     * buffer the engine's thread works on (-1: none). */
    uint8_t send_dev, recv_dev;
    int gpu;
    hoop_engine_cb_t cb;
    void *cb_arg;
    /* the engine's thread only */
    int state;
    int slot; /* cache slot, ES_CACHED */
    uint64_t t_enq_ns;
    struct hoop_engine_handle *next;  /* queue, then pending list */
    struct hoop_engine_handle *hnext; /* names in flight */
    /* completion, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    int refs; /* the caller's and the engine's */
    hoop_status_t st;
    const char *msg; /* the sentence: "" on success, else owned (or a constant) */
    void *out;
    size_t out_count;
    int out_on_gpu; /* out is device memory (the sendbuf's GPU): hoop_gpu_free */
    uint64_t *counts;
    int ncounts;
    int last_joined;
    /* hoop_engine_split: this rank's color and key, and the group's
     * communicator once made (destroyed with the handle unless taken) */
    int split_color, split_key;
    hoop_comm_t *split_comm;
};
typedef struct hoop_engine_handle eng_op_t;

/* A name some rank has announced and not all have (negotiate.c). */
struct eng_entry {
    struct eng_params p; /* the first announcement */
    int first_rank;
    uint8_t *got;     /* per rank */
    uint64_t *rows;   /* allgather: per rank rows */
    uint64_t *splits; /* alltoall: size x size */
    char *mismatch;   /* the first disagreement, a sentence */
    int timed_out;    /* rank 0's list said: fail it (stall shutdown) */
    int fail_asked;   /* rank 0: put in its next list */
    uint64_t first_ns;
    uint64_t last_warn_ns;
};

/* One operation to run, the same on every rank. */
struct eng_resp {
    struct eng_params p; /* p.vals owned */
    hoop_status_t err;   /* != OK: fail it with msg */
    char *msg;
    uint64_t *rows;   /* allgather: per rank rows (owned) */
    uint64_t *splits; /* alltoall: size x size (owned) */
    int last_joined;
    int from_cache;
    int cacheable;
    uint64_t neg_start_ns;
    eng_op_t *op; /* this rank's, or NULL (joined) */
    int done;
};

struct eng_cache_slot {
    int used;
    struct eng_params p; /* count: this rank's rows for an allgather */
    uint64_t *rows;      /* allgather: per rank rows */
    uint64_t last_use;
    int hnext; /* the next used slot whose name hashes alike, or -1 */
};

struct eng_timeline;
struct eng_tune;

#define ENG_HASH 1024

struct hoop_engine {
    hoop_comm_t *comm;
    int rank, size;
    pthread_t thread;
    int thread_started;

    /* Shared with the callers, under mu. */
    pthread_mutex_t mu;
    eng_op_t *q_head, *q_tail;
    eng_op_t *inflight[ENG_HASH];
    int stop;           /* destroy asked */
    int stopped;        /* the thread has ended */
    hoop_status_t dead; /* != OK: every enqueue fails with dead_msg */
    char dead_msg[1024];
    uint64_t barrier_seq, join_seq, split_seq;
    pthread_cond_t wake; /* the thread's sleep while quiet (CLOCK_MONOTONIC) */
    int quiet;           /* it sleeps long: an enqueue or destroy wakes it */
    uint64_t wakes;      /* enqueues that woke it (under mu) */
    uint64_t pokes;      /* enqueues and destroys so far (atomic: a spin reads it unlocked) */
    uint64_t spin_ns;    /* how long it looks for an enqueue before it sleeps (0: it does not) */
    int spin_yields;     /* and gives up the CPU between looks (fewer CPUs than threads) */

    /* Written by the engine's thread, read by hoop_engine_stats, under smu
     * (not mu: the thread's counting keeps no enqueue waiting). */
    pthread_mutex_t smu;
    hoop_engine_stats_t stats;

    /* The engine's thread only. */
    eng_op_t *pending; /* ES_NEW, ES_SENT, ES_CACHED */
    uint64_t cycle_ns;
    uint64_t fusion_threshold;
    int cache_cap;
    double stall_check_s, stall_shutdown_s;
    uint8_t *fusion; /* fusion_cap bytes, kept; over several ranks from hoop_mem_alloc */
    size_t fusion_cap;
    void *dfusion;   /* on the GPU, for groups with device buffers: dfusion_cap bytes, kept */
    size_t dfusion_cap;
    /* negotiation table, in the order names were first announced */
    struct eng_entry **tab;
    int ntab, tab_cap;
    uint8_t *joined; /* per rank */
    int njoined;
    int last_joined;
    int self_joined;
    eng_op_t *join_op;
    /* cache */
    struct eng_cache_slot *cache;
    int cache_used; /* slots 0..cache_used-1 exist */
    int cache_head[ENG_HASH]; /* per eng_hash of a name: its first used slot, or -1 */
    uint64_t use_clock;
    /* the sync vector and lists */
    uint32_t *sync;
    size_t sync_cap;
    uint8_t *mylist;
    size_t mylist_len, mylist_cap;
    uint8_t *lists;
    size_t lists_cap;
    size_t *lcounts, *ldispls;
    /* rank 0: names whose stall shutdown time passed, for the next list */
    char **fail_names;
    int nfail, fail_cap;
    /* responses of this cycle */
    struct eng_resp *resp;
    int nresp, resp_cap;
    struct eng_timeline *tl; /* written by the engine's thread only */
    int tl_marks;            /* ... with an instant event at each cycle's start */
    int tl_all;              /* HOOP_TIMELINE_ALL_RANKS: every rank writes one */
    int from_split;          /* over a communicator of hoop_comm_split: no HOOP_TIMELINE or
                                HOOP_AUTOTUNE_LOG file of its own (they are the job's) */
    /* hoop_engine_timeline_start/stop, under mu: the timeline the thread
     * takes at its next turn (tl_change; NULL: none) */
    struct eng_timeline *tl_next;
    int tl_next_marks, tl_change;
    uint8_t *inv;          /* per cache slot: this rank holds it stale */
    eng_op_t **slot_op;    /* per cache slot: this rank's pending op in ES_CACHED on it */
    int idle_cycles;       /* cycles in a row in which no rank had anything */
    int drained;           /* the last cycle left nothing pending anywhere */
    uint64_t sync_done_ns; /* when the last cycle's sync allreduce ended */
    struct eng_tune *tune; /* rank 0 with HOOP_AUTOTUNE=1, else NULL */
};

/* api.c */
/* A mutex that spins a little before it sleeps, where the C library has one:
 * the engine's locks are held for a few instructions, and a caller put to
 * sleep on one waits for a wake-up that costs more than the hold. */
void eng_mutex_init(pthread_mutex_t *m);
void eng_op_complete(struct hoop_engine *e, eng_op_t *op, hoop_status_t st, const char *msg);
/* eng_op_complete in two steps: settle makes op done (its name free
 * again, its status set) without waking anyone; wake wakes its waiters,
 * runs its callback and drops the engine's reference. The members of one
 * fused collective are all settled before the first is woken: a waiter
 * woken for the first (on a machine whose cores the ranks' threads
 * outnumber, it may take this thread's core) then finds the others done,
 * instead of sleeping again on each, every wake a switch back and forth. */
void eng_op_settle(struct hoop_engine *e, eng_op_t *op, hoop_status_t st, const char *msg);
void eng_op_wake(eng_op_t *op);
/* Drop one reference to op (the caller's or the engine's); the last frees
 * it (api.c). */
void eng_op_unref(eng_op_t *op);
/* Remove op from the names in flight (takes mu). */
void eng_forget_name(struct hoop_engine *e, eng_op_t *op);
eng_op_t *eng_find_inflight(struct hoop_engine *e, const char *name);
unsigned eng_hash(const char *name);
const char *eng_kind_name(int kind);  /* "allreduce", ... */
const char *eng_kind_upper(int kind); /* "ALLREDUCE", ... (timeline) */

/* wire.c: a rank's list of records. */
enum eng_rec { ER_REQ = 1, ER_JOIN = 2, ER_FAIL = 3 };
int eng_list_add_req(struct hoop_engine *e, const struct eng_params *p);
int eng_list_add_join(struct hoop_engine *e);
int eng_list_add_fail(struct hoop_engine *e, const char *name);
/* Parse rank r's list, calling back for each record; HOOP_ERR_PEER with a
 * sentence when it is malformed. */
typedef hoop_status_t (*eng_rec_fn)(struct hoop_engine *e, int from, int rec,
                                    const struct eng_params *p, const char *name);
hoop_status_t eng_list_parse(struct hoop_engine *e, int from, const uint8_t *buf, size_t len,
                             eng_rec_fn fn);

/* negotiate.c */
hoop_status_t eng_table_record(struct hoop_engine *e, int from, int rec, const struct eng_params *p,
                               const char *name);
/* Turn every entry now complete into a response (in table order). */
int eng_table_collect(struct hoop_engine *e);
/* Rank 0: warn of stalls, mark names past the shutdown time for its list. */
void eng_table_stall_check(struct hoop_engine *e, uint64_t now);
void eng_table_free(struct hoop_engine *e);
int eng_params_equal(const struct eng_params *a, const struct eng_params *b, int size, char *why,
                     size_t why_len, int ra, int rb);
int eng_params_copy(struct eng_params *dst, const struct eng_params *src);
struct eng_resp *eng_resp_add(struct hoop_engine *e);
void eng_resp_clear(struct hoop_engine *e);
/* Timeline: the response's operation begins, queued to run. */
void eng_resp_queued(struct hoop_engine *e, const struct eng_resp *r);

/* cache.c */
int eng_cacheable(int kind);
/* Empty the index of names (before the first put). */
void eng_cache_init(struct hoop_engine *e);
/* The slot holding name, or -1. */
int eng_cache_find(struct hoop_engine *e, const char *name);
/* 1 when op matches slot s exactly, 0 when it holds other parameters. */
int eng_cache_matches(struct hoop_engine *e, int s, const eng_op_t *op);
void eng_cache_put(struct hoop_engine *e, const struct eng_resp *r);
/* Erase slot s; ops of this rank waiting on it go back to ES_NEW. */
void eng_cache_erase(struct hoop_engine *e, int s);
void eng_cache_free(struct hoop_engine *e);

/* execute.c: run this cycle's responses. HOOP_OK, or the status of a
 * failed collective (the communicator is then broken; sentence set). */
hoop_status_t eng_execute(struct hoop_engine *e);
/* Free out, an output of op's (out_alloc in execute.c): on the GPU or not,
 * as op->out_on_gpu says. */
void eng_out_free(const eng_op_t *op, void *out);

/* timeline.c (rank 0, or every rank with HOOP_TIMELINE_ALL_RANKS=1). */
struct eng_timeline *eng_timeline_open(const char *path, int rank, char *err, size_t err_len);
/* This rank's timeline at path (path.<rank> with HOOP_TIMELINE_ALL_RANKS=1,
 * e->tl_all), opened; NULL where this rank writes none (err empty) or it
 * cannot be opened (err says why). */
struct eng_timeline *eng_timeline_for(const struct hoop_engine *e, const char *path, char *err,
                                      size_t err_len);
void eng_timeline_close(struct eng_timeline *tl);
void eng_timeline_begin(struct eng_timeline *tl, const char *tensor, const char *activity);
void eng_timeline_end(struct eng_timeline *tl, const char *tensor, const char *args);
void eng_timeline_tick(struct eng_timeline *tl, const char *tensor, int rank);
/* An instant event, CYCLE_START, on track 0 (HOOP_TIMELINE_MARK_CYCLES). */
void eng_timeline_cycle(struct eng_timeline *tl);
/* Write what was recorded this cycle, leaving a valid JSON array. */
void eng_timeline_flush(struct eng_timeline *tl);

/* autotune.c */
hoop_status_t eng_tune_init(struct hoop_engine *e);
/* An allreduce of `bytes` named `name` completed (rank 0 scores samples
 * and may change e->fusion_threshold and e->cycle_ns). */
void eng_tune_note(struct hoop_engine *e, const char *name, uint64_t bytes);
void eng_tune_free(struct hoop_engine *e);

#endif
