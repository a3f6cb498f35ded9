/* api.c - hoop_engine.h's handles, the operations' lifetime, the engine's
 * facts, timeline and stats (the enqueue calls are enqueue.c's). */
#include "engine/engine.h"
#include "common/status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

unsigned eng_hash(const char *name)
{
    unsigned h = 2166136261u;
    for (const unsigned char *s = (const unsigned char *)name; *s; s++)
        h = (h ^ *s) * 16777619u;
    return h % ENG_HASH;
}

const char *eng_kind_name(int kind)
{
    static const char *const n[EK_KIND_COUNT] = {"none",      "allreduce", "allgather",
                                                 "broadcast", "alltoall",  "reduce_scatter",
                                                 "barrier",   "join",      "split"};
    return kind >= 0 && kind < EK_KIND_COUNT ? n[kind] : "unknown";
}

const char *eng_kind_upper(int kind)
{
    static const char *const n[EK_KIND_COUNT] = {"NONE",      "ALLREDUCE", "ALLGATHER",
                                                 "BROADCAST", "ALLTOALL",  "REDUCESCATTER",
                                                 "BARRIER",   "JOIN",      "SPLIT"};
    return kind >= 0 && kind < EK_KIND_COUNT ? n[kind] : "UNKNOWN";
}

eng_op_t *eng_find_inflight(struct hoop_engine *e, const char *name)
{
    for (eng_op_t *o = e->inflight[eng_hash(name)]; o; o = o->hnext)
        if (strcmp(o->p.name, name) == 0)
            return o;
    return NULL;
}

void eng_forget_name(struct hoop_engine *e, eng_op_t *op)
{
    pthread_mutex_lock(&e->mu);
    eng_op_t **pp = &e->inflight[eng_hash(op->p.name)];
    while (*pp && *pp != op)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = op->hnext;
    pthread_mutex_unlock(&e->mu);
}

/* The sentence of a failure whose own could not be kept. */
static const char op_no_memory[] =
    "engine: the operation failed, and no memory was left for its sentence";

static void op_free(eng_op_t *op)
{
    if (op->send != &op->send1)
        free((void *)op->send);
    if (op->recv != &op->recv1)
        free(op->recv);
    free(op->p.vals);
    eng_out_free(op, op->out);
    hoop_comm_destroy(op->split_comm);
    free(op->counts);
    if (op->msg && op->msg[0] && op->msg != op_no_memory)
        free((void *)op->msg);
    pthread_mutex_destroy(&op->mu);
    pthread_cond_destroy(&op->cv);
    free(op);
}

void eng_op_unref(eng_op_t *op)
{
    pthread_mutex_lock(&op->mu);
    int left = --op->refs;
    pthread_mutex_unlock(&op->mu);
    if (!left)
        op_free(op);
}

void eng_mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

void eng_op_settle(struct hoop_engine *e, eng_op_t *op, hoop_status_t st, const char *msg)
{
    eng_forget_name(e, op);
    pthread_mutex_lock(&e->smu);
    e->stats.ops_done++;
    pthread_mutex_unlock(&e->smu);
    /* A success carries no sentence: nothing to allocate on the path
     * every gradient takes. */
    const char *m = "";
    if (st != HOOP_OK && msg) {
        char *c = strndup(msg, 1023);
        m = c ? c : op_no_memory;
    }
    pthread_mutex_lock(&op->mu);
    op->st = st;
    op->msg = m;
    op->done = 1;
    pthread_mutex_unlock(&op->mu);
}

void eng_op_wake(eng_op_t *op)
{
    /* A waiter either saw done under mu or sleeps on cv: no wake is lost. */
    pthread_cond_broadcast(&op->cv);
    /* Done before the callback, so that it may read the status, the
     * sentence and the output through the handle; the engine's reference
     * keeps the handle alive until it returns. */
    if (op->cb)
        op->cb(op, op->st, op->cb_arg);
    eng_op_unref(op);
}

void eng_op_complete(struct hoop_engine *e, eng_op_t *op, hoop_status_t st, const char *msg)
{
    eng_op_settle(e, op, st, msg);
    eng_op_wake(op);
}

/* ---- handles ------------------------------------------------------------- */

int hoop_engine_test(hoop_engine_handle_t *h)
{
    if (!h)
        return 0;
    pthread_mutex_lock(&h->mu);
    int d = h->done;
    pthread_mutex_unlock(&h->mu);
    return d;
}

hoop_status_t hoop_engine_wait(hoop_engine_handle_t *h, double timeout_s)
{
    if (!h)
        return hoop_error(HOOP_ERR_INVALID, "engine: wait on a NULL handle");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (timeout_s >= 0) {
        double s = timeout_s > 1e9 ? 1e9 : timeout_s;
        ts.tv_sec += (time_t)s;
        ts.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&h->mu);
    while (!h->done) {
        if (timeout_s < 0)
            pthread_cond_wait(&h->cv, &h->mu);
        else if (pthread_cond_timedwait(&h->cv, &h->mu, &ts) == ETIMEDOUT)
            break;
    }
    hoop_status_t st;
    if (!h->done)
        st = hoop_error(HOOP_ERR_TIMEOUT, "engine: '%s' still pending after %g s", h->p.name,
                        timeout_s);
    else if (h->st)
        st = hoop_error(h->st, "%s", h->msg);
    else
        st = HOOP_OK;
    pthread_mutex_unlock(&h->mu);
    return st;
}

