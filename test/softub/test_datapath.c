/* softub conformance: data path in one process (URMA-API.md §4.5-§4.8, §4.10, §7.2).
 *
 * Two contexts a and b, each with a jetty, a JFC and a 64 KiB segment, importing
 * each other. Every opcode with its completion records checked field by field
 * (§4.6) over zero- and garbage-initialised CR arrays, gather/scatter, length,
 * token, range and access violations (no byte may move), SEND_INVALIDATE
 * revoking a token id, RNR, UM and RC rules. */
#include "conformance.h"

#define MEM (64 * 1024)

static int dp_open(cf_dev_t *d, cf_side_t *a, cf_side_t *b, const cf_ep_opts_t *o)
{
    if (cf_open(d)) return -1;
    return cf_pair_open(d, a, b, o, MEM);
}

static void dp_close(cf_side_t *a, cf_side_t *b)
{
    cf_pair_close(a, b);
    cf_close();
}

static uint32_t pat32(uint8_t p)
{
    return p * 0x01010101u;
}
static uint64_t pat64(uint8_t p)
{
    return p * 0x0101010101010101ull;
}

/* An initiator CR (§4.6, §7.2): every-CR fields filled, opcode, imm_data and
 * remote_id.uasid left as the caller's array held them (pattern p). */
static void check_init_cr(const urma_cr_t *cr, uint8_t p, uint64_t user_ctx, uint32_t len,
                          const cf_side_t *me, const cf_side_t *peer, const char *what)
{
    int f0 = jt_case_failed;
    jt_case_failed = 0;
    JT_CHECK_EQ(cr->status, URMA_CR_SUCCESS);
    JT_CHECK_EQ(cr->user_ctx, user_ctx);
    JT_CHECK_EQ(cr->flag.bs.s_r, 0);
    JT_CHECK_EQ(cr->flag.bs.jetty, 1);
    JT_CHECK_EQ(cr->flag.bs.suspend_done, 0);
    JT_CHECK_EQ(cr->flag.bs.flush_err_done, 0);
    JT_CHECK_EQ(cr->completion_len, len);
    JT_CHECK_EQ(cr->local_id, me->ep.jetty->jetty_id.id);
    JT_CHECK_EQ(cr->remote_id.id, peer->ep.jetty->jetty_id.id);
    JT_CHECK(cf_eid_eq(&cr->remote_id.eid, &peer->ctx->eid));
    JT_CHECK_EQ(cr->remote_id.uasid, pat32(p));  /* never written */
    JT_CHECK_EQ((uint32_t)cr->opcode, pat32(p)); /* receive CRs only */
    JT_CHECK_EQ(cr->imm_data, pat64(p));         /* receive CRs only */
    JT_CHECK_EQ(cr->user_data, (uintptr_t)me->ep.jetty);
    if (jt_case_failed)
        fprintf(stderr, "  ^ in the initiator CR of %s (CR array init 0x%02x)\n", what, p);
    jt_case_failed |= f0;
}

static void check_recv_cr(const urma_cr_t *cr, uint8_t p, uint64_t user_ctx, uint32_t len,
                          int opcode, const cf_side_t *me, const cf_side_t *peer, const char *what)
{
    int f0 = jt_case_failed;
    jt_case_failed = 0;
    JT_CHECK_EQ(cr->status, URMA_CR_SUCCESS);
    JT_CHECK_EQ(cr->user_ctx, user_ctx);
    JT_CHECK_EQ(cr->flag.bs.s_r, 1);
    JT_CHECK_EQ(cr->flag.bs.jetty, 1);
    JT_CHECK_EQ(cr->flag.bs.suspend_done, 0);
    JT_CHECK_EQ(cr->flag.bs.flush_err_done, 0);
    JT_CHECK_EQ(cr->opcode, opcode);
    JT_CHECK_EQ(cr->completion_len, len);
    JT_CHECK_EQ(cr->local_id, me->ep.jetty->jetty_id.id);
    JT_CHECK_EQ(cr->remote_id.id, peer->ep.jetty->jetty_id.id);
    JT_CHECK(cf_eid_eq(&cr->remote_id.eid, &peer->ctx->eid));
    JT_CHECK_EQ(cr->remote_id.uasid, pat32(p)); /* UDMA never writes it */
    JT_CHECK_EQ(cr->user_data, (uintptr_t)me->ep.jetty);
    if (jt_case_failed)
        fprintf(stderr, "  ^ in the receive CR of %s (CR array init 0x%02x)\n", what, p);
    jt_case_failed |= f0;
}

/* Polls one CR into a CR pre-filled with p. */
static int poll_pat(urma_jfc_t *jfc, urma_cr_t *cr, uint8_t p)
{
    memset(cr, p, sizeof *cr);
    int n = cf_poll(jfc, cr, 1, CF_WAIT_MS);
    if (n != 1) CF_FAILF("no CR within %d ms", CF_WAIT_MS);
    return n == 1 ? 0 : -1;
}

static void cf_ep_opts_rm(cf_ep_opts_t *o)
{
    *o = cf_ep_defaults(URMA_TM_RM);
}

/* ------------------------------------------------------------------------ */

static void send_cr_fields(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    static const uint8_t pats[2] = {0x00, CF_PATTERN_GARBAGE};
    for (int it = 0; it < 2; it++) {
        uint8_t p = pats[it];
        memset(b.mem.buf, 0x11, 4096);
        urma_sge_t rs;
        cf_sge(&rs, b.mem.buf, 4096, b.mem.tseg);
        uint64_t ruc = 0xB0B0000000000001ull + (uint64_t)it;
        JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, ruc) == 0);
        cf_fill(a.mem.buf, 100, 17 + (uint32_t)it);
        urma_sge_t s;
        urma_jfs_wr_t wr;
        cf_sge(&s, a.mem.buf, 100, a.mem.tseg);
        uint64_t uc = 0xA1A1000000000000ull + (uint64_t)it;
        cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, uc);
        JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
        urma_cr_t cr;
        if (poll_pat(a.ep.jfc, &cr, p) == 0) check_init_cr(&cr, p, uc, 100, &a, &b, "SEND");
        if (poll_pat(b.ep.jfc, &cr, p) == 0)
            check_recv_cr(&cr, p, ruc, 100, URMA_CR_OPC_SEND, &b, &a, "SEND");
        JT_CHECK_EQ(cf_check_fill(b.mem.buf, 100, 17 + (uint32_t)it), -1);
        JT_CHECK_EQ(cf_check_byte(b.mem.buf + 100, 4096 - 100, 0x11), -1);
    }
    /* poll_jfc argument checks (§2.2). */
    urma_cr_t cr;
    JT_CHECK(cf.urma_poll_jfc(a.ep.jfc, -1, &cr) < 0);
    JT_CHECK(cf.urma_poll_jfc(a.ep.jfc, 1, NULL) < 0);
    JT_CHECK_EQ(cf.urma_poll_jfc(a.ep.jfc, 1, &cr), 0);
    dp_close(&a, &b);
}

static void send_imm(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    static const uint8_t pats[2] = {0x00, CF_PATTERN_GARBAGE};
    for (int it = 0; it < 2; it++) {
        uint8_t p = pats[it];
        urma_sge_t rs;
        cf_sge(&rs, b.mem.buf, 4096, b.mem.tseg);
        JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x77 + (uint64_t)it) == 0);
        cf_fill(a.mem.buf, 333, 5);
        urma_sge_t s;
        urma_jfs_wr_t wr;
        cf_sge(&s, a.mem.buf, 333, a.mem.tseg);
        const uint64_t imm = 0xDEADBEEF12345678ull ^ (uint64_t)it;
        cf_wr_send(&wr, URMA_OPC_SEND_IMM, a.tj, &s, 1, imm, 0x55);
        JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
        urma_cr_t cr;
        if (poll_pat(a.ep.jfc, &cr, p) == 0) check_init_cr(&cr, p, 0x55, 333, &a, &b, "SEND_IMM");
        if (poll_pat(b.ep.jfc, &cr, p) == 0) {
            check_recv_cr(&cr, p, 0x77 + (uint64_t)it, 333, URMA_CR_OPC_SEND_WITH_IMM, &b, &a,
                          "SEND_IMM");
            JT_CHECK_EQ(cr.imm_data, imm); /* all 64 bits */
        }
        JT_CHECK_EQ(cf_check_fill(b.mem.buf, 333, 5), -1);
    }
    /* A zero-length SEND_IMM (a credit message): no SGE, the immediate only. */
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 64, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x99) == 0);
    urma_jfs_wr_t wr;
    cf_wr_send(&wr, URMA_OPC_SEND_IMM, a.tj, NULL, 0, 0x8000000000000001ull, 0x56);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 0x56, 0, &a, &b, "empty SEND_IMM");
    if (poll_pat(b.ep.jfc, &cr, 0) == 0) {
        check_recv_cr(&cr, 0, 0x99, 0, URMA_CR_OPC_SEND_WITH_IMM, &b, &a, "empty SEND_IMM");
        JT_CHECK_EQ(cr.imm_data, 0x8000000000000001ull);
    }
    dp_close(&a, &b);
}

