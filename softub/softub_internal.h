/* softub_internal.h: declarations shared by the softub provider's files.
 *
 * softub is a software Unified Bus: it exports liburma's urma_* functions
 * with the master (26.06) ABI of src/urma/urma_api.h, so unmodified URMA
 * programs run across processes on one host. Nothing here is exported
 * (softub.map keeps every non-urma_* symbol local).
 *
 * Big picture (docs/en/softub.md has the user view):
 * - The fabric: a POSIX shm "directory" per user and fabric name
 *   (softub_fabric.c) with a process table and two id tables (queue ids:
 *   JFC/JFS/JFR/jetty; token ids), plus one memfd "region" per process that
 *   holds the shared halves of that process's objects (rings, descriptors,
 *   the segment table). Peers map each other's region through
 *   /proc/<pid>/fd/<n>.
 * - Library objects (urma_*_t at their full master size) live in the
 *   process heap, with the softub bookkeeping after the urma base; their
 *   shared halves (struct sub_s*) live in the region and are referenced by
 *   region offsets, never by pointers.
 * - The data path (softub_post.c) runs in the poster's thread; WRs that
 *   cannot complete (RNR, injected delay) wait in their send queue for the
 *   per-process progress thread.
 *
 * Locking order (outer to inner): softub__g.lock (control plane) ->
 * prog.mu -> sq->lock -> peer->lock -> directory lock. The progress thread
 * holds prog.mu and only trylocks send queues. */
#ifndef SOFTUB_INTERNAL_H
#define SOFTUB_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "softub_ring.h"
#include "urma/urma_api.h"

#define SUB_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* Device capabilities (advertised by urma_query_device; see docs)           */
/* ------------------------------------------------------------------------ */

#define SUB_MAX_JFC          65535
#define SUB_MAX_JFC_DEPTH    65536
#define SUB_MAX_JFS_DEPTH    32768
#define SUB_MAX_JFR_DEPTH    32768
#define SUB_MAX_JFS_SGE      13
#define SUB_MAX_JFS_RSGE     13
#define SUB_MAX_JFR_SGE      8
#define SUB_MAX_INLINE       192
#define SUB_MAX_MSG          (1ull << 31)
#define SUB_MAX_READ_SGE     6  /* UDMA's READ limit on local SGEs */
#define SUB_MAX_WRITE_IMM_SGE 12 /* UDMA's WRITE_IMM limit */
#define SUB_CEQ_CNT          1
#define SUB_DEFAULT_DEVICE   "softub0"

/* ------------------------------------------------------------------------ */
/* Fabric geometry                                                           */
/* ------------------------------------------------------------------------ */

#define SUB_MAX_PROCS    512
#define SUB_MAX_QIDS     65536 /* queue ids 1..65535 (JFC, JFS, JFR, jetty); receive CRs carry two in 32 bits */
#define SUB_MAX_TIDS     65536 /* token ids 1..65535 */
#define SUB_MAX_SEGS     16384 /* registered segments per process */
#define SUB_SEG_TABLE_OFF 4096ull
#define SUB_HEAP_OFF     (4ull << 20)
#define SUB_REGION_DEFAULT (1ull << 30) /* sparse: pages are touched only when used */
#define SUB_EV_RING_CAP  4096
#define SUB_ASYNC_RING_CAP 1024
#define SUB_FREE_GRACE_NS 2000000000ull /* region blocks are reused only after this */

#define SUB_DIR_MAGIC    0x534f465455424452ull /* "SOFTUBDR" */
#define SUB_DIR_VERSION  1u
#define SUB_REGION_MAGIC 0x534f465455425247ull /* "SOFTUBRG" */
/* 3: 256-byte CR slots (192-byte inline SENDs); 4: claim records after the
 * slots of JFC and JFCE rings (processes of two layouts must not meet). */
#define SUB_REGION_VERSION 4u

enum { SUB_PROC_FREE = 0, SUB_PROC_ALIVE = 1 };
enum { SUB_ID_FREE = 0, SUB_ID_USED = 1 };
enum { SUB_T_NONE = 0, SUB_T_JFC, SUB_T_JFS, SUB_T_JFR, SUB_T_JETTY, SUB_T_TOKEN };
enum { SUB_OBJ_DEAD = 0, SUB_OBJ_LIVE = 1 };
enum { SUB_SEG_FREE = 0, SUB_SEG_REG = 1 };
enum { SUB_MEM_PVM = 0, SUB_MEM_FD = 1 }; /* how peers reach a segment's bytes */
enum { SUB_ARM_NONE = 0, SUB_ARM_ALL = 1, SUB_ARM_SOLICITED = 2 };
/* `armed` while a producer of another process that disarmed the JFC for
 * its CR's event has not claimed that event's slot yet: this flag | its
 * pid. Killed in between, it leaves the JFC disarmed with no event and no
 * slot claimed, which no later CR would fire: the owner's progress thread
 * fires the event for it (softub__jfce_holes_check). Disarmed, for every
 * other purpose. */
