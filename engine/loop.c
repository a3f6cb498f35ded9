/* loop.c - the engine's life: create, the background thread's cycles,
 * destroy.
 *
 * A cycle: take what the callers enqueued; one allreduce (sum) of the sync
 * words, where each rank adds 1 to the magic word, 1 to the stop word when
 * it is being destroyed, the length of its list of new requests in its own
 * word, and for each cache slot 1 when it holds that name ready (or size+1
 * when it holds the name with other arguments); rank 0 alone adds the
 * fusion threshold and the cycle time, so that every rank fuses alike,
 * and every rank its cache capacity, which must be the same everywhere.
 * A slot summing to size is ready everywhere; one above size is erased
 * everywhere. Then, when some list is not empty, one allgatherv of the
 * lists, applied in rank order to the table. Then the responses run.
 */
#include "engine/engine.h"
#include "gpu/gpu.h"
#include "common/clock.h"
#include "common/cpus.h"
#include "common/log.h"
#include "common/param.h"
#include "common/relax.h"
#include "common/status.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ENG_IDLE_CYCLES 100
#define ENG_QUIET_NS 50000000ull
/* HOOP_BUSY_POLL_US=auto: how long a quiet thread looks for an enqueue
 * before it sleeps (as long as the communicator's waits spin). */
#define ENG_SPIN_AUTO_NS 20000ull

enum { W_MAGIC = 0, W_STOP, W_THRESH_LO, W_THRESH_HI, W_CYCLE_US, W_CACHE_CAP, W_HDR };

static void fail_all(struct hoop_engine *e, hoop_status_t st, const char *msg)
{
    while (e->pending) {
        eng_op_t *o = e->pending;
        e->pending = o->next;
        o->next = NULL;
        if (o->state == ES_CACHED)
            e->slot_op[o->slot] = NULL;
        eng_op_complete(e, o, st, msg);
    }
    e->join_op = NULL;
}

/* Mark the engine stopped, and fail what is left, queued included. */
static void engine_end(struct hoop_engine *e, hoop_status_t st, const char *msg)
{
    pthread_mutex_lock(&e->mu);
    if (st != HOOP_ERR_ABORTED || !e->dead) {
        e->dead = st;
        snprintf(e->dead_msg, sizeof(e->dead_msg), "%s", msg);
    }
    e->stopped = 1;
    eng_op_t *q = e->q_head;
    e->q_head = e->q_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    while (q) {
        eng_op_t *n = q->next;
        q->next = e->pending;
        e->pending = q;
        q = n;
    }
    fail_all(e, st, msg);
}

static void die(struct hoop_engine *e, hoop_status_t st)
{
    char msg[1024];
    snprintf(msg, sizeof(msg), "%s", hoop_last_error());
    hoop_log(HOOP_LOG_WARN, "engine rank %d stops: %s", e->rank, msg);
    engine_end(e, st, msg);
}

static void append_pending(struct hoop_engine *e, eng_op_t **tail, eng_op_t *o)
{
    o->next = NULL;
    if (*tail)
        (*tail)->next = o;
    else
        e->pending = o;
    *tail = o;
}

/* Move what the callers enqueued to the pending list, each in the state the
 * cache gives it. */
static int take_queue(struct hoop_engine *e)
{
    struct eng_timeline *old = NULL;
    pthread_mutex_lock(&e->mu);
    eng_op_t *q = e->q_head;
    e->q_head = e->q_tail = NULL;
    int stop = e->stop;
    if (e->tl_change) { /* hoop_engine_timeline_start or _stop */
        old = e->tl;
        e->tl = e->tl_next;
        e->tl_marks = e->tl_next_marks;
        e->tl_next = NULL;
        e->tl_change = 0;
    }
    pthread_mutex_unlock(&e->mu);
    eng_timeline_close(old);
    eng_op_t *tail = e->pending;
    while (tail && tail->next)
        tail = tail->next;
    while (q) {
        eng_op_t *o = q;
        q = q->next;
        o->slot = -1;
        o->state = ES_NEW;
        if (o->p.kind == EK_JOIN) {
            if (e->self_joined) {
                eng_op_complete(e, o, HOOP_ERR_INVALID,
                                "engine: this rank has already joined; join again once every "
                                "rank has joined");
                continue;
            }
            e->self_joined = 1;
            e->join_op = o;
        } else if (e->cache_cap > 0 && eng_cacheable(o->p.kind)) {
            int s = eng_cache_find(e, o->p.name);
            if (s >= 0) {
                if (eng_cache_matches(e, s, o)) {
                    o->state = ES_CACHED;
                    o->slot = s;
                    e->slot_op[s] = o;
                } else {
                    e->inv[s] = 1;
                }
            }
        }
        append_pending(e, &tail, o);
    }
    return stop;
}

