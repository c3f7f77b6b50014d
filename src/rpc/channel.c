#include "jetrpc/channel.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/time.h"
#include "jetrpc/errors.h"
#include "net/socket.h"
#include "rpc/call.h"
#include "rpc/compress.h"
#include "rpc/protocol.h"
#include "rpc/transports.h"

struct jet_channel {
    jet_addr_t addr;
    char name[80];
    jet_channel_options_t opts;
    uint32_t max_body;
    pthread_mutex_t lock;
    jet_socket_t *single;
    jet_socket_t **idle; /* pooled: connections at rest, the latest last */
    int nidle, idle_cap;
    /* Until this time (monotonic µs) new connections use TCP: the server
     * closed on our transport's hello. 0: use the channel's transport. */
    _Atomic int64_t tcp_until_us;
    /* The user's reference and one per call in flight: a destroyed channel
     * lives until its last call has ended. */
    _Atomic int refs;
    _Atomic bool closed; /* destroyed: no new connection or call (set under lock) */
    struct cli_conn *out; /* pooled and short connections in use by calls */
    jet_call_t *waiting;  /* calls in a retry's wait (ch_retry) */
};

JET_FLAG_DEFINE_INT32_RANGE(max_connection_pool_size, 100, 0, INT32_MAX,
                            "Most idle connections a pooled channel keeps to its server; a "
                            "connection coming back to a full pool is closed (brpc's flag)");

JET_FLAG_DEFINE_INT32_RANGE(
    transport_reprobe_s, 60, 0, INT32_MAX,
    "Seconds a channel whose server refused the transport hello stays on TCP "
    "before its next new connection tries the transport again (0: forever)");

/* Per-connection client state (the socket's owner). */
typedef struct cli_conn {
    pthread_mutex_t lock;
    uint32_t tag;        /* non-zero, distinct per connection: its answers' owner */
    jet_call_link_t *pending; /* attempts written on this connection, not answered */
    bool dead;
    uint32_t max_body;
    /* On the channel's `out` list (under the channel's lock), which holds a
     * reference to the socket, so that destroying the channel can close a
     * pooled or short connection while a call uses it. */
    jet_socket_t *s;
    struct cli_conn *out_prev, *out_next;
    bool out;
    /* With an authenticator: a request was written with a credential.
     * Until then every request carries one, so that whichever the server
     * reads first has it, and nobody waits (brpc makes the others wait for
     * the first; a wait here would hold an event loop). */
    _Atomic bool auth_sent;
} cli_conn_t;

static void cli_on_read(jet_socket_t *s);
static void cli_on_failed(jet_socket_t *s, int err);
static void cli_on_release(jet_socket_t *s);
static void cli_on_refused(jet_socket_t *s, jet_iobuf_t *msg);

static const jet_socket_handler_t cli_handler = {
    .on_read = cli_on_read,
    .on_failed = cli_on_failed,
    .on_release = cli_on_release,
    .on_refused = cli_on_refused,
};

int jet_channel_create(const char *addr, const jet_channel_options_t *opts, jet_channel_t **ch_p)
{
    if (!ch_p) return -EINVAL;
    jet_channel_t *ch = calloc(1, sizeof *ch);
    if (!ch) return -ENOMEM;
    int rc = -EINVAL;
    if (opts)
        ch->opts = *opts;
    else
        jet_channel_options_init(&ch->opts);
    if (ch->opts.connect_timeout_ms == -2) ch->opts.connect_timeout_ms = ch->opts.timeout_ms;
    /* Any case, as brpc's StringToProtocolType reads names. */
    if (ch->opts.protocol && strcasecmp(ch->opts.protocol, "baidu_std") != 0) {
        JET_ERROR("channel to %s: protocol '%s' is not supported (baidu_std only)",
                  addr ? addr : "?", ch->opts.protocol);
        rc = -EPROTONOSUPPORT;
        goto err_free;
    }
    /* A mode outside the enum is a bad option, as for the server; one in it
     * that is not built in (RDMA) is -EPROTONOSUPPORT below. */
    if (ch->opts.connection_type < JET_CONNECTION_SINGLE ||
        ch->opts.connection_type > JET_CONNECTION_SHORT || ch->opts.max_retry < 0 ||
        ch->opts.socket_mode < 0 || ch->opts.socket_mode >= JET_SOCKET_MODE_MAX)
        goto err_free;
    if (jet__addr_parse(addr, &ch->addr) < 0) {
        JET_ERROR("channel: bad address '%s'", addr ? addr : "(null)");
        goto err_free;
    }
    jet__rpc_transports_init();
    const jet_transport_ops_t *ops = jet__transport_get(ch->opts.socket_mode);
    if (!ops) {
        JET_ERROR("channel to %s: socket mode %d is not available", addr, ch->opts.socket_mode);
        rc = -EPROTONOSUPPORT;
        goto err_free;
    }
    jet_transport_check_t check = {.is_server = false, .protocol = "baidu_std",
                                   .use_ssl = ch->opts.use_ssl};
    rc = ops->global_init(&check);
    if (rc < 0) goto err_free;
    rc = jet_loops_start(0);
    if (rc < 0) goto err_free;
    jet__addr_format(&ch->addr, ch->name, sizeof ch->name);
    ch->max_body = jet__max_body_size(ch->opts.max_body_size);
    pthread_mutex_init(&ch->lock, NULL);
    atomic_init(&ch->refs, 1);
    *ch_p = ch;
    return 0;
err_free:
    free(ch);
    return rc;
}

static void ch_unref(jet_channel_t *ch)
{
    if (atomic_fetch_sub_explicit(&ch->refs, 1, memory_order_acq_rel) != 1) return;
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}

/* ch->lock held: s (a pooled or short connection) is lent to a call. */
static void ch_out_add_locked(jet_channel_t *ch, jet_socket_t *s)
{
    cli_conn_t *conn = s->owner;
    jet__socket_ref(s);
    conn->s = s;
    conn->out = true;
    conn->out_prev = NULL;
    conn->out_next = ch->out;
    if (ch->out) ch->out->out_prev = conn;
    ch->out = conn;
}

/* ch->lock held: true when s was lent (the list's reference is the
 * caller's to drop, outside the lock). */
static bool ch_out_del_locked(jet_channel_t *ch, jet_socket_t *s)
{
    cli_conn_t *conn = s->owner;
    if (!conn->out) return false;
    if (conn->out_prev)
        conn->out_prev->out_next = conn->out_next;
    else
        ch->out = conn->out_next;
    if (conn->out_next) conn->out_next->out_prev = conn->out_prev;
    conn->out = false;
    return true;
}

static void ch_end_claimed(jet_call_t *call, int code, const char *text);
static void ch_backoff_end(jet_call_t *call);
static jet_loop_t *ch_task_loop(const jet_call_t *call);

/* The client call whose srv_task (free in a client call) is t. */
static jet_call_t *ch_call_of_task(jet_task_t *t)
{
    return (jet_call_t *)((char *)t - offsetof(jet_call_t, srv_task));
}

/* A call of ch_end_waiting, its error set: ended on a loop. */
static void ch_end_closed_task(jet_task_t *t)
{
    ch_end_claimed(ch_call_of_task(t), 0, NULL);
}

/* The calls in a retry's wait end with ECLOSE, a bounded batch at a time:
 * each is claimed by the id of its wait (its owner), which the waiting
 * thread names right after it listed the call (looked at again until
 * then), unless its timer, a cancel or a backup claimed it first (which
 * then take it off the list). Each is taken off the list here and ended on
 * a loop, so that its done runs there (as for any completion), not on the
 * destroying thread, which may hold what done takes. */
static void ch_end_waiting(jet_channel_t *ch)
{
    char text[160];
    snprintf(text, sizeof text, "[%s] %s", ch->name, jet_strerror(-JET_ECLOSE));
    for (;;) {
        uint64_t tokens[64];
        size_t n = 0;
        pthread_mutex_lock(&ch->lock);
        for (jet_call_t *c = ch->waiting; c && n < 64; c = c->wait_next)
            tokens[n++] = atomic_load_explicit(&c->join_token, memory_order_relaxed);
        pthread_mutex_unlock(&ch->lock);
        if (n == 0) return;
        size_t ended = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t cid, next;
            jet_call_t *call = jet__cid_claim_issue(tokens[i], false, false, &cid, &next, NULL);
            if (!call) continue;
            call->cid = next;
            ch_backoff_end(call);
            jet__call_set_error(call, JET_ECLOSE, text);
            jet_loop_t *loop = ch_task_loop(call);
            if (!loop) {
                ch_end_claimed(call, 0, NULL);
            } else {
                call->srv_task.fn = ch_end_closed_task; /* a client call's is free */
                jet_loop_post(loop, &call->srv_task);
            }
            ended++;
        }
        if (ended == 0) sched_yield();
    }
}