static void write_plain(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = 0;
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, 0x21, MEM);
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf + 32768, 1024, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0xCAFE) == 0);
    cf_fill(a.mem.buf, 4096, 3);
    urma_sge_t l, r;
    cf_sge(&l, a.mem.buf, 4096, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg) + 8192, 4096, a.rseg);
    urma_jfs_wr_t wr;
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 0x1234);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0)
        check_init_cr(&cr, CF_PATTERN_GARBAGE, 0x1234, 4096, &a, &b, "WRITE");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 8192, 4096, 3), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 8192, 0x21), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 12288, 32768 - 12288, 0x21), -1);
    /* No target CR and no receive consumed: the next SEND lands in that receive. */
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 16, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x1235);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x1235, "SEND after WRITE");
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0xCAFE, "receive after WRITE");
    dp_close(&a, &b);
}

/* RM and UM need a target on every WR (§4.2); brpc's
 * rejects_send_without_target_jetty: a SEND (and a SEND_IMM in a list after
 * a good one) with tjetty NULL is refused with EINVAL at the post, bad names
 * it, nothing of it completes on either side, and the receive it would have
 * taken is still posted: the next good SEND lands in it. */
static void send_without_target(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = 0;
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, 0x31, MEM);
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0xF00D) == 0);
    cf_fill(a.mem.buf, 64, 21);
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
    urma_jfs_wr_t wr;
    cf_wr_send(&wr, URMA_OPC_SEND, NULL, &s, 1, 0, 0x51);
    urma_jfs_wr_t *bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 256, 0x31), -1);
    /* In a list: the good first WR goes, the second is refused and named. */
    urma_jfs_wr_t good, second;
    cf_wr_send(&good, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x52);
    cf_wr_send(&second, URMA_OPC_SEND_IMM, NULL, &s, 1, 7, 0x53);
    good.next = &second;
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &good, &bad), URMA_EINVAL);
    JT_CHECK(bad == &second);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x52, "the good SEND before the refused one");
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0xF00D, "its receive");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 64, 21), -1);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    dp_close(&a, &b);
}

static void write_imm(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = 0;
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, 0x22, MEM);
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf + 40960, 2048, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0xD00D) == 0);
    cf_fill(a.mem.buf, 1000, 8);
    urma_sge_t l, r;
    cf_sge(&l, a.mem.buf, 1000, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg) + 16384, 1000, a.rseg);
    urma_jfs_wr_t wr;
    const uint64_t notify = 0xFEDCBA9876543210ull;
    cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, a.tj, &l, 1, &r, 1, notify, 0x4321);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0)
        check_init_cr(&cr, CF_PATTERN_GARBAGE, 0x4321, 1000, &a, &b, "WRITE_IMM");
    if (poll_pat(b.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0) {
        check_recv_cr(&cr, CF_PATTERN_GARBAGE, 0xD00D, 1000, URMA_CR_OPC_WRITE_WITH_IMM, &b, &a,
                      "WRITE_IMM");
        JT_CHECK_EQ(cr.imm_data, notify);
    }
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 16384, 1000, 8), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 40960, 2048, 0x22), -1); /* the receive buffer */
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 16384 + 1000, 1000, 0x22), -1);
    /* The receive WR was consumed: a SEND now finds none (rnr_retry 0). */
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 16, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x4322);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_RNR_RETRY_CNT_EXC_ERR, 0x4322, "SEND after WRITE_IMM");
    dp_close(&a, &b);
}

static void read_op(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    cf_fill(b.mem.buf, MEM, 44);
    memset(a.mem.buf, 0x33, MEM);
    urma_sge_t l, r;
    cf_sge(&l, a.mem.buf + 4096, 8192, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg), 8192, a.rseg);
    urma_jfs_wr_t wr;
    cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 0x5678);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0)
        check_init_cr(&cr, CF_PATTERN_GARBAGE, 0x5678, 8192, &a, &b, "READ");
    JT_CHECK_EQ(cf_check_fill(a.mem.buf + 4096, 8192, 44), -1);
    JT_CHECK_EQ(cf_check_byte(a.mem.buf, 4096, 0x33), -1);
    JT_CHECK_EQ(cf_check_byte(a.mem.buf + 12288, 4096, 0x33), -1);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, MEM, 44), -1); /* the source is untouched */
    /* Scatter a READ into two local SGEs. */
    memset(a.mem.buf, 0x33, MEM);
    urma_sge_t l2[2];
    cf_sge(&l2[0], a.mem.buf + 100, 300, a.mem.tseg);
    cf_sge(&l2[1], a.mem.buf + 20000, 700, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg), 1000, a.rseg);
    cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, l2, 2, 0, 0x5679);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 0x5679, 1000, &a, &b, "READ x2");
    JT_CHECK(memcmp(a.mem.buf + 100, b.mem.buf, 300) == 0);
    JT_CHECK(memcmp(a.mem.buf + 20000, b.mem.buf + 300, 700) == 0);
    JT_CHECK_EQ(cf_check_byte(a.mem.buf + 400, 20000 - 400, 0x33), -1);
    dp_close(&a, &b);
}

static void atomics(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    volatile uint64_t *word = (volatile uint64_t *)(b.mem.buf + 64);
    uint64_t *old = (uint64_t *)(a.mem.buf + 128);
    *word = 0x1111222233334444ull;
    urma_sge_t l, r;
    cf_sge(&l, old, 8, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg) + 64, 8, a.rseg);
    urma_jfs_wr_t wr;
    urma_cr_t cr;

    *old = ~0ull;
    cf_wr_cas(&wr, a.tj, &r, &l, 0x1111222233334444ull, 0x5555666677778888ull, 1);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    if (poll_pat(a.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0)
        check_init_cr(&cr, CF_PATTERN_GARBAGE, 1, 8, &a, &b, "CAS (match)");
    JT_CHECK_EQ(*old, 0x1111222233334444ull);
    JT_CHECK_EQ(*word, 0x5555666677778888ull);

    *old = 0;
    cf_wr_cas(&wr, a.tj, &r, &l, 0x1111222233334444ull, 0x9999ull, 2);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 2, 8, &a, &b, "CAS (mismatch)");
    JT_CHECK_EQ(*old, 0x5555666677778888ull);
    JT_CHECK_EQ(*word, 0x5555666677778888ull);

    *word = 0x00000000FFFFFFFFull;
    cf_wr_faa(&wr, a.tj, &r, &l, 1, 3);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 3, 8, &a, &b, "FAA");
    JT_CHECK_EQ(*old, 0x00000000FFFFFFFFull);
    JT_CHECK_EQ(*word, 0x0000000100000000ull);              /* a 64-bit add */
    cf_wr_faa(&wr, a.tj, &r, &l, 0xFFFFFFFFFFFFFFFFull, 4); /* -1 */
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 4, "FAA -1");
    JT_CHECK_EQ(*old, 0x0000000100000000ull);
    JT_CHECK_EQ(*word, 0x00000000FFFFFFFFull);

    /* The remote SGE's length is the operand size (§3.7): 4 bytes here,
     * with 16 bytes of room in the local SGE, of which the old value fills
     * the first 4. The add wraps within the low word. */
    urma_sge_t l16, r4;
    cf_sge(&l16, old, 16, a.mem.tseg);
    cf_rsge(&r4, cf_seg_va(b.mem.tseg) + 64, 4, a.rseg);
    old[0] = 0;
    old[1] = 0;
    cf_wr_faa(&wr, a.tj, &r4, &l16, 1, 5);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 5, 4, &a, &b, "4-byte FAA");
    JT_CHECK_EQ(old[0], 0x00000000FFFFFFFFull);
    JT_CHECK_EQ(old[1], 0);
    JT_CHECK_EQ(*word, 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    dp_close(&a, &b);
}

