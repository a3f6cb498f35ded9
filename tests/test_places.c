/* test_places.c - where each rank is, on emulated hosts (a UTS namespace
 * named for each, harness_be_host): hoop_comm_local_rank/size, the cross
 * rank and size as Horovod defines them, and whether the hosts are
 * homogeneous, whatever order the ranks are given in. The expected values
 * are worked out here from the hosts alone, by counting. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

#define PJ_MAX 8

struct places_job {
    int host[PJ_MAX]; /* per rank: its emulated host (0: this one) */
};

/* What rank r should be told, counted from the hosts: its local rank is
 * the ranks before it on its host, its cross rank the ranks before it with
 * its local rank. */
struct places {
    int local_rank, local_size, cross_rank, cross_size, homogeneous;
};

static struct places places_of(const struct places_job *j, int n, int r)
{
    struct places p = {0};
    int lr[PJ_MAX] = {0};
    for (int q = 0; q < n; q++) {
        lr[q] = 0;
        for (int k = 0; k < q; k++)
            lr[q] += j->host[k] == j->host[q];
    }
    for (int q = 0; q < n; q++) {
        p.local_size += j->host[q] == j->host[r];
        if (lr[q] == lr[r]) {
            p.cross_size++;
            p.cross_rank += q < r;
        }
    }
    p.local_rank = lr[r];
    p.homogeneous = 1;
    for (int q = 0; q < n; q++) {
        int size_q = 0;
        for (int k = 0; k < n; k++)
            size_q += j->host[k] == j->host[q];
        if (size_q != p.local_size)
            p.homogeneous = 0;
    }
    return p;
}

static int places_rank(int rank, int size, int port, void *arg)
{
    const struct places_job *j = arg;
    int rc = harness_be_host(rank, j->host[rank]);
    if (rc)
        return rc;
    char root[64], token[64];
    hoop_config_t cfg;
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    hoop_comm_t *comm;
    hoop_status_t st = hoop_comm_init(&comm, &cfg);
    if (st)
        return harness_fail(rank, "hoop_comm_init", st);
    struct places want = places_of(j, size, rank);
    struct places got = {hoop_comm_local_rank(comm), hoop_comm_local_size(comm),
                         hoop_comm_cross_rank(comm), hoop_comm_cross_size(comm),
                         hoop_comm_is_homogeneous(comm)};
    if (memcmp(&got, &want, sizeof(got)))
        rc = harness_failf(rank,
                           "local %d of %d, cross %d of %d, homogeneous %d; expected local %d "
                           "of %d, cross %d of %d, homogeneous %d",
                           got.local_rank, got.local_size, got.cross_rank, got.cross_size,
                           got.homogeneous, want.local_rank, want.local_size, want.cross_rank,
                           want.cross_size, want.homogeneous);
    hoop_comm_destroy(comm);
    return rc;
}

static void run_places(const struct places_job *tmpl, int n)
{
    struct places_job *j =
        mmap(NULL, sizeof(*j), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(j != MAP_FAILED, "mmap: %s", strerror(errno));
    *j = *tmpl;
    static char report[16384];
    bool ok = harness_run_raw(n, places_rank, j, 100.0, report, sizeof(report));
    if (!ok && strstr(report, "exit code 77"))
        cr_skip_test("this test cannot make a UTS namespace (it needs CAP_SYS_ADMIN):\n%s", report);
    cr_assert(ok, "%s", report);
    munmap(j, sizeof(*j));
}

/* Two hosts of two, given alternately (as srun's cyclic distribution
 * does): rank 1 is the first rank of the second host, so cross rank 1 of
 * 2 (not rank / local size = 0). */
Test(places, interleaved_hosts, .timeout = 120)
{
    struct places_job j = {.host = {0, 1, 0, 1}};
    run_places(&j, 4);
}

/* Hosts of 3 and 1 ranks, out of order: local ranks 1 and 2 have one
 * host each, and the job is not homogeneous. */
Test(places, hosts_of_unequal_size, .timeout = 120)
{
    struct places_job j = {.host = {0, 1, 0, 0}};
    run_places(&j, 4);
}

/* Three hosts of two, host by host. */
Test(places, three_hosts_in_order, .timeout = 120)
{
    struct places_job j = {.host = {0, 0, 1, 1, 2, 2}};
    run_places(&j, 6);
}

/* One host: every rank its own cross group of one. */
Test(places, one_host, .timeout = 120)
{
    struct places_job j = {.host = {0, 0, 0}};
    run_places(&j, 3);
}
