/* Bad input from raw TCP clients to a running jetrpc server: frames built by
 * hand (header bytes by hand, RpcMeta through protobuf-c or byte by byte).
 * After every case a well-behaved channel on its own connection still gets
 * answers, the server holds no in-flight call and no connection beyond the
 * ones the test keeps open.
 *
 * The server runs with max_body_size = 1 MiB, on a single event loop (so that
 * a handler can hold the loop while input piles up). Its handler (the shared
 * echo service, answering lengths) answers "ok len=<message length>
 * att=<attachment length>"; "block:<ms>" holds the loop first. Its
 * jettest.NodeService/Depth answers "depth <levels>" for a Node (a type that
 * contains itself, test/proto/nest.proto). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <zlib.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "nest.pb-c.h"
#include "rpc/pb_nesting.h"
#include "rpc_meta.pb-c.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define MAX_BODY      (1u << 20)
#define RECV_GUARD_S  10              /* a read that waits this long means "no answer" */
#define WAIT_LIMIT_US (5 * 1000000LL) /* for closes and counters that settle in ms */

JET_FLAG_DECLARE_INT64(socket_max_unwritten_bytes);

static jt_echo_service_t g_service;
static jet_server_t *g_srv;
static int g_port;
static jet_channel_t *g_good; /* the well-behaved client */

/* ---- raw client ---------------------------------------------------------------- */

static int raw_connect(void)
{
    int fd = jt_tcp_connect(g_port, RECV_GUARD_S);
    if (fd < 0) abort();
    return fd;
}

/* A request meta for example.EchoService/Echo. */
typedef struct req_meta {
    Brpc__Policy__RpcMeta meta;
    Brpc__Policy__RpcRequestMeta req;
} req_meta_t;

static void req_meta_init(req_meta_t *r, int64_t cid)
{
    Brpc__Policy__RpcMeta m = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta q = BRPC__POLICY__RPC_REQUEST_META__INIT;
    r->meta = m;
    r->req = q;
    r->req.service_name = "example.EchoService";
    r->req.method_name = "Echo";
    r->meta.request = &r->req;
    r->meta.has_correlation_id = true;
    r->meta.correlation_id = cid;
}

/* A complete valid request: message "hi", attachment "att" (3 bytes). */
static void buf_good_request(jt_bytes_t *b, int64_t cid)
{
    req_meta_t r;
    req_meta_init(&r, cid);
    r.meta.has_attachment_size = true;
    r.meta.attachment_size = 3;
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hi", &n);
    jt_bytes_frame(b, &r.meta, msg, n, "att", 3);
    free(msg);
}

typedef struct response {
    Brpc__Policy__RpcMeta *meta;
    Example__EchoResponse *msg; /* NULL on an error answer */
    int error_code;
    const char *error_text;
} response_t;

static void response_free(response_t *r)
{
    if (r->meta) brpc__policy__rpc_meta__free_unpacked(r->meta, NULL);
    if (r->msg) example__echo_response__free_unpacked(r->msg, NULL);
    memset(r, 0, sizeof *r);
}

/* 1: one response frame read and decoded; 0: the server closed; -1: no
 * answer within the guard or a malformed answer. */
static int read_response(int fd, response_t *out)
{
    memset(out, 0, sizeof *out);
    uint8_t h[12];
    int rc = jt_recv_exact(fd, h, sizeof h);
    if (rc <= 0) return rc;
    if (memcmp(h, "PRPC", 4) != 0) return -1;
    uint32_t body = jt_get_be32(h + 4), meta_size = jt_get_be32(h + 8);
    if (meta_size > body || body > (64u << 20)) return -1;
    uint8_t *p = malloc(body ? body : 1);
    if (jt_recv_exact(fd, p, body) != 1) {
        free(p);
        return -1;
    }
    out->meta = brpc__policy__rpc_meta__unpack(NULL, meta_size, p);
    if (!out->meta) {
        free(p);
        return -1;
    }
    size_t att = out->meta->has_attachment_size ? (size_t)out->meta->attachment_size : 0;
    if (out->meta->response && out->meta->response->has_error_code)
        out->error_code = out->meta->response->error_code;
    out->error_text = out->meta->response && out->meta->response->error_text
                          ? out->meta->response->error_text
                          : "";
    if (out->error_code == 0)
        out->msg = example__echo_response__unpack(NULL, body - meta_size - att, p + meta_size);
    free(p);
    if (out->error_code == 0 && !out->msg) {
        response_free(out);
        return -1;
    }
    return 1;
}

/* The server closes the connection without sending anything. */
static bool expect_closed(int fd)
{
    uint8_t b;
    return jt_recv_exact(fd, &b, 1) == 0;
}

/* Reads one answer for cid and checks its error code (0 = success with the
 * handler's "ok len=2 att=3" for buf_good_request). */
static bool expect_answer(int fd, int64_t cid, int code, const char *text_part)
{
    response_t r;
    int rc = read_response(fd, &r);
    if (rc != 1) {
        fprintf(stderr, "  no answer for cid %lld (read: %d)\n", (long long)cid, rc);
        return false;
    }
    bool ok = r.meta->has_correlation_id && r.meta->correlation_id == cid && r.error_code == code;
    if (ok && text_part) ok = strstr(r.error_text, text_part) != NULL;
    if (ok && code == 0) ok = r.msg && r.msg->message;
    if (!ok)
        fprintf(stderr, "  answer cid=%lld code=%d text='%s' (wanted cid %lld code %d '%s')\n",
                (long long)r.meta->correlation_id, r.error_code, r.error_text, (long long)cid, code,
                text_part ? text_part : "");
    response_free(&r);
    return ok;
}

