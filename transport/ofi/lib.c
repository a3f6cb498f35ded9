/* lib.c - libfabric, found at run time.
 *
 * The library is opened with dlopen the first time the ofi transport is
 * asked for, so that libhoop loads and runs its other transports on a
 * machine without libfabric. Only the handful of functions libfabric
 * exports are looked up; everything else in its API is inline and calls
 * through the objects' operation tables. */
#include "transport/ofi/ofi.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct ofi_lib the_lib;
static char ofi_lib_why[256];
static pthread_once_t ofi_lib_once = PTHREAD_ONCE_INIT;

#define OFI_SYM(field, name)                                                              \
    do {                                                                                  \
        *(void **)&the_lib.field = dlsym(h, name);                                         \
        if (!the_lib.field) {                                                             \
            snprintf(ofi_lib_why, sizeof(ofi_lib_why), "%s has no %s: %s", so, name,      \
                     dlerror());                                                          \
            return;                                                                       \
        }                                                                                 \
    } while (0)

static void ofi_lib_load(void)
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
    the_lib.loaded = 1;
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
