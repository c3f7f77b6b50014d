#include "event/loop.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/time.h"
#include "jetrpc/flags.h"

#define LOOP_MAX_EVENTS 65536
#define LOOP_MAX_GROUP  1024
#define LOOP_PARK_MIN_US          10 /* event_guest_park_us */
#define LOOP_PARK_MAX_US          100000
#define LOOP_PARK_SOLITARY_MAX_US 1000000 /* event_guest_park_solitary_us */
#define LOOP_EPOLL_MAX_US         1000000 /* event_busy_epoll_us, event_busy_epoll_watch_us */

JET_FLAG_DEFINE_INT32_RANGE(event_loop_num, 0, 0, LOOP_MAX_GROUP,
                            "Event-loop threads in the process group (0: one per core)");
JET_FLAG_DEFINE_BOOL(event_poll_yield, false,
                     "In busy-poll mode, sched_yield() after an iteration that found no work");
JET_FLAG_DEFINE_INT32_RANGE(event_max_events, 256, 1, LOOP_MAX_EVENTS,
                            "Most epoll events fetched by one epoll_wait");
JET_FLAG_DEFINE_INT32_RANGE(
    event_busy_epoll_us, 20, 0, LOOP_EPOLL_MAX_US,
    "A busy-poll loop (one with pollers) looks at its file descriptors at most "
    "this often, in microseconds; its pollers, tasks and timers run every pass");
JET_FLAG_DEFINE_INT32_RANGE(
    event_busy_epoll_watch_us, 200, 0, LOOP_EPOLL_MAX_US,
    "A busy-poll loop whose file descriptors are all watch-only (connections "
    "whose data runs over URMA or UBRing: their TCP only tells that the peer is "
    "gone) looks at them at most this often, in microseconds");
JET_FLAG_DEFINE_BOOL(event_guest_drive, true,
                     "A thread waiting for a synchronous call runs its busy-poll loop's "
                     "iterations itself while the loop thread sleeps (one spinning thread instead "
                     "of two)");
JET_FLAG_DEFINE_BOOL(event_guest_block, true,
                     "A thread waiting for a synchronous call on a loop that sleeps in epoll and "
                     "serves only that call's connection waits in the loop's epoll itself while "
                     "the loop thread sleeps: the answer wakes the waiting thread directly (one "
                     "wake-up instead of two); needs event_guest_drive");
JET_FLAG_DEFINE_INT32_RANGE(
    event_guest_park_us, 200, LOOP_PARK_MIN_US, LOOP_PARK_MAX_US,
    "Longest a busy-poll loop that serves other connections or timers stays "
    "undriven after a waiting thread returned it, before the loop thread takes "
    "it back");
JET_FLAG_DEFINE_INT32_RANGE(
    event_guest_park_solitary_us, 20000, LOOP_PARK_MIN_US, LOOP_PARK_SOLITARY_MAX_US,
    "Longest a busy-poll loop whose only fd is the waiting threads' connection "
    "stays undriven after a waiting thread returned it (posts, asynchronous "
    "calls and due timers wake its thread at once); at least event_guest_park_us");

/* Who runs a loop's iterations (the futex word `baton`). */
enum {
    LOOP_RUN = 0,   /* the loop thread */
    LOOP_WANT = 1,  /* the loop thread, asked to hand over after this iteration */
    LOOP_GUEST = 2, /* a waiting thread (jet_loop_drive); the loop thread is parked */
    LOOP_IDLE = 3,  /* nobody: the guest left; the loop thread or a guest takes it */
};

/* Tasks run per iteration before the loop goes back to epoll, so that a
 * flood of posts cannot starve I/O and timers. */
#define LOOP_TASK_BATCH 1024
#define LOOP_HEAP_INIT  64
/* How long a would-be guest of a busy-poll loop spins for the hand-over
 * before it sleeps for it (loop_drive). */
#define LOOP_HANDOVER_SPIN_US 20

struct jet_loop {
    int epfd;
    int wakefd;
    int index; /* position in the group, -1 for a standalone loop */
    bool started;
    pthread_t thread;
    _Atomic bool stop;

    /* Timers: binary min-heap on deadline_us; each timer knows its slot. */
    jet_timer_t **heap;
    uint32_t heap_len;
    uint32_t heap_cap;

    jet_poller_t *pollers;
    /* The poller to run after the current one; poller_del advances it so a
     * poller may remove any other poller (or itself) from its callback. */
    jet_poller_t *poll_next;

    /* The epoll batch being dispatched, so io_del can cancel entries that
     * were fetched but not yet delivered. */
    int batch_n;
    int batch_i;
    int max_events;
    struct epoll_event *events;

    /* Busy-poll pollers registered that a guest may drive the loop for
     * (no_guest ones are not counted): read by would-be guests on any
     * thread; 0 also means the loop's own thread must run it. */
    _Atomic int npollers;
    _Atomic int nown;      /* no_guest pollers registered: the thread must run */
    _Atomic int nio;       /* registered fds (io_add - io_del) */
    _Atomic int neager;    /* registered fds not watch-only (internal ones included) */
    int64_t last_epoll_us; /* busy-poll: when the fds were last looked at */
    uint32_t idle_passes; /* busy-poll passes in a row that found no work */
    int64_t now_us;        /* the current iteration's clock */
    /* Tasks for the loop's own thread (jet_loop_post_thread), in order:
     * touched only by whoever holds the loop, which a guest leaves once
     * there is one. */
    jet_mpsc_node_t *thread_first, *thread_last;
    int64_t guest_until_us; /* a blocking guest's deadline (its epoll waits end by then) */

    /* Written by posters, read by the loop: kept away from the loop-private
     * fields above and from the inbox head that posters swap. */
    _Alignas(64) _Atomic int sleeping;
    _Atomic uint32_t baton; /* LOOP_*; the loop thread parks on it */
    /* Published by a leaving guest (the loop's clock then, and its earliest
     * timer) and by the parked thread (when it will look again). */
    _Atomic int64_t left_us;
    _Atomic int64_t timer_due_us;
    _Atomic int64_t park_until_us;
    _Atomic uint32_t park_seq; /* the parked thread's futex word: bumped by wakers */
    _Atomic int handover_sleeps; /* a blocking guest sleeps on `baton` for the loop */
    /* Set by whoever needs the loop thread to drive the loop once nobody
     * else does (a post that found it undriven or being left, a guest that
     * leaves tasks behind, jet_loop_kick); cleared by the thread when it
     * takes the loop. A leaving guest that sees it wakes the thread. */
    _Atomic bool want_thread;
    /* Until then the loop is not solitary: asynchronous calls were issued
     * on it (jet_loop_kick), whose answers nobody waits for by driving. */
    _Atomic int64_t shared_until_us;
    _Atomic uint64_t looks;    /* parks the loop thread woke from (jet__loop_looks) */
    _Atomic uint64_t epolls;   /* epoll_wait calls (jet__loop_epolls) */
    _Atomic uint64_t wakes;    /* eventfd writes and futex wakes (jet__loop_wakes) */
    _Alignas(64) jet_mpsc_t inbox;
};

