/* The UBRing segment layout and ring (brpc UBRING.md §4-§6).
 *
 * A segment = a 64-byte control area + a data queue of 64-byte chunks (the
 * owner's RECEIVE queue, written by the peer). Host byte order, natural
 * alignment (both processes share one host). Offsets:
 *    0 TxEventQ.io_id u64 (unused, 0)     8 TxEventQ.flag u32 (JET_UBRING_EQ_*)
 *   16 RxEventQ.io_id u64 (doorbell: the peer bumps it once per write call)
 *   24 RxEventQ.flag u32                 32 DataStatusQ.tail u32 (written by
 *   the peer: last slot it consumed in ITS queue, i.e. of our writes)
 *   36 DataStatusQ.timeout u32 (s)       40 DataStatusQ.heart_beat u8
 *   64 data queue: capacity C = (len - 64) / 64 chunks.
 * Chunk: payload[60] | flag u8 (0 free, 1 more follows, 2 last of a write) |
 * len u8 (1..60) | cursor u8 (bytes consumed, writer sets 0) | reserved u8.
 *
 * Writer (tx): free slots from its own tail t and write position w:
 * w > t ? t + C - w : t - w (one slot always stays empty). A write call of n
 * bytes needs ceil(n / 60) slots and is all-or-nothing: need >= C ->
 * -EMSGSIZE (at most (C - 1) * 60 bytes per call), free < need -> -EAGAIN.
 * Each chunk's flag byte is stored last with release; the doorbell (peer
 * RxEventQ.io_id) is bumped once per call after the chunks.
 * Reader (rx): consumes chunks at its read position (flag loaded with
 * acquire), clears the flag and publishes tail := the slot's index into the
 * WRITER's segment (release, after the copy out). Every value the peer can
 * write (tail, flag, len, cursor) is checked before use: a bad one is
 * -EPROTO and the ring must not be used again.
 *
 * Threads: one writer and one reader per direction; no locks; no system
 * call and no allocation (the reader appends to an iobuf, which takes pool
 * blocks). */
#ifndef JET_UBRING_UBRING_RING_H
#define JET_UBRING_UBRING_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "jetrpc/iobuf.h"

#define JET_UBRING_OFF_TX_IO_ID   0
#define JET_UBRING_OFF_TX_FLAG    8
#define JET_UBRING_OFF_RX_IO_ID   16
#define JET_UBRING_OFF_RX_FLAG    24
#define JET_UBRING_OFF_TAIL       32
#define JET_UBRING_OFF_TIMEOUT    36
#define JET_UBRING_OFF_HEART_BEAT 40
#define JET_UBRING_OFF_DATAQ      64
#define JET_UBRING_CHUNK_SIZE     64
#define JET_UBRING_CHUNK_PAYLOAD  60

enum {
    JET_UBRING_EQ_NONE = 0,
    JET_UBRING_EQ_CONNECTED = 1,
    JET_UBRING_EQ_CLOSING = 2,
    JET_UBRING_EQ_CLOSED = 3
};
enum { JET_UBRING_CHUNK_NONE = 0, JET_UBRING_CHUNK_EXIST = 1, JET_UBRING_CHUNK_EOF = 2 };

typedef struct jet_ubring_ctrl {
    uint64_t tx_io_id;
    uint32_t tx_flag;
    uint32_t pad0;
    uint64_t rx_io_id;
    uint32_t rx_flag;
    uint32_t pad1;
    uint32_t tail;
    uint32_t timeout;
    uint8_t heart_beat;
    uint8_t pad2[3];
    uint8_t pad3[20];
} jet_ubring_ctrl_t;

typedef struct jet_ubring_chunk {
    uint8_t payload[JET_UBRING_CHUNK_PAYLOAD];
    uint8_t flag;
    uint8_t len;
    uint8_t cursor;
    uint8_t reserved;
} jet_ubring_chunk_t;

_Static_assert(sizeof(jet_ubring_ctrl_t) == JET_UBRING_OFF_DATAQ, "control area is 64 bytes");
_Static_assert(offsetof(jet_ubring_ctrl_t, tx_flag) == JET_UBRING_OFF_TX_FLAG, "TxEventQ.flag");
_Static_assert(offsetof(jet_ubring_ctrl_t, rx_io_id) == JET_UBRING_OFF_RX_IO_ID, "RxEventQ.io_id");
_Static_assert(offsetof(jet_ubring_ctrl_t, rx_flag) == JET_UBRING_OFF_RX_FLAG, "RxEventQ.flag");
_Static_assert(offsetof(jet_ubring_ctrl_t, tail) == JET_UBRING_OFF_TAIL, "DataStatusQ.tail");
_Static_assert(offsetof(jet_ubring_ctrl_t, timeout) == JET_UBRING_OFF_TIMEOUT, "timeout");
_Static_assert(offsetof(jet_ubring_ctrl_t, heart_beat) == JET_UBRING_OFF_HEART_BEAT, "heart_beat");
_Static_assert(sizeof(jet_ubring_chunk_t) == JET_UBRING_CHUNK_SIZE, "chunk is 64 bytes");
_Static_assert(offsetof(jet_ubring_chunk_t, flag) == 60, "chunk flag at 60");

