/* launcher.c - rank, size, root and a job token from the variables that
 * other launchers give each process. Only torchrun and Horovod name a host
 * for rank 0; SLURM names the step's hosts, of which task 0 runs on the
 * first; OpenMPI and PMI launchers name none, so there a root is derived
 * only when every rank is on this host (or srun started the ranks). */
#include "bootstrap/launcher.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/status.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define HOOP_LAUNCH_RANK_MAX (1L << 24)

struct launcher {
    const char *name;
    const char *rank_var, *size_var, *local_rank_var, *local_size_var;
    /* Set by the launcher beside rank and size; listed in what was found. */
    const char *const *more_vars;
    int (*present)(const struct launcher *ld);
    void (*place)(struct hoop_launch *l);
};

static const char *env(const char *name)
{
    const char *v = name ? getenv(name) : NULL;
    return v && *v ? v : NULL;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

uint16_t hoop_launch_port_next(unsigned port)
{
    return port >= 65535 ? 1024 : (uint16_t)(port + 1);
}

uint16_t hoop_launch_port_hash(const char *identity)
{
    return (uint16_t)(HOOP_LAUNCH_PORT_BASE + hoop_fnv1a_str(HOOP_FNV1A_INIT, identity) % HOOP_LAUNCH_PORT_SPAN);
}

uint16_t hoop_launch_port_slurm(unsigned long long job_id, unsigned long long step_id)
{
    unsigned long long span = HOOP_LAUNCH_PORT_SPAN;
    return (uint16_t)(HOOP_LAUNCH_PORT_BASE + (job_id % span + 1009 * (step_id % span)) % span);
}

void hoop_launch_token(const char *launcher, const char *identity,
                       char out[HOOP_TOKEN_BYTES + 1])
{
    uint64_t h = hoop_fnv1a_str(hoop_fnv1a_str(hoop_fnv1a_str(HOOP_FNV1A_INIT, launcher), "\n"),
                                identity);
    snprintf(out, HOOP_TOKEN_BYTES + 1, "%.15s-%016" PRIx64, launcher, h);
}

/* "host:port", bracketed when host is an IPv6 address. */
static void set_root(struct hoop_launch *l, const char *host, unsigned port)
{
    snprintf(l->root, sizeof(l->root), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
}

/* ---- what was found, for the sentences -------------------------------- */

struct found {
    char text[384];
    int n;
};

static void found_add(struct found *f, const char *name, int with_value)
{
    const char *v = env(name);
    if (!v)
        return;
    size_t used = strlen(f->text);
    if (used + 1 >= sizeof(f->text))
        return;
    snprintf(f->text + used, sizeof(f->text) - used, with_value ? "%s%s=%.40s" : "%s%s",
             f->n ? ", " : "", name, v);
    f->n++;
}

static void found_launcher(struct found *f, const struct launcher *ld)
{
    memset(f, 0, sizeof(*f));
    found_add(f, ld->rank_var, 1);
    found_add(f, ld->size_var, 1);
    found_add(f, ld->local_rank_var, 1);
    found_add(f, ld->local_size_var, 1);
    for (const char *const *v = ld->more_vars; v && *v; v++)
        found_add(f, *v, 0);
}

/* ---- SLURM ---------------------------------------------------------------- */

static const char *slurm_nodelist_var(void)
{
    /* srun may run a step on part of the allocation: the step's list first. */
    static const char *const names[] = {"SLURM_STEP_NODELIST", "SLURM_NODELIST",
                                        "SLURM_JOB_NODELIST"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (env(names[i]))
            return names[i];
    return NULL;
}

static const char *slurm_step_var(void)
{
    return env("SLURM_STEP_ID") ? "SLURM_STEP_ID" : env("SLURM_STEPID") ? "SLURM_STEPID" : NULL;
}

static const char *slurm_job_var(void)
{
    return env("SLURM_JOB_ID") ? "SLURM_JOB_ID" : env("SLURM_JOBID") ? "SLURM_JOBID" : NULL;
}

/* A batch script sees SLURM_PROCID=0 and the allocation's SLURM_NTASKS
 * without being one of those tasks; only srun's steps have a step id. */
static int slurm_present(const struct launcher *ld)
{
    if (!env(ld->rank_var) && !env(ld->size_var))
        return 0;
    if (!slurm_step_var()) {
        HOOP_DEBUG("SLURM_PROCID/SLURM_NTASKS without SLURM_STEP_ID: a batch script, not a "
                   "task of srun; not taken as the launcher");
        return 0;
    }
    return 1;
}

/* Root on the first host of the step, token from job and step. Returns 0,
 * or -1 with l->no_root saying why. */
static int slurm_place_root(struct hoop_launch *l)
{
    const char *list_var = slurm_nodelist_var(), *job_var = slurm_job_var();
    const char *step_var = slurm_step_var();
    long long unsigned job = 0, step = 0;
    char *end;
    if (job_var) {
        errno = 0;
        job = strtoull(env(job_var), &end, 10);
        if (errno || *end)
            job_var = NULL;
    }
    if (step_var) {
        errno = 0;
        step = strtoull(env(step_var), &end, 10);
        if (errno || *end)
            step = 0; /* "batch", "extern": still one step per job */
    }
    if (job_var) {
        char id[96];
        snprintf(id, sizeof(id), "%s.%s", env(job_var), step_var ? env(step_var) : "");
        hoop_launch_token("slurm", id, l->token);
    }
    if (!list_var || !job_var) {
        snprintf(l->no_root, sizeof(l->no_root),
                 "SLURM gives %s: set HOOP_ROOT=host:port (an address of the first host of the "
                 "step and a free port there)",
                 !list_var ? "no node list (SLURM_STEP_NODELIST, SLURM_NODELIST, "
                             "SLURM_JOB_NODELIST)"
                           : "no numeric SLURM_JOB_ID to derive a port from");
        return -1;
    }
    char host[HOOP_HOST_MAX];
    int rc = hoop_hostlist_first(env(list_var), host, sizeof(host));
    if (rc) {
        snprintf(l->no_root, sizeof(l->no_root),
                 "%s='%.200s' is %s: set HOOP_ROOT=host:port (an address of the first host of "
                 "the step and a free port there)",
                 list_var, env(list_var),
                 rc == -ENAMETOOLONG ? "a host list whose first name is too long"
                                     : "not a host list like node[01-04,07],gpu3");
        return -1;
    }
    set_root(l, host, hoop_launch_port_slurm(job, step));
    snprintf(l->root_from, sizeof(l->root_from),
             "the first host of %s, port from %s%s%s", list_var, job_var,
             step_var ? " and " : "", step_var ? step_var : "");
    return 0;
}

static void slurm_place(struct hoop_launch *l)
{
    slurm_place_root(l);
}

/* OpenMPI and PMI name no host for rank 0; when srun started the ranks
 * (SLURM agrees on rank and size), SLURM's first host is it. */
static int slurm_fallback(struct hoop_launch *l)
{
    long r, s;
    if (!slurm_step_var() || parse_long(env("SLURM_PROCID"), 0, HOOP_LAUNCH_RANK_MAX, &r) ||
        parse_long(env("SLURM_NTASKS"), 1, HOOP_LAUNCH_RANK_MAX, &s) || r != l->rank ||
        s != l->size)
        return -1;
    char why[sizeof(l->no_root)];
    memcpy(why, l->no_root, sizeof(why));
    char token[sizeof(l->token)];
    memcpy(token, l->token, sizeof(token));
    if (slurm_place_root(l)) {
        memcpy(l->no_root, why, sizeof(why));
        return -1;
    }
    if (token[0]) /* the launcher's own identity is the better one */
        memcpy(l->token, token, sizeof(token));
    return 0;
}

/* ---- Horovod, torchrun ------------------------------------------------- */

static void horovod_place(struct hoop_launch *l)
{
    const char *addr = env("HOROVOD_GLOO_RENDEZVOUS_ADDR");
    const char *port_s = env("HOROVOD_GLOO_RENDEZVOUS_PORT");
    long port;
    int port_ok = parse_long(port_s, 1, 65535, &port) == 0;
    if (addr && port_ok) {
        char id[HOOP_HOST_MAX + 16];
        snprintf(id, sizeof(id), "%s:%ld", addr, port);
        hoop_launch_token("horovod", id, l->token);
    }
    if (!port_ok) {
        snprintf(l->no_root, sizeof(l->no_root),
                 "horovod gives %s: set HOOP_ROOT=host:port (an address of rank 0's host and a "
                 "free port there)",
                 port_s ? "a HOROVOD_GLOO_RENDEZVOUS_PORT that is not a port"
                        : "no HOROVOD_GLOO_RENDEZVOUS_PORT (not started by horovodrun with "
                          "gloo?)");
        return;
    }
    /* The rendezvous server is horovodrun's, on the host it runs on: the
     * right root when that is rank 0's host, which is horovodrun's habit
     * when started on the first host of -H. One host needs no such luck. */
    if (l->local_size == l->size) {
        set_root(l, "127.0.0.1", hoop_launch_port_next((unsigned)port));
        snprintf(l->root_from, sizeof(l->root_from),
                 "every rank on this host; port HOROVOD_GLOO_RENDEZVOUS_PORT+1");
    } else if (addr) {
        set_root(l, addr, hoop_launch_port_next((unsigned)port));
        snprintf(l->root_from, sizeof(l->root_from),
                 "HOROVOD_GLOO_RENDEZVOUS_ADDR and HOROVOD_GLOO_RENDEZVOUS_PORT+1");
    } else {
        snprintf(l->no_root, sizeof(l->no_root),
                 "horovod gives no HOROVOD_GLOO_RENDEZVOUS_ADDR and the ranks span hosts: set "
                 "HOOP_ROOT=host:port (an address of rank 0's host and a free port there)");
    }
}

static void torchrun_place(struct hoop_launch *l)
{
    const char *addr = env("MASTER_ADDR"), *port_s = env("MASTER_PORT");
    long port;
    int port_ok = parse_long(port_s, 1, 65535, &port) == 0;
    if (addr && port_ok) {
        /* A restarted group must not meet what is left of the last one. */
        char id[HOOP_HOST_MAX + 160];
        snprintf(id, sizeof(id), "%.100s|%s:%ld|%.20s",
                 env("TORCHELASTIC_RUN_ID") ? env("TORCHELASTIC_RUN_ID") : "", addr, port,
                 env("TORCHELASTIC_RESTART_COUNT") ? env("TORCHELASTIC_RESTART_COUNT") : "");
        hoop_launch_token("torchrun", id, l->token);
        /* torchrun's own store may hold MASTER_PORT on that host. */
        set_root(l, addr, hoop_launch_port_next((unsigned)port));
        snprintf(l->root_from, sizeof(l->root_from), "MASTER_ADDR and MASTER_PORT+1");
        return;
    }
    struct found f = {{0}, 0};
    found_add(&f, "RANK", 1);
    found_add(&f, "WORLD_SIZE", 1);
    found_add(&f, "MASTER_ADDR", 0);
    found_add(&f, "MASTER_PORT", 1);
    snprintf(l->no_root, sizeof(l->no_root),
             "found %.200s but %s (torchrun?): set MASTER_ADDR and MASTER_PORT, or "
             "HOOP_ROOT=host:port (an address of rank 0's host and a free port there)",
             f.text,
             !addr ? "no MASTER_ADDR" : port_s ? "a MASTER_PORT that is not a port" : "no MASTER_PORT");
}

/* ---- OpenMPI, PMI ------------------------------------------------------- */

static void openmpi_place(struct hoop_launch *l)
{
    /* 4.x: the job id, and a per-job random key that other users cannot
     * read; 5.x: the PMIx namespace. */
    const char *job = env("OMPI_MCA_ess_base_jobid");
    const char *job_var = "OMPI_MCA_ess_base_jobid";
    if (!job) {
        job = env("PMIX_NAMESPACE");
        job_var = "PMIX_NAMESPACE";
    }
    const char *key = env("OMPI_MCA_orte_precondition_transports");
    if (job || key) {
        char id[256];
        snprintf(id, sizeof(id), "%.100s|%.100s", job ? job : "", key ? key : "");
        hoop_launch_token("openmpi", id, l->token);
    }
    if (job && l->local_size == l->size) {
        set_root(l, "127.0.0.1", hoop_launch_port_hash(job));
        snprintf(l->root_from, sizeof(l->root_from), "every rank on this host; port from %s",
                 job_var);
        return;
    }
    if (l->local_size == l->size)
        snprintf(l->no_root, sizeof(l->no_root),
                 "OpenMPI gives no job id (OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE) to derive a "
                 "port from: set HOOP_ROOT=127.0.0.1:port with a free port");
    else
        snprintf(l->no_root, sizeof(l->no_root),
                 "OpenMPI does not say where rank 0 runs, and %s: set HOOP_ROOT=host:port (an "
                 "address of rank 0's host and a free port there) for every rank",
                 l->local_size < 0 ? "not whether the ranks share a host (no "
                                     "OMPI_COMM_WORLD_LOCAL_SIZE)"
                                   : "the ranks span hosts (OMPI_COMM_WORLD_LOCAL_SIZE is less "
                                     "than OMPI_COMM_WORLD_SIZE)");
    slurm_fallback(l);
}

/* The process that made the socket pair behind PMI_FD: hydra's proxy,
 * one per job and host, whichever shell wraps the rank. */
static int pmi_fd_peer(char *out, size_t len)
{
    long fd;
    struct ucred cred;
    socklen_t cl = sizeof(cred);
    if (parse_long(env("PMI_FD"), 0, 1L << 20, &fd) ||
        getsockopt((int)fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) || cred.pid <= 0)
        return -1;
    snprintf(out, len, "pmi-fd-peer:%ld:%ld", (long)cred.pid, (long)cred.uid);
    return 0;
}

static void pmi_place(struct hoop_launch *l)
{
    /* Job-wide: slurm's pmi2 and PMIx name the job. Host-wide only: hydra's
     * PMI_PORT (its proxy's), or the proxy behind PMI_FD. */
    const char *job = env("PMI_JOBID");
    const char *job_var = "PMI_JOBID";
    if (!job) {
        job = env("PMIX_NAMESPACE");
        job_var = "PMIX_NAMESPACE";
    }
    char host_id[HOOP_HOST_MAX + 32];
    const char *host_var = NULL;
    if (job) {
        snprintf(host_id, sizeof(host_id), "%s", job);
        host_var = job_var;
    } else if (env("PMI_PORT")) {
        snprintf(host_id, sizeof(host_id), "pmi-port:%.200s", env("PMI_PORT"));
        host_var = "PMI_PORT";
    } else if (pmi_fd_peer(host_id, sizeof(host_id)) == 0) {
        host_var = "the process behind PMI_FD";
    }
    int one_host = l->local_size == l->size;
    if (job || (one_host && host_var))
        hoop_launch_token("pmi", host_id, l->token);
    if (one_host && host_var) {
        set_root(l, "127.0.0.1", hoop_launch_port_hash(host_id));
        snprintf(l->root_from, sizeof(l->root_from), "every rank on this host; port from %s",
                 host_var);
        return;
    }
    if (one_host)
        snprintf(l->no_root, sizeof(l->no_root),
                 "the PMI launcher gives no job id (PMI_JOBID, PMIX_NAMESPACE, PMI_PORT, PMI_FD) "
                 "to derive a port from: set HOOP_ROOT=127.0.0.1:port with a free port");
    else
        snprintf(l->no_root, sizeof(l->no_root),
                 "the PMI launcher does not say where rank 0 runs, and %s: set "
                 "HOOP_ROOT=host:port (an address of rank 0's host and a free port there) for "
                 "every rank",
                 l->local_size < 0 ? "not whether the ranks share a host (no MPI_LOCALNRANKS)"
                                   : "the ranks span hosts (MPI_LOCALNRANKS is less than "
                                     "PMI_SIZE)");
    slurm_fallback(l);
}

static int vars_present(const struct launcher *ld)
{
    return env(ld->rank_var) || env(ld->size_var);
}

static const char *const horovod_more[] = {"HOROVOD_GLOO_RENDEZVOUS_ADDR",
                                           "HOROVOD_GLOO_RENDEZVOUS_PORT", NULL};
static const char *const torchrun_more[] = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
                                            NULL};
static const char *const openmpi_more[] = {"OMPI_MCA_ess_base_jobid", NULL};
static const char *const pmi_more[] = {"PMI_FD", "PMI_PORT", "PMI_JOBID", NULL};
static const char *const slurm_more[] = {"SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_STEP_NODELIST",
                                         "SLURM_NODELIST", "SLURM_JOB_NODELIST", NULL};

/* The order is the documented precedence: a launcher started inside
 * another (torchrun under srun, srun's pmi2 beside SLURM_*) sets the
 * variables of the inner one too, and those describe this process. */
static const struct launcher launchers[] = {
    {"horovod", "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
     horovod_more, vars_present, horovod_place},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", torchrun_more,
     vars_present, torchrun_place},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", openmpi_more, vars_present, openmpi_place},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", pmi_more,
     vars_present, pmi_place},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, slurm_more, slurm_present,
     slurm_place},
};

