/* Block pool: memfd-backed regions carved into fixed-size blocks.
 *
 * Locks, in the only order they are ever nested:
 *   bp_grow_lock  (creating and giving back regions, region table writes,
 *                  registrar)
 *   bp_class[c].lock  (free list of one class; giving back holds those of
 *                      several classes, taken in ascending class order)
 *   bp_tc_lock  (list of thread caches, for statistics)
 * A registrar callback runs under bp_grow_lock: it must not allocate blocks
 * from this pool (the allocation could need to grow and would deadlock). */
#include "iobuf/block_pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/pool.h"
#include "base/time.h"
#include "jetrpc/flags.h"

#define BP_REGION_MAX_MB 4096 /* the iobuf_region_mb_* flags: [1, this] */

JET_FLAG_DEFINE_INT32_RANGE(iobuf_region_mb_8k, 32, 1, BP_REGION_MAX_MB,
                            "Size in MiB of each memory region of 8 KiB iobuf blocks");
JET_FLAG_DEFINE_INT32_RANGE(iobuf_region_mb_64k, 64, 1, BP_REGION_MAX_MB,
                            "Size in MiB of each memory region of 64 KiB iobuf blocks");
JET_FLAG_DEFINE_INT32_RANGE(iobuf_region_mb_2m, 128, 1, BP_REGION_MAX_MB,
                            "Size in MiB of each memory region of 2 MiB iobuf blocks");
JET_FLAG_DEFINE_INT32_RANGE(
    iobuf_region_min_age_ms, 50, 0, 3600000,
    "At the iobuf memory cap, a wholly free region of one block size may be given "
    "back to make room for another size once it is this old (milliseconds)");
#define BP_DEFAULT_MAX_MB 4096
JET_FLAG_DEFINE_INT32_RANGE(
    iobuf_max_mb, BP_DEFAULT_MAX_MB, 0, INT32_MAX,
    "Cap in MiB on the memory mapped for iobuf blocks; allocations fail past "
    "it (0: no cap). At the cap, wholly free regions of other block sizes are "
    "given back for the size that needs room");

#define BP_MAX_REGIONS 1024
#define BP_TCACHE_MAX  64 /* 8 KiB blocks kept per thread */
#define BP_TCACHE_MOVE (BP_TCACHE_MAX / 2)
#define BP_MiB         ((size_t)1 << 20)

static const uint32_t bp_class_size[JET_BLOCK_NCLASS] = {JET_BLOCK_SIZE_8K, JET_BLOCK_SIZE_64K,
                                                         JET_BLOCK_SIZE_2M};
static const char *const bp_class_name[JET_BLOCK_NCLASS] = {"jetrpc-iobuf-8k", "jetrpc-iobuf-64k",
                                                            "jetrpc-iobuf-2m"};

typedef struct bp_class {
    pthread_mutex_t lock;
    jet_block_t *free;
    size_t nfree;  /* blocks on the free list */
    size_t ntotal; /* blocks carved from every region of the class */
} bp_class_t;

static bp_class_t bp_class[JET_BLOCK_NCLASS] = {
    {.lock = PTHREAD_MUTEX_INITIALIZER},
    {.lock = PTHREAD_MUTEX_INITIALIZER},
    {.lock = PTHREAD_MUTEX_INITIALIZER},
};

/* Everything below up to the thread cache is guarded by bp_grow_lock, except
 * the sorted table, which readers walk without it (see bp_table_insert). */
static pthread_mutex_t bp_grow_lock = PTHREAD_MUTEX_INITIALIZER;
static jet_region_t *bp_by_age[BP_MAX_REGIONS]; /* creation order */
static size_t bp_nregion;
static size_t bp_bytes_mapped;
static size_t bp_nreleased;    /* regions given back, for statistics */
static jet_region_t *bp_spare; /* structs of regions given back, for reuse */
static jet_registrar_t bp_registrar;
static bool bp_registrar_set;

static _Atomic uint32_t bp_seq; /* odd while the sorted table is being changed */
static _Atomic uint32_t bp_nsorted;
static jet_region_t *_Atomic bp_sorted[BP_MAX_REGIONS];

/* ---- region table ---------------------------------------------------- */

