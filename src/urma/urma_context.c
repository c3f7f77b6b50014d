#include "urma/urma_context.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/runq.h"
#include "base/time.h"
#include "iobuf/block_pool.h"
#include "urma/urma_endpoint.h"
#include "urma/urma_import.h"

/* Bounds of the flags below; JET_FLAG_IN_RANGE holds values stored by code to them. */
#define CTX_QUEUE_MIN   16 /* urma_sq_size, urma_rq_size */
#define CTX_QUEUE_MAX   4096
#define CTX_POLL_MAX    64      /* urma_cqe_poll_once */
#define CTX_POOL_MAX    1024    /* urma_prepared_jetty_cnt */
#define CTX_CQ_MAX      64      /* urma_jfc_per_loop */
#define CTX_SPIN_MAX_US 1000000 /* the urma_event_*spin*_us flags */

JET_FLAG_DEFINE_STRING(urma_lib, "",
                       "liburma to load (path or file name); empty: liburma.so.0, then liburma.so");
JET_FLAG_DEFINE_STRING(urma_device, "", "URMA device name; empty: the first device");
JET_FLAG_DEFINE_INT32_RANGE(urma_eid_index, 0, 0, INT32_MAX, "EID index of the URMA device to use");
JET_FLAG_DEFINE_STRING(urma_trans_mode, "rm", "URMA transport mode of the jetties (rm only)");
JET_FLAG_DEFINE_STRING(urma_tp_type, "ctp",
                       "Transport path advertised in URMA hellos: ctp (brpc's) or rtp");
JET_FLAG_DEFINE_INT32_RANGE(urma_sq_size, 128, CTX_QUEUE_MIN, CTX_QUEUE_MAX,
                            "Send queue depth of a URMA connection");
JET_FLAG_DEFINE_INT32_RANGE(
    urma_rq_size, 32, CTX_QUEUE_MIN, CTX_QUEUE_MAX,
    "Receive credits a URMA connection grants its peer: buffers of "
    "its event loop's shared queue, or with urma_shared_rq_size=0 the depth of "
    "its own (brpc: 128 buffers of 8 KiB; jetrpc 32 of 64 KiB)");
JET_FLAG_DEFINE_INT32(urma_recv_block_size, 65536,
                      "Bytes of one URMA receive buffer (advertised as the hello's buffer_size): "
                      "65536 or 8192 (brpc's)");
JET_FLAG_DEFINE_INT32_RANGE(urma_zerocopy_min_size, 512, 0, INT32_MAX,
                            "URMA receives of at least this many bytes (and of at least 1/16 of "
                            "urma_recv_block_size) are handed to the parser without copy; smaller "
                            "ones are copied and the buffer re-posted");
JET_FLAG_DEFINE_BOOL(urma_recv_zerocopy, true,
                     "Zero-copy URMA receives (see urma_zerocopy_min_size)");
JET_FLAG_DEFINE_INT32_RANGE(urma_cqe_poll_once, 32, 1, CTX_POLL_MAX,
                            "Completions fetched by one urma_poll_jfc");
JET_FLAG_DEFINE_INT32_RANGE(
    urma_prepared_jetty_cnt, 8, 0, CTX_POOL_MAX,
    "Prepared URMA jetty sets kept per event loop (taken at connect/accept, "
    "reset and returned on close; created and refilled on the import threads)");
JET_FLAG_DEFINE_BOOL(urma_use_polling, false,
                     "Busy-poll URMA completion queues instead of waiting for completion events");
JET_FLAG_DEFINE_INT32_RANGE(
    urma_event_spin_us, 0, 0, CTX_SPIN_MAX_US,
    "Event mode: after completions, the event loop keeps polling the completion "
    "queue this many microseconds before it arms it and sleeps on its event fd "
    "again, so that a burst or the next call of a synchronous caller needs no "
    "wake-up; it costs that much CPU after each burst. No loop spins while "
    "more threads are runnable than cores are online (read from /proc/loadavg "
    "once a millisecond) (0: the adaptive spin of urma_event_spin_auto_us; 200 "
    "also covers gaps of up to 200 us between calls)");
JET_FLAG_DEFINE_INT32_RANGE(
    urma_event_spin_auto_us, 50, 0, CTX_SPIN_MAX_US,
    "Event mode with urma_event_spin_us=0: a loop whose completion batches "
    "have been coming less than this many microseconds apart (a moving "
    "estimate of the gap) keeps polling this long after a batch before it "
    "sleeps on its event fd again; a loop with longer gaps sleeps at once, but "
    "for one probe spin every 5 ms while its gaps stay under 4x this (steady "
    "traffic whose gaps are wake-ups a spin would remove), going on while it "
    "finds batches within this; sparse traffic never spins. Not while more "
    "threads are runnable than cores (0: never; "
    "with urma_event_spin_us=0 too, a wake-up per batch as brpc)");
JET_FLAG_DEFINE_INT32_RANGE(
    urma_event_partial_spin_us, 50, 0, CTX_SPIN_MAX_US,
    "Event mode: while a message is partly received (its sender is still "
    "sending the rest, as for messages larger than a receive buffer), the event "
    "loop keeps polling the completion queue until this many microseconds pass "
    "without a completion, instead of sleeping between the pieces; not while "
    "more threads are runnable than cores (0: sleep between pieces, as brpc)");
JET_FLAG_DEFINE_INT32_RANGE(urma_poller_num, 1, 1, 1024,
                            "Polling mode: event loops that carry (and spin for) URMA connections");
JET_FLAG_DEFINE_BOOL(urma_poller_yield, false,
                     "Polling mode: sched_yield() when a poll found no completion");
JET_FLAG_DEFINE_INT32_RANGE(urma_client_handshake_version, 2, 2, 3,
                            "URMA hello a client sends: 2 (binary, every brpc URMA server) or 3 "
                            "(protobuf; only toward servers that support it)");
JET_FLAG_DEFINE_INT32_RANGE(urma_max_sge, 0, 0, JET_URMA_SGE_MAX,
                            "Scatter entries per URMA send (0: the device maximum; at most 32)");
JET_FLAG_DEFINE_INT32(urma_handshake_timeout_ms, 10000,
                      "A URMA handshake not finished after this long fails its connection (0 or "
                      "less: no limit)");
JET_FLAG_DEFINE_BOOL(urma_jetrpc_extensions, true,
                     "Advertise jetrpc's URMA extensions (credits on data, SQ depth); false: "
                     "behave exactly like a brpc URMA peer");
JET_FLAG_DEFINE_INT32_RANGE(
    urma_shared_rq_size, 256, 0, 65536,
    "Receive buffers an event loop shares among its URMA connections (one JFR "
    "per loop; every connection still grants its peer urma_rq_size credits, and "
    "the loop posts as many buffers as its connections' credits add up to, at "
    "most this many: past that, senders wait for a buffer by RNR retry). 0: "
    "a JFR and urma_rq_size buffers per connection, as brpc; 1 to 15 act as 16. "
    "Read when a loop first carries URMA");
JET_FLAG_DEFINE_INT32_RANGE(urma_jfc_depth, 32768, 32, INT32_MAX,
                            "Depth of each completion queue an event loop shares among its URMA "
                            "connections (capped by the device)");
JET_FLAG_DEFINE_INT32_RANGE(urma_jfc_per_loop, 16, 1, CTX_CQ_MAX,
                            "Completion queues an event loop may make for its URMA connections, "
                            "of urma_jfc_depth entries each: one more when those made are full; "
                            "all full: new connections of the loop use TCP");
JET_FLAG_DEFINE_INT32_RANGE(urma_jfc_idle_ms, 30000, 0, INT32_MAX,
                            "A completion queue an event loop added (past its first) that no "
                            "connection has used for this long, in milliseconds, while a lower "
                            "one has room (or that holds no prepared jetty set), drops its "
                            "prepared sets and is deleted; 0: kept, with its prepared sets, for "
                            "the life of the process");

#define CTX_MAX_LOOPS    1024
#define CTX_EVENT_BUDGET 4096 /* completions per JFCE event before other work runs */
/* Event mode, while the loop has connections: it polls its JFCs this often
 * even without an event, so that completions whose event the provider lost
 * are not left unpolled for good. */
#define CTX_LOOK_US 1000000
/* A spell of polling on a crowded machine ends at the first empty poll this
 * long after the last completion (and a failed arm is retried this often). */
#define CTX_CROWDED_GAP_US 20

static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static jet_urma_ctx_t ctx_g;
static _Atomic bool ctx_ok;
static char ctx_why[256];
static void *ctx_hello_page; /* behind hello_seg; holds nothing */
static size_t ctx_hello_page_len;

/* ---- the global context --------------------------------------------------- */

static urma_target_seg_t *ctx_seg_register(const jet_urma_ctx_t *c, void *base, size_t len,
                                           uint32_t access)
{
    urma_seg_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.va = (uint64_t)(uintptr_t)base;
    cfg.len = len;
    cfg.flag.bs.token_policy = URMA_TOKEN_NONE;
    cfg.flag.bs.cacheable = URMA_NON_CACHEABLE;
    cfg.flag.bs.access = access;
    errno = 0;
    return JET_URMA_FN(c, urma_register_seg)(c->uctx, &cfg);
}

/* The block pool's regions hold every connection's bytes. Sends and
 * receives use them as local memory only: no peer may read or write them
 * (brpc registers its pool for remote access with no token, and advertises
 * it, so that any peer could). Bit 0 means local write on 24.12 and local
 * only on later releases: without remote bits, the same. */
static int ctx_reg(void *arg, void *base, size_t len, int memfd, void **reg_p)
{
    (void)memfd;
    urma_target_seg_t *t = ctx_seg_register(arg, base, len, URMA_ACCESS_LOCAL_ONLY);
    if (!t) return errno ? -errno : -EIO;
    *reg_p = t;
    return 0;
}

static void ctx_hello_seg_drop(jet_urma_ctx_t *c)
{
    if (c->hello_seg) JET_URMA_FN(c, urma_unregister_seg)(c->hello_seg);
    c->hello_seg = NULL;
    if (ctx_hello_page) munmap(ctx_hello_page, ctx_hello_page_len);
    ctx_hello_page = NULL;
}

static void ctx_dereg(void *arg, void *reg)
{
    jet_urma_ctx_t *c = arg;
    urma_status_t st = JET_URMA_FN(c, urma_unregister_seg)(reg);
    /* The pool unmaps the region next; a segment left registered keeps its
     * pages pinned outside the iobuf_max_mb count. */
    if (st != URMA_SUCCESS)
        JET_LOG_ONCE(JET_LOG_WARN,
                     "URMA: urma_unregister_seg of an iobuf region failed (status %d): its "
                     "memory stays pinned",
                     (int)st);
}

uint8_t jet__urma_priority(const urma_device_attr_t *a, bool master, uint32_t tp)
{
    /* brpc: the priority whose transport-path mask is exactly ours, else 6.
     * The table exists only in the master layout. */
    if (master)
        for (uint32_t i = 0; i <= URMA_MAX_PRIORITY && i < URMA_MAX_PRIORITY_CNT; i++)
            if (a->dev_cap.priority_info[i].tp_type.value == (1u << tp)) return (uint8_t)i;
    return 6;
}

