#include "net/socket.h"

#include <errno.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "base/futex.h"
#include "base/log.h"
#include "base/pool.h"
#include "base/time.h"
#include "jetrpc/errors.h"
#include "jetrpc/flags.h"

JET_FLAG_DEFINE_INT64(socket_max_unwritten_bytes, 64 * 1024 * 1024,
                      "Requests written to a connection fail with EOVERCROWDED while more "
                      "bytes than this wait to be sent. A server's answers are always queued, "
                      "as brpc's, but past this it stops reading the connection's requests "
                      "until half of it is left. 0 or less: no limit");

/* A request whose successor is being linked by its producer. */
#define SOCK_UNCONNECTED ((jet_write_req_t *)-1L)
#define SOCK_WRITE_BATCH 64

static jet_pool_t sock_req_pool = JET_POOL_INIT("write_req", sizeof(jet_write_req_t));

static void sock_io_cb(jet_io_t *io, uint32_t events);
static void sock_free(jet_socket_t *s);
static void sock_fail_task(jet_task_t *t);
static void sock_write_task(jet_task_t *t);
static void sock_writable_task(jet_task_t *t);
static void sock_read_task(jet_task_t *t);
static void sock_resume_task(jet_task_t *t);
static void sock_connect_timer(jet_timer_t *t);
static void sock_nomem_timer(jet_timer_t *t);
static void sock_writer_run(jet_socket_t *s, bool on_loop);

/* Takes src's references without allocating; src is left empty. */
static void sock_iobuf_take(jet_iobuf_t *dst, jet_iobuf_t *src)
{
    *dst = *src;
    if (src->refs == src->inline_refs) dst->refs = dst->inline_refs;
    jet_iobuf_init(src);
}

static jet_socket_t *sock_new(int fd, int mode, const jet_socket_handler_t *handler, void *owner)
{
    jet_socket_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    atomic_init(&s->refcnt, 1);
    s->fd = fd;
    s->mode = mode;
    s->handler = handler;
    s->owner = owner;
    s->ops = jet__transport_get(mode);
    jet_iobuf_init(&s->read_buf);
    s->read_task.fn = sock_read_task;
    s->resume_task.fn = sock_resume_task;
    s->write_task.fn = sock_write_task;
    s->fail_task.fn = sock_fail_task;
    jet_timer_init(&s->connect_timer, sock_connect_timer);
    jet_timer_init(&s->nomem_timer, sock_nomem_timer);
    s->io.fd = fd;
    s->io.cb = sock_io_cb;
    s->io.arg = s;
    s->io.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP;
    atomic_init(&s->last_active_us, jet_now_us());
    return s;
}

/* Frees a socket that never reached its caller: the caller keeps its owner. */
static void sock_discard(jet_socket_t *s)
{
    s->handler = NULL;
    sock_free(s);
}

static void sock_free(jet_socket_t *s)
{
    if (s->handler && s->handler->on_release) s->handler->on_release(s);
    if (s->ops) s->ops->release(s);
    if (s->fd >= 0) close(s->fd);
    jet_iobuf_fini(&s->read_buf);
    free(s);
}

void jet__socket_unref(jet_socket_t *s)
{
    if (atomic_fetch_sub_explicit(&s->refcnt, 1, memory_order_acq_rel) == 1) sock_free(s);
}

static void sock_set_nodelay(int fd, int family)
{
    if (family != AF_INET && family != AF_INET6) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void sock_arm_connect_timer(jet_task_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, ctl_task));
    int st = atomic_load(&s->state);
    if ((st == JET_SOCK_CONNECTING || st == JET_SOCK_HANDSHAKE) && s->connect_deadline_us > 0)
        jet_loop_timer_start(s->loop, &s->connect_timer, s->connect_deadline_us);
    jet__socket_unref(s);
}