static void gather_scatter(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    cf_fill(a.mem.buf, MEM, 71);
    memset(b.mem.buf, 0x44, MEM);
    /* Three local SGEs gathered into one receive SGE. */
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 1024, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 10) == 0);
    urma_sge_t s[3];
    cf_sge(&s[0], a.mem.buf, 100, a.mem.tseg);
    cf_sge(&s[1], a.mem.buf + 1000, 200, a.mem.tseg);
    cf_sge(&s[2], a.mem.buf + 5000, 300, a.mem.tseg);
    urma_jfs_wr_t wr;
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, s, 3, 0, 20);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 20, 600, &a, &b, "3-SGE SEND");
    if (poll_pat(b.ep.jfc, &cr, 0) == 0)
        check_recv_cr(&cr, 0, 10, 600, URMA_CR_OPC_SEND, &b, &a, "3-SGE SEND");
    JT_CHECK(memcmp(b.mem.buf, a.mem.buf, 100) == 0);
    JT_CHECK(memcmp(b.mem.buf + 100, a.mem.buf + 1000, 200) == 0);
    JT_CHECK(memcmp(b.mem.buf + 300, a.mem.buf + 5000, 300) == 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 600, 424, 0x44), -1);

    /* One local SGE scattered over a three-SGE receive. */
    memset(b.mem.buf, 0x44, MEM);
    urma_sge_t r3[3];
    cf_sge(&r3[0], b.mem.buf + 2048, 200, b.mem.tseg);
    cf_sge(&r3[1], b.mem.buf + 8192, 200, b.mem.tseg);
    cf_sge(&r3[2], b.mem.buf + 30000, 300, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, r3, 3, 11) == 0);
    cf_sge(&s[0], a.mem.buf + 7, 600, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, s, 1, 0, 21);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 21, "scatter SEND");
    if (poll_pat(b.ep.jfc, &cr, 0) == 0)
        check_recv_cr(&cr, 0, 11, 600, URMA_CR_OPC_SEND, &b, &a, "scatter SEND");
    JT_CHECK(memcmp(b.mem.buf + 2048, a.mem.buf + 7, 200) == 0);
    JT_CHECK(memcmp(b.mem.buf + 8192, a.mem.buf + 207, 200) == 0);
    JT_CHECK(memcmp(b.mem.buf + 30000, a.mem.buf + 407, 200) == 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 30200, 100, 0x44), -1);

    /* WRITE gathering three local SGEs into one remote SGE. */
    memset(b.mem.buf, 0x44, MEM);
    cf_sge(&s[0], a.mem.buf + 11, 10, a.mem.tseg);
    cf_sge(&s[1], a.mem.buf + 3000, 1000, a.mem.tseg);
    cf_sge(&s[2], a.mem.buf + 9000, 90, a.mem.tseg);
    urma_sge_t r;
    cf_rsge(&r, cf_seg_va(b.mem.tseg) + 100, 1100, a.rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, s, 3, &r, 1, 0, 22);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 22, 1100, &a, &b, "3-SGE WRITE");
    JT_CHECK(memcmp(b.mem.buf + 100, a.mem.buf + 11, 10) == 0);
    JT_CHECK(memcmp(b.mem.buf + 110, a.mem.buf + 3000, 1000) == 0);
    JT_CHECK(memcmp(b.mem.buf + 1110, a.mem.buf + 9000, 90) == 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 1200, 100, 0x44), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 100, 0x44), -1);
    dp_close(&a, &b);
}

static void recv_too_small(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, 0x45, MEM);
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf + 1024, 64, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x64) == 0);
    cf_fill(a.mem.buf, 128, 2);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a.mem.buf, 128, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x128);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (cf_poll1(b.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_LOC_LEN_ERR); /* §7.2 */
        JT_CHECK_EQ(cr.user_ctx, 0x64);
        JT_CHECK_EQ(cr.flag.bs.s_r, 1);
    }
    /* The initiator completes, with a status the sheet leaves open. */
    if (cf_poll1(a.ep.jfc, &cr) == 0) JT_CHECK_EQ(cr.user_ctx, 0x128);
    /* Nothing written outside the 64-byte buffer. */
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 1024, 0x45), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 1088, MEM - 1088, 0x45), -1);
    dp_close(&a, &b);
}

static void complete_enable_zero(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    urma_sge_t rs[2];
    cf_sge(&rs[0], b.mem.buf, 256, b.mem.tseg);
    cf_sge(&rs[1], b.mem.buf + 256, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs[0], 1, 1) == 0);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs[1], 1, 2) == 0);
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 32, a.mem.tseg);
    urma_jfs_wr_t wr[2];
    cf_wr_send(&wr[0], URMA_OPC_SEND, a.tj, &s, 1, 0, 0x10);
    wr[0].flag.bs.complete_enable = 0;
    cf_wr_send(&wr[1], URMA_OPC_SEND, a.tj, &s, 1, 0, 0x11);
    wr[0].next = &wr[1];
    JT_REQUIRE(cf_post(a.ep.jetty, wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x11, "signalled SEND after an unsignalled one");
    urma_cr_t cr[2];
    JT_CHECK_EQ(cf_poll(b.ep.jfc, cr, 2, CF_WAIT_MS), 2); /* receive CRs always come */
    /* WRITE unsignalled, then a signalled READ of the same bytes. */
    cf_fill(a.mem.buf + 4096, 512, 6);
    urma_sge_t l, r, l2;
    cf_sge(&l, a.mem.buf + 4096, 512, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg) + 4096, 512, a.rseg);
    cf_sge(&l2, a.mem.buf + 8192, 512, a.mem.tseg);
    cf_wr_rw(&wr[0], URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 0x20);
    wr[0].flag.bs.complete_enable = 0;
    cf_wr_rw(&wr[1], URMA_OPC_READ, a.tj, &r, 1, &l2, 1, 0, 0x21);
    wr[0].next = &wr[1];
    JT_REQUIRE(cf_post(a.ep.jetty, wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x21, "signalled READ after an unsignalled WRITE");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 4096, 512, 6), -1);
    JT_CHECK_EQ(cf_check_fill(a.mem.buf + 8192, 512, 6), -1);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    dp_close(&a, &b);
}

static void recv_matched_by_user_ctx(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    enum { N = 6 };
    urma_sge_t rs[N];
    for (int i = 0; i < N; i++) {
        cf_sge(&rs[i], b.mem.buf + 1024 * i, 256, b.mem.tseg);
        JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs[i], 1, 0x100 + (uint64_t)i) == 0);
    }
    urma_sge_t s[N];
    urma_jfs_wr_t wr[N];
    for (int i = 0; i < N; i++) {
        uint32_t len = 50 + 10 * (uint32_t)i;
        cf_fill(a.mem.buf + 1024 * i, len, 1000 + (uint32_t)i);
        cf_sge(&s[i], a.mem.buf + 1024 * i, len, a.mem.tseg);
        cf_wr_send(&wr[i], URMA_OPC_SEND, a.tj, &s[i], 1, 0, (uint64_t)i);
        wr[i].next = i + 1 < N ? &wr[i + 1] : NULL;
    }
    JT_REQUIRE(cf_post(a.ep.jetty, wr) == 0);
    urma_cr_t cr[N];
    JT_REQUIRE(cf_poll(b.ep.jfc, cr, N, CF_WAIT_MS) == N);
    bool rused[N] = {0}, mused[N] = {0};
    for (int k = 0; k < N; k++) {
        JT_CHECK_EQ(cr[k].status, URMA_CR_SUCCESS);
        long ri = (long)cr[k].user_ctx - 0x100;
        if (ri < 0 || ri >= N || rused[ri]) {
            CF_FAILF("receive CR user_ctx 0x%llx matches no unused receive WR",
                     (unsigned long long)cr[k].user_ctx);
            continue;
        }
        rused[ri] = true;
        long mi = ((long)cr[k].completion_len - 50) / 10;
        if (mi < 0 || mi >= N || mused[mi] || 50 + 10 * mi != (long)cr[k].completion_len) {
            CF_FAILF("receive CR length %u matches no message", cr[k].completion_len);
            continue;
        }
        mused[mi] = true;
        /* The bytes are in the buffer of the receive WR the CR names. */
        JT_CHECK_EQ(cf_check_fill(b.mem.buf + 1024 * ri, cr[k].completion_len, 1000 + (uint32_t)mi),
                    -1);
    }
    urma_cr_t ic[N];
    JT_REQUIRE(cf_poll(a.ep.jfc, ic, N, CF_WAIT_MS) == N);
    /* Initiator CRs in post order (§7.2). */
    for (int k = 0; k < N; k++)
        JT_CHECK_EQ(ic[k].user_ctx, k);
    dp_close(&a, &b);
}

