/* Event-loop test scaffolding (header-only; for the event group and above,
 * which link jet_event): loops that start and stop with a case, and running
 * a function on a loop's thread while the test thread waits for it. */
#ifndef JET_TESTUTIL_LOOP_H
#define JET_TESTUTIL_LOOP_H

#include <stdlib.h>

#include "event/loop.h"
#include "testutil.h"

/* Bound on the wait for a task posted by jt_loop_run_on. */
#define JT_LOOP_GUARD_US (5 * 1000 * 1000)

/* Creates and starts a loop: 0, or the failing call's code (nothing left
 * behind then). */
static inline int jt_loop_up(jet_loop_t **loop_p)
{
    int rc = jet_loop_create(loop_p);
    if (rc != 0) return rc;
    rc = jet_loop_start(*loop_p);
    if (rc != 0) {
        jet_loop_destroy(*loop_p);
        *loop_p = NULL;
    }
    return rc;
}

static inline void jt_loop_down(jet_loop_t *loop)
{
    jet_loop_stop(loop);
    jet_loop_destroy(loop);
}

typedef struct jt_sync_call {
    jet_task_t task;
    void (*fn)(void *arg);
    void *arg;
    _Atomic int done;
} jt_sync_call_t;

static inline void jt_sync_call_run(jet_task_t *t)
{
    jt_sync_call_t *c = (jt_sync_call_t *)t;
    if (c->fn) c->fn(c->arg);
    atomic_store(&c->done, 1);
}

/* Runs fn(arg) (fn may be NULL: one round trip through the loop) on the
 * loop's thread and waits for it. Aborts when it does not run within
 * JT_LOOP_GUARD_US: the task lives in this frame. Returns true. */
static inline bool jt_loop_run_on(jet_loop_t *loop, void (*fn)(void *), void *arg)
{
    jt_sync_call_t c = {.task.fn = jt_sync_call_run, .fn = fn, .arg = arg};
    jet_loop_post(loop, &c.task);
    if (!jt_wait_at_least(&c.done, 1, JT_LOOP_GUARD_US)) abort();
    return true;
}

#endif
