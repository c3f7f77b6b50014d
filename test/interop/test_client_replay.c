/* The jetrpc client against the answers a real brpc server sent
 * (../shared/interop/baidu_std). A fake server in the test (a raw listening
 * socket and a thread) reads the client's request, checks that its meta is
 * what brpc's client sends, and answers with the recorded frame, its
 * correlation_id rewritten to the request's (body and attachment bytes kept
 * as recorded). Then: stale ids, undecodable bodies, bad attachment sizes, a
 * server that closes mid-call and one that sends garbage, and answers with
 * a CRC32C checksum as a brpc server sends them (BAIDU_STD.md §6), right or
 * damaged, with and without the attachment covered. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "rpc/codec.h"
#include "rpc/compress.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define IO_TIMEOUT_MS    10000 /* bound on any wait for bytes that must come */
#define CLOSE_TIMEOUT_MS 10000
#define CALL_TIMEOUT_MS  10000

/* ---- byte helpers ------------------------------------------------------------ */

/* Re-packs a decoded frame with correlation_id cid; body and attachment bytes
 * are shared, so the frame stays usable. malloc'd bytes. */
static uint8_t *repack(jet_baidu_frame_t *f, int64_t cid, size_t *len_p)
{
    jet_iobuf_t out, b, a;
    jet_iobuf_init(&out);
    jet_iobuf_init(&b);
    jet_iobuf_init(&a);
    jet_iobuf_append_iobuf(&b, &f->body);
    jet_iobuf_append_iobuf(&a, &f->attachment);
    int64_t saved = f->meta->correlation_id;
    f->meta->has_correlation_id = true;
    f->meta->correlation_id = cid;
    uint8_t *p = NULL;
    if (jet__baidu_pack(&out, f->meta, &b, &a) == 0) p = jt_iobuf_bytes(&out, len_p);
    f->meta->correlation_id = saved;
    jet_iobuf_fini(&out);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&a);
    return p;
}

/* ---- the fake server ------------------------------------------------------------ */

#define FAKE_MAX_REQS 256

typedef struct fake fake_t;
typedef void (*fake_script_t)(fake_t *f);

struct fake {
    int lfd;
    int port;
    pthread_t th;
    fake_script_t script;
    const char *name; /* recorded case for the script */
    int accepted;     /* connections accepted */
    int nreq;         /* requests read */
    jet_baidu_frame_t req[FAKE_MAX_REQS];
    bool client_closed; /* the client closed the (last) connection */
    bool ok;            /* the script's own steps went as planned */
};

static fake_t g_fake;

static int fake_listen(fake_t *f)
{
    f->lfd = jt_tcp_listen(16, &f->port);
    return f->lfd < 0 ? -1 : 0;
}

/* Accepts one connection within timeout_ms. false on timeout. */
static bool fake_accept(fake_t *f, jt_conn_t *c, int timeout_ms)
{
    int fd = jt_tcp_accept(f->lfd, timeout_ms);
    if (fd < 0) return false;
    jt_conn_init(c, fd);
    f->accepted++;
    return true;
}

/* Reads the next request into f->req[f->nreq]; returns it or NULL. */
static jet_baidu_frame_t *fake_read_req(fake_t *f, jt_conn_t *c)
{
    if (f->nreq >= FAKE_MAX_REQS) return NULL;
    jet_baidu_frame_t *q = &f->req[f->nreq];
    int r = jt_conn_frame(c, IO_TIMEOUT_MS, q, NULL, NULL);
    if (r != 1) {
        fprintf(stderr, "  fake: no request (%d)\n", r);
        jet__baidu_frame_fini(q);
        jet__baidu_frame_init(q);
        return NULL;
    }
    f->nreq++;
    return q;
}

/* Sends resp, re-packed with correlation_id cid. true when it all went out. */
static bool fake_answer(jt_conn_t *c, jet_baidu_frame_t *resp, int64_t cid)
{
    size_t n;
    uint8_t *p = repack(resp, cid, &n);
    bool ok = p && jt_conn_write(c, p, n) == 0;
    free(p);
    return ok;
}

/* Waits for the client to close the connection, then closes it here. */
static void fake_finish(fake_t *f, jt_conn_t *c)
{
    f->client_closed = jt_conn_wait_closed(c, CLOSE_TIMEOUT_MS);
    jt_conn_close(c);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    f->script(f);
    return NULL;
}

static void fake_start(fake_script_t script, const char *name)
{
    fake_t *f = &g_fake;
    f->script = script;
    f->name = name;
    f->accepted = 0;
    f->nreq = 0;
    f->client_closed = false;
    f->ok = false;
    for (int i = 0; i < FAKE_MAX_REQS; i++)
        jet__baidu_frame_init(&f->req[i]);
    if (pthread_create(&f->th, NULL, fake_main, f) != 0) abort();
}

static void fake_join(void)
{
    pthread_join(g_fake.th, NULL);
}

static void fake_clear(void)
{
    for (int i = 0; i < FAKE_MAX_REQS; i++)
        jet__baidu_frame_fini(&g_fake.req[i]);
}

static jet_channel_t *channel(int32_t max_retry)
{
    return jt_channel_open_port(g_fake.port, JET_CONNECTION_SINGLE, CALL_TIMEOUT_MS, max_retry);
}

