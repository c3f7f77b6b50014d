/* The transport registry and the socket <-> transport contract.
 *
 * Registry: tcp is mode 0, the other modes are empty until their transport
 * registers, a mode is registered once (-EEXIST), out-of-range modes are
 * refused, a table with an empty slot is refused loudly, unregistered modes
 * cannot carry sockets; mode names parse and print.
 *
 * Contract: a counting transport that wraps TCP is registered under an unused
 * mode and carries real connections, to check who calls which slot, on which
 * thread and how often: init once per socket, connect once on the client's
 * loop after TCP connected (and never on accepted sockets), cut_from_iobuf_list
 * by one writer at a time, wait_writable after -EAGAIN, on_input on the loop
 * for reads, release once at the end with the fd still open; an application
 * handshake (connect returns 1) holds writes until jet__socket_connected, and
 * its failure or timeout fails the socket. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "event/loop.h"
#include "jetrpc/errors.h"
#include "net/listener.h"
#include "net/socket.h"
#include "net/transport.h"
#include "testutil.h"
#include "testutil_net.h"

#define GUARD_US  (20LL * 1000 * 1000) /* bounds every wait; never a timing assertion */
#define MiB       ((size_t)1 << 20)
#define FAKE_MODE JET_SOCKET_MODE_RDMA /* brpc's; jetrpc never provides it */

#define WAIT_UNTIL(cond) JT_WAIT_UNTIL(cond, GUARD_US)

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static _Atomic int64_t g_user_alloc, g_user_freed;

static void user_free(void *data, void *arg)
{
    free(data);
    atomic_fetch_add(&g_user_freed, 1);
}

/* ---- the counting transport ------------------------------------------- */

typedef struct fake_side {
    _Atomic int global_init, init, release, reset, connect, cut, cut_eagain, wait_writable,
        on_input, debug;
    _Atomic int cut_inflight, cut_overlap; /* more than one writer inside cut at once */
    _Atomic int off_loop;    /* connect, wait_writable or on_input off the loop thread */
    _Atomic int connect_bad; /* connect in a wrong state or before TCP connected */
    _Atomic int release_bad; /* release with the fd closed, references left, or twice */
    _Atomic int bad_tstate;  /* a slot found a tstate it did not set */
    _Atomic int64_t cut_bytes;
    _Atomic int cut_on_main; /* cut on the test's main thread */
} fake_side_t;

static pthread_t g_main_thread;

static fake_side_t fk[2];             /* [s->is_server_side] */
static _Atomic int fk_connect_result; /* what connect returns: 0, 1 (handshake) or an error */
static _Atomic int fk_init_result;
static _Atomic(jet_socket_t *) fk_handshaking; /* referenced until the test finishes it */

#define FAKE_MAGIC 0xfa4e5eedu

typedef struct fake_state {
    uint32_t magic;
    jet_socket_t *s;
} fake_state_t;

static fake_side_t *fk_side(jet_socket_t *s)
{
    fake_state_t *st = s->tstate;
    fake_side_t *f = &fk[s->is_server_side ? 1 : 0];
    if (!st || st->magic != FAKE_MAGIC || st->s != s) atomic_fetch_add(&f->bad_tstate, 1);
    return f;
}

static void fk_reset_counts(void)
{
    memset(fk, 0, sizeof fk);
    atomic_store(&fk_connect_result, 0);
    atomic_store(&fk_init_result, 0);
    atomic_store(&fk_handshaking, NULL);
}

static int fk_global_init(const jet_transport_check_t *check)
{
    atomic_fetch_add(&fk[check && check->is_server ? 1 : 0].global_init, 1);
    return 0;
}

static int fk_init(jet_socket_t *s)
{
    fake_side_t *f = &fk[s->is_server_side ? 1 : 0];
    atomic_fetch_add(&f->init, 1);
    if (s->tstate) atomic_fetch_add(&f->bad_tstate, 1);
    int rc = atomic_load(&fk_init_result);
    if (rc < 0) return rc;
    fake_state_t *st = malloc(sizeof *st);
    if (!st) return -ENOMEM;
    st->magic = FAKE_MAGIC;
    st->s = s;
    s->tstate = st;
    return jet__tcp_transport.init(s);
}

static void fk_release(jet_socket_t *s)
{
    fake_side_t *f = fk_side(s);
    if (atomic_fetch_add(&f->release, 1) != 0) atomic_fetch_add(&f->release_bad, 1);
    /* The fd is still open and nobody holds the socket any more. */
    if (fcntl(s->fd, F_GETFD) < 0) atomic_fetch_add(&f->release_bad, 1);
    if (atomic_load(&s->refcnt) != 0) atomic_fetch_add(&f->release_bad, 1);
    jet__tcp_transport.release(s);
    fake_state_t *st = s->tstate;
    st->magic = 0;
    free(st);
    s->tstate = NULL;
}