static int ctx_open(jet_urma_ctx_t *c, char *why, size_t why_len)
{
    int rc;
    if (strcasecmp(JET_FLAG(urma_trans_mode), "rm") != 0) {
        snprintf(why, why_len, "urma_trans_mode=%s is not supported (rm only)",
                 JET_FLAG(urma_trans_mode));
        return -EINVAL;
    }
    if (strcasecmp(JET_FLAG(urma_tp_type), "ctp") == 0) {
        c->tp_type = URMA_CTP;
    } else if (strcasecmp(JET_FLAG(urma_tp_type), "rtp") == 0) {
        c->tp_type = URMA_RTP;
    } else {
        snprintf(why, why_len, "urma_tp_type=%s is not one of ctp, rtp", JET_FLAG(urma_tp_type));
        return -EINVAL;
    }
    rc = jet__urma_lib_load(JET_FLAG(urma_lib), &c->lib, why, why_len);
    if (rc < 0) return rc;

    urma_init_attr_t ia;
    memset(&ia, 0, sizeof ia);
    urma_status_t st = JET_URMA_FN(c, urma_init)(&ia);
    if (st != URMA_SUCCESS && st != URMA_EEXIST) {
        snprintf(why, why_len, "urma_init failed: status %d", st);
        return -EIO;
    }
    int ndev = 0;
    urma_device_t **list = JET_URMA_FN(c, urma_get_device_list)(&ndev);
    if (!list || ndev <= 0) {
        snprintf(why, why_len, "no URMA device (%s)", strerror(errno ? errno : ENODEV));
        return -ENODEV;
    }
    const char *want = JET_FLAG(urma_device);
    for (int i = 0; i < ndev && !c->dev; i++)
        if (!want || !*want || strcmp(list[i]->name, want) == 0) c->dev = list[i];
    JET_URMA_FN(c, urma_free_device_list)(list);
    if (!c->dev) {
        snprintf(why, why_len, "no URMA device named '%s'", want);
        return -ENODEV;
    }
    snprintf(c->dev_name, sizeof c->dev_name, "%s", c->dev->name);

    /* The library copies its own sizeof(urma_device_attr_t), which differs per
     * generation (ABI hazard 1): give it 4 KiB, read the stable prefix. */
    union {
        urma_device_attr_t a;
        char raw[4096];
    } attr;
    memset(&attr, 0, sizeof attr);
    st = JET_URMA_FN(c, urma_query_device)(c->dev, &attr.a);
    if (st != URMA_SUCCESS) {
        snprintf(why, why_len, "urma_query_device(%s) failed: status %d", c->dev_name, st);
        return -EIO;
    }
    const urma_device_cap_t *cap = &attr.a.dev_cap;
    c->max_jfc_depth = cap->max_jfc_depth;
    c->max_jfs_depth = cap->max_jfs_depth;
    c->max_jfr_depth = cap->max_jfr_depth;
    c->max_jfs_sge = cap->max_jfs_sge;
    c->max_jfr_sge = cap->max_jfr_sge;
    c->max_msg_size = cap->max_msg_size;
    /* Sends are cut at max_msg_size: below brpc's smallest receive buffer
     * (1 KiB) a connection would crawl, and at 0 it could send nothing. */
    if (!(cap->trans_mode & URMA_TM_RM) || c->max_jfs_sge == 0 || c->max_jfr_sge == 0 ||
        c->max_jfc_depth < 64 || c->max_jfs_depth < 16 || c->max_jfr_depth < 16 ||
        c->max_msg_size < 1024) {
        snprintf(why, why_len,
                 "device %s lacks RM jetties, queue depth or message size (caps: trans_mode %#x, "
                 "jfc %u, jfs %u, jfr %u, sge %u/%u, max_msg_size %llu)",
                 c->dev_name, cap->trans_mode, c->max_jfc_depth, c->max_jfs_depth, c->max_jfr_depth,
                 c->max_jfs_sge, c->max_jfr_sge, (unsigned long long)c->max_msg_size);
        return -ENOTSUP;
    }
    c->priority = jet__urma_priority(&attr.a, c->lib.master_layout, c->tp_type);

    uint32_t neid = 0;
    urma_eid_info_t *eids = JET_URMA_FN(c, urma_get_eid_list)(c->dev, &neid);
    bool found = false;
    for (uint32_t i = 0; eids && i < neid; i++)
        if (eids[i].eid_index == (uint32_t)JET_FLAG(urma_eid_index)) found = true;
    if (eids) JET_URMA_FN(c, urma_free_eid_list)(eids);
    if (!found) {
        snprintf(why, why_len, "device %s has no EID index %d", c->dev_name,
                 JET_FLAG(urma_eid_index));
        return -ENODEV;
    }
    c->eid_index = (uint32_t)JET_FLAG(urma_eid_index);
    c->uctx = JET_URMA_FN(c, urma_create_context)(c->dev, c->eid_index);
    if (!c->uctx) {
        snprintf(why, why_len, "urma_create_context(%s, %u) failed: %s", c->dev_name, c->eid_index,
                 strerror(errno ? errno : EIO));
        return -EIO;
    }

    jet_registrar_t r = {.name = "urma", .reg = ctx_reg, .dereg = ctx_dereg, .ctx = c};
    rc = jet__block_pool_set_registrar(&r);
    if (rc < 0) {
        if (rc == -EBUSY)
            snprintf(why, why_len,
                     "another registrar owns the block pool (URMA and it are "
                     "mutually exclusive in one process)");
        else
            snprintf(why, why_len, "cannot register the block pool with URMA: %s", strerror(-rc));
        goto err_delete_context;
    }
    /* brpc peers import the segment a hello advertises (read, write and
     * atomic access, no token) and never use it: it is a page of its own. */
    long page = sysconf(_SC_PAGESIZE);
    ctx_hello_page_len = page > 0 ? (size_t)page : 4096;
    ctx_hello_page = mmap(NULL, ctx_hello_page_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ctx_hello_page == MAP_FAILED) {
        ctx_hello_page = NULL;
        rc = -errno;
        snprintf(why, why_len, "cannot map the segment hellos advertise: %s", strerror(-rc));
        goto err_clear_registrar;
    }
    c->hello_seg = ctx_seg_register(c, ctx_hello_page, ctx_hello_page_len,
                                    URMA_ACCESS_READ | URMA_ACCESS_WRITE | URMA_ACCESS_ATOMIC);
    if (!c->hello_seg) {
        rc = errno ? -errno : -EIO;
        snprintf(why, why_len, "cannot register the segment hellos advertise: %s", strerror(-rc));
        goto err_drop_hello_seg;
    }
    return 0;

err_drop_hello_seg:
    ctx_hello_seg_drop(c);
err_clear_registrar:
    jet__block_pool_clear_registrar();
err_delete_context:
    JET_URMA_FN(c, urma_delete_context)(c->uctx);
    c->uctx = NULL;
    return rc;
}

static void ctx_init_once(void)
{
    char why[sizeof ctx_why] = "";
    int rc = ctx_open(&ctx_g, why, sizeof why);
    if (rc < 0) {
        snprintf(ctx_why, sizeof ctx_why, "%s", why);
        JET_WARN("URMA unavailable: %s; URMA channels and servers use TCP", why);
        return;
    }
    JET_INFO("URMA ready: %s (%s ABI), device %s, eid index %u, %s mode", ctx_g.lib.path,
             ctx_g.lib.generation, ctx_g.dev_name, ctx_g.eid_index,
             JET_FLAG(urma_use_polling) ? "polling" : "event");
    atomic_store_explicit(&ctx_ok, true, memory_order_release);
}

const jet_urma_ctx_t *jet__urma_ctx_get(void)
{
    pthread_once(&ctx_once, ctx_init_once);
    return atomic_load_explicit(&ctx_ok, memory_order_acquire) ? &ctx_g : NULL;
}

const char *jet__urma_ctx_why(void)
{
    return ctx_why;
}

void jet__urma_queue_sizes(const jet_urma_ctx_t *c, uint32_t *sq_p, uint32_t *rq_p)
{
    uint32_t sq = (uint32_t)JET_FLAG_IN_RANGE(urma_sq_size);
    uint32_t rq = (uint32_t)JET_FLAG_IN_RANGE(urma_rq_size);
    *sq_p = sq < c->max_jfs_depth ? sq : c->max_jfs_depth;
    *rq_p = rq < c->max_jfr_depth ? rq : c->max_jfr_depth;
}

uint32_t jet__urma_send_sge(const jet_urma_ctx_t *c)
{
    uint32_t want = JET_FLAG(urma_max_sge) > 0 ? (uint32_t)JET_FLAG(urma_max_sge) : c->max_jfs_sge;
    if (want > c->max_jfs_sge) want = c->max_jfs_sge;
    if (want > JET_URMA_SGE_MAX) want = JET_URMA_SGE_MAX;
    return want ? want : 1;
}

uint32_t jet__urma_recv_size(void)
{
    return JET_FLAG(urma_recv_block_size) == 65536 ? 65536 : 8192;
}

jet_loop_t *jet__urma_pick_loop(void)
{
    static _Atomic unsigned rr;
    if (!JET_FLAG(urma_use_polling)) return NULL;
    int n = jet_loops_count();
    if (n <= 0) return NULL;
    int k = JET_FLAG(urma_poller_num);
    if (k < 1) k = 1;
    if (k > n) k = n;
    /* The last k loops: listeners are on loop 0, and their fds would keep a
     * polled loop looking at epoll at the short pace (event_busy_epoll_us). */
    return jet_loop_at(n - k + (int)(atomic_fetch_add_explicit(&rr, 1, memory_order_relaxed) %
                                     (unsigned)k));
}

/* ---- per-loop resources ------------------------------------------------------ */

/* A connection waiting for one of the loop's JFCs (cq), with the sizes it
 * attached with. */
struct ul_wait {
    struct jet_urma_ep *ep;
    uint32_t sq, rq, max_sge;
    uint32_t cq;
};

/* One of a loop's JFCs and the entries its connections reserve. */
struct ul_cq {
    urma_jfc_t *jfc; /* NULL: being made, or its making failed */
    uint32_t used;
    bool making;
    /* k > 0: connections wait for it while cq[0], whose JFCE and shared
     * receive queue it needs, is being made; its job starts when cq[0]
     * comes. */
    bool pending;
    bool deleting;      /* k > 0 idle for urma_jfc_idle_ms: being deleted */
    /* k > 0 idle for urma_jfc_idle_ms: its pooled sets were dropped, and it
     * is deleted once the last of its sets is gone (unless a connection
     * comes to it first). */
    bool retiring;
    uint32_t sets;      /* jetty sets that exist on it (used, pooled, or on their way) */
    uint32_t recycling; /* of them being reset for the pool */
    int64_t idle_since; /* k > 0: idle (ul_cq_idle) since then (0: busy) */
    /* k > 0 made: the job that made it, kept to delete it (the deletion
     * cannot fail for want of memory) */
    struct ul_job *del_job;
};

struct jet_urma_loop {
    jet_loop_t *loop;
    const jet_urma_ctx_t *ctx;
    urma_jfce_t *jfce; /* event mode: every JFC of the loop signals it */
    /* The JFCs: cq[0] is made for the loop's first connection (with the
     * JFCE, and the shared receive queue on it); cq[k] when those before are
     * full, up to urma_jfc_per_loop. ncq: slots started (made, being made,
     * or failed and made again by the next connection that needs it). A
     * connection reserves its share in one (cq_of[its index]), and its set
     * completes there. */
    struct ul_cq cq[CTX_CQ_MAX];
    uint32_t ncq;
    uint32_t nmade;   /* of them made */
    uint32_t cq_next; /* the JFC polled first by the next drain */
    jet_timer_t cq_timer; /* deletes added JFCs idle for urma_jfc_idle_ms */
    jet_timer_t look_timer; /* event mode: CTX_LOOK_US */
    uint64_t looks_found;
    jet_io_t io;
    jet_poller_t poller;
    bool polling;
    bool poller_on;
    bool spinning;       /* event mode: the poller runs, the JFC is not armed */
    bool partial;        /* the last batch left a message partly received */
    int64_t last_cr_us;  /* spinning: when the poller last found completions */
    int64_t gap_us;      /* estimated gap between completion batches (auto spin) */
    int64_t probe_us;    /* the last probe (jet__urma_probe_due) */
    uint32_t near;       /* gaps in a row under 4x the limit (saturates) */
    bool probing;        /* this spin is a probe */
    bool spin_paid;      /* this spin found a batch within the limit */
    int64_t slept_us;    /* asleep on events: the last batch before (0: not asleep) */
    uint64_t events, spins;
    uint32_t jfc_depth; /* of each JFC */
    jet_urma_jset_t *pool;
    uint32_t npool;
    uint32_t nfilling; /* fill jobs on the import threads (0 or 1) */
    uint32_t fill_cq;  /* the JFC of the fill job's set */
    /* Connections attached before the JFC existed: each gets a set made
     * once it does (or none, when it cannot be created). */
    struct ul_wait *waiting;
    uint32_t nwaiting;
    uint32_t nrecycling; /* closed connections' sets being reset for the pool */
    uint32_t ndiscarding; /* sets being destroyed without a drain (may still complete) */
    uint64_t recycled;   /* sets of closed connections reset and pooled */
    uint64_t filled;     /* sets made for the pool */
    uint64_t attaches;   /* connections ever attached */
    struct jet_urma_ep **eps; /* by index; NULL = free */
    uint8_t *gens;
    uint8_t *cq_of;
    uint32_t *free_idx;
    uint32_t nfree;
    uint32_t cap;
    uint32_t nattached;
    /* The shared receive queue (srq_depth > 0, fixed when the loop is
     * made): one JFR on the loop JFC that every jetty of the loop uses.
     * srq_buf[slot] is the block posted in that slot (NULL: free, listed in
     * srq_free). The loop keeps min(srq_depth, srq_want) buffers posted,
     * srq_want being the credits its connections grant. */
    uint32_t srq_depth;
    uint32_t srq_size; /* bytes of one buffer */
    urma_jfr_t *srq;
    jet_block_t **srq_buf;
    uint32_t *srq_free;
    uint32_t srq_nfree;
    uint32_t srq_posted;
    uint32_t srq_out;  /* taken by connections, not given back yet */
    uint32_t srq_want;
    bool srq_failed; /* a post was refused for good: no more refills are tried */
    /* Blocks the queue refused for now (URMA_ENOMEM within its depth: the
     * provider frees a slot when its completion is polled; softub's ring
     * can trail so): posted again after the next poll. */
    jet_block_t **srq_spare;
    uint32_t srq_nspare;
    uint64_t srq_refused; /* posts refused for want of room */
    int64_t srq_retry_us; /* the last refused post: spares wait UL_SRQ_RETRY_US */
    jet_timer_t srq_timer; /* posts the spares when no completion comes */
    /* local jetty id -> the endpoint whose set it is (shared receive queue:
     * receives are told apart by the jetty they came through). Open
     * addressing with linear probing; a key is the id + 1 (0: empty). */
    uint32_t *jm_key;
    struct jet_urma_ep **jm_ep;
    uint32_t jm_cap, jm_n;
    struct jet_urma_ep **touched; /* endpoints of the current poll batch */
    uint32_t ntouched;
    /* Endpoints whose receives wait for the next poller pass (see
     * jet__urma_loop_defer); in_poll: a poller pass is draining now. */
    struct jet_urma_ep **deferred;
    uint32_t ndeferred;
    bool in_poll;
    uint64_t completions;
    jet_urma_counters_t counters;
    /* Kept zeroed between polls (providers leave opcode, imm_data and
     * remote_id.uasid alone in initiator CRs): only the entries a poll
     * filled are cleared again, so an empty poll clears nothing. */
    urma_cr_t cr[CTX_POLL_MAX];
};

