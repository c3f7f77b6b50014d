/* Guest driving (jet_loop_drive): the waiting thread runs a busy-poll
 * loop's iterations while the loop thread sleeps, hands the loop back, and
 * every refusal case (no poller, another guest, a loop thread, stop), a
 * hand-over the thread is slow to make (the guest sleeps for it); and
 * the blocking guest of a loop without pollers, which sleeps in the loop's
 * epoll itself (hand-over from the thread's epoll, fd events, posts,
 * interrupts, kicks, its deadline, refusal when the loop is not solitary,
 * callbacks outside the caller's defer scope); work queued for the loop's
 * own thread makes either guest leave, and runs on that thread. */
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "event/loop.h"
#include "jetrpc/flags.h"
#include "testutil.h"
#include "testutil_loop.h"

JET_FLAG_DECLARE_BOOL(event_guest_drive);
JET_FLAG_DECLARE_BOOL(event_guest_block);
JET_FLAG_DECLARE_INT32(event_guest_park_us);
JET_FLAG_DECLARE_INT32(event_guest_park_solitary_us);

#define GUARD_US (5 * 1000 * 1000)

static jet_loop_t *loop;

/* Counts its runs, and which thread ran it. */
typedef struct who_poller {
    jet_poller_t p;
    _Atomic int runs;
    _Atomic int foreign; /* runs on another thread than `expect` after its first run */
    _Atomic int guest_seen;
    _Atomic(pthread_t *) expect;
    _Atomic int stop_at; /* removes itself on this run (0: never) */
} who_poller_t;

static int who_poll(jet_poller_t *p)
{
    who_poller_t *w = (who_poller_t *)p;
    if (!jet_loop_in_thread(loop)) abort();
    int n = atomic_fetch_add(&w->runs, 1) + 1;
    pthread_t *e = atomic_load(&w->expect);
    if (e && pthread_equal(*e, pthread_self()))
        atomic_store(&w->guest_seen, 1);
    else if (e && atomic_load(&w->guest_seen))
        atomic_fetch_add(&w->foreign, 1);
    int stop = atomic_load(&w->stop_at);
    if (stop && n >= stop) {
        atomic_store(&w->stop_at, 0);
        jet_loop_poller_del(loop, p);
    }
    return 0;
}

static void add_poller(void *arg)
{
    jet_loop_poller_add(loop, arg);
}
static void del_poller(void *arg)
{
    jet_loop_poller_del(loop, arg);
}

typedef struct until {
    _Atomic int *v;
    int target;
    who_poller_t *w; /* stops its thread check once reached (the loop may go back) */
} until_t;

static bool reached(void *arg)
{
    until_t *u = arg;
    bool r = atomic_load(u->v) >= u->target;
    if (r && u->w) atomic_store(&u->w->expect, NULL);
    return r;
}

/* "Never" for a test that works; a bounded failure for one that does not. */
static bool never(void *arg)
{
    int64_t *end_ms = arg;
    if (*end_ms == 0) *end_ms = jt_now_ms() + 10000;
    return jt_now_ms() > *end_ms;
}

typedef struct flag_task {
    jet_task_t task;
    _Atomic int *counter;
    _Atomic int *on_guest; /* counts runs on the thread in `guest` */
    pthread_t guest;
} flag_task_t;

static void flag_task_fn(jet_task_t *t)
{
    flag_task_t *f = (flag_task_t *)t;
    if (!jet_loop_in_thread(loop)) abort();
    if (pthread_equal(f->guest, pthread_self())) atomic_fetch_add(f->on_guest, 1);
    atomic_fetch_add(f->counter, 1);
}

static void test_guest_runs_the_loop(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    who_poller_t w = {.p.poll = who_poll};
    jt_loop_run_on(loop, add_poller, &w.p);
    JT_CHECK(jt_wait_at_least(&w.runs, 100, GUARD_US));

    /* Once we drive, every run is ours: the loop thread is parked. */
    pthread_t me = pthread_self();
    for (int round = 0; round < 3; round++) {
        atomic_store(&w.foreign, 0);
        atomic_store(&w.guest_seen, 0);
        atomic_store(&w.expect, &me);
        until_t u = {&w.runs, atomic_load(&w.runs) + 20000, &w};
        JT_CHECK(!jet_loop_in_thread(loop));
        JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
        JT_CHECK(atomic_load(&w.runs) >= u.target);
        JT_CHECK(atomic_load(&w.guest_seen));
        JT_CHECK_EQ(atomic_load(&w.foreign), 0);
        JT_CHECK(!jet_loop_in_thread(loop));
    }
    until_t u = {0};

    /* Given back: the loop thread runs it again without being asked. */
    int before = atomic_load(&w.runs);
    JT_CHECK(jt_wait_at_least(&w.runs, before + 1000, GUARD_US));

    /* Tasks posted to a driven loop run on the guest. */
    enum { N = 1000 };
    static flag_task_t tasks[N];
    static _Atomic int ran, on_guest;
    atomic_store(&ran, 0);
    atomic_store(&on_guest, 0);
    for (int i = 0; i < N; i++) {
        tasks[i] = (flag_task_t){
            .task.fn = flag_task_fn, .counter = &ran, .on_guest = &on_guest, .guest = me};
        jet_loop_post(loop, &tasks[i].task);
    }
    u = (until_t){&ran, N, NULL};
    JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX) || atomic_load(&ran) == N);
    JT_CHECK_EQ(atomic_load(&ran), N);

    /* A task posted after the guest left is run promptly by the loop thread
     * (the post wakes it from its park). */
    static flag_task_t late;
    static _Atomic int late_ran;
    late = (flag_task_t){.task.fn = flag_task_fn, .counter = &late_ran, .on_guest = &on_guest};
    jet_loop_post(loop, &late.task);
    JT_CHECK(jt_wait_at_least(&late_ran, 1, GUARD_US));

    jt_loop_run_on(loop, del_poller, &w.p);
    jt_loop_down(loop);
}

