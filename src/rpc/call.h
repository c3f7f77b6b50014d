/* The call object's layout and the client-side correlation-id registry. */
#ifndef JET_RPC_CALL_H
#define JET_RPC_CALL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "event/loop.h"
#include "event/timer_thread.h"
#include "jetrpc/call.h"
#include "jetrpc/channel.h"
#include "net/socket.h"
#include "rpc/codec.h"
#include "rpc/user_fields.h"

struct jet_server;
struct jet_server_conn;
struct jet_call_backup;

/* One attempt's place on the pending list of the connection it was written
 * on (cli_conn_t.pending), under that connection's lock. */
typedef struct jet_call_link {
    struct jet_call *call;
    struct jet_call_link *prev, *next;
    uint64_t cid; /* the attempt's; fixed while linked */
    bool linked;
} jet_call_link_t;

struct jet_call {
    /* both sides */
    jet_iobuf_t req_att;
    jet_iobuf_t resp_att;
    int error_code;
    char *error_text; /* heap, NULL when none */
    uint64_t log_id;
    bool has_log_id;
    int req_compress;
    int resp_compress;
    char remote[64];
    /* User fields: the request's (set by the client, received by the
     * server) and the response's (set by the handler, received by the
     * client). */
    jet_user_fields_t req_uf;
    jet_user_fields_t resp_uf;

    /* client */
    int32_t timeout_ms; /* INT32_MIN: the channel's */
    int32_t max_retry;  /* < 0: the channel's */
    bool checksum;
    bool checksum_with_att;
    /* Read by jet_channel_call's misuse check on the caller's thread while
     * the call's end clears it on a loop thread. */
    _Atomic bool in_flight;
    ProtobufCMessage *response;
    const ProtobufCServiceDescriptor *service;
    const ProtobufCMethodDescriptor *method;
    jet_channel_t *channel;
    jet_socket_t *sock;          /* the current attempt's connection (a reference) */
    /* link[cur]: the current attempt's place on its connection; while a
     * backup request is out, link[cur ^ 1] is the earlier attempt's, on
     * other_sock (a reference; NULL: no other attempt). */
    jet_call_link_t link[2];
    uint8_t cur;
    jet_socket_t *other_sock;
    bool answered;               /* the current attempt's answer came (its connection may be reused) */
    int32_t backup_request_ms;   /* INT32_MIN: the channel's; < 0: none */
    bool backup_sent;            /* this issue sent a backup request */
    int64_t backup_at_us;        /* when it goes out (INT64_MAX: never) */
    struct jet_call_backup *backup; /* its timer, armed at the first attempt (NULL: none) */
    /* A synchronous call made on a loop's thread (a done callback, a
     * handler): that loop, which no attempt may use; NULL otherwise. */
    jet_loop_t *waiter_loop;
    /* A synchronous call made on the deadline thread, which its retries'
     * waits would need: they are not taken. */
    bool no_backoff;
    /* Its server refused the transport's hello: the next attempt, not
     * counted, goes at once, and a connection it makes is plain TCP (the
     * channel's TCP-for-a-while could end during a wait). */
    bool via_tcp;
    jet_task_t retry_task;       /* a retry after its wait, run on a loop */
    bool backoff_armed;          /* `deadline` times a retry's wait */
    /* While it waits: on its channel's list of waiting calls (under the
     * channel's lock), which its destroy ends at once. */
    struct jet_call *wait_prev, *wait_next;
    jet_iobuf_t req_body;        /* serialised (and compressed) request, kept for retries */
    /* A synchronous call's plain request, packed at each attempt instead
     * (req_body empty); NULL otherwise. Valid while the call is issued. */
    const ProtobufCMessage *req_msg;
    size_t req_msg_size; /* its packed size */
    uint64_t cid;
    uint32_t slot;
    int attempts;
    int max_attempts;
    int64_t start_us;
    int64_t deadline_us; /* INT64_MAX: none */
    int64_t end_us;
    jet_call_done_cb_t done;
    void *done_arg;
    bool joinable;      /* this issue holds the correlation slot `slot` (its owner's field) */
    /* jet_call_id took the slot for the next issue: its id (the join token
     * that issue publishes), 0 when none is reserved. */
    uint64_t reserved_token;
    /* What jet_call_join waits for: the latest issue's slot + 1 (high half)
     * and the slot's free count when it took it (low half); 0 before the
     * first. Replaced, never cleared, by each issue that takes a slot, so
     * that a joiner sees a reissue made by done (jet__cid_join_token). */
    _Atomic uint64_t join_token;
    /* The loop of the latest attempt's connection: a synchronous caller may
     * drive it while it waits (jet_loop_drive). Loops outlive calls. */
    _Atomic(jet_loop_t *) wait_loop;
    jet_deadline_t deadline;
    /* A synchronous call: its waiting thread keeps the deadline instead of
     * the deadline thread, and ends the attempt whose cid is here (0: none
     * armed). */
    bool wait_deadline;
    _Atomic uint64_t deadline_cid;