/* ---- scripts ----------------------------------------------------------------- */

/* One request, answered with <name>.resp.bin. */
static void script_recorded(fake_t *f)
{
    char fn[128];
    snprintf(fn, sizeof fn, "%s.resp.bin", f->name);
    jet_baidu_frame_t resp;
    jet__baidu_frame_init(&resp);
    jt_conn_t c;
    bool loaded = jt_interop_load_frame(fn, &resp);
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) goto out_resp;
    jet_baidu_frame_t *q = fake_read_req(f, &c);
    if (q && loaded) {
        f->ok = fake_answer(&c, &resp, q->meta->correlation_id);
    }
    fake_finish(f, &c);
out_resp:
    jet__baidu_frame_fini(&resp);
}

/* 11 (the client gives up after 50 ms) then 12 on the same connection; the
 * late answer to 11 is sent just before 12's. */
static void script_timeout_then_next(fake_t *f)
{
    jet_baidu_frame_t resp;
    jet__baidu_frame_init(&resp);
    jt_conn_t c;
    bool loaded = jt_interop_load_frame("12-after_timeout.resp.bin", &resp);
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) goto out_resp;
    jet_baidu_frame_t *q11 = fake_read_req(f, &c);
    jet_baidu_frame_t *q12 = q11 ? fake_read_req(f, &c) : NULL;
    if (q12 && loaded) {
        /* The late answer: 12's recorded meta with 11's id and message "sleep:300". */
        Example__EchoResponse late = EXAMPLE__ECHO_RESPONSE__INIT;
        late.message = "sleep:300";
        jet_iobuf_t body, out;
        jet_iobuf_init(&body);
        jet_iobuf_init(&out);
        jet__pb_pack_iobuf(&late.base, &body);
        int64_t saved = resp.meta->correlation_id;
        resp.meta->correlation_id = q11->meta->correlation_id;
        int rc = jet__baidu_pack(&out, resp.meta, &body, NULL);
        resp.meta->correlation_id = saved;
        size_t n1 = 0, n2 = 0;
        uint8_t *p1 = rc == 0 ? jt_iobuf_bytes(&out, &n1) : NULL;
        uint8_t *p2 = repack(&resp, q12->meta->correlation_id, &n2);
        f->ok = p1 && p2 && jt_conn_write(&c, p1, n1) == 0 && jt_conn_write(&c, p2, n2) == 0;
        free(p1);
        free(p2);
        jet_iobuf_fini(&body);
        jet_iobuf_fini(&out);
    }
    fake_finish(f, &c);
out_resp:
    jet__baidu_frame_fini(&resp);
}

#define PIPE_N 200

/* Index i of a "pipelined-i" request, or -1. */
static int pipe_index(const jet_baidu_frame_t *q)
{
    char *m = jt_frame_echo_message(q, true);
    int i = -1;
    if (m && sscanf(m, "pipelined-%d", &i) != 1) i = -1;
    free(m);
    return i >= 0 && i < PIPE_N ? i : -1;
}

static jet_baidu_frame_t g_pipe_req[PIPE_N], g_pipe_resp[PIPE_N];
static int g_pipe_nreq, g_pipe_nresp;

/* 200 requests read, then the 200 recorded answers, each with the id of the
 * client's request of the same index. The recording happens to be in request
 * order, so they go out in reverse: the client must match by id alone. */
static void script_pipelined(fake_t *f)
{
    jt_conn_t c;
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) return;
    int64_t client_cid[PIPE_N];
    bool have[PIPE_N] = {false};
    for (int k = 0; k < PIPE_N; k++) {
        jet_baidu_frame_t *q = fake_read_req(f, &c);
        if (!q) break;
        int i = pipe_index(q);
        if (i < 0 || have[i]) continue;
        have[i] = true;
        client_cid[i] = q->meta->correlation_id;
    }
    /* recorded id → index, from the recorded request stream */
    int64_t rec_cid[PIPE_N];
    for (int i = 0; i < g_pipe_nreq; i++)
        rec_cid[i] = g_pipe_req[i].meta->correlation_id;
    jet_iobuf_t all;
    jet_iobuf_init(&all);
    bool ok = f->nreq == PIPE_N;
    for (int k = g_pipe_nresp - 1; k >= 0 && ok; k--) {
        int i = 0;
        while (i < g_pipe_nreq && rec_cid[i] != g_pipe_resp[k].meta->correlation_id)
            i++;
        int idx = i < g_pipe_nreq ? pipe_index(&g_pipe_req[i]) : -1;
        if (idx < 0 || !have[idx]) {
            ok = false;
            break;
        }
        size_t n;
        uint8_t *p = repack(&g_pipe_resp[k], client_cid[idx], &n);
        ok = p && jet_iobuf_append(&all, p, n) == 0;
        free(p);
    }
    if (ok) {
        size_t n;
        uint8_t *p = jt_iobuf_bytes(&all, &n);
        ok = jt_conn_write(&c, p, n) == 0;
        free(p);
    }
    jet_iobuf_fini(&all);
    f->ok = ok;
    fake_finish(f, &c);
}

