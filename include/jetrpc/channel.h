/* jet_channel: the client side of one server address.
 *
 *   jet_channel_t *ch; jet_channel_create("127.0.0.1:8000", &opts, &ch);
 *   jet_call_t *call = jet_call_create();
 *   jet_channel_call(ch, &example__echo_service__descriptor, 0, call,
 *                    &req.base, NULL, NULL);      // synchronous
 *   if (!jet_call_failed(call)) use(jet_call_response(call));
 *
 * Addresses: "ip:port", "host:port" (resolved once at create), "[v6]:port",
 * "unix:/path". Connections are made lazily, on the first call, and again
 * after one fails ("reconnect on the next call").
 *
 * A call with done == NULL is synchronous: jet_channel_call returns when it
 * is complete. With done, it returns at once and done(call, arg) runs exactly
 * once when the call completes, on an event-loop thread (or on the deadline
 * timer's thread for a timeout; or inside jet_channel_call when the call
 * fails before anything was sent): never on a thread that runs a loop only
 * while it waits for a call of its own (a synchronous jet_channel_call or a
 * jet_call_join may run its connection's loop meanwhile: flag
 * event_guest_drive), which hands such callbacks, and server handlers run
 * on the loop, to the loop's own thread. Like any code run on a loop, a done
 * callback must not block: a lock that a thread holds while it waits for a
 * call is not to be taken there (that call's answer may have to be read by
 * the very loop it would block; the call then ends only at its deadline).
 *
 * Every call completes: with the response, with the server's error, with
 * ERPCTIMEDOUT at its deadline, or with the connection's error (EEOF,
 * ECONNREFUSED...) once max_retry retries on new connections are used up.
 * As in brpc's retry policy, a server's answer ELOGOFF, ELIMIT or
 * EOVERCROWDED is retried too, within max_retry and the deadline.
 *
 * A synchronous call waits on the calling thread; made on the thread of the
 * event loop that serves its connection (in a done callback, or in a server
 * handler run on the loop), it could never read its own answer, and fails
 * at once with EDEADLK instead: such code calls asynchronously, or its
 * handlers run in the server's worker pool (usercode_in_pool). The check
 * sees the client's side only: a synchronous call from a loop thread to a
 * server in the same process waits until its deadline (ERPCTIMEDOUT) when
 * the server's end of the connection landed on the caller's loop.
 *
 * Threads: any number of threads may call through one channel. Destroying a
 * channel closes its connections: calls still in flight on it end with
 * ECLOSE (not retried), their done callbacks run as for any completion, and
 * the channel's memory goes with the last of them. No new call may be made
 * on a destroyed channel, except from the done callback of one of its calls,
 * where jet_channel_call returns -JET_ECLOSE (and runs no callback). */
#ifndef JETRPC_CHANNEL_H
#define JETRPC_CHANNEL_H

#include <protobuf-c/protobuf-c.h>

#include "jetrpc/call.h"
#include "jetrpc/options.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct jet_channel jet_channel_t;

/* opts may be NULL. 0, -EINVAL (ch_p NULL, bad address or options: a socket mode or
 * connection type outside its enum, a negative max_retry), -ENOMEM,
 * -EPROTONOSUPPORT (a socket mode not built in, i.e. RDMA; a protocol other
 * than baidu_std; SSL), or the error of starting the event loops (-EAGAIN,
 * -EMFILE: no thread or epoll to be had). URMA or UBRing that cannot run
 * here (no provider, no device) is not an error: the channel's connections
 * use TCP, and one log line says why. */
int jet_channel_create(const char *addr, const jet_channel_options_t *opts, jet_channel_t **ch_p);
void jet_channel_destroy(jet_channel_t *ch);

/* Calls method number method_index of service on the server. The request
 * (NULL: an empty message, which the server may fail with EREQUEST when its
 * type has required fields; else of the method's input type, checked) is
 * serialised before the function returns (the caller may free it then). The
 * call's own settings override the channel's. Returns 0 when the call was
 * issued (for a synchronous call: completed; check jet_call_failed), or a
 * negative code for misuse (-EINVAL: bad index, call in flight; -JET_ECLOSE:
 * the channel was destroyed, see above). */
int jet_channel_call(jet_channel_t *ch, const ProtobufCServiceDescriptor *service,
                     unsigned method_index, jet_call_t *call, const ProtobufCMessage *request,
                     jet_call_done_cb_t done, void *arg);

/* Waits until an asynchronous call is complete and its done callback has
 * returned. The library does not touch the call once done has started, so
 * done may destroy or reissue it; joining a call that done destroyed is a
 * use after free (join it or destroy it in done, not both), and joining a
 * call that done reissued waits for the new issue. Called in the call's own
 * done, it returns at once (the call is complete; done returning is the
 * rest). A call never issued, or a synchronous one, returns at once.
 * Not from a loop thread or the deadline thread (a done callback, a
 * handler) for a call that is not complete there, such as one its own done
 * reissued: the wait blocks that thread, and so the call too when it needs
 * the thread (its answer comes on that loop; its deadline), for ever at
 * worst; a warning says so once. */
void jet_call_join(jet_call_t *call); /* NULL: returns at once */

#ifdef __cplusplus
}
#endif
#endif
