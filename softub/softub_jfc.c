/* softub_jfc.c: completion queues (JFC), event channels (JFCE), events.
 *
 * A JFC is an MPMC ring of CRs in its owner's region: the owner's send
 * queues and remote senders (receive CRs) produce, urma_poll_jfc consumes.
 * A JFCE is an MPMC ring of events plus an EFD_SEMAPHORE eventfd whose count
 * equals the number of queued events, so jfce->fd stays readable (level
 * triggered, epoll-able) while events are queued.
 *
 * Arming is one word in the shared JFC descriptor. A producer that writes a
 * CR loads it after a full fence; only when it is armed does anything else
 * happen (one CAS to disarm, one event, one eventfd write), so an unarmed
 * JFC costs no system call. urma_rearm_jfc fires at once when CRs are
 * already waiting, as hardware armed with the consumer index does.
 *
 * Both rings keep claim records (softub_ring.h): a producer in another
 * process killed between its claim of a slot and its commit leaves a hole
 * that would hide every later CR or event for good. Once the recorded
 * process is gone (jfc_hole_lost), the JFC's poll passes the CR slot, and
 * an event slot is written for it (jfc_evt_complete): the dead producer had
 * disarmed the JFC, so its event may be the only one its consumer will
 * ever wait for. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "softub_internal.h"

#define JFC_EVT_SLOT ((uint32_t)(8 + sizeof(struct sub_evt)))
#define JFC_HOLE_EVERY 64u         /* empty polls between looks for a hole */
#define JFC_HOLE_HEAD_EVERY 65536u /* ... and between looks at the head */
#define ERESTARTSYS_VALUE 512

struct sub_jfc *softub__jfc_check(urma_jfc_t *jfc)
{
    if (jfc == NULL || jfc->urma_ctx == NULL || jfc->handle != (uint64_t)(uintptr_t)jfc)
        return NULL;
    struct sub_jfc *j = (struct sub_jfc *)jfc;
    return j->magic == SUB_MAGIC_JFC ? j : NULL;
}

static struct sub_jfce *jfce_check(urma_jfce_t *jfce)
{
    if (jfce == NULL || softub__ctx_check(jfce->urma_ctx) == NULL)
        return NULL;
    struct sub_jfce *e = (struct sub_jfce *)jfce;
    return e->magic == SUB_MAGIC_JFCE ? e : NULL;
}

static struct sub_ring *jfc_ring(struct sub_peer *p, uint64_t off)
{
    struct sub_ring *r = softub__peer_ptr(p, off, sizeof(struct sub_ring));
    if (r == NULL || r->magic != SUB_RING_MAGIC || r->cap == 0 || (r->cap & (r->cap - 1)) != 0 ||
        r->mask != r->cap - 1 || r->esize < 16 ||
        softub__peer_ptr(p, off, sub_ring_bytes_claims(r->cap, r->esize)) == NULL)
        return NULL;
    return r;
}

/* ------------------------------------------------------------------------ */
/* Producing CRs and events                                                  */
/* ------------------------------------------------------------------------ */

/* A producer that disarmed sj with `firing` (SUB_ARM_FIRING | its pid; 0:
 * NONE) has claimed and recorded its event's slot, from where a dead
 * producer's event is written for it, or gives up: plain NONE now, unless
 * the owner armed the JFC again meanwhile. */
static void jfc_fired(struct sub_sjfc *sj, uint32_t firing)
{
    if (firing != 0) (void)atomic_compare_exchange_strong(&sj->armed, &firing, SUB_ARM_NONE);
}

static struct sub_ring *jfc_event_ring(struct sub_peer *p, struct sub_sjfc *sj,
                                       struct sub_sjfce **se_p)
{
    if (sj->jfce_off == 0) return NULL;
    struct sub_sjfce *se = softub__peer_ptr(p, sj->jfce_off, sizeof(*se));
    if (se == NULL || atomic_load(&se->h.state) != SUB_OBJ_LIVE) return NULL;
    *se_p = se;
    return jfc_ring(p, se->ring_off);
}

/* Queues sj's event and counts it on the owner's eventfd; sj was disarmed
 * with `firing` (jfc_fired). */
static void jfc_fire_as(struct sub_peer *p, struct sub_sjfc *sj, uint32_t firing)
{
    struct sub_sjfce *se = NULL;
    struct sub_ring *er = jfc_event_ring(p, sj, &se);
    if (er == NULL) {
        jfc_fired(sj, firing);
        return;
    }
    uint64_t pos;
    /* The record names the JFC (its id and the low half of its uid): a
     * consumer that finds the slot never written writes it from there. */
    uint64_t note = (uint64_t)(uint32_t)sj->uid << 32 | sj->h.id;
    struct sub_evt *ev =
        sub_ring_enq_begin_noted(er, &pos, (uint32_t)softub__g.self->pid, note);
    jfc_fired(sj, firing);
    if (ev == NULL) {
        SUB_WARN("JFCE event queue full: event of JFC %u dropped\n", sj->h.id);
        return;
    }
    softub__fault_at(SUB_DIE_EVENT_CLAIMED);
    ev->jfc_user = sj->user_ptr;
    ev->jfc_uid = sj->uid;
    ev->jfc_id = sj->h.id;
    sub_ring_enq_commit(er, pos);
    softub__fault_at(SUB_DIE_EVENT_WRITTEN);
    (void)softub__peer_signal(p, sj->jfce_off, se->h.gen, se->efd, &se->pending_signals);
}