void jet_channel_destroy(jet_channel_t *ch)
{
    if (!ch) return;
    /* Its connections close: the calls still on them end with ECLOSE (not
     * retried), and the channel goes with the last of them. */
    pthread_mutex_lock(&ch->lock);
    ch->closed = true;
    jet_socket_t *single = ch->single;
    ch->single = NULL;
    int nidle = ch->nidle;
    jet_socket_t **idle = ch->idle;
    ch->idle = NULL;
    ch->nidle = ch->idle_cap = 0;
    /* Connections lent to calls: closed here (a failure posts its handler to
     * the loop), the list's references dropped (the calls hold their own). */
    while (ch->out) {
        jet_socket_t *s = ch->out->s;
        ch_out_del_locked(ch, s);
        jet__socket_set_failed(s, -JET_ECLOSE);
        jet__socket_unref(s);
    }
    pthread_mutex_unlock(&ch->lock);
    if (single) {
        jet__socket_set_failed(single, -JET_ECLOSE);
        jet__socket_unref(single);
    }
    for (int i = 0; i < nidle; i++) {
        jet__socket_set_failed(idle[i], -JET_ECLOSE);
        jet__socket_unref(idle[i]);
    }
    free(idle);
    ch_end_waiting(ch);
    ch_unref(ch);
}


/* ---- connections ------------------------------------------------------------ */

static int ch_connect(jet_channel_t *ch, bool tcp, jet_socket_t **s_p)
{
    static _Atomic uint32_t conn_tags;
    cli_conn_t *conn = calloc(1, sizeof *conn);
    if (!conn) return -ENOMEM;
    pthread_mutex_init(&conn->lock, NULL);
    do {
        conn->tag = (atomic_fetch_add_explicit(&conn_tags, 1, memory_order_relaxed) + 1) &
                    (JET_CID_OWNER_LAST - 1);
    } while (conn->tag == 0);
    conn->max_body = ch->max_body;
    int64_t until = atomic_load_explicit(&ch->tcp_until_us, memory_order_relaxed);
    int mode = tcp || (until != 0 && jet_now_us() < until) ? JET_SOCKET_MODE_TCP
                                                           : (int)ch->opts.socket_mode;
    int rc = jet__socket_connect(&ch->addr, mode, &cli_handler, conn, ch->opts.connect_timeout_ms,
                                 s_p);
    if (rc < 0) {
        pthread_mutex_destroy(&conn->lock);
        free(conn);
    }
    return rc;
}

/* The server closed on the transport's hello (a TCP-only brpc server), or
 * its hello could not be used and it is not one that takes a "no" on the
 * same connection (a brpc URMA server): the channel uses TCP for
 * transport_reprobe_s. Said once per such stretch. */
static void ch_note_refused(jet_channel_t *ch)
{
    int32_t again_s = JET_FLAG(transport_reprobe_s);
    int64_t until = again_s > 0 ? jet_now_us() + (int64_t)again_s * 1000000 : INT64_MAX;
    int64_t was = atomic_exchange(&ch->tcp_until_us, until);
    if (was == 0 || jet_now_us() >= was)
        JET_WARN("channel to %s: no %s with the server; using TCP%s", ch->name,
                 jet_socket_mode_name(ch->opts.socket_mode), again_s > 0 ? " for a while" : "");
}

/* A connection for one attempt, with a reference for the call; tcp: one
 * it makes is plain TCP. */
static int ch_get_socket(jet_channel_t *ch, bool tcp, jet_socket_t **s_p)
{
    int rc = 0;
    jet_socket_t *s = NULL;
    switch (ch->opts.connection_type) {
    case JET_CONNECTION_SINGLE:
        pthread_mutex_lock(&ch->lock);
        if (ch->closed) {
            pthread_mutex_unlock(&ch->lock);
            return -JET_ECLOSE;
        }
        s = ch->single;
        if (s && jet__socket_failed(s)) {
            /* Reconnect on the next call after a failure; over TCP if the
             * server refused the hello, which this call may learn before
             * the failed connection's own calls report it. */
            if (atomic_load(&s->error) == -JET__EHELLO_REFUSED) ch_note_refused(ch);
            jet__socket_unref(s);
            s = ch->single = NULL;
        }
        if (!s) {
            rc = ch_connect(ch, tcp, &s);
            if (rc == 0) ch->single = s;
        }
        if (rc == 0) jet__socket_ref(s);
        pthread_mutex_unlock(&ch->lock);
        break;
    case JET_CONNECTION_POOLED:
        pthread_mutex_lock(&ch->lock);
        if (ch->closed) {
            pthread_mutex_unlock(&ch->lock);
            return -JET_ECLOSE;
        }
        while (ch->nidle > 0) {
            s = ch->idle[--ch->nidle];
            if (!jet__socket_failed(s)) break;
            jet__socket_unref(s);
            s = NULL;
        }
        pthread_mutex_unlock(&ch->lock);
        if (!s) rc = ch_connect(ch, tcp, &s);
        break;
    case JET_CONNECTION_SHORT:
        rc = ch_connect(ch, tcp, &s);
        break;
    }
    if (rc == 0 && ch->opts.connection_type != JET_CONNECTION_SINGLE) {
        pthread_mutex_lock(&ch->lock);
        bool closed = ch->closed;
        if (!closed) ch_out_add_locked(ch, s);
        pthread_mutex_unlock(&ch->lock);
        if (closed) {
            /* Destroyed meanwhile. */
            jet__socket_set_failed(s, -JET_ECLOSE);
            jet__socket_unref(s);
            return -JET_ECLOSE;
        }
    }
    if (rc == 0) *s_p = s;
    return rc;
}

/* Room for one more idle connection (the list grows by doubling): false
 * when there is no memory for it. ch->lock held. */
static bool ch_idle_room_locked(jet_channel_t *ch)
{
    if (ch->nidle < ch->idle_cap) return true;
    int cap = ch->idle_cap ? ch->idle_cap * 2 : 8;
    jet_socket_t **p = realloc(ch->idle, (size_t)cap * sizeof *p);
    if (!p) return false;
    ch->idle = p;
    ch->idle_cap = cap;
    return true;
}

/* answered: the attempt on s got its answer. A pooled connection goes back
 * to the idle list only then (as in brpc): an answer still on its way would
 * reach the next call on it, which must have the connection to itself. */
static void ch_put_socket(jet_channel_t *ch, jet_socket_t *s, bool answered)
{
    if (ch->opts.connection_type == JET_CONNECTION_SINGLE) {
        jet__socket_unref(s);
        return;
    }
    enum { CH_TRIM_MAX = 8 };
    jet_socket_t *trim[CH_TRIM_MAX];
    int ntrim = 0;
    int32_t cap = JET_FLAG_IN_RANGE(max_connection_pool_size);
    pthread_mutex_lock(&ch->lock);
    bool lent = ch_out_del_locked(ch, s);
    bool idle = ch->opts.connection_type == JET_CONNECTION_POOLED && answered &&
                !jet__socket_failed(s) && !ch->closed && ch->nidle < cap && ch_idle_room_locked(ch);
    if (idle) ch->idle[ch->nidle++] = s;
    /* The flag lowered at run time: each connection coming back closes a
     * few of those idle above it. */
    while (ch->nidle > cap && ntrim < CH_TRIM_MAX)
        trim[ntrim++] = ch->idle[--ch->nidle];
    pthread_mutex_unlock(&ch->lock);
    for (int i = 0; i < ntrim; i++) {
        jet__socket_set_failed(trim[i], -JET_ECLOSE);
        jet__socket_unref(trim[i]);
    }
    if (lent) jet__socket_unref(s);
    if (idle) return;
    jet__socket_set_failed(s, -JET_ECLOSE);
    jet__socket_unref(s);
}

/* conn->lock held. */
static void conn_link_locked(cli_conn_t *conn, jet_call_link_t *l)
{
    l->prev = NULL;
    l->next = conn->pending;
    if (conn->pending) conn->pending->prev = l;
    conn->pending = l;
    l->linked = true;
}

/* conn->lock held. */
static void conn_unlink_locked(cli_conn_t *conn, jet_call_link_t *l)
{
    if (!l->linked) return;
    if (l->prev)
        l->prev->next = l->next;
    else
        conn->pending = l->next;
    if (l->next) l->next->prev = l->prev;
    l->linked = false;
}

/* true when l was linked. */
static bool conn_unlink(cli_conn_t *conn, jet_call_link_t *l)
{
    pthread_mutex_lock(&conn->lock);
    bool was = l->linked;
    conn_unlink_locked(conn, l);
    pthread_mutex_unlock(&conn->lock);
    return was;
}

/* Takes the attempt cid off conn's pending list, if it is there (its call
 * is not touched otherwise: whoever ends the call gives its socket back). */
static void conn_unlink_cid(cli_conn_t *conn, uint64_t cid)
{
    pthread_mutex_lock(&conn->lock);
    for (jet_call_link_t *l = conn->pending; l; l = l->next) {
        if (l->cid == cid) {
            conn_unlink_locked(conn, l);
            break;
        }
    }
    pthread_mutex_unlock(&conn->lock);
}

/* The current attempt's link, and the other attempt's (a backup request). */
static jet_call_link_t *ch_link(jet_call_t *call)
{
    return &call->link[call->cur];
}
static jet_call_link_t *ch_other_link(jet_call_t *call)
{
    return &call->link[call->cur ^ 1];
}

