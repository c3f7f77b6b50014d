/* A jetrpc server answers the bytes a real brpc client sent
 * (../shared/interop/baidu_std) with answers that decode to the fields brpc's
 * own echo server recorded, and behaves like brpc on the BAIDU_STD.md §13
 * probes. The client side here is a plain TCP socket: the bytes on the wire
 * are exactly the recorded ones. Everything runs twice: handlers on the event
 * loop (a sleeping request answered from a helper thread) and handlers on the
 * worker pool. */
#include <errno.h>
#include <snappy-c.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "rpc/codec.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define IO_TIMEOUT_MS    10000 /* bound on any wait for bytes that must come */
#define CLOSE_TIMEOUT_MS 10000 /* bound on a wait for a close that must come */

/* ---- the echo service, as brpc's example/echo_c++ server behaves ----------
 * testutil_rpc.h's: "fail" fails with 1003, "sleep:<ms>" answers after <ms>
 * (from a helper thread when handlers run on the loop: never block it),
 * anything else is echoed with its attachment, compressed as it came. */

static jt_echo_service_t g_service;
static jet_server_t *g_srv;
static int g_port;

static int server_up(bool in_pool)
{
    jet_server_options_t opts;
    jet_server_options_init(&opts);
    opts.usercode_in_pool = in_pool;
    opts.num_workers = 4;
    jt_echo_service_init(&g_service, &(jt_echo_opts_t){.sleep_async = !in_pool});
    g_srv = jt_echo_server_start(&g_service, "127.0.0.1:0", &opts, &g_port);
    return g_srv && g_port > 0 ? 0 : -1;
}

static void server_down(void)
{
    jt_server_stop(g_srv);
    g_srv = NULL;
    jt_echo_wait_idle(60 * 1000000LL);
}

/* ---- recorded and hand-built frames --------------------------------------- */

/* Meta as brpc's client fills it (BAIDU_STD §3.1); cid and names given. */
static void std_meta(Brpc__Policy__RpcMeta *m, Brpc__Policy__RpcRequestMeta *rm, const char *svc,
                     const char *method, int64_t cid)
{
    *m = (Brpc__Policy__RpcMeta)BRPC__POLICY__RPC_META__INIT;
    *rm = (Brpc__Policy__RpcRequestMeta)BRPC__POLICY__RPC_REQUEST_META__INIT;
    rm->service_name = (char *)svc;
    rm->method_name = (char *)method;
    m->request = rm;
    m->has_compress_type = true;
    m->has_correlation_id = true;
    m->correlation_id = cid;
    m->has_content_type = true;
    m->has_checksum_type = true;
    m->has_checksum_value = true;
}

/* A plain echo request "msg" with attachment att (may be NULL). */
static uint8_t *build_echo(const char *svc, const char *msg, int64_t cid, const char *att,
                           size_t *len_p)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, svc, "Echo", cid);
    size_t alen = att ? strlen(att) : 0;
    if (alen) {
        m.has_attachment_size = true;
        m.attachment_size = (int32_t)alen;
    }
    size_t blen;
    uint8_t *body = jt_echo_request_bytes(msg, &blen);
    uint8_t *p = jt_frame_pack(&m, body, blen, att, alen, len_p);
    free(body);
    return p;
}

/* ---- checking answers ------------------------------------------------------ */

static int resp_code(const Brpc__Policy__RpcMeta *m)
{
    return m->response && m->response->has_error_code ? m->response->error_code : 0;
}

static const char *resp_text(const Brpc__Policy__RpcMeta *m)
{
    return m->response && m->response->error_text ? m->response->error_text : "";
}

/* brpc's text is "[ip:port][E<code>]<reason>": the part from the ']' that
 * closes "[E<code>" on (the address differs by port). NULL without it. */
static const char *text_tail(const char *t)
{
    const char *e = strstr(t, "[E");
    return e ? strchr(e, ']') : NULL;
}

/* got answers the request that want answered in the recording. */
static void compare_answer(const char *label, const jet_baidu_frame_t *got,
                           const jet_baidu_frame_t *want)
{
    const Brpc__Policy__RpcMeta *g = got->meta, *w = want->meta;
    JT_CHECK_AT(label, g->has_correlation_id);
    JT_CHECK_AT(label, g->correlation_id == w->correlation_id);
    JT_CHECK_AT(label, g->response != NULL);
    JT_CHECK_AT(label, resp_code(g) == resp_code(w));
    if (resp_code(w)) {
        const char *gt = text_tail(resp_text(g)), *wt = text_tail(resp_text(w));
        JT_CHECK_AT(label, gt != NULL && wt != NULL);
        if (gt && wt && strcmp(gt, wt) != 0) {
            fprintf(stderr, "  [%s] error text '%s' != '%s'\n", label, resp_text(g), resp_text(w));
            JT_CHECK_AT(label, strcmp(gt, wt) == 0);
        }
        JT_CHECK_AT(label, jet_iobuf_len(&got->body) == 0 && jet_iobuf_len(&got->attachment) == 0);
    } else {
        char *gm = jt_frame_echo_message(got, false), *wm = jt_frame_echo_message(want, false);
        JT_CHECK_AT(label, wm != NULL);
        JT_CHECK_AT(label, gm != NULL);
        JT_CHECK_AT(label, gm && wm && strcmp(gm, wm) == 0);
        free(gm);
        free(wm);
    }
    int gct = g->has_compress_type ? g->compress_type : 0;
    int wct = w->has_compress_type ? w->compress_type : 0;
    JT_CHECK_AT(label, gct == wct);
    JT_CHECK_AT(label, g->has_attachment_size == w->has_attachment_size);
    size_t alen;
    uint8_t *wa = jt_iobuf_bytes(&want->attachment, &alen);
    JT_CHECK_AT(label, jet_iobuf_equals(&got->attachment, wa, alen) == 0);
    free(wa);
}

