/* softub_post.c: the data path ("the hardware") and the progress thread.
 *
 * A post executes its WRs in order, synchronously in the poster's thread,
 * while the send queue has nothing pending: the bytes move (memcpy within a
 * process or through a mapped backing file, process_vm_readv/writev
 * otherwise), the target's receive CR is pushed into its JFC, then the
 * initiator CR into ours. No system call happens on that path when the
 * target JFC is not armed and the memory is file-backed or local.
 *
 * A WR that cannot complete now (RNR: no receive posted; SOFTUB_DELAY_US)
 * is copied into the send queue's pending list, and every later WR of that
 * queue waits behind it. The per-process progress thread retries the head
 * after the target JFR's min_rnr_timer, at most rnr_retry times (7 =
 * forever), checks once a second that the processes it talks to are alive,
 * and turns WRs to dead peers into error CRs.
 *
 * Every check a target would make is made before the first byte moves
 * (range, access bits, tokens, registration generation, liveness); a
 * violation completes the WR with an error CR and moves nothing.
 *
 * Send queue slots are freed when a CR at or after the WR is polled (as
 * UDMA advances its SQ consumer index from polled CQEs), so more
 * outstanding WRs than jfs depth get URMA_ENOMEM with bad_wr. */
#include <errno.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <signal.h>
#include <unistd.h>

#include "softub_internal.h"

enum { X_DONE = 0, X_RETRY = 1 };
#define X_CR_NONE 0xffffffffu /* no initiator CR (unsignalled success) */

struct sub_lsge {
    uint64_t addr;
    uint32_t len;
    uint32_t reserved;
    struct sub_tseg *tseg;
};

struct sub_wr {
    struct sub_wr *next;
    uint64_t seq;
    uint64_t user_ctx;
    uint32_t opcode;
    urma_jfs_wr_flag_t flag;
    struct sub_tjetty *tj;
    uint32_t nl;
    uint32_t inl; /* payload is inline: no local segment checks */
    uint64_t total;
    struct sub_lsge l[SUB_MAX_JFS_SGE];
    uint64_t raddr;
    struct sub_tseg *rseg;
    uint64_t imm;
    uint64_t cmp;
    uint64_t swp;
    uint32_t alen;
    uint32_t rnr_tries;
    uint64_t due_ns;
    uint64_t rnr_ns;
    uint8_t inl_buf[SUB_MAX_INLINE];
};

/* A window of target memory, resolved: direct pointer, or pid + address. */
struct sub_mref {
    uint8_t *ptr;
    pid_t pid;
    uint64_t raddr;
    uint64_t len;
};

static uint64_t prog_run_sq(struct sub_sq *sq, uint64_t now);

