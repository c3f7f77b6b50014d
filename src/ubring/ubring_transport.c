#include "ubring/ubring_transport.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/time.h"
#include "jetrpc/errors.h"
#include "jetrpc/flags.h"
#include "net/hello_transport.h"
#include "net/socket.h"
#include "ubring/ubring_hello.h"
#include "ubring/ubring_ring.h"
#include "ubring/ubring_shm.h"

#define UB_MAX_LOOPS 256
#define UB_TICK_MIN_US 100 /* ub_event_queue_timer_interval */
#define UB_TICK_MAX_US           1000000
#define UB_IDLE_MAX_US           60000000 /* ub_poller_idle_us */
#define UB_CONNECT_TIMEOUT_MAX_S 3600     /* ub_connect_timeout */

JET_FLAG_DEFINE_INT32_RANGE(
    ub_data_queue_size, 4, 4, 1024,
    "UBRing segment size in MiB (a multiple of 4); one write carries at most "
    "((size - 64 B) / 64 - 1) * 60 bytes, larger messages take several (brpc: "
    "data_queue_size)");
JET_FLAG_DEFINE_INT32_RANGE(ub_poller_num, 1, 1, UB_MAX_LOOPS,
                            "Event loops that poll UBRing connections");
JET_FLAG_DEFINE_BOOL(ub_poller_yield, false, "UBRing pollers yield the CPU when they find nothing");
/* Longer than the ~1-2 ms an idle loop takes to look at its rings: with a
 * shorter spin, a call/answer pair can settle into that pace on both sides
 * (each answer arriving just after the other side stopped spinning). */
JET_FLAG_DEFINE_INT32_RANGE(
    ub_poller_idle_us, 2500, 0, UB_IDLE_MAX_US,
    "UBRing pollers spin this long after the last traffic (read or write), then "
    "look at the rings about every millisecond");
JET_FLAG_DEFINE_INT32_RANGE(
    ub_hb_timer_interval, 5, 1, 86400,
    "Seconds between checks of the peer's UBRing heartbeat (ours is written "
    "every second)");
JET_FLAG_DEFINE_INT32_RANGE(ub_hb_retry_cnt, 10, 0, INT32_MAX,
                            "Missed UBRing heartbeat checks tolerated before the connection fails");
JET_FLAG_DEFINE_INT32_RANGE(
    ub_connect_timeout, 1, 1, UB_CONNECT_TIMEOUT_MAX_S,
    "Seconds a UBRing client may take to map the server segment (written into "
    "the segments)");
JET_FLAG_DEFINE_INT32_RANGE(ub_disconnect_timeout, 5, 0, 3600,
                            "Seconds to wait for the peer's acknowledgement of a UBRing close");
JET_FLAG_DEFINE_INT32_RANGE(
    ub_event_queue_timer_interval, 100, UB_TICK_MIN_US, UB_TICK_MAX_US,
    "Period of the UBRing close and idle checks, in microseconds (at least the "
    "loop's millisecond resolution while it sleeps)");
JET_FLAG_DEFINE_INT32_RANGE(ub_max_managed_num, 1024, 0, INT32_MAX,
                            "UBRing connections per process; later ones use TCP");
JET_FLAG_DEFINE_INT32(ub_handshake_timeout_ms, 5000,
                      "A UBRing handshake that has not finished after this long fails (0 or "
                      "less: no limit)");

#define UB_READ_BUDGET (256 * 1024) /* bytes per connection per poll */
#define UB_WRITE_MAX       (2 * 1024 * 1024)
#define UB_HB_WRITE_US 1000000
#define UB_SWEEP_MIN_AGE_S 60 /* stale segments: see ub_sweep_once */
/* A writer waiting for the peer to make room keeps the poller spinning
 * this many times ub_poller_idle_us past the last traffic. */
#define UB_WAIT_SPIN_FACTOR 20

_Static_assert(JET_UBRING_ACK_LEN == JET_HELLO_ACK_LEN, "UBRing ACK length");

enum { UC_HANDSHAKE = 0, UC_ACTIVE, UC_CLOSING };

struct ub_loop;

/* The rings of one connection. Owned by the socket's state until the socket
 * closes; an established ring then stays on its loop's list until the close
 * protocol ends, and is freed there. */
typedef struct ub_conn {
    struct ub_conn *prev, *next;
    struct ub_loop *ul; /* set while on a loop's list */
    jet_socket_t *s;    /* NULL once the socket closed */
    jet_ubring_shm_t own, peer;
    jet_ubring_tx_t tx;
    jet_ubring_rx_t rx;
    int state; /* UC_* */
    bool want_out;
    bool peer_closed;
    uint32_t hb_misses;
    int64_t hb_check_us;
    int64_t close_deadline_us;
    char peer_addr[64];
} ub_conn_t;

/* Per event loop: its established rings, the poller and the tick timer.
 * Loop thread only. */
typedef struct ub_loop {
    jet_loop_t *loop;
    ub_conn_t head; /* circular list sentinel */
    uint32_t nconns;
    jet_poller_t poller;
    bool poller_on;
    jet_timer_t tick;
    int64_t last_work_us;
    int64_t next_hb_us;
    /* Written by writers on any thread: a write expects an answer, so the
     * loop spins again (kick) or keeps spinning (last_tx_us). */
    _Atomic bool spinning;
    _Atomic bool kick_posted;
    _Atomic int64_t last_tx_us;
    jet_task_t kick;
} ub_loop_t;

