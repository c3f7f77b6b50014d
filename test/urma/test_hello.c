/* The URMA handshake byte by byte, against hand-written peers (brpc's RDMA
 * checklist, cases 1-38, with URMA magics).
 *
 * Fake client -> jetrpc URMA server: valid v2/v3 hellos get a valid hello of
 * the same version, invalid ones a declining hello, and ACK 0 or "PRPC"
 * (brpc's client falls back without ACK) leave the connection on TCP, where
 * a real TCP channel then calls through it; truncated, oversized, wrong-magic
 * and undecodable hellos close the connection; a silent half hello is closed
 * by the handshake timeout; ACK 1 after a decline, and TCP bytes after ACK 1,
 * close it. A full hello and then a close before the ACK gives back the
 * endpoint and its completion-queue share; a client that goes without
 * sending a byte (close or reset) is dropped and never takes one.
 * brpc's RDMA hellos (v2, v3) get the answer a TCP-mode server gives, byte
 * for byte, and after ACK 0 their requests are served on that connection.
 *
 * A brpc-like URMA client by hand (jet_caps 0, its own jetty): its echo
 * requests are answered byte-exact over URMA in WRs no longer than the
 * buffer_size it advertised and never more than its window; the server
 * returns credits as zero-length SEND_IMMs (imm a host-order count) once
 * more than half of the window is owed. Returning more credits than owed, a
 * zero-length SEND and a SEND longer than the server's buffer close that
 * connection only; messages from a jetty the hello did not name are dropped.
 * A v2 hello longer than its 86 bytes (msg_len 94, 4096) and then ACK 1: the
 * tail is drained, and echoes go over URMA.
 *
 * Fake client -> jetrpc TCP-mode server: URMA hellos get a declining hello
 * of their version on the same connection; ACK 0 or no ACK, then requests,
 * are served there; ACK 1 closes it; a v2 hello's extra bytes are drained.
 *
 * Fake server <- jetrpc URMA client: silence times the call out, a close
 * before or during the hello fails it (EEOF), garbage and broken frames
 * close the connection and the call goes again over TCP (as after a server
 * that closes on the hello), a declining hello gets ACK 0, and so does a hello with
 * valid versions and a field out of range (the call then completes over
 * TCP on that connection), a valid hello gets ACK 1 and
 * the request then arrives over URMA at the fake's jetty; the server closing
 * TCP after the ACK fails the pending call at once (EEOF), and TCP bytes
 * after the ACK fail it with EPROTO. */
#include <sys/socket.h>

#include "iobuf/block_pool.h"
#include "rpc_meta.pb-c.h"
#include "urma/urma_context.h"
#include "urma/urma_handshake.h"
#include "urma/urma_import.h"
#include "urma_test.h"

JET_FLAG_DECLARE_INT32(urma_rq_size);
JET_FLAG_DECLARE_INT64(socket_max_unwritten_bytes);

#define HS_TIMEOUT_MS 400

/* ---- a jetty of our own to put in hellos --------------------------------------- */

typedef struct fake_jetty {
    const jet_urma_ctx_t *c;
    urma_jfc_t *jfc;
    urma_jfr_t *jfr;
    urma_jetty_t *jetty;
    jet_block_t *buf[8];
} fake_jetty_t;

static fake_jetty_t fj;

static bool fake_jetty_create(void)
{
    fj.c = jet__urma_ctx_get();
    if (!fj.c) return false;
    const jet_urma_ctx_t *c = fj.c;
    urma_jfc_cfg_t fc = {.depth = 256};
    fj.jfc = JET_URMA_FN(c, urma_create_jfc)(c->uctx, &fc);
    urma_jfr_cfg_t rc = {
        .depth = 64, .trans_mode = URMA_TM_RM, .max_sge = 1, .jfc = fj.jfc, .min_rnr_timer = 1};
    fj.jfr = fj.jfc ? JET_URMA_FN(c, urma_create_jfr)(c->uctx, &rc) : NULL;
    if (!fj.jfr) return false;
    urma_jetty_cfg_t jc;
    memset(&jc, 0, sizeof jc);
    jc.flag.bs.share_jfr = 1;
    jc.jfs_cfg.depth = 64;
    jc.jfs_cfg.trans_mode = URMA_TM_RM;
    jc.jfs_cfg.max_sge = 1;
    jc.jfs_cfg.rnr_retry = 7;
    jc.jfs_cfg.jfc = fj.jfc;
    jc.shared.jfr = fj.jfr;
    fj.jetty = JET_URMA_FN(c, urma_create_jetty)(c->uctx, &jc);
    if (!fj.jetty) return false;
    for (int i = 0; i < 8; i++) {
        fj.buf[i] = jet__block_alloc(8192);
        urma_sge_t sge = {.addr = (uint64_t)(uintptr_t)fj.buf[i]->data,
                          .len = 8192,
                          .tseg = fj.buf[i]->region->reg};
        urma_jfr_wr_t wr = {.src = {.sge = &sge, .num_sge = 1}, .user_ctx = (uint64_t)i};
        urma_jfr_wr_t *bad;
        if (JET_URMA_FN(c, urma_post_jfr_wr)(fj.jfr, &wr, &bad) != URMA_SUCCESS) return false;
    }
    return true;
}

/* A valid hello naming the fake jetty. */
static void fake_hello(int version, jet_urma_hello_t *h)
{
    memset(h, 0, sizeof *h);
    const urma_seg_t *seg = &fj.c->hello_seg->seg;
    h->version = version;
    h->buffer_size = 8192;
    h->recv_buffer_cnt = 63;
    h->jetty_id = fj.jetty->jetty_id.id;
    memcpy(h->eid, fj.c->uctx->eid.raw, 16);
    h->uasid = fj.jetty->jetty_id.uasid;
    h->tp_type = 1;
    memcpy(h->seg_eid, seg->ubva.eid.raw, 16);
    h->seg_uasid = seg->ubva.uasid;
    memcpy(&h->seg_va, (const char *)&seg->ubva + offsetof(urma_ubva_t, va), 8);
    h->seg_len = seg->len;
    h->seg_token_id = seg->token_id;
}

static size_t pack(const jet_urma_hello_t *h, uint8_t *buf)
{
    int n = jet__urma_hello_pack(h, buf, 4200);
    return n > 0 ? (size_t)n : 0;
}

/* Grows the v3 hello of n bytes in buf to the longest the framing allows
 * (pb_size 4096) with an unknown length-delimited field (number 2000), which
 * protobuf skips. Returns the new length. */
static size_t pad_v3_to_max(uint8_t *buf, size_t n)
{
    size_t data = JET_URMA_V3_MAX_PB - (n - JET_URMA_V3_HDR_LEN) - 4; /* 2-byte tag and length */
    buf[n] = 0x82; /* field 2000, wire type 2 */
    buf[n + 1] = 0x7d;
    buf[n + 2] = (uint8_t)(0x80 | (data & 0x7f));
    buf[n + 3] = (uint8_t)(data >> 7);
    memset(buf + n + 4, 0, data);
    n += 4 + data;
    jt_put_be32(buf + 4, (uint32_t)(n - JET_URMA_V3_HDR_LEN));
    return n;
}

/* Reads one framed hello from fd: the parse result, *h and its bytes in raw. */
static jet_urma_hello_result_t read_hello(int fd, jet_urma_hello_t *h, uint8_t *raw, size_t *len_p)
{
    size_t have = jt_read_n(fd, raw, 8, 5000), used = 0;
    jet_urma_hello_result_t r = JET_URMA_HELLO_INCOMPLETE;
    while (have >= 4 &&
           (r = jet__urma_hello_parse(raw, have, h, &used)) == JET_URMA_HELLO_INCOMPLETE)
        if (jt_read_n(fd, raw + have, 1, 5000) == 1)
            have++;
        else
            break;
    *len_p = used;
    return r;
}

/* ---- fake client -> URMA server ------------------------------------------------- */

static jet_server_t *g_srv;
static int g_port;

static uint64_t srv_open(void)
{
    jet_server_stats_t st;
    jet_server_get_stats(g_srv, &st);
    return st.connections_open;
}

static uint64_t srv_accepted(void)
{
    jet_server_stats_t st;
    jet_server_get_stats(g_srv, &st);
    return st.connections_accepted;
}

/* Sends bytes as a client; true when the server then closes the connection. */
static bool server_closes_on(const void *bytes, size_t n, bool then_close_ourselves)
{
    int fd = jt_tcp_connect(g_port, 0);
    if (fd < 0) return false;
    jt_send_all(fd, bytes, n);
    if (then_close_ourselves) {
        close(fd);
        return JT_WAIT_UNTIL(srv_open() == 0, 10000000);
    }
    bool eof = jt_wait_eof(fd, 10000);
    close(fd);
    return eof && JT_WAIT_UNTIL(srv_open() == 0, 10000000);
}

typedef enum script {
    SC_VALID_ACK0,      /* valid hello, expect a valid answer, ACK 0 */
    SC_VALID_CAPS_ACK0, /* the same with jetrpc's caps (a jetrpc client) */
    SC_DECLINED_ACK0,   /* invalid fields, expect a decline, ACK 0 */
    SC_DECLINED_NO_ACK, /* as brpc's client: decline, then the request at once */
    SC_VALID_NO_ACK,    /* valid hello, no ACK, the request at once */
    SC_BAD_JETTY_ACK0,  /* a jetty that does not exist: import fails, decline */
    SC_LONG_V2_ACK0,    /* v2 with 8 tail bytes (msg_len 94) */
} script_t;

typedef struct proxy_arg {
    script_t sc;
    int version;
    _Atomic int ok, answered_valid, answered_decline;
    uint8_t answer[4200];
    size_t answer_len;
} proxy_arg_t;

/* Accepts a TCP channel's connection, plays the script on a connection to
 * the URMA server, then pumps the channel's bytes through it. */
static void proxy_fn(int fd, int index, void *arg)
{
    proxy_arg_t *pa = arg;
    int up = jt_tcp_connect(g_port, 0);
    uint8_t buf[4200];
    jet_urma_hello_t h;
    fake_hello(pa->version, &h);
    if (pa->sc == SC_DECLINED_ACK0 || pa->sc == SC_DECLINED_NO_ACK) h.recv_buffer_cnt = 2;
    if (pa->sc == SC_BAD_JETTY_ACK0) h.jetty_id = 0x7ffff0;
    if (pa->sc == SC_VALID_CAPS_ACK0) h.jet_caps = JET_URMA_CAPS, h.jet_sq = 64;
    size_t n = pack(&h, buf);
    if (pa->sc == SC_LONG_V2_ACK0) {
        memset(buf + n, 0, 8);
        n += 8;
        buf[4] = 0;
        buf[5] = 94;
    }
    if (up < 0 || !jt_send_all(up, buf, n)) goto out;
    jet_urma_hello_t ans;
    jet_urma_hello_result_t r = read_hello(up, &ans, pa->answer, &pa->answer_len);
    if (r == JET_URMA_HELLO_OK && ans.version == pa->version) atomic_store(&pa->answered_valid, 1);
    if (r == JET_URMA_HELLO_DECLINED && ans.version == pa->version)
        atomic_store(&pa->answered_decline, 1);
    if (pa->sc != SC_DECLINED_NO_ACK && pa->sc != SC_VALID_NO_ACK) {
        uint8_t ack[4] = {0, 0, 0, 0};
        if (!jt_send_all(up, ack, 4)) goto out;
    }
    atomic_store(&pa->ok, 1);
    jt_pump(fd, up, 0);
    return;
out:
    close(fd);
    if (up >= 0) close(up);
}

static void run_proxy(script_t sc, int version, proxy_arg_t *pa)
{
    memset(pa, 0, sizeof *pa);
    pa->sc = sc;
    pa->version = version;
    jt_fake_t f;
    jt_fake_start(&f, proxy_fn, pa);
    jet_channel_t *ch = ut_channel(f.port, JET_SOCKET_MODE_TCP, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 20000, 11, "through"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1, 12, "through"), 0);
    jet_channel_destroy(ch);
    jt_fake_stop(&f);
    JT_CHECK(atomic_load(&pa->ok));
}

/* A valid hello answered, then ACK 0: TCP on the same connection. A
 * client hello without jetrpc's caps (brpc's) gets brpc's bytes only (zero
 * pad, no field past 11); one with them gets the server's caps and SQ
 * depth. */