static void completion_order(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    enum { N = 24 };
    urma_sge_t rs[N], s[N], r[N];
    urma_jfs_wr_t wr[N];
    for (int i = 0; i < N; i++) {
        cf_sge(&rs[i], b.mem.buf + 512 * i, 512, b.mem.tseg);
        JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs[i], 1, (uint64_t)i) == 0);
    }
    for (int i = 0; i < N; i++) {
        cf_sge(&s[i], a.mem.buf + 256 * i, 256, a.mem.tseg);
        cf_rsge(&r[i], cf_seg_va(b.mem.tseg) + 32768 + 256 * (uint64_t)i, 256, a.rseg);
        if (i % 3 == 0)
            cf_wr_send(&wr[i], URMA_OPC_SEND, a.tj, &s[i], 1, 0, (uint64_t)i);
        else if (i % 3 == 1)
            cf_wr_rw(&wr[i], URMA_OPC_WRITE, a.tj, &s[i], 1, &r[i], 1, 0, (uint64_t)i);
        else
            cf_wr_rw(&wr[i], URMA_OPC_READ, a.tj, &r[i], 1, &s[i], 1, 0, (uint64_t)i);
        wr[i].next = i + 1 < N ? &wr[i + 1] : NULL;
    }
    JT_REQUIRE(cf_post(a.ep.jetty, wr) == 0);
    /* Batch polling: cr_cnt above 16 is allowed (§4.6). */
    urma_cr_t cr[64];
    memset(cr, 0, sizeof cr);
    int got = 0;
    uint64_t deadline = cf_now_ms() + CF_WAIT_MS;
    while (got < N && cf_now_ms() < deadline) {
        int k = cf.urma_poll_jfc(a.ep.jfc, 64 - got, cr + got);
        JT_REQUIRE(k >= 0);
        got += k;
        if (k == 0) cf_sleep_us(200);
    }
    JT_CHECK_EQ(got, N);
    for (int k = 0; k < got; k++) {
        JT_CHECK_EQ(cr[k].user_ctx, k);
        JT_CHECK_EQ(cr[k].status, URMA_CR_SUCCESS);
    }
    urma_cr_t rcr[N];
    JT_CHECK_EQ(cf_poll(b.ep.jfc, rcr, N / 3, CF_WAIT_MS), N / 3); /* the SENDs */
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    dp_close(&a, &b);
}

/* ------------------------------------------------------------------------ */
/* Violations: tokens, ranges, access bits (§4.10, §7.2)                      */
/* ------------------------------------------------------------------------ */

/* Posts wr (a one-sided op) and requires an error CR with a plausible status. */
static void expect_remote_error(cf_side_t *a, urma_jfs_wr_t *wr, const char *what)
{
    urma_jfs_wr_t *bad = NULL;
    int rc = cf.urma_post_jetty_send_wr(a->ep.jetty, wr, &bad);
    if (rc != 0) {
        CF_FAILF("%s: post returned %d (the violation is found at the target, §7.2)", what, rc);
        return;
    }
    urma_cr_t cr;
    if (cf_poll1(a->ep.jfc, &cr)) {
        CF_FAILF("%s: no error CR", what);
        return;
    }
    if (!cf_plausible_remote_err(cr.status))
        CF_FAILF("%s: CR status %d, expected a remote access/length error", what, cr.status);
    JT_CHECK_EQ(cr.user_ctx, wr->user_ctx);
    JT_CHECK_EQ(cr.flag.bs.s_r, 0);
}

/* One WRITE of l to r that must complete with success. */
static void write_ok(cf_side_t *a, urma_sge_t *l, urma_sge_t *r, uint64_t user_ctx,
                     const char *what)
{
    urma_jfs_wr_t wr;
    cf_wr_rw(&wr, URMA_OPC_WRITE, a->tj, l, 1, r, 1, 0, user_ctx);
    JT_REQUIRE(cf_post(a->ep.jetty, &wr) == 0);
    cf_expect_cr(a->ep.jfc, URMA_CR_SUCCESS, user_ctx, what);
}

/* Imports s2 with its right token and WRITEs a's first 64 bytes (0x66)
 * to its start, which must work: the import, with l and r set up for more. */
static urma_target_seg_t *import_and_write(cf_side_t *a, cf_mem_t *s2, urma_sge_t *l,
                                           urma_sge_t *r, uint64_t user_ctx, const char *what)
{
    urma_target_seg_t *ts = cf_import_seg(a->ctx, &s2->tseg->seg, 0x1111, CF_ACCESS_ALL);
    if (ts == NULL) return NULL;
    cf_sge(l, a->mem.buf, 64, a->mem.tseg);
    cf_rsge(r, cf_seg_va(s2->tseg), 64, ts);
    write_ok(a, l, r, user_ctx, what);
    JT_CHECK_EQ(cf_check_byte(s2->buf, 64, 0x66), -1);
    return ts;
}

/* An RM pair (dp_open) and a second 4 KiB segment of b's, token 0x1111,
 * filled with 0x55 (a's memory with 0x66). */
static int open_with_second_seg(cf_dev_t *d, cf_side_t *a, cf_side_t *b, cf_ep_opts_t *o,
                                cf_mem_t *s2)
{
    cf_ep_opts_rm(o);
    if (dp_open(d, a, b, o) != 0 || cf_mem_alloc(s2, 4096, CF_MEM_MEMALIGN) != 0) return -1;
    if (cf_mem_register(s2, b->ctx, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, 0x1111) != 0) return -1;
    memset(s2->buf, 0x55, 4096);
    memset(a->mem.buf, 0x66, MEM);
    return 0;
}

static void token_violation(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_mem_t s2;
    JT_REQUIRE(open_with_second_seg(&d, &a, &b, &o, &s2) == 0);
    urma_target_seg_t *bad_seg = cf_import_seg(a.ctx, &s2.tseg->seg, 0x2222, CF_ACCESS_ALL);
    if (bad_seg) { /* refusing the import is also correct: nothing can move */
        urma_sge_t l, r;
        urma_jfs_wr_t wr;
        cf_sge(&l, a.mem.buf, 64, a.mem.tseg);
        cf_rsge(&r, cf_seg_va(s2.tseg), 64, bad_seg);
        cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 0x71);
        expect_remote_error(&a, &wr, "WRITE with a wrong segment token");
        cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 0x72);
        expect_remote_error(&a, &wr, "READ with a wrong segment token");
        urma_sge_t r8, l8;
        cf_rsge(&r8, cf_seg_va(s2.tseg), 8, bad_seg);
        cf_sge(&l8, a.mem.buf + 64, 8, a.mem.tseg);
        cf_wr_cas(&wr, a.tj, &r8, &l8, 0x5555555555555555ull, 1, 0x73);
        expect_remote_error(&a, &wr, "CAS with a wrong segment token");
        cf_wr_faa(&wr, a.tj, &r8, &l8, 1, 0x74);
        expect_remote_error(&a, &wr, "FAA with a wrong segment token");
        cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, a.tj, &l, 1, &r, 1, 9, 0x75);
        expect_remote_error(&a, &wr, "WRITE_IMM with a wrong segment token");
        JT_CHECK_EQ(cf_check_byte(s2.buf, 4096, 0x55), -1);
        JT_CHECK_EQ(cf_check_byte(a.mem.buf, MEM, 0x66), -1);
        JT_CHECK_EQ(cf.urma_unimport_seg(bad_seg), URMA_SUCCESS);
    }
    /* The right token works (the violation was the token, nothing else). */
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    urma_target_seg_t *good = import_and_write(&a, &s2, &l, &r, 0x76, "WRITE with the right token");
    JT_REQUIRE(good != NULL);
    JT_CHECK_EQ(cf.urma_unimport_seg(good), URMA_SUCCESS);

    /* A jetty imported with a wrong JFR token: SEND fails, no receive is consumed. */
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    memset(b.mem.buf, 0x57, 256);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x80) == 0);
    urma_target_jetty_t *bad_tj =
        cf_import_jetty_ex(a.ctx, &b.ep.jetty->jetty_id, URMA_TM_RM, URMA_DEF_ORDER, URMA_RTP,
                           URMA_TOKEN_PLAIN_TEXT, o.jfr_token ^ 0xffff);
    if (bad_tj) {
        urma_sge_t s;
        cf_sge(&s, a.mem.buf, 32, a.mem.tseg);
        cf_wr_send(&wr, URMA_OPC_SEND, bad_tj, &s, 1, 0, 0x81);
        expect_remote_error(&a, &wr, "SEND with a wrong JFR token");
        cf_wr_send(&wr, URMA_OPC_SEND_IMM, bad_tj, &s, 1, 5, 0x82);
        expect_remote_error(&a, &wr, "SEND_IMM with a wrong JFR token");
        JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
        JT_CHECK_EQ(cf_check_byte(b.mem.buf, 256, 0x57), -1);
        JT_CHECK_EQ(cf.urma_unimport_jetty(bad_tj), URMA_SUCCESS);
    }
    /* The receive is still there for a sender with the right token. */
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 32, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x83);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x83, "SEND with the right token");
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0x80, "receive of the right-token SEND");
    cf_mem_free(&s2);
    dp_close(&a, &b);
}

