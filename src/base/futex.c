#include "base/futex.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int jet__futex_wait(_Atomic uint32_t *addr, uint32_t expected, int64_t timeout_us)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1000000;
        ts.tv_nsec = (timeout_us % 1000000) * 1000;
        tsp = &ts;
    }
    long rc = syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, tsp, NULL, 0);
    if (rc == 0) return 0;
    if (errno == EAGAIN) return 0;
    return -errno;
}

void jet__futex_wake(_Atomic uint32_t *addr, int n)
{
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
