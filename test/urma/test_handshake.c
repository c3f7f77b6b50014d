/* The URMA hello and ACK codec against brpc's byte layout (v2 binary, v3
 * protobuf): round trips, the captured v2 bytes, a v3 hello written by
 * hand, every prefix, the negotiation rules and the framing errors. */
#include <errno.h>
#include <string.h>

#include "testutil.h"
#include "urma/urma_handshake.h"

static jet_urma_hello_t sample_hello(int version)
{
    jet_urma_hello_t h;
    memset(&h, 0, sizeof h);
    h.version = version;
    h.buffer_size = 8160;
    h.recv_buffer_cnt = 127;
    h.jetty_id = 8;
    for (int i = 0; i < 16; i++) h.eid[i] = (uint8_t)(i + 1);
    h.uasid = 0x01020304;
    h.tp_type = JET_URMA_TP_CTP;
    h.seg_eid[0] = 1;
    h.seg_uasid = 0x0a0b0c0d;
    h.seg_va = 0x00007f1234560000ull;
    h.seg_len = 512ull << 20;
    h.seg_token_id = 0x55aa;
    return h;
}

static void roundtrip(int version)
{
    jet_urma_hello_t h = sample_hello(version), got;
    uint8_t buf[512];
    int n = jet__urma_hello_pack(&h, buf, sizeof buf);
    JT_REQUIRE(n > 0);
    JT_CHECK_EQ((size_t)n, jet__urma_hello_size(&h));
    size_t used = 0;
    JT_CHECK_EQ(jet__urma_hello_parse(buf, (size_t)n, &got, &used), JET_URMA_HELLO_OK);
    JT_CHECK_EQ(used, n);
    JT_CHECK(memcmp(&got, &h, sizeof h) == 0);
    /* Every proper prefix asks for more and never claims bytes. */
    for (int k = 0; k < n; k++) {
        used = 12345;
        JT_CHECK_EQ(jet__urma_hello_parse(buf, (size_t)k, &got, &used), JET_URMA_HELLO_INCOMPLETE);
        JT_CHECK_EQ(used, 12345);
    }
    /* Bytes after the hello are not part of it. */
    memcpy(buf + n, "PRPC", 4);
    JT_CHECK_EQ(jet__urma_hello_parse(buf, (size_t)n + 4, &got, &used), JET_URMA_HELLO_OK);
    JT_CHECK_EQ(used, n);
}

static void test_v2_roundtrip(void) { roundtrip(2); }
static void test_v3_roundtrip(void) { roundtrip(3); }