static void test_refusals(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    _Atomic int zero = 0;
    until_t u = {&zero, 1, NULL};
    /* No poller and event_guest_block off: the loop sleeps in epoll,
     * nothing to drive. */
    JET_FLAG_STORE(event_guest_block, false);
    JT_CHECK(!jet_loop_drive(loop, reached, &u, INT64_MAX));
    JET_FLAG_STORE(event_guest_block, true);
    JT_CHECK(!jet_loop_drive(NULL, reached, &u, INT64_MAX));

    who_poller_t w = {.p.poll = who_poll};
    jt_loop_run_on(loop, add_poller, &w.p);
    JT_CHECK(jt_wait_at_least(&w.runs, 10, GUARD_US));
    /* The flag turns it off. */
    JET_FLAG_STORE(event_guest_drive, false);
    JT_CHECK(!jet_loop_drive(loop, reached, &u, INT64_MAX));
    JET_FLAG_STORE(event_guest_drive, true);

    /* Already done: returns true without keeping the loop. */
    _Atomic int one = 1;
    until_t done = {&one, 1, NULL};
    JT_CHECK(jet_loop_drive(loop, reached, &done, INT64_MAX));
    int before = atomic_load(&w.runs);
    JT_CHECK(jt_wait_at_least(&w.runs, before + 1000, GUARD_US));

    /* The poller leaves while we drive: we give the loop back unfinished and
     * its thread serves posts again (sleeping in epoll). */
    atomic_store(&w.stop_at, atomic_load(&w.runs) + 500);
    int64_t end_ms = 0;
    JT_CHECK(!jet_loop_drive(loop, never, &end_ms, INT64_MAX));
    JT_CHECK_EQ(atomic_load(&w.stop_at), 0);
    for (int i = 0; i < 5; i++)
        jt_loop_run_on(loop, NULL, NULL);
    jt_loop_down(loop);
}

/* A loop thread may not drive another loop (nor its own). */
typedef struct nested {
    jet_loop_t *other;
    bool refused;
} nested_t;

static void nested_fn(void *arg)
{
    nested_t *n = arg;
    _Atomic int zero = 0;
    until_t u = {&zero, 1, NULL};
    n->refused = !jet_loop_drive(n->other, reached, &u, INT64_MAX) && !jet_loop_drive(loop, reached, &u, INT64_MAX);
}

static void test_loop_threads_do_not_drive(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    jet_loop_t *other = NULL;
    JT_REQUIRE(jet_loop_create(&other) == 0 && jet_loop_start(other) == 0);
    who_poller_t w = {.p.poll = who_poll};
    jt_loop_run_on(loop, add_poller, &w.p);
    nested_t n = {.other = other};
    jt_loop_run_on(loop, nested_fn, &n);
    JT_CHECK(n.refused);
    jt_loop_run_on(loop, del_poller, &w.p);
    jet_loop_destroy(other);
    jt_loop_down(loop);
}

/* Two guests: one drives, the other is refused; stop ends the drive. */
typedef struct guest_arg {
    _Atomic int started;
    _Atomic int result; /* 0 running, 1 true, 2 false */
} guest_arg_t;

static void *guest_main(void *arg)
{
    guest_arg_t *g = arg;
    atomic_store(&g->started, 1);
    int64_t end_ms = 0;
    bool r = jet_loop_drive(loop, never, &end_ms, INT64_MAX);
    atomic_store(&g->result, r ? 1 : 2);
    return NULL;
}

static void test_second_guest_and_stop(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    who_poller_t w = {.p.poll = who_poll};
    jt_loop_run_on(loop, add_poller, &w.p);
    JT_CHECK(jt_wait_at_least(&w.runs, 10, GUARD_US));
    guest_arg_t g = {0};
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, guest_main, &g) == 0);
    /* Wait until the guest drives: the poller then runs on its thread. */
    atomic_store(&w.foreign, 0);
    atomic_store(&w.guest_seen, 0);
    atomic_store(&w.expect, &th);
    JT_WAIT_UNTIL(atomic_load(&w.guest_seen), GUARD_US);
    JT_REQUIRE(atomic_load(&w.guest_seen));
    int before = atomic_load(&w.runs);
    jt_sleep_us(20000);
    JT_CHECK(atomic_load(&w.runs) > before);
    JT_CHECK_EQ(atomic_load(&w.foreign), 0);
    int64_t end_ms = jt_now_ms() + 1000;
    JT_CHECK(!jet_loop_drive(loop, never, &end_ms, INT64_MAX)); /* taken */
    /* Stop: the guest leaves unfinished, the thread is joined. */
    atomic_store(&w.expect, NULL);
    jet_loop_stop(loop);
    JT_CHECK(pthread_join(th, NULL) == 0);
    JT_CHECK_EQ(atomic_load(&g.result), 2);
    jet_loop_destroy(loop);
    loop = NULL;
}

/* Guests whose wait ends during the hand-over withdraw their request; the
 * loop must stay with its thread (a posted task still runs). */
typedef struct count_done {
    int checks, after;
} count_done_t;

static bool done_after(void *arg)
{
    count_done_t *c = arg;
    return ++c->checks > c->after;
}

