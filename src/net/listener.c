#include "net/listener.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/time.h"

struct jet_listener {
    int fd;
    jet_addr_t addr;
    char name[80];
    jet_loop_t *loop;
    jet_io_t io;
    jet_accept_cb_t cb;
    void *arg;
    jet_task_t stop_task;
    /* Out of descriptors or memory: accepting is tried again when it fires
     * (edge-triggered, the connections waiting in the backlog would
     * otherwise wait for the next one to arrive). */
    jet_timer_t retry_timer;
    bool short_of_fds; /* the last accept failed for want of descriptors or memory */
    _Atomic uint32_t stopped;
};

/* How long accepting pauses after the process ran out of descriptors or
 * memory for a connection. */
#define LISTENER_RETRY_US 20000

static void listener_accept(jet_listener_t *l)
{
    /* Bounded per event so one busy listener cannot starve its loop. */
    for (int i = 0; i < 256; i++) {
        jet_addr_t peer;
        peer.len = sizeof peer.u;
        int fd = accept4(l->fd, &peer.u.sa, &peer.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* A pending connection that failed (accept(2) asks that TCP's
             * network errors be retried like EAGAIN): the next one is
             * taken, else the edge-triggered listener would leave the
             * backlog waiting for a new arrival. */
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO ||
                errno == ENETDOWN || errno == ENOPROTOOPT || errno == EHOSTDOWN ||
                errno == ENONET || errno == EHOSTUNREACH || errno == EOPNOTSUPP ||
                errno == ENETUNREACH || errno == EPERM)
                continue;
            if (errno == EAGAIN) return;
            int err = errno;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
                /* Logged once per shortage, not at every retry. */
                if (!l->short_of_fds)
                    JET_WARN("accept on %s: %s; accepting again every %d ms until it succeeds",
                             l->name, strerror(err), LISTENER_RETRY_US / 1000);
                l->short_of_fds = true;
                if (!jet_timer_armed(&l->retry_timer))
                    jet_loop_timer_start(l->loop, &l->retry_timer, jet_now_us() + LISTENER_RETRY_US);
                return;
            }
            JET_WARN("accept on %s: %s", l->name, strerror(err));
            return;
        }
        if (l->short_of_fds) {
            JET_INFO("accept on %s: accepting again", l->name);
            l->short_of_fds = false;
        }
        if (l->addr.u.sa.sa_family == AF_UNIX) peer = l->addr;
        l->cb(l, fd, &peer, l->arg);
    }
    /* More may be pending: re-arm by modifying (edge-triggered epoll re-reports). */
    jet_loop_io_mod(&l->io, EPOLLIN);
}

static void listener_io_cb(jet_io_t *io, uint32_t events)
{
    (void)events;
    jet_listener_t *l = io->arg;
    if (!jet_timer_armed(&l->retry_timer)) listener_accept(l);
}

static void listener_retry_cb(jet_timer_t *t)
{
    listener_accept((jet_listener_t *)((char *)t - offsetof(jet_listener_t, retry_timer)));
}

/* A unix path is replaced only when it is a socket nobody listens on (its
 * server went without removing it): any other file is someone's data, and
 * a live server keeps its address, as it keeps a TCP port. */
static int listener_clear_unix_path(const jet_addr_t *addr)
{
    const char *path = addr->u.un.sun_path;
    struct stat st;
    if (lstat(path, &st) < 0) return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) return -EADDRINUSE;
    /* Non-blocking: a live server with a full backlog answers EAGAIN. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    int rc = connect(fd, &addr->u.sa, addr->len) == 0 || errno != ECONNREFUSED ? -EADDRINUSE : 0;
    close(fd);
    if (rc == 0 && unlink(path) < 0 && errno != ENOENT) rc = -errno;
    return rc;
}

int jet__listener_create(const jet_addr_t *addr, jet_accept_cb_t cb, void *arg,
                         jet_listener_t **l_p)
{
    jet_listener_t *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    int rc;
    l->addr = *addr;
    l->cb = cb;
    l->arg = arg;
    jet__addr_format(addr, l->name, sizeof l->name);
    l->fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        rc = -errno;
        goto err_free;
    }
    if (addr->u.sa.sa_family == AF_UNIX) {
        rc = listener_clear_unix_path(addr);
        if (rc < 0) goto err_close;
    } else {
        int one = 1;
        setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    }
    if (bind(l->fd, &addr->u.sa, addr->len) < 0 || listen(l->fd, 1024) < 0) {
        rc = -errno;
        goto err_close;
    }
    l->addr.len = sizeof l->addr.u;
    getsockname(l->fd, &l->addr.u.sa, &l->addr.len);
    if (addr->u.sa.sa_family == AF_UNIX) l->addr = *addr;
    jet__addr_format(&l->addr, l->name, sizeof l->name);
    /* Loop 0 (jet_loop_pick starts the group): polled transports keep their
     * connections on the last loops, whose pace a listener would set. */
    l->loop = jet_loop_pick() ? jet_loop_at(0) : NULL;
    if (!l->loop) {
        rc = -ENOMEM;
        goto err_close;
    }
    l->io.fd = l->fd;
    l->io.events = EPOLLIN;
    l->io.cb = listener_io_cb;
    l->io.arg = l;
    jet_timer_init(&l->retry_timer, listener_retry_cb);
    rc = jet_loop_io_add(l->loop, &l->io);
    if (rc < 0) goto err_close;
    *l_p = l;
    return 0;
err_close:
    close(l->fd);
err_free:
    free(l);
    return rc;
}

int jet__listener_port(const jet_listener_t *l)
{
    if (l->addr.u.sa.sa_family == AF_INET) return ntohs(l->addr.u.in4.sin_port);
    if (l->addr.u.sa.sa_family == AF_INET6) return ntohs(l->addr.u.in6.sin6_port);
    return 0;
}

static void listener_stop_task(jet_task_t *t)
{
    jet_listener_t *l = (jet_listener_t *)((char *)t - offsetof(jet_listener_t, stop_task));
    jet_loop_io_del(&l->io);
    if (jet_timer_armed(&l->retry_timer)) jet_loop_timer_stop(l->loop, &l->retry_timer);
    atomic_store(&l->stopped, 1);
    jet__futex_wake(&l->stopped, 1);
}

void jet__listener_destroy(jet_listener_t *l)
{
    if (!l) return;
    l->stop_task.fn = listener_stop_task;
    jet_loop_post(l->loop, &l->stop_task);
    while (!atomic_load(&l->stopped)) jet__futex_wait(&l->stopped, 0, -1);
    close(l->fd);
    if (l->addr.u.sa.sa_family == AF_UNIX) unlink(l->addr.u.un.sun_path);
    free(l);
}
