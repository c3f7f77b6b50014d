/* Monotonic and wall time in microseconds (vDSO: no system call). */
#ifndef JET_BASE_TIME_H
#define JET_BASE_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t jet_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The same clock at the kernel tick's resolution (a few ms), read in a
 * fraction of the time: for per-message bookkeeping such as idle timeouts. */
static inline int64_t jet_now_coarse_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t jet_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* CPU time consumed by this process (all threads), microseconds. */
static inline int64_t jet_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
