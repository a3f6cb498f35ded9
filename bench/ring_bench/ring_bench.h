/* ring_bench.h - what the files of ring_bench share: the collectives it
 * runs, its options, a row's shape and the bench's state. Internal to
 * ring_bench; see main.c for what the program does. */
#ifndef RING_BENCH_H
#define RING_BENCH_H

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hoop.h"
#include "gpu/gpu.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define BENCH_VERSION                                                                              \
    STR(HOOP_VERSION_MAJOR) "." STR(HOOP_VERSION_MINOR) "." STR(HOOP_VERSION_PATCH)

/* Width of the leading columns (size .. root) and of one placement's group
 * (time .. #wrong) in a table row; the header is laid out from them. */
#define ROW_LEAD_WIDTH 52
#define ROW_GROUP_WIDTH 33

enum coll {
    COLL_ALLREDUCE,
    COLL_REDUCE_SCATTER,
    COLL_ALLGATHER,
    COLL_ALLGATHERV,
    COLL_BROADCAST,
    COLL_REDUCE,
    COLL_ALLTOALL,
    COLL_BARRIER,
    COLL_COUNT
};

struct options {
    size_t min_bytes;
    size_t max_bytes;
    size_t step_bytes; /* 0: multiply by step_factor instead */
    long step_factor;
    int iters;
    int warmup;
    int check;
    hoop_dtype_t dtype;
    hoop_op_t op;
    enum coll coll;
    int device; /* -G, --device cuda: the buffers are CUDA device memory */
    int registered; /* -R: the buffers come from hoop_mem_alloc */
    int root;
    /* --sweep NAME=V1,V2,...: the whole run once per value, each with a
     * fresh communicator made with NAME set to it. */
    const char *sweep_name;
    char *sweep_values; /* NAME=... copy, cut at the commas */
    int sweep_n;
};

#define SWEEP_MAX 32

/* One row's buffers, in elements, as nccl-tests derives them from the size. */
struct shape {
    size_t count;      /* the count column */
    size_t bytes;      /* the size column */
    size_t pcount;     /* the count argument: per rank for reduce_scatter, allgather, alltoall */
    size_t send_elems; /* sendbuf of the out-of-place call */
    size_t recv_elems; /* recvbuf */
    size_t agv_base;   /* allgatherv: rank r contributes agv_base + r elements */
};

/* A run of elements of a buffer that must hold a table's values, the
 * table read from element `phase` on (wrapping at block_count). */
struct seg {
    size_t at;
    size_t n;
    const unsigned char *tab;
    size_t phase;
};

struct bench {
    struct options opt;
    hoop_comm_t *comm;
    int have_rank; /* rank is known (the communicator was made) */
    int rank;
    int nranks;
    size_t esize;
    /* The buffers the inputs are written to and the results checked in:
     * host memory. The calls get call_send and call_recv: these same
     * buffers, or with -G their images in device memory (dev_send,
     * dev_recv), which the host ones are copied to before a call and
     * back from after it. */
    void *sendbuf;
    void *recvbuf;
    size_t buf_bytes; /* the size of each */
    void *dev_send;
    void *dev_recv;
    void *call_send;
    void *call_recv;
    int gpu;            /* -G: the device this rank uses */
    char gpu_desc[256]; /* -G: that device in words */
    /* Inputs and expected results repeat in the element index, so each is
     * laid out once as a block of a whole number of periods: filling is then
     * memcpy and checking memcmp, which keeps multi-GiB checks short. */
    size_t block_count;      /* elements per table */
    unsigned char *tab_mem;  /* every table below */
    const unsigned char *mine;   /* this rank's input */
    const unsigned char *expect; /* the reduction, for the collectives with an op */
    /* allgather(v), broadcast: rank r's input; alltoall: what rank r sends
     * to this rank. */
    const unsigned char **peer_tabs;
    const unsigned char **send_tabs; /* alltoall: what this rank sends to rank j */
    size_t *agv_counts;
    size_t *agv_displs;
    struct seg *segs; /* scratch, nranks + 1 */
};

struct result {
    int ran;        /* the placement exists for this collective */
    int checked;    /* #wrong means something */
    double time_us; /* average over ranks */
    double algbw;   /* GB/s */
    double busbw;
    uint64_t wrong; /* summed over ranks */
};

/* options.c */
int bad_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int parse_options(int argc, char **argv, struct options *o);

/* shape.c */
int next_size(const struct options *o, size_t *size);
int shape_of(const struct bench *b, size_t size, struct shape *s);

/* data.c */
int build_tables(struct bench *b);
void set_agv(const struct bench *b, const struct shape *s);
void prepare(struct bench *b, const struct shape *s, int in_place);
const char *op_label(const struct bench *b);
size_t count_wrong(struct bench *b, const struct shape *s, int in_place);

/* device.c */
int device_check_usable(const struct options *o);
int device_choose(struct bench *b);
int device_alloc(struct bench *b);
int device_put(struct bench *b, const struct shape *s);
int device_get(struct bench *b, const struct shape *s);
void device_free(struct bench *b);

/* timing.c */
int run_placement(struct bench *b, const struct shape *s, int in_place, struct result *res);
int run_barrier(struct bench *b, struct result *res);

/* output.c */
void print_header(const struct bench *b);
void print_row(const struct bench *b, const struct shape *s, const struct result res[2]);

/* coll.c */
extern const char *const coll_names[COLL_COUNT];
int coll_has_op(enum coll c);
int coll_has_root(enum coll c);
int coll_has_in_place(enum coll c);
double bus_factor(enum coll c, int n);

/* report.c */
void report_hoop_error(const struct bench *b, hoop_status_t st);
void report_error(const struct bench *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
