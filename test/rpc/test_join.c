/* Joining calls (jet__cid_join): the registration of how a joiner waits
 * belongs to one call; a late joiner of a freed call must not take the wake-up
 * of the call that reuses its correlation slot; a completion on another
 * thread wakes a joiner asleep in its loop's epoll, and every joiner of a
 * call however each waits. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "base/time.h"
#include "event/loop.h"
#include "rpc/call.h"
#include "testutil.h"

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
        uint32_t slot_a = a->slot, seq_a = a->slot_free_seq;
        jet__cid_free(slot_a);
        JT_REQUIRE(jet__cid_alloc(x, &cid) == 0);
        JT_REQUIRE(x->slot == slot_a); /* the free list is LIFO */

        joiner_t jx = {.slot = x->slot, .seq = x->slot_free_seq, .loop = with_loop ? loop : NULL};
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
        joiner_t j = {.slot = c->slot, .seq = c->slot_free_seq, .loop = loop};
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
            j[i] = (joiner_t){.slot = c->slot, .seq = c->slot_free_seq, .loop = loops[k]};
            JT_REQUIRE(pthread_create(&j[i].t, NULL, joiner_main, &j[i]) == 0);
            usleep(20 * 1000); /* registered and asleep before the next one */
        }
        jet__cid_free(c->slot);
        for (int i = 0; i < 3; i++) joiner_end(&j[i]);
        jet_call_destroy(c);
    }
}

int main(void)
{
    JT_RUN(test_late_joiner_keeps_off_the_next_call);
    JT_RUN(test_free_on_another_thread_wakes_a_driving_joiner);
    JT_RUN(test_every_joiner_wakes);
    return jt_finish();
}
