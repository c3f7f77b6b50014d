/* jetrpc_bench: echo RPC throughput and latency between two processes of
 * this host.
 *
 * The bench forks and execs itself as the echo server (--bench_role=server,
 * on a loopback port or, with --unix_socket, a unix socket) or calls an
 * external echo server (--server). The client keeps thread_num x queue_depth
 * calls in flight: with queue_depth 1 (and no --async) each thread makes
 * synchronous calls back to back, the latency case; otherwise every slot is
 * an asynchronous call whose done callback, on an event-loop thread, records
 * it and issues the next one. Each thread has its own channel (connection)
 * unless --share_channel; with --connection_type=short every call makes a
 * connection of its own, which shows what connecting costs over each
 * transport (its rows are labelled "<mode>/short").
 *
 * A run is a warm-up, then test_seconds measured: calls completed in the
 * window, their latencies (a log-bucketed histogram per slot, merged at the
 * end), the payload bytes, and the CPU time both processes used in the window
 * (the forked server reports its getrusage over the control socket).
 *
 * The per-call path of the bench allocates nothing: each slot reuses its call
 * object (whose request attachment stays filled across calls) and all slots
 * share one request message; what the library allocates per call is its own. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "bench_stats.h"
#include "echo.pb-c.h"

/* Names of brpc's example/rdma_performance where it has the setting. */
JET_FLAG_DEFINE_INT32(thread_num, 1, "Client threads, each with its own channel (connection)");
JET_FLAG_DEFINE_INT32(queue_depth, 1,
                      "Calls in flight per thread; 1 makes synchronous calls unless --async");
JET_FLAG_DECLARE_INT32(urma_event_spin_us);
JET_FLAG_DEFINE_INT32(attachment_size, 0, "Bytes of request attachment");
JET_FLAG_DEFINE_STRING(attachment_memory, "pool",
                       "Where the request attachment lives: pool (copied into the block pool "
                       "once, reused by every call), user (a user buffer appended to each call: "
                       "jet_iobuf_append_user) or registered (the same buffer registered with "
                       "jet_urma_register_memory: URMA sends it without a copy); rows are "
                       "labelled <mode>/user or <mode>/registered");
JET_FLAG_DEFINE_BOOL(echo_attachment, true, "The forked server echoes the attachment back");
JET_FLAG_DEFINE_INT32(test_seconds, 10, "Measured seconds of each run");
JET_FLAG_DEFINE_INT32(warmup_seconds, 2, "Unmeasured seconds before each run");
JET_FLAG_DEFINE_STRING(socket_mode, "tcp",
                       "Transport: tcp, ubring, urma (event mode), urma-spin (event mode polling "
                       "200 us after events, --urma_event_spin_us) or urma-poll (both sides "
                       "--urma_use_polling); a comma list runs each in turn");
JET_FLAG_DEFINE_INT32(message_size, 16, "Bytes of the request's message string (echoed back)");
JET_FLAG_DEFINE_STRING(server, "",
                       "Call this external echo server (ip:port or unix:/path) instead of "
                       "forking one");
JET_FLAG_DEFINE_BOOL(unix_socket, false, "The forked server listens on a unix socket, not TCP");
JET_FLAG_DEFINE_BOOL(json, false, "Print one JSON object per run instead of the table");
JET_FLAG_DEFINE_INT32(idle_seconds, 0,
                      "After each run, keep its connections open and silent this many seconds "
                      "and report the CPU the server and the client use meanwhile (percent of a core)");
JET_FLAG_DEFINE_BOOL(matrix, false,
                     "Run the standard set (1x1 and 8x8 with a 64 B message; 1x1 and 1x2 with a "
                     "1 MiB attachment), and softub's raw floor right before each URMA mode");
JET_FLAG_DEFINE_BOOL(async, false, "Asynchronous calls even when queue_depth is 1");
JET_FLAG_DEFINE_BOOL(share_channel, false, "All threads call through one channel");
JET_FLAG_DEFINE_STRING(connection_type, "single",
                       "Connection type of the channels: single, pooled, or short (a connection "
                       "per call: the rows then show what connecting costs over each transport)");
JET_FLAG_DEFINE_INT32(rpc_timeout_ms, 2000, "RPC call timeout");
JET_FLAG_DEFINE_BOOL(usercode_in_pool, false, "Forked server: run handlers on worker threads");
JET_FLAG_DEFINE_STRING(bench_role, "client", "Internal: 'server' in the forked server process");
JET_FLAG_DEFINE_INT32(bench_ctl_fd, -1, "Internal: the forked server's control socket");
JET_FLAG_DEFINE_BOOL(bench_child, false, "Internal: a client run for one URMA mode");
JET_FLAG_DEFINE_STRING(softub_perf, "",
                       "--matrix: the softub_perf binary for the raw floor (default: "
                       "<build>/softub/tools/softub_perf next to this binary; none: skip)");

#define BENCH_MAX_SLOTS   4096 /* a 10 KiB histogram each */
#define BENCH_MATRIX_MSG  64   /* --matrix: the message, as softub_perf's 64 B ping-pong */
#define BENCH_MIB         (1024.0 * 1024.0)
#define BENCH_REF_LABEL   "brpc (reference, quiet machine)"
#define BENCH_REF_UBRING_LABEL "brpc ubring (reference)"
#define BENCH_CTL_WAIT_MS 10000

/* ---- small helpers ------------------------------------------------------------ */

/* Reads one '\n'-terminated line (without it) within timeout_ms. 0, -ETIMEDOUT,
 * -EPIPE at EOF, -EMSGSIZE, or -errno. Control traffic only: byte reads are fine. */
static int bench_read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    int64_t deadline = bench_now_ns() + (int64_t)timeout_ms * 1000000;
    size_t n = 0;
    for (;;) {
        int64_t left_ms = (deadline - bench_now_ns()) / 1000000;
        if (left_ms <= 0) return -ETIMEDOUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, (int)left_ms);
        if (rc < 0 && errno != EINTR) return -errno;
        if (rc <= 0) continue;
        char c;
        ssize_t got = read(fd, &c, 1);
        if (got == 0) return -EPIPE;
        if (got < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            return -errno;
        }
        if (c == '\n') {
            buf[n] = '\0';
            return 0;
        }
        if (n + 1 >= size) return -EMSGSIZE;
        buf[n++] = c;
    }
}

/* "urma-poll" is URMA with --urma_use_polling on both sides, "urma-spin"
 * URMA event mode that polls 200 us after each event (--urma_event_spin_us,
 * unless set); the other names are socket modes. Sets the flags of this
 * process to match (the URMA context takes the mode at first use, so one
 * process runs one of them). */
static int bench_mode_parse(const char *name, jet_socket_mode_t *mode)
{
    bool poll = strcmp(name, "urma-poll") == 0, spin = strcmp(name, "urma-spin") == 0;
    if (poll || spin)
        *mode = JET_SOCKET_MODE_URMA;
    else if (jet_socket_mode_parse(name, mode) < 0)
        return -EINVAL;
    if (*mode == JET_SOCKET_MODE_URMA) jet_flag_set("urma_use_polling", poll ? "true" : "false");
    if (spin && JET_FLAG(urma_event_spin_us) == 0) jet_flag_set("urma_event_spin_us", "200");
    return 0;
}

/* --connection_type, checked by bench_check_flags. */
static jet_connection_type_t bench_conn_type(void)
{
    jet_connection_type_t t = JET_CONNECTION_SINGLE;
    jet_connection_type_parse(JET_FLAG(connection_type), &t);
    return t;
}

