/* Helpers shared by the URMA transport tests (header only: each test file
 * is its own executable).
 *
 * - jt_urma_main_setup: every test process gets its own softub fabric
 *   (SOFTUB_FABRIC, inherited by the children it starts) and loads softub by
 *   the flag urma_lib (SOFTUB_LIB, set by ctest).
 * - An echo service: the response carries the request's message and
 *   attachment; message "sleep:<ms>" answers after that long (from a thread),
 *   "close" makes the server process exit at once (a killed peer).
 * - Server children: the test binary re-executed with "role=server" and
 *   flag arguments; it prints its port on stdout and serves until its stdin
 *   closes (the parent's end of a pipe), so it never outlives the test.
 *
 * Every wait is bounded; bounds are guards, never timing assertions. */
#ifndef JET_TEST_URMA_TEST_H
#define JET_TEST_URMA_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "testutil.h"

#define UT_UNUSED __attribute__((unused))

/* ---- process set-up --------------------------------------------------------- */

static UT_UNUSED const char *ut_softub_lib(void)
{
    static char path[512];
    const char *p = getenv("SOFTUB_LIB");
    if (p && *p) return p;
    const char *b = getenv("JET_BUILD_DIR");
    snprintf(path, sizeof path, "%s/softub/libsoftub.so", b ? b : ".");
    return path;
}

static UT_UNUSED char ut_self[1024];

/* Call first in main (before any channel or server): parses flag arguments. */
static UT_UNUSED void jt_urma_main_setup(int *argc, char ***argv, const char *name)
{
    ssize_t n = readlink("/proc/self/exe", ut_self, sizeof ut_self - 1);
    ut_self[n > 0 ? n : 0] = 0;
    if (!getenv("SOFTUB_FABRIC")) {
        char fab[96];
        snprintf(fab, sizeof fab, "jt-%s-%d", name, (int)getpid());
        setenv("SOFTUB_FABRIC", fab, 1);
    }
    signal(SIGPIPE, SIG_IGN);
    jet_flag_set("urma_lib", ut_softub_lib());
    if (jet_flags_parse(argc, argv) < 0) exit(2);
}

/* ---- echo service ----------------------------------------------------------- */

typedef struct ut_later {
    Example__EchoResponse_Closure closure;
    void *closure_data;
    int ms;
} ut_later_t;

static UT_UNUSED void *ut_later_main(void *arg)
{
    ut_later_t *l = arg;
    usleep((useconds_t)l->ms * 1000);
    jet_call_t *call = jet_server_call(l->closure_data);
    jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = "late";
    l->closure(&resp, l->closure_data);
    free(l);
    return NULL;
}

static UT_UNUSED void ut_echo(Example__EchoService_Service *service,
                              const Example__EchoRequest *req,
                              Example__EchoResponse_Closure closure, void *closure_data)
{
    jet_call_t *call = jet_server_call(closure_data);
    int ms = 0;
    if (sscanf(req->message, "sleep:%d", &ms) == 1) {
        ut_later_t *l = calloc(1, sizeof *l);
        pthread_t th;
        if (!l) abort();
        l->closure = closure;
        l->closure_data = closure_data;
        l->ms = ms;
        if (pthread_create(&th, NULL, ut_later_main, l) != 0) abort();
        pthread_detach(th);
        return;
    }
    if (strcmp(req->message, "close") == 0) _exit(0);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = req->message;
    jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    closure(&resp, closure_data);
}

static UT_UNUSED Example__EchoService_Service ut_service = EXAMPLE__ECHO_SERVICE__INIT(ut_);

/* An in-process echo server on 127.0.0.1 at a free port (*port_p). */
static UT_UNUSED jet_server_t *ut_server_start(jet_socket_mode_t mode, int *port_p)
{
    jet_server_options_t o;
    jet_server_options_init(&o);
    o.socket_mode = mode;
    jet_server_t *srv;
    if (jet_server_create(&o, &srv) < 0) return NULL;
    if (jet_server_add_service(srv, (ProtobufCService *)&ut_service) < 0 ||
        jet_server_start(srv, "127.0.0.1:0") < 0) {
        jet_server_destroy(srv);
        return NULL;
    }
    *port_p = jet_server_listen_port(srv);
    return srv;
}

/* ---- server children ---------------------------------------------------------- */

