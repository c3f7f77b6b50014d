/* softub_ring.h: bounded multi-producer multi-consumer rings in shared memory.
 *
 * Dmitry Vyukov's bounded MPMC queue: every slot starts with a 64-bit
 * sequence number, so producers and consumers in any number of processes
 * claim slots with one CAS on head/tail and publish them with one release
 * store, without locks and without system calls. The ring lives entirely in a
 * process region (softub_fabric.c) that peers map with MAP_SHARED; C11 atomics
 * on lock-free types work across processes because they are plain hardware
 * atomics on the shared physical page.
 *
 * Layout: a 192-byte header (geometry, then head and tail on cache lines of
 * their own) followed by cap slots of esize bytes; the first 8 bytes of a slot
 * are its sequence number, the payload follows. cap is a power of two.
 *
 * Contract: enq_begin/deq_begin return the payload of a claimed slot (or NULL
 * when full/empty); the caller fills/reads it and then commits it. A claimed
 * slot must be committed promptly: a later slot published before an earlier
 * one stays invisible to consumers until the earlier one is committed. A
 * producer that dies between begin and commit leaves a hole that stalls the
 * ring; rings with claim records (below) let their consumer pass it once
 * the claimant is gone. */
#ifndef SOFTUB_RING_H
#define SOFTUB_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct sub_ring {
    uint32_t cap;
    uint32_t mask;
    uint32_t esize; /* slot size in bytes, including the 8-byte sequence */
    uint32_t magic;
    uint8_t pad0[48];
    _Atomic uint64_t head; /* next slot to produce */
    /* Single-consumer rings only: the last tail a producer read, kept on the
     * producers' own line so that they read the consumer's line only when
     * the ring looks full. */
    _Atomic uint64_t tail_seen;
    uint8_t pad1[48];
    _Atomic uint64_t tail; /* next slot to consume */
    uint8_t pad2[56];
};

_Static_assert(sizeof(struct sub_ring) == 192, "sub_ring header must stay 192 bytes");

#define SUB_RING_MAGIC 0x52696e67u

static inline uint64_t sub_ring_bytes(uint32_t cap, uint32_t esize)
{
    return sizeof(struct sub_ring) + (uint64_t)cap * esize;
}

static inline uint32_t sub_ring_pow2(uint32_t n)
{
    uint32_t c = 1;
    while (c < n && c < (1u << 30))
        c <<= 1;
    return c;
}

static inline _Atomic uint64_t *sub_ring_seq(struct sub_ring *r, uint64_t pos)
{
    return (_Atomic uint64_t *)((uint8_t *)(r + 1) + (pos & r->mask) * (uint64_t)r->esize);
}

/* Only the owner initialises a ring, before publishing its offset to anyone. */
static inline void sub_ring_init(struct sub_ring *r, uint32_t cap, uint32_t esize)
{
    r->cap = cap;
    r->mask = cap - 1;
    r->esize = esize;
    r->magic = SUB_RING_MAGIC;
    atomic_init(&r->head, 0);
    atomic_init(&r->tail_seen, 0);
    atomic_init(&r->tail, 0);
    for (uint64_t i = 0; i < cap; i++)
        atomic_init(sub_ring_seq(r, i), i);
}

/* Claims the next slot to produce (NULL when full). A ring made with
 * sub_ring_init_claims is claimed with sub_ring_enq_begin_noted (below),
 * which records pid and note: rec set. */
static inline void sub_ring_claim_bid(struct sub_ring *r, uint64_t pos, uint32_t pid);
static inline void sub_ring_claim_won(struct sub_ring *r, uint64_t pos, uint32_t pid,
                                      uint64_t note);
static inline void *sub_ring_enq_begin_(struct sub_ring *r, uint64_t *pos_out, int rec,
                                        uint32_t pid, uint64_t note)
{
    uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (;;) {
        _Atomic uint64_t *seq = sub_ring_seq(r, pos);
        uint64_t s = atomic_load_explicit(seq, memory_order_acquire);
        int64_t dif = (int64_t)(s - pos);
        if (dif == 0) {
            /* seq_cst: releases a bid to whoever sees the head moved. */
            if (rec)
                sub_ring_claim_bid(r, pos, pid);
            if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
                                                      memory_order_seq_cst,
                                                      memory_order_relaxed)) {
                if (rec)
                    sub_ring_claim_won(r, pos, pid, note);
                *pos_out = pos;
                return (uint8_t *)seq + 8;
            }
        } else if (dif < 0) {
            return NULL; /* full */
        } else {
            pos = atomic_load_explicit(&r->head, memory_order_relaxed);
        }
    }
}