/* The row label of a mode name (one that outlives a comma list), with
 * "/short" or "/pooled" after it for those connection types. */
static const char *bench_label(const char *name, jet_socket_mode_t mode)
{
    const char *base = strcmp(name, "urma-poll") == 0   ? "urma-poll"
                       : strcmp(name, "urma-spin") == 0 ? "urma-spin"
                                                        : jet_socket_mode_name(mode);
    jet_connection_type_t t = bench_conn_type();
    const char *am = JET_FLAG(attachment_memory);
    bool pool = strcmp(am, "pool") == 0;
    if (t == JET_CONNECTION_SINGLE && pool) return base;
    /* Kept for the process's life, as the static names are. */
    char *label = malloc(strlen(base) + 32);
    if (!label) return base;
    strcpy(label, base);
    if (t != JET_CONNECTION_SINGLE) strcat(label, t == JET_CONNECTION_SHORT ? "/short" : "/pooled");
    if (!pool) {
        strcat(label, "/");
        strcat(label, am);
    }
    return label;
}

static bool bench_mode_is_urma(const char *name)
{
    return strncmp(name, "urma", 4) == 0;
}

/* ---- the forked server ---------------------------------------------------------
 * Control protocol on a socketpair: the server writes "ready <addr>\n" (or
 * "error <text>\n") once started; each byte 'c' from the client is answered
 * with "cpu <microseconds of user+system time>\n"; EOF stops the server. */

static void echo_echo(Example__EchoService_Service *service, const Example__EchoRequest *req,
                      Example__EchoResponse_Closure closure, void *closure_data)
{
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = req->message;
    if (JET_FLAG(echo_attachment)) {
        jet_call_t *call = jet_server_call(closure_data);
        jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    }
    closure(&resp, closure_data);
}