static int fk_reset(jet_socket_t *s)
{
    atomic_fetch_add(&fk_side(s)->reset, 1);
    return jet__tcp_transport.reset(s);
}

static int fk_connect(jet_socket_t *s)
{
    fake_side_t *f = fk_side(s);
    atomic_fetch_add(&f->connect, 1);
    if (!jet_loop_in_thread(s->loop)) atomic_fetch_add(&f->off_loop, 1);
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    int soerr = -1;
    socklen_t elen = sizeof soerr;
    if (s->is_server_side || atomic_load(&s->state) != JET_SOCK_HANDSHAKE ||
        getpeername(s->fd, (struct sockaddr *)&peer, &len) != 0 ||
        getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &soerr, &elen) != 0 || soerr != 0)
        atomic_fetch_add(&f->connect_bad, 1);
    int rc = atomic_load(&fk_connect_result);
    if (rc == 1) {
        jet__socket_ref(s);
        atomic_store(&fk_handshaking, s);
        return 1;
    }
    if (rc < 0) return rc;
    return jet__tcp_transport.connect(s);
}

static ssize_t fk_cut(jet_socket_t *s, jet_iobuf_t *const *bufs, int n)
{
    fake_side_t *f = fk_side(s);
    atomic_fetch_add(&f->cut, 1);
    if (pthread_equal(pthread_self(), g_main_thread)) atomic_fetch_add(&f->cut_on_main, 1);
    if (atomic_fetch_add(&f->cut_inflight, 1) != 0) atomic_fetch_add(&f->cut_overlap, 1);
    ssize_t w = jet__tcp_transport.cut_from_iobuf_list(s, bufs, n);
    atomic_fetch_sub(&f->cut_inflight, 1);
    if (w == -EAGAIN) atomic_fetch_add(&f->cut_eagain, 1);
    if (w > 0) atomic_fetch_add(&f->cut_bytes, w);
    return w;
}

static int fk_wait_writable(jet_socket_t *s, int64_t deadline_us)
{
    fake_side_t *f = fk_side(s);
    atomic_fetch_add(&f->wait_writable, 1);
    if (!jet_loop_in_thread(s->loop)) atomic_fetch_add(&f->off_loop, 1);
    return jet__tcp_transport.wait_writable(s, deadline_us);
}

static void fk_on_input(jet_socket_t *s, uint32_t events)
{
    fake_side_t *f = fk_side(s);
    atomic_fetch_add(&f->on_input, 1);
    if (!jet_loop_in_thread(s->loop)) atomic_fetch_add(&f->off_loop, 1);
    jet__tcp_transport.on_input(s, events);
}

static int fk_debug(jet_socket_t *s, char *buf, size_t len)
{
    atomic_fetch_add(&fk_side(s)->debug, 1);
    int n = snprintf(buf, len, "fake-state ");
    if (n < 0 || (size_t)n >= len) return n;
    return n + jet__tcp_transport.debug(s, buf + n, len - (size_t)n);
}

static const jet_transport_ops_t fake_transport = {
    .name = "counting-tcp",
    .mode = FAKE_MODE,
    .global_init = fk_global_init,
    .init = fk_init,
    .release = fk_release,
    .reset = fk_reset,
    .connect = fk_connect,
    .cut_from_iobuf_list = fk_cut,
    .wait_writable = fk_wait_writable,
    .on_input = fk_on_input,
    .debug = fk_debug,
};

/* Finishes the pending handshake on the socket's loop thread. */
typedef struct hs_task {
    jet_task_t task;
    jet_socket_t *s;
    int err;
    _Atomic int done;
} hs_task_t;

static void hs_task_fn(jet_task_t *t)
{
    hs_task_t *h = (hs_task_t *)t;
    jet__socket_connected(h->s, h->err);
    atomic_store(&h->done, 1);
}

static bool finish_handshake(int err)
{
    jet_socket_t *s = atomic_exchange(&fk_handshaking, NULL);
    if (!s) return false;
    hs_task_t h = {.task.fn = hs_task_fn, .s = s, .err = err};
    jet_loop_post(s->loop, &h.task);
    if (!WAIT_UNTIL(atomic_load(&h.done))) abort(); /* the task points into this frame */
    jet__socket_unref(s);
    return true;
}

/* ---- endpoints (testutil_net.h) ---------------------------------------- */

/* Client endpoints note how many times the client's connect slot had run
 * when on_ready came (in ep->ready_mark). */
