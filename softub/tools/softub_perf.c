/* softub_perf: raw URMA ping-pong latency and bandwidth between two
 * processes, next to the floors they are compared with (a shared-memory
 * ping-pong and memcpy), in the manner of ib_send_lat / ib_send_bw.
 *
 * Roles: by default the program forks before any URMA call; the child is the
 * server, the parent the client, and they talk over a socketpair. With
 * --server it listens on a unix socket (abstract "softub_perf.<pid>" or
 * --sock=PATH) and --client=PID|PATH connects to it. Only the client measures
 * and prints; the server answers the client's commands.
 *
 * Control protocol (same host, so fixed-size host-order messages with a
 * magic, a version and zeroed reserved bytes): HELLO carries the client's
 * parameters; SHM passes the memfd of the ping-pong floor (SCM_RIGHTS);
 * SETUP makes both sides open URMA and swap INFO (EID, uasid, the whole
 * urma_seg_t of their region and its token, URMA-API.md §4.4); LANE creates
 * a fresh JFR + jetty on both sides (receive buffers of one size), swaps
 * LANE_INFO (jetty id, JFR token) and imports the peer's jetty; RUN starts
 * one measurement; LANE_DOWN tears the lane down; QUIT ends.
 *
 * Lanes exist because posted receive WRs cannot be taken back: the SEND
 * test of each size gets its own JFR whose receive buffers have that size.
 *
 * Only liburma functions are used, through the dlopen table of
 * tool_urma.h, so the binary runs on softub and on UB hardware. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tool_urma.h"

#define PF_MAGIC       0x46504253u /* "SBPF" */
#define PF_VERSION     1
#define PF_MAX_SIZES   24
#define PF_MAX_SLOTS   256u
#define PF_LAT_RECV    16u
#define PF_LAT_AREA    (64u * 1024u)
#define PF_LAT_MAX     1024u
#define PF_JFS_DEPTH   1024u
#define PF_SJFC_DEPTH  2048u
#define PF_RJFC_DEPTH  4096u
#define PF_STOP_FLAG   (1ull << 63)
#define PF_POLL_BATCH  16
#define PF_CHECK_EVERY 4096u /* empty polls between peer-liveness checks */

/* ------------------------------------------------------------------------ */
/* Options, globals                                                          */
/* ------------------------------------------------------------------------ */

enum { PF_ROLE_FORK, PF_ROLE_SERVER, PF_ROLE_CLIENT };

typedef struct pf_opts {
    const char *lib;
    const char *abi;
    const char *dev;
    const char *sock;
    const char *client_target;
    int role;
    uint32_t iters, warmup, lat_size, signal_every;
    uint64_t window;
    double bw_seconds;
    uint64_t sizes[PF_MAX_SIZES];
    int nsizes;
    int mem_malloc, json, inline_send, event_blocking, no_pin, timeout;
    int cpu_client, cpu_server;
    uint32_t trans_mode, tp_type, token_policy;
    int skip_lat, skip_bw, skip_poll, skip_event;
} pf_opts_t;

static pf_opts_t pf_o;
static tu_lib_t pf_u;
static const char *volatile pf_phase = "start";
static char pf_errbuf[512];
static volatile pid_t pf_child = -1;
static volatile sig_atomic_t pf_child_expected_exit;
static int pf_ctl_fd = -1;

static void pf_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void pf_fail(const char *fmt, ...)
{
    /* Keep the first failure: later ones are usually its consequences. */
    if (pf_errbuf[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pf_errbuf, sizeof(pf_errbuf), fmt, ap);
    va_end(ap);
}

static void pf_strlcpy(char *dst, const char *src, size_t len)
{
    size_t n = strnlen(src, len - 1);
    memcpy(dst, src, n);
    dst[n] = 0;
}

static uint64_t pf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pf_write_str(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void pf_on_alarm(int sig)
{
    (void)sig;
    pf_write_str("softub_perf: timeout (--timeout) in phase: ");
    pf_write_str(pf_phase);
    pf_write_str("\n");
    if (pf_child > 0) kill(pf_child, SIGKILL);
    _exit(3);
}

static void pf_on_child(int sig)
{
    (void)sig;
    int status, saved = errno;
    if (pf_child > 0 && waitpid(pf_child, &status, WNOHANG) == pf_child) {
        pf_child = -1;
        if (!pf_child_expected_exit) {
            pf_write_str("softub_perf: the server process died in phase: ");
            pf_write_str(pf_phase);
            pf_write_str(WIFSIGNALED(status) ? " (killed by a signal)\n" : " (exited)\n");
            _exit(3);
        }
    }
    errno = saved;
}

static uint8_t pf_pat(uint64_t off)
{
    return (uint8_t)(off * 131u + 7u);
}

/* ------------------------------------------------------------------------ */
/* Control messages                                                          */
/* ------------------------------------------------------------------------ */

enum {
    PF_HELLO = 1,
    PF_HELLO_ACK,
    PF_SHM,
    PF_SHM_DONE,
    PF_SETUP,
    PF_INFO,
    PF_LANE,
    PF_LANE_INFO,
    PF_READY,
    PF_RUN,
    PF_RESULT,
    PF_LANE_DOWN,
    PF_QUIT,
};

enum { PF_RUN_LAT_POLL = 1, PF_RUN_LAT_EVENT, PF_RUN_CHECK_WRITE, PF_RUN_SEND_BW };

typedef struct pf_params {
    uint32_t iters, warmup, lat_size, signal_every;
    uint32_t mem_malloc, trans_mode, tp_type, token_policy;
    uint32_t event_blocking, inline_send, cpu, pid;
    uint64_t window, region_len;
} pf_params_t;

typedef struct pf_info {
    int32_t status;
    uint32_t gen;
    urma_eid_t eid;
    uint32_t uasid;
    uint32_t seg_token;
    urma_seg_t seg;
    uint64_t region_len;
    char dev[URMA_MAX_NAME];
    char err[160];
} pf_info_t;

typedef struct pf_lane_msg {
    int32_t status;
    uint32_t nrecv; /* LANE: wanted; LANE_INFO: posted */
    uint64_t rsize; /* receive buffer size */
    uint64_t roff;  /* offset of the receive buffers in the region */
    urma_jetty_id_t jetty_id;
    uint32_t jfr_token;
    uint32_t reserved;
    char err[160];
} pf_lane_msg_t;

typedef struct pf_run {
    uint32_t kind;
    uint32_t slots;
    uint64_t size;
    uint64_t count;
} pf_run_t;

typedef struct pf_result {
    int32_t status;
    uint32_t pid;
    uint64_t msgs, bytes, stamp_sum, errors, events;
    char err[256];
} pf_result_t;

typedef struct pf_msg {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t reserved[2];
    union {
        pf_params_t hello;
        pf_info_t info;
        pf_lane_msg_t lane;
        pf_run_t run;
        pf_result_t result;
        uint8_t raw[496];
    } u;
} pf_msg_t;

_Static_assert(sizeof(pf_msg_t) == 512, "pf_msg_t is a fixed 512-byte frame");

static int pf_write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -errno ? -errno : -EIO;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int pf_read_all(int fd, void *buf, size_t len, int *fd_out)
{
    uint8_t *p = buf;
    while (len) {
        struct iovec iov = {p, len};
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(int))];
        } cm;
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        if (fd_out) {
            mh.msg_control = cm.b;
            mh.msg_controllen = sizeof(cm.b);
        }
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return -ECONNRESET;
        if (n < 0) return -errno;
        if (fd_out) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
                    memcpy(fd_out, CMSG_DATA(c), sizeof(int));
            }
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void pf_msg_init(pf_msg_t *m, int type)
{
    memset(m, 0, sizeof(*m));
    m->magic = PF_MAGIC;
    m->version = PF_VERSION;
    m->type = (uint16_t)type;
}

static int pf_send(int fd, pf_msg_t *m)
{
    int rc = pf_write_all(fd, m, sizeof(*m));
    if (rc < 0) pf_fail("control socket: send: %s", strerror(-rc));
    return rc;
}

static int pf_send_with_fd(int fd, pf_msg_t *m, int pass_fd)
{
    struct iovec iov = {m, sizeof(*m)};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int))];
    } cm;
    memset(&cm, 0, sizeof(cm));
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    ssize_t n;
    do {
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(*m)) {
        pf_fail("control socket: sendmsg(SCM_RIGHTS) failed: %s",
                n < 0 ? strerror(errno) : "short");
        return -EIO;
    }
    return 0;
}

/* Receives one frame of the given type (0 = any); validates the header. */
static int pf_recv(int fd, pf_msg_t *m, int type, int *fd_out)
{
    int rc = pf_read_all(fd, m, sizeof(*m), fd_out);
    if (rc < 0) {
        pf_fail("control socket: peer gone (%s) in phase %s", strerror(-rc), pf_phase);
        return rc;
    }
    if (m->magic != PF_MAGIC || m->version != PF_VERSION || m->reserved[0] || m->reserved[1]) {
        pf_fail("control socket: bad frame (magic 0x%08x version %u)", m->magic, m->version);
        return -EPROTO;
    }
    if (type && m->type != type) {
        if (m->type == PF_RESULT && m->u.result.status < 0) {
            m->u.result.err[sizeof(m->u.result.err) - 1] = 0;
            pf_fail("peer failed: %s", m->u.result.err);
        } else {
            pf_fail("control socket: expected frame %d, got %d in phase %s", type, m->type,
                    pf_phase);
        }
        return -EPROTO;
    }
    return 0;
}

/* Has the peer sent something (an error report) or hung up? Used inside
 * spin loops so that a failing peer does not leave us spinning forever. */