static bool expect_ok(int fd, int64_t cid)
{
    response_t r;
    if (read_response(fd, &r) != 1) return false;
    bool ok = r.meta->correlation_id == cid && r.error_code == 0 && r.msg &&
              strcmp(r.msg->message, "ok len=2 att=3") == 0;
    if (!ok)
        fprintf(stderr, "  answer cid=%lld code=%d '%s'\n", (long long)r.meta->correlation_id,
                r.error_code, r.msg ? r.msg->message : r.error_text);
    response_free(&r);
    return ok;
}

/* A good request on the same raw connection is answered. */
static bool raw_still_served(int fd, int64_t cid)
{
    jt_bytes_t b = {0};
    buf_good_request(&b, cid);
    bool ok = jt_send_all(fd, b.p, b.len) && expect_ok(fd, cid);
    free(b.p);
    return ok;
}

static bool send_buf(int fd, jt_bytes_t *b)
{
    bool ok = jt_send_all(fd, b->p, b->len);
    free(b->p);
    memset(b, 0, sizeof *b);
    return ok;
}

/* ---- health checks ------------------------------------------------------------- */

/* Connections open when the current case started (the good channel's, and
 * any that an earlier failed case leaked). */
static uint64_t g_base_open;

static void case_begin(void)
{
    jet_server_stats_t st;
    jet_server_get_stats(g_srv, &st);
    g_base_open = st.connections_open;
}

/* The well-behaved channel gets answers, and the server settles to no call
 * in flight and at most `open` connections. */
static void check_healthy_at_most(uint64_t open)
{
    jet_call_t *call = jet_call_create();
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "hi";
    jet_iobuf_append(jet_call_request_attachment(call), "att", 3);
    JT_CHECK_EQ(jet_channel_call(g_good, &example__echo_service__descriptor, 0, call, &req.base,
                                 NULL, NULL),
                0);
    const Example__EchoResponse *resp = (const void *)jet_call_response(call);
    JT_CHECK(!jet_call_failed(call) && resp && strcmp(resp->message, "ok len=2 att=3") == 0);
    if (jet_call_failed(call))
        fprintf(stderr, "  good channel: [E%d] %s\n", jet_call_error_code(call),
                jet_call_error_text(call));
    jet_call_destroy(call);
    jet_server_stats_t st;
    jt_server_wait_stats(g_srv, 0, open, WAIT_LIMIT_US, &st);
    JT_CHECK_EQ(st.in_flight, 0);
    JT_CHECK(st.connections_open <= open);
}

/* Healthy, and every connection the case opened is closed again. */
static void check_healthy(void)
{
    check_healthy_at_most(g_base_open);
}

/* ---- cases ---------------------------------------------------------------- */

static void test_good_raw_requests(void)
{
    /* The raw client itself is right: single, pipelined, and byte by byte. */
    int fd = raw_connect();
    JT_CHECK(raw_still_served(fd, 1));
    jt_bytes_t b = {0};
    for (int i = 0; i < 3; i++)
        buf_good_request(&b, 100 + i);
    JT_REQUIRE(send_buf(fd, &b));
    /* Answers are matched by correlation id, whatever their order. */
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        response_t r;
        JT_REQUIRE(read_response(fd, &r) == 1);
        int64_t k = r.meta->correlation_id - 100;
        JT_CHECK(k >= 0 && k < 3 && !seen[k] && r.error_code == 0);
        if (k >= 0 && k < 3) seen[k] = true;
        response_free(&r);
    }
    buf_good_request(&b, 7);
    for (size_t i = 0; i < b.len; i++)
        JT_REQUIRE(jt_send_all(fd, b.p + i, 1));
    free(b.p);
    memset(&b, 0, sizeof b);
    JT_CHECK(expect_ok(fd, 7));
    /* A minimal meta (service, method, correlation_id only) and a negative id. */
    req_meta_t r;
    req_meta_init(&r, -5);
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hi", &n);
    jt_bytes_frame(&b, &r.meta, msg, n, NULL, 0);
    free(msg);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_answer(fd, -5, 0, NULL));
    /* The short (undotted) service name is accepted. */
    req_meta_init(&r, 8);
    r.req.service_name = "EchoService";
    msg = jt_echo_request_bytes("hi", &n);
    jt_bytes_frame(&b, &r.meta, msg, n, NULL, 0);
    free(msg);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_answer(fd, 8, 0, NULL));
    close(fd);
    check_healthy();
}

