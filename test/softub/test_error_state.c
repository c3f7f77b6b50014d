/* softub conformance: error state and flush (URMA-API.md §4.11, §7.2).
 *
 * WRs are held outstanding by RNR (rnr_retry 7, no receive at the target);
 * modify_jetty(ERROR) must then complete them with WR_FLUSH_ERR in post order
 * followed by one hardware-constructed WR_FLUSH_ERR_DONE CR, and flush_jetty /
 * flush_jfs must account for what has not completed. */
#include "conformance.h"

#define MEM 65536

static int es_open(cf_dev_t *d, cf_side_t *a, cf_side_t *b)
{
    if (cf_open(d)) return -1;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.rnr_retry = 7; /* infinite: the WRs stay outstanding */
    return cf_pair_open(d, a, b, &o, MEM);
}

/* Posts n SENDs (user_ctx first..first+n-1) that b has no receive for. */
static int post_stuck(cf_side_t *a, int n, uint64_t first)
{
    urma_sge_t s;
    cf_sge(&s, a->mem.buf, 64, a->mem.tseg);
    for (int i = 0; i < n; i++) {
        urma_jfs_wr_t wr;
        cf_wr_send(&wr, URMA_OPC_SEND, a->tj, &s, 1, 0, first + (uint64_t)i);
        if (cf_post(a->ep.jetty, &wr)) return -1;
    }
    return 0;
}

static int set_error(urma_jetty_t *j)
{
    urma_jetty_attr_t at;
    memset(&at, 0, sizeof at);
    at.mask = JETTY_STATE;
    at.state = URMA_JETTY_STATE_ERROR;
    int rc = cf.urma_modify_jetty(j, &at);
    if (rc != 0) CF_FAILF("urma_modify_jetty(ERROR): %d", rc);
    return rc;
}

/* The first WR of the queue was being retried when the jetty went to ERROR:
 * the sheet allows it to end as flushed or as RNR-exhausted. */
static bool first_wr_status_ok(int st)
{
    return st == URMA_CR_WR_FLUSH_ERR || st == URMA_CR_RNR_RETRY_CNT_EXC_ERR;
}

static void modify_error_flushes(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(es_open(&d, &a, &b) == 0);
    if (cf.urma_query_jetty) {
        urma_jetty_cfg_t qc;
        urma_jetty_attr_t qa;
        memset(&qc, 0, sizeof qc);
        memset(&qa, 0, sizeof qa);
        JT_CHECK_EQ(cf.urma_query_jetty(a.ep.jetty, &qc, &qa), URMA_SUCCESS);
        JT_CHECK_EQ(qa.state, URMA_JETTY_STATE_READY);
        JT_CHECK_EQ(qc.jfs_cfg.depth, a.ep.jetty->jetty_cfg.jfs_cfg.depth);
        JT_CHECK_EQ(qc.jfs_cfg.trans_mode, URMA_TM_RM);
    }
    enum { N = 5 };
    JT_REQUIRE(post_stuck(&a, N, 1) == 0);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_REQUIRE(set_error(a.ep.jetty) == 0);
    urma_cr_t cr[N + 1];
    memset(cr, CF_PATTERN_GARBAGE, sizeof cr);
    int got = cf_poll(a.ep.jfc, cr, N + 1, CF_WAIT_MS);
    JT_CHECK_EQ(got, N + 1);
    for (int i = 0; i < got && i < N; i++) {
        bool ok = i == 0 ? first_wr_status_ok(cr[i].status) : cr[i].status == URMA_CR_WR_FLUSH_ERR;
        if (!ok) CF_FAILF("CR %d after ERROR: status %d, expected WR_FLUSH_ERR", i, cr[i].status);
        JT_CHECK_EQ(cr[i].user_ctx, (uint64_t)i + 1); /* post order */
        JT_CHECK_EQ(cr[i].flag.bs.s_r, 0);
        JT_CHECK_EQ(cr[i].flag.bs.flush_err_done, 0);
        JT_CHECK_EQ(cr[i].local_id, a.ep.jetty->jetty_id.id);
    }
    if (got == N + 1) {
        JT_CHECK_EQ(cr[N].status, URMA_CR_WR_FLUSH_ERR_DONE);
        JT_CHECK_EQ(cr[N].flag.bs.flush_err_done, 1);
        JT_CHECK_EQ(cr[N].local_id, a.ep.jetty->jetty_id.id);
    }
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0); /* exactly one FLUSH_ERR_DONE */
    if (cf.urma_query_jetty) {
        urma_jetty_cfg_t qc;
        urma_jetty_attr_t qa;
        JT_CHECK_EQ(cf.urma_query_jetty(a.ep.jetty, &qc, &qa), URMA_SUCCESS);
        JT_CHECK_EQ(qa.state, URMA_JETTY_STATE_ERROR);
    }
    /* The flushed messages are never delivered. */
    urma_sge_t rs;
    memset(b.mem.buf, 0x19, 256);
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x99) == 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, 256, 0x19), -1);
    /* After the FLUSH_ERR_DONE the jetty can be torn down (§4.13). */
    cf_pair_close(&a, &b);
    cf_close();
    CF_NEED(urma_query_jetty);
}