static void test_withdrawn_requests(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    who_poller_t w = {.p.poll = who_poll};
    jt_loop_run_on(loop, add_poller, &w.p);
    for (int i = 0; i < 300000; i++) {
        count_done_t c = {0, i % 5};
        (void)jet_loop_drive(loop, done_after, &c, INT64_MAX);
        if (i % 2000 == 0) jt_loop_run_on(loop, NULL, NULL); /* aborts if the loop is lost */
    }
    int before = atomic_load(&w.runs);
    JT_CHECK(jt_wait_at_least(&w.runs, before + 100, GUARD_US));
    jt_loop_run_on(loop, del_poller, &w.p);
    jt_loop_down(loop);
}


/* A poller whose run stalls once when asked, until released: the loop
 * thread inside it holds the loop as a thread without a core would. */
typedef struct stall_poller {
    jet_poller_t p;
    _Atomic int runs;
    _Atomic int stall;
    _Atomic int in_stall;
    _Atomic int release;
} stall_poller_t;

static int stall_poll(jet_poller_t *p)
{
    stall_poller_t *sp = (stall_poller_t *)p;
    atomic_fetch_add(&sp->runs, 1);
    if (atomic_exchange(&sp->stall, 0)) {
        atomic_store(&sp->in_stall, 1);
        while (!atomic_exchange(&sp->release, 0))
            jt_sleep_us(1000);
        atomic_store(&sp->in_stall, 0);
    }
    return 0;
}

/* Releases the stalled poller 100 ms after it starts. */
static void *stall_releaser(void *arg)
{
    stall_poller_t *sp = arg;
    jt_sleep_us(100000);
    atomic_store(&sp->release, 1);
    return NULL;
}

static int64_t thread_cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A would-be guest of a busy-poll loop whose thread does not hand over at
 * once (here: stalled in an iteration; on a busy machine: runnable without
 * a core) spins only briefly, then sleeps until the hand-over: spinning on
 * would keep the thread it waits for off a core. It still gets the loop. */
static void test_handover_wait_sleeps(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    stall_poller_t sp = {.p.poll = stall_poll};
    jt_loop_run_on(loop, add_poller, &sp.p);
    JT_CHECK(jt_wait_at_least(&sp.runs, 10, GUARD_US));
    for (int round = 0; round < 3; round++) {
        atomic_store(&sp.stall, 1);
        JT_REQUIRE(JT_WAIT_EVERY(atomic_load(&sp.in_stall) == 1, GUARD_US, 10));
        pthread_t rel;
        JT_REQUIRE(pthread_create(&rel, NULL, stall_releaser, &sp) == 0);
        int64_t cpu0 = thread_cpu_us(), wall0 = (int64_t)jt_now_us();
        until_t u = {(_Atomic int *)&sp.runs, atomic_load(&sp.runs) + 20, NULL};
        JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
        int64_t cpu = thread_cpu_us() - cpu0, wall = (int64_t)jt_now_us() - wall0;
        pthread_join(rel, NULL);
        JT_CHECK(atomic_load(&sp.runs) >= u.target);
        if (cpu >= 20000) fprintf(stderr, "  waited %lld us, spun %lld us\n", (long long)wall,
                                  (long long)cpu);
        JT_CHECK(cpu < 20000);
    }
    jt_loop_run_on(loop, del_poller, &sp.p);
    jt_loop_down(loop);
}

/* ---- the parked thread's looks, deferred posts, kicks -------------------- */

/* Drives the loop in short turns for `ms`, as a thread making one
 * synchronous call after another does. */
static void drive_turns(who_poller_t *w, int64_t ms)
{
    int64_t end = jt_now_ms() + ms;
    while (jt_now_ms() < end) {
        until_t u = {&w->runs, atomic_load(&w->runs) + 20, NULL};
        (void)jet_loop_drive(loop, reached, &u, INT64_MAX);
    }
}

static void io_cb(jet_io_t *io, uint32_t events)
{
    (void)io;
    (void)events;
}

static void io_del_fn(void *arg)
{
    (void)jet_loop_io_del(arg);
}

/* Long park flags for a case, restored after it. */
typedef struct park_flags {
    int32_t base, solitary;
} park_flags_t;

static park_flags_t park_flags_set(int32_t base, int32_t solitary)
{
    park_flags_t old = {JET_FLAG(event_guest_park_us), JET_FLAG(event_guest_park_solitary_us)};
    JET_FLAG_STORE(event_guest_park_us, base);
    JET_FLAG_STORE(event_guest_park_solitary_us, solitary);
    return old;
}

static void park_flags_restore(park_flags_t old)
{
    JET_FLAG_STORE(event_guest_park_us, old.base);
    JET_FLAG_STORE(event_guest_park_solitary_us, old.solitary);
}

/* A loop with a counting poller, the park flags set for a case; undone,
 * flags included, by parked_loop_down. */
static park_flags_t parked_loop_up(who_poller_t *w, int32_t base, int32_t solitary)
{
    park_flags_t old = park_flags_set(base, solitary);
    if (jt_loop_up(&loop) != 0) {
        fprintf(stderr, "cannot start an event loop\n");
        abort();
    }
    jt_loop_run_on(loop, add_poller, &w->p);
    JT_CHECK(jt_wait_at_least(&w->runs, 10, GUARD_US));
    return old;
}

static void parked_loop_down(who_poller_t *w, park_flags_t old)
{
    jt_loop_run_on(loop, del_poller, &w->p);
    jt_loop_down(loop);
    park_flags_restore(old);
}

/* Each look of the parked thread is a wake-up that takes a core from the
 * spinning guest: a loop with nothing but the guest's connection is looked
 * at every event_guest_park_solitary_us, one with other fds every
 * event_guest_park_us. */