static void ep_mark_connect(jt_ep_t *ep, jet_socket_t *s)
{
    atomic_store(&ep->ready_mark, atomic_load(&fk[0].connect));
}

static const jt_ep_hooks_t client_hooks = {.on_ready = ep_mark_connect};

static jt_ep_t *client_connect(const jet_addr_t *addr, int mode, int kind, int32_t timeout_ms)
{
    return jt_ep_connect(addr, mode, kind, timeout_ms, &client_hooks, NULL);
}

static jt_srv_t *srv_start(int mode, int kind)
{
    return jt_srv_start("127.0.0.1:0", mode, kind, 0, NULL);
}

static int write_bytes(jet_socket_t *s, const void *p, size_t len)
{
    return jt_socket_write_bytes(s, p, len, false);
}

/* ---- registry ----------------------------------------------------------- */

static void test_registry_builtin(void)
{
    jet__transports_init();
    jet__transports_init(); /* idempotent */
    const jet_transport_ops_t *tcp = jet__transport_get(JET_SOCKET_MODE_TCP);
    JT_REQUIRE(tcp != NULL);
    JT_CHECK(tcp == &jet__tcp_transport);
    JT_CHECK(strcmp(tcp->name, "tcp") == 0);
    JT_CHECK_EQ(tcp->mode, JET_SOCKET_MODE_TCP);
    /* Nothing else is built in yet. */
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_RDMA) == NULL);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_UBRING) == NULL);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_URMA) == NULL);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_MAX) == NULL);
    JT_CHECK(jet__transport_get(-1) == NULL);
    JT_CHECK(jet__transport_get(INT_MAX) == NULL);
    JT_CHECK(jet__transport_get(INT_MIN) == NULL);
}

static void test_register_errors(void)
{
    JT_CHECK_EQ(jet__transport_register(&jet__tcp_transport), -EEXIST);
    jet_transport_ops_t ops = fake_transport;
    ops.mode = JET_SOCKET_MODE_TCP;
    JT_CHECK_EQ(jet__transport_register(&ops), -EEXIST);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_TCP) == &jet__tcp_transport);
    ops.mode = JET_SOCKET_MODE_MAX;
    JT_CHECK_EQ(jet__transport_register(&ops), -EINVAL);
    ops.mode = -1;
    JT_CHECK_EQ(jet__transport_register(&ops), -EINVAL);
    ops.mode = INT_MIN;
    JT_CHECK_EQ(jet__transport_register(&ops), -EINVAL);
    JT_CHECK(jet__transport_get(FAKE_MODE) == NULL);
}

static int register_with_hole(void *arg)
{
    jet_transport_ops_t ops = fake_transport;
    ops.mode = JET_SOCKET_MODE_UBRING;
    *(void **)((char *)&ops + (size_t)arg) = NULL;
    jet__transport_register(&ops);
    return 2; /* registering must not return */
}

/* A table with an empty slot is a programming error: refused loudly, in a
 * child process since it ends the process. */
static void test_register_empty_slot(void)
{
    static const size_t slots[] = {
        offsetof(jet_transport_ops_t, global_init),
        offsetof(jet_transport_ops_t, init),
        offsetof(jet_transport_ops_t, release),
        offsetof(jet_transport_ops_t, reset),
        offsetof(jet_transport_ops_t, connect),
        offsetof(jet_transport_ops_t, cut_from_iobuf_list),
        offsetof(jet_transport_ops_t, wait_writable),
        offsetof(jet_transport_ops_t, on_input),
        offsetof(jet_transport_ops_t, debug),
    };
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        pid_t pid = jt_fork(register_with_hole, (void *)slots[i]);
        JT_REQUIRE(pid > 0);
        int rc = jt_wait(pid);
        JT_CHECK(rc != 0 && rc != 2 && rc != -1);
    }
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_UBRING) == NULL);
}

static void test_unsupported_stubs(void)
{
    jet_transport_check_t check = {.is_server = true, .protocol = "baidu_std"};
    JT_CHECK_EQ(jet__transport_unsupported_global_init(&check), -ENOTSUP);
    JT_CHECK_EQ(jet__transport_unsupported_reset(NULL), -ENOTSUP);
}

