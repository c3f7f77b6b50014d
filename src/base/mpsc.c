#include "base/mpsc.h"

void jet__mpsc_init(jet_mpsc_t *q)
{
    atomic_store_explicit(&q->stub.next, NULL, memory_order_relaxed);
    atomic_store_explicit(&q->head, &q->stub, memory_order_relaxed);
    q->tail = &q->stub;
}

bool jet__mpsc_push(jet_mpsc_t *q, jet_mpsc_node_t *n)
{
    atomic_store_explicit(&n->next, NULL, memory_order_relaxed);
    jet_mpsc_node_t *prev = atomic_exchange_explicit(&q->head, n, memory_order_acq_rel);
    /* Between the exchange and this store the consumer sees a gap and pops NULL. */
    atomic_store_explicit(&prev->next, n, memory_order_release);
    return prev == &q->stub;
}

jet_mpsc_node_t *jet__mpsc_pop(jet_mpsc_t *q)
{
    jet_mpsc_node_t *tail = q->tail;
    jet_mpsc_node_t *next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (tail == &q->stub) {
        if (!next) return NULL;
        q->tail = next;
        tail = next;
        next = atomic_load_explicit(&next->next, memory_order_acquire);
    }
    if (next) {
        q->tail = next;
        return tail;
    }
    jet_mpsc_node_t *head = atomic_load_explicit(&q->head, memory_order_acquire);
    if (tail != head) return NULL; /* a push is half done */
    /* tail is the last node: push the stub behind it so tail can be handed out. */
    jet__mpsc_push(q, &q->stub);
    next = atomic_load_explicit(&tail->next, memory_order_acquire);
    if (next) {
        q->tail = next;
        return tail;
    }
    return NULL;
}

bool jet__mpsc_empty(jet_mpsc_t *q)
{
    jet_mpsc_node_t *tail = q->tail;
    return tail == &q->stub && atomic_load_explicit(&tail->next, memory_order_acquire) == NULL &&
           atomic_load_explicit(&q->head, memory_order_acquire) == &q->stub;
}
