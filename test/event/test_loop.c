/* Event loop: io readiness (edge-triggered), io_mod, io_del inside a batch,
 * the cross-thread task inbox and its wake-up, a task that posts itself
 * again not starving the fds, stop and destroy. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "event/loop.h"
#include "testutil.h"
#include "testutil_loop.h"

#define GUARD_US (5 * 1000 * 1000) /* bounds every wait; never a timing assertion */

static void make_pipe(int fds[2])
{
    int rc = pipe2(fds, O_NONBLOCK | O_CLOEXEC);
    if (rc != 0) abort();
}

/* ---- io ---------------------------------------------------------------- */

typedef struct counting_io {
    jet_io_t io;
    _Atomic int calls;
    _Atomic uint32_t last_events;
    bool in_thread;
} counting_io_t;

static void counting_cb(jet_io_t *io, uint32_t events)
{
    counting_io_t *c = (counting_io_t *)io;
    c->in_thread = jet_loop_in_thread(io->loop) && jet_loop_current() == io->loop;
    atomic_store(&c->last_events, events);
    atomic_fetch_add(&c->calls, 1);
}

static void io_del_fn(void *arg)
{
    JT_CHECK_EQ(jet_loop_io_del(arg), 0);
}

static void test_io_readable_edge(void)
{
    jet_loop_t *loop;
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    int p[2];
    make_pipe(p);
    counting_io_t c = {.io = {.fd = p[0], .events = EPOLLIN, .cb = counting_cb}};
    JT_CHECK_EQ(jet_loop_io_add(loop, &c.io), 0);
    JT_CHECK(c.io.loop == loop);

    JT_CHECK_EQ(write(p[1], "a", 1), 1);
    JT_CHECK(jt_wait_at_least(&c.calls, 1, GUARD_US));
    JT_CHECK(atomic_load(&c.last_events) & EPOLLIN);
    JT_CHECK(c.in_thread);
    /* The byte is still unread: level-triggered would report it on every
     * epoll_wait. Each round trip below makes the loop wait again. */
    for (int i = 0; i < 10; i++)
        jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(atomic_load(&c.calls), 1);

    JT_CHECK_EQ(write(p[1], "b", 1), 1); /* a new edge */
    JT_CHECK(jt_wait_at_least(&c.calls, 2, GUARD_US));
    for (int i = 0; i < 10; i++)
        jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(atomic_load(&c.calls), 2);

    jt_loop_run_on(loop, io_del_fn, &c.io);
    JT_CHECK(c.io.loop == NULL);
    JT_CHECK_EQ(write(p[1], "c", 1), 1);
    for (int i = 0; i < 10; i++)
        jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(atomic_load(&c.calls), 2);

    jt_loop_down(loop);
    close(p[0]);
    close(p[1]);
}

static void test_io_bad_args(void)
{
    jet_loop_t *loop;
    JT_REQUIRE(jet_loop_create(&loop) == 0);
    jet_io_t io = {.fd = -1, .events = EPOLLIN, .cb = counting_cb};
    JT_CHECK_EQ(jet_loop_io_add(loop, &io), -EINVAL);
    io.fd = 0;
    io.cb = NULL;
    JT_CHECK_EQ(jet_loop_io_add(loop, &io), -EINVAL);
    io.cb = counting_cb;
    JT_CHECK_EQ(jet_loop_io_mod(&io, EPOLLOUT), -EINVAL); /* never added */
    JT_CHECK_EQ(jet_loop_io_del(&io), -EINVAL);
    /* A regular file cannot be polled: the epoll error comes back. */
    char path[] = "/tmp/jet_event_XXXXXX";
    int fd = mkstemp(path);
    JT_REQUIRE(fd >= 0);
    unlink(path);
    io.fd = fd;
    JT_CHECK_EQ(jet_loop_io_add(loop, &io), -EPERM);
    JT_CHECK(io.loop == NULL);
    close(fd);
    /* Same fd twice. */
    int p[2];
    make_pipe(p);
    jet_io_t a = {.fd = p[0], .events = EPOLLIN, .cb = counting_cb};
    jet_io_t b = a;
    JT_CHECK_EQ(jet_loop_io_add(loop, &a), 0);
    JT_CHECK_EQ(jet_loop_io_add(loop, &b), -EEXIST);
    JT_CHECK_EQ(jet_loop_io_del(&a), 0);
    JT_CHECK_EQ(jet_loop_start(loop), 0);
    JT_CHECK_EQ(jet_loop_start(loop), -EALREADY);
    jet_loop_destroy(loop); /* stops it */
    close(p[0]);
    close(p[1]);
}