/* The sorted table is a seqlock-protected fixed array. A region struct is
 * never freed (one given back waits on bp_spare for reuse), and the search
 * reads only its atomic lo/hi, so any pointer a reader loads from the table,
 * even in the middle of a shift or of a reuse, is memory it may read; the
 * sequence tells it whether the search ran over a stable table, and it
 * retries otherwise. Compared with publishing a fresh sorted copy per change
 * this needs no allocation and leaks nothing, and changes (one per region
 * created or given back) are rare enough that readers practically never
 * retry. Entries are stored with release and loaded with acquire so a
 * reader sees a region's fields initialised whatever sequence value it
 * started from. */
static void bp_table_insert(jet_region_t *r)
{
    uint32_t n = atomic_load_explicit(&bp_nsorted, memory_order_relaxed);
    uint32_t pos = n;
    while (pos > 0 &&
           atomic_load_explicit(&bp_sorted[pos - 1], memory_order_relaxed)->base > r->base)
        pos--;
    uint32_t s = atomic_load_explicit(&bp_seq, memory_order_relaxed);
    atomic_store_explicit(&bp_seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (uint32_t i = n; i > pos; i--)
        atomic_store_explicit(&bp_sorted[i],
                              atomic_load_explicit(&bp_sorted[i - 1], memory_order_relaxed),
                              memory_order_release);
    atomic_store_explicit(&bp_sorted[pos], r, memory_order_release);
    atomic_store_explicit(&bp_nsorted, n + 1, memory_order_relaxed);
    atomic_store_explicit(&bp_seq, s + 2, memory_order_release);
}

/* Removes r, which is in the table. */
static void bp_table_remove(const jet_region_t *r)
{
    uint32_t n = atomic_load_explicit(&bp_nsorted, memory_order_relaxed);
    uint32_t pos = 0;
    while (pos < n && atomic_load_explicit(&bp_sorted[pos], memory_order_relaxed) != r)
        pos++;
    if (pos == n) return;
    uint32_t s = atomic_load_explicit(&bp_seq, memory_order_relaxed);
    atomic_store_explicit(&bp_seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    for (uint32_t i = pos; i + 1 < n; i++)
        atomic_store_explicit(&bp_sorted[i],
                              atomic_load_explicit(&bp_sorted[i + 1], memory_order_relaxed),
                              memory_order_release);
    atomic_store_explicit(&bp_sorted[n - 1], NULL, memory_order_release);
    atomic_store_explicit(&bp_nsorted, n - 1, memory_order_relaxed);
    atomic_store_explicit(&bp_seq, s + 2, memory_order_release);
}

static inline void bp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

const jet_region_t *jet__block_pool_find(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    for (;;) {
        uint32_t s1 = atomic_load_explicit(&bp_seq, memory_order_acquire);
        if (s1 & 1) {
            bp_cpu_relax();
            continue;
        }
        uint32_t lo = 0, hi = atomic_load_explicit(&bp_nsorted, memory_order_relaxed);
        if (hi > BP_MAX_REGIONS) hi = BP_MAX_REGIONS;
        const jet_region_t *found = NULL;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            const jet_region_t *r = atomic_load_explicit(&bp_sorted[mid], memory_order_acquire);
            if (!r) break; /* only mid-insert; the sequence check below retries */
            if (a < atomic_load_explicit(&r->lo, memory_order_relaxed)) {
                hi = mid;
            } else if (a >= atomic_load_explicit(&r->hi, memory_order_relaxed)) {
                lo = mid + 1;
            } else {
                found = r;
                break;
            }
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&bp_seq, memory_order_relaxed) == s1) return found;
    }
}

/* ---- regions ------------------------------------------------------------ */

static size_t bp_region_bytes(int cls)
{
    int32_t mb = cls == JET_BLOCK_CLASS_8K    ? JET_FLAG_IN_RANGE(iobuf_region_mb_8k)
                 : cls == JET_BLOCK_CLASS_64K ? JET_FLAG_IN_RANGE(iobuf_region_mb_64k)
                                              : JET_FLAG_IN_RANGE(iobuf_region_mb_2m);
    size_t bs = bp_class_size[cls];
    size_t len = (size_t)mb * BP_MiB;
    return len < bs ? bs : len / bs * bs;
}