/* The first 64 bytes brpc's URMA client sent, as captured. */
static void test_v2_captured_bytes(void)
{
    static const uint8_t cap[] = {
        0x55, 0x52, 0x4d, 0x41, 0x00, 0x56, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x1f, 0xe0,
        0x00, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x08, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
        0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    jet_urma_hello_t h = sample_hello(2);
    h.uasid = 0;
    memset(h.seg_eid, 0, 16);
    h.seg_eid[0] = 1;
    h.seg_uasid = 0;
    uint8_t buf[JET_URMA_V2_LEN];
    JT_REQUIRE(jet__urma_hello_pack(&h, buf, sizeof buf) == JET_URMA_V2_LEN);
    JT_CHECK(memcmp(buf, cap, sizeof cap) == 0);
}

/* A v3 hello written out by hand from brpc's UrmaHello (fields 1-11,
 * proto2, in field order, as protobuf writes them), not by our encoder:
 * our parser reads every field, and our encoder writes the same bytes. */
static void test_v3_hand_written_bytes(void)
{
    /* clang-format off */
    static const uint8_t pb[] = {
        0x08, 0xe0, 0x3f,                               /* 1 buffer_size 8160 */
        0x10, 0x7f,                                     /* 2 recv_buffer_cnt 127 */
        0x18, 0x08,                                     /* 3 jetty_id 8 */
        0x22, 0x10, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, /* 4 eid, 16 bytes */
        0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
        0x28, 0x84, 0x86, 0x88, 0x08,                   /* 5 uasid 0x01020304 */
        0x30, 0x01,                                     /* 6 tp_type 1 (CTP) */
        0x3a, 0x10, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, /* 7 seg_eid, 16 bytes */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x40, 0x8d, 0x98, 0xac, 0x50,                   /* 8 seg_uasid 0x0a0b0c0d */
        0x48, 0x80, 0x80, 0xd8, 0xa2, 0xa3, 0xe2, 0x1f, /* 9 seg_va 0x7f1234560000 */
        0x50, 0x80, 0x80, 0x80, 0x80, 0x02,             /* 10 seg_len 512 MiB */
        0x58, 0xaa, 0xab, 0x01,                         /* 11 seg_token_id 0x55aa */
    };
    /* clang-format on */
    uint8_t wire[8 + sizeof pb];
    memcpy(wire, "URM3", 4);
    wire[4] = wire[5] = wire[6] = 0;
    wire[7] = (uint8_t)sizeof pb;
    memcpy(wire + 8, pb, sizeof pb);
    jet_urma_hello_t got, want = sample_hello(3);
    size_t used = 0;
    JT_REQUIRE(jet__urma_hello_parse(wire, sizeof wire, &got, &used) == JET_URMA_HELLO_OK);
    JT_CHECK_EQ(used, sizeof wire);
    JT_CHECK(memcmp(&got, &want, sizeof want) == 0);
    uint8_t buf[512];
    JT_REQUIRE(jet__urma_hello_pack(&want, buf, sizeof buf) == (int)sizeof wire);
    JT_CHECK(memcmp(buf, wire, sizeof wire) == 0);
}

static void test_v2_field_offsets(void)
{
    jet_urma_hello_t h = sample_hello(2);
    uint8_t b[JET_URMA_V2_LEN];
    JT_REQUIRE(jet__urma_hello_pack(&h, b, sizeof b) == JET_URMA_V2_LEN);
    JT_CHECK(b[42] == 1 && b[43] == 0 && b[44] == 0 && b[45] == 0); /* tp_type + pad */
    JT_CHECK(b[62] == 0x0a && b[65] == 0x0d);                        /* seg_uasid BE */
    JT_CHECK(b[66] == 0x00 && b[67] == 0x00 && b[68] == 0x7f && b[73] == 0x00); /* seg_va BE */
    JT_CHECK(b[77] == 0 && b[78] == 0x20 && b[81] == 0);             /* seg_len 512 MiB */
    JT_CHECK(b[84] == 0x55 && b[85] == 0xaa);                        /* seg_token_id */
}

static void expect_declined(jet_urma_hello_t h, const char *what)
{
    uint8_t buf[512];
    int n = jet__urma_hello_pack(&h, buf, sizeof buf);
    JT_REQUIRE(n > 0);
    jet_urma_hello_t got;
    size_t used = 0;
    jet_urma_hello_result_t r = jet__urma_hello_parse(buf, (size_t)n, &got, &used);
    if (r != JET_URMA_HELLO_DECLINED) fprintf(stderr, "  case %s (v%d)\n", what, h.version);
    JT_CHECK_EQ(r, JET_URMA_HELLO_DECLINED);
    JT_CHECK_EQ(used, n); /* a declined hello is consumed whole */
}

static void test_negotiation_rules(void)
{
    for (int v = 2; v <= 3; v++) {
        jet_urma_hello_t h = sample_hello(v);
        h.recv_buffer_cnt = 2;
        expect_declined(h, "recv_buffer_cnt 2");
        h = sample_hello(v);
        h.recv_buffer_cnt = 65536;
        expect_declined(h, "recv_buffer_cnt 65536");
        h = sample_hello(v);
        h.buffer_size = 1023;
        expect_declined(h, "buffer_size 1023");
        h = sample_hello(v);
        h.jetty_id = 0;
        expect_declined(h, "jetty_id 0");
        h = sample_hello(v);
        h.seg_len = 0;
        expect_declined(h, "seg_len 0");
        h = sample_hello(v);
        h.seg_va = 0;
        expect_declined(h, "seg_va 0");
        h = sample_hello(v);
        h.tp_type = 2;
        expect_declined(h, "tp_type UTP");
        /* The edges that still negotiate. */
        h = sample_hello(v);
        h.recv_buffer_cnt = 3;
        h.buffer_size = 1024;
        uint8_t buf[512];
        int n = jet__urma_hello_pack(&h, buf, sizeof buf);
        jet_urma_hello_t got;
        size_t used;
        JT_CHECK_EQ(jet__urma_hello_parse(buf, (size_t)n, &got, &used), JET_URMA_HELLO_OK);
    }
    /* v2 with other versions. */
    jet_urma_hello_t h = sample_hello(2), got;
    uint8_t b[JET_URMA_V2_LEN];
    size_t used;
    jet__urma_hello_pack(&h, b, sizeof b);
    b[7] = 3;
    JT_CHECK_EQ(jet__urma_hello_parse(b, sizeof b, &got, &used), JET_URMA_HELLO_DECLINED);
    jet__urma_hello_pack(&h, b, sizeof b);
    b[9] = 2;
    JT_CHECK_EQ(jet__urma_hello_parse(b, sizeof b, &got, &used), JET_URMA_HELLO_DECLINED);
}

static void test_decline_packets(void)
{
    uint8_t buf[512];
    jet_urma_hello_t got;
    size_t used;
    int n = jet__urma_hello_pack_decline(2, buf, sizeof buf);
    JT_REQUIRE(n == JET_URMA_V2_LEN);
    JT_CHECK(memcmp(buf, "URMA\x00\x56\x00\x00\x00\x00", 10) == 0);
    JT_CHECK_EQ(jet__urma_hello_parse(buf, (size_t)n, &got, &used), JET_URMA_HELLO_DECLINED);
    n = jet__urma_hello_pack_decline(3, buf, sizeof buf);
    JT_REQUIRE(n > 8);
    JT_CHECK(memcmp(buf, "URM3", 4) == 0);
    JT_CHECK_EQ(jet__urma_hello_parse(buf, (size_t)n, &got, &used), JET_URMA_HELLO_DECLINED);
    JT_CHECK_EQ(used, n);
    JT_CHECK_EQ(jet__urma_hello_pack_decline(4, buf, sizeof buf), -EINVAL);
    JT_CHECK_EQ(jet__urma_hello_pack_decline(2, buf, 10), -EINVAL);
}

static void test_framing_errors(void)
{
    jet_urma_hello_t h = sample_hello(2), got;
    uint8_t b[JET_URMA_V2_MAX_LEN + 16];
    size_t used;
    memset(b, 0, sizeof b);
    jet__urma_hello_pack(&h, b, sizeof b);
    b[4] = 0;
    b[5] = 85; /* msg_len below 86 */
    JT_CHECK_EQ(jet__urma_hello_parse(b, JET_URMA_V2_LEN, &got, &used), JET_URMA_HELLO_BAD_FRAME);
    b[4] = 0x10;
    b[5] = 0x01; /* 4097 */
    JT_CHECK_EQ(jet__urma_hello_parse(b, sizeof b, &got, &used), JET_URMA_HELLO_BAD_FRAME);
    /* A longer v2 hello: the extra bytes belong to it. */
    b[4] = 0;
    b[5] = 100;
    JT_CHECK_EQ(jet__urma_hello_parse(b, 99, &got, &used), JET_URMA_HELLO_INCOMPLETE);
    JT_CHECK_EQ(jet__urma_hello_parse(b, 100, &got, &used), JET_URMA_HELLO_OK);
    JT_CHECK_EQ(used, 100);
    /* v3: pb_size 0 and over 4096, and bytes that are not a UrmaHello. */
    uint8_t v3[16] = {'U', 'R', 'M', '3', 0, 0, 0, 0};
    JT_CHECK_EQ(jet__urma_hello_parse(v3, 8, &got, &used), JET_URMA_HELLO_BAD_FRAME);
    v3[6] = 0x10;
    v3[7] = 0x01;
    JT_CHECK_EQ(jet__urma_hello_parse(v3, 8, &got, &used), JET_URMA_HELLO_BAD_FRAME);
    uint8_t junk[] = {'U', 'R', 'M', '3', 0, 0, 0, 3, 0xff, 0xff, 0xff};
    JT_CHECK_EQ(jet__urma_hello_parse(junk, sizeof junk, &got, &used), JET_URMA_HELLO_BAD_FRAME);
    /* A v3 hello missing required fields does not decode either. */
    uint8_t partial[] = {'U', 'R', 'M', '3', 0, 0, 0, 2, 0x08, 0x01};
    JT_CHECK_EQ(jet__urma_hello_parse(partial, sizeof partial, &got, &used),
                JET_URMA_HELLO_BAD_FRAME);
}

static void test_not_hello(void)
{
    jet_urma_hello_t got;
    size_t used;
    JT_CHECK_EQ(jet__urma_hello_parse((const uint8_t *)"PRPC", 4, &got, &used),
                JET_URMA_HELLO_NOT_HELLO);
    JT_CHECK_EQ(jet__urma_hello_parse((const uint8_t *)"UX", 2, &got, &used),
                JET_URMA_HELLO_NOT_HELLO);
    JT_CHECK_EQ(jet__urma_hello_parse((const uint8_t *)"URM", 3, &got, &used),
                JET_URMA_HELLO_INCOMPLETE);
    JT_CHECK(jet__urma_hello_prefix((const uint8_t *)"U", 1));
    JT_CHECK(jet__urma_hello_prefix((const uint8_t *)"URM3", 4));
    JT_CHECK(!jet__urma_hello_prefix((const uint8_t *)"URMB", 4));
    JT_CHECK(!jet__urma_hello_prefix((const uint8_t *)"RDMA", 4));
}

static void test_ack(void)
{
    uint8_t a[4];
    jet__urma_ack_pack(a, true);
    JT_CHECK(memcmp(a, "\x00\x00\x00\x01", 4) == 0);
    JT_CHECK_EQ(jet__urma_ack_parse(a), 1);
    jet__urma_ack_pack(a, false);
    JT_CHECK(memcmp(a, "\x00\x00\x00\x00", 4) == 0);
    /* "PRPC" read where an ACK was expected has bit 0 set: servers must check the magic first. */
    JT_CHECK(jet__urma_ack_parse((const uint8_t *)"PRPC") & JET_URMA_ACK_OK);
}

/* Every hello placed right before an unreadable page, fed at every length. */
static void test_guard_page(void)
{
    for (int v = 2; v <= 3; v++) {
        jet_urma_hello_t h = sample_hello(v), got;
        uint8_t buf[512];
        int n = jet__urma_hello_pack(&h, buf, sizeof buf);
        for (int k = 0; k <= n; k++) {
            uint8_t *g = jt_guard_alloc(buf, (size_t)k);
            size_t used;
            jet_urma_hello_result_t r = jet__urma_hello_parse(g, (size_t)k, &got, &used);
            JT_CHECK_EQ(r, k == n ? JET_URMA_HELLO_OK : JET_URMA_HELLO_INCOMPLETE);
            jt_guard_free(g, (size_t)k);
        }
    }
}

int main(void)
{
    JT_RUN(test_v2_roundtrip);
    JT_RUN(test_v3_roundtrip);
    JT_RUN(test_v2_captured_bytes);
    JT_RUN(test_v3_hand_written_bytes);
    JT_RUN(test_v2_field_offsets);
    JT_RUN(test_negotiation_rules);
    JT_RUN(test_decline_packets);
    JT_RUN(test_framing_errors);
    JT_RUN(test_not_hello);
    JT_RUN(test_ack);
    JT_RUN(test_guard_page);
    return jt_finish();
}
