/* jet_socket: one connection (client or accepted), its read buffer, its
 * wait-free write queue and its life cycle.
 *
 * Life cycle: a socket is created with one reference (the creator's); being
 * registered in its loop holds another. jet__socket_set_failed() marks it
 * failed once (first error wins), shuts the fd down and schedules the
 * teardown on the loop thread: the fd leaves epoll, pending writes are
 * dropped, the handler's on_failed runs, and the loop's reference is
 * dropped. The fd is closed and the transport released when the last
 * reference goes. Anyone who keeps the pointer holds a reference.
 *
 * Writes: jet__socket_write() may be called from any thread. The caller that
 * finds the queue empty becomes the writer and writes directly from its own
 * thread (no hop on the uncontended path); concurrent callers just link
 * their request and return. When the transport answers -EAGAIN the loop
 * takes over the write side and resumes when jet__socket_writable() says so.
 * Bytes of one write request are never interleaved with another's.
 *
 * Reads: the transport's on_input appends bytes to read_buf on the loop
 * thread and calls jet__socket_deliver(), which runs handler->on_read. */
#ifndef JET_NET_SOCKET_H
#define JET_NET_SOCKET_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "event/loop.h"
#include "jetrpc/iobuf.h"
#include "net/transport.h"

typedef struct jet_socket jet_socket_t;

typedef enum jet_socket_state {
    JET_SOCK_CONNECTING = 0, /* TCP connect in progress */
    JET_SOCK_HANDSHAKE = 1,  /* transport's application handshake */
    JET_SOCK_READY = 2,
    JET_SOCK_FAILED = 3,
} jet_socket_state_t;

/* What the owner of a socket (a server, a channel) is told. Callbacks run on
 * the socket's loop thread. */
typedef struct jet_socket_handler {
    /* New bytes in s->read_buf. Consume what forms whole messages. */
    void (*on_read)(jet_socket_t *s);
    /* The socket failed with err (negative code); runs once. */
    void (*on_failed)(jet_socket_t *s, int err);
    /* Client sockets: connected and handshake done. May be NULL. */
    void (*on_ready)(jet_socket_t *s);
    /* The last reference is going: free what owner points to. Any thread.
     * May be NULL. Not called when connect/accept fail (the caller keeps it). */
    void (*on_release)(jet_socket_t *s);
    /* A queued message (one jet__socket_write) that the transport refused
     * when it came to write it, as larger than the connection ever carries
     * (a write made before the handshake told the limit): it is out of the
     * queue, msg holds it whole for the handler to read (the socket empties
     * it afterwards), and the connection goes on. Runs on the writing
     * thread, which may be the caller's. May be NULL: the socket fails with
     * -EMSGSIZE instead. */
    void (*on_refused)(jet_socket_t *s, jet_iobuf_t *msg);
    /* A read found no memory for s's input (the iobuf cap is reached): the
     * owner may free some by closing other connections. True when it closed
     * one, or one it closed before has yet to give its memory back, so that
     * a read may soon succeed: the socket tries again shortly instead of
     * failing with -ENOMEM. Loop thread. May be NULL. */
    bool (*on_nomem)(jet_socket_t *s);
} jet_socket_handler_t;

typedef struct jet_addr {
    union {
        struct sockaddr sa;
        struct sockaddr_in in4;
        struct sockaddr_in6 in6;
        struct sockaddr_un un;
    } u;
    socklen_t len;
} jet_addr_t;

/* Parses "ip:port", ":port", "port", "host:port", "[v6]:port", "unix:/path".
 * 0 or -EINVAL. */
int jet__addr_parse(const char *text, jet_addr_t *addr);
/* "ip:port" or the unix path. */
void jet__addr_format(const jet_addr_t *addr, char *buf, size_t len);

typedef struct jet_write_req {
    _Atomic(struct jet_write_req *) next;
    jet_iobuf_t data;
} jet_write_req_t;

struct jet_socket {
    _Atomic int32_t refcnt;
    _Atomic int32_t state; /* jet_socket_state_t */
    _Atomic int32_t error; /* first failure, negative */
    int fd;
    int mode;
    bool is_server_side;
    jet_loop_t *loop;
    jet_io_t io;
    const jet_transport_ops_t *ops;
    void *tstate; /* transport's per-socket state */
    const jet_socket_handler_t *handler;
    void *owner;     /* the owner's per-connection state */
    char peer[64];   /* "ip:port" of the other end, for every log line */
    char local[64];  /* "ip:port" of this end */
    jet_addr_t addr;

    /* read side: loop thread only */
    jet_iobuf_t read_buf;
    jet_task_t read_task; /* resumes reading when a read budget ran out */
    bool read_posted;
    bool peer_hup; /* EPOLLRDHUP/HUP/ERR seen: read to EOF, not to a short read */
    _Atomic bool read_paused;   /* jet__socket_pause_read */
    _Atomic bool resume_posted; /* resume_task is on its way */
    jet_task_t resume_task;
    bool read_yielded; /* the pause is jet__socket_yield_read's (loop thread) */
    /* Bytes on_read left in read_buf (part of a message), for an owner
     * that looks for memory to free from another thread. */
    _Atomic size_t read_held;
    jet_timer_t nomem_timer; /* reads again after jet__socket_read_nomem */
    uint32_t nomem_tries;    /* such retries since the last read that got memory */

