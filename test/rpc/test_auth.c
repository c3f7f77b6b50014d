/* Authentication (brpc's Authenticator; baidu_std authentication_data):
 *   - a client's credential goes with the first request of each connection
 *     (bytes checked on a raw server), and with the others issued before it
 *     was written: threads starting calls on a new connection at once all
 *     pass the server's check of its first request;
 *   - a server checks each connection's first request once: a refused one
 *     (a wrong credential, none, a client without an authenticator) is
 *     answered ERPCAUTH "Fail to authenticate" without the [ip:port]
 *     prefix, and the connection closed;
 *   - a client whose authenticator makes no credential fails the call with
 *     ERPCAUTH and sends nothing;
 *   - verify_credential_ctx's context reaches the handlers of the
 *     connection's calls (on the loop and in the worker pool), one per
 *     connection; none without it; a refusal's is freed. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "rpc_meta.pb-c.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define GUARD_US (10 * 1000000LL)

typedef struct test_auth {
    jet_authenticator_t base;
    const char *secret; /* what the client sends; NULL: generation fails */
    _Atomic int generated, verified, refused;
} test_auth_t;

static int gen_cred(void *arg, uint8_t **data_p, size_t *len_p)
{
    test_auth_t *a = arg;
    if (!a->secret) return -EACCES;
    atomic_fetch_add(&a->generated, 1);
    *len_p = strlen(a->secret);
    *data_p = malloc(*len_p + 1);
    if (!*data_p) return -ENOMEM;
    memcpy(*data_p, a->secret, *len_p);
    return 0;
}

/* Accepts "s3cret" from 127.0.0.1. */
static int verify_cred(void *arg, const uint8_t *data, size_t len, const char *peer)
{
    test_auth_t *a = arg;
    bool ok =
        len == 6 && data && memcmp(data, "s3cret", 6) == 0 && strncmp(peer, "127.0.0.1:", 10) == 0;
    atomic_fetch_add(ok ? &a->verified : &a->refused, 1);
    return ok ? 0 : -EACCES;
}

static void auth_init(test_auth_t *a, const char *secret)
{
    memset(a, 0, sizeof *a);
    a->base.generate_credential = gen_cred;
    a->base.verify_credential = verify_cred;
    a->base.arg = a;
    a->secret = secret;
}

static jt_echo_service_t g_svc;

static jet_server_t *start_server(test_auth_t *a, int *port)
{
    jt_echo_service_init(&g_svc, NULL);
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.auth = a ? &a->base : NULL;
    return jt_echo_server_start_port(&g_svc, 0, &so, port);
}

/* max_retry < 0: the default. */
static jet_channel_t *open_channel(int port, jet_connection_type_t type, test_auth_t *a,
                                   int32_t max_retry)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.connection_type = type;
    o.timeout_ms = 5000;
    if (max_retry >= 0) o.max_retry = max_retry;
    o.auth = a ? &a->base : NULL;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    return jet_channel_create(addr, &o, &ch) == 0 ? ch : NULL;
}

/* ---- auth context ---- */

static _Atomic int ctx_conns;

/* Accepts "s3cret" as user-<n> (n counts the connections), roles "admin",
 * a service; fills a context for "bad" too, then refuses it. */
static int verify_cred_ctx(void *arg, const uint8_t *data, size_t len, const char *peer,
                           jet_auth_context_t *ctx)
{
    JT_CHECK(!ctx->user && !ctx->group && !ctx->roles && !ctx->starter && !ctx->is_service);
    bool bad = len == 3 && memcmp(data, "bad", 3) == 0;
    if (verify_cred(arg, data, len, peer) != 0 && !bad) return -EACCES;
    char user[32];
    snprintf(user, sizeof user, "user-%d", atomic_fetch_add(&ctx_conns, 1));
    ctx->user = strdup(user);
    ctx->roles = strdup("admin");
    ctx->group = strdup("ops");
    ctx->is_service = true;
    return bad ? -EACCES : 0;
}

