/* no_uring.c - run a program where io_uring is refused the way Docker's
 * default seccomp profile refuses it since 25.0: io_uring_setup,
 * io_uring_enter and io_uring_register are not on its allow list, so they
 * fail with the profile's defaultErrnoRet, EPERM. The filter is inherited
 * by every child, so `no_uring hooprun -np 4 prog` refuses io_uring to
 * every rank. Exits 125 when the filter cannot be installed.
 *
 *   no_uring program [args...]
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NO_URING_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NO_URING_ARCH AUDIT_ARCH_AARCH64
#elif defined(__riscv) && __riscv_xlen == 64
#define NO_URING_ARCH AUDIT_ARCH_RISCV64
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NO_URING_ARCH AUDIT_ARCH_PPC64LE
#elif defined(__s390x__)
#define NO_URING_ARCH AUDIT_ARCH_S390X
#else
#error "no_uring: add this machine's AUDIT_ARCH_* value"
#endif

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#define __NR_io_uring_enter 426
#define __NR_io_uring_register 427
#endif

#define NO_URING_EXIT 125

static int install_filter(void)
{
    struct sock_filter code[] = {
        /* A call made under another ABI has other numbers: let it be. */
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NO_URING_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
        /* x32 calls share the arch and carry a flag bit in the number. */
        BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~0x40000000u),
#endif
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof(code) / sizeof(code[0])),
                              .filter = code};
    /* Without it, only a privileged process may install a filter. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: no_uring program [args...]\n"
                        "runs program with io_uring refused (EPERM), as under Docker's "
                        "default seccomp profile\n");
        return 2;
    }
    if (install_filter() != 0) {
        fprintf(stderr, "no_uring: cannot install the seccomp filter: %s\n", strerror(errno));
        return NO_URING_EXIT;
    }
    /* A filter that does not bite would make every "refused" test pass
     * for the wrong reason. */
    errno = 0;
    long rc = syscall(__NR_io_uring_setup, 0, NULL);
    if (rc != -1 || errno != EPERM) {
        fprintf(stderr, "no_uring: io_uring_setup still answers (%s) under the filter\n",
                rc == -1 ? strerror(errno) : "a ring");
        if (rc >= 0)
            close((int)rc);
        return NO_URING_EXIT;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "no_uring: cannot run %s: %s\n", argv[1], strerror(errno));
    return 127;
}
