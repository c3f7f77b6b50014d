/* Joining calls (jet__cid_join): the registration of how a joiner waits
 * belongs to one call; a late joiner of a freed call must not take the wake-up
 * of the call that reuses its correlation slot; a completion on another
 * thread wakes a joiner asleep in its loop's epoll, and every joiner of a
 * call however each waits. Through a channel: jet_call_join of a call that
 * its done reissued waits for the new issue too; a synchronous call made on
 * the thread of the loop that serves its connection fails at once with
 * EDEADLK (it would wait for itself). Server handles: a peek of a handle
 * never returns the call of a later request of its slot. */
#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/time.h"
#include "event/loop.h"
#include "rpc/call.h"
#include "jetrpc/jetrpc.h"
#include "testutil.h"
#include "testutil_net.h"
#include "testutil_rpc.h"

#define GUARD_US (3 * 1000 * 1000)

static void count_expiry(void *arg)
{
    atomic_fetch_add((_Atomic int *)arg, 1);
}

typedef struct joiner {
    pthread_t t;
    uint32_t slot, seq;
    jet_loop_t *loop;
    _Atomic int expired;
    _Atomic int returned;
    int64_t took_us;
} joiner_t;

static void *joiner_main(void *arg)
{
    joiner_t *j = arg;
    int64_t t0 = jet_now_us();
    jet__cid_join(j->slot, j->seq, 0, j->loop, t0 + GUARD_US, count_expiry, &j->expired);
    j->took_us = jet_now_us() - t0;
    atomic_store(&j->returned, 1);
    return NULL;
}

/* The joiner returned long before its deadline, without expiring its call. */
static void joiner_end(joiner_t *j)
{
    JT_CHECK(jt_wait_at_least(&j->returned, 1, 2 * GUARD_US));
    pthread_join(j->t, NULL);
    JT_CHECK(j->took_us < GUARD_US / 2);
    JT_CHECK_EQ(atomic_load(&j->expired), 0);
}

/* Call A ends before its owner joins; call X takes the same slot and its
 * joiner sleeps; A's owner joins late (driving a loop); X ends: X's joiner
 * wakes at once, not at its deadline. */
static void test_late_joiner_keeps_off_the_next_call(void)
{
    jet_loop_t *loop = jet_loop_pick();
    JT_REQUIRE(loop != NULL);
    for (int with_loop = 0; with_loop < 2; with_loop++) {
        jet_call_t *a = jet_call_create(), *x = jet_call_create();
        JT_REQUIRE(a && x);
        uint64_t cid;
        JT_REQUIRE(jet__cid_alloc(a, &cid) == 0);
        uint32_t slot_a = a->slot, seq_a = jet__join_seq(atomic_load(&a->join_token));
        jet__cid_free(slot_a);
        JT_REQUIRE(jet__cid_alloc(x, &cid) == 0);
        JT_REQUIRE(x->slot == slot_a); /* the free list is LIFO */

        joiner_t jx = {.slot = x->slot, .seq = jet__join_seq(atomic_load(&x->join_token)), .loop = with_loop ? loop : NULL};
        JT_REQUIRE(pthread_create(&jx.t, NULL, joiner_main, &jx) == 0);
        usleep(50 * 1000); /* X's joiner registered and sleeps */

        _Atomic int late_expired = 0;
        int64_t t0 = jet_now_us();
        jet__cid_join(slot_a, seq_a, 0, loop, t0 + GUARD_US, count_expiry, &late_expired);
        JT_CHECK(jet_now_us() - t0 < GUARD_US / 2);
        JT_CHECK_EQ(atomic_load(&late_expired), 0);

        jet__cid_free(x->slot);
        joiner_end(&jx);
        jet_call_destroy(a);
        jet_call_destroy(x);
    }
}

/* A joiner that drives its (solitary, idle) loop sleeps in its epoll; a free
 * on another thread must end that sleep. */
static void test_free_on_another_thread_wakes_a_driving_joiner(void)
{
    jet_loop_t *loop = jet_loop_pick();
    JT_REQUIRE(loop != NULL);
    for (int round = 0; round < 20; round++) {
        jet_call_t *c = jet_call_create();
        JT_REQUIRE(c);
        uint64_t cid;
        JT_REQUIRE(jet__cid_alloc(c, &cid) == 0);
        joiner_t j = {.slot = c->slot, .seq = jet__join_seq(atomic_load(&c->join_token)), .loop = loop};
        JT_REQUIRE(pthread_create(&j.t, NULL, joiner_main, &j) == 0);
        usleep(round % 2 ? 20 * 1000 : 100);
        jet__cid_free(c->slot);
        joiner_end(&j);
        jet_call_destroy(c);
    }
}