static int bench_server_main(void)
{
    int ctl = JET_FLAG(bench_ctl_fd);
    if (ctl < 0) {
        fprintf(stderr, "jetrpc_bench: --bench_role=server needs --bench_ctl_fd\n");
        return 2;
    }
    /* The client may die without closing the control socket cleanly. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) return 1;

    jet_server_options_t opts;
    jet_server_options_init(&opts);
    opts.usercode_in_pool = JET_FLAG(usercode_in_pool);
    opts.graceful_stop_ms = 1000;
    int rc = bench_mode_parse(JET_FLAG(socket_mode), &opts.socket_mode);
    if (rc < 0) {
        dprintf(ctl, "error unknown socket_mode '%s'\n", JET_FLAG(socket_mode));
        return 2;
    }
    static Example__EchoService_Service service = EXAMPLE__ECHO_SERVICE__INIT(echo_);
    char addr[128];
    if (JET_FLAG(unix_socket)) {
        snprintf(addr, sizeof addr, "unix:/tmp/jetrpc_bench.%d.sock", (int)getpid());
        unlink(addr + 5);
    } else {
        snprintf(addr, sizeof addr, "127.0.0.1:0");
    }
    jet_server_t *srv;
    rc = jet_server_create(&opts, &srv);
    if (rc < 0) {
        dprintf(ctl, "error jet_server_create: %s\n", jet_strerror(rc));
        return 1;
    }
    rc = jet_server_add_service(srv, &service.base);
    if (rc == 0) rc = jet_server_start(srv, addr);
    if (rc < 0) {
        dprintf(ctl, "error cannot serve on %s: %s\n", addr, jet_strerror(rc));
        goto out_destroy;
    }
    if (!JET_FLAG(unix_socket))
        snprintf(addr, sizeof addr, "127.0.0.1:%d", jet_server_listen_port(srv));
    dprintf(ctl, "ready %s\n", addr);
    for (;;) {
        char c;
        ssize_t got = read(ctl, &c, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        if (c == 'c') dprintf(ctl, "cpu %.0f\n", bench_self_cpu_us());
    }
    jet_server_stop(srv);
out_destroy:
    jet_server_destroy(srv);
    if (JET_FLAG(unix_socket)) unlink(addr + 5);
    return rc < 0 ? 1 : 0;
}

typedef struct bench_server {
    pid_t pid;
    int ctl;
    char addr[256];
} bench_server_t;

/* argv as given, before jet_flags_parse consumed it: the server gets the same
 * flags (library ones included), plus its role and mode appended (later
 * arguments win). */
static int bench_argc;
static char **bench_argv;
/* Our own executable, resolved once: exec of "/proc/self/exe" itself would
 * run the wrong program under valgrind, which virtualises readlink only. */
static char bench_exe[PATH_MAX];

static void bench_server_reap(bench_server_t *s)
{
    if (s->ctl >= 0) close(s->ctl);
    s->ctl = -1;
    if (s->pid <= 0) return;
    for (int i = 0; i < 1000; i++) {
        pid_t r = waitpid(s->pid, NULL, WNOHANG);
        if (r == s->pid || (r < 0 && errno != EINTR)) {
            s->pid = 0;
            return;
        }
        usleep(10000);
    }
    fprintf(stderr, "jetrpc_bench: server %d did not stop, killing it\n", (int)s->pid);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

static int bench_server_spawn(const char *mode, bench_server_t *s)
{
    s->pid = 0;
    s->ctl = -1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -errno;
    char role[] = "--bench_role=server";
    char fdarg[48], modearg[96];
    snprintf(fdarg, sizeof fdarg, "--bench_ctl_fd=%d", sv[1]);
    snprintf(modearg, sizeof modearg, "--socket_mode=%s", mode);
    char **argv = calloc((size_t)bench_argc + 4, sizeof *argv);
    if (!argv) {
        close(sv[0]);
        close(sv[1]);
        return -ENOMEM;
    }
    for (int i = 0; i < bench_argc; i++)
        argv[i] = bench_argv[i];
    argv[bench_argc] = role;
    argv[bench_argc + 1] = fdarg;
    argv[bench_argc + 2] = modearg;
    pid_t pid = fork();
    if (pid == 0) {
        /* Only async-signal-safe calls between fork and exec: other threads may
         * have held locks at the fork. */
        if (fcntl(sv[1], F_SETFD, 0) < 0) _exit(127);
        execv(bench_exe, argv);
        _exit(127);
    }
    int err = pid < 0 ? -errno : 0;
    free(argv);
    close(sv[1]);
    if (err) {
        close(sv[0]);
        return err;
    }
    s->pid = pid;
    s->ctl = sv[0];
    char line[sizeof s->addr - 8];
    int rc = bench_read_line(s->ctl, line, sizeof line, BENCH_CTL_WAIT_MS);
    if (rc == 0 && strncmp(line, "ready ", 6) == 0) {
        snprintf(s->addr, sizeof s->addr, "%s", line + 6);
        return 0;
    }
    if (rc == 0)
        fprintf(stderr, "jetrpc_bench: server (%s): %s\n", mode, line);
    else
        fprintf(stderr, "jetrpc_bench: server (%s) did not start: %s\n", mode, jet_strerror(rc));
    bench_server_reap(s);
    return rc < 0 ? rc : -EIO;
}

/* CPU microseconds the server process used so far; -1 when unknown. */
static double bench_server_cpu_us(bench_server_t *s)
{
    if (!s || s->ctl < 0) return -1;
    if (send(s->ctl, "c", 1, MSG_NOSIGNAL) != 1) return -1;
    char line[64];
    double us;
    if (bench_read_line(s->ctl, line, sizeof line, BENCH_CTL_WAIT_MS) < 0 ||
        sscanf(line, "cpu %lf", &us) != 1)
        return -1;
    return us;
}

/* ---- one run -------------------------------------------------------------------- */

enum { PHASE_WARMUP, PHASE_MEASURE, PHASE_STOP };

typedef struct bench_cfg {
    const char *mode_name;
    jet_socket_mode_t mode;
    int threads;
    int depth;
    bool sync;
    int msg_size;
    int att_size;
} bench_cfg_t;

typedef struct bench_result {
    bench_cfg_t cfg;
    double seconds;
    uint64_t calls;
    uint64_t errors;
    double bytes;
    double avg_us, p50_us, p99_us, p999_us, max_us;
    double client_cpu_us; /* over the window */
    double server_cpu_us; /* < 0: unknown */
    /* --idle_seconds: CPU in % of one core while the connections sat idle
     * (< 0: not measured or unknown). */
    double idle_client_pct, idle_server_pct;
    int connections;
} bench_result_t;

typedef struct bench_run bench_run_t;

typedef struct bench_slot {
    bench_run_t *run;
    char *user_att; /* appended to each call (attachment_memory user or registered) */
    jet_channel_t *ch;
    jet_call_t *call;
    pthread_t thread;
    bool thread_started;
    int64_t start_ns;
    uint64_t errors;
    uint64_t bytes;
    bench_hist_t hist;
} bench_slot_t;

struct bench_run {
    const bench_cfg_t *cfg;
    _Atomic int phase;
    uint64_t req_bytes; /* payload of one request */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int nslots;
    int finished; /* slots that stopped issuing */
    char first_error[256];
};

static Example__EchoRequest bench_request = EXAMPLE__ECHO_REQUEST__INIT;

static void bench_note_error(bench_run_t *run, const char *text)
{
    pthread_mutex_lock(&run->lock);
    if (!run->first_error[0]) snprintf(run->first_error, sizeof run->first_error, "%s", text);
    pthread_mutex_unlock(&run->lock);
}

static void bench_slot_finish(bench_slot_t *sl)
{
    bench_run_t *run = sl->run;
    pthread_mutex_lock(&run->lock);
    run->finished++;
    pthread_cond_broadcast(&run->cond);
    pthread_mutex_unlock(&run->lock);
}

/* Accounts the call that just ended; true when the slot should issue another. */
static bool bench_slot_done(bench_slot_t *sl, int64_t now)
{
    bench_run_t *run = sl->run;
    jet_call_t *call = sl->call;
    int phase = atomic_load_explicit(&run->phase, memory_order_relaxed);
    if (jet_call_failed(call)) {
        /* As brpc's rdma_performance does, a failed slot stops: a dead server
         * must not turn the bench into a busy loop. */
        sl->errors++;
        char text[256];
        snprintf(text, sizeof text, "[E%d] %s", jet_call_error_code(call),
                 jet_call_error_text(call));
        bench_note_error(run, text);
        return false;
    }
    if (phase == PHASE_MEASURE) {
        hist_add(&sl->hist, (uint64_t)(now - sl->start_ns));
        sl->bytes += run->req_bytes + (uint64_t)run->cfg->msg_size +
                     jet_iobuf_len(jet_call_response_attachment(call));
    }
    return phase != PHASE_STOP;
}

/* attachment_memory user or registered: the call's attachment is the user
 * buffer itself, appended anew for each call (as a service sends a slice of
 * its own memory). */
static void bench_user_att(bench_slot_t *sl)
{
    if (!sl->user_att) return;
    jet_iobuf_t *att = jet_call_request_attachment(sl->call);
    jet_iobuf_clear(att);
    jet_iobuf_append_user(att, sl->user_att, (size_t)sl->run->cfg->att_size, NULL, NULL);
}

static void *bench_sync_thread(void *arg)
{
    bench_slot_t *sl = arg;
    for (;;) {
        bench_user_att(sl);
        sl->start_ns = bench_now_ns();
        int rc = jet_channel_call(sl->ch, &example__echo_service__descriptor, 0, sl->call,
                                  &bench_request.base, NULL, NULL);
        if (rc < 0) {
            sl->errors++;
            bench_note_error(sl->run, jet_strerror(rc));
            break;
        }
        if (!bench_slot_done(sl, bench_now_ns())) break;
    }
    bench_slot_finish(sl);
    return NULL;
}

static void bench_async_issue(bench_slot_t *sl);

/* Runs on an event-loop thread (or inside jet_channel_call when the call
 * failed before being sent: a failed slot does not re-issue, so this never
 * recurses). */
static void bench_async_done(jet_call_t *call, void *arg)
{
    bench_slot_t *sl = arg;
    if (bench_slot_done(sl, bench_now_ns()))
        bench_async_issue(sl);
    else
        bench_slot_finish(sl);
}

static void bench_async_issue(bench_slot_t *sl)
{
    bench_user_att(sl);
    sl->start_ns = bench_now_ns();
    /* Once issued (rc == 0) the call may already be complete and the slot
     * finished and freed: sl is touched again only when it was not issued. */
    int rc = jet_channel_call(sl->ch, &example__echo_service__descriptor, 0, sl->call,
                              &bench_request.base, bench_async_done, sl);
    if (rc < 0) {
        sl->errors++;
        bench_note_error(sl->run, jet_strerror(rc));
        bench_slot_finish(sl);
    }
}

/* Waits until deadline_ns (CLOCK_MONOTONIC) or until every slot finished.
 * true when every slot finished. */
static bool bench_wait(bench_run_t *run, int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = deadline_ns / 1000000000, .tv_nsec = deadline_ns % 1000000000};
    pthread_mutex_lock(&run->lock);
    while (run->finished < run->nslots) {
        int rc = pthread_cond_timedwait(&run->cond, &run->lock, &ts);
        if (rc == ETIMEDOUT) break;
    }
    bool all = run->finished >= run->nslots;
    pthread_mutex_unlock(&run->lock);
    return all;
}

static int bench_run_one(const bench_cfg_t *cfg, const char *addr, bench_server_t *srv,
                         bench_result_t *res)
{
    int rc = 0;
    memset(res, 0, sizeof *res);
    res->cfg = *cfg;
    int nslots = cfg->threads * cfg->depth;
    int nch = JET_FLAG(share_channel) ? 1 : cfg->threads;

    /* On the heap: a run abandoned with calls in flight is leaked, not freed
     * under their feet. */
    bench_run_t *run = calloc(1, sizeof *run);
    if (!run) return -ENOMEM;
    run->cfg = cfg;
    run->nslots = nslots;
    run->req_bytes = (uint64_t)cfg->msg_size + (uint64_t)cfg->att_size;
    atomic_init(&run->phase, PHASE_WARMUP);
    pthread_mutex_init(&run->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&run->cond, &ca);
    pthread_condattr_destroy(&ca);

    jet_channel_t **chs = calloc((size_t)nch, sizeof *chs);
    bench_slot_t *slots = calloc((size_t)nslots, sizeof *slots);
    /* Shared anonymous memory: what softub moves with a plain copy (other
     * user memory costs it a system call per transfer); hardware reads any. */
    char *att = NULL;
    if (cfg->att_size > 0) {
        att = mmap(NULL, (size_t)cfg->att_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
        if (att == MAP_FAILED) att = NULL;
    }
    bool registered = false; /* att, with jet_urma_register_memory */
    if (!chs || !slots || (cfg->att_size > 0 && !att)) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (int i = 0; i < cfg->att_size; i++)
        att[i] = (char)('a' + i % 26);
    bool user_att = att && strcmp(JET_FLAG(attachment_memory), "pool") != 0;
    if (att && strcmp(JET_FLAG(attachment_memory), "registered") == 0 &&
        bench_mode_is_urma(cfg->mode_name)) {
        rc = jet_urma_register_memory(att, (size_t)cfg->att_size);
        if (rc < 0) {
            fprintf(stderr, "jetrpc_bench: jet_urma_register_memory: %s\n", jet_strerror(rc));
            goto out_free;
        }
        registered = true;
    }

    jet_channel_options_t copts;
    jet_channel_options_init(&copts);
    copts.socket_mode = cfg->mode;
    copts.connection_type = bench_conn_type();
    copts.timeout_ms = JET_FLAG(rpc_timeout_ms);
    copts.max_retry = 0;
    for (int i = 0; i < nch; i++) {
        rc = jet_channel_create(addr, &copts, &chs[i]);
        if (rc < 0) {
            fprintf(stderr, "jetrpc_bench: channel to %s: %s\n", addr, jet_strerror(rc));
            goto out_channels;
        }
    }
    for (int i = 0; i < nslots; i++) {
        bench_slot_t *sl = &slots[i];
        sl->run = run;
        sl->ch = chs[(i / cfg->depth) % nch];
        sl->call = jet_call_create();
        if (!sl->call) {
            rc = -ENOMEM;
            goto out_calls;
        }
        if (user_att) sl->user_att = att;
        /* Filled once: a call keeps its request attachment across uses. */
        if (att && !user_att &&
            jet_iobuf_append(jet_call_request_attachment(sl->call), att, (size_t)cfg->att_size) <
                0) {
            rc = -ENOMEM;
            goto out_calls;
        }
    }

    int started = 0;
    for (; started < nslots; started++) {
        bench_slot_t *sl = &slots[started];
        if (cfg->sync) {
            int err = pthread_create(&sl->thread, NULL, bench_sync_thread, sl);
            if (err) {
                rc = -err;
                break;
            }
            sl->thread_started = true;
        } else {
            bench_async_issue(sl);
        }
    }
    double ccpu0 = 0, scpu0 = -1, ccpu1 = 0, scpu1 = -1;
    int64_t t0 = bench_now_ns(), t1 = t0;
    if (started < nslots) {
        /* The slots never started count as finished; the others are stopped. */
        pthread_mutex_lock(&run->lock);
        run->finished += nslots - started;
        pthread_mutex_unlock(&run->lock);
        atomic_store(&run->phase, PHASE_STOP);
    } else {
        bench_wait(run, t0 + (int64_t)JET_FLAG(warmup_seconds) * 1000000000);
        ccpu0 = bench_self_cpu_us();
        scpu0 = bench_server_cpu_us(srv);
        t0 = bench_now_ns();
        atomic_store(&run->phase, PHASE_MEASURE);
        bench_wait(run, t0 + (int64_t)JET_FLAG(test_seconds) * 1000000000);
        atomic_store(&run->phase, PHASE_STOP);
        t1 = bench_now_ns();
        ccpu1 = bench_self_cpu_us();
        scpu1 = bench_server_cpu_us(srv);
    }

    int64_t drain_ms = (JET_FLAG(rpc_timeout_ms) > 0 ? JET_FLAG(rpc_timeout_ms) : 10000) + 5000;
    if (!bench_wait(run, bench_now_ns() + drain_ms * 1000000)) {
        fprintf(stderr, "jetrpc_bench: %d of %d slots did not finish; abandoning the run\n",
                run->nslots - run->finished, run->nslots);
        return -ETIMEDOUT;
    }
    for (int i = 0; i < nslots; i++)
        if (slots[i].thread_started) pthread_join(slots[i].thread, NULL);
    if (rc < 0) goto out_calls;

    bench_hist_t *all = calloc(1, sizeof *all);
    if (!all) {
        rc = -ENOMEM;
        goto out_calls;
    }
    uint64_t bytes = 0;
    for (int i = 0; i < nslots; i++) {
        hist_merge(all, &slots[i].hist);
        bytes += slots[i].bytes;
        res->errors += slots[i].errors;
    }
    res->seconds = (double)(t1 - t0) / 1e9;
    res->calls = all->count;
    res->bytes = (double)bytes;
    res->avg_us = all->count ? (double)all->sum_ns / (double)all->count / 1e3 : 0;
    res->p50_us = hist_quantile(all, 0.50) / 1e3;
    res->p99_us = hist_quantile(all, 0.99) / 1e3;
    res->p999_us = hist_quantile(all, 0.999) / 1e3;
    res->max_us = (double)all->max_ns / 1e3;
    res->client_cpu_us = ccpu1 - ccpu0;
    res->server_cpu_us = scpu0 >= 0 && scpu1 >= 0 ? scpu1 - scpu0 : -1;
    /* Open once the calls are over: a short connection closes with its
     * call, a pooled channel keeps one per call it had in flight at most. */
    jet_connection_type_t ctype = bench_conn_type();
    res->connections = ctype == JET_CONNECTION_SHORT    ? 0
                       : ctype == JET_CONNECTION_POOLED ? nch * cfg->depth
                                                        : nch;
    res->idle_client_pct = res->idle_server_pct = -1;
    if (JET_FLAG(idle_seconds) > 0) {
        /* The calls are over, the connections stay: what does waiting cost? */
        double c0 = bench_self_cpu_us(), s0 = bench_server_cpu_us(srv);
        int64_t i0 = bench_now_ns();
        for (int32_t left = JET_FLAG(idle_seconds); left > 0; left--)
            sleep(1);
        double c1 = bench_self_cpu_us(), s1 = bench_server_cpu_us(srv);
        double wall_us = (double)(bench_now_ns() - i0) / 1e3;
        res->idle_client_pct = (c1 - c0) / wall_us * 100;
        res->idle_server_pct = s0 >= 0 && s1 >= 0 ? (s1 - s0) / wall_us * 100 : -1;
    }
    free(all);
    if (run->first_error[0])
        fprintf(stderr, "jetrpc_bench: %" PRIu64 " failed calls, first: %s\n", res->errors,
                run->first_error);

out_calls:
    for (int i = 0; i < nslots; i++)
        jet_call_destroy(slots[i].call);
out_channels:
    for (int i = 0; i < nch; i++)
        jet_channel_destroy(chs[i]);
out_free:
    /* Every call is destroyed: nothing sent from att is in flight. */
    if (registered) jet_urma_unregister_memory(att);
    if (att) munmap(att, (size_t)cfg->att_size);
    free(slots);
    free(chs);
    pthread_cond_destroy(&run->cond);
    pthread_mutex_destroy(&run->lock);
    free(run);
    return rc;
}

/* ---- output ------------------------------------------------------------------- */

#define ROW_FMT "%-32s %-11s %7s %8s %9s %8s %8s %8s %9s %9s %11s %11s %6s\n"

static void bench_print_header(void)
{
    printf(ROW_FMT, "mode", "thr x depth", "msg B", "att B", "QPS", "avg us", "p50 us", "p99 us",
           "p99.9 us", "MB/s", "cli us/call", "srv us/call", "errors");
}

static void bench_fmt(char *buf, size_t size, const char *fmt, double v)
{
    if (v < 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, fmt, v);
}

typedef struct bench_row {
    const char *label;
    int threads, depth;
    bool sync;
    int msg, att;
    /* < 0: unknown */
    double qps, avg, p50, p99, p999, mbps, ccpu, scpu;
    double errors;
    double idle_cpct, idle_spct; /* --idle_seconds, % of a core; < 0: none */
    int conns;
} bench_row_t;

static void bench_row_from_result(const bench_result_t *r, bench_row_t *row)
{
    double calls = (double)r->calls;
    row->label = r->cfg.mode_name;
    row->threads = r->cfg.threads;
    row->depth = r->cfg.depth;
    row->sync = r->cfg.sync;
    row->msg = r->cfg.msg_size;
    row->att = r->cfg.att_size;
    row->qps = r->seconds > 0 ? calls / r->seconds : 0;
    /* No completed call: no latency to show (not zero). */
    row->avg = calls > 0 ? r->avg_us : -1;
    row->p50 = calls > 0 ? r->p50_us : -1;
    row->p99 = calls > 0 ? r->p99_us : -1;
    row->p999 = calls > 0 ? r->p999_us : -1;
    row->mbps = r->seconds > 0 ? r->bytes / BENCH_MIB / r->seconds : 0;
    row->ccpu = calls > 0 ? r->client_cpu_us / calls : -1;
    row->scpu = calls > 0 && r->server_cpu_us >= 0 ? r->server_cpu_us / calls : -1;
    row->errors = (double)r->errors;
    row->idle_cpct = r->idle_client_pct;
    row->idle_spct = r->idle_server_pct;
    row->conns = r->connections;
}

static void bench_print_idle(const bench_row_t *row)
{
    if (row->idle_cpct < 0) return;
    char s[16];
    bench_fmt(s, sizeof s, "%.1f%%", row->idle_spct);
    printf("idle %-27s %d connection%s silent for %d s: server %s of a core, client %.1f%%\n",
           row->label, row->conns, row->conns == 1 ? "" : "s", JET_FLAG(idle_seconds), s,
           row->idle_cpct);
}

static void bench_print_row(const bench_row_t *row)
{
    char shape[32], msg[16], att[16], qps[24], avg[16], p50[16], p99[16], p999[16], mbps[24],
        ccpu[16], scpu[16], err[24];
    snprintf(shape, sizeof shape, "%dx%d %s", row->threads, row->depth,
             row->sync ? "sync" : "async");
    snprintf(msg, sizeof msg, "%d", row->msg);
    snprintf(att, sizeof att, "%d", row->att);
    bench_fmt(qps, sizeof qps, "%.0f", row->qps);
    bench_fmt(avg, sizeof avg, "%.1f", row->avg);
    bench_fmt(p50, sizeof p50, "%.1f", row->p50);
    bench_fmt(p99, sizeof p99, "%.1f", row->p99);
    bench_fmt(p999, sizeof p999, "%.1f", row->p999);
    bench_fmt(mbps, sizeof mbps, "%.2f", row->mbps);
    bench_fmt(ccpu, sizeof ccpu, "%.1f", row->ccpu);
    bench_fmt(scpu, sizeof scpu, "%.1f", row->scpu);
    bench_fmt(err, sizeof err, "%.0f", row->errors);
    printf(ROW_FMT, row->label, shape, msg, att, qps, avg, p50, p99, p999, mbps, ccpu, scpu, err);
}

static void bench_json_num(const char *key, double v, const char *fmt, bool last)
{
    printf("\"%s\":", key);
    if (v < 0)
        printf("null");
    else
        printf(fmt, v);
    printf(last ? "}\n" : ",");
}

static void bench_print_json(const bench_row_t *row, const bench_result_t *r)
{
    printf("{\"label\":\"%s\",\"reference\":%s,\"threads\":%d,\"queue_depth\":%d,"
           "\"sync\":%s,\"message_size\":%d,\"attachment_size\":%d,\"echo_attachment\":%s,",
           row->label, r ? "false" : "true", row->threads, row->depth, row->sync ? "true" : "false",
           row->msg, row->att, JET_FLAG(echo_attachment) ? "true" : "false");
    if (r) {
        printf("\"seconds\":%.3f,\"calls\":%" PRIu64 ",\"errors\":%" PRIu64 ",", r->seconds,
               r->calls, r->errors);
        double s = r->seconds > 0 ? r->seconds : 1;
        bench_json_num("client_cpu_pct", r->client_cpu_us / s / 1e4, "%.1f", false);
        bench_json_num("server_cpu_pct", r->server_cpu_us >= 0 ? r->server_cpu_us / s / 1e4 : -1,
                       "%.1f", false);
        bench_json_num("lat_max_us", r->max_us, "%.1f", false);
    }
    bench_json_num("qps", row->qps, "%.1f", false);
    bench_json_num("lat_avg_us", row->avg, "%.2f", false);
    bench_json_num("lat_p50_us", row->p50, "%.2f", false);
    bench_json_num("lat_p99_us", row->p99, "%.2f", false);
    bench_json_num("lat_p999_us", row->p999, "%.2f", false);
    bench_json_num("mb_per_s", row->mbps, "%.3f", false);
    bench_json_num("client_cpu_us_per_call", row->ccpu, "%.2f", false);
    bench_json_num("server_cpu_us_per_call", row->scpu, "%.2f", false);
    bench_json_num("connections", row->conns, "%.0f", false);
    bench_json_num("idle_client_cpu_pct", row->idle_cpct, "%.2f", false);
    bench_json_num("idle_server_cpu_pct", row->idle_spct, "%.2f", true);
}

/* brpc's figures on this kind of machine (quiet), for the standard set. */
static const bench_row_t bench_refs[] = {
    {BENCH_REF_LABEL, 1, 1, true, 16, 0, 19700, -1, 42, -1, -1, -1, -1, -1, -1, -1, -1, 1},
    {BENCH_REF_LABEL, 8, 8, false, 16, 0, 33700, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 8},
    {BENCH_REF_LABEL, 1, 1, true, 16, 1 << 20, -1, -1, -1, -1, -1, 328, -1, -1, -1, -1, -1, 1},
    /* brpc's UBRing on this machine (issue 5): 24k-34k QPS in two runs, p50
     * 4 us; an idle server burns about 90% of a core. */
    {BENCH_REF_UBRING_LABEL, 1, 1, true, 16, 0, 24000, -1, 4, -1, -1, -1, -1, -1, -1, -1, 90, 1},
};

/* ---- URMA modes in a client process of their own ------------------------------
 * The URMA context fixes event or polling mode at its first use, so each URMA
 * mode of a run gets a fresh client: this program again with that one mode
 * and --json, its rows read back from a pipe. */

typedef struct bench_floor {
    double rtt_p50_us, rtt_p99_us; /* polling SEND_IMM ping-pong, round trip */
    double send_mbps;              /* 1 MiB SEND, one direction */
} bench_floor_t;

typedef struct bench_entry {
    bench_row_t row;
    const bench_result_t *res; /* NULL for a row read from a child */
    char *json;                /* the child's line, printed as is with --json */
    /* --matrix, URMA rows: softub's floor measured right before the mode ran
     * (the host may place the two vCPUs differently from one minute to the
     * next, which moves the floor and the RPC figures together). */
    bool has_floor;
    int floor_seq; /* which floor measurement (a mode may run twice) */
    bench_floor_t floor;
} bench_entry_t;

/* The number after "key": in a JSON line of ours; -1 when absent or null. */
static double bench_json_get(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (strncmp(p, "true", 4) == 0) return 1;
    if (strncmp(p, "false", 5) == 0) return 0;
    char *end;
    double v = strtod(p, &end);
    return end == p ? -1 : v;
}

static void bench_row_from_json(const char *line, const char *label, bench_row_t *row)
{
    row->label = label;
    row->threads = (int)bench_json_get(line, "threads");
    row->depth = (int)bench_json_get(line, "queue_depth");
    row->sync = bench_json_get(line, "sync") > 0;
    row->msg = (int)bench_json_get(line, "message_size");
    row->att = (int)bench_json_get(line, "attachment_size");
    row->qps = bench_json_get(line, "qps");
    row->avg = bench_json_get(line, "lat_avg_us");
    row->p50 = bench_json_get(line, "lat_p50_us");
    row->p99 = bench_json_get(line, "lat_p99_us");
    row->p999 = bench_json_get(line, "lat_p999_us");
    row->mbps = bench_json_get(line, "mb_per_s");
    row->ccpu = bench_json_get(line, "client_cpu_us_per_call");
    row->scpu = bench_json_get(line, "server_cpu_us_per_call");
    row->errors = bench_json_get(line, "errors");
    row->conns = (int)bench_json_get(line, "connections");
    row->idle_cpct = bench_json_get(line, "idle_client_cpu_pct");
    row->idle_spct = bench_json_get(line, "idle_server_cpu_pct");
}

/* The last line of a URMA-mode client whose runs all ended. */
#define BENCH_CHILD_DONE "# jetrpc_bench client: every run ended"

static int bench_mode_child(const char *mode_name, bench_entry_t *entries, int *n, int max)
{
    const char *label = bench_label(mode_name, JET_SOCKET_MODE_URMA);
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) return -errno;
    char modearg[96];
    snprintf(modearg, sizeof modearg, "--socket_mode=%s", mode_name);
    char jsonarg[] = "--json=true", childarg[] = "--bench_child=true";
    char **argv = calloc((size_t)bench_argc + 4, sizeof *argv);
    if (!argv) {
        close(pfd[0]);
        close(pfd[1]);
        return -ENOMEM;
    }
    for (int i = 0; i < bench_argc; i++)
        argv[i] = bench_argv[i];
    argv[bench_argc] = modearg;
    argv[bench_argc + 1] = jsonarg;
    argv[bench_argc + 2] = childarg;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(pfd[1], STDOUT_FILENO) < 0) _exit(127);
        execv(bench_exe, argv);
        _exit(127);
    }
    int err = pid < 0 ? -errno : 0;
    free(argv);
    close(pfd[1]);
    if (err) {
        close(pfd[0]);
        return err;
    }
    FILE *f = fdopen(pfd[0], "r");
    if (!f) {
        close(pfd[0]);
        waitpid(pid, NULL, 0);
        return -ENOMEM;
    }
    char line[2048];
    int got = 0;
    bool complete = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strcmp(line, BENCH_CHILD_DONE) == 0) complete = true;
        if (line[0] != '{' || *n >= max) continue;
        bench_entry_t *e = &entries[*n];
        memset(e, 0, sizeof *e);
        bench_row_from_json(line, label, &e->row);
        e->json = strdup(line);
        (*n)++;
        got++;
    }
    fclose(f);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got == 0) {
        fprintf(stderr, "jetrpc_bench: the %s client produced no result (status %d)\n", mode_name,
                status);
        return -EIO;
    }
    /* A failure status with every run printed is fine when the rows count
     * failed calls; otherwise the client gave up part-way (a run timed out,
     * a channel could not be made) and the runs it did not print are
     * missing. */
    double errors = 0;
    for (int i = *n - got; i < *n; i++)
        errors += entries[i].row.errors;
    if (!complete || ((!WIFEXITED(status) || WEXITSTATUS(status) != 0) && errors == 0)) {
        fprintf(stderr, "jetrpc_bench: the %s client stopped before its last run (status %d)\n",
                mode_name, status);
        return -EIO;
    }
    return 0;
}