/* Sockets of a mode nobody registered are refused; the caller keeps the fd. */
static void test_unregistered_mode(void)
{
    jet_addr_t addr;
    JT_REQUIRE(jet__addr_parse("127.0.0.1:9", &addr) == 0);
    jt_ep_t *ep = jt_ep_new(JT_EP_COLLECT, NULL);
    jet_socket_t *s = NULL;
    int fds0 = count_fds();
    JT_CHECK_EQ(jet__socket_connect(&addr, JET_SOCKET_MODE_URMA, &jt_ep_handler, ep, -1, &s),
                -EPROTONOSUPPORT);
    JT_CHECK_EQ(jet__socket_connect(&addr, JET_SOCKET_MODE_MAX, &jt_ep_handler, ep, -1, &s),
                -EPROTONOSUPPORT);
    JT_CHECK_EQ(jet__socket_connect(&addr, -1, &jt_ep_handler, ep, -1, &s), -EPROTONOSUPPORT);
    JT_CHECK(s == NULL);
    JT_CHECK_EQ(count_fds(), fds0);

    int sv[2];
    JT_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    jet_addr_t peer;
    JT_REQUIRE(jet__addr_parse("unix:/tmp/jet-net-peer", &peer) == 0);
    JT_CHECK_EQ(jet__socket_accept(sv[0], &peer, JET_SOCKET_MODE_UBRING, jet_loop_pick(),
                                   &jt_ep_handler, ep, &s),
                -EPROTONOSUPPORT);
    JT_CHECK(s == NULL);
    JT_CHECK(fcntl(sv[0], F_GETFD) >= 0);
    JT_CHECK_EQ(atomic_load(&ep->released), 0);
    close(sv[0]);
    close(sv[1]);
    jt_ep_free(ep);
}

static void test_mode_names(void)
{
    static const char *const names[] = {"tcp", "rdma", "ubring", "urma"};
    for (int m = 0; m < JET_SOCKET_MODE_MAX; m++) {
        const char *n = jet_socket_mode_name(m);
        JT_REQUIRE(n != NULL);
        JT_CHECK(strcmp(n, names[m]) == 0);
        jet_socket_mode_t back = JET_SOCKET_MODE_MAX;
        JT_CHECK_EQ(jet_socket_mode_parse(n, &back), 0);
        JT_CHECK_EQ(back, m);
    }
    JT_CHECK(jet_socket_mode_name(-1) == NULL);
    JT_CHECK(jet_socket_mode_name(JET_SOCKET_MODE_MAX) == NULL);
    JT_CHECK(jet_socket_mode_name(INT_MAX) == NULL);

    jet_socket_mode_t m = JET_SOCKET_MODE_MAX;
    JT_CHECK_EQ(jet_socket_mode_parse("URMA", &m), 0);
    JT_CHECK_EQ(m, JET_SOCKET_MODE_URMA);
    JT_CHECK_EQ(jet_socket_mode_parse("UBRing", &m), 0);
    JT_CHECK_EQ(m, JET_SOCKET_MODE_UBRING);
    m = JET_SOCKET_MODE_MAX;
    JT_CHECK_EQ(jet_socket_mode_parse("", &m), -EINVAL);
    JT_CHECK_EQ(jet_socket_mode_parse("tcp ", &m), -EINVAL);
    JT_CHECK_EQ(jet_socket_mode_parse("tc", &m), -EINVAL);
    JT_CHECK_EQ(jet_socket_mode_parse("tcpx", &m), -EINVAL);
    JT_CHECK_EQ(jet_socket_mode_parse("0", &m), -EINVAL);
    JT_CHECK_EQ(jet_socket_mode_parse(NULL, &m), -EINVAL);
    JT_CHECK_EQ(m, JET_SOCKET_MODE_MAX); /* untouched on failure */

    jet_connection_type_t t = JET_CONNECTION_SHORT;
    JT_CHECK_EQ(jet_connection_type_parse("single", &t), 0);
    JT_CHECK_EQ(t, JET_CONNECTION_SINGLE);
    JT_CHECK_EQ(jet_connection_type_parse("Pooled", &t), 0);
    JT_CHECK_EQ(t, JET_CONNECTION_POOLED);
    JT_CHECK_EQ(jet_connection_type_parse("short", &t), 0);
    JT_CHECK_EQ(t, JET_CONNECTION_SHORT);
    JT_CHECK_EQ(jet_connection_type_parse("", &t), 0);
    JT_CHECK_EQ(t, JET_CONNECTION_SINGLE);
    JT_CHECK_EQ(jet_connection_type_parse("long", &t), -EINVAL);
    JT_CHECK_EQ(jet_connection_type_parse(NULL, &t), -EINVAL);
}

static void test_register_fake(void)
{
    JT_CHECK_EQ(jet__transport_register(&fake_transport), 0);
    JT_CHECK(jet__transport_get(FAKE_MODE) == &fake_transport);
    JT_CHECK_EQ(jet__transport_register(&fake_transport), -EEXIST);
    jet_transport_ops_t other = jet__tcp_transport;
    other.mode = FAKE_MODE;
    JT_CHECK_EQ(jet__transport_register(&other), -EEXIST);
    JT_CHECK(jet__transport_get(FAKE_MODE) == &fake_transport);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_TCP) == &jet__tcp_transport);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_UBRING) == NULL);
    JT_CHECK(jet__transport_get(JET_SOCKET_MODE_URMA) == NULL);
}