/* 00's answer first with ids the client never issued, then with the right one. */
static void script_unknown_cid(fake_t *f)
{
    jet_baidu_frame_t resp;
    jet__baidu_frame_init(&resp);
    jt_conn_t c;
    bool loaded = jt_interop_load_frame("00-echo_small.resp.bin", &resp);
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) goto out_resp;
    jet_baidu_frame_t *q = fake_read_req(f, &c);
    if (q && loaded) {
        int64_t cid = q->meta->correlation_id;
        int64_t wrong[] = {cid + 0x7777, cid ^ ((int64_t)1 << 60), 0, -1};
        bool ok = true;
        for (size_t i = 0; i < sizeof wrong / sizeof wrong[0] && ok; i++)
            ok = fake_answer(&c, &resp, wrong[i]);
        f->ok = ok && fake_answer(&c, &resp, cid);
    }
    fake_finish(f, &c);
out_resp:
    jet__baidu_frame_fini(&resp);
}

/* f->name selects the damage done to a recorded answer. */
static void script_damaged(fake_t *f)
{
    bool bad_body = strcmp(f->name, "bad_body") == 0;
    jet_baidu_frame_t resp;
    jet__baidu_frame_init(&resp);
    jt_conn_t c;
    bool loaded = jt_interop_load_frame(
        bad_body ? "00-echo_small.resp.bin" : "02-attachment_1k.resp.bin", &resp);
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) goto out_resp;
    jet_baidu_frame_t *q = fake_read_req(f, &c);
    if (q && loaded) {
        static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
        if (bad_body) {
            jet_iobuf_clear(&resp.body);
            jet_iobuf_append(&resp.body, junk, sizeof junk);
        } else {
            resp.meta->attachment_size = 5000; /* 1024 bytes follow the message */
        }
        f->ok = fake_answer(&c, &resp, q->meta->correlation_id);
    }
    fake_finish(f, &c);
out_resp:
    jet__baidu_frame_fini(&resp);
}

/* The checksum a brpc peer sends: masked CRC32C of the body (and the
 * attachment after it when with_att), 4 bytes big-endian. */
static void put_checksum(const jet_iobuf_t *body, const jet_iobuf_t *att, bool with_att,
                         uint8_t out[4])
{
    uint32_t crc = jet__crc32c_iobuf(0, body);
    if (with_att) crc = jet__crc32c_iobuf(crc, att);
    crc = jet__crc32c_mask(crc);
    out[0] = (uint8_t)(crc >> 24);
    out[1] = (uint8_t)(crc >> 16);
    out[2] = (uint8_t)(crc >> 8);
    out[3] = (uint8_t)crc;
}

/* The recorded 1 KiB-attachment answer with a checksum; f->name picks it:
 * "body" (the message only), "att" (message and attachment), "bad_value",
 * "att_flipped" (an attachment byte changed after the sum over both) and
 * "uncovered_flipped" (the same, the attachment not covered). The request's
 * own checksum, if any, must verify. */
static void script_checksummed(fake_t *f)
{
    const char *how = f->name;
    bool with_att = strcmp(how, "att") == 0 || strcmp(how, "att_flipped") == 0;
    jet_baidu_frame_t resp;
    jet__baidu_frame_init(&resp);
    jt_conn_t c;
    bool loaded = jt_interop_load_frame("02-attachment_1k.resp.bin", &resp);
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) goto out_resp;
    jet_baidu_frame_t *q = fake_read_req(f, &c);
    if (q && loaded) {
        bool req_ok = true;
        if (q->meta->has_checksum_type && q->meta->checksum_type == 1) {
            uint8_t want[4];
            put_checksum(&q->body, &q->attachment,
                         q->meta->has_checksum_with_attachment && q->meta->checksum_with_attachment,
                         want);
            req_ok = q->meta->checksum_value.len == 4 &&
                     memcmp(q->meta->checksum_value.data, want, 4) == 0;
        }
        uint8_t ck[4];
        put_checksum(&resp.body, &resp.attachment, with_att, ck);
        if (strcmp(how, "bad_value") == 0) ck[3] ^= 0x40;
        resp.meta->has_checksum_type = true;
        resp.meta->checksum_type = 1;
        resp.meta->has_checksum_value = true;
        resp.meta->checksum_value.data = ck;
        resp.meta->checksum_value.len = 4;
        resp.meta->has_checksum_with_attachment = with_att;
        resp.meta->checksum_with_attachment = with_att;
        if (strstr(how, "flipped")) {
            /* One byte in the middle of the attachment. */
            size_t n;
            uint8_t *a = jt_iobuf_bytes(&resp.attachment, &n);
            a[n / 2] ^= 0x01;
            jet_iobuf_clear(&resp.attachment);
            jet_iobuf_append(&resp.attachment, a, n);
            free(a);
        }
        f->ok = req_ok && fake_answer(&c, &resp, q->meta->correlation_id);
        /* Not freed with the frame: it points at ck. */
        resp.meta->checksum_value.data = NULL;
        resp.meta->checksum_value.len = 0;
    }
    fake_finish(f, &c);
out_resp:
    jet__baidu_frame_fini(&resp);
}