/* One echo on a fresh connection: the server still serves after bad input. */
static void check_fresh(const char *after)
{
    jt_conn_t c;
    int rc = jt_conn_open(&c, g_port);
    JT_CHECK_AT(after, rc == 0);
    if (rc < 0) return;
    size_t n;
    uint8_t *req = build_echo("example.EchoService", "fresh", 4242, "att", &n);
    JT_CHECK_AT(after, jt_conn_write(&c, req, n) == 0);
    free(req);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &f, NULL, NULL);
    JT_CHECK_AT(after, r == 1);
    if (r == 1) {
        JT_CHECK_AT(after, f.meta->correlation_id == 4242 && resp_code(f.meta) == 0);
        char *m = jt_frame_echo_message(&f, false);
        JT_CHECK_AT(after, m && strcmp(m, "fresh") == 0);
        free(m);
        JT_CHECK_AT(after, jet_iobuf_equals(&f.attachment, "att", 3) == 0);
    }
    jet__baidu_frame_fini(&f);
    jt_conn_close(&c);
}

/* ---- recorded cases -------------------------------------------------------- */

static const char *const g_cases[] = {
    "00-echo_small", "01-echo_empty",      "02-attachment_1k", "03-log_id",
    "04-message_1m", "05-attachment_4m",   "06-gzip",          "07-zlib",
    "08-snappy",     "09-no_such_service", "10-handler_error", "12-after_timeout",
};

/* Sends name.req.bin on c and checks the answer against name.resp.bin.
 * false when no answer came (the connection is then out of step). */
static bool replay_one(jt_conn_t *c, const char *name)
{
    int r = -3;
    char fn[128];
    size_t qlen = 0, alen = 0;
    snprintf(fn, sizeof fn, "%s.req.bin", name);
    uint8_t *req = jt_interop_load(fn, &qlen);
    snprintf(fn, sizeof fn, "%s.resp.bin", name);
    uint8_t *resp = jt_interop_load(fn, &alen);
    JT_CHECK_AT(name, req && resp);
    jet_baidu_frame_t want, got;
    jet__baidu_frame_init(&want);
    jet__baidu_frame_init(&got);
    if (!req || !resp) goto out;
    JT_CHECK_AT(name, jt_frame_decode(resp, alen, &want));
    if (!want.meta) goto out;
    JT_CHECK_AT(name, jt_conn_write(c, req, qlen) == 0);
    r = jt_conn_frame(c, IO_TIMEOUT_MS, &got, NULL, NULL);
    if (r != 1)
        fprintf(stderr, "  [%s] no answer (%s)\n", name,
                r == 0 ? "timeout" : "closed or bad bytes");
    JT_CHECK_AT(name, r == 1);
    if (r == 1) compare_answer(name, &got, &want);
out:
    jet__baidu_frame_fini(&want);
    jet__baidu_frame_fini(&got);
    free(req);
    free(resp);
    return r == 1;
}

/* Each case on its own connection, as a fresh brpc client would. */
static void recorded_each_on_new_connection(void)
{
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        jt_conn_t c;
        JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
        replay_one(&c, g_cases[i]);
        jt_conn_close(&c);
    }
}

/* All cases one after another on a single connection, as the recording was. */
static void recorded_on_one_connection(void)
{
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++)
        if (!replay_one(&c, g_cases[i])) break; /* later answers would not line up */
    jt_conn_close(&c);
}

/* 11 sleeps 300 ms and its client gave up after 50 ms; 12 follows on the
 * same connection and must not wait for 11. The late answer to 11 comes too. */
static void recorded_timeout_then_next(void)
{
    size_t n11 = 0, n12 = 0, a12 = 0;
    uint8_t *q11 = jt_interop_load("11-timeout_sleep300.req.bin", &n11);
    uint8_t *q12 = jt_interop_load("12-after_timeout.req.bin", &n12);
    uint8_t *r12 = jt_interop_load("12-after_timeout.resp.bin", &a12);
    jet_baidu_frame_t want12, want11q, got;
    jet__baidu_frame_init(&want12);
    jet__baidu_frame_init(&want11q);
    jet__baidu_frame_init(&got);
    jt_conn_t c;
    c.fd = -1;
    c.buf = NULL;
    JT_CHECK(q11 && q12 && r12);
    if (!q11 || !q12 || !r12) goto out;
    JT_CHECK(jt_frame_decode(r12, a12, &want12));
    JT_CHECK(jt_frame_decode(q11, n11, &want11q));
    if (!want12.meta || !want11q.meta) goto out;
    JT_CHECK(jt_conn_open(&c, g_port) == 0);
    if (c.fd < 0) goto out;
    JT_CHECK(jt_conn_write(&c, q11, n11) == 0);
    usleep(50 * 1000); /* the recorded client's 50 ms give-up */
    JT_CHECK(jt_conn_write(&c, q12, n12) == 0);
    int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &got, NULL, NULL);
    JT_CHECK_EQ(r, 1);
    if (r == 1) compare_answer("12 first", &got, &want12);
    jet__baidu_frame_fini(&got);
    jet__baidu_frame_init(&got);
    r = jt_conn_frame(&c, IO_TIMEOUT_MS, &got, NULL, NULL);
    JT_CHECK_EQ(r, 1);
    if (r == 1) {
        JT_CHECK(got.meta->correlation_id == want11q.meta->correlation_id);
        JT_CHECK_EQ(resp_code(got.meta), 0);
        char *m = jt_frame_echo_message(&got, false);
        JT_CHECK(m && strcmp(m, "sleep:300") == 0);
        free(m);
    }
