/* Faults on live URMA connections: a peer killed mid-transfer (either side),
 * a client that closes right after its requests went out (they are served),
 * completion errors injected by softub (SOFTUB_ERR_EVERY), receivers that
 * never have a receive posted (SOFTUB_FORCE_RNR), and a loop whose
 * completion queue is full (new connections fall back to TCP), and imports
 * that take long (SOFTUB_IMPORT_DELAY_US: the loop keeps serving). Every case
 * ends with every call completed - no hang - and the surviving process
 * still serving. */
#include "urma_test.h"

#define GUARD_US (60 * 1000000LL)

static jet_channel_t *channel(int port, int32_t timeout_ms, int max_retry)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_URMA;
    o.timeout_ms = timeout_ms;
    /* Set-up is not what these cases time: a loaded machine (ASan, ctest -j)
     * may take longer than a short call deadline to connect and shake hands,
     * and a connect timeout would fail the call with ETIMEDOUT. */
    o.connect_timeout_ms = 30000;
    o.max_retry = max_retry;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    return jet_channel_create(addr, &o, &ch) == 0 ? ch : NULL;
}

/* Codes a connection failure may give a call (never its deadline). */
static bool connection_error(int code)
{
    return code == JET_EEOF || code == EIO || code == JET_EFAILEDSOCKET || code == ECONNRESET ||
           code == ECONNREFUSED || code == EPIPE;
}

static void test_server_killed_mid_transfer(void)
{
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = channel(c.port, 30000, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "warm"), 0);
    ut_expect_urma(m, 1, 1); /* the transfer the kill cuts runs over URMA */
    enum { N = 24 }; /* 48 MiB: under the socket's 64 MiB write limit */
    jt_batch_t b = {0};
    jt_slot_t *sl = jt_slots_new(&b, N, "big", 2 << 20, 0, 0);
    jt_slots_issue(ch, sl, N);
    usleep(20000);
    kill(c.pid, SIGKILL);
    JT_REQUIRE(jt_wait_at_least(&b.done, N, GUARD_US));
    int failed = 0;
    for (int i = 0; i < N; i++) {
        if (!jet_call_failed(sl[i].call)) continue;
        failed++;
        int code = jet_call_error_code(sl[i].call);
        JT_CHECK_AT(jet_call_error_text(sl[i].call), connection_error(code));
    }
    (void)jt_slots_free(&b, sl, N, GUARD_US); /* all are done */
    JT_CHECK(failed > 0);
    waitpid(c.pid, NULL, 0);
    close(c.in_fd);
    jet_channel_destroy(ch);
    /* The client process goes on with other servers. */
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    ch = channel(c.port, 30000, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 300000, 2, "after"), 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_client_killed_mid_transfer(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &port);
    JT_REQUIRE(srv);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", port);
    for (int round = 0; round < 3; round++) {
        const char *args[] = {pa, "calls=100000", "size=1048576", NULL};
        pid_t pid = jt_spawn_role("role=client", args, NULL);
        JT_REQUIRE(pid >= 0);
        jet_server_stats_t st;
        JT_WAIT_UNTIL((jet_server_get_stats(srv, &st), st.requests > (uint64_t)round * 5 + 3),
                      20000000);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        JT_CHECK(
            JT_WAIT_UNTIL((jet_server_get_stats(srv, &st), st.connections_open == 0), 20000000));
    }
    jet_channel_t *ch = channel(port, 30000, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1 << 20, 3, "survivor"), 0);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

/* Every 37th WR of the server process completes with an error: the
 * connection fails cleanly, its calls end, the next call reconnects. */
static void test_completion_errors_server(void)
{
    const char *envs[] = {"SOFTUB_ERR_EVERY=37", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *ch = channel(c.port, 20000, 0);
    JT_REQUIRE(ch);
    /* One WR per response: about one call in 37 meets the error. */
    int ok = 0, bad = 0;
    for (int i = 0; i < 150; i++) {
        int rc = jt_echo_bytes(ch, 1000, (uint64_t)i, "err");
        if (rc == 0) {
            ok++;
        } else {
            bad++;
            JT_CHECK_AT("sync error", connection_error(rc));
        }
    }
    JT_CHECK(bad > 0);
    JT_CHECK(ok > bad);
    /* Many calls in flight when the connection fails: all end. */
    for (int round = 0; round < 4; round++) {
        int err = 0;
        int n = jt_async_batch(ch, 20, 20000, 0, GUARD_US, &err);
        JT_REQUIRE(n <= 20);
        if (n) JT_CHECK_AT("round error", connection_error(err));
    }
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0); /* no crash, clean exit */
}

static void test_completion_errors_client(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &port);
    JT_REQUIRE(srv);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", port);
    const char *args[] = {pa, "calls=200", "size=30000", NULL};
    const char *envs[] = {"SOFTUB_ERR_EVERY=29", NULL};
    int rc = ut_client_run(args, envs);
    /* Its calls end, retried on new connections or failed with a connection
     * error; never wrong bytes (1), never a crash (>= 128). */
    JT_CHECK(rc == 0 || connection_error(rc));
    jet_server_stats_t st;
    JT_CHECK(JT_WAIT_UNTIL((jet_server_get_stats(srv, &st), st.connections_open == 0), 20000000));
    /* The errors did happen: a failed completion fails its connection, and
     * the client came back on a new one. */
    JT_CHECK(st.connections_accepted > 1);
    jet_channel_t *ch = channel(port, 30000, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 10000, 4, "survivor"), 0);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

/* The server never has a receive posted: the client's sends retry (RNR)
 * until the call's deadline; closing the connection flushes them. */
static void test_forced_rnr(void)
{
    const char *envs[] = {"SOFTUB_FORCE_RNR=1", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *ch = channel(c.port, 300, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100, 5, "rnr"), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(jt_async_batch(ch, 10, 50000, 0, GUARD_US, NULL), 10);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    /* This process's loops are fine afterwards. */
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &port);
    JT_REQUIRE(srv);
    ch = channel(port, 30000, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100000, 6, "after-rnr"), 0);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

/* A connection's own receive queue whose provider refuses re-posts for want
 * of room (here the server's posts after its connection's first 32): the
 * receives are held and posted again by a timer a millisecond after each
 * refusal, the client's window lacking them meanwhile, and the connection
 * goes on. Each refusal holds every re-post for a millisecond, and only the
 * timer ends that wait: 100 calls are more than the window, so without the
 * timer's posts (and the credits it sends) they would stop. 60 of them at
 * once, then 40 one at a time. Both ways credits travel: on data (jetrpc
 * peers) and in credit messages (brpc's way), whose receives are no credit
 * and are held apart. */