#define SUB_ARM_FIRING 0x80000000u

/* ------------------------------------------------------------------------ */
/* Shared memory layouts (host order, same host only)                        */
/* ------------------------------------------------------------------------ */

struct sub_dir_proc {
    _Atomic uint32_t state;
    _Atomic uint32_t gen; /* bumped on every join and every reclaim */
    int32_t pid;
    uint32_t uasid;
    uint64_t start_time; /* /proc/<pid>/stat field 22: detects pid reuse */
    int32_t region_fd;   /* the memfd number inside that process */
    uint32_t reserved;
    uint64_t region_size;
};
_Static_assert(sizeof(struct sub_dir_proc) == 40, "sub_dir_proc");

struct sub_dir_id {
    _Atomic uint32_t state;
    uint16_t type;
    uint16_t slot;
    uint32_t slot_gen; /* stale when the owner slot's gen moved on */
    uint32_t obj_gen;
    uint64_t off; /* shared descriptor offset in the owner's region */
};
_Static_assert(sizeof(struct sub_dir_id) == 24, "sub_dir_id");

struct sub_dir {
    uint64_t magic;
    uint32_t version;
    uint32_t hdr_size;
    _Atomic uint64_t init; /* 0 new; 1<<32|pid initialising; 2<<32 ready */
    _Atomic uint64_t lock; /* owner pid, 0 = free */
    uint32_t qid_cursor;
    uint32_t tid_cursor;
    uint32_t uasid_next;
    uint32_t obj_gen_next;
    uint8_t pad[4096 - 48];
    struct sub_dir_proc procs[SUB_MAX_PROCS];
    struct sub_dir_id qids[SUB_MAX_QIDS];
    struct sub_dir_id tids[SUB_MAX_TIDS];
};

struct sub_region_hdr {
    uint64_t magic;
    uint32_t version;
    int32_t pid;
    uint64_t size;
    _Atomic uint32_t doorbell; /* futex word: wakes the owner's progress thread */
    _Atomic uint32_t seg_hwm;  /* segment table entries ever used: importers scan below */
    /* A process-shared robust mutex held by the owner's progress thread while
     * it runs. When the owner dies the kernel sets FUTEX_OWNER_DIED in its
     * futex word (glibc's __data.__lock), so peers see the death with one load
     * before every WR (softub__peer_enter), not only at the once-a-second liveness
     * check. Its own line: the doorbell's writes do not evict it. */
    _Alignas(64) pthread_mutex_t alive;
};

/* Common head of every shared descriptor. */
struct sub_sobj {
    _Atomic uint32_t state; /* SUB_OBJ_LIVE while the object exists */
    uint32_t type;
    uint32_t gen; /* equals the directory entry's obj_gen */
    uint32_t id;
};

struct sub_sctx {
    struct sub_sobj h;
    int32_t async_fd;
    _Atomic uint32_t pending_signals; /* doorbell fallback for remote signalling */
    uint64_t async_ring_off;
};

struct sub_sjfce {
    struct sub_sobj h;
    int32_t efd;
    _Atomic uint32_t pending_signals;
    uint64_t ring_off;
};

struct sub_sjfc {
    struct sub_sobj h;
    _Atomic uint32_t armed;
    _Atomic uint32_t overflow;
    uint64_t user_ptr; /* the owner's urma_jfc_t * */
    uint64_t uid;
    uint64_t jfce_off; /* 0 = polling-only JFC */
    uint64_t sctx_off;
    uint64_t ring_off;
};

struct sub_sjfr {
    struct sub_sobj h;
    _Atomic uint32_t qstate; /* urma_jfr_state_t */
    uint32_t trans_mode;
    uint32_t token_policy;
    uint32_t token_value;
    uint32_t min_rnr_timer;
    uint32_t max_sge;
    urma_eid_t eid;
    uint64_t jfc_off;
    uint64_t user_ptr; /* the owner's urma_jfr_t * */
    uint64_t ring_off;
};

struct sub_sjetty {
    struct sub_sobj h;
    _Atomic uint32_t qstate; /* urma_jetty_state_t */
    uint32_t trans_mode;
    uint32_t order_type;
    uint32_t reserved;
    urma_eid_t eid;
    uint64_t jfr_off;
    uint64_t rx_jfc_off;
    uint64_t user_ptr; /* the owner's urma_jetty_t * */
};

