/* reduce_scatter.c - the ring reduce-scatter's schedule, for blocks of any
 * size (reduce_scatter is reduce_scatterv with equal blocks).
 *
 * Block k (counts[k] elements at displs[k]) ends on rank k. N-1 steps: at
 * step t the rank at ring place p (ring.h) sends the block of the rank at
 * place p-t-1 and receives that of place p-t-2, reducing it
 * with its own input; partial sums go to the ring's work buffer, and the
 * last step's (block r) to recvbuf. Every rank sends every block but its
 * own once: with equal blocks, (N-1)/N of sendbuf. */
#include "ring/pipeline.h"

hoop_status_t hoop_ring_reduce_scatterv(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                        const size_t *counts, const size_t *displs,
                                        size_t frame_count, uint64_t blocks, hoop_dtype_t dtype,
                                        hoop_op_t op, double timeout_s)
{
    const int n = r->size, me = r->pos; /* a ring place; block at[p] is rank at[p]'s */
    if (n > 2) {
        size_t total = 0;
        for (int k = 0; k < n; k++)
            total += counts[k];
        hoop_status_t st = hoop_ring_reserve_work(r, total * hoop_dtype_size(dtype));
        if (st)
            return st;
    }
    struct hoop_step *st = r->steps;
    for (int t = 0; t < n - 1; t++) {
        int s = r->at[hoop_ring_mod(me - t - 1, n)], v = r->at[hoop_ring_mod(me - t - 2, n)];
        int last = t == n - 2;
        st[t] = (struct hoop_step){
            .send_buf = t == 0 ? HOOP_BUF_INPUT : HOOP_BUF_WORK, .send_off = displs[s],
            .send_len = counts[s], .send_dep = t > 0, .recv_mode = HOOP_RECV_REDUCE,
            .recv_buf = last ? HOOP_BUF_OUTPUT : HOOP_BUF_WORK,
            .recv_off = last ? 0 : displs[v], .recv_len = counts[v], .local_off = displs[v],
            .avg_n = (op == HOOP_AVG && last) ? n : 0, .phase = "reduce-scatter",
            .phase_step = t + 1, .phase_steps = n - 1};
    }
    struct hoop_pipe p = {.coll = HOOP_COLL_REDUCE_SCATTER, .root = -1, .input = sendbuf,
                          .output = recvbuf, .count = frame_count, .dtype = dtype, .op = op,
                          .blocks = blocks, .nsteps = n - 1, .steps = st, .device = r->on_gpu};
    return hoop_ring_run(r, &p, timeout_s);
}
