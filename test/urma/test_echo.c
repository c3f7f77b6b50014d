/* Echo over URMA (softub): in one process and between two processes,
 * payloads 1 B .. 64 MiB compared byte for byte; many calls in flight on
 * small queues (window exhaustion and recovery, both directions, asymmetric
 * queue sizes); brpc's envelope (no jetrpc extensions) against a jetrpc
 * peer; many connections; short connections that recycle jetties. */
#include "urma_test.h"

#define GUARD_US (90 * 1000000LL)

static const char *const max_body_arg = "--max_body_size=134217728";

static void test_inprocess_echo(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &port);
    JT_REQUIRE(srv);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = ut_channel(port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {0, 1, 100, 511, 512, 8191, 8192, 8193, 65536, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int rc = jt_echo_bytes(ch, sizes[i], i * 7919, "inproc");
        if (rc) fprintf(stderr, "  size %zu: %d\n", sizes[i], rc);
        JT_CHECK_EQ(rc, 0);
    }
    JT_CHECK_EQ(jt_async_batch(ch, 300, 3000, 0, GUARD_US, NULL), 0);
    /* Both ends are ours: the client's and the server's connection; each
     * synchronous call is a receive on each side, a batch at least one. */
    ut_expect_urma(m, 2 * (10 + 1), 2);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

/* 15 calls, the answers over URMA on the channel's one connection. */
static void run_sizes(jet_channel_t *ch)
{
    ut_urma_mark_t m = ut_urma_mark();
    static const size_t sizes[] = {1,     2,     100,   4095,    4096,    8191,     8192,    8193,
                                   65535, 65536, 65537, 1 << 20, 3 << 20, 16 << 20, 64 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int rc = jt_echo_bytes(ch, sizes[i], i * 104729 + 1, "size");
        if (rc) fprintf(stderr, "  size %zu: %d\n", sizes[i], rc);
        JT_CHECK_EQ(rc, 0);
    }
    ut_expect_urma(m, sizeof sizes / sizeof sizes[0], -1);
}

static void test_two_process_sizes(void)
{
    const char *args[] = {max_body_arg, NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 60000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    run_sizes(ch);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* The server polls (its loops spin), the client waits for events. */
static void test_two_process_polling_server(void)
{
    const char *args[] = {max_body_arg, "--urma_use_polling=true", "--urma_poller_num=1", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 60000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    run_sizes(ch);
    JT_CHECK_EQ(jt_async_batch(ch, 500, 1000, 0, GUARD_US, NULL), 0);
    ut_expect_urma(m, 15 + 1, 1);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* Many calls in flight through 16-deep queues: the windows run dry again and
 * again and must always reopen. */
static void windows(const char *server_sq, const char *server_rq, int client_sq, int client_rq)
{
    const char *args[] = {max_body_arg, server_sq, server_rq, NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    char v[16];
    snprintf(v, sizeof v, "%d", client_sq);
    jet_flag_set("urma_sq_size", v);
    snprintf(v, sizeof v, "%d", client_rq);
    jet_flag_set("urma_rq_size", v);
    ut_urma_mark_t m = ut_urma_mark();
    uint64_t waits = ut_urma_totals(NULL).c.window_waits;
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 60000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    int err = 0;
    JT_CHECK_EQ(jt_async_batch(ch, 400, 100, 0, GUARD_US, &err), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 64, 100000, 0, GUARD_US, &err), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 8 << 20, 5, "big"), 0);
    if (err) fprintf(stderr, "  first error %d\n", err);
    ut_expect_urma(m, 1 + 1 + 1, 1);
    jet_channel_destroy(ch);
    /* With a small send window (its SQ, or the server's RQ) the client's
     * writes ran dry and went on (an endpoint's counts join its loop's when
     * it ends). */
    jet_urma_loop_stats_t st;
    JT_CHECK(JT_WAIT_UNTIL((st = ut_urma_totals(NULL), st.endpoints == 0), 10000000));
    if (client_sq < 128 || strcmp(server_rq, "--urma_rq_size=16") == 0)
        JT_CHECK(st.c.window_waits > waits);
    jet_flag_set("urma_sq_size", "128");
    jet_flag_set("urma_rq_size", "128");
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_window_exhaustion_small_both(void)
{
    windows("--urma_sq_size=16", "--urma_rq_size=16", 16, 16);
}

static void test_window_exhaustion_asymmetric(void)
{
    /* The server's sends see the client's 128 receives through a 16-deep
     * SQ, and the other way round. */
    windows("--urma_sq_size=16", "--urma_rq_size=128", 128, 16);
    windows("--urma_sq_size=128", "--urma_rq_size=16", 16, 128);
}

/* brpc's envelope: a peer without jetrpc's extensions gets payload as SEND
 * and credits as standalone SEND_IMM only. */
static void test_brpc_envelope(void)
{
    const char *args[] = {max_body_arg, "--urma_jetrpc_extensions=false", "--urma_sq_size=32",
                          "--urma_rq_size=32", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 60000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_async_batch(ch, 300, 2000, 0, GUARD_US, NULL), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 4 << 20, 9, "big"), 0);
    ut_expect_urma(m, 1 + 1, 1);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A brpc peer does not say its SQ depth, and may run a smaller one than
 * its receive queue (urma_sq_size 16, urma_rq_size 128): its window toward
 * us is then min(16, our 32) - 3 = 13 sends, fewer than half of what the
 * guess from its receive queue (29) would let us owe before a credit message
 * goes. Every answer it sends must still get its credit back in time: more
 * answers than one window, one call at a time and in batches. */
static void test_brpc_small_sq_credits(void)
{
    const char *args[] = {max_body_arg, "--urma_jetrpc_extensions=false", "--urma_sq_size=16",
                          "--urma_rq_size=128", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 3000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    int bad = 0;
    for (int i = 0; i < 60 && bad == 0; i++)
        bad = jt_echo_bytes(ch, 100 + (size_t)i, (uint64_t)i + 5, "small-sq") != 0;
    JT_CHECK_EQ(bad, 0);
    JT_CHECK_EQ(jt_async_batch(ch, 200, 1000, 0, GUARD_US, NULL), 0);
    ut_expect_urma(m, 60, 1); /* answers of a batch may share a receive */
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* 64 KiB receive buffers on the server, 8 KiB on the client: each side
 * cuts its WRs to the other's buffer size. */
static void test_large_receive_buffers(void)
{
    const char *args[] = {max_body_arg, "--urma_recv_block_size=65536", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 60000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    ut_urma_mark_t m = ut_urma_mark();
    static const size_t sizes[] = {1, 8192, 65535, 65536, 65537, 1 << 20, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, sizes[i], i + 17, "big-buffers"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 100, 100000, 0, GUARD_US, NULL), 0);
    ut_expect_urma(m, 7 + 1, 1);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

typedef struct conn_arg {
    int port;
    _Atomic int *bad;
    int id;
} conn_arg_t;

static void *conn_main(void *arg)
{
    conn_arg_t *a = arg;
    jet_channel_t *ch = ut_channel(a->port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    if (!ch) {
        atomic_fetch_add(a->bad, 1);
        return NULL;
    }
    for (int i = 0; i < 5; i++)
        if (jt_echo_bytes(ch, 1000 + (size_t)a->id * 10 + (size_t)i,
                          (uint64_t)a->id * 31 + (uint64_t)i, "many") != 0)
            atomic_fetch_add(a->bad, 1);
    jet_channel_destroy(ch);
    return NULL;
}

static void test_many_connections(void)
{
    enum { N = 48 };
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    ut_urma_mark_t m = ut_urma_mark();
    _Atomic int bad = 0;
    pthread_t th[N];
    conn_arg_t a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (conn_arg_t){.port = c.port, .bad = &bad, .id = i};
        JT_REQUIRE(pthread_create(&th[i], NULL, conn_main, &a[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    JT_CHECK_EQ(atomic_load(&bad), 0);
    ut_expect_urma(m, N * 5, N);
    m = ut_urma_mark();
    /* Short connections: every call on a new connection, so jetty sets are
     * reset and reused over and over on both sides. */
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SHORT);
    JT_REQUIRE(ch);
    for (int i = 0; i < 60; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, (size_t)i * 97, (uint64_t)i, "short"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 40, 5000, 0, GUARD_US, NULL), 0);
    /* A connection per call, each over URMA. */
    ut_expect_urma(m, 60 + 40, 60 + 40);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* brpc's send_rpc_in_many_qp, scaled to this machine: 4 server processes
 * and 160 URMA channels to them (80 per event loop of this process at most),
 * all open at once, from 8
 * threads; every channel makes 2 echoes of about 4 KiB, all over URMA, one
 * connection each. Then every endpoint of this process goes away. (A loop's
 * completion queue, 32768 entries, holds about 245 connections, or 125 with
 * per-connection receive queues; later ones use TCP, as urma_jfc_depth
 * says.) */
enum { MANY_SERVERS = 4, MANY_CHANNELS = 160, MANY_THREADS = 8 };

typedef struct many_arg {
    jet_channel_t **chs;
    int first, n;
    _Atomic int *bad;
} many_arg_t;

static void *many_main(void *arg)
{
    many_arg_t *a = arg;
    for (int round = 0; round < 2; round++)
        for (int i = a->first; i < a->first + a->n; i++)
            if (jt_echo_bytes(a->chs[i], 4000 + (size_t)i, (uint64_t)i * 7 + (uint64_t)round,
                              "many-servers") != 0)
                atomic_fetch_add(a->bad, 1);
    return NULL;
}

static void test_many_servers(void)
{
    jt_child_t c[MANY_SERVERS];
    int started = 0;
    for (; started < MANY_SERVERS; started++)
        if (jt_child_start(&c[started], NULL, NULL) != 0) break;
    JT_REQUIRE(started == MANY_SERVERS);
    /* At most 80 per loop of this process (a loop's completion queue holds
     * about 125 connections with per-connection receive queues). */
    int loops = jet_loops_count();
    int nch = loops > 0 && loops * 80 < MANY_CHANNELS ? loops * 80 : MANY_CHANNELS;
    static jet_channel_t *chs[MANY_CHANNELS];
    ut_urma_mark_t m = ut_urma_mark();
    for (int i = 0; i < nch; i++) {
        chs[i] = ut_channel(c[i % MANY_SERVERS].port, JET_SOCKET_MODE_URMA, 30000,
                            JET_CONNECTION_SINGLE);
        JT_REQUIRE(chs[i]);
    }
    _Atomic int bad = 0;
    pthread_t th[MANY_THREADS];
    many_arg_t a[MANY_THREADS];
    for (int t = 0; t < MANY_THREADS; t++) {
        a[t] = (many_arg_t){
            .chs = chs, .first = t * (nch / MANY_THREADS), .n = nch / MANY_THREADS, .bad = &bad};
        JT_REQUIRE(pthread_create(&th[t], NULL, many_main, &a[t]) == 0);
    }
    for (int t = 0; t < MANY_THREADS; t++)
        pthread_join(th[t], NULL);
    JT_CHECK_EQ(atomic_load(&bad), 0);
    ut_expect_urma(m, 2 * nch, nch);
    for (int i = 0; i < nch; i++)
        jet_channel_destroy(chs[i]);
    jet_urma_loop_stats_t t;
    JT_CHECK(JT_WAIT_EVERY((t = ut_urma_totals(NULL), t.endpoints == 0), 20000000, 50000));
    for (int i = 0; i < MANY_SERVERS; i++)
        JT_CHECK_EQ(jt_child_stop(&c[i]), 0);
}

/* Eight threads of a fresh client process make its first URMA calls at
 * once (the context, the loops' completion queues and the pools are set up
 * under their feet): every channel gets its one URMA connection. */
static void test_concurrent_first_use(void)
{
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    char p[32];
    snprintf(p, sizeof p, "port=%d", c.port);
    const char *args[] = {p, "threads=8", "calls=3", "size=3000", "expect_urma=1", NULL};
    for (int round = 0; round < 3; round++)
        JT_CHECK_EQ(ut_client_run(args, NULL), 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "echo");
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ut_server_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=client") == 0) return ut_client_role(argc, argv);
    jet_flag_set("max_body_size", "134217728");
    JT_RUN(test_inprocess_echo);
    JT_RUN(test_two_process_sizes);
    JT_RUN(test_two_process_polling_server);
    JT_RUN(test_window_exhaustion_small_both);
    JT_RUN(test_window_exhaustion_asymmetric);
    JT_RUN(test_brpc_envelope);
    JT_RUN(test_brpc_small_sq_credits);
    JT_RUN(test_large_receive_buffers);
    JT_RUN(test_many_connections);
    JT_RUN(test_many_servers);
    JT_RUN(test_concurrent_first_use);
    return jt_finish();
}
