/* Backup requests (channel option backup_request_ms, per call
 * jet_call_set_backup_request_ms), over single, pooled and short
 * connections, synchronous and not:
 *   - a first request that is slow to answer gets a backup, whose answer
 *     ends the call; the late first answer is dropped (the connection goes
 *     on serving);
 *   - a first answer that comes after the backup went out ends the call,
 *     the backup's is dropped;
 *   - none is sent when the answer comes in time, without a retry left, or
 *     with the backup time at or past the deadline; a call can turn the
 *     channel's off;
 *   - a backup answered with a retriable error (ELOGOFF), or whose
 *     connection the server closes, leaves the call waiting for the first
 *     attempt's answer;
 *   - a cancel or the deadline ends a call with both attempts out;
 *   - calls whose backup goes out at once (0 ms) race their two answers:
 *     each ends once, with its own answer.
 * The server's hook tells the attempts apart by arrival order and answers
 * "first" or "second"; which one a call got says which attempt ended it. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "testutil.h"
#include "testutil_codec.h"
#include "testutil_net.h"
#include "testutil_rpc.h"

#define GUARD_US (20 * 1000000LL)

/* How the hook answers requests whose message starts with "bk": the n-th
 * (from 0) after plan[n] ms (0: at once), or with ELOGOFF when fail[n]. */
static struct {
    _Atomic int seen;
    int after_ms[2];
    bool fail[2];
} bk;

static void bk_plan(int first_ms, int second_ms, bool second_fails)
{
    atomic_store(&bk.seen, 0);
    bk.after_ms[0] = first_ms;
    bk.after_ms[1] = second_ms;
    bk.fail[0] = false;
    bk.fail[1] = second_fails;
}

static bool bk_hook(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                    void *closure_data)
{
    if (strncmp(req->message, "bk", 2) != 0) return false;
    int n = atomic_fetch_add(&bk.seen, 1);
    int i = n < 2 ? n : 1;
    const char *answer = n == 0 ? "first" : "second";
    if (bk.fail[i]) {
        jet_call_set_failed(jet_server_call(closure_data), JET_ELOGOFF, "stopping (test)");
        closure(NULL, closure_data);
    } else if (bk.after_ms[i] > 0) {
        if (!jt_echo_answer_later(bk.after_ms[i], answer, closure, closure_data)) abort();
    } else {
        jt_echo_answer(answer, closure, closure_data);
    }
    return true;
}

static jt_echo_service_t svc;
static jet_server_t *srv;
static int port;

static jet_channel_t *open_channel(int p, jet_connection_type_t type, int32_t timeout_ms,
                                   int32_t max_retry, int32_t backup_ms)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.connection_type = type;
    o.timeout_ms = timeout_ms;
    o.max_retry = max_retry;
    o.backup_request_ms = backup_ms;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p);
    jet_channel_t *ch = NULL;
    return jet_channel_create(addr, &o, &ch) == 0 ? ch : NULL;
}

static const char *type_name(jet_connection_type_t t)
{
    return t == JET_CONNECTION_SINGLE ? "single" : t == JET_CONNECTION_POOLED ? "pooled" : "short";
}

/* Makes the call (sync or async) and waits for its end. */
static void run_call(jet_channel_t *ch, jet_call_t *call, const char *msg, bool async)
{
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, call, msg, async ? jt_count_done : NULL, async ? &done : NULL), 0);
    if (async) JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
}

/* The channel serves a plain call after the dropped answer came in. */
static void check_still_serving(jet_channel_t *ch)
{
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jet_call_t *call = jet_call_create();
    run_call(ch, call, "after", false);
    JT_CHECK(jt_echo_resp_is(call, "after"));
    jet_call_destroy(call);
}

/* Under the hook's plan, a call per connection type, sync and async, with a
 * backup after 30 ms: each ends with expect, after both attempts reached
 * the server; the channel then serves the next call. */
static void each_type_ends_with(int first_ms, int second_ms, bool second_fails, int32_t max_retry,
                                const char *expect)
{
    for (int t = JET_CONNECTION_SINGLE; t <= JET_CONNECTION_SHORT; t++) {
        for (int async = 0; async < 2; async++) {
            bk_plan(first_ms, second_ms, second_fails);
            jet_channel_t *ch = open_channel(port, t, 5000, max_retry, 30);
            JT_REQUIRE(ch);
            jet_call_t *call = jet_call_create();
            run_call(ch, call, "bk", async);
            fprintf(stderr, "  %s %s: %s after %lld us\n", type_name(t), async ? "async" : "sync",
                    jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "-",
                    (long long)jet_call_latency_us(call));
            JT_CHECK(jt_echo_resp_is(call, expect));
            JT_CHECK_EQ(jet_call_attempts(call), 2);
            JT_CHECK(jet_call_has_backup_request(call));
            JT_CHECK_EQ(atomic_load(&bk.seen), 2);
            JT_CHECK(jet_call_latency_us(call) >= 30000);
            jet_call_destroy(call);
            check_still_serving(ch);
            jet_channel_destroy(ch);
        }
    }
}

