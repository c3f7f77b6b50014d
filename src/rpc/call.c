#include "rpc/call.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/pool.h"
#include "base/time.h"
#include "jetrpc/errors.h"

/* ---- correlation-id registry -------------------------------------------- */

#define CID_CHUNK_BITS 12
#define CID_CHUNK      (1u << CID_CHUNK_BITS)
#define CID_MAX_CHUNKS 1024 /* 4M calls in flight at most */
/* A waiter whose expiry found the call owned by another thread looks again
 * this often until that owner has ended it. */
#define CID_EXPIRE_RETRY_US 1000

typedef struct cid_slot {
    /* The versions a claim accepts: the current one (low half) and, while
     * a call has a backup request out, the version of its earlier attempt
     * (high half; 0: none). One word, so that a claim of either ends both. */
    _Atomic uint64_t vers;
    _Atomic uint32_t next_free; /* index + 1 of the next free slot */
    /* The attempt's owner: its version (high half) and the tag of the
     * connection it was written on (low half); see jet__cid_claim_from.
     * alt_owner: the same for the earlier attempt (jet__cid_set_alt). */
    _Atomic uint64_t owner;
    _Atomic uint64_t alt_owner;
    /* Atomic for jet__cid_peek, which may read it while the slot changes
     * hands; a claim owns it. */
    _Atomic(jet_call_t *) call;
    /* One word, so that a joiner's registration and the free that ends it
     * are ordered on one location. Low half: the free count (bumped when the
     * slot is freed, i.e. after the call's done callback returned), the
     * futex word joiners sleep on. High half: how the joiners of the current
     * count wait, so that a completion nobody waits for makes no system
     * call: CID_WAIT_FUTEX when some sleep on the futex, CID_WAIT_LOOP with
     * the index of the loop one of them drives (and may sleep in the epoll
     * of; one loop at a time: a joiner that would drive another one sleeps
     * on the futex instead). Joiners add themselves with a CAS that fails
     * once the count moved on: a late joiner of a freed call cannot touch
     * the registrations of the slot's next call. */
    _Atomic uint64_t state;
    /* A cancel of the issue whose free count is the low half, when the high
     * half is 1 (jet__cid_cancel); an older issue's mark names another count. */
    _Atomic uint64_t cancel;
    /* An answer to the held earlier attempt (vers's high half with
     * CID_HELD), kept for whoever ends the hold (jet__cid_park). */
    _Atomic(jet_cid_parked_t *) parked;
} cid_slot_t;

/* In vers's high half: the earlier attempt of a backup request is held by
 * the call's owner, refused but not stale (jet__cid_park). Versions stay
 * below it. */
#define CID_HELD    0x80000000u
#define CID_VER_MAX 0x7fffffffu

static inline uint32_t cid_next_ver(uint32_t ver)
{
    return ver >= CID_VER_MAX ? 1 : ver + 1;
}

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cid_slot_t.state: the futex word is the low half of a little-endian word"
#endif

enum { CID_WAIT_NONE = 0, CID_WAIT_FUTEX = 1, CID_WAIT_LOOP = 2 };

static inline uint32_t cid_seq(uint64_t state) { return (uint32_t)state; }
static inline _Atomic uint32_t *cid_futex(cid_slot_t *slot)
{
    return (_Atomic uint32_t *)(void *)&slot->state;
}

static _Atomic(cid_slot_t *) cid_chunks[CID_MAX_CHUNKS];
/* Free slots: a lock-free stack whose head carries a tag against ABA
 * (high 32 bits: tag, low 32 bits: slot index + 1, 0 = empty). Only growing
 * the slot array takes the lock. */
static _Atomic uint64_t cid_free_head;
static struct {
    pthread_mutex_t lock;
    _Atomic uint32_t nslots;
} cid_reg = {.lock = PTHREAD_MUTEX_INITIALIZER};

static cid_slot_t *cid_slot(uint32_t idx)
{
    if (idx >= CID_MAX_CHUNKS * CID_CHUNK) return NULL;
    cid_slot_t *chunk = atomic_load_explicit(&cid_chunks[idx >> CID_CHUNK_BITS],
                                             memory_order_acquire);
    return chunk ? &chunk[idx & (CID_CHUNK - 1)] : NULL;
}

/* The slot was freed more than free_seq times. Acquire: whoever sees it
 * may read what the call's end wrote. */
static bool cid_slot_freed_since(const cid_slot_t *slot, uint32_t free_seq)
{
    return cid_seq(atomic_load_explicit(&slot->state, memory_order_acquire)) != free_seq;
}

static void cid_push_free(uint32_t idx)
{
    cid_slot_t *slot = cid_slot(idx);
    uint64_t head = atomic_load_explicit(&cid_free_head, memory_order_relaxed), next;
    do {
        atomic_store_explicit(&slot->next_free, (uint32_t)head, memory_order_relaxed);
        next = ((head >> 32) + 1) << 32 | (uint64_t)(idx + 1);
    } while (!atomic_compare_exchange_weak_explicit(&cid_free_head, &head, next,
                                                    memory_order_release, memory_order_relaxed));
}

