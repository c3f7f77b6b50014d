/* User fields (baidu_std RpcMeta field 9, brpc's request_user_fields and
 * response_user_fields):
 *   - a jetrpc client's fields reach a jetrpc handler, whose own fields come
 *     back with the answer, an error answer too; a reissue replaces them;
 *   - on the wire each field is one entry {key = 1, value = 2} (bytes
 *     checked against a raw server), and a client reads the fields of a
 *     hand-made answer: repeated keys (the last counts), entries without a
 *     key or a value;
 *   - a raw client's request with 20000 fields (a key repeated) is served,
 *     the handler seeing all of them and the key's last value;
 *   - the setters refuse the wrong side, a NULL key, and a call in flight;
 *   - fields that would make a meta over 1 MiB are not sent, either way.
 *
 * The handler (a hook of the shared echo service) answers "uf" with the
 * message "uf <count>" and sets, for each request field k=v, "re-k" = v;
 * "uf-fail" sets "why" = "asked" and fails the call (1003); "uf-count"
 * answers "count <n> last <value of key 'dup'>"; "uf-big" sets a 1.5 MiB
 * field, "uf-big-fail" too and fails the call (1003). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "rpc/call.h"
#include "rpc_meta.pb-c.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define GUARD_US (10 * 1000000LL)

static bool uf_hook(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                    void *closure_data)
{
    jet_call_t *call = jet_server_call(closure_data);
    char text[128];
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = text;
    if (strcmp(req->message, "uf") == 0) {
        if (jet_call_set_request_user_field(call, "k", "v") != -EINVAL) abort(); /* the client's */
        size_t n = jet_call_request_user_field_count(call);
        for (size_t i = 0; i < n; i++) {
            const char *k, *v;
            if (!jet_call_request_user_field_at(call, i, &k, &v)) abort();
            char key[64];
            snprintf(key, sizeof key, "re-%s", k);
            if (jet_call_set_response_user_field(call, key, v) != 0) abort();
        }
        snprintf(text, sizeof text, "uf %zu", n);
        closure(&resp, closure_data);
        return true;
    }
    if (strcmp(req->message, "uf-fail") == 0) {
        if (jet_call_set_response_user_field(call, "why", "asked") != 0) abort();
        jet_call_set_failed(call, 1003, "asked to fail");
        closure(NULL, closure_data);
        return true;
    }
    if (strcmp(req->message, "uf-big") == 0 || strcmp(req->message, "uf-big-fail") == 0) {
        /* Fields a jetrpc client cannot decode: the answer goes without. */
        size_t n = (size_t)3 << 19;
        char *big = malloc(n + 1);
        if (!big) abort();
        memset(big, 'b', n);
        big[n] = '\0';
        if (jet_call_set_response_user_field(call, "small", "x") != 0 ||
            jet_call_set_response_user_field(call, "big", big) != 0)
            abort();
        free(big);
        if (req->message[6] == '-') {
            jet_call_set_failed(call, 1003, "asked to fail");
            closure(NULL, closure_data);
        } else {
            snprintf(text, sizeof text, "big");
            closure(&resp, closure_data);
        }
        return true;
    }
    if (strcmp(req->message, "uf-count") == 0) {
        const char *last = jet_call_request_user_field(call, "dup");
        snprintf(text, sizeof text, "count %zu last %s", jet_call_request_user_field_count(call),
                 last ? last : "(none)");
        closure(&resp, closure_data);
        return true;
    }
    return false;
}

static jt_echo_service_t g_svc;

static jet_server_t *start_server(int *port)
{
    jt_echo_opts_t o = {.hook = uf_hook};
    jt_echo_service_init(&g_svc, &o);
    return jt_echo_server_start_port(&g_svc, 0, NULL, port);
}