out:
    if (c.fd >= 0) jt_conn_close(&c);
    jet__baidu_frame_fini(&want12);
    jet__baidu_frame_fini(&want11q);
    jet__baidu_frame_fini(&got);
    free(q11);
    free(q12);
    free(r12);
}

/* 200 requests written in one go; answers matched by correlation_id. */
static void recorded_pipelined_200(void)
{
    size_t qn = 0, an = 0;
    uint8_t *qs = jt_interop_load("pipelined_200.req.stream", &qn);
    uint8_t *as = jt_interop_load("pipelined_200.resp.stream", &an);
    enum { N = 200 };
    jet_baidu_frame_t want[N];
    bool seen[N] = {false};
    int nwant = 0;
    for (int i = 0; i < N; i++)
        jet__baidu_frame_init(&want[i]);
    jt_conn_t c;
    c.fd = -1;
    c.buf = NULL;
    JT_CHECK(qs && as);
    if (!qs || !as) goto out;
    for (size_t off = 0; off + 12 <= an && nwant < N; nwant++) {
        size_t len = 12 + (size_t)jt_get_be32(as + off + 4);
        JT_CHECK(off + len <= an);
        if (off + len > an || !jt_frame_decode(as + off, len, &want[nwant])) break;
        off += len;
    }
    JT_CHECK_EQ(nwant, N);
    /* Each request of the stream has a distinct correlation_id with one recorded answer. */
    int nreq = 0;
    for (size_t off = 0; off + 12 <= qn; nreq++)
        off += 12 + (size_t)jt_get_be32(qs + off + 4);
    JT_CHECK_EQ(nreq, N);
    JT_CHECK(jt_conn_open(&c, g_port) == 0);
    if (c.fd < 0) goto out;
    JT_CHECK(jt_conn_write(&c, qs, qn) == 0);
    for (int k = 0; k < N; k++) {
        jet_baidu_frame_t got;
        jet__baidu_frame_init(&got);
        int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &got, NULL, NULL);
        JT_CHECK_EQ(r, 1);
        if (r != 1) {
            fprintf(stderr, "  after %d answers\n", k);
            jet__baidu_frame_fini(&got);
            break;
        }
        int j = 0;
        while (j < nwant && want[j].meta->correlation_id != got.meta->correlation_id)
            j++;
        JT_CHECK(j < nwant);
        if (j < nwant) {
            char label[48];
            snprintf(label, sizeof label, "pipelined answer %d", j);
            JT_CHECK(!seen[j]);
            seen[j] = true;
            compare_answer(label, &got, &want[j]);
        }
        jet__baidu_frame_fini(&got);
    }
out:
    if (c.fd >= 0) jt_conn_close(&c);
    for (int i = 0; i < N; i++)
        jet__baidu_frame_fini(&want[i]);
    free(qs);
    free(as);
}

/* ---- BAIDU_STD §13 probes --------------------------------------------------- */

/* Sends a frame on a new connection and returns its answer in f (1), or the
 * rc_frame result. */
static int probe(const uint8_t *req, size_t n, jet_baidu_frame_t *f, uint8_t **raw_p,
                 size_t *raw_len_p)
{
    jt_conn_t c;
    if (jt_conn_open(&c, g_port) < 0) return -3;
    int r =
        jt_conn_write(&c, req, n) == 0 ? jt_conn_frame(&c, IO_TIMEOUT_MS, f, raw_p, raw_len_p) : -3;
    jt_conn_close(&c);
    return r;
}

/* Sends bytes on a new connection; the server must close it with no answer. */
static void expect_closed_silently(const char *label, const uint8_t *req, size_t n)
{
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    int wr = jt_conn_write(&c, req, n);
    JT_CHECK_AT(label, wr == 0 || wr == -EPIPE || wr == -ECONNRESET);
    JT_CHECK_AT(label, jt_conn_wait_closed(&c, CLOSE_TIMEOUT_MS));
    if (jt_conn_avail(&c)) fprintf(stderr, "  [%s] got %zu bytes\n", label, jt_conn_avail(&c));
    JT_CHECK_AT(label, jt_conn_avail(&c) == 0);
    jt_conn_close(&c);
    check_fresh(label);
}

