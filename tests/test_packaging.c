/* test_packaging.c - what libhoop.so asks of the machine it is loaded on:
 * its NEEDED entries are the C library's alone (liburing and the CUDA
 * runtime are inside it, libibverbs and libfabric are opened at run time,
 * libcuda is never linked), and where libibverbs
 * cannot be loaded the verbs transport says so while tcp runs. */
#include <criterion/criterion.h>

#include "harness.h"
#include "proc.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* What a machine with glibc always has. The CUDA runtime, linked in
 * statically when the build has CUDA (cudart_static), adds nothing here:
 * what it asks for (libdl, librt, libpthread) is part of libc.so.6 since
 * glibc 2.34, and its C++ needs no libstdc++ (gpu/ is built without
 * exceptions and thread-safe statics). */
static const char *const allowed_needed[] = {
    "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
    "ld-linux-x86-64.so.2",
};

static int is_allowed(const char *name)
{
    for (size_t i = 0; i < sizeof(allowed_needed) / sizeof(allowed_needed[0]); i++)
        if (strcmp(name, allowed_needed[i]) == 0)
            return 1;
    return 0;
}

/* The DT_NEEDED names of a 64-bit ELF file, blank-separated, into out;
 * NULL and a sentence in out when the file is not one. */
static const char *elf_needed(const char *path, char *out, size_t n)
{
    out[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(out, n, "cannot open %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    size_t len = (size_t)st.st_size;
    const uint8_t *m = len >= sizeof(Elf64_Ehdr)
                           ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0)
                           : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) {
        snprintf(out, n, "%s is too short or cannot be mapped", path);
        return NULL;
    }
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
    const char *bad = NULL;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64)
        bad = "not a 64-bit ELF file";
    else if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
             eh->e_shoff > len || (len - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
        bad = "its section table is missing or out of the file";
    const Elf64_Shdr *sh = bad ? NULL : (const Elf64_Shdr *)(m + eh->e_shoff);
    int found = 0;
    for (unsigned i = 0; sh && i < eh->e_shnum && !bad; i++) {
        if (sh[i].sh_type != SHT_DYNAMIC)
            continue;
        found = 1;
        if (sh[i].sh_link >= eh->e_shnum) {
            bad = "its dynamic section names no string table";
            break;
        }
        const Elf64_Shdr *str = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset ||
            str->sh_offset > len || str->sh_size > len - str->sh_offset) {
            bad = "its dynamic section runs out of the file";
            break;
        }
        const Elf64_Dyn *d = (const Elf64_Dyn *)(m + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof(*d) && d[k].d_tag != DT_NULL; k++) {
            if (d[k].d_tag != DT_NEEDED)
                continue;
            if (d[k].d_un.d_val >= str->sh_size) {
                bad = "a NEEDED entry points out of its string table";
                break;
            }
            const char *name = (const char *)(m + str->sh_offset + d[k].d_un.d_val);
            size_t used = strlen(out);
            snprintf(out + used, n - used, "%s%.*s", used ? " " : "",
                     (int)strnlen(name, str->sh_size - d[k].d_un.d_val), name);
        }
    }
    if (!bad && !found)
        bad = "it has no dynamic section";
    munmap((void *)m, len);
    if (bad) {
        snprintf(out, n, "%s: %s", path, bad);
        return NULL;
    }
    return out;
}

/* A sanitizer's runtime (libasan, libubsan, libtsan) that this test
 * program needs too: the library of an instrumented tree (make
 * test-asan, test-tsan) needs it as well, and only there. */
static int same_sanitizer(const char *name, const char *self_needed)
{
    static const char *const rts[] = {"libasan.so", "libubsan.so", "libtsan.so"};
    for (size_t i = 0; i < sizeof(rts) / sizeof(rts[0]); i++)
        if (strncmp(name, rts[i], strlen(rts[i])) == 0 && strstr(self_needed, name))
            return 1;
    return 0;
}