/* SEND_INVALIDATE (§4.10): the receive CR carries the named segment's token
 * id and value, and the token id is invalid at the receiver from then on:
 * remote accesses through it fail and move nothing, while the owner's other
 * segments, and its own use of the memory, are untouched. */
static void send_invalidate(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_mem_t s2;
    JT_REQUIRE(open_with_second_seg(&d, &a, &b, &o, &s2) == 0);
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    urma_target_seg_t *ts =
        import_and_write(&a, &s2, &l, &r, 0x90, "WRITE before the invalidation");
    JT_REQUIRE(ts != NULL);

    urma_sge_t rs, sg;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x91) == 0);
    cf_fill(a.mem.buf + 1024, 40, 3);
    cf_sge(&sg, a.mem.buf + 1024, 40, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND_INVALIDATE, a.tj, &sg, 1, 0, 0x92);
    wr.send.tseg = ts;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x92, "SEND_INVALIDATE");
    urma_cr_t cr;
    if (cf_poll1(b.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 0x91);
        JT_CHECK_EQ(cr.opcode, URMA_CR_OPC_SEND_WITH_INV);
        JT_CHECK_EQ(cr.completion_len, 40);
        JT_CHECK_EQ(cr.invalid_token.token_id, s2.tseg->seg.token_id);
        JT_CHECK_EQ(cr.invalid_token.token_value.token, 0x1111u);
    } else {
        CF_FAILF("no receive CR for the SEND_INVALIDATE");
    }
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 40, 3), -1);

    /* Remote access through the invalidated token id fails. */
    memset(a.mem.buf, 0x77, 64);
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 0x93);
    expect_remote_error(&a, &wr, "WRITE after the invalidation");
    cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 0x94);
    expect_remote_error(&a, &wr, "READ after the invalidation");
    JT_CHECK_EQ(cf_check_byte(s2.buf, 64, 0x66), -1);
    JT_CHECK_EQ(cf_check_byte(a.mem.buf, 64, 0x77), -1);

    /* b's own segment (another token id) still takes WRITEs, and b still
     * receives into it. */
    urma_sge_t rb;
    cf_rsge(&rb, cf_seg_va(b.mem.tseg) + 2048, 64, a.rseg);
    write_ok(&a, &l, &rb, 0x95, "WRITE to a segment of another token id");
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 2048, 64, 0x77), -1);
    JT_CHECK_EQ(cf.urma_unimport_seg(ts), URMA_SUCCESS);
    cf_mem_free(&s2);

    /* A new registration of the same memory is valid again. */
    cf_mem_t s3;
    JT_REQUIRE(cf_mem_alloc(&s3, 4096, CF_MEM_MEMALIGN) == 0);
    JT_REQUIRE(cf_mem_register(&s3, b.ctx, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, 0x1111) == 0);
    ts = cf_import_seg(a.ctx, &s3.tseg->seg, 0x1111, CF_ACCESS_ALL);
    JT_REQUIRE(ts != NULL);
    cf_rsge(&r, cf_seg_va(s3.tseg), 64, ts);
    write_ok(&a, &l, &r, 0x96, "WRITE to a new registration");
    JT_CHECK_EQ(cf.urma_unimport_seg(ts), URMA_SUCCESS);
    cf_mem_free(&s3);
    dp_close(&a, &b);
}

static void out_of_range(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    /* A segment over the middle of a larger allocation, so that the bytes
     * just outside it are observable. */
    uint8_t *area = NULL;
    JT_REQUIRE(posix_memalign((void **)&area, 4096, 3 * 4096) == 0);
    memset(area, 0x77, 3 * 4096);
    cf_mem_t seg = {.buf = area + 4096, .len = 4096, .kind = CF_MEM_MEMALIGN, .memfd = -1};
    JT_REQUIRE(cf_mem_register(&seg, b.ctx, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, 0x3131) == 0);
    urma_target_seg_t *rs = cf_import_seg(a.ctx, &seg.tseg->seg, 0x3131, CF_ACCESS_ALL);
    JT_REQUIRE(rs != NULL);
    uint64_t va = cf_seg_va(seg.tseg);
    memset(a.mem.buf, 0x66, MEM);
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    cf_sge(&l, a.mem.buf, 9, a.mem.tseg);

    cf_rsge(&r, va + 4096 - 8, 9, rs);
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 1);
    expect_remote_error(&a, &wr, "WRITE one byte past the end");
    l.len = 1;
    cf_rsge(&r, va + 4096, 1, rs);
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 2);
    expect_remote_error(&a, &wr, "WRITE at the end");
    l.len = 2;
    cf_rsge(&r, va - 1, 2, rs);
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 3);
    expect_remote_error(&a, &wr, "WRITE one byte before the start");
    l.len = 9;
    cf_rsge(&r, va + 4096 - 8, 9, rs);
    cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 4);
    expect_remote_error(&a, &wr, "READ one byte past the end");
    urma_sge_t l8;
    cf_sge(&l8, a.mem.buf + 64, 8, a.mem.tseg);
    cf_rsge(&r, va + 4096, 8, rs);
    cf_wr_cas(&wr, a.tj, &r, &l8, 0x7777777777777777ull, 0, 5);
    expect_remote_error(&a, &wr, "CAS past the end");
    cf_rsge(&r, va + 4096 - 4, 8, rs);
    cf_wr_faa(&wr, a.tj, &r, &l8, 1, 6);
    expect_remote_error(&a, &wr, "FAA straddling the end");
    JT_CHECK_EQ(cf_check_byte(area, 3 * 4096, 0x77), -1);
    JT_CHECK_EQ(cf_check_byte(a.mem.buf, MEM, 0x66), -1);
    /* The last 8 bytes exactly: fine. */
    l.len = 8;
    cf_rsge(&r, va + 4096 - 8, 8, rs);
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 7);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 7, "WRITE of the last 8 bytes");
    JT_CHECK_EQ(cf_check_byte(area + 8192 - 8, 8, 0x66), -1);
    JT_CHECK_EQ(cf_check_byte(area + 8192, 4096, 0x77), -1);
    JT_CHECK_EQ(cf.urma_unimport_seg(rs), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unregister_seg(seg.tseg), URMA_SUCCESS);
    free(area);
    dp_close(&a, &b);
}

static void missing_access(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    static const uint32_t acc[3] = {URMA_ACCESS_READ, URMA_ACCESS_READ | URMA_ACCESS_WRITE,
                                    URMA_ACCESS_LOCAL_ONLY};
    cf_mem_t m[3];
    urma_target_seg_t *t[3];
    for (int i = 0; i < 3; i++) {
        JT_REQUIRE(cf_mem_alloc(&m[i], 4096, CF_MEM_MEMALIGN) == 0);
        cf_fill(m[i].buf, 4096, 90 + (uint32_t)i);
        JT_REQUIRE(cf_mem_register(&m[i], b.ctx, acc[i], URMA_TOKEN_PLAIN_TEXT, 0x4040) == 0);
        /* Asking for more than was granted may be refused at import: then nothing moves. */
        t[i] = cf_import_seg(a.ctx, &m[i].tseg->seg, 0x4040, CF_ACCESS_ALL);
    }
    memset(a.mem.buf, 0x66, MEM);
    urma_sge_t l, r, l8, r8;
    urma_jfs_wr_t wr;
    cf_sge(&l, a.mem.buf, 256, a.mem.tseg);
    cf_sge(&l8, a.mem.buf + 512, 8, a.mem.tseg);
    if (t[0]) { /* READ only */
        cf_rsge(&r, cf_seg_va(m[0].tseg), 256, t[0]);
        cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 1);
        expect_remote_error(&a, &wr, "WRITE to a READ-only segment");
        cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, a.tj, &l, 1, &r, 1, 1, 2);
        expect_remote_error(&a, &wr, "WRITE_IMM to a READ-only segment");
        cf_rsge(&r8, cf_seg_va(m[0].tseg), 8, t[0]);
        cf_wr_faa(&wr, a.tj, &r8, &l8, 1, 3);
        expect_remote_error(&a, &wr, "FAA on a READ-only segment");
        JT_CHECK_EQ(cf_check_byte(a.mem.buf, MEM, 0x66), -1);
        cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 4);
        JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
        cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 4, "READ of a READ-only segment");
        JT_CHECK_EQ(cf_check_fill(a.mem.buf, 256, 90), -1);
        memset(a.mem.buf, 0x66, MEM);
    }
    if (t[1]) { /* READ|WRITE, no ATOMIC */
        cf_rsge(&r8, cf_seg_va(m[1].tseg) + 8, 8, t[1]);
        cf_wr_cas(&wr, a.tj, &r8, &l8, 0, 1, 5);
        expect_remote_error(&a, &wr, "CAS on a segment without ATOMIC");
        cf_wr_faa(&wr, a.tj, &r8, &l8, 1, 6);
        expect_remote_error(&a, &wr, "FAA on a segment without ATOMIC");
        JT_CHECK_EQ(cf_check_byte(a.mem.buf, MEM, 0x66), -1);
        JT_CHECK_EQ(cf_check_fill(m[1].buf, 4096, 91), -1);
        cf_rsge(&r, cf_seg_va(m[1].tseg) + 1024, 256, t[1]);
        cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 7);
        JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
        cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 7, "WRITE to a READ|WRITE segment");
        JT_CHECK_EQ(cf_check_byte(m[1].buf + 1024, 256, 0x66), -1);
    }
    if (t[2]) { /* LOCAL_ONLY */
        cf_rsge(&r, cf_seg_va(m[2].tseg), 256, t[2]);
        cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 8);
        expect_remote_error(&a, &wr, "READ of a LOCAL_ONLY segment");
        cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 9);
        expect_remote_error(&a, &wr, "WRITE to a LOCAL_ONLY segment");
        JT_CHECK_EQ(cf_check_byte(a.mem.buf, MEM, 0x66), -1);
    }
    JT_CHECK_EQ(cf_check_fill(m[0].buf, 4096, 90), -1);
    JT_CHECK_EQ(cf_check_fill(m[2].buf, 4096, 92), -1);
    for (int i = 0; i < 3; i++) {
        if (t[i]) JT_CHECK_EQ(cf.urma_unimport_seg(t[i]), URMA_SUCCESS);
        cf_mem_free(&m[i]);
    }
    dp_close(&a, &b);
}

