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
 *   - a first answer that comes while the backup is being made (a slow
 *     credential for its new connection) is kept and ends the call; the
 *     backup is not sent, and its pooled connection stays for the next;
 *   - a backup whose connection fails with no retry left leaves the call
 *     waiting for the first attempt, which answers;
 *   - a backup that cannot be made (its credential fails) after the first
 *     attempt's answer came: that answer ends the call; with no memory to
 *     keep that answer, the call fails at once with the backup's error;
 *   - a first attempt answered with an error (dropped), then a backup that
 *     fails with no retry left: the call fails at once;
 *   - the same for a first attempt whose write is refused whole while the
 *     backup is being made (the correlation slot drops it);
 *   - a first connection that ends while the backup is being made: the
 *     backup still goes out (and is reported), or the answer that came
 *     just before the end is kept (and the backup not sent);
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
#include "event/loop.h"
#include "rpc/call.h"

#define GUARD_US (20 * 1000000LL)

/* How the hook answers requests whose message starts with "bk": the n-th
 * (from 0; later ones as the last) "first", "second", "third" after
 * after_ms[n] (0: at once), or ELOGOFF then when fail[n]. */
static struct {
    _Atomic int seen;
    int after_ms[3];
    bool fail[3];
} bk;
static _Atomic int bk_failing; /* ELOGOFF answers not sent yet */

static void bk_plan3(int ms0, bool fail0, int ms1, bool fail1, int ms2, bool fail2)
{
    atomic_store(&bk.seen, 0);
    bk.after_ms[0] = ms0;
    bk.after_ms[1] = ms1;
    bk.after_ms[2] = ms2;
    bk.fail[0] = fail0;
    bk.fail[1] = fail1;
    bk.fail[2] = fail2;
}

static void bk_plan(int first_ms, int second_ms, bool second_fails)
{
    bk_plan3(first_ms, false, second_ms, second_fails, second_ms, second_fails);
}

static int fail_code = JET_ELOGOFF; /* what bk's failing answers say */

static void fail_now(Example__EchoResponse_Closure closure, void *closure_data)
{
    jet_call_set_failed(jet_server_call(closure_data), fail_code, "failing (test)");
    closure(NULL, closure_data);
}

typedef struct bk_later {
    int ms;
    Example__EchoResponse_Closure closure;
    void *closure_data;
} bk_later_t;

static void *fail_later_main(void *arg)
{
    bk_later_t *l = arg;
    jt_sleep_us((int64_t)l->ms * 1000);
    fail_now(l->closure, l->closure_data);
    free(l);
    atomic_fetch_sub(&bk_failing, 1);
    return NULL;
}

/* "pair:<key>": the first request of a key is held until the second
 * comes, then answered ELOGOFF just before the second is answered "ok";
 * later ones are answered "ok". */
#define PAIR_KEYS 4096
static struct {
    pthread_mutex_t mu;
    int count[PAIR_KEYS];
    Example__EchoResponse_Closure held[PAIR_KEYS];
    void *held_data[PAIR_KEYS];
} pairs = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool pair_hook(const char *msg, Example__EchoResponse_Closure closure, void *closure_data)
{
    int key = atoi(msg + 5);
    if (key < 0 || key >= PAIR_KEYS) abort();
    pthread_mutex_lock(&pairs.mu);
    int n = pairs.count[key]++;
    Example__EchoResponse_Closure held = pairs.held[key];
    void *held_data = pairs.held_data[key];
    if (n == 0) {
        pairs.held[key] = closure;
        pairs.held_data[key] = closure_data;
    }
    pthread_mutex_unlock(&pairs.mu);
    if (n == 0) return true;
    if (n == 1) fail_now(held, held_data);
    jt_echo_answer("ok", closure, closure_data);
    return true;
}

static bool bk_hook(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                    void *closure_data)
{
    if (strncmp(req->message, "pair:", 5) == 0)
        return pair_hook(req->message, closure, closure_data);
    if (strncmp(req->message, "bk", 2) != 0) return false;
    static const char *const answers[3] = {"first", "second", "third"};
    int n = atomic_fetch_add(&bk.seen, 1);
    int i = n < 3 ? n : 2;
    if (bk.fail[i] && bk.after_ms[i] > 0) {
        bk_later_t *l = malloc(sizeof *l);
        if (!l) abort();
        *l = (bk_later_t){bk.after_ms[i], closure, closure_data};
        atomic_fetch_add(&bk_failing, 1);
        pthread_t th;
        if (pthread_create(&th, NULL, fail_later_main, l) != 0) abort();
        pthread_detach(th);
    } else if (bk.fail[i]) {
        fail_now(closure, closure_data);
    } else if (bk.after_ms[i] > 0) {
        if (!jt_echo_answer_later(bk.after_ms[i], answers[i], closure, closure_data)) abort();
    } else {
        jt_echo_answer(answers[i], closure, closure_data);
    }
    return true;
}

