/* End-to-end failures over TCP: timeouts, refused connections and retries,
 * servers that restart, die (kill -9 of a child process) or stop gracefully
 * with calls in flight, hundreds of short connections at once, a peer that
 * never answers, and max_concurrency.
 *
 * The service is testutil_rpc.h's echo service, its behaviour picked by the
 * request message; this test adds:
 *   "hold"        keeps the closure; the test answers it later (release_held)
 *   "hang"        never answers; reports the request on the notify pipe (child)
 *   "twice"       answers "first", then calls its closure again with "second"
 * ("sleep:<ms>" blocks the handler: servers here run such handlers in the
 * pool; anything else echoes the message.)
 *
 * The killed server runs in a child process started by re-executing this
 * program with "--hang-server <fd>" (a fork of a threaded process could not
 * start its own event loops). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "base/futex.h"
#include "echo.pb-c.h"
#include "rpc_meta.pb-c.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define WAIT_LIMIT_US (20 * 1000000LL) /* generous guard for anything awaited */

/* ---- the service ------------------------------------------------------------ */

typedef struct held {
    Example__EchoResponse_Closure closure;
    void *closure_data;
    char message[64];
} held_t;

#define MAX_HELD 512
static pthread_mutex_t g_held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_held_cond = PTHREAD_COND_INITIALIZER;
static held_t g_held[MAX_HELD];
static int g_nheld;
static int g_notify_fd = -1; /* child: one byte per request received */

static bool f_hold_or_hang(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                           void *closure_data)
{
    const char *msg = req->message;
    if (strcmp(msg, "hold") == 0 || strncmp(msg, "hold ", 5) == 0) {
        pthread_mutex_lock(&g_held_lock);
        if (g_nheld == MAX_HELD) abort();
        held_t *h = &g_held[g_nheld++];
        h->closure = closure;
        h->closure_data = closure_data;
        snprintf(h->message, sizeof h->message, "%s", msg);
        pthread_cond_broadcast(&g_held_cond);
        pthread_mutex_unlock(&g_held_lock);
        return true;
    }
    if (strcmp(msg, "twice") == 0) {
        Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
        resp.message = "first";
        closure(&resp, closure_data);
        resp.message = "second";
        closure(&resp, closure_data);
        return true;
    }
    if (strcmp(msg, "hang") == 0) {
        if (write(g_notify_fd, "r", 1) != 1) abort();
        return true;
    }
    return false;
}

static jt_echo_service_t g_service;

static bool wait_held(int n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += WAIT_LIMIT_US / 1000000;
    pthread_mutex_lock(&g_held_lock);
    int rc = 0;
    while (g_nheld < n && rc == 0)
        rc = pthread_cond_timedwait(&g_held_cond, &g_held_lock, &ts);
    bool ok = g_nheld >= n;
    pthread_mutex_unlock(&g_held_lock);
    return ok;
}

/* Answers every held call, from this (non-loop) thread. */
static int release_held(void)
{
    held_t copy[MAX_HELD];
    pthread_mutex_lock(&g_held_lock);
    int n = g_nheld;
    memcpy(copy, g_held, (size_t)n * sizeof copy[0]);
    g_nheld = 0;
    pthread_mutex_unlock(&g_held_lock);
    for (int i = 0; i < n; i++) {
        Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
        resp.message = copy[i].message;
        copy[i].closure(&resp, copy[i].closure_data);
    }
    return n;
}

/* ---- helpers ------------------------------------------------------------------ */

typedef struct srv_cfg {
    bool in_pool;
    int max_concurrency;
    int graceful_stop_ms;
    int idle_timeout_sec;
} srv_cfg_t;

static jet_server_t *start_server_port(int port, const srv_cfg_t *cfg, int *port_p)
{
    jet_server_options_t so;
    jet_server_options_init(&so);
    if (cfg) {
        so.usercode_in_pool = cfg->in_pool;
        so.num_workers = cfg->in_pool ? 4 : 0;
        so.max_concurrency = cfg->max_concurrency;
        if (cfg->graceful_stop_ms) so.graceful_stop_ms = cfg->graceful_stop_ms;
        so.idle_timeout_sec = cfg->idle_timeout_sec;
    }
    return jt_echo_server_start_port(&g_service, port, &so, port_p);
}

static bool wait_stats(jet_server_t *srv, uint64_t in_flight, uint64_t open_at_most)
{
    return jt_server_wait_stats(srv, in_flight, open_at_most, WAIT_LIMIT_US, NULL);
}

static bool wait_in_flight(jet_server_t *srv, uint64_t n)
{
    return wait_stats(srv, n, JT_ANY);
}

static bool wait_count(jt_counter_t *c, uint32_t target)
{
    return jt_counter_wait(c, target, WAIT_LIMIT_US);
}

static void report(const char *what, const jet_call_t *call)
{
    fprintf(stderr, "  %s: [E%d] %s (attempts %d, %lld us)\n", what, jet_call_error_code(call),
            jet_call_error_text(call), jet_call_attempts(call),
            (long long)jet_call_latency_us(call));
}

/* A sync echo that must succeed. */
static bool echo_ok(jet_channel_t *ch, const char *msg)
{
    jet_call_t *call = jet_call_create();
    bool ok = jt_echo_call(ch, call, msg, NULL, NULL) == 0 && jt_echo_resp_is(call, msg);
    if (!ok) report(msg, call);
    jet_call_destroy(call);
    return ok;
}

/* A connection-level failure (not a timeout, not a server answer). */
static bool is_connection_error(int code)
{
    return code == JET_EEOF || code == ECONNRESET || code == ECONNREFUSED || code == EPIPE ||
           code == JET_EFAILEDSOCKET;
}

/* ---- cases ---------------------------------------------------------------- */

static void test_timeout(void)
{
    srv_cfg_t cfg = {.in_pool = true};
    int port = 0;
    jet_server_t *srv = start_server_port(0, &cfg, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, 3);
    JT_REQUIRE(ch);
    JT_CHECK(echo_ok(ch, "warm up"));

    jet_call_t *call = jet_call_create();
    jet_call_set_timeout_ms(call, 100);
    JT_CHECK_EQ(jt_echo_call(ch, call, "sleep:1000", NULL, NULL), 0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCTIMEDOUT);
    JT_CHECK(jet_call_response(call) == NULL);
    JT_CHECK_EQ(jet_call_attempts(call), 1); /* a timeout is never retried */
    /* It cannot end before its deadline. */
    JT_CHECK(jet_call_latency_us(call) >= 100000);
    if (jet_call_error_code(call) != JET_ERPCTIMEDOUT) report("timeout", call);

    /* The same channel (and connection) serves the next call at once, while the
     * timed-out handler still sleeps. */
    JT_CHECK(echo_ok(ch, "right after"));
    /* The late answer arrives on the connection and is dropped... */
    JT_CHECK(wait_in_flight(srv, 0));
    /* ...without disturbing later calls. */
    for (int i = 0; i < 5; i++)
        JT_CHECK(echo_ok(ch, "after the late answer"));

    /* Asynchronous timeouts: done runs once each, with ERPCTIMEDOUT. */
    enum { N = 8 };
    jet_call_t *calls[N];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        jet_call_set_timeout_ms(calls[i], 50 + 10 * i);
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], "sleep:400", jt_count_done, &done), 0);
    }
    JT_CHECK(wait_count(&done, N));
    for (int i = 0; i < N; i++) {
        JT_CHECK_EQ(jet_call_error_code(calls[i]), JET_ERPCTIMEDOUT);
        JT_CHECK(jet_call_latency_us(calls[i]) >= (50 + 10 * i) * 1000);
        jet_call_destroy(calls[i]);
    }
    JT_CHECK(echo_ok(ch, "after async timeouts"));
    /* A call reused after a timeout works. */
    jet_call_reset(call);
    JT_CHECK_EQ(jt_echo_call(ch, call, "reused", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "reused"));
    jet_call_destroy(call);
    JT_CHECK(wait_in_flight(srv, 0));
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