/* Unmaps r and keeps its struct for reuse (see bp_table_insert). */
static void bp_region_unmap(jet_region_t *r)
{
    munmap(r->base, r->len);
    close(r->memfd);
    free(r->descs);
    r->descs = NULL;
    r->reg = NULL;
    r->next_spare = bp_spare;
    bp_spare = r;
}

static void bp_reclaim(int cls, size_t need, bool need_slot);

/* Bytes that may still be mapped under the cap. */
static size_t bp_room(void)
{
    int64_t max_mb = JET_FLAG(iobuf_max_mb);
    if (max_mb < 0) {
        /* Only 0 lifts the cap: a negative value (stored by code past the
         * flag's range, a size gone wrong) keeps the default one. */
        JET_LOG_ONCE(JET_LOG_WARN, "iobuf_max_mb=%lld is negative: the cap stays %d MiB",
                     (long long)max_mb, BP_DEFAULT_MAX_MB);
        max_mb = BP_DEFAULT_MAX_MB;
    }
    size_t cap = max_mb > 0 ? (size_t)max_mb * BP_MiB : SIZE_MAX;
    return cap > bp_bytes_mapped ? cap - bp_bytes_mapped : 0;
}

/* Creates, registers and publishes a region of class cls; bp_grow_lock held.
 * Its blocks are not yet on any free list. NULL with *err_p set on failure. */
static jet_region_t *bp_region_create(int cls, int *err_p)
{
    size_t bs = bp_class_size[cls];
    size_t len = bp_region_bytes(cls);
    size_t room = bp_room();
    if (room < bs || bp_nregion == BP_MAX_REGIONS) {
        /* No room for a block: idle regions of other classes make room,
         * rather than a failure. (Only then, and only for one block: taking
         * more memory another class mapped would have the classes take it
         * from each other.) */
        bp_reclaim(cls, room < bs ? bs - room : 0, bp_nregion == BP_MAX_REGIONS);
        room = bp_room();
    }
    if (room < bs) {
        JET_LOG_ONCE(JET_LOG_WARN, "iobuf memory cap reached (iobuf_max_mb=%d)",
                     JET_FLAG(iobuf_max_mb));
        *err_p = ENOMEM;
        return NULL;
    }
    /* Near the cap, a smaller region still serves allocations. */
    if (len > room) len = room / bs * bs;
    if (bp_nregion == BP_MAX_REGIONS) {
        JET_LOG_ONCE(JET_LOG_WARN, "iobuf region table full (%d regions)", BP_MAX_REGIONS);
        *err_p = ENOMEM;
        return NULL;
    }

    jet_region_t *r = bp_spare;
    if (r) {
        bp_spare = r->next_spare;
        r->next_spare = NULL;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) goto err_none;
    }
    r->nfree = 0;
    r->created_us = jet_now_us();
    r->nblock = (uint32_t)(len / bs);
    r->descs = calloc(r->nblock, sizeof *r->descs);
    if (!r->descs) goto err_free_region;
    r->memfd = memfd_create(bp_class_name[cls], MFD_CLOEXEC);
    if (r->memfd < 0) goto err_free_descs;
    if (ftruncate(r->memfd, (off_t)len) != 0) goto err_close_fd;
    r->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->memfd, 0);
    if (r->base == MAP_FAILED) goto err_close_fd;
    r->len = len;
    r->cls = (uint8_t)cls;
    r->block_size = (uint32_t)bs;
    atomic_store_explicit(&r->lo, (uintptr_t)r->base, memory_order_relaxed);
    atomic_store_explicit(&r->hi, (uintptr_t)r->base + len, memory_order_relaxed);
    for (uint32_t i = 0; i < r->nblock; i++) {
        jet_block_t *b = &r->descs[i];
        b->cap = (uint32_t)bs;
        b->cls = (uint8_t)cls;
        b->data = r->base + (size_t)i * bs;
        b->region = r;
    }
    /* Registered before publication, so no block of an unregistered region
     * is ever handed out while a registrar is installed. */
    if (bp_registrar_set) {
        int rc = bp_registrar.reg(bp_registrar.ctx, r->base, r->len, r->memfd, &r->reg);
        if (rc != 0) {
            JET_WARN("iobuf: registrar %s refused a %zu-byte region: %d",
                     bp_registrar.name ? bp_registrar.name : "?", r->len, rc);
            bp_region_unmap(r);
            *err_p = ENOMEM;
            return NULL;
        }
    }
    bp_by_age[bp_nregion++] = r;
    bp_bytes_mapped += len;
    bp_table_insert(r);
    return r;