static void test_garbage_magic(void)
{
    static const char *const inputs[] = {
        "GARBAGE!GARBAGE!GARBAGE!GARBAGE!",
        "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "PRPX\0\0\0\0\0\0\0\0garbage after",
    };
    static const size_t lens[] = {32, 27, 25};
    for (size_t i = 0; i < 3; i++) {
        int fd = raw_connect();
        jt_send_all(fd, inputs[i], lens[i]);
        JT_CHECK(expect_closed(fd));
        close(fd);
    }
    /* A valid request then garbage in one write: the connection is closed (the
     * answer may or may not get out first, as with brpc). */
    int fd = raw_connect();
    jt_bytes_t b = {0};
    buf_good_request(&b, 11);
    jt_bytes_add(&b, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX", 48);
    send_buf(fd, &b);
    response_t r;
    int rc = read_response(fd, &r);
    if (rc == 1) {
        JT_CHECK(r.meta->correlation_id == 11 && r.error_code == 0);
        response_free(&r);
        rc = read_response(fd, &r);
    }
    JT_CHECK_EQ(rc, 0);
    close(fd);
    /* A brpc RDMA hello with an impossible length is not a hello: closed. */
    fd = raw_connect();
    uint8_t hello[40] = {'R', 'D', 'M', 'A', 0x00, 0x05};
    jt_send_all(fd, hello, sizeof hello);
    JT_CHECK(expect_closed(fd));
    close(fd);
    check_healthy();
}

static void test_rdma_hello_then_prpc(void)
{
    /* A brpc RDMA client's v2 hello gets the un-negotiable answer; after the
     * 4-byte ACK the connection speaks baidu_std. */
    int fd = raw_connect();
    uint8_t hello[40] = {'R', 'D', 'M', 'A', 0x00, 0x28};
    JT_REQUIRE(jt_send_all(fd, hello, sizeof hello));
    uint8_t answer[40];
    JT_REQUIRE(jt_recv_exact(fd, answer, sizeof answer) == 1);
    static const uint8_t expected[8] = {'R', 'D', 'M', 'A', 0x00, 0x28, 0xff, 0xff};
    JT_CHECK(memcmp(answer, expected, 8) == 0);
    JT_REQUIRE(jt_send_all(fd, "\0\0\0\0", 4));
    JT_CHECK(raw_still_served(fd, 21));
    close(fd);
    check_healthy();
}

static void test_body_size_over_limit(void)
{
    /* Only the header: the server must close on it, before any body. */
    int fd = raw_connect();
    jt_bytes_t b = {0};
    jt_bytes_header(&b, MAX_BODY + 1, 20);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_closed(fd));
    close(fd);
    fd = raw_connect();
    jt_bytes_header(&b, 0xffffffffu, 0xffffffffu);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_closed(fd));
    close(fd);

    /* Exactly the limit is fine: pad with an attachment until body_size == 1 MiB. */
    req_meta_t r;
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hi", &n);
    req_meta_init(&r, 31);
    r.meta.has_attachment_size = true;
    size_t att = 0;
    for (int i = 0; i < 4; i++) { /* meta size depends on the varint of att */
        r.meta.attachment_size = (int32_t)att;
        att = MAX_BODY - brpc__policy__rpc_meta__get_packed_size(&r.meta) - n;
    }
    r.meta.attachment_size = (int32_t)att;
    JT_REQUIRE(brpc__policy__rpc_meta__get_packed_size(&r.meta) + n + att == MAX_BODY);
    uint8_t *pad = calloc(1, att);
    jt_bytes_frame(&b, &r.meta, msg, n, pad, att);
    free(pad);
    free(msg);
    fd = raw_connect();
    JT_REQUIRE(send_buf(fd, &b));
    response_t resp;
    JT_REQUIRE(read_response(fd, &resp) == 1);
    char want[64];
    snprintf(want, sizeof want, "ok len=2 att=%zu", att);
    JT_CHECK(resp.error_code == 0 && resp.msg && strcmp(resp.msg->message, want) == 0);
    response_free(&resp);
    close(fd);

    /* A jetrpc client whose request is over the server's limit: the server
     * closes each connection; the call ends with a connection error. */
    jet_channel_t *ch = jt_channel_open_port(g_port, JET_CONNECTION_SINGLE, 10000, 1);
    JT_REQUIRE(ch != NULL);
    jet_call_t *call = jet_call_create();
    uint8_t *big = calloc(1, 2 * MAX_BODY);
    jet_iobuf_append(jet_call_request_attachment(call), big, 2 * MAX_BODY);
    free(big);
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "too big";
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK(jet_call_error_code(call) != JET_ERPCTIMEDOUT);
    JT_CHECK(jet_call_error_code(call) == JET_EEOF || jet_call_error_code(call) == ECONNRESET ||
             jet_call_error_code(call) == EPIPE);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    check_healthy();
}

static void test_meta_size_over_body_size(void)
{
    /* brpc drops such a frame whole and keeps the connection. */
    int fd = raw_connect();
    jt_bytes_t b = {0};
    jt_bytes_header(&b, 10, 20);
    jt_bytes_add(&b, "0123456789", 10);
    JT_REQUIRE(send_buf(fd, &b));
    /* Nothing answers the dropped frame: the next answer is the good request's. */
    JT_CHECK(raw_still_served(fd, 41));
    close(fd);
    check_healthy();
}

