/* softub conformance: management plane (URMA-API.md §1.5, §2, §4.1-§4.3, §4.10, §7.2).
 *
 * init/uninit, devices, EIDs, contexts and their reference counts, the
 * creation checks of every queue (with the order_type write-back and the
 * mode/order/tp matrix as liburma master checks it), segment registration and
 * token ids, RC bind rules, and the post-time checks of the data path. */
#include "conformance.h"

#include <sys/stat.h>

/* ------------------------------------------------------------------------ */
/* Library, init, devices                                                    */
/* ------------------------------------------------------------------------ */

static void symbols(void)
{
    JT_REQUIRE(cf_load() == 0);
    /* MINIMAL was checked by cf_load; the design exports the rest too (§2.3, §2.4). */
    if (cf_missing[0]) CF_FAILF("unresolved symbols: %s", cf_missing);
    /* The symbols a UMQ-style loader requires (§2.6) include master's get/put_rjetty. */
    JT_CHECK(cf.urma_get_rjetty != NULL);
    JT_CHECK(cf.urma_put_rjetty != NULL);
}

static void init_uninit(void)
{
    JT_REQUIRE(cf_load() == 0);
    JT_CHECK_EQ(cf.urma_uninit(), URMA_SUCCESS); /* never initialised: success */
    JT_CHECK_EQ(cf.urma_init(NULL), URMA_SUCCESS);
    urma_init_attr_t attr = {0, 0};
    JT_CHECK_EQ(cf.urma_init(&attr), URMA_EEXIST);
    JT_CHECK_EQ(cf.urma_init(NULL), URMA_EEXIST);
    JT_CHECK_EQ(cf.urma_uninit(), URMA_SUCCESS);
}

static void device_list(void)
{
    JT_REQUIRE(cf_load() == 0);
    JT_REQUIRE(cf.urma_init(NULL) == URMA_SUCCESS);
    errno = 0;
    JT_CHECK(cf.urma_get_device_list(NULL) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    int n = -1;
    urma_device_t **list = cf.urma_get_device_list(&n);
    JT_REQUIRE(list != NULL);
    JT_CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        urma_device_t *d = list[i];
        JT_REQUIRE(d != NULL);
        JT_CHECK(memchr(d->name, 0, sizeof d->name) != NULL);
        JT_CHECK(d->name[0] != 0);
        JT_CHECK(memchr(d->path, 0, sizeof d->path) != NULL);
        char want[URMA_MAX_PATH];
        snprintf(want, sizeof want, "/dev/uburma/%s", d->name);
        if (strcmp(d->path, want) != 0)
            CF_FAILF("device path \"%.200s\", expected \"%.200s\"", d->path, want);
        JT_CHECK_EQ(d->type, URMA_TRANSPORT_UB);
    }
    char name[URMA_MAX_NAME];
    snprintf(name, sizeof name, "%s", list[0]->name);
    cf.urma_free_device_list(list); /* frees the array only */
    /* The devices stay valid until uninit. */
    urma_device_t *d = cf.urma_get_device_by_name(name);
    JT_REQUIRE(d != NULL);
    JT_CHECK(strcmp(d->name, name) == 0);
    /* A second list names the same devices. */
    int n2 = 0;
    list = cf.urma_get_device_list(&n2);
    JT_REQUIRE(list != NULL);
    JT_CHECK_EQ(n2, n);
    cf.urma_free_device_list(list);
    cf_close();
}

