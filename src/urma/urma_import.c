#include "urma/urma_import.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "urma/urma_names.h"

int jet__urma_import_peer(const jet_urma_ctx_t *ctx, const jet_urma_hello_t *peer, const char *who,
                          const jet_socket_t *s, urma_target_seg_t **tseg_p,
                          urma_target_jetty_t **tjetty_p)
{
    urma_token_t token = {0}; /* brpc imports everything with a zero token */
    urma_seg_t seg;
    memset(&seg, 0, sizeof seg);
    memcpy(seg.ubva.eid.raw, peer->seg_eid, 16);
    seg.ubva.uasid = peer->seg_uasid;
    memcpy((char *)&seg.ubva + offsetof(urma_ubva_t, va), &peer->seg_va, 8);
    seg.len = peer->seg_len;
    seg.attr.bs.token_policy = URMA_TOKEN_NONE;
    seg.attr.bs.access = URMA_ACCESS_READ | URMA_ACCESS_WRITE | URMA_ACCESS_ATOMIC;
    seg.token_id = peer->seg_token_id;
    urma_import_seg_flag_t sf = {.value = 0};
    sf.bs.cacheable = URMA_NON_CACHEABLE;
    sf.bs.access = URMA_ACCESS_READ | URMA_ACCESS_WRITE | URMA_ACCESS_ATOMIC;
    sf.bs.mapping = URMA_SEG_NOMAP;
    /* Segment before jetty (brpc: on hardware the first SEND otherwise fails
     * with RNR_RETRY_CNT_EXC_ERR); no WR ever uses the segment. */
    errno = 0;
    urma_target_seg_t *tseg = JET_URMA_FN(ctx, urma_import_seg)(ctx->uctx, &seg, &token, 0, sf);
    if (!tseg) {
        if (!s || !jet__socket_failed(s))
            JET_WARN_PEER("URMA: cannot import the segment of %s: %s", who,
                          strerror(errno ? errno : EIO));
        return -EIO;
    }
    urma_rjetty_t rj;
    memset(&rj, 0, sizeof rj);
    memcpy(rj.jetty_id.eid.raw, peer->eid, 16);
    rj.jetty_id.uasid = peer->uasid;
    rj.jetty_id.id = peer->jetty_id;
    rj.trans_mode = URMA_TM_RM;
    rj.type = URMA_JETTY;
    rj.flag.bs.token_policy = URMA_TOKEN_NONE;
    rj.tp_type = (urma_tp_type_t)peer->tp_type;
    errno = 0;
    urma_target_jetty_t *tjetty = JET_URMA_FN(ctx, urma_import_jetty)(ctx->uctx, &rj, &token);
    if (!tjetty) {
        if (!s || !jet__socket_failed(s))
            JET_WARN_PEER("URMA: cannot import jetty %u of %s: %s", peer->jetty_id, who,
                          strerror(errno ? errno : EIO));
        JET_URMA_FN(ctx, urma_unimport_seg)(tseg);
        return -EIO;
    }
    *tseg_p = tseg;
    *tjetty_p = tjetty;
    return 0;
}

/* ---- the import threads ---- */

/* Imports of different peers run side by side, so that one slow peer does
 * not hold the handshakes of the others past their deadlines; threads are
 * started when the queued jobs outnumber the idle threads, up to this many. */
#define IMP_THREADS_MAX 4
/* Background work (pool fills, resets, destroys, closes) takes at most this
 * many of them: the others stay for the imports that handshakes wait for. */
#define IMP_BACKGROUND_MAX 2

static pthread_mutex_t imp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t imp_cond = PTHREAD_COND_INITIALIZER;
/* FIFO, urgent work (handshakes wait for it) ahead of the rest. */
static jet_urma_work_t *imp_head, *imp_tail, *imp_urgent_tail;
static int imp_threads, imp_idle, imp_queued, imp_background;

static void *imp_main(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&imp_lock);
        imp_idle++;
        /* Urgent work is always at the head when there is any. */
        while (!imp_head || (!imp_head->urgent && imp_background >= IMP_BACKGROUND_MAX))
            pthread_cond_wait(&imp_cond, &imp_lock);
        imp_idle--;
        jet_urma_work_t *w = imp_head;
        imp_head = w->next;
        if (!imp_head) imp_tail = NULL;
        if (w == imp_urgent_tail) imp_urgent_tail = NULL;
        imp_queued--;
        bool background = !w->urgent;
        if (background) imp_background++;
        pthread_mutex_unlock(&imp_lock);
        w->run(w);
        /* w belongs to its loop from here on. */
        jet_loop_post(w->loop, &w->task);
        if (background) {
            pthread_mutex_lock(&imp_lock);
            imp_background--;
            if (imp_head) pthread_cond_signal(&imp_cond);
            pthread_mutex_unlock(&imp_lock);
        }
    }
    return NULL;
}

