/* conformance.h: harness of the softub conformance suite (ctest group `softub`).
 *
 * The suite is written against the liburma API only (facts: URMA-API.md; types:
 * src/urma/urma_api.h). It links no provider: the library is dlopen'ed
 * (RTLD_NOW | RTLD_LOCAL, URMA-API.md §1.1) from `--lib=PATH` or env SOFTUB_LIB
 * (ctest sets it to the built libsoftub.so), and every function is resolved into
 * one table `cf` built from urma_api.h's URMA_API_* X-macro lists; tests call
 * `cf.urma_xxx(...)`. A missing MINIMAL symbol makes the load fail naming it.
 * To run on UB hardware: `softub_lifecycle --lib=/usr/lib64/liburma.so.0
 * [--dev=udma2]`. `--case=NAME` runs one case.
 *
 * Isolation: every case runs in a child process of its own (CF_RUN), forked
 * before any URMA call, in its own process group, with SOFTUB_FABRIC set to
 * "conf-<pid>" before the dlopen, so cases and parallel ctest processes never
 * share a fabric and a crash or a hang fails one case only (the parent kills
 * the group after CF_CASE_TIMEOUT_MS). The child's JT_* failures print as
 * usual; its exit status marks the case in the parent. Cross-process cases
 * fork their peer with cf_peer_fork() before the peer makes any URMA call
 * (fork with URMA resources is unsupported, §4.14) and exchange ids, tokens and
 * segment descriptions over a socketpair as urma_sample does (§4.4).
 *
 * Statuses the sheet marks [UNVERIFIED] are accepted from a documented set
 * (cf_plausible_remote_err), but the data checks around them are not relaxed:
 * a refused operation must not have moved a byte. */
#ifndef JET_TEST_SOFTUB_CONFORMANCE_H
#define JET_TEST_SOFTUB_CONFORMANCE_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "urma/urma_api.h"

#define CF_FN static __attribute__((unused))

#define CF_CASE_TIMEOUT_MS 25000 /* one case, all its processes */
#define CF_WAIT_MS         5000  /* something that must happen */
#define CF_QUIET_MS        150   /* window in which something must not happen */
#define CF_PATTERN_GARBAGE 0xEE