/* "whoami": the call's context as "user/group/roles/service", or "none". */
static bool whoami_hook(const Example__EchoRequest *req, Example__EchoResponse_Closure closure,
                        void *closure_data)
{
    if (strcmp(req->message, "whoami") != 0) return false;
    const jet_auth_context_t *ctx = jet_call_auth_context(jet_server_call(closure_data));
    char text[128] = "none";
    if (ctx)
        snprintf(text, sizeof text, "%s/%s/%s/%d", ctx->user ? ctx->user : "-",
                 ctx->group ? ctx->group : "-", ctx->roles ? ctx->roles : "-", ctx->is_service);
    jt_echo_answer(text, closure, closure_data);
    return true;
}

static const char *whoami(jet_channel_t *ch, jet_call_t *call)
{
    JT_CHECK_EQ(jt_echo_call(ch, call, "whoami", NULL, NULL), 0);
    return jt_echo_resp_message(call) ? jt_echo_resp_message(call) : "(failed)";
}

static void test_auth_context(void)
{
    static jt_echo_service_t svc;
    jt_echo_opts_t eo = {.hook = whoami_hook};
    jt_echo_service_init(&svc, &eo);
    for (int mode = 0; mode < 3; mode++) {
        /* 0: verify_credential_ctx, handlers on the loop; 1: the same in
         * the worker pool; 2: plain verify_credential. */
        test_auth_t sa, ca, bad;
        auth_init(&sa, NULL);
        auth_init(&ca, "s3cret");
        auth_init(&bad, "bad");
        if (mode < 2) sa.base.verify_credential_ctx = verify_cred_ctx;
        atomic_store(&ctx_conns, 0);
        jet_server_options_t so;
        jet_server_options_init(&so);
        so.auth = &sa.base;
        so.usercode_in_pool = mode == 1;
        int port;
        jet_server_t *srv = jt_echo_server_start_port(&svc, 0, &so, &port);
        JT_REQUIRE(srv);
        jet_channel_t *single = open_channel(port, JET_CONNECTION_SINGLE, &ca, -1);
        jet_channel_t *shrt = open_channel(port, JET_CONNECTION_SHORT, &ca, -1);
        jet_channel_t *refused = open_channel(port, JET_CONNECTION_SINGLE, &bad, 0);
        JT_REQUIRE(single && shrt && refused);
        jet_call_t *call = jet_call_create();
        if (mode < 2) {
            JT_CHECK_EQ(strcmp(whoami(single, call), "user-0/ops/admin/1"), 0);
            JT_CHECK_EQ(strcmp(whoami(single, call), "user-0/ops/admin/1"), 0);
            /* A connection per call: a context each. */
            JT_CHECK_EQ(strcmp(whoami(shrt, call), "user-1/ops/admin/1"), 0);
            JT_CHECK_EQ(strcmp(whoami(shrt, call), "user-2/ops/admin/1"), 0);
        } else {
            JT_CHECK_EQ(strcmp(whoami(single, call), "none"), 0);
            JT_CHECK_EQ(strcmp(whoami(shrt, call), "none"), 0);
        }
        whoami(refused, call);
        JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCAUTH);
        jet_call_destroy(call);
        jet_channel_destroy(single);
        jet_channel_destroy(shrt);
        jet_channel_destroy(refused);
        jt_server_stop(srv);
    }
    /* No authenticator: none. */
    int port;
    jet_server_t *srv = jt_echo_server_start_port(&svc, 0, NULL, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE, NULL, -1);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(strcmp(whoami(ch, call), "none"), 0);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* One check per connection: once for a single or reused pooled connection,
 * once per call for short ones. */
static void test_accepted_once_per_connection(void)
{
    test_auth_t sa, ca;
    auth_init(&sa, NULL);
    auth_init(&ca, "s3cret");
    int port;
    jet_server_t *srv = start_server(&sa, &port);
    JT_REQUIRE(srv);
    static const jet_connection_type_t types[] = {JET_CONNECTION_SINGLE, JET_CONNECTION_POOLED,
                                                  JET_CONNECTION_SHORT};
    for (int t = 0; t < 3; t++) {
        atomic_store(&sa.verified, 0);
        atomic_store(&ca.generated, 0);
        jet_channel_t *ch = open_channel(port, types[t], &ca, -1);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        for (int i = 0; i < 5; i++) {
            JT_CHECK_EQ(jt_echo_call(ch, call, "hi", NULL, NULL), 0);
            JT_CHECK(jt_echo_resp_is(call, "hi"));
        }
        int want = types[t] == JET_CONNECTION_SHORT ? 5 : 1;
        JT_CHECK_EQ(atomic_load(&sa.verified), want);
        JT_CHECK_EQ(atomic_load(&ca.generated), want);
        jet_call_destroy(call);
        jet_channel_destroy(ch);
    }
    JT_CHECK_EQ(atomic_load(&sa.refused), 0);
    jt_server_stop(srv);
}