static hoop_status_t sync_reserve(struct hoop_engine *e, size_t words)
{
    if (words <= e->sync_cap)
        return HOOP_OK;
    uint32_t *p = realloc(e->sync, words * 4);
    if (!p)
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
    e->sync = p;
    e->sync_cap = words;
    return HOOP_OK;
}

/* Responses for the cache slots every rank holds ready, in slot order. */
static hoop_status_t cache_responses(struct hoop_engine *e, const uint32_t *slots)
{
    uint32_t n = (uint32_t)e->size;
    for (int s = 0; s < e->cache_used; s++) {
        if (slots[s] > n) {
            eng_cache_erase(e, s);
            e->inv[s] = 0;
            continue;
        }
        if (slots[s] != n || !e->cache[s].used)
            continue;
        struct eng_cache_slot *c = &e->cache[s];
        struct eng_resp *r = eng_resp_add(e);
        if (!r || eng_params_copy(&r->p, &c->p))
            return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
        if (c->rows) {
            r->rows = malloc(8 * (size_t)e->size);
            if (!r->rows)
                return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
            memcpy(r->rows, c->rows, 8 * (size_t)e->size);
        }
        r->from_cache = 1;
        c->last_use = ++e->use_clock;
        /* This rank's op on the slot, if it holds one (a joined rank may
         * not): looked up, not searched for, since a step of a thousand
         * cached names would otherwise walk the pending list a thousand
         * times. */
        eng_op_t *o = e->slot_op[s];
        if (o && o->state == ES_CACHED && o->slot == s) {
            r->op = o;
            o->state = ES_SENT;
        }
        e->slot_op[s] = NULL;
        if (r->op) {
            pthread_mutex_lock(&e->smu);
            e->stats.cache_hits++;
            pthread_mutex_unlock(&e->smu);
        }
        if (e->tl)
            eng_resp_queued(e, r);
    }
    return HOOP_OK;
}

static hoop_status_t gather_lists(struct hoop_engine *e, const uint32_t *lens)
{
    size_t total = 0;
    for (int r = 0; r < e->size; r++) {
        if (lens[r] > ENG_LIST_MAX)
            return hoop_error(HOOP_ERR_PEER,
                              "engine rank %d: rank %d announces a list of %u bytes, more than "
                              "the %u a cycle allows: the ranks run different builds of hoop",
                              e->rank, r, lens[r], ENG_LIST_MAX);
        e->lcounts[r] = lens[r];
        e->ldispls[r] = total;
        total += lens[r];
    }
    if (e->lcounts[e->rank] != e->mylist_len)
        return hoop_error(HOOP_ERR_PEER,
                          "engine rank %d: the sync words do not hold this rank's "
                          "own list length: the ranks run different builds of hoop",
                          e->rank);
    if (total > e->lists_cap) {
        uint8_t *p = realloc(e->lists, total);
        if (!p)
            return hoop_error(HOOP_ERR_SYSTEM,
                              "engine rank %d: out of memory for %zu bytes of "
                              "requests",
                              e->rank, total);
        e->lists = p;
        e->lists_cap = total;
    }
    static const uint8_t dummy[1];
    hoop_status_t st = hoop_allgatherv(e->comm, e->mylist_len ? e->mylist : dummy, e->lists,
                                       e->lcounts, e->ldispls, HOOP_U8);
    if (st)
        return st;
    pthread_mutex_lock(&e->smu);
    e->stats.negotiations++;
    pthread_mutex_unlock(&e->smu);
    for (int r = 0; r < e->size; r++)
        if ((st = eng_list_parse(e, r, e->lists + e->ldispls[r], e->lcounts[r], eng_table_record)))
            return st;
    return HOOP_OK;
}