static void test_truncated_frames(void)
{
    jet_server_stats_t before;
    jet_server_get_stats(g_srv, &before);
    /* A header promising 1000 bytes, 500 sent, then close. */
    int fd = raw_connect();
    jt_bytes_t b = {0};
    jt_bytes_header(&b, 1000, 40);
    uint8_t junk[500];
    memset(junk, 0x5a, sizeof junk);
    jt_bytes_add(&b, junk, sizeof junk);
    JT_REQUIRE(send_buf(fd, &b));
    close(fd);
    /* Half a header, then close. */
    fd = raw_connect();
    JT_REQUIRE(jt_send_all(fd, "PRPC\0\0", 6));
    close(fd);
    /* A whole valid request cut short by one byte, then close. */
    fd = raw_connect();
    buf_good_request(&b, 51);
    JT_REQUIRE(jt_send_all(fd, b.p, b.len - 1));
    free(b.p);
    memset(&b, 0, sizeof b);
    close(fd);
    /* A truncated frame, the connection kept open: nothing is answered yet,
     * then the rest arrives and the request is served. */
    fd = raw_connect();
    buf_good_request(&b, 52);
    JT_REQUIRE(jt_send_all(fd, b.p, 20));
    struct timeval tv = {.tv_usec = 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    uint8_t byte;
    JT_CHECK_EQ(jt_recv_exact(fd, &byte, 1), -1);
    tv.tv_sec = RECV_GUARD_S;
    tv.tv_usec = 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    JT_REQUIRE(jt_send_all(fd, b.p + 20, b.len - 20));
    free(b.p);
    JT_CHECK(expect_ok(fd, 52));
    close(fd);
    check_healthy();
    jet_server_stats_t after;
    jet_server_get_stats(g_srv, &after);
    JT_CHECK_EQ(after.requests - before.requests, 2); /* 52 and check_healthy's */
}

static void test_close_while_loop_busy(void)
{
    /* While a handler holds the only loop, clients send partial frames and
     * close: their bytes and their FIN reach the server together. The server
     * must still see every close. */
    int blocker = raw_connect();
    req_meta_t r;
    req_meta_init(&r, 200);
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("block:300", &n);
    jt_bytes_t b = {0};
    jt_bytes_frame(&b, &r.meta, msg, n, NULL, 0);
    free(msg);
    JT_REQUIRE(send_buf(blocker, &b));
    jet_server_stats_t st;
    JT_WAIT_EVERY((jet_server_get_stats(g_srv, &st), st.in_flight != 0), WAIT_LIMIT_US, 1000);
    JT_REQUIRE(st.in_flight == 1); /* the loop is busy from here for ~300 ms */
    int fd = raw_connect();
    jt_bytes_header(&b, 1000, 40);
    uint8_t junk[500];
    memset(junk, 0x5a, sizeof junk);
    jt_bytes_add(&b, junk, sizeof junk);
    send_buf(fd, &b);
    close(fd);
    fd = raw_connect();
    jt_send_all(fd, "PRPC\0\0", 6);
    close(fd);
    fd = raw_connect();
    buf_good_request(&b, 201);
    jt_send_all(fd, b.p, b.len - 1);
    free(b.p);
    memset(&b, 0, sizeof b);
    close(fd);
    /* A whole request and close: answered into a closed connection. */
    fd = raw_connect();
    buf_good_request(&b, 202);
    send_buf(fd, &b);
    close(fd);
    JT_CHECK(expect_answer(blocker, 200, 0, NULL));
    close(blocker);
    check_healthy();
}

static void test_undecodable_meta(void)
{
    /* Junk where RpcMeta should be: closed, no answer. */
    int fd = raw_connect();
    jt_bytes_t b = {0};
    static const uint8_t junk[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    jt_bytes_frame_raw(&b, junk, sizeof junk, NULL, 0, NULL, 0);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_closed(fd));
    close(fd);
    /* A request meta without its required method_name: unparseable, closed. */
    static const uint8_t no_method[] = {0x0a, 0x15, 0x0a, 0x13, 'e', 'x',  'a', 'm', 'p',
                                        'l',  'e',  '.',  'E',  'c', 'h',  'o', 'S', 'e',
                                        'r',  'v',  'i',  'c',  'e', 0x20, 0x01};
    fd = raw_connect();
    jt_bytes_frame_raw(&b, no_method, sizeof no_method, NULL, 0, NULL, 0);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_closed(fd));
    close(fd);
    /* A length-delimited field running past meta_size. */
    static const uint8_t overrun[] = {0x0a, 0x7f, 0x0a, 0x02, 'x', 'y'};
    fd = raw_connect();
    jt_bytes_frame_raw(&b, overrun, sizeof overrun, "tail", 4, NULL, 0);
    JT_REQUIRE(send_buf(fd, &b));
    JT_CHECK(expect_closed(fd));
    close(fd);
    /* A large junk meta (100 KiB). */
    uint8_t *big = malloc(100000);
    memset(big, 0xee, 100000);
    fd = raw_connect();
    jt_bytes_frame_raw(&b, big, 100000, NULL, 0, NULL, 0);
    free(big);
    send_buf(fd, &b);
    JT_CHECK(expect_closed(fd));
    close(fd);
    check_healthy();
}

static void send_with_meta(int fd, const req_meta_t *r, const void *msg, size_t msg_len,
                           const void *att, size_t att_len)
{
    jt_bytes_t b = {0};
    jt_bytes_frame(&b, &r->meta, msg, msg_len, att, att_len);
    send_buf(fd, &b);
}

static void test_unknown_compress_type(void)
{
    int fd = raw_connect();
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hi", &n);
    static const int types[] = {4, 99, -1};
    for (int i = 0; i < 3; i++) {
        req_meta_t r;
        req_meta_init(&r, 60 + i);
        r.meta.has_compress_type = true;
        r.meta.compress_type = types[i];
        send_with_meta(fd, &r, msg, n, NULL, 0);
        JT_CHECK(expect_answer(fd, 60 + i, JET_EREQUEST, "CompressType=unknown"));
    }
    /* The connection stays usable. */
    JT_CHECK(raw_still_served(fd, 69));
    free(msg);
    close(fd);
    check_healthy();
}

static void test_undecodable_body(void)
{
    int fd = raw_connect();
    req_meta_t r;
    /* Not protobuf. */
    static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    req_meta_init(&r, 70);
    send_with_meta(fd, &r, junk, sizeof junk, NULL, 0);
    JT_CHECK(expect_answer(fd, 70, JET_EREQUEST, "Fail to parse request=example.EchoRequest"));
    /* Empty message: the required field is missing. */
    req_meta_init(&r, 71);
    send_with_meta(fd, &r, NULL, 0, NULL, 0);
    JT_CHECK(expect_answer(fd, 71, JET_EREQUEST, "Fail to parse request"));
    /* A string field longer than the message. */
    static const uint8_t overrun[] = {0x0a, 0x40, 'h', 'i'};
    req_meta_init(&r, 72);
    send_with_meta(fd, &r, overrun, sizeof overrun, NULL, 0);
    JT_CHECK(expect_answer(fd, 72, JET_EREQUEST, "Fail to parse request"));
    /* Claims gzip / zlib / snappy, carries plain bytes. */
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hello there, not compressed at all", &n);
    for (int type = 1; type <= 3; type++) {
        req_meta_init(&r, 72 + type);
        r.meta.has_compress_type = true;
        r.meta.compress_type = type;
        send_with_meta(fd, &r, msg, n, NULL, 0);
        JT_CHECK(expect_answer(fd, 72 + type, JET_EREQUEST, "Fail to parse request"));
    }
    free(msg);
    JT_CHECK(raw_still_served(fd, 79));
    close(fd);
    check_healthy();
}

