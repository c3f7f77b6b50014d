/* End-to-end echo over TCP (and a unix socket): synchronous and asynchronous
 * calls, many threads through one channel, the three connection types,
 * attachments up to 16 MiB, compression, checksums, log ids, handlers that
 * answer later from another thread or from the worker pool, handler failures,
 * client-side misuse, and call reuse.
 *
 * One service, testutil_rpc.h's echo service: the request message picks the
 * handler's behaviour ("logid", "thread", "later:<ms>", "fail:<code>:<text>",
 * "failmsg:<code>:<text>", "null"; anything else is echoed with its
 * attachment, the response compressed as the request was). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "base/futex.h"
#include "echo.pb-c.h"
#include "nest.pb-c.h"
#include "testutil.h"
#include "testutil_rpc.h"

#define WAIT_LIMIT_US (30 * 1000000LL) /* generous guard for anything awaited */

JET_FLAG_DECLARE_INT64(socket_max_unwritten_bytes);
JET_FLAG_DECLARE_INT32(tcp_read_budget);

static jt_echo_service_t g_service;

static jet_server_t *g_srv;      /* handlers on the loop threads */
static jet_server_t *g_pool_srv; /* usercode_in_pool */
static int g_port, g_pool_port;

static jet_server_t *start_server(const char *addr, bool in_pool, int *port_p)
{
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.usercode_in_pool = in_pool;
    so.num_workers = in_pool ? 3 : 0;
    return jt_echo_server_start(&g_service, addr, &so, port_p);
}

/* No call here is meant to time out. */
static jet_channel_t *open_channel_addr(const char *addr, jet_connection_type_t type)
{
    return jt_channel_open(addr, type, 20000, -1);
}

static jet_channel_t *open_channel(int port, jet_connection_type_t type)
{
    return jt_channel_open_port(port, type, 20000, -1);
}

/* ---- helpers ------------------------------------------------------------------ */

static void stats(jet_server_t *srv, jet_server_stats_t *st)
{
    jet_server_get_stats(srv, st);
}

/* The server decrements in_flight after it wrote the answer, so a client can
 * see its answer a moment before: wait (bounded) for the count to drain. */
static bool wait_in_flight_zero(jet_server_t *srv)
{
    return jt_server_wait_stats(srv, 0, JT_ANY, WAIT_LIMIT_US, NULL);
}

static bool wait_open_at_most(jet_server_t *srv, uint64_t n)
{
    return jt_server_wait_stats(srv, JT_ANY, n, WAIT_LIMIT_US, NULL);
}

static bool wait_count(jt_counter_t *c, uint32_t target)
{
    return jt_counter_wait(c, target, WAIT_LIMIT_US);
}

static int sync_echo(jet_channel_t *ch, jet_call_t *call, const char *msg)
{
    return jt_echo_call(ch, call, msg, NULL, NULL);
}

/* ---- cases ---------------------------------------------------------------- */

static void test_sync_calls(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_server_stats_t before, after;
    stats(g_srv, &before);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    char expected[64], remote[64];
    snprintf(remote, sizeof remote, "127.0.0.1:%d", g_port);
    int bad = 0;
    for (int i = 0; i < 500; i++) {
        snprintf(expected, sizeof expected, "hello %d", i);
        jet_call_reset(call);
        JT_CHECK_EQ(sync_echo(ch, call, expected), 0);
        if (!jt_echo_resp_is(call, expected) || jet_call_attempts(call) != 1 ||
            jet_iobuf_len(jet_call_response_attachment(call)) != 0 ||
            jet_call_response_compress_type(call) != 0 || jet_call_latency_us(call) <= 0 ||
            strcmp(jet_call_remote_side(call), remote) != 0)
            bad++;
    }
    JT_CHECK_EQ(bad, 0);
    /* The empty string is a valid value of a required field. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, ""), 0);
    JT_CHECK(jt_echo_resp_is(call, ""));
    jet_call_destroy(call);
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &after);
    JT_CHECK_EQ(after.requests - before.requests, 501);
    JT_CHECK_EQ(after.requests_failed, before.requests_failed);
    /* A single connection carries every call. */
    JT_CHECK_EQ(after.connections_accepted - before.connections_accepted, 1);
    jet_channel_destroy(ch);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open));
}

static void test_async_calls(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    enum { N = 64 };
    jet_call_t *calls[N];
    jt_counter_t done = {0};
    char msgs[N][32];
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        JT_REQUIRE(calls[i]);
        snprintf(msgs[i], sizeof msgs[i], "async %d", i);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = msgs[i];
        jet_iobuf_append(jet_call_request_attachment(calls[i]), msgs[i], strlen(msgs[i]));
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, calls[i], &req.base,
                                     jt_count_done, &done),
                    0);
    }
    JT_CHECK(wait_count(&done, N));
    for (int i = 0; i < N; i++) {
        jet_call_join(calls[i]); /* returns at once for a completed call */
        JT_CHECK(jt_echo_resp_is(calls[i], msgs[i]));
        JT_CHECK_EQ(
            jet_iobuf_equals(jet_call_response_attachment(calls[i]), msgs[i], strlen(msgs[i])), 0);
    }
    /* Done runs exactly once per call. */
    usleep(20000);
    JT_CHECK_EQ(atomic_load(&done.n), N);
    for (int i = 0; i < N; i++)
        jet_call_destroy(calls[i]);
    jet_channel_destroy(ch);
}

/* ---- many threads, many calls in flight on one connection ---- */

enum { MT_THREADS = 8, MT_CALLS = 2000, MT_BATCH = 16 };

typedef struct mt_slot {
    jet_call_t *call;
    _Atomic uint32_t ndone;
    char msg[48];
    char att[48];
    size_t att_len;
} mt_slot_t;

typedef struct mt_ctx {
    jet_channel_t *ch;
    int id;
    jet_connection_type_t type;
    bool async;
    int calls;
    _Atomic int *bad;
} mt_ctx_t;

