/* The process-wide URMA context and the per-loop resources.
 *
 * Global: created once, on first use (jet__urma_ctx_get, from the
 * transport's global_init at channel/server start): liburma loaded (flag
 * urma_lib, else the standard names), urma_init, the device (urma_device,
 * default the first) and EID (urma_eid_index), one urma context, the device
 * caps, and the block pool's registrar (every region registered as a
 * segment: token policy NONE, access READ|WRITE|ATOMIC). Any failure makes
 * URMA "unavailable": the reason is logged once and every URMA channel and
 * server then runs over TCP. Never torn down (liburma may not be unloaded
 * while blocks registered with it can still be referenced).
 *
 * Per event loop (jet_urma_loop_t, allocated on the loop's own thread when
 * it first carries a URMA connection): a JFC shared by the connections of
 * the loop, sized by urma_jfc_depth (capped by the device), and another one
 * whenever those made are full, up to urma_jfc_per_loop; in event mode
 * one JFCE that all of them signal, whose fd is a jet_io of the loop (wait
 * -> ack -> poll -> rearm -> poll), in polling mode a jet_poller of the
 * loop instead (registered while the loop has URMA connections with
 * queues); every poll visits each JFC; the shared receive queue
 * (urma_shared_rq_size > 0, the default: one JFR made with the JFC, see
 * below); a pool of prepared jetty sets (a jetty on the shared JFR, or with
 * urma_shared_rq_size=0 a JFR + jetty, on the loop JFC), taken by endpoints
 * and returned after a reset; and the endpoint table that maps a
 * completion's user_ctx to its endpoint. All of it is touched only on that loop's thread:
 * completions of a connection are handled on the thread that owns its socket, with no hop. The
 * provider calls that may block (creating the JFC, creating, resetting and destroying sets) run on
 * the import threads (urma_import.h); a connection that needs one waits for its result without
 * holding the loop.
 *
 * Capacity: the shared receive queue reserves its depth of the loop's first
 * JFC, every endpoint sq + 4 entries (sq + rq + 4 with its own JFR; flush
 * completions included) of the JFC its set completes into; a new
 * connection goes to the first JFC with room, else to a new one (made off
 * the loop while it waits); when urma_jfc_per_loop JFCs are full (or a new
 * one cannot be made) it is refused URMA and runs over TCP. A JFC past the
 * first that has carried no connection and no set for urma_jfc_idle_ms is
 * deleted (off the loop); the first is kept for the life of the process. */
#ifndef JET_URMA_URMA_CONTEXT_H
#define JET_URMA_URMA_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "event/loop.h"
#include "iobuf/block_pool.h"
#include "jetrpc/flags.h"
#include "urma/urma_api.h"
#include "urma/urma_loader.h"

JET_FLAG_DECLARE_INT32(urma_sq_size);
JET_FLAG_DECLARE_INT32(urma_rq_size);
JET_FLAG_DECLARE_INT32(urma_recv_block_size);
JET_FLAG_DECLARE_INT32(urma_zerocopy_min_size);
JET_FLAG_DECLARE_BOOL(urma_recv_zerocopy);
JET_FLAG_DECLARE_INT32(urma_cqe_poll_once);
JET_FLAG_DECLARE_INT32(urma_prepared_jetty_cnt);
JET_FLAG_DECLARE_BOOL(urma_use_polling);
JET_FLAG_DECLARE_INT32(urma_poller_num);
JET_FLAG_DECLARE_BOOL(urma_poller_yield);
JET_FLAG_DECLARE_INT32(urma_client_handshake_version);
JET_FLAG_DECLARE_INT32(urma_max_sge);
JET_FLAG_DECLARE_INT32(urma_handshake_timeout_ms);
JET_FLAG_DECLARE_INT32(urma_jfc_depth);
JET_FLAG_DECLARE_INT32(urma_jfc_per_loop);
JET_FLAG_DECLARE_INT32(urma_jfc_idle_ms);
JET_FLAG_DECLARE_INT32(urma_event_spin_auto_us);
JET_FLAG_DECLARE_BOOL(urma_jetrpc_extensions);

typedef struct jet_urma_ctx {
    jet_urma_lib_t lib;
    urma_device_t *dev;
    urma_context_t *uctx;
    char dev_name[64];
    uint32_t eid_index;
    uint32_t tp_type; /* URMA_CTP or URMA_RTP, advertised in hellos */
    uint8_t priority; /* JFS priority for tp_type */
    /* device caps (the stable prefix of urma_device_attr_t) */
    uint32_t max_jfc_depth, max_jfs_depth, max_jfr_depth;
    uint32_t max_jfs_sge, max_jfr_sge;
    uint64_t max_msg_size;
    /* The segment advertised in hellos, which brpc peers import: a page of
     * its own with remote access. The block pool's regions are registered
     * for local access only. */
    urma_target_seg_t *hello_seg;
} jet_urma_ctx_t;

