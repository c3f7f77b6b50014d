/* The shared receive queue (urma_shared_rq_size): every URMA connection of
 * an event loop receives into one JFR whose posted buffers are bounded by
 * the flag, however many connections the loop carries; receives are told
 * apart by the jetty they came through. Both processes run with it: this
 * one (client ends, flag set in main before any URMA use) and the server
 * children. */
#include "urma_test.h"

#define GUARD_US (90 * 1000000LL)
#define CLIENT_SRQ 64

typedef struct sq_conn {
    int port;
    size_t size;
    int calls, batch;
    pthread_barrier_t *connected, *checked;
    _Atomic int *bad;
} sq_conn_t;

/* One channel: synchronous calls and a batch in flight, then (with the
 * connection still open) the barriers that let the main thread look. */
static void *sq_conn_main(void *arg)
{
    sq_conn_t *a = arg;
    jet_channel_t *ch = ut_channel(a->port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    int rc = ch ? 0 : -1;
    for (int i = 0; i < a->calls && rc == 0; i++)
        rc = jt_echo_bytes(ch, a->size + (size_t)i * 131, (uint64_t)i * 31 + a->size, "srq");
    if (rc == 0 && a->batch) rc = jt_async_batch(ch, a->batch, a->size, 0, GUARD_US, NULL);
    if (rc) atomic_fetch_add(a->bad, 1);
    pthread_barrier_wait(a->connected);
    pthread_barrier_wait(a->checked);
    if (ch) jet_channel_destroy(ch);
    return NULL;
}

typedef struct sq_run {
    int port, n, calls, batch;
    size_t size;
    jet_urma_loop_stats_t mine; /* this process, while every connection was open */
    size_t recv_blocks;         /* its blocks of receive size in use then */
    int bad;
} sq_run_t;

/* n channels at once, each as sq_conn_main; the totals of this process
 * are taken while all of them are open. Every echo must succeed, and over
 * URMA: one connection per channel, each call at least one receive. */
static void sq_run(sq_run_t *r)
{
    ut_urma_mark_t m = ut_urma_mark();
    pthread_barrier_t connected, checked;
    pthread_barrier_init(&connected, NULL, (unsigned)r->n + 1);
    pthread_barrier_init(&checked, NULL, (unsigned)r->n + 1);
    _Atomic int bad = 0;
    pthread_t th[64];
    sq_conn_t a[64];
    JT_REQUIRE(r->n <= 64);
    for (int i = 0; i < r->n; i++) {
        a[i] = (sq_conn_t){.port = r->port,
                           .size = r->size,
                           .calls = r->calls,
                           .batch = r->batch,
                           .connected = &connected,
                           .checked = &checked,
                           .bad = &bad};
        JT_REQUIRE(pthread_create(&th[i], NULL, sq_conn_main, &a[i]) == 0);
    }
    pthread_barrier_wait(&connected);
    r->mine = ut_urma_totals(NULL);
    jet_block_pool_stats_t bp;
    jet__block_pool_stats(&bp);
    int cls = jet__urma_recv_size() == JET_BLOCK_SIZE_64K ? JET_BLOCK_CLASS_64K : JET_BLOCK_CLASS_8K;
    r->recv_blocks = bp.blocks_in_use[cls];
    pthread_barrier_wait(&checked);
    for (int i = 0; i < r->n; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&connected);
    pthread_barrier_destroy(&checked);
    r->bad = atomic_load(&bad);
    JT_CHECK_EQ(r->bad, 0);
    ut_expect_urma(m, (uint64_t)r->n * (uint64_t)(r->calls + 1), r->n);
}

/* 40 connections, each granting its peer 32 credits (1280 receives' worth):
 * every echo is byte-exact over URMA, while each side keeps at most its
 * shared queues' buffers posted (per-connection queues would post 1280 on
 * each side). */
static void test_many_connections_bounded(void)
{
    const char *args[] = {"--urma_shared_rq_size=48", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *probe = ut_channel(c.port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(probe);
    ut_child_stats_t p0, p;
    JT_REQUIRE(ut_child_pool(probe, &p0));
    /* The probe's loop has its queue: depth 48, posted its 32 credits. */
    JT_CHECK(p0.srq_depth >= 48 && p0.srq_depth % 48 == 0);
    JT_CHECK_EQ(p0.srq_posted, 32u);
    sq_run_t r = {.port = c.port, .n = 40, .calls = 4, .batch = 8, .size = 20000};
    sq_run(&r);
    /* This side: 41 client connections on queues of CLIENT_SRQ per loop. */
    JT_CHECK_EQ(r.mine.endpoints, 41u);
    JT_CHECK(r.mine.srq_depth >= CLIENT_SRQ && r.mine.srq_depth % CLIENT_SRQ == 0);
    JT_CHECK(r.mine.srq_posted + r.mine.srq_out <= r.mine.srq_depth);
    JT_CHECK_EQ(r.mine.recv_held, r.mine.srq_out);
    /* Its receive-size blocks: the shared queues' and a few in flight, not
     * the 1312 that 41 per-connection queues of 32 would post. */
    fprintf(stderr, "  client blocks of receive size in use: %zu\n", r.recv_blocks);
    JT_CHECK(r.recv_blocks <= (size_t)r.mine.srq_depth + 64);
    /* The server: its loops' queues, never more. */
    JT_REQUIRE(ut_child_pool(probe, &p));
    fprintf(stderr, "  server: %u of %u shared buffers posted; client: %u of %u\n",
            p.srq_posted, p.srq_depth, r.mine.srq_posted, r.mine.srq_depth);
    JT_CHECK(p.srq_posted <= p.srq_depth);
    /* The connections are gone: only the probe's is left on each side, and
     * the blocks outside the shared queues are those held before. */
    JT_CHECK(JT_WAIT_EVERY(ut_child_pool(probe, &p) && p.endpoints == 1 && p.blocks <= p0.blocks,
                           10000000, 50000));
    JT_CHECK_EQ(p.jfc_used, p0.jfc_used);
    jet_channel_destroy(probe);
    JT_CHECK(ut_urma_released(0, NULL));
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* Overcommitted: a server queue of 16 buffers under 8 connections that each
 * may send 29 messages of up to 64 KiB at once, here 12 calls of 200 KiB in
 * flight per connection (4 WRs each). Senders that find no buffer retry
 * (RNR) until the server posts one again: every call succeeds, byte-exact,
 * and the server goes on serving. */
static void test_overcommitted_queue(void)
{
    const char *args[] = {"--urma_shared_rq_size=16", "--max_body_size=134217728", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    sq_run_t r = {.port = c.port, .n = 8, .calls = 2, .batch = 12, .size = 200 * 1024};
    sq_run(&r);
    jet_channel_t *probe = ut_channel(c.port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(probe);
    ut_child_stats_t p;
    JT_CHECK(JT_WAIT_EVERY(ut_child_pool(probe, &p) && p.endpoints == 1, 10000000, 50000));
    JT_CHECK(p.srq_depth >= 16 && p.srq_depth % 16 == 0 && p.srq_posted <= p.srq_depth);
    JT_CHECK_EQ(jt_echo_bytes(probe, 300000, 5, "after"), 0);
    jet_channel_destroy(probe);
    JT_CHECK(ut_urma_released(0, NULL));
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A peer with per-connection queues (flag 0) and one with a shared queue
 * talk in both directions: the mode is a process's own choice, invisible
 * in the hello. */
static void test_mixed_with_per_connection_peer(void)
{
    const char *args[] = {"--urma_shared_rq_size=0", "--max_body_size=134217728", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    sq_run_t r = {.port = c.port, .n = 6, .calls = 3, .batch = 20, .size = 70000};
    sq_run(&r);
    jet_channel_t *probe = ut_channel(c.port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(probe);
    ut_child_stats_t p;
    JT_REQUIRE(ut_child_pool(probe, &p));
    JT_CHECK_EQ(p.srq_depth, 0u);
    jet_channel_destroy(probe);
    JT_CHECK(ut_urma_released(0, NULL));
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A shared queue that refuses buffers for want of room keeps them and tries
 * again a millisecond later, from a loop timer when no completion comes:
 * here the server's first 12 receive posts are refused (SOFTUB_RECV_FULL),
 * so its connection opens with no buffer posted and the client's first
 * request waits by RNR retry. Nothing reaches the server meanwhile, so
 * only the timer can post the kept buffers: 12 refusals, one per retry,
 * then all 32 posted, and the calls succeed byte-exact over URMA. */
static void test_refused_posts_retried(void)
{
    const char *envs[] = {"SOFTUB_RECV_FULL=12", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *probe = ut_channel(c.port, JET_SOCKET_MODE_URMA, 5000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(probe);
    ut_child_stats_t p = {0};
    JT_CHECK(JT_WAIT_EVERY(ut_child_pool(probe, &p) && p.srq_posted == 32 && p.srq_kept == 0,
                           10000000, 20000));
    fprintf(stderr, "  server: %u posted, %u kept, %llu posts refused\n", p.srq_posted, p.srq_kept,
            p.srq_refused);
    JT_CHECK_EQ(p.srq_refused, 12ull);
    for (int i = 0; i < 20; i++)
        JT_CHECK_EQ(jt_echo_bytes(probe, 1000 + (size_t)i * 7919, (uint64_t)i + 3, "kept"), 0);
    ut_expect_urma(m, 21, 1);
    jet_channel_destroy(probe);
    JT_CHECK(ut_urma_released(0, NULL));
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "shared_rq");
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ut_server_role(argc, argv);
    jet_flag_set("max_body_size", "134217728");
    char v[16];
    snprintf(v, sizeof v, "%d", CLIENT_SRQ);
    jet_flag_set("urma_shared_rq_size", v);
    JT_RUN(test_many_connections_bounded);
    JT_RUN(test_overcommitted_queue);
    JT_RUN(test_mixed_with_per_connection_peer);
    JT_RUN(test_refused_posts_retried);
    return jt_finish();
}
