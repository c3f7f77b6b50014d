/* softub conformance: small SENDs and the life of receive WRs (URMA-API.md §4.5-§4.8, §7.2).
 *
 * Devices deliver small messages in the completion record and copy them into
 * the receive buffer when it is polled ("scatter to CQE"); softub does the same
 * for SEND/SEND_IMM of up to 192 bytes. Whatever the device does, the receive
 * buffer must hold exactly the message once its CR is polled: sizes around that
 * threshold and the one before it (0, 1, 17, 63, 64, 65, 191, 192, 193 bytes),
 * SEND and SEND_IMM, gathered from one
 * or two SGEs into receive WRs of one or three SGEs, in one process and across
 * two (memfd and posix_memalign memory), checked byte for byte together with
 * the bytes around the buffers. A message longer than its receive WR writes
 * nothing. A receive WR counts against the JFR depth until its CR is polled
 * (posted + completed-unpolled): beyond that post_recv is refused, and works
 * again once the CRs are polled; flushed and discarded (RESET) WRs stop
 * counting once their CRs, if any, are polled. */
#include "conformance.h"

#define MEM      (64 * 1024)
#define REGION   512 /* one receive WR's neighbourhood */
#define SRC_AT   (32 * 1024)
#define SRC_SLOT 256
#define GUARD    0x45
#define N_SIZES  9
#define N_MSGS   (N_SIZES * 2 * 2) /* sizes x {1, 3} receive SGEs x {SEND, SEND_IMM} */
#define CTX_BASE 0x1000u
#define IMM_BASE 0xC0FFEE0000000000ull

enum { T_WIRE = 1, T_READY, T_POSTED, T_SENT, T_DONE };

static const uint32_t sizes[N_SIZES] = {0, 1, 17, 63, 64, 65, 191, 192, 193};

/* Message i of the matrix. */
typedef struct msg {
    uint32_t size;
    uint32_t nrsge;
    urma_opcode_t opc;
} msg_t;

static msg_t msg_of(int i)
{
    msg_t m;
    m.size = sizes[i % N_SIZES];
    m.nrsge = (i / N_SIZES) % 2 ? 3 : 1;
    m.opc = (i / (N_SIZES * 2)) % 2 ? URMA_OPC_SEND_IMM : URMA_OPC_SEND;
    return m;
}

/* The receive SGEs of message i inside its region: one of 224 bytes, or three
 * (7 + 60 + 130) with guard bytes between them. */
static uint32_t rsges_of(const msg_t *m, uint32_t off[3], uint32_t len[3])
{
    if (m->nrsge == 1) {
        off[0] = 64;
        len[0] = 224;
        return 1;
    }
    off[0] = 64, len[0] = 7;
    off[1] = 96, len[1] = 60;
    off[2] = 192, len[2] = 130;
    return 3;
}

/* What region i must hold once its CR is polled. */
static void expected_region(int i, uint8_t *out)
{
    msg_t m = msg_of(i);
    uint8_t pay[256];
    cf_fill(pay, sizeof pay, (uint32_t)i + 1);
    memset(out, GUARD, REGION);
    uint32_t off[3], len[3], done = 0;
    uint32_t n = rsges_of(&m, off, len);
    for (uint32_t k = 0; k < n && done < m.size; k++) {
        uint32_t c = len[k] < m.size - done ? len[k] : m.size - done;
        memcpy(out + off[k], pay + done, c);
        done += c;
    }
}

static void post_matrix_recvs(cf_side_t *rx)
{
    memset(rx->mem.buf, GUARD, (size_t)N_MSGS * REGION);
    for (int i = 0; i < N_MSGS; i++) {
        msg_t m = msg_of(i);
        uint32_t off[3], len[3];
        uint32_t n = rsges_of(&m, off, len);
        urma_sge_t rs[3];
        for (uint32_t k = 0; k < n; k++)
            cf_sge(&rs[k], rx->mem.buf + (size_t)i * REGION + off[k], len[k], rx->mem.tseg);
        JT_REQUIRE(cf_post_recv(rx->ep.jetty, rs, n, CTX_BASE + (uint64_t)i) == 0);
    }
}