/* Appendix B of the fact sheet: min_rnr_timer code -> microseconds. */
static const uint32_t post_rnr_us[32] = {
    655360, 10,    20,    30,    40,    60,    80,     120,    160,    240,    320,
    480,    640,   960,   1280,  1920,  2560,  3840,   5120,   7680,   10240,  15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

/* ------------------------------------------------------------------------ */
/* Memory movement                                                           */
/* ------------------------------------------------------------------------ */

static int post_pvm_errno(int e)
{
    return e == ESRCH ? URMA_CR_ACK_TIMEOUT_ERR : URMA_CR_REM_ACCESS_ABORT_ERR;
}

/* Gathers the local SGEs (pointers in this process) into the destination
 * windows, in order. */
static int post_copy_out(const struct sub_lsge *src, uint32_t nsrc, const struct sub_mref *dst,
                         uint32_t ndst, uint64_t total)
{
    uint32_t si = 0;
    uint64_t soff = 0, left = total;
    for (uint32_t di = 0; di < ndst && left > 0; di++) {
        uint64_t dlen = dst[di].len < left ? dst[di].len : left;
        if (dst[di].ptr != NULL) {
            uint64_t doff = 0;
            while (doff < dlen) {
                while (si < nsrc && soff == src[si].len) {
                    si++;
                    soff = 0;
                }
                if (si == nsrc)
                    return URMA_CR_LOC_LEN_ERR;
                uint64_t n = src[si].len - soff;
                if (n > dlen - doff)
                    n = dlen - doff;
                memcpy(dst[di].ptr + doff, (const uint8_t *)(uintptr_t)src[si].addr + soff, n);
                soff += n;
                doff += n;
            }
        } else {
            struct iovec liov[SUB_MAX_JFS_SGE + 1];
            int nl = 0;
            uint64_t doff = 0;
            while (doff < dlen) {
                while (si < nsrc && soff == src[si].len) {
                    si++;
                    soff = 0;
                }
                if (si == nsrc || nl == SUB_MAX_JFS_SGE + 1)
                    return URMA_CR_LOC_LEN_ERR;
                uint64_t n = src[si].len - soff;
                if (n > dlen - doff)
                    n = dlen - doff;
                liov[nl].iov_base = (uint8_t *)(uintptr_t)src[si].addr + soff;
                liov[nl].iov_len = n;
                nl++;
                soff += n;
                doff += n;
            }
            struct iovec riov = {(void *)(uintptr_t)dst[di].raddr, dlen};
            ssize_t w = process_vm_writev(dst[di].pid, liov, (unsigned long)nl, &riov, 1, 0);
            if (w != (ssize_t)dlen)
                return post_pvm_errno(w < 0 ? errno : EFAULT);
        }
        left -= dlen;
    }
    return left == 0 ? URMA_CR_SUCCESS : URMA_CR_LOC_LEN_ERR;
}

/* Scatters one source window into the local SGEs. */
static int post_copy_in(const struct sub_mref *src, const struct sub_lsge *dst, uint32_t ndst)
{
    if (src->ptr != NULL) {
        uint64_t off = 0;
        for (uint32_t i = 0; i < ndst; i++) {
            memcpy((void *)(uintptr_t)dst[i].addr, src->ptr + off, dst[i].len);
            off += dst[i].len;
        }
        return URMA_CR_SUCCESS;
    }
    struct iovec liov[SUB_MAX_JFS_SGE];
    for (uint32_t i = 0; i < ndst; i++) {
        liov[i].iov_base = (void *)(uintptr_t)dst[i].addr;
        liov[i].iov_len = dst[i].len;
    }
    struct iovec riov = {(void *)(uintptr_t)src->raddr, src->len};
    ssize_t r = process_vm_readv(src->pid, liov, ndst, &riov, 1, 0);
    if (r != (ssize_t)src->len)
        return post_pvm_errno(r < 0 ? errno : EFAULT);
    return URMA_CR_SUCCESS;
}

/* Resolves [addr, addr+len) of segment entry ss owned by p. */
static void post_window(struct sub_peer *p, const struct sub_sseg *ss, uint8_t *map_base,
                        uint64_t addr, uint64_t len, struct sub_mref *m)
{
    m->len = len;
    m->ptr = NULL;
    m->pid = p->pid;
    m->raddr = addr;
    if (p->self) {
        m->ptr = (uint8_t *)(uintptr_t)addr;
        return;
    }
    if (ss->kind != SUB_MEM_FD)
        return;
    uint64_t foff = ss->file_off + (addr - ss->va);
    if (map_base == NULL)
        map_base = softub__peer_map(p, ss, ss->file_off + ss->len);
    if (map_base != NULL)
        m->ptr = map_base + foff;
}

/* The target-side checks on a remote segment access. */
static int post_rseg(struct sub_tseg *ts, uint64_t addr, uint64_t len, uint32_t need,
                     struct sub_mref *m, struct sub_sseg **ssp)
{
    struct sub_peer *p = ts->peer;
    if (p == NULL)
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if (atomic_load(&p->dead))
        return URMA_CR_ACK_TIMEOUT_ERR;
    struct sub_sseg *ss = softub__seg_entry(p, ts->seg_idx), snap;
    if (!softub__seg_snap(ss, ts->seg_gen, &snap))
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if (addr < snap.va || addr - snap.va > snap.len || len > snap.len - (addr - snap.va))
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if ((snap.access & need) != need || (snap.access & URMA_ACCESS_LOCAL_ONLY))
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if (snap.token_policy != URMA_TOKEN_NONE && (!ts->token_valid || ts->token != snap.token_value))
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if (atomic_load_explicit(&snap.revoked, memory_order_relaxed) == ts->seg_gen)
        return URMA_CR_REM_ACCESS_ABORT_ERR; /* a SEND_INVALIDATE named its token id */
    post_window(p, &snap, ts->map_base, addr, len, m);
    if (ssp != NULL)
        *ssp = ss;
    return URMA_CR_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Targets                                                                   */
/* ------------------------------------------------------------------------ */

#define SUB_RQE_HOLD_MAX 4096u

struct sub_target {
    struct sub_peer *p;
    struct sub_sjfr *jfr;
    struct sub_sjfc *jfc;
    struct sub_ring *rq;
    uint32_t local_id;
    int is_jetty;
    uint64_t user_ptr;
    uint64_t rq_pos;  /* the receive WR taken and not yet released */
    int rq_held;
    struct sub_rqe *rq_q; /* its ring entry (taker set until the CR is written) */
};

static struct sub_ring *post_peer_ring(struct sub_peer *p, uint64_t off, uint32_t esize_min)
{
    struct sub_ring *r = softub__peer_ptr(p, off, sizeof(struct sub_ring));
    if (r == NULL || r->magic != SUB_RING_MAGIC || r->cap == 0 || (r->cap & (r->cap - 1)) != 0 ||
        r->mask != r->cap - 1 || r->esize < esize_min || softub__peer_ptr(p, off, sub_ring_bytes(r->cap, r->esize)) == NULL)
        return NULL;
    return r;
}

/* SOFTUB_DIE_ON_TAKE_IMM: a SEND_IMM whose immediate is the knob's value +
 * step kills this process here, mid-message, as by kill -9 (no exit path
 * runs). SOFTUB_STOP_ON_TAKE_IMM: stops it here (SIGSTOP) instead; it goes
 * on where it stopped once continued. */
static void post_take_fault(const struct sub_wr *w, uint64_t step)
{
    if (w->opcode != URMA_OPC_SEND_IMM)
        return;
    if (softub__fault.stop_on_take_imm != 0 && w->imm == softub__fault.stop_on_take_imm + step) {
        kill(getpid(), SIGSTOP);
        return;
    }
    if (softub__fault.die_on_take_imm == 0 || w->imm != softub__fault.die_on_take_imm + step)
        return;
    kill(getpid(), SIGKILL);
    for (;;)
        pause();
}

__thread int softub__fault_step = -1;
__thread int softub__fault_stops;

void softub__fault_hit(void)
{
    if (softub__fault_stops) {
        kill(getpid(), SIGSTOP);
        return;
    }
    kill(getpid(), SIGKILL);
    for (;;)
        pause();
}

/* The step inside the CR push that w's immediate names for a knob whose
 * value is base, or -1. */
static int post_push_step(const struct sub_wr *w, uint64_t base)
{
    if (base == 0 || w->opcode != URMA_OPC_SEND_IMM || w->imm < base + SUB_DIE_CR_CLAIMED ||
        w->imm > base + SUB_DIE_DISARMED)
        return -1;
    return (int)(w->imm - base);
}

/* Sets this thread's fault step for w's push (SOFTUB_DIE_ON_TAKE_IMM first). */
static void post_push_fault(const struct sub_wr *w)
{
    int die = post_push_step(w, softub__fault.die_on_take_imm);
    int stop = post_push_step(w, softub__fault.stop_on_take_imm);
    softub__fault_step = die >= 0 ? die : stop;
    softub__fault_stops = die < 0 && stop >= 0;
}

/* The receive side of a target jetty/JFR; called inside peer_enter. */
static int post_target(struct sub_tjetty *tj, struct sub_target *t)
{
    struct sub_peer *p = tj->peer;
    t->p = p;
    t->rq_held = 0;
    struct sub_sobj *h = softub__peer_ptr(p, tj->obj_off, sizeof(struct sub_sjetty));
    if (h == NULL || atomic_load(&h->state) != SUB_OBJ_LIVE || h->gen != tj->obj_gen)
        return URMA_CR_ACK_TIMEOUT_ERR; /* the target is gone: nobody answers */
    uint64_t jfc_off;
    if (tj->obj_type == SUB_T_JETTY) {
        struct sub_sjetty *sj = (struct sub_sjetty *)h;
        if (atomic_load(&sj->qstate) != URMA_JETTY_STATE_READY)
            return URMA_CR_ACK_TIMEOUT_ERR;
        t->jfr = softub__peer_ptr(p, sj->jfr_off, sizeof(struct sub_sjfr));
        jfc_off = sj->rx_jfc_off;
        t->local_id = sj->h.id;
        t->is_jetty = 1;
        t->user_ptr = sj->user_ptr;
    } else {
        t->jfr = (struct sub_sjfr *)h;
        jfc_off = t->jfr->jfc_off;
        t->local_id = t->jfr->h.id;
        t->is_jetty = 0;
        t->user_ptr = t->jfr->user_ptr;
    }
    if (t->jfr == NULL || atomic_load(&t->jfr->h.state) != SUB_OBJ_LIVE ||
        atomic_load(&t->jfr->qstate) != URMA_JFR_STATE_READY)
        return URMA_CR_ACK_TIMEOUT_ERR;
    t->jfc = softub__peer_ptr(p, jfc_off, sizeof(struct sub_sjfc));
    t->rq = post_peer_ring(p, t->jfr->ring_off, (uint32_t)(8 + sizeof(struct sub_rqe)));
    if (t->jfc == NULL || t->rq == NULL)
        return URMA_CR_ACK_TIMEOUT_ERR;
    /* Tokens: carried only when imported with a policy; checked when the
     * JFR has one. */
    if (t->jfr->token_policy != URMA_TOKEN_NONE &&
        (!tj->token_valid || tj->token != t->jfr->token_value))
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    return URMA_CR_SUCCESS;
}

/* Pops one receive WR (copied out of the ring). */
static void post_release_rqe(struct sub_target *t);

static int post_take_rqe(struct sub_target *t, const struct sub_wr *w, struct sub_rqe *out,
                         struct sub_rqe_sge *sges, uint64_t total)
{
    if (softub__fault.force_rnr)
        return -1;
    uint64_t pos;
    struct sub_rqe *q = sub_ring_deq_begin(t->rq, &pos);
    if (q == NULL)
        return -1;
    post_take_fault(w, 2); /* claimed, not yet marked as ours */
    uint32_t maxs = (t->rq->esize - 8 - (uint32_t)sizeof(struct sub_rqe)) /
                    (uint32_t)sizeof(struct sub_rqe_sge);
    *out = *q;
    if (out->nsge > maxs || out->nsge > SUB_MAX_JFR_SGE)
        out->nsge = 0;
    memcpy(sges, q->sge, out->nsge * sizeof(*sges));
    /* The entry is ours until the CR: nobody writes it before then (the
     * owner's shadow stays POSTED until the CR is polled). */
    __atomic_store_n(&q->taker, (uint32_t)softub__g.self->pid, __ATOMIC_RELAXED);
    t->rq_q = q;
    t->rq_pos = pos;
    t->rq_held = 1;
    if (total > SUB_RQE_HOLD_MAX)
        post_release_rqe(t);
    return 0;
}

/* Frees the taken receive WR's slot. Deferred past the payload and the CR
 * for small messages: the store invalidates the receiver's copy of the
 * slot, and the locked instructions of the CR push would otherwise wait for
 * it. Large copies free it first, so that the owner's post_recv never waits
 * long for a held slot. */
static void post_release_rqe(struct sub_target *t)
{
    if (t->rq_held) {
        t->rq_held = 0;
        sub_ring_deq_commit(t->rq, t->rq_pos);
    }
}

/* After a SEND consumed receive WR k of a target: read receive WR k+1 and,
 * when it is already posted into memory we reach directly and the next SEND
 * is expected to write it (bufs: this one was too large to travel in the
 * CR), take the first lines of its buffer for writing, so the next SEND to
 * this target finds both local. Only hints: nothing is claimed, nothing can
 * fault. */
static void post_warm_next(struct sub_target *t, int bufs)
{
    struct sub_ring *r = t->rq;
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    _Atomic uint64_t *seq = sub_ring_seq(r, pos);
    __builtin_prefetch((const void *)seq, 0, 3);
    if (!bufs || atomic_load_explicit(seq, memory_order_acquire) != pos + 1)
        return;
    const struct sub_rqe *q = (const struct sub_rqe *)((const uint8_t *)seq + 8);
    if (q->nsge == 0 || r->esize < 8 + sizeof(struct sub_rqe) + sizeof(struct sub_rqe_sge))
        return;
    struct sub_rqe_sge s = q->sge[0];
    struct sub_sseg *ss = softub__seg_entry(t->p, s.seg_idx);
    if (ss == NULL || atomic_load_explicit(&ss->state, memory_order_relaxed) != SUB_SEG_REG ||
        s.addr < ss->va || s.addr - ss->va > ss->len || s.len > ss->len - (s.addr - ss->va))
        return;
    const uint8_t *ptr = NULL;
    if (t->p->self) {
        ptr = (const uint8_t *)(uintptr_t)s.addr;
    } else if (ss->kind == SUB_MEM_FD) {
        uint8_t *base = softub__peer_map_find(t->p, ss->dev, ss->ino, ss->file_off + ss->len);
        if (base != NULL)
            ptr = base + ss->file_off + (s.addr - ss->va);
    }
    if (ptr == NULL)
        return;
    uint32_t n = s.len < 256 ? s.len : 256;
    for (uint32_t off = 0; off < n; off += 64)
        __builtin_prefetch(ptr + off, 1, 3);
}

/* inl: the payload (len bytes) travels in the CR instead of the buffer. */
static void post_recv_cr(struct sub_sq *sq, struct sub_wr *w, struct sub_target *t,
                         const struct sub_rqe *rqe, uint32_t status, uint32_t opcode, uint32_t len,
                         const void *inl)
{
    struct sub_cqe e;
    memset(&e, 0, sizeof(e));
    urma_cr_flag_t fl = {.value = 0};
    fl.bs.s_r = 1;
    fl.bs.jetty = t->is_jetty ? 1 : 0;
    e.status = status;
    e.opcode = opcode;
    e.user_ctx = rqe->user_ctx;
    e.len = len;
    e.local_id = t->local_id;
    e.remote_id = (sq->id & 0xffffu) | (t->jfr->h.id & 0xffffu) << 16;
    e.flag = fl.value;
    e.solicited = w->flag.bs.solicited_enable || status != URMA_CR_SUCCESS;
    e.remote_eid = sq->eid;
    e.imm = w->imm;
    e.tpn = w->tj->base.tp.tpn;
    e.rq_pos = (uint32_t)t->rq_pos;
    if (inl != NULL)
        e.flag |= SUB_CQE_F_INLINE;
    /* The CR slot is claimed, its claim record naming this process and the
     * WR, before the WR is marked: a receiver that finds the slot never
     * written (this process died before the CR) undoes the mark through the
     * record (softub__rq_cr_lost), and a WR not marked yet serves again
     * anyway (post_rq_recover). */
    int faults = softub__fault.die_on_take_imm != 0 || softub__fault.stop_on_take_imm != 0;
    if (faults)
        post_push_fault(w);
    struct sub_cq_claim c;
    uint64_t note = (uint64_t)(t->jfr->h.id & 0xffffu) << 32 | (uint32_t)t->rq_pos;
    int claimed = softub__cq_claim(t->p, t->jfc, note, &c) == 0;
    /* From here the WR comes back to its owner through this CR (dropped
     * when the JFC overflowed: that JFC is in error). */
    __atomic_store_n(&t->rq_q->taker, (uint32_t)softub__g.self->pid | SUB_TAKER_CR,
                     __ATOMIC_RELEASE);
    if (claimed) {
        softub__fault_at(SUB_DIE_CR_MARKED);
        softub__cq_publish(&c, &e, inl);
    }
    if (faults)
        softub__fault_step = -1;
    post_take_fault(w, 1); /* after the CR, before the release */
    post_release_rqe(t);
}

/* ------------------------------------------------------------------------ */
/* Executing one WR                                                          */
/* ------------------------------------------------------------------------ */

static int post_local_ok(const struct sub_wr *w)
{
    if (w->inl)
        return 1;
    for (uint32_t i = 0; i < w->nl; i++) {
        if (w->l[i].len != 0 && softub__local_range(w->l[i].tseg, w->l[i].addr, w->l[i].len) != 0)
            return 0;
    }
    return 1;
}

static uint32_t post_um_drop(void)
{
    uint32_t ppm = softub__fault.um_drop_ppm;
    if (ppm == 0)
        return 0;
    static __thread uint64_t rng;
    uint64_t x = rng;
    if (x == 0)
        x = softub__now_ns() ^ ((uint64_t)(uintptr_t)&rng << 16) ^ 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng = x;
    return (x % 1000000u) < ppm;
}

static int post_exec_send_rm(struct sub_sq *sq, struct sub_wr *w, uint32_t *len);

/* UM is unreliable: whatever goes wrong beyond the initiator is lost on the
 * wire and the initiator sees success. */
static int post_exec_send(struct sub_sq *sq, struct sub_wr *w, uint32_t *len)
{
    int st = post_exec_send_rm(sq, w, len);
    if (sq->cfg.trans_mode == URMA_TM_UM && st > 0 && st != URMA_CR_LOC_ACCESS_ERR &&
        st != URMA_CR_LOC_LEN_ERR) {
        *len = (uint32_t)w->total;
        return URMA_CR_SUCCESS;
    }
    return st;
}

static int post_exec_send_rm(struct sub_sq *sq, struct sub_wr *w, uint32_t *len)
{
    struct sub_tjetty *tj = w->tj;
    if (softub__peer_enter(tj->peer) != 0)
        return URMA_CR_ACK_TIMEOUT_ERR;
    struct sub_target t;
    int st = post_target(tj, &t);
    if (st != URMA_CR_SUCCESS)
        goto out;
    if (!post_local_ok(w)) {
        st = URMA_CR_LOC_ACCESS_ERR;
        goto out;
    }
    if (w->total > SUB_MAX_MSG) {
        st = URMA_CR_LOC_LEN_ERR;
        goto out;
    }
    if (sq->cfg.trans_mode == URMA_TM_UM && post_um_drop()) {
        *len = (uint32_t)w->total;
        goto out; /* lost on the wire: the initiator cannot tell */
    }
    struct sub_rqe rqe;
    struct sub_rqe_sge rs[SUB_MAX_JFR_SGE];
    if (post_take_rqe(&t, w, &rqe, rs, w->total) != 0) {
        if (sq->cfg.trans_mode == URMA_TM_UM) {
            *len = (uint32_t)w->total; /* UM: dropped silently */
            goto out;
        }
        w->rnr_ns = (uint64_t)post_rnr_us[t.jfr->min_rnr_timer & 31] * 1000ull;
        softub__peer_leave(tj->peer);
        return -1;
    }
    post_take_fault(w, 0); /* before the data and the CR */
    uint32_t opc = w->opcode == URMA_OPC_SEND_IMM        ? URMA_CR_OPC_SEND_WITH_IMM
                   : w->opcode == URMA_OPC_SEND_INVALIDATE ? URMA_CR_OPC_SEND_WITH_INV
                                                           : URMA_CR_OPC_SEND;
    uint64_t room = 0;
    struct sub_mref dst[SUB_MAX_JFR_SGE];
    uint32_t nd = 0;
    int bad = 0;
    /* Small SENDs travel in the CR slot and the target's poll scatters them:
     * the buffer is then neither resolved nor touched here. */
    int inl = w->total <= SUB_CQE_INL_MAX &&
              (w->opcode == URMA_OPC_SEND || w->opcode == URMA_OPC_SEND_IMM);
    for (uint32_t i = 0; i < rqe.nsge; i++) {
        room += rs[i].len;
        struct sub_sseg snap;
        if (!softub__seg_snap(softub__seg_entry(t.p, rs[i].seg_idx), rs[i].seg_gen, &snap) ||
            rs[i].addr < snap.va || rs[i].addr - snap.va > snap.len ||
            rs[i].len > snap.len - (rs[i].addr - snap.va)) {
            bad = 1;
            continue;
        }
        if (!inl)
            post_window(t.p, &snap, NULL, rs[i].addr, rs[i].len, &dst[nd++]);
    }
    if (w->total > room) {
        post_recv_cr(sq, w, &t, &rqe, URMA_CR_LOC_LEN_ERR, opc, 0, NULL);
        st = URMA_CR_REM_OPERATION_ERR;
        goto out;
    }
    if (bad) {
        post_recv_cr(sq, w, &t, &rqe, URMA_CR_LOC_ACCESS_ERR, opc, 0, NULL);
        st = URMA_CR_REM_OPERATION_ERR;
        goto out;
    }
    if (inl) {
        uint8_t buf[SUB_CQE_INL_MAX];
        uint32_t off = 0;
        for (uint32_t i = 0; i < w->nl; i++) {
            memcpy(buf + off, (const void *)(uintptr_t)w->l[i].addr, w->l[i].len);
            off += w->l[i].len;
        }
        post_recv_cr(sq, w, &t, &rqe, URMA_CR_SUCCESS, opc, off, buf);
        *len = off;
        post_warm_next(&t, 0);
        goto out;
    }
    st = post_copy_out(w->l, w->nl, dst, nd, w->total);
    if (st != URMA_CR_SUCCESS) {
        post_recv_cr(sq, w, &t, &rqe, URMA_CR_LOC_ACCESS_ERR, opc, 0, NULL);
        if (st == URMA_CR_ACK_TIMEOUT_ERR)
            softub__peer_mark_dead(t.p);
        goto out;
    }
    if (w->opcode == URMA_OPC_SEND_INVALIDATE) {
        /* Before the CR: the receiver that sees it finds the token id
         * invalid already. */
        urma_cr_token_t tok;
        memcpy(&tok, &w->imm, sizeof(tok));
        softub__seg_revoke(t.p, tok.token_id);
    }
    post_recv_cr(sq, w, &t, &rqe, URMA_CR_SUCCESS, opc, (uint32_t)w->total, NULL);
    *len = (uint32_t)w->total;
    post_warm_next(&t, 1);
out:
    softub__peer_leave(tj->peer);
    return st;
}

/* The common start of a one-sided WR: local SGEs and length checked, the
 * segment's owner entered (left by the caller on success only) and the
 * remote range resolved with the access it needs. */
static int post_rw_begin(struct sub_wr *w, uint32_t access, struct sub_mref *m)
{
    struct sub_peer *sp = w->rseg->peer;
    if (sp == NULL)
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if (!post_local_ok(w))
        return URMA_CR_LOC_ACCESS_ERR;
    if (w->total > SUB_MAX_MSG)
        return URMA_CR_LOC_LEN_ERR;
    if (softub__peer_enter(sp) != 0)
        return URMA_CR_ACK_TIMEOUT_ERR;
    int st = post_rseg(w->rseg, w->raddr, w->total, access, m, NULL);
    if (st != URMA_CR_SUCCESS)
        softub__peer_leave(sp);
    return st;
}

static int post_exec_write(struct sub_sq *sq, struct sub_wr *w, uint32_t *len)
{
    struct sub_peer *sp = w->rseg->peer;
    struct sub_mref m;
    int st = post_rw_begin(w, URMA_ACCESS_WRITE, &m);
    if (st != URMA_CR_SUCCESS)
        return st;
    if (w->opcode == URMA_OPC_WRITE) {
        st = post_copy_out(w->l, w->nl, &m, 1, w->total);
        if (st == URMA_CR_ACK_TIMEOUT_ERR)
            softub__peer_mark_dead(sp);
        softub__peer_leave(sp);
        if (st == URMA_CR_SUCCESS)
            *len = (uint32_t)w->total;
        return st;
    }
    /* WRITE_IMM: the target jetty must take a receive WR before any byte
     * lands, so RNR moves nothing. */
    struct sub_tjetty *tj = w->tj;
    if (softub__peer_enter(tj->peer) != 0) {
        softub__peer_leave(sp);
        return URMA_CR_ACK_TIMEOUT_ERR;
    }
    struct sub_target t;
    struct sub_rqe rqe;
    struct sub_rqe_sge rs[SUB_MAX_JFR_SGE];
    st = post_target(tj, &t);
    if (st == URMA_CR_SUCCESS && post_take_rqe(&t, w, &rqe, rs, w->total) != 0) {
        w->rnr_ns = (uint64_t)post_rnr_us[t.jfr->min_rnr_timer & 31] * 1000ull;
        softub__peer_leave(tj->peer);
        softub__peer_leave(sp);
        return -1;
    }
    if (st == URMA_CR_SUCCESS) {
        st = post_copy_out(w->l, w->nl, &m, 1, w->total);
        if (st == URMA_CR_SUCCESS) {
            post_recv_cr(sq, w, &t, &rqe, URMA_CR_SUCCESS, URMA_CR_OPC_WRITE_WITH_IMM,
                         (uint32_t)w->total, NULL);
            *len = (uint32_t)w->total;
        } else {
            post_recv_cr(sq, w, &t, &rqe, URMA_CR_REM_ACCESS_ABORT_ERR, URMA_CR_OPC_WRITE_WITH_IMM,
                         0, NULL);
        }
    }
    softub__peer_leave(tj->peer);
    softub__peer_leave(sp);
    return st;
}

static int post_exec_read(struct sub_wr *w, uint32_t *len)
{
    struct sub_peer *sp = w->rseg->peer;
    struct sub_mref m;
    int st = post_rw_begin(w, URMA_ACCESS_READ, &m);
    if (st != URMA_CR_SUCCESS)
        return st;
    st = post_copy_in(&m, w->l, w->nl);
    if (st == URMA_CR_ACK_TIMEOUT_ERR)
        softub__peer_mark_dead(sp);
    softub__peer_leave(sp);
    if (st == URMA_CR_SUCCESS)
        *len = (uint32_t)w->total;
    return st;
}

/* Serialises process_vm atomics on one segment (lock word: holder's pid). */
static void post_alock(struct sub_sseg *ss)
{
    uint32_t me = (uint32_t)getpid();
    for (uint64_t spins = 0;; spins++) {
        uint32_t exp = 0;
        if (atomic_compare_exchange_weak(&ss->alock, &exp, me))
            return;
        if ((spins & 1023) == 1023 && exp != 0 && exp != me && !softub__pid_alive((pid_t)exp, 0))
            (void)atomic_compare_exchange_strong(&ss->alock, &exp, 0);
        if (spins > 64)
            usleep(1);
    }
}

/* Only if still ours: a holder found dead may have had the word taken over. */
static void post_aunlock(struct sub_sseg *ss)
{
    uint32_t me = (uint32_t)getpid();
    (void)atomic_compare_exchange_strong(&ss->alock, &me, 0);
}

static int post_exec_atomic(struct sub_wr *w, uint32_t *len)
{
    struct sub_peer *sp = w->rseg->peer;
    if (sp == NULL)
        return URMA_CR_REM_ACCESS_ABORT_ERR;
    if (!post_local_ok(w))
        return URMA_CR_LOC_ACCESS_ERR;
    if (w->raddr % w->alen != 0)
        return URMA_CR_REM_OPERATION_ERR;
    if (softub__peer_enter(sp) != 0)
        return URMA_CR_ACK_TIMEOUT_ERR;
    struct sub_mref m;
    struct sub_sseg *ss = NULL;
    int st = post_rseg(w->rseg, w->raddr, w->alen, URMA_ACCESS_ATOMIC, &m, &ss);
    uint64_t old = 0;
    /* Every URMA atomic on the segment holds its lock word, whichever way it
     * reaches the bytes: an initiator with the page mapped (or the owner)
     * uses a CPU atomic, one without (process_vm_*, or a file it could not
     * map) reads and writes, and the two must not interleave. */
    struct sub_sseg snap;
    if (st == URMA_CR_SUCCESS) {
        post_alock(ss);
        /* Still the registration checked above, now that no other atomic
         * runs: an entry re-registered meanwhile is not ours to change. */
        if (!softub__seg_snap(ss, w->rseg->seg_gen, &snap)) {
            post_aunlock(ss);
            st = URMA_CR_REM_ACCESS_ABORT_ERR;
        }
    }
    if (st == URMA_CR_SUCCESS && m.ptr != NULL) {
        if (w->alen == 8) {
            uint64_t *p = (uint64_t *)(void *)m.ptr;
            if (w->opcode == URMA_OPC_CAS) {
                old = w->cmp;
                (void)__atomic_compare_exchange_n(p, &old, w->swp, 0, __ATOMIC_SEQ_CST,
                                                  __ATOMIC_SEQ_CST);
            } else {
                old = __atomic_fetch_add(p, w->cmp, __ATOMIC_SEQ_CST);
            }
        } else {
            uint32_t *p = (uint32_t *)(void *)m.ptr;
            uint32_t o32 = (uint32_t)w->cmp;
            if (w->opcode == URMA_OPC_CAS)
                (void)__atomic_compare_exchange_n(p, &o32, (uint32_t)w->swp, 0, __ATOMIC_SEQ_CST,
                                                  __ATOMIC_SEQ_CST);
            else
                o32 = __atomic_fetch_add(p, (uint32_t)w->cmp, __ATOMIC_SEQ_CST);
            old = o32;
        }
        post_aunlock(ss);
    } else if (st == URMA_CR_SUCCESS) {
        uint64_t cur = 0, nv;
        struct iovec l = {&cur, w->alen}, r = {(void *)(uintptr_t)m.raddr, w->alen};
        if (process_vm_readv(m.pid, &l, 1, &r, 1, 0) != (ssize_t)w->alen) {
            st = post_pvm_errno(errno);
        } else {
            old = cur;
            int store = 1;
            if (w->opcode == URMA_OPC_CAS) {
                uint64_t mask = w->alen == 8 ? UINT64_MAX : 0xffffffffull;
                store = (cur & mask) == (w->cmp & mask);
                nv = w->swp;
            } else {
                nv = cur + w->cmp;
            }
            struct iovec l2 = {&nv, w->alen};
            if (store && process_vm_writev(m.pid, &l2, 1, &r, 1, 0) != (ssize_t)w->alen)
                st = post_pvm_errno(errno);
        }
        post_aunlock(ss);
        if (st == URMA_CR_ACK_TIMEOUT_ERR)
            softub__peer_mark_dead(sp);
    }
    softub__peer_leave(sp);
    if (st == URMA_CR_SUCCESS) {
        memcpy((void *)(uintptr_t)w->l[0].addr, &old, w->alen); /* little endian */
        *len = w->alen;
    }
    return st;
}

/* ------------------------------------------------------------------------ */
/* Completion                                                                */
/* ------------------------------------------------------------------------ */

static void post_initiator_cr(struct sub_sq *sq, struct sub_wr *w, uint32_t status, uint32_t len,
                              uint32_t cr_flag)
{
    struct sub_cqe e;
    memset(&e, 0, sizeof(e));
    urma_cr_flag_t fl = {.value = (uint8_t)cr_flag};
    fl.bs.jetty = sq->is_jetty ? 1 : 0;
    e.status = status;
    e.user_ctx = w != NULL ? w->user_ctx : 0;
    e.len = len;
    e.local_id = sq->id;
    e.flag = fl.value;
    e.solicited = status != URMA_CR_SUCCESS;
    if (w != NULL && w->tj != NULL) {
        e.remote_id = w->tj->base.id.id;
        e.remote_eid = w->tj->base.id.eid;
        e.tpn = w->tj->base.tp.tpn;
    }
    uint64_t seq = w != NULL ? w->seq : (sq->post_seq > 0 ? sq->post_seq - 1 : 0);
    if (w != NULL || sq->post_seq > 0)
        e.imm = (uint64_t)sub_uid32(sq->obj->uid) | (uint64_t)(uint32_t)seq << 32;
    (void)softub__cq_push(softub__g.self, sq->jfc->sh, &e, NULL);
}

static void post_flush_locked(struct sub_sq *sq);

static void post_complete(struct sub_sq *sq, struct sub_wr *w, uint32_t status, uint32_t len)
{
    if (status != URMA_CR_SUCCESS || w->flag.bs.complete_enable)
        post_initiator_cr(sq, w, status, status == URMA_CR_SUCCESS ? len : 0, 0);
    /* An RC connection whose peer died is broken: the jetty goes to ERROR
     * (its queued WRs are flushed) and the owner gets one async event. */
    if (status == URMA_CR_ACK_TIMEOUT_ERR && sq->cfg.trans_mode == URMA_TM_RC && w->tj != NULL &&
        atomic_load(&w->tj->peer->dead) &&
        atomic_load(&sq->state) == URMA_JETTY_STATE_READY) {
        atomic_store(&sq->state, URMA_JETTY_STATE_ERROR);
        post_flush_locked(sq);
        if (!atomic_exchange(&sq->obj->async_raised, 1))
            (void)softub__async_raise(softub__g.self, sq->ctx->sh_off,
                                      sq->is_jetty ? URMA_EVENT_JETTY_ERR : URMA_EVENT_JFS_ERR,
                                      sq->id, sq->obj->uid, sq->user_ptr);
    }
}

/* Executes w: X_DONE when its CR is written, X_RETRY when it must wait
 * (w->due_ns set). */
static int post_run(struct sub_sq *sq, struct sub_wr *w)
{
    uint32_t state = atomic_load(&sq->state);
    if (state == URMA_JETTY_STATE_ERROR || state == URMA_JETTY_STATE_SUSPENDED) {
        post_initiator_cr(sq, w, URMA_CR_WR_FLUSH_ERR, 0, 0);
        return X_DONE;
    }
    uint32_t ee = softub__fault.err_every;
    if (ee != 0 && w->rnr_tries == 0 && (atomic_fetch_add(&softub__g.wr_counter, 1) + 1) % ee == 0) {
        post_complete(sq, w, softub__fault.err_status, 0);
        return X_DONE;
    }
    uint32_t len = 0;
    int st;
    switch (w->opcode) {
    case URMA_OPC_NOP:
        st = URMA_CR_SUCCESS;
        break;
    case URMA_OPC_SEND:
    case URMA_OPC_SEND_IMM:
    case URMA_OPC_SEND_INVALIDATE:
        st = post_exec_send(sq, w, &len);
        break;
    case URMA_OPC_WRITE:
    case URMA_OPC_WRITE_IMM:
        st = post_exec_write(sq, w, &len);
        break;
    case URMA_OPC_READ:
        st = post_exec_read(w, &len);
        break;
    default:
        st = post_exec_atomic(w, &len);
        break;
    }
    if (st < 0) {
        uint8_t rr = sq->cfg.rnr_retry;
        if (rr == 0 || (rr != 7 && w->rnr_tries >= rr)) {
            post_complete(sq, w, URMA_CR_RNR_RETRY_CNT_EXC_ERR, 0);
            return X_DONE;
        }
        w->rnr_tries++;
        w->due_ns = softub__now_ns() + w->rnr_ns;
        return X_RETRY;
    }
    post_complete(sq, w, (uint32_t)st, len);
    return X_DONE;
}

/* ------------------------------------------------------------------------ */
/* Building WRs                                                              */
/* ------------------------------------------------------------------------ */

static int post_sgl(struct sub_wr *w, const urma_sg_t *sg, uint32_t max, int inl)
{
    if (sg->num_sge > max || (sg->num_sge > 0 && sg->sge == NULL))
        return -1;
    w->nl = sg->num_sge;
    w->total = 0;
    for (uint32_t i = 0; i < sg->num_sge; i++) {
        const urma_sge_t *s = &sg->sge[i];
        w->l[i].addr = s->addr;
        w->l[i].len = s->len;
        w->l[i].tseg = NULL;
        if (!inl && s->len != 0) {
            w->l[i].tseg = softub__tseg_check(s->tseg);
            if (w->l[i].tseg == NULL)
                return -1;
        }
        w->total += s->len;
    }
    return 0;
}

static int post_build(struct sub_sq *sq, urma_jfs_wr_t *wr, struct sub_wr *w)
{
    uint32_t max_sge = sq->cfg.max_sge < SUB_MAX_JFS_SGE ? sq->cfg.max_sge : SUB_MAX_JFS_SGE;
    urma_transport_mode_t tm = sq->cfg.trans_mode;
    w->next = NULL;
    w->user_ctx = wr->user_ctx;
    w->opcode = wr->opcode;
    w->flag = wr->flag;
    w->tj = NULL;
    w->nl = 0;
    w->total = 0;
    w->inl = 0;
    w->raddr = 0;
    w->rseg = NULL;
    w->imm = 0;
    w->cmp = 0;
    w->swp = 0;
    w->alen = 0;
    w->rnr_tries = 0;
    w->due_ns = 0;
    w->rnr_ns = 0;
    int one_sided = 0;
    switch (wr->opcode) {
    case URMA_OPC_SEND:
    case URMA_OPC_SEND_IMM:
    case URMA_OPC_SEND_INVALIDATE:
        w->inl = wr->flag.bs.inline_flag;
        if (post_sgl(w, &wr->send.src, max_sge, w->inl) != 0)
            return -1;
        if (wr->opcode == URMA_OPC_SEND_IMM)
            w->imm = wr->send.imm_data;
        if (wr->opcode == URMA_OPC_SEND_INVALIDATE) {
            struct sub_tseg *ts = softub__tseg_check(wr->send.tseg);
            if (ts == NULL)
                return -1;
            urma_cr_token_t tok = {.token_id = ts->base.seg.token_id,
                                   .token_value = {ts->token}};
            memcpy(&w->imm, &tok, sizeof(tok));
        }
        break;
    case URMA_OPC_WRITE:
    case URMA_OPC_WRITE_IMM: {
        one_sided = 1;
        uint32_t m = wr->opcode == URMA_OPC_WRITE_IMM && max_sge > SUB_MAX_WRITE_IMM_SGE
                         ? SUB_MAX_WRITE_IMM_SGE
                         : max_sge;
        w->inl = wr->flag.bs.inline_flag;
        if (post_sgl(w, &wr->rw.src, m, w->inl) != 0)
            return -1;
        if (wr->rw.dst.num_sge != 1 || wr->rw.dst.sge == NULL)
            return -1;
        w->rseg = softub__tseg_check(wr->rw.dst.sge[0].tseg);
        if (w->rseg == NULL)
            return -1; /* user_tseg (no import) is not supported */
        w->raddr = wr->rw.dst.sge[0].addr;
        if (wr->opcode == URMA_OPC_WRITE_IMM)
            w->imm = wr->rw.notify_data;
        break;
    }
    case URMA_OPC_READ: {
        one_sided = 1;
        uint32_t m = max_sge > SUB_MAX_READ_SGE ? SUB_MAX_READ_SGE : max_sge;
        if (post_sgl(w, &wr->rw.dst, m, 0) != 0)
            return -1;
        if (wr->rw.src.num_sge != 1 || wr->rw.src.sge == NULL)
            return -1;
        w->rseg = softub__tseg_check(wr->rw.src.sge[0].tseg);
        if (w->rseg == NULL)
            return -1;
        w->raddr = wr->rw.src.sge[0].addr;
        break;
    }
    case URMA_OPC_CAS:
    case URMA_OPC_FADD: {
        one_sided = 1;
        const urma_sge_t *dst = wr->opcode == URMA_OPC_CAS ? wr->cas.dst : wr->faa.dst;
        const urma_sge_t *src = wr->opcode == URMA_OPC_CAS ? wr->cas.src : wr->faa.src;
        if (dst == NULL || src == NULL || sq->cfg.max_sge == 0)
            return -1;
        /* The remote SGE's length is the operand size (§3.7); the local
         * SGE receives the old value and must hold it. 16-byte CAS is not
         * emulated. */
        if ((dst->len != 4 && dst->len != 8) || src->len < dst->len)
            return -1;
        w->alen = dst->len;
        w->rseg = softub__tseg_check(dst->tseg);
        w->l[0].tseg = softub__tseg_check(src->tseg);
        if (w->rseg == NULL || w->l[0].tseg == NULL)
            return -1;
        w->raddr = dst->addr;
        w->l[0].addr = src->addr;
        w->l[0].len = w->alen;
        w->nl = 1;
        w->total = w->alen;
        if (wr->opcode == URMA_OPC_CAS) {
            w->cmp = wr->cas.cmp_data;
            w->swp = wr->cas.swap_data;
        } else {
            w->cmp = wr->faa.operand;
        }
        break;
    }
    case URMA_OPC_NOP:
        return 0;
    default:
        return -1; /* SWAP, FSUB/FAND/FOR/FXOR, WRITE_NOTIFY, WRITE_ATOMIC, FLUSH_DMA */
    }
    if (w->inl && w->total > sq->max_inline)
        return -1;
    /* Neither UM nor a queue completing out of order keeps an order that
     * fence, place_order or comp_order could ask for (§4.2). */
    int ordered = wr->flag.bs.fence || wr->flag.bs.place_order || wr->flag.bs.comp_order;
    if (tm == URMA_TM_UM && (one_sided || ordered))
        return -1;
    if (sq->cfg.flag.bs.outorder_comp && ordered)
        return -1;
    if (tm == URMA_TM_RC) {
        w->tj = sq->bound; /* RC ignores wr->tjetty */
        if (w->tj == NULL)
            return -1;
    } else {
        w->tj = softub__tjetty_check(wr->tjetty);
        if (w->tj == NULL || w->tj->base.trans_mode != tm)
            return -1;
    }
    return 0;
}

/* A queued WR pins the target jetty and segments it names: an unimport or
 * unregister while it waits (RNR retries) leaves them to the graveyard until
 * it is gone, and its next run fails it (post_gone) instead of reading what
 * was freed. */
static void post_pin(struct sub_wr *w, int by)
{
    if (w->tj != NULL)
        atomic_fetch_add(&w->tj->pins, (uint32_t)by);
    if (w->rseg != NULL)
        atomic_fetch_add(&w->rseg->pins, (uint32_t)by);
    for (uint32_t i = 0; i < w->nl; i++)
        if (w->l[i].tseg != NULL)
            atomic_fetch_add(&w->l[i].tseg->pins, (uint32_t)by);
}

/* A queued WR leaves for good. */
static void post_wr_free(struct sub_wr *w)
{
    post_pin(w, -1);
    free(w);
}

static int post_tseg_gone(struct sub_tseg *t)
{
    return t != NULL && __atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) != SUB_MAGIC_TSEG;
}

/* The status a queued WR ends with because what it names was unimported or
 * unregistered meanwhile, or URMA_CR_SUCCESS. */
static uint32_t post_gone(const struct sub_wr *w)
{
    if (w->tj != NULL && __atomic_load_n(&w->tj->magic, __ATOMIC_ACQUIRE) != SUB_MAGIC_TJ)
        return URMA_CR_LOC_OPERATION_ERR;
    if (post_tseg_gone(w->rseg))
        return URMA_CR_LOC_ACCESS_ERR;
    for (uint32_t i = 0; i < w->nl; i++)
        if (post_tseg_gone(w->l[i].tseg))
            return URMA_CR_LOC_ACCESS_ERR;
    return URMA_CR_SUCCESS;
}

/* A heap copy of w that no longer refers to the caller's WR (inline data
 * included), pinning what it names. */
static struct sub_wr *post_clone(const struct sub_wr *w)
{
    struct sub_wr *q = malloc(sizeof(*q));
    if (q == NULL)
        return NULL;
    *q = *w;
    if (w->inl) {
        uint64_t off = 0;
        for (uint32_t i = 0; i < w->nl; i++) {
            memcpy(q->inl_buf + off, (const void *)(uintptr_t)w->l[i].addr, w->l[i].len);
            off += w->l[i].len;
        }
        q->nl = 1;
        q->l[0].addr = (uint64_t)(uintptr_t)q->inl_buf;
        q->l[0].len = (uint32_t)off;
        q->l[0].tseg = NULL;
    }
    q->next = NULL;
    post_pin(q, 1);
    return q;
}

/* ------------------------------------------------------------------------ */
/* Send queues                                                               */
/* ------------------------------------------------------------------------ */

int softub__sq_init(struct sub_sq *sq, struct sub_ctx *ctx, struct sub_jfc *jfc, struct sub_obj *obj,
                    uint32_t id, int is_jetty, uint64_t user_ptr, const urma_jfs_cfg_t *cfg)
{
    pthread_mutex_init(&sq->lock, NULL);
    sq->ctx = ctx;
    sq->jfc = jfc;
    sq->obj = obj;
    sq->id = id;
    sq->is_jetty = is_jetty;
    sq->user_ptr = user_ptr;
    sq->eid = ctx->base.eid;
    sq->cfg = *cfg;
    sq->max_inline = cfg->max_inline_data != 0 ? cfg->max_inline_data : SUB_MAX_INLINE;
    atomic_init(&sq->state, URMA_JETTY_STATE_READY);
    sq->post_seq = 0;
    atomic_init(&sq->done_seq, 0);
    return 0;
}

static void post_prog_unlink(struct sub_sq *sq)
{
    struct sub_prog *pg = &softub__g.prog;
    pthread_mutex_lock(&pg->mu);
    if (sq->prog_active) {
        for (struct sub_sq **pp = &pg->active; *pp != NULL; pp = &(*pp)->prog_next) {
            if (*pp == sq) {
                *pp = sq->prog_next;
                break;
            }
        }
        sq->prog_active = 0;
        atomic_fetch_sub(&pg->nactive, 1);
    }
    pthread_mutex_unlock(&pg->mu);
}

void softub__sq_fini(struct sub_sq *sq)
{
    pthread_mutex_lock(&sq->lock);
    post_prog_unlink(sq);
    struct sub_wr *w = sq->pend_head;
    sq->pend_head = sq->pend_tail = NULL;
    sq->npend = 0;
    pthread_mutex_unlock(&sq->lock);
    while (w != NULL) {
        struct sub_wr *n = w->next;
        post_wr_free(w);
        w = n;
    }
}

void softub__sq_retire(uint32_t id, uint32_t uid32, uint32_t wr_seq32)
{
    struct sub_obj *_Atomic *objs = softub__g.objs;
    if (objs == NULL || id >= SUB_MAX_QIDS)
        return;
    struct sub_obj *o = atomic_load_explicit(&objs[id], memory_order_acquire);
    if (o == NULL || sub_uid32(o->uid) != uid32 || (o->kind != SUB_T_JFS && o->kind != SUB_T_JETTY))
        return;
    struct sub_sq *sq = o->kind == SUB_T_JFS
                            ? &((struct sub_jfs *)((char *)o - offsetof(struct sub_jfs, obj)))->sq
                            : &((struct sub_jetty *)((char *)o - offsetof(struct sub_jetty, obj)))->sq;
    /* Outstanding WRs span less than a queue depth (<= 32768), so the low 32
     * bits of the sequence place it next to done_seq. */
    uint64_t cur = atomic_load(&sq->done_seq);
    uint64_t want = cur + (uint64_t)(int64_t)(int32_t)(wr_seq32 - (uint32_t)cur) + 1;
    while (want > cur && !atomic_compare_exchange_weak(&sq->done_seq, &cur, want))
        ;
}

/* Under sq->lock. The progress thread is woken only when the queue becomes
 * active: WRs queued behind an active head wait for it anyway. */
static void post_prog_activate(struct sub_sq *sq)
{
    struct sub_prog *pg = &softub__g.prog;
    int wake = 0;
    pthread_mutex_lock(&pg->mu);
    if (!sq->prog_active) {
        sq->prog_next = pg->active;
        pg->active = sq;
        sq->prog_active = 1;
        atomic_fetch_add(&pg->nactive, 1);
        wake = 1;
    }
    pthread_mutex_unlock(&pg->mu);
    if (wake)
        softub__doorbell_ring(softub__g.self);
}

static void post_enqueue(struct sub_sq *sq, struct sub_wr *q)
{
    if (sq->pend_tail != NULL)
        sq->pend_tail->next = q;
    else
        sq->pend_head = q;
    sq->pend_tail = q;
    sq->npend++;
}

urma_status_t softub__sq_post(struct sub_sq *sq, urma_jfs_wr_t *wr, urma_jfs_wr_t **bad_wr)
{
    urma_status_t rc = URMA_SUCCESS;
    struct sub_wr w;
    int kick = 0;
    uint32_t delay_us = softub__fault.delay_us;
    pthread_mutex_lock(&sq->lock);
    /* Due retries of this queue run here first, in the poster's thread. */
    if (sq->pend_head != NULL) {
        uint64_t now = softub__now_ns();
        if (sq->pend_head->due_ns <= now)
            (void)prog_run_sq(sq, now);
    }
    for (urma_jfs_wr_t *it = wr; it != NULL; it = it->next) {
        if (atomic_load(&sq->state) == URMA_JETTY_STATE_RESET || post_build(sq, it, &w) != 0) {
            rc = URMA_EINVAL;
            *bad_wr = it;
            break;
        }
        if (sq->post_seq - atomic_load(&sq->done_seq) >= sq->cfg.depth) {
            rc = URMA_ENOMEM;
            *bad_wr = it;
            break;
        }
        w.seq = sq->post_seq++;
        if (sq->pend_head == NULL && delay_us == 0) {
            if (post_run(sq, &w) == X_DONE)
                continue;
        } else {
            w.due_ns = delay_us != 0 ? softub__now_ns() + (uint64_t)delay_us * 1000ull : 0;
        }
        struct sub_wr *q = post_clone(&w);
        if (q == NULL) {
            /* Nothing moved yet (RNR or not started): refuse this WR. */
            sq->post_seq--;
            rc = URMA_ENOMEM;
            *bad_wr = it;
            break;
        }
        post_enqueue(sq, q);
        kick = 1;
    }
    if (kick)
        post_prog_activate(sq);
    pthread_mutex_unlock(&sq->lock);
    return rc;
}

/* Under sq->lock: WRs not yet completed get WR_FLUSH_ERR CRs, then one
 * hardware-constructed FLUSH_ERR_DONE CR. */
static void post_flush_locked(struct sub_sq *sq)
{
    struct sub_wr *w = sq->pend_head;
    sq->pend_head = sq->pend_tail = NULL;
    sq->npend = 0;
    while (w != NULL) {
        struct sub_wr *n = w->next;
        post_initiator_cr(sq, w, URMA_CR_WR_FLUSH_ERR, 0, 0);
        post_wr_free(w);
        w = n;
    }
    urma_cr_flag_t fl = {.value = 0};
    fl.bs.flush_err_done = 1;
    post_initiator_cr(sq, NULL, URMA_CR_WR_FLUSH_ERR_DONE, 0, fl.value);
}

urma_status_t softub__sq_modify(struct sub_sq *sq, urma_jetty_state_t to)
{
    if ((uint32_t)to > URMA_JETTY_STATE_ERROR)
        return URMA_FAIL;
    pthread_mutex_lock(&sq->lock);
    uint32_t cur = atomic_load(&sq->state);
    urma_status_t rc = URMA_SUCCESS;
    switch (to) {
    case URMA_JETTY_STATE_ERROR:
        atomic_store(&sq->state, URMA_JETTY_STATE_ERROR);
        if (cur != URMA_JETTY_STATE_ERROR)
            post_flush_locked(sq);
        break;
    case URMA_JETTY_STATE_RESET: {
        struct sub_wr *w = sq->pend_head;
        sq->pend_head = sq->pend_tail = NULL;
        sq->npend = 0;
        while (w != NULL) {
            struct sub_wr *n = w->next;
            post_wr_free(w);
            w = n;
        }
        atomic_store(&sq->state, URMA_JETTY_STATE_RESET);
        break;
    }
    case URMA_JETTY_STATE_READY:
        if (cur == URMA_JETTY_STATE_ERROR) {
            rc = URMA_FAIL; /* ERROR must go through RESET */
            break;
        }
        if (cur == URMA_JETTY_STATE_RESET) {
            /* A fresh queue: nothing outstanding any more. */
            atomic_store(&sq->done_seq, sq->post_seq);
            atomic_store(&sq->obj->async_raised, 0);
        }
        atomic_store(&sq->state, URMA_JETTY_STATE_READY);
        break;
    default:
        rc = URMA_FAIL; /* SUSPENDED is entered by the hardware only */
        break;
    }
    pthread_mutex_unlock(&sq->lock);
    return rc;
}

int softub__sq_flush(struct sub_sq *sq, int cr_cnt, urma_cr_t *cr)
{
    pthread_mutex_lock(&sq->lock);
    uint32_t st = atomic_load(&sq->state);
    int n = 0;
    if (st == URMA_JETTY_STATE_ERROR || st == URMA_JETTY_STATE_SUSPENDED) {
        while (n < cr_cnt && sq->pend_head != NULL) {
            struct sub_wr *w = sq->pend_head;
            sq->pend_head = w->next;
            if (sq->pend_head == NULL)
                sq->pend_tail = NULL;
            sq->npend--;
            urma_cr_t *c = &cr[n++];
            c->status = URMA_CR_WR_FLUSH_ERR;
            c->user_ctx = w->user_ctx;
            c->flag.value = 0;
            c->flag.bs.jetty = sq->is_jetty ? 1 : 0;
            c->completion_len = 0;
            c->local_id = sq->id;
            if (w->tj != NULL) {
                c->remote_id.eid = w->tj->base.id.eid;
                c->remote_id.id = w->tj->base.id.id;
                c->tpn = w->tj->base.tp.tpn;
            }
            c->user_data = (uintptr_t)sq->user_ptr;
            uint64_t want = w->seq + 1, cur = atomic_load(&sq->done_seq);
            if (cur < want)
                atomic_store(&sq->done_seq, want);
            post_wr_free(w);
        }
    }
    pthread_mutex_unlock(&sq->lock);
    return n;
}

/* ------------------------------------------------------------------------ */
/* Receive queues                                                            */
/* ------------------------------------------------------------------------ */

/* sub_ring_enq_begin, except that a slot whose shadow entry still holds a
 * WR of the previous lap (completed, CR not yet polled) is not claimed:
 * *held is then set. The check needs no lock: only the claimant of a
 * position writes its entry, and the previous lap's writer published it
 * before the ring handed the slot on. */
static struct sub_rqe *post_rq_claim(struct sub_jfr *jfr, uint64_t *pos_out, int *held)
{
    struct sub_ring *r = jfr->ring;
    uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    for (;;) {
        _Atomic uint64_t *seq = sub_ring_seq(r, pos);
        uint64_t s = atomic_load_explicit(seq, memory_order_acquire);
        int64_t dif = (int64_t)(s - pos);
        if (dif == 0) {
            /* Acquire pairs with the poller's release of the entry. */
            if (atomic_load_explicit(&softub__rq_shadow(jfr, pos)->state,
                                     memory_order_acquire) != SUB_RSH_FREE) {
                *held = 1;
                return NULL;
            }
            if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed)) {
                *pos_out = pos;
                return (struct sub_rqe *)((uint8_t *)seq + 8);
            }
        } else if (dif < 0) {
            return NULL;
        } else {
            pos = atomic_load_explicit(&r->head, memory_order_relaxed);
        }
    }
}