static void device_by_name(void)
{
    JT_REQUIRE(cf_load() == 0);
    JT_REQUIRE(cf.urma_init(NULL) == URMA_SUCCESS);
    errno = 0;
    JT_CHECK(cf.urma_get_device_by_name(NULL) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    char n64[65];
    memset(n64, 'a', 64);
    n64[64] = 0;
    errno = 0;
    JT_CHECK(cf.urma_get_device_by_name(n64) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    char n63[64];
    memset(n63, 'b', 63);
    n63[63] = 0;
    errno = 0;
    JT_CHECK(cf.urma_get_device_by_name(n63) == NULL);
    JT_CHECK_EQ(errno, ENODEV);
    char unknown[] = "no_such_device";
    errno = 0;
    JT_CHECK(cf.urma_get_device_by_name(unknown) == NULL);
    JT_CHECK_EQ(errno, ENODEV);
    char empty[] = "";
    JT_CHECK(cf.urma_get_device_by_name(empty) == NULL);
    int n = 0;
    urma_device_t **list = cf.urma_get_device_list(&n);
    JT_REQUIRE(list != NULL && n >= 1);
    for (int i = 0; i < n; i++) {
        urma_device_t *d = cf.urma_get_device_by_name(list[i]->name);
        JT_CHECK(d != NULL && strcmp(d->name, list[i]->name) == 0);
    }
    cf.urma_free_device_list(list);
    cf_close();
}

static void query_device(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    static uint8_t b1[4096], b2[4096];
    const size_t sz = sizeof(urma_device_attr_t);
    memset(b1, 0xA5, sizeof b1);
    memset(b2, 0x5A, sizeof b2);
    JT_CHECK_EQ(cf.urma_query_device(d.dev, (urma_device_attr_t *)b1), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_query_device(d.dev, (urma_device_attr_t *)b2), URMA_SUCCESS);
    /* Two fills, one result: every byte of the master attr (padding included,
     * liburma memcpy's the struct) was written, and nothing after it (§6.1). */
    long diff = -1;
    for (size_t i = 0; i < sz && diff < 0; i++)
        if (b1[i] != b2[i]) diff = (long)i;
    if (diff >= 0) CF_FAILF("query_device left byte %ld of urma_device_attr_t unwritten", diff);
    long over1 = cf_check_byte(b1 + sz, sizeof b1 - sz, 0xA5);
    long over2 = cf_check_byte(b2 + sz, sizeof b2 - sz, 0x5A);
    if (over1 >= 0 || over2 >= 0)
        CF_FAILF("query_device wrote past %zu bytes (offset %ld)", sz,
                 (long)sz + (over1 >= 0 ? over1 : over2));
    urma_device_attr_t a;
    memcpy(&a, b1, sizeof a);
    const urma_device_cap_t *c = &a.dev_cap;
    JT_CHECK(c->max_jfc > 0);
    JT_CHECK(c->max_jfs > 0);
    JT_CHECK(c->max_jfr > 0);
    JT_CHECK(c->max_jetty > 0);
    JT_CHECK(c->max_jfc_depth > 0);
    JT_CHECK(c->max_jfs_depth > 0);
    JT_CHECK(c->max_jfr_depth > 0);
    JT_CHECK(c->max_jfs_sge >= 1);
    JT_CHECK(c->max_jfs_rsge >= 1);
    JT_CHECK(c->max_jfr_sge >= 1);
    JT_CHECK(c->max_msg_size > 0);
    JT_CHECK(c->max_jfs_inline_len <= c->max_msg_size);
    JT_CHECK(c->trans_mode != 0);
    JT_CHECK_EQ(c->trans_mode & ~(URMA_TM_RM | URMA_TM_RC | URMA_TM_UM), 0);
    JT_CHECK(c->ceq_cnt >= 1);
    JT_CHECK(c->max_eid_cnt >= 1);
    JT_CHECK((c->page_size_cap & 4096) != 0);
    /* CAS and FADD are executed (§3.9), so the device says so. */
    JT_CHECK(c->atomic_feat.bs.cas);
    JT_CHECK(c->atomic_feat.bs.fetch_and_add);
    JT_CHECK(a.port_cnt >= 1 && a.port_cnt <= MAX_PORT_CNT);
    JT_CHECK(a.reserved_jetty_id_min <= a.reserved_jetty_id_max);
    /* Same answer as the query the harness made. */
    JT_CHECK(memcmp(&a, &d.u.attr, sizeof a) == 0);
    JT_CHECK_EQ(cf.urma_query_device(NULL, &a), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_query_device(d.dev, NULL), URMA_EINVAL);
    cf_close();
}

static void eid_list_and_context(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    uint32_t cnt = 0;
    urma_eid_info_t *eids = cf.urma_get_eid_list(d.dev, &cnt);
    JT_REQUIRE(eids != NULL);
    JT_CHECK(cnt >= 1 && cnt <= CF_CAP(&d).max_eid_cnt);
    static const urma_eid_t zero;
    for (uint32_t i = 0; i < cnt; i++)
        JT_CHECK(!cf_eid_eq(&eids[i].eid, &zero));
    urma_eid_info_t first = eids[0];
    cf.urma_free_eid_list(eids);
    cf.urma_free_eid_list(NULL);
    errno = 0;
    JT_CHECK(cf.urma_get_eid_list(NULL, &cnt) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    errno = 0;
    JT_CHECK(cf.urma_get_eid_list(d.dev, NULL) == NULL);
    JT_CHECK_EQ(errno, EINVAL);

    urma_context_t *c1 = cf.urma_create_context(d.dev, first.eid_index);
    JT_REQUIRE(c1 != NULL);
    JT_CHECK(c1->dev == d.dev);
    JT_CHECK(cf_eid_eq(&c1->eid, &first.eid));
    JT_CHECK_EQ(c1->eid_index, first.eid_index);
    JT_CHECK(c1->uasid != 0);
    JT_CHECK(c1->async_fd >= 0 && fcntl(c1->async_fd, F_GETFD) >= 0);
    urma_context_t *c2 = cf.urma_create_context(d.dev, first.eid_index);
    JT_REQUIRE(c2 != NULL);
    JT_CHECK(c2 != c1);
    JT_CHECK(cf_eid_eq(&c2->eid, &c1->eid));
    JT_CHECK_EQ(c2->uasid, c1->uasid); /* the process uasid */
    JT_CHECK(c2->async_fd >= 0 && c2->async_fd != c1->async_fd);
    if (cf.urma_get_uasid) {
        uint32_t u = 0;
        JT_CHECK_EQ(cf.urma_get_uasid(&u), URMA_SUCCESS);
        JT_CHECK_EQ(u, c1->uasid);
    }
    errno = 0;
    JT_CHECK(cf.urma_create_context(NULL, first.eid_index) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    errno = 0;
    JT_CHECK(cf.urma_create_context(d.dev, 0x7fffffffu) == NULL);
    JT_CHECK(errno == EINVAL || errno == EIO);
    JT_CHECK_EQ(cf.urma_delete_context(c2), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_context(c1), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_context(NULL), URMA_EINVAL);
    cf_close();
}

static void str_to_eid(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_eid_t e;
    memset(&e, 0x77, sizeof e);
    JT_CHECK_EQ(cf.urma_str_to_eid("1.2.3.4", &e), 0);
    static const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4};
    JT_CHECK(memcmp(e.raw, v4, 16) == 0);
    memset(&e, 0x77, sizeof e);
    JT_CHECK_EQ(cf.urma_str_to_eid("fe80::1:2", &e), 0);
    static const uint8_t v6[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2};
    JT_CHECK(memcmp(e.raw, v6, 16) == 0);
    JT_CHECK(cf.urma_str_to_eid("not-an-eid", &e) != 0);
    JT_CHECK(cf.urma_str_to_eid("1.2.3.4.5", &e) != 0);

    CF_NEED(urma_get_device_by_eid);
    urma_device_t *dev = cf.urma_get_device_by_eid(d.eid.eid, URMA_TRANSPORT_UB);
    JT_CHECK(dev != NULL && strcmp(dev->name, d.dev->name) == 0);
    urma_eid_t other;
    JT_REQUIRE(cf.urma_str_to_eid("fe80::dead:beef:1", &other) == 0);
    errno = 0;
    JT_CHECK(cf.urma_get_device_by_eid(other, URMA_TRANSPORT_UB) == NULL);
    JT_CHECK_EQ(errno, ENODEV);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* Reference counts                                                          */
/* ------------------------------------------------------------------------ */

#define CF_BUSY(ctx, what)                                                                         \
    do {                                                                                           \
        int rc_ = cf.urma_delete_context(ctx);                                                     \
        if (rc_ != URMA_EAGAIN)                                                                    \
            CF_FAILF("delete_context with a live %s returned %d, expected EAGAIN", what, rc_);     \
        JT_REQUIRE(rc_ == URMA_EAGAIN); /* it may be gone: stop */                                 \
    } while (0)

static void context_refcounts(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *x = cf_ctx(&d), *y = cf_ctx(&d);
    JT_REQUIRE(x && y);

    urma_jfce_t *jfce = cf.urma_create_jfce(x);
    JT_REQUIRE(jfce != NULL);
    JT_CHECK(jfce->urma_ctx == x);
    JT_CHECK(jfce->fd >= 0);
    CF_BUSY(x, "JFCE");
    JT_CHECK_EQ(cf.urma_delete_jfce(jfce), URMA_SUCCESS);

    urma_jfc_t *jfc = cf_jfc(x, 64, NULL);
    JT_REQUIRE(jfc != NULL);
    CF_BUSY(x, "JFC");
    JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);

    urma_token_id_t *tid = cf.urma_alloc_token_id(x);
    JT_REQUIRE(tid != NULL);
    CF_BUSY(x, "token id");
    JT_CHECK_EQ(cf.urma_free_token_id(tid), URMA_SUCCESS);

    cf_mem_t m;
    JT_REQUIRE(cf_mem_alloc(&m, 8192, CF_MEM_MEMALIGN) == 0);
    JT_REQUIRE(cf_mem_register(&m, x, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, 7) == 0);
    CF_BUSY(x, "registered segment");
    cf_mem_free(&m);

    /* Remote objects: owned by y, imported into x. */
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    cf_ep_t ey;
    JT_REQUIRE(cf_ep_open(&ey, y, &o) == 0);
    cf_mem_t my;
    JT_REQUIRE(cf_mem_alloc(&my, 8192, CF_MEM_MEMALIGN) == 0);
    JT_REQUIRE(cf_mem_register(&my, y, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, 9) == 0);
    urma_target_jetty_t *tj =
        cf_import_jetty(x, &ey.jetty->jetty_id, URMA_TM_RM, o.jfr_policy, o.jfr_token);
    JT_REQUIRE(tj != NULL);
    CF_BUSY(x, "target jetty");
    JT_CHECK_EQ(cf.urma_unimport_jetty(tj), URMA_SUCCESS);
    urma_target_seg_t *ts = cf_import_seg(x, &my.tseg->seg, 9, CF_ACCESS_ALL);
    JT_REQUIRE(ts != NULL);
    CF_BUSY(x, "imported segment");
    JT_CHECK_EQ(cf.urma_unimport_seg(ts), URMA_SUCCESS);

    /* Queues that depend on each other. */
    cf_ep_t ex;
    JT_REQUIRE(cf_ep_open(&ex, x, &o) == 0);
    CF_BUSY(x, "JFC+JFR+jetty");
    JT_CHECK_EQ(cf.urma_delete_jetty(ex.jetty), URMA_SUCCESS);
    ex.jetty = NULL;
    CF_BUSY(x, "JFC+JFR");
    JT_CHECK_EQ(cf.urma_delete_jfr(ex.jfr), URMA_SUCCESS);
    ex.jfr = NULL;
    CF_BUSY(x, "JFC");
    if (cf.urma_create_jfs) {
        urma_jfs_cfg_t sc;
        cf_jfs_cfg(&sc, ex.jfc, URMA_TM_RM, 16);
        urma_jfs_t *jfs = cf.urma_create_jfs(x, &sc);
        JT_REQUIRE(jfs != NULL);
        CF_BUSY(x, "JFS");
        JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    }
    cf_ep_close(&ex);

    JT_CHECK_EQ(cf.urma_delete_context(x), URMA_SUCCESS);
    cf_mem_free(&my);
    cf_ep_close(&ey);
    cf_ctx_delete(y);
    cf_close();
    CF_NEED(urma_create_jfs);
}

static void jfce_in_use(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    urma_jfce_t *jfce = cf.urma_create_jfce(ctx);
    JT_REQUIRE(jfce != NULL);
    urma_jfc_t *j1 = cf_jfc(ctx, 16, jfce), *j2 = cf_jfc(ctx, 16, jfce);
    JT_REQUIRE(j1 && j2);
    JT_CHECK(j1->jfc_cfg.jfce == jfce);
    int rc = cf.urma_delete_jfce(jfce);
    JT_CHECK_EQ(rc, URMA_FAIL);
    JT_REQUIRE(rc != URMA_SUCCESS); /* gone: stop before using it */
    JT_CHECK_EQ(cf.urma_delete_jfc(j1), URMA_SUCCESS);
    rc = cf.urma_delete_jfce(jfce);
    JT_CHECK_EQ(rc, URMA_FAIL);
    JT_REQUIRE(rc != URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfc(j2), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfce(jfce), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfce(NULL), URMA_EINVAL);
    cf_ctx_delete(ctx);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* Creation checks (§4.3)                                                    */
/* ------------------------------------------------------------------------ */

#define CF_REFUSED(expr, what)                                                                     \
    do {                                                                                           \
        errno = 0;                                                                                 \
        void *p_ = (void *)(expr);                                                                 \
        int e_ = errno;                                                                            \
        if (p_ != NULL)                                                                            \
            CF_FAILF("%s was accepted", what);                                                     \
        else if (e_ != EINVAL)                                                                     \
            CF_FAILF("%s: NULL with errno %d, expected EINVAL", what, e_);                         \
    } while (0)

static void jfc_create_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    const urma_device_cap_t *c = &CF_CAP(&d);
    urma_jfc_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = 0;
    CF_REFUSED(cf.urma_create_jfc(ctx, &cfg), "JFC depth 0");
    if (c->max_jfc_depth < UINT32_MAX) {
        cfg.depth = c->max_jfc_depth + 1;
        CF_REFUSED(cf.urma_create_jfc(ctx, &cfg), "JFC depth max+1");
    }
    cfg.depth = 16;
    cfg.ceqn = c->ceq_cnt;
    JT_CHECK(cf.urma_create_jfc(ctx, &cfg) == NULL); /* UDMA: ceqn < ceq_cnt */
    JT_CHECK(cf.urma_create_jfc(ctx, NULL) == NULL);
    cfg.ceqn = 0;
    JT_CHECK(cf.urma_create_jfc(NULL, &cfg) == NULL);

    /* The sample creates its JFC with exactly max_jfc_depth. */
    cfg.depth = c->max_jfc_depth;
    cfg.user_ctx = 0x1122334455667788ull;
    urma_jfc_t *big = cf.urma_create_jfc(ctx, &cfg);
    JT_CHECK(big != NULL);
    cfg.depth = 8;
    urma_jfc_t *small = cf.urma_create_jfc(ctx, &cfg);
    JT_REQUIRE(small != NULL);
    JT_CHECK(small->urma_ctx == ctx);
    JT_CHECK(small->jfc_id.id != 0);
    JT_CHECK_EQ(small->jfc_cfg.depth, 8);
    JT_CHECK_EQ(small->jfc_cfg.user_ctx, 0x1122334455667788ull);
    JT_CHECK(small->jfc_cfg.jfce == NULL);
    if (big) {
        JT_CHECK(big->jfc_id.id != small->jfc_id.id);
        JT_CHECK_EQ(big->jfc_cfg.depth, c->max_jfc_depth);
        JT_CHECK_EQ(cf.urma_delete_jfc(big), URMA_SUCCESS);
    }
    JT_CHECK_EQ(cf.urma_delete_jfc(small), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfc(NULL), URMA_EINVAL);
    cf_ctx_delete(ctx);
    cf_close();
}

/* What liburma master does with (mode, order_type) in create_jfs, create_jetty
 * and import_jetty (§4.2): 1 accepted, 0 refused, 2 [UNVERIFIED] below liburma
 * (RC+NO: the code accepts, the guide intercepts). */
static int cf_order_ok(urma_transport_mode_t mode, uint32_t order)
{
    if (order > URMA_NO) return 0;
    if (order == URMA_DEF_ORDER) return 1;
    switch (mode) {
    case URMA_TM_RM:
        return order == URMA_OI;
    case URMA_TM_RC:
        return order == URMA_NO ? 2 : order == URMA_OT || order == URMA_OL;
    case URMA_TM_UM:
        return order == URMA_NO;
    }
    return 0;
}

/* import_jetty's tp check: UTP only under UM, RTP never under UM; UM+CTP [UNVERIFIED]. */
static int cf_tp_ok(urma_transport_mode_t mode, urma_tp_type_t tp)
{
    if (mode == URMA_TM_UM) return tp == URMA_UTP ? 1 : tp == URMA_CTP ? 2 : 0;
    return tp == URMA_RTP || tp == URMA_CTP;
}

static const urma_transport_mode_t cf_modes[3] = {URMA_TM_RM, URMA_TM_RC, URMA_TM_UM};

static void jfs_create_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    CF_NEED(urma_create_jfs);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    const urma_device_cap_t *c = &CF_CAP(&d);
    urma_jfc_t *jfc = cf_jfc(ctx, 256, NULL);
    JT_REQUIRE(jfc);
    urma_jfs_cfg_t cfg;

    cf_jfs_cfg(&cfg, NULL, URMA_TM_RM, 16);
    CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS without JFC");
    uint32_t bad_modes[3] = {0, 3, 8};
    for (int i = 0; i < 3; i++) {
        cf_jfs_cfg(&cfg, jfc, (urma_transport_mode_t)bad_modes[i], 16);
        CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS with an invalid trans_mode");
    }
    cf_jfs_cfg(&cfg, jfc, URMA_TM_RM, 0);
    CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS depth 0");
    if (c->max_jfs_depth < UINT32_MAX) {
        cf_jfs_cfg(&cfg, jfc, URMA_TM_RM, c->max_jfs_depth + 1);
        CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS depth max+1");
    }
    cf_jfs_cfg(&cfg, jfc, URMA_TM_RM, 16);
    cfg.max_inline_data = c->max_jfs_inline_len + 1;
    CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS max_inline_data > max_jfs_inline_len");
    if (c->max_jfs_sge < 255) {
        cf_jfs_cfg(&cfg, jfc, URMA_TM_RM, 16);
        cfg.max_sge = (uint8_t)(c->max_jfs_sge + 1);
        CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS max_sge > max_jfs_sge");
    }
    if (c->max_jfs_rsge < 255) {
        cf_jfs_cfg(&cfg, jfc, URMA_TM_RM, 16);
        cfg.max_rsge = (uint8_t)(c->max_jfs_rsge + 1);
        CF_REFUSED(cf.urma_create_jfs(ctx, &cfg), "JFS max_rsge > max_jfs_rsge");
    }

    for (int m = 0; m < 3; m++) {
        for (uint32_t ord = 0; ord <= 5; ord++) {
            urma_transport_mode_t mode = cf_modes[m];
            cf_jfs_cfg(&cfg, jfc, mode, 16);
            cfg.flag.bs.order_type = ord;
            cfg.user_ctx = 0xabcdef;
            errno = 0;
            urma_jfs_t *jfs = cf.urma_create_jfs(ctx, &cfg);
            int e = errno;
            /* liburma checks and converts the order, then the provider may still refuse
             * an RC JFS (UDMA's create_jfs does; the sheet is silent): either is correct,
             * but the converted order was written back by then. */
            int passes = cf_order_ok(mode, ord);
            int want = mode == URMA_TM_RC && passes ? 2 : passes;
            uint32_t conv = ord == URMA_DEF_ORDER ? cf_default_order(mode) : ord;
            if (!jfs && passes && cfg.flag.bs.order_type != conv)
                CF_FAILF("JFS %s order %u refused after the order check: cfg written back as %u, "
                         "expected %u",
                         cf_mode_name(mode), ord, cfg.flag.bs.order_type, conv);
            if (jfs) {
                if (want == 0) CF_FAILF("JFS %s order %u accepted", cf_mode_name(mode), ord);
                if (cfg.flag.bs.order_type != conv)
                    CF_FAILF("JFS %s order %u: cfg written back as %u, expected %u",
                             cf_mode_name(mode), ord, cfg.flag.bs.order_type, conv);
                JT_CHECK_EQ(jfs->jfs_cfg.flag.bs.order_type, conv);
                JT_CHECK(jfs->urma_ctx == ctx);
                JT_CHECK(jfs->jfs_id.id != 0);
                JT_CHECK_EQ(jfs->jfs_cfg.trans_mode, mode);
                JT_CHECK_EQ(jfs->jfs_cfg.depth, 16);
                JT_CHECK(jfs->jfs_cfg.jfc == jfc);
                JT_CHECK_EQ(jfs->jfs_cfg.user_ctx, 0xabcdef);
                JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
            } else {
                if (want == 1)
                    CF_FAILF("JFS %s order %u refused (errno %d)", cf_mode_name(mode), ord, e);
                else if (e != EINVAL)
                    CF_FAILF("JFS %s order %u: errno %d, expected EINVAL", cf_mode_name(mode), ord,
                             e);
            }
        }
    }
    /* max_inline_data 0 means the device maximum. */
    cf_jfs_cfg(&cfg, jfc, URMA_TM_RM, c->max_jfs_depth);
    cfg.max_inline_data = 0;
    cfg.max_sge = (uint8_t)(c->max_jfs_sge < 255 ? c->max_jfs_sge : 255);
    urma_jfs_t *jfs = cf.urma_create_jfs(ctx, &cfg);
    JT_CHECK(jfs != NULL);
    if (jfs) JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);
    cf_ctx_delete(ctx);
    cf_close();
}

static void jfr_create_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    const urma_device_cap_t *c = &CF_CAP(&d);
    urma_jfc_t *jfc = cf_jfc(ctx, 256, NULL);
    JT_REQUIRE(jfc);
    urma_jfr_cfg_t cfg;
    cf_jfr_cfg(&cfg, NULL, URMA_TM_RM, 16, 1);
    CF_REFUSED(cf.urma_create_jfr(ctx, &cfg), "JFR without JFC");
    cf_jfr_cfg(&cfg, jfc, (urma_transport_mode_t)0, 16, 1);
    CF_REFUSED(cf.urma_create_jfr(ctx, &cfg), "JFR trans_mode 0");
    cf_jfr_cfg(&cfg, jfc, (urma_transport_mode_t)3, 16, 1);
    CF_REFUSED(cf.urma_create_jfr(ctx, &cfg), "JFR trans_mode 3");
    cf_jfr_cfg(&cfg, jfc, URMA_TM_RM, 0, 1);
    CF_REFUSED(cf.urma_create_jfr(ctx, &cfg), "JFR depth 0");
    if (c->max_jfr_depth < UINT32_MAX) {
        cf_jfr_cfg(&cfg, jfc, URMA_TM_RM, c->max_jfr_depth + 1, 1);
        CF_REFUSED(cf.urma_create_jfr(ctx, &cfg), "JFR depth max+1");
    }
    if (c->max_jfr_sge < 255) {
        cf_jfr_cfg(&cfg, jfc, URMA_TM_RM, 16, 1);
        cfg.max_sge = (uint8_t)(c->max_jfr_sge + 1);
        CF_REFUSED(cf.urma_create_jfr(ctx, &cfg), "JFR max_sge > max_jfr_sge");
    }
    urma_jfr_t *jfrs[3] = {NULL, NULL, NULL};
    for (int m = 0; m < 3; m++) {
        cf_jfr_cfg(&cfg, jfc, cf_modes[m], m == 0 ? c->max_jfr_depth : 16, 0x42 + (uint32_t)m);
        cfg.user_ctx = 77;
        jfrs[m] = cf.urma_create_jfr(ctx, &cfg);
        if (!jfrs[m]) {
            CF_FAILF("JFR %s refused (errno %d)", cf_mode_name(cf_modes[m]), errno);
            continue;
        }
        JT_CHECK_EQ(cfg.flag.bs.order_type, cf_default_order(cf_modes[m])); /* written back */
        urma_jfr_t *r = jfrs[m];
        JT_CHECK(r->urma_ctx == ctx);
        JT_CHECK(r->jfr_id.id != 0);
        JT_CHECK(cf_eid_eq(&r->jfr_id.eid, &ctx->eid));
        JT_CHECK_EQ(r->jfr_cfg.flag.bs.order_type, cf_default_order(cf_modes[m]));
        JT_CHECK_EQ(r->jfr_cfg.trans_mode, cf_modes[m]);
        JT_CHECK_EQ(r->jfr_cfg.token_value.token, 0x42 + (uint32_t)m);
        JT_CHECK(r->jfr_cfg.jfc == jfc);
        JT_CHECK_EQ(r->jfr_cfg.user_ctx, 77);
        for (int k = 0; k < m; k++)
            if (jfrs[k]) JT_CHECK(jfrs[k]->jfr_id.id != r->jfr_id.id);
    }
    for (int m = 0; m < 3; m++)
        if (jfrs[m]) JT_CHECK_EQ(cf.urma_delete_jfr(jfrs[m]), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfr(NULL), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);
    cf_ctx_delete(ctx);
    cf_close();
}