/* Several joiners of one call, each waiting its own way (the futex, one
 * loop, another loop): one free on another thread wakes them all. */
static void test_every_joiner_wakes(void)
{
    JT_REQUIRE(jet_loop_pick() != NULL);
    jet_loop_t *loops[3] = {NULL, jet_loop_at(0), jet_loop_at(jet_loops_count() > 1 ? 1 : 0)};
    for (int order = 0; order < 2; order++) {
        jet_call_t *c = jet_call_create();
        JT_REQUIRE(c);
        uint64_t cid;
        JT_REQUIRE(jet__cid_alloc(c, &cid) == 0);
        joiner_t j[3];
        for (int i = 0; i < 3; i++) {
            int k = order ? 2 - i : i;
            j[i] = (joiner_t){.slot = c->slot, .seq = jet__join_seq(atomic_load(&c->join_token)), .loop = loops[k]};
            JT_REQUIRE(pthread_create(&j[i].t, NULL, joiner_main, &j[i]) == 0);
            usleep(20 * 1000); /* registered and asleep before the next one */
        }
        jet__cid_free(c->slot);
        for (int i = 0; i < 3; i++) joiner_end(&j[i]);
        jet_call_destroy(c);
    }
}

/* ---- through a channel ---- */

static jet_channel_t *g_ch;
static _Atomic int g_dones;

static void reissue_once(jet_call_t *call, void *arg)
{
    if (atomic_fetch_add(&g_dones, 1) == 0 && jt_echo_call(g_ch, call, "second", reissue_once, arg) != 0)
        atomic_fetch_add(&g_dones, 100); /* not reissued: fails the check below */
}

/* An echo server and g_ch, a single-connection channel to it. */
static jet_server_t *echo_start(jt_echo_service_t *svc, int32_t timeout_ms)
{
    jt_echo_service_init(svc, NULL);
    int port = 0;
    jet_server_t *srv = jt_echo_server_start_port(svc, 0, NULL, &port);
    g_ch = srv ? jt_channel_open_port(port, JET_CONNECTION_SINGLE, timeout_ms, 0) : NULL;
    return g_ch ? srv : NULL;
}

static void test_join_waits_for_a_reissue(void)
{
    jt_echo_service_t svc;
    jet_server_t *srv = echo_start(&svc, 5000);
    JT_REQUIRE(srv);
    int early = 0, failed = 0;
    for (int r = 0; r < 300; r++) {
        atomic_store(&g_dones, 0);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_REQUIRE(jt_echo_call(g_ch, call, "first", reissue_once, NULL) == 0);
        jet_call_join(call);
        /* Both issues are complete: done ran twice, the second's outcome is there. */
        if (atomic_load(&g_dones) != 2) {
            early++;
            JT_WAIT_UNTIL(atomic_load(&g_dones) >= 2, GUARD_US);
            usleep(10 * 1000); /* the second done returned: the call may go */
        } else if (!jt_echo_resp_is(call, "second")) {
            failed++;
        }
        jet_call_destroy(call);
    }
    JT_CHECK_EQ(early, 0);
    JT_CHECK_EQ(failed, 0);
    jet_channel_destroy(g_ch);
    jt_server_stop(srv);
}

static _Atomic int g_inner_code = -1;
static _Atomic int64_t g_inner_us;

/* A synchronous call through ch from a done callback: its outcome (-2 when
 * an EDEADLK does not say why) and how long it took. */
static void inner_sync_call(jet_channel_t *ch)
{
    jet_call_t *inner = jet_call_create();
    if (!inner) return;
    int64_t t0 = jet_now_us();
    int rc = jt_echo_call(ch, inner, "inner", NULL, NULL);
    atomic_store(&g_inner_us, jet_now_us() - t0);
    int code = rc != 0 ? rc : jet_call_error_code(inner);
    const char *text = jet_call_error_text(inner);
    if (code == EDEADLK && (!text || !strstr(text, "synchronous"))) code = -2;
    atomic_store(&g_inner_code, code);
    jet_call_destroy(inner);
}

static void sync_inside_done(jet_call_t *call, void *arg)
{
    (void)call;
    (void)arg;
    inner_sync_call(g_ch);
}

