#include "net/hello_transport.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/time.h"
#include "jetrpc/errors.h"
#include "net/socket.h"

#define HL_READ_ROOM 4096

static const char *const hl_mode_names[] = {"unknown", "on", "off"};
static const char *const hl_hs_names[] = {"none", "c_hello_wait", "s_hello_wait", "s_ack_wait",
                                          "pending"};

int jet__hello_check(const jet_hello_ops_t *ops, const jet_transport_check_t *check)
{
    const char *who = check->is_server ? "server" : "channel";
    if (check->use_ssl) {
        JET_ERROR("%s with socket_mode=%s: SSL is not supported over %s", who, ops->key, ops->name);
        return -EPROTONOSUPPORT;
    }
    if (check->protocol && strcmp(check->protocol, "baidu_std") != 0) {
        JET_ERROR("%s with socket_mode=%s: protocol %s is not supported (baidu_std only)", who,
                  ops->key, check->protocol);
        return -EPROTONOSUPPORT;
    }
    return 0;
}

static void hl_timer_cb(jet_timer_t *t)
{
    jet_hello_ts_t *h = (jet_hello_ts_t *)((char *)t - offsetof(jet_hello_ts_t, timer));
    jet_socket_t *s = h->s;
    if (atomic_load(&h->mode) != JET_HELLO_UNKNOWN || jet__socket_failed(s)) return;
    JET_WARN_PEER("%s handshake with %s timed out after %d ms (%s)", h->ops->name, s->peer,
                  (int)h->timer_ms, hl_hs_names[h->hs]);
    jet__socket_set_failed(s, -ETIMEDOUT);
}

void jet__hello_init(jet_hello_ts_t *h, jet_socket_t *s, const jet_hello_ops_t *ops, bool available)
{
    h->ops = ops;
    h->s = s;
    jet_iobuf_init(&h->hs_buf);
    jet_timer_init(&h->timer, hl_timer_cb);
    h->hs = available && s->is_server_side ? JET_HELLO_HS_S_HELLO_WAIT : JET_HELLO_HS_NONE;
    atomic_init(&h->mode, available ? JET_HELLO_UNKNOWN : JET_HELLO_OFF);
    atomic_init(&h->writer_in, false);
    atomic_init(&h->closed, false);
}

void jet__hello_fini(jet_hello_ts_t *h)
{
    jet_iobuf_fini(&h->hs_buf);
}

void jet__hello_close(jet_socket_t *s, jet_hello_ts_t *h)
{
    jet_loop_timer_stop(s->loop, &h->timer);
    atomic_store_explicit(&h->closed, true, memory_order_relaxed);
    /* Pairs with the writer's store-fence-load in jet__hello_cut: either it
     * sees closed, or we see it inside and wait (a post or a ring write takes
     * microseconds). */
    atomic_thread_fence(memory_order_seq_cst);
    /* A provider may also hold a post for long (softub waits for room in a
     * full receive queue): past a short spin the core goes to others. */
    for (unsigned spins = 0; atomic_load_explicit(&h->writer_in, memory_order_acquire); spins++) {
        if (spins < 4096)
            jet__cpu_relax();
        else
            sched_yield();
    }
}