struct sub_sseg {
    _Atomic uint32_t state;
    _Atomic uint32_t gen;
    uint32_t token_id;
    uint32_t token_value;
    uint32_t token_policy;
    uint32_t access;
    uint32_t kind; /* SUB_MEM_* */
    int32_t fd;    /* owner's fd on the backing file (kind FD) */
    uint64_t va;
    uint64_t len;
    uint64_t file_off; /* file offset of va (kind FD) */
    uint64_t dev;
    uint64_t ino;
    _Atomic uint32_t alock; /* pid of the holder: serialises process_vm atomics */
    uint32_t uasid;
    urma_eid_t eid;
    /* The gen of the registration a SEND_INVALIDATE naming the entry's
     * token id revoked (fact sheet §4.10; 0: none, gens start at 1):
     * remote accesses through it fail from then on; the owner's own use of
     * the memory (local SGEs, receive buffers) goes on. The one field a
     * process other than the owner writes. */
    _Atomic uint32_t revoked;
    uint8_t pad[12];
};
_Static_assert(sizeof(struct sub_sseg) == 112, "sub_sseg");

/* Ring payloads. A CR slot is four cache lines: line 0 holds the sequence
 * and the sub_cqe, lines 1 to 3 the payload of a small SEND delivered in the CR
 * ("scatter to CQE": the poller copies it into the receive WR's buffer), so
 * the receiver's misses on the CR and on the payload overlap instead of
 * following each other. user_data is not carried: poll derives it from
 * local_id through the object table. */
struct sub_cqe {
    uint8_t status;
    uint8_t opcode;
    uint8_t flag;
    uint8_t solicited;
    uint32_t len;
    uint64_t user_ctx;
    uint32_t local_id;
    /* Initiator CRs: the target's jetty id. Receive CRs: the sender's jetty
     * id in the low 16 bits, and in the high 16 the id of the JFR the WR was
     * posted to (local_id names the jetty it came through, which may be
     * deleted, and its id reused, before the CR is polled; queue ids are
     * below SUB_MAX_QIDS = 1 << 16). */
    uint32_t remote_id;
    /* Receive CRs: imm_data or the packed invalid_token. Initiator CRs:
     * which send-queue slots to retire: uid32 | wr_seq32 << 32 (uid32 0 =
     * nothing to retire). */
    uint64_t imm;
    urma_eid_t remote_eid;
    uint32_t tpn;
    /* Receive CRs: the low 32 bits of the receive WR's ring position, which
     * names its shadow entry (struct sub_rshadow). */
    uint32_t rq_pos;
};
_Static_assert(8 + sizeof(struct sub_cqe) == 64, "sequence + sub_cqe fill line 0 of a CR slot");
/* A CR slot is line 0 (sequence + sub_cqe) and three payload lines: a SEND
 * of up to SUB_CQE_INL_MAX bytes travels in the slot, and the target's poll
 * copies it into the receive buffer (a typical RPC frame, header + meta +
 * a small message, is 70 to 190 bytes). */
#define SUB_CQE_SLOT     256u
#define SUB_CQE_INL_OFF  (64u - 8u) /* payload offset from the sub_cqe */
#define SUB_CQE_INL_MAX  (SUB_CQE_SLOT - 64u)
/* Internal bit of sub_cqe.flag (urma_cr_flag_t's reserved bits, never shown
 * in urma_cr_t): the payload is in lines 1.. of the slot, not in the buffer. */
#define SUB_CQE_F_INLINE 0x80u

static inline uint32_t sub_uid32(uint64_t uid)
{
    uint32_t u = (uint32_t)uid;
    return u != 0 ? u : 1;
}

struct sub_rqe_sge {
    uint64_t addr;
    uint32_t len;
    uint32_t seg_idx;
    uint32_t seg_gen;
    uint32_t reserved;
};

#define SUB_TAKER_CR 0x80000000u /* pids are below 1 << 22 */
struct sub_rqe {
    uint64_t user_ctx;
    uint32_t nsge;
    /* The pid of the sender that took the WR (0 until one does), with
     * SUB_TAKER_CR once its CR is written. A sender killed before its CR
     * leaves the WR to be posted again, one killed before it released the
     * slot leaves the slot to be released: the owner's next post that
     * reaches the slot does either (softub_post.c). __atomic builtins. */
    uint32_t taker;
    struct sub_rqe_sge sge[];
};

/* Process-local copy of a posted receive WR, one per receive ring slot.
 * Senders free the ring slot as soon as they have taken the WR; the shadow
 * entry stays POSTED until the WR's CR is polled (hardware frees an RQ WQE
 * when its CQE is polled), so that an inline CR still finds its buffer and
 * a re-post cannot overwrite it first. */
enum { SUB_RSH_FREE = 0, SUB_RSH_POSTED = 1 };
struct sub_rshadow {
    uint64_t pos; /* full ring position of the WR it holds */
    uint64_t user_ctx;
    _Atomic uint32_t state;
    uint32_t nsge;
    uint64_t epoch; /* the JFR's rq_epoch when it was posted */
    struct sub_rqe_sge sge[];
};