static jet_urma_loop_t *ctx_loops[CTX_MAX_LOOPS];

/* The table entry of a set being destroyed without a drain: its late
 * completions (flushes) are dropped quietly, and the index is not handed
 * out again until the set is gone. */
#define UL_EP_GONE ((struct jet_urma_ep *)&ctx_loops)

/* The index in the user_ctx of the shared receive queue's WRs (never an
 * endpoint's: ul_grow stops below it). */
#define UL_SRQ_INDEX 0xffffffu
/* A shared queue that refused a buffer for want of room (its provider
 * frees a slot when a completion is polled, or when a sender that stalled
 * goes on) is tried again this long after, not at every hand-back: a
 * provider may wait inside the post before it refuses (softub up to
 * 200 ms for a sender that stopped holding a slot). */
#define UL_SRQ_RETRY_US 1000
/* A jetty on a shared queue that a closed connection used is pooled again
 * only this long after: a sender that took a receive through it just before
 * the close (and was preempted) has written its completion by then, and the
 * connection that takes the jetty next never sees it. */
#define UL_SRQ_QUARANTINE_US 200000

static bool ul_ep_live(const struct jet_urma_ep *ep)
{
    return ep && ep != UL_EP_GONE;
}

static uint32_t ul_reserve(uint32_t sq, uint32_t rq)
{
    return sq + rq + 4; /* every WR can complete once, plus the flush-done records */
}

static bool ul_cq_room(const jet_urma_loop_t *ul, uint32_t k, uint32_t need)
{
    return ul->cq[k].used + need <= ul->jfc_depth;
}

/* The first made JFC with room for a connection of need entries (where the
 * next one goes), or UINT32_MAX. */
static uint32_t ul_cq_first_room(const jet_urma_loop_t *ul, uint32_t need)
{
    for (uint32_t k = 0; k < ul->ncq; k++)
        if (ul->cq[k].jfc && ul_cq_room(ul, k, need)) return k;
    return UINT32_MAX;
}

/* The JFC a new connection reserving need entries goes to: the first made
 * one with room, else the first being made with room, else the first whose
 * making failed with room (made again), else a new one while
 * urma_jfc_per_loop allows and cq[0] is made or being made; UINT32_MAX when
 * none. */
static uint32_t ul_cq_pick(const jet_urma_loop_t *ul, uint32_t need)
{
    uint32_t first = ul_cq_first_room(ul, need);
    if (first != UINT32_MAX) return first;
    for (uint32_t k = 0; k < ul->ncq; k++)
        if ((ul->cq[k].making || ul->cq[k].pending) && ul_cq_room(ul, k, need)) return k;
    for (uint32_t k = 0; k < ul->ncq; k++)
        if (!ul->cq[k].deleting && ul_cq_room(ul, k, need)) return k;
    if (ul->ncq == 0) return ul_cq_room(ul, 0, need) ? 0 : UINT32_MAX;
    uint32_t max = (uint32_t)JET_FLAG_IN_RANGE(urma_jfc_per_loop);
    if (ul->ncq < max && (ul->cq[0].jfc || ul->cq[0].making) && need <= ul->jfc_depth)
        return ul->ncq;
    return UINT32_MAX;
}

/* Sets pooled on JFC k. */
static uint32_t ul_cq_pooled(const jet_urma_loop_t *ul, uint32_t k)
{
    uint32_t n = 0;
    for (const jet_urma_jset_t *js = ul->pool; js; js = js->next)
        n += js->cq == k;
    return n;
}

/* Prepared sets on JFC k: pooled, being made by the fill, or being reset
 * for the pool. */
static uint32_t ul_cq_prepared(const jet_urma_loop_t *ul, uint32_t k)
{
    uint32_t n = ul->nfilling && ul->fill_cq == k ? 1 : 0;
    return n + ul->cq[k].recycling + ul_cq_pooled(ul, k);
}

/* A JFC past the first with room that no connection uses: new connections
 * go to a lower one, and it may go idle. Nothing is prepared on it; the
 * sets pooled there stay (a connection that fills the lower one takes
 * them) until it is idle for urma_jfc_idle_ms, so that connections coming
 * and going at the edge of a full JFC do not make and drop sets each
 * time. */
static bool ul_cq_spare(const jet_urma_loop_t *ul, uint32_t k, uint32_t first_room)
{
    return k > first_room && ul->cq[k].used == 0;
}

/* The first made JFC with room for a connection of the sizes asked for
 * now. */
static uint32_t ul_cq_first_room_now(const jet_urma_loop_t *ul);

/* The made JFC that a fill prepares the next set on: the first that is
 * neither spare nor retiring with room for one more connection of need
 * entries than it has sets prepared (a set on a JFC the connections would
 * not fit in is made for nothing); UINT32_MAX when none has. */
static uint32_t ul_cq_fill_target(const jet_urma_loop_t *ul, uint32_t need)
{
    uint32_t first_room = ul_cq_first_room(ul, need);
    for (uint32_t k = 0; k < ul->ncq; k++) {
        if (!ul->cq[k].jfc || ul->cq[k].retiring || ul_cq_spare(ul, k, first_room)) continue;
        uint64_t want = (uint64_t)(ul_cq_prepared(ul, k) + 1) * need;
        if (ul->cq[k].used + want <= ul->jfc_depth) return k;
    }
    return UINT32_MAX;
}

/* JFC k, added past the first and made, has no connection, nothing being
 * made, reset or destroyed on it, and no set, or only pooled ones while it
 * is spare. The JFC that new connections go to keeps its prepared sets
 * however long it waits for them. */
static bool ul_cq_idle(const jet_urma_loop_t *ul, uint32_t k)
{
    const struct ul_cq *q = &ul->cq[k];
    if (k == 0 || !q->jfc || q->used || q->making || q->pending ||
        (ul->nfilling && ul->fill_cq == k))
        return false;
    if (q->sets == 0) return true;
    return q->sets == ul_cq_pooled(ul, k) && ul_cq_spare(ul, k, ul_cq_first_room_now(ul));
}

static void ul_cq_delete(jet_urma_loop_t *ul, uint32_t k);

/* Loop thread: JFC k lost a connection or a set, or a set was pooled on
 * it. Once it is idle its idle time starts (the loop's timer retires it
 * after urma_jfc_idle_ms); retiring, it is deleted once its last set is
 * gone. */
static void ul_cq_check_idle(jet_urma_loop_t *ul, uint32_t k)
{
    struct ul_cq *q = &ul->cq[k];
    if (!ul_cq_idle(ul, k)) return;
    if (q->retiring) {
        if (q->sets == 0) ul_cq_delete(ul, k);
        return;
    }
    int64_t ms = JET_FLAG_IN_RANGE(urma_jfc_idle_ms);
    if (ms <= 0 || q->idle_since) return;
    q->idle_since = jet_now_us();
    if (!jet_timer_armed(&ul->cq_timer))
        jet_loop_timer_start(ul->loop, &ul->cq_timer, q->idle_since + ms * 1000);
}

/* Loop thread: room came back on JFC k: it, and those above it (which may
 * be spare now), are looked at. */
static void ul_cq_check_idle_from(jet_urma_loop_t *ul, uint32_t k)
{
    for (uint32_t q = k; q < ul->ncq; q++)
        ul_cq_check_idle(ul, q);
}

/* Loop thread: a set on JFC k was destroyed. */
static void ul_cq_set_gone(jet_urma_loop_t *ul, uint32_t k)
{
    ul->cq[k].sets--;
    ul_cq_check_idle(ul, k);
}

/* Any thread: a JFR (depth, RM, 1 SGE) on jfc, for a jetty set or the
 * loop's shared receive queue; NULL when the provider refuses. */
static urma_jfr_t *ul_jfr_create(const jet_urma_ctx_t *c, uint32_t depth, urma_jfc_t *jfc)
{
    urma_jfr_cfg_t rc;
    memset(&rc, 0, sizeof rc);
    rc.depth = depth;
    rc.flag.bs.token_policy = URMA_TOKEN_NONE;
    rc.trans_mode = URMA_TM_RM;
    rc.max_sge = 1;
    rc.min_rnr_timer = URMA_TYPICAL_MIN_RNR_TIMER;
    rc.jfc = jfc;
    return JET_URMA_FN(c, urma_create_jfr)(c->uctx, &rc);
}

/* Any thread: a set completing into jfc, the loop's JFC number cq. */
static jet_urma_jset_t *ul_jset_create(jet_urma_loop_t *ul, uint32_t cq, urma_jfc_t *jfc,
                                       uint32_t sq, uint32_t rq, uint32_t max_sge)
{
    const jet_urma_ctx_t *c = ul->ctx;
    jet_urma_jset_t *js = calloc(1, sizeof *js);
    if (!js) return NULL;
    js->cq = cq;
    if (ul->srq_depth) {
        js->shared_jfr = true;
        js->jfr = ul->srq;
        goto jetty;
    }
    js->jfr = ul_jfr_create(c, rq, jfc);
    if (!js->jfr) goto err_free;
jetty:;
    urma_jetty_cfg_t jc;
    memset(&jc, 0, sizeof jc);
    jc.flag.bs.share_jfr = URMA_SHARE_JFR;
    jc.jfs_cfg.depth = sq;
    jc.jfs_cfg.trans_mode = URMA_TM_RM;
    jc.jfs_cfg.priority = c->priority;
    jc.jfs_cfg.max_sge = (uint8_t)max_sge;
    jc.jfs_cfg.max_rsge = 1;
    jc.jfs_cfg.rnr_retry = URMA_TYPICAL_RNR_RETRY; /* 7: retry until the peer re-posts */
    jc.jfs_cfg.err_timeout = URMA_TYPICAL_ERR_TIMEOUT;
    jc.jfs_cfg.jfc = jfc;
    jc.shared.jfr = js->jfr;
    js->jetty = JET_URMA_FN(c, urma_create_jetty)(c->uctx, &jc);
    if (!js->jetty) goto err_delete_jfr;
    js->sq = sq;
    js->rq = rq;
    js->max_sge = max_sge;
    return js;

err_delete_jfr:
    if (!js->shared_jfr) JET_URMA_FN(c, urma_delete_jfr)(js->jfr);
err_free:
    JET_LOG_ONCE(JET_LOG_WARN, "URMA: cannot create a jetty set (sq %u, rq %u, sge %u): %s", sq, rq,
                 max_sge, strerror(errno ? errno : EIO));
    free(js);
    return NULL;
}

bool jet__urma_jset_destroy(const jet_urma_ctx_t *c, jet_urma_jset_t *js)
{
    urma_status_t a = JET_URMA_FN(c, urma_delete_jetty)(js->jetty);
    urma_status_t b = a != URMA_SUCCESS ? URMA_FAIL
                      : js->shared_jfr  ? URMA_SUCCESS /* the loop's, never deleted */
                                        : JET_URMA_FN(c, urma_delete_jfr)(js->jfr);
    if (a != URMA_SUCCESS || b != URMA_SUCCESS) {
        JET_LOG_ONCE(JET_LOG_WARN, "URMA: cannot delete a jetty set (status %d/%d): leaked", a, b);
        return false;
    }
    free(js);
    return true;
}

int jet__urma_post_recv(const jet_urma_ctx_t *c, urma_jfr_t *jfr, jet_block_t *b, uint32_t len,
                        uint64_t user_ctx, jet_block_t **own)
{
    urma_sge_t sge = {.addr = (uint64_t)(uintptr_t)b->data,
                      .len = len,
                      .tseg = b->region ? b->region->reg : NULL};
    if (!sge.tseg) return -EFAULT;
    urma_jfr_wr_t wr = {.src = {.sge = &sge, .num_sge = 1}, .user_ctx = user_ctx};
    urma_jfr_wr_t *bad = NULL;
    /* Owned before the post: the completion may be polled before it returns. */
    *own = b;
    urma_status_t st = JET_URMA_FN(c, urma_post_jfr_wr)(jfr, &wr, &bad);
    if (st == URMA_SUCCESS) return 0;
    *own = NULL;
    return st == URMA_ENOMEM ? -ENOMEM : -EIO;
}

/* ---- the shared receive queue ---- */

static uint32_t ul_jm_slot(const jet_urma_loop_t *ul, uint32_t key)
{
    uint32_t i = (key * 0x9e3779b1u) & (ul->jm_cap - 1);
    while (ul->jm_key[i] && ul->jm_key[i] != key)
        i = (i + 1) & (ul->jm_cap - 1);
    return i;
}

static struct jet_urma_ep *ul_jm_get(const jet_urma_loop_t *ul, uint32_t jetty_id)
{
    if (!ul->jm_cap || jetty_id == UINT32_MAX) return NULL;
    uint32_t i = ul_jm_slot(ul, jetty_id + 1);
    return ul->jm_key[i] ? ul->jm_ep[i] : NULL;
}