static __thread jet_loop_t *loop_tls_current;
static __thread bool loop_tls_guest; /* loop_tls_current is driven as a guest */
/* jet_loop_defer_*: the scope depth and the loop whose wake-up is owed. */
static __thread int loop_tls_defer_depth;
static __thread jet_loop_t *loop_tls_deferred;

/* Owner check for loop-thread-only calls: the loop thread, or any single
 * thread while the loop's thread is not running (set-up and tear-down). */
#define LOOP_ASSERT_OWNER(loop) assert(!(loop)->started || jet_loop_in_thread(loop))

/* ---- timers ------------------------------------------------------------ */

static inline void heap_set(jet_loop_t *loop, uint32_t i, jet_timer_t *t)
{
    loop->heap[i] = t;
    t->heap_index = i;
}

static void heap_up(jet_loop_t *loop, uint32_t i)
{
    jet_timer_t *t = loop->heap[i];
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        jet_timer_t *p = loop->heap[parent];
        if (p->deadline_us <= t->deadline_us) break;
        heap_set(loop, i, p);
        i = parent;
    }
    heap_set(loop, i, t);
}

static void heap_down(jet_loop_t *loop, uint32_t i)
{
    jet_timer_t *t = loop->heap[i];
    uint32_t n = loop->heap_len;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && loop->heap[c + 1]->deadline_us < loop->heap[c]->deadline_us) c++;
        if (t->deadline_us <= loop->heap[c]->deadline_us) break;
        heap_set(loop, i, loop->heap[c]);
        i = c;
    }
    heap_set(loop, i, t);
}

static void heap_remove(jet_loop_t *loop, uint32_t i)
{
    jet_timer_t *t = loop->heap[i];
    uint32_t last = --loop->heap_len;
    if (i != last) {
        jet_timer_t *moved = loop->heap[last];
        heap_set(loop, i, moved);
        if (i > 0 && moved->deadline_us < loop->heap[(i - 1) / 2]->deadline_us)
            heap_up(loop, i);
        else
            heap_down(loop, i);
    }
    loop->heap[last] = NULL;
    t->heap_index = UINT32_MAX;
}

/* An armed timer belongs to this loop only if its slot points back at it. */
static inline bool heap_owns(const jet_loop_t *loop, const jet_timer_t *t)
{
    return t->heap_index < loop->heap_len && loop->heap[t->heap_index] == t;
}

void jet_loop_timer_start(jet_loop_t *loop, jet_timer_t *t, int64_t deadline_us)
{
    LOOP_ASSERT_OWNER(loop);
    if (jet_timer_armed(t)) {
        if (!heap_owns(loop, t)) {
            JET_ERROR("timer %p is armed on another loop; not re-armed", (void *)t);
            return;
        }
        int64_t old = t->deadline_us;
        t->deadline_us = deadline_us;
        if (deadline_us < old)
            heap_up(loop, t->heap_index);
        else
            heap_down(loop, t->heap_index);
        return;
    }
    if (loop->heap_len == loop->heap_cap) {
        /* Grows by doubling, so a loop reallocates only while its number of
         * simultaneously armed timers reaches a new high. */
        uint32_t cap = loop->heap_cap * 2;
        jet_timer_t **heap = cap > loop->heap_cap ? realloc(loop->heap, cap * sizeof *heap) : NULL;
        if (!heap) {
            /* The header gives timer_start no way to fail; a timer that never
             * fires would hang its owner silently, so stop loudly instead. */
            JET_ERROR("event loop: cannot grow the timer heap beyond %u timers", loop->heap_cap);
            abort();
        }
        loop->heap = heap;
        loop->heap_cap = cap;
    }
    t->deadline_us = deadline_us;
    loop->heap[loop->heap_len] = t;
    t->heap_index = loop->heap_len++;
    heap_up(loop, t->heap_index);
}

void jet_loop_timer_stop(jet_loop_t *loop, jet_timer_t *t)
{
    LOOP_ASSERT_OWNER(loop);
    if (!jet_timer_armed(t)) return;
    if (!heap_owns(loop, t)) {
        JET_ERROR("timer %p is armed on another loop; not stopped", (void *)t);
        return;
    }
    heap_remove(loop, t->heap_index);
}

/* Fires the timers due at now. A callback that re-arms a timer in the past
 * would otherwise keep this pass going forever: the pass fires at most as
 * many timers as were armed when it began, the rest wait one iteration. */
static int loop_run_timers(jet_loop_t *loop, int64_t now)
{
    uint32_t budget = loop->heap_len;
    int fired = 0;
    while (budget-- > 0 && loop->heap_len > 0 && loop->heap[0]->deadline_us <= now) {
        jet_timer_t *t = loop->heap[0];
        heap_remove(loop, 0);
        t->fn(t);
        fired++;
    }
    return fired;
}

/* ---- tasks and the wake protocol --------------------------------------- */

/* Never losing a wake-up (Dekker's pattern):
 *   poster: push the task;      seq_cst fence; read  sleeping
 *   loop:   write sleeping = 1; seq_cst fence; check the inbox, then sleep
 * The two fences are totally ordered. If the loop's fence comes second, its
 * inbox check sees the pushed task and it does not sleep. If the poster's
 * fence comes second, the poster reads sleeping == 1 (or a later value) and
 * writes the eventfd, which ends or pre-empts epoll_wait. A later value is 0
 * only if another poster already took the wake-up (and writes the eventfd) or
 * the loop is awake again, in which case the loop still has to pass its own
 * write+fence+check before it can sleep, and that check comes after this
 * poster's fence. Posters exchange sleeping to 0 so that one write of the
 * eventfd serves all the posts made while the loop sleeps; a poster that
 * reads sleeping == 0 costs no system call. */
/* Wakes the loop thread parked behind (or after) a guest. */
static void loop_unpark(jet_loop_t *loop)
{
    atomic_fetch_add_explicit(&loop->wakes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&loop->park_seq, 1, memory_order_seq_cst);
    jet__futex_wake(&loop->park_seq, 1);
}

/* Asks for the loop thread: wakes it at once when nobody drives the loop;
 * a guest that drives it (or is leaving it) wakes it when it leaves. Dekker
 * with jet_loop_drive's exit: we store want_thread and read the baton, it
 * stores the baton and reads want_thread. */