struct sub_evt {
    uint64_t jfc_user;
    uint64_t jfc_uid;
    uint32_t jfc_id;
    uint32_t reserved;
};

struct sub_aevt {
    uint32_t type;
    uint32_t obj_id;
    uint64_t obj_uid;
    uint64_t user_ptr;
};

/* ------------------------------------------------------------------------ */
/* Process-local state                                                       */
/* ------------------------------------------------------------------------ */

struct sub_fault {
    uint32_t um_drop_ppm;
    uint32_t delay_us;
    uint32_t err_every;
    uint32_t err_status;
    int force_rnr;
    uint32_t import_delay_us;
    uint32_t queue_delay_us;
    uint32_t close_delay_us;
    int close_fail;
    uint64_t die_on_take_imm; /* SOFTUB_DIE_ON_TAKE_IMM (0: off) */
    uint64_t stop_on_take_imm; /* SOFTUB_STOP_ON_TAKE_IMM (0: off) */
    _Atomic uint32_t jfc_fail; /* create_jfc calls left to fail */
    _Atomic uint32_t jfc_fail_after; /* create_jfc calls to let through before those */
    _Atomic uint32_t recv_full; /* receive WRs left to refuse as by a full queue */
    _Atomic uint32_t recv_full_after; /* receive WRs to let through before those */
    _Atomic uint32_t lose_event;      /* events for other processes' JFCs left to lose */
    int no_pidfd;
    int ptracer_any;
    uint64_t region_size;
    char eid[64];
    char device[URMA_MAX_NAME];
    char fabric[64];
    char slow_trace[256]; /* SOFTUB_SLOW_TRACE: the file injected delays are noted in */
};
extern struct sub_fault softub__fault;

/* A fault counter of "the next n calls": takes one while it is positive,
 * true when it did. */
static inline int softub__fault_take(_Atomic uint32_t *n)
{
    uint32_t left = atomic_load_explicit(n, memory_order_relaxed);
    while (left > 0 && !atomic_compare_exchange_weak(n, &left, left - 1))
        ;
    return left > 0;
}
void softub__fault_load(void);
/* SOFTUB_DIE_ON_TAKE_IMM / SOFTUB_STOP_ON_TAKE_IMM steps inside a receive
 * CR's push (softub_jfc.c): the step the immediate of the SEND_IMM this
 * thread is completing names (-1: none), and whether it dies or stops
 * there, set by the sender around the push. */
enum {
    SUB_DIE_CR_CLAIMED = 3,    /* its CR slot claimed (and recorded), WR not yet marked */
    SUB_DIE_CR_MARKED = 4,     /* WR marked, before the CR is written */
    SUB_DIE_EVENT_CLAIMED = 5, /* its JFCE event slot claimed (and recorded), not written */
    SUB_DIE_EVENT_WRITTEN = 6, /* its JFCE event written, not yet counted on the eventfd */
    SUB_DIE_DISARMED = 7,      /* the owner's armed JFC disarmed, its event's slot not claimed */
};
extern __thread int softub__fault_step;
extern __thread int softub__fault_stops;
void softub__fault_hit(void); /* SIGKILL now, or SIGSTOP and go on once continued */
/* The fault of this thread's SEND_IMM when it is at `step` (a global's load
 * when both knobs are off). */
static inline void softub__fault_at(int step)
{
    if ((softub__fault.die_on_take_imm != 0 || softub__fault.stop_on_take_imm != 0) &&
        softub__fault_step == step)
        softub__fault_hit();
}
/* Sleeps us microseconds (0: returns at once): the injected delays, each
 * noted with the calling thread's name and `what` in SOFTUB_SLOW_TRACE. */
void softub__fault_sleep_us(uint32_t us, const char *what);

/* A memory mapping of a peer's backing file (memfd, shm file). */
struct sub_pmap {
    uint64_t dev;
    uint64_t ino;
    uint8_t *base;
    uint64_t size;
};

#define SUB_PEER_MAPS 256
#define SUB_PEER_EFDS 64

/* Another process on the fabric (or this one, self = 1). Data-path threads
 * may hold a pointer after it died: one whose slot was reused is freed
 * through the graveyard once released, unused and imported by nothing
 * (softub__peers_release_dead), any other at leave. */
struct sub_peer {
    int slot;
    uint32_t gen;
    pid_t pid;
    uint64_t start_time;
    int self;
    uint8_t *region;
    uint64_t region_size;
    _Atomic int dead;
    _Atomic int users;    /* data-path operations in flight against this peer */
    _Atomic int released; /* mappings torn down after death */
    _Atomic int imports;  /* target jetties and segments naming it */
    pthread_mutex_t lock; /* maps (writers), efd cache */
    _Atomic int nmaps;
    struct sub_pmap maps[SUB_PEER_MAPS];
    int pidfd;
    int getfd_failed;
    struct {
        uint64_t off;
        uint32_t gen;
        int remote_fd;
        int local_fd;
    } efds[SUB_PEER_EFDS];
    int nefds;
};