static hoop_status_t cycle(struct hoop_engine *e, int stop, int *stopped)
{
    uint64_t now = hoop_now_ns();
    if (e->tl && e->tl_marks)
        eng_timeline_cycle(e->tl);
    uint64_t stall_ns = e->stall_check_s > 0 ? (uint64_t)(e->stall_check_s * 1e9) : 0;
    /* My list: the new requests, then (rank 0) the names to fail. */
    e->mylist_len = 0;
    for (eng_op_t *o = e->pending; o; o = o->next) {
        if (o->state != ES_NEW)
            continue;
        if (o->p.kind == EK_JOIN ? eng_list_add_join(e) : eng_list_add_req(e, &o->p))
            break; /* the rest go next cycle */
        o->state = ES_SENT;
    }
    for (int i = 0; i < e->nfail; i++) {
        if (eng_list_add_fail(e, e->fail_names[i]))
            break;
        free(e->fail_names[i]);
        e->fail_names[i] = NULL;
    }
    int kept = 0;
    for (int i = 0; i < e->nfail; i++)
        if (e->fail_names[i])
            e->fail_names[kept++] = e->fail_names[i];
    e->nfail = kept;

    size_t words = W_HDR + (size_t)e->size + (size_t)e->cache_used;
    hoop_status_t st = sync_reserve(e, words);
    if (st)
        return st;
    uint32_t *w = e->sync;
    memset(w, 0, words * 4);
    w[W_MAGIC] = 1;
    w[W_STOP] = stop ? 1 : 0;
    w[W_CACHE_CAP] = (uint32_t)e->cache_cap;
    if (e->rank == 0) {
        w[W_THRESH_LO] = (uint32_t)e->fusion_threshold;
        w[W_THRESH_HI] = (uint32_t)(e->fusion_threshold >> 32);
        w[W_CYCLE_US] = (uint32_t)(e->cycle_ns / 1000);
    }
    w[W_HDR + e->rank] = (uint32_t)e->mylist_len;
    uint32_t *slots = w + W_HDR + e->size;
    uint32_t inv = (uint32_t)e->size + 1;
    for (eng_op_t *o = e->pending; o; o = o->next)
        if (o->state == ES_CACHED) {
            /* A cached name stalled: erase it, so that it goes through the
             * table, where the missing ranks show. */
            slots[o->slot] = stall_ns && now - o->t_enq_ns > stall_ns ? inv : 1;
        }
    for (int s = 0; s < e->cache_used; s++) {
        if (e->inv[s])
            slots[s] = inv;
        else if (e->self_joined && e->cache[s].used && !slots[s])
            slots[s] = e->cache[s].p.kind == EK_ALLREDUCE ? 1 : inv;
    }
    if ((st = hoop_allreduce(e->comm, w, w, words, HOOP_U32, HOOP_SUM)))
        return st;
    /* Every rank leaves this allreduce at about the same moment: the next
     * cycle's timer starts here, so that the ranks' cycles stay in phase
     * (timed from each rank's own start, the phase would drift until one
     * rank's cycle began before its caller's next enqueue, and every
     * operation took two cycles). */
    e->sync_done_ns = hoop_now_ns();
    if (w[W_MAGIC] != (uint32_t)e->size)
        return hoop_error(HOOP_ERR_PEER,
                          "engine rank %d: the sync words of a cycle add up to %u ranks, not %d: "
                          "the ranks run different builds of hoop, or a process used the "
                          "engine's communicator",
                          e->rank, w[W_MAGIC], e->size);
    /* The slots must be the same everywhere: so must their number. */
    if (w[W_CACHE_CAP] != (uint32_t)e->cache_cap * (uint32_t)e->size)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: HOOP_CACHE_CAPACITY is %d here but not on every rank "
                          "(the ranks' values add up to %u): set the same value on every rank",
                          e->rank, e->cache_cap, w[W_CACHE_CAP]);
    if (w[W_STOP]) {
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "engine rank %d: %u rank(s) stopped the engine (hoop_engine_destroy) while this "
                 "operation was pending",
                 e->rank, w[W_STOP]);
        engine_end(e, HOOP_ERR_ABORTED, msg);
        *stopped = 1;
        return HOOP_OK;
    }
    e->fusion_threshold = (uint64_t)w[W_THRESH_LO] | ((uint64_t)w[W_THRESH_HI] << 32);
    e->cycle_ns = (uint64_t)w[W_CYCLE_US] * 1000;

    if ((st = cache_responses(e, slots)))
        return st;
    int any = 0;
    for (int r = 0; r < e->size; r++)
        any |= w[W_HDR + r] != 0;
    if (any && (st = gather_lists(e, w + W_HDR)))
        return st;
    if (eng_table_collect(e))
        return hoop_error(HOOP_ERR_SYSTEM, "engine rank %d: out of memory", e->rank);
    st = eng_execute(e);
    eng_resp_clear(e);
    if (st)
        return st;
    int idle = e->ntab == 0 && e->njoined == 0;
    for (size_t i = W_HDR; i < words && idle; i++)
        idle = w[i] == 0;
    e->idle_cycles = idle ? e->idle_cycles + 1 : 0;
    /* Drained: no name is left half announced, no cached name waits for
     * another rank, and this rank holds nothing. The first two are the
     * same on every rank, so in a job where every rank enqueues alike,
     * every rank's next enqueue starts the next cycle at once. */
    int drained = e->ntab == 0 && e->njoined == 0 && e->pending == NULL;
    /* (the slots this cycle's sync words held: running may have added) */
    for (size_t s = 0; s < words - W_HDR - (size_t)e->size && drained; s++)
        drained = slots[s] == 0 || slots[s] >= (uint32_t)e->size;
    e->drained = drained;
    if (e->rank == 0)
        eng_table_stall_check(e, hoop_now_ns());
    eng_timeline_flush(e->tl);
    pthread_mutex_lock(&e->smu);
    e->stats.cycles++;
    e->stats.fusion_threshold = e->fusion_threshold;
    e->stats.cycle_time_ms = (double)e->cycle_ns / 1e6;
    pthread_mutex_unlock(&e->smu);
    return HOOP_OK;
}