static void test_io_mod_out(void)
{
    jet_loop_t *loop;
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    int p[2];
    make_pipe(p);
    counting_io_t c = {.io = {.fd = p[1], .events = 0, .cb = counting_cb}};
    JT_CHECK_EQ(jet_loop_io_add(loop, &c.io), 0);
    for (int i = 0; i < 5; i++)
        jt_loop_run_on(loop, NULL, NULL);
    JT_CHECK_EQ(atomic_load(&c.calls), 0); /* writable, but not asked for */

    JT_CHECK_EQ(jet_loop_io_mod(&c.io, EPOLLOUT), 0);
    JT_CHECK_EQ(c.io.events, EPOLLOUT);
    JT_CHECK(jt_wait_at_least(&c.calls, 1, GUARD_US));
    JT_CHECK(atomic_load(&c.last_events) & EPOLLOUT);
    JT_CHECK(!(atomic_load(&c.last_events) & EPOLLIN));

    /* Back to nothing: closing the read end still reports EPOLLERR. */
    JT_CHECK_EQ(jet_loop_io_mod(&c.io, 0), 0);
    for (int i = 0; i < 5; i++)
        jt_loop_run_on(loop, NULL, NULL);
    int before = atomic_load(&c.calls);
    close(p[0]);
    JT_CHECK(jt_wait_at_least(&c.calls, before + 1, GUARD_US));
    JT_CHECK(atomic_load(&c.last_events) & EPOLLERR);

    jt_loop_run_on(loop, io_del_fn, &c.io);
    jt_loop_down(loop);
    close(p[1]);
}

/* Two pipes made readable in the same loop iteration: whichever callback runs
 * first deletes the other io, whose event is then already in the batch. */
typedef struct pair_io {
    jet_io_t io;
    struct pair_io *other;
    int calls;
    int fds[2];
} pair_io_t;

static void pair_cb(jet_io_t *io, uint32_t events)
{
    pair_io_t *p = (pair_io_t *)io;
    p->calls++;
    if (p->other->io.loop) JT_CHECK_EQ(jet_loop_io_del(&p->other->io), 0);
}

static void pair_fire(void *arg)
{
    pair_io_t *pr = arg;
    /* Both writes happen before the loop's next epoll_wait. */
    JT_CHECK_EQ(write(pr[0].fds[1], "x", 1), 1);
    JT_CHECK_EQ(write(pr[1].fds[1], "x", 1), 1);
}

static void pair_del_rest(void *arg)
{
    pair_io_t *pr = arg;
    for (int i = 0; i < 2; i++)
        if (pr[i].io.loop) jet_loop_io_del(&pr[i].io);
}

static void test_io_del_in_batch(void)
{
    jet_loop_t *loop;
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    for (int round = 0; round < 200; round++) {
        pair_io_t pr[2];
        memset(pr, 0, sizeof pr);
        for (int i = 0; i < 2; i++) {
            make_pipe(pr[i].fds);
            pr[i].other = &pr[1 - i];
            pr[i].io = (jet_io_t){.fd = pr[i].fds[0], .events = EPOLLIN, .cb = pair_cb};
            JT_REQUIRE(jet_loop_io_add(loop, &pr[i].io) == 0);
        }
        jt_loop_run_on(loop, pair_fire, pr);
        for (int i = 0; i < 3; i++)
            jt_loop_run_on(loop, NULL, NULL);
        /* Exactly one ran; the deleted one never did. */
        JT_CHECK_EQ(pr[0].calls + pr[1].calls, 1);
        jt_loop_run_on(loop, pair_del_rest, pr);
        for (int i = 0; i < 2; i++) {
            close(pr[i].fds[0]);
            close(pr[i].fds[1]);
        }
        if (jt_case_failed) break;
    }
    jt_loop_down(loop);
}

/* ---- tasks ------------------------------------------------------------- */

#define PRODUCERS    4
#define PER_PRODUCER 100000

typedef struct seq_task {
    jet_task_t task;
    int producer;
    int seq;
    int runs;
} seq_task_t;

static int seq_next[PRODUCERS]; /* loop thread only */
static _Atomic int seq_total, seq_disorder, seq_off_thread;
static jet_loop_t *seq_loop;

static void seq_task_fn(jet_task_t *t)
{
    seq_task_t *s = (seq_task_t *)t;
    if (!jet_loop_in_thread(seq_loop)) atomic_fetch_add(&seq_off_thread, 1);
    if (s->seq != seq_next[s->producer]) atomic_fetch_add(&seq_disorder, 1);
    seq_next[s->producer] = s->seq + 1;
    s->runs++;
    atomic_fetch_add(&seq_total, 1);
}

