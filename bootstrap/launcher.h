/* launcher.h - rank, size and root from the variables other launchers set
 * (Horovod, torchrun, OpenMPI, MPICH's hydra and other PMI launchers,
 * SLURM's srun), for jobs that were not started with HOOP_* variables. */
#ifndef HOOP_BOOTSTRAP_LAUNCHER_H
#define HOOP_BOOTSTRAP_LAUNCHER_H

#include "common/sock.h"
#include "common/wire.h"
#include "hoop.h"

#include <stddef.h>
#include <stdint.h>

/* Ports derived from a job's identity stay below Linux's default ephemeral
 * range (32768..60999), where outgoing connections would take them. */
#define HOOP_LAUNCH_PORT_BASE 20000
#define HOOP_LAUNCH_PORT_SPAN 12768

struct hoop_launch {
    const char *name;  /* "horovod", "torchrun", "openmpi", "pmi", "slurm"; NULL: none */
    const char *rank_var, *size_var; /* the variables rank and size came from */
    int rank, size;
    int local_rank;    /* -1 when the launcher does not say */
    int local_size;    /* -1 when the launcher does not say */
    /* host:port of the root, or "" with no_root saying why not. */
    char root[HOOP_HOST_MAX + 8];
    char root_from[128];
    char no_root[512];
    /* A token derived from the job's identity, or "" when the launcher
     * gives none that every rank shares. */
    char token[HOOP_TOKEN_BYTES + 1];
};

/* Look for the first launcher, in the order above, whose rank or size
 * variable is set. HOOP_OK with out->name NULL when there is none;
 * HOOP_ERR_INVALID, with a sentence listing what was found, when its
 * variables are partial or not numbers. */
hoop_status_t hoop_launch_detect(struct hoop_launch *out);

/* MASTER_PORT + 1 (or HOROVOD_GLOO_RENDEZVOUS_PORT + 1), back to 1024
 * after 65535: the launcher's own server already listens on that port. */
uint16_t hoop_launch_port_next(unsigned port);

/* A port in HOOP_LAUNCH_PORT_BASE.. from an opaque job identity. */
uint16_t hoop_launch_port_hash(const char *identity);

/* SLURM's: BASE + (job + 1009 x step) mod SPAN, so that consecutive jobs
 * and a job's concurrent steps do not meet on one port. */
uint16_t hoop_launch_port_slurm(unsigned long long job_id, unsigned long long step_id);

/* "<launcher>-<16 hex digits>" hashed from the job's identity. */
void hoop_launch_token(const char *launcher, const char *identity,
                       char out[HOOP_TOKEN_BYTES + 1]);

/* The first host of a SLURM host list ("node[01-04,07],gpu3" gives
 * "node01"), checking the syntax of the whole list. 0, -EINVAL for a
 * malformed list, -ENAMETOOLONG when the host does not fit in out. */
int hoop_hostlist_first(const char *list, char *out, size_t outlen);

#endif