/* ------------------------------------------------------------------------ */
/* RNR (§4.8)                                                                */
/* ------------------------------------------------------------------------ */

static void rnr_no_retry(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = 0;
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, 0x12, MEM);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_fill(a.mem.buf, 64, 4);
    cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x50);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (cf_poll1(a.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_RNR_RETRY_CNT_EXC_ERR);
        JT_CHECK_EQ(cr.user_ctx, 0x50);
        JT_CHECK_EQ(cr.flag.bs.s_r, 0);
    }
    /* The failed message is not delivered later. */
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x51) == 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 256, 0x12), -1);
    /* The jetty keeps working. */
    wr.user_ctx = 0x52;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x52, "SEND once a receive is posted");
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0x51, "receive of that SEND");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 64, 4), -1);
    dp_close(&a, &b);
}

static void rnr_finite_retry(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = 3;
    o.min_rnr_timer = 1; /* 0.01 ms (Appendix B) */
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND_IMM, a.tj, &s, 1, 1, 0x60);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_RNR_RETRY_CNT_EXC_ERR, 0x60, "SEND_IMM, 3 RNR retries");
    cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, a.tj, &s, 1, NULL, 0, 1, 0x61);
    urma_sge_t r;
    cf_rsge(&r, cf_seg_va(b.mem.tseg), 64, a.rseg);
    wr.rw.dst.sge = &r;
    wr.rw.dst.num_sge = 1;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_RNR_RETRY_CNT_EXC_ERR, 0x61, "WRITE_IMM, 3 RNR retries");
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    dp_close(&a, &b);
}

/* Retries are spaced by the TARGET JFR's min_rnr_timer (§4.8, Appendix B).
 * Only a lower bound is checked: noise can only make it later. */
static void rnr_timer_is_the_targets(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(cf_open(&d) == 0);
    cf_ep_opts_t oa = cf_ep_defaults(URMA_TM_RM), ob = oa;
    oa.rnr_retry = 3;
    oa.min_rnr_timer = 1;  /* 0.01 ms: the sender's own timer must not matter */
    ob.min_rnr_timer = 27; /* 122.88 ms */
    JT_REQUIRE(cf_side_open(&a, &d, NULL, &oa, MEM, CF_MEM_MEMALIGN, 0x10) == 0);
    JT_REQUIRE(cf_side_open(&b, &d, NULL, &ob, MEM, CF_MEM_MEMALIGN, 0x20) == 0);
    cf_wire_t wa, wb;
    cf_side_describe(&a, &wa);
    cf_side_describe(&b, &wb);
    JT_REQUIRE(cf_side_import(&a, &wb) == 0);
    JT_REQUIRE(cf_side_import(&b, &wa) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x65);
    uint64_t t0 = jt_now_us();
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (cf_poll1(a.ep.jfc, &cr) == 0) {
        uint64_t us = jt_now_us() - t0;
        JT_CHECK_EQ(cr.status, URMA_CR_RNR_RETRY_CNT_EXC_ERR);
        if (us < 3 * 122880 - 10000)
            CF_FAILF("3 RNR retries at the target's 122.88 ms timer took only %llu us",
                     (unsigned long long)us);
    }
    dp_close(&a, &b);
}

static void rnr_retry_then_success(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = URMA_TYPICAL_RNR_RETRY; /* 7: infinite */
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr[2];
    cf_fill(a.mem.buf, 128, 77);
    cf_sge(&s, a.mem.buf, 128, a.mem.tseg);
    cf_wr_send(&wr[0], URMA_OPC_SEND, a.tj, &s, 1, 0, 0x70);
    cf_wr_send(&wr[1], URMA_OPC_SEND_IMM, a.tj, &s, 1, 0x71, 0x71);
    wr[0].next = &wr[1];
    JT_REQUIRE(cf_post(a.ep.jetty, wr) == 0);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, 100), 0); /* still retrying */
    urma_sge_t rs[2];
    cf_sge(&rs[0], b.mem.buf, 256, b.mem.tseg);
    cf_sge(&rs[1], b.mem.buf + 256, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs[0], 1, 0x72) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x70, "first SEND after the receive came");
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, 50), 0); /* the second still waits, in order */
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs[1], 1, 0x73) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x71, "second SEND");
    urma_cr_t cr[2];
    JT_CHECK_EQ(cf_poll(b.ep.jfc, cr, 2, CF_WAIT_MS), 2);
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 128, 77), -1);
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 256, 128, 77), -1);
    dp_close(&a, &b);
}

/* The target unimported while a SEND to it waits for a receive (RNR,
 * retried for ever): the SEND ends with an error status, and nothing reaches
 * the target once a receive is posted there. */
static void rnr_target_unimported(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    o.rnr_retry = URMA_TYPICAL_RNR_RETRY; /* 7: infinite */
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_fill(a.mem.buf, 128, 91);
    memset(b.mem.buf, 0, 256);
    cf_sge(&s, a.mem.buf, 128, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x90);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, 50), 0); /* still retrying */
    JT_REQUIRE(cf.urma_unimport_jetty(a.tj) == URMA_SUCCESS);
    a.tj = NULL;
    urma_cr_t cr;
    JT_REQUIRE(cf_poll(a.ep.jfc, &cr, 1, CF_WAIT_MS) == 1);
    JT_CHECK_EQ(cr.user_ctx, 0x90);
    JT_CHECK(cr.status != URMA_CR_SUCCESS);
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x91) == 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 100), 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < 256; i++)
        nonzero += b.mem.buf[i] != 0;
    JT_CHECK_EQ(nonzero, 0);
    dp_close(&a, &b);
}

/* ------------------------------------------------------------------------ */
/* UM and RC rules (§4.2)                                                    */
/* ------------------------------------------------------------------------ */