static bool cid_pop_free(uint32_t *idx_p)
{
    uint64_t head = atomic_load_explicit(&cid_free_head, memory_order_acquire), next;
    do {
        uint32_t top = (uint32_t)head;
        if (top == 0) return false;
        uint32_t below = atomic_load_explicit(&cid_slot(top - 1)->next_free, memory_order_relaxed);
        next = ((head >> 32) + 1) << 32 | below;
        *idx_p = top - 1;
    } while (!atomic_compare_exchange_weak_explicit(&cid_free_head, &head, next,
                                                    memory_order_acquire, memory_order_acquire));
    return true;
}

static int cid_grow(uint32_t *idx_p)
{
    pthread_mutex_lock(&cid_reg.lock);
    uint32_t idx = atomic_load_explicit(&cid_reg.nslots, memory_order_relaxed);
    if (idx >= CID_MAX_CHUNKS * CID_CHUNK) {
        pthread_mutex_unlock(&cid_reg.lock);
        return -EAGAIN;
    }
    if ((idx & (CID_CHUNK - 1)) == 0) {
        cid_slot_t *chunk = calloc(CID_CHUNK, sizeof *chunk);
        if (!chunk) {
            pthread_mutex_unlock(&cid_reg.lock);
            return -ENOMEM;
        }
        /* Version 1 first, so that a zero correlation id never matches. */
        for (uint32_t i = 0; i < CID_CHUNK; i++)
            atomic_init(&chunk[i].vers, 1);
        atomic_store_explicit(&cid_chunks[idx >> CID_CHUNK_BITS], chunk, memory_order_release);
    }
    atomic_store_explicit(&cid_reg.nslots, idx + 1, memory_order_release);
    pthread_mutex_unlock(&cid_reg.lock);
    *idx_p = idx;
    return 0;
}

/* Takes a slot for call; for a client call its slot and id too (*token_p),
 * published as its join token unless token_p is given. */
static int cid_take(jet_call_t *call, bool client, uint64_t *cid_p, uint64_t *token_p)
{
    uint32_t idx;
    if (!cid_pop_free(&idx)) {
        int rc = cid_grow(&idx);
        if (rc < 0) return rc;
    }
    cid_slot_t *slot = cid_slot(idx);
    atomic_store_explicit(&slot->call, call, memory_order_relaxed);
    if (client) {
        call->slot = idx;
        call->joinable = true;
        uint32_t seq = cid_seq(atomic_load_explicit(&slot->state, memory_order_relaxed));
        uint64_t token = (uint64_t)(idx + 1) << 32 | seq;
        if (token_p)
            *token_p = token;
        else
            atomic_store_explicit(&call->join_token, token, memory_order_release);
    }
    /* Publishes call before any claim can see this version (claims acquire).
     * Version 0 is skipped (after a wrap): no cid is 0, the "none" of the
     * callers, nor a server handle. */
    uint32_t ver = (uint32_t)atomic_load_explicit(&slot->vers, memory_order_relaxed);
    if (ver == 0 || ver > CID_VER_MAX) ver = 1;
    atomic_store_explicit(&slot->vers, ver, memory_order_release);
    *cid_p = ((uint64_t)idx << 32) | ver;
    return 0;
}

int jet__cid_alloc(jet_call_t *call, uint64_t *cid_p)
{
    return cid_take(call, true, cid_p, NULL);
}

int jet__cid_reserve(jet_call_t *call, uint64_t *cid_p, uint64_t *token_p)
{
    return cid_take(call, true, cid_p, token_p);
}

int jet__cid_alloc_handle(jet_call_t *call, uint64_t *cid_p)
{
    return cid_take(call, false, cid_p, NULL);
}

/* vers accepts the version ver (never 0). */
static inline bool cid_accepts(uint64_t vers, uint32_t ver)
{
    return ver != 0 && ((uint32_t)vers == ver || (uint32_t)(vers >> 32) == ver);
}

jet_call_t *jet__cid_peek(uint64_t cid)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return NULL;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot ||
        !cid_accepts(atomic_load_explicit(&slot->vers, memory_order_acquire), (uint32_t)cid))
        return NULL;
    /* Read between two looks at the version, as a seqlock: a claim, free
     * and retake of the slot in between moved the version on, so the call
     * of a later request is never returned for this cid. */
    jet_call_t *call = atomic_load_explicit(&slot->call, memory_order_acquire);
    if (!cid_accepts(atomic_load_explicit(&slot->vers, memory_order_acquire), (uint32_t)cid))
        return NULL;
    return call;
}

