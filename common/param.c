/* param.c - the table of HOOP_* variables and their parsing. */
#include "common/param.h"
#include "common/log.h"
#include "common/status.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hoop_param {
    const char *name;
    const char *def;
    const char *doc;
};

static const struct hoop_param hoop_params[] = {
    {"HOOP_RANK", "", "Rank of this process, 0..HOOP_SIZE-1. Set by hooprun."},
    {"HOOP_SIZE", "", "Number of ranks in the job. Unset with HOOP_RANK unset: from another launcher's variables, else a one-rank job."},
    {"HOOP_ROOT", "", "host:port of the rendezvous root; rank 0 listens there, the others connect. Overrides the root a launcher's variables give."},
    {"HOOP_TOKEN", "", "Job secret (at most 32 bytes) every connection proves without sending it; hooprun makes a random one per job, under other launchers it is derived from the job's identity and is no secret (docs/security.md)."},
    {"HOOP_LOCAL_RANK", "", "This process's place among the ranks on its host, 0 up; picks the GPU of ring_bench -G (HOOP_LOCAL_RANK modulo the devices). Unset: the launcher's local rank (LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, ...), else HOOP_RANK."},
    {"HOOP_BOOTSTRAP_TIMEOUT", "120", "Seconds to form a communicator before failing with the ranks that never arrived."},
    {"HOOP_SOCKET_IFNAME", "", "Interfaces whose address a rank advertises, comma-separated: name prefixes (eth), exact names (=eth0), CIDR ranges (10.0.0.0/8), ^ to exclude (^docker,lo). Unset: the interface that routes to the root."},
    {"HOOP_TIMEOUT", "300", "Seconds one collective may take before it fails with HOOP_ERR_TIMEOUT."},
    {"HOOP_FAIL_GRACE", "2", "Seconds the root gathers the ranks' reports after a collective fails before it names the culprit to every rank (a rank that has not reported by then is named as stopped or stuck); the others wait twice as long for that word."},
    {"HOOP_TRANSPORT", "auto", "Data transport: tcp; ofi (libfabric, the provider HOOP_OFI_PROVIDER or FI_PROVIDER names); verbs (RDMA verbs, RC queue pairs; HOOP_IB_*); auto: verbs where a hardware RDMA device has an ACTIVE port, else ofi where libfabric's first provider is real hardware (EFA, Slingshot, Omni-Path, ...), else tcp, said in the log at info level. A transport the machine cannot give fails with HOOP_ERR_UNSUPPORTED and what was found."},
    {"HOOP_SHM", "auto", "Shared memory between ranks of one host (same host name, boot id, PID and network namespace): auto uses it for every link between two such ranks that both allow it, the configured transport (HOOP_TRANSPORT) for the others; 0 never uses it; 1 insists: a rank of this host that cannot take it (HOOP_SHM=0 there, another network namespace) fails the communicator on both sides."},
    {"HOOP_SHM_SINGLE_COPY", "0", "1: over shared memory, payloads of 128 KiB or more are read by the receiving rank straight from the sender's memory (process_vm_readv, where ptrace rules allow it) instead of passing through the slots, on links where both ranks set it. Off by default: on the machines measured the kernel's copy was 2-3x slower than the two copies through the slots, whose bytes stay in the cache between them (bench/RESULTS.md)."},
    {"HOOP_OFI_WRITE_BYTES", "0", "ofi transport, where the provider writes into remote memory: payloads of at least this many bytes go straight into the receiver's buffer (fi_writedata, the receiver naming it first); smaller ones, and every one with 0, as tagged messages. The same on every rank. Off by default: over libfabric's software providers (tcp, shm), which carry a write as messages, it measured no faster at N = 2 and slower at N = 4 (bench/RESULTS.md); for a NIC that writes, try 64K."},
    {"HOOP_OFI_PROVIDER", "", "The libfabric provider of the ofi transport (tcp, shm, efa, ...); empty: FI_PROVIDER, else libfabric's first choice."},
    {"HOOP_IB_DEVICE", "", "verbs transport: the RDMA device (as ibv_devices names it); empty: the first with an ACTIVE port."},
    {"HOOP_IB_PORT", "0", "verbs transport: the device's port; 0: its first ACTIVE one."},
    {"HOOP_IB_GID_INDEX", "", "verbs transport: the GID index of the port; empty: on RoCE the first RoCE v2 GID carrying an IPv4 address (else the first RoCE v2 one), on InfiniBand 0 (addressed by LID)."},
    {"HOOP_IB_TIMEOUT", "14", "verbs transport: the queue pairs' local ACK timeout, 4.096 us * 2^value (1..31; 14: 67 ms)."},
    {"HOOP_IB_RETRY_CNT", "7", "verbs transport: how many times a queue pair resends before the transfer fails (0..7)."},
    {"HOOP_IB_ZCOPY_BYTES", "64K", "verbs transport: payloads of at least this many bytes are written from the caller's memory, registered once per call (kept across calls where the device pages on demand); smaller ones, and all with 0, are copied through the transport's registered slots."},
    {"HOOP_CHUNK_BYTES", "1M", "Ring chunk size in bytes (K/M/G suffixes); the unit of pipelining."},
    {"HOOP_SHM_CHUNK_BYTES", "256K", "Allreduces on a ring whose every link is shared memory, and whose segments (count / ranks) are at most four HOOP_CHUNK_BYTES long, move in chunks of this many bytes where it is less than HOOP_CHUNK_BYTES: the ranks overlap more of a few MiB (bench/RESULTS.md). Device buffers are still copied and reduced a whole HOOP_CHUNK_BYTES of them at a time on the GPU (docs/gpu.md). 0 turns it off. The same on every rank."},
    {"HOOP_PIPELINE_DEPTH", "4", "Chunks in flight per direction (receive slots of HOOP_CHUNK_BYTES each)."},
    {"HOOP_SMALL_BYTES", "64K", "Allreduces of at most this many bytes (and at most one chunk) use recursive doubling instead of the ring; 0 turns it off."},
    {"HOOP_HIERARCHICAL", "auto", "Allreduces on the ring where the job spans several hosts of the same number of ranks (at least two each): auto and 1 run them hierarchical (a reduce-scatter inside each host, an allreduce of each rank's segment across the hosts among the ranks with its local index, an allgather inside each host), so that each host's network carries 2(H-1)/H of the buffer instead of 2(N-1)/N, and small ones (HOOP_SMALL_BYTES) so that one rank per host exchanges with the other hosts: with auto from 16 KiB (below it recursive doubling among all ranks, measured faster), with 1 at every size; 0 keeps the flat ring and recursive doubling among all ranks. 1 also warns where the job's shape does not allow it. The same on every rank."},
    {"HOOP_TCP_NSOCKS", "auto", "TCP sockets per neighbour, chunks striped across them: 1..16, or auto (1 to a rank on this host, 2 to one on another host). The accepting rank's setting wins."},
    {"HOOP_BUSY_POLL_US", "auto", "Microseconds a wait looks for completions without sleeping before it sleeps; 0 sleeps at once. Where this host's ranks outnumber the CPUs this process may run on, the wait gives up the CPU between looks (sched_yield). auto: 20, or 200 where ranks outnumber CPUs. The engine's thread (hoop_engine.h, hoop.torch), with nothing pending, looks as long for an enqueue before it sleeps (so that each gradient of a backward pass does not pay a system call to wake it); with auto 20, yielding the CPU between looks where the CPUs are fewer than twice this host's ranks (a caller and an engine each)."},
    {"HOOP_TCP_ZEROCOPY", "0", "Sends of at least this many bytes lend their pages to the kernel instead of being copied (io_uring zero-copy send, Linux 6.1+; the io_uring engine only); 0 turns it off."},
    {"HOOP_TCP_SOCKBUF", "0", "SO_SNDBUF/SO_RCVBUF of data sockets in bytes; 0 keeps the kernel's autotuning."},
    {"HOOP_TCP_ENGINE", "auto", "How the TCP transport moves bytes: uring (io_uring), poll, or auto (io_uring, and poll where io_uring is refused)."},
    {"HOOP_TCP_CONGESTION", "", "TCP congestion control of data sockets (TCP_CONGESTION), e.g. cubic; empty keeps the system's. A ring runs at its slowest link, so every flow's slowdown stalls it: BBR's periodic drain (PROBE_RTT) cost 2-8 % on shaped links where cubic reached the link's rate (bench/RESULTS.md)."},
    {"HOOP_TCP_USER_TIMEOUT", "30", "Seconds unacknowledged data may wait before TCP declares the peer dead (TCP_USER_TIMEOUT)."},
    {"HOOP_REDUCE_ISA", "auto", "Reduction kernels: auto (the widest instruction set this CPU runs), avx512, avx2 or generic (x86-64; elsewhere only generic)."},
    {"HOOP_URING_ENTRIES", "64", "Submission queue entries of each io_uring."},
    {"HOOP_URING_SETUP", "coop", "How the TCP engine's io_uring is made: coop (COOP_TASKRUN: completions run at the next entry into the kernel), plain (no flags), defer (SINGLE_ISSUER|DEFER_TASKRUN: only the thread that made the communicator may drive it), sqpoll (a kernel thread polls submissions; costs a CPU). Refused flags fall back to plain."},
    {"HOOP_URING_SUBMIT", "batch", "When the TCP engine's io_uring transfers enter the kernel: batch (once per progress call, every one queued since) or each (as soon as it is queued)."},
    {"HOOP_CYCLE_TIME", "1", "Engine (hoop_engine.h): milliseconds between the starts of two cycles of its thread, each of which agrees on what the ranks have enqueued (one small allreduce) and runs what is ready. Rank 0's value is used by every rank."},
    {"HOOP_FUSION_THRESHOLD", "64M", "Engine: ready allreduces of the same dtype, op and scale factors are packed into one buffer of at most this many bytes and reduced by one collective; 0 turns fusion off. Rank 0's value is used by every rank."},
    {"HOOP_CACHE_CAPACITY", "1024", "Engine: names remembered after they ran, so that the next time the ranks agree on them with one word each in the cycle's allreduce instead of sending the request again; 0 turns the cache off. The same on every rank."},
    {"HOOP_TIMELINE", "", "Engine: path of a Chrome trace-event JSON file (chrome://tracing, Perfetto) of every operation's negotiation, queue, copies and collective, one track per name, written by rank 0; valid JSON at every moment."},
    {"HOOP_TIMELINE_ALL_RANKS", "0", "Engine: 1 makes every rank write its own timeline, to HOOP_TIMELINE.<rank>."},
    {"HOOP_TIMELINE_MARK_CYCLES", "0", "Engine: 1 adds an instant event, CYCLE_START, at the start of each of the engine's cycles to the timeline (Horovod's HOROVOD_TIMELINE_MARK_CYCLES)."},
    {"HOOP_STALL_CHECK_TIME", "60", "Engine: seconds a name may wait for some ranks to enqueue it before rank 0 logs it with the missing ranks (again every as many seconds); 0 turns the check off."},
    {"HOOP_STALL_SHUTDOWN_TIME", "0", "Engine: seconds after which a name still missing on some ranks fails with HOOP_ERR_TIMEOUT, naming them, on the ranks that enqueued it; 0 waits for ever (with the stall check's warnings)."},
    {"HOOP_AUTOTUNE", "0", "Engine: 1 makes rank 0 try pairs of fusion threshold and cycle time on the running job (each for a settling sample and two scored ones) and keep the one that reduced the most bytes per second; a variable set by the user is not tuned."},
    {"HOOP_AUTOTUNE_LOG", "", "Engine, with HOOP_AUTOTUNE=1: CSV file (cycle_time_ms,tensor_fusion_threshold,score,best) with a line per pair tried, score in bytes allreduced per microsecond, and the pair kept (best=1)."},
    {"HOOP_AUTOTUNE_STEPS_PER_SAMPLE", "10", "Engine, with HOOP_AUTOTUNE=1: a sample lasts until the first allreduce name it saw has completed this many more times (training steps)."},
    {"HOOP_LIBRARY", "", "Python package hoop (docs/python.md): path of the libhoop.so to load; unset: the build/ directory of the source tree the package lies in, else an installed one."},
    {"HOOP_PYTHON", "/usr/bin/python3", "make test's python pass: the interpreter (with torch, numpy and pytest) that runs the hoop.torch tests."},
    {"HOOP_GPU_DIRECT", "auto", "Device buffers and the NIC: auto (GPUDirect RDMA where the transport can register device memory: verbs, by dma-buf, else through nvidia-peermem; sends then leave from the GPU; else pinned host memory), 0 (always pinned host memory), 1 (GPUDirect RDMA or the first device call fails with HOOP_ERR_UNSUPPORTED saying why). HOOP_LOG_LEVEL=info says what was chosen and why."},
    {"HOOP_GPU_STAGING_CHUNKS", "0", "Device buffers: the pinned host chunks (of HOOP_CHUNK_BYTES each) a communicator moves them through, whatever the size of the call; 0 is 4 x HOOP_PIPELINE_DEPTH (16 MiB with the defaults), the least is 3 x the depth. Fewer chunks mean more copies from the GPU again under load."},
    {"HOOP_GPU_EMULATE", "0", "Tests on machines without a GPU: 1 makes every buffer a collective is given count as GPU 0's device memory and runs the device pipeline (gpu.h) over host memory, its copies and reductions done late, so that the CPU-only test passes check the pipeline's order; never for jobs."},
    {"HOOP_LOG_LEVEL", "warn", "Log on stderr: error, warn, info or debug."},
};