static void test_connection_refused(void)
{
    int port = jt_tcp_free_port();
    JT_CHECK_EQ(jt_tcp_connect_result(port), -ECONNREFUSED);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, 2);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, call, "nobody there", NULL, NULL), 0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
    JT_CHECK_EQ(jet_call_attempts(call), 3); /* max_retry + 1 */
    JT_CHECK(jet_call_response(call) == NULL);
    /* Refused at once, not at the 10 s deadline (generous guard). */
    JT_CHECK(jet_call_latency_us(call) < 5000000);

    /* The call's own max_retry overrides the channel's. */
    static const int retries[] = {0, 1, 5};
    for (size_t i = 0; i < sizeof retries / sizeof retries[0]; i++) {
        jet_call_reset(call);
        jet_call_set_max_retry(call, retries[i]);
        JT_CHECK_EQ(jt_echo_call(ch, call, "nobody there", NULL, NULL), 0);
        JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
        JT_CHECK_EQ(jet_call_attempts(call), retries[i] + 1);
    }
    /* Asynchronous. */
    jt_counter_t done = {0};
    jet_call_reset(call);
    JT_CHECK_EQ(jt_echo_call(ch, call, "nobody there", jt_count_done, &done), 0);
    JT_CHECK(wait_count(&done, 1));
    JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
    JT_CHECK_EQ(jet_call_attempts(call), 3);
    jet_call_destroy(call);

    /* The other connection types fail the same way. */
    for (int type = JET_CONNECTION_POOLED; type <= JET_CONNECTION_SHORT; type++) {
        jet_channel_t *c2 = jt_channel_open_port(port, (jet_connection_type_t)type, 10000, 1);
        JT_REQUIRE(c2);
        call = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(c2, call, "nobody there", NULL, NULL), 0);
        JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
        JT_CHECK_EQ(jet_call_attempts(call), 2);
        jet_call_destroy(call);
        jet_channel_destroy(c2);
    }

    /* Once a server listens there, the same channel connects. */
    jet_server_t *srv = start_server_port(port, NULL, NULL);
    JT_REQUIRE(srv);
    JT_CHECK(echo_ok(ch, "somebody now"));
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

static void test_server_restart(void)
{
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    JT_REQUIRE(srv);
    jet_channel_t *single = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, 3);
    jet_channel_t *pooled = jt_channel_open_port(port, JET_CONNECTION_POOLED, 10000, 3);
    JT_REQUIRE(single && pooled);
    JT_CHECK(echo_ok(single, "before restart"));
    JT_CHECK(echo_ok(pooled, "before restart"));
    for (int round = 0; round < 3; round++) {
        jt_server_stop(srv);
        /* Nobody listens: a call fails with a connection error. */
        jet_call_t *call = jet_call_create();
        jet_call_set_max_retry(call, 1);
        JT_CHECK_EQ(jt_echo_call(single, call, "while down", NULL, NULL), 0);
        JT_CHECK(jet_call_failed(call));
        JT_CHECK(is_connection_error(jet_call_error_code(call)));
        if (!is_connection_error(jet_call_error_code(call))) report("while down", call);
        jet_call_destroy(call);

        srv = start_server_port(port, NULL, NULL);
        JT_REQUIRE(srv);
        /* The next call reconnects (the pooled channel may first pick an idle
         * connection the old server closed: that attempt is retried). */
        char msg[32];
        snprintf(msg, sizeof msg, "after restart %d", round);
        JT_CHECK(echo_ok(single, msg));
        JT_CHECK(echo_ok(pooled, msg));
        JT_CHECK(echo_ok(single, msg));
        jet_server_stats_t st;
        jet_server_get_stats(srv, &st);
        JT_CHECK_EQ(st.requests, 3);
        JT_CHECK_EQ(st.connections_accepted, 2);
    }
    jet_channel_destroy(single);
    jet_channel_destroy(pooled);
    jt_server_stop(srv);
}

/* ---- a server stopped or destroyed from its own handler (child process) ---- */

static jet_server_t *g_self_srv;

/* "stop" and "destroy" stop or destroy the server they run in, then answer
 * what that did; anything else echoes. */
static bool f_self_stop(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                        void *closure_data)
{
    char text[64];
    if (strcmp(req->message, "stop") == 0)
        snprintf(text, sizeof text, "stop %d", jet_server_stop(g_self_srv));
    else if (strcmp(req->message, "destroy") == 0)
        snprintf(text, sizeof text, "destroy returned");
    else
        return false;
    if (strcmp(req->message, "destroy") == 0) jet_server_destroy(g_self_srv);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = text;
    closure(&resp, closure_data);
    return true;
}

/* Child: a server whose handler (on the loop, or in the pool with pool
 * "1") gets "stop" or "destroy". 0 when the handler was refused at once
 * and answered, the server went on serving and the main thread then
 * stopped and destroyed it; 1 otherwise. */
static int child_in_handler(const char *what, const char *pool)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) return 3;
    static jt_echo_service_t svc;
    jt_echo_service_init(&svc, &(jt_echo_opts_t){.hook = f_self_stop});
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.usercode_in_pool = strcmp(pool, "1") == 0;
    so.num_workers = 2;
    so.graceful_stop_ms = 200;
    int port = 0;
    g_self_srv = jt_echo_server_start(&svc, "127.0.0.1:0", &so, &port);
    if (!g_self_srv) return 2;
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 0);
    jet_call_t *call = jet_call_create();
    if (!ch || !call) return 2;
    char expected[64];
    if (strcmp(what, "stop") == 0)
        snprintf(expected, sizeof expected, "stop %d", -EDEADLK);
    else
        snprintf(expected, sizeof expected, "destroy returned");
    int rc = 0;
    jt_echo_call(ch, call, what, NULL, NULL);
    if (!jt_echo_resp_is(call, expected)) {
        fprintf(stderr, "  %s in a handler (pool %s): [E%d] %s, message '%s'\n", what, pool,
                jet_call_error_code(call), jet_call_error_text(call),
                jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "");
        rc = 1;
    }
    jet_call_reset(call);
    jt_echo_call(ch, call, "still serving", NULL, NULL);
    if (!jt_echo_resp_is(call, "still serving")) {
        fprintf(stderr, "  after %s in a handler (pool %s): [E%d] %s\n", what, pool,
                jet_call_error_code(call), jet_call_error_text(call));
        rc = 1;
    }
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    if (jet_server_stop(g_self_srv) != 0) rc = 1;
    jet_server_destroy(g_self_srv);
    return rc;
}

