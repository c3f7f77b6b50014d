/* A pool of worker threads for handlers that block (server option
 * usercode_in_pool). Tasks are intrusive (jet_task_t) and run in FIFO order
 * by whichever worker is free. */
#ifndef JET_RPC_WORKER_POOL_H
#define JET_RPC_WORKER_POOL_H

#include <stdbool.h>

#include "event/loop.h"

typedef struct jet_worker_pool jet_worker_pool_t;

int jet__worker_pool_create(int nthreads, jet_worker_pool_t **wp_p);
/* Any thread. */
void jet__worker_pool_post(jet_worker_pool_t *wp, jet_task_t *task);
/* True on one of wp's threads (false for NULL). */
bool jet__worker_pool_in_thread(const jet_worker_pool_t *wp);
/* Runs what is queued, then joins the threads. */
void jet__worker_pool_destroy(jet_worker_pool_t *wp);

#endif