static void test_server_valid_hello_then_ack0(void)
{
    for (int k = 0; k < 4; k++) {
        int v = 2 + k % 2;
        bool caps = k >= 2;
        proxy_arg_t pa;
        run_proxy(caps ? SC_VALID_CAPS_ACK0 : SC_VALID_ACK0, v, &pa);
        JT_CHECK(atomic_load(&pa.answered_valid));
        jet_urma_hello_t a;
        size_t used;
        JT_REQUIRE(jet__urma_hello_parse(pa.answer, pa.answer_len, &a, &used) == JET_URMA_HELLO_OK);
        JT_CHECK_EQ(a.version, v);
        JT_CHECK_EQ(a.buffer_size, jet__urma_recv_size());
        JT_CHECK_EQ(a.recv_buffer_cnt, (uint32_t)JET_FLAG(urma_rq_size) - 1);
        JT_CHECK(a.jetty_id != 0 && a.seg_va != 0 && a.seg_len != 0);
        JT_CHECK_EQ(a.tp_type, 1);
        JT_CHECK_EQ(a.jet_caps, caps ? JET_URMA_CAPS : 0);
        JT_CHECK_EQ(a.jet_sq, caps ? 128 : 0);
        JT_CHECK(memcmp(a.eid, fj.c->uctx->eid.raw, 16) == 0);
        if (v == 2) {
            JT_CHECK(memcmp(pa.answer, "URMA\x00\x56\x00\x02\x00\x01", 10) == 0);
            JT_CHECK_EQ(pa.answer_len, 86);
            if (!caps) JT_CHECK(!pa.answer[43] && !pa.answer[44] && !pa.answer[45]);
        } else {
            JT_CHECK(memcmp(pa.answer, "URM3", 4) == 0);
            /* Fields 1000 and 1001 (caps 1, SQ 128) take 7 bytes:
             * c0 3e 01 c8 3e 80 01. */
            jet_urma_hello_t bare = a;
            bare.jet_caps = 0, bare.jet_sq = 0;
            uint8_t b[4200];
            size_t bl = pack(&bare, b);
            JT_CHECK_EQ(pa.answer_len, caps ? bl + 7 : bl);
        }
    }
    proxy_arg_t pa;
    run_proxy(SC_LONG_V2_ACK0, 2, &pa);
    JT_CHECK(atomic_load(&pa.answered_valid));
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == 0, 10000000));
}

static void test_server_declines_invalid_hello(void)
{
    for (int v = 2; v <= 3; v++) {
        proxy_arg_t pa;
        run_proxy(SC_DECLINED_ACK0, v, &pa);
        JT_CHECK(atomic_load(&pa.answered_decline));
        run_proxy(SC_BAD_JETTY_ACK0, v, &pa);
        JT_CHECK(atomic_load(&pa.answered_decline));
    }
    /* The decline bytes: versions, jetty id and buffer size zero. */
    proxy_arg_t pa;
    run_proxy(SC_DECLINED_ACK0, 2, &pa);
    JT_CHECK(memcmp(pa.answer, "URMA\x00\x56\x00\x00\x00\x00\x00\x00\x00\x00", 14) == 0);
}

static void test_server_client_falls_back_without_ack(void)
{
    proxy_arg_t pa;
    run_proxy(SC_DECLINED_NO_ACK, 2, &pa);
    JT_CHECK(atomic_load(&pa.answered_decline));
    /* Even after a valid answer, PRPC instead of the ACK means TCP. */
    run_proxy(SC_VALID_NO_ACK, 2, &pa);
    JT_CHECK(atomic_load(&pa.answered_valid));
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == 0, 10000000));
}

static void test_server_closes_bad_frames(void)
{
    uint8_t b[4200];
    jet_urma_hello_t h;
    fake_hello(2, &h);
    size_t n = pack(&h, b);
    /* v2 msg_len out of [86, 4096]. */
    static const uint16_t lens[] = {0, 35, 85, 4097, 0xffff};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        b[4] = (uint8_t)(lens[i] >> 8);
        b[5] = (uint8_t)lens[i];
        JT_CHECK_AT("v2 msg_len", server_closes_on(b, n, false));
    }
    /* v3 pb_size 0 and > 4096, and bytes that are no UrmaHello. */
    uint8_t v3[16] = {'U', 'R', 'M', '3', 0, 0, 0, 0};
    JT_CHECK_AT("pb 0", server_closes_on(v3, 8, false));
    jt_put_be32(v3 + 4, 4097);
    JT_CHECK_AT("pb 4097", server_closes_on(v3, 8, false));
    jt_put_be32(v3 + 4, 8);
    memset(v3 + 8, 0xff, 8);
    JT_CHECK_AT("pb garbage", server_closes_on(v3, 16, false));
    /* Neither PRPC nor a hello (parsed as TCP: the server closes). */
    JT_CHECK_AT("URMX", server_closes_on("URMX0123456789", 14, false));
    JT_CHECK_AT("garbage", server_closes_on("\x01\x02\x03\x04\x05", 5, false));
}

static void test_server_truncated_hello(void)
{
    char ms[16];
    snprintf(ms, sizeof ms, "%d", HS_TIMEOUT_MS);
    jet_flag_set("urma_handshake_timeout_ms", ms);
    uint8_t b[4200];
    jet_urma_hello_t h;
    fake_hello(2, &h);
    size_t n = pack(&h, b);
    /* Every prefix, then close: the connection goes, nothing stays. */
    static const size_t cuts[] = {1, 2, 3, 4, 5, 6, 40, 85};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        JT_CHECK_AT("prefix+close", server_closes_on(b, cuts[i], true));
    JT_CHECK(n == 86);
    /* A half hello and silence: closed by the handshake timeout. */
    JT_CHECK_AT("prefix+silence", server_closes_on(b, 40, false));
    fake_hello(3, &h);
    n = pack(&h, b);
    JT_CHECK_AT("v3 prefix+silence", server_closes_on(b, n - 3, false));
    /* A valid hello, then silence instead of the ACK. */
    fake_hello(2, &h);
    n = pack(&h, b);
    JT_CHECK_AT("no ack", server_closes_on(b, n, false));
    jet_flag_set("urma_handshake_timeout_ms", "10000");
}

/* brpc's RDMA case 1 (client_close_before_hello_send), the cut of 0 bytes:
 * a client connects and goes without sending a byte, by an orderly close
 * or by a reset. The server drops the connection, and its URMA endpoints
 * and completion-queue share stay as they were: a connection takes a set
 * only for a hello. */
static void test_server_close_before_hello(void)
{
    jet_urma_loop_stats_t st;
    /* Earlier connections finish draining first (not asserted here). */
    JT_WAIT_UNTIL(srv_open() == 0 && (st = ut_urma_totals(NULL), st.endpoints == 0), 10000000);
    for (int reset = 0; reset <= 1; reset++) {
        const char *w = reset ? "reset" : "close";
        uint64_t open0 = srv_open(), accepted0 = srv_accepted();
        jet_urma_loop_stats_t before = ut_urma_totals(NULL);
        int fd = jt_tcp_connect(g_port, 0);
        JT_REQUIRE(fd >= 0);
        /* Not before the server has taken the connection in. */
        JT_CHECK_AT(w, JT_WAIT_UNTIL(srv_accepted() == accepted0 + 1, 10000000));
        JT_CHECK_AT(w, JT_WAIT_UNTIL(srv_open() == open0 + 1, 10000000));
        st = ut_urma_totals(NULL);
        JT_CHECK_AT(w, st.endpoints == before.endpoints && st.attaches == before.attaches);
        if (reset) {
            struct linger l = {.l_onoff = 1, .l_linger = 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
        }
        close(fd);
        JT_CHECK_AT(w, JT_WAIT_UNTIL(srv_open() == open0, 10000000));
        st = ut_urma_totals(NULL);
        JT_CHECK_AT(w, st.endpoints == before.endpoints && st.attaches == before.attaches &&
                           st.jfc_used == before.jfc_used);
    }
    /* And the server goes on serving URMA clients. */
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    ut_urma_mark_t m = ut_urma_mark();
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "after silent clients"), 0);
    ut_expect_urma(m, 1, 2); /* in-process: the channel's and the server's ends */
    jet_channel_destroy(ch);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == 0, 10000000));
}

static void test_server_ack_rules(void)
{
    uint8_t b[4200];
    jet_urma_hello_t h;
    /* Declined, then ACK 1: the client claims what the server refused. */
    fake_hello(2, &h);
    h.recv_buffer_cnt = 70000;
    size_t n = pack(&h, b);
    int fd = jt_tcp_connect(g_port, 0);
    JT_REQUIRE(fd >= 0);
    jt_send_all(fd, b, n);
    uint8_t ans[4200];
    size_t alen;
    jet_urma_hello_t a;
    JT_CHECK_EQ(read_hello(fd, &a, ans, &alen), JET_URMA_HELLO_DECLINED);
    jt_send_all(fd, "\x00\x00\x00\x01", 4);
    JT_CHECK(jt_wait_eof(fd, 10000));
    close(fd);

    /* Accepted, ACK 1, then a byte on TCP: closed. */
    fake_hello(2, &h);
    n = pack(&h, b);
    fd = jt_tcp_connect(g_port, 0);
    JT_REQUIRE(fd >= 0);
    jt_send_all(fd, b, n);
    JT_CHECK_EQ(read_hello(fd, &a, ans, &alen), JET_URMA_HELLO_OK);
    jt_send_all(fd, "\x00\x00\x00\x01", 4);
    usleep(50000);
    JT_CHECK_EQ(srv_open(), 1);
    jt_send_all(fd, "x", 1);
    JT_CHECK(jt_wait_eof(fd, 10000));
    close(fd);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == 0, 10000000));

    /* ACK 1 with more bytes in the same write: closed. */
    fd = jt_tcp_connect(g_port, 0);
    JT_REQUIRE(fd >= 0);
    jt_send_all(fd, b, n);
    JT_CHECK_EQ(read_hello(fd, &a, ans, &alen), JET_URMA_HELLO_OK);
    jt_send_all(fd, "\x00\x00\x00\x01PRPC", 8);
    JT_CHECK(jt_wait_eof(fd, 10000));
    close(fd);

    /* Accepted, ACK 1, then the client goes away: the server notices. */
    fd = jt_tcp_connect(g_port, 0);
    JT_REQUIRE(fd >= 0);
    jt_send_all(fd, b, n);
    JT_CHECK_EQ(read_hello(fd, &a, ans, &alen), JET_URMA_HELLO_OK);
    jt_send_all(fd, "\x00\x00\x00\x01", 4);
    usleep(20000);
    close(fd);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == 0, 10000000));
}

/* ---- baidu_std echo frames by hand (protobuf-c only, no jetrpc codec) ------------- */

#define PRPC_HDR 12 /* "PRPC", body_size, meta_size */

static uint8_t g_att[4000]; /* attachment bytes: a pattern (set in main) */

/* An echo request frame as a brpc client writes it: malloc'd, *len_p bytes. */
static uint8_t *echo_request_frame(int64_t id, const char *msg, const uint8_t *att, size_t alen,
                                   size_t *len_p)
{
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = (char *)msg;
    Brpc__Policy__RpcRequestMeta rm = BRPC__POLICY__RPC_REQUEST_META__INIT;
    rm.service_name = "example.EchoService";
    rm.method_name = "Echo";
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    meta.request = &rm;
    meta.has_correlation_id = 1;
    meta.correlation_id = id;
    meta.has_attachment_size = alen > 0;
    meta.attachment_size = (int32_t)alen;
    size_t ml = brpc__policy__rpc_meta__get_packed_size(&meta);
    size_t bl = example__echo_request__get_packed_size(&req);
    size_t n = PRPC_HDR + ml + bl + alen;
    uint8_t *p = malloc(n);
    if (!p) abort();
    memcpy(p, "PRPC", 4);
    jt_put_be32(p + 4, (uint32_t)(ml + bl + alen));
    jt_put_be32(p + 8, (uint32_t)ml);
    brpc__policy__rpc_meta__pack(&meta, p + PRPC_HDR);
    example__echo_request__pack(&req, p + PRPC_HDR + ml);
    if (alen) memcpy(p + PRPC_HDR + ml + bl, att, alen);
    *len_p = n;
    return p;
}

/* Bytes of the whole frame at the front of p[0..n), or 0 when incomplete. */
static size_t frame_len(const uint8_t *p, size_t n)
{
    if (n < PRPC_HDR) return 0;
    size_t whole = PRPC_HDR + (size_t)jt_get_be32(p + 4);
    return n >= whole ? whole : 0;
}

/* p[0..n) is exactly one echo response frame: no error, correlation id id,
 * message msg and attachment att[0..alen) byte for byte. */