typedef struct ut_child {
    pid_t pid;
    int port;
    int in_fd; /* the child's stdin: closing it stops the child */
} ut_child_t;

/* The "role=server" entry: serves until stdin closes; argv[2] may be
 * "mode=<name>". Returns the process exit status. */
static UT_UNUSED int ut_server_role(int argc, char **argv)
{
    jet_socket_mode_t mode = JET_SOCKET_MODE_URMA;
    if (argc > 2 && strncmp(argv[2], "mode=", 5) == 0 &&
        jet_socket_mode_parse(argv[2] + 5, &mode) < 0)
        return 3;
    int port = 0;
    jet_server_t *srv = ut_server_start(mode, &port);
    if (!srv) return 4;
    printf("%d\n", port);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    jet_server_destroy(srv);
    return 0;
}

/* Starts the test binary as a server child with the given flag arguments
 * (NULL-terminated, e.g. "--urma_use_polling=true") and environment
 * additions ("NAME=value", NULL-terminated; envs may be NULL). The first
 * argument may be "mode=tcp" (the socket mode it serves; default urma).
 * 0 and *c filled, or -1. */
static UT_UNUSED int ut_child_start_env(ut_child_t *c, const char *const *args,
                                        const char *const *envs)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0) return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    const char *argv[32];
    int n = 0;
    argv[n++] = ut_self;
    argv[n++] = "role=server";
    for (int i = 0; args && args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        for (int i = 0; envs && envs[i]; i++)
            putenv((char *)envs[i]);
        execv(ut_self, (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    c->pid = pid;
    c->in_fd = in[1];
    c->port = 0;
    char buf[32];
    size_t got = 0;
    int64_t end = jt_now_ms() + 20000;
    while (got < sizeof buf - 1 && jt_now_ms() < end) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 200) <= 0) continue;
        ssize_t r = read(out[0], buf + got, sizeof buf - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
        if (memchr(buf, '\n', got)) break;
    }
    buf[got] = 0;
    close(out[0]);
    c->port = atoi(buf);
    if (c->port <= 0) {
        kill(pid, SIGKILL);
        jt_wait(pid);
        close(c->in_fd);
        return -1;
    }
    return 0;
}

static UT_UNUSED int ut_child_start(ut_child_t *c, const char *const *args)
{
    return ut_child_start_env(c, args, NULL);
}