static void test_decompression_limit(void)
{
    /* A zlib message that inflates past max_body_size is refused, not inflated
     * without bound; one under the limit is served. */
    int fd = raw_connect();
    size_t sizes[2] = {MAX_BODY / 2, 2 * MAX_BODY};
    for (int i = 0; i < 2; i++) {
        char *text = malloc(sizes[i] + 1);
        memset(text, 'a', sizes[i]);
        text[sizes[i]] = 0;
        size_t n;
        uint8_t *msg = jt_echo_request_bytes(text, &n);
        free(text);
        uLongf zlen = compressBound(n);
        uint8_t *z = malloc(zlen);
        JT_REQUIRE(compress2(z, &zlen, msg, n, 9) == Z_OK);
        free(msg);
        JT_CHECK(zlen < MAX_BODY / 64);
        req_meta_t r;
        req_meta_init(&r, 80 + i);
        r.meta.has_compress_type = true;
        r.meta.compress_type = JET_COMPRESS_ZLIB;
        send_with_meta(fd, &r, z, zlen, NULL, 0);
        free(z);
        if (i == 0) {
            response_t resp;
            JT_REQUIRE(read_response(fd, &resp) == 1);
            char want[64];
            snprintf(want, sizeof want, "ok len=%zu att=0", sizes[0]);
            JT_CHECK(resp.error_code == 0 && resp.msg && strcmp(resp.msg->message, want) == 0);
            response_free(&resp);
        } else {
            JT_CHECK(expect_answer(fd, 81, JET_EREQUEST, "Fail to parse request"));
        }
    }
    JT_CHECK(raw_still_served(fd, 89));
    close(fd);
    check_healthy();
}

static void test_attachment_size_too_big(void)
{
    int fd = raw_connect();
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hi", &n);
    static const int32_t extra[] = {1, 1000, INT32_MAX};
    for (int i = 0; i < 3; i++) {
        req_meta_t r;
        req_meta_init(&r, 90 + i);
        r.meta.has_attachment_size = true;
        int64_t v = (int64_t)n + 3 + extra[i];
        r.meta.attachment_size = v > INT32_MAX ? INT32_MAX : (int32_t)v;
        send_with_meta(fd, &r, msg, n, "att", 3);
        JT_CHECK(expect_answer(fd, 90 + i, JET_EREQUEST, "attachment_size="));
    }
    /* A negative attachment size is as wrong. */
    req_meta_t r;
    req_meta_init(&r, 95);
    r.meta.has_attachment_size = true;
    r.meta.attachment_size = -3;
    send_with_meta(fd, &r, msg, n, "att", 3);
    JT_CHECK(expect_answer(fd, 95, JET_EREQUEST, NULL));
    /* attachment_size == the whole payload: the message part is empty, which
     * fails the required field. */
    req_meta_init(&r, 96);
    r.meta.has_attachment_size = true;
    r.meta.attachment_size = (int32_t)n + 3;
    send_with_meta(fd, &r, msg, n, "att", 3);
    JT_CHECK(expect_answer(fd, 96, JET_EREQUEST, "Fail to parse request"));
    free(msg);
    JT_CHECK(raw_still_served(fd, 99));
    close(fd);
    check_healthy();
}

static void test_checksum(void)
{
    /* EchoRequest{message "hello"} = 0a 05 68 65 6c 6c 6f, whose masked CRC32C
     * is 61 f6 3a 7e (recorded against brpc). */
    static const uint8_t msg[] = {0x0a, 0x05, 'h', 'e', 'l', 'l', 'o'};
    static uint8_t good[4] = {0x61, 0xf6, 0x3a, 0x7e};
    static uint8_t bad[4] = {0x61, 0xf6, 0x3a, 0x7f};
    static uint8_t short_value[3] = {0x61, 0xf6, 0x3a};
    int fd = raw_connect();
    req_meta_t r;
    req_meta_init(&r, 100);
    r.meta.has_checksum_type = true;
    r.meta.checksum_type = 1;
    r.meta.has_checksum_value = true;
    r.meta.checksum_value.data = good;
    r.meta.checksum_value.len = 4;
    send_with_meta(fd, &r, msg, sizeof msg, NULL, 0);
    JT_CHECK(expect_answer(fd, 100, 0, NULL));
    r.meta.correlation_id = 101;
    r.meta.checksum_value.data = bad;
    send_with_meta(fd, &r, msg, sizeof msg, NULL, 0);
    JT_CHECK(expect_answer(fd, 101, JET_EREQUEST, "ChecksumType=crc32c"));
    r.meta.correlation_id = 102;
    r.meta.checksum_value.data = short_value;
    r.meta.checksum_value.len = 3;
    send_with_meta(fd, &r, msg, sizeof msg, NULL, 0);
    JT_CHECK(expect_answer(fd, 102, JET_EREQUEST, NULL));
    /* With checksum_with_attachment the attachment is covered too: the
     * message-only value no longer matches. */
    r.meta.correlation_id = 103;
    r.meta.checksum_value.data = good;
    r.meta.checksum_value.len = 4;
    r.meta.has_checksum_with_attachment = true;
    r.meta.checksum_with_attachment = true;
    r.meta.has_attachment_size = true;
    r.meta.attachment_size = 3;
    send_with_meta(fd, &r, msg, sizeof msg, "att", 3);
    JT_CHECK(expect_answer(fd, 103, JET_EREQUEST, NULL));
    /* An unknown checksum type is not verified (brpc). */
    req_meta_init(&r, 104);
    r.meta.has_checksum_type = true;
    r.meta.checksum_type = 77;
    r.meta.has_checksum_value = true;
    r.meta.checksum_value.data = bad;
    r.meta.checksum_value.len = 4;
    send_with_meta(fd, &r, msg, sizeof msg, NULL, 0);
    JT_CHECK(expect_answer(fd, 104, 0, NULL));
    JT_CHECK(raw_still_served(fd, 109));
    close(fd);
    check_healthy();
}

