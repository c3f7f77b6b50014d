/* Event loops: one thread each, epoll edge-triggered, with timers, a
 * cross-thread task inbox and optional busy-poll pollers.
 *
 * Ownership and threads:
 *  - A jet_io, jet_task, jet_timer or jet_poller is memory owned by the
 *    caller (embedded in a socket, a call...); the loop only links it. It must
 *    stay valid until it is removed (io, timer, poller) or has run (task).
 *  - io_add/io_mod may be called from any thread; io_del, timers and pollers
 *    only on the loop's own thread (jet_loop_in_thread). After io_del returns,
 *    the io's callback is not called again, even for events already fetched
 *    in the current batch.
 *  - jet_loop_post() runs a task on the loop thread, in FIFO order per
 *    producer; it wakes the loop (one eventfd write) only when the loop is
 *    asleep or about to sleep, so posting to a busy loop costs no syscall.
 *  - Callbacks run on the loop thread and must not block.
 *
 * Busy-poll: while any poller is registered, the loop never sleeps in
 * epoll_wait; each iteration runs timers, tasks and every poller once, and
 * checks epoll with a zero timeout at most every event_busy_epoll_us (a
 * system call per pass would set the pollers' pace), or every
 * event_busy_epoll_watch_us while all its fds are watch-only. With the flag
 * event_poll_yield it calls sched_yield() when an iteration found nothing to
 * do. */
#ifndef JET_EVENT_LOOP_H
#define JET_EVENT_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/mpsc.h"

typedef struct jet_loop jet_loop_t;
struct jet_io;

/* events: EPOLLIN/EPOLLOUT/EPOLLERR/EPOLLHUP/EPOLLRDHUP bits as epoll gives them. */
typedef void (*jet_io_cb_t)(struct jet_io *io, uint32_t events);

typedef struct jet_io {
    int fd;
    uint32_t events; /* EPOLLIN | EPOLLOUT ...; EPOLLET is always added */
    jet_io_cb_t cb;
    void *arg;
    jet_loop_t *loop; /* set by io_add */
    /* The loop's own channel (a completion queue's event fd), not a
     * connection: it does not make a loop lose its "solitary" standing
     * (see jet_loop_drive). */
    bool internal;
    /* Its events are not on a message path (the TCP side of a connection
     * whose data runs over URMA or UBRing, which only tells that the peer is
     * gone): a busy-poll loop whose fds are all watch-only looks at them
     * every event_busy_epoll_watch_us instead of every event_busy_epoll_us.
     * Set before io_add, or with jet_loop_io_watch_only. */
    bool watch_only;
} jet_io_t;

typedef struct jet_task {
    jet_mpsc_node_t node;
    void (*fn)(struct jet_task *t);
} jet_task_t;

typedef struct jet_timer {
    int64_t deadline_us; /* monotonic, jet_now_us() scale */
    void (*fn)(struct jet_timer *t);
    uint32_t heap_index; /* UINT32_MAX when not armed */
} jet_timer_t;

typedef struct jet_poller {
    /* Returns how much work it found (0 = idle). */
    int (*poll)(struct jet_poller *p);
    struct jet_poller *next; /* owned by the loop */
    void *arg;
    /* Run by the loop's own thread: a thread waiting for a synchronous call
     * does not drive the loop for it (jet_loop_drive), but sleeps until the
     * answer wakes it, and the loop thread never parks while it is
     * registered (a guest driving for another poller runs it too). For short
     * spells of polling that a waiting thread would only double on a small
     * machine. Set before jet_loop_poller_add. */
    bool no_guest;
    bool counted_; /* the loop's: counted as drivable when added */
} jet_poller_t;

/* --- the process-wide loop group (what servers and channels use) -------- */

/* Starts the group once (later calls return 0). n <= 0 takes the flag
 * event_loop_num, whose default 0 means the number of cores. */
int jet_loops_start(int n);
int jet_loops_count(void);
jet_loop_t *jet_loop_at(int i);
/* Round-robin choice for a new connection. Starts the group if needed. */
jet_loop_t *jet_loop_pick(void);
/* The loop running on this thread, or NULL. */
jet_loop_t *jet_loop_current(void);

/* --- single loops (the group is made of these; tests use them too) ------ */

int jet_loop_create(jet_loop_t **loop_p);
/* Starts the loop's thread. */
int jet_loop_start(jet_loop_t *loop);
/* Asks the loop to stop after the current iteration and joins its thread;
 * tasks still queued are run first. Not callable on the loop's thread. */
void jet_loop_stop(jet_loop_t *loop);
void jet_loop_destroy(jet_loop_t *loop);

bool jet_loop_in_thread(const jet_loop_t *loop);
/* The monotonic clock (µs) read at the start of the current iteration: for
 * pollers and callbacks, which run inside one (loop thread or guest). */
int64_t jet_loop_now_us(const jet_loop_t *loop);
int jet_loop_index(const jet_loop_t *loop);

int jet_loop_io_add(jet_loop_t *loop, jet_io_t *io);
/* Changes io->watch_only (see jet_io_t). Loop thread of a registered io, or
 * before io_add. */
void jet_loop_io_watch_only(jet_io_t *io, bool on);
int jet_loop_io_mod(jet_io_t *io, uint32_t events);
int jet_loop_io_del(jet_io_t *io);

void jet_loop_post(jet_loop_t *loop, jet_task_t *task);

/* True while this thread drives a loop as a guest (jet_loop_drive): a
 * user's thread that waits for a call and runs the loop meanwhile. */