typedef struct ub_ts {
    jet_hello_ts_t h; /* first: s->tstate is both */
    ub_conn_t *conn;
} ub_ts_t;

static const jet_hello_ops_t ub_hello_ops;

static pthread_mutex_t ub_loops_lock = PTHREAD_MUTEX_INITIALIZER;
static ub_loop_t *ub_loops[UB_MAX_LOOPS];
static jet_loop_t *ub_loop_keys[UB_MAX_LOOPS];
static _Atomic int32_t ub_nconns; /* rings in the process, against ub_max_managed_num */

static void ubl_tick_cb(jet_timer_t *t);
static int ubl_poll_cb(jet_poller_t *p);
static void ubl_kick_task(jet_task_t *t);

/* ---- rings -------------------------------------------------------------------- */

static ub_conn_t *uc_new(jet_socket_t *s)
{
    if (atomic_fetch_add(&ub_nconns, 1) >= JET_FLAG(ub_max_managed_num)) {
        atomic_fetch_sub(&ub_nconns, 1);
        JET_LOG_ONCE(JET_LOG_WARN,
                     "UBRing: %d connections reached (--ub_max_managed_num); "
                     "further connections use TCP",
                     JET_FLAG(ub_max_managed_num));
        return NULL;
    }
    ub_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        atomic_fetch_sub(&ub_nconns, 1);
        return NULL;
    }
    c->s = s;
    snprintf(c->peer_addr, sizeof c->peer_addr, "%s", s->peer);
    return c;
}

static void ubl_detach(ub_conn_t *c);

/* Unlinks what this side created and unmaps both segments. Loop thread when
 * the ring was established; nobody may be inside the rings any more. */
static void uc_destroy(ub_conn_t *c)
{
    if (!c) return;
    if (c->ul) ubl_detach(c);
    int rc = jet__ubring_shm_unlink(&c->own);
    if (rc < 0) JET_WARN("UBRing: shm_unlink %s: %s", c->own.name, jet_strerror(rc));
    jet__ubring_shm_unmap(&c->own);
    jet__ubring_shm_unmap(&c->peer);
    free(c);
    atomic_fetch_sub(&ub_nconns, 1);
}

static size_t uc_queue_bytes(void)
{
    int32_t mib = JET_FLAG(ub_data_queue_size);
    return mib > 0 ? (size_t)mib << 20 : 0;
}

/* ---- per-loop polling ------------------------------------------------------------ */

static ub_loop_t *ubl_get(jet_loop_t *loop)
{
    ub_loop_t *ul = NULL;
    pthread_mutex_lock(&ub_loops_lock);
    int free_i = -1;
    for (int i = 0; i < UB_MAX_LOOPS; i++) {
        if (ub_loop_keys[i] == loop) {
            ul = ub_loops[i];
            break;
        }
        if (!ub_loop_keys[i] && free_i < 0) free_i = i;
    }
    if (!ul && free_i >= 0 && (ul = calloc(1, sizeof *ul)) != NULL) {
        ul->loop = loop;
        ul->head.next = ul->head.prev = &ul->head;
        ul->poller.poll = ubl_poll_cb;
        ul->poller.arg = ul;
        jet_timer_init(&ul->tick, ubl_tick_cb);
        ul->kick.fn = ubl_kick_task;
        ub_loops[free_i] = ul;
        ub_loop_keys[free_i] = loop;
    }
    pthread_mutex_unlock(&ub_loops_lock);
    return ul;
}

/* The flags below within their ranges, whatever code stored: a huge tick
 * period would stall the close and heartbeat checks, and the connect
 * timeout goes to the peer as an unsigned count of seconds. */
static int64_t ubl_tick_period_us(void)
{
    return JET_FLAG_IN_RANGE(ub_event_queue_timer_interval);
}

static int64_t ub_poller_idle_max_us(void)
{
    return JET_FLAG_IN_RANGE(ub_poller_idle_us);
}

static uint32_t ub_connect_timeout_s(void)
{
    return (uint32_t)JET_FLAG_IN_RANGE(ub_connect_timeout);
}

static void ubl_spin(ub_loop_t *ul)
{
    ul->last_work_us = jet_now_us();
    if (!ul->poller_on && ul->nconns > 0) {
        jet_loop_poller_add(ul->loop, &ul->poller);
        ul->poller_on = true;
        atomic_store_explicit(&ul->spinning, true, memory_order_relaxed);
    }
}

static void ubl_kick_task(jet_task_t *t)
{
    ub_loop_t *ul = (ub_loop_t *)((char *)t - offsetof(ub_loop_t, kick));
    atomic_store_explicit(&ul->kick_posted, false, memory_order_relaxed);
    ubl_spin(ul);
}

/* Writer thread, after a ring write: the answer will come through this
 * loop's rings. A sleeping loop is woken once per burst, not per message. */
static void ubl_wrote(ub_loop_t *ul)
{
    atomic_store_explicit(&ul->last_tx_us, jet_now_us(), memory_order_relaxed);
    if (atomic_load_explicit(&ul->spinning, memory_order_relaxed) ||
        atomic_exchange_explicit(&ul->kick_posted, true, memory_order_relaxed))
        return;
    jet_loop_post(ul->loop, &ul->kick);
}