static void refused_reposts_retried(bool extensions)
{
    const char *envs[] = {"JETRPC_URMA_SHARED_RQ_SIZE=0", "SOFTUB_RECV_FULL_AFTER=32",
                          "SOFTUB_RECV_FULL=10", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_flag_set("urma_jetrpc_extensions", extensions ? "true" : "false");
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = channel(c.port, 10000, 0);
    JT_REQUIRE(ch);
    int err = 0;
    JT_CHECK_EQ(jt_async_batch(ch, 60, 3000, 101, GUARD_US, &err), 0);
    for (int i = 0; i < 40; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 3000 + (size_t)i * 101, (uint64_t)i + 7, "held"), 0);
    ut_expect_urma(m, 41, 1);
    ut_child_stats_t p = {0};
    JT_CHECK(ut_child_pool(ch, &p));
    JT_CHECK_EQ(p.recv_refused, 10ull);
    JT_CHECK_EQ(p.endpoints, 1u);
    fprintf(stderr, "  extensions %d: server refused %llu re-posts, %u connection(s)\n",
            extensions, p.recv_refused, p.endpoints);
    jet_channel_destroy(ch);
    JT_CHECK(ut_urma_released(0, NULL));
    jet_flag_set("urma_jetrpc_extensions", "true");
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_refused_reposts_retried(void)
{
    refused_reposts_retried(true);
    refused_reposts_retried(false);
}

typedef struct conn_arg {
    int port;
    _Atomic int *bad;
} conn_arg_t;

static void *conn_main(void *arg)
{
    conn_arg_t *a = arg;
    jet_channel_t *ch = channel(a->port, 30000, 0);
    if (!ch || jt_echo_bytes(ch, 5000, 1, "full") != 0 || jt_echo_bytes(ch, 70000, 2, "full") != 0)
        atomic_fetch_add(a->bad, 1);
    /* Held open until every thread has called: the JFC stays full. */
    usleep(300000);
    if (ch) jet_channel_destroy(ch);
    return NULL;
}

/* A server whose loops' completion queues hold two connections each, and
 * that may make one per loop: the others are declined and run over TCP. */
static void test_jfc_full_falls_back(void)
{
    const char *args[] = {"--urma_jfc_depth=600", "--event_loop_num=2", "--urma_jfc_per_loop=1",
                          NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    enum { N = 12 };
    _Atomic int bad = 0;
    pthread_t th[N];
    conn_arg_t a[N];
    ut_urma_mark_t m = ut_urma_mark();
    for (int i = 0; i < N; i++) {
        a[i] = (conn_arg_t){.port = c.port, .bad = &bad};
        JT_REQUIRE(pthread_create(&th[i], NULL, conn_main, &a[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    JT_CHECK_EQ(atomic_load(&bad), 0);
    /* A connection over URMA receives its two answers in three receives
     * (5000 B, then 70000 B in two 64 KiB buffers): at least two of them did
     * (the server holds two per loop), and not all. */
    uint64_t recvs = ut_urma_mark().recv - m.recv;
    fprintf(stderr, "  %llu receives over URMA for %d connections\n", (unsigned long long)recvs, N);
    JT_CHECK(recvs >= 2 * 3);
    JT_CHECK(recvs <= (N - 1) * 3);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static uint64_t urma_answers(void);

/* Opens a URMA channel to port and echoes 5000 B on it; *urma_p: whether
 * the answer came over URMA. NULL when the channel or the call failed. */
static jet_channel_t *open_echo(int port, uint64_t seed, bool *urma_p)
{
    jet_channel_t *ch = channel(port, 30000, 0);
    if (!ch) return NULL;
    uint64_t before = urma_answers();
    if (jt_echo_bytes(ch, 5000, seed, "capacity") != 0) {
        jet_channel_destroy(ch);
        return NULL;
    }
    *urma_p = urma_answers() > before;
    return ch;
}

/* "connection <i>", a check's label (one at a time). */
static const char *nth(int i)
{
    static char label[32];
    snprintf(label, sizeof label, "connection %d", i);
    return label;
}

/* A server loop whose first completion queue is full makes another, up to
 * urma_jfc_per_loop: with queues of 600 entries (the shared receive queue
 * takes 256 of the first, a connection 132) and three of them, the loop
 * carries 2 + 4 + 4 connections over URMA (cap), all open at once; the next
 * ones are declined and run over TCP. Connections that close give their
 * room back to the queue they were in, and new ones take it. The server's
 * stats come over a TCP channel, which holds no room. */
static void jfc_added_when_full(const char *mode, const char *more, int cap)
{
    const char *args[] = {
        "--urma_jfc_depth=600", "--event_loop_num=1", "--urma_jfc_per_loop=3", mode, more, NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    const int CAP = cap;
    enum { N = 12, AGAIN = 4 };
    jet_channel_t *ch[N];
    bool urma[N];
    for (int i = 0; i < N; i++) {
        ch[i] = open_echo(c.port, (uint64_t)i + 1, &urma[i]);
        JT_REQUIRE(ch[i]);
        JT_CHECK_AT(nth(i), urma[i] == (i < CAP));
    }
    ut_child_stats_t st = {0};
    JT_CHECK(ut_child_pool(stats, &st));
    fprintf(stderr, "  %s %s: %u completion queues, %u URMA connections, %u entries held\n", mode,
            more, st.jfcs, st.endpoints, st.jfc_used);
    JT_CHECK_EQ(st.jfcs, 3u);
    JT_CHECK_EQ(st.endpoints, (unsigned)CAP);
    /* Every connection still carries its calls. */
    for (int i = 0; i < N; i++)
        JT_CHECK_AT(nth(i), jt_echo_bytes(ch[i], 70000, (uint64_t)i + 100, "again") == 0);
    /* Room given back in the first two queues is taken again. */
    for (int i = 0; i < AGAIN; i++)
        jet_channel_destroy(ch[i]);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == (unsigned)(CAP - AGAIN),
                           10000000));
    for (int i = 0; i < AGAIN; i++) {
        ch[i] = open_echo(c.port, (uint64_t)i + 200, &urma[i]);
        JT_REQUIRE(ch[i]);
        JT_CHECK_AT(nth(i), urma[i]);
    }
    JT_CHECK(ut_child_pool(stats, &st));
    JT_CHECK_EQ(st.endpoints, (unsigned)CAP);
    for (int i = 0; i < N; i++)
        jet_channel_destroy(ch[i]);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_jfc_added_when_full(void)
{
    jfc_added_when_full("--urma_use_polling=false", "--urma_shared_rq_size=256", 10);
    jfc_added_when_full("--urma_use_polling=true", "--urma_shared_rq_size=256", 10);
    /* Per-connection receive queues (164 entries a connection: 3 per queue)
     * in pure event mode: the added queues' receives complete there, and
     * only their own events wake the loop. */
    jfc_added_when_full("--urma_shared_rq_size=0", "--urma_event_spin_auto_us=0", 9);
}

typedef struct burst_arg {
    int port;
    pthread_barrier_t *go;
    jet_channel_t *ch;
    int rc;
} burst_arg_t;

static void *burst_main(void *arg)
{
    burst_arg_t *a = arg;
    pthread_barrier_wait(a->go);
    a->ch = channel(a->port, 30000, 0);
    a->rc = a->ch ? jt_echo_bytes(a->ch, 5000, 7, "burst") : -1;
    return NULL;
}

/* Ten connections arrive at once on a fresh server loop whose completion
 * queues are made slowly (SOFTUB_QUEUE_DELAY_US: 200 ms each): the first
 * queue is still being made when the ones past its room (2) come, which
 * wait for the second and the third queue (4 each) to be made after it,
 * and all ten run over URMA. */
static void burst_on_fresh_loop(const char *mode)
{
    const char *args[] = {"--urma_jfc_depth=600",
                          "--event_loop_num=1",
                          "--urma_jfc_per_loop=3",
                          "--urma_prepared_jetty_cnt=0",
                          mode,
                          NULL};
    const char *envs[] = {"SOFTUB_QUEUE_DELAY_US=200000", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, envs) == 0);
    enum { N = 10 };
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N);
    pthread_t th[N];
    burst_arg_t a[N];
    for (int i = 0; i < N; i++) {
        a[i] = (burst_arg_t){.port = c.port, .go = &go};
        JT_REQUIRE(pthread_create(&th[i], NULL, burst_main, &a[i]) == 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    for (int i = 0; i < N; i++)
        JT_CHECK_AT(nth(i), a[i].rc == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    ut_child_stats_t st = {0};
    JT_CHECK(ut_child_pool(stats, &st));
    fprintf(stderr, "  %s: %u of %d connections on URMA, %u completion queues\n", mode,
            st.endpoints, N, st.jfcs);
    JT_CHECK_EQ(st.endpoints, (unsigned)N);
    JT_CHECK_EQ(st.jfcs, 3u);
    for (int i = 0; i < N; i++)
        if (a[i].ch) jet_channel_destroy(a[i].ch);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_burst_on_fresh_loop(void)
{
    burst_on_fresh_loop("--urma_use_polling=false");
    burst_on_fresh_loop("--urma_use_polling=true");
}

/* A process's resident memory in KiB (VmRSS), or -1. */
static long rss_kib(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* At the default sizes a completion queue holds about 246 connections: 600
 * connections open at once on a server with one loop (and spread over this
 * process's loops) all run over URMA, the server's loop on three queues. */
static void test_many_connections_default_queues(void)
{
    const char *args[] = {"--event_loop_num=1", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    enum { N = 600 };
    jet_channel_t **ch = calloc(N, sizeof *ch);
    JT_REQUIRE(ch);
    int on_urma = 0;
    /* The first connection makes the loop's queues and receive buffers:
     * what each further one costs is measured from there. */
    bool first = false;
    ch[0] = open_echo(c.port, 1, &first);
    JT_REQUIRE(ch[0]);
    on_urma += first;
    long rss0 = rss_kib(c.pid);
    int64_t t0 = jt_now_us();
    for (int i = 1; i < N; i++) {
        bool urma = false;
        ch[i] = open_echo(c.port, (uint64_t)i + 1, &urma);
        JT_REQUIRE(ch[i]);
        on_urma += urma;
    }
    int64_t t1 = jt_now_us();
    long rss1 = rss_kib(c.pid);
    ut_child_stats_t st = {0};
    JT_CHECK(ut_child_pool(stats, &st));
    jet_urma_loop_stats_t mine = ut_urma_totals(NULL);
    fprintf(stderr,
            "  %d of %d connections on URMA (opened in %lld ms); server: %u endpoints on %u "
            "completion queues, %ld KiB resident per connection; this process: %u queues\n",
            on_urma, N, (long long)(t1 - t0) / 1000, st.endpoints, st.jfcs,
            rss0 > 0 && rss1 > 0 ? (rss1 - rss0) / (N - 1) : -1, mine.jfcs);
    JT_CHECK_EQ(on_urma, N);
    JT_CHECK_EQ(st.endpoints, (unsigned)N);
    JT_CHECK_EQ(st.jfcs, 3u);
    for (int i = 0; i < N; i += 37)
        JT_CHECK_AT(nth(i), jt_echo_bytes(ch[i], 70000, (uint64_t)i + 1000, "again") == 0);
    for (int i = 0; i < N; i++)
        jet_channel_destroy(ch[i]);
    free(ch);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           30000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* Queues a loop added for a crowd of connections are deleted once no
 * connection or prepared set has used them for urma_jfc_idle_ms (200 ms
 * here): after ten connections on three queues close, the loop is back to
 * its first queue (the prepared sets on the others are dropped, new
 * connections going to the first); ten more connections make the others
 * again and all run over URMA. Event mode, then polling. */
static void jfc_deleted_when_idle(const char *mode)
{
    const char *args[] = {"--urma_jfc_depth=600",
                          "--event_loop_num=1",
                          "--urma_jfc_per_loop=3",
                          "--urma_jfc_idle_ms=200",
                          mode,
                          NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    enum { N = 10 };
    ut_child_stats_t st = {0};
    for (int round = 0; round < 2; round++) {
        jet_channel_t *ch[N];
        for (int i = 0; i < N; i++) {
            bool urma = false;
            ch[i] = open_echo(c.port, (uint64_t)i + 1, &urma);
            JT_REQUIRE(ch[i]);
            JT_CHECK_AT(nth(i), urma);
        }
        JT_CHECK(ut_child_pool(stats, &st));
        JT_CHECK_EQ(st.jfcs, 3u);
        for (int i = 0; i < N; i++)
            jet_channel_destroy(ch[i]);
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfcs == 1,
                               10000000));
        fprintf(stderr, "  %s, round %d: %u completion queue(s) left, %u sets pooled\n", mode,
                round, st.jfcs, st.pooled);
        JT_CHECK_EQ(st.jfc_used, 0u);
    }
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_jfc_deleted_when_idle(void)
{
    jfc_deleted_when_idle("--urma_use_polling=false");
    jfc_deleted_when_idle("--urma_use_polling=true");
}

/* At the edge of a full queue: starts a server child c with one loop of
 * three queues of 600 entries and idle_arg (its urma_jfc_idle_ms), and
 * *stats, a TCP channel for its counts; opens three connections over URMA,
 * the third on the second queue (the first holds two beside the shared
 * receive queue), and closes the third, whose set and those prepared after
 * it wait on the second queue: 4 pooled there, once its set is reset. */
static void edge_open(const char *idle_arg, jt_child_t *c, jet_channel_t **stats,
                      jet_channel_t *ch[3], ut_child_stats_t *st)
{
    const char *args[] = {"--urma_jfc_depth=600", "--event_loop_num=1", "--urma_jfc_per_loop=3",
                          idle_arg, NULL};
    JT_REQUIRE(jt_child_start(c, args, NULL) == 0);
    *stats = ut_channel(c->port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(*stats);
    bool urma = false;
    for (int i = 0; i < 3; i++) {
        ch[i] = open_echo(c->port, (uint64_t)i + 1, &urma);
        JT_REQUIRE(ch[i]);
        JT_CHECK_AT(nth(i), urma);
    }
    jet_channel_destroy(ch[2]);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(*stats, st) && st->endpoints == 2 && st->pooled == 4 &&
                               st->recycled == 1,
                           10000000));
}

/* Connections that come and go at the edge of a full queue do not make and
 * drop prepared sets each time. The first queue holds 2 connections (beside
 * the shared receive queue), the second 4: two connections fill the first,
 * and a third, opened and closed on the second, leaves 4 sets prepared
 * there. Then one of the first queue's connections closes and another
 * opens, five times: the closed one's set, reset, is taken by the next,
 * and the second queue's sets stay. Before, each round dropped them when
 * the first queue had room and made them again (4 a round) when it was
 * full. */
static void test_pool_steady_at_queue_edge(void)
{
    enum { ROUNDS = 5 };
    jt_child_t c;
    jet_channel_t *stats, *ch[3];
    bool urma = false;
    ut_child_stats_t st = {0};
    edge_open("--urma_jfc_idle_ms=600000", &c, &stats, ch, &st);
    JT_CHECK_EQ(st.jfcs, 2u);
    unsigned long long filled0 = st.filled;
    for (int round = 0; round < ROUNDS; round++) {
        jet_channel_destroy(ch[1]);
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 1 && st.pooled == 5 &&
                                   st.recycled == (unsigned long long)round + 2,
                               10000000));
        usleep(250000); /* the quarantine of a shared queue's jetty (200 ms) */
        ch[1] = open_echo(c.port, (uint64_t)round + 10, &urma);
        JT_REQUIRE(ch[1]);
        JT_CHECK_AT(nth(round), urma);
        usleep(50000); /* a fill it started would be done */
        JT_CHECK(ut_child_pool(stats, &st));
        JT_CHECK_AT(nth(round), st.pooled == 4);
    }
    fprintf(stderr, "  %d rounds at the edge of a full queue: %llu sets made for the pool\n",
            ROUNDS, st.filled - filled0);
    JT_CHECK_EQ(st.filled - filled0, 0ull);
    JT_CHECK_EQ(st.jfcs, 2u);
    jet_channel_destroy(ch[0]);
    jet_channel_destroy(ch[1]);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* An idle added queue is deleted only once no set is left on it. Queue
 * calls take 400 ms (SOFTUB_QUEUE_DELAY_US), far past urma_jfc_idle_ms
 * (50): two connections fill the first queue, a third goes to the second
 * and closes. Without a pool its set is destroyed, for 400 ms, and the
 * queue is deleted after that. With one, the second queue keeps the sets
 * prepared on it while the first is full (new connections go there); once
 * the first two connections close too, it drops them, and is deleted when
 * the last is destroyed. Either way no deletion is tried with a set left
 * (the loop's own check: "... jetty set(s): not deleted"; the provider's:
 * a queue with a jetty on it cannot be deleted, "cannot delete completion
 * queue ... leaked"). */
static void jfc_kept_while_sets_on_it(const char *pool)
{
    jt_stderr_cap_t cap;
    jt_stderr_begin(&cap);
    const char *args[] = {"--urma_jfc_depth=600",
                          "--event_loop_num=1",
                          "--urma_jfc_per_loop=3",
                          "--urma_jfc_idle_ms=50",
                          pool,
                          NULL};
    const char *envs[] = {"SOFTUB_QUEUE_DELAY_US=400000", NULL};
    bool pooled = strcmp(pool, "--urma_prepared_jetty_cnt=0") != 0;
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, envs) == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    jet_channel_t *ch[3];
    bool urma[3];
    for (int i = 0; i < 3; i++) {
        ch[i] = open_echo(c.port, (uint64_t)i + 1, &urma[i]);
        JT_REQUIRE(ch[i]);
    }
    ut_child_stats_t st = {0};
    JT_CHECK(ut_child_pool(stats, &st));
    JT_CHECK_EQ(st.jfcs, 2u);
    jet_channel_destroy(ch[2]);
    if (!pooled) {
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 2 && st.jfcs == 1,
                               10000000));
    } else {
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 2 && st.pooled > 0,
                               10000000));
        /* Forty idle times, past the fills on the second queue (400 ms
         * each): it waits for the connections the first cannot take. */
        usleep(2000000);
        JT_CHECK(ut_child_pool(stats, &st));
        JT_CHECK_EQ(st.jfcs, 2u);
        JT_CHECK(st.pooled > 0);
    }
    for (int i = 0; i < 2; i++)
        jet_channel_destroy(ch[i]);
    JT_CHECK(
        JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfcs == 1, 20000000));
    fprintf(stderr, "  %s: back to %u completion queue, %u sets pooled\n", pool, st.jfcs,
            st.pooled);
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    char *log = jt_stderr_end(&cap);
    JT_REQUIRE(log);
    int refused = jt_count_lines_with(log, "cannot delete completion queue") +
                  jt_count_lines_with(log, "jetty set(s): not deleted");
    if (refused) fprintf(stderr, "%s", log);
    free(log);
    for (int i = 0; i < 3; i++)
        JT_CHECK_AT(nth(i), urma[i]);
    JT_CHECK_EQ(refused, 0);
}

static void test_jfc_kept_while_sets_on_it(void)
{
    jfc_kept_while_sets_on_it("--urma_prepared_jetty_cnt=0");
    jfc_kept_while_sets_on_it("--urma_prepared_jetty_cnt=3");
}

/* The added queue new connections go to keeps its prepared sets, however
 * long it has none: with the first queue full (two connections) and a
 * third connection closed on the second, the second keeps the sets
 * prepared there past urma_jfc_idle_ms (100 ms), and the next connection
 * takes one (nothing is made for it). Once a lower queue has room, the
 * second is spare, and it is deleted after its idle time. */
static void test_edge_jfc_keeps_its_sets(void)
{
    jt_child_t c;
    jet_channel_t *stats, *ch[3];
    bool urma = false;
    ut_child_stats_t st = {0};
    edge_open("--urma_jfc_idle_ms=100", &c, &stats, ch, &st);
    usleep(500000); /* five idle times, and the shared queue's quarantine (200 ms) */
    JT_CHECK(ut_child_pool(stats, &st));
    JT_CHECK_EQ(st.jfcs, 2u);
    JT_CHECK_EQ(st.pooled, 4u);
    unsigned long long filled0 = st.filled;
    ch[2] = open_echo(c.port, 10, &urma);
    JT_REQUIRE(ch[2]);
    JT_CHECK(urma);
    usleep(50000); /* a fill it started would be done */
    JT_CHECK(ut_child_pool(stats, &st));
    JT_CHECK_EQ(st.filled - filled0, 0ull);
    JT_CHECK_EQ(st.pooled, 3u);
    /* The first queue gets room: the second, with no connection, is spare. */
    jet_channel_destroy(ch[2]);
    jet_channel_destroy(ch[1]);
    JT_CHECK(
        JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 1 && st.jfcs == 1, 10000000));
    jet_channel_destroy(ch[0]);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A loop's prepared sets are made only for room its queue has: with a
 * queue that holds two connections and may not be joined by another
 * (urma_jfc_per_loop=1), one connection open leaves room for one, and one
 * set is prepared, not urma_prepared_jetty_cnt (8) of which 7 would be
 * destroyed when the second connection fills the queue. The second
 * connection takes that set; closed, its set is reset and pooled for the
 * next one. */
static void test_pool_fits_the_queue(void)
{
    const char *args[] = {"--urma_jfc_depth=600", "--event_loop_num=1", "--urma_jfc_per_loop=1",
                          "--urma_prepared_jetty_cnt=8", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    bool urma = false;
    jet_channel_t *a = open_echo(c.port, 1, &urma);
    JT_REQUIRE(a);
    JT_CHECK(urma);
    ut_child_stats_t st = {0};
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.pooled == 1, 10000000));
    /* A fill takes microseconds: more would have come by now. */
    usleep(200000);
    JT_CHECK(ut_child_pool(stats, &st));
    JT_CHECK_EQ(st.pooled, 1u);
    for (int round = 0; round < 3; round++) {
        jet_channel_t *b = open_echo(c.port, (uint64_t)round + 2, &urma);
        JT_REQUIRE(b);
        JT_CHECK_AT(nth(round), urma);
        JT_CHECK(ut_child_pool(stats, &st));
        JT_CHECK_EQ(st.pooled, 0u);
        jet_channel_destroy(b);
        /* Its set comes back, reset, for the next one, which may take it
         * once the quarantine of a shared queue's jetty (200 ms) is over. */
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.pooled == 1 &&
                                   st.recycled == (unsigned long long)round + 1,
                               10000000));
        usleep(250000);
    }
    jet_channel_destroy(a);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* The provider refuses a loop's second completion queue (SOFTUB_JFC_FAIL=1
 * after one made): the connection that waited for it is declined and runs
 * over TCP, those of the first queue go on, and the next connection past
 * the first queue makes the second again and runs over URMA. */
static void test_added_jfc_refused(void)
{
    const char *args[] = {"--urma_jfc_depth=600", "--event_loop_num=1", "--urma_jfc_per_loop=2",
                          NULL};
    const char *envs[] = {"SOFTUB_JFC_FAIL=1", "SOFTUB_JFC_FAIL_AFTER=1", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, envs) == 0);
    jet_channel_t *stats = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(stats);
    enum { N = 4 };
    const bool want[N] = {true, true, false, true};
    jet_channel_t *ch[N];
    bool urma[N];
    for (int i = 0; i < N; i++) {
        ch[i] = open_echo(c.port, (uint64_t)i + 1, &urma[i]);
        JT_REQUIRE(ch[i]);
        JT_CHECK_AT(nth(i), urma[i] == want[i]);
    }
    ut_child_stats_t st = {0};
    JT_CHECK(ut_child_pool(stats, &st));
    JT_CHECK_EQ(st.jfcs, 2u);
    JT_CHECK_EQ(st.endpoints, 3u);
    for (int i = 0; i < N; i++) {
        JT_CHECK_AT(nth(i), jt_echo_bytes(ch[i], 70000, (uint64_t)i + 100, "again") == 0);
        jet_channel_destroy(ch[i]);
    }
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(stats, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    jet_channel_destroy(stats);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* ---- which threads made the slow provider calls ------------------------------
 * The children of the off-loop cases run with SOFTUB_SLOW_TRACE: softub notes
 * each injected delay with its thread's name. None may be an event loop's
 * (jet_loop_<n>): that is what "off the loop" means, whatever the timing. */

static char g_slow_path[64];
static char g_slow_env[96];

static void slow_trace_reset(void)
{
    snprintf(g_slow_path, sizeof g_slow_path, "/tmp/jt-slow-%d", (int)getpid());
    snprintf(g_slow_env, sizeof g_slow_env, "SOFTUB_SLOW_TRACE=%s", g_slow_path);
    unlink(g_slow_path);
}

static void slow_trace_check(void)
{
    FILE *f = fopen(g_slow_path, "r");
    JT_REQUIRE(f);
    char line[160];
    int n = 0, on_loop = 0;
    while (fgets(line, sizeof line, f)) {
        int pid;
        char thread[32], call[64];
        if (sscanf(line, "%d %31s %63s", &pid, thread, call) != 3) continue;
        n++;
        if (strncmp(thread, "jet_loop", 8) == 0) {
            on_loop++;
            fprintf(stderr, "  %s made on event loop %s (pid %d)\n", call, thread, pid);
        }
    }
    fclose(f);
    unlink(g_slow_path);
    fprintf(stderr, "  %d slow provider calls, %d of them on an event loop\n", n, on_loop);
    JT_CHECK(n > 0);
    JT_CHECK_EQ(on_loop, 0);
}

/* ---- a slow import -------------------------------------------------------------- */

enum { GAP_LONG_US = 10000, GAP_MAX_LONG = 4096 };

typedef struct gap_arg {
    jet_channel_t *ch;
    _Atomic bool stop;
    _Atomic int64_t worst_us; /* longest call */
    _Atomic int calls, bad;
    int nlong; /* calls of GAP_LONG_US or more: when they began and ended */
    int64_t long_at[GAP_MAX_LONG][2];
} gap_arg_t;

static void *gap_main(void *arg)
{
    gap_arg_t *g = arg;
    for (uint64_t i = 0; !atomic_load(&g->stop); i++) {
        int64_t t0 = (int64_t)jt_now_us();
        int rc = jt_echo_bytes(g->ch, 100, i, "busy");
        int64_t t1 = (int64_t)jt_now_us(), took = t1 - t0;
        if (rc != 0) atomic_fetch_add(&g->bad, 1);
        if (took > atomic_load(&g->worst_us)) atomic_store(&g->worst_us, took);
        if (took >= GAP_LONG_US && g->nlong < GAP_MAX_LONG) {
            g->long_at[g->nlong][0] = t0;
            g->long_at[g->nlong][1] = t1;
            g->nlong++;
        }
        atomic_fetch_add(&g->calls, 1);
    }
    return NULL;
}

/* Whether a loop waited for a slow provider call made on another thread
 * (behind a lock, say): then the call of the established connection in
 * flight is held with it, and ends when the slow call does. A call held
 * for at least half of a slow call's time that ended within a quarter of it
 * after it fails the case. A long call on a loaded machine, not tied to
 * the slow call's end, does not. Reads the trace before slow_trace_check. */
static void gap_check_not_held(const gap_arg_t *g)
{
    FILE *f = fopen(g_slow_path, "r");
    JT_REQUIRE(f);
    char line[192];
    int windows = 0, held = 0;
    while (fgets(line, sizeof line, f)) {
        int pid;
        char thread[32], call[64];
        long long s, e;
        if (sscanf(line, "%d %31s %63s %lld %lld", &pid, thread, call, &s, &e) != 5 || e <= s)
            continue;
        windows++;
        for (int i = 0; i < g->nlong; i++) {
            int64_t t0 = g->long_at[i][0], t1 = g->long_at[i][1];
            int64_t overlap = (t1 < e ? t1 : e) - (t0 > s ? t0 : s);
            if (overlap >= (e - s) / 2 && t1 >= e && t1 - e <= (e - s) / 4) {
                held++;
                fprintf(stderr, "  a call of %lld us ended %lld us after %s (%lld us) did\n",
                        (long long)(t1 - t0), (long long)(t1 - e), call, e - s);
            }
        }
    }
    fclose(f);
    fprintf(stderr, "  %d calls of the established connection took over %d ms, %d of them held "
                    "by one of %d slow provider calls\n",
            g->nlong, GAP_LONG_US / 1000, held, windows);
    JT_CHECK(windows > 0);
    JT_CHECK_EQ(g->nlong < GAP_MAX_LONG, true);
    JT_CHECK_EQ(held, 0);
}

/* A server child (envs) and a URMA channel to it that has made one call;
 * NULL (the child stopped) when either fails. */
static jet_channel_t *warm_child(jt_child_t *c, const char *const *envs)
{
    if (jt_child_start(c, NULL, envs) != 0) return NULL;
    jet_channel_t *ch = channel(c->port, 30000, 0);
    if (ch && jt_echo_bytes(ch, 1000, 1, "warm") == 0) return ch;
    if (ch) jet_channel_destroy(ch);
    jt_child_stop(c);
    return NULL;
}

/* The server still takes connections (one carries a 300 000-byte echo);
 * then a and the child go. */
static void end_child(jt_child_t *c, jet_channel_t *a)
{
    jet_channel_t *last = channel(c->port, 30000, 0);
    JT_CHECK(last && jt_echo_bytes(last, 300000, 99, "last") == 0);
    if (last) jet_channel_destroy(last);
    jet_channel_destroy(a);
    JT_CHECK_EQ(jt_child_stop(c), 0);
}

/* How many "count" requests the server child has seen (-1: no answer). */
static int counted(int port)
{
    jet_channel_t *ch = channel(port, 30000, 0);
    if (!ch) return -1;
    jet_call_t *call = jet_call_create();
    int n = -1;
    if (call) {
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = "counted";
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
        const Example__EchoResponse *resp = (const Example__EchoResponse *)jet_call_response(call);
        if (!jet_call_failed(call) && resp && resp->message) n = atoi(resp->message);
        jet_call_destroy(call);
    }
    jet_channel_destroy(ch);
    return n;
}

/* Requests a client sent over URMA right before it closed the connection are
 * all served: what arrived reaches its handler (over TCP, an answer to the
 * closed client draws a reset, and the kernel drops what the server had not
 * read yet; URMA's receive buffers hold what came). The server
 * child's loop is held by a handler meanwhile (`hold`, "hold:300"), so that
 * when it goes on, the requests wait in its completion queue and the client
 * is gone. Then either the held call's answer fails (its send completes with
 * an error after the requests' receives), or, when that answer comes later
 * ("hold_mute:300"), the TCP EOF is seen first (a polling loop looks at its
 * fds before it polls its completion queue): either way the received
 * requests must reach their handlers before the connection fails. Each call
 * goes out when it is issued (the connection has no other writer and credits
 * for all). */
static void requests_before_close(const char *const *envs, const char *hold)
{
    jt_child_t c;
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = warm_child(&c, envs);
    JT_REQUIRE(ch);
    ut_expect_urma(m, 1, 1);
    enum { N = 16 }; /* with the hold, fewer than the 32 credits granted */
    jt_batch_t b = {0};
    jt_slot_t *held = jt_slots_new(&b, 1, hold, 10, 0, 0);
    jt_slot_t *sl = jt_slots_new(&b, N, "count", 100, 1, 0);
    jt_slots_issue(ch, held, 1);
    jt_slots_issue(ch, sl, N);
    jet_channel_destroy(ch); /* its calls fail here: their answers never come */
    JT_REQUIRE(jt_wait_at_least(&b.done, N + 1, GUARD_US));
    (void)jt_slots_free(&b, held, 1, GUARD_US);
    (void)jt_slots_free(&b, sl, N, GUARD_US);
    int n = -1;
    JT_CHECK(JT_WAIT_UNTIL((n = counted(c.port)) == N, 20000000));
    JT_CHECK_EQ(n, N);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A killed server is EEOF over URMA as over TCP: a send to its gone jetty
 * completes with an error, and that error is the connection's end when the
 * TCP connection has ended too. The client's loop is held (a done callback)
 * while the server is killed and the next call is sent, so that it finds
 * the send's error completion and the TCP EOF together. */
static _Atomic int g_in_done;

static void holding_done(jet_call_t *call, void *arg)
{
    (void)call;
    (void)arg;
    atomic_store(&g_in_done, 1);
    usleep(500000);
}

static void test_killed_server_is_eof(void)
{
    jt_child_t c;
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = warm_child(&c, NULL);
    JT_REQUIRE(ch);
    ut_expect_urma(m, 1, 1);
    jet_call_t *hold = jet_call_create();
    JT_REQUIRE(hold);
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "x";
    atomic_store(&g_in_done, 0);
    jet_channel_call(ch, &example__echo_service__descriptor, 0, hold, &req.base, holding_done,
                     NULL);
    JT_REQUIRE(jt_wait_at_least(&g_in_done, 1, GUARD_US));
    jt_child_kill(&c);
    jt_batch_t b = {0};
    jt_slot_t *sl = jt_slots_new(&b, 1, "after", 10, 0, 0);
    jt_slots_issue(ch, sl, 1);
    JT_REQUIRE(jt_wait_at_least(&b.done, 1, GUARD_US));
    JT_CHECK_EQ(jet_call_error_code(sl[0].call), JET_EEOF);
    (void)jt_slots_free(&b, sl, 1, GUARD_US);
    jet_call_join(hold);
    jet_call_destroy(hold);
    jet_channel_destroy(ch);
}

static void test_requests_before_close_served(void)
{
    const char *polling[] = {"JETRPC_URMA_USE_POLLING=true", NULL};
    requests_before_close(polling, "hold:300");
    requests_before_close(polling, "hold_mute:300");
    requests_before_close(NULL, "hold:300");
    requests_before_close(NULL, "hold_mute:300");
}

/* Starts g's thread of back-to-back calls; returns once it is under way,
 * its longest call reset. */
static void gap_start(gap_arg_t *g, pthread_t *th)
{
    JT_REQUIRE(pthread_create(th, NULL, gap_main, g) == 0);
    JT_WAIT_UNTIL(atomic_load(&g->calls) >= 100, 20000000);
    atomic_store(&g->worst_us, 0);
}

static void gap_stop(gap_arg_t *g, pthread_t th)
{
    atomic_store(&g->stop, true);
    pthread_join(th, NULL);
}

/* Imports that take long (on UB hardware a transport path is set up with the
 * peer; here SOFTUB_IMPORT_DELAY_US) do not stall the loop: a server with one
 * event loop keeps answering an established connection at full speed while
 * a new connection's handshake waits 1.5 s for its import. */
static void test_slow_import_keeps_loop_serving(void)
{
    slow_trace_reset();
    enum { DELAY_MS = 1500 };
    const char *envs[] = {g_slow_env,
                          "SOFTUB_IMPORT_DELAY_US=1500000", "JETRPC_EVENT_LOOP_NUM=1", NULL};
    jt_child_t c;
    jet_channel_t *a = warm_child(&c, envs);
    JT_REQUIRE(a);
    gap_arg_t g = {.ch = a};
    pthread_t th;
    gap_start(&g, &th);
    int before = atomic_load(&g.calls);
    jet_channel_t *b = channel(c.port, 30000, 0);
    JT_REQUIRE(b);
    int64_t t0 = (int64_t)jt_now_us();
    JT_CHECK_EQ(jt_echo_bytes(b, 1000, 2, "new"), 0);
    int64_t b_us = (int64_t)jt_now_us() - t0;
    gap_stop(&g, th);
    int during = atomic_load(&g.calls) - before;
    int64_t worst = atomic_load(&g.worst_us);
    fprintf(stderr, "  new connection's first call %lld ms; meanwhile %d calls on the other, the "
                    "longest %lld us\n",
            (long long)(b_us / 1000), during, (long long)worst);
    /* The import delay is in effect (the new call waited for it)... */
    JT_CHECK(b_us >= DELAY_MS * 1000LL);
    /* ...and the loop did not wait with it: an import on the loop thread
     * would hold every call of the other connection for the whole delay. */
    gap_check_not_held(&g);
    JT_CHECK(during > 10);
    JT_CHECK_EQ(atomic_load(&g.bad), 0);
    JT_CHECK_EQ(jt_echo_bytes(b, 5000, 3, "after"), 0);
    jet_channel_destroy(b);
    jet_channel_destroy(a);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

/* Creating a jetty set, moving one to ERROR at close and resetting it for
 * reuse may take long on hardware (here SOFTUB_QUEUE_DELAY_US and
 * SOFTUB_CLOSE_DELAY_US, 400 ms each): a server with one loop and a pool of
 * two prepared sets refills its pool, and closes and resets the sets of
 * closed connections, on the import threads, so connections that arrive and
 * leave one at a time never hold the established one. With creation on the
 * loop, the third new connection (the pool spent) would hold every call of
 * the first for 400 ms; with the close or the reset on the loop, every close
 * would. */
static void test_pool_filled_off_loop(void)
{
    slow_trace_reset();
    enum { DELAY_MS = 400 };
    const char *envs[] = {g_slow_env,
                          "SOFTUB_QUEUE_DELAY_US=400000", "SOFTUB_CLOSE_DELAY_US=400000",
                          "JETRPC_EVENT_LOOP_NUM=1", "JETRPC_URMA_PREPARED_JETTY_CNT=2", NULL};
    jt_child_t c;
    jet_channel_t *a = warm_child(&c, envs);
    JT_REQUIRE(a);
    usleep(3 * DELAY_MS * 1000); /* the first fill (two sets) */
    ut_urma_mark_t m = ut_urma_mark();
    gap_arg_t g = {.ch = a};
    pthread_t th;
    gap_start(&g, &th);
    enum { N = 4 };
    jet_channel_t *more[N];
    for (int i = 0; i < N; i++) {
        more[i] = channel(c.port, 30000, 0);
        JT_REQUIRE(more[i]);
        JT_CHECK_EQ(jt_echo_bytes(more[i], 1000, (uint64_t)i + 2, "new"), 0);
        usleep(2 * DELAY_MS * 1000); /* the fill that replaces the set taken */
    }
    int64_t worst_open = atomic_load(&g.worst_us);
    atomic_store(&g.worst_us, 0);
    for (int i = 0; i < N; i++) {
        /* Every one of them carries URMA-sized payloads (a set was there). */
        JT_CHECK_EQ(jt_echo_bytes(more[i], 300000, (uint64_t)i + 20, "after"), 0);
        if (i == N - 1) ut_expect_urma(m, N * 5, N);
        jet_channel_destroy(more[i]);
        usleep(3 * DELAY_MS * 1000); /* the server closes, drains and resets its set */
    }
    gap_stop(&g, th);
    int64_t worst_close = atomic_load(&g.worst_us);
    fprintf(stderr, "  %d connections opened, then closed, one at a time; the longest call of the "
                    "first: %lld us while they opened, %lld us while they closed\n",
            N, (long long)worst_open, (long long)worst_close);
    gap_check_not_held(&g);
    JT_CHECK_EQ(atomic_load(&g.bad), 0);
    end_child(&c, a);
    slow_trace_check();
}

/* Closed connections' sets go back to the pool, which never ends over its
 * size: two connections take the server's two prepared sets and close at
 * once, while the fill that replaces the first (2 s) still runs. The first
 * close finds room for one more set (two wanted, one coming from the fill):
 * its set is reset and pooled; the second finds none: destroyed. The pool
 * ends with exactly two sets, one of them recycled. A set is pooled only
 * once its send queue's flush record came back (found by its jetty id), so
 * this runs with the loop's shared receive queue and with a receive queue
 * per connection. */
static void closed_sets_recycled(const char *rq_env)
{
    slow_trace_reset();
    const char *envs[] = {g_slow_env,
                          "SOFTUB_QUEUE_DELAY_US=2000000",
                          "JETRPC_EVENT_LOOP_NUM=1",
                          "JETRPC_URMA_PREPARED_JETTY_CNT=2",
                          "JETRPC_URMA_JFC_DEPTH=32768",
                          rq_env,
                          NULL};
    jt_child_t c;
    jet_channel_t *a = warm_child(&c, envs);
    JT_REQUIRE(a);
    ut_child_stats_t st = {0};
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(a, &st) && st.pooled == 2, 30000000));
    JT_CHECK_EQ(st.recycled, 0ull);
    jet_channel_t *b = channel(c.port, 30000, 0), *d = channel(c.port, 30000, 0);
    JT_REQUIRE(b && d);
    JT_CHECK_EQ(jt_echo_bytes(b, 1000, 2, "b"), 0);
    JT_CHECK_EQ(jt_echo_bytes(d, 1000, 3, "d"), 0);
    jet_channel_destroy(b);
    jet_channel_destroy(d);
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(a, &st) && st.recycled >= 1, 30000000));
    usleep(5000000); /* whatever else was on its way has arrived */
    JT_CHECK(ut_child_pool(a, &st));
    fprintf(stderr, "  pooled %u, recycled %llu\n", st.pooled, st.recycled);
    JT_CHECK_EQ(st.pooled, 2u);
    JT_CHECK_EQ(st.recycled, 1ull);
    jet_channel_destroy(a);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

static void test_closed_sets_recycled(void)
{
    closed_sets_recycled("JETRPC_URMA_SHARED_RQ_SIZE=256");
    closed_sets_recycled("JETRPC_URMA_SHARED_RQ_SIZE=0");
}

/* The server's handshake deadline passes while the import runs: the
 * connection fails there, the import that comes back later is undone (the
 * child's clean exit, leak-checked under ASan), the client's call still
 * succeeds (a server that closes on the hello means TCP), and the server
 * goes on serving. */
static void test_import_outlived_by_handshake(void)
{
    slow_trace_reset();
    const char *envs[] = {g_slow_env,
                          "SOFTUB_IMPORT_DELAY_US=700000", "JETRPC_URMA_HANDSHAKE_TIMEOUT_MS=300",
                          NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *ch = channel(c.port, 30000, 1);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "first"), 0);
    usleep(2000000); /* the abandoned imports come back meanwhile */
    JT_CHECK_EQ(jt_echo_bytes(ch, 200000, 2, "second"), 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

static void noop_done(jet_call_t *call, void *arg)
{
    (void)call;
    (void)arg;
}

/* Answers received over URMA by this process so far. */
static uint64_t urma_answers(void)
{
    jet_urma_loop_stats_t st = ut_urma_totals(NULL);
    return st.c.recv_copied + st.c.recv_zerocopy;
}

/* Opens n URMA channels to port and makes one asynchronous call on each at
 * once; returns when every call has ended (each must have succeeded). The
 * channels and calls are the caller's. */
static void open_together(int port, int n, jet_channel_t **ch, jet_call_t **call)
{
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "together";
    for (int i = 0; i < n; i++) {
        ch[i] = channel(port, 30000, 0);
        call[i] = jet_call_create();
        JT_REQUIRE(ch[i] && call[i]);
    }
    for (int i = 0; i < n; i++)
        JT_CHECK_EQ(jet_channel_call(ch[i], &example__echo_service__descriptor, 0, call[i],
                                     &req.base, noop_done, NULL),
                    0);
    for (int i = 0; i < n; i++) {
        jet_call_join(call[i]);
        JT_CHECK_AT(jet_call_error_text(call[i]), !jet_call_failed(call[i]));
    }
}

/* Four connections at once to a server whose imports take 0.6 s each: they
 * import side by side, so every handshake ends within its 1.5 s deadline
 * and every connection runs over URMA (one import at a time would take the
 * third and fourth past it, and their channels to TCP). */
static void test_concurrent_slow_imports(void)
{
    slow_trace_reset();
    enum { N = 4 };
    const char *envs[] = {g_slow_env,
                          "SOFTUB_IMPORT_DELAY_US=300000", "JETRPC_URMA_HANDSHAKE_TIMEOUT_MS=1500",
                          NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *ch[N];
    jet_call_t *call[N];
    open_together(c.port, N, ch, call);
    uint64_t before = urma_answers();
    for (int i = 0; i < N; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch[i], 1000, (uint64_t)i, "again"), 0);
    uint64_t got = urma_answers() - before;
    fprintf(stderr, "  answers received over URMA: %llu of %d\n", (unsigned long long)got, N);
    JT_CHECK(got >= N);
    for (int i = 0; i < N; i++) {
        jet_call_destroy(call[i]);
        jet_channel_destroy(ch[i]);
    }
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

/* Queues are made off the loop: a server with one event loop and no
 * prepared pool makes its loop's completion queue (400 ms here) and every
 * connection's jetty set (400 ms each) on the import threads, and keeps
 * answering an established connection at full speed while three
 * connections open at once; all of them run over URMA. The client, its
 * pool disabled too, drops the sets it had prepared (when a connection
 * attaches to the loop) and makes the others the same way. */
static void test_sets_made_off_loop(void)
{
    slow_trace_reset();
    enum { DELAY_MS = 400, N = 3 };
    const char *envs[] = {g_slow_env,
                          "SOFTUB_QUEUE_DELAY_US=400000", "JETRPC_EVENT_LOOP_NUM=1",
                          "JETRPC_URMA_PREPARED_JETTY_CNT=0", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    char old_cnt[16];
    snprintf(old_cnt, sizeof old_cnt, "%d", (int)JET_FLAG(urma_prepared_jetty_cnt));
    JT_REQUIRE(jet_flag_set("urma_prepared_jetty_cnt", "0") == 0);
    jet_channel_t *a = channel(c.port, 30000, 0);
    JT_REQUIRE(a);
    int64_t t0 = (int64_t)jt_now_us();
    JT_CHECK_EQ(jt_echo_bytes(a, 1000, 1, "warm"), 0);
    int64_t first_us = (int64_t)jt_now_us() - t0;
    gap_arg_t g = {.ch = a};
    pthread_t th;
    gap_start(&g, &th);
    jet_channel_t *ch[N];
    jet_call_t *call[N];
    t0 = (int64_t)jt_now_us();
    open_together(c.port, N, ch, call);
    int64_t open_us = (int64_t)jt_now_us() - t0;
    gap_stop(&g, th);
    int64_t worst = atomic_load(&g.worst_us);
    uint64_t before = urma_answers();
    for (int i = 0; i < N; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch[i], 1000, (uint64_t)i, "again"), 0);
    uint64_t got = urma_answers() - before;
    JT_CHECK_EQ(ut_urma_totals(NULL).pooled, 0u);
    ut_child_stats_t st = {.pooled = 9};
    JT_CHECK(ut_child_pool(a, &st));
    fprintf(stderr,
            "  first connection %lld us; %d more at once %lld us; the longest call of the first "
            "meanwhile %lld us; answers over URMA %llu of %d; server endpoints %u, pooled %u\n",
            (long long)first_us, N, (long long)open_us, (long long)worst,
            (unsigned long long)got, N, st.endpoints, st.pooled);
    JT_CHECK(first_us >= 2 * DELAY_MS * 1000LL); /* the queue, then the set: both waited for */
    gap_check_not_held(&g);
    JT_CHECK_EQ(atomic_load(&g.bad), 0);
    JT_CHECK(got >= N);
    JT_CHECK_EQ(st.endpoints, (unsigned)N + 1);
    JT_CHECK_EQ(st.pooled, 0u);
    for (int i = 0; i < N; i++) {
        jet_call_destroy(call[i]);
        jet_channel_destroy(ch[i]);
    }
    jet_channel_destroy(a);
    JT_CHECK_EQ(jet_flag_set("urma_prepared_jetty_cnt", old_cnt), 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

/* A jetty that cannot be stopped (SOFTUB_CLOSE_FAIL: its move to ERROR
 * fails, so its queues never drain) is destroyed without the drain, off the
 * loop (400 ms here), and the buffers its queues held are released after
 * it. Meanwhile the server's one loop keeps answering an established
 * connection at full speed. */
static void test_undrained_set_destroyed_off_loop(void)
{
    slow_trace_reset();
    enum { DELAY_MS = 400, N = 3 };
    const char *envs[] = {g_slow_env,
                          "SOFTUB_CLOSE_FAIL=1",
                          "SOFTUB_QUEUE_DELAY_US=400000",
                          "JETRPC_EVENT_LOOP_NUM=1",
                          "JETRPC_URMA_PREPARED_JETTY_CNT=4",
                          "JETRPC_URMA_JFC_DEPTH=32768",
                          NULL};
    jt_child_t c;
    jet_channel_t *a = warm_child(&c, envs);
    JT_REQUIRE(a);
    ut_child_stats_t st = {0};
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(a, &st) && st.pooled == 4, 30000000));
    size_t blocks_before = st.blocks;
    unsigned jfc_before = st.jfc_used;
    gap_arg_t g = {.ch = a};
    pthread_t th;
    gap_start(&g, &th);
    for (int i = 0; i < N; i++) {
        jet_channel_t *b = channel(c.port, 30000, 0);
        JT_REQUIRE(b);
        uint64_t before = urma_answers();
        JT_CHECK_EQ(jt_echo_bytes(b, 300000, (uint64_t)i + 2, "doomed"), 0);
        JT_CHECK(urma_answers() > before);
        jet_channel_destroy(b);
        /* The server's connection is gone (its set's destruction may still
         * run): then the next. */
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(a, &st) && st.endpoints == 1, 30000000));
    }
    gap_stop(&g, th);
    int64_t worst = atomic_load(&g.worst_us);
    fprintf(stderr,
            "  %d connections closed without a drain; the longest call of the established one "
            "meanwhile %lld us; recycled %llu; server blocks in use %zu, before %zu\n",
            N, (long long)worst, st.recycled, st.blocks, blocks_before);
    gap_check_not_held(&g);
    JT_CHECK_EQ(atomic_load(&g.bad), 0);
    JT_CHECK_EQ(st.recycled, 0ull); /* none drained: none reused */
    /* Their receive buffers came back once their sets were gone (each
     * connection held 32), and their completion-queue shares: a few blocks
     * may still be in flight for the calls. */
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(a, &st) && st.blocks <= blocks_before + 4, 10000000));
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(a, &st) && st.jfc_used == jfc_before, 10000000));
    end_child(&c, a);
    slow_trace_check();
}

