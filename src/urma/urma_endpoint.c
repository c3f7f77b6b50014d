#include "urma/urma_endpoint.h"
#include "urma/urma_usermem.h"
#include "urma/urma_names.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/time.h"
#include "iobuf/block_pool.h"
#include "jetrpc/errors.h"
#include "net/socket.h"
#include "urma/urma_context.h"
#include "urma/urma_import.h"

#define EP_RESERVED 3  /* SQ slots and peer receives kept for credit messages */
#define EP_PEER_MIN_SQ 16 /* the smallest SQ depth a brpc peer uses (its urma_sq_size) */
#define EP_CHAIN    16 /* data WRs per post call */
#define EP_DEFER_MAX 8 /* receives a batch end may leave for the next poller pass */
#define EP_DRAIN_MS 2000
/* A receive the provider refused for want of room (URMA_ENOMEM within the
 * queue's depth: a slot a sender holds, as a stalled one does) is tried
 * again this long after, by a timer, not at every batch end. */
#define EP_RETRY_US 1000
/* A receive whose data found no memory (iobuf_max_mb reached) gives its own
 * block to the read buffer, and its slot waits for a fresh one (ep_starve).
 * While the starved slots hold back more credits than a credit batch (the
 * peer is short of its window: it has bytes it cannot send, as when a TCP
 * read finds no memory), blocks are tried for every EP_RETRY_US, the owner
 * is asked to free memory (a server closes a stalled upload) at most every
 * EP_NOMEM_ASK_US, and the connection fails with ENOMEM when none came in
 * EP_STARVE_US. Otherwise they are tried for every EP_STARVE_IDLE_US, for as
 * long as it takes. */
#define EP_NOMEM_ASK_US   10000
#define EP_STARVE_US      200000
#define EP_STARVE_IDLE_US 10000
/* Block bytes the unsignalled data WRs of a connection may hold once its
 * writer has sent all it had: the last WR of such a burst is signalled when
 * they hold more, so a connection that then goes quiet keeps at most this
 * much pool memory (unsignalled WRs release their blocks only when a later
 * completion covers them). A block counts once for the WRs in a row that
 * share it, so small messages packed into the same blocks reach it seldom. */
#define EP_IDLE_HOLD (256u * 1024)

struct jet_urma_ep {
    const jet_urma_ctx_t *ctx;
    jet_urma_loop_t *ul;
    jet_socket_t *s; /* NULL once closed */
    jet_urma_jset_t *js; /* NULL while awaited, or when none came */
    jet_urma_ep_ready_t ready;
    urma_target_jetty_t *tjetty;
    urma_target_seg_t *tseg;
    uint32_t index;
    uint8_t gen;
    uint32_t sq, rq, max_sge, recv_size;
    bool srq;        /* receives come from the loop's shared queue */
    bool srq_joined; /* its rq credits count in the loop's target */
    bool jetty_bound; /* the loop maps the set's jetty id to ep */
    uint32_t peer_jetty;
    bool peer_eid_known;  /* a jetrpc peer: its hello's EID is its jetty's */
    uint8_t peer_eid[16];
    uint32_t sq_cap;     /* data WRs in our send queue at most */
    uint32_t rq_cap;     /* data WRs uncredited in the peer's receives at most */
    uint32_t remote_cap; /* data WRs the peer may have outstanding toward us */
    uint32_t credit_batch; /* credits owed past this go at once (brpc's way) */
    uint32_t peer_buf;   /* most bytes per WR toward the peer */
    uint32_t sig_every;
    bool piggyback;
    /* urma_jetrpc_extensions when the connection began: its hello and its
     * reading of the peer's agree even if the flag changes meanwhile. */
    bool ext;
    bool connected; /* peer imported, windows set */
    bool started;   /* received bytes go to the protocol */
    bool touched;
    bool got_bytes;
    bool want_wake;
    bool draining;
    bool sq_flushed;
    bool fail_logged;
    /* A send of ours failed in this poll batch (the peer is gone, most
     * likely): the batch end fails the socket, after it delivered what the
     * peer sent before, as TCP reads the bytes before an error. */
    const char *fail_what;
    int fail_status;
    /* Set with fail_what: nothing more is posted (writers wait as on an
     * empty window), so that no message follows one that was lost. */
    _Atomic bool send_halted;
    bool no_reuse; /* the provider refused a receive: the set is not recycled */
    bool awaiting; /* its set is being made off the loop */

    /* shared by the writer thread (takes) and the loop (gives back) */
    _Atomic int32_t sq_window;
    _Atomic int32_t rq_window; /* credits: peer receives we may fill */
    _Atomic int32_t imm_slots;
    _Atomic uint32_t credits; /* receives re-posted here, not reported yet */
    uint32_t withheld; /* loop: re-posted, kept from credits (ep_withholds) */
    _Atomic uint32_t head;    /* send-ring sequence of the next data WR (writer) */
    uint32_t unsig;           /* writer: data WRs since the last signalled one */
    size_t unsig_hold;        /* writer: block bytes those WRs hold */
    bool unsig_user;          /* writer: one of them holds user memory (sent in place) */
    const jet_block_t *unsig_last; /* writer: the last block counted in it */
    uint32_t tail;            /* loop: oldest data WR not released */
    uint32_t rx_seq;          /* loop: sequence the peer's next data WR carries */
    uint32_t *slot_n;         /* blocks held by each ring slot */
    jet_block_t **slot_blk;   /* sq * max_sge */

    jet_urma_counters_t *cnt; /* the loop's (loop thread) */
    jet_urma_counters_t wcnt; /* send side (writer), folded in at the end */

    jet_block_t **rbufs; /* receive ring, rq slots; NULL = not posted */
    uint32_t posted;
    /* Data receives taken in this poll batch, re-posted (and credited) at its
     * end, after the delivery: the post is not on the path from a request's
     * arrival to its handler's answer. held[slot] owns the block meanwhile. */
    jet_block_t **held;
    uint32_t *repost; /* slots in held, in arrival order */
    uint32_t nrepost;
    /* Receives that are no credit (credit messages, foreign senders' ones)
     * the provider refused: slots in held, posted again before the others. */
    uint32_t *pend;
    uint32_t npend;
    /* Receives whose block joined the read buffer for want of memory
     * (EP_STARVE_US): their slots (on a shared queue only their count
     * matters) wait for fresh blocks; the peer's window lacks them. */
    uint32_t *starved;
    uint32_t nstarved;
    int64_t starved_us;   /* the peer short of credits since (0: it is not) */
    int64_t nomem_ask_us; /* when the owner was last asked to free memory */
    bool starve_logged;   /* once per connection */
    /* Own receive queue: when the provider last refused a re-post. Until
     * retry_timer runs, EP_RETRY_US later, nothing is posted: what comes
     * back is held, and the peer's window lacks the held data receives. */
    int64_t refused_us;
    jet_timer_t retry_timer;
    bool repost_deferred; /* listed for the loop's next poller pass */
    bool close_pending;   /* the move to ERROR runs on an import thread */
    jet_timer_t drain_timer;
};

static void ep_finish(jet_urma_ep_t *ep, bool reuse);

/* The peer closed or reset the TCP connection, on which nothing else may
 * arrive once URMA is on: a send that failed meanwhile failed for that. */