static jt_echo_service_t svc;
static jet_server_t *srv;
static int port;

static jet_channel_t *open_channel_auth(int p, jet_connection_type_t type, int32_t timeout_ms,
                                        int32_t max_retry, int32_t backup_ms,
                                        const jet_authenticator_t *auth)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.connection_type = type;
    o.timeout_ms = timeout_ms;
    o.max_retry = max_retry;
    o.backup_request_ms = backup_ms;
    o.auth = auth;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", p);
    jet_channel_t *ch = NULL;
    return jet_channel_create(addr, &o, &ch) == 0 ? ch : NULL;
}

static jet_channel_t *open_channel(int p, jet_connection_type_t type, int32_t timeout_ms,
                                   int32_t max_retry, int32_t backup_ms)
{
    return open_channel_auth(p, type, timeout_ms, max_retry, backup_ms, NULL);
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
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&bk_failing) == 0, GUARD_US));
    jet_call_t *call = jet_call_create();
    run_call(ch, call, "after", false);
    JT_CHECK(jt_echo_resp_is(call, "after"));
    jet_call_destroy(call);
}

/* The hook's plan for one call: answer n after ms[n], or ELOGOFF then. */
typedef struct plan {
    int ms[3];
    bool fail[3];
} plan_t;

/* Under plan, a call per connection type, sync and async, with a backup
 * after 30 ms: each ends with expect after attempts attempts, all of which
 * reached the server; the channel then serves the next call. */
static void each_type_ends_with(plan_t p, int32_t max_retry, const char *expect, int attempts)
{
    for (int t = JET_CONNECTION_SINGLE; t <= JET_CONNECTION_SHORT; t++) {
        for (int async = 0; async < 2; async++) {
            bk_plan3(p.ms[0], p.fail[0], p.ms[1], p.fail[1], p.ms[2], p.fail[2]);
            jet_channel_t *ch = open_channel(port, t, 5000, max_retry, 30);
            JT_REQUIRE(ch);
            jet_call_t *call = jet_call_create();
            run_call(ch, call, "bk", async);
            fprintf(stderr, "  %s %s: %s after %lld us\n", type_name(t), async ? "async" : "sync",
                    jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "-",
                    (long long)jet_call_latency_us(call));
            JT_CHECK(jt_echo_resp_is(call, expect));
            JT_CHECK_EQ(jet_call_attempts(call), attempts);
            JT_CHECK(jet_call_has_backup_request(call));
            JT_CHECK_EQ(atomic_load(&bk.seen), attempts);
            JT_CHECK(jet_call_latency_us(call) >= 30000);
            jet_call_destroy(call);
            check_still_serving(ch);
            jet_channel_destroy(ch);
        }
    }
}

static void test_backup_answers_first(void)
{
    each_type_ends_with((plan_t){.ms = {600, 0, 0}}, 1, "second", 2);
}