/* jet_server_stop waits for the loops to close the connections and for the
 * handlers to answer, jet_server_destroy for the handlers too: from a
 * handler (or any loop thread) they would wait for themselves for ever.
 * stop there is refused with -EDEADLK (on the loop; in the pool it may
 * stop), destroy refused from any of the server's handlers, and the server
 * goes on until its controlling thread ends it. Each case runs in a child
 * process, killed if it hangs. */
static void test_stop_or_destroy_in_handler(void)
{
    const char *cases[][2] = {{"stop", "0"}, {"destroy", "0"}, {"destroy", "1"}};
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    JT_REQUIRE(n > 0);
    exe[n] = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {exe, "--in-handler", (char *)cases[i][0], (char *)cases[i][1], NULL};
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            execv(exe, argv);
            _exit(127);
        }
        JT_REQUIRE(pid > 0);
        int st = 0;
        bool ended = JT_WAIT_EVERY(waitpid(pid, &st, WNOHANG) == pid, 20 * 1000000LL, 2000);
        if (!ended) {
            fprintf(stderr, "  %s in a handler (pool %s): hung, killed\n", cases[i][0],
                    cases[i][1]);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        JT_CHECK_AT(cases[i][0], ended && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}

/* ---- the killed server (child process) ---- */

static int child_hang_server(int fd)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) return 3;
    g_notify_fd = fd;
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    if (!srv) return 2;
    uint32_t p = (uint32_t)port;
    if (write(fd, &p, sizeof p) != (ssize_t)sizeof p) return 2;
    for (;;)
        pause();
}

static pid_t spawn_hang_server(int *rfd_p, int *port_p)
{
    char exe[4096], fdtext[16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    int p[2];
    if (pipe2(p, 0) < 0) return -1;
    fcntl(p[0], F_SETFD, FD_CLOEXEC);
    snprintf(fdtext, sizeof fdtext, "%d", p[1]);
    char *argv[] = {exe, "--hang-server", fdtext, NULL};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execv(exe, argv);
        _exit(127);
    }
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        return -1;
    }
    uint32_t port = 0;
    struct pollfd pfd = {.fd = p[0], .events = POLLIN};
    if (poll(&pfd, 1, 20000) != 1 || read(p[0], &port, sizeof port) != (ssize_t)sizeof port) {
        kill(pid, SIGKILL);
        jt_wait(pid);
        close(p[0]);
        return -1;
    }
    *rfd_p = p[0];
    *port_p = (int)port;
    return pid;
}

/* Reads n notification bytes (bounded wait). */
static bool read_notes(int fd, int n)
{
    uint64_t until = jt_now_us() + WAIT_LIMIT_US;
    char buf[64];
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int left_ms = (int)(((int64_t)until - (int64_t)jt_now_us()) / 1000);
        if (left_ms <= 0 || poll(&pfd, 1, left_ms) != 1) return false;
        ssize_t r = read(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf);
        if (r <= 0) return false;
        n -= (int)r;
    }
    return true;
}

static void test_server_killed(void)
{
    int rfd = -1, port = 0;
    pid_t pid = spawn_hang_server(&rfd, &port);
    JT_REQUIRE(pid > 0);
    /* Deadlines far away: the calls must end because the connection died. */
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 30000, 0);
    JT_REQUIRE(ch);
    enum { N = 10 };
    jet_call_t *calls[N];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        /* Half of them may retry: their retries find nobody listening. */
        if (i % 2) jet_call_set_max_retry(calls[i], 2);
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], "hang", jt_count_done, &done), 0);
    }
    /* Every request reached the child's handler before the kill. */
    JT_CHECK(read_notes(rfd, N));
    JT_CHECK_EQ(atomic_load(&done.n), 0);
    uint64_t t_kill = jt_now_us();
    kill(pid, SIGKILL);
    JT_CHECK_EQ(jt_wait(pid), 128 + SIGKILL);
    close(rfd);
    JT_CHECK(wait_count(&done, N));
    uint64_t t_done = jt_now_us();
    /* Far sooner than the 30 s deadline (generous guard). */
    JT_CHECK(t_done - t_kill < 15000000);
    for (int i = 0; i < N; i++) {
        int code = jet_call_error_code(calls[i]);
        JT_CHECK(jet_call_failed(calls[i]));
        JT_CHECK(code != JET_ERPCTIMEDOUT);
        JT_CHECK(is_connection_error(code));
        if (i % 2 == 0) {
            /* No retry: the connection's own end (the peer closed after reading all). */
            JT_CHECK_EQ(code, JET_EEOF);
            JT_CHECK_EQ(jet_call_attempts(calls[i]), 1);
        } else {
            /* Retried on new connections, refused: max_retry + 1 attempts. */
            JT_CHECK_EQ(code, ECONNREFUSED);
            JT_CHECK_EQ(jet_call_attempts(calls[i]), 3);
        }
        if (!is_connection_error(code) || code == JET_ERPCTIMEDOUT) report("killed", calls[i]);
    }
    /* A server is up again on that port: the next call on the same channel
     * reconnects and succeeds. */
    jet_server_t *srv = start_server_port(port, NULL, NULL);
    JT_REQUIRE(srv);
    JT_CHECK(echo_ok(ch, "new server"));
    jet_call_reset(calls[0]);
    JT_CHECK_EQ(jt_echo_call(ch, calls[0], "reused after kill", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(calls[0], "reused after kill"));
    for (int i = 0; i < N; i++)
        jet_call_destroy(calls[i]);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* ---- graceful stop ---- */

typedef struct stopper {
    jet_server_t *srv;
    _Atomic int done;
} stopper_t;

static void *stopper_main(void *arg)
{
    stopper_t *st = arg;
    jet_server_stop(st->srv);
    atomic_store(&st->done, 1);
    return NULL;
}

static void test_graceful_stop_delayed_handlers(void)
{
    /* Handlers that take 100 ms (in the pool), stop while they run. */
    srv_cfg_t cfg = {.in_pool = true};
    int port = 0;
    jet_server_t *srv = start_server_port(0, &cfg, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 20000, 0);
    JT_REQUIRE(ch);
    enum { N = 4 };
    jet_call_t *calls[N];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], "sleep:100", jt_count_done, &done), 0);
    }
    JT_CHECK(wait_in_flight(srv, N));
    jet_server_stop(srv);
    /* Stop waited for them: every one was answered. */
    JT_CHECK(wait_count(&done, N));
    for (int i = 0; i < N; i++) {
        JT_CHECK(jt_echo_resp_is(calls[i], "sleep:100"));
        if (!jt_echo_resp_is(calls[i], "sleep:100")) report("in flight at stop", calls[i]);
        jet_call_destroy(calls[i]);
    }
    /* New connections are refused. */
    JT_CHECK_EQ(jt_tcp_connect_result(port), -ECONNREFUSED);
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.in_flight, 0);
    JT_CHECK_EQ(st.connections_open, 0);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, call, "after stop", NULL, NULL), 0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK(is_connection_error(jet_call_error_code(call)) ||
             jet_call_error_code(call) == JET_ELOGOFF);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

