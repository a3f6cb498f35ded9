/* prov.c - choosing the libfabric transport's provider: what it asks of
 * one (tagged messages, remote writes, device memory), the providers
 * libfabric offers, which of them are software, whether auto should take
 * ofi here (probe), and the provider again for the endpoint, pinned to the
 * one chosen and to the bootstrap's interface.
 *
 * HOOP_OFI_PROVIDER names the provider (FI_PROVIDER, which libfabric reads
 * itself, filters them too); unset, libfabric's first choice for tagged
 * messages on a reliable-datagram endpoint is taken. */
#include "transport/ofi/ofi.h"
#include "common/auth.h"
#include "common/param.h"

#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What the transport asks of a provider, before any choice: tagged
 * messages, with `rma` remote writes too, with `hmem` device memory
 * (FI_HMEM, which it then registers: FI_MR_HMEM). */
static struct fi_info *ofi_hints_caps(const struct ofi_lib *lib, const char *prov, int rma,
                                      int hmem)
{
    struct fi_info *h = lib->dupinfo(NULL);
    if (!h)
        return NULL;
    h->caps = FI_TAGGED | (rma ? FI_RMA | FI_WRITE | FI_REMOTE_WRITE : 0) | (hmem ? FI_HMEM : 0);
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->ep_attr->type = FI_EP_RDM;
    /* Every registration mode the transport can honour: the provider
     * answers with those it needs. */
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                              FI_MR_ENDPOINT | (hmem ? FI_MR_HMEM : 0);
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    if (prov && *prov && !(h->fabric_attr->prov_name = strdup(prov))) {
        lib->freeinfo(h);
        return NULL;
    }
    return h;
}

struct fi_info *ofi_hints(const struct ofi_lib *lib, const char *prov)
{
    return ofi_hints_caps(lib, prov, 0, 0);
}

/* "tcp;ofi_rxm, shm, ..." : the providers libfabric offers for what the
 * transport needs, whatever was asked for. */
void ofi_list_providers(const struct ofi_lib *lib, char *out, size_t n)
{
    snprintf(out, n, "none");
    struct fi_info *h = ofi_hints(lib, NULL), *all = NULL;
    if (!h)
        return;
    if (lib->getinfo(OFI_API_VERSION, NULL, NULL, 0, h, &all) == 0) {
        size_t used = 0;
        out[0] = '\0';
        for (struct fi_info *i = all; i && used + 1 < n; i = i->next) {
            const char *p = i->fabric_attr->prov_name;
            if (strstr(out, p)) /* one mention per provider */
                continue;
            used += (size_t)snprintf(out + used, n - used, "%s%s", used ? ", " : "", p);
        }
        lib->freeinfo(all);
    }
    lib->freeinfo(h);
}

int ofi_prov_software(const char *prov)
{
    static const char *const soft[] = {"tcp", "shm", "sockets", "udp", "net", "ofi_rxm", "ofi_rxd"};
    char buf[64];
    snprintf(buf, sizeof(buf), "%s", prov);
    for (char *save = NULL, *p = strtok_r(buf, ";", &save); p; p = strtok_r(NULL, ";", &save)) {
        int known = 0;
        for (size_t i = 0; i < sizeof(soft) / sizeof(soft[0]); i++)
            known |= strcmp(p, soft[i]) == 0;
        if (!known)
            return 0;
    }
    return 1;
}

/* HOOP_TRANSPORT=auto: worth it where libfabric's first choice is a
 * provider of real hardware (EFA, Slingshot, Omni-Path, ...); its software
 * providers move bytes over the same TCP or memory as the tcp transport
 * does, slower (bench/RESULTS.md). */
/* A device of an RDMA fabric (InfiniBand, RoCE, EFA, Omni-Path,
 * TrueScale: /sys/class/infiniband; Slingshot: /sys/class/cxi). */
static int ofi_hardware_seen(void)
{
    static const char *const dirs[] = {"/sys/class/infiniband", "/sys/class/cxi"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        DIR *d = opendir(dirs[i]);
        if (!d)
            continue;
        struct dirent *e;
        int seen = 0;
        while (!seen && (e = readdir(d)))
            seen = e->d_name[0] != '.';
        closedir(d);
        if (seen)
            return 1;
    }
    return 0;
}

int ofi_probe(char *why, size_t n)
{
    /* Without such hardware libfabric has nothing to offer auto: it is not
     * even loaded, since loading it starts providers (ofi_lib.c). */
    if (!ofi_hardware_seen()) {
        snprintf(why, n, "no fabric hardware (nothing in /sys/class/infiniband or "
                 "/sys/class/cxi), libfabric not loaded");
        return 0;
    }
    const char *err = NULL;
    const struct ofi_lib *lib = ofi_lib(&err);
    if (!lib) {
        snprintf(why, n, "%s", err);
        return 0;
    }
    struct fi_info *hints = ofi_hints(lib, hoop_param_str("HOOP_OFI_PROVIDER")), *info = NULL;
    int rc = hints ? lib->getinfo(OFI_API_VERSION, NULL, NULL, 0, hints, &info) : -FI_ENOMEM;
    if (hints)
        lib->freeinfo(hints);
    if (rc || !info) {
        snprintf(why, n, "libfabric has no provider for tagged messages on reliable-datagram "
                 "endpoints");
        return 0;
    }
    int hw = !ofi_prov_software(info->fabric_attr->prov_name);
    if (hw) {
        snprintf(why, n, "provider %s on %s", info->fabric_attr->prov_name,
                 info->domain_attr->name);
    } else {
        char found[160];
        ofi_list_providers(lib, found, sizeof(found));
        snprintf(why, n, "libfabric offers software providers only (%s), slower than tcp here",
                 found);
    }
    lib->freeinfo(info);
    return hw ? 3 : 0;
}

