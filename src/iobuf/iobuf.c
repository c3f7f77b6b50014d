/* jet_iobuf: references into refcounted blocks (see include/jetrpc/iobuf.h).
 *
 * The one rule that keeps shared blocks safe: a buffer writes into a pool
 * block only bytes it has claimed by moving the block's `used` forward with a
 * CAS, and it may try only when its own last reference ends exactly at `used`
 * (so it is the buffer that wrote the bytes just before). Claimed bytes that
 * end up unused are given back by a CAS in the other direction, which can only
 * succeed while nobody claimed after us; bytes that were ever referenced are
 * never given back (pop_back does not lower `used`: another buffer may share
 * them). A thread's shared block (jet__block_share) is the exception: while
 * it is the thread's, only that thread hands out its bytes, to small
 * appends of any buffer, and no buffer claims its tail. */
#include "jetrpc/iobuf.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "iobuf/block_pool.h"
#include "jetrpc/flags.h"

/* Appends of at least this much go to 64 KiB blocks: a large payload then
 * costs 8x fewer references, iovecs and URMA scatter entries, and nothing is
 * wasted because only whole 64 KiB pieces go there (the remainder goes to
 * 8 KiB blocks). The 2 MiB class is left to explicit users (receive buffers):
 * its regions hold few blocks, and a buffer's half-filled tail block would pin
 * up to 2 MiB. */
#define IOB_LARGE_CHUNK JET_BLOCK_SIZE_64K
/* An append's last piece up to iobuf_share_max bytes goes to the thread's
 * shared block (jet__block_share) instead of a block of its own: a 30-byte
 * answer queued for a peer that does not read held 8 KiB, 270 times what
 * socket_max_unwritten_bytes counted for it. */
JET_FLAG_DEFINE_INT32_RANGE(iobuf_share_max, JET_BLOCK_SIZE_8K / 2, 0, JET_BLOCK_SIZE_8K,
                            "The last piece of an append, up to this many bytes, goes to a block "
                            "the thread shares among its small appends instead of a block of its "
                            "own (0: every append takes blocks of its own)");
#define IOB_READ_BLOCKS 16 /* fresh 8 KiB blocks per read_fd: 128 KiB per readv */
#define IOB_KEEP_REFS   64 /* clear() keeps a grown reference array up to this size */
#define IOB_USER_CHUNK  ((size_t)1 << 31)
#define IOB_MAX_REFS    (UINT32_MAX / 2)

static inline jet_iobuf_ref_t *iob_ref(const jet_iobuf_t *buf, uint32_t i)
{
    return &buf->refs[buf->head + i];
}

static inline size_t iob_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

void jet_iobuf_init(jet_iobuf_t *buf)
{
    buf->refs = buf->inline_refs;
    buf->head = 0;
    buf->nref = 0;
    buf->cap = JET_IOBUF_INLINE_REFS;
    buf->pad_ = 0;
    buf->len = 0;
}

static void iob_unref_all(jet_iobuf_t *buf)
{
    for (uint32_t i = 0; i < buf->nref; i++)
        jet__block_unref(iob_ref(buf, i)->block);
    buf->head = 0;
    buf->nref = 0;
    buf->len = 0;
}

void jet_iobuf_fini(jet_iobuf_t *buf)
{
    iob_unref_all(buf);
    if (buf->refs != buf->inline_refs) free(buf->refs);
    jet_iobuf_init(buf);
}

void jet_iobuf_clear(jet_iobuf_t *buf)
{
    iob_unref_all(buf);
    /* A socket buffer reused per message keeps a modest array; one that
     * once held a huge message does not pin it forever. */
    if (buf->refs != buf->inline_refs && buf->cap > IOB_KEEP_REFS) {
        free(buf->refs);
        buf->refs = buf->inline_refs;
        buf->cap = JET_IOBUF_INLINE_REFS;
    }
}

/* Makes room for `extra` more references at the tail. Compacts (moves the live
 * references to index 0) only when at most half the array is live, so that a
 * queue-like use (append at the back, pop at the front) pays O(1) amortised,
 * else doubles. Content is unchanged either way. */