/* Every attempt: accept, read the request, close without answering. */
static void script_close_mid_call(fake_t *f)
{
    for (int k = 0; k < 3; k++) {
        jt_conn_t c;
        if (!fake_accept(f, &c, IO_TIMEOUT_MS)) return;
        jet_baidu_frame_t *q = fake_read_req(f, &c);
        jt_conn_close(&c);
        if (!q) return;
    }
    f->ok = true;
}

/* Two requests, then bytes that are not baidu_std. */
static void script_garbage(fake_t *f)
{
    jt_conn_t c;
    if (!fake_accept(f, &c, IO_TIMEOUT_MS)) return;
    if (fake_read_req(f, &c) && fake_read_req(f, &c)) {
        uint8_t x[64];
        memset(x, 'X', sizeof x);
        f->ok = jt_conn_write(&c, x, sizeof x) == 0;
    }
    fake_finish(f, &c);
}

/* ---- checks on what the client sent ---------------------------------------------- */

/* got is jetrpc's request for the call brpc's client made as want: the same
 * meta fields (§3.1) but the correlation_id, the same message and attachment. */
static void compare_request(const char *label, const jet_baidu_frame_t *got,
                            const jet_baidu_frame_t *want)
{
    const Brpc__Policy__RpcMeta *g = got->meta, *w = want->meta;
    JT_CHECK_AT(label, g->request != NULL);
    if (!g->request || !w->request) return;
    JT_CHECK_AT(label, strcmp(g->request->service_name, w->request->service_name) == 0);
    JT_CHECK_AT(label, strcmp(g->request->method_name, w->request->method_name) == 0);
    JT_CHECK_AT(label, g->request->has_log_id == w->request->has_log_id);
    JT_CHECK_AT(label, g->request->log_id == w->request->log_id);
    JT_CHECK_AT(label, !g->request->has_trace_id && !g->request->has_span_id &&
                           !g->request->has_parent_span_id && !g->request->request_id &&
                           !g->request->has_timeout_ms);
    JT_CHECK_AT(label, g->response == NULL);
    JT_CHECK_AT(label, g->has_compress_type && g->compress_type == w->compress_type);
    JT_CHECK_AT(label, g->has_correlation_id);
    JT_CHECK_AT(label, g->has_attachment_size == w->has_attachment_size);
    JT_CHECK_AT(label, g->attachment_size == w->attachment_size);
    JT_CHECK_AT(label, g->has_content_type && g->content_type == 0);
    JT_CHECK_AT(label, g->has_checksum_type && g->checksum_type == 0);
    JT_CHECK_AT(label, g->has_checksum_value && g->checksum_value.len == 0);
    JT_CHECK_AT(label, !g->has_checksum_with_attachment);
    JT_CHECK_AT(label, g->n_user_fields == 0 && !g->has_authentication_data &&
                           !g->stream_settings && !g->chunk_info);
    char *gm = jt_frame_echo_message(got, true), *wm = jt_frame_echo_message(want, true);
    JT_CHECK_AT(label, gm && wm && strcmp(gm, wm) == 0);
    free(gm);
    free(wm);
    size_t alen;
    uint8_t *wa = jt_iobuf_bytes(&want->attachment, &alen);
    JT_CHECK_AT(label, jet_iobuf_equals(&got->attachment, wa, alen) == 0);
    free(wa);
}

/* The call's outcome is what the recorded answer says. */
static void compare_outcome(const char *label, jet_call_t *call, const jet_baidu_frame_t *want)
{
    const Brpc__Policy__RpcMeta *w = want->meta;
    int code = w->response && w->response->has_error_code ? w->response->error_code : 0;
    if (jet_call_error_code(call) != code)
        fprintf(stderr, "  [%s] error %d '%s', want %d\n", label, jet_call_error_code(call),
                jet_call_error_text(call), code);
    JT_CHECK_AT(label, jet_call_error_code(call) == code);
    JT_CHECK_AT(label, jet_call_failed(call) == (code != 0));
    if (code) {
        JT_CHECK_AT(label, strcmp(jet_call_error_text(call), w->response->error_text) == 0);
        JT_CHECK_AT(label, jet_call_response(call) == NULL);
        return;
    }
    const Example__EchoResponse *r = (const Example__EchoResponse *)jet_call_response(call);
    char *wm = jt_frame_echo_message(want, false);
    JT_CHECK_AT(label, wm != NULL);
    JT_CHECK_AT(label, r != NULL);
    JT_CHECK_AT(label, r && wm && strcmp(r->message, wm) == 0);
    free(wm);
    JT_CHECK_AT(label, jet_call_response_compress_type(call) ==
                           (w->has_compress_type ? w->compress_type : 0));
    size_t alen;
    uint8_t *wa = jt_iobuf_bytes(&want->attachment, &alen);
    JT_CHECK_AT(label, jet_iobuf_equals(jet_call_response_attachment(call), wa, alen) == 0);
    free(wa);
}

/* ---- calls shaped like the recorded requests ------------------------------------- */

static ProtobufCServiceDescriptor g_nosuch_desc;

/* Fills call and req from a recorded request (message, attachment, log_id,
 * compress type, service). Returns the service descriptor to call, NULL on
 * failure; *msg_p is the malloc'd message the request points to. */