static void jetty_create_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    const urma_device_cap_t *c = &CF_CAP(&d);
    urma_jfc_t *jfc = cf_jfc(ctx, 512, NULL);
    JT_REQUIRE(jfc);
    urma_jfr_cfg_t rcfg;
    cf_jfr_cfg(&rcfg, jfc, URMA_TM_RM, 64, 3);
    urma_jfr_t *rm_jfr = cf.urma_create_jfr(ctx, &rcfg);
    cf_jfr_cfg(&rcfg, jfc, URMA_TM_RC, 64, 3);
    urma_jfr_t *rc_jfr = cf.urma_create_jfr(ctx, &rcfg); /* converted to OL */
    JT_REQUIRE(rm_jfr && rc_jfr);
    urma_jetty_cfg_t cfg;

    cf_jetty_cfg(&cfg, jfc, rm_jfr, URMA_TM_RM, 16);
    urma_jfr_cfg_t old_style;
    cf_jfr_cfg(&old_style, jfc, URMA_TM_RM, 16, 3);
    cfg.flag.bs.share_jfr = URMA_NO_SHARE_JFR;
    cfg.jfr_cfg = &old_style;
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty with share_jfr 0 on UB");
    cf_jetty_cfg(&cfg, jfc, NULL, URMA_TM_RM, 16);
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty without shared.jfr");
    cf_jetty_cfg(&cfg, jfc, rc_jfr, URMA_TM_RM, 16);
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "RM jetty on an RC JFR");
    cf_jetty_cfg(&cfg, NULL, rm_jfr, URMA_TM_RM, 16);
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty without jfs_cfg.jfc");
    cf_jetty_cfg(&cfg, jfc, rm_jfr, (urma_transport_mode_t)0, 16);
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty trans_mode 0");
    cf_jetty_cfg(&cfg, jfc, rm_jfr, URMA_TM_RM, 0);
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty depth 0");
    if (c->max_jfs_depth < UINT32_MAX) {
        cf_jetty_cfg(&cfg, jfc, rm_jfr, URMA_TM_RM, c->max_jfs_depth + 1);
        CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty depth max+1");
    }
    if (c->max_jfs_sge < 255) {
        cf_jetty_cfg(&cfg, jfc, rm_jfr, URMA_TM_RM, 16);
        cfg.jfs_cfg.max_sge = (uint8_t)(c->max_jfs_sge + 1);
        CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty max_sge > max_jfs_sge");
    }
    cf_jetty_cfg(&cfg, jfc, rm_jfr, URMA_TM_RM, 16);
    cfg.jfs_cfg.max_inline_data = c->max_jfs_inline_len + 1;
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "jetty max_inline_data too large");
    /* RC JFR converted to OL, jetty asking for OT: the orders differ. */
    cf_jetty_cfg(&cfg, jfc, rc_jfr, URMA_TM_RC, 16);
    cfg.jfs_cfg.flag.bs.order_type = URMA_OT;
    CF_REFUSED(cf.urma_create_jetty(ctx, &cfg), "RC jetty OT on an OL JFR");

    /* The order matrix, each with a JFR asking for the same order. */
    urma_jetty_t *made[32];
    int nmade = 0;
    for (int m = 0; m < 3; m++) {
        for (uint32_t ord = 0; ord <= 5; ord++) {
            urma_transport_mode_t mode = cf_modes[m];
            int want = cf_order_ok(mode, ord);
            uint32_t conv = ord == URMA_DEF_ORDER ? cf_default_order(mode) : ord;
            cf_jfr_cfg(&rcfg, jfc, mode, 16, 5);
            rcfg.flag.bs.order_type = ord;
            urma_jfr_t *jfr = cf.urma_create_jfr(ctx, &rcfg);
            if (want == 1 && !jfr) {
                CF_FAILF("JFR %s order %u refused (errno %d)", cf_mode_name(mode), ord, errno);
                continue;
            }
            if (jfr) JT_CHECK_EQ(rcfg.flag.bs.order_type, conv);
            urma_jfr_t *use = jfr ? jfr : (mode == URMA_TM_RC ? rc_jfr : rm_jfr);
            cf_jetty_cfg(&cfg, jfc, use, mode, 16);
            cfg.jfs_cfg.flag.bs.order_type = ord;
            cfg.user_ctx = 0x99;
            errno = 0;
            urma_jetty_t *j = cf.urma_create_jetty(ctx, &cfg);
            int e = errno;
            if (j) {
                if (want == 0) CF_FAILF("jetty %s order %u accepted", cf_mode_name(mode), ord);
                if (cfg.jfs_cfg.flag.bs.order_type != conv)
                    CF_FAILF("jetty %s order %u written back as %u, expected %u",
                             cf_mode_name(mode), ord, cfg.jfs_cfg.flag.bs.order_type, conv);
                JT_CHECK(j->urma_ctx == ctx);
                JT_CHECK(j->jetty_id.id != 0);
                JT_CHECK(cf_eid_eq(&j->jetty_id.eid, &ctx->eid));
                JT_CHECK(j->remote_jetty == NULL);
                JT_CHECK(j->jetty_cfg.shared.jfr == use);
                JT_CHECK_EQ(j->jetty_cfg.flag.bs.share_jfr, 1);
                JT_CHECK_EQ(j->jetty_cfg.jfs_cfg.flag.bs.order_type, conv);
                JT_CHECK_EQ(j->jetty_cfg.jfs_cfg.trans_mode, mode);
                JT_CHECK_EQ(j->jetty_cfg.user_ctx, 0x99);
                for (int k = 0; k < nmade; k++)
                    JT_CHECK(made[k]->jetty_id.id != j->jetty_id.id);
                JT_CHECK_EQ(cf.urma_delete_jetty(j), URMA_SUCCESS);
            } else {
                if (want == 1)
                    CF_FAILF("jetty %s order %u refused (errno %d)", cf_mode_name(mode), ord, e);
                else if (e != EINVAL)
                    CF_FAILF("jetty %s order %u: errno %d, expected EINVAL", cf_mode_name(mode),
                             ord, e);
            }
            if (jfr) JT_CHECK_EQ(cf.urma_delete_jfr(jfr), URMA_SUCCESS);
        }
    }
    /* Several live jetties have distinct ids. */
    for (int i = 0; i < 8; i++) {
        cf_jetty_cfg(&cfg, jfc, rm_jfr, URMA_TM_RM, 16);
        made[nmade] = cf.urma_create_jetty(ctx, &cfg);
        JT_REQUIRE(made[nmade] != NULL);
        for (int k = 0; k < nmade; k++)
            JT_CHECK(made[k]->jetty_id.id != made[nmade]->jetty_id.id);
        nmade++;
    }
    for (int k = 0; k < nmade; k++)
        JT_CHECK_EQ(cf.urma_delete_jetty(made[k]), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jetty(NULL), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_delete_jfr(rm_jfr), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfr(rc_jfr), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);
    cf_ctx_delete(ctx);
    cf_close();
}

