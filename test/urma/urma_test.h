/* Helpers shared by the URMA transport tests (header only: each test file
 * is its own executable).
 *
 * - jt_urma_main_setup: every test process gets its own softub fabric
 *   (SOFTUB_FABRIC, inherited by the children it starts) and loads softub by
 *   the flag urma_lib (SOFTUB_LIB, set by ctest).
 * - An echo service: the response carries the request's message and
 *   attachment; message "sleep:<ms>" answers after that long (from a thread),
 *   "close" makes the server process exit at once (a killed peer), "pool"
 *   answers "<pooled> <recycled> <endpoints> <blocks> <jfc_used>": the
 *   server's prepared jetty sets waiting, those of closed connections reset
 *   and pooled again, its URMA endpoints (connections on URMA or setting it
 *   up, and closed ones still draining), its iobuf blocks in use, and the
 *   completion-queue entries its connections hold (and more, see
 *   ut_child_stats_t). "hold:<ms>" answers
 *   after keeping the handler's thread (a loop's, by default) that long;
 *   "hold_mute:<ms>" keeps it as long, then answers from a thread a second
 *   later; "count" requests are echoed and counted, and "counted" answers
 *   with how many came.
 * - Server children (testutil_transport's jt_child_*): the test binary
 *   re-executed with "role=server" and flag arguments serves that echo
 *   service; client children ("role=client") make echo calls.
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
#include "testutil_transport.h"
#include "urma/urma_context.h"

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

/* Call first in main (before any channel or server): parses flag arguments. */
static UT_UNUSED void jt_urma_main_setup(int *argc, char ***argv, const char *name)
{
    jt_self_init();
    if (!getenv("SOFTUB_FABRIC")) {
        char fab[96];
        snprintf(fab, sizeof fab, "jt-%s-%d", name, (int)getpid());
        setenv("SOFTUB_FABRIC", fab, 1);
    }
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

static void *ut_pool_main(void *arg);

static _Atomic int ut_counted;

static UT_UNUSED void ut_echo(Example__EchoService_Service *service,
                              const Example__EchoRequest *req,
                              Example__EchoResponse_Closure closure, void *closure_data)
{
    jet_call_t *call = jet_server_call(closure_data);
    int ms = 0;
    bool mute = sscanf(req->message, "hold_mute:%d", &ms) == 1;
    if (mute) {
        usleep((useconds_t)ms * 1000);
        ms = 1000;
    }
    if (mute || sscanf(req->message, "sleep:%d", &ms) == 1) {
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
    if (sscanf(req->message, "hold:%d", &ms) == 1) usleep((useconds_t)ms * 1000);
    if (strcmp(req->message, "count") == 0) atomic_fetch_add(&ut_counted, 1);
    char counted[16];
    if (strcmp(req->message, "counted") == 0) {
        snprintf(counted, sizeof counted, "%d", atomic_load(&ut_counted));
        Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
        resp.message = counted;
        closure(&resp, closure_data);
        return;
    }
    if (strcmp(req->message, "pool") == 0) {
        /* Read on the loops' own threads, which this handler may hold. */
        ut_later_t *l = calloc(1, sizeof *l);
        pthread_t th;
        if (!l) abort();
        l->closure = closure;
        l->closure_data = closure_data;
        if (pthread_create(&th, NULL, ut_pool_main, l) != 0) abort();
        pthread_detach(th);
        return;
    }
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = req->message;
    jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    closure(&resp, closure_data);
}

static UT_UNUSED Example__EchoService_Service ut_service = EXAMPLE__ECHO_SERVICE__INIT(ut_);

/* An in-process echo server on 127.0.0.1 at a free port (*port_p), closing
 * connections idle for idle_sec (0: never). */
static UT_UNUSED jet_server_t *ut_server_start_idle(jet_socket_mode_t mode, int idle_sec,
                                                   int *port_p)
{
    jet_server_options_t o;
    jet_server_options_init(&o);
    o.socket_mode = mode;
    o.idle_timeout_sec = idle_sec;
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

static UT_UNUSED jet_server_t *ut_server_start(jet_socket_mode_t mode, int *port_p)
{
    return ut_server_start_idle(mode, 0, port_p);
}

/* ---- server children ---------------------------------------------------------- */

/* Stores "<int32 flag>=<value>" as code may (JET_FLAG_STORE), past the
 * flag's range. 0, or -1 for no such int32 flag. */
static UT_UNUSED int ut_flag_store32(const char *spec)
{
    const char *eq = strchr(spec, '=');
    char name[64];
    if (!eq || (size_t)(eq - spec) >= sizeof name) return -1;
    memcpy(name, spec, (size_t)(eq - spec));
    name[eq - spec] = '\0';
    const jet_flag_t *f = jet_flag_find(name);
    if (!f || f->type != JET_FLAG_TYPE_INT32) return -1;
    __atomic_store_n((int32_t *)f->ptr, (int32_t)atoi(eq + 1), __ATOMIC_RELAXED);
    return 0;
}

/* The "role=server" entry: serves until stdin closes; args "mode=<name>",
 * "idle=<idle_timeout_sec>" and "store32=<flag>=<value>" (ut_flag_store32).
 * Returns the process exit status. */
static UT_UNUSED int ut_server_role(int argc, char **argv)
{
    jet_socket_mode_t mode = JET_SOCKET_MODE_URMA;
    int idle = 0;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "mode=", 5) == 0 && jet_socket_mode_parse(argv[i] + 5, &mode) < 0)
            return 3;
        if (strncmp(argv[i], "idle=", 5) == 0) idle = atoi(argv[i] + 5);
        if (strncmp(argv[i], "store32=", 8) == 0 && ut_flag_store32(argv[i] + 8) < 0) return 3;
    }
    int port = 0;
    jet_server_t *srv = ut_server_start_idle(mode, idle, &port);
    if (!srv) return 4;
    return jt_serve_until_stdin_closes(srv, port);
}