static void um_rules(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_UM);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    memset(b.mem.buf, 0x13, MEM);
    memset(a.mem.buf, 0x14, MEM);
    urma_sge_t l, r, l8, r8;
    cf_sge(&l, a.mem.buf, 64, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg), 64, a.rseg);
    cf_sge(&l8, a.mem.buf + 128, 8, a.mem.tseg);
    cf_rsge(&r8, cf_seg_va(b.mem.tseg) + 128, 8, a.rseg);
    urma_jfs_wr_t wr;
    for (int k = 0; k < 5; k++) {
        if (k == 0) cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 100);
        if (k == 1) cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, a.tj, &l, 1, &r, 1, 1, 101);
        if (k == 2) cf_wr_rw(&wr, URMA_OPC_READ, a.tj, &r, 1, &l, 1, 0, 102);
        if (k == 3) cf_wr_cas(&wr, a.tj, &r8, &l8, 0x1313131313131313ull, 0, 103);
        if (k == 4) cf_wr_faa(&wr, a.tj, &r8, &l8, 1, 104);
        urma_jfs_wr_t *bad = NULL;
        int rc = cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad);
        if (rc == URMA_EINVAL) {
            JT_CHECK(bad == &wr);
        } else if (rc == 0) { /* refused at execution instead */
            urma_cr_t cr;
            if (cf_poll1(a.ep.jfc, &cr) == 0 && cr.status == URMA_CR_SUCCESS)
                CF_FAILF("UM one-sided opcode 0x%x completed successfully", wr.opcode);
        } else {
            CF_FAILF("UM one-sided opcode 0x%x: post returned %d", wr.opcode, rc);
        }
    }
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, MEM, 0x13), -1);
    JT_CHECK_EQ(cf_check_byte(a.mem.buf, MEM, 0x14), -1);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);

    /* A SEND without a receive is dropped silently. */
    cf_fill(a.mem.buf, 64, 12);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &l, 1, 0, 105);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 105, "UM SEND without a receive");
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x90) == 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 256, 0x13), -1);
    /* With a receive it arrives. */
    cf_wr_send(&wr, URMA_OPC_SEND_IMM, a.tj, &l, 1, 0xABCDEF0123456789ull, 106);
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 106, 64, &a, &b, "UM SEND_IMM");
    if (poll_pat(b.ep.jfc, &cr, 0) == 0) {
        check_recv_cr(&cr, 0, 0x90, 64, URMA_CR_OPC_SEND_WITH_IMM, &b, &a, "UM SEND_IMM");
        JT_CHECK_EQ(cr.imm_data, 0xABCDEF0123456789ull);
    }
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 64, 12), -1);
    dp_close(&a, &b);
}

static void rc_ignores_tjetty(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RC);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    JT_CHECK(a.ep.jetty->remote_jetty == a.tj);
    /* c: another RC jetty in b's context, imported by a but not bound. */
    cf_ep_t c;
    JT_REQUIRE(cf_ep_open(&c, b.ctx, &o) == 0);
    urma_target_jetty_t *tc =
        cf_import_jetty(a.ctx, &c.jetty->jetty_id, URMA_TM_RC, o.jfr_policy, o.jfr_token);
    JT_REQUIRE(tc != NULL);
    urma_sge_t rb[2], rcs;
    cf_sge(&rb[0], b.mem.buf, 256, b.mem.tseg);
    cf_sge(&rb[1], b.mem.buf + 256, 256, b.mem.tseg);
    cf_sge(&rcs, b.mem.buf + 1024, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rb[0], 1, 1) == 0);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rb[1], 1, 2) == 0);
    JT_REQUIRE(cf_post_recv(c.jetty, &rcs, 1, 3) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a.mem.buf, 32, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, tc, &s, 1, 0, 10); /* names c: ignored */
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, 0) == 0) check_init_cr(&cr, 0, 10, 32, &a, &b, "RC SEND via tc");
    if (poll_pat(b.ep.jfc, &cr, 0) == 0)
        check_recv_cr(&cr, 0, cr.user_ctx, 32, URMA_CR_OPC_SEND, &b, &a, "RC SEND via tc");
    cf_wr_send(&wr, URMA_OPC_SEND, NULL, &s, 1, 0, 11); /* no tjetty at all */
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 11, "RC SEND without tjetty");
    JT_CHECK_EQ(cf_poll(b.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    JT_CHECK_EQ(cf_quiet(c.jfc, CF_QUIET_MS), 0);
    /* One-sided ops go to the bound target too. */
    cf_fill(a.mem.buf, 64, 31);
    urma_sge_t r;
    cf_rsge(&r, cf_seg_va(b.mem.tseg) + 4096, 64, a.rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE, tc, &s, 1, &r, 1, 0, 12);
    s.len = 64;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 12, "RC WRITE via tc");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 4096, 64, 31), -1);
    JT_CHECK_EQ(cf.urma_unimport_jetty(tc), URMA_SUCCESS);
    cf_ep_close(&c);
    dp_close(&a, &b);
}

/* JFS to JFR: the jetty flag is 0 and the ids are the JFS and JFR ids. */
/* A JFS on a's JFC and b's JFR imported by a (RM, RTP, b's JFR token): the
 * set-up of the JFS → JFR cases. rj receives the import description after
 * the library's write-back. Returns the target or NULL (*jfs_p is set
 * whenever the JFS was created). */
static urma_target_jetty_t *jfs_import_b_jfr(cf_side_t *a, cf_side_t *b, const cf_ep_opts_t *o,
                                              urma_jfs_t **jfs_p, urma_rjfr_t *rj)
{
    urma_jfs_cfg_t sc;
    cf_jfs_cfg(&sc, a->ep.jfc, URMA_TM_RM, 16);
    *jfs_p = cf.urma_create_jfs(a->ctx, &sc);
    if (*jfs_p == NULL) return NULL;
    memset(rj, 0, sizeof *rj);
    rj->jfr_id = b->ep.jfr->jfr_id;
    rj->trans_mode = URMA_TM_RM;
    rj->flag.bs.token_policy = o->jfr_policy;
    rj->tp_type = URMA_RTP;
    urma_token_t tok = {o->jfr_token};
    return cf.urma_import_jfr(a->ctx, rj, &tok);
}

