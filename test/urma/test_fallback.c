/* Fallback to TCP in every direction, and the option checks:
 * URMA client -> jetrpc TCP server (declining hello, same connection);
 * URMA client -> a server that closes on the hello like brpc's TCP-only
 * servers (the channel reconnects over TCP once, then stays on TCP for
 * transport_reprobe_s and offers URMA again after that);
 * URMA client -> a server that answers a declining hello, v2 and v3 (the
 * client sends ACK 0); TCP client -> URMA server; URMA unavailable on the
 * client, on the server, on both (urma_lib names a missing file), or taken
 * by another block-pool registrar; SSL and non-baidu_std refused. */
#include <unistd.h>

#include "iobuf/block_pool.h"
#include "urma/urma_handshake.h"
#include "urma_test.h"

#define GUARD_US (60 * 1000000LL)

static jet_channel_t *channel_retry(int port, jet_connection_type_t type, int max_retry)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_URMA;
    o.timeout_ms = 10000;
    o.connection_type = type;
    o.max_retry = max_retry;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    return jet_channel_create(addr, &o, &ch) == 0 ? ch : NULL;
}

static void test_urma_client_tcp_server(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_TCP, &port);
    JT_REQUIRE(srv);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = channel_retry(port, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 3; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 5000 + (size_t)i, (uint64_t)i, "tcp"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 100, 3000, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
    /* The client offered URMA (a set attached for its hello), the server
     * declined it and the calls ran over TCP on that same connection: not
     * closed and opened again. */
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    ut_expect_declined(m, 1);
    /* Every connection type, each connection declined on its own. */
    ch = channel_retry(port, JET_CONNECTION_SHORT, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 5; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 100, (uint64_t)i, "short"), 0);
    jet_channel_destroy(ch);
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1 + 5);
    JT_CHECK_EQ(st.requests_failed, 0);
    jet_server_destroy(srv);
}

/* A jetrpc UBRing-mode server declines a URMA hello like a TCP one: the
 * calls go over TCP on the connection that offered URMA. */
static void test_urma_client_ubring_server(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_UBRING, &port);
    JT_REQUIRE(srv);
    ut_urma_mark_t m = ut_urma_mark();
    jet_channel_t *ch = channel_retry(port, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 3; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 3000 + (size_t)i, (uint64_t)i, "ubring-port"), 0);
    jet_channel_destroy(ch);
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    ut_expect_declined(m, 1);
    jet_server_destroy(srv);
}

/* ---- a brpc TCP-only server: closes on a URMA hello ---------------------------------- */

/* A TCP echo server (*srv_p) behind a closer of URMA hellos (*c, on f->port)
 * that ends them with a reset or an orderly close. */
static bool closer_start(bool reset, jt_closer_t *c, jt_fake_t *f, jet_server_t **srv_p)
{
    int real = 0;
    *srv_p = ut_server_start(JET_SOCKET_MODE_TCP, &real);
    if (!*srv_p) return false;
    *c = (jt_closer_t){.real_port = real,
                       .head_len = 4,
                       .magics = {"URMA", "URM3", NULL},
                       .rest_len = 256,
                       .rest_ms = 50,
                       .reset = reset};
    jt_fake_start(f, jt_closer_fn, c);
    return true;
}