/* The claimer of cid owns the call: the attempt cid names becomes the
 * current one (a claim of the earlier attempt while a backup request is
 * out makes the backup the other). */
static void ch_take_attempt(jet_call_t *call, uint64_t cid)
{
    if (!call->other_sock || ch_other_link(call)->cid != cid) return;
    call->cur ^= 1;
    jet_socket_t *s = call->sock;
    call->sock = call->other_sock;
    call->other_sock = s;
}

/* ---- completion ------------------------------------------------------------- */

static void ch_deadline_cb(uint64_t cid);

/* The deadline of the attempt with call->cid: the deadline thread's entry,
 * or for a synchronous call the cid its waiting thread will end. */
static int ch_deadline_arm(jet_call_t *call)
{
    if (call->deadline_us == INT64_MAX) return 0;
    if (call->wait_deadline) {
        atomic_store_explicit(&call->deadline_cid, call->cid, memory_order_release);
        return 0;
    }
    return jet__deadline_add(&call->deadline, call->deadline_us, ch_deadline_cb, call->cid);
}

static void ch_deadline_disarm(jet_call_t *call)
{
    if (call->wait_deadline)
        atomic_store_explicit(&call->deadline_cid, 0, memory_order_release);
    else
        jet__deadline_del(&call->deadline);
}

/* Runs the done callback (if any), then frees the correlation slot, which
 * wakes jet_call_join. Nothing touches the call once done has started: done
 * may hand it to another thread, destroy it or issue it again. */
/* The join token of the issue whose done callback runs on this thread (0:
 * none): a join of it from there would wait for itself. */
static __thread uint64_t ch_tls_done_token;

static void ch_notify_now(jet_call_t *call)
{
    uint32_t slot = call->slot;
    bool joinable = call->joinable;
    jet_channel_t *ch = call->channel;
    if (call->done) {
        uint64_t outer = ch_tls_done_token; /* a done that ends a call of its own */
        ch_tls_done_token = atomic_load_explicit(&call->join_token, memory_order_relaxed);
        call->done(call, call->done_arg);
        ch_tls_done_token = outer;
    }
    if (joinable) jet__cid_free(slot);
    ch_unref(ch); /* the call's */
}

static void ch_notify_task(jet_task_t *t)
{
    ch_notify_now(ch_call_of_task(t));
}

/* Ends a completed call: its done callback, then its joiners. A thread that
 * waits for a call of its own and runs the loop meanwhile (a guest) leaves
 * the done callback to the loop's thread (see jetrpc/channel.h). */
static void ch_notify(jet_call_t *call)
{
    if (call->done && jet_loop_guest_here()) {
        call->srv_task.fn = ch_notify_task; /* a client call's is free */
        jet_loop_post_thread(jet_loop_current(), &call->srv_task);
        return;
    }
    ch_notify_now(call);
}

#define CH_CANCELED_TEXT "Canceled by jet_call_cancel"

/* The backup request's timer: armed with the first attempt, on the
 * deadline thread; its task claims the issue's attempt on a loop. The timer
 * and the task have their own memory, which the call may outlive or not:
 * whoever takes the timer off (the call's end, or the timer firing) owns it. */
/* A backup due while its call's attempt was not out, or owned by a retry,
 * is tried again this much later. */
#define CH_BACKUP_AGAIN_US 1000

typedef struct jet_call_backup {
    jet_deadline_t timer;
    jet_task_t task;
    uint64_t token;   /* the issue's join token */
    jet_loop_t *loop; /* where the task runs: not one a synchronous caller blocks */
    _Atomic int refs; /* the call's, and the timer's until its task ran */
} ch_backup_t;

static void ch_backup_unref(ch_backup_t *b)
{
    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) free(b);
}

static void ch_backup_disarm(jet_call_t *call)
{
    ch_backup_t *b = call->backup;
    if (!b) return;
    call->backup = NULL;
    if (jet__deadline_del(&b->timer)) ch_backup_unref(b); /* it will not fire */
    ch_backup_unref(b);
}

/* The caller owns the call. The other attempt (a backup request's) gets no
 * answer any more: off its connection, which a pooled call closes while
 * that answer may still come. */
static void ch_drop_other(jet_call_t *call)
{
    if (!call->other_sock) return;
    /* Its connection owes an answer while the attempt is linked there (out)
     * or held (taken off while a backup is made); dropped (an error answer,
     * a write refused whole), it owes none and a pooled one stays. */
    jet_call_link_t *l = ch_other_link(call);
    bool owes = conn_unlink(call->other_sock->owner, l) || jet__cid_held(call->cid, l->cid);
    ch_put_socket(call->channel, call->other_sock, !owes);
    call->other_sock = NULL;
}

/* The caller owns the call, claimed during a retry's wait (by its timer, a
 * cancel, a backup request or the channel's destroy): the wait is over,
 * its timer off (or fired: then it finds the call claimed), the call off
 * the channel's waiting list. */
static void ch_backoff_end(jet_call_t *call)
{
    if (!call->backoff_armed) return;
    jet__deadline_del(&call->deadline);
    call->backoff_armed = false;
    jet_channel_t *ch = call->channel;
    pthread_mutex_lock(&ch->lock);
    if (call->wait_prev)
        call->wait_prev->wait_next = call->wait_next;
    else
        ch->waiting = call->wait_next;
    if (call->wait_next) call->wait_next->wait_prev = call->wait_prev;
    pthread_mutex_unlock(&ch->lock);
}

/* The caller owns the call (claimed it). Ends it with code (0 = success). */
static void ch_complete(jet_call_t *call, int code, const char *text)
{
    if (code) jet__call_set_error(call, code, text);
    call->end_us = jet_now_us();
    ch_deadline_disarm(call);
    ch_backoff_end(call);
    ch_backup_disarm(call);
    if (call->other_sock) {
        /* A held earlier attempt goes too (one held with no other attempt
         * left, by a backup that found nothing to back up, goes with the
         * slot's free). */
        ch_drop_other(call);
        jet__cid_drop_held(call->cid);
    }
    if (call->sock) {
        ch_put_socket(call->channel, call->sock, call->answered);
        call->sock = NULL;
    }
    atomic_store_explicit(&call->in_flight, false, memory_order_relaxed);
    ch_notify(call);
}

static void ch_issue(jet_call_t *call);
static void ch_wait_sync(jet_call_t *call);
static void cli_parked_run(jet_cid_parked_t *p);

/* Error answers that brpc's default retry policy retries (besides the
 * connection errors of ch_retriable): the server stops (ELOGOFF), is at its
 * concurrency limit (ELIMIT), or could not queue the answer (EOVERCROWDED). */
static bool ch_answer_retriable(int code)
{
    return code == JET_ELOGOFF || code == JET_ELIMIT || code == JET_EOVERCROWDED;
}

static bool ch_retriable(int err)
{
    return err != -JET_ERPCTIMEDOUT && err != -EMSGSIZE && err != -JET_EOVERCROWDED &&
           err != -JET_ECLOSE;
}

/* The wait before a retry, in microseconds: 0 for none, or when it would
 * reach the call's deadline. */
static int64_t ch_backoff_us(const jet_call_t *call)
{
    const jet_channel_options_t *o = &call->channel->opts;
    if (o->retry_backoff_ms <= 0 || call->no_backoff || call->via_tcp) return 0;
    int64_t ms = o->retry_backoff_ms;
    if (o->retry_backoff_max_ms > o->retry_backoff_ms) {
        static __thread uint64_t rng;
        if (rng == 0) rng = (uint64_t)jet_now_us() * 0x9e3779b97f4a7c15ull | 1;
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        ms += (int64_t)(rng % (uint64_t)(o->retry_backoff_max_ms - o->retry_backoff_ms + 1));
    }
    int64_t wait = ms * 1000;
    if (call->deadline_us != INT64_MAX && jet_now_us() + wait >= call->deadline_us) return 0;
    return wait;
}

static void ch_retry_task(jet_task_t *t)
{
    ch_issue((jet_call_t *)((char *)t - offsetof(jet_call_t, retry_task)));
}

/* The event loop for an attempt made from the deadline thread (its connect,
 * packing and a failure's done callback would hold every other deadline):
 * the last attempt's, or another than the one whose thread waits for a
 * synchronous call made on it. NULL when there is no such loop. */
static jet_loop_t *ch_task_loop(const jet_call_t *call)
{
    jet_loop_t *loop = atomic_load_explicit(&call->wait_loop, memory_order_relaxed);
    for (int i = 0; (!loop || loop == call->waiter_loop) && i < jet_loops_count(); i++)
        loop = jet_loop_at(i);
    return loop && loop != call->waiter_loop ? loop : NULL;
}

/* The deadline thread: a retry's wait is over. */
static void ch_backoff_cb(uint64_t cid)
{
    uint64_t next;
    jet_call_t *call = jet__cid_claim(cid, &next);
    if (!call) return; /* cancelled during the wait */
    ch_backoff_end(call);
    call->cid = next;
    jet_loop_t *loop = ch_task_loop(call);
    if (!loop) {
        ch_issue(call);
        return;
    }
    call->retry_task.fn = ch_retry_task;
    jet_loop_post(loop, &call->retry_task);
}