static void *mt_main(void *arg)
{
    mt_ctx_t *ctx = arg;
    mt_slot_t slots[MT_BATCH];
    memset(slots, 0, sizeof slots);
    for (int k = 0; k < MT_BATCH; k++) {
        slots[k].call = jet_call_create();
        if (!slots[k].call) abort();
    }
    int batch = ctx->async ? MT_BATCH : 1;
    jt_counter_t done = {0};
    uint32_t issued = 0;
    bool stuck = false;
    for (int r = 0; r * batch < ctx->calls; r++) {
        for (int k = 0; k < batch; k++) {
            mt_slot_t *sl = &slots[k];
            jet_call_reset(sl->call);
            snprintf(sl->msg, sizeof sl->msg, "t%d r%d k%d", ctx->id, r, k);
            /* Attachment lengths 0..31, so some calls carry none. */
            sl->att_len = (size_t)((ctx->id * 7 + r * 3 + k) % 32);
            jt_fill_pattern((uint8_t *)sl->att, sl->att_len,
                            (uint32_t)(ctx->id << 20 | r << 5 | k));
            jet_iobuf_append(jet_call_request_attachment(sl->call), sl->att, sl->att_len);
            Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
            req.message = sl->msg;
            int rc = jet_channel_call(ctx->ch, &example__echo_service__descriptor, 0, sl->call,
                                      &req.base, ctx->async ? jt_count_done : NULL, &done);
            if (rc != 0) atomic_fetch_add(ctx->bad, 1);
            if (rc == 0 && ctx->async) issued++;
        }
        if (ctx->async && !wait_count(&done, issued)) {
            atomic_fetch_add(ctx->bad, 1000000);
            stuck = true;
            break;
        }
        /* done has signalled; join waits until it has returned (channel.h). */
        if (ctx->async)
            for (int k = 0; k < batch; k++)
                jet_call_join(slots[k].call);
        for (int k = 0; k < batch; k++) {
            mt_slot_t *sl = &slots[k];
            if (!jt_echo_resp_is(sl->call, sl->msg) ||
                jet_iobuf_equals(jet_call_response_attachment(sl->call), sl->att, sl->att_len) !=
                    0) {
                if (atomic_fetch_add(ctx->bad, 1) < 5)
                    fprintf(stderr, "  thread %d call %s: [E%d] %s\n", ctx->id, sl->msg,
                            jet_call_error_code(sl->call), jet_call_error_text(sl->call));
            }
        }
    }
    if (stuck) return NULL; /* calls still in flight: leak them rather than free them */
    if (ctx->async && atomic_load(&done.n) != issued) atomic_fetch_add(ctx->bad, 1);
    for (int k = 0; k < MT_BATCH; k++)
        jet_call_destroy(slots[k].call);
    return NULL;
}

static int run_threads(jet_channel_t *ch, int nthreads, int calls, bool async)
{
    pthread_t th[MT_THREADS];
    mt_ctx_t ctx[MT_THREADS];
    _Atomic int bad = 0;
    for (int i = 0; i < nthreads; i++) {
        ctx[i] = (mt_ctx_t){.ch = ch, .id = i, .async = async, .calls = calls, .bad = &bad};
        if (pthread_create(&th[i], NULL, mt_main, &ctx[i]) != 0) abort();
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    return atomic_load(&bad);
}

static void test_threads_single_connection(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_server_stats_t before, after;
    stats(g_srv, &before);
    JT_CHECK_EQ(run_threads(ch, MT_THREADS, MT_CALLS, true), 0);
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &after);
    JT_CHECK_EQ(after.requests - before.requests, MT_THREADS * MT_CALLS);
    JT_CHECK_EQ(after.requests_failed, before.requests_failed);
    JT_CHECK_EQ(after.connections_accepted - before.connections_accepted, 1);
    jet_channel_destroy(ch);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open));
}

static void test_pooled_connections(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_POOLED);
    JT_REQUIRE(ch);
    jet_server_stats_t before, mid, after;
    stats(g_srv, &before);
    /* Synchronous: one call per thread at a time, so at most 4 connections. */
    JT_CHECK_EQ(run_threads(ch, 4, 300, false), 0);
    stats(g_srv, &mid);
    JT_CHECK(mid.connections_accepted - before.connections_accepted >= 1);
    JT_CHECK(mid.connections_accepted - before.connections_accepted <= 4);
    /* Asynchronous: 16 in flight per thread, one connection each at most. */
    JT_CHECK_EQ(run_threads(ch, 2, 320, true), 0);
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &after);
    JT_CHECK_EQ(after.requests - before.requests, 4 * 300 + 2 * 320);
    JT_CHECK(after.connections_accepted - before.connections_accepted <= 4 + 2 * MT_BATCH);
    /* Idle connections stay open until the channel goes. */
    JT_CHECK(after.connections_open > before.connections_open);
    jet_channel_destroy(ch);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open));
}

/* max_connection_pool_size=3: ten calls at once open ten connections; once
 * they are answered only three stay open, and three calls after them open
 * none. */
static void test_pool_size_cap(void)
{
    enum { N = 10, KEEP = 3 };
    JT_REQUIRE(jet_flag_set("max_connection_pool_size", "3") == 0);
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_POOLED);
    JT_REQUIRE(ch);
    jet_server_stats_t before, mid, after;
    stats(g_srv, &before);
    jt_counter_t done = {0};
    jet_call_t *calls[N];
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        JT_REQUIRE(calls[i]);
        /* Answered 300 ms later: all N are in flight at once. */
        JT_CHECK_EQ(jt_echo_call(ch, calls[i], "later:300", jt_count_done, &done), 0);
    }
    JT_CHECK(wait_count(&done, N));
    for (int i = 0; i < N; i++) {
        JT_CHECK(jt_echo_resp_is(calls[i], "later:300"));
        jet_call_destroy(calls[i]);
    }
    stats(g_srv, &mid);
    JT_CHECK_EQ(mid.connections_accepted - before.connections_accepted, N);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open + KEEP));
    for (int i = 0; i < KEEP; i++) {
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        JT_CHECK_EQ(sync_echo(ch, call, "again"), 0);
        jet_call_destroy(call);
    }
    stats(g_srv, &after);
    JT_CHECK_EQ(after.connections_accepted, mid.connections_accepted);
    /* Lowered at run time: the next call that comes back closes the idle
     * connections above the new cap (before, they stayed open). */
    JT_REQUIRE(jet_flag_set("max_connection_pool_size", "1") == 0);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    JT_CHECK_EQ(sync_echo(ch, call, "lowered"), 0);
    jet_call_destroy(call);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open + 1));
    jet_channel_destroy(ch);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open));
    JT_REQUIRE(jet_flag_set("max_connection_pool_size", "100") == 0);
}

/* NULL where the headers say what it does. */
static void test_null_arguments(void)
{
    JT_CHECK_EQ(jet_server_create(NULL, NULL), -EINVAL);
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:1", NULL, NULL), -EINVAL);
    JT_CHECK_EQ(jet_server_add_service(NULL, &g_service.base.base), -EINVAL);
    jet_call_reset(NULL);
    jet_call_destroy(NULL);
    jet_call_join(NULL);
    JT_CHECK(jet_call_request_user_field(NULL, "k") == NULL);
    JT_CHECK(jet_call_response_user_field(NULL, "k") == NULL);
    JT_CHECK_EQ(jet_call_request_user_field_count(NULL), 0);
    JT_CHECK_EQ(jet_call_response_user_field_count(NULL), 0);
    JT_CHECK(!jet_call_request_user_field_at(NULL, 0, NULL, NULL));
    JT_CHECK(!jet_call_response_user_field_at(NULL, 0, NULL, NULL));
    JT_CHECK_EQ(jet_call_set_request_user_field(NULL, "k", "v"), -EINVAL);
}

static void test_short_connections(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SHORT);
    JT_REQUIRE(ch);
    jet_server_stats_t before, after;
    stats(g_srv, &before);
    JT_CHECK_EQ(run_threads(ch, 4, 50, false), 0);
    JT_CHECK_EQ(run_threads(ch, 1, 64, true), 0);
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &after);
    /* One connection per call, each closed after its call. */
    JT_CHECK_EQ(after.connections_accepted - before.connections_accepted, 4 * 50 + 64);
    JT_CHECK(wait_open_at_most(g_srv, before.connections_open));
    jet_channel_destroy(ch);
}

