/* softub's rings with claim records (softub/softub_ring.h), without a
 * provider: producers on threads race for the same positions, and the
 * record of every slot a producer won must be its own (pid and note) from
 * its claim on, whatever a rival that lost the race wrote; a slot bid for
 * by a loser alone names the loser only while nobody has claimed it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../softub/softub_ring.h"
#include "testutil.h"

#define CAP      64u
#define ESIZE    64u
#define PER_THR  3000000
#define NPROD    2

typedef struct ring_case {
    struct sub_ring *r;
    int single_consumer; /* sub_cring_* (completion rings), else MPMC (event rings) */
    _Atomic int done;
    _Atomic long wrong_pid, wrong_note, no_record;
} ring_case_t;

typedef struct prod_arg {
    ring_case_t *rc;
    uint32_t me;
} prod_arg_t;

static void *producer(void *arg)
{
    prod_arg_t *a = arg;
    ring_case_t *rc = a->rc;
    for (long i = 0; i < PER_THR; i++) {
        uint64_t pos, note = (uint64_t)a->me << 40 | (uint64_t)i;
        void *slot;
        do {
            slot = rc->single_consumer ? sub_cring_enq_begin_noted(rc->r, &pos, a->me, note)
                                       : sub_ring_enq_begin_noted(rc->r, &pos, a->me, note);
        } while (slot == NULL);
        /* A moment after the claim, as a sender writes its CR: the window
         * in which a rival that lost could still write the record. */
        for (volatile int k = 0; k < 20; k++)
            ;
        uint32_t pid = 0;
        uint64_t got = 0;
        int rec = sub_ring_claim_read(rc->r, pos, &pid, &got);
        if (rec != 2)
            atomic_fetch_add(&rc->no_record, 1);
        else if (pid != a->me)
            atomic_fetch_add(&rc->wrong_pid, 1);
        else if (got != note)
            atomic_fetch_add(&rc->wrong_note, 1);
        memcpy(slot, &note, sizeof note);
        sub_ring_enq_commit(rc->r, pos);
    }
    return NULL;
}

static void *consumer(void *arg)
{
    ring_case_t *rc = arg;
    long left = (long)NPROD * PER_THR;
    while (left > 0) {
        uint64_t pos;
        if (rc->single_consumer) {
            if (sub_cring_deq_begin(rc->r, &pos) == NULL) continue;
            sub_cring_deq_commit(rc->r, pos);
        } else {
            if (sub_ring_deq_begin(rc->r, &pos) == NULL) continue;
            sub_ring_deq_commit(rc->r, pos);
        }
        left--;
    }
    atomic_store(&rc->done, 1);
    return NULL;
}

static void race(int single_consumer)
{
    ring_case_t rc = {.single_consumer = single_consumer};
    rc.r = aligned_alloc(64, (size_t)sub_ring_bytes_claims(CAP, ESIZE));
    JT_REQUIRE(rc.r);
    sub_ring_init_claims(rc.r, CAP, ESIZE);
    pthread_t c, p[NPROD];
    prod_arg_t pa[NPROD];
    JT_REQUIRE(pthread_create(&c, NULL, consumer, &rc) == 0);
    for (int i = 0; i < NPROD; i++) {
        pa[i] = (prod_arg_t){.rc = &rc, .me = 1000u + (uint32_t)i};
        JT_REQUIRE(pthread_create(&p[i], NULL, producer, &pa[i]) == 0);
    }
    for (int i = 0; i < NPROD; i++)
        pthread_join(p[i], NULL);
    pthread_join(c, NULL);
    JT_CHECK(atomic_load(&rc.done));
    JT_CHECK_EQ(atomic_load(&rc.no_record), 0);
    JT_CHECK_EQ(atomic_load(&rc.wrong_pid), 0);
    JT_CHECK_EQ(atomic_load(&rc.wrong_note), 0);
    free(rc.r);
}

static void completion_ring_records_name_the_claimant(void)
{
    race(1);
}

static void event_ring_records_name_the_claimant(void)
{
    race(0);
}

/* A bid alone (a producer that has not claimed, or lost) names its bidder
 * without a note; a record of another lap names nothing. */
static void bid_without_claim(void)
{
    struct sub_ring *r = aligned_alloc(64, (size_t)sub_ring_bytes_claims(CAP, ESIZE));
    JT_REQUIRE(r);
    sub_ring_init_claims(r, CAP, ESIZE);
    uint32_t pid = 0;
    uint64_t note = 1;
    JT_CHECK_EQ(sub_ring_claim_read(r, 0, &pid, &note), 0); /* never bid for */
    sub_ring_claim_bid(r, 0, 7);
    sub_ring_claim_bid(r, 0, 8); /* a second bidder does not replace the first */
    JT_CHECK_EQ(sub_ring_claim_read(r, 0, &pid, &note), 1);
    JT_CHECK_EQ(pid, 7u);
    JT_CHECK_EQ(note, 0u);
    sub_ring_claim_won(r, 0, 8, 0x55);
    JT_CHECK_EQ(sub_ring_claim_read(r, 0, &pid, &note), 2);
    JT_CHECK_EQ(pid, 8u);
    JT_CHECK_EQ(note, 0x55u);
    JT_CHECK_EQ(sub_ring_claim_read(r, CAP, &pid, &note), 0); /* the next lap's */
    free(r);
}

/* A producer that read the head a lap or more ago (preempted after its
 * look) and bids for that old position must leave the record of the
 * position's next lap alone: its claimant's record stays whole, and a
 * later lap's bid stands. */
static void stale_bid_a_lap_late(void)
{
    struct sub_ring *r = aligned_alloc(64, (size_t)sub_ring_bytes_claims(CAP, ESIZE));
    JT_REQUIRE(r);
    sub_ring_init_claims(r, CAP, ESIZE);
    uint64_t pos = 0;
    for (uint32_t i = 0; i <= CAP; i++) { /* a lap and one: position CAP is claimed last */
        JT_REQUIRE(sub_cring_enq_begin_noted(r, &pos, 1000 + i, 0x100 + i) != NULL);
        if (i == CAP) break;
        sub_cring_enq_commit(r, pos);
        uint64_t got;
        JT_REQUIRE(sub_cring_deq_begin(r, &got) != NULL && got == pos);
        sub_cring_deq_commit(r, got);
    }
    JT_REQUIRE(pos == CAP);
    sub_ring_claim_bid(r, 0, 4242); /* the late producer, for position 0 */
    uint32_t pid = 0;
    uint64_t note = 0;
    JT_CHECK_EQ(sub_ring_claim_read(r, CAP, &pid, &note), 2);
    JT_CHECK_EQ(pid, 1000u + CAP);
    JT_CHECK_EQ(note, 0x100u + CAP);
    /* Bid only (the claimant has not recorded yet): the late bid does not
     * replace it either. */
    sub_ring_claim_bid(r, 2 * CAP, 77);
    sub_ring_claim_bid(r, CAP, 4242);
    JT_CHECK_EQ(sub_ring_claim_read(r, 2 * CAP, &pid, &note), 1);
    JT_CHECK_EQ(pid, 77u);
    free(r);
}

int main(void)
{
    JT_RUN(completion_ring_records_name_the_claimant);
    JT_RUN(event_ring_records_name_the_claimant);
    JT_RUN(bid_without_claim);
    JT_RUN(stale_bid_a_lap_late);
    return jt_finish();
}
