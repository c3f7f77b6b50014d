/* Polling mode (urma_use_polling) on the client side of the process, against
 * polling and event-mode servers in other processes: payloads up to 16 MiB
 * byte-exact, many calls in flight, several connections on the one polling
 * loop (urma_poller_num=1), the yielding poller, the poller going away
 * when its loop has no URMA connection left, and a synchronous caller that
 * finds the loop driven by another (its answer still comes at once); done
 * callbacks and handlers of the loop never run on a waiting caller's thread. */
#include "urma/urma_context.h"
#include "testutil_rpc.h"
#include "urma_test.h"

JET_FLAG_DECLARE_INT32(urma_cqe_poll_once);

#define GUARD_US (60 * 1000000LL)

static void echo_suite(int port)
{
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = ut_channel(port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {1, 511, 512, 8192, 8193, 100000, 1 << 20, 16 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int rc = jt_echo_bytes(ch, sizes[i], i * 31 + 7, "poll");
        if (rc) fprintf(stderr, "  size %zu: %d\n", sizes[i], rc);
        JT_CHECK_EQ(rc, 0);
    }
    JT_CHECK_EQ(jt_async_batch(ch, 400, 4000, 0, GUARD_US, NULL), 0);
    ut_expect_urma(m, 8 + 1, 1);
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
    /* Only the last loop carries URMA (the first ones take listeners);
     * once every connection is gone nothing is attached there any more (and
     * its poller was removed). */
    int last = jet_loops_count() - 1;
    jet_urma_loop_stats_t st = {0}, other = {0};
    bool has = false;
    JT_CHECK(JT_WAIT_UNTIL((has = probe(last, &st), st.endpoints == 0), 10000000));
    JT_CHECK(has);
    JT_CHECK(st.completions > 0);
    JT_CHECK(st.pooled > 0);
    for (int i = 0; i < last; i++)
        JT_CHECK(!probe(i, &other));
}

/* One synchronous call on a channel; 0 when it succeeded. */
static int call_once(jet_channel_t *ch, const char *msg, int64_t *took_us)
{
    jet_call_t *call = jet_call_create();
    if (!call) return -1;
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = (char *)msg;
    int64_t t0 = (int64_t)jt_now_us();
    int rc = jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL,
                              NULL);
    if (took_us) *took_us = (int64_t)jt_now_us() - t0;
    if (rc == 0 && jet_call_failed(call)) rc = jet_call_error_code(call);
    jet_call_destroy(call);
    return rc;
}

typedef struct first_waiter {
    jet_channel_t *ch;
    int rc;
} first_waiter_t;

static void *first_waiter_main(void *arg)
{
    first_waiter_t *w = arg;
    w->rc = call_once(w->ch, "sleep:20", NULL);
    return NULL;
}

/* Two synchronous callers on two connections of the one polling loop: the
 * first drives the loop; the second finds it driven, sleeps, and asks for
 * the loop thread (jet_loop_kick). The first leaves when its answer comes
 * (20 ms); the second's answer comes 15 ms later and must be polled then,
 * not when the parked loop thread would look again on its own (100 ms after
 * the first took the loop: event_guest_park_us, raised to 100 ms here).
 * Guarded, not timed: the bound, 60 ms, is twice the expected 30 ms and well
 * under the ~95 ms it takes without the kick (best of three attempts). */
