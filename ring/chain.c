/* chain.c - broadcast and reduce as a pipelined chain along the ring.
 *
 * broadcast: root -> root+1 -> ... -> root-1 (places on the ring, which goes
 * host by host: ring.h); each rank receives chunk c and
 * forwards it while chunk c+1 is on the wire, so the time is about
 * S/bandwidth + (N-2) chunks, and every link carries the buffer once.
 * reduce: root+1 -> root+2 -> ... -> root; each rank reduces what arrives
 * with its own input (into the work buffer) and forwards it; root reduces
 * into recvbuf.
 * Only the end of the chain hears from every rank: its confirmation goes
 * around the ring to the rank before it (pipeline.h), N-1 hops of a bare
 * header after the end's first chunk, so that a rank that passed another
 * root or count fails the call on every rank. */
#include "ring/pipeline.h"

hoop_status_t hoop_ring_broadcast(struct hoop_ring *r, void *buf, size_t count,
                                  hoop_dtype_t dtype, int root, double timeout_s)
{
    const int n = r->size;
    int pos = (r->pos - r->where[root] + n) % n; /* 0 = root, n-1 = the end of the chain */
    struct hoop_step *st = r->steps;
    int nsteps = 0;
    if (pos > 0)
        st[nsteps++] = (struct hoop_step){.recv_mode = HOOP_RECV_DIRECT, .recv_buf = HOOP_BUF_OUTPUT,
                                          .recv_len = count, .phase = "broadcast receive",
                                          .phase_steps = 1};
    if (pos < n - 1)
        st[nsteps++] = (struct hoop_step){.send_buf = HOOP_BUF_OUTPUT, .send_len = count,
                                          .send_dep = pos > 0, .phase = "broadcast forward",
                                          .phase_steps = 1};
    struct hoop_pipe p = {.coll = HOOP_COLL_BROADCAST, .root = root, .input = buf, .output = buf, .count = count,
                          .dtype = dtype, .op = -1, .nsteps = nsteps, .steps = st,
                          .confirm_from_prev = pos != n - 1, .confirm_to_next = pos != n - 2,
                          .device = r->on_gpu};
    return hoop_ring_run(r, &p, timeout_s);
}

hoop_status_t hoop_ring_reduce(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                               size_t count, hoop_dtype_t dtype, hoop_op_t op, int root,
                               double timeout_s)
{
    const int n = r->size;
    int pos = (r->pos - r->where[root] - 1 + 2 * n) % n; /* 0: after root; n-1 = root */
    struct hoop_step *st = r->steps;
    int nsteps = 0;
    if (pos > 0 && pos < n - 1) {
        hoop_status_t s = hoop_ring_reserve_work(r, count * hoop_dtype_size(dtype));
        if (s)
            return s;
    }
    if (pos > 0)
        st[nsteps++] = (struct hoop_step){
            .recv_mode = HOOP_RECV_REDUCE,
            .recv_buf = pos == n - 1 ? HOOP_BUF_OUTPUT : HOOP_BUF_WORK, .recv_len = count,
            .avg_n = (op == HOOP_AVG && pos == n - 1) ? n : 0, .phase = "reduce receive",
            .phase_steps = 1};
    if (pos < n - 1)
        st[nsteps++] = (struct hoop_step){.send_buf = pos == 0 ? HOOP_BUF_INPUT : HOOP_BUF_WORK,
                                          .send_len = count, .send_dep = pos > 0,
                                          .phase = "reduce forward", .phase_steps = 1};
    struct hoop_pipe p = {.coll = HOOP_COLL_REDUCE, .root = root, .input = sendbuf, .output = recvbuf, .count = count,
                          .dtype = dtype, .op = op, .nsteps = nsteps, .steps = st,
                          .confirm_from_prev = pos != n - 1, .confirm_to_next = pos != n - 2,
                          .device = r->on_gpu};
    return hoop_ring_run(r, &p, timeout_s);
}