/* The server's handshake deadline (200 ms) passes while the set of a new
 * connection is made (400 ms): the connection fails there; the set that
 * comes back for it is not used (the pool is off: it is destroyed) and the
 * connection's completion-queue share is returned; the client, whose hello
 * the server closed on, goes on over TCP and its call succeeds. */
static void test_closed_while_set_made(void)
{
    slow_trace_reset();
    const char *envs[] = {g_slow_env,
                          "SOFTUB_QUEUE_DELAY_US=400000", "JETRPC_URMA_HANDSHAKE_TIMEOUT_MS=200",
                          "JETRPC_EVENT_LOOP_NUM=1", "JETRPC_URMA_PREPARED_JETTY_CNT=0", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *ch = channel(c.port, 30000, 1);
    JT_REQUIRE(ch);
    uint64_t before = urma_answers();
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "first"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 200000, 2, "second"), 0);
    JT_CHECK_EQ(urma_answers(), before); /* over TCP */
    ut_child_stats_t st = {0};
    /* The abandoned sets come back (each 400 ms after its connection). */
    JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(ch, &st) && st.endpoints == 0 && st.jfc_used == 0,
                           10000000));
    fprintf(stderr, "  server: endpoints %u, completion-queue entries held %u, pooled %u\n",
            st.endpoints, st.jfc_used, st.pooled);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