static void test_graceful_stop_held_calls(void)
{
    /* Stop blocks while handlers hold their answers; meanwhile the listener is
     * closed and a request on an existing connection gets ELOGOFF. */
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 20000, 0);
    JT_REQUIRE(ch);
    enum { N = 6 };
    jet_call_t *calls[N];
    char msgs[N][16];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        snprintf(msgs[i], sizeof msgs[i], "hold %d", i);
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], msgs[i], jt_count_done, &done), 0);
    }
    JT_CHECK(wait_held(N));
    stopper_t stopper = {.srv = srv};
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, stopper_main, &stopper) == 0);
    /* The listener goes first. */
    uint64_t until = jt_now_us() + WAIT_LIMIT_US;
    while (jt_tcp_connect_result(port) != -ECONNREFUSED && jt_now_us() < until)
        usleep(1000);
    JT_CHECK_EQ(jt_tcp_connect_result(port), -ECONNREFUSED);
    JT_CHECK_EQ(atomic_load(&stopper.done), 0);
    /* A new channel cannot connect. */
    jet_channel_t *ch2 = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 0);
    JT_REQUIRE(ch2);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch2, call, "new connection", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
    /* The open connection still carries answers: a new request is refused with ELOGOFF. */
    jet_call_reset(call);
    JT_CHECK_EQ(jt_echo_call(ch, call, "new request", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ELOGOFF);
    if (jet_call_error_code(call) != JET_ELOGOFF) report("during stop", call);
    JT_CHECK_EQ(atomic_load(&done.n), 0);
    /* The handlers answer; stop finishes; every held call succeeded. */
    JT_CHECK_EQ(release_held(), N);
    pthread_join(th, NULL);
    JT_CHECK(wait_count(&done, N));
    for (int i = 0; i < N; i++) {
        JT_CHECK(jt_echo_resp_is(calls[i], msgs[i]));
        jet_call_destroy(calls[i]);
    }
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.in_flight, 0);
    JT_CHECK_EQ(st.connections_open, 0);
    jet_call_destroy(call);
    jet_channel_destroy(ch2);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

static void test_many_short_connections(void)
{
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SHORT, 30000, 0);
    JT_REQUIRE(ch);
    enum { N = 200 };
    jet_call_t *calls[N];
    char msgs[N][16];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        snprintf(msgs[i], sizeof msgs[i], "hold %d", i);
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], msgs[i], jt_count_done, &done), 0);
    }
    /* All 200 are in their handlers at once, each on its own connection. */
    bool all_held = wait_held(N);
    JT_CHECK(all_held);
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.in_flight, N);
    JT_CHECK_EQ(st.connections_open, N);
    JT_CHECK_EQ(st.connections_accepted, N);
    JT_CHECK_EQ(release_held(), all_held ? N : (int)st.in_flight);
    JT_CHECK(wait_count(&done, N));
    int bad = 0;
    for (int i = 0; i < N; i++) {
        if (!jt_echo_resp_is(calls[i], msgs[i]) && bad++ < 3) report("short", calls[i]);
        jet_call_destroy(calls[i]);
    }
    JT_CHECK_EQ(bad, 0);
    /* Each connection closes after its call. */
    JT_CHECK(wait_stats(srv, 0, 0));
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

typedef struct drainer {
    int lfd;
    int cfd;
    _Atomic bool stop;
    _Atomic size_t bytes;
} drainer_t;

/* Accepts one connection and reads everything, answering nothing. */
static void *drainer_main(void *arg)
{
    drainer_t *d = arg;
    struct pollfd pfd = {.fd = d->lfd, .events = POLLIN};
    while (!atomic_load(&d->stop) && poll(&pfd, 1, 50) == 0) {
    }
    if (atomic_load(&d->stop)) return NULL;
    d->cfd = accept(d->lfd, NULL, NULL);
    if (d->cfd < 0) return NULL;
    char buf[4096];
    while (!atomic_load(&d->stop)) {
        struct pollfd cp = {.fd = d->cfd, .events = POLLIN};
        if (poll(&cp, 1, 50) != 1) continue;
        ssize_t r = read(d->cfd, buf, sizeof buf);
        if (r <= 0) break;
        atomic_fetch_add(&d->bytes, (size_t)r);
    }
    return NULL;
}

static void test_peer_never_answers(void)
{
    /* 1: a listener that never accepts (the kernel completes the handshake).
     * 2: a peer that accepts and reads everything but never answers. */
    for (int variant = 0; variant < 2; variant++) {
        int port = 0;
        int lfd = jt_tcp_listen(64, &port);
        if (lfd < 0) abort();
        drainer_t d = {.lfd = lfd, .cfd = -1};
        pthread_t th;
        if (variant == 1) JT_REQUIRE(pthread_create(&th, NULL, drainer_main, &d) == 0);
        jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 200, 3);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(ch, call, "anyone?", NULL, NULL), 0);
        JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCTIMEDOUT);
        JT_CHECK_EQ(jet_call_attempts(call), 1);
        JT_CHECK(jet_call_latency_us(call) >= 200000);
        enum { N = 20 };
        jet_call_t *calls[N];
        jt_counter_t done = {0};
        for (int i = 0; i < N; i++) {
            calls[i] = jet_call_create();
            jet_iobuf_append(jet_call_request_attachment(calls[i]), "payload", 7);
            JT_CHECK_EQ(jt_echo_call(ch, calls[i], "anyone?", jt_count_done, &done), 0);
        }
        JT_CHECK(wait_count(&done, N));
        for (int i = 0; i < N; i++) {
            JT_CHECK_EQ(jet_call_error_code(calls[i]), JET_ERPCTIMEDOUT);
            jet_call_destroy(calls[i]);
        }
        if (variant == 1) {
            /* The requests did go out. */
            JT_CHECK(atomic_load(&d.bytes) > 0);
            atomic_store(&d.stop, true);
            pthread_join(th, NULL);
            if (d.cfd >= 0) close(d.cfd);
        }
        jet_call_destroy(call);
        jet_channel_destroy(ch);
        close(lfd);
    }
}