/* ---- payloads ---- */

/* Returns false when the echo failed. */
static bool attachment_round_trip(jet_channel_t *ch, size_t len, uint32_t seed)
{
    uint8_t *data = malloc(len ? len : 1);
    if (!data) abort();
    jt_fill_pattern(data, len, seed);
    jet_call_t *call = jet_call_create();
    jet_call_set_timeout_ms(call, 15000); /* ~100x what 16 MiB takes under ASan */
    JT_CHECK_EQ(jet_iobuf_append(jet_call_request_attachment(call), data, len), 0);
    char msg[64];
    snprintf(msg, sizeof msg, "attachment %zu", len);
    JT_CHECK_EQ(sync_echo(ch, call, msg), 0);
    JT_CHECK(jt_echo_resp_is(call, msg));
    if (jet_call_failed(call))
        fprintf(stderr, "  %zu bytes: [E%d] %s\n", len, jet_call_error_code(call),
                jet_call_error_text(call));
    jet_iobuf_t *att = jet_call_response_attachment(call);
    JT_CHECK_EQ(jet_iobuf_len(att), len);
    JT_CHECK_EQ(jet_iobuf_equals(att, data, len), 0);
    bool ok = !jet_call_failed(call) && jet_iobuf_equals(att, data, len) == 0;
    jet_call_destroy(call);
    free(data);
    return ok;
}

static void test_attachments(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {0, 1, 4095, 4096, 65537, 1u << 20, 16u << 20};
    bool ok = true;
    /* Stops at the first failure: larger sizes would only wait out their deadlines too. */
    for (size_t i = 0; ok && i < sizeof sizes / sizeof sizes[0]; i++)
        ok = attachment_round_trip(ch, sizes[i], (uint32_t)i + 1);
    /* A 16 MiB attachment through the worker-pool server too. */
    jet_channel_t *pch = open_channel(g_pool_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(pch);
    if (ok) attachment_round_trip(pch, 16u << 20, 99);
    jet_channel_destroy(pch);
    jet_channel_destroy(ch);
}

/* A request whose body (meta + message + attachment) exceeds the channel's
 * max_body_size fails at once with EMSGSIZE, without a retry and without
 * reaching the server (a brpc server would close the connection on it), even
 * when message + attachment alone fit. */
static void test_request_over_max_body(void)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.timeout_ms = 20000;
    o.max_retry = 3;
    o.max_body_size = 4096;
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", g_port);
    jet_channel_t *ch = NULL;
    JT_REQUIRE(jet_channel_create(addr, &o, &ch) == 0);
    jet_server_stats_t st0, st1;
    stats(g_srv, &st0);
    jet_call_t *call = jet_call_create();
    /* Message "big" (3 bytes, 5 packed) + 4080 bytes of attachment fit in
     * 4096; the meta does not. */
    uint8_t att[4080];
    memset(att, 7, sizeof att);
    jet_iobuf_append(jet_call_request_attachment(call), att, sizeof att);
    JT_CHECK_EQ(jt_echo_call(ch, call, "big", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), EMSGSIZE);
    JT_CHECK_EQ(jet_call_attempts(call), 1); /* call.h: attempts made */
    stats(g_srv, &st1);
    JT_CHECK_EQ(st1.requests - st0.requests, 0); /* nothing went out, no retry either */
    /* A smaller one goes through on the same channel. */
    jet_iobuf_clear(jet_call_request_attachment(call));
    jet_iobuf_append(jet_call_request_attachment(call), att, 1000);
    JT_CHECK_EQ(jt_echo_call(ch, call, "small", NULL, NULL), 0);
    JT_CHECK(!jet_call_failed(call));
    stats(g_srv, &st1);
    JT_CHECK_EQ(st1.requests - st0.requests, 1);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

/* A response attachment over baidu_std's int32 attachment_size is never
 * sent: the client gets an error answer, and the connection goes on. */
static void test_response_attachment_over_int32(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    JT_CHECK_EQ(jt_echo_call(ch, call, "hugeatt", NULL, NULL), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ERESPONSE);
    JT_CHECK_EQ(jet_iobuf_len(jet_call_response_attachment(call)), 0);
    jet_call_reset(call);
    JT_CHECK_EQ(jt_echo_call(ch, call, "after", NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "after"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

static void test_compression(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    /* Compressible (repeated text) and incompressible (random printable) messages. */
    size_t len = 100000;
    char *text = malloc(len + 1), *noise = malloc(len + 1);
    JT_REQUIRE(text && noise);
    for (size_t i = 0; i < len; i++)
        text[i] = "the quick brown fox jumps "[i % 26];
    text[len] = 0;
    jt_fill_pattern((uint8_t *)noise, len, 7);
    for (size_t i = 0; i < len; i++)
        noise[i] = (char)('!' + (uint8_t)noise[i] % 90);
    noise[len] = 0;
    static const int types[] = {JET_COMPRESS_NONE, JET_COMPRESS_SNAPPY, JET_COMPRESS_GZIP,
                                JET_COMPRESS_ZLIB};
    uint8_t att[3000];
    jt_fill_pattern(att, sizeof att, 3);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int which = 0; which < 3; which++) {
            const char *msg = which == 0 ? text : which == 1 ? noise : "short";
            jet_call_t *call = jet_call_create();
            jet_call_set_request_compress_type(call, types[t]);
            /* The attachment travels uncompressed next to a compressed message. */
            jet_iobuf_append(jet_call_request_attachment(call), att, sizeof att);
            JT_CHECK_EQ(sync_echo(ch, call, msg), 0);
            JT_CHECK(jt_echo_resp_is(call, msg));
            if (jet_call_failed(call))
                fprintf(stderr, "  compress %d: [E%d] %s\n", types[t], jet_call_error_code(call),
                        jet_call_error_text(call));
            /* The handler compresses its answer as the request was compressed:
             * so the server saw the request's type, and the client decoded it. */
            JT_CHECK_EQ(jet_call_response_compress_type(call), types[t]);
            JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), att, sizeof att), 0);
            jet_call_destroy(call);
        }
    }
    /* A type the client cannot compress with fails before anything is sent. */
    jet_server_stats_t before, after;
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &before);
    jet_call_t *call = jet_call_create();
    jet_call_set_request_compress_type(call, 4 /* LZ4: not supported */);
    JT_CHECK_EQ(sync_echo(ch, call, "lz4"), 0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), JET_EREQUEST);
    JT_CHECK(jet_call_response(call) == NULL);
    stats(g_srv, &after);
    JT_CHECK_EQ(after.requests, before.requests);
    jet_call_destroy(call);
    free(text);
    free(noise);
    jet_channel_destroy(ch);
}