static inline void *sub_ring_enq_begin(struct sub_ring *r, uint64_t *pos_out)
{
    return sub_ring_enq_begin_(r, pos_out, 0, 0, 0);
}

static inline void *sub_ring_enq_begin_noted(struct sub_ring *r, uint64_t *pos_out, uint32_t pid,
                                             uint64_t note)
{
    return sub_ring_enq_begin_(r, pos_out, 1, pid, note);
}

static inline void sub_ring_enq_commit(struct sub_ring *r, uint64_t pos)
{
    atomic_store_explicit(sub_ring_seq(r, pos), pos + 1, memory_order_release);
}

static inline void *sub_ring_deq_begin(struct sub_ring *r, uint64_t *pos_out)
{
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (;;) {
        _Atomic uint64_t *seq = sub_ring_seq(r, pos);
        uint64_t s = atomic_load_explicit(seq, memory_order_acquire);
        int64_t dif = (int64_t)(s - (pos + 1));
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *pos_out = pos;
                return (uint8_t *)seq + 8;
            }
        } else if (dif < 0) {
            return NULL; /* empty, or the next slot is claimed but not yet published */
        } else {
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        }
    }
}

static inline void sub_ring_deq_commit(struct sub_ring *r, uint64_t pos)
{
    atomic_store_explicit(sub_ring_seq(r, pos), pos + r->cap, memory_order_release);
}

/* Claim records: a ring made with sub_ring_init_claims keeps one per slot,
 * after the slots. A producer that may die between its claim and its commit
 * (another process, killed) claims with sub_ring_enq_begin_noted or
 * sub_cring_enq_begin_noted, so that a consumer stuck at the hole it left
 * can ask whether that process still lives (sub_ring_claim_read,
 * sub_ring_tail_hole, sub_ring_pass_hole).
 *
 * `who` (the low 32 bits of a position, then a pid, in one word) is written
 * before the claim, with a CAS that replaces only a word of an earlier lap:
 * the first producer to go for the position names itself, and a producer
 * that read the head a lap or more ago (preempted) names nobody. The winner
 * of the claim then writes its pid and its note, and `note_tag` (release)
 * last. A record whose note_tag names the position is therefore wholly its
 * claimant's; one whose `who` alone names it names the claimant or, for a
 * few instructions after the claim, a rival. */
struct sub_ring_claim {
    _Atomic uint64_t who;      /* (uint32_t)pos << 32 | pid: the first bid */
    _Atomic uint32_t note_tag; /* (uint32_t)pos once pid and note are the claimant's */
    uint32_t pid;              /* the claimant's (__atomic) */
    uint64_t note;             /* the claimant's: what the consumer must undo for it (__atomic) */
};

static inline uint64_t sub_ring_bytes_claims(uint32_t cap, uint32_t esize)
{
    return sub_ring_bytes(cap, esize) + (uint64_t)cap * sizeof(struct sub_ring_claim);
}

static inline struct sub_ring_claim *sub_ring_claim_at(struct sub_ring *r, uint64_t pos)
{
    struct sub_ring_claim *c =
        (struct sub_ring_claim *)((uint8_t *)(r + 1) + (uint64_t)r->cap * r->esize);
    return c + (pos & r->mask);
}

static inline void sub_ring_init_claims(struct sub_ring *r, uint32_t cap, uint32_t esize)
{
    sub_ring_init(r, cap, esize);
    for (uint64_t i = 0; i < cap; i++) {
        struct sub_ring_claim *c = sub_ring_claim_at(r, i);
        uint32_t before = (uint32_t)(i - cap); /* a lap before any claim */
        atomic_init(&c->who, (uint64_t)before << 32);
        atomic_init(&c->note_tag, before);
        c->pid = 0;
        c->note = 0;
    }
}