static void test_round_trip(void)
{
    int port;
    jet_server_t *srv = start_server(&port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, -1);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "user", "alice"), 0);
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "trace", "1"), 0);
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "user", "bob"), 0); /* replaces */
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "empty", NULL), 0);
    JT_CHECK_EQ(jet_call_request_user_field_count(call), 3);
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "uf 3"));
    JT_CHECK_EQ(jet_call_response_user_field_count(call), 3);
    const char *k = NULL, *v = NULL;
    JT_CHECK(jet_call_response_user_field_at(call, 0, &k, &v));
    JT_CHECK(k && v && strcmp(k, "re-user") == 0 && strcmp(v, "bob") == 0);
    JT_CHECK(jet_call_response_user_field(call, "re-trace") &&
             strcmp(jet_call_response_user_field(call, "re-trace"), "1") == 0);
    JT_CHECK(jet_call_response_user_field(call, "re-empty") &&
             strcmp(jet_call_response_user_field(call, "re-empty"), "") == 0);
    JT_CHECK(jet_call_response_user_field(call, "user") == NULL);
    JT_CHECK(!jet_call_response_user_field_at(call, 3, &k, &v));
    /* An error answer carries the handler's fields; the request's stay for
     * the next issue, whose answer replaces the response's. */
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf-fail", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), 1003);
    JT_CHECK_EQ(jet_call_response_user_field_count(call), 1);
    JT_CHECK(jet_call_response_user_field(call, "why") &&
             strcmp(jet_call_response_user_field(call, "why"), "asked") == 0);
    JT_CHECK_EQ(jet_call_request_user_field_count(call), 3);
    /* A plain echo: no fields come back. */
    JT_CHECK_EQ(jt_echo_call(ch, call, "plain", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "plain"));
    JT_CHECK_EQ(jet_call_response_user_field_count(call), 0);
    /* Reset: none left. */
    jet_call_reset(call);
    JT_CHECK_EQ(jet_call_request_user_field_count(call), 0);
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "uf 0"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* The client's bytes, and a hand-made answer with odd fields. */
static void test_wire_format(void)
{
    int lport;
    int lfd = jt_tcp_listen(4, &lport);
    JT_REQUIRE(lfd >= 0);
    jet_channel_t *ch = jt_channel_open_port(lport, JET_CONNECTION_SINGLE, 5000, 0);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "k", "v"), 0);
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, call, "x", jt_count_done, &done), 0);
    int fd = jt_tcp_accept(lfd, 5000);
    JT_REQUIRE(fd >= 0);
    jt_conn_t c;
    jt_conn_init(&c, fd);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    JT_REQUIRE(jt_conn_frame(&c, 5000, &f, &raw, &raw_len) == 1);
    static const uint8_t entry[] = {0x4A, 0x06, 0x0A, 0x01, 'k', 0x12, 0x01, 'v'};
    bool found = false;
    for (size_t i = 12; i + sizeof entry <= raw_len && !found; i++)
        found = memcmp(raw + i, entry, sizeof entry) == 0;
    JT_CHECK(found);
    JT_REQUIRE(f.meta && f.meta->n_user_fields == 1);
    int64_t cid = f.meta->correlation_id;
    free(raw);
    jet__baidu_frame_fini(&f);

    /* The answer: "a" twice (the last counts), an entry with no value, one
     * with no key. */
    Brpc__Policy__UserFieldsEntry e[4], *ep[4];
    for (int i = 0; i < 4; i++) {
        brpc__policy__user_fields_entry__init(&e[i]);
        ep[i] = &e[i];
    }
    e[0].key = "a";
    e[0].value = "1";
    e[1].key = "novalue";
    e[2].value = "nokey";
    e[3].key = "a";
    e[3].value = "2";
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rmeta = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    meta.response = &rmeta;
    rmeta.has_error_code = true;
    meta.has_correlation_id = true;
    meta.correlation_id = cid;
    meta.n_user_fields = 4;
    meta.user_fields = ep;
    size_t blen, flen;
    uint8_t *body = jt_echo_request_bytes("answer", &blen); /* same wire shape as a response */
    uint8_t *frame = jt_frame_pack(&meta, body, blen, NULL, 0, &flen);
    JT_REQUIRE(frame);
    JT_CHECK(jt_send_all(fd, frame, flen));
    free(frame);
    free(body);
    JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
    JT_CHECK(jt_echo_resp_is(call, "answer"));
    JT_CHECK_EQ(jet_call_response_user_field_count(call), 4);
    const char *a = jet_call_response_user_field(call, "a");
    JT_CHECK(a && strcmp(a, "2") == 0);
    const char *nv = jet_call_response_user_field(call, "novalue");
    JT_CHECK(nv && strcmp(nv, "") == 0);
    const char *nk = jet_call_response_user_field(call, "");
    JT_CHECK(nk && strcmp(nk, "nokey") == 0);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_conn_close(&c);
    close(lfd);
}