/* vers once the version ver (accepted by vers) is claimed, for the next
 * version next: past the current version, whichever of the two was claimed.
 * A claim of the current attempt of a backup request holds the earlier one
 * (its owner then accepts it again or drops it); a claim of the earlier
 * one refuses the current one from now on. */
static uint64_t cid_claimed(uint64_t vers, uint32_t ver, uint32_t next)
{
    uint32_t alt = (uint32_t)(vers >> 32);
    if (alt != 0 && (uint32_t)vers == ver) return (uint64_t)(alt | CID_HELD) << 32 | next;
    return next;
}

/* hold: the attempt ver, the only one accepted, is claimed and held (a
 * backup request is made while it stays out). */
static jet_call_t *cid_claim(uint64_t cid, uint64_t *next_cid_p, bool hold)
{
    uint32_t idx = (uint32_t)(cid >> 32), ver = (uint32_t)cid;
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return NULL;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot) return NULL;
    uint64_t vers = atomic_load_explicit(&slot->vers, memory_order_relaxed), to;
    uint32_t next;
    do {
        if (!cid_accepts(vers, ver)) return NULL;
        next = cid_next_ver((uint32_t)vers);
        if (hold) {
            if (vers != ver) return NULL;
            to = (uint64_t)(ver | CID_HELD) << 32 | next;
        } else {
            to = cid_claimed(vers, ver, next);
        }
    } while (!atomic_compare_exchange_weak_explicit(&slot->vers, &vers, to, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (next_cid_p) *next_cid_p = ((uint64_t)idx << 32) | next;
    return atomic_load_explicit(&slot->call, memory_order_relaxed);
}

jet_call_t *jet__cid_claim(uint64_t cid, uint64_t *next_cid_p)
{
    return cid_claim(cid, next_cid_p, false);
}

/* The slot's parked answer, taken by whoever just ended its hold. */
static jet_cid_parked_t *cid_unpark(cid_slot_t *slot)
{
    return atomic_exchange_explicit(&slot->parked, NULL, memory_order_seq_cst);
}

/* The attempt named by want (its version << 32 | a connection's tag) is
 * this connection's: as its current attempt, or as the earlier attempt of
 * a backup request. */
static bool cid_owned(cid_slot_t *slot, uint64_t want)
{
    return (atomic_load_explicit(&slot->owner, memory_order_acquire) &
            ~(uint64_t)JET_CID_OWNER_LAST) == want ||
           atomic_load_explicit(&slot->alt_owner, memory_order_acquire) == want;
}

int jet__cid_park(uint64_t cid, uint32_t owner, jet_cid_parked_t *p)
{
    uint32_t idx = (uint32_t)(cid >> 32), ver = (uint32_t)cid;
    if (ver == 0 || ver > CID_VER_MAX || owner == 0 ||
        idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire))
        return JET_CID_STALE;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot) return JET_CID_STALE;
    uint64_t held = ver | CID_HELD;
    uint64_t want = (uint64_t)ver << 32 | owner;
    uint64_t vers = atomic_load_explicit(&slot->vers, memory_order_seq_cst);
    /* Accepted again since the claim failed (the hold ended): claim again,
     * if the attempt is this connection's. An answer with the id of another
     * connection's call (a server's error, or a guess) is stale here, or
     * its reader would claim and park in turn until that call ended. */
    if (cid_accepts(vers, ver)) return cid_owned(slot, want) ? JET_CID_AGAIN : JET_CID_STALE;
    if (vers >> 32 != held || atomic_load_explicit(&slot->alt_owner, memory_order_acquire) != want)
        return JET_CID_STALE;
    if (!p) return JET_CID_PARKED;
    jet_cid_parked_t *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&slot->parked, &none, p, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return JET_CID_STALE; /* one answer per attempt: another is parked */
    /* Sequentially consistent, against the end of the hold (which moves
     * vers on, then takes the parked answer): either this thread sees the
     * hold still on, and its owner will find the answer, or it takes the
     * answer back itself and claims again. */
    vers = atomic_load_explicit(&slot->vers, memory_order_seq_cst);
    if (vers >> 32 == held) return JET_CID_PARKED;
    jet_cid_parked_t *mine = p;
    if (!atomic_compare_exchange_strong_explicit(&slot->parked, &mine, NULL, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return JET_CID_PARKED; /* taken by the hold's end meanwhile */
    return cid_accepts(vers, ver) && cid_owned(slot, want) ? JET_CID_AGAIN : JET_CID_STALE;
}

void jet__cid_drop_held(uint64_t cid)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot) return;
    uint64_t vers = atomic_load_explicit(&slot->vers, memory_order_relaxed);
    do {
        if (!((vers >> 32) & CID_HELD)) return;
    } while (!atomic_compare_exchange_weak_explicit(&slot->vers, &vers, (uint32_t)vers,
                                                    memory_order_seq_cst, memory_order_relaxed));
    jet_cid_parked_t *p = cid_unpark(slot);
    if (p) p->drop(p);
}

