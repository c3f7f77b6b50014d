/* The transport interface: how a jet_socket moves bytes.
 *
 * One static const jet_transport_ops_t per transport (tcp, ubring, urma),
 * every slot filled (jet__transport_unsupported_* answer -ENOTSUP), registered
 * explicitly by jet__transports_init() under its socket mode. A socket is
 * bound to exactly one transport for its life; the socket never knows which
 * one it carries, and a transport never parses RPC frames: it moves bytes
 * between the socket's write requests / read buffer and the wire.
 *
 * Threads: "loop" = the socket's event-loop thread; "writer" = the thread
 * that currently owns the socket's write side (the thread that found the
 * write queue empty, or the loop after a hand-over; exactly one at a time). */
#ifndef JET_NET_TRANSPORT_H
#define JET_NET_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "jetrpc/iobuf.h"
#include "base/status.h"
#include "jetrpc/options.h"

struct jet_socket;

/* Process-wide options a transport checks at server/channel init. */
typedef struct jet_transport_check {
    bool is_server;
    const char *protocol; /* "baidu_std" */
    bool use_ssl;
} jet_transport_check_t;

typedef struct jet_transport_ops {
    const char *name;
    int mode; /* JET_SOCKET_MODE_* */

    /* Called by jet_server_start and jet_channel_create for this mode, on the
     * caller's thread; may block (loads libraries, creates devices). Checks
     * the options (-EPROTONOSUPPORT for what the transport refuses) and does
     * the global init once. Returns 0 or a negative code. */
    int (*global_init)(const jet_transport_check_t *check);

    /* Binds per-socket state (s->tstate) before the socket is visible to any
     * other thread. Creation thread. May allocate. 0 or -ENOMEM. On failure
     * release is not called. s->loop holds the loop the socket will join
     * (NULL: picked round-robin afterwards); the transport may set it to
     * another loop of the group (a polling transport gathers its
     * connections on the loops that poll). */
    int (*init)(struct jet_socket *s);
    /* Frees per-socket state. Runs once, when the last reference drops, on
     * any thread; the fd is not yet closed; no other slot runs concurrently. */
    void (*release)(struct jet_socket *s);
    /* Returns the state to "just initialised" for reuse. Loop thread. */
    int (*reset)(struct jet_socket *s);

    /* Client side, loop thread, once the TCP connection is established.
     * Returns 0 when the socket may carry data now, 1 when an application
     * handshake is in progress (the transport later calls
     * jet__socket_connected(s, err) on the loop thread), or a negative code
     * (the socket fails with it). */
    int (*connect)(struct jet_socket *s);

    /* Writer thread. Writes what it can of bufs[0..n) in order, now, without
     * blocking, and drops what it wrote from the buffers (their blocks are
     * the transport's to keep referenced until the hardware is done with
     * them). Returns the bytes written (may be less than offered), -EAGAIN
     * when nothing can be taken now (window or kernel buffer full), or
     * another negative code (the socket then fails with it). */
    ssize_t (*cut_from_iobuf_list)(struct jet_socket *s, jet_iobuf_t *const *bufs, int n);

    /* Loop thread, after a write returned -EAGAIN. Arranges for
     * jet__socket_writable(s) to be called (from any thread) once more can be
     * written; must not block. deadline_us (monotonic) is when the socket
     * gives up; the transport may ignore it. 0 or a negative code. */
    int (*wait_writable)(struct jet_socket *s, int64_t deadline_us);

    /* Loop thread, for every epoll event of the socket's fd (edge-triggered:
     * drain or re-post). Appends received bytes to s->read_buf and calls
     * jet__socket_deliver(s) to hand them to the protocol; calls
     * jet__socket_writable(s) on EPOLLOUT; fails the socket on EOF/errors with
     * jet__socket_set_failed. */
    void (*on_input)(struct jet_socket *s, uint32_t events);

    /* One line of state for logs and /status; returns snprintf's result. */
    int (*debug)(struct jet_socket *s, char *buf, size_t len);

    /* Loop thread, once, when the socket has failed: its fd has left epoll
     * and no on_input, connect or wait_writable follows. The transport stops
     * what it runs for the socket outside the fd (hardware queues,
     * completions, timers) and detaches from it, so that nothing touches the
     * socket once the last reference drops; a writer may still be inside
     * cut_from_iobuf_list, and close must not return before it has left.
     * Optional: NULL means nothing to stop (TCP). Runs before the handler's
     * on_failed. */
    void (*close)(struct jet_socket *s);

    /* Any thread. The largest single message (one jet__socket_write) the
     * socket can ever carry now, or 0 for no limit (also while it does not
     * know yet). A larger write is refused with -EMSGSIZE without failing
     * the socket, and `hint` (optional out, static text) tells the user how
     * to raise the limit. Optional: NULL means no limit. */
    size_t (*max_message)(struct jet_socket *s, const char **hint);

    /* Loop thread: a paused input (jet__socket_pause_read) goes on. The
     * transport takes in what it held back outside the fd (credits, a
     * ring); the socket then delivers read_buf and runs
     * on_input(s, EPOLLIN) for the fd. Optional: NULL means only the fd
     * (TCP). */
    void (*read_resumed)(struct jet_socket *s);
} jet_transport_ops_t;

/* Internal socket error JET__EHELLO_REFUSED (base/status.h): the peer closed
 * the connection on the transport's application hello without answering (a
 * brpc TCP-only server closes on a URMA hello), or answered with bytes that
 * are no hello (a server of another protocol). A channel retries such a
 * call at once on a plain TCP connection, not counted as a retry, and uses
 * TCP for that server for transport_reprobe_s; if it cannot retry, the call
 * sees EEOF. Never sent on the wire nor shown to users. */

/* Registers the built-in transports (once; later calls return at once). */
void jet__transports_init(void);
/* Registers a transport; -EEXIST when its mode is taken. */
int jet__transport_register(const jet_transport_ops_t *ops);
/* The transport for a mode, or NULL when none is registered. */
const jet_transport_ops_t *jet__transport_get(int mode);

/* Shared stubs for slots a transport does not support. */
int jet__transport_unsupported_global_init(const jet_transport_check_t *check);
int jet__transport_unsupported_reset(struct jet_socket *s);

extern const jet_transport_ops_t jet__tcp_transport;

#endif