static int pf_peer_spoke(void)
{
    struct pollfd p = {pf_ctl_fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct pf_mem {
    uint8_t *base;
    size_t len;
    int fd;
    int malloced;
} pf_mem_t;

static int pf_mem_alloc(pf_mem_t *m, size_t len, int use_malloc, const char *name)
{
    memset(m, 0, sizeof(*m));
    m->fd = -1;
    m->len = len;
    if (use_malloc) {
        void *p = NULL;
        int rc = posix_memalign(&p, 4096, len);
        if (rc) {
            pf_fail("posix_memalign(%zu): %s", len, strerror(rc));
            return -rc;
        }
        m->base = p;
        m->malloced = 1;
    } else {
        /* The fd stays open for the region's lifetime: softub finds the
         * memfd behind a registered VA through /proc/self/fd. */
        m->fd = memfd_create(name, MFD_CLOEXEC);
        if (m->fd < 0) {
            pf_fail("memfd_create: %s", strerror(errno));
            return -errno;
        }
        if (ftruncate(m->fd, (off_t)len) < 0) {
            int e = errno;
            close(m->fd);
            pf_fail("ftruncate(memfd, %zu): %s", len, strerror(e));
            return -e;
        }
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(m->fd);
            pf_fail("mmap(memfd, %zu): %s", len, strerror(e));
            return -e;
        }
        m->base = p;
    }
    return 0;
}

static void pf_mem_free(pf_mem_t *m)
{
    if (!m->base) return;
    if (m->malloced) {
        free(m->base);
    } else {
        munmap(m->base, m->len);
        close(m->fd);
    }
    memset(m, 0, sizeof(*m));
    m->fd = -1;
}

/* Client regions hold pf_pat(offset), server regions its complement, so a
 * byte that arrived from the client is told apart from one that was there. */
static void pf_mem_fill(pf_mem_t *m, int client)
{
    for (size_t i = 0; i < m->len; i++)
        m->base[i] = client ? pf_pat(i) : (uint8_t)~pf_pat(i);
}

/* ------------------------------------------------------------------------ */
/* Statistics                                                                */
/* ------------------------------------------------------------------------ */

typedef struct pf_lat {
    int valid;
    double median_us, p99_us, avg_us, min_us;
    uint64_t n;
} pf_lat_t;

static int pf_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Samples are round trips in ns; latencies are reported one-way (RTT/2), as
 * ib_send_lat does. */
static pf_lat_t pf_lat_stats(uint64_t *s, uint64_t n)
{
    pf_lat_t r = {0};
    if (!n) return r;
    qsort(s, n, sizeof(*s), pf_cmp_u64);
    long double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += s[i];
    uint64_t p99 = (n * 99) / 100;
    if (p99 >= n) p99 = n - 1;
    r.valid = 1;
    r.n = n;
    r.median_us = s[n / 2] / 2000.0;
    r.p99_us = s[p99] / 2000.0;
    r.avg_us = (double)(sum / n) / 2000.0;
    r.min_us = s[0] / 2000.0;
    return r;
}

/* ------------------------------------------------------------------------ */
/* Floors: shared-memory ping-pong and memcpy                                */
/* ------------------------------------------------------------------------ */

/* Two cache lines of a MAP_SHARED memfd: the client writes `ping` in line 0,
 * the server answers in line 1, both spin. One line per direction, so a
 * spinning reader never shares a line with its own writes. */
typedef struct pf_shm_lines {
    _Alignas(64) _Atomic uint64_t ping;
    _Alignas(64) _Atomic uint64_t pong;
} pf_shm_lines_t;

static int pf_shm_client(int fd, uint64_t *samples, pf_lat_t *out)
{
    pf_phase = "shm ping-pong";
    int mfd = memfd_create("softub_perf-shm", MFD_CLOEXEC);
    if (mfd < 0 || ftruncate(mfd, 4096) < 0) {
        pf_fail("shm floor: memfd: %s", strerror(errno));
        if (mfd >= 0) close(mfd);
        return -EIO;
    }
    pf_shm_lines_t *l = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (l == MAP_FAILED) {
        pf_fail("shm floor: mmap: %s", strerror(errno));
        close(mfd);
        return -EIO;
    }
    pf_msg_t m;
    pf_msg_init(&m, PF_SHM);
    int rc = pf_send_with_fd(fd, &m, mfd);
    close(mfd);
    if (rc == 0) rc = pf_recv(fd, &m, PF_READY, NULL);
    uint32_t total = pf_o.warmup + pf_o.iters;
    for (uint32_t i = 1; rc == 0 && i <= total; i++) {
        uint64_t t0 = pf_now_ns();
        atomic_store_explicit(&l->ping, i, memory_order_release);
        uint32_t spins = 0;
        while (atomic_load_explicit(&l->pong, memory_order_acquire) != i) {
            if (++spins == PF_CHECK_EVERY * 64) {
                spins = 0;
                if (pf_peer_spoke()) {
                    pf_fail("shm floor: the server stopped answering");
                    rc = -EIO;
                    break;
                }
            }
        }
        uint64_t t1 = pf_now_ns();
        if (i > pf_o.warmup) samples[i - pf_o.warmup - 1] = t1 - t0;
    }
    if (rc == 0) rc = pf_recv(fd, &m, PF_SHM_DONE, NULL);
    munmap(l, 4096);
    if (rc == 0) *out = pf_lat_stats(samples, pf_o.iters);
    return rc;
}

static int pf_shm_server(int fd, int mfd, uint32_t total)
{
    pf_phase = "shm ping-pong (server)";
    pf_shm_lines_t *l = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    close(mfd);
    if (l == MAP_FAILED) {
        pf_fail("shm floor: mmap: %s", strerror(errno));
        return -EIO;
    }
    pf_msg_t m;
    pf_msg_init(&m, PF_READY);
    int rc = pf_send(fd, &m);
    for (uint32_t i = 1; rc == 0 && i <= total; i++) {
        uint32_t spins = 0;
        while (atomic_load_explicit(&l->ping, memory_order_acquire) != i) {
            if (++spins == PF_CHECK_EVERY * 64) {
                spins = 0;
                if (pf_peer_spoke()) {
                    pf_fail("shm floor: the client went away");
                    rc = -EIO;
                    break;
                }
            }
        }
        atomic_store_explicit(&l->pong, i, memory_order_release);
    }
    munmap(l, 4096);
    if (rc == 0) {
        pf_msg_init(&m, PF_SHM_DONE);
        rc = pf_send(fd, &m);
    }
    return rc;
}

static uint32_t pf_slots(uint64_t size)
{
    uint64_t s = pf_o.window / size;
    if (s < 2) s = 2;
    if (s > PF_MAX_SLOTS) s = PF_MAX_SLOTS;
    return (uint32_t)s;
}

/* Same footprint as the SEND test: sources cycle over the client's `slots`
 * buffers, destinations over the 2 x slots receive buffers of the server. */
static double pf_memcpy_bw(const pf_mem_t *src, const pf_mem_t *dst, uint64_t size)
{
    uint32_t slots = pf_slots(size), rs = 2 * slots;
    uint64_t k = 0, t0 = pf_now_ns(), t1, limit = (uint64_t)(pf_o.bw_seconds * 1e9);
    for (uint32_t i = 0; i < rs; i++)
        memcpy(dst->base + (uint64_t)i * size, src->base + (uint64_t)(i % slots) * size, size);
    t0 = pf_now_ns();
    do {
        for (int j = 0; j < 8; j++, k++)
            memcpy(dst->base + (k % rs) * size, src->base + (k % slots) * size, size);
        t1 = pf_now_ns();
    } while (t1 - t0 < limit);
    return (double)(k * size) / ((double)(t1 - t0) / 1e9) / 1e6;
}

/* ------------------------------------------------------------------------ */
/* URMA side                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct pf_lane {
    urma_jfr_t *jfr;
    urma_jetty_t *jetty;
    urma_target_jetty_t *tjetty;
    int bound;
    uint32_t token;
    uint32_t nrecv;
    uint64_t rsize, roff;
    urma_jfr_wr_t *rwr; /* one prebuilt receive WR per buffer */
    urma_sge_t *rsge;
} pf_lane_t;

typedef struct pf_side {
    int client;
    urma_device_t *dev;
    urma_context_t *ctx;
    urma_jfce_t *jfce;
    urma_jfc_t *sjfc, *rjfc;
    int epfd;
    int armed;
    pf_mem_t region;
    urma_target_seg_t *seg;
    urma_target_seg_t *peer_seg;
    uint64_t peer_va;
    uint32_t seg_token;
    uint32_t jfs_depth, jfr_depth_max, inline_max;
    uint32_t max_jfr_depth_cap;
    int inited;
    pf_lane_t lane;
    /* send-side accounting: WRs posted and WRs known complete */
    uint64_t posted, covered;
    uint64_t events;
    uint64_t stale;
    pf_info_t peer;
} pf_side_t;

static char pf_sbuf[64];

static const char *pf_st(int st)
{
    return tu_status_name(st, pf_sbuf, sizeof(pf_sbuf));
}

static int pf_urma_setup(pf_side_t *s, uint64_t region_len)
{
    static const char *const required[] = {
        "urma_init",
        "urma_uninit",
        "urma_get_device_list",
        "urma_free_device_list",
        "urma_get_device_by_name",
        "urma_query_device",
        "urma_get_eid_list",
        "urma_free_eid_list",
        "urma_create_context",
        "urma_delete_context",
        "urma_create_jfce",
        "urma_delete_jfce",
        "urma_create_jfc",
        "urma_delete_jfc",
        "urma_poll_jfc",
        "urma_rearm_jfc",
        "urma_wait_jfc",
        "urma_ack_jfc",
        "urma_create_jfr",
        "urma_delete_jfr",
        "urma_create_jetty",
        "urma_modify_jetty",
        "urma_delete_jetty",
        "urma_import_jetty",
        "urma_unimport_jetty",
        "urma_bind_jetty",
        "urma_unbind_jetty",
        "urma_register_seg",
        "urma_unregister_seg",
        "urma_import_seg",
        "urma_unimport_seg",
        "urma_post_jetty_send_wr",
        "urma_post_jetty_recv_wr",
        NULL,
    };
    char err[1024];
    int st;

    pf_phase = "urma setup";
    s->epfd = -1;
    if (tu_open(&pf_u, pf_o.lib, pf_o.abi, required, err, sizeof(err)) < 0) {
        pf_fail("%s", err);
        return -ENOENT;
    }
    if (pf_u.gen != TU_GEN_MASTER && pf_u.gen != TU_GEN_2512) {
        pf_fail("%s is a %s liburma: its urma_sge_t/urma_rjetty_t differ from the master layout "
                "this tool is built for (override with --abi=master if that is wrong)",
                pf_u.real, tu_gen_name(pf_u.gen));
        return -ENOTSUP;
    }
    urma_init_attr_t init = {0, 0};
    st = pf_u.urma_init(&init);
    if (st != URMA_SUCCESS && st != URMA_EEXIST) {
        pf_fail("urma_init: %s (URMA unavailable)", pf_st(st));
        return -ENODEV;
    }
    s->inited = st == URMA_SUCCESS;

    if (pf_o.dev) {
        s->dev = pf_u.urma_get_device_by_name((char *)pf_o.dev);
        if (!s->dev) {
            pf_fail("urma_get_device_by_name(%s): %s", pf_o.dev, strerror(errno));
            return -ENODEV;
        }
    } else {
        int num = 0;
        urma_device_t **list = pf_u.urma_get_device_list(&num);
        if (!list || num <= 0) {
            pf_fail("urma_get_device_list: no device (%s)", strerror(errno));
            return -ENODEV;
        }
        s->dev = list[0];
        pf_u.urma_free_device_list(list);
    }

    union {
        urma_device_attr_t attr;
        uint8_t bytes[4096];
    } ab;
    memset(&ab, 0, sizeof(ab));
    st = pf_u.urma_query_device(s->dev, &ab.attr);
    if (st != URMA_SUCCESS) {
        pf_fail("urma_query_device(%s): %s", s->dev->name, pf_st(st));
        return -EIO;
    }
    /* Only the prefix up to max_msg_size is the same in every generation. */
    const urma_device_cap_t *cap = &ab.attr.dev_cap;
    s->jfs_depth = PF_JFS_DEPTH < cap->max_jfs_depth ? PF_JFS_DEPTH : cap->max_jfs_depth;
    s->max_jfr_depth_cap = cap->max_jfr_depth;
    s->inline_max = cap->max_jfs_inline_len;
    uint32_t sjfc = PF_SJFC_DEPTH < cap->max_jfc_depth ? PF_SJFC_DEPTH : cap->max_jfc_depth;
    uint32_t rjfc = PF_RJFC_DEPTH < cap->max_jfc_depth ? PF_RJFC_DEPTH : cap->max_jfc_depth;
    /* Receive depth leaves the receive JFC room for the flush CRs of a
     * whole JFR when a lane is torn down (URMA-API.md §4.1 JFC depth). */
    s->jfr_depth_max = rjfc / 2 < cap->max_jfr_depth ? rjfc / 2 : cap->max_jfr_depth;
    if (s->jfs_depth < 16 || s->jfr_depth_max < 2 * PF_LAT_RECV) {
        pf_fail("device %s: queue depths too small (jfs %u, jfc %u, jfr %u)", s->dev->name,
                cap->max_jfs_depth, cap->max_jfc_depth, cap->max_jfr_depth);
        return -EINVAL;
    }

    uint32_t cnt = 0;
    urma_eid_info_t *eids = pf_u.urma_get_eid_list(s->dev, &cnt);
    if (!eids || cnt == 0) {
        pf_fail("urma_get_eid_list(%s): %s", s->dev->name, strerror(errno));
        return -EIO;
    }
    uint32_t eid_index = eids[0].eid_index;
    pf_u.urma_free_eid_list(eids);

    s->ctx = pf_u.urma_create_context(s->dev, eid_index);
    if (!s->ctx) {
        pf_fail("urma_create_context(%s, %u): %s", s->dev->name, eid_index, strerror(errno));
        return -EIO;
    }
    s->jfce = pf_u.urma_create_jfce(s->ctx);
    if (!s->jfce) {
        pf_fail("urma_create_jfce: %s", strerror(errno));
        return -EIO;
    }
    urma_jfc_cfg_t jc = {.depth = sjfc, .ceqn = 0, .jfce = NULL, .user_ctx = 1};
    s->sjfc = pf_u.urma_create_jfc(s->ctx, &jc);
    if (!s->sjfc) {
        pf_fail("urma_create_jfc(send, depth %u): %s", sjfc, strerror(errno));
        return -EIO;
    }
    jc.depth = rjfc;
    jc.jfce = s->jfce;
    jc.user_ctx = 2;
    s->rjfc = pf_u.urma_create_jfc(s->ctx, &jc);
    if (!s->rjfc) {
        pf_fail("urma_create_jfc(recv, depth %u): %s", rjfc, strerror(errno));
        return -EIO;
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN};
    if (s->epfd < 0 || epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->jfce->fd, &ev) < 0) {
        pf_fail("epoll on jfce->fd %d: %s", s->jfce->fd, strerror(errno));
        return -EIO;
    }

    if (pf_mem_alloc(&s->region, region_len, pf_o.mem_malloc,
                     s->client ? "softub_perf-client" : "softub_perf-server") < 0)
        return -ENOMEM;
    pf_mem_fill(&s->region, s->client);
    s->seg_token = (uint32_t)(pf_now_ns() ^ ((uint64_t)getpid() << 16)) | 1u;
    urma_seg_cfg_t sc = {
        .va = (uint64_t)(uintptr_t)s->region.base,
        .len = region_len,
        .token_id = NULL,
        .token_value = {s->seg_token},
        .user_ctx = 3,
    };
    sc.flag.bs.token_policy = pf_o.token_policy;
    sc.flag.bs.cacheable = URMA_NON_CACHEABLE;
    sc.flag.bs.access = URMA_ACCESS_READ | URMA_ACCESS_WRITE;
    sc.flag.bs.token_id_valid = URMA_TOKEN_ID_INVALID;
    s->seg = pf_u.urma_register_seg(s->ctx, &sc);
    if (!s->seg) {
        pf_fail("urma_register_seg(%zu bytes, %s): %s", (size_t)region_len,
                pf_o.mem_malloc ? "malloc" : "memfd", strerror(errno));
        return -EIO;
    }
    return 0;
}