static void test_first_answers_after_the_backup_went_out(void)
{
    each_type_ends_with((plan_t){.ms = {150, 600, 600}}, 2, "first", 2);
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

/* The first attempt is answered ELOGOFF after the backup went out: as in
 * brpc, the call waits for the backup instead of retrying. */
static void test_first_refused_backup_kept(void)
{
    each_type_ends_with((plan_t){.ms = {150, 400, 400}, .fail = {true, false, false}}, 3, "second",
                        2);
}

/* The backup is answered ELOGOFF: it is retried (as any attempt); the first
 * one, still out, would do too, and the retry's answer comes first. */
static void test_backup_refused_retried(void)
{
    each_type_ends_with((plan_t){.ms = {600, 0, 0}, .fail = {false, true, false}}, 3, "third", 3);
}

/* The backup is refused while the first attempt is out, on a channel with
 * a retry backoff: the retry goes at once, the first attempt stays
 * accepted, and its answer (before the retry's) ends the call. */
static void test_backup_refused_no_wait(void)
{
    for (int t = JET_CONNECTION_SINGLE; t <= JET_CONNECTION_SHORT; t++) {
        bk_plan3(150, false, 0, true, 2000, false);
        jet_channel_options_t o;
        jet_channel_options_init(&o);
        o.connection_type = t;
        o.timeout_ms = -1;
        o.max_retry = 2;
        o.backup_request_ms = 30;
        o.retry_backoff_ms = 1000;
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
        jet_channel_t *ch = NULL;
        JT_REQUIRE(jet_channel_create(addr, &o, &ch) == 0);
        jet_call_t *call = jet_call_create();
        run_call(ch, call, "bk", true);
        fprintf(stderr, "  %s: %s after %lld us\n", type_name(t),
                jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "-",
                (long long)jet_call_latency_us(call));
        JT_CHECK(jt_echo_resp_is(call, "first"));
        JT_CHECK_EQ(jet_call_attempts(call), 3);
        jet_call_destroy(call);
        check_still_serving(ch);
        jet_channel_destroy(ch);
    }
}

/* An authenticator whose credential for the backup's new connection (its
 * second credential) takes 400 ms: the first attempt's answer, 100 ms
 * after it, comes while the backup is being made. */
static _Atomic int creds_made;

static int slow_backup_credential(void *arg, uint8_t **data_p, size_t *len_p)
{
    (void)arg;
    if (atomic_fetch_add(&creds_made, 1) == 1) jt_sleep_us(400000);
    *data_p = malloc(4);
    if (!*data_p) return -ENOMEM;
    memcpy(*data_p, "cred", 4);
    *len_p = 4;
    return 0;
}

/* The same, and then the credential fails: the backup cannot go out. */
static int failing_backup_credential(void *arg, uint8_t **data_p, size_t *len_p)
{
    if (atomic_load(&creds_made) == 1) {
        atomic_fetch_add(&creds_made, 1);
        jt_sleep_us(400000);
        return -EACCES;
    }
    return slow_backup_credential(arg, data_p, len_p);
}

/* The pooled channel ch has two connections open: two calls at once open
 * no other one. */
static void check_pool_keeps_two(jet_channel_t *ch)
{
    jet_server_stats_t st0, st1;
    jet_server_get_stats(srv, &st0);
    jet_call_t *calls[2];
    jt_counter_t done = {0};
    for (int i = 0; i < 2; i++) {
        calls[i] = jet_call_create();
        JT_REQUIRE(calls[i]);
        jet_call_set_backup_request_ms(calls[i], -1);
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], "sleep:100", jt_count_done, &done), 0);
    }
    JT_CHECK(jt_counter_wait(&done, 2, GUARD_US));
    jet_server_get_stats(srv, &st1);
    JT_CHECK_EQ(st1.connections_accepted, st0.connections_accepted);
    for (int i = 0; i < 2; i++) {
        JT_CHECK(jt_echo_resp_is(calls[i], "sleep:100"));
        jet_call_destroy(calls[i]);
    }
}

/* The next connection goes to the loop after the first one, where the
 * backup is made for a new call: its answer is read meanwhile. */
static void next_connection_off_loop0(void)
{
    JT_REQUIRE(jet_loops_count() == 2);
    while (jet_loop_pick() != jet_loop_at(0)) {
    }
}

/* A "bk" call on ch whose backup's connection goes to the loop after the
 * first one; what it ended with is printed under the label what. */
static jet_call_t *bk_call_off_loop0(jet_channel_t *ch, bool async, const char *what)
{
    jet_call_t *call = jet_call_create();
    if (!call) abort();
    next_connection_off_loop0();
    run_call(ch, call, "bk", async);
    fprintf(stderr, "  %s%s%s: %s (%d %s) after %lld us\n", what, *what ? " " : "",
            async ? "async" : "sync", jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "-",
            jet_call_error_code(call), jet_call_error_text(call) ? jet_call_error_text(call) : "",
            (long long)jet_call_latency_us(call));
    return call;
}