static void test_refused_waiter_answered(void)
{
    const char *args[] = {"--urma_use_polling=true", NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    JT_REQUIRE(jet_flag_set("event_guest_park_us", "100000") == 0);
    jet_channel_t *a = ut_channel(c.port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    jet_channel_t *b = ut_channel(c.port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(a && b);
    ut_urma_mark_t m = ut_urma_mark();
    JT_CHECK_EQ(jt_echo_bytes(a, 100, 1, "warm-a"), 0);
    JT_CHECK_EQ(jt_echo_bytes(b, 100, 2, "warm-b"), 0);
    ut_expect_urma(m, 2, 2); /* both waiters drive the polled loop */
    /* Up to three attempts of three rounds: a machine loaded by other tests
     * can stretch one attempt; without the kick every attempt takes ~95 ms. */
    int64_t worst = 0;
    for (int attempt = 0; attempt < 3 && (attempt == 0 || worst >= 60000); attempt++) {
        worst = 0;
        for (int round = 0; round < 3; round++) {
            first_waiter_t w = {.ch = a};
            pthread_t th;
            JT_REQUIRE(pthread_create(&th, NULL, first_waiter_main, &w) == 0);
            usleep(5000);
            int64_t took = 0;
            JT_CHECK_EQ(call_once(b, "sleep:30", &took), 0);
            pthread_join(th, NULL);
            JT_CHECK_EQ(w.rc, 0);
            if (took > worst) worst = took;
        }
        fprintf(stderr, "  the second waiter's 30 ms call took at most %lld ms\n",
                (long long)(worst / 1000));
    }
    JT_CHECK(worst < 60000);
    jet_channel_destroy(a);
    jet_channel_destroy(b);
    JT_REQUIRE(jet_flag_set("event_guest_park_us", "200") == 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A polling server child and a warmed-up URMA channel to it; NULL on failure. */
static jet_channel_t *polled_channel(jt_child_t *c)
{
    const char *args[] = {"--urma_use_polling=true", NULL};
    if (jt_child_start(c, args, NULL) != 0) return NULL;
    jet_channel_t *ch = ut_channel(c->port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    if (ch && jt_echo_bytes(ch, 100, 1, "warm") != 0) {
        jet_channel_destroy(ch);
        ch = NULL;
    }
    if (!ch) jt_child_stop(c);
    return ch;
}

/* A synchronous call keeps its own deadline while it drives the polled loop
 * (no deadline thread): a 50 ms call to a handler that sleeps 1 s ends with
 * ERPCTIMEDOUT, no sooner than its deadline, and the connection goes on (the
 * late answer is dropped). */
static void test_sync_deadline_while_driving(void)
{
    jt_child_t c;
    jet_channel_t *ch = polled_channel(&c);
    JT_REQUIRE(ch);
    ut_urma_mark_t m = ut_urma_mark();
    for (int round = 0; round < 3; round++) {
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        jet_call_set_timeout_ms(call, 50);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = "sleep:1000";
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                     NULL, NULL),
                    0);
        /* An answer (after 1 s) would have been a success. */
        JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCTIMEDOUT);
        JT_CHECK_EQ(jet_call_attempts(call), 1);
        JT_CHECK(jet_call_latency_us(call) >= 50000);
        jet_call_destroy(call);
        JT_CHECK_EQ(jt_echo_bytes(ch, 1000, (uint64_t)round + 2, "after"), 0);
    }
    /* Over URMA on the same connection: the late answers were dropped. */
    ut_expect_urma(m, 3, 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* A polled caller's answer comes before its receive is posted again: the
 * re-post waits for the loop's next poller pass, which must come even when
 * the caller goes quiet (the parked loop thread looks again). */
static void test_deferred_reposts_return(void)
{
    jt_child_t c;
    jet_channel_t *ch = polled_channel(&c);
    JT_REQUIRE(ch);
    int seen = 0;
    jet_urma_loop_stats_t st = {0};
    for (int i = 0; i < 50; i++) {
        JT_CHECK_EQ(call_once(ch, "x", NULL), 0);
        JT_REQUIRE(probe(jet_loops_count() - 1, &st));
        if (st.deferred > 0 && st.recv_held > 0) seen++;
    }
    fprintf(stderr, "  a re-post was still waiting after %d of 50 calls\n", seen);
    JT_CHECK(seen > 0);
    /* Quiet now: the parked loop thread looks again by itself (a probe would
     * wake it, and a probe's task runs before the pollers), so one probe
     * after more than the park time must find everything posted. */
    JT_CHECK_EQ(call_once(ch, "x", NULL), 0);
    usleep(1000000); /* event_guest_park_solitary_us is 20 ms here */
    JT_REQUIRE(probe(jet_loops_count() - 1, &st));
    JT_CHECK_EQ(st.deferred, 0u);
    JT_CHECK_EQ(st.recv_held, 0u);
    /* And the connection still carries everything. */
    JT_CHECK_EQ(jt_async_batch(ch, 200, 2000, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

typedef struct done_rec {
    pthread_t thread;
    _Atomic int ran;
    int code;
} done_rec_t;

static void done_rec(jet_call_t *call, void *arg)
{
    done_rec_t *d = arg;
    d->thread = pthread_self();
    d->code = jet_call_error_code(call);
    atomic_store(&d->ran, 1);
}

/* A synchronous caller runs the polled loop while it waits, and reads there
 * the answer to an asynchronous call it made before: that call's done
 * callback runs on the loop's thread, never inside the caller's
 * jet_channel_call (where it would take, say, a lock the caller holds). The
 * server answers the 30 ms call before the 60 ms one it reads after it. */
static void test_done_not_on_the_waiting_thread(void)
{
    jt_child_t c;
    jet_channel_t *ch = polled_channel(&c);
    JT_REQUIRE(ch);
    for (int round = 0; round < 3; round++) {
        done_rec_t d = {0};
        jet_call_t *a = jet_call_create(), *b = jet_call_create();
        JT_REQUIRE(a && b);
        JT_CHECK_EQ(jt_echo_call(ch, a, "sleep:30", done_rec, &d), 0);
        JT_CHECK_EQ(jt_echo_call(ch, b, "sleep:60", NULL, NULL), 0);
        JT_CHECK_EQ(jet_call_error_code(b), 0);
        JT_CHECK(JT_WAIT_UNTIL(atomic_load(&d.ran), GUARD_US));
        JT_CHECK_EQ(d.code, 0);
        JT_CHECK(!pthread_equal(d.thread, pthread_self()));
        jet_call_destroy(a);
        jet_call_destroy(b);
    }
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* The authenticator's runs on a thread of this process's own, counted. */
static char g_test_thread[16];
static _Atomic int g_verified, g_verified_on_caller;

static int verify_on_loop(void *arg, const uint8_t *data, size_t len, const char *peer)
{
    (void)arg, (void)data, (void)len, (void)peer;
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    if (strcmp(name, g_test_thread) == 0) atomic_fetch_add(&g_verified_on_caller, 1);
    atomic_fetch_add(&g_verified, 1);
    return 0;
}

/* A server in this process whose connections share the one polling loop
 * with the client's (urma_poller_num=1): while a synchronous caller runs
 * that loop, the handlers and the authenticator (each new connection's
 * first request) run on the loop's thread, not the caller's. */
static void test_handler_not_on_the_waiting_thread(void)
{
    jt_echo_service_t svc;
    jt_echo_service_init(&svc, NULL);
    pthread_getname_np(pthread_self(), g_test_thread, sizeof g_test_thread);
    atomic_store(&g_verified, 0);
    atomic_store(&g_verified_on_caller, 0);
    static const jet_authenticator_t auth = {.verify_credential = verify_on_loop};
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.socket_mode = JET_SOCKET_MODE_URMA;
    so.auth = &auth;
    int port = 0;
    jet_server_t *srv = jt_echo_server_start_port(&svc, 0, &so, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = ut_channel(port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    ut_urma_mark_t m = ut_urma_mark();
    char me[16] = "";
    pthread_getname_np(pthread_self(), me, sizeof me);
    for (int i = 0; i < 20; i++) {
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_CHECK_EQ(jt_echo_call(ch, call, "thread", NULL, NULL), 0);
        const char *ran_on = jt_echo_resp_message(call);
        JT_CHECK(ran_on && strncmp(ran_on, "jet_loop", 8) == 0 && strcmp(ran_on, me) != 0);
        if (i == 0) fprintf(stderr, "  the handler ran on %s\n", ran_on ? ran_on : "(none)");
        jet_call_destroy(call);
    }
    ut_expect_urma(m, 40, -1); /* requests and answers, both in this process */
    jet_channel_destroy(ch);
    /* New connections, each verified once. */
    for (int i = 0; i < 10; i++) {
        ch = ut_channel(port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_CHECK_EQ(jt_echo_call(ch, call, "x", NULL, NULL), 0);
        JT_CHECK(jt_echo_resp_is(call, "x"));
        jet_call_destroy(call);
        jet_channel_destroy(ch);
    }
    fprintf(stderr, "  %d connections verified, %d of them on the waiting thread\n",
            atomic_load(&g_verified), atomic_load(&g_verified_on_caller));
    JT_CHECK_EQ(atomic_load(&g_verified), 11);
    JT_CHECK_EQ(atomic_load(&g_verified_on_caller), 0);
    jt_server_stop(srv);
}

/* urma_cqe_poll_once has the range [1, 64]: a value outside is refused from
 * the command line, and one that code stores still polls (clamped into it),
 * on both sides; 0 or less polled no completion at all, so every polled
 * connection stalled until its calls' deadlines. */
static void test_poll_once_out_of_range(void)
{
    const char *values[] = {"0", "-3", "1000"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        JT_CHECK_EQ(jet_flag_set("urma_cqe_poll_once", values[i]), -EINVAL);
        JT_CHECK_EQ(JET_FLAG(urma_cqe_poll_once), 32);
        char arg[64];
        snprintf(arg, sizeof arg, "store32=urma_cqe_poll_once=%s", values[i]);
        const char *args[] = {"--urma_use_polling=true", arg, NULL};
        JET_FLAG_STORE(urma_cqe_poll_once, atoi(values[i]));
        jt_child_t c;
        JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
        /* Seconds: the answers come at once or never. */
        jet_channel_t *ch = ut_channel(c.port, JET_SOCKET_MODE_URMA, 3000, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ch);
        for (int k = 0; k < 3; k++) {
            int rc = jt_echo_bytes(ch, k == 2 ? 100000 : 1000, (uint64_t)k + 1, "once");
            if (rc) fprintf(stderr, "  urma_cqe_poll_once=%s, call %d: %d\n", values[i], k, rc);
            JT_CHECK_EQ(rc, 0);
        }
        jet_channel_destroy(ch);
        JT_CHECK_EQ(jt_child_stop(&c), 0);
        JT_CHECK_EQ(jet_flag_set("urma_cqe_poll_once", "32"), 0);
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
    JT_RUN(test_refused_waiter_answered);
    JT_RUN(test_deferred_reposts_return);
    JT_RUN(test_sync_deadline_while_driving);
    JT_RUN(test_poll_once_out_of_range);
    JT_RUN(test_done_not_on_the_waiting_thread);
    JT_RUN(test_handler_not_on_the_waiting_thread);
    return jt_finish();
}