#define HOOP_NPARAMS ((int)(sizeof(hoop_params) / sizeof(hoop_params[0])))

static const struct hoop_param *hoop_param_find(const char *name)
{
    for (int i = 0; i < HOOP_NPARAMS; i++)
        if (strcmp(hoop_params[i].name, name) == 0)
            return &hoop_params[i];
    return NULL;
}

int hoop_param_count(void)
{
    return HOOP_NPARAMS;
}

const char *hoop_param_info(int i, const char **default_value, const char **doc)
{
    if (i < 0 || i >= HOOP_NPARAMS)
        return NULL;
    if (default_value)
        *default_value = hoop_params[i].def;
    if (doc)
        *doc = hoop_params[i].doc;
    return hoop_params[i].name;
}

int hoop_param_is_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v;
}

const char *hoop_param_str(const char *name)
{
    const char *v = getenv(name);
    if (v && *v)
        return v;
    const struct hoop_param *p = hoop_param_find(name);
    return p ? p->def : "";
}

hoop_status_t hoop_param_auto01(const char *name, int *out)
{
    const char *v = hoop_param_str(name);
    if (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)
        *out = v[0] - '0';
    else if (strcmp(v, "auto") == 0)
        *out = HOOP_PARAM_AUTO;
    else
        return hoop_error(HOOP_ERR_INVALID, "%s=%s is not auto, 0 or 1", name, v);
    return HOOP_OK;
}