/* Expects an error answer with code and a reason (after "[E<code>]") equal to reason. */
static void expect_error(const char *label, const uint8_t *req, size_t n, int64_t cid, int code,
                         const char *reason, bool reason_is_prefix)
{
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int r = probe(req, n, &f, NULL, NULL);
    JT_CHECK_AT(label, r == 1);
    if (r == 1) {
        JT_CHECK_AT(label, f.meta->correlation_id == cid);
        JT_CHECK_AT(label, resp_code(f.meta) == code);
        const char *t = resp_text(f.meta);
        char want_prefix[32];
        snprintf(want_prefix, sizeof want_prefix, "][E%d]", code);
        const char *e = strstr(t, want_prefix);
        JT_CHECK_AT(label, e != NULL);
        const char *why = e ? e + strlen(want_prefix) : "";
        bool ok =
            reason_is_prefix ? strncmp(why, reason, strlen(reason)) == 0 : strcmp(why, reason) == 0;
        if (!ok) fprintf(stderr, "  [%s] text '%s', want '%s'\n", label, t, reason);
        JT_CHECK_AT(label, ok);
        JT_CHECK_AT(label, jet_iobuf_len(&f.body) == 0 && jet_iobuf_len(&f.attachment) == 0);
        JT_CHECK_AT(label, !f.meta->has_attachment_size);
    }
    jet__baidu_frame_fini(&f);
    check_fresh(label);
}

/* Expects a successful echo of msg (and attachment att) with cid. */
static void expect_echo(const char *label, const uint8_t *req, size_t n, int64_t cid,
                        const char *msg, const char *att, int compress)
{
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int r = probe(req, n, &f, NULL, NULL);
    JT_CHECK_AT(label, r == 1);
    if (r == 1) {
        JT_CHECK_AT(label, f.meta->has_correlation_id && f.meta->correlation_id == cid);
        if (resp_code(f.meta)) fprintf(stderr, "  [%s] error %s\n", label, resp_text(f.meta));
        JT_CHECK_AT(label, f.meta->response && f.meta->response->has_error_code);
        JT_CHECK_AT(label, resp_code(f.meta) == 0);
        JT_CHECK_AT(label, (f.meta->has_compress_type ? f.meta->compress_type : 0) == compress);
        char *m = jt_frame_echo_message(&f, false);
        JT_CHECK_AT(label, m && strcmp(m, msg) == 0);
        free(m);
        size_t alen = att ? strlen(att) : 0;
        JT_CHECK_AT(label, jet_iobuf_equals(&f.attachment, att ? att : "", alen) == 0);
        JT_CHECK_AT(label, f.meta->has_attachment_size == (alen > 0));
        /* §3.2: content_type, checksum_type and checksum_value always present. */
        JT_CHECK_AT(label, f.meta->has_content_type && f.meta->has_checksum_type);
    }
    jet__baidu_frame_fini(&f);
}

static void probe_ok_full_name_with_attachment(void)
{
    size_t n;
    uint8_t *q = build_echo("example.EchoService", "hello world", 0x100000002, "ATTACH", &n);
    expect_echo("ok_full_name_with_attachment", q, n, 0x100000002, "hello world", "ATTACH", 0);
    free(q);
}

static void probe_ok_minimal_meta(void)
{
    Brpc__Policy__RpcMeta m = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta rm = BRPC__POLICY__RPC_REQUEST_META__INIT;
    rm.service_name = "example.EchoService";
    rm.method_name = "Echo";
    m.request = &rm;
    m.has_correlation_id = true;
    m.correlation_id = 7;
    size_t bl, n;
    uint8_t *body = jt_echo_request_bytes("minimal", &bl);
    uint8_t *q = jt_frame_pack(&m, body, bl, NULL, 0, &n);
    /* request{service, method} + correlation_id only */
    JT_CHECK_EQ(jt_get_be32(q + 8), 2 + 2 + 19 + 2 + 4 + 2);
    expect_echo("ok_minimal_meta", q, n, 7, "minimal", NULL, 0);
    free(body);
    free(q);
}

static void probe_ok_short_service_name(void)
{
    size_t n;
    uint8_t *q = build_echo("EchoService", "short", 8, NULL, &n);
    expect_echo("ok_short_service_name", q, n, 8, "short", NULL, 0);
    free(q);
}

static void probe_unknown_service_with_dot(void)
{
    size_t n;
    uint8_t *q = build_echo("example.NoSuchService", "x", 9, NULL, &n);
    expect_error("unknown_service_with_dot", q, n, 9, 1002,
                 "Fail to find method=example.NoSuchService/Echo", false);
    free(q);
}

static void probe_unknown_service_without_dot(void)
{
    size_t n;
    uint8_t *q = build_echo("NoSuchService", "x", 10, NULL, &n);
    expect_error("unknown_service_without_dot", q, n, 10, 1001,
                 "Fail to find service=NoSuchService", false);
    free(q);
}

static void probe_unknown_method(void)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "NoSuchMethod", 11);
    size_t bl, n;
    uint8_t *body = jt_echo_request_bytes("x", &bl);
    uint8_t *q = jt_frame_pack(&m, body, bl, NULL, 0, &n);
    expect_error("unknown_method", q, n, 11, 1002,
                 "Fail to find method=example.EchoService/NoSuchMethod", false);
    free(body);
    free(q);
}