bool jet__cid_reinstate(uint64_t cid, uint64_t alt_cid, jet_cid_parked_t **parked_p)
{
    *parked_p = NULL;
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return false;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot) return false;
    uint64_t expected = (uint64_t)((uint32_t)alt_cid | CID_HELD) << 32 | (uint32_t)cid;
    if (!atomic_compare_exchange_strong_explicit(&slot->vers, &expected, (uint32_t)alt_cid,
                                                 memory_order_seq_cst, memory_order_relaxed))
        return false;
    *parked_p = cid_unpark(slot);
    return true;
}

bool jet__cid_held(uint64_t cid, uint64_t alt_cid)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return false;
    cid_slot_t *slot = cid_slot(idx);
    return slot && atomic_load_explicit(&slot->vers, memory_order_acquire) >> 32 ==
                       ((uint32_t)alt_cid | CID_HELD);
}

bool jet__cid_answer_kept(uint64_t cid, uint64_t alt_cid)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return false;
    cid_slot_t *slot = cid_slot(idx);
    uint64_t held = (uint64_t)((uint32_t)alt_cid | CID_HELD) << 32 | (uint32_t)cid;
    return slot && atomic_load_explicit(&slot->vers, memory_order_seq_cst) == held &&
           atomic_load_explicit(&slot->parked, memory_order_seq_cst) != NULL;
}

bool jet__cid_set_alt(uint64_t cid, uint64_t alt_cid, uint32_t alt_owner,
                      jet_cid_parked_t **parked_p)
{
    *parked_p = NULL;
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return false;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot) return false;
    atomic_store_explicit(&slot->alt_owner, (uint64_t)(uint32_t)alt_cid << 32 | alt_owner,
                          memory_order_release);
    /* Only while nobody claimed cid since (a claim moved the version on)
     * and the earlier attempt is held (not dropped by an error answer):
     * its answer may have been parked meanwhile. */
    uint64_t to = (uint64_t)(uint32_t)alt_cid << 32 | (uint32_t)cid;
    uint64_t expected = (uint64_t)((uint32_t)alt_cid | CID_HELD) << 32 | (uint32_t)cid;
    if (!atomic_compare_exchange_strong_explicit(&slot->vers, &expected, to, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return false;
    *parked_p = cid_unpark(slot);
    return true;
}

jet_call_t *jet__cid_fail_from(uint64_t cid, uint32_t owner, bool drop_held, uint64_t *next_cid_p,
                               bool *dropped_p)
{
    *dropped_p = false;
    uint32_t idx = (uint32_t)(cid >> 32), ver = (uint32_t)cid;
    if (ver == 0 || owner == 0 ||
        idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire))
        return NULL;
    cid_slot_t *slot = cid_slot(idx);
    if (!slot) return NULL;
    uint64_t want = (uint64_t)ver << 32 | owner;
    uint64_t vers = atomic_load_explicit(&slot->vers, memory_order_acquire);
    for (;;) {
        uint64_t to;
        /* Held (a backup request is being made): a connection failure
         * leaves it to the hold's end, as an answer may have been parked;
         * an attempt that never went out gets none, and one answered with
         * an error has had its one answer: they go now. */
        bool drop = (uint32_t)(vers >> 32) == ver ||
                    (drop_held && (uint32_t)(vers >> 32) == (ver | CID_HELD));
        if (drop) {
            /* The earlier attempt: only its version goes; the current one
             * stays accepted as it was. */
            if (atomic_load_explicit(&slot->alt_owner, memory_order_acquire) != want) return NULL;
            to = (uint32_t)vers;
        } else if ((uint32_t)vers == ver) {
            if ((atomic_load_explicit(&slot->owner, memory_order_acquire) &
                 ~(uint64_t)JET_CID_OWNER_LAST) != want)
                return NULL;
            to = cid_claimed(vers, ver, cid_next_ver(ver));
        } else {
            return NULL;
        }
        if (atomic_compare_exchange_weak_explicit(&slot->vers, &vers, to, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            if (drop) {
                *dropped_p = true;
                if ((vers >> 32) & CID_HELD) {
                    jet_cid_parked_t *p = cid_unpark(slot);
                    if (p) p->drop(p);
                }
                return NULL;
            }
            if (next_cid_p) *next_cid_p = ((uint64_t)idx << 32) | (uint32_t)to;
            return atomic_load_explicit(&slot->call, memory_order_relaxed);
        }
    }
}

void jet__cid_set_owner(uint64_t cid, uint32_t owner)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return;
    cid_slot_t *slot = cid_slot(idx);
    /* Sequentially consistent, against jet__cid_cancel: either a cancel
     * finds this attempt here, or the issuer finds the cancel's mark. */
    if (slot)
        atomic_store_explicit(&slot->owner, (uint64_t)(uint32_t)cid << 32 | owner,
                              memory_order_seq_cst);
}