static void ubl_stop_spin(ub_loop_t *ul)
{
    if (!ul->poller_on) return;
    jet_loop_poller_del(ul->loop, &ul->poller);
    ul->poller_on = false;
    atomic_store_explicit(&ul->spinning, false, memory_order_relaxed);
}

static int ubl_attach(jet_socket_t *s, ub_conn_t *c)
{
    ub_loop_t *ul = ubl_get(s->loop);
    if (!ul) return -ENOMEM;
    c->ul = ul;
    c->state = UC_ACTIVE;
    int64_t now = jet_now_us();
    int32_t hb = JET_FLAG(ub_hb_timer_interval);
    c->hb_check_us = now + (int64_t)(hb > 0 ? hb : 1) * 1000000;
    c->next = &ul->head;
    c->prev = ul->head.prev;
    ul->head.prev->next = c;
    ul->head.prev = c;
    if (ul->nconns++ == 0) {
        ul->next_hb_us = now;
        jet_loop_timer_start(ul->loop, &ul->tick, now + ubl_tick_period_us());
    }
    ubl_spin(ul);
    return 0;
}

static void ubl_detach(ub_conn_t *c)
{
    ub_loop_t *ul = c->ul;
    c->prev->next = c->next;
    c->next->prev = c->prev;
    c->next = c->prev = NULL;
    c->ul = NULL;
    if (--ul->nconns == 0) {
        jet_loop_timer_stop(ul->loop, &ul->tick);
        ubl_stop_spin(ul);
    }
}

/* Reads what the ring holds into the socket and hands it to the protocol. */
static int uc_read(ub_conn_t *c, size_t budget)
{
    jet_socket_t *s = c->s;
    /* Paused: the bytes wait in the ring, and the peer for room. */
    if (jet__socket_read_paused(s) || !jet__ubring_rx_ready(&c->rx)) return 0;
    ssize_t r = jet__ubring_rx_read(&c->rx, &s->read_buf, budget);
    if (r < 0) {
        if (r == -EPROTO)
            JET_WARN_PEER(
                "close %s: corrupt UBRing chunk at slot %u (flag, len or cursor out of range)",
                s->peer, c->rx.rpos);
        jet__socket_set_failed(s, (int)r);
        return 1;
    }
    if (r == 0) return 0;
    atomic_store_explicit(&s->last_active_us, jet_now_coarse_us(), memory_order_relaxed);
    jet__socket_deliver(s);
    return 1;
}

static int uc_poll(ub_conn_t *c)
{
    jet_socket_t *s = c->s;
    if (c->state != UC_ACTIVE || !s || jet__socket_failed(s)) return 0;
    int work = uc_read(c, UB_READ_BUDGET);
    if (c->want_out && !jet__socket_failed(s)) {
        /* Room the slot flags confirm: a tail that claims more would wake
         * a writer whose write then fails, again and again. */
        int64_t f = jet__ubring_tx_room(&c->tx, 1);
        if (f < 0) {
            JET_WARN_PEER("close %s: the peer wrote an out-of-range UBRing tail", s->peer);
            jet__socket_set_failed(s, -EPROTO);
        } else if (f > 0) {
            c->want_out = false;
            jet__socket_writable(s);
            work++;
        }
    }
    return work;
}

static int ubl_poll(ub_loop_t *ul)
{
    int work = 0;
    for (ub_conn_t *c = ul->head.next, *next; c != &ul->head; c = next) {
        next = c->next;
        work += uc_poll(c);
    }
    return work;
}

static int ubl_poll_cb(jet_poller_t *p)
{
    ub_loop_t *ul = p->arg;
    int work = ubl_poll(ul);
    if (work) {
        ul->last_work_us = jet_now_us();
        return work;
    }
    /* Nothing for a while: stop spinning; the tick keeps looking. */
    int64_t last = ul->last_work_us,
            tx = atomic_load_explicit(&ul->last_tx_us, memory_order_relaxed);
    if (tx > last) last = tx;
    int64_t idle = jet_now_us() - last, idle_max = ub_poller_idle_max_us();
    if (idle > idle_max) {
        bool waiting = false;
        /* A writer waiting for room, on a connection still in use (one
         * closing or failed has nobody left to wake), keeps the spin a
         * while longer, not for good: a peer that stops reading (stuck,
         * stalled, hostile) would hold a core for the connection's life.
         * The tick then looks for room, and the room it finds restarts
         * the spin. */
        if (idle <= UB_WAIT_SPIN_FACTOR * (int64_t)idle_max) {
            for (ub_conn_t *c = ul->head.next; c != &ul->head; c = c->next)
                waiting |=
                    c->want_out && c->state == UC_ACTIVE && c->s && !jet__socket_failed(c->s);
        }
        if (!waiting) ubl_stop_spin(ul);
    } else if (JET_FLAG(ub_poller_yield)) {
        sched_yield();
    }
    return 0;
}

/* What the peer wrote before it went, delivered: one ring's worth at most,
 * so that a peer that keeps writing cannot hold the loop. */
static void uc_drain(ub_conn_t *c)
{
    size_t left = (size_t)c->rx.cap * JET_UBRING_CHUNK_PAYLOAD;
    while (left > 0 && !jet__socket_failed(c->s)) {
        size_t budget = left < UB_READ_BUDGET ? left : UB_READ_BUDGET;
        if (!uc_read(c, budget)) break;
        left -= budget;
    }
}