/* Under imp_lock, a job about to be queued: one more thread when the idle
 * ones are fewer than the jobs waiting (counting this one; an idle thread
 * woken for an earlier job has not taken it yet), up to IMP_THREADS_MAX.
 * Threads live as long as the process: they hold no resource between jobs.
 * Fails only when there is no thread at all. */
static int imp_start_thread(void)
{
    if (imp_queued < imp_idle || imp_threads >= IMP_THREADS_MAX) return 0;
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0) return imp_threads > 0 ? 0 : -EAGAIN;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &a, imp_main, NULL);
    pthread_attr_destroy(&a);
    if (rc != 0) {
        JET_LOG_ONCE(JET_LOG_WARN, "URMA: cannot start an import thread: %s", strerror(rc));
        return imp_threads > 0 ? 0 : -EAGAIN;
    }
    pthread_setname_np(t, "jet_urma_import");
    imp_threads++;
    return 0;
}

int jet__urma_work_start(jet_urma_work_t *w)
{
    w->next = NULL;
    pthread_mutex_lock(&imp_lock);
    int rc = imp_start_thread();
    if (rc == 0) {
        jet_urma_work_t **at = w->urgent ? (imp_urgent_tail ? &imp_urgent_tail->next : &imp_head)
                                         : (imp_tail ? &imp_tail->next : &imp_head);
        w->next = *at;
        *at = w;
        if (!w->next) imp_tail = w;
        if (w->urgent) imp_urgent_tail = w;
        imp_queued++;
        pthread_cond_signal(&imp_cond);
    }
    pthread_mutex_unlock(&imp_lock);
    return rc;
}

static void imp_run(jet_urma_work_t *w)
{
    jet_urma_import_t *job = (jet_urma_import_t *)w;
    const jet_urma_ctx_t *ctx = jet__urma_ctx_get();
    if (jet__socket_failed(job->s))
        job->err = -ECANCELED; /* timed out or closed while queued: nobody waits */
    else if (!ctx)
        job->err = -ENOTSUP;
    else
        job->err =
            jet__urma_import_peer(ctx, &job->peer, job->s->peer, job->s, &job->tseg, &job->tjetty);
}

static void imp_task(jet_task_t *t)
{
    jet_urma_import_t *job = (jet_urma_import_t *)t;
    job->done(job);
}

int jet__urma_import_start(jet_socket_t *s, void *tag, const jet_urma_hello_t *peer,
                           jet_urma_import_done_t done)
{
    jet_urma_import_t *job = calloc(1, sizeof *job);
    if (!job) return -ENOMEM;
    job->work.task.fn = imp_task;
    job->work.loop = s->loop;
    job->work.run = imp_run;
    job->work.urgent = true;
    job->s = s;
    job->tag = tag;
    job->peer = *peer;
    job->done = done;
    jet__socket_ref(s);
    int rc = jet__urma_work_start(&job->work);
    if (rc < 0) {
        jet__socket_unref(s);
        free(job);
    }
    return rc;
}

typedef struct imp_undo {
    jet_urma_work_t w;
    urma_target_jetty_t *tjetty;
    urma_target_seg_t *tseg;
} imp_undo_t;

static void imp_undo(urma_target_jetty_t *tjetty, urma_target_seg_t *tseg)
{
    const jet_urma_ctx_t *ctx = jet__urma_ctx_get();
    if (tjetty) JET_URMA_FN(ctx, urma_unimport_jetty)(tjetty);
    if (tseg) JET_URMA_FN(ctx, urma_unimport_seg)(tseg);
}

static void imp_undo_run(jet_urma_work_t *w)
{
    imp_undo_t *u = (imp_undo_t *)w;
    imp_undo(u->tjetty, u->tseg);
}

static void imp_undo_done(jet_task_t *t)
{
    free(t);
}

void jet__urma_unimport_later(jet_loop_t *loop, urma_target_jetty_t *tjetty,
                              urma_target_seg_t *tseg)
{
    if (!tjetty && !tseg) return;
    imp_undo_t *u = calloc(1, sizeof *u);
    if (u) {
        u->w.task.fn = imp_undo_done;
        u->w.loop = loop;
        u->w.run = imp_undo_run;
        u->tjetty = tjetty;
        u->tseg = tseg;
        if (jet__urma_work_start(&u->w) == 0) return;
        free(u);
    }
    imp_undo(tjetty, tseg); /* no thread: here */
}

void jet__urma_import_free(jet_urma_import_t *job)
{
    jet__urma_unimport_later(job->work.loop, job->tjetty, job->tseg);
    jet__socket_unref(job->s);
    free(job);
}