/* ---- softub_perf's raw floor (--matrix) -------------------------------------- */

/* The number after the first "key": following anchor in text; -1 if none. */
static double bench_text_num(const char *text, const char *anchor, const char *key)
{
    const char *p = strstr(text, anchor);
    if (!p) return -1;
    return bench_json_get(p, key);
}

/* Runs softub_perf --json (polling latency, 1 MiB SEND bandwidth) from the
 * build tree. 0 with *fl filled, or a negative code (message printed). */
static int bench_floor_run(bench_floor_t *fl)
{
    char dir[PATH_MAX], perf[PATH_MAX + 64], lib[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", bench_exe);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    /* <build>/tools/jetrpc_bench → <build>/softub/... */
    if (JET_FLAG(softub_perf)[0])
        snprintf(perf, sizeof perf, "%s", JET_FLAG(softub_perf));
    else
        snprintf(perf, sizeof perf, "%s/../softub/tools/softub_perf", dir);
    snprintf(lib, sizeof lib, "%s/../softub/libsoftub.so", dir);
    if (strcmp(perf, "none") == 0) return -ENOENT;
    if (access(perf, X_OK) != 0 || access(lib, R_OK) != 0) {
        fprintf(stderr, "jetrpc_bench: no softub floor (%s or %s missing)\n", perf, lib);
        return -ENOENT;
    }
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "'%s' --json --lib='%s' --fabric=jetrpc-bench-floor-%d --lat=poll --sizes=1M "
             "2>/dev/null",
             perf, lib, (int)getpid());
    fprintf(stderr, "jetrpc_bench: softub floor: %s\n", cmd);
    fflush(stdout);
    FILE *p = popen(cmd, "r");
    if (!p) return -errno;
    static char text[16384];
    size_t len = fread(text, 1, sizeof text - 1, p);
    text[len] = '\0';
    int status = pclose(p);
    fl->rtt_p50_us = 2 * bench_text_num(text, "\"urma_polling\"", "median_us");
    fl->rtt_p99_us = 2 * bench_text_num(text, "\"urma_polling\"", "p99_us");
    fl->send_mbps = bench_text_num(text, "\"size\": 1048576", "send");
    if (status != 0 || fl->rtt_p50_us <= 0 || fl->send_mbps <= 0) {
        fprintf(stderr, "jetrpc_bench: softub_perf failed (status %d)\n", status);
        return -EIO;
    }
    return 0;
}