static void test_max_concurrency(void)
{
    srv_cfg_t cfg = {.max_concurrency = 2};
    int port = 0;
    jet_server_t *srv = start_server_port(0, &cfg, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 20000, 3);
    JT_REQUIRE(ch);
    jet_call_t *held[2];
    jt_counter_t done = {0};
    for (int i = 0; i < 2; i++) {
        held[i] = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(ch, held[i], "hold", jt_count_done, &done), 0);
    }
    JT_CHECK(wait_held(2));
    jet_server_stats_t before, after;
    jet_server_get_stats(srv, &before);
    jet_call_t *call = jet_call_create();
    /* ELIMIT is retried, as by brpc's retry policy: max_retry 3 gives each
     * call four attempts, all refused while the two are held. */
    for (int i = 0; i < 3; i++) {
        jet_call_reset(call);
        JT_CHECK_EQ(jt_echo_call(ch, call, "third", NULL, NULL), 0);
        JT_CHECK_EQ(jet_call_error_code(call), JET_ELIMIT);
        JT_CHECK_EQ(jet_call_attempts(call), 4);
        JT_CHECK(strstr(jet_call_error_text(call), "max_concurrency") != NULL);
    }
    /* Without retries, one attempt. */
    jet_call_reset(call);
    jet_call_set_max_retry(call, 0);
    JT_CHECK_EQ(jt_echo_call(ch, call, "third", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ELIMIT);
    JT_CHECK_EQ(jet_call_attempts(call), 1);
    jet_call_set_max_retry(call, -1);
    /* Other connections are limited the same way. */
    jet_channel_t *ch2 = jt_channel_open_port(port, JET_CONNECTION_SHORT, 20000, 3);
    JT_REQUIRE(ch2);
    jet_call_reset(call);
    JT_CHECK_EQ(jt_echo_call(ch2, call, "third", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ELIMIT);
    JT_CHECK_EQ(jet_call_attempts(call), 4);
    JT_CHECK(wait_in_flight(srv, 2));
    jet_server_get_stats(srv, &after);
    JT_CHECK_EQ(after.requests - before.requests, 3 * 4 + 1 + 4);
    JT_CHECK_EQ(after.requests_failed - before.requests_failed, 3 * 4 + 1 + 4);
    JT_CHECK_EQ(release_held(), 2);
    JT_CHECK(wait_count(&done, 2));
    for (int i = 0; i < 2; i++) {
        JT_CHECK(jt_echo_resp_is(held[i], "hold"));
        jet_call_destroy(held[i]);
    }
    /* Under the limit again. */
    JT_CHECK(wait_in_flight(srv, 0));
    JT_CHECK(echo_ok(ch, "fits now"));
    JT_CHECK(echo_ok(ch2, "fits now"));
    jet_call_destroy(call);
    jet_channel_destroy(ch2);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

static void destroy_done(jet_call_t *call, void *arg)
{
    jet_call_destroy(call);
    atomic_fetch_add(&((jt_counter_t *)arg)->n, 1);
}

/* n asynchronous echoes of msg on ch, each call destroyed in its done. */
static void issue_destroyed(jet_channel_t *ch, const char *msg, int n, jt_counter_t *done)
{
    for (int i = 0; i < n; i++) {
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_CHECK_EQ(jt_echo_call(ch, call, msg, destroy_done, done), 0);
    }
}

/* An attempt may end on another thread as soon as it is linked and armed
 * (its deadline, a connection failure and its retry on the loop) while the
 * issuing thread is still writing it: the call must not be touched, nor the
 * socket used without a reference, from then on. Asynchronous calls
 * destroyed in their done callback, (1) on short connections with a
 * deadline already due, (2) on a single connection to a port that refuses
 * (the loop retries while the caller writes). AddressSanitizer sees any use
 * after free; every call must end exactly once. */
static void test_attempt_ends_while_issuing(void)
{
    enum { N = 10000 };
    jet_server_t *srv = start_server_port(0, NULL, NULL);
    JT_REQUIRE(srv);
    int port = jet_server_listen_port(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SHORT, 0, 0);
    JT_REQUIRE(ch);
    jt_counter_t done = {0};
    issue_destroyed(ch, "due", N, &done);
    JT_CHECK(wait_count(&done, N));
    jet_channel_destroy(ch);
    jt_server_stop(srv);

    int refused = jt_tcp_free_port();
    ch = jt_channel_open_port(refused, JET_CONNECTION_SINGLE, 10000, 3);
    JT_REQUIRE(ch);
    jt_counter_t done2 = {0};
    issue_destroyed(ch, "nobody", N, &done2);
    JT_CHECK(wait_count(&done2, N));
    jet_channel_destroy(ch);
    usleep(100000);
    JT_CHECK_EQ(atomic_load(&done.n), (uint32_t)N);
    JT_CHECK_EQ(atomic_load(&done2.n), (uint32_t)N);
}

/* A channel destroyed while its calls wait for answers (held by the
 * server): every call ends once with ECLOSE, not retried on a new
 * connection, whatever the connection type; the server goes on. */
static void test_channel_destroyed_in_flight(void)
{
    enum { N = 20 };
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    JT_REQUIRE(srv);
    for (int type = JET_CONNECTION_SINGLE; type <= JET_CONNECTION_SHORT; type++) {
        jet_channel_t *ch = jt_channel_open_port(port, (jet_connection_type_t)type, 10000, 3);
        JT_REQUIRE(ch);
        jet_call_t *calls[N];
        jt_counter_t done = {0};
        for (int i = 0; i < N; i++) {
            calls[i] = jet_call_create();
            JT_REQUIRE(calls[i]);
            JT_CHECK_EQ(jt_echo_call(ch, calls[i], "hold", jt_count_done, &done), 0);
        }
        JT_CHECK(wait_held(N));
        jet_channel_destroy(ch);
        JT_CHECK(wait_count(&done, N));
        for (int i = 0; i < N; i++) {
            JT_CHECK_EQ(jet_call_error_code(calls[i]), JET_ECLOSE);
            JT_CHECK_EQ(jet_call_attempts(calls[i]), 1);
        }
        JT_CHECK_EQ(release_held(), N); /* answers to closed connections */
        usleep(20000);
        JT_CHECK_EQ(atomic_load(&done.n), (uint32_t)N); /* once each */
        for (int i = 0; i < N; i++)
            jet_call_destroy(calls[i]);
    }
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, 0);
    JT_REQUIRE(ch);
    JT_CHECK(echo_ok(ch, "after destroyed channels"));
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

typedef struct closer {
    int lfd;
    _Atomic bool stop;
} closer_t;

/* Accepts connections and closes them at once (after the request came). */
static void *closer_main(void *arg)
{
    closer_t *c = arg;
    while (!atomic_load(&c->stop)) {
        struct pollfd p = {.fd = c->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept(c->lfd, NULL, NULL);
        if (fd < 0) continue;
        char buf[256];
        (void)!read(fd, buf, sizeof buf);
        close(fd);
    }
    return NULL;
}

/* Failed attempts on pooled and short connections give their connections
 * back (closed): a channel retrying against a server that closes every
 * connection keeps no file descriptor per attempt until it is destroyed. */
static void test_failed_attempts_release_connections(void)
{
    enum { N = 30 };
    int port = 0;
    closer_t cl = {.lfd = jt_tcp_listen(64, &port)};
    JT_REQUIRE(cl.lfd >= 0);
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, closer_main, &cl) == 0);
    for (int type = JET_CONNECTION_POOLED; type <= JET_CONNECTION_SHORT; type++) {
        jet_channel_t *ch = jt_channel_open_port(port, (jet_connection_type_t)type, 10000, 3);
        JT_REQUIRE(ch);
        int before = open_fds();
        for (int i = 0; i < N; i++) {
            jet_call_t *call = jet_call_create();
            JT_CHECK_EQ(jt_echo_call(ch, call, "closed on", NULL, NULL), 0);
            JT_CHECK_EQ(jet_call_error_code(call), JET_EEOF);
            JT_CHECK_EQ(jet_call_attempts(call), 4);
            jet_call_destroy(call);
        }
        /* Closes finish on the loops (each connection's last reference). */
        int after = open_fds();
        for (int i = 0; i < 200 && after > before + 4; i++) {
            usleep(10000);
            after = open_fds();
        }
        fprintf(stderr, "  %d descriptors before, %d after %d calls of 4 attempts\n", before, after,
                N);
        JT_CHECK(after <= before + 4);
        jet_channel_destroy(ch);
    }
    atomic_store(&cl.stop, true);
    pthread_join(th, NULL);
    close(cl.lfd);
}

/* A pooled connection whose call ended without its answer (a timeout while
 * the server still works on it) is closed, not lent to the next call: the
 * late answer would share the connection with that call (brpc does the
 * same). One that got its answer is reused. */
static void test_pooled_connection_after_a_timeout(void)
{
    jt_echo_service_t svc;
    jt_echo_service_init(&svc, NULL);
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.usercode_in_pool = true;
    so.num_workers = 2;
    int port = 0;
    jet_server_t *srv = jt_echo_server_start_port(&svc, 0, &so, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_POOLED, 200, 0);
    JT_REQUIRE(ch);
    jet_call_t *c = jet_call_create();
    JT_REQUIRE(c);
    JT_CHECK_EQ(jt_echo_call(ch, c, "first", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(c, "first"));
    jet_call_reset(c);
    JT_CHECK_EQ(jt_echo_call(ch, c, "reused", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(c, "reused"));
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    jet_call_reset(c);
    JT_CHECK_EQ(jt_echo_call(ch, c, "sleep:600", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(c), JET_ERPCTIMEDOUT);
    jet_call_reset(c);
    JT_CHECK_EQ(jt_echo_call(ch, c, "after", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(c, "after"));
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 2);
    jet_call_destroy(c);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

static jet_server_t *g_stopping_srv;

static void *stop_when_one_in_flight(void *arg)
{
    (void)arg;
    jt_server_wait_stats(g_stopping_srv, 1, JT_ANY, 20000000, NULL);
    jet_server_stop(g_stopping_srv);
    return NULL;
}

/* A graceful stop closes a connection only once the answers handed to it
 * were written: a large answer given during the grace arrives whole. */
static void test_graceful_stop_writes_answers_out(void)
{
    enum { ATT = 24 << 20 };
    char *buf = malloc(ATT);
    JT_REQUIRE(buf);
    memset(buf, 'a', ATT);
    for (int round = 0; round < 3; round++) {
        jt_echo_service_t svc;
        jt_echo_service_init(&svc, NULL);
        jet_server_options_t so;
        jet_server_options_init(&so);
        so.graceful_stop_ms = 10000;
        int port = 0;
        g_stopping_srv = jt_echo_server_start_port(&svc, 0, &so, &port);
        JT_REQUIRE(g_stopping_srv);
        jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 20000, 0);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_REQUIRE(jet_iobuf_append(jet_call_request_attachment(call), buf, ATT) == 0);
        pthread_t th;
        JT_REQUIRE(pthread_create(&th, NULL, stop_when_one_in_flight, NULL) == 0);
        /* Answered 300 ms after the stop began, well within its grace. */
        JT_CHECK_EQ(jt_echo_call(ch, call, "later:300", NULL, NULL), 0);
        JT_CHECK_AT(jet_call_error_text(call) ? jet_call_error_text(call) : "ok",
                    !jet_call_failed(call));
        JT_CHECK_EQ(jet_iobuf_len(jet_call_response_attachment(call)), ATT);
        pthread_join(th, NULL);
        jet_call_destroy(call);
        jet_channel_destroy(ch);
        jet_server_destroy(g_stopping_srv);
    }
    free(buf);
}

typedef struct reissuer {
    jet_channel_t *ch;
    _Atomic int ended, refused;
} reissuer_t;

/* Reissues its call whatever the outcome, until jet_channel_call refuses. */
static void reissue_done(jet_call_t *call, void *arg)
{
    reissuer_t *r = arg;
    if (jet_call_error_code(call) == JET_ECLOSE) atomic_fetch_add(&r->ended, 1);
    int rc = jt_echo_call(r->ch, call, "hold", reissue_done, r);
    if (rc == -JET_ECLOSE) atomic_fetch_add(&r->refused, 1);
}

/* A done callback that reissues its call as its channel is destroyed: the
 * reissue is refused with ECLOSE, and the chain ends there. */
static void test_reissue_on_destroyed_channel(void)
{
    enum { N = 8 };
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    JT_REQUIRE(srv);
    reissuer_t r = {.ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, 3)};
    JT_REQUIRE(r.ch);
    jet_call_t *calls[N];
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(r.ch, calls[i], "hold", reissue_done, &r), 0);
    }
    JT_CHECK(wait_held(N));
    jet_channel_destroy(r.ch);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&r.refused) == N, WAIT_LIMIT_US));
    JT_CHECK_EQ(atomic_load(&r.ended), N);
    JT_CHECK_EQ(release_held(), N);
    for (int i = 0; i < N; i++)
        jet_call_destroy(calls[i]);
    jt_server_stop(srv);
}

