/* MPSC queue: order, the stub node, and many producers against one consumer. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "base/mpsc.h"
#include "testutil.h"

typedef struct item {
    jet_mpsc_node_t node;
    int producer;
    int seq;
} item_t;

static item_t *item_of(jet_mpsc_node_t *n)
{
    return n ? (item_t *)((char *)n - offsetof(item_t, node)) : NULL;
}

static void test_empty(void)
{
    jet_mpsc_t q;
    jet__mpsc_init(&q);
    JT_CHECK(jet__mpsc_empty(&q));
    JT_CHECK(jet__mpsc_pop(&q) == NULL);
    JT_CHECK(jet__mpsc_pop(&q) == NULL);
    JT_CHECK(jet__mpsc_empty(&q));
}

static void test_single_thread_order(void)
{
    jet_mpsc_t q;
    jet__mpsc_init(&q);
    item_t it[100];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 100; i++) {
            it[i].seq = i;
            bool was_empty = jet__mpsc_push(&q, &it[i].node);
            /* Only the first push of a drained queue sees it empty. */
            JT_CHECK_EQ(was_empty, i == 0);
            JT_CHECK(!jet__mpsc_empty(&q));
        }
        for (int i = 0; i < 100; i++) {
            item_t *got = item_of(jet__mpsc_pop(&q));
            JT_REQUIRE(got);
            JT_CHECK(got == &it[i]);
        }
        JT_CHECK(jet__mpsc_pop(&q) == NULL);
        JT_CHECK(jet__mpsc_empty(&q));
    }
}

static void test_one_element(void)
{
    /* The single-node case goes through the stub re-push in pop. */
    jet_mpsc_t q;
    jet__mpsc_init(&q);
    item_t a, b;
    for (int i = 0; i < 5; i++) {
        JT_CHECK(jet__mpsc_push(&q, &a.node));
        JT_CHECK(item_of(jet__mpsc_pop(&q)) == &a);
        JT_CHECK(jet__mpsc_empty(&q));
        JT_CHECK(jet__mpsc_pop(&q) == NULL);
    }
    /* Interleaved: push, push, pop, push, pop, pop. */
    JT_CHECK(jet__mpsc_push(&q, &a.node));
    JT_CHECK(!jet__mpsc_push(&q, &b.node));
    JT_CHECK(item_of(jet__mpsc_pop(&q)) == &a);
    item_t c;
    jet__mpsc_push(&q, &c.node);
    JT_CHECK(item_of(jet__mpsc_pop(&q)) == &b);
    JT_CHECK(item_of(jet__mpsc_pop(&q)) == &c);
    JT_CHECK(jet__mpsc_pop(&q) == NULL);
    JT_CHECK(jet__mpsc_empty(&q));
    /* A popped node can be pushed again at once. */
    jet__mpsc_push(&q, &a.node);
    JT_CHECK(item_of(jet__mpsc_pop(&q)) == &a);
    JT_CHECK(jet__mpsc_empty(&q));
}

#define PRODUCERS    4
#define PER_PRODUCER 200000

typedef struct producer_arg {
    jet_mpsc_t *q;
    item_t *items;
    int id;
} producer_arg_t;

static void *producer(void *arg)
{
    producer_arg_t *pa = arg;
    for (int i = 0; i < PER_PRODUCER; i++) {
        pa->items[i].producer = pa->id;
        pa->items[i].seq = i;
        jet__mpsc_push(pa->q, &pa->items[i].node);
        if ((i & 1023) == 0) sched_yield(); /* mix the producers on 2 cores */
    }
    return NULL;
}

static void test_many_producers(void)
{
    static jet_mpsc_t q;
    jet__mpsc_init(&q);
    item_t *items = calloc((size_t)PRODUCERS * PER_PRODUCER, sizeof *items);
    JT_REQUIRE(items);
    pthread_t th[PRODUCERS];
    producer_arg_t pa[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++) {
        pa[p] = (producer_arg_t){&q, items + (size_t)p * PER_PRODUCER, p};
        JT_REQUIRE(pthread_create(&th[p], NULL, producer, &pa[p]) == 0);
    }
    int next[PRODUCERS] = {0};
    long total = 0, bad_order = 0, bad_producer = 0;
    /* Only a guard against a lost node hanging the test, not a timing check. */
    uint64_t give_up = jt_now_us() + 120u * 1000000u;
    bool gave_up = false;
    while (total < (long)PRODUCERS * PER_PRODUCER) {
        item_t *it = item_of(jet__mpsc_pop(&q));
        if (!it) {
            if (jt_now_us() > give_up) {
                gave_up = true;
                break;
            }
            sched_yield();
            continue;
        }
        if (it->producer < 0 || it->producer >= PRODUCERS) {
            bad_producer++;
        } else {
            if (it->seq != next[it->producer]) bad_order++;
            next[it->producer] = it->seq + 1;
        }
        total++;
    }
    for (int p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    JT_CHECK(!gave_up);
    JT_CHECK_EQ(total, (long)PRODUCERS * PER_PRODUCER);
    JT_CHECK_EQ(bad_producer, 0);
    JT_CHECK_EQ(bad_order, 0);
    for (int p = 0; p < PRODUCERS; p++)
        JT_CHECK_EQ(next[p], PER_PRODUCER);
    JT_CHECK(jet__mpsc_pop(&q) == NULL);
    JT_CHECK(jet__mpsc_empty(&q));
    free(items);
}

int main(void)
{
    JT_RUN(test_empty);
    JT_RUN(test_single_thread_order);
    JT_RUN(test_one_element);
    JT_RUN(test_many_producers);
    return jt_finish();
}