static void test_backup_answers_first(void)
{
    each_type_ends_with(600, 0, false, 1, "second");
}

static void test_first_answers_after_the_backup_went_out(void)
{
    each_type_ends_with(150, 600, false, 2, "first");
}

/* A call (first answer after first_ms) that must go out once only: it
 * ends with "first", or with want_code, and no backup follows later. */
static void expect_no_backup(int first_ms, int32_t timeout_ms, int32_t max_retry, int32_t backup_ms,
                             int32_t call_backup_ms, bool async, int want_code)
{
    bk_plan(first_ms, 0, false);
    jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE, timeout_ms, max_retry, backup_ms);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    if (call_backup_ms != INT32_MIN) jet_call_set_backup_request_ms(call, call_backup_ms);
    run_call(ch, call, "bk", async);
    if (want_code)
        JT_CHECK_EQ(jet_call_error_code(call), want_code);
    else
        JT_CHECK(jt_echo_resp_is(call, "first"));
    jt_sleep_us(150000);
    JT_CHECK_EQ(atomic_load(&bk.seen), 1);
    JT_CHECK_EQ(jet_call_attempts(call), 1);
    JT_CHECK(!jet_call_has_backup_request(call));
    jet_call_destroy(call);
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jet_channel_destroy(ch);
}

/* None goes out: answered in time (and the timer is gone: nothing later),
 * no retry left, a backup time at the deadline, or turned off per call. */
static void test_no_backup(void)
{
    for (int async = 0; async < 2; async++) {
        expect_no_backup(0, 5000, 1, 50, INT32_MIN, async, 0);
        expect_no_backup(200, 5000, 0, 20, INT32_MIN, async, 0);
        expect_no_backup(400, 100, 1, 100, INT32_MIN, async, JET_ERPCTIMEDOUT);
        expect_no_backup(200, 5000, 1, 20, -1, async, 0);
    }
}

/* The backup is answered ELOGOFF (retried without a backup): the call
 * waits for the first attempt instead of making a third. */
static void test_backup_refused_first_kept(void)
{
    each_type_ends_with(200, 0, true, 3, "first");
}

/* A raw server for pooled connections: the first connection's request is
 * answered "first" 300 ms after the second connection (the backup's) was
 * closed on its request. */
typedef struct raw_srv {
    pthread_t t;
    int lfd, port;
    bool ok;
} raw_srv_t;

static void *raw_srv_main(void *arg)
{
    raw_srv_t *r = arg;
    jt_conn_t a, b;
    jet_baidu_frame_t fa, fb;
    jet__baidu_frame_init(&fa);
    jet__baidu_frame_init(&fb);
    int fd = jt_tcp_accept(r->lfd, 5000);
    if (fd < 0) return NULL;
    jt_conn_init(&a, fd);
    if (jt_conn_frame(&a, 5000, &fa, NULL, NULL) != 1) goto out_a;
    fd = jt_tcp_accept(r->lfd, 5000);
    if (fd < 0) goto out_a;
    jt_conn_init(&b, fd);
    int got = jt_conn_frame(&b, 5000, &fb, NULL, NULL);
    jt_conn_close(&b);
    if (got != 1) goto out_a;
    jt_sleep_us(300000);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = "first";
    uint8_t msg[64];
    size_t mlen = example__echo_response__pack(&resp, msg);
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    meta.response = &rm;
    meta.has_correlation_id = true;
    meta.correlation_id = fa.meta->correlation_id;
    jt_bytes_t out = {0};
    jt_bytes_frame(&out, &meta, msg, mlen, NULL, 0);
    r->ok = jt_conn_write(&a, out.p, out.len) == 0;
    free(out.p);
    jt_conn_wait_closed(&a, 5000);
out_a:
    jt_conn_close(&a);
    jet__baidu_frame_fini(&fa);
    jet__baidu_frame_fini(&fb);
    return NULL;
}

static void test_backup_connection_fails_first_kept(void)
{
    for (int async = 0; async < 2; async++) {
        raw_srv_t r = {0};
        r.lfd = jt_tcp_listen(8, &r.port);
        JT_REQUIRE(r.lfd >= 0);
        JT_REQUIRE(pthread_create(&r.t, NULL, raw_srv_main, &r) == 0);
        jet_channel_t *ch = open_channel(r.port, JET_CONNECTION_POOLED, 5000, 1, 30);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        run_call(ch, call, "bk", async);
        JT_CHECK(jt_echo_resp_is(call, "first"));
        JT_CHECK_EQ(jet_call_attempts(call), 2);
        JT_CHECK(jet_call_has_backup_request(call));
        jet_call_destroy(call);
        jet_channel_destroy(ch);
        pthread_join(r.t, NULL);
        JT_CHECK(r.ok);
        close(r.lfd);
    }
}

static void *cancel_when_both_out(void *arg)
{
    uint64_t id = *(uint64_t *)arg;
    if (!JT_WAIT_UNTIL(atomic_load(&bk.seen) == 2, GUARD_US)) abort();
    JT_CHECK_EQ(jet_call_cancel(id), 0);
    return NULL;
}