uint64_t jet__cid_owner_of(uint64_t cid)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return 0;
    cid_slot_t *slot = cid_slot(idx);
    return slot ? atomic_load_explicit(&slot->owner, memory_order_relaxed) : 0;
}

void jet__cid_publish_wait(uint64_t cid, uint64_t was)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire)) return;
    cid_slot_t *slot = cid_slot(idx);
    /* Sequentially consistent, as jet__cid_set_owner. */
    if (slot)
        atomic_compare_exchange_strong_explicit(&slot->owner, &was, (uint64_t)(uint32_t)cid << 32,
                                                memory_order_seq_cst, memory_order_relaxed);
}

static cid_slot_t *cid_token_slot(uint64_t token)
{
    uint32_t idx = (uint32_t)(token >> 32) - 1;
    if ((token >> 32) == 0 || idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire))
        return NULL;
    return cid_slot(idx);
}

/* The cid of the attempt on a connection of the issue token names, or 0
 * (the issue ended, or none is out); *owner_p: its owner field. */
static uint64_t cid_issue_attempt(const cid_slot_t *slot, uint64_t token, bool not_last,
                                  uint64_t *owner_p)
{
    uint64_t owner = atomic_load_explicit(&slot->owner, memory_order_seq_cst);
    *owner_p = owner;
    if (not_last && (owner & JET_CID_OWNER_LAST)) return 0;
    /* Read as a seqlock: an owner written after this issue's end (by the
     * slot's next call) is seen with that end, and not claimed. */
    if (cid_slot_freed_since(slot, (uint32_t)token)) return 0;
    uint32_t ver = (uint32_t)(owner >> 32);
    return ver ? (uint64_t)((uint32_t)(token >> 32) - 1) << 32 | ver : 0;
}

int jet__cid_cancel(uint64_t token, jet_call_t **call_p)
{
    *call_p = NULL;
    cid_slot_t *slot = cid_token_slot(token);
    uint32_t seq = (uint32_t)token;
    if (!slot || cid_slot_freed_since(slot, seq)) return -EINVAL;
    atomic_store_explicit(&slot->cancel, (uint64_t)1 << 32 | seq, memory_order_seq_cst);
    uint64_t owner;
    uint64_t cid = cid_issue_attempt(slot, token, false, &owner);
    if (cid) *call_p = jet__cid_claim(cid, NULL);
    return 0;
}

jet_call_t *jet__cid_claim_issue(uint64_t token, bool not_last, bool hold, uint64_t *cid_p,
                                 uint64_t *next_cid_p, bool *live_p)
{
    if (live_p) *live_p = false;
    cid_slot_t *slot = cid_token_slot(token);
    if (!slot || cid_slot_freed_since(slot, (uint32_t)token)) return NULL;
    uint64_t owner = atomic_load_explicit(&slot->owner, memory_order_seq_cst);
    if (not_last && (owner & JET_CID_OWNER_LAST) &&
        cid_accepts(atomic_load_explicit(&slot->vers, memory_order_acquire),
                    (uint32_t)(owner >> 32)) &&
        !cid_slot_freed_since(slot, (uint32_t)token))
        return NULL; /* the issue's last attempt is out: nothing to back up */
    uint64_t cid = cid_issue_attempt(slot, token, not_last, &owner);
    /* A held attempt's answer is parked if it came on the connection the
     * attempt was written on: named before the hold, as the answer may come
     * as soon as it starts; only while that attempt is the only one out
     * (otherwise the hold fails), whose alt_owner nothing reads. */
    if (cid && hold) {
        /* Compared with what it was before the look at vers: a store of the
         * slot's next call (taken meanwhile) is not overwritten. */
        uint64_t was = atomic_load_explicit(&slot->alt_owner, memory_order_acquire);
        if (atomic_load_explicit(&slot->vers, memory_order_acquire) == (uint32_t)cid)
            atomic_compare_exchange_strong_explicit(&slot->alt_owner, &was,
                                                    owner & ~(uint64_t)JET_CID_OWNER_LAST,
                                                    memory_order_acq_rel, memory_order_relaxed);
    }
    jet_call_t *call = cid ? cid_claim(cid, next_cid_p, hold) : NULL;
    if (call) {
        *cid_p = cid;
        return call;
    }
    /* Not claimed, the issue still on: an attempt not named yet, or one
     * whose owner of the moment is ending or retrying it. */
    if (live_p) *live_p = !cid_slot_freed_since(slot, (uint32_t)token);
    return NULL;
}

bool jet__cid_cancelled(uint64_t token)
{
    cid_slot_t *slot = cid_token_slot(token);
    return slot && atomic_load_explicit(&slot->cancel, memory_order_seq_cst) ==
                       ((uint64_t)1 << 32 | (uint32_t)token);
}

