/* Intrusive wait-free multi-producer single-consumer queue (Vyukov).
 *
 * push() is wait-free and may run on any thread; pop() runs on the single
 * consumer. pop() can transiently return NULL while a producer is between
 * its two steps; the consumer sees the node on a later pop(). The queue
 * holds a stub node, so it needs no allocation. */
#ifndef JET_BASE_MPSC_H
#define JET_BASE_MPSC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct jet_mpsc_node {
    _Atomic(struct jet_mpsc_node *) next;
} jet_mpsc_node_t;

typedef struct jet_mpsc {
    _Atomic(jet_mpsc_node_t *) head; /* producers swap here */
    char pad_[64 - sizeof(void *)];
    jet_mpsc_node_t *tail; /* consumer side */
    jet_mpsc_node_t stub;
} jet_mpsc_t;

void jet__mpsc_init(jet_mpsc_t *q);
/* Returns true when the queue was empty before this push (a hint that the
 * consumer may need waking). */
bool jet__mpsc_push(jet_mpsc_t *q, jet_mpsc_node_t *n);
jet_mpsc_node_t *jet__mpsc_pop(jet_mpsc_t *q);
/* True when nothing is queued (consumer side; may miss an in-flight push). */
bool jet__mpsc_empty(jet_mpsc_t *q);

#endif
