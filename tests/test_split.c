/* test_split.c - hoop_comm_split: groups of ranks get communicators of
 * their own, ranked by key; the parent goes on; a group that cannot form
 * fails the call on every rank of the parent; bad arguments are refused. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SPLIT_N_MAX 8

struct split_plan {
    int color[SPLIT_N_MAX]; /* per parent rank; HOOP_SPLIT_NONE for none */
    int key[SPLIT_N_MAX];
    int rounds; /* splits one after another (each with the plan) */
};

/* Where parent rank r should land: its group's size, and its place in
 * the group by key and then parent rank. */
static void expected_place(const struct split_plan *p, int n, int r, int *size, int *rank)
{
    *size = *rank = 0;
    for (int q = 0; q < n; q++) {
        if (p->color[q] != p->color[r])
            continue;
        (*size)++;
        if (p->key[q] < p->key[r] || (p->key[q] == p->key[r] && q < r))
            (*rank)++;
    }
}

/* In the group: its size and rank as planned; an allgather of the parent
 * ranks in group order (each member where its key puts it); an exact
 * allreduce; then the parent still reduces exactly. */
static int split_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const struct split_plan *p = arg;
    for (int round = 0; round < p->rounds; round++) {
        hoop_comm_t *child = NULL;
        hoop_status_t st = hoop_comm_split(comm, p->color[rank], p->key[rank], &child);
        if (st)
            return harness_fail(rank, "hoop_comm_split", st);
        if (p->color[rank] == HOOP_SPLIT_NONE) {
            if (child)
                return harness_failf(rank, "gave HOOP_SPLIT_NONE but got a communicator");
        } else {
            int want_size, want_rank;
            expected_place(p, size, rank, &want_size, &want_rank);
            if (!child || hoop_comm_size(child) != want_size || hoop_comm_rank(child) != want_rank)
                return harness_failf(rank,
                                     "round %d: group of color %d: rank %d of %d, not %d "
                                     "of %d",
                                     round, p->color[rank], hoop_comm_rank(child),
                                     hoop_comm_size(child), want_rank, want_size);
            int32_t me = rank, order[SPLIT_N_MAX];
            if ((st = hoop_allgather(child, &me, order, 1, HOOP_I32)))
                return harness_fail(rank, "allgather in the group", st);
            for (int q = 0; q < size; q++) {
                int qs, qr;
                if (p->color[q] != p->color[rank])
                    continue;
                expected_place(p, size, q, &qs, &qr);
                if (order[qr] != q)
                    return harness_failf(rank, "group rank %d is parent rank %d, not %d", qr,
                                         order[qr], q);
            }
            int32_t buf[1000];
            for (int i = 0; i < 1000; i++)
                buf[i] = rank * 1000 + i;
            if ((st = hoop_allreduce(child, buf, buf, 1000, HOOP_I32, HOOP_SUM)))
                return harness_fail(rank, "allreduce in the group", st);
            for (int i = 0; i < 1000; i++) {
                int32_t w = 0;
                for (int q = 0; q < size; q++)
                    if (p->color[q] == p->color[rank])
                        w += q * 1000 + i;
                if (buf[i] != w)
                    return harness_failf(rank, "group allreduce: element %d is %d, not %d", i,
                                         buf[i], w);
            }
            hoop_comm_destroy(child);
        }
        int32_t buf[4096];
        if (harness_allreduce_i32_checked(comm, rank, size, buf, 4096))
            return 1;
    }
    return 0;
}

static void run_plan(int n, const struct split_plan *p)
{
    char report[8192];
    hoop_config_t base;
    hoop_config_init(&base);
    base.bootstrap_timeout_s = 30;
    bool ok = harness_run(n, &base, split_rank, (void *)p, 100.0, report, sizeof report);
    cr_assert(ok, "%s", report);
}

/* Evens and odds, each ranked backwards by key; two splits in a row. */
Test(split, evens_and_odds_by_reversed_key_n5, .timeout = 120)
{
    struct split_plan p = {.rounds = 2};
    for (int r = 0; r < 5; r++) {
        p.color[r] = r % 2;
        p.key[r] = -r;
    }
    run_plan(5, &p);
}

/* Rank 3 joins no group; ranks 0 and 2 tie on key (parent rank decides);
 * the colors are not consecutive. */
Test(split, a_rank_outside_every_group_and_tied_keys_n4, .timeout = 120)
{
    struct split_plan p = {.color = {7, 42, 7, HOOP_SPLIT_NONE}, .key = {1, 0, 1, 0}, .rounds = 1};
    run_plan(4, &p);
}

/* One rank per group, and one group of every rank. */
Test(split, groups_of_one_n3, .timeout = 120)
{
    struct split_plan p = {.color = {0, 1, 2}, .rounds = 1};
    run_plan(3, &p);
}

