#include "urma/urma_transport.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/status.h"
#include "jetrpc/errors.h"
#include "net/hello_transport.h"
#include "net/socket.h"
#include "urma/urma_context.h"
#include "urma/urma_endpoint.h"
#include "urma/urma_handshake.h"
#include "urma/urma_import.h"

#define UT_HELLO_MAX JET_URMA_HELLO_MAX_LEN
_Static_assert(JET_URMA_ACK_LEN == JET_HELLO_ACK_LEN, "URMA ACK length");

typedef struct urma_ts {
    jet_hello_ts_t h; /* first: s->tstate is both */
    jet_urma_ep_t *ep;
    /* Server: the client's hello, kept while the endpoint waits for its
     * set (then imported). */
    jet_urma_hello_t peer;
} urma_ts_t;

static const jet_hello_ops_t ut_hello_ops;

static int ut_global_init(const jet_transport_check_t *check)
{
    int rc = jet__hello_check(&ut_hello_ops, check);
    if (rc < 0) return rc;
    /* Unavailable is not an error: connections then run over TCP. */
    jet__urma_ctx_get();
    return 0;
}

static int ut_init(jet_socket_t *s)
{
    urma_ts_t *ts = calloc(1, sizeof *ts);
    if (!ts) return -ENOMEM;
    /* Without URMA here: plain TCP. A URMA hello reaching this server is
     * declined by the server's foreign-hello answer. */
    const jet_urma_ctx_t *ctx = jet__urma_ctx_get();
    jet__hello_init(&ts->h, s, &ut_hello_ops, ctx != NULL);
    if (ctx) {
        jet_loop_t *l = jet__urma_pick_loop();
        if (l) s->loop = l;
    }
    s->tstate = ts;
    return 0;
}

static void ut_release(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    if (!ts) return;
    if (ts->ep) JET_ERROR("URMA: socket %s released with its endpoint attached (leaked)", s->peer);
    jet__hello_fini(&ts->h);
    free(ts);
    s->tstate = NULL;
}

/* This connection does not use URMA: release the endpoint. */
static void ut_drop(jet_socket_t *s, jet_hello_ts_t *h)
{
    (void)s;
    urma_ts_t *ts = (urma_ts_t *)h;
    if (ts->ep) {
        jet__urma_ep_close(ts->ep);
        ts->ep = NULL;
    }
}

static void ut_close(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    jet__hello_close(s, &ts->h);
    ut_drop(s, &ts->h);
}

static int ut_go_on(jet_socket_t *s, jet_hello_ts_t *h)
{
    urma_ts_t *ts = (urma_ts_t *)h;
    jet__hello_set_on(s, h);
    JET_DEBUG("URMA established with %s", s->peer);
    jet__urma_ep_start(ts->ep); /* delivers what came over URMA meanwhile */
    return 0;
}

static void ut_read_resumed(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    if (ts && ts->ep) jet__urma_ep_read_resumed(ts->ep);
}

/* ---- client ------------------------------------------------------------------- */

/* Client: our hello, once the endpoint has its set. 1, or a negative code. */
static int ut_client_hello(jet_socket_t *s, urma_ts_t *ts)
{
    jet_urma_hello_t h;
    uint8_t buf[UT_HELLO_MAX];
    jet__urma_ep_hello(ts->ep, JET_FLAG(urma_client_handshake_version) == 3 ? 3 : 2, &h);
    int n = jet__urma_hello_pack(&h, buf, sizeof buf);
    int rc = n < 0 ? n : jet__hello_send(s, buf, (size_t)n);
    if (rc < 0) return rc; /* the endpoint goes with the socket (close) */
    ts->h.hs = JET_HELLO_HS_C_HELLO_WAIT;
    jet__hello_timer_start(s, &ts->h);
    return 1;
}

static void ut_server_import(jet_socket_t *s, urma_ts_t *ts, int rc);

/* A pending endpoint is ready (rc 0) or has no set (rc < 0). */
static void ut_ep_ready(jet_socket_t *s, int rc)
{
    urma_ts_t *ts = s->tstate;
    if (jet__socket_failed(s)) return; /* its close ends the endpoint */
    if (s->is_server_side) {
        ut_server_import(s, ts, rc);
        jet__hello_server_answered(s, &ts->h);
        return;
    }
    if (rc == 0) {
        rc = ut_client_hello(s, ts);
        if (rc < 0) jet__socket_set_failed(s, rc);
        return;
    }
    JET_INFO_PEER("URMA: no resources for a connection to %s (%s): using TCP", s->peer,
                  jet_strerror(rc));
    jet__hello_go_off(s, &ts->h); /* drops the endpoint; no hello was sent */
    if (!jet__socket_failed(s)) jet__socket_connected(s, 0);
}

