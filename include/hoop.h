/* hoop.h - collective communication without MPI.
 *
 * The only public header of libhoop. Every function returns a hoop_status_t;
 * on failure hoop_last_error() gives a sentence, kept per thread, that names
 * the rank, the peer and the operation. The library never aborts, never exits
 * and never writes to stdout (its log goes to stderr, see HOOP_LOG_LEVEL).
 *
 * A communicator is used by one thread at a time: collectives on the same
 * communicator must not be called concurrently.
 *
 * GPU buffers (CUDA). Every collective takes device memory (cudaMalloc)
 * in a build with CUDA, on every transport. The contract:
 * - the caller's work on the buffers is complete when it calls (synchronise
 *   the streams that write sendbuf, or read recvbuf, first: a cudaMemcpy
 *   from pageable memory may return before its copy has landed);
 * - the results are in device memory when the call returns (no stream of
 *   the caller's is used or left running);
 * - both buffers are on one GPU (normally the caller's current device;
 *   hoop works on the GPU the buffers are on, and gives the calling
 *   thread its current device back). A communicator works with one GPU:
 *   its first call on device buffers decides which, and buffers on
 *   another GPU are HOOP_ERR_INVALID. Several ranks may share a GPU.
 * Both buffers live on the host (plain, pinned or managed memory) or both
 * on the same GPU: one of each, or two GPUs, is HOOP_ERR_INVALID. Ranks
 * may differ: one rank's device buffers meet another's host buffers.
 * Data moves through pinned host memory of the communicator's, chunk by
 * chunk, reductions running on the GPU with the bits of the CPU's
 * (docs/gpu.md). A library built without CUDA, or running where no
 * driver or GPU is, takes every pointer for host memory.
 */
#ifndef HOOP_H
#define HOOP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define HOOP_API __attribute__((visibility("default")))
#else
#define HOOP_API
#endif

#define HOOP_VERSION_MAJOR 0
#define HOOP_VERSION_MINOR 1
#define HOOP_VERSION_PATCH 0

typedef enum hoop_status {
    HOOP_OK = 0,
    HOOP_ERR_INVALID = 1,     /* bad argument or configuration */
    HOOP_ERR_TIMEOUT = 2,     /* a deadline passed (HOOP_TIMEOUT, HOOP_BOOTSTRAP_TIMEOUT) */
    HOOP_ERR_PEER = 3,        /* a peer closed, died, or broke the protocol */
    HOOP_ERR_MISMATCH = 4,    /* ranks called different things */
    HOOP_ERR_UNSUPPORTED = 5, /* the machine cannot do what was asked */
    HOOP_ERR_SYSTEM = 6,      /* a system call or allocation failed */
    HOOP_ERR_ABORTED = 7,     /* the communicator was aborted */
} hoop_status_t;

typedef enum hoop_dtype {
    HOOP_I8 = 0,
    HOOP_U8,
    HOOP_I32,
    HOOP_U32,
    HOOP_I64,
    HOOP_U64,
    HOOP_F16,  /* IEEE 754 binary16; reduced in f32, rounded to nearest even */
    HOOP_BF16, /* bfloat16; reduced in f32, rounded to nearest even */
    HOOP_F32,
    HOOP_F64,
    HOOP_I16, /* after the others: the codes above are kept */
    HOOP_U16,
    HOOP_DTYPE_COUNT
} hoop_dtype_t;

typedef enum hoop_op {
    HOOP_SUM = 0,
    HOOP_PROD,
    HOOP_MIN,
    HOOP_MAX,
    HOOP_AVG, /* sum divided by the number of ranks; integers truncate toward zero */
    HOOP_OP_COUNT
} hoop_op_t;

typedef struct hoop_comm hoop_comm_t;

/* Configuration of a communicator. Call hoop_config_init() first: it marks
 * every field "unset", and an unset field is read from the environment
 * (HOOP_RANK, HOOP_SIZE, HOOP_ROOT, HOOP_TOKEN, ...) or takes its default. */