static const ProtobufCServiceDescriptor *shape_call(const jet_baidu_frame_t *rec, jet_call_t *call,
                                                    Example__EchoRequest *req, char **msg_p)
{
    *msg_p = jt_frame_echo_message(rec, true);
    if (!*msg_p || !rec->meta->request) return NULL;
    req->message = *msg_p;
    const Brpc__Policy__RpcRequestMeta *rm = rec->meta->request;
    if (rm->has_log_id) jet_call_set_log_id(call, (uint64_t)rm->log_id);
    jet_call_set_request_compress_type(call,
                                       rec->meta->has_compress_type ? rec->meta->compress_type : 0);
    jet_iobuf_append_iobuf(jet_call_request_attachment(call), &rec->attachment);
    if (strcmp(rm->service_name, example__echo_service__descriptor.name) == 0)
        return &example__echo_service__descriptor;
    g_nosuch_desc = example__echo_service__descriptor;
    g_nosuch_desc.name = strdup(rm->service_name);
    return &g_nosuch_desc;
}

static const char *const g_cases[] = {
    "00-echo_small", "01-echo_empty",      "02-attachment_1k", "03-log_id",
    "04-message_1m", "05-attachment_4m",   "06-gzip",          "07-zlib",
    "08-snappy",     "09-no_such_service", "10-handler_error",
};

static void recorded_answers(void)
{
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        const char *name = g_cases[i];
        char fn[128];
        jet_baidu_frame_t rec_req, rec_resp;
        jet__baidu_frame_init(&rec_req);
        jet__baidu_frame_init(&rec_resp);
        snprintf(fn, sizeof fn, "%s.req.bin", name);
        bool ok = jt_interop_load_frame(fn, &rec_req);
        snprintf(fn, sizeof fn, "%s.resp.bin", name);
        ok = jt_interop_load_frame(fn, &rec_resp) && ok;
        JT_CHECK_AT(name, ok);
        if (!ok) {
            jet__baidu_frame_fini(&rec_req);
            jet__baidu_frame_fini(&rec_resp);
            continue;
        }
        jet_channel_t *ch = channel(0);
        JT_CHECK_AT(name, ch != NULL);
        jet_call_t *call = jet_call_create();
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        char *msg = NULL;
        const ProtobufCServiceDescriptor *svc = shape_call(&rec_req, call, &req, &msg);
        JT_CHECK_AT(name, svc != NULL);
        if (ch && svc) {
            fake_start(script_recorded, name);
            JT_CHECK_AT(name, jet_channel_call(ch, svc, 0, call, &req.base, NULL, NULL) == 0);
            compare_outcome(name, call, &rec_resp);
            jet_channel_destroy(ch);
            ch = NULL;
            fake_join();
            JT_CHECK_AT(name, g_fake.ok);
            JT_CHECK_AT(name, g_fake.client_closed);
            JT_CHECK_AT(name, g_fake.accepted == 1 && g_fake.nreq == 1);
            if (g_fake.nreq == 1) compare_request(name, &g_fake.req[0], &rec_req);
            fake_clear();
        }
        jet_channel_destroy(ch);
        jet_call_destroy(call);
        free(msg);
        if (svc == &g_nosuch_desc) free((char *)g_nosuch_desc.name);
        jet__baidu_frame_fini(&rec_req);
        jet__baidu_frame_fini(&rec_resp);
    }
}

/* 11: the call gives up after 50 ms; 12 on the same connection completes;
 * the late answer to 11 is dropped on the way. */
static void recorded_timeout_then_next(void)
{
    jet_baidu_frame_t q11, q12, r12;
    jet__baidu_frame_init(&q11);
    jet__baidu_frame_init(&q12);
    jet__baidu_frame_init(&r12);
    bool ok = jt_interop_load_frame("11-timeout_sleep300.req.bin", &q11);
    ok = jt_interop_load_frame("12-after_timeout.req.bin", &q12) && ok;
    ok = jt_interop_load_frame("12-after_timeout.resp.bin", &r12) && ok;
    jet_channel_t *ch = ok ? channel(0) : NULL;
    JT_CHECK(ch != NULL);
    if (ch) {
        fake_start(script_timeout_then_next, NULL);
        jet_call_t *c11 = jet_call_create(), *c12 = jet_call_create();
        Example__EchoRequest m11 = EXAMPLE__ECHO_REQUEST__INIT, m12 = EXAMPLE__ECHO_REQUEST__INIT;
        char *s11 = NULL, *s12 = NULL;
        shape_call(&q11, c11, &m11, &s11);
        shape_call(&q12, c12, &m12, &s12);
        jet_call_set_timeout_ms(c11, 50);
        JT_CHECK_EQ(
            jet_channel_call(ch, &example__echo_service__descriptor, 0, c11, &m11.base, NULL, NULL),
            0);
        JT_CHECK_EQ(jet_call_error_code(c11), JET_ERPCTIMEDOUT);
        JT_CHECK(jet_call_response(c11) == NULL);
        JT_CHECK_EQ(
            jet_channel_call(ch, &example__echo_service__descriptor, 0, c12, &m12.base, NULL, NULL),
            0);
        compare_outcome("12-after_timeout", c12, &r12);
        /* the timed-out call stays as it ended */
        JT_CHECK_EQ(jet_call_error_code(c11), JET_ERPCTIMEDOUT);
        jet_channel_destroy(ch);
        fake_join();
        JT_CHECK(g_fake.ok);
        JT_CHECK_EQ(g_fake.accepted, 1);
        JT_CHECK_EQ(g_fake.nreq, 2);
        if (g_fake.nreq == 2) {
            compare_request("11-timeout_sleep300", &g_fake.req[0], &q11);
            compare_request("12-after_timeout", &g_fake.req[1], &q12);
            JT_CHECK(g_fake.req[0].meta->correlation_id != g_fake.req[1].meta->correlation_id);
        }
        fake_clear();
        jet_call_destroy(c11);
        jet_call_destroy(c12);
        free(s11);
        free(s12);
    }
    jet__baidu_frame_fini(&q11);
    jet__baidu_frame_fini(&q12);
    jet__baidu_frame_fini(&r12);
}