/* The peer closed its side (UBRING.md §8, passive): acknowledge, deliver what
 * it wrote before, and end the socket as a TCP EOF would. */
static void uc_passive_close(ub_conn_t *c)
{
    jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
    jet_ubring_ctrl_t *peer = jet__ubring_ctrl(c->peer.base);
    jet__ubring_store32(&own->tx_flag, JET_UBRING_EQ_CLOSED);
    jet__ubring_store32(&peer->rx_flag, JET_UBRING_EQ_CLOSED);
    c->peer_closed = true;
    jet_socket_t *s = c->s;
    uc_drain(c);
    JET_DEBUG("%s closed its UBRing", s->peer);
    jet__socket_set_failed(s, -JET_EEOF);
}

static void uc_close_done(ub_conn_t *c, bool acked)
{
    jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
    if (!acked) {
        JET_WARN_PEER("UBRing close with %s: no acknowledgement after %d s, cleaning up",
                      c->peer_addr, JET_FLAG(ub_disconnect_timeout));
        jet__ubring_store32(&jet__ubring_ctrl(c->peer.base)->rx_flag, JET_UBRING_EQ_CLOSED);
    }
    uint32_t tx = jet__ubring_load32(&own->tx_flag);
    if (tx == JET_UBRING_EQ_CONNECTED || tx == JET_UBRING_EQ_CLOSING)
        jet__ubring_store32(&own->tx_flag, JET_UBRING_EQ_CLOSED);
    uc_destroy(c);
}

static void uc_heartbeat(ub_conn_t *c, int64_t now)
{
    jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
    __atomic_store_n(&jet__ubring_ctrl(c->peer.base)->heart_beat, 1, __ATOMIC_RELAXED);
    if (now < c->hb_check_us) return;
    int32_t hb = JET_FLAG(ub_hb_timer_interval);
    c->hb_check_us = now + (int64_t)(hb > 0 ? hb : 1) * 1000000;
    if (__atomic_exchange_n(&own->heart_beat, 0, __ATOMIC_RELAXED) == 1) {
        c->hb_misses = 0;
        return;
    }
    int32_t retry = JET_FLAG(ub_hb_retry_cnt); /* negative (stored by code): none */
    if (++c->hb_misses <= (uint32_t)(retry > 0 ? retry : 0)) return;
    JET_WARN_PEER("close %s: no UBRing heartbeat from the peer for %u checks of %d s "
                  "(--ub_hb_timer_interval, --ub_hb_retry_cnt)",
                  c->s->peer, c->hb_misses, hb);
    jet__socket_set_failed(c->s, -ECONNRESET);
}

static void ubl_tick_cb(jet_timer_t *t)
{
    ub_loop_t *ul = (ub_loop_t *)((char *)t - offsetof(ub_loop_t, tick));
    if (!ul->poller_on && ubl_poll(ul) > 0) ubl_spin(ul);
    int64_t now = jet_now_us();
    bool hb = now >= ul->next_hb_us;
    if (hb) ul->next_hb_us = now + UB_HB_WRITE_US;
    for (ub_conn_t *c = ul->head.next, *next; c != &ul->head; c = next) {
        next = c->next;
        jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
        if (c->state == UC_CLOSING) {
            if (jet__ubring_load32(&own->rx_flag) == JET_UBRING_EQ_CLOSED)
                uc_close_done(c, true);
            else if (now >= c->close_deadline_us)
                uc_close_done(c, false);
            continue;
        }
        if (!c->s || jet__socket_failed(c->s)) continue;
        if (jet__ubring_load32(&own->rx_flag) == JET_UBRING_EQ_CLOSED &&
            jet__ubring_load32(&own->tx_flag) != JET_UBRING_EQ_CLOSED) {
            uc_passive_close(c);
            continue;
        }
        if (hb) uc_heartbeat(c, now);
    }
    /* uc_close_done may have emptied the list and stopped the tick. */
    if (ul->nconns > 0) jet_loop_timer_start(ul->loop, &ul->tick, now + ubl_tick_period_us());
}

/* Socket closed, loop thread: start the active close (UBRING.md §8), or free
 * the ring at once when there is nothing to tell the peer. tcp_gone: the
 * peer's end of the TCP connection is closed (EOF or reset): its process
 * ended, or it closed after its own ring close, which waits for the flags
 * written here. Either way no acknowledgement is coming: the ring goes once
 * they are written instead of after ub_disconnect_timeout. */
static void uc_close(ub_conn_t *c, bool tcp_gone)
{
    c->s = NULL;
    if (c->state != UC_ACTIVE || c->peer_closed) {
        uc_destroy(c);
        return;
    }
    jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
    jet_ubring_ctrl_t *peer = jet__ubring_ctrl(c->peer.base);
    jet__ubring_store32(&peer->tx_flag, JET_UBRING_EQ_CLOSING);
    if (jet__ubring_load32(&own->tx_flag) == JET_UBRING_EQ_CONNECTED)
        jet__ubring_store32(&own->tx_flag, JET_UBRING_EQ_CLOSED);
    jet__ubring_store32(&peer->rx_flag, JET_UBRING_EQ_CLOSED);
    if (tcp_gone) {
        uc_destroy(c);
        return;
    }
    c->state = UC_CLOSING;
    int32_t to = JET_FLAG(ub_disconnect_timeout);
    c->close_deadline_us = jet_now_us() + (int64_t)(to > 0 ? to : 0) * 1000000;
}