/* The caller owns the call, whose attempt ended: the next attempt, at once
 * or after the channel's backoff. While it waits, its timer and a cancel
 * may claim it (the wait's cid is named as its owner); no connection has
 * that cid, and a synchronous waiter past its deadline finds no cid to end
 * and looks again. */
static void ch_retry(jet_call_t *call)
{
    /* A backup request's earlier attempt stays the other one, off its
     * connection until the retry is out (its id is refused meanwhile). */
    if (call->other_sock) conn_unlink(call->other_sock->owner, ch_other_link(call));
    /* Not while the first attempt of a backup request is out: its answer
     * would be refused for the whole wait. */
    int64_t wait = call->other_sock ? 0 : ch_backoff_us(call);
    jet_channel_t *ch = call->channel;
    if (wait > 0) {
        uint64_t cid = call->cid, was = jet__cid_owner_of(cid);
        pthread_mutex_lock(&ch->lock);
        bool closed = ch->closed; /* then the retry fails at once */
        if (!closed) {
            call->wait_prev = NULL;
            call->wait_next = ch->waiting;
            if (ch->waiting) ch->waiting->wait_prev = call;
            ch->waiting = call;
            call->backoff_armed = true;
        }
        pthread_mutex_unlock(&ch->lock);
        if (!closed &&
            jet__deadline_add(&call->deadline, jet_now_us() + wait, ch_backoff_cb, cid) == 0) {
            /* The timer may have fired already: only the slot is touched. */
            jet__cid_publish_wait(cid, was);
            return;
        }
        ch_backoff_end(call);
    }
    ch_issue(call);
}

/* The caller owns the call, whose backup request (or a retry of it) failed
 * with no retry left, or is not sent as the answer it was for came, while
 * its earlier attempt is still out, held: that attempt is the call's only
 * one again, and the call waits for its answer (the one that came
 * meanwhile runs now) or its deadline. false, the call untouched but for
 * its socket, when that attempt's connection failed meanwhile with no
 * answer kept, or the attempt was dropped (an error answer, a refused
 * write). */
static bool ch_back_to_first(jet_call_t *call)
{
    jet_socket_t *os = call->other_sock;
    cli_conn_t *oc = os->owner;
    uint64_t held_by = call->cid, first = ch_other_link(call)->cid;
    uint64_t token = atomic_load_explicit(&call->join_token, memory_order_relaxed);
    jet_cid_parked_t *parked = NULL;
    int armed = 0;
    /* An answer kept while held stays until the hold ends (here). */
    bool kept = jet__cid_answer_kept(held_by, first);
    pthread_mutex_lock(&oc->lock);
    bool ok = !oc->dead || kept;
    if (ok) {
        /* Set before the first attempt is accepted again: its claimer
         * reads them. */
        call->other_sock = NULL;
        call->sock = os;
        call->cur ^= 1;
        call->cid = first;
        ok = jet__cid_reinstate(held_by, first, &parked);
        if (ok) {
            JET_DEBUG("call to %s: no backup request; it %s its first attempt", call->channel->name,
                      kept ? "ends with the answer to" : "waits for");
            /* From here a claimer (its answer, its deadline, a cancel)
             * ends the call once it unlinked it under this lock: linked
             * and armed before, as ch_issue does (not on a failed
             * connection: only its kept answer may come). */
            jet_call_link_t *l = ch_link(call);
            if (!l->linked && !oc->dead) conn_link_locked(oc, l);
            jet__cid_set_owner(first, oc->tag | JET_CID_OWNER_LAST);
            armed = ch_deadline_arm(call);
        } else {
            /* Not held: dropped (an error answer, a refused write). */
            call->other_sock = os;
            call->sock = NULL;
            call->cur ^= 1;
            call->cid = held_by;
        }
    }
    pthread_mutex_unlock(&oc->lock);
    if (!ok) return false;
    if (armed < 0) {
        /* No deadline (no memory): the call ends here unless claimed since. */
        if (jet__cid_claim(first, NULL) == call) ch_end_claimed(call, -armed, NULL);
        if (parked) parked->drop(parked);
        return true;
    }
    /* A cancel that came before its owner was named again claimed nothing:
     * the call ends here unless someone claimed it since. */
    if (jet__cid_cancelled(token) && jet__cid_claim(first, NULL) == call) {
        ch_end_claimed(call, ECANCELED, CH_CANCELED_TEXT);
        if (parked) parked->drop(parked);
        return true;
    }
    if (parked) cli_parked_run(parked);
    return true;
}

/* The caller owns the call; its attempt failed with err (negative). */
/* why: what the call's error text says (NULL: the error's own text). */
static void ch_attempt_failed(jet_call_t *call, int err, const char *why)
{
    if (call->sock) {
        /* Back to the channel, which closes it (and it leaves the lent
         * list): a failed attempt got no answer, which might yet come. */
        ch_put_socket(call->channel, call->sock, false);
        call->sock = NULL;
    }
    if (jet__cid_cancelled(atomic_load_explicit(&call->join_token, memory_order_relaxed))) {
        /* Cancelled meanwhile: that is the outcome, not this failure. */
        ch_complete(call, ECANCELED, CH_CANCELED_TEXT);
        return;
    }
    if (err == -JET__EHELLO_REFUSED) {
        /* A server without the transport (a brpc TCP-only server closes on a
         * URMA hello): the channel uses TCP from now on, and this attempt
         * does not count. */
        ch_note_refused(call->channel);
        call->attempts--;
        call->via_tcp = true;
        err = -JET_EEOF;
    }
    if (call->attempts < call->max_attempts && ch_retriable(err) &&
        jet_now_us() < call->deadline_us) {
        /* The retry arms a deadline with its own cid once it is linked: the
         * old one can no longer claim. */
        ch_deadline_disarm(call);
        JET_DEBUG("retry call to %s after %s", call->channel->name, jet_strerror(err));
        ch_retry(call);
        return;
    }
    /* The failure of a backup request drops only that attempt. */
    if (call->other_sock && err != -JET_ECLOSE && jet_now_us() < call->deadline_us) {
        ch_deadline_disarm(call);
        if (ch_back_to_first(call)) return;
    }
    int code = -err;
    char text[320];
    if (err == -ETIMEDOUT && jet_now_us() >= call->deadline_us) {
        /* The connection's connect or hello timer (connect_timeout_ms, by
         * default the call's timeout) fired with the call's deadline, or
         * just before its timer: the call timed out, as that timer says. */
        code = JET_ERPCTIMEDOUT;
        snprintf(text, sizeof text, "Reached timeout=%dms @%s (connecting: %s)",
                 (int)((call->deadline_us - call->start_us) / 1000), call->channel->name,
                 why ? why : jet_strerror(err));
    } else {
        snprintf(text, sizeof text, "[%s] %s", call->channel->name, why ? why : jet_strerror(err));
    }
    ch_complete(call, code, text);
}

/* A thread that claimed the call's attempt from outside (its deadline, a
 * cancel) ends it: off its connection's list, then complete (which drops
 * the other attempt of a backup request). */
static void ch_end_claimed(jet_call_t *call, int code, const char *text)
{
    if (call->sock) conn_unlink(call->sock->owner, ch_link(call));
    ch_complete(call, code, text);
}

/* ---- backup requests -------------------------------------------------------- */

/* The task's loop, owning the call (its claim of the attempt cid, next the
 * slot's next version): the same request goes out again, the attempt cid
 * staying out as the other one. A retry made meanwhile that used the last
 * attempt leaves nothing to send: its attempt is accepted again as it was. */
static void ch_backup_send(jet_call_t *call, uint64_t cid, uint64_t next)
{
    if (call->sock) {
        /* The claim may come as soon as the attempt named itself, while
         * its issuer still arms the deadline under the connection's lock:
         * the call is touched once that is done. */
        cli_conn_t *conn = call->sock->owner;
        pthread_mutex_lock(&conn->lock);
        pthread_mutex_unlock(&conn->lock);
    }
    call->cid = next;
    if (call->backoff_armed) {
        /* Claimed in a retry's wait: the retry goes now (the wait's id, held
         * by the claim, was on no connection). */
        jet__cid_drop_held(next);
        ch_backoff_end(call);
        ch_issue(call);
        return;
    }
    if (!call->sock || call->other_sock || ch_link(call)->cid != cid ||
        call->attempts >= call->max_attempts) {
        /* No attempt of this call to back up is out under that id (cannot
         * happen: the owner field names only such attempts, and the last
         * one with JET_CID_OWNER_LAST, which the task does not claim). */
        ch_end_claimed(call, JET_EINTERNAL, "backup request found no attempt to back up");
        return;
    }
    /* Off its connection while the backup is made (a connect, packing, a
     * credential): a failure of that connection meanwhile need not wait
     * for this thread. ch_issue puts it back, or drops it if it failed. Its
     * answer meanwhile is parked (the claim holds it) and runs then. */
    conn_unlink(call->sock->owner, ch_link(call));
    call->other_sock = call->sock;
    call->sock = NULL;
    call->cur ^= 1;
    ch_deadline_disarm(call); /* armed again for the new attempt */
    ch_issue(call);
}

