#include "jetrpc/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "jetrpc/errors.h"
#include "net/listener.h"
#include "net/socket.h"
#include "rpc/call.h"
#include "rpc/compress.h"
#include "rpc/protocol.h"
#include "rpc/transports.h"
#include "rpc/worker_pool.h"
#include "ubring/ubring_hello.h"
#include "urma/urma_handshake.h"

/* Foreign handshakes a TCP-mode port answers so that clients fall back (RDMA
 * clients of brpc get the "un-negotiable" hello every brpc server sends). */
#define SRV_RDMA_V2_MIN 40
#define SRV_RDMA_V2_MAX 4096
#define SRV_RDMA_V3_MAX 8192

typedef enum srv_hello_state {
    SRV_HELLO_NONE = 0, /* protocol not decided yet */
    SRV_HELLO_WAIT_ACK, /* answered a foreign hello; drain the 4-byte ACK */
    SRV_HELLO_DONE,
} srv_hello_state_t;

/* A connection's server-side state; it is the socket's owner. */
typedef struct srv_conn {
    struct jet_server *srv;
    jet_socket_t *s; /* NULL until accept returns (under the server lock) */
    struct srv_conn *prev, *next;
    srv_hello_state_t hello;
    bool authed; /* its first request passed the authenticator (loop thread) */
    bool has_actx; /* actx was filled by verify_credential_ctx (before authed) */
    jet_auth_context_t actx;
    /* Refused by the authenticator: its input is dropped until the timer
     * closes it (SRV_REFUSE_LINGER_MS after the ERPCAUTH answer). */
    bool refused;
    jet_timer_t refuse_timer;
    jet_socket_t *refused_s; /* the timer's reference */
    /* Input met by a guest (a user's thread that runs the loop while it
     * waits for a call of its own) is served by the loop's thread: serving
     * runs user code (the authenticator, handlers run on the loop). */
    jet_task_t guest_task;
    jet_socket_t *guest_s; /* the task's reference */
} srv_conn_t;

/* How long a connection whose credential was refused stays open after the
 * ERPCAUTH answer (its input dropped): closed at once, the client could
 * fail its other requests' writes (EPIPE) and its connection before it
 * reads the answer, and report EOF instead of ERPCAUTH. */
#define SRV_REFUSE_LINGER_MS 100

struct jet_server {
    jet_server_options_t opts;
    uint32_t max_body;
    ProtobufCService **services;
    size_t nservices;
    jet_listener_t *listener;
    jet_worker_pool_t *workers;
    _Atomic bool stopping;
    bool started;
    _Atomic int64_t in_flight;
    pthread_mutex_t lock;
    srv_conn_t conns; /* list head */
    _Atomic uint64_t n_accepted, n_open, n_requests, n_failed, n_shed;
    pthread_t idle_thread; /* closes idle connections when idle_timeout_sec > 0 */
    bool idle_thread_started;
    pthread_cond_t idle_cond;
};

static void srv_on_read(jet_socket_t *s);
static void srv_on_failed(jet_socket_t *s, int err);
static void srv_on_release(jet_socket_t *s);
static bool srv_on_nomem(jet_socket_t *s);

static const jet_socket_handler_t srv_handler = {
    .on_read = srv_on_read,
    .on_failed = srv_on_failed,
    .on_release = srv_on_release,
    .on_nomem = srv_on_nomem,
};

JET_FLAG_DEFINE_INT32_RANGE(
    server_shed_stalled_ms, 1000, 0, INT32_MAX,
    "When a server's read finds no memory (iobuf_max_mb reached), it closes the connection "
    "holding the most bytes of an unfinished request that has been idle (nothing read or "
    "written) for this many milliseconds, and reads again, instead of failing the connection it "
    "reads (0: never)");

int jet_server_create(const jet_server_options_t *opts, jet_server_t **srv_p)
{
    if (!srv_p) return -EINVAL;
    jet_server_t *srv = calloc(1, sizeof *srv);
    if (!srv) return -ENOMEM;
    if (opts)
        srv->opts = *opts;
    else
        jet_server_options_init(&srv->opts);
    if (srv->opts.socket_mode < 0 || srv->opts.socket_mode >= JET_SOCKET_MODE_MAX) {
        free(srv);
        return -EINVAL;
    }
    srv->max_body = jet__max_body_size(srv->opts.max_body_size);
    pthread_mutex_init(&srv->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->idle_cond, &ca);
    pthread_condattr_destroy(&ca);
    srv->conns.prev = srv->conns.next = &srv->conns;
    *srv_p = srv;
    return 0;
}

int jet_server_add_service(jet_server_t *srv, ProtobufCService *service)
{
    if (!srv || !service || !service->descriptor || srv->started) return -EINVAL;
    for (size_t i = 0; i < srv->nservices; i++)
        if (strcmp(srv->services[i]->descriptor->name, service->descriptor->name) == 0)
            return -EEXIST;
    ProtobufCService **v = realloc(srv->services, (srv->nservices + 1) * sizeof *v);
    if (!v) return -ENOMEM;
    srv->services = v;
    srv->services[srv->nservices++] = service;
    return 0;
}

