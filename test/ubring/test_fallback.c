/* Fallback to TCP in every direction, and UBRing under many connections:
 * UBRing channel -> jetrpc TCP-only server (zeroed un-negotiable hello,
 * ACK 0, same connection); UBRing channel -> a server that closes on the
 * hello like brpc's TCP-only servers (the channel retries over TCP); TCP
 * channel -> UBRing server (the pushed-back bytes); a raw "UB" hello with
 * hello_ver 3, and a proper hello to a TCP-only server (zeroed
 * un-negotiable answer, then baidu_std on the same connection); brpc RDMA
 * v2 and v3 client hellos to a UBRing server (brpc's TCP-mode answer, ACK
 * 0, baidu_std on the same connection); the reference peer refusing
 * UBRing; first writes of one byte in either direction; 20 UBRing
 * connections with many calls in flight. Every case ends with no UBRING_*
 * name left in /dev/shm and nothing mapped. */
#include "ubring_test.h"

#define GUARD_US (90 * 1000000LL)

/* ---- UBRing channel -> TCP-only jetrpc server ------------------------------------- */

static void test_ubring_channel_tcp_server(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_TCP, 0, &port);
    JT_REQUIRE(srv);
    /* No retries: the fallback must not need one. */
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 3; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 5000 + (size_t)i, (uint64_t)i, "tcp"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 5 << 20, 9, "tcp-big"),
                0); /* over TCP a ring's size is no limit */
    JT_CHECK_EQ(jt_async_batch(ch, 100, 3000, 1, GUARD_US, NULL), 0);
    /* The connection is on TCP: its segment is gone while it stays open. */
    JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
    jet_channel_destroy(ch);
    /* Every connection declined on its own. */
    ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_SHORT, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 5; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 100, (uint64_t)i, "short"), 0);
    jet_channel_destroy(ch);
    jet_server_stats_t st;
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, &st));
    JT_CHECK_EQ(st.requests_failed, 0);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- a brpc TCP-only server: closes on the UB hello -------------------------------------- */

/* A server without UBRing in front of a real TCP server; answer: what it
 * sends back on a hello before it closes (NULL: nothing, as brpc). */
static void ub_refusing_server(const char *answer)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int real = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_TCP, 0, &real);
    JT_REQUIRE(srv);
    jt_closer_t c = {.real_port = real,
                     .head_len = 2,
                     .magics = {"UB", NULL},
                     .rest_len = 62,
                     .rest_ms = 200,
                     .answer = answer};
    jt_fake_t f;
    jt_fake_start(&f, jt_closer_fn, &c);
    jet_channel_t *ch =
        ubt_channel(f.port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 2000, 1, "brpc-tcp"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 2000, 2, "brpc-tcp"), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), 1);
    JT_CHECK_EQ(atomic_load(&c.proxied), 1);
    /* The refused client segment was unlinked and unmapped (brpc leaks it). */
    JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
    jet_channel_destroy(ch);
    /* Calls queued on the refused connection all move over. */
    ch = ubt_channel(f.port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_async_batch(ch, 50, 1000, 3, GUARD_US, NULL), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), 2);
    jet_channel_destroy(ch);
    /* A pooled channel's concurrent calls each open a connection with a
     * hello before any refusal is known: each refused one moves its call to
     * TCP (no attempt counted), and the pool's connections stay on TCP. */
    ch = ubt_channel(f.port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_POOLED, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_async_batch(ch, 20, 1000, 3, GUARD_US, NULL), 0);
    int hellos = atomic_load(&c.hellos);
    JT_CHECK(hellos > 2);
    JT_CHECK_EQ(jt_async_batch(ch, 20, 1000, 3, GUARD_US, NULL), 0);
    JT_CHECK_EQ(atomic_load(&c.hellos), hellos);
    jet_channel_destroy(ch);
    /* The retry after a refusal goes at once and over TCP, whatever the
     * channel's backoff: with a backoff longer than the TCP stretch
     * (transport_reprobe_s), each retry offered the hello again, was refused
     * again and was not counted; a call without a deadline never ended
     * (helper-132). */
    JT_REQUIRE(jet_flag_set("transport_reprobe_s", "1") == 0);
    jet_connection_type_t types[] = {JET_CONNECTION_POOLED, JET_CONNECTION_SHORT};
    for (int i = 0; i < 2; i++) {
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", f.port);
        jet_channel_options_t o;
        jet_channel_options_init(&o);
        o.socket_mode = JET_SOCKET_MODE_UBRING;
        o.connection_type = types[i];
        o.timeout_ms = -1;
        o.max_retry = 1;
        o.retry_backoff_ms = 1100;
        JT_REQUIRE(jet_channel_create(addr, &o, &ch) == 0);
        int h0 = atomic_load(&c.hellos);
        int64_t t0 = jt_now_us();
        JT_CHECK_AT(i ? "short" : "pooled", jt_echo_bytes(ch, 2000, 3, "refused-retry") == 0);
        JT_CHECK_AT(i ? "short" : "pooled", jt_now_us() - t0 < 1000000);
        JT_CHECK_AT(i ? "short" : "pooled", atomic_load(&c.hellos) == h0 + 1);
        jet_channel_destroy(ch);
    }
    JT_REQUIRE(jet_flag_set("transport_reprobe_s", "60") == 0);
    jt_fake_stop(&f);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_ubring_channel_closing_server(void)
{
    ub_refusing_server(NULL);
}

