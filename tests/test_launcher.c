/* test_launcher.c - rank, size and root from other launchers' variables.
 *
 * The resolution is checked launcher by launcher on variables set in the
 * test's own process (every launcher's variables are cleared first: the
 * machine running the suite may hold some). Then ranks forked with nothing
 * but one launcher's variables form a real communicator; and the benchmark
 * runs under the real mpirun and torchrun, with no HOOP_* variable at all.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/launcher.h"
#include "harness.h"
#include "hoop.h"
#include "proc.h"

#define JOB_DEADLINE_S 60.0
#define REAL_LAUNCHER_LIMIT_S 90.0

static void clean_env(void)
{
    proc_clear_launcher_env();
    /* The one-rank and refusal sentences go to the log; keep it quiet. */
    setenv("HOOP_LOG_LEVEL", "error", 1);
}

static void set(const char *name, const char *value)
{
    setenv(name, value, 1);
}

static void setn(const char *name, long value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", value);
    setenv(name, buf, 1);
}

/* Resolve with cfg NULL; the status, and the config when it succeeded. */
static hoop_status_t resolve(struct hoop_boot_cfg *b)
{
    return hoop_boot_cfg_resolve(NULL, b);
}

static void expect_ok(struct hoop_boot_cfg *b, const char *launcher, int rank, int size)
{
    hoop_status_t st = resolve(b);
    cr_assert_eq(st, HOOP_OK, "resolution failed: %s", hoop_last_error());
    cr_assert_str_eq(b->launcher, launcher, "launcher %s, expected %s", b->launcher, launcher);
    cr_assert_eq(b->rank, rank, "rank %d, expected %d", b->rank, rank);
    cr_assert_eq(b->size, size, "size %d, expected %d", b->size, size);
}

static void expect_root(const struct hoop_boot_cfg *b, const char *host, unsigned port)
{
    cr_assert_str_eq(b->root_host, host, "root host %s, expected %s", b->root_host, host);
    cr_assert_eq(b->root_port, port, "root port %u, expected %u", b->root_port, port);
}

static void expect_invalid(const char *needle1, const char *needle2)
{
    struct hoop_boot_cfg b;
    hoop_status_t st = resolve(&b);
    cr_assert_eq(st, HOOP_ERR_INVALID, "expected HOOP_ERR_INVALID, got %s (%s)",
                 hoop_status_str(st), hoop_last_error());
    const char *msg = hoop_last_error();
    cr_assert(strstr(msg, needle1), "the sentence does not say '%s': %s", needle1, msg);
    if (needle2)
        cr_assert(strstr(msg, needle2), "the sentence does not say '%s': %s", needle2, msg);
}

static int token_is(const struct hoop_boot_cfg *b, const char *s)
{
    uint8_t t[HOOP_TOKEN_BYTES];
    hoop_token_from_string(s, t);
    return memcmp(t, b->token, sizeof t) == 0;
}

static int token_empty(const struct hoop_boot_cfg *b)
{
    return token_is(b, "");
}

/* ---- the host list parser --------------------------------------------- */

static void first_host(const char *list, const char *want)
{
    char out[64];
    int rc = hoop_hostlist_first(list, out, sizeof out);
    cr_assert_eq(rc, 0, "'%s' was refused (%d)", list, rc);
    cr_assert_str_eq(out, want, "first host of '%s' is '%s', expected '%s'", list, out, want);
}

Test(launcher, hostlist_first_host)
{
    first_host("node[01-04,07],gpu3", "node01");
    first_host("gpu3,node[01-04,07]", "gpu3");
    first_host("host-[007-010]", "host-007");
    first_host("rack[2-3]-n[10-11]", "rack2-n10");
    first_host("n[5]", "n5");
    first_host("n[9,3-4]", "n9");
    first_host("plain", "plain");
    first_host("a.b.example.org,c", "a.b.example.org");
    first_host("[1-2]", "1");
}