static void srv_on_accept(jet_listener_t *l, int fd, const jet_addr_t *peer, void *arg)
{
    jet_server_t *srv = arg;
    if (atomic_load(&srv->stopping)) {
        close(fd);
        return;
    }
    srv_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->srv = srv;
    jet_socket_t *s;
    /* Linked before the socket exists, under the lock on_failed takes, so that
     * a connection failing at once still finds its entry. */
    pthread_mutex_lock(&srv->lock);
    c->next = &srv->conns;
    c->prev = srv->conns.prev;
    srv->conns.prev->next = c;
    srv->conns.prev = c;
    /* Counted before the socket exists: its failure may be counted at once. */
    atomic_fetch_add(&srv->n_open, 1);
    int rc = jet__socket_accept(fd, peer, srv->opts.socket_mode, jet_loop_pick(), &srv_handler,
                                c, &s);
    if (rc < 0) {
        c->prev->next = c->next;
        c->next->prev = c->prev;
        pthread_mutex_unlock(&srv->lock);
        atomic_fetch_sub(&srv->n_open, 1);
        JET_WARN("cannot serve a connection: %s", jet_strerror(rc));
        close(fd);
        free(c);
        return;
    }
    c->s = s; /* the creator's reference, dropped by on_failed */
    pthread_mutex_unlock(&srv->lock);
    atomic_fetch_add(&srv->n_accepted, 1);
    JET_DEBUG("accepted %s", s->peer);
}

