/* allgather.c - the ring allgather's schedule (allgather is allgatherv with
 * equal blocks). N-1 steps: at step s the rank at ring place p (ring.h)
 * sends the block of the rank at place p-s and receives that of place
 * p-s-1 straight into recvbuf; each rank sends every block but its next
 * rank's once: (N-1)/N of the result. */
#include "ring/pipeline.h"

hoop_status_t hoop_ring_allgatherv(struct hoop_ring *r, void *recvbuf, const size_t *counts,
                                   const size_t *displs, hoop_dtype_t dtype, double timeout_s)
{
    const int n = r->size, me = r->pos; /* a ring place; block at[p] is rank at[p]'s */
    struct hoop_step *st = r->steps;
    size_t total = 0;
    for (int k = 0; k < n; k++)
        total += counts[k];
    for (int s = 0; s < n - 1; s++) {
        int a = r->at[hoop_ring_mod(me - s, n)], b = r->at[hoop_ring_mod(me - s - 1, n)];
        st[s] = (struct hoop_step){
            .send_buf = HOOP_BUF_OUTPUT, .send_off = displs[a], .send_len = counts[a],
            .send_dep = s > 0, .recv_mode = HOOP_RECV_DIRECT, .recv_buf = HOOP_BUF_OUTPUT,
            .recv_off = displs[b], .recv_len = counts[b], .phase = "allgather",
            .phase_step = s + 1, .phase_steps = n - 1};
    }
    struct hoop_pipe p = {.coll = HOOP_COLL_ALLGATHER, .root = -1, .input = recvbuf, .output = recvbuf,
                          .count = total, .dtype = dtype, .op = -1,
                          .blocks = hoop_frame_blocks(counts, n), .nsteps = n - 1, .steps = st,
                          .device = r->on_gpu};
    return hoop_ring_run(r, &p, timeout_s);
}