/* Every library object embeds one; the object table maps ids to it. */
struct sub_obj {
    uint32_t kind; /* SUB_T_* */
    uint32_t id;
    uint64_t uid;
    uint64_t user_ptr; /* the urma_* object: CR user_data */
    _Atomic uint32_t async_reported;
    _Atomic uint32_t async_acked;
    _Atomic int async_raised; /* one JETTY_ERR/JFS_ERR per object */
};

struct sub_ctx;
struct sub_jfc;
struct sub_tjetty;
struct sub_wr;

/* The send half of a JFS or a jetty. */
struct sub_sq {
    pthread_mutex_t lock;
    struct sub_ctx *ctx;
    struct sub_jfc *jfc;
    struct sub_obj *obj;
    uint32_t id;
    int is_jetty;
    uint64_t user_ptr; /* urma_jfs_t * or urma_jetty_t * */
    urma_eid_t eid;
    urma_jfs_cfg_t cfg;
    uint32_t max_inline;
    _Atomic uint32_t state; /* urma_jetty_state_t */
    uint64_t post_seq;
    _Atomic uint64_t done_seq; /* WRs below this have their CR polled */
    struct sub_wr *pend_head;
    struct sub_wr *pend_tail;
    uint32_t npend;
    struct sub_tjetty *bound; /* RC */
    struct sub_sq *prog_next;
    int prog_active;
};

struct sub_ctx {
    urma_context_t base;
    uint64_t magic;
    struct sub_sctx *sh;
    uint64_t sh_off;
    struct sub_ring *aring;
    pthread_mutex_t lock;
    uint32_t tpn_next;
    struct sub_ctx *next; /* process list, for doorbell signalling */
};

/* A consumer's look at the hole at its ring's tail (softub_jfc.c,
 * jfc_hole_lost). */
struct sub_hole {
    uint64_t pos1;     /* the hole's position + 1 (0: none seen) */
    uint64_t since_ns; /* when it was first seen */
    uint64_t asked_ns; /* when its claimant's process was last asked after */
};

/* A slot claimed without its claimant's mark (a receive-ring slot with no
 * taker, a ring slot whose claim record has no note) stays so this long
 * before the claimant is taken to have been killed between its claim and
 * its mark, or its record to be its own (a few instructions: a live process
 * is not preempted there that long in practice). */
#define SUB_CLAIM_LOST_NS 1000000000ull

struct sub_jfce {
    urma_jfce_t base;
    uint64_t magic;
    struct sub_ctx *ctx;
    struct sub_sjfce *sh;
    uint64_t sh_off;
    struct sub_ring *ring;
    pthread_mutex_t take_lock; /* one consumer at a time (see sub_jfc.poll_lock) */
    struct sub_hole hole;      /* under take_lock */
    /* Progress thread: 1 + the consumer index at which its last look found
     * an event written and the eventfd not readable (0: none). */
    uint64_t uncounted1;
    struct sub_jfce *next; /* process list, for doorbell signalling */
};

struct sub_jfc {
    urma_jfc_t base;
    uint64_t magic;
    struct sub_obj obj;
    struct sub_ctx *ctx;
    struct sub_jfce *jfce;
    struct sub_sjfc *sh;
    uint64_t sh_off;
    struct sub_ring *ring;
    /* Serialises consumers, as UDMA's CQ lock does (skipped with
     * jfc_cfg.flag.bs.lock_free): a poller preempted between claiming and
     * releasing a slot must not make producers see a full ring after a wrap. */
    pthread_mutex_t poll_lock;
    pthread_mutex_t ev_lock;
    pthread_cond_t ev_cond;
    uint64_t reported;
    uint64_t acked;
    _Atomic uint32_t users; /* JFS/JFR/jetty using it */
    _Atomic uint32_t empty_polls; /* a count, for the look for a hole */
    struct sub_hole hole;         /* under poll_lock */
};

struct sub_jfs {
    urma_jfs_t base;
    uint64_t magic;
    struct sub_obj obj;
    struct sub_sq sq;
};