/* Both attempts out: the deadline, or a cancel, ends the call. */
static void test_deadline_and_cancel_with_both_out(void)
{
    for (int t = JET_CONNECTION_SINGLE; t <= JET_CONNECTION_SHORT; t++) {
        for (int async = 0; async < 2; async++) {
            bk_plan(500, 500, false);
            jet_channel_t *ch = open_channel(port, t, 200, 1, 30);
            JT_REQUIRE(ch);
            jet_call_t *call = jet_call_create();
            run_call(ch, call, "bk", async);
            JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCTIMEDOUT);
            JT_CHECK_EQ(jet_call_attempts(call), 2);
            JT_CHECK_EQ(atomic_load(&bk.seen), 2);
            jet_call_destroy(call);
            check_still_serving(ch);
            jet_channel_destroy(ch);

            bk_plan(500, 500, false);
            ch = open_channel(port, t, 5000, 1, 30);
            JT_REQUIRE(ch);
            call = jet_call_create();
            uint64_t id = jet_call_id(call);
            JT_REQUIRE(id != 0);
            jt_counter_t done = {0};
            if (async) {
                JT_CHECK_EQ(jt_echo_call(ch, call, "bk", jt_count_done, &done), 0);
                JT_CHECK(JT_WAIT_UNTIL(atomic_load(&bk.seen) == 2, GUARD_US));
                JT_CHECK_EQ(jet_call_cancel(id), 0);
                JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
            } else {
                /* The cancel comes from another thread once both are out. */
                pthread_t th;
                JT_REQUIRE(pthread_create(&th, NULL, cancel_when_both_out, &id) == 0);
                JT_CHECK_EQ(jt_echo_call(ch, call, "bk", NULL, NULL), 0);
                pthread_join(th, NULL);
            }
            JT_CHECK_EQ(jet_call_error_code(call), ECANCELED);
            jet_call_destroy(call);
            check_still_serving(ch);
            jet_channel_destroy(ch);
        }
    }
}

/* Every call's backup goes out at once: its two answers race (and with
 * them the claims of the two ids) on one or two connections. Each call
 * ends exactly once, with its own message. */
typedef struct racer {
    jet_call_t *call;
    char msg[32];
    _Atomic int *ended;
    _Atomic int ends;
} racer_t;

static void racer_done(jet_call_t *call, void *arg)
{
    racer_t *r = arg;
    (void)call;
    atomic_fetch_add(&r->ends, 1);
    atomic_fetch_add(r->ended, 1);
}

static void test_racing_answers(void)
{
    enum { DEPTH = 64, ROUNDS = 40 };
    for (int t = JET_CONNECTION_SINGLE; t <= JET_CONNECTION_POOLED; t++) {
        jet_channel_t *ch = open_channel(port, t, 5000, 1, 0);
        JT_REQUIRE(ch);
        static racer_t rs[DEPTH];
        _Atomic int ended = 0;
        int backups = 0, bad = 0;
        for (int round = 0; round < ROUNDS; round++) {
            atomic_store(&ended, 0);
            for (int i = 0; i < DEPTH; i++) {
                racer_t *r = &rs[i];
                if (!r->call) r->call = jet_call_create();
                snprintf(r->msg, sizeof r->msg, "race %d.%d", round, i);
                r->ended = &ended;
                atomic_store(&r->ends, 0);
                JT_CHECK_EQ(jt_echo_call(ch, r->call, r->msg, racer_done, r), 0);
            }
            JT_CHECK(jt_wait_at_least(&ended, DEPTH, GUARD_US));
            for (int i = 0; i < DEPTH; i++) {
                jet_call_join(rs[i].call);
                if (atomic_load(&rs[i].ends) != 1 || !jt_echo_resp_is(rs[i].call, rs[i].msg)) bad++;
                backups += jet_call_has_backup_request(rs[i].call);
            }
        }
        fprintf(stderr, "  %s: %d calls, %d with a backup, %d wrong\n", type_name(t),
                DEPTH * ROUNDS, backups, bad);
        JT_CHECK_EQ(bad, 0);
        JT_CHECK(backups > 0);
        for (int i = 0; i < DEPTH; i++) {
            jet_call_destroy(rs[i].call);
            rs[i].call = NULL;
        }
        jet_channel_destroy(ch);
    }
}

int main(void)
{
    jt_echo_opts_t eo = {.hook = bk_hook};
    jt_echo_service_init(&svc, &eo);
    srv = jt_echo_server_start_port(&svc, 0, NULL, &port);
    if (!srv) return 1;
    JT_RUN(test_backup_answers_first);
    JT_RUN(test_first_answers_after_the_backup_went_out);
    JT_RUN(test_no_backup);
    JT_RUN(test_backup_refused_first_kept);
    JT_RUN(test_backup_connection_fails_first_kept);
    JT_RUN(test_deadline_and_cancel_with_both_out);
    JT_RUN(test_racing_answers);
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jt_server_stop(srv);
    return jt_finish();
}