static bool echo_response_ok(const uint8_t *p, size_t n, int64_t id, const char *msg,
                             const uint8_t *att, size_t alen)
{
    if (n < PRPC_HDR || memcmp(p, "PRPC", 4) != 0) return false;
    size_t body = jt_get_be32(p + 4), ml = jt_get_be32(p + 8);
    if (n != PRPC_HDR + body || ml > body) return false;
    Brpc__Policy__RpcMeta *m = brpc__policy__rpc_meta__unpack(NULL, ml, p + PRPC_HDR);
    bool ok = m && !m->request && (!m->response || m->response->error_code == 0) &&
              m->has_correlation_id && m->correlation_id == id;
    size_t a = m && m->has_attachment_size ? (size_t)m->attachment_size : 0;
    ok = ok && a == alen && a <= body - ml && (a == 0 || memcmp(p + n - a, att, a) == 0);
    Example__EchoResponse *r =
        ok ? example__echo_response__unpack(NULL, body - ml - a, p + PRPC_HDR + ml) : NULL;
    ok = ok && r && strcmp(r->message, msg) == 0;
    if (r) example__echo_response__free_unpacked(r, NULL);
    if (m) brpc__policy__rpc_meta__free_unpacked(m, NULL);
    return ok;
}

/* Reads one frame from a TCP socket into buf (cap bytes): its length, or 0. */
static size_t read_frame(int fd, uint8_t *buf, size_t cap)
{
    if (jt_read_n(fd, buf, PRPC_HDR, 10000) != PRPC_HDR) return 0;
    size_t body = jt_get_be32(buf + 4);
    if (body > cap - PRPC_HDR) return 0;
    if (jt_read_n(fd, buf + PRPC_HDR, body, 10000) != body) return 0;
    return PRPC_HDR + body;
}

/* ---- a brpc-like URMA client, by hand, against g_srv --------------------------- */

/* What PR #3428's client does (URMA-TRANSPORT.md §5.2, §9): a v2 hello with
 * no jetrpc extension (jet_caps 0), ACK 1, the server's jetty imported,
 * requests as plain SENDs of at most the server's buffer_size, every
 * receive re-posted and credited back as a zero-length SEND_IMM (imm = the
 * count, host order) once more than half of its window (rq - 3) is owed. It
 * advertises a buffer_size smaller than the receives it posts, so that a
 * data WR longer than advertised shows instead of being cut by softub. */
#define BC_RQ  64 /* receives posted; the hello says 63 */
#define BC_SQ  64
#define BC_BUF 8192        /* bytes each receive holds */
#define BC_ADV 1024        /* the buffer_size advertised: brpc's minimum */
#define BC_CAP (BC_RQ - 3) /* data WRs the server may have outstanding toward us */
/* Credits the server holds back toward us at most: half of BC_CAP, but a
 * peer whose hello does not say its SQ depth may have a window of only
 * min(16, rq) - 3 = 13 sends (brpc's smallest urma_sq_size), so they go once
 * 13 are owed. */
#define BC_SRV_BATCH 12

typedef struct bclient {
    const jet_urma_ctx_t *c;
    urma_jfc_t *jfc;
    urma_jfr_t *jfr;
    urma_jetty_t *jetty;
    jet_block_t *rbuf[BC_RQ];
    jet_block_t *sbuf[BC_SQ]; /* a send's bytes until its completion */
    int fd;
    urma_target_seg_t *tseg;
    urma_target_jetty_t *tjetty;
    jet_urma_hello_t srv; /* the server's hello */
    bool auto_credit;
    bool hold_recv;     /* receives are not posted again (held_recvs of them) */
    uint32_t held_recvs;
    int32_t window;  /* data WRs we may still send (the server's credits) */
    int32_t cap_out; /* the window at its fullest: min(our sq, server rq) - 3 */
    uint32_t sends_out, owed;
    uint64_t data_out, data_in, credited_out, credits_in, credit_msgs_in;
    uint32_t max_len; /* longest data WR from the server */
    uint32_t min_imm, max_imm;
    uint64_t max_outstanding; /* most server data WRs we had not credited back */
    uint32_t send_errors, recv_errors, bad_msgs, foreign, imm_data;
    bool stuck;  /* a wait ran out: the later ones fail at once */
    uint8_t *rx; /* the server's byte stream, not consumed yet */
    size_t rx_len, rx_cap;
} bclient_t;

static bool bc_queues(bclient_t *b)
{
    memset(b, 0, sizeof *b);
    b->fd = -1;
    b->min_imm = UINT32_MAX;
    b->c = jet__urma_ctx_get();
    if (!b->c) return false;
    const jet_urma_ctx_t *c = b->c;
    urma_jfc_cfg_t fc = {.depth = 4 * (BC_RQ + BC_SQ)};
    b->jfc = JET_URMA_FN(c, urma_create_jfc)(c->uctx, &fc);
    urma_jfr_cfg_t rc = {
        .depth = BC_RQ, .trans_mode = URMA_TM_RM, .max_sge = 1, .jfc = b->jfc, .min_rnr_timer = 1};
    b->jfr = b->jfc ? JET_URMA_FN(c, urma_create_jfr)(c->uctx, &rc) : NULL;
    if (!b->jfr) return false;
    urma_jetty_cfg_t jc;
    memset(&jc, 0, sizeof jc);
    jc.flag.bs.share_jfr = 1;
    jc.jfs_cfg.depth = BC_SQ;
    jc.jfs_cfg.trans_mode = URMA_TM_RM;
    jc.jfs_cfg.max_sge = 1;
    jc.jfs_cfg.rnr_retry = 7;
    jc.jfs_cfg.jfc = b->jfc;
    jc.shared.jfr = b->jfr;
    b->jetty = JET_URMA_FN(c, urma_create_jetty)(c->uctx, &jc);
    if (!b->jetty) return false;
    for (uint32_t i = 0; i < BC_RQ; i++) {
        b->rbuf[i] = jet__block_alloc(BC_BUF);
        if (!b->rbuf[i] || !b->rbuf[i]->region) return false;
        urma_sge_t sge = {.addr = (uint64_t)(uintptr_t)b->rbuf[i]->data,
                          .len = BC_BUF,
                          .tseg = b->rbuf[i]->region->reg};
        urma_jfr_wr_t wr = {.src = {.sge = &sge, .num_sge = 1}, .user_ctx = i};
        urma_jfr_wr_t *bad;
        if (JET_URMA_FN(c, urma_post_jfr_wr)(b->jfr, &wr, &bad) != URMA_SUCCESS) return false;
    }
    return true;
}

/* A WR of op toward the server's jetty, completion requested, nothing else
 * set. */
static void bc_wr_init(const bclient_t *b, urma_jfs_wr_t *wr, urma_opcode_t op, uint64_t user_ctx)
{
    memset(wr, 0, sizeof *wr);
    wr->opcode = op;
    wr->flag.bs.complete_enable = URMA_COMPLETE_ENABLE;
    wr->tjetty = b->tjetty;
    wr->user_ctx = user_ctx;
}

/* One WR toward the server's jetty: SEND or SEND_IMM, len bytes (0: no SGE). */
static bool bc_post(bclient_t *b, urma_opcode_t op, const void *data, size_t len, uint64_t imm)
{
    uint32_t slot = 0;
    while (slot < BC_SQ && b->sbuf[slot])
        slot++;
    if (slot == BC_SQ) return false;
    urma_sge_t sge = {0};
    urma_jfs_wr_t wr;
    bc_wr_init(b, &wr, op, slot);
    wr.send.imm_data = imm;
    if (len > 0) {
        jet_block_t *blk = jet__block_alloc(len);
        if (!blk || !blk->region || blk->cap < len) {
            if (blk) jet__block_unref(blk);
            return false;
        }
        memcpy(blk->data, data, len);
        b->sbuf[slot] = blk;
        sge = (urma_sge_t){
            .addr = (uint64_t)(uintptr_t)blk->data, .len = (uint32_t)len, .tseg = blk->region->reg};
        wr.send.src.sge = &sge;
        wr.send.src.num_sge = 1;
    } else {
        b->sbuf[slot] = (jet_block_t *)b; /* busy, nothing to free */
    }
    urma_jfs_wr_t *bad = NULL;
    if (JET_URMA_FN(b->c, urma_post_jetty_send_wr)(b->jetty, &wr, &bad) != URMA_SUCCESS) {
        if (len > 0) jet__block_unref(b->sbuf[slot]);
        b->sbuf[slot] = NULL;
        return false;
    }
    b->sends_out++;
    return true;
}

