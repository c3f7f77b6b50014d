/* RPC test helpers for the rpc and interop groups (library jet_testutil_rpc,
 * which links jetrpc, jet_testutil_net and jet_testutil_codec): a
 * configurable example.EchoService and servers running it, channels, echo
 * calls and their answers, done counters, waits on server stats, and
 * baidu_std frames read from a jt_conn_t.
 *
 * Every wait is bounded by the guard its caller gives; the bounds are
 * guards, never timing assertions. */
#ifndef JET_TESTUTIL_RPC_H
#define JET_TESTUTIL_RPC_H

#include <stdbool.h>
#include <stdint.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "testutil.h"
#include "testutil_codec.h"
#include "testutil_net.h"

/* ---- the echo service --------------------------------------------------------
 *
 * The request message picks the handler's behaviour:
 *   "logid"               answers the log id it saw, in decimal
 *   "thread"              answers the name of the thread it runs on
 *   "later:<ms>"          echoes from another thread after <ms>
 *   "sleep:<ms>"          echoes after <ms>: blocks the handler, or with
 *                         opts.sleep_async answers from another thread
 *   "block:<ms>"          blocks the handler <ms> (always), then answers
 *   "big:<n>"             answers "big" with an attachment of n bytes (at
 *                         most 16 MiB) of jt_fill_pattern(seed 5)
 *   "fail"                set_failed(1003, "asked to fail") (as brpc's
 *                         example echo server), closure(NULL)
 *   "fail:<code>:<text>"  set_failed(code, text), closure(NULL)
 *   "failmsg:<code>:<t>"  set_failed(code, text), closure(response) with an
 *                         attachment that must not arrive
 *   "null"                closure(NULL) without set_failed
 *   anything else         echoes: the message and the attachment back, the
 *                         answer compressed as the request was; with
 *                         opts.answer_lengths "ok len=<message length>
 *                         att=<attachment length>", uncompressed.
 * opts.hook sees every request first and may take it. */

/* true when it answered the call or keeps it to answer later. */
typedef bool (*jt_echo_hook_t)(const Example__EchoRequest *req,
                               Example__EchoResponse_Closure closure, void *closure_data);

typedef struct jt_echo_opts {
    jt_echo_hook_t hook;
    bool sleep_async;    /* "sleep:<ms>" never blocks the handler's thread */
    bool answer_lengths; /* plain requests get "ok len=%zu att=%zu" */
} jt_echo_opts_t;

/* Registered as its base; must outlive the servers it is added to. */
typedef struct jt_echo_service {
    Example__EchoService_Service base;
    jt_echo_opts_t opts;
} jt_echo_service_t;

/* opts may be NULL (all defaults). */
void jt_echo_service_init(jt_echo_service_t *svc, const jt_echo_opts_t *opts);
/* For hooks: answers the call with message (and the request's attachment
 * back), now or from a detached thread after ms (counted by
 * jt_echo_wait_idle); false when no thread could be had. */
void jt_echo_answer(const char *message, Example__EchoResponse_Closure closure, void *closure_data);
bool jt_echo_answer_later(int ms, const char *message, Example__EchoResponse_Closure closure,
                          void *closure_data);

/* Creates a server with options so (NULL: defaults), adds svc and starts it
 * on addr ("127.0.0.1:0" for a free port, "unix:/path"). The server, its
 * port in *port_p when given; NULL on failure (nothing left behind). */
jet_server_t *jt_echo_server_start(jt_echo_service_t *svc, const char *addr,
                                   const jet_server_options_t *so, int *port_p);
/* The same on 127.0.0.1:port (0: a free port). */
jet_server_t *jt_echo_server_start_port(jt_echo_service_t *svc, int port,
                                        const jet_server_options_t *so, int *port_p);
/* Stops and destroys srv (NULL: nothing). */
void jt_server_stop(jet_server_t *srv);
/* Waits (up to guard_us) until no answer from another thread ("later:",
 * asynchronous "sleep:") is pending. */
bool jt_echo_wait_idle(int64_t guard_us);

/* ---- channels and echo calls ------------------------------------------------------ */

/* A channel to addr; max_retry < 0 keeps the default. NULL on failure. */
jet_channel_t *jt_channel_open(const char *addr, jet_connection_type_t type, int32_t timeout_ms,
                               int32_t max_retry);
/* The same to 127.0.0.1:port. */
jet_channel_t *jt_channel_open_port(int port, jet_connection_type_t type, int32_t timeout_ms,
                                    int32_t max_retry);
/* Echo(message msg) on call: synchronous when done is NULL. */
int jt_echo_call(jet_channel_t *ch, jet_call_t *call, const char *msg, jet_call_done_cb_t done,
                 void *arg);
/* The response's message, or NULL without a response. */
const char *jt_echo_resp_message(const jet_call_t *call);
/* The call succeeded with message expected. */
bool jt_echo_resp_is(const jet_call_t *call, const char *expected);

/* Counts done callbacks: jt_count_done as done, the counter as its arg. */
typedef struct jt_counter {
    _Atomic uint32_t n;
} jt_counter_t;

void jt_count_done(jet_call_t *call, void *arg);
/* Waits until the count reaches target; false after guard_us. */
bool jt_counter_wait(jt_counter_t *c, uint32_t target, int64_t guard_us);

/* ---- server stats ------------------------------------------------------------------- */

#define JT_ANY UINT64_MAX

/* Waits until srv has exactly in_flight calls in flight (JT_ANY: any number)
 * and at most open_at_most connections open. The last stats seen go to
 * *st_p when given. false (and a line on stderr) after guard_us. */
bool jt_server_wait_stats(jet_server_t *srv, uint64_t in_flight, uint64_t open_at_most,
                          int64_t guard_us, jet_server_stats_t *st_p);

/* ---- raw peers ---------------------------------------------------------------------- */

/* A raw TCP peer of the server on port that sends a complete echo request
 * with message first_msg (NULL: none), then announces a request of
 * announce bytes, sends `bytes` of it (zeros) and stops: a stalled upload
 * holding that much of the server's memory. The fd, or -1. */
int jt_silent_upload(int port, size_t announce, size_t bytes, const char *first_msg);

/* ---- frames from a raw connection ------------------------------------------------- */

/* The next baidu_std frame on c, decoded into f (initialised, empty). 1: a
 * frame (and a malloc'd copy of its bytes in *raw_p when raw_p is given),
 * 0: none within timeout_ms, -1: closed, -2: bytes that are not a baidu_std
 * frame or do not decode. */
int jt_conn_frame(jt_conn_t *c, int timeout_ms, jet_baidu_frame_t *f, uint8_t **raw_p,
                  size_t *raw_len_p);

#endif
