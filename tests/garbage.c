/* garbage.c - a fake rank's random header where a chunk should be, over
 * any transport (garbage.h). */
#include <criterion/criterion.h>

#include "garbage.h"
#include "harness.h"
#include "hoop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define GARBAGE_RANKS 4
#define GARBAGE_FAKE 3 /* its ring successor is rank 0 */
#define GARBAGE_COUNT (4u << 20)

struct garbage_board {
    int done[GARBAGE_RANKS];
    int status[GARBAGE_RANKS];
    double took[GARBAGE_RANKS];
    char why[GARBAGE_RANKS][512];
};

static struct garbage_board *gboard;

/* Rank 3 joins like a real rank, then sends, where its first chunk
 * should be, a message of the right length whose header is random bytes,
 * and stays until every real rank has returned. */
static int garbage_fake(int rank, int size, int port, void *arg)
{
    const struct hoop_transport_ops *ops = arg;
    hoop_config_t cfg;
    char root[64], token[64];
    harness_loopback_config(&cfg, rank, size, port, 30.0, root, token, NULL);
    cfg.chunk_bytes = 256 << 10;
    harness_fake_t f;
    hoop_status_t st = harness_fake_join(&f, &cfg, ops);
    if (st)
        return harness_fail(rank, "fake rank: joining the job", st);
    static uint8_t hdr[64], body[256 << 10];
    unsigned seed = 7;
    for (size_t i = 0; i < sizeof(hdr); i++)
        hdr[i] = (uint8_t)rand_r(&seed);
    /* What rank 0 expects from rank 3 first: its step-0 chunk of segment 3. */
    int rc = harness_fake_send(&f, hdr, sizeof(hdr), body, cfg.chunk_bytes, 20.0);
    if (rc)
        fprintf(stderr, "rank %d: fake rank: the garbage did not go: %s\n", rank, strerror(-rc));
    double t0 = harness_now();
    for (;;) {
        int all = 1;
        for (int r = 0; r < size; r++)
            all &= r == rank || __atomic_load_n(&gboard->done[r], __ATOMIC_SEQ_CST);
        if (all || harness_now() - t0 > 40.0)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    harness_fake_fini(&f);
    return 0;
}

static int garbage_victim(hoop_comm_t *comm, int rank, int size, void *arg)
{
    float *in = malloc(GARBAGE_COUNT * sizeof(float)), *out = malloc(GARBAGE_COUNT * sizeof(float));
    if (!in || !out)
        return harness_failf(rank, "out of memory");
    for (size_t i = 0; i < GARBAGE_COUNT; i++)
        in[i] = (float)(i % 1024);
    double t0 = harness_now();
    hoop_status_t st = hoop_allreduce(comm, in, out, GARBAGE_COUNT, HOOP_F32, HOOP_SUM);
    gboard->took[rank] = harness_now() - t0;
    gboard->status[rank] = (int)st;
    snprintf(gboard->why[rank], sizeof(gboard->why[rank]), "%s", st ? hoop_last_error() : "");
    __atomic_store_n(&gboard->done[rank], 1, __ATOMIC_SEQ_CST);
    free(in);
    free(out);
    return 0;
}

void garbage_instead_of_a_frame(const struct hoop_transport_ops *ops, const char *name)
{
    setenv("HOOP_TRANSPORT", name, 1);
    gboard = mmap(NULL, sizeof(*gboard), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                  0);
    cr_assert(gboard != MAP_FAILED, "mmap");
    memset(gboard, 0, sizeof(*gboard));
    static harness_job_t job;
    cr_assert(harness_job_init(&job), "%s", job.report);
    hoop_config_t base;
    hoop_config_init(&base);
    base.timeout_s = 20.0;
    base.chunk_bytes = 256 << 10;
    for (int r = 0; r < GARBAGE_RANKS; r++) {
        pid_t pid = r == GARBAGE_FAKE
                        ? harness_spawn_raw(&job, r, GARBAGE_RANKS, garbage_fake, (void *)ops)
                        : harness_spawn_rank(&job, r, GARBAGE_RANKS, &base, garbage_victim, NULL);
        cr_assert(pid > 0, "could not start rank %d", r);
    }
    bool ok = harness_wait(&job, 90, 15.0);
    unsetenv("HOOP_TRANSPORT");
    cr_assert(ok, "a rank crashed or hung:\n%s", job.report);
    for (int r = 0; r < GARBAGE_RANKS; r++) {
        if (r == GARBAGE_FAKE)
            continue;
        cr_log_info("rank %d: %s after %.3f s: %s", r,
                    hoop_status_str((hoop_status_t)gboard->status[r]), gboard->took[r],
                    gboard->why[r]);
        cr_expect_eq(gboard->status[r], HOOP_ERR_PEER, "rank %d returned %s: %s", r,
                     hoop_status_str((hoop_status_t)gboard->status[r]), gboard->why[r]);
        cr_expect(strstr(gboard->why[r], "rank 3") != NULL, "rank %d does not name rank 3: %s",
                  r, gboard->why[r]);
        cr_expect_lt(gboard->took[r], 10.0, "rank %d took %.1f s", r, gboard->took[r]);
    }
    cr_expect(strstr(gboard->why[0], "not a hoop data frame") != NULL,
              "rank 0, which read the bytes, does not say what they were: %s", gboard->why[0]);
    munmap(gboard, sizeof(*gboard));
}