static void test_first_answer_while_backup_is_made(void)
{
    static const jet_authenticator_t auth = {.generate_credential = slow_backup_credential};
    for (int t = JET_CONNECTION_POOLED; t <= JET_CONNECTION_SHORT; t++) {
        for (int async = 0; async < 2; async++) {
            bk_plan(100, 0, false);
            atomic_store(&creds_made, 0);
            jet_channel_t *ch = open_channel_auth(port, t, 5000, 1, 30, &auth);
            JT_REQUIRE(ch);
            jet_call_t *call = bk_call_off_loop0(ch, async, type_name(t));
            JT_CHECK(jt_echo_resp_is(call, "first"));
            /* The backup was made, not sent: the server ran the request once. */
            JT_CHECK_EQ(jet_call_attempts(call), 1);
            JT_CHECK(!jet_call_has_backup_request(call));
            JT_CHECK(jet_call_latency_us(call) >= 400000);
            JT_CHECK_EQ(atomic_load(&creds_made), 2);
            jet_call_destroy(call);
            check_still_serving(ch);
            JT_CHECK_EQ(atomic_load(&bk.seen), 1);
            if (t == JET_CONNECTION_POOLED) check_pool_keeps_two(ch);
            jet_channel_destroy(ch);
        }
    }
}

/* An error answer to the first attempt (not retriable) comes while the
 * backup is being made: as when the backup is out, that attempt is dropped
 * and the call waits for the backup, which goes out and answers. */
static void test_error_answer_while_backup_is_made(void)
{
    static const jet_authenticator_t auth = {.generate_credential = slow_backup_credential};
    fail_code = JET_EINTERNAL;
    for (int async = 0; async < 2; async++) {
        bk_plan3(100, true, 400, false, 400, false);
        atomic_store(&creds_made, 0);
        jet_channel_t *ch = open_channel_auth(port, JET_CONNECTION_POOLED, 5000, 1, 30, &auth);
        JT_REQUIRE(ch);
        jet_call_t *call = bk_call_off_loop0(ch, async, "");
        JT_CHECK(jt_echo_resp_is(call, "second"));
        JT_CHECK_EQ(jet_call_attempts(call), 2);
        JT_CHECK(jet_call_has_backup_request(call));
        jet_call_destroy(call);
        JT_CHECK(JT_WAIT_UNTIL(atomic_load(&bk_failing) == 0, GUARD_US));
        check_still_serving(ch);
        JT_CHECK_EQ(atomic_load(&bk.seen), 2);
        /* The first connection owes nothing after its error answer: both
         * stay in the pool. */
        check_pool_keeps_two(ch);
        jet_channel_destroy(ch);
    }
    fail_code = JET_ELOGOFF;
}

/* Allocation failures: this test's link wraps malloc (test/CMakeLists.txt).
 * While fail_size is set, the next malloc of that size made on an event
 * loop's thread fails, once. The size is that of the channel's record of a
 * parked answer (the four fields below): a change of that record makes the
 * case that uses it fail, not pass. */
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
static _Atomic size_t fail_size;
static _Atomic int fails_left;

void *__wrap_malloc(size_t n)
{
    if (atomic_load_explicit(&fail_size, memory_order_relaxed) == n &&
        (jet_loop_in_thread(jet_loop_at(0)) || jet_loop_in_thread(jet_loop_at(1)))) {
        int left = atomic_load(&fails_left);
        while (left > 0)
            if (atomic_compare_exchange_weak(&fails_left, &left, left - 1)) return NULL;
    }
    return __real_malloc(n);
}

typedef struct parked_record {
    void *drop, *socket;
    uint64_t cid;
    jet_iobuf_t frame;
} parked_record_t;

/* The backup cannot be made (its credential fails) after the first
 * attempt's answer came: with no retry left, the call goes back to its
 * first attempt, whose kept answer ends it. With lose_answer there is no
 * memory to keep that answer: the attempt ends as an error answer would,
 * and the call fails at once with the backup's error, instead of waiting
 * to its deadline for an answer that is gone. */
static void backup_not_made(bool lose_answer)
{
    static const jet_authenticator_t auth = {.generate_credential = failing_backup_credential};
    for (int async = 0; async < 2; async++) {
        bk_plan(100, 0, false);
        atomic_store(&creds_made, 0);
        jet_channel_t *ch = open_channel_auth(port, JET_CONNECTION_POOLED, 3000, 1, 30, &auth);
        JT_REQUIRE(ch);
        if (lose_answer) {
            atomic_store(&fails_left, 1);
            atomic_store(&fail_size, sizeof(parked_record_t));
        }
        jet_call_t *call = bk_call_off_loop0(ch, async, "");
        if (lose_answer) {
            atomic_store(&fail_size, 0);
            JT_CHECK_EQ(atomic_load(&fails_left), 0);
            JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCAUTH);
        } else {
            JT_CHECK(jt_echo_resp_is(call, "first"));
            JT_CHECK_EQ(jet_call_attempts(call), 2);
        }
        JT_CHECK(jet_call_latency_us(call) >= 400000 && jet_call_latency_us(call) < 2000000);
        JT_CHECK_EQ(atomic_load(&creds_made), 2);
        jet_call_destroy(call);
        check_still_serving(ch);
        JT_CHECK_EQ(atomic_load(&bk.seen), 1);
        jet_channel_destroy(ch);
    }
}

