#include "base/runq.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define RUNQ_EVERY_US 1000
/* Readings in a row with more runnable threads than cores before the answer
 * turns: a thread that runs for a moment (a timer, a logger) must not end
 * the spins of a machine that has room; an overload that lasts does. */
#define RUNQ_OVER_READINGS 3

static _Atomic int64_t runq_next_us;
static _Atomic int runq_runnable = -1, runq_cores = -1;
static _Atomic bool runq_room = true;
static _Atomic int runq_over; /* readings in a row with an excess */
static _Atomic int runq_fd = -2; /* -2: not opened (yet, or the last try failed) */
static _Atomic long runq_ncores;  /* online cores, read once */
static char runq_path[256] = "/proc/loadavg";

static int runq_open(void)
{
    int fd = atomic_load_explicit(&runq_fd, memory_order_acquire);
    if (fd != -2) return fd;
    int nfd = open(runq_path, O_RDONLY | O_CLOEXEC);
    if (nfd < 0) return -1; /* tried again at the next reading (EMFILE passes) */
    int expected = -2;
    if (!atomic_compare_exchange_strong(&runq_fd, &expected, nfd)) {
        close(nfd); /* another thread opened it first */
        return expected;
    }
    return nfd;
}

/* "0.85 1.70 1.89 2/345 12345": the runnable count before the slash. */
static int runq_read(int fd)
{
    char buf[128];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    int fields = 0;
    for (char *p = buf; *p; p++) {
        if (*p != ' ') continue;
        if (++fields == 3) {
            char *end = NULL;
            long r = strtol(p + 1, &end, 10);
            return end && *end == '/' && r >= 0 && r < 1000000 ? (int)r : -1;
        }
    }
    return -1;
}

bool jet__runq_has_room(int64_t now_us)
{
    int64_t next = atomic_load_explicit(&runq_next_us, memory_order_relaxed);
    if (now_us < next) return atomic_load_explicit(&runq_room, memory_order_relaxed);
    /* One reader per period: the others answer from the last reading. */
    if (!atomic_compare_exchange_strong_explicit(&runq_next_us, &next, now_us + RUNQ_EVERY_US,
                                                 memory_order_relaxed, memory_order_relaxed))
        return atomic_load_explicit(&runq_room, memory_order_relaxed);
    int fd = runq_open();
    int runnable = fd >= 0 ? runq_read(fd) : -1;
    long cores = atomic_load_explicit(&runq_ncores, memory_order_relaxed);
    if (cores <= 0) {
        /* sysconf reads a sysfs file each time: once is enough. */
        cores = sysconf(_SC_NPROCESSORS_ONLN);
        atomic_store_explicit(&runq_ncores, cores, memory_order_relaxed);
    }
    bool over = runnable >= 0 && cores > 0 && runnable > cores;
    int n = over ? atomic_load_explicit(&runq_over, memory_order_relaxed) : -1;
    if (n < RUNQ_OVER_READINGS) n++; /* saturates: an excess of weeks must not wrap */
    atomic_store_explicit(&runq_over, n, memory_order_relaxed);
    bool room = n < RUNQ_OVER_READINGS;
    atomic_store_explicit(&runq_runnable, runnable, memory_order_relaxed);
    atomic_store_explicit(&runq_cores, (int)cores, memory_order_relaxed);
    atomic_store_explicit(&runq_room, room, memory_order_relaxed);
    return room;
}

void jet__runq_last(int *runnable_p, int *cores_p)
{
    *runnable_p = atomic_load_explicit(&runq_runnable, memory_order_relaxed);
    *cores_p = atomic_load_explicit(&runq_cores, memory_order_relaxed);
}

void jet__runq_set_source(const char *path)
{
    int fd = atomic_exchange(&runq_fd, -2);
    if (fd >= 0) close(fd);
    snprintf(runq_path, sizeof runq_path, "%s", path ? path : "/proc/loadavg");
    atomic_store(&runq_over, 0);
    atomic_store(&runq_room, true);
    atomic_store(&runq_next_us, 0);
}
