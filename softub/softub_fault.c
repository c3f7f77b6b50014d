/* softub_fault.c: environment knobs, read once per process.
 *
 * SOFTUB_FABRIC            fabric name (default "default"): processes on
 *                          different fabrics never see each other.
 * SOFTUB_DEVICE            device name (default softub0).
 * SOFTUB_EID               EID text (IPv6, dotted IPv4 or a u32), overriding
 *                          the host's first non-loopback IPv4.
 * SOFTUB_REGION_MB         size of the per-process shared region (default
 *                          1024, sparse).
 * SOFTUB_UM_DROP_PPM       UM messages dropped per million.
 * SOFTUB_DELAY_US          every WR waits this long before it executes.
 * SOFTUB_ERR_EVERY         every Nth WR of the process completes with an
 *                          error CR and moves no byte.
 * SOFTUB_ERR_STATUS        the status of those CRs (default 7,
 *                          URMA_CR_REM_OPERATION_ERR).
 * SOFTUB_FORCE_RNR         1: targets behave as if no receive were posted.
 * SOFTUB_IMPORT_DELAY_US   import_jetty/import_jfr/import_seg sleep this long
 *                          (exposes imports made on a data path).
 * SOFTUB_QUEUE_DELAY_US    create_jfc, create_jetty, modify_jetty to RESET and
 *                          delete_jetty sleep this long (exposes queue set-up
 *                          and teardown made on a data path).
 * SOFTUB_CLOSE_DELAY_US    modify_jetty to ERROR sleeps this long (exposes a
 *                          queue teardown made on a data path).
 * SOFTUB_CLOSE_FAIL        1: modify_jetty to ERROR fails (URMA_FAIL) after
 *                          that sleep: a jetty that cannot be stopped, whose
 *                          user must destroy it without a drain.
 * SOFTUB_DIE_ON_TAKE_IMM   a sender that takes a receive WR for a SEND_IMM
 *                          carrying this immediate kills itself (SIGKILL)
 *                          before it writes the data or the CR: a sender
 *                          killed mid-message; carrying this immediate + 1,
 *                          after its CR, before it frees the receive queue's
 *                          slot; + 2, right after it claims that slot; + 3,
 *                          right after it claims its CR's slot; + 4, after
 *                          the WR's mark, before the CR; + 5, holding a
 *                          claimed JFCE event slot; + 6, after writing
 *                          that event, before counting it on the owner's
 *                          eventfd (SUB_DIE_*) (0: off).
 * SOFTUB_STOP_ON_TAKE_IMM  the same points, but the sender stops itself
 *                          (SIGSTOP) and goes on once continued (0: off).
 * SOFTUB_JFC_FAIL          the first this many create_jfc calls of the
 *                          process fail (ENOMEM), after their sleep.
 * SOFTUB_JFC_FAIL_AFTER    those failures start only after the process has
 *                          created this many JFCs (0: at once).
 * SOFTUB_RECV_FULL         the first this many receive WRs the process
 *                          posts (post_jfr_wr, post_jetty_recv_wr) are
 *                          refused with URMA_ENOMEM, as by a full queue.
 * SOFTUB_RECV_FULL_AFTER   those refusals start only after the process
 *                          has posted this many receive WRs (0: at once).
 * SOFTUB_LOSE_EVENT        the first this many events the process would
 *                          fire for another process's armed JFC are lost:
 *                          the JFC is disarmed and nothing is queued.
 * SOFTUB_NO_PIDFD          1: never duplicate a peer's eventfd with
 *                          pidfd_getfd; wake its progress thread through the
 *                          region doorbell instead (the fallback used when
 *                          ptrace rules refuse pidfd_getfd).
 * SOFTUB_PTRACER_ANY       0: do not call prctl(PR_SET_PTRACER_ANY) when the
 *                          process joins (default 1: under Yama ptrace_scope
 *                          1, peers need it for process_vm_* and
 *                          pidfd_getfd on this process).
 * SOFTUB_SLOW_TRACE        a file: each delay injected by SOFTUB_IMPORT_,
 *                          _QUEUE_ or _CLOSE_DELAY_US appends "<pid> <thread
 *                          name> <call> <start> <end>" when it ends (start
 *                          and end: CLOCK_MONOTONIC microseconds), so a test
 *                          can tell which threads made the slow calls, and
 *                          when. */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "softub_internal.h"

struct sub_fault softub__fault;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static uint64_t fault_u64(const char *name, uint64_t def, uint64_t max)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        return def;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s || *end != '\0') {
        SUB_WARN("ignoring %s=%s: not a number\n", name, s);
        return def;
    }
    return v > max ? max : v;
}

