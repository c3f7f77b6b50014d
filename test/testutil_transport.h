/* Test helpers for the transports that run whole RPC stacks across processes
 * (the urma and ubring groups; library jet_testutil_transport, which links
 * jetrpc and jet_testutil_net).
 *
 * - The test binary re-executed as a child: "role=server" children print
 *   their port on stdout and serve until their stdin (the parent's end of a
 *   pipe) closes, so they never outlive the test; other roles run to their
 *   end under a guard.
 * - Raw loopback sockets beyond testutil_net: reads bounded in total time,
 *   EOF waits, a two-way pump, and a fake server that runs a function per
 *   accepted connection in its own thread.
 * - Echo calls with an attachment of stream bytes, checked byte for byte,
 *   one at a time or in asynchronous batches.
 *
 * Every wait is bounded; the bounds are guards, never timing assertions. */
#ifndef JET_TESTUTIL_TRANSPORT_H
#define JET_TESTUTIL_TRANSPORT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "testutil.h"
#include "testutil_net.h"

/* ---- the test binary as a child ------------------------------------------------ */

/* This executable's path (/proc/self/exe), set by jt_self_init. */
extern char jt_self[1024];
/* Call first in main: sets jt_self and ignores SIGPIPE. */
void jt_self_init(void);

typedef struct jt_child {
    pid_t pid;
    int port;
    int in_fd; /* the child's stdin: closing it stops the child */
} jt_child_t;

/* Starts jt_self with "role=server" and args (NULL-terminated), envs
 * ("NAME=value", NULL-terminated; may be NULL) added to its environment, and
 * reads the port it prints (guard 20 s). 0 and *c filled, or -1 (the child
 * is then gone). */
int jt_child_start(jt_child_t *c, const char *const *args, const char *const *envs);
/* Closes the child's stdin and waits for it (guard 20 s): its exit status
 * (128 + signal when killed by one), or -1 when it had to be killed. */
int jt_child_stop(jt_child_t *c);
/* Kills the child at once and reaps it. */
void jt_child_kill(jt_child_t *c);
/* Starts jt_self with argv "<role>" args..., envs as for jt_child_start, and
 * returns at once: its pid, or -1. The caller reaps it. */
pid_t jt_spawn_role(const char *role, const char *const *args, const char *const *envs);
/* Runs jt_self with argv "<role>" args..., envs as for jt_child_start, to its
 * end: its exit status, or -1 when it still ran after guard_ms (killed). */
int jt_run_role(const char *role, const char *const *args, const char *const *envs, int guard_ms);

/* The end of a "role=server" child: prints port on stdout, serves until
 * stdin closes, then destroys srv. Returns 0 (the child's exit status). */
int jt_serve_until_stdin_closes(jet_server_t *srv, int port);

/* ---- raw sockets ------------------------------------------------------------------- */

/* Reads exactly n bytes within timeout_ms in all: n, or what came before
 * EOF or the timeout. */
size_t jt_read_n(int fd, void *buf, size_t n, int timeout_ms);
/* true when the peer closed fd (EOF or reset) within timeout_ms; bytes read
 * meanwhile are dropped. */
bool jt_wait_eof(int fd, int timeout_ms);
/* Pumps bytes both ways between a and b until either closes (or 30 s of
 * silence); closes both. The first first_bytes bytes of each direction go
 * one byte per send, with a pause between them. */
void jt_pump(int a, int b, size_t first_bytes);

/* A fake server: a thread accepts connections on a fresh loopback port and
 * runs fn(fd, index, arg) for each in its own thread (fn owns fd). */
typedef void (*jt_fake_fn)(int fd, int index, void *arg);
typedef struct jt_fake {
    int lfd, port;
    jt_fake_fn fn;
    void *arg;
    _Atomic int accepted, running;
    _Atomic bool stop;
    pthread_t th;
} jt_fake_t;

void jt_fake_start(jt_fake_t *f, jt_fake_fn fn, void *arg);
/* Stops accepting and waits (guard 40 s) for the connection threads. */
void jt_fake_stop(jt_fake_t *f);

/* A brpc server without the transport, in front of a real TCP server: a
 * connection whose first head_len bytes are one of the transport's magics
 * (a hello) is closed after reading up to rest_len more bytes for rest_ms
 * (brpc: "unknown message"; with answer, after sending it); any other is
 * proxied to real_port. For
 * jt_fake_start with jt_closer_fn and the closer as arg. */
typedef struct jt_closer {
    int real_port;
    size_t head_len;       /* at most 8 */
    const char *magics[4]; /* NULL-terminated */
    size_t rest_len;       /* at most 256 */
    int rest_ms;
    bool reset;            /* close with a reset (SO_LINGER 0), as a crashing server */
    const char *answer;    /* sent back before the close (a server of another protocol) */
    _Atomic int hellos, proxied;
} jt_closer_t;

void jt_closer_fn(int fd, int index, void *arg);

/* ---- echo calls with stream bytes ---------------------------------------------------- */

/* Appends len stream bytes from offset seed to call's request attachment. */
void jt_echo_fill(jet_call_t *call, size_t len, uint64_t seed);
/* 0 when call's answer is message msg and attachment len stream bytes from
 * seed, byte for byte; the error code when it failed; -1 for wrong bytes
 * (said on stderr). */
int jt_echo_check(jet_call_t *call, const char *msg, size_t len, uint64_t seed);
/* One synchronous Echo(msg, NULL: "hi") with len bytes from seed; see
 * jt_echo_check. */
int jt_echo_bytes(jet_channel_t *ch, size_t len, uint64_t seed, const char *msg);

typedef struct jt_batch {
    _Atomic int done, bad, failed;
    _Atomic int first_err; /* the first error code seen, 0 while none */
} jt_batch_t;

typedef struct jt_slot {
    jt_batch_t *b;
    uint64_t seed;
    size_t len;
    int64_t done_ms; /* jt_now_ms() when its done ran */
    jet_call_t *call;
    Example__EchoRequest req;
} jt_slot_t;

/* Prepares n calls with message msg, of len bytes each (len_step added per
 * call), seeds from seed0. */
jt_slot_t *jt_slots_new(jt_batch_t *b, int n, const char *msg, size_t len, size_t len_step,
                        uint64_t seed0);
/* Issues them all asynchronously on ch. */
void jt_slots_issue(jet_channel_t *ch, jt_slot_t *sl, int n);
/* Frees the slots once all are done (within guard_us); true then. Leaks them
 * on purpose otherwise (a late done would touch them). */
bool jt_slots_free(jt_batch_t *b, jt_slot_t *sl, int n, int64_t guard_us);
/* n asynchronous echoes ("batch") of len (+ i * step) bytes at once on ch:
 * how many failed or came back wrong (n when they did not all end within
 * guard_us); the first error code in *first_err_p when given. */
int jt_async_batch(jet_channel_t *ch, int n, size_t len, size_t step, int64_t guard_us,
                   int *first_err_p);

#endif