static void test_urma_client_brpc_tcp_server(void)
{
    jet_server_t *srv;
    jt_closer_t c;
    jt_fake_t f;
    JT_REQUIRE(closer_start(false, &c, &f, &srv));
    /* No retries allowed: the fallback reconnect must not need one. */
    jet_channel_t *ch = channel_retry(f.port, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 2000, 1, "brpc-tcp"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 2000, 2, "brpc-tcp"), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), 1);
    JT_CHECK_EQ(atomic_load(&c.proxied), 1);
    jet_channel_destroy(ch);
    /* A short-connection channel learns it once, then skips the hello. */
    ch = channel_retry(f.port, JET_CONNECTION_SHORT, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 4; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 300, (uint64_t)i, "brpc-tcp"), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), 2);
    JT_CHECK_EQ(atomic_load(&c.proxied), 5);
    /* Concurrent calls queued on the refused connection all move over. */
    jet_channel_destroy(ch);
    ch = channel_retry(f.port, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_async_batch(ch, 50, 1000, 0, GUARD_US, NULL), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), 3);
    jet_channel_destroy(ch);
    /* A pooled channel opens a connection per concurrent call, each with a
     * hello on its way before any refusal is known: every refused one moves
     * its call over to TCP, and none counts as an attempt. */
    for (int round = 0; round < 5; round++) {
        int before = atomic_load(&c.hellos);
        ch = channel_retry(f.port, JET_CONNECTION_POOLED, 0);
        JT_REQUIRE(ch);
        int first_err = 0;
        JT_CHECK_EQ(jt_async_batch(ch, 40, 700, 0, GUARD_US, &first_err), 0);
        JT_CHECK_EQ(first_err, 0);
        JT_CHECK(atomic_load(&c.hellos) > before);
        /* The pool's connections are on TCP now: no hello again. */
        int after = atomic_load(&c.hellos);
        JT_CHECK_EQ(jt_async_batch(ch, 40, 700, 0, GUARD_US, &first_err), 0);
        JT_CHECK_EQ(atomic_load(&c.hellos), after);
        jet_channel_destroy(ch);
    }
    int hellos = atomic_load(&c.hellos);
    /* The refusal is remembered for transport_reprobe_s only: once it has
     * passed, a new connection offers URMA again (the server may have been
     * restarted with it), and a second refusal still costs no call. */
    JT_CHECK_EQ(jet_flag_set("transport_reprobe_s", "1"), 0);
    ch = channel_retry(f.port, JET_CONNECTION_SHORT, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 300, 1, "brpc-tcp"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 300, 2, "brpc-tcp"), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), hellos + 1);
    usleep(1200 * 1000);
    JT_CHECK_EQ(jt_echo_bytes(ch, 300, 3, "brpc-tcp"), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), hellos + 2);
    JT_CHECK_EQ(jet_flag_set("transport_reprobe_s", "60"), 0);
    jet_channel_destroy(ch);
    jt_fake_stop(&f);
    jet_server_destroy(srv);
}

/* A server that resets the connection on the hello (it crashed, or is being
 * restarted) has not refused URMA: the attempt fails with the connection's
 * error, as over TCP, and counts; the channel does not go over to TCP, so
 * its next connection offers URMA again. */
static void test_reset_on_hello_is_no_refusal(void)
{
    jet_server_t *srv;
    jt_closer_t c;
    jt_fake_t f;
    JT_REQUIRE(closer_start(true, &c, &f, &srv));
    jet_channel_t *ch = channel_retry(f.port, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 2; i++) {
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(call);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = "reset";
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
        JT_CHECK(jet_call_failed(call));
        JT_CHECK_EQ(jet_call_error_code(call), JET_EEOF);
        JT_CHECK_EQ(jet_call_attempts(call), 1);
        jet_call_destroy(call);
        JT_CHECK_EQ(atomic_load(&c.hellos), i + 1); /* each connection offered URMA */
    }
    JT_CHECK_EQ(atomic_load(&c.proxied), 0);
    jet_channel_destroy(ch);
    jt_fake_stop(&f);
    jet_server_destroy(srv);
}

/* ---- a server that declines with a hello ------------------------------------------- */

typedef struct decliner {
    int real_port;
    _Atomic int hellos, acks_zero, acks_other, v3;
} decliner_t;

