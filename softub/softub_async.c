/* softub_async.c: asynchronous events and the process object table.
 *
 * Each context has an MPMC ring of async events in its owner's region and
 * an EFD_SEMAPHORE eventfd (ctx->async_fd) counting them, so a remote
 * sender that overflows a JFC can queue URMA_EVENT_JFC_ERR for its owner.
 * Events raised by softub: JFC_ERR (a CR was dropped because the JFC was
 * full) and JETTY_ERR / JFS_ERR (an RC connection broke because its peer
 * died; the jetty went to ERROR).
 *
 * urma_get_async_event reports an event and counts it on its object;
 * urma_ack_async_event acks it; deleting an object with reported but
 * unacked events returns URMA_EAGAIN.
 *
 * The object table maps queue ids to the live objects of this process; an
 * entry also carries a uid, so an event or CR naming a deleted object (its
 * id possibly reused) is recognised and dropped. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "softub_internal.h"

void softub__obj_register(struct sub_obj *o, uint32_t kind, uint32_t id, uint64_t user_ptr)
{
    o->kind = kind;
    o->id = id;
    o->user_ptr = user_ptr;
    o->uid = softub__uid();
    atomic_init(&o->async_reported, 0);
    atomic_init(&o->async_acked, 0);
    atomic_init(&o->async_raised, 0);
    if (softub__g.objs != NULL && id < SUB_MAX_QIDS)
        atomic_store_explicit(&softub__g.objs[id], o, memory_order_release);
}

void softub__obj_unregister(struct sub_obj *o)
{
    if (softub__g.objs == NULL || o->id >= SUB_MAX_QIDS)
        return;
    struct sub_obj *exp = o;
    (void)atomic_compare_exchange_strong(&softub__g.objs[o->id], &exp, NULL);
}

struct sub_obj *softub__obj_find(uint32_t id, uint64_t uid)
{
    struct sub_obj *_Atomic *objs = softub__g.objs;
    if (objs == NULL || id >= SUB_MAX_QIDS)
        return NULL;
    struct sub_obj *o = atomic_load_explicit(&objs[id], memory_order_acquire);
    return (o != NULL && o->uid == uid) ? o : NULL;
}

int softub__async_busy(struct sub_obj *o)
{
    uint32_t r = atomic_load(&o->async_reported), a = atomic_load(&o->async_acked);
    if (r > a) {
        SUB_INFO("object %u has %u unacked async event(s): call urma_ack_async_event\n", o->id,
                 r - a);
        return 1;
    }
    return 0;
}

int softub__async_raise(struct sub_peer *p, uint64_t sctx_off, uint32_t type, uint32_t obj_id,
                        uint64_t obj_uid, uint64_t user_ptr)
{
    struct sub_sctx *sc = softub__peer_ptr(p, sctx_off, sizeof(*sc));
    if (sc == NULL || atomic_load(&sc->h.state) != SUB_OBJ_LIVE)
        return -1;
    struct sub_ring *r = softub__peer_ptr(p, sc->async_ring_off, sizeof(struct sub_ring));
    if (r == NULL || r->magic != SUB_RING_MAGIC || r->cap == 0 || (r->cap & (r->cap - 1)) != 0 ||
        r->mask != r->cap - 1 || r->esize != 8 + sizeof(struct sub_aevt) ||
        softub__peer_ptr(p, sc->async_ring_off, sub_ring_bytes(r->cap, r->esize)) == NULL)
        return -1;
    uint64_t pos;
    struct sub_aevt *e = sub_ring_enq_begin(r, &pos);
    if (e == NULL) {
        SUB_WARN("async event queue full: event %u of object %u dropped\n", type, obj_id);
        return -1;
    }
    e->type = type;
    e->obj_id = obj_id;
    e->obj_uid = obj_uid;
    e->user_ptr = user_ptr;
    sub_ring_enq_commit(r, pos);
    return softub__peer_signal(p, sctx_off, sc->h.gen, sc->async_fd, &sc->pending_signals);
}

static int async_take(struct sub_ring *r, struct sub_aevt *out)
{
    for (int spins = 0; spins < 1000000; spins++) {
        uint64_t pos;
        struct sub_aevt *e = sub_ring_deq_begin(r, &pos);
        if (e != NULL) {
            *out = *e;
            sub_ring_deq_commit(r, pos);
            return 0;
        }
        if (!sub_ring_tail_pending(r))
            return -1;
        sched_yield();
    }
    return -1;
}

SUB_API urma_status_t urma_get_async_event(urma_context_t *ctx, urma_async_event_t *event)
{
    if (ctx == NULL || event == NULL)
        return URMA_EINVAL;
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL)
        return URMA_EINVAL;
    for (;;) {
        uint64_t v;
        ssize_t n = read(ctx->async_fd, &v, sizeof(v));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                return URMA_FAIL;
            /* Like a read on the kernel's async fd: block until one arrives. */
            struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
            if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                return URMA_FAIL;
            continue;
        }
        struct sub_aevt e;
        pthread_mutex_lock(&c->lock);
        int got = async_take(c->aring, &e);
        pthread_mutex_unlock(&c->lock);
        if (got != 0)
            continue;
        struct sub_obj *o = softub__obj_find(e.obj_id, e.obj_uid);
        if (o == NULL)
            continue; /* the object is gone */
        memset(event, 0, sizeof(*event));
        event->urma_ctx = ctx;
        event->element.jfc = (urma_jfc_t *)(uintptr_t)e.user_ptr;
        event->event_type = (urma_async_event_type_t)e.type;
        event->priv = NULL;
        atomic_fetch_add(&o->async_reported, 1);
        return URMA_SUCCESS;
    }
}

SUB_API void urma_ack_async_event(urma_async_event_t *event)
{
    if (event == NULL || event->urma_ctx == NULL ||
        softub__ctx_check((urma_context_t *)(uintptr_t)event->urma_ctx) == NULL)
        return;
    struct sub_obj *o = NULL;
    switch (event->event_type) {
    case URMA_EVENT_JFC_ERR: {
        struct sub_jfc *j = softub__jfc_check(event->element.jfc);
        o = j != NULL ? &j->obj : NULL;
        break;
    }
    case URMA_EVENT_JFS_ERR: {
        struct sub_jfs *j = softub__jfs_check(event->element.jfs);
        o = j != NULL ? &j->obj : NULL;
        break;
    }
    case URMA_EVENT_JFR_ERR:
    case URMA_EVENT_JFR_LIMIT: {
        struct sub_jfr *j = softub__jfr_check(event->element.jfr);
        o = j != NULL ? &j->obj : NULL;
        break;
    }
    case URMA_EVENT_JETTY_ERR:
    case URMA_EVENT_JETTY_LIMIT: {
        struct sub_jetty *j = softub__jetty_check(event->element.jetty);
        o = j != NULL ? &j->obj : NULL;
        break;
    }
    default:
        break;
    }
    if (o != NULL && atomic_load(&o->async_acked) < atomic_load(&o->async_reported))
        atomic_fetch_add(&o->async_acked, 1);
}