int jet__socket_connect(const jet_addr_t *addr, int mode, const jet_socket_handler_t *handler,
                        void *owner, int32_t connect_timeout_ms, jet_socket_t **s_p)
{
    const jet_transport_ops_t *ops = jet__transport_get(mode);
    if (!ops) return -EPROTONOSUPPORT;
    int fd = socket(addr->u.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    sock_set_nodelay(fd, addr->u.sa.sa_family);
    jet_socket_t *s = sock_new(fd, mode, handler, owner);
    if (!s) {
        close(fd);
        return -ENOMEM;
    }
    s->addr = *addr;
    jet__addr_format(addr, s->peer, sizeof s->peer);
    atomic_init(&s->state, JET_SOCK_CONNECTING);
    int rc = ops->init(s);
    if (rc < 0) {
        s->ops = NULL;
        sock_discard(s);
        return rc;
    }
    /* Picked before the connect (init may have chosen one): a peer in this
     * process picks for its side once it accepts, which must not change
     * which loop this side gets. */
    if (!s->loop) s->loop = jet_loop_pick();
    if (!s->loop) {
        sock_discard(s);
        return -ENOMEM;
    }
    int cerr = 0;
    if (connect(fd, &addr->u.sa, addr->len) < 0 && errno != EINPROGRESS) cerr = -errno;
    jet__socket_ref(s); /* the loop's reference, dropped by the fail task */
    if (cerr) {
        /* Never registered: a writable fd would look connected to the loop. */
        JET_WARN("connect to %s failed: %s", s->peer, jet_strerror(cerr));
        jet__socket_set_failed(s, cerr);
        *s_p = s;
        return 0;
    }
    rc = jet_loop_io_add(s->loop, &s->io);
    if (rc < 0) {
        jet__socket_unref(s);
        sock_discard(s);
        return rc;
    }
    if (connect_timeout_ms >= 0) {
        /* Timers are armed on the loop's own thread. */
        s->connect_deadline_us = jet_now_us() + (int64_t)connect_timeout_ms * 1000;
        s->ctl_task.fn = sock_arm_connect_timer;
        jet__socket_ref(s);
        jet_loop_post(s->loop, &s->ctl_task);
    }
    *s_p = s;
    return 0;
}

int jet__socket_accept(int fd, const jet_addr_t *peer, int mode, jet_loop_t *loop,
                       const jet_socket_handler_t *handler, void *owner, jet_socket_t **s_p)
{
    if (!jet__transport_get(mode)) return -EPROTONOSUPPORT;
    sock_set_nodelay(fd, peer->u.sa.sa_family);
    jet_socket_t *s = sock_new(fd, mode, handler, owner);
    if (!s) return -ENOMEM;
    s->is_server_side = true;
    s->addr = *peer;
    jet__addr_format(peer, s->peer, sizeof s->peer);
    jet_addr_t local;
    local.len = sizeof local.u;
    if (getsockname(fd, &local.u.sa, &local.len) == 0) jet__addr_format(&local, s->local, sizeof s->local);
    atomic_init(&s->state, JET_SOCK_READY);
    s->loop = loop; /* init may move it to another loop */
    int rc = s->ops->init(s);
    if (rc < 0) {
        s->ops = NULL;
        s->fd = -1; /* the caller still owns fd on failure */
        sock_discard(s);
        return rc;
    }
    jet__socket_ref(s);
    rc = jet_loop_io_add(s->loop, &s->io);
    if (rc < 0) {
        jet__socket_unref(s);
        s->fd = -1;
        sock_discard(s);
        return rc;
    }
    *s_p = s;
    return 0;
}

void jet__socket_set_failed(jet_socket_t *s, int err)
{
    if (err >= 0) err = -EINVAL;
    int st = atomic_load_explicit(&s->state, memory_order_acquire);
    do {
        if (st == JET_SOCK_FAILED) return;
    } while (!atomic_compare_exchange_weak(&s->state, &st, JET_SOCK_FAILED));
    atomic_store(&s->error, err);
    if (err == -JET_EEOF || err == -JET_ECLOSE || err == -JET_ELOGOFF)
        JET_DEBUG("connection %s closed: %s", s->peer, jet_strerror(err));
    else
        JET_INFO("connection %s failed: %s", s->peer, jet_strerror(err));
    /* Stops both directions now; close(2) waits for the last reference so that
     * a writer still inside writev never touches a reused fd number. */
    shutdown(s->fd, SHUT_RDWR);
    jet_loop_post(s->loop, &s->fail_task);
}

static void sock_fail_task(jet_task_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, fail_task));
    jet_loop_io_del(&s->io);
    jet_loop_timer_stop(s->loop, &s->connect_timer);
    jet_loop_timer_stop(s->loop, &s->nomem_timer);
    int err = atomic_load(&s->error);
    if (s->ops->close) s->ops->close(s);
    /* The read side is over: what it held (part of a message) goes now, not
     * with the last reference, which calls still being served may keep for
     * long (the memory may be what a server closed this connection for). */
    jet_iobuf_clear(&s->read_buf);
    atomic_store_explicit(&s->read_held, 0, memory_order_relaxed);
    if (s->handler && s->handler->on_failed) s->handler->on_failed(s, err);
    /* A write side parked on the loop drops its requests now. */
    if (s->wait_out || s->wait_ready) {
        s->wait_out = s->wait_ready = false;
        sock_writer_run(s, true);
    }
    jet__socket_unref(s); /* the loop's reference */
}

