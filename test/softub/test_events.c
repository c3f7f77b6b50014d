/* softub conformance: completion events and async events (URMA-API.md §4.9, §4.12, §7.2).
 *
 * The JFCE fd is epoll-able and level-triggered, one event per arm,
 * solicited_only, wait_jfc timeouts and argument checks, ack accounting at
 * delete_jfc (blocking and non_blocking), and ctx->async_fd with
 * get/ack_async_event. Two contexts a (sender) and b (receiver), each JFC on a
 * JFCE of its own. */
#include <sys/epoll.h>

#include "conformance.h"

#define MEM 65536

static int ev_open(cf_dev_t *d, cf_side_t *a, cf_side_t *b, uint32_t jfc_flag)
{
    if (cf_open(d)) return -1;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfce = true;
    o.jfc_flag = jfc_flag;
    return cf_pair_open(d, a, b, &o, MEM);
}

static void ev_close(cf_side_t *a, cf_side_t *b)
{
    cf_pair_close(a, b);
    cf_close();
}

/* a sends one message to b (b must have a receive posted). */
static int send_one(cf_side_t *a, uint64_t user_ctx, bool solicited)
{
    urma_sge_t s;
    urma_jfs_wr_t wr;
    cf_sge(&s, a->mem.buf, 16, a->mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, a->tj, &s, 1, 0, user_ctx);
    wr.flag.bs.solicited_enable = solicited;
    return cf_post(a->ep.jetty, &wr);
}

static int post_recvs(cf_side_t *b, int n)
{
    for (int i = 0; i < n; i++) {
        urma_sge_t rs;
        cf_sge(&rs, b->mem.buf + 256 * i, 256, b->mem.tseg);
        if (cf_post_recv(b->ep.jetty, &rs, 1, 0x500 + (uint64_t)i)) return -1;
    }
    return 0;
}

static int readable(int fd, int timeout_ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout_ms);
    return n > 0 && (p.revents & POLLIN);
}

static void ack1(urma_jfc_t *jfc)
{
    urma_jfc_t *j[1] = {jfc};
    uint32_t n[1] = {1};
    cf.urma_ack_jfc(j, n, 1);
}

/* ------------------------------------------------------------------------ */

static void jfce_fd_level_triggered(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(ev_open(&d, &a, &b, 0) == 0);
    int fd = b.ep.jfce->fd;
    JT_REQUIRE(fd >= 0);
    JT_CHECK(b.ep.jfce->urma_ctx == b.ctx);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    JT_REQUIRE(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 7};
    JT_REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_CHECK_EQ(epoll_wait(ep, &ev, 1, 0), 0);
    JT_REQUIRE(post_recvs(&b, 2) == 0);
    JT_REQUIRE(send_one(&a, 1, false) == 0);
    struct epoll_event out;
    JT_CHECK_EQ(epoll_wait(ep, &out, 1, CF_WAIT_MS), 1);
    JT_CHECK((out.events & EPOLLIN) != 0);
    JT_CHECK_EQ(out.data.u64, 7);
    /* Level-triggered: still readable until the event is waited for. */
    JT_CHECK_EQ(epoll_wait(ep, &out, 1, 0), 1);
    JT_CHECK(readable(fd, 0));
    urma_jfc_t *jfcs[16];
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, 0, jfcs), 1);
    JT_CHECK(jfcs[0] == b.ep.jfc);
    JT_CHECK_EQ(epoll_wait(ep, &out, 1, 0), 0);
    JT_CHECK(!readable(fd, 0));
    ack1(b.ep.jfc);
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0x500, "the receive that fired the event");
    cf_expect_cr(a.ep.jfc, URMA_CR_SUCCESS, 1, "the SEND");
    /* Re-armed, the next CR fires again. */
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 2, false) == 0);
    JT_CHECK_EQ(epoll_wait(ep, &out, 1, CF_WAIT_MS), 1);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, 0, jfcs), 1);
    ack1(b.ep.jfc);
    close(ep);
    ev_close(&a, &b);
}