static void test_sync_call_on_its_loop_thread(void)
{
    jt_echo_service_t svc;
    /* A timeout far longer than the guard: a deadlock shows as a guard failure. */
    jet_server_t *srv = echo_start(&svc, 60000);
    JT_REQUIRE(srv);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    JT_REQUIRE(jt_echo_call(g_ch, call, "outer", sync_inside_done, NULL) == 0);
    jet_call_join(call);
    JT_CHECK_EQ(atomic_load(&g_inner_code), EDEADLK);
    JT_CHECK(atomic_load(&g_inner_us) < GUARD_US);
    /* The connection is unharmed. */
    jet_call_t *after = jet_call_create();
    JT_REQUIRE(after);
    JT_CHECK_EQ(jt_echo_call(g_ch, after, "after", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(after, "after"));
    jet_call_destroy(after);
    jet_call_destroy(call);
    jet_channel_destroy(g_ch);
    jt_server_stop(srv);
}

/* A peer that accepts and closes every connection a moment later. */
static int g_closer_fd = -1;

static void *closer_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(g_closer_fd, NULL, NULL);
        if (fd < 0) return NULL;
        usleep(20 * 1000);
        close(fd);
    }
}

static jet_channel_t *g_closing_ch;

/* The inner call's first attempt gets a connection on the other loop (loops
 * are picked in turn), its retry one on this loop: that one is refused too. */
static void sync_retry_inside_done(jet_call_t *call, void *arg)
{
    (void)call;
    (void)arg;
    for (int i = 0; i < 16 && jet_loop_pick() != jet_loop_current(); i++) {
    }
    inner_sync_call(g_closing_ch);
}

static void test_sync_retry_on_its_loop_thread(void)
{
    jt_echo_service_t svc;
    jet_server_t *srv = echo_start(&svc, 60000);
    JT_REQUIRE(srv);
    int port = 0;
    g_closer_fd = jt_tcp_listen(64, &port);
    JT_REQUIRE(g_closer_fd >= 0);
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, closer_main, NULL) == 0);
    /* Retries, and a deadline far past the guard. */
    g_closing_ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 60000, 3);
    JT_REQUIRE(g_closing_ch);
    for (int round = 0; round < 4; round++) {
        atomic_store(&g_inner_code, -1);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_REQUIRE(jt_echo_call(g_ch, call, "outer", sync_retry_inside_done, NULL) == 0);
        jet_call_join(call);
        int code = atomic_load(&g_inner_code);
        JT_CHECK_AT(jet_strerror(code), code == EDEADLK || code == JET_EEOF);
        JT_CHECK(atomic_load(&g_inner_us) < GUARD_US);
        jet_call_destroy(call);
        usleep(50 * 1000); /* the peer closed the inner connection meanwhile */
    }
    jet_channel_destroy(g_closing_ch);
    shutdown(g_closer_fd, SHUT_RDWR);
    close(g_closer_fd);
    pthread_join(th, NULL);
    jet_channel_destroy(g_ch);
    jt_server_stop(srv);
}

static _Atomic int g_self_join;

static void join_inside_done(jet_call_t *call, void *arg)
{
    (void)arg;
    atomic_store(&g_self_join, 1);
    jet_call_join(call);
    atomic_store(&g_self_join, 2);
}

/* A done callback that joins its own call (cleanup code shared with the
 * joining side, say): the call is complete, and the one thing left, done
 * returning, waits for this very join. The join returns at once, whether
 * done runs on the loop (an answer) or on the deadline thread (a timeout);
 * it waited for itself for ever, stalling that loop or every deadline of
 * the process. Runs last: a hang leaves the thread stuck. */
static void test_join_inside_its_own_done(void)
{
    jt_echo_service_t svc;
    jet_server_t *srv = echo_start(&svc, 5000);
    JT_REQUIRE(srv);
    const char *msgs[] = {"answered", "later:300"};
    for (int i = 0; i < 2; i++) {
        atomic_store(&g_self_join, 0);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        if (i == 1) jet_call_set_timeout_ms(call, 50); /* done on the deadline thread */
        JT_REQUIRE(jt_echo_call(g_ch, call, msgs[i], join_inside_done, NULL) == 0);
        /* Leaks the call, the channel and the server on a hang: the library
         * still holds them. */
        JT_REQUIRE(JT_WAIT_UNTIL(atomic_load(&g_self_join) == 2, GUARD_US));
        jet_call_join(call);
        JT_CHECK_EQ(jet_call_error_code(call), i == 0 ? 0 : JET_ERPCTIMEDOUT);
        jet_call_destroy(call);
    }
    JT_CHECK(jt_echo_wait_idle(GUARD_US));
    jet_channel_destroy(g_ch);
    jt_server_stop(srv);
}