/* ---- clients ------------------------------------------------------------------ */

/* max_retry < 0: the default. */
static UT_UNUSED jet_channel_t *ut_channel_retry(int port, jet_socket_mode_t mode,
                                                 int32_t timeout_ms, jet_connection_type_t type,
                                                 int32_t max_retry)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = mode;
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms;
    o.connection_type = type;
    if (max_retry >= 0) o.max_retry = max_retry;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    if (jet_channel_create(addr, &o, &ch) < 0) return NULL;
    return ch;
}

static UT_UNUSED jet_channel_t *ut_channel(int port, jet_socket_mode_t mode, int32_t timeout_ms,
                                           jet_connection_type_t type)
{
    return ut_channel_retry(port, mode, timeout_ms, type, -1);
}

/* ---- client children ----------------------------------------------------------- */

/* The "role=client port=<p> [mode=<m>] [calls=<n>] [size=<bytes>]" entry:
 * n synchronous echoes through one channel; exit 0 when all came back
 * byte-exact, else the first error code (1 for wrong bytes). */
typedef struct ut_flag_later {
    int ms;
    char name[64], value[64];
} ut_flag_later_t;

static UT_UNUSED void *ut_flag_later_main(void *arg)
{
    ut_flag_later_t *f = arg;
    usleep((useconds_t)f->ms * 1000);
    jet_flag_set(f->name, f->value);
    return NULL;
}

static UT_UNUSED jet_urma_loop_stats_t ut_urma_totals(int *spinning_p);

/* Waits up to 10 s until this process has no URMA endpoint left and its
 * reserved completion-queue entries are back at jfc_used; the totals seen
 * last go to *st_p (may be NULL). True when they got there. */
static UT_UNUSED bool ut_urma_released(uint32_t jfc_used, jet_urma_loop_stats_t *st_p)
{
    jet_urma_loop_stats_t st;
    bool r = JT_WAIT_UNTIL((st = ut_urma_totals(NULL), st.endpoints == 0 && st.jfc_used == jfc_used),
                           10000000);
    if (st_p) *st_p = st;
    return r;
}

typedef struct ut_client_thread {
    int port, calls, rc;
    size_t size;
    jet_socket_mode_t mode;
    _Atomic int *go; /* 1: call; -1: give up */
    jet_channel_t *ch;
} ut_client_thread_t;

/* One channel of a client child: its calls begin when every thread's do
 * (the process's first use of URMA comes from all of them at once). */