static void test_unknown_service_and_method(void)
{
    int fd = raw_connect();
    size_t n;
    uint8_t *msg = jt_echo_request_bytes("hi", &n);
    req_meta_t r;
    /* No request meta at all. */
    req_meta_init(&r, 110);
    r.meta.request = NULL;
    send_with_meta(fd, &r, msg, n, NULL, 0);
    JT_CHECK(expect_answer(fd, 110, JET_ENOSERVICE, "Fail to find service="));
    req_meta_init(&r, 111);
    r.req.service_name = "NoSuchService";
    send_with_meta(fd, &r, msg, n, NULL, 0);
    JT_CHECK(expect_answer(fd, 111, JET_ENOSERVICE, "Fail to find service=NoSuchService"));
    req_meta_init(&r, 112);
    r.req.service_name = "example.NoSuchService";
    send_with_meta(fd, &r, msg, n, NULL, 0);
    JT_CHECK(
        expect_answer(fd, 112, JET_ENOMETHOD, "Fail to find method=example.NoSuchService/Echo"));
    req_meta_init(&r, 113);
    r.req.method_name = "NoSuchMethod";
    send_with_meta(fd, &r, msg, n, NULL, 0);
    JT_CHECK(expect_answer(fd, 113, JET_ENOMETHOD, "NoSuchMethod"));
    req_meta_init(&r, 114);
    r.req.service_name = "";
    r.req.method_name = "";
    send_with_meta(fd, &r, msg, n, NULL, 0);
    JT_CHECK(expect_answer(fd, 114, JET_ENOSERVICE, NULL));
    /* An answer whose meta (its error text) is over the 256 bytes packed on
     * the stack goes through protobuf-c's sink, empty fields included. */
    static char long_name[603];
    memcpy(long_name, "x.", 2);
    memset(long_name + 2, 'a', 600);
    req_meta_init(&r, 115);
    r.req.service_name = long_name;
    send_with_meta(fd, &r, msg, n, NULL, 0);
    JT_CHECK(expect_answer(fd, 115, JET_ENOMETHOD, "Fail to find method=x.aaaa"));
    free(msg);
    JT_CHECK(raw_still_served(fd, 119));
    close(fd);
    check_healthy();
}

/* A client that sends requests and reads no answers: the server stops
 * reading it once more than socket_max_unwritten_bytes (1 MiB here) of
 * answers wait, so it takes a bounded number of them, not all it is sent.
 * When the client reads, every answer comes, in order, also to the
 * requests sent while the server was not reading (the fd gives no new edge
 * for them: the server reads again by itself). */
/* jettest.NodeService/Depth: how many levels of `child` the request has. */
static void node_depth(Jettest__NodeService_Service *svc, const Jettest__Node *in,
                       Jettest__DepthAnswer_Closure closure, void *closure_data)
{
    (void)svc;
    size_t levels = 0;
    for (const Jettest__Node *x = in; x->child; x = x->child)
        levels++;
    char text[64];
    snprintf(text, sizeof text, "depth %zu", levels);
    Jettest__DepthAnswer out = JETTEST__DEPTH_ANSWER__INIT;
    out.message = text;
    closure(&out, closure_data);
}

static Jettest__NodeService_Service g_node_service = JETTEST__NODE_SERVICE__INIT(node_);

/* A request nested deeper than protobuf's recursion limit is answered
 * EREQUEST before it is decoded (protobuf-c alone overflowed the loop's
 * stack on 200,000 levels, ~600 kB, and the server died); up to the limit it
 * reaches the handler. The connection stays usable. */
static void test_nested_too_deep(void)
{
    int fd = raw_connect();
    static const size_t depths[] = {200000, JET_PB_MAX_NESTING + 1, JET_PB_MAX_NESTING};
    for (int i = 0; i < 3; i++) {
        req_meta_t r;
        req_meta_init(&r, 90 + i);
        r.req.service_name = "jettest.NodeService";
        r.req.method_name = "Depth";
        size_t n;
        uint8_t *msg = jt_nested_node_bytes(depths[i], &n);
        send_with_meta(fd, &r, msg, n, NULL, 0);
        free(msg);
        if (depths[i] > JET_PB_MAX_NESTING) {
            JT_CHECK(expect_answer(fd, 90 + i, JET_EREQUEST, "Fail to parse request=jettest.Node"));
            continue;
        }
        response_t a;
        JT_CHECK_EQ(read_response(fd, &a), 1);
        char want[64];
        snprintf(want, sizeof want, "depth %zu", depths[i]);
        JT_CHECK(a.meta && a.error_code == 0 && a.msg && strcmp(a.msg->message, want) == 0);
        response_free(&a);
    }
    JT_CHECK(raw_still_served(fd, 99));
    close(fd);
    check_healthy();
}