/* ---- transport slots ---------------------------------------------------------- */

/* Segments left in /dev/shm by processes that died mid-handshake: removed
 * after the first UBRing channel or server of a process, on a thread of its
 * own (reading other processes' maps takes a while on a busy machine). Only
 * names older than any handshake could be (a minute at least). */
static void *ub_sweep_main(void *arg)
{
    int64_t age = (int64_t)(intptr_t)arg;
    pthread_setname_np(pthread_self(), "jet_ub_sweep");
    uint64_t bytes = 0;
    int n = jet__ubring_shm_sweep(age, &bytes);
    if (n > 0)
        JET_INFO("UBRing: removed %d stale segment%s from /dev/shm (%llu MiB), left by processes "
                 "that ended mid-handshake",
                 n, n == 1 ? "" : "s", (unsigned long long)(bytes >> 20));
    return NULL;
}

static void ub_sweep_once(void)
{
    static atomic_flag done = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&done)) return;
    int64_t age =
        2 * (int64_t)JET_FLAG(ub_handshake_timeout_ms) / 1000 + (int64_t)ub_connect_timeout_s();
    if (age < UB_SWEEP_MIN_AGE_S) age = UB_SWEEP_MIN_AGE_S;
    pthread_t th;
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0) return;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &a, ub_sweep_main, (void *)(intptr_t)age);
    if (rc != 0)
        JET_WARN("UBRing: cannot start the thread that removes stale segments: %s", strerror(rc));
    pthread_attr_destroy(&a);
}

static int ub_global_init(const jet_transport_check_t *check)
{
    int rc = jet__hello_check(&ub_hello_ops, check);
    if (rc < 0) return rc;
    ub_sweep_once();
    if (!jet__ubring_shm_len_ok(uc_queue_bytes()))
        JET_WARN("--ub_data_queue_size=%d is not a non-zero multiple of 4 (MiB, at most 1024): "
                 "UBRing connections will use TCP",
                 JET_FLAG(ub_data_queue_size));
    return 0;
}

static jet_loop_t *ub_pick_loop(void)
{
    static _Atomic unsigned rr;
    if (jet_loops_count() <= 0 && jet_loops_start(0) < 0) return NULL;
    int n = jet_loops_count();
    if (n <= 0) return NULL;
    int k = JET_FLAG(ub_poller_num);
    if (k < 1) k = 1;
    if (k > n) k = n;
    /* The last k loops: listeners are on loop 0, and their fds would keep a
     * polling loop looking at epoll at the short pace (event_busy_epoll_us). */
    return jet_loop_at(n - k + (int)(atomic_fetch_add_explicit(&rr, 1, memory_order_relaxed) %
                                     (unsigned)k));
}

static int ub_init(jet_socket_t *s)
{
    ub_ts_t *ts = calloc(1, sizeof *ts);
    if (!ts) return -ENOMEM;
    /* Without a valid queue size: plain TCP, a hello reaching this server is
     * declined by it. */
    bool available = jet__ubring_shm_len_ok(uc_queue_bytes());
    jet__hello_init(&ts->h, s, &ub_hello_ops, available);
    if (available) {
        jet_loop_t *l = ub_pick_loop();
        if (l) s->loop = l;
    }
    s->tstate = ts;
    return 0;
}

static void ub_release(jet_socket_t *s)
{
    ub_ts_t *ts = s->tstate;
    if (!ts) return;
    if (ts->conn) {
        /* Only a ring that never got established can be here (an
         * established one is detached by close): no loop knows it. */
        if (ts->conn->ul)
            JET_ERROR("UBRing: socket %s released with its ring attached (leaked)", s->peer);
        else
            uc_destroy(ts->conn);
        ts->conn = NULL;
    }
    jet__hello_fini(&ts->h);
    free(ts);
    s->tstate = NULL;
}

/* The ring is read again (the spin looks at once, the tick otherwise). */
static void ub_read_resumed(jet_socket_t *s)
{
    ub_ts_t *ts = s->tstate;
    ub_conn_t *c = ts ? ts->conn : NULL;
    if (c && c->state == UC_ACTIVE && c->ul) ubl_spin(c->ul);
}

static void ub_close(jet_socket_t *s)
{
    ub_ts_t *ts = s->tstate;
    jet__hello_close(s, &ts->h);
    ub_conn_t *c = ts->conn;
    ts->conn = NULL;
    if (c) uc_close(c, s->peer_hup || atomic_load(&s->error) == -JET_EEOF);
}

/* This connection does not use UBRing: drop the ring. */
static void ub_drop(jet_socket_t *s, jet_hello_ts_t *h)
{
    (void)s;
    ub_ts_t *ts = (ub_ts_t *)h;
    uc_destroy(ts->conn);
    ts->conn = NULL;
}

static int ub_go_on(jet_socket_t *s, jet_hello_ts_t *h)
{
    ub_ts_t *ts = (ub_ts_t *)h;
    ub_conn_t *c = ts->conn;
    /* Both sides have mapped both segments: the names are no longer needed,
     * and an unlinked name cannot be left behind by a crash. */
    int rc = jet__ubring_shm_unlink(&c->own);
    if (rc < 0) JET_WARN("UBRing: shm_unlink %s: %s", c->own.name, jet_strerror(rc));
    rc = ubl_attach(s, c);
    if (rc < 0) return rc;
    jet__hello_set_on(s, h);
    JET_DEBUG("UBRing established with %s (%s)", s->peer, c->own.name);
    return 0;
}