static void ch_backup_cb(uint64_t value);

static void ch_backup_task(jet_task_t *t)
{
    ch_backup_t *b = (ch_backup_t *)((char *)t - offsetof(ch_backup_t, task));
    uint64_t cid, next;
    bool live;
    jet_call_t *call = jet__cid_claim_issue(b->token, true, true, &cid, &next, &live);
    /* The issue goes on but its attempt is not out yet, or is being
     * retried: looked at again shortly (the timer keeps its reference). */
    if (!call && live &&
        jet__deadline_add(&b->timer, jet_now_us() + CH_BACKUP_AGAIN_US, ch_backup_cb,
                          (uint64_t)(uintptr_t)b) == 0)
        return;
    ch_backup_unref(b); /* the timer's; a call that was claimed holds its own */
    if (call) ch_backup_send(call, cid, next);
}

/* The deadline thread: the call has had no answer for backup_request_ms
 * (or it ended, which its task finds). */
static void ch_backup_cb(uint64_t value)
{
    ch_backup_t *b = (ch_backup_t *)(uintptr_t)value;
    b->task.fn = ch_backup_task;
    if (b->loop)
        jet_loop_post(b->loop, &b->task);
    else
        ch_backup_task(&b->task);
}

/* jet_channel_call, before the first attempt: the backup timer of a call
 * that wants one. On failure (no memory) the call goes on without. */
static void ch_backup_arm(jet_call_t *call)
{
    if (call->backup_at_us == INT64_MAX) return;
    ch_backup_t *b = calloc(1, sizeof *b);
    if (!b) return;
    jet__deadline_init(&b->timer);
    b->token = atomic_load_explicit(&call->join_token, memory_order_relaxed);
    b->loop = ch_task_loop(call);
    atomic_init(&b->refs, 2);
    /* Set first: the timer may fire, and its task end the call, at once. */
    call->backup = b;
    if (jet__deadline_add(&b->timer, call->backup_at_us, ch_backup_cb, (uint64_t)(uintptr_t)b) <
        0) {
        call->backup = NULL;
        free(b);
    }
}

static void ch_deadline_cb(uint64_t cid)
{
    jet_call_t *call = jet__cid_claim(cid, NULL);
    if (!call) return;
    ch_take_attempt(call, cid);
    char text[128];
    snprintf(text, sizeof text, "Reached timeout=%dms @%s",
             (int)((call->deadline_us - call->start_us) / 1000), call->channel->name);
    ch_end_claimed(call, JET_ERPCTIMEDOUT, text);
}

/* ---- sending ---------------------------------------------------------------- */

/* auth: the connection's first request, which carries a new credential
 * (-JET_ERPCAUTH when none could be made). */
static int ch_pack_request(jet_call_t *call, jet_iobuf_t *frame, const jet_authenticator_t *auth)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta rmeta = BRPC__POLICY__RPC_REQUEST_META__INIT;
    uint8_t ck[4];
    meta.request = &rmeta;
    rmeta.service_name = (char *)call->service->name;
    rmeta.method_name = (char *)call->method->name;
    if (call->has_log_id) {
        rmeta.has_log_id = true;
        rmeta.log_id = (int64_t)call->log_id;
    }
    meta.has_compress_type = true;
    meta.compress_type = call->req_compress;
    meta.has_correlation_id = true;
    meta.correlation_id = (int64_t)call->cid;
    if (!jet_iobuf_empty(&call->req_att)) {
        meta.has_attachment_size = true;
        meta.attachment_size = (int32_t)jet_iobuf_len(&call->req_att);
    }
    meta.has_content_type = true;
    meta.has_checksum_type = true;
    meta.has_checksum_value = true;
    if (call->checksum) {
        uint32_t crc = jet__crc32c_iobuf(0, &call->req_body);
        if (call->checksum_with_att) {
            crc = jet__crc32c_iobuf(crc, &call->req_att);
            meta.has_checksum_with_attachment = true;
            meta.checksum_with_attachment = true;
        }
        crc = jet__crc32c_mask(crc);
        ck[0] = (uint8_t)(crc >> 24);
        ck[1] = (uint8_t)(crc >> 16);
        ck[2] = (uint8_t)(crc >> 8);
        ck[3] = (uint8_t)crc;
        meta.checksum_type = 1;
        meta.checksum_value.data = ck;
        meta.checksum_value.len = 4;
    }
    uint8_t *cred = NULL;
    size_t cred_len = 0;
    if (auth) {
        if (!auth->generate_credential ||
            auth->generate_credential(auth->arg, &cred, &cred_len) != 0 || (!cred && cred_len)) {
            free(cred);
            return -JET_ERPCAUTH;
        }
        meta.has_authentication_data = true;
        meta.authentication_data.data = cred;
        meta.authentication_data.len = cred_len;
    }
    void *uf_tmp = NULL;
    if (call->req_uf.n > 0 && jet__uf_to_meta(&call->req_uf, &meta, &uf_tmp) < 0) {
        free(cred);
        return -ENOMEM;
    }
    /* Body and attachment stay with the call: a retry sends them again. */
    int rc = call->req_msg ? jet__baidu_pack_msg_shared(frame, &meta, call->req_msg,
                                                        call->req_msg_size, &call->req_att)
                           : jet__baidu_pack_shared(frame, &meta, &call->req_body, &call->req_att);
    free(uf_tmp);
    free(cred);
    return rc;
}