static void loop_want_thread(jet_loop_t *loop)
{
    if (!atomic_load_explicit(&loop->want_thread, memory_order_seq_cst))
        atomic_store_explicit(&loop->want_thread, true, memory_order_seq_cst);
    else
        atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&loop->baton, memory_order_seq_cst) == LOOP_IDLE) loop_unpark(loop);
}

/* Wakes a loop that raised `sleeping` (which the caller consumed). */
static void loop_rouse(jet_loop_t *loop)
{
    uint64_t one = 1;
    atomic_fetch_add_explicit(&loop->wakes, 1, memory_order_relaxed);
    ssize_t w = write(loop->wakefd, &one, sizeof one);
    /* EAGAIN means the counter is saturated: the loop is already woken. */
    (void)w;
    /* Or it is parked behind a guest (loop_park, loop_idle_park). */
    if (atomic_load_explicit(&loop->baton, memory_order_seq_cst) >= LOOP_GUEST)
        loop_want_thread(loop);
}

/* Pushes a task; true when the loop must be roused for it. */
static bool loop_push(jet_loop_t *loop, jet_task_t *task)
{
    jet__mpsc_push(&loop->inbox, &task->node);
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&loop->sleeping, memory_order_relaxed) &&
           atomic_exchange_explicit(&loop->sleeping, 0, memory_order_relaxed);
}

void jet_loop_post(jet_loop_t *loop, jet_task_t *task)
{
    if (loop_push(loop, task)) loop_rouse(loop);
}

void jet_loop_defer_begin(void) { loop_tls_defer_depth++; }

void jet_loop_defer_flush(void)
{
    jet_loop_t *loop = loop_tls_deferred;
    loop_tls_deferred = NULL;
    if (loop) loop_rouse(loop);
}

void jet_loop_defer_end(void)
{
    if (loop_tls_defer_depth > 0 && --loop_tls_defer_depth == 0) jet_loop_defer_flush();
}

void jet_loop_post_deferred(jet_loop_t *loop, jet_task_t *task)
{
    if (!loop_push(loop, task)) return;
    if (loop_tls_defer_depth > 0 && (!loop_tls_deferred || loop_tls_deferred == loop)) {
        loop_tls_deferred = loop;
        return;
    }
    loop_rouse(loop);
}

uint64_t jet__loop_epolls(jet_loop_t *loop)
{
    return atomic_load_explicit(&loop->epolls, memory_order_relaxed);
}

uint64_t jet__loop_wakes(jet_loop_t *loop)
{
    return atomic_load_explicit(&loop->wakes, memory_order_relaxed);
}

uint64_t jet__loop_looks(jet_loop_t *loop)
{
    return atomic_load_explicit(&loop->looks, memory_order_relaxed);
}

/* How long after an asynchronous call its loop counts as shared: answers
 * come within this in all but rare cases, and a later one waits at most the
 * solitary park time. */
#define LOOP_SHARED_AFTER_KICK_US 1000000

static void loop_wake(jet_loop_t *loop);

void jet_loop_kick(jet_loop_t *loop)
{
    if (!loop) return;
    /* A kick is used up when the thread next takes the loop; the answer may
     * come after a guest took it and left again: until then the thread must
     * look at the short pace. */
    int64_t now = jet_now_us();
    if (atomic_load_explicit(&loop->shared_until_us, memory_order_relaxed) <
        now + LOOP_SHARED_AFTER_KICK_US / 2)
        atomic_store_explicit(&loop->shared_until_us, now + LOOP_SHARED_AFTER_KICK_US,
                              memory_order_relaxed);
    /* Busy-poll loops park their thread behind guests. So does a loop
     * without pollers behind a blocking guest, or after one left (IDLE); a
     * guest asleep in its epoll is woken, finds the loop no longer solitary
     * and leaves it to the thread. */
    if (atomic_load_explicit(&loop->npollers, memory_order_relaxed) > 0) {
        loop_want_thread(loop);
    } else if (JET_FLAG(event_guest_block)) {
        /* IDLE too: a guest may be taking it and have missed the loop
         * going shared; the eventfd ends its first wait. */
        uint32_t b = atomic_load_explicit(&loop->baton, memory_order_seq_cst);
        if (b == LOOP_GUEST || b == LOOP_IDLE) {
            loop_want_thread(loop);
            loop_wake(loop);
        }
    }
}

static void loop_wake(jet_loop_t *loop)
{
    uint64_t one = 1;
    atomic_fetch_add_explicit(&loop->wakes, 1, memory_order_relaxed);
    ssize_t w = write(loop->wakefd, &one, sizeof one);
    (void)w;
}

void jet_loop_interrupt(jet_loop_t *loop) { loop_wake(loop); }

void jet_loop_post_thread(jet_loop_t *loop, jet_task_t *task)
{
    LOOP_ASSERT_OWNER(loop);
    atomic_store_explicit(&task->node.next, NULL, memory_order_relaxed);
    if (loop->thread_last)
        atomic_store_explicit(&loop->thread_last->next, &task->node, memory_order_relaxed);
    else
        loop->thread_first = &task->node;
    loop->thread_last = &task->node;
}

bool jet_loop_guest_here(void)
{
    return loop_tls_guest;
}

/* The thread's own tasks, those posted before this call: a task that posts
 * another leaves it for the next iteration. */
static int loop_run_thread_tasks(jet_loop_t *loop)
{
    jet_mpsc_node_t *node = loop->thread_first;
    loop->thread_first = loop->thread_last = NULL;
    int n = 0;
    while (node) {
        jet_mpsc_node_t *next = atomic_load_explicit(&node->next, memory_order_relaxed);
        jet_task_t *task = (jet_task_t *)((char *)node - offsetof(jet_task_t, node));
        task->fn(task);
        node = next;
        n++;
    }
    return n;
}

/* Up to limit tasks, of those queued when it starts: one posted meanwhile,
 * such as a connection's read that spent its budget and goes on later,
 * waits for the next iteration, after the fds and pollers had their turn
 * (run at once, a connection that always had more to read kept every other
 * fd of its loop, the listener included, waiting for as long as it sent). */