static int ut_connect(jet_socket_t *s)
{
    urma_ts_t *ts = s->tstate;
    if (atomic_load(&ts->h.mode) == JET_HELLO_OFF) return 0;
    int rc = jet__urma_ep_create(s, ut_ep_ready, &ts->ep);
    if (rc < 0) {
        JET_INFO_PEER("URMA: no resources for a connection to %s (%s): using TCP", s->peer,
                      jet_strerror(rc));
        ts->ep = NULL;
        atomic_store(&ts->h.mode, JET_HELLO_OFF);
        return 0; /* no hello: the server sees a plain TCP client */
    }
    if (rc == 1) {
        /* The set is made off the loop: the hello follows (ut_ep_ready). */
        ts->h.hs = JET_HELLO_HS_PENDING;
        jet__hello_timer_start(s, &ts->h);
        return 1;
    }
    return ut_client_hello(s, ts);
}

/* The import for the connection of job->s, on its loop; job->tag is the
 * endpoint that asked. False when the connection no longer waits for it
 * (failed, timed out, closed): the import is then undone with the job. */
static bool ut_import_wanted(jet_urma_import_t *job)
{
    jet_socket_t *s = job->s;
    urma_ts_t *ts = s->tstate;
    return !jet__socket_failed(s) && ts && ts->ep && ts->ep == job->tag &&
           ts->h.hs == JET_HELLO_HS_PENDING;
}

/* An import came back: false when nobody waits for it (the job is freed);
 * else true, and *ok_p tells whether the endpoint now holds the peer. */
static bool ut_import_arrived(jet_urma_import_t *job, bool *ok_p)
{
    if (!ut_import_wanted(job)) {
        jet__urma_import_free(job);
        return false;
    }
    urma_ts_t *ts = job->s->tstate;
    *ok_p = job->err == 0;
    if (*ok_p) {
        jet__urma_ep_connect_peer(ts->ep, &job->peer, job->tseg, job->tjetty);
        job->tseg = NULL;
        job->tjetty = NULL;
    }
    return true;
}

/* The client cannot use the server's valid hello (its jetty does not
 * import, or it is this connection's own). A jetrpc server (its hello has
 * caps) takes ACK 0 and goes on over TCP on this connection. A brpc server's
 * own clients never send ACK 0 (URMA-TRANSPORT.md §4), so its way on after
 * one is untried and may leave the request unread (its D5): the connection
 * is closed instead, as by a server that refuses the hello, and the call
 * goes again over a new TCP connection. */
static void ut_client_no(jet_socket_t *s, jet_hello_ts_t *hts, const jet_urma_hello_t *srv)
{
    if (srv->jet_caps) {
        JET_INFO_PEER("URMA with %s could not be set up: this connection uses TCP", s->peer);
        jet__hello_client_finish(s, hts, false);
        return;
    }
    JET_INFO_PEER("URMA with %s could not be set up: closed, the channel retries over TCP",
                  s->peer);
    jet__socket_set_failed(s, -JET__EHELLO_REFUSED);
}

static void ut_client_imported(jet_urma_import_t *job)
{
    jet_socket_t *s = job->s;
    bool on;
    if (!ut_import_arrived(job, &on)) return;
    urma_ts_t *ts = s->tstate;
    if (on) {
        jet__hello_client_finish(s, &ts->h, true);
    } else {
        ut_client_no(s, &ts->h, &job->peer);
    }
    jet__urma_import_free(job); /* last: its reference keeps s alive until here */
}

