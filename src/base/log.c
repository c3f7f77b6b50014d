#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"

JET_FLAG_DEFINE_INT32_RANGE(log_level, JET_LOG_INFO, 0, 4,
                            "Minimum level logged: 0 debug, 1 info, 2 warning, 3 error, 4 none");

JET_FLAG_DEFINE_INT32_RANGE(
    log_peer_rate, 1, 0, 1000000,
    "Lines per second, per place in the code, that a remote peer can cause "
    "(bad bytes, declined hellos, closes), after a burst of 10 times as many; "
    "the next line printed counts those dropped. 0: no limit");

#define LOG_PEER_BURST 10

static __thread long log_tid;

bool jet__log_rate_take(jet_log_rate_t *r, uint32_t *suppressed_p)
{
    *suppressed_p = 0;
    int32_t rate = JET_FLAG(log_peer_rate);
    if (rate <= 0) return true;
    int64_t interval = 1000000 / rate > 0 ? 1000000 / rate : 1;
    int64_t now = jet_now_coarse_us();
    int64_t tat = atomic_load_explicit(&r->tat_us, memory_order_relaxed);
    for (;;) {
        int64_t base = tat > now ? tat : now;
        /* A line conforms while the bucket is less than a burst ahead. */
        if (base - now > (LOG_PEER_BURST - 1) * interval) {
            atomic_fetch_add_explicit(&r->suppressed, 1, memory_order_relaxed);
            return false;
        }
        if (atomic_compare_exchange_weak_explicit(&r->tat_us, &tat, base + interval,
                                                  memory_order_relaxed, memory_order_relaxed))
            break;
    }
    *suppressed_p = atomic_exchange_explicit(&r->suppressed, 0, memory_order_relaxed);
    return true;
}

/* A forked child inherits the cached id of the thread that forked. */
static void log_atfork_child(void)
{
    log_tid = 0;
}

__attribute__((constructor)) static void log_init(void)
{
    pthread_atfork(NULL, NULL, log_atfork_child);
}

void jet__log(int level, const char *file, int line, const char *fmt, ...)
{
    static const char letters[] = "DIWE";
    long tid = log_tid;
    if (!tid) tid = log_tid = syscall(SYS_gettid);
    char msg[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n = snprintf(msg, sizeof msg, "%c%02d%02d %02d:%02d:%02d.%06ld %ld %s:%d] ",
                     letters[level & 3], tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000, tid, base, line);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof msg) {
        int m = vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
        if (m > 0) n += m;
    }
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof msg - 1) n = sizeof msg - 2;
    /* One write(2) per line so that lines from threads never interleave. */
    while (n > 0 && msg[n - 1] == '\n')
        n--;
    msg[n++] = '\n';
    ssize_t w = write(STDERR_FILENO, msg, (size_t)n);
    (void)w;
}