static int loop_run_tasks(jet_loop_t *loop, int limit)
{
    jet_mpsc_node_t *first = NULL, *last = NULL;
    int n = 0;
    while (n < limit) {
        jet_mpsc_node_t *node = jet__mpsc_pop(&loop->inbox);
        if (!node) break;
        /* Out of the queue: its link is ours until the task runs. */
        atomic_store_explicit(&node->next, NULL, memory_order_relaxed);
        if (last)
            atomic_store_explicit(&last->next, node, memory_order_relaxed);
        else
            first = node;
        last = node;
        n++;
    }
    while (first) {
        jet_mpsc_node_t *next = atomic_load_explicit(&first->next, memory_order_relaxed);
        jet_task_t *task = (jet_task_t *)((char *)first - offsetof(jet_task_t, node));
        /* The task may free itself, or post itself again: nothing touches it after fn. */
        task->fn(task);
        first = next;
    }
    return n;
}

/* ---- io ---------------------------------------------------------------- */

int jet_loop_io_add(jet_loop_t *loop, jet_io_t *io)
{
    if (!loop || !io || !io->cb || io->fd < 0) return -EINVAL;
    struct epoll_event ev = {.events = io->events | EPOLLET, .data.ptr = io};
    /* Set first: the loop thread may deliver an event (and the callback use
     * io->loop, or make the io watch-only) before epoll_ctl even returns. */
    io->loop = loop;
    bool eager = !io->watch_only;
    if (eager) atomic_fetch_add_explicit(&loop->neager, 1, memory_order_relaxed);
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, io->fd, &ev) < 0) {
        int err = -errno;
        if (eager) atomic_fetch_sub_explicit(&loop->neager, 1, memory_order_relaxed);
        io->loop = NULL;
        return err;
    }
    /* No longer solitary: a thread parked behind guests for the long
     * solitary time must look again at the shorter pace from now on. */
    if (!io->internal && atomic_fetch_add_explicit(&loop->nio, 1, memory_order_relaxed) == 1) {
        loop_unpark(loop);
        /* A guest asleep in its epoll leaves the loop, no longer solitary. */
        if (atomic_load_explicit(&loop->baton, memory_order_seq_cst) == LOOP_GUEST &&
            atomic_load_explicit(&loop->npollers, memory_order_relaxed) == 0)
            loop_wake(loop);
    }
    return 0;
}

void jet_loop_io_watch_only(jet_io_t *io, bool on)
{
    if (io->watch_only == on) return;
    io->watch_only = on;
    jet_loop_t *loop = io->loop;
    if (!loop) return;
    LOOP_ASSERT_OWNER(loop);
    atomic_fetch_add_explicit(&loop->neager, on ? -1 : 1, memory_order_relaxed);
}

int jet_loop_io_mod(jet_io_t *io, uint32_t events)
{
    if (!io || !io->loop) return -EINVAL;
    struct epoll_event ev = {.events = events | EPOLLET, .data.ptr = io};
    io->events = events;
    if (epoll_ctl(io->loop->epfd, EPOLL_CTL_MOD, io->fd, &ev) < 0) return -errno;
    return 0;
}

int jet_loop_io_del(jet_io_t *io)
{
    if (!io || !io->loop) return -EINVAL;
    jet_loop_t *loop = io->loop;
    LOOP_ASSERT_OWNER(loop);
    int rc = 0;
    /* epoll drops a registration by itself when the file is closed, so a
     * failure here (EBADF after close) still leaves the io unregistered. */
    if (epoll_ctl(loop->epfd, EPOLL_CTL_DEL, io->fd, NULL) < 0) rc = -errno;
    for (int i = loop->batch_i + 1; i < loop->batch_n; i++)
        if (loop->events[i].data.ptr == io) loop->events[i].data.ptr = NULL;
    io->loop = NULL;
    if (!io->internal) atomic_fetch_sub_explicit(&loop->nio, 1, memory_order_relaxed);
    if (!io->watch_only) atomic_fetch_sub_explicit(&loop->neager, 1, memory_order_relaxed);
    return rc;
}

static void loop_drain_wakefd(jet_loop_t *loop)
{
    uint64_t v;
    ssize_t r = read(loop->wakefd, &v, sizeof v);
    (void)r;
}

static void loop_dispatch(jet_loop_t *loop, int n)
{
    loop->batch_n = n;
    for (loop->batch_i = 0; loop->batch_i < loop->batch_n; loop->batch_i++) {
        struct epoll_event *ev = &loop->events[loop->batch_i];
        void *ptr = ev->data.ptr;
        if (!ptr) continue; /* io_del'd earlier in this batch */
        if (ptr == loop) {
            loop_drain_wakefd(loop);
            continue;
        }
        jet_io_t *io = ptr;
        io->cb(io, ev->events);
    }
    loop->batch_n = 0;
    loop->batch_i = 0;
}

/* ---- pollers ----------------------------------------------------------- */

void jet_loop_poller_add(jet_loop_t *loop, jet_poller_t *p)
{
    LOOP_ASSERT_OWNER(loop);
    for (jet_poller_t *q = loop->pollers; q; q = q->next) {
        if (q == p) {
            JET_ERROR("poller %p is already registered", (void *)p);
            return;
        }
    }
    /* Pushed at the head: a poller added from a poller first runs in the
     * next pass. */
    p->next = loop->pollers;
    loop->pollers = p;
    p->counted_ = !p->no_guest;
    atomic_fetch_add_explicit(p->counted_ ? &loop->npollers : &loop->nown, 1, memory_order_relaxed);
}

void jet_loop_poller_del(jet_loop_t *loop, jet_poller_t *p)
{
    LOOP_ASSERT_OWNER(loop);
    for (jet_poller_t **pp = &loop->pollers; *pp; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            if (loop->poll_next == p) loop->poll_next = p->next;
            p->next = NULL;
            atomic_fetch_sub_explicit(p->counted_ ? &loop->npollers : &loop->nown, 1,
                                      memory_order_relaxed);
            return;
        }
    }
}

static int loop_run_pollers(jet_loop_t *loop)
{
    int work = 0;
    jet_poller_t *p = loop->pollers;
    while (p) {
        loop->poll_next = p->next;
        int r = p->poll(p);
        if (r > 0) work += r;
        p = loop->poll_next;
    }
    loop->poll_next = NULL;
    return work;
}

/* ---- the loop ---------------------------------------------------------- */

/* The pollers' share of an iteration that found `work` so far. A guest
 * never yields: it is waiting for exactly this work. */
static void loop_poll_pass(jet_loop_t *loop, bool guest, int work)
{
    if (!loop->pollers) return;
    work += loop_run_pollers(loop);
    loop->idle_passes = work == 0 ? loop->idle_passes + 1 : 0;
    if (work == 0 && !guest && JET_FLAG(event_poll_yield)) sched_yield();
}

/* An idle busy-poll pass is a few tens of nanoseconds, half of them reading
 * the clock (a vDSO call, slower on a VM): such passes read it one time in
 * LOOP_CLOCK_EVERY, so that a loop sees a completion sooner; timers are late
 * by at most that many idle passes (under a microsecond, or that many yields
 * with event_poll_yield / urma_poller_yield). A pass after work always reads it. */
