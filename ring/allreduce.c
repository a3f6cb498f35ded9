/* allreduce.c - the ring allreduce's schedule.
 *
 * The buffer is cut into N segments (sizes differ by at most one element);
 * segment k is finished by the rank at ring place k-1 (ring.h: the ring
 * goes host by host; r below is a place). 2(N-1) steps:
 *   step t < N-1 (reduce-scatter): send segment r-t, receive segment r-t-1
 *     and reduce it with this rank's input into recvbuf;
 *   step t = N-1+s (allgather): send segment r+1-s, receive segment r-s
 *     straight into recvbuf.
 * What a rank sends at step t is what it received at step t-1. Every rank
 * sends 2(N-1)/N of the buffer; each element is reduced in one place in ring
 * order and then copied, so the result is the same bits on every rank. */
#include "ring/pipeline.h"
#include "common/status.h"

#include <stdint.h>
#include <stdlib.h>

void hoop_ring_allreduce_steps(struct hoop_step *st, int n, int me, size_t count, int avg_n)
{
#define SEG_OFF(k) hoop_ring_seg_off(count, n, k)
#define SEG_LEN(k) hoop_ring_seg_len(count, n, k)
    for (int t = 0; t < n - 1; t++) {
        int s = hoop_ring_mod(me - t, n), v = hoop_ring_mod(me - t - 1, n);
        st[t] = (struct hoop_step){
            .send_buf = t == 0 ? HOOP_BUF_INPUT : HOOP_BUF_OUTPUT, .send_off = SEG_OFF(s),
            .send_len = SEG_LEN(s), .send_dep = t > 0, .recv_mode = HOOP_RECV_REDUCE,
            .recv_buf = HOOP_BUF_OUTPUT, .recv_off = SEG_OFF(v), .recv_len = SEG_LEN(v),
            .local_off = SEG_OFF(v), .avg_n = t == n - 2 ? avg_n : 0,
            .phase = "reduce-scatter", .phase_step = t + 1, .phase_steps = n - 1};
    }
    for (int k = 0; k < n - 1; k++) {
        int s = hoop_ring_mod(me + 1 - k, n), v = hoop_ring_mod(me - k, n);
        st[n - 1 + k] = (struct hoop_step){
            .send_buf = HOOP_BUF_OUTPUT, .send_off = SEG_OFF(s), .send_len = SEG_LEN(s),
            .send_dep = 1, .recv_mode = HOOP_RECV_DIRECT, .recv_buf = HOOP_BUF_OUTPUT,
            .recv_off = SEG_OFF(v), .recv_len = SEG_LEN(v), .phase = "allgather",
            .phase_step = k + 1, .phase_steps = n - 1};
    }
#undef SEG_OFF
#undef SEG_LEN
}

/* Over shared memory a ring step reads its chunk in place from the
 * previous rank and reduces it while it is still in this core's cache:
 * chunks of 256 KiB (HOOP_SHM_CHUNK_BYTES) do both sooner than chunks of a
 * MiB, so the ranks overlap more of a segment of a few MiB (a ResNet-50
 * step's tensors of 1 to 9 MB at N = 4 on 16 cores: 59 ms with 256 KiB
 * chunks, 84 ms with a MiB; bench/RESULTS.md).
 * For segments longer than four of the ring's chunks the smaller chunks
 * only add transfers (16 MiB at N = 2 lost 10-30 %): those keep
 * chunk_bytes, as do rings with a network link, where 256 KiB chunks lost
 * a third on loopback TCP. The chunk cannot follow the buffers (one
 * rank's device buffers may meet another's host buffers, and every link
 * must cut alike): on device buffers the pipeline copies and reduces the
 * small chunks in groups of a ring chunk (run.h), so that the GPU does
 * as many operations as without the rule. HOOP_SHM_CHUNK_BYTES=0 turns
 * the rule off. */
#define SHM_MID_SEG_CHUNKS 4

static size_t run_chunk(const struct hoop_ring *r, size_t count, hoop_dtype_t dtype)
{
    size_t seg = hoop_ring_seg_len(count, r->size, 0) * hoop_dtype_size(dtype);
    if (!r->shm_ring || !r->shm_chunk || r->chunk_bytes <= r->shm_chunk ||
        seg > SHM_MID_SEG_CHUNKS * r->chunk_bytes)
        return 0;
    return r->shm_chunk;
}

static hoop_status_t ring_allreduce(struct hoop_ring *r, int coll, const char *what,
                                    const void *sendbuf, void *recvbuf, size_t count,
                                    hoop_dtype_t dtype, hoop_op_t op, double timeout_s, int keep,
                                    int device)
{
    const int n = r->size; /* segments are numbered by ring place */
    struct hoop_step *st = r->steps;
    hoop_ring_allreduce_steps(st, n, r->pos, count, op == HOOP_AVG ? n : 0);
    struct hoop_pipe p = {.coll = coll, .root = -1, .keep_frame = keep, .what = what, .input = sendbuf, .output = recvbuf,
                          .count = count, .dtype = dtype, .op = op, .nsteps = 2 * (n - 1),
                          .steps = st, .device = device};
    p.chunk_bytes = run_chunk(r, count, dtype);
    return hoop_ring_run(r, &p, timeout_s);
}

hoop_status_t hoop_ring_allreduce(struct hoop_ring *r, const void *sendbuf, void *recvbuf,
                                  size_t count, hoop_dtype_t dtype, hoop_op_t op, double timeout_s)
{
    return ring_allreduce(r, HOOP_COLL_ALLREDUCE, NULL, sendbuf, recvbuf, count, dtype, op,
                          timeout_s, 0, r->on_gpu);
}

hoop_status_t hoop_ring_barrier(struct hoop_ring *r, double timeout_s)
{
    unsigned char b = 0;
    return ring_allreduce(r, HOOP_COLL_BARRIER, NULL, &b, &b, 1, HOOP_U8, HOOP_MAX, timeout_s,
                          0, 0);
}

hoop_status_t hoop_ring_agree(struct hoop_ring *r, const char *what, double timeout_s)
{
    /* One byte per rank, so that every rank sends and receives at every
     * step and every hop compares frames. */
    uint8_t *b = calloc((size_t)r->size, 1);
    if (!b)
        return hoop_error(HOOP_ERR_SYSTEM, "rank %d: out of memory", r->rank);
    hoop_status_t st = ring_allreduce(r, r->cur.coll, what, b, b, (size_t)r->size, HOOP_U8,
                                      HOOP_MAX, timeout_s, 1, 0);
    free(b);
    return st;
}

hoop_status_t hoop_ring_agree_sum(struct hoop_ring *r, const char *what, uint64_t *vals,
                                  size_t count, double timeout_s)
{
    return ring_allreduce(r, r->cur.coll, what, vals, vals, count, HOOP_U64, HOOP_SUM, timeout_s,
                          1, 0);
}