/* Refused: a wrong credential, none at all, no authenticator. */
static void test_refused(void)
{
    test_auth_t sa;
    auth_init(&sa, NULL);
    int port;
    jet_server_t *srv = start_server(&sa, &port);
    JT_REQUIRE(srv);
    test_auth_t wrong, empty;
    auth_init(&wrong, "guess!");
    auth_init(&empty, "");
    test_auth_t *clients[] = {&wrong, &empty, NULL};
    for (int k = 0; k < 3; k++) {
        jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE, clients[k], -1);
        JT_REQUIRE(ch);
        jet_call_t *call = jet_call_create();
        JT_CHECK_EQ(jt_echo_call(ch, call, "hi", NULL, NULL), 0);
        JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCAUTH);
        JT_CHECK(strcmp(jet_call_error_text(call), "Fail to authenticate") == 0);
        JT_CHECK(jt_server_wait_stats(srv, 0, 0, GUARD_US, NULL)); /* closed */
        jet_call_destroy(call);
        jet_channel_destroy(ch);
    }
    JT_CHECK_EQ(atomic_load(&sa.refused), 3);
    JT_CHECK_EQ(atomic_load(&sa.verified), 0);
    jt_server_stop(srv);
}

/* Threads starting calls on a new connection at once: the credential is in
 * the first request the server reads, or some calls would be refused. */
typedef struct burst {
    jet_channel_t *ch;
    _Atomic int *go;
    int ok;
} burst_t;

static void *burst_main(void *arg)
{
    burst_t *b = arg;
    while (!atomic_load(b->go)) {
    }
    jet_call_t *call = jet_call_create();
    for (int i = 0; i < 50; i++)
        if (jt_echo_call(b->ch, call, "b", NULL, NULL) == 0 && jt_echo_resp_is(call, "b")) b->ok++;
    jet_call_destroy(call);
    return NULL;
}

static void test_first_request_carries_it_under_a_burst(void)
{
    test_auth_t sa, ca;
    auth_init(&sa, NULL);
    auth_init(&ca, "s3cret");
    int port;
    jet_server_t *srv = start_server(&sa, &port);
    JT_REQUIRE(srv);
    for (int round = 0; round < 10; round++) {
        jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE, &ca, -1);
        JT_REQUIRE(ch);
        _Atomic int go = 0;
        burst_t b[8];
        pthread_t t[8];
        for (int i = 0; i < 8; i++) {
            b[i] = (burst_t){.ch = ch, .go = &go};
            JT_REQUIRE(pthread_create(&t[i], NULL, burst_main, &b[i]) == 0);
        }
        atomic_store(&go, 1);
        int ok = 0;
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            ok += b[i].ok;
        }
        JT_CHECK_EQ(ok, 8 * 50);
        jet_channel_destroy(ch);
    }
    JT_CHECK_EQ(atomic_load(&sa.verified), 10);
    /* One a connection, more when several requests were issued before the
     * first was written. */
    JT_CHECK(atomic_load(&ca.generated) >= 10);
    fprintf(stderr, "  %d credentials made for 10 connections\n", atomic_load(&ca.generated));
    JT_CHECK_EQ(atomic_load(&sa.refused), 0);
    jt_server_stop(srv);
}