#define JET_URMA_FN(ctx, name) ((ctx)->lib.fn.name)

/* The context, initialised on first call (may block: loads the library and
 * opens the device); NULL when URMA is unavailable in this process. Any
 * thread. */
const jet_urma_ctx_t *jet__urma_ctx_get(void);
/* Why URMA is unavailable ("" when it is available or not tried yet). */
const char *jet__urma_ctx_why(void);

/* Most scatter entries of one send (the ring keeps a block per entry). */
#define JET_URMA_SGE_MAX 32

/* Queue depths of a new connection: the flags clamped to [16, 4096] and to
 * the device. */
void jet__urma_queue_sizes(const jet_urma_ctx_t *ctx, uint32_t *sq_p, uint32_t *rq_p);
/* Scatter entries per send: urma_max_sge, else the device's, <= JET_URMA_SGE_MAX. */
uint32_t jet__urma_send_sge(const jet_urma_ctx_t *ctx);
/* Bytes of one receive buffer (urma_recv_block_size: 8192 or 65536). */
uint32_t jet__urma_recv_size(void);

/* Polling mode: the loop a new URMA socket should join (one of the last
 * urma_poller_num loops of the group, round-robin); NULL in event mode or
 * when the group is not started. */
jet_loop_t *jet__urma_pick_loop(void);

/* ---- per-loop resources (their loop's thread only) ---------------------- */

typedef struct jet_urma_loop jet_urma_loop_t;
struct jet_urma_ep;

/* A prepared pair: JFR (depth rq, RM, 1 SGE) and jetty (share_jfr on that
 * JFR, depth sq, RM) completing into one of the loop's JFCs (cq); on a loop
 * with a shared receive queue only the jetty (rq 0, jfr = the loop's, not
 * owned). */
typedef struct jet_urma_jset {
    urma_jfr_t *jfr;
    urma_jetty_t *jetty;
    uint32_t sq, rq, max_sge;
    uint32_t cq;
    bool shared_jfr;
    int64_t ready_us; /* pooled after a close: not taken before then */
    struct jet_urma_jset *next;
} jet_urma_jset_t;

/* The resources of loop (allocated on first use; its JFC is made when the
 * first connection attaches), or NULL when URMA is unavailable or memory
 * is short. */
jet_urma_loop_t *jet__urma_loop_get(jet_loop_t *loop);
/* The resources of loop if they exist (never creates them). */
jet_urma_loop_t *jet__urma_loop_peek(jet_loop_t *loop);

/* Attaches ep: reserves its share of a JFC, gives it a table index and a
 * generation (*index_p, *gen_p, used in every user_ctx) and a jetty set of
 * the given sizes. 0: *js_p is a prepared set from the pool (unless
 * `fresh`, which skips the pool). 1: the pool had none (or the JFC ep goes
 * to is not made yet): *js_p is NULL, a set of these sizes is made for ep
 * off the loop, and jet__urma_ep_set_arrived(ep, set or NULL) runs later on
 * this thread (never before this returns). *pooled_p (optional) tells
 * whether a pooled set was taken. -EBUSY when the loop's JFCs are full and
 * it may make no more, -ENOMEM, -EAGAIN when the work cannot be queued (no
 * import thread can be started, or no memory for it). */
int jet__urma_loop_attach(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t sq, uint32_t rq,
                          uint32_t max_sge, bool fresh, uint32_t *index_p, uint8_t *gen_p,
                          jet_urma_jset_t **js_p, bool *pooled_p);
/* Detaches ep (no completion reaches it any more), gives back its JFC
 * share (sq, rq as attached) and refills the pool. Its set is the
 * caller's: recycled (jet__urma_loop_recycle, before this call, so that
 * the refill counts it) or destroyed. */
void jet__urma_loop_detach(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t sq, uint32_t rq);
/* A poller pass is draining (busy-poll loop): ep's receives of this batch
 * may be re-posted at the start of the next pass, off the path from the
 * answer to the waiting caller. ep is listed once until
 * jet__urma_ep_run_deferred runs (or it detaches). False: re-post now. */