static void test_backup_not_made_first_answer_kept(void)
{
    backup_not_made(false);
}

static void test_answer_lost_for_want_of_memory(void)
{
    backup_not_made(true);
}

/* A raw server for pooled connections: once the second connection (the
 * backup's) brought its request, the first one is closed, and the backup
 * answered "second" 300 ms later; with close_backup, the backup's is
 * closed, and the first answered "first" 300 ms later. */
typedef struct raw_srv {
    pthread_t t;
    int lfd, port;
    bool close_backup;
    bool answer_first; /* raw_first_dies_main */
    bool ok;
} raw_srv_t;

/* Writes the echo answer msg to the request req on c. */
static bool raw_answer(jt_conn_t *c, const jet_baidu_frame_t *req, const char *msg)
{
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = (char *)msg;
    uint8_t body[64];
    size_t mlen = example__echo_response__pack(&resp, body);
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    meta.response = &rm;
    meta.has_correlation_id = true;
    meta.correlation_id = req->meta->correlation_id;
    jt_bytes_t out = {0};
    jt_bytes_frame(&out, &meta, body, mlen, NULL, 0);
    bool ok = jt_conn_write(c, out.p, out.len) == 0;
    free(out.p);
    return ok;
}

/* The next connection on lfd into c, and its first request into f: 1, or
 * 0 (no request), or -1 (no connection: c stays closed). */
static int raw_take(int lfd, jt_conn_t *c, jet_baidu_frame_t *f)
{
    int fd = jt_tcp_accept(lfd, 5000);
    if (fd < 0) return -1;
    jt_conn_init(c, fd);
    return jt_conn_frame(c, 5000, f, NULL, NULL) == 1 ? 1 : 0;
}

static void *raw_srv_main(void *arg)
{
    raw_srv_t *r = arg;
    jt_conn_t a = {.fd = -1}, b = {.fd = -1};
    jet_baidu_frame_t fa, fb;
    jet__baidu_frame_init(&fa);
    jet__baidu_frame_init(&fb);
    if (raw_take(r->lfd, &a, &fa) != 1) goto out;
    int got = raw_take(r->lfd, &b, &fb);
    if (got < 0) goto out;
    jt_conn_t *dead = r->close_backup ? &b : &a, *live = r->close_backup ? &a : &b;
    jet_baidu_frame_t *req = r->close_backup ? &fa : &fb;
    jt_conn_close(dead);
    if (got != 1) goto out;
    jt_sleep_us(300000);
    r->ok = raw_answer(live, req, r->close_backup ? "first" : "second");
    jt_conn_wait_closed(live, 5000);
out:
    jt_conn_close(&b);
    jt_conn_close(&a);
    jet__baidu_frame_fini(&fa);
    jet__baidu_frame_fini(&fb);
    return NULL;
}

static void test_first_connection_fails_backup_kept(void)
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
        JT_CHECK(jt_echo_resp_is(call, "second"));
        JT_CHECK_EQ(jet_call_attempts(call), 2);
        JT_CHECK(jet_call_has_backup_request(call));
        jet_call_destroy(call);
        jet_channel_destroy(ch);
        pthread_join(r.t, NULL);
        JT_CHECK(r.ok);
        close(r.lfd);
    }
}

/* A raw server whose first connection ends 100 ms after its request came
 * (answered "first" just before with answer_first), while the client makes
 * the backup (a slow credential); the backup is answered "second" (with
 * answer_first, ok means it never came). */
