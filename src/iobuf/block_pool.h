/* Block pool: the memory behind every jet_iobuf block.
 *
 * Memory comes in regions, each a memfd mapped shared (so that a peer process
 * can map it, and so that a memory registrar can register it whole), carved
 * into blocks of one size class: 8 KiB (default), 64 KiB, 2 MiB. A block's
 * descriptor (struct jet_block) lives outside the block, in the region's
 * descriptor array, so the whole block is payload and its address is
 * class-aligned within the region.
 *
 * Registration: a registrar (the URMA global context, later others) installs
 * callbacks once; every existing region is registered at install time and
 * every new region before any block of it is handed out. A region whose
 * registration fails is not used. Only one registrar may be installed per
 * process (-EBUSY for a second).
 *
 * Lookup: jet__block_pool_find(addr) returns the region holding addr in
 * O(log regions) (binary search over a sorted table read without locks).
 *
 * Giving back: a region none of whose blocks is in use or in a thread's
 * cache, and at least iobuf_region_min_age_ms old, is given back
 * (deregistered, unmapped, its bytes off the cap) when another class needs
 * a region and has no room left for even one block: the cap (iobuf_max_mb)
 * is reached or the region table is full. Only as many as make room for
 * one block of that class, and none when they would not. So memory freed in
 * one size class serves the others once the cap is reached, instead of
 * idling in its class for good; the minimum age keeps two classes from
 * taking a region from each other on every allocation.
 * Below the cap a region freed stays mapped for later use, as in brpc's
 * block pool. The region of a block a caller holds is never given back, so
 * the region jet__block_pool_find returns for a held block's address stays
 * valid while the block is held.
 *
 * Threads: alloc/free are thread-safe; the 8 KiB class has a per-thread cache
 * so the common path takes no lock. */
#ifndef JET_IOBUF_BLOCK_POOL_H
#define JET_IOBUF_BLOCK_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jetrpc/iobuf.h"

enum {
    JET_BLOCK_CLASS_8K = 0,
    JET_BLOCK_CLASS_64K = 1,
    JET_BLOCK_CLASS_2M = 2,
    JET_BLOCK_NCLASS = 3,
    JET_BLOCK_CLASS_USER = 0xff, /* user memory wrapped by jet_iobuf_append_user */
};

#define JET_BLOCK_SIZE_8K  (8u * 1024)
#define JET_BLOCK_SIZE_64K (64u * 1024)
#define JET_BLOCK_SIZE_2M  (2u * 1024 * 1024)

struct jet_region;

typedef struct jet_block {
    _Atomic uint32_t refcnt;
    _Atomic uint32_t used; /* bytes written from data[0]; appenders claim space by CAS */
    uint32_t cap;
    uint8_t cls;
    /* A thread's shared block (jet__block_share): only that thread moves
     * `used` on, and buffers do not claim its tail (iobuf.c). */
    _Atomic uint8_t owned;
    uint8_t pad_[2];
    char *data;
    struct jet_region *region; /* NULL for user blocks */
    jet_iobuf_free_cb_t free_cb; /* user blocks */
    void *free_arg;
    /* The class's free list, doubly linked so that a region given back
     * unlinks its blocks in O(its blocks). A user block's next_free names
     * the block that owns its callback (iobuf.c). */
    struct jet_block *next_free, *prev_free;
} jet_block_t;

typedef struct jet_region {
    char *base;
    size_t len;
    int memfd;
    uint8_t cls;
    uint32_t block_size;
    uint32_t nblock;
    jet_block_t *descs; /* nblock descriptors */
    void *reg;          /* what the registrar returned for this region */
    /* Blocks of the region on its class's free list (under the class's
     * lock): at nblock the region is wholly free and may be given back. */
    uint32_t nfree;
    int64_t created_us;
    /* [lo, hi) = [base, base + len), read by the lock-free lookup: the
     * struct of a region given back is kept and reused for a later one, so
     * a lookup may read these while they change (and then retries). */
    _Atomic uintptr_t lo, hi;
    struct jet_region *next_spare;
} jet_region_t;

typedef struct jet_registrar {
    const char *name;
    /* Registers [base, base+len) backed by memfd; *reg_p receives the
     * registrar's handle. 0 or a negative code (the region is then unused). */
    int (*reg)(void *ctx, void *base, size_t len, int memfd, void **reg_p);
    void (*dereg)(void *ctx, void *reg);
    void *ctx;
} jet_registrar_t;

/* A new block of at least size bytes (size <= 2 MiB) with refcnt 1 and
 * used 0; NULL when size is 0 or too large (errno EINVAL) or memory is out
 * (errno ENOMEM). */
jet_block_t *jet__block_alloc(size_t size);
/* A block of the default class (8 KiB). */
jet_block_t *jet__block_alloc_default(void);
/* len bytes (1 to 8 KiB) for the caller in the calling thread's shared
 * block: the block with one reference for the caller, the bytes at *off_p
 * (used is past them). The thread's next small pieces go to the same block
 * until it is full, and a fresh one then takes its place: a message of a
 * few dozen bytes does not hold a block of its own (as brpc's IOBuf shares
 * a thread-local block). While it is the thread's, the block is `owned`:
 * no buffer claims its tail, so that the thread hands out its bytes, and
 * the references it took for them in advance, with no atomic operation.
 * NULL when memory is out. */
jet_block_t *jet__block_share(uint32_t len, uint32_t *off_p);
/* Gives back a reference jet__block_share returned that the caller needs no
 * more (it extended a reference it holds over the piece): to the thread's
 * store, with no atomic operation, while b is still the thread's shared
 * block. */
void jet__block_share_giveback(jet_block_t *b);
static inline void jet__block_ref(jet_block_t *b)
{
    atomic_fetch_add_explicit(&b->refcnt, 1, memory_order_relaxed);
}
/* Drops a reference; the last one returns the block to its pool (or runs the
 * user free callback). */
void jet__block_unref(jet_block_t *b);
/* Wraps user memory (refcnt 1, used == cap == len). NULL on -ENOMEM. */
jet_block_t *jet__block_wrap_user(void *data, size_t len, jet_iobuf_free_cb_t cb, void *arg);

/* Installs the registrar (see above). 0, -EBUSY if one is installed, or the
 * first registration failure (then nothing stays installed). */
int jet__block_pool_set_registrar(const jet_registrar_t *r);
/* Removes the registrar, deregistering every region. */
void jet__block_pool_clear_registrar(void);
/* The region that holds addr, or NULL (user memory, stack, heap). */
const jet_region_t *jet__block_pool_find(const void *addr);
/* jet_iobuf_read_fd that also says how many bytes the read offered the fd
 * (*offered_p): fewer than max when the pool had too few blocks, so that a
 * read of all of them does not look like a drained fd. */
ssize_t jet__iobuf_read_fd(jet_iobuf_t *buf, int fd, size_t max, size_t *offered_p);

/* Statistics for tests and /status. blocks_in_use does not count a thread's
 * shared block (jet__block_share) that no buffer references. */
typedef struct jet_block_pool_stats {
    size_t regions;
    size_t bytes_mapped;
    size_t regions_given_back; /* since the process started */
    size_t bytes_mapped_class[JET_BLOCK_NCLASS];
    size_t blocks_in_use[JET_BLOCK_NCLASS];
} jet_block_pool_stats_t;
void jet__block_pool_stats(jet_block_pool_stats_t *out);

#endif
