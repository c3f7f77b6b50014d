/* The URMA handshake byte by byte, against hand-written peers (brpc's RDMA
 * checklist, cases 1-38, with URMA magics).
 *
 * Fake client -> jetrpc URMA server: valid v2/v3 hellos get a valid hello of
 * the same version, invalid ones a declining hello, and ACK 0 or "PRPC"
 * (brpc's client falls back without ACK) leave the connection on TCP, where
 * a real TCP channel then calls through it; truncated, oversized, wrong-magic
 * and undecodable hellos close the connection; a silent half hello is closed
 * by the handshake timeout; ACK 1 after a decline, and TCP bytes after ACK 1,
 * close it.
 *
 * Fake server <- jetrpc URMA client: silence times the call out, a close
 * before or during the hello fails it (EEOF), garbage and broken frames fail
 * it with EPROTO, a declining hello gets ACK 0, a valid hello gets ACK 1 and
 * the request then arrives over URMA at the fake's jetty; the server closing
 * TCP after the ACK fails the pending call at once (EEOF), and TCP bytes
 * after the ACK fail it with EPROTO. */
#include "iobuf/block_pool.h"
#include "urma/urma_context.h"
#include "urma/urma_handshake.h"
#include "urma_test.h"

JET_FLAG_DECLARE_INT32(urma_rq_size);

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

static void test_server_valid_hello_then_ack0(void)
{
    for (int v = 2; v <= 3; v++) {
        proxy_arg_t pa;
        run_proxy(SC_VALID_ACK0, v, &pa);
        JT_CHECK(atomic_load(&pa.answered_valid));
        jet_urma_hello_t a;
        size_t used;
        JT_REQUIRE(jet__urma_hello_parse(pa.answer, pa.answer_len, &a, &used) == JET_URMA_HELLO_OK);
        JT_CHECK_EQ(a.version, v);
        JT_CHECK_EQ(a.buffer_size, jet__urma_recv_size());
        JT_CHECK_EQ(a.recv_buffer_cnt, (uint32_t)JET_FLAG(urma_rq_size) - 1);
        JT_CHECK(a.jetty_id != 0 && a.seg_va != 0 && a.seg_len != 0);
        JT_CHECK_EQ(a.tp_type, 1);
        JT_CHECK_EQ(a.jet_caps, JET_URMA_CAPS);
        JT_CHECK_EQ(a.jet_sq, 128);
        JT_CHECK(memcmp(a.eid, fj.c->uctx->eid.raw, 16) == 0);
        if (v == 2) {
            JT_CHECK(memcmp(pa.answer, "URMA\x00\x56\x00\x02\x00\x01", 10) == 0);
            JT_CHECK_EQ(pa.answer_len, 86);
        } else {
            JT_CHECK(memcmp(pa.answer, "URM3", 4) == 0);
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
} sscript_t;

typedef struct sarg {
    sscript_t sc;
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
    jet_urma_hello_result_t r = read_hello(fd, &h, sa->hello, &len);
    if (r != JET_URMA_HELLO_OK) {
        close(fd);
        return;
    }
    sa->hello_len = len;
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
        /* The client's own hello back: its EID and jetty id. */
        n = pack(&h, b);
        jt_send_all(fd, b, n);
        break;
    }
    if (sa->sc == SS_DECLINE || sa->sc == SS_VALID || sa->sc == SS_VALID_THEN_CLOSE ||
        sa->sc == SS_VALID_THEN_TCP_BYTE || sa->sc == SS_MIRROR) {
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

/* One call from a URMA client to a fake server playing sc; its error code. */
static int client_against(sscript_t sc, sarg_t *sa, int32_t timeout_ms)
{
    memset(sa, 0, sizeof *sa);
    sa->sc = sc;
    jt_fake_t f;
    jt_fake_start(&f, server_fn, sa);
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_URMA;
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = 60000; /* the call's deadline is what ends a silent handshake */
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

static void test_client_against_broken_servers(void)
{
    sarg_t sa;
    JT_CHECK_EQ(client_against(SS_SILENT, &sa, 300), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(client_against(SS_CLOSE, &sa, 5000), JET_EEOF); /* the TCP retry closes too */
    JT_CHECK_EQ(atomic_load(&sa.hellos), 1);
    JT_CHECK_EQ(client_against(SS_GARBAGE, &sa, 5000), EPROTO);
    JT_CHECK_EQ(client_against(SS_HALF_MAGIC_SILENT, &sa, 300), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(client_against(SS_HALF_MAGIC_CLOSE, &sa, 5000), JET_EEOF);
    JT_CHECK_EQ(client_against(SS_HALF_HELLO_SILENT, &sa, 300), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(client_against(SS_HALF_HELLO_CLOSE, &sa, 5000), JET_EEOF);
    JT_CHECK_EQ(client_against(SS_BAD_LEN_35, &sa, 5000), EPROTO);
    JT_CHECK_EQ(client_against(SS_BAD_LEN_4097, &sa, 5000), EPROTO);
    JT_CHECK_EQ(client_against(SS_V3_PB_0, &sa, 5000), EPROTO);
    JT_CHECK_EQ(client_against(SS_V3_GARBAGE, &sa, 5000), EPROTO);
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

static void test_client_ack_rules(void)
{
    sarg_t sa;
    /* A declining hello: ACK 0 (the fake then ignores the request). */
    JT_CHECK_EQ(client_against(SS_DECLINE, &sa, 400), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(atomic_load(&sa.ack), 0 + 1);
    /* A valid hello: ACK 1, and the request comes over URMA to our jetty. */
    urma_cr_t cr[8];
    while (JET_URMA_FN(fj.c, urma_poll_jfc)(fj.jfc, 8, cr) > 0) {
    }
    JT_CHECK_EQ(client_against(SS_VALID, &sa, 400), JET_ERPCTIMEDOUT);
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
    JT_CHECK_EQ(client_against(SS_MIRROR, &sa, 400), JET_ERPCTIMEDOUT);
    JT_CHECK_EQ(atomic_load(&sa.ack), 0 + 1);
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "hello");
    /* brpc's receive queue (128 buffers of 8 KiB): the bytes checked below
     * are those of a hello brpc's defaults produce. */
    jet_flag_set("urma_recv_block_size", "8192");
    jet_flag_set("urma_rq_size", "128");
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
    JT_RUN(test_server_ack_rules);
    JT_RUN(test_client_hello_bytes);
    JT_RUN(test_client_against_broken_servers);
    JT_RUN(test_client_ack_rules);
    jet_server_destroy(g_srv);
    return jt_finish();
}