static void test_unread_answers_bounded(void)
{
    enum { MORE = 100, ANSWER = 64 << 10, LIMIT = 1 << 20 };
    /* Besides the limit, the server's socket send buffer (at most
     * tcp_wmem's maximum) and our receive buffer hold answers: the server
     * takes at most that many requests, and is sent twice as many. */
    long wmem[3] = {0, 0, 4 << 20};
    FILE *wf = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
    if (wf) {
        if (fscanf(wf, "%ld %ld %ld", &wmem[0], &wmem[1], &wmem[2]) != 3) wmem[2] = 4 << 20;
        fclose(wf);
    }
    const int bound = (int)((LIMIT + wmem[2] + (256 << 10)) / ANSWER) + 8;
    const int N = 2 * bound > 400 ? 2 * bound : 400;
    /* A small, fixed receive buffer: the kernel takes little on our side. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    JT_REQUIRE(fd >= 0);
    int rcvbuf = 64 << 10;
    JT_REQUIRE(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf) == 0);
    struct timeval tv = {.tv_sec = RECV_GUARD_S};
    JT_REQUIRE(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    JT_REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    char old[32];
    snprintf(old, sizeof old, "%lld", (long long)JET_FLAG(socket_max_unwritten_bytes));
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", "1048576"), 0);
    jet_server_stats_t st0, st;
    jet_server_get_stats(g_srv, &st0);
    char msg[32];
    snprintf(msg, sizeof msg, "big:%d", ANSWER);
    for (int phase = 0; phase < 2; phase++) {
        jt_bytes_t b = {0};
        for (int i = phase ? N : 0; i < (phase ? N + MORE : N); i++) {
            req_meta_t r;
            req_meta_init(&r, 1000 + i);
            size_t n;
            uint8_t *m = jt_echo_request_bytes(msg, &n);
            jt_bytes_frame(&b, &r.meta, m, n, NULL, 0);
            free(m);
        }
        JT_CHECK(send_buf(fd, &b)); /* small requests: the kernel takes them all */
        if (phase) break;
        /* The server takes requests until its answers back up, then stops. */
        uint64_t taken = 0;
        for (int quiet = 0; quiet < 5;) {
            usleep(100000);
            jet_server_get_stats(g_srv, &st);
            quiet = st.requests - st0.requests == taken ? quiet + 1 : 0;
            taken = st.requests - st0.requests;
        }
        fprintf(stderr, "  requests taken while no answer was read: %llu of %d\n",
                (unsigned long long)taken, N);
        /* Without the pause the server takes all of them. */
        JT_CHECK(taken <= (uint64_t)bound);
    }
    int ok = 0;
    for (int i = 0; i < N + MORE; i++) {
        uint8_t h[12];
        if (jt_recv_exact(fd, h, sizeof h) != 1) break;
        uint32_t body = jt_get_be32(h + 4);
        if (body > (1u << 20)) break;
        uint8_t *p = malloc(12 + (size_t)body);
        JT_REQUIRE(p);
        memcpy(p, h, 12);
        bool good = jt_recv_exact(fd, p + 12, body) == 1 &&
                    jt_big_answer_ok(p, 12 + (size_t)body, 1000 + i, ANSWER);
        free(p);
        if (!good) break;
        ok++;
    }
    JT_CHECK_EQ(ok, N + MORE);
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", old), 0);
    close(fd);
    check_healthy();
}

/* ---- one client's flood against the others ------------------------------------- */

static _Atomic uint64_t g_mark_at; /* requests the server had taken when "mark" came */

/* The service's hook: notes when a "mark" request is served, and lets the
 * echo answer it. */
static bool mark_hook(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                      void *closure_data)
{
    (void)closure;
    (void)closure_data;
    if (req->message && strcmp(req->message, "mark") == 0) {
        jet_server_stats_t st;
        jet_server_get_stats(g_srv, &st);
        atomic_store(&g_mark_at, st.requests);
    }
    return false;
}

typedef struct flood {
    int fd;
    jt_bytes_t b;
    bool sent;
} flood_t;

static void *flood_main(void *arg)
{
    flood_t *f = arg;
    f->sent = send_buf(f->fd, &f->b);
    return NULL;
}

/* A client that pipelines requests faster than the server serves them
 * (2,000 in one stream, each holding the loop a millisecond) gets the loop,
 * which the server shares with every other connection, for a turn of at
 * most 128 requests at a time: a call of the good client made in the middle
 * of the flood is served after a turn or two of it, not after the rest of
 * the flood's read (all of it: it is in the kernel at once). Counted in
 * requests the server served meanwhile, not in time; the slow requests keep
 * the count small while this thread waits for a core to send its call. */
static void test_pipelining_flood_shares_the_loop(void)
{
    enum { N = 2000, BEFORE = 100, BOUND = 1000 };
    flood_t f = {.fd = raw_connect()};
    for (int i = 0; i < N; i++)
        jt_bytes_echo_request(&f.b, 1 + i, "block:1", NULL, 0);
    jet_server_stats_t st0, st;
    jet_server_get_stats(g_srv, &st0);
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, flood_main, &f) == 0);
    /* Well into the flood. */
    bool into = false;
    for (int64_t end = jt_now_ms() + WAIT_LIMIT_US / 1000; !into && jt_now_ms() < end;) {
        jet_server_get_stats(g_srv, &st);
        into = st.requests - st0.requests >= BEFORE;
        if (!into) usleep(100);
    }
    JT_CHECK(into);
    jet_server_get_stats(g_srv, &st);
    atomic_store(&g_mark_at, 0);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    JT_CHECK_EQ(jt_echo_call(g_good, call, "mark", NULL, NULL), 0);
    JT_CHECK(!jet_call_failed(call));
    uint64_t at = atomic_load(&g_mark_at);
    uint64_t between = at > st.requests ? at - st.requests - 1 : 0;
    fprintf(
        stderr,
        "  flood requests served between the good call's send and its service: %llu (%llu of %d "
        "served before it)\n",
        (unsigned long long)between, (unsigned long long)(st.requests - st0.requests), N);
    JT_CHECK(at > st.requests);
    JT_CHECK(between <= BOUND);
    jet_call_destroy(call);
    /* The flood is served whole. */
    JT_CHECK(JT_WAIT_UNTIL((jet_server_get_stats(g_srv, &st), st.requests - st0.requests >= N + 1),
                           WAIT_LIMIT_US));
    pthread_join(th, NULL);
    JT_CHECK(f.sent);
    free(f.b.p);
    close(f.fd);
    check_healthy();
}