jet_call_t *jet__cid_claim_from(uint64_t cid, uint32_t owner, uint64_t *next_cid_p)
{
    uint32_t idx = (uint32_t)(cid >> 32);
    if (owner == 0 || idx >= atomic_load_explicit(&cid_reg.nslots, memory_order_acquire))
        return NULL;
    cid_slot_t *slot = cid_slot(idx);
    /* Set for this very version: an owner left by an earlier attempt of the
     * slot (a retry now on another connection) names another version. */
    uint64_t want = (uint64_t)(uint32_t)cid << 32 | owner;
    if (!slot || ((atomic_load_explicit(&slot->owner, memory_order_acquire) &
                   ~(uint64_t)JET_CID_OWNER_LAST) != want &&
                  atomic_load_explicit(&slot->alt_owner, memory_order_acquire) != want))
        return NULL;
    return jet__cid_claim(cid, next_cid_p);
}

void jet__cid_free(uint32_t idx)
{
    cid_slot_t *slot = cid_slot(idx);
    atomic_store_explicit(&slot->call, NULL, memory_order_relaxed);
    /* A version never reused by this slot's next call: claims of old ids
     * fail (an earlier attempt's version goes too). */
    uint64_t vers = atomic_load_explicit(&slot->vers, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&slot->vers, &vers, cid_next_ver((uint32_t)vers),
                                                  memory_order_seq_cst, memory_order_relaxed)) {
    }
    if ((vers >> 32) & CID_HELD) {
        /* A hold nobody ended (the call's end drops it first). */
        jet_cid_parked_t *p = cid_unpark(slot);
        if (p) p->drop(p);
    }
    atomic_store_explicit(&slot->alt_owner, 0, memory_order_relaxed);
    /* The next count with no registration; the old high half holds the
     * registrations of this call's joiners, if any. */
    uint64_t old = atomic_load_explicit(&slot->state, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&slot->state, &old, (uint64_t)(cid_seq(old) + 1),
                                                  memory_order_seq_cst, memory_order_relaxed)) {
    }
    uint32_t reg = (uint32_t)(old >> 32);
    if (reg & CID_WAIT_FUTEX) jet__futex_wake(cid_futex(slot), INT_MAX);
    if (reg & CID_WAIT_LOOP) {
        /* A joiner drives that loop, and may sleep in its epoll (ended
         * here); on the loop itself it is this thread, or waits for the
         * loop to be handed over, which then ends the wait. */
        jet_loop_t *loop = jet_loop_at((int)(reg >> 2));
        if (loop && !jet_loop_in_thread(loop)) jet_loop_interrupt(loop);
    }
    cid_push_free(idx);
}

typedef struct cid_wait {
    cid_slot_t *slot;
    uint32_t free_seq;
    jet_loop_t *loop;
    int64_t deadline_us; /* INT64_MAX: none */
    uint32_t looks;
    bool expired;
} cid_wait_t;

static bool cid_freed(const cid_wait_t *w)
{
    return cid_slot_freed_since(w->slot, w->free_seq);
}

/* Adds how this joiner waits to the slot's registrations: 0, -1 when the
 * slot was freed already, 1 (nothing added) when another joiner drives
 * another loop. */
static int cid_register(const cid_wait_t *w, uint32_t how)
{
    /* Acquire: a -1 answer lets the joiner read what the call's end wrote. */
    uint64_t old = atomic_load_explicit(&w->slot->state, memory_order_acquire);
    for (;;) {
        if (cid_seq(old) != w->free_seq) return -1;
        uint32_t reg = (uint32_t)(old >> 32);
        if ((how & CID_WAIT_LOOP) && (reg & CID_WAIT_LOOP) && (reg >> 2) != (how >> 2)) return 1;
        uint64_t want = (uint64_t)(reg | how) << 32 | w->free_seq;
        if (old == want ||
            atomic_compare_exchange_weak_explicit(&w->slot->state, &old, want,
                                                  memory_order_seq_cst, memory_order_acquire))
            return 0;
    }
}

/* Freed, or the deadline passed. Asked after every pass of the loop this
 * thread drives, whose clock is then ours to read (fresh after any pass that
 * did work, a few idle passes old at most); while it waits for the loop
 * thread to hand the loop over, it reads the clock one time in 64. */
static bool cid_done(void *arg)
{
    cid_wait_t *w = arg;
    if (cid_freed(w)) return true;
    if (w->expired || w->deadline_us == INT64_MAX) return w->expired;
    int64_t now;
    if (jet_loop_in_thread(w->loop))
        now = jet_loop_now_us(w->loop);
    else if ((++w->looks & 63) == 0)
        now = jet_now_us();
    else
        return false;
    w->expired = now >= w->deadline_us;
    return w->expired;
}