/* The server closed the connection (EOF now, without waiting). */
static bool bc_fd_closed(int fd)
{
    char c[256];
    ssize_t r = recv(fd, c, sizeof c, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

/* Returns what is owed (if anything) as brpc does: a zero-length SEND_IMM. */
static bool bc_credit(bclient_t *b)
{
    if (b->owed == 0) return true;
    if (!bc_post(b, URMA_OPC_SEND_IMM, NULL, 0, b->owed)) return false;
    b->credited_out += b->owed;
    b->owed = 0;
    return true;
}

static void bc_on_recv(bclient_t *b, const urma_cr_t *cr)
{
    uint32_t slot = (uint32_t)cr->user_ctx;
    if (slot >= BC_RQ) {
        b->recv_errors++;
        return;
    }
    jet_block_t *blk = b->rbuf[slot];
    uint32_t len = cr->completion_len;
    if (cr->status != URMA_CR_SUCCESS) {
        b->recv_errors++;
    } else {
        if (cr->remote_id.id != b->srv.jetty_id) b->foreign++;
        if (cr->opcode == URMA_CR_OPC_SEND_WITH_IMM && len == 0) {
            /* brpc refuses imm 0 (no credits) and imm over its window. */
            uint64_t imm = cr->imm_data;
            if (imm == 0 || imm > BC_CAP) b->bad_msgs++;
            b->credit_msgs_in++;
            b->credits_in += imm;
            b->window += (int32_t)(imm > BC_CAP ? 0 : imm);
            if (b->window > b->cap_out) b->bad_msgs++; /* more than it was owed */
            if (imm < b->min_imm) b->min_imm = (uint32_t)imm;
            if (imm > b->max_imm) b->max_imm = (uint32_t)(imm > UINT32_MAX ? UINT32_MAX : imm);
        } else if (len == 0 || len > BC_BUF) {
            b->bad_msgs++; /* brpc: EPROTO */
        } else {
            if (cr->opcode != URMA_CR_OPC_SEND) b->imm_data++;
            b->data_in++;
            b->owed++;
            if (len > b->max_len) b->max_len = len;
            if (b->data_in - b->credited_out > b->max_outstanding)
                b->max_outstanding = b->data_in - b->credited_out;
            if (b->rx_len + len > b->rx_cap) {
                b->rx_cap = (b->rx_len + len) * 2;
                b->rx = realloc(b->rx, b->rx_cap);
                if (!b->rx) abort();
            }
            memcpy(b->rx + b->rx_len, blk->data, len);
            b->rx_len += len;
        }
    }
    if (b->hold_recv) {
        b->held_recvs++;
        return;
    }
    urma_sge_t sge = {
        .addr = (uint64_t)(uintptr_t)blk->data, .len = BC_BUF, .tseg = blk->region->reg};
    urma_jfr_wr_t wr = {.src = {.sge = &sge, .num_sge = 1}, .user_ctx = slot};
    urma_jfr_wr_t *bad;
    if (JET_URMA_FN(b->c, urma_post_jfr_wr)(b->jfr, &wr, &bad) != URMA_SUCCESS) b->recv_errors++;
    if (b->auto_credit && b->owed > BC_CAP / 2) bc_credit(b);
}

#define BC_ONE_SIDED UINT64_MAX /* user_ctx of bc_one_sided's WR */

static void bc_on_cr(bclient_t *b, const urma_cr_t *cr)
{
    if (cr->flag.bs.s_r) {
        bc_on_recv(b, cr);
        return;
    }
    uint32_t slot = (uint32_t)cr->user_ctx;
    if (cr->status != URMA_CR_SUCCESS) b->send_errors++;
    if (slot < BC_SQ && b->sbuf[slot]) {
        if (b->sbuf[slot] != (jet_block_t *)b) jet__block_unref(b->sbuf[slot]);
        b->sbuf[slot] = NULL;
        b->sends_out--;
    }
}

/* Handles what completed; the number of completions. */
static int bc_poll(bclient_t *b)
{
    urma_cr_t cr[16];
    memset(cr, 0, sizeof cr);
    int n = JET_URMA_FN(b->c, urma_poll_jfc)(b->jfc, 16, cr);
    for (int i = 0; i < n; i++)
        bc_on_cr(b, &cr[i]);
    return n > 0 ? n : 0;
}

/* A READ (into local) or WRITE (from local) of len bytes at raddr in the
 * imported segment rseg, toward the server's jetty; its completion status,
 * or -1 when it could not be posted or did not complete. */
static int bc_one_sided(bclient_t *b, urma_opcode_t op, urma_target_seg_t *rseg, uint64_t raddr,
                        jet_block_t *local, uint32_t len)
{
    urma_sge_t lsge = {.addr = (uint64_t)(uintptr_t)local->data, .len = len,
                       .tseg = local->region->reg};
    urma_sge_t rsge = {.addr = raddr, .len = len, .tseg = rseg};
    urma_jfs_wr_t wr;
    bc_wr_init(b, &wr, op, BC_ONE_SIDED);
    if (op == URMA_OPC_READ) {
        wr.rw.src = (urma_sg_t){.sge = &rsge, .num_sge = 1};
        wr.rw.dst = (urma_sg_t){.sge = &lsge, .num_sge = 1};
    } else {
        wr.rw.src = (urma_sg_t){.sge = &lsge, .num_sge = 1};
        wr.rw.dst = (urma_sg_t){.sge = &rsge, .num_sge = 1};
    }
    urma_jfs_wr_t *bad = NULL;
    if (JET_URMA_FN(b->c, urma_post_jetty_send_wr)(b->jetty, &wr, &bad) != URMA_SUCCESS) return -1;
    int status = -1;
    JT_WAIT_EVERY(({
                      urma_cr_t cr[16];
                      memset(cr, 0, sizeof cr);
                      int n = JET_URMA_FN(b->c, urma_poll_jfc)(b->jfc, 16, cr);
                      for (int i = 0; i < n; i++) {
                          if (!cr[i].flag.bs.s_r && cr[i].user_ctx == BC_ONE_SIDED)
                              status = (int)cr[i].status;
                          else
                              bc_on_cr(b, &cr[i]);
                      }
                      status >= 0;
                  }),
                  10000000, 50);
    return status;
}

/* Polls until cond holds (bounded by a guard, never a timing assertion);
 * after one wait ran out, the client is stuck and every later one fails at
 * once, so that a broken server fails the test in one guard, not in one per
 * call. */
#define BC_UNTIL(b, cond)                                                                          \
    (!(b)->stuck &&                                                                                \
     (JT_WAIT_EVERY((bc_poll(b), (cond)), 10000000, 50) || ((b)->stuck = true, false)))

static void bc_close(bclient_t *b)
{
    const jet_urma_ctx_t *c = b->c;
    if (b->fd >= 0) close(b->fd);
    b->fd = -1;
    if (!c) return;
    /* Queues first: then nothing writes into or reads from the blocks. */
    if (b->jetty) JET_URMA_FN(c, urma_delete_jetty)(b->jetty);
    if (b->jfr) JET_URMA_FN(c, urma_delete_jfr)(b->jfr);
    if (b->jfc) JET_URMA_FN(c, urma_delete_jfc)(b->jfc);
    if (b->tjetty) JET_URMA_FN(c, urma_unimport_jetty)(b->tjetty);
    if (b->tseg) JET_URMA_FN(c, urma_unimport_seg)(b->tseg);
    for (int i = 0; i < BC_RQ; i++)
        if (b->rbuf[i]) jet__block_unref(b->rbuf[i]);
    for (int i = 0; i < BC_SQ; i++)
        if (b->sbuf[i] && b->sbuf[i] != (jet_block_t *)b) jet__block_unref(b->sbuf[i]);
    free(b->rx);
    memset(b, 0, sizeof *b);
    b->fd = -1;
}

/* ack: the ACK 1 goes at the end (else the caller sends it). tail: bytes
 * after the 86 of the v2 hello, counted in its msg_len (a later version's
 * fields, which a server reads and ignores). */
static bool bc_connect_tail(bclient_t *b, bool auto_credit, bool ack, size_t tail)
{
    if (!bc_queues(b)) return false;
    b->auto_credit = auto_credit;
    b->fd = jt_tcp_connect(g_port, 0);
    if (b->fd < 0) return false;
    jet_urma_hello_t h;
    fake_hello(2, &h);
    h.buffer_size = BC_ADV;
    h.recv_buffer_cnt = BC_RQ - 1;
    h.jetty_id = b->jetty->jetty_id.id;
    h.uasid = b->jetty->jetty_id.uasid;
    uint8_t buf[4200], ans[4200];
    size_t n = pack(&h, buf), alen;
    if (n != JET_URMA_V2_LEN || buf[43] != 0 || n + tail > JET_URMA_V2_MAX_LEN) return false;
    memset(buf + n, 0, tail);
    n += tail;
    buf[4] = (uint8_t)(n >> 8);
    buf[5] = (uint8_t)n;
    if (!jt_send_all(b->fd, buf, n)) return false;
    if (read_hello(b->fd, &b->srv, ans, &alen) != JET_URMA_HELLO_OK || b->srv.version != 2)
        return false;
    /* brpc's bytes only: the pad (43-45) zero, as brpc writes it. */
    if (alen < JET_URMA_V2_LEN || ans[43] || ans[44] || ans[45] || b->srv.jet_caps) return false;
    if (jet__urma_import_peer(b->c, &b->srv, "the server", NULL, &b->tseg, &b->tjetty) < 0)
        return false;
    uint32_t peer_rq = b->srv.recv_buffer_cnt + 1;
    b->window = b->cap_out = (int32_t)((BC_SQ < peer_rq ? BC_SQ : peer_rq) - 3);
    return !ack || jt_send_all(b->fd, "\x00\x00\x00\x01", 4);
}

static bool bc_connect(bclient_t *b, bool auto_credit, bool ack)
{
    return bc_connect_tail(b, auto_credit, ack, 0);
}

/* Connects to g_srv as brpc's client does; true when URMA is established
 * (else everything is undone). */
static bool bc_open(bclient_t *b, bool auto_credit)
{
    if (bc_connect(b, auto_credit, true)) return true;
    bc_close(b);
    return false;
}

/* Sends one echo request frame as one SEND, within brpc's windows. */
static bool bc_request(bclient_t *b, int64_t id, const char *msg, const uint8_t *att, size_t alen)
{
    size_t n;
    uint8_t *f = echo_request_frame(id, msg, att, alen, &n);
    bool ok = n <= b->srv.buffer_size && BC_UNTIL(b, b->window > 0 && b->sends_out < BC_SQ - 3) &&
              bc_post(b, URMA_OPC_SEND, f, n, 0);
    free(f);
    if (ok) {
        b->window--;
        b->data_out++;
    }
    return ok;
}

/* Waits for the next frame of the server's stream and checks it. */
static bool bc_response(bclient_t *b, int64_t id, const char *msg, const uint8_t *att, size_t alen)
{
    if (!BC_UNTIL(b, frame_len(b->rx, b->rx_len) > 0)) return false;
    size_t n = frame_len(b->rx, b->rx_len);
    bool ok = echo_response_ok(b->rx, n, id, msg, att, alen);
    memmove(b->rx, b->rx + n, b->rx_len - n);
    b->rx_len -= n;
    return ok;
}

static bool bc_call(bclient_t *b, int64_t id, const char *msg, const uint8_t *att, size_t alen)
{
    return bc_request(b, id, msg, att, alen) && bc_response(b, id, msg, att, alen);
}

/* rounds of per requests sent at once, then their answers checked: ids
 * base, base + 1, ..., messages "<prefix>-<id>", attachments of att bytes
 * (0: a length that varies with the id, under 4000). The answers that
 * came right. */
static int bc_rounds(bclient_t *b, int rounds, int per, int64_t base, const char *prefix,
                     size_t att)
{
    int ok = 0;
    char msg[32];
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < per; i++) {
            int64_t id = base + round * per + i;
            snprintf(msg, sizeof msg, "%s-%lld", prefix, (long long)id);
            if (!bc_request(b, id, msg, g_att, att ? att : (size_t)(id * 37) % 4000)) break;
        }
        for (int i = 0; i < per; i++) {
            int64_t id = base + round * per + i;
            snprintf(msg, sizeof msg, "%s-%lld", prefix, (long long)id);
            ok += bc_response(b, id, msg, g_att, att ? att : (size_t)(id * 37) % 4000);
        }
    }
    return ok;
}

/* Audit gap 2: an independent brpc-like peer on the URMA server's data path. */
static void test_server_brpc_client_datapath(void)
{
    uint64_t open0 = srv_open();
    bclient_t b;
    JT_REQUIRE(bc_open(&b, true));
    JT_CHECK_EQ(b.srv.buffer_size, jet__urma_recv_size());
    /* One call: the answer is byte-exact, in WRs no longer than advertised. */
    JT_CHECK(bc_call(&b, 1, "brpc", g_att, 3000));
    JT_CHECK(b.data_in >= 3);
    /* 120 more, 24 in flight at a time: 121 requests and some 300 answer WRs
     * are more than a window (61) each way, so they need both sides' credits. */
    JT_CHECK_EQ(bc_rounds(&b, 5, 24, 100, "brpc", 0), 120);
    JT_CHECK_EQ(b.data_out, 121);
    /* Credits: zero-length SEND_IMMs, imm a host-order count, sent once more
     * than BC_SRV_BATCH are owed; never more than we sent, and at most
     * BC_SRV_BATCH held back. */
    JT_CHECK(b.credit_msgs_in >= 2);
    JT_CHECK(b.min_imm > BC_SRV_BATCH && b.max_imm <= BC_CAP);
    JT_CHECK(b.credits_in <= b.data_out);
    JT_CHECK(BC_UNTIL(&b, b.data_out - b.credits_in <= BC_SRV_BATCH));
    /* Our window toward the server is min(its rq 128, our 64) - 3 = 61: with
     * our credits held back, it sends exactly that many data WRs and waits.
     * (The short settle only gives an overrun the chance to show.) */
    JT_CHECK(bc_credit(&b));
    b.auto_credit = false;
    uint64_t data0 = b.data_in;
    for (int i = 0; i < 20; i++)
        JT_CHECK(bc_request(&b, 1000 + i, "held", g_att, 4000));
    JT_CHECK(BC_UNTIL(&b, b.data_in - data0 >= BC_CAP));
    JT_WAIT_EVERY((bc_poll(&b), false), 50000, 50);
    JT_CHECK_EQ(b.data_in - data0, BC_CAP);
    JT_CHECK(bc_credit(&b));
    b.auto_credit = true;
    int ok = 0;
    for (int i = 0; i < 20; i++)
        ok += bc_response(&b, 1000 + i, "held", g_att, 4000);
    JT_CHECK_EQ(ok, 20);
    /* Its data: plain SENDs, each within our buffer_size, never more of them
     * uncredited than our window. */
    JT_CHECK(b.max_len > 0 && b.max_len <= BC_ADV);
    JT_CHECK(b.data_in > 121 * 2);
    JT_CHECK_EQ(b.max_outstanding, BC_CAP);
    JT_CHECK_EQ(b.imm_data, 0);
    JT_CHECK_EQ(b.bad_msgs, 0);
    JT_CHECK_EQ(b.foreign, 0);
    JT_CHECK_EQ(b.recv_errors + b.send_errors, 0);
    JT_CHECK_EQ(b.rx_len, 0);
    JT_CHECK_EQ(srv_open(), open0 + 1);
    bc_close(&b);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0, 10000000));
}

/* A server whose send queue is shallower than the brpc client's credit
 * threshold: brpc credits its receives back only once more than
 * (its rq - 3) / 2 = 30 are owed, whatever the sender's SQ depth. With
 * urma_sq_size 16 the server's SQ holds 13 data WRs; its window on the
 * client's receives is still 61 (the client's rq - 3), so it sends past the
 * threshold as its own sends complete, and the answers flow. (A window of
 * min(sq, peer rq) - 3 = 13, as brpc computes it, stalls here for good.) */
static void test_server_small_sq_brpc_client(void)
{
    uint64_t open0 = srv_open();
    char old[32];
    snprintf(old, sizeof old, "%lld", (long long)JET_FLAG(urma_sq_size));
    JT_REQUIRE(jet_flag_set("urma_sq_size", "16") == 0);
    bclient_t b;
    bool opened = bc_open(&b, true);
    JT_CHECK_EQ(jet_flag_set("urma_sq_size", old), 0);
    JT_REQUIRE(opened);
    /* 40 requests at once, each answered in 3 WRs (2500-byte attachments,
     * 1024-byte buffers advertised): 120 WRs toward the client. */
    JT_CHECK_EQ(bc_rounds(&b, 3, 40, 10, "sq", 2500), 120);
    /* Past the threshold, never past the credits. */
    JT_CHECK(b.max_outstanding > BC_CAP / 2);
    JT_CHECK(b.max_outstanding <= BC_CAP);
    JT_CHECK_EQ(b.bad_msgs + b.recv_errors + b.send_errors, 0);
    bc_close(&b);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0, 10000000));
}

/* brpc's RDMA case 26 (v2_server_drains_tail_then_reads_ack), URMA shape:
 * a v2 hello whose msg_len is longer than its 86 bytes (8 zero bytes more,
 * and the longest, 4096), then ACK 1. The server drains the tail (else it
 * would take 4 of its bytes for the ACK), answers with its hello, goes
 * URMA on the ACK, and an echo goes both ways over URMA. */