hoop_status_t hoop_param_parse_u64(const char *name, const char *text, unsigned long long min,
                                   unsigned long long max, unsigned long long *out)
{
    const char *s = text;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        goto bad;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        goto bad;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end != '\0' || (shift && v > (~0ULL >> shift)))
        goto bad;
    v <<= shift;
    if (v < min || v > max)
        goto bad;
    *out = v;
    return HOOP_OK;
bad:
    return hoop_error(HOOP_ERR_INVALID, "%s='%s' is not a whole number between %llu and %llu", name,
                      text, min, max);
}

hoop_status_t hoop_param_auto_u64(const char *name, unsigned long long min, unsigned long long max,
                                  int *is_auto, unsigned long long *out)
{
    const char *v = hoop_param_str(name);
    *is_auto = strcmp(v, "auto") == 0;
    if (*is_auto || hoop_param_parse_u64(name, v, min, max, out) == HOOP_OK)
        return HOOP_OK;
    return hoop_error(HOOP_ERR_INVALID,
                      "%s='%s' is neither auto nor a whole number between %llu and %llu", name, v,
                      min, max);
}

hoop_status_t hoop_param_parse_double(const char *name, const char *text, double min, double max,
                                      double *out)
{
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !isfinite(v) || v < min || v > max)
        return hoop_error(HOOP_ERR_INVALID, "%s='%s' is not a number between %g and %g", name, text,
                          min, max);
    *out = v;
    return HOOP_OK;
}

hoop_status_t hoop_param_u64(const char *name, unsigned long long min, unsigned long long max,
                             unsigned long long *out)
{
    return hoop_param_parse_u64(name, hoop_param_str(name), min, max, out);
}

hoop_status_t hoop_param_double(const char *name, double min, double max, double *out)
{
    return hoop_param_parse_double(name, hoop_param_str(name), min, max, out);
}

extern char **environ;

/* The first len bytes of var are exactly name. */
static int param_name_is(const char *var, size_t len, const char *name)
{
    return strlen(name) == len && strncmp(name, var, len) == 0;
}

void hoop_param_warn_unknown(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "HOOP_", 5) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        int known = 0;
        for (int i = 0; i < HOOP_NPARAMS && !known; i++)
            known = param_name_is(*e, len, hoop_params[i].name);
        /* Variables of the test suite and tools are not the library's. */
        if (!known && strncmp(*e, "HOOP_TEST_", 10) != 0 &&
            !param_name_is(*e, len, "HOOP_BUILD_DIR") && !param_name_is(*e, len, "HOOP_SOURCE_DIR"))
            HOOP_WARN("unknown variable %.*s is ignored (ring_bench --params lists the known ones)",
                      (int)len, *e);
    }
}