static void test_parked_thread_looks(void)
{
    who_poller_t w = {.p.poll = who_poll};
    park_flags_t old = parked_loop_up(&w, 200, 1000000);

    uint64_t a = jet__loop_looks(loop);
    drive_turns(&w, 300);
    uint64_t solitary = jet__loop_looks(loop) - a;
    /* At most the first park plus one every second. */
    JT_CHECK(solitary <= 3);

    /* One fd is still solitary (the loop cannot tell it from the guest's
     * connection); two are not. */
    int fds[2][2];
    jet_io_t io[2];
    for (int i = 0; i < 2; i++) {
        JT_REQUIRE(pipe(fds[i]) == 0);
        io[i] = (jet_io_t){.fd = fds[i][0], .events = EPOLLIN, .cb = io_cb};
        JT_REQUIRE(jet_loop_io_add(loop, &io[i]) == 0);
        a = jet__loop_looks(loop);
        drive_turns(&w, 300);
        uint64_t n = jet__loop_looks(loop) - a;
        if (i == 0)
            JT_CHECK(n <= 3);
        else
            JT_CHECK(n >= 30); /* every 200 us: 1500 in 300 ms on an idle machine */
    }
    for (int i = 0; i < 2; i++) {
        jt_loop_run_on(loop, io_del_fn, &io[i]);
        close(fds[i][0]);
        close(fds[i][1]);
    }

    parked_loop_down(&w, old);
}

/* A write that a synchronous caller leaves to the loop it is about to drive
 * runs on the caller's own turn, without waking the loop thread. */
static void test_deferred_post(void)
{
    who_poller_t w = {.p.poll = who_poll};
    park_flags_t old = parked_loop_up(&w, 100000, 1000000);
    pthread_t me = pthread_self();
    static _Atomic int ran, on_guest;

    /* A turn, so that the loop is left undriven with its thread parked. */
    until_t u = {&w.runs, atomic_load(&w.runs) + 10, NULL};
    JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
    uint64_t looks = jet__loop_looks(loop);
    int guest_rounds = 0;
    for (int round = 0; round < 50; round++) {
        atomic_store(&ran, 0);
        atomic_store(&on_guest, 0);
        flag_task_t t = {.task.fn = flag_task_fn, .counter = &ran, .on_guest = &on_guest, .guest = me};
        uint64_t wakes_before = jet__loop_wakes(loop);
        jet_loop_defer_begin();
        jet_loop_post_deferred(loop, &t.task);
        u = (until_t){&ran, 1, NULL};
        JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
        jet_loop_defer_end();
        /* No wake-up was sent, in any round (an ordinary post sends one
         * each time). A thread that had not reached its park when the round
         * began (on a loaded machine it may be between two steps of the
         * hand-over protocol for a while) runs the task on its own pass
         * before it hands the loop over: right, and free. */
        JT_CHECK_EQ(jet__loop_wakes(loop), wakes_before);
        guest_rounds += atomic_load(&on_guest);
        JT_CHECK_EQ(atomic_load(&ran), 1);
    }
    JT_CHECK(guest_rounds > 0);
    /* It may have looked once on its own (every second). */
    JT_CHECK(jet__loop_looks(loop) - looks <= 1);

    /* Not driven after all: the end of the scope wakes the loop thread,
     * which runs the task long before its park time (1 s) is over. */
    u = (until_t){&w.runs, atomic_load(&w.runs) + 10, NULL};
    JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
    atomic_store(&ran, 0);
    atomic_store(&on_guest, 0);
    flag_task_t t = {.task.fn = flag_task_fn, .counter = &ran, .on_guest = &on_guest, .guest = me};
    jet_loop_defer_begin();
    jet_loop_post_deferred(loop, &t.task);
    jet_loop_defer_begin(); /* nested: only the outer end wakes */
    jet_loop_defer_end();
    jet_loop_defer_end();
    JT_CHECK(jt_wait_at_least(&ran, 1, 500 * 1000));
    JT_CHECK_EQ(atomic_load(&on_guest), 0);

    /* Outside a scope a deferred post is an ordinary one. */
    u = (until_t){&w.runs, atomic_load(&w.runs) + 10, NULL};
    JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
    atomic_store(&ran, 0);
    jet_loop_post_deferred(loop, &t.task);
    JT_CHECK(jt_wait_at_least(&ran, 1, 500 * 1000));

    parked_loop_down(&w, old);
}

/* Timers and kicks reach a solitary loop whose thread sleeps long behind a
 * guest that left. */
typedef struct timed {
    jet_timer_t timer;
    jet_task_t arm;
    _Atomic int fired;
    _Atomic int armed;
    int64_t due_us;
} timed_t;

static void timed_fn(jet_timer_t *t)
{
    timed_t *x = (timed_t *)((char *)t - offsetof(timed_t, timer));
    atomic_store(&x->fired, 1);
}

static void arm_task_fn(jet_task_t *t)
{
    timed_t *x = (timed_t *)((char *)t - offsetof(timed_t, arm));
    jet_loop_timer_start(loop, &x->timer, x->due_us);
    atomic_store(&x->armed, 1);
}

static void disarm_fn(void *arg)
{
    timed_t *x = arg;
    jet_loop_timer_stop(loop, &x->timer);
}