hoop_status_t hoop_engine_wait_release(hoop_engine_handle_t *h, double timeout_s)
{
    hoop_status_t st = hoop_engine_wait(h, timeout_s);
    if (st == HOOP_OK)
        eng_op_unref(h);
    return st;
}

hoop_status_t hoop_engine_status(hoop_engine_handle_t *h, const char **sentence)
{
    if (!h)
        return hoop_error(HOOP_ERR_INVALID, "engine: status of a NULL handle");
    pthread_mutex_lock(&h->mu);
    int d = h->done;
    pthread_mutex_unlock(&h->mu);
    if (!d)
        return hoop_error(HOOP_ERR_INVALID, "engine: '%s' is still pending", h->p.name);
    if (sentence)
        *sentence = h->msg;
    return h->st;
}

void *hoop_engine_output(hoop_engine_handle_t *h, size_t *count)
{
    if (!h || !hoop_engine_test(h)) {
        if (count)
            *count = 0;
        return NULL;
    }
    if (count)
        *count = h->out_count;
    return h->out;
}

void *hoop_engine_take_output(hoop_engine_handle_t *h, size_t *count)
{
    void *p = hoop_engine_output(h, count);
    if (p)
        h->out = NULL;
    return p;
}

hoop_comm_t *hoop_engine_take_comm(hoop_engine_handle_t *h)
{
    if (!h || !hoop_engine_test(h))
        return NULL;
    hoop_comm_t *c = h->split_comm;
    h->split_comm = NULL;
    return c;
}

hoop_status_t hoop_engine_counts(hoop_engine_handle_t *h, size_t *counts)
{
    if (!h || !counts || !hoop_engine_test(h) || !h->counts)
        return hoop_error(HOOP_ERR_INVALID,
                          "engine: counts are known once an allgather or alltoall has completed");
    for (int i = 0; i < h->ncounts; i++)
        counts[i] = (size_t)h->counts[i];
    return HOOP_OK;
}

int hoop_engine_last_joined(hoop_engine_handle_t *h)
{
    return h && hoop_engine_test(h) ? h->last_joined : -1;
}

void hoop_engine_release(hoop_engine_handle_t *h)
{
    if (h)
        eng_op_unref(h);
}

int hoop_engine_rank(const hoop_engine_t *e)
{
    return e ? e->rank : -1;
}

int hoop_engine_size(const hoop_engine_t *e)
{
    return e ? e->size : -1;
}

/* Hand the engine's thread the timeline it takes at its next turn
 * (take_queue in loop.c), ending one handed over but not yet taken. */
static void timeline_hand_over(hoop_engine_t *e, struct eng_timeline *tl, int marks)
{
    pthread_mutex_lock(&e->mu);
    struct eng_timeline *unused = e->tl_next;
    e->tl_next = tl;
    e->tl_next_marks = marks;
    e->tl_change = 1;
    pthread_mutex_unlock(&e->mu);
    eng_timeline_close(unused);
}

hoop_status_t hoop_engine_timeline_start(hoop_engine_t *e, const char *path, int mark_cycles)
{
    if (!e || !path || !path[0])
        return hoop_error(HOOP_ERR_INVALID, "engine: timeline_start needs %s",
                          !e ? "an engine" : "a file path");
    char err[4400];
    struct eng_timeline *tl = eng_timeline_for(e, path, err, sizeof(err));
    if (!tl && err[0])
        return hoop_error(HOOP_ERR_INVALID,
                          "engine rank %d: timeline_start: %s (name a file "
                          "this process can create)",
                          e->rank, err);
    if (tl)
        timeline_hand_over(e, tl, mark_cycles != 0);
    return HOOP_OK;
}

hoop_status_t hoop_engine_timeline_stop(hoop_engine_t *e)
{
    if (!e)
        return hoop_error(HOOP_ERR_INVALID, "engine: timeline_stop needs an engine");
    timeline_hand_over(e, NULL, 0);
    return HOOP_OK;
}

hoop_status_t hoop_engine_stats(hoop_engine_t *e, hoop_engine_stats_t *stats)
{
    if (!e || !stats || stats->struct_size < sizeof(size_t))
        return hoop_error(HOOP_ERR_INVALID, "engine: stats needs an engine and struct_size set");
    hoop_engine_stats_t s;
    pthread_mutex_lock(&e->smu);
    s = e->stats;
    pthread_mutex_unlock(&e->smu);
    pthread_mutex_lock(&e->mu);
    s.wakes = e->wakes;
    pthread_mutex_unlock(&e->mu);
    size_t n = stats->struct_size < sizeof(s) ? stats->struct_size : sizeof(s);
    s.struct_size = n;
    memcpy(stats, &s, n);
    return HOOP_OK;
}