static void test_server_long_v2_hello_ack1(void)
{
    static const size_t tails[] = {8, JET_URMA_V2_MAX_LEN - JET_URMA_V2_LEN};
    uint64_t open0 = srv_open();
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        char w[32];
        snprintf(w, sizeof w, "msg_len %zu", JET_URMA_V2_LEN + tails[i]);
        ut_urma_mark_t m = ut_urma_mark();
        bclient_t b;
        bool up = bc_connect_tail(&b, true, true, tails[i]);
        JT_CHECK_AT(w, up);
        if (!up) {
            bc_close(&b);
            continue;
        }
        JT_CHECK_AT(w, b.srv.version == 2 && b.srv.jetty_id != 0);
        /* Request and answer over URMA: our jetty is the only way back. */
        JT_CHECK_AT(w, bc_call(&b, 1, "long hello", g_att, 3000));
        JT_CHECK_AT(w, bc_call(&b, 2, "long hello", g_att, 10));
        ut_urma_mark_t now = ut_urma_mark();
        /* The server's end attached once and took the requests over URMA. */
        JT_CHECK_AT(w, now.attaches - m.attaches == 1 && now.recv - m.recv >= 2);
        JT_CHECK_AT(w, srv_open() == open0 + 1);
        JT_CHECK_AT(w, b.recv_errors + b.send_errors + b.bad_msgs == 0 && b.rx_len == 0);
        bc_close(&b);
        JT_CHECK_AT(w, JT_WAIT_UNTIL(srv_open() == open0, 10000000));
    }
}

/* A peer gets the segment the server's hello advertises, which brpc peers
 * import, and nothing else of its memory: that segment holds no byte of any
 * connection, and the block pool the connections' bytes live in takes no
 * remote access (brpc's pool, registered with no token for remote read,
 * write and atomic access and advertised, takes them from any peer). */
static void test_server_memory_not_exposed(void)
{
    static const char marker[] = "jetrpc-private-9c41e7";
    uint64_t open0 = srv_open();
    bclient_t b;
    JT_REQUIRE(bc_open(&b, true));
    JT_CHECK(bc_call(&b, 1, marker, g_att, 3000));
    enum { CHUNK = 1 << 20 };
    jet_block_t *local = jet__block_alloc(CHUNK);
    JT_REQUIRE(local && local->region && local->cap >= CHUNK);
    /* The advertised segment reads and writes (brpc peers import it with
     * that access), and none of it is a connection's. */
    uint64_t va = b.srv.seg_va, len = b.srv.seg_len;
    JT_CHECK(len > 0 && len <= 64u << 20);
    bool seen = false;
    for (uint64_t off = 0; off < len; off += CHUNK) {
        uint32_t n = (uint32_t)(len - off < CHUNK ? len - off : CHUNK);
        memset(local->data, 0, n);
        JT_CHECK_EQ(bc_one_sided(&b, URMA_OPC_READ, b.tseg, va + off, local, n), URMA_CR_SUCCESS);
        seen |= memmem(local->data, n, marker, sizeof marker - 1) != NULL;
    }
    JT_CHECK(!seen);
    memset(local->data, 0xa5, CHUNK);
    uint32_t wlen = (uint32_t)(len < CHUNK ? len : CHUNK);
    JT_CHECK_EQ(bc_one_sided(&b, URMA_OPC_WRITE, b.tseg, va, local, wlen), URMA_CR_SUCCESS);
    JT_CHECK(bc_call(&b, 2, marker, g_att, 3000));
    /* The pool's regions refuse a peer that learnt one (here from the
     * process it shares with the server). The error moves that jetty to
     * ERROR: a connection of its own. */
    bclient_t p;
    JT_REQUIRE(bc_queues(&p));
    JT_REQUIRE(jet__urma_import_peer(p.c, &b.srv, "the server", NULL, &p.tseg, &p.tjetty) == 0);
    const jet_region_t *region = jet__block_pool_find(b.rbuf[0]->data);
    JT_REQUIRE(region && region->reg);
    const urma_target_seg_t *pool = region->reg;
    urma_token_t token = {0};
    urma_import_seg_flag_t sf = {.value = 0};
    sf.bs.cacheable = URMA_NON_CACHEABLE;
    sf.bs.access = URMA_ACCESS_READ | URMA_ACCESS_WRITE | URMA_ACCESS_ATOMIC;
    sf.bs.mapping = URMA_SEG_NOMAP;
    urma_seg_t seg = pool->seg;
    urma_target_seg_t *tpool = JET_URMA_FN(p.c, urma_import_seg)(p.c->uctx, &seg, &token, 0, sf);
    if (tpool) {
        int st = bc_one_sided(&p, URMA_OPC_READ, tpool, (uint64_t)(uintptr_t)region->base, local, 64);
        JT_CHECK(st != URMA_CR_SUCCESS && st != -1);
        JET_URMA_FN(p.c, urma_unimport_seg)(tpool);
    }
    bc_close(&p);
    JT_CHECK(bc_call(&b, 3, marker, g_att, 3000));
    JT_CHECK_EQ(b.recv_errors + b.send_errors + b.bad_msgs, 0);
    jet__block_unref(local);
    bc_close(&b);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0, 10000000));
}

/* Sends up to n echo requests (message "flood-<i>", ids from 2000, att
 * bytes of attachment) as fast as the window allows, until it stays empty
 * for 300 ms: how many went. */
static int bc_flood(bclient_t *b, int n, size_t att)
{
    int sent = 0;
    char msg[32];
    for (int64_t idle_since = (int64_t)jt_now_us();
         sent < n && (int64_t)jt_now_us() - idle_since < 300000;) {
        bc_poll(b);
        if (b->window <= 0 || b->sends_out >= BC_SQ - 3) continue;
        snprintf(msg, sizeof msg, "flood-%d", sent);
        size_t len;
        uint8_t *f = echo_request_frame(2000 + sent, msg, g_att, att, &len);
        bool posted = bc_post(b, URMA_OPC_SEND, f, len, 0);
        free(f);
        if (!posted) break;
        b->window--;
        b->data_out++;
        sent++;
        idle_since = (int64_t)jt_now_us();
    }
    return sent;
}

/* How many of the first n flood answers come, in order. */
static int bc_flood_answers(bclient_t *b, int n, size_t att)
{
    char msg[32];
    int ok = 0;
    for (; ok < n; ok++) {
        snprintf(msg, sizeof msg, "flood-%d", ok);
        if (!bc_response(b, 2000 + ok, msg, g_att, att)) break;
    }
    return ok;
}

/* brpc-like clients that send requests and return no credits for the
 * answers: a server's answers back up, and past socket_max_unwritten_bytes
 * (256 KiB here) it takes no more requests and returns no more credits, so
 * each client stops, its window spent (without that the server would take
 * and queue all it is sent). Credits returned, every answer comes, in
 * order. Ten at once, so that a loop's shared receive queue (256 buffers)
 * carries several paused connections: they keep back credits, not
 * buffers, else they would hold all of them and no message (the credits
 * that end the pause included) could land on that loop. */
static void test_server_unread_answers_bounded(void)
{
    enum { K = 10, N = 400, ATT = 4000 };
    uint64_t open0 = srv_open();
    static bclient_t bs[K];
    int sent[K];
    for (int k = 0; k < K; k++)
        JT_REQUIRE(bc_open(&bs[k], false));
    char old[32];
    snprintf(old, sizeof old, "%lld", (long long)JET_FLAG(socket_max_unwritten_bytes));
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", "262144"), 0);
    for (int k = 0; k < K; k++) {
        sent[k] = bc_flood(&bs[k], N, ATT);
        fprintf(stderr, "  connection %d: %d of %d requests sent while no answer was credited\n",
                k, sent[k], N);
        JT_CHECK(sent[k] < N / 2);
    }
    for (int k = 0; k < K; k++) {
        bs[k].auto_credit = true;
        JT_CHECK(bc_credit(&bs[k]));
    }
    for (int k = 0; k < K; k++) {
        JT_CHECK_EQ(bc_flood_answers(&bs[k], sent[k], ATT), sent[k]);
        JT_CHECK(bc_call(&bs[k], 5000, "after", g_att, ATT));
        JT_CHECK_EQ(bs[k].recv_errors + bs[k].send_errors + bs[k].bad_msgs, 0);
    }
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", old), 0);
    for (int k = 0; k < K; k++)
        bc_close(&bs[k]);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0, 10000000));
}

typedef enum bviolation {
    BV_OVER_CREDIT, /* a SEND_IMM returning one credit more than owed */
    BV_ZERO_SEND,   /* a zero-length plain SEND */
    BV_OVERSIZED,   /* a SEND longer than the server's buffer_size */
    BV_OVER_SEND,   /* data WRs beyond the credits the server granted */
} bviolation_t;

/* Each violation on a fresh connection closes that connection only. */
static void test_server_brpc_client_violations(void)
{
    static const char *const names[] = {"over-credit", "zero-length SEND", "oversized SEND",
                                        "data beyond the credits"};
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    ut_urma_mark_t m = ut_urma_mark();
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "ordinary"), 0);
    ut_expect_urma(m, 1, 2); /* in-process: the channel's and the server's ends */
    uint64_t open0 = srv_open();
    for (int v = BV_OVER_CREDIT; v <= BV_OVER_SEND; v++) {
        bclient_t b;
        bool up = bc_open(&b, false);
        JT_CHECK_AT(names[v], up);
        if (!up) continue;
        JT_CHECK_AT(names[v], bc_call(&b, 1, "before", g_att, 3000));
        uint64_t k = b.data_in; /* the server's window is short of k */
        JT_CHECK(k >= 3);
        static uint8_t big[BC_BUF + 1];
        switch ((bviolation_t)v) {
        case BV_OVER_CREDIT:
            /* Exactly what is owed is fine; one more than owed is not. */
            JT_CHECK(bc_post(&b, URMA_OPC_SEND_IMM, NULL, 0, k));
            JT_CHECK_AT(names[v], bc_call(&b, 2, "exact credits", g_att, 3000));
            JT_CHECK(bc_post(&b, URMA_OPC_SEND_IMM, NULL, 0, b.data_in - k + 1));
            break;
        case BV_ZERO_SEND:
            JT_CHECK(bc_post(&b, URMA_OPC_SEND, NULL, 0, 0));
            break;
        case BV_OVERSIZED:
            JT_CHECK_EQ(b.srv.buffer_size, BC_BUF);
            memset(big, 'x', sizeof big);
            JT_CHECK(bc_post(&b, URMA_OPC_SEND, big, sizeof big, 0));
            break;
        case BV_OVER_SEND: {
            /* The header of a 60 MiB request, then its body in full WRs
             * (at most 6000 of them: the frame never completes),
             * never waiting for credits and never posting a receive again.
             * What the server is owed grows past the 128 receives it
             * granted: within one of its polls, or at the latest once our 64
             * receives hold its credit messages and its next ones find no
             * buffer (it keeps 3 in flight). Its queue (its own, or its
             * loop's shared one) has room all along. */
            static const uint8_t hdr[12] = {'P', 'R', 'P', 'C', 0x03, 0xc0, 0, 0, 0, 0, 0, 16};
            b.hold_recv = true;
            JT_CHECK(bc_post(&b, URMA_OPC_SEND, hdr, sizeof hdr, 0));
            memset(big, 0, sizeof big);
            int posted = 0;
            bool eof = false;
            while (posted < 6000 && !(eof = bc_fd_closed(b.fd))) {
                if (bc_post(&b, URMA_OPC_SEND, big, b.srv.buffer_size, 0)) {
                    posted++;
                } else {
                    bc_poll(&b);
                }
            }
            fprintf(stderr, "  %d data WRs of %u bytes sent before the server closed (%u "
                            "receives held)\n",
                    posted, b.srv.buffer_size, b.held_recvs);
            JT_CHECK(eof);
            break;
        }
        }
        JT_CHECK_AT(names[v], jt_wait_eof(b.fd, 10000));
        JT_CHECK_AT(names[v], JT_WAIT_UNTIL(srv_open() == open0, 10000000));
        /* (A client that sent past its window gets back, as credits, all
         * the server consumed: more than a window, which brpc would refuse.) */
        JT_CHECK_AT(names[v], b.rx_len == 0 && (b.bad_msgs == 0 || v == BV_OVER_SEND));
        m = ut_urma_mark();
        JT_CHECK_AT(names[v], jt_echo_bytes(ch, 5000, (uint64_t)v + 2, "ordinary") == 0);
        ut_expect_urma(m, 1, 0);
        bc_close(&b);
    }
    jet_channel_destroy(ch);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0 - 1, 10000000));
}

/* Messages from a second jetty that imported the server's jetty but is not
 * the one the connection's hello named. The endpoint drops them (a recycled
 * jetty may still get late messages from its previous peer): a request is
 * not parsed or answered, credits and a zero-length SEND are not counted
 * (either would close the connection), and the real peer goes on. */