#define LOOP_CLOCK_EVERY 4

static void loop_iterate(jet_loop_t *loop, bool guest)
{
    int64_t now = loop->pollers && loop->idle_passes % LOOP_CLOCK_EVERY != 0
                      ? loop->now_us
                      : jet_now_us();
    loop->now_us = now;
    int work = loop_run_timers(loop, now);
    if (!guest && loop->thread_first) work += loop_run_thread_tasks(loop);
    int ran = loop_run_tasks(loop, LOOP_TASK_BATCH);
    work += ran;

    /* A busy-poll loop looks at its fds every event_busy_epoll_us only: an
     * epoll_wait is a system call (about a microsecond on a VM), ten times a
     * poller's pass, and would set the pace at which the pollers see their
     * rings. Tasks and timers are still served every pass. */
    /* In range whatever code stored: a huge one would leave the fds unseen
     * for that long. */
    int64_t every = atomic_load_explicit(&loop->neager, memory_order_relaxed) > 0
                        ? JET_FLAG_IN_RANGE(event_busy_epoll_us)
                        : JET_FLAG_IN_RANGE(event_busy_epoll_watch_us);
    if (loop->pollers && now - loop->last_epoll_us < every) {
        loop_poll_pass(loop, guest, work);
        return;
    }
    loop->last_epoll_us = now;

    /* A guest of a loop without pollers blocks like the thread, but no
     * longer than its own deadline, and not after timers or tasks ran: what
     * it waits for may have happened in them. */
    int64_t due = loop->heap_len > 0 ? loop->heap[0]->deadline_us : INT64_MAX;
    if (guest && loop->guest_until_us < due) due = loop->guest_until_us;
    int timeout = -1;
    if (ran == LOOP_TASK_BATCH || loop->pollers || (guest && work > 0) ||
        atomic_load_explicit(&loop->stop, memory_order_acquire) || !jet__mpsc_empty(&loop->inbox)) {
        timeout = 0;
    } else if (due != INT64_MAX) {
        int64_t wait = due - jet_now_us();
        /* Rounded up: waking before the deadline would only spin. */
        timeout = wait <= 0                         ? 0
                  : wait >= (int64_t)INT_MAX * 1000 ? INT_MAX
                                                    : (int)((wait + 999) / 1000);
    }

    bool armed = timeout != 0;
    if (armed) {
        atomic_store_explicit(&loop->sleeping, 1, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        if (!jet__mpsc_empty(&loop->inbox) ||
            atomic_load_explicit(&loop->stop, memory_order_acquire))
            timeout = 0;
    }
    int n = epoll_wait(loop->epfd, loop->events, loop->max_events, timeout);
    if (armed) atomic_store_explicit(&loop->sleeping, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&loop->epolls, 1, memory_order_relaxed);
    if (n < 0) {
        if (errno != EINTR) JET_LOG_ONCE(JET_LOG_ERROR, "epoll_wait: %s", strerror(errno));
        n = 0;
    }
    if (n > 0) {
        loop_dispatch(loop, n);
        work += n;
    }
    loop_poll_pass(loop, guest, work);
}

/* The loop thread while a guest drives: asleep until a post or stop wakes
 * it, or its park time passes. It does not look at the inbox (the guest
 * consumes it meanwhile) nor raise `sleeping`: posts to a driven loop are
 * run by the guest and cost no system call. A guest that leaves the loop
 * undriven raises `sleeping` itself (jet_loop_drive), so a later post wakes
 * this thread, and wakes it at once when a timer falls due before the
 * thread's next look; otherwise the next synchronous call usually takes the
 * loop again at once and the thread sleeps on.
 *
 * Each look costs the machine a wake-up, which on a small machine takes a
 * core from a spinning thread for tens of microseconds. The park time is
 * event_guest_park_us, or event_guest_park_solitary_us on a solitary loop:
 * one whose only fd is the waiting threads' connection, where an undriven
 * stretch delays nothing but that connection's unsolicited events (posts,
 * due timers and asynchronous calls, jet_loop_kick, wake the thread). */
static int64_t loop_park_base_us(void)
{
    return JET_FLAG_IN_RANGE(event_guest_park_us);
}

/* A loop whose only fd is the waiting threads' connection (and which has
 * no queued task or near timer, checked by the leaving guest) needs nobody
 * while it is undriven: its thread may sleep long. */
static bool loop_solitary(jet_loop_t *loop)
{
    return atomic_load_explicit(&loop->nio, memory_order_relaxed) <= 1 &&
           jet_now_us() >= atomic_load_explicit(&loop->shared_until_us, memory_order_relaxed);
}

/* How long the loop thread sleeps behind guests before it looks again. */
static int64_t loop_park_time_us(jet_loop_t *loop)
{
    int64_t base = loop_park_base_us();
    if (!loop_solitary(loop)) return base;
    int64_t us = JET_FLAG_IN_RANGE(event_guest_park_solitary_us);
    return us < base ? base : us;
}

static void loop_park(jet_loop_t *loop)
{
    uint32_t seq = atomic_load_explicit(&loop->park_seq, memory_order_seq_cst);
    if (atomic_load_explicit(&loop->stop, memory_order_seq_cst)) return;
    int64_t us = loop_park_time_us(loop);
    int64_t now = jet_now_us();
    atomic_store_explicit(&loop->park_until_us, now + us, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    /* A guest leaving with a timer due before our look: it may not have
     * seen park_until_us (Dekker: it stores timer_due_us, then reads
     * park_until_us), so we wake up for the timer ourselves. A guest resets
     * timer_due_us when it takes the loop. */
    int64_t due = atomic_load_explicit(&loop->timer_due_us, memory_order_relaxed) - now;
    if (due < us) us = due;
    if (atomic_load_explicit(&loop->baton, memory_order_seq_cst) != LOOP_GUEST) return;
    if (us <= 0) {
        sched_yield(); /* the guest is between its last pass and handing over */
        return;
    }
    (void)jet__futex_wait(&loop->park_seq, seq, us);
    atomic_fetch_add_explicit(&loop->looks, 1, memory_order_relaxed);
}

/* The loop thread found the loop undriven. A solitary loop that its guest
 * left a moment ago (the caller is between two calls, and takes it again at
 * once) is left alone a while longer, unless the thread is wanted (a post,
 * a kick), the loop has no drivable poller left or a no_guest one (which
 * only its thread runs), or something is due before the next
 * look. True when the thread parked. */
static bool loop_idle_park(jet_loop_t *loop)
{
    int64_t now = jet_now_us();
    int64_t us = loop_park_time_us(loop);
    if (!loop_solitary(loop) || atomic_load_explicit(&loop->want_thread, memory_order_relaxed) ||
        atomic_load_explicit(&loop->stop, memory_order_relaxed) ||
        (atomic_load_explicit(&loop->npollers, memory_order_relaxed) == 0 &&
         !JET_FLAG(event_guest_block)) ||
        atomic_load_explicit(&loop->nown, memory_order_relaxed) > 0 ||
        now - atomic_load_explicit(&loop->left_us, memory_order_relaxed) >= loop_park_base_us() ||
        atomic_load_explicit(&loop->timer_due_us, memory_order_relaxed) < now + us)
        return false;
    uint32_t seq = atomic_load_explicit(&loop->park_seq, memory_order_seq_cst);
    atomic_store_explicit(&loop->park_until_us, now + us, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    /* What could change our mind since the checks above bumps park_seq
     * after it is visible (a post's or a kick's want_thread, stop), or is
     * published before the publisher reads park_until_us (a guest that took
     * and left the loop meanwhile, with a timer): either we see it here or
     * the futex sees the new sequence, or the guest wakes us. */
    if (atomic_load_explicit(&loop->want_thread, memory_order_seq_cst) ||
        atomic_load_explicit(&loop->stop, memory_order_seq_cst) ||
        atomic_load_explicit(&loop->baton, memory_order_seq_cst) != LOOP_IDLE ||
        atomic_load_explicit(&loop->timer_due_us, memory_order_relaxed) < now + us)
        return true;
    (void)jet__futex_wait(&loop->park_seq, seq, us);
    atomic_fetch_add_explicit(&loop->looks, 1, memory_order_relaxed);
    return true;
}

/* One step of the loop thread's baton protocol; true when it may iterate. */
static bool loop_hold(jet_loop_t *loop)
{
    uint32_t b = atomic_load_explicit(&loop->baton, memory_order_acquire);
    switch (b) {
    case LOOP_RUN:
        return true;
    case LOOP_WANT:
        /* A CAS, not a store: the guest may have withdrawn its request
         * (WANT -> RUN, its wait ended first) since our load; a store would
         * hand the loop to a guest that is gone and park this thread for
         * good. Release: the guest sees everything this thread did. */
        if (atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_GUEST,
                                                    memory_order_seq_cst, memory_order_relaxed) &&
            atomic_exchange_explicit(&loop->handover_sleeps, 0, memory_order_seq_cst))
            jet__futex_wake(&loop->baton, 1); /* loop_wait_handover */
        return false;
    case LOOP_GUEST:
        loop_park(loop);
        return false;
    default: /* LOOP_IDLE */
        if (loop_idle_park(loop)) return false;
        if (atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_RUN,
                                                    memory_order_acquire, memory_order_relaxed)) {
            atomic_store_explicit(&loop->sleeping, 0, memory_order_relaxed); /* awake again */
            atomic_store_explicit(&loop->want_thread, false, memory_order_relaxed);
        }
        else if (b == LOOP_GUEST)
            loop_park(loop); /* a guest took it first */
        return false;
    }
}

static bool loop_drive(jet_loop_t *loop, bool (*done)(void *arg), void *arg, int64_t until_us,
                       bool *drove);

bool jet_loop_drive(jet_loop_t *loop, bool (*done)(void *arg), void *arg, int64_t until_us)
{
    bool drove = false;
    bool owed = loop && loop_tls_deferred == loop;
    if (owed) loop_tls_deferred = NULL; /* ours to run if we drive */
    /* The loop's callbacks run outside the caller's defer scope: a deferred
     * post of theirs to another loop must not wait for our call to end. */
    int depth = loop_tls_defer_depth;
    loop_tls_defer_depth = 0;
    bool r = loop_drive(loop, done, arg, until_us, &drove);
    loop_tls_defer_depth = depth;
    if (owed && !drove) loop_rouse(loop);
    return r;
}

/* A loop without pollers may have a blocking guest: one that serves only
 * the waiting threads' connection (see loop_solitary) and nothing only its
 * thread may run. */
static bool loop_blocking_guest_ok(jet_loop_t *loop)
{
    return JET_FLAG(event_guest_block) &&
           atomic_load_explicit(&loop->nown, memory_order_relaxed) == 0 && loop_solitary(loop);
}

/* Takes back a request for the loop (LOOP_WANT -> LOOP_RUN). True when the
 * thread handed the loop over first: it is then ours (LOOP_GUEST). */
static bool loop_withdraw(jet_loop_t *loop)
{
    uint32_t b = LOOP_WANT;
    /* Acquire on failure: the hand-over (a release) made the loop ours, and
     * we then touch its private state. */
    if (atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_RUN, memory_order_acquire,
                                                memory_order_acquire))
        return false;
    return b == LOOP_GUEST;
}