static void jfc_fire(struct sub_peer *p, struct sub_sjfc *sj)
{
    jfc_fire_as(p, sj, 0);
}

static bool jfc_arm_fires(uint32_t a, int solicited)
{
    return a == SUB_ARM_ALL || (a == SUB_ARM_SOLICITED && solicited);
}

static void jfc_notify(struct sub_peer *p, struct sub_sjfc *sj, int solicited)
{
    /* A JFC without a JFCE never fires (its arm is a no-op). */
    if (sj->jfce_off == 0)
        return;
    /* Dekker with urma_rearm_jfc, without a fence of our own: the producer's
     * claim of the slot (a seq_cst RMW on head, sub_cring_enq_begin) comes
     * before this seq_cst load, and the consumer stores the arm, fences and
     * then reads head. Either the consumer counts our claimed CR (published
     * or not: jfc_solicited_waiting) and fires itself, or this load sees the
     * arm. */
    uint32_t a = atomic_load_explicit(&sj->armed, memory_order_seq_cst);
    if (!jfc_arm_fires(a, solicited)) return;
    /* In another process's JFC the disarm names us until our event's slot
     * is claimed: killed in between, we are known to its owner. */
    uint32_t firing = p->self ? 0 : SUB_ARM_FIRING | (uint32_t)softub__g.self->pid;
    if (!atomic_compare_exchange_strong(&sj->armed, &a, firing ? firing : SUB_ARM_NONE)) return;
    softub__fault_at(SUB_DIE_DISARMED);
    if (firing && softub__fault_take(&softub__fault.lose_event)) {
        /* SOFTUB_LOSE_EVENT: disarmed, and no event, as a provider that
         * loses one. */
        jfc_fired(sj, firing);
        return;
    }
    jfc_fire_as(p, sj, firing);
}

int softub__cq_claim(struct sub_peer *p, struct sub_sjfc *sj, uint64_t note,
                     struct sub_cq_claim *c)
{
    if (sj == NULL || atomic_load(&sj->h.state) != SUB_OBJ_LIVE)
        return -1;
    struct sub_ring *r = jfc_ring(p, sj->ring_off);
    if (r == NULL || r->esize != SUB_CQE_SLOT)
        return -1;
    struct sub_cqe *slot =
        sub_cring_enq_begin_noted(r, &c->pos, (uint32_t)softub__g.self->pid, note);
    if (slot == NULL) {
        if (!atomic_exchange(&sj->overflow, 1)) {
            SUB_WARN("JFC %u overflowed: CR dropped, URMA_EVENT_JFC_ERR raised\n", sj->h.id);
            (void)softub__async_raise(p, sj->sctx_off, URMA_EVENT_JFC_ERR, sj->h.id, sj->uid,
                                      sj->user_ptr);
        }
        return -1;
    }
    softub__fault_at(SUB_DIE_CR_CLAIMED);
    c->p = p;
    c->sj = sj;
    c->r = r;
    c->slot = slot;
    return 0;
}

void softub__cq_publish(struct sub_cq_claim *c, const struct sub_cqe *e, const void *inl)
{
    /* Payload line first, CR line next, sequence last (release): the poller
     * reads both lines only after it has seen the sequence. */
    if (inl != NULL)
        memcpy((uint8_t *)c->slot + SUB_CQE_INL_OFF, inl, e->len <= SUB_CQE_INL_MAX ? e->len : 0);
    memcpy(c->slot, e, sizeof(*e));
    sub_cring_enq_commit(c->r, c->pos);
    jfc_notify(c->p, c->sj, e->solicited);
}

int softub__cq_push(struct sub_peer *p, struct sub_sjfc *sj, const struct sub_cqe *e,
                    const void *inl)
{
    struct sub_cq_claim c;
    if (softub__cq_claim(p, sj, 0, &c) != 0)
        return -1;
    softub__cq_publish(&c, e, inl);
    return 0;
}

/* A ring's hole (sub_ring_tail_hole) at `pos`, seen by its consumer
 * (serialised; h: its look at the last one): true when the claimant is gone
 * and will never write the slot. Its claim record names it; its process is
 * asked after at most every SUB_HOLE_ASK_NS. A live one, even stopped for
 * good, keeps its hole: it will write it when it goes on. A record without
 * its note may name, for a few instructions after the claim, a rival that
 * lost it: such a record counts only once the hole has stayed
 * SUB_CLAIM_LOST_NS. *pid, *note: the record's (note 0 without one).
 * Unless at_once (a look made rarely), a hole seen for the first time is
 * only remembered: a live producer is usually writing it, and the question
 * costs system calls. */
