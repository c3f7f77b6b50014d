/* softub conformance: two and more processes (URMA-API.md §4.4, §4.5, §4.9, §7.2).
 *
 * Every peer is forked before it makes any URMA call and exchanges its EID,
 * uasid, jetty id, JFR token and the whole urma_seg_t over a socketpair, as
 * urma_sample does. Every opcode both ways over memfd-backed and over
 * posix_memalign'ed memory, 1 and 4 MiB transfers, completion events across
 * processes, a peer killed with WRs outstanding, UM loss injection, and many
 * processes creating jetties on a fresh fabric at once. */
#include <fcntl.h>
#include <malloc.h>
#include <sys/epoll.h>
#include <sys/resource.h>

#include "conformance.h"

enum {
    T_WIRE = 1,
    T_READY,
    T_DONE,
    T_VERIFIED,
    T_ARMED,
    T_GOT,
    T_GO,
    T_IDS,
    T_EXIT,
    T_COUNT,
};

/* Opens this process's side and connects it to the peer behind fd. */
static int mp_connect(cf_dev_t *d, cf_side_t *s, cf_wire_t *peer, int fd, const cf_ep_opts_t *o,
                      size_t mem, int kind, uint32_t seg_token)
{
    if (cf_open(d)) return -1;
    if (cf_side_open(s, d, NULL, o, mem, kind, seg_token)) return -1;
    cf_wire_t me;
    cf_side_describe(s, &me);
    if (cf_msg_send(fd, T_WIRE, &me, sizeof me)) return -1;
    if (cf_msg_recv(fd, T_WIRE, peer, sizeof *peer, CF_CASE_TIMEOUT_MS)) return -1;
    /* One EID per host: both processes have the device's EID; ids are fabric-wide. */
    JT_CHECK(cf_eid_eq(&peer->eid, &me.eid));
    JT_CHECK(peer->jetty_id.id != me.jetty_id.id);
    if (cf_side_import(s, peer)) return -1;
    return cf_sync(fd, T_READY);
}

static void mp_disconnect(cf_side_t *s, bool flush)
{
    cf_side_close(s, flush);
    cf_close();
}

/* The peer's start of a two-process case that waits for the case's T_GO: its
 * side (default options of mode, 64 KiB of heap memory) connected. */
static int mp_peer_open(int fd, cf_dev_t *d, cf_side_t *s, cf_wire_t *peer,
                        urma_transport_mode_t mode, uint32_t seg_token)
{
    cf_ep_opts_t o = cf_ep_defaults(mode);
    if (mp_connect(d, s, peer, fd, &o, 65536, CF_MEM_MEMALIGN, seg_token)) return -1;
    return cf_msg_recv(fd, T_GO, NULL, 0, CF_CASE_TIMEOUT_MS) ? -1 : 0;
}

/* The peer's end of a two-process case: T_DONE (with len bytes of msg),
 * then the exit handshake and teardown. */
static int mp_peer_finish(int fd, cf_side_t *s, const void *msg, size_t len)
{
    cf_msg_send(fd, T_DONE, msg, len);
    cf_sync(fd, T_EXIT);
    mp_disconnect(s, false);
    return 0;
}

/* The case's side of a two-process case: forks the peer running fn, then
 * connects to it. -1 (the peer reaped) when either fails. */