static void test_timer_and_kick_wake_a_solitary_loop(void)
{
    who_poller_t w = {.p.poll = who_poll};
    park_flags_t old = parked_loop_up(&w, 200, 1000000);

    for (int round = 0; round < 5; round++) {
        /* Turns: the thread parks behind us (1 s). */
        drive_turns(&w, 20);
        timed_t x;
        memset(&x, 0, sizeof x);
        jet_timer_init(&x.timer, timed_fn);
        x.arm.fn = arm_task_fn;
        x.due_us = (int64_t)jt_now_us() + 5000;
        /* Armed on a guest turn (a deferred post wakes nobody): the guest
         * leaves a timer due before the thread's next look and wakes it. */
        jet_loop_defer_begin();
        jet_loop_post_deferred(loop, &x.arm);
        until_t u = {&x.armed, 1, NULL};
        JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
        jet_loop_defer_end();
        JT_CHECK(jt_wait_at_least(&x.fired, 1, 300 * 1000));
        if (!atomic_load(&x.fired)) jt_loop_run_on(loop, disarm_fn, &x);
    }

    /* A kick makes the loop thread take an undriven loop at once. */
    for (int round = 0; round < 5; round++) {
        drive_turns(&w, 20);
        int before = atomic_load(&w.runs);
        jet_loop_kick(loop);
        JT_CHECK(jt_wait_at_least(&w.runs, before + 100, 300 * 1000));
    }

    parked_loop_down(&w, old);
}

/* A kick (an asynchronous call, or a synchronous waiter refused because
 * another guest drives) made while a guest drives is kept: when that guest
 * leaves, the loop thread takes the loop at once instead of after its park
 * time (1 s here). */
typedef struct leaver {
    until_t u;
    _Atomic int go;
} leaver_t;

static void *leaver_main(void *arg)
{
    leaver_t *l = arg;
    (void)jet_loop_drive(loop, reached, &l->u, INT64_MAX);
    return NULL;
}

static void test_kick_while_driven(void)
{
    who_poller_t w = {.p.poll = who_poll};
    park_flags_t old = parked_loop_up(&w, 200, 1000000);
    for (int round = 0; round < 5; round++) {
        /* Turns first: the loop thread parks behind guests for 1 s. */
        drive_turns(&w, 20);
        leaver_t l = {.u = {NULL, 1, NULL}};
        l.u.v = &l.go;
        pthread_t th;
        atomic_store(&w.foreign, 0);
        atomic_store(&w.guest_seen, 0);
        atomic_store(&w.expect, &th);
        JT_REQUIRE(pthread_create(&th, NULL, leaver_main, &l) == 0);
        JT_WAIT_UNTIL(atomic_load(&w.guest_seen), GUARD_US);
        JT_REQUIRE(atomic_load(&w.guest_seen));
        /* A second waiter is refused, and asks for the thread instead. */
        until_t never_u = {&l.go, 1, NULL};
        JT_CHECK(!jet_loop_drive(loop, reached, &never_u, INT64_MAX));
        jet_loop_kick(loop);
        atomic_store(&w.expect, NULL);
        atomic_store(&l.go, 1);
        JT_CHECK(pthread_join(th, NULL) == 0);
        /* Nobody drives now but the loop thread, which must be running. */
        int before = atomic_load(&w.runs);
        JT_CHECK(jt_wait_at_least(&w.runs, before + 100, 300 * 1000));
    }
    parked_loop_down(&w, old);
}

/* A poller marked no_guest is its loop thread's alone: a waiting thread is
 * refused (it would only add a spinning thread), the loop thread keeps
 * running the poller meanwhile, and an ordinary poller added next to it
 * makes the loop drivable again (the guest then runs both). */
static void test_no_guest_poller(void)
{
    /* Set before the loop thread starts reading it (flags' contract). */
    int32_t solitary = JET_FLAG(event_guest_park_solitary_us);
    jet_flag_set("event_guest_park_solitary_us", "1000000");
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    who_poller_t own = {.p.poll = who_poll, .p.no_guest = true};
    jt_loop_run_on(loop, add_poller, &own.p);
    JT_CHECK(jt_wait_at_least(&own.runs, 100, GUARD_US));
    /* Bounded: a loop that let us drive would keep us until `never` gives
     * up (10 s), and the check fails instead of hanging. */
    int64_t end_ms = 0;
    JT_REQUIRE(!jet_loop_drive(loop, never, &end_ms, INT64_MAX));
    _Atomic int zero = 0;
    until_t u = {&zero, 1, NULL};
    for (int i = 0; i < 100; i++)
        JT_CHECK(!jet_loop_drive(loop, reached, &u, INT64_MAX));
    int before = atomic_load(&own.runs);
    JT_CHECK(jt_wait_at_least(&own.runs, before + 1000, GUARD_US));

    pthread_t me = pthread_self();
    who_poller_t w = {.p.poll = who_poll};
    jt_loop_run_on(loop, add_poller, &w.p);
    atomic_store(&w.expect, &me);
    atomic_store(&own.expect, &me);
    until_t u2 = {&w.runs, atomic_load(&w.runs) + 5000, &w};
    JT_CHECK(jet_loop_drive(loop, reached, &u2, INT64_MAX));
    JT_CHECK(atomic_load(&w.guest_seen));
    JT_CHECK(atomic_load(&own.guest_seen));
    atomic_store(&own.expect, NULL);
    /* The guest left with the drivable poller still there: the loop thread
     * takes the loop back at once for the no_guest one, not after its park
     * (a solitary loop's, 1 s here). */
    for (int round = 0; round < 3; round++) {
        until_t u3 = {&w.runs, atomic_load(&w.runs) + 1000, NULL};
        JT_CHECK(jet_loop_drive(loop, reached, &u3, INT64_MAX));
        before = atomic_load(&own.runs);
        JT_CHECK(jt_wait_at_least(&own.runs, before + 100, 300 * 1000));
    }
    jt_loop_run_on(loop, del_poller, &w.p);
    /* Only the no_guest poller again: refused, and still run. */
    end_ms = 0;
    JT_CHECK(!jet_loop_drive(loop, never, &end_ms, INT64_MAX));
    before = atomic_load(&own.runs);
    JT_CHECK(jt_wait_at_least(&own.runs, before + 1000, GUARD_US));
    jt_loop_run_on(loop, del_poller, &own.p);
    jt_loop_down(loop);
    char v[16];
    snprintf(v, sizeof v, "%d", (int)solitary);
    jet_flag_set("event_guest_park_solitary_us", v);
}