bool jet__urma_loop_defer(jet_urma_loop_t *ul, struct jet_urma_ep *ep);
/* Loop thread: js, drained (nothing posted, nothing to complete) and its
 * connection about to detach, is reset to READY on the import threads and
 * pooled when it comes back; destroyed when the reset fails or the pool
 * is full. */
void jet__urma_loop_recycle(jet_urma_loop_t *ul, jet_urma_jset_t *js);
/* Loop thread: js was made for a connection that closed before it came
 * (never used, READY): pooled, or destroyed off the loop. */
void jet__urma_loop_unused(jet_urma_loop_t *ul, jet_urma_jset_t *js);
/* What a connection's set may still use until it is destroyed. */
typedef struct jet_urma_leftovers {
    jet_block_t **blocks; /* a malloc'd array, or NULL */
    uint32_t nblocks;
    urma_target_jetty_t *tjetty; /* the imported peer, or NULL */
    urma_target_seg_t *tseg;
} jet_urma_leftovers_t;

/* Loop thread: ep's set js did not drain (buffers may still be written,
 * completions may still come): ep (attached with sq, rq) is detached at
 * once, js destroyed on the import threads (here when none can be started),
 * then the peer unimported and the blocks released on this thread (both
 * leaked with js when the provider refuses to destroy it); all of *left is
 * taken over. Until js is gone, ep's JFC share stays reserved and its table entry
 * is kept, so that late completions are dropped quietly. */
void jet__urma_loop_discard(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t sq, uint32_t rq,
                            jet_urma_jset_t *js, const jet_urma_leftovers_t *left);
/* Destroys a set (its queues must hold no buffer the caller still needs).
 * Returns false when the provider refused (the set is then leaked). */
bool jet__urma_jset_destroy(const jet_urma_ctx_t *ctx, jet_urma_jset_t *js);
/* Loop thread: the same for a set of ul, here (the loop counts the sets
 * each of its JFCs carries). */
bool jet__urma_loop_destroy_set(jet_urma_loop_t *ul, jet_urma_jset_t *js);

/* Posts b to jfr as one receive WR of len bytes (its block-pool region's
 * segment) with user_ctx. *own, the caller's record of the posted block,
 * holds b from before the post (its completion may be polled before the
 * post returns) and is cleared again when the provider refuses it. 0;
 * -EFAULT: b's memory is not registered (nothing posted); -ENOMEM: the
 * queue has no room (URMA_ENOMEM); -EIO: any other refusal. */
int jet__urma_post_recv(const jet_urma_ctx_t *c, urma_jfr_t *jfr, jet_block_t *b, uint32_t len,
                        uint64_t user_ctx, jet_block_t **own);

/* The shared receive queue (urma_shared_rq_size, fixed when the loop is
 * made). A loop that has one posts its buffers, keeps min(its depth, the
 * credits its connections grant) of them posted, and hands each receive to
 * the endpoint whose jetty it came through (cr.local_id; flag.bs.jetty);
 * the endpoint gives every block it was handed back exactly once
 * (jet__urma_loop_srq_give), and a receive for a jetty no endpoint has is
 * posted again. Loop thread, all of them. */

/* Bytes of one shared buffer; 0: the loop's connections have their own JFRs. */
uint32_t jet__urma_loop_srq_size(const jet_urma_loop_t *ul);
/* A connection grants (join) or stops granting (leave) this many credits. */
void jet__urma_loop_srq_join(jet_urma_loop_t *ul, uint32_t credits);
void jet__urma_loop_srq_leave(jet_urma_loop_t *ul, uint32_t credits);
/* Posts buffers up to the target: 0 (some may be missing when the provider
 * refused one but others are posted), -ENOMEM, -EIO (none posted). */
int jet__urma_loop_srq_fill(jet_urma_loop_t *ul);
/* A block handed to an endpoint comes back: posted again, or freed when
 * the queue holds enough (b NULL: the endpoint freed it). -EIO when the
 * provider refused it (it is freed). */
int jet__urma_loop_srq_give(jet_urma_loop_t *ul, jet_block_t *b);
/* Receives through jetty_id go to ep (0, -ENOMEM, -EEXIST: the id is
 * bound already, -EINVAL); unbind: no more (only when bound to ep). */
int jet__urma_loop_bind_jetty(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t jetty_id);
void jet__urma_loop_unbind_jetty(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t jetty_id);

/* Data-path counters of a loop's connections (loop thread; the send-side
 * ones are folded in when a connection ends). */