Test(launcher, hostlist_refuses_malformed_lists)
{
    static const char *const bad[] = {"", "node[01-04", "node01-04]", "node[a-b]", "node[4-1]",
                                      "a,,b", "a,", ",a", "node[01,]", "node[]", "n[1-2]x[",
                                      "a b", "n[1--2]", "n[[1]]"};
    char out[64];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(hoop_hostlist_first(bad[i], out, sizeof out), -EINVAL,
                     "'%s' was accepted as a host list", bad[i]);
    char small[6];
    cr_assert_eq(hoop_hostlist_first("node[0001-0004]", small, sizeof small), -ENAMETOOLONG);
    cr_assert_eq(hoop_hostlist_first("short,a-very-long-second-host", small, sizeof small), 0,
                 "only the first host has to fit");
    cr_assert_str_eq(small, "short");
}

/* ---- ports and tokens ----------------------------------------------------- */

Test(launcher, port_derivations)
{
    cr_assert_eq(hoop_launch_port_next(29500), 29501);
    cr_assert_eq(hoop_launch_port_next(1), 2);
    cr_assert_eq(hoop_launch_port_next(65535), 1024, "MASTER_PORT+1 must wrap into range");

    cr_assert_eq(hoop_launch_port_slurm(12345, 0), 20000 + 12345);
    cr_assert_eq(hoop_launch_port_slurm(12345, 1), 20000 + (12345 + 1009) % 12768);
    cr_assert_eq(hoop_launch_port_slurm(12768 + 7, 0), 20007);
    for (unsigned long long job = 1000000; job < 1000000 + 300; job++) {
        uint16_t p = hoop_launch_port_slurm(job, 0);
        cr_assert(p >= 20000 && p < 32768, "job %llu: port %u", job, p);
        cr_assert_neq(p, hoop_launch_port_slurm(job + 1, 0), "consecutive jobs share a port");
        cr_assert_neq(p, hoop_launch_port_slurm(job, 1), "a job's steps 0 and 1 share a port");
    }

    uint16_t a = hoop_launch_port_hash("1981480961"), b = hoop_launch_port_hash("1981480962");
    cr_assert(a >= 20000 && a < 32768 && b >= 20000 && b < 32768, "ports %u %u", a, b);
    cr_assert_eq(a, hoop_launch_port_hash("1981480961"), "the same job gives the same port");
    cr_assert_neq(a, b, "two job ids give one port (possible, but not for these two)");
}

Test(launcher, tokens_keep_jobs_apart)
{
    char t1[HOOP_TOKEN_BYTES + 1], t2[HOOP_TOKEN_BYTES + 1], t3[HOOP_TOKEN_BYTES + 1];
    hoop_launch_token("torchrun", "none|127.0.0.1:29500|0", t1);
    hoop_launch_token("torchrun", "none|127.0.0.1:29500|0", t2);
    cr_assert_str_eq(t1, t2, "a token must be the same on every rank of a job");
    hoop_launch_token("torchrun", "none|127.0.0.1:29600|0", t2);
    cr_assert_str_neq(t1, t2, "two jobs got one token");
    hoop_launch_token("openmpi", "none|127.0.0.1:29500|0", t3);
    cr_assert_str_neq(t1, t3, "two launchers got one token");
    cr_assert(strlen(t1) <= HOOP_TOKEN_BYTES && strlen(t3) <= HOOP_TOKEN_BYTES);
}

/* ---- resolution, launcher by launcher -------------------------------------- */

Test(launcher, nothing_is_one_rank)
{
    clean_env();
    struct hoop_boot_cfg b;
    expect_ok(&b, "none", 0, 1);
}

Test(launcher, hoop_variables)
{
    clean_env();
    set("HOOP_RANK", "1");
    set("HOOP_SIZE", "3");
    set("HOOP_ROOT", "10.1.1.1:5000");
    set("HOOP_TOKEN", "secret");
    struct hoop_boot_cfg b;
    expect_ok(&b, "hoop", 1, 3);
    expect_root(&b, "10.1.1.1", 5000);
    cr_assert(token_is(&b, "secret"));
}

