#include "testutil_net.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "event/loop.h"
#include "jetrpc/errors.h"

/* ---- plain loopback sockets ----------------------------------------------- */

static struct sockaddr_in tn_loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    return a;
}

int jt_tcp_listen(int backlog, int *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct sockaddr_in a = tn_loopback(0);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, backlog) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    *port_p = ntohs(a.sin_port);
    return fd;
}

int jt_tcp_listen_addr(int backlog, jet_addr_t *addr)
{
    int port = 0;
    int fd = jt_tcp_listen(backlog, &port);
    if (fd < 0) return fd;
    if (jet__addr_parse("127.0.0.1:0", addr) != 0) abort();
    addr->u.in4.sin_port = htons((uint16_t)port);
    return fd;
}

int jt_tcp_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = tn_loopback(0);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        abort();
    close(fd);
    return ntohs(a.sin_port);
}

int jt_tcp_accept(int lfd, int timeout_ms)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, timeout_ms) != 1) return -1;
    return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

int jt_tcp_connect(int port, int rcv_timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct sockaddr_in a = tn_loopback(port);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    if (rcv_timeout_s > 0) {
        struct timeval tv = {.tv_sec = rcv_timeout_s};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

int jt_tcp_connect_result(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct sockaddr_in a = tn_loopback(port);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

bool jt_send_all(int fd, const void *data, size_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

int jt_recv_exact(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE))) return 0;
        if (r < 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 1;
}

size_t jt_read_full(int fd, void *buf, size_t len, int timeout_ms)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) != 1) break;
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

/* ---- buffered non-blocking connection ------------------------------------- */

int jt_conn_open(jt_conn_t *c, int port)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0) return -errno;
    struct sockaddr_in a = tn_loopback(port);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int err = -errno;
        close(c->fd);
        c->fd = -1;
        return err;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
    return 0;
}