static inline jet_ubring_ctrl_t *jet__ubring_ctrl(void *seg_base)
{
    return (jet_ubring_ctrl_t *)seg_base;
}
static inline jet_ubring_chunk_t *jet__ubring_queue(void *seg_base)
{
    return (jet_ubring_chunk_t *)((char *)seg_base + JET_UBRING_OFF_DATAQ);
}
/* Chunks in a segment of seg_len bytes (0 when it cannot hold two). */
uint32_t jet__ubring_capacity(size_t seg_len);
/* Free slots for a writer at w whose tail is t (both < cap). */
uint32_t jet__ubring_free_slots(uint32_t cap, uint32_t w, uint32_t t);
/* Largest write call: (cap - 1) * 60 bytes. */
size_t jet__ubring_max_write(uint32_t cap);

/* Shared-field access: the peer may write any of them at any time. */
static inline uint32_t jet__ubring_load32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void jet__ubring_store32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

typedef struct jet_ubring_tx {
    jet_ubring_ctrl_t *own;  /* own segment: tail, written by the peer's reader */
    jet_ubring_ctrl_t *peer; /* peer segment: the doorbell */
    jet_ubring_chunk_t *q;   /* the peer's data queue */
    uint32_t cap;
    uint32_t wpos;
    uint64_t io_id;
} jet_ubring_tx_t;

/* Writer into the peer's queue (peer segment of peer_len bytes). */
void jet__ubring_tx_init(jet_ubring_tx_t *tx, void *own_base, void *peer_base, size_t peer_len);
/* Free slots now, or -EPROTO when the tail the peer wrote is out of range. */
int64_t jet__ubring_tx_free(const jet_ubring_tx_t *tx);
/* Slots a write call may take now, at most want: the free slots the tail
 * claims, cut to those the slot flags confirm (a write of k slots needs the
 * k-th and the one after it clear), so that a tail ahead of the unread
 * chunks yields 0, not room that jet__ubring_tx_write then refuses.
 * -EPROTO as jet__ubring_tx_free. O(log want) loads. */
int64_t jet__ubring_tx_room(const jet_ubring_tx_t *tx, uint32_t want);
/* Writes exactly `bytes` bytes taken from the front of bufs[0..n) (which must
 * hold that many) as one all-or-nothing call, and drops them from the
 * buffers. Returns bytes, 0 for bytes == 0, -EMSGSIZE when the call needs
 * >= cap slots, -EAGAIN when fewer slots are free, -EPROTO for a bad tail. */
ssize_t jet__ubring_tx_write(jet_ubring_tx_t *tx, jet_iobuf_t *const *bufs, int n, size_t bytes);

typedef struct jet_ubring_rx {
    jet_ubring_ctrl_t *own;  /* own segment: doorbell, flags */
    jet_ubring_ctrl_t *peer; /* writer's segment: where tail is published */
    jet_ubring_chunk_t *q;   /* own data queue */
    uint32_t cap;
    uint32_t rpos;
    uint8_t cursor;  /* bytes of the chunk at rpos already taken */
    bool in_chunk;   /* the chunk at rpos was validated and partly read */
    uint64_t chunks; /* consumed, for debug lines */
} jet_ubring_rx_t;

/* Reader of the own queue (own segment of own_len bytes). */
void jet__ubring_rx_init(jet_ubring_rx_t *rx, void *own_base, size_t own_len, void *peer_base);
/* A chunk is waiting at the read position. */
bool jet__ubring_rx_ready(const jet_ubring_rx_t *rx);
/* Appends up to max bytes to dst, from at most one lap of chunks (a partly
 * read chunk keeps its cursor for the next call), and publishes the tail.
 * Returns the bytes read (0: nothing waiting), -EPROTO for a corrupt chunk
 * (flag > 2, len 0 or > 60, a new chunk's cursor >= len), -ENOMEM when dst
 * cannot grow. */
ssize_t jet__ubring_rx_read(jet_ubring_rx_t *rx, jet_iobuf_t *dst, size_t max);

#endif
