/* Interop with the reference UBRing peer (UBRING_PEER, ubring_peer.py, checked
 * against brpc): a jetrpc UBRing channel calling the peer's echo server, with
 * sizes from 0 to most of a ring and traffic of several ring lengths (so
 * both rings wrap), byte for byte; the peer's client running all its checks
 * against a jetrpc UBRing server. Every case proves the bytes went over
 * UBRing (the peer logs "UBRing ESTABLISHED", the segments are mapped in
 * this process) and ends with no UBRING_* name left in /dev/shm and no
 * segment still mapped. A missing python3 or peer script fails, never
 * skips. */
#include "ubring_test.h"

#define GUARD_US   (90 * 1000000LL)
#define RING_BYTES (4u << 20)

static void echo_sizes(jet_channel_t *ch, const size_t *sizes, size_t n, uint64_t seed,
                       size_t *total_p)
{
    for (size_t i = 0; i < n; i++) {
        int rc = jt_echo_bytes(ch, sizes[i], seed + i * 7919, "size");
        if (rc) fprintf(stderr, "  size %zu: %d\n", sizes[i], rc);
        JT_CHECK_EQ(rc, 0);
        *total_p += sizes[i];
    }
}

/* The peer's echo server behind a jetrpc UBRing channel. */
static void channel_to_peer_server(const char *const *peer_args, bool big)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    ubt_peer_t peer;
    JT_REQUIRE(ubt_peer_server_start(&peer, peer_args) == 0);
    jet_channel_t *ch =
        ubt_channel(peer.port, JET_SOCKET_MODE_UBRING, 60000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    static const size_t small[] = {0,  1,   2,   59,   60,   61,   119,   120,   121,
                                   64, 500, 999, 4095, 4096, 4097, 65535, 65536, 100000};
    /* Up to and beyond the 4 MiB ring: both sides cut such a message into
     * several write calls (UBRING.md §6). */
    static const size_t large[] = {1 << 20,  2 << 20, (3 << 20) + 12345, 3500000,
                                   3 << 20,  3932041, 5 << 20,          (9 << 20) + 7};
    size_t total = 0;
    echo_sizes(ch, small, sizeof small / sizeof small[0], 1, &total);
    JT_CHECK(ubt_maps_count() > 0);
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "UBRing ESTABLISHED"), 1);
    if (big) echo_sizes(ch, large, sizeof large / sizeof large[0], 1000, &total);
    /* Keep going until both rings have wrapped a few times. */
    for (uint64_t i = 0; total < 3 * (size_t)RING_BYTES + 1; i++) {
        size_t len = 1000000 + (size_t)i * 4099;
        JT_CHECK_EQ(jt_echo_bytes(ch, len, 5000 + i, "wrap"), 0);
        total += len;
        if (jt_case_failed) break;
    }
    /* Many requests in flight: several RPCs per ring write and read. */
    int err = 0;
    JT_CHECK_EQ(jt_async_batch(ch, 200, 1, 37, GUARD_US, &err), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 40, 60000, 61, GUARD_US, &err), 0);
    if (err) fprintf(stderr, "  first batch error: %d\n", err);
    /* Still the one UBRing connection: nothing fell back or reconnected. */
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "UBRing ESTABLISHED"), 1);
    JT_CHECK(ubt_maps_count() > 0);
    jet_channel_destroy(ch);
    JT_CHECK(ubt_maps_wait_none(30000000));
    if (jt_case_failed) ubt_peer_dump(&peer, "case failed");
    JT_CHECK_EQ(ubt_peer_stop(&peer, false), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_channel_to_peer_server(void)
{
    const char *args[] = {NULL};
    channel_to_peer_server(args, true);
}

/* The peer bumps the doorbell after storing the chunks and cuts its writes
 * into 1000-byte calls: every response spans many write calls. */
static void test_channel_to_peer_server_small_writes(void)
{
    const char *args[] = {"--doorbell", "after", "--max-write", "1000", NULL};
    channel_to_peer_server(args, false);
}

/* A new UBRing connection per call: handshake, one RPC, close, each time. */
static void test_short_connections_to_peer(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    ubt_peer_t peer;
    const char *args[] = {NULL};
    JT_REQUIRE(ubt_peer_server_start(&peer, args) == 0);
    jet_channel_t *ch =
        ubt_channel(peer.port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SHORT, 0);
    JT_REQUIRE(ch);
    enum { N = 6 };
    for (int i = 0; i < N; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 3000 + (size_t)i, (uint64_t)i, "short"), 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "UBRing ESTABLISHED"), N);
    JT_CHECK(ubt_maps_wait_none(30000000));
    if (jt_case_failed) ubt_peer_dump(&peer, "case failed");
    JT_CHECK_EQ(ubt_peer_stop(&peer, false), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* The peer's client with all its checks against a jetrpc UBRing server. */
static void peer_client(const char *const *extra)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    char server[32];
    snprintf(server, sizeof server, "127.0.0.1:%d", port);
    const char *args[32] = {"client", "--server", server};
    int n = 3;
    for (int i = 0; extra[i] && n < 31; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    ubt_peer_t peer;
    JT_REQUIRE(ubt_peer_spawn(&peer, args) == 0);
    int rc = ubt_peer_wait(&peer, 100000);
    JT_CHECK_EQ(rc, 0);
    /* The checks the client ran include the handshake itself: it reports
     * "PASS handshake" only over an established ring. */
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "PASS handshake"), 1);
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "FAIL"), 0);
    if (rc != 0 || jt_case_failed) ubt_peer_dump(&peer, "peer client");
    unlink(peer.log);
    jet_server_stats_t st;
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, &st));
    JT_CHECK_EQ(st.requests_failed, 1); /* its call to a missing method */
    JT_CHECK(ubt_maps_wait_none(30000000));
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_peer_client_all_checks(void)
{
    const char *extra[] = {"--wraps", "2", "--hb-wait", "4", "--pipeline", "64", NULL};
    peer_client(extra);
}

