/* softub_queue.c: JFS, JFR and jetty objects; importing jetties and JFRs;
 * RC bind/unbind; advise; the public post/flush entry points.
 *
 * Creation checks follow liburma master (urma_cp_api.c) in its order,
 * including the order_type write-back into the caller's cfg, which happens
 * even when a later check fails, as liburma does it. Provider-level checks
 * follow UDMA where it is stricter (RC JFS refused, priority < 16, ceqn). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "softub_internal.h"

static int q_tm_valid(urma_transport_mode_t tm)
{
    return tm == URMA_TM_RM || tm == URMA_TM_RC || tm == URMA_TM_UM;
}

/* liburma's urma_check_order_type. */
static int q_check_order(urma_transport_mode_t tm, uint32_t ot)
{
    if (ot > URMA_NO)
        return -1;
    if ((tm != URMA_TM_RC && ot == URMA_OT) || (tm != URMA_TM_RC && ot == URMA_OL) ||
        (tm != URMA_TM_RM && ot == URMA_OI) || (tm == URMA_TM_RM && ot == URMA_NO))
        return -1;
    return 0;
}

/* liburma's urma_convert_order_type. */
static int q_convert_order(urma_transport_mode_t tm, uint32_t *ot)
{
    if (*ot != URMA_DEF_ORDER)
        return 0;
    switch (tm) {
    case URMA_TM_RM:
        *ot = URMA_OI;
        return 0;
    case URMA_TM_RC:
        *ot = URMA_OL;
        return 0;
    case URMA_TM_UM:
        *ot = URMA_NO;
        return 0;
    default:
        return -1;
    }
}

static int q_check_tp(urma_transport_mode_t tm, uint32_t tp)
{
    if ((tm != URMA_TM_UM && tp == URMA_UTP) || (tm == URMA_TM_UM && tp == URMA_RTP))
        return -1;
    return 0;
}

struct sub_jfs *softub__jfs_check(urma_jfs_t *jfs)
{
    if (jfs == NULL || jfs->urma_ctx == NULL || jfs->handle != (uint64_t)(uintptr_t)jfs)
        return NULL;
    struct sub_jfs *j = (struct sub_jfs *)jfs;
    return j->magic == SUB_MAGIC_JFS ? j : NULL;
}

struct sub_jfr *softub__jfr_check(urma_jfr_t *jfr)
{
    if (jfr == NULL || jfr->urma_ctx == NULL || jfr->handle != (uint64_t)(uintptr_t)jfr)
        return NULL;
    struct sub_jfr *j = (struct sub_jfr *)jfr;
    return j->magic == SUB_MAGIC_JFR ? j : NULL;
}

struct sub_jetty *softub__jetty_check(urma_jetty_t *jetty)
{
    if (jetty == NULL || jetty->urma_ctx == NULL || jetty->handle != (uint64_t)(uintptr_t)jetty)
        return NULL;
    struct sub_jetty *j = (struct sub_jetty *)jetty;
    return j->magic == SUB_MAGIC_JETTY ? j : NULL;
}

struct sub_tjetty *softub__tjetty_check(urma_target_jetty_t *t)
{
    if (t == NULL || t->handle != (uint64_t)(uintptr_t)t)
        return NULL;
    struct sub_tjetty *j = (struct sub_tjetty *)t;
    return j->magic == SUB_MAGIC_TJ ? j : NULL;
}

static int q_jfs_caps(const urma_jfs_cfg_t *cfg)
{
    const urma_device_cap_t *cap = &softub__device_attr()->dev_cap;
    return (cfg->depth == 0 || cfg->depth > cap->max_jfs_depth) ||
                   cfg->max_inline_data > cap->max_jfs_inline_len ||
                   cfg->max_sge > cap->max_jfs_sge || cfg->max_rsge > cap->max_jfs_rsge
               ? -1
               : 0;
}

/* ------------------------------------------------------------------------ */
/* JFS                                                                       */
/* ------------------------------------------------------------------------ */

SUB_API urma_jfs_t *urma_create_jfs(urma_context_t *ctx, urma_jfs_cfg_t *jfs_cfg)
{
    if (ctx == NULL || jfs_cfg == NULL || jfs_cfg->jfc == NULL ||
        !q_tm_valid(jfs_cfg->trans_mode)) {
        errno = EINVAL;
        return NULL;
    }
    uint32_t ot = jfs_cfg->flag.bs.order_type;
    if (q_check_order(jfs_cfg->trans_mode, ot) != 0 ||
        q_convert_order(jfs_cfg->trans_mode, &ot) != 0) {
        SUB_INFO("invalid order_type %u for trans_mode %d\n", jfs_cfg->flag.bs.order_type,
                 (int)jfs_cfg->trans_mode);
        errno = EINVAL;
        return NULL;
    }
    jfs_cfg->flag.bs.order_type = ot;
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL || q_jfs_caps(jfs_cfg) != 0) {
        errno = EINVAL;
        return NULL;
    }
    if (jfs_cfg->trans_mode == URMA_TM_RC || jfs_cfg->priority > URMA_MAX_PRIORITY) {
        SUB_INFO("jfs: RC transport mode or priority %u not supported\n", jfs_cfg->priority);
        errno = EINVAL;
        return NULL;
    }
    struct sub_jfc *jfc = softub__jfc_check(jfs_cfg->jfc);
    if (jfc == NULL || jfc->ctx != c) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_jfs *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    uint32_t id;
    if (softub__id_alloc(0, 0, SUB_T_JFS, 0, &id, NULL) != 0) {
        pthread_mutex_unlock(&g->lock);
        free(j);
        errno = ENOSPC;
        return NULL;
    }
    j->magic = SUB_MAGIC_JFS;
    softub__obj_register(&j->obj, SUB_T_JFS, id, (uint64_t)(uintptr_t)&j->base);
    urma_jfs_t *b = &j->base;
    b->urma_ctx = ctx;
    b->jfs_id.eid = ctx->eid;
    b->jfs_id.uasid = ctx->uasid;
    b->jfs_id.id = id;
    b->jfs_cfg = *jfs_cfg;
    b->handle = (uint64_t)(uintptr_t)b;
    softub__sq_init(&j->sq, c, jfc, &j->obj, id, 0, (uint64_t)(uintptr_t)b, jfs_cfg);
    atomic_fetch_add(&jfc->users, 1);
    atomic_fetch_add(&ctx->ref, 1);
    pthread_mutex_unlock(&g->lock);
    return b;
}

