/* Retry backoff (channel options retry_backoff_ms / retry_backoff_max_ms):
 *   - against a port nobody listens on, the retries are spaced by at least
 *     the backoff (fixed, or a random time in the range), synchronous and
 *     not, and the call ends with the connection's error after them all;
 *   - a wait that would reach the deadline is skipped: the call still makes
 *     all its attempts and ends before its deadline;
 *   - a server that comes up during the waits gets the call;
 *   - a cancel during a wait ends the call with ECANCELED at once (well
 *     before the wait would have ended);
 *   - destroying the channel during a wait ends the call with ECLOSE at
 *     once;
 *   - a backup request due during a wait sends that retry at once.
 * Elapsed times are checked from below (a wait never ends early), and from
 * above only where a wait is cut short, with seconds of margin. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jetrpc/jetrpc.h>

#include "testutil.h"
#include "testutil_net.h"
#include "testutil_rpc.h"

#define GUARD_US (20 * 1000000LL)

static jet_channel_t *open_channel(int port, int32_t timeout_ms, int32_t retries, int32_t backoff,
                                   int32_t backoff_max)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.timeout_ms = timeout_ms;
    o.max_retry = retries;
    o.retry_backoff_ms = backoff;
    o.retry_backoff_max_ms = backoff_max;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    return jet_channel_create(addr, &o, &ch) == 0 ? ch : NULL;
}

/* Records the thread the done callback ran on. */
typedef struct done_on {
    jt_counter_t n;
    pthread_t thread;
} done_on_t;

static void done_record(jet_call_t *call, void *arg)
{
    done_on_t *d = arg;
    d->thread = pthread_self();
    jt_count_done(call, &d->n);
}

/* Ends call (sync or async) and returns how long it took, in ms; the
 * thread its done ran on goes to *thread_p (async) when given. */
static int64_t timed_call_on(jet_channel_t *ch, jet_call_t *call, bool async, pthread_t *thread_p)
{
    done_on_t done = {0};
    uint64_t t0 = jt_now_us();
    JT_CHECK_EQ(jt_echo_call(ch, call, "x", async ? done_record : NULL, async ? &done : NULL), 0);
    if (async) JT_CHECK(jt_counter_wait(&done.n, 1, GUARD_US));
    if (async && thread_p) *thread_p = done.thread;
    return (int64_t)(jt_now_us() - t0) / 1000;
}

static int64_t timed_call(jet_channel_t *ch, jet_call_t *call, bool async)
{
    return timed_call_on(ch, call, async, NULL);
}

static void test_spaced_retries(void)
{
    int port = jt_tcp_free_port();
    JT_REQUIRE(port > 0);
    for (int async = 0; async < 2; async++) {
        for (int jitter = 0; jitter < 2; jitter++) {
            jet_channel_t *ch = open_channel(port, 5000, 3, 40, jitter ? 80 : 0);
            JT_REQUIRE(ch);
            jet_call_t *call = jet_call_create();
            int64_t ms = timed_call(ch, call, async);
            fprintf(stderr, "  %s, %s: %lld ms\n", async ? "async" : "sync",
                    jitter ? "40-80 ms" : "40 ms", (long long)ms);
            JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
            JT_CHECK_EQ(jet_call_attempts(call), 4);
            JT_CHECK(ms >= 3 * 40);
            jet_call_destroy(call);
            jet_channel_destroy(ch);
        }
    }
}

/* A wait past the deadline is not taken: 4 attempts, ended before it. */
static void test_no_wait_past_the_deadline(void)
{
    int port = jt_tcp_free_port();
    JT_REQUIRE(port > 0);
    jet_channel_t *ch = open_channel(port, 400, 3, 300, 0);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    int64_t ms = timed_call(ch, call, false);
    JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
    JT_CHECK_EQ(jet_call_attempts(call), 4);
    JT_CHECK(ms >= 300); /* the one wait that fits */
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

typedef struct late_server {
    pthread_t t;
    int port;
    int delay_ms;
    jt_echo_service_t svc;
    jet_server_t *srv;
} late_server_t;

static void *late_server_main(void *arg)
{
    late_server_t *l = arg;
    jt_sleep_us((int64_t)l->delay_ms * 1000);
    l->srv = jt_echo_server_start_port(&l->svc, l->port, NULL, NULL);
    return NULL;
}

/* The server comes up 150 ms after the first attempt: four retries 100 ms
 * apart reach it, where four at once would all be refused. */
static void test_rides_out_a_restart(void)
{
    late_server_t l = {.port = jt_tcp_free_port(), .delay_ms = 150};
    JT_REQUIRE(l.port > 0);
    jt_echo_service_init(&l.svc, NULL);
    jet_channel_t *ch = open_channel(l.port, 5000, 4, 100, 0);
    JT_REQUIRE(ch);
    JT_REQUIRE(pthread_create(&l.t, NULL, late_server_main, &l) == 0);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, call, "back", NULL, NULL), 0);
    pthread_join(l.t, NULL);
    JT_REQUIRE(l.srv);
    JT_CHECK(jt_echo_resp_is(call, "back"));
    JT_CHECK(jet_call_attempts(call) >= 2);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(l.srv);
}