Test(launcher, horovod)
{
    clean_env();
    set("HOROVOD_RANK", "2");
    set("HOROVOD_SIZE", "4");
    set("HOROVOD_LOCAL_RANK", "0");
    set("HOROVOD_LOCAL_SIZE", "2");
    set("HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.2.3.4");
    set("HOROVOD_GLOO_RENDEZVOUS_PORT", "4000");
    struct hoop_boot_cfg b;
    expect_ok(&b, "horovod", 2, 4);
    cr_assert_eq(b.local_rank, 0);
    expect_root(&b, "10.2.3.4", 4001);
    cr_assert(!token_empty(&b), "no token derived from horovod's rendezvous");

    /* Every rank on this host: loopback, whoever runs the rendezvous. */
    set("HOROVOD_LOCAL_RANK", "2");
    set("HOROVOD_LOCAL_SIZE", "4");
    expect_ok(&b, "horovod", 2, 4);
    expect_root(&b, "127.0.0.1", 4001);
}

Test(launcher, torchrun)
{
    clean_env();
    set("RANK", "1");
    set("WORLD_SIZE", "4");
    set("LOCAL_RANK", "1");
    set("LOCAL_WORLD_SIZE", "2");
    set("MASTER_ADDR", "master.example.org");
    set("MASTER_PORT", "29500");
    set("TORCHELASTIC_RUN_ID", "job-a");
    struct hoop_boot_cfg b, b2;
    expect_ok(&b, "torchrun", 1, 4);
    cr_assert_eq(b.local_rank, 1);
    expect_root(&b, "master.example.org", 29501);
    cr_assert(!token_empty(&b), "no token derived from torchrun's job");

    set("TORCHELASTIC_RUN_ID", "job-b");
    expect_ok(&b2, "torchrun", 1, 4);
    cr_assert(memcmp(b.token, b2.token, sizeof b.token) != 0, "two torchrun jobs, one token");

    set("MASTER_PORT", "65535");
    expect_ok(&b, "torchrun", 1, 4);
    expect_root(&b, "master.example.org", 1024);

    set("MASTER_ADDR", "fd00::1");
    expect_ok(&b, "torchrun", 1, 4);
    expect_root(&b, "fd00::1", 1024);
}

Test(launcher, openmpi)
{
    clean_env();
    set("OMPI_COMM_WORLD_RANK", "3");
    set("OMPI_COMM_WORLD_SIZE", "4");
    set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
    set("OMPI_MCA_ess_base_jobid", "1981480961");
    set("OMPI_MCA_orte_precondition_transports", "9eb8c276dcfca7d5-d985207f80316101");
    struct hoop_boot_cfg b;
    expect_ok(&b, "openmpi", 3, 4);
    cr_assert_eq(b.local_rank, 3);
    expect_root(&b, "127.0.0.1", hoop_launch_port_hash("1981480961"));
    cr_assert(!token_empty(&b));

    /* OpenMPI 5 names its job through PMIx only. */
    unsetenv("OMPI_MCA_ess_base_jobid");
    set("PMIX_NAMESPACE", "prterun-vm-1234@1");
    expect_ok(&b, "openmpi", 3, 4);
    expect_root(&b, "127.0.0.1", hoop_launch_port_hash("prterun-vm-1234@1"));
}

Test(launcher, openmpi_across_hosts_needs_hoop_root)
{
    clean_env();
    set("OMPI_COMM_WORLD_RANK", "1");
    set("OMPI_COMM_WORLD_SIZE", "4");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    set("OMPI_MCA_ess_base_jobid", "1981480961");
    expect_invalid("HOOP_ROOT", "span hosts");

    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    expect_invalid("HOOP_ROOT", "OMPI_COMM_WORLD_LOCAL_SIZE");

    set("HOOP_ROOT", "10.0.0.1:7000");
    struct hoop_boot_cfg b;
    expect_ok(&b, "openmpi", 1, 4);
    expect_root(&b, "10.0.0.1", 7000);
    cr_assert(!token_empty(&b), "the job's token is derived even when HOOP_ROOT is set");
}