/* Sends the matrix in order; odd messages gather from two SGEs. */
static void send_matrix(cf_side_t *tx)
{
    for (int i = 0; i < N_MSGS; i++) {
        msg_t m = msg_of(i);
        uint8_t *src = tx->mem.buf + SRC_AT + (size_t)i * SRC_SLOT;
        cf_fill(src, m.size, (uint32_t)i + 1);
        urma_sge_t s[2];
        uint32_t ns = 1;
        if (i % 2 && m.size >= 2) {
            uint32_t h = m.size / 2;
            cf_sge(&s[0], src, h, tx->mem.tseg);
            cf_sge(&s[1], src + h, m.size - h, tx->mem.tseg);
            ns = 2;
        } else {
            cf_sge(&s[0], src, m.size, tx->mem.tseg);
        }
        urma_jfs_wr_t wr;
        cf_wr_send(&wr, m.opc, tx->tj, s, ns, IMM_BASE + (uint64_t)i, 0x5000 + (uint64_t)i);
        JT_REQUIRE(cf_post(tx->ep.jetty, &wr) == 0);
        urma_cr_t cr;
        if (cf_poll1(tx->ep.jfc, &cr) == 0) {
            JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
            JT_CHECK_EQ(cr.user_ctx, 0x5000 + (uint64_t)i);
            JT_CHECK_EQ(cr.completion_len, m.size);
        }
    }
}

/* Polls the matrix's receive CRs and checks every field a sender controls and
 * every byte of every region. */
static void check_matrix(cf_side_t *rx, const urma_jetty_id_t *tx_id)
{
    bool seen[N_MSGS] = {0};
    for (int k = 0; k < N_MSGS; k++) {
        urma_cr_t cr;
        if (cf_poll1(rx->ep.jfc, &cr) != 0) return;
        long i = (long)cr.user_ctx - (long)CTX_BASE;
        if (i < 0 || i >= N_MSGS || seen[i]) {
            CF_FAILF("receive CR with user_ctx 0x%llx", (unsigned long long)cr.user_ctx);
            continue;
        }
        seen[i] = true;
        msg_t m = msg_of((int)i);
        int f0 = jt_case_failed;
        jt_case_failed = 0;
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.flag.bs.s_r, 1);
        JT_CHECK_EQ(cr.flag.bs.jetty, 1);
        JT_CHECK_EQ(cr.flag.bs.reserved, 0);
        JT_CHECK_EQ(cr.opcode,
                    m.opc == URMA_OPC_SEND_IMM ? URMA_CR_OPC_SEND_WITH_IMM : URMA_CR_OPC_SEND);
        if (m.opc == URMA_OPC_SEND_IMM) JT_CHECK_EQ(cr.imm_data, IMM_BASE + (uint64_t)i);
        JT_CHECK_EQ(cr.completion_len, m.size);
        JT_CHECK_EQ(cr.local_id, rx->ep.jetty->jetty_id.id);
        JT_CHECK_EQ(cr.remote_id.id, tx_id->id);
        JT_CHECK_EQ(cr.user_data, (uintptr_t)rx->ep.jetty);
        uint8_t want[REGION];
        expected_region((int)i, want);
        const uint8_t *got = rx->mem.buf + (size_t)i * REGION;
        for (int b = 0; b < REGION; b++) {
            if (got[b] != want[b]) {
                CF_FAILF("region byte %d: 0x%02x, expected 0x%02x", b, got[b], want[b]);
                break;
            }
        }
        if (jt_case_failed)
            fprintf(stderr, "  ^ message %ld: %u bytes, %s, %u receive SGE(s)\n", i, m.size,
                    m.opc == URMA_OPC_SEND_IMM ? "SEND_IMM" : "SEND", m.nrsge);
        jt_case_failed |= f0;
    }
    JT_CHECK_EQ(cf_quiet(rx->ep.jfc, 0), 0);
    /* Nothing beyond the last region. */
    JT_CHECK_EQ(cf_check_byte(rx->mem.buf + (size_t)N_MSGS * REGION, 4096, GUARD), -1);
}

static int in_open(cf_dev_t *d, cf_side_t *a, cf_side_t *b, const cf_ep_opts_t *o)
{
    if (cf_open(d)) return -1;
    return cf_pair_open(d, a, b, o, MEM);
}

