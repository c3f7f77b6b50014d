/* jet_server: serves protoc-c generated services over baidu_std.
 *
 * Usage:
 *   jet_server_t *srv; jet_server_create(&opts, &srv);
 *   jet_server_add_service(srv, &my_service.base);   // a ProtobufCService
 *   jet_server_start(srv, "0.0.0.0:8000");           // or "unix:/path"
 *   ... jet_server_stop(srv); jet_server_destroy(srv);
 *
 * A service is a protoc-c ProtobufCService (generated *_Service struct
 * initialised with the generated *_INIT macro and the user's method
 * functions). A method is invoked as protoc-c defines it:
 *   method(service, input, closure, closure_data)
 * and answers by calling closure(output, closure_data) exactly once, on any
 * thread, now or later (asynchronous completion). closure(NULL, ...) without
 * jet_call_set_failed() answers EINTERNAL. The input message and the call
 * stay valid until the closure is called; the output is serialised during
 * the closure call and remains the handler's. jet_server_call(closure_data)
 * gives the call (attachments, log id, set_failed). closure_data is a
 * handle, not the call's address: a second closure call for one request
 * (at once or much later) answers nothing and logs an error line; no other
 * request is touched (the handle is a slot and a 32-bit version: only a
 * closure called again after 2^31 later requests went through its slot, at
 * the moment one holds that very version, could reach it). Pass only the
 * closure_data the server gave: a made-up value may name a live request.
 *
 * Dispatch is by full service name ("package.Service") and method name; an
 * undotted name matches a service without a package of that name first,
 * then a service's short name (the first service added with it, when
 * services of two packages share it). Errors use brpc's codes
 * and texts ("[ip:port][E1002]Fail to find method=...").
 *
 * Threads: create/add/start/stop/destroy from one controlling thread, never
 * from an event-loop thread (a handler run on the loop, a done callback):
 * stop and destroy wait for the loops and the handlers, so there they would
 * wait for themselves; they refuse instead (see below). */
#ifndef JETRPC_SERVER_H
#define JETRPC_SERVER_H

#include <protobuf-c/protobuf-c.h>

#include "jetrpc/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jet_server jet_server_t;

/* opts may be NULL (defaults). 0, -EINVAL (srv_p NULL, or bad options: a
 * socket mode outside its enum), -ENOMEM. Out-of-range numbers act as documented in
 * jet_server_options_t (0 or less: the default). */
int jet_server_create(const jet_server_options_t *opts, jet_server_t **srv_p);
/* Adds a service before start. -EEXIST for a duplicate full name, -EINVAL
 * for a NULL server or service (or a service without a descriptor) or once the server was
 * started. The service must outlive the server. */
int jet_server_add_service(jet_server_t *srv, ProtobufCService *service);
/* Listens on "ip:port", ":port", "port", "[v6]:port" or "unix:/path" (port 0
 * picks a free one: see jet_server_listen_port). Starts the event loops.
 * -EINVAL for a bad address (NULL, empty, port outside 0..65535) or a
 * server started before (also once stopped: a server starts once), a
 * negative errno of bind(2)/listen(2) (-EADDRINUSE...: also for a unix
 * path that holds a file other than a socket, or the socket of a live
 * server; a stale socket, its server gone, is replaced),
 * -EPROTONOSUPPORT when opts asked for SSL (ssl_cert), in any socket mode,
 * or for a socket mode not built in (RDMA), or -EAGAIN, -EMFILE, -ENOMEM
 * when the event loops or the worker threads cannot be started. A failed
 * start may be retried. */
int jet_server_start(jet_server_t *srv, const char *addr);
/* The port listened on; 0 before start, after stop and for "unix:". */
int jet_server_listen_port(const jet_server_t *srv);
/* Stops accepting, answers new requests with ELOGOFF, waits up to
 * graceful_stop_ms for in-flight calls and for the answers given to be
 * written out, then closes every connection. Returns 0 (also for a server
 * not started or already stopped: idempotent; a stopped server does not
 * start again), -EINVAL for NULL, or -EDEADLK on an event-loop thread,
 * where nothing is done. From a handler run in the worker pool it stops,
 * but waits for that handler's own call too: answer first. */
int jet_server_stop(jet_server_t *srv);
/* Stops (as above), then waits for every handler to have answered, however
 * long (a warning every 5 s says how many calls are still held), and frees the
 * server. On an event-loop thread or in one of the server's own handlers
 * it does nothing but log an error: the server goes on, for its
 * controlling thread to destroy. NULL is ignored. */
void jet_server_destroy(jet_server_t *srv);

/* Counters for tests and /status. */
typedef struct jet_server_stats {
    uint64_t connections_accepted;
    uint64_t connections_open;
    uint64_t requests;
    uint64_t requests_failed;
    uint64_t in_flight;
    /* Connections closed, holding part of a request from a silent peer, to
     * free memory for another connection's input (server_shed_stalled_ms). */
    uint64_t connections_shed;
} jet_server_stats_t;
void jet_server_get_stats(const jet_server_t *srv, jet_server_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