/* A server of another kind that answers the UBRing hello with bytes that
 * are no hello (an HTTP error here) and closes: as with a server that only
 * closes, the call goes again over TCP and the channel stays on TCP (before,
 * every call failed with EPROTO). */
static void test_ubring_channel_garbage_answer(void)
{
    ub_refusing_server("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
}

/* ---- TCP channel -> UBRing server ---------------------------------------------------------- */

static void test_tcp_channel_ubring_server(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_TCP, 20000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {0, 1, 2, 100, 4096, 100000, 1 << 20, 6 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, sizes[i], i, "tcp-client"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 100, 2000, 1, GUARD_US, NULL), 0);
    JT_CHECK_EQ(ubt_maps_count(), 0); /* nothing of UBRing was set up */
    jet_channel_destroy(ch);
    /* Short TCP connections, each with the magic check on its first bytes. */
    ch = ubt_channel(port, JET_SOCKET_MODE_TCP, 20000, JET_CONNECTION_SHORT, 0);
    JT_REQUIRE(ch);
    for (int i = 0; i < 5; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 10, (uint64_t)i, "tcp-short"), 0);
    jet_channel_destroy(ch);
    /* The same server keeps serving UBRing clients. */
    ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100000, 5, "ubring-client"), 0);
    JT_CHECK(ubt_maps_count() > 0);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- raw hellos that cannot be negotiated ---------------------------------------------------- */

static void raw_hello_v3(jet_socket_mode_t mode)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(mode, 0, &port);
    JT_REQUIRE(srv);
    int fd = jt_tcp_connect(port, 0);
    JT_REQUIRE(fd >= 0);
    uint8_t h[64], r[64];
    ubt_hello_pack(h, 64, 3, 1, 4 << 20, "UBRING_127.0.0.1:1_C");
    JT_REQUIRE(jt_send_all(fd, h, sizeof h));
    size_t got = jt_read_n(fd, r, sizeof r, 10000);
    JT_CHECK_EQ(got, 64);
    if (got == 64) {
        JT_CHECK(ubt_hello_is_unnegotiable(r));
        uint8_t ack[4] = {0, 0, 0, 0};
        JT_REQUIRE(jt_send_all(fd, ack, 4));
        JT_CHECK(ubt_expect_tcp_after_ack0(fd, "hello_ver 3"));
    }
    close(fd);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_raw_hello_v3_ubring_server(void)
{
    raw_hello_v3(JET_SOCKET_MODE_UBRING);
}

static void test_raw_hello_v3_tcp_server(void)
{
    raw_hello_v3(JET_SOCKET_MODE_TCP);
}

/* A proper hello with a real segment to a TCP-only server: declined with the
 * zeroed hello, the segment left alone, TCP on the same connection. */
static void test_raw_hello_v2_tcp_server(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_TCP, 0, &port);
    JT_REQUIRE(srv);
    ubt_raw_t c;
    int rc = ubt_raw_connect(&c, port, NULL);
    JT_CHECK_EQ(rc, 0);
    if (rc == 0) {
        JT_CHECK(ubt_hello_is_unnegotiable(c.reply));
        JT_CHECK(ubt_expect_tcp_after_ack0(c.fd, "hello_ver 2 to TCP"));
    }
    ubt_raw_close(&c);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- a brpc RDMA client's hello to a UBRing server ------------------------------------ */

/* UBRING.md §2.6: the first bytes are not "UB", so they go to the normal
 * parsers, which answer an RDMA hello as a brpc TCP-mode server does
 * (RDMA-TRANSPORT.md §3.3, §4.3); after ACK 0 the connection is baidu_std. */
