/* The deadline thread: one process-wide thread that fires timers added and
 * removed from any thread (call deadlines). Loop timers (loop.h) are cheaper
 * but belong to one loop thread; deadlines are set by callers on any thread
 * and cancelled by whichever thread completes the call.
 *
 * An entry is caller memory. The callback gets the 64-bit value given at add
 * time (copied under the lock), never the entry, so the entry's owner may
 * free it as soon as jet__deadline_del returns, even while its callback is
 * running: callbacks must look their object up by that value. The thread is
 * woken only when a new entry becomes the earliest. */
#ifndef JET_EVENT_TIMER_THREAD_H
#define JET_EVENT_TIMER_THREAD_H

#include <stdbool.h>
#include <stdint.h>

typedef void (*jet_deadline_cb_t)(uint64_t value);

typedef struct jet_deadline {
    int64_t when_us;
    uint64_t value;
    jet_deadline_cb_t cb;
    uint32_t heap_index; /* UINT32_MAX when not queued */
} jet_deadline_t;

static inline void jet__deadline_init(jet_deadline_t *d)
{
    d->heap_index = UINT32_MAX;
}
/* Queues d to fire at when_us (monotonic). 0, -ENOMEM, -EBUSY when d is
 * queued already (jet__deadline_del it first), or -EAGAIN when the deadline
 * thread could not be started (the first call starts it; every later call
 * then fails the same way). */
int jet__deadline_add(jet_deadline_t *d, int64_t when_us, jet_deadline_cb_t cb, uint64_t value);
/* Removes d; true when it was still queued (its callback will not run). */
bool jet__deadline_del(jet_deadline_t *d);
/* The calling thread is the deadline thread (in a callback). */
bool jet__deadline_in_thread(void);

#endif