static void *raw_first_dies_main(void *arg)
{
    raw_srv_t *r = arg;
    jt_conn_t a = {.fd = -1}, b = {.fd = -1};
    jet_baidu_frame_t fa, fb;
    jet__baidu_frame_init(&fa);
    jet__baidu_frame_init(&fb);
    if (raw_take(r->lfd, &a, &fa) != 1) goto out;
    jt_sleep_us(100000);
    if (r->answer_first && !raw_answer(&a, &fa, "first")) goto out;
    jt_conn_close(&a);
    if (r->answer_first) {
        /* The backup is made but not sent: its connection brings nothing
         * until the channel ends. */
        r->ok = raw_take(r->lfd, &b, &fb) == 0;
        goto out;
    }
    if (raw_take(r->lfd, &b, &fb) != 1) goto out;
    r->ok = raw_answer(&b, &fb, "second");
    jt_conn_wait_closed(&b, 5000);
out:
    jt_conn_close(&b);
    jt_conn_close(&a);
    jet__baidu_frame_fini(&fa);
    jet__baidu_frame_fini(&fb);
    return NULL;
}

/* A raw server: once the backup's request came, the first one is answered
 * with an error (which the call drops, waiting for the backup), then the
 * backup's connection is closed. */
static void *raw_first_error_main(void *arg)
{
    raw_srv_t *r = arg;
    jt_conn_t a = {.fd = -1}, b = {.fd = -1};
    jet_baidu_frame_t fa, fb;
    jet__baidu_frame_init(&fa);
    jet__baidu_frame_init(&fb);
    if (raw_take(r->lfd, &a, &fa) != 1 || raw_take(r->lfd, &b, &fb) != 1) goto out;
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    rm.has_error_code = true;
    rm.error_code = JET_EINTERNAL;
    rm.error_text = "first fails";
    meta.response = &rm;
    meta.has_correlation_id = true;
    meta.correlation_id = fa.meta->correlation_id;
    jt_bytes_t out = {0};
    jt_bytes_frame(&out, &meta, NULL, 0, NULL, 0);
    r->ok = jt_conn_write(&a, out.p, out.len) == 0;
    free(out.p);
    jt_sleep_us(100000);
    jt_conn_close(&b);
    jt_conn_wait_closed(&a, 8000);
out:
    jt_conn_close(&b);
    jt_conn_close(&a);
    jet__baidu_frame_fini(&fa);
    jet__baidu_frame_fini(&fb);
    return NULL;
}

/* The first attempt was answered with an error (dropped), then the backup
 * fails with no retry left: the call fails at once with the backup's
 * error; it does not wait for the dropped attempt. */
static void test_first_dropped_then_backup_fails(void)
{
    for (int async = 0; async < 2; async++) {
        raw_srv_t r = {0};
        r.lfd = jt_tcp_listen(8, &r.port);
        JT_REQUIRE(r.lfd >= 0);
        JT_REQUIRE(pthread_create(&r.t, NULL, raw_first_error_main, &r) == 0);
        jet_channel_t *ch = open_channel(r.port, JET_CONNECTION_POOLED, 5000, 1, 30);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        run_call(ch, call, "bk", async);
        fprintf(stderr, "  %s: %d %s after %lld us\n", async ? "async" : "sync",
                jet_call_error_code(call),
                jet_call_error_text(call) ? jet_call_error_text(call) : "",
                (long long)jet_call_latency_us(call));
        JT_CHECK_EQ(jet_call_error_code(call), JET_EEOF);
        JT_CHECK(jet_call_latency_us(call) < 2000000);
        jet_call_destroy(call);
        jet_channel_destroy(ch);
        pthread_join(r.t, NULL);
        JT_CHECK(r.ok);
        close(r.lfd);
    }
}

/* The first attempt's connection ends while the backup is being made: the
 * backup goes out all the same (and says so), and ends the call; or the
 * answer that came just before the end does, and the backup is not sent. */
static void test_first_dies_while_backup_is_made(void)
{
    static const jet_authenticator_t auth = {.generate_credential = slow_backup_credential};
    for (int answer_first = 0; answer_first < 2; answer_first++) {
        for (int async = 0; async < 2; async++) {
            raw_srv_t r = {.answer_first = answer_first};
            r.lfd = jt_tcp_listen(8, &r.port);
            JT_REQUIRE(r.lfd >= 0);
            JT_REQUIRE(pthread_create(&r.t, NULL, raw_first_dies_main, &r) == 0);
            atomic_store(&creds_made, 0);
            jet_channel_t *ch =
                open_channel_auth(r.port, JET_CONNECTION_POOLED, 5000, 1, 30, &auth);
            JT_REQUIRE(ch);
            jet_call_t *call =
                bk_call_off_loop0(ch, async, answer_first ? "answered, then closed" : "closed");
            JT_CHECK(jt_echo_resp_is(call, answer_first ? "first" : "second"));
            /* Answered, the backup is made but not sent. */
            JT_CHECK_EQ(jet_call_attempts(call), answer_first ? 1 : 2);
            JT_CHECK_EQ(jet_call_has_backup_request(call), !answer_first);
            JT_CHECK(jet_call_latency_us(call) >= 400000);
            jet_call_destroy(call);
            jet_channel_destroy(ch);
            pthread_join(r.t, NULL);
            JT_CHECK(r.ok);
            close(r.lfd);
        }
    }
}