/* The caller owns the call: makes one attempt. */
static void ch_issue(jet_call_t *call)
{
    jet_channel_t *ch = call->channel;
    uint64_t token = atomic_load_explicit(&call->join_token, memory_order_relaxed);
    if (jet__cid_cancelled(token)) {
        /* Before this issue, or before this retry. */
        ch_complete(call, ECANCELED, CH_CANCELED_TEXT);
        return;
    }
    call->attempts++;
    call->answered = false;
    jet_socket_t *s = NULL;
    int rc = ch_get_socket(ch, call->via_tcp, &s);
    call->via_tcp = false;
    if (rc < 0) {
        ch_attempt_failed(call, rc, NULL);
        return;
    }
    if (call->waiter_loop && call->waiter_loop == s->loop) {
        /* Its answer would be read by the thread that waits for it, the
         * loop's own: a deadlock until the deadline, or for ever. Checked
         * at every attempt (a retry may get a connection on that loop). */
        ch_put_socket(ch, s, true); /* nothing went out on it */
        call->max_attempts = call->attempts; /* no retry; this attempt counts */
        ch_attempt_failed(call, -EDEADLK,
                          "a synchronous call on the thread of the event loop that serves its "
                          "connection (a done callback, or a handler run on the loop) can never "
                          "get its answer: call asynchronously, or run handlers in the worker "
                          "pool (usercode_in_pool)");
        return;
    }
    call->sock = s;
    atomic_store_explicit(&call->wait_loop, s->loop, memory_order_relaxed);
    memcpy(call->remote, s->peer, sizeof call->remote);
    cli_conn_t *conn = s->owner;
    /* A request written after one with a credential is queued behind it. */
    bool auth_first =
        ch->opts.auth && !atomic_load_explicit(&conn->auth_sent, memory_order_acquire);
    jet_iobuf_t frame;
    jet_iobuf_init(&frame);
    rc = ch_pack_request(call, &frame, auth_first ? ch->opts.auth : NULL);
    /* The server takes a body (meta included) of at most its max_body_size,
     * else closes the connection: such a request never goes out. */
    if (rc == 0 && jet_iobuf_len(&frame) - JET_BAIDU_HEADER_SIZE > ch->max_body) rc = -EMSGSIZE;
    if (rc < 0) {
        jet_iobuf_fini(&frame);
        call->max_attempts = call->attempts; /* not a connection problem: no retry */
        ch_put_socket(ch, s, true);          /* nothing went out on it */
        call->sock = NULL;
        const char *why = NULL;
        if (rc == -JET_ERPCAUTH) {
            why = "Fail to authenticate: no credential was made";
        } else if (rc == -EOVERFLOW) {
            rc = -JET_EREQUEST;
            why = "the request's RpcMeta (its user fields, its credential) is over 1 MiB, "
                  "more than a jetrpc server decodes: not sent";
        }
        ch_attempt_failed(call, rc, why);
        return;
    }
    if (call->other_sock && jet__cid_answer_kept(call->cid, ch_other_link(call)->cid)) {
        /* The earlier attempt's answer came while this backup was being
         * made: the backup is not sent (the server runs the request once)
         * nor counted, and its connection, which carried none of it, goes
         * back as it was; that answer ends the call. */
        jet_iobuf_fini(&frame);
        call->sock = NULL;
        call->attempts--;
        ch_put_socket(ch, s, true);
        if (!ch_back_to_first(call)) ch_issue(call); /* dropped since: sent after all */
        return;
    }
    /* From the unlock below the attempt may end on another thread (its
     * answer, its deadline, a connection failure and its retry) and the call
     * and the call's reference to s with it: what this thread uses after it
     * is read now, and s is held until it is done. */
    uint64_t cid = call->cid;
    bool async = call->done != NULL;
    jet_loop_t *loop = s->loop;
    size_t frame_len = jet_iobuf_len(&frame);
    jet__socket_ref(s);
    if (call->other_sock) {
        /* A backup request: its earlier attempt goes back on its
         * connection (ch_backup_send took it off), unless that failed: then
         * it stays the other attempt all the same, for the answer that came
         * before the failure and was kept (none comes later). Not held, an
         * error answer or a refused write dropped it: it stays off, and is
         * not accepted again. Either way it goes with the call's end. The
         * hold is looked at under the connection's lock, which a drop takes
         * after it to unlink the attempt: a drop either comes first and is
         * seen here, or unlinks what this links. */
        cli_conn_t *oc = call->other_sock->owner;
        pthread_mutex_lock(&oc->lock);
        if (!oc->dead && !ch_other_link(call)->linked &&
            jet__cid_held(cid, ch_other_link(call)->cid))
            conn_link_locked(oc, ch_other_link(call));
        pthread_mutex_unlock(&oc->lock);
    }
    jet_cid_parked_t *parked = NULL;
    pthread_mutex_lock(&conn->lock);
    bool dead = conn->dead;
    int armed = 0;
    if (!dead) {
        /* Linked before writing so that an answer racing the write finds it. */
        jet_call_link_t *l = ch_link(call);
        l->call = call;
        l->cid = cid;
        conn_link_locked(conn, l);
        jet__cid_set_owner(
            cid, conn->tag | (call->attempts >= call->max_attempts ? JET_CID_OWNER_LAST : 0));
        /* The deadline is armed only now, under the lock and before any
         * answer (which unlinks under it before it disarms): whoever it lets
         * end the attempt finds the call linked and its socket set. */
        armed = ch_deadline_arm(call);
        if (armed < 0) {
            conn_unlink_locked(conn, l);
        } else if (call->other_sock) {
            /* A backup request: from here an answer to either attempt
             * ends the call (the other one's connection may be this one). */
            call->backup_sent = true;
            jet__cid_set_alt(cid, ch_other_link(call)->cid,
                             ((cli_conn_t *)call->other_sock->owner)->tag, &parked);
        }
    }
    pthread_mutex_unlock(&conn->lock);
    /* The earlier attempt's answer that came while this backup was being
     * made, just now: it ends the call now, unless the backup's came first;
     * the backup then does not go out. */
    if (parked) {
        cli_parked_run(parked);
        if (!jet__cid_peek(cid)) {
            jet_iobuf_fini(&frame);
            jet__socket_unref(s);
            return;
        }
    }
    if (!dead && armed >= 0 && jet__cid_cancelled(token)) {
        /* Cancelled while this attempt was being set up: unless its
         * canceller claimed it already, it ends here, unsent. */
        jet_iobuf_fini(&frame);
        if (jet__cid_claim(cid, NULL) == call) {
            ch_take_attempt(call, cid); /* a backup request may have gone out meanwhile */
            conn_unlink(conn, ch_link(call));
            call->answered = true; /* nothing went out: the connection stays usable */
            ch_complete(call, ECANCELED, CH_CANCELED_TEXT);
        }
        jet__socket_unref(s);
        return;
    }
    if (dead || armed < 0) {
        jet_iobuf_fini(&frame);
        jet__socket_unref(s); /* the call still holds its own */
        if (armed < 0) {
            /* Unless a cancel found its owner set and claimed it first. */
            if (jet__cid_claim(cid, NULL) == call) ch_complete(call, -armed, NULL);
            return;
        }
        int err = atomic_load(&s->error);
        ch_attempt_failed(call, err ? err : -JET_EFAILEDSOCKET, NULL);
        return;
    }
    rc = jet__socket_write(s, &frame);
    jet_iobuf_fini(&frame);
    if (auth_first && rc == 0) atomic_store_explicit(&conn->auth_sent, true, memory_order_release);
    /* Nobody waits on the loop for this answer: an undriven busy-poll loop
     * must poll for it now, not after its parked thread's next look. */
    if (async) jet_loop_kick(loop);
    if (rc < 0 && !jet__socket_failed(s)) {
        /* Refused without failing the connection (overcrowded, or larger
         * than the transport ever carries): end this attempt. */
        uint64_t next;
        bool dropped;
        jet_call_t *mine = jet__cid_fail_from(cid, conn->tag, true, &next, &dropped);
        if (dropped) {
            /* The earlier attempt of a backup request that went out
             * meanwhile: the call waits for the backup. */
            conn_unlink_cid(conn, cid);
        } else if (mine == call) {
            conn_unlink(conn, ch_link(call));
            call->cid = next;
            char why[224];
            if (rc == -EMSGSIZE) jet__socket_size_error(s, "request", frame_len, why, sizeof why);
            /* Refused whole: nothing of it went out, the connection stays usable. */
            if (call->sock) {
                ch_put_socket(ch, call->sock, true);
                call->sock = NULL;
            }
            ch_attempt_failed(call, rc, rc == -EMSGSIZE ? why : NULL);
        }
    }
    /* Otherwise the connection's failure handler owns the outcome. */
    jet__socket_unref(s);
}

int jet_channel_call(jet_channel_t *ch, const ProtobufCServiceDescriptor *service,
                     unsigned method_index, jet_call_t *call, const ProtobufCMessage *request,
                     jet_call_done_cb_t done, void *arg)
{
    if (!ch || !service || !call || method_index >= service->n_methods ||
        atomic_load_explicit(&call->in_flight, memory_order_relaxed))
        return -EINVAL;
    /* A done callback that reissues its call while the channel is being
     * destroyed (the call's reference keeps the channel until it returns). */
    if (atomic_load_explicit(&ch->closed, memory_order_relaxed)) return -JET_ECLOSE;
    const ProtobufCMethodDescriptor *m = &service->methods[method_index];
    if (request && request->descriptor != m->input) return -EINVAL;
    /* The outcome of a previous use goes; the settings and attachment stay. */
    jet__msg_arena_release(&call->msg_arena, call->response);
    call->response = NULL;
    free(call->error_text);
    call->error_text = NULL;
    call->error_code = 0;
    jet_iobuf_clear(&call->resp_att);
    if (call->resp_uf.n > 0) jet__uf_clear(&call->resp_uf);
    jet_iobuf_clear(&call->req_body);
    /* A slot jet_call_id reserved is this issue's, and its id published. */
    uint64_t reserved = call->reserved_token;
    call->reserved_token = 0;
    call->joinable = reserved != 0;
    if (reserved) atomic_store_explicit(&call->join_token, reserved, memory_order_release);
    call->service = service;
    call->method = m;
    call->channel = ch;
    atomic_fetch_add_explicit(&ch->refs, 1, memory_order_relaxed); /* until ch_notify */
    call->done = done;
    call->done_arg = arg;
    call->waiter_loop = NULL;
    call->no_backoff = !done && jet__deadline_in_thread();
    call->via_tcp = false;
    call->attempts = 0;
    call->remote[0] = '\0';
    call->resp_compress = 0;
    call->start_us = jet_now_us();
    call->end_us = 0;
    atomic_store_explicit(&call->in_flight, true, memory_order_relaxed);
    int32_t timeout = call->timeout_ms != INT32_MIN ? call->timeout_ms : ch->opts.timeout_ms;
    int32_t retry = call->max_retry >= 0 ? call->max_retry : ch->opts.max_retry;
    call->max_attempts = retry < INT32_MAX ? retry + 1 : INT32_MAX;
    call->deadline_us = timeout < 0 ? INT64_MAX : call->start_us + (int64_t)timeout * 1000;
    int32_t backup =
        call->backup_request_ms != INT32_MIN ? call->backup_request_ms : ch->opts.backup_request_ms;
    call->backup_at_us =
        backup >= 0 && call->max_attempts > 1 ? call->start_us + (int64_t)backup * 1000 : INT64_MAX;
    if (call->backup_at_us >= call->deadline_us) call->backup_at_us = INT64_MAX;
    call->backup_sent = false;

    if (request && !protobuf_c_message_check(request)) {
        /* brpc fails such a call before sending (request_not_init). */
        call->attempts = 1;
        atomic_store_explicit(&call->in_flight, false, memory_order_relaxed);
        char text[256];
        snprintf(text, sizeof text, "Missing required fields in request: %s", m->input->name);
        jet__call_set_error(call, JET_EREQUEST, text);
        call->end_us = jet_now_us();
        ch_notify(call);
        return 0;
    }
    /* A synchronous call's request outlives the call: plain ones are packed
     * straight into each attempt's frame, without a serialised copy kept for
     * retries (a compressed or checksummed body is computed once). */
    int rc = 0;
    size_t body_len;
    call->req_msg = !done && request && call->req_compress == 0 && !call->checksum ? request : NULL;
    if (call->req_msg) {
        body_len = call->req_msg_size = protobuf_c_message_get_packed_size(request);
    } else {
        rc = jet__encode_message(request, call->req_compress, &call->req_body);
        body_len = jet_iobuf_len(&call->req_body);
    }
    /* (baidu_std's attachment_size is an int32, whatever max_body_size says.) */
    if (rc == 0 && (body_len + jet_iobuf_len(&call->req_att) > ch->max_body ||
                    jet_iobuf_len(&call->req_att) > INT32_MAX))
        rc = -EMSGSIZE;
    if (rc == 0 && !reserved) rc = jet__cid_alloc(call, &call->cid);
    if (rc < 0) {
        call->req_msg = NULL;
        call->attempts = 1;
        atomic_store_explicit(&call->in_flight, false, memory_order_relaxed);
        jet__call_set_error(call, rc == -EINVAL ? JET_EREQUEST : -rc,
                            rc == -EINVAL ? "Unsupported compress type" : jet_strerror(rc));
        call->end_us = jet_now_us();
        ch_notify(call);
        return 0;
    }
    call->wait_deadline = !done;
    if (!done) {
        /* A write that has to wait for the connection's window goes on on
         * the loop, which this thread is about to drive while it waits. */
        jet_loop_defer_begin();
        call->waiter_loop = jet_loop_current();
        ch_backup_arm(call);
        ch_issue(call);
        ch_wait_sync(call);
        jet_loop_defer_end();
        call->req_msg = NULL; /* the caller's again */
    } else {
        ch_backup_arm(call);
        ch_issue(call);
    }
    return 0;
}

