/* Cancelling calls (jet_call_id, jet_call_cancel; brpc's call_id() and
 * StartCancel), over TCP with each connection type:
 *   - cancelled before it is issued, a call ends with ECANCELED and sends
 *     nothing, synchronous or not;
 *   - cancelled while its answer is awaited, it ends at once (long before
 *     the answer), the late answer is dropped and the channel goes on;
 *   - a cancel after the call ended, or with the id of an earlier issue of
 *     a slot that another call now uses, is refused (-EINVAL) and touches
 *     nothing; a reserved id goes stale with jet_call_reset/destroy, and a
 *     join of a call that only reserved an id returns at once;
 *   - cancels racing answers end every call exactly once, with its answer or
 *     ECANCELED. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jetrpc/jetrpc.h>

#include "testutil.h"
#include "testutil_rpc.h"

#define GUARD_US (20 * 1000000LL)

static const jet_connection_type_t types[] = {JET_CONNECTION_SINGLE, JET_CONNECTION_POOLED,
                                              JET_CONNECTION_SHORT};
static const char *const type_names[] = {"single", "pooled", "short"};

static jet_server_t *start_server(jt_echo_service_t *svc, int *port)
{
    jt_echo_opts_t o = {.sleep_async = true};
    jt_echo_service_init(svc, &o);
    return jt_echo_server_start_port(svc, 0, NULL, port);
}

static uint64_t server_requests(jet_server_t *srv)
{
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    return st.requests;
}

static bool is_cancelled(const jet_call_t *call)
{
    return jet_call_error_code(call) == ECANCELED &&
           strstr(jet_call_error_text(call), "Canceled") != NULL && !jet_call_response(call);
}

/* brpc's cancel_before_callmethod: the issue ends as it starts, unsent. */
static void test_cancel_before_call(void)
{
    jt_echo_service_t svc;
    int port;
    jet_server_t *srv = start_server(&svc, &port);
    JT_REQUIRE(srv);
    for (int t = 0; t < 3; t++) {
        for (int async = 0; async < 2; async++) {
            jet_channel_t *ch = jt_channel_open_port(port, types[t], 2000, -1);
            JT_REQUIRE(ch);
            jet_call_t *call = jet_call_create();
            uint64_t id = jet_call_id(call);
            JT_CHECK(id != 0);
            JT_CHECK_EQ(jet_call_id(call), id); /* the same until issued */
            JT_CHECK_EQ(jet_call_cancel(id), 0);
            uint64_t before = server_requests(srv);
            jt_counter_t done = {0};
            JT_CHECK_EQ(
                jt_echo_call(ch, call, "hello", async ? jt_count_done : NULL, async ? &done : NULL),
                0);
            if (async) JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
            JT_CHECK_AT(type_names[t], is_cancelled(call));
            JT_CHECK_EQ(jet_call_attempts(call), 0);
            /* Ended: its id is stale, and the call works again. */
            JT_CHECK_EQ(jet_call_cancel(id), -EINVAL);
            JT_CHECK_EQ(jt_echo_call(ch, call, "again", NULL, NULL), 0);
            JT_CHECK_AT(type_names[t], jt_echo_resp_is(call, "again"));
            /* Nothing of the cancelled one reached the server. */
            JT_CHECK_EQ(server_requests(srv), before + 1);
            jet_call_destroy(call);
            jet_channel_destroy(ch);
        }
    }
    jt_server_stop(srv);
}

typedef struct canceller {
    pthread_t t;
    uint64_t id;
    jet_server_t *srv;
    uint64_t requests; /* cancels once the server has had this many */
    int rc;
    _Atomic uint64_t at_us; /* when it cancelled */
} canceller_t;

static void *canceller_main(void *arg)
{
    canceller_t *c = arg;
    uint64_t guard = jt_now_us() + GUARD_US;
    while (server_requests(c->srv) < c->requests && jt_now_us() < guard)
        jt_sleep_us(1000);
    atomic_store(&c->at_us, jt_now_us());
    c->rc = jet_call_cancel(c->id);
    return NULL;
}

/* brpc's cancel_during_callmethod: cancelled once its request reached the
 * server, the call ends then, not at the answer (1 s later), which is
 * dropped when it comes. */
