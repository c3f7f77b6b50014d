/* Options of servers and channels, and the socket modes (transports). */
#ifndef JETRPC_OPTIONS_H
#define JETRPC_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A socket is bound to one transport for its life. The numbers are brpc's
 * SOCKET_MODE_* values. */
typedef enum jet_socket_mode {
    JET_SOCKET_MODE_TCP = 0,
    JET_SOCKET_MODE_RDMA = 1, /* brpc's; not provided by jetrpc */
    JET_SOCKET_MODE_UBRING = 2,
    JET_SOCKET_MODE_URMA = 3,
    JET_SOCKET_MODE_MAX = 4,
} jet_socket_mode_t;

/* "tcp", "rdma", "ubring", "urma"; NULL for an unknown value. */
const char *jet_socket_mode_name(int mode);
/* Parses a name (any case); -EINVAL for an unknown one or NULL. */
int jet_socket_mode_parse(const char *name, jet_socket_mode_t *mode_p);

typedef enum jet_connection_type {
    JET_CONNECTION_SINGLE = 0, /* one connection per channel, calls multiplexed */
    JET_CONNECTION_POOLED = 1, /* one call at a time per connection, idle ones kept, at
                                * most max_connection_pool_size (a connection whose call
                                * ended without its answer is closed) */
    JET_CONNECTION_SHORT = 2,  /* a new connection per call, closed after it */
} jet_connection_type_t;

/* "single", "pooled", "short" (any case; "" is single, as in brpc); -EINVAL
 * for another name or NULL. */
int jet_connection_type_parse(const char *name, jet_connection_type_t *type_p);

/* Compression of the message part (baidu_std compress_type values). */
typedef enum jet_compress_type {
    JET_COMPRESS_NONE = 0,
    JET_COMPRESS_SNAPPY = 1,
    JET_COMPRESS_GZIP = 2,
    JET_COMPRESS_ZLIB = 3,
} jet_compress_type_t;

/* Authentication (brpc's Authenticator). A client sends a credential
 * (baidu_std's authentication_data) with the first request of each
 * connection, and with any other request issued before that one was
 * written, so that the first the server reads has one; nobody waits for
 * it. A server checks the first request of each connection before it
 * serves any: one that fails is answered with ERPCAUTH (1004, "Fail to
 * authenticate") and its connection closed; the credentials of later
 * requests are not looked at. It must outlive the channels and servers
 * that use it; its functions may run on several threads at once, event
 * loops' included (a call issued in a done callback): they must not wait
 * for an answer served by the caller's loop. */
/* What a server's authenticator learned about a connection's client
 * (brpc's AuthContext), for the handlers of its calls
 * (jet_call_auth_context). The strings are the authenticator's malloc'd
 * copies, or NULL; the library frees them with the connection. */
typedef struct jet_auth_context {
    char *user;
    char *group;
    char *roles;
    char *starter;
    bool is_service;
} jet_auth_context_t;

typedef struct jet_authenticator {
    /* Client: a credential, malloc'd, in *data_p (the library frees it) of
     * *len_p bytes; runs on the thread that issues the request: the
     * caller's, or for a retry or a backup request an event-loop thread,
     * which may be a thread waiting for a call of its own (jetrpc/channel.h):
     * it must not block. 0, or a
     * negative errno: the call then fails with ERPCAUTH and sends nothing. */
    int (*generate_credential)(void *arg, uint8_t **data_p, size_t *len_p);
    /* Server: 0 accepts the connection whose first request carried data
     * (len bytes; 0 and NULL when it carried none), from peer ("ip:port").
     * Runs on the connection's event-loop thread (never on a thread that
     * waits for a call of its own). NULL refuses all. */
    int (*verify_credential)(void *arg, const uint8_t *data, size_t len, const char *peer);
    void *arg;
    /* Server, instead of verify_credential when set: the same, and on
     * accepting it may fill ctx (all zero when called), which the
     * connection's calls then show their handlers. What it put in ctx is
     * freed on a refusal too. */
    int (*verify_credential_ctx)(void *arg, const uint8_t *data, size_t len, const char *peer,
                                 jet_auth_context_t *ctx);
} jet_authenticator_t;