static inline uint64_t sub_ring_who(uint64_t pos, uint32_t pid)
{
    return (uint64_t)(uint32_t)pos << 32 | pid;
}

/* Before the claim of pos: names pid, unless a rival already did (or the
 * record is of a later lap: pos was read long ago). */
static inline void sub_ring_claim_bid(struct sub_ring *r, uint64_t pos, uint32_t pid)
{
    struct sub_ring_claim *c = sub_ring_claim_at(r, pos);
    uint64_t cur = atomic_load_explicit(&c->who, memory_order_relaxed);
    if ((int32_t)((uint32_t)(cur >> 32) - (uint32_t)pos) < 0)
        (void)atomic_compare_exchange_strong_explicit(&c->who, &cur, sub_ring_who(pos, pid),
                                                      memory_order_relaxed,
                                                      memory_order_relaxed);
}

/* After the claim of pos: the claimant's own record. */
static inline void sub_ring_claim_won(struct sub_ring *r, uint64_t pos, uint32_t pid,
                                      uint64_t note)
{
    struct sub_ring_claim *c = sub_ring_claim_at(r, pos);
    __atomic_store_n(&c->pid, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&c->note, note, __ATOMIC_RELAXED);
    atomic_store_explicit(&c->note_tag, (uint32_t)pos, memory_order_release);
}

/* What the record of slot `pos` says: 2, the claimant's pid and note; 1, a
 * pid only (the claimant's, or for a moment a rival's; *note 0); 0, nothing
 * of this position. */
static inline int sub_ring_claim_read(struct sub_ring *r, uint64_t pos, uint32_t *pid,
                                      uint64_t *note)
{
    struct sub_ring_claim *c = sub_ring_claim_at(r, pos);
    *note = 0;
    if (atomic_load_explicit(&c->note_tag, memory_order_acquire) == (uint32_t)pos) {
        *pid = __atomic_load_n(&c->pid, __ATOMIC_RELAXED);
        *note = __atomic_load_n(&c->note, __ATOMIC_RELAXED);
        return 2;
    }
    uint64_t w = atomic_load_explicit(&c->who, memory_order_acquire);
    if ((uint32_t)(w >> 32) != (uint32_t)pos)
        return 0;
    *pid = (uint32_t)w;
    return 1;
}

/* Single-consumer variant (completion rings: one consumer at a time, under
 * the owner's lock). Producers claim and publish exactly as above; the
 * consumer never writes a slot, it publishes its progress in `tail` after it
 * has copied the slot out. A slot line therefore moves once per message,
 * producer to consumer, as in a plain shared-memory ping-pong; producers learn
 * that slots are free from `tail_seen` and read `tail` about once a lap.
 * Initialised by sub_ring_init_claims (slot i holds i, published as
 * pos + 1); producers record their claims. */
static inline void *sub_cring_enq_begin_noted(struct sub_ring *r, uint64_t *pos_out, uint32_t pid,
                                              uint64_t note)
{
    uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (;;) {
        /* Acquire pairs with the consumer's release of `tail` (directly, or
         * through the producer that copied it into tail_seen): its reads of
         * the slot happen before the overwrite below. */
        uint64_t seen = atomic_load_explicit(&r->tail_seen, memory_order_acquire);
        if ((int64_t)(pos - seen) >= (int64_t)r->cap) {
            uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
            atomic_store_explicit(&r->tail_seen, t, memory_order_release);
            if ((int64_t)(pos - t) >= (int64_t)r->cap) {
                uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
                if (h == pos)
                    return NULL; /* full */
                pos = h;
                continue;
            }
        }
        /* Slot pos is free (its previous lap consumed): its record may be
         * bid for. seq_cst: the claim is the producer's half of the arm
         * handshake of completion queues (softub_jfc.c, jfc_notify), and
         * releases the bid to whoever sees the head moved. */
        sub_ring_claim_bid(r, pos, pid);
        if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1, memory_order_seq_cst,
                                                  memory_order_relaxed)) {
            sub_ring_claim_won(r, pos, pid, note);
            *pos_out = pos;
            return (uint8_t *)sub_ring_seq(r, pos) + 8;
        }
    }
}