static void import_jetty_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d), *peer = cf_ctx(&d);
    JT_REQUIRE(ctx && peer);
    cf_ep_t ep[3];
    for (int m = 0; m < 3; m++) {
        cf_ep_opts_t o = cf_ep_defaults(cf_modes[m]);
        JT_REQUIRE(cf_ep_open(&ep[m], peer, &o) == 0);
    }
    for (int m = 0; m < 3; m++) {
        urma_transport_mode_t mode = cf_modes[m];
        const urma_jetty_id_t *id = &ep[m].jetty->jetty_id;
        for (uint32_t ord = 0; ord <= 5; ord++) {
            for (int tp = URMA_RTP; tp <= URMA_UTP; tp++) {
                int want_o = cf_order_ok(mode, ord), want_t = cf_tp_ok(mode, (urma_tp_type_t)tp);
                int want = want_o == 0 || want_t == 0 ? 0 : want_o == 2 || want_t == 2 ? 2 : 1;
                uint32_t conv = ord == URMA_DEF_ORDER ? cf_default_order(mode) : ord;
                urma_rjetty_t rj;
                memset(&rj, 0, sizeof rj);
                rj.jetty_id = *id;
                rj.trans_mode = mode;
                rj.type = URMA_JETTY;
                rj.flag.bs.token_policy = URMA_TOKEN_PLAIN_TEXT;
                rj.flag.bs.order_type = ord;
                rj.tp_type = (urma_tp_type_t)tp;
                urma_token_t tok = {ep[m].o.jfr_token};
                urma_target_jetty_t *tj = cf.urma_import_jetty(ctx, &rj, &tok);
                if (!tj) {
                    if (want == 1)
                        CF_FAILF("import %s order %u tp %d refused (errno %d)", cf_mode_name(mode),
                                 ord, tp, errno);
                    continue;
                }
                if (want == 0)
                    CF_FAILF("import %s order %u tp %d accepted", cf_mode_name(mode), ord, tp);
                if (rj.flag.bs.order_type != conv)
                    CF_FAILF("import %s order %u written back as %u, expected %u",
                             cf_mode_name(mode), ord, rj.flag.bs.order_type, conv);
                JT_CHECK(cf_id_eq(&tj->id, id));
                JT_CHECK_EQ(tj->trans_mode, mode);
                JT_CHECK_EQ(tj->type, URMA_JETTY);
                JT_CHECK_EQ(tj->flag.bs.order_type, conv);
                JT_CHECK_EQ(tj->tp_type, tp);
                JT_CHECK_EQ(cf.urma_unimport_jetty(tj), URMA_SUCCESS);
            }
        }
    }
    /* What urma_get_rjetty describes imports as it is, in every mode. */
    for (int m = 0; m < 3; m++) {
        urma_rjetty_t *got = NULL;
        uint32_t len = 0;
        JT_CHECK_EQ(cf.urma_get_rjetty(ep[m].jetty, &got, &len), URMA_SUCCESS);
        if (!got) continue;
        JT_CHECK_EQ(got->trans_mode, cf_modes[m]);
        urma_token_t tok = {ep[m].o.jfr_token};
        urma_target_jetty_t *tj = cf.urma_import_jetty(ctx, got, &tok);
        if (!tj)
            CF_FAILF("get_rjetty of a %s jetty (tp %d) does not import", cf_mode_name(cf_modes[m]),
                     got->tp_type);
        else
            JT_CHECK_EQ(cf.urma_unimport_jetty(tj), URMA_SUCCESS);
        cf.urma_put_rjetty(got);
    }
    /* NULL token (the kernel path rejects it), invalid mode, NULL rjetty. */
    urma_rjetty_t rj;
    memset(&rj, 0, sizeof rj);
    rj.jetty_id = ep[0].jetty->jetty_id;
    rj.trans_mode = URMA_TM_RM;
    rj.type = URMA_JETTY;
    rj.flag.bs.token_policy = URMA_TOKEN_PLAIN_TEXT;
    rj.tp_type = URMA_RTP;
    JT_CHECK(cf.urma_import_jetty(ctx, &rj, NULL) == NULL);
    urma_token_t tok = {ep[0].o.jfr_token};
    rj.trans_mode = (urma_transport_mode_t)0;
    JT_CHECK(cf.urma_import_jetty(ctx, &rj, &tok) == NULL);
    rj.trans_mode = (urma_transport_mode_t)3;
    JT_CHECK(cf.urma_import_jetty(ctx, &rj, &tok) == NULL);
    JT_CHECK(cf.urma_import_jetty(ctx, NULL, &tok) == NULL);
    JT_CHECK(cf.urma_import_jetty(NULL, &rj, &tok) == NULL);
    JT_CHECK(cf.urma_unimport_jetty(NULL) != URMA_SUCCESS);
    /* The same jetty imported twice gives two handles, each released once. */
    urma_target_jetty_t *t1 =
        cf_import_jetty(ctx, &ep[0].jetty->jetty_id, URMA_TM_RM, URMA_TOKEN_PLAIN_TEXT, tok.token);
    urma_target_jetty_t *t2 =
        cf_import_jetty(ctx, &ep[0].jetty->jetty_id, URMA_TM_RM, URMA_TOKEN_PLAIN_TEXT, tok.token);
    JT_CHECK(t1 && t2 && t1 != t2);
    if (t1) JT_CHECK_EQ(cf.urma_unimport_jetty(t1), URMA_SUCCESS);
    if (t2) JT_CHECK_EQ(cf.urma_unimport_jetty(t2), URMA_SUCCESS);
    for (int m = 0; m < 3; m++)
        cf_ep_close(&ep[m]);
    cf_ctx_delete(peer);
    cf_ctx_delete(ctx);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* Segments and token ids (§4.10)                                            */