/* The backup's connection fails and no retry is left: the call waits for
 * the first attempt, still out, and gets its answer. */
static void test_backup_connection_fails_first_kept(void)
{
    for (int async = 0; async < 2; async++) {
        raw_srv_t r = {.close_backup = true};
        r.lfd = jt_tcp_listen(8, &r.port);
        JT_REQUIRE(r.lfd >= 0);
        JT_REQUIRE(pthread_create(&r.t, NULL, raw_srv_main, &r) == 0);
        jet_channel_t *ch = open_channel(r.port, JET_CONNECTION_POOLED, 5000, 1, 30);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        run_call(ch, call, "bk", async);
        fprintf(stderr, "  %s: %s (%d %s) after %lld us\n", async ? "async" : "sync",
                jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "-",
                jet_call_error_code(call),
                jet_call_error_text(call) ? jet_call_error_text(call) : "",
                (long long)jet_call_latency_us(call));
        JT_CHECK(jt_echo_resp_is(call, "first"));
        JT_CHECK_EQ(jet_call_attempts(call), 2);
        JT_CHECK(jet_call_has_backup_request(call));
        JT_CHECK(jet_call_latency_us(call) >= 300000);
        jet_call_destroy(call);
        jet_channel_destroy(ch);
        pthread_join(r.t, NULL);
        JT_CHECK(r.ok);
        close(r.lfd);
    }
}

/* A parked answer that counts its drops. */
typedef struct counted_parked {
    jet_cid_parked_t head;
    int drops;
} counted_parked_t;

static void counted_drop(jet_cid_parked_t *p)
{
    ((counted_parked_t *)p)->drops++;
}

/* The correlation slot of a call whose backup is being made (its first
 * attempt, written on connection 7, held): a failure of that connection,
 * or an error answer, leaves the attempt held (an answer may be kept for
 * the hold's end), and so does a refusal of a write from another
 * connection; its own write refused whole (nothing went out, no answer can
 * come) drops it at once, with what was parked: the backup that fails next
 * does not wait for it, and the backup's own version stays accepted. */
