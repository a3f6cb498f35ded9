/* reduce_scatter.c - the ring reduce-scatter's schedule.
 *
 * Block k (recvcount elements at k * recvcount) ends on rank k. N-1 steps:
 * at step t rank r sends block r-t-1 and receives block r-t-2, reducing it
 * with its own input; partial sums go to the ring's work buffer, and the
 * last step's (block r) to recvbuf. Every rank sends (N-1)/N of sendbuf. */
#include "ring/pipeline.h"

hoop_status_t hoop_ring_reduce_scatter(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, hoop_dtype_t dtype, hoop_op_t op,
                                       double timeout_s)
{
    const int n = r->size, me = r->rank;
    const size_t m = recvcount;
    if (n > 2) {
        hoop_status_t st = hoop_ring_reserve_work(r, (size_t)n * m * hoop_dtype_size(dtype));
        if (st)
            return st;
    }
    struct hoop_step *st = r->steps;
    for (int t = 0; t < n - 1; t++) {
        int s = hoop_ring_mod(me - t - 1, n), v = hoop_ring_mod(me - t - 2, n);
        int last = t == n - 2;
        st[t] = (struct hoop_step){
            .send_buf = t == 0 ? HOOP_BUF_INPUT : HOOP_BUF_WORK, .send_off = (size_t)s * m,
            .send_len = m, .send_dep = t > 0, .recv_mode = HOOP_RECV_REDUCE,
            .recv_buf = last ? HOOP_BUF_OUTPUT : HOOP_BUF_WORK,
            .recv_off = last ? 0 : (size_t)v * m, .recv_len = m, .local_off = (size_t)v * m,
            .avg_n = (op == HOOP_AVG && last) ? n : 0, .phase = "reduce-scatter",
            .phase_step = t + 1, .phase_steps = n - 1};
    }
    struct hoop_pipe p = {.coll = HOOP_COLL_REDUCE_SCATTER, .root = -1, .input = sendbuf, .output = recvbuf,
                          .count = recvcount, .dtype = dtype, .op = op, .nsteps = n - 1,
                          .steps = st, .device = r->on_gpu};
    return hoop_ring_run(r, &p, timeout_s);
}