static void pf_fill_info(pf_side_t *s, pf_info_t *in, int status)
{
    memset(in, 0, sizeof(*in));
    in->status = status;
    in->gen = pf_u.gen;
    if (status < 0) {
        pf_strlcpy(in->err, pf_errbuf, sizeof(in->err));
        return;
    }
    in->eid = s->ctx->eid;
    in->uasid = s->ctx->uasid;
    in->seg_token = s->seg_token;
    in->seg = s->seg->seg;
    in->region_len = s->region.len;
    snprintf(in->dev, sizeof(in->dev), "%s", s->dev->name);
}

static int pf_import_peer_seg(pf_side_t *s)
{
    urma_token_t tok = {s->peer.seg_token};
    urma_import_seg_flag_t f = {0};
    f.bs.cacheable = URMA_NON_CACHEABLE;
    f.bs.access = URMA_ACCESS_READ | URMA_ACCESS_WRITE;
    f.bs.mapping = URMA_SEG_NOMAP;
    urma_seg_t seg = s->peer.seg;
    s->peer_seg = pf_u.urma_import_seg(s->ctx, &seg, &tok, 0, f);
    if (!s->peer_seg) {
        pf_fail("urma_import_seg(peer): %s", strerror(errno));
        return -EIO;
    }
    memcpy(&s->peer_va, (const uint8_t *)&s->peer.seg.ubva + offsetof(urma_ubva_t, va),
           sizeof(s->peer_va));
    return 0;
}

/* Drains whatever is left in both JFCs (flush CRs after a lane teardown,
 * unsignalled leftovers) and collects unwaited completion events, so the
 * next test starts from empty queues and delete_jfc finds every event acked. */
static void pf_drain(pf_side_t *s, int wait_ms)
{
    urma_cr_t cr[PF_POLL_BATCH];
    uint64_t end = pf_now_ns() + (uint64_t)wait_ms * 1000000ull;
    if (!s->sjfc || !s->rjfc || !s->jfce) return;
    do {
        int got = 0, n;
        while ((n = pf_u.urma_poll_jfc(s->sjfc, PF_POLL_BATCH, cr)) > 0) {
            s->stale += (uint64_t)n;
            got += n;
        }
        while ((n = pf_u.urma_poll_jfc(s->rjfc, PF_POLL_BATCH, cr)) > 0) {
            s->stale += (uint64_t)n;
            got += n;
        }
        urma_jfc_t *jfcs[16];
        n = pf_u.urma_wait_jfc(s->jfce, 16, 0, jfcs);
        if (n > 0) {
            uint32_t ones[16];
            for (int i = 0; i < n; i++)
                ones[i] = 1;
            pf_u.urma_ack_jfc(jfcs, ones, (uint32_t)n);
            s->armed = 0;
            got += n;
        }
        if (!got && wait_ms == 0) break;
        if (!got) usleep(1000);
    } while (pf_now_ns() < end);
}

static void pf_lane_destroy(pf_side_t *s)
{
    pf_lane_t *l = &s->lane;
    if (l->jetty) {
        urma_jetty_attr_t a = {.mask = JETTY_STATE, .state = URMA_JETTY_STATE_ERROR};
        int st = pf_u.urma_modify_jetty(l->jetty, &a);
        if (st != URMA_SUCCESS) pf_fail("urma_modify_jetty(ERROR): %s", pf_st(st));
        /* FLUSH_ERR_DONE should arrive; it is not waited for indefinitely,
         * since nothing is outstanding here. */
        pf_drain(s, 20);
    }
    if (l->bound) {
        int st = pf_u.urma_unbind_jetty(l->jetty);
        if (st != URMA_SUCCESS) pf_fail("urma_unbind_jetty: %s", pf_st(st));
        l->bound = 0;
    }
    if (l->tjetty) {
        int st = pf_u.urma_unimport_jetty(l->tjetty);
        if (st != URMA_SUCCESS) pf_fail("urma_unimport_jetty: %s", pf_st(st));
    }
    if (l->jetty) {
        int st = pf_u.urma_delete_jetty(l->jetty);
        if (st != URMA_SUCCESS) pf_fail("urma_delete_jetty: %s", pf_st(st));
    }
    if (l->jfr) {
        int st = pf_u.urma_delete_jfr(l->jfr);
        if (st != URMA_SUCCESS) pf_fail("urma_delete_jfr: %s", pf_st(st));
    }
    free(l->rwr);
    free(l->rsge);
    memset(l, 0, sizeof(*l));
    pf_drain(s, 0);
    s->posted = s->covered = 0;
}

static void pf_urma_teardown(pf_side_t *s)
{
    if (!pf_u.handle) return;
    pf_phase = "urma teardown";
    pf_lane_destroy(s);
    if (s->peer_seg && pf_u.urma_unimport_seg(s->peer_seg) != URMA_SUCCESS)
        pf_fail("urma_unimport_seg failed");
    if (s->seg && pf_u.urma_unregister_seg(s->seg) != URMA_SUCCESS)
        pf_fail("urma_unregister_seg failed");
    if (s->jfce) pf_drain(s, 0);
    if (s->rjfc && pf_u.urma_delete_jfc(s->rjfc) != URMA_SUCCESS)
        pf_fail("urma_delete_jfc(recv) failed");
    if (s->sjfc && pf_u.urma_delete_jfc(s->sjfc) != URMA_SUCCESS)
        pf_fail("urma_delete_jfc(send) failed");
    if (s->jfce) {
        int st = pf_u.urma_delete_jfce(s->jfce);
        if (st != URMA_SUCCESS) pf_fail("urma_delete_jfce: %s", pf_st(st));
    }
    if (s->epfd >= 0) close(s->epfd);
    if (s->ctx) {
        int st = pf_u.urma_delete_context(s->ctx);
        if (st != URMA_SUCCESS) pf_fail("urma_delete_context: %s", pf_st(st));
    }
    if (s->inited) pf_u.urma_uninit();
    pf_mem_free(&s->region);
    /* The library stays loaded until exit: liburma's plugins may still be
     * referenced by atexit handlers (URMA-API.md §1.1). */
    s->seg = s->peer_seg = NULL;
    s->jfce = NULL;
    s->sjfc = s->rjfc = NULL;
    s->ctx = NULL;
    s->epfd = -1;
    s->inited = 0;
}

static void pf_lane_fill_rwr(pf_side_t *s)
{
    pf_lane_t *l = &s->lane;
    for (uint32_t j = 0; j < l->nrecv; j++) {
        l->rsge[j] = (urma_sge_t){
            .addr = (uint64_t)(uintptr_t)(s->region.base + l->roff + (uint64_t)j * l->rsize),
            .len = (uint32_t)l->rsize,
            .tseg = s->seg,
        };
        l->rwr[j] = (urma_jfr_wr_t){.src = {&l->rsge[j], 1}, .user_ctx = j, .next = NULL};
    }
}

static int pf_post_recv_chain(pf_side_t *s, urma_jfr_wr_t *head)
{
    urma_jfr_wr_t *bad = NULL;
    int st = pf_u.urma_post_jetty_recv_wr(s->lane.jetty, head, &bad);
    if (st != URMA_SUCCESS) {
        pf_fail("urma_post_jetty_recv_wr: %s (bad_wr user_ctx %" PRIu64 ")", pf_st(st),
                bad ? bad->user_ctx : UINT64_MAX);
        return -EIO;
    }
    return 0;
}

/* Creates this side's JFR + jetty with `nrecv` receive buffers of `rsize`
 * bytes at region offset `roff` (nrecv may be 0: a send-only lane still
 * needs a JFR on UB, URMA-API.md §4.1). */
static int pf_lane_create(pf_side_t *s, uint32_t nrecv, uint64_t rsize, uint64_t roff)
{
    pf_lane_t *l = &s->lane;
    memset(l, 0, sizeof(*l));
    if (nrecv > s->jfr_depth_max) nrecv = s->jfr_depth_max;
    if (roff + (uint64_t)nrecv * rsize > s->region.len || rsize > UINT32_MAX) {
        pf_fail("lane: %u x %" PRIu64 " B at %" PRIu64 " exceeds the region", nrecv, rsize, roff);
        return -EINVAL;
    }
    l->nrecv = nrecv;
    l->rsize = rsize;
    l->roff = roff;
    l->token = (uint32_t)(pf_now_ns() * 2654435761u) | 1u;
    if (nrecv) {
        l->rwr = calloc(nrecv, sizeof(*l->rwr));
        l->rsge = calloc(nrecv, sizeof(*l->rsge));
        if (!l->rwr || !l->rsge) {
            pf_fail("lane: out of memory");
            return -ENOMEM;
        }
    }
    urma_jfr_cfg_t rc = {
        .id = 0,
        .depth = nrecv ? nrecv : 1,
        .trans_mode = (urma_transport_mode_t)pf_o.trans_mode,
        .max_sge = 1,
        .min_rnr_timer = 1, /* 0.01 ms between RNR retries (Appendix B) */
        .jfc = s->rjfc,
        .token_value = {l->token},
        .user_ctx = 4,
    };
    rc.flag.bs.token_policy = pf_o.token_policy;
    l->jfr = pf_u.urma_create_jfr(s->ctx, &rc);
    if (!l->jfr) {
        pf_fail("urma_create_jfr(depth %u): %s", rc.depth, strerror(errno));
        return -EIO;
    }
    urma_jetty_cfg_t jc = {
        .id = 0,
        .jfs_cfg =
            {
                .depth = s->jfs_depth,
                .trans_mode = (urma_transport_mode_t)pf_o.trans_mode,
                .priority = 0,
                .max_sge = 1,
                .max_rsge = 1,
                .max_inline_data = 0,
                .rnr_retry = URMA_TYPICAL_RNR_RETRY,
                .err_timeout = URMA_TYPICAL_ERR_TIMEOUT,
                .jfc = s->sjfc,
                .user_ctx = 5,
            },
        .jetty_grp = NULL,
        .user_ctx = 6,
    };
    jc.flag.bs.share_jfr = URMA_SHARE_JFR;
    jc.shared.jfr = l->jfr;
    jc.shared.jfc = NULL;
    l->jetty = pf_u.urma_create_jetty(s->ctx, &jc);
    if (!l->jetty) {
        pf_fail("urma_create_jetty: %s", strerror(errno));
        return -EIO;
    }
    s->posted = s->covered = 0;
    return 0;
}

static int pf_lane_connect(pf_side_t *s, const pf_lane_msg_t *peer)
{
    pf_lane_t *l = &s->lane;
    urma_rjetty_t rj = {
        .jetty_id = peer->jetty_id,
        .trans_mode = (urma_transport_mode_t)pf_o.trans_mode,
        .policy = URMA_JETTY_GRP_POLICY_RR,
        .type = URMA_JETTY,
        .tp_type = (urma_tp_type_t)pf_o.tp_type,
    };
    rj.flag.bs.token_policy = pf_o.token_policy;
    urma_token_t tok = {peer->jfr_token};
    l->tjetty = pf_u.urma_import_jetty(s->ctx, &rj, &tok);
    if (!l->tjetty) {
        pf_fail("urma_import_jetty(peer jetty %u): %s", peer->jetty_id.id, strerror(errno));
        return -EIO;
    }
    if (pf_o.trans_mode == URMA_TM_RC) {
        int st = pf_u.urma_bind_jetty(l->jetty, l->tjetty);
        if (st != URMA_SUCCESS) {
            pf_fail("urma_bind_jetty: %s", pf_st(st));
            return -EIO;
        }
        l->bound = 1;
    }
    if (l->nrecv) {
        pf_lane_fill_rwr(s);
        for (uint32_t j = 0; j + 1 < l->nrecv; j++)
            l->rwr[j].next = &l->rwr[j + 1];
        int rc = pf_post_recv_chain(s, &l->rwr[0]);
        for (uint32_t j = 0; j < l->nrecv; j++)
            l->rwr[j].next = NULL;
        if (rc < 0) return rc;
    }
    return 0;
}