/* The provider again, pinned to the one chosen and, where its addresses
 * are IP ones, to the interface the bootstrap reaches the others by. */
/* fi_getinfo for hints h with the source address addr (in format fmt),
 * which h holds only for this call. */
static int ofi_getinfo_from(struct ofi_tp *tp, struct fi_info *h, uint32_t fmt, const void *addr,
                            size_t addrlen, struct fi_info **info)
{
    int rc = -FI_ENOMEM;
    if ((h->src_addr = malloc(addrlen))) {
        memcpy(h->src_addr, addr, addrlen);
        h->src_addrlen = addrlen;
        h->addr_format = fmt;
        rc = tp->lib->getinfo(OFI_API_VERSION, NULL, NULL, 0, h, info);
    }
    free(h->src_addr);
    h->src_addr = NULL;
    h->src_addrlen = 0;
    h->addr_format = FI_FORMAT_UNSPEC;
    return rc;
}

static int ofi_getinfo_local(struct ofi_tp *tp, const struct sockaddr *local, socklen_t len,
                             int rma, int hmem, struct fi_info **info)
{
    struct fi_info *h = ofi_hints_caps(tp->lib, tp->prov, rma, hmem);
    if (!h)
        return -ENOMEM;
    int rc = -FI_ENODATA;
    struct sockaddr_storage ss;
    if (local && (local->sa_family == AF_INET || local->sa_family == AF_INET6) &&
        len <= sizeof(ss)) {
        memcpy(&ss, local, len);
        if (ss.ss_family == AF_INET)
            ((struct sockaddr_in *)&ss)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
        /* A provider with addresses of its own (shm) does not take an IP one. */
        rc = ofi_getinfo_from(tp, h, ss.ss_family == AF_INET ? FI_SOCKADDR_IN : FI_SOCKADDR_IN6,
                              &ss, len, info);
    }
    uint8_t rnd[8];
    if (rc && !strcmp(tp->prov, "shm") && !hoop_auth_random(rnd, sizeof(rnd))) {
        /* libfabric's shm names its region in /dev/shm after the process
         * id unless given a name. A rank killed with SIGKILL leaves its
         * region behind, and a later process that gets the same id then
         * cannot enable its endpoint (fi_enable: EBUSY): a name of its own,
         * drawn at random, cannot meet one left behind. */
        char name[64];
        int k = snprintf(name, sizeof(name), "fi_shm://ofi-%d-", (int)getpid());
        for (size_t i = 0; i < sizeof(rnd); i++, k += 2)
            snprintf(name + k, sizeof(name) - (size_t)k, "%02x", rnd[i]);
        rc = ofi_getinfo_from(tp, h, FI_ADDR_STR, name, strlen(name) + 1, info);
    }
    if (rc)
        rc = tp->lib->getinfo(OFI_API_VERSION, NULL, NULL, 0, h, info);
    tp->lib->freeinfo(h);
    return rc;
}

/* Whether to ask the provider for device memory (FI_HMEM), saying why not
 * in tp->hmem_why: a software provider would copy device memory through
 * the host itself, as hoop's own pipeline does faster (docs/gpu.md), and
 * HOOP_GPU_DIRECT=0 wants none. */
static int ofi_want_hmem(struct ofi_tp *tp)
{
    if (!strcmp(hoop_param_str("HOOP_GPU_DIRECT"), "0")) {
        snprintf(tp->hmem_why, sizeof(tp->hmem_why), "HOOP_GPU_DIRECT=0");
        return 0;
    }
    if (ofi_prov_software(tp->prov)) {
        snprintf(tp->hmem_why, sizeof(tp->hmem_why), "libfabric's %s provider is software, "
                 "with no RDMA hardware to reach device memory", tp->prov);
        return 0;
    }
    return 1;
}

int ofi_getinfo_open(struct ofi_tp *tp, const struct sockaddr *local, socklen_t len)
{
    /* With device memory where the provider takes it (GPUDirect RDMA:
     * hardware providers only, unless HOOP_GPU_DIRECT=0), and with remote
     * writes where it has them (rma.c). */
    int want_hmem = ofi_want_hmem(tp), rc = -FI_ENODATA;
    for (int i = want_hmem ? 0 : 2; i < 4 && (rc || !tp->info); i++) {
        if (tp->info) {
            tp->lib->freeinfo(tp->info);
            tp->info = NULL;
        }
        rc = ofi_getinfo_local(tp, local, len, !(i & 1), i < 2, &tp->info);
    }
    if (rc || !tp->info)
        return rc;
    tp->hmem = (tp->info->caps & FI_HMEM) != 0;
    if (want_hmem && !tp->hmem) {
        uint32_t v = tp->lib->version();
        snprintf(tp->hmem_why, sizeof(tp->hmem_why), "libfabric %u.%u's %s provider here "
                 "offers no FI_HMEM (a libfabric built with CUDA has it on RDMA hardware)",
                 FI_MAJOR(v), FI_MINOR(v), tp->prov);
    }
    return 0;
}
