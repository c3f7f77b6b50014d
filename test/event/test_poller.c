/* Busy-poll pollers (run every iteration, removable from inside, io and tasks
 * still served) and the process-wide loop group. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "event/loop.h"
#include "jetrpc/flags.h"
#include "testutil.h"
#include "testutil_loop.h"

JET_FLAG_DECLARE_BOOL(event_poll_yield);
JET_FLAG_DECLARE_INT32(event_busy_epoll_us);
JET_FLAG_DECLARE_INT32(event_busy_epoll_watch_us);

#define GUARD_US (5 * 1000 * 1000)

static jet_loop_t *loop;

typedef struct count_poller {
    jet_poller_t p;
    _Atomic int runs;
    int stop_at;                 /* removes itself on this run (0: never) */
    struct count_poller *victim; /* removed on its first run */
} count_poller_t;

static int count_poll(jet_poller_t *p)
{
    count_poller_t *c = (count_poller_t *)p;
    if (!jet_loop_in_thread(loop)) abort();
    int n = atomic_fetch_add(&c->runs, 1) + 1;
    if (c->victim) {
        jet_loop_poller_del(loop, &c->victim->p);
        c->victim = NULL;
    }
    if (c->stop_at && n == c->stop_at) jet_loop_poller_del(loop, p);
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

static void test_pollers_run_repeatedly(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    count_poller_t a = {.p.poll = count_poll};
    count_poller_t b = {.p.poll = count_poll};
    jt_loop_run_on(loop, add_poller, &a.p);
    jt_loop_run_on(loop, add_poller, &b.p);
    jt_loop_run_on(loop, add_poller, &a.p); /* a second add is refused, not a loop */
    /* No events, no tasks: only busy polling keeps calling them. */
    JT_CHECK(jt_wait_at_least(&a.runs, 1000, GUARD_US));
    JT_CHECK(jt_wait_at_least(&b.runs, 1000, GUARD_US));
    jt_loop_run_on(loop, del_poller, &a.p);
    jt_loop_run_on(loop, del_poller, &a.p); /* not registered: no effect */
    int a_after = atomic_load(&a.runs);
    int b_before = atomic_load(&b.runs);
    JT_CHECK(jt_wait_at_least(&b.runs, b_before + 1000, GUARD_US));
    JT_CHECK_EQ(atomic_load(&a.runs), a_after);
    jt_loop_run_on(loop, del_poller, &b.p);
    int b_after = atomic_load(&b.runs);
    for (int i = 0; i < 10; i++)
        jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(atomic_load(&b.runs), b_after);
    jt_loop_down(loop);
}

static void add_victim_killer(void *arg)
{
    count_poller_t *killer = arg;
    jet_loop_poller_add(loop, &killer->victim->p);
    jet_loop_poller_add(loop, &killer->p);
}

static void test_poller_removes_itself_and_next(void)
{
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    count_poller_t self = {.p.poll = count_poll, .stop_at = 10};
    count_poller_t victim = {.p.poll = count_poll};
    count_poller_t killer = {.p.poll = count_poll, .victim = &victim};
    count_poller_t keep = {.p.poll = count_poll};
    jt_loop_run_on(loop, add_poller, &keep.p);
    jt_loop_run_on(loop, add_poller, &self.p);
    JT_CHECK(jt_wait_at_least(&self.runs, 10, GUARD_US));
    /* Added at the head, in one task: the next pass runs killer, then victim
     * (removed by killer just before its turn), then keep. */
    jt_loop_run_on(loop, add_victim_killer, &killer);
    int keep_before = atomic_load(&keep.runs);
    JT_CHECK(jt_wait_at_least(&keep.runs, keep_before + 1000, GUARD_US));
    JT_CHECK_EQ(atomic_load(&self.runs), 10);
    JT_CHECK_EQ(atomic_load(&victim.runs), 0);
    JT_CHECK(atomic_load(&killer.runs) > 0);
    jt_loop_run_on(loop, del_poller, &killer.p);
    jt_loop_run_on(loop, del_poller, &keep.p);
    jt_loop_down(loop);
}

/* ---- busy-poll still serves io and tasks ------------------------------- */

typedef struct read_io {
    jet_io_t io;
    _Atomic int bytes;
} read_io_t;

static void read_cb(jet_io_t *io, uint32_t events)
{
    read_io_t *r = (read_io_t *)io;
    char buf[64];
    ssize_t n;
    /* Edge-triggered: read until EAGAIN. */
    while ((n = read(io->fd, buf, sizeof buf)) > 0)
        atomic_fetch_add(&r->bytes, (int)n);
}

static void io_del_fn(void *arg)
{
    jet_loop_io_del(arg);
}

typedef struct flag_task {
    jet_task_t task;
    _Atomic int *counter;
} flag_task_t;

static void flag_task_fn(jet_task_t *t)
{
    atomic_fetch_add(((flag_task_t *)t)->counter, 1);
}

/* Starts the loop with an idle poller (a busy-poll loop) that has run 100
 * times, and adds the read end of a new pipe p to it as r. false when the
 * loop or the pipe could not be made. */
static bool busy_loop_with_pipe(count_poller_t *idle, int p[2], read_io_t *r, bool watch_only)
{
    if (jt_loop_up(&loop) != 0) return false;
    *idle = (count_poller_t){.p.poll = count_poll};
    jt_loop_run_on(loop, add_poller, &idle->p);
    JT_CHECK(jt_wait_at_least(&idle->runs, 100, GUARD_US));
    if (pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) {
        jt_loop_run_on(loop, del_poller, &idle->p);
        jt_loop_down(loop);
        return false;
    }
    *r =
        (read_io_t){.io = {.fd = p[0], .events = EPOLLIN, .cb = read_cb, .watch_only = watch_only}};
    JT_CHECK_EQ(jet_loop_io_add(loop, &r->io), 0);
    return true;
}

/* Undoes busy_loop_with_pipe. */
static void busy_loop_down(count_poller_t *idle, int p[2], read_io_t *r)
{
    jt_loop_run_on(loop, io_del_fn, &r->io);
    jt_loop_run_on(loop, del_poller, &idle->p);
    jt_loop_down(loop);
    close(p[0]);
    close(p[1]);
}

static void busy_poll_serves(bool yield)
{
    JET_FLAG_STORE(event_poll_yield, yield);
    count_poller_t idle;
    int p[2];
    read_io_t r;
    JT_REQUIRE(busy_loop_with_pipe(&idle, p, &r, false));
    for (int i = 1; i <= 100; i++) {
        JT_CHECK_EQ(write(p[1], "z", 1), 1);
        JT_REQUIRE(jt_wait_at_least(&r.bytes, i, GUARD_US));
    }

    enum { N = 10000 };
    static flag_task_t tasks[N];
    static _Atomic int ran;
    atomic_store(&ran, 0);
    for (int i = 0; i < N; i++) {
        tasks[i] = (flag_task_t){.task.fn = flag_task_fn, .counter = &ran};
        jet_loop_post(loop, &tasks[i].task);
    }
    JT_CHECK(jt_wait_at_least(&ran, N, GUARD_US * 4));

    jt_loop_run_on(loop, io_del_fn, &r.io);
    jt_loop_run_on(loop, del_poller, &idle.p);
    /* Without pollers it sleeps again, and a post still wakes it. */
    jt_loop_run_on(loop, NULL, NULL);
    jt_loop_down(loop);
    close(p[0]);
    close(p[1]);
    JET_FLAG_STORE(event_poll_yield, false);
}

static void test_busy_poll_serves_io_and_tasks(void)
{
    busy_poll_serves(false);
}
static void test_busy_poll_yield_serves_io_and_tasks(void)
{
    busy_poll_serves(true);
}

static void watch_only_on(void *arg)
{
    jet_loop_io_watch_only(arg, true);
}
static void watch_only_off(void *arg)
{
    jet_loop_io_watch_only(arg, false);
}

/* The fds' looks of a busy-poll loop over about ms milliseconds; *us_p:
 * how long that really was. */
static uint64_t epolls_during(int ms, int64_t *us_p)
{
    int64_t t0 = (int64_t)jt_now_us();
    uint64_t a = jet__loop_epolls(loop);
    usleep((useconds_t)ms * 1000);
    uint64_t n = jet__loop_epolls(loop) - a;
    *us_p = (int64_t)jt_now_us() - t0;
    return n;
}

/* A busy-poll loop whose fds are all watch-only looks at them every
 * event_busy_epoll_watch_us (here 20 ms), one with an ordinary fd every
 * event_busy_epoll_us; a watch-only fd's events are still delivered. */
static void test_busy_poll_watch_only(void)
{
    int32_t old_us = JET_FLAG(event_busy_epoll_us), old_watch = JET_FLAG(event_busy_epoll_watch_us);
    JET_FLAG_STORE(event_busy_epoll_us, 20);
    JET_FLAG_STORE(event_busy_epoll_watch_us, 20000);
    count_poller_t idle;
    int p[2];
    read_io_t r;
    JT_REQUIRE(busy_loop_with_pipe(&idle, p, &r, true));

    /* One look per 20 ms at most, plus slack for the edges. */
    int64_t us1, us2, us3;
    uint64_t lazy = epolls_during(300, &us1);
    JT_CHECK_EQ(write(p[1], "z", 1), 1);
    JT_CHECK(jt_wait_at_least(&r.bytes, 1, GUARD_US));
    jt_loop_run_on(loop, watch_only_off, &r.io);
    uint64_t eager = epolls_during(300, &us2); /* up to 15000 on an idle machine */
    jt_loop_run_on(loop, watch_only_on, &r.io);
    uint64_t lazy_again = epolls_during(300, &us3);
    fprintf(stderr,
            "  looks: watch-only %llu in %lld ms, ordinary %llu in %lld ms, watch-only again "
            "%llu in %lld ms\n",
            (unsigned long long)lazy, (long long)us1 / 1000, (unsigned long long)eager,
            (long long)us2 / 1000, (unsigned long long)lazy_again, (long long)us3 / 1000);
    JT_CHECK(lazy <= (uint64_t)(us1 / 20000) + 3);
    JT_CHECK(lazy_again <= (uint64_t)(us3 / 20000) + 3);
    JT_CHECK(eager >= 100);
    JT_CHECK_EQ(write(p[1], "y", 1), 1);
    JT_CHECK(jt_wait_at_least(&r.bytes, 2, GUARD_US));

    busy_loop_down(&idle, p, &r);
    JET_FLAG_STORE(event_busy_epoll_us, old_us);
    JET_FLAG_STORE(event_busy_epoll_watch_us, old_watch);
}

/* The fd periods are read as the flags' range [0, 1 s], whatever code
 * stored: a busy-poll loop told to look at its fds every INT32_MAX us (35
 * minutes) still sees a pipe's byte within a second, ordinary or watch-only;
 * a negative period looks every pass. Before, the byte waited 35 minutes. */
static void test_busy_poll_fd_period_clamped(void)
{
    int32_t old_us = JET_FLAG(event_busy_epoll_us), old_watch = JET_FLAG(event_busy_epoll_watch_us);
    JET_FLAG_STORE(event_busy_epoll_us, INT32_MAX);
    JET_FLAG_STORE(event_busy_epoll_watch_us, INT32_MAX);
    count_poller_t idle;
    int p[2];
    read_io_t r;
    JT_REQUIRE(busy_loop_with_pipe(&idle, p, &r, false));
    for (int i = 1; i <= 2; i++) {
        if (i == 2) jt_loop_run_on(loop, watch_only_on, &r.io);
        usleep(50000); /* well after the add and the loop's last look */
        int64_t t0 = (int64_t)jt_now_us();
        JT_CHECK_EQ(write(p[1], "z", 1), 1);
        JT_CHECK(jt_wait_at_least(&r.bytes, i, 3 * 1000 * 1000));
        int64_t us = (int64_t)jt_now_us() - t0;
        fprintf(stderr, "  %s fd: byte seen after %lld ms\n", i == 1 ? "ordinary" : "watch-only",
                (long long)us / 1000);
        JT_CHECK(us < 2 * 1000 * 1000);
    }
    JET_FLAG_STORE(event_busy_epoll_us, -5);
    JET_FLAG_STORE(event_busy_epoll_watch_us, -5);
    int64_t us;
    uint64_t looks = epolls_during(100, &us);
    fprintf(stderr, "  negative periods: %llu looks in %lld ms\n", (unsigned long long)looks,
            (long long)us / 1000);
    JT_CHECK(looks >= 100);
    busy_loop_down(&idle, p, &r);
    JET_FLAG_STORE(event_busy_epoll_us, old_us);
    JET_FLAG_STORE(event_busy_epoll_watch_us, old_watch);
}

/* ---- the group --------------------------------------------------------- */

typedef struct where {
    jet_loop_t *current;
    bool in_thread;
    int index;
    char name[16];
} where_t;

static void where_fn(void *arg)
{
    where_t *w = arg;
    w->current = jet_loop_current();
    w->in_thread = jet_loop_in_thread(w->current);
    w->index = jet_loop_index(w->current);
    pthread_getname_np(pthread_self(), w->name, sizeof w->name);
}

static void test_group(void)
{
    JT_CHECK(jet_loop_current() == NULL);
    JT_CHECK_EQ(jet_loops_start(2), 0);
    JT_CHECK_EQ(jet_loops_start(3), 0); /* once: later calls change nothing */
    JT_REQUIRE(jet_loops_count() == 2);
    JT_CHECK(jet_loop_at(-1) == NULL);
    JT_CHECK(jet_loop_at(2) == NULL);
    jet_loop_t *l0 = jet_loop_at(0), *l1 = jet_loop_at(1);
    JT_REQUIRE(l0 && l1 && l0 != l1);
    JT_CHECK_EQ(jet_loop_index(l0), 0);
    JT_CHECK_EQ(jet_loop_index(l1), 1);
    JT_CHECK(!jet_loop_in_thread(l0));
    JT_CHECK(jet_loop_current() == NULL);

    /* Round-robin: consecutive picks alternate and cover both loops. */
    jet_loop_t *first = jet_loop_pick();
    JT_REQUIRE(first == l0 || first == l1);
    for (int i = 1; i < 10; i++) {
        jet_loop_t *next = jet_loop_pick();
        JT_CHECK(next == ((i % 2) ? (first == l0 ? l1 : l0) : first));
    }

    for (int i = 0; i < 2; i++) {
        where_t w = {0};
        jt_loop_run_on(jet_loop_at(i), where_fn, &w);
        JT_CHECK(w.current == jet_loop_at(i));
        JT_CHECK(w.in_thread);
        JT_CHECK_EQ(w.index, i);
        char want[16];
        snprintf(want, sizeof want, "jet_loop_%d", i);
        JT_CHECK(strcmp(w.name, want) == 0);
    }
}

/* jet_loops_start from many threads at once: one group. */
static void *start_racer(void *arg)
{
    if (jet_loops_start(2) != 0) return NULL;
    *(jet_loop_t **)arg = jet_loop_pick();
    return NULL;
}

static void test_group_concurrent_start(void)
{
    pthread_t th[4];
    jet_loop_t *got[4] = {0};
    for (int i = 0; i < 4; i++)
        JT_REQUIRE(pthread_create(&th[i], NULL, start_racer, &got[i]) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        JT_REQUIRE(got[i]);
        JT_CHECK(got[i] == jet_loop_at(jet_loop_index(got[i])));
    }
    JT_CHECK_EQ(jet_loops_count(), 2);
}

int main(void)
{
    JT_RUN(test_pollers_run_repeatedly);
    JT_RUN(test_poller_removes_itself_and_next);
    JT_RUN(test_busy_poll_serves_io_and_tasks);
    JT_RUN(test_busy_poll_yield_serves_io_and_tasks);
    JT_RUN(test_busy_poll_watch_only);
    JT_RUN(test_busy_poll_fd_period_clamped);
    JT_RUN(test_group_concurrent_start);
    JT_RUN(test_group);
    return jt_finish();
}
