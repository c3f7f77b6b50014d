/* jet_call: one RPC, on either side (brpc's Controller).
 *
 * Client side: take one with jet_call_create(), set its options (or inherit
 * the channel's), fill the request attachment, pass it to jet_channel_call()
 * and read the outcome when the call is done. A call is reusable after
 * jet_call_reset(). It must not be reset or destroyed while in flight
 * (from jet_channel_call until its done callback starts): either is then
 * refused with an error in the log and the call goes on; an issue of a
 * call in flight is refused with -EINVAL.
 *
 * Server side: a handler gets the call from its closure_data with
 * jet_server_call(); it reads the request attachment and log id, fills the
 * response attachment, and may fail the call with jet_call_set_failed()
 * before invoking the closure. The server owns server-side calls.
 *
 * Threads: a call is used by one thread at a time; completion hands it from
 * the completing thread to the waiter or the done callback. Once a client
 * call's done callback has started, the library never touches the call
 * again: done may destroy it, reset it, issue it again or hand it to
 * another thread. */
#ifndef JETRPC_CALL_H
#define JETRPC_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "jetrpc/iobuf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jet_call jet_call_t;
typedef void (*jet_call_done_cb_t)(jet_call_t *call, void *arg);

/* NULL when memory is out. */
jet_call_t *jet_call_create(void);
/* A NULL call is ignored. */
void jet_call_destroy(jet_call_t *call);
/* Back to the state of a new call (attachments emptied, response freed). A
 * NULL call is ignored. */
void jet_call_reset(jet_call_t *call);

/* --- client-side settings (before jet_channel_call) --- */
void jet_call_set_timeout_ms(jet_call_t *call, int32_t timeout_ms); /* < 0: no limit */
void jet_call_set_max_retry(jet_call_t *call, int32_t max_retry); /* < 0: the channel's */
/* Overrides the channel's backup_request_ms (see jetrpc/options.h) for this
 * call: < 0 sends none. */
void jet_call_set_backup_request_ms(jet_call_t *call, int32_t ms);
void jet_call_set_log_id(jet_call_t *call, uint64_t log_id);
void jet_call_set_request_compress_type(jet_call_t *call, int type);
/* Adds a CRC32C checksum to the request (checksum_type 1). */
void jet_call_set_request_checksum(jet_call_t *call, bool with_attachment);

/* --- cancellation (brpc's call_id() and StartCancel) --- */
/* The id of the call's next issue (what that issue needs is reserved now;
 * jet_call_reset and jet_call_destroy give it back): take it before
 * jet_channel_call to cancel the call from another thread, a synchronous
 * call's too. Only while the call is its owner's: not in flight (before
 * jet_channel_call, in its done callback, or once it ended), by the thread
 * that owns it. 0 for a call in flight, a server-side call or NULL, and when
 * no id can be had (out of memory, or of ids). */
uint64_t jet_call_id(jet_call_t *call);
/* From any thread: ends the issue that id names with ECANCELED (text
 * "Canceled by jet_call_cancel"). At once when one of its attempts is on a
 * connection (the request may be on its way already): its answer, if one
 * comes, is dropped, and an asynchronous call's done callback runs on this
 * thread before this returns (hold no lock that done takes). When the issue
 * has not started, it ends as it starts, unsent; when an attempt is being
 * set up or retried, or fails, it ends there. An outcome already being
 * delivered (the answer, or the deadline) stands. 0 when the cancel was
 * recorded for an issue in flight or to come (which then ends with
 * ECANCELED unless its outcome was being delivered); -EINVAL when id names
 * no such issue (it ended, the call was reset or destroyed, or 0). Nothing
 * is sent to the server: a handler already running goes on. */
int jet_call_cancel(uint64_t id);

