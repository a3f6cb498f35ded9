/* relax.h - the CPU's pause between two looks of a spin loop: it lets a
 * sibling hyperthread run and saves power, where the CPU has one. */
#ifndef HOOP_COMMON_RELAX_H
#define HOOP_COMMON_RELAX_H

static inline void hoop_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