static int mp_case_open(cf_peer_t *p, cf_peer_fn fn, cf_dev_t *d, cf_side_t *s, cf_wire_t *peer,
                        const cf_ep_opts_t *o, size_t mem, int kind, uint32_t seg_token)
{
    if (cf_peer_fork(p, fn, NULL) != 0) {
        CF_FAILF("cannot fork the peer");
        return -1;
    }
    if (mp_connect(d, s, peer, p->fd, o, mem, kind, seg_token)) {
        cf_peer_wait(p, 0);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Every opcode, both ways                                                   */
/* ------------------------------------------------------------------------ */

#define OPS_MEM    (512 * 1024)
#define OFF_WRITE  0
#define OFF_WIMM   (64 * 1024)
#define OFF_READ   (128 * 1024)
#define OFF_ATOM   (256 * 1024)
#define OFF_RECV   (320 * 1024) /* three receive buffers of 32 KiB */
#define OFF_SRC    (448 * 1024) /* the initiator's sources */
#define ATOM_V0    0x0123456789ABCDEFull
#define ATOM_V1    0xFEDCBA9876543210ull
#define SEND_IMM_V 0xF00DF00D12345678ull
#define WIMM_V     0x8765432100000001ull

static uint32_t seed_of(int round, int what)
{
    return (uint32_t)(round * 16 + what + 1);
}

static void ops_target(cf_side_t *s, const cf_wire_t *peer, int fd, int round)
{
    uint8_t *m = s->mem.buf;
    memset(m, 0, OPS_MEM);
    cf_fill(m + OFF_READ, 8192, seed_of(round, 5));
    memcpy(m + OFF_ATOM, &(uint64_t){ATOM_V0}, 8);
    for (int i = 0; i < 3; i++) {
        urma_sge_t rs;
        cf_sge(&rs, m + OFF_RECV + 32768 * i, 32768, s->mem.tseg);
        JT_REQUIRE(cf_post_recv(s->ep.jetty, &rs, 1, 0x700 + (uint64_t)i) == 0);
    }
    JT_REQUIRE(cf_sync(fd, T_READY) == 0);
    urma_cr_t cr[3];
    memset(cr, 0, sizeof cr);
    JT_CHECK_EQ(cf_poll(s->ep.jfc, cr, 3, CF_WAIT_MS * 2), 3);
    bool seen[3] = {0};
    for (int k = 0; k < 3; k++) {
        JT_CHECK_EQ(cr[k].status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr[k].flag.bs.s_r, 1);
        JT_CHECK_EQ(cr[k].remote_id.id, peer->jetty_id.id);
        JT_CHECK(cf_eid_eq(&cr[k].remote_id.eid, &peer->eid));
        long ri = (long)cr[k].user_ctx - 0x700;
        JT_CHECK(ri >= 0 && ri < 3);
        const uint8_t *buf = m + OFF_RECV + 32768 * (ri >= 0 && ri < 3 ? ri : 0);
        if (cr[k].opcode == URMA_CR_OPC_SEND && !seen[0]) {
            seen[0] = true;
            JT_CHECK_EQ(cr[k].completion_len, 5000);
            JT_CHECK_EQ(cf_check_fill(buf, 5000, seed_of(round, 1)), -1);
        } else if (cr[k].opcode == URMA_CR_OPC_SEND_WITH_IMM && !seen[1]) {
            seen[1] = true;
            JT_CHECK_EQ(cr[k].completion_len, 3000);
            JT_CHECK_EQ(cr[k].imm_data, SEND_IMM_V ^ (uint64_t)round);
            JT_CHECK_EQ(cf_check_fill(buf, 3000, seed_of(round, 2)), -1);
        } else if (cr[k].opcode == URMA_CR_OPC_WRITE_WITH_IMM && !seen[2]) {
            seen[2] = true;
            JT_CHECK_EQ(cr[k].completion_len, 2000);
            JT_CHECK_EQ(cr[k].imm_data, WIMM_V ^ (uint64_t)round);
            JT_CHECK_EQ(cf_check_byte(buf, 32768, 0), -1); /* WRITE_IMM data goes elsewhere */
        } else {
            CF_FAILF("unexpected receive CR opcode %d", cr[k].opcode);
        }
    }
    JT_REQUIRE(cf_msg_recv(fd, T_DONE, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    JT_CHECK_EQ(cf_check_fill(m + OFF_WRITE, 8192, seed_of(round, 3)), -1);
    JT_CHECK_EQ(cf_check_byte(m + OFF_WRITE + 8192, OFF_WIMM - 8192, 0), -1);
    JT_CHECK_EQ(cf_check_fill(m + OFF_WIMM, 2000, seed_of(round, 4)), -1);
    JT_CHECK_EQ(cf_check_fill(m + OFF_READ, 8192, seed_of(round, 5)), -1);
    uint64_t w;
    memcpy(&w, m + OFF_ATOM, 8);
    JT_CHECK_EQ(w, ATOM_V1 + 5);
    JT_CHECK_EQ(cf_quiet(s->ep.jfc, 0), 0);
    JT_REQUIRE(cf_msg_send(fd, T_VERIFIED, NULL, 0) == 0);
}

static void ops_initiator(cf_side_t *s, const cf_wire_t *peer, int fd, int round)
{
    uint8_t *m = s->mem.buf;
    uint8_t *src = m + OFF_SRC;
    urma_target_jetty_t *tj = s->tj;
    JT_REQUIRE(cf_msg_recv(fd, T_READY, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    JT_REQUIRE(cf_msg_send(fd, T_READY, NULL, 0) == 0);
    uint64_t va = peer->seg_va;
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    urma_cr_t cr;

    cf_fill(src, 5000, seed_of(round, 1));
    cf_sge(&l, src, 5000, s->mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, tj, &l, 1, 0, 1);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 1, "SEND");

    cf_fill(src, 3000, seed_of(round, 2));
    cf_sge(&l, src, 3000, s->mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND_IMM, tj, &l, 1, SEND_IMM_V ^ (uint64_t)round, 2);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 2, "SEND_IMM");

    cf_fill(src, 8192, seed_of(round, 3));
    cf_sge(&l, src, 8192, s->mem.tseg);
    cf_rsge(&r, va + OFF_WRITE, 8192, s->rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE, tj, &l, 1, &r, 1, 0, 3);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    if (cf_poll1(s->ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 3);
        JT_CHECK_EQ(cr.completion_len, 8192);
        JT_CHECK_EQ(cr.remote_id.id, peer->jetty_id.id);
        JT_CHECK_EQ(cr.local_id, s->ep.jetty->jetty_id.id);
    }

    cf_fill(src, 2000, seed_of(round, 4));
    cf_sge(&l, src, 2000, s->mem.tseg);
    cf_rsge(&r, va + OFF_WIMM, 2000, s->rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE_IMM, tj, &l, 1, &r, 1, WIMM_V ^ (uint64_t)round, 4);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 4, "WRITE_IMM");

    memset(src, 0xAB, 8192);
    cf_sge(&l, src, 8192, s->mem.tseg);
    cf_rsge(&r, va + OFF_READ, 8192, s->rseg);
    cf_wr_rw(&wr, URMA_OPC_READ, tj, &r, 1, &l, 1, 0, 5);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 5, "READ");
    JT_CHECK_EQ(cf_check_fill(src, 8192, seed_of(round, 5)), -1);

    uint64_t *old = (uint64_t *)src;
    *old = 0;
    cf_sge(&l, src, 8, s->mem.tseg);
    cf_rsge(&r, va + OFF_ATOM, 8, s->rseg);
    cf_wr_cas(&wr, tj, &r, &l, ATOM_V0, ATOM_V1, 6);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 6, "CAS");
    JT_CHECK_EQ(*old, ATOM_V0);
    cf_wr_faa(&wr, tj, &r, &l, 5, 7);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 7, "FAA");
    JT_CHECK_EQ(*old, ATOM_V1);

    JT_REQUIRE(cf_msg_send(fd, T_DONE, NULL, 0) == 0);
    JT_REQUIRE(cf_msg_recv(fd, T_VERIFIED, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
}

typedef struct ops_arg {
    urma_transport_mode_t mode;
    int kind;
} ops_arg_t;

/* Both processes run this; `first` decides who initiates in round 0. */
static int ops_both_ways(int fd, const ops_arg_t *arg, bool first)
{
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(arg->mode);
    if (mp_connect(&d, &s, &peer, fd, &o, OPS_MEM, arg->kind, first ? 0x1001 : 0x2002)) return -1;
    for (int round = 0; round < 2; round++) {
        int f0 = jt_case_failed;
        if ((round == 0) == first)
            ops_initiator(&s, &peer, fd, round);
        else
            ops_target(&s, &peer, fd, round);
        if (jt_case_failed && !f0)
            fprintf(stderr, "  ^ pid %d, %s, round %d\n", (int)getpid(),
                    (round == 0) == first ? "initiator" : "target", round);
        if (jt_case_failed) break;
    }
    cf_sync(fd, T_EXIT);
    mp_disconnect(&s, false);
    return 0;
}

static int ops_peer(int fd, void *arg)
{
    return ops_both_ways(fd, arg, false);
}

static void run_ops(urma_transport_mode_t mode, int kind)
{
    ops_arg_t arg = {mode, kind};
    cf_peer_t p;
    JT_REQUIRE(cf_peer_fork(&p, ops_peer, &arg) == 0);
    ops_both_ways(p.fd, &arg, true);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 0);
}

static void opcodes_both_ways_memfd(void)
{
    run_ops(URMA_TM_RM, CF_MEM_MEMFD);
}
static void opcodes_both_ways_memalign(void)
{
    run_ops(URMA_TM_RM, CF_MEM_MEMALIGN);
}
static void opcodes_both_ways_rc(void)
{
    run_ops(URMA_TM_RC, CF_MEM_MEMFD);
}

/* ------------------------------------------------------------------------ */
/* 1 MiB and 4 MiB                                                           */
/* ------------------------------------------------------------------------ */

#define MIB       (1024u * 1024u)
#define LARGE_MEM (10 * MIB)

static void large_target(cf_side_t *s, int fd, int round)
{
    uint8_t *m = s->mem.buf;
    memset(m, 0, LARGE_MEM);
    cf_fill(m + 4 * MIB, 4 * MIB, seed_of(round, 8));
    urma_sge_t rs;
    cf_sge(&rs, m + 8 * MIB, MIB, s->mem.tseg);
    JT_REQUIRE(cf_post_recv(s->ep.jetty, &rs, 1, 0x800) == 0);
    JT_REQUIRE(cf_sync(fd, T_READY) == 0);
    urma_cr_t cr;
    if (cf_poll1(s->ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.completion_len, MIB);
        JT_CHECK_EQ(cr.user_ctx, 0x800);
    }
    JT_REQUIRE(cf_msg_recv(fd, T_DONE, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    long bad = cf_check_fill(m, 4 * MIB, seed_of(round, 7));
    if (bad >= 0) CF_FAILF("4 MiB WRITE differs at byte %ld", bad);
    bad = cf_check_fill(m + 8 * MIB, MIB, seed_of(round, 9));
    if (bad >= 0) CF_FAILF("1 MiB SEND differs at byte %ld", bad);
    JT_CHECK_EQ(cf_check_byte(m + 9 * MIB, MIB, 0), -1);
    JT_REQUIRE(cf_msg_send(fd, T_VERIFIED, NULL, 0) == 0);
}

static void large_initiator(cf_side_t *s, const cf_wire_t *peer, int fd, int round)
{
    uint8_t *m = s->mem.buf;
    JT_REQUIRE(cf_msg_recv(fd, T_READY, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    JT_REQUIRE(cf_msg_send(fd, T_READY, NULL, 0) == 0);
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    cf_fill(m, 4 * MIB, seed_of(round, 7));
    cf_sge(&l, m, 4 * MIB, s->mem.tseg);
    cf_rsge(&r, peer->seg_va, 4 * MIB, s->rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE, s->tj, &l, 1, &r, 1, 0, 1);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 1, "4 MiB WRITE");

    memset(m + 4 * MIB, 0, 4 * MIB);
    cf_sge(&l, m + 4 * MIB, 4 * MIB, s->mem.tseg);
    cf_rsge(&r, peer->seg_va + 4 * MIB, 4 * MIB, s->rseg);
    cf_wr_rw(&wr, URMA_OPC_READ, s->tj, &r, 1, &l, 1, 0, 2);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    urma_cr_t cr;
    if (cf_poll1(s->ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.completion_len, 4 * MIB);
    }
    long bad = cf_check_fill(m + 4 * MIB, 4 * MIB, seed_of(round, 8));
    if (bad >= 0) CF_FAILF("4 MiB READ differs at byte %ld", bad);

    cf_fill(m + 8 * MIB, MIB, seed_of(round, 9));
    cf_sge(&l, m + 8 * MIB, MIB, s->mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, s->tj, &l, 1, 0, 3);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 3, "1 MiB SEND");
    JT_REQUIRE(cf_msg_send(fd, T_DONE, NULL, 0) == 0);
    JT_REQUIRE(cf_msg_recv(fd, T_VERIFIED, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
}

static int large_both_ways(int fd, bool first)
{
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    /* One side memfd, the other posix_memalign: each round crosses both paths. */
    int kind = first ? CF_MEM_MEMFD : CF_MEM_MEMALIGN;
    if (mp_connect(&d, &s, &peer, fd, &o, LARGE_MEM, kind, 0x3003)) return -1;
    if (CF_CAP(&d).max_msg_size < 4 * MIB)
        CF_FAILF("max_msg_size %llu < 4 MiB", (unsigned long long)CF_CAP(&d).max_msg_size);
    for (int round = 0; round < 2 && !jt_case_failed; round++) {
        if ((round == 0) == first)
            large_initiator(&s, &peer, fd, round);
        else
            large_target(&s, fd, round);
    }
    cf_sync(fd, T_EXIT);
    mp_disconnect(&s, false);
    return 0;
}

static int large_peer(int fd, void *arg)
{
    return large_both_ways(fd, false);
}

static void large_transfers(void)
{
    cf_peer_t p;
    JT_REQUIRE(cf_peer_fork(&p, large_peer, NULL) == 0);
    large_both_ways(p.fd, true);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* Events across processes                                                   */
/* ------------------------------------------------------------------------ */

static void event_receiver(cf_side_t *s, int fd)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    JT_REQUIRE(ep >= 0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
    JT_REQUIRE(epoll_ctl(ep, EPOLL_CTL_ADD, s->ep.jfce->fd, &ev) == 0);
    urma_sge_t rs;
    memset(s->mem.buf, 0, 4096);
    cf_sge(&rs, s->mem.buf, 4096, s->mem.tseg);
    JT_REQUIRE(cf_post_recv(s->ep.jetty, &rs, 1, 0x900) == 0);
    JT_CHECK_EQ(cf.urma_rearm_jfc(s->ep.jfc, false), URMA_SUCCESS);
    JT_CHECK_EQ(epoll_wait(ep, &ev, 1, 0), 0);
    JT_REQUIRE(cf_msg_send(fd, T_ARMED, NULL, 0) == 0);
    /* Asleep in epoll until the other process's SEND lands. */
    int n = epoll_wait(ep, &ev, 1, CF_WAIT_MS * 2);
    JT_CHECK_EQ(n, 1);
    if (n == 1) {
        urma_jfc_t *jfcs[16];
        JT_CHECK_EQ(cf.urma_wait_jfc(s->ep.jfce, 16, 0, jfcs), 1);
        JT_CHECK(jfcs[0] == s->ep.jfc);
        uint32_t one = 1;
        cf.urma_ack_jfc(jfcs, &one, 1);
        urma_cr_t cr;
        if (cf_poll1(s->ep.jfc, &cr) == 0) {
            JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
            JT_CHECK_EQ(cr.user_ctx, 0x900);
            JT_CHECK_EQ(cr.completion_len, 777);
        }
        JT_CHECK_EQ(cf_check_fill(s->mem.buf, 777, 55), -1);
    }
    close(ep);
    JT_REQUIRE(cf_msg_send(fd, T_GOT, NULL, 0) == 0);
}

static void event_sender(cf_side_t *s, int fd)
{
    JT_REQUIRE(cf_msg_recv(fd, T_ARMED, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    cf_sleep_ms(100); /* let the receiver fall asleep */
    urma_sge_t l;
    urma_jfs_wr_t wr;
    cf_fill(s->mem.buf + 8192, 777, 55);
    cf_sge(&l, s->mem.buf + 8192, 777, s->mem.tseg);
    cf_wr_send(&wr, URMA_OPC_SEND, s->tj, &l, 1, 0, 0x901);
    JT_REQUIRE(cf_post(s->ep.jetty, &wr) == 0);
    cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, 0x901, "SEND that wakes the peer");
    JT_REQUIRE(cf_msg_recv(fd, T_GOT, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    /* The sender's JFC was not armed: no event on its JFCE. */
    urma_jfc_t *jfcs[16];
    JT_CHECK_EQ(cf.urma_wait_jfc(s->ep.jfce, 16, 0, jfcs), 0);
}

static int events_both_ways(int fd, bool first)
{
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfce = true;
    if (mp_connect(&d, &s, &peer, fd, &o, 65536, first ? CF_MEM_MEMFD : CF_MEM_MEMALIGN, 0x4004))
        return -1;
    for (int round = 0; round < 2 && !jt_case_failed; round++) {
        if ((round == 0) == first)
            event_sender(&s, fd);
        else
            event_receiver(&s, fd);
    }
    cf_sync(fd, T_EXIT);
    mp_disconnect(&s, false);
    return 0;
}

static int events_peer(int fd, void *arg)
{
    return events_both_ways(fd, false);
}

static void event_mode_cross_process(void)
{
    cf_peer_t p;
    JT_REQUIRE(cf_peer_fork(&p, events_peer, NULL) == 0);
    events_both_ways(p.fd, true);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* Peer killed mid-traffic                                                   */
/* ------------------------------------------------------------------------ */

#define KILL_WAIT_MS 10000

static int victim(int fd, void *arg)
{
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    if (mp_connect(&d, &s, &peer, fd, &o, 65536, CF_MEM_MEMFD, 0x5005)) return -1;
    for (int i = 0; i < 4; i++) {
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf + 1024 * i, 1024, s.mem.tseg);
        if (cf_post_recv(s.ep.jetty, &rs, 1, (uint64_t)i)) return -1;
    }
    cf_msg_send(fd, T_ARMED, NULL, 0);
    for (;;)
        pause(); /* killed here */
}

static void peer_killed(void)
{
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.rnr_retry = 7; /* infinite: only the death can end the stuck WRs */
    if (mp_case_open(&p, victim, &d, &s, &peer, &o, 65536, CF_MEM_MEMFD, 0x6006)) return;
    JT_REQUIRE(cf_msg_recv(p.fd, T_ARMED, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    /* A WRITE while the peer lives: its memfd gets mapped (and cached) here. */
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    cf_sge(&l, s.mem.buf, 64, s.mem.tseg);
    cf_rsge(&r, peer.seg_va + 8192, 64, s.rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE, s.tj, &l, 1, &r, 1, 0, 0x100);
    JT_REQUIRE(cf_post(s.ep.jetty, &wr) == 0);
    cf_expect_cr(s.ep.jfc, URMA_CR_SUCCESS, 0x100, "WRITE to the live peer");
    /* 8 SENDs for 4 receives: 4 complete, 4 stay outstanding in RNR. */
    enum { N = 8 };
    urma_jfs_wr_t sw[N];
    for (int i = 0; i < N; i++) {
        cf_wr_send(&sw[i], URMA_OPC_SEND, s.tj, &l, 1, 0, (uint64_t)i);
        sw[i].next = i + 1 < N ? &sw[i + 1] : NULL;
    }
    JT_REQUIRE(cf_post(s.ep.jetty, sw) == 0);
    urma_cr_t cr[N];
    JT_CHECK_EQ(cf_poll(s.ep.jfc, cr, 4, CF_WAIT_MS), 4);
    for (int i = 0; i < 4; i++)
        JT_CHECK_EQ(cr[i].status, URMA_CR_SUCCESS);
    JT_CHECK_EQ(cf_quiet(s.ep.jfc, CF_QUIET_MS), 0);

    kill(p.pid, SIGKILL);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 128 + SIGKILL);
    int got = cf_poll(s.ep.jfc, cr, 4, KILL_WAIT_MS);
    if (got != 4)
        CF_FAILF("%d of 4 outstanding WRs completed within %d ms of the peer's death", got,
                 KILL_WAIT_MS);
    for (int i = 0; i < got; i++) {
        if (cr[i].status == URMA_CR_SUCCESS)
            CF_FAILF("WR %llu to a dead peer completed successfully",
                     (unsigned long long)cr[i].user_ctx);
        JT_CHECK_EQ(cr[i].user_ctx, (uint64_t)i + 4);
    }
    /* New WRs to the dead peer: error CRs, never a hang; the cached mapping is no excuse. */
    cf_wr_rw(&wr, URMA_OPC_WRITE, s.tj, &l, 1, &r, 1, 0, 0x101);
    JT_REQUIRE(cf_post(s.ep.jetty, &wr) == 0);
    cf_wr_send(&sw[0], URMA_OPC_SEND, s.tj, &l, 1, 0, 0x102);
    sw[0].next = NULL;
    JT_REQUIRE(cf_post(s.ep.jetty, &sw[0]) == 0);
    cf_wr_rw(&wr, URMA_OPC_READ, s.tj, &r, 1, &l, 1, 0, 0x103);
    JT_REQUIRE(cf_post(s.ep.jetty, &wr) == 0);
    got = cf_poll(s.ep.jfc, cr, 3, KILL_WAIT_MS);
    JT_CHECK_EQ(got, 3);
    for (int i = 0; i < got; i++) {
        JT_CHECK_EQ(cr[i].user_ctx, 0x101 + (uint64_t)i);
        if (cr[i].status == URMA_CR_SUCCESS)
            CF_FAILF("WR 0x%llx to a dead peer completed successfully",
                     (unsigned long long)cr[i].user_ctx);
    }
    /* Teardown does not hang either. */
    mp_disconnect(&s, true);
}

/* A SEND small enough to travel in the completion record, posted as soon as
 * the peer is known dead (well within the liveness check, once a second): an error
 * CR, not a success for a message nobody will ever read. */
static void small_send_right_after_death(void)
{
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    if (mp_case_open(&p, victim, &d, &s, &peer, &o, 65536, CF_MEM_MEMFD, 0x6116)) return;
    JT_REQUIRE(cf_msg_recv(p.fd, T_ARMED, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    JT_REQUIRE(cf_side_send(&s, s.mem.buf, 16, URMA_OPC_SEND, 0, 0x200) == 0);
    cf_expect_cr(s.ep.jfc, URMA_CR_SUCCESS, 0x200, "small SEND to the live peer");
    kill(p.pid, SIGKILL);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 128 + SIGKILL);
    JT_REQUIRE(cf_side_send(&s, s.mem.buf, 16, URMA_OPC_SEND, 0, 0x201) == 0);
    urma_cr_t cr;
    if (cf_poll1(s.ep.jfc, &cr) == 0) {
        JT_CHECK_EQ(cr.user_ctx, 0x201);
        if (cr.status == URMA_CR_SUCCESS) CF_FAILF("a small SEND to a dead peer completed successfully");
    }
    mp_disconnect(&s, true);
}

/* A sender that dies after it took a receive WR and before its CR (here at
 * once, SOFTUB_DIE_ON_TAKE_IMM; in life, killed mid-copy), for a small
 * message (the sender still holds the queue's slot) and a large one (it has
 * released the slot, the WR is still outstanding). On hardware a receive WR is not lost when a sender goes away:
 * the owner's later posts must keep succeeding within the depth, lap after
 * lap of the receive queue, and the WR the dead sender took must serve a
 * later message. */
#define DIE_IMM 0xDEADFA11C0FFEE01ull
#define TK_DEPTH 8
#define TK_BUF   16384

typedef struct taker_arg {
    uint32_t len;
    uint64_t imm; /* DIE_IMM + a TK_DIE_* step */
} taker_arg_t;

/* Where the taker dies (softub's SOFTUB_DIE_ON_TAKE_IMM steps). */
enum {
    TK_DIE_BEFORE_CR = 0, /* took the WR, before its data and CR */
    TK_DIE_AFTER_CR = 1,  /* after its CR, before it released the slot */
    TK_DIE_AT_CLAIM = 2,  /* claimed the slot, before it marked it as its own */
    /* In its CR's push (the owner's JFC is left with a slot claimed and
     * never written, before every later CR): */
    TK_DIE_CR_CLAIMED = 3,    /* claimed (and recorded) the CR slot, WR not yet marked */
    TK_DIE_CR_MARKED = 4,     /* marked the WR as completed, before the CR */
    TK_DIE_EVENT = 5,         /* after its CR, claimed (and recorded) a JFCE event slot */
    TK_DIE_EVENT_WRITTEN = 6, /* wrote that event, before counting it on the eventfd */
    TK_DIE_DISARMED = 7,      /* after its CR, disarmed the JFC, before claiming an event slot */
};

/* The peer of a taker case: one SEND_IMM of a->len bytes (filled with seed
 * TAKER_SEED) carrying a->imm, which softub's knobs turn into its death or
 * its stop when it takes the receive. A stopped peer goes on when continued
 * and finishes normally. */
#define TAKER_SEED 0x5709u
static int taker_sends(int fd, void *arg)
{
    const taker_arg_t *a = arg;
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    if (mp_peer_open(fd, &d, &s, &peer, URMA_TM_RM, 0x7007)) return -1;
    cf_fill(s.mem.buf, a->len, TAKER_SEED);
    if (cf_side_send(&s, s.mem.buf, a->len, URMA_OPC_SEND_IMM, a->imm, 1)) return -1;
    cf_expect_cr(s.ep.jfc, URMA_CR_SUCCESS, 1, "SEND_IMM of the taker");
    return mp_peer_finish(fd, &s, NULL, 0);
}

/* The owner's start of a taker case: forks the peer running fn, connects a
 * side whose JFR (depth TK_DEPTH) has TK_DEPTH receives of TK_BUF posted
 * (user_ctx 0, 1, ...), and lets the peer go (T_GO); events: its JFC has a
 * JFCE and is armed. 0, or -1 with the peer reaped (killed if it had
 * started). */
static int tk_start(cf_peer_t *p, cf_peer_fn fn, void *arg, cf_dev_t *d, cf_side_t *s,
                    bool events)
{
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfr_depth = TK_DEPTH;
    o.jfce = events;
    if (cf_peer_fork(p, fn, arg) != 0) {
        CF_FAILF("cannot fork the peer");
        return -1;
    }
    if (mp_connect(d, s, &peer, p->fd, &o, TK_DEPTH * TK_BUF, CF_MEM_MEMFD, 0x7117)) {
        cf_peer_wait(p, 0);
        return -1;
    }
    for (int i = 0; i < TK_DEPTH; i++) {
        urma_sge_t rs;
        cf_sge(&rs, s->mem.buf + TK_BUF * i, TK_BUF, s->mem.tseg);
        if (cf_post_recv(s->ep.jetty, &rs, 1, (uint64_t)i) != 0) goto fail;
    }
    if (events && cf.urma_rearm_jfc(s->ep.jfc, false) != URMA_SUCCESS) goto fail;
    if (cf_msg_send(p->fd, T_GO, NULL, 0) == 0) return 0;
fail:
    kill(p->pid, SIGKILL);
    cf_peer_wait(p, CF_WAIT_MS);
    mp_disconnect(s, true);
    return -1;
}

/* A stopped taker, continued, finishes its case (0); -1 when it does not. */
static int tk_sender_finishes(cf_peer_t *p)
{
    if (cf_msg_recv(p->fd, T_DONE, NULL, 0, CF_CASE_TIMEOUT_MS) != 0) {
        CF_FAILF("the continued sender did not finish");
        return -1;
    }
    cf_sync(p->fd, T_EXIT);
    JT_CHECK_EQ(cf_peer_wait(p, CF_WAIT_MS), 0);
    return 0;
}

/* A second jetty of this process (s2) that sends to s beside the taker. */
static int tk_second_jetty(cf_dev_t *d, cf_side_t *s, cf_side_t *s2)
{
    cf_ep_opts_t o2 = cf_ep_defaults(URMA_TM_RM);
    if (cf_side_open(s2, d, NULL, &o2, 65536, CF_MEM_MEMALIGN, 0x7227) != 0) return -1;
    cf_wire_t me;
    cf_side_describe(s, &me);
    if (cf_side_import(s2, &me) == 0) return 0;
    cf_side_close(s2, true);
    return -1;
}

/* Message k of the second jetty: 100 bytes to s, its receive completion in
 * *cr (checked: success, 100 bytes) and its send completion. 0, or -1 when
 * it could not be posted or never arrived. */
static int tk_send_one(cf_side_t *s2, cf_side_t *s, int k, urma_cr_t *cr)
{
    if (cf_side_send(s2, s2->mem.buf, 100, URMA_OPC_SEND, 0, (uint64_t)k)) return -1;
    if (cf_poll(s->ep.jfc, cr, 1, CF_WAIT_MS) != 1) {
        CF_FAILF("message %d never arrived", k);
        return -1;
    }
    JT_CHECK_EQ(cr->status, URMA_CR_SUCCESS);
    JT_CHECK_EQ(cr->completion_len, 100u);
    cf_expect_cr(s2->ep.jfc, URMA_CR_SUCCESS, (uint64_t)k, "SEND beside the taker");
    return 0;
}

/* reset: the owner then moves its JFR to RESET and READY and posts its
 * receives anew (user_ctx TK_DEPTH + i): a RESET gives up every WR, so the
 * one the dead sender took must never be posted again. */
static void taker_killed(uint32_t len, int step, bool reset)
{
    bool after_cr = step == TK_DIE_AFTER_CR;
    taker_arg_t ta = {.len = len, .imm = DIE_IMM + (uint64_t)step};
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    if (tk_start(&p, taker_sends, &ta, &d, &s, false) != 0) return;
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 128 + SIGKILL);
    urma_cr_t first;
    if (after_cr) {
        /* Its message arrived whole (WR 0); only the slot stays taken. */
        JT_REQUIRE(cf_poll(s.ep.jfc, &first, 1, CF_WAIT_MS) == 1);
        JT_CHECK_EQ(first.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(first.user_ctx, 0u);
        JT_CHECK_EQ(first.completion_len, len);
        JT_CHECK_EQ(first.imm_data, DIE_IMM + 1);
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf, TK_BUF, s.mem.tseg);
        JT_REQUIRE(cf_post_recv(s.ep.jetty, &rs, 1, 0) == 0);
    }
    JT_CHECK_EQ(cf_quiet(s.ep.jfc, CF_QUIET_MS), 0); /* no (other) receive completed */
    uint64_t base = 0;
    if (reset) {
        urma_jfr_attr_t ra = {.mask = JFR_STATE, .state = URMA_JFR_STATE_RESET};
        JT_REQUIRE(cf.urma_modify_jfr(s.ep.jfr, &ra) == 0);
        ra.state = URMA_JFR_STATE_READY;
        JT_REQUIRE(cf.urma_modify_jfr(s.ep.jfr, &ra) == 0);
        base = TK_DEPTH;
        for (int i = 0; i < TK_DEPTH; i++) {
            urma_sge_t rs;
            cf_sge(&rs, s.mem.buf + TK_BUF * i, TK_BUF, s.mem.tseg);
            JT_REQUIRE(cf_post_recv(s.ep.jetty, &rs, 1, base + (uint64_t)i) == 0);
        }
    }
    /* A second jetty of this process sends 8 laps of the queue, one message
     * at a time; each receive is posted again as soon as it completes. */
    cf_side_t s2;
    JT_REQUIRE(tk_second_jetty(&d, &s, &s2) == 0);
    enum { K = 8 * TK_DEPTH * 2 };
    bool seen[TK_DEPTH] = {false};
    int got = 0, reposted = 0;
    for (int k = 0; k < K; k++) {
        urma_cr_t cr;
        if (tk_send_one(&s2, &s, k, &cr) != 0) break;
        if (cr.user_ctx < base || cr.user_ctx >= base + TK_DEPTH) {
            CF_FAILF("a receive completion names WR %llu", (unsigned long long)cr.user_ctx);
            break;
        }
        got++;
        seen[cr.user_ctx - base] = true;
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf + TK_BUF * (cr.user_ctx - base), TK_BUF, s.mem.tseg);
        /* A slot claimed by a taker that died before it marked it is given
         * back only after a second of the owner's refused posts (no pid to
         * ask): such a post is tried again meanwhile. */
        uint64_t until = cf_now_ms() + (step == TK_DIE_AT_CLAIM ? 5000 : 0);
        int prc;
        while ((prc = cf_try_post_recv(s.ep.jetty, &rs, 1, cr.user_ctx)) != 0 &&
               cf_now_ms() < until)
            usleep(1000);
        if (prc != 0) {
            CF_FAILF("re-posting a receive failed after %d messages (%d of %d WRs posted)", k,
                     TK_DEPTH - 1, TK_DEPTH);
            break;
        }
        reposted++;
    }
    JT_CHECK_EQ(got, K);
    JT_CHECK_EQ(reposted, K);
    /* Receives are taken in posting order: the dead sender had WR 0 (after
     * a RESET, every new WR serves). */
    JT_CHECK(seen[0]);
    cf_side_close(&s2, true);
    mp_disconnect(&s, true);
}

/* A sender stopped (SIGSTOP) after it took a receive WR and before its data
 * and CR (here at once, SOFTUB_STOP_ON_TAKE_IMM; in life, job control or a
 * debugger) holds the receive ring's slot until it is continued. The
 * owner's post that reaches that slot a lap later is refused (URMA_ENOMEM)
 * at once, not after the 200 ms a preempted sender is given: a thread that
 * posts receives (an event loop) must not be held by a stopped peer. Once
 * continued, the sender finishes (its message arrives whole, in WR 0) and
 * the refused post succeeds. */
#define STOP_IMM 0x57095709C0FFEE01ull
#define STOP_LEN 3000u

/* The process's state letter in /proc/<pid>/stat, '?' when unreadable. */
static char mp_pid_state(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

/* Waits until the sender has stopped itself; false (and the case failed)
 * when it never does. */
static bool tk_stopped(pid_t pid)
{
    uint64_t until = cf_now_ms() + CF_WAIT_MS;
    while (mp_pid_state(pid) != 'T' && cf_now_ms() < until)
        usleep(1000);
    if (mp_pid_state(pid) == 'T') return true;
    CF_FAILF("the sender never stopped");
    return false;
}

static void taker_stopped(void)
{
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s, s2;
    bool s2_open = false;
    taker_arg_t ta = {.len = STOP_LEN, .imm = STOP_IMM};
    if (tk_start(&p, taker_sends, &ta, &d, &s, false) != 0) return;
    /* From here the peer may be stopped: every way out continues or kills it. */
    if (!tk_stopped(p.pid)) goto kill_peer;
    JT_CHECK_EQ(cf_quiet(s.ep.jfc, CF_QUIET_MS), 0); /* WR 0 is taken, nothing written */
    /* A second jetty of this process sends one message at a time; each
     * receive is posted again as soon as it completes, until a post reaches
     * the stopped sender's slot, a lap after WR 0. */
    if (tk_second_jetty(&d, &s, &s2) != 0) goto kill_peer;
    s2_open = true;
    int refused_at = -1;
    uint64_t refused_slot = 0, refused_ms = 0;
    for (int k = 0; k < 4 * TK_DEPTH && refused_at < 0; k++) {
        urma_cr_t cr;
        if (tk_send_one(&s2, &s, k, &cr) != 0) break;
        JT_CHECK(cr.user_ctx >= 1 && cr.user_ctx < TK_DEPTH); /* never the stopped sender's */
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf + TK_BUF * cr.user_ctx, TK_BUF, s.mem.tseg);
        uint64_t t0 = cf_now_ms();
        int rc = cf_try_post_recv(s.ep.jetty, &rs, 1, cr.user_ctx);
        if (rc != 0) {
            JT_CHECK_EQ(rc, URMA_ENOMEM);
            refused_ms = cf_now_ms() - t0;
            refused_at = k;
            refused_slot = cr.user_ctx;
        }
    }
    fprintf(stderr, "  post refused after %d messages, in %llu ms\n", refused_at,
            (unsigned long long)refused_ms);
    JT_CHECK(refused_at >= TK_DEPTH - 1);
    JT_CHECK(refused_ms < 100);
    JT_CHECK_EQ(mp_pid_state(p.pid), 'T');
    /* Continued: its message arrives whole in WR 0, and the post goes in. */
    if (kill(p.pid, SIGCONT) != 0) {
        CF_FAILF("SIGCONT: %s", strerror(errno));
        goto kill_peer;
    }
    urma_cr_t cr;
    if (cf_poll(s.ep.jfc, &cr, 1, CF_WAIT_MS) == 1) {
        JT_CHECK_EQ(cr.status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr.user_ctx, 0u);
        JT_CHECK_EQ(cr.completion_len, STOP_LEN);
        JT_CHECK_EQ(cr.imm_data, STOP_IMM);
        JT_CHECK_EQ(cf_check_fill(s.mem.buf, STOP_LEN, TAKER_SEED), -1);
    } else {
        CF_FAILF("the continued sender's message never arrived");
    }
    if (refused_at >= 0) {
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf + TK_BUF * refused_slot, TK_BUF, s.mem.tseg);
        JT_CHECK_EQ(cf_post_recv(s.ep.jetty, &rs, 1, refused_slot), 0);
    }
    if (tk_sender_finishes(&p) != 0) goto kill_peer;
    goto out;
kill_peer:
    kill(p.pid, SIGKILL); /* stopped or not */
    cf_peer_wait(&p, CF_WAIT_MS);
out:
    if (s2_open) cf_side_close(&s2, true);
    mp_disconnect(&s, true);
}

/* One case each (a case process opens softub once). */
static void taker_killed_small(void)
{
    taker_killed(3000, TK_DIE_BEFORE_CR, false); /* the slot is released after the CR */
}
static void taker_killed_large(void)
{
    taker_killed(12000, TK_DIE_BEFORE_CR, false); /* released before the copy */
}
static void taker_killed_after_cr(void)
{
    taker_killed(3000, TK_DIE_AFTER_CR, false); /* died between its CR and the release */
}
static void taker_killed_at_claim(void)
{
    taker_killed(3000, TK_DIE_AT_CLAIM, false); /* no pid in the slot to find dead */
}
static void taker_killed_cr_claimed(void)
{
    taker_killed(3000, TK_DIE_CR_CLAIMED, false); /* the WR serves again as not taken */
}
static void taker_killed_cr_marked(void)
{
    taker_killed(100, TK_DIE_CR_MARKED, false); /* a CR that would carry the payload */
}

/* After a dead sender's event was handled: three more SENDs from a second
 * jetty each raise one event on the rearmed JFC; then both sides close. */
static void tk_events_go_on(cf_dev_t *d, cf_side_t *s)
{
    cf_side_t s2;
    urma_jfc_t *jfcs[16];
    uint32_t one = 1;
    urma_cr_t cr;
    JT_REQUIRE(tk_second_jetty(d, s, &s2) == 0);
    for (int k = 0; k < 3 && !jt_case_failed; k++) {
        JT_CHECK_EQ(cf.urma_rearm_jfc(s->ep.jfc, false), URMA_SUCCESS);
        if (tk_send_one(&s2, s, k, &cr) != 0) break;
        int n = cf.urma_wait_jfc(s->ep.jfce, 16, CF_WAIT_MS, jfcs);
        JT_CHECK_EQ(n, 1);
        if (n != 1) break;
        JT_CHECK(jfcs[0] == s->ep.jfc);
        cf.urma_ack_jfc(jfcs, &one, 1);
        urma_sge_t rs;
        cf_sge(&rs, s->mem.buf + TK_BUF * cr.user_ctx, TK_BUF, s->mem.tseg);
        JT_CHECK_EQ(cf_post_recv(s->ep.jetty, &rs, 1, cr.user_ctx), 0);
    }
    cf_side_close(&s2, true);
    mp_disconnect(s, true);
}

/* A sender that dies after its CR, having claimed (and recorded) a slot in
 * the owner's JFCE for the event of that CR and before writing it: it had
 * disarmed the JFC, so that event may be the only one its owner will ever
 * wait for. The owner's wait, with nothing else sent, must still report it
 * (written for the dead sender), and the queue goes on reporting events. */
static void taker_killed_at_event(void)
{
    taker_arg_t ta = {.len = 3000, .imm = DIE_IMM + TK_DIE_EVENT};
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    if (tk_start(&p, taker_sends, &ta, &d, &s, true) != 0) return;
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 128 + SIGKILL);
    urma_jfc_t *jfcs[16];
    uint32_t one = 1;
    uint64_t t0 = cf_now_ms();
    int n = cf.urma_wait_jfc(s.ep.jfce, 16, CF_WAIT_MS, jfcs);
    fprintf(stderr, "  the dead sender's event came after %llu ms\n",
            (unsigned long long)(cf_now_ms() - t0));
    JT_CHECK_EQ(n, 1);
    if (n == 1) {
        JT_CHECK(jfcs[0] == s.ep.jfc);
        cf.urma_ack_jfc(jfcs, &one, 1);
    }
    urma_cr_t cr;
    JT_REQUIRE(cf_poll(s.ep.jfc, &cr, 1, CF_WAIT_MS) == 1); /* its CR was written */
    JT_CHECK_EQ(cr.user_ctx, 0u);
    JT_CHECK_EQ(cr.completion_len, 3000u);
    tk_events_go_on(&d, &s);
}

/* A sender killed at `step` of its CR's push, for which the owner's fd (as
 * an event loop waits on it) must still become readable and its wait
 * report the event: then its CR is there, and the queue goes on. `what`
 * says how the event was made good, for the log. */
static void tk_dead_sender_event_reported(int step, const char *what)
{
    taker_arg_t ta = {.len = 3000, .imm = DIE_IMM + (uint64_t)step};
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    if (tk_start(&p, taker_sends, &ta, &d, &s, true) != 0) return;
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 128 + SIGKILL);
    urma_jfc_t *jfcs[16];
    uint32_t one = 1;
    uint64_t t0 = cf_now_ms();
    struct pollfd pfd = {.fd = s.ep.jfce->fd, .events = POLLIN};
    JT_CHECK_EQ(poll(&pfd, 1, CF_WAIT_MS), 1);
    int n = cf.urma_wait_jfc(s.ep.jfce, 16, 0, jfcs);
    fprintf(stderr, "  the dead sender's event was %s after %llu ms\n", what,
            (unsigned long long)(cf_now_ms() - t0));
    JT_CHECK_EQ(n, 1);
    if (n == 1) {
        JT_CHECK(jfcs[0] == s.ep.jfc);
        cf.urma_ack_jfc(jfcs, &one, 1);
    }
    urma_cr_t cr;
    JT_REQUIRE(cf_poll(s.ep.jfc, &cr, 1, CF_WAIT_MS) == 1); /* its CR was written */
    JT_CHECK_EQ(cr.user_ctx, 0u);
    JT_CHECK_EQ(cr.completion_len, 3000u);
    tk_events_go_on(&d, &s);
}

/* A sender that dies after its CR, having disarmed the owner's armed JFC
 * for that CR's event and before claiming the event's slot: no event, no
 * slot claimed, and the JFC disarmed, so no later CR would fire it either;
 * an owner asleep on the JFCE's fd (an event loop) would never wake for it
 * again. The event is fired for the dead sender by the owner's progress
 * thread. */
static void taker_killed_at_disarm(void)
{
    tk_dead_sender_event_reported(TK_DIE_DISARMED, "fired for it");
}

/* A sender that dies after writing the event of its CR into the owner's
 * JFCE and before counting it on the owner's eventfd (the first signal to
 * a process opens that eventfd through pidfd_getfd: system calls): the
 * JFC is disarmed and the event queued, so without its count an owner
 * sleeping on the fd (an event loop) would never wake again for that JFC.
 * The count is written for the dead sender. */
static void taker_killed_after_event(void)
{
    tk_dead_sender_event_reported(TK_DIE_EVENT_WRITTEN, "counted");
}

/* A sender stopped (SIGSTOP) while it holds a claimed CR slot in the
 * owner's JFC: every later CR waits behind that slot for as long as it
 * stays stopped (a live producer's slot is never passed: it would write it
 * late, into a slot the poll has left), and all of them arrive, its own
 * first, once it is continued. */
static void taker_stopped_in_push(void)
{
    taker_arg_t ta = {.len = 3000, .imm = STOP_IMM + TK_DIE_CR_CLAIMED};
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s, s2;
    bool s2_open = false;
    if (tk_start(&p, taker_sends, &ta, &d, &s, false) != 0) return;
    if (!tk_stopped(p.pid)) goto kill_peer;
    if (tk_second_jetty(&d, &s, &s2) != 0) goto kill_peer;
    s2_open = true;
    JT_CHECK_EQ(cf_side_send(&s2, s2.mem.buf, 100, URMA_OPC_SEND, 0, 7), 0);
    cf_expect_cr(s2.ep.jfc, URMA_CR_SUCCESS, 7, "SEND behind the stopped sender's slot");
    urma_cr_t cr[4];
    /* Held behind the slot, not passed; even while this process is out of
     * descriptors, when the kernel cannot be asked whether the sender
     * lives (it is not taken for dead then). */
    struct rlimit old_nofile, nofile;
    JT_REQUIRE(getrlimit(RLIMIT_NOFILE, &old_nofile) == 0);
    nofile = old_nofile;
    nofile.rlim_cur = 512;
    JT_REQUIRE(setrlimit(RLIMIT_NOFILE, &nofile) == 0);
    int fds[512], nfd = 0;
    for (int fd; nfd < 512 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
        fds[nfd++] = fd;
    JT_CHECK_EQ(cf_poll(s.ep.jfc, cr, 1, 1500), 0);
    while (nfd > 0)
        close(fds[--nfd]);
    JT_REQUIRE(setrlimit(RLIMIT_NOFILE, &old_nofile) == 0);
    if (kill(p.pid, SIGCONT) != 0) {
        CF_FAILF("SIGCONT: %s", strerror(errno));
        goto kill_peer;
    }
    if (cf_poll(s.ep.jfc, cr, 2, CF_WAIT_MS) == 2) {
        JT_CHECK_EQ(cr[0].user_ctx, 0u);
        JT_CHECK_EQ(cr[0].completion_len, 3000u);
        JT_CHECK_EQ(cr[0].imm_data, STOP_IMM + TK_DIE_CR_CLAIMED);
        JT_CHECK_EQ(cf_check_fill(s.mem.buf, 3000, TAKER_SEED), -1);
        JT_CHECK_EQ(cr[1].completion_len, 100u);
    } else {
        CF_FAILF("the CRs did not all arrive once the sender went on");
    }
    if (tk_sender_finishes(&p) != 0) goto kill_peer;
    goto out;
kill_peer:
    kill(p.pid, SIGKILL);
    cf_peer_wait(&p, CF_WAIT_MS);
out:
    if (s2_open) cf_side_close(&s2, true);
    mp_disconnect(&s, true);
}

/* A sender stopped while it holds a claimed JFCE event slot: an event the
 * owner raises meanwhile (its rearm, with the sender's CR waiting) lands
 * behind that slot. A wait while the sender is stopped reports nothing and
 * loses nothing: once the sender goes on, both events are reported. */
static void taker_stopped_at_event(void)
{
    taker_arg_t ta = {.len = 3000, .imm = STOP_IMM + TK_DIE_EVENT};
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    if (tk_start(&p, taker_sends, &ta, &d, &s, true) != 0) return;
    if (!tk_stopped(p.pid)) goto kill_peer;
    /* Its CR is there; its event is not. The rearm fires at once (a CR
     * waits) into the slot after the stopped sender's. */
    JT_CHECK_EQ(cf.urma_rearm_jfc(s.ep.jfc, false), URMA_SUCCESS);
    urma_jfc_t *jfcs[16];
    uint64_t t0 = cf_now_ms();
    JT_CHECK_EQ(cf.urma_wait_jfc(s.ep.jfce, 16, 100, jfcs), 0);
    JT_CHECK(cf_now_ms() - t0 < 1000);
    if (kill(p.pid, SIGCONT) != 0) {
        CF_FAILF("SIGCONT: %s", strerror(errno));
        goto kill_peer;
    }
    int total = 0;
    for (int k = 0; k < 4 && total < 2; k++) {
        int n = cf.urma_wait_jfc(s.ep.jfce, 16, 2000, jfcs);
        for (int i = 0; i < n; i++) {
            JT_CHECK(jfcs[i] == s.ep.jfc);
            uint32_t one = 1;
            cf.urma_ack_jfc(&jfcs[i], &one, 1);
        }
        total += n > 0 ? n : 0;
    }
    JT_CHECK_EQ(total, 2);
    urma_cr_t cr;
    JT_CHECK_EQ(cf_poll(s.ep.jfc, &cr, 1, CF_WAIT_MS), 1);
    JT_CHECK_EQ(cr.completion_len, 3000u);
    if (tk_sender_finishes(&p) != 0) goto kill_peer;
    mp_disconnect(&s, true);
    return;
kill_peer:
    kill(p.pid, SIGKILL);
    cf_peer_wait(&p, CF_WAIT_MS);
    mp_disconnect(&s, true);
}

static void taker_killed_then_reset_small(void)
{
    taker_killed(3000, TK_DIE_BEFORE_CR, true);
}
static void taker_killed_then_reset_large(void)
{
    taker_killed(12000, TK_DIE_BEFORE_CR, true);
}
/* Twice in one case process: the second peer is forked while this process
 * has softub open, its progress thread running (the fork handlers; under
 * ThreadSanitizer, scripts/tsan.sh, a lock re-initialised in the child
 * showed as a double lock). */
static void taker_killed_fork_after_open(void)
{
    taker_killed(3000, TK_DIE_BEFORE_CR, false);
    taker_killed(12000, TK_DIE_BEFORE_CR, false);
}

/* ------------------------------------------------------------------------ */
/* Atomics on one word from the owner and from another process              */
/* ------------------------------------------------------------------------ */

#define FAA_N 3000

/* FAA_N fetch-and-adds of 1 on the word at va of the segment behind tseg. */
static int faa_many(cf_side_t *s, urma_target_jetty_t *tj, urma_target_seg_t *tseg, uint64_t va)
{
    for (int i = 0; i < FAA_N; i++) {
        urma_sge_t l, r;
        urma_jfs_wr_t wr;
        urma_cr_t cr;
        cf_sge(&l, s->mem.buf + 64, 8, s->mem.tseg);
        cf_rsge(&r, va, 8, tseg);
        cf_wr_faa(&wr, tj, &r, &l, 1, (uint64_t)i);
        if (cf_post(s->ep.jetty, &wr) || cf_poll1(s->ep.jfc, &cr)) return -1;
        if (cr.status != URMA_CR_SUCCESS) {
            CF_FAILF("FADD %d: status %d", i, (int)cr.status);
            return -1;
        }
    }
    return 0;
}

static int faa_peer(int fd, void *arg)
{
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    if (mp_peer_open(fd, &d, &s, &peer, URMA_TM_RM, 0xb00b)) return -1;
    faa_many(&s, s.tj, s.rseg, peer.seg_va);
    return mp_peer_finish(fd, &s, NULL, 0);
}

/* The word lives in heap memory (process_vm_* for the other process); the
 * owner's own FADDs, through a second jetty of its process, run at the same
 * time: none of the 2 x FAA_N increments may be lost. */
static void atomics_owner_and_peer(void)
{
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s, local;
    cf_wire_t peer, me;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    if (mp_case_open(&p, faa_peer, &d, &s, &peer, &o, 65536, CF_MEM_MEMALIGN, 0xc00c)) return;
    uint64_t *word = (uint64_t *)(void *)s.mem.buf;
    *word = 0;
    JT_REQUIRE(cf_side_open(&local, &d, s.ctx, &o, 4096, CF_MEM_MEMALIGN, 0xd00d) == 0);
    cf_side_describe(&s, &me);
    JT_REQUIRE(cf_side_import(&local, &me) == 0);
    JT_REQUIRE(cf_msg_send(p.fd, T_GO, NULL, 0) == 0);
    JT_CHECK_EQ(faa_many(&local, local.tj, local.rseg, me.seg_va), 0);
    JT_REQUIRE(cf_msg_recv(p.fd, T_DONE, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    JT_CHECK_EQ(__atomic_load_n(word, __ATOMIC_SEQ_CST), 2 * FAA_N);
    cf_side_close(&local, false);
    cf_sync(p.fd, T_EXIT);
    mp_disconnect(&s, false);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* An async event raised by another process that cannot write our fds       */
/* ------------------------------------------------------------------------ */

#define DB_SENDS 12

static int doorbell_sender(int fd, void *arg)
{
    /* This process signals the peer's event fds through its doorbell. */
    setenv("SOFTUB_NO_PIDFD", "1", 1);
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    if (mp_peer_open(fd, &d, &s, &peer, URMA_TM_RM, 0x9009)) return -1;
    for (int i = 0; i < DB_SENDS; i++) {
        urma_sge_t l;
        urma_jfs_wr_t wr;
        cf_sge(&l, s.mem.buf, 16, s.mem.tseg);
        cf_wr_send(&wr, URMA_OPC_SEND, s.tj, &l, 1, 0, (uint64_t)i);
        urma_cr_t cr;
        if (cf_post(s.ep.jetty, &wr) || cf_poll1(s.ep.jfc, &cr)) break;
    }
    return mp_peer_finish(fd, &s, NULL, 0);
}

/* The sender overflows our JFC (depth 4) and raises URMA_EVENT_JFC_ERR on our
 * context; it may not duplicate our async fd, so the event reaches that fd
 * through our doorbell and our progress thread. */
static void async_event_through_doorbell(void)
{
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    o.jfc_depth = 4;
    if (mp_case_open(&p, doorbell_sender, &d, &s, &peer, &o, 65536, CF_MEM_MEMFD, 0xa00a)) return;
    for (int i = 0; i < DB_SENDS; i++) {
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf + 256 * i, 256, s.mem.tseg);
        JT_REQUIRE(cf_post_recv(s.ep.jetty, &rs, 1, (uint64_t)i) == 0);
    }
    JT_REQUIRE(cf_msg_send(p.fd, T_GO, NULL, 0) == 0);
    JT_REQUIRE(cf_msg_recv(p.fd, T_DONE, NULL, 0, CF_CASE_TIMEOUT_MS) == 0);
    struct pollfd pf = {.fd = s.ctx->async_fd, .events = POLLIN};
    JT_CHECK_EQ(poll(&pf, 1, CF_WAIT_MS), 1);
    urma_async_event_t ae;
    memset(&ae, 0, sizeof ae);
    if (pf.revents & POLLIN) {
        JT_REQUIRE(cf.urma_get_async_event(s.ctx, &ae) == URMA_SUCCESS);
        JT_CHECK_EQ(ae.event_type, URMA_EVENT_JFC_ERR);
        JT_CHECK(ae.element.jfc == s.ep.jfc);
        cf.urma_ack_async_event(&ae);
    }
    cf_sync(p.fd, T_EXIT);
    mp_disconnect(&s, false);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 0);
}

/* ------------------------------------------------------------------------ */
/* UM loss injection                                                         */
/* ------------------------------------------------------------------------ */

#define UM_N   200
#define UM_LEN 64

static int um_sender(int fd, void *arg)
{
    /* Read once at init by the provider of this process only. */
    setenv("SOFTUB_UM_DROP_PPM", "300000", 1);
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    if (mp_peer_open(fd, &d, &s, &peer, URMA_TM_UM, 0x7007)) return -1;
    int ok = 0, err = 0;
    for (int i = 0; i < UM_N; i++) {
        uint8_t *buf = s.mem.buf + (size_t)(i % 64) * UM_LEN;
        uint32_t seq = (uint32_t)i;
        memcpy(buf, &seq, 4);
        cf_fill(buf + 4, UM_LEN - 4, 5000 + seq);
        urma_sge_t l;
        urma_jfs_wr_t wr;
        cf_sge(&l, buf, UM_LEN, s.mem.tseg);
        cf_wr_send(&wr, URMA_OPC_SEND, s.tj, &l, 1, 0, seq);
        if (cf_post(s.ep.jetty, &wr)) break;
        urma_cr_t cr;
        if (cf_poll1(s.ep.jfc, &cr)) break;
        if (cr.status == URMA_CR_SUCCESS && cr.user_ctx == seq)
            ok++;
        else
            err++;
    }
    if (err) CF_FAILF("UM sender: %d error CRs (loss must be silent)", err);
    JT_CHECK_EQ(ok, UM_N);
    return mp_peer_finish(fd, &s, &ok, sizeof ok);
}

static void um_loss_injection(void)
{
    cf_peer_t p;
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_UM);
    o.jfr_depth = UM_N + 16;
    if (mp_case_open(&p, um_sender, &d, &s, &peer, &o, UM_N * 256, CF_MEM_MEMFD, 0x8008)) return;
    memset(s.mem.buf, 0, UM_N * 256);
    for (int i = 0; i < UM_N; i++) {
        urma_sge_t rs;
        cf_sge(&rs, s.mem.buf + 256 * i, 256, s.mem.tseg);
        JT_REQUIRE(cf_post_recv(s.ep.jetty, &rs, 1, (uint64_t)i) == 0);
    }
    JT_REQUIRE(cf_msg_send(p.fd, T_GO, NULL, 0) == 0);
    int sent = 0;
    JT_REQUIRE(cf_msg_recv(p.fd, T_DONE, &sent, sizeof sent, CF_CASE_TIMEOUT_MS) == 0);
    static urma_cr_t cr[UM_N + 1];
    int got = cf_poll(s.ep.jfc, cr, UM_N + 1, 500);
    static bool seen[UM_N];
    int intact = 0;
    for (int k = 0; k < got; k++) {
        JT_CHECK_EQ(cr[k].status, URMA_CR_SUCCESS);
        JT_CHECK_EQ(cr[k].completion_len, UM_LEN);
        uint64_t ri = cr[k].user_ctx;
        if (ri >= UM_N) {
            CF_FAILF("receive CR with unknown user_ctx %llu", (unsigned long long)ri);
            continue;
        }
        const uint8_t *buf = s.mem.buf + 256 * ri;
        uint32_t seq;
        memcpy(&seq, buf, 4);
        if (seq >= UM_N || seen[seq]) {
            CF_FAILF("message seq %u unknown or delivered twice", seq);
            continue;
        }
        seen[seq] = true;
        if (cf_check_fill(buf + 4, UM_LEN - 4, 5000 + seq) == -1)
            intact++;
        else
            CF_FAILF("message seq %u corrupted", seq);
    }
    fprintf(stderr, "  UM: %d of %d sends delivered with 30%% injected loss\n", got, sent);
    if (got <= 0 || got >= UM_N)
        CF_FAILF("%d of %d UM sends arrived: loss injection had %s effect", got, UM_N,
                 got >= UM_N ? "no" : "total");
    JT_CHECK_EQ(intact, got);
    cf_sync(p.fd, T_EXIT);
    JT_CHECK_EQ(cf_peer_wait(&p, CF_WAIT_MS), 0);
    mp_disconnect(&s, false);
}

/* ------------------------------------------------------------------------ */
/* Many processes on a fresh fabric                                          */
/* ------------------------------------------------------------------------ */

#define MANY_PROCS 8
#define MANY_EPS   4

typedef struct many_ids {
    uint32_t uasid;
    uint32_t jetty[MANY_EPS];
    uint32_t jfr[MANY_EPS];
} many_ids_t;

static int many_child(int fd, void *arg)
{
    if (cf_msg_recv(fd, T_GO, NULL, 0, CF_CASE_TIMEOUT_MS)) return -1;
    cf_dev_t d;
    if (cf_open(&d)) return -1;
    urma_context_t *ctx = cf_ctx(&d);
    if (!ctx) return -1;
    cf_ep_t ep[MANY_EPS];
    many_ids_t ids;
    memset(&ids, 0, sizeof ids);
    ids.uasid = ctx->uasid;
    for (int i = 0; i < MANY_EPS; i++) {
        cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
        o.jfc_depth = 64;
        o.jfs_depth = 16;
        o.jfr_depth = 16;
        if (cf_ep_open(&ep[i], ctx, &o)) return -1;
        ids.jetty[i] = ep[i].jetty->jetty_id.id;
        ids.jfr[i] = ep[i].jfr->jfr_id.id;
    }
    if (cf_msg_send(fd, T_IDS, &ids, sizeof ids)) return -1;
    /* Stay alive until every process has reported: ids of live objects must differ. */
    if (cf_msg_recv(fd, T_EXIT, NULL, 0, CF_CASE_TIMEOUT_MS)) return -1;
    for (int i = 0; i < MANY_EPS; i++)
        cf_ep_close(&ep[i]);
    cf_ctx_delete(ctx);
    cf_close();
    return 0;
}

static void many_processes_distinct_ids(void)
{
    cf_peer_t p[MANY_PROCS];
    for (int i = 0; i < MANY_PROCS; i++)
        JT_REQUIRE(cf_peer_fork(&p[i], many_child, NULL) == 0);
    /* All start at once on a fabric nobody has created yet. */
    for (int i = 0; i < MANY_PROCS; i++)
        cf_msg_send(p[i].fd, T_GO, NULL, 0);
    many_ids_t ids[MANY_PROCS];
    int have = 0;
    for (int i = 0; i < MANY_PROCS; i++) {
        if (cf_msg_recv(p[i].fd, T_IDS, &ids[i], sizeof ids[i], CF_CASE_TIMEOUT_MS) == 0)
            have |= 1 << i;
    }
    for (int i = 0; i < MANY_PROCS; i++) {
        if (!(have & (1 << i))) continue;
        for (int e = 0; e < MANY_EPS; e++) {
            JT_CHECK(ids[i].jetty[e] != 0);
            for (int j = 0; j < MANY_PROCS; j++) {
                if (!(have & (1 << j))) continue;
                for (int f = 0; f < MANY_EPS; f++) {
                    if (i == j && e == f) continue;
                    if (ids[i].jetty[e] == ids[j].jetty[f])
                        CF_FAILF("jetty id %u given to process %d and process %d", ids[i].jetty[e],
                                 i, j);
                    if (ids[i].jfr[e] == ids[j].jfr[f])
                        CF_FAILF("JFR id %u given to process %d and process %d", ids[i].jfr[e], i,
                                 j);
                }
            }
        }
    }
    for (int i = 0; i < MANY_PROCS; i++)
        cf_msg_send(p[i].fd, T_EXIT, NULL, 0);
    for (int i = 0; i < MANY_PROCS; i++)
        JT_CHECK_EQ(cf_peer_wait(&p[i], CF_WAIT_MS * 2), 0);
}

/* ------------------------------------------------------------------------ */
/* A long-lived process that sees many short-lived peers                     */
/* ------------------------------------------------------------------------ */

#define SHORT_PEERS  45
#define SHORT_WARMUP 5
/* Heap growth tolerated over the peers after the warm-up: what a process
 * keeps for every peer it ever saw must come back (softub kept 9.9 KB). */
#define SHORT_GROWTH_MAX (64 * 1024)
/* softub frees what a racing thread may still read 2 s after it let it go. */
#define SHORT_SETTLE_MS 3000
#define SHORT_WAIT_MS   10000

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* A sanitizer's allocator keeps malloc's statistics (declared here: GCC
 * ships no sanitizer/allocator_interface.h). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* Bytes of heap in use in this process, the provider's included. */
static size_t short_heap_bytes(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#endif
}

/* The heap in use after a JFC is deleted: softub frees what is past its
 * grace period when it lets go of something else. */
static size_t short_heap_reaped(urma_context_t *ctx)
{
    urma_jfc_t *jfc = cf_jfc(ctx, 16, NULL);
    if (jfc) JT_CHECK_EQ(cf.urma_delete_jfc(jfc), URMA_SUCCESS);
    return short_heap_bytes();
}

/* One short-lived peer: connected (its jetty and memfd segment imported
 * by the case, the case's here), it waits for T_EXIT and goes. */
static int short_peer(int fd)
{
    cf_dev_t d;
    cf_side_t s;
    cf_wire_t peer;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    if (mp_connect(&d, &s, &peer, fd, &o, 4096, CF_MEM_MEMFD, 0x8008)) return -1;
    if (cf_sync(fd, T_EXIT)) return -1;
    mp_disconnect(&s, false);
    return 0;
}

/* Forks the short-lived peers one after the other from a process that
 * makes no URMA call (§4.14): a T_GO of 1 starts one on this socket and
 * sends its exit status as T_DONE once it is gone; a T_GO of 0 ends. */
static int short_spawner(int fd, void *arg)
{
    (void)arg;
    for (;;) {
        uint32_t more;
        if (cf_msg_recv(fd, T_GO, &more, sizeof more, CF_CASE_TIMEOUT_MS)) return -1;
        if (!more) return 0;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) return -1;
        if (pid == 0) {
            int rc = short_peer(fd);
            fflush(stdout);
            fflush(stderr);
            exit(rc == 0 && !jt_case_failed ? 0 : 1);
        }
        int st = 0;
        if (waitpid(pid, &st, 0) != pid) return -1;
        uint32_t code = WIFEXITED(st) ? (uint32_t)WEXITSTATUS(st) : 128u + (uint32_t)WTERMSIG(st);
        if (cf_msg_send(fd, T_DONE, &code, sizeof code)) return -1;
    }
}

/* Peer i of the case: started, connected (one WRITE into its memory maps
 * it here), gone, then let go of as a server lets go of a closed
 * connection (its imports). 0 or -1. */
static int short_round(cf_peer_t *sp, cf_side_t *s, int i)
{
    uint32_t one = 1, code = 0;
    cf_wire_t me, peer;
    cf_side_describe(s, &me);
    if (cf_msg_send(sp->fd, T_GO, &one, sizeof one)) return -1;
    if (cf_msg_send(sp->fd, T_WIRE, &me, sizeof me)) return -1;
    if (cf_msg_recv(sp->fd, T_WIRE, &peer, sizeof peer, CF_CASE_TIMEOUT_MS)) return -1;
    if (cf_side_import(s, &peer) || cf_sync(sp->fd, T_READY)) return -1;
    urma_sge_t l, r;
    urma_jfs_wr_t wr;
    cf_sge(&l, s->mem.buf, 64, s->mem.tseg);
    cf_rsge(&r, peer.seg_va, 64, s->rseg);
    cf_wr_rw(&wr, URMA_OPC_WRITE, s->tj, &l, 1, &r, 1, 0, (uint64_t)i);
    if (cf_post(s->ep.jetty, &wr) ||
        cf_expect_cr(s->ep.jfc, URMA_CR_SUCCESS, (uint64_t)i, "WRITE to a short-lived peer"))
        return -1;
    if (cf_sync(sp->fd, T_EXIT)) return -1;
    if (cf_msg_recv(sp->fd, T_DONE, &code, sizeof code, CF_CASE_TIMEOUT_MS)) return -1;
    JT_CHECK_EQ(code, 0u);
    JT_CHECK_EQ(cf.urma_unimport_jetty(s->tj), URMA_SUCCESS);
    JT_CHECK_EQ(cf.urma_unimport_seg(s->rseg), URMA_SUCCESS);
    s->tj = NULL;
    s->rseg = NULL;
    return 0;
}

/* A long-lived process (a server) that sees peers come, connect and go one
 * after the other keeps no memory for each: softub kept every dead peer's
 * 9.9 KB struct while the process lived, once a new process took its slot. */
static void short_lived_peers_freed(void)
{
    cf_peer_t sp;
    JT_REQUIRE(cf_peer_fork(&sp, short_spawner, NULL) == 0);
    cf_dev_t d;
    cf_side_t s;
    cf_ep_opts_t o = cf_ep_defaults(URMA_TM_RM);
    JT_REQUIRE(cf_open(&d) == 0);
    JT_REQUIRE(cf_side_open(&s, &d, NULL, &o, 4096, CF_MEM_MEMALIGN, 0x9009) == 0);
    size_t base = 0, now = 0;
    int i;
    for (i = 0; i < SHORT_PEERS && !jt_case_failed; i++) {
        if (short_round(&sp, &s, i)) break;
        if (i + 1 == SHORT_WARMUP) {
            cf_sleep_ms(SHORT_SETTLE_MS);
            base = short_heap_reaped(s.ctx);
        }
    }
    JT_CHECK_EQ(i, SHORT_PEERS);
    uint64_t deadline = cf_now_ms() + SHORT_WAIT_MS;
    do {
        cf_sleep_ms(250);
        now = short_heap_reaped(s.ctx);
    } while (now > base + SHORT_GROWTH_MAX && cf_now_ms() < deadline);
    printf("  heap %zu bytes after %d peers, %zu after %d (%ld per peer)\n", base, SHORT_WARMUP,
           now, SHORT_PEERS, ((long)now - (long)base) / (SHORT_PEERS - SHORT_WARMUP));
    if (now > base + SHORT_GROWTH_MAX)
        CF_FAILF("the heap grew by %zu bytes over %d short-lived peers", now - base,
                 SHORT_PEERS - SHORT_WARMUP);
    uint32_t zero = 0;
    cf_msg_send(sp.fd, T_GO, &zero, sizeof zero);
    JT_CHECK_EQ(cf_peer_wait(&sp, CF_WAIT_MS), 0);
    mp_disconnect(&s, false);
}

int main(int argc, char **argv)
{
    /* Before softub reads its knobs (one process-wide value; only a SEND_IMM
     * with this immediate is affected). */
    char die[32];
    snprintf(die, sizeof die, "%llu", (unsigned long long)DIE_IMM);
    setenv("SOFTUB_DIE_ON_TAKE_IMM", die, 1);
    snprintf(die, sizeof die, "%llu", (unsigned long long)STOP_IMM);
    setenv("SOFTUB_STOP_ON_TAKE_IMM", die, 1);
    cf_main(argc, argv);
    CF_RUN(opcodes_both_ways_memfd);
    CF_RUN(opcodes_both_ways_memalign);
    CF_RUN(opcodes_both_ways_rc);
    CF_RUN(large_transfers);
    CF_RUN(event_mode_cross_process);
    CF_RUN(peer_killed);
    CF_RUN(small_send_right_after_death);
    CF_RUN(taker_killed_small);
    CF_RUN(taker_killed_large);
    CF_RUN(taker_killed_after_cr);
    CF_RUN(taker_killed_at_claim);
    CF_RUN(taker_killed_cr_claimed);
    CF_RUN(taker_killed_cr_marked);
    CF_RUN(taker_killed_at_event);
    CF_RUN(taker_killed_after_event);
    CF_RUN(taker_killed_at_disarm);
    CF_RUN(taker_stopped_in_push);
    CF_RUN(taker_stopped_at_event);
    CF_RUN(taker_killed_then_reset_small);
    CF_RUN(taker_killed_then_reset_large);
    CF_RUN(taker_killed_fork_after_open);
    CF_RUN(taker_stopped);
    CF_RUN(async_event_through_doorbell);
    CF_RUN(atomics_owner_and_peer);
    CF_RUN(um_loss_injection);
    CF_RUN(many_processes_distinct_ids);
    CF_RUN(short_lived_peers_freed);
    return jt_finish();
}