static void decliner_fn(int fd, int index, void *arg)
{
    decliner_t *d = arg;
    uint8_t buf[4200];
    size_t have = jt_read_n(fd, buf, 8, 5000), used = 0;
    jet_urma_hello_t h;
    jet_urma_hello_result_t r = JET_URMA_HELLO_INCOMPLETE;
    while (have >= 8 &&
           (r = jet__urma_hello_parse(buf, have, &h, &used)) == JET_URMA_HELLO_INCOMPLETE)
        if (jt_read_n(fd, buf + have, 1, 5000) == 1)
            have++;
        else
            break;
    if (r != JET_URMA_HELLO_OK) {
        close(fd);
        return;
    }
    atomic_fetch_add(&d->hellos, 1);
    if (h.version == 3) atomic_fetch_add(&d->v3, 1);
    uint8_t out[4200];
    int n = jet__urma_hello_pack_decline(h.version, out, sizeof out);
    uint8_t ack[4];
    if (n <= 0 || !jt_send_all(fd, out, (size_t)n) || jt_read_n(fd, ack, 4, 5000) != 4) {
        close(fd);
        return;
    }
    if (jet__urma_ack_parse(ack) == 0)
        atomic_fetch_add(&d->acks_zero, 1);
    else
        atomic_fetch_add(&d->acks_other, 1);
    int up = jt_tcp_connect(d->real_port, 0);
    if (up < 0) {
        close(fd);
        return;
    }
    jt_pump(fd, up, 0);
}

static void declining(int version)
{
    int real = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_TCP, &real);
    JT_REQUIRE(srv);
    decliner_t d = {.real_port = real};
    jt_fake_t f;
    jt_fake_start(&f, decliner_fn, &d);
    jet_flag_set("urma_client_handshake_version", version == 3 ? "3" : "2");
    jet_channel_t *ch = channel_retry(f.port, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 7000, 3, "declined"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 30, 10000, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
    jet_flag_set("urma_client_handshake_version", "2");
    JT_CHECK_EQ(atomic_load(&d.hellos), 1);
    JT_CHECK_EQ(atomic_load(&d.v3), version == 3 ? 1 : 0);
    JT_CHECK_EQ(atomic_load(&d.acks_zero), 1); /* brpc's client would send none */
    JT_CHECK_EQ(atomic_load(&d.acks_other), 0);
    jt_fake_stop(&f);
    jet_server_destroy(srv);
}

static void test_urma_client_declining_server_v2(void)
{
    declining(2);
}

static void test_urma_client_declining_server_v3(void)
{
    declining(3);
}

static void test_tcp_client_urma_server(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = ut_channel(port, JET_SOCKET_MODE_TCP, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100000, 4, "tcp-client"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 100, 2000, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
    /* The same server keeps serving URMA clients. */
    ut_urma_mark_t m = ut_urma_mark();
    ch = ut_channel(port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100000, 5, "urma-client"), 0);
    ut_expect_urma(m, 2, 2); /* both ends are in this process */
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
}

static const char *const missing_lib = "--urma_lib=/nonexistent/liburma.so.0";

static void test_client_urma_unavailable(void)
{
    int port = 0;
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &port);
    JT_REQUIRE(srv);
    char p[32];
    snprintf(p, sizeof p, "port=%d", port);
    const char *args[] = {p, "calls=4", "size=20000", missing_lib, "expect_urma=0", NULL};
    JT_CHECK_EQ(ut_client_run(args, NULL), 0);
    /* A library without the URMA symbols is as good as none. */
    const char *args2[] = {p, "calls=2", "--urma_lib=libz.so.1", "expect_urma=0", NULL};
    JT_CHECK_EQ(ut_client_run(args2, NULL), 0);
    /* Another block-pool registrar in the client process. */
    const char *args3[] = {p, "calls=2", "registrar=other", "expect_urma=0", NULL};
    JT_CHECK_EQ(ut_client_run(args3, NULL), 0);
    /* A transport path URMA connections cannot use (brpc's: CTP; RTP also
     * works): URMA is unavailable, with the reason logged. */
    const char *args4[] = {p, "calls=2", "--urma_tp_type=utp", "expect_urma=0", NULL};
    JT_CHECK_EQ(ut_client_run(args4, NULL), 0);
    const char *args5[] = {p, "calls=2", "--urma_tp_type=rtp", "expect_urma=1", NULL};
    JT_CHECK_EQ(ut_client_run(args5, NULL), 0);
    jet_server_destroy(srv);
}

