/* device.c - ring_bench -G: the buffers in CUDA device memory (as
 * nccl-tests allocates them), the GPU each rank uses, and the copies
 * through host memory that fill the buffers and check the results. */
#include "bench/ring_bench/ring_bench.h"
#include "bootstrap/launcher.h"

/* -G where no GPU can be used: one line, before any rank waits for
 * another. 0, or the exit status 2. */
int device_check_usable(const struct options *o)
{
    const char *why = NULL;
    if (!o->device || hoop_gpu_available(&why))
        return 0;
    report_error(NULL, "-G: device buffers need a GPU, and none can be used here: %s", why);
    return 2;
}

/* This rank's place among the ranks of its host: HOOP_LOCAL_RANK, else
 * the local rank of the launcher that started it (torchrun's LOCAL_RANK,
 * OMPI_COMM_WORLD_LOCAL_RANK, ...), else HOOP_RANK (hooprun on one host),
 * else 0. */
static long local_rank(void)
{
    const char *v = getenv("HOOP_LOCAL_RANK");
    char *end;
    if (v && *v) {
        long r = strtol(v, &end, 10);
        if (*end == '\0' && r >= 0)
            return r;
    }
    struct hoop_launch l;
    if (hoop_launch_detect(&l) == HOOP_OK && l.name && l.local_rank >= 0)
        return l.local_rank;
    v = getenv("HOOP_RANK");
    if (v && *v) {
        long r = strtol(v, &end, 10);
        if (*end == '\0' && r >= 0)
            return r;
    }
    return 0;
}

/* The rank's GPU: its local rank modulo the devices, made the current
 * device before the communicator is made (the library works on the
 * caller's current device). 0, or -1 said on stderr. */
int device_choose(struct bench *b)
{
    char why[256];
    if (!b->opt.device)
        return 0;
    int n = hoop_gpu_device_count();
    if (n <= 0) {
        report_error(b, "-G: no CUDA device is visible to this process");
        return -1;
    }
    b->gpu = (int)(local_rank() % n);
    if (hoop_gpu_set_device(b->gpu, why, sizeof(why))) {
        report_error(b, "-G: %s", why);
        return -1;
    }
    if (hoop_gpu_device_describe(b->gpu, b->gpu_desc, sizeof(b->gpu_desc)))
        snprintf(b->gpu_desc, sizeof(b->gpu_desc), "GPU %d", b->gpu);
    return 0;
}

/* The device images of sendbuf and recvbuf, buf_bytes each, zeroed. */
int device_alloc(struct bench *b)
{
    char why[256];
    b->call_send = b->sendbuf;
    b->call_recv = b->recvbuf;
    if (!b->opt.device || b->buf_bytes == 0)
        return 0;
    if (hoop_gpu_malloc(&b->dev_send, b->buf_bytes, why, sizeof(why)) ||
        hoop_gpu_malloc(&b->dev_recv, b->buf_bytes, why, sizeof(why)) ||
        hoop_gpu_memset(b->dev_send, 0, b->buf_bytes, why, sizeof(why)) ||
        hoop_gpu_memset(b->dev_recv, 0, b->buf_bytes, why, sizeof(why))) {
        report_error(b, "-G: two device buffers of %zu bytes on %s: %s", b->buf_bytes, b->gpu_desc,
                     why);
        return -1;
    }
    b->call_send = b->dev_send;
    b->call_recv = b->dev_recv;
    return 0;
}

/* The bytes of both buffers a row can touch: its send and receive
 * buffers, and the in-place buffer inside the receive one. */
static size_t row_bytes(const struct bench *b, const struct shape *s)
{
    size_t elems = s->send_elems > s->recv_elems ? s->send_elems : s->recv_elems;
    size_t bytes = elems * b->esize;
    return bytes < b->buf_bytes ? bytes : b->buf_bytes;
}

/* What prepare() wrote in host memory, to the device buffers. */
int device_put(struct bench *b, const struct shape *s)
{
    char why[256];
    size_t n = row_bytes(b, s);
    if (!b->opt.device || n == 0)
        return 0;
    if (hoop_gpu_memcpy(b->dev_send, b->sendbuf, n, why, sizeof(why)) ||
        hoop_gpu_memcpy(b->dev_recv, b->recvbuf, n, why, sizeof(why))) {
        report_error(b, "-G: filling the device buffers: %s", why);
        return -1;
    }
    return 0;
}

/* The device buffers after a call, back to host memory for count_wrong. */
int device_get(struct bench *b, const struct shape *s)
{
    char why[256];
    size_t n = row_bytes(b, s);
    if (!b->opt.device || n == 0)
        return 0;
    if (hoop_gpu_memcpy(b->sendbuf, b->dev_send, n, why, sizeof(why)) ||
        hoop_gpu_memcpy(b->recvbuf, b->dev_recv, n, why, sizeof(why))) {
        report_error(b, "-G: reading the device buffers back: %s", why);
        return -1;
    }
    return 0;
}

void device_free(struct bench *b)
{
    hoop_gpu_free(b->dev_send);
    hoop_gpu_free(b->dev_recv);
    b->dev_send = b->dev_recv = NULL;
    b->call_send = b->call_recv = NULL;
}