typedef struct jet_urma_counters {
    uint64_t recv_zerocopy; /* receives handed to the parser as the block itself */
    uint64_t recv_copied;   /* receives below urma_zerocopy_min_size, copied */
    uint64_t credit_msgs;   /* standalone credit messages sent */
    uint64_t data_wrs;      /* data WRs posted */
    uint64_t signalled_wrs; /* of which signalled */
    uint64_t send_bounced;  /* SGEs copied because their memory was not registered */
    uint64_t window_waits;  /* writes held back: the SQ window or the peer's RQ window was empty */
    uint64_t recv_refused;  /* own receive queues: re-posts refused for want of room (held, retried) */
    uint64_t recv_starved;  /* receives whose own block went to the parser for want of memory
                               to copy or replace it (the slot waited for memory) */
} jet_urma_counters_t;

/* Counts of a loop, for tests and debug lines. */
typedef struct jet_urma_loop_stats {
    uint32_t endpoints; /* attached, draining included */
    uint64_t attaches;  /* connections ever attached */
    uint32_t pooled;    /* prepared jetty sets waiting */
    uint64_t recycled;  /* sets of closed connections reset and pooled again */
    uint64_t filled;    /* sets made for the pool */
    uint32_t jfc_used;  /* JFC entries reserved by connections (srq_depth more: the shared queue) */
    uint32_t jfc_depth; /* of each JFC */
    uint32_t jfcs;      /* JFCs made */
    uint64_t completions;
    uint64_t events;  /* completion events taken from the JFCE (event mode) */
    uint64_t spins;   /* event mode: spells of polling after an event */
    uint64_t looks_found; /* event mode: the once-a-second looks that found completions */
    bool spinning;    /* in one now (the JFC is not armed) */
    uint32_t deferred;  /* endpoints whose receives wait for the next poller pass */
    uint32_t recv_held; /* receives taken and not posted again yet */
    uint32_t srq_depth;  /* shared receive queue: 0 when the loop has none */
    uint32_t srq_posted; /* its buffers posted now */
    uint32_t srq_out;    /* its buffers held by connections */
    uint32_t srq_kept;   /* its buffers kept for want of room, to be posted again */
    uint64_t srq_refused; /* posts it refused for want of room (the buffer was kept) */
    jet_urma_counters_t c;
} jet_urma_loop_stats_t;
jet_urma_counters_t *jet__urma_loop_counters(jet_urma_loop_t *ul);
void jet__urma_loop_stats(jet_urma_loop_t *ul, jet_urma_loop_stats_t *out);
/* Loop thread: polls the loop's completion queues now (one event's budget)
 * and delivers what it holds, as its poller or event would. */
void jet__urma_loop_drain(jet_urma_loop_t *ul);

jet_loop_t *jet__urma_loop_of(const jet_urma_loop_t *ul);

/* Event mode's adaptive spin (urma_event_spin_auto_us = max_us): the
 * estimate of the gap between a loop's completion batches after one more
 * gap of sample_us (a quarter of the way to it; a gap counts at most
 * 4x max_us), and the spin after a batch for an estimate of gap_us: max_us
 * while gap_us < max_us, else 0. */
int64_t jet__urma_gap_update(int64_t gap_us, int64_t sample_us, int64_t max_us);
int64_t jet__urma_auto_spin_us(int64_t gap_us, int64_t max_us);
/* A loop whose estimate is at or above the limit while its last `near`
 * gaps in a row were all under 4x it (steady traffic, not sparse: e.g.
 * synchronous calls whose gaps hold both sides' wake-ups, which spinning
 * would remove) spins once anyway after a batch, at most every
 * JET_URMA_PROBE_EVERY_US: when the next batch comes within the limit, the
 * loop goes on spinning while batches keep coming so (and its estimate
 * comes down), else it sleeps again. Without it, two loops that each wait
 * for the other to answer fast never start. True when such a probe is due,
 * since_probe_us after the last one. */
#define JET_URMA_PROBE_EVERY_US 5000
#define JET_URMA_PROBE_NEAR     8
/* A spin that had found batches and ran out (a preempted peer, say) may
 * probe again this soon, not JET_URMA_PROBE_EVERY_US later. */
#define JET_URMA_REPROBE_US 250
bool jet__urma_probe_due(int64_t gap_us, uint32_t near, int64_t max_us, int64_t since_probe_us);

/* The JFS priority for transport path tp (URMA_CTP, URMA_RTP) on a device
 * with attributes a, as brpc picks it: the priority whose transport-path mask
 * is exactly that path, else 6. The table exists only in the master layout
 * (master false: 6). */
uint8_t jet__urma_priority(const urma_device_attr_t *a, bool master, uint32_t tp);

#endif