/* A flag that sizes the queues changes while a connection waits for its
 * set (here the client's loop makes its completion queue, 400 ms, when
 * urma_rq_size or urma_max_sge shrinks at 150 ms): the set is made at the
 * sizes the connection was built and charged with, so the connection runs
 * over URMA without failing (a set made at the new sizes refuses the
 * receive queue, or the sends of more scatter entries), and gives back
 * exactly its share when it closes (the client child checks all three). */
static void test_flags_change_while_set_made(void)
{
    slow_trace_reset();
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", c.port);
    const char *envs[] = {g_slow_env,
                          "SOFTUB_QUEUE_DELAY_US=400000", NULL};
    for (int i = 0; i < 2; i++) {
        const char *rq = i == 0 ? "set=urma_rq_size=16" : "set=urma_max_sge=1";
        const char *args[] = {pa, "calls=3", "size=100000", "set_after_ms=150", rq,
                              "expect_urma=1", NULL};
        JT_CHECK_EQ(ut_client_run(args, envs), 0);
    }
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    slow_trace_check();
}

typedef struct churn_arg {
    int port, rounds, index;
    _Atomic int *bad;
} churn_arg_t;

static void *churn_main(void *arg)
{
    churn_arg_t *a = arg;
    for (int r = 0; r < a->rounds; r++) {
        /* Each attempt may meet a server that gave up in its ACK phase. */
        jet_channel_t *ch = channel(a->port, 30000, 5);
        int rc = ch ? jt_echo_bytes(ch, 1000 + (size_t)r * 997, (uint64_t)(a->index * 100 + r),
                                    "churn")
                    : -1;
        if (rc != 0) atomic_fetch_add(a->bad, 1);
        if (ch) jet_channel_destroy(ch);
    }
    return NULL;
}