static int iob_reserve(jet_iobuf_t *buf, size_t extra)
{
    size_t nref = buf->nref;
    if (buf->head + nref + extra <= buf->cap) return 0;
    if (extra > IOB_MAX_REFS - nref) return -ENOMEM;
    size_t need = nref + extra;
    if (need <= buf->cap && (buf->refs == buf->inline_refs || 2 * nref <= buf->cap)) {
        memmove(buf->refs, buf->refs + buf->head, nref * sizeof *buf->refs);
        buf->head = 0;
        return 0;
    }
    size_t ncap = (size_t)buf->cap * 2;
    while (ncap < need)
        ncap *= 2;
    if (ncap > IOB_MAX_REFS) ncap = IOB_MAX_REFS;
    jet_iobuf_ref_t *p = malloc(ncap * sizeof *p);
    if (!p) return -ENOMEM;
    if (nref) memcpy(p, buf->refs + buf->head, nref * sizeof *p);
    if (buf->refs != buf->inline_refs) free(buf->refs);
    buf->refs = p;
    buf->cap = (uint32_t)ncap;
    buf->head = 0;
    return 0;
}

/* Adds a reference at the tail, taking over one block reference from the
 * caller; room must be reserved. A range continuing the tail reference in the
 * same block extends it instead. */
static void iob_push(jet_iobuf_t *buf, jet_block_t *b, uint32_t off, uint32_t len)
{
    if (buf->nref) {
        jet_iobuf_ref_t *t = iob_ref(buf, buf->nref - 1);
        if (t->block == b && t->off + t->len == off) {
            t->len += len;
            jet__block_unref(b); /* never the last: t holds one */
            return;
        }
    }
    jet_iobuf_ref_t *r = iob_ref(buf, buf->nref++);
    r->block = b;
    r->off = off;
    r->len = len;
}

/* Drops the references pushed after the first `nref` (failure rollback). */
static void iob_truncate_refs(jet_iobuf_t *buf, uint32_t nref)
{
    while (buf->nref > nref)
        jet__block_unref(iob_ref(buf, --buf->nref)->block);
}

/* Claims up to `want` bytes of free space in the tail block: *off_p gets the
 * offset of the claimed bytes. Returns the bytes claimed (0 when the tail is
 * not an appendable pool block or another buffer claimed first). */
static uint32_t iob_claim_tail(jet_iobuf_t *buf, size_t want, uint32_t *off_p)
{
    if (!buf->nref || want == 0) return 0;
    jet_iobuf_ref_t *t = iob_ref(buf, buf->nref - 1);
    jet_block_t *b = t->block;
    /* A thread's shared block hands out its bytes itself (acquire: once it
     * is given up, its last `used` is seen). */
    if (!b->region || atomic_load_explicit(&b->owned, memory_order_acquire)) return 0;
    uint32_t u = atomic_load_explicit(&b->used, memory_order_relaxed);
    if (u != t->off + t->len || u >= b->cap) return 0;
    uint32_t k = (uint32_t)iob_min(want, b->cap - u);
    if (!atomic_compare_exchange_strong_explicit(&b->used, &u, u + k, memory_order_relaxed,
                                                 memory_order_relaxed))
        return 0;
    *off_p = u;
    return k;
}