static void *srv_idle_main(void *arg)
{
    jet_server_t *srv = arg;
    pthread_setname_np(pthread_self(), "jet_idle");
    int64_t limit_us = (int64_t)srv->opts.idle_timeout_sec * 1000000;
    pthread_mutex_lock(&srv->lock);
    while (!atomic_load(&srv->stopping)) {
        int64_t now = jet_now_us();
        for (srv_conn_t *c = srv->conns.next; c != &srv->conns; c = c->next) {
            if (!c->s) continue;
            int64_t last = atomic_load_explicit(&c->s->last_active_us, memory_order_relaxed);
            if (now - last > limit_us && !jet__socket_failed(c->s)) {
                JET_INFO("close %s: idle for more than %d s", c->s->peer, srv->opts.idle_timeout_sec);
                jet__socket_set_failed(c->s, -JET_ECLOSE);
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&srv->idle_cond, &srv->lock, &ts);
    }
    pthread_mutex_unlock(&srv->lock);
    return NULL;
}

int jet_server_start(jet_server_t *srv, const char *addr_text)
{
    if (srv->started) return -EINVAL;
    jet_addr_t addr;
    if (jet__addr_parse(addr_text, &addr) < 0) {
        JET_ERROR("bad listen address '%s'", addr_text ? addr_text : "(null)");
        return -EINVAL;
    }
    jet__rpc_transports_init();
    const jet_transport_ops_t *ops = jet__transport_get(srv->opts.socket_mode);
    if (!ops) {
        JET_ERROR("socket mode %d is not available", srv->opts.socket_mode);
        return -EPROTONOSUPPORT;
    }
    jet_transport_check_t check = {.is_server = true, .protocol = "baidu_std",
                                   .use_ssl = srv->opts.ssl_cert != NULL};
    int rc = ops->global_init(&check);
    if (rc < 0) return rc;
    rc = jet_loops_start(0);
    if (rc < 0) return rc;
    if (srv->opts.usercode_in_pool) {
        int n = srv->opts.num_workers > 0 ? srv->opts.num_workers : (int)sysconf(_SC_NPROCESSORS_ONLN);
        rc = jet__worker_pool_create(n, &srv->workers);
        if (rc < 0) return rc;
    }
    rc = jet__listener_create(&addr, srv_on_accept, srv, &srv->listener);
    if (rc < 0) {
        JET_ERROR("cannot listen on %s: %s", addr_text, jet_strerror(rc));
        jet__worker_pool_destroy(srv->workers);
        srv->workers = NULL;
        return rc;
    }
    srv->started = true;
    if (srv->opts.idle_timeout_sec > 0) {
        int err = pthread_create(&srv->idle_thread, NULL, srv_idle_main, srv);
        if (err == 0)
            srv->idle_thread_started = true;
        else
            JET_WARN("server on %s: no thread to close idle connections (%s): idle_timeout_sec=%d "
                     "is not applied",
                     addr_text, strerror(err), srv->opts.idle_timeout_sec);
    }
    char bound[80];
    jet__addr_format(&addr, bound, sizeof bound);
    if (addr.u.sa.sa_family != AF_UNIX) {
        char *colon = strrchr(bound, ':');
        if (colon) snprintf(colon + 1, sizeof bound - (size_t)(colon + 1 - bound), "%d", jet_server_listen_port(srv));
    }
    JET_INFO("server listening on %s (%s)", bound, ops->name);
    return 0;
}

int jet_server_listen_port(const jet_server_t *srv)
{
    return srv->listener ? jet__listener_port(srv->listener) : 0;
}

static void srv_wait_in_flight(jet_server_t *srv, int64_t limit_ms)
{
    int64_t until = limit_ms < 0 ? INT64_MAX : jet_now_us() + limit_ms * 1000;
    int64_t warn_at = jet_now_us() + 5000000;
    while (atomic_load(&srv->in_flight) > 0 && jet_now_us() < until) {
        usleep(1000);
        if (jet_now_us() > warn_at) {
            JET_WARN("server waits for %lld calls whose handlers have not answered",
                     (long long)atomic_load(&srv->in_flight));
            warn_at = jet_now_us() + 5000000;
        }
    }
}

/* Every answer handed to a connection has been written (to the kernel, the
 * ring or the send queue): closing loses none of them. */
static bool srv_all_written(jet_server_t *srv)
{
    bool all = true;
    pthread_mutex_lock(&srv->lock);
    for (srv_conn_t *c = srv->conns.next; all && c != &srv->conns; c = c->next)
        if (c->s && !jet__socket_failed(c->s) &&
            atomic_load_explicit(&c->s->unwritten, memory_order_relaxed) > 0)
            all = false;
    pthread_mutex_unlock(&srv->lock);
    return all;
}

/* A handler run on the loop, a done callback: the stop would wait for
 * the loops to close the connections (and for that handler to answer), so
 * for itself, for ever. */
static bool srv_on_loop_thread(const char *what)
{
    if (!jet_loop_current()) return false;
    JET_ERROR("%s called on an event-loop thread (a handler run on the loop, or a done "
              "callback) would wait for that thread for ever; refused, the server goes on",
              what);
    return true;
}

int jet_server_stop(jet_server_t *srv)
{
    if (!srv) return -EINVAL;
    if (!srv->started || atomic_load(&srv->stopping)) return 0;
    if (srv_on_loop_thread("jet_server_stop")) return -EDEADLK;
    if (atomic_exchange(&srv->stopping, true)) return 0;
    jet__listener_destroy(srv->listener);
    srv->listener = NULL;
    if (srv->idle_thread_started) {
        pthread_mutex_lock(&srv->lock);
        pthread_cond_signal(&srv->idle_cond);
        pthread_mutex_unlock(&srv->lock);
        pthread_join(srv->idle_thread, NULL);
        srv->idle_thread_started = false;
    }
    int64_t grace_ms = srv->opts.graceful_stop_ms > 0 ? srv->opts.graceful_stop_ms : 0;
    int64_t until = jet_now_us() + grace_ms * 1000;
    srv_wait_in_flight(srv, grace_ms);
    /* The answers go out before the connections close, within the same
     * grace (a large answer may still be on its way to the kernel). */
    while (!srv_all_written(srv) && jet_now_us() < until)
        usleep(1000);
    pthread_mutex_lock(&srv->lock);
    for (srv_conn_t *c = srv->conns.next; c != &srv->conns; c = c->next)
        if (c->s) jet__socket_set_failed(c->s, -JET_ELOGOFF);
    pthread_mutex_unlock(&srv->lock);
    while (atomic_load(&srv->n_open) > 0) usleep(1000);
    return 0;
}

void jet_server_destroy(jet_server_t *srv)
{
    if (!srv) return;
    if (srv->started) {
        /* It waits for every handler to have answered, and joins the worker
         * threads: never from one of them. */
        if (srv_on_loop_thread("jet_server_destroy")) return;
        if (jet__worker_pool_in_thread(srv->workers)) {
            JET_ERROR("jet_server_destroy called from one of the server's handlers would wait "
                      "for that handler for ever; refused, the server goes on");
            return;
        }
    }
    jet_server_stop(srv);
    srv_wait_in_flight(srv, -1);
    jet__worker_pool_destroy(srv->workers);
    pthread_mutex_destroy(&srv->lock);
    pthread_cond_destroy(&srv->idle_cond);
    free(srv->services);
    free(srv);
}

void jet_server_get_stats(const jet_server_t *srv, jet_server_stats_t *out)
{
    out->connections_accepted = atomic_load(&srv->n_accepted);
    out->connections_open = atomic_load(&srv->n_open);
    out->connections_shed = atomic_load(&srv->n_shed);
    out->requests = atomic_load(&srv->n_requests);
    out->requests_failed = atomic_load(&srv->n_failed);
    out->in_flight = (uint64_t)atomic_load(&srv->in_flight);
}

static void srv_on_failed(jet_socket_t *s, int err)
{
    srv_conn_t *c = s->owner;
    jet_server_t *srv = c->srv;
    pthread_mutex_lock(&srv->lock);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    pthread_mutex_unlock(&srv->lock);
    atomic_fetch_sub(&srv->n_open, 1);
    jet__socket_unref(s); /* the list's reference; c lives until release */
}

/* Loop thread of s, whose read found no memory: the connection holding the
 * most memory in part of a request and idle (nothing read or written: a
 * stalled or hostile upload) is closed rather than s, which is being
 * served. Not one whose reading we paused ourselves (its peer is waiting
 * for us, or its turn will come). True also while a connection closed
 * earlier has yet to free its input: s reads again shortly. */
static bool srv_on_nomem(jet_socket_t *s)
{
    int64_t quiet_us = (int64_t)JET_FLAG(server_shed_stalled_ms) * 1000;
    if (quiet_us <= 0) return false;
    srv_conn_t *me = s->owner;
    jet_server_t *srv = me->srv;
    int64_t now = jet_now_coarse_us();
    jet_socket_t *victim = NULL;
    size_t most = 0;
    int64_t quiet_for = 0;
    bool pending = false;
    pthread_mutex_lock(&srv->lock);
    for (srv_conn_t *c = srv->conns.next; c != &srv->conns; c = c->next) {
        jet_socket_t *o = c->s;
        if (!o || o == s) continue;
        size_t held = atomic_load_explicit(&o->read_held, memory_order_relaxed);
        /* Failed, and its loop has not freed its input yet (it does so
         * before the connection leaves this list): that memory is coming,
         * no other connection is closed meanwhile. */
        if (jet__socket_failed(o)) {
            pending |= held > 0;
            continue;
        }
        if (jet__socket_read_paused(o)) continue;
        int64_t quiet = now - atomic_load_explicit(&o->last_active_us, memory_order_relaxed);
        if (held > most && quiet >= quiet_us) {
            victim = o;
            most = held;
            quiet_for = quiet;
        }
    }
    if (pending) victim = NULL;
    if (victim) jet__socket_ref(victim);
    pthread_mutex_unlock(&srv->lock);
    if (pending) return true;
    if (!victim) return false;
    JET_WARN_PEER("close %s: out of memory for the input of %s, and it holds %zu bytes of an "
                  "unfinished request, idle for %lld ms",
                  victim->peer, s->peer, most, (long long)(quiet_for / 1000));
    atomic_fetch_add(&srv->n_shed, 1);
    jet__socket_set_failed(victim, -ENOMEM);
    jet__socket_unref(victim);
    return true;
}

static void srv_actx_clear(jet_auth_context_t *a)
{
    free(a->user);
    free(a->group);
    free(a->roles);
    free(a->starter);
    memset(a, 0, sizeof *a);
}

static void srv_on_release(jet_socket_t *s)
{
    srv_conn_t *c = s->owner;
    if (c) srv_actx_clear(&c->actx);
    free(c);
    s->owner = NULL;
}

const jet_auth_context_t *jet_call_auth_context(const jet_call_t *call)
{
    if (!call || !call->server || !call->srv_sock) return NULL;
    const srv_conn_t *c = call->srv_sock->owner;
    return c && c->has_actx ? &c->actx : NULL;
}

/* ---- responses ------------------------------------------------------------ */

static void srv_call_finish(jet_call_t *call)
{
    jet_server_t *srv = call->server;
    uint64_t handle = call->srv_handle;
    jet__msg_arena_release(&call->msg_arena, call->srv_input);
    call->srv_input = NULL;
    if (call->error_code) atomic_fetch_add(&srv->n_failed, 1);
    jet__socket_unref(call->srv_sock);
    jet_call_destroy(call);
    /* Its handle names no call from here on (the slot's next version). */
    if (handle) jet__cid_free((uint32_t)(handle >> 32));
    atomic_fetch_sub(&srv->in_flight, 1);
}

static void srv_send_response(jet_call_t *call, const ProtobufCMessage *output)
{
    jet_socket_t *s = call->srv_sock;
    jet_iobuf_t body, frame;
    jet_iobuf_init(&body);
    jet_iobuf_init(&frame);
    if (!call->error_code) {
        if (!output) {
            jet_call_set_failed(call, JET_EINTERNAL, "Handler answered without a response");
        } else if (!protobuf_c_message_check(output)) {
            jet_call_set_failed(call, JET_ERESPONSE, "Fail to serialize response=%s: missing required fields",
                                output->descriptor->name);
        } else if (call->resp_compress != 0 &&
                   jet__encode_message(output, call->resp_compress, &body) < 0) {
            jet_iobuf_clear(&body);
            jet_call_set_failed(call, JET_ERESPONSE, "Fail to serialize response=%s, CompressType=%s",
                                output->descriptor->name, jet__compress_name(call->resp_compress));
        }
    }
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rmeta = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    /* The handler's user fields go with any answer, as brpc's do. */
    void *uf_tmp = NULL;
    if (jet__uf_to_meta(&call->resp_uf, &meta, &uf_tmp) < 0) {
        jet_iobuf_clear(&body);
        jet_call_set_failed(call, JET_EINTERNAL,
                            "Fail to send the response's %u user fields: out of memory",
                            call->resp_uf.n);
    }
    char text[1200];
    meta.response = &rmeta;
    rmeta.has_error_code = true;
    rmeta.error_code = call->error_code;
    if (call->error_code) {
        /* brpc's form: "[ip:port][E<code>]<text>"; clients treat it as opaque. */
        snprintf(text, sizeof text, "[%s][E%d]%s", s->local, call->error_code,
                 call->error_text ? call->error_text : jet_strerror(call->error_code));
        rmeta.error_text = text;
        jet_iobuf_clear(&body);
    }
    meta.has_compress_type = true;
    meta.compress_type = call->error_code ? 0 : call->resp_compress;
    meta.has_correlation_id = true;
    meta.correlation_id = call->srv_cid;
    jet_iobuf_t *att = NULL;
    if (!call->error_code && !jet_iobuf_empty(&call->resp_att)) {
        meta.has_attachment_size = true;
        meta.attachment_size = (int32_t)jet_iobuf_len(&call->resp_att);
        att = &call->resp_att;
    }
    meta.has_content_type = true;
    meta.has_checksum_type = true;
    meta.has_checksum_value = true;
    /* baidu_std's attachment_size is an int32: a larger one is never sent
     * (checked before packing, which takes the attachment's bytes). */
    size_t att_len = att ? jet_iobuf_len(att) : 0;
    int rc = 0;
    size_t frame_len = att_len;
    if (att_len > INT32_MAX) {
        rc = -EMSGSIZE;
    } else {
        /* Uncompressed: the message is packed with the frame (one piece). */
        rc = !call->error_code && call->resp_compress == 0
                 ? jet__baidu_pack_msg(&frame, &meta, output, att)
                 : jet__baidu_pack(&frame, &meta, &body, att);
        frame_len = jet_iobuf_len(&frame);
    }
    free(uf_tmp);
    if (rc == -EOVERFLOW && call->resp_uf.n > 0) {
        /* The handler's user fields make a meta no jetrpc client decodes:
         * the answer goes without them, as an error that says so (the
         * handler's own error, if it failed, stands). */
        JET_WARN_PEER("cannot answer %s with %u user fields: the RpcMeta would be over 1 MiB; "
                      "they are dropped",
                      s->peer, call->resp_uf.n);
        jet__uf_clear(&call->resp_uf);
        if (!call->error_code)
            jet_call_set_failed(call, JET_ERESPONSE,
                                "the response's user fields make its RpcMeta over 1 MiB, more "
                                "than a jetrpc client decodes: not sent");
        srv_send_response(call, NULL);
        jet_iobuf_fini(&body);
        jet_iobuf_fini(&frame);
        return;
    }
    if (rc == 0) rc = jet__socket_write_answer(s, &frame);
    if (rc == -EMSGSIZE && !call->error_code && !jet__socket_failed(s)) {
        /* Larger than the connection ever carries: the client gets an error
         * answer that says so, and the connection goes on. */
        char why[256];
        if (att_len > INT32_MAX)
            snprintf(why, sizeof why,
                     "response attachment of %zu bytes is larger than baidu_std's "
                     "attachment_size (an int32) can say",
                     att_len);
        else
            jet__socket_size_error(s, "response", frame_len, why, sizeof why);
        JET_WARN_PEER("cannot answer %s: %s", s->peer, why);
        jet_call_set_failed(call, JET_ERESPONSE, "%s", why);
        srv_send_response(call, NULL);
        jet_iobuf_fini(&body);
        jet_iobuf_fini(&frame);
        return;
    }
    if (rc < 0 && !jet__socket_failed(s)) {
        /* No memory to pack or queue it: an answer the client would wait
         * for until its deadline (forever without one). The connection
         * fails instead, and with it the client's calls on it, at once. */
        JET_WARN_PEER("cannot answer %s: %s; closing the connection", s->peer, jet_strerror(rc));
        jet__socket_set_failed(s, rc);
    }
    jet_iobuf_fini(&body);
    jet_iobuf_fini(&frame);
}

_Static_assert(sizeof(void *) >= sizeof(uint64_t), "a server call's handle is its closure_data");

/* closure_data is the call's handle (jet__cid_alloc_handle): the first
 * answer claims it; a second one, or a handle never given, finds no call
 * and is refused with an error line, whatever became of the call since
 * (its memory is recycled by the next request). */
static void srv_closure(const ProtobufCMessage *output, void *closure_data)
{
    jet_call_t *call = jet__cid_claim((uint64_t)(uintptr_t)closure_data, NULL);
    if (!call) {
        JET_LOG_PEER(JET_LOG_ERROR,
                     "a handler called its closure with closure_data %p, which names no call "
                     "waiting for its answer (answered already?): ignored",
                     closure_data);
        return;
    }
    srv_send_response(call, output);
    srv_call_finish(call);
}

static void srv_fail_now(jet_call_t *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void srv_fail_now(jet_call_t *call, int code, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    jet__call_set_error(call, code, text);
    srv_send_response(call, NULL);
    srv_call_finish(call);
}

static void srv_invoke(jet_call_t *call)
{
    ProtobufCService *svc = call->srv_service;
    svc->invoke(svc, call->srv_method, call->srv_input, srv_closure,
                (void *)(uintptr_t)call->srv_handle);
}

static void srv_worker_task(jet_task_t *t)
{
    srv_invoke((jet_call_t *)((char *)t - offsetof(jet_call_t, srv_task)));
}

/* ---- requests ------------------------------------------------------------- */

static ProtobufCService *srv_find_service(jet_server_t *srv, const char *name)
{
    for (size_t i = 0; i < srv->nservices; i++)
        if (strcmp(srv->services[i]->descriptor->name, name) == 0) return srv->services[i];
    if (strchr(name, '.')) return NULL;
    /* jprotobuf-style undotted names match a service's short name. */
    for (size_t i = 0; i < srv->nservices; i++)
        if (strcmp(srv->services[i]->descriptor->short_name, name) == 0) return srv->services[i];
    return NULL;
}

static void srv_refuse_close(jet_timer_t *t)
{
    srv_conn_t *c = (srv_conn_t *)((char *)t - offsetof(srv_conn_t, refuse_timer));
    jet_socket_t *s = c->refused_s;
    jet__socket_set_failed(s, -JET_ERPCAUTH);
    jet__socket_unref(s); /* the timer's */
}

/* The server's authenticator on a connection's first request: true to go
 * on; false when it refused: answered ERPCAUTH ("Fail to authenticate",
 * without the [ip:port] prefix, as brpc), and the connection closes
 * SRV_REFUSE_LINGER_MS later, its input dropped meanwhile. */
static bool srv_authenticate(jet_socket_t *s, srv_conn_t *c, const Brpc__Policy__RpcMeta *meta)
{
    const jet_authenticator_t *auth = c->srv->opts.auth;
    if (!auth || c->authed) return true;
    bool has = meta->has_authentication_data;
    const uint8_t *data = has ? meta->authentication_data.data : NULL;
    size_t len = has ? meta->authentication_data.len : 0;
    int rc = -EACCES;
    if (auth->verify_credential_ctx) {
        rc = auth->verify_credential_ctx(auth->arg, data, len, s->peer, &c->actx);
        if (rc != 0) srv_actx_clear(&c->actx);
        c->has_actx = rc == 0;
    } else if (auth->verify_credential) {
        rc = auth->verify_credential(auth->arg, data, len, s->peer);
    }
    if (rc == 0) {
        c->authed = true;
        return true;
    }
    Brpc__Policy__RpcMeta m = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    m.response = &rm;
    rm.has_error_code = true;
    rm.error_code = JET_ERPCAUTH;
    rm.error_text = "Fail to authenticate";
    m.has_correlation_id = meta->has_correlation_id;
    m.correlation_id = meta->correlation_id;
    jet_iobuf_t body, frame;
    jet_iobuf_init(&body);
    jet_iobuf_init(&frame);
    /* Written at once: a first request's answer has nothing queued before
     * it, so the close below does not cut it off. */
    if (jet__baidu_pack(&frame, &m, &body, NULL) == 0) (void)jet__socket_write_answer(s, &frame);
    jet_iobuf_fini(&frame);
    jet_iobuf_fini(&body);
    JET_WARN_PEER("close %s: its credential was refused", s->peer);
    c->refused = true;
    jet__socket_ref(s); /* the timer's: c lives until it has run */
    c->refused_s = s;
    jet_timer_init(&c->refuse_timer, srv_refuse_close);
    jet_loop_timer_start(s->loop, &c->refuse_timer, jet_now_us() + SRV_REFUSE_LINGER_MS * 1000);
    return false;
}

static void srv_process(jet_socket_t *s, jet_baidu_frame_t *f, int bad_att)
{
    jet_server_t *srv = ((srv_conn_t *)s->owner)->srv;
    Brpc__Policy__RpcMeta *meta = f->meta;
    if (!srv_authenticate(s, s->owner, meta)) return;
    jet_call_t *call = jet_call_create();
    if (!call) {
        JET_ERROR("out of memory serving %s", s->peer);
        jet__socket_set_failed(s, -ENOMEM);
        return;
    }
    atomic_fetch_add(&srv->in_flight, 1);
    atomic_fetch_add(&srv->n_requests, 1);
    jet__socket_ref(s);
    call->server = srv;
    call->srv_sock = s;
    call->srv_cid = meta->has_correlation_id ? meta->correlation_id : 0;
    memcpy(call->remote, s->peer, sizeof call->remote);
    jet_iobuf_move(&call->req_att, &f->attachment);
    call->req_compress = meta->has_compress_type ? meta->compress_type : 0;
    Brpc__Policy__RpcRequestMeta *req = meta->request;
    if (req && req->has_log_id) {
        call->log_id = (uint64_t)req->log_id;
        call->has_log_id = true;
    }
    if (atomic_load(&srv->stopping)) {
        srv_fail_now(call, JET_ELOGOFF, "Server is stopping");
        return;
    }
    if (srv->opts.max_concurrency > 0 && atomic_load(&srv->in_flight) > srv->opts.max_concurrency) {
        srv_fail_now(call, JET_ELIMIT, "Reached server's max_concurrency=%d", srv->opts.max_concurrency);
        return;
    }
    if (bad_att) {
        srv_fail_now(call, JET_EREQUEST, "attachment_size=%d is larger than request_size=%zu",
                     meta->attachment_size, jet_iobuf_len(&f->body));
        return;
    }
    if (!req) {
        srv_fail_now(call, JET_ENOSERVICE, "Fail to find service=");
        return;
    }
    ProtobufCService *svc = srv_find_service(srv, req->service_name);
    const ProtobufCMethodDescriptor *m =
        svc ? protobuf_c_service_descriptor_get_method_by_name(svc->descriptor, req->method_name)
            : NULL;
    if (!svc && !strchr(req->service_name, '.')) {
        srv_fail_now(call, JET_ENOSERVICE, "Fail to find service=%s", req->service_name);
        return;
    }
    if (!m) {
        srv_fail_now(call, JET_ENOMETHOD, "Fail to find method=%s/%s", req->service_name,
                     req->method_name);
        return;
    }
    if (meta->n_user_fields > 0 && jet__uf_from_meta(&call->req_uf, meta) < 0) {
        srv_fail_now(call, JET_EINTERNAL,
                     "Fail to keep the request's %zu user fields: out of memory",
                     meta->n_user_fields);
        return;
    }
    const char *why = NULL;
    call->srv_input = jet__decode_message(m->input, meta, &f->body, &call->req_att, srv->max_body,
                                          &call->msg_arena.pa, &why);
    if (!call->srv_input) {
        char text[512];
        jet__format_parse_error(text, sizeof text, "request", m->input->name, meta,
                                jet_iobuf_len(&f->body));
        srv_fail_now(call, JET_EREQUEST, "%s", text);
        return;
    }
    int rc = jet__cid_alloc_handle(call, &call->srv_handle);
    if (rc < 0) {
        call->srv_handle = 0;
        srv_fail_now(call, JET_EINTERNAL, "Fail to serve the call: %s", jet_strerror(rc));
        return;
    }
    call->srv_service = svc;
    call->srv_method = (unsigned)(m - svc->descriptor->methods);
    if (srv->workers) {
        call->srv_task.fn = srv_worker_task;
        jet__worker_pool_post(srv->workers, &call->srv_task);
    } else {
        srv_invoke(call);
    }
}

/* A first packet that is not PRPC: answer RDMA, URMA and UBRing hellos with
 * a declining hello (brpc's "un-negotiable" RDMA answer; for URMA the same
 * shape; for UBRing versions 0/0 and zeros), so such clients fall back to
 * TCP on this connection; close on anything else. Returns true when parsing may go on. */
static bool srv_foreign_hello(jet_socket_t *s, srv_conn_t *c)
{
    static const uint8_t rdma_v3_answer[] = {0x52, 0x44, 0x4d, 0x33, 0, 0, 0, 0x1c, 0x08, 0,
                                             0x10, 0, 0x18, 0, 0x20, 0, 0x2a, 0x10, 0, 0,
                                             0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 0, 0x30, 0};
    uint8_t hdr[8] = {0};
    uint8_t answer[JET_URMA_HELLO_MAX_LEN]; /* also holds a whole framed URMA hello */
    size_t have = jet_iobuf_len(&s->read_buf), need = 0;
    int answer_len = 0;
    if (have < 4) return false;
    jet_iobuf_copy_to(&s->read_buf, hdr, have < 8 ? have : 8, 0);
    if (jet__urma_hello_prefix(hdr, 4)) {
        /* A URMA hello: one framed hello is consumed whatever it says. */
        size_t flat_len = have < sizeof answer ? have : sizeof answer;
        jet_iobuf_copy_to(&s->read_buf, answer, flat_len, 0);
        jet_urma_hello_t hello;
        jet_urma_hello_result_t r = jet__urma_hello_parse(answer, flat_len, &hello, &need);
        if (r == JET_URMA_HELLO_INCOMPLETE) return false;
        if (r != JET_URMA_HELLO_OK && r != JET_URMA_HELLO_DECLINED) goto bad;
        answer_len = jet__urma_hello_pack_decline(memcmp(hdr, JET_URMA_MAGIC_V3, 4) == 0 ? 3 : 2,
                                                  answer, sizeof answer);
    } else if (hdr[0] == 'U' && hdr[1] == 'B') {
        /* A UBRing hello on a port that does not speak UBRing: brpc's
         * un-negotiable answer (versions 0/0), but with bytes 8..63 zeroed.
         * A longer msg_len is drained whole. */
        uint8_t flat[JET_UBRING_HELLO_MAX];
        size_t flat_len = have < sizeof flat ? have : sizeof flat;
        jet_iobuf_copy_to(&s->read_buf, flat, flat_len, 0);
        jet_ubring_hello_t hello;
        ssize_t r = jet__ubring_hello_unpack(flat, flat_len, &hello);
        if (r == -EAGAIN) return false;
        if (r < 0) goto bad;
        need = (size_t)r;
        jet__ubring_hello_pack_refuse(answer);
        answer_len = JET_UBRING_HELLO_LEN;
    } else if (memcmp(hdr, "RDMA", 4) == 0) {
        if (have < 8) return false;
        need = (size_t)hdr[4] << 8 | hdr[5];
        if (need < SRV_RDMA_V2_MIN || need > SRV_RDMA_V2_MAX) goto bad;
        memset(answer, 0, 40);
        memcpy(answer, "RDMA\x00\x28\xff\xff", 8);
        answer_len = 40;
    } else if (memcmp(hdr, "RDM3", 4) == 0) {
        if (have < 8) return false;
        uint32_t pb = (uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 | (uint32_t)hdr[6] << 8 | hdr[7];
        if (pb == 0 || pb > SRV_RDMA_V3_MAX) goto bad;
        need = 8 + pb;
        memcpy(answer, rdma_v3_answer, sizeof rdma_v3_answer);
        answer_len = sizeof rdma_v3_answer;
    } else {
        goto bad;
    }
    if (have < need) return false;
    if (answer_len <= 0) goto bad;
    jet_iobuf_pop_front(&s->read_buf, need);
    jet_iobuf_t out;
    jet_iobuf_init(&out);
    if (jet_iobuf_append(&out, answer, (size_t)answer_len) < 0 || jet__socket_write(s, &out) < 0) {
        jet_iobuf_fini(&out);
        jet__socket_set_failed(s, -ENOMEM);
        return false;
    }
    jet_iobuf_fini(&out);
    JET_INFO_PEER("%s sent a %.4s hello to a %s port: declined, staying on TCP", s->peer,
                  (const char *)hdr, s->ops->name);
    c->hello = SRV_HELLO_WAIT_ACK;
    return true;
bad:
    JET_WARN_PEER("close %s: first bytes are not baidu_std (%02x %02x %02x %02x)", s->peer, hdr[0],
                  hdr[1], hdr[2], hdr[3]);
    jet__socket_set_failed(s, -EPROTO);
    return false;
}

static void srv_read_frames(jet_socket_t *s);

static void srv_guest_task(jet_task_t *t)
{
    srv_conn_t *c = (srv_conn_t *)((char *)t - offsetof(srv_conn_t, guest_task));
    jet_socket_t *s = c->guest_s;
    c->guest_s = NULL;
    jet__socket_deliver(s); /* srv_on_read, then what it left is published */
    jet__socket_unref(s);
}

/* The answers to requests that came together go out together: each one
 * whose request has another request's bytes behind it is held (corked)
 * until the last one, or the end of the bytes read (a peer pipelining many
 * small requests got a system call per answer). A lone request's answer
 * goes at once. */
static void srv_on_read(jet_socket_t *s)
{
    srv_conn_t *c = s->owner;
    if (jet_loop_guest_here()) {
        /* The bytes wait in the read buffer for the loop's thread, which
         * the guest leaves the loop to after this iteration. */
        if (!c->guest_s) {
            c->guest_s = s;
            jet__socket_ref(s);
            c->guest_task.fn = srv_guest_task;
            jet_loop_post_thread(s->loop, &c->guest_task);
        }
        return;
    }
    srv_read_frames(s);
    jet__socket_cork(s, false);
}

/* Requests one connection's input gives its loop in one turn: a peer that
 * pipelines small requests faster than they are served would otherwise
 * keep the loop's other connections waiting for the whole of its read
 * budget (up to 1.8 MB of requests, tens of milliseconds). A turn of 128 is
 * a fraction of a millisecond; the next one comes after the loop's other
 * work of the same pass. */
#define SRV_FRAMES_PER_TURN 128

static void srv_read_frames(jet_socket_t *s)
{
    srv_conn_t *c = s->owner;
    jet_server_t *srv = c->srv;
    for (int frames = 0;; frames++) {
        /* Refused by the authenticator: whatever else comes is dropped. */
        if (c->refused) {
            jet_iobuf_clear(&s->read_buf);
            return;
        }
        if (c->hello == SRV_HELLO_WAIT_ACK) {
            uint8_t ack[4];
            if (jet_iobuf_len(&s->read_buf) < 4) return;
            jet_iobuf_copy_to(&s->read_buf, ack, 4, 0);
            c->hello = SRV_HELLO_DONE;
            /* A brpc URMA client that was declined sends no ACK: its first
             * request follows at once. */
            if (memcmp(ack, JET_BAIDU_MAGIC, 4) != 0) {
                jet_iobuf_pop_front(&s->read_buf, 4);
                if (jet__urma_ack_parse(ack) & JET_URMA_ACK_OK) {
                    JET_WARN_PEER("close %s: the client claims URMA after this port declined",
                                  s->peer);
                    jet__socket_set_failed(s, -EPROTO);
                    return;
                }
            }
        }
        if (jet_iobuf_empty(&s->read_buf)) return;
        /* A peer that sends requests and does not read the answers: take
         * no more until they have drained (the socket resumes by itself). */
        if (jet__socket_read_paused(s) || jet__socket_pause_read(s)) return;
        if (frames == SRV_FRAMES_PER_TURN) {
            jet__socket_yield_read(s);
            return;
        }
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int bad_att = 0;
        uint32_t body_size = 0, meta_size = 0;
        jet_parse_result_t r = jet__baidu_cut(&s->read_buf, srv->max_body, &f, &bad_att);
        switch (r) {
        case JET_PARSE_OK:
            c->hello = SRV_HELLO_DONE;
            jet__socket_cork(s, !jet_iobuf_empty(&s->read_buf));
            srv_process(s, &f, bad_att);
            jet__baidu_frame_fini(&f);
            if (jet__socket_failed(s)) return;
            continue;
        case JET_PARSE_NEED_MORE:
            jet__baidu_frame_fini(&f);
            return;
        case JET_PARSE_NOT_MINE:
            jet__baidu_frame_fini(&f);
            if (c->hello == SRV_HELLO_NONE) {
                if (!srv_foreign_hello(s, c)) return;
                continue;
            }
            JET_WARN_PEER("close %s: bytes that are not baidu_std after a request", s->peer);
            jet__socket_set_failed(s, -EPROTO);
            return;
        case JET_PARSE_TOO_BIG:
            jet__baidu_frame_fini(&f);
            jet__baidu_peek(&s->read_buf, UINT32_MAX, &body_size, &meta_size);
            JET_WARN_PEER("close %s: body_size=%u is bigger than %u bytes", s->peer, body_size,
                          srv->max_body);
            jet__socket_set_failed(s, -EMSGSIZE);
            return;
        case JET_PARSE_META_SIZE:
            /* brpc drops such a frame and keeps the connection. */
            jet__baidu_frame_fini(&f);
            JET_WARN_PEER("%s: dropped a frame whose meta_size exceeds body_size", s->peer);
            continue;
        case JET_PARSE_BAD_META:
            jet__baidu_frame_fini(&f);
            JET_WARN_PEER("close %s: RpcMeta does not parse (malformed, over 1 MiB, or decoding "
                          "into more than 48 bytes per byte)",
                          s->peer);
            jet__socket_set_failed(s, -JET_EREQUEST);
            return;
        }
    }
}