/* Stops the child (closes its stdin) and returns its exit status. */
static UT_UNUSED int ut_child_stop(ut_child_t *c)
{
    close(c->in_fd);
    int64_t end = jt_now_ms() + 20000;
    int st;
    while (waitpid(c->pid, &st, WNOHANG) == 0) {
        if (jt_now_ms() > end) {
            kill(c->pid, SIGKILL);
            waitpid(c->pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static UT_UNUSED void ut_child_kill(ut_child_t *c)
{
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    close(c->in_fd);
}

/* ---- clients ------------------------------------------------------------------ */

static UT_UNUSED jet_channel_t *ut_channel(int port, jet_socket_mode_t mode, int32_t timeout_ms,
                                           jet_connection_type_t type)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = mode;
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    o.connection_type = type;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    if (jet_channel_create(addr, &o, &ch) < 0) return NULL;
    return ch;
}

/* One synchronous echo with an attachment of len stream bytes from offset
 * seed; 0 when the answer is byte-exact, else the call's error code (or -1
 * for wrong bytes). */
static UT_UNUSED int ut_echo_call(jet_channel_t *ch, size_t len, uint64_t seed, const char *msg)
{
    jet_call_t *call = jet_call_create();
    if (!call) return -ENOMEM;
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = (char *)(msg ? msg : "hi");
    if (len) {
        uint8_t *p = malloc(len);
        if (!p) abort();
        jt_stream_fill(p, seed, len);
        jet_iobuf_append(jet_call_request_attachment(call), p, len);
        free(p);
    }
    jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
    int rc = 0;
    if (jet_call_failed(call)) {
        rc = jet_call_error_code(call);
    } else {
        const Example__EchoResponse *resp = (const Example__EchoResponse *)jet_call_response(call);
        jet_iobuf_t *att = jet_call_response_attachment(call);
        if (!resp || strcmp(resp->message, req.message) != 0 || jet_iobuf_len(att) != len) {
            rc = -1;
        } else if (len) {
            uint8_t *q = malloc(len);
            if (!q) abort();
            jet_iobuf_copy_to(att, q, len, 0);
            if (jt_stream_check(q, seed, len) >= 0) rc = -1;
            free(q);
        }
    }
    jet_call_destroy(call);
    return rc;
}

#endif

#ifndef JET_TEST_URMA_ASYNC
#define JET_TEST_URMA_ASYNC
/* ---- asynchronous batches ------------------------------------------------------ */

typedef struct ut_batch {
    _Atomic int done, bad;
    _Atomic int first_err;
    size_t len;
} ut_batch_t;

typedef struct ut_slot {
    ut_batch_t *b;
    uint64_t seed;
    jet_call_t *call;
    Example__EchoRequest req;
} ut_slot_t;

static UT_UNUSED void ut_batch_done(jet_call_t *call, void *arg)
{
    ut_slot_t *sl = arg;
    ut_batch_t *b = sl->b;
    bool ok = !jet_call_failed(call);
    if (ok) {
        jet_iobuf_t *att = jet_call_response_attachment(call);
        ok = jet_iobuf_len(att) == b->len;
        if (ok && b->len) {
            uint8_t *q = malloc(b->len);
            if (!q) abort();
            jet_iobuf_copy_to(att, q, b->len, 0);
            ok = jt_stream_check(q, sl->seed, b->len) < 0;
            free(q);
        }
    } else {
        int zero = 0;
        atomic_compare_exchange_strong(&b->first_err, &zero, jet_call_error_code(call));
    }
    if (!ok) atomic_fetch_add(&b->bad, 1);
    atomic_fetch_add(&b->done, 1);
}

/* Issues n asynchronous echoes of len bytes at once on ch and waits for all.
 * Returns the number that failed or came back wrong (n when they did not
 * all finish within guard_us). */
static UT_UNUSED int ut_async_batch(jet_channel_t *ch, int n, size_t len, int64_t guard_us,
                                    int *first_err_p)
{
    ut_batch_t b = {.len = len};
    ut_slot_t *sl = calloc((size_t)n, sizeof *sl);
    uint8_t *p = len ? malloc(len) : NULL;
    if (!sl || (len && !p)) abort();
    for (int i = 0; i < n; i++) {
        sl[i].b = &b;
        sl[i].seed = (uint64_t)i * 1000003u;
        sl[i].call = jet_call_create();
        Example__EchoRequest r = EXAMPLE__ECHO_REQUEST__INIT;
        sl[i].req = r;
        sl[i].req.message = "batch";
        if (len) {
            jt_stream_fill(p, sl[i].seed, len);
            jet_iobuf_append(jet_call_request_attachment(sl[i].call), p, len);
        }
    }
    for (int i = 0; i < n; i++)
        jet_channel_call(ch, &example__echo_service__descriptor, 0, sl[i].call, &sl[i].req.base,
                         ut_batch_done, &sl[i]);
    bool all = jt_wait_at_least((_Atomic int *)&b.done, n, guard_us);
    int bad = all ? atomic_load(&b.bad) : n;
    if (first_err_p) *first_err_p = atomic_load(&b.first_err);
    if (all) {
        for (int i = 0; i < n; i++)
            jet_call_destroy(sl[i].call);
        free(sl);
    } /* else leaked on purpose: a late done would touch them */
    free(p);
    return bad;
}
#endif

#ifndef JET_TEST_URMA_FAKE
#define JET_TEST_URMA_FAKE
/* ---- client children ----------------------------------------------------------- */

/* The "role=client port=<p> [mode=<m>] [calls=<n>] [size=<bytes>]" entry:
 * n synchronous echoes through one channel; exit 0 when all came back
 * byte-exact, else the first error code (1 for wrong bytes). */
static UT_UNUSED int ut_client_role(int argc, char **argv)
{
    int port = 0, calls = 3;
    size_t size = 1000;
    jet_socket_mode_t mode = JET_SOCKET_MODE_URMA;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "port=", 5) == 0) port = atoi(argv[i] + 5);
        if (strncmp(argv[i], "calls=", 6) == 0) calls = atoi(argv[i] + 6);
        if (strncmp(argv[i], "size=", 5) == 0) size = (size_t)atol(argv[i] + 5);
        if (strncmp(argv[i], "mode=", 5) == 0 && jet_socket_mode_parse(argv[i] + 5, &mode) < 0)
            return 3;
    }
    jet_channel_t *ch = ut_channel(port, mode, 10000, JET_CONNECTION_SINGLE);
    if (!ch) return 4;
    int rc = 0;
    for (int i = 0; i < calls && rc == 0; i++)
        rc = ut_echo_call(ch, size, (uint64_t)i * 77, "child");
    jet_channel_destroy(ch);
    return rc < 0 ? 1 : rc > 255 ? rc % 250 + 5 : rc;
}