err_close_fd:
    close(r->memfd);
err_free_descs:
    free(r->descs);
    r->descs = NULL;
err_free_region:
    r->next_spare = bp_spare;
    bp_spare = r;
err_none:
    JET_WARN("iobuf: cannot create a %zu-byte region: %s", len, strerror(errno));
    *err_p = ENOMEM;
    return NULL;
}

/* ---- free lists ------------------------------------------------------- */

static void bp_push_locked(bp_class_t *c, jet_block_t *b)
{
    b->prev_free = NULL;
    b->next_free = c->free;
    if (c->free) c->free->prev_free = b;
    c->free = b;
    c->nfree++;
    b->region->nfree++;
}

static void bp_unlink_locked(bp_class_t *c, jet_block_t *b)
{
    if (b->prev_free)
        b->prev_free->next_free = b->next_free;
    else
        c->free = b->next_free;
    if (b->next_free) b->next_free->prev_free = b->prev_free;
    b->next_free = b->prev_free = NULL;
    c->nfree--;
    b->region->nfree--;
}

static jet_block_t *bp_pop_locked(bp_class_t *c)
{
    jet_block_t *b = c->free;
    if (b) bp_unlink_locked(c, b);
    return b;
}

static void bp_tc_flush_own(void);

/* Gives back wholly free regions of classes other than cls (whose free
 * list was just seen empty), at least iobuf_region_min_age_ms old, until
 * need bytes and, if need_slot, a table slot are free; bp_grow_lock
 * held. None when they would not make that much. Newest regions go first:
 * the likeliest to be a burst's. */
static void bp_reclaim(int cls, size_t need, bool need_slot)
{
    /* The calling thread's cached 8 KiB blocks may be all that holds a
     * region; other threads' caches are theirs alone. */
    bp_tc_flush_own();
    for (int k = 0; k < JET_BLOCK_NCLASS; k++)
        if (k != cls) pthread_mutex_lock(&bp_class[k].lock);
    int64_t age_us = (int64_t)JET_FLAG_IN_RANGE(iobuf_region_min_age_ms) * 1000;
    int64_t now = jet_now_us();
    size_t got = 0;
    jet_region_t *dead = NULL;
    for (size_t i = bp_nregion; i-- > 0 && (got < need || (need_slot && !dead));) {
        jet_region_t *r = bp_by_age[i];
        if (r->cls == cls || r->nfree != r->nblock || now - r->created_us < age_us) continue;
        r->next_spare = dead;
        dead = r;
        got += r->len;
    }
    if (got < need) dead = NULL; /* not enough to serve the allocation: keep them all */
    for (jet_region_t *r = dead; r; r = r->next_spare) {
        bp_class_t *c = &bp_class[r->cls];
        for (uint32_t i = 0; i < r->nblock; i++)
            bp_unlink_locked(c, &r->descs[i]);
        c->ntotal -= r->nblock;
    }
    for (int k = JET_BLOCK_NCLASS; k-- > 0;)
        if (k != cls) pthread_mutex_unlock(&bp_class[k].lock);
    if (dead)
        JET_LOG_ONCE(JET_LOG_INFO,
                     "iobuf: memory cap or region table full: giving back wholly free "
                     "regions of other block sizes to make room");
    /* No block of a dead region is on a list or held: no reader but a
     * table search can reach them now. */
    while (dead) {
        jet_region_t *r = dead;
        dead = r->next_spare;
        bp_table_remove(r);
        size_t j = 0;
        for (size_t i = 0; i < bp_nregion; i++)
            if (bp_by_age[i] != r) bp_by_age[j++] = bp_by_age[i];
        bp_nregion = j;
        bp_bytes_mapped -= r->len;
        bp_nreleased++;
        if (bp_registrar_set) bp_registrar.dereg(bp_registrar.ctx, r->reg);
        bp_region_unmap(r);
    }
}