static void rdma_hello_ubring_server(const char *label, const uint8_t *hello, size_t hello_len,
                                     const uint8_t *answer, size_t answer_len)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    int fd = jt_tcp_connect(port, 0);
    JT_REQUIRE(fd >= 0);
    /* The magic in two pieces: "RD" alone must not decide anything yet. */
    JT_REQUIRE(jt_send_all(fd, hello, 2));
    usleep(50000);
    JT_REQUIRE(jt_send_all(fd, hello + 2, hello_len - 2));
    uint8_t got[64];
    size_t n = jt_read_n(fd, got, answer_len, 10000);
    JT_CHECK_AT(label, n == answer_len);
    if (n == answer_len) {
        bool same = memcmp(got, answer, answer_len) == 0;
        if (!same) {
            fprintf(stderr, "  [%s] answer:", label);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %02x", got[i]);
            fprintf(stderr, "\n");
        }
        JT_CHECK_AT(label, same);
        JT_REQUIRE(jt_send_all(fd, "\0\0\0\0", 4));
        JT_CHECK_AT(label, ubt_expect_tcp_after_ack0(fd, label));
    }
    JT_CHECK_AT(label, ubt_maps_count() == 0); /* no ring was set up for it */
    close(fd);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_rdma_v2_hello_ubring_server(void)
{
    /* "RDMA", msg_len 40, versions 2/1, block_size 8160, sq 128, rq 128,
     * lid 0, gid 0, qp_num 0x1234 (the captured client hello). */
    static const uint8_t hello[40] = {'R',  'D',  'M',  'A',  0x00,        0x28,       0x00,
                                      0x02, 0x00, 0x01, 0x00, 0x00,        0x1f,       0xe0,
                                      0x00, 0x80, 0x00, 0x80, [38] = 0x12, [39] = 0x34};
    /* msg_len 40, hello_ver 0xffff, then zeros. */
    static const uint8_t answer[40] = {'R', 'D', 'M', 'A', 0x00, 0x28, 0xff, 0xff};
    rdma_hello_ubring_server("rdma v2", hello, sizeof hello, answer, sizeof answer);
}

static void test_rdma_v3_hello_ubring_server(void)
{
    /* "RDM3", pb_size 32, RdmaHello: 1 block_size 8160, 2 sq_size 128,
     * 3 rq_size 128, 4 lid 0, 5 gid (16 bytes), 6 qp_num 0x1234. */
    static const uint8_t hello[40] = {'R',  'D',  'M',  '3',  0x00, 0x00,        0x00, 0x20, 0x08,
                                      0xe0, 0x3f, 0x10, 0x80, 0x01, 0x18,        0x80, 0x01, 0x20,
                                      0x00, 0x2a, 0x10, 0xfe, 0x80, [36] = 0x01, 0x30, 0xb4, 0x24};
    /* The captured answer of a TCP-mode brpc server: pb_size 28, the six
     * required fields zero, gid 16 zero bytes. */
    static const uint8_t answer[36] = {'R',  'D',  'M',  '3',  0x00,        0x00, 0x00,
                                       0x1c, 0x08, 0x00, 0x10, 0x00,        0x18, 0x00,
                                       0x20, 0x00, 0x2a, 0x10, [34] = 0x30, 0x00};
    rdma_hello_ubring_server("rdma v3", hello, sizeof hello, answer, sizeof answer);
}

/* ---- the reference peer refusing UBRing ---------------------------------------------------------
 */