int jet__hello_send(jet_socket_t *s, const void *buf, size_t len)
{
    ssize_t w;
    do {
        w = send(s->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
    if (w == (ssize_t)len) return 0;
    if (w < 0) return errno == EPIPE || errno == ECONNRESET ? -JET_EEOF : -errno;
    return -EIO;
}

void jet__hello_timer_start(jet_socket_t *s, jet_hello_ts_t *h)
{
    int32_t ms = __atomic_load_n(h->ops->timeout_ms, __ATOMIC_RELAXED);
    if (ms > 0 && !jet_timer_armed(&h->timer)) {
        h->timer_ms = ms;
        jet_loop_timer_start(s->loop, &h->timer, jet_now_us() + (int64_t)ms * 1000);
    }
}

size_t jet__hello_flatten(jet_hello_ts_t *h, uint8_t *flat)
{
    size_t n = jet_iobuf_len(&h->hs_buf);
    if (n > h->ops->hello_max) n = h->ops->hello_max;
    return jet_iobuf_copy_to(&h->hs_buf, flat, n, 0);
}

void jet__hello_go_off(jet_socket_t *s, jet_hello_ts_t *h)
{
    jet_loop_timer_stop(s->loop, &h->timer);
    h->ops->drop(s, h);
    h->hs = JET_HELLO_HS_NONE;
    atomic_store_explicit(&h->mode, JET_HELLO_OFF, memory_order_release);
    if (!jet_iobuf_empty(&h->hs_buf)) {
        if (jet_iobuf_move(&s->read_buf, &h->hs_buf) < 0) {
            jet__socket_set_failed(s, -ENOMEM);
            return;
        }
        jet__socket_deliver(s);
    }
}

void jet__hello_set_on(jet_socket_t *s, jet_hello_ts_t *h)
{
    jet_loop_timer_stop(s->loop, &h->timer);
    /* From now on TCP only tells that the peer is gone. */
    jet_loop_io_watch_only(&s->io, true);
    h->hs = JET_HELLO_HS_NONE;
    atomic_store_explicit(&h->mode, JET_HELLO_ON, memory_order_release);
}

void jet__hello_client_finish(jet_socket_t *s, jet_hello_ts_t *h, bool on)
{
    uint8_t ack[JET_HELLO_ACK_LEN];
    h->ops->ack_pack(ack, on);
    int rc = jet__hello_send(s, ack, sizeof ack);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    if (on) {
        if (!jet_iobuf_empty(&h->hs_buf)) {
            JET_WARN_PEER("close %s: bytes on TCP after the %s hello", s->peer, h->ops->name);
            jet__socket_set_failed(s, -EPROTO);
            return;
        }
        rc = h->ops->go_on(s, h);
        if (rc < 0) {
            jet__socket_set_failed(s, rc);
            return;
        }
    } else {
        jet__hello_go_off(s, h);
        if (jet__socket_failed(s)) return;
    }
    jet__socket_connected(s, 0);
}

/* The client's 4-byte ACK after our hello. */
static void hl_server_ack(jet_socket_t *s, jet_hello_ts_t *h)
{
    const jet_hello_ops_t *ops = h->ops;
    uint8_t ack[JET_HELLO_ACK_LEN];
    jet_iobuf_copy_to(&h->hs_buf, ack, sizeof ack, 0);
    if (memcmp(ack, "PRPC", 4) == 0) {
        /* brpc's client falls back without an ACK: its first request is
         * already here. */
        JET_INFO_PEER("%s fell back to TCP without a %s ACK", s->peer, ops->name);
        jet__hello_go_off(s, h);
        return;
    }
    jet_iobuf_pop_front(&h->hs_buf, sizeof ack);
    if (!ops->ack_on(ack)) {
        JET_DEBUG("%s acknowledged TCP", s->peer);
        jet__hello_go_off(s, h);
        return;
    }
    if (!h->said_yes) {
        JET_WARN_PEER("close %s: the client claims %s after this server declined it", s->peer,
                      ops->name);
        jet__socket_set_failed(s, -EPROTO);
        return;
    }
    if (!jet_iobuf_empty(&h->hs_buf)) {
        JET_WARN_PEER("close %s: bytes on TCP after the %s ACK", s->peer, ops->name);
        jet__socket_set_failed(s, -EPROTO);
        return;
    }
    int rc = ops->go_on(s, h);
    if (rc < 0) jet__socket_set_failed(s, rc);
}

static void hl_server_step(jet_socket_t *s, jet_hello_ts_t *h)
{
    while (!jet__socket_failed(s)) {
        size_t n = jet_iobuf_len(&h->hs_buf);
        if (n == 0) return;
        if (h->hs == JET_HELLO_HS_S_HELLO_WAIT) {
            int r = h->ops->server_hello(s, h);
            if (r == JET_HELLO_STEP_NOT_HELLO) {
                jet__hello_go_off(s, h); /* a TCP client: its bytes go to the parser */
                return;
            }
            if (r != JET_HELLO_STEP_DONE) return;
            continue;
        }
        if (h->hs != JET_HELLO_HS_S_ACK_WAIT || n < JET_HELLO_ACK_LEN) return;
        hl_server_ack(s, h);
        return;
    }
}

void jet__hello_server_answered(jet_socket_t *s, jet_hello_ts_t *h)
{
    if (jet__socket_failed(s)) return;
    hl_server_step(s, h);
}

/* ON: the TCP connection only tells that the peer is gone. */
static void hl_input_on(jet_socket_t *s, jet_hello_ts_t *h, uint32_t events)
{
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
    char b[64];
    for (;;) {
        ssize_t r = recv(s->fd, b, sizeof b, MSG_DONTWAIT);
        if (r > 0) {
            JET_WARN_PEER("close %s: unexpected TCP data after %s was established", s->peer,
                          h->ops->name);
            jet__socket_set_failed(s, -EPROTO);
            return;
        }
        if (r == 0) {
            if (h->ops->drain) h->ops->drain(s, h);
            jet__socket_set_failed(s, -JET_EEOF);
            return;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN) jet__socket_set_failed(s, errno == ECONNRESET ? -JET_EEOF : -errno);
        return;
    }
}

/* The connection ended (err) while the handshake ran; closed: an orderly
 * close (EOF), not a reset or another error. */
static void hl_input_eof(jet_socket_t *s, jet_hello_ts_t *h, int err, bool closed)
{
    if (closed && h->hs == JET_HELLO_HS_C_HELLO_WAIT && jet_iobuf_empty(&h->hs_buf)) {
        /* What a brpc TCP-only server does with a transport hello: it reads
         * it and closes. A reset is not that (a server that crashed or
         * restarted): the attempt fails as over TCP, and the next connection
         * offers the transport again. What the hello set up goes with the
         * socket (close). */
        JET_INFO_PEER("%s closed the connection on the %s hello (a server without %s?): the "
                      "channel retries over TCP",
                      s->peer, h->ops->name, h->ops->name);
        jet__socket_set_failed(s, -JET__EHELLO_REFUSED);
        return;
    }
    jet__socket_set_failed(s, err);
}

void jet__hello_on_input(jet_socket_t *s, uint32_t events)
{
    jet_hello_ts_t *h = s->tstate;
    int mode = atomic_load_explicit(&h->mode, memory_order_relaxed);
    if (mode == JET_HELLO_ON) {
        hl_input_on(s, h, events);
        return;
    }
    if (mode == JET_HELLO_OFF) {
        jet__tcp_transport.on_input(s, events);
        return;
    }
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s->peer_hup = true;
    if (!(events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
    for (;;) {
        ssize_t r = jet_iobuf_read_fd(&h->hs_buf, s->fd, HL_READ_ROOM);
        if (r > 0) {
            if (h->hs == JET_HELLO_HS_C_HELLO_WAIT)
                h->ops->client_step(s, h);
            else
                hl_server_step(s, h);
            if (jet__socket_failed(s)) return;
            mode = atomic_load_explicit(&h->mode, memory_order_relaxed);
            if (mode == JET_HELLO_OFF) {
                /* Read the rest as TCP (edge-triggered: to EAGAIN or EOF). */
                jet__tcp_transport.on_input(s, events | EPOLLIN);
                return;
            }
            if (mode == JET_HELLO_ON) {
                hl_input_on(s, h, events | EPOLLIN);
                return;
            }
            if (jet_iobuf_len(&h->hs_buf) > h->ops->hello_max) {
                JET_WARN_PEER("close %s: more than %zu bytes without a complete %s handshake",
                              s->peer, h->ops->hello_max, h->ops->name);
                jet__socket_set_failed(s, -EPROTO);
                return;
            }
            continue;
        }
        if (r == 0) {
            hl_input_eof(s, h, -JET_EEOF, true);
            return;
        }
        if (r == -EAGAIN) return;
        if (r == -EINTR) continue;
        hl_input_eof(s, h, r == -ECONNRESET ? -JET_EEOF : (int)r, false);
        return;
    }
}

ssize_t jet__hello_cut(jet_socket_t *s, jet_iobuf_t *const *bufs, int n)
{
    jet_hello_ts_t *h = s->tstate;
    if (atomic_load_explicit(&h->mode, memory_order_acquire) != JET_HELLO_ON)
        return jet__tcp_transport.cut_from_iobuf_list(s, bufs, n);
    atomic_store_explicit(&h->writer_in, true, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    ssize_t r;
    if (atomic_load_explicit(&h->closed, memory_order_relaxed))
        r = -JET_EFAILEDSOCKET; /* the socket failed; its writer drops the rest */
    else
        r = h->ops->cut(s, h, bufs, n);
    atomic_store_explicit(&h->writer_in, false, memory_order_release);
    return r;
}

int jet__hello_wait_writable(jet_socket_t *s, int64_t deadline_us)
{
    jet_hello_ts_t *h = s->tstate;
    if (atomic_load_explicit(&h->mode, memory_order_acquire) != JET_HELLO_ON)
        return jet__tcp_transport.wait_writable(s, deadline_us);
    return h->ops->wait_writable(s, h);
}

int jet__hello_debug(jet_hello_ts_t *h, char *buf, size_t len)
{
    return snprintf(buf, len, "%s=%s hs=%s ", h->ops->key, hl_mode_names[atomic_load(&h->mode)],
                    hl_hs_names[h->hs]);
}