Test(launcher, pmi)
{
    clean_env();
    set("PMI_RANK", "1");
    set("PMI_SIZE", "2");
    set("MPI_LOCALRANKID", "1");
    set("MPI_LOCALNRANKS", "2");
    set("PMI_JOBID", "77.0");
    struct hoop_boot_cfg b;
    expect_ok(&b, "pmi", 1, 2);
    cr_assert_eq(b.local_rank, 1);
    expect_root(&b, "127.0.0.1", hoop_launch_port_hash("77.0"));

    /* hydra gives no job id; its proxy made the socket pair behind PMI_FD. */
    unsetenv("PMI_JOBID");
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    setn("PMI_FD", sv[1]);
    char id[64];
    snprintf(id, sizeof id, "pmi-fd-peer:%ld:%ld", (long)getpid(), (long)getuid());
    expect_ok(&b, "pmi", 1, 2);
    expect_root(&b, "127.0.0.1", hoop_launch_port_hash(id));
    cr_assert(!token_empty(&b));

    /* Across hosts nothing says where rank 0 is. */
    set("MPI_LOCALRANKID", "0");
    set("MPI_LOCALNRANKS", "1");
    expect_invalid("HOOP_ROOT", "span hosts");
    close(sv[0]);
    close(sv[1]);
}

Test(launcher, pmi_under_srun_takes_slurms_root)
{
    clean_env();
    set("PMI_RANK", "1");
    set("PMI_SIZE", "2");
    set("PMI_JOBID", "500.0");
    set("SLURM_PROCID", "1");
    set("SLURM_NTASKS", "2");
    set("SLURM_STEP_ID", "0");
    set("SLURM_JOB_ID", "500");
    set("SLURM_STEP_NODELIST", "n[3-4]");
    struct hoop_boot_cfg b;
    expect_ok(&b, "pmi", 1, 2);
    expect_root(&b, "n3", hoop_launch_port_slurm(500, 0));

    /* A SLURM_PROCID that is not this rank's is some other launch's. */
    set("SLURM_PROCID", "0");
    expect_invalid("HOOP_ROOT", "MPI_LOCALNRANKS");
}

Test(launcher, slurm)
{
    clean_env();
    set("SLURM_PROCID", "2");
    set("SLURM_NTASKS", "4");
    set("SLURM_LOCALID", "0");
    set("SLURM_STEP_ID", "3");
    set("SLURM_JOB_ID", "123456");
    set("SLURM_STEP_NODELIST", "node[01-04,07],gpu3");
    set("SLURM_JOB_NODELIST", "other[1-9]");
    struct hoop_boot_cfg b;
    expect_ok(&b, "slurm", 2, 4);
    cr_assert_eq(b.local_rank, 0);
    expect_root(&b, "node01", hoop_launch_port_slurm(123456, 3));
    cr_assert(!token_empty(&b));

    unsetenv("SLURM_STEP_NODELIST");
    expect_ok(&b, "slurm", 2, 4);
    expect_root(&b, "other1", hoop_launch_port_slurm(123456, 3));

    set("SLURM_JOB_NODELIST", "other[1-9");
    expect_invalid("SLURM_JOB_NODELIST", "HOOP_ROOT");
}

Test(launcher, slurm_batch_script_is_not_a_job)
{
    clean_env();
    /* What sbatch gives its script: task 0 of an allocation, no step. */
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "8");
    set("SLURM_JOB_ID", "99");
    set("SLURM_JOB_NODELIST", "n[1-2]");
    struct hoop_boot_cfg b;
    expect_ok(&b, "none", 0, 1);
}