static void sock_connect_timer(jet_timer_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, connect_timer));
    int st = atomic_load(&s->state);
    if (st == JET_SOCK_CONNECTING || st == JET_SOCK_HANDSHAKE) {
        JET_WARN("connect to %s timed out", s->peer);
        jet__socket_set_failed(s, -ETIMEDOUT);
    }
}

void jet__socket_connected(jet_socket_t *s, int err)
{
    if (err < 0) {
        jet__socket_set_failed(s, err);
        return;
    }
    int st = JET_SOCK_HANDSHAKE;
    if (!atomic_compare_exchange_strong(&s->state, &st, JET_SOCK_READY)) return;
    jet_loop_timer_stop(s->loop, &s->connect_timer);
    if (s->handler && s->handler->on_ready) s->handler->on_ready(s);
    if (s->wait_ready) {
        s->wait_ready = false;
        sock_writer_run(s, true);
    }
}

static void sock_check_connect(jet_socket_t *s)
{
    int soerr = 0;
    socklen_t len = sizeof soerr;
    if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0) soerr = errno;
    if (soerr) {
        JET_WARN("connect to %s failed: %s", s->peer, strerror(soerr));
        jet__socket_set_failed(s, -soerr);
        return;
    }
    int st = JET_SOCK_CONNECTING;
    if (!atomic_compare_exchange_strong(&s->state, &st, JET_SOCK_HANDSHAKE)) return;
    int rc = s->ops->connect(s);
    if (rc < 0)
        jet__socket_set_failed(s, rc);
    else if (rc == 0)
        jet__socket_connected(s, 0);
}

static void sock_io_cb(jet_io_t *io, uint32_t events)
{
    jet_socket_t *s = io->arg;
    int st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st == JET_SOCK_FAILED) return;
    if (st == JET_SOCK_CONNECTING) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        sock_check_connect(s);
        st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == JET_SOCK_FAILED || !(events & EPOLLIN)) return;
        events &= ~(uint32_t)EPOLLOUT;
    }
    atomic_store_explicit(&s->last_active_us, jet_now_coarse_us(), memory_order_relaxed);
    s->ops->on_input(s, events);
}

/* Loop thread: resumes reading after a budget ran out. */
static void sock_read_task(jet_task_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, read_task));
    s->read_posted = false;
    if (!jet__socket_failed(s)) s->ops->on_input(s, EPOLLIN);
    jet__socket_unref(s);
}