/* ---- the contract, over real connections -------------------------------- */

#define W_THREADS 4
#define W_COUNT   500

typedef struct writer {
    pthread_t th;
    jet_socket_t *s;
    int tid;
    _Atomic int *go;
    int64_t bytes;
    int errors;
} writer_t;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    uint8_t buf[8192];
    memset(buf, 'a' + w->tid, sizeof buf);
    while (!atomic_load(w->go))
        sched_yield();
    for (int i = 0; i < W_COUNT; i++) {
        size_t len = 1 + (size_t)((i * 2654435761u + (unsigned)w->tid) % sizeof buf);
        if (write_bytes(w->s, buf, len) != 0)
            w->errors++;
        else
            w->bytes += (int64_t)len;
    }
    return NULL;
}

static void test_fake_who_calls_what(void)
{
    fk_reset_counts();
    jt_srv_t *srv = srv_start(FAKE_MODE, JT_EP_ECHO);
    JT_REQUIRE(srv != NULL);
    jt_ep_t *c = client_connect(&srv->addr, FAKE_MODE, JT_EP_COLLECT, -1);
    JT_REQUIRE(c != NULL);
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->ready) == 1));
    JT_CHECK(c->s->ops == &fake_transport);
    /* connect ran once, before on_ready. */
    JT_CHECK_EQ(atomic_load(&fk[0].connect), 1);
    JT_CHECK_EQ(atomic_load(&c->ready_mark), 1);
    jt_ep_t *sc = jt_srv_conn(srv, 0);
    JT_REQUIRE(sc != NULL);
    JT_CHECK(sc->s->ops == &fake_transport);

    /* An idle socket is written by the calling thread itself, before the
     * write call returns: no hop to the loop. */
    JT_CHECK_EQ(write_bytes(c->s, "hello", 5), 0);
    JT_CHECK_EQ(atomic_load(&fk[0].cut), 1);
    JT_CHECK_EQ(atomic_load(&fk[0].cut_on_main), 1);
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->nbytes) == 5));

    _Atomic int go = 0;
    writer_t w[W_THREADS];
    for (int i = 0; i < W_THREADS; i++) {
        w[i] = (writer_t){.s = c->s, .tid = i, .go = &go};
        pthread_create(&w[i].th, NULL, writer_main, &w[i]);
    }
    atomic_store(&go, 1);
    int64_t total = 5;
    for (int i = 0; i < W_THREADS; i++) {
        pthread_join(w[i].th, NULL);
        JT_CHECK_EQ(w[i].errors, 0);
        total += w[i].bytes;
    }
    bool echoed = WAIT_UNTIL(atomic_load(&c->nbytes) == total);
    JT_CHECK(echoed);
    JT_CHECK_EQ(atomic_load(&sc->nbytes), total);
    if (!echoed) {
        int cq = -1, sq = -1;
        ioctl(c->s->fd, FIONREAD, &cq);
        ioctl(sc->s->fd, FIONREAD, &sq);
        fprintf(
            stderr,
            "  wrote %lld; client: cut %lld, unwritten %lld, got %lld, %d unread in the kernel; "
            "server: got %lld, cut %lld, unwritten %lld, %d unread in the kernel\n",
            (long long)total, (long long)atomic_load(&fk[0].cut_bytes),
            (long long)atomic_load(&c->s->unwritten), (long long)atomic_load(&c->nbytes), cq,
            (long long)atomic_load(&sc->nbytes), (long long)atomic_load(&fk[1].cut_bytes),
            (long long)atomic_load(&sc->s->unwritten), sq);
    }

    char line[256];
    int n = jet__socket_debug(c->s, line, sizeof line);
    JT_CHECK(n > 0 && (size_t)n < sizeof line);
    JT_CHECK(strstr(line, "counting-tcp") != NULL);
    JT_CHECK(strstr(line, "fake-state") != NULL);
    JT_CHECK_EQ(atomic_load(&fk[0].debug), 1);

    for (int side = 0; side < 2; side++) {
        fake_side_t *f = &fk[side];
        JT_CHECK_EQ(atomic_load(&f->init), 1);
        JT_CHECK_EQ(atomic_load(&f->connect), side == 0 ? 1 : 0);
        JT_CHECK(atomic_load(&f->cut) > 0);
        JT_CHECK_EQ(atomic_load(&f->cut_bytes), total);
        JT_CHECK(atomic_load(&f->on_input) > 0);
        JT_CHECK_EQ(atomic_load(&f->cut_overlap), 0);
        JT_CHECK_EQ(atomic_load(&f->off_loop), 0);
        JT_CHECK_EQ(atomic_load(&f->connect_bad), 0);
        JT_CHECK_EQ(atomic_load(&f->bad_tstate), 0);
        JT_CHECK_EQ(atomic_load(&f->release), 0);
        /* The socket layer never calls these two: server and channel init
         * call global_init; reset is for reusing a socket. */
        JT_CHECK_EQ(atomic_load(&f->global_init), 0);
        JT_CHECK_EQ(atomic_load(&f->reset), 0);
    }
    JT_CHECK(jt_ep_close(c));
    JT_CHECK_EQ(atomic_load(&fk[0].release), 1);
    JT_CHECK(jt_srv_stop(srv));
    JT_CHECK_EQ(atomic_load(&fk[1].release), 1);
    for (int side = 0; side < 2; side++) {
        JT_CHECK_EQ(atomic_load(&fk[side].release_bad), 0);
        JT_CHECK_EQ(atomic_load(&fk[side].bad_tstate), 0);
        JT_CHECK_EQ(atomic_load(&fk[side].init), 1);
    }
}