    /* server */
    struct jet_server *server;
    jet_socket_t *srv_sock;
    ProtobufCService *srv_service;
    unsigned srv_method;
    ProtobufCMessage *srv_input;
    int64_t srv_cid;
    uint64_t srv_handle; /* the handler's closure_data (0: none taken) */
    jet_task_t srv_task; /* runs the handler on a worker, or on the loop's thread */

    /* Last: call_init clears everything before it. The decoded response
     * (client) or request (server) is allocated here; freed with its pa. */
    jet_msg_arena_t msg_arena;
};

/* Shared by client and server: fills error_code/error_text. */
void jet__call_set_error(jet_call_t *call, int code, const char *text);

/* Correlation ids: slot (high 32 bits) + version (low 32 bits, below 2^31). A holder of a
 * cid owns the call only after claiming it; a claim succeeds once per
 * version, so a response, a deadline and a connection failure racing for
 * the same attempt never complete it twice. */
int jet__cid_alloc(jet_call_t *call, uint64_t *cid_p);
/* jet__cid_alloc for an issue to come (jet_call_id): the join token is not
 * published (a join would wait for an issue that may never come) but given
 * in *token_p, the issue's id. The issue publishes it. */
int jet__cid_reserve(jet_call_t *call, uint64_t *cid_p, uint64_t *token_p);
/* Marks the client issue whose join token is token as cancelled, then claims
 * its attempt if one is on a connection (its owner set): *call_p is the
 * claimed call, which the caller then ends, or NULL (no attempt out yet, or
 * its owner of the moment ends it: an answer, a failure, a deadline, or the
 * issuer, which looks at the mark when it links an attempt). -EINVAL when
 * that issue has ended already. */
int jet__cid_cancel(uint64_t token, jet_call_t **call_p);
/* Claims the attempt on a connection of the issue whose join token is
 * token (the one its owner field names): the call, with that attempt's cid
 * in *cid_p and the next version's in *next_cid_p; NULL when the issue ended
 * or its attempt is owned by another thread (an answer, a retry), and with
 * not_last when that attempt was named the issue's last (set_owner's
 * JET_CID_OWNER_LAST). *live_p (may be NULL): NULL although the issue goes
 * on, and not for being the last. hold (a backup request): the attempt,
 * which must be the only one out, stays out held (see jet__cid_park) until
 * the claimer accepts it again (jet__cid_set_alt, jet__cid_reinstate) or
 * drops it (jet__cid_drop_held, the call's end). */
jet_call_t *jet__cid_claim_issue(uint64_t token, bool not_last, bool hold, uint64_t *cid_p,
                                 uint64_t *next_cid_p, bool *live_p);
/* The issue of token was cancelled. */
bool jet__cid_cancelled(uint64_t token);
/* Claims cid; returns the call or NULL (stale, unknown or already claimed).
 * On success the slot accepts the next version: *next_cid_p (may be NULL)
 * is the cid of a retry. A claim of the current attempt of a backup request
 * holds the earlier one (as a hold of jet__cid_claim_issue); a claim of the
 * earlier one refuses the current one. */
jet_call_t *jet__cid_claim(uint64_t cid, uint64_t *next_cid_p);
/* An answer to an attempt that its call's owner holds, kept aside until the
 * hold ends: the owner then runs it again (it claims as any answer) or
 * frees it with drop. The channel embeds it in its own record. */
typedef struct jet_cid_parked jet_cid_parked_t;
struct jet_cid_parked {
    void (*drop)(jet_cid_parked_t *p);
};
/* A backup request: the call's attempt cid (current, held by its owner
 * since its claim, not yet written) goes out while its earlier attempt
 * alt_cid, written on the connection tagged alt_owner, is still out (held
 * since the claim). From here a claim of either succeeds, once, and
 * refuses the other from then on. false when cid was claimed since (a
 * cancel) or alt_cid is not held (an error answer dropped it): alt_cid is
 * not accepted. *parked_p: an answer to alt_cid parked during the hold
 * (NULL: none), which the caller runs once it no longer touches the call. */
bool jet__cid_set_alt(uint64_t cid, uint64_t alt_cid, uint32_t alt_owner,
                      jet_cid_parked_t **parked_p);
/* The held attempt alt_cid, whose backup failed, is again the only one the
 * slot accepts (its owner, the caller, claimed cid, the slot's current
 * version, which no connection has); *parked_p: the answer parked meanwhile
 * (NULL: none), to run as jet__cid_set_alt's. false, and nothing changed,
 * when alt_cid is not held (dropped). */
bool jet__cid_reinstate(uint64_t cid, uint64_t alt_cid, jet_cid_parked_t **parked_p);
/* alt_cid is held in cid's slot (for its owner, who alone ends a hold). */
bool jet__cid_held(uint64_t cid, uint64_t alt_cid);
/* alt_cid is held in cid's slot (cid its current version) and an answer to
 * it is parked: it stays so until the owner ends the hold, or the attempt
 * is dropped (jet__cid_fail_from with drop_held). */