#define SUB_HOLE_ASK_NS 10000000ull
static int jfc_hole_lost(struct sub_ring *r, uint64_t pos, struct sub_hole *h, bool at_once,
                         uint32_t *pid, uint64_t *note)
{
    uint64_t now = softub__now_ns();
    if (h->pos1 != pos + 1) {
        h->pos1 = pos + 1;
        h->since_ns = now;
        h->asked_ns = 0;
        if (!at_once)
            return 0;
    }
    int rec = sub_ring_claim_read(r, pos, pid, note);
    if (rec == 0 || *pid == (uint32_t)softub__g.self->pid || now - h->asked_ns < SUB_HOLE_ASK_NS ||
        (rec == 1 && now - h->since_ns < SUB_CLAIM_LOST_NS))
        return 0;
    h->asked_ns = now;
    return softub__pid_gone(*pid);
}

/* The hole at pos is still there: asked after its claimant, which may have
 * written it and exited meanwhile. */
static int jfc_hole_still(struct sub_ring *r, uint64_t pos)
{
    uint64_t again;
    return sub_ring_tail_hole(r, 1, &again) && again == pos;
}

/* Passes a CR slot at the consumer index left by a producer that died
 * before it published it. A receive CR's sender had marked the receive WR
 * as completed through this CR: softub__rq_cr_lost undoes that, so that the
 * WR serves again. */
static void jfc_hole_check(struct sub_jfc *j, int by_head)
{
    uint64_t pos;
    if (!sub_ring_tail_hole(j->ring, by_head, &pos))
        return;
    int locked = !j->base.jfc_cfg.flag.bs.lock_free;
    if (locked)
        pthread_mutex_lock(&j->poll_lock);
    uint32_t pid;
    uint64_t note;
    if (jfc_hole_still(j->ring, pos) && jfc_hole_lost(j->ring, pos, &j->hole, false, &pid, &note) &&
        jfc_hole_still(j->ring, pos)) {
        if (note != 0)
            softub__rq_cr_lost(note, pid);
        sub_ring_pass_hole(j->ring, pos, 1);
        j->hole.pos1 = 0;
        SUB_WARN("JFC %u: a CR slot claimed by process %u, dead, is passed\n",
                 j->base.jfc_id.id, pid);
    }
    if (locked)
        pthread_mutex_unlock(&j->poll_lock);
}

/* ------------------------------------------------------------------------ */
/* JFCE                                                                      */
/* ------------------------------------------------------------------------ */

SUB_API urma_jfce_t *urma_create_jfce(urma_context_t *ctx)
{
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    struct sub_jfce *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    int efd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0) {
        int e = errno;
        free(j);
        errno = e;
        return NULL;
    }
    pthread_mutex_lock(&g->lock);
    j->sh_off = softub__ralloc(sizeof(struct sub_sjfce), 64);
    uint64_t roff = softub__ralloc(sub_ring_bytes_claims(SUB_EV_RING_CAP, JFC_EVT_SLOT), 64);
    if (j->sh_off == 0 || roff == 0) {
        softub__rfree(j->sh_off, j->sh_off ? sizeof(struct sub_sjfce) : 0);
        softub__rfree(roff, roff ? sub_ring_bytes_claims(SUB_EV_RING_CAP, JFC_EVT_SLOT) : 0);
        pthread_mutex_unlock(&g->lock);
        close(efd);
        free(j);
        errno = ENOMEM;
        return NULL;
    }
    j->ring = softub__rptr(roff);
    sub_ring_init_claims(j->ring, SUB_EV_RING_CAP, JFC_EVT_SLOT);
    j->sh = softub__rptr(j->sh_off);
    j->sh->h.type = SUB_T_NONE;
    j->sh->h.gen = (uint32_t)softub__uid();
    j->sh->efd = efd;
    j->sh->ring_off = roff;
    atomic_store(&j->sh->h.state, SUB_OBJ_LIVE);
    j->ctx = c;
    pthread_mutex_init(&j->take_lock, NULL);
    j->magic = SUB_MAGIC_JFCE;
    j->base.urma_ctx = ctx;
    j->base.fd = efd;
    atomic_init(&j->base.ref, 1);
    j->next = g->jfces;
    g->jfces = j;
    atomic_fetch_add(&ctx->ref, 1);
    pthread_mutex_unlock(&g->lock);
    return &j->base;
}