    /* write side */
    _Atomic(jet_write_req_t *) write_head; /* newest request; NULL = no writer */
    jet_write_req_t *w_first;              /* writer's FIFO list, oldest first */
    jet_write_req_t *w_last;               /* newest request the writer knows */
    _Atomic int64_t unwritten;             /* bytes queued and not written */
    jet_task_t write_task;                 /* hands the write side to the loop */
    bool wait_ready;                       /* writer waits for READY (loop thread) */
    bool wait_out;                         /* writer waits for jet__socket_writable */
    bool corked;                           /* jet__socket_cork (loop thread) */
    bool cork_owed;                        /* a write was queued while corked: the uncork writes */
    _Atomic bool writable_posted;

    jet_task_t fail_task;
    jet_task_t ctl_task; /* arms the connect timer on the loop */
    jet_timer_t connect_timer;
    int64_t connect_deadline_us;
    _Atomic int64_t last_active_us; /* last read or write, for idle timeouts */
};

/* Connects to addr in mode (non-blocking; the result comes through the
 * handler: on_ready, or on_failed). connect_timeout_ms < 0: no limit.
 * *s_p gets a socket with one reference for the caller. */
int jet__socket_connect(const jet_addr_t *addr, int mode, const jet_socket_handler_t *handler,
                        void *owner, int32_t connect_timeout_ms, jet_socket_t **s_p);
/* Wraps an accepted fd (server side), registers it in loop. One reference
 * for the caller. */
int jet__socket_accept(int fd, const jet_addr_t *peer, int mode, jet_loop_t *loop,
                       const jet_socket_handler_t *handler, void *owner, jet_socket_t **s_p);

static inline void jet__socket_ref(jet_socket_t *s)
{
    atomic_fetch_add_explicit(&s->refcnt, 1, memory_order_relaxed);
}
void jet__socket_unref(jet_socket_t *s);

static inline bool jet__socket_failed(const jet_socket_t *s)
{
    return atomic_load_explicit(&s->state, memory_order_acquire) == JET_SOCK_FAILED;
}

/* Queues data (moved out of *data, which is left empty) for writing. Any
 * thread; the caller holds a reference. 0, the socket's error if it has
 * failed, -JET_EOVERCROWDED when too many bytes wait, or -EMSGSIZE when the
 * data is larger than the transport ever carries (its max_message slot);
 * the last two leave the socket working. */
int jet__socket_write(jet_socket_t *s, jet_iobuf_t *data);
/* jet__socket_write for a server's answers: never -JET_EOVERCROWDED (as
 * brpc's answers, written with ignore_eovercrowded: a request already taken
 * is answered, however many bytes wait; servers bound their backlog with
 * max_concurrency). */
int jet__socket_write_answer(jet_socket_t *s, jet_iobuf_t *data);

/* The text for a message of `len` bytes refused with -EMSGSIZE: what was
 * too large, the transport's limit and how to raise it. `what` names the
 * message ("request", "response"). */
void jet__socket_size_error(jet_socket_t *s, const char *what, size_t len, char *buf,
                            size_t size);

/* Loop thread: while corked, what the loop writes on s is queued, not yet
 * written; the uncork (on false) writes all of it, so that answers to
 * requests that came together leave together (one system call for the
 * batch, not one each). Writes of other threads are not held. */
void jet__socket_cork(jet_socket_t *s, bool on);

/* Marks the socket failed with err (negative); first call wins. Any thread. */
void jet__socket_set_failed(jet_socket_t *s, int err);

/* Transport → socket notifications. */
void jet__socket_deliver(jet_socket_t *s);           /* loop thread */
void jet__socket_writable(jet_socket_t *s);          /* any thread */
void jet__socket_connected(jet_socket_t *s, int err); /* loop thread */

/* Loop thread: the transport stopped reading with bytes possibly left (its
 * read budget ran out); on_input(s, EPOLLIN) runs again after other work. */
void jet__socket_post_read(jet_socket_t *s);

/* Loop thread: a read of the transport found no memory for input, and took
 * nothing from the peer. True when the socket reads again shortly
 * (on_input(s, EPOLLIN) on a timer) because the owner's on_nomem freed
 * memory, or a retry after such a freeing is still due; false when the
 * transport is to fail the socket with -ENOMEM (no owner freed any, or
 * memory stayed short through SOCK_NOMEM_TRIES retries). A read that gets
 * memory calls jet__socket_read_got_memory. */
bool jet__socket_read_nomem(jet_socket_t *s);
static inline void jet__socket_read_got_memory(jet_socket_t *s)
{
    s->nomem_tries = 0;
}

/* Input flow control, for a server whose peer sends requests and does not
 * read the answers: without it the answers would queue without limit.
 * Loop thread. When more than socket_max_unwritten_bytes wait to be
 * written, the owner calls jet__socket_pause_read() from on_read and takes
 * no more messages; the transports stop taking input while
 * jet__socket_read_paused() (TCP leaves the bytes in the kernel, UBRing in
 * its ring, URMA keeps back the credits of its receives, so the peer stops
 * for want of room or credits). Once the queue has drained to half the limit the
 * socket goes on by itself: read_resumed, then on_read for what read_buf
 * holds, then on_input(s, EPOLLIN). Returns true when it paused, false when
 * the socket is not that far behind (or the limit is 0: none). */
bool jet__socket_pause_read(jet_socket_t *s);
/* Loop thread, from on_read: the owner has taken its share of this loop
 * pass and leaves the rest of read_buf (and of the peer's input) for a
 * later one, after the loop's other connections. A pause that the socket
 * resumes by itself in the next pass (read_resumed, on_read, on_input),
 * unless jet__socket_pause_read's limit holds it longer. */
void jet__socket_yield_read(jet_socket_t *s);
static inline bool jet__socket_read_paused(const jet_socket_t *s)
{
    return atomic_load_explicit(&s->read_paused, memory_order_relaxed);
}

int jet__socket_debug(jet_socket_t *s, char *buf, size_t len);

#endif