static void one_event_per_arm(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(ev_open(&d, &a, &b, 0) == 0);
    JT_REQUIRE(post_recvs(&b, 4) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 1, false) == 0);
    JT_REQUIRE(send_one(&a, 2, false) == 0);
    urma_cr_t cr[2];
    JT_CHECK_EQ(cf_poll(b.ep.jfc, cr, 2, CF_WAIT_MS), 2); /* both CRs landed */
    JT_CHECK(readable(b.ep.jfce->fd, CF_WAIT_MS));
    urma_jfc_t *jfcs[16];
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, 0, jfcs), 1);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, 0, jfcs), 0); /* no second event */
    JT_CHECK(!readable(b.ep.jfce->fd, 0));
    /* Without a re-arm, more CRs give no event either. */
    JT_REQUIRE(send_one(&a, 3, false) == 0);
    JT_CHECK_EQ(cf_poll(b.ep.jfc, cr, 1, CF_WAIT_MS), 1);
    JT_CHECK(!readable(b.ep.jfce->fd, CF_QUIET_MS));
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, 0, jfcs), 0);
    ack1(b.ep.jfc);
    /* Re-armed: one more event. */
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 4, false) == 0);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 1, CF_WAIT_MS, jfcs), 1);
    JT_CHECK(jfcs[0] == b.ep.jfc);
    ack1(b.ep.jfc);
    /* The initiator's JFC, armed, fires on its own send CR. */
    JT_REQUIRE(post_recvs(&b, 1) == 0);
    urma_cr_t acr[4];
    JT_CHECK_EQ(cf_poll(a.ep.jfc, acr, 4, CF_WAIT_MS), 4); /* nothing pending at the arm */
    JT_CHECK_EQ(cf.urma_rearm_jfc(a.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 5, false) == 0);
    int n = cf.urma_wait_jfc(a.ep.jfce, 16, CF_WAIT_MS, jfcs);
    JT_CHECK_EQ(n, 1);
    if (n == 1) {
        JT_CHECK(jfcs[0] == a.ep.jfc);
        ack1(a.ep.jfc);
    }
    ev_close(&a, &b);
}

static void solicited_only(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(ev_open(&d, &a, &b, 0) == 0);
    JT_REQUIRE(post_recvs(&b, 3) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, true), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 1, false) == 0);
    urma_cr_t cr;
    JT_CHECK_EQ(cf_poll(b.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    JT_CHECK(!readable(b.ep.jfce->fd, CF_QUIET_MS));
    urma_jfc_t *jfcs[16];
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, 0, jfcs), 0);
    /* Still armed: a solicited SEND fires it. */
    JT_REQUIRE(send_one(&a, 2, true) == 0);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, CF_WAIT_MS, jfcs), 1);
    JT_CHECK(jfcs[0] == b.ep.jfc);
    ack1(b.ep.jfc);
    /* Armed for everything, a solicited SEND fires too. */
    JT_CHECK_EQ(cf_poll(b.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 3, true) == 0);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, CF_WAIT_MS, jfcs), 1);
    ack1(b.ep.jfc);
    ev_close(&a, &b);
}

/* A stream of solicited SENDs while the receiver arms solicited-only, polls
 * and waits, again and again: every wait must end with an event, never by its
 * timeout with a CR in the queue (a wake-up lost between the sender's
 * publication of a CR and its look at the arm). */
enum { RACE_SENDS = 100000, RACE_RECVS = 96 };

typedef struct race {
    cf_side_t *a;
    _Atomic int credits; /* receives posted and not yet used by a SEND */
    _Atomic bool stop;
    _Atomic int sent, rc;
} race_t;

static void *race_sender(void *arg)
{
    race_t *r = arg;
    int inflight = 0;
    while (r->sent < RACE_SENDS && !atomic_load(&r->stop)) {
        urma_cr_t cr[16];
        int k = cf.urma_poll_jfc(r->a->ep.jfc, 16, cr);
        if (k > 0) inflight -= k;
        if (inflight >= 64 || atomic_load(&r->credits) == 0) continue;
        atomic_fetch_sub(&r->credits, 1);
        int rc = send_one(r->a, (uint64_t)atomic_load(&r->sent), true);
        if (rc != 0) {
            atomic_store(&r->rc, rc);
            break;
        }
        r->sent++;
        inflight++;
    }
    return NULL;
}