static int ul_jm_grow(jet_urma_loop_t *ul)
{
    uint32_t ncap = ul->jm_cap ? ul->jm_cap * 2 : 64;
    uint32_t *keys = calloc(ncap, sizeof *keys);
    struct jet_urma_ep **eps = calloc(ncap, sizeof *eps);
    if (!keys || !eps) {
        free(keys);
        free(eps);
        return -ENOMEM;
    }
    uint32_t *okeys = ul->jm_key, ocap = ul->jm_cap;
    struct jet_urma_ep **oeps = ul->jm_ep;
    ul->jm_key = keys;
    ul->jm_ep = eps;
    ul->jm_cap = ncap;
    for (uint32_t i = 0; i < ocap; i++) {
        if (!okeys[i]) continue;
        uint32_t j = ul_jm_slot(ul, okeys[i]);
        keys[j] = okeys[i];
        eps[j] = oeps[i];
    }
    free(okeys);
    free(oeps);
    return 0;
}

int jet__urma_loop_bind_jetty(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t jetty_id)
{
    if (jetty_id == UINT32_MAX) return -EINVAL;
    if ((ul->jm_n + 1) * 2 > ul->jm_cap && ul_jm_grow(ul) < 0) return -ENOMEM;
    uint32_t i = ul_jm_slot(ul, jetty_id + 1);
    if (ul->jm_key[i]) return -EEXIST; /* the provider handed out one id twice */
    ul->jm_key[i] = jetty_id + 1;
    ul->jm_ep[i] = ep;
    ul->jm_n++;
    return 0;
}

void jet__urma_loop_unbind_jetty(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t jetty_id)
{
    if (!ul->jm_cap || jetty_id == UINT32_MAX) return;
    uint32_t i = ul_jm_slot(ul, jetty_id + 1);
    if (!ul->jm_key[i] || ul->jm_ep[i] != ep) return;
    /* Backward-shift deletion: the entries after it that probed past it
     * move up, so that no lookup stops at the hole. */
    uint32_t mask = ul->jm_cap - 1, j = i;
    ul->jm_key[i] = 0;
    ul->jm_ep[i] = NULL;
    ul->jm_n--;
    for (;;) {
        j = (j + 1) & mask;
        if (!ul->jm_key[j]) break;
        uint32_t home = (ul->jm_key[j] * 0x9e3779b1u) & mask;
        /* The entry at j may fill the hole at i when its home is not in (i, j]. */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        ul->jm_key[i] = ul->jm_key[j];
        ul->jm_ep[i] = ul->jm_ep[j];
        ul->jm_key[j] = 0;
        ul->jm_ep[j] = NULL;
        i = j;
    }
}

uint32_t jet__urma_loop_srq_size(const jet_urma_loop_t *ul)
{
    return ul->srq_depth ? ul->srq_size : 0;
}

static uint32_t ul_srq_target(const jet_urma_loop_t *ul)
{
    return ul->srq_want < ul->srq_depth ? ul->srq_want : ul->srq_depth;
}

/* Buffers the shared queue holds, posted or not: what the target counts. */
static uint32_t ul_srq_have(const jet_urma_loop_t *ul)
{
    return ul->srq_posted + ul->srq_out + ul->srq_nspare;
}

/* Posts b in a free slot of the shared receive queue: 0; -EAGAIN when the
 * provider has no room for it yet (b is the caller's still); -EIO. */
static int ul_srq_post(jet_urma_loop_t *ul, jet_block_t *b)
{
    if (ul->srq_failed || ul->srq_nfree == 0) return -EIO;
    uint32_t slot = ul->srq_free[--ul->srq_nfree];
    int rc = jet__urma_post_recv(ul->ctx, ul->srq, b, ul->srq_size,
                                 jet__urma_ctx_make(UL_SRQ_INDEX, 0, JET_URMA_CTX_KIND_RECV, slot),
                                 &ul->srq_buf[slot]);
    if (rc == 0) {
        ul->srq_posted++;
        return 0;
    }
    ul->srq_free[ul->srq_nfree++] = slot;
    if (rc == -EFAULT) return rc;
    if (rc == -ENOMEM) {
        ul->srq_refused++;
        return -EAGAIN;
    }
    ul->srq_failed = true;
    JET_WARN("URMA: the shared receive queue of event loop %d refused a buffer: its "
             "connections fail as they return buffers, new ones use TCP",
             jet_loop_index(ul->loop));
    return -EIO;
}

static void ul_srq_timer_cb(jet_timer_t *t)
{
    jet_urma_loop_t *ul = (jet_urma_loop_t *)((char *)t - offsetof(jet_urma_loop_t, srq_timer));
    ul->srq_retry_us = 0;
    jet__urma_loop_srq_fill(ul);
}

/* The queue had no room for a buffer: kept, and tried again after
 * UL_SRQ_RETRY_US (by the timer when no completion comes before). */
static void ul_srq_keep(jet_urma_loop_t *ul, jet_block_t *b)
{
    ul->srq_spare[ul->srq_nspare++] = b;
    int64_t now = jet_now_us();
    if (!ul->srq_retry_us) ul->srq_retry_us = now;
    if (!jet_timer_armed(&ul->srq_timer))
        jet_loop_timer_start(ul->loop, &ul->srq_timer, ul->srq_retry_us + UL_SRQ_RETRY_US);
}

/* Posts b, or keeps it for later when the queue has no room (now, or
 * refused recently: it is not asked again before UL_SRQ_RETRY_US); frees it
 * when the queue refused for good. */
static int ul_srq_post_or_keep(jet_urma_loop_t *ul, jet_block_t *b)
{
    int rc = ul->srq_nspare > 0 && !ul->srq_failed ? -EAGAIN : ul_srq_post(ul, b);
    if (rc == -EAGAIN && ul->srq_nspare < ul->srq_depth) {
        ul_srq_keep(ul, b);
        return 0;
    }
    if (rc < 0) jet__block_unref(b);
    return rc;
}

int jet__urma_loop_srq_fill(jet_urma_loop_t *ul)
{
    if (!ul->srq) return -EIO;
    /* Kept ones past the target (connections left) are freed; the others
     * are posted first, until the queue still has no room. */
    while (ul->srq_nspare > 0 && ul_srq_have(ul) > ul_srq_target(ul))
        jet__block_unref(ul->srq_spare[--ul->srq_nspare]);
    if (ul->srq_nspare > 0 && ul->srq_retry_us &&
        jet_now_us() - ul->srq_retry_us < UL_SRQ_RETRY_US)
        return 0; /* refused a moment ago: the timer tries again */
    ul->srq_retry_us = 0;
    while (ul->srq_nspare > 0) {
        int rc = ul_srq_post(ul, ul->srq_spare[ul->srq_nspare - 1]);
        if (rc == -EAGAIN) {
            ul_srq_keep(ul, ul->srq_spare[--ul->srq_nspare]);
            return 0;
        }
        jet_block_t *b = ul->srq_spare[--ul->srq_nspare];
        if (rc < 0) jet__block_unref(b);
    }
    if (jet_timer_armed(&ul->srq_timer)) jet_loop_timer_stop(ul->loop, &ul->srq_timer);
    uint32_t target = ul_srq_target(ul);
    while (ul_srq_have(ul) < target && !ul->srq_failed) {
        jet_block_t *b = jet__block_alloc(ul->srq_size);
        if (!b) return -ENOMEM;
        if (ul_srq_post_or_keep(ul, b) < 0) break;
    }
    /* Buffers already posted still serve (by RNR retry past them). */
    return ul->srq_posted > 0 || ul->srq_nspare > 0 ? 0 : -EIO;
}

void jet__urma_loop_srq_join(jet_urma_loop_t *ul, uint32_t credits)
{
    ul->srq_want += credits;
}

void jet__urma_loop_srq_leave(jet_urma_loop_t *ul, uint32_t credits)
{
    ul->srq_want -= credits;
}

int jet__urma_loop_srq_give(jet_urma_loop_t *ul, jet_block_t *b)
{
    ul->srq_out--;
    if (!b) return 0;
    /* Past the target (connections left): the queue shrinks. */
    if (ul_srq_have(ul) >= ul_srq_target(ul)) {
        jet__block_unref(b);
        return 0;
    }
    return ul_srq_post_or_keep(ul, b);
}

/* A receive of the shared queue: handed to the endpoint whose jetty it came
 * through, else (the connection has gone, or never was) posted again. */
static void ul_srq_on_recv(jet_urma_loop_t *ul, const urma_cr_t *cr)
{
    uint32_t slot = jet__urma_ctx_value(cr->user_ctx);
    if (jet__urma_ctx_kind(cr->user_ctx) != JET_URMA_CTX_KIND_RECV || slot >= ul->srq_depth ||
        !ul->srq_buf[slot]) {
        JET_LOG_ONCE(JET_LOG_WARN,
                     "URMA: a receive completion (status %d, user_ctx %#llx) names no "
                     "buffer of the shared receive queue; ignored",
                     cr->status, (unsigned long long)cr->user_ctx);
        return;
    }
    jet_block_t *b = ul->srq_buf[slot];
    ul->srq_buf[slot] = NULL;
    ul->srq_posted--;
    ul->srq_free[ul->srq_nfree++] = slot;
    struct jet_urma_ep *ep = cr->flag.bs.jetty ? ul_jm_get(ul, cr->local_id) : NULL;
    if (!ep) {
        JET_LOG_ONCE(JET_LOG_INFO,
                     "URMA: dropped a message to jetty %u of the shared receive queue (no "
                     "connection uses it)",
                     cr->local_id);
        if (cr->status == URMA_CR_WR_FLUSH_ERR) {
            jet__block_unref(b); /* the queue itself is in ERROR */
            return;
        }
        ul->srq_out++;
        jet__urma_loop_srq_give(ul, b);
        return;
    }
    ul->srq_out++; /* the endpoint gives it (or what replaces it) back */
    if (jet__urma_ep_on_srq_recv(ep, cr, b)) ul->touched[ul->ntouched++] = ep;
}

static void ul_dispatch(jet_urma_loop_t *ul, const urma_cr_t *cr)
{
    if (cr->status == URMA_CR_WR_FLUSH_ERR_DONE || cr->flag.bs.flush_err_done) {
        /* Built by the hardware with no user_ctx: the jetty id says whose
         * (every endpoint's jetty stays mapped until the endpoint ends). */
        jet_urma_ep_t *ep = ul_jm_get(ul, cr->local_id);
        if (ul_ep_live(ep) && jet__urma_ep_flush_id(ep) == cr->local_id)
            jet__urma_ep_on_flush_done(ep);
        return;
    }
    if (cr->status == URMA_CR_WR_SUSPEND_DONE) return;
    uint32_t idx = jet__urma_ctx_index(cr->user_ctx);
    if (idx == UL_SRQ_INDEX && ul->srq_depth) {
        ul_srq_on_recv(ul, cr);
        return;
    }
    jet_urma_ep_t *ep = idx < ul->cap ? ul->eps[idx] : NULL;
    if (ep == UL_EP_GONE && ul->gens[idx] == jet__urma_ctx_gen(cr->user_ctx)) return;
    if (!ul_ep_live(ep) || ul->gens[idx] != jet__urma_ctx_gen(cr->user_ctx)) {
        JET_LOG_ONCE(JET_LOG_WARN,
                     "URMA: a completion (status %d, user_ctx %#llx) names no "
                     "endpoint; ignored",
                     cr->status, (unsigned long long)cr->user_ctx);
        return;
    }
    if (jet__urma_ep_on_cr(ep, cr)) ul->touched[ul->ntouched++] = ep;
}

/* urma_cqe_poll_once within [1, CTX_POLL_MAX], whatever it was set to: the
 * poller's budget is made of it too, and one of 0 or less would poll nothing. */
static int ul_poll_once(void)
{
    return JET_FLAG_IN_RANGE(urma_cqe_poll_once);
}

/* Up to max completions of one JFC, dispatched. */
static int ul_drain_one(jet_urma_loop_t *ul, urma_jfc_t *jfc, int max)
{
    urma_cr_t *cr = ul->cr;
    int once = ul_poll_once();
    int total = 0;
    while (total < max) {
        int n = JET_URMA_FN(ul->ctx, urma_poll_jfc)(jfc, once, cr);
        if (n < 0 || n > once) {
            /* It may have written any of the entries it was given. */
            memset(cr, 0, (size_t)once * sizeof cr[0]);
            JET_LOG_ONCE(JET_LOG_ERROR, "URMA: urma_poll_jfc failed: %d", n);
            break;
        }
        for (int i = 0; i < n; i++)
            ul_dispatch(ul, &cr[i]);
        memset(cr, 0, (size_t)n * sizeof cr[0]);
        total += n;
        if (n < once) break;
    }
    return total;
}

/* Polls up to max completions of the JFCs, the first one in turn (a busy
 * one takes the budget of a drain, and the next drain starts with the
 * next); then runs the batch end of every endpoint they touched. Returns
 * the number of completions. */