/* A full kernel buffer: cut says -EAGAIN, the loop asks wait_writable, and
 * the write resumes when the peer reads. */
static void test_fake_wait_writable(void)
{
    fk_reset_counts();
    jet_addr_t addr;
    int lfd = jt_tcp_listen_addr(4, &addr);
    JT_REQUIRE(lfd >= 0);
    jt_ep_t *c = client_connect(&addr, FAKE_MODE, JT_EP_COLLECT, -1);
    JT_REQUIRE(c != NULL);
    int pfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    JT_REQUIRE(pfd >= 0);
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->ready) == 1));

    const size_t total = 24 * MiB, piece = MiB;
    uint8_t *buf = malloc(piece);
    for (size_t off = 0; off < total; off += piece) {
        jt_stream_fill(buf, off, piece);
        JT_CHECK_EQ(write_bytes(c->s, buf, piece), 0);
    }
    JT_CHECK(WAIT_UNTIL(atomic_load(&fk[0].wait_writable) >= 1));
    JT_CHECK(atomic_load(&fk[0].cut_eagain) >= 1);
    size_t got = 0;
    int64_t bad = -1;
    while (got < total) {
        struct pollfd p = {.fd = pfd, .events = POLLIN};
        if (poll(&p, 1, (int)(GUARD_US / 1000)) != 1) break;
        ssize_t r = read(pfd, buf, piece);
        if (r <= 0) break;
        if (bad < 0) bad = jt_stream_check(buf, got, (size_t)r);
        got += (size_t)r;
    }
    free(buf);
    JT_CHECK_EQ(got, total);
    JT_CHECK_EQ(bad, -1);
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->s->unwritten) == 0));
    JT_CHECK_EQ(atomic_load(&fk[0].cut_bytes), (int64_t)total);
    JT_CHECK_EQ(atomic_load(&fk[0].cut_overlap), 0);
    JT_CHECK_EQ(atomic_load(&fk[0].off_loop), 0);
    JT_CHECK(jt_ep_close(c));
    JT_CHECK_EQ(atomic_load(&fk[0].release), 1);
    close(pfd);
    close(lfd);
}

/* connect returns 1: the socket stays in HANDSHAKE, writes wait, and
 * jet__socket_connected(s, 0) makes it ready and sends them in order. */