/* Asks the loop thread, asleep in epoll, for the loop (baton LOOP_WANT, set
 * by the caller) and sleeps until it is handed over: the thread hands it
 * over after the iteration the kick ends, or after the one that brings the
 * answer, which then ends the wait at once. True when the loop is ours
 * (LOOP_GUEST), false when the request was withdrawn (done, or the
 * deadline passed; the loop thread keeps the loop). */
static bool loop_wait_handover(jet_loop_t *loop, bool (*done)(void *arg), void *arg,
                               int64_t until_us)
{
    /* Before the futex checks the baton: the thread's CAS then either came
     * first (no sleep) or sees the flag and wakes us. */
    atomic_store_explicit(&loop->handover_sleeps, 1, memory_order_seq_cst);
    loop_wake(loop);
    for (;;) {
        uint32_t b = atomic_load_explicit(&loop->baton, memory_order_seq_cst);
        if (b != LOOP_WANT) return b == LOOP_GUEST;
        int64_t left = until_us == INT64_MAX ? INT64_MAX : until_us - jet_now_us();
        if (done(arg) || left <= 0) return loop_withdraw(loop);
        /* Bounded: a handover is never lost, but a stop may come instead. */
        (void)jet__futex_wait(&loop->baton, LOOP_WANT, left < 10000 ? left : 10000);
        if (atomic_load_explicit(&loop->stop, memory_order_acquire)) return loop_withdraw(loop);
    }
}