static int ul_drain(jet_urma_loop_t *ul, int max)
{
    int total = 0;
    ul->ntouched = 0;
    if (ul->nmade == 1) {
        total = ul_drain_one(ul, ul->cq[0].jfc, max);
    } else {
        uint32_t first = ul->cq_next < ul->ncq ? ul->cq_next : 0;
        ul->cq_next = first + 1;
        for (uint32_t i = 0; i < ul->ncq; i++) {
            urma_jfc_t *jfc = ul->cq[(first + i) % ul->ncq].jfc;
            if (jfc && total < max) total += ul_drain_one(ul, jfc, max - total);
        }
    }
    ul->completions += (uint64_t)total;
    /* Taken by value: a batch end may deliver bytes whose handler writes, but
     * nothing it does can drain this JFC again before it returns. */
    uint32_t nt = ul->ntouched;
    ul->ntouched = 0;
    bool partial = false;
    for (uint32_t i = 0; i < nt; i++)
        partial |= jet__urma_ep_batch_end(ul->touched[i]);
    if (total > 0) ul->partial = partial;
    /* Shared receive queue: the buffers it had no room for are posted
     * again now that completions were polled, and those missing for want
     * of memory are made up (the connections give theirs back). */
    if (ul->srq && (ul->srq_nspare > 0 || ul_srq_have(ul) < ul_srq_target(ul)) &&
        !ul->srq_failed)
        jet__urma_loop_srq_fill(ul);
    return total;
}

void jet__urma_loop_drain(jet_urma_loop_t *ul)
{
    if (ul && ul->nmade) ul_drain(ul, CTX_EVENT_BUDGET);
}

static int64_t ul_event_spin_us(void)
{
    return JET_FLAG_IN_RANGE(urma_event_spin_us);
}

static int64_t ul_partial_spin_us(void)
{
    return JET_FLAG_IN_RANGE(urma_event_partial_spin_us);
}

int64_t jet__urma_gap_update(int64_t gap_us, int64_t sample_us, int64_t max_us)
{
    /* A quarter of the way to each sample. One long gap (idle) counts as 4x
     * the limit: the estimate leaves the spinning range at once and comes
     * back after about five close batches, while traffic whose batches are
     * far apart never gets there even if one close batch follows each far
     * one (a call's send completion and its answer). */
    if (sample_us < 0) sample_us = 0;
    if (sample_us > 4 * max_us) sample_us = 4 * max_us;
    if (gap_us > 4 * max_us) gap_us = 4 * max_us;
    if (sample_us < gap_us) return gap_us - (gap_us - sample_us + 3) / 4;
    return gap_us + (sample_us - gap_us + 3) / 4;
}

int64_t jet__urma_auto_spin_us(int64_t gap_us, int64_t max_us)
{
    return max_us > 0 && gap_us < max_us ? max_us : 0;
}

bool jet__urma_probe_due(int64_t gap_us, uint32_t near, int64_t max_us, int64_t since_probe_us)
{
    return max_us > 0 && gap_us >= max_us && near >= JET_URMA_PROBE_NEAR &&
           since_probe_us >= JET_URMA_PROBE_EVERY_US;
}

static int64_t ul_auto_max_us(void)
{
    return JET_FLAG_IN_RANGE(urma_event_spin_auto_us);
}

/* The spin after a burst: urma_event_spin_us, else the adaptive one (also
 * for a probe, and while spinning finds batches within the limit). */
static int64_t ul_burst_spin_us(const jet_urma_loop_t *ul)
{
    int64_t us = ul_event_spin_us();
    if (us > 0) return us;
    int64_t max = ul_auto_max_us();
    us = jet__urma_auto_spin_us(ul->gap_us, max);
    return us == 0 && (ul->probing || ul->spin_paid) ? max : us;
}

static void ul_gap_sample(jet_urma_loop_t *ul, int64_t sample_us)
{
    int64_t max = ul_auto_max_us();
    if (max <= 0) return;
    ul->gap_us = jet__urma_gap_update(ul->gap_us, sample_us, max);
    if (sample_us >= 4 * max)
        ul->near = 0;
    else if (ul->near < UINT32_MAX)
        ul->near++;
}

/* How long the event-mode poller goes on without a completion: the spin
 * after every burst, or longer while a message is partly received. */
static int64_t ul_spin_window_us(const jet_urma_loop_t *ul)
{
    int64_t us = ul_burst_spin_us(ul), part = ul->partial ? ul_partial_spin_us() : 0;
    return us > part ? us : part;
}

/* Arms the JFC for the next completion event and drains what came before
 * the arm. Every completion, not solicited-only: brpc peers do not solicit
 * their payload. A completion landing between the drain and the rearm is
 * caught by the drain after it (a rearm with completions waiting also fires
 * at once, which covers a drain stopped by its budget). */
static bool ul_rearm(jet_urma_loop_t *ul)
{
    for (uint32_t k = 0; k < ul->ncq; k++) {
        if (!ul->cq[k].jfc) continue;
        urma_status_t st = JET_URMA_FN(ul->ctx, urma_rearm_jfc)(ul->cq[k].jfc, false);
        if (st != URMA_SUCCESS) {
            /* Unarmed, no event will come: the loop must keep polling. */
            JET_LOG_ONCE(JET_LOG_ERROR, "URMA: urma_rearm_jfc failed: status %d; polling instead",
                         st);
            return false;
        }
    }
    ul_drain(ul, CTX_EVENT_BUDGET);
    return true;
}

static void ul_spin_start(jet_urma_loop_t *ul)
{
    ul->spinning = true;
    /* Unarmed while it spins: its fd brings nothing the poller does not. */
    jet_loop_io_watch_only(&ul->io, true);
    ul->spins++;
    ul->last_cr_us = jet_now_us();
    if (!ul->poller_on) {
        /* A spin only for the rest of a message is the loop thread's own: a
         * synchronous caller driving it too would make three spinning
         * threads of two on a small machine (measured: p99 3.5 ms). The
         * spin after a burst (urma_event_spin_us, or the adaptive one) is
         * there for such callers. */
        ul->poller.no_guest = ul_burst_spin_us(ul) == 0;
        jet_loop_poller_add(ul->loop, &ul->poller);
        ul->poller_on = true;
    }
}

static void ul_event_cb(jet_io_t *io, uint32_t events)
{
    jet_urma_loop_t *ul = io->arg;
    const jet_urma_ctx_t *c = ul->ctx;
    urma_jfc_t *jfcs[16];
    uint32_t nev[16];
    /* The fd is level-triggered and registered edge-triggered: empty the
     * event list (acking every event, or delete_jfc would block) so the next
     * completion makes a new edge. */
    for (;;) {
        int n = JET_URMA_FN(c, urma_wait_jfc)(ul->jfce, 16, 0, jfcs);
        if (n <= 0) {
            if (n < 0) JET_LOG_ONCE(JET_LOG_ERROR, "URMA: urma_wait_jfc failed: %d", n);
            break;
        }
        for (int i = 0; i < n; i++)
            nev[i] = 1;
        JET_URMA_FN(c, urma_ack_jfc)(jfcs, nev, (uint32_t)n);
        ul->events += (uint64_t)n;
        /* Fewer than asked for: the list is empty (no system call to learn
         * it again); an event after this makes a new edge. */
        if (n < 16) break;
    }
    if (ul->slept_us) {
        ul_gap_sample(ul, jet_now_us() - ul->slept_us);
        ul->slept_us = 0;
    }
    ul_drain(ul, CTX_EVENT_BUDGET);
    if (ul->spinning) return; /* an event armed before the spin began */
    /* Poll instead of arming: the next completions of a burst, or the
     * answer to the next call, are found without a wake-up. Not while
     * threads outnumber cores (base/runq.h): the spin would hold a core
     * the answering thread needs. */
    int64_t now = jet_now_us();
    bool room = jet__runq_has_room(now);
    bool spin = ul_spin_window_us(ul) > 0 && room;
    if (!spin && room && ul_event_spin_us() == 0 &&
        jet__urma_probe_due(ul->gap_us, ul->near, ul_auto_max_us(), now - ul->probe_us)) {
        ul->probe_us = now;
        ul->probing = true;
        spin = true;
    }
    if (spin || !ul_rearm(ul))
        ul_spin_start(ul);
    else
        ul->slept_us = jet_now_us();
}

/* Event mode, once a second while the loop has connections: completions
 * with no event on its way (the JFCE's fd not readable) are drained, and
 * the JFCs armed again, as after an event. A provider that lost an event
 * left them, and every later one of the JFC, unpolled: the loop sleeps on
 * the event fd only. */
static void ul_look_timer_cb(jet_timer_t *t)
{
    jet_urma_loop_t *ul = (jet_urma_loop_t *)((char *)t - offsetof(jet_urma_loop_t, look_timer));
    if (ul->nattached == 0) return; /* the next attach starts it again */
    jet_loop_timer_start(ul->loop, t, jet_loop_now_us(ul->loop) + CTX_LOOK_US);
    if (ul->spinning || !ul->jfce || ul->nmade == 0) return;
    struct pollfd pfd = {.fd = ul->jfce->fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) != 0) return; /* an event is there: ul_event_cb runs */
    if (ul_drain(ul, CTX_EVENT_BUDGET) == 0) return;
    ul->looks_found++;
    JET_LOG_ONCE(JET_LOG_WARN,
                 "URMA: event loop %d found completions that no completion event announced "
                 "(the provider lost one); it looks for such every second",
                 jet_loop_index(ul->loop));
    if (!ul_rearm(ul)) ul_spin_start(ul);
}

/* The re-posts left by the previous poller pass. */
static void ul_run_deferred(jet_urma_loop_t *ul)
{
    /* One at a time: an endpoint that detached meanwhile has left the list. */
    while (ul->ndeferred > 0)
        jet__urma_ep_run_deferred(ul->deferred[--ul->ndeferred]);
}

static int ul_poll_cb(jet_poller_t *p)
{
    jet_urma_loop_t *ul = p->arg;
    if (ul->ndeferred) ul_run_deferred(ul);
    ul->in_poll = true;
    int n = ul_drain(ul, ul_poll_once() * 4);
    ul->in_poll = false;
    if (ul->spinning) {
        int64_t now = jet_loop_now_us(ul->loop);
        if (n > 0) {
            /* A spin after bursts (not one only for the rest of a message)
             * that found this batch within the limit goes on. */
            int64_t max = ul_auto_max_us();
            if (max > 0 && now - ul->last_cr_us <= max && ul_burst_spin_us(ul) > 0)
                ul->spin_paid = true;
            ul->probing = false;
            ul_gap_sample(ul, now - ul->last_cr_us);
            ul->last_cr_us = now;
            /* Guests may drive a spin after bursts, not one only for the rest
             * of a message (ul_spin_start): which one this is follows the
             * estimate. */
            bool no_guest = ul_burst_spin_us(ul) == 0;
            if (no_guest != ul->poller.no_guest) {
                jet_loop_poller_del(ul->loop, &ul->poller);
                ul->poller.no_guest = no_guest;
                jet_loop_poller_add(ul->loop, &ul->poller);
            }
        } else if (now - ul->last_cr_us > ul_spin_window_us(ul) ||
                   (now - ul->last_cr_us >= CTX_CROWDED_GAP_US && !jet__runq_has_room(now))) {
            /* Quiet long enough, or threads outnumber cores: back to
             * sleeping on the event fd, unless the queue cannot be armed.
             * The poller may remove itself from its own callback. */
            if (!ul_rearm(ul)) {
                ul->last_cr_us = now;
                return n;
            }
            ul->spinning = false;
            ul->probing = false;
            if (ul->spin_paid)
                ul->probe_us = now - JET_URMA_PROBE_EVERY_US + JET_URMA_REPROBE_US;
            ul->spin_paid = false;
            /* The next gap is counted from the last batch, not from the
             * end of the spin: a gap a little longer than the spin must
             * raise the estimate, or such traffic would spin forever. */
            ul->slept_us = ul->last_cr_us;
            jet_loop_io_watch_only(&ul->io, false);
            ul->poller_on = false;
            jet_loop_poller_del(ul->loop, &ul->poller);
        }
        return n;
    }
    if (n == 0 && JET_FLAG(urma_poller_yield)) sched_yield();
    return n;
}

/* ---- the prepared pool, kept off the loop ---- */

/* Creating, resetting and destroying a jetty set, and creating the loop's
 * JFC, are provider calls that may take long on hardware (the kernel driver
 * sets the queues up): the import threads make them, one set per work item
 * so that handshake imports get in between, and the loop takes what comes
 * back. The pool is filled one set at a time up to urma_prepared_jetty_cnt,
 * counting the sets on their way back; a connection that finds it empty
 * (connections arriving faster than the fill, or the pool disabled) waits
 * for a set made for it (UL_JOB_MAKE, ahead of background work), and the
 * first connections of a loop wait for its JFC (UL_JOB_CQ). */
typedef enum {
    UL_JOB_FILL,
    UL_JOB_MAKE,
    UL_JOB_RESET,
    UL_JOB_DESTROY,
    UL_JOB_CQ,
    UL_JOB_CQ_DELETE,
} ul_job_kind_t;