/* ---- client ------------------------------------------------------------------- */

static int ub_connect(jet_socket_t *s)
{
    ub_ts_t *ts = s->tstate;
    if (atomic_load(&ts->h.mode) == JET_HELLO_OFF) return 0;
    jet_addr_t local;
    local.len = sizeof local.u;
    if (getsockname(s->fd, &local.u.sa, &local.len) < 0) return -errno;
    jet__addr_format(&local, s->local, sizeof s->local);
    char name[JET_UBRING_NAME_BUF];
    int rc = jet__ubring_shm_client_name(s->local, name);
    if (rc < 0) {
        JET_INFO("UBRing to %s: segment name for %s is longer than 47 characters: using TCP",
                 s->peer, s->local);
        atomic_store(&ts->h.mode, JET_HELLO_OFF);
        return 0;
    }
    ub_conn_t *c = uc_new(s);
    if (!c) {
        atomic_store(&ts->h.mode, JET_HELLO_OFF);
        return 0;
    }
    size_t len = uc_queue_bytes();
    rc = jet__ubring_shm_create(name, len, &c->own);
    if (rc < 0) {
        JET_INFO("UBRing to %s: cannot create shm %s (%s): using TCP", s->peer, name,
                 jet_strerror(rc));
        uc_destroy(c);
        atomic_store(&ts->h.mode, JET_HELLO_OFF);
        return 0; /* no hello: the server sees a plain TCP client */
    }
    ts->conn = c;
    jet__ubring_ctrl(c->own.base)->timeout = ub_connect_timeout_s();
    jet_ubring_hello_t h = {.msg_len = JET_UBRING_HELLO_LEN,
                            .hello_ver = JET_UBRING_HELLO_VER,
                            .impl_ver = JET_UBRING_IMPL_VER,
                            .len = len};
    memcpy(h.shm_name, name, sizeof name);
    uint8_t buf[JET_UBRING_HELLO_LEN];
    jet__ubring_hello_pack(&h, buf);
    rc = jet__hello_send(s, buf, sizeof buf); /* 64 bytes: taken whole */
    if (rc < 0) return rc;                    /* the segment goes with the socket (close) */
    ts->h.hs = JET_HELLO_HS_C_HELLO_WAIT;
    jet__hello_timer_start(s, &ts->h);
    return 1;
}

/* The server segment, mapped as brpc's client does: its length comes from the
 * tail the server wrote into ours, not from the hello. */
static int ub_client_map(jet_socket_t *s, ub_conn_t *c)
{
    jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
    uint64_t plen = 64 * ((uint64_t)jet__ubring_load32(&own->tail) + 1) + 64;
    if (!jet__ubring_shm_len_ok(plen)) {
        JET_INFO_PEER(
            "UBRing with %s: the server segment length %llu (from the tail it wrote) is not a "
            "multiple of 4 MiB",
            s->peer, (unsigned long long)plen);
        return -EINVAL;
    }
    char sname[JET_UBRING_NAME_BUF];
    int rc = jet__ubring_shm_server_name(c->own.name, sname);
    if (rc == 0) rc = jet__ubring_shm_open(sname, plen, &c->peer);
    if (rc < 0) {
        JET_INFO_PEER("UBRing with %s: cannot map the server segment %s (%s)", s->peer, sname,
                      jet_strerror(rc));
        return rc;
    }
    jet__ubring_store32(&jet__ubring_ctrl(c->peer.base)->tx_flag, JET_UBRING_EQ_CONNECTED);
    jet__ubring_store32(&own->rx_flag, JET_UBRING_EQ_CONNECTED);
    jet__ubring_tx_init(&c->tx, c->own.base, c->peer.base, c->peer.len);
    jet__ubring_rx_init(&c->rx, c->own.base, c->own.len, c->peer.base);
    return 0;
}

static void ub_client_step(jet_socket_t *s, jet_hello_ts_t *hts)
{
    ub_ts_t *ts = (ub_ts_t *)hts;
    uint8_t flat[JET_UBRING_HELLO_MAX];
    size_t n = jet__hello_flatten(hts, flat);
    jet_ubring_hello_t h;
    ssize_t used = jet__ubring_hello_unpack(flat, n, &h);
    if (used == -EAGAIN) return;
    if (used < 0) {
        JET_WARN_PEER(
            "close %s: the server answered the UBRing hello with bytes that are not a valid "
            "hello (%02x %02x %02x %02x): the channel retries over TCP",
            s->peer, flat[0], n > 1 ? flat[1] : 0, n > 2 ? flat[2] : 0, n > 3 ? flat[3] : 0);
        /* As a server that closes on the hello: TCP for a while. */
        jet__socket_set_failed(s, -JET__EHELLO_REFUSED);
        return;
    }
    jet_iobuf_pop_front(&hts->hs_buf, (size_t)used);
    if (!jet__ubring_hello_versions_ok(&h)) {
        JET_INFO_PEER("%s declined UBRing (hello versions %u/%u): this connection uses TCP",
                      s->peer, h.hello_ver, h.impl_ver);
        jet__hello_client_finish(s, hts, false);
        return;
    }
    if (ub_client_map(s, ts->conn) < 0) {
        jet__hello_client_finish(s, hts, false);
        return;
    }
    jet__hello_client_finish(s, hts, true);
}