void jet__socket_post_read(jet_socket_t *s)
{
    if (s->read_posted) return;
    s->read_posted = true;
    jet__socket_ref(s);
    jet_loop_post(s->loop, &s->read_task);
}

/* ---- input without memory ------------------------------------------------ */

/* A read that found no memory after the owner closed a connection to free
 * some tries again this often, this many times: the closed connection gives
 * its blocks back on its own loop thread, within microseconds unless that
 * thread is busy. The owner is asked again every SOCK_NOMEM_ASK_EVERY
 * retries, not at each: what it closed may not have given its memory back
 * yet, and one closing is often enough. */
#define SOCK_NOMEM_RETRY_US  1000
#define SOCK_NOMEM_TRIES     200
#define SOCK_NOMEM_ASK_EVERY 10

bool jet__socket_read_nomem(jet_socket_t *s)
{
    if (jet_timer_armed(&s->nomem_timer)) return true;
    bool freed = s->nomem_tries % SOCK_NOMEM_ASK_EVERY == 0 && s->handler && s->handler->on_nomem &&
                 s->handler->on_nomem(s);
    if (!freed && s->nomem_tries == 0) return false;
    if (++s->nomem_tries > SOCK_NOMEM_TRIES) {
        JET_WARN("%s: no memory for its input in %d ms after closing other connections", s->peer,
                 SOCK_NOMEM_TRIES * SOCK_NOMEM_RETRY_US / 1000);
        return false;
    }
    jet_loop_timer_start(s->loop, &s->nomem_timer, jet_now_us() + SOCK_NOMEM_RETRY_US);
    return true;
}

static void sock_nomem_timer(jet_timer_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, nomem_timer));
    if (!jet__socket_failed(s) && !jet__socket_read_paused(s)) s->ops->on_input(s, EPOLLIN);
}

/* ---- input flow control -------------------------------------------------- */

/* Where a paused input goes on: half the limit; at once when the limit was
 * lifted (0 or less) meanwhile. */
static int64_t sock_resume_below(void)
{
    int64_t limit = JET_FLAG(socket_max_unwritten_bytes);
    return limit > 0 ? limit / 2 : INT64_MAX;
}

bool jet__socket_pause_read(jet_socket_t *s)
{
    int64_t limit = JET_FLAG(socket_max_unwritten_bytes);
    if (limit <= 0 || atomic_load_explicit(&s->unwritten, memory_order_relaxed) <= limit)
        return false;
    /* Dekker with sock_unwritten_sub, which subtracts, then reads
     * read_paused: either it sees the pause and posts the resume, or we see
     * the queue drained and do not pause. */
    atomic_store_explicit(&s->read_paused, true, memory_order_seq_cst);
    if (atomic_load_explicit(&s->unwritten, memory_order_seq_cst) <= sock_resume_below()) {
        atomic_store_explicit(&s->read_paused, false, memory_order_relaxed);
        return false;
    }
    return true;
}

void jet__socket_yield_read(jet_socket_t *s)
{
    s->read_yielded = true;
    atomic_store_explicit(&s->read_paused, true, memory_order_seq_cst);
    if (!atomic_exchange_explicit(&s->resume_posted, true, memory_order_seq_cst)) {
        jet__socket_ref(s);
        jet_loop_post(s->loop, &s->resume_task);
    }
}

static void sock_resume_task(jet_task_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, resume_task));
    atomic_store_explicit(&s->resume_posted, false, memory_order_seq_cst);
    /* A yield goes on unless the limit itself holds (as jet__socket_pause_read
     * would pause now: past the limit, not past half of it); a pause for the
     * limit, once half of it is left. Behind again since the post (more
     * answers queued): it stays paused for the limit, and the next drain
     * posts again (it sees read_paused: resume_posted was cleared first). */
    int64_t limit = JET_FLAG(socket_max_unwritten_bytes);
    int64_t go_at = s->read_yielded ? (limit > 0 ? limit : INT64_MAX) : sock_resume_below();
    s->read_yielded = false;
    if (atomic_load_explicit(&s->read_paused, memory_order_relaxed) && !jet__socket_failed(s) &&
        atomic_load_explicit(&s->unwritten, memory_order_seq_cst) <= go_at) {
        atomic_store_explicit(&s->read_paused, false, memory_order_relaxed);
        if (s->ops->read_resumed) s->ops->read_resumed(s);
        if (!jet_iobuf_empty(&s->read_buf)) jet__socket_deliver(s);
        if (!jet__socket_failed(s) && !jet__socket_read_paused(s)) s->ops->on_input(s, EPOLLIN);
    }
    jet__socket_unref(s);
}