static void probe_meta_without_request(void)
{
    Brpc__Policy__RpcMeta m = BRPC__POLICY__RPC_META__INIT;
    m.has_correlation_id = true;
    m.correlation_id = 12;
    size_t bl, n;
    uint8_t *body = jt_echo_request_bytes("x", &bl);
    uint8_t *q = jt_frame_pack(&m, body, bl, NULL, 0, &n);
    expect_error("meta_without_request", q, n, 12, 1001, "Fail to find service=", false);
    free(body);
    free(q);
}

/* Hand-written metas: protobuf-c will not pack a request without its
 * required fields. body: EchoRequest{"x"}. */
static void probe_request_meta_missing_names(void)
{
    static const uint8_t no_service[] = {
        'P',  'R',  'P',  'C',  0,    0,    0,   13,  0,   0,
        0,    10,   0x0a, 0x06, 0x12, 0x04, 'E', 'c', 'h', 'o', /* request{method_name "Echo"} */
        0x20, 0x0d,                                             /* correlation_id 13 */
        0x0a, 0x01, 'x'};
    static const uint8_t no_method[] = {
        'P',  'R',  'P',  'C',  0,   0,   0,   28,  0,   0,   0,   25,
        0x0a, 0x15, 0x0a, 0x13, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.',
        'E',  'c',  'h',  'o',  'S', 'e', 'r', 'v', 'i', 'c', 'e', /* request{service_name} */
        0x20, 0x0e, 0x0a, 0x01, 'x'};
    expect_closed_silently("request_meta_missing_service_name", no_service, sizeof no_service);
    expect_closed_silently("request_meta_missing_method_name", no_method, sizeof no_method);
}

/* An echo request for msg with meta m (correlation id cid) is answered. */
static void echo_with_meta(const char *label, Brpc__Policy__RpcMeta *m, int64_t cid,
                           const char *msg)
{
    size_t bl, n;
    uint8_t *body = jt_echo_request_bytes(msg, &bl);
    uint8_t *q = jt_frame_pack(m, body, bl, NULL, 0, &n);
    expect_echo(label, q, n, cid, msg, NULL, 0);
    free(body);
    free(q);
}

static void probe_meta_with_response_field(void)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    Brpc__Policy__RpcResponseMeta resp = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    std_meta(&m, &rm, "example.EchoService", "Echo", 15);
    resp.has_error_code = true;
    resp.error_code = 0;
    m.response = &resp;
    echo_with_meta("meta_with_response_field_sent_to_server", &m, 15, "with response");
}

static void probe_user_fields(void)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "Echo", 16);
    Brpc__Policy__UserFieldsEntry e1 = BRPC__POLICY__USER_FIELDS_ENTRY__INIT;
    Brpc__Policy__UserFieldsEntry e2 = BRPC__POLICY__USER_FIELDS_ENTRY__INIT;
    e1.key = "k1";
    e1.value = "v1";
    e2.key = "key-two";
    e2.value = "";
    Brpc__Policy__UserFieldsEntry *ents[] = {&e1, &e2};
    m.n_user_fields = 2;
    m.user_fields = ents;
    echo_with_meta("user_fields_roundtrip", &m, 16, "fields");
}

/* content_type is an enum in brpc's meta: a value it does not know is an
 * unknown field there, and the message is read as protobuf. */
static void probe_unknown_content_type(void)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "Echo", 18);
    m.content_type = 7;
    echo_with_meta("unknown_content_type", &m, 18, "content 7");
}

static void probe_attachment_size_too_big(void)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "Echo", 17);
    m.has_attachment_size = true;
    m.attachment_size = 100;
    size_t bl, n;
    uint8_t *body = jt_echo_request_bytes("x", &bl);
    uint8_t *q = jt_frame_pack(&m, body, bl, "abc", 3, &n);
    char why[96];
    snprintf(why, sizeof why, "attachment_size=100 is larger than request_size=%zu", bl + 3);
    expect_error("attachment_size_too_big", q, n, 17, 1003, why, false);
    free(body);
    free(q);
}

static void probe_bad_bodies(void)
{
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "Echo", 18);
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    size_t n;
    uint8_t *q = jt_frame_pack(&m, junk, sizeof junk, NULL, 0, &n);
    expect_error("bad_body", q, n, 18, 1003,
                 "Fail to parse request=example.EchoRequest, ContentType=pb, CompressType=none, "
                 "ChecksumType=none, request_size=5",
                 false);
    free(q);
    m.correlation_id = 19;
    q = jt_frame_pack(&m, NULL, 0, NULL, 0, &n);
    expect_error("empty_body_missing_required", q, n, 19, 1003,
                 "Fail to parse request=example.EchoRequest", true);
    free(q);
}

