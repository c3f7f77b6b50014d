/* Event loop timers: deadline order, stop, re-arm, timers that start and stop
 * timers from their callbacks, zero and past deadlines, no livelock. All
 * timer calls run on the loop thread, through posted tasks. */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "base/time.h"
#include "event/loop.h"
#include "testutil.h"
#include "testutil_loop.h"

#define GUARD_US (5 * 1000 * 1000)

static jet_loop_t *loop;

static void setup(void)
{
    if (jt_loop_up(&loop) != 0) abort();
}

static void teardown(void)
{
    jt_loop_down(loop);
    loop = NULL;
}

/* A timer that records when and in which order it fired. */
typedef struct rec_timer {
    jet_timer_t t;
    int fired;
    int order;
    int64_t fired_at;
} rec_timer_t;

static _Atomic int rec_count;

static void rec_fn(jet_timer_t *t)
{
    rec_timer_t *r = (rec_timer_t *)t;
    if (!jet_loop_in_thread(loop)) abort();
    r->fired++;
    r->fired_at = jet_now_us();
    r->order = atomic_fetch_add(&rec_count, 1);
}

/* ---- deadline order ---------------------------------------------------- */

#define NRAND 2000
static rec_timer_t rand_timers[NRAND];
static bool rand_stopped[NRAND];

/* Arms every timer at a random deadline, then stops a random third and
 * re-arms another third (earlier or later) in random order, so removals and
 * moves hit every position of the heap and sift both ways. */
static void arm_random(void *arg)
{
    int64_t now = jet_now_us();
    for (int i = 0; i < NRAND; i++) {
        jet_timer_init(&rand_timers[i].t, rec_fn);
        rand_stopped[i] = false;
        int64_t d = now + 20000 + rand() % 200000; /* 20..220 ms ahead */
        jet_loop_timer_start(loop, &rand_timers[i].t, d);
        JT_CHECK(jet_timer_armed(&rand_timers[i].t));
        JT_CHECK_EQ(rand_timers[i].t.deadline_us, d);
    }
    for (int k = 0; k < NRAND; k++) {
        int i = rand() % NRAND;
        switch (rand() % 3) {
        case 0:
            jet_loop_timer_stop(loop, &rand_timers[i].t);
            rand_stopped[i] = true;
            break;
        case 1:
            jet_loop_timer_start(loop, &rand_timers[i].t, now + 20000 + rand() % 200000);
            rand_stopped[i] = false;
            break;
        default:
            break;
        }
    }
}

static void test_deadline_order(void)
{
    setup();
    srand(12345);
    atomic_store(&rec_count, 0);
    jt_loop_run_on(loop, arm_random, NULL);
    int live = 0;
    for (int i = 0; i < NRAND; i++)
        live += !rand_stopped[i];
    JT_CHECK(jt_wait_at_least(&rec_count, live, 30 * 1000000LL));
    jt_loop_run_on(loop, NULL, NULL);
    rec_timer_t *by_order[NRAND] = {0};
    int early = 0, wrong = 0;
    for (int i = 0; i < NRAND; i++) {
        rec_timer_t *r = &rand_timers[i];
        wrong += r->fired != (rand_stopped[i] ? 0 : 1);
        if (!r->fired) continue;
        early += r->fired_at < r->t.deadline_us; /* never before its deadline */
        JT_CHECK(!jet_timer_armed(&r->t));
        if (r->order >= 0 && r->order < NRAND) by_order[r->order] = r;
    }
    JT_CHECK_EQ(atomic_load(&rec_count), live);
    JT_CHECK_EQ(wrong, 0);
    JT_CHECK_EQ(early, 0);
    int disorder = 0;
    for (int i = 1; i < live; i++) {
        JT_REQUIRE(by_order[i] && by_order[i - 1]);
        disorder += by_order[i]->t.deadline_us < by_order[i - 1]->t.deadline_us;
    }
    JT_CHECK_EQ(disorder, 0);
    teardown();
}

/* ---- stop and re-arm --------------------------------------------------- */

static rec_timer_t ta, tb, tc;