static void test_checksum(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    uint8_t att[10000];
    jt_fill_pattern(att, sizeof att, 11);
    for (int with_att = 0; with_att < 2; with_att++) {
        for (int has_att = 0; has_att < 2; has_att++) {
            for (int compress = 0; compress < 2; compress++) {
                jet_call_t *call = jet_call_create();
                jet_call_set_request_checksum(call, with_att);
                if (compress) jet_call_set_request_compress_type(call, JET_COMPRESS_GZIP);
                if (has_att) jet_iobuf_append(jet_call_request_attachment(call), att, sizeof att);
                JT_CHECK_EQ(sync_echo(ch, call, "checksummed"), 0);
                JT_CHECK(jt_echo_resp_is(call, "checksummed"));
                if (jet_call_failed(call))
                    fprintf(stderr, "  checksum with_att=%d has_att=%d: [E%d] %s\n", with_att,
                            has_att, jet_call_error_code(call), jet_call_error_text(call));
                JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), att,
                                             has_att ? sizeof att : 0),
                            0);
                jet_call_destroy(call);
            }
        }
    }
    jet_channel_destroy(ch);
}

static void test_log_id(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    static const uint64_t ids[] = {1, 123456789, 0x7fffffffffffffffull, 0xfedcba9876543210ull};
    char expected[32];
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        jet_call_t *call = jet_call_create();
        jet_call_set_log_id(call, ids[i]);
        JT_CHECK_EQ(jet_call_log_id(call), ids[i]);
        JT_CHECK_EQ(sync_echo(ch, call, "logid"), 0);
        snprintf(expected, sizeof expected, "%llu", (unsigned long long)ids[i]);
        JT_CHECK(jt_echo_resp_is(call, expected));
        jet_call_destroy(call);
    }
    /* Without one the handler sees 0. */
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(sync_echo(ch, call, "logid"), 0);
    JT_CHECK(jt_echo_resp_is(call, "0"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

static void test_unix_socket(void)
{
    char path[108], addr[128];
    snprintf(path, sizeof path, "/tmp/jetrpc_test_echo_%d.sock", (int)getpid());
    snprintf(addr, sizeof addr, "unix:%s", path);
    jet_server_t *srv = start_server(addr, false, NULL);
    JT_REQUIRE(srv);
    JT_CHECK(access(path, F_OK) == 0);
    jet_channel_t *ch = open_channel_addr(addr, JET_CONNECTION_SINGLE);
    JT_CHECK(ch);
    if (ch) {
        uint8_t att[70000];
        jt_fill_pattern(att, sizeof att, 5);
        for (int i = 0; i < 50; i++) {
            jet_call_t *call = jet_call_create();
            char msg[32];
            snprintf(msg, sizeof msg, "unix %d", i);
            jet_iobuf_append(jet_call_request_attachment(call), att, (size_t)i * 1000);
            JT_CHECK_EQ(sync_echo(ch, call, msg), 0);
            JT_CHECK(jt_echo_resp_is(call, msg));
            JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), att, (size_t)i * 1000),
                        0);
            if (i == 0) JT_CHECK(strstr(jet_call_remote_side(call), path) != NULL);
            jet_call_destroy(call);
        }
        JT_CHECK_EQ(run_threads(ch, 4, 200, true), 0);
        jet_channel_destroy(ch);
    }
    jet_server_stats_t st;
    stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    jet_server_stop(srv);
    jet_server_destroy(srv);
    /* The server removes its socket file. */
    JT_CHECK(access(path, F_OK) != 0);
}

/* jet_server_start on a "unix:" path that is in use: a file that is not a
 * socket (it was deleted: user data lost), or the socket of a live server
 * (silently taken over) are refused with -EADDRINUSE, as a TCP port in use
 * is; only a stale socket, its server gone, is replaced. */
static void test_unix_path_in_use(void)
{
    char path[108], addr[128];
    snprintf(path, sizeof path, "/tmp/jetrpc_test_echo_inuse_%d", (int)getpid());
    snprintf(addr, sizeof addr, "unix:%s", path);
    jet_server_t *srv = NULL;

    FILE *f = fopen(path, "w");
    JT_REQUIRE(f);
    fputs("user data", f);
    fclose(f);
    JT_REQUIRE(jet_server_create(NULL, &srv) == 0);
    JT_CHECK_EQ(jet_server_add_service(srv, &g_service.base.base), 0);
    JT_CHECK_EQ(jet_server_start(srv, addr), -EADDRINUSE);
    char text[32] = "";
    f = fopen(path, "r");
    JT_CHECK(f && fgets(text, sizeof text, f) && strcmp(text, "user data") == 0);
    if (f) fclose(f);
    jet_server_destroy(srv);
    unlink(path);

    jet_server_t *live = start_server(addr, false, NULL);
    JT_REQUIRE(live);
    JT_REQUIRE(jet_server_create(NULL, &srv) == 0);
    JT_CHECK_EQ(jet_server_add_service(srv, &g_service.base.base), 0);
    JT_CHECK_EQ(jet_server_start(srv, addr), -EADDRINUSE);
    jet_server_destroy(srv);
    jet_channel_t *ch = open_channel_addr(addr, JET_CONNECTION_SINGLE);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(ch && call);
    JT_CHECK_EQ(sync_echo(ch, call, "the first server"), 0);
    JT_CHECK(jt_echo_resp_is(call, "the first server"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jt_server_stop(live);

    /* A stale socket: bound, then its process went without removing it. */
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    JT_REQUIRE(fd >= 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    JT_CHECK_EQ(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    JT_CHECK_EQ(listen(fd, 1), 0);
    close(fd);
    srv = start_server(addr, false, NULL);
    JT_CHECK(srv != NULL);
    jt_server_stop(srv);
    unlink(path);
}

static void test_handler_answers_later(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    /* Synchronous, with an attachment that the late answer moves back. */
    jet_call_t *call = jet_call_create();
    jet_iobuf_append(jet_call_request_attachment(call), "late bytes", 10);
    JT_CHECK_EQ(sync_echo(ch, call, "later:50"), 0);
    JT_CHECK(jt_echo_resp_is(call, "later:50"));
    JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), "late bytes", 10), 0);
    jet_call_destroy(call);
    /* Asynchronous, answered out of order: later delays first. */
    enum { N = 12 };
    jet_call_t *calls[N];
    char msgs[N][32];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        calls[i] = jet_call_create();
        snprintf(msgs[i], sizeof msgs[i], "later:%d", (N - i) * 10);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = msgs[i];
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, calls[i], &req.base,
                                     jt_count_done, &done),
                    0);
    }
    JT_CHECK(wait_count(&done, N));
    for (int i = 0; i < N; i++) {
        jet_call_join(calls[i]);
        JT_CHECK(jt_echo_resp_is(calls[i], msgs[i]));
        jet_call_destroy(calls[i]);
    }
    /* While a handler holds its answer, the loop keeps serving others. */
    jet_call_t *slow = jet_call_create();
    jt_counter_t slow_done = {0};
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "later:300";
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, slow, &req.base,
                                 jt_count_done, &slow_done),
                0);
    call = jet_call_create();
    JT_CHECK_EQ(sync_echo(ch, call, "meanwhile"), 0);
    JT_CHECK(jt_echo_resp_is(call, "meanwhile"));
    jet_call_destroy(call);
    JT_CHECK(wait_count(&slow_done, 1));
    jet_call_join(slow);
    JT_CHECK(jt_echo_resp_is(slow, "later:300"));
    jet_call_destroy(slow);
    jet_channel_destroy(ch);
}

