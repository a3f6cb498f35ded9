/* reduce.c - which reduction kernels run: the widest instruction set that
 * this CPU and its OS support (CPUID and XGETBV), or HOOP_REDUCE_ISA. The
 * kernels themselves are in reduce/kernels.h, built once per set. */
#include "reduce/reduce.h"
#include "common/log.h"
#include "common/param.h"
#include "common/status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

extern const hoop_reduce_fn hoop_reduce_table_generic[HOOP_DTYPE_COUNT];

#if defined(__x86_64__)
#include <cpuid.h>

extern const hoop_reduce_fn hoop_reduce_table_avx2[HOOP_DTYPE_COUNT];
extern const hoop_reduce_fn hoop_reduce_table_avx512[HOOP_DTYPE_COUNT];

/* The register state the OS saves on a context switch (XCR0). */
static uint64_t reduce_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int reduce_runs_avx2(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    const unsigned osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((c & (osxsave | avx | f16c)) != (osxsave | avx | f16c))
        return 0;
    if ((reduce_xcr0() & 0x6) != 0x6) /* XMM and YMM state */
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (b >> 5) & 1;
}

static int reduce_runs_avx512(void)
{
    if (!reduce_runs_avx2())
        return 0;
    if ((reduce_xcr0() & 0xe6) != 0xe6) /* and opmask and ZMM state */
        return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    const unsigned f = 1u << 16, dq = 1u << 17, bw = 1u << 30, vl = 1u << 31;
    return (b & (f | dq | bw | vl)) == (f | dq | bw | vl);
}
#endif

static int reduce_runs_always(void)
{
    return 1;
}

static const struct reduce_isa {
    const char *name;
    const hoop_reduce_fn *table;
    int (*runs)(void);
} reduce_isas[] = {
#if defined(__x86_64__)
    {"avx512", hoop_reduce_table_avx512, reduce_runs_avx512},
    {"avx2", hoop_reduce_table_avx2, reduce_runs_avx2},
#endif
    {"generic", hoop_reduce_table_generic, reduce_runs_always},
};
#define REDUCE_NISA ((int)(sizeof(reduce_isas) / sizeof(reduce_isas[0])))

static pthread_once_t reduce_once = PTHREAD_ONCE_INIT;
static int reduce_chosen;

/* The sentence for a HOOP_REDUCE_ISA that names no instruction set. */
static const char *reduce_isa_unknown(const char *want)
{
    static _Thread_local char why[256];
    size_t n = (size_t)snprintf(why, sizeof(why), "HOOP_REDUCE_ISA='%s' is not one of auto", want);
    for (int i = 0; i < REDUCE_NISA && n < sizeof(why); i++)
        n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%s", i + 1 < REDUCE_NISA ? ", " : " or ",
                              reduce_isas[i].name);
    return why;
}

hoop_status_t hoop_reduce_isa_check(void)
{
    const char *want = hoop_param_str("HOOP_REDUCE_ISA");
    if (!*want || !strcmp(want, "auto"))
        return HOOP_OK;
    for (int i = 0; i < REDUCE_NISA; i++)
        if (!strcmp(want, reduce_isas[i].name))
            return HOOP_OK;
    return hoop_error(HOOP_ERR_INVALID, "%s", reduce_isa_unknown(want));
}

static void reduce_choose(void)
{
    int widest = 0;
    while (!reduce_isas[widest].runs())
        widest++;
    reduce_chosen = widest;
    const char *want = hoop_param_str("HOOP_REDUCE_ISA");
    if (!*want || !strcmp(want, "auto")) {
        HOOP_INFO("reduction kernels: %s", reduce_isas[widest].name);
        return;
    }
    for (int i = 0; i < REDUCE_NISA; i++) {
        if (strcmp(want, reduce_isas[i].name))
            continue;
        if (reduce_isas[i].runs())
            reduce_chosen = i;
        else
            HOOP_WARN("HOOP_REDUCE_ISA=%s: this CPU cannot run it; using %s", want,
                      reduce_isas[widest].name);
        return;
    }
    HOOP_WARN("%s; using %s", reduce_isa_unknown(want), reduce_isas[widest].name);
}

int hoop_reduce_isa_count(void)
{
    return REDUCE_NISA;
}

const char *hoop_reduce_isa_name(int isa)
{
    return isa >= 0 && isa < REDUCE_NISA ? reduce_isas[isa].name : "?";
}

int hoop_reduce_isa_runs(int isa)
{
    return isa >= 0 && isa < REDUCE_NISA && reduce_isas[isa].runs();
}

int hoop_reduce_isa_chosen(void)
{
    pthread_once(&reduce_once, reduce_choose);
    return reduce_chosen;
}

void hoop_reduce_kernel_isa(int isa, void *dst, const void *a, const void *b, size_t n,
                            hoop_dtype_t dtype, hoop_op_t op, int avg_n)
{
    if (isa >= 0 && isa < REDUCE_NISA && (unsigned)dtype < HOOP_DTYPE_COUNT)
        reduce_isas[isa].table[dtype](dst, a, b, n, op, avg_n);
}

void hoop_reduce_kernel(void *dst, const void *a, const void *b, size_t n, hoop_dtype_t dtype,
                        hoop_op_t op, int avg_n)
{
    hoop_reduce_kernel_isa(hoop_reduce_isa_chosen(), dst, a, b, n, dtype, op, avg_n);
}
