/* The URMA data path seen through its counters (client and server in one
 * process, so every receive and send of the test is counted):
 * zero-copy receive at and above urma_zerocopy_min_size and 1/16 of a
 * receive buffer, copy below (and never with urma_recv_zerocopy off); user memory that is not
 * registered is copied into pool blocks, byte-exact; selective signalling
 * (far fewer signalled WRs than WRs, yet an idle connection keeps little of
 * what it sent); credits piggybacked between jetrpc peers (no standalone
 * credit message in request/response traffic) and standalone credit
 * messages in brpc's envelope; jetty sets reset and reused after
 * connections close. */
#include "urma/urma_context.h"
#include "urma_test.h"

JET_FLAG_DECLARE_INT32(urma_rq_size);

#define GUARD_US (60 * 1000000LL)

static jet_urma_loop_stats_t totals(void)
{
    return ut_urma_totals(NULL);
}

static jet_server_t *g_srv;
static int g_port;

static void test_zero_copy_threshold(void)
{
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 10, 1, "warm"), 0);
    /* Small frames (< 512 bytes each way): copied. */
    jet_urma_loop_stats_t a = totals();
    for (int i = 0; i < 10; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 100, (uint64_t)i, "s"), 0);
    jet_urma_loop_stats_t b = totals();
    JT_CHECK_EQ(b.c.recv_copied - a.c.recv_copied, 20);
    JT_CHECK_EQ(b.c.recv_zerocopy - a.c.recv_zerocopy, 0);
    /* Frames over 512 bytes but under 1/16 of a receive buffer: copied too
     * (zero-copied, a held one would pin a whole buffer). */
    size_t pin_min = jet__urma_recv_size() / 16;
    jet_urma_loop_stats_t b2 = totals();
    for (int i = 0; i < 10; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, pin_min - 200, (uint64_t)i, "m"), 0);
    b = totals();
    JT_CHECK_EQ(b.c.recv_copied - b2.c.recv_copied, 20);
    JT_CHECK_EQ(b.c.recv_zerocopy - b2.c.recv_zerocopy, 0);
    /* Frames of a 16th of a buffer and more: the receive buffers themselves
     * go to the parser. */
    for (int i = 0; i < 10; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, pin_min + 100, (uint64_t)i, "z"), 0);
    jet_urma_loop_stats_t c = totals();
    JT_CHECK_EQ(c.c.recv_zerocopy - b.c.recv_zerocopy, 20);
    JT_CHECK_EQ(c.c.recv_copied - b.c.recv_copied, 0);
    /* A higher threshold copies them. */
    char over[32];
    snprintf(over, sizeof over, "%zu", pin_min + 1000);
    jet_flag_set("urma_zerocopy_min_size", over);
    for (int i = 0; i < 10; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, pin_min + 100, (uint64_t)i, "t"), 0);
    jet_urma_loop_stats_t d = totals();
    JT_CHECK_EQ(d.c.recv_copied - c.c.recv_copied, 20);
    JT_CHECK_EQ(d.c.recv_zerocopy - c.c.recv_zerocopy, 0);
    /* A negative threshold, stored by code (the flag's range refuses it),
     * acts as 0: it was read as a huge unsigned one, copying everything. */
    JT_CHECK_EQ(jet_flag_set("urma_zerocopy_min_size", "-1"), -EINVAL);
    JET_FLAG_STORE(urma_zerocopy_min_size, -1);
    for (int i = 0; i < 10; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, pin_min + 100, (uint64_t)i, "n"), 0);
    c = totals();
    JT_CHECK_EQ(c.c.recv_zerocopy - d.c.recv_zerocopy, 20);
    JT_CHECK_EQ(c.c.recv_copied - d.c.recv_copied, 0);
    d = c;
    jet_flag_set("urma_zerocopy_min_size", "512");
    jet_flag_set("urma_recv_zerocopy", "false");
    JT_CHECK_EQ(jt_echo_bytes(ch, 300000, 7, "off"), 0);
    jet_urma_loop_stats_t e = totals();
    JT_CHECK_EQ(e.c.recv_zerocopy - d.c.recv_zerocopy, 0);
    jet_flag_set("urma_recv_zerocopy", "true");
    /* A large message: every full receive buffer is zero-copy. */
    JT_CHECK_EQ(jt_echo_bytes(ch, 1 << 20, 8, "big"), 0);
    jet_urma_loop_stats_t f = totals();
    JT_CHECK(f.c.recv_zerocopy - e.c.recv_zerocopy >= 2 * ((1 << 20) / jet__urma_recv_size()));
    jet_channel_destroy(ch);
}