static void solicited_arm_race(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(ev_open(&d, &a, &b, 0) == 0);
    JT_REQUIRE(post_recvs(&b, RACE_RECVS) == 0);
    race_t r = {.a = &a, .credits = RACE_RECVS};
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, race_sender, &r) == 0);
    int got = 0, lost = 0, sleeps = 0, stalls = 0;
    urma_jfc_t *jfcs[1];
    while (got < RACE_SENDS) {
        urma_cr_t cr[16];
        int n = cf.urma_poll_jfc(b.ep.jfc, 16, cr);
        if (n == 0 && cf.urma_rearm_jfc(b.ep.jfc, true) == URMA_SUCCESS &&
            (n = cf.urma_poll_jfc(b.ep.jfc, 16, cr)) == 0) {
            sleeps++;
            /* Long enough that a CR found after it was lost, not late. */
            int w = cf.urma_wait_jfc(b.ep.jfce, 1, CF_WAIT_MS, jfcs);
            if (w == 1) {
                ack1(b.ep.jfc);
                continue;
            }
            n = cf.urma_poll_jfc(b.ep.jfc, 16, cr);
            if (n == 0 && atomic_load(&r.sent) < RACE_SENDS && atomic_load(&r.rc) == 0 &&
                ++stalls < 6)
                continue; /* a sender descheduled that long: not a loss */
            if (n <= 0) break; /* the sender stopped */
            lost++;
        }
        if (n < 0) break;
        for (int i = 0; i < n; i++) {
            JT_CHECK_EQ(cr[i].status, URMA_CR_SUCCESS);
            urma_sge_t rs;
            cf_sge(&rs, b.mem.buf + 256 * (cr[i].user_ctx - 0x500), 256, b.mem.tseg);
            if (cf_post_recv(b.ep.jetty, &rs, 1, cr[i].user_ctx)) break;
            atomic_fetch_add(&r.credits, 1);
        }
        got += n;
    }
    atomic_store(&r.stop, true);
    pthread_join(th, NULL);
    JT_CHECK_EQ(r.rc, 0);
    JT_CHECK_EQ(got, RACE_SENDS);
    JT_CHECK_EQ(lost, 0);
    JT_CHECK(sleeps > 0);
    /* Whatever the last arm left pending. */
    while (cf.urma_wait_jfc(b.ep.jfce, 1, 0, jfcs) == 1)
        ack1(b.ep.jfc);
    ev_close(&a, &b);
}

typedef struct delayed_send {
    cf_side_t *a;
    unsigned delay_ms;
    int rc;
} delayed_send_t;

static void *delayed_send_fn(void *arg)
{
    delayed_send_t *ds = arg;
    cf_sleep_ms(ds->delay_ms);
    ds->rc = send_one(ds->a, 0x77, false);
    return NULL;
}

static void wait_timeouts(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(ev_open(&d, &a, &b, 0) == 0);
    urma_jfc_t *jfcs[16];
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 1, 0, jfcs), 0);
    uint64_t t0 = cf_now_ms();
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 1, 60, jfcs), 0);
    uint64_t waited = cf_now_ms() - t0;
    if (waited < 55) CF_FAILF("wait_jfc(60 ms) returned after %llu ms", (unsigned long long)waited);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 0, 0, jfcs), -1);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 1, 0, NULL), -1);
    JT_CHECK_EQ(cf.urma_wait_jfc(NULL, 1, 0, jfcs), -1);

    /* -1 blocks until a CR made by another thread fires the event. */
    JT_REQUIRE(post_recvs(&b, 2) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    delayed_send_t ds = {&a, 100, -1};
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, delayed_send_fn, &ds) == 0);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, -1, jfcs), 1);
    JT_CHECK(jfcs[0] == b.ep.jfc);
    pthread_join(th, NULL);
    JT_CHECK_EQ(ds.rc, 0);
    ack1(b.ep.jfc);
    cf_expect_cr(b.ep.jfc, URMA_CR_SUCCESS, 0x500, "receive of the threaded SEND");
    /* A timed wait returns as soon as the event comes. */
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    ds.delay_ms = 30;
    JT_REQUIRE(pthread_create(&th, NULL, delayed_send_fn, &ds) == 0);
    JT_CHECK_EQ(cf.urma_wait_jfc(b.ep.jfce, 16, CF_WAIT_MS, jfcs), 1);
    pthread_join(th, NULL);
    ack1(b.ep.jfc);
    JT_CHECK_EQ(cf_quiet(a.ep.jfc, 20), 2);
    ev_close(&a, &b);
}

typedef struct async_delete {
    urma_jfc_t *jfc;
    atomic_int done;
    int rc;
} async_delete_t;