SUB_API urma_status_t urma_delete_jfs(urma_jfs_t *jfs)
{
    if (jfs == NULL)
        return URMA_EINVAL;
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL)
        return URMA_EINVAL;
    if (softub__async_busy(&j->obj))
        return URMA_EAGAIN;
    softub__sq_fini(&j->sq);
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    softub__obj_unregister(&j->obj);
    softub__id_free(0, jfs->jfs_id.id);
    atomic_fetch_sub(&j->sq.jfc->users, 1);
    atomic_fetch_sub(&jfs->urma_ctx->ref, 1);
    j->magic = SUB_MAGIC_DEAD;
    jfs->handle = 0;
    pthread_mutex_unlock(&g->lock);
    softub__grave(j);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_modify_jfs(urma_jfs_t *jfs, urma_jfs_attr_t *attr)
{
    if (jfs == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL || (attr->mask & JFS_STATE) == 0)
        return URMA_EINVAL;
    return softub__sq_modify(&j->sq, attr->state);
}

SUB_API urma_status_t urma_query_jfs(urma_jfs_t *jfs, urma_jfs_cfg_t *cfg, urma_jfs_attr_t *attr)
{
    if (jfs == NULL || cfg == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL)
        return URMA_EINVAL;
    *cfg = jfs->jfs_cfg;
    attr->mask = JFS_STATE;
    attr->state = (urma_jfs_state_t)atomic_load(&j->sq.state);
    return URMA_SUCCESS;
}

SUB_API int urma_flush_jfs(urma_jfs_t *jfs, int cr_cnt, urma_cr_t *cr)
{
    /* Count-returning: -1 on error (§2.1). cr_cnt is the room in cr, which
     * may exceed the queue's depth. */
    if (jfs == NULL || cr == NULL || cr_cnt <= 0)
        return -1;
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL)
        return -1;
    return softub__sq_flush(&j->sq, cr_cnt, cr);
}

SUB_API urma_status_t urma_post_jfs_wr(urma_jfs_t *jfs, urma_jfs_wr_t *wr, urma_jfs_wr_t **bad_wr)
{
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL || jfs->jfs_cfg.jfc == NULL || wr == NULL || bad_wr == NULL)
        return URMA_EINVAL;
    return softub__sq_post(&j->sq, wr, bad_wr);
}

/* ------------------------------------------------------------------------ */
/* JFR                                                                       */
/* ------------------------------------------------------------------------ */