/* A raw client's request with many fields: served, in order. */
static void test_many_fields_from_a_peer(void)
{
    int port;
    jet_server_t *srv = start_server(&port);
    JT_REQUIRE(srv);
    enum { N = 20000 };
    Brpc__Policy__UserFieldsEntry *e = calloc(N, sizeof *e);
    Brpc__Policy__UserFieldsEntry **ep = calloc(N, sizeof *ep);
    char(*keys)[16] = calloc(N, sizeof *keys);
    JT_REQUIRE(e && ep && keys);
    for (int i = 0; i < N; i++) {
        brpc__policy__user_fields_entry__init(&e[i]);
        snprintf(keys[i], sizeof keys[i], "%s", i % 1000 == 0 ? "dup" : "k");
        e[i].key = keys[i];
        e[i].value = i == N - 1000 ? "last" : "x";
        ep[i] = &e[i];
    }
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta rq = BRPC__POLICY__RPC_REQUEST_META__INIT;
    meta.request = &rq;
    rq.service_name = "example.EchoService";
    rq.method_name = "Echo";
    meta.has_correlation_id = true;
    meta.correlation_id = 7;
    meta.n_user_fields = N;
    meta.user_fields = ep;
    size_t blen, flen;
    uint8_t *body = jt_echo_request_bytes("uf-count", &blen);
    uint8_t *frame = jt_frame_pack(&meta, body, blen, NULL, 0, &flen);
    JT_REQUIRE(frame);
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, port) == 0);
    uint64_t t0 = jt_now_us();
    JT_CHECK(jt_conn_write(&c, frame, flen) == 0);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    JT_REQUIRE(jt_conn_frame(&c, 10000, &f, NULL, NULL) == 1);
    uint64_t took = jt_now_us() - t0;
    JT_CHECK(f.meta && f.meta->response && f.meta->response->error_code == 0);
    size_t flat_len = 0;
    uint8_t *flat = jt_iobuf_bytes(&f.body, &flat_len);
    Example__EchoResponse *resp = example__echo_response__unpack(NULL, flat_len, flat);
    JT_REQUIRE(resp);
    char want[64];
    snprintf(want, sizeof want, "count %d last last", N);
    JT_CHECK(strcmp(resp->message, want) == 0);
    fprintf(stderr, "  %d fields served in %.1f ms (%zu-byte frame)\n", N, took / 1000.0, flen);
    example__echo_response__free_unpacked(resp, NULL);
    free(flat);
    jet__baidu_frame_fini(&f);
    jt_conn_close(&c);
    free(frame);
    free(body);
    free(e);
    free(ep);
    free(keys);
    JT_CHECK(jt_server_wait_stats(srv, 0, JT_ANY, GUARD_US, NULL));
    jt_server_stop(srv);
}

static void test_setters_refuse_misuse(void)
{
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jet_call_set_request_user_field(call, NULL, "v"), -EINVAL);
    JT_CHECK_EQ(jet_call_set_request_user_field(NULL, "k", "v"), -EINVAL);
    JT_CHECK_EQ(jet_call_set_response_user_field(call, "k", "v"), -EINVAL); /* a client call */
    JT_CHECK_EQ(jet_call_request_user_field_count(call), 0);
    JT_CHECK(jet_call_request_user_field(call, "k") == NULL);
    JT_CHECK(jet_call_request_user_field(call, NULL) == NULL);
    JT_CHECK(!jet_call_request_user_field_at(call, 0, NULL, NULL));
    /* In flight: refused. */
    int port;
    jet_server_t *srv = start_server(&port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 5000, -1);
    JT_REQUIRE(ch);
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, call, "sleep:200", jt_count_done, &done), 0);
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "k", "v"), -EBUSY);
    JT_CHECK(jt_counter_wait(&done, 1, GUARD_US));
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "k", "v"), 0);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* A key set again and again (a trace id per issue of a reused call) keeps
 * the buffer within twice its live bytes. */