JET_FLAG_DEFINE_INT32_RANGE(
    sync_call_spin_us, 0, 0, JET_CID_SPIN_MAX_US,
    "A waiting synchronous call spins this many microseconds for its answer "
    "before it sleeps. Helps polled URMA only when a core is free for the "
    "spinning caller besides the polling loops (on 2 cores it hurts)");

/* The waiting thread of a synchronous call, its deadline passed. */
static void ch_wait_expire(void *arg)
{
    jet_call_t *call = arg;
    uint64_t cid = atomic_load_explicit(&call->deadline_cid, memory_order_acquire);
    if (cid) ch_deadline_cb(cid);
}

/* The synchronous caller's own wait: its issue holds a slot until it is
 * complete, and nothing reissues it meanwhile. */
static void ch_wait_sync(jet_call_t *call)
{
    if (!call->joinable) return;
    uint64_t t = atomic_load_explicit(&call->join_token, memory_order_relaxed);
    jet__cid_join(jet__join_slot(t), jet__join_seq(t), JET_FLAG(sync_call_spin_us),
                  atomic_load_explicit(&call->wait_loop, memory_order_relaxed), call->deadline_us,
                  ch_wait_expire, call);
}

uint64_t jet_call_id(jet_call_t *call)
{
    /* In flight the call is not its owner's: its end may be taking the
     * slot's fields (ch_notify) or done may be destroying it. */
    if (!call || call->server || atomic_load_explicit(&call->in_flight, memory_order_relaxed))
        return 0;
    if (!call->reserved_token) {
        uint64_t cid, token;
        if (jet__cid_reserve(call, &cid, &token) < 0) return 0;
        call->cid = cid;
        call->reserved_token = token;
    }
    return call->reserved_token;
}

int jet_call_cancel(uint64_t id)
{
    jet_call_t *call = NULL;
    int rc = jet__cid_cancel(id, &call);
    if (rc < 0 || !call) return rc;
    ch_end_claimed(call, ECANCELED, CH_CANCELED_TEXT); /* as by its deadline */
    return 0;
}

static void ch_no_expire(void *arg)
{
    (void)arg;
}

void jet_call_join(jet_call_t *call)
{
    /* The deadline thread keeps an asynchronous call's deadline. Each issue
     * frees its slot only after its done returned; a done that reissued
     * has by then published the new issue's token, which is waited for in
     * turn. A stale token (a complete issue) names a slot freed since. */
    if (!call) return;
    uint64_t t = atomic_load_explicit(&call->join_token, memory_order_acquire);
    while (t != 0) {
        if (t == ch_tls_done_token) {
            /* Inside that issue's own done: it is complete, and its done
             * returning is all that is left. A reissue made by that done
             * is waited for. */
            uint64_t now = atomic_load_explicit(&call->join_token, memory_order_acquire);
            if (now == t) return;
            t = now;
            continue;
        }
        if ((jet_loop_current() || jet__deadline_in_thread()) &&
            !jet__cid_freed_since(jet__join_slot(t), jet__join_seq(t)))
            JET_LOG_ONCE(JET_LOG_WARN,
                         "jet_call_join on a loop or the deadline thread for a call not "
                         "complete (reissued by its done?): that thread waits, and the call "
                         "with it if it needs the thread, until the call's deadline");
        jet__cid_join(jet__join_slot(t), jet__join_seq(t), JET_FLAG(sync_call_spin_us),
                      atomic_load_explicit(&call->wait_loop, memory_order_relaxed), INT64_MAX,
                      ch_no_expire, NULL);
        uint64_t now = atomic_load_explicit(&call->join_token, memory_order_acquire);
        if (now == t) return;
        t = now;
    }
}

/* ---- connection events ------------------------------------------------------ */

static void cli_handle_response(jet_socket_t *s, jet_baidu_frame_t *f, int bad_att);

/* An answer to an attempt held while its backup request is made: packed
 * again (a frame is never moved), run when the hold ends. */
typedef struct cli_parked {
    jet_cid_parked_t head;
    jet_socket_t *s;
    uint64_t cid;
    jet_iobuf_t frame;
} cli_parked_t;

static void cli_parked_drop(jet_cid_parked_t *p)
{
    cli_parked_t *cp = (cli_parked_t *)p;
    jet_iobuf_fini(&cp->frame);
    jet__socket_unref(cp->s);
    free(cp);
}

/* An answer to cid that came on s and could not be kept or run again (no
 * memory): its attempt ends as an error answer ends it, so that nothing
 * waits for an answer that is gone. The earlier attempt of a backup request
 * (held or out) is dropped and the call waits for the backup; the call's
 * only attempt ends the call with ENOMEM. */
static void cli_answer_lost(jet_socket_t *s, uint64_t cid)
{
    cli_conn_t *conn = s->owner;
    JET_WARN("%s: dropped the response to a call with a backup request (no memory to keep it)",
             s->peer);
    uint64_t next;
    bool dropped;
    jet_call_t *call;
    /* A hold that is ending (ch_back_to_first names the attempt's owner
     * only after accepting it again) refuses the claim for an instant: as
     * cli_handle_response, claim again while the attempt is accepted. */
    do {
        call = jet__cid_fail_from(cid, conn->tag, true, &next, &dropped);
    } while (!call && !dropped && jet__cid_park(cid, conn->tag, NULL) == JET_CID_AGAIN);
    if (dropped) {
        conn_unlink_cid(conn, cid);
        return;
    }
    if (!call) return; /* ended or claimed elsewhere */
    ch_take_attempt(call, cid);
    conn_unlink(conn, ch_link(call));
    call->answered = true; /* the answer was read whole: the connection is fine */
    ch_complete(call, ENOMEM, "no memory for the response");
}

/* The answer, as if it came now: it claims as any answer does. */
static void cli_parked_run(jet_cid_parked_t *p)
{
    cli_parked_t *cp = (cli_parked_t *)p;
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int bad_att = 0;
    /* Our own packing of a frame that parsed: it parses, unless memory ran out. */
    if (jet__baidu_cut(&cp->frame, UINT32_MAX, &f, &bad_att) == JET_PARSE_OK)
        cli_handle_response(cp->s, &f, bad_att);
    else
        cli_answer_lost(cp->s, cp->cid);
    jet__baidu_frame_fini(&f);
    cli_parked_drop(p);
}

/* An answer to cid that no claim accepted: JET_CID_PARKED when it was
 * taken (parked for the hold of its attempt, run again as the hold just
 * ended, or lost for want of memory: cli_answer_lost); JET_CID_AGAIN: cid
 * is accepted again, f untouched, to claim again; JET_CID_STALE: f
 * untouched, the answer is stale. */
static int cli_park(jet_socket_t *s, jet_baidu_frame_t *f, uint64_t cid)
{
    cli_conn_t *conn = s->owner;
    int r = jet__cid_park(cid, conn->tag, NULL);
    if (r != JET_CID_PARKED) return r;
    cli_parked_t *cp = malloc(sizeof *cp);
    if (!cp) {
        cli_answer_lost(s, cid);
        return JET_CID_PARKED;
    }
    cp->head.drop = cli_parked_drop;
    jet_iobuf_init(&cp->frame);
    if (jet__baidu_pack(&cp->frame, f->meta, &f->body, &f->attachment) < 0) {
        jet_iobuf_fini(&cp->frame);
        free(cp);
        cli_answer_lost(s, cid);
        return JET_CID_PARKED;
    }
    jet__socket_ref(s);
    cp->s = s;
    cp->cid = cid;
    switch (jet__cid_park(cid, conn->tag, &cp->head)) {
    case JET_CID_PARKED:
        break;
    case JET_CID_AGAIN:
        cli_parked_run(&cp->head);
        break;
    default:
        JET_DEBUG("%s: dropped a response with stale correlation_id=%llu", s->peer,
                  (unsigned long long)cid);
        cli_parked_drop(&cp->head);
        break;
    }
    return JET_CID_PARKED;
}