/* Called when the free list of cls was seen empty: returns one block, from the
 * list if another thread refilled it meanwhile, else from a new region whose
 * other blocks go to the list. */
static jet_block_t *bp_grow(int cls)
{
    bp_class_t *c = &bp_class[cls];
    pthread_mutex_lock(&bp_grow_lock);
    pthread_mutex_lock(&c->lock);
    jet_block_t *b = bp_pop_locked(c);
    pthread_mutex_unlock(&c->lock);
    if (b) goto out_unlock;
    int err = 0;
    jet_region_t *r = bp_region_create(cls, &err);
    if (!r) {
        errno = err;
        goto out_unlock;
    }
    b = &r->descs[0];
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = r->nblock; i-- > 1;)
        bp_push_locked(c, &r->descs[i]);
    c->ntotal += r->nblock;
    pthread_mutex_unlock(&c->lock);
out_unlock:
    pthread_mutex_unlock(&bp_grow_lock);
    return b;
}

static jet_block_t *bp_get_global(int cls)
{
    bp_class_t *c = &bp_class[cls];
    pthread_mutex_lock(&c->lock);
    jet_block_t *b = bp_pop_locked(c);
    pthread_mutex_unlock(&c->lock);
    return b ? b : bp_grow(cls);
}

static void bp_put_global(jet_block_t *b)
{
    bp_class_t *c = &bp_class[b->cls];
    pthread_mutex_lock(&c->lock);
    bp_push_locked(c, b);
    pthread_mutex_unlock(&c->lock);
}

/* ---- thread cache of 8 KiB blocks ---------------------------------- */

/* n is written only by the owning thread; statistics read it from others.
 * A thread whose cache could not be set up (no pthread key) or that is past
 * its exit flush uses the global list directly. */
typedef struct bp_tcache {
    jet_block_t *blk[BP_TCACHE_MAX];
    _Atomic uint32_t n;
    bool linked;
    bool off;
    /* The thread's shared block (jet__block_share), and the references to
     * it the thread holds: one of its own, which keeps the block while it
     * is shared, and one per byte it could still hand out (taken when the
     * block became shared); both read by statistics from other threads. */
    jet_block_t *_Atomic shared;
    _Atomic uint32_t shared_refs;
    struct bp_tcache *prev, *next;
} bp_tcache_t;

static __thread bp_tcache_t bp_tc;
static pthread_mutex_t bp_tc_lock = PTHREAD_MUTEX_INITIALIZER;
static bp_tcache_t bp_tc_list = {.prev = &bp_tc_list, .next = &bp_tc_list};
static pthread_once_t bp_tc_once = PTHREAD_ONCE_INIT;
static pthread_key_t bp_tc_key;
static bool bp_tc_key_ok;

static void bp_tc_flush(bp_tcache_t *tc, uint32_t keep)
{
    bp_class_t *c = &bp_class[JET_BLOCK_CLASS_8K];
    uint32_t n = atomic_load_explicit(&tc->n, memory_order_relaxed);
    if (n <= keep) return;
    pthread_mutex_lock(&c->lock);
    for (uint32_t i = keep; i < n; i++)
        bp_push_locked(c, tc->blk[i]);
    atomic_store_explicit(&tc->n, keep, memory_order_relaxed);
    pthread_mutex_unlock(&c->lock);
}

static void bp_tc_flush_own(void)
{
    bp_tcache_t *tc = &bp_tc;
    if (tc->linked) bp_tc_flush(tc, 0);
}

static void bp_share_end(bp_tcache_t *tc);

/* Runs at thread exit (pthread key destructor). The cache is switched off
 * for good: blocks freed by later destructors of this thread go straight to
 * the global list, and the list of caches never points into exited TLS. */
static void bp_tc_exit(void *arg)
{
    bp_tcache_t *tc = arg;
    tc->off = true;
    bp_share_end(tc);
    bp_tc_flush(tc, 0);
    pthread_mutex_lock(&bp_tc_lock);
    tc->prev->next = tc->next;
    tc->next->prev = tc->prev;
    tc->linked = false;
    pthread_mutex_unlock(&bp_tc_lock);
}

