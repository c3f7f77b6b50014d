#include "rpc/worker_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct jet_worker_pool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    jet_task_t *head, *tail; /* linked through node.next */
    bool stopping;
    int nthreads;
    pthread_t threads[];
};

/* The pool whose thread this is: a server's controlling calls refuse to
 * wait for the handlers from one of them. */
static __thread const jet_worker_pool_t *wp_current;

static void *worker_main(void *arg)
{
    jet_worker_pool_t *wp = arg;
    wp_current = wp;
    pthread_setname_np(pthread_self(), "jet_worker");
    pthread_mutex_lock(&wp->lock);
    for (;;) {
        while (!wp->head && !wp->stopping) pthread_cond_wait(&wp->cond, &wp->lock);
        jet_task_t *t = wp->head;
        if (!t) break;
        wp->head = (jet_task_t *)atomic_load_explicit(&t->node.next, memory_order_relaxed);
        if (!wp->head) wp->tail = NULL;
        pthread_mutex_unlock(&wp->lock);
        t->fn(t);
        pthread_mutex_lock(&wp->lock);
    }
    pthread_mutex_unlock(&wp->lock);
    return NULL;
}

int jet__worker_pool_create(int nthreads, jet_worker_pool_t **wp_p)
{
    if (nthreads <= 0) nthreads = 1;
    jet_worker_pool_t *wp = calloc(1, sizeof *wp + (size_t)nthreads * sizeof(pthread_t));
    if (!wp) return -ENOMEM;
    pthread_mutex_init(&wp->lock, NULL);
    pthread_cond_init(&wp->cond, NULL);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&wp->threads[i], NULL, worker_main, wp) != 0) {
            jet__worker_pool_destroy(wp);
            return -EAGAIN;
        }
        wp->nthreads++;
    }
    *wp_p = wp;
    return 0;
}

void jet__worker_pool_post(jet_worker_pool_t *wp, jet_task_t *task)
{
    atomic_store_explicit(&task->node.next, NULL, memory_order_relaxed);
    pthread_mutex_lock(&wp->lock);
    if (wp->tail)
        atomic_store_explicit(&wp->tail->node.next, &task->node, memory_order_relaxed);
    else
        wp->head = task;
    wp->tail = task;
    pthread_cond_signal(&wp->cond);
    pthread_mutex_unlock(&wp->lock);
}

bool jet__worker_pool_in_thread(const jet_worker_pool_t *wp)
{
    return wp && wp_current == wp;
}

void jet__worker_pool_destroy(jet_worker_pool_t *wp)
{
    if (!wp) return;
    pthread_mutex_lock(&wp->lock);
    wp->stopping = true;
    pthread_cond_broadcast(&wp->cond);
    pthread_mutex_unlock(&wp->lock);
    for (int i = 0; i < wp->nthreads; i++) pthread_join(wp->threads[i], NULL);
    pthread_mutex_destroy(&wp->lock);
    pthread_cond_destroy(&wp->cond);
    free(wp);
}