/* The floor rows, then each URMA row of the standard set as a ratio to the
 * floor measured right before its mode ran. */
static void bench_floor_print(const bench_entry_t *e, int n)
{
    double tcp_p50 = -1;
    for (int i = 0; i < n; i++) {
        const char *l = e[i].row.label; /* "tcp", or "tcp/short" ... */
        if (strncmp(l, "tcp", 3) == 0 && (l[3] == 0 || l[3] == '/') && e[i].row.threads == 1 &&
            e[i].row.att == 0)
            tcp_p50 = e[i].row.p50;
    }
    for (int i = 0, j; i < n; i = j) {
        j = i + 1;
        if (!e[i].has_floor) continue;
        while (j < n && e[j].has_floor && e[j].floor_seq == e[i].floor_seq)
            j++;
        const bench_floor_t *fl = &e[i].floor;
        /* softub_perf reports one-way latency (half the round trip); an
         * RPC's latency is a round trip, so the floor row shows the round
         * trip. */
        bench_row_t lat = {"softub raw SEND_IMM ping-pong", 1, 1, true, 64, 0, -1, -1,
                           fl->rtt_p50_us, fl->rtt_p99_us, -1, -1, -1, -1, -1, -1, -1, 1};
        bench_row_t bw = {"softub raw SEND 1 MiB (one way)", 1, 2, false, 0, 1 << 20, -1, -1, -1,
                          -1, -1, fl->send_mbps / 1.048576, -1, -1, -1, -1, -1, 1};
        if (JET_FLAG(json)) {
            printf("{\"label\":\"softub floor\",\"before\":\"%s\",\"rtt_p50_us\":%.2f,"
                   "\"rtt_p99_us\":%.2f,\"send_1MiB_MBps\":%.1f}\n",
                   e[i].row.label, fl->rtt_p50_us, fl->rtt_p99_us, fl->send_mbps);
        } else {
            printf("\nsoftub's raw floor, measured right before %s:\n", e[i].row.label);
            bench_print_row(&lat);
            bench_print_row(&bw);
        }
        for (int k = i; k < j; k++) {
            const bench_row_t *r = &e[k].row;
            if (r->threads != 1) continue;
            if (r->att == 0 && r->depth == 1 && r->p50 > 0) {
                if (JET_FLAG(json))
                    printf("{\"label\":\"%s\",\"p50_over_floor\":%.2f,\"p99_over_floor\":%.2f,"
                           "\"tcp_p50_over_this\":%.2f}\n",
                           r->label, r->p50 / fl->rtt_p50_us, r->p99 / fl->rtt_p99_us,
                           tcp_p50 > 0 ? tcp_p50 / r->p50 : -1.0);
                else
                    printf("%-10s 1x1 %d B: p50 %.1f us = %.2fx the raw round trip (%.2f us), p99 "
                           "%.2fx; TCP p50 / this p50 = %.2f\n",
                           r->label, r->msg, r->p50, r->p50 / fl->rtt_p50_us, fl->rtt_p50_us,
                           r->p99 / fl->rtt_p99_us, tcp_p50 > 0 ? tcp_p50 / r->p50 : -1.0);
            } else if (r->att == 1 << 20 && r->mbps > 0) {
                double mbps = r->mbps * 1.048576; /* MiB/s → MB/s as softub_perf counts */
                if (JET_FLAG(json))
                    printf("{\"label\":\"%s\",\"depth\":%d,\"mb_1MiB_over_floor\":%.3f}\n",
                           r->label, r->depth, mbps / fl->send_mbps);
                else
                    printf("%-10s 1x%d 1 MiB echo: %.0f MB/s (request + response) = %.0f%% of the "
                           "raw 1 MiB SEND bandwidth (%.0f MB/s, 2 in flight)\n",
                           r->label, r->depth, mbps, 100 * mbps / fl->send_mbps, fl->send_mbps);
            }
        }
    }
}