SUB_API urma_jfr_t *urma_create_jfr(urma_context_t *ctx, urma_jfr_cfg_t *jfr_cfg)
{
    if (ctx == NULL || jfr_cfg == NULL || jfr_cfg->jfc == NULL ||
        !q_tm_valid(jfr_cfg->trans_mode)) {
        errno = EINVAL;
        return NULL;
    }
    uint32_t ot = jfr_cfg->flag.bs.order_type;
    if (q_convert_order(jfr_cfg->trans_mode, &ot) != 0) {
        errno = EINVAL;
        return NULL;
    }
    jfr_cfg->flag.bs.order_type = ot;
    struct sub_ctx *c = softub__ctx_check(ctx);
    const urma_device_cap_t *cap = &softub__device_attr()->dev_cap;
    if (c == NULL || jfr_cfg->depth == 0 || jfr_cfg->depth > cap->max_jfr_depth ||
        jfr_cfg->max_sge > cap->max_jfr_sge) {
        SUB_INFO("jfr cfg out of range, depth=%u, sge=%u\n", jfr_cfg->depth, jfr_cfg->max_sge);
        errno = EINVAL;
        return NULL;
    }
    struct sub_jfc *jfc = softub__jfc_check(jfr_cfg->jfc);
    if (jfc == NULL || jfc->ctx != c || jfr_cfg->flag.bs.tag_matching) {
        errno = EINVAL;
        return NULL;
    }
    uint32_t nsge = jfr_cfg->max_sge > 0 ? jfr_cfg->max_sge : 1;
    /* A lap of slack beyond the depth (which sub_ring_holds enforces): a
     * re-post then writes a slot that its sender freed a lap ago, not the
     * one it freed a moment ago, and softub__rq_post can take that line for
     * writing ahead of time instead of missing on it between a receive and
     * the answer. */
    uint32_t cap_slots = sub_ring_pow2(jfr_cfg->depth) * 2;
    /* The shadow entries share the object's allocation, so that they live
     * exactly as long (a poller holding the object through the object table
     * also holds them). */
    size_t sh_at = (sizeof(struct sub_jfr) + 63) & ~(size_t)63;
    uint32_t sh_stride =
        (uint32_t)(sizeof(struct sub_rshadow) + nsge * sizeof(struct sub_rqe_sge));
    struct sub_jfr *j = calloc(1, sh_at + (size_t)cap_slots * sh_stride);
    if (j == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    j->shadow = (uint8_t *)j + sh_at;
    j->sh_stride = sh_stride;
    /* Whole cache lines per slot, as for CRs. */
    j->rqe_size = (uint32_t)((8 + sizeof(struct sub_rqe) + nsge * sizeof(struct sub_rqe_sge) + 63) &
                             ~(size_t)63);
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    uint64_t roff = softub__ralloc(sub_ring_bytes(cap_slots, j->rqe_size), 4096);
    j->sh_off = softub__ralloc(sizeof(struct sub_sjfr), 64);
    uint32_t id = 0, gen = 0;
    int rc = (roff == 0 || j->sh_off == 0)
                 ? -ENOMEM
                 : softub__id_alloc(0, jfr_cfg->id, SUB_T_JFR, j->sh_off, &id, &gen);
    if (rc != 0) {
        softub__rfree(roff, roff ? sub_ring_bytes(cap_slots, j->rqe_size) : 0);
        softub__rfree(j->sh_off, j->sh_off ? sizeof(struct sub_sjfr) : 0);
        pthread_mutex_unlock(&g->lock);
        free(j);
        errno = ENOMEM;
        return NULL;
    }
    j->ring = softub__rptr(roff);
    sub_ring_init(j->ring, cap_slots, j->rqe_size);
    j->magic = SUB_MAGIC_JFR;
    j->ctx = c;
    j->jfc = jfc;
    pthread_mutex_init(&j->lock, NULL);
    softub__obj_register(&j->obj, SUB_T_JFR, id, (uint64_t)(uintptr_t)&j->base);
    j->sh = softub__rptr(j->sh_off);
    j->sh->h.type = SUB_T_JFR;
    j->sh->h.gen = gen;
    j->sh->h.id = id;
    atomic_store(&j->sh->qstate, URMA_JFR_STATE_READY);
    j->sh->trans_mode = jfr_cfg->trans_mode;
    j->sh->token_policy = jfr_cfg->flag.bs.token_policy;
    j->sh->token_value = jfr_cfg->token_value.token;
    j->sh->min_rnr_timer = jfr_cfg->min_rnr_timer & 31u;
    j->sh->max_sge = nsge;
    j->sh->eid = ctx->eid;
    j->sh->jfc_off = jfc->sh_off;
    j->sh->ring_off = roff;
    urma_jfr_t *b = &j->base;
    j->sh->user_ptr = (uint64_t)(uintptr_t)b;
    atomic_store(&j->sh->h.state, SUB_OBJ_LIVE);
    b->urma_ctx = ctx;
    b->jfr_id.eid = ctx->eid;
    b->jfr_id.uasid = ctx->uasid;
    b->jfr_id.id = id;
    b->jfr_cfg = *jfr_cfg;
    b->handle = (uint64_t)(uintptr_t)b;
    atomic_fetch_add(&jfc->users, 1);
    atomic_fetch_add(&ctx->ref, 1);
    pthread_mutex_unlock(&g->lock);
    return b;
}

SUB_API urma_status_t urma_delete_jfr(urma_jfr_t *jfr)
{
    if (jfr == NULL)
        return URMA_EINVAL;
    struct sub_jfr *j = softub__jfr_check(jfr);
    if (j == NULL)
        return URMA_EINVAL;
    if (atomic_load(&j->users) != 0) {
        SUB_INFO("urma_delete_jfr: JFR %u still shared by %u jetty(ies)\n", jfr->jfr_id.id,
                 atomic_load(&j->users));
        return URMA_FAIL;
    }
    if (softub__async_busy(&j->obj))
        return URMA_EAGAIN;
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    atomic_store(&j->sh->h.state, SUB_OBJ_DEAD);
    softub__obj_unregister(&j->obj);
    softub__id_free(0, jfr->jfr_id.id);
    softub__rfree(j->sh->ring_off, sub_ring_bytes(j->ring->cap, j->rqe_size));
    softub__rfree(j->sh_off, sizeof(struct sub_sjfr));
    atomic_fetch_sub(&j->jfc->users, 1);
    atomic_fetch_sub(&jfr->urma_ctx->ref, 1);
    j->magic = SUB_MAGIC_DEAD;
    jfr->handle = 0;
    pthread_mutex_unlock(&g->lock);
    softub__grave(j);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_modify_jfr(urma_jfr_t *jfr, urma_jfr_attr_t *attr)
{
    if (jfr == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jfr *j = softub__jfr_check(jfr);
    if (j == NULL || (attr->mask & (JFR_STATE | JFR_RX_THRESHOLD)) == 0)
        return URMA_EINVAL;
    if (!(attr->mask & JFR_STATE))
        return URMA_SUCCESS; /* rx_threshold: accepted, no JFR_LIMIT events */
    pthread_mutex_lock(&j->lock);
    uint32_t cur = atomic_load(&j->sh->qstate), to = attr->state;
    int ok = to == cur || to == URMA_JFR_STATE_ERROR || (to == URMA_JFR_STATE_RESET) ||
             (to == URMA_JFR_STATE_READY && cur == URMA_JFR_STATE_RESET);
    if (!ok || to > URMA_JFR_STATE_ERROR) {
        pthread_mutex_unlock(&j->lock);
        return URMA_FAIL;
    }
    atomic_store(&j->sh->qstate, to);
    if (to == URMA_JFR_STATE_ERROR && cur != URMA_JFR_STATE_ERROR)
        softub__rq_flush(j);
    if (to == URMA_JFR_STATE_RESET) {
        softub__rq_discard(j);
    }
    pthread_mutex_unlock(&j->lock);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_query_jfr(urma_jfr_t *jfr, urma_jfr_cfg_t *cfg, urma_jfr_attr_t *attr)
{
    if (jfr == NULL || cfg == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jfr *j = softub__jfr_check(jfr);
    if (j == NULL)
        return URMA_EINVAL;
    *cfg = jfr->jfr_cfg;
    attr->mask = JFR_STATE;
    attr->rx_threshold = 0;
    attr->state = (urma_jfr_state_t)atomic_load(&j->sh->qstate);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_post_jfr_wr(urma_jfr_t *jfr, urma_jfr_wr_t *wr, urma_jfr_wr_t **bad_wr)
{
    struct sub_jfr *j = softub__jfr_check(jfr);
    if (j == NULL || jfr->jfr_cfg.jfc == NULL || wr == NULL || bad_wr == NULL)
        return URMA_EINVAL;
    return softub__rq_post(j, wr, bad_wr);
}

/* ------------------------------------------------------------------------ */
/* Jetty                                                                     */
/* ------------------------------------------------------------------------ */


SUB_API urma_jetty_t *urma_create_jetty(urma_context_t *ctx, urma_jetty_cfg_t *jetty_cfg)
{
    if (ctx == NULL || jetty_cfg == NULL || ctx->dev == NULL) {
        errno = EINVAL;
        return NULL;
    }
    softub__fault_sleep_us(softub__fault.queue_delay_us, "create_jetty");
    urma_jetty_cfg_t *cfg = jetty_cfg;
    /* urma_create_jetty_check_jfc */
    struct sub_jfr *jfr = NULL;
    if (cfg->jfs_cfg.jfc == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (cfg->flag.bs.share_jfr) {
        jfr = softub__jfr_check(cfg->shared.jfr);
        if (jfr == NULL || cfg->shared.jfr->jfr_cfg.jfc == NULL) {
            errno = EINVAL;
            return NULL;
        }
    } else if (cfg->jfr_cfg == NULL || cfg->jfr_cfg->jfc == NULL) {
        errno = EINVAL;
        return NULL;
    }
    /* urma_create_jetty_check_trans_mode */
    if (!q_tm_valid(cfg->jfs_cfg.trans_mode)) {
        errno = EINVAL;
        return NULL;
    }
    if (!cfg->flag.bs.share_jfr) {
        SUB_INFO("UB dev should use share jfr!\n");
        errno = EINVAL;
        return NULL;
    }
    uint32_t ot = cfg->jfs_cfg.flag.bs.order_type;
    if (q_check_order(cfg->jfs_cfg.trans_mode, ot) != 0 ||
        q_convert_order(cfg->jfs_cfg.trans_mode, &ot) != 0) {
        errno = EINVAL;
        return NULL;
    }
    cfg->jfs_cfg.flag.bs.order_type = ot;
    if (cfg->jfs_cfg.trans_mode != cfg->shared.jfr->jfr_cfg.trans_mode ||
        ot != cfg->shared.jfr->jfr_cfg.flag.bs.order_type) {
        SUB_INFO("jfr trans_mode or order_type differs from the jetty's\n");
        errno = EINVAL;
        return NULL;
    }
    if (cfg->jetty_grp != NULL) {
        SUB_INFO("jetty groups are not supported\n");
        errno = EINVAL;
        return NULL;
    }
    struct sub_ctx *c = softub__ctx_check(ctx);
    const urma_device_cap_t *cap = &softub__device_attr()->dev_cap;
    const urma_jfr_cfg_t *rc = &cfg->shared.jfr->jfr_cfg;
    if (c == NULL || q_jfs_caps(&cfg->jfs_cfg) != 0 || rc->depth == 0 ||
        rc->depth > cap->max_jfr_depth || rc->max_sge > cap->max_jfr_sge ||
        cfg->jfs_cfg.priority > URMA_MAX_PRIORITY) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_jfc *jfc = softub__jfc_check(cfg->jfs_cfg.jfc);
    struct sub_jfc *rx = jfr->jfc;
    if (cfg->shared.jfc != NULL)
        rx = softub__jfc_check(cfg->shared.jfc);
    if (jfc == NULL || rx == NULL || jfc->ctx != c || rx->ctx != c || jfr->ctx != c) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_jetty *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    j->sh_off = softub__ralloc(sizeof(struct sub_sjetty), 64);
    uint32_t id = 0, gen = 0;
    if (j->sh_off == 0 || softub__id_alloc(0, cfg->id, SUB_T_JETTY, j->sh_off, &id, &gen) != 0) {
        softub__rfree(j->sh_off, j->sh_off ? sizeof(struct sub_sjetty) : 0);
        pthread_mutex_unlock(&g->lock);
        free(j);
        errno = ENOMEM;
        return NULL;
    }
    j->magic = SUB_MAGIC_JETTY;
    j->jfr = jfr;
    j->rx_jfc = rx;
    softub__obj_register(&j->obj, SUB_T_JETTY, id, (uint64_t)(uintptr_t)&j->base);
    urma_jetty_t *b = &j->base;
    j->sh = softub__rptr(j->sh_off);
    j->sh->h.type = SUB_T_JETTY;
    j->sh->h.gen = gen;
    j->sh->h.id = id;
    atomic_store(&j->sh->qstate, URMA_JETTY_STATE_READY);
    j->sh->trans_mode = cfg->jfs_cfg.trans_mode;
    j->sh->order_type = ot;
    j->sh->eid = ctx->eid;
    j->sh->jfr_off = jfr->sh_off;
    j->sh->rx_jfc_off = rx->sh_off;
    j->sh->user_ptr = (uint64_t)(uintptr_t)b;
    atomic_store(&j->sh->h.state, SUB_OBJ_LIVE);
    b->urma_ctx = ctx;
    b->jetty_id.eid = ctx->eid;
    b->jetty_id.uasid = ctx->uasid;
    b->jetty_id.id = id;
    b->remote_jetty = NULL;
    b->jetty_cfg = *cfg;
    if (b->jetty_cfg.shared.jfc == NULL)
        b->jetty_cfg.shared.jfc = cfg->shared.jfr->jfr_cfg.jfc;
    b->handle = (uint64_t)(uintptr_t)b;
    softub__sq_init(&j->sq, c, jfc, &j->obj, id, 1, (uint64_t)(uintptr_t)b, &cfg->jfs_cfg);
    atomic_fetch_add(&jfr->users, 1);
    atomic_fetch_add(&jfc->users, 1);
    atomic_fetch_add(&rx->users, 1);
    atomic_fetch_add(&ctx->ref, 1);
    pthread_mutex_unlock(&g->lock);
    return b;
}

SUB_API urma_status_t urma_delete_jetty(urma_jetty_t *jetty)
{
    if (jetty == NULL)
        return URMA_EINVAL;
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL)
        return URMA_EINVAL;
    if (jetty->jetty_cfg.jfs_cfg.trans_mode == URMA_TM_RC && jetty->remote_jetty != NULL) {
        SUB_INFO("Failed to delete jetty because it has remote jetty, try unbind first\n");
        return URMA_ENOPERM;
    }
    softub__fault_sleep_us(softub__fault.queue_delay_us, "delete_jetty");
    if (softub__async_busy(&j->obj))
        return URMA_EAGAIN;
    atomic_store(&j->sh->qstate, URMA_JETTY_STATE_ERROR);
    softub__sq_fini(&j->sq);
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    atomic_store(&j->sh->h.state, SUB_OBJ_DEAD);
    softub__obj_unregister(&j->obj);
    softub__id_free(0, jetty->jetty_id.id);
    softub__rfree(j->sh_off, sizeof(struct sub_sjetty));
    atomic_fetch_sub(&j->jfr->users, 1);
    atomic_fetch_sub(&j->sq.jfc->users, 1);
    atomic_fetch_sub(&j->rx_jfc->users, 1);
    atomic_fetch_sub(&jetty->urma_ctx->ref, 1);
    j->magic = SUB_MAGIC_DEAD;
    jetty->handle = 0;
    pthread_mutex_unlock(&g->lock);
    softub__grave(j);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_modify_jetty(urma_jetty_t *jetty, urma_jetty_attr_t *attr)
{
    if (jetty == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL || (attr->mask & JETTY_STATE) == 0)
        return URMA_EINVAL;
    if (attr->state == URMA_JETTY_STATE_RESET)
        softub__fault_sleep_us(softub__fault.queue_delay_us, "modify_jetty(RESET)");
    if (attr->state == URMA_JETTY_STATE_ERROR) {
        softub__fault_sleep_us(softub__fault.close_delay_us, "modify_jetty(ERROR)");
        if (softub__fault.close_fail)
            return URMA_FAIL;
    }
    urma_status_t rc = softub__sq_modify(&j->sq, attr->state);
    if (rc == URMA_SUCCESS)
        atomic_store(&j->sh->qstate, atomic_load(&j->sq.state));
    return rc;
}

SUB_API urma_status_t urma_query_jetty(urma_jetty_t *jetty, urma_jetty_cfg_t *cfg,
                                       urma_jetty_attr_t *attr)
{
    if (jetty == NULL || cfg == NULL || attr == NULL)
        return URMA_EINVAL;
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL)
        return URMA_EINVAL;
    *cfg = jetty->jetty_cfg;
    attr->mask = JETTY_STATE;
    attr->rx_threshold = 0;
    attr->state = (urma_jetty_state_t)atomic_load(&j->sq.state);
    return URMA_SUCCESS;
}

SUB_API int urma_flush_jetty(urma_jetty_t *jetty, int cr_cnt, urma_cr_t *cr)
{
    /* As urma_flush_jfs. */
    if (jetty == NULL || cr == NULL || cr_cnt <= 0)
        return -1;
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL)
        return -1;
    return softub__sq_flush(&j->sq, cr_cnt, cr);
}

SUB_API urma_status_t urma_post_jetty_send_wr(urma_jetty_t *jetty, urma_jfs_wr_t *wr,
                                              urma_jfs_wr_t **bad_wr)
{
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL || jetty->urma_ctx->dev == NULL || wr == NULL || bad_wr == NULL)
        return URMA_EINVAL;
    return softub__sq_post(&j->sq, wr, bad_wr);
}

SUB_API urma_status_t urma_post_jetty_recv_wr(urma_jetty_t *jetty, urma_jfr_wr_t *wr,
                                              urma_jfr_wr_t **bad_wr)
{
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL || jetty->urma_ctx->dev == NULL || wr == NULL || bad_wr == NULL)
        return URMA_EINVAL;
    return softub__rq_post(j->jfr, wr, bad_wr);
}

SUB_API urma_status_t urma_get_rjetty(urma_jetty_t *jetty, urma_rjetty_t **rjetty,
                                      uint32_t *length)
{
    if (jetty == NULL || rjetty == NULL || length == NULL ||
        jetty->jetty_cfg.shared.jfr == NULL)
        return URMA_EINVAL;
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL)
        return URMA_EINVAL;
    urma_rjetty_t *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return URMA_ENOMEM;
    r->jetty_id = jetty->jetty_id;
    r->trans_mode = jetty->jetty_cfg.jfs_cfg.trans_mode;
    /* Importable as it is: UTP under UM, RTP otherwise (§4.2's TP check). */
    r->tp_type = r->trans_mode == URMA_TM_UM ? URMA_UTP : URMA_RTP;
    r->policy = URMA_JETTY_GRP_POLICY_RR;
    r->type = URMA_JETTY;
    r->flag.bs.order_type = jetty->jetty_cfg.jfs_cfg.flag.bs.order_type;
    r->flag.bs.token_policy = jetty->jetty_cfg.shared.jfr->jfr_cfg.flag.bs.token_policy;
    *rjetty = r;
    *length = (uint32_t)sizeof(*r);
    return URMA_SUCCESS;
}

SUB_API void urma_put_rjetty(urma_rjetty_t *rjetty)
{
    free(rjetty);
}

/* ------------------------------------------------------------------------ */
/* Import                                                                    */
/* ------------------------------------------------------------------------ */

static void q_import_delay(urma_target_type_t type)
{
    softub__fault_sleep_us(softub__fault.import_delay_us,
                           type == URMA_JETTY ? "import_jetty" : "import_jfr");
}

/* Resolves a remote jetty/JFR id to its owner and descriptor. */
static urma_target_jetty_t *q_import(struct sub_ctx *c, const urma_jetty_id_t *rid,
                                     urma_target_type_t type, urma_transport_mode_t tm,
                                     urma_import_jetty_flag_t flag, urma_jetty_grp_policy_t policy,
                                     urma_tp_type_t tp_type, const urma_token_t *token)
{
    if (type != URMA_JETTY && type != URMA_JFR) {
        SUB_INFO("import: target type %d not supported\n", (int)type);
        errno = EINVAL;
        return NULL;
    }
    uint32_t want = type == URMA_JETTY ? SUB_T_JETTY : SUB_T_JFR;
    q_import_delay(type);
    struct sub_tjetty *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    struct sub_dir_id e;
    struct sub_peer *p = NULL;
    int err = EINVAL;
    if (softub__id_lookup(0, rid->id, &e) != 0 || e.type != want) {
        SUB_INFO("import: no %s with id %u on this fabric\n", type == URMA_JETTY ? "jetty" : "jfr",
                 rid->id);
        goto err_unlock;
    }
    p = softub__peer_get(e.slot, e.slot_gen);
    if (p == NULL || softub__peer_enter(p) != 0)
        goto err_unlock;
    struct sub_sobj *h = softub__peer_ptr(p, e.off, sizeof(struct sub_sjetty));
    int ok = h != NULL && atomic_load(&h->state) == SUB_OBJ_LIVE && h->gen == e.obj_gen &&
             h->type == want;
    if (ok) {
        uint32_t rtm;
        const urma_eid_t *reid;
        if (want == SUB_T_JETTY) {
            const struct sub_sjetty *sj = (const void *)h;
            rtm = sj->trans_mode;
            reid = &sj->eid;
        } else {
            const struct sub_sjfr *sr = (const void *)h;
            rtm = sr->trans_mode;
            reid = &sr->eid;
        }
        if (rtm != (uint32_t)tm) {
            SUB_INFO("import: trans_mode %d differs from the remote's %u\n", (int)tm, rtm);
            ok = 0;
        } else if (memcmp(reid, &rid->eid, sizeof(*reid)) != 0) {
            SUB_INFO("import: EID differs from the remote object's\n");
            ok = 0;
        }
    }
    softub__peer_leave(p);
    if (!ok)
        goto err_unlock;
    t->magic = SUB_MAGIC_TJ;
    t->ctx = c;
    t->peer = p;
    atomic_fetch_add(&p->imports, 1);
    t->obj_off = e.off;
    t->obj_gen = e.obj_gen;
    t->obj_type = want;
    t->token = token != NULL ? token->token : 0;
    t->token_valid = token != NULL && flag.bs.token_policy != URMA_TOKEN_NONE;
    urma_target_jetty_t *b = &t->base;
    b->urma_ctx = &c->base;
    b->id = *rid;
    b->handle = (uint64_t)(uintptr_t)b;
    b->trans_mode = tm;
    b->tp.tpn = c->tpn_next++;
    b->type = type;
    b->flag = flag;
    b->policy = policy;
    b->tp_type = tp_type;
    atomic_fetch_add(&c->base.ref, 1);
    pthread_mutex_unlock(&g->lock);
    return b;

err_unlock:
    pthread_mutex_unlock(&g->lock);
    free(t);
    errno = err;
    return NULL;
}

static urma_target_jetty_t *q_import_jetty(urma_context_t *ctx, urma_rjetty_t *rjetty,
                                           urma_token_t *token_value)
{
    if (ctx == NULL || ctx->dev == NULL || ctx->ops == NULL || rjetty == NULL ||
        !q_tm_valid(rjetty->trans_mode)) {
        errno = EINVAL;
        return NULL;
    }
    /* As liburma: these three refusals leave errno alone. */
    uint32_t ot = rjetty->flag.bs.order_type;
    if (q_check_order(rjetty->trans_mode, ot) != 0 ||
        q_convert_order(rjetty->trans_mode, &ot) != 0)
        return NULL;
    rjetty->flag.bs.order_type = ot;
    if (q_check_tp(rjetty->trans_mode, rjetty->tp_type) != 0)
        return NULL;
    /* A shared TP is for RC with target ordering only (§3.8); the fabric
     * has no TPs, so there it changes nothing. */
    if (rjetty->flag.bs.share_tp != 0 && (rjetty->trans_mode != URMA_TM_RC || ot != URMA_OT)) {
        SUB_INFO("Share TP is only for RC with target ordering\n");
        return NULL;
    }
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL || token_value == NULL) {
        errno = EINVAL;
        return NULL;
    }
    return q_import(c, &rjetty->jetty_id, rjetty->type, rjetty->trans_mode, rjetty->flag,
                    rjetty->policy, rjetty->tp_type, token_value);
}

SUB_API urma_target_jetty_t *urma_import_jetty(urma_context_t *ctx, urma_rjetty_t *rjetty,
                                               urma_token_t *token_value)
{
    return q_import_jetty(ctx, rjetty, token_value);
}

/* 25.12+: every argument is required. The configuration names the transport
 * paths to activate; the fabric has none, so it is not read. */
SUB_API urma_target_jetty_t *urma_import_jetty_ex(urma_context_t *ctx, urma_rjetty_t *rjetty,
                                                  urma_token_t *token_value,
                                                  urma_import_jetty_ex_cfg_t *cfg)
{
    if (cfg == NULL || token_value == NULL) {
        errno = EINVAL;
        return NULL;
    }
    return q_import_jetty(ctx, rjetty, token_value);
}

SUB_API urma_target_jetty_t *urma_import_jfr(urma_context_t *ctx, urma_rjfr_t *rjfr,
                                             urma_token_t *token_value)
{
    if (ctx == NULL || ctx->dev == NULL || ctx->ops == NULL || rjfr == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (rjfr->flag.bs.token_policy != URMA_TOKEN_NONE && token_value == NULL) {
        errno = EINVAL;
        return NULL;
    }
    uint32_t ot = rjfr->flag.bs.order_type;
    if (q_convert_order(rjfr->trans_mode, &ot) != 0) {
        errno = EINVAL;
        return NULL;
    }
    rjfr->flag.bs.order_type = ot;
    if (rjfr->flag.bs.share_tp != 0 && (rjfr->trans_mode != URMA_TM_RC || ot != URMA_OT))
        return NULL;
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL) {
        errno = EINVAL;
        return NULL;
    }
    return q_import(c, &rjfr->jfr_id, URMA_JFR, rjfr->trans_mode, rjfr->flag,
                    URMA_JETTY_GRP_POLICY_RR, rjfr->tp_type, token_value);
}

static urma_status_t q_unimport(urma_target_jetty_t *tj)
{
    if (tj == NULL)
        return URMA_EINVAL;
    struct sub_tjetty *t = softub__tjetty_check(tj);
    if (t == NULL || softub__ctx_check(tj->urma_ctx) == NULL)
        return URMA_EINVAL;
    if (atomic_load(&t->bound) > 0) {
        SUB_INFO("the RC target jetty %u is still bound\n", tj->id.id);
        return URMA_FAIL;
    }
    pthread_mutex_lock(&softub__g.lock);
    /* Checked again under the lock: of two threads unimporting the same
     * handle at once, the second gives nothing back (the context's
     * reference, the peer's import count, which lets the peer be freed). */
    if (__atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) != SUB_MAGIC_TJ) {
        pthread_mutex_unlock(&softub__g.lock);
        return URMA_EINVAL;
    }
    atomic_fetch_sub(&tj->urma_ctx->ref, 1);
    /* Atomic: a queued WR's retry reads it without the lock. */
    __atomic_store_n(&t->magic, SUB_MAGIC_DEAD, __ATOMIC_RELEASE);
    /* After the magic: a retry that finds it dead reads no more of the peer,
     * which may be freed once no import names it. */
    atomic_fetch_sub(&t->peer->imports, 1);
    tj->handle = 0;
    pthread_mutex_unlock(&softub__g.lock);
    softub__grave_pinned(t, &t->pins);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_unimport_jetty(urma_target_jetty_t *tjetty)
{
    return q_unimport(tjetty);
}

SUB_API urma_status_t urma_unimport_jfr(urma_target_jetty_t *target_jfr)
{
    return q_unimport(target_jfr);
}

/* ------------------------------------------------------------------------ */
/* RC bind, advise                                                           */
/* ------------------------------------------------------------------------ */

static urma_status_t q_bind_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty)
{
    if (jetty == NULL || tjetty == NULL)
        return URMA_EINVAL;
    if (softub__ctx_check(jetty->urma_ctx) == NULL)
        return URMA_EINVAL;
    struct sub_jetty *j = softub__jetty_check(jetty);
    struct sub_tjetty *t = softub__tjetty_check(tjetty);
    if (j == NULL || t == NULL)
        return URMA_EINVAL;
    if (jetty->jetty_cfg.jfs_cfg.trans_mode != URMA_TM_RC || tjetty->trans_mode != URMA_TM_RC) {
        SUB_INFO("Not allowed to bind local jetty=%u of mode=%d with remote jetty=%u of mode=%d\n",
                 jetty->jetty_id.id, (int)jetty->jetty_cfg.jfs_cfg.trans_mode, tjetty->id.id,
                 (int)tjetty->trans_mode);
        return URMA_ENOPERM;
    }
    if (jetty->jetty_cfg.jfs_cfg.flag.bs.order_type != tjetty->flag.bs.order_type)
        return URMA_ENOPERM;
    urma_status_t rc = URMA_SUCCESS;
    pthread_mutex_lock(&j->sq.lock);
    if (jetty->remote_jetty == tjetty) {
        rc = URMA_SUCCESS;
    } else if (jetty->remote_jetty != NULL) {
        rc = URMA_EEXIST;
    } else {
        jetty->remote_jetty = tjetty;
        j->sq.bound = t;
        atomic_fetch_add(&t->bound, 1);
    }
    pthread_mutex_unlock(&j->sq.lock);
    return rc;
}