static void test_usercode_in_pool(void)
{
    jet_channel_t *ch = open_channel(g_pool_port, JET_CONNECTION_SINGLE);
    jet_channel_t *loop_ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch && loop_ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(sync_echo(ch, call, "thread"), 0);
    JT_CHECK(jt_echo_resp_is(call, "jet_worker"));
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(loop_ch, call, "thread"), 0);
    JT_CHECK(!jet_call_failed(call));
    JT_CHECK(jt_echo_resp_message(call) && strncmp(jt_echo_resp_message(call), "jet_loop", 8) == 0);
    jet_call_destroy(call);
    /* Everything else works the same through the pool. */
    JT_CHECK_EQ(run_threads(ch, 4, 400, true), 0);
    call = jet_call_create();
    JT_CHECK_EQ(sync_echo(ch, call, "fail:4321:from a worker"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), 4321);
    JT_CHECK(strstr(jet_call_error_text(call), "from a worker") != NULL);
    jet_call_destroy(call);
    JT_CHECK(wait_in_flight_zero(g_pool_srv));
    jet_channel_destroy(ch);
    jet_channel_destroy(loop_ch);
}

/* A synchronous caller that spins for its answer (sync_call_spin_us) and
 * does not drive the loop still ends at its deadline: with a 1 s spin, a
 * 50 ms call to a handler that sleeps 600 ms failed only after the spin. */
static void test_spin_ends_at_deadline(void)
{
    JT_REQUIRE(jet_flag_set("sync_call_spin_us", "1000000") == 0);
    JT_REQUIRE(jet_flag_set("event_guest_drive", "false") == 0);
    jet_channel_t *ch = jt_channel_open_port(g_pool_port, JET_CONNECTION_SINGLE, 50, 0);
    jet_call_t *call = jet_call_create();
    if (ch && call) {
        JT_CHECK_EQ(sync_echo(ch, call, "warm"), 0);
        jet_call_reset(call);
        int64_t t0 = jt_now_ms();
        JT_CHECK_EQ(sync_echo(ch, call, "sleep:600"), 0);
        int64_t took = jt_now_ms() - t0;
        fprintf(stderr, "  a 50 ms call with a 1 s spin ended after %lld ms\n", (long long)took);
        JT_CHECK_EQ(jet_call_error_code(call), JET_ERPCTIMEDOUT);
        JT_CHECK(took < 400);
    }
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jet_flag_set("sync_call_spin_us", "0"), 0);
    JT_CHECK_EQ(jet_flag_set("event_guest_drive", "true"), 0);
    JT_CHECK(wait_in_flight_zero(g_pool_srv));
}

static void test_handler_set_failed(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_server_stats_t before, after;
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &before);
    jet_call_t *call = jet_call_create();
    jet_iobuf_append(jet_call_request_attachment(call), "req att", 7);
    JT_CHECK_EQ(sync_echo(ch, call, "fail:5678:handler refused x=7"), 0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), 5678);
    JT_CHECK(strstr(jet_call_error_text(call), "handler refused x=7") != NULL);
    JT_CHECK(jet_call_response(call) == NULL);
    JT_CHECK_EQ(jet_call_attempts(call), 1); /* a server error is not retried */
    JT_CHECK_EQ(jet_iobuf_len(jet_call_response_attachment(call)), 0);

    /* With a message passed to the closure anyway: still a failure, no message. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "failmsg:77:no message"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), 77);
    JT_CHECK(strstr(jet_call_error_text(call), "no message") != NULL);
    JT_CHECK(jet_call_response(call) == NULL);
    JT_CHECK_EQ(jet_iobuf_len(jet_call_response_attachment(call)), 0);

    /* A brpc code from a handler. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "fail:1003:you sent nonsense"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_EREQUEST);
    JT_CHECK(strstr(jet_call_error_text(call), "you sent nonsense") != NULL);

    /* 0 and negative codes become EINTERNAL. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "fail:0:zero code"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_EINTERNAL);
    JT_CHECK(strstr(jet_call_error_text(call), "zero code") != NULL);
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "fail:-5:negative code"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_EINTERNAL);

    /* A response missing a required field: ERESPONSE, as brpc's server. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "norequired"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), JET_ERESPONSE);
    JT_CHECK(strstr(jet_call_error_text(call), "missing required fields") != NULL);

    /* closure(NULL) without set_failed. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "null"), 0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), JET_EINTERNAL);
    JT_CHECK(jet_call_response(call) == NULL);

    /* The connection is fine afterwards. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "still alive"), 0);
    JT_CHECK(jt_echo_resp_is(call, "still alive"));
    jet_call_destroy(call);
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &after);
    JT_CHECK_EQ(after.requests - before.requests, 8);
    JT_CHECK_EQ(after.requests_failed - before.requests_failed, 7);
    JT_CHECK_EQ(after.connections_accepted - before.connections_accepted, 1);
    jet_channel_destroy(ch);
}

static void test_missing_required_field(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_server_stats_t before, after;
    JT_CHECK(wait_in_flight_zero(g_srv));
    stats(g_srv, &before);
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT; /* message (required) unset */
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        0);
    JT_CHECK(jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), JET_EREQUEST);
    JT_CHECK_EQ(jet_call_attempts(call), 1);
    JT_CHECK(jet_call_response(call) == NULL);
    /* Asynchronous: done runs inside jet_channel_call. */
    jt_counter_t done = {0};
    jet_call_reset(call);
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                 jt_count_done, &done),
                0);
    JT_CHECK_EQ(atomic_load(&done.n), 1);
    JT_CHECK_EQ(jet_call_error_code(call), JET_EREQUEST);
    stats(g_srv, &after);
    JT_CHECK_EQ(after.requests, before.requests);
    /* Nothing was connected for it. */
    JT_CHECK_EQ(after.connections_accepted, before.connections_accepted);
    /* The call object is reusable for a proper request. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "proper"), 0);
    JT_CHECK(jt_echo_resp_is(call, "proper"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

static void test_misuse(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "x";
    /* Unknown method index. */
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 1, call, &req.base, NULL, NULL),
        -EINVAL);
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 1000000, call, &req.base,
                                 NULL, NULL),
                -EINVAL);
    /* A request of another type than the method's input. */
    Example__EchoResponse wrong = EXAMPLE__ECHO_RESPONSE__INIT;
    wrong.message = "x";
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &wrong.base, NULL, NULL),
        -EINVAL);
    JT_CHECK_EQ(
        jet_channel_call(NULL, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        -EINVAL);
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, NULL, &req.base, NULL, NULL),
        -EINVAL);
    /* A call in flight cannot be issued again. */
    jt_counter_t done = {0};
    req.message = "later:1000"; /* long enough to still be in flight below */
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                 jt_count_done, &done),
                0);
    req.message = "again";
    JT_CHECK_EQ(
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        -EINVAL);
    jet_call_join(call);
    JT_CHECK(wait_count(&done, 1));
    JT_CHECK(jt_echo_resp_is(call, "later:1000"));
    /* After the refusals the call works. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "after misuse"), 0);
    JT_CHECK(jt_echo_resp_is(call, "after misuse"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

/* Channel options out of range are refused with -EINVAL, as the server's
 * are; -EPROTONOSUPPORT is for a transport that exists but is not built in
 * (RDMA), a protocol other than baidu_std, or SSL. The protocol's name is
 * read without regard to case, as brpc's StringToProtocolType does. */
