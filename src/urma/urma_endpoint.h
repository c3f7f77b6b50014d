/* A URMA connection's data plane (one per socket that negotiated URMA).
 *
 * Resources: a prepared jetty set of the socket's loop (its jetty completes
 * into the loop's JFC and receives into the loop's shared receive queue, or
 * with urma_shared_rq_size=0 into a JFR of its own), the imported peer jetty
 * and segment (the segment is imported before the jetty, with token 0, as
 * brpc does; no WR ever uses it: on hardware the import sets the path up), a
 * send ring and, with its own JFR, a receive ring. On a shared queue the
 * endpoint counts the rq credits it granted (the loop posts the buffers) and
 * gives every block it was handed back to the loop exactly once; data WRs
 * beyond the credits fail the connection (EPROTO), in both modes.
 *
 * Windows and credits (brpc's URMA rules, URMA-TRANSPORT.md §9): data WRs
 * outstanding <= min(local sq, peer rq) - 3 (the SQ window and the peer's
 * receive credits), the other 3 SQ slots and 3 peer receives are for
 * zero-length credit messages (SEND_IMM, imm = receives re-posted since the
 * last report, a host-order integer), sent when more than half the peer's
 * window is pending. Toward a brpc peer payload goes as plain SEND of at
 * most the peer's buffer_size per WR; between jetrpc peers (capability
 * JET_URMA_CAP_PIGGYBACK in both hellos) data WRs carry the pending credits
 * as SEND_IMM, so a standalone credit message is needed only when traffic
 * is one-way.
 *
 * Data: sends gather iobuf blocks without copying (each SGE carries the
 * block pool region's segment; memory outside the pool is copied into pool
 * blocks); the blocks stay referenced in the send ring until a signalled
 * completion at or after their WR (every sig-th data WR is signalled, and
 * every WR that empties the SQ window, so a writer never waits for a
 * completion that was not asked for). Receives land in pool blocks of
 * urma_recv_block_size; at or above urma_zerocopy_min_size the block itself
 * is cut into the socket's read buffer and a fresh one posted (given back to
 * the shared queue), below it the bytes are copied and the same block
 * re-posted. Every WR's user_ctx names
 * (endpoint index, generation, kind, slot): completions are matched to
 * buffers exactly, never by FIFO position.
 *
 * Threads: everything runs on the socket's loop thread except
 * jet__urma_ep_cut, which runs on the socket's writer thread (any thread,
 * one at a time); the windows and the pending credits are the only state
 * the two share (atomics). */
#ifndef JET_URMA_URMA_ENDPOINT_H
#define JET_URMA_URMA_ENDPOINT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "iobuf/block_pool.h"
#include "jetrpc/iobuf.h"
#include "urma/urma_api.h"
#include "urma/urma_handshake.h"

struct jet_socket;
struct jet_urma_jset;
typedef struct jet_urma_ep jet_urma_ep_t;

/* Loop thread of s: what a pending jet__urma_ep_create tells its socket,
 * on that thread: 0 when the endpoint has its set and its receive queue
 * posted (the hello may go), else a negative code (the caller closes the
 * endpoint and falls back to TCP). Not called once the endpoint is closed. */
typedef void (*jet_urma_ep_ready_t)(struct jet_socket *s, int rc);

/* Loop thread of s. Takes a jetty set of s's loop and posts the whole
 * receive queue, or on a shared queue maps the set's jetty to the endpoint
 * and has the loop post its share (brpc posts before sending its hello: the
 * peer may send as soon as it has imported). 0: ready. 1: the loop has no set ready (its
 * pool is empty, or it has no completion queue yet): one is made off the
 * loop, *ep_p is set, and ready(s, rc) follows. -ENOTSUP/-EBUSY/-ENOMEM/
 * -EIO/-EAGAIN: URMA cannot be used for this connection (the caller falls
 * back to TCP). */
int jet__urma_ep_create(struct jet_socket *s, jet_urma_ep_ready_t ready, jet_urma_ep_t **ep_p);

/* Fills the hello this side sends (version 2 or 3). */
void jet__urma_ep_hello(const jet_urma_ep_t *ep, int version, jet_urma_hello_t *h);

/* True when the peer's hello names this endpoint's own jetty (same EID and
 * jetty id). Jetty ids are unique on a UB device, so no real peer does: the
 * hello comes from a process on another fabric (whose ids overlap ours) or
 * is forged, and importing it would send this side's messages to itself. */
bool jet__urma_ep_is_own(const jet_urma_ep_t *ep, const jet_urma_hello_t *peer);

/* Takes the peer's imported segment and jetty (jet__urma_import_peer; owned
 * by ep from here on) and sets the windows from its hello. Loop thread. */
void jet__urma_ep_connect_peer(jet_urma_ep_t *ep, const jet_urma_hello_t *peer,
                               urma_target_seg_t *tseg, urma_target_jetty_t *tjetty);