typedef struct canceller {
    pthread_t t;
    uint64_t id;
    int rc;
} canceller_t;

static void *canceller_main(void *arg)
{
    canceller_t *c = arg;
    jt_sleep_us(50000);
    c->rc = jet_call_cancel(c->id);
    return NULL;
}

/* Cancelled 50 ms into a 6 s wait: ECANCELED then, no further attempt. */
static void test_cancel_during_a_wait(void)
{
    int port = jt_tcp_free_port();
    JT_REQUIRE(port > 0);
    for (int async = 0; async < 2; async++) {
        jet_channel_t *ch = open_channel(port, 20000, 3, 6000, 0);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        canceller_t c = {.id = jet_call_id(call), .rc = 1};
        JT_REQUIRE(c.id != 0);
        JT_REQUIRE(pthread_create(&c.t, NULL, canceller_main, &c) == 0);
        int64_t ms = timed_call(ch, call, async);
        pthread_join(c.t, NULL);
        fprintf(stderr, "  %s: cancelled after %lld ms\n", async ? "async" : "sync", (long long)ms);
        JT_CHECK_EQ(c.rc, 0);
        JT_CHECK_EQ(jet_call_error_code(call), ECANCELED);
        JT_CHECK_EQ(jet_call_attempts(call), 1);
        JT_CHECK(ms < 3000);
        /* The call is its owner's again: reissued, it waits anew. */
        c.id = jet_call_id(call);
        JT_REQUIRE(c.id != 0);
        JT_REQUIRE(pthread_create(&c.t, NULL, canceller_main, &c) == 0);
        timed_call(ch, call, async);
        pthread_join(c.t, NULL);
        JT_CHECK_EQ(jet_call_error_code(call), ECANCELED);
        jet_call_destroy(call);
        jet_channel_destroy(ch);
    }
}

typedef struct destroyer {
    pthread_t t;
    jet_channel_t *ch;
} destroyer_t;

static void *destroyer_main(void *arg)
{
    destroyer_t *d = arg;
    jt_sleep_us(50000);
    jet_channel_destroy(d->ch);
    return NULL;
}

/* The channel destroyed 50 ms into a 6 s wait: ECLOSE then. An
 * asynchronous call's done runs on a loop thread, not on the destroying
 * one, which may hold a lock that done takes (it ran there before). */
static void test_destroy_during_a_wait(void)
{
    int port = jt_tcp_free_port();
    JT_REQUIRE(port > 0);
    for (int async = 0; async < 2; async++) {
        destroyer_t d = {.ch = open_channel(port, 20000, 3, 6000, 0)};
        JT_REQUIRE(d.ch);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(pthread_create(&d.t, NULL, destroyer_main, &d) == 0);
        pthread_t done_thread = pthread_self();
        int64_t ms = timed_call_on(d.ch, call, async, &done_thread);
        pthread_join(d.t, NULL);
        if (async) {
            JT_CHECK(!pthread_equal(done_thread, d.t));
            JT_CHECK(!pthread_equal(done_thread, pthread_self()));
        }
        fprintf(stderr, "  %s: ended after %lld ms\n", async ? "async" : "sync", (long long)ms);
        JT_CHECK_EQ(jet_call_error_code(call), JET_ECLOSE);
        JT_CHECK_EQ(jet_call_attempts(call), 1);
        JT_CHECK(ms < 3000);
        jet_call_destroy(call);
    }
}

/* Refused at once, then a 2 s wait that a backup request due at 100 ms
 * cuts short: the second attempt goes then, the third after a whole wait. */
static void test_backup_cuts_a_wait(void)
{
    int port = jt_tcp_free_port();
    JT_REQUIRE(port > 0);
    for (int async = 0; async < 2; async++) {
        jet_channel_t *ch = open_channel(port, 20000, 2, 2000, 0);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        jet_call_set_backup_request_ms(call, 100);
        int64_t ms = timed_call(ch, call, async);
        fprintf(stderr, "  %s: %lld ms\n", async ? "async" : "sync", (long long)ms);
        JT_CHECK_EQ(jet_call_error_code(call), ECONNREFUSED);
        JT_CHECK_EQ(jet_call_attempts(call), 3);
        JT_CHECK(ms >= 2000);
        JT_CHECK(ms < 3800);
        jet_call_destroy(call);
        jet_channel_destroy(ch);
    }
}

/* A synchronous call made in a done callback that runs on the deadline
 * thread (its call timed out) cannot wait for that thread's timers: it
 * retries at once, and ends. */
typedef struct inner {
    int port;
    _Atomic int done;
    int code, attempts;
    int64_t took_ms;
} inner_t;