/* Any thread: n bytes were written (or dropped); a paused input goes on
 * once the queue has drained to half the limit. */
static void sock_unwritten_sub(jet_socket_t *s, int64_t n)
{
    int64_t left = atomic_fetch_sub_explicit(&s->unwritten, n, memory_order_seq_cst) - n;
    if (atomic_load_explicit(&s->read_paused, memory_order_seq_cst) &&
        left <= sock_resume_below() &&
        !atomic_exchange_explicit(&s->resume_posted, true, memory_order_seq_cst)) {
        jet__socket_ref(s);
        jet_loop_post(s->loop, &s->resume_task);
    }
}

void jet__socket_deliver(jet_socket_t *s)
{
    if (s->handler && s->handler->on_read && !jet__socket_failed(s)) s->handler->on_read(s);
    atomic_store_explicit(&s->read_held, jet_iobuf_len(&s->read_buf), memory_order_relaxed);
}

/* ---- write side ---------------------------------------------------------- */

void jet__socket_size_error(jet_socket_t *s, const char *what, size_t len, char *buf, size_t size)
{
    const char *hint = NULL;
    size_t most = s->ops->max_message ? s->ops->max_message(s, &hint) : 0;
    snprintf(buf, size, "%s of %zu bytes is larger than the %zu bytes a %s connection carries%s%s",
             what, len, most, s->ops->name, hint ? ": " : "", hint ? hint : "");
}

static int sock_write(jet_socket_t *s, jet_iobuf_t *data, bool bounded);

int jet__socket_write(jet_socket_t *s, jet_iobuf_t *data)
{
    return sock_write(s, data, true);
}

int jet__socket_write_answer(jet_socket_t *s, jet_iobuf_t *data)
{
    return sock_write(s, data, false);
}

static int sock_write(jet_socket_t *s, jet_iobuf_t *data, bool bounded)
{
    if (jet__socket_failed(s)) {
        jet_iobuf_clear(data);
        int err = atomic_load(&s->error);
        return err ? err : -JET_EFAILEDSOCKET;
    }
    size_t len = jet_iobuf_len(data);
    size_t most = s->ops->max_message ? s->ops->max_message(s, NULL) : 0;
    if (most != 0 && len > most) {
        /* Never fits: refuse this message, keep the connection. */
        jet_iobuf_clear(data);
        return -EMSGSIZE;
    }
    /* 0 or less: no limit, as for pausing the input. */
    int64_t limit = JET_FLAG(socket_max_unwritten_bytes);
    if (bounded && limit > 0 && atomic_load_explicit(&s->unwritten, memory_order_relaxed) > limit) {
        jet_iobuf_clear(data);
        return -JET_EOVERCROWDED;
    }
    jet_write_req_t *req = jet__pool_get(&sock_req_pool);
    if (!req) {
        jet_iobuf_clear(data);
        return -ENOMEM;
    }
    sock_iobuf_take(&req->data, data);
    atomic_store_explicit(&s->last_active_us, jet_now_coarse_us(), memory_order_relaxed);
    atomic_fetch_add_explicit(&s->unwritten, (int64_t)len, memory_order_relaxed);
    atomic_store_explicit(&req->next, SOCK_UNCONNECTED, memory_order_relaxed);
    jet_write_req_t *prev = atomic_exchange_explicit(&s->write_head, req, memory_order_acq_rel);
    if (prev) {
        /* Another thread owns the write side; it will find us through prev. */
        atomic_store_explicit(&req->next, prev, memory_order_release);
        return 0;
    }
    atomic_store_explicit(&req->next, NULL, memory_order_relaxed);
    s->w_first = s->w_last = req;
    jet__socket_ref(s); /* held by whoever owns the write side */
    if (atomic_load_explicit(&s->state, memory_order_acquire) == JET_SOCK_READY &&
        !jet_loop_in_thread(s->loop)) {
        sock_writer_run(s, false);
    } else if (jet_loop_in_thread(s->loop)) {
        if (s->corked)
            s->cork_owed = true; /* the uncork writes */
        else
            sock_write_task(&s->write_task);
    } else {
        jet_loop_post(s->loop, &s->write_task);
    }
    return 0;
}