static bool loop_drive(jet_loop_t *loop, bool (*done)(void *arg), void *arg, int64_t until_us,
                       bool *drove)
{
    if (!loop || !loop->started || loop_tls_current != NULL || !JET_FLAG(event_guest_drive))
        return false;
    /* Busy-poll loops are driven by spinning, loops without pollers by a
     * guest that blocks in their epoll (loop_iterate). */
    bool poll = atomic_load_explicit(&loop->npollers, memory_order_relaxed) > 0;
    if (!poll && !loop_blocking_guest_ok(loop)) return false;
    uint32_t b = atomic_load_explicit(&loop->baton, memory_order_relaxed);
    if (b == LOOP_IDLE) {
        if (!atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_GUEST,
                                                     memory_order_acquire, memory_order_relaxed))
            return false;
        /* Driven again: posts need not wake the parked thread. */
        atomic_store_explicit(&loop->sleeping, 0, memory_order_relaxed);
    } else if (b == LOOP_RUN && !poll) {
        if (!atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_WANT,
                                                     memory_order_relaxed, memory_order_relaxed))
            return false;
        if (!loop_wait_handover(loop, done, arg, until_us)) return done(arg);
    } else if (b == LOOP_RUN) {
        if (!atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_WANT,
                                                     memory_order_relaxed, memory_order_relaxed))
            return false;
        /* A busy-poll iteration is short: the hand-over comes within one,
         * if the thread has a core. When it has none (more runnable threads
         * than cores: this spin, a peer's, the thread), spinning on would
         * keep it off until the scheduler's slice ends (milliseconds):
         * after LOOP_HANDOVER_SPIN_US we sleep until the hand-over instead,
         * which gives our core to the thread. */
        int64_t spin_end = 0;
        for (uint32_t i = 1;
             (b = atomic_load_explicit(&loop->baton, memory_order_acquire)) == LOOP_WANT; i++) {
            if (done(arg)) {
                if (!loop_withdraw(loop)) return true;
                break; /* handed over meanwhile: ours to give back */
            }
            if (atomic_load_explicit(&loop->npollers, memory_order_relaxed) == 0) {
                /* Its thread may now sleep in epoll: withdraw. */
                if (!loop_withdraw(loop)) return done(arg);
                break;
            }
            if ((i & 63) == 0) {
                int64_t now = jet_now_us();
                if (spin_end == 0) {
                    spin_end = now + LOOP_HANDOVER_SPIN_US;
                } else if (now >= spin_end) {
                    if (!loop_wait_handover(loop, done, arg, until_us)) return done(arg);
                    b = LOOP_GUEST;
                    break;
                }
            }
            jet__cpu_relax();
        }
        if (b != LOOP_GUEST && atomic_load_explicit(&loop->baton, memory_order_acquire) != LOOP_GUEST)
            return done(arg); /* taken back (stop) */
    } else {
        return false; /* another guest drives it */
    }
    loop_tls_current = loop;
    loop_tls_guest = true;
    *drove = true;
    loop->guest_until_us = until_us;
    /* Our timers are ours to run while we drive (see the exit below). */
    atomic_store_explicit(&loop->timer_due_us, INT64_MAX, memory_order_relaxed);
    /* A busy-poll pass reads the clock itself; its last reading, however old, is not past. */
    if (!poll) loop->now_us = jet_now_us();
    /* It leaves as soon as there is work for the thread. */
    while (!done(arg) && loop->now_us < until_us && !loop->thread_first &&
           !atomic_load_explicit(&loop->stop, memory_order_acquire) &&
           (atomic_load_explicit(&loop->npollers, memory_order_relaxed) > 0) == poll &&
           (poll || loop_blocking_guest_ok(loop)))
        loop_iterate(loop, true);
    loop_tls_current = NULL;
    loop_tls_guest = false;
    /* Leaving the loop undriven. From now on a post must wake the parked
     * thread (Dekker with jet_loop_post: it pushes, fences, reads
     * `sleeping`; we raise it, fence, then look at the inbox, which is still
     * ours to read: tasks left there ask for the thread). Then the baton
     * goes IDLE and, after a fence, we read what asks for the thread (Dekker
     * with loop_want_thread: it stores want_thread, then reads the baton)
     * and when the thread looks again (it publishes park_until_us, then
     * reads timer_due_us). Without drivable pollers the loop must also go
     * back to sleeping in epoll, which only its own thread does, and
     * no_guest pollers are its thread's to run. Not when stopping:
     * the loop thread leaves on its own. */
    int64_t due = loop->heap_len > 0 ? loop->heap[0]->deadline_us : INT64_MAX;
    atomic_store_explicit(&loop->left_us, loop->now_us, memory_order_relaxed);
    atomic_store_explicit(&loop->timer_due_us, due, memory_order_relaxed);
    atomic_store_explicit(&loop->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    if (!jet__mpsc_empty(&loop->inbox) || loop->thread_first)
        atomic_store_explicit(&loop->want_thread, true, memory_order_relaxed);
    atomic_store_explicit(&loop->baton, LOOP_IDLE, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    bool wake = !atomic_load_explicit(&loop->stop, memory_order_acquire) &&
                ((atomic_load_explicit(&loop->npollers, memory_order_relaxed) == 0 &&
                  !loop_blocking_guest_ok(loop)) ||
                 atomic_load_explicit(&loop->nown, memory_order_relaxed) > 0 ||
                 atomic_load_explicit(&loop->want_thread, memory_order_seq_cst) ||
                 due < atomic_load_explicit(&loop->park_until_us, memory_order_relaxed));
    if (wake) loop_unpark(loop);
    return done(arg);
}

static void *loop_main(void *arg)
{
    jet_loop_t *loop = arg;
    char name[32];
    if (loop->index >= 0)
        snprintf(name, sizeof name, "jet_loop_%d", loop->index);
    else
        snprintf(name, sizeof name, "jet_loop");
    name[15] = 0; /* the kernel keeps 15 characters */
    pthread_setname_np(pthread_self(), name);
    loop_tls_current = loop;

    while (!atomic_load_explicit(&loop->stop, memory_order_acquire))
        if (loop_hold(loop)) loop_iterate(loop, false);
    /* A guest may still drive: it leaves as soon as it sees stop. */
    for (uint32_t b; (b = atomic_load_explicit(&loop->baton, memory_order_acquire)) != LOOP_RUN;) {
        if (b == LOOP_GUEST) {
            loop_park(loop);
        } else if (atomic_compare_exchange_strong_explicit(&loop->baton, &b, LOOP_RUN,
                                                           memory_order_seq_cst,
                                                           memory_order_relaxed) &&
                   b == LOOP_WANT &&
                   atomic_exchange_explicit(&loop->handover_sleeps, 0, memory_order_seq_cst)) {
            /* A would-be guest asleep for the hand-over: the request is
             * refused, it learns so now rather than at its next look. */
            jet__futex_wake(&loop->baton, 1);
        }
    }

    /* Run what was posted before stop; pop() may return NULL while a post is
     * half done, so go on until the inbox is really empty. */
    while (!jet__mpsc_empty(&loop->inbox) || loop->thread_first) {
        loop_run_thread_tasks(loop);
        loop_run_tasks(loop, INT_MAX);
    }
    loop_tls_current = NULL;
    return NULL;
}

int jet_loop_create(jet_loop_t **loop_p)
{
    int rc;
    void *mem = NULL;
    size_t size = (sizeof(jet_loop_t) + 63) & ~(size_t)63;
    if ((rc = posix_memalign(&mem, 64, size)) != 0) return -rc;
    jet_loop_t *loop = mem;
    memset(loop, 0, sizeof *loop);
    loop->index = -1;
    atomic_init(&loop->stop, false);
    atomic_init(&loop->sleeping, 0);
    atomic_init(&loop->baton, LOOP_RUN);
    atomic_init(&loop->npollers, 0);
    atomic_init(&loop->nown, 0);
    atomic_init(&loop->nio, 0);
    atomic_init(&loop->neager, 0);
    atomic_init(&loop->left_us, 0);
    atomic_init(&loop->timer_due_us, INT64_MAX);
    atomic_init(&loop->park_until_us, 0);
    atomic_init(&loop->park_seq, 0);
    atomic_init(&loop->want_thread, false);
    atomic_init(&loop->shared_until_us, 0);
    jet__mpsc_init(&loop->inbox);

    loop->max_events = JET_FLAG_IN_RANGE(event_max_events);
    loop->events = calloc((size_t)loop->max_events, sizeof *loop->events);
    if (!loop->events) {
        rc = -ENOMEM;
        goto err_free_loop;
    }
    loop->heap_cap = LOOP_HEAP_INIT;
    loop->heap = calloc(loop->heap_cap, sizeof *loop->heap);
    if (!loop->heap) {
        rc = -ENOMEM;
        goto err_free_events;
    }
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) {
        rc = -errno;
        goto err_free_heap;
    }
    loop->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (loop->wakefd < 0) {
        rc = -errno;
        goto err_close_epfd;
    }
    /* The loop's own address marks the wake-up fd in epoll data: no io can
     * live there. */
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = loop};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wakefd, &ev) < 0) {
        rc = -errno;
        goto err_close_wakefd;
    }
    *loop_p = loop;
    return 0;