/* A baidu_std response to correlation id cid, with message msg, on c. */
/* An answer to cid on c: message msg, or with error_code code (not 0) and
 * msg as its text. */
static void answer_code_on(jt_conn_t *c, uint64_t cid, int32_t code, const char *msg)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    meta.response = &rm;
    meta.has_correlation_id = true;
    meta.correlation_id = (int64_t)cid;
    if (code != 0) {
        rm.has_error_code = true;
        rm.error_code = code;
        rm.error_text = (char *)msg;
    }
    size_t len = 0;
    uint8_t *body =
        code != 0 ? NULL : jt_echo_request_bytes(msg, &len); /* EchoResponse has the same shape */
    jt_bytes_t b = {0};
    jt_bytes_frame(&b, &meta, body, len, NULL, 0);
    JT_CHECK_EQ(jt_conn_write(c, b.p, b.len), 0);
    free(b.p);
    free(body);
}

static void answer_on(jt_conn_t *c, uint64_t cid, const char *msg)
{
    answer_code_on(c, cid, 0, msg);
}

/* The correlation id of the next request on c (0: none came). */
static uint64_t request_cid(jt_conn_t *c)
{
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    uint64_t cid = 0;
    if (jt_conn_frame(c, 3000, &f, NULL, NULL) == 1 && f.meta->has_correlation_id)
        cid = (uint64_t)f.meta->correlation_id;
    jet__baidu_frame_fini(&f);
    return cid;
}