/* An asynchronous call's kick is used up when the thread takes the loop;
 * if a synchronous caller then drives and leaves before the answer came,
 * the loop counts as shared for a while and its thread looks at the short
 * pace (200 us), not the solitary one (1 s here). */
static void test_async_answer_after_a_guest_turn(void)
{
    who_poller_t w = {.p.poll = who_poll};
    park_flags_t old = parked_loop_up(&w, 200, 1000000);
    for (int round = 0; round < 5; round++) {
        drive_turns(&w, 20); /* the thread parks behind us for 1 s */
        jet_loop_kick(loop); /* an asynchronous call: the thread takes the loop */
        int before = atomic_load(&w.runs);
        JT_CHECK(jt_wait_at_least(&w.runs, before + 100, 300 * 1000));
        /* A synchronous call's turn, then nobody drives. */
        until_t u = {&w.runs, atomic_load(&w.runs) + 20, NULL};
        JT_CHECK(jet_loop_drive(loop, reached, &u, INT64_MAX));
        before = atomic_load(&w.runs);
        JT_CHECK(jt_wait_at_least(&w.runs, before + 100, 300 * 1000));
    }
    parked_loop_down(&w, old);
}

/* ---- blocking guests (loops without pollers) ---------------------------- */

/* A pipe whose readable end is on the loop: counts the callback's runs and
 * those on the thread in `guest`. */
typedef struct pipe_io {
    jet_io_t io;
    int fds[2];
    _Atomic int runs;
    _Atomic int on_guest;
    pthread_t guest;
    jet_loop_t *defer_to; /* the callback makes a deferred post of defer_task there */
    jet_task_t *defer_task;
} pipe_io_t;

static void pipe_cb(jet_io_t *io, uint32_t events)
{
    (void)events;
    pipe_io_t *p = (pipe_io_t *)io;
    if (!jet_loop_in_thread(loop)) abort();
    char buf[64];
    while (read(p->fds[0], buf, sizeof buf) > 0) {
    }
    if (pthread_equal(p->guest, pthread_self())) atomic_fetch_add(&p->on_guest, 1);
    if (p->defer_to) jet_loop_post_deferred(p->defer_to, p->defer_task);
    atomic_fetch_add(&p->runs, 1);
}

static void pipe_add(void *arg)
{
    pipe_io_t *p = arg;
    if (jet_loop_io_add(loop, &p->io) != 0) abort();
}
static void pipe_del(void *arg)
{
    jet_loop_io_del(&((pipe_io_t *)arg)->io);
}

/* add: registered on the loop's thread now, else left to the caller. */
static void pipe_up_on(pipe_io_t *p, bool add)
{
    memset(p, 0, sizeof *p);
    JT_REQUIRE(pipe(p->fds) == 0);
    JT_REQUIRE(fcntl(p->fds[0], F_SETFL, O_NONBLOCK) == 0);
    p->io = (jet_io_t){.fd = p->fds[0], .events = EPOLLIN, .cb = pipe_cb};
    p->guest = pthread_self();
    if (add) jt_loop_run_on(loop, pipe_add, p);
}

static void pipe_up(pipe_io_t *p)
{
    pipe_up_on(p, true);
}

static void pipe_down(pipe_io_t *p)
{
    jt_loop_run_on(loop, pipe_del, p);
    close(p->fds[0]);
    close(p->fds[1]);
}

/* After delay_ms: writes a byte to fd, posts `task`, or interrupts the
 * loop after setting *flag. */
typedef struct later {
    pthread_t t;
    int delay_ms;
    int fd;
    jet_task_t *task;
    _Atomic int *flag;
    jet_io_t *add; /* registered from this thread (set after later_start) */
    bool kick;     /* jet_loop_kick (set after later_start) */
} later_t;

/* Set by guest_reached once the test thread drives the loop. */
static _Atomic int guest_in;

/* reached(), noting when it is asked from inside the drive. */
static bool guest_reached(void *arg)
{
    if (jet_loop_in_thread(loop)) atomic_store(&guest_in, 1);
    return reached(arg);
}

static void *later_main(void *arg)
{
    later_t *l = arg;
    /* Acts only once the test thread drives: its checks say who ran what. */
    if (!jt_wait_at_least(&guest_in, 1, GUARD_US)) abort();
    usleep((useconds_t)l->delay_ms * 1000);
    if (l->fd >= 0 && write(l->fd, "x", 1) != 1) abort();
    if (l->task) jet_loop_post(loop, l->task);
    if (l->add && jet_loop_io_add(loop, l->add) != 0) abort();
    if (l->kick) jet_loop_kick(loop);
    if (l->flag) {
        atomic_store(l->flag, 1);
        jet_loop_interrupt(loop);
    }
    return NULL;
}