static atomic_int g_done;

static void on_done(jet_call_t *call, void *arg)
{
    atomic_fetch_add(&g_done, 1);
}

/* 200 asynchronous calls on one connection; the recorded answers arrive in
 * reverse order. */
static void recorded_pipelined_200(void)
{
    size_t qn = 0, an = 0;
    uint8_t *qs = jt_interop_load("pipelined_200.req.stream", &qn);
    uint8_t *as = jt_interop_load("pipelined_200.resp.stream", &an);
    for (int i = 0; i < PIPE_N; i++) {
        jet__baidu_frame_init(&g_pipe_req[i]);
        jet__baidu_frame_init(&g_pipe_resp[i]);
    }
    g_pipe_nreq = qs ? jt_frame_split(qs, qn, g_pipe_req, PIPE_N) : 0;
    g_pipe_nresp = as ? jt_frame_split(as, an, g_pipe_resp, PIPE_N) : 0;
    JT_CHECK_EQ(g_pipe_nreq, PIPE_N);
    JT_CHECK_EQ(g_pipe_nresp, PIPE_N);
    jet_channel_t *ch = channel(0);
    JT_CHECK(ch != NULL);
    if (g_pipe_nreq == PIPE_N && g_pipe_nresp == PIPE_N && ch) {
        /* by_index[i]: the recorded request and answer of "pipelined-i" */
        int req_of[PIPE_N], resp_of[PIPE_N];
        for (int i = 0; i < PIPE_N; i++)
            req_of[i] = resp_of[i] = -1;
        for (int k = 0; k < PIPE_N; k++) {
            int i = pipe_index(&g_pipe_req[k]);
            JT_CHECK(i >= 0);
            if (i >= 0) req_of[i] = k;
        }
        for (int k = 0; k < PIPE_N; k++)
            for (int i = 0; i < PIPE_N; i++)
                if (req_of[i] >= 0 && g_pipe_req[req_of[i]].meta->correlation_id ==
                                          g_pipe_resp[k].meta->correlation_id)
                    resp_of[i] = k;
        for (int i = 0; i < PIPE_N; i++)
            JT_CHECK(req_of[i] >= 0 && resp_of[i] >= 0);

        fake_start(script_pipelined, NULL);
        atomic_store(&g_done, 0);
        jet_call_t *calls[PIPE_N];
        Example__EchoRequest reqs[PIPE_N];
        char *msgs[PIPE_N];
        for (int i = 0; i < PIPE_N; i++) {
            calls[i] = jet_call_create();
            reqs[i] = (Example__EchoRequest)EXAMPLE__ECHO_REQUEST__INIT;
            msgs[i] = NULL;
            if (req_of[i] >= 0) shape_call(&g_pipe_req[req_of[i]], calls[i], &reqs[i], &msgs[i]);
            JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, calls[i],
                                         &reqs[i].base, on_done, NULL),
                        0);
        }
        for (int i = 0; i < PIPE_N; i++)
            jet_call_join(calls[i]);
        JT_CHECK_EQ(atomic_load(&g_done), PIPE_N);
        for (int i = 0; i < PIPE_N; i++) {
            char label[32];
            snprintf(label, sizeof label, "pipelined-%d", i);
            if (resp_of[i] >= 0) compare_outcome(label, calls[i], &g_pipe_resp[resp_of[i]]);
        }
        jet_channel_destroy(ch);
        ch = NULL;
        fake_join();
        JT_CHECK(g_fake.ok);
        JT_CHECK_EQ(g_fake.accepted, 1);
        JT_CHECK_EQ(g_fake.nreq, PIPE_N);
        for (int k = 0; k < g_fake.nreq; k++) {
            int i = pipe_index(&g_fake.req[k]);
            JT_CHECK(i >= 0);
            if (i < 0 || req_of[i] < 0) continue;
            char label[32];
            snprintf(label, sizeof label, "request pipelined-%d", i);
            compare_request(label, &g_fake.req[k], &g_pipe_req[req_of[i]]);
        }
        fake_clear();
        for (int i = 0; i < PIPE_N; i++) {
            jet_call_destroy(calls[i]);
            free(msgs[i]);
        }
    }
    jet_channel_destroy(ch);
    for (int i = 0; i < PIPE_N; i++) {
        jet__baidu_frame_fini(&g_pipe_req[i]);
        jet__baidu_frame_fini(&g_pipe_resp[i]);
    }
    free(qs);
    free(as);
}