/* A server that answers on one connection with the correlation id of a call
 * waiting on another connection (to it or to another server), with a
 * message or an error: the answer is dropped like an unknown id, and the
 * connection's own answers go on at once. That call still gets its own
 * answer, and both connections' calls end normally. */
static void test_answer_on_the_wrong_connection(void)
{
    int port = 0;
    int lfd = jt_tcp_listen(8, &port);
    JT_REQUIRE(lfd >= 0);
    jet_channel_t *ch1 = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 0);
    jet_channel_t *ch2 = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 0);
    JT_REQUIRE(ch1 && ch2);
    jt_counter_t done = {0};
    jet_call_t *x = jet_call_create(), *y = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch1, x, "x", jt_count_done, &done), 0);
    int fd1 = jt_tcp_accept(lfd, 3000);
    JT_REQUIRE(fd1 >= 0);
    jt_conn_t c1, c2;
    jt_conn_init(&c1, fd1);
    uint64_t cid_x = request_cid(&c1);
    JT_CHECK_EQ(jt_echo_call(ch2, y, "y", jt_count_done, &done), 0);
    int fd2 = jt_tcp_accept(lfd, 3000);
    JT_REQUIRE(fd2 >= 0);
    jt_conn_init(&c2, fd2);
    uint64_t cid_y = request_cid(&c2);
    JT_REQUIRE(cid_x != 0 && cid_y != 0);

    answer_on(&c2, cid_x, "from the wrong connection");
    answer_code_on(&c2, cid_x, 1003, "an error from the wrong connection");
    usleep(100 * 1000);
    JT_CHECK_EQ(atomic_load(&done.n), 0);
    /* The wrong answer is dropped, not retried: the connection's next
     * answer is read at once, while x is still out (its reader had claimed
     * and parked that answer in turn until x ended). */
    answer_on(&c2, cid_y, "y-ok");
    JT_CHECK(wait_count(&done, 1));
    JT_CHECK(jt_echo_resp_is(y, "y-ok"));
    JT_CHECK(!jet_call_failed(y));
    answer_on(&c1, cid_x, "x-ok");
    JT_CHECK(wait_count(&done, 2));
    JT_CHECK(jt_echo_resp_is(x, "x-ok"));
    JT_CHECK(jt_echo_resp_is(y, "y-ok"));
    /* The connections still carry calls. */
    jt_counter_t again = {0};
    JT_CHECK_EQ(jt_echo_call(ch2, y, "y2", jt_count_done, &again), 0);
    uint64_t cid_y2 = request_cid(&c2);
    answer_on(&c2, cid_y2, "y2-ok");
    JT_CHECK(wait_count(&again, 1));
    JT_CHECK(jt_echo_resp_is(y, "y2-ok"));
    jet_call_destroy(x);
    jet_call_destroy(y);
    jet_channel_destroy(ch1);
    jet_channel_destroy(ch2);
    jt_conn_close(&c1);
    jt_conn_close(&c2);
    close(lfd);
}

/* A server answering with a negative error_code (no brpc code, no errno
 * value): the call fails with a positive code, as call.h promises, and the
 * text keeps the server's code and text. */
static void test_negative_error_code_answer(void)
{
    int port = 0;
    int lfd = jt_tcp_listen(8, &port);
    JT_REQUIRE(lfd >= 0);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 0);
    JT_REQUIRE(ch);
    jt_counter_t done = {0};
    jet_call_t *x = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, x, "x", jt_count_done, &done), 0);
    int fd = jt_tcp_accept(lfd, 3000);
    JT_REQUIRE(fd >= 0);
    jt_conn_t c;
    jt_conn_init(&c, fd);
    uint64_t cid = request_cid(&c);
    JT_REQUIRE(cid != 0);
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    meta.response = &rm;
    meta.has_correlation_id = true;
    meta.correlation_id = (int64_t)cid;
    rm.has_error_code = true;
    rm.error_code = -5;
    rm.error_text = "hostile";
    jt_bytes_t b = {0};
    jt_bytes_frame(&b, &meta, NULL, 0, NULL, 0);
    JT_CHECK_EQ(jt_conn_write(&c, b.p, b.len), 0);
    free(b.p);
    JT_CHECK(wait_count(&done, 1));
    JT_CHECK(jet_call_failed(x));
    JT_CHECK_EQ(jet_call_error_code(x), JET_ERESPONSE);
    JT_CHECK(strstr(jet_call_error_text(x), "-5") && strstr(jet_call_error_text(x), "hostile"));
    jet_call_destroy(x);
    jet_channel_destroy(ch);
    jt_conn_close(&c);
    close(lfd);
}

/* A client that pipelines requests faster than it reads the answers: the
 * server's write backlog passes socket_max_unwritten_bytes (lowered to 1
 * MiB here). Every request taken is still answered, as brpc answers
 * (ignore_eovercrowded); a dropped answer would leave its call waiting for
 * its deadline, or for ever without one. */
static void test_answers_past_write_backlog(void)
{
    enum { N = 64, ATT = 128 * 1024 };
    int port = 0;
    jet_server_t *srv = jt_echo_server_start_port(&g_service, 0, NULL, &port);
    JT_REQUIRE(srv);
    int fd = jt_tcp_connect(port, 5);
    JT_REQUIRE(fd >= 0);
    /* From here to the restore below, nothing leaves the case early. */
    JT_CHECK(jet_flag_set("socket_max_unwritten_bytes", "1048576") == 0);
    static char att[ATT];
    memset(att, 'a', sizeof att);
    size_t ml;
    uint8_t *msg = jt_echo_request_bytes("x", &ml);
    for (int i = 0; i < N; i++) {
        Brpc__Policy__RpcMeta m = BRPC__POLICY__RPC_META__INIT;
        Brpc__Policy__RpcRequestMeta rq = BRPC__POLICY__RPC_REQUEST_META__INIT;
        m.request = &rq;
        rq.service_name = "example.EchoService";
        rq.method_name = "Echo";
        m.has_correlation_id = true;
        m.correlation_id = i + 1;
        m.has_attachment_size = true;
        m.attachment_size = ATT;
        jt_bytes_t b = {0};
        jt_bytes_frame(&b, &m, msg, ml, att, ATT);
        JT_CHECK(jt_send_all(fd, b.p, b.len));
        free(b.p);
    }
    free(msg);
    usleep(300 * 1000); /* the answers pile up unread */
    jt_conn_t c;
    jt_conn_init(&c, fd);
    int answers = 0;
    for (;;) {
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int r = jt_conn_frame(&c, 2000, &f, NULL, NULL);
        if (r == 1 && f.meta->response && f.meta->response->error_code == 0 &&
            jet_iobuf_len(&f.attachment) == ATT)
            answers++;
        jet__baidu_frame_fini(&f);
        if (r != 1) break;
    }
    JT_CHECK_EQ(answers, N);
    jt_conn_close(&c);
    jt_server_stop(srv);
    JT_CHECK(jet_flag_set("socket_max_unwritten_bytes", "67108864") == 0);
}