static void ut_client_step(jet_socket_t *s, jet_hello_ts_t *hts)
{
    urma_ts_t *ts = (urma_ts_t *)hts;
    uint8_t flat[UT_HELLO_MAX];
    size_t n = jet__hello_flatten(hts, flat), used = 0;
    jet_urma_hello_t h;
    switch (jet__urma_hello_parse(flat, n, &h, &used)) {
    case JET_URMA_HELLO_INCOMPLETE:
        return;
    /* Not a server that speaks URMA as brpc and jetrpc do: as one that
     * closes on the hello, the channel goes on over TCP for a while (brpc's
     * client falls back on this connection, without the ACK its server
     * waits for: URMA-TRANSPORT.md D3). */
    case JET_URMA_HELLO_NOT_HELLO:
        JET_WARN_PEER(
            "close %s: the server answered the URMA hello with bytes that are not a hello "
            "(%02x %02x %02x %02x): the channel retries over TCP",
            s->peer, flat[0], n > 1 ? flat[1] : 0, n > 2 ? flat[2] : 0, n > 3 ? flat[3] : 0);
        jet__socket_set_failed(s, -JET__EHELLO_REFUSED);
        return;
    case JET_URMA_HELLO_BAD_FRAME:
        JET_WARN_PEER("close %s: the server's URMA hello is malformed (length out of range or "
                      "undecodable): the channel retries over TCP",
                      s->peer);
        jet__socket_set_failed(s, -JET__EHELLO_REFUSED);
        return;
    case JET_URMA_HELLO_DECLINED:
        jet_iobuf_pop_front(&hts->hs_buf, used);
        JET_INFO_PEER("%s declined URMA: this connection uses TCP", s->peer);
        jet__hello_client_finish(s, hts, false);
        return;
    case JET_URMA_HELLO_OK:
        jet_iobuf_pop_front(&hts->hs_buf, used);
        if (jet__urma_ep_is_own(ts->ep, &h)) {
            JET_WARN_PEER("URMA: %s advertises this connection's own jetty %u (a peer on another "
                          "fabric, or a forged hello): not imported",
                          s->peer, h.jetty_id);
            ut_client_no(s, hts, &h);
            return;
        }
        if (jet__urma_import_start(s, ts->ep, &h, ut_client_imported) < 0) {
            ut_client_no(s, hts, &h);
            return;
        }
        hts->hs = JET_HELLO_HS_PENDING;
        return;
    }
}

/* ---- server ------------------------------------------------------------------- */

static void ut_server_decline(jet_socket_t *s, urma_ts_t *ts, int version)
{
    uint8_t buf[UT_HELLO_MAX];
    int n = jet__urma_hello_pack_decline(version, buf, sizeof buf);
    int rc = n < 0 ? n : jet__hello_send(s, buf, (size_t)n);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    ts->h.said_yes = false;
    ts->h.hs = JET_HELLO_HS_S_ACK_WAIT;
}

/* The peer is imported: our hello says yes. */
static void ut_server_accept(jet_socket_t *s, urma_ts_t *ts, const jet_urma_hello_t *peer)
{
    jet_urma_hello_t h;
    uint8_t buf[UT_HELLO_MAX];
    jet__urma_ep_hello(ts->ep, peer->version, &h);
    if (!peer->jet_caps) {
        /* A brpc client (or one with the extensions off) gets brpc's bytes
         * only: zero pad, no fields past 11. */
        h.jet_caps = 0;
        h.jet_sq = 0;
    }
    int n = jet__urma_hello_pack(&h, buf, sizeof buf);
    int rc = n < 0 ? n : jet__hello_send(s, buf, (size_t)n);
    if (rc < 0) {
        jet__socket_set_failed(s, rc);
        return;
    }
    ts->h.said_yes = true;
    ts->h.hs = JET_HELLO_HS_S_ACK_WAIT;
}

static void ut_server_imported(jet_urma_import_t *job)
{
    jet_socket_t *s = job->s;
    bool ok;
    if (!ut_import_arrived(job, &ok)) return;
    urma_ts_t *ts = s->tstate;
    if (ok) {
        ut_server_accept(s, ts, &job->peer);
    } else {
        jet__urma_ep_close(ts->ep);
        ts->ep = NULL;
        ut_server_decline(s, ts, job->peer.version);
    }
    jet__hello_server_answered(s, &ts->h);
    jet__urma_import_free(job); /* last: its reference keeps s alive until here */
}

/* Server, the endpoint ready (rc 0): the client's jetty is imported off
 * the loop, then answered (ut_server_imported). Else declined, over TCP. */
static void ut_server_import(jet_socket_t *s, urma_ts_t *ts, int rc)
{
    if (rc == 0 && jet__urma_ep_is_own(ts->ep, &ts->peer)) {
        JET_WARN_PEER("URMA: %s advertises this connection's own jetty %u (a peer on another "
                      "fabric, or a forged hello): declined, using TCP",
                      s->peer, ts->peer.jetty_id);
    } else {
        if (rc == 0) rc = jet__urma_import_start(s, ts->ep, &ts->peer, ut_server_imported);
        if (rc == 0) {
            ts->h.hs = JET_HELLO_HS_PENDING;
            return;
        }
        JET_INFO_PEER("URMA: no resources for the connection from %s (%s): declined, using TCP",
                      s->peer, jet_strerror(rc));
    }
    if (ts->ep) jet__urma_ep_close(ts->ep);
    ts->ep = NULL;
    ut_server_decline(s, ts, ts->peer.version);
}

static void ut_server_answer(jet_socket_t *s, urma_ts_t *ts, const jet_urma_hello_t *peer)
{
    ts->peer = *peer;
    int rc = jet__urma_ep_create(s, ut_ep_ready, &ts->ep);
    if (rc == 1) {
        /* The set is made off the loop; the import follows (ut_ep_ready). */
        ts->h.hs = JET_HELLO_HS_PENDING;
        return;
    }
    if (rc < 0) ts->ep = NULL;
    ut_server_import(s, ts, rc);
}