static void later_start(later_t *l, int delay_ms, int fd, jet_task_t *task, _Atomic int *flag)
{
    atomic_store(&guest_in, 0);
    *l = (later_t){.delay_ms = delay_ms, .fd = fd, .task = task, .flag = flag};
    JT_REQUIRE(pthread_create(&l->t, NULL, later_main, l) == 0);
}

/* A guest asleep in the loop's epoll leaves it (undone) when l's action
 * makes the loop shared, and a new drive is then refused; both at once. */
static void guest_leaves_then_refused(later_t *l, until_t *never_done)
{
    int64_t t0 = jt_now_ms();
    JT_CHECK(!jet_loop_drive(loop, guest_reached, never_done, (int64_t)jt_now_us() + GUARD_US));
    JT_CHECK(jt_now_ms() - t0 < 2000);
    pthread_join(l->t, NULL);
    t0 = jt_now_ms();
    JT_CHECK(!jet_loop_drive(loop, reached, never_done, (int64_t)jt_now_us() + GUARD_US));
    JT_CHECK(jt_now_ms() - t0 < 2000);
}

static void test_blocking_guest(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    pipe_io_t p;
    pipe_up(&p);
    /* The loop thread sleeps in epoll: the first drive asks it for the loop,
     * later ones find it parked. Each time the event is handled by us. */
    for (int round = 0; round < 4; round++) {
        later_t l;
        later_start(&l, 30, p.fds[1], NULL, NULL);
        until_t u = {&p.runs, round + 1, NULL};
        uint64_t epolls = jet__loop_epolls(loop);
        JT_CHECK(jet_loop_drive(loop, guest_reached, &u, (int64_t)jt_now_us() + GUARD_US));
        pthread_join(l.t, NULL);
        JT_CHECK_EQ(atomic_load(&p.on_guest), round + 1);
        /* Asleep in epoll for 30 ms, not spinning on it. */
        JT_CHECK(jet__loop_epolls(loop) - epolls < 20);
        if (round == 1) usleep(300 * 1000); /* the thread takes the loop back meanwhile */
    }

    /* A post while we sleep in the loop's epoll ends the wait; we run it. */
    static flag_task_t posted;
    static _Atomic int posted_ran, posted_on_guest;
    posted = (flag_task_t){.task.fn = flag_task_fn, .counter = &posted_ran,
                           .on_guest = &posted_on_guest, .guest = pthread_self()};
    later_t l;
    later_start(&l, 30, -1, &posted.task, NULL);
    until_t u = {&posted_ran, 1, NULL};
    JT_CHECK(jet_loop_drive(loop, guest_reached, &u, (int64_t)jt_now_us() + GUARD_US));
    pthread_join(l.t, NULL);
    JT_CHECK_EQ(atomic_load(&posted_on_guest), 1);

    /* Made done on another thread: jet_loop_interrupt ends the wait. */
    _Atomic int flag = 0;
    later_start(&l, 30, -1, NULL, &flag);
    until_t uf = {&flag, 1, NULL};
    int64_t t0 = jt_now_ms();
    JT_CHECK(jet_loop_drive(loop, guest_reached, &uf, (int64_t)jt_now_us() + GUARD_US));
    JT_CHECK(jt_now_ms() - t0 < 2000);
    pthread_join(l.t, NULL);

    /* An asynchronous call's kick makes the loop shared: a guest asleep in
     * its epoll is woken and leaves it to the thread. */
    later_start(&l, 30, -1, NULL, NULL);
    l.kick = true;
    _Atomic int none = 0;
    until_t un = {&none, 1, NULL};
    guest_leaves_then_refused(&l, &un); /* shared for a second: refused meanwhile */
    usleep(1100 * 1000);

    /* The deadline ends the wait with done still false. */
    _Atomic int zero = 0;
    until_t uz = {&zero, 1, NULL};
    t0 = jt_now_ms();
    JT_CHECK(!jet_loop_drive(loop, reached, &uz, (int64_t)jt_now_us() + 100 * 1000));
    int64_t took = jt_now_ms() - t0;
    JT_CHECK(took >= 99 && took < 2000);

    /* Undriven again, the loop thread takes events in turn. */
    int before = atomic_load(&p.runs);
    JT_CHECK(write(p.fds[1], "x", 1) == 1);
    JT_CHECK(jt_wait_at_least(&p.runs, before + 1, GUARD_US));
    JT_CHECK_EQ(atomic_load(&p.on_guest), 4);

    /* A second fd registered from another thread while a guest sleeps in
     * the epoll: the loop is no longer solitary, the guest leaves it. */
    pipe_io_t q;
    pipe_up_on(&q, false);
    later_start(&l, 30, -1, NULL, NULL);
    l.add = &q.io;
    guest_leaves_then_refused(&l, &un); /* not solitary (a second fd) */
    JT_CHECK(write(q.fds[1], "x", 1) == 1);
    JT_CHECK(jt_wait_at_least(&q.runs, 1, GUARD_US));
    JT_CHECK_EQ(atomic_load(&q.on_guest), 0);
    pipe_down(&q);

    pipe_down(&p);
    jt_loop_down(loop);
}

/* Runs on another loop: makes the guest of `loop` done, so it interrupts
 * it (jet_loop_drive's contract). */
static void plain_task_fn(jet_task_t *t)
{
    atomic_fetch_add(((flag_task_t *)t)->counter, 1);
    jet_loop_interrupt(loop);
}

/* A callback the guest runs is not in the caller's defer scope: its
 * deferred post to another (sleeping) loop wakes that loop now, not when
 * the caller's call ends. */