/* threads (at most CHURN_MAX) each churn_main for rounds at port; returns
 * how many of their connections or calls failed. */
#define CHURN_MAX 8
static int churn_run(int port, int threads, int rounds)
{
    _Atomic int bad = 0;
    pthread_t th[CHURN_MAX];
    churn_arg_t a[CHURN_MAX];
    if (threads > CHURN_MAX) return -1;
    for (int i = 0; i < threads; i++) {
        a[i] = (churn_arg_t){.port = port, .rounds = rounds, .index = i, .bad = &bad};
        if (pthread_create(&th[i], NULL, churn_main, &a[i]) != 0) {
            atomic_fetch_add(&bad, 1);
            threads = i;
            break;
        }
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    return atomic_load(&bad);
}

/* Connections open and close in a churn while the server makes every set
 * off the loop (pool off, 15 ms per set) and its handshake deadline (40 ms)
 * catches some of them still waiting (the client then goes on over TCP) or
 * waiting for the ACK after its hello (the client, already on URMA, sees the
 * connection close: its call's next attempt); every call succeeds within
 * its attempts, and in the end the server
 * holds no endpoint and no completion-queue entry, its blocks are back, and
 * it exits cleanly (leak-checked under ASan). Event mode, then polling. */
static void test_churn_while_sets_made(void)
{
    slow_trace_reset();
    enum { T = 6, ROUNDS = 12 };
    for (int polling = 0; polling < 2; polling++) {
        const char *args[] = {polling ? "--urma_use_polling=true" : "--urma_use_polling=false",
                              NULL};
        const char *envs[] = {g_slow_env,
                              "SOFTUB_QUEUE_DELAY_US=15000",
                              "JETRPC_URMA_HANDSHAKE_TIMEOUT_MS=40",
                              "JETRPC_URMA_PREPARED_JETTY_CNT=0", NULL};
        jt_child_t c;
        JT_REQUIRE(jt_child_start(&c, args, envs) == 0);
        jet_channel_t *ctl = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ctl);
        ut_child_stats_t st = {0};
        JT_REQUIRE(ut_child_pool(ctl, &st));
        size_t blocks_before = st.blocks;
        JT_CHECK_EQ(churn_run(c.port, T, ROUNDS), 0);
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(ctl, &st) && st.endpoints == 0 && st.jfc_used == 0 &&
                                   st.blocks <= blocks_before + 8,
                               20000000));
        fprintf(stderr,
                "  %s: %d connections; server endpoints %u, completion-queue entries %u, blocks "
                "%zu (before %zu)\n",
                polling ? "polling" : "event", T * ROUNDS, st.endpoints, st.jfc_used, st.blocks,
                blocks_before);
        jet_channel_destroy(ctl);
        JT_CHECK_EQ(jt_child_stop(&c), 0);
    }
    slow_trace_check();
}