#define CF_FAILF(...)                                                                              \
    do {                                                                                           \
        char cf_fail_buf_[4096];                                                                   \
        snprintf(cf_fail_buf_, sizeof cf_fail_buf_, __VA_ARGS__);                                  \
        jt_fail(__FILE__, __LINE__, cf_fail_buf_);                                                 \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Function table                                                            */
/* ------------------------------------------------------------------------ */

typedef struct cf_api {
#define CF_API_FIELD(ret, name, params) ret(*name) params;
    URMA_API_FUNCS(CF_API_FIELD)
#undef CF_API_FIELD
} cf_api_t;

static cf_api_t cf;

enum { CF_GRP_MINIMAL, CF_GRP_OPTIONAL, CF_GRP_OTHER, CF_GRP_MASTER };

typedef struct cf_sym {
    const char *name;
    size_t offset; /* of the slot in cf_api_t */
    int group;
} cf_sym_t;

#define CF_SYM_MINIMAL(ret, name, params)  {#name, offsetof(cf_api_t, name), CF_GRP_MINIMAL},
#define CF_SYM_OPTIONAL(ret, name, params) {#name, offsetof(cf_api_t, name), CF_GRP_OPTIONAL},
#define CF_SYM_OTHER(ret, name, params)    {#name, offsetof(cf_api_t, name), CF_GRP_OTHER},
#define CF_SYM_MASTER(ret, name, params)   {#name, offsetof(cf_api_t, name), CF_GRP_MASTER},
static const cf_sym_t cf_syms[] = {URMA_API_MINIMAL(CF_SYM_MINIMAL) URMA_API_OPTIONAL(
    CF_SYM_OPTIONAL) URMA_API_OTHER(CF_SYM_OTHER) URMA_API_MASTER(CF_SYM_MASTER)};

static const char *cf_lib_path;
static const char *cf_dev_name; /* --dev=NAME; default: the first device listed */
static const char *cf_case_only;
static void *cf_handle;
static char cf_missing[2048]; /* names of unresolved symbols, space separated */

/* The case running now, so that a SIGTERM/SIGINT from ctest or the user
 * still ends its process group and removes its fabric. */
static volatile pid_t cf_case_pid;
static char cf_case_shm[128];

static void cf_on_signal(int sig)
{
    pid_t pid = cf_case_pid;
    if (pid > 0) {
        kill(-pid, SIGKILL);
        unlink(cf_case_shm);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Parses the suite's options. Unknown options are an error (exit 2). */
CF_FN void cf_main(int argc, char **argv)
{
    cf_lib_path = getenv("SOFTUB_LIB");
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--lib=", 6) == 0)
            cf_lib_path = argv[i] + 6;
        else if (strncmp(argv[i], "--dev=", 6) == 0)
            cf_dev_name = argv[i] + 6;
        else if (strncmp(argv[i], "--case=", 7) == 0)
            cf_case_only = argv[i] + 7;
        else {
            fprintf(stderr, "usage: %s [--lib=PATH] [--dev=NAME] [--case=NAME]\n", argv[0]);
            exit(2);
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, cf_on_signal);
    signal(SIGINT, cf_on_signal);
    signal(SIGHUP, cf_on_signal);
}

/* dlopen + resolve every function. 0, or -1 after a failure naming the cause.
 * Symbols outside MINIMAL that are missing are listed in cf_missing; the cases
 * that need one fail through CF_NEED. */
CF_FN int cf_load(void)
{
    if (cf_handle) return 0;
    if (!cf_lib_path || !*cf_lib_path) {
        CF_FAILF("no library: set SOFTUB_LIB or pass --lib=PATH");
        return -1;
    }
    cf_handle = dlopen(cf_lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!cf_handle) {
        CF_FAILF("dlopen(%s): %s", cf_lib_path, dlerror());
        return -1;
    }
    int bad = 0;
    cf_missing[0] = 0;
    for (size_t i = 0; i < sizeof cf_syms / sizeof cf_syms[0]; i++) {
        void *p = dlsym(cf_handle, cf_syms[i].name);
        memcpy((char *)&cf + cf_syms[i].offset, &p, sizeof p);
        if (p) continue;
        size_t used = strlen(cf_missing);
        snprintf(cf_missing + used, sizeof cf_missing - used, "%s ", cf_syms[i].name);
        if (cf_syms[i].group == CF_GRP_MINIMAL) {
            CF_FAILF("minimal symbol %s missing from %s", cf_syms[i].name, cf_lib_path);
            bad = 1;
        }
    }
    return bad ? -1 : 0;
}

/* Fails the case (and returns from it) when a non-minimal function is missing. */
#define CF_NEED(name)                                                                              \
    do {                                                                                           \
        if (!cf.name) {                                                                            \
            CF_FAILF("symbol " #name " missing from %s", cf_lib_path);                             \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Per-case process                                                          */
/* ------------------------------------------------------------------------ */

static void (*cf_case_fn)(void);

CF_FN uint64_t cf_now_ms(void)
{
    return jt_now_us() / 1000u;
}

CF_FN void cf_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

CF_FN void cf_sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The directory object softub creates for a fabric (design: /dev/shm/softub.<uid>.<fabric>).
 * Removed after each case so that runs leave nothing behind; absent on hardware. */
CF_FN void cf_fabric_unlink(pid_t owner)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/softub.%u.conf-%d", (unsigned)getuid(), (int)owner);
    unlink(path);
}

CF_FN void cf_case_child(void)
{
    setpgid(0, 0);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    char fabric[64];
    snprintf(fabric, sizeof fabric, "conf-%d", (int)getpid());
    setenv("SOFTUB_FABRIC", fabric, 1);
    jt_case_failed = 0;
    cf_case_fn();
    fflush(stdout);
    fflush(stderr);
    /* exit(), not _exit(): the sanitizer build checks leaks here. */
    exit(jt_case_failed ? 1 : 0);
}

CF_FN void cf_trampoline(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        CF_FAILF("fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) cf_case_child();
    setpgid(pid, pid); /* also done by the child: whichever runs first */
    snprintf(cf_case_shm, sizeof cf_case_shm, "/dev/shm/softub.%u.conf-%d", (unsigned)getuid(),
             (int)pid);
    cf_case_pid = pid;
    uint64_t deadline = cf_now_ms() + CF_CASE_TIMEOUT_MS;
    int st = 0;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG)) == 0 && cf_now_ms() < deadline)
        cf_sleep_ms(2);
    if (r == 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, &st, 0);
        CF_FAILF("case timed out after %d ms (process group killed)", CF_CASE_TIMEOUT_MS);
    } else if (r < 0) {
        CF_FAILF("waitpid: %s", strerror(errno));
    } else if (WIFSIGNALED(st)) {
        CF_FAILF("case process killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    } else if (WIFEXITED(st) && WEXITSTATUS(st) != 0) {
        CF_FAILF("case process exited with status %d", WEXITSTATUS(st));
    }
    kill(-pid, SIGKILL); /* peers a failed case left behind; ESRCH when none */
    cf_fabric_unlink(pid);
    cf_case_pid = 0;
}

CF_FN void cf_run(const char *name, void (*fn)(void))
{
    if (cf_case_only && strcmp(cf_case_only, name) != 0) return;
    cf_case_fn = fn;
    jt_run(name, cf_trampoline);
}

#define CF_RUN(fn) cf_run(#fn, fn)

/* ------------------------------------------------------------------------ */
/* Peer process and message exchange (urma_sample style, §4.4)               */
/* ------------------------------------------------------------------------ */

typedef struct cf_peer {
    pid_t pid;
    int fd; /* parent's end of the socketpair */
} cf_peer_t;

typedef int (*cf_peer_fn)(int fd, void *arg);

/* Forks a peer that runs fn(fd, arg) and exits 0 only if fn returned 0 and no
 * check failed in it. Call it before this process makes any URMA call. */
CF_FN int cf_peer_fork(cf_peer_t *p, cf_peer_fn fn, void *arg)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        CF_FAILF("socketpair: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        CF_FAILF("fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        jt_case_failed = 0;
        int rc = fn(sv[1], arg);
        fflush(stdout);
        fflush(stderr);
        exit(rc == 0 && !jt_case_failed ? 0 : 1);
    }
    close(sv[1]);
    p->pid = pid;
    p->fd = sv[0];
    return 0;
}

/* Waits for the peer (at most timeout_ms, then SIGKILL); returns its exit
 * status, 128+signal, or -1. */
CF_FN int cf_peer_wait(cf_peer_t *p, int timeout_ms)
{
    if (p->pid <= 0) return -1;
    uint64_t deadline = cf_now_ms() + (uint64_t)timeout_ms;
    int st = 0;
    pid_t r;
    while ((r = waitpid(p->pid, &st, WNOHANG)) == 0 && cf_now_ms() < deadline)
        cf_sleep_ms(2);
    if (r == 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &st, 0);
        CF_FAILF("peer %d did not exit within %d ms", (int)p->pid, timeout_ms);
    }
    if (p->fd >= 0) close(p->fd);
    p->fd = -1;
    p->pid = 0;
    if (r < 0) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

typedef struct cf_msg_hdr {
    uint32_t tag;
    uint32_t len;
} cf_msg_hdr_t;

CF_FN int cf_io_full(int fd, void *buf, size_t len, bool wr, int timeout_ms)
{
    uint64_t deadline = cf_now_ms() + (uint64_t)timeout_ms;
    char *p = buf;
    while (len > 0) {
        struct pollfd pfd = {fd, wr ? POLLOUT : POLLIN, 0};
        int left = (int)(deadline - cf_now_ms());
        if ((int64_t)(deadline - cf_now_ms()) <= 0) return -ETIMEDOUT;
        int n = poll(&pfd, 1, left);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n == 0 ? -ETIMEDOUT : -errno;
        ssize_t k = wr ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -errno;
        if (k == 0) return -EPIPE;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

/* Sends one tagged message. */
CF_FN int cf_msg_send(int fd, uint32_t tag, const void *buf, size_t len)
{
    cf_msg_hdr_t h = {tag, (uint32_t)len};
    int rc = cf_io_full(fd, &h, sizeof h, true, CF_WAIT_MS);
    if (rc == 0 && len) rc = cf_io_full(fd, (void *)buf, len, true, CF_WAIT_MS);
    if (rc) CF_FAILF("send of message 0x%x failed: %s", tag, strerror(-rc));
    return rc;
}

/* Receives the next message, which must carry `tag` and exactly `len` bytes. */
CF_FN int cf_msg_recv(int fd, uint32_t tag, void *buf, size_t len, int timeout_ms)
{
    cf_msg_hdr_t h;
    int rc = cf_io_full(fd, &h, sizeof h, false, timeout_ms);
    if (rc) {
        CF_FAILF("waiting for message 0x%x: %s", tag, strerror(-rc));
        return rc;
    }
    if (h.tag != tag || h.len != len) {
        CF_FAILF("expected message 0x%x (%zu bytes), got 0x%x (%u bytes)", tag, len, h.tag, h.len);
        return -EPROTO;
    }
    if (len) rc = cf_io_full(fd, buf, len, false, timeout_ms);
    if (rc) CF_FAILF("reading message 0x%x: %s", tag, strerror(-rc));
    return rc;
}

/* A bare synchronisation point: both sides call it with the same tag. */
CF_FN int cf_sync(int fd, uint32_t tag)
{
    if (cf_msg_send(fd, tag, NULL, 0)) return -1;
    return cf_msg_recv(fd, tag, NULL, 0, CF_CASE_TIMEOUT_MS) ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Device and context                                                        */
/* ------------------------------------------------------------------------ */

typedef struct cf_dev {
    urma_device_t *dev;
    union {
        urma_device_attr_t attr;
        uint8_t raw[4096]; /* URMA-API.md §6 hazard 1 */
    } u;
    urma_eid_info_t eid; /* the first EID */
} cf_dev_t;

#define CF_CAP(d) ((d)->u.attr.dev_cap)

/* Finds the device (--dev or the first listed), queries it and its EIDs.
 * urma_init must have been called. */
CF_FN int cf_dev_find(cf_dev_t *d)
{
    memset(d, 0, sizeof *d);
    int n = 0;
    urma_device_t **list = cf.urma_get_device_list(&n);
    if (!list || n <= 0) {
        CF_FAILF("urma_get_device_list: NULL/%d (errno %d)", n, errno);
        return -1;
    }
    for (int i = 0; i < n && !d->dev; i++)
        if (!cf_dev_name || strcmp(list[i]->name, cf_dev_name) == 0) d->dev = list[i];
    cf.urma_free_device_list(list);
    if (!d->dev) {
        CF_FAILF("device %s not listed", cf_dev_name);
        return -1;
    }
    int rc = cf.urma_query_device(d->dev, &d->u.attr);
    if (rc != URMA_SUCCESS) {
        CF_FAILF("urma_query_device: %d", rc);
        return -1;
    }
    uint32_t cnt = 0;
    urma_eid_info_t *eids = cf.urma_get_eid_list(d->dev, &cnt);
    if (!eids || cnt == 0) {
        CF_FAILF("urma_get_eid_list: %p/%u (errno %d)", (void *)eids, cnt, errno);
        if (eids) cf.urma_free_eid_list(eids);
        return -1;
    }
    d->eid = eids[0];
    cf.urma_free_eid_list(eids);
    return 0;
}

/* load + init + device. */
CF_FN int cf_open(cf_dev_t *d)
{
    if (cf_load()) return -1;
    urma_init_attr_t attr = {0, 0};
    int rc = cf.urma_init(&attr);
    if (rc != URMA_SUCCESS) {
        CF_FAILF("urma_init: %d", rc);
        return -1;
    }
    return cf_dev_find(d);
}

CF_FN urma_context_t *cf_ctx(cf_dev_t *d)
{
    urma_context_t *ctx = cf.urma_create_context(d->dev, d->eid.eid_index);
    if (!ctx) CF_FAILF("urma_create_context: NULL (errno %d)", errno);
    return ctx;
}

CF_FN void cf_ctx_delete(urma_context_t *ctx)
{
    if (!ctx) return;
    int rc = cf.urma_delete_context(ctx);
    if (rc != URMA_SUCCESS) CF_FAILF("urma_delete_context: %d", rc);
}

CF_FN void cf_close(void)
{
    int rc = cf.urma_uninit();
    if (rc != URMA_SUCCESS) CF_FAILF("urma_uninit: %d", rc);
}

/* ------------------------------------------------------------------------ */
/* Queues and endpoints                                                      */
/* ------------------------------------------------------------------------ */

/* liburma master's order_type conversion of DEF_ORDER (§4.2). */
CF_FN uint32_t cf_default_order(urma_transport_mode_t mode)
{
    return mode == URMA_TM_RM ? URMA_OI : mode == URMA_TM_RC ? URMA_OL : URMA_NO;
}

/* A portable tp_type for a mode (§4.2 "portable choices"). */
CF_FN urma_tp_type_t cf_default_tp(urma_transport_mode_t mode)
{
    return mode == URMA_TM_UM ? URMA_UTP : URMA_RTP;
}

CF_FN const char *cf_mode_name(urma_transport_mode_t mode)
{
    return mode == URMA_TM_RM ? "RM" : mode == URMA_TM_RC ? "RC" : mode == URMA_TM_UM ? "UM" : "?";
}

CF_FN urma_jfc_t *cf_jfc(urma_context_t *ctx, uint32_t depth, urma_jfce_t *jfce)
{
    urma_jfc_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = depth;
    cfg.jfce = jfce;
    urma_jfc_t *jfc = cf.urma_create_jfc(ctx, &cfg);
    if (!jfc) CF_FAILF("urma_create_jfc(depth %u): NULL (errno %d)", depth, errno);
    return jfc;
}

CF_FN void cf_jfr_cfg(urma_jfr_cfg_t *cfg, urma_jfc_t *jfc, urma_transport_mode_t mode,
                      uint32_t depth, uint32_t token)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->depth = depth;
    cfg->flag.bs.token_policy = URMA_TOKEN_PLAIN_TEXT;
    cfg->trans_mode = mode;
    cfg->max_sge = 4;
    cfg->min_rnr_timer = URMA_TYPICAL_MIN_RNR_TIMER;
    cfg->jfc = jfc;
    cfg->token_value.token = token;
}

CF_FN void cf_jfs_cfg(urma_jfs_cfg_t *cfg, urma_jfc_t *jfc, urma_transport_mode_t mode,
                      uint32_t depth)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->depth = depth;
    cfg->trans_mode = mode;
    cfg->priority = 0;
    cfg->max_sge = 4;
    cfg->max_rsge = 1;
    cfg->max_inline_data = 0;
    cfg->rnr_retry = URMA_TYPICAL_RNR_RETRY;
    cfg->err_timeout = URMA_TYPICAL_ERR_TIMEOUT;
    cfg->jfc = jfc;
}

CF_FN void cf_jetty_cfg(urma_jetty_cfg_t *cfg, urma_jfc_t *jfc, urma_jfr_t *jfr,
                        urma_transport_mode_t mode, uint32_t depth)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->flag.bs.share_jfr = URMA_SHARE_JFR;
    cf_jfs_cfg(&cfg->jfs_cfg, jfc, mode, depth);
    cfg->shared.jfr = jfr;
}

typedef struct cf_ep_opts {
    urma_transport_mode_t mode;
    uint32_t jfc_depth, jfs_depth, jfr_depth;
    uint8_t rnr_retry;
    uint8_t min_rnr_timer;
    bool jfce;           /* give the JFC an event channel */
    uint32_t jfc_flag;   /* urma_jfc_flag_t value */
    uint32_t jfr_policy; /* JFR token policy */
    uint32_t jfr_token;  /* JFR token value */
    uint32_t order;      /* jfs order_type asked for (0 = DEF) */
} cf_ep_opts_t;

CF_FN cf_ep_opts_t cf_ep_defaults(urma_transport_mode_t mode)
{
    cf_ep_opts_t o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.jfc_depth = 1024;
    o.jfs_depth = 128;
    o.jfr_depth = 128;
    o.rnr_retry = URMA_TYPICAL_RNR_RETRY;
    o.min_rnr_timer = URMA_TYPICAL_MIN_RNR_TIMER;
    o.jfr_policy = URMA_TOKEN_PLAIN_TEXT;
    o.jfr_token = 0x5eed0000u | (uint32_t)mode;
    return o;
}

/* One jetty with its own JFC (used for send and receive completions), its
 * JFR and optionally a JFCE. */
typedef struct cf_ep {
    urma_context_t *ctx;
    urma_jfce_t *jfce;
    urma_jfc_t *jfc;
    urma_jfr_t *jfr;
    urma_jetty_t *jetty;
    cf_ep_opts_t o;
} cf_ep_t;

CF_FN int cf_ep_open(cf_ep_t *ep, urma_context_t *ctx, const cf_ep_opts_t *o)
{
    memset(ep, 0, sizeof *ep);
    ep->ctx = ctx;
    ep->o = *o;
    if (o->jfce) {
        ep->jfce = cf.urma_create_jfce(ctx);
        if (!ep->jfce) {
            CF_FAILF("urma_create_jfce: NULL (errno %d)", errno);
            return -1;
        }
    }
    urma_jfc_cfg_t jc;
    memset(&jc, 0, sizeof jc);
    jc.depth = o->jfc_depth;
    jc.flag.value = o->jfc_flag;
    jc.jfce = ep->jfce;
    ep->jfc = cf.urma_create_jfc(ctx, &jc);
    if (!ep->jfc) {
        CF_FAILF("urma_create_jfc: NULL (errno %d)", errno);
        return -1;
    }
    urma_jfr_cfg_t rc;
    cf_jfr_cfg(&rc, ep->jfc, o->mode, o->jfr_depth, o->jfr_token);
    rc.flag.bs.token_policy = o->jfr_policy;
    rc.min_rnr_timer = o->min_rnr_timer;
    ep->jfr = cf.urma_create_jfr(ctx, &rc);
    if (!ep->jfr) {
        CF_FAILF("urma_create_jfr(%s): NULL (errno %d)", cf_mode_name(o->mode), errno);
        return -1;
    }
    urma_jetty_cfg_t jcfg;
    cf_jetty_cfg(&jcfg, ep->jfc, ep->jfr, o->mode, o->jfs_depth);
    jcfg.jfs_cfg.rnr_retry = o->rnr_retry;
    jcfg.jfs_cfg.flag.bs.order_type = o->order;
    ep->jetty = cf.urma_create_jetty(ctx, &jcfg);
    if (!ep->jetty) {
        CF_FAILF("urma_create_jetty(%s): NULL (errno %d)", cf_mode_name(o->mode), errno);
        return -1;
    }
    return 0;
}

CF_FN void cf_ep_close(cf_ep_t *ep)
{
    int rc;
    if (ep->jetty && (rc = cf.urma_delete_jetty(ep->jetty)) != 0)
        CF_FAILF("urma_delete_jetty: %d", rc);
    if (ep->jfr && (rc = cf.urma_delete_jfr(ep->jfr)) != 0) CF_FAILF("urma_delete_jfr: %d", rc);
    if (ep->jfc && (rc = cf.urma_delete_jfc(ep->jfc)) != 0) CF_FAILF("urma_delete_jfc: %d", rc);
    if (ep->jfce && (rc = cf.urma_delete_jfce(ep->jfce)) != 0) CF_FAILF("urma_delete_jfce: %d", rc);
    memset(ep, 0, sizeof *ep);
}

/* Moves a jetty to ERROR and polls until the FLUSH_ERR_DONE CR (or CF_WAIT_MS):
 * the teardown order of §4.13 for a jetty that may have WRs outstanding. */
CF_FN void cf_ep_flush(cf_ep_t *ep)
{
    urma_jetty_attr_t a = {JETTY_STATE, 0, URMA_JETTY_STATE_ERROR};
    int rc = cf.urma_modify_jetty(ep->jetty, &a);
    if (rc != 0) {
        CF_FAILF("urma_modify_jetty(ERROR): %d", rc);
        return;
    }
    uint64_t deadline = cf_now_ms() + CF_WAIT_MS;
    urma_cr_t cr;
    while (cf_now_ms() < deadline) {
        int n = cf.urma_poll_jfc(ep->jfc, 1, &cr);
        if (n < 0) break;
        if (n == 0) {
            cf_sleep_us(200);
            continue;
        }
        if (cr.status == URMA_CR_WR_FLUSH_ERR_DONE) return;
    }
    CF_FAILF("no FLUSH_ERR_DONE CR within %d ms after modify_jetty(ERROR)", CF_WAIT_MS);
}

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */
/* ------------------------------------------------------------------------ */

enum { CF_MEM_MEMALIGN, CF_MEM_MEMFD };

typedef struct cf_mem {
    uint8_t *buf;
    size_t len;
    int kind;
    int memfd;
    urma_target_seg_t *tseg;
    uint32_t token;
} cf_mem_t;

CF_FN int cf_mem_alloc(cf_mem_t *m, size_t len, int kind)
{
    memset(m, 0, sizeof *m);
    m->len = len;
    m->kind = kind;
    m->memfd = -1;
    if (kind == CF_MEM_MEMFD) {
        m->memfd = memfd_create("cf-mem", MFD_CLOEXEC);
        if (m->memfd < 0 || ftruncate(m->memfd, (off_t)len) != 0) {
            CF_FAILF("memfd: %s", strerror(errno));
            return -1;
        }
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, m->memfd, 0);
        if (p == MAP_FAILED) {
            CF_FAILF("mmap memfd: %s", strerror(errno));
            return -1;
        }
        m->buf = p;
    } else {
        void *p = NULL;
        if (posix_memalign(&p, 4096, len) != 0) {
            CF_FAILF("posix_memalign(%zu) failed", len);
            return -1;
        }
        m->buf = p;
    }
    memset(m->buf, 0, len);
    return 0;
}

CF_FN int cf_mem_register(cf_mem_t *m, urma_context_t *ctx, uint32_t access, uint32_t policy,
                          uint32_t token)
{
    urma_seg_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.va = (uint64_t)(uintptr_t)m->buf;
    cfg.len = m->len;
    cfg.token_value.token = token;
    cfg.flag.bs.token_policy = policy;
    cfg.flag.bs.cacheable = URMA_NON_CACHEABLE;
    cfg.flag.bs.access = access;
    m->token = token;
    m->tseg = cf.urma_register_seg(ctx, &cfg);
    if (!m->tseg) {
        CF_FAILF("urma_register_seg(%zu bytes, access 0x%x): NULL (errno %d)", m->len, access,
                 errno);
        return -1;
    }
    return 0;
}

CF_FN void cf_mem_free(cf_mem_t *m)
{
    if (m->tseg) {
        int rc = cf.urma_unregister_seg(m->tseg);
        if (rc != 0) CF_FAILF("urma_unregister_seg: %d", rc);
    }
    if (m->buf) {
        if (m->kind == CF_MEM_MEMFD)
            munmap(m->buf, m->len);
        else
            free(m->buf);
    }
    if (m->memfd >= 0) close(m->memfd);
    memset(m, 0, sizeof *m);
    m->memfd = -1;
}

#define CF_ACCESS_ALL (URMA_ACCESS_READ | URMA_ACCESS_WRITE | URMA_ACCESS_ATOMIC)

/* ------------------------------------------------------------------------ */
/* Import                                                                    */
/* ------------------------------------------------------------------------ */

CF_FN urma_target_jetty_t *cf_import_jetty_ex(urma_context_t *ctx, const urma_jetty_id_t *id,
                                              urma_transport_mode_t mode, uint32_t order,
                                              urma_tp_type_t tp, uint32_t policy, uint32_t token)
{
    urma_rjetty_t rj;
    memset(&rj, 0, sizeof rj);
    rj.jetty_id = *id;
    rj.trans_mode = mode;
    rj.type = URMA_JETTY;
    rj.flag.bs.token_policy = policy;
    rj.flag.bs.order_type = order;
    rj.tp_type = tp;
    urma_token_t tok = {token};
    return cf.urma_import_jetty(ctx, &rj, &tok);
}

CF_FN urma_target_jetty_t *cf_import_jetty(urma_context_t *ctx, const urma_jetty_id_t *id,
                                           urma_transport_mode_t mode, uint32_t policy,
                                           uint32_t token)
{
    urma_target_jetty_t *tj =
        cf_import_jetty_ex(ctx, id, mode, URMA_DEF_ORDER, cf_default_tp(mode), policy, token);
    if (!tj)
        CF_FAILF("urma_import_jetty(%s id %u): NULL (errno %d)", cf_mode_name(mode), id->id, errno);
    return tj;
}

CF_FN urma_target_seg_t *cf_import_seg(urma_context_t *ctx, const urma_seg_t *seg, uint32_t token,
                                       uint32_t access)
{
    urma_seg_t s = *seg;
    urma_token_t tok = {token};
    urma_import_seg_flag_t f;
    f.value = 0;
    f.bs.cacheable = URMA_NON_CACHEABLE;
    f.bs.access = access;
    f.bs.mapping = URMA_SEG_NOMAP;
    return cf.urma_import_seg(ctx, &s, &tok, 0, f);
}

/* ------------------------------------------------------------------------ */
/* Work requests                                                             */
/* ------------------------------------------------------------------------ */

CF_FN void cf_sge(urma_sge_t *s, const void *addr, uint32_t len, urma_target_seg_t *tseg)
{
    memset(s, 0, sizeof *s);
    s->addr = (uint64_t)(uintptr_t)addr;
    s->len = len;
    s->tseg = tseg;
}

/* Remote SGE: address given as a VA in the peer's segment. */
CF_FN void cf_rsge(urma_sge_t *s, uint64_t va, uint32_t len, urma_target_seg_t *rseg)
{
    memset(s, 0, sizeof *s);
    s->addr = va;
    s->len = len;
    s->tseg = rseg;
}

/* The VA of a segment description (packed field, §6 hazard 12). */
CF_FN uint64_t cf_seg_va(const urma_target_seg_t *t)
{
    uint64_t va;
    memcpy(&va, (const char *)&t->seg.ubva + offsetof(urma_ubva_t, va), sizeof va);
    return va;
}

/* The EID of a segment description (packed struct). */
CF_FN urma_eid_t cf_seg_eid(const urma_target_seg_t *t)
{
    urma_eid_t e;
    memcpy(&e, (const char *)&t->seg.ubva + offsetof(urma_ubva_t, eid), sizeof e);
    return e;
}

CF_FN urma_jfs_wr_flag_t cf_wr_flag(bool complete, bool solicited)
{
    urma_jfs_wr_flag_t f;
    f.value = 0;
    f.bs.complete_enable = complete;
    f.bs.solicited_enable = solicited;
    return f;
}

CF_FN void cf_wr_send(urma_jfs_wr_t *wr, urma_opcode_t opc, urma_target_jetty_t *tj,
                      urma_sge_t *sge, uint32_t nsge, uint64_t imm, uint64_t user_ctx)
{
    memset(wr, 0, sizeof *wr);
    wr->opcode = opc;
    wr->flag = cf_wr_flag(true, false);
    wr->tjetty = tj;
    wr->user_ctx = user_ctx;
    wr->send.src.sge = sge;
    wr->send.src.num_sge = nsge;
    wr->send.imm_data = imm;
}

/* WRITE / WRITE_IMM: local src SGEs, one remote dst SGE. READ: remote src, local dst. */
CF_FN void cf_wr_rw(urma_jfs_wr_t *wr, urma_opcode_t opc, urma_target_jetty_t *tj, urma_sge_t *src,
                    uint32_t nsrc, urma_sge_t *dst, uint32_t ndst, uint64_t notify,
                    uint64_t user_ctx)
{
    memset(wr, 0, sizeof *wr);
    wr->opcode = opc;
    wr->flag = cf_wr_flag(true, false);
    wr->tjetty = tj;
    wr->user_ctx = user_ctx;
    wr->rw.src.sge = src;
    wr->rw.src.num_sge = nsrc;
    wr->rw.dst.sge = dst;
    wr->rw.dst.num_sge = ndst;
    wr->rw.notify_data = notify;
}

CF_FN void cf_wr_cas(urma_jfs_wr_t *wr, urma_target_jetty_t *tj, urma_sge_t *remote,
                     urma_sge_t *local, uint64_t cmp, uint64_t swap, uint64_t user_ctx)
{
    memset(wr, 0, sizeof *wr);
    wr->opcode = URMA_OPC_CAS;
    wr->flag = cf_wr_flag(true, false);
    wr->tjetty = tj;
    wr->user_ctx = user_ctx;
    wr->cas.dst = remote;
    wr->cas.src = local;
    wr->cas.cmp_data = cmp;
    wr->cas.swap_data = swap;
}

CF_FN void cf_wr_faa(urma_jfs_wr_t *wr, urma_target_jetty_t *tj, urma_sge_t *remote,
                     urma_sge_t *local, uint64_t operand, uint64_t user_ctx)
{
    memset(wr, 0, sizeof *wr);
    wr->opcode = URMA_OPC_FADD;
    wr->flag = cf_wr_flag(true, false);
    wr->tjetty = tj;
    wr->user_ctx = user_ctx;
    wr->faa.dst = remote;
    wr->faa.src = local;
    wr->faa.operand = operand;
}

CF_FN int cf_post(urma_jetty_t *jetty, urma_jfs_wr_t *wr)
{
    urma_jfs_wr_t *bad = NULL;
    int rc = cf.urma_post_jetty_send_wr(jetty, wr, &bad);
    if (rc != 0) CF_FAILF("urma_post_jetty_send_wr(opcode 0x%x): %d", wr->opcode, rc);
    return rc;
}

/* Posts one receive WR of nsge SGEs to the jetty's JFR: its status (a
 * refusal is the caller's to judge). */
CF_FN int cf_try_post_recv(urma_jetty_t *jetty, urma_sge_t *sge, uint32_t nsge, uint64_t user_ctx)
{
    urma_jfr_wr_t wr;
    memset(&wr, 0, sizeof wr);
    wr.src.sge = sge;
    wr.src.num_sge = nsge;
    wr.user_ctx = user_ctx;
    urma_jfr_wr_t *bad = NULL;
    return cf.urma_post_jetty_recv_wr(jetty, &wr, &bad);
}

/* Posts one receive WR of nsge SGEs to the jetty's JFR; a refusal fails the case. */
CF_FN int cf_post_recv(urma_jetty_t *jetty, urma_sge_t *sge, uint32_t nsge, uint64_t user_ctx)
{
    int rc = cf_try_post_recv(jetty, sge, nsge, user_ctx);
    if (rc != 0) CF_FAILF("urma_post_jetty_recv_wr: %d", rc);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Completions                                                               */
/* ------------------------------------------------------------------------ */

/* Polls until n CRs are in cr[0..n) or timeout_ms passed; returns how many.
 * CRs are written one per poll call so untouched fields of the caller's
 * (pre-initialised) array stay as they were. */
CF_FN int cf_poll(urma_jfc_t *jfc, urma_cr_t *cr, int n, int timeout_ms)
{
    uint64_t deadline = cf_now_ms() + (uint64_t)timeout_ms;
    int got = 0;
    while (got < n) {
        int k = cf.urma_poll_jfc(jfc, 1, &cr[got]);
        if (k < 0) {
            CF_FAILF("urma_poll_jfc: %d", k);
            return got;
        }
        if (k > 1) {
            CF_FAILF("urma_poll_jfc(cr_cnt 1) returned %d", k);
            return got;
        }
        if (k == 1) {
            got++;
            continue;
        }
        if (cf_now_ms() >= deadline) break;
        cf_sleep_us(200);
    }
    return got;
}

/* Polls one CR and requires it to arrive. */
CF_FN int cf_poll1(urma_jfc_t *jfc, urma_cr_t *cr)
{
    memset(cr, 0, sizeof *cr);
    int n = cf_poll(jfc, cr, 1, CF_WAIT_MS);
    if (n != 1) CF_FAILF("no CR within %d ms", CF_WAIT_MS);
    return n == 1 ? 0 : -1;
}

/* How many CRs arrive in a window of ms (they are consumed). */
CF_FN int cf_quiet(urma_jfc_t *jfc, int ms)
{
    urma_cr_t cr[8];
    int total = 0;
    uint64_t deadline = cf_now_ms() + (uint64_t)ms;
    do {
        int k = cf.urma_poll_jfc(jfc, 8, cr);
        if (k < 0) return -1;
        total += k;
        if (k == 0) cf_sleep_us(500);
    } while (cf_now_ms() < deadline);
    return total;
}

/* Expects one CR with the given status and user_ctx. */
CF_FN int cf_expect_cr(urma_jfc_t *jfc, int status, uint64_t user_ctx, const char *what)
{
    urma_cr_t cr;
    if (cf_poll1(jfc, &cr)) {
        CF_FAILF("%s: no CR", what);
        return -1;
    }
    if ((int)cr.status != status || cr.user_ctx != user_ctx) {
        CF_FAILF("%s: CR status %d user_ctx 0x%llx, expected status %d user_ctx 0x%llx", what,
                 (int)cr.status, (unsigned long long)cr.user_ctx, status,
                 (unsigned long long)user_ctx);
        return -1;
    }
    return 0;
}

/* The error statuses URMA-API.md §4.8/§4.10/§7.2 name as candidates for a
 * remote access, token, range or length violation, whose exact value on
 * hardware is [UNVERIFIED]. */
CF_FN bool cf_plausible_remote_err(int st)
{
    return st == URMA_CR_REM_ACCESS_ABORT_ERR || st == URMA_CR_LOC_LEN_ERR ||
           st == URMA_CR_LOC_ACCESS_ERR || st == URMA_CR_REM_RESP_LEN_ERR ||
           st == URMA_CR_REM_UNSUPPORTED_REQ_ERR || st == URMA_CR_REM_OPERATION_ERR;
}

CF_FN bool cf_id_eq(const urma_jetty_id_t *a, const urma_jetty_id_t *b)
{
    return a->id == b->id && memcmp(&a->eid, &b->eid, sizeof a->eid) == 0;
}

CF_FN bool cf_eid_eq(const urma_eid_t *a, const urma_eid_t *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

CF_FN void cf_fill(void *buf, size_t len, uint32_t seed)
{
    uint8_t *p = buf;
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

/* Index of the first byte where buf differs from the cf_fill(seed) pattern, or -1. */
CF_FN long cf_check_fill(const void *buf, size_t len, uint32_t seed)
{
    const uint8_t *p = buf;
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if (p[i] != (uint8_t)x) return (long)i;
    }
    return -1;
}

/* Index of the first byte that is not `v`, or -1. */
CF_FN long cf_check_byte(const void *buf, size_t len, uint8_t v)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; i++)
        if (p[i] != v) return (long)i;
    return -1;
}

/* ------------------------------------------------------------------------ */
/* A side of a connection: context, endpoint, memory and the peer's imports  */
/* ------------------------------------------------------------------------ */

typedef struct cf_side {
    urma_context_t *ctx;
    bool own_ctx;
    cf_ep_t ep;
    cf_mem_t mem;            /* registered, READ|WRITE|ATOMIC, token mem.token */
    urma_target_jetty_t *tj; /* the peer's jetty */
    urma_target_seg_t *rseg; /* the peer's segment */
    bool bound;
} cf_side_t;

/* Posts one SEND-type WR (opc) of len bytes at buf, in s's registered
 * memory, to s's peer jetty: cf_post's status. */
CF_FN int cf_side_send(cf_side_t *s, const void *buf, uint32_t len, urma_opcode_t opc,
                       uint64_t imm, uint64_t user_ctx)
{
    urma_sge_t l;
    urma_jfs_wr_t wr;
    cf_sge(&l, buf, len, s->mem.tseg);
    cf_wr_send(&wr, opc, s->tj, &l, 1, imm, user_ctx);
    return cf_post(s->ep.jetty, &wr);
}

/* What a side sends its peer (§4.4): ids, tokens, the whole urma_seg_t. */
typedef struct cf_wire {
    urma_eid_t eid;
    uint32_t uasid;
    uint32_t mode;
    urma_jetty_id_t jetty_id;
    uint32_t jfr_policy;
    uint32_t jfr_token;
    urma_seg_t seg;
    uint32_t seg_token;
    uint64_t seg_va;
} cf_wire_t;

CF_FN int cf_side_open(cf_side_t *s, cf_dev_t *d, urma_context_t *ctx, const cf_ep_opts_t *o,
                       size_t mem_len, int mem_kind, uint32_t seg_token)
{
    memset(s, 0, sizeof *s);
    s->mem.memfd = -1;
    if (!ctx) {
        ctx = cf_ctx(d);
        if (!ctx) return -1;
        s->own_ctx = true;
    }
    s->ctx = ctx;
    if (cf_ep_open(&s->ep, ctx, o)) return -1;
    if (mem_len) {
        if (cf_mem_alloc(&s->mem, mem_len, mem_kind)) return -1;
        if (cf_mem_register(&s->mem, ctx, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, seg_token))
            return -1;
    }
    return 0;
}

CF_FN void cf_side_describe(const cf_side_t *s, cf_wire_t *w)
{
    memset(w, 0, sizeof *w);
    w->eid = s->ctx->eid;
    w->uasid = s->ctx->uasid;
    w->mode = s->ep.o.mode;
    w->jetty_id = s->ep.jetty->jetty_id;
    w->jfr_policy = s->ep.o.jfr_policy;
    w->jfr_token = s->ep.o.jfr_token;
    if (s->mem.tseg) {
        w->seg = s->mem.tseg->seg;
        w->seg_token = s->mem.token;
        w->seg_va = (uint64_t)(uintptr_t)s->mem.buf;
    }
}

/* Imports the peer's jetty (and binds it for RC) and segment. */
CF_FN int cf_side_import(cf_side_t *s, const cf_wire_t *peer)
{
    s->tj = cf_import_jetty(s->ctx, &peer->jetty_id, (urma_transport_mode_t)peer->mode,
                            peer->jfr_policy, peer->jfr_token);
    if (!s->tj) return -1;
    if (peer->mode == URMA_TM_RC) {
        int rc = cf.urma_bind_jetty(s->ep.jetty, s->tj);
        if (rc != 0) {
            CF_FAILF("urma_bind_jetty: %d", rc);
            return -1;
        }
        s->bound = true;
    }
    if (peer->seg.len) {
        s->rseg = cf_import_seg(s->ctx, &peer->seg, peer->seg_token, CF_ACCESS_ALL);
        if (!s->rseg) {
            CF_FAILF("urma_import_seg: NULL (errno %d)", errno);
            return -1;
        }
    }
    return 0;
}

/* Teardown in the order of §4.13. flush: move the jetty to ERROR first. */
CF_FN void cf_side_close(cf_side_t *s, bool flush)
{
    int rc;
    if (flush && s->ep.jetty) cf_ep_flush(&s->ep);
    if (s->bound && (rc = cf.urma_unbind_jetty(s->ep.jetty)) != 0)
        CF_FAILF("urma_unbind_jetty: %d", rc);
    if (s->tj && (rc = cf.urma_unimport_jetty(s->tj)) != 0) CF_FAILF("urma_unimport_jetty: %d", rc);
    if (s->rseg && (rc = cf.urma_unimport_seg(s->rseg)) != 0) CF_FAILF("urma_unimport_seg: %d", rc);
    s->bound = false;
    s->tj = NULL;
    s->rseg = NULL;
    cf_ep_close(&s->ep);
    cf_mem_free(&s->mem);
    if (s->own_ctx) cf_ctx_delete(s->ctx);
    s->ctx = NULL;
}

/* Two sides in this process, each with a context of its own, importing each other. */
CF_FN int cf_pair_open(cf_dev_t *d, cf_side_t *a, cf_side_t *b, const cf_ep_opts_t *o,
                       size_t mem_len)
{
    if (cf_side_open(a, d, NULL, o, mem_len, CF_MEM_MEMALIGN, 0xa5a5a5a5u)) return -1;
    if (cf_side_open(b, d, NULL, o, mem_len, CF_MEM_MEMALIGN, 0x5a5a5a5au)) return -1;
    cf_wire_t wa, wb;
    cf_side_describe(a, &wa);
    cf_side_describe(b, &wb);
    if (cf_side_import(a, &wb)) return -1;
    if (cf_side_import(b, &wa)) return -1;
    return 0;
}

CF_FN void cf_pair_close(cf_side_t *a, cf_side_t *b)
{
    cf_side_close(a, false);
    cf_side_close(b, false);
}

#endif