/* ------------------------------------------------------------------------ */

static urma_target_seg_t *reg(urma_context_t *ctx, void *va, size_t len, uint32_t access,
                              urma_token_id_t *tid, uint32_t tid_valid)
{
    urma_seg_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.va = (uint64_t)(uintptr_t)va;
    cfg.len = len;
    cfg.token_id = tid;
    cfg.token_value.token = 0x1234;
    cfg.flag.bs.token_policy = URMA_TOKEN_PLAIN_TEXT;
    cfg.flag.bs.access = access;
    cfg.flag.bs.token_id_valid = tid_valid;
    cfg.user_ctx = 0x5151;
    return cf.urma_register_seg(ctx, &cfg);
}

static void register_seg_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    void *buf = NULL;
    JT_REQUIRE(posix_memalign(&buf, 4096, 65536) == 0);
    urma_token_id_t *tid = cf.urma_alloc_token_id(ctx);
    JT_REQUIRE(tid != NULL);

    CF_REFUSED(reg(ctx, NULL, 4096, URMA_ACCESS_READ, NULL, 0), "segment va 0");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_LOCAL_ONLY | URMA_ACCESS_READ, NULL, 0),
               "LOCAL_ONLY|READ");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_LOCAL_ONLY | CF_ACCESS_ALL, NULL, 0),
               "LOCAL_ONLY|READ|WRITE|ATOMIC");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_WRITE, NULL, 0), "WRITE without READ");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_ATOMIC, NULL, 0), "ATOMIC alone");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_ATOMIC | URMA_ACCESS_READ, NULL, 0), "ATOMIC|READ");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_ATOMIC | URMA_ACCESS_WRITE, NULL, 0),
               "ATOMIC|WRITE");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_READ, NULL, 1), "token_id_valid without token_id");
    CF_REFUSED(reg(ctx, buf, 4096, URMA_ACCESS_READ, tid, 0), "token_id without token_id_valid");

    static const uint32_t good[] = {URMA_ACCESS_LOCAL_ONLY, URMA_ACCESS_READ,
                                    URMA_ACCESS_READ | URMA_ACCESS_WRITE, CF_ACCESS_ALL};
    urma_target_seg_t *segs[4];
    for (int i = 0; i < 4; i++) {
        char *va = (char *)buf + (size_t)i * 16384;
        segs[i] = reg(ctx, va, 16384, good[i], NULL, 0);
        if (!segs[i]) {
            CF_FAILF("segment with access 0x%x refused (errno %d)", good[i], errno);
            continue;
        }
        urma_target_seg_t *t = segs[i];
        urma_eid_t se = cf_seg_eid(t);
        JT_CHECK(cf_eid_eq(&se, &ctx->eid));
        JT_CHECK_EQ(t->seg.ubva.uasid, ctx->uasid);
        JT_CHECK_EQ(cf_seg_va(t), (uint64_t)(uintptr_t)va);
        JT_CHECK_EQ(t->seg.len, 16384);
        JT_CHECK_EQ(t->seg.attr.bs.access, good[i]);
        JT_CHECK_EQ(t->seg.attr.bs.token_policy, URMA_TOKEN_PLAIN_TEXT);
        JT_CHECK_EQ(t->seg.attr.bs.user_token_id, 0);
        /* liburma allocated a token id for this segment. */
        JT_CHECK(t->token_id != NULL);
        if (t->token_id) JT_CHECK_EQ(t->seg.token_id, t->token_id->token_id);
        for (int k = 0; k < i; k++)
            if (segs[k]) JT_CHECK(segs[k]->seg.token_id != t->seg.token_id);
    }
    for (int i = 0; i < 4; i++)
        if (segs[i]) JT_CHECK_EQ(cf.urma_unregister_seg(segs[i]), URMA_SUCCESS);
    JT_CHECK(cf.urma_unregister_seg(NULL) != URMA_SUCCESS);
    JT_CHECK(cf.urma_register_seg(ctx, NULL) == NULL);
    JT_CHECK_EQ(cf.urma_free_token_id(tid), URMA_SUCCESS);
    free(buf);
    cf_ctx_delete(ctx);
    cf_close();
}

static void import_seg_checks(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d), *peer = cf_ctx(&d);
    JT_REQUIRE(ctx && peer);
    cf_mem_t m, mn;
    JT_REQUIRE(cf_mem_alloc(&m, 8192, CF_MEM_MEMALIGN) == 0);
    JT_REQUIRE(cf_mem_register(&m, peer, CF_ACCESS_ALL, URMA_TOKEN_PLAIN_TEXT, 0xcafe) == 0);
    JT_REQUIRE(cf_mem_alloc(&mn, 8192, CF_MEM_MEMALIGN) == 0);
    JT_REQUIRE(cf_mem_register(&mn, peer, CF_ACCESS_ALL, URMA_TOKEN_NONE, 0) == 0);
    urma_seg_t seg = m.tseg->seg;
    urma_import_seg_flag_t f;
    f.value = 0;
    f.bs.access = CF_ACCESS_ALL;
    errno = 0;
    JT_CHECK(cf.urma_import_seg(ctx, &seg, NULL, 0, f) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    urma_target_seg_t *t = cf_import_seg(ctx, &seg, 0xcafe, CF_ACCESS_ALL);
    JT_REQUIRE(t != NULL);
    JT_CHECK(memcmp(&t->seg.ubva, &seg.ubva, sizeof seg.ubva) == 0);
    JT_CHECK_EQ(t->seg.len, seg.len);
    JT_CHECK_EQ(t->seg.attr.value, seg.attr.value);
    JT_CHECK_EQ(t->seg.token_id, seg.token_id);
    JT_CHECK(t->token_id == NULL); /* imported segments own no token id */
    JT_CHECK_EQ(cf.urma_unimport_seg(t), URMA_SUCCESS);
    /* Policy NONE: a NULL token is allowed. */
    urma_seg_t segn = mn.tseg->seg;
    urma_target_seg_t *tn = cf.urma_import_seg(ctx, &segn, NULL, 0, f);
    JT_CHECK(tn != NULL);
    if (tn) JT_CHECK_EQ(cf.urma_unimport_seg(tn), URMA_SUCCESS);
    JT_CHECK(cf.urma_unimport_seg(NULL) != URMA_SUCCESS);
    cf_mem_free(&m);
    cf_mem_free(&mn);
    cf_ctx_delete(peer);
    cf_ctx_delete(ctx);
    cf_close();
}

static void token_id_lifecycle(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    void *buf = NULL;
    JT_REQUIRE(posix_memalign(&buf, 4096, 16384) == 0);
    urma_token_id_t *tid = cf.urma_alloc_token_id(ctx);
    JT_REQUIRE(tid != NULL);
    JT_CHECK(tid->urma_ctx == ctx);
    urma_token_id_t *tid2 = cf.urma_alloc_token_id(ctx);
    JT_REQUIRE(tid2 != NULL);
    JT_CHECK(tid2->token_id != tid->token_id);
    JT_CHECK_EQ(cf.urma_free_token_id(tid2), URMA_SUCCESS);

    urma_target_seg_t *s1 = reg(ctx, buf, 8192, CF_ACCESS_ALL, tid, 1);
    urma_target_seg_t *s2 = reg(ctx, (char *)buf + 8192, 8192, URMA_ACCESS_READ, tid, 1);
    JT_REQUIRE(s1 && s2);
    JT_CHECK(s1->token_id == tid);
    JT_CHECK_EQ(s1->seg.token_id, tid->token_id);
    JT_CHECK_EQ(s2->seg.token_id, tid->token_id);
    JT_CHECK_EQ(s1->seg.attr.bs.user_token_id, 1);
    JT_CHECK_EQ(cf.urma_free_token_id(tid), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_unregister_seg(s1), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_free_token_id(tid), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_unregister_seg(s2), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_free_token_id(tid), URMA_SUCCESS);
    JT_CHECK(cf.urma_free_token_id(NULL) != URMA_SUCCESS);
    free(buf);
    cf_ctx_delete(ctx);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* Import flags and the 25.12+ import/bind forms (§2.5, §3.8)               */
/* ------------------------------------------------------------------------ */

/* share_tp may be 1 only for RC with target ordering (§3.8; the UMDK
 * sample's "mode 3"). */
static void import_share_tp(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d), *peer = cf_ctx(&d);
    JT_REQUIRE(ctx && peer);
    cf_ep_opts_t rc = cf_ep_defaults(URMA_TM_RC), rm = cf_ep_defaults(URMA_TM_RM);
    cf_ep_t b, c;
    JT_REQUIRE(cf_ep_open(&b, peer, &rc) == 0);
    JT_REQUIRE(cf_ep_open(&c, peer, &rm) == 0);
    urma_rjetty_t rj;
    memset(&rj, 0, sizeof rj);
    rj.jetty_id = b.jetty->jetty_id;
    rj.trans_mode = URMA_TM_RC;
    rj.type = URMA_JETTY;
    rj.flag.bs.token_policy = rc.jfr_policy;
    rj.flag.bs.order_type = URMA_OT;
    rj.flag.bs.share_tp = 1;
    rj.tp_type = cf_default_tp(URMA_TM_RC);
    urma_token_t tok = {rc.jfr_token};
    urma_target_jetty_t *t = cf.urma_import_jetty(ctx, &rj, &tok);
    JT_CHECK(t != NULL);
    if (t) JT_CHECK_EQ(cf.urma_unimport_jetty(t), URMA_SUCCESS);
    rj.flag.bs.order_type = URMA_DEF_ORDER; /* RC, but not target ordering */
    JT_CHECK(cf.urma_import_jetty(ctx, &rj, &tok) == NULL);
    rj.jetty_id = c.jetty->jetty_id;
    rj.trans_mode = URMA_TM_RM;
    rj.flag.bs.token_policy = rm.jfr_policy;
    rj.flag.bs.order_type = URMA_DEF_ORDER;
    rj.tp_type = cf_default_tp(URMA_TM_RM);
    urma_token_t tok_rm = {rm.jfr_token};
    JT_CHECK(cf.urma_import_jetty(ctx, &rj, &tok_rm) == NULL);
    cf_ep_close(&b);
    cf_ep_close(&c);
    cf_ctx_delete(peer);
    cf_ctx_delete(ctx);
    cf_close();
}