static UT_UNUSED void *ut_client_thread_main(void *arg)
{
    ut_client_thread_t *t = arg;
    t->ch = ut_channel(t->port, t->mode, 10000, JET_CONNECTION_SINGLE);
    while (atomic_load(t->go) == 0)
        usleep(100);
    t->rc = t->ch && atomic_load(t->go) > 0 ? 0 : 4;
    for (int i = 0; i < t->calls && t->rc == 0; i++)
        t->rc = jt_echo_bytes(t->ch, t->size, (uint64_t)i * 77, "child");
    return NULL;
}

/* Args: port=, calls=, size=, mode=, threads= (that many channels, one per
 * thread, calling at once); set=<flag>=<value> and set_after_ms=<ms> (a
 * thread sets the flag that long after the start); expect_urma=1 (the
 * answers must come over URMA on the one connection each channel opens, and
 * after the channels are gone no endpoint and no completion-queue share may
 * stay: exit 6, 8 and 7 otherwise) or expect_urma=0 (none may: exit 9). */
static UT_UNUSED int ut_client_role(int argc, char **argv)
{
    int port = 0, calls = 3, threads = 1;
    size_t size = 1000;
    int expect_urma = -1;
    ut_flag_later_t later = {.ms = -1};
    jet_socket_mode_t mode = JET_SOCKET_MODE_URMA;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "port=", 5) == 0) port = atoi(argv[i] + 5);
        if (strncmp(argv[i], "calls=", 6) == 0) calls = atoi(argv[i] + 6);
        if (strncmp(argv[i], "size=", 5) == 0) size = (size_t)atol(argv[i] + 5);
        if (strncmp(argv[i], "mode=", 5) == 0 && jet_socket_mode_parse(argv[i] + 5, &mode) < 0)
            return 3;
        if (strncmp(argv[i], "expect_urma=", 12) == 0) expect_urma = atoi(argv[i] + 12) != 0;
        if (strncmp(argv[i], "threads=", 8) == 0) threads = atoi(argv[i] + 8);

        if (strncmp(argv[i], "set_after_ms=", 13) == 0) later.ms = atoi(argv[i] + 13);
        if (strncmp(argv[i], "set=", 4) == 0 &&
            sscanf(argv[i] + 4, "%63[^=]=%63s", later.name, later.value) != 2)
            return 3;
    }
    if (threads < 1 || threads > 64) return 3;
    pthread_t th;
    if (later.ms >= 0 && pthread_create(&th, NULL, ut_flag_later_main, &later) != 0) return 3;
    _Atomic int go = 0;
    ut_client_thread_t t[64];
    pthread_t tt[64];
    int started = 1; /* t[0] is this thread */
    for (int i = 0; i < threads; i++) {
        t[i] = (ut_client_thread_t){
            .port = port, .calls = calls, .size = size, .mode = mode, .go = &go};
        if (i > 0 && pthread_create(&tt[i], NULL, ut_client_thread_main, &t[i]) != 0) break;
        if (i > 0) started++;
    }
    atomic_store(&go, started == threads ? 1 : -1);
    ut_client_thread_main(&t[0]);
    int rc = started == threads ? 0 : 3;
    for (int i = 1; i < started; i++)
        pthread_join(tt[i], NULL);
    for (int i = 0; i < started && rc == 0; i++)
        rc = t[i].rc;
    jet_urma_loop_stats_t st = ut_urma_totals(NULL);
    for (int i = 0; i < started; i++)
        if (t[i].ch) jet_channel_destroy(t[i].ch);
    if (later.ms >= 0) pthread_join(th, NULL);
    if (rc == 0 && expect_urma == 0 && st.c.recv_copied + st.c.recv_zerocopy > 0) return 9;
    if (rc == 0 && expect_urma == 1) {
        if (st.c.recv_copied + st.c.recv_zerocopy < (uint64_t)calls * (uint64_t)threads) return 6;
        if (st.attaches != (uint64_t)threads) return 8; /* one failed and reconnected */
        if (!ut_urma_released(0, NULL)) return 7;
    }
    return rc < 0 ? 1 : rc > 255 ? rc % 250 + 5 : rc;
}

/* Runs a client child (args: "port=..", flags, ...; envs as for servers) to
 * its end; returns its exit status (-1 when it had to be killed). */