/* True when the slot was freed, false when the deadline passed first. */
static bool cid_wait(cid_wait_t *w, int64_t spin_us, jet_loop_t *loop)
{
    cid_slot_t *slot = w->slot;
    /* Run the connection's loop ourselves (jet_loop_drive) rather than sleep
     * while its thread spins, or sleeps in epoll and would have to wake us;
     * a completion on another thread interrupts the loop (jet__cid_free). */
    int index = jet_loop_index(loop);
    if (index >= 0) {
        int r = cid_register(w, CID_WAIT_LOOP | (uint32_t)index << 2);
        if (r < 0) return true;
        if (r == 0 && jet_loop_drive(loop, cid_done, w, w->deadline_us)) return cid_freed(w);
    }
    /* Not driving (another guest does, or this is a loop thread): a write
     * this thread left to the loop needs its thread, and so does the answer
     * once the other guest leaves. */
    jet_loop_defer_flush();
    jet_loop_kick(loop);
    if (spin_us > 0) {
        /* The answer of a polled transport often lands within microseconds:
         * waiting here saves the futex sleep and the loop's wake-up call.
         * Not past the deadline, which the loop below then reports. */
        int64_t until =
            jet_now_us() + (spin_us < JET_CID_SPIN_MAX_US ? spin_us : JET_CID_SPIN_MAX_US);
        if (until > w->deadline_us) until = w->deadline_us;
        do {
            for (int i = 0; i < 64; i++) {
                if (cid_freed(w)) return true;
                jet__cpu_relax();
            }
        } while (jet_now_us() < until);
    }
    for (;;) {
        if (cid_register(w, CID_WAIT_FUTEX) < 0) return true;
        int64_t left = -1;
        if (w->deadline_us != INT64_MAX) {
            left = w->deadline_us - jet_now_us();
            if (left <= 0) return false;
        }
        jet__futex_wait(cid_futex(slot), w->free_seq, left);
    }
}

bool jet__cid_freed_since(uint32_t idx, uint32_t free_seq)
{
    return cid_slot_freed_since(cid_slot(idx), free_seq);
}

void jet__cid_join(uint32_t idx, uint32_t free_seq, int64_t spin_us, jet_loop_t *loop,
                   int64_t deadline_us, void (*expire)(void *arg), void *arg)
{
    cid_wait_t w = {
        .slot = cid_slot(idx), .free_seq = free_seq, .loop = loop, .deadline_us = deadline_us};
    while (!cid_wait(&w, spin_us, loop)) {
        /* Ends the call, unless its owner of the moment (an answer, a
         * failure, a retry) is ending it: then look again shortly. */
        expire(arg);
        w.deadline_us = jet_now_us() + CID_EXPIRE_RETRY_US;
        w.expired = false;
    }
}

/* ---- the call object ---------------------------------------------------- */

static jet_pool_t call_pool = JET_POOL_INIT("call", sizeof(jet_call_t));

static void call_init(jet_call_t *c)
{
    memset(c, 0, offsetof(jet_call_t, msg_arena));
    jet__msg_arena_init(&c->msg_arena);
    jet_iobuf_init(&c->req_att);
    jet_iobuf_init(&c->resp_att);
    jet_iobuf_init(&c->req_body);
    c->timeout_ms = INT32_MIN;
    c->max_retry = -1;
    c->backup_request_ms = INT32_MIN;
    jet__deadline_init(&c->deadline);
}

jet_call_t *jet_call_create(void)
{
    jet_call_t *c = jet__pool_get(&call_pool);
    if (c) call_init(c);
    return c;
}

static void call_release_fields(jet_call_t *c)
{
    jet_iobuf_fini(&c->req_att);
    jet_iobuf_fini(&c->resp_att);
    jet_iobuf_fini(&c->req_body);
    free(c->error_text);
    jet__msg_arena_release(&c->msg_arena, c->response);
    c->response = NULL;
    jet__uf_clear(&c->req_uf);
    jet__uf_clear(&c->resp_uf);
    if (c->reserved_token) {
        /* jet_call_id's slot, never issued: its id goes stale. */
        jet__cid_free(c->slot);
        c->reserved_token = 0;
    }
}

/* A call in flight is the library's until its done callback starts (or a
 * synchronous jet_channel_call returns): the completion still writes into
 * it and reads its channel, so clearing or freeing it now would crash or
 * corrupt another call. Refused instead, with a log line. */
static bool call_in_flight(const jet_call_t *c, const char *what)
{
    if (!atomic_load_explicit(&c->in_flight, memory_order_relaxed)) return false;
    JET_ERROR("%s of a call in flight: refused, the call goes on (join it, or act in its done "
              "callback)",
              what);
    return true;
}

void jet_call_destroy(jet_call_t *c)
{
    if (!c || call_in_flight(c, "jet_call_destroy")) return;
    call_release_fields(c);
    jet__pool_put(&call_pool, c);
}

void jet_call_reset(jet_call_t *c)
{
    if (!c || call_in_flight(c, "jet_call_reset")) return;
    call_release_fields(c);
    call_init(c);
}