/* ---- the plot -------------------------------------------------------------------
 * Under the table, one bar chart per configuration that more than one mode
 * ran: p50 latency on a log scale for calls without attachment (the modes
 * span two decades), MB/s on a linear one for the others. A 1x1 latency chart
 * of a --matrix run ends with softub's raw round trip, the floor. */

#define PLOT_WIDTH 50

static void bench_plot_bar(const char *label, double v, double lo, double hi, bool log_scale)
{
    double f = hi > lo ? (log_scale ? log(v / lo) / log(hi / lo) : v / hi) : 1;
    int len = 1 + (int)(f * (PLOT_WIDTH - 1) + 0.5);
    if (len < 1) len = 1;
    if (len > PLOT_WIDTH) len = PLOT_WIDTH;
    printf("  %-32s %10.1f |", label, v);
    for (int i = 0; i < len; i++)
        putchar('#');
    putchar('\n');
}

static bool bench_same_cfg(const bench_row_t *a, const bench_row_t *b)
{
    return a->threads == b->threads && a->depth == b->depth && a->msg == b->msg &&
           a->att == b->att && a->sync == b->sync;
}

static void bench_print_plot(const bench_entry_t *e, int n)
{
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int k = 0; k < i; k++)
            if (bench_same_cfg(&e[k].row, &e[i].row)) first = false;
        if (!first) continue;
        bool lat = e[i].row.att == 0;
        /* The floor of the first URMA row of this configuration. */
        const bench_floor_t *fl = NULL;
        double lo = INFINITY, hi = 0;
        int rows = 0;
        for (int k = i; k < n; k++) {
            if (!bench_same_cfg(&e[k].row, &e[i].row)) continue;
            double v = lat ? e[k].row.p50 : e[k].row.mbps;
            if (v <= 0) continue;
            rows++;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            if (!fl && e[k].has_floor) fl = &e[k].floor;
        }
        bool floor = lat && fl && e[i].row.threads == 1 && e[i].row.depth == 1;
        if (floor) {
            lo = fl->rtt_p50_us < lo ? fl->rtt_p50_us : lo;
            hi = fl->rtt_p50_us > hi ? fl->rtt_p50_us : hi;
        }
        if (rows < 2) continue;
        const bench_row_t *r = &e[i].row;
        if (lat)
            printf("\np50 latency, %dx%d %s, %d B (us, log scale):\n", r->threads, r->depth,
                   r->sync ? "sync" : "async", r->msg);
        else
            printf("\nthroughput, %dx%d %s, %d B + %d B attachment (MB/s):\n", r->threads, r->depth,
                   r->sync ? "sync" : "async", r->msg, r->att);
        /* Half the smallest: its bar is not empty on the log scale. */
        double base = lat ? lo / 2 : 0;
        for (int k = i; k < n; k++) {
            if (!bench_same_cfg(&e[k].row, r)) continue;
            double v = lat ? e[k].row.p50 : e[k].row.mbps;
            if (v > 0) bench_plot_bar(e[k].row.label, v, base, hi, lat);
        }
        if (floor) bench_plot_bar("softub raw round trip (floor)", fl->rtt_p50_us, base, hi, true);
    }
}