/* --- user fields (baidu_std's RpcMeta user_fields: brpc's
 * request_user_fields and response_user_fields) ---
 * Text key/value pairs that travel in the meta. The client sets request
 * fields before jet_channel_call (-EBUSY while the call is in flight); like
 * the attachment they stay for later issues until jet_call_reset. A
 * server's handler reads them, and sets response fields before it calls its
 * closure: they go with the answer, an error answer too. The client reads
 * those once the call has ended (each issue replaces them). Setting a key
 * again replaces its value. Fields received from a peer are listed as they
 * came: a key may repeat, and a lookup gives its last value. Keys and values
 * are C strings: a peer's value with a NUL byte ends there. Returned strings
 * stay valid until the set changes, the call is reset or destroyed, or (a
 * server call) its closure is called. A meta over 1 MiB, fields included,
 * is never sent, as jetrpc decodes none larger (brpc has no such limit): a
 * call whose request fields make one fails at once with EREQUEST, unsent;
 * response fields that would make one are dropped, and the call fails with
 * ERESPONSE unless its handler failed it. */
/* 0; -EINVAL (a server call for the request's, a client call for the
 * response's; NULL call or key), -EBUSY, -ENOMEM. A NULL value is "". */
int jet_call_set_request_user_field(jet_call_t *call, const char *key, const char *value);
int jet_call_set_response_user_field(jet_call_t *call, const char *key, const char *value);
/* The value of key, or NULL. The getters read a NULL call as one without
 * fields. */
const char *jet_call_request_user_field(const jet_call_t *call, const char *key);
const char *jet_call_response_user_field(const jet_call_t *call, const char *key);
size_t jet_call_request_user_field_count(const jet_call_t *call);
size_t jet_call_response_user_field_count(const jet_call_t *call);
/* Field i in order: false when i >= the count. key_p and value_p may be
 * NULL. */
bool jet_call_request_user_field_at(const jet_call_t *call, size_t i, const char **key_p,
                                    const char **value_p);
bool jet_call_response_user_field_at(const jet_call_t *call, size_t i, const char **key_p,
                                     const char **value_p);

/* --- both sides --- */
jet_iobuf_t *jet_call_request_attachment(jet_call_t *call);
jet_iobuf_t *jet_call_response_attachment(jet_call_t *call);
uint64_t jet_call_log_id(const jet_call_t *call);
/* Peer "ip:port" (or unix path) of the call's connection; "" before any. */
const char *jet_call_remote_side(const jet_call_t *call);

/* --- outcome --- */
bool jet_call_failed(const jet_call_t *call);
/* 0 on success; else a brpc code (1001...) or a system errno value (positive).
 * A server's negative error_code (brpc's client passes it on as is) is
 * reported as ERESPONSE, with that code and the server's text in the text. */
int jet_call_error_code(const jet_call_t *call);
const char *jet_call_error_text(const jet_call_t *call);
/* Client: the decoded response (owned by the call; NULL when failed). */
const ProtobufCMessage *jet_call_response(const jet_call_t *call);
/* Client: microseconds from jet_channel_call to completion. */
int64_t jet_call_latency_us(const jet_call_t *call);
/* Attempts made (1 + retries, a backup request included); an issue that
 * failed before its first attempt was written (missing fields, EMSGSIZE)
 * counts 1, one cancelled before it started 0. */
int jet_call_attempts(const jet_call_t *call);
/* The last issue sent a backup request (brpc's has_backup_request). */
bool jet_call_has_backup_request(const jet_call_t *call);
/* Compress type of the received message part. */
int jet_call_response_compress_type(const jet_call_t *call);

/* --- server side --- */
/* The call behind a handler's closure_data; NULL once its closure was
 * called (the call is gone). Only for a closure_data the server gave. */
jet_call_t *jet_server_call(void *closure_data);
/* Server: what the authenticator's verify_credential_ctx said about the
 * call's connection, valid until the closure is called; NULL when the
 * server has no authenticator or it has no verify_credential_ctx (the
 * type is in jetrpc/options.h). */
const struct jet_auth_context *jet_call_auth_context(const jet_call_t *call);
/* Fails the call with code (> 0, a brpc code or a user code; 0 or negative
 * becomes EINTERNAL 2001) and a printf-style text. The handler still calls
 * its closure (with NULL or any message: no message is sent on failure). */
void jet_call_set_failed(jet_call_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jet_call_set_response_compress_type(jet_call_t *call, int type);
int jet_call_request_compress_type(const jet_call_t *call);

#ifdef __cplusplus
}
#endif
#endif