static void test_server_foreign_jetty(void)
{
    uint64_t open0 = srv_open();
    bclient_t b, f;
    JT_REQUIRE(bc_open(&b, false));
    JT_CHECK(bc_call(&b, 1, "before", g_att, 100));
    bool made = bc_queues(&f);
    f.srv = b.srv;
    JT_CHECK(made &&
             jet__urma_import_peer(f.c, &f.srv, "the server", NULL, &f.tseg, &f.tjetty) == 0);
    f.window = 1;
    JT_CHECK(bc_request(&f, 666, "foreign", g_att, 100));
    JT_CHECK(bc_post(&f, URMA_OPC_SEND_IMM, NULL, 0, 1000));
    JT_CHECK(bc_post(&f, URMA_OPC_SEND, NULL, 0, 0));
    /* Delivered (softub completes a SEND once it is in the receive). */
    JT_CHECK(BC_UNTIL(&f, f.sends_out == 0));
    JT_CHECK_EQ(f.send_errors, 0);
    /* The next frame the real peer sees answers its own next call: nothing
     * answered the foreign request before it (on the server's queue, the
     * foreign WRs came first). */
    JT_CHECK(bc_call(&b, 2, "after", g_att, 100));
    JT_CHECK(bc_call(&b, 3, "after", g_att, 3000));
    JT_CHECK_EQ(b.rx_len, 0);
    JT_CHECK_EQ(b.bad_msgs + b.foreign + b.recv_errors + b.send_errors, 0);
    JT_CHECK_EQ(f.data_in + f.credit_msgs_in + f.rx_len, 0);
    JT_CHECK_EQ(srv_open(), open0 + 1);
    bc_close(&f);
    bc_close(&b);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0, 10000000));
}

/* A client that imported the server may send before its ACK (brpc's client
 * sends the ACK and goes on at once: its first requests can come before the
 * ACK is read). The server keeps what comes unparsed until the ACK, and the
 * receives it took are not credited back meanwhile: a client that holds its
 * ACK back (here for 300 ms of a 10 s handshake deadline) sends one window,
 * no more, and the server holds at most that. After the ACK every request
 * is answered and the connection goes on. */
static void test_server_data_before_ack(void)
{
    uint64_t open0 = srv_open();
    bclient_t b;
    if (!bc_connect(&b, true, false)) {
        bc_close(&b);
        JT_REQUIRE(false);
    }
    int sent = 0;
    char msg[32];
    int64_t until = jt_now_ms() + 300;
    while (sent < 5000 && jt_now_ms() < until) {
        bc_poll(&b);
        if (b.window <= 0 || b.sends_out >= BC_SQ - 3) continue;
        size_t n;
        snprintf(msg, sizeof msg, "early-%d", sent);
        uint8_t *f = echo_request_frame(sent, msg, g_att, 100, &n);
        bool ok = bc_post(&b, URMA_OPC_SEND, f, n, 0);
        free(f);
        if (!ok) break;
        b.window--;
        b.data_out++;
        sent++;
    }
    fprintf(stderr, "  %d requests sent before the ACK (%llu credits back)\n", sent,
            (unsigned long long)b.credits_in);
    JT_CHECK_EQ(sent, BC_CAP);
    JT_CHECK_EQ(b.credits_in, 0);
    JT_CHECK(jt_send_all(b.fd, "\x00\x00\x00\x01", 4));
    int ok = 0;
    for (int i = 0; i < sent; i++) {
        snprintf(msg, sizeof msg, "early-%d", i);
        ok += bc_response(&b, i, msg, g_att, 100);
    }
    JT_CHECK_EQ(ok, sent);
    JT_CHECK(bc_call(&b, 100000, "after", g_att, 3000));
    JT_CHECK_EQ(b.recv_errors + b.send_errors + b.bad_msgs, 0);
    JT_CHECK_EQ(srv_open(), open0 + 1);
    bc_close(&b);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == open0, 10000000));
}

/* ---- audit gap 3: a jetrpc TCP-mode server declines URMA hellos ------------------ */

/* Reads until EOF: true when the peer closed without sending a byte. */
static bool eof_silent(int fd)
{
    uint8_t buf[256];
    size_t got = jt_read_n(fd, buf, sizeof buf, 10000);
    return got == 0 && jt_wait_eof(fd, 1000);
}

static void test_tcp_server_declines_urma(void)
{
    int port = 0;
    jet_server_t *ts = ut_server_start(JET_SOCKET_MODE_TCP, &port);
    JT_REQUIRE(ts);
    uint8_t h2[4200], h3[4200], hl[4200];
    jet_urma_hello_t h;
    fake_hello(2, &h); /* jet_caps 0: a brpc client's hello */
    size_t n2 = pack(&h, h2);
    memcpy(hl, h2, n2);
    memset(hl + n2, 0xee, 8);
    hl[4] = 0;
    hl[5] = 94;
    fake_hello(3, &h);
    size_t n3 = pack(&h, h3);
    uint8_t h3max[4200];
    memcpy(h3max, h3, n3);
    size_t n3max = pad_v3_to_max(h3max, n3);
    static const uint8_t ack0[4] = {0, 0, 0, 0}, ack1[4] = {0, 0, 0, 1};
    const struct {
        const char *what;
        const uint8_t *hello;
        size_t n;
        int version;
        const uint8_t *ack; /* sent in one write with the first request */
        bool served;
    } cases[] = {
        {"v2, ACK 0", h2, n2, 2, ack0, true},
        {"v2, no ACK (brpc)", h2, n2, 2, NULL, true},
        {"v2, ACK 1", h2, n2, 2, ack1, false},
        {"v3, ACK 0", h3, n3, 3, ack0, true},
        {"v3, no ACK (brpc)", h3, n3, 3, NULL, true},
        {"v2 msg_len 94, ACK 0", hl, n2 + 8, 2, ack0, true},
        {"v3 pb_size 4096, ACK 0", h3max, n3max, 3, ack0, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *w = cases[i].what;
        int fd = jt_tcp_connect(port, 0);
        JT_REQUIRE(fd >= 0);
        JT_CHECK_AT(w, jt_send_all(fd, cases[i].hello, cases[i].n));
        uint8_t ans[4200];
        size_t alen = 0;
        jet_urma_hello_t a;
        JT_CHECK_AT(w, read_hello(fd, &a, ans, &alen) == JET_URMA_HELLO_DECLINED);
        JT_CHECK_AT(w, a.version == cases[i].version);
        if (cases[i].version == 2)
            JT_CHECK_AT(w, alen == 86 && memcmp(ans, "URMA\x00\x56\x00\x00\x00\x00", 10) == 0);
        else
            JT_CHECK_AT(w, memcmp(ans, "URM3", 4) == 0 && jt_get_be32(ans + 4) + 8 == alen);
        /* The first request in one write with the ACK: exactly 4 bytes are the ACK. */
        size_t fl;
        uint8_t *req = echo_request_frame(1, "after hello", g_att, 2000, &fl);
        uint8_t *out = malloc(fl + 4);
        if (!out) abort();
        size_t off = cases[i].ack ? 4 : 0;
        if (off) memcpy(out, cases[i].ack, 4);
        memcpy(out + off, req, fl);
        free(req);
        JT_CHECK_AT(w, jt_send_all(fd, out, off + fl));
        free(out);
        if (!cases[i].served) {
            JT_CHECK_AT(w, eof_silent(fd));
            close(fd);
            continue;
        }
        static uint8_t resp[8192];
        size_t rl = read_frame(fd, resp, sizeof resp);
        JT_CHECK_AT(w, echo_response_ok(resp, rl, 1, "after hello", g_att, 2000));
        /* And it stays a plain TCP connection. */
        req = echo_request_frame(2, "again", g_att, 10, &fl);
        JT_CHECK_AT(w, jt_send_all(fd, req, fl));
        free(req);
        rl = read_frame(fd, resp, sizeof resp);
        JT_CHECK_AT(w, echo_response_ok(resp, rl, 2, "again", g_att, 10));
        close(fd);
    }
    jet_server_stats_t st;
    JT_CHECK(JT_WAIT_UNTIL((jet_server_get_stats(ts, &st), st.connections_open == 0), 10000000));
    jet_server_destroy(ts);
}

/* ---- brpc RDMA clients at a URMA-mode server -------------------------------------- */

/* An RDMA-mode brpc client's hellos (RDMA-TRANSPORT.md §3, §4): v2 is 40
 * bytes (block_size 8160, sq 128, rq 128, lid 0, gid zeros, qp_num 0x1234),
 * v2 long the same with msg_len 48 and 8 tail bytes; v3 is "RDM3", pb_size
 * 32 and an RdmaHello with the same fields. */
/* clang-format off */
static const uint8_t rdma_v2[48] = {
    'R', 'D', 'M', 'A',
    0x00, 0x28,             /* msg_len 40 */
    0x00, 0x02, 0x00, 0x01, /* hello_ver 2, impl_ver 1 */
    0x00, 0x00, 0x1f, 0xe0, /* block_size 8160 */
    0x00, 0x80, 0x00, 0x80, /* sq_size 128, rq_size 128 */
    0x00, 0x00,             /* lid 0 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* gid */
    0x00, 0x00, 0x12, 0x34, /* qp_num */
    0, 0, 0, 0, 0, 0, 0, 0, /* the tail of msg_len 48 */
};
static const uint8_t rdma_v3[40] = {
    'R', 'D', 'M', '3',
    0x00, 0x00, 0x00, 0x20, /* pb_size 32 */
    0x08, 0xe0, 0x3f,       /* 1 block_size 8160 */
    0x10, 0x80, 0x01,       /* 2 sq_size 128 */
    0x18, 0x80, 0x01,       /* 3 rq_size 128 */
    0x20, 0x00,             /* 4 lid 0 */
    0x2a, 0x10,             /* 5 gid, 16 bytes */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x30, 0xb4, 0x24,       /* 6 qp_num 0x1234 */
};
/* What every brpc server not in RDMA mode answers (§3.3, §4.3): v2 "RDMA",
 * msg_len 40, hello_ver 0xffff, zeros; v3 "RDM3" and an RdmaHello of zeros. */
static const uint8_t rdma_v2_answer[40] = {'R', 'D', 'M', 'A', 0x00, 0x28, 0xff, 0xff};
static const uint8_t rdma_v3_answer[36] = {
    'R', 'D', 'M', '3',
    0x00, 0x00, 0x00, 0x1c,
    0x08, 0x00, 0x10, 0x00, 0x18, 0x00, 0x20, 0x00,
    0x2a, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0x30, 0x00,
};
/* clang-format on */

/* How a case writes: the hello whole and the ACK alone, as brpc's client
 * does; the ACK in one write with the first request; the hello a byte at a
 * time. */
typedef enum rdma_write { RW_PLAIN, RW_TOGETHER, RW_BYTEWISE } rdma_write_t;

/* brpc's RDMA client against a server on port: the hello (n bytes), the
 * answer it gets (into ans, alen bytes expected), ACK 0, then two echoes on
 * that connection. True when all of it went as with a brpc TCP server. */
static bool rdma_client_served(int port, const char *w, const uint8_t *hello, size_t n,
                               uint8_t *ans, size_t alen, rdma_write_t how)
{
    int fd = jt_tcp_connect(port, 0);
    if (fd < 0) return false;
    bool ok = true;
    for (size_t i = 0; ok && i < n; i += how == RW_BYTEWISE ? 1 : n) {
        ok = jt_send_all(fd, hello + i, how == RW_BYTEWISE ? 1 : n);
        if (how == RW_BYTEWISE) usleep(1000);
    }
    JT_CHECK_AT(w, ok);
    ok = ok && jt_read_n(fd, ans, alen, 10000) == alen;
    JT_CHECK_AT(w, ok);
    size_t fl;
    uint8_t *req = echo_request_frame(31, "rdma client", g_att, 1500, &fl);
    uint8_t *out = malloc(fl + 4);
    if (!out) abort();
    memset(out, 0, 4);
    memcpy(out + 4, req, fl);
    free(req);
    if (how == RW_TOGETHER) {
        ok = ok && jt_send_all(fd, out, fl + 4);
    } else {
        ok = ok && jt_send_all(fd, out, 4);
        usleep(20000); /* the ACK alone first, as brpc's client writes it */
        ok = ok && jt_send_all(fd, out + 4, fl);
    }
    free(out);
    static uint8_t resp[8192];
    size_t rl = ok ? read_frame(fd, resp, sizeof resp) : 0;
    JT_CHECK_AT(w, rl > 0 && echo_response_ok(resp, rl, 31, "rdma client", g_att, 1500));
    ok = ok && rl > 0;
    req = echo_request_frame(32, "again", g_att, 10, &fl);
    ok = ok && jt_send_all(fd, req, fl);
    free(req);
    rl = ok ? read_frame(fd, resp, sizeof resp) : 0;
    JT_CHECK_AT(w, rl > 0 && echo_response_ok(resp, rl, 32, "again", g_att, 10));
    close(fd);
    return ok && rl > 0;
}

/* brpc's RDMA clients (v2 and v3) at a URMA-mode server get the answer a
 * TCP-mode server gives them, byte for byte, and after ACK 0 their requests
 * are served on that connection; no URMA set is taken for them. */
static void test_server_rdma_hellos(void)
{
    int tport = 0;
    jet_server_t *ts = ut_server_start(JET_SOCKET_MODE_TCP, &tport);
    JT_REQUIRE(ts);
    uint8_t rdma_v2_long[48];
    memcpy(rdma_v2_long, rdma_v2, 48);
    rdma_v2_long[5] = 48;
    const struct {
        const char *what;
        const uint8_t *hello, *answer;
        size_t n, alen;
        rdma_write_t how;
    } cases[] = {
        {"v2", rdma_v2, rdma_v2_answer, 40, 40, RW_PLAIN},
        {"v2, ACK and request in one write", rdma_v2, rdma_v2_answer, 40, 40, RW_TOGETHER},
        {"v2, byte by byte", rdma_v2, rdma_v2_answer, 40, 40, RW_BYTEWISE},
        {"v2 msg_len 48", rdma_v2_long, rdma_v2_answer, 48, 40, RW_PLAIN},
        {"v3", rdma_v3, rdma_v3_answer, sizeof rdma_v3, sizeof rdma_v3_answer, RW_PLAIN},
        {"v3, ACK and request in one write", rdma_v3, rdma_v3_answer, sizeof rdma_v3,
         sizeof rdma_v3_answer, RW_TOGETHER},
        {"v3, byte by byte", rdma_v3, rdma_v3_answer, sizeof rdma_v3, sizeof rdma_v3_answer,
         RW_BYTEWISE},
    };
    JT_WAIT_UNTIL(srv_open() == 0, 10000000);
    jet_urma_loop_stats_t before = ut_urma_totals(NULL);
    uint64_t accepted0 = srv_accepted();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *w = cases[i].what;
        uint8_t at_tcp[64], at_urma[64];
        memset(at_tcp, 0xaa, sizeof at_tcp);
        memset(at_urma, 0x55, sizeof at_urma);
        JT_CHECK_AT(w, rdma_client_served(tport, w, cases[i].hello, cases[i].n, at_tcp,
                                          cases[i].alen, cases[i].how));
        JT_CHECK_AT(w, rdma_client_served(g_port, w, cases[i].hello, cases[i].n, at_urma,
                                          cases[i].alen, cases[i].how));
        JT_CHECK_AT(w, memcmp(at_tcp, cases[i].answer, cases[i].alen) == 0);
        JT_CHECK_AT(w, memcmp(at_urma, at_tcp, cases[i].alen) == 0);
    }
    JT_CHECK_EQ(srv_accepted(), accepted0 + sizeof cases / sizeof cases[0]);
    JT_CHECK(JT_WAIT_UNTIL(srv_open() == 0, 10000000));
    jet_urma_loop_stats_t st = ut_urma_totals(NULL);
    JT_CHECK_EQ(st.attaches, before.attaches);
    JT_CHECK_EQ(st.endpoints, before.endpoints);
    jet_server_stats_t tst;
    JT_CHECK(JT_WAIT_UNTIL((jet_server_get_stats(ts, &tst), tst.connections_open == 0), 10000000));
    jet_server_destroy(ts);
}