static void test_cancel_during_call(void)
{
    jt_echo_service_t svc;
    int port;
    jet_server_t *srv = start_server(&svc, &port);
    JT_REQUIRE(srv);
    for (int t = 0; t < 3; t++) {
        for (int async = 0; async < 2; async++) {
            jet_channel_t *ch = jt_channel_open_port(port, types[t], 5000, -1);
            JT_REQUIRE(ch);
            jet_call_t *call = jet_call_create();
            uint64_t before = server_requests(srv);
            canceller_t c = {.id = jet_call_id(call), .srv = srv, .requests = before + 1, .rc = 1};
            JT_REQUIRE(c.id != 0);
            JT_REQUIRE(pthread_create(&c.t, NULL, canceller_main, &c) == 0);
            jt_counter_t done = {0};
            JT_CHECK_EQ(jt_echo_call(ch, call, "sleep:1000", async ? jt_count_done : NULL,
                                     async ? &done : NULL),
                        0);
            if (async) JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
            uint64_t end = jt_now_us();
            pthread_join(c.t, NULL);
            uint64_t took = end - atomic_load(&c.at_us); /* from the cancel */
            JT_CHECK_EQ(c.rc, 0);
            JT_CHECK_AT(type_names[t], is_cancelled(call));
            JT_CHECK_EQ(jet_call_attempts(call), 1);
            /* Ended by the cancel, not by the answer (1 s after the server
             * had the request, which was before the cancel). */
            JT_CHECK_AT(type_names[t], took < 800000);
            /* The request went out; its answer comes and is dropped, and the
             * channel serves the next call. */
            JT_CHECK_EQ(server_requests(srv), before + 1);
            JT_CHECK(jt_echo_wait_idle(GUARD_US));
            JT_CHECK_EQ(jet_call_cancel(c.id), -EINVAL);
            JT_CHECK_EQ(jt_echo_call(ch, call, "next", NULL, NULL), 0);
            JT_CHECK_AT(type_names[t], jt_echo_resp_is(call, "next"));
            jet_call_destroy(call);
            jet_channel_destroy(ch);
        }
    }
    jt_server_stop(srv);
}

/* brpc's cancel_after_callmethod, and an id whose slot a later call holds:
 * refused, nothing changes. */
static void test_cancel_after_call(void)
{
    jt_echo_service_t svc;
    int port;
    jet_server_t *srv = start_server(&svc, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, -1);
    JT_REQUIRE(ch);
    jet_call_t *a = jet_call_create(), *b = jet_call_create();
    uint64_t id_a = jet_call_id(a);
    JT_CHECK_EQ(jt_echo_call(ch, a, "first", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(a, "first"));
    JT_CHECK_EQ(jet_call_cancel(id_a), -EINVAL);
    JT_CHECK(jt_echo_resp_is(a, "first"));
    /* b takes the slot a gave back: reservations are taken (on spare
     * calls) until one lands on it. Free slots are a stack, but the
     * server's handles share the registry, and a's slot is pushed back by
     * the thread that ended the call, after the wake-up that let a return:
     * it may come back a moment later. */
    enum { MAX_SPARE = 4096 };
    jet_call_t **spare = calloc(MAX_SPARE, sizeof *spare);
    JT_REQUIRE(spare);
    int nspare = 0;
    uint64_t id_b = jet_call_id(b), until = jt_now_us() + GUARD_US;
    while (id_b >> 32 != id_a >> 32 && nspare < MAX_SPARE && jt_now_us() < until) {
        spare[nspare++] = b;
        if (nspare % 64 == 0) jt_sleep_us(1000);
        b = jet_call_create();
        JT_REQUIRE(b);
        id_b = jet_call_id(b);
    }
    bool found = id_b >> 32 == id_a >> 32;
    JT_CHECK(found);
    JT_CHECK(id_b != id_a);
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, b, "sleep:200", jt_count_done, &done), 0);
    JT_CHECK_EQ(jet_call_cancel(id_a), -EINVAL);
    JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
    JT_CHECK(jt_echo_resp_is(b, "sleep:200"));
    JT_CHECK_EQ(jet_call_cancel(0), -EINVAL);
    JT_CHECK_EQ(jet_call_cancel(UINT64_MAX), -EINVAL);
    JT_CHECK_EQ(jet_call_id(NULL), 0);
    jet_call_destroy(a);
    jet_call_destroy(b);
    while (nspare > 0)
        jet_call_destroy(spare[--nspare]);
    free(spare);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* A reserved id goes stale when the call is reset or destroyed; a join of a
 * call that only reserved one does not wait for an issue. */