Test(launcher, precedence)
{
    clean_env();
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "2");
    set("SLURM_STEP_ID", "0");
    set("SLURM_JOB_ID", "1");
    set("SLURM_STEP_NODELIST", "n1");
    set("OMPI_COMM_WORLD_RANK", "1");
    set("OMPI_COMM_WORLD_SIZE", "3");
    set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
    set("OMPI_MCA_ess_base_jobid", "5");
    struct hoop_boot_cfg b;
    expect_ok(&b, "openmpi", 1, 3);

    set("RANK", "5");
    set("WORLD_SIZE", "8");
    set("MASTER_ADDR", "m");
    set("MASTER_PORT", "100");
    expect_ok(&b, "torchrun", 5, 8);

    set("HOROVOD_RANK", "6");
    set("HOROVOD_SIZE", "8");
    set("HOROVOD_LOCAL_SIZE", "8");
    set("HOROVOD_GLOO_RENDEZVOUS_ADDR", "m");
    set("HOROVOD_GLOO_RENDEZVOUS_PORT", "200");
    expect_ok(&b, "horovod", 6, 8);

    /* The config struct is above everything. */
    hoop_config_t cfg;
    hoop_config_init(&cfg);
    cfg.rank = 0;
    cfg.size = 2;
    cfg.root = "127.0.0.1:9";
    cr_assert_eq(hoop_boot_cfg_resolve(&cfg, &b), HOOP_OK, "%s", hoop_last_error());
    cr_assert_str_eq(b.launcher, "config");
    cr_assert_eq(b.rank, 0);
}

Test(launcher, partial_variables_say_what_was_found)
{
    clean_env();
    set("RANK", "1");
    set("MASTER_ADDR", "m");
    expect_invalid("found RANK=1, MASTER_ADDR but no WORLD_SIZE (torchrun?)", NULL);

    clean_env();
    set("HOROVOD_SIZE", "4");
    expect_invalid("no HOROVOD_RANK (horovod?)", "HOROVOD_SIZE=4");

    clean_env();
    set("OMPI_COMM_WORLD_RANK", "4");
    set("OMPI_COMM_WORLD_SIZE", "4");
    expect_invalid("OMPI_COMM_WORLD_RANK is not below OMPI_COMM_WORLD_SIZE", NULL);

    clean_env();
    set("PMI_RANK", "1");
    set("PMI_SIZE", "2");
    set("MPI_LOCALRANKID", "1");
    set("MPI_LOCALNRANKS", "1");
    expect_invalid("MPI_LOCALNRANKS=1", "correct or unset MPI_LOCALNRANKS");

    clean_env();
    set("PMI_RANK", "one");
    set("PMI_SIZE", "2");
    expect_invalid("PMI_RANK=one", "not a number");

    clean_env();
    set("SLURM_NTASKS", "2");
    set("SLURM_STEP_ID", "0");
    expect_invalid("no SLURM_PROCID (slurm?)", NULL);

    /* Rank and size but no way to a root. */
    clean_env();
    set("RANK", "1");
    set("WORLD_SIZE", "2");
    expect_invalid("no MASTER_ADDR (torchrun?)", "HOOP_ROOT");
    clean_env();
    set("HOROVOD_RANK", "1");
    set("HOROVOD_SIZE", "2");
    expect_invalid("HOROVOD_GLOO_RENDEZVOUS_PORT", "HOOP_ROOT");
}