/* what: what is wrong; fix: what to change. */
static hoop_status_t launch_bad(const struct launcher *ld, const char *what, const char *fix)
{
    struct found f;
    found_launcher(&f, ld);
    return hoop_error(HOOP_ERR_INVALID, "found %s but %s (%s?): %s", f.text, what, ld->name, fix);
}

hoop_status_t hoop_launch_detect(struct hoop_launch *out)
{
    memset(out, 0, sizeof(*out));
    out->local_rank = -1;
    out->local_size = -1;
    const struct launcher *ld = NULL;
    for (size_t i = 0; i < sizeof(launchers) / sizeof(launchers[0]) && !ld; i++)
        if (launchers[i].present(&launchers[i]))
            ld = &launchers[i];
    if (!ld)
        return HOOP_OK;

    char what[160], fix[200];
    long rank, size, v;
    snprintf(fix, sizeof(fix),
             "set both %s and %s right, or unset them and set HOOP_RANK, HOOP_SIZE and HOOP_ROOT",
             ld->rank_var, ld->size_var);
    if (!env(ld->rank_var) || !env(ld->size_var)) {
        snprintf(what, sizeof(what), "no %s", env(ld->rank_var) ? ld->size_var : ld->rank_var);
        return launch_bad(ld, what, fix);
    }
    if (parse_long(env(ld->rank_var), 0, HOOP_LAUNCH_RANK_MAX, &rank) ||
        parse_long(env(ld->size_var), 1, HOOP_LAUNCH_RANK_MAX, &size)) {
        snprintf(what, sizeof(what), "%s or %s is not a number of ranks", ld->rank_var,
                 ld->size_var);
        return launch_bad(ld, what, fix);
    }
    if (rank >= size) {
        snprintf(what, sizeof(what), "%s is not below %s", ld->rank_var, ld->size_var);
        return launch_bad(ld, what, fix);
    }
    out->name = ld->name;
    out->rank = (int)rank;
    out->size = (int)size;
    out->rank_var = ld->rank_var;
    out->size_var = ld->size_var;
    if (env(ld->local_rank_var)) {
        if (parse_long(env(ld->local_rank_var), 0, rank, &v)) {
            snprintf(what, sizeof(what), "%s is not a rank between 0 and %s", ld->local_rank_var,
                     ld->rank_var);
            snprintf(fix, sizeof(fix), "correct or unset %s", ld->local_rank_var);
            return launch_bad(ld, what, fix);
        }
        out->local_rank = (int)v;
    }
    if (env(ld->local_size_var)) {
        if (parse_long(env(ld->local_size_var), 1, size, &v) ||
            (out->local_rank >= 0 && out->local_rank >= v)) {
            snprintf(what, sizeof(what), "%s is not a number of ranks between %s+1 and %s",
                     ld->local_size_var, ld->local_rank_var, ld->size_var);
            snprintf(fix, sizeof(fix), "correct or unset %s", ld->local_size_var);
            return launch_bad(ld, what, fix);
        }
        out->local_size = (int)v;
    }
    ld->place(out);
    return HOOP_OK;
}