static void free_cb(void *data, void *arg)
{
    atomic_fetch_add((_Atomic int *)arg, 1);
    free(data);
}

/* Attachments in plain heap memory (jet_iobuf_append_user): not
 * registered, so copied into pool blocks for the send; bytes exact, and the
 * user's free callback runs. */
static void test_unregistered_user_memory(void)
{
    jet_urma_loop_stats_t a = totals();
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SHORT);
    JT_REQUIRE(ch);
    _Atomic int freed = 0;
    static const size_t sizes[] = {1, 5000, 70000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t len = sizes[i];
        uint8_t *p = malloc(len);
        JT_REQUIRE(p);
        jt_stream_fill(p, i * 5, len);
        jet_call_t *call = jet_call_create();
        JT_REQUIRE(jet_iobuf_append_user(jet_call_request_attachment(call), p, len, free_cb,
                                         (void *)&freed) == 0);
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        req.message = "user";
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
        JT_CHECK(!jet_call_failed(call));
        jet_iobuf_t *att = jet_call_response_attachment(call);
        JT_REQUIRE(jet_iobuf_len(att) == len);
        uint8_t *q = malloc(len);
        jet_iobuf_copy_to(att, q, len, 0);
        JT_CHECK(jt_stream_check(q, i * 5, len) < 0);
        free(q);
        jet_call_destroy(call);
    }
    jet_channel_destroy(ch);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&freed) == 4, 10000000));
    /* Short connections: their send counters are folded in when they end. */
    jet_urma_loop_stats_t b;
    JT_CHECK(JT_WAIT_UNTIL((b = totals(), b.endpoints == 0), 10000000));
    JT_CHECK(b.c.send_bounced - a.c.send_bounced >= 4);
}

static void test_signalling_and_piggyback(void)
{
    jet_urma_loop_stats_t a = totals();
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    for (int i = 0; i < 300; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 200, (uint64_t)i, "pg"), 0);
    /* Requests and responses carry each other's credits. */
    jet_urma_loop_stats_t m = totals();
    JT_CHECK_EQ(m.c.credit_msgs - a.c.credit_msgs, 0);
    JT_CHECK_EQ(jt_async_batch(ch, 500, 300, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
    jet_urma_loop_stats_t b;
    JT_CHECK(JT_WAIT_UNTIL((b = totals(), b.endpoints == 0), 10000000));
    /* Frames queued together share WRs, so there are fewer than 1600. */
    uint64_t wrs = b.c.data_wrs - a.c.data_wrs, sig = b.c.signalled_wrs - a.c.signalled_wrs;
    JT_CHECK(wrs >= 2 * 300);
    JT_CHECK(sig > 0 && sig * 4 < wrs); /* selective: every local_cap/4-th */
}

/* Bytes of the iobuf blocks in use in this process (client and server
 * ends), but for the buffers posted in (or kept for) the shared receive
 * queues. */
static size_t held_bytes(void)
{
    jet_urma_loop_stats_t st = totals();
    size_t bytes;
    (void)ut_blocks_in_use(&st, &bytes);
    return bytes;
}

/* A connection that goes quiet after sending keeps almost nothing of what it
 * sent: unsignalled WRs hold their blocks until a later completion covers
 * them, so the last WR of a burst that holds more than 256 KiB is signalled.
 * Both ends of each echo (the request on the client; on the server the
 * response, which holds the request's receive buffers) stay open and idle,
 * each keeping at most 256 KiB. The 700000-byte echo is the one the rule
 * decides (without it both ends keep about 650 KiB); the larger ones check
 * that longer bursts end within the bound too. */
static void test_idle_connection_releases_blocks(void)
{
    static const size_t sizes[] = {700000, 1 << 20, 9 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        /* A fresh connection each: what its ends hold after the echo
         * depends on no earlier traffic. */
        jet_channel_t *ch =
            ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ch);
        JT_CHECK_EQ(jt_echo_bytes(ch, 10, 1, "warm"), 0);
        size_t before = held_bytes();
        JT_CHECK_EQ(jt_echo_bytes(ch, sizes[i], i, "idle"), 0);
        size_t after = 0;
        bool back = JT_WAIT_EVERY((after = held_bytes()) <= before + 2 * 256 * 1024, 3000000, 1000);
        if (!back)
            fprintf(stderr, "  after %zu bytes each way: %zu KiB of blocks in use, %zu before\n",
                    sizes[i], after >> 10, before >> 10);
        JT_CHECK(back);
        jet_channel_destroy(ch);
    }
}