/* One more receive WR ended without a CR to free it (RESET, or a sender
 * that died): the live count no longer includes it. Only the owner process
 * writes it (its posts and its RESET): an increment lost between two of its
 * threads only makes the depth check read the ring's tail. */
static void post_rq_dropped(struct sub_jfr *jfr)
{
    atomic_store_explicit(&jfr->rq_dropped,
                          atomic_load_explicit(&jfr->rq_dropped, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* The ring's head position, its slot's entry, and what the entry says of
 * the sender that took it a lap ago: pid, | SUB_TAKER_CR once its CR was
 * written (0: none). *other: that sender is another process. */
static uint32_t post_rq_head(struct sub_jfr *jfr, uint64_t *pos_out, struct sub_rqe **q_out,
                             pid_t *other)
{
    struct sub_ring *r = jfr->ring;
    uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
    struct sub_rqe *q = (struct sub_rqe *)((uint8_t *)sub_ring_seq(r, pos) + 8);
    uint32_t taker = __atomic_load_n(&q->taker, __ATOMIC_ACQUIRE);
    pid_t pid = (pid_t)(taker & ~SUB_TAKER_CR);
    *pos_out = pos;
    *q_out = q;
    *other = pid != softub__g.self->pid ? pid : 0;
    return taker;
}

/* The slot at the ring's head was taken a lap ago by a sender whose
 * process is stopped now. */
static int post_rq_taker_stopped(struct sub_jfr *jfr)
{
    uint64_t pos;
    struct sub_rqe *q;
    pid_t pid;
    (void)post_rq_head(jfr, &pos, &q, &pid);
    return pid != 0 && softub__pid_stopped(pid);
}

/* Claimed a lap ago and never marked (taker 0) since at least
 * SUB_CLAIM_LOST_NS: the owner's own timing, as no pid is there to ask. */
static int post_rq_lost(struct sub_jfr *jfr, uint64_t pos, uint32_t taker, uint64_t s)
{
    if (taker != 0 || s != pos - jfr->ring->cap + 1)
        return 0;
    uint64_t now = softub__now_ns();
    if (atomic_load_explicit(&jfr->lost_pos, memory_order_relaxed) != pos + 1) {
        atomic_store_explicit(&jfr->lost_since_ns, now, memory_order_relaxed);
        atomic_store_explicit(&jfr->lost_pos, pos + 1, memory_order_relaxed);
        return 0;
    }
    return now - atomic_load_explicit(&jfr->lost_since_ns, memory_order_relaxed) >=
           SUB_CLAIM_LOST_NS;
}

/* The slot at the ring's head was taken a lap ago by a sender that has
 * died (its pid is in the entry; or none is, after SUB_CLAIM_LOST_NS: it
 * died between its claim and its mark). Died before it released the slot:
 * the slot is released for it. Died before its CR: the WR it took is posted
 * again in that slot, at the head, as if it had never been taken (hardware
 * does not lose a receive WR when a sender goes away mid-message). 1 when
 * the slot changed (claim again); 0 when it is not such a slot. */
static int post_rq_recover(struct sub_jfr *jfr)
{
    struct sub_ring *r = jfr->ring;
    uint64_t pos;
    struct sub_rqe *q;
    pid_t pid;
    uint32_t taker = post_rq_head(jfr, &pos, &q, &pid);
    _Atomic uint64_t *seq = sub_ring_seq(r, pos);
    uint64_t s = atomic_load_explicit(seq, memory_order_acquire);
    if (!post_rq_lost(jfr, pos, taker, s) && (pid == 0 || softub__pid_alive(pid, 0)))
        return 0;
    int changed = 0;
    if (s == pos - r->cap + 1) {
        /* Taken and never released. */
        changed = atomic_compare_exchange_strong_explicit(seq, &s, pos, memory_order_acq_rel,
                                                          memory_order_acquire);
        s = atomic_load_explicit(seq, memory_order_acquire);
    }
    struct sub_rshadow *sh = softub__rq_shadow(jfr, pos);
    if ((taker & SUB_TAKER_CR) || s != pos ||
        atomic_load_explicit(&sh->state, memory_order_acquire) != SUB_RSH_POSTED ||
        (uint32_t)sh->pos != (uint32_t)(pos - r->cap))
        return changed; /* its CR was written: the poll frees the WR */
    if (sh->epoch != jfr->rq_epoch) {
        /* Posted before a RESET, which gave up every WR: freed, not posted
         * again (its buffer is the user's once more). */
        atomic_store_explicit(&sh->state, SUB_RSH_FREE, memory_order_release);
        post_rq_dropped(jfr);
        __atomic_store_n(&q->taker, 0u, __ATOMIC_RELAXED);
        return 1;
    }
    if (!atomic_compare_exchange_strong_explicit(&r->head, &pos, pos + 1, memory_order_relaxed,
                                                 memory_order_relaxed))
        return 1; /* another poster moved the head: look again */
    sh->pos = pos;
    q->user_ctx = sh->user_ctx;
    q->nsge = sh->nsge;
    for (uint32_t i = 0; i < sh->nsge; i++) {
        q->sge[i].addr = sh->sge[i].addr;
        q->sge[i].len = sh->sge[i].len;
        q->sge[i].seg_idx = sh->sge[i].seg_idx;
        q->sge[i].seg_gen = sh->sge[i].seg_gen;
        q->sge[i].reserved = 0;
    }
    __atomic_store_n(&q->taker, 0u, __ATOMIC_RELAXED);
    /* Its first position ended without a CR: not live there any more. */
    post_rq_dropped(jfr);
    sub_ring_enq_commit(r, pos);
    return 1;
}

/* SOFTUB_RECV_FULL: true while refusals are left (one used), once
 * SOFTUB_RECV_FULL_AFTER posts went through. */
static int post_recv_full_fault(void)
{
    if (atomic_load_explicit(&softub__fault.recv_full, memory_order_relaxed) == 0 ||
        softub__fault_take(&softub__fault.recv_full_after))
        return 0;
    return softub__fault_take(&softub__fault.recv_full);
}

urma_status_t softub__rq_post(struct sub_jfr *jfr, urma_jfr_wr_t *wr, urma_jfr_wr_t **bad_wr)
{
    uint32_t maxs = jfr->base.jfr_cfg.max_sge;
    uint32_t depth = jfr->base.jfr_cfg.depth;
    for (urma_jfr_wr_t *it = wr; it != NULL; it = it->next) {
        const urma_sg_t *sg = &it->src;
        int bad = sg->num_sge > maxs || (sg->num_sge > 0 && sg->sge == NULL);
        struct sub_tseg *ts[SUB_MAX_JFR_SGE];
        for (uint32_t i = 0; !bad && i < sg->num_sge; i++) {
            const urma_sge_t *s = &sg->sge[i];
            ts[i] = softub__tseg_check(s->tseg);
            if (s->addr == 0 || ts[i] == NULL || softub__local_range(ts[i], s->addr, s->len) != 0)
                bad = 1;
        }
        if (bad) {
            *bad_wr = it;
            return URMA_EINVAL;
        }
        uint64_t live = atomic_load_explicit(&jfr->ring->head, memory_order_relaxed) -
                        atomic_load_explicit(&jfr->rq_freed, memory_order_relaxed) -
                        atomic_load_explicit(&jfr->rq_dropped, memory_order_relaxed);
        if ((live >= depth && sub_ring_holds(jfr->ring, depth)) || post_recv_full_fault()) {
            *bad_wr = it;
            return URMA_ENOMEM;
        }
        uint64_t pos;
        int held = 0;
        struct sub_rqe *q = post_rq_claim(jfr, &pos, &held);
        /* The ring is not full (checked above) but looks full: a sender, in
         * some process, claimed the slot a wrap ago and was preempted before
         * releasing it. Wait for it a little (it may also have died). A slot
         * held by an unpolled CR is final until the poll, and one held by a
         * stopped process (SIGSTOP, a debugger) until something continues
         * it: refused once the taker is seen stopped at two looks a
         * millisecond apart (a tracer's stop at each system call is brief). */
        for (uint64_t t0 = 0, look = 0, stops = 0; q == NULL;) {
            if (post_rq_recover(jfr)) {
                held = 0;
                q = post_rq_claim(jfr, &pos, &held);
                continue;
            }
            uint64_t now = softub__now_ns();
            if (t0 == 0)
                t0 = now;
            if (now - look >= 1000000ull) {
                look = now;
                stops = post_rq_taker_stopped(jfr) ? stops + 1 : 0;
            }
            if (held || stops >= 2 || now - t0 > 200000000ull ||
                sub_ring_holds(jfr->ring, depth)) {
                *bad_wr = it;
                return URMA_ENOMEM;
            }
            sched_yield();
            q = post_rq_claim(jfr, &pos, &held);
        }
        /* The shadow first: the ring's release below publishes it to the
         * sender, whose CR publishes it to the poller. */
        struct sub_rshadow *sh = softub__rq_shadow(jfr, pos);
        sh->pos = pos;
        sh->user_ctx = it->user_ctx;
        sh->nsge = sg->num_sge;
        sh->epoch = jfr->rq_epoch;
        for (uint32_t i = 0; i < sg->num_sge; i++) {
            sh->sge[i].addr = sg->sge[i].addr;
            sh->sge[i].len = sg->sge[i].len;
            sh->sge[i].seg_idx = ts[i]->seg_idx;
            sh->sge[i].seg_gen = ts[i]->seg_gen;
            sh->sge[i].reserved = 0;
        }
        atomic_store_explicit(&sh->state, SUB_RSH_POSTED, memory_order_relaxed);
        q->user_ctx = it->user_ctx;
        q->nsge = sg->num_sge;
        __atomic_store_n(&q->taker, 0u, __ATOMIC_RELAXED);
        for (uint32_t i = 0; i < sg->num_sge; i++) {
            q->sge[i].addr = sg->sge[i].addr;
            q->sge[i].len = sg->sge[i].len;
            q->sge[i].seg_idx = ts[i]->seg_idx;
            q->sge[i].seg_gen = ts[i]->seg_gen;
            q->sge[i].reserved = 0;
        }
        sub_ring_enq_commit(jfr->ring, pos);
        /* The next re-post's slot was freed by a sender about a lap ago:
         * fetch it for writing now, while nobody waits (a hint only). */
        __builtin_prefetch((const void *)sub_ring_seq(jfr->ring, pos + 1), 1, 3);
    }
    return URMA_SUCCESS;
}

void softub__rq_flush(struct sub_jfr *jfr)
{
    uint64_t pos;
    struct sub_rqe *q;
    while ((q = sub_ring_deq_begin(jfr->ring, &pos)) != NULL) {
        struct sub_cqe e;
        memset(&e, 0, sizeof(e));
        urma_cr_flag_t fl = {.value = 0};
        fl.bs.s_r = 1;
        e.status = URMA_CR_WR_FLUSH_ERR;
        e.opcode = URMA_CR_OPC_SEND;
        e.user_ctx = q->user_ctx;
        e.local_id = jfr->base.jfr_id.id;
        e.flag = fl.value;
        e.solicited = 1;
        e.rq_pos = (uint32_t)pos;
        sub_ring_deq_commit(jfr->ring, pos);
        (void)softub__cq_push(softub__g.self, jfr->jfc->sh, &e, NULL);
    }
}

void softub__rq_discard(struct sub_jfr *jfr)
{
    jfr->rq_epoch++;
    uint64_t pos;
    while (sub_ring_deq_begin(jfr->ring, &pos) != NULL) {
        /* No CR will free this entry. */
        atomic_store_explicit(&softub__rq_shadow(jfr, pos)->state, SUB_RSH_FREE,
                              memory_order_release);
        post_rq_dropped(jfr);
        sub_ring_deq_commit(jfr->ring, pos);
    }
}

static struct sub_jfr *post_cr_jfr(uint32_t local_id)
{
    struct sub_obj *o = local_id < SUB_MAX_QIDS
                            ? atomic_load_explicit(&softub__g.objs[local_id], memory_order_acquire)
                            : NULL;
    if (o == NULL)
        return NULL;
    if (o->kind == SUB_T_JFR)
        return (struct sub_jfr *)((char *)o - offsetof(struct sub_jfr, obj));
    if (o->kind == SUB_T_JETTY)
        return ((struct sub_jetty *)((char *)o - offsetof(struct sub_jetty, obj)))->jfr;
    return NULL;
}

void softub__rq_cr_lost(uint64_t note, uint32_t pid)
{
    struct sub_jfr *jfr = post_cr_jfr((uint32_t)(note >> 32));
    if (jfr == NULL || pid == 0)
        return;
    uint32_t pos = (uint32_t)note;
    struct sub_rshadow *sh = softub__rq_shadow(jfr, pos);
    if (atomic_load_explicit(&sh->state, memory_order_acquire) != SUB_RSH_POSTED ||
        (uint32_t)sh->pos != pos)
        return;
    struct sub_rqe *q = (struct sub_rqe *)((uint8_t *)sub_ring_seq(jfr->ring, pos) + 8);
    uint32_t marked = pid | SUB_TAKER_CR;
    if (__atomic_compare_exchange_n(&q->taker, &marked, pid, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED))
        SUB_WARN("receive WR %u of JFR %u: its sender (pid %u) died before its CR; it serves "
                 "again\n",
                 pos, jfr->base.jfr_id.id, pid);
}

/* Scatters an inline payload into the WR's buffer: the SGEs must still be
 * registered (the sender checked them when it took the WR) and hold it. */
static int post_scatter_inline(const struct sub_rshadow *sh, const uint8_t *inl, uint32_t len)
{
    if (len > SUB_CQE_INL_MAX || sh->nsge > SUB_MAX_JFR_SGE)
        return URMA_CR_LOC_LEN_ERR;
    uint64_t room = 0;
    for (uint32_t i = 0; i < sh->nsge; i++) {
        const struct sub_rqe_sge *g = &sh->sge[i];
        struct sub_sseg *ss = softub__seg_entry(softub__g.self, g->seg_idx);
        if (g->len != 0 && (ss == NULL || atomic_load(&ss->state) != SUB_SEG_REG ||
                            atomic_load(&ss->gen) != g->seg_gen))
            return URMA_CR_LOC_ACCESS_ERR;
        room += g->len;
    }
    if (len > room)
        return URMA_CR_LOC_LEN_ERR;
    uint32_t off = 0;
    for (uint32_t i = 0; i < sh->nsge && off < len; i++) {
        uint32_t n = sh->sge[i].len < len - off ? sh->sge[i].len : len - off;
        memcpy((void *)(uintptr_t)sh->sge[i].addr, inl + off, n);
        off += n;
    }
    return URMA_CR_SUCCESS;
}

void softub__rq_polled(struct sub_cqe *c, const uint8_t *inl)
{
    int is_inl = (c->flag & SUB_CQE_F_INLINE) != 0;
    c->flag = (uint8_t)(c->flag & ~SUB_CQE_F_INLINE);
    uint32_t jfr_id = c->remote_id >> 16; /* 0 in flush CRs: local_id is the JFR */
    struct sub_jfr *jfr = post_cr_jfr(jfr_id != 0 ? jfr_id : c->local_id);
    struct sub_rshadow *sh = jfr != NULL ? softub__rq_shadow(jfr, c->rq_pos) : NULL;
    /* A CR that does not name a WR posted here and not yet polled (stale,
     * forged, or its JFR deleted) neither copies nor frees anything. */
    if (sh == NULL || atomic_load_explicit(&sh->state, memory_order_acquire) != SUB_RSH_POSTED ||
        (uint32_t)sh->pos != c->rq_pos) {
        if (is_inl) {
            c->status = URMA_CR_LOC_ACCESS_ERR;
            c->len = 0;
        }
        return;
    }
    /* The receiver's own record of the WR, not the copy that went through
     * the sender's process. */
    c->user_ctx = sh->user_ctx;
    if (is_inl) {
        int st = post_scatter_inline(sh, inl, c->len);
        if (st != URMA_CR_SUCCESS) {
            c->status = (uint8_t)st;
            c->len = 0;
        }
    }
    /* Release: our reads of the entry happen before a re-post rewrites it. */
    atomic_store_explicit(&sh->state, SUB_RSH_FREE, memory_order_release);
    /* Pollers of different JFCs (jetties sharing this JFR) may free
     * entries at once. */
    atomic_fetch_add_explicit(&jfr->rq_freed, 1, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* Progress thread                                                           */
/* ------------------------------------------------------------------------ */

struct prog_handle {
    pthread_t th;
    _Atomic int stop;
    sem_t holding; /* posted once the thread holds the region's `alive` mutex */
};

static struct prog_handle *prog_cur; /* under softub__g.lock */

/* Under sq->lock: runs the pending WRs that are due; returns the next due
 * time, or 0 when nothing is pending. */
static uint64_t prog_run_sq(struct sub_sq *sq, uint64_t now)
{
    while (sq->pend_head != NULL) {
        struct sub_wr *w = sq->pend_head;
        if (w->due_ns > now)
            return w->due_ns;
        /* Detached first: its completion may flush the rest of the list (RC
         * peer death), which must not flush w a second time. */
        sq->pend_head = w->next;
        if (sq->pend_head == NULL)
            sq->pend_tail = NULL;
        sq->npend--;
        w->next = NULL;
        uint32_t gone = post_gone(w);
        if (gone != URMA_CR_SUCCESS) {
            post_complete(sq, w, gone, 0);
            post_wr_free(w);
            continue;
        }
        if (post_run(sq, w) == X_RETRY) {
            w->next = sq->pend_head;
            sq->pend_head = w;
            if (sq->pend_tail == NULL)
                sq->pend_tail = w;
            sq->npend++;
            return w->due_ns;
        }
        post_wr_free(w);
    }
    return 0;
}

/* Event fds that peers could not write themselves (no pidfd_getfd): they
 * counted the events in shared memory and rang our doorbell. */
static void prog_signals(void)
{
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    for (struct sub_ctx *c = g->ctxs; c != NULL; c = c->next) {
        uint32_t n = atomic_exchange(&c->sh->pending_signals, 0);
        if (n != 0) {
            uint64_t v = n;
            (void)!write(c->base.async_fd, &v, sizeof(v));
        }
    }
    for (struct sub_jfce *j = g->jfces; j != NULL; j = j->next) {
        uint32_t n = atomic_exchange(&j->sh->pending_signals, 0);
        if (n != 0) {
            uint64_t v = n;
            (void)!write(j->base.fd, &v, sizeof(v));
        }
    }
    pthread_mutex_unlock(&g->lock);
}

static int prog_have_peers(void)
{
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        struct sub_peer *p = atomic_load(&softub__g.peers[i]);
        if (p != NULL && !p->self && !atomic_load(&p->dead))
            return 1;
    }
    return 0;
}

/* Under prog.mu: one pass over the active send queues. Returns the next
 * time something is due (UINT64_MAX: nothing pending). */
static uint64_t prog_pass_locked(uint64_t now)
{
    struct sub_prog *pg = &softub__g.prog;
    uint64_t next = UINT64_MAX;
    struct sub_sq **pp = &pg->active;
    while (*pp != NULL) {
        struct sub_sq *sq = *pp;
        if (pthread_mutex_trylock(&sq->lock) != 0) {
            uint64_t soon = now + 100000;
            next = soon < next ? soon : next;
            pp = &sq->prog_next;
            continue;
        }
        uint64_t due = prog_run_sq(sq, now);
        if (due == 0) {
            *pp = sq->prog_next;
            sq->prog_active = 0;
            atomic_fetch_sub(&pg->nactive, 1);
        } else {
            next = due < next ? due : next;
            pp = &sq->prog_next;
        }
        pthread_mutex_unlock(&sq->lock);
    }
    return next;
}

void softub__prog_assist(void)
{
    struct sub_prog *pg = &softub__g.prog;
    if (pthread_mutex_trylock(&pg->mu) != 0)
        return; /* the progress thread (or another assistant) is at it */
    (void)prog_pass_locked(softub__now_ns());
    pthread_mutex_unlock(&pg->mu);
}

/* The progress thread's look at its peers: their deaths (a load each; the
 * kernel asked once a second), the mappings of dead ones, the event slots
 * they left. Once a second: a process whose connections are idle wakes
 * once a second for it (a dead peer's WRs fail at once anyway, on the
 * word its death sets). */
#define SUB_PEER_LOOK_NS 1000000000ull

static void *prog_main(void *arg)
{
    struct prog_handle *h = arg;
    struct sub_global *g = &softub__g;
    struct sub_region_hdr *rh = (struct sub_region_hdr *)g->region;
    uint64_t last_check = 0;
    uint32_t last_bell = UINT32_MAX;
    int holes = 0; /* an event slot left claimed at the last look */
    uint32_t last_died = 0;
    /* Held for the thread's life: peers read the owner's death in it. */
    if (pthread_mutex_lock(&rh->alive) == EOWNERDEAD)
        pthread_mutex_consistent(&rh->alive);
    sem_post(&h->holding);
    while (!atomic_load(&h->stop)) {
        uint32_t seen = atomic_load(&rh->doorbell);
        uint64_t now = softub__now_ns();
        uint64_t next = UINT64_MAX;
        if (seen != last_bell) {
            prog_signals();
            last_bell = seen;
        }
        pthread_mutex_lock(&g->prog.mu);
        next = prog_pass_locked(now);
        pthread_mutex_unlock(&g->prog.mu);
        uint32_t died = atomic_load(&g->peers_died);
        /* A process with event queues looks too: a producer it never
         * imported from may die holding one of their slots. */
        pthread_mutex_lock(&g->lock);
        int queues = g->jfces != NULL;
        pthread_mutex_unlock(&g->lock);
        if (prog_have_peers() || holes || died != last_died || queues) {
            if (now - last_check >= SUB_PEER_LOOK_NS || died != last_died) {
                softub__peers_check(now);
                last_died = atomic_load(&g->peers_died);
                holes = softub__jfce_holes_check();
                last_check = now;
            }
            uint64_t c = last_check + SUB_PEER_LOOK_NS;
            next = c < next ? c : next;
        }
        softub__peers_release_dead();
        now = softub__now_ns();
        if (next > now)
            (void)softub__doorbell_wait(seen, next == UINT64_MAX ? UINT64_MAX : next - now);
    }
    pthread_mutex_unlock(&rh->alive);
    return NULL;
}

int softub__prog_start(void)
{
    if (prog_cur != NULL)
        return 0;
    struct prog_handle *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    atomic_init(&h->stop, 0);
    sem_init(&h->holding, 0, 0);
    if (pthread_create(&h->th, NULL, prog_main, h) != 0) {
        sem_destroy(&h->holding);
        free(h);
        return -EAGAIN;
    }
    /* Not before the thread holds `alive`: a process killed earlier would
     * leave no "owner died" mark, and peers would take it for alive until
     * their next liveness check. */
    while (sem_wait(&h->holding) != 0 && errno == EINTR) {
    }
    prog_cur = h;
    return 0;
}

void softub__prog_stop(void)
{
    pthread_mutex_lock(&softub__g.lock);
    struct prog_handle *h = softub__g.nctx == 0 ? prog_cur : NULL;
    if (h != NULL) {
        prog_cur = NULL;
        atomic_store(&h->stop, 1);
        softub__doorbell_ring(softub__g.self);
    }
    pthread_mutex_unlock(&softub__g.lock);
    if (h != NULL) {
        pthread_join(h->th, NULL);
        sem_destroy(&h->holding);
        free(h);
    }
}

void softub__prog_forget(void)
{
    prog_cur = NULL;
}