static void test_guest_callbacks_outside_defer_scope(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    jet_loop_t *other = NULL;
    JT_REQUIRE(jt_loop_up(&other) == 0);
    usleep(20 * 1000); /* the other loop is asleep in epoll */
    static _Atomic int ran;
    static flag_task_t t;
    t = (flag_task_t){.task.fn = plain_task_fn, .counter = &ran};
    pipe_io_t p;
    pipe_up(&p);
    p.defer_to = other;
    p.defer_task = &t.task;
    later_t l;
    later_start(&l, 10, p.fds[1], NULL, NULL);
    until_t u = {&ran, 1, NULL};
    jet_loop_defer_begin();
    int64_t t0 = jt_now_ms();
    bool r = jet_loop_drive(loop, guest_reached, &u, (int64_t)jt_now_us() + GUARD_US);
    jet_loop_defer_end();
    JT_CHECK(r);
    JT_CHECK(jt_now_ms() - t0 < 2000);
    pthread_join(l.t, NULL);
    pipe_down(&p);
    jt_loop_down(other);
    jt_loop_down(loop);
}

/* A task the guest runs queues work for the loop's thread
 * (jet_loop_post_thread), as done callbacks and handlers met by a waiting
 * caller are: the guest leaves after that iteration, although its wait is
 * not over, and the work runs on the loop thread, not as a guest. */
typedef struct thread_work {
    jet_task_t task;       /* jet_loop_post: run by the guest */
    jet_task_t for_thread; /* queued by it with jet_loop_post_thread */
    pthread_t guest;
    _Atomic int queued_on_guest, ran, ran_on_guest, ran_as_guest;
} thread_work_t;

static void for_thread_fn(jet_task_t *t)
{
    thread_work_t *w = (thread_work_t *)((char *)t - offsetof(thread_work_t, for_thread));
    if (!jet_loop_in_thread(loop)) abort();
    if (pthread_equal(w->guest, pthread_self())) atomic_store(&w->ran_on_guest, 1);
    if (jet_loop_guest_here()) atomic_store(&w->ran_as_guest, 1);
    atomic_store(&w->ran, 1);
}

static void queue_for_thread_fn(jet_task_t *t)
{
    thread_work_t *w = (thread_work_t *)t;
    if (jet_loop_guest_here() && pthread_equal(w->guest, pthread_self()))
        atomic_store(&w->queued_on_guest, 1);
    w->for_thread.fn = for_thread_fn;
    jet_loop_post_thread(loop, &w->for_thread);
}

static void test_work_for_the_thread(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    JT_CHECK(!jet_loop_guest_here());
    /* A busy-poll guest, then a blocking one (the loop asleep in epoll). */
    for (int poll = 1; poll >= 0; poll--) {
        who_poller_t p = {.p.poll = who_poll};
        if (poll) {
            jt_loop_run_on(loop, add_poller, &p.p);
            JT_CHECK(jt_wait_at_least(&p.runs, 100, GUARD_US));
        } else {
            usleep(20 * 1000);
        }
        static thread_work_t w;
        w = (thread_work_t){.task.fn = queue_for_thread_fn, .guest = pthread_self()};
        later_t l;
        later_start(&l, 30, -1, &w.task, NULL);
        _Atomic int none = 0;
        until_t u = {&none, 1, NULL};
        int64_t t0 = jt_now_ms();
        JT_CHECK(!jet_loop_drive(loop, guest_reached, &u, (int64_t)jt_now_us() + GUARD_US));
        JT_CHECK(jt_now_ms() - t0 < 2000);
        pthread_join(l.t, NULL);
        JT_CHECK(!jet_loop_guest_here());
        JT_CHECK_EQ(atomic_load(&w.queued_on_guest), 1);
        JT_CHECK(jt_wait_at_least(&w.ran, 1, GUARD_US));
        JT_CHECK_EQ(atomic_load(&w.ran_on_guest), 0);
        JT_CHECK_EQ(atomic_load(&w.ran_as_guest), 0);
        if (poll) jt_loop_run_on(loop, del_poller, &p.p);
    }
    jt_loop_down(loop);
}

/* A guest sleeping in the epoll of a loop that is stopped leaves. */
static void *stop_later(void *arg)
{
    usleep(50 * 1000);
    jet_loop_stop(arg);
    return NULL;
}

static void test_blocking_guest_and_stop(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    pthread_t t;
    JT_REQUIRE(pthread_create(&t, NULL, stop_later, loop) == 0);
    _Atomic int zero = 0;
    until_t u = {&zero, 1, NULL};
    int64_t t0 = jt_now_ms();
    JT_CHECK(!jet_loop_drive(loop, reached, &u, (int64_t)jt_now_us() + GUARD_US));
    JT_CHECK(jt_now_ms() - t0 < 2000);
    pthread_join(t, NULL);
    jet_loop_destroy(loop);
}

int main(void)
{
    JT_RUN(test_guest_runs_the_loop);
    JT_RUN(test_refusals);
    JT_RUN(test_loop_threads_do_not_drive);
    JT_RUN(test_second_guest_and_stop);
    JT_RUN(test_withdrawn_requests);
    JT_RUN(test_handover_wait_sleeps);
    JT_RUN(test_parked_thread_looks);
    JT_RUN(test_deferred_post);
    JT_RUN(test_timer_and_kick_wake_a_solitary_loop);
    JT_RUN(test_kick_while_driven);
    JT_RUN(test_async_answer_after_a_guest_turn);
    JT_RUN(test_no_guest_poller);
    JT_RUN(test_blocking_guest);
    JT_RUN(test_guest_callbacks_outside_defer_scope);
    JT_RUN(test_blocking_guest_and_stop);
    JT_RUN(test_work_for_the_thread);
    return jt_finish();
}