/* A compressed body, made with zlib itself (not jetrpc's codec). */
static void probe_compressed_bodies(void)
{
    size_t bl;
    uint8_t *body = jt_echo_request_bytes("compressed hello hello hello hello", &bl);
    for (int ct = 2; ct <= 3; ct++) {
        z_stream z;
        memset(&z, 0, sizeof z);
        uint8_t out[512];
        JT_REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, ct == 2 ? 16 + 15 : 15, 8, Z_DEFAULT_STRATEGY) ==
                   Z_OK);
        z.next_in = body;
        z.avail_in = (uInt)bl;
        z.next_out = out;
        z.avail_out = sizeof out;
        JT_CHECK_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
        size_t clen = sizeof out - z.avail_out;
        deflateEnd(&z);
        Brpc__Policy__RpcMeta m;
        Brpc__Policy__RpcRequestMeta rm;
        std_meta(&m, &rm, "example.EchoService", "Echo", 20 + ct);
        m.compress_type = ct;
        m.has_attachment_size = true;
        m.attachment_size = 3;
        size_t n;
        uint8_t *q = jt_frame_pack(&m, out, clen, "raw", 3, &n);
        /* brpc's echo server answers with the request's compress type. */
        expect_echo(ct == 2 ? "gzip_body" : "zlib_body", q, n, 20 + ct,
                    "compressed hello hello hello hello", "raw", ct);
        free(q);
    }
    size_t slen = snappy_max_compressed_length(bl);
    char *sb = malloc(slen);
    JT_CHECK(snappy_compress((const char *)body, bl, sb, &slen) == SNAPPY_OK);
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "Echo", 24);
    m.compress_type = 1;
    size_t n;
    uint8_t *q = jt_frame_pack(&m, sb, slen, NULL, 0, &n);
    expect_echo("snappy_body", q, n, 24, "compressed hello hello hello hello", NULL, 1);
    free(q);
    free(sb);
    m.compress_type = 4;
    m.correlation_id = 25;
    q = jt_frame_pack(&m, body, bl, NULL, 0, &n);
    expect_error("compress_type_4_lz4", q, n, 25, 1003,
                 "Fail to parse request=example.EchoRequest, ContentType=pb, CompressType=unknown",
                 true);
    free(q);
    free(body);
}

static void probe_crc32c(void)
{
    /* BAIDU_STD §6: message 0a 05 "hello" → checksum_value 61 f6 3a 7e, accepted by brpc. */
    static const uint8_t body[] = {0x0a, 0x05, 'h', 'e', 'l', 'l', 'o'};
    uint8_t ck[4] = {0x61, 0xf6, 0x3a, 0x7e};
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta rm;
    std_meta(&m, &rm, "example.EchoService", "Echo", 26);
    m.checksum_type = 1;
    m.checksum_value.data = ck;
    m.checksum_value.len = 4;
    size_t n;
    uint8_t *q = jt_frame_pack(&m, body, sizeof body, NULL, 0, &n);
    expect_echo("crc32c_checksum_ok", q, n, 26, "hello", NULL, 0);
    free(q);
    ck[3] ^= 1;
    m.correlation_id = 27;
    q = jt_frame_pack(&m, body, sizeof body, NULL, 0, &n);
    expect_error("crc32c_checksum_bad", q, n, 27, 1003,
                 "Fail to parse request=example.EchoRequest, ContentType=pb, CompressType=none, "
                 "ChecksumType=crc32c, request_size=7",
                 false);
    free(q);
}

static void probe_negative_correlation_id(void)
{
    size_t n;
    uint8_t *q = build_echo("example.EchoService", "neg", -5, NULL, &n);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    int r = probe(q, n, &f, &raw, &raw_len);
    JT_CHECK_EQ(r, 1);
    if (r == 1) {
        JT_CHECK(f.meta->correlation_id == -5);
        static const uint8_t ten[] = {0x20, 0xfb, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0x01};
        JT_CHECK(memmem(raw, raw_len, ten, sizeof ten) != NULL);
    }
    free(raw);
    jet__baidu_frame_fini(&f);
    free(q);
}

static void probe_pipelined_two(void)
{
    size_t n1, n2;
    uint8_t *q1 = build_echo("example.EchoService", "first", 0x15, NULL, &n1);
    uint8_t *q2 = build_echo("example.EchoService", "second", 0x16, "a2", &n2);
    uint8_t *both = malloc(n1 + n2);
    memcpy(both, q1, n1);
    memcpy(both + n1, q2, n2);
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    JT_CHECK(jt_conn_write(&c, both, n1 + n2) == 0);
    bool got[2] = {false, false};
    for (int k = 0; k < 2; k++) {
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &f, NULL, NULL);
        JT_CHECK_EQ(r, 1);
        if (r == 1) {
            int64_t cid = f.meta->correlation_id;
            JT_CHECK(cid == 0x15 || cid == 0x16);
            char *m = jt_frame_echo_message(&f, false);
            if (cid == 0x15) {
                JT_CHECK(!got[0]);
                got[0] = true;
                JT_CHECK(m && strcmp(m, "first") == 0);
            } else if (cid == 0x16) {
                JT_CHECK(!got[1]);
                got[1] = true;
                JT_CHECK(m && strcmp(m, "second") == 0);
                JT_CHECK(jet_iobuf_equals(&f.attachment, "a2", 2) == 0);
            }
            free(m);
        }
        jet__baidu_frame_fini(&f);
    }
    JT_CHECK(got[0] && got[1]);
    jt_conn_close(&c);
    free(q1);
    free(q2);
    free(both);
}

/* The header split across writes with pauses: "PR", then the rest of the
 * header but one byte, then the rest. */