static void test_replaced_values_do_not_pile_up(void)
{
    jet_call_t *call = jet_call_create();
    char value[1001];
    for (int i = 0; i < 100000; i++) {
        memset(value, 'a' + i % 26, 1000);
        value[1000] = '\0';
        JT_REQUIRE(jet_call_set_request_user_field(call, "trace", value) == 0);
        if (i % 1000 == 0) JT_REQUIRE(jet_call_set_request_user_field(call, "k", "v") == 0);
    }
    const jet_user_fields_t *uf = &call->req_uf;
    fprintf(stderr, "  after 100000 sets: %zu bytes used, %zu allocated\n", uf->len, uf->room);
    JT_CHECK(uf->room <= 64 * 1024);
    JT_CHECK_EQ(jet_call_request_user_field_count(call), 2);
    JT_CHECK(strlen(jet_call_request_user_field(call, "trace")) == 1000 &&
             jet_call_request_user_field(call, "trace")[0] == 'a' + 99999 % 26);
    JT_CHECK(strcmp(jet_call_request_user_field(call, "k"), "v") == 0);
    jet_call_destroy(call);
}

/* A meta over 1 MiB is never sent: jetrpc's parser refuses one (a client
 * drops such an answer, a server closes the connection), so a call whose
 * request fields are that large fails at once with EREQUEST, not sent, and a
 * handler's response fields that large are dropped, the call failing with
 * ERESPONSE (or the handler's own error). Just under the limit both ways
 * works. The connection serves on throughout; no timeout is reached (the
 * calls have none). */
static void test_meta_over_the_limit(void)
{
    int port;
    jet_server_t *srv = start_server(&port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, -1, 3);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();

    int64_t t0 = jt_now_ms();
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf-big", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ERESPONSE);
    JT_CHECK(strstr(jet_call_error_text(call), "over 1 MiB") != NULL);
    JT_CHECK_EQ(jet_call_response_user_field_count(call), 0);
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf-big-fail", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), 1003);
    JT_CHECK(strstr(jet_call_error_text(call), "asked to fail") != NULL);
    JT_CHECK_EQ(jet_call_response_user_field_count(call), 0);

    size_t n = (size_t)3 << 19;
    char *value = malloc(n + 1);
    JT_REQUIRE(value);
    memset(value, 'v', n);
    value[n] = '\0';
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "big", value), 0);
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_EREQUEST);
    JT_CHECK(strstr(jet_call_error_text(call), "over 1 MiB") != NULL);
    JT_CHECK_EQ(jet_call_attempts(call), 1);
    JT_CHECK(jt_now_ms() - t0 < 3000);

    /* Just under: the field goes, and comes back as "re-big". */
    jet_call_reset(call);
    n = ((size_t)1 << 20) - 4096;
    value[n] = '\0';
    JT_CHECK_EQ(jet_call_set_request_user_field(call, "big", value), 0);
    JT_CHECK_EQ(jt_echo_call(ch, call, "uf", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "uf 1"));
    const char *back = jet_call_response_user_field(call, "re-big");
    JT_CHECK(back && strlen(back) == n && back[0] == 'v' && back[n - 1] == 'v');
    free(value);

    jet_call_reset(call);
    JT_CHECK_EQ(jt_echo_call(ch, call, "plain", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "plain"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

int main(void)
{
    JT_RUN(test_round_trip);
    JT_RUN(test_wire_format);
    JT_RUN(test_many_fields_from_a_peer);
    JT_RUN(test_setters_refuse_misuse);
    JT_RUN(test_replaced_values_do_not_pile_up);
    JT_RUN(test_meta_over_the_limit);
    return jt_finish();
}