static void test_brpc_envelope_credits(void)
{
    jet_flag_set("urma_jetrpc_extensions", "false");
    jet_urma_loop_stats_t a = totals();
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    for (int i = 0; i < 200; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 200, (uint64_t)i, "brpc"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 8 << 20, 3, "brpc-big"), 0);
    JT_CHECK_EQ(jt_async_batch(ch, 300, 3000, 0, GUARD_US, NULL), 0);
    jet_channel_destroy(ch);
    jet_flag_set("urma_jetrpc_extensions", "true");
    jet_urma_loop_stats_t b;
    JT_CHECK(JT_WAIT_UNTIL((b = totals(), b.endpoints == 0), 10000000));
    /* Credits travel only as zero-length SEND_IMMs, about one per half
     * window of received WRs, and at least every 13 (the smallest window a
     * brpc peer, whose SQ depth the hello does not say, may have). */
    uint64_t credits = b.c.credit_msgs - a.c.credit_msgs, wrs = b.c.data_wrs - a.c.data_wrs;
    uint64_t half = ((uint64_t)JET_FLAG(urma_rq_size) - 3) / 2;
    uint64_t batch = half < 12 ? half : 12;
    JT_CHECK(credits > 0);
    JT_CHECK(credits * batch <= wrs + batch * 4);
}

static void test_jetty_reuse(void)
{
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SHORT);
    JT_REQUIRE(ch);
    for (int i = 0; i < 30; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 5000, (uint64_t)i, "reuse"), 0);
    jet_channel_destroy(ch);
    jet_urma_loop_stats_t b;
    JT_CHECK(JT_WAIT_UNTIL((b = totals(), b.endpoints == 0), 10000000));
    /* Sets came back to the pools (8 per loop at most). */
    JT_CHECK(b.pooled >= 2);
    JT_CHECK(b.pooled <= 8 * (uint32_t)jet_loops_count());
}

/* User memory registered with jet_urma_register_memory is sent from where
 * it is: no SGE is copied, at any size or offset inside the range; bytes
 * that reach past the range are copied, as is the range once unregistered.
 * Overlaps and bad arguments are refused. */
static void nofree_cb(void *data, void *arg)
{
    (void)data;
    atomic_fetch_add((_Atomic int *)arg, 1);
}

static int echo_user(jet_channel_t *ch, uint8_t *p, size_t len, _Atomic int *released)
{
    jet_call_t *call = jet_call_create();
    if (!call) return -1;
    if (jet_iobuf_append_user(jet_call_request_attachment(call), p, len, nofree_cb,
                              (void *)released) != 0)
        return -1;
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "user";
    jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
    int rc = jet_call_failed(call) ? -1 : 0;
    jet_iobuf_t *att = jet_call_response_attachment(call);
    uint8_t *q = malloc(len);
    if (rc == 0 && (!q || jet_iobuf_len(att) != len || jet_iobuf_copy_to(att, q, len, 0) != len ||
                    memcmp(p, q, len) != 0))
        rc = -1;
    free(q);
    jet_call_destroy(call);
    return rc;
}