typedef struct hoop_config {
    size_t struct_size;        /* sizeof(hoop_config_t), set by hoop_config_init */
    int rank;                  /* this process's rank, 0..size-1; -1 = unset */
    int size;                  /* number of ranks; -1 = unset */
    const char *root;          /* "host:port" of the rendezvous root (rank 0); NULL = unset */
    const char *token;         /* job secret every connection must present; NULL = unset */
    double bootstrap_timeout_s;/* deadline to form the communicator; <= 0 = unset */
    double timeout_s;          /* deadline of one collective; <= 0 = unset */
    size_t chunk_bytes;        /* ring chunk size; 0 = unset */
    int pipeline_depth;        /* chunks in flight per direction; 0 = unset */
} hoop_config_t;

/* Fill cfg with "unset" everywhere. */
HOOP_API void hoop_config_init(hoop_config_t *cfg);

/* Create a communicator. cfg may be NULL: everything then comes from the
 * environment: HOOP_* variables, else those of the launcher that started the
 * process (Horovod, torchrun, OpenMPI, PMI, SLURM), and with none at all the
 * result is a one-rank communicator (said in the log). Every rank of the job must call it; it
 * returns once all ranks have met at the root and connected their ring
 * neighbours, or with HOOP_ERR_TIMEOUT naming the ranks that never arrived.
 * *comm is set only on success. */
HOOP_API hoop_status_t hoop_comm_init(hoop_comm_t **comm, const hoop_config_t *cfg);

/* Make communicators of groups of comm's ranks, as MPI_Comm_split does.
 * Collective: every rank of comm calls it. The ranks that give one color
 * (0 or more) form one new communicator, ranked by key and then by their
 * rank in comm; a rank that gives HOOP_SPLIT_NONE joins none and gets
 * NULL. Each group forms over its own connections (the transport as
 * hoop_comm_init chooses it), under a token derived from comm's, within
 * comm's bootstrap deadline, and takes comm's collective deadline, chunk
 * size and pipeline depth. Every rank returns the same status: if a group
 * cannot form, no rank keeps its new communicator. comm stays usable
 * whatever the outcome but a failure of comm itself. *child is set on
 * success (NULL for HOOP_SPLIT_NONE); destroy it with hoop_comm_destroy. */
#define HOOP_SPLIT_NONE (-1)
HOOP_API hoop_status_t hoop_comm_split(hoop_comm_t *comm, int color, int key, hoop_comm_t **child);

/* Close every connection and free everything. NULL is accepted. Not
 * collective: it does not wait for the other ranks. */
HOOP_API hoop_status_t hoop_comm_destroy(hoop_comm_t *comm);

/* Abort the communicator, from any thread, at any time: a collective in
 * progress on it returns HOOP_ERR_ABORTED with `reason` (NULL: none) at
 * once, and so does every later one; the other ranks' collectives fail
 * with HOOP_ERR_PEER naming this rank and the reason. Then destroy the
 * communicator (from the thread that drives it) and create a new one. */
HOOP_API hoop_status_t hoop_comm_abort(hoop_comm_t *comm, const char *reason);

/* Rank and size, and the same within this machine (ranks whose hosts match),
 * or -1 for a NULL communicator. */
HOOP_API int hoop_comm_rank(const hoop_comm_t *comm);
HOOP_API int hoop_comm_size(const hoop_comm_t *comm);
HOOP_API int hoop_comm_local_rank(const hoop_comm_t *comm);
HOOP_API int hoop_comm_local_size(const hoop_comm_t *comm);
/* As Horovod defines them: among the ranks whose local rank is this
 * rank's (one on each machine that has it), this rank's place in rank
 * order, and how many they are; and 1 when every machine has the same
 * number of ranks, else 0 (-1 for a NULL communicator). The same whatever
 * order the launcher gave the ranks in. */