/* A larger client segment than ours, the doorbell after the data, small
 * write calls. */
static void test_peer_client_variant(void)
{
    const char *extra[] = {
        "--queue-mib", "8",       "--doorbell", "after",   "--max-write",
        "4096",        "--wraps", "1",          "--sizes", "0,1,60,61,4096,100000,3000000",
        NULL};
    peer_client(extra);
}

/* Several peer clients at once against one server. */
static void test_peer_clients_concurrent(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    char server[32];
    snprintf(server, sizeof server, "127.0.0.1:%d", port);
    enum { N = 3 };
    ubt_peer_t peers[N];
    int started = 0;
    for (int i = 0; i < N; i++) {
        const char *args[] = {"client",    "--server", server,    "--count",          "5",
                              "--hb-wait", "0",        "--sizes", "0,61,4096,200000", NULL};
        if (ubt_peer_spawn(&peers[i], args) == 0) started++;
    }
    JT_REQUIRE(started == N);
    for (int i = 0; i < N; i++) {
        int rc = ubt_peer_wait(&peers[i], 100000);
        JT_CHECK_EQ(rc, 0);
        if (rc != 0) ubt_peer_dump(&peers[i], "concurrent client");
        unlink(peers[i].log);
    }
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    JT_CHECK(ubt_maps_wait_none(30000000));
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

int main(int argc, char **argv)
{
    ubt_main_setup(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ubt_server_role(argc, argv);
    JT_RUN(test_channel_to_peer_server);
    JT_RUN(test_channel_to_peer_server_small_writes);
    JT_RUN(test_short_connections_to_peer);
    JT_RUN(test_peer_client_all_checks);
    JT_RUN(test_peer_client_variant);
    JT_RUN(test_peer_clients_concurrent);
    return jt_finish();
}