static UT_UNUSED int ut_client_run(const char *const *args, const char *const *envs)
{
    return jt_run_role("role=client", args, envs, 120000);
}
/* ---- per-loop URMA counters ------------------------------------------------ */

typedef struct ut_probe {
    jet_task_t t;
    jet_loop_t *loop;
    jet_urma_loop_stats_t st;
    bool exists;
    _Atomic int done;
} ut_probe_t;

static UT_UNUSED void ut_probe_fn(jet_task_t *t)
{
    ut_probe_t *p = (ut_probe_t *)t;
    jet_urma_loop_t *ul = jet__urma_loop_peek(p->loop);
    p->exists = ul != NULL;
    if (ul) jet__urma_loop_stats(ul, &p->st);
    atomic_store(&p->done, 1);
}

/* The counters of every loop of this process, each read on its own thread,
 * summed; *spinning_p (when given) counts the loops in a spell of polling. */
static UT_UNUSED jet_urma_loop_stats_t ut_urma_totals(int *spinning_p)
{
    jet_urma_loop_stats_t sum;
    memset(&sum, 0, sizeof sum);
    int spinning = 0;
    for (int i = 0; i < jet_loops_count(); i++) {
        ut_probe_t p = {.loop = jet_loop_at(i)};
        p.t.fn = ut_probe_fn;
        jet_loop_post(p.loop, &p.t);
        if (!jt_wait_at_least(&p.done, 1, 5000000)) abort();
        if (!p.exists) continue;
        sum.endpoints += p.st.endpoints;
        sum.attaches += p.st.attaches;
        sum.pooled += p.st.pooled;
        sum.jfc_used += p.st.jfc_used;
        sum.jfcs += p.st.jfcs;
        sum.recycled += p.st.recycled;
        sum.filled += p.st.filled;
        sum.srq_depth += p.st.srq_depth;
        sum.srq_posted += p.st.srq_posted;
        sum.srq_out += p.st.srq_out;
        sum.srq_kept += p.st.srq_kept;
        sum.srq_refused += p.st.srq_refused;
        sum.completions += p.st.completions;
        sum.events += p.st.events;
        sum.spins += p.st.spins;
        sum.looks_found += p.st.looks_found;
        spinning += p.st.spinning;
        sum.c.recv_zerocopy += p.st.c.recv_zerocopy;
        sum.c.recv_copied += p.st.c.recv_copied;
        sum.c.credit_msgs += p.st.c.credit_msgs;
        sum.c.data_wrs += p.st.c.data_wrs;
        sum.c.signalled_wrs += p.st.c.signalled_wrs;
        sum.c.send_bounced += p.st.c.send_bounced;
        sum.c.window_waits += p.st.c.window_waits;
        sum.c.recv_refused += p.st.c.recv_refused;
        sum.c.recv_starved += p.st.c.recv_starved;
    }
    if (spinning_p) *spinning_p = spinning;
    return sum;
}

/* What this process's URMA loops have carried so far: a test takes a mark
 * before its calls and ut_expect_urma after them, so that it fails when the
 * calls went over TCP (the fallback makes every echo succeed either way). */
typedef struct ut_urma_mark {
    uint64_t recv;     /* receives that carried bytes (answers, and requests in-process) */
    uint64_t attaches; /* connections attached to a URMA loop */
} ut_urma_mark_t;

static UT_UNUSED ut_urma_mark_t ut_urma_mark(void)
{
    jet_urma_loop_stats_t st = ut_urma_totals(NULL);
    return (ut_urma_mark_t){.recv = st.c.recv_copied + st.c.recv_zerocopy,
                            .attaches = st.attaches};
}

/* At least `recvs` receives over URMA since m (a synchronous call's answer
 * is at least one; the sends of calls in flight together may share one) and,
 * when conns >= 0, exactly that many connections attached since m (more: one
 * failed and the channel reconnected). */
#define ut_expect_urma(m, recvs, conns)                                                    \
    do {                                                                                   \
        ut_urma_mark_t now_ = ut_urma_mark();                                              \
        JT_CHECK(now_.recv - (m).recv >= (uint64_t)(recvs));                               \
        if ((conns) >= 0) JT_CHECK_EQ(now_.attaches - (m).attaches, (uint64_t)(conns));    \
    } while (0)

/* Since m: conns connections offered URMA (a set attached for each hello)
 * and nothing came over URMA (declined: the calls ran over TCP). */