static void *delete_fn(void *arg)
{
    async_delete_t *ad = arg;
    ad->rc = cf.urma_delete_jfc(ad->jfc);
    atomic_store(&ad->done, 1);
    return NULL;
}

/* Leaves b with only its JFC (and JFCE): what references the JFC is gone. */
static void strip_to_jfc(cf_side_t *b)
{
    if (b->tj) JT_CHECK_EQ(cf.urma_unimport_jetty(b->tj), URMA_SUCCESS);
    if (b->rseg) JT_CHECK_EQ(cf.urma_unimport_seg(b->rseg), URMA_SUCCESS);
    b->tj = NULL;
    b->rseg = NULL;
    JT_CHECK_EQ(cf.urma_delete_jetty(b->ep.jetty), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_delete_jfr(b->ep.jfr), URMA_SUCCESS);
    b->ep.jetty = NULL;
    b->ep.jfr = NULL;
}

static void delete_jfc_waits_for_ack(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    JT_REQUIRE(ev_open(&d, &a, &b, 0) == 0);
    JT_REQUIRE(post_recvs(&b, 1) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 1, false) == 0);
    urma_jfc_t *jfcs[16];
    JT_REQUIRE(cf.urma_wait_jfc(b.ep.jfce, 16, CF_WAIT_MS, jfcs) == 1);
    urma_cr_t cr;
    JT_CHECK_EQ(cf_poll(b.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    strip_to_jfc(&b);
    async_delete_t ad = {b.ep.jfc, 0, -1};
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, delete_fn, &ad) == 0);
    cf_sleep_ms(200);
    if (atomic_load(&ad.done)) {
        CF_FAILF("delete_jfc with an un-acked event returned %d instead of blocking", ad.rc);
        pthread_join(th, NULL);
        if (ad.rc == URMA_SUCCESS)
            b.ep.jfc = NULL; /* gone: do not ack it */
        else
            ack1(b.ep.jfc);
    } else {
        ack1(b.ep.jfc);
        uint64_t deadline = cf_now_ms() + CF_WAIT_MS;
        while (!atomic_load(&ad.done) && cf_now_ms() < deadline)
            cf_sleep_ms(1);
        if (!atomic_load(&ad.done)) {
            CF_FAILF("delete_jfc still blocked %d ms after the ack", CF_WAIT_MS);
            return; /* the watchdog ends the process */
        }
        pthread_join(th, NULL);
        JT_CHECK_EQ(ad.rc, URMA_SUCCESS);
        b.ep.jfc = NULL;
    }
    ev_close(&a, &b);
}