/* urma_import_jetty_ex and urma_bind_jetty_ex (25.12+): by their presence a
 * program tells the 25.12+ layout from 24.12 (§2.5, §5.3). Every argument,
 * the transport-path configuration included, is required; with one, they
 * behave as urma_import_jetty and urma_bind_jetty. */
typedef urma_target_jetty_t *(*lc_import_ex_fn)(urma_context_t *, urma_rjetty_t *, urma_token_t *,
                                                urma_import_jetty_ex_cfg_t *);
typedef urma_status_t (*lc_bind_ex_fn)(urma_jetty_t *, urma_target_jetty_t *,
                                       urma_bind_jetty_ex_cfg_t *);

static void import_bind_ex(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    lc_import_ex_fn import_ex = (lc_import_ex_fn)dlsym(cf_handle, "urma_import_jetty_ex");
    lc_bind_ex_fn bind_ex = (lc_bind_ex_fn)dlsym(cf_handle, "urma_bind_jetty_ex");
    if (!import_ex || !bind_ex) CF_FAILF("the library lacks urma_import_jetty_ex/urma_bind_jetty_ex");
    JT_REQUIRE(import_ex && bind_ex);
    urma_context_t *ctx = cf_ctx(&d), *peer = cf_ctx(&d);
    JT_REQUIRE(ctx && peer);
    cf_ep_opts_t rc = cf_ep_defaults(URMA_TM_RC);
    cf_ep_t a, b;
    JT_REQUIRE(cf_ep_open(&a, ctx, &rc) == 0);
    JT_REQUIRE(cf_ep_open(&b, peer, &rc) == 0);
    /* The configurations are opaque to the caller's code here: zeroed room. */
    uint64_t cfg_room[64];
    memset(cfg_room, 0, sizeof cfg_room);
    urma_import_jetty_ex_cfg_t *icfg = (urma_import_jetty_ex_cfg_t *)cfg_room;
    urma_bind_jetty_ex_cfg_t *bcfg = (urma_bind_jetty_ex_cfg_t *)cfg_room;
    urma_rjetty_t rj;
    memset(&rj, 0, sizeof rj);
    rj.jetty_id = b.jetty->jetty_id;
    rj.trans_mode = URMA_TM_RC;
    rj.type = URMA_JETTY;
    rj.flag.bs.token_policy = rc.jfr_policy;
    rj.flag.bs.order_type = URMA_DEF_ORDER;
    rj.tp_type = cf_default_tp(URMA_TM_RC);
    urma_token_t tok = {rc.jfr_token};

    errno = 0;
    JT_CHECK(import_ex(ctx, &rj, &tok, NULL) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    errno = 0;
    JT_CHECK(import_ex(ctx, &rj, NULL, icfg) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    urma_target_jetty_t *tb = import_ex(ctx, &rj, &tok, icfg);
    JT_REQUIRE(tb != NULL);
    JT_CHECK_EQ(tb->id.id, b.jetty->jetty_id.id);
    JT_CHECK_EQ(tb->trans_mode, URMA_TM_RC);

    JT_CHECK_EQ(bind_ex(a.jetty, tb, NULL), URMA_EINVAL);
    JT_CHECK(a.jetty->remote_jetty == NULL);
    JT_CHECK_EQ(bind_ex(NULL, tb, bcfg), URMA_EINVAL);
    JT_CHECK_EQ(bind_ex(a.jetty, tb, bcfg), URMA_SUCCESS);
    JT_CHECK(a.jetty->remote_jetty == tb);
    JT_CHECK_EQ(cf.urma_unbind_jetty(a.jetty), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unimport_jetty(tb), URMA_SUCCESS);
    cf_ep_close(&a);
    cf_ep_close(&b);
    cf_ctx_delete(peer);
    cf_ctx_delete(ctx);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* RC bind rules (§4.2)                                                      */
/* ------------------------------------------------------------------------ */

static void bind_rules(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d), *peer = cf_ctx(&d);
    JT_REQUIRE(ctx && peer);
    cf_ep_opts_t rc = cf_ep_defaults(URMA_TM_RC), rm = cf_ep_defaults(URMA_TM_RM);
    cf_ep_t a, b, dd, c, p_rm;
    JT_REQUIRE(cf_ep_open(&a, ctx, &rc) == 0);
    JT_REQUIRE(cf_ep_open(&c, ctx, &rm) == 0);
    JT_REQUIRE(cf_ep_open(&b, peer, &rc) == 0);
    JT_REQUIRE(cf_ep_open(&dd, peer, &rc) == 0);
    JT_REQUIRE(cf_ep_open(&p_rm, peer, &rm) == 0);
    urma_target_jetty_t *tb =
        cf_import_jetty(ctx, &b.jetty->jetty_id, URMA_TM_RC, rc.jfr_policy, rc.jfr_token);
    urma_target_jetty_t *td =
        cf_import_jetty(ctx, &dd.jetty->jetty_id, URMA_TM_RC, rc.jfr_policy, rc.jfr_token);
    urma_target_jetty_t *trm =
        cf_import_jetty(ctx, &p_rm.jetty->jetty_id, URMA_TM_RM, rm.jfr_policy, rm.jfr_token);
    urma_target_jetty_t *tb_ot = cf_import_jetty_ex(ctx, &b.jetty->jetty_id, URMA_TM_RC, URMA_OT,
                                                    URMA_RTP, rc.jfr_policy, rc.jfr_token);
    JT_REQUIRE(tb && td && trm && tb_ot);

    JT_CHECK_EQ(cf.urma_bind_jetty(c.jetty, tb), URMA_ENOPERM);    /* local not RC */
    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, trm), URMA_ENOPERM);   /* target not RC */
    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, tb_ot), URMA_ENOPERM); /* OL vs OT */
    JT_CHECK(a.jetty->remote_jetty == NULL);
    JT_CHECK_EQ(cf.urma_unbind_jetty(a.jetty), URMA_EINVAL); /* not bound */
    JT_CHECK_EQ(cf.urma_bind_jetty(NULL, tb), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, NULL), URMA_EINVAL);

    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, tb), URMA_SUCCESS);
    JT_CHECK(a.jetty->remote_jetty == tb);
    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, tb), URMA_SUCCESS); /* same target again */
    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, td), URMA_EEXIST);
    JT_CHECK(a.jetty->remote_jetty == tb);
    int r = cf.urma_delete_jetty(a.jetty);
    JT_CHECK_EQ(r, URMA_ENOPERM);
    JT_REQUIRE(r != URMA_SUCCESS); /* gone: stop before using it */
    r = cf.urma_unimport_jetty(tb);
    if (r == URMA_SUCCESS) CF_FAILF("unimport_jetty of a bound target succeeded (§4.2, §7.2)");
    JT_REQUIRE(r != URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unbind_jetty(a.jetty), URMA_SUCCESS);
    JT_CHECK(a.jetty->remote_jetty == NULL);
    JT_CHECK_EQ(cf.urma_unbind_jetty(a.jetty), URMA_EINVAL);
    r = cf.urma_unbind_jetty(c.jetty); /* RM and unbound: either rule may fire first */
    JT_CHECK(r == URMA_ENOPERM || r == URMA_EINVAL);
    /* Bound again, to the other target, after the unbind. */
    JT_CHECK_EQ(cf.urma_bind_jetty(a.jetty, td), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unbind_jetty(a.jetty), URMA_SUCCESS);

    JT_CHECK_EQ(cf.urma_unimport_jetty(tb), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unimport_jetty(td), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unimport_jetty(trm), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unimport_jetty(tb_ot), URMA_SUCCESS);
    cf_ep_close(&a);
    cf_ep_close(&b);
    cf_ep_close(&c);
    cf_ep_close(&dd);
    cf_ep_close(&p_rm);
    cf_ctx_delete(peer);
    cf_ctx_delete(ctx);
    cf_close();
}

/* ------------------------------------------------------------------------ */
/* Post-time checks (§2.1, §4.5, §7.2)                                       */
/* ------------------------------------------------------------------------ */

#define POST_MEM 65536

