/* empty.c - a collective of count 0 on every rank, matched like any other.
 *
 * It has no data, but it takes its sequence number and its frames say what
 * it is (collective, count 0, dtype, op, root, blocks): a rank that passed
 * another count, or called something else, must fail the call, and every
 * rank with it, rather than pair it with the others' next call. A rank
 * learns that every rank agrees once it has heard, through a chain of
 * checked frames, from every other: the least the ring allows is N-1 steps
 * of an allgather of one element per rank, each step sent once the step
 * before is in (its frames compare rank r+1 with r+2, ..., r-1 with r). */
#include "ring/pipeline.h"
#include "common/status.h"

hoop_status_t hoop_ring_empty(struct hoop_ring *r, int coll, hoop_dtype_t dtype, int op, int root,
                              uint64_t blocks, double timeout_s)
{
    const int n = r->size, me = r->pos;
    hoop_status_t st = hoop_ring_reserve_work(r, (size_t)n * hoop_dtype_size(dtype));
    if (st)
        return st;
    hoop_frame_begin(r, coll, 0, dtype, op, root);
    r->cur.blocks = blocks;
    struct hoop_step *s = r->steps;
    for (int t = 0; t < n - 1; t++)
        s[t] = (struct hoop_step){
            .send_buf = HOOP_BUF_WORK, .send_off = (size_t)hoop_ring_mod(me - t, n), .send_len = 1,
            .send_dep = t > 0, .recv_mode = HOOP_RECV_DIRECT, .recv_buf = HOOP_BUF_WORK,
            .recv_off = (size_t)hoop_ring_mod(me - t - 1, n), .recv_len = 1,
            .phase = "matching the call of count 0", .phase_step = t + 1, .phase_steps = n - 1};
    struct hoop_pipe p = {.coll = coll, .root = root, .keep_frame = 1,
                          .input = r->work, .output = r->work, .count = 0, .dtype = dtype,
                          .op = op, .nsteps = n - 1, .steps = s};
    return hoop_ring_run(r, &p, timeout_s);
}