static void bp_tc_key_create(void)
{
    bp_tc_key_ok = pthread_key_create(&bp_tc_key, bp_tc_exit) == 0;
}

static bool bp_tc_ready(bp_tcache_t *tc)
{
    if (tc->linked) return true;
    if (tc->off) return false;
    pthread_once(&bp_tc_once, bp_tc_key_create);
    if (!bp_tc_key_ok || pthread_setspecific(bp_tc_key, tc) != 0) {
        tc->off = true;
        return false;
    }
    pthread_mutex_lock(&bp_tc_lock);
    tc->next = &bp_tc_list;
    tc->prev = bp_tc_list.prev;
    tc->prev->next = tc;
    bp_tc_list.prev = tc;
    tc->linked = true;
    pthread_mutex_unlock(&bp_tc_lock);
    return true;
}

static jet_block_t *bp_tc_get(void)
{
    bp_tcache_t *tc = &bp_tc;
    uint32_t n = atomic_load_explicit(&tc->n, memory_order_relaxed);
    if (n > 0) {
        atomic_store_explicit(&tc->n, n - 1, memory_order_relaxed);
        return tc->blk[n - 1];
    }
    if (!bp_tc_ready(tc)) return bp_get_global(JET_BLOCK_CLASS_8K);
    bp_class_t *c = &bp_class[JET_BLOCK_CLASS_8K];
    pthread_mutex_lock(&c->lock);
    jet_block_t *b = bp_pop_locked(c);
    if (b) {
        for (n = 0; n < BP_TCACHE_MOVE && c->free; n++)
            tc->blk[n] = bp_pop_locked(c);
        atomic_store_explicit(&tc->n, n, memory_order_relaxed);
    }
    pthread_mutex_unlock(&c->lock);
    return b ? b : bp_grow(JET_BLOCK_CLASS_8K);
}

static void bp_tc_put(jet_block_t *b)
{
    bp_tcache_t *tc = &bp_tc;
    if (!bp_tc_ready(tc)) {
        bp_put_global(b);
        return;
    }
    uint32_t n = atomic_load_explicit(&tc->n, memory_order_relaxed);
    if (n == BP_TCACHE_MAX) {
        bp_tc_flush(tc, BP_TCACHE_MAX - BP_TCACHE_MOVE);
        n -= BP_TCACHE_MOVE;
    }
    tc->blk[n] = b;
    atomic_store_explicit(&tc->n, n + 1, memory_order_relaxed);
}

/* ---- blocks --------------------------------------------------------- */

jet_block_t *jet__block_alloc(size_t size)
{
    int cls;
    if (size == 0 || size > JET_BLOCK_SIZE_2M) {
        errno = EINVAL;
        return NULL;
    }
    if (size <= JET_BLOCK_SIZE_8K)
        cls = JET_BLOCK_CLASS_8K;
    else if (size <= JET_BLOCK_SIZE_64K)
        cls = JET_BLOCK_CLASS_64K;
    else
        cls = JET_BLOCK_CLASS_2M;
    jet_block_t *b = cls == JET_BLOCK_CLASS_8K ? bp_tc_get() : bp_get_global(cls);
    if (!b) return NULL;
    atomic_store_explicit(&b->refcnt, 1, memory_order_relaxed);
    atomic_store_explicit(&b->used, 0, memory_order_relaxed);
    atomic_store_explicit(&b->owned, 0, memory_order_relaxed);
    b->next_free = NULL;
    return b;
}

jet_block_t *jet__block_alloc_default(void)
{
    return jet__block_alloc(JET_BLOCK_SIZE_8K);
}

/* Descriptors of user blocks (pool blocks' descriptors live in their region). */
static jet_pool_t bp_user_pool = JET_POOL_INIT("iobuf_user_block", sizeof(jet_block_t));
static jet_block_t *bp_user_desc_get(void)
{
    return jet__pool_get(&bp_user_pool);
}
static void bp_user_desc_put(jet_block_t *b)
{
    jet__pool_put(&bp_user_pool, b);
}