static void pf_lane_msg_fill(pf_side_t *s, pf_lane_msg_t *m, int status)
{
    memset(m, 0, sizeof(*m));
    m->status = status;
    if (status < 0) {
        pf_strlcpy(m->err, pf_errbuf, sizeof(m->err));
        return;
    }
    m->nrecv = s->lane.nrecv;
    m->rsize = s->lane.rsize;
    m->roff = s->lane.roff;
    m->jetty_id = s->lane.jetty->jetty_id;
    m->jfr_token = s->lane.token;
}

/* ---- send-side completions ---------------------------------------------- */

static int pf_check_send_cr(const urma_cr_t *cr)
{
    if (cr->status != URMA_CR_SUCCESS) {
        pf_fail("send CR: status %s (%d), user_ctx %" PRIu64 ", completion_len %u",
                tu_cr_status_name(cr->status), cr->status, cr->user_ctx, cr->completion_len);
        return -EIO;
    }
    if (cr->flag.bs.s_r) {
        pf_fail("send JFC returned a receive CR (s_r = 1, user_ctx %" PRIu64 ")", cr->user_ctx);
        return -EIO;
    }
    return 0;
}

/* Reaps initiator CRs; with `need` set, spins until the send queue has room
 * for one more WR. A CR for WR n means WRs 0..n are complete (completions
 * are in post order per JFS), which also frees unsignalled slots. */
static int pf_reap(pf_side_t *s, int need)
{
    urma_cr_t cr[PF_POLL_BATCH];
    uint32_t spins = 0;
    for (;;) {
        memset(cr, 0, sizeof(cr));
        int n = pf_u.urma_poll_jfc(s->sjfc, PF_POLL_BATCH, cr);
        if (n < 0) {
            pf_fail("urma_poll_jfc(send): %d", n);
            return -EIO;
        }
        for (int i = 0; i < n; i++) {
            if (pf_check_send_cr(&cr[i]) < 0) return -EIO;
            if (cr[i].user_ctx + 1 > s->covered) s->covered = cr[i].user_ctx + 1;
        }
        if (!need || s->posted - s->covered < s->jfs_depth - 1) return 0;
        if (n == 0 && ++spins == PF_CHECK_EVERY) {
            spins = 0;
            if (pf_peer_spoke()) {
                pf_fail("peer stopped while send completions were outstanding (phase %s)",
                        pf_phase);
                return -EIO;
            }
        }
    }
}

/* ---- receive side -------------------------------------------------------- */

/* Waits for one receive CR, by busy polling or by the completion-event
 * protocol of URMA-API.md §4.9: poll; if empty arm, poll again (a CR may
 * have raced the arm); then sleep on the JFCE fd (epoll), take the events
 * with wait_jfc, ack them; the event disarmed the JFC; poll. */
static int pf_wait_recv(pf_side_t *s, urma_cr_t *cr, int event)
{
    uint32_t spins = 0;
    for (;;) {
        memset(cr, 0, sizeof(*cr));
        int n = pf_u.urma_poll_jfc(s->rjfc, 1, cr);
        if (n > 0) return 0;
        if (n < 0) {
            pf_fail("urma_poll_jfc(recv): %d", n);
            return -EIO;
        }
        if (!event) {
            if (++spins == PF_CHECK_EVERY) {
                spins = 0;
                if (pf_peer_spoke()) {
                    pf_fail("peer stopped while a receive was awaited (phase %s)", pf_phase);
                    return -EIO;
                }
            }
            continue;
        }
        if (!s->armed) {
            int st = pf_u.urma_rearm_jfc(s->rjfc, false);
            if (st != URMA_SUCCESS) {
                pf_fail("urma_rearm_jfc: %s", pf_st(st));
                return -EIO;
            }
            s->armed = 1;
            continue;
        }
        urma_jfc_t *jfcs[16];
        int k;
        if (pf_o.event_blocking) {
            k = pf_u.urma_wait_jfc(s->jfce, 16, 1000, jfcs);
        } else {
            struct epoll_event ev;
            int e = epoll_wait(s->epfd, &ev, 1, 1000);
            if (e < 0 && errno != EINTR) {
                pf_fail("epoll_wait(jfce fd): %s", strerror(errno));
                return -EIO;
            }
            k = e > 0 ? pf_u.urma_wait_jfc(s->jfce, 16, 0, jfcs) : 0;
        }
        if (k < 0) {
            pf_fail("urma_wait_jfc: %d (errno %d)", k, errno);
            return -EIO;
        }
        if (k > 0) {
            uint32_t ones[16];
            for (int i = 0; i < k; i++) {
                if (jfcs[i] != s->rjfc) {
                    pf_fail("urma_wait_jfc returned jfc %p, expected %p", (void *)jfcs[i],
                            (void *)s->rjfc);
                    return -EIO;
                }
                ones[i] = 1;
            }
            pf_u.urma_ack_jfc(jfcs, ones, (uint32_t)k);
            s->events += (uint64_t)k;
            s->armed = 0;
        } else if (pf_peer_spoke()) {
            pf_fail("peer stopped while an event was awaited (phase %s)", pf_phase);
            return -EIO;
        }
    }
}

static int pf_check_recv_cr(pf_side_t *s, const urma_cr_t *cr, int opcode, uint32_t len)
{
    if (cr->status != URMA_CR_SUCCESS) {
        pf_fail("receive CR: status %s (%d), user_ctx %" PRIu64, tu_cr_status_name(cr->status),
                cr->status, cr->user_ctx);
        return -EIO;
    }
    if (!cr->flag.bs.s_r || (int)cr->opcode != opcode || cr->user_ctx >= s->lane.nrecv ||
        cr->completion_len != len) {
        pf_fail("receive CR: s_r %u opcode %d (want %d) user_ctx %" PRIu64 " (< %u) completion_len "
                "%u (want %u)",
                cr->flag.bs.s_r, cr->opcode, opcode, cr->user_ctx, s->lane.nrecv,
                cr->completion_len, len);
        return -EIO;
    }
    return 0;
}

/* ---- latency ------------------------------------------------------------- */

static uint8_t *pf_lat_sendbuf(pf_side_t *s)
{
    return s->region.base + (s->region.len - PF_LAT_AREA) + PF_LAT_AREA / 2;
}

typedef struct pf_lat_ctx {
    urma_sge_t sge;
    urma_jfs_wr_t wr;
    uint8_t *sbuf;
    uint32_t total;
} pf_lat_ctx_t;

static int pf_lat_post(pf_side_t *s, pf_lat_ctx_t *c, uint32_t i)
{
    memcpy(c->sbuf, &(uint64_t){i}, sizeof(uint64_t));
    c->wr.user_ctx = s->posted;
    c->wr.send.imm_data = i;
    c->wr.flag.bs.complete_enable = ((i + 1) % pf_o.signal_every == 0 || i + 1 == c->total) ? 1 : 0;
    if (s->posted - s->covered >= s->jfs_depth - 1 && pf_reap(s, 1) < 0) return -EIO;
    urma_jfs_wr_t *bad = NULL;
    int st = pf_u.urma_post_jetty_send_wr(s->lane.jetty, &c->wr, &bad);
    if (st != URMA_SUCCESS) {
        pf_fail("urma_post_jetty_send_wr(SEND_IMM %u B, iteration %u): %s", pf_o.lat_size, i,
                pf_st(st));
        return -EIO;
    }
    s->posted++;
    return 0;
}

static int pf_lat_recv(pf_side_t *s, uint32_t i, int event)
{
    urma_cr_t cr;
    if (pf_wait_recv(s, &cr, event) < 0) return -EIO;
    if (pf_check_recv_cr(s, &cr, URMA_CR_OPC_SEND_WITH_IMM, pf_o.lat_size) < 0) return -EIO;
    uint64_t stamp;
    memcpy(&stamp, s->region.base + s->lane.roff + cr.user_ctx * s->lane.rsize, sizeof(stamp));
    if (cr.imm_data != i || stamp != i) {
        pf_fail("latency: iteration %u got imm_data %" PRIu64 ", payload stamp %" PRIu64, i,
                cr.imm_data, stamp);
        return -EIO;
    }
    return pf_post_recv_chain(s, &s->lane.rwr[cr.user_ctx]);
}

/* Ping-pong of SEND_IMM messages of lat_size bytes; the immediate and the
 * first 8 payload bytes carry the sequence number, both are checked, and
 * the receive buffer is re-posted inside the timed loop, as ib_send_lat
 * does. The client times each round trip into samples[]. */
static int pf_lat_run(pf_side_t *s, int event, uint64_t *samples)
{
    pf_lat_ctx_t c = {.total = pf_o.warmup + pf_o.iters, .sbuf = pf_lat_sendbuf(s)};
    c.sge = (urma_sge_t){.addr = (uint64_t)(uintptr_t)c.sbuf, .len = pf_o.lat_size, .tseg = s->seg};
    c.wr = (urma_jfs_wr_t){.opcode = URMA_OPC_SEND_IMM, .tjetty = s->lane.tjetty, .next = NULL};
    c.wr.send.src = (urma_sg_t){&c.sge, 1};
    c.wr.flag.bs.inline_flag = pf_o.inline_send ? URMA_INLINE_ENABLE : URMA_INLINE_DISABLE;

    for (uint32_t i = 0; i < c.total; i++) {
        if (s->client) {
            uint64_t t0 = pf_now_ns();
            if (pf_lat_post(s, &c, i) < 0 || pf_lat_recv(s, i, event) < 0) return -EIO;
            uint64_t t1 = pf_now_ns();
            if (i >= pf_o.warmup) samples[i - pf_o.warmup] = t1 - t0;
        } else if (pf_lat_recv(s, i, event) < 0 || pf_lat_post(s, &c, i) < 0) {
            return -EIO;
        }
        if (pf_reap(s, 0) < 0) return -EIO;
    }
    /* The last WR was signalled: wait for it (bounded) so that nothing is
     * left in flight when the lane is torn down. */
    uint64_t end = pf_now_ns() + 10000000000ull;
    while (s->covered < s->posted) {
        if (pf_reap(s, 0) < 0) return -EIO;
        if (pf_now_ns() > end) {
            pf_fail("latency: the last send never completed (%" PRIu64 " of %" PRIu64 ")",
                    s->covered, s->posted);
            return -EIO;
        }
    }
    return 0;
}

/* ---- bandwidth ----------------------------------------------------------- */

typedef struct pf_bw {
    uint64_t msgs, bytes, stamp_sum;
    double mbps;
} pf_bw_t;

/* Keeps `slots` WRITEs or SENDs in flight for bw_seconds; each message is
 * stamped with its sequence number in its first 8 bytes. The client's
 * source buffers cycle over `slots`, WRITE destinations too. */
static int pf_bw_client(pf_side_t *s, int opcode, uint64_t size, uint32_t slots, pf_bw_t *out)
{
    urma_sge_t lsge[PF_MAX_SLOTS], rsge[PF_MAX_SLOTS];
    urma_jfs_wr_t wr[PF_MAX_SLOTS];
    for (uint32_t j = 0; j < slots; j++) {
        lsge[j] = (urma_sge_t){.addr = (uint64_t)(uintptr_t)(s->region.base + j * size),
                               .len = (uint32_t)size,
                               .tseg = s->seg};
        rsge[j] =
            (urma_sge_t){.addr = s->peer_va + j * size, .len = (uint32_t)size, .tseg = s->peer_seg};
        wr[j] = (urma_jfs_wr_t){.opcode = (urma_opcode_t)opcode, .tjetty = s->lane.tjetty};
        wr[j].flag.bs.complete_enable = URMA_COMPLETE_ENABLE;
        if (opcode == URMA_OPC_WRITE) {
            wr[j].rw.src = (urma_sg_t){&lsge[j], 1};
            wr[j].rw.dst = (urma_sg_t){&rsge[j], 1};
        } else {
            wr[j].send.src = (urma_sg_t){&lsge[j], 1};
        }
    }
    uint64_t limit = (uint64_t)(pf_o.bw_seconds * 1e9), t0 = pf_now_ns(), t1 = t0;
    uint64_t seq = 0, done = 0, sum = 0;
    int stop = 0;
    urma_cr_t cr[PF_POLL_BATCH];
    uint32_t spins = 0;
    while (!stop || s->covered < s->posted) {
        urma_jfs_wr_t *head = NULL, *tail = NULL;
        for (int k = 0; k < PF_POLL_BATCH && !stop && s->posted - s->covered < slots; k++) {
            uint32_t j = (uint32_t)(seq % slots);
            memcpy(s->region.base + j * size, &seq, sizeof(seq));
            wr[j].user_ctx = s->posted;
            wr[j].next = NULL;
            if (tail)
                tail->next = &wr[j];
            else
                head = &wr[j];
            tail = &wr[j];
            sum += seq;
            seq++;
            s->posted++;
        }
        if (head) {
            urma_jfs_wr_t *bad = NULL;
            int st = pf_u.urma_post_jetty_send_wr(s->lane.jetty, head, &bad);
            if (st != URMA_SUCCESS) {
                pf_fail("urma_post_jetty_send_wr(%s %" PRIu64 " B): %s",
                        opcode == URMA_OPC_WRITE ? "WRITE" : "SEND", size, pf_st(st));
                return -EIO;
            }
        }
        memset(cr, 0, sizeof(cr));
        int n = pf_u.urma_poll_jfc(s->sjfc, PF_POLL_BATCH, cr);
        if (n < 0) {
            pf_fail("urma_poll_jfc(send): %d", n);
            return -EIO;
        }
        for (int i = 0; i < n; i++) {
            if (pf_check_send_cr(&cr[i]) < 0) return -EIO;
            if (cr[i].user_ctx + 1 > s->covered) s->covered = cr[i].user_ctx + 1;
            done++;
        }
        t1 = pf_now_ns();
        if (!stop && t1 - t0 >= limit) stop = 1;
        if (n == 0 && !head && ++spins == PF_CHECK_EVERY) {
            spins = 0;
            if (pf_peer_spoke()) {
                pf_fail("peer stopped during the bandwidth test");
                return -EIO;
            }
        }
    }
    out->msgs = done;
    out->bytes = done * size;
    out->stamp_sum = sum;
    out->mbps = (double)out->bytes / ((double)(t1 - t0) / 1e9) / 1e6;
    return 0;
}