static void test_reserved_id_released(void)
{
    jet_call_t *call = jet_call_create();
    uint64_t id = jet_call_id(call);
    JT_REQUIRE(id != 0);
    jet_call_join(call); /* returns at once: nothing issued */
    jet_call_reset(call);
    JT_CHECK_EQ(jet_call_cancel(id), -EINVAL);
    uint64_t id2 = jet_call_id(call);
    JT_CHECK(id2 != 0 && id2 != id);
    jet_call_destroy(call);
    JT_CHECK_EQ(jet_call_cancel(id2), -EINVAL);
    /* A cancelled reservation given back leaves no mark on the slot's next
     * call. */
    jt_echo_service_t svc;
    int port;
    jet_server_t *srv = start_server(&svc, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, -1);
    JT_REQUIRE(ch);
    call = jet_call_create();
    id = jet_call_id(call);
    JT_CHECK_EQ(jet_call_cancel(id), 0);
    jet_call_destroy(call);
    call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, call, "fresh", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "fresh"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* Cancels racing answers: every call ends once, answered or cancelled. */
#define RACE_CALLS 3000

typedef struct race {
    jet_call_t *calls[RACE_CALLS];
    uint64_t ids[RACE_CALLS];
    _Atomic int ended[RACE_CALLS];
    _Atomic int issued;
    uint64_t issued_us[RACE_CALLS];
    _Atomic int answered, cancelled, other;
} race_t;

static race_t g_race;

static void race_done(jet_call_t *call, void *arg)
{
    int i = (int)(intptr_t)arg;
    atomic_fetch_add(&g_race.ended[i], 1);
    if (!jet_call_failed(call) && jt_echo_resp_is(call, i % 2 ? "sleep:1" : "race"))
        atomic_fetch_add(&g_race.answered, 1);
    else if (is_cancelled(call))
        atomic_fetch_add(&g_race.cancelled, 1);
    else
        atomic_fetch_add(&g_race.other, 1);
}

static void *race_canceller(void *arg)
{
    (void)arg;
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < RACE_CALLS; i++) {
        while (atomic_load(&g_race.issued) <= i) {
        }
        if (jt_xorshift64(&rng) % 4 == 0) continue; /* some are left alone */
        /* Up to 1.5 ms after its issue (spun: a sleep would take longer). */
        uint64_t until = g_race.issued_us[i] + jt_xorshift64(&rng) % 1500;
        while (jt_now_us() < until) {
        }
        jet_call_cancel(g_race.ids[i]);
    }
    return NULL;
}

