/* The TCP-composed hello shared by the transports that start every connection
 * as TCP and switch to their own data plane after a hello (URMA, UBRing).
 *
 * Such a transport embeds jet_hello_ts_t FIRST in its per-socket state (so
 * that s->tstate points at both) and describes itself with one static
 * jet_hello_ops_t. This file owns what the two have in common:
 *   - the tri-state mode UNKNOWN -> ON | OFF, read by writer threads;
 *   - the handshake phase, the bytes read from TCP during the handshake
 *     (hs_buf) and the handshake timer;
 *   - on_input while UNKNOWN (read into hs_buf, run the client or server
 *     step, go on as TCP when OFF), while ON (TCP only tells that the peer is
 *     gone) and while OFF (plain TCP);
 *   - EOF on the client's hello -> JET__EHELLO_REFUSED (a TCP-only server);
 *   - the server's ACK phase and the client's ACK, with their checks;
 *   - the writer_in / closed handshake between writers and close;
 *   - cut_from_iobuf_list and wait_writable delegating to TCP unless ON.
 * The transport keeps its hello format, its data plane, and its logs' name.
 *
 * Threads: as in net/transport.h. Every jet__hello_* function below runs on
 * the socket's loop thread, except jet__hello_cut / jet__hello_wait_writable
 * (the slots' own threads) and jet__hello_check (global_init's). */
#ifndef JET_NET_HELLO_TRANSPORT_H
#define JET_NET_HELLO_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "event/loop.h"
#include "jetrpc/iobuf.h"
#include "net/transport.h"

struct jet_socket;

enum { JET_HELLO_UNKNOWN = 0, JET_HELLO_ON = 1, JET_HELLO_OFF = 2 };
enum {
    JET_HELLO_HS_NONE = 0,
    JET_HELLO_HS_C_HELLO_WAIT, /* client: hello sent, waiting for the server's */
    JET_HELLO_HS_S_HELLO_WAIT, /* server: waiting for the client's hello */
    JET_HELLO_HS_S_ACK_WAIT,   /* server: answered, waiting for the client's ACK */
    JET_HELLO_HS_PENDING,      /* the transport prepares its next step off the loop
                                  (imports); input waits in hs_buf, the timer runs */
};

/* The ACK is 4 bytes for every transport; a brpc client that falls back
 * without one sends its first "PRPC" request instead. */
#define JET_HELLO_ACK_LEN 4

enum { JET_HELLO_STEP_MORE = 0, JET_HELLO_STEP_DONE = 1, JET_HELLO_STEP_NOT_HELLO = 2 };

typedef struct jet_hello_ts jet_hello_ts_t;

typedef struct jet_hello_ops {
    const char *name;          /* in logs: "URMA", "UBRing" */
    const char *key;           /* socket_mode name and debug key: "urma", "ubring" */
    size_t hello_max;          /* largest hello; more unconsumed bytes fail the socket */
    const int32_t *timeout_ms; /* the handshake timeout flag (<= 0: none), read atomically */

    /* Client, after each read while waiting for the server's hello: parse
     * jet__hello_flatten's bytes, pop what is consumed from h->hs_buf, then
     * call jet__hello_client_finish or fail the socket; return with nothing
     * done while the hello is incomplete. Or set h->hs = PENDING and call
     * jet__hello_client_finish later, from a task on the socket's loop. */
    void (*client_step)(struct jet_socket *s, jet_hello_ts_t *h);
    /* Server, while waiting for the client's hello, hs_buf not empty: looks
     * at jet__hello_flatten's bytes and returns JET_HELLO_STEP_NOT_HELLO (a
     * TCP client: its bytes go to the parser), JET_HELLO_STEP_MORE (an
     * incomplete hello, nothing consumed; the transport arms the timer with
     * jet__hello_timer_start once it sees a hello start), JET_HELLO_STEP_DONE
     * (a hello popped from hs_buf and answered: h->said_yes set, h->hs =
     * S_ACK_WAIT; or h->hs = PENDING: the answer follows from a task on the
     * socket's loop, which then calls jet__hello_server_answered), or a
     * negative code after failing the socket. */
    int (*server_hello)(struct jet_socket *s, jet_hello_ts_t *h);
    void (*ack_pack)(uint8_t out[JET_HELLO_ACK_LEN], bool on);
    bool (*ack_on)(const uint8_t in[JET_HELLO_ACK_LEN]);
    /* Both sides agreed on the transport: start the data plane, calling
     * jet__hello_set_on once writers may use it. 0, or a negative code (the
     * socket fails with it). */
    int (*go_on)(struct jet_socket *s, jet_hello_ts_t *h);
    /* The connection stays TCP: release the data plane's resources. */
    void (*drop)(struct jet_socket *s, jet_hello_ts_t *h);
    /* Writer thread, mode ON and the socket not closed: the data plane's
     * cut_from_iobuf_list. */
    ssize_t (*cut)(struct jet_socket *s, jet_hello_ts_t *h, jet_iobuf_t *const *bufs, int n);
    /* Loop thread, mode ON: the data plane's wait_writable. */
    int (*wait_writable)(struct jet_socket *s, jet_hello_ts_t *h);
    /* Loop thread, mode ON, the TCP connection just ended (EOF) and the socket
     * about to fail: deliver what the peer wrote into the data plane before,
     * as TCP delivers the bytes before its EOF (optional; bounded). */
    void (*drain)(struct jet_socket *s, jet_hello_ts_t *h);
} jet_hello_ops_t;