static int pf_send_stop(pf_side_t *s, uint64_t count)
{
    /* 8-byte SEND_IMM from the start of the latency send buffer: the
     * immediate carries the count, the flag marks it as the end. */
    uint8_t *sbuf = pf_lat_sendbuf(s);
    memcpy(sbuf, &count, sizeof(count));
    urma_sge_t sge = {.addr = (uint64_t)(uintptr_t)sbuf, .len = 8, .tseg = s->seg};
    urma_jfs_wr_t wr = {
        .opcode = URMA_OPC_SEND_IMM, .tjetty = s->lane.tjetty, .user_ctx = s->posted};
    wr.flag.bs.complete_enable = 1;
    wr.send.src = (urma_sg_t){&sge, 1};
    wr.send.imm_data = PF_STOP_FLAG | count;
    urma_jfs_wr_t *bad = NULL;
    int st = pf_u.urma_post_jetty_send_wr(s->lane.jetty, &wr, &bad);
    if (st != URMA_SUCCESS) {
        pf_fail("urma_post_jetty_send_wr(stop marker): %s", pf_st(st));
        return -EIO;
    }
    s->posted++;
    while (s->covered < s->posted) {
        if (pf_reap(s, 0) < 0) return -EIO;
    }
    return 0;
}

/* Server half of the SEND test: reposts every receive buffer as soon as it
 * completes, checks length, stamp and a tail byte, until the stop marker. */
static int pf_bw_send_server(pf_side_t *s, uint64_t size, uint32_t slots, pf_result_t *r)
{
    pf_lane_t *l = &s->lane;
    urma_cr_t cr[PF_POLL_BATCH];
    uint64_t msgs = 0, sum = 0, errors = 0;
    uint32_t spins = 0;
    for (;;) {
        memset(cr, 0, sizeof(cr));
        int n = pf_u.urma_poll_jfc(s->rjfc, PF_POLL_BATCH, cr);
        if (n < 0) {
            pf_fail("urma_poll_jfc(recv): %d", n);
            return -EIO;
        }
        if (n == 0) {
            if (++spins == PF_CHECK_EVERY) {
                spins = 0;
                if (pf_peer_spoke()) {
                    pf_fail("client stopped before the stop marker (%" PRIu64 " messages)", msgs);
                    return -EIO;
                }
            }
            continue;
        }
        urma_jfr_wr_t *head = NULL, *tail = NULL;
        for (int i = 0; i < n; i++) {
            if (cr[i].status == URMA_CR_SUCCESS && cr[i].opcode == URMA_CR_OPC_SEND_WITH_IMM &&
                (cr[i].imm_data & PF_STOP_FLAG)) {
                uint64_t count = cr[i].imm_data & ~PF_STOP_FLAG;
                if (count != msgs) {
                    pf_fail("SEND %" PRIu64 " B: stop marker says %" PRIu64 " messages, %" PRIu64
                            " arrived",
                            size, count, msgs);
                    errors++;
                }
                r->msgs = msgs;
                r->bytes = msgs * size;
                r->stamp_sum = sum;
                r->errors = errors;
                if (head && pf_post_recv_chain(s, head) < 0) return -EIO;
                return errors ? -EIO : 0;
            }
            if (pf_check_recv_cr(s, &cr[i], URMA_CR_OPC_SEND, (uint32_t)size) < 0) return -EIO;
            const uint8_t *buf = s->region.base + l->roff + cr[i].user_ctx * l->rsize;
            uint64_t stamp;
            memcpy(&stamp, buf, sizeof(stamp));
            uint64_t src_slot = stamp % slots;
            if (buf[size - 1] != pf_pat(src_slot * size + size - 1)) {
                if (!errors)
                    pf_fail("SEND %" PRIu64 " B: message %" PRIu64 " has a wrong last byte", size,
                            stamp);
                errors++;
            }
            sum += stamp;
            msgs++;
            urma_jfr_wr_t *w = &l->rwr[cr[i].user_ctx];
            w->next = NULL;
            if (tail)
                tail->next = w;
            else
                head = w;
            tail = w;
        }
        if (head && pf_post_recv_chain(s, head) < 0) return -EIO;
    }
}

/* Checks the stamp, the last byte and one in the middle of every slot. The
 * bytes checked are never where an earlier, smaller size stamped its
 * sequence numbers (the client's sources keep those stamps). */
static int pf_check_write(pf_side_t *s, uint64_t size, uint32_t slots, uint64_t count,
                          pf_result_t *r)
{
    uint64_t errors = 0;
    for (uint32_t j = 0; j < slots && j < count; j++) {
        const uint8_t *buf = s->region.base + j * size;
        uint64_t want = j + (uint64_t)slots * ((count - 1 - j) / slots), stamp;
        memcpy(&stamp, buf, sizeof(stamp));
        if (stamp != want || buf[size - 1] != pf_pat(j * size + size - 1) ||
            buf[size / 2 + 9] != pf_pat(j * size + size / 2 + 9)) {
            if (!errors)
                pf_fail("WRITE %" PRIu64 " B: slot %u holds stamp %" PRIu64 " (want %" PRIu64
                        ") or wrong bytes",
                        size, j, stamp, want);
            errors++;
        }
    }
    r->msgs = count;
    r->errors = errors;
    return errors ? -EIO : 0;
}

/* ------------------------------------------------------------------------ */
/* Server                                                                    */
/* ------------------------------------------------------------------------ */

static void pf_pin(int cpu)
{
    if (pf_o.no_pin || cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0)
        fprintf(stderr, "softub_perf: cannot pin to cpu %d: %s\n", cpu, strerror(errno));
}

static int pf_send_result(int fd, pf_result_t *r, int status)
{
    pf_msg_t m;
    pf_msg_init(&m, PF_RESULT);
    m.u.result = *r;
    m.u.result.status = status;
    m.u.result.pid = (uint32_t)getpid();
    if (status < 0)
        pf_strlcpy(m.u.result.err, pf_errbuf[0] ? pf_errbuf : "failed", sizeof(m.u.result.err));
    return pf_send(fd, &m);
}