/* ---- audit gap 9: a full hello, then the client goes before its ACK ----------------- */

static void test_server_hello_then_close(void)
{
    jet_urma_loop_stats_t st;
    /* Earlier connections finish draining first (not asserted here). */
    JT_WAIT_UNTIL(srv_open() == 0 && (st = ut_urma_totals(NULL), st.endpoints == 0), 10000000);
    for (int v = 2; v <= 3; v++) {
        for (int answered = 1; answered >= 0; answered--) {
            const char *w = answered ? "answered, then closed" : "closed at once";
            uint64_t open0 = srv_open(), accepted0 = srv_accepted();
            jet_urma_loop_stats_t before = ut_urma_totals(NULL);
            uint8_t b[4200];
            jet_urma_hello_t h;
            fake_hello(v, &h);
            size_t n = pack(&h, b);
            int fd = jt_tcp_connect(g_port, 0);
            JT_REQUIRE(fd >= 0);
            JT_CHECK_AT(w, jt_send_all(fd, b, n));
            if (answered) {
                /* The server took a set, imported our jetty and said yes. */
                uint8_t ans[4200];
                size_t alen;
                jet_urma_hello_t a;
                JT_CHECK_AT(w, read_hello(fd, &a, ans, &alen) == JET_URMA_HELLO_OK);
                st = ut_urma_totals(NULL);
                JT_CHECK_AT(w, st.endpoints == before.endpoints + 1);
                JT_CHECK_AT(w, st.jfc_used > before.jfc_used);
            }
            close(fd);
            /* Not before the server has seen the connection at all. */
            JT_CHECK_AT(w, JT_WAIT_UNTIL(srv_accepted() == accepted0 + 1, 10000000));
            JT_CHECK_AT(w, JT_WAIT_UNTIL(srv_open() == open0, 10000000));
            JT_CHECK_AT(
                w, JT_WAIT_UNTIL((st = ut_urma_totals(NULL), st.endpoints == before.endpoints &&
                                                                 st.jfc_used == before.jfc_used),
                                 10000000));
        }
    }
}

/* ---- fake server <- URMA client ---------------------------------------------------- */

typedef enum sscript {
    SS_SILENT,
    SS_CLOSE,
    SS_GARBAGE,
    SS_HALF_MAGIC_SILENT,
    SS_HALF_MAGIC_CLOSE,
    SS_HALF_HELLO_SILENT,
    SS_HALF_HELLO_CLOSE,
    SS_BAD_LEN_35,
    SS_BAD_LEN_4097,
    SS_V3_PB_0,
    SS_V3_GARBAGE,
    SS_DECLINE,
    SS_VALID,
    SS_VALID_THEN_CLOSE,
    SS_VALID_THEN_TCP_BYTE,
    SS_MIRROR,
    SS_MIRROR_BRPC, /* SS_MIRROR without jetrpc's caps, as a brpc server's hello;
                       a plain TCP connection then goes to sa->real_port */
    SS_BAD_FIELD,   /* valid versions, field sa->bad out of range; after the ACK the
                       TCP server at sa->real_port serves the connection */
} sscript_t;

/* The fields a client checks in the server's hello (brpc's ValidHello). */
typedef enum bad_field {
    BF_RECV_CNT_2,
    BF_RECV_CNT_65536,
    BF_BUFFER_1023,
    BF_JETTY_0,
    BF_TP_UTP,
    BF_SEG_VA_0,
    BF_SEG_LEN_0,
    BF_COUNT
} bad_field_t;

static const char *const bad_field_names[BF_COUNT] = {"recv_buffer_cnt 2", "recv_buffer_cnt 65536",
                                                      "buffer_size 1023",  "jetty_id 0",
                                                      "tp_type 2 (UTP)",   "seg_va 0",
                                                      "seg_len 0"};

static void bad_field_set(jet_urma_hello_t *h, bad_field_t bad)
{
    switch (bad) {
    case BF_RECV_CNT_2:
        h->recv_buffer_cnt = 2;
        break;
    case BF_RECV_CNT_65536:
        h->recv_buffer_cnt = 65536;
        break;
    case BF_BUFFER_1023:
        h->buffer_size = 1023;
        break;
    case BF_JETTY_0:
        h->jetty_id = 0;
        break;
    case BF_TP_UTP:
        h->tp_type = 2;
        break;
    case BF_SEG_VA_0:
        h->seg_va = 0;
        break;
    case BF_SEG_LEN_0:
        h->seg_len = 0;
        break;
    case BF_COUNT:
        break;
    }
}

typedef struct sarg {
    sscript_t sc;
    bad_field_t bad;
    int real_port;
    _Atomic int hellos, ack;
    _Atomic int done;
    uint8_t hello[4200];
    size_t hello_len;
} sarg_t;

static void server_fn(int fd, int index, void *arg)
{
    sarg_t *sa = arg;
    jet_urma_hello_t h;
    size_t len;
    uint8_t raw[sizeof sa->hello];
    jet_urma_hello_result_t r = read_hello(fd, &h, raw, &len);
    if (r == JET_URMA_HELLO_NOT_HELLO && sa->real_port) {
        /* A client on TCP: its first 8 bytes, then the rest, to the real
         * server. */
        int up = jt_tcp_connect(sa->real_port, 0);
        if (up >= 0 && jt_send_all(up, raw, 8)) {
            jt_pump(fd, up, 0);
        } else {
            if (up >= 0) close(up);
            close(fd);
        }
        return;
    }
    if (r != JET_URMA_HELLO_OK) {
        close(fd);
        return;
    }
    if (index == 0) { /* the first connection's hello; a retry's runs in another thread */
        memcpy(sa->hello, raw, len);
        sa->hello_len = len;
    }
    atomic_fetch_add(&sa->hellos, 1);
    uint8_t b[4200];
    size_t n = 0;
    jet_urma_hello_t mine;
    fake_hello(h.version, &mine);
    switch (sa->sc) {
    case SS_SILENT:
        break;
    case SS_CLOSE:
        close(fd);
        atomic_store(&sa->done, 1);
        return;
    case SS_GARBAGE:
        jt_send_all(fd, "ABCDEFGH", 8);
        break;
    case SS_HALF_MAGIC_SILENT:
    case SS_HALF_MAGIC_CLOSE:
        jt_send_all(fd, "UR", 2);
        break;
    case SS_HALF_HELLO_SILENT:
    case SS_HALF_HELLO_CLOSE:
        n = pack(&mine, b);
        jt_send_all(fd, b, 6);
        break;
    case SS_BAD_LEN_35:
    case SS_BAD_LEN_4097:
        mine.version = 2;
        n = pack(&mine, b);
        b[4] = sa->sc == SS_BAD_LEN_35 ? 0 : 0x10;
        b[5] = sa->sc == SS_BAD_LEN_35 ? 35 : 0x01;
        jt_send_all(fd, b, n);
        break;
    case SS_V3_PB_0:
        jt_send_all(fd, "URM3\0\0\0\0", 8);
        break;
    case SS_V3_GARBAGE:
        jt_send_all(fd, "URM3\0\0\0\x04\xff\xff\xff\xff", 12);
        break;
    case SS_DECLINE: {
        int k = jet__urma_hello_pack_decline(h.version, b, sizeof b);
        jt_send_all(fd, b, (size_t)k);
        break;
    }
    case SS_VALID:
    case SS_VALID_THEN_CLOSE:
    case SS_VALID_THEN_TCP_BYTE:
        n = pack(&mine, b);
        jt_send_all(fd, b, n);
        break;
    case SS_MIRROR:
    case SS_MIRROR_BRPC:
        /* The client's own hello back: its EID and jetty id. */
        if (sa->sc == SS_MIRROR_BRPC) h.jet_caps = 0, h.jet_sq = 0;
        n = pack(&h, b);
        jt_send_all(fd, b, n);
        break;
    case SS_BAD_FIELD: {
        /* Otherwise importable (the fake jetty): a client that missed the
         * bad field would import it and answer ACK 1. */
        bad_field_set(&mine, sa->bad);
        n = pack(&mine, b);
        uint8_t ack[4];
        int up = -1;
        if (n > 0 && jt_send_all(fd, b, n) && jt_read_n(fd, ack, 4, 5000) == 4) {
            atomic_store(&sa->ack, (int)jet__urma_ack_parse(ack) + 1);
            up = jt_tcp_connect(sa->real_port, 0);
        }
        if (up >= 0) {
            jt_pump(fd, up, 0);
        } else {
            close(fd);
        }
        atomic_store(&sa->done, 1);
        return;
    }
    }
    if (sa->sc == SS_DECLINE || sa->sc == SS_VALID || sa->sc == SS_VALID_THEN_CLOSE ||
        sa->sc == SS_VALID_THEN_TCP_BYTE || sa->sc == SS_MIRROR || sa->sc == SS_MIRROR_BRPC) {
        uint8_t ack[4];
        if (jt_read_n(fd, ack, 4, 5000) == 4)
            atomic_store(&sa->ack, (int)jet__urma_ack_parse(ack) + 1);
        usleep(100000);
        if (sa->sc == SS_VALID_THEN_CLOSE) {
            close(fd);
            atomic_store(&sa->done, 1);
            return;
        }
        if (sa->sc == SS_VALID_THEN_TCP_BYTE) jt_send_all(fd, "z", 1);
    }
    if (sa->sc == SS_HALF_MAGIC_CLOSE || sa->sc == SS_HALF_HELLO_CLOSE) {
        usleep(50000);
        close(fd);
        atomic_store(&sa->done, 1);
        return;
    }
    /* Silent until the client goes. */
    jt_wait_eof(fd, 20000);
    close(fd);
    atomic_store(&sa->done, 1);
}

