/* jet_iobuf: a byte sequence made of references to refcounted blocks.
 *
 * Appending bytes copies them into pool blocks (registered memory when a
 * registrar such as URMA is active); cutting, moving and sharing between
 * buffers never copies: they move or add block references. A buffer is owned
 * by one thread at a time; blocks are shared across threads safely (atomic
 * reference counts, and appending into a partly filled block claims the free
 * space atomically, so two buffers sharing a block never write the same
 * bytes).
 *
 * User memory joins a buffer without a copy through jet_iobuf_append_user():
 * its free callback runs when the last reference is dropped, on whichever
 * thread drops it.
 *
 * Every function that can fail returns 0 or -ENOMEM (allocation of a block or
 * of the reference array); the buffer is left unchanged on failure. */
#ifndef JETRPC_IOBUF_H
#define JETRPC_IOBUF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct jet_block;

typedef struct jet_iobuf_ref {
    struct jet_block *block;
    uint32_t off; /* first byte of this reference inside the block */
    uint32_t len;
} jet_iobuf_ref_t;

#define JET_IOBUF_INLINE_REFS 2

typedef struct jet_iobuf {
    jet_iobuf_ref_t *refs; /* == inline_refs until it grows */
    uint32_t head;         /* index of the first live reference */
    uint32_t nref;         /* live references: refs[head .. head+nref) */
    uint32_t cap;
    uint32_t pad_;
    size_t len; /* total bytes */
    jet_iobuf_ref_t inline_refs[JET_IOBUF_INLINE_REFS];
} jet_iobuf_t;

typedef void (*jet_iobuf_free_cb_t)(void *data, void *arg);

void jet_iobuf_init(jet_iobuf_t *buf);
/* Drops every reference and any heap storage; the buffer must be re-inited
 * before reuse (jet_iobuf_clear keeps it usable). */
void jet_iobuf_fini(jet_iobuf_t *buf);
void jet_iobuf_clear(jet_iobuf_t *buf);

static inline size_t jet_iobuf_len(const jet_iobuf_t *buf) { return buf->len; }
static inline int jet_iobuf_empty(const jet_iobuf_t *buf) { return buf->len == 0; }

/* Copies len bytes at the end. */
int jet_iobuf_append(jet_iobuf_t *buf, const void *data, size_t len);
/* Appends user memory without copying; free_cb(data, arg) runs when the last
 * reference to it is dropped (also when this call fails with -ENOMEM, so the
 * caller never frees data itself after calling). free_cb may be NULL. */
int jet_iobuf_append_user(jet_iobuf_t *buf, void *data, size_t len, jet_iobuf_free_cb_t free_cb,
                          void *arg);
/* Appends the content of src to dst, sharing blocks; src is unchanged. */
int jet_iobuf_append_iobuf(jet_iobuf_t *dst, const jet_iobuf_t *src);
/* Moves all of src to the end of dst; src becomes empty. */
int jet_iobuf_move(jet_iobuf_t *dst, jet_iobuf_t *src);

/* Moves the first n bytes of src (n <= len) to the end of dst, without
 * copying. Returns the bytes moved (min(n, len)) or -ENOMEM. */
ssize_t jet_iobuf_cutn(jet_iobuf_t *src, jet_iobuf_t *dst, size_t n);
/* Drops the first n bytes (or all). Returns the bytes dropped. */
size_t jet_iobuf_pop_front(jet_iobuf_t *buf, size_t n);
/* Drops the last n bytes (or all). Returns the bytes dropped. */
size_t jet_iobuf_pop_back(jet_iobuf_t *buf, size_t n);

/* Copies up to n bytes starting at offset into dst, without consuming.
 * Returns the bytes copied. */
size_t jet_iobuf_copy_to(const jet_iobuf_t *buf, void *dst, size_t n, size_t offset);
/* Copies the first n bytes into dst and drops them. Returns bytes copied. */
size_t jet_iobuf_cut_to(jet_iobuf_t *buf, void *dst, size_t n);
/* Returns a pointer to n contiguous bytes at the front: into the first block
 * when they lie in it, else copied into tmp (which must hold n bytes). NULL
 * when the buffer holds fewer than n bytes. Does not consume. */
const void *jet_iobuf_fetch(const jet_iobuf_t *buf, void *tmp, size_t n);
/* Byte-wise comparison with memory; 0 when equal (lengths included). */
int jet_iobuf_equals(const jet_iobuf_t *buf, const void *data, size_t len);

/* Number of references and the i-th one's data (i < jet_iobuf_nref). The
 * pointers stay valid while the buffer holds the reference. */
static inline uint32_t jet_iobuf_nref(const jet_iobuf_t *buf) { return buf->nref; }
const void *jet_iobuf_ref_data(const jet_iobuf_t *buf, uint32_t i, size_t *len_p);

/* Reads from fd into the buffer with readv(2): fills the free space of the
 * tail block, then new pool blocks, up to max bytes. Returns the bytes read,
 * 0 at EOF (and, reading nothing, when max is 0), or -errno (-EAGAIN
 * included). */
ssize_t jet_iobuf_read_fd(jet_iobuf_t *buf, int fd, size_t max);
/* Writes the front of the buffer to fd with writev(2) (at most max bytes,
 * at most IOV_MAX pieces) and drops what was written. Returns bytes written
 * or -errno (-EAGAIN included). */
ssize_t jet_iobuf_write_fd(jet_iobuf_t *buf, int fd, size_t max);

#ifdef __cplusplus
}
#endif
#endif