static void fault_str(const char *name, char *dst, size_t cap, const char *def)
{
    const char *s = getenv(name);
    if (s == NULL || *s == '\0')
        s = def;
    size_t n = strnlen(s, cap - 1);
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static void fault_load_once(void)
{
    struct sub_fault *f = &softub__fault;
    f->um_drop_ppm = (uint32_t)fault_u64("SOFTUB_UM_DROP_PPM", 0, 1000000);
    f->delay_us = (uint32_t)fault_u64("SOFTUB_DELAY_US", 0, 60000000);
    f->err_every = (uint32_t)fault_u64("SOFTUB_ERR_EVERY", 0, UINT32_MAX);
    f->err_status = (uint32_t)fault_u64("SOFTUB_ERR_STATUS", URMA_CR_REM_OPERATION_ERR, 16);
    if (f->err_status == URMA_CR_SUCCESS)
        f->err_status = URMA_CR_REM_OPERATION_ERR;
    f->force_rnr = fault_u64("SOFTUB_FORCE_RNR", 0, 1) != 0;
    f->import_delay_us = (uint32_t)fault_u64("SOFTUB_IMPORT_DELAY_US", 0, 60000000);
    f->queue_delay_us = (uint32_t)fault_u64("SOFTUB_QUEUE_DELAY_US", 0, 60000000);
    f->close_delay_us = (uint32_t)fault_u64("SOFTUB_CLOSE_DELAY_US", 0, 60000000);
    f->close_fail = fault_u64("SOFTUB_CLOSE_FAIL", 0, 1) != 0;
    f->die_on_take_imm = fault_u64("SOFTUB_DIE_ON_TAKE_IMM", 0, UINT64_MAX);
    f->stop_on_take_imm = fault_u64("SOFTUB_STOP_ON_TAKE_IMM", 0, UINT64_MAX);
    atomic_store(&f->jfc_fail, (uint32_t)fault_u64("SOFTUB_JFC_FAIL", 0, 1000000));
    atomic_store(&f->jfc_fail_after, (uint32_t)fault_u64("SOFTUB_JFC_FAIL_AFTER", 0, 1000000));
    atomic_store(&f->recv_full, (uint32_t)fault_u64("SOFTUB_RECV_FULL", 0, 1000000));
    atomic_store(&f->recv_full_after, (uint32_t)fault_u64("SOFTUB_RECV_FULL_AFTER", 0, 1000000));
    atomic_store(&f->lose_event, (uint32_t)fault_u64("SOFTUB_LOSE_EVENT", 0, 1000000));
    f->no_pidfd = fault_u64("SOFTUB_NO_PIDFD", 0, 1) != 0;
    f->ptracer_any = fault_u64("SOFTUB_PTRACER_ANY", 1, 1) != 0;
    uint64_t mb = fault_u64("SOFTUB_REGION_MB", SUB_REGION_DEFAULT >> 20, 1ull << 20);
    if (mb < 16)
        mb = 16;
    f->region_size = mb << 20;
    fault_str("SOFTUB_EID", f->eid, sizeof(f->eid), "");
    fault_str("SOFTUB_DEVICE", f->device, sizeof(f->device), SUB_DEFAULT_DEVICE);
    fault_str("SOFTUB_FABRIC", f->fabric, sizeof(f->fabric), "default");
    fault_str("SOFTUB_SLOW_TRACE", f->slow_trace, sizeof(f->slow_trace), "");
    /* The fabric name becomes part of a /dev/shm file name. */
    for (char *c = f->fabric; *c != '\0'; c++) {
        if (*c == '/')
            *c = '_';
    }
}

void softub__fault_load(void)
{
    (void)pthread_once(&fault_once, fault_load_once);
}

/* One line per delay, written whole with O_APPEND: lines of several
 * threads and processes do not mix. */
static void fault_note_slow(const char *what, long long start_us, long long end_us)
{
    if (softub__fault.slow_trace[0] == '\0')
        return;
    char name[32] = "?";
    (void)pthread_getname_np(pthread_self(), name, sizeof(name));
    char line[160];
    int n = snprintf(line, sizeof(line), "%d %s %s %lld %lld\n", (int)getpid(), name, what,
                     start_us, end_us);
    int fd = open(softub__fault.slow_trace, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (n > 0)
        (void)!write(fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
    close(fd);
}

void softub__fault_sleep_us(uint32_t us, const char *what)
{
    if (us == 0)
        return;
    long long start = (long long)(softub__now_ns() / 1000);
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    fault_note_slow(what, start, (long long)(softub__now_ns() / 1000));
}