static int pf_server(int fd)
{
    pf_side_t s;
    pf_msg_t m;
    memset(&s, 0, sizeof(s));
    s.epfd = -1;
    pf_ctl_fd = fd;
    int urma_ok = 0;

    for (;;) {
        int pass_fd = -1;
        pf_phase = "server: waiting for a command";
        if (pf_recv(fd, &m, 0, &pass_fd) < 0) break;
        if (pass_fd >= 0 && m.type != PF_SHM) {
            close(pass_fd);
            pass_fd = -1;
        }
        pf_result_t r;
        memset(&r, 0, sizeof(r));
        switch (m.type) {
        case PF_HELLO: {
            pf_params_t p = m.u.hello;
            pf_o.iters = p.iters;
            pf_o.warmup = p.warmup;
            pf_o.lat_size = p.lat_size;
            pf_o.signal_every = p.signal_every ? p.signal_every : 1;
            pf_o.mem_malloc = (int)p.mem_malloc;
            pf_o.trans_mode = p.trans_mode;
            pf_o.tp_type = p.tp_type;
            pf_o.token_policy = p.token_policy;
            pf_o.event_blocking = (int)p.event_blocking;
            pf_o.inline_send = (int)p.inline_send;
            pf_o.window = p.window;
            pf_params_t mine = p;
            mine.cpu = (uint32_t)sched_getcpu();
            pf_msg_init(&m, PF_HELLO_ACK);
            m.u.hello = mine;
            m.u.hello.pid = (uint32_t)getpid();
            if (pf_send(fd, &m) < 0) goto out;
            break;
        }
        case PF_SHM:
            if (pass_fd < 0) {
                pf_fail("SHM without a file descriptor");
                goto out;
            }
            if (pf_shm_server(fd, pass_fd, pf_o.warmup + pf_o.iters) < 0) goto out;
            break;
        case PF_SETUP: {
            uint64_t region_len = m.u.hello.region_len;
            int rc = pf_urma_setup(&s, region_len);
            pf_fill_info(&s, &m.u.info, rc);
            m.type = PF_INFO;
            if (pf_send(fd, &m) < 0 || pf_recv(fd, &m, PF_INFO, NULL) < 0) goto out;
            s.peer = m.u.info;
            if (rc == 0 && s.peer.status == 0) urma_ok = pf_import_peer_seg(&s) == 0;
            pf_msg_init(&m, PF_READY);
            m.u.result.status = urma_ok ? 0 : -1;
            pf_strlcpy(m.u.result.err, pf_errbuf, sizeof(m.u.result.err));
            if (pf_send(fd, &m) < 0) goto out;
            break;
        }
        case PF_LANE: {
            pf_phase = "server: lane set-up";
            pf_lane_msg_t want = m.u.lane;
            int rc = urma_ok ? pf_lane_create(&s, want.nrecv, want.rsize, want.roff) : -EIO;
            pf_msg_init(&m, PF_LANE_INFO);
            pf_lane_msg_fill(&s, &m.u.lane, rc);
            if (pf_send(fd, &m) < 0 || pf_recv(fd, &m, PF_LANE_INFO, NULL) < 0) goto out;
            if (rc == 0 && m.u.lane.status == 0) rc = pf_lane_connect(&s, &m.u.lane);
            if (pf_send_result(fd, &r, rc) < 0) goto out;
            break;
        }
        case PF_RUN: {
            pf_run_t run = m.u.run;
            int rc = 0;
            if (run.kind == PF_RUN_LAT_POLL || run.kind == PF_RUN_LAT_EVENT) {
                pf_phase = run.kind == PF_RUN_LAT_POLL ? "server: latency (polling)"
                                                       : "server: latency (event)";
                pf_msg_init(&m, PF_READY);
                if (pf_send(fd, &m) < 0) goto out;
                s.events = 0;
                rc = pf_lat_run(&s, run.kind == PF_RUN_LAT_EVENT, NULL);
                r.events = s.events;
            } else if (run.kind == PF_RUN_CHECK_WRITE) {
                pf_phase = "server: WRITE check";
                if (run.slots == 0 || run.slots > PF_MAX_SLOTS || run.size == 0 ||
                    (uint64_t)run.slots * run.size > s.region.len) {
                    pf_fail("WRITE check: bad parameters");
                    rc = -EINVAL;
                } else {
                    rc = pf_check_write(&s, run.size, run.slots, run.count, &r);
                }
            } else if (run.kind == PF_RUN_SEND_BW) {
                pf_phase = "server: SEND bandwidth";
                if (run.slots == 0 || run.slots > PF_MAX_SLOTS || run.size < 8 ||
                    run.size != s.lane.rsize) {
                    pf_fail("SEND test: bad parameters");
                    rc = -EINVAL;
                } else {
                    pf_msg_init(&m, PF_READY);
                    if (pf_send(fd, &m) < 0) goto out;
                    rc = pf_bw_send_server(&s, run.size, run.slots, &r);
                }
            } else {
                pf_fail("unknown RUN kind %u", run.kind);
                rc = -EINVAL;
            }
            if (pf_send_result(fd, &r, rc) < 0) goto out;
            break;
        }
        case PF_LANE_DOWN:
            pf_phase = "server: lane teardown";
            pf_lane_destroy(&s);
            if (pf_send_result(fd, &r, pf_errbuf[0] ? -EIO : 0) < 0) goto out;
            break;
        case PF_QUIT:
            pf_urma_teardown(&s);
            pf_send_result(fd, &r, pf_errbuf[0] ? -EIO : 0);
            return pf_errbuf[0] ? 1 : 0;
        default:
            pf_fail("unexpected frame type %d", m.type);
            goto out;
        }
    }
out:
    if (pf_errbuf[0]) fprintf(stderr, "softub_perf server: %s\n", pf_errbuf);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Client                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct pf_size_result {
    uint64_t size;
    uint32_t slots;
    double write_mbps, send_mbps, memcpy_mbps;
    int write_ok, send_ok;
} pf_size_result_t;

typedef struct pf_report {
    pf_lat_t shm, poll, event;
    uint64_t event_events_client, event_events_server;
    pf_size_result_t sz[PF_MAX_SIZES];
    int urma_ok;
    char dev[URMA_MAX_NAME];
    char eid[80];
    pid_t server_pid;
    int server_cpu, client_cpu;
    uint64_t stale;
} pf_report_t;

static int pf_client_lane(int fd, pf_side_t *s, uint32_t my_nrecv, uint32_t peer_nrecv,
                          uint64_t rsize, uint64_t roff)
{
    pf_msg_t m;
    pf_phase = "client: lane set-up";
    pf_msg_init(&m, PF_LANE);
    m.u.lane.nrecv = peer_nrecv;
    m.u.lane.rsize = rsize;
    m.u.lane.roff = roff;
    if (pf_send(fd, &m) < 0) return -EIO;
    int rc = pf_lane_create(s, my_nrecv, rsize, roff);
    pf_msg_init(&m, PF_LANE_INFO);
    pf_lane_msg_fill(s, &m.u.lane, rc);
    if (pf_send(fd, &m) < 0 || pf_recv(fd, &m, PF_LANE_INFO, NULL) < 0) return -EIO;
    pf_lane_msg_t peer = m.u.lane;
    if (peer.status < 0) {
        peer.err[sizeof(peer.err) - 1] = 0;
        pf_fail("server lane: %s", peer.err);
        rc = -EIO;
    }
    if (rc == 0) rc = pf_lane_connect(s, &peer);
    if (pf_recv(fd, &m, PF_RESULT, NULL) < 0) return -EIO;
    if (m.u.result.status < 0) {
        m.u.result.err[sizeof(m.u.result.err) - 1] = 0;
        pf_fail("server lane: %s", m.u.result.err);
        return -EIO;
    }
    /* The server may have clamped its receive depth: report what it posted. */
    return rc < 0 ? rc : (int)peer.nrecv;
}

static int pf_client_lane_down(int fd, pf_side_t *s)
{
    pf_msg_t m;
    pf_phase = "client: lane teardown";
    pf_lane_destroy(s);
    pf_msg_init(&m, PF_LANE_DOWN);
    if (pf_send(fd, &m) < 0 || pf_recv(fd, &m, PF_RESULT, NULL) < 0) return -EIO;
    if (m.u.result.status < 0) {
        m.u.result.err[sizeof(m.u.result.err) - 1] = 0;
        pf_fail("server lane teardown: %s", m.u.result.err);
        return -EIO;
    }
    return pf_errbuf[0] ? -EIO : 0;
}

static int pf_client_run(int fd, pf_run_t *run, int wait_ready)
{
    pf_msg_t m;
    pf_msg_init(&m, PF_RUN);
    m.u.run = *run;
    if (pf_send(fd, &m) < 0) return -EIO;
    if (wait_ready && pf_recv(fd, &m, PF_READY, NULL) < 0) return -EIO;
    return 0;
}

static int pf_client_result(int fd, pf_result_t *r)
{
    pf_msg_t m;
    if (pf_recv(fd, &m, PF_RESULT, NULL) < 0) return -EIO;
    *r = m.u.result;
    if (r->status < 0) {
        r->err[sizeof(r->err) - 1] = 0;
        pf_fail("server: %s", r->err);
        return -EIO;
    }
    return 0;
}

static uint64_t pf_region_len(void)
{
    uint64_t need = 0;
    for (int i = 0; i < pf_o.nsizes; i++) {
        uint64_t n = 2ull * pf_slots(pf_o.sizes[i]) * pf_o.sizes[i];
        if (n > need) need = n;
    }
    need = (need + 4095) & ~4095ull;
    return need + PF_LAT_AREA;
}

static int pf_client_urma(int fd, pf_side_t *s, pf_report_t *rep, uint64_t *samples)
{
    pf_msg_t m;
    uint64_t region_len = pf_region_len();
    int rc;

    pf_msg_init(&m, PF_SETUP);
    m.u.hello.region_len = region_len;
    if (pf_send(fd, &m) < 0) return -EIO;
    rc = pf_urma_setup(s, region_len);
    pf_fill_info(s, &m.u.info, rc);
    m.type = PF_INFO;
    if (pf_send(fd, &m) < 0 || pf_recv(fd, &m, PF_INFO, NULL) < 0) return -EIO;
    s->peer = m.u.info;
    if (rc == 0 && s->peer.status < 0) {
        s->peer.err[sizeof(s->peer.err) - 1] = 0;
        pf_fail("server: %s", s->peer.err);
        rc = -EIO;
    }
    if (rc == 0) rc = pf_import_peer_seg(s);
    if (pf_recv(fd, &m, PF_READY, NULL) < 0) return -EIO;
    if (rc == 0 && m.u.result.status < 0) {
        m.u.result.err[sizeof(m.u.result.err) - 1] = 0;
        pf_fail("server: %s", m.u.result.err);
        rc = -EIO;
    }
    if (rc < 0) return rc;
    snprintf(rep->dev, sizeof(rep->dev), "%s", s->dev->name);
    tu_eid_str(&s->ctx->eid, rep->eid, sizeof(rep->eid));
    rep->urma_ok = 1;

    /* Lane 1: latency (receive buffers of lat_size at the latency area)
     * and the WRITE test (no receives needed). */
    uint64_t lat_off = region_len - PF_LAT_AREA;
    uint64_t lat_slot = (pf_o.lat_size + 63) & ~63ull;
    if (!pf_o.skip_lat || !pf_o.skip_bw) {
        rc = pf_client_lane(fd, s, PF_LAT_RECV, PF_LAT_RECV, lat_slot, lat_off);
        if (rc < 0) return rc;
    }
    pf_result_t r;
    if (!pf_o.skip_lat) {
        for (int ev = 0; ev < 2; ev++) {
            if (ev ? pf_o.skip_event : pf_o.skip_poll) continue;
            pf_run_t run = {.kind = ev ? PF_RUN_LAT_EVENT : PF_RUN_LAT_POLL};
            pf_phase = ev ? "client: latency (event)" : "client: latency (polling)";
            if (pf_client_run(fd, &run, 1) < 0) return -EIO;
            s->events = 0;
            rc = pf_lat_run(s, ev, samples);
            if (pf_client_result(fd, &r) < 0 || rc < 0) return -EIO;
            if (ev) {
                rep->event = pf_lat_stats(samples, pf_o.iters);
                rep->event_events_client = s->events;
                rep->event_events_server = r.events;
            } else {
                rep->poll = pf_lat_stats(samples, pf_o.iters);
            }
            if (!pf_o.json) fprintf(stderr, "  latency %s done\n", ev ? "event" : "polling");
        }
    }
    if (!pf_o.skip_bw) {
        for (int i = 0; i < pf_o.nsizes; i++) {
            uint64_t size = pf_o.sizes[i];
            uint32_t slots = pf_slots(size);
            if (slots > s->jfs_depth - 1) slots = s->jfs_depth - 1;
            char ph[64];
            snprintf(ph, sizeof(ph), "client: WRITE %" PRIu64 " B", size);
            pf_phase = ph;
            pf_bw_t bw;
            memset(&bw, 0, sizeof(bw));
            if (pf_bw_client(s, URMA_OPC_WRITE, size, slots, &bw) < 0) return -EIO;
            pf_run_t run = {
                .kind = PF_RUN_CHECK_WRITE, .slots = slots, .size = size, .count = bw.msgs};
            if (pf_client_run(fd, &run, 0) < 0 || pf_client_result(fd, &r) < 0) return -EIO;
            rep->sz[i].size = size;
            rep->sz[i].slots = slots;
            rep->sz[i].write_mbps = bw.mbps;
            rep->sz[i].write_ok = r.errors == 0;
            if (r.errors) {
                pf_fail("WRITE %" PRIu64 " B: %" PRIu64 " slots hold wrong data at the target",
                        size, r.errors);
                return -EIO;
            }
        }
        if (!pf_o.json) fprintf(stderr, "  WRITE bandwidth done\n");
    }
    if (!pf_o.skip_lat || !pf_o.skip_bw) {
        if (pf_client_lane_down(fd, s) < 0) return -EIO;
    }
    if (!pf_o.skip_bw) {
        for (int i = 0; i < pf_o.nsizes; i++) {
            uint64_t size = pf_o.sizes[i];
            uint32_t slots = pf_slots(size);
            if (slots > s->jfs_depth - 1) slots = s->jfs_depth - 1;
            int got = pf_client_lane(fd, s, 0, 2 * slots, size, 0);
            if (got < 0) return got;
            /* Fewer receive buffers than asked: keep fewer in flight, so
             * that the test measures copies and not RNR retries. */
            if ((uint32_t)got < 2 * slots) slots = (uint32_t)got / 2 ? (uint32_t)got / 2 : 1;
            char ph[64];
            snprintf(ph, sizeof(ph), "client: SEND %" PRIu64 " B", size);
            pf_phase = ph;
            pf_run_t run = {.kind = PF_RUN_SEND_BW, .slots = slots, .size = size};
            if (pf_client_run(fd, &run, 1) < 0) return -EIO;
            pf_bw_t bw;
            memset(&bw, 0, sizeof(bw));
            rc = pf_bw_client(s, URMA_OPC_SEND, size, slots, &bw);
            if (rc == 0) rc = pf_send_stop(s, bw.msgs);
            if (pf_client_result(fd, &r) < 0 || rc < 0) return -EIO;
            rep->sz[i].size = size;
            rep->sz[i].slots = slots;
            rep->sz[i].send_mbps = bw.mbps;
            rep->sz[i].send_ok = r.errors == 0 && r.msgs == bw.msgs && r.stamp_sum == bw.stamp_sum;
            if (!rep->sz[i].send_ok) {
                pf_fail("SEND %" PRIu64 " B: server saw %" PRIu64 " messages (sent %" PRIu64
                        "), stamp sum %" PRIu64 " (want %" PRIu64 "), %" PRIu64 " bad",
                        size, r.msgs, bw.msgs, r.stamp_sum, bw.stamp_sum, r.errors);
                return -EIO;
            }
            if (pf_client_lane_down(fd, s) < 0) return -EIO;
        }
        if (!pf_o.json) fprintf(stderr, "  SEND bandwidth done\n");
    }
    return 0;
}

static void pf_json_lat(const char *name, const pf_lat_t *l, int last)
{
    if (!l->valid) {
        printf("    \"%s\": null%s\n", name, last ? "" : ",");
        return;
    }
    printf(
        "    \"%s\": {\"median_us\": %.3f, \"p99_us\": %.3f, \"avg_us\": %.3f, \"min_us\": %.3f, "
        "\"n\": %" PRIu64 "}%s\n",
        name, l->median_us, l->p99_us, l->avg_us, l->min_us, l->n, last ? "" : ",");
}

static void pf_json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static const char *pf_size_str(uint64_t size, char *buf, size_t len)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, len, "%" PRIu64 " MiB", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, len, "%" PRIu64 " KiB", size >> 10);
    else
        snprintf(buf, len, "%" PRIu64 " B", size);
    return buf;
}

static const char *pf_mode_name(void)
{
    return pf_o.trans_mode == URMA_TM_RC ? "RC" : "RM";
}

static const char *pf_tp_name(void)
{
    return pf_o.tp_type == URMA_CTP ? "CTP" : pf_o.tp_type == URMA_UTP ? "UTP" : "RTP";
}

