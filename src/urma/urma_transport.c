#include "urma/urma_transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/time.h"
#include "jetrpc/errors.h"
#include "net/socket.h"
#include "urma/urma_context.h"
#include "urma/urma_endpoint.h"
#include "urma/urma_handshake.h"

#define UT_HELLO_MAX (JET_URMA_V3_HDR_LEN + JET_URMA_V3_MAX_PB)
#define UT_READ_ROOM 4096

enum { UT_UNKNOWN = 0, UT_ON = 1, UT_OFF = 2 };
enum { UT_HS_NONE = 0, UT_HS_C_HELLO_WAIT, UT_HS_S_HELLO_WAIT, UT_HS_S_ACK_WAIT };

typedef struct urma_ts {
    _Atomic int mode; /* UT_*; read by writer threads */
    int hs;           /* handshake phase (loop thread) */
    bool said_yes;    /* server: our hello accepted URMA */
    jet_socket_t *s;
    jet_iobuf_t hs_buf; /* handshake bytes read from TCP, not yet consumed */
    jet_urma_ep_t *ep;
    jet_timer_t timer;
    _Atomic bool writer_in; /* a writer is inside the endpoint */
    _Atomic bool closed;
} urma_ts_t;

static const char *const ut_mode_names[] = {"unknown", "on", "off"};
static const char *const ut_hs_names[] = {"none", "c_hello_wait", "s_hello_wait", "s_ack_wait"};

static int ut_global_init(const jet_transport_check_t *check)
{
    const char *who = check->is_server ? "server" : "channel";
    if (check->use_ssl) {
        JET_ERROR("%s with socket_mode=urma: SSL is not supported over URMA", who);
        return -EPROTONOSUPPORT;
    }
    if (check->protocol && strcmp(check->protocol, "baidu_std") != 0) {
        JET_ERROR("%s with socket_mode=urma: protocol %s is not supported (baidu_std only)", who,
                  check->protocol);
        return -EPROTONOSUPPORT;
    }
    /* Unavailable is not an error: connections then run over TCP. */
    jet__urma_ctx_get();
    return 0;
}

static void ut_timer_cb(jet_timer_t *t)
{
    urma_ts_t *ts = (urma_ts_t *)((char *)t - offsetof(urma_ts_t, timer));
    jet_socket_t *s = ts->s;
    if (atomic_load(&ts->mode) != UT_UNKNOWN || jet__socket_failed(s)) return;
    JET_WARN("URMA handshake with %s timed out after %d ms (%s)", s->peer,
             JET_FLAG(urma_handshake_timeout_ms), ut_hs_names[ts->hs]);
    jet__socket_set_failed(s, -ETIMEDOUT);
}

static void ut_timer_start(jet_socket_t *s, urma_ts_t *ts)
{
    int ms = JET_FLAG(urma_handshake_timeout_ms);
    if (ms > 0 && !jet_timer_armed(&ts->timer))
        jet_loop_timer_start(s->loop, &ts->timer, jet_now_us() + (int64_t)ms * 1000);
}

static int ut_init(jet_socket_t *s)
{
    urma_ts_t *ts = calloc(1, sizeof *ts);
    if (!ts) return -ENOMEM;
    ts->s = s;
    jet_iobuf_init(&ts->hs_buf);
    jet_timer_init(&ts->timer, ut_timer_cb);
    const jet_urma_ctx_t *ctx = jet__urma_ctx_get();
    if (!ctx) {
        /* No URMA here: plain TCP. A URMA hello reaching this server is
         * declined by the server's foreign-hello answer. */
        atomic_init(&ts->mode, UT_OFF);
    } else {
        atomic_init(&ts->mode, UT_UNKNOWN);
        if (s->is_server_side) ts->hs = UT_HS_S_HELLO_WAIT;
        jet_loop_t *l = jet__urma_pick_loop();
        if (l) s->loop = l;
    }
    s->tstate = ts;
    return 0;
}