SUB_API urma_status_t urma_delete_jfce(urma_jfce_t *jfce)
{
    if (jfce == NULL)
        return URMA_EINVAL;
    struct sub_jfce *j = jfce_check(jfce);
    if (j == NULL)
        return URMA_EINVAL;
    if (atomic_load(&jfce->ref) > 1) {
        SUB_INFO("urma_delete_jfce: still used by %lu JFC(s)\n",
                 (unsigned long)atomic_load(&jfce->ref) - 1);
        return URMA_FAIL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    for (struct sub_jfce **pp = &g->jfces; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    }
    atomic_store(&j->sh->h.state, SUB_OBJ_DEAD);
    softub__rfree(j->sh->ring_off, sub_ring_bytes_claims(SUB_EV_RING_CAP, JFC_EVT_SLOT));
    softub__rfree(j->sh_off, sizeof(struct sub_sjfce));
    atomic_fetch_sub(&jfce->urma_ctx->ref, 1);
    j->magic = SUB_MAGIC_DEAD;
    pthread_mutex_unlock(&g->lock);
    close(jfce->fd);
    pthread_mutex_destroy(&j->take_lock);
    softub__grave(j);
    return URMA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* JFC                                                                       */
/* ------------------------------------------------------------------------ */

SUB_API urma_jfc_t *urma_create_jfc(urma_context_t *ctx, urma_jfc_cfg_t *jfc_cfg)
{
    if (ctx == NULL || jfc_cfg == NULL) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL) {
        errno = EINVAL;
        return NULL;
    }
    softub__fault_sleep_us(softub__fault.queue_delay_us, "create_jfc");
    if (atomic_load_explicit(&softub__fault.jfc_fail, memory_order_relaxed) != 0 &&
        !softub__fault_take(&softub__fault.jfc_fail_after) &&
        softub__fault_take(&softub__fault.jfc_fail)) {
        errno = ENOMEM;
        return NULL;
    }
    const urma_device_cap_t *cap = &softub__device_attr()->dev_cap;
    if (jfc_cfg->depth == 0 || jfc_cfg->depth > cap->max_jfc_depth) {
        SUB_INFO("jfc cfg depth out of range, depth=%u, max_depth=%u\n", jfc_cfg->depth,
                 cap->max_jfc_depth);
        errno = EINVAL;
        return NULL;
    }
    if (jfc_cfg->ceqn >= cap->ceq_cnt) {
        SUB_INFO("invalid ceqn %u (ceq_cnt %u)\n", jfc_cfg->ceqn, cap->ceq_cnt);
        errno = EINVAL;
        return NULL;
    }
    struct sub_jfce *ce = NULL;
    if (jfc_cfg->jfce != NULL) {
        ce = jfce_check(jfc_cfg->jfce);
        if (ce == NULL || ce->ctx != c) {
            errno = EINVAL;
            return NULL;
        }
    }
    struct sub_jfc *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    uint32_t cap_slots = sub_ring_pow2(jfc_cfg->depth);
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    uint64_t roff = softub__ralloc(sub_ring_bytes_claims(cap_slots, SUB_CQE_SLOT), 4096);
    j->sh_off = softub__ralloc(sizeof(struct sub_sjfc), 64);
    uint32_t id = 0, gen = 0;
    int rc = (roff == 0 || j->sh_off == 0) ? -ENOMEM
                                          : softub__id_alloc(0, 0, SUB_T_JFC, j->sh_off, &id, &gen);
    if (rc != 0) {
        softub__rfree(roff, roff ? sub_ring_bytes_claims(cap_slots, SUB_CQE_SLOT) : 0);
        softub__rfree(j->sh_off, j->sh_off ? sizeof(struct sub_sjfc) : 0);
        pthread_mutex_unlock(&g->lock);
        free(j);
        errno = ENOMEM;
        return NULL;
    }
    j->ring = softub__rptr(roff);
    sub_ring_init_claims(j->ring, cap_slots, SUB_CQE_SLOT);
    j->magic = SUB_MAGIC_JFC;
    j->ctx = c;
    j->jfce = ce;
    softub__obj_register(&j->obj, SUB_T_JFC, id, (uint64_t)(uintptr_t)&j->base);
    j->sh = softub__rptr(j->sh_off);
    j->sh->h.type = SUB_T_JFC;
    j->sh->h.gen = gen;
    j->sh->h.id = id;
    j->sh->user_ptr = (uint64_t)(uintptr_t)&j->base;
    j->sh->uid = j->obj.uid;
    j->sh->jfce_off = ce != NULL ? ce->sh_off : 0;
    j->sh->sctx_off = c->sh_off;
    j->sh->ring_off = roff;
    atomic_store(&j->sh->h.state, SUB_OBJ_LIVE);
    pthread_mutex_init(&j->poll_lock, NULL);
    pthread_mutex_init(&j->ev_lock, NULL);
    pthread_cond_init(&j->ev_cond, NULL);
    urma_jfc_t *b = &j->base;
    b->urma_ctx = ctx;
    b->jfc_id.eid = ctx->eid;
    b->jfc_id.uasid = ctx->uasid;
    b->jfc_id.id = id;
    b->jfc_cfg = *jfc_cfg;
    b->handle = (uint64_t)(uintptr_t)b;
    atomic_fetch_add(&ctx->ref, 1);
    if (ce != NULL)
        atomic_fetch_add(&ce->base.ref, 1);
    pthread_mutex_unlock(&g->lock);
    return b;
}

SUB_API urma_status_t urma_modify_jfc(urma_jfc_t *jfc, urma_jfc_attr_t *attr)
{
    if (jfc == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jfc *j = softub__jfc_check(jfc);
    if (j == NULL)
        return URMA_EINVAL;
    if (attr->mask == 0 || (attr->mask & ~(uint32_t)(JFC_MODERATE_COUNT | JFC_MODERATE_PERIOD)) != 0)
        return URMA_EINVAL;
    /* Event moderation is accepted and has no effect: every armed CR fires. */
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_delete_jfc(urma_jfc_t *jfc)
{
    if (jfc == NULL)
        return URMA_EINVAL;
    struct sub_jfc *j = softub__jfc_check(jfc);
    if (j == NULL)
        return URMA_EINVAL;
    if (atomic_load(&j->users) != 0) {
        SUB_INFO("urma_delete_jfc: JFC %u still used by %u queue(s)\n", jfc->jfc_id.id,
                 atomic_load(&j->users));
        return URMA_FAIL;
    }
    if (softub__async_busy(&j->obj))
        return URMA_EAGAIN;
    /* As liburma does: wait until every reported completion event is acked. */
    pthread_mutex_lock(&j->ev_lock);
    int warned = 0;
    while (j->acked < j->reported) {
        if (jfc->jfc_cfg.flag.bs.non_blocking) {
            pthread_mutex_unlock(&j->ev_lock);
            return URMA_EAGAIN;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 5;
        if (pthread_cond_timedwait(&j->ev_cond, &j->ev_lock, &ts) == ETIMEDOUT && !warned) {
            SUB_WARN("urma_delete_jfc(JFC %u) waits for %llu unacked completion event(s): "
                     "call urma_ack_jfc\n",
                     jfc->jfc_id.id, (unsigned long long)(j->reported - j->acked));
            warned = 1;
        }
    }
    pthread_mutex_unlock(&j->ev_lock);
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    atomic_store(&j->sh->h.state, SUB_OBJ_DEAD);
    softub__obj_unregister(&j->obj);
    softub__id_free(0, j->sh->h.id);
    softub__rfree(j->sh->ring_off, sub_ring_bytes_claims(j->ring->cap, SUB_CQE_SLOT));
    softub__rfree(j->sh_off, sizeof(struct sub_sjfc));
    if (j->jfce != NULL)
        atomic_fetch_sub(&j->jfce->base.ref, 1);
    atomic_fetch_sub(&jfc->urma_ctx->ref, 1);
    j->magic = SUB_MAGIC_DEAD;
    jfc->handle = 0;
    pthread_mutex_unlock(&g->lock);
    pthread_mutex_destroy(&j->poll_lock);
    pthread_mutex_destroy(&j->ev_lock);
    pthread_cond_destroy(&j->ev_cond);
    softub__grave(j);
    return URMA_SUCCESS;
}

static void jfc_fill_cr(urma_cr_t *cr, const struct sub_cqe *e)
{
    struct sub_obj *_Atomic *objs = softub__g.objs;
    struct sub_obj *o = e->local_id < SUB_MAX_QIDS
                            ? atomic_load_explicit(&objs[e->local_id], memory_order_acquire)
                            : NULL;
    urma_cr_flag_t fl;
    fl.value = (uint8_t)(e->flag & ~SUB_CQE_F_INLINE);
    cr->status = (urma_cr_status_t)e->status;
    cr->user_ctx = e->user_ctx;
    /* opcode and imm_data are receive-CR fields; uasid is never written. */
    if (fl.bs.s_r) {
        cr->opcode = (urma_cr_opcode_t)e->opcode;
        cr->imm_data = e->imm;
    }
    cr->flag = fl;
    cr->completion_len = e->len;
    cr->local_id = e->local_id;
    cr->remote_id.eid = e->remote_eid;
    cr->remote_id.id = fl.bs.s_r ? e->remote_id & 0xffffu : e->remote_id;
    cr->tpn = e->tpn;
    cr->user_data = o != NULL ? (uintptr_t)o->user_ptr : 0;
}

SUB_API int urma_poll_jfc(urma_jfc_t *jfc, int cr_cnt, urma_cr_t *cr)
{
    struct sub_jfc *j = softub__jfc_check(jfc);
    if (j == NULL || cr == NULL || cr_cnt < 0)
        return -1;
    int n = 0;
    /* Busy pollers mostly find nothing: peek without the lock, so a spinning
     * consumer runs plain loads on the slot line, as a shared-memory
     * ping-pong does, and sees a CR as soon as its line arrives. */
    if (cr_cnt == 0 || !sub_cring_ready(j->ring))
        goto empty;
    int locked = !jfc->jfc_cfg.flag.bs.lock_free;
    if (locked)
        pthread_mutex_lock(&j->poll_lock);
    uint64_t pos;
    while (n < cr_cnt) {
        struct sub_cqe *e = sub_cring_deq_begin(j->ring, &pos);
        if (e == NULL)
            break;
        struct sub_cqe c = *e;
        /* Before the release: the payload line belongs to the slot. */
        if (c.flag & 1)
            softub__rq_polled(&c, (const uint8_t *)e + SUB_CQE_INL_OFF);
        sub_cring_deq_commit(j->ring, pos);
        const uint8_t *next = (const uint8_t *)sub_ring_seq(j->ring, pos + 1);
        __builtin_prefetch(next, 0, 3);
        __builtin_prefetch(next + 64, 0, 3);
        jfc_fill_cr(&cr[n], &c);
        if (!(c.flag & 1) && (uint32_t)c.imm != 0)
            softub__sq_retire(c.local_id, (uint32_t)c.imm, (uint32_t)(c.imm >> 32));
        n++;
    }
    if (locked)
        pthread_mutex_unlock(&j->poll_lock);
empty:
    if (n == 0) {
        /* A hole at the consumer index is looked for now and then, mostly
         * behind a CR published after it; rarely by the producers' head
         * (two holes in a row, nothing after them). */
        uint32_t k = atomic_load_explicit(&j->empty_polls, memory_order_relaxed) + 1;
        atomic_store_explicit(&j->empty_polls, k, memory_order_relaxed);
        if ((k & (JFC_HOLE_EVERY - 1)) == 0)
            jfc_hole_check(j, (k & (JFC_HOLE_HEAD_EVERY - 1)) == 0);
        if (atomic_load_explicit(&softub__g.prog.nactive, memory_order_relaxed) > 0)
            softub__prog_assist();
    }
    return n;
}

/* True when a CR beyond the consumer index would fire a solicited-only arm:
 * a solicited or error CR, or one claimed and not yet published. That last
 * case is the producer's half of the handshake for solicited arms: its
 * publication is a release store, which may pass its seq_cst load of the arm
 * (jfc_notify), so the claim (a seq_cst RMW on head) is what this side must
 * count. A slot reused meanwhile by a concurrent poller reads as unpublished
 * and fires spuriously, which waiters tolerate (they poll, then rearm). */
static int jfc_solicited_waiting(struct sub_ring *r)
{
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    for (uint64_t pos = atomic_load_explicit(&r->tail, memory_order_acquire); pos < h; pos++) {
        _Atomic uint64_t *seq = sub_ring_seq(r, pos);
        if (atomic_load_explicit(seq, memory_order_acquire) != pos + 1)
            return 1;
        const struct sub_cqe *e = (const struct sub_cqe *)((uint8_t *)seq + 8);
        if (__atomic_load_n(&e->solicited, __ATOMIC_RELAXED))
            return 1;
    }
    return 0;
}

SUB_API urma_status_t urma_rearm_jfc(urma_jfc_t *jfc, bool solicited_only)
{
    struct sub_jfc *j = softub__jfc_check(jfc);
    if (j == NULL)
        return URMA_EINVAL;
    uint32_t a = solicited_only ? SUB_ARM_SOLICITED : SUB_ARM_ALL;
    atomic_store(&j->sh->armed, a);
    atomic_thread_fence(memory_order_seq_cst);
    /* CRs already waiting beyond the consumer index fire at once (for a
     * solicited-only arm, those that would fire it). */
    int waiting = solicited_only ? jfc_solicited_waiting(j->ring) : sub_ring_count(j->ring) > 0;
    if (waiting && atomic_compare_exchange_strong(&j->sh->armed, &a, SUB_ARM_NONE))
        jfc_fire(softub__g.self, j->sh);
    return URMA_SUCCESS;
}

/* Fires every JFC of ce that is not armed, as its producer would have: the
 * event of a dead producer that left no note (it had disarmed its JFC, and
 * which one is not known). Spurious events are tolerated by waiters. Under
 * softub__g.lock (g_locked: the caller holds it), which urma_delete_jfc
 * takes to free a JFC's shared part. */
static void jfc_refire_all(struct sub_jfce *ce, bool g_locked)
{
    if (!g_locked)
        pthread_mutex_lock(&softub__g.lock);
    for (uint32_t id = 0; id < SUB_MAX_QIDS; id++) {
        struct sub_obj *o = atomic_load_explicit(&softub__g.objs[id], memory_order_acquire);
        if (o == NULL || o->kind != SUB_T_JFC)
            continue;
        struct sub_jfc *j = (struct sub_jfc *)((char *)o - offsetof(struct sub_jfc, obj));
        uint32_t a = atomic_load(&j->sh->armed);
        if (j->magic == SUB_MAGIC_JFC && j->jfce == ce &&
            atomic_load(&j->sh->h.state) == SUB_OBJ_LIVE &&
            (a == SUB_ARM_NONE || (a & SUB_ARM_FIRING)))
            jfc_fire(softub__g.self, j->sh);
    }
    if (!g_locked)
        pthread_mutex_unlock(&softub__g.lock);
}

/* Under take_lock: when the event slot at the consumer index was claimed
 * by a process that died before writing it, writes it for that process
 * from the claim record (the JFC it named, if it is still the same; with
 * no note, an empty event that urma_wait_jfc drops, and a new event for
 * each JFC of the queue that is not armed) and counts it on the eventfd,
 * as the producer would have. 1 when it did. */
static int jfc_evt_complete(struct sub_jfce *ce, bool at_once, bool g_locked)
{
    struct sub_ring *r = ce->ring;
    uint64_t pos, note;
    uint32_t pid;
    if (!sub_ring_tail_hole(r, 1, &pos) ||
        !jfc_hole_lost(r, pos, &ce->hole, at_once, &pid, &note) || !jfc_hole_still(r, pos))
        return 0;
    struct sub_evt *ev = (struct sub_evt *)((uint8_t *)sub_ring_seq(r, pos) + 8);
    uint32_t id = (uint32_t)note;
    struct sub_obj *o = note != 0 && id < SUB_MAX_QIDS
                            ? atomic_load_explicit(&softub__g.objs[id], memory_order_acquire)
                            : NULL;
    memset(ev, 0, sizeof(*ev)); /* no JFC: urma_wait_jfc drops it */
    if (o != NULL && o->kind == SUB_T_JFC && (uint32_t)o->uid == (uint32_t)(note >> 32)) {
        ev->jfc_user = o->user_ptr;
        ev->jfc_uid = o->uid;
        ev->jfc_id = id;
    }
    sub_ring_enq_commit(r, pos);
    uint64_t one = 1;
    (void)!write(ce->base.fd, &one, sizeof(one));
    ce->hole.pos1 = 0;
    SUB_WARN("JFCE: the event of JFC %u claimed by process %u, dead, is written for it\n", id,
             pid);
    if (note == 0)
        jfc_refire_all(ce, g_locked);
    return 1;
}

/* Takes the next event; its slot may be claimed but not yet published by a
 * racing producer, which is then only a few instructions away, by one that
 * died there (written for it once known dead), or by one stopped there
 * (NULL after 64 yields). Under take_lock. */
static struct sub_evt *jfc_evt_take(struct sub_jfce *ce, struct sub_evt *out)
{
    struct sub_ring *r = ce->ring;
    for (int spins = 0; spins < 64; spins++) {
        uint64_t pos;
        struct sub_evt *e = sub_ring_deq_begin(r, &pos);
        if (e != NULL) {
            *out = *e;
            sub_ring_deq_commit(r, pos);
            return out;
        }
        if (!sub_ring_tail_pending(r))
            return NULL;
        if ((spins & 15) == 15 && jfc_evt_complete(ce, false, false))
            continue;
        sched_yield();
    }
    return NULL;
}

/* An event written at the consumer index that nothing counted on the
 * eventfd: its producer died (or stopped) between writing it and counting
 * it, which may take system calls (the first signal to a process opens its
 * eventfd through pidfd_getfd). The consumer would never wake for it, and
 * the JFC stays disarmed, so none of its later CRs would wake it either.
 * Seen at two looks in a row (a consumer reads the count before it takes
 * the event), the count is written for the producer; a producer that goes
 * on counts once more, a spurious wake-up that waiters tolerate. */
static void jfc_evt_uncounted(struct sub_jfce *ce)
{
    struct sub_ring *r = ce->ring;
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    struct pollfd pfd = {.fd = ce->base.fd, .events = POLLIN};
    if (atomic_load_explicit(sub_ring_seq(r, t), memory_order_acquire) != t + 1 ||
        poll(&pfd, 1, 0) != 0) {
        ce->uncounted1 = 0;
        return;
    }
    if (ce->uncounted1 != t + 1) {
        ce->uncounted1 = t + 1;
        return;
    }
    uint64_t one = 1;
    (void)!write(ce->base.fd, &one, sizeof(one));
    ce->uncounted1 = 0;
    SUB_WARN("JFCE: an event its producer did not count (died or stopped) is counted for it\n");
}

/* Under softub__g.lock: each JFC of ours with an event queue that a
 * producer of another process disarmed and died before it claimed its
 * event's slot (SUB_ARM_FIRING and its pid) gets that event now. Its owner,
 * asleep on the queue's fd, would never wake for the JFC again: no later CR
 * fires a disarmed JFC. */
static void jfc_firing_lost(void)
{
    for (uint32_t id = 0; id < SUB_MAX_QIDS; id++) {
        struct sub_obj *o = atomic_load_explicit(&softub__g.objs[id], memory_order_acquire);
        if (o == NULL || o->kind != SUB_T_JFC) continue;
        struct sub_jfc *j = (struct sub_jfc *)((char *)o - offsetof(struct sub_jfc, obj));
        if (j->magic != SUB_MAGIC_JFC || j->jfce == NULL ||
            atomic_load(&j->sh->h.state) != SUB_OBJ_LIVE)
            continue;
        uint32_t a = atomic_load(&j->sh->armed);
        if (!(a & SUB_ARM_FIRING) || !softub__pid_gone(a & ~SUB_ARM_FIRING)) continue;
        if (!atomic_compare_exchange_strong(&j->sh->armed, &a, SUB_ARM_NONE)) continue;
        SUB_WARN("JFC %u: disarmed by process %u, dead before its event: the event is fired "
                 "for it\n",
                 j->sh->h.id, a & ~SUB_ARM_FIRING);
        jfc_fire(softub__g.self, j->sh);
    }
}

int softub__jfce_holes_check(void)
{
    struct sub_global *g = &softub__g;
    int left = 0;
    pthread_mutex_lock(&g->lock);
    if (g->jfces != NULL) jfc_firing_lost();
    for (struct sub_jfce *j = g->jfces; j != NULL; j = j->next) {
        uint64_t pos;
        jfc_evt_uncounted(j);
        if (!sub_ring_tail_hole(j->ring, 1, &pos))
            continue;
        if (pthread_mutex_trylock(&j->take_lock) != 0) {
            left = 1;
            continue;
        }
        if (!jfc_evt_complete(j, true, true))
            left = 1;
        pthread_mutex_unlock(&j->take_lock);
    }
    pthread_mutex_unlock(&g->lock);
    return left;
}

SUB_API int urma_wait_jfc(urma_jfce_t *jfce, uint32_t jfc_cnt, int time_out, urma_jfc_t *jfc[])
{
    struct sub_jfce *ce = jfce_check(jfce);
    if (ce == NULL || jfc_cnt == 0 || jfc == NULL)
        return -1;
    uint32_t max = jfc_cnt < 16 ? jfc_cnt : 16;
    uint64_t deadline = time_out > 0 ? softub__now_ns() + (uint64_t)time_out * 1000000ull : 0;
    uint32_t n = 0;
    while (n < max) {
        uint64_t v;
        ssize_t r = read(jfce->fd, &v, sizeof(v));
        if (r == (ssize_t)sizeof(v)) {
            struct sub_evt ev;
            pthread_mutex_lock(&ce->take_lock);
            struct sub_evt *got = jfc_evt_take(ce, &ev);
            int held = got == NULL && sub_ring_tail_pending(ce->ring);
            pthread_mutex_unlock(&ce->take_lock);
            if (held) {
                /* The count is the event's behind a slot a live producer
                 * holds (stopped): given back, so that neither is lost. */
                (void)!write(jfce->fd, &v, sizeof(v));
                if (n > 0 || time_out == 0 ||
                    (time_out > 0 && softub__now_ns() >= deadline))
                    break;
                struct timespec nap = {0, 2000000};
                nanosleep(&nap, NULL);
                continue;
            }
            if (got == NULL)
                continue;
            struct sub_obj *o = softub__obj_find(ev.jfc_id, ev.jfc_uid);
            if (o == NULL || o->kind != SUB_T_JFC)
                continue; /* its JFC was deleted meanwhile */
            struct sub_jfc *j = (struct sub_jfc *)((char *)o - offsetof(struct sub_jfc, obj));
            pthread_mutex_lock(&j->ev_lock);
            j->reported++;
            pthread_mutex_unlock(&j->ev_lock);
            jfc[n++] = &j->base;
            /* Saves the read that would only say EAGAIN: the count and the
             * ring move together. */
            if (sub_ring_count(ce->ring) == 0)
                break;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno != EAGAIN)
            return -1;
        if (n > 0 || time_out == 0)
            break;
        int wait_ms = -1;
        if (time_out > 0) {
            uint64_t now = softub__now_ns();
            if (now >= deadline)
                break;
            wait_ms = (int)((deadline - now + 999999) / 1000000);
        }
        struct pollfd pfd = {.fd = jfce->fd, .events = POLLIN};
        int pr = poll(&pfd, 1, wait_ms);
        if (pr < 0) {
            if (errno == EINTR) {
                errno = ERESTARTSYS_VALUE;
                return 0;
            }
            return -1;
        }
        if (pr == 0 && time_out > 0 && softub__now_ns() >= deadline)
            break;
    }
    return (int)n;
}

SUB_API void urma_ack_jfc(urma_jfc_t *jfc[], uint32_t nevents[], uint32_t jfc_cnt)
{
    if (jfc == NULL || nevents == NULL || jfc_cnt == 0 || softub__jfc_check(jfc[0]) == NULL)
        return;
    for (uint32_t i = 0; i < jfc_cnt; i++) {
        struct sub_jfc *j = softub__jfc_check(jfc[i]);
        if (j == NULL)
            continue;
        pthread_mutex_lock(&j->ev_lock);
        j->acked += nevents[i];
        if (j->acked > j->reported)
            SUB_WARN("urma_ack_jfc: JFC %u acked %llu events but %llu were reported\n",
                     jfc[i]->jfc_id.id, (unsigned long long)j->acked,
                     (unsigned long long)j->reported);
        pthread_cond_broadcast(&j->ev_cond);
        pthread_mutex_unlock(&j->ev_lock);
    }
}