static void pf_print(const pf_report_t *rep, const char *cmdline, int ok)
{
    const pf_size_result_t *mib = NULL;
    for (int i = 0; i < pf_o.nsizes; i++) {
        if (rep->sz[i].size == (1u << 20)) mib = &rep->sz[i];
    }
    double lat_ratio = rep->poll.valid && rep->shm.valid && rep->shm.median_us > 0
                           ? rep->poll.median_us / rep->shm.median_us
                           : 0;
    double bw_ratio =
        mib && mib->memcpy_mbps > 0 && mib->send_mbps > 0 ? mib->send_mbps / mib->memcpy_mbps : 0;
    if (pf_o.json) {
        printf("{\n  \"command\": ");
        pf_json_str(cmdline);
        printf(",\n  \"library\": ");
        pf_json_str(pf_u.handle ? pf_u.name : "");
        printf(",\n  \"library_realpath\": ");
        pf_json_str(pf_u.handle ? pf_u.real : "");
        printf(",\n  \"abi\": \"%s\",\n  \"device\": ", pf_u.handle ? tu_gen_name(pf_u.gen) : "");
        pf_json_str(rep->dev);
        printf(",\n  \"eid\": ");
        pf_json_str(rep->eid);
        printf(",\n  \"trans_mode\": \"%s\", \"tp_type\": \"%s\", \"memory\": \"%s\",\n",
               pf_mode_name(), pf_tp_name(), pf_o.mem_malloc ? "malloc" : "memfd");
        printf("  \"client_cpu\": %d, \"server_cpu\": %d, \"server_pid\": %d,\n", rep->client_cpu,
               rep->server_cpu, (int)rep->server_pid);
        printf(
            "  \"iterations\": %u, \"warmup\": %u, \"latency_size\": %u, \"signal_every\": %u,\n",
            pf_o.iters, pf_o.warmup, pf_o.lat_size, pf_o.signal_every);
        printf("  \"window_bytes\": %" PRIu64 ", \"bw_seconds\": %.3f,\n", pf_o.window,
               pf_o.bw_seconds);
        printf("  \"latency_one_way\": {\n");
        pf_json_lat("shm_pingpong", &rep->shm, 0);
        pf_json_lat("urma_polling", &rep->poll, 0);
        pf_json_lat("urma_event", &rep->event, 1);
        printf("  },\n  \"event_counts\": {\"client\": %" PRIu64 ", \"server\": %" PRIu64 "},\n",
               rep->event_events_client, rep->event_events_server);
        printf("  \"bandwidth_MBps\": [\n");
        for (int i = 0; i < pf_o.nsizes; i++) {
            const pf_size_result_t *z = &rep->sz[i];
            printf("    {\"size\": %" PRIu64
                   ", \"in_flight\": %u, \"write\": %.1f, \"send\": %.1f, "
                   "\"memcpy\": %.1f}%s\n",
                   pf_o.sizes[i], z->slots, z->write_mbps, z->send_mbps, z->memcpy_mbps,
                   i + 1 < pf_o.nsizes ? "," : "");
        }
        printf("  ],\n  \"ratios\": {\"polling_latency_over_shm\": %.3f, "
               "\"send_1MiB_over_memcpy\": %.3f},\n",
               lat_ratio, bw_ratio);
        printf("  \"urma\": %s,\n  \"ok\": %s,\n  \"error\": ", rep->urma_ok ? "true" : "false",
               ok ? "true" : "false");
        pf_json_str(pf_errbuf);
        printf("\n}\n");
        return;
    }

    printf("softub_perf: %s -> %s (abi %s)\n", pf_u.handle ? pf_u.name : "(not loaded)",
           pf_u.handle ? pf_u.real : "", pf_u.handle ? tu_gen_name(pf_u.gen) : "-");
    printf("  device %s, eid %s, %s/%s, %s memory, client cpu %d, server pid %d cpu %d\n",
           rep->dev[0] ? rep->dev : "-", rep->eid[0] ? rep->eid : "-", pf_mode_name(), pf_tp_name(),
           pf_o.mem_malloc ? "malloc" : "memfd", rep->client_cpu, (int)rep->server_pid,
           rep->server_cpu);
    printf("\nlatency [us], one way (RTT/2), %u B, %u iterations after %u warm-up\n", pf_o.lat_size,
           pf_o.iters, pf_o.warmup);
    printf("  %-60s %8s %8s %8s\n", "", "median", "p99", "avg");
    const struct {
        const char *name;
        const pf_lat_t *l;
    } rows[] = {
        {"shm ping-pong (memfd cache lines, both spin)", &rep->shm},
        {"URMA SEND_IMM, polling (busy poll_jfc)", &rep->poll},
        {pf_o.event_blocking ? "URMA SEND_IMM, event (wait_jfc/ack/rearm)"
                             : "URMA SEND_IMM, event (epoll/wait_jfc/ack/rearm)",
         &rep->event},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        if (rows[i].l->valid)
            printf("  %-60s %8.3f %8.3f %8.3f\n", rows[i].name, rows[i].l->median_us,
                   rows[i].l->p99_us, rows[i].l->avg_us);
        else
            printf("  %-60s %8s %8s %8s\n", rows[i].name, "-", "-", "-");
    }
    printf("\nbandwidth [MB/s = 10^6 B/s], up to %" PRIu64 " KiB in flight, %.2f s per figure\n",
           pf_o.window >> 10, pf_o.bw_seconds);
    printf("  %10s %9s %10s %10s %10s %12s\n", "size", "in flight", "WRITE", "SEND", "memcpy",
           "SEND/memcpy");
    for (int i = 0; i < pf_o.nsizes; i++) {
        const pf_size_result_t *z = &rep->sz[i];
        char sb[32], w[32], snd[32], mc[32], r[32];
        snprintf(w, sizeof(w), z->write_mbps > 0 ? "%.1f" : "-", z->write_mbps);
        snprintf(snd, sizeof(snd), z->send_mbps > 0 ? "%.1f" : "-", z->send_mbps);
        snprintf(mc, sizeof(mc), z->memcpy_mbps > 0 ? "%.1f" : "-", z->memcpy_mbps);
        snprintf(r, sizeof(r), z->send_mbps > 0 && z->memcpy_mbps > 0 ? "%.2f" : "-",
                 z->memcpy_mbps > 0 ? z->send_mbps / z->memcpy_mbps : 0);
        printf("  %10s %9u %10s %10s %10s %12s\n", pf_size_str(pf_o.sizes[i], sb, sizeof(sb)),
               z->slots ? z->slots : pf_slots(pf_o.sizes[i]), w, snd, mc, r);
    }
    printf("\nratios (issue targets):\n");
    if (lat_ratio > 0)
        printf("  polling latency / shm ping-pong (median)  %6.2f   target <= 2.00  %s\n",
               lat_ratio, lat_ratio <= 2.0 ? "met" : "NOT met");
    else
        printf("  polling latency / shm ping-pong           -\n");
    if (bw_ratio > 0)
        printf("  1 MiB SEND / memcpy                       %6.2f   target >= 0.50  %s\n", bw_ratio,
               bw_ratio >= 0.5 ? "met" : "NOT met");
    else
        printf("  1 MiB SEND / memcpy                       -   (1 MiB not measured)\n");
    if (!ok) printf("\nFAILED: %s\n", pf_errbuf);
}

static int pf_client(int fd, const char *cmdline)
{
    pf_report_t rep;
    pf_side_t s;
    pf_msg_t m;
    int rc = 0;
    memset(&rep, 0, sizeof(rep));
    memset(&s, 0, sizeof(s));
    s.client = 1;
    s.epfd = -1;
    pf_ctl_fd = fd;
    rep.client_cpu = sched_getcpu();

    uint64_t *samples = calloc(pf_o.iters ? pf_o.iters : 1, sizeof(uint64_t));
    if (!samples) {
        pf_fail("out of memory");
        return 1;
    }

    pf_phase = "client: hello";
    pf_msg_init(&m, PF_HELLO);
    m.u.hello = (pf_params_t){
        .iters = pf_o.iters,
        .warmup = pf_o.warmup,
        .lat_size = pf_o.lat_size,
        .signal_every = pf_o.signal_every,
        .mem_malloc = (uint32_t)pf_o.mem_malloc,
        .trans_mode = pf_o.trans_mode,
        .tp_type = pf_o.tp_type,
        .token_policy = pf_o.token_policy,
        .event_blocking = (uint32_t)pf_o.event_blocking,
        .inline_send = (uint32_t)pf_o.inline_send,
        .window = pf_o.window,
    };
    if (pf_send(fd, &m) < 0 || pf_recv(fd, &m, PF_HELLO_ACK, NULL) < 0) {
        rc = -EIO;
        goto report;
    }
    rep.server_cpu = (int)m.u.hello.cpu;
    rep.server_pid = (pid_t)m.u.hello.pid;

    if (!pf_o.skip_lat) {
        if (!pf_o.json) fprintf(stderr, "softub_perf: shm ping-pong floor\n");
        if (pf_shm_client(fd, samples, &rep.shm) < 0) {
            rc = -EIO;
            goto report;
        }
    }
    if (!pf_o.skip_bw) {
        if (!pf_o.json) fprintf(stderr, "softub_perf: memcpy floor\n");
        pf_phase = "client: memcpy floor";
        pf_mem_t src, dst;
        uint64_t len = pf_region_len();
        if (pf_mem_alloc(&src, len, pf_o.mem_malloc, "softub_perf-memcpy-src") < 0) {
            rc = -ENOMEM;
            goto report;
        }
        if (pf_mem_alloc(&dst, len, pf_o.mem_malloc, "softub_perf-memcpy-dst") < 0) {
            pf_mem_free(&src);
            rc = -ENOMEM;
            goto report;
        }
        pf_mem_fill(&src, 1);
        pf_mem_fill(&dst, 0);
        for (int i = 0; i < pf_o.nsizes; i++) {
            rep.sz[i].size = pf_o.sizes[i];
            rep.sz[i].memcpy_mbps = pf_memcpy_bw(&src, &dst, pf_o.sizes[i]);
        }
        pf_mem_free(&src);
        pf_mem_free(&dst);
    }

    if (!pf_o.json) fprintf(stderr, "softub_perf: URMA tests\n");
    rc = pf_client_urma(fd, &s, &rep, samples);
    rep.stale = s.stale;

report:
    pf_phase = "client: quit";
    if (pf_u.handle) pf_urma_teardown(&s);
    pf_child_expected_exit = 1;
    pf_msg_init(&m, PF_QUIT);
    if (pf_write_all(fd, &m, sizeof(m)) == 0) {
        pf_msg_t r;
        if (pf_read_all(fd, &r, sizeof(r), NULL) == 0 && r.type == PF_RESULT &&
            r.u.result.status < 0 && rc == 0) {
            r.u.result.err[sizeof(r.u.result.err) - 1] = 0;
            pf_fail("server teardown: %s", r.u.result.err);
        }
    }
    int ok = rc == 0 && !pf_errbuf[0];
    pf_print(&rep, cmdline, ok);
    free(samples);
    return ok ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* Options and roles                                                         */
/* ------------------------------------------------------------------------ */

static void pf_usage(FILE *f)
{
    fprintf(
        f,
        "usage: softub_perf [options]                  fork a server and measure\n"
        "       softub_perf --server [--sock=PATH]      wait for one client\n"
        "       softub_perf --client=PID|PATH [options] measure against a running server\n"
        "  --lib=PATH         load this liburma instead of liburma.so.0 / liburma.so\n"
        "  --abi=GEN          skip symbol probing: master, 25.12, b081, 24.12\n"
        "  --dev=NAME         URMA device (default: the first one)\n"
        "  --fabric=NAME      softub fabric (sets SOFTUB_FABRIC)\n"
        "  --iters=N          measured ping-pong round trips (default 10000)\n"
        "  --warmup=N         unmeasured round trips first (default 1000)\n"
        "  --lat-size=B       latency message size (default 64, max %u)\n"
        "  --signal=N         latency: request an initiator CR every N sends (default 16)\n"
        "  --inline           latency: post the SEND_IMM inline\n"
        "  --event=epoll|wait event mode: epoll on jfce->fd then wait_jfc(0) (default), or a\n"
        "                     blocking wait_jfc\n"
        "  --sizes=LIST       bandwidth sizes, e.g. 4K,64K,1M (default 4K,16K,64K,256K,1M,4M)\n"
        "  --window=BYTES     bytes in flight per bandwidth test (default 2M; 2..%u WRs)\n"
        "  --bw-time=SEC      seconds per bandwidth figure (default 0.5)\n"
        "  --mem=memfd|malloc memory behind the segments (default memfd)\n"
        "  --mode=rm|rc       transport mode (default rm)\n"
        "  --tp=rtp|ctp       transport path type for the import (default rtp)\n"
        "  --token=plain|none token policy of JFRs and segments (default plain)\n"
        "  --cpus=A,B         pin client to cpu A, server to cpu B (default 0,1 when >= 2 cpus)\n"
        "  --no-pin           do not pin\n"
        "  --no-lat, --no-bw  skip the latency or the bandwidth part\n"
        "  --lat=poll|event|both  which URMA latency modes to run (default both)\n"
        "  --quick            short run: 1000 iterations, 100 warm-up, 0.05 s per figure\n"
        "  --timeout=SEC      give up after SEC seconds (default 300)\n"
        "  --json             one JSON object on stdout\n",
        PF_LAT_MAX, PF_MAX_SLOTS);
}

static int pf_parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -EINVAL;
    if (*end == 'k' || *end == 'K')
        v <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        v <<= 20, end++;
    else if (*end == 'g' || *end == 'G')
        v <<= 30, end++;
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -EINVAL;
    *out = v;
    return 0;
}

