/* Polling mode (urma_use_polling) on the client side of the process, against
 * polling and event-mode servers in other processes: payloads up to 16 MiB
 * byte-exact, many calls in flight, several connections on the one polling
 * loop (urma_poller_num=1), the yielding poller, and the poller going away
 * when its loop has no URMA connection left. */
#include "urma/urma_context.h"
#include "urma_test.h"

#define GUARD_US (60 * 1000000LL)

static void echo_suite(int port)
{
    jet_channel_t *ch = ut_channel(port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {1, 511, 512, 8192, 8193, 100000, 1 << 20, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int rc = jt_echo_bytes(ch, sizes[i], i * 31 + 7, "poll");
        if (rc) fprintf(stderr, "  size %zu: %d\n", sizes[i], rc);
        JT_CHECK_EQ(rc, 0);
    }
    JT_CHECK_EQ(jt_async_batch(ch, 400, 4000, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
}

static void test_polling_client_polling_server(void)
{
    const char *args[] = {"--urma_use_polling=true", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    echo_suite(c.port);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_polling_client_event_server(void)
{
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    echo_suite(c.port);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_polling_yield_server(void)
{
    const char *args[] = {"--urma_use_polling=true", "--urma_poller_yield=true", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    echo_suite(c.port);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

typedef struct probe {
    jet_task_t t;
    jet_loop_t *loop;
    jet_urma_loop_stats_t *st;
    bool exists;
    _Atomic int done;
} probe_t;

static void probe_fn(jet_task_t *t)
{
    probe_t *p = (probe_t *)t;
    jet_urma_loop_t *ul = jet__urma_loop_peek(p->loop);
    p->exists = ul != NULL;
    if (ul) jet__urma_loop_stats(ul, p->st);
    atomic_store(&p->done, 1);
}

/* The URMA state of loop i, read on its own thread; false when it has none. */
static bool probe(int i, jet_urma_loop_stats_t *st)
{
    probe_t p = {.loop = jet_loop_at(i), .st = st};
    if (!p.loop) return false;
    p.t.fn = probe_fn;
    jet_loop_post(p.loop, &p.t);
    if (!jt_wait_at_least(&p.done, 1, 5000000)) abort();
    return p.exists;
}

typedef struct th_arg {
    int port;
    _Atomic int *bad;
} th_arg_t;

static void *conn_main(void *arg)
{
    th_arg_t *a = arg;
    jet_channel_t *ch = ut_channel(a->port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    for (int i = 0; ch && i < 20; i++)
        if (jt_echo_bytes(ch, (size_t)i * 333, (uint64_t)i, "conn") != 0)
            atomic_fetch_add(a->bad, 1);
    if (!ch) atomic_fetch_add(a->bad, 1);
    jet_channel_destroy(ch);
    return NULL;
}

/* Connections from many threads all land on the one polling loop. */
static void test_many_connections_one_poller(void)
{
    const char *args[] = {"--urma_use_polling=true", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    enum { N = 16 };
    _Atomic int bad = 0;
    pthread_t th[N];
    th_arg_t a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (th_arg_t){.port = c.port, .bad = &bad};
        JT_REQUIRE(pthread_create(&th[i], NULL, conn_main, &a[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    JT_CHECK_EQ(atomic_load(&bad), 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    /* Only loop 0 carries URMA; once every connection is gone nothing is
     * attached there any more (and its poller was removed). */
    jet_urma_loop_stats_t st0 = {0}, st1 = {0};
    bool has0 = false, has1 = true;
    JT_CHECK(JT_WAIT_UNTIL((has0 = probe(0, &st0), st0.endpoints == 0), 10000000));
    JT_CHECK(has0);
    JT_CHECK(st0.completions > 0);
    JT_CHECK(st0.pooled > 0);
    if (jet_loops_count() > 1) {
        has1 = probe(1, &st1);
        JT_CHECK(!has1);
    }
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "polling");
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ut_server_role(argc, argv);
    jet_flag_set("urma_use_polling", "true");
    jet_flag_set("urma_poller_num", "1");
    jet_flag_set("max_body_size", "134217728");
    JT_RUN(test_polling_client_polling_server);
    JT_RUN(test_polling_client_event_server);
    JT_RUN(test_polling_yield_server);
    JT_RUN(test_many_connections_one_poller);
    return jt_finish();
}