Test(launcher, contradictions_are_named)
{
    clean_env();
    set("HOOP_RANK", "0");
    set("HOOP_SIZE", "4");
    set("HOOP_ROOT", "127.0.0.1:5000");
    set("OMPI_COMM_WORLD_RANK", "2");
    set("OMPI_COMM_WORLD_SIZE", "4");
    expect_invalid("HOOP_RANK=0 and OMPI_COMM_WORLD_RANK=2 disagree", NULL);

    set("OMPI_COMM_WORLD_RANK", "0");
    set("OMPI_COMM_WORLD_SIZE", "8");
    expect_invalid("HOOP_SIZE=4 and OMPI_COMM_WORLD_SIZE=8 disagree", NULL);

    /* Agreeing is fine, and HOOP_* wins. */
    set("OMPI_COMM_WORLD_SIZE", "4");
    struct hoop_boot_cfg b;
    expect_ok(&b, "hoop", 0, 4);

    /* A launcher that started one process, which then started the job
     * (srun -n 1 hooprun ...), is no contradiction. */
    clean_env();
    set("HOOP_RANK", "2");
    set("HOOP_SIZE", "4");
    set("HOOP_ROOT", "127.0.0.1:5000");
    set("SLURM_PROCID", "0");
    set("SLURM_NTASKS", "1");
    set("SLURM_STEP_ID", "0");
    expect_ok(&b, "hoop", 2, 4);
}

Test(launcher, hoop_variables_override_the_launchers)
{
    clean_env();
    set("RANK", "1");
    set("WORLD_SIZE", "4");
    set("MASTER_ADDR", "master");
    set("MASTER_PORT", "29500");
    set("HOOP_ROOT", "10.9.8.7:1234");
    set("HOOP_TOKEN", "mine");
    set("HOOP_BOOTSTRAP_TIMEOUT", "7.5");
    struct hoop_boot_cfg b;
    expect_ok(&b, "torchrun", 1, 4);
    expect_root(&b, "10.9.8.7", 1234);
    cr_assert(token_is(&b, "mine"), "HOOP_TOKEN must override the derived token");
    cr_assert_float_eq(b.timeout_s, 7.5, 1e-9);

    set("HOOP_ROOT", "no-port");
    expect_invalid("HOOP_ROOT", "host:port");
}

Test(launcher, one_rank_from_a_launcher)
{
    clean_env();
    set("RANK", "0");
    set("WORLD_SIZE", "1");
    struct hoop_boot_cfg b;
    expect_ok(&b, "torchrun", 0, 1);
}

/* ---- real communicators from one launcher's variables ---------------------- */

enum style { STYLE_TORCHRUN, STYLE_SLURM, STYLE_PMI, STYLE_HOROVOD };

struct style_job {
    enum style style;
    const char *launcher;
    long slurm_job;  /* SLURM: a job id whose port is free */
    int pmi_fd[3];   /* PMI: each rank's end of a socket pair this process made */
};

static int exact_sum(hoop_comm_t *comm, int rank, int size)
{
    enum { COUNT = 4099 };
    static int64_t buf[COUNT];
    for (int i = 0; i < COUNT; i++)
        buf[i] = (int64_t)(rank + 1) * 1000003 + i;
    hoop_status_t st = hoop_allreduce(comm, buf, buf, COUNT, HOOP_I64, HOOP_SUM);
    if (st != HOOP_OK)
        return harness_fail(rank, "allreduce", st);
    for (int i = 0; i < COUNT; i++) {
        int64_t want = (int64_t)size * (size + 1) / 2 * 1000003 + (int64_t)size * i;
        if (buf[i] != want)
            return harness_failf(rank, "element %d is %lld, expected %lld", i,
                                 (long long)buf[i], (long long)want);
    }
    return 0;
}