err_close_wakefd:
    close(loop->wakefd);
err_close_epfd:
    close(loop->epfd);
err_free_heap:
    free(loop->heap);
err_free_events:
    free(loop->events);
err_free_loop:
    free(loop);
    return rc;
}

int jet_loop_start(jet_loop_t *loop)
{
    if (!loop) return -EINVAL;
    if (loop->started) return -EALREADY;
    atomic_store_explicit(&loop->stop, false, memory_order_relaxed);
    loop->started = true;
    int rc = pthread_create(&loop->thread, NULL, loop_main, loop);
    if (rc != 0) {
        loop->started = false;
        return -rc;
    }
    return 0;
}

void jet_loop_stop(jet_loop_t *loop)
{
    if (!loop || !loop->started) return;
    if (jet_loop_in_thread(loop)) {
        JET_ERROR("jet_loop_stop called on the loop's own thread; ignored");
        return;
    }
    atomic_store_explicit(&loop->stop, true, memory_order_release);
    loop_wake(loop);
    loop_unpark(loop);
    pthread_join(loop->thread, NULL);
    loop->started = false;
}

void jet_loop_destroy(jet_loop_t *loop)
{
    if (!loop) return;
    jet_loop_stop(loop);
    if (loop->started) return; /* called on its own thread: stop refused, so must we */
    /* Timers, pollers and ios still linked are not touched: their owners
     * may already have freed them once the thread was gone. */
    close(loop->wakefd);
    close(loop->epfd);
    free(loop->heap);
    free(loop->events);
    free(loop);
}

int64_t jet_loop_now_us(const jet_loop_t *loop) { return loop->now_us; }

bool jet_loop_in_thread(const jet_loop_t *loop)
{
    return loop && loop_tls_current == loop;
}

int jet_loop_index(const jet_loop_t *loop)
{
    return loop ? loop->index : -1;
}

/* ---- the process-wide group -------------------------------------------- */

static pthread_mutex_t group_lock = PTHREAD_MUTEX_INITIALIZER;
static jet_loop_t **group_loops;
static _Atomic int group_count;
static _Atomic unsigned group_next;

int jet_loops_start(int n)
{
    int rc = 0;
    pthread_mutex_lock(&group_lock);
    if (atomic_load_explicit(&group_count, memory_order_relaxed) > 0) goto out_unlock;
    if (n <= 0) n = JET_FLAG(event_loop_num);
    if (n <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (int)(cores < LOOP_MAX_GROUP ? cores : LOOP_MAX_GROUP) : 1;
    }
    if (n > LOOP_MAX_GROUP) {
        rc = -EINVAL;
        goto out_unlock;
    }
    jet_loop_t **loops = calloc((size_t)n, sizeof *loops);
    if (!loops) {
        rc = -ENOMEM;
        goto out_unlock;
    }
    int made = 0;
    for (; made < n; made++) {
        if ((rc = jet_loop_create(&loops[made])) < 0) goto err_destroy_loops;
        loops[made]->index = made;
        if ((rc = jet_loop_start(loops[made])) < 0) {
            made++;
            goto err_destroy_loops;
        }
    }
    group_loops = loops;
    /* Release: a reader that sees the count also sees the array. */
    atomic_store_explicit(&group_count, n, memory_order_release);
    goto out_unlock;

err_destroy_loops:
    while (made-- > 0)
        jet_loop_destroy(loops[made]);
    free(loops);
    JET_ERROR("cannot start %d event loops: %s", n, strerror(-rc));
out_unlock:
    pthread_mutex_unlock(&group_lock);
    return rc;
}

int jet_loops_count(void)
{
    return atomic_load_explicit(&group_count, memory_order_acquire);
}

jet_loop_t *jet_loop_at(int i)
{
    int n = jet_loops_count();
    return i >= 0 && i < n ? group_loops[i] : NULL;
}

jet_loop_t *jet_loop_pick(void)
{
    int n = jet_loops_count();
    if (n == 0) {
        if (jet_loops_start(0) < 0) return NULL;
        n = jet_loops_count();
    }
    unsigned i = atomic_fetch_add_explicit(&group_next, 1, memory_order_relaxed);
    return group_loops[i % (unsigned)n];
}

jet_loop_t *jet_loop_current(void)
{
    return loop_tls_current;
}