struct sub_jfr {
    urma_jfr_t base;
    uint64_t magic;
    struct sub_obj obj;
    struct sub_ctx *ctx;
    struct sub_jfc *jfc;
    struct sub_sjfr *sh;
    uint64_t sh_off;
    struct sub_ring *ring;
    uint32_t rqe_size;
    uint32_t sh_stride;     /* bytes per shadow entry */
    uint8_t *shadow;        /* ring->cap entries, in this allocation */
    /* Shadow entries freed by polls (the JFC's serialised consumer) and by
     * RESET (under lock): with the ring's head they count the POSTED entries,
     * which bound the WRs not yet taken, so a re-post checks the depth
     * without reading the ring's tail (written by every sender's take). */
    _Atomic uint64_t rq_freed;
    _Atomic uint64_t rq_dropped;
    /* Moves to RESET: a WR posted before one is never posted again for a
     * sender that died holding it (post_rq_recover). */
    uint64_t rq_epoch;
    /* The head slot seen claimed with no taker recorded (position + 1, 0:
     * none) and since when: a sender killed between its claim and its mark
     * (post_rq_recover gives such a slot back after SUB_TAKER_LOST_NS). */
    _Atomic uint64_t lost_pos;
    _Atomic uint64_t lost_since_ns;
    _Atomic uint32_t users; /* jetties sharing it */
    pthread_mutex_t lock;   /* state changes and flushes */
};

struct sub_jetty {
    urma_jetty_t base;
    uint64_t magic;
    struct sub_obj obj;
    struct sub_sq sq;
    struct sub_jfr *jfr;
    struct sub_jfc *rx_jfc;
    struct sub_sjetty *sh;
    uint64_t sh_off;
};

struct sub_tjetty {
    urma_target_jetty_t base;
    uint64_t magic;
    struct sub_ctx *ctx;
    struct sub_peer *peer;
    uint64_t obj_off;
    uint32_t obj_gen;
    uint32_t obj_type; /* SUB_T_JETTY or SUB_T_JFR */
    uint32_t token;
    int token_valid;
    _Atomic int bound;
    _Atomic uint32_t pins; /* queued WRs that name it (see softub__grave_pinned) */
};

struct sub_token {
    urma_token_id_t base;
    uint64_t magic;
    struct sub_ctx *ctx;
};

struct sub_backing; /* softub_seg.c */

struct sub_tseg {
    urma_target_seg_t base;
    uint64_t magic;
    struct sub_ctx *ctx;
    int registered; /* 1: urma_register_seg, 0: urma_import_seg */
    struct sub_peer *peer;
    uint32_t seg_idx;
    uint32_t seg_gen;
    uint32_t token;
    int token_valid;
    uint8_t *map_base; /* imported FD-backed: mapping of the backing file */
    struct sub_token *tid;
    int own_tid;
    struct sub_backing *backing;
    _Atomic uint32_t pins; /* queued WRs that name it (see softub__grave_pinned) */
};

#define SUB_MAGIC_CTX   0x73627563747878ull
#define SUB_MAGIC_JFCE  0x7362756a666365ull
#define SUB_MAGIC_JFC   0x7362756a666320ull
#define SUB_MAGIC_JFS   0x7362756a667320ull
#define SUB_MAGIC_JFR   0x7362756a667220ull
#define SUB_MAGIC_JETTY 0x7362756a657479ull
#define SUB_MAGIC_TJ    0x736275746a6574ull
#define SUB_MAGIC_TSEG  0x73627574736567ull
#define SUB_MAGIC_TOKEN 0x737562746f6b6eull
#define SUB_MAGIC_DEAD  0xdeadull

/* Progress thread (softub_post.c). */
struct sub_prog {
    pthread_mutex_t mu;
    struct sub_sq *active;
    _Atomic int nactive; /* send queues with pending WRs */
};

struct sub_region_free;

struct sub_global {
    pthread_mutex_t lock;
    int inited;
    uint32_t init_uasid;
    int joined;
    int dir_fd;
    struct sub_dir *dir;
    int slot;
    uint32_t slot_gen;
    uint32_t uasid;
    int region_fd;
    uint8_t *region;
    uint64_t region_size;
    struct sub_region_free *free_list;
    uint64_t bump;
    uint32_t *seg_free; /* stack of free segment indexes */
    uint32_t nseg_free;
    struct sub_peer *_Atomic peers[SUB_MAX_PROCS];
    /* Peers found dead so far: the progress thread looks at its event
     * queues after each (softub__jfce_holes_check). */
    _Atomic uint32_t peers_died;
    struct sub_peer *self;
    struct sub_obj *_Atomic *objs; /* SUB_MAX_QIDS entries, by queue id */
    int nctx;
    struct sub_ctx *ctxs; /* async events signalled through the doorbell */
    struct sub_jfce *jfces;
    struct sub_prog prog;
    _Atomic uint64_t uid_next;
    _Atomic uint64_t wr_counter; /* SOFTUB_ERR_EVERY */
    struct sub_grave *graves;
    urma_eid_t eid;
};
extern struct sub_global softub__g;

/* ------------------------------------------------------------------------ */
/* Functions                                                                 */
/* ------------------------------------------------------------------------ */

