#include "testutil_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define TT_CHILD_GUARD_MS 20000
#define TT_MAX_ARGS       32

char jt_self[1024];

void jt_self_init(void)
{
    ssize_t n = readlink("/proc/self/exe", jt_self, sizeof jt_self - 1);
    jt_self[n > 0 ? n : 0] = 0;
    signal(SIGPIPE, SIG_IGN);
}

/* ---- the test binary as a child ------------------------------------------------ */

/* Forks jt_self with argv "<role>" args...; the child's stdin and stdout
 * become in_fd and out_fd when they are >= 0. The pid, or -1. */
static pid_t tt_spawn(const char *role, const char *const *args, const char *const *envs, int in_fd,
                      int out_fd)
{
    const char *argv[TT_MAX_ARGS];
    int n = 0;
    argv[n++] = jt_self;
    argv[n++] = role;
    for (int i = 0; args && args[i] && n < TT_MAX_ARGS - 1; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    /* Buffered lines would otherwise be printed by both processes. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (in_fd >= 0) dup2(in_fd, 0);
    if (out_fd >= 0) dup2(out_fd, 1);
    for (int i = 0; envs && envs[i]; i++)
        putenv((char *)envs[i]);
    execv(jt_self, (char *const *)argv);
    _exit(127);
}

/* Waits for pid until end_ms, then kills it: its exit status, or -1 when
 * it was killed. */
static int tt_reap(pid_t pid, int64_t end_ms, const char *what)
{
    int st;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (jt_now_ms() > end_ms) {
            if (what) fprintf(stderr, "  %s child still running: killed\n", what);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int jt_child_start(jt_child_t *c, const char *const *args, const char *const *envs)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0) return -1;
    if (pipe2(out, O_CLOEXEC) < 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    pid_t pid = tt_spawn("role=server", args, envs, in[0], out[1]);
    close(in[0]);
    close(out[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    c->pid = pid;
    c->in_fd = in[1];
    c->port = 0;
    char buf[32];
    size_t got = 0;
    int64_t end = jt_now_ms() + TT_CHILD_GUARD_MS;
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
        jt_child_kill(c);
        return -1;
    }
    return 0;
}

int jt_child_stop(jt_child_t *c)
{
    close(c->in_fd);
    return tt_reap(c->pid, jt_now_ms() + TT_CHILD_GUARD_MS, NULL);
}

void jt_child_kill(jt_child_t *c)
{
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    close(c->in_fd);
}

pid_t jt_spawn_role(const char *role, const char *const *args, const char *const *envs)
{
    return tt_spawn(role, args, envs, -1, -1);
}

int jt_run_role(const char *role, const char *const *args, const char *const *envs, int guard_ms)
{
    pid_t pid = tt_spawn(role, args, envs, -1, -1);
    if (pid < 0) return -1;
    return tt_reap(pid, jt_now_ms() + guard_ms, role);
}

int jt_serve_until_stdin_closes(jet_server_t *srv, int port)
{
    printf("%d\n", port);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    jet_server_destroy(srv);
    return 0;
}

/* ---- raw sockets ------------------------------------------------------------------- */

size_t jt_read_n(int fd, void *buf, size_t n, int timeout_ms)
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

bool jt_wait_eof(int fd, int timeout_ms)
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

void jt_pump(int a, int b, size_t first_bytes)
{
    char buf[65536];
    size_t slow[2] = {first_bytes, first_bytes};
    for (;;) {
        struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        if (poll(p, 2, 30000) <= 0) break;
        int dir = (p[0].revents & (POLLIN | POLLHUP | POLLERR)) ? 0 : 1;
        int from = dir == 0 ? a : b, to = dir == 0 ? b : a;
        ssize_t r = recv(from, buf, sizeof buf, 0);
        if (r <= 0) break;
        size_t off = 0;
        while (slow[dir] > 0 && off < (size_t)r) {
            if (!jt_send_all(to, buf + off, 1)) goto done;
            off++;
            slow[dir]--;
            usleep(2000);
        }
        if (off < (size_t)r && !jt_send_all(to, buf + off, (size_t)r - off)) break;
    }
done:
    close(a);
    close(b);
}

typedef struct tt_fake_conn {
    jt_fake_t *f;
    int fd, index;
} tt_fake_conn_t;

static void *tt_fake_conn_main(void *arg)
{
    tt_fake_conn_t *c = arg;
    jt_fake_t *f = c->f;
    f->fn(c->fd, c->index, f->arg);
    free(c);
    atomic_fetch_sub(&f->running, 1);
    return NULL;
}

static void *tt_fake_main(void *arg)
{
    jt_fake_t *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0) continue;
        int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        tt_fake_conn_t *c = malloc(sizeof *c);
        if (!c) abort();
        *c = (tt_fake_conn_t){.f = f, .fd = fd, .index = atomic_fetch_add(&f->accepted, 1)};
        atomic_fetch_add(&f->running, 1);
        pthread_t th;
        if (pthread_create(&th, NULL, tt_fake_conn_main, c) != 0) abort();
        pthread_detach(th);
    }
    return NULL;
}

void jt_fake_start(jt_fake_t *f, jt_fake_fn fn, void *arg)
{
    memset(f, 0, sizeof *f);
    f->fn = fn;
    f->arg = arg;
    f->lfd = jt_tcp_listen(64, &f->port);
    if (f->lfd < 0) abort();
    if (pthread_create(&f->th, NULL, tt_fake_main, f) != 0) abort();
}

void jt_fake_stop(jt_fake_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    close(f->lfd);
    JT_WAIT_UNTIL(atomic_load(&f->running) == 0, 40000000);
}

void jt_closer_fn(int fd, int index, void *arg)
{
    (void)index;
    jt_closer_t *c = arg;
    char head[8];
    if (c->head_len > sizeof head || jt_read_n(fd, head, c->head_len, 5000) != c->head_len) {
        close(fd);
        return;
    }
    for (int i = 0; c->magics[i]; i++) {
        if (memcmp(head, c->magics[i], c->head_len) != 0) continue;
        char rest[256];
        jt_read_n(fd, rest, c->rest_len < sizeof rest ? c->rest_len : sizeof rest, c->rest_ms);
        atomic_fetch_add(&c->hellos, 1);
        if (c->answer) jt_send_all(fd, c->answer, strlen(c->answer));
        if (c->reset) {
            struct linger l = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        close(fd);
        return;
    }
    int up = jt_tcp_connect(c->real_port, 0);
    if (up < 0 || !jt_send_all(up, head, c->head_len)) {
        close(fd);
        if (up >= 0) close(up);
        return;
    }
    atomic_fetch_add(&c->proxied, 1);
    jt_pump(fd, up, 0);
}

/* ---- echo calls with stream bytes ---------------------------------------------------- */

void jt_echo_fill(jet_call_t *call, size_t len, uint64_t seed)
{
    if (!len) return;
    uint8_t *p = malloc(len);
    if (!p) abort();
    jt_stream_fill(p, seed, len);
    jet_iobuf_append(jet_call_request_attachment(call), p, len);
    free(p);
}

int jt_echo_check(jet_call_t *call, const char *msg, size_t len, uint64_t seed)
{
    if (jet_call_failed(call)) return jet_call_error_code(call);
    const Example__EchoResponse *resp = (const Example__EchoResponse *)jet_call_response(call);
    jet_iobuf_t *att = jet_call_response_attachment(call);
    if (!resp || !resp->message || strcmp(resp->message, msg) != 0 || jet_iobuf_len(att) != len) {
        fprintf(stderr, "  answer: message '%s', %zu bytes (wanted '%s', %zu)\n",
                resp && resp->message ? resp->message : "(none)", jet_iobuf_len(att), msg, len);
        return -1;
    }
    if (!len) return 0;
    uint8_t *q = malloc(len);
    if (!q) abort();
    jet_iobuf_copy_to(att, q, len, 0);
    int64_t bad = jt_stream_check(q, seed, len);
    free(q);
    if (bad >= 0) {
        fprintf(stderr, "  answer of %zu bytes differs at byte %lld\n", len, (long long)bad);
        return -1;
    }
    return 0;
}

int jt_echo_bytes(jet_channel_t *ch, size_t len, uint64_t seed, const char *msg)
{
    jet_call_t *call = jet_call_create();
    if (!call) return -ENOMEM;
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = (char *)(msg ? msg : "hi");
    jt_echo_fill(call, len, seed);
    jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
    int rc = jt_echo_check(call, req.message, len, seed);
    if (rc > 0)
        fprintf(stderr, "  echo of %zu bytes failed: %d %s\n", len, rc, jet_call_error_text(call));
    jet_call_destroy(call);
    return rc;
}

static void tt_slot_done(jet_call_t *call, void *arg)
{
    jt_slot_t *sl = arg;
    jt_batch_t *b = sl->b;
    sl->done_ms = jt_now_ms();
    int rc = jt_echo_check(call, sl->req.message, sl->len, sl->seed);
    if (rc > 0) {
        int zero = 0;
        atomic_compare_exchange_strong(&b->first_err, &zero, rc);
        atomic_fetch_add(&b->failed, 1);
    }
    if (rc != 0) atomic_fetch_add(&b->bad, 1);
    atomic_fetch_add(&b->done, 1);
}

jt_slot_t *jt_slots_new(jt_batch_t *b, int n, const char *msg, size_t len, size_t len_step,
                        uint64_t seed0)
{
    jt_slot_t *sl = calloc((size_t)n, sizeof *sl);
    if (!sl) abort();
    for (int i = 0; i < n; i++) {
        sl[i].b = b;
        sl[i].seed = seed0 + (uint64_t)i * 1000003u;
        sl[i].len = len + (size_t)i * len_step;
        sl[i].call = jet_call_create();
        if (!sl[i].call) abort();
        Example__EchoRequest r = EXAMPLE__ECHO_REQUEST__INIT;
        sl[i].req = r;
        sl[i].req.message = (char *)msg;
        jt_echo_fill(sl[i].call, sl[i].len, sl[i].seed);
    }
    return sl;
}

void jt_slots_issue(jet_channel_t *ch, jt_slot_t *sl, int n)
{
    for (int i = 0; i < n; i++)
        jet_channel_call(ch, &example__echo_service__descriptor, 0, sl[i].call, &sl[i].req.base,
                         tt_slot_done, &sl[i]);
}

bool jt_slots_free(jt_batch_t *b, jt_slot_t *sl, int n, int64_t guard_us)
{
    if (!jt_wait_at_least((_Atomic int *)&b->done, n, guard_us)) return false;
    for (int i = 0; i < n; i++)
        jet_call_destroy(sl[i].call);
    free(sl);
    return true;
}

int jt_async_batch(jet_channel_t *ch, int n, size_t len, size_t step, int64_t guard_us,
                   int *first_err_p)
{
    jt_batch_t b = {0};
    jt_slot_t *sl = jt_slots_new(&b, n, "batch", len, step, 17);
    jt_slots_issue(ch, sl, n);
    bool all = jt_slots_free(&b, sl, n, guard_us);
    if (first_err_p) *first_err_p = atomic_load(&b.first_err);
    if (!all) fprintf(stderr, "  batch: %d of %d calls ended in time\n", atomic_load(&b.done), n);
    return all ? atomic_load(&b.bad) : n;
}
