/* The TCP transport: readv into pool blocks, writev straight from the
 * write requests' blocks. Also the base that URMA and UBRing compose for
 * their handshakes and their fallback. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/log.h"
#include "iobuf/block_pool.h"
#include "jetrpc/errors.h"
#include "jetrpc/flags.h"
#include "net/socket.h"

JET_FLAG_DEFINE_INT32_RANGE(tcp_read_budget, 16, 1, INT32_MAX,
                            "Reads per connection per event before other connections get a turn "
                            "(at least 1)");

/* The first read of an event offers little room (small messages are the
 * common case, and every offered block is taken from the pool); each read
 * that fills its room doubles it, up to TCP_READ_MAX. */
#define TCP_READ_FIRST (16 * 1024)
#define TCP_READ_MAX   (128 * 1024) /* at most what one jet_iobuf_read_fd offers */
#define TCP_IOV_MAX    256

static int tcp_global_init(const jet_transport_check_t *check)
{
    /* jetrpc has no TLS: a channel or server that asks for it must not run
     * in clear text instead. */
    if (check->use_ssl) {
        JET_ERROR("%s with socket_mode=tcp: SSL is not supported",
                  check->is_server ? "server" : "channel");
        return -EPROTONOSUPPORT;
    }
    return 0;
}

static int tcp_init(jet_socket_t *s)
{
    return 0;
}

static void tcp_release(jet_socket_t *s)
{
}

static int tcp_reset(jet_socket_t *s)
{
    return 0;
}

static int tcp_connect(jet_socket_t *s)
{
    return 0;
}

static ssize_t tcp_cut_from_iobuf_list(jet_socket_t *s, jet_iobuf_t *const *bufs, int n)
{
    struct iovec iov[TCP_IOV_MAX];
    int niov = 0;
    for (int i = 0; i < n && niov < TCP_IOV_MAX; i++) {
        uint32_t nref = jet_iobuf_nref(bufs[i]);
        for (uint32_t j = 0; j < nref && niov < TCP_IOV_MAX; j++) {
            size_t len;
            const void *p = jet_iobuf_ref_data(bufs[i], j, &len);
            iov[niov].iov_base = (void *)p;
            iov[niov].iov_len = len;
            niov++;
        }
    }
    if (niov == 0) return 0;
    /* sendmsg, not writev: MSG_NOSIGNAL turns a write to a closed peer into
     * EPIPE instead of a SIGPIPE that would kill the process. */
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
    ssize_t w = sendmsg(s->fd, &mh, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno == EAGAIN || errno == EINTR) return -EAGAIN;
        return errno == EPIPE || errno == ECONNRESET ? -JET_EEOF : -errno;
    }
    size_t left = (size_t)w;
    for (int i = 0; i < n && left > 0; i++) left -= jet_iobuf_pop_front(bufs[i], left);
    return w;
}

static int tcp_wait_writable(jet_socket_t *s, int64_t deadline_us)
{
    /* The fd is registered edge-triggered for EPOLLOUT from the start: the next
     * edge reaches on_input, which reports it. */
    return 0;
}

/* Reads and delivers until the kernel has nothing or the budget is spent. */
void jet__tcp_read(jet_socket_t *s);
void jet__tcp_read(jet_socket_t *s)
{
    size_t room = TCP_READ_FIRST;
    /* Below 1 no read would ever be made: the connection would stall and its
     * loop repost this read for ever. */
    int32_t budget = JET_FLAG_IN_RANGE(tcp_read_budget);
    for (int32_t i = 0; i < budget; i++) {
        /* Paused: the bytes wait in the kernel, and the peer with them; the
         * resume reads again (the fd gives no new edge for them). */
        if (jet__socket_read_paused(s)) return;
        size_t offered;
        ssize_t r = jet__iobuf_read_fd(&s->read_buf, s->fd, room, &offered);
        if (r > 0) {
            jet__socket_read_got_memory(s);
            jet__socket_deliver(s);
            if (jet__socket_failed(s)) return;
            /* A read shorter than what it offered drained the kernel: the
             * next edge wakes us, except for a FIN that came with the data
             * (no edge follows it). One that filled the few blocks a short
             * pool gave did not: reading goes on. */
            if ((size_t)r < offered && !s->peer_hup) return;
            if (room < TCP_READ_MAX) room *= 2;
            continue;
        }
        if (r == 0) {
            jet__socket_set_failed(s, -JET_EEOF);
            return;
        }
        if (r == -EAGAIN) return;
        if (r == -EINTR) continue;
        /* Nothing was taken from the kernel: the bytes wait there (and the
         * peer with them) while the owner frees memory. */
        if (r == -ENOMEM && jet__socket_read_nomem(s)) return;
        jet__socket_set_failed(s, r == -ECONNRESET ? -JET_EEOF : (int)r);
        return;
    }
    jet__socket_post_read(s);
}

static void tcp_on_input(jet_socket_t *s, uint32_t events)
{
    if (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s->peer_hup = true;
    if (events & EPOLLOUT) jet__socket_writable(s);
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) jet__tcp_read(s);
}

static int tcp_debug(jet_socket_t *s, char *buf, size_t len)
{
    return snprintf(buf, len, "read_buf=%zu", jet_iobuf_len(&s->read_buf));
}

const jet_transport_ops_t jet__tcp_transport = {
    .name = "tcp",
    .mode = JET_SOCKET_MODE_TCP,
    .global_init = tcp_global_init,
    .init = tcp_init,
    .release = tcp_release,
    .reset = tcp_reset,
    .connect = tcp_connect,
    .cut_from_iobuf_list = tcp_cut_from_iobuf_list,
    .wait_writable = tcp_wait_writable,
    .on_input = tcp_on_input,
    .debug = tcp_debug,
};