static void test_fake_handshake(void)
{
    fk_reset_counts();
    atomic_store(&fk_connect_result, 1);
    jt_srv_t *srv = srv_start(JET_SOCKET_MODE_TCP, JT_EP_COLLECT);
    JT_REQUIRE(srv != NULL);
    jt_ep_t *c = client_connect(&srv->addr, FAKE_MODE, JT_EP_COLLECT, -1);
    JT_REQUIRE(c != NULL);
    JT_CHECK(WAIT_UNTIL(atomic_load(&fk_handshaking) != NULL));
    JT_CHECK_EQ(atomic_load(&c->s->state), JET_SOCK_HANDSHAKE);
    jt_ep_t *sc = jt_srv_conn(srv, 0);
    JT_REQUIRE(sc != NULL);
    uint8_t buf[30000];
    jt_stream_fill(buf, 0, sizeof buf);
    JT_CHECK_EQ(write_bytes(c->s, buf, 10000), 0);
    JT_CHECK_EQ(write_bytes(c->s, buf + 10000, 20000), 0);
    /* Nothing may go out before the handshake is done (absence check). */
    jt_sleep_us(100 * 1000);
    JT_CHECK_EQ(atomic_load(&c->ready), 0);
    JT_CHECK_EQ(atomic_load(&sc->nbytes), 0);
    JT_CHECK_EQ(atomic_load(&fk[0].cut), 0);

    JT_CHECK(finish_handshake(0));
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->ready) == 1));
    JT_CHECK_EQ(atomic_load(&c->s->state), JET_SOCK_READY);
    JT_CHECK(WAIT_UNTIL(atomic_load(&sc->nbytes) == (int64_t)sizeof buf));
    uint8_t got[sizeof buf];
    JT_CHECK_EQ(jt_ep_got_copy(sc, got, sizeof got), sizeof got);
    JT_CHECK_EQ(jt_stream_check(got, 0, sizeof got), -1);
    JT_CHECK_EQ(atomic_load(&fk[0].connect), 1);
    JT_CHECK_EQ(atomic_load(&fk[0].connect_bad), 0);
    JT_CHECK_EQ(atomic_load(&c->failed), 0);
    JT_CHECK(jt_ep_close(c));
    JT_CHECK(jt_srv_stop(srv));
    JT_CHECK_EQ(atomic_load(&fk[0].release), 1);
}

/* The handshake fails: the socket fails with its code, queued writes are
 * dropped and freed, on_ready never runs. */
static void test_fake_handshake_fails(void)
{
    fk_reset_counts();
    atomic_store(&fk_connect_result, 1);
    jt_srv_t *srv = srv_start(JET_SOCKET_MODE_TCP, JT_EP_COLLECT);
    JT_REQUIRE(srv != NULL);
    jt_ep_t *c = client_connect(&srv->addr, FAKE_MODE, JT_EP_COLLECT, -1);
    JT_REQUIRE(c != NULL);
    JT_CHECK(WAIT_UNTIL(atomic_load(&fk_handshaking) != NULL));
    int64_t user0 = atomic_load(&g_user_alloc), freed0 = atomic_load(&g_user_freed);
    jet_iobuf_t b;
    jet_iobuf_init(&b);
    void *mem = malloc(4096);
    memset(mem, 'u', 4096);
    atomic_fetch_add(&g_user_alloc, 1);
    JT_CHECK_EQ(jet_iobuf_append_user(&b, mem, 4096, user_free, NULL), 0);
    JT_CHECK_EQ(jet__socket_write(c->s, &b), 0);
    jet_iobuf_fini(&b);
    JT_CHECK(finish_handshake(-EPROTO));
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->failed) == 1));
    JT_CHECK_EQ(atomic_load(&c->err), -EPROTO);
    JT_CHECK_EQ(atomic_load(&c->ready), 0);
    JT_CHECK(WAIT_UNTIL(atomic_load(&g_user_freed) - freed0 == atomic_load(&g_user_alloc) - user0));
    JT_CHECK_EQ(atomic_load(&c->s->unwritten), 0);
    JT_CHECK_EQ(atomic_load(&fk[0].cut), 0);
    JT_CHECK(jt_ep_close(c));
    JT_CHECK_EQ(atomic_load(&fk[0].release), 1);
    JT_CHECK(jt_srv_stop(srv));
}

/* connect itself refuses: the socket fails with its code. */
static void test_fake_connect_error(void)
{
    fk_reset_counts();
    atomic_store(&fk_connect_result, -ECONNABORTED);
    jt_srv_t *srv = srv_start(JET_SOCKET_MODE_TCP, JT_EP_COLLECT);
    JT_REQUIRE(srv != NULL);
    jt_ep_t *c = client_connect(&srv->addr, FAKE_MODE, JT_EP_COLLECT, -1);
    JT_REQUIRE(c != NULL);
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->failed) == 1));
    JT_CHECK_EQ(atomic_load(&c->err), -ECONNABORTED);
    JT_CHECK_EQ(atomic_load(&c->ready), 0);
    JT_CHECK_EQ(atomic_load(&fk[0].connect), 1);
    JT_CHECK_EQ(write_bytes(c->s, "x", 1), -ECONNABORTED);
    JT_CHECK(jt_ep_close(c));
    JT_CHECK_EQ(atomic_load(&fk[0].release), 1);
    JT_CHECK_EQ(atomic_load(&fk[0].release_bad), 0);
    JT_CHECK(jt_srv_stop(srv));
}