bool jet_loop_guest_here(void);
/* Queues task for the loop's own thread, which runs it at the start of its
 * next iteration; a guest driving the loop leaves it after the current
 * iteration, so that the thread takes the loop back at once. For user code
 * (done callbacks, handlers) that must not run on a guest, whose thread may
 * hold what that code takes. Only by whoever runs the loop
 * (jet_loop_in_thread(loop)); tasks queued when the loop stops run as its
 * thread ends. */
void jet_loop_post_thread(jet_loop_t *loop, jet_task_t *task);

/* Deferred wake-ups, for a thread that is about to drive the loop itself (a
 * synchronous call that writes, then waits). Between jet_loop_defer_begin()
 * and jet_loop_defer_end() on one thread, jet_loop_post_deferred() queues
 * its task like jet_loop_post() but keeps the wake-up of a loop that nobody
 * drives for later: this thread's next jet_loop_drive() of that loop runs
 * the task itself and no wake-up happens; jet_loop_defer_flush(), a drive
 * that does not happen, and the end of the scope do the wake-up. Waking an
 * undriven busy-poll loop's thread only to hand the loop to the caller a
 * moment later costs a preempted core on a small machine. One loop at a
 * time: a deferred post to another loop wakes it at once. Scopes nest;
 * outside one, jet_loop_post_deferred() is jet_loop_post(). */
void jet_loop_defer_begin(void);
void jet_loop_defer_end(void);
void jet_loop_defer_flush(void);
void jet_loop_post_deferred(jet_loop_t *loop, jet_task_t *task);

/* For a thread that started something a loop must watch without driving
 * it (an asynchronous call, a synchronous one whose drive was refused):
 * asks for the loop's own thread, which is woken at once when nobody drives
 * the loop, or when the guest driving it leaves, so that the loop is served
 * now rather than after the parked thread's next look; the loop counts as
 * shared (not solitary) for a second. A guest asleep in the epoll of a loop
 * without pollers is woken and leaves. A few atomic operations, and an
 * eventfd write in that last case; nothing for a loop whose thread runs it
 * (or NULL). */
void jet_loop_kick(jet_loop_t *loop);

/* How many times the loop thread woke from a park behind guests (each costs
 * the machine a wake-up): for tests and diagnostics. */
uint64_t jet__loop_looks(jet_loop_t *loop);
/* How many times the loop looked at its fds (epoll_wait calls): for tests. */
uint64_t jet__loop_epolls(jet_loop_t *loop);
/* How many wake-ups were sent to the loop thread (eventfd writes, futex
 * wakes of its park), needed or not: for tests. */
uint64_t jet__loop_wakes(jet_loop_t *loop);

/* Arms (or re-arms) t to fire at t->deadline_us. Loop thread only. */
void jet_loop_timer_start(jet_loop_t *loop, jet_timer_t *t, int64_t deadline_us);
/* Disarms t; no effect when it is not armed. Loop thread only. */
void jet_loop_timer_stop(jet_loop_t *loop, jet_timer_t *t);
static inline bool jet_timer_armed(const jet_timer_t *t) { return t->heap_index != UINT32_MAX; }
static inline void jet_timer_init(jet_timer_t *t, void (*fn)(jet_timer_t *))
{
    t->deadline_us = 0;
    t->fn = fn;
    t->heap_index = UINT32_MAX;
}

/* Loop thread only. */
void jet_loop_poller_add(jet_loop_t *loop, jet_poller_t *p);
void jet_loop_poller_del(jet_loop_t *loop, jet_poller_t *p);

/* Guest driving (leader/follower): a thread that has nothing to do but wait
 * for something the loop will produce (a synchronous call's answer) runs
 * the loop's iterations itself while the loop thread sleeps. On a busy-poll
 * loop one thread spins instead of two and the answer needs no wake-up. On
 * a loop without pollers (event_guest_block) the guest sleeps in the loop's
 * epoll itself, so the answer wakes the thread that waits for it instead of
 * the loop thread, which would then wake it: one wake-up instead of two.
 * That is done only while the loop is solitary (its only fd is the waiting
 * threads' connection, no asynchronous call was issued on it lately); if
 * its thread is asleep in epoll then, it is woken once and hands the loop
 * over after that iteration.
 *
 * Any thread that is not a loop thread may call it; it returns false at
 * once when the loop may not be driven (a loop without pollers that is not
 * solitary or has no_guest pollers, another guest drives it, the flag
 * event_guest_drive is off, or the loop is stopping). Otherwise it iterates
 * (timers, tasks, pollers, epoll: with a zero timeout on a busy-poll loop,
 * else blocking until an event, a post, a timer or until_us, the caller's
 * deadline, INT64_MAX for none; callbacks see jet_loop_in_thread(loop)
 * true) until done(arg) holds, until_us passes, the loop stops or stops
 * being drivable that way, or work for the loop's own thread was queued
 * (jet_loop_post_thread), and returns done(arg). done is called between
 * iterations and must be cheap and thread-safe; whatever makes it true on
 * another thread must call jet_loop_interrupt(loop), which ends a blocking
 * guest's epoll wait. The loop thread takes the loop back within event_guest_park_us after the
 * guest left (event_guest_park_solitary_us for a solitary loop), at once
 * when a task is posted. */
bool jet_loop_drive(jet_loop_t *loop, bool (*done)(void *arg), void *arg, int64_t until_us);

/* Ends the current or next epoll wait of whoever runs the loop (its thread
 * or a guest). Any thread; one write to the loop's eventfd. */
void jet_loop_interrupt(jet_loop_t *loop);

#endif