Test(packaging, libhoop_so_needs_only_the_c_library)
{
    const char *so = harness_built("libhoop.so");
    char needed[4096], self[4096];
    cr_assert(elf_needed(so, needed, sizeof(needed)), "%s", needed);
    cr_assert(elf_needed("/proc/self/exe", self, sizeof(self)), "%s", self);
    cr_assert(strstr(needed, "libc.so.6"), "%s NEEDS no libc.so.6 (%s): is it the library?", so,
              needed);
    char copy[4096];
    snprintf(copy, sizeof(copy), "%s", needed);
    char *save = NULL;
    for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save))
        cr_expect(is_allowed(w) || same_sanitizer(w, self),
                  "%s NEEDS %s, which a machine may not have (its NEEDED: %s); a library "
                  "hoop uses goes inside libhoop (static) or is opened with dlopen", so, w,
                  needed);
}

/* The parser above is what the test rests on: it must see what a program
 * linked with libcriterion needs. */
Test(packaging, the_needed_parser_sees_a_dependency)
{
    char needed[4096];
    cr_assert(elf_needed("/proc/self/exe", needed, sizeof(needed)), "%s", needed);
    cr_assert(strstr(needed, "libcriterion.so"), "the test program's NEEDED (%s) do not name "
              "libcriterion", needed);
    cr_assert(!elf_needed("/proc/self/cmdline", needed, sizeof(needed)),
              "a file that is not ELF was read as one");
}

/* A directory whose libibverbs.so.1 is not a library, first on
 * LD_LIBRARY_PATH: the loader stops at it ("invalid ELF header"), as if
 * rdma-core were missing. (Not a real library without ibv_*: one with
 * constructors, such as a copy of libhoop.so, would leave exit handlers
 * behind when it is closed again, which TSan's interceptors then call.) */
static void fake_libibverbs(char *dir, size_t n)
{
    snprintf(dir, n, "%s/no-ibverbs-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    char dst[4200];
    snprintf(dst, sizeof(dst), "%s/libibverbs.so.1", dir);
    FILE *f = fopen(dst, "w");
    cr_assert_not_null(f, "cannot write %s: %s", dst, strerror(errno));
    for (int i = 0; i < 8; i++)
        fputs("not a shared library, only text standing in for a missing one\n", f);
    cr_assert_eq(fclose(f), 0, "write %s: %s", dst, strerror(errno));
}

static void rm_fake(const char *dir)
{
    char f[4200];
    snprintf(f, sizeof(f), "%s/libibverbs.so.1", dir);
    unlink(f);
    rmdir(dir);
}

static void run_two_ranks(struct proc_capture *r, const char *transport, const char *libdir)
{
    setenv("HOOP_TRANSPORT", transport, 1);
    const struct proc_capture_opts o = {.limit_s = 60, .own_group = true,
                                        .env_name = "LD_LIBRARY_PATH", .env_value = libdir};
    cr_assert(proc_capture(r, &o, 126,
                           ARGS(harness_built("hooprun"), "-np", "2", "--no-tag",
                                harness_built("ring_bench"), "-b", "8", "-e", "8", "-n", "1",
                                "-w", "0")),
              "cannot run hooprun: %s", strerror(errno));
    unsetenv("HOOP_TRANSPORT");
}

Test(packaging, verbs_without_libibverbs_says_so, .timeout = 120)
{
    char dir[4096];
    fake_libibverbs(dir, sizeof(dir));
    struct proc_capture r;
    run_two_ranks(&r, "verbs", dir);
    cr_expect_neq(r.status, 0, "HOOP_TRANSPORT=verbs ran without libibverbs\nstdout:\n%s\n"
                  "stderr:\n%s", r.out.p, r.err.p);
    cr_expect(strstr(r.err.p, "libibverbs could not be loaded") ||
                  strstr(r.out.p, "libibverbs could not be loaded"),
              "no sentence saying libibverbs could not be loaded\nstdout:\n%s\nstderr:\n%s",
              r.out.p, r.err.p);
    cr_expect(strstr(r.err.p, "HOOP_TRANSPORT=tcp") || strstr(r.out.p, "HOOP_TRANSPORT=tcp"),
              "the sentence does not say what to change\nstdout:\n%s\nstderr:\n%s", r.out.p,
              r.err.p);
    proc_capture_free(&r);
    /* Everything else works: auto passes verbs over, and tcp runs. */
    run_two_ranks(&r, "auto", dir);
    cr_expect_eq(r.status, 0, "HOOP_TRANSPORT=auto failed without libibverbs\nstdout:\n%s\n"
                 "stderr:\n%s", r.out.p, r.err.p);
    proc_capture_free(&r);
    rm_fake(dir);
}