bool jet__cid_answer_kept(uint64_t cid, uint64_t alt_cid);
/* The owner of the call with cid's slot ends it: a held attempt is no
 * longer accepted, and its parked answer, if any, is dropped. */
void jet__cid_drop_held(uint64_t cid);
/* An answer to cid, which came on the connection tagged owner, that no
 * claim accepted (jet__cid_claim_from, jet__cid_fail_from).
 * JET_CID_PARKED: its attempt is held, and p is kept for the hold's end
 * (p NULL: only says so); JET_CID_AGAIN: cid is accepted again (the hold
 * ended meanwhile) and its attempt is owner's, claim again (p is not
 * kept); JET_CID_STALE: dropped (an unknown, ended or answered attempt, an
 * attempt of another connection, or another answer is parked). */
enum { JET_CID_STALE = 0, JET_CID_PARKED = 1, JET_CID_AGAIN = 2 };
int jet__cid_park(uint64_t cid, uint32_t owner, jet_cid_parked_t *p);
/* A slot for a server call: the handle its handler gets as closure_data,
 * claimed by the answer, so that a second answer (or one with a made-up
 * handle) finds no call instead of a freed or recycled one. It leaves the
 * call's client fields (slot, joinable, join_token) alone; the answer frees
 * the slot with jet__cid_free(cid >> 32) once the call is destroyed. */
int jet__cid_alloc_handle(jet_call_t *call, uint64_t *cid_p);
/* The call of cid while cid is current (not claimed, not freed); NULL
 * otherwise. Claims nothing. */
jet_call_t *jet__cid_peek(uint64_t cid);
/* Records that the attempt cid was written on the connection tagged owner
 * (non-zero), before it is written; the issuer then looks for a cancel
 * (jet__cid_cancelled), which either finds the attempt or is found. */
void jet__cid_set_owner(uint64_t cid, uint32_t owner);
/* A retry's wait: its attempt cid (the slot's current version, not on a
 * connection yet) is named as the owner, with no connection, so that a
 * cancel claims the waiting call at once; unless the owner is no longer
 * was (jet__cid_owner_of before the wait's timer was set): the wait ended
 * and the next attempt named itself. Touches the slot only. */
uint64_t jet__cid_owner_of(uint64_t cid);
void jet__cid_publish_wait(uint64_t cid, uint64_t was);
/* In set_owner's owner: this attempt is the issue's last (no backup
 * request may claim it); connection tags stay below it. */
#define JET_CID_OWNER_LAST 0x80000000u
/* The attempt cid, written on the connection tagged owner, failed (its
 * connection, its write, an error answer), decided in one step: the
 * earlier attempt of a backup request only stops being accepted (the
 * current one stays, and the call waits for it): *dropped_p, NULL, and the
 * caller takes the attempt off that connection's pending list; the
 * current attempt is claimed as jet__cid_claim_from does (the call, next
 * version in *next_cid_p); otherwise NULL (claimed or ended elsewhere).
 * drop_held: an attempt held while its backup is made is dropped too (its
 * parked answer with it), for a failure that is the attempt's end: its
 * write was refused whole, or its answer is an error. Otherwise (its
 * connection failed) a held attempt is left to the hold's end (NULL): an
 * answer may have been parked before. */
jet_call_t *jet__cid_fail_from(uint64_t cid, uint32_t owner, bool drop_held, uint64_t *next_cid_p,
                               bool *dropped_p);
/* jet__cid_claim for an answer that came on the connection tagged owner:
 * NULL unless the attempt cid was written there, so that a peer answering
 * with the id of a call sent elsewhere cannot end that call. */
jet_call_t *jet__cid_claim_from(uint64_t cid, uint32_t owner, uint64_t *next_cid_p);
/* Frees the slot and wakes its joiners. The call is not touched: a done
 * callback may already have destroyed or reissued it. */
void jet__cid_free(uint32_t slot);
/* The longest spin of a joiner (sync_call_spin_us's range). */
#define JET_CID_SPIN_MAX_US 1000000
/* Waits until slot has been freed more than free_seq times, driving loop
 * (see jet_loop_drive) or spinning up to spin_us microseconds (at most
 * JET_CID_SPIN_MAX_US, and not past deadline_us) before sleeping; several
 * threads may join one call. Once deadline_us
 * (monotonic; INT64_MAX: none) has passed, expire(arg) runs on this thread,
 * and again every millisecond until the slot is freed: it ends the call if
 * nobody else owns it. */
void jet__cid_join(uint32_t slot, uint32_t free_seq, int64_t spin_us, jet_loop_t *loop,
                   int64_t deadline_us, void (*expire)(void *arg), void *arg);
/* True when slot has been freed more than free_seq times (a join would
 * return at once). */
bool jet__cid_freed_since(uint32_t slot, uint32_t free_seq);
/* The slot and free count a join_token names. */
static inline uint32_t jet__join_slot(uint64_t token) { return (uint32_t)(token >> 32) - 1; }
static inline uint32_t jet__join_seq(uint64_t token) { return (uint32_t)token; }

#endif