/* Sleep until `until` (CLOCK_MONOTONIC, ns); while quiet (nothing pending),
 * an enqueue or a destroy ends it early. Quiet but not idle, it first looks
 * for an enqueue for spin_ns without sleeping: the gradients of a backward
 * pass come a few microseconds apart, and each that found the thread asleep
 * would pay a system call to wake it (on the 2-core machine a step of 100
 * through hoop.torch's DistributedOptimizer spent 1.3 ms beside the model's
 * own, 0.7 with the look; bench/RESULTS.md). Where the CPUs are fewer than
 * the callers and engines of this host's ranks, it gives up the CPU between
 * looks (sched_yield), so that the thread it waits for may run. */
static void engine_sleep(struct hoop_engine *e, uint64_t until, int quiet, int spin)
{
    struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
    if (quiet && spin && e->spin_ns) {
        pthread_mutex_lock(&e->mu);
        int ready = e->q_head || e->stop;
        uint64_t seen = __atomic_load_n(&e->pokes, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&e->mu);
        if (ready)
            return;
        uint64_t end = hoop_now_ns() + e->spin_ns;
        for (unsigned k = 1;; k++) {
            if (__atomic_load_n(&e->pokes, __ATOMIC_ACQUIRE) != seen)
                return; /* the caller takes the queue (or stops) under mu */
            if (!(k % 16) && hoop_now_ns() >= end)
                break;
            if (e->spin_yields)
                sched_yield();
            else
                hoop_cpu_relax();
        }
    }
    pthread_mutex_lock(&e->mu);
    e->quiet = quiet;
    while (hoop_now_ns() < until && !(quiet && (e->q_head || e->stop)))
        if (pthread_cond_timedwait(&e->wake, &e->mu, &ts) == ETIMEDOUT)
            break;
    e->quiet = 0;
    pthread_mutex_unlock(&e->mu);
}

static void *engine_thread(void *arg)
{
    struct hoop_engine *e = arg;
    /* It starts drained: the first cycle runs at the first enqueue or one
     * cycle time from now, so that an enqueue made before this thread
     * first looked at the queue is not left half announced. */
    uint64_t next = hoop_now_ns() + e->cycle_ns, burst_until = 0;
    for (;;) {
        /* Busy, the cycle time batches what is enqueued meanwhile (fusion).
         * After ENG_IDLE_CYCLES in which no rank had anything, the cycles
         * slow to one per ENG_QUIET_NS, and an enqueue starts the next at
         * once: an idle job then costs a small allreduce every 50 ms
         * instead of every cycle. The ranks see the same sync words, so
         * they go quiet together; one woken early waits in the sync
         * allreduce for the others, woken by their own enqueues or their
         * timers. Likewise after a cycle that left nothing pending on any
         * rank (drained): the next enqueue starts a cycle at once, so
         * that a lone operation costs no wait for the timer, and the
         * cycle time batches only what comes while work is under way.
         * For one cycle time after such a wake (a burst: the gradients
         * of a step come one by one), cycles follow each other at once
         * while anything is pending on any rank, so that the burst does
         * not wait for the timer whenever one rank's cycle caught fewer
         * of its operations than another's. */
        int idle = e->idle_cycles >= ENG_IDLE_CYCLES;
        int drained = idle || e->drained;
        uint64_t now = hoop_now_ns();
        if (drained || now >= burst_until)
            engine_sleep(e, idle ? now + ENG_QUIET_NS : next, drained, !idle);
        if (drained)
            burst_until = hoop_now_ns() + e->cycle_ns;
        int stop = take_queue(e);
        int stopped = 0;
        hoop_status_t st = cycle(e, stop, &stopped);
        next = e->sync_done_ns + e->cycle_ns;
        if (st) {
            die(e, st);
            break;
        }
        if (stopped)
            break;
    }
    eng_timeline_close(e->tl);
    e->tl = NULL;
    return NULL;
}