static void test_channel_bad_options(void)
{
    const struct {
        const char *name;
        int rc;
    } protocols[] = {{"baidu_std", 0},
                     {"Baidu_STD", 0},
                     {"BAIDU_STD", 0},
                     {"http", -EPROTONOSUPPORT},
                     {"baidu_std ", -EPROTONOSUPPORT},
                     {"", -EPROTONOSUPPORT}};
    for (size_t i = 0; i < sizeof protocols / sizeof protocols[0]; i++) {
        jet_channel_options_t o;
        jet_channel_options_init(&o);
        o.protocol = protocols[i].name;
        jet_channel_t *c = NULL;
        int rc = jet_channel_create("127.0.0.1:8000", &o, &c);
        JT_CHECK_AT(protocols[i].name, rc == protocols[i].rc);
        if (rc == 0) jet_channel_destroy(c);
    }
    const int bad_modes[] = {-1, JET_SOCKET_MODE_MAX, 99};
    for (size_t i = 0; i < sizeof bad_modes / sizeof bad_modes[0]; i++) {
        jet_channel_options_t co;
        jet_channel_options_init(&co);
        co.socket_mode = (jet_socket_mode_t)bad_modes[i];
        jet_channel_t *ch = NULL;
        JT_CHECK_EQ(jet_channel_create("127.0.0.1:8000", &co, &ch), -EINVAL);
        jet_server_options_t so;
        jet_server_options_init(&so);
        so.socket_mode = (jet_socket_mode_t)bad_modes[i];
        jet_server_t *srv = NULL;
        JT_CHECK_EQ(jet_server_create(&so, &srv), -EINVAL);
    }
    jet_channel_options_t co;
    jet_channel_options_init(&co);
    co.socket_mode = JET_SOCKET_MODE_RDMA;
    jet_channel_t *ch = NULL;
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:8000", &co, &ch), -EPROTONOSUPPORT);
    jet_channel_options_init(&co);
    co.connection_type = (jet_connection_type_t)3;
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:8000", &co, &ch), -EINVAL);
    jet_channel_options_init(&co);
    co.max_retry = -1;
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:8000", &co, &ch), -EINVAL);
    const char *bad_addrs[] = {"",
                               ":",
                               "127.0.0.1",
                               "127.0.0.1:",
                               "127.0.0.1:65536",
                               "127.0.0.1:99999",
                               "127.0.0.1:-1",
                               "127.0.0.1:80x",
                               "[::1]",
                               "[::1",
                               "unix:"};
    for (size_t i = 0; i < sizeof bad_addrs / sizeof bad_addrs[0]; i++)
        JT_CHECK_AT(bad_addrs[i], jet_channel_create(bad_addrs[i], NULL, &ch) == -EINVAL);
    JT_CHECK_EQ(jet_channel_create(NULL, NULL, &ch), -EINVAL);
}

/* Resetting or destroying a call in flight (call.h forbids it) is refused:
 * the call completes as if nothing happened, its done runs with it, and it
 * can be destroyed after. (Reset used to clear it under the completion,
 * destroy to free it.) */
static void test_reset_or_destroy_in_flight(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(call);
    jet_iobuf_append(jet_call_request_attachment(call), "kept", 4);
    jt_counter_t done = {0};
    JT_CHECK_EQ(jt_echo_call(ch, call, "later:300", jt_count_done, &done), 0);
    jet_call_reset(call);
    jet_call_destroy(call);
    JT_CHECK(wait_count(&done, 1));
    jet_call_join(call);
    JT_CHECK(jt_echo_resp_is(call, "later:300"));
    JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), "kept", 4), 0);
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

/* The server's life cycle misused: services added after start, a second
 * start (also after stop), bad listen addresses, stop before start or
 * twice, destroy without start. Each is refused with its code, and the
 * server stays usable. */
static void test_server_misuse(void)
{
    jet_server_t *srv = NULL;
    JT_CHECK_EQ(jet_server_stop(NULL), -EINVAL);
    jet_server_destroy(NULL);
    JT_REQUIRE(jet_server_create(NULL, &srv) == 0);
    JT_CHECK_EQ(jet_server_stop(srv), 0); /* not started: nothing to stop */
    JT_CHECK_EQ(jet_server_listen_port(srv), 0);
    jet_server_destroy(srv);

    JT_REQUIRE(jet_server_create(NULL, &srv) == 0);
    JT_CHECK_EQ(jet_server_add_service(srv, NULL), -EINVAL);
    JT_CHECK_EQ(jet_server_add_service(srv, &g_service.base.base), 0);
    JT_CHECK_EQ(jet_server_add_service(srv, &g_service.base.base), -EEXIST);
    const char *bad[] = {"",     "127.0.0.1:65536", "127.0.0.1:99999", "127.0.0.1:-1", "[::1]",
                         "unix:"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        JT_CHECK_AT(bad[i], jet_server_start(srv, bad[i]) == -EINVAL);
    JT_CHECK_EQ(jet_server_start(srv, NULL), -EINVAL);
    /* A port in use (the echo server's): refused, and a later start works. */
    char in_use[32];
    snprintf(in_use, sizeof in_use, "127.0.0.1:%d", g_port);
    JT_CHECK_EQ(jet_server_start(srv, in_use), -EADDRINUSE);
    JT_CHECK_EQ(jet_server_start(srv, "127.0.0.1:0"), 0);
    int port = jet_server_listen_port(srv);
    JT_CHECK(port > 0);
    JT_CHECK_EQ(jet_server_start(srv, "127.0.0.1:0"), -EINVAL);
    jt_echo_service_t other;
    jt_echo_service_init(&other, NULL);
    JT_CHECK_EQ(jet_server_add_service(srv, &other.base.base), -EINVAL);
    jet_channel_t *ch = open_channel(port, JET_CONNECTION_SINGLE);
    jet_call_t *call = jet_call_create();
    JT_REQUIRE(ch && call);
    JT_CHECK_EQ(sync_echo(ch, call, "still serving"), 0);
    JT_CHECK(jt_echo_resp_is(call, "still serving"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jet_server_stop(srv), 0);
    JT_CHECK_EQ(jet_server_stop(srv), 0);
    JT_CHECK_EQ(jet_server_listen_port(srv), 0);
    JT_CHECK_EQ(jet_server_start(srv, "127.0.0.1:0"), -EINVAL);
    jet_server_destroy(srv);
}

static void test_call_reuse(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    jet_call_set_log_id(call, 42);
    jet_iobuf_append(jet_call_request_attachment(call), "first", 5);
    JT_CHECK_EQ(sync_echo(ch, call, "one"), 0);
    JT_CHECK(jt_echo_resp_is(call, "one"));
    JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), "first", 5), 0);

    /* Reset: everything back to a new call's state. */
    jet_call_reset(call);
    JT_CHECK(!jet_call_failed(call));
    JT_CHECK_EQ(jet_call_error_code(call), 0);
    JT_CHECK(jet_call_response(call) == NULL);
    JT_CHECK_EQ(jet_iobuf_len(jet_call_request_attachment(call)), 0);
    JT_CHECK_EQ(jet_iobuf_len(jet_call_response_attachment(call)), 0);
    JT_CHECK_EQ(jet_call_log_id(call), 0);
    JT_CHECK_EQ(jet_call_attempts(call), 0);
    JT_CHECK_EQ(sync_echo(ch, call, "logid"), 0);
    JT_CHECK(jt_echo_resp_is(call, "0"));
    JT_CHECK_EQ(jet_iobuf_len(jet_call_response_attachment(call)), 0);

    /* Reset after a failure. */
    jet_call_reset(call);
    JT_CHECK_EQ(sync_echo(ch, call, "fail:99:first fails"), 0);
    JT_CHECK_EQ(jet_call_error_code(call), 99);
    jet_call_reset(call);
    JT_CHECK(!jet_call_failed(call));
    JT_CHECK_EQ(strcmp(jet_call_error_text(call), ""), 0);
    jet_iobuf_append(jet_call_request_attachment(call), "second", 6);
    JT_CHECK_EQ(sync_echo(ch, call, "two"), 0);
    JT_CHECK(jt_echo_resp_is(call, "two"));
    JT_CHECK_EQ(jet_iobuf_equals(jet_call_response_attachment(call), "second", 6), 0);

    /* Reset after an asynchronous call, then reuse asynchronously. */
    jt_counter_t done = {0};
    for (int i = 0; i < 20; i++) {
        jet_call_reset(call);
        char msg[32];
        snprintf(msg, sizeof msg, "round %d", i);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = msg;
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                     jt_count_done, &done),
                    0);
        JT_CHECK(wait_count(&done, (uint32_t)i + 1));
        jet_call_join(call);
        JT_CHECK(jt_echo_resp_is(call, msg));
    }
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