HOOP_API int hoop_comm_cross_rank(const hoop_comm_t *comm);
HOOP_API int hoop_comm_cross_size(const hoop_comm_t *comm);
HOOP_API int hoop_comm_is_homogeneous(const hoop_comm_t *comm);

/* Name of the transport in use ("tcp/io_uring", ...). */
HOOP_API const char *hoop_comm_transport(const hoop_comm_t *comm);

/* Where rank and size came from: "config", "hoop", "horovod", "torchrun",
 * "openmpi", "pmi", "slurm", "none" (a one-rank job with no variables), or
 * HOOP_LAUNCHER_SPLIT for a group of hoop_comm_split. */
#define HOOP_LAUNCHER_SPLIT "hoop_comm_split"
HOOP_API const char *hoop_comm_launcher(const hoop_comm_t *comm);

/* Element-wise reduction of count elements across all ranks; every rank gets
 * the same result, bit for bit. In place when sendbuf == recvbuf; otherwise
 * the buffers must not overlap. Blocking. count may be 0 (buffers may then be
 * NULL). After an error other than HOOP_ERR_INVALID the communicator is
 * broken: destroy it. */
HOOP_API hoop_status_t hoop_allreduce(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, hoop_dtype_t dtype, hoop_op_t op);

/* Every rank gets block `rank` (recvcount elements) of the element-wise
 * reduction of all ranks' sendbuf (size * recvcount elements). Ring: each
 * rank sends (N-1)/N of sendbuf. In place when
 * recvbuf == (char *)sendbuf + rank * recvcount * element size. */
HOOP_API hoop_status_t hoop_reduce_scatter(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           size_t recvcount, hoop_dtype_t dtype, hoop_op_t op);

/* Like reduce_scatter with a count per rank: rank r gets recvcounts[r]
 * elements, block r of the reduction of every rank's sendbuf, which holds
 * the blocks one after the other (the sum of recvcounts elements; block r
 * starts at the sum of recvcounts[0..r)). Every rank passes the same
 * recvcounts: one that differs fails the call on every rank with
 * HOOP_ERR_MISMATCH. Counts may be 0. Ring: each rank sends every block
 * but its own once. In place when recvbuf is block `rank` of sendbuf. */
HOOP_API hoop_status_t hoop_reduce_scatterv(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                            const size_t *recvcounts, hoop_dtype_t dtype,
                                            hoop_op_t op);

/* recvbuf (size * sendcount elements) gets every rank's sendbuf, rank r's
 * at block r. Ring. In place when
 * sendbuf == (char *)recvbuf + rank * sendcount * element size. */
HOOP_API hoop_status_t hoop_allgather(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t sendcount, hoop_dtype_t dtype);

/* Like allgather with a count per rank: rank r contributes recvcounts[r]
 * elements, placed at element offset displs[r] of recvbuf (blocks must not
 * overlap). Every rank passes the same recvcounts and displs. In place when
 * sendbuf == (char *)recvbuf + displs[rank] * element size. */
HOOP_API hoop_status_t hoop_allgatherv(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       const size_t *recvcounts, const size_t *displs,
                                       hoop_dtype_t dtype);

/* root's sendbuf (count elements) lands in every rank's recvbuf. sendbuf is
 * read on root only (in place there when sendbuf == recvbuf). Pipelined
 * chain root -> root+1 -> ...: each rank sends the buffer once. */
HOOP_API hoop_status_t hoop_broadcast(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, hoop_dtype_t dtype, int root);

/* The element-wise reduction of every rank's sendbuf lands in root's recvbuf
 * (recvbuf is not used elsewhere and may be NULL there). Pipelined chain
 * ending at root. In place on root when sendbuf == recvbuf. */
HOOP_API hoop_status_t hoop_reduce(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                   size_t count, hoop_dtype_t dtype, hoop_op_t op, int root);

/* Block j (count elements) of rank i's sendbuf lands in block i of rank j's
 * recvbuf. Both buffers hold size * count elements and must not overlap.
 * Pairwise exchange over direct connections, made on first use. */