static jet_urma_loop_stats_t settled_totals(void)
{
    jet_urma_loop_stats_t b;
    JT_CHECK(JT_WAIT_UNTIL((b = totals(), b.endpoints == 0), 10000000));
    return b;
}

static void test_registered_user_memory(void)
{
    const size_t len = 2u << 20;
    uint8_t *p = malloc(len + 4096);
    JT_REQUIRE(p);
    jt_stream_fill(p, 77, len + 4096);
    JT_CHECK_EQ(jet_urma_register_memory(NULL, 10), -EINVAL);
    JT_CHECK_EQ(jet_urma_register_memory(p, 0), -EINVAL);
    JT_REQUIRE(jet_urma_register_memory(p, len) == 0);
    JT_CHECK_EQ(jet_urma_register_memory(p + 100, 10), -EEXIST);
    JT_CHECK_EQ(jet_urma_register_memory(p + len - 1, 10), -EEXIST);
    JT_CHECK_EQ(jet_urma_unregister_memory(p + 1), -ENOENT);
    _Atomic int released = 0;
    jet_urma_loop_stats_t a = settled_totals();
    /* Short connections: their send counters are folded in when they end. */
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SHORT);
    JT_REQUIRE(ch);
    static const size_t sizes[] = {1, 5000, 70000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        JT_CHECK_EQ(echo_user(ch, p + 4096 * i + i, sizes[i], &released), 0);
    JT_CHECK_EQ(echo_user(ch, p + len - sizes[3], sizes[3], &released), 0); /* its last byte */
    jet_urma_loop_stats_t b = settled_totals();
    JT_CHECK_EQ(b.c.send_bounced - a.c.send_bounced, 0);
    JT_CHECK(b.c.data_wrs - a.c.data_wrs >= 5);
    /* Reaching past the range: copied. */
    JT_CHECK_EQ(echo_user(ch, p + len - 10, 100, &released), 0);
    jet_urma_loop_stats_t c = settled_totals();
    JT_CHECK(c.c.send_bounced - b.c.send_bounced >= 1);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&released) == 6, 10000000));
    JT_CHECK_EQ(jet_urma_unregister_memory(p), 0);
    JT_CHECK_EQ(jet_urma_unregister_memory(p), -ENOENT);
    /* Unregistered: copied again. */
    JT_CHECK_EQ(echo_user(ch, p, 5000, &released), 0);
    jet_urma_loop_stats_t d = settled_totals();
    JT_CHECK(d.c.send_bounced - c.c.send_bounced >= 1);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&released) == 7, 10000000));
    jet_channel_destroy(ch);
    /* On a connection that stays open, the block is given back when its
     * send completes, not when the connection next sends or closes. */
    JT_REQUIRE(jet_urma_register_memory(p, len) == 0);
    ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(echo_user(ch, p, 5000, &released), 0);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&released) == 8, 5000000));
    JT_CHECK_EQ(jet_urma_unregister_memory(p), 0);
    jet_channel_destroy(ch);
    free(p);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "datapath");
    g_srv = ut_server_start(JET_SOCKET_MODE_URMA, &g_port);
    if (!g_srv) return 1;
    JT_RUN(test_zero_copy_threshold);
    JT_RUN(test_unregistered_user_memory);
    JT_RUN(test_registered_user_memory);
    JT_RUN(test_signalling_and_piggyback);
    JT_RUN(test_idle_connection_releases_blocks);
    JT_RUN(test_brpc_envelope_credits);
    JT_RUN(test_jetty_reuse);
    jet_server_destroy(g_srv);
    return jt_finish();
}