static void sock_req_free(jet_write_req_t *r)
{
    jet_iobuf_fini(&r->data);
    jet__pool_put(&sock_req_pool, r);
}

/* Collects requests pushed after w_last (newest first through ->next) into
 * FIFO order behind it. Returns false when there were none (the write side
 * was released). */
static bool sock_writer_grab_or_release(jet_socket_t *s)
{
    jet_write_req_t *last = s->w_last, *expected = last;
    if (atomic_compare_exchange_strong_explicit(&s->write_head, &expected, NULL,
                                                memory_order_acq_rel, memory_order_acquire)) {
        /* The write side is free from here on: the next writer owns w_first and
         * w_last, so only the local copy may be touched. */
        sock_req_free(last);
        return false;
    }
    jet_write_req_t *head = expected, *p = head, *fifo = NULL;
    while (p != s->w_last) {
        jet_write_req_t *next;
        while ((next = atomic_load_explicit(&p->next, memory_order_acquire)) == SOCK_UNCONNECTED)
            jet__cpu_relax();
        atomic_store_explicit(&p->next, fifo, memory_order_relaxed);
        fifo = p;
        p = next;
    }
    sock_req_free(s->w_last);
    s->w_first = fifo;
    s->w_last = head;
    return true;
}

/* Pops fully written requests off the front, keeping w_last as the anchor
 * that the release CAS compares against. */
static void sock_writer_pop_done(jet_socket_t *s)
{
    while (s->w_first != s->w_last && jet_iobuf_empty(&s->w_first->data)) {
        jet_write_req_t *r = s->w_first;
        s->w_first = atomic_load_explicit(&r->next, memory_order_relaxed);
        sock_req_free(r);
    }
}

static void sock_writer_drop_all(jet_socket_t *s)
{
    do {
        for (jet_write_req_t *r = s->w_first; r; r = atomic_load(&r->next)) {
            atomic_fetch_sub_explicit(&s->unwritten, (int64_t)jet_iobuf_len(&r->data),
                                      memory_order_relaxed);
            jet_iobuf_clear(&r->data);
            if (r == s->w_last) break;
        }
        sock_writer_pop_done(s);
    } while (sock_writer_grab_or_release(s));
    jet__socket_unref(s); /* the write side's reference */
}