void jet_call_set_timeout_ms(jet_call_t *c, int32_t timeout_ms)
{
    /* INT32_MIN marks "the channel's" inside: any negative value means no
     * limit, that one too. */
    c->timeout_ms = timeout_ms == INT32_MIN ? -1 : timeout_ms;
}
void jet_call_set_max_retry(jet_call_t *c, int32_t max_retry) { c->max_retry = max_retry; }
void jet_call_set_backup_request_ms(jet_call_t *c, int32_t ms)
{
    c->backup_request_ms = ms == INT32_MIN ? -1 : ms;
}
bool jet_call_has_backup_request(const jet_call_t *c)
{
    return c->backup_sent;
}
void jet_call_set_log_id(jet_call_t *c, uint64_t log_id)
{
    c->log_id = log_id;
    c->has_log_id = true;
}
void jet_call_set_request_compress_type(jet_call_t *c, int type) { c->req_compress = type; }
void jet_call_set_request_checksum(jet_call_t *c, bool with_attachment)
{
    c->checksum = true;
    c->checksum_with_att = with_attachment;
}
jet_iobuf_t *jet_call_request_attachment(jet_call_t *c) { return &c->req_att; }
jet_iobuf_t *jet_call_response_attachment(jet_call_t *c) { return &c->resp_att; }
uint64_t jet_call_log_id(const jet_call_t *c) { return c->log_id; }
const char *jet_call_remote_side(const jet_call_t *c) { return c->remote; }
bool jet_call_failed(const jet_call_t *c) { return c->error_code != 0; }
int jet_call_error_code(const jet_call_t *c) { return c->error_code; }
const char *jet_call_error_text(const jet_call_t *c)
{
    return c->error_text ? c->error_text : (c->error_code ? jet_strerror(c->error_code) : "");
}
const ProtobufCMessage *jet_call_response(const jet_call_t *c) { return c->response; }
int64_t jet_call_latency_us(const jet_call_t *c)
{
    return c->end_us > c->start_us ? c->end_us - c->start_us : 0;
}
int jet_call_attempts(const jet_call_t *c) { return c->attempts; }
int jet_call_response_compress_type(const jet_call_t *c) { return c->resp_compress; }
int jet_call_request_compress_type(const jet_call_t *c) { return c->req_compress; }
void jet_call_set_response_compress_type(jet_call_t *c, int type) { c->resp_compress = type; }

/* ---- user fields ---- */

int jet_call_set_request_user_field(jet_call_t *c, const char *key, const char *value)
{
    /* The client's, and not while an issue may pack them. */
    if (!c || c->server) return -EINVAL;
    if (atomic_load_explicit(&c->in_flight, memory_order_relaxed)) return -EBUSY;
    return jet__uf_set(&c->req_uf, key, value);
}

int jet_call_set_response_user_field(jet_call_t *c, const char *key, const char *value)
{
    if (!c || !c->server) return -EINVAL;
    return jet__uf_set(&c->resp_uf, key, value);
}

const char *jet_call_request_user_field(const jet_call_t *c, const char *key)
{
    return c ? jet__uf_get(&c->req_uf, key) : NULL;
}

const char *jet_call_response_user_field(const jet_call_t *c, const char *key)
{
    return c ? jet__uf_get(&c->resp_uf, key) : NULL;
}

size_t jet_call_request_user_field_count(const jet_call_t *c)
{
    return c ? c->req_uf.n : 0;
}
size_t jet_call_response_user_field_count(const jet_call_t *c)
{
    return c ? c->resp_uf.n : 0;
}

static bool uf_at(const jet_user_fields_t *uf, size_t i, const char **key_p, const char **value_p)
{
    if (i >= uf->n) return false;
    const char *k, *v;
    jet__uf_at(uf, (uint32_t)i, &k, &v);
    if (key_p) *key_p = k;
    if (value_p) *value_p = v;
    return true;
}

bool jet_call_request_user_field_at(const jet_call_t *c, size_t i, const char **key_p,
                                    const char **value_p)
{
    return c && uf_at(&c->req_uf, i, key_p, value_p);
}

bool jet_call_response_user_field_at(const jet_call_t *c, size_t i, const char **key_p,
                                     const char **value_p)
{
    return c && uf_at(&c->resp_uf, i, key_p, value_p);
}

void jet__call_set_error(jet_call_t *c, int code, const char *text)
{
    c->error_code = code;
    free(c->error_text);
    c->error_text = text ? strdup(text) : NULL;
}

jet_call_t *jet_server_call(void *closure_data)
{
    return jet__cid_peek((uint64_t)(uintptr_t)closure_data);
}

void jet_call_set_failed(jet_call_t *c, int code, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (code <= 0) code = JET_EINTERNAL;
    jet__call_set_error(c, code, text);
}