static void in_close(cf_side_t *a, cf_side_t *b)
{
    cf_pair_close(a, b);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* Sizes around the inline threshold                                         */
/* ------------------------------------------------------------------------ */

static void sizes_in_process(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    JT_REQUIRE(in_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf + (size_t)N_MSGS * REGION, GUARD, 4096);
    post_matrix_recvs(&b);
    send_matrix(&a);
    check_matrix(&b, &a.ep.jetty->jetty_id);
    /* Twice: the second lap reuses every slot of the first. */
    post_matrix_recvs(&b);
    send_matrix(&a);
    check_matrix(&b, &a.ep.jetty->jetty_id);
    in_close(&a, &b);
}

static int mp_connect(cf_dev_t *d, cf_side_t *s, cf_wire_t *peer, int fd, int kind,
                      uint32_t seg_token)
{
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    if (cf_open(d)) return -1;
    if (cf_side_open(s, d, NULL, &o, MEM, kind, seg_token)) return -1;
    cf_wire_t me;
    cf_side_describe(s, &me);
    if (cf_msg_send(fd, T_WIRE, &me, sizeof me)) return -1;
    if (cf_msg_recv(fd, T_WIRE, peer, sizeof *peer, CF_CASE_TIMEOUT_MS)) return -1;
    if (cf_side_import(s, peer)) return -1;
    return cf_sync(fd, T_READY);
}

static int receiver_peer(int fd, void *arg)
{
    int kind = (int)(intptr_t)arg;
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    if (mp_connect(&d, &s, &peer, fd, kind, 0x77000001u)) return -1;
    memset(s.mem.buf + (size_t)N_MSGS * REGION, GUARD, 4096);
    for (int lap = 0; lap < 2 && !jt_case_failed; lap++) {
        post_matrix_recvs(&s);
        if (cf_msg_send(fd, T_POSTED, NULL, 0)) break;
        if (cf_msg_recv(fd, T_SENT, NULL, 0, CF_CASE_TIMEOUT_MS)) break;
        check_matrix(&s, &peer.jetty_id);
    }
    cf_sync(fd, T_DONE);
    cf_side_close(&s, false);
    cf_close();
    return jt_case_failed ? -1 : 0;
}

static void sizes_cross_process(int kind)
{
    cf_peer_t p;
    JT_REQUIRE(cf_peer_fork(&p, receiver_peer, (void *)(intptr_t)kind) == 0);
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    if (mp_connect(&d, &s, &peer, p.fd, kind, 0x77000002u) == 0) {
        for (int lap = 0; lap < 2 && !jt_case_failed; lap++) {
            if (cf_msg_recv(p.fd, T_POSTED, NULL, 0, CF_CASE_TIMEOUT_MS)) break;
            send_matrix(&s);
            if (cf_msg_send(p.fd, T_SENT, NULL, 0)) break;
        }
        cf_sync(p.fd, T_DONE);
        cf_side_close(&s, false);
        cf_close();
    }
    JT_CHECK_EQ(cf_peer_wait(&p, CF_CASE_TIMEOUT_MS), 0);
}

static void sizes_cross_process_memfd(void)
{
    sizes_cross_process(CF_MEM_MEMFD);
}

static void sizes_cross_process_memalign(void)
{
    sizes_cross_process(CF_MEM_MEMALIGN);
}

/* ------------------------------------------------------------------------ */
/* Which path a SEND takes                                                   */
/* ------------------------------------------------------------------------ */

/* A SEND of up to the threshold (192 bytes) travels in the CR and reaches the
 * receive buffer only when its CR is polled; a longer one is written into
 * the buffer by the sender before its own completion. Between the sender's
 * completion and the receiver's poll the buffer tells the two apart (an RPC
 * frame of a 64-byte message is 121 bytes: it must take the first path). */
static void inline_path_below_threshold(void)
{
    static const uint32_t len[] = {1, 64, 65, 121, 191, 192, 193, 1000};
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    JT_REQUIRE(in_open(&d, &a, &b, &o) == 0);
    for (size_t i = 0; i < sizeof len / sizeof len[0]; i++) {
        bool inl = len[i] <= 192;
        uint8_t *dst = b.mem.buf + 4096;
        memset(dst, GUARD, 2048);
        urma_sge_t rs;
        cf_sge(&rs, dst, 1024, b.mem.tseg);
        JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x900 + i) == 0);
        cf_fill(a.mem.buf, len[i], (uint32_t)i + 40);
        JT_REQUIRE(cf_side_send(&a, a.mem.buf, len[i], URMA_OPC_SEND_IMM, 0x77, 0x910 + i) == 0);
        cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x910 + i, "SEND_IMM");
        if (inl)
            JT_CHECK_EQ(cf_check_byte(dst, 2048, GUARD), -1); /* nothing written yet */
        else
            JT_CHECK_EQ(cf_check_fill(dst, len[i], (uint32_t)i + 40), -1);
        urma_cr_t cr;
        if (cf_poll1(b.ep.jfc, &cr) == 0) {
            JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
            JT_CHECK_EQ(cr.user_ctx, 0x900 + i);
            JT_CHECK_EQ(cr.completion_len, len[i]);
        }
        JT_CHECK_EQ(cf_check_fill(dst, len[i], (uint32_t)i + 40), -1);
        JT_CHECK_EQ(cf_check_byte(dst + len[i], 2048 - len[i], GUARD), -1);
        if (jt_case_failed) {
            fprintf(stderr, "  ^ %u bytes (%s)\n", len[i], inl ? "in the CR" : "in the buffer");
            break;
        }
    }
    in_close(&a, &b);
}