static void test_ubring_channel_refusing_peer(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    ubt_peer_t peer;
    const char *args[] = {"--refuse-ubring", NULL};
    JT_REQUIRE(ubt_peer_server_start(&peer, args) == 0);
    jet_channel_t *ch =
        ubt_channel(peer.port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {0, 1, 61, 4096, 100000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, sizes[i], i, "refused"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 50, 500, 1, GUARD_US, NULL), 0);
    JT_CHECK(ubt_maps_wait_none(20000000));
    jet_channel_destroy(ch);
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "UBRing ESTABLISHED"), 0);
    if (jt_case_failed) ubt_peer_dump(&peer, "case failed");
    JT_CHECK_EQ(ubt_peer_stop(&peer, false), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- first writes of one byte
 * -------------------------------------------------------------------- */

/* A plain TCP client whose first write is the single byte "P". */
static void test_tcp_first_byte_alone_ubring_server(void)
{
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    int fd = jt_tcp_connect(port, 0);
    JT_REQUIRE(fd >= 0);
    uint8_t att[100];
    jt_fill_pattern(att, sizeof att, 7);
    size_t n, rn = 0;
    uint8_t *req = ubt_request_frame(5, "one-byte", att, sizeof att, &n);
    JT_REQUIRE(jt_send_all(fd, req, 1));
    usleep(100000);
    JT_REQUIRE(jt_send_all(fd, req + 1, 1));
    usleep(50000);
    JT_REQUIRE(jt_send_all(fd, req + 2, n - 2));
    free(req);
    uint8_t *resp = ubt_read_frame_fd(fd, &rn, 10000);
    JT_CHECK(resp && ubt_response_is(resp, rn, 5, "one-byte", att, sizeof att));
    free(resp);
    close(fd);
    jet_server_destroy(srv);
}

/* A proxy that passes the first bytes of each direction one per send. */
typedef struct slow_proxy {
    int real_port;
} slow_proxy_t;

static void slow_fn(int fd, int index, void *arg)
{
    slow_proxy_t *p = arg;
    int up = jt_tcp_connect(p->real_port, 0);
    if (up < 0) {
        close(fd);
        return;
    }
    jt_pump(fd, up, 80);
}

static void slow_hello(jet_socket_mode_t server_mode)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int real = 0;
    jet_server_t *srv = ubt_server_start(server_mode, 0, &real);
    JT_REQUIRE(srv);
    slow_proxy_t p = {.real_port = real};
    jt_fake_t f;
    jt_fake_start(&f, slow_fn, &p);
    jet_channel_t *ch =
        ubt_channel(f.port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 3000, 1, "slow"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 300000, 2, "slow"), 0);
    /* The hello arrived in pieces and still decided the same way. */
    if (server_mode == JET_SOCKET_MODE_UBRING)
        JT_CHECK(ubt_maps_count() > 0);
    else
        JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK_EQ(atomic_load(&f.accepted), 1);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
    jt_fake_stop(&f);
    JT_CHECK(ubt_maps_wait_none(20000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_hello_byte_by_byte_tcp_server(void)
{
    slow_hello(JET_SOCKET_MODE_TCP);
}

static void test_hello_byte_by_byte_ubring_server(void)
{
    slow_hello(JET_SOCKET_MODE_UBRING);
}

/* ---- many UBRing connections, many calls in flight
 * ------------------------------------------------ */

enum { CONNS = 20, THREADS = 10 };

typedef struct worker {
    jet_channel_t *ch[CONNS / THREADS];
    _Atomic int *bad;
    int index;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < CONNS / THREADS; k++) {
            int err = 0;
            size_t len = (size_t)(w->index * 977 + round * 131 + k * 61) % 20000;
            int n = jt_async_batch(w->ch[k], 40, len, 13, GUARD_US, &err);
            if (n) {
                fprintf(stderr, "  worker %d conn %d round %d: %d bad (first error %d)\n", w->index,
                        k, round, n, err);
                atomic_fetch_add(w->bad, n);
            }
            if (jt_echo_bytes(w->ch[k], 200000 + (size_t)round, (uint64_t)w->index, "sync") != 0)
                atomic_fetch_add(w->bad, 1);
        }
    }
    return NULL;
}

static void test_many_connections(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    jt_child_t c;
    const char *args[] = {"mode=ubring", NULL};
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    _Atomic int bad = 0;
    worker_t w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker_t){.bad = &bad, .index = i};
        for (int k = 0; k < CONNS / THREADS; k++) {
            w[i].ch[k] =
                ubt_channel(c.port, JET_SOCKET_MODE_UBRING, 60000, JET_CONNECTION_SINGLE, 0);
            JT_REQUIRE(w[i].ch[k]);
        }
    }
    for (int i = 0; i < THREADS; i++)
        JT_REQUIRE(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    JT_CHECK_EQ(atomic_load(&bad), 0);
    /* Each connection maps its own and the server's segment. */
    int maps = ubt_maps_count();
    if (maps < 2 * CONNS) fprintf(stderr, "  %d UBRING mappings for %d connections\n", maps, CONNS);
    JT_CHECK(maps >= 2 * CONNS);
    for (int i = 0; i < THREADS; i++)
        for (int k = 0; k < CONNS / THREADS; k++)
            jet_channel_destroy(w[i].ch[k]);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

int main(int argc, char **argv)
{
    ubt_main_setup(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ubt_server_role(argc, argv);
    JT_RUN(test_ubring_channel_tcp_server);
    JT_RUN(test_ubring_channel_closing_server);
    JT_RUN(test_ubring_channel_garbage_answer);
    JT_RUN(test_tcp_channel_ubring_server);
    JT_RUN(test_raw_hello_v3_ubring_server);
    JT_RUN(test_raw_hello_v3_tcp_server);
    JT_RUN(test_raw_hello_v2_tcp_server);
    JT_RUN(test_rdma_v2_hello_ubring_server);
    JT_RUN(test_rdma_v3_hello_ubring_server);
    JT_RUN(test_ubring_channel_refusing_peer);
    JT_RUN(test_tcp_first_byte_alone_ubring_server);
    JT_RUN(test_hello_byte_by_byte_tcp_server);
    JT_RUN(test_hello_byte_by_byte_ubring_server);
    JT_RUN(test_many_connections);
    return jt_finish();
}