/* Post cases: a (RM, rnr_retry 0) sends to b; both have a 64 KiB segment. */
static int post_pair(cf_dev_t *d, cf_side_t *a, cf_side_t *b, uint8_t rnr_retry, uint32_t jfs_depth)
{
    if (cf_open(d)) return -1;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.rnr_retry = rnr_retry;
    o.jfs_depth = jfs_depth;
    return cf_pair_open(d, a, b, &o, POST_MEM);
}

static void post_bad_wr_null(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(post_pair(&d, &a, &b, 0, 128) == 0);
    urma_sge_t rs;
    cf_sge(&rs, b.mem.buf, 256, b.mem.tseg);
    JT_REQUIRE(cf_post_recv(b.ep.jetty, &rs, 1, 1) == 0);
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a.mem.buf, 64, a.mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &s, 1, 0, 10);
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, NULL), URMA_EINVAL);
    urma_jfr_wr_t rwr;
    memset(&rwr, 0, sizeof rwr);
    rwr.src.sge = &rs;
    rwr.src.num_sge = 1;
    rwr.user_ctx = 2;
    JT_CHECK_EQ(cf.urma_post_jetty_recv_wr(b.ep.jetty, &rwr, NULL), URMA_EINVAL);
    JT_CHECK_EQ(cf.urma_post_jfr_wr(b.ep.jfr, &rwr, NULL), URMA_EINVAL);
    if (cf.urma_create_jfs && cf.urma_post_jfs_wr) {
        urma_jfs_cfg_t sc;
        cf_jfs_cfg(&sc, a.ep.jfc, URMA_TM_RM, 16);
        urma_jfs_t *jfs = cf.urma_create_jfs(a.ctx, &sc);
        JT_REQUIRE(jfs != NULL);
        JT_CHECK_EQ(cf.urma_post_jfs_wr(jfs, &wr, NULL), URMA_EINVAL);
        JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    }
    /* Nothing was posted: no initiator CR, no receive consumed. */
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    /* The one receive posted properly is still there and the only one. */
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 10, "send after the refused posts");
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 1, "receive after the refused posts");
    wr.user_ctx = 11;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_RNR_RETRY_CNT_EXC_ERR, 11, "second send: no receive left");
    cf_pair_close(&a, &b);
    cf_close();
    CF_NEED(urma_post_jfs_wr);
}

static void post_partial(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(post_pair(&d, &a, &b, 0, 128) == 0);
    /* Receive list: the second WR has more SGEs than the JFR's max_sge (4). */
    urma_sge_t rs[8];
    for (int i = 0; i < 8; i++)
        cf_sge(&rs[i], b.mem.buf + 1024 * i, 1024, b.mem.tseg);
    urma_jfr_wr_t rw[3];
    memset(rw, 0, sizeof rw);
    rw[0].src.sge = &rs[0];
    rw[0].src.num_sge = 1;
    rw[0].user_ctx = 100;
    rw[0].next = &rw[1];
    rw[1].src.sge = &rs[1];
    rw[1].src.num_sge = 5;
    rw[1].user_ctx = 101;
    rw[1].next = &rw[2];
    rw[2].src.sge = &rs[6];
    rw[2].src.num_sge = 1;
    rw[2].user_ctx = 102;
    urma_jfr_wr_t *rbad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_recv_wr(b.ep.jetty, rw, &rbad), URMA_EINVAL);
    JT_CHECK(rbad == &rw[1]);

    /* Send list: the second WR has an opcode UDMA refuses. */
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 100, a.mem.tseg);
    cf_fill(a.mem.buf, 100, 1);
    urma_jfs_wr_t wr[3];
    cf_wr_send(&wr[0], URMA_OPC_SEND, a.tj, &s, 1, 0, 200);
    cf_wr_send(&wr[1], URMA_OPC_SEND, a.tj, &s, 1, 0, 201);
    wr[1].opcode = URMA_OPC_SWAP;
    cf_wr_send(&wr[2], URMA_OPC_SEND, a.tj, &s, 1, 0, 202);
    wr[0].next = &wr[1];
    wr[1].next = &wr[2];
    urma_jfs_wr_t *bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr[1]);
    /* wr[0] was posted and used the one receive that was posted (rw[0]). */
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 200, "first WR of a partial post");
    urma_cr_t cr;
    if (cf_poll1(b.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 100);
        JT_CHECK_EQ(cr.completion_len, 100);
        JT_CHECK_EQ(cf_check_fill(b.mem.buf, 100, 1), -1);
    }
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0); /* wr[2] was not posted */
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    /* Neither rw[1] nor rw[2] was posted: the next send finds no receive. */
    wr[0].next = NULL;
    wr[0].user_ctx = 203;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr[0]) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_RNR_RETRY_CNT_EXC_ERR, 203, "send after a partial recv post");
    JT_CHECK_EQ(cf_check_byte(b.mem.buf + 6 * 1024, 1024, 0), -1);
    cf_pair_close(&a, &b);
    cf_close();
}

static void post_queue_full(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    enum { DEPTH = 8, LIST = 256 };
    /* rnr_retry 7 (infinite) and no receive at b: every WR stays outstanding. */
    JT_REQUIRE(post_pair(&d, &a, &b, 7, DEPTH) == 0);
    static urma_jfs_wr_t wr[LIST + 1];
    urma_sge_t s;
    cf_sge(&s, a.mem.buf, 32, a.mem.tseg);
    for (int i = 0; i <= LIST; i++) {
        cf_wr_send(&wr[i], URMA_OPC_SEND, a.tj, &s, 1, 0, 1000 + (uint64_t)i);
        wr[i].next = i + 1 < LIST ? &wr[i + 1] : NULL;
    }
    urma_jfs_wr_t *bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, wr, &bad), URMA_ENOMEM);
    long idx = bad ? (long)(bad - wr) : -1;
    /* At least depth WRs fit; hardware may round the depth up. */
    if (idx < DEPTH || idx >= LIST)
        CF_FAILF("queue full reported at WR %ld of %d (jfs depth %d)", idx, LIST, DEPTH);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr[LIST], &bad), URMA_ENOMEM);
    JT_CHECK(bad == &wr[LIST]);
    /* Teardown: ERROR flushes the outstanding WRs. */
    cf_ep_flush(&a.ep);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    cf_pair_close(&a, &b);
    cf_close();
}

static void post_unsupported_opcodes(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(post_pair(&d, &a, &b, 0, 128) == 0);
    uint64_t *word = (uint64_t *)b.mem.buf;
    *word = 0x0102030405060708ull;
    urma_sge_t l, r;
    cf_sge(&l, a.mem.buf, 8, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg), 8, a.rseg);
    static const uint32_t opcs[] = {URMA_OPC_SWAP, URMA_OPC_FSUB,      URMA_OPC_FAND, URMA_OPC_FOR,
                                    URMA_OPC_FXOR, URMA_OPC_FLUSH_DMA, 0x7f,          0x13};
    for (size_t i = 0; i < sizeof opcs / sizeof opcs[0]; i++) {
        urma_jfs_wr_t wr;
        cf_wr_cas(&wr, a.tj, &r, &l, 0x0102030405060708ull, 0x1111, 300 + i);
        wr.opcode = (urma_opcode_t)opcs[i];
        urma_jfs_wr_t *bad = NULL;
        int rc = cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad);
        if (rc != URMA_EINVAL || bad != &wr)
            CF_FAILF("opcode 0x%x: post returned %d (bad_wr %s), expected EINVAL", opcs[i], rc,
                     bad == &wr ? "set" : "not set");
    }
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(*word, 0x0102030405060708ull);
    cf_pair_close(&a, &b);
    cf_close();
}

static void post_sge_limits(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(post_pair(&d, &a, &b, 0, 128) == 0);
    memset(b.mem.buf, 0x3c, POST_MEM);
    cf_fill(a.mem.buf, POST_MEM, 9);
    uint64_t rva = cf_seg_va(b.mem.tseg);
    urma_sge_t l[8], r[2];
    for (int i = 0; i < 8; i++)
        cf_sge(&l[i], a.mem.buf + 512 * i, 512, a.mem.tseg);
    cf_rsge(&r[0], rva, 512, a.rseg);
    cf_rsge(&r[1], rva + 4096, 512, a.rseg);
    urma_jfs_wr_t wr, *bad;

    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, l, 1, r, 2, 0, 400);
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr);
    cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, a.tj, l, 1, r, 2, 7, 401);
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr);
    cf_wr_rw(&wr, URMA_OPC_READ, a.tj, r, 2, l, 1, 0, 402);
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr);
    /* More local SGEs than the jetty's max_sge (4). */
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, l, 5, r, 1, 0, 403);
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr);
    cf_wr_send(&wr, URMA_OPC_SEND, a.tj, l, 5, 0, 404);
    bad = NULL;
    JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
    JT_CHECK(bad == &wr);
    /* Inline payload above max_inline_data (0 at creation = the device maximum). */
    uint32_t inl = CF_CAP(&d).max_jfs_inline_len;
    if (inl > 0 && inl < POST_MEM) {
        urma_sge_t big;
        cf_sge(&big, a.mem.buf, inl + 1, NULL);
        cf_wr_send(&wr, URMA_OPC_SEND, a.tj, &big, 1, 0, 405);
        wr.flag.bs.inline_flag = 1;
        bad = NULL;
        JT_CHECK_EQ(cf.urma_post_jetty_send_wr(a.ep.jetty, &wr, &bad), URMA_EINVAL);
        JT_CHECK(bad == &wr);
    }
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_quiet(b.ep.jfc, 0), 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, POST_MEM, 0x3c), -1);
    /* The same WRITE with one remote SGE and max_sge local SGEs is fine. */
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, l, 4, r, 1, 0, 406);
    r[0].len = 2048;
    JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 406, "4-SGE WRITE");
    JT_CHECK(memcmp(b.mem.buf, a.mem.buf, 2048) == 0);
    cf_pair_close(&a, &b);
    cf_close();
}

/* §4.2: a queue created with outorder_comp = 1, like a UM one, takes no WR
 * asking for fence, place_order or comp_order; the same WRs are fine on an
 * ordinary RM jetty. */