/* The channels' connect_timeout_ms in client_run: long, so that the call's
 * deadline is what ends a silent handshake; -2 (the default): the call's
 * timeout, the two timers firing together. */
static int32_t g_connect_timeout_ms = 60000;

/* One call from a URMA client to a fake server playing sa->sc; its error
 * code. */
static int client_run(sarg_t *sa, int32_t timeout_ms)
{
    jt_fake_t f;
    jt_fake_start(&f, server_fn, sa);
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_URMA;
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = g_connect_timeout_ms;
    o.max_retry = 0;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", f.port);
    jet_channel_t *ch = NULL;
    int rc = jet_channel_create(addr, &o, &ch);
    if (rc == 0) {
        rc = jt_echo_bytes(ch, 100, 1, "fake");
        jet_channel_destroy(ch);
    }
    jt_wait_at_least(&sa->done, 1, 30000000);
    jt_fake_stop(&f);
    return rc;
}

static int client_against(sscript_t sc, sarg_t *sa, int32_t timeout_ms)
{
    memset(sa, 0, sizeof *sa);
    sa->sc = sc;
    return client_run(sa, timeout_ms);
}

/* brpc's RDMA case 20 (server_hello_invalid_sq_rq_size), URMA shape: the
 * server's hello has valid versions but a field out of range. The client
 * does not import it, answers ACK 0 (brpc's URMA client sends none, which a
 * server waiting for the ACK misreads: URMA-TRANSPORT.md D3) and its call
 * completes over TCP on that connection, v2 and v3. */
static void test_client_invalid_server_hello(void)
{
    int real = 0;
    jet_server_t *ts = ut_server_start(JET_SOCKET_MODE_TCP, &real);
    JT_REQUIRE(ts);
    for (int v = 2; v <= 3; v++) {
        jet_flag_set("urma_client_handshake_version", v == 3 ? "3" : "2");
        for (int k = 0; k < BF_COUNT; k++) {
            char w[64];
            snprintf(w, sizeof w, "v%d %s", v, bad_field_names[k]);
            sarg_t sa;
            memset(&sa, 0, sizeof sa);
            sa.sc = SS_BAD_FIELD;
            sa.bad = (bad_field_t)k;
            sa.real_port = real;
            ut_urma_mark_t m = ut_urma_mark();
            JT_CHECK_AT(w, client_run(&sa, 5000) == 0);
            JT_CHECK_AT(w, atomic_load(&sa.hellos) == 1); /* one connection, no retry */
            JT_CHECK_AT(w, atomic_load(&sa.ack) == 0 + 1);
            ut_urma_mark_t now = ut_urma_mark();
            JT_CHECK_AT(w, now.attaches - m.attaches == 1 && now.recv == m.recv);
        }
    }
    jet_flag_set("urma_client_handshake_version", "2");
    jet_server_stats_t st;
    jet_server_get_stats(ts, &st);
    JT_CHECK_EQ(st.connections_accepted, 2 * BF_COUNT);
    JT_CHECK_EQ(st.requests_failed, 0);
    jet_server_destroy(ts);
}

static void test_client_against_broken_servers(void)
{
    sarg_t sa;
    JT_CHECK_EQ(client_against(SS_SILENT, &sa, 300), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(client_against(SS_CLOSE, &sa, 5000), JET_EEOF); /* the TCP retry closes too */
    JT_CHECK_EQ(atomic_load(&sa.hellos), 1);
    JT_CHECK_EQ(client_against(SS_HALF_MAGIC_SILENT, &sa, 300), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(client_against(SS_HALF_MAGIC_CLOSE, &sa, 5000), JET_EEOF);
    JT_CHECK_EQ(client_against(SS_HALF_HELLO_SILENT, &sa, 300), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(client_against(SS_HALF_HELLO_CLOSE, &sa, 5000), JET_EEOF);

    /* A server that answers the hello with garbage or a broken frame does
     * not speak URMA: that connection closes and the call goes again over
     * TCP, which the fake passes on to a real TCP server (before, the call
     * failed with EPROTO, and so did every later one). */
    static const struct {
        sscript_t sc;
        const char *name;
    } broken[] = {{SS_GARBAGE, "garbage"},
                  {SS_BAD_LEN_35, "msg_len 35"},
                  {SS_BAD_LEN_4097, "msg_len 4097"},
                  {SS_V3_PB_0, "v3, empty protobuf"},
                  {SS_V3_GARBAGE, "v3, garbage protobuf"}};
    int real = 0;
    jet_server_t *ts = ut_server_start(JET_SOCKET_MODE_TCP, &real);
    JT_REQUIRE(ts);
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        memset(&sa, 0, sizeof sa);
        sa.sc = broken[i].sc;
        sa.real_port = real;
        JT_CHECK_AT(broken[i].name, client_run(&sa, 5000) == 0);
        JT_CHECK_AT(broken[i].name, atomic_load(&sa.hellos) == 1);
    }
    jet_server_stats_t st;
    jet_server_get_stats(ts, &st);
    JT_CHECK_EQ(st.connections_accepted, sizeof broken / sizeof broken[0]);
    JT_CHECK_EQ(st.requests_failed, 0);
    jet_server_destroy(ts);
}

/* A silent server with the default connect_timeout_ms (the call's
 * timeout): whichever of the connection's hello timer and the call's
 * deadline fires first, the call ends with ERPCTIMEDOUT (it ended with the
 * connection's ETIMEDOUT when that timer came first, about one time in
 * two; helper-121). */
static void test_silent_server_default_connect_timeout(void)
{
    sarg_t sa;
    g_connect_timeout_ms = -2;
    for (int i = 0; i < 5; i++)
        JT_CHECK_EQ(client_against(i % 2 ? SS_HALF_HELLO_SILENT : SS_SILENT, &sa, 200),
                    JET_ERPCTIMEDOUT);
    g_connect_timeout_ms = 60000;
}

static void test_client_hello_bytes(void)
{
    sarg_t sa;
    for (int v = 2; v <= 3; v++) {
        jet_flag_set("urma_client_handshake_version", v == 3 ? "3" : "2");
        client_against(SS_SILENT, &sa, 200);
        jet_urma_hello_t h;
        size_t used;
        JT_REQUIRE(jet__urma_hello_parse(sa.hello, sa.hello_len, &h, &used) == JET_URMA_HELLO_OK);
        JT_CHECK_EQ(h.version, v);
        if (v == 2) {
            JT_CHECK_EQ(sa.hello_len, 86);
            JT_CHECK(memcmp(sa.hello,
                            "URMA\x00\x56\x00\x02\x00\x01\x00\x00\x20\x00\x00\x00\x00\x7f",
                            18) == 0);
            JT_CHECK_EQ(sa.hello[42], 1);             /* CTP */
            JT_CHECK_EQ(sa.hello[43], JET_URMA_CAPS); /* jetrpc's pad byte */
            JT_CHECK(sa.hello[44] == 0 && sa.hello[45] == 128);
        } else {
            JT_CHECK(memcmp(sa.hello, "URM3", 4) == 0);
            JT_CHECK_EQ(jt_get_be32(sa.hello + 4) + 8, sa.hello_len);
        }
        JT_CHECK_EQ(h.buffer_size, jet__urma_recv_size());
        JT_CHECK_EQ(h.recv_buffer_cnt, (uint32_t)JET_FLAG(urma_rq_size) - 1);
        JT_CHECK(h.jetty_id != 0 && h.seg_va != 0 && h.seg_len != 0);
        JT_CHECK(memcmp(h.eid, fj.c->uctx->eid.raw, 16) == 0);
        JT_CHECK_EQ(h.jet_sq, 128);
    }
    jet_flag_set("urma_client_handshake_version", "2");
}

/* The deadline of the calls the fake server never answers: it ends them
 * after the hello and the ACK, which a loaded machine (a sanitizer build
 * next to other tests) can take some hundreds of milliseconds to finish. */
#define ACK_CASE_MS 2000

static void test_client_ack_rules(void)
{
    sarg_t sa;
    /* A declining hello: ACK 0 (the fake then ignores the request). */
    JT_CHECK_EQ(client_against(SS_DECLINE, &sa, ACK_CASE_MS), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(atomic_load(&sa.ack), 0 + 1);
    /* A valid hello: ACK 1, and the request comes over URMA to our jetty. */
    urma_cr_t cr[8];
    while (JET_URMA_FN(fj.c, urma_poll_jfc)(fj.jfc, 8, cr) > 0) {
    }
    JT_CHECK_EQ(client_against(SS_VALID, &sa, ACK_CASE_MS), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(atomic_load(&sa.ack), 1 + 1);
    memset(cr, 0, sizeof cr);
    int n = JET_URMA_FN(fj.c, urma_poll_jfc)(fj.jfc, 8, cr);
    JT_CHECK(n >= 1);
    bool prpc = false;
    for (int i = 0; i < n; i++)
        if (cr[i].status == URMA_CR_SUCCESS && cr[i].flag.bs.s_r && cr[i].completion_len >= 12 &&
            memcmp(fj.buf[cr[i].user_ctx & 7]->data, "PRPC", 4) == 0)
            prpc = true;
    JT_CHECK(prpc);
    /* The server closes TCP after the ACK: the call fails at once (EEOF),
     * not at its deadline. */
    int64_t t0 = jt_now_ms();
    JT_CHECK_EQ(client_against(SS_VALID_THEN_CLOSE, &sa, 20000), JET_EEOF);
    JT_CHECK(jt_now_ms() - t0 < 15000);
    /* TCP bytes after the ACK: EPROTO. */
    JT_CHECK_EQ(client_against(SS_VALID_THEN_TCP_BYTE, &sa, 20000), EPROTO);
    /* A hello naming the client's own jetty (a server on another fabric):
     * ACK 0 and TCP (the fake ignores the request). Imported, the request
     * would come back to the client as its own answer: a call that
     * "succeeds" with no server. */
    JT_CHECK_EQ(client_against(SS_MIRROR, &sa, ACK_CASE_MS), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(atomic_load(&sa.ack), 0 + 1);
    /* The same from a server without jetrpc's caps (brpc, whose own clients
     * never send ACK 0): no ACK, the connection closed, and the call goes
     * again over a new TCP connection (max_retry 0: not counted). */
    int real = 0;
    jet_server_t *ts = ut_server_start(JET_SOCKET_MODE_TCP, &real);
    JT_REQUIRE(ts);
    memset(&sa, 0, sizeof sa);
    sa.sc = SS_MIRROR_BRPC;
    sa.real_port = real;
    JT_CHECK_EQ(client_run(&sa, 5000), 0);
    JT_CHECK_EQ(atomic_load(&sa.hellos), 1);
    JT_CHECK_EQ(atomic_load(&sa.ack), 0); /* none read: EOF */
    jet_server_stats_t st;
    jet_server_get_stats(ts, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    jet_server_destroy(ts);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "hello");
    /* brpc's receive queue (128 buffers of 8 KiB): the bytes checked below
     * are those of a hello brpc's defaults produce. */
    jet_flag_set("urma_recv_block_size", "8192");
    jet_flag_set("urma_rq_size", "128");
    jt_fill_pattern(g_att, sizeof g_att, 7);
    g_srv = ut_server_start(JET_SOCKET_MODE_URMA, &g_port);
    if (!g_srv || !fake_jetty_create()) {
        fprintf(stderr, "cannot set up: URMA over softub unavailable\n");
        return 1;
    }
    JT_RUN(test_server_valid_hello_then_ack0);
    JT_RUN(test_server_declines_invalid_hello);
    JT_RUN(test_server_client_falls_back_without_ack);
    JT_RUN(test_server_closes_bad_frames);
    JT_RUN(test_server_truncated_hello);
    JT_RUN(test_server_close_before_hello);
    JT_RUN(test_server_ack_rules);
    JT_RUN(test_server_hello_then_close);
    JT_RUN(test_tcp_server_declines_urma);
    JT_RUN(test_server_rdma_hellos);
    JT_RUN(test_server_brpc_client_datapath);
    JT_RUN(test_server_small_sq_brpc_client);
    JT_RUN(test_server_long_v2_hello_ack1);
    JT_RUN(test_server_brpc_client_violations);
    JT_RUN(test_server_memory_not_exposed);
    JT_RUN(test_server_unread_answers_bounded);
    JT_RUN(test_server_foreign_jetty);
    JT_RUN(test_server_data_before_ack);
    JT_RUN(test_client_hello_bytes);
    JT_RUN(test_client_against_broken_servers);
    JT_RUN(test_silent_server_default_connect_timeout);
    JT_RUN(test_client_ack_rules);
    JT_RUN(test_client_invalid_server_hello);
    jet_server_destroy(g_srv);
    return jt_finish();
}
