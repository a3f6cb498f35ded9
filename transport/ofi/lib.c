/* lib.c - libfabric, found at run time.
 *
 * The library is opened with dlopen the first time the ofi transport is
 * asked for, so that libhoop loads and runs its other transports on a
 * machine without libfabric. Only the handful of functions libfabric
 * exports are looked up; everything else in its API is inline and calls
 * through the objects' operation tables.
 *
 * A library must leave the application's signals alone, and providers do
 * not: psm (which Debian's libfabric has built in) installs handlers for
 * SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT that call exit(1)
 * when it starts. So every call into libfabric that may load or start a
 * provider (dlopen, fi_getinfo, fi_fabric, and the others here; ofi.c
 * guards the inline ones that open and close a domain) is made between
 * ofi_sigs_save and ofi_sigs_restore, which put back every
 * handler that changed. */
#include "transport/ofi/ofi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ofi_lib the_lib;
static struct ofi_lib ofi_real; /* libfabric's own functions */
static char ofi_lib_why[256];
static pthread_once_t ofi_lib_once = PTHREAD_ONCE_INIT;

#define OFI_SYM(field, name)                                                              \
    do {                                                                                  \
        *(void **)&ofi_real.field = dlsym(h, name);                                        \
        if (!ofi_real.field) {                                                             \
            snprintf(ofi_lib_why, sizeof(ofi_lib_why), "%s has no %s: %s", so, name,      \
                     dlerror());                                                          \
            return;                                                                       \
        }                                                                                 \
    } while (0)

void ofi_sigs_save(struct ofi_sigs *s)
{
    for (int sig = 1; sig < NSIG; sig++)
        s->ok[sig] = sigaction(sig, NULL, &s->sa[sig]) == 0;
}

void ofi_sigs_restore(const struct ofi_sigs *s)
{
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction now;
        if (!s->ok[sig] || sigaction(sig, NULL, &now) != 0)
            continue;
        /* Only what changed: a handler the application sets meanwhile
         * from another thread, on another signal, stays. */
        /* sa_handler and sa_sigaction share their storage. */
        if (s->sa[sig].sa_handler != now.sa_handler || s->sa[sig].sa_flags != now.sa_flags)
            sigaction(sig, &s->sa[sig], NULL);
    }
}

static int ofi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
                       const struct fi_info *hints, struct fi_info **info)
{
    struct ofi_sigs s;
    ofi_sigs_save(&s);
    int rc = ofi_real.getinfo(version, node, service, flags, hints, info);
    ofi_sigs_restore(&s);
    return rc;
}

static void ofi_freeinfo(struct fi_info *info)
{
    struct ofi_sigs s;
    ofi_sigs_save(&s);
    ofi_real.freeinfo(info);
    ofi_sigs_restore(&s);
}

static struct fi_info *ofi_dupinfo(const struct fi_info *info)
{
    struct ofi_sigs s;
    ofi_sigs_save(&s);
    struct fi_info *d = ofi_real.dupinfo(info);
    ofi_sigs_restore(&s);
    return d;
}

static int ofi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    struct ofi_sigs s;
    ofi_sigs_save(&s);
    int rc = ofi_real.fabric(attr, fabric, context);
    ofi_sigs_restore(&s);
    return rc;
}

static void ofi_lib_open(void);

static void ofi_lib_load(void)
{
    struct ofi_sigs s;
    ofi_sigs_save(&s);
    ofi_lib_open();
    ofi_sigs_restore(&s);
    if (!ofi_real.loaded)
        return;
    the_lib = ofi_real;
    the_lib.getinfo = ofi_getinfo;
    the_lib.freeinfo = ofi_freeinfo;
    the_lib.dupinfo = ofi_dupinfo;
    the_lib.fabric = ofi_fabric;
}

static void ofi_lib_open(void)
{
    /* The shm provider's single-copy path (CMA, process_vm_readv) measured
     * slower here than its bounce buffers (64 MiB allreduce at N = 2: 1.6
     * against 2.1 GB/s), and in libfabric 1.17 a receiver pulling from a
     * sender that has exited spins in it for ever. A user's own setting
     * stands. Set before libfabric reads its parameters, once. */
    setenv("FI_SHM_DISABLE_CMA", "1", 0);
    const char *so = "libfabric.so.1";
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(ofi_lib_why, sizeof(ofi_lib_why),
                 "libfabric is not installed (%s: %s; Debian: apt-get install libfabric1)", so,
                 dlerror());
        return;
    }
    OFI_SYM(getinfo, "fi_getinfo");
    OFI_SYM(freeinfo, "fi_freeinfo");
    OFI_SYM(dupinfo, "fi_dupinfo");
    OFI_SYM(fabric, "fi_fabric");
    OFI_SYM(strerror, "fi_strerror");
    OFI_SYM(version, "fi_version");
    ofi_real.loaded = 1;
}

const struct ofi_lib *ofi_lib(const char **why)
{
    pthread_once(&ofi_lib_once, ofi_lib_load);
    if (!the_lib.loaded) {
        *why = ofi_lib_why;
        return NULL;
    }
    return &the_lib;
}