/* Gives back the claimed bytes [off+keep, off+claimed) of block b. */
static void iob_unclaim(jet_block_t *b, uint32_t off, uint32_t claimed, uint32_t keep)
{
    uint32_t expect = off + claimed;
    if (keep == claimed) return;
    /* Fails only if someone claimed after us; the bytes then stay unused. */
    atomic_compare_exchange_strong_explicit(&b->used, &expect, off + keep, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* Number of new blocks jet_iobuf_append uses for n bytes. */
static size_t iob_append_nblocks(size_t n)
{
    size_t large = n / IOB_LARGE_CHUNK;
    size_t rest = n % IOB_LARGE_CHUNK;
    return large + (rest + JET_BLOCK_SIZE_8K - 1) / JET_BLOCK_SIZE_8K;
}

int jet_iobuf_append(jet_iobuf_t *buf, const void *data, size_t len)
{
    if (len == 0) return 0;
    const char *src = data;
    uint32_t tail_off = 0;
    uint32_t tail_i = buf->nref - 1;
    uint32_t claimed = iob_claim_tail(buf, len, &tail_off);
    jet_block_t *tail = claimed ? iob_ref(buf, tail_i)->block : NULL;
    uint32_t nref0 = buf->nref;
    size_t done = claimed;
    if (done < len && iob_reserve(buf, iob_append_nblocks(len - done)) != 0) goto err_unclaim;
    while (done < len) {
        size_t left = len - done;
        if (left <= (size_t)JET_FLAG_IN_RANGE(iobuf_share_max)) {
            uint32_t off;
            jet_block_t *b = jet__block_share((uint32_t)left, &off);
            if (!b) goto err_drop_blocks;
            memcpy(b->data + off, src + done, left);
            jet_iobuf_ref_t *tr = buf->nref ? iob_ref(buf, buf->nref - 1) : NULL;
            if (tr && tr->block == b && tr->off + tr->len == off) {
                /* The piece follows the buffer's own end (its last append
                 * came from the same shared block): one reference grows. */
                tr->len += (uint32_t)left;
                jet__block_share_giveback(b);
            } else {
                iob_push(buf, b, off, (uint32_t)left);
            }
            done = len;
            break;
        }
        jet_block_t *b =
            jet__block_alloc(left >= IOB_LARGE_CHUNK ? IOB_LARGE_CHUNK : JET_BLOCK_SIZE_8K);
        if (!b) goto err_drop_blocks;
        uint32_t k = (uint32_t)iob_min(left, b->cap);
        memcpy(b->data, src + done, k);
        atomic_store_explicit(&b->used, k, memory_order_relaxed);
        jet_iobuf_ref_t *r = iob_ref(buf, buf->nref++);
        r->block = b;
        r->off = 0;
        r->len = k;
        done += k;
    }
    if (claimed) {
        memcpy(tail->data + tail_off, src, claimed);
        iob_ref(buf, tail_i)->len += claimed;
    }
    buf->len += len;
    return 0;

err_drop_blocks:
    iob_truncate_refs(buf, nref0);
err_unclaim:
    if (claimed) iob_unclaim(tail, tail_off, claimed, 0);
    return -ENOMEM;
}

int jet_iobuf_append_user(jet_iobuf_t *buf, void *data, size_t len, jet_iobuf_free_cb_t free_cb,
                          void *arg)
{
    if (len == 0) {
        if (free_cb) free_cb(data, arg);
        return 0;
    }
    /* A reference or a block spans at most 4 GiB: larger user memory becomes
     * several blocks, each holding a reference on the first (the one with the
     * callback, linked through next_free, see jet__block_unref), so that the
     * callback still runs once, after the last of them is dropped. */
    size_t nchunk = (len + IOB_USER_CHUNK - 1) / IOB_USER_CHUNK;
    if (iob_reserve(buf, nchunk) != 0) goto err_free;
    jet_block_t *owner = jet__block_wrap_user(data, iob_min(len, IOB_USER_CHUNK), free_cb, arg);
    if (!owner) goto err_free;
    uint32_t nref0 = buf->nref;
    iob_push(buf, owner, 0, owner->cap);
    for (size_t i = 1; i < nchunk; i++) {
        size_t off = i * IOB_USER_CHUNK;
        jet_block_t *b = jet__block_wrap_user((char *)data + off,
                                              iob_min(len - off, IOB_USER_CHUNK), NULL, NULL);
        if (!b) {
            /* Dropping the parts drops the owner last: the callback runs once. */
            iob_truncate_refs(buf, nref0);
            return -ENOMEM;
        }
        jet__block_ref(owner);
        b->next_free = owner;
        iob_push(buf, b, 0, b->cap);
    }
    buf->len += len;
    return 0;

err_free:
    if (free_cb) free_cb(data, arg);
    return -ENOMEM;
}

int jet_iobuf_append_iobuf(jet_iobuf_t *dst, const jet_iobuf_t *src)
{
    uint32_t n = src->nref;
    if (n == 0) return 0;
    size_t len = src->len;
    if (iob_reserve(dst, n) != 0) return -ENOMEM;
    /* dst == src: pushing may extend the last source reference in place
     * before it is read, so read it from a copy. */
    jet_iobuf_ref_t last = *iob_ref(src, n - 1);
    for (uint32_t i = 0; i < n; i++) {
        jet_iobuf_ref_t r = i + 1 == n ? last : *iob_ref(src, i);
        jet__block_ref(r.block);
        iob_push(dst, r.block, r.off, r.len);
    }
    dst->len += len;
    return 0;
}

int jet_iobuf_move(jet_iobuf_t *dst, jet_iobuf_t *src)
{
    if (dst == src || src->nref == 0) return 0;
    if (dst->nref == 0 && src->refs != src->inline_refs) {
        /* Take the whole heap array. */
        if (dst->refs != dst->inline_refs) free(dst->refs);
        dst->refs = src->refs;
        dst->head = src->head;
        dst->nref = src->nref;
        dst->cap = src->cap;
        dst->len = src->len;
        jet_iobuf_init(src);
        return 0;
    }
    if (iob_reserve(dst, src->nref) != 0) return -ENOMEM;
    for (uint32_t i = 0; i < src->nref; i++) {
        jet_iobuf_ref_t *r = iob_ref(src, i);
        iob_push(dst, r->block, r->off, r->len);
    }
    dst->len += src->len;
    src->head = 0;
    src->nref = 0;
    src->len = 0;
    return 0;
}

ssize_t jet_iobuf_cutn(jet_iobuf_t *src, jet_iobuf_t *dst, size_t n)
{
    if (n > src->len) n = src->len;
    if (n == 0) return 0;
    size_t need = 0, seen = 0;
    while (seen < n)
        seen += iob_ref(src, (uint32_t)need++)->len;
    if (iob_reserve(dst, need) != 0) return -ENOMEM;
    /* Works for src == dst too (a rotation): the front reference is read
     * before the push and the array cannot move once room is reserved. */
    size_t left = n;
    while (left) {
        jet_iobuf_ref_t *r = iob_ref(src, 0);
        if (r->len <= left) {
            jet_iobuf_ref_t whole = *r;
            src->head++;
            src->nref--;
            iob_push(dst, whole.block, whole.off, whole.len);
            left -= whole.len;
        } else {
            jet__block_ref(r->block);
            iob_push(dst, r->block, r->off, (uint32_t)left);
            r->off += (uint32_t)left;
            r->len -= (uint32_t)left;
            left = 0;
        }
    }
    if (src->nref == 0) src->head = 0;
    src->len -= n;
    dst->len += n;
    return (ssize_t)n;
}

size_t jet_iobuf_pop_front(jet_iobuf_t *buf, size_t n)
{
    if (n > buf->len) n = buf->len;
    size_t left = n;
    while (left) {
        jet_iobuf_ref_t *r = iob_ref(buf, 0);
        if (r->len <= left) {
            left -= r->len;
            jet__block_unref(r->block);
            buf->head++;
            buf->nref--;
        } else {
            r->off += (uint32_t)left;
            r->len -= (uint32_t)left;
            left = 0;
        }
    }
    if (buf->nref == 0) buf->head = 0;
    buf->len -= n;
    return n;
}

size_t jet_iobuf_pop_back(jet_iobuf_t *buf, size_t n)
{
    if (n > buf->len) n = buf->len;
    size_t left = n;
    while (left) {
        jet_iobuf_ref_t *r = iob_ref(buf, buf->nref - 1);
        if (r->len <= left) {
            left -= r->len;
            jet__block_unref(r->block);
            buf->nref--;
        } else {
            r->len -= (uint32_t)left;
            left = 0;
        }
    }
    if (buf->nref == 0) buf->head = 0;
    buf->len -= n;
    return n;
}

size_t jet_iobuf_copy_to(const jet_iobuf_t *buf, void *dst, size_t n, size_t offset)
{
    if (offset >= buf->len) return 0;
    if (n > buf->len - offset) n = buf->len - offset;
    char *out = dst;
    size_t done = 0;
    for (uint32_t i = 0; done < n; i++) {
        const jet_iobuf_ref_t *r = iob_ref(buf, i);
        if (offset >= r->len) {
            offset -= r->len;
            continue;
        }
        size_t k = iob_min(r->len - offset, n - done);
        memcpy(out + done, r->block->data + r->off + offset, k);
        done += k;
        offset = 0;
    }
    return n;
}

size_t jet_iobuf_cut_to(jet_iobuf_t *buf, void *dst, size_t n)
{
    size_t k = jet_iobuf_copy_to(buf, dst, n, 0);
    return jet_iobuf_pop_front(buf, k);
}

const void *jet_iobuf_fetch(const jet_iobuf_t *buf, void *tmp, size_t n)
{
    if (n > buf->len) return NULL;
    if (buf->nref) {
        const jet_iobuf_ref_t *r = iob_ref(buf, 0);
        if (r->len >= n) return r->block->data + r->off;
    }
    jet_iobuf_copy_to(buf, tmp, n, 0);
    return tmp;
}

int jet_iobuf_equals(const jet_iobuf_t *buf, const void *data, size_t len)
{
    if (buf->len != len) return buf->len < len ? -1 : 1;
    const char *p = data;
    for (uint32_t i = 0; i < buf->nref; i++) {
        const jet_iobuf_ref_t *r = iob_ref(buf, i);
        int c = memcmp(r->block->data + r->off, p, r->len);
        if (c) return c;
        p += r->len;
    }
    return 0;
}

const void *jet_iobuf_ref_data(const jet_iobuf_t *buf, uint32_t i, size_t *len_p)
{
    if (i >= buf->nref) {
        if (len_p) *len_p = 0;
        return NULL;
    }
    const jet_iobuf_ref_t *r = iob_ref(buf, i);
    if (len_p) *len_p = r->len;
    return r->block->data + r->off;
}

ssize_t jet_iobuf_read_fd(jet_iobuf_t *buf, int fd, size_t max)
{
    return jet__iobuf_read_fd(buf, fd, max, NULL);
}

ssize_t jet__iobuf_read_fd(jet_iobuf_t *buf, int fd, size_t max, size_t *offered_p)
{
    if (offered_p) *offered_p = 0;
    if (max == 0) return 0;
    struct iovec iov[1 + IOB_READ_BLOCKS];
    jet_block_t *fresh[IOB_READ_BLOCKS];
    int niov = 0;
    uint32_t tail_off = 0;
    uint32_t tail_i = buf->nref - 1;
    /* Claimed before the read: another buffer sharing the tail block must not
     * append into the bytes the kernel is writing. */
    uint32_t claimed = iob_claim_tail(buf, max, &tail_off);
    jet_block_t *tail = claimed ? iob_ref(buf, tail_i)->block : NULL;
    size_t want = max - claimed;
    /* (Rounded up without overflow: max may be SIZE_MAX, "no limit".) */
    size_t nfresh = iob_min(want / JET_BLOCK_SIZE_8K + (want % JET_BLOCK_SIZE_8K != 0),
                            IOB_READ_BLOCKS);
    /* Room for every reference is made before reading: bytes taken from the
     * fd must never be lost for lack of a slot. */
    if (iob_reserve(buf, nfresh) != 0) goto err_unclaim;
    if (claimed) iov[niov++] = (struct iovec){tail->data + tail_off, claimed};
    size_t got = 0;
    for (; got < nfresh; got++) {
        fresh[got] = jet__block_alloc_default();
        if (!fresh[got]) break;
        size_t k = iob_min(want, fresh[got]->cap);
        iov[niov++] = (struct iovec){fresh[got]->data, k};
        want -= k;
    }
    if (niov == 0) goto err_unclaim;
    if (offered_p) *offered_p = max - want; /* the tail's room and the fresh blocks' */

    ssize_t n;
    do {
        n = readv(fd, iov, niov);
    } while (n < 0 && errno == EINTR);
    int err = n < 0 ? -errno : 0;
    if (n <= 0) {
        for (size_t i = 0; i < got; i++)
            jet__block_unref(fresh[i]);
        if (claimed) iob_unclaim(tail, tail_off, claimed, 0);
        return err;
    }

    size_t left = (size_t)n;
    if (claimed) {
        uint32_t k = (uint32_t)iob_min(left, claimed);
        iob_unclaim(tail, tail_off, claimed, k);
        iob_ref(buf, tail_i)->len += k;
        left -= k;
    }
    for (size_t i = 0; i < got; i++) {
        if (left == 0) {
            jet__block_unref(fresh[i]);
            continue;
        }
        uint32_t k = (uint32_t)iob_min(left, fresh[i]->cap);
        atomic_store_explicit(&fresh[i]->used, k, memory_order_relaxed);
        jet_iobuf_ref_t *r = iob_ref(buf, buf->nref++);
        r->block = fresh[i];
        r->off = 0;
        r->len = k;
        left -= k;
    }
    buf->len += (size_t)n;
    return n;

err_unclaim:
    if (claimed) iob_unclaim(tail, tail_off, claimed, 0);
    return -ENOMEM;
}

ssize_t jet_iobuf_write_fd(jet_iobuf_t *buf, int fd, size_t max)
{
    if (buf->len == 0 || max == 0) return 0;
    struct iovec iov[IOV_MAX];
    int niov = 0;
    size_t total = 0;
    for (uint32_t i = 0; i < buf->nref && niov < IOV_MAX && total < max; i++) {
        const jet_iobuf_ref_t *r = iob_ref(buf, i);
        size_t k = iob_min(r->len, max - total);
        iov[niov++] = (struct iovec){r->block->data + r->off, k};
        total += k;
    }
    ssize_t n;
    do {
        n = writev(fd, iov, niov);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return -errno;
    jet_iobuf_pop_front(buf, (size_t)n);
    return n;
}