Test(split, one_group_of_all_n4, .timeout = 120)
{
    struct split_plan p = {.color = {5, 5, 5, 5}, .key = {3, 2, 1, 0}, .rounds = 1};
    run_plan(4, &p);
}

Test(split, one_rank_job, .timeout = 60)
{
    struct split_plan p = {.color = {0}, .rounds = 2};
    run_plan(1, &p);
}

/* Rank `bad` cannot form its group (a setting its new communicator
 * refuses): every rank's call fails, each naming that rank, and the
 * parent still reduces exactly afterwards. */
static int failing_group_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    const int bad = *(const int *)arg;
    if (rank == bad)
        setenv("HOOP_SHM_CHUNK_BYTES", "10", 1);
    hoop_comm_t *child = NULL;
    hoop_status_t st = hoop_comm_split(comm, rank % 2, 0, &child);
    if (rank == bad)
        unsetenv("HOOP_SHM_CHUNK_BYTES");
    if (st == HOOP_OK || child)
        return harness_failf(rank,
                             "split returned %s and %s communicator where rank %d's group "
                             "cannot form",
                             hoop_status_str(st), child ? "a" : "no", bad);
    /* The bad rank says why; the others of its group, that theirs did
     * not form; the rest, whose group it was. */
    const char *why = hoop_last_error();
    char want[64];
    snprintf(want, sizeof want,
             rank == bad           ? "HOOP_SHM_CHUNK_BYTES"
             : rank % 2 == bad % 2 ? "did not form"
                                   : "group of rank %d",
             bad);
    if (!strstr(why, want))
        return harness_failf(rank, "the sentence does not say \"%s\": %s", want, why);
    int32_t buf[256];
    return harness_allreduce_i32_checked(comm, rank, size, buf, 256);
}

Test(split, a_group_that_cannot_form_fails_every_rank_n4, .timeout = 120)
{
    for (int bad = 0; bad < 2; bad++) { /* a group's first rank, then another */
        int b = bad == 0 ? 0 : 3;
        char report[8192];
        hoop_config_t base;
        hoop_config_init(&base);
        base.bootstrap_timeout_s = 3;
        bool ok = harness_run(4, &base, failing_group_rank, &b, 100.0, report, sizeof report);
        cr_assert(ok, "rank %d failing: %s", b, report);
    }
}

static int bad_args_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    hoop_comm_t *child = (hoop_comm_t *)1;
    hoop_status_t st = hoop_comm_split(comm, -2, 0, &child);
    if (st != HOOP_ERR_INVALID || child || !strstr(hoop_last_error(), "HOOP_SPLIT_NONE"))
        return harness_failf(rank, "color -2: %s, %s", hoop_status_str(st), hoop_last_error());
    if ((st = hoop_comm_split(NULL, 0, 0, &child)) != HOOP_ERR_INVALID ||
        (st = hoop_comm_split(comm, 0, 0, NULL)) != HOOP_ERR_INVALID)
        return harness_failf(rank, "a NULL argument: %s", hoop_status_str(st));
    /* Refused before any rank met: the parent is in step. */
    int32_t buf[64];
    return harness_allreduce_i32_checked(comm, rank, size, buf, 64);
}

Test(split, bad_arguments_are_refused_n2, .timeout = 60)
{
    char report[8192];
    bool ok = harness_run(2, NULL, bad_args_rank, NULL, 60.0, report, sizeof report);
    cr_assert(ok, "%s", report);
}

/* A rank killed as the others split: every other rank's split fails,
 * naming it, within seconds, not at a deadline. */
static int dying_rank(hoop_comm_t *comm, int rank, int size, void *arg)
{
    (void)size;
    const int victim = *(const int *)arg;
    if (rank == victim)
        raise(SIGKILL);
    double t0 = harness_now();
    hoop_comm_t *child = NULL;
    hoop_status_t st = hoop_comm_split(comm, rank % 2, 0, &child);
    if (st == HOOP_OK || child)
        return harness_failf(rank, "split returned %s with rank %d dead", hoop_status_str(st),
                             victim);
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    if (!strstr(hoop_last_error(), want))
        return harness_failf(rank, "the sentence does not name %s: %s", want, hoop_last_error());
    if (harness_since(t0) > 10.0)
        return harness_failf(rank, "told after %.1f s", harness_since(t0));
    return 0;
}

Test(split, a_rank_killed_fails_every_other_rank_n4, .timeout = 120)
{
    for (int victim = 0; victim < 4; victim += 3) { /* the root, then another */
        hoop_config_t base;
        hoop_config_init(&base);
        base.timeout_s = 30;
        char report[8192];
        cr_assert(
            harness_run_victim(4, &base, dying_rank, &victim, victim, 60.0, report, sizeof report),
            "%s", report);
    }
}