typedef struct jet_server_options {
    jet_socket_mode_t socket_mode; /* default TCP */
    /* Handlers run on the connection's event-loop thread (false, default) or on a
     * pool of worker threads (true: for handlers that block); never on a
     * user's thread that runs the loop while it waits for a call (see
     * jetrpc/channel.h). */
    bool usercode_in_pool;
    int num_workers;            /* worker threads when usercode_in_pool; 0 or less = cores */
    int max_concurrency;        /* in-flight requests; over it ELIMIT. 0 or less = unlimited */
    uint32_t max_body_size;     /* 0 = flag max_body_size (64 MiB) */
    int idle_timeout_sec;       /* > 0: close connections that neither received nor sent
                                   anything for that long (over any transport; calls
                                   still held by handlers do not count), checked once a
                                   second */
    int graceful_stop_ms;       /* jet_server_stop waits this long for in-flight calls; default
                                   5000; 0 or less: no wait */
    const char *ssl_cert;       /* not supported: non-NULL is refused (-EPROTONOSUPPORT) */
    const jet_authenticator_t *auth; /* NULL: no check (verify_credential is used) */
} jet_server_options_t;

typedef struct jet_channel_options {
    jet_socket_mode_t socket_mode;         /* default TCP */
    jet_connection_type_t connection_type; /* default SINGLE */
    /* Per call, default 500; < 0 = no limit; 0 = the call's start is its
     * deadline (it fails with ERPCTIMEDOUT unless answered at once). */
    int32_t timeout_ms;
    int32_t connect_timeout_ms;            /* default (-2): timeout_ms; other < 0: no limit */
    int32_t max_retry;                     /* retries after connection failures, default 3 */
    /* Wait before each retry (brpc's retry backoff): retry_backoff_ms, or a
     * random time in [retry_backoff_ms, retry_backoff_max_ms] when the
     * latter is larger. 0 (default): retry at once. A wait that would reach
     * the call's deadline is skipped (the retry goes at once). A cancel
     * during the wait ends the call at once, and so does destroying the
     * channel (ECLOSE). */
    int32_t retry_backoff_ms;
    int32_t retry_backoff_max_ms;
    uint32_t max_body_size;                /* 0 = flag max_body_size */
    const char *protocol;                  /* NULL or "baidu_std" (any case) */
    bool use_ssl;                          /* not supported: true is refused (-EPROTONOSUPPORT) */
    const jet_authenticator_t *auth;       /* NULL: none (generate_credential is used) */
    /* brpc's backup request: when a call has no answer backup_request_ms
     * after it started, the same request goes out once more (on the same
     * connection for SINGLE, on another one for POOLED and SHORT), and the
     * first answer of the two ends the call; the other's is dropped. It
     * counts as an attempt: only for calls with a retry left (max_retry >
     * 0) and no deadline before it. As in brpc, a failure of the first
     * attempt while the backup is out (its connection, its write, an error
     * answer) is dropped and the call waits for the backup; a failure of
     * the backup (its connection, its write, its connect) is retried within
     * max_retry, at once (no retry_backoff_ms wait), the first attempt
     * staying out, and with no retry left the call waits for the first
     * attempt alone (brpc fails the call). An error answer to the backup
     * ends the call as any answer does. An answer to the first attempt
     * that comes while the backup, or a retry of it, is being made (a
     * connect, packing, a credential) is kept and ends the call once that
     * is done; the backup is then not sent (nor counted), and its pooled
     * connection stays open. An error answer in that time is dropped as
     * when the backup is out: the backup goes, and the call waits for it;
     * so is an answer there is no memory to keep. A backup due during a
     * retry's wait (retry_backoff_ms) sends that retry at once. < 0
     * (default -1): none. For idempotent methods only: the server may run
     * the request twice. */
    int32_t backup_request_ms;
} jet_channel_options_t;

void jet_server_options_init(jet_server_options_t *opts);
void jet_channel_options_init(jet_channel_options_t *opts);

#ifdef __cplusplus
}
#endif
#endif
