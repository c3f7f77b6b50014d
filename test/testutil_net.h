/* Network test helpers for the net group and above (library jet_testutil_net,
 * which links jet_net only; nothing here may need jetrpc).
 *
 * - Plain loopback sockets driven by the test thread: listen on port 0,
 *   accept, connect, and reads and writes bounded by poll.
 * - jt_conn_t: a buffered non-blocking connection that reads whatever comes
 *   while it writes, so that a peer answering mid-write never blocks on us.
 * - Endpoints: jet sockets whose handler records what it saw (bytes, ready,
 *   failed, released, which thread), and a listener whose accepted
 *   connections become such endpoints.
 *
 * Every wait is bounded; the bounds are guards, never timing assertions. */
#ifndef JET_TESTUTIL_NET_H
#define JET_TESTUTIL_NET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "jetrpc/iobuf.h"
#include "net/listener.h"
#include "net/socket.h"
#include "testutil.h"

/* ---- plain loopback sockets ----------------------------------------------- */

/* A TCP socket listening on 127.0.0.1 at a free port (written to *port_p):
 * the fd, or -errno. */
int jt_tcp_listen(int backlog, int *port_p);
/* The same, with the address to connect to in *addr. */
int jt_tcp_listen_addr(int backlog, jet_addr_t *addr);
/* A loopback port where nothing listens (bound once, then released). Aborts
 * when no port can be had. */
int jt_tcp_free_port(void);
/* One connection from listening socket lfd within timeout_ms: the fd
 * (blocking, close-on-exec), or -1. */
int jt_tcp_accept(int lfd, int timeout_ms);
/* A blocking connection to 127.0.0.1:port with TCP_NODELAY and, when
 * rcv_timeout_s > 0, SO_RCVTIMEO: the fd, or -errno. */
int jt_tcp_connect(int port, int rcv_timeout_s);
/* 0 when a TCP connect to 127.0.0.1:port succeeds (the socket is closed
 * again at once), else -errno. */
int jt_tcp_connect_result(int port);

/* true when every byte went out (false also when the peer closed first). */
bool jt_send_all(int fd, const void *data, size_t n);
/* Blocking read of exactly n bytes. 1: read; 0: the peer closed (EOF or
 * reset) before; -1: another error, such as SO_RCVTIMEO running out. */
int jt_recv_exact(int fd, void *buf, size_t n);
/* Reads up to len bytes, waiting at most timeout_ms for each piece: the
 * bytes read, less than len on timeout or EOF. */
size_t jt_read_full(int fd, void *buf, size_t len, int timeout_ms);

/* ---- buffered non-blocking connection ------------------------------------- */

/* Bound on a jt_conn_write. */
#define JT_CONN_IO_TIMEOUT_MS 10000

typedef struct jt_conn {
    int fd;
    uint8_t *buf;
    size_t off, len, cap; /* unread bytes: buf[off .. len) */
    int closed;           /* 0 open; 1 EOF; -errno */
} jt_conn_t;

/* Connects to 127.0.0.1:port (TCP_NODELAY, non-blocking). 0 or -errno
 * (c->fd is -1 then). */
int jt_conn_open(jt_conn_t *c, int port);
/* Takes over a connected fd (made non-blocking). */
void jt_conn_init(jt_conn_t *c, int fd);
/* Closes the fd and frees the buffer; c->fd is -1 afterwards. */
void jt_conn_close(jt_conn_t *c);
static inline size_t jt_conn_avail(const jt_conn_t *c)
{
    return c->len - c->off;
}
static inline const uint8_t *jt_conn_data(const jt_conn_t *c)
{
    return c->buf + c->off;
}
static inline void jt_conn_consume(jt_conn_t *c, size_t n)
{
    c->off += n;
}
/* Waits up to timeout_ms for input and reads what is there. 1: read, or
 * nothing yet; -1: the connection is closed (c->closed says how). */
int jt_conn_pump(jt_conn_t *c, int timeout_ms);
/* Writes all of p within JT_CONN_IO_TIMEOUT_MS, reading meanwhile. 0 or
 * -errno (-ETIMEDOUT). */
int jt_conn_write(jt_conn_t *c, const void *p, size_t n);
/* Exactly n bytes into out. true when they came in time. */
bool jt_conn_read_exact(jt_conn_t *c, void *out, size_t n, int timeout_ms);
/* Waits for the peer to close. true when it did in time. */
bool jt_conn_wait_closed(jt_conn_t *c, int timeout_ms);

/* ---- jet socket endpoints ------------------------------------------------- */