jet_block_t *jet__block_wrap_user(void *data, size_t len, jet_iobuf_free_cb_t cb, void *arg)
{
    if (len > UINT32_MAX) {
        errno = EINVAL;
        return NULL;
    }
    jet_block_t *b = bp_user_desc_get();
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    memset(b, 0, sizeof *b);
    atomic_init(&b->refcnt, 1);
    atomic_init(&b->used, (uint32_t)len);
    b->cap = (uint32_t)len;
    b->cls = JET_BLOCK_CLASS_USER;
    b->data = data;
    b->free_cb = cb;
    b->free_arg = arg;
    return b;
}

static void bp_unref_n(jet_block_t *b, uint32_t n)
{
    if (atomic_fetch_sub_explicit(&b->refcnt, n, memory_order_release) != n) return;
    /* Every other holder's accesses to the block happen before its reuse:
     * the load reads our decrement, the end of each holder's release
     * sequence. A load rather than a fence, which ThreadSanitizer cannot see. */
    (void)atomic_load_explicit(&b->refcnt, memory_order_acquire);
    if (b->cls == JET_BLOCK_CLASS_USER) {
        /* A live user block's next_free names the block that owns the
         * callback of a larger user buffer split into several blocks (see
         * jet_iobuf_append_user); the owner is dropped after this part. */
        jet_iobuf_free_cb_t cb = b->free_cb;
        void *data = b->data, *arg = b->free_arg;
        jet_block_t *owner = b->next_free;
        bp_user_desc_put(b);
        if (cb) cb(data, arg);
        if (owner) jet__block_unref(owner);
        return;
    }
    if (b->cls == JET_BLOCK_CLASS_8K)
        bp_tc_put(b);
    else
        bp_put_global(b);
}

void jet__block_unref(jet_block_t *b)
{
    bp_unref_n(b, 1);
}

/* ---- registrar ------------------------------------------------------ */

/* Existing regions get their `reg` written here, after they were published:
 * a registrar reads region->reg (through jet__block_pool_find) only once its
 * install returned, and stops before it clears itself. New regions carry
 * `reg` from before their publication. */
int jet__block_pool_set_registrar(const jet_registrar_t *r)
{
    if (!r || !r->reg || !r->dereg) return -EINVAL;
    int rc = 0;
    pthread_mutex_lock(&bp_grow_lock);
    if (bp_registrar_set) {
        rc = -EBUSY;
        goto out_unlock;
    }
    size_t i;
    for (i = 0; i < bp_nregion; i++) {
        jet_region_t *g = bp_by_age[i];
        rc = r->reg(r->ctx, g->base, g->len, g->memfd, &g->reg);
        if (rc != 0) break;
    }
    if (rc != 0) {
        JET_WARN("iobuf: registrar %s refused an existing %zu-byte region: %d",
                 r->name ? r->name : "?", bp_by_age[i]->len, rc);
        if (rc > 0) rc = -EIO;
        bp_by_age[i]->reg = NULL;
        while (i-- > 0) {
            r->dereg(r->ctx, bp_by_age[i]->reg);
            bp_by_age[i]->reg = NULL;
        }
        goto out_unlock;
    }
    bp_registrar = *r;
    bp_registrar_set = true;
out_unlock:
    pthread_mutex_unlock(&bp_grow_lock);
    return rc;
}

void jet__block_pool_clear_registrar(void)
{
    pthread_mutex_lock(&bp_grow_lock);
    if (bp_registrar_set) {
        /* Every region in the table is registered while a registrar is set:
         * install registers all or none, and a new region is published only
         * after its registration succeeded. */
        for (size_t i = 0; i < bp_nregion; i++) {
            bp_registrar.dereg(bp_registrar.ctx, bp_by_age[i]->reg);
            bp_by_age[i]->reg = NULL;
        }
        bp_registrar_set = false;
        memset(&bp_registrar, 0, sizeof bp_registrar);
    }
    pthread_mutex_unlock(&bp_grow_lock);
}

/* The thread gives up its shared block: buffers may claim its tail again
 * (they see the last `used` once they see it unowned), and the references
 * the thread did not hand out are dropped. */
static void bp_share_end(bp_tcache_t *tc)
{
    jet_block_t *b = atomic_load_explicit(&tc->shared, memory_order_relaxed);
    if (!b) return;
    uint32_t refs = atomic_load_explicit(&tc->shared_refs, memory_order_relaxed);
    atomic_store_explicit(&tc->shared, NULL, memory_order_relaxed);
    atomic_store_explicit(&tc->shared_refs, 0, memory_order_relaxed);
    atomic_store_explicit(&b->owned, 0, memory_order_release);
    bp_unref_n(b, refs);
}