/* ---- damaged answers and bad servers ------------------------------------------------ */

static jet_call_t *hello_call(Example__EchoRequest *req)
{
    jet_call_t *call = jet_call_create();
    *req = (Example__EchoRequest)EXAMPLE__ECHO_REQUEST__INIT;
    req->message = "hello";
    return call;
}

static void unknown_correlation_id_dropped(void)
{
    jet_baidu_frame_t want;
    jet__baidu_frame_init(&want);
    JT_REQUIRE(jt_interop_load_frame("00-echo_small.resp.bin", &want));
    jet_channel_t *ch = channel(0);
    JT_REQUIRE(ch != NULL);
    Example__EchoRequest req;
    jet_call_t *call = hello_call(&req);
    fake_start(script_unknown_cid, NULL);
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        0);
    compare_outcome("unknown cid then the right one", call, &want);
    JT_CHECK_EQ(jet_call_attempts(call), 1);
    jet_channel_destroy(ch);
    fake_join();
    JT_CHECK(g_fake.ok);
    JT_CHECK(g_fake.client_closed);
    JT_CHECK_EQ(g_fake.accepted, 1);
    fake_clear();
    jet_call_destroy(call);
    jet__baidu_frame_fini(&want);
}

static void damaged_answer(const char *what, int want_code, const char *want_text)
{
    jet_channel_t *ch = channel(0);
    JT_REQUIRE(ch != NULL);
    Example__EchoRequest req;
    jet_call_t *call = hello_call(&req);
    fake_start(script_damaged, what);
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        0);
    if (jet_call_error_code(call) != want_code)
        fprintf(stderr, "  [%s] error %d '%s'\n", what, jet_call_error_code(call),
                jet_call_error_text(call));
    JT_CHECK_AT(what, jet_call_failed(call));
    JT_CHECK_AT(what, jet_call_error_code(call) == want_code);
    JT_CHECK_AT(what, strncmp(jet_call_error_text(call), want_text, strlen(want_text)) == 0);
    JT_CHECK_AT(what, jet_call_response(call) == NULL);
    jet_channel_destroy(ch);
    fake_join();
    JT_CHECK_AT(what, g_fake.ok);
    fake_clear();
    jet_call_destroy(call);
}

static void response_body_does_not_decode(void)
{
    damaged_answer("bad_body", JET_EREQUEST, "Fail to parse response=example.EchoResponse");
}

static void response_attachment_size_too_big(void)
{
    damaged_answer("attachment_size_too_big", JET_ERESPONSE, "attachment_size=5000");
}

static void server_closes_mid_call(void)
{
    jet_channel_t *ch = channel(2);
    JT_REQUIRE(ch != NULL);
    Example__EchoRequest req;
    jet_call_t *call = hello_call(&req);
    fake_start(script_close_mid_call, NULL);
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        0);
    int code = jet_call_error_code(call);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK(code == JET_EEOF || code == JET_ERPCTIMEDOUT);
    if (code == JET_EEOF) JT_CHECK_EQ(jet_call_attempts(call), 3);
    jet_channel_destroy(ch);
    fake_join();
    if (code == JET_EEOF) {
        JT_CHECK(g_fake.ok);
        JT_CHECK_EQ(g_fake.accepted, 3);
        JT_CHECK_EQ(g_fake.nreq, 3);
        /* every retry carries a new correlation_id, as brpc's do */
        if (g_fake.nreq == 3) {
            JT_CHECK(g_fake.req[0].meta->correlation_id != g_fake.req[1].meta->correlation_id);
            JT_CHECK(g_fake.req[1].meta->correlation_id != g_fake.req[2].meta->correlation_id);
        }
    }
    fake_clear();
    jet_call_destroy(call);
}

/* brpc's clear_attachment_after_retry: every retry carries the whole
 * request attachment again, and the call keeps it after it ended (the
 * caller's, for its next use), synchronous or asynchronous. */
static void retries_resend_the_attachment(void)
{
    for (int async = 0; async <= 1; async++) {
        const char *what = async ? "async" : "sync";
        jet_channel_t *ch = channel(2);
        JT_REQUIRE(ch != NULL);
        Example__EchoRequest req;
        jet_call_t *call = hello_call(&req);
        uint8_t att[4096];
        jt_stream_fill(att, 77, sizeof att);
        jet_iobuf_append(jet_call_request_attachment(call), att, sizeof att);
        fake_start(script_close_mid_call, NULL);
        atomic_store(&g_done, 0);
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                     async ? on_done : NULL, NULL),
                    0);
        if (async) jet_call_join(call);
        int code = jet_call_error_code(call);
        JT_CHECK_AT(what, code == JET_EEOF || code == JET_ERPCTIMEDOUT);
        JT_CHECK_AT(what,
                    jet_iobuf_equals(jet_call_request_attachment(call), att, sizeof att) == 0);
        jet_channel_destroy(ch);
        fake_join();
        /* Whatever the call ended with: a retry whose frame came short would
         * leave the fake waiting, with fewer than 3 requests read. */
        JT_CHECK_AT(what, g_fake.nreq == 3);
        for (int k = 0; k < g_fake.nreq; k++) {
            const jet_baidu_frame_t *q = &g_fake.req[k];
            JT_CHECK_AT(what, q->meta->has_attachment_size && q->meta->attachment_size == 4096);
            JT_CHECK_AT(what, jet_iobuf_equals(&q->attachment, att, sizeof att) == 0);
        }
        fake_clear();
        jet_call_destroy(call);
    }
}

