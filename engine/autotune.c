/* autotune.c - HOOP_AUTOTUNE=1: rank 0 tries pairs of fusion threshold and
 * cycle time and keeps the one that reduced the most bytes per second.
 *
 * A sample opens with the first allreduce completed after the previous one
 * closed and closes once that name has completed HOOP_AUTOTUNE_STEPS_PER_SAMPLE
 * more times (a name is one tensor of a training step: so many steps);
 * its score is the allreduced bytes per microsecond between the two. Each
 * pair gets one sample to settle (discarded) and two scored ones. The
 * candidates are fixed (Horovod searches the same plane with a Bayesian
 * optimiser; a handful of points covers what matters here: fused or not,
 * short or long cycles). A variable the user set (HOOP_FUSION_THRESHOLD,
 * HOOP_CYCLE_TIME) is not tuned. Only rank 0 decides: its values reach the
 * other ranks in the next cycle's sync words, so every rank fuses alike.
 * HOOP_AUTOTUNE_LOG gets one CSV line per pair tried and the pair kept.
 */
#include "engine/engine.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    unsigned mib;
    double ms;
} cands[] = {{64, 1}, {32, 1}, {128, 1}, {16, 2}, {8, 5}, {4, 10}};
#define NCANDS ((int)(sizeof(cands) / sizeof(cands[0])))
#define SCORED 2

struct eng_tune {
    FILE *log;
    unsigned long long steps;
    int fix_thr, fix_cycle;
    int cand, phase;
    int done;
    char first[HOOP_ENGINE_NAME_MAX + 1];
    unsigned long long seen;
    uint64_t bytes, t0;
    double sum, best_score;
    int best;
};

static void apply(struct hoop_engine *e, int c)
{
    struct eng_tune *t = e->tune;
    if (!t->fix_thr)
        e->fusion_threshold = (uint64_t)cands[c].mib << 20;
    if (!t->fix_cycle)
        e->cycle_ns = (uint64_t)(cands[c].ms * 1e6);
}

hoop_status_t eng_tune_init(struct hoop_engine *e)
{
    unsigned long long on, steps;
    hoop_status_t st;
    if ((st = hoop_param_u64("HOOP_AUTOTUNE", 0, 1, &on)) ||
        (st = hoop_param_u64("HOOP_AUTOTUNE_STEPS_PER_SAMPLE", 1, 1000000, &steps)))
        return st;
    if (!on || e->rank != 0)
        return HOOP_OK;
    struct eng_tune *t = calloc(1, sizeof(*t));
    if (!t)
        return hoop_error(HOOP_ERR_SYSTEM, "engine: out of memory");
    t->steps = steps;
    t->fix_thr = hoop_param_is_set("HOOP_FUSION_THRESHOLD");
    t->fix_cycle = hoop_param_is_set("HOOP_CYCLE_TIME");
    t->best = -1;
    /* the job's engine's file, not a process set's (see HOOP_TIMELINE) */
    const char *path = e->from_split ? "" : hoop_param_str("HOOP_AUTOTUNE_LOG");
    if (*path) {
        t->log = fopen(path, "we");
        if (!t->log) {
            int err = errno;
            free(t);
            return hoop_error(HOOP_ERR_INVALID,
                              "engine rank 0: HOOP_AUTOTUNE_LOG: cannot open %s: "
                              "%s",
                              path, strerror(err));
        }
        fprintf(t->log, "cycle_time_ms,tensor_fusion_threshold,score,best\n");
        fflush(t->log);
    }
    e->tune = t;
    apply(e, 0);
    return HOOP_OK;
}

static void log_line(struct eng_tune *t, struct hoop_engine *e, double score, int best)
{
    if (!t->log)
        return;
    fprintf(t->log, "%g,%llu,%.3f,%d\n", (double)e->cycle_ns / 1e6,
            (unsigned long long)e->fusion_threshold, score, best);
    fflush(t->log);
}

void eng_tune_note(struct hoop_engine *e, const char *name, uint64_t bytes)
{
    struct eng_tune *t = e->tune;
    if (!t || t->done)
        return;
    uint64_t now = hoop_now_ns();
    if (!t->first[0]) {
        snprintf(t->first, sizeof(t->first), "%s", name);
        t->seen = 0;
        t->bytes = 0;
        t->t0 = now;
        return;
    }
    t->bytes += bytes;
    if (strcmp(name, t->first) != 0 || ++t->seen < t->steps)
        return;
    double us = (double)(now - t->t0) / 1e3;
    double score = us > 0 ? (double)t->bytes / us : 0;
    t->first[0] = '\0';
    if (t->phase++ > 0)
        t->sum += score;
    if (t->phase <= SCORED)
        return;
    double mean = t->sum / SCORED;
    log_line(t, e, mean, 0);
    if (t->best < 0 || mean > t->best_score) {
        t->best = t->cand;
        t->best_score = mean;
    }
    t->phase = 0;
    t->sum = 0;
    if (++t->cand < NCANDS) {
        apply(e, t->cand);
        return;
    }
    t->done = 1;
    apply(e, t->best);
    log_line(t, e, t->best_score, 1);
    hoop_log(HOOP_LOG_INFO,
             "engine rank 0: autotune keeps a fusion threshold of %llu bytes and "
             "a cycle of %g ms (%.1f bytes/us)",
             (unsigned long long)e->fusion_threshold, (double)e->cycle_ns / 1e6, t->best_score);
}

void eng_tune_free(struct hoop_engine *e)
{
    struct eng_tune *t = e->tune;
    if (!t)
        return;
    if (t->log)
        fclose(t->log);
    free(t);
    e->tune = NULL;
}