static void cli_handle_response(jet_socket_t *s, jet_baidu_frame_t *f, int bad_att)
{
    cli_conn_t *conn = s->owner;
    Brpc__Policy__RpcMeta *meta = f->meta;
    uint64_t cid = (uint64_t)meta->correlation_id;
    /* Only a call written on this connection: a server answering with the
     * id of a call on another connection is ignored like an unknown id. */
    uint64_t next = 0;
    Brpc__Policy__RpcResponseMeta *rm0 = meta->response;
    bool dropped = false;
    jet_call_t *call = NULL;
    for (;;) {
        if (!meta->has_correlation_id)
            call = NULL;
        else if (rm0 && rm0->has_error_code && rm0->error_code != 0)
            /* An error answer to an attempt held while its backup is made
             * drops it at once, as it does one whose backup is out: the
             * backup goes, and the call waits for it. */
            call = jet__cid_fail_from(cid, conn->tag, true, &next, &dropped);
        else
            call = jet__cid_claim_from(cid, conn->tag, &next);
        if (call || dropped || !meta->has_correlation_id) break;
        /* The earlier attempt of a call whose backup request is being made
         * (or retried): kept until it is out; or accepted again since. */
        int r = cli_park(s, f, cid);
        if (r == JET_CID_PARKED) return;
        if (r == JET_CID_STALE) break;
    }
    if (dropped) {
        /* An error answer to the earlier attempt of a backup request: as
         * brpc, the call waits for the backup's outcome. */
        conn_unlink_cid(conn, cid);
        return;
    }
    if (!call) {
        JET_DEBUG("%s: dropped a response with unknown correlation_id=%llu", s->peer,
                  (unsigned long long)cid);
        return;
    }
    ch_take_attempt(call, cid);
    conn_unlink(conn, ch_link(call));
    call->answered = true;
    Brpc__Policy__RpcResponseMeta *rm = meta->response;
    bool failed = rm && rm->has_error_code && rm->error_code != 0;
    if (failed && ch_answer_retriable(rm->error_code) && call->attempts < call->max_attempts &&
        jet_now_us() < call->deadline_us) {
        /* brpc's retry policy: a server that is stopping or over its limit
         * is asked again, within max_retry and the deadline. */
        JET_DEBUG("retry call to %s after E%d", call->channel->name, rm->error_code);
        call->cid = next;
        ch_put_socket(call->channel, call->sock, true);
        call->sock = NULL;
        ch_deadline_disarm(call);
        ch_retry(call);
        return;
    }
    /* The user fields of the answer that ends the call, an error answer's
     * too (the issue started with none). */
    if (meta->n_user_fields > 0 && jet__uf_from_meta(&call->resp_uf, meta) < 0) {
        ch_complete(call, ENOMEM, "no memory for the response's user fields");
        return;
    }
    if (failed) {
        if (rm->error_code < 0) {
            /* Codes are positive (brpc's, or errno values): a negative one
             * would read as no error to some callers. */
            char text[320];
            snprintf(text, sizeof text, "the server answered error_code %d: %.200s",
                     rm->error_code, rm->error_text ? rm->error_text : "");
            ch_complete(call, JET_ERESPONSE, text);
            return;
        }
        ch_complete(call, rm->error_code, rm->error_text);
        return;
    }
    if (bad_att) {
        char text[160];
        snprintf(text, sizeof text, "attachment_size=%d is larger than response_size=%zu",
                 meta->attachment_size, jet_iobuf_len(&f->body));
        ch_complete(call, JET_ERESPONSE, text);
        return;
    }
    const char *why = NULL;
    ProtobufCMessage *msg = jet__decode_message(call->method->output, meta, &f->body,
                                                &f->attachment, conn->max_body,
                                                &call->msg_arena.pa, &why);
    if (!msg) {
        char text[512];
        jet__format_parse_error(text, sizeof text, "response", call->method->output->name, meta,
                                jet_iobuf_len(&f->body));
        /* EREQUEST, as brpc's baidu_std client says it since it checks
         * content and checksum types (older brpc said ERESPONSE). */
        ch_complete(call, JET_EREQUEST, text);
        return;
    }
    call->response = msg;
    call->resp_compress = meta->has_compress_type ? meta->compress_type : 0;
    jet_iobuf_move(&call->resp_att, &f->attachment);
    ch_complete(call, 0, NULL);
}

static void cli_on_read(jet_socket_t *s)
{
    cli_conn_t *conn = s->owner;
    for (;;) {
        if (jet_iobuf_empty(&s->read_buf)) return;
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int bad_att = 0;
        jet_parse_result_t r = jet__baidu_cut(&s->read_buf, conn->max_body, &f, &bad_att);
        switch (r) {
        case JET_PARSE_OK:
            cli_handle_response(s, &f, bad_att);
            break;
        case JET_PARSE_NEED_MORE:
            jet__baidu_frame_fini(&f);
            return;
        case JET_PARSE_NOT_MINE:
            jet__baidu_frame_fini(&f);
            JET_WARN("close %s: the server sent bytes that are not baidu_std", s->peer);
            jet__socket_set_failed(s, -EPROTO);
            return;
        case JET_PARSE_TOO_BIG:
            jet__baidu_frame_fini(&f);
            JET_WARN("close %s: response body over %u bytes", s->peer, conn->max_body);
            jet__socket_set_failed(s, -EMSGSIZE);
            return;
        case JET_PARSE_META_SIZE:
        case JET_PARSE_BAD_META:
            /* brpc drops such a response; its call ends at its deadline. */
            JET_WARN("%s: dropped a response whose RpcMeta does not parse (malformed, over 1 "
                     "MiB, or decoding into more than 48 bytes per byte)",
                     s->peer);
            break;
        }
        jet__baidu_frame_fini(&f);
        if (jet__socket_failed(s)) return;
    }
}

/* A request written before the handshake that the transport then found too
 * large (UBRing: the peer's ring): that call fails as it would have at the
 * write, the others go on. */
static void cli_on_refused(jet_socket_t *s, jet_iobuf_t *msg)
{
    size_t len = jet_iobuf_len(msg);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int bad_att = 0;
    /* Our own frame: it parses, unless memory ran out. */
    if (jet__baidu_cut(msg, UINT32_MAX, &f, &bad_att) != JET_PARSE_OK ||
        !f.meta->has_correlation_id) {
        jet__baidu_frame_fini(&f);
        jet__socket_set_failed(s, -EMSGSIZE);
        return;
    }
    uint64_t next, cid = (uint64_t)f.meta->correlation_id;
    jet__baidu_frame_fini(&f);
    cli_conn_t *conn = s->owner;
    bool dropped;
    jet_call_t *call = jet__cid_fail_from(cid, conn->tag, true, &next, &dropped);
    if (dropped) conn_unlink_cid(conn, cid); /* a backup request is out */
    if (!call) return; /* already ended (deadline), or the call waits for its backup */
    ch_take_attempt(call, cid);
    conn_unlink(conn, ch_link(call));
    call->cid = next;
    char why[224];
    jet__socket_size_error(s, "request", len, why, sizeof why);
    ch_attempt_failed(call, -EMSGSIZE, why);
}

static void cli_on_failed(jet_socket_t *s, int err)
{
    cli_conn_t *conn = s->owner;
    pthread_mutex_lock(&conn->lock);
    conn->dead = true; /* no new call links itself to it */
    pthread_mutex_unlock(&conn->lock);
    /* The linked calls, a bounded batch at a time (no allocation here): each
     * one this thread claims it unlinks; one claimed elsewhere (its answer,
     * its deadline) is unlinked by that thread, right after its claim. */
    for (;;) {
        uint64_t cids[64];
        size_t n = 0;
        pthread_mutex_lock(&conn->lock);
        for (jet_call_link_t *l = conn->pending; l && n < 64; l = l->next)
            cids[n++] = l->cid;
        pthread_mutex_unlock(&conn->lock);
        if (n == 0) break;
        size_t ended = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t next;
            bool dropped;
            jet_call_t *call = jet__cid_fail_from(cids[i], conn->tag, false, &next, &dropped);
            if (dropped) {
                /* The earlier attempt of a backup request: the call waits
                 * for the backup's outcome. */
                conn_unlink_cid(conn, cids[i]);
                ended++;
                continue;
            }
            if (!call) continue; /* answered or timed out meanwhile */
            ch_take_attempt(call, cids[i]);
            conn_unlink(conn, ch_link(call));
            call->cid = next;
            ch_attempt_failed(call, err, NULL);
            ended++;
        }
        if (ended == 0) sched_yield(); /* the claimers are between claim and unlink */
    }
}

static void cli_on_release(jet_socket_t *s)
{
    cli_conn_t *conn = s->owner;
    if (!conn) return;
    pthread_mutex_destroy(&conn->lock);
    free(conn);
}