static int style_rank(int rank, int size, int port, void *arg)
{
    const struct style_job *job = arg;
    proc_clear_launcher_env();
    setenv("HOOP_BOOTSTRAP_TIMEOUT", "20", 1);
    setenv("HOOP_TIMEOUT", "30", 1);
    switch (job->style) {
    case STYLE_TORCHRUN:
        setn("RANK", rank);
        setn("WORLD_SIZE", size);
        setn("LOCAL_RANK", rank);
        setn("LOCAL_WORLD_SIZE", size);
        set("MASTER_ADDR", "127.0.0.1");
        setn("MASTER_PORT", port - 1); /* the root is on MASTER_PORT+1 */
        set("TORCHELASTIC_RUN_ID", "hoop-test");
        break;
    case STYLE_SLURM:
        setn("SLURM_PROCID", rank);
        setn("SLURM_NTASKS", size);
        setn("SLURM_LOCALID", rank);
        set("SLURM_STEP_ID", "0");
        setn("SLURM_JOB_ID", job->slurm_job);
        set("SLURM_JOB_NODELIST", "localhost,node[02-04]");
        break;
    case STYLE_PMI:
        setn("PMI_RANK", rank);
        setn("PMI_SIZE", size);
        setn("MPI_LOCALRANKID", rank);
        setn("MPI_LOCALNRANKS", size);
        setn("PMI_FD", job->pmi_fd[rank]);
        break;
    case STYLE_HOROVOD:
        setn("HOROVOD_RANK", rank);
        setn("HOROVOD_SIZE", size);
        setn("HOROVOD_LOCAL_RANK", rank);
        setn("HOROVOD_LOCAL_SIZE", size);
        set("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1");
        setn("HOROVOD_GLOO_RENDEZVOUS_PORT", port - 1);
        break;
    }
    hoop_comm_t *comm = NULL;
    hoop_status_t st = hoop_comm_init(&comm, NULL);
    if (st != HOOP_OK)
        return harness_fail(rank, "hoop_comm_init from a launcher's variables", st);
    int rc = 0;
    if (hoop_comm_rank(comm) != rank || hoop_comm_size(comm) != size)
        rc = harness_failf(rank, "rank/size %d/%d, expected %d/%d", hoop_comm_rank(comm),
                           hoop_comm_size(comm), rank, size);
    else if (strcmp(hoop_comm_launcher(comm), job->launcher) != 0)
        rc = harness_failf(rank, "hoop_comm_launcher() is '%s', expected '%s'",
                           hoop_comm_launcher(comm), job->launcher);
    else
        rc = exact_sum(comm, rank, size);
    hoop_comm_destroy(comm);
    return rc;
}

static int port_free(unsigned port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void run_style(struct style_job *job)
{
    char report[8192];
    bool ok = harness_run_raw(3, style_rank, job, JOB_DEADLINE_S, report, sizeof report);
    cr_assert(ok, "3 ranks with %s's variables only:\n%s", job->launcher, report);
}

Test(launcher, three_ranks_from_torchrun_variables, .timeout = 90)
{
    struct style_job job = {.style = STYLE_TORCHRUN, .launcher = "torchrun"};
    run_style(&job);
}

Test(launcher, three_ranks_from_horovod_variables, .timeout = 90)
{
    struct style_job job = {.style = STYLE_HOROVOD, .launcher = "horovod"};
    run_style(&job);
}

Test(launcher, three_ranks_from_slurm_variables, .timeout = 90)
{
    struct style_job job = {.style = STYLE_SLURM, .launcher = "slurm"};
    /* The port comes from the job id: pick a job whose port is free. */
    long base = 100000 + (long)getpid() % 10000;
    for (long j = base; j < base + 200 && !job.slurm_job; j++)
        if (port_free(hoop_launch_port_slurm((unsigned long long)j, 0)))
            job.slurm_job = j;
    cr_assert(job.slurm_job, "no free port among 200 SLURM job ids from %ld", base);
    run_style(&job);
}

Test(launcher, three_ranks_from_pmi_variables, .timeout = 90)
{
    struct style_job job = {.style = STYLE_PMI, .launcher = "pmi"};
    /* As hydra's proxy does: one socket pair per rank, made by the process
     * that starts the ranks, which is what ties them to one job. */
    int keep[3];
    for (int r = 0; r < 3; r++) {
        int sv[2];
        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0, "socketpair: %s",
                     strerror(errno));
        /* The rank's end survives fork (no exec happens). */
        keep[r] = sv[0];
        job.pmi_fd[r] = sv[1];
    }
    char id[64];
    snprintf(id, sizeof id, "pmi-fd-peer:%ld:%ld", (long)getpid(), (long)getuid());
    unsigned port = hoop_launch_port_hash(id);
    if (!port_free(port))
        cr_skip_test("port %u, derived from this test process's pid, is taken by something "
                     "else on this machine", port);
    run_style(&job);
    for (int r = 0; r < 3; r++) {
        close(keep[r]);
        close(job.pmi_fd[r]);
    }
}