static void error_without_outstanding(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(es_open(&d, &a, &b) == 0);
    /* One completed WR first: it is not flushed again. */
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 0x1) == 0);
    JT_REQUIRE(post_stuck(&a, 1, 0x10) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 0x10, "SEND with a receive posted");
    JT_REQUIRE(set_error(a.ep.jetty) == 0);
    urma_cr_t cr;
    memset(&cr, 0, sizeof cr);
    JT_REQUIRE(cf_poll(a.ep.jfc, &cr, 1, CF_WAIT_MS) == 1);
    JT_CHECK_EQ(cr.status, URMA_CR_WR_FLUSH_ERR_DONE);
    JT_CHECK_EQ(cr.flag.bs.flush_err_done, 1);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    int n = cf.urma_flush_jetty(a.ep.jetty, 4, &cr);
    JT_CHECK_EQ(n, 0);
    cf_pair_close(&a, &b);
    cf_close();
}

static void flush_jetty_returns_pending(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(es_open(&d, &a, &b) == 0);
    enum { N = 4 };
    JT_REQUIRE(post_stuck(&a, N, 0x21) == 0);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    urma_cr_t fl[16];
    /* Count-returning functions fail with -1 (§2.1). */
    JT_CHECK_EQ(cf.urma_flush_jetty(a.ep.jetty, 16, NULL), -1);
    JT_CHECK_EQ(cf.urma_flush_jetty(NULL, 16, fl), -1);
    JT_REQUIRE(set_error(a.ep.jetty) == 0);
    int seen[N] = {0};
    memset(fl, 0, sizeof fl);
    int n = cf.urma_flush_jetty(a.ep.jetty, 16, fl);
    JT_CHECK(n >= 0 && n <= N);
    for (int i = 0; i < n; i++) {
        if (fl[i].status != URMA_CR_WR_FLUSH_ERR && fl[i].status != URMA_CR_WR_UNHANDLED)
            CF_FAILF("flush_jetty CR %d: status %d", i, fl[i].status);
        long k = (long)fl[i].user_ctx - 0x21;
        if (k < 0 || k >= N || seen[k]) {
            CF_FAILF("flush_jetty CR %d: user_ctx 0x%llx unknown or repeated", i,
                     (unsigned long long)fl[i].user_ctx);
            continue;
        }
        seen[k]++;
    }
    /* The JFC accounts for the rest, then says the flush is done. */
    bool done = false;
    uint64_t deadline = cf_now_ms() + CF_WAIT_MS;
    while (!done && cf_now_ms() < deadline) {
        urma_cr_t cr;
        int k = cf.urma_poll_jfc(a.ep.jfc, 1, &cr);
        JT_REQUIRE(k >= 0);
        if (k == 0) {
            cf_sleep_us(200);
            continue;
        }
        if (cr.status == URMA_CR_WR_FLUSH_ERR_DONE) {
            JT_CHECK_EQ(cr.flag.bs.flush_err_done, 1);
            done = true;
            continue;
        }
        long w = (long)cr.user_ctx - 0x21;
        JT_CHECK(w >= 0 && w < N);
        if (w >= 0 && w < N) seen[w]++;
        JT_CHECK(cr.status == URMA_CR_WR_FLUSH_ERR || (w == 0 && first_wr_status_ok(cr.status)));
    }
    JT_CHECK(done);
    for (int i = 0; i < N; i++)
        if (!seen[i]) CF_FAILF("WR user_ctx 0x%x was neither flushed nor completed", 0x21 + i);
    /* Everything has completed now: nothing left to flush. */
    JT_CHECK_EQ(cf.urma_flush_jetty(a.ep.jetty, 16, fl), 0);
    cf_pair_close(&a, &b);
    cf_close();
}