static void arm_a_b_stop_a(void *arg)
{
    int64_t now = jet_now_us();
    jet_timer_init(&ta.t, rec_fn);
    jet_timer_init(&tb.t, rec_fn);
    jet_loop_timer_start(loop, &ta.t, now + 10000);
    jet_loop_timer_start(loop, &tb.t, now + 40000);
    jet_loop_timer_stop(loop, &ta.t);
    JT_CHECK(!jet_timer_armed(&ta.t));
    jet_loop_timer_stop(loop, &ta.t); /* twice: no effect */
    JT_CHECK(jet_timer_armed(&tb.t));
}

static void test_stop_before_firing(void)
{
    setup();
    ta = tb = (rec_timer_t){0};
    atomic_store(&rec_count, 0);
    jt_loop_run_on(loop, arm_a_b_stop_a, NULL);
    JT_CHECK(jt_wait_at_least(&rec_count, 1, GUARD_US));
    jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(ta.fired, 0); /* B (later) fired, so A would have */
    JT_CHECK_EQ(tb.fired, 1);
    teardown();
}

static void arm_far(void *arg)
{
    int64_t now = jet_now_us();
    jet_timer_init(&ta.t, rec_fn);
    jet_timer_init(&tb.t, rec_fn);
    jet_timer_init(&tc.t, rec_fn);
    jet_loop_timer_start(loop, &ta.t, now + 3600LL * 1000000); /* an hour */
    jet_loop_timer_start(loop, &tb.t, now + 5000);
    jet_loop_timer_start(loop, &tc.t, now + 20000);
    /* Moves: A earlier than everything, B far away. */
    jet_loop_timer_start(loop, &ta.t, now + 1000);
    jet_loop_timer_start(loop, &tb.t, now + 3600LL * 1000000);
}

static void stop_b(void *arg)
{
    jet_loop_timer_stop(loop, &tb.t);
}

static void test_rearm_moves(void)
{
    setup();
    ta = tb = tc = (rec_timer_t){0};
    atomic_store(&rec_count, 0);
    jt_loop_run_on(loop, arm_far, NULL);
    JT_CHECK(jt_wait_at_least(&rec_count, 2, GUARD_US));
    jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(ta.fired, 1);
    JT_CHECK_EQ(tc.fired, 1);
    JT_CHECK_EQ(ta.order, 0);
    JT_CHECK_EQ(tc.order, 1);
    JT_CHECK_EQ(tb.fired, 0);
    JT_CHECK(jet_timer_armed(&tb.t));
    jt_loop_run_on(loop, stop_b, NULL);
    JT_CHECK(!jet_timer_armed(&tb.t));
    teardown();
}

/* ---- callbacks that start and stop timers ------------------------------ */

static jet_timer_t cx, cy, cz;
static _Atomic int cx_runs, cy_runs;
static _Atomic int cz_runs;

static void cz_fn(jet_timer_t *t)
{
    atomic_fetch_add(&cz_runs, 1);
}
static void cy_fn(jet_timer_t *t)
{
    cy_runs++;
}

static void cx_fn(jet_timer_t *t)
{
    int n = atomic_fetch_add(&cx_runs, 1) + 1;
    if (n == 1) {
        /* Y is due together with X (1 us later): stopping it here must win
         * even though it may already be due in this very pass. */
        jet_loop_timer_stop(loop, &cy);
        /* Z in the past: fires on a coming iteration. */
        jet_loop_timer_start(loop, &cz, 0);
    }
    if (n < 5) jet_loop_timer_start(loop, t, jet_now_us() + 1000); /* itself */
}

static void arm_xyz(void *arg)
{
    int64_t now = jet_now_us();
    jet_timer_init(&cx, cx_fn);
    jet_timer_init(&cy, cy_fn);
    jet_timer_init(&cz, cz_fn);
    jet_loop_timer_start(loop, &cx, now + 5000);
    jet_loop_timer_start(loop, &cy, now + 5001);
}

static void test_callbacks_start_stop(void)
{
    setup();
    atomic_store(&cx_runs, 0);
    atomic_store(&cy_runs, 0);
    atomic_store(&cz_runs, 0);
    jt_loop_run_on(loop, arm_xyz, NULL);
    JT_CHECK(jt_wait_at_least(&cz_runs, 1, GUARD_US));
    int64_t end = jet_now_us() + GUARD_US;
    int runs = 0;
    while (runs < 5 && jet_now_us() < end) {
        jt_loop_run_on(loop, NULL, NULL);
        runs = atomic_load(&cx_runs);
    }
    jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(cx_runs, 5);
    JT_CHECK(!jet_timer_armed(&cx));
    JT_CHECK_EQ(cy_runs, 0);
    JT_CHECK_EQ(atomic_load(&cz_runs), 1);
    teardown();
}