static void probe_split_magic(void)
{
    size_t n;
    uint8_t *q = build_echo("example.EchoService", "split", 0x17, "sa", &n);
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    JT_CHECK(jt_conn_write(&c, q, 2) == 0);
    usleep(30 * 1000);
    JT_CHECK(jt_conn_write(&c, q + 2, 9) == 0);
    usleep(30 * 1000);
    JT_CHECK(jt_conn_write(&c, q + 11, n - 11) == 0);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &f, NULL, NULL);
    JT_CHECK_EQ(r, 1);
    if (r == 1) {
        JT_CHECK(f.meta->correlation_id == 0x17 && resp_code(f.meta) == 0);
        char *m = jt_frame_echo_message(&f, false);
        JT_CHECK(m && strcmp(m, "split") == 0);
        free(m);
        JT_CHECK(jet_iobuf_equals(&f.attachment, "sa", 2) == 0);
    }
    jet__baidu_frame_fini(&f);
    jt_conn_close(&c);
    free(q);
}

static void probe_bad_meta(void)
{
    static const uint8_t q[] = {'P', 'R', 'P',  'C',  0,    0,    0,    8,    0,    0,
                                0,   5,   0xff, 0xff, 0xff, 0xff, 0xff, 0x0a, 0x01, 'x'};
    expect_closed_silently("bad_meta", q, sizeof q);
}

/* meta_size > body_size: brpc drops the 12 + body_size bytes and keeps the
 * connection; a valid request after it (same write, then a later one) is served. */
static void probe_meta_size_gt_body_size(void)
{
    static const uint8_t bad[] = {'P', 'R', 'P', 'C', 0, 0, 0, 4, 0, 0, 0, 10, 1, 2, 3, 4};
    size_t n1, n2;
    uint8_t *q1 = build_echo("example.EchoService", "after drop", 0x18, NULL, &n1);
    uint8_t *q2 = build_echo("example.EchoService", "still here", 0x19, NULL, &n2);
    uint8_t *both = malloc(sizeof bad + n1);
    memcpy(both, bad, sizeof bad);
    memcpy(both + sizeof bad, q1, n1);
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    JT_CHECK(jt_conn_write(&c, both, sizeof bad + n1) == 0);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &f, NULL, NULL);
    JT_CHECK_EQ(r, 1);
    if (r == 1) JT_CHECK(f.meta->correlation_id == 0x18 && resp_code(f.meta) == 0);
    jet__baidu_frame_fini(&f);
    jet__baidu_frame_init(&f);
    if (r == 1) {
        JT_CHECK(jt_conn_write(&c, bad, sizeof bad) == 0);
        usleep(20 * 1000);
        JT_CHECK(jt_conn_write(&c, q2, n2) == 0);
        r = jt_conn_frame(&c, IO_TIMEOUT_MS, &f, NULL, NULL);
        JT_CHECK_EQ(r, 1);
        if (r == 1) JT_CHECK(f.meta->correlation_id == 0x19 && resp_code(f.meta) == 0);
    }
    jet__baidu_frame_fini(&f);
    jt_conn_close(&c);
    free(q1);
    free(q2);
    free(both);
    check_fresh("meta_size_gt_body_size");
}

/* body_size 64 MiB + 1: closed on the header alone, before any body. */
static void probe_body_size_too_big(void)
{
    static const uint8_t q[] = {'P', 'R', 'P', 'C', 0x04, 0, 0, 0x01, 0, 0, 0, 0x10};
    expect_closed_silently("body_size_too_big", q, sizeof q);
}

static void probe_garbage_first_packet(void)
{
    uint8_t x[64];
    memset(x, 'X', sizeof x);
    expect_closed_silently("garbage_first_packet", x, sizeof x);
    /* A valid request followed by garbage: brpc closes the connection. */
    size_t n;
    uint8_t *q = build_echo("example.EchoService", "then garbage", 0x1a, NULL, &n);
    uint8_t *both = malloc(n + 100);
    memcpy(both, q, n);
    memset(both + n, 'X', 100);
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    int wr = jt_conn_write(&c, both, n + 100);
    JT_CHECK(wr == 0 || wr == -EPIPE || wr == -ECONNRESET);
    JT_CHECK(jt_conn_wait_closed(&c, CLOSE_TIMEOUT_MS));
    jt_conn_close(&c);
    free(q);
    free(both);
    check_fresh("request_then_garbage");
}

/* brpc RDMA clients get the un-negotiable hello (RDMA-TRANSPORT.md §3.3, §4.3),
 * send a 4-byte ACK and continue with PRPC on the same connection. */