static int ut_server_hello(jet_socket_t *s, jet_hello_ts_t *hts)
{
    urma_ts_t *ts = (urma_ts_t *)hts;
    uint8_t flat[UT_HELLO_MAX];
    size_t n = jet__hello_flatten(hts, flat), used = 0;
    if (!jet__urma_hello_prefix(flat, n)) return JET_HELLO_STEP_NOT_HELLO;
    jet__hello_timer_start(s, hts);
    jet_urma_hello_t h;
    switch (jet__urma_hello_parse(flat, n, &h, &used)) {
    case JET_URMA_HELLO_INCOMPLETE:
        return JET_HELLO_STEP_MORE;
    case JET_URMA_HELLO_NOT_HELLO:
    case JET_URMA_HELLO_BAD_FRAME:
        JET_WARN_PEER("close %s: malformed URMA hello (length out of range or undecodable)",
                      s->peer);
        jet__socket_set_failed(s, -EPROTO);
        return -EPROTO;
    case JET_URMA_HELLO_DECLINED:
        jet_iobuf_pop_front(&hts->hs_buf, used);
        JET_INFO_PEER("%s sent a URMA hello with fields out of range: declined, using TCP",
                      s->peer);
        ut_server_decline(s, ts, h.version);
        return JET_HELLO_STEP_DONE;
    case JET_URMA_HELLO_OK:
        jet_iobuf_pop_front(&hts->hs_buf, used);
        ut_server_answer(s, ts, &h);
        return JET_HELLO_STEP_DONE;
    }
    return JET_HELLO_STEP_MORE;
}

static void ut_ack_pack(uint8_t out[JET_HELLO_ACK_LEN], bool on)
{
    jet__urma_ack_pack(out, on);
}

static bool ut_ack_on(const uint8_t in[JET_HELLO_ACK_LEN])
{
    return (jet__urma_ack_parse(in) & JET_URMA_ACK_OK) != 0;
}

/* ---- data path ---------------------------------------------------------------- */

static ssize_t ut_cut(jet_socket_t *s, jet_hello_ts_t *h, jet_iobuf_t *const *bufs, int n)
{
    (void)s;
    return jet__urma_ep_cut(((urma_ts_t *)h)->ep, bufs, n);
}

static int ut_wait_writable(jet_socket_t *s, jet_hello_ts_t *h)
{
    (void)s;
    urma_ts_t *ts = (urma_ts_t *)h;
    return ts->ep ? jet__urma_ep_wait_writable(ts->ep) : 0;
}

static void ut_drain(jet_socket_t *s, jet_hello_ts_t *h)
{
    (void)s;
    urma_ts_t *ts = (urma_ts_t *)h;
    if (ts->ep) jet__urma_ep_drain(ts->ep);
}

static int ut_debug(jet_socket_t *s, char *buf, size_t len)
{
    urma_ts_t *ts = s->tstate;
    int n = jet__hello_debug(&ts->h, buf, len);
    if (n < 0 || (size_t)n >= len) return n;
    if (atomic_load(&ts->h.mode) == JET_HELLO_ON && ts->ep && jet_loop_in_thread(s->loop))
        return n + jet__urma_ep_debug(ts->ep, buf + n, len - (size_t)n);
    return n + jet__tcp_transport.debug(s, buf + n, len - (size_t)n);
}

static const jet_hello_ops_t ut_hello_ops = {
    .name = "URMA",
    .key = "urma",
    .hello_max = UT_HELLO_MAX,
    .timeout_ms = &JET_FLAG_VAR(urma_handshake_timeout_ms),
    .client_step = ut_client_step,
    .server_hello = ut_server_hello,
    .ack_pack = ut_ack_pack,
    .ack_on = ut_ack_on,
    .go_on = ut_go_on,
    .drop = ut_drop,
    .cut = ut_cut,
    .wait_writable = ut_wait_writable,
    .drain = ut_drain,
};

const jet_transport_ops_t jet__urma_transport = {
    .name = "urma",
    .mode = JET_SOCKET_MODE_URMA,
    .global_init = ut_global_init,
    .init = ut_init,
    .release = ut_release,
    .reset = jet__transport_unsupported_reset,
    .connect = ut_connect,
    .cut_from_iobuf_list = jet__hello_cut,
    .wait_writable = jet__hello_wait_writable,
    .on_input = jet__hello_on_input,
    .debug = ut_debug,
    .close = ut_close,
    .read_resumed = ut_read_resumed,
};