static void test_held_attempt_refused_unsent(void)
{
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    uint64_t cid;
    JT_REQUIRE(jet__cid_alloc(call, &cid) == 0);
    jet__cid_set_owner(cid, 7);
    uint64_t got = 0, next = 0, n2;
    bool live, dropped;
    JT_REQUIRE(jet__cid_claim_issue(atomic_load(&call->join_token), true, true, &got, &next,
                                    &live) == call);
    JT_CHECK_EQ(got, cid);
    JT_CHECK(jet__cid_held(next, cid));
    JT_CHECK(!jet__cid_answer_kept(next, cid));
    counted_parked_t p = {.head.drop = counted_drop};
    JT_CHECK_EQ(jet__cid_park(cid, 8, &p.head), JET_CID_STALE); /* another connection's */
    JT_CHECK_EQ(jet__cid_park(cid, 7, &p.head), JET_CID_PARKED);
    JT_CHECK(jet__cid_answer_kept(next, cid));
    JT_CHECK(jet__cid_fail_from(cid, 7, false, &n2, &dropped) == NULL && !dropped);
    JT_CHECK(jet__cid_fail_from(cid, 8, true, &n2, &dropped) == NULL && !dropped);
    JT_CHECK(jet__cid_answer_kept(next, cid));
    JT_CHECK_EQ(p.drops, 0);
    JT_CHECK(jet__cid_fail_from(cid, 7, true, &n2, &dropped) == NULL && dropped);
    JT_CHECK(!jet__cid_held(next, cid));
    JT_CHECK(!jet__cid_answer_kept(next, cid));
    JT_CHECK_EQ(p.drops, 1);
    jet_cid_parked_t *parked = NULL;
    JT_CHECK(!jet__cid_reinstate(next, cid, &parked) && !parked);
    JT_CHECK(!jet__cid_set_alt(next, cid, 7, &parked) && !parked);
    JT_CHECK(jet__cid_claim(cid, NULL) == NULL);
    JT_CHECK(jet__cid_claim(next, NULL) == call);
    jet__cid_free(call->slot);
    JT_CHECK_EQ(p.drops, 1);
    jet_call_destroy(call);
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

/* Every call's backup is due at once (often before its first attempt is
 * out: it is sent once it is); the server fails the first request of each
 * pair just before it answers the other: a failure of one attempt racing
 * the other's answer. Every call ends once, with "ok". */
static void test_failure_races_the_other_answer(void)
{
    enum { DEPTH = 32, ROUNDS = 20 };
    int key = 0;
    for (int t = JET_CONNECTION_SINGLE; t <= JET_CONNECTION_SHORT; t++) {
        jet_channel_t *ch = open_channel(port, t, 5000, 3, 0);
        JT_REQUIRE(ch);
        static racer_t rs[DEPTH];
        _Atomic int ended = 0;
        int bad = 0;
        for (int round = 0; round < ROUNDS; round++) {
            atomic_store(&ended, 0);
            for (int i = 0; i < DEPTH; i++) {
                racer_t *r = &rs[i];
                if (!r->call) r->call = jet_call_create();
                snprintf(r->msg, sizeof r->msg, "pair:%d", key++);
                r->ended = &ended;
                atomic_store(&r->ends, 0);
                JT_CHECK_EQ(jt_echo_call(ch, r->call, r->msg, racer_done, r), 0);
            }
            JT_CHECK(jt_wait_at_least(&ended, DEPTH, GUARD_US));
            for (int i = 0; i < DEPTH; i++) {
                jet_call_join(rs[i].call);
                if (atomic_load(&rs[i].ends) != 1 || !jt_echo_resp_is(rs[i].call, "ok")) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s: %s ended %d times: %d %s\n", type_name(t), rs[i].msg,
                                atomic_load(&rs[i].ends), jet_call_error_code(rs[i].call),
                                jet_call_error_text(rs[i].call) ? jet_call_error_text(rs[i].call)
                                                                : "");
                }
            }
        }
        /* A first request whose backup never came is still held: answered
         * now, so that a failure here does not hold the server's stop. */
        pthread_mutex_lock(&pairs.mu);
        for (int k = 0; k < key; k++) {
            if (pairs.count[k] != 1) continue;
            pairs.count[k]++;
            jt_echo_answer("late", pairs.held[k], pairs.held_data[k]);
            bad++;
        }
        pthread_mutex_unlock(&pairs.mu);
        fprintf(stderr, "  %s: %d calls, %d wrong\n", type_name(t), DEPTH * ROUNDS, bad);
        JT_CHECK_EQ(bad, 0);
        for (int i = 0; i < DEPTH; i++) {
            jet_call_destroy(rs[i].call);
            rs[i].call = NULL;
        }
        jet_channel_destroy(ch);
    }
}

int main(void)
{
    /* Two loops, whatever the machine: test_first_answer_while_backup_is_made
     * puts the first connection on the other loop than the backup's. */
    if (jet_loops_start(2) < 0) return 1;
    jt_echo_opts_t eo = {.hook = bk_hook};
    jt_echo_service_init(&svc, &eo);
    srv = jt_echo_server_start_port(&svc, 0, NULL, &port);
    if (!srv) return 1;
    JT_RUN(test_backup_answers_first);
    JT_RUN(test_first_answers_after_the_backup_went_out);
    JT_RUN(test_no_backup);
    JT_RUN(test_first_refused_backup_kept);
    JT_RUN(test_backup_refused_retried);
    JT_RUN(test_backup_refused_no_wait);
    JT_RUN(test_first_connection_fails_backup_kept);
    JT_RUN(test_first_answer_while_backup_is_made);
    JT_RUN(test_backup_connection_fails_first_kept);
    JT_RUN(test_first_dies_while_backup_is_made);
    JT_RUN(test_backup_not_made_first_answer_kept);
    JT_RUN(test_answer_lost_for_want_of_memory);
    JT_RUN(test_first_dropped_then_backup_fails);
    JT_RUN(test_held_attempt_refused_unsent);
    JT_RUN(test_error_answer_while_backup_is_made);
    JT_RUN(test_deadline_and_cancel_with_both_out);
    JT_RUN(test_racing_answers);
    JT_RUN(test_failure_races_the_other_answer);
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jt_server_stop(srv);
    return jt_finish();
}