static void *seq_producer(void *arg)
{
    seq_task_t *tasks = arg;
    for (int i = 0; i < PER_PRODUCER; i++)
        jet_loop_post(seq_loop, &tasks[i].task);
    return NULL;
}

static void test_post_many_producers(void)
{
    JT_REQUIRE(jt_loop_up(&seq_loop) == 0);
    seq_task_t *tasks = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof *tasks);
    JT_REQUIRE(tasks);
    for (int p = 0; p < PRODUCERS; p++) {
        for (int i = 0; i < PER_PRODUCER; i++) {
            seq_task_t *s = &tasks[p * PER_PRODUCER + i];
            s->task.fn = seq_task_fn;
            s->producer = p;
            s->seq = i;
        }
    }
    pthread_t th[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++)
        JT_REQUIRE(pthread_create(&th[p], NULL, seq_producer, &tasks[p * PER_PRODUCER]) == 0);
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    JT_CHECK(jt_wait_at_least(&seq_total, PRODUCERS * PER_PRODUCER, 120 * 1000000LL));
    jet_loop_stop(seq_loop);
    JT_CHECK_EQ(atomic_load(&seq_total), PRODUCERS * PER_PRODUCER);
    JT_CHECK_EQ(atomic_load(&seq_disorder), 0);
    JT_CHECK_EQ(atomic_load(&seq_off_thread), 0);
    int bad = 0;
    for (int i = 0; i < PRODUCERS * PER_PRODUCER; i++)
        bad += tasks[i].runs != 1;
    JT_CHECK_EQ(bad, 0);
    jet_loop_destroy(seq_loop);
    free(tasks);
}

typedef struct flag_task {
    jet_task_t task;
    _Atomic int done;
} flag_task_t;

static void flag_task_fn(jet_task_t *t)
{
    atomic_store(&((flag_task_t *)t)->done, 1);
}

/* A post to a loop blocked in epoll_wait(-1) must wake it. Many rounds, with
 * and without a pause, so that posts land both well inside the sleep and
 * right around the moment the loop goes to sleep. */
static void test_post_wakes_sleeping_loop(void)
{
    jet_loop_t *loop;
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    for (int round = 0; round < 20000; round++) {
        if (round < 20) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        flag_task_t t = {.task.fn = flag_task_fn};
        jet_loop_post(loop, &t.task);
        if (!jt_wait_at_least(&t.done, 1, GUARD_US)) {
            JT_CHECK(!"post did not wake the loop");
            abort(); /* t is on this stack */
        }
    }
    jt_loop_down(loop);
}

/* Two loops bounce one task back and forth: each post lands while the
 * receiving loop is finishing its previous iteration and about to sleep, the
 * window where a wake-up is easiest to lose. A lost one stalls the chain. */
typedef struct ping {
    jet_task_t task;
    jet_loop_t *loops[2];
    int at;
    _Atomic int hops;
    int limit;
} ping_t;

static void ping_fn(jet_task_t *t)
{
    ping_t *p = (ping_t *)t;
    if (atomic_fetch_add(&p->hops, 1) + 1 >= p->limit) return;
    p->at ^= 1;
    jet_loop_post(p->loops[p->at], &p->task);
}

static void test_post_ping_pong(void)
{
    ping_t p = {.task.fn = ping_fn, .limit = 200000};
    for (int i = 0; i < 2; i++) {
        JT_REQUIRE(jt_loop_up(&p.loops[i]) == 0);
    }
    jet_loop_post(p.loops[0], &p.task);
    /* Guard on progress, not on total time. */
    int seen = 0;
    while (seen < p.limit) {
        if (!jt_wait_at_least(&p.hops, seen + 1, GUARD_US)) {
            JT_CHECK(!"ping-pong stalled: a wake-up was lost");
            abort(); /* p is on this stack */
        }
        seen = atomic_load(&p.hops);
    }
    for (int i = 0; i < 2; i++) {
        jt_loop_down(p.loops[i]);
    }
    JT_CHECK_EQ(atomic_load(&p.hops), p.limit);
}

static _Atomic int queued_runs;
static void queued_fn(jet_task_t *t)
{
    atomic_fetch_add(&queued_runs, 1);
}

