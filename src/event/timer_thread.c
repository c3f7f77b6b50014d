#include "event/timer_thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/futex.h"
#include "base/time.h"

static struct {
    pthread_mutex_t lock;
    jet_deadline_t **heap;
    uint32_t n, cap;
    int64_t sleep_until; /* what the thread sleeps for; INT64_MAX = no limit */
    _Atomic uint32_t seq; /* futex word: bumped to wake the thread */
    pthread_once_t once;
    bool started;
} tt = {.lock = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT, .sleep_until = INT64_MAX};

static void tt_swap(uint32_t a, uint32_t b)
{
    jet_deadline_t *t = tt.heap[a];
    tt.heap[a] = tt.heap[b];
    tt.heap[b] = t;
    tt.heap[a]->heap_index = a;
    tt.heap[b]->heap_index = b;
}

static void tt_up(uint32_t i)
{
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (tt.heap[p]->when_us <= tt.heap[i]->when_us) break;
        tt_swap(i, p);
        i = p;
    }
}

static void tt_down(uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < tt.n && tt.heap[l]->when_us < tt.heap[m]->when_us) m = l;
        if (r < tt.n && tt.heap[r]->when_us < tt.heap[m]->when_us) m = r;
        if (m == i) return;
        tt_swap(i, m);
        i = m;
    }
}

static void tt_remove_at(uint32_t i)
{
    jet_deadline_t *d = tt.heap[i];
    tt.n--;
    if (i != tt.n) {
        tt.heap[i] = tt.heap[tt.n];
        tt.heap[i]->heap_index = i;
        tt_down(i);
        tt_up(i);
    }
    d->heap_index = UINT32_MAX;
}

static __thread bool tt_on_thread;

bool jet__deadline_in_thread(void)
{
    return tt_on_thread;
}

static void *tt_main(void *arg)
{
    pthread_setname_np(pthread_self(), "jet_deadline");
    tt_on_thread = true;
    for (;;) {
        pthread_mutex_lock(&tt.lock);
        int64_t now = jet_now_us();
        while (tt.n > 0 && tt.heap[0]->when_us <= now) {
            jet_deadline_t *d = tt.heap[0];
            jet_deadline_cb_t cb = d->cb;
            uint64_t value = d->value;
            tt_remove_at(0);
            /* d may be freed by its owner from here on; only value is used. */
            pthread_mutex_unlock(&tt.lock);
            cb(value);
            pthread_mutex_lock(&tt.lock);
            now = jet_now_us();
        }
        tt.sleep_until = tt.n > 0 ? tt.heap[0]->when_us : INT64_MAX;
        uint32_t seq = atomic_load(&tt.seq);
        int64_t wait = tt.sleep_until == INT64_MAX ? -1 : tt.sleep_until - now;
        pthread_mutex_unlock(&tt.lock);
        jet__futex_wait(&tt.seq, seq, wait);
    }
    return NULL;
}

static void tt_start(void)
{
    pthread_t th;
    if (pthread_create(&th, NULL, tt_main, NULL) == 0) {
        pthread_detach(th);
        tt.started = true;
    }
}

int jet__deadline_add(jet_deadline_t *d, int64_t when_us, jet_deadline_cb_t cb, uint64_t value)
{
    pthread_once(&tt.once, tt_start);
    if (!tt.started) return -EAGAIN;
    pthread_mutex_lock(&tt.lock);
    if (d->heap_index != UINT32_MAX) {
        /* Queued already: a second entry would corrupt the heap. */
        pthread_mutex_unlock(&tt.lock);
        return -EBUSY;
    }
    if (tt.n == tt.cap) {
        uint32_t cap = tt.cap ? tt.cap * 2 : 1024;
        jet_deadline_t **h = realloc(tt.heap, cap * sizeof *h);
        if (!h) {
            pthread_mutex_unlock(&tt.lock);
            return -ENOMEM;
        }
        tt.heap = h;
        tt.cap = cap;
    }
    d->when_us = when_us;
    d->cb = cb;
    d->value = value;
    d->heap_index = tt.n;
    tt.heap[tt.n++] = d;
    tt_up(d->heap_index);
    bool wake = when_us < tt.sleep_until;
    if (wake) {
        tt.sleep_until = when_us;
        atomic_fetch_add(&tt.seq, 1);
    }
    pthread_mutex_unlock(&tt.lock);
    if (wake) jet__futex_wake(&tt.seq, 1);
    return 0;
}

bool jet__deadline_del(jet_deadline_t *d)
{
    pthread_mutex_lock(&tt.lock);
    bool queued = d->heap_index != UINT32_MAX;
    if (queued) tt_remove_at(d->heap_index);
    pthread_mutex_unlock(&tt.lock);
    return queued;
}