static void jfs_to_jfr(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    CF_NEED(urma_create_jfs);
    CF_NEED(urma_post_jfs_wr);
    CF_NEED(urma_import_jfr);
    CF_NEED(urma_unimport_jfr);
    urma_jfs_t *jfs = NULL;
    urma_rjfr_t rj;
    urma_target_jetty_t *tjfr = jfs_import_b_jfr(&a, &b, &o, &jfs, &rj);
    JT_REQUIRE(jfs != NULL);
    JT_REQUIRE(tjfr != NULL);
    JT_CHECK_EQ(tjfr->type, URMA_JFR);
    JT_CHECK_EQ(rj.flag.bs.order_type, URMA_OI); /* written back */
    JT_CHECK(cf_id_eq(&tjfr->id, &b.ep.jfr->jfr_id));
    urma_jfr_wr_t rw;
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    memset(&rw, 0, sizeof rw);
    rw.src.sge = &rs;
    rw.src.num_sge = 1;
    rw.user_ctx = 0x3F;
    urma_jfr_wr_t *rbad = NULL;
    JT_REQUIRE(cf.urma_post_jfr_wr(b.ep.jfr, &rw, &rbad) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr, *bad = NULL;
    cf_fill(a.mem.buf, 48, 8);
    cf_sge(&s, a.mem.buf, 48, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, tjfr, &s, 1, 0, 0x3E);
    JT_REQUIRE(cf.urma_post_jfs_wr(jfs, &wr, &bad) == 0);
    urma_cr_t cr;
    if (poll_pat(a.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 0x3E);
        JT_CHECK_EQ(cr.flag.bs.s_r, 0);
        JT_CHECK_EQ(cr.flag.bs.jetty, 0);
        JT_CHECK_EQ(cr.local_id, jfs->jfs_id.id);
        JT_CHECK_EQ(cr.remote_id.id, b.ep.jfr->jfr_id.id);
        JT_CHECK(cf_eid_eq(&cr.remote_id.eid, &b.ctx->eid));
        JT_CHECK_EQ(cr.remote_id.uasid, pat32(CF_PATTERN_GARBAGE));
        JT_CHECK_EQ(cr.completion_len, 48);
        JT_CHECK_EQ(cr.user_data, (uintptr_t)jfs);
    }
    if (poll_pat(b.ep.jfc, &cr, CF_PATTERN_GARBAGE) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 0x3F);
        JT_CHECK_EQ(cr.flag.bs.s_r, 1);
        JT_CHECK_EQ(cr.flag.bs.jetty, 0);
        JT_CHECK_EQ(cr.opcode, URMA_CR_OPC_SEND);
        JT_CHECK_EQ(cr.local_id, b.ep.jfr->jfr_id.id);
        JT_CHECK_EQ(cr.remote_id.id, jfs->jfs_id.id);
        JT_CHECK(cf_eid_eq(&cr.remote_id.eid, &a.ctx->eid));
        JT_CHECK_EQ(cr.remote_id.uasid, pat32(CF_PATTERN_GARBAGE));
        JT_CHECK_EQ(cr.completion_len, 48);
        JT_CHECK_EQ(cr.user_data, (uintptr_t)b.ep.jfr);
    }
    JT_CHECK_EQ(cf_check_fill(b.mem.buf, 48, 8), -1);
    JT_CHECK_EQ(cf.urma_unimport_jfr(tjfr), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    dp_close(&a, &b);
}

/* The single-SGE helpers (urma_write, urma_read, urma_send, urma_recv) do
 * what the equivalent posted WRs do, and refuse the NULL segments the API
 * requires. */
static void single_sge_helpers(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    cf_ep_opts_t o;
    cf_ep_opts_rm(&o);
    JT_REQUIRE(dp_open(&d, &a, &b, &o) == 0);
    CF_NEED(urma_create_jfs);
    CF_NEED(urma_import_jfr);
    CF_NEED(urma_unimport_jfr);
    CF_NEED(urma_write);
    CF_NEED(urma_read);
    CF_NEED(urma_send);
    CF_NEED(urma_recv);
    urma_jfs_t *jfs = NULL;
    urma_rjfr_t rj;
    urma_target_jetty_t *tjfr = jfs_import_b_jfr(&a, &b, &o, &jfs, &rj);
    JT_REQUIRE(jfs != NULL);
    JT_REQUIRE(tjfr != NULL);
    urma_jfs_wr_flag_t flag = {.value = 0};
    flag.bs.complete_enable = 1;
    uint64_t bva = cf_seg_va(b.mem.tseg);

    /* WRITE: 4 KiB from a to b at offset 8192. */
    memset(b.mem.buf, 0x21, MEM);
    cf_fill(a.mem.buf, 4096, 5);
    JT_CHECK_EQ(cf.urma_write(jfs, tjfr, a.rseg, a.mem.tseg, bva + 8192, (uintptr_t)a.mem.buf,
                              4096, flag, 0x71),
                URMA_SUCCESS);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x71, "urma_write");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 8192, 4096, 5), -1);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 8192, 0x21), -1);

    /* READ: those bytes back into a at offset 16384. */
    memset(a.mem.buf + 16384, 0x33, 4096);
    JT_CHECK_EQ(cf.urma_read(jfs, tjfr, a.mem.tseg, a.rseg, (uintptr_t)(a.mem.buf + 16384),
                             bva + 8192, 4096, flag, 0x72),
                URMA_SUCCESS);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x72, "urma_read");
    JT_CHECK_EQ(cf_check_fill(a.mem.buf + 16384, 4096, 5), -1);

    /* SEND into a receive posted with urma_recv. */
    JT_CHECK_EQ(cf.urma_recv(b.ep.jfr, b.mem.tseg, (uintptr_t)(b.mem.buf + 32768), 256, 0x73),
                URMA_SUCCESS);
    cf_fill(a.mem.buf, 100, 9);
    JT_CHECK_EQ(cf.urma_send(jfs, tjfr, a.mem.tseg, (uintptr_t)a.mem.buf, 100, flag, 0x74),
                URMA_SUCCESS);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x74, "urma_send");
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0x73, "urma_recv");
    JT_CHECK_EQ(cf_check_fill(b.mem.buf + 32768, 100, 9), -1);

    /* Required pointers (URMA-API.md §2.4): nothing is posted. */
    JT_CHECK_EQ(cf.urma_write(jfs, tjfr, NULL, a.mem.tseg, bva, (uintptr_t)a.mem.buf, 8, flag, 1),
                URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_read(jfs, tjfr, a.mem.tseg, NULL, (uintptr_t)a.mem.buf, bva, 8, flag, 2),
                URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_write(jfs, NULL, a.rseg, a.mem.tseg, bva, (uintptr_t)a.mem.buf, 8, flag, 3),
                URMA_EINVAL);
    JT_CHECK(cf.urma_send(jfs, tjfr, NULL, (uintptr_t)a.mem.buf, 8, flag, 4) != URMA_SUCCESS);
    JT_CHECK(cf.urma_recv(b.ep.jfr, NULL, (uintptr_t)b.mem.buf, 8, 5) != URMA_SUCCESS);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf.urma_unimport_jfr(tjfr), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    dp_close(&a, &b);
}

/* A JFR shared by jetties (share_jfr, §3): a message lands through jetty A,
 * A is deleted (and its id may be handed out again) before the receive CR is
 * polled. The CR still completes the WR of the JFR: its buffer comes back,
 * and the JFR keeps taking posts within its depth, lap after lap, for the
 * jetty that replaced A. */
static void shared_jfr_jetty_deleted_before_poll(void)
{
    enum { DEPTH = 8, BUF = 1024, K = 8 * DEPTH };
    cf_dev_t d;
    cf_side_t r, s;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfr_depth = DEPTH;
    if (dp_open(&d, &r, &s, &o)) return;
    for (int i = 0; i < DEPTH; i++) {
        urma_sge_t rs;
        cf_sge(&rs, r.mem.buf + BUF * i, BUF, r.mem.tseg);
        JT_REQUIRE(cf_post_recv(r.ep.jetty, &rs, 1, (uint64_t)i) == 0);
    }
    JT_REQUIRE(cf_side_send(&s, s.mem.buf, 200, URMA_OPC_SEND, 0, 0x300) == 0);
    cf_expect_cr(s.ep.jfc, URMA_CR_SUCCESS, 0x300, "SEND through jetty A");
    /* A second jetty on the same JFR takes A's place; A goes first. */
    urma_jetty_cfg_t jcfg;
    cf_jetty_cfg(&jcfg, r.ep.jfc, r.ep.jfr, URMA_TM_RM, o.jfs_depth);
    jcfg.jfs_cfg.rnr_retry = o.rnr_retry;
    urma_jetty_t *b = cf.urma_create_jetty(r.ctx, &jcfg);
    JT_REQUIRE(b);
    uint32_t a_id = r.ep.jetty->jetty_id.id;
    JT_REQUIRE(cf.urma_unimport_jetty(s.tj) == 0);
    s.tj = NULL;
    JT_CHECK_EQ(cf.urma_delete_jetty(r.ep.jetty), 0);
    r.ep.jetty = b;
    urma_cr_t cr;
    JT_REQUIRE(cf_poll(r.ep.jfc, &cr, 1, CF_WAIT_MS) == 1);
    JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
    JT_CHECK_EQ(cr.completion_len, 200u);
    JT_CHECK_EQ(cr.local_id, a_id);
    JT_CHECK_EQ(cr.remote_id.id, s.ep.jetty->jetty_id.id);
    JT_REQUIRE(cr.user_ctx < DEPTH);
    cf_wire_t w;
    cf_side_describe(&r, &w);
    JT_REQUIRE(cf.urma_unimport_seg(s.rseg) == 0); /* imported again with the new jetty */
    s.rseg = NULL;
    JT_REQUIRE(cf_side_import(&s, &w) == 0);
    uint64_t slot = cr.user_ctx;
    int sent = 0;
    for (int k = 0; k < K; k++) {
        urma_sge_t rs;
        cf_sge(&rs, r.mem.buf + BUF * slot, BUF, r.mem.tseg);
        if (cf_post_recv(b, &rs, 1, slot) != 0) {
            CF_FAILF("posting a receive failed after %d messages through the new jetty", k);
            break;
        }
        JT_REQUIRE(cf_side_send(&s, s.mem.buf, 200, URMA_OPC_SEND, 0, 0x400 + (uint64_t)k) == 0);
        if (cf_poll(r.ep.jfc, &cr, 1, CF_WAIT_MS) != 1) {
            CF_FAILF("message %d through the new jetty never arrived", k);
            break;
        }
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.local_id, b->jetty_id.id);
        cf_expect_cr(s.ep.jfc, URMA_CR_SUCCESS, 0x400 + (uint64_t)k, "SEND through jetty B");
        slot = cr.user_ctx;
        sent++;
    }
    JT_CHECK_EQ(sent, K);
    dp_close(&r, &s);
}

int main(int argc, char **argv)
{
    cf_main(argc, argv);
    CF_RUN(send_cr_fields);
    CF_RUN(send_imm);
    CF_RUN(write_plain);
    CF_RUN(send_without_target);
    CF_RUN(write_imm);
    CF_RUN(read_op);
    CF_RUN(atomics);
    CF_RUN(gather_scatter);
    CF_RUN(recv_too_small);
    CF_RUN(complete_enable_zero);
    CF_RUN(recv_matched_by_user_ctx);
    CF_RUN(completion_order);
    CF_RUN(token_violation);
    CF_RUN(send_invalidate);
    CF_RUN(out_of_range);
    CF_RUN(missing_access);
    CF_RUN(rnr_no_retry);
    CF_RUN(rnr_finite_retry);
    CF_RUN(rnr_timer_is_the_targets);
    CF_RUN(rnr_retry_then_success);
    CF_RUN(rnr_target_unimported);
    CF_RUN(um_rules);
    CF_RUN(rc_ignores_tjetty);
    CF_RUN(jfs_to_jfr);
    CF_RUN(single_sge_helpers);
    CF_RUN(shared_jfr_jetty_deleted_before_poll);
    return jt_finish();
}