/* ---- done callbacks ---- */

typedef struct slow_done {
    _Atomic uint32_t started;
    _Atomic uint32_t ended;
} slow_done_t;

static void slow_done_cb(jet_call_t *call, void *arg)
{
    slow_done_t *d = arg;
    atomic_store(&d->started, 1);
    jet__futex_wake(&d->started, INT_MAX);
    usleep(100000);
    atomic_store(&d->ended, 1);
}

static void test_join_waits_for_done(void)
{
    /* jet_call_join returns only once done has returned (channel.h). */
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    slow_done_t d = {0};
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "join";
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                 slow_done_cb, &d),
                0);
    uint64_t until = jt_now_us() + WAIT_LIMIT_US;
    while (!atomic_load(&d.started) && jt_now_us() < until)
        jet__futex_wait(&d.started, 0, 100000);
    JT_REQUIRE(atomic_load(&d.started));
    jet_call_join(call);
    JT_CHECK_EQ(atomic_load(&d.ended), 1);
    JT_CHECK(jt_echo_resp_is(call, "join"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
}

typedef struct destroy_in_done {
    jt_counter_t *done;
    char msg[32];
    _Atomic int ok;
} destroy_in_done_t;

static void destroy_in_done_cb(jet_call_t *call, void *arg)
{
    destroy_in_done_t *d = arg;
    atomic_store(&d->ok, jt_echo_resp_is(call, d->msg) ? 1 : -1);
    jet_call_destroy(call); /* allowed inside done: freed after it returns */
    jt_count_done(NULL, d->done);
}

static void test_destroy_inside_done(void)
{
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    enum { N = 200 };
    static destroy_in_done_t ds[N];
    jt_counter_t done = {0};
    for (int i = 0; i < N; i++) {
        ds[i].done = &done;
        atomic_store(&ds[i].ok, 0);
        snprintf(ds[i].msg, sizeof ds[i].msg, "destroy in done %d", i);
        jet_call_t *call = jet_call_create();
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = ds[i].msg;
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                     destroy_in_done_cb, &ds[i]),
                    0);
    }
    JT_CHECK(wait_count(&done, N));
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += atomic_load(&ds[i].ok) != 1;
    JT_CHECK_EQ(bad, 0);
    jet_channel_destroy(ch);
}

/* tcp_read_budget has the range [1, ...]: a value below is refused from
 * the command line, and one code stores still reads once per event (each
 * connection, client and server side, would otherwise never read and its
 * loop repost the read for ever). */
static void test_read_budget_below_one(void)
{
    const char *values[] = {"0", "-1"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        JT_CHECK_EQ(jet_flag_set("tcp_read_budget", values[i]), -EINVAL);
        JET_FLAG_STORE(tcp_read_budget, atoi(values[i]));
        /* A new connection each time; 2 s: the answer comes at once or never. */
        jet_channel_t *ch = jt_channel_open_port(g_port, JET_CONNECTION_SINGLE, 2000, 0);
        jet_call_t *call = jet_call_create();
        if (ch && call) {
            JT_CHECK_EQ(sync_echo(ch, call, "read with a budget below one"), 0);
            if (!jt_echo_resp_is(call, "read with a budget below one"))
                fprintf(stderr, "  tcp_read_budget=%s: [E%d] %s\n", values[i],
                        jet_call_error_code(call), jet_call_error_text(call));
            JT_CHECK(jt_echo_resp_is(call, "read with a budget below one"));
        }
        jet_call_destroy(call);
        jet_channel_destroy(ch);
    }
    JT_CHECK_EQ(jet_flag_set("tcp_read_budget", "16"), 0);
}

/* socket_max_unwritten_bytes of 0 or less lifts the limit, for the
 * requests a client writes as for the reading a server pauses: no request
 * fails with EOVERCROWDED for it (a negative one failed every request). */
static void test_unwritten_limit_lifted(void)
{
    char old[32];
    snprintf(old, sizeof old, "%lld", (long long)JET_FLAG(socket_max_unwritten_bytes));
    const char *values[] = {"0", "-1"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        JT_REQUIRE(jet_flag_set("socket_max_unwritten_bytes", values[i]) == 0);
        jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ch);
        /* Several in flight at once, so that requests are written while
         * others still wait to be. */
        enum { N = 64 };
        jet_call_t *calls[N];
        jt_counter_t done = {0};
        for (int k = 0; k < N; k++) {
            calls[k] = jet_call_create();
            JT_REQUIRE(calls[k]);
            JT_CHECK_EQ(jt_echo_call(ch, calls[k], "no limit", jt_count_done, &done), 0);
        }
        JT_CHECK(wait_count(&done, N));
        for (int k = 0; k < N; k++) {
            jet_call_join(calls[k]);
            if (!jt_echo_resp_is(calls[k], "no limit")) {
                fprintf(stderr, "  socket_max_unwritten_bytes=%s: [E%d] %s\n", values[i],
                        jet_call_error_code(calls[k]), jet_call_error_text(calls[k]));
                JT_CHECK(jt_echo_resp_is(calls[k], "no limit"));
            }
            jet_call_destroy(calls[k]);
        }
        jet_channel_destroy(ch);
    }
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", old), 0);
}