static void delete_jfc_non_blocking(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    urma_jfc_flag_t f;
    f.value = 0;
    f.bs.non_blocking = 1;
    JT_REQUIRE(ev_open(&d, &a, &b, f.value) == 0);
    JT_CHECK_EQ(b.ep.jfc->jfc_cfg.flag.bs.non_blocking, 1);
    JT_REQUIRE(post_recvs(&b, 1) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
    JT_REQUIRE(send_one(&a, 1, false) == 0);
    urma_jfc_t *jfcs[16];
    JT_REQUIRE(cf.urma_wait_jfc(b.ep.jfce, 16, CF_WAIT_MS, jfcs) == 1);
    urma_cr_t cr;
    JT_CHECK_EQ(cf_poll(b.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    strip_to_jfc(&b);
    int rc = cf.urma_delete_jfc(b.ep.jfc);
    JT_CHECK_EQ(rc, URMA_EAGAIN);
    if (rc == URMA_SUCCESS) {
        b.ep.jfc = NULL;
    } else {
        ack1(b.ep.jfc);
        JT_CHECK_EQ(cf.urma_delete_jfc(b.ep.jfc), URMA_SUCCESS);
        b.ep.jfc = NULL;
    }
    ev_close(&a, &b);
}

static void ack_batched(void)
{
    cf_dev_t d;
    cf_side_t a, b;
    urma_jfc_flag_t f;
    f.value = 0;
    f.bs.non_blocking = 1;
    JT_REQUIRE(ev_open(&d, &a, &b, f.value) == 0);
    JT_REQUIRE(post_recvs(&b, 2) == 0);
    urma_jfc_t *jfcs[16];
    for (int i = 0; i < 2; i++) {
        JT_CHECK_EQ(cf.urma_rearm_jfc(b.ep.jfc, false), URMA_SUCCESS);
        JT_REQUIRE(send_one(&a, (uint64_t)i, false) == 0);
        JT_REQUIRE(cf.urma_wait_jfc(b.ep.jfce, 16, CF_WAIT_MS, jfcs) == 1);
        urma_cr_t cr;
        JT_CHECK_EQ(cf_poll(b.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    }
    strip_to_jfc(&b);
    urma_jfc_t *j[1] = {b.ep.jfc};
    uint32_t n1[1] = {1};
    cf.urma_ack_jfc(j, n1, 1);
    int rc = cf.urma_delete_jfc(b.ep.jfc); /* one of two acked */
    JT_CHECK_EQ(rc, URMA_EAGAIN);
    if (rc != URMA_SUCCESS) {
        cf.urma_ack_jfc(j, n1, 1);
        JT_CHECK_EQ(cf.urma_delete_jfc(b.ep.jfc), URMA_SUCCESS);
    }
    b.ep.jfc = NULL;
    /* ack_jfc ignores NULL arguments and a zero count. */
    cf.urma_ack_jfc(NULL, n1, 1);
    cf.urma_ack_jfc(j, NULL, 1);
    cf.urma_ack_jfc(j, n1, 0);
    ev_close(&a, &b);
}

static void async_events(void)
{
    cf_dev_t d;
    JT_REQUIRE(cf_open(&d) == 0);
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfc_depth = 4;
    cf_side_t a, b;
    JT_REQUIRE(cf_pair_open(&d, &a, &b, &o, MEM) == 0);
    int afd = a.ctx->async_fd;
    JT_REQUIRE(afd >= 0);
    JT_CHECK(fcntl(afd, F_GETFD) >= 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    JT_REQUIRE(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
    JT_CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, afd, &ev) == 0);
    JT_CHECK_EQ(epoll_wait(ep, &ev, 1, 0), 0);
    /* Overflow a's JFC (depth 4) with 32 signalled WRITEs nobody polls. */
    enum { N = 32 };
    urma_sge_t l[N], r[N];
    urma_jfs_wr_t wr[N];
    for (int i = 0; i < N; i++) {
        cf_sge(&l[i], a.mem.buf + 8 * i, 8, a.mem.tseg);
        cf_rsge(&r[i], cf_seg_va(b.mem.tseg) + 8 * (uint64_t)i, 8, a.rseg);
        cf_wr_rw(&wr[i], URMA_OPC_WRITE, a.tj, &l[i], 1, &r[i], 1, 0, (uint64_t)i);
        wr[i].next = i + 1 < N ? &wr[i + 1] : NULL;
    }
    urma_jfs_wr_t *bad = NULL;
    (void)cf.urma_post_jetty_send_wr(a.ep.jetty, wr, &bad); /* a full queue may stop it early */
    JT_CHECK_EQ(epoll_wait(ep, &ev, 1, CF_WAIT_MS), 1);
    JT_CHECK(readable(afd, 0));
    urma_async_event_t ae;
    memset(&ae, 0, sizeof ae);
    JT_REQUIRE(cf.urma_get_async_event(a.ctx, &ae) == URMA_SUCCESS);
    JT_CHECK(ae.urma_ctx == a.ctx);
    JT_CHECK_EQ(ae.event_type, URMA_EVENT_JFC_ERR);
    JT_CHECK(ae.element.jfc == a.ep.jfc);
    cf.urma_ack_async_event(&ae);
    JT_CHECK(!readable(afd, CF_QUIET_MS));
    JT_CHECK(!readable(b.ctx->async_fd, 0)); /* b's JFC never overflowed */
    JT_CHECK(cf.urma_get_async_event(NULL, &ae) != URMA_SUCCESS);
    JT_CHECK(cf.urma_get_async_event(a.ctx, NULL) != URMA_SUCCESS);
    close(ep);
    cf_pair_close(&a, &b);
    cf_close();
}

int main(int argc, char **argv)
{
    cf_main(argc, argv);
    CF_RUN(jfce_fd_level_triggered);
    CF_RUN(one_event_per_arm);
    CF_RUN(solicited_only);
    CF_RUN(solicited_arm_race);
    CF_RUN(wait_timeouts);
    CF_RUN(delete_jfc_waits_for_ack);
    CF_RUN(delete_jfc_non_blocking);
    CF_RUN(ack_batched);
    CF_RUN(async_events);
    return jt_finish();
}