/* URMA is ON: received bytes go to the socket from now on (those that came
 * before are delivered now). Loop thread. */
void jet__urma_ep_start(jet_urma_ep_t *ep);

/* The socket's input was paused (jet__socket_pause_read) and goes on: the
 * receives held meanwhile are posted again and their credits sent. Loop
 * thread. */
void jet__urma_ep_read_resumed(jet_urma_ep_t *ep);

/* Writer thread: posts as much of bufs as the windows allow. Bytes posted,
 * -EAGAIN when a window is empty, or a negative code (socket failure). */
ssize_t jet__urma_ep_cut(jet_urma_ep_t *ep, jet_iobuf_t *const *bufs, int n);

/* Loop thread, after -EAGAIN: jet__socket_writable will be called once both
 * windows are open again. */
int jet__urma_ep_wait_writable(jet_urma_ep_t *ep);
/* Loop thread: the TCP connection ended; what the peer sent before over URMA
 * is delivered (the loop's completion queue is polled now). */
void jet__urma_ep_drain(jet_urma_ep_t *ep);

/* Loop thread: the socket is gone for the endpoint (failed, or URMA was not
 * agreed). Stops the queues (jetty and JFR to ERROR, off the loop), lets the
 * flush completions return every buffer, then resets the jetty set for
 * reuse (or destroys it, off the loop) and frees the endpoint; an endpoint
 * whose set is still being made ends when it comes (the set is pooled). No
 * writer may be inside jet__urma_ep_cut. */
void jet__urma_ep_close(jet_urma_ep_t *ep);

int jet__urma_ep_debug(const jet_urma_ep_t *ep, char *buf, size_t len);

/* ---- called by the loop's completion dispatcher (urma_context.c) -------- */

/* user_ctx layout: index (24 bits) | generation (8) | kind (4) | value (28). */
#define JET_URMA_CTX_KIND_DATA   1u /* value: send-ring sequence */
#define JET_URMA_CTX_KIND_CREDIT 2u
#define JET_URMA_CTX_KIND_RECV   3u /* value: receive-ring slot */
#define JET_URMA_CTX_VALUE_MASK  0x0fffffffu

static inline uint64_t jet__urma_ctx_make(uint32_t index, uint8_t gen, uint32_t kind,
                                          uint32_t value)
{
    return (uint64_t)index << 40 | (uint64_t)gen << 32 | (uint64_t)(kind & 0xf) << 28 |
           (value & JET_URMA_CTX_VALUE_MASK);
}
static inline uint32_t jet__urma_ctx_index(uint64_t c)
{
    return (uint32_t)(c >> 40);
}
static inline uint8_t jet__urma_ctx_gen(uint64_t c)
{
    return (uint8_t)(c >> 32);
}
static inline uint32_t jet__urma_ctx_kind(uint64_t c)
{
    return (uint32_t)(c >> 28) & 0xf;
}
static inline uint32_t jet__urma_ctx_value(uint64_t c)
{
    return (uint32_t)c & JET_URMA_CTX_VALUE_MASK;
}

/* The set made for ep (jet__urma_loop_attach returned 1) came back, or
 * NULL: none could be made. May free ep. */
void jet__urma_ep_set_arrived(jet_urma_ep_t *ep, struct jet_urma_jset *js);

/* One completion of ep. Returns true when ep needs jet__urma_ep_batch_end
 * after this poll batch (the first time it is touched in the batch). ep may
 * be freed inside (a draining endpoint whose last buffer came back): then it
 * returns false. */
bool jet__urma_ep_on_cr(jet_urma_ep_t *ep, const urma_cr_t *cr);
/* A receive of the loop's shared receive queue that came through ep's
 * jetty, with its block b (ep gives it back with jet__urma_loop_srq_give).
 * Returns as jet__urma_ep_on_cr. */
bool jet__urma_ep_on_srq_recv(jet_urma_ep_t *ep, const urma_cr_t *cr, jet_block_t *b);
/* A hardware-built FLUSH_ERR_DONE CR whose local_id is ep's jetty. May free ep. */
void jet__urma_ep_on_flush_done(jet_urma_ep_t *ep);
/* The jetty id the FLUSH_ERR_DONE of ep carries, 0 when ep waits for none. */
uint32_t jet__urma_ep_flush_id(const jet_urma_ep_t *ep);
/* After a poll batch: returns credits, delivers bytes, wakes the writer.
 * True when the parser left bytes behind: a message is partly received and
 * its sender is still sending the rest. */
bool jet__urma_ep_batch_end(jet_urma_ep_t *ep);
/* Loop thread: the receives a batch end left for the next poller pass
 * (jet__urma_loop_defer) are posted, and credits sent as they pile up. */
void jet__urma_ep_run_deferred(jet_urma_ep_t *ep);
/* Loop thread: receives taken in a batch and not posted again yet. */
uint32_t jet__urma_ep_held(const jet_urma_ep_t *ep);

#endif