static void test_done_hands_call_over(void)
{
    /* done only signals; the waiting thread then owns the call (call.h: completion
     * hands it to the done callback, which hands it on) and frees or reuses it
     * at once, without jet_call_join. The library must not touch the call after
     * done has returned. Runs last: a failure here can leave a call the library
     * still uses, so the case stops at the first one and leaks that call and
     * the channel rather than free them under the library. */
    jet_channel_t *ch = open_channel(g_port, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jt_counter_t done = {0};
    char msg[32];
    for (int i = 0; i < 1500; i++) {
        jet_call_t *call = jet_call_create();
        snprintf(msg, sizeof msg, "hand over %d", i);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = msg;
        JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base,
                                     jt_count_done, &done),
                    0);
        JT_REQUIRE(wait_count(&done, (uint32_t)i * 2 + 1));
        if (!jt_echo_resp_is(call, msg)) {
            fprintf(stderr, "  async %d: [E%d] %s\n", i, jet_call_error_code(call),
                    jet_call_error_text(call));
            JT_CHECK(jt_echo_resp_is(call, msg));
            return;
        }
        /* Reused at once: a synchronous call must be complete when it returns. */
        jet_call_reset(call);
        int rc = jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL,
                                  NULL);
        if (rc != 0 || !jt_echo_resp_is(call, msg)) {
            fprintf(stderr, "  sync %d returned incomplete: rc=%d [E%d] response=%p\n", i, rc,
                    jet_call_error_code(call), (const void *)jet_call_response(call));
            JT_CHECK(rc == 0 && jt_echo_resp_is(call, msg));
            return;
        }
        atomic_fetch_add(&done.n, 1);
        jet_call_destroy(call);
    }
    jet_channel_destroy(ch);
}

/* jettest.EchoService/Echo: "jettest " + the message. */
static void jettest_echo(Jettest__EchoService_Service *svc, const Jettest__DepthAnswer *in,
                         Jettest__DepthAnswer_Closure closure, void *closure_data)
{
    (void)svc;
    char text[128];
    snprintf(text, sizeof text, "jettest %s", in->message);
    Jettest__DepthAnswer out = JETTEST__DEPTH_ANSWER__INIT;
    out.message = text;
    closure(&out, closure_data);
}

/* brpc's services_in_different_ns: example.EchoService and
 * jettest.EchoService share a short name; one server holds both, each full
 * name reaches its own, and an undotted "EchoService" reaches the one added
 * first (server.h). */
static void test_services_in_different_ns(void)
{
    static Jettest__EchoService_Service other = JETTEST__ECHO_SERVICE__INIT(jettest_);
    jt_echo_service_t mine;
    jt_echo_service_init(&mine, NULL);
    jet_server_t *srv = NULL;
    JT_REQUIRE(jet_server_create(NULL, &srv) == 0);
    JT_CHECK_EQ(jet_server_add_service(srv, &mine.base.base), 0);
    JT_CHECK_EQ(jet_server_add_service(srv, &other.base), 0);
    JT_CHECK_EQ(jet_server_add_service(srv, &other.base), -EEXIST);
    JT_REQUIRE(jet_server_start(srv, "127.0.0.1:0") == 0);
    jet_channel_t *ch = open_channel(jet_server_listen_port(srv), JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    jet_call_t *call = jet_call_create();
    JT_CHECK_EQ(sync_echo(ch, call, "to example"), 0);
    JT_CHECK(jt_echo_resp_is(call, "to example"));
    jet_call_reset(call);
    Jettest__DepthAnswer req = JETTEST__DEPTH_ANSWER__INIT;
    req.message = "to jettest";
    JT_CHECK_EQ(
        jet_channel_call(ch, &jettest__echo_service__descriptor, 0, call, &req.base, NULL, NULL),
        0);
    const Jettest__DepthAnswer *r = (const Jettest__DepthAnswer *)jet_call_response(call);
    JT_CHECK(!jet_call_failed(call) && r && strcmp(r->message, "jettest to jettest") == 0);
    jet_call_reset(call);
    ProtobufCServiceDescriptor undotted = example__echo_service__descriptor;
    undotted.name = "EchoService";
    Example__EchoRequest ereq = EXAMPLE__ECHO_REQUEST__INIT;
    ereq.message = "short name";
    JT_CHECK_EQ(jet_channel_call(ch, &undotted, 0, call, &ereq.base, NULL, NULL), 0);
    JT_CHECK(jt_echo_resp_is(call, "short name"));
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jet_server_stop(srv);
    jet_server_destroy(srv);
}

/* RPC_CASE=<substring> runs only the matching cases (for debugging). */
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        const char *only_ = getenv("RPC_CASE");                                                    \
        if (!only_ || strstr(#fn, only_)) JT_RUN(fn);                                              \
    } while (0)

int main(void)
{
    jt_echo_service_init(&g_service, NULL);
    g_srv = start_server("127.0.0.1:0", false, &g_port);
    g_pool_srv = start_server("127.0.0.1:0", true, &g_pool_port);
    if (!g_srv || !g_pool_srv || g_port <= 0 || g_pool_port <= 0) {
        fprintf(stderr, "cannot start the echo servers\n");
        return 1;
    }
    RUN(test_sync_calls);
    RUN(test_async_calls);
    RUN(test_threads_single_connection);
    RUN(test_pooled_connections);
    RUN(test_pool_size_cap);
    RUN(test_null_arguments);
    RUN(test_short_connections);
    RUN(test_attachments);
    RUN(test_request_over_max_body);
    RUN(test_response_attachment_over_int32);
    RUN(test_compression);
    RUN(test_checksum);
    RUN(test_log_id);
    RUN(test_unix_socket);
    RUN(test_unix_path_in_use);
    RUN(test_handler_answers_later);
    RUN(test_usercode_in_pool);
    RUN(test_spin_ends_at_deadline);
    RUN(test_handler_set_failed);
    RUN(test_missing_required_field);
    RUN(test_misuse);
    RUN(test_channel_bad_options);
    RUN(test_server_misuse);
    RUN(test_call_reuse);
    RUN(test_reset_or_destroy_in_flight);
    RUN(test_join_waits_for_done);
    RUN(test_destroy_inside_done);
    RUN(test_read_budget_below_one);
    RUN(test_unwritten_limit_lifted);
    RUN(test_done_hands_call_over);
    RUN(test_services_in_different_ns);
    jet_server_stats_t st;
    jet_server_get_stats(g_srv, &st);
    jet_server_stop(g_srv);
    jet_server_stop(g_pool_srv);
    jet_server_destroy(g_srv);
    jet_server_destroy(g_pool_srv);
    return jt_finish();
}