/* The connect timeout covers the application handshake too. */
static void test_fake_handshake_timeout(void)
{
    fk_reset_counts();
    atomic_store(&fk_connect_result, 1);
    jt_srv_t *srv = srv_start(JET_SOCKET_MODE_TCP, JT_EP_COLLECT);
    JT_REQUIRE(srv != NULL);
    jt_ep_t *c = client_connect(&srv->addr, FAKE_MODE, JT_EP_COLLECT, 200);
    JT_REQUIRE(c != NULL);
    JT_CHECK(WAIT_UNTIL(atomic_load(&c->failed) == 1));
    JT_CHECK_EQ(atomic_load(&c->err), -ETIMEDOUT);
    JT_CHECK_EQ(atomic_load(&c->ready), 0);
    /* A handshake that completes after the timeout changes nothing. */
    JT_CHECK(finish_handshake(0));
    jt_sleep_us(20 * 1000);
    JT_CHECK_EQ(atomic_load(&c->ready), 0);
    JT_CHECK_EQ(atomic_load(&c->failed), 1);
    JT_CHECK_EQ(atomic_load(&c->s->state), JET_SOCK_FAILED);
    JT_CHECK(jt_ep_close(c));
    JT_CHECK_EQ(atomic_load(&fk[0].release), 1);
    JT_CHECK(jt_srv_stop(srv));
}

/* init fails: connect/accept return its code, release is not called, no fd
 * leaks, and the accepted fd stays the caller's. */
static void test_fake_init_fails(void)
{
    fk_reset_counts();
    atomic_store(&fk_init_result, -ENOMEM);
    jet_addr_t addr;
    JT_REQUIRE(jet__addr_parse("127.0.0.1:9", &addr) == 0);
    jt_ep_t *ep = jt_ep_new(JT_EP_COLLECT, NULL);
    jet_socket_t *s = NULL;
    int fds0 = count_fds();
    JT_CHECK_EQ(jet__socket_connect(&addr, FAKE_MODE, &jt_ep_handler, ep, -1, &s), -ENOMEM);
    JT_CHECK(s == NULL);
    JT_CHECK_EQ(count_fds(), fds0);
    JT_CHECK_EQ(atomic_load(&fk[0].init), 1);

    int sv[2];
    JT_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    jet_addr_t peer;
    JT_REQUIRE(jet__addr_parse("unix:/tmp/jet-net-peer", &peer) == 0);
    JT_CHECK_EQ(
        jet__socket_accept(sv[0], &peer, FAKE_MODE, jet_loop_pick(), &jt_ep_handler, ep, &s),
        -ENOMEM);
    JT_CHECK(s == NULL);
    JT_CHECK(fcntl(sv[0], F_GETFD) >= 0);
    JT_CHECK_EQ(atomic_load(&fk[1].init), 1);
    JT_CHECK_EQ(atomic_load(&fk[0].release) + atomic_load(&fk[1].release), 0);
    /* The caller keeps its owner state: no on_release for a socket it never got. */
    JT_CHECK_EQ(atomic_load(&ep->released), 0);

    /* The same fd is accepted once init works again. */
    atomic_store(&fk_init_result, 0);
    JT_CHECK_EQ(
        jet__socket_accept(sv[0], &peer, FAKE_MODE, jet_loop_pick(), &jt_ep_handler, ep, &s), 0);
    JT_REQUIRE(s != NULL);
    JT_CHECK(write(sv[1], "abc", 3) == 3);
    JT_CHECK(WAIT_UNTIL(atomic_load(&ep->nbytes) == 3));
    ep->s = s;
    close(sv[1]);
    JT_CHECK(WAIT_UNTIL(atomic_load(&ep->failed) == 1));
    JT_CHECK_EQ(atomic_load(&ep->err), -JET_EEOF);
    JT_CHECK(jt_ep_close(ep));
    JT_CHECK_EQ(atomic_load(&fk[1].release), 1);
    JT_CHECK_EQ(atomic_load(&fk[1].release_bad), 0);
}

int main(void)
{
    g_main_thread = pthread_self();
    /* Registry cases first: they check the table before the fake joins it. */
    JT_RUN(test_registry_builtin);
    JT_RUN(test_register_errors);
    JT_RUN(test_register_empty_slot);
    JT_RUN(test_unsupported_stubs);
    JT_RUN(test_unregistered_mode);
    JT_RUN(test_mode_names);
    JT_RUN(test_register_fake);
    JT_RUN(test_fake_who_calls_what);
    JT_RUN(test_fake_wait_writable);
    JT_RUN(test_fake_handshake);
    JT_RUN(test_fake_handshake_fails);
    JT_RUN(test_fake_connect_error);
    JT_RUN(test_fake_handshake_timeout);
    JT_RUN(test_fake_init_fails);
    return jt_finish();
}