/* ---- main ---------------------------------------------------------------------- */

static int bench_check_flags(void)
{
    if (JET_FLAG(thread_num) < 1 || JET_FLAG(queue_depth) < 1 ||
        (int64_t)JET_FLAG(thread_num) * JET_FLAG(queue_depth) > BENCH_MAX_SLOTS) {
        fprintf(stderr,
                "jetrpc_bench: need thread_num >= 1, queue_depth >= 1 and at most %d "
                "calls in flight\n",
                BENCH_MAX_SLOTS);
        return -EINVAL;
    }
    if (JET_FLAG(message_size) < 0 || JET_FLAG(attachment_size) < 0) {
        fprintf(stderr, "jetrpc_bench: message_size and attachment_size must be >= 0\n");
        return -EINVAL;
    }
    if (JET_FLAG(test_seconds) < 1 || JET_FLAG(warmup_seconds) < 0) {
        fprintf(stderr, "jetrpc_bench: need test_seconds >= 1 and warmup_seconds >= 0\n");
        return -EINVAL;
    }
    jet_connection_type_t t;
    if (jet_connection_type_parse(JET_FLAG(connection_type), &t) < 0) {
        fprintf(stderr, "jetrpc_bench: connection_type must be single, pooled or short\n");
        return -EINVAL;
    }
    const char *am = JET_FLAG(attachment_memory);
    if (strcmp(am, "pool") != 0 && strcmp(am, "user") != 0 && strcmp(am, "registered") != 0) {
        fprintf(stderr, "jetrpc_bench: attachment_memory must be pool, user or registered\n");
        return -EINVAL;
    }
    return 0;
}

/* Runs the standard set (or the single configuration of the flags) for one
 * socket mode; fills results from *n on. */