/* ---- create and destroy ---------------------------------------------------- */

static hoop_status_t read_params(struct hoop_engine *e, char *tl_path, size_t tl_len)
{
    hoop_status_t st;
    double cycle_ms, stall, shut;
    unsigned long long thr, cap, all, marks;
    if ((st = hoop_param_double("HOOP_CYCLE_TIME", 0.0, 60000.0, &cycle_ms)) ||
        (st = hoop_param_u64("HOOP_FUSION_THRESHOLD", 0, 1ull << 40, &thr)) ||
        (st = hoop_param_u64("HOOP_CACHE_CAPACITY", 0, 1u << 20, &cap)) ||
        (st = hoop_param_double("HOOP_STALL_CHECK_TIME", 0.0, 1e6, &stall)) ||
        (st = hoop_param_double("HOOP_STALL_SHUTDOWN_TIME", 0.0, 1e6, &shut)) ||
        (st = hoop_param_u64("HOOP_TIMELINE_ALL_RANKS", 0, 1, &all)) ||
        (st = hoop_param_u64("HOOP_TIMELINE_MARK_CYCLES", 0, 1, &marks)))
        return st;
    e->cycle_ns = (uint64_t)(cycle_ms * 1e6);
    e->fusion_threshold = thr;
    e->cache_cap = (int)cap;
    e->stall_check_s = stall;
    e->stall_shutdown_s = shut;
    /* The files HOOP_TIMELINE names are the job's engine's: an engine over
     * a group split from it (a process set's) would write over them. */
    snprintf(tl_path, tl_len, "%s", e->from_split ? "" : hoop_param_str("HOOP_TIMELINE"));
    e->tl_all = (int)all;
    e->tl_marks = (int)marks;
    return HOOP_OK;
}

static void engine_free(struct hoop_engine *e)
{
    eng_table_free(e);
    eng_cache_free(e);
    eng_resp_clear(e);
    free(e->resp);
    free(e->inv);
    free(e->slot_op);
    free(e->joined);
    free(e->sync);
    free(e->mylist);
    free(e->lists);
    free(e->lcounts);
    if (e->size == 1)
        free(e->fusion); /* else the communicator's (hoop_mem_alloc), gone with it */
    hoop_gpu_free(e->dfusion);
    eng_timeline_close(e->tl);
    eng_timeline_close(e->tl_next);
    eng_tune_free(e);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->smu);
    free(e);
}

/* How long the quiet thread spins (HOOP_BUSY_POLL_US, as the
 * communicator's waits; auto: ENG_SPIN_AUTO_NS), and whether it yields
 * the CPU between looks: where this host's ranks have fewer CPUs than
 * callers and engines (two threads each), a plain spin would take the CPU
 * a caller needs. Yielding, a DistributedOptimizer step of 100 tensors at
 * N = 2 on 2 CPUs went from 3.7 to 2.6 ms, and the synthetic benchmark
 * did not move (bench/RESULTS.md). */
static hoop_status_t engine_spin(struct hoop_engine *e)
{
    unsigned long long us;
    int is_auto;
    if (hoop_param_auto_u64("HOOP_BUSY_POLL_US", 0, 1000000, &is_auto, &us))
        return hoop_error(HOOP_ERR_INVALID, "engine rank %d: %s (microseconds)", e->rank,
                          hoop_last_error());
    if (is_auto)
        us = ENG_SPIN_AUTO_NS / 1000;
    e->spin_ns = us * 1000;
    int local = hoop_comm_local_size(e->comm);
    e->spin_yields = hoop_usable_cpus() < 2 * (local > 0 ? local : 1);
    HOOP_INFO("engine rank %d: a quiet engine looks for enqueues for %llu us before it sleeps%s",
              e->rank, us,
              e->spin_yields && us ? ", yielding the CPU between looks (fewer CPUs here than "
                                     "callers and engines of this host's ranks)"
                                   : "");
    return HOOP_OK;
}

