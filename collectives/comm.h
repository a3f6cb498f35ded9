/* comm.h - the communicator object, shared by the files of collectives/. */
#ifndef HOOP_COLLECTIVES_COMM_H
#define HOOP_COLLECTIVES_COMM_H

#include "bootstrap/bootstrap.h"
#include "ring/ring.h"
#include "hoop.h"

struct hoop_comm {
    int rank;
    int size;
    int local_rank;
    int local_size;
    double timeout_s;
    struct hoop_bootstrap bs;
    struct hoop_ring ring;
    /* After a failed collective the ranks' streams are out of step: every
     * later call fails with the first error. */
    hoop_status_t broken;
    char broken_why[256];
    char transport[48];
    const char *launcher;
};

/* Checks shared by every collective; 0 when the call may go ahead. */
hoop_status_t hoop_coll_check(const hoop_comm_t *comm, const char *op_name, const void *sendbuf,
                              const void *recvbuf, size_t count, int dtype, int op);
void hoop_coll_mark_broken(hoop_comm_t *comm, hoop_status_t st);

#endif