SUB_API urma_status_t urma_bind_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty)
{
    return q_bind_jetty(jetty, tjetty);
}

/* 25.12+: as urma_bind_jetty, with a configuration that is required and,
 * as for urma_import_jetty_ex, not read. */
SUB_API urma_status_t urma_bind_jetty_ex(urma_jetty_t *jetty, urma_target_jetty_t *tjetty,
                                         urma_bind_jetty_ex_cfg_t *cfg)
{
    if (cfg == NULL)
        return URMA_EINVAL;
    return q_bind_jetty(jetty, tjetty);
}

SUB_API urma_status_t urma_unbind_jetty(urma_jetty_t *jetty)
{
    if (jetty == NULL || jetty->remote_jetty == NULL)
        return URMA_EINVAL;
    if (jetty->jetty_cfg.jfs_cfg.trans_mode != URMA_TM_RC)
        return URMA_ENOPERM;
    struct sub_jetty *j = softub__jetty_check(jetty);
    if (j == NULL || softub__ctx_check(jetty->urma_ctx) == NULL)
        return URMA_EINVAL;
    pthread_mutex_lock(&j->sq.lock);
    struct sub_tjetty *t = j->sq.bound;
    j->sq.bound = NULL;
    jetty->remote_jetty = NULL;
    if (t != NULL)
        atomic_fetch_sub(&t->bound, 1);
    pthread_mutex_unlock(&j->sq.lock);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_advise_jfr(urma_jfs_t *jfs, urma_target_jetty_t *tjfr)
{
    if (jfs == NULL || tjfr == NULL || jfs->jfs_cfg.trans_mode != URMA_TM_RM ||
        tjfr->trans_mode != URMA_TM_RM)
        return URMA_EINVAL;
    if (softub__ctx_check(jfs->urma_ctx) == NULL)
        return URMA_EINVAL;
    return URMA_SUCCESS; /* "UB JFS natively has the capability for one-to-many" */
}

SUB_API urma_status_t urma_unadvise_jfr(urma_jfs_t *jfs, urma_target_jetty_t *tjfr)
{
    if (jfs == NULL || tjfr == NULL || softub__ctx_check(jfs->urma_ctx) == NULL)
        return URMA_EINVAL;
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_advise_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty)
{
    if (jetty == NULL || tjetty == NULL || tjetty->trans_mode != URMA_TM_RM ||
        jetty->jetty_cfg.jfs_cfg.trans_mode != URMA_TM_RM)
        return URMA_EINVAL;
    if (softub__ctx_check(jetty->urma_ctx) == NULL)
        return URMA_EINVAL;
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_unadvise_jetty(urma_jetty_t *jetty, urma_target_jetty_t *tjetty)
{
    if (jetty == NULL || tjetty == NULL || softub__ctx_check(jetty->urma_ctx) == NULL)
        return URMA_EINVAL;
    return URMA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Single-SGE helpers (liburma builds them on post_jfs_wr / post_jfr_wr)     */
/* ------------------------------------------------------------------------ */

/* urma_write and urma_read: one local and one remote SGE of len bytes. For
 * WRITE rw.src is local and rw.dst remote; for READ the other way round,
 * which the caller's (dst, src) arguments already express. */
static urma_status_t sub_post_rw(urma_jfs_t *jfs, urma_opcode_t opcode,
                                 urma_target_jetty_t *target_jfr, urma_target_seg_t *dst_tseg,
                                 urma_target_seg_t *src_tseg, uint64_t dst, uint64_t src,
                                 uint32_t len, urma_jfs_wr_flag_t flag, uint64_t user_ctx)
{
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL || jfs->jfs_cfg.jfc == NULL || target_jfr == NULL || dst_tseg == NULL)
        return URMA_EINVAL;
    urma_sge_t src_sge = {.addr = src, .len = len, .tseg = src_tseg};
    urma_sge_t dst_sge = {.addr = dst, .len = len, .tseg = dst_tseg};
    urma_jfs_wr_t wr;
    memset(&wr, 0, sizeof(wr));
    urma_jfs_wr_t *bad = NULL;
    wr.opcode = opcode;
    wr.flag = flag;
    wr.user_ctx = user_ctx;
    wr.rw.src.num_sge = 1;
    wr.rw.src.sge = &src_sge;
    wr.rw.dst.num_sge = 1;
    wr.rw.dst.sge = &dst_sge;
    wr.tjetty = target_jfr;
    return softub__sq_post(&j->sq, &wr, &bad);
}

SUB_API urma_status_t urma_write(urma_jfs_t *jfs, urma_target_jetty_t *target_jfr,
                                 urma_target_seg_t *dst_tseg, urma_target_seg_t *src_tseg,
                                 uint64_t dst, uint64_t src, uint32_t len,
                                 urma_jfs_wr_flag_t flag, uint64_t user_ctx)
{
    return sub_post_rw(jfs, URMA_OPC_WRITE, target_jfr, dst_tseg, src_tseg, dst, src, len, flag,
                       user_ctx);
}

SUB_API urma_status_t urma_read(urma_jfs_t *jfs, urma_target_jetty_t *target_jfr,
                                urma_target_seg_t *dst_tseg, urma_target_seg_t *src_tseg,
                                uint64_t dst, uint64_t src, uint32_t len, urma_jfs_wr_flag_t flag,
                                uint64_t user_ctx)
{
    /* All pointers are required for READ. */
    if (src_tseg == NULL) return URMA_EINVAL;
    return sub_post_rw(jfs, URMA_OPC_READ, target_jfr, dst_tseg, src_tseg, dst, src, len, flag,
                       user_ctx);
}

SUB_API urma_status_t urma_send(urma_jfs_t *jfs, urma_target_jetty_t *target_jfr,
                                urma_target_seg_t *src_tseg, uint64_t src, uint32_t len,
                                urma_jfs_wr_flag_t flag, uint64_t user_ctx)
{
    if (target_jfr == NULL || target_jfr->urma_ctx == NULL || target_jfr->urma_ctx->dev == NULL)
        return URMA_EINVAL;
    struct sub_jfs *j = softub__jfs_check(jfs);
    if (j == NULL || jfs->jfs_cfg.jfc == NULL)
        return URMA_EINVAL;
    if (flag.bs.inline_flag == URMA_INLINE_DISABLE && src_tseg == NULL)
        return URMA_EINVAL;
    urma_sge_t src_sge = {.addr = src, .len = len, .tseg = src_tseg};
    urma_jfs_wr_t wr;
    memset(&wr, 0, sizeof(wr));
    urma_jfs_wr_t *bad = NULL;
    wr.opcode = URMA_OPC_SEND;
    wr.flag = flag;
    wr.user_ctx = user_ctx;
    wr.send.src.num_sge = 1;
    wr.send.src.sge = &src_sge;
    wr.tjetty = target_jfr;
    return softub__sq_post(&j->sq, &wr, &bad);
}

SUB_API urma_status_t urma_recv(urma_jfr_t *jfr, urma_target_seg_t *recv_tseg, uint64_t buf,
                                uint32_t len, uint64_t user_ctx)
{
    struct sub_jfr *j = softub__jfr_check(jfr);
    if (j == NULL || jfr->jfr_cfg.jfc == NULL || recv_tseg == NULL)
        return URMA_EINVAL;
    if (buf == 0)
        return URMA_FAIL;
    urma_sge_t sge = {.addr = buf, .len = len, .tseg = recv_tseg};
    urma_jfr_wr_t wr;
    memset(&wr, 0, sizeof(wr));
    urma_jfr_wr_t *bad = NULL;
    wr.user_ctx = user_ctx;
    wr.src.sge = &sge;
    wr.src.num_sge = 1;
    urma_status_t st = softub__rq_post(j, &wr, &bad);
    /* A WR the check refuses is URMA_FAIL here (§2.4), not the post's EINVAL. */
    return st == URMA_EINVAL ? URMA_FAIL : st;
}