/* ------------------------------------------------------------------------ */
/* A message longer than its receive WR                                      */
/* ------------------------------------------------------------------------ */

static void too_long_writes_nothing(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    JT_REQUIRE(in_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, GUARD, 4096);
    cf_fill(a.mem.buf, 64, 9);
    for (int v = 0; v < 2; v++) {
        /* 48 bytes: one SGE, or three of 16 with gaps. */
        urma_sge_t rs[3];
        uint32_t n = v == 0 ? 1 : 3;
        if (v == 0)
            cf_sge(&rs[0], b.mem.buf + 256, 48, b.mem.tseg);
        else
            for (int k = 0; k < 3; k++)
                cf_sge(&rs[k], b.mem.buf + 1024 + 64 * k, 16, b.mem.tseg);
        JT_REQUIRE(cf_post_recv(b.ep.jetty, rs, n, 0x48 + (uint64_t)v) == 0);
        urma_sge_t s;
        urma_jfs_wr_t wr;
        cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
        cf_wr_send(&wr, v == 0 ? URMA_OPC_SEND : URMA_OPC_SEND_IMM, a.tj, &s, 1, 7, 0x640 + v);
        JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
        urma_cr_t cr;
        if (cf_poll1(b.ep.jfc, &cr) == 0) {
            JT_CHECK_EQ(cr.status, URMA_CR_LOC_LEN_ERR); /* §7.2 */
            JT_CHECK_EQ(cr.user_ctx, 0x48 + (uint64_t)v);
            JT_CHECK_EQ(cr.flag.bs.s_r, 1);
        }
        if (cf_poll1(a.ep.jfc, &cr) == 0) {
            JT_CHECK_EQ(cr.user_ctx, 0x640 + (uint64_t)v);
            JT_CHECK(cr.status != URMA_CR_SUCCESS && cf_plausible_remote_err(cr.status));
        }
        JT_CHECK_EQ(cf_check_byte(b.mem.buf, 4096, GUARD), -1);
    }
    /* The queue goes on: the next small SEND lands whole. */
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf + 2048, 48, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x49) == 0);
    JT_REQUIRE(cf_side_send(&a, a.mem.buf, 17, URMA_OPC_SEND, 0, 0x650) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x650, "17-byte SEND after the refused ones");
    urma_cr_t cr;
    if (cf_poll1(b.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.completion_len, 17);
    }
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 2048, 17, 9), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 2048 + 17, 48 - 17, GUARD), -1);
    in_close(&a, &b);
}

/* ------------------------------------------------------------------------ */
/* Receive WRs count until their CR is polled                                */
/* ------------------------------------------------------------------------ */

#define SMALL_DEPTH 8

static cf_ep_opts_t small_jfr_opts(void)
{
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfr_depth = SMALL_DEPTH;
    o.jfc_depth = 1024;
    return o;
}

static int try_post_recv(cf_side_t *b, uint32_t slot, uint64_t user_ctx)
{
    urma_sge_t rs;
    cf_sge(&rs, b->mem.buf + (size_t)slot * 64, 64, b->mem.tseg);
    urma_jfr_wr_t wr;
    memset(&wr, 0, sizeof wr);
    wr.src.sge = &rs;
    wr.src.num_sge = 1;
    wr.user_ctx = user_ctx;
    urma_jfr_wr_t *bad = NULL;
    int rc = cf.urma_post_jetty_recv_wr(b->ep.jetty, &wr, &bad);
    if (rc != 0) JT_CHECK(bad == &wr);
    return rc;
}

/* One SEND of `size` bytes (pattern seed) that must succeed at the initiator. */
static void send_one(cf_side_t *a, uint32_t size, uint32_t seed, uint64_t user_ctx)
{
    cf_fill(a->mem.buf, size, seed);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a->mem.buf, size, a->mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND_IMM, a->tj, &s, 1, seed, user_ctx);
    JT_REQUIRE(cf_post(a->ep.jetty, &wr) == 0);
    cf_expect_cr(a->ep.jfc, URMA_CR_SUCCESS, user_ctx, "SEND");
}