typedef struct ul_job {
    jet_urma_work_t w;
    jet_urma_loop_t *ul;
    ul_job_kind_t kind;
    jet_urma_jset_t *js; /* the set (a fill's once made); NULL when none or destroyed */
    uint32_t cq;         /* the loop's JFC it is about (FILL, MAKE, CQ, a share) */
    uint32_t sq, rq, max_sge;
    struct jet_urma_ep *ep; /* MAKE: the connection that waits for the set */
    /* DESTROY of a set that did not drain: what it may still use, released
     * once it is gone, and its JFC share, held until then (it may still
     * complete). */
    jet_urma_leftovers_t left;
    uint32_t share;
    int64_t gone_idx; /* its table entry (UL_EP_GONE), or -1 */
    bool destroyed;
    urma_jfce_t *jfce; /* CQ: made with cq[0]; the loop's for the others */
    urma_jfc_t *jfc;   /* FILL, MAKE: the JFC of the set; CQ: made */
    urma_jfr_t *srq;   /* CQ 0 of a loop with a shared receive queue */
    int err; /* CQ: errno of a failure */
} ul_job_t;

static uint32_t ul_pool_want(void)
{
    return (uint32_t)JET_FLAG_IN_RANGE(urma_prepared_jetty_cnt);
}

/* The sizes a new connection asks for now. */
static void ul_sizes(const jet_urma_loop_t *ul, uint32_t *sq, uint32_t *rq, uint32_t *max_sge)
{
    jet__urma_queue_sizes(ul->ctx, sq, rq);
    if (ul->srq_depth) *rq = 0; /* its jetties use the loop's JFR */
    *max_sge = jet__urma_send_sge(ul->ctx);
}

static bool ul_jset_fits(const jet_urma_jset_t *js, uint32_t sq, uint32_t rq, uint32_t max_sge)
{
    return js->sq == sq && js->rq == rq && js->max_sge == max_sge;
}

static bool ul_jset_current(const jet_urma_loop_t *ul, const jet_urma_jset_t *js)
{
    uint32_t sq, rq, sge;
    ul_sizes(ul, &sq, &rq, &sge);
    return ul_jset_fits(js, sq, rq, sge);
}

/* Any thread: a drained set back to RESET, then READY (brpc's order for
 * reuse). False when the provider refused. */
static bool ul_jset_reset(const jet_urma_ctx_t *c, jet_urma_jset_t *js)
{
    urma_jetty_attr_t ja = {.mask = JETTY_STATE, .state = URMA_JETTY_STATE_RESET};
    urma_jfr_attr_t ra = {.mask = JFR_STATE, .state = URMA_JFR_STATE_RESET};
    if (JET_URMA_FN(c, urma_modify_jetty)(js->jetty, &ja) != URMA_SUCCESS) return false;
    if (js->shared_jfr) {
        ja.state = URMA_JETTY_STATE_READY;
        return JET_URMA_FN(c, urma_modify_jetty)(js->jetty, &ja) == URMA_SUCCESS;
    }
    if (JET_URMA_FN(c, urma_modify_jfr)(js->jfr, &ra) != URMA_SUCCESS) return false;
    ja.state = URMA_JETTY_STATE_READY;
    ra.state = URMA_JFR_STATE_READY;
    return JET_URMA_FN(c, urma_modify_jfr)(js->jfr, &ra) == URMA_SUCCESS &&
           JET_URMA_FN(c, urma_modify_jetty)(js->jetty, &ja) == URMA_SUCCESS;
}

/* Any thread: a JFC of the loop, in event mode on *jfce_p (made here when
 * NULL: the loop's first) and armed before the first wait. False, with
 * nothing left that was made here, when the provider refuses. */
static bool ul_cq_create(const jet_urma_ctx_t *c, bool polling, uint32_t depth,
                         urma_jfce_t **jfce_p, urma_jfc_t **jfc_p)
{
    urma_jfce_t *jfce = *jfce_p;
    bool own = false;
    if (!polling && !jfce) {
        jfce = JET_URMA_FN(c, urma_create_jfce)(c->uctx);
        if (!jfce) goto err;
        own = true;
    }
    urma_jfc_cfg_t fc;
    memset(&fc, 0, sizeof fc);
    fc.depth = depth;
    fc.jfce = jfce;
    urma_jfc_t *jfc = JET_URMA_FN(c, urma_create_jfc)(c->uctx, &fc);
    if (!jfc) goto err_delete_jfce;
    if (!polling && JET_URMA_FN(c, urma_rearm_jfc)(jfc, false) != URMA_SUCCESS) {
        JET_URMA_FN(c, urma_delete_jfc)(jfc);
        goto err_delete_jfce;
    }
    *jfce_p = jfce;
    *jfc_p = jfc;
    return true;

err_delete_jfce:
    if (own) JET_URMA_FN(c, urma_delete_jfce)(jfce);
err:
    return false;
}

static void ul_job_run(jet_urma_work_t *w)
{
    ul_job_t *j = (ul_job_t *)w;
    const jet_urma_ctx_t *c = j->ul->ctx;
    switch (j->kind) {
    case UL_JOB_FILL:
    case UL_JOB_MAKE:
        j->js = ul_jset_create(j->ul, j->cq, j->jfc, j->sq, j->rq, j->max_sge);
        break;
    case UL_JOB_RESET:
        if (ul_jset_reset(c, j->js)) break;
        /* A set that cannot be reset is destroyed. */
        __attribute__((fallthrough));
    case UL_JOB_DESTROY:
        j->destroyed = jet__urma_jset_destroy(c, j->js);
        j->js = NULL;
        if (!j->destroyed) break; /* the peer stays imported for the set that stays */
        if (j->left.tjetty) JET_URMA_FN(c, urma_unimport_jetty)(j->left.tjetty);
        if (j->left.tseg) JET_URMA_FN(c, urma_unimport_seg)(j->left.tseg);
        break;
    case UL_JOB_CQ_DELETE:
        j->err = JET_URMA_FN(c, urma_delete_jfc)(j->jfc) == URMA_SUCCESS ? 0 : EIO;
        break;
    case UL_JOB_CQ:
        errno = 0;
        if (!ul_cq_create(c, j->ul->polling, j->ul->jfc_depth, &j->jfce, &j->jfc)) {
            j->err = errno ? errno : EIO;
            j->jfce = NULL;
            j->jfc = NULL;
            break;
        }
        if (j->cq != 0 || !j->ul->srq_depth) break;
        j->srq = ul_jfr_create(c, j->ul->srq_depth, j->jfc);
        if (j->srq) break;
        j->err = errno ? errno : EIO;
        JET_URMA_FN(c, urma_delete_jfc)(j->jfc);
        if (j->jfce) JET_URMA_FN(c, urma_delete_jfce)(j->jfce);
        j->jfce = NULL;
        j->jfc = NULL;
        break;
    }
}

static void ul_fill_maybe(jet_urma_loop_t *ul);
static bool ul_pool_put(jet_urma_loop_t *ul, jet_urma_jset_t *js);
static void ul_poller_sync(jet_urma_loop_t *ul);
static void ul_cq_arrived(jet_urma_loop_t *ul, uint32_t k, urma_jfce_t *jfce, urma_jfc_t *jfc,
                          int err);
static void ul_cq_trim(jet_urma_loop_t *ul);
static void ul_job_init(jet_urma_loop_t *ul, ul_job_t *j, ul_job_kind_t kind, jet_urma_jset_t *js);

static void ul_job_done(jet_task_t *t)
{
    ul_job_t *j = (ul_job_t *)t;
    jet_urma_loop_t *ul = j->ul;
    ul_job_kind_t kind = j->kind;
    jet_urma_jset_t *js = j->js;
    struct jet_urma_ep *ep = j->ep;
    uint32_t jcq = j->cq;
    ul->cq[j->cq].used -= j->share;
    if (js && (kind == UL_JOB_FILL || kind == UL_JOB_MAKE)) ul->cq[js->cq].sets++;
    if (js && kind == UL_JOB_FILL) ul->filled++;
    if (kind == UL_JOB_RESET) ul->cq[j->cq].recycling--;
    if (j->destroyed) ul->cq[j->cq].sets--;
    if (j->share)
        ul_cq_check_idle_from(ul, j->cq);
    else if (j->destroyed)
        ul_cq_check_idle(ul, j->cq);
    if (j->gone_idx >= 0) {
        ul->eps[j->gone_idx] = NULL;
        ul->free_idx[ul->nfree++] = (uint32_t)j->gone_idx;
    }
    if (kind == UL_JOB_DESTROY && j->share) {
        ul->ndiscarding--;
        ul_poller_sync(ul);
    }
    /* Released here, on the loop (thread caches, user blocks' callbacks),
     * once nothing can use them any more; leaked with a set that stayed. */
    for (uint32_t i = 0; j->destroyed && i < j->left.nblocks; i++)
        jet__block_unref(j->left.blocks[i]);
    free(j->left.blocks);
    if (kind == UL_JOB_CQ) {
        urma_jfce_t *jfce = j->jfce;
        urma_jfc_t *jfc = j->jfc;
        uint32_t k = j->cq;
        int err = j->err;
        if (k == 0) ul->srq = j->srq;
        if (k > 0 && jfc) {
            /* Kept for the deletion. */
            ul_job_init(ul, j, UL_JOB_CQ_DELETE, NULL);
            j->cq = k;
            ul->cq[k].del_job = j;
        } else {
            free(j);
        }
        ul_cq_arrived(ul, k, jfce, jfc, err);
        return;
    }
    if (kind == UL_JOB_CQ_DELETE) {
        uint32_t k = j->cq;
        if (j->err)
            JET_LOG_ONCE(JET_LOG_WARN,
                         "URMA: cannot delete completion queue %u of event loop %d: "
                         "leaked",
                         k, jet_loop_index(ul->loop));
        free(j);
        ul->cq[k].deleting = false;
        ul_cq_trim(ul);
        return;
    }
    free(j);
    if (kind == UL_JOB_MAKE) {
        jet__urma_ep_set_arrived(ep, js);
        return;
    }
    if (kind == UL_JOB_FILL) {
        ul->nfilling--;
        if (!js) ul_cq_check_idle(ul, jcq); /* nothing came of it */
    }
    if (kind == UL_JOB_RESET) ul->nrecycling--;
    if (js && ul_pool_put(ul, js) && kind == UL_JOB_RESET) ul->recycled++;
    /* A fill that made nothing is not retried until the next connection
     * asks: a provider that refuses would otherwise be asked forever. */
    if (kind != UL_JOB_FILL || js) ul_fill_maybe(ul);
}

/* j, of kind for js (FILL, MAKE: NULL), cleared and set up to run on the
 * import threads; the caller sets the rest before ul_job_go (a fill's
 * sizes are the current ones; its JFC, and a share's, the caller's). */
static void ul_job_init(jet_urma_loop_t *ul, ul_job_t *j, ul_job_kind_t kind, jet_urma_jset_t *js)
{
    memset(j, 0, sizeof *j);
    j->ul = ul;
    j->kind = kind;
    j->js = js;
    j->cq = js ? js->cq : 0;
    j->gone_idx = -1;
    if (kind == UL_JOB_FILL) ul_sizes(ul, &j->sq, &j->rq, &j->max_sge);
    j->w.task.fn = ul_job_done;
    j->w.loop = ul->loop;
    j->w.run = ul_job_run;
    /* A handshake waits for these. */
    j->w.urgent = kind == UL_JOB_MAKE || kind == UL_JOB_CQ;
}

/* Loop thread: a new job (ul_job_init); NULL on -ENOMEM. */
static ul_job_t *ul_job_new(jet_urma_loop_t *ul, ul_job_kind_t kind, jet_urma_jset_t *js)
{
    ul_job_t *j = malloc(sizeof *j);
    if (j) ul_job_init(ul, j, kind, js);
    return j;
}

/* Queues j; false (j freed) when no thread can take it (nothing started). */
static bool ul_job_go(jet_urma_loop_t *ul, ul_job_t *j)
{
    if (jet__urma_work_start(&j->w) < 0) {
        free(j);
        return false;
    }
    ul->cq[j->cq].used += j->share;
    if (j->kind == UL_JOB_FILL) ul->nfilling++;
    if (j->kind == UL_JOB_RESET) {
        ul->nrecycling++;
        ul->cq[j->cq].recycling++;
    }
    if (j->kind == UL_JOB_CQ) {
        ul->cq[j->cq].making = true;
        if (j->cq >= ul->ncq) ul->ncq = j->cq + 1;
    }
    return true;
}

static bool ul_job_start(jet_urma_loop_t *ul, ul_job_kind_t kind, jet_urma_jset_t *js)
{
    ul_job_t *j = ul_job_new(ul, kind, js);
    return j && ul_job_go(ul, j);
}

/* Loop thread: destroys js off the loop (here when no thread can). */
static void ul_destroy_later(jet_urma_loop_t *ul, jet_urma_jset_t *js)
{
    uint32_t k = js->cq;
    if (!ul_job_start(ul, UL_JOB_DESTROY, js) && jet__urma_jset_destroy(ul->ctx, js))
        ul_cq_set_gone(ul, k);
}

bool jet__urma_loop_destroy_set(jet_urma_loop_t *ul, jet_urma_jset_t *js)
{
    uint32_t k = js->cq;
    if (!jet__urma_jset_destroy(ul->ctx, js)) return false;
    ul_cq_set_gone(ul, k);
    return true;
}

/* Drops ep from the deferred list; returns its table index (the caller
 * clears or marks the entry), or -1 when it is not in the table. */