/* Connections open and close in a churn on a server loop whose queues hold
 * 2, 4 and 4 of them (the shared receive queue takes 256 of the first 600
 * entries): the connections move between queues as room comes and goes,
 * some find them all full for a moment (a closed connection keeps its room
 * until its queues are stopped) and run over TCP, and every call succeeds.
 * Afterwards no entry is held in any queue: ten connections opened one
 * after another all run over URMA again. Event mode, then polling. */
static void test_churn_across_queues(void)
{
    enum { T = 8, ROUNDS = 40, CAP = 10 };
    for (int polling = 0; polling < 2; polling++) {
        const char *args[] = {"--urma_jfc_depth=600", "--event_loop_num=1", "--urma_jfc_per_loop=3",
                              polling ? "--urma_use_polling=true" : "--urma_use_polling=false",
                              NULL};
        jt_child_t c;
        JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
        jet_channel_t *ctl = ut_channel(c.port, JET_SOCKET_MODE_TCP, 30000, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ctl);
        JT_CHECK_EQ(churn_run(c.port, T, ROUNDS), 0);
        ut_child_stats_t st = {0};
        JT_CHECK(JT_WAIT_UNTIL(ut_child_pool(ctl, &st) && st.endpoints == 0 && st.jfc_used == 0,
                               20000000));
        fprintf(stderr, "  %s: %d connections on %u completion queues; entries held after: %u\n",
                polling ? "polling" : "event", T * ROUNDS, st.jfcs, st.jfc_used);
        jet_channel_t *ch[CAP];
        for (int i = 0; i < CAP; i++) {
            bool urma = false;
            ch[i] = open_echo(c.port, (uint64_t)i + 1, &urma);
            JT_REQUIRE(ch[i]);
            JT_CHECK_AT(nth(i), urma);
        }
        for (int i = 0; i < CAP; i++)
            jet_channel_destroy(ch[i]);
        jet_channel_destroy(ctl);
        JT_CHECK_EQ(jt_child_stop(&c), 0);
    }
}