/* Receives completed but not polled keep their WRs outstanding. */
static void unpolled_receives_refuse_posts(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = small_jfr_opts();
    JT_REQUIRE(in_open(&d, &a, &b, &o) == 0);
    const int limit = 4 * SMALL_DEPTH; /* every device refuses by then */
    int ok = 0, rc = 0;
    for (; ok <= limit; ok++) {
        rc = try_post_recv(&b, (uint32_t)ok, 0x100 + (uint64_t)ok);
        if (rc != 0) break;
        send_one(&a, 1 + (uint32_t)ok % 64, (uint32_t)ok + 1, 0x200 + (uint64_t)ok);
        if (jt_case_failed) break;
    }
    /* post_recv beyond depth outstanding (posted + completed-unpolled) is refused. */
    JT_CHECK_EQ(rc, URMA_ENOMEM);
    JT_CHECK(ok >= SMALL_DEPTH && ok <= limit);
    /* Every completed receive is there, whole, and polling frees the queue. */
    for (int i = 0; i < ok; i++) {
        urma_cr_t cr;
        if (cf_poll1(b.ep.jfc, &cr) != 0) break;
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 0x100 + (uint64_t)i);
        JT_CHECK_EQ(cr.completion_len, 1 + (uint32_t)i % 64);
        JT_CHECK_EQ(cr.imm_data, (uint64_t)i + 1);
        JT_CHECK_EQ(
            cf_check_fill(b.mem.buf + (size_t)i * 64, 1 + (uint32_t)i % 64, (uint32_t)i + 1), -1);
    }
    /* Many laps of the queue, each CR polled: never refused again. */
    for (int i = 0; i < 8 * SMALL_DEPTH && !jt_case_failed; i++) {
        JT_REQUIRE(try_post_recv(&b, (uint32_t)(i % 64), 0x300 + (uint64_t)i) == 0);
        send_one(&a, 64, 1000 + (uint32_t)i, 0x400 + (uint64_t)i);
        urma_cr_t cr;
        if (cf_poll1(b.ep.jfc, &cr) == 0) {
            JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
            JT_CHECK_EQ(cr.user_ctx, 0x300 + (uint64_t)i);
        }
        JT_CHECK_EQ(cf_check_fill(b.mem.buf + (size_t)(i % 64) * 64, 64, 1000 + (uint32_t)i), -1);
    }
    in_close(&a, &b);
}

static void set_jfr_state(urma_jfr_t *jfr, urma_jfr_state_t st)
{
    urma_jfr_attr_t at;
    memset(&at, 0, sizeof at);
    at.mask = JFR_STATE;
    at.state = st;
    JT_CHECK_EQ(cf.urma_modify_jfr(jfr, &at), URMA_SUCCESS);
}

/* Flushed receive WRs stop counting once their FLUSH_ERR CRs are polled, and
 * WRs discarded by RESET stop counting at once: many times the depth goes
 * through either way, then a SEND still lands. */
static void flushed_and_discarded_receives_free(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = small_jfr_opts();
    JT_REQUIRE(in_open(&d, &a, &b, &o) == 0);
    for (int round = 0; round < 8 && !jt_case_failed; round++) {
        for (int i = 0; i < SMALL_DEPTH; i++)
            JT_REQUIRE(try_post_recv(&b, (uint32_t)i, 0x800 + (uint64_t)i) == 0);
        if (round % 2 == 0) {
            set_jfr_state(b.ep.jfr, URMA_JFR_STATE_ERROR);
            for (int i = 0; i < SMALL_DEPTH; i++) {
                urma_cr_t cr;
                if (cf_poll1(b.ep.jfc, &cr) != 0) break;
                JT_CHECK_EQ(cr.status, URMA_CR_WR_FLUSH_ERR);
                JT_CHECK_EQ(cr.flag.bs.s_r, 1);
                JT_CHECK_EQ(cr.user_ctx, 0x800 + (uint64_t)i);
            }
        }
        set_jfr_state(b.ep.jfr, URMA_JFR_STATE_RESET);
        set_jfr_state(b.ep.jfr, URMA_JFR_STATE_READY);
        JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    }
    memset(b.mem.buf, GUARD, 4096);
    JT_REQUIRE(try_post_recv(&b, 0, 0x900) == 0);
    send_one(&a, 33, 33, 0x901);
    urma_cr_t cr;
    if (cf_poll1(b.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 0x900);
        JT_CHECK_EQ(cr.completion_len, 33);
    }
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 33, 33), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 33, 4096 - 33, GUARD), -1);
    in_close(&a, &b);
}

int main(int argc, char **argv)
{
    cf_main(argc, argv);
    CF_RUN(sizes_in_process);
    CF_RUN(sizes_cross_process_memfd);
    CF_RUN(sizes_cross_process_memalign);
    CF_RUN(inline_path_below_threshold);
    CF_RUN(too_long_writes_nothing);
    CF_RUN(unpolled_receives_refuse_posts);
    CF_RUN(flushed_and_discarded_receives_free);
    return jt_finish();
}
