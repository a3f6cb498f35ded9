/* test_gdr.c - GPUDirect RDMA's selection chain (ring/gdr.h), every
 * branch, on any machine: the facts are given, not found. */
#include <criterion/criterion.h>

#include "ring/gdr.h"

#include <string.h>

#define VERBS_KINDS (HOOP_DEVMEM_BIT(HOOP_DEVMEM_DMABUF) | HOOP_DEVMEM_BIT(HOOP_DEVMEM_PEERMEM))

/* The verbs transport's facts unless others are given. */
static enum hoop_gdr choose(struct hoop_gdr_facts f, char *why, size_t len)
{
    if (!f.transport)
        f.transport = "verbs";
    if (f.transport_can && !f.kinds)
        f.kinds = VERBS_KINDS;
    return hoop_gdr_choose(&f, why, len);
}

#define SAYS(why, text) cr_expect(strstr(why, text), "'%s' does not say '%s'", why, text)

Test(gdr, off_is_staging_whatever_the_transport_can)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = 0, .transport_can = 1, .dmabuf_rc = 0};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    SAYS(why, "HOOP_GPU_DIRECT=0");
}

Test(gdr, a_transport_of_host_memory_stages_or_refuses)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .transport = "tcp", .dmabuf_rc = 1,
                               .peermem_rc = 1};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    SAYS(why, "the tcp transport moves host memory only");
    f.setting = 1;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_REFUSED);
    SAYS(why, "HOOP_GPU_DIRECT=1, but the tcp transport moves host memory only");
    SAYS(why, "verbs");
}

Test(gdr, dma_buf_first)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .transport_can = 1, .dmabuf_rc = 0,
                               .peermem_loaded = 1, .peermem_rc = 0};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_DMABUF);
    SAYS(why, "by dma-buf");
    f.setting = 1;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_DMABUF);
}

Test(gdr, peermem_when_dma_buf_is_refused)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .transport_can = 1, .dmabuf_rc = -95,
                               .dmabuf_why = "dma-buf refused by rxe0: ibv_reg_dmabuf_mr: "
                                             "Operation not supported",
                               .peermem_loaded = 1, .peermem_rc = 0};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_PEERMEM);
    SAYS(why, "nvidia-peermem");
    SAYS(why, "Operation not supported");
}

Test(gdr, neither_stages_with_both_reasons_or_refuses)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .transport_can = 1, .dmabuf_rc = -95,
                               .dmabuf_why = "dma-buf refused: cuMemGetHandleForAddressRange: "
                                             "CUDA_ERROR_NOT_SUPPORTED",
                               .peermem_loaded = 0, .peermem_rc = 1};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    SAYS(why, "CUDA_ERROR_NOT_SUPPORTED");
    SAYS(why, "nvidia-peermem not loaded");
    SAYS(why, "pinned host memory");
    f.peermem_loaded = 1;
    f.peermem_rc = -14;
    f.peermem_why = "nvidia-peermem: rxe0 cannot register device memory: ibv_reg_mr: Bad address";
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    SAYS(why, "Bad address");
    f.setting = 1;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_REFUSED);
    SAYS(why, "HOOP_GPU_DIRECT=1, but no GPUDirect RDMA on the verbs transport");
}

Test(gdr, emulation_sends_from_device_memory_only_when_asked)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .emulated = 1, .transport = "tcp"};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    SAYS(why, "HOOP_GPU_EMULATE=1");
    f.setting = 1;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_EMULATED);
    f.setting = 0;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
}

Test(gdr, a_short_buffer_still_ends_the_sentence)
{
    char why[24];
    struct hoop_gdr_facts f = {.setting = -1, .transport = "tcp"};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    cr_expect_lt(strlen(why), sizeof(why));
}

/* The ofi transport tries FI_HMEM alone: its reason is the only one said. */
Test(gdr, ofi_sends_from_device_memory_through_fi_hmem)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .transport = "ofi", .transport_can = 1,
                               .kinds = HOOP_DEVMEM_BIT(HOOP_DEVMEM_HMEM), .dmabuf_rc = 1,
                               .peermem_rc = 1, .hmem_rc = 0};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_HMEM);
    SAYS(why, "FI_HMEM");
    SAYS(why, "the ofi transport registered device memory");
    f.setting = 1;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_HMEM);
}

Test(gdr, ofi_without_fi_hmem_stages_or_refuses_saying_why)
{
    char why[512];
    struct hoop_gdr_facts f = {.setting = -1, .transport = "ofi", .transport_can = 1,
                               .kinds = HOOP_DEVMEM_BIT(HOOP_DEVMEM_HMEM), .dmabuf_rc = 1,
                               .peermem_rc = 1, .hmem_rc = -95,
                               .hmem_why = "libfabric's tcp;ofi_rxm provider is software"};
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_STAGING);
    SAYS(why, "no GPUDirect RDMA on the ofi transport (libfabric's tcp;ofi_rxm provider is "
              "software)");
    cr_expect(!strstr(why, "dma-buf") && !strstr(why, "peermem"),
              "'%s' names ways the ofi transport does not try", why);
    f.setting = 1;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_REFUSED);
    SAYS(why, "HOOP_GPU_DIRECT=1, but no GPUDirect RDMA on the ofi transport");
    f.hmem_why = NULL;
    cr_expect_eq(choose(f, why, sizeof(why)), HOOP_GDR_REFUSED);
    SAYS(why, "FI_HMEM refused");
}