/* ---- server ------------------------------------------------------------------- */

static void ub_server_answer(jet_socket_t *s, ub_ts_t *ts, const jet_ubring_hello_t *peer)
{
    uint8_t buf[JET_UBRING_HELLO_LEN];
    if (ts->conn) {
        jet_ubring_hello_t h = {.msg_len = JET_UBRING_HELLO_LEN,
                                .hello_ver = JET_UBRING_HELLO_VER,
                                .impl_ver = JET_UBRING_IMPL_VER,
                                .len = ts->conn->own.len};
        memcpy(h.shm_name, peer->shm_name, sizeof h.shm_name);
        jet__ubring_hello_pack(&h, buf);
    } else {
        jet__ubring_hello_pack_refuse(buf);
    }
    int rc = jet__hello_send(s, buf, sizeof buf);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    ts->h.said_yes = ts->conn != NULL;
    ts->h.hs = JET_HELLO_HS_S_ACK_WAIT;
}

/* Maps the client segment, creates ours and writes the initial values of
 * UBRING.md §3.3. On failure nothing is kept and the hello is refused. */
static void ub_server_setup(jet_socket_t *s, ub_ts_t *ts, const jet_ubring_hello_t *h)
{
    const char *why = NULL;
    char sname[JET_UBRING_NAME_BUF];
    int rc = 0;
    if (!jet__ubring_hello_versions_ok(h)) {
        JET_INFO_PEER("%s sent a UBRing hello with versions %u/%u: declined, using TCP", s->peer,
                      h->hello_ver, h->impl_ver);
        return;
    }
    /* Only a name of the form a client makes for itself (UBRING_<its
     * ip:port>_C, brpc's rule), so that a peer cannot have us map and write
     * another program's segment. Not necessarily this connection's address:
     * a proxy on the host may stand between the two. */
    if (!jet__ubring_shm_client_name_ok(h->shm_name)) {
        why = "bad shm name";
        rc = -EINVAL;
        goto refuse;
    }
    if (!jet__ubring_shm_len_ok(h->len) || jet__ubring_capacity(h->len) < 2) {
        why = "bad segment length";
        rc = -EINVAL;
        goto refuse;
    }
    rc = jet__ubring_shm_server_name(h->shm_name, sname);
    if (rc < 0) {
        why = "no server name derives from it";
        goto refuse;
    }
    ub_conn_t *c = uc_new(s);
    if (!c) {
        why = "no ring available";
        rc = -ENOMEM;
        goto refuse;
    }
    ts->conn = c;
    rc = jet__ubring_shm_open(h->shm_name, h->len, &c->peer);
    if (rc < 0) {
        why = "cannot map the client segment";
        goto err_destroy;
    }
    rc = jet__ubring_shm_create(sname, uc_queue_bytes(), &c->own);
    if (rc < 0) {
        why = "cannot create the server segment";
        goto err_destroy;
    }
    jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
    jet_ubring_ctrl_t *peer = jet__ubring_ctrl(c->peer.base);
    uint32_t timeout = ub_connect_timeout_s();
    jet__ubring_store32(&own->tail, jet__ubring_capacity(c->peer.len) - 1);
    jet__ubring_store32(&peer->tail, jet__ubring_capacity(c->own.len) - 1);
    jet__ubring_store32(&own->timeout, timeout);
    jet__ubring_store32(&peer->timeout, timeout);
    jet__ubring_store32(&peer->rx_flag, JET_UBRING_EQ_CONNECTED);
    jet__ubring_store32(&own->rx_flag, JET_UBRING_EQ_CONNECTED);
    jet__ubring_tx_init(&c->tx, c->own.base, c->peer.base, c->peer.len);
    jet__ubring_rx_init(&c->rx, c->own.base, c->own.len, c->peer.base);
    return;
err_destroy:
    uc_destroy(ts->conn);
    ts->conn = NULL;
refuse:
    JET_INFO_PEER("%s sent a UBRing hello (shm %.48s, len %llu): %s (%s): declined, using TCP",
                  s->peer, h->shm_name, (unsigned long long)h->len, why, jet_strerror(rc));
}

static int ub_server_hello(jet_socket_t *s, jet_hello_ts_t *hts)
{
    ub_ts_t *ts = (ub_ts_t *)hts;
    uint8_t flat[JET_UBRING_HELLO_MAX];
    size_t n = jet__hello_flatten(hts, flat);
    if (!jet__ubring_hello_prefix(flat, n)) return JET_HELLO_STEP_NOT_HELLO;
    jet__hello_timer_start(s, hts);
    jet_ubring_hello_t h;
    ssize_t used = jet__ubring_hello_unpack(flat, n, &h);
    if (used == -EAGAIN) return JET_HELLO_STEP_MORE;
    if (used < 0) {
        JET_WARN_PEER("close %s: malformed UBRing hello (msg_len %u)", s->peer,
                      n >= 4 ? (unsigned)flat[2] << 8 | flat[3] : 0);
        jet__socket_set_failed(s, -EPROTO);
        return -EPROTO;
    }
    jet_iobuf_pop_front(&hts->hs_buf, (size_t)used);
    ub_server_setup(s, ts, &h);
    ub_server_answer(s, ts, &h);
    return JET_HELLO_STEP_DONE;
}