static int bench_mode(const char *mode_name, bench_result_t *results, int *n, int max)
{
    jet_socket_mode_t mode;
    if (bench_mode_parse(mode_name, &mode) < 0) {
        fprintf(stderr, "jetrpc_bench: unknown socket_mode '%s'\n", mode_name);
        return -EINVAL;
    }
    /* A label that outlives the comma list it came from. */
    const char *label = bench_label(mode_name, mode);
    bench_cfg_t cfgs[4];
    int ncfg = 0;
    if (JET_FLAG(matrix)) {
        cfgs[ncfg++] = (bench_cfg_t){NULL, mode, 1, 1, true, BENCH_MATRIX_MSG, 0};
        cfgs[ncfg++] = (bench_cfg_t){NULL, mode, 8, 8, false, BENCH_MATRIX_MSG, 0};
        cfgs[ncfg++] = (bench_cfg_t){NULL, mode, 1, 1, true, BENCH_MATRIX_MSG, 1 << 20};
        /* Two in flight, as softub_perf's raw SEND bandwidth is measured:
         * the request of one call travels while the answer of the other
         * does. */
        cfgs[ncfg++] = (bench_cfg_t){NULL, mode, 1, 2, false, BENCH_MATRIX_MSG, 1 << 20};
    } else {
        int depth = JET_FLAG(queue_depth);
        cfgs[ncfg++] = (bench_cfg_t){.mode = mode,
                                     .threads = JET_FLAG(thread_num),
                                     .depth = depth,
                                     .sync = depth == 1 && !JET_FLAG(async),
                                     .msg_size = JET_FLAG(message_size),
                                     .att_size = JET_FLAG(attachment_size)};
    }
    bench_server_t srv = {.pid = 0, .ctl = -1};
    const char *addr = JET_FLAG(server);
    if (!addr[0]) {
        int rc = bench_server_spawn(mode_name, &srv);
        if (rc < 0) return rc;
        addr = srv.addr;
    }
    int rc = 0;
    for (int i = 0; i < ncfg && *n < max; i++) {
        cfgs[i].mode_name = label;
        fprintf(stderr, "jetrpc_bench: %s %dx%d %s msg=%d att=%d on %s: %ds warm-up + %ds\n",
                cfgs[i].mode_name, cfgs[i].threads, cfgs[i].depth, cfgs[i].sync ? "sync" : "async",
                cfgs[i].msg_size, cfgs[i].att_size, addr, JET_FLAG(warmup_seconds),
                JET_FLAG(test_seconds));
        rc = bench_run_one(&cfgs[i], addr, srv.ctl >= 0 ? &srv : NULL, &results[*n]);
        if (rc < 0) break;
        (*n)++;
    }
    /* A run abandoned with calls in flight leaves the server alone: stopping
     * it would only turn those calls into errors we can no longer count. */
    if (rc != -ETIMEDOUT) bench_server_reap(&srv);
    return rc;
}

int main(int argc, char **argv)
{
    bench_argc = argc;
    bench_argv = calloc((size_t)argc + 1, sizeof *bench_argv);
    if (!bench_argv) return 1;
    for (int i = 0; i < argc; i++)
        bench_argv[i] = argv[i];
    if (jet_flags_parse(&argc, &argv) < 0) return 2;
    if (argc > 1) {
        fprintf(stderr, "jetrpc_bench: unexpected argument '%s' (see --help)\n", argv[1]);
        return 2;
    }
    if (strcmp(JET_FLAG(bench_role), "server") == 0) {
        int rc = bench_server_main();
        free(bench_argv);
        return rc;
    }
    if (strcmp(JET_FLAG(bench_role), "client") != 0) {
        fprintf(stderr, "jetrpc_bench: unknown --bench_role=%s\n", JET_FLAG(bench_role));
        return 2;
    }
    if (bench_check_flags() < 0) return 2;
    ssize_t exe_len = readlink("/proc/self/exe", bench_exe, sizeof bench_exe - 1);
    if (exe_len <= 0) {
        fprintf(stderr, "jetrpc_bench: cannot find my own executable: %s\n", strerror(errno));
        return 1;
    }
    bench_exe[exe_len] = '\0';
    signal(SIGPIPE, SIG_IGN);

    int msg_size = JET_FLAG(matrix) ? BENCH_MATRIX_MSG : JET_FLAG(message_size);
    char *msg = malloc((size_t)msg_size + 1);
    if (!msg) return 1;
    memset(msg, 'x', (size_t)msg_size);
    msg[msg_size] = '\0';
    bench_request.message = msg;

    if (!getenv("SOFTUB_FABRIC") && !JET_FLAG(server)[0]) {
        /* Our own softub fabric, inherited by every process of this run. An
         * external server (--server) is on the fabric of the environment:
         * on another fabric its jetty ids would name our own queues. */
        char fab[64];
        snprintf(fab, sizeof fab, "jetrpc-bench-%d", (int)getpid());
        setenv("SOFTUB_FABRIC", fab, 1);
    }
    enum { MAX_RESULTS = 64 };
    bench_result_t results[MAX_RESULTS];
    bench_entry_t entries[MAX_RESULTS];
    int nres = 0, nent = 0, rc = 0;
    bool had_errors = false;
    char *modes = strdup(JET_FLAG(socket_mode)), *save = NULL;
    if (!modes) return 1;
    for (char *m = strtok_r(modes, ",", &save); m && rc == 0; m = strtok_r(NULL, ",", &save)) {
        if (bench_mode_is_urma(m) && !JET_FLAG(bench_child)) {
            static int floor_seq;
            bench_floor_t fl = {0, 0, 0};
            bool floor = JET_FLAG(matrix) && bench_floor_run(&fl) == 0;
            floor_seq++;
            int first = nent;
            rc = bench_mode_child(m, entries, &nent, MAX_RESULTS);
            for (int i = first; floor && i < nent; i++) {
                entries[i].has_floor = true;
                entries[i].floor_seq = floor_seq;
                entries[i].floor = fl;
            }
            continue;
        }
        int first = nres;
        rc = bench_mode(m, results, &nres, MAX_RESULTS);
        for (int i = first; i < nres && nent < MAX_RESULTS; i++, nent++) {
            entries[nent] = (bench_entry_t){.res = &results[i]};
            bench_row_from_result(&results[i], &entries[nent].row);
        }
    }
    free(modes);

    bool extras = JET_FLAG(matrix) && !JET_FLAG(bench_child);
    if (!JET_FLAG(json) && (nent > 0 || extras)) bench_print_header();
    for (int i = 0; i < nent; i++) {
        if (entries[i].row.errors > 0) had_errors = true;
        if (JET_FLAG(json) && entries[i].json)
            printf("%s\n", entries[i].json);
        else if (JET_FLAG(json))
            bench_print_json(&entries[i].row, entries[i].res);
        else
            bench_print_row(&entries[i].row);
    }
    if (!JET_FLAG(json))
        for (int i = 0; i < nent; i++)
            bench_print_idle(&entries[i].row);
    if (extras) {
        for (size_t i = 0; i < sizeof bench_refs / sizeof bench_refs[0]; i++) {
            if (JET_FLAG(json))
                bench_print_json(&bench_refs[i], NULL);
            else
                bench_print_row(&bench_refs[i]);
        }
        bench_floor_print(entries, nent);
    }
    if (!JET_FLAG(json) && !JET_FLAG(bench_child)) bench_print_plot(entries, nent);
    for (int i = 0; i < nent; i++)
        free(entries[i].json);
    /* A URMA-mode client tells its parent that every run it was given ended. */
    if (JET_FLAG(bench_child) && rc == 0) printf("%s\n", BENCH_CHILD_DONE);
    fflush(stdout);
    free(msg);
    free(bench_argv);
    if (rc == -ETIMEDOUT) _exit(1); /* calls still in flight: no orderly teardown */
    return rc < 0 || had_errors ? 1 : 0;
}