static int pf_parse_u32(const char *s, uint32_t *out, uint32_t min, uint32_t max)
{
    uint64_t v;
    if (pf_parse_size(s, &v) < 0 || v < min || v > max) return -EINVAL;
    *out = (uint32_t)v;
    return 0;
}

static int pf_parse_sizes(const char *list)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    pf_o.nsizes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (pf_o.nsizes == PF_MAX_SIZES || pf_parse_size(t, &v) < 0 || v < 64 || v > (64u << 20))
            return -EINVAL;
        pf_o.sizes[pf_o.nsizes++] = v;
    }
    return pf_o.nsizes ? 0 : -EINVAL;
}

static int pf_parse(int argc, char **argv)
{
    enum {
        O_LIB = 256,
        O_ABI,
        O_DEV,
        O_FABRIC,
        O_ITERS,
        O_WARMUP,
        O_LATSIZE,
        O_SIGNAL,
        O_INLINE,
        O_EVENT,
        O_SIZES,
        O_WINDOW,
        O_BWTIME,
        O_MEM,
        O_MODE,
        O_TP,
        O_TOKEN,
        O_CPUS,
        O_NOPIN,
        O_NOLAT,
        O_NOBW,
        O_QUICK,
        O_TIMEOUT,
        O_JSON,
        O_SERVER,
        O_CLIENT,
        O_SOCK,
        O_LAT,
    };
    static const struct option opts[] = {
        {"lib", required_argument, NULL, O_LIB},
        {"abi", required_argument, NULL, O_ABI},
        {"dev", required_argument, NULL, O_DEV},
        {"fabric", required_argument, NULL, O_FABRIC},
        {"iters", required_argument, NULL, O_ITERS},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"lat-size", required_argument, NULL, O_LATSIZE},
        {"signal", required_argument, NULL, O_SIGNAL},
        {"inline", no_argument, NULL, O_INLINE},
        {"event", required_argument, NULL, O_EVENT},
        {"sizes", required_argument, NULL, O_SIZES},
        {"window", required_argument, NULL, O_WINDOW},
        {"bw-time", required_argument, NULL, O_BWTIME},
        {"mem", required_argument, NULL, O_MEM},
        {"mode", required_argument, NULL, O_MODE},
        {"tp", required_argument, NULL, O_TP},
        {"token", required_argument, NULL, O_TOKEN},
        {"cpus", required_argument, NULL, O_CPUS},
        {"no-pin", no_argument, NULL, O_NOPIN},
        {"no-lat", no_argument, NULL, O_NOLAT},
        {"no-bw", no_argument, NULL, O_NOBW},
        {"quick", no_argument, NULL, O_QUICK},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"json", no_argument, NULL, O_JSON},
        {"server", no_argument, NULL, O_SERVER},
        {"client", required_argument, NULL, O_CLIENT},
        {"sock", required_argument, NULL, O_SOCK},
        {"lat", required_argument, NULL, O_LAT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    pf_o.iters = 10000;
    pf_o.warmup = 1000;
    pf_o.lat_size = 64;
    pf_o.signal_every = 16;
    pf_o.window = 2u << 20;
    pf_o.bw_seconds = 0.5;
    pf_o.trans_mode = URMA_TM_RM;
    pf_o.tp_type = URMA_RTP;
    pf_o.token_policy = URMA_TOKEN_PLAIN_TEXT;
    pf_o.timeout = 300;
    pf_o.cpu_client = 0;
    pf_o.cpu_server = 1;
    pf_parse_sizes("4K,16K,64K,256K,1M,4M");
    int c, quick = 0, iters_set = 0, warm_set = 0, bw_set = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_LIB:
            pf_o.lib = optarg;
            break;
        case O_ABI:
            pf_o.abi = optarg;
            break;
        case O_DEV:
            pf_o.dev = optarg;
            break;
        case O_FABRIC:
            bad = setenv("SOFTUB_FABRIC", optarg, 1) != 0;
            break;
        case O_ITERS:
            bad = pf_parse_u32(optarg, &pf_o.iters, 1, 100000000) < 0;
            iters_set = 1;
            break;
        case O_WARMUP:
            bad = pf_parse_u32(optarg, &pf_o.warmup, 0, 100000000) < 0;
            warm_set = 1;
            break;
        case O_LATSIZE:
            bad = pf_parse_u32(optarg, &pf_o.lat_size, 8, PF_LAT_MAX) < 0;
            break;
        case O_SIGNAL:
            bad = pf_parse_u32(optarg, &pf_o.signal_every, 1, 512) < 0;
            break;
        case O_INLINE:
            pf_o.inline_send = 1;
            break;
        case O_EVENT:
            if (strcmp(optarg, "epoll") == 0)
                pf_o.event_blocking = 0;
            else if (strcmp(optarg, "wait") == 0)
                pf_o.event_blocking = 1;
            else
                bad = 1;
            break;
        case O_SIZES:
            bad = pf_parse_sizes(optarg) < 0;
            break;
        case O_WINDOW:
            bad = pf_parse_size(optarg, &pf_o.window) < 0 || pf_o.window < 64;
            break;
        case O_BWTIME:
            pf_o.bw_seconds = strtod(optarg, NULL);
            bad = !(pf_o.bw_seconds > 0 && pf_o.bw_seconds <= 60);
            bw_set = 1;
            break;
        case O_MEM:
            if (strcmp(optarg, "memfd") == 0)
                pf_o.mem_malloc = 0;
            else if (strcmp(optarg, "malloc") == 0)
                pf_o.mem_malloc = 1;
            else
                bad = 1;
            break;
        case O_MODE:
            if (strcasecmp(optarg, "rm") == 0)
                pf_o.trans_mode = URMA_TM_RM;
            else if (strcasecmp(optarg, "rc") == 0)
                pf_o.trans_mode = URMA_TM_RC;
            else
                bad = 1;
            break;
        case O_TP:
            if (strcasecmp(optarg, "rtp") == 0)
                pf_o.tp_type = URMA_RTP;
            else if (strcasecmp(optarg, "ctp") == 0)
                pf_o.tp_type = URMA_CTP;
            else
                bad = 1;
            break;
        case O_TOKEN:
            if (strcmp(optarg, "plain") == 0)
                pf_o.token_policy = URMA_TOKEN_PLAIN_TEXT;
            else if (strcmp(optarg, "none") == 0)
                pf_o.token_policy = URMA_TOKEN_NONE;
            else
                bad = 1;
            break;
        case O_CPUS:
            bad = sscanf(optarg, "%d,%d", &pf_o.cpu_client, &pf_o.cpu_server) != 2 ||
                  pf_o.cpu_client < 0 || pf_o.cpu_server < 0;
            break;
        case O_NOPIN:
            pf_o.no_pin = 1;
            break;
        case O_NOLAT:
            pf_o.skip_lat = 1;
            break;
        case O_LAT:
            if (strcmp(optarg, "poll") == 0)
                pf_o.skip_event = 1;
            else if (strcmp(optarg, "event") == 0)
                pf_o.skip_poll = 1;
            else if (strcmp(optarg, "both") != 0)
                bad = 1;
            break;
        case O_NOBW:
            pf_o.skip_bw = 1;
            break;
        case O_QUICK:
            quick = 1;
            break;
        case O_TIMEOUT:
            pf_o.timeout = atoi(optarg);
            bad = pf_o.timeout < 0;
            break;
        case O_JSON:
            pf_o.json = 1;
            break;
        case O_SERVER:
            pf_o.role = PF_ROLE_SERVER;
            break;
        case O_CLIENT:
            pf_o.role = PF_ROLE_CLIENT;
            pf_o.client_target = optarg;
            break;
        case O_SOCK:
            pf_o.sock = optarg;
            break;
        case 'h':
            pf_usage(stdout);
            exit(0);
        default:
            return -EINVAL;
        }
        if (bad) {
            fprintf(stderr, "softub_perf: bad value for --%s: %s\n", opts[c - O_LIB].name, optarg);
            return -EINVAL;
        }
    }
    if (optind < argc) return -EINVAL;
    if (quick) {
        if (!iters_set) pf_o.iters = 1000;
        if (!warm_set) pf_o.warmup = 100;
        if (!bw_set) pf_o.bw_seconds = 0.05;
    }
    if (pf_o.no_pin == 0 && sysconf(_SC_NPROCESSORS_ONLN) < 2) pf_o.no_pin = 1;
    return 0;
}

static int pf_listen(char *name, size_t namelen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t sl;
    if (pf_o.sock) {
        if (strlen(pf_o.sock) >= sizeof(sa.sun_path)) return -ENAMETOOLONG;
        strcpy(sa.sun_path, pf_o.sock);
        unlink(pf_o.sock);
        sl = sizeof(sa);
        snprintf(name, namelen, "%s", pf_o.sock);
    } else {
        /* Abstract name: nothing to clean up, found from the pid alone. */
        int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "softub_perf.%d", (int)getpid());
        sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
        snprintf(name, namelen, "@softub_perf.%d", (int)getpid());
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (bind(fd, (struct sockaddr *)&sa, sl) < 0 || listen(fd, 1) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

static int pf_connect(const char *target)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t sl;
    char *end;
    long pid = strtol(target, &end, 10);
    if (*target && !*end && pid > 0) {
        int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "softub_perf.%ld", pid);
        sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    } else {
        if (strlen(target) >= sizeof(sa.sun_path)) return -ENAMETOOLONG;
        strcpy(sa.sun_path, target);
        sl = sizeof(sa);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

int main(int argc, char **argv)
{
    char cmdline[1024] = "";
    size_t used = 0;
    for (int i = 0; i < argc && used < sizeof(cmdline); i++)
        used +=
            (size_t)snprintf(cmdline + used, sizeof(cmdline) - used, "%s%s", i ? " " : "", argv[i]);

    if (pf_parse(argc, argv) < 0) {
        pf_usage(stderr);
        return 2;
    }
    signal(SIGALRM, pf_on_alarm);
    signal(SIGPIPE, SIG_IGN);
    if (pf_o.timeout) alarm((unsigned)pf_o.timeout);
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (pf_o.role == PF_ROLE_SERVER) {
        char name[160];
        int lfd = pf_listen(name, sizeof(name));
        if (lfd < 0) {
            fprintf(stderr, "softub_perf: listen: %s\n", strerror(-lfd));
            return 1;
        }
        pf_pin(pf_o.cpu_server);
        if (pf_o.sock)
            printf("softub_perf server: pid %d, socket %s; run: softub_perf --client=%s\n",
                   (int)getpid(), name, pf_o.sock);
        else
            printf("softub_perf server: pid %d, socket %s; run: softub_perf --client=%d\n",
                   (int)getpid(), name, (int)getpid());
        int fd;
        do {
            fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        } while (fd < 0 && errno == EINTR);
        close(lfd);
        if (pf_o.sock) unlink(pf_o.sock);
        if (fd < 0) {
            fprintf(stderr, "softub_perf: accept: %s\n", strerror(errno));
            return 1;
        }
        /* The client's timeout governs the run from here. */
        alarm(pf_o.timeout ? (unsigned)pf_o.timeout + 30 : 0);
        int rc = pf_server(fd);
        close(fd);
        return rc;
    }
    if (pf_o.role == PF_ROLE_CLIENT) {
        int fd = pf_connect(pf_o.client_target);
        if (fd < 0) {
            fprintf(stderr, "softub_perf: connect to %s: %s\n", pf_o.client_target, strerror(-fd));
            return 1;
        }
        pf_pin(pf_o.cpu_client);
        int rc = pf_client(fd, cmdline);
        close(fd);
        return rc;
    }

    /* Fork before anything touches URMA: the API does not support fork
     * with URMA resources (URMA-API.md §4.14). */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        perror("socketpair");
        return 1;
    }
    fflush(NULL);
    signal(SIGCHLD, pf_on_child);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        signal(SIGCHLD, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(1);
        close(sv[0]);
        pf_pin(pf_o.cpu_server);
        int rc = pf_server(sv[1]);
        _exit(rc);
    }
    pf_child = pid;
    close(sv[1]);
    pf_pin(pf_o.cpu_client);
    int rc = pf_client(sv[0], cmdline);
    close(sv[0]);
    /* The server exits after QUIT; give it a moment, then make sure. */
    for (int i = 0; i < 500 && pf_child > 0; i++) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            pf_child = -1;
            if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && rc == 0) {
                fprintf(stderr, "softub_perf: server exited with status %d\n", status);
                rc = 1;
            }
            break;
        }
        usleep(10000);
    }
    if (pf_child > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return rc;
}