static void ub_ack_pack(uint8_t out[JET_HELLO_ACK_LEN], bool on)
{
    jet__ubring_ack_pack(out, on);
}

static bool ub_ack_on(const uint8_t in[JET_HELLO_ACK_LEN])
{
    return (jet__ubring_ack_unpack(in) & JET_UBRING_ACK_ON) != 0;
}

/* ---- data path ---------------------------------------------------------------- */

/* Messages are a byte stream through the ring, as brpc's writer cuts a large
 * RPC into several write calls (UBRING.md §6): one write call takes what
 * the free slots hold, at most UB_WRITE_MAX, and a message larger than the
 * ring goes in as many as it needs. */
static ssize_t ub_ring_cut(jet_socket_t *s, ub_conn_t *c, jet_iobuf_t *const *bufs, int n)
{
    size_t bytes = 0;
    for (int i = 0; i < n && bytes < UB_WRITE_MAX; i++)
        bytes += jet_iobuf_len(bufs[i]);
    if (bytes > UB_WRITE_MAX) bytes = UB_WRITE_MAX;
    uint32_t want = (uint32_t)((bytes + JET_UBRING_CHUNK_PAYLOAD - 1) / JET_UBRING_CHUNK_PAYLOAD);
    int64_t f = jet__ubring_tx_room(&c->tx, want);
    if (f < 0) {
        JET_WARN_PEER("close %s: the peer wrote an out-of-range UBRing tail", s->peer);
        return -EPROTO;
    }
    size_t room = (size_t)f * JET_UBRING_CHUNK_PAYLOAD;
    if (bytes > room) bytes = room;
    if (bytes == 0) return -EAGAIN;
    ssize_t r = jet__ubring_tx_write(&c->tx, bufs, n, bytes);
    if (r > 0 && c->ul) ubl_wrote(c->ul);
    return r;
}

static ssize_t ub_cut(jet_socket_t *s, jet_hello_ts_t *h, jet_iobuf_t *const *bufs, int n)
{
    ub_conn_t *c = ((ub_ts_t *)h)->conn;
    if (!c) return -JET_EFAILEDSOCKET; /* the socket failed; its writer drops the rest */
    return ub_ring_cut(s, c, bufs, n);
}

static void ub_drain(jet_socket_t *s, jet_hello_ts_t *h)
{
    (void)s;
    ub_conn_t *c = ((ub_ts_t *)h)->conn;
    if (c && c->state == UC_ACTIVE) uc_drain(c);
}

static int ub_wait_writable(jet_socket_t *s, jet_hello_ts_t *h)
{
    (void)s;
    ub_conn_t *c = ((ub_ts_t *)h)->conn;
    if (!c || !c->ul) return 0;
    c->want_out = true;
    ubl_spin(c->ul);
    return 0;
}

static int ub_debug(jet_socket_t *s, char *buf, size_t len)
{
    ub_ts_t *ts = s->tstate;
    int mode = atomic_load(&ts->h.mode);
    int n = jet__hello_debug(&ts->h, buf, len);
    if (n < 0 || (size_t)n >= len) return n;
    ub_conn_t *c = ts->conn;
    if (mode == JET_HELLO_ON && c && jet_loop_in_thread(s->loop)) {
        jet_ubring_ctrl_t *own = jet__ubring_ctrl(c->own.base);
        return n + snprintf(buf + n, len - (size_t)n,
                            "shm=%s cap=%u/%u w=%u r=%u tail=%u writes=%llu chunks_read=%llu "
                            "want_out=%d hb_misses=%u",
                            c->own.name, c->tx.cap, c->rx.cap, c->tx.wpos, c->rx.rpos,
                            jet__ubring_load32(&own->tail), (unsigned long long)c->tx.io_id,
                            (unsigned long long)c->rx.chunks, c->want_out, c->hb_misses);
    }
    if (mode == JET_HELLO_ON) return n;
    return n + jet__tcp_transport.debug(s, buf + n, len - (size_t)n);
}

static const jet_hello_ops_t ub_hello_ops = {
    .name = "UBRing",
    .key = "ubring",
    .hello_max = JET_UBRING_HELLO_MAX,
    .timeout_ms = &JET_FLAG_VAR(ub_handshake_timeout_ms),
    .client_step = ub_client_step,
    .server_hello = ub_server_hello,
    .ack_pack = ub_ack_pack,
    .ack_on = ub_ack_on,
    .go_on = ub_go_on,
    .drop = ub_drop,
    .cut = ub_cut,
    .wait_writable = ub_wait_writable,
    .drain = ub_drain,
};

const jet_transport_ops_t jet__ubring_transport = {
    .name = "ubring",
    .mode = JET_SOCKET_MODE_UBRING,
    .global_init = ub_global_init,
    .init = ub_init,
    .release = ub_release,
    .reset = jet__transport_unsupported_reset,
    .connect = ub_connect,
    .cut_from_iobuf_list = jet__hello_cut,
    .wait_writable = jet__hello_wait_writable,
    .on_input = jet__hello_on_input,
    .debug = ub_debug,
    .close = ub_close,
    .read_resumed = ub_read_resumed,
};