static void rdma_hello_case(const char *label, const uint8_t *hello, size_t hlen,
                            const uint8_t *answer, size_t alen, bool ack_with_request)
{
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, g_port) == 0);
    JT_CHECK(jt_conn_write(&c, hello, hlen) == 0);
    uint8_t got[64];
    bool ok = jt_conn_read_exact(&c, got, alen, IO_TIMEOUT_MS);
    JT_CHECK_AT(label, ok);
    if (ok) JT_CHECK_AT(label, memcmp(got, answer, alen) == 0);
    size_t n;
    uint8_t *q = build_echo("example.EchoService", "over tcp", 0x1b, "ra", &n);
    uint8_t *msg = malloc(4 + n);
    memset(msg, 0, 4);
    memcpy(msg + 4, q, n);
    if (ack_with_request) {
        JT_CHECK_AT(label, jt_conn_write(&c, msg, 4 + n) == 0);
    } else {
        JT_CHECK_AT(label, jt_conn_write(&c, msg, 4) == 0);
        usleep(20 * 1000);
        JT_CHECK_AT(label, jt_conn_write(&c, q, n) == 0);
    }
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    int r = jt_conn_frame(&c, IO_TIMEOUT_MS, &f, NULL, NULL);
    JT_CHECK_AT(label, r == 1);
    if (r == 1) {
        JT_CHECK_AT(label, f.meta->correlation_id == 0x1b && resp_code(f.meta) == 0);
        char *m = jt_frame_echo_message(&f, false);
        JT_CHECK_AT(label, m && strcmp(m, "over tcp") == 0);
        free(m);
        JT_CHECK_AT(label, jet_iobuf_equals(&f.attachment, "ra", 2) == 0);
    }
    JT_CHECK_AT(label, jt_conn_avail(&c) == 0);
    jet__baidu_frame_fini(&f);
    jt_conn_close(&c);
    free(q);
    free(msg);
    check_fresh(label);
}

static void probe_rdma_hellos(void)
{
    /* The captured v2 client hello and the TCP server's answer (§3.3). */
    static const uint8_t v2_hello[40] = {0x52, 0x44, 0x4d, 0x41, 0x00,        0x28, 0x00, 0x02,
                                         0x00, 0x01, 0x00, 0x00, 0x1f,        0xe0, 0x00, 0x80,
                                         0x00, 0x80, 0x00, 0x00, [36] = 0x00, 0x00, 0x12, 0x34};
    static const uint8_t v2_answer[40] = {0x52, 0x44, 0x4d, 0x41, 0x00, 0x28, 0xff, 0xff};
    /* v3: "RDM3", pb_size, RdmaHello{block_size 8160, sq 128, rq 128, lid 0,
     * gid 16 bytes, qp_num 0x1234}; answer captured in §4.3. */
    static const uint8_t v3_hello[] = {0x52, 0x44, 0x4d, 0x33, 0x00, 0x00, 0x00, 0x20, 0x08, 0xe0,
                                       0x3f, 0x10, 0x80, 0x01, 0x18, 0x80, 0x01, 0x20, 0x00, 0x2a,
                                       0x10, 0xfe, 0x80, 0,    0,    0,    0,    0,    0,    0,
                                       0,    0,    0,    0,    0,    0,    0x01, 0x30, 0xb4, 0x24};
    static const uint8_t v3_answer[] = {0x52, 0x44, 0x4d, 0x33, 0x00, 0x00, 0x00, 0x1c, 0x08,
                                        0x00, 0x10, 0x00, 0x18, 0x00, 0x20, 0x00, 0x2a, 0x10,
                                        0,    0,    0,    0,    0,    0,    0,    0,    0,
                                        0,    0,    0,    0,    0,    0,    0,    0x30, 0x00};
    JT_CHECK_EQ(sizeof v3_hello, 8 + 0x20);
    rdma_hello_case("rdma_v2_hello", v2_hello, sizeof v2_hello, v2_answer, sizeof v2_answer, false);
    rdma_hello_case("rdma_v3_hello", v3_hello, sizeof v3_hello, v3_answer, sizeof v3_answer, false);
    rdma_hello_case("rdma_v2_hello_ack_and_request_together", v2_hello, sizeof v2_hello, v2_answer,
                    sizeof v2_answer, true);
}

/* ---- driver ------------------------------------------------------------------ */

static void run_recorded(void)
{
    JT_RUN(recorded_each_on_new_connection);
    JT_RUN(recorded_on_one_connection);
    JT_RUN(recorded_timeout_then_next);
    JT_RUN(recorded_pipelined_200);
}

int main(void)
{
    fprintf(stderr, "--- handlers on the event loop ---\n");
    if (server_up(false) < 0) {
        fprintf(stderr, "cannot start the server\n");
        return 1;
    }
    run_recorded();
    JT_RUN(probe_ok_full_name_with_attachment);
    JT_RUN(probe_ok_minimal_meta);
    JT_RUN(probe_ok_short_service_name);
    JT_RUN(probe_unknown_service_with_dot);
    JT_RUN(probe_unknown_service_without_dot);
    JT_RUN(probe_unknown_method);
    JT_RUN(probe_meta_without_request);
    JT_RUN(probe_request_meta_missing_names);
    JT_RUN(probe_meta_with_response_field);
    JT_RUN(probe_user_fields);
    JT_RUN(probe_unknown_content_type);
    JT_RUN(probe_attachment_size_too_big);
    JT_RUN(probe_bad_bodies);
    JT_RUN(probe_compressed_bodies);
    JT_RUN(probe_crc32c);
    JT_RUN(probe_negative_correlation_id);
    JT_RUN(probe_pipelined_two);
    JT_RUN(probe_split_magic);
    JT_RUN(probe_bad_meta);
    JT_RUN(probe_meta_size_gt_body_size);
    JT_RUN(probe_body_size_too_big);
    JT_RUN(probe_garbage_first_packet);
    JT_RUN(probe_rdma_hellos);
    server_down();

    fprintf(stderr, "--- handlers on the worker pool ---\n");
    if (server_up(true) < 0) {
        fprintf(stderr, "cannot start the server\n");
        return 1;
    }
    run_recorded();
    server_down();
    return jt_finish();
}