/* Bound on the waits of jt_ep_close and jt_srv_conn. */
#define JT_EP_GUARD_US (20LL * 1000 * 1000)

/* What an endpoint's on_read does with the bytes. */
enum jt_ep_kind {
    JT_EP_COLLECT, /* keeps every byte received (ep->got) */
    JT_EP_ECHO,    /* writes back every byte received */
    JT_EP_COUNT,   /* checks the bytes against jt_stream_byte and counts them */
    JT_EP_CUSTOM,  /* hooks->on_read */
};

typedef struct jt_ep jt_ep_t;
typedef struct jt_srv jt_srv_t;

/* Test-specific additions to an endpoint; every slot may be NULL. */
typedef struct jt_ep_hooks {
    void (*on_new)(jt_ep_t *ep);                    /* before the socket exists: set ep->user */
    void (*on_free)(jt_ep_t *ep);                   /* when the endpoint is freed */
    void (*on_read)(jt_ep_t *ep, jet_socket_t *s);  /* JT_EP_CUSTOM */
    void (*on_ready)(jt_ep_t *ep, jet_socket_t *s); /* before ep->ready counts it */
} jt_ep_hooks_t;

struct jt_ep {
    jet_socket_t *s; /* the creator's reference */
    int kind;
    jt_srv_t *srv; /* the server that accepted it, or NULL */
    const jt_ep_hooks_t *hooks;
    void *user;
    pthread_mutex_t lock;
    jet_iobuf_t got; /* JT_EP_COLLECT, under lock */
    _Atomic int64_t nbytes;
    _Atomic int ready, failed, released, reads;
    _Atomic int err;
    _Atomic int off_loop;  /* callbacks off the socket's loop thread (+1000: on_ready not READY) */
    _Atomic int write_err; /* JT_EP_ECHO: writes back that failed */
    _Atomic int64_t first_bad;  /* JT_EP_COUNT: first stream offset that differed, or -1 */
    _Atomic int64_t ready_mark; /* free for hooks->on_ready */
};

/* Sockets created through jt_ep_connect and jt_srv accepts, and endpoint
 * sockets released (by anyone), over the process. */
extern _Atomic int jt_ep_created, jt_ep_released;
extern const jet_socket_handler_t jt_ep_handler;

jt_ep_t *jt_ep_new(int kind, const jt_ep_hooks_t *hooks);
void jt_ep_free(jt_ep_t *ep);
/* jet__socket_connect with an endpoint as owner. NULL on failure (its code
 * in *rc_p when given, and printed). */
jt_ep_t *jt_ep_connect(const jet_addr_t *addr, int mode, int kind, int32_t timeout_ms,
                       const jt_ep_hooks_t *hooks, int *rc_p);
/* Fails the socket (when ep->s is set), drops the creator's reference and
 * waits for the release. true when on_release ran exactly once; then ep is
 * freed. Otherwise ep is leaked on purpose: a late release would touch it. */
bool jt_ep_close(jt_ep_t *ep);
/* Copies up to max collected bytes. */
size_t jt_ep_got_copy(jt_ep_t *ep, void *dst, size_t max);
/* jet__socket_write of a copy of p. With require_moved, a write that leaves
 * bytes in the caller's buffer returns -12345 (the data must be moved out in
 * every case). */
int jt_socket_write_bytes(jet_socket_t *s, const void *p, size_t len, bool require_moved);

/* A listener whose accepted connections become endpoints, each on a loop of
 * the group (another than the listener's, as a server does). */
#define JT_SRV_MAX_CONNS 64

struct jt_srv {
    jet_listener_t *l;
    jet_addr_t addr; /* where clients connect */
    int mode, kind;
    int rcvbuf; /* > 0: SO_RCVBUF of accepted sockets */
    const jt_ep_hooks_t *hooks;
    pthread_mutex_t lock;
    jt_ep_t *eps[JT_SRV_MAX_CONNS];
    _Atomic int n;
};

/* Listens on text ("127.0.0.1:0", "unix:/path"). NULL on failure (printed). */
jt_srv_t *jt_srv_start(const char *text, int mode, int kind, int rcvbuf,
                       const jt_ep_hooks_t *hooks);
/* The i-th accepted connection, once it exists (NULL after JT_EP_GUARD_US). */
jt_ep_t *jt_srv_conn(jt_srv_t *srv, int i);
/* Closes the listener and every accepted endpoint; true when each was
 * released once. */
bool jt_srv_stop(jt_srv_t *srv);

#endif