/* A handler that calls its closure twice: the second call, at once or
 * after the call's memory went to later requests, is refused with an error
 * line and answers nothing. Before, it answered (and freed) whatever call
 * then lived in that memory: a held call got "second" instead of its own
 * answer, or the server's call pool was corrupted. */
static void test_handler_answers_twice(void)
{
    int port = 0;
    jet_server_t *srv = start_server_port(0, NULL, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 0);
    JT_REQUIRE(ch);
    jt_stderr_cap_t cap;
    jt_stderr_begin(&cap);
    /* At once, in the handler. */
    for (int i = 0; i < 3; i++) {
        jet_call_t *call = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(ch, call, "twice", NULL, NULL), 0);
        JT_CHECK(jt_echo_resp_is(call, "first"));
        jet_call_destroy(call);
    }
    /* Later: a held call answered, its closure kept, then called again
     * while another call is held (likely in the same memory). */
    jet_call_t *a = jet_call_create();
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, a, "hold a", jt_count_done, &done), 0);
    JT_REQUIRE(wait_held(1));
    pthread_mutex_lock(&g_held_lock);
    held_t stale = g_held[0];
    pthread_mutex_unlock(&g_held_lock);
    JT_CHECK(jet_server_call(stale.closure_data) != NULL);
    JT_CHECK_EQ(release_held(), 1);
    JT_CHECK(wait_count(&done, 1));
    JT_CHECK(jt_echo_resp_is(a, "hold a"));
    JT_CHECK(jet_server_call(stale.closure_data) == NULL);
    for (int i = 0; i < 20; i++)
        JT_CHECK(echo_ok(ch, "between"));
    jet_call_t *b = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, b, "hold b", jt_count_done, &done), 0);
    JT_REQUIRE(wait_held(1));
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = "stale";
    stale.closure(&resp, stale.closure_data);
    usleep(100000);
    JT_CHECK_EQ(atomic_load(&done.n), 1); /* b is still waiting */
    JT_CHECK_EQ(release_held(), 1);
    JT_CHECK(wait_count(&done, 2));
    JT_CHECK(jt_echo_resp_is(b, "hold b"));
    /* A closure_data never given. */
    stale.closure(&resp, (void *)(uintptr_t)0x123456789abcULL);
    JT_CHECK(jet_server_call((void *)(uintptr_t)0x123456789abcULL) == NULL);
    char *err = jt_stderr_end(&cap);
    int lines = jt_count_lines_with(err, "names no call waiting for its answer");
    fprintf(stderr, "  refused answers logged: %d\n", lines);
    JT_CHECK_EQ(lines, 5);
    free(err);
    JT_CHECK(echo_ok(ch, "after"));
    JT_CHECK(wait_in_flight(srv, 0));
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.requests, 26);
    jet_call_destroy(a);
    jet_call_destroy(b);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

/* brpc's close_idle_connections, over TCP: with idle_timeout_sec=1 a
 * silent connection is closed (its peer sees EOF) while one that calls
 * every 300 ms is kept; once that one idles too it is closed, and the
 * channel's next call connects again and succeeds. */
static void test_idle_connections_closed(void)
{
    int port = 0;
    srv_cfg_t cfg = {.idle_timeout_sec = 1};
    jet_server_t *srv = start_server_port(0, &cfg, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, 1);
    JT_REQUIRE(ch);
    JT_CHECK(echo_ok(ch, "first"));
    int fd = jt_tcp_connect(port, 5);
    JT_REQUIRE(fd >= 0);
    jt_conn_t raw;
    jt_conn_init(&raw, fd);
    jet_server_stats_t st;
    JT_CHECK(JT_WAIT_UNTIL((jet_server_get_stats(srv, &st), st.connections_open == 2), 5000000));
    int64_t t0 = jt_now_ms();
    bool raw_closed = false;
    while (jt_now_ms() - t0 < 3000) {
        JT_CHECK(echo_ok(ch, "busy"));
        if (!raw_closed)
            raw_closed = jt_conn_wait_closed(&raw, 100);
        else
            usleep(100000);
    }
    JT_CHECK(raw_closed);
    jet_server_get_stats(srv, &st);
    fprintf(stderr, "  after 3 s: %llu accepted, %llu open\n",
            (unsigned long long)st.connections_accepted, (unsigned long long)st.connections_open);
    JT_CHECK_EQ(st.connections_accepted, 2); /* the busy channel kept its connection */
    JT_CHECK_EQ(st.connections_open, 1);
    JT_CHECK(jt_server_wait_stats(srv, JT_ANY, 0, 5000000, &st));
    JT_CHECK(echo_ok(ch, "again"));
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 3);
    jt_conn_close(&raw);
    jet_channel_destroy(ch);
    jet_server_stop(srv);
    jet_server_destroy(srv);
}

/* RPC_CASE=<substring> runs only the matching cases (for debugging). */
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        const char *only_ = getenv("RPC_CASE");                                                    \
        if (!only_ || strstr(#fn, only_)) JT_RUN(fn);                                              \
    } while (0)

int main(int argc, char **argv)
{
    jt_echo_service_init(&g_service, &(jt_echo_opts_t){.hook = f_hold_or_hang});
    if (argc == 3 && strcmp(argv[1], "--hang-server") == 0) return child_hang_server(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "--in-handler") == 0)
        return child_in_handler(argv[2], argv[3]);
    signal(SIGPIPE, SIG_IGN);
    RUN(test_server_killed);
    RUN(test_timeout);
    RUN(test_connection_refused);
    RUN(test_server_restart);
    RUN(test_graceful_stop_delayed_handlers);
    RUN(test_graceful_stop_held_calls);
    RUN(test_graceful_stop_writes_answers_out);
    RUN(test_many_short_connections);
    RUN(test_peer_never_answers);
    RUN(test_max_concurrency);
    RUN(test_attempt_ends_while_issuing);
    RUN(test_channel_destroyed_in_flight);
    RUN(test_failed_attempts_release_connections);
    RUN(test_pooled_connection_after_a_timeout);
    RUN(test_reissue_on_destroyed_channel);
    RUN(test_stop_or_destroy_in_handler);
    RUN(test_answer_on_the_wrong_connection);
    RUN(test_answers_past_write_backlog);
    RUN(test_negative_error_code_answer);
    RUN(test_handler_answers_twice);
    RUN(test_idle_connections_closed);
    release_held(); /* anything a failed case left behind */
    return jt_finish();
}