hoop_status_t hoop_engine_create_with(hoop_engine_t **engine, hoop_comm_t *comm)
{
    if (!engine || !comm)
        return hoop_error(HOOP_ERR_INVALID, "engine: create needs %s",
                          !engine ? "somewhere to put the engine" : "a communicator");
    struct hoop_engine *e = calloc(1, sizeof(*e));
    if (!e)
        return hoop_error(HOOP_ERR_SYSTEM, "engine: out of memory");
    eng_mutex_init(&e->mu);
    pthread_mutex_init(&e->smu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->wake, &ca);
    pthread_condattr_destroy(&ca);
    e->comm = comm;
    e->from_split = strcmp(hoop_comm_launcher(comm), HOOP_LAUNCHER_SPLIT) == 0;
    e->rank = hoop_comm_rank(comm);
    e->size = hoop_comm_size(comm);
    e->last_joined = -1;
    e->drained = 1;
    char tl_path[4096];
    hoop_status_t st = read_params(e, tl_path, sizeof(tl_path));
    if (st) {
        e->comm = NULL;
        engine_free(e);
        return st;
    }
    if ((st = eng_tune_init(e))) {
        e->comm = NULL;
        engine_free(e);
        return st;
    }
    e->stats.struct_size = sizeof(e->stats);
    e->stats.fusion_threshold = e->fusion_threshold;
    e->stats.cycle_time_ms = (double)e->cycle_ns / 1e6;
    e->joined = calloc((size_t)e->size, 1);
    e->lcounts = malloc(sizeof(size_t) * 2 * (size_t)e->size);
    e->cache = calloc((size_t)(e->cache_cap ? e->cache_cap : 1), sizeof(*e->cache));
    eng_cache_init(e);
    e->inv = calloc((size_t)(e->cache_cap ? e->cache_cap : 1), 1);
    e->slot_op = calloc((size_t)(e->cache_cap ? e->cache_cap : 1), sizeof(*e->slot_op));
    if (!e->joined || !e->lcounts || !e->cache || !e->inv || !e->slot_op) {
        engine_free(e);
        return hoop_error(HOOP_ERR_SYSTEM, "engine: out of memory");
    }
    e->ldispls = e->lcounts + e->size;
    if (tl_path[0]) {
        char err[4400];
        e->tl = eng_timeline_for(e, tl_path, err, sizeof(err));
        if (!e->tl && err[0]) {
            engine_free(e);
            return hoop_error(HOOP_ERR_INVALID, "engine rank %d: HOOP_TIMELINE: %s", e->rank, err);
        }
    }
    if ((st = engine_spin(e))) {
        engine_free(e);
        return st;
    }
    /* The engine's thread takes no signal: those are the application's. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&e->thread, NULL, engine_thread, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        engine_free(e);
        return hoop_error(HOOP_ERR_SYSTEM, "engine: cannot start its thread: %s", strerror(rc));
    }
    e->thread_started = 1;
    *engine = e;
    return HOOP_OK;
}

hoop_status_t hoop_engine_create(hoop_engine_t **engine, const hoop_config_t *cfg)
{
    if (!engine)
        return hoop_error(HOOP_ERR_INVALID, "engine: create needs somewhere to put the engine");
    hoop_comm_t *comm;
    hoop_status_t st = hoop_comm_init(&comm, cfg);
    if (st)
        return st;
    if ((st = hoop_engine_create_with(engine, comm))) {
        char msg[2048];
        snprintf(msg, sizeof(msg), "%s", hoop_last_error());
        hoop_comm_destroy(comm);
        return hoop_error(st, "%s", msg);
    }
    return HOOP_OK;
}

hoop_status_t hoop_engine_destroy(hoop_engine_t *e)
{
    if (!e)
        return HOOP_OK;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    __atomic_add_fetch(&e->pokes, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started)
        pthread_join(e->thread, NULL);
    hoop_status_t st = hoop_comm_destroy(e->comm);
    e->comm = NULL;
    engine_free(e);
    return st;
}