/* No credential made: the call fails before anything is sent. */
static void test_generation_failure(void)
{
    test_auth_t sa, ca;
    auth_init(&sa, NULL);
    auth_init(&ca, NULL);
    int port;
    jet_server_t *srv = start_server(&sa, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE, &ca, -1);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(jt_echo_call(ch, call, "hi", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCAUTH);
    JT_CHECK(strstr(jet_call_error_text(call), "no credential") != NULL);
    JT_CHECK_EQ(jet_call_attempts(call), 1);
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.requests, 0);
    JT_CHECK_EQ(atomic_load(&sa.verified) + atomic_load(&sa.refused), 0);
    /* Once it can, the next call authenticates and goes through. */
    ca.secret = "s3cret";
    JT_CHECK_EQ(jt_echo_call(ch, call, "hi", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "hi"));
    JT_CHECK_EQ(atomic_load(&sa.verified), 1);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(srv);
}

/* The client's bytes: field 7 in the first request only. */
static void test_wire_client(void)
{
    test_auth_t ca;
    auth_init(&ca, "s3cret");
    int lport;
    int lfd = jt_tcp_listen(4, &lport);
    JT_REQUIRE(lfd >= 0);
    jet_channel_t *ch = open_channel(lport, JET_CONNECTION_SINGLE, &ca, -1);
    JT_REQUIRE(ch);
    jet_call_t *c1 = jet_call_create(), *c2 = jet_call_create();
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, c1, "one", jt_count_done, &done), 0);
    JT_CHECK_EQ(jt_echo_call(ch, c2, "two", jt_count_done, &done), 0);
    int fd = jt_tcp_accept(lfd, 5000);
    JT_REQUIRE(fd >= 0);
    jt_conn_t c;
    jt_conn_init(&c, fd);
    for (int i = 0; i < 2; i++) {
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        uint8_t *raw = NULL;
        size_t raw_len = 0;
        JT_REQUIRE(jt_conn_frame(&c, 5000, &f, &raw, &raw_len) == 1);
        JT_REQUIRE(f.meta);
        if (i == 0) {
            JT_CHECK(f.meta->has_authentication_data && f.meta->authentication_data.len == 6 &&
                     memcmp(f.meta->authentication_data.data, "s3cret", 6) == 0);
            static const uint8_t field[] = {0x3A, 0x06, 's', '3', 'c', 'r', 'e', 't'};
            bool found = false;
            for (size_t k = 12; k + sizeof field <= raw_len && !found; k++)
                found = memcmp(raw + k, field, sizeof field) == 0;
            JT_CHECK(found);
        } else {
            JT_CHECK(!f.meta->has_authentication_data);
        }
        free(raw);
        jet__baidu_frame_fini(&f);
    }
    close(lfd); /* the retries are refused at once */
    jt_conn_close(&c);
    JT_CHECK(jt_counter_wait(&done, 2, GUARD_US));
    jet_call_destroy(c1);
    jet_call_destroy(c2);
    jet_channel_destroy(ch);
}

static uint8_t *request_frame(const char *cred, int64_t cid, size_t *len_p)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta rq = BRPC__POLICY__RPC_REQUEST_META__INIT;
    meta.request = &rq;
    rq.service_name = "example.EchoService";
    rq.method_name = "Echo";
    meta.has_correlation_id = true;
    meta.correlation_id = cid;
    if (cred) {
        meta.has_authentication_data = true;
        meta.authentication_data.data = (uint8_t *)cred;
        meta.authentication_data.len = strlen(cred);
    }
    size_t blen;
    uint8_t *body = jt_echo_request_bytes("raw", &blen);
    uint8_t *frame = jt_frame_pack(&meta, body, blen, NULL, 0, len_p);
    free(body);
    return frame;
}