static void test_server_urma_unavailable(void)
{
    const char *sargs[] = {missing_lib, NULL};
    jt_child_t c;
    JT_REQUIRE(jt_child_start(&c, sargs, NULL) == 0);
    for (int v = 2; v <= 3; v++) {
        jet_flag_set("urma_client_handshake_version", v == 3 ? "3" : "2");
        ut_urma_mark_t m = ut_urma_mark();
        jet_channel_t *ch = channel_retry(c.port, JET_CONNECTION_SINGLE, 0);
        JT_REQUIRE(ch);
        JT_CHECK_EQ(jt_echo_bytes(ch, 30000, 6, "srv-unavailable"), 0);
        JT_CHECK_EQ(jt_async_batch(ch, 20, 500, 0, GUARD_US, NULL), 0);
        /* One connection that offered URMA, was declined and carried the
         * calls over TCP. */
        ut_expect_declined(m, 1);
        jet_channel_destroy(ch);
    }
    jet_flag_set("urma_client_handshake_version", "2");
    /* Both sides without URMA. */
    char p[32];
    snprintf(p, sizeof p, "port=%d", c.port);
    const char *args[] = {p, "calls=3", missing_lib, NULL};
    JT_CHECK_EQ(ut_client_run(args, NULL), 0);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

static void test_option_checks(void)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_URMA;
    o.use_ssl = true;
    jet_channel_t *ch = NULL;
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:1", &o, &ch), -EPROTONOSUPPORT);
    o.use_ssl = false;
    static const char *const protocols[] = {
        "http", "h2", "redis", "nshead", "hulu_pbrpc", "sofa_pbrpc", "memcache", "streaming_rpc"};
    for (size_t i = 0; i < sizeof protocols / sizeof protocols[0]; i++) {
        o.protocol = protocols[i];
        JT_CHECK_AT(protocols[i], jet_channel_create("127.0.0.1:1", &o, &ch) == -EPROTONOSUPPORT);
    }
    o.protocol = "baidu_std";
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:1", &o, &ch), 0);
    jet_channel_destroy(ch);

    jet_server_options_t so;
    jet_server_options_init(&so);
    so.socket_mode = JET_SOCKET_MODE_URMA;
    so.ssl_cert = "cert.pem";
    jet_server_t *srv = NULL;
    JT_REQUIRE(jet_server_create(&so, &srv) == 0);
    JT_CHECK_EQ(jet_server_start(srv, "127.0.0.1:0"), -EPROTONOSUPPORT);
    jet_server_destroy(srv);
    /* No mode has TLS: TCP refuses it too, rather than run in clear text. */
    o.socket_mode = JET_SOCKET_MODE_TCP;
    o.use_ssl = true;
    JT_CHECK_EQ(jet_channel_create("127.0.0.1:1", &o, &ch), -EPROTONOSUPPORT);
    so.socket_mode = JET_SOCKET_MODE_TCP;
    JT_REQUIRE(jet_server_create(&so, &srv) == 0);
    JT_CHECK_EQ(jet_server_start(srv, "127.0.0.1:0"), -EPROTONOSUPPORT);
    jet_server_destroy(srv);
}

/* ---- child roles ------------------------------------------------------------- */

static int reg_dummy(void *ctx, void *base, size_t len, int memfd, void **reg_p)
{
    *reg_p = base;
    return 0;
}

static void dereg_dummy(void *ctx, void *reg) {}

static int client_role(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "registrar=other") == 0) {
            jet_registrar_t r = {.name = "other", .reg = reg_dummy, .dereg = dereg_dummy};
            if (jet__block_pool_set_registrar(&r) < 0) return 6;
        }
    }
    return ut_client_role(argc, argv);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "fallback");
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ut_server_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=client") == 0) return client_role(argc, argv);
    JT_RUN(test_urma_client_tcp_server);
    JT_RUN(test_urma_client_ubring_server);
    JT_RUN(test_urma_client_brpc_tcp_server);
    JT_RUN(test_reset_on_hello_is_no_refusal);
    JT_RUN(test_urma_client_declining_server_v2);
    JT_RUN(test_urma_client_declining_server_v3);
    JT_RUN(test_tcp_client_urma_server);
    JT_RUN(test_client_urma_unavailable);
    JT_RUN(test_server_urma_unavailable);
    JT_RUN(test_option_checks);
    return jt_finish();
}