/* ---- the real launchers ---------------------------------------------------- */

static const char *bench_path(char *buf, size_t len)
{
    snprintf(buf, len, "%s", harness_built("ring_bench"));
    return buf;
}

static void expect_bench_ok(struct proc *p, const char *what)
{
    cr_assert(!p->timed_out, "%s did not finish within %.0f s:\n%s", what,
              REAL_LAUNCHER_LIMIT_S, p->out);
    cr_assert_eq(p->status, 0, "%s exited with %d:\n%s", what, p->status, p->out);
    cr_assert(strstr(p->out, "Out of bounds values : 0 OK"),
              "%s did not report 'Out of bounds values : 0 OK':\n%s", what, p->out);
    /* Four one-rank jobs would pass the check above. */
    cr_assert(strstr(p->out, "# nranks 4 ") && !strstr(p->out, "# nranks 1 "),
              "%s did not form one 4-rank communicator:\n%s", what, p->out);
}

Test(launcher, real_mpirun_without_hoop_variables, .timeout = 150)
{
    char mpirun[4096], bench[4096];
    if (!proc_which("mpirun.openmpi", mpirun, sizeof mpirun))
        cr_skip_test("mpirun.openmpi is not installed (tools/install-deps installs "
                     "openmpi-bin), so OpenMPI's variables cannot be tried for real");
    const char *argv[] = {mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4",
                          bench_path(bench, sizeof bench), "-b", "8", "-e", "1M", NULL};
    char **env = proc_env_clean(NULL);
    cr_assert_not_null(env);
    struct proc p;
    cr_assert(proc_run(&p, argv, env, REAL_LAUNCHER_LIMIT_S), "cannot start %s", mpirun);
    proc_env_free(env);
    expect_bench_ok(&p, "mpirun -np 4 ring_bench");
    proc_free(&p);
}

Test(launcher, real_torchrun_without_hoop_variables, .timeout = 150)
{
    char torchrun[4096], bench[4096];
    if (!proc_which("torchrun", torchrun, sizeof torchrun))
        cr_skip_test("torchrun is not installed (tools/install-deps installs python3-torch), "
                     "so torchrun's variables cannot be tried for real");
    /* torchrun's own store takes MASTER_PORT and hoop's root MASTER_PORT+1:
     * both must be free, and not torchrun's 29500 that another job may use. */
    unsigned master = 0;
    for (int tries = 0; tries < 50 && !master; tries++) {
        int p = harness_free_port();
        if (p > 0 && p < 65535 && port_free((unsigned)p + 1))
            master = (unsigned)p;
    }
    cr_assert(master, "no two free consecutive ports on 127.0.0.1");
    char port_arg[16];
    snprintf(port_arg, sizeof port_arg, "%u", master);
    /* Underscored options are the ones every torchrun version knows. Debian
     * 12's torch 1.13 on Python 3.11 cannot parse its own default for
     * --redirects/--tee ("0"), hence 1 (stdout, still shown); a short
     * monitor interval spares 5 s of waiting after the ranks exit. */
    const char *argv[] = {torchrun, "--nproc_per_node", "4", "--redirects", "1", "--tee", "1",
                          "--monitor_interval", "0.2", "--master_addr", "127.0.0.1",
                          "--master_port", port_arg, "--no_python",
                          bench_path(bench, sizeof bench), "-b", "8", "-e", "1M", NULL};
    char **env = proc_env_clean(NULL);
    cr_assert_not_null(env);
    struct proc p;
    cr_assert(proc_run(&p, argv, env, REAL_LAUNCHER_LIMIT_S), "cannot start %s", torchrun);
    proc_env_free(env);
    expect_bench_ok(&p, "torchrun --nproc_per_node 4 ring_bench");
    proc_free(&p);
}