HOOP_API hoop_status_t hoop_alltoall(hoop_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, hoop_dtype_t dtype);

/* Like alltoall with a count per pair: sendcounts[j] elements at element
 * offset sdispls[j] of sendbuf go to rank j, and recvcounts[i] elements
 * from rank i land at element offset rdispls[i] of recvbuf (receive blocks
 * must not overlap; buffers must not overlap). Counts may be 0. The ranks
 * first agree, in one small ring allreduce, that sendcounts[j] on rank i
 * equals recvcounts[i] on rank j for every pair; when not, every rank
 * returns HOOP_ERR_MISMATCH naming the first pair that disagrees, nothing
 * has moved, and the communicator stays usable. Then a pairwise exchange
 * over direct connections, as alltoall. */
HOOP_API hoop_status_t hoop_alltoallv(hoop_comm_t *comm, const void *sendbuf,
                                      const size_t *sendcounts, const size_t *sdispls,
                                      void *recvbuf, const size_t *recvcounts,
                                      const size_t *rdispls, hoop_dtype_t dtype);

/* Returns once every rank has entered it. */
HOOP_API hoop_status_t hoop_barrier(hoop_comm_t *comm);

/* Host memory for collective buffers that every rank of the host maps, as
 * NCCL's registered buffers and MPI's shared windows are. Every rank calls
 * it at once (bytes may differ from rank to rank); *ptr gets this rank's,
 * page-aligned. Where every rank of comm is on this host and each can map
 * the others' (the ranks share a network namespace; the log says why
 * not), an allreduce above the small-message threshold whose sendbuf and
 * recvbuf lie in such memory on every rank reads every input and writes
 * every output in place, with no copy through the transport; otherwise
 * it is ordinary memory and the collectives run as on any. An error
 * (memory refused on some rank) returns on every rank, with nothing kept.
 * Free it with hoop_mem_free, every rank at once with the pointer it got
 * from the same call, before hoop_comm_destroy (which frees what is left). */
HOOP_API hoop_status_t hoop_mem_alloc(hoop_comm_t *comm, size_t bytes, void **ptr);
HOOP_API hoop_status_t hoop_mem_free(hoop_comm_t *comm, void *ptr);

/* The last error of this thread, as a sentence ("" if none). Valid until the
 * next hoop call on this thread. */
HOOP_API const char *hoop_last_error(void);

/* Short names: "success", "invalid argument", ...; "i8", "f32", ...; "sum", ... */
HOOP_API const char *hoop_status_str(hoop_status_t status);
HOOP_API const char *hoop_dtype_str(hoop_dtype_t dtype);
HOOP_API const char *hoop_op_str(hoop_op_t op);

/* Bytes per element of dtype, 0 for an unknown dtype. */
HOOP_API size_t hoop_dtype_size(hoop_dtype_t dtype);

/* Parse a name as printed by hoop_dtype_str/hoop_op_str; -1 if unknown. */
HOOP_API int hoop_dtype_parse(const char *name);
HOOP_API int hoop_op_parse(const char *name);

/* Conversions used by the f16 and bf16 reductions (round to nearest even),
 * exported so that callers can build inputs and check results. */
/* 1 when this library takes CUDA device buffers (built with CUDA; a GPU is
 * still needed at run time), else 0. */
HOOP_API int hoop_cuda_built(void);

HOOP_API float hoop_f16_to_f32(unsigned short h);
HOOP_API unsigned short hoop_f32_to_f16(float f);
HOOP_API float hoop_bf16_to_f32(unsigned short h);
HOOP_API unsigned short hoop_f32_to_bf16(float f);

/* The HOOP_* variables: count, and for index i its name, default and one line
 * of documentation. Returns NULL past the end. */
HOOP_API int hoop_param_count(void);
HOOP_API const char *hoop_param_info(int i, const char **default_value, const char **doc);

#ifdef __cplusplus
}
#endif
#endif /* HOOP_H */