static void test_cancels_race_answers(void)
{
    jt_echo_service_t svc;
    int port;
    jet_server_t *srv = start_server(&svc, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, -1);
    JT_REQUIRE(ch);
    memset(&g_race, 0, sizeof g_race);
    for (int i = 0; i < RACE_CALLS; i++) {
        g_race.calls[i] = jet_call_create();
        JT_REQUIRE(g_race.calls[i]);
        g_race.ids[i] = jet_call_id(g_race.calls[i]);
    }
    pthread_t t;
    JT_REQUIRE(pthread_create(&t, NULL, race_canceller, NULL) == 0);
    for (int i = 0; i < RACE_CALLS; i++) {
        /* Half are answered after a millisecond, from another thread. */
        JT_CHECK_EQ(jt_echo_call(ch, g_race.calls[i], i % 2 ? "sleep:1" : "race", race_done,
                                 (void *)(intptr_t)i),
                    0);
        g_race.issued_us[i] = jt_now_us();
        atomic_store(&g_race.issued, i + 1);
        if (i % 16 == 15) jt_sleep_us(200); /* let some be answered */
    }
    pthread_join(t, NULL);
    for (int i = 0; i < RACE_CALLS; i++)
        jet_call_join(g_race.calls[i]);
    int once = 0;
    for (int i = 0; i < RACE_CALLS; i++)
        once += atomic_load(&g_race.ended[i]) == 1;
    fprintf(stderr, "  %d answered, %d cancelled, %d other\n", atomic_load(&g_race.answered),
            atomic_load(&g_race.cancelled), atomic_load(&g_race.other));
    JT_CHECK_EQ(once, RACE_CALLS);
    JT_CHECK_EQ(atomic_load(&g_race.other), 0);
    JT_CHECK(atomic_load(&g_race.cancelled) > 0);
    JT_CHECK(atomic_load(&g_race.answered) > 0);
    for (int i = 0; i < RACE_CALLS; i++) {
        JT_CHECK_EQ(jet_call_cancel(g_race.ids[i]), -EINVAL);
        jet_call_destroy(g_race.calls[i]);
    }
    /* The connection carried every late answer and still serves. */
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, call, "after", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "after"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* Cancels racing the issue itself (before it, while its attempt is set
 * up, once it is out), on every connection type, synchronous and not:
 * every call ends once, answered or cancelled, and the channel goes on. */
typedef struct issue_race {
    _Atomic uint64_t id; /* the call to cancel */
    _Atomic int go;      /* the round released */
    _Atomic int done;    /* the round whose cancel has returned */
    _Atomic bool stop;
    uint64_t rng;
} issue_race_t;

static void *issue_race_canceller(void *arg)
{
    issue_race_t *r = arg;
    int seen = 0;
    while (!atomic_load(&r->stop)) {
        int go = atomic_load(&r->go);
        if (go == seen) continue;
        seen = go;
        /* 0 to 30 us after the issue starts. */
        uint64_t until = jt_now_us() + jt_xorshift64(&r->rng) % 31;
        while (jt_now_us() < until) {
        }
        jet_call_cancel(atomic_load(&r->id));
        atomic_store(&r->done, go);
    }
    return NULL;
}

static void test_cancels_race_issues(void)
{
    jt_echo_service_t svc;
    int port;
    jet_server_t *srv = start_server(&svc, &port);
    JT_REQUIRE(srv);
    for (int t = 0; t < 3; t++) {
        for (int async = 0; async < 2; async++) {
            jet_channel_t *ch = jt_channel_open_port(port, types[t], 5000, -1);
            JT_REQUIRE(ch);
            issue_race_t r = {.rng = 0x2545f4914f6cdd1dull + (uint64_t)t * 7 + (uint64_t)async};
            pthread_t th;
            JT_REQUIRE(pthread_create(&th, NULL, issue_race_canceller, &r) == 0);
            int rounds = types[t] == JET_CONNECTION_SINGLE ? 600 : 200;
            int answered = 0, cancelled = 0, other = 0;
            jet_call_t *call = jet_call_create();
            for (int i = 0; i < rounds; i++) {
                uint64_t id = jet_call_id(call);
                JT_REQUIRE(id != 0);
                atomic_store(&r.id, id);
                jt_counter_t done = {0};
                atomic_store(&r.go, i + 1);
                JT_CHECK_EQ(jt_echo_call(ch, call, "hey", async ? jt_count_done : NULL,
                                         async ? &done : NULL),
                            0);
                if (async) JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
                if (jt_echo_resp_is(call, "hey"))
                    answered++;
                else if (is_cancelled(call))
                    cancelled++;
                else
                    other++;
                /* The round's cancel has returned before the call is reused. */
                while (atomic_load(&r.done) != i + 1) {
                }
            }
            atomic_store(&r.stop, true);
            pthread_join(th, NULL);
            fprintf(stderr, "  [%s %s] %d answered, %d cancelled, %d other\n", type_names[t],
                    async ? "async" : "sync", answered, cancelled, other);
            JT_CHECK_EQ(other, 0);
            JT_CHECK_EQ(answered + cancelled, rounds);
            JT_CHECK(cancelled > 0);
            /* The channel still answers. */
            JT_CHECK_EQ(jt_echo_call(ch, call, "after", NULL, NULL), 0);
            JT_CHECK_AT(type_names[t], jt_echo_resp_is(call, "after"));
            jet_call_destroy(call);
            jet_channel_destroy(ch);
        }
    }
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jt_server_stop(srv);
}

int main(void)
{
    JT_RUN(test_cancel_before_call);
    JT_RUN(test_cancel_during_call);
    JT_RUN(test_cancel_after_call);
    JT_RUN(test_reserved_id_released);
    JT_RUN(test_cancels_race_answers);
    JT_RUN(test_cancels_race_issues);
    return jt_finish();
}