static void post_order_flags(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(post_pair(&d, &a, &b, 0, 128) == 0);
    CF_NEED(urma_create_jfs);
    CF_NEED(urma_post_jfs_wr);
    CF_NEED(urma_delete_jfs);
    memset(b.mem.buf, 0x3c, POST_MEM);
    cf_fill(a.mem.buf, POST_MEM, 5);
    urma_jfs_cfg_t cfg;
    cf_jfs_cfg(&cfg, a.ep.jfc, URMA_TM_RM, 16);
    cfg.flag.bs.outorder_comp = 1;
    urma_jfs_t *jfs = cf.urma_create_jfs(a.ctx, &cfg);
    JT_REQUIRE(jfs != NULL);
    urma_sge_t l, r;
    cf_sge(&l, a.mem.buf, 64, a.mem.tseg);
    cf_rsge(&r, cf_seg_va(b.mem.tseg), 64, a.rseg);
    static const char *const names[] = {"fence", "place_order RELAX", "place_order STRONG",
                                        "comp_order"};
    for (int k = 0; k < 4; k++) {
        urma_jfs_wr_t wr, *bad = NULL;
        cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 500 + (uint64_t)k);
        if (k == 0) wr.flag.bs.fence = 1;
        if (k == 1) wr.flag.bs.place_order = URMA_RELAX_ORDER;
        if (k == 2) wr.flag.bs.place_order = URMA_STRONG_ORDER;
        if (k == 3) wr.flag.bs.comp_order = 1;
        int rc = cf.urma_post_jfs_wr(jfs, &wr, &bad);
        if (rc != URMA_EINVAL || bad != &wr)
            CF_FAILF("outorder_comp JFS, WRITE with %s: post returned %d (bad_wr %s), expected "
                     "EINVAL",
                     names[k], rc, bad == &wr ? "set" : "not set");
    }
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, CF_QUIET_MS), 0);
    JT_CHECK_EQ(cf_check_byte(b.mem.buf, POST_MEM, 0x3c), -1);
    /* Without the flags the JFS writes. */
    urma_jfs_wr_t wr, *bad = NULL;
    cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 510);
    JT_CHECK_EQ(cf.urma_post_jfs_wr(jfs, &wr, &bad), URMA_SUCCESS);
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 510, "outorder_comp JFS, plain WRITE");
    JT_CHECK(memcmp(b.mem.buf, a.mem.buf, 64) == 0);
    /* An ordinary jetty takes all three. */
    for (int k = 0; k < 4; k++) {
        cf_wr_rw(&wr, URMA_OPC_WRITE, a.tj, &l, 1, &r, 1, 0, 520 + (uint64_t)k);
        if (k == 0) wr.flag.bs.fence = 1;
        if (k == 1) wr.flag.bs.place_order = URMA_RELAX_ORDER;
        if (k == 2) wr.flag.bs.place_order = URMA_STRONG_ORDER;
        if (k == 3) wr.flag.bs.comp_order = 1;
        JT_REQUIRE(cf_post(a.ep.jetty, &wr) == 0);
        cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 520 + (uint64_t)k, names[k]);
    }
    JT_CHECK_EQ(cf.urma_delete_jfs(jfs), URMA_SUCCESS);
    cf_pair_close(&a, &b);
    cf_close();
}

/* softub only: the blocks of the region memfd ("softub-<pid>") that holds a
 * process's shared descriptors are reused once their grace period (2 s) has
 * passed, also under steady churn: queues created and deleted one after
 * another, their descriptors freed next to each other. Merging such blocks
 * into one that always counted as just freed made every creation take fresh
 * memory, without bound. Skipped on another provider.
 *
 * With reuse the region holds what was created within the last grace period
 * (plus the live queues), so it grows only while that count grows: when
 * creations speed up because the machine got quieter. The check allows for
 * that from the creation times it records, so it holds at any speed: over the
 * second half of a 5 s churn, the region may grow by the pages the rise of
 * that peak count needs, plus an eighth of what the half's creations take
 * without reuse (as measured over the first 1.5 s, before any block can be
 * reused), plus 64 KiB. Without reuse it grows by all of the latter. */
static int region_fd(void)
{
    char want[64], link[128], path[64];
    snprintf(want, sizeof want, "/memfd:softub-%d ", (int)getpid());
    for (int fd = 3; fd < 1024; fd++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strncmp(link, want, strlen(want)) == 0) return fd;
    }
    return -1;
}

static long long region_kib(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (long long)st.st_blocks / 2 : -1;
}

/* Most creations within any span of span_ms among the first n of the
 * ascending times at[]. */
static unsigned churn_peak(const uint64_t *at, unsigned n, uint64_t span_ms)
{
    unsigned best = 0;
    for (unsigned lo = 0, hi = 0; hi < n; hi++) {
        while (at[hi] - at[lo] >= span_ms)
            lo++;
        if (hi - lo + 1 > best) best = hi - lo + 1;
    }
    return best;
}

static void region_reused_under_churn(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    urma_context_t *ctx = cf_ctx(&d);
    JT_REQUIRE(ctx);
    urma_jfc_t *jfc = cf_jfc(ctx, 256, NULL);
    JT_REQUIRE(jfc);
    int fd = region_fd();
    if (fd < 0) {
        fprintf(stderr, "  not softub (no region memfd): skipped\n");
        JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);
        cf_ctx_delete(ctx);
        cf_close();
        return;
    }
    /* A connection's worth each: a JFR (its ring and descriptor are in the
     * region) and a jetty on it (its descriptor); eight alive at a time. */
    enum { LIVE = 8, MAX_MADE = 1 << 17 };
    uint64_t *at = calloc(MAX_MADE, sizeof *at);
    JT_REQUIRE(at);
    urma_jfr_t *jfrs[LIVE] = {0};
    urma_jetty_t *jetties[LIVE] = {0};
    urma_jfr_cfg_t rcfg;
    cf_jfr_cfg(&rcfg, jfc, URMA_TM_RM, 16, 0);
    uint64_t t0 = cf_now_ms();
    long long start = -1, fresh = -1, mid = -1;
    unsigned made = 0, made_fresh = 0, made_mid = 0;
    while (cf_now_ms() - t0 < 5000 && made < MAX_MADE) {
        unsigned k = made % LIVE;
        if (jetties[k]) JT_REQUIRE(cf.urma_delete_jetty(jetties[k]) == URMA_SUCCESS);
        if (jfrs[k]) JT_REQUIRE(cf.urma_delete_jfr(jfrs[k]) == URMA_SUCCESS);
        jfrs[k] = cf.urma_create_jfr(ctx, &rcfg);
        JT_REQUIRE(jfrs[k]);
        urma_jetty_cfg_t jcfg;
        cf_jetty_cfg(&jcfg, jfc, jfrs[k], URMA_TM_RM, 16);
        jetties[k] = cf.urma_create_jetty(ctx, &jcfg);
        JT_REQUIRE(jetties[k]);
        uint64_t now = cf_now_ms();
        at[made++] = now;
        if (start < 0) start = region_kib(fd);
        if (fresh < 0 && now - t0 >= 1500) {
            fresh = region_kib(fd);
            made_fresh = made;
        }
        if (mid < 0 && now - t0 >= 2500) {
            mid = region_kib(fd);
            made_mid = made;
        }
        cf_sleep_us(50);
    }
    long long end = region_kib(fd);
    /* What one creation takes without reuse, and the peaks of creations
     * within a grace period (2 s, and 125 ms for the freeing lag of LIVE
     * creations and the blocks' merge window). */
    double per_kib = made_fresh > 1 ? (double)(fresh - start) / (made_fresh - 1) : 0;
    unsigned peak_mid = churn_peak(at, made_mid, 2125), peak_end = churn_peak(at, made, 2125);
    double allowed = (peak_end - peak_mid) * per_kib + (made - made_mid) * per_kib / 8 + 64;
    fprintf(stderr,
            "  %u jetties and JFRs created; region %lld KiB at 1.5 s (%u made, %.2f KiB each), "
            "%lld KiB at 2.5 s (%u made), %lld KiB at 5 s; most made in 2 s: %u, then %u; "
            "growth allowed %.0f KiB, %.0f KiB without reuse\n",
            made, fresh, made_fresh, per_kib, mid, made_mid, end, peak_mid, peak_end, allowed,
            (made - made_mid) * per_kib);
    JT_CHECK(made - made_mid > 1000);
    JT_CHECK(per_kib > 1);
    JT_CHECK(mid > 0 && end - mid <= allowed);
    free(at);
    for (unsigned k = 0; k < LIVE; k++) {
        if (jetties[k]) JT_CHECK_EQ(cf.urma_delete_jetty(jetties[k]), URMA_SUCCESS);
        if (jfrs[k]) JT_CHECK_EQ(cf.urma_delete_jfr(jfrs[k]), URMA_SUCCESS);
    }
    JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);
    cf_ctx_delete(ctx);
    cf_close();
}

int main(int argc, char **argv)
{
    cf_main(argc, argv);
    CF_RUN(symbols);
    CF_RUN(init_uninit);
    CF_RUN(device_list);
    CF_RUN(device_by_name);
    CF_RUN(query_device);
    CF_RUN(eid_list_and_context);
    CF_RUN(str_to_eid);
    CF_RUN(context_refcounts);
    CF_RUN(jfce_in_use);
    CF_RUN(jfc_create_checks);
    CF_RUN(jfs_create_checks);
    CF_RUN(jfr_create_checks);
    CF_RUN(jetty_create_checks);
    CF_RUN(import_jetty_checks);
    CF_RUN(register_seg_checks);
    CF_RUN(import_seg_checks);
    CF_RUN(token_id_lifecycle);
    CF_RUN(bind_rules);
    CF_RUN(import_bind_ex);
    CF_RUN(import_share_tp);
    CF_RUN(post_bad_wr_null);
    CF_RUN(post_partial);
    CF_RUN(post_queue_full);
    CF_RUN(post_unsupported_opcodes);
    CF_RUN(post_sge_limits);
    CF_RUN(post_order_flags);
    CF_RUN(region_reused_under_churn);
    return jt_finish();
}