/* softub_device.c: logging, time, process helpers, the device */
void softub__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define SUB_ERR(...)  softub__log(URMA_VLOG_LEVEL_ERR, __VA_ARGS__)
#define SUB_WARN(...) softub__log(URMA_VLOG_LEVEL_WARNING, __VA_ARGS__)
#define SUB_INFO(...) softub__log(URMA_VLOG_LEVEL_INFO, __VA_ARGS__)
#define SUB_DBG(...)  softub__log(URMA_VLOG_LEVEL_DEBUG, __VA_ARGS__)
uint64_t softub__now_ns(void);
uint64_t softub__pid_start_time(pid_t pid);
int softub__pid_alive(pid_t pid, uint64_t start_time);
/* 1 when the process is stopped (SIGSTOP, or by a tracer): it runs no
 * instruction until something continues it. */
int softub__pid_stopped(pid_t pid);
urma_device_t *softub__device(void);
const urma_device_attr_t *softub__device_attr(void);
struct sub_ctx *softub__ctx_check(urma_context_t *ctx);
uint64_t softub__uid(void);
/* Frees p no earlier than SUB_FREE_GRACE_NS from now (objects a racing
 * poller or waiter may still look at). */
void softub__grave(void *p);
/* The same for an object that WRs waiting in a send queue (RNR retries) may
 * still name: freed only once *pins is 0 as well (never by a reap of all,
 * which leaks it rather than free what a WR still reads). */
void softub__grave_pinned(void *p, _Atomic uint32_t *pins);
void softub__grave_reap(int all);

/* softub_fabric.c */
int softub__join(void); /* 0 or -errno; idempotent; under softub__g.lock */
void softub__leave(void);
void softub__fork_child(void);
uint64_t softub__ralloc(uint64_t size, uint64_t align); /* 0 = out of space */
void softub__rfree(uint64_t off, uint64_t size);
static inline void *softub__rptr(uint64_t off)
{
    return softub__g.region + off;
}
int softub__id_alloc(int tokens, uint32_t want, uint16_t type, uint64_t off, uint32_t *id,
                     uint32_t *obj_gen);
void softub__id_free(int tokens, uint32_t id);
int softub__id_lookup(int tokens, uint32_t id, struct sub_dir_id *out);
int softub__seg_idx_alloc(uint32_t *idx);
void softub__seg_idx_free(uint32_t idx);
struct sub_sseg *softub__seg_entry(struct sub_peer *p, uint32_t idx);
/* Copies the fields of segment entry ss into out when it holds registration
 * gen from before the copy to after it; 0 otherwise. Its owner rewrites a
 * freed entry in place for the next registration, so checks and accesses use
 * the copy, never a mixture of two registrations. */
int softub__seg_snap(const struct sub_sseg *ss, uint32_t gen, struct sub_sseg *out);
/* Revokes remote access through token id `token_id` to every segment p has
 * registered with it (a SEND_INVALIDATE delivered to p). */
void softub__seg_revoke(struct sub_peer *p, uint32_t token_id);
struct sub_peer *softub__peer_get(int slot, uint32_t slot_gen); /* control plane */
void *softub__peer_ptr(struct sub_peer *p, uint64_t off, uint64_t size);
uint8_t *softub__peer_map(struct sub_peer *p, const struct sub_sseg *ss, uint64_t need_end);
/* Existing mappings only: never a system call. */
uint8_t *softub__peer_map_find(struct sub_peer *p, uint64_t dev, uint64_t ino, uint64_t need_end);
int softub__peer_enter(struct sub_peer *p); /* 0, or -1 when dead */
void softub__peer_leave(struct sub_peer *p);
void softub__peer_mark_dead(struct sub_peer *p);
int softub__peer_signal(struct sub_peer *p, uint64_t obj_off, uint32_t obj_gen, int remote_fd,
                        _Atomic uint32_t *pending);
void softub__peers_check(uint64_t now);
/* Exported for softub_info (see softub.map): dumps the SOFTUB_FABRIC directory. */
int softub_fabric_dump(FILE *out);
void softub__peers_release_dead(void);
int softub__doorbell_wait(uint32_t seen, uint64_t timeout_ns);
void softub__doorbell_ring(struct sub_peer *p);

/* softub_jfc.c */
struct sub_jfc *softub__jfc_check(urma_jfc_t *jfc);
/* Pushes one CR into a (possibly remote) JFC and raises its event when
 * armed. solicited: the CR may wake a solicited-only JFC. inl: e->len
 * (<= SUB_CQE_INL_MAX) payload bytes for lines 1.. when e->flag has
 * SUB_CQE_F_INLINE, else NULL. 0 or -1 overflow. */
int softub__cq_push(struct sub_peer *p, struct sub_sjfc *sjfc, const struct sub_cqe *e,
                    const void *inl);