static void ut_release(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    if (!ts) return;
    if (ts->ep) JET_ERROR("URMA: socket %s released with its endpoint attached (leaked)", s->peer);
    jet_iobuf_fini(&ts->hs_buf);
    free(ts);
    s->tstate = NULL;
}

static void ut_close(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    jet_loop_timer_stop(s->loop, &ts->timer);
    atomic_store_explicit(&ts->closed, true, memory_order_relaxed);
    /* Pairs with the writer's store-fence-load in ut_cut: either it sees
     * closed, or we see it inside and wait (a post takes microseconds). */
    atomic_thread_fence(memory_order_seq_cst);
    while (atomic_load_explicit(&ts->writer_in, memory_order_acquire))
        jet__cpu_relax();
    if (ts->ep) {
        jet__urma_ep_close(ts->ep);
        ts->ep = NULL;
    }
}

/* Handshake messages are tiny and go out first on a fresh connection: the
 * kernel buffer takes them whole or the connection is broken. */
static int ut_send(jet_socket_t *s, const void *buf, size_t len)
{
    ssize_t w;
    do {
        w = send(s->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
    if (w == (ssize_t)len) return 0;
    if (w < 0) return errno == EPIPE || errno == ECONNRESET ? -JET_EEOF : -errno;
    return -EIO;
}

/* This connection does not use URMA: release the endpoint, and hand what
 * was read to the protocol parser. */
static void ut_go_off(jet_socket_t *s, urma_ts_t *ts)
{
    jet_loop_timer_stop(s->loop, &ts->timer);
    if (ts->ep) {
        jet__urma_ep_close(ts->ep);
        ts->ep = NULL;
    }
    ts->hs = UT_HS_NONE;
    atomic_store_explicit(&ts->mode, UT_OFF, memory_order_release);
    if (!jet_iobuf_empty(&ts->hs_buf)) {
        if (jet_iobuf_move(&s->read_buf, &ts->hs_buf) < 0) {
            jet__socket_set_failed(s, -ENOMEM);
            return;
        }
        jet__socket_deliver(s);
    }
}

static size_t ut_flatten(urma_ts_t *ts, uint8_t *flat)
{
    size_t n = jet_iobuf_len(&ts->hs_buf);
    if (n > UT_HELLO_MAX) n = UT_HELLO_MAX;
    return jet_iobuf_copy_to(&ts->hs_buf, flat, n, 0);
}

/* ---- client ------------------------------------------------------------------- */

static int ut_connect(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    if (atomic_load(&ts->mode) == UT_OFF) return 0;
    int rc = jet__urma_ep_create(s, &ts->ep);
    if (rc < 0) {
        JET_INFO("URMA: no resources for a connection to %s (%s): using TCP", s->peer,
                 jet_strerror(rc));
        ts->ep = NULL;
        atomic_store(&ts->mode, UT_OFF);
        return 0; /* no hello: the server sees a plain TCP client */
    }
    jet_urma_hello_t h;
    uint8_t buf[UT_HELLO_MAX];
    jet__urma_ep_hello(ts->ep, JET_FLAG(urma_client_handshake_version) == 3 ? 3 : 2, &h);
    int n = jet__urma_hello_pack(&h, buf, sizeof buf);
    rc = n < 0 ? n : ut_send(s, buf, (size_t)n);
    if (rc < 0) return rc; /* the endpoint goes with the socket (close) */
    ts->hs = UT_HS_C_HELLO_WAIT;
    ut_timer_start(s, ts);
    return 1;
}

static void ut_client_finish(jet_socket_t *s, urma_ts_t *ts, bool on)
{
    uint8_t ack[JET_URMA_ACK_LEN];
    jet__urma_ack_pack(ack, on);
    int rc = ut_send(s, ack, sizeof ack);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    if (on) {
        if (!jet_iobuf_empty(&ts->hs_buf)) {
            JET_WARN("close %s: bytes on TCP after the URMA hello", s->peer);
            jet__socket_set_failed(s, -EPROTO);
            return;
        }
        jet_loop_timer_stop(s->loop, &ts->timer);
        ts->hs = UT_HS_NONE;
        atomic_store_explicit(&ts->mode, UT_ON, memory_order_release);
        jet__urma_ep_start(ts->ep);
        JET_DEBUG("URMA established with %s", s->peer);
    } else {
        ut_go_off(s, ts);
        if (jet__socket_failed(s)) return;
    }
    jet__socket_connected(s, 0);
}

static void ut_client_step(jet_socket_t *s, urma_ts_t *ts)
{
    uint8_t flat[UT_HELLO_MAX];
    size_t n = ut_flatten(ts, flat), used = 0;
    jet_urma_hello_t h;
    switch (jet__urma_hello_parse(flat, n, &h, &used)) {
    case JET_URMA_HELLO_INCOMPLETE:
        return;
    case JET_URMA_HELLO_NOT_HELLO:
        JET_WARN("close %s: the server answered the URMA hello with bytes that are not a hello "
                 "(%02x %02x %02x %02x)",
                 s->peer, flat[0], n > 1 ? flat[1] : 0, n > 2 ? flat[2] : 0, n > 3 ? flat[3] : 0);
        jet__socket_set_failed(s, -EPROTO);
        return;
    case JET_URMA_HELLO_BAD_FRAME:
        JET_WARN("close %s: the server's URMA hello is malformed (length out of range or "
                 "undecodable)",
                 s->peer);
        jet__socket_set_failed(s, -EPROTO);
        return;
    case JET_URMA_HELLO_DECLINED:
        jet_iobuf_pop_front(&ts->hs_buf, used);
        JET_INFO("%s declined URMA: this connection uses TCP", s->peer);
        ut_client_finish(s, ts, false);
        return;
    case JET_URMA_HELLO_OK:
        jet_iobuf_pop_front(&ts->hs_buf, used);
        if (jet__urma_ep_connect_peer(ts->ep, &h) < 0) {
            JET_INFO("URMA with %s could not be set up: this connection uses TCP", s->peer);
            ut_client_finish(s, ts, false);
            return;
        }
        ut_client_finish(s, ts, true);
        return;
    }
}

/* ---- server ------------------------------------------------------------------- */

static void ut_server_decline(jet_socket_t *s, urma_ts_t *ts, int version)
{
    uint8_t buf[UT_HELLO_MAX];
    int n = jet__urma_hello_pack_decline(version, buf, sizeof buf);
    int rc = n < 0 ? n : ut_send(s, buf, (size_t)n);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    ts->said_yes = false;
    ts->hs = UT_HS_S_ACK_WAIT;
}

static void ut_server_hello(jet_socket_t *s, urma_ts_t *ts, const jet_urma_hello_t *peer)
{
    int rc = jet__urma_ep_create(s, &ts->ep);
    if (rc < 0) {
        ts->ep = NULL;
        JET_INFO("URMA: no resources for the connection from %s (%s): declined, using TCP", s->peer,
                 jet_strerror(rc));
        ut_server_decline(s, ts, peer->version);
        return;
    }
    if (jet__urma_ep_connect_peer(ts->ep, peer) < 0) {
        jet__urma_ep_close(ts->ep);
        ts->ep = NULL;
        ut_server_decline(s, ts, peer->version);
        return;
    }
    jet_urma_hello_t h;
    uint8_t buf[UT_HELLO_MAX];
    jet__urma_ep_hello(ts->ep, peer->version, &h);
    int n = jet__urma_hello_pack(&h, buf, sizeof buf);
    rc = n < 0 ? n : ut_send(s, buf, (size_t)n);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    ts->said_yes = true;
    ts->hs = UT_HS_S_ACK_WAIT;
}

static void ut_server_step(jet_socket_t *s, urma_ts_t *ts)
{
    while (!jet__socket_failed(s)) {
        uint8_t flat[UT_HELLO_MAX];
        size_t n = ut_flatten(ts, flat), used = 0;
        if (n == 0) return;
        if (ts->hs == UT_HS_S_HELLO_WAIT) {
            if (!jet__urma_hello_prefix(flat, n)) {
                ut_go_off(s, ts); /* a TCP client: its bytes go to the parser */
                return;
            }
            ut_timer_start(s, ts);
            jet_urma_hello_t h;
            switch (jet__urma_hello_parse(flat, n, &h, &used)) {
            case JET_URMA_HELLO_INCOMPLETE:
                return;
            case JET_URMA_HELLO_NOT_HELLO:
            case JET_URMA_HELLO_BAD_FRAME:
                JET_WARN("close %s: malformed URMA hello (length out of range or undecodable)",
                         s->peer);
                jet__socket_set_failed(s, -EPROTO);
                return;
            case JET_URMA_HELLO_DECLINED:
                jet_iobuf_pop_front(&ts->hs_buf, used);
                JET_INFO("%s sent a URMA hello with fields out of range: declined, using TCP",
                         s->peer);
                ut_server_decline(s, ts, h.version);
                continue;
            case JET_URMA_HELLO_OK:
                jet_iobuf_pop_front(&ts->hs_buf, used);
                ut_server_hello(s, ts, &h);
                continue;
            }
            return;
        }
        if (ts->hs != UT_HS_S_ACK_WAIT || n < JET_URMA_ACK_LEN) return;
        if (memcmp(flat, "PRPC", 4) == 0) {
            /* brpc's client falls back without an ACK: its first request
             * is already here. */
            JET_INFO("%s fell back to TCP without an ACK", s->peer);
            ut_go_off(s, ts);
            return;
        }
        jet_iobuf_pop_front(&ts->hs_buf, JET_URMA_ACK_LEN);
        if (!(jet__urma_ack_parse(flat) & JET_URMA_ACK_OK)) {
            JET_DEBUG("%s acknowledged TCP", s->peer);
            ut_go_off(s, ts);
            return;
        }
        if (!ts->said_yes) {
            JET_WARN("close %s: the client claims URMA after this server declined it", s->peer);
            jet__socket_set_failed(s, -EPROTO);
            return;
        }
        if (!jet_iobuf_empty(&ts->hs_buf)) {
            JET_WARN("close %s: bytes on TCP after the URMA ACK", s->peer);
            jet__socket_set_failed(s, -EPROTO);
            return;
        }
        jet_loop_timer_stop(s->loop, &ts->timer);
        ts->hs = UT_HS_NONE;
        atomic_store_explicit(&ts->mode, UT_ON, memory_order_release);
        JET_DEBUG("URMA established with %s", s->peer);
        jet__urma_ep_start(ts->ep); /* delivers what came over URMA meanwhile */
        return;
    }
}

/* ---- input -------------------------------------------------------------------- */

/* ON: the TCP connection only tells that the peer is gone. */
static void ut_input_on(jet_socket_t *s, uint32_t events)
{
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
    char b[64];
    for (;;) {
        ssize_t r = recv(s->fd, b, sizeof b, MSG_DONTWAIT);
        if (r > 0) {
            JET_WARN("close %s: unexpected TCP data after URMA was established", s->peer);
            jet__socket_set_failed(s, -EPROTO);
            return;
        }
        if (r == 0) {
            jet__socket_set_failed(s, -JET_EEOF);
            return;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN) jet__socket_set_failed(s, errno == ECONNRESET ? -JET_EEOF : -errno);
        return;
    }
}

static void ut_input_eof(jet_socket_t *s, urma_ts_t *ts, int err)
{
    if (ts->hs == UT_HS_C_HELLO_WAIT && jet_iobuf_empty(&ts->hs_buf)) {
        /* What a brpc TCP-only server does with a URMA hello. */
        JET_INFO("%s closed the connection on the URMA hello (a server without URMA?): the "
                 "channel retries over TCP",
                 s->peer);
        jet__socket_set_failed(s, -JET__EHELLO_REFUSED);
        return;
    }
    jet__socket_set_failed(s, err);
}

static void ut_on_input(jet_socket_t *s, uint32_t events)
{
    urma_ts_t *ts = s->tstate;
    int mode = atomic_load_explicit(&ts->mode, memory_order_relaxed);
    if (mode == UT_ON) {
        ut_input_on(s, events);
        return;
    }
    if (mode == UT_OFF) {
        jet__tcp_transport.on_input(s, events);
        return;
    }
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s->peer_hup = true;
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
    for (;;) {
        ssize_t r = jet_iobuf_read_fd(&ts->hs_buf, s->fd, UT_READ_ROOM);
        if (r > 0) {
            if (ts->hs == UT_HS_C_HELLO_WAIT)
                ut_client_step(s, ts);
            else
                ut_server_step(s, ts);
            if (jet__socket_failed(s)) return;
            mode = atomic_load_explicit(&ts->mode, memory_order_relaxed);
            if (mode == UT_OFF) {
                /* Read the rest as TCP (edge-triggered: to EAGAIN or EOF). */
                jet__tcp_transport.on_input(s, events | EPOLLIN);
                return;
            }
            if (mode == UT_ON) {
                ut_input_on(s, events | EPOLLIN);
                return;
            }
            continue;
        }
        if (r == 0) {
            ut_input_eof(s, ts, -JET_EEOF);
            return;
        }
        if (r == -EAGAIN) return;
        if (r == -EINTR) continue;
        ut_input_eof(s, ts, r == -ECONNRESET ? -JET_EEOF : (int)r);
        return;
    }
}

/* ---- data path ---------------------------------------------------------------- */

static ssize_t ut_cut(jet_socket_t *s, jet_iobuf_t *const *bufs, int n)
{
    urma_ts_t *ts = s->tstate;
    if (atomic_load_explicit(&ts->mode, memory_order_acquire) != UT_ON)
        return jet__tcp_transport.cut_from_iobuf_list(s, bufs, n);
    atomic_store_explicit(&ts->writer_in, true, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    ssize_t r;
    if (atomic_load_explicit(&ts->closed, memory_order_relaxed))
        r = -JET_EFAILEDSOCKET; /* the socket failed; its writer drops the rest */
    else
        r = jet__urma_ep_cut(ts->ep, bufs, n);
    atomic_store_explicit(&ts->writer_in, false, memory_order_release);
    return r;
}

static int ut_wait_writable(jet_socket_t *s, int64_t deadline_us)
{
    urma_ts_t *ts = s->tstate;
    if (atomic_load_explicit(&ts->mode, memory_order_acquire) != UT_ON)
        return jet__tcp_transport.wait_writable(s, deadline_us);
    return ts->ep ? jet__urma_ep_wait_writable(ts->ep) : 0;
}

static int ut_debug(jet_socket_t *s, char *buf, size_t len)
{
    urma_ts_t *ts = s->tstate;
    int mode = atomic_load(&ts->mode);
    int n = snprintf(buf, len, "urma=%s hs=%s ", ut_mode_names[mode], ut_hs_names[ts->hs]);
    if (n < 0 || (size_t)n >= len) return n;
    if (mode == UT_ON && ts->ep && jet_loop_in_thread(s->loop))
        return n + jet__urma_ep_debug(ts->ep, buf + n, len - (size_t)n);
    return n + jet__tcp_transport.debug(s, buf + n, len - (size_t)n);
}

const jet_transport_ops_t jet__urma_transport = {
    .name = "urma",
    .mode = JET_SOCKET_MODE_URMA,
    .global_init = ut_global_init,
    .init = ut_init,
    .release = ut_release,
    .reset = jet__transport_unsupported_reset,
    .connect = ut_connect,
    .cut_from_iobuf_list = ut_cut,
    .wait_writable = ut_wait_writable,
    .on_input = ut_on_input,
    .debug = ut_debug,
    .close = ut_close,
};