static void on_timeout_done(jet_call_t *outer, void *arg)
{
    inner_t *in = arg;
    (void)outer;
    jet_channel_t *ch = open_channel(in->port, 300, 3, 40, 0);
    jet_call_t *call = jet_call_create();
    if (ch && call) {
        in->took_ms = timed_call(ch, call, false);
        in->code = jet_call_error_code(call);
        in->attempts = jet_call_attempts(call);
    }
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    atomic_store(&in->done, 1);
}

static void test_sync_call_on_the_deadline_thread(void)
{
    jt_echo_service_t svc;
    jt_echo_opts_t eo = {.sleep_async = true};
    jt_echo_service_init(&svc, &eo);
    int sport;
    jet_server_t *srv = jt_echo_server_start_port(&svc, 0, NULL, &sport);
    JT_REQUIRE(srv);
    inner_t in = {.port = jt_tcp_free_port()};
    JT_REQUIRE(in.port > 0);
    jet_channel_t *ch = open_channel(sport, 50, 0, 0, 0);
    JT_REQUIRE(ch);
    jet_call_t *outer = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, outer, "sleep:500", on_timeout_done, &in), 0);
    JT_CHECK(jt_wait_at_least(&in.done, 1, GUARD_US));
    jet_call_join(outer);
    JT_CHECK_EQ(jet_call_error_code(outer), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(in.code, ECONNREFUSED);
    JT_CHECK_EQ(in.attempts, 4);
    fprintf(stderr, "  the inner call ended in %lld ms\n", (long long)in.took_ms);
    jet_call_destroy(outer);
    jet_channel_destroy(ch);
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jt_server_stop(srv);
}

/* A synchronous call made in a done callback (on a loop thread) waits
 * between retries when the main thread destroys its channel: it ends with
 * ECLOSE at once. Ending it was posted to any loop, the caller's own too,
 * whose thread is blocked in that very call: it hung until the process
 * ended. Trials whose connection landed on the caller's loop end with
 * EDEADLK at once and are not counted. */
typedef struct loop_caller {
    int port;
    jet_channel_t *_Atomic ch;
    _Atomic int phase; /* 1: about to call, 2: returned */
    int code;
} loop_caller_t;

static void loop_caller_done(jet_call_t *outer, void *arg)
{
    (void)outer;
    loop_caller_t *lc = arg;
    jet_channel_t *ch = open_channel(lc->port, 20000, 3, 6000, 0);
    if (!ch) abort();
    atomic_store(&lc->ch, ch);
    atomic_store(&lc->phase, 1);
    jet_call_t *call = jet_call_create();
    if (!call) abort();
    jt_echo_call(ch, call, "x", NULL, NULL);
    lc->code = jet_call_error_code(call);
    jet_call_destroy(call);
    atomic_store(&lc->phase, 2);
}

static void test_destroy_while_a_loop_thread_waits(void)
{
    jt_echo_service_t svc;
    jt_echo_service_init(&svc, NULL);
    int sport = 0;
    jet_server_t *srv = jt_echo_server_start_port(&svc, 0, NULL, &sport);
    JT_REQUIRE(srv);
    jet_channel_t *a = jt_channel_open_port(sport, JET_CONNECTION_SINGLE, 5000, 0);
    JT_REQUIRE(a);
    int waited = 0;
    for (int trial = 0; trial < 12 && waited < 3; trial++) {
        loop_caller_t lc = {.port = jt_tcp_free_port()};
        JT_REQUIRE(lc.port > 0);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_CHECK_EQ(jt_echo_call(a, call, "hi", loop_caller_done, &lc), 0);
        JT_REQUIRE(JT_WAIT_UNTIL(atomic_load(&lc.phase) != 0, GUARD_US));
        jt_sleep_us(100000); /* into the 6 s wait, unless EDEADLK ended it */
        bool in_wait = atomic_load(&lc.phase) == 1;
        jet_channel_destroy(atomic_load(&lc.ch));
        if (!JT_WAIT_UNTIL(atomic_load(&lc.phase) == 2, 5000000)) {
            JT_CHECK(!"the call did not end within 5 s of the destroy");
            return; /* the loop is stuck: everything is left as it is */
        }
        jet_call_join(call);
        jet_call_destroy(call);
        if (!in_wait) continue;
        waited++;
        JT_CHECK_EQ(lc.code, JET_ECLOSE);
    }
    fprintf(stderr, "  %d calls destroyed in their wait\n", waited);
    JT_CHECK(waited > 0);
    jet_channel_destroy(a);
    jt_server_stop(srv);
}

int main(void)
{
    JT_RUN(test_spaced_retries);
    JT_RUN(test_no_wait_past_the_deadline);
    JT_RUN(test_rides_out_a_restart);
    JT_RUN(test_cancel_during_a_wait);
    JT_RUN(test_destroy_during_a_wait);
    JT_RUN(test_backup_cuts_a_wait);
    JT_RUN(test_sync_call_on_the_deadline_thread);
    JT_RUN(test_destroy_while_a_loop_thread_waits);
    return jt_finish();
}