static int64_t ul_unlist(jet_urma_loop_t *ul, struct jet_urma_ep *ep)
{
    for (uint32_t i = 0; i < ul->ndeferred; i++) {
        if (ul->deferred[i] == ep) {
            ul->deferred[i] = ul->deferred[--ul->ndeferred];
            break;
        }
    }
    for (uint32_t i = 0; i < ul->cap; i++)
        if (ul->eps[i] == ep) return i;
    return -1;
}

void jet__urma_loop_discard(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t sq, uint32_t rq,
                            jet_urma_jset_t *js, const jet_urma_leftovers_t *left)
{
    int64_t idx = ul_unlist(ul, ep);
    ul->nattached--;
    /* ep's share passes to the job (ul_job_go adds it again). */
    uint32_t share = ul_reserve(sq, rq), cq = js->cq;
    ul->cq[cq].used -= share;
    ul_job_t *j = ul_job_new(ul, UL_JOB_DESTROY, js);
    if (j) {
        j->left = *left;
        j->share = share;
        j->cq = cq;
        j->gone_idx = idx;
        if (idx >= 0) ul->eps[idx] = UL_EP_GONE;
        ul->ndiscarding++;
        if (ul_job_go(ul, j)) return;
        ul->ndiscarding--;
    }
    /* No thread (ul_job_go freed j): the same job, here. */
    ul_job_t here = {.ul = ul, .kind = UL_JOB_DESTROY, .js = js, .left = *left, .gone_idx = -1};
    ul_job_run(&here.w);
    if (here.destroyed) ul_cq_set_gone(ul, cq);
    ul_cq_check_idle_from(ul, cq); /* its share came back */
    for (uint32_t i = 0; here.destroyed && i < here.left.nblocks; i++)
        jet__block_unref(here.left.blocks[i]);
    free(here.left.blocks);
    if (idx >= 0) {
        ul->eps[idx] = NULL;
        ul->free_idx[ul->nfree++] = (uint32_t)idx;
    }
    ul_poller_sync(ul);
}

static uint32_t ul_cq_first_room_now(const jet_urma_loop_t *ul)
{
    uint32_t sq, rq, sge;
    ul_sizes(ul, &sq, &rq, &sge);
    return ul_cq_first_room(ul, ul_reserve(sq, rq));
}

/* Pooled sets on spare JFCs (ul_cq_spare), which urma_prepared_jetty_cnt
 * does not count. */
static uint32_t ul_pool_spare(const jet_urma_loop_t *ul, uint32_t first_room)
{
    uint32_t n = 0;
    for (const jet_urma_jset_t *js = ul->pool; js; js = js->next)
        n += ul_cq_spare(ul, js->cq, first_room);
    return n;
}

/* Room left in the pool, counting the sets on their way to it. */
static uint32_t ul_pool_room(const jet_urma_loop_t *ul)
{
    uint32_t live = ul->npool - ul_pool_spare(ul, ul_cq_first_room_now(ul));
    uint32_t want = ul_pool_want(), have = live + ul->nrecycling + ul->nfilling;
    return have < want ? want - have : 0;
}

/* A set on JFC k may join the pool: k is not retiring, and the pool has
 * room (ahead: counting the sets on their way to it). Sets on spare JFCs
 * count apart, up to urma_prepared_jetty_cnt of them (as ul_fill_maybe
 * keeps). */
static bool ul_pool_takes(const jet_urma_loop_t *ul, uint32_t k, bool ahead)
{
    if (ul->cq[k].retiring) return false;
    uint32_t want = ul_pool_want(), first_room = ul_cq_first_room_now(ul);
    uint32_t spare = ul_pool_spare(ul, first_room);
    if (ul_cq_spare(ul, k, first_room)) return spare < want;
    if (ahead) return ul_pool_room(ul) > 0;
    return ul->npool - spare < want;
}

/* Loop thread: pools js (of the current sizes, while the pool takes it),
 * else destroys it off the loop. True when pooled. */
static bool ul_pool_put(jet_urma_loop_t *ul, jet_urma_jset_t *js)
{
    if (ul_jset_current(ul, js) && ul_pool_takes(ul, js->cq, false)) {
        js->next = ul->pool;
        ul->pool = js;
        ul->npool++;
        ul_cq_check_idle(ul, js->cq);
        return true;
    }
    ul_destroy_later(ul, js);
    return false;
}

void jet__urma_loop_unused(jet_urma_loop_t *ul, jet_urma_jset_t *js)
{
    ul_pool_put(ul, js);
}

/* Loop thread: drops pooled sets of sizes no connection asks for any more,
 * those on a JFC with no room for a connection (the next ones go to
 * another) or retiring, and those past urma_prepared_jetty_cnt (flags
 * changed), then starts the next fill when the pool is short. */
static void ul_fill_maybe(jet_urma_loop_t *ul)
{
    uint32_t sq, rq, sge, want = ul_pool_want(), kept = 0, kept_spare = 0;
    ul_sizes(ul, &sq, &rq, &sge);
    uint32_t need = ul_reserve(sq, rq);
    /* Sets on a full JFC are dropped only when new connections can go
     * elsewhere; else they wait for its room to come back. Sets on a
     * spare JFC stay, counted apart (ul_cq_spare). */
    bool elsewhere = ul_cq_pick(ul, need) != UINT32_MAX;
    uint32_t first_room = ul_cq_first_room(ul, need);
    for (jet_urma_jset_t **pp = &ul->pool; *pp;) {
        jet_urma_jset_t *js = *pp;
        bool spare = ul_cq_spare(ul, js->cq, first_room);
        uint32_t *count = spare ? &kept_spare : &kept;
        if (ul_jset_fits(js, sq, rq, sge) && !ul->cq[js->cq].retiring &&
            (ul_cq_room(ul, js->cq, need) || !elsewhere) && *count < want) {
            (*count)++;
            pp = &js->next;
            continue;
        }
        *pp = js->next;
        ul->npool--;
        ul_destroy_later(ul, js);
    }
    if (ul->nfilling > 0 || ul_pool_room(ul) == 0) return;
    uint32_t k = ul_cq_fill_target(ul, need);
    if (k == UINT32_MAX) return;
    ul_job_t *j = ul_job_new(ul, UL_JOB_FILL, NULL);
    if (!j) return;
    j->cq = k;
    j->jfc = ul->cq[k].jfc;
    if (ul_job_go(ul, j)) ul->fill_cq = k;
}

void jet__urma_loop_recycle(jet_urma_loop_t *ul, jet_urma_jset_t *js)
{
    if (js->shared_jfr) js->ready_us = jet_now_us() + UL_SRQ_QUARANTINE_US;
    if (!ul_jset_current(ul, js) || !ul_pool_takes(ul, js->cq, true)) {
        ul_destroy_later(ul, js);
        return;
    }
    if (ul_job_start(ul, UL_JOB_RESET, js)) return;
    /* No import thread: the same job, here. */
    uint32_t k = js->cq;
    ul_job_t j = {.ul = ul, .kind = UL_JOB_RESET, .js = js};
    ul_job_run(&j.w);
    if (j.destroyed) ul_cq_set_gone(ul, k);
    if (j.js && ul_pool_put(ul, j.js)) ul->recycled++;
}

/* Polling mode: the loop spins while it has URMA connections with queues. */
static void ul_poller_sync(jet_urma_loop_t *ul)
{
    if (!ul->polling) return;
    /* A set destroyed without a drain may still complete until it is gone. */
    bool want = ul->nmade && ul->nattached + ul->ndiscarding > 0;
    if (want && !ul->poller_on) {
        ul->poller.no_guest = false;
        jet_loop_poller_add(ul->loop, &ul->poller);
    }
    if (!want && ul->poller_on) jet_loop_poller_del(ul->loop, &ul->poller);
    ul->poller_on = want;
}

/* Loop thread: a set for ep (which waits for jet__urma_ep_set_arrived),
 * made off the loop. False when no thread can take the job. */
static bool ul_make_for(jet_urma_loop_t *ul, const struct ul_wait *w)
{
    ul_job_t *j = ul_job_new(ul, UL_JOB_MAKE, NULL);
    if (!j) return false;
    j->ep = w->ep;
    j->sq = w->sq;
    j->rq = w->rq;
    j->max_sge = w->max_sge;
    j->cq = w->cq;
    j->jfc = ul->cq[w->cq].jfc;
    return ul_job_go(ul, j);
}

/* Loop thread: JFC k is made off the loop (ul_cq_arrived when it comes).
 * False when no thread can take the job. */
static bool ul_cq_start(jet_urma_loop_t *ul, uint32_t k)
{
    ul_job_t *j = ul_job_new(ul, UL_JOB_CQ, NULL);
    if (!j) return false;
    j->cq = k;
    j->jfce = ul->jfce; /* NULL for cq[0] (or in polling mode) */
    return ul_job_go(ul, j);
}

/* Loop thread: slots past the first that hold nothing (deleted, or failed
 * with no connection waiting) are given up from the top. */
static void ul_cq_trim(jet_urma_loop_t *ul)
{
    while (ul->ncq > 1) {
        const struct ul_cq *q = &ul->cq[ul->ncq - 1];
        if (q->jfc || q->making || q->pending || q->deleting || q->used || q->sets) break;
        ul->ncq--;
    }
    if (ul->cq_next >= ul->ncq) ul->cq_next = 0;
}

/* Loop thread: JFC k (> 0), idle with no set left, is deleted off the
 * loop, by the job that made it. Nothing polls or arms it from now on; it
 * has no jetty, so no completion and no event can come for it (an event
 * reported before is acked by the loop, which the deletion waits for). */
static void ul_cq_delete(jet_urma_loop_t *ul, uint32_t k)
{
    struct ul_cq *q = &ul->cq[k];
    if (q->sets) {
        /* Not idle (ul_cq_idle): the provider would refuse, or worse. */
        JET_LOG_ONCE(JET_LOG_ERROR,
                     "URMA: completion queue %u of event loop %d still has %u jetty set(s): not "
                     "deleted",
                     k, jet_loop_index(ul->loop), q->sets);
        return;
    }
    ul_job_t *j = q->del_job;
    urma_jfc_t *jfc = q->jfc;
    q->del_job = NULL;
    q->jfc = NULL;
    q->idle_since = 0;
    q->retiring = false;
    q->deleting = true;
    ul->nmade--;
    if (j) j->jfc = jfc;
    if (j && ul_job_go(ul, j)) return;
    /* No import thread (ul_job_go freed j): here. */
    if (JET_URMA_FN(ul->ctx, urma_delete_jfc)(jfc) != URMA_SUCCESS)
        JET_LOG_ONCE(JET_LOG_WARN,
                     "URMA: cannot delete completion queue %u of event loop %d: "
                     "leaked",
                     k, jet_loop_index(ul->loop));
    q->deleting = false;
    ul_cq_trim(ul);
}

/* Loop thread: JFC k, idle for urma_jfc_idle_ms, drops its pooled sets
 * and is deleted once they are gone (ul_cq_check_idle). */
static void ul_cq_retire(jet_urma_loop_t *ul, uint32_t k)
{
    ul->cq[k].retiring = true;
    ul->cq[k].idle_since = 0;
    for (jet_urma_jset_t **pp = &ul->pool; *pp;) {
        jet_urma_jset_t *js = *pp;
        if (js->cq != k) {
            pp = &js->next;
            continue;
        }
        *pp = js->next;
        ul->npool--;
        ul_destroy_later(ul, js);
    }
    ul_cq_check_idle(ul, k);
}

static void ul_cq_timer_cb(jet_timer_t *t)
{
    jet_urma_loop_t *ul = (jet_urma_loop_t *)((char *)t - offsetof(jet_urma_loop_t, cq_timer));
    int64_t ms = JET_FLAG_IN_RANGE(urma_jfc_idle_ms);
    int64_t now = jet_now_us(), next = 0;
    for (uint32_t k = 1; k < ul->ncq; k++) {
        struct ul_cq *q = &ul->cq[k];
        if (!ul_cq_idle(ul, k) || q->retiring) q->idle_since = 0;
        if (!q->idle_since || ms <= 0) continue;
        int64_t due = q->idle_since + ms * 1000;
        if (now >= due)
            ul_cq_retire(ul, k);
        else if (!next || due < next)
            next = due;
    }
    if (next) jet_loop_timer_start(ul->loop, &ul->cq_timer, next);
}

/* Loop thread: the job of JFC k came back (jfc NULL: it failed). The
 * connections waiting for it get their sets made, or learn that there is
 * none. */