/* urma_jetrpc_extensions turned off while a client imports its server,
 * after its hello advertised them: the client keeps what its hello said
 * (the server expects credits on data), and its calls go over URMA on its
 * first connection. */
static void test_extensions_flag_changed_mid_handshake(void)
{
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", c.port);
    /* The client's import of the server takes a second; the flag changes
     * half-way through it. */
    const char *envs[] = {"SOFTUB_IMPORT_DELAY_US=1000000", NULL};
    const char *args[] = {pa,          "calls=3", "size=2000", "set_after_ms=500",
                          "set=urma_jetrpc_extensions=false", "expect_urma=1", NULL};
    JT_CHECK_EQ(ut_client_run(args, envs), 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* The provider refuses a loop's completion queue (SOFTUB_JFC_FAIL=1: the
 * first create_jfc of the process fails): the connection that waited for it
 * goes on over TCP (the server declines its hello), and the next connection
 * of that loop makes it again and runs over URMA. A client whose first
 * completion queue is refused sends no hello: its calls go over TCP. */
static void test_jfc_creation_fails(void)
{
    const char *envs[] = {"SOFTUB_JFC_FAIL=1", "JETRPC_EVENT_LOOP_NUM=1", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *a = channel(c.port, 30000, 0);
    JT_REQUIRE(a);
    uint64_t before = urma_answers();
    JT_CHECK_EQ(jt_echo_bytes(a, 1000, 1, "declined"), 0);
    JT_CHECK_EQ(urma_answers(), before);
    jet_channel_t *b = channel(c.port, 30000, 0);
    JT_REQUIRE(b);
    before = urma_answers();
    JT_CHECK_EQ(jt_echo_bytes(b, 1000, 2, "second"), 0);
    JT_CHECK(urma_answers() > before);
    jet_channel_destroy(a);
    jet_channel_destroy(b);
    JT_CHECK_EQ(jt_child_stop(&c), 0);

    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", c.port);
    const char *args[] = {pa, "calls=3", "expect_urma=0", NULL};
    const char *cenvs[] = {"SOFTUB_JFC_FAIL=1", NULL};
    JT_CHECK_EQ(ut_client_run(args, cenvs), 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* role=case name=abandoned_import port=<p> (g_case_port), in a child whose imports take
 * 300 ms each (SOFTUB_IMPORT_DELAY_US): five calls on short connections with
 * a 100 ms deadline. Each connection is closed by its call's end while it
 * imports the server, which takes its jetty down on that close: the import
 * fails, and nobody waits for it. No warning for that; there was one
 * ("cannot import jetty") for each of them. */
static int g_case_port;

static void case_abandoned_import(void)
{
    jt_stderr_cap_t cap;
    jt_stderr_begin(&cap);
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_URMA;
    o.connection_type = JET_CONNECTION_SHORT;
    o.timeout_ms = 100;
    o.connect_timeout_ms = 30000;
    o.max_retry = 0;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", g_case_port);
    jet_channel_t *ch = NULL;
    JT_REQUIRE(jet_channel_create(addr, &o, &ch) == 0);
    int timed_out = 0;
    for (int i = 0; i < 5; i++)
        timed_out += jt_echo_bytes(ch, 100, (uint64_t)i + 1, "abandoned") == JET_ERPCTIMEDOUT;
    usleep(2000000); /* the imports (segment and jetty, 300 ms each) come back */
    jet_channel_destroy(ch);
    char *log = jt_stderr_end(&cap);
    JT_REQUIRE(log);
    int warned = jt_count_lines_with(log, "cannot import");
    if (warned) fprintf(stderr, "  %d import warnings:\n%s", warned, log);
    free(log);
    JT_CHECK_EQ(timed_out, 5);
    JT_CHECK_EQ(warned, 0);
}

static int case_role(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (strncmp(argv[i], "port=", 5) == 0) g_case_port = atoi(argv[i] + 5);
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "name=abandoned_import") == 0) JT_RUN(case_abandoned_import);
    return jt_finish();
}

/* A client's imports that outlive their connections (closed at their call's
 * deadline, see case_abandoned_import) end without a warning, and the
 * server serves the next client. */
static void test_abandoned_import_quiet(void)
{
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, NULL) == 0);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", c.port);
    const char *args[] = {"name=abandoned_import", pa, NULL};
    const char *envs[] = {"SOFTUB_IMPORT_DELAY_US=300000", NULL};
    JT_CHECK_EQ(jt_run_role("role=case", args, envs, 60000), 0);
    jet_channel_t *ch = channel(c.port, 30000, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100000, 3, "after"), 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A provider that loses a completion event: the server child loses the
 * first event it would raise into another process's armed JFC
 * (SOFTUB_LOSE_EVENT), that of an answer's receive completion here. An
 * event-mode loop still polls its JFCs once a second while it has
 * connections, so that answer is found, late, where the call waited for
 * its deadline (10 s) before; the connection goes on. */
static void test_lost_event_found(void)
{
    const char *envs[] = {"SOFTUB_LOSE_EVENT=1", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, NULL, envs) == 0);
    jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    ut_urma_mark_t m = ut_urma_mark();
    uint64_t found = ut_urma_totals(NULL).looks_found;
    int64_t t0 = jt_now_ms(), worst = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t1 = jt_now_ms();
        JT_CHECK_EQ(jt_echo_bytes(ch, 1000, (uint64_t)i + 1, "lost"), 0);
        if (jt_now_ms() - t1 > worst) worst = jt_now_ms() - t1;
    }
    fprintf(stderr, "  20 calls, one answer's event lost: %lld ms in all, the slowest %lld ms\n",
            (long long)(jt_now_ms() - t0), (long long)worst);
    JT_CHECK_EQ(ut_urma_totals(NULL).looks_found, found + 1);
    ut_expect_urma(m, 20, 1);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "faults");
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ut_server_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=client") == 0) return ut_client_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=case") == 0) return case_role(argc, argv);
    JT_RUN(test_server_killed_mid_transfer);
    JT_RUN(test_client_killed_mid_transfer);
    JT_RUN(test_requests_before_close_served);
    JT_RUN(test_killed_server_is_eof);
    JT_RUN(test_completion_errors_server);
    JT_RUN(test_completion_errors_client);
    JT_RUN(test_forced_rnr);
    JT_RUN(test_refused_reposts_retried);
    JT_RUN(test_jfc_full_falls_back);
    JT_RUN(test_jfc_added_when_full);
    JT_RUN(test_added_jfc_refused);
    JT_RUN(test_burst_on_fresh_loop);
    JT_RUN(test_pool_fits_the_queue);
    JT_RUN(test_jfc_deleted_when_idle);
    JT_RUN(test_pool_steady_at_queue_edge);
    JT_RUN(test_jfc_kept_while_sets_on_it);
    JT_RUN(test_edge_jfc_keeps_its_sets);
    JT_RUN(test_many_connections_default_queues);
    JT_RUN(test_slow_import_keeps_loop_serving);
    JT_RUN(test_import_outlived_by_handshake);
    JT_RUN(test_concurrent_slow_imports);
    JT_RUN(test_abandoned_import_quiet);
    JT_RUN(test_pool_filled_off_loop);
    JT_RUN(test_closed_sets_recycled);
    JT_RUN(test_sets_made_off_loop);
    JT_RUN(test_undrained_set_destroyed_off_loop);
    JT_RUN(test_closed_while_set_made);
    JT_RUN(test_flags_change_while_set_made);
    JT_RUN(test_churn_while_sets_made);
    JT_RUN(test_churn_across_queues);
    JT_RUN(test_jfc_creation_fails);
    JT_RUN(test_extensions_flag_changed_mid_handshake);
    JT_RUN(test_lost_event_found);
    return jt_finish();
}