static void test_many_bad_clients_at_once(void)
{
    /* Every kind of bad input on its own connection, all open together, then
     * all closed: nothing leaks, the good channel is served throughout. */
    enum { N = 40 };
    int fds[N];
    jet_server_stats_t before;
    jet_server_get_stats(g_srv, &before);
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect();
        jt_bytes_t b = {0};
        req_meta_t r;
        size_t n;
        uint8_t *msg = jt_echo_request_bytes("hi", &n);
        switch (i % 5) {
        case 0:
            jt_bytes_add(&b, "GARBAGE!GARBAGE!", 16);
            break;
        case 1:
            jt_bytes_header(&b, 5000, 10);
            break; /* truncated, kept open */
        case 2:
            req_meta_init(&r, i);
            r.meta.has_compress_type = true;
            r.meta.compress_type = 9;
            jt_bytes_frame(&b, &r.meta, msg, n, NULL, 0);
            break;
        case 3:
            jt_bytes_header(&b, MAX_BODY * 2, 4);
            break;
        case 4:
            buf_good_request(&b, i);
            break;
        }
        free(msg);
        send_buf(fds[i], &b);
    }
    check_healthy_at_most(before.connections_open + N);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    check_healthy();
}

/* Anyone who can connect could fill the server's log at their connection
 * rate: the line each garbage connection causes is rate-limited
 * (log_peer_rate: a burst of 10, then 1 a second), and the next one printed
 * counts those dropped. Every connection is still closed. */
static void test_garbage_flood_log_bounded(void)
{
    enum { N = 100 };
    const char *line = "first bytes are not baidu_std";
    usleep(1100 * 1000); /* the earlier cases' lines: at least one more allowed */
    int64_t t0 = jt_now_ms();
    jt_stderr_cap_t cap;
    jt_stderr_begin(&cap);
    int closed = 0;
    for (int i = 0; i < N; i++) {
        int fd = raw_connect();
        jt_send_all(fd, "GARBAGE!GARBAGE!", 16);
        closed += expect_closed(fd);
        close(fd);
    }
    char *log = jt_stderr_end(&cap);
    int64_t took_s = (jt_now_ms() - t0) / 1000;
    JT_REQUIRE(log);
    int lines = jt_count_lines_with(log, line);
    fprintf(stderr, "  %d garbage connections in %lld s: %d lines, %d counting dropped ones\n", N,
            (long long)took_s, lines, jt_count_lines_with(log, "more like this not logged"));
    JT_CHECK_EQ(closed, N);
    JT_CHECK(lines >= 1 && lines <= 10 + took_s + 1);
    free(log);
    check_healthy();
}

int main(void)
{
    /* Before anything starts the loops. */
    if (jet_flag_set("event_loop_num", "1") < 0) return 1;
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.max_body_size = MAX_BODY;
    jt_echo_service_init(&g_service, &(jt_echo_opts_t){.answer_lengths = true, .hook = mark_hook});
    g_srv = NULL;
    if (jet_server_create(&so, &g_srv) < 0 ||
        jet_server_add_service(g_srv, &g_service.base.base) < 0 ||
        jet_server_add_service(g_srv, &g_node_service.base) < 0 ||
        jet_server_start(g_srv, "127.0.0.1:0") < 0) {
        fprintf(stderr, "cannot start the server\n");
        return 1;
    }
    g_port = jet_server_listen_port(g_srv);
    g_good = jt_channel_open_port(g_port, JET_CONNECTION_SINGLE, 10000, -1);
    if (!g_good) return 1;
    /* Connects the good channel, so that every case's baseline includes it. */
    case_begin();
    check_healthy_at_most(1);

    const char *only = getenv("RPC_CASE");
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        if (!only || strstr(#fn, only)) {                                                          \
            case_begin();                                                                          \
            JT_RUN(fn);                                                                            \
        }                                                                                          \
    } while (0)
    RUN(test_good_raw_requests);
    RUN(test_garbage_magic);
    RUN(test_rdma_hello_then_prpc);
    RUN(test_body_size_over_limit);
    RUN(test_meta_size_over_body_size);
    RUN(test_truncated_frames);
    RUN(test_close_while_loop_busy);
    RUN(test_undecodable_meta);
    RUN(test_unknown_compress_type);
    RUN(test_undecodable_body);
    RUN(test_decompression_limit);
    RUN(test_attachment_size_too_big);
    RUN(test_checksum);
    RUN(test_unknown_service_and_method);
    RUN(test_pipelining_flood_shares_the_loop);
    RUN(test_many_bad_clients_at_once);
    RUN(test_garbage_flood_log_bounded);
    RUN(test_nested_too_deep);
    RUN(test_unread_answers_bounded);

    jet_channel_destroy(g_good);
    jet_server_stop(g_srv);
    jet_server_destroy(g_srv);
    return jt_finish();
}