jet_block_t *jet__block_share(uint32_t len, uint32_t *off_p)
{
    bp_tcache_t *tc = &bp_tc;
    jet_block_t *b = atomic_load_explicit(&tc->shared, memory_order_relaxed);
    if (b) {
        /* Owned: nobody else moves `used` on; every piece is at least a
         * byte, so the references taken in advance do not run out and the
         * thread's own one always stays. */
        uint32_t u = atomic_load_explicit(&b->used, memory_order_relaxed);
        if (b->cap - u >= len) {
            atomic_store_explicit(&b->used, u + len, memory_order_relaxed);
            atomic_store_explicit(&tc->shared_refs,
                                  atomic_load_explicit(&tc->shared_refs, memory_order_relaxed) - 1,
                                  memory_order_relaxed);
            *off_p = u;
            return b;
        }
    }
    jet_block_t *fresh = jet__block_alloc(JET_BLOCK_SIZE_8K);
    if (!fresh) return NULL;
    atomic_store_explicit(&fresh->used, len, memory_order_relaxed);
    *off_p = 0;
    /* A thread without a cache (exited, or no key) shares nothing: its
     * exit would not give the block back. */
    if (!bp_tc_ready(tc)) return fresh;
    bp_share_end(tc);
    /* The caller's reference, the thread's own, and one for each byte left
     * to hand out. */
    uint32_t refs = 1 + fresh->cap - len;
    atomic_store_explicit(&fresh->refcnt, 1 + refs, memory_order_relaxed);
    atomic_store_explicit(&fresh->owned, 1, memory_order_relaxed);
    atomic_store_explicit(&tc->shared_refs, refs, memory_order_relaxed);
    atomic_store_explicit(&tc->shared, fresh, memory_order_release);
    return fresh;
}

void jet__block_share_giveback(jet_block_t *b)
{
    bp_tcache_t *tc = &bp_tc;
    if (atomic_load_explicit(&tc->shared, memory_order_relaxed) == b)
        atomic_store_explicit(&tc->shared_refs,
                              atomic_load_explicit(&tc->shared_refs, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    else
        jet__block_unref(b);
}

/* ---- statistics ----------------------------------------------------- */

void jet__block_pool_stats(jet_block_pool_stats_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&bp_grow_lock);
    out->regions = bp_nregion;
    out->bytes_mapped = bp_bytes_mapped;
    out->regions_given_back = bp_nreleased;
    pthread_mutex_unlock(&bp_grow_lock);
    for (int cls = 0; cls < JET_BLOCK_NCLASS; cls++) {
        bp_class_t *c = &bp_class[cls];
        pthread_mutex_lock(&c->lock);
        size_t idle = c->nfree;
        size_t total = c->ntotal;
        if (cls == JET_BLOCK_CLASS_8K) {
            pthread_mutex_lock(&bp_tc_lock);
            for (bp_tcache_t *tc = bp_tc_list.next; tc != &bp_tc_list; tc = tc->next) {
                idle += atomic_load_explicit(&tc->n, memory_order_relaxed);
                /* A shared block that only its thread references (the
                 * references it holds to hand out) is idle; one a buffer
                 * still references is in use, so that a leaked small buffer
                 * shows. (Reading a descriptor the thread has just
                 * replaced is safe, if stale: its region cannot be given
                 * back meanwhile, since that needs the block on this
                 * class's free list and this lock, held for the whole
                 * walk.) */
                jet_block_t *s = atomic_load_explicit(&tc->shared, memory_order_acquire);
                idle += s && atomic_load_explicit(&s->refcnt, memory_order_relaxed) ==
                                 atomic_load_explicit(&tc->shared_refs, memory_order_relaxed);
            }
            pthread_mutex_unlock(&bp_tc_lock);
        }
        pthread_mutex_unlock(&c->lock);
        out->blocks_in_use[cls] = total > idle ? total - idle : 0;
        out->bytes_mapped_class[cls] = total * bp_class_size[cls];
    }
}