static void flush_jfs(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(es_open(&d, &a, &b) == 0);
    CF_NEED(urma_create_jfs);
    CF_NEED(urma_post_jfs_wr);
    CF_NEED(urma_modify_jfs);
    CF_NEED(urma_flush_jfs);
    urma_jfs_cfg_t sc;
    cf_jfs_cfg(&sc, a.ep.jfc, URMA_TM_RM, 16);
    sc.rnr_retry = 7;
    urma_jfs_t *jfs = cf.urma_create_jfs(a.ctx, &sc);
    JT_REQUIRE(jfs != NULL);
    enum { N = 3 };
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
    for (int i = 0; i < N; i++) {
        urma_jfs_wr_t wr, *bad = NULL;
        cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 0x31 + (uint64_t)i);
        JT_REQUIRE(cf.urma_post_jfs_wr(jfs, &wr, &bad) == 0);
    }
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    urma_jfs_attr_t at = {JFS_STATE, URMA_JETTY_STATE_ERROR};
    JT_REQUIRE(cf.urma_modify_jfs(jfs, &at) == URMA_SUCCESS);
    int seen[N] = {0};
    /* Room for more records than the queue's depth (16) is just room. */
    urma_cr_t fl[32];
    int n = cf.urma_flush_jfs(jfs, 32, fl);
    JT_CHECK(n >= 0 && n <= N);
    for (int i = 0; i < n; i++) {
        long k = (long)fl[i].user_ctx - 0x31;
        JT_CHECK(fl[i].status == URMA_CR_WR_FLUSH_ERR || fl[i].status == URMA_CR_WR_UNHANDLED);
        if (k >= 0 && k < N) seen[k]++;
    }
    /* The rest come through the JFC, possibly with a FLUSH_ERR_DONE. */
    urma_cr_t cr[8];
    int got = cf_poll(a.ep.jfc, cr, 8, 500);
    for (int i = 0; i < got; i++) {
        if (cr[i].status == URMA_CR_WR_FLUSH_ERR_DONE) continue;
        long k = (long)cr[i].user_ctx - 0x31;
        JT_CHECK(cr[i].status == URMA_CR_WR_FLUSH_ERR ||
                 (k == 0 && first_wr_status_ok(cr[i].status)));
        if (k >= 0 && k < N) seen[k]++;
        JT_CHECK_EQ(cr[i].flag.bs.jetty, 0);
        JT_CHECK_EQ(cr[i].local_id, jfs->jfs_id.id);
    }
    for (int i = 0; i < N; i++)
        if (!seen[i]) CF_FAILF("JFS WR user_ctx 0x%x was neither flushed nor completed", 0x31 + i);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    cf_pair_close(&a, &b);
    cf_close();
}

int main(int argc, char **argv)
{
    cf_main(argc, argv);
    CF_RUN(modify_error_flushes);
    CF_RUN(error_without_outstanding);
    CF_RUN(flush_jetty_returns_pending);
    CF_RUN(flush_jfs);
    return jt_finish();
}