/* A raw client: checked once; refused, the exact answer and a close. */
static void test_wire_server(void)
{
    test_auth_t sa;
    auth_init(&sa, NULL);
    int port;
    jet_server_t *srv = start_server(&sa, &port);
    JT_REQUIRE(srv);
    /* Accepted, then a request without a credential on the same
     * connection is served. */
    jt_conn_t c;
    JT_REQUIRE(jt_conn_open(&c, port) == 0);
    for (int i = 0; i < 2; i++) {
        size_t len;
        uint8_t *frame = request_frame(i == 0 ? "s3cret" : NULL, 10 + i, &len);
        JT_CHECK(jt_conn_write(&c, frame, len) == 0);
        free(frame);
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        JT_REQUIRE(jt_conn_frame(&c, 5000, &f, NULL, NULL) == 1);
        JT_CHECK(f.meta && f.meta->correlation_id == 10 + i && f.meta->response &&
                 f.meta->response->error_code == 0);
        jet__baidu_frame_fini(&f);
    }
    JT_CHECK_EQ(atomic_load(&sa.verified), 1);
    jt_conn_close(&c);
    /* Refused: ERPCAUTH with brpc's text, no prefix; then closed, and the
     * request behind it is not served. */
    JT_REQUIRE(jt_conn_open(&c, port) == 0);
    size_t l1, l2;
    uint8_t *f1 = request_frame("nope", 21, &l1), *f2 = request_frame(NULL, 22, &l2);
    JT_CHECK(jt_conn_write(&c, f1, l1) == 0);
    JT_CHECK(jt_conn_write(&c, f2, l2) == 0);
    free(f1);
    free(f2);
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    JT_REQUIRE(jt_conn_frame(&c, 5000, &f, NULL, NULL) == 1);
    JT_CHECK(f.meta && f.meta->correlation_id == 21 && f.meta->response &&
             f.meta->response->error_code == JET_ERPCAUTH && f.meta->response->error_text &&
             strcmp(f.meta->response->error_text, "Fail to authenticate") == 0);
    jet__baidu_frame_fini(&f);
    JT_CHECK(jt_conn_wait_closed(&c, 5000));
    jt_conn_close(&c);
    JT_CHECK_EQ(atomic_load(&sa.refused), 1);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, GUARD_US, NULL));
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.requests, 2); /* the accepted connection's two */
    jt_server_stop(srv);
}

/* Refused with more requests behind the first: on every refused
 * connection the first request's call gets ERPCAUTH (the answer is read
 * before the connection goes), the others the close; with max_retry 0
 * nothing hides a lost answer. */
static void test_refused_with_requests_in_flight(void)
{
    test_auth_t sa, ca;
    auth_init(&sa, NULL);
    auth_init(&ca, "guess!");
    int port;
    jet_server_t *srv = start_server(&sa, &port);
    JT_REQUIRE(srv);
    enum { ROUNDS = 20, CALLS = 16 };
    int auth_errors = 0;
    for (int r = 0; r < ROUNDS; r++) {
        jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE, &ca, 0);
        JT_REQUIRE(ch);
        int refused0 = atomic_load(&sa.refused);
        jet_call_t *calls[CALLS];
        jt_counter_t done = {0};
        for (int i = 0; i < CALLS; i++) {
            calls[i] = jet_call_create();
            jet_iobuf_t *att = jet_call_request_attachment(calls[i]);
            for (int k = 0; k < 16; k++)
                JT_REQUIRE(jet_iobuf_append(att,
                                            "0123456789abcdef"
                                            "0123456789abcdef",
                                            32) == 0);
            JT_CHECK_EQ(jt_echo_call(ch, calls[i], "hi", jt_count_done, &done), 0);
        }
        JT_CHECK(jt_counter_wait(&done, CALLS, GUARD_US));
        int mine = 0;
        for (int i = 0; i < CALLS; i++) {
            int code = jet_call_error_code(calls[i]);
            JT_CHECK(code == JET_ERPCAUTH || code == JET_EEOF || code == ECONNRESET);
            mine += code == JET_ERPCAUTH;
            jet_call_destroy(calls[i]);
        }
        /* One a refused connection (a call issued after the first
         * connection closed opens another). */
        JT_CHECK(mine >= 1);
        JT_CHECK_EQ(mine, atomic_load(&sa.refused) - refused0);
        auth_errors += mine;
        jet_channel_destroy(ch);
    }
    fprintf(stderr, "  %d ERPCAUTH answers in %d rounds\n", auth_errors, ROUNDS);
    jt_server_stop(srv);
}

int main(void)
{
    JT_RUN(test_accepted_once_per_connection);
    JT_RUN(test_refused);
    JT_RUN(test_refused_with_requests_in_flight);
    JT_RUN(test_first_request_carries_it_under_a_burst);
    JT_RUN(test_generation_failure);
    JT_RUN(test_wire_client);
    JT_RUN(test_wire_server);
    JT_RUN(test_auth_context);
    return jt_finish();
}