static void ul_cq_arrived(jet_urma_loop_t *ul, uint32_t k, urma_jfce_t *jfce, urma_jfc_t *jfc,
                          int err)
{
    const jet_urma_ctx_t *c = ul->ctx;
    ul->cq[k].making = false;
    if (k == 0 && jfc && jfce) {
        ul->io.fd = jfce->fd;
        ul->io.events = EPOLLIN;
        ul->io.cb = ul_event_cb;
        ul->io.arg = ul;
        ul->io.internal = true;
        int rc = jet_loop_io_add(ul->loop, &ul->io);
        if (rc < 0) {
            err = -rc;
            if (ul->srq) JET_URMA_FN(c, urma_delete_jfr)(ul->srq);
            ul->srq = NULL;
            JET_URMA_FN(c, urma_delete_jfc)(jfc);
            JET_URMA_FN(c, urma_delete_jfce)(jfce);
            jfc = NULL;
        }
    }
    if (jfc) {
        if (k == 0) ul->jfce = jfce;
        ul->cq[k].jfc = jfc;
        ul->nmade++;
        /* The waiting connections' credits, posted before their hellos. */
        if (k == 0 && ul->srq && jet__urma_loop_srq_fill(ul) < 0)
            JET_WARN("URMA: cannot post the shared receive queue of event loop %d",
                     jet_loop_index(ul->loop));
    } else {
        JET_WARN("URMA: cannot create completion queue %u of event loop %d: %s; its waiting "
                 "connections use TCP",
                 k, jet_loop_index(ul->loop), strerror(err ? err : EIO));
    }
    ul_poller_sync(ul);
    /* Room below the JFCs above: they may be spare now. */
    if (jfc) ul_cq_check_idle_from(ul, k + 1);
    /* The first n entries are looked at: those waiting for k are told (an
     * endpoint told here may close), the others stay. A connection that
     * attaches meanwhile (after a failure: a new JFC job) is appended behind
     * them, and stays. Entries are read by value each time: an attach may
     * grow (move) the array. */
    uint32_t n = ul->nwaiting, kept = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct ul_wait w = ul->waiting[i];
        if (w.cq != k) {
            ul->waiting[kept++] = w;
            continue;
        }
        if (!jfc || !ul_make_for(ul, &w)) jet__urma_ep_set_arrived(w.ep, NULL);
    }
    uint32_t later = ul->nwaiting - n;
    if (later && kept < n)
        memmove(ul->waiting + kept, ul->waiting + n, later * sizeof *ul->waiting);
    ul->nwaiting = kept + later;
    /* The JFCs whose connections waited for this one's JFCE: made now, or
     * (it failed) their connections are told there is none. */
    for (uint32_t q = 1; k == 0 && q < ul->ncq; q++) {
        if (!ul->cq[q].pending) continue;
        ul->cq[q].pending = false;
        if (!jfc || !ul_cq_start(ul, q)) ul_cq_arrived(ul, q, NULL, NULL, jfc ? EAGAIN : err);
    }
    ul_fill_maybe(ul);
}

static jet_urma_loop_t *ul_create(jet_loop_t *loop, const jet_urma_ctx_t *c)
{
    jet_urma_loop_t *ul = calloc(1, sizeof *ul);
    if (!ul) return NULL;
    ul->loop = loop;
    ul->ctx = c;
    ul->polling = JET_FLAG(urma_use_polling);
    uint32_t depth = JET_FLAG(urma_jfc_depth) > 0 ? (uint32_t)JET_FLAG(urma_jfc_depth) : 32768;
    if (depth > c->max_jfc_depth) depth = c->max_jfc_depth;
    ul->jfc_depth = depth;
    int32_t srq = JET_FLAG(urma_shared_rq_size);
    if (srq > 0) {
        uint32_t d = srq < 16 ? 16 : (uint32_t)srq;
        if (d > c->max_jfr_depth) d = c->max_jfr_depth;
        if (d > depth / 2) d = depth / 2; /* room in the JFC for the send queues */
        ul->srq_buf = calloc(d, sizeof *ul->srq_buf);
        ul->srq_free = malloc(d * sizeof *ul->srq_free);
        ul->srq_spare = malloc(d * sizeof *ul->srq_spare);
        if (!ul->srq_buf || !ul->srq_free || !ul->srq_spare) {
            free(ul->srq_buf);
            free(ul->srq_free);
            free(ul->srq_spare);
            free(ul);
            return NULL;
        }
        for (uint32_t i = d; i > 0; i--)
            ul->srq_free[ul->srq_nfree++] = i - 1;
        ul->srq_depth = d;
        ul->srq_size = jet__urma_recv_size();
        jet_timer_init(&ul->srq_timer, ul_srq_timer_cb);
        ul->cq[0].used = d; /* every receive can complete once, into cq[0] */
    }
    jet_timer_init(&ul->cq_timer, ul_cq_timer_cb);
    jet_timer_init(&ul->look_timer, ul_look_timer_cb);
    ul->gap_us = INT64_MAX / 8; /* no spin before short gaps were seen */
    ul->poller.poll = ul_poll_cb;
    ul->poller.arg = ul;
    /* The JFC is made off the loop when the first connection asks for it
     * (jet__urma_loop_attach), then the pool is filled. */
    return ul;
}

jet_urma_loop_t *jet__urma_loop_get(jet_loop_t *loop)
{
    const jet_urma_ctx_t *c = jet__urma_ctx_get();
    int i = jet_loop_index(loop);
    if (!c || i < 0 || i >= CTX_MAX_LOOPS) return NULL;
    if (!ctx_loops[i]) ctx_loops[i] = ul_create(loop, c);
    return ctx_loops[i];
}

jet_urma_loop_t *jet__urma_loop_peek(jet_loop_t *loop)
{
    int i = jet_loop_index(loop);
    return i >= 0 && i < CTX_MAX_LOOPS ? ctx_loops[i] : NULL;
}

jet_loop_t *jet__urma_loop_of(const jet_urma_loop_t *ul)
{
    return ul->loop;
}

static int ul_grow(jet_urma_loop_t *ul)
{
    uint32_t ncap = ul->cap ? ul->cap * 2 : 64;
    if (ncap >= (1u << 24)) return -ENOMEM; /* the index field of user_ctx, below UL_SRQ_INDEX */
    struct jet_urma_ep **eps = realloc(ul->eps, ncap * sizeof *eps);
    if (!eps) return -ENOMEM;
    ul->eps = eps;
    uint8_t *gens = realloc(ul->gens, ncap);
    if (!gens) return -ENOMEM;
    ul->gens = gens;
    uint8_t *cq_of = realloc(ul->cq_of, ncap);
    if (!cq_of) return -ENOMEM;
    ul->cq_of = cq_of;
    uint32_t *fi = realloc(ul->free_idx, ncap * sizeof *fi);
    if (!fi) return -ENOMEM;
    ul->free_idx = fi;
    struct jet_urma_ep **t = realloc(ul->touched, ncap * sizeof *t);
    if (!t) return -ENOMEM;
    ul->touched = t;
    struct jet_urma_ep **d = realloc(ul->deferred, ncap * sizeof *d);
    if (!d) return -ENOMEM;
    ul->deferred = d;
    struct ul_wait *wt = realloc(ul->waiting, ncap * sizeof *wt);
    if (!wt) return -ENOMEM;
    ul->waiting = wt;
    /* Pushed highest first so that low indices are handed out first. */
    for (uint32_t i = ncap; i > ul->cap; i--) {
        ul->eps[i - 1] = NULL;
        ul->gens[i - 1] = 0;
        ul->free_idx[ul->nfree++] = i - 1;
    }
    ul->cap = ncap;
    return 0;
}

int jet__urma_loop_attach(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t sq, uint32_t rq,
                          uint32_t max_sge, bool fresh, uint32_t *index_p, uint8_t *gen_p,
                          jet_urma_jset_t **js_p, bool *pooled_p)
{
    uint32_t need = ul_reserve(sq, rq);
    if (ul->srq_failed) return -EIO; /* its connections would get no buffer back */
    if (ul->nfree == 0 && ul_grow(ul) < 0) return -ENOMEM;
    /* A pooled set of these sizes on a JFC with room, but a spare one (a
     * lower JFC has room: the connection goes there, and the spare one may
     * go idle). */
    jet_urma_jset_t *js = NULL, **pp = &ul->pool;
    int64_t now = ul->npool ? jet_now_us() : 0;
    uint32_t first_room = ul_cq_first_room(ul, need);
    for (; !fresh && *pp; pp = &(*pp)->next) {
        if (ul_jset_fits(*pp, sq, rq, max_sge) && (*pp)->ready_us <= now &&
            ul_cq_room(ul, (*pp)->cq, need) && !ul_cq_spare(ul, (*pp)->cq, first_room)) {
            js = *pp;
            break;
        }
    }
    uint32_t k = js ? js->cq : ul_cq_pick(ul, need);
    if (k == UINT32_MAX) {
        JET_LOG_ONCE(JET_LOG_WARN,
                     "URMA: the completion queues of event loop %d are full (%u queues of %u "
                     "entries each): further connections of this loop use TCP (see "
                     "urma_jfc_depth, urma_jfc_per_loop)",
                     jet_loop_index(ul->loop), ul->ncq, ul->jfc_depth);
        return -EBUSY;
    }
    uint32_t idx = ul->free_idx[ul->nfree - 1];
    ul->eps[idx] = ep;
    struct ul_wait w = {.ep = ep, .sq = sq, .rq = rq, .max_sge = max_sge, .cq = k};
    if (js) {
        *pp = js->next;
        ul->npool--;
        js->next = NULL;
    } else if (ul->cq[k].jfc) {
        /* The pool is empty: a set of ep's sizes is made off the loop. */
        if (!ul_make_for(ul, &w)) goto err_no_thread;
    } else {
        /* The loop's first connection, or the first past the JFCs made (or
         * the last attempt failed): the JFC is made off the loop, then the
         * set. A JFC past the first needs the first's JFCE (event mode) and
         * the shared receive queue on it: while that is being made, the job
         * waits for it (cq[0] is always the first made). */
        if (!ul->cq[k].making && !ul->cq[k].pending) {
            if (k == 0 || ul->cq[0].jfc) {
                if (!ul_cq_start(ul, k)) goto err_no_thread;
            } else {
                ul->cq[k].pending = true;
                if (k >= ul->ncq) ul->ncq = k + 1;
            }
        }
        ul->waiting[ul->nwaiting++] = w;
    }
    if (pooled_p) *pooled_p = js != NULL;
    ul->nfree--;
    ul->gens[idx]++;
    ul->cq_of[idx] = (uint8_t)k;
    ul->cq[k].used += need;
    ul->cq[k].idle_since = 0;
    ul->cq[k].retiring = false;
    ul->nattached++;
    ul->attaches++;
    ul_poller_sync(ul);
    if (!ul->polling && !jet_timer_armed(&ul->look_timer))
        jet_loop_timer_start(ul->loop, &ul->look_timer, jet_loop_now_us(ul->loop) + CTX_LOOK_US);
    *index_p = idx;
    *gen_p = ul->gens[idx];
    *js_p = js;
    ul_fill_maybe(ul);
    return js ? 0 : 1;

err_no_thread:
    ul->eps[idx] = NULL;
    return -EAGAIN;
}

bool jet__urma_loop_defer(jet_urma_loop_t *ul, struct jet_urma_ep *ep)
{
    if (!ul->in_poll) return false;
    ul->deferred[ul->ndeferred++] = ep;
    return true;
}

void jet__urma_loop_detach(jet_urma_loop_t *ul, struct jet_urma_ep *ep, uint32_t sq, uint32_t rq)
{
    int64_t idx = ul_unlist(ul, ep);
    if (idx < 0) {
        /* Attached endpoints stay in the table until they detach. */
        JET_LOG_ONCE(JET_LOG_ERROR, "URMA: a connection detached from event loop %d twice",
                     jet_loop_index(ul->loop));
        return;
    }
    ul->eps[idx] = NULL;
    ul->free_idx[ul->nfree++] = (uint32_t)idx;
    uint32_t k = ul->cq_of[idx];
    ul->cq[k].used -= ul_reserve(sq, rq);
    ul_cq_check_idle_from(ul, k);
    ul->nattached--;
    /* The room it gave back may take a prepared set (its own set, if
     * recycled, was counted before: the caller recycles first). */
    ul_fill_maybe(ul);
    /* Nothing to poll: the loop may sleep again. */
    ul_poller_sync(ul);
}

void jet__urma_loop_stats(jet_urma_loop_t *ul, jet_urma_loop_stats_t *out)
{
    out->endpoints = ul->nattached;
    out->attaches = ul->attaches;
    out->pooled = ul->npool;
    out->recycled = ul->recycled;
    out->filled = ul->filled;
    out->jfc_used = 0;
    for (uint32_t k = 0; k < CTX_CQ_MAX; k++)
        out->jfc_used += ul->cq[k].used; /* cq[0] holds the shared queue's before it is made */
    out->jfc_used -= ul->srq_depth;
    out->jfc_depth = ul->jfc_depth;
    out->jfcs = ul->nmade;
    out->completions = ul->completions;
    out->events = ul->events;
    out->spins = ul->spins;
    out->looks_found = ul->looks_found;
    out->spinning = ul->spinning;
    out->deferred = ul->ndeferred;
    out->srq_depth = ul->srq_depth;
    out->srq_posted = ul->srq_posted;
    out->srq_out = ul->srq_out;
    out->srq_kept = ul->srq_nspare;
    out->srq_refused = ul->srq_refused;
    out->recv_held = 0;
    for (uint32_t i = 0; i < ul->cap; i++)
        if (ul_ep_live(ul->eps[i])) out->recv_held += jet__urma_ep_held(ul->eps[i]);
    out->c = ul->counters;
}

jet_urma_counters_t *jet__urma_loop_counters(jet_urma_loop_t *ul)
{
    return &ul->counters;
}
