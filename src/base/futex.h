/* Futex helpers: wait while a 32-bit word holds a value, wake waiters. */
#ifndef JET_BASE_FUTEX_H
#define JET_BASE_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/* Sleeps while *addr == expected, at most timeout_us (< 0: no limit).
 * Returns 0 when woken (or the value already differed), -ETIMEDOUT, -EINTR. */
int jet__futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t timeout_us);
/* Wakes up to n waiters. */
void jet__futex_wake(_Atomic uint32_t *addr, int n);

static inline void jet__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
