/* Peer imports, and other provider calls that may block, off the event loops.
 *
 * Importing a peer's segment and jetty may take milliseconds on UB hardware
 * (the provider sets up a transport path with the peer); done on a loop
 * thread it would stall every other connection of that loop. The handshake
 * hands the import to the process's import threads instead (up to 4,
 * started on demand, so one slow peer does not hold the others) and goes
 * on when the result comes back as a task on the socket's loop.
 *
 * An import thread only calls the provider and reads whether the socket
 * failed (a job whose connection failed while queued is skipped): it never
 * touches the transport state or the endpoint. The task that brings the result
 * back decides, on the loop, whether the connection still wants it (it may
 * have failed, timed out or closed meanwhile) and otherwise unimports it. */
#ifndef JET_URMA_URMA_IMPORT_H
#define JET_URMA_URMA_IMPORT_H

#include "event/loop.h"
#include "net/socket.h"
#include "urma/urma_api.h"
#include "urma/urma_context.h"
#include "urma/urma_handshake.h"

/* A provider call that may block (imports, queue creation), run on the
 * import threads: run() there, then the task is posted to loop, whose
 * callback owns the work from then on. */
typedef struct jet_urma_work {
    jet_task_t task; /* fn: the loop side, set by the caller */
    jet_loop_t *loop;
    void (*run)(struct jet_urma_work *w);
    bool urgent; /* a handshake waits for it: taken before the other work */
    struct jet_urma_work *next; /* the import threads' queue */
} jet_urma_work_t;

/* Any thread: queues w (task.fn, loop and run set). 0, or -EAGAIN when no
 * import thread can be started (nothing queued). */
int jet__urma_work_start(jet_urma_work_t *w);

typedef struct jet_urma_import jet_urma_import_t;

/* Loop thread of job->s: the import is done (err 0: tseg and tjetty are
 * set and now the callee's; else both NULL). The callee frees job with
 * jet__urma_import_free. */
typedef void (*jet_urma_import_done_t)(jet_urma_import_t *job);

struct jet_urma_import {
    jet_urma_work_t work;
    jet_socket_t *s; /* referenced until jet__urma_import_free */
    void *tag;       /* the caller's: which attempt of the connection asked */
    jet_urma_hello_t peer;
    jet_urma_import_done_t done;
    urma_target_seg_t *tseg;
    urma_target_jetty_t *tjetty;
    int err;
};

/* Imports peer's segment, then its jetty (brpc's order), with the zero token
 * brpc uses. Any thread. 0, or -EIO with one log line (nothing imported);
 * none when s, the connection the import is for (or NULL), failed meanwhile:
 * closed or timed out, its peer may have taken the jetty down, and nobody
 * waits for the import. */
int jet__urma_import_peer(const jet_urma_ctx_t *ctx, const jet_urma_hello_t *peer, const char *who,
                          const jet_socket_t *s, urma_target_seg_t **tseg_p,
                          urma_target_jetty_t **tjetty_p);

/* Loop thread of s: starts the import of peer for s; done runs later on
 * s's loop (never before this returns). 0, or -ENOMEM / -EAGAIN (no import
 * thread) and nothing started. */
int jet__urma_import_start(jet_socket_t *s, void *tag, const jet_urma_hello_t *peer,
                           jet_urma_import_done_t done);

/* Unimports what job still holds (off the loop), drops its socket
 * reference, frees it. Loop thread of job->s. */
void jet__urma_import_free(jet_urma_import_t *job);

/* Loop thread of loop: unimports tjetty and tseg (either may be NULL) on the
 * import threads, as background work (here when no thread can be
 * started). */
void jet__urma_unimport_later(jet_loop_t *loop, urma_target_jetty_t *tjetty,
                              urma_target_seg_t *tseg);

#endif