/* Runs a client child (args: "port=..", flags, ...; envs as for servers) to
 * its end; returns its exit status. */
static UT_UNUSED int ut_client_run(const char *const *args, const char *const *envs)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = ut_self;
    argv[n++] = "role=client";
    for (int i = 0; args && args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        for (int i = 0; envs && envs[i]; i++)
            putenv((char *)envs[i]);
        execv(ut_self, (char *const *)argv);
        _exit(127);
    }
    return jt_wait(pid);
}

/* ---- raw sockets and fake peers ------------------------------------------------- */

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

static UT_UNUSED int ut_listen(int *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        abort();
    *port_p = ntohs(a.sin_port);
    return fd;
}

static UT_UNUSED int ut_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Reads exactly n bytes within timeout_ms: n, or what was read before EOF
 * or the timeout. */
static UT_UNUSED size_t ut_read_n(int fd, void *buf, size_t n, int timeout_ms)
{
    size_t got = 0;
    int64_t end = jt_now_ms() + timeout_ms;
    while (got < n) {
        int left = (int)(end - jt_now_ms());
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) continue;
        ssize_t r = recv(fd, (char *)buf + got, n - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* True when the peer closed fd within timeout_ms (reading and dropping bytes). */
static UT_UNUSED bool ut_wait_eof(int fd, int timeout_ms)
{
    char b[4096];
    int64_t end = jt_now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(end - jt_now_ms());
        if (left <= 0) return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) continue;
        ssize_t r = recv(fd, b, sizeof b, 0);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
        if (r < 0) return false;
    }
}

static UT_UNUSED bool ut_send_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return true;
}

/* Pumps bytes both ways between a and b until either closes; closes both. */
static UT_UNUSED void ut_pump(int a, int b)
{
    char buf[65536];
    for (;;) {
        struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        if (poll(p, 2, 30000) <= 0) break;
        int from = (p[0].revents & (POLLIN | POLLHUP | POLLERR)) ? a : b, to = from == a ? b : a;
        ssize_t r = recv(from, buf, sizeof buf, 0);
        if (r <= 0 || !ut_send_all(to, buf, (size_t)r)) break;
    }
    close(a);
    close(b);
}

/* A fake server: a thread accepts connections on a fresh port and runs fn(fd,
 * index, arg) for each in its own thread (fn owns fd). */
typedef void (*ut_fake_fn)(int fd, int index, void *arg);
typedef struct ut_fake {
    int lfd, port;
    ut_fake_fn fn;
    void *arg;
    _Atomic int accepted;
    _Atomic bool stop;
    pthread_t th;
} ut_fake_t;

typedef struct ut_fake_conn {
    ut_fake_t *f;
    int fd, index;
} ut_fake_conn_t;

static UT_UNUSED void *ut_fake_conn_main(void *arg)
{
    ut_fake_conn_t *c = arg;
    c->f->fn(c->fd, c->index, c->f->arg);
    free(c);
    return NULL;
}

static UT_UNUSED void *ut_fake_main(void *arg)
{
    ut_fake_t *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        ut_fake_conn_t *c = malloc(sizeof *c);
        if (!c) abort();
        *c = (ut_fake_conn_t){.f = f, .fd = fd, .index = atomic_fetch_add(&f->accepted, 1)};
        pthread_t th;
        if (pthread_create(&th, NULL, ut_fake_conn_main, c) != 0) abort();
        pthread_detach(th);
    }
    return NULL;
}

static UT_UNUSED void ut_fake_start(ut_fake_t *f, ut_fake_fn fn, void *arg)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->arg = arg;
    f->lfd = ut_listen(&f->port);
    if (pthread_create(&f->th, NULL, ut_fake_main, f) != 0) abort();
}

static UT_UNUSED void ut_fake_stop(ut_fake_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
}
#endif