static void garbage_from_server(void)
{
    jet_channel_t *ch = channel(0);
    JT_REQUIRE(ch != NULL);
    Example__EchoRequest r1, r2;
    jet_call_t *c1 = hello_call(&r1), *c2 = hello_call(&r2);
    fake_start(script_garbage, NULL);
    atomic_store(&g_done, 0);
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, c1, &r1.base, on_done, NULL),
        0);
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, c2, &r2.base, on_done, NULL),
        0);
    jet_call_join(c1);
    jet_call_join(c2);
    JT_CHECK_EQ(atomic_load(&g_done), 2);
    /* failed because the connection was closed, not at their deadline */
    JT_CHECK(jet_call_failed(c1) && jet_call_failed(c2));
    JT_CHECK(jet_call_error_code(c1) != JET_ERPCTIMEDOUT);
    JT_CHECK(jet_call_error_code(c2) != JET_ERPCTIMEDOUT);
    /* the client closes the connection on its own, before the channel goes */
    fake_join();
    JT_CHECK(g_fake.ok);
    JT_CHECK(g_fake.client_closed);
    jet_channel_destroy(ch);
    fake_clear();
    jet_call_destroy(c1);
    jet_call_destroy(c2);
}

/* A brpc server checksums its answer when the request was checksummed
 * (BAIDU_STD.md §6, §13: response_checksum_with_attachment and
 * both_directions_checksum_with_attachment): a right sum, over the message
 * or over message and attachment, is accepted and the attachment comes
 * byte-exact; a wrong one, or an attachment byte changed under a sum that
 * covers it, fails the call with EREQUEST as brpc's client does; a byte
 * changed outside what the sum covers is not noticed. */
static void response_checksums(void)
{
    jet_baidu_frame_t want;
    jet__baidu_frame_init(&want);
    JT_REQUIRE(jt_interop_load_frame("02-attachment_1k.resp.bin", &want));
    static const struct {
        const char *how;
        bool req_checksum;
        int code;
    } cases[] = {
        {"body", false, 0},
        {"att", false, 0},
        {"att", true, 0},
        {"bad_value", false, JET_EREQUEST},
        {"att_flipped", true, JET_EREQUEST},
        {"uncovered_flipped", false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *how = cases[i].how;
        jet_channel_t *ch = channel(0);
        JT_REQUIRE(ch != NULL);
        Example__EchoRequest req;
        jet_call_t *call = hello_call(&req);
        uint8_t att[1024];
        memset(att, 0x5a, sizeof att);
        jet_iobuf_append(jet_call_request_attachment(call), att, sizeof att);
        if (cases[i].req_checksum) jet_call_set_request_checksum(call, true);
        fake_start(script_checksummed, how);
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                     NULL, NULL),
                    0);
        int code = jet_call_error_code(call);
        if (code != cases[i].code)
            fprintf(stderr, "  [%s] error %d '%s'\n", how, code, jet_call_error_text(call));
        JT_CHECK_AT(how, code == cases[i].code);
        if (cases[i].code == 0 && strcmp(how, "uncovered_flipped") != 0) {
            compare_outcome(how, call, &want);
        } else if (cases[i].code == 0) {
            JT_CHECK_AT(how, jet_iobuf_len(jet_call_response_attachment(call)) == 1024);
        } else {
            JT_CHECK_AT(how, strstr(jet_call_error_text(call),
                                    "Fail to parse response=example.EchoResponse, ContentType=pb, "
                                    "CompressType=none, ChecksumType=crc32c") != NULL);
            JT_CHECK_AT(how, jet_call_response(call) == NULL);
        }
        jet_channel_destroy(ch);
        fake_join();
        JT_CHECK_AT(how, g_fake.ok);
        if (cases[i].req_checksum && g_fake.nreq == 1)
            JT_CHECK_AT(how, g_fake.req[0].meta->checksum_type == 1);
        fake_clear();
        jet_call_destroy(call);
    }
    jet__baidu_frame_fini(&want);
}

int main(void)
{
    if (fake_listen(&g_fake) < 0) {
        fprintf(stderr, "cannot listen\n");
        return 1;
    }
    JT_RUN(recorded_answers);
    JT_RUN(recorded_timeout_then_next);
    JT_RUN(recorded_pipelined_200);
    JT_RUN(unknown_correlation_id_dropped);
    JT_RUN(response_body_does_not_decode);
    JT_RUN(response_attachment_size_too_big);
    JT_RUN(server_closes_mid_call);
    JT_RUN(retries_resend_the_attachment);
    JT_RUN(garbage_from_server);
    JT_RUN(response_checksums);
    close(g_fake.lfd);
    return jt_finish();
}