/* softub__cq_push in two steps, for a producer with work between its claim
 * and its CR: claims a slot and records this process and `note` in its
 * claim record (0 or -1, as the push); publish writes the CR (the same
 * arguments as the push) and must follow promptly. note: for a receive CR,
 * JFR id << 32 | the receive WR's ring position (softub__rq_cr_lost). */
struct sub_cq_claim {
    struct sub_peer *p;
    struct sub_sjfc *sj;
    struct sub_ring *r;
    uint64_t pos;
    struct sub_cqe *slot;
};
int softub__cq_claim(struct sub_peer *p, struct sub_sjfc *sjfc, uint64_t note,
                     struct sub_cq_claim *c);
void softub__cq_publish(struct sub_cq_claim *c, const struct sub_cqe *e, const void *inl);

/* softub_async.c */
int softub__async_raise(struct sub_peer *p, uint64_t sctx_off, uint32_t type, uint32_t obj_id,
                        uint64_t obj_uid, uint64_t user_ptr);
int softub__async_busy(struct sub_obj *o);
void softub__obj_register(struct sub_obj *o, uint32_t kind, uint32_t id, uint64_t user_ptr);
void softub__obj_unregister(struct sub_obj *o);
struct sub_obj *softub__obj_find(uint32_t id, uint64_t uid);

/* softub_seg.c */
struct sub_tseg *softub__tseg_check(urma_target_seg_t *t);
int softub__local_range(struct sub_tseg *ts, uint64_t addr, uint64_t len);
void softub__seg_forget(void); /* fork child */

/* softub_queue.c */
struct sub_tjetty *softub__tjetty_check(urma_target_jetty_t *t);
struct sub_jfs *softub__jfs_check(urma_jfs_t *jfs);
struct sub_jfr *softub__jfr_check(urma_jfr_t *jfr);
struct sub_jetty *softub__jetty_check(urma_jetty_t *jetty);

/* softub_post.c */
int softub__sq_init(struct sub_sq *sq, struct sub_ctx *ctx, struct sub_jfc *jfc, struct sub_obj *obj,
                    uint32_t id, int is_jetty, uint64_t user_ptr, const urma_jfs_cfg_t *cfg);
void softub__sq_fini(struct sub_sq *sq);
urma_status_t softub__sq_post(struct sub_sq *sq, urma_jfs_wr_t *wr, urma_jfs_wr_t **bad_wr);
urma_status_t softub__sq_modify(struct sub_sq *sq, urma_jetty_state_t state);
int softub__sq_flush(struct sub_sq *sq, int cr_cnt, urma_cr_t *cr);
void softub__sq_retire(uint32_t id, uint32_t uid32, uint32_t wr_seq32);
/* Runs due pending WRs from an application thread (urma_poll_jfc found
 * nothing): retries must not depend on the progress thread getting a CPU. */
void softub__prog_assist(void);
urma_status_t softub__rq_post(struct sub_jfr *jfr, urma_jfr_wr_t *wr, urma_jfr_wr_t **bad_wr);
void softub__rq_flush(struct sub_jfr *jfr);
/* RESET: drops the posted WRs without CRs. Under jfr->lock. */
void softub__rq_discard(struct sub_jfr *jfr);
/* Poll side of a receive CR, before its slot is released: frees the WR's
 * shadow entry and, for an inline CR, scatters the payload (inl, lines 1.. of
 * the slot) into the WR's buffer. A CR that names no posted WR, or whose
 * payload does not fit, copies nothing and reports an error status. */
void softub__rq_polled(struct sub_cqe *c, const uint8_t *inl);
/* A receive CR claimed by sender `pid` in a JFC of this process and never
 * written (the sender died): the receive WR its note names, which the
 * sender marked as completed through that CR, is marked as merely taken,
 * so that the owner's post reaching its slot serves it again. */
void softub__rq_cr_lost(uint64_t note, uint32_t pid);
/* JFCE event slots claimed by producers that died before writing them are
 * written for them (softub_jfc.c): by the progress thread, once a second
 * while peers or such slots are there, for a consumer that waits for
 * exactly that event; an event written and left uncounted on the eventfd
 * (its producer died in between) is counted. 1 while a slot is left
 * claimed (its claimant lives, or its queue was busy). */
int softub__jfce_holes_check(void);
/* True when the process `pid` (a peer's, recorded in shared memory) is gone:
 * a peer of the fabric by its recorded start time, else by its pid alone. */
int softub__pid_gone(uint32_t pid);
static inline struct sub_rshadow *softub__rq_shadow(struct sub_jfr *jfr, uint64_t pos)
{
    return (struct sub_rshadow *)(jfr->shadow + (pos & jfr->ring->mask) * (uint64_t)jfr->sh_stride);
}
int softub__prog_start(void);
void softub__prog_stop(void);
void softub__prog_forget(void); /* fork child */

#endif