void jt_conn_init(jt_conn_t *c, int fd)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void jt_conn_close(jt_conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    free(c->buf);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

int jt_conn_pump(jt_conn_t *c, int timeout_ms)
{
    if (c->closed) return -1;
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    int n = poll(&p, 1, timeout_ms);
    if (n <= 0) return 1;
    for (;;) {
        if (c->cap - c->len < 65536) {
            if (c->off) {
                memmove(c->buf, c->buf + c->off, c->len - c->off);
                c->len -= c->off;
                c->off = 0;
            }
            if (c->cap - c->len < 65536) {
                size_t ncap = c->cap ? c->cap * 2 : 262144;
                uint8_t *nb = realloc(c->buf, ncap);
                if (!nb) abort();
                c->buf = nb;
                c->cap = ncap;
            }
        }
        ssize_t r = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (r > 0) {
            c->len += (size_t)r;
            continue;
        }
        if (r == 0) {
            c->closed = 1;
            return -1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return 1;
        c->closed = -errno;
        return -1;
    }
}

int jt_conn_write(jt_conn_t *c, const void *p, size_t n)
{
    const uint8_t *b = p;
    int64_t deadline = jt_now_ms() + JT_CONN_IO_TIMEOUT_MS;
    while (n) {
        struct pollfd pf = {.fd = c->fd, .events = POLLOUT | (c->closed ? 0 : POLLIN)};
        int rc = poll(&pf, 1, jt_left_ms(deadline));
        if (rc == 0) return -ETIMEDOUT;
        if (rc < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (pf.revents & POLLIN) jt_conn_pump(c, 0);
        if (pf.revents & (POLLOUT | POLLERR | POLLHUP)) {
            ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0) {
                if (errno == EAGAIN || errno == EINTR) continue;
                return -errno;
            }
            b += w;
            n -= (size_t)w;
        }
    }
    return 0;
}

bool jt_conn_read_exact(jt_conn_t *c, void *out, size_t n, int timeout_ms)
{
    int64_t deadline = jt_now_ms() + timeout_ms;
    while (jt_conn_avail(c) < n) {
        if (jt_left_ms(deadline) == 0) return false;
        if (jt_conn_pump(c, jt_left_ms(deadline)) < 0 && jt_conn_avail(c) < n) return false;
    }
    memcpy(out, c->buf + c->off, n);
    c->off += n;
    return true;
}

bool jt_conn_wait_closed(jt_conn_t *c, int timeout_ms)
{
    int64_t deadline = jt_now_ms() + timeout_ms;
    while (!c->closed && jt_left_ms(deadline) > 0)
        jt_conn_pump(c, jt_left_ms(deadline));
    return c->closed != 0;
}

/* ---- jet socket endpoints ------------------------------------------------- */

_Atomic int jt_ep_created, jt_ep_released;

jt_ep_t *jt_ep_new(int kind, const jt_ep_hooks_t *hooks)
{
    jt_ep_t *ep = calloc(1, sizeof *ep);
    if (!ep) abort();
    ep->kind = kind;
    ep->hooks = hooks;
    pthread_mutex_init(&ep->lock, NULL);
    jet_iobuf_init(&ep->got);
    atomic_init(&ep->first_bad, -1);
    if (hooks && hooks->on_new) hooks->on_new(ep);
    return ep;
}

void jt_ep_free(jt_ep_t *ep)
{
    if (ep->hooks && ep->hooks->on_free) ep->hooks->on_free(ep);
    jet_iobuf_fini(&ep->got);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

static void ep_on_read(jet_socket_t *s)
{
    jt_ep_t *ep = s->owner;
    if (!jet_loop_in_thread(s->loop)) atomic_fetch_add(&ep->off_loop, 1);
    atomic_fetch_add(&ep->reads, 1);
    size_t n = jet_iobuf_len(&s->read_buf);
    switch (ep->kind) {
    case JT_EP_COLLECT:
        pthread_mutex_lock(&ep->lock);
        if (jet_iobuf_move(&ep->got, &s->read_buf) != 0) abort();
        pthread_mutex_unlock(&ep->lock);
        atomic_fetch_add(&ep->nbytes, (int64_t)n);
        break;
    case JT_EP_ECHO: {
        jet_iobuf_t out;
        jet_iobuf_init(&out);
        if (jet_iobuf_move(&out, &s->read_buf) != 0) abort();
        /* Counted before the echo goes out: once the peer has it all, so has nbytes. */
        atomic_fetch_add(&ep->nbytes, (int64_t)n);
        if (jet__socket_write(s, &out) != 0) atomic_fetch_add(&ep->write_err, 1);
        jet_iobuf_fini(&out);
        break;
    }
    case JT_EP_COUNT: {
        uint8_t tmp[16384];
        while (!jet_iobuf_empty(&s->read_buf)) {
            size_t k = jet_iobuf_cut_to(&s->read_buf, tmp, sizeof tmp);
            int64_t off = atomic_load(&ep->nbytes);
            int64_t bad = jt_stream_check(tmp, (uint64_t)off, k);
            if (bad >= 0 && atomic_load(&ep->first_bad) < 0) atomic_store(&ep->first_bad, bad);
            atomic_fetch_add(&ep->nbytes, (int64_t)k);
        }
        break;
    }
    default:
        ep->hooks->on_read(ep, s);
        break;
    }
}

static void ep_on_failed(jet_socket_t *s, int err)
{
    jt_ep_t *ep = s->owner;
    if (!jet_loop_in_thread(s->loop)) atomic_fetch_add(&ep->off_loop, 1);
    atomic_store(&ep->err, err);
    atomic_fetch_add(&ep->failed, 1);
}

static void ep_on_ready(jet_socket_t *s)
{
    jt_ep_t *ep = s->owner;
    if (!jet_loop_in_thread(s->loop)) atomic_fetch_add(&ep->off_loop, 1);
    if (atomic_load(&s->state) != JET_SOCK_READY) atomic_fetch_add(&ep->off_loop, 1000);
    if (ep->hooks && ep->hooks->on_ready) ep->hooks->on_ready(ep, s);
    atomic_fetch_add(&ep->ready, 1);
}

static void ep_on_release(jet_socket_t *s)
{
    jt_ep_t *ep = s->owner;
    atomic_fetch_add(&jt_ep_released, 1);
    atomic_fetch_add(&ep->released, 1);
}

const jet_socket_handler_t jt_ep_handler = {
    .on_read = ep_on_read,
    .on_failed = ep_on_failed,
    .on_ready = ep_on_ready,
    .on_release = ep_on_release,
};

jt_ep_t *jt_ep_connect(const jet_addr_t *addr, int mode, int kind, int32_t timeout_ms,
                       const jt_ep_hooks_t *hooks, int *rc_p)
{
    jt_ep_t *ep = jt_ep_new(kind, hooks);
    int rc = jet__socket_connect(addr, mode, &jt_ep_handler, ep, timeout_ms, &ep->s);
    if (rc_p) *rc_p = rc;
    if (rc != 0) {
        fprintf(stderr, "  connect: %d\n", rc);
        jt_ep_free(ep);
        return NULL;
    }
    atomic_fetch_add(&jt_ep_created, 1);
    return ep;
}

bool jt_ep_close(jt_ep_t *ep)
{
    if (!ep) return true;
    if (ep->s) {
        jet__socket_set_failed(ep->s, -JET_ECLOSE);
        jet__socket_unref(ep->s);
    }
    bool ok = JT_WAIT_UNTIL(atomic_load(&ep->released) >= 1, JT_EP_GUARD_US);
    jt_sleep_us(1000);
    ok = ok && atomic_load(&ep->released) == 1;
    if (!ok) {
        fprintf(stderr, "  socket not released (released=%d); leaking its endpoint\n",
                atomic_load(&ep->released));
        return false;
    }
    jt_ep_free(ep);
    return true;
}

size_t jt_ep_got_copy(jt_ep_t *ep, void *dst, size_t max)
{
    pthread_mutex_lock(&ep->lock);
    size_t n = jet_iobuf_copy_to(&ep->got, dst, max, 0);
    pthread_mutex_unlock(&ep->lock);
    return n;
}

int jt_socket_write_bytes(jet_socket_t *s, const void *p, size_t len, bool require_moved)
{
    jet_iobuf_t b;
    jet_iobuf_init(&b);
    if (jet_iobuf_append(&b, p, len) != 0) abort();
    int rc = jet__socket_write(s, &b);
    if (require_moved && !jet_iobuf_empty(&b)) rc = -12345;
    jet_iobuf_fini(&b);
    return rc;
}

static void srv_on_accept(jet_listener_t *l, int fd, const jet_addr_t *peer, void *arg)
{
    jt_srv_t *srv = arg;
    if (atomic_load(&srv->n) >= JT_SRV_MAX_CONNS) {
        close(fd);
        return;
    }
    if (srv->rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &srv->rcvbuf, sizeof srv->rcvbuf);
    jt_ep_t *ep = jt_ep_new(srv->kind, srv->hooks);
    ep->srv = srv;
    /* The endpoint is the owner, so on_read finds it even before
     * jet__socket_accept returns. */
    jet_socket_t *s;
    int rc = jet__socket_accept(fd, peer, srv->mode, jet_loop_pick(), &jt_ep_handler, ep, &s);
    if (rc != 0) {
        fprintf(stderr, "  jet__socket_accept: %d\n", rc);
        close(fd);
        jt_ep_free(ep);
        return;
    }
    atomic_fetch_add(&jt_ep_created, 1);
    pthread_mutex_lock(&srv->lock);
    ep->s = s;
    srv->eps[atomic_load(&srv->n)] = ep;
    atomic_fetch_add(&srv->n, 1);
    pthread_mutex_unlock(&srv->lock);
}

jt_srv_t *jt_srv_start(const char *text, int mode, int kind, int rcvbuf, const jt_ep_hooks_t *hooks)
{
    jt_srv_t *srv = calloc(1, sizeof *srv);
    if (!srv) abort();
    srv->mode = mode;
    srv->kind = kind;
    srv->rcvbuf = rcvbuf;
    srv->hooks = hooks;
    pthread_mutex_init(&srv->lock, NULL);
    jet_addr_t a;
    if (jet__addr_parse(text, &a) != 0) abort();
    int rc = jet__listener_create(&a, srv_on_accept, srv, &srv->l);
    if (rc != 0) {
        fprintf(stderr, "  listener on %s: %d\n", text, rc);
        pthread_mutex_destroy(&srv->lock);
        free(srv);
        return NULL;
    }
    srv->addr = a;
    if (a.u.sa.sa_family == AF_INET)
        srv->addr.u.in4.sin_port = htons((uint16_t)jet__listener_port(srv->l));
    return srv;
}

jt_ep_t *jt_srv_conn(jt_srv_t *srv, int i)
{
    if (!JT_WAIT_UNTIL(atomic_load(&srv->n) > i, JT_EP_GUARD_US)) return NULL;
    pthread_mutex_lock(&srv->lock);
    jt_ep_t *ep = srv->eps[i];
    pthread_mutex_unlock(&srv->lock);
    return ep;
}

bool jt_srv_stop(jt_srv_t *srv)
{
    if (!srv) return true;
    jet__listener_destroy(srv->l);
    bool ok = true;
    for (int i = 0; i < atomic_load(&srv->n); i++)
        ok = jt_ep_close(srv->eps[i]) && ok;
    pthread_mutex_destroy(&srv->lock);
    free(srv);
    return ok;
}