/* Tasks posted before start, and tasks still queued at stop, all run. */
static void test_stop_runs_queued_tasks(void)
{
    enum { N = 5000 };
    static jet_task_t tasks[N];
    jet_loop_t *loop;
    JT_REQUIRE(jet_loop_create(&loop) == 0);
    atomic_store(&queued_runs, 0);
    for (int i = 0; i < N / 2; i++) {
        tasks[i].fn = queued_fn;
        jet_loop_post(loop, &tasks[i]);
    }
    JT_REQUIRE(jet_loop_start(loop) == 0);
    for (int i = N / 2; i < N; i++) {
        tasks[i].fn = queued_fn;
        jet_loop_post(loop, &tasks[i]);
    }
    jet_loop_stop(loop);
    JT_CHECK_EQ(atomic_load(&queued_runs), N);
    /* A stopped loop can be started again. */
    flag_task_t t = {.task.fn = flag_task_fn};
    JT_CHECK_EQ(jet_loop_start(loop), 0);
    jet_loop_post(loop, &t.task);
    JT_CHECK(jt_wait_at_least(&t.done, 1, GUARD_US));
    jet_loop_destroy(loop);
}

/* Tests create and destroy many loops: no fd or memory may leak. */
/* A task that posts itself again each time it runs, a millisecond each
 * (as a connection's read that always finds more spends its budget and
 * goes on later): the loop's fds still get their turn between two of its
 * runs, not after a whole batch of them (1024 runs: a second). */
typedef struct reposting {
    jet_task_t task;
    jet_loop_t *loop;
    _Atomic int runs;
    _Atomic bool stop;
} reposting_t;

static void reposting_fn(jet_task_t *t)
{
    reposting_t *r = (reposting_t *)t;
    atomic_fetch_add(&r->runs, 1);
    int64_t until = (int64_t)jt_now_us() + 1000;
    while ((int64_t)jt_now_us() < until) {
    }
    if (!atomic_load(&r->stop)) jet_loop_post(r->loop, &r->task);
}

static void test_reposting_task_lets_fds_in(void)
{
    jet_loop_t *loop;
    JT_REQUIRE(jt_loop_up(&loop) == 0);
    int p[2];
    make_pipe(p);
    counting_io_t c = {.io = {.fd = p[0], .events = EPOLLIN, .cb = counting_cb}};
    JT_CHECK_EQ(jet_loop_io_add(loop, &c.io), 0);
    static reposting_t r;
    r = (reposting_t){.task.fn = reposting_fn, .loop = loop};
    jet_loop_post(loop, &r.task);
    JT_CHECK(jt_wait_at_least(&r.runs, 5, GUARD_US));
    int64_t worst = 0;
    for (int i = 0; i < 5; i++) {
        int before = atomic_load(&c.calls);
        int64_t t0 = jt_now_ms();
        char b = 'x';
        JT_CHECK_EQ(write(p[1], &b, 1), 1);
        JT_CHECK(jt_wait_at_least(&c.calls, before + 1, GUARD_US));
        int64_t took = jt_now_ms() - t0;
        if (took > worst) worst = took;
        char drain[16];
        while (read(p[0], drain, sizeof drain) > 0) {
        }
    }
    fprintf(stderr, "  an fd event waited at most %lld ms behind the reposting task\n",
            (long long)worst);
    /* A few runs at most (1 ms each), not a batch of 1024. */
    JT_CHECK(worst < 300);
    atomic_store(&r.stop, true);
    jt_loop_run_on(loop, io_del_fn, &c.io);
    jt_loop_down(loop);
    close(p[0]);
    close(p[1]);
}

static void test_create_destroy_many(void)
{
    int probe = dup(0);
    JT_REQUIRE(probe >= 0);
    close(probe);
    for (int i = 0; i < 300; i++) {
        jet_loop_t *loop;
        JT_REQUIRE(jet_loop_create(&loop) == 0);
        JT_CHECK_EQ(jet_loop_index(loop), -1);
        JT_CHECK(!jet_loop_in_thread(loop));
        if (i % 3 != 0) JT_REQUIRE(jet_loop_start(loop) == 0);
        if (i % 3 == 1) jet_loop_stop(loop);
        jet_loop_destroy(loop);
    }
    jet_loop_stop(NULL);
    jet_loop_destroy(NULL);
    int after = dup(0);
    JT_CHECK_EQ(after, probe); /* lowest free fd is unchanged */
    close(after);
}

int main(void)
{
    JT_RUN(test_io_readable_edge);
    JT_RUN(test_io_bad_args);
    JT_RUN(test_io_mod_out);
    JT_RUN(test_io_del_in_batch);
    JT_RUN(test_post_many_producers);
    JT_RUN(test_post_wakes_sleeping_loop);
    JT_RUN(test_post_ping_pong);
    JT_RUN(test_stop_runs_queued_tasks);
    JT_RUN(test_reposting_task_lets_fds_in);
    JT_RUN(test_create_destroy_many);
    return jt_finish();
}