static bool ep_peer_closed(const jet_urma_ep_t *ep)
{
    char b;
    ssize_t r = recv(ep->s->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* A completion error of a send: the failure waits for the batch end. */
static void ep_fail_after_batch(jet_urma_ep_t *ep, const char *what, int status)
{
    if (ep->draining || ep->fail_what) return;
    ep->fail_what = what;
    ep->fail_status = status;
    atomic_store_explicit(&ep->send_halted, true, memory_order_release);
}

/* Fails the socket once; the endpoint keeps releasing buffers until close. */
static void ep_fail(jet_urma_ep_t *ep, int err, const char *what, int status)
{
    if (!ep->s || ep->fail_logged) return;
    ep->fail_logged = true;
    /* Failed already (closed by us, or its TCP ended): what fails now is a
     * consequence (a peer that saw our close takes its jetty down, and the
     * credits we post meanwhile fail), not news worth a warning. */
    if (jet__socket_failed(ep->s)) return;
    if (status >= 0)
        JET_WARN_PEER("URMA connection %s: %s completed with %s (status %d)", ep->s->peer, what,
                      jet__urma_cr_status_name(status), status);
    else
        JET_WARN_PEER("URMA connection %s: %s", ep->s->peer, what);
    jet__socket_set_failed(ep->s, err);
}

/* The segment that holds [addr, addr + len) of block b, or NULL. */
static urma_target_seg_t *ep_seg_of(const jet_block_t *b, const void *addr, size_t len)
{
    if (b->region) return b->region->reg;
    /* User memory: in a pool region, or in a range the user registered
     * (jet_urma_register_memory); else it is copied. */
    const jet_region_t *r = jet__block_pool_find(addr);
    if (r) return r->reg;
    return jet__urma_usermem_find(addr, len);
}

/* 0; -EAGAIN when the provider has no room (b is the caller's still); -EFAULT,
 * -EIO. */
static int ep_post_recv(jet_urma_ep_t *ep, uint32_t slot, jet_block_t *b)
{
    int rc = jet__urma_post_recv(
        ep->ctx, ep->js->jfr, b, ep->recv_size,
        jet__urma_ctx_make(ep->index, ep->gen, JET_URMA_CTX_KIND_RECV, slot), &ep->rbufs[slot]);
    if (rc == 0) {
        ep->posted++;
        return 0;
    }
    if (rc == -EFAULT) return rc;
    /* A receive queue that refuses a post within its depth may keep doing
     * so after a reset (a slot a sender took and never gave back): the next
     * connection must not inherit it. */
    ep->no_reuse = true;
    return rc == -ENOMEM ? -EAGAIN : -EIO;
}

/* The receive queue depth of ep's jetty set: 0 on the loop's shared one. */
static uint32_t ep_set_rq(const jet_urma_ep_t *ep)
{
    return ep->srq ? 0 : ep->rq;
}

/* The JFR ep's close moves to ERROR: its own, never the loop's shared one. */
static urma_jfr_t *ep_own_jfr(const jet_urma_ep_t *ep)
{
    return ep->js->shared_jfr ? NULL : ep->js->jfr;
}

/* A block ep no longer needs: the shared queue takes it back, a block of
 * ep's own queue is freed (never posted on it again). */
static void ep_put_block(jet_urma_ep_t *ep, jet_block_t *b)
{
    if (ep->srq)
        jet__urma_loop_srq_give(ep->ul, b);
    else
        jet__block_unref(b);
}

static void ep_free_arrays(jet_urma_ep_t *ep)
{
    free(ep->slot_n);
    free(ep->slot_blk);
    free(ep->rbufs);
    free(ep->held);
    free(ep->repost);
    free(ep->pend);
    free(ep->starved);
}

static void ep_free(jet_urma_ep_t *ep)
{
    if (ep->srq_joined) jet__urma_loop_srq_leave(ep->ul, ep->rq);
    ep_free_arrays(ep);
    free(ep);
}

/* Maps the set's jetty to ep (receives of a shared queue and the flush
 * record of a closing jetty name only the jetty), then posts the whole
 * receive queue of the set, or on a shared receive queue has the loop post
 * ep's share. */
static int ep_post_all(jet_urma_ep_t *ep)
{
    int rc = jet__urma_loop_bind_jetty(ep->ul, ep, ep->js->jetty->jetty_id.id);
    if (rc < 0) {
        JET_LOG_ONCE(JET_LOG_WARN, "URMA: cannot map jetty %u to its connection: %s",
                     ep->js->jetty->jetty_id.id, jet_strerror(rc));
        return rc == -EEXIST ? -EIO : rc;
    }
    ep->jetty_bound = true;
    if (ep->srq) {
        rc = jet__urma_loop_srq_fill(ep->ul);
        if (rc < 0)
            JET_LOG_ONCE(JET_LOG_WARN, "URMA: cannot post the shared receive queue: %s",
                         jet_strerror(rc));
        return rc;
    }
    for (uint32_t i = 0; i < ep->rq; i++) {
        jet_block_t *b = jet__block_alloc(ep->recv_size);
        rc = b ? ep_post_recv(ep, i, b) : -ENOMEM;
        if (rc == -EAGAIN) rc = -EIO; /* a new queue without room: take another set */
        if (rc < 0) {
            if (b) jet__block_unref(b);
            JET_LOG_ONCE(JET_LOG_WARN, "URMA: cannot post the receive queue: %s", jet_strerror(rc));
            return rc;
        }
    }
    return 0;
}

static int ep_create(jet_socket_t *s, jet_urma_ep_ready_t ready, bool fresh, bool *pooled_p,
                     jet_urma_ep_t **ep_p)
{
    const jet_urma_ctx_t *ctx = jet__urma_ctx_get();
    if (!ctx) return -ENOTSUP;
    jet_urma_loop_t *ul = jet__urma_loop_get(s->loop);
    if (!ul) return -ENOMEM;
    jet_urma_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) return -ENOMEM;
    ep->ctx = ctx;
    ep->ul = ul;
    ep->ready = ready;
    ep->ext = JET_FLAG(urma_jetrpc_extensions);
    ep->cnt = jet__urma_loop_counters(ul);
    jet__urma_queue_sizes(ctx, &ep->sq, &ep->rq);
    ep->max_sge = jet__urma_send_sge(ctx);
    ep->recv_size = jet__urma_recv_size();
    if (jet__urma_loop_srq_size(ul)) {
        ep->srq = true;
        ep->recv_size = jet__urma_loop_srq_size(ul);
    }
    jet_timer_init(&ep->drain_timer, NULL);
    jet_timer_init(&ep->retry_timer, NULL);
    ep->slot_n = calloc(ep->sq, sizeof *ep->slot_n);
    ep->slot_blk = calloc((size_t)ep->sq * ep->max_sge, sizeof *ep->slot_blk);
    ep->rbufs = calloc(ep->rq, sizeof *ep->rbufs);
    ep->held = calloc(ep->rq, sizeof *ep->held);
    ep->repost = calloc(ep->rq, sizeof *ep->repost);
    ep->pend = calloc(ep->rq, sizeof *ep->pend);
    ep->starved = calloc(ep->rq, sizeof *ep->starved);
    int rc = -ENOMEM;
    if (ep->slot_n && ep->slot_blk && ep->rbufs && ep->held && ep->repost && ep->pend &&
        ep->starved)
        rc = jet__urma_loop_attach(ul, ep, ep->sq, ep_set_rq(ep), ep->max_sge, fresh,
                                   &ep->index, &ep->gen, &ep->js, pooled_p);
    if (rc < 0) {
        ep_free_arrays(ep);
        free(ep);
        return rc;
    }
    if (ep->srq) {
        jet__urma_loop_srq_join(ul, ep->rq);
        ep->srq_joined = true;
    }
    ep->s = s;
    *ep_p = ep;
    if (rc == 1) {
        ep->awaiting = true;
        return 1;
    }
    rc = ep_post_all(ep);
    if (rc < 0) {
        /* What was posted comes back through the flush. */
        jet__urma_ep_close(ep);
        *ep_p = NULL;
        return rc;
    }
    return 0;
}

int jet__urma_ep_create(jet_socket_t *s, jet_urma_ep_ready_t ready, jet_urma_ep_t **ep_p)
{
    bool pooled = false;
    int rc = ep_create(s, ready, false, &pooled, ep_p);
    if (rc == -EIO && pooled) {
        /* The prepared set refused its receive queue and is dropped when it
         * has drained (no_reuse): one bad set must not send this and every
         * later connection of the loop over TCP. */
        JET_LOG_ONCE(JET_LOG_WARN, "URMA: a prepared jetty set refused its receive queue: "
                                   "dropped, the connection uses a new one");
        rc = ep_create(s, ready, true, NULL, ep_p);
    }
    return rc;
}

void jet__urma_ep_set_arrived(jet_urma_ep_t *ep, jet_urma_jset_t *js)
{
    ep->awaiting = false;
    ep->js = js;
    if (!ep->s) {
        /* Closed meanwhile: the set was never used. */
        if (js) {
            ep->js = NULL;
            jet__urma_loop_unused(ep->ul, js); /* first: the detach's refill counts it */
            jet__urma_loop_detach(ep->ul, ep, ep->sq, ep_set_rq(ep));
            ep_free(ep);
            return;
        }
        ep_finish(ep, false);
        return;
    }
    int rc = js ? ep_post_all(ep) : -EIO;
    /* The transport closes ep on an error; the socket may be gone after. */
    ep->ready(ep->s, rc);
}

void jet__urma_ep_hello(const jet_urma_ep_t *ep, int version, jet_urma_hello_t *h)
{
    memset(h, 0, sizeof *h);
    const urma_seg_t *seg = &ep->ctx->hello_seg->seg;
    h->version = version;
    h->buffer_size = ep->recv_size;
    h->recv_buffer_cnt = ep->rq - 1; /* brpc's convention: the peer adds 1 */
    h->jetty_id = ep->js->jetty->jetty_id.id;
    memcpy(h->eid, ep->ctx->uctx->eid.raw, 16);
    h->uasid = ep->js->jetty->jetty_id.uasid;
    h->tp_type = ep->ctx->tp_type;
    memcpy(h->seg_eid, seg->ubva.eid.raw, 16);
    h->seg_uasid = seg->ubva.uasid;
    memcpy(&h->seg_va, (const char *)&seg->ubva + offsetof(urma_ubva_t, va), 8);
    h->seg_len = seg->len;
    h->seg_token_id = seg->token_id;
    if (ep->ext) {
        h->jet_caps = JET_URMA_CAPS;
        h->jet_sq = ep->sq;
    }
}

bool jet__urma_ep_is_own(const jet_urma_ep_t *ep, const jet_urma_hello_t *peer)
{
    return peer->jetty_id == ep->js->jetty->jetty_id.id &&
           memcmp(peer->eid, ep->ctx->uctx->eid.raw, 16) == 0;
}

void jet__urma_ep_connect_peer(jet_urma_ep_t *ep, const jet_urma_hello_t *peer,
                               urma_target_seg_t *tseg, urma_target_jetty_t *tjetty)
{
    ep->tseg = tseg;
    ep->tjetty = tjetty;
    ep->peer_jetty = peer->jetty_id;
    ep->peer_eid_known = peer->jet_caps != 0;
    memcpy(ep->peer_eid, peer->eid, 16);
    uint32_t peer_rq = peer->recv_buffer_cnt + 1;
    /* Two windows, each the size of what it guards: our SQ, whose slots our
     * own completions give back, and the peer's receives, which its credits
     * give back (3 of each kept for credit messages). brpc takes min(sq,
     * peer rq) - 3 for both, which stalls against a peer that credits back
     * only past half its larger RQ (brpc's rule): a data window past that
     * half always reaches it. */
    ep->sq_cap = ep->sq - EP_RESERVED;
    ep->rq_cap = peer_rq - EP_RESERVED;
    /* A brpc peer fills at most min(its SQ, our RQ) - 3 of our receives,
     * and credits must go back before that many pile up; a jetrpc peer's
     * data window is our RQ - 3 (two windows), so credits sized by its SQ
     * only go back earlier than it needs. A jetrpc peer says its SQ depth;
     * brpc does not (and assumes it equals its own RQ depth, which
     * deadlocks when the two sides differ): guess the peer's RQ depth, since
     * brpc configurations keep both equal. */
    bool knows_sq = ep->ext && peer->jet_caps && peer->jet_sq >= 16;
    uint32_t peer_sq = knows_sq ? peer->jet_sq : peer_rq;
    ep->remote_cap = (ep->rq < peer_sq ? ep->rq : peer_sq) - EP_RESERVED;
    /* Credits go back once more than half the peer's window is owed. A
     * peer that does not say its SQ depth (brpc) may have a shallower one
     * than the guess: brpc keeps urma_sq_size at 16 or more, so its window
     * toward us is at least min(16, our RQ) - 3 sends, and the credits go
     * at the latest when that many are owed: such a peer waits one credit
     * round trip per window instead of for ever. */
    ep->credit_batch = ep->remote_cap / 2;
    if (!knows_sq) {
        uint32_t least = (ep->rq < EP_PEER_MIN_SQ ? ep->rq : EP_PEER_MIN_SQ) - EP_RESERVED;
        if (least - 1 < ep->credit_batch) ep->credit_batch = least - 1;
    }
    uint64_t pb = peer->buffer_size;
    if (pb > ep->ctx->max_msg_size) pb = ep->ctx->max_msg_size;
    if (pb > (1u << 30)) pb = 1u << 30;
    ep->peer_buf = (uint32_t)pb;
    /* Every (smaller window / 4)-th WR is signalled (brpc's RDMA signals a
     * quarter of its one window). */
    uint32_t win = ep->sq_cap < ep->rq_cap ? ep->sq_cap : ep->rq_cap;
    ep->sig_every = win / 4 ? win / 4 : 1;
    ep->piggyback = (peer->jet_caps & JET_URMA_CAP_PIGGYBACK) && ep->ext;
    atomic_store(&ep->sq_window, (int32_t)ep->sq_cap);
    atomic_store(&ep->rq_window, (int32_t)ep->rq_cap);
    atomic_store(&ep->imm_slots, EP_RESERVED);
    ep->connected = true;
}

/* What the peer sent to the parser; a receive is activity, as a TCP read
 * is (server idle_timeout_sec). */
static void ep_deliver(jet_urma_ep_t *ep)
{
    ep->got_bytes = false;
    atomic_store_explicit(&ep->s->last_active_us, jet_now_coarse_us(), memory_order_relaxed);
    jet__socket_deliver(ep->s);
}

static void ep_repost_held(jet_urma_ep_t *ep);
static void ep_send_credits(jet_urma_ep_t *ep);

/* Before the ACK (server) the peer's data waits unparsed, and while the
 * socket's input is paused (a peer that reads no answers) it is not taken:
 * the receives it came in are posted again, but their credits are kept
 * back, so that the peer sends one window, not all it likes. The buffers
 * themselves go back: on a loop's shared queue, connections holding them
 * would leave the others (and the credit messages that end the pause)
 * nowhere to land. */
static bool ep_withholds(const jet_urma_ep_t *ep)
{
    return !ep->started || (ep->s && jet__socket_read_paused(ep->s));
}

/* Receives the peer may not fill yet: taken and not posted again (or
 * waiting for a block), or posted and not credited back (kept back, or not
 * reported yet). */
static uint32_t ep_owed(const jet_urma_ep_t *ep)
{
    return ep->nrepost + ep->nstarved + ep->withheld +
           atomic_load_explicit(&ep->credits, memory_order_relaxed);
}

static void ep_release_withheld(jet_urma_ep_t *ep)
{
    if (ep->withheld == 0 || ep_withholds(ep)) return;
    atomic_fetch_add_explicit(&ep->credits, ep->withheld, memory_order_relaxed);
    ep->withheld = 0;
}

void jet__urma_ep_start(jet_urma_ep_t *ep)
{
    ep->started = true;
    if (ep->s && !jet_iobuf_empty(&ep->s->read_buf)) ep_deliver(ep);
    /* The credits kept back until now go, with those of receives still
     * held. */
    if (ep->s && !ep->draining) {
        if (ep->nrepost > 0) ep_repost_held(ep);
        ep_release_withheld(ep);
        ep_send_credits(ep);
    }
}

/* ---- sending ------------------------------------------------------------------ */

typedef struct ep_cursor {
    int i;        /* buffer */
    uint32_t r;   /* reference within it */
    uint32_t off; /* bytes of that reference already taken */
} ep_cursor_t;

static bool ep_cursor_next(jet_iobuf_t *const *bufs, int n, ep_cursor_t *c,
                           const jet_iobuf_ref_t **ref_p)
{
    while (c->i < n) {
        const jet_iobuf_t *b = bufs[c->i];
        while (c->r < b->nref) {
            const jet_iobuf_ref_t *ref = &b->refs[b->head + c->r];
            if (c->off < ref->len) {
                *ref_p = ref;
                return true;
            }
            c->r++;
            c->off = 0;
        }
        c->i++;
        c->r = 0;
        c->off = 0;
    }
    return false;
}

static void ep_slot_release(jet_urma_ep_t *ep, uint32_t seq)
{
    uint32_t slot = seq % ep->sq;
    jet_block_t **blk = ep->slot_blk + (size_t)slot * ep->max_sge;
    for (uint32_t k = 0; k < ep->slot_n[slot]; k++) {
        jet__block_unref(blk[k]);
        blk[k] = NULL;
    }
    ep->slot_n[slot] = 0;
}

/* Builds one data WR at the cursor into wr/sge, holding its blocks in the
 * ring slot of sequence seq. Returns its bytes, 0 when there is nothing to
 * send, or -ENOMEM. */
static ssize_t ep_build(jet_urma_ep_t *ep, jet_iobuf_t *const *bufs, int n, ep_cursor_t *c,
                        uint32_t seq, urma_jfs_wr_t *wr, urma_sge_t *sge)
{
    uint32_t slot = seq % ep->sq;
    jet_block_t **blk = ep->slot_blk + (size_t)slot * ep->max_sge;
    uint32_t nsge = 0;
    size_t bytes = 0;
    const jet_iobuf_ref_t *ref;
    while (nsge < ep->max_sge && bytes < ep->peer_buf && ep_cursor_next(bufs, n, c, &ref)) {
        size_t take = ref->len - c->off;
        if (take > ep->peer_buf - bytes) take = ep->peer_buf - bytes;
        jet_block_t *b = ref->block;
        char *addr = b->data + ref->off + c->off;
        urma_target_seg_t *seg = ep_seg_of(b, addr, take);
        if (seg) {
            jet__block_ref(b);
        } else {
            /* Not registered (user memory): copied into a pool block, which
             * is registered; never a failure. */
            jet_block_t *nb =
                jet__block_alloc(take < JET_BLOCK_SIZE_64K ? take : JET_BLOCK_SIZE_64K);
            if (!nb || !nb->region || !nb->region->reg) {
                if (nb) jet__block_unref(nb);
                if (nsge > 0) break;
                return -ENOMEM;
            }
            if (take > nb->cap) take = nb->cap;
            ep->wcnt.send_bounced++;
            memcpy(nb->data, addr, take);
            atomic_store_explicit(&nb->used, (uint32_t)take, memory_order_relaxed);
            b = nb;
            addr = nb->data;
            seg = nb->region->reg;
        }
        blk[nsge] = b;
        /* User memory sent where it is: its owner waits for its free
         * callback, which the WR's completion brings. */
        if (!b->region) ep->unsig_user = true;
        if (b != ep->unsig_last) {
            ep->unsig_hold += b->cap;
            ep->unsig_last = b;
        }
        sge[nsge] =
            (urma_sge_t){.addr = (uint64_t)(uintptr_t)addr, .len = (uint32_t)take, .tseg = seg};
        nsge++;
        bytes += take;
        c->off += (uint32_t)take;
    }
    ep->slot_n[slot] = nsge;
    if (nsge == 0) return 0;
    memset(wr, 0, sizeof *wr);
    wr->opcode = URMA_OPC_SEND;
    wr->tjetty = ep->tjetty;
    wr->user_ctx = jet__urma_ctx_make(ep->index, ep->gen, JET_URMA_CTX_KIND_DATA, seq);
    wr->send.src.sge = sge;
    wr->send.src.num_sge = nsge;
    return (ssize_t)bytes;
}

ssize_t jet__urma_ep_cut(jet_urma_ep_t *ep, jet_iobuf_t *const *bufs, int n)
{
    urma_jfs_wr_t wrs[EP_CHAIN];
    urma_sge_t sges[EP_CHAIN][JET_URMA_SGE_MAX];
    ssize_t total = 0;
    bool window_empty = false;
    for (;;) {
        ep_cursor_t c = {0, 0, 0};
        int k = 0;
        size_t chain_bytes = 0;
        while (k < EP_CHAIN) {
            /* Only this writer takes from the windows, so a positive value
             * cannot drop to 0 under us; the loop only gives back. */
            int32_t sw = atomic_load_explicit(&ep->sq_window, memory_order_acquire);
            int32_t rw = atomic_load_explicit(&ep->rq_window, memory_order_acquire);
            bool halted = atomic_load_explicit(&ep->send_halted, memory_order_acquire);
            if (sw <= 0 || rw <= 0 || halted) {
                window_empty = true;
                break;
            }
            uint32_t seq = atomic_load_explicit(&ep->head, memory_order_relaxed);
            ssize_t b = ep_build(ep, bufs, n, &c, seq, &wrs[k], sges[k]);
            if (b < 0) {
                if (k == 0 && total == 0) return b;
                break;
            }
            if (b == 0) break;
            /* Taken before posting: the completion may be handled on the loop
             * before the post returns. */
            atomic_fetch_sub_explicit(&ep->sq_window, 1, memory_order_relaxed);
            atomic_fetch_sub_explicit(&ep->rq_window, 1, memory_order_relaxed);
            ep->wcnt.data_wrs++;
            /* sw == 1: this WR empties the SQ window, and only a completion
             * at or after it gives slots back. The last WR of what there is
             * to send lets go of what the burst holds (EP_IDLE_HOLD, or user
             * memory at all). */
            bool sig = ++ep->unsig >= ep->sig_every || sw == 1;
            if (!sig && (ep->unsig_hold > EP_IDLE_HOLD || ep->unsig_user)) {
                ep_cursor_t rest = c;
                const jet_iobuf_ref_t *ref;
                sig = !ep_cursor_next(bufs, n, &rest, &ref);
            }
            if (sig) {
                wrs[k].flag.bs.complete_enable = URMA_COMPLETE_ENABLE;
                ep->unsig = 0;
                ep->unsig_hold = 0;
                ep->unsig_user = false;
                ep->unsig_last = NULL;
                ep->wcnt.signalled_wrs++;
            }
            if (ep->piggyback) {
                uint32_t cr = atomic_exchange_explicit(&ep->credits, 0, memory_order_acq_rel);
                wrs[k].opcode = URMA_OPC_SEND_IMM;
                wrs[k].send.imm_data = (uint64_t)seq << 32 | cr;
            }
            if (k > 0) wrs[k - 1].next = &wrs[k];
            atomic_store_explicit(&ep->head, seq + 1, memory_order_release);
            chain_bytes += (size_t)b;
            k++;
        }
        if (k == 0) break;
        urma_jfs_wr_t *bad = NULL;
        urma_status_t st = JET_URMA_FN(ep->ctx, urma_post_jetty_send_wr)(ep->js->jetty, wrs, &bad);
        if (st != URMA_SUCCESS) {
            /* The socket fails; the ring slots of WRs that were not posted
             * are released with the rest when the jetty is flushed. */
            JET_WARN("URMA connection %s: posting a send failed: status %d",
                     ep->s ? ep->s->peer : "?", st);
            return -EIO;
        }
        size_t left = chain_bytes;
        for (int i = 0; i < n && left > 0; i++)
            left -= jet_iobuf_pop_front(bufs[i], left);
        total += (ssize_t)chain_bytes;
        if (window_empty || k < EP_CHAIN) break;
    }
    if (total > 0) return total;
    if (!window_empty) return 0;
    ep->wcnt.window_waits++;
    return -EAGAIN;
}

void jet__urma_ep_drain(jet_urma_ep_t *ep)
{
    if (ep->connected && !ep->draining) jet__urma_loop_drain(ep->ul);
}

int jet__urma_ep_wait_writable(jet_urma_ep_t *ep)
{
    /* Same thread as the completions that open the windows: nothing can
     * have opened them since the cut that saw them closed. */
    ep->want_wake = true;
    return 0;
}

/* Sends the credits not reported yet in a credit message when there are more
 * than `above`. */
static void ep_flush_credits(jet_urma_ep_t *ep, uint32_t above)
{
    if (!ep->connected || ep->draining || ep->fail_what) return;
    uint32_t c = atomic_load_explicit(&ep->credits, memory_order_relaxed);
    if (c <= above) return;
    if (atomic_load_explicit(&ep->imm_slots, memory_order_relaxed) <= 0) return;
    c = atomic_exchange_explicit(&ep->credits, 0, memory_order_acq_rel);
    if (c == 0) return;
    atomic_fetch_sub_explicit(&ep->imm_slots, 1, memory_order_relaxed);
    urma_jfs_wr_t wr;
    memset(&wr, 0, sizeof wr);
    wr.opcode = URMA_OPC_SEND_IMM;
    wr.flag.bs.complete_enable = URMA_COMPLETE_ENABLE;
    wr.flag.bs.solicited_enable = URMA_SOLICITED_ENABLE;
    wr.tjetty = ep->tjetty;
    wr.user_ctx = jet__urma_ctx_make(ep->index, ep->gen, JET_URMA_CTX_KIND_CREDIT, 0);
    wr.send.imm_data = c; /* host order, as brpc */
    urma_jfs_wr_t *bad = NULL;
    urma_status_t st = JET_URMA_FN(ep->ctx, urma_post_jetty_send_wr)(ep->js->jetty, &wr, &bad);
    if (st != URMA_SUCCESS) {
        atomic_fetch_add(&ep->imm_slots, 1);
        ep_fail(ep, -EIO, "posting a credit message failed", -1);
        return;
    }
    ep->cnt->credit_msgs++;
}

/* Credits wait for the next data WR (piggybacked, or brpc's way, in a
 * message once half the window is owed). */
static void ep_send_credits(jet_urma_ep_t *ep)
{
    ep_flush_credits(ep, ep->credit_batch);
}

/* ---- completions -------------------------------------------------------------- */

/* Releases the data WRs up to and including the one of sequence seq (the
 * low 28 bits): a completion covers every WR posted before it. */
static bool ep_release_to(jet_urma_ep_t *ep, uint32_t seq)
{
    uint32_t head = atomic_load_explicit(&ep->head, memory_order_acquire);
    uint32_t outstanding = head - ep->tail;
    uint32_t k = ((seq - ep->tail) & JET_URMA_CTX_VALUE_MASK) + 1;
    if (k > outstanding) return false;
    for (uint32_t j = 0; j < k; j++)
        ep_slot_release(ep, ep->tail + j);
    ep->tail += k;
    atomic_fetch_add_explicit(&ep->sq_window, (int32_t)k, memory_order_release);
    return true;
}

static void ep_release_all(jet_urma_ep_t *ep)
{
    uint32_t head = atomic_load_explicit(&ep->head, memory_order_acquire);
    while (ep->tail != head)
        ep_slot_release(ep, ep->tail++);
}

/* A zero-copied receive pins its whole buffer until the parser's user lets
 * the message go (a handler that keeps a request, a response held by its
 * caller): receives under this fraction of a buffer are copied whatever
 * urma_zerocopy_min_size says, so that held messages pin at most this many
 * times their size. brpc's 512 with its 8 KiB buffers is the same 16; with
 * 64 KiB buffers 512-byte receives would pin 128 times theirs. */
#define EP_ZC_MAX_PIN 16

/* The receive's own block b joins the read buffer with its len bytes: no
 * block is allocated (the buffer's reference array may grow: false when
 * that failed, b is then freed). */
static bool ep_block_joins(jet_urma_ep_t *ep, jet_block_t *b, uint32_t len)
{
    atomic_store_explicit(&b->used, len, memory_order_relaxed);
    jet_iobuf_t one;
    jet_iobuf_init(&one);
    one.refs[0] = (jet_iobuf_ref_t){.block = b, .off = 0, .len = len};
    one.nref = 1;
    one.len = len;
    if (jet_iobuf_move(&ep->s->read_buf, &one) == 0) return true;
    jet_iobuf_fini(&one);
    return false;
}

/* The len bytes received in *b_p go to the read buffer: copied (*b_p is
 * re-posted), or the block itself (zero-copy: *b_p becomes a fresh block to
 * re-post; copied when there is no fresh block). 1 when there was memory for
 * neither: the block itself went, and
 * *b_p is NULL (the caller's slot starves, ep_starve); -1 when the
 * connection failed (*b_p NULL). */
static int ep_to_read_buf(jet_urma_ep_t *ep, jet_block_t **b_p, uint32_t len)
{
    jet_block_t *b = *b_p;
    int32_t min = JET_FLAG(urma_zerocopy_min_size); /* one stored below 0 acts as 0 */
    bool zc = JET_FLAG(urma_recv_zerocopy) && (min <= 0 || len >= (uint32_t)min) &&
              len >= ep->recv_size / EP_ZC_MAX_PIN;
    jet_block_t *fresh = zc ? jet__block_alloc(ep->recv_size) : NULL;
    /* Also when no fresh block came: another size class may have room. */
    if (!fresh && jet_iobuf_append(&ep->s->read_buf, b->data, len) == 0) {
        ep->cnt->recv_copied++;
        return 0;
    }
    *b_p = NULL;
    if (!ep_block_joins(ep, b, len)) {
        if (fresh) jet__block_unref(fresh);
        ep_fail(ep, -ENOMEM, "out of memory for received bytes", -1);
        return -1;
    }
    if (!fresh) {
        ep->cnt->recv_starved++;
        return 1;
    }
    *b_p = fresh;
    ep->cnt->recv_zerocopy++;
    return 0;
}

static void ep_retry_timeout(jet_timer_t *t);

/* The retry timer runs at at_us, or earlier if it was set so. */
static void ep_retry_at(jet_urma_ep_t *ep, int64_t at_us)
{
    if (jet_timer_armed(&ep->retry_timer) && ep->retry_timer.deadline_us <= at_us) return;
    ep->retry_timer.fn = ep_retry_timeout;
    jet_loop_timer_start(jet__urma_loop_of(ep->ul), &ep->retry_timer, at_us);
}

/* A receive of slot gave its block to the read buffer for want of memory:
 * the slot waits for a fresh block (ep_feed_starved), and its credit with
 * it. */
static void ep_starve(jet_urma_ep_t *ep, uint32_t slot)
{
    if (!ep->starve_logged) {
        ep->starve_logged = true;
        JET_WARN_PEER("URMA connection %s: no memory for a receive (iobuf_max_mb): its buffer "
                      "goes to the parser, and its credit waits for memory",
                      ep->s->peer);
    }
    ep->starved[ep->nstarved++] = slot;
}

/* The starved slots keep the peer short of its window: they hold back more
 * credits than a batch (which the peer may be waiting for; brpc's waits for
 * a whole window of its own size, unknown here). Not while input is paused:
 * that keeps credits back on purpose. */
static bool ep_starve_blocks_peer(const jet_urma_ep_t *ep)
{
    return ep->nstarved > ep->credit_batch && !ep_withholds(ep);
}

/* Starved receives get fresh blocks while there is memory, and are then
 * re-posted and credited as the others; the rest wait (EP_STARVE_US). False
 * when the connection failed. */
static bool ep_feed_starved(jet_urma_ep_t *ep)
{
    bool fed = false;
    while (ep->nstarved > 0) {
        jet_block_t *b = jet__block_alloc(ep->recv_size);
        if (!b) break;
        uint32_t slot = ep->srq ? ep->nrepost : ep->starved[ep->nstarved - 1];
        ep->nstarved--;
        ep->held[slot] = b;
        ep->repost[ep->nrepost++] = slot;
        fed = true;
    }
    int64_t now = jet_now_us();
    if (!ep_starve_blocks_peer(ep)) {
        ep->starved_us = 0;
        if (ep->nstarved > 0) ep_retry_at(ep, now + EP_STARVE_IDLE_US);
        return true;
    }
    if (fed || ep->starved_us == 0) ep->starved_us = now;
    if (now - ep->starved_us >= EP_STARVE_US) {
        ep_fail(ep, -ENOMEM, "no memory for its receive buffers in 200 ms", -1);
        return false;
    }
    jet_socket_t *s = ep->s;
    if (now - ep->nomem_ask_us >= EP_NOMEM_ASK_US && !jet__socket_failed(s) && s->handler &&
        s->handler->on_nomem) {
        ep->nomem_ask_us = now;
        (void)s->handler->on_nomem(s);
    }
    ep_retry_at(ep, now + EP_RETRY_US);
    return true;
}

/* The sender of a receive is the connection's peer. The sheet says to match
 * on EID and id; a jetrpc hello carries the EID of the context its jetty
 * sends from, so both are compared. A brpc hello carries its device's first
 * EID, not the EID its jetty sends from (another eid_index sends from
 * another one): its messages are matched by jetty id only, since an EID
 * match could drop every message of such a peer. */
static bool ep_from_peer(const jet_urma_ep_t *ep, const urma_cr_t *cr)
{
    if (!cr->remote_id.id) return true; /* a provider that does not say */
    return cr->remote_id.id == ep->peer_jetty &&
           (!ep->peer_eid_known || memcmp(cr->remote_id.eid.raw, ep->peer_eid, 16) == 0);
}

/* A receive's block goes back to its queue: the loop's shared one (which
 * keeps what it has no room for), or slot of ep's own: -EAGAIN when the
 * provider has no room (b is the caller's still), freed when it fails. */
static int ep_give_back(jet_urma_ep_t *ep, uint32_t slot, jet_block_t *b)
{
    if (ep->srq) return jet__urma_loop_srq_give(ep->ul, b);
    int rc = ep_post_recv(ep, slot, b);
    if (rc < 0 && rc != -EAGAIN) jet__block_unref(b);
    return rc;
}

/* The provider refused a re-post for want of room: everything waits for
 * the retry timer. */
static void ep_refused(jet_urma_ep_t *ep)
{
    ep->cnt->recv_refused++;
    ep->refused_us = jet_now_us();
    ep_retry_at(ep, ep->refused_us + EP_RETRY_US);
}

/* A receive that is no credit goes back to ep's queue, or waits in held for
 * the retry when the provider has no room. */
static void ep_give_back_unowed(jet_urma_ep_t *ep, uint32_t slot, jet_block_t *b)
{
    int rc = ep->refused_us ? -EAGAIN : ep_give_back(ep, slot, b);
    if (rc == -EAGAIN) {
        if (ep->refused_us == 0) ep_refused(ep);
        ep->held[slot] = b;
        ep->pend[ep->npend++] = slot;
        return;
    }
    if (rc < 0) ep_fail(ep, -EIO, "re-posting a receive failed", -1);
}

/* A receive's block is freed instead (the loop makes up a shared one). */
static void ep_drop(jet_urma_ep_t *ep, jet_block_t *b)
{
    jet__block_unref(b);
    if (ep->srq) jet__urma_loop_srq_give(ep->ul, NULL);
}

/* One receive of ep: b, taken from slot of ep's queue, or from the shared
 * queue (slot unused). */
static void ep_recv_block(jet_urma_ep_t *ep, const urma_cr_t *cr, uint32_t slot, jet_block_t *b)
{
    if (ep->draining || !ep->s) {
        ep_put_block(ep, b);
        return;
    }
    if (cr->status != URMA_CR_SUCCESS) {
        ep_drop(ep, b);
        ep_fail(ep, -EIO, "a receive", cr->status);
        return;
    }
    if (!ep->connected || !ep_from_peer(ep, cr)) {
        /* A message from another sender: the previous peer of this
         * recycled jetty (a peer can send only after we imported it), or
         * anyone else who imported it. Dropped, never parsed. */
        JET_LOG_ONCE(JET_LOG_INFO,
                     "URMA: dropped a message from jetty %u (the connection's "
                     "peer is jetty %u)",
                     cr->remote_id.id, ep->peer_jetty);
        ep_give_back_unowed(ep, slot, b);
        return;
    }
    uint32_t len = cr->completion_len;
    if (ep->piggyback && len > 0) {
        if (cr->opcode != URMA_CR_OPC_SEND_WITH_IMM ||
            (uint32_t)(cr->imm_data >> 32) != ep->rx_seq) {
            ep_drop(ep, b);
            ep_fail(ep, -EIO, "a message from the peer is missing (one of its sends failed)", -1);
            return;
        }
        ep->rx_seq++;
    }
    if (cr->opcode == URMA_CR_OPC_SEND_WITH_IMM) {
        uint64_t imm = ep->piggyback ? (uint32_t)cr->imm_data : cr->imm_data;
        if (imm > 0) {
            int32_t old = atomic_load_explicit(&ep->rq_window, memory_order_relaxed);
            if (imm > ep->rq_cap || (uint64_t)old + imm > ep->rq_cap) {
                ep_drop(ep, b);
                ep_fail(ep, -EPROTO, "the peer returned more credits than it was owed", -1);
                return;
            }
            atomic_fetch_add_explicit(&ep->rq_window, (int32_t)imm, memory_order_release);
        }
    } else if (cr->opcode != URMA_CR_OPC_SEND || len == 0) {
        ep_drop(ep, b);
        ep_fail(ep, -EPROTO, "a receive that is neither data nor credits", -1);
        return;
    }
    if (len > ep->recv_size) {
        ep_drop(ep, b);
        ep_fail(ep, -EPROTO, "a receive longer than its buffer", -1);
        return;
    }
    if (len > 0) {
        /* Data beyond the credits granted (receives not credited back yet:
         * held here, or re-posted and not reported) is the peer's error; on
         * a shared queue nothing else would hold it back. */
        if (ep_owed(ep) >= ep->rq) {
            ep_drop(ep, b);
            ep_fail(ep, -EPROTO, "the peer sent more messages than its credits allow", -1);
            return;
        }
        if (ep->srq) slot = ep->nrepost;
        int rc = ep_to_read_buf(ep, &b, len);
        if (rc < 0) {
            if (ep->srq) jet__urma_loop_srq_give(ep->ul, NULL);
            return;
        }
        ep->got_bytes = true;
        if (rc > 0) {
            ep_starve(ep, slot); /* on a shared queue it keeps its buffer's place */
            return;
        }
        ep->held[slot] = b;
        ep->repost[ep->nrepost++] = slot;
        return;
    }
    /* Credit messages land in the reserved receives and are not owed. */
    ep_give_back_unowed(ep, slot, b);
}

static void ep_on_recv(jet_urma_ep_t *ep, const urma_cr_t *cr, uint32_t slot)
{
    if (ep->srq || slot >= ep->rq || !ep->rbufs[slot]) {
        ep_fail(ep, -EPROTO, "a receive completion names no posted buffer", -1);
        return;
    }
    jet_block_t *b = ep->rbufs[slot];
    ep->rbufs[slot] = NULL;
    ep->posted--;
    ep_recv_block(ep, cr, slot, b);
}

static void ep_check_drained(jet_urma_ep_t *ep)
{
    /* Not while the move to ERROR is out: its job still names the queues
     * (a flush may complete on the loop before the job's answer comes). */
    if (ep->draining && !ep->close_pending && ep->sq_flushed && ep->posted == 0)
        ep_finish(ep, true);
}

/* After a completion of ep: a draining endpoint may end (then false). */
static bool ep_after_cr(jet_urma_ep_t *ep)
{
    if (ep->draining) {
        ep_check_drained(ep); /* may free ep */
        return false;
    }
    if (ep->touched) return false;
    ep->touched = true;
    return true;
}

bool jet__urma_ep_on_srq_recv(jet_urma_ep_t *ep, const urma_cr_t *cr, jet_block_t *b)
{
    ep_recv_block(ep, cr, 0, b);
    return ep_after_cr(ep);
}

bool jet__urma_ep_on_cr(jet_urma_ep_t *ep, const urma_cr_t *cr)
{
    uint32_t kind = jet__urma_ctx_kind(cr->user_ctx);
    uint32_t value = jet__urma_ctx_value(cr->user_ctx);
    switch (kind) {
    case JET_URMA_CTX_KIND_DATA:
        if (!ep_release_to(ep, value) && !ep->draining)
            ep_fail(ep, -EPROTO, "a send completion names no outstanding WR", -1);
        if (cr->status != URMA_CR_SUCCESS) ep_fail_after_batch(ep, "a send", cr->status);
        break;
    case JET_URMA_CTX_KIND_CREDIT:
        if (atomic_fetch_add(&ep->imm_slots, 1) >= EP_RESERVED && !ep->draining)
            ep_fail(ep, -EPROTO, "a credit completion with no credit message out", -1);
        if (cr->status != URMA_CR_SUCCESS) ep_fail_after_batch(ep, "a credit message", cr->status);
        break;
    case JET_URMA_CTX_KIND_RECV:
        ep_on_recv(ep, cr, value);
        break;
    default:
        if (!ep->draining) ep_fail(ep, -EPROTO, "a completion of an unknown kind", -1);
        break;
    }
    return ep_after_cr(ep);
}

/* Posts the held receives again, those that are no credit first; each
 * data one is a credit owed. What the provider has no room for stays held
 * for the retry timer. */
static void ep_repost_held(jet_urma_ep_t *ep)
{
    if (ep->nstarved > 0 && !ep_feed_starved(ep)) return;
    if (ep->refused_us) return; /* refused a moment ago: the timer tries again */
    while (ep->npend > 0) {
        uint32_t slot = ep->pend[ep->npend - 1];
        int rc = ep_give_back(ep, slot, ep->held[slot]);
        if (rc == -EAGAIN) {
            ep_refused(ep);
            return;
        }
        ep->held[slot] = NULL;
        ep->npend--;
        if (rc < 0) {
            ep_fail(ep, -EIO, "re-posting a receive failed", -1);
            return;
        }
    }
    bool withhold = ep_withholds(ep);
    uint32_t n = ep->nrepost, i = 0;
    for (; i < n; i++) {
        uint32_t slot = ep->repost[i];
        int rc = ep_give_back(ep, slot, ep->held[slot]);
        if (rc == -EAGAIN) break;
        ep->held[slot] = NULL;
        if (rc < 0) {
            for (uint32_t j = i + 1; j < n; j++) {
                ep_drop(ep, ep->held[ep->repost[j]]);
                ep->held[ep->repost[j]] = NULL;
            }
            ep->nrepost = 0;
            ep_fail(ep, -EIO, "re-posting a receive failed", -1);
            return;
        }
    }
    if (i > 0 && withhold)
        ep->withheld += i;
    else if (i > 0)
        atomic_fetch_add_explicit(&ep->credits, i, memory_order_relaxed);
    ep->nrepost = n - i;
    if (i < n) {
        memmove(ep->repost, ep->repost + i, (size_t)(n - i) * sizeof *ep->repost);
        ep_refused(ep);
    }
}

void jet__urma_ep_read_resumed(jet_urma_ep_t *ep)
{
    if (!ep->s || ep->draining || !ep->started) return;
    ep_repost_held(ep);
    ep_release_withheld(ep);
    /* The peer may wait with an empty window: the credits go now. */
    ep_flush_credits(ep, 0);
}

static void ep_retry_timeout(jet_timer_t *t)
{
    jet_urma_ep_t *ep = (jet_urma_ep_t *)((char *)t - offsetof(jet_urma_ep_t, retry_timer));
    ep->refused_us = 0;
    if (!ep->s || ep->draining) return; /* the held blocks go with ep_finish */
    ep_repost_held(ep);
    /* The peer may have stopped for want of credits, with nothing of ours
     * on the way to carry them: they go now. */
    ep_flush_credits(ep, 0);
}

/* A busy-polled loop re-posts a small batch's receives at its next pass:
 * a caller waiting for this batch's answer gets it without the posts in
 * between (the pass after it runs while its next request travels). Only
 * while the peer keeps at least half of its window (the receives held and
 * the credits not reported yet are what it lacks), so that the wait (a
 * guest's loop may stay undriven up to event_guest_park_solitary_us) never
 * holds the peer back. */
static bool ep_repost_may_wait(const jet_urma_ep_t *ep)
{
    return ep->nrepost <= EP_DEFER_MAX && ep_owed(ep) <= ep->credit_batch;
}

uint32_t jet__urma_ep_held(const jet_urma_ep_t *ep)
{
    return ep->nrepost;
}

void jet__urma_ep_run_deferred(jet_urma_ep_t *ep)
{
    ep->repost_deferred = false;
    if (!ep->s || ep->draining) return; /* the held blocks go with ep_finish */
    ep_repost_held(ep);
    ep_send_credits(ep);
}

bool jet__urma_ep_batch_end(jet_urma_ep_t *ep)
{
    ep->touched = false;
    if (!ep->s || ep->draining) return false;
    jet_socket_t *s = ep->s;
    /* The bytes first: their receives are re-posted after the handlers they
     * reach have run (and answered), so that no post delays the answer. The
     * peer's window is short of this batch meanwhile, never of more. */
    if (ep->got_bytes && ep->started) ep_deliver(ep);
    if (!ep->s || ep->draining) return false; /* the held blocks go with ep_finish */
    if (ep->fail_what) {
        /* Gone (its process ended, most likely): EEOF, as TCP reports it. */
        bool gone = ep_peer_closed(ep);
        const char *what = gone ? "the peer closed the connection; a send" : ep->fail_what;
        ep->fail_what = NULL;
        ep_fail(ep, gone ? -JET_EEOF : -EIO, what, ep->fail_status);
        return false;
    }
    if (ep->nrepost > 0 && !ep->repost_deferred && ep_repost_may_wait(ep))
        ep->repost_deferred = jet__urma_loop_defer(ep->ul, ep);
    if (!ep->repost_deferred) ep_repost_held(ep);
    ep_send_credits(ep);
    if (ep->want_wake && ep->s && atomic_load(&ep->sq_window) > 0 &&
        atomic_load(&ep->rq_window) > 0) {
        ep->want_wake = false;
        jet__socket_writable(s);
    }
    return ep->s && ep->started && !jet__socket_failed(ep->s) && !jet_iobuf_empty(&ep->s->read_buf);
}

uint32_t jet__urma_ep_flush_id(const jet_urma_ep_t *ep)
{
    return ep->js && ep->draining && !ep->sq_flushed ? ep->js->jetty->jetty_id.id : 0;
}

void jet__urma_ep_on_flush_done(jet_urma_ep_t *ep)
{
    /* Everything posted on the SQ has completed or been flushed. */
    ep->sq_flushed = true;
    ep_release_all(ep);
    ep_check_drained(ep);
}

/* ---- close -------------------------------------------------------------------- */

static void ep_drain_timeout(jet_timer_t *t)
{
    jet_urma_ep_t *ep = (jet_urma_ep_t *)((char *)t - offsetof(jet_urma_ep_t, drain_timer));
    JET_WARN("URMA: a closed connection's queues did not drain in %d ms (%u receives "
             "outstanding, sq %s): its jetty is destroyed instead of reused",
             EP_DRAIN_MS, ep->posted, ep->sq_flushed ? "flushed" : "not flushed");
    ep_finish(ep, false);
}

/* ERROR flushes the SQ (one FLUSH_ERR_DONE at the end) and the JFR gives
 * every posted receive back: then no buffer can be written any more. Any
 * thread (kernel calls on hardware). */
static void ep_to_error(const jet_urma_ctx_t *ctx, urma_jetty_t *jetty, urma_jfr_t *jfr,
                        bool *jetty_ok, bool *jfr_ok)
{
    urma_jetty_attr_t ja = {.mask = JETTY_STATE, .state = URMA_JETTY_STATE_ERROR};
    *jetty_ok = JET_URMA_FN(ctx, urma_modify_jetty)(jetty, &ja) == URMA_SUCCESS;
    urma_jfr_attr_t ra = {.mask = JFR_STATE, .state = URMA_JFR_STATE_ERROR};
    /* A shared receive queue stays: the loop owns its buffers. */
    *jfr_ok = !jfr || (JET_URMA_FN(ctx, urma_modify_jfr) &&
                       JET_URMA_FN(ctx, urma_modify_jfr)(jfr, &ra) == URMA_SUCCESS);
}

/* Loop thread: the queues are in ERROR (or refused it). */
static void ep_in_error(jet_urma_ep_t *ep, bool jetty_ok, bool jfr_ok)
{
    ep->close_pending = false;
    if (!jetty_ok) ep->sq_flushed = true; /* no flush record will come */
    if (!jetty_ok || !jfr_ok) {
        ep_finish(ep, false);
        return;
    }
    ep->drain_timer.fn = ep_drain_timeout;
    jet_loop_timer_start(jet__urma_loop_of(ep->ul), &ep->drain_timer,
                         jet_now_us() + (int64_t)EP_DRAIN_MS * 1000);
    ep_check_drained(ep);
}

typedef struct ep_close_job {
    jet_urma_work_t w;
    jet_urma_ep_t *ep; /* not touched off the loop */
    const jet_urma_ctx_t *ctx;
    urma_jetty_t *jetty;
    urma_jfr_t *jfr;
    bool jetty_ok, jfr_ok;
} ep_close_job_t;

static void ep_close_run(jet_urma_work_t *w)
{
    ep_close_job_t *j = (ep_close_job_t *)w;
    ep_to_error(j->ctx, j->jetty, j->jfr, &j->jetty_ok, &j->jfr_ok);
}

static void ep_close_done(jet_task_t *t)
{
    ep_close_job_t *j = (ep_close_job_t *)t;
    jet_urma_ep_t *ep = j->ep;
    bool jetty_ok = j->jetty_ok, jfr_ok = j->jfr_ok;
    free(j);
    ep_in_error(ep, jetty_ok, jfr_ok);
}

void jet__urma_ep_close(jet_urma_ep_t *ep)
{
    ep->s = NULL;
    ep->started = false;
    ep->want_wake = false;
    if (ep->draining) return;
    ep->draining = true;
    if (ep->awaiting) return; /* ended when its set comes (jet__urma_ep_set_arrived) */
    if (!ep->js) {
        ep_finish(ep, false); /* no set came: nothing was posted */
        return;
    }
    ep->close_pending = true;
    /* The move to ERROR is a kernel call on hardware: on an import thread,
     * while the loop serves the others (the endpoint, draining, drops what
     * still completes meanwhile). */
    ep_close_job_t *j = calloc(1, sizeof *j);
    if (j) {
        j->ep = ep;
        j->ctx = ep->ctx;
        j->jetty = ep->js->jetty;
        j->jfr = ep_own_jfr(ep);
        j->w.task.fn = ep_close_done;
        j->w.loop = jet__urma_loop_of(ep->ul);
        j->w.run = ep_close_run;
        if (jet__urma_work_start(&j->w) == 0) return;
        free(j);
    }
    bool jetty_ok, jfr_ok;
    ep_to_error(ep->ctx, ep->js->jetty, ep_own_jfr(ep), &jetty_ok, &jfr_ok);
    ep_in_error(ep, jetty_ok, jfr_ok);
}

/* Loop thread, a set that did not drain: the blocks its queues may still
 * use (posted receives, sends not completed), taken out of ep into a new
 * array (*v_p, *n_p entries; NULL and 0 when there are none). False when
 * memory is short: they stay in ep. */
static bool ep_take_busy(jet_urma_ep_t *ep, jet_block_t ***v_p, uint32_t *n_p)
{
    uint32_t head = atomic_load_explicit(&ep->head, memory_order_acquire), n = 0;
    for (uint32_t q = ep->tail; q != head; q++)
        n += ep->slot_n[q % ep->sq];
    for (uint32_t i = 0; i < ep->rq; i++)
        n += ep->rbufs[i] != NULL;
    *v_p = NULL;
    *n_p = 0;
    if (n == 0) return true;
    jet_block_t **v = malloc(n * sizeof *v);
    if (!v) return false;
    *v_p = v;
    for (; ep->tail != head; ep->tail++) {
        uint32_t slot = ep->tail % ep->sq;
        jet_block_t **blk = ep->slot_blk + (size_t)slot * ep->max_sge;
        for (uint32_t k = 0; k < ep->slot_n[slot]; k++) {
            v[(*n_p)++] = blk[k];
            blk[k] = NULL;
        }
        ep->slot_n[slot] = 0;
    }
    for (uint32_t i = 0; i < ep->rq; i++) {
        if (ep->rbufs[i]) v[(*n_p)++] = ep->rbufs[i];
        ep->rbufs[i] = NULL;
    }
    return true;
}

static void ep_finish(jet_urma_ep_t *ep, bool reuse)
{
    jet_urma_loop_t *ul = ep->ul;
    jet_loop_timer_stop(jet__urma_loop_of(ul), &ep->drain_timer);
    jet_loop_timer_stop(jet__urma_loop_of(ul), &ep->retry_timer);
    ep->cnt->data_wrs += ep->wcnt.data_wrs;
    ep->cnt->signalled_wrs += ep->wcnt.signalled_wrs;
    ep->cnt->send_bounced += ep->wcnt.send_bounced;
    ep->cnt->window_waits += ep->wcnt.window_waits;
    jet_urma_jset_t *js = ep->js;
    ep->js = NULL;
    if (ep->jetty_bound) jet__urma_loop_unbind_jetty(ul, ep, js->jetty->jetty_id.id);
    ep->jetty_bound = false;
    bool quiet = reuse && !ep->no_reuse && ep->posted == 0 && ep->sq_flushed;
    jet_urma_leftovers_t left = {.tjetty = ep->tjetty, .tseg = ep->tseg};
    ep->tjetty = NULL;
    ep->tseg = NULL;
    if (js && !quiet && ep_take_busy(ep, &left.blocks, &left.nblocks)) {
        /* Buffers still posted may be written, and sends read (toward the
         * imported peer), until the queues are gone: they go with the set
         * to its destruction, off the loop. */
        jet__urma_loop_discard(ul, ep, ep->sq, ep_set_rq(ep), js, &left);
        quiet = true; /* what is left in ep is not the queues' */
    } else if (js && !quiet) {
        /* Memory is short: here. A set that stays keeps its peer imported. */
        quiet = jet__urma_loop_destroy_set(ul, js);
        jet__urma_loop_detach(ul, ep, ep->sq, ep_set_rq(ep));
        if (quiet) jet__urma_unimport_later(jet__urma_loop_of(ul), left.tjetty, left.tseg);
    } else {
        /* Drained (nothing can complete or be written any more: the set is
         * reset for the pool off the loop), or no set ever came. Recycled
         * first, so that the refill the detach starts counts it. */
        if (js) jet__urma_loop_recycle(ul, js);
        jet__urma_loop_detach(ul, ep, ep->sq, ep_set_rq(ep));
        jet__urma_unimport_later(jet__urma_loop_of(ul), left.tjetty, left.tseg);
        quiet = true;
    }
    /* A set that stays (its jetty could not be destroyed, nor flushed) may
     * still read what its sends point to: those blocks are leaked with it,
     * as its receive buffers are below. */
    if (quiet) ep_release_all(ep);
    if (ep->srq_joined) {
        /* First: what it gives back beyond the loop's new target is freed. */
        jet__urma_loop_srq_leave(ul, ep->rq);
        ep->srq_joined = false;
    }
    /* A starved receive's buffer went to the parser: the shared queue
     * makes up one. */
    for (; ep->srq && ep->nstarved > 0; ep->nstarved--)
        jet__urma_loop_srq_give(ul, NULL);
    for (uint32_t i = 0; i < ep->rq; i++) {
        if (ep->held[i]) ep_put_block(ep, ep->held[i]);
        ep->held[i] = NULL;
        if (!ep->rbufs[i]) continue;
        if (quiet) jet__block_unref(ep->rbufs[i]); /* else leaked with the set */
        ep->rbufs[i] = NULL;
    }
    ep_free(ep);
}

int jet__urma_ep_debug(const jet_urma_ep_t *ep, char *buf, size_t len)
{
    return snprintf(buf, len,
                    "jetty=%u peer_jetty=%u sq_win=%d rq_win=%d imm=%d credits=%u posted=%u "
                    "inflight=%u cap=%u/%u/%u piggyback=%d",
                    ep->js ? ep->js->jetty->jetty_id.id : 0, ep->peer_jetty,
                    atomic_load(&ep->sq_window), atomic_load(&ep->rq_window),
                    atomic_load(&ep->imm_slots), atomic_load(&ep->credits), ep->posted,
                    atomic_load(&ep->head) - ep->tail, ep->sq_cap, ep->rq_cap, ep->remote_cap,
                    ep->piggyback);
}