/* jet__cid_peek against a slot that changes hands as fast as it can: one
 * thread takes a handle for call A or B in turn, claims and frees it; the
 * other peeks the latest handle and must get NULL or that handle's own
 * call, never the other one (the request that took the slot next). */
typedef struct peek_race {
    jet_call_t *calls[2];
    /* The latest handle and its call's index, under a sequence count (odd
     * while they change). */
    _Atomic uint64_t seq;
    _Atomic uint64_t handle;
    _Atomic int which;
    _Atomic int stop;
    _Atomic uint64_t rounds;
} peek_race_t;

static void *peek_churn(void *arg)
{
    peek_race_t *r = arg;
    for (int i = 0; !atomic_load_explicit(&r->stop, memory_order_relaxed); i ^= 1) {
        uint64_t h;
        if (jet__cid_alloc_handle(r->calls[i], &h) < 0) abort();
        atomic_fetch_add(&r->seq, 1);
        atomic_store(&r->which, i);
        atomic_store(&r->handle, h);
        atomic_fetch_add(&r->seq, 1);
        if (jet__cid_claim(h, NULL) != r->calls[i]) abort();
        jet__cid_free((uint32_t)(h >> 32));
        atomic_fetch_add_explicit(&r->rounds, 1, memory_order_relaxed);
    }
    return NULL;
}

static void test_handle_peek_never_names_a_later_call(void)
{
    peek_race_t r = {.calls = {jet_call_create(), jet_call_create()}};
    JT_REQUIRE(r.calls[0] && r.calls[1]);
    uint64_t h0;
    JT_REQUIRE(jet__cid_alloc_handle(r.calls[0], &h0) == 0);
    JT_CHECK(h0 != 0);
    JT_CHECK(jet__cid_peek(h0) == r.calls[0]);
    JT_CHECK(jet__cid_claim(h0, NULL) == r.calls[0]);
    JT_CHECK(jet__cid_peek(h0) == NULL); /* claimed: answered */
    JT_CHECK(jet__cid_claim(h0, NULL) == NULL);
    jet__cid_free((uint32_t)(h0 >> 32));
    JT_CHECK(jet__cid_peek(h0) == NULL);
    JT_CHECK(jet__cid_peek(0) == NULL);
    pthread_t t;
    JT_REQUIRE(pthread_create(&t, NULL, peek_churn, &r) == 0);
    uint64_t peeks = 0, hits = 0, wrong = 0;
    int64_t until = jet_now_us() + 1000000;
    while (jet_now_us() < until) {
        for (int k = 0; k < 1000; k++) {
            uint64_t s = atomic_load(&r.seq);
            int which = atomic_load(&r.which);
            uint64_t h = atomic_load(&r.handle);
            if ((s & 1) || atomic_load(&r.seq) != s) continue; /* changing meanwhile */
            jet_call_t *c = jet__cid_peek(h);
            peeks++;
            if (c) {
                hits++;
                if (c != r.calls[which]) wrong++; /* another request's call */
            }
        }
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    fprintf(stderr, "  %llu peeks, %llu found a call, %llu wrong, %llu handles taken\n",
            (unsigned long long)peeks, (unsigned long long)hits, (unsigned long long)wrong,
            (unsigned long long)atomic_load(&r.rounds));
    JT_CHECK_EQ(wrong, 0);
    jet_call_destroy(r.calls[0]);
    jet_call_destroy(r.calls[1]);
}

int main(void)
{
    JT_RUN(test_late_joiner_keeps_off_the_next_call);
    JT_RUN(test_free_on_another_thread_wakes_a_driving_joiner);
    JT_RUN(test_every_joiner_wakes);
    JT_RUN(test_join_waits_for_a_reissue);
    JT_RUN(test_sync_call_on_its_loop_thread);
    JT_RUN(test_sync_retry_on_its_loop_thread);
    JT_RUN(test_join_inside_its_own_done);
    JT_RUN(test_handle_peek_never_names_a_later_call);
    return jt_finish();
}