#define sub_cring_enq_commit sub_ring_enq_commit

/* The consumer's next slot, or NULL when it is empty or claimed but not yet
 * published. Callers are serialised. */
static inline void *sub_cring_deq_begin(struct sub_ring *r, uint64_t *pos_out)
{
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    _Atomic uint64_t *seq = sub_ring_seq(r, pos);
    if (atomic_load_explicit(seq, memory_order_acquire) != pos + 1)
        return NULL;
    *pos_out = pos;
    return (uint8_t *)seq + 8;
}

/* True when the consumer's next slot is published: a lock-free peek for
 * serialised consumers, so that an empty poll takes no lock. Slots of more
 * than one line (completion rings: lines 1 to 3 carry small payloads) have
 * those lines touched on every peek: when a producer has written them, the
 * spinning consumer then misses on all at once, not on each only after the
 * one before has arrived (measured on a 64 B RPC over softub: p50 2.63 us with
 * every payload line touched, 2.85 us with line 1 or none). */
static inline int sub_cring_ready(struct sub_ring *r)
{
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    _Atomic uint64_t *seq = sub_ring_seq(r, pos);
    for (uint32_t off = 64; off < r->esize && off < 4 * 64u; off += 64)
        __builtin_prefetch((const uint8_t *)seq + off, 0, 3);
    return atomic_load_explicit(seq, memory_order_relaxed) == pos + 1;
}

/* Frees every slot before `pos + 1`, after the caller copied them out. */
static inline void sub_cring_deq_commit(struct sub_ring *r, uint64_t pos)
{
    atomic_store_explicit(&r->tail, pos + 1, memory_order_release);
}

/* Produced but not yet consumed (approximate under concurrency). */
static inline uint64_t sub_ring_count(struct sub_ring *r)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    return h >= t ? h - t : 0;
}

/* Producer side of a depth check: true when at least `n` slots are produced
 * and not yet consumed. Reads the consumers' line only when the producers'
 * cached tail says the ring may be that full. */
static inline int sub_ring_holds(struct sub_ring *r, uint64_t n)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t seen = atomic_load_explicit(&r->tail_seen, memory_order_relaxed);
    if ((int64_t)(h - seen) < (int64_t)n)
        return 0;
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    atomic_store_explicit(&r->tail_seen, t, memory_order_release);
    return (int64_t)(h - t) >= (int64_t)n;
}

/* The consumer's next slot when it is claimed and not yet published (a
 * hole, for a moment or for good): 1 and its position. Serialised
 * consumers; both kinds of ring publish slot pos as pos + 1. by_head: told
 * by the producers' head; else only when the slot after it is published,
 * which reads no line a producer writes on every claim (the head read
 * costs a spinning consumer's peer a miss on its next claim: +0.17 us on a
 * one-way ping-pong when read every 64 empty polls). */
static inline int sub_ring_tail_hole(struct sub_ring *r, int by_head, uint64_t *pos_out)
{
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (atomic_load_explicit(sub_ring_seq(r, t), memory_order_acquire) == t + 1)
        return 0;
    if (by_head ? atomic_load_explicit(&r->head, memory_order_acquire) <= t
                : atomic_load_explicit(sub_ring_seq(r, t + 1), memory_order_acquire) != t + 2)
        return 0;
    *pos_out = t;
    return 1;
}

/* Passes the hole at `pos` (sub_ring_tail_hole), whose claimant is gone and
 * will never write it; single_consumer: a completion ring (sub_cring_*).
 * The slot then serves the next lap as if consumed. */
static inline void sub_ring_pass_hole(struct sub_ring *r, uint64_t pos, int single_consumer)
{
    if (single_consumer) {
        atomic_store_explicit(&r->tail, pos + 1, memory_order_release);
        return;
    }
    uint64_t t = pos;
    if (atomic_compare_exchange_strong_explicit(&r->tail, &t, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed))
        sub_ring_deq_commit(r, pos);
}

/* True when a slot was claimed at the tail but its producer has not
 * published it yet (a consumer can wait for it instead of reporting empty). */
static inline int sub_ring_tail_pending(struct sub_ring *r)
{
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    return h > t;
}

#endif