#define ut_expect_declined(m, conns)                                                       \
    do {                                                                                   \
        ut_urma_mark_t now_ = ut_urma_mark();                                              \
        JT_CHECK_EQ(now_.attaches - (m).attaches, (uint64_t)(conns));                      \
        JT_CHECK_EQ(now_.recv, (m).recv);                                                  \
    } while (0)

/* A server child's state, from its "pool" answer (ut_pool_main). */
typedef struct ut_child_stats {
    unsigned pooled, endpoints, jfc_used;
    unsigned long long recycled;
    /* iobuf blocks in use, but for those posted in (or kept for) shared receive queues
     * (a loop keeps the buffers of its busiest time posted, up to its
     * queue's depth: srq_posted of srq_depth, every loop's together) */
    size_t blocks;
    unsigned srq_posted, srq_depth;
    /* shared queues' buffers kept for want of room, posts refused so */
    unsigned srq_kept;
    unsigned long long srq_refused;
    /* connections' own receive queues: re-posts refused for want of room */
    unsigned long long recv_refused;
    unsigned jfcs; /* completion queues its loops made */
    unsigned long long filled; /* sets its loops made for their pools */
} ut_child_stats_t;

/* 0, or the call's error code (EPROTO: an answer that does not parse). */
static UT_UNUSED int ut_child_pool_rc(jet_channel_t *ch, ut_child_stats_t *st)
{
    jet_call_t *call = jet_call_create();
    if (!call) return ENOMEM;
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "pool";
    int rc = jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL,
                              NULL);
    if (rc == 0) rc = jet_call_error_code(call);
    const Example__EchoResponse *resp = (const Example__EchoResponse *)jet_call_response(call);
    if (rc == 0 && (!resp || !resp->message ||
                    sscanf(resp->message, "%u %llu %u %zu %u %u %u %u %llu %llu %u %llu",
                           &st->pooled, &st->recycled, &st->endpoints, &st->blocks, &st->jfc_used,
                           &st->srq_posted, &st->srq_depth, &st->srq_kept, &st->srq_refused,
                           &st->recv_refused, &st->jfcs, &st->filled) != 12))
        rc = EPROTO;
    jet_call_destroy(call);
    return rc < 0 ? -rc : rc;
}

static UT_UNUSED bool ut_child_pool(jet_channel_t *ch, ut_child_stats_t *st)
{
    return ut_child_pool_rc(ch, st) == 0;
}

/* This process's iobuf blocks in use (their count, and their bytes in
 * *bytes_p unless NULL), but for the buffers posted in (or kept for) the
 * shared receive queues: st's. */
static UT_UNUSED size_t ut_blocks_in_use(const jet_urma_loop_stats_t *st, size_t *bytes_p)
{
    static const size_t size[JET_BLOCK_NCLASS] = {JET_BLOCK_SIZE_8K, JET_BLOCK_SIZE_64K,
                                                  JET_BLOCK_SIZE_2M};
    jet_block_pool_stats_t bp;
    jet__block_pool_stats(&bp);
    size_t blocks = 0, bytes = 0;
    for (int i = 0; i < JET_BLOCK_NCLASS; i++) {
        blocks += bp.blocks_in_use[i];
        bytes += bp.blocks_in_use[i] * size[i];
    }
    size_t srq = (size_t)st->srq_posted + st->srq_kept;
    if (bytes_p) *bytes_p = bytes - srq * jet__urma_recv_size();
    return blocks - srq;
}

static void *ut_pool_main(void *arg)
{
    ut_later_t *l = arg;
    jet_urma_loop_stats_t st = ut_urma_totals(NULL);
    char text[160];
    size_t blocks = ut_blocks_in_use(&st, NULL);
    snprintf(text, sizeof text, "%u %llu %u %zu %u %u %u %u %llu %llu %u %llu", st.pooled,
             (unsigned long long)st.recycled, st.endpoints, blocks, st.jfc_used, st.srq_posted,
             st.srq_depth, st.srq_kept, (unsigned long long)st.srq_refused,
             (unsigned long long)st.c.recv_refused, st.jfcs, (unsigned long long)st.filled);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = text;
    l->closure(&resp, l->closure_data);
    free(l);
    return NULL;
}

#endif