struct jet_hello_ts {
    const jet_hello_ops_t *ops;
    _Atomic int mode; /* JET_HELLO_*; read by writer threads */
    int hs;           /* JET_HELLO_HS_* (loop thread) */
    bool said_yes;    /* server: our hello accepted the transport */
    struct jet_socket *s;
    jet_iobuf_t hs_buf; /* handshake bytes read from TCP, not yet consumed */
    jet_timer_t timer;
    int32_t timer_ms;       /* the handshake timeout the timer was armed with */
    _Atomic bool writer_in; /* a writer is inside the data plane */
    _Atomic bool closed;
};

/* global_init's checks: SSL and protocols other than baidu_std are refused
 * with a log line naming the transport (-EPROTONOSUPPORT); else 0. */
int jet__hello_check(const jet_hello_ops_t *ops, const jet_transport_check_t *check);

/* Creation thread: initialises h for s (mode UNKNOWN when `available`, else
 * OFF: plain TCP, a hello reaching this server is declined by it). */
void jet__hello_init(jet_hello_ts_t *h, struct jet_socket *s, const jet_hello_ops_t *ops,
                     bool available);
/* Frees hs_buf (release). */
void jet__hello_fini(jet_hello_ts_t *h);
/* close, first step: stops the timer, marks the state closed and waits until
 * no writer is inside the data plane; the transport then closes the data
 * plane, which no writer enters again. */
void jet__hello_close(struct jet_socket *s, jet_hello_ts_t *h);

/* Sends a whole handshake message on the TCP socket (tiny, first on a fresh
 * connection: the kernel buffer takes it whole or the connection is broken).
 * 0, -JET_EEOF when the peer is gone, or another negative code. */
int jet__hello_send(struct jet_socket *s, const void *buf, size_t len);
/* Arms the handshake timer unless armed or disabled; on expiry while still
 * UNKNOWN the socket fails with -ETIMEDOUT. */
void jet__hello_timer_start(struct jet_socket *s, jet_hello_ts_t *h);
/* Copies the first min(len, ops->hello_max) bytes of hs_buf into flat
 * (ops->hello_max bytes of room); returns how many. */
size_t jet__hello_flatten(jet_hello_ts_t *h, uint8_t *flat);

/* The connection stays TCP: drops the data plane, mode OFF, and hands what
 * hs_buf holds to the protocol parser (may fail the socket with -ENOMEM). */
void jet__hello_go_off(struct jet_socket *s, jet_hello_ts_t *h);
/* Called by ops->go_on: stops the timer, ends the handshake, mode ON
 * (release: what go_on set before is seen by writers that see ON). */
void jet__hello_set_on(struct jet_socket *s, jet_hello_ts_t *h);
/* Client: sends the ACK (on or not), then goes on (hs_buf must be empty) or
 * off, and reports the socket connected; fails the socket on any error. */
void jet__hello_client_finish(struct jet_socket *s, jet_hello_ts_t *h, bool on);

/* Server, after a PENDING answer was sent (said_yes set, hs = S_ACK_WAIT):
 * handles the bytes that arrived meanwhile. */
void jet__hello_server_answered(struct jet_socket *s, jet_hello_ts_t *h);

/* Writes "<key>=<mode> hs=<phase> " for the debug slot; snprintf's result. */
int jet__hello_debug(jet_hello_ts_t *h, char *buf, size_t len);

/* Transport slots, for a socket whose s->tstate starts with a jet_hello_ts_t. */
void jet__hello_on_input(struct jet_socket *s, uint32_t events);
ssize_t jet__hello_cut(struct jet_socket *s, jet_iobuf_t *const *bufs, int n);
int jet__hello_wait_writable(struct jet_socket *s, int64_t deadline_us);

#endif