/* ---- zero and past deadlines; no livelock ------------------------------ */

static rec_timer_t tzero, tpast;

static void arm_zero_past(void *arg)
{
    jet_timer_init(&tzero.t, rec_fn);
    jet_timer_init(&tpast.t, rec_fn);
    jet_loop_timer_start(loop, &tzero.t, 0);
    jet_loop_timer_start(loop, &tpast.t, jet_now_us() - 1000000);
    /* Not inside this task: they fire on the loop's next iteration. */
    JT_CHECK_EQ(tzero.fired + tpast.fired, 0);
}

static void test_zero_and_past_deadline(void)
{
    setup();
    tzero = tpast = (rec_timer_t){0};
    atomic_store(&rec_count, 0);
    jt_loop_run_on(loop, arm_zero_past, NULL);
    JT_CHECK(jt_wait_at_least(&rec_count, 2, GUARD_US));
    jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(tzero.fired, 1);
    JT_CHECK_EQ(tpast.fired, 1);
    JT_CHECK_EQ(tzero.order, 0); /* deadline 0 is the earlier one */
    teardown();
}

/* A timer that keeps re-arming itself in the past must not starve tasks. */
static jet_timer_t spin;
static _Atomic int spin_runs;

static void spin_fn(jet_timer_t *t)
{
    atomic_fetch_add(&spin_runs, 1);
    jet_loop_timer_start(loop, t, 0);
}

static void arm_spin(void *arg)
{
    jet_timer_init(&spin, spin_fn);
    jet_loop_timer_start(loop, &spin, 0);
}

static void stop_spin(void *arg)
{
    jet_loop_timer_stop(loop, &spin);
}

static void test_rearm_in_past_no_livelock(void)
{
    setup();
    atomic_store(&spin_runs, 0);
    jt_loop_run_on(loop, arm_spin, NULL);
    JT_CHECK(jt_wait_at_least(&spin_runs, 1000, GUARD_US));
    jt_loop_run_on(loop, stop_spin, NULL); /* this task gets to run */
    int after = atomic_load(&spin_runs);
    jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(atomic_load(&spin_runs), after);
    teardown();
}

/* The heap grows past its initial size; stopping from the middle keeps the
 * rest in order. */
#define NBIG 1000
static rec_timer_t big[NBIG];

static void arm_big_stop_odd(void *arg)
{
    int64_t base = jet_now_us() + 2000;
    for (int i = 0; i < NBIG; i++) {
        jet_timer_init(&big[i].t, rec_fn);
        /* Reverse order of index, to exercise sift-up. */
        jet_loop_timer_start(loop, &big[i].t, base + (NBIG - i) * 10);
    }
    for (int i = 1; i < NBIG; i += 2)
        jet_loop_timer_stop(loop, &big[i].t);
}

static void test_many_and_stop_half(void)
{
    setup();
    for (int i = 0; i < NBIG; i++)
        big[i] = (rec_timer_t){0};
    atomic_store(&rec_count, 0);
    jt_loop_run_on(loop, arm_big_stop_odd, NULL);
    JT_CHECK(jt_wait_at_least(&rec_count, NBIG / 2, GUARD_US));
    jt_loop_run_on(loop, NULL, NULL);
    int bad = 0;
    for (int i = 0; i < NBIG; i++) {
        if (i % 2)
            bad += big[i].fired != 0;
        else
            bad += big[i].fired != 1 || big[i].order != (NBIG - 2 - i) / 2;
    }
    JT_CHECK_EQ(bad, 0);
    teardown();
}

int main(void)
{
    JT_RUN(test_deadline_order);
    JT_RUN(test_stop_before_firing);
    JT_RUN(test_rearm_moves);
    JT_RUN(test_callbacks_start_stop);
    JT_RUN(test_zero_and_past_deadline);
    JT_RUN(test_rearm_in_past_no_livelock);
    JT_RUN(test_many_and_stop_half);
    return jt_finish();
}