static void sock_writer_run(jet_socket_t *s, bool on_loop)
{
    for (;;) {
        if (jet__socket_failed(s)) {
            sock_writer_drop_all(s);
            return;
        }
        jet_iobuf_t *bufs[SOCK_WRITE_BATCH];
        int n = 0;
        for (jet_write_req_t *r = s->w_first; r && n < SOCK_WRITE_BATCH;
             r = atomic_load_explicit(&r->next, memory_order_relaxed)) {
            if (!jet_iobuf_empty(&r->data)) bufs[n++] = &r->data;
            if (r == s->w_last) break;
        }
        if (n > 0) {
            ssize_t w = s->ops->cut_from_iobuf_list(s, bufs, n);
            if (w > 0) {
                sock_unwritten_sub(s, (int64_t)w);
                sock_writer_pop_done(s);
                continue;
            }
            if (w == -EAGAIN || w == 0) {
                if (!on_loop) {
                    /* A synchronous caller about to drive the loop runs the
                     * task itself (jet_loop_defer_begin). */
                    jet_loop_post_deferred(s->loop, &s->write_task);
                    return;
                }
                s->wait_out = true;
                int rc = s->ops->wait_writable(s, 0);
                if (rc < 0) jet__socket_set_failed(s, rc);
                return;
            }
            if (w == -EMSGSIZE && s->handler && s->handler->on_refused) {
                /* The transport refuses a message whole, before any of its
                 * bytes, and only when it is the first one it was given. */
                jet_iobuf_t msg;
                jet_iobuf_init(&msg);
                sock_iobuf_take(&msg, bufs[0]);
                sock_unwritten_sub(s, (int64_t)jet_iobuf_len(&msg));
                s->handler->on_refused(s, &msg);
                jet_iobuf_fini(&msg);
                sock_writer_pop_done(s);
                continue;
            }
            jet__socket_set_failed(s, (int)w);
            continue;
        }
        sock_writer_pop_done(s);
        if (!sock_writer_grab_or_release(s)) {
            jet__socket_unref(s);
            return;
        }
    }
}

void jet__socket_cork(jet_socket_t *s, bool on)
{
    s->corked = on;
    if (on || !s->cork_owed) return;
    s->cork_owed = false;
    sock_write_task(&s->write_task);
}

/* Loop thread: the write side was handed to the loop. */
static void sock_write_task(jet_task_t *t)
{
    jet_socket_t *s = (jet_socket_t *)((char *)t - offsetof(jet_socket_t, write_task));
    int st = atomic_load_explicit(&s->state, memory_order_acquire);
    if (st == JET_SOCK_CONNECTING || st == JET_SOCK_HANDSHAKE) {
        s->wait_ready = true;
        return;
    }
    sock_writer_run(s, true);
}

typedef struct sock_writable_msg {
    jet_task_t task;
    jet_socket_t *s;
} sock_writable_msg_t;

static jet_pool_t sock_wmsg_pool = JET_POOL_INIT("writable_msg", sizeof(sock_writable_msg_t));

static void sock_writable_task(jet_task_t *t)
{
    sock_writable_msg_t *m = (sock_writable_msg_t *)t;
    jet_socket_t *s = m->s;
    jet__pool_put(&sock_wmsg_pool, m);
    atomic_store(&s->writable_posted, false);
    if (s->wait_out) {
        s->wait_out = false;
        sock_writer_run(s, true);
    }
    jet__socket_unref(s);
}

void jet__socket_writable(jet_socket_t *s)
{
    if (jet_loop_in_thread(s->loop)) {
        if (s->wait_out) {
            s->wait_out = false;
            sock_writer_run(s, true);
        }
        return;
    }
    if (atomic_exchange(&s->writable_posted, true)) return;
    sock_writable_msg_t *m = jet__pool_get(&sock_wmsg_pool);
    if (!m) {
        atomic_store(&s->writable_posted, false);
        jet__socket_set_failed(s, -ENOMEM);
        return;
    }
    m->task.fn = sock_writable_task;
    m->s = s;
    jet__socket_ref(s);
    jet_loop_post(s->loop, &m->task);
}

int jet__socket_debug(jet_socket_t *s, char *buf, size_t len)
{
    static const char *states[] = {"connecting", "handshake", "ready", "failed"};
    int n = snprintf(buf, len, "%s fd=%d %s %s unwritten=%lld ", s->peer, s->fd,
                     s->ops ? s->ops->name : "?", states[atomic_load(&s->state) & 3],
                     (long long)atomic_load(&s->unwritten));
    if (n < 0 || (size_t)n >= len) return n;
    return n + s->ops->debug(s, buf + n, len - (size_t)n);
}
