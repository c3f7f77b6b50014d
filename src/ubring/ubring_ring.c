#include "ubring/ubring_ring.h"

#include <errno.h>
#include <string.h>

#define RING_STAGE         4096
#define RING_PUBLISH_EVERY 256 /* chunks between tail publications in one read */

uint32_t jet__ubring_capacity(size_t seg_len)
{
    if (seg_len < JET_UBRING_OFF_DATAQ + 2 * JET_UBRING_CHUNK_SIZE) return 0;
    size_t c = (seg_len - JET_UBRING_OFF_DATAQ) / JET_UBRING_CHUNK_SIZE;
    return c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
}

uint32_t jet__ubring_free_slots(uint32_t cap, uint32_t w, uint32_t t)
{
    return w > t ? t + cap - w : t - w;
}

size_t jet__ubring_max_write(uint32_t cap)
{
    return cap ? (size_t)(cap - 1) * JET_UBRING_CHUNK_PAYLOAD : 0;
}

void jet__ubring_tx_init(jet_ubring_tx_t *tx, void *own_base, void *peer_base, size_t peer_len)
{
    memset(tx, 0, sizeof *tx);
    tx->own = jet__ubring_ctrl(own_base);
    tx->peer = jet__ubring_ctrl(peer_base);
    tx->q = jet__ubring_queue(peer_base);
    tx->cap = jet__ubring_capacity(peer_len);
}

int64_t jet__ubring_tx_free(const jet_ubring_tx_t *tx)
{
    uint32_t t = jet__ubring_load32(&tx->own->tail);
    if (t >= tx->cap) return -EPROTO;
    return jet__ubring_free_slots(tx->cap, tx->wpos, t);
}

/* True when a write of k slots (1 <= k < cap) from wpos finds its last
 * slot and the one after it clear. */
static bool tx_fits(const jet_ubring_tx_t *tx, uint32_t k)
{
    uint32_t last = (uint32_t)(((uint64_t)tx->wpos + k - 1) % tx->cap);
    uint32_t after = last + 1 == tx->cap ? 0 : last + 1;
    return __atomic_load_n(&tx->q[last].flag, __ATOMIC_ACQUIRE) == 0 &&
           __atomic_load_n(&tx->q[after].flag, __ATOMIC_ACQUIRE) == 0;
}

int64_t jet__ubring_tx_room(const jet_ubring_tx_t *tx, uint32_t want)
{
    int64_t f = jet__ubring_tx_free(tx);
    if (f <= 0) return f;
    uint32_t hi = (uint64_t)f < want ? (uint32_t)f : want;
    if (hi == 0 || tx_fits(tx, hi)) return hi;
    /* From the write position the clear slots come first, then the unread
     * ones (the reader clears them in order): the largest k that fits is
     * found by bisection. A peer that scrambles the flags gets some k that
     * fits, or 0; jet__ubring_tx_write checks again either way. */
    uint32_t lo = 0;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (tx_fits(tx, mid))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

ssize_t jet__ubring_tx_write(jet_ubring_tx_t *tx, jet_iobuf_t *const *bufs, int n, size_t bytes)
{
    if (bytes == 0) return 0;
    size_t need = (bytes + JET_UBRING_CHUNK_PAYLOAD - 1) / JET_UBRING_CHUNK_PAYLOAD;
    if (need >= tx->cap) return -EMSGSIZE;
    int64_t free_slots = jet__ubring_tx_free(tx);
    if (free_slots < 0) return (ssize_t)free_slots;
    if ((uint64_t)free_slots < need) return -EAGAIN;
    /* The tail read above may claim more than the reader consumed (a torn
     * or stale value: a peer that stores it byte by byte passes through 0).
     * Past the free slots come the tail's own slot (consumed, flag 0) and
     * then the unread chunks (flag set; the reader clears a slot's flag
     * before it publishes a tail past it). The write fits only if its last
     * slot and the one after it are both clear; otherwise nothing is
     * written and the next look reads the tail again. */
    if (!tx_fits(tx, (uint32_t)need)) return -EAGAIN;

    int bi = 0;
    uint32_t ri = 0;
    size_t roff = 0, left = bytes;
    while (left > 0) {
        jet_ubring_chunk_t *c = &tx->q[tx->wpos];
        size_t k = left < JET_UBRING_CHUNK_PAYLOAD ? left : JET_UBRING_CHUNK_PAYLOAD;
        size_t filled = 0;
        while (filled < k) {
            size_t rlen;
            if (bi >= n) return -EINVAL; /* fewer bytes than announced: a caller bug */
            if (ri >= jet_iobuf_nref(bufs[bi])) {
                bi++;
                ri = 0;
                roff = 0;
                continue;
            }
            const uint8_t *p = jet_iobuf_ref_data(bufs[bi], ri, &rlen);
            size_t take = rlen - roff < k - filled ? rlen - roff : k - filled;
            memcpy(c->payload + filled, p + roff, take);
            filled += take;
            roff += take;
            if (roff == rlen) {
                ri++;
                roff = 0;
            }
        }
        c->len = (uint8_t)k;
        c->cursor = 0;
        c->reserved = 0;
        left -= k;
        /* The flag publishes the slot: payload and len must be visible first. */
        __atomic_store_n(&c->flag, left ? JET_UBRING_CHUNK_EXIST : JET_UBRING_CHUNK_EOF,
                         __ATOMIC_RELEASE);
        tx->wpos = tx->wpos + 1 == tx->cap ? 0 : tx->wpos + 1;
    }
    /* After the chunks: a reader that waits for the doorbell (brpc in edge
     * mode) finds all of them when it looks. */
    __atomic_store_n(&tx->peer->rx_io_id, ++tx->io_id, __ATOMIC_RELEASE);
    size_t drop = bytes;
    for (int i = 0; i < n && drop > 0; i++)
        drop -= jet_iobuf_pop_front(bufs[i], drop);
    return (ssize_t)bytes;
}

void jet__ubring_rx_init(jet_ubring_rx_t *rx, void *own_base, size_t own_len, void *peer_base)
{
    memset(rx, 0, sizeof *rx);
    rx->own = jet__ubring_ctrl(own_base);
    rx->peer = jet__ubring_ctrl(peer_base);
    rx->q = jet__ubring_queue(own_base);
    rx->cap = jet__ubring_capacity(own_len);
}

bool jet__ubring_rx_ready(const jet_ubring_rx_t *rx)
{
    return __atomic_load_n(&rx->q[rx->rpos].flag, __ATOMIC_ACQUIRE) != JET_UBRING_CHUNK_NONE;
}

ssize_t jet__ubring_rx_read(jet_ubring_rx_t *rx, jet_iobuf_t *dst, size_t max)
{
    uint8_t stage[RING_STAGE];
    size_t staged = 0, total = 0;
    uint32_t consumed = 0, last = 0;
    ssize_t rc = 0;
    /* At most one lap of the ring per call, whatever the chunks' sizes: a
     * peer refilling slots as fast as they are read cannot keep the reader. */
    while (total < max && consumed < rx->cap) {
        jet_ubring_chunk_t *c = &rx->q[rx->rpos];
        uint8_t flag = __atomic_load_n(&c->flag, __ATOMIC_ACQUIRE);
        if (flag == JET_UBRING_CHUNK_NONE) break;
        /* One load of each peer-written byte: a peer changing them under us
         * cannot make a checked value unchecked. */
        uint8_t len = __atomic_load_n(&c->len, __ATOMIC_RELAXED);
        if (flag > JET_UBRING_CHUNK_EOF || len == 0 || len > JET_UBRING_CHUNK_PAYLOAD) {
            rc = -EPROTO;
            break;
        }
        if (!rx->in_chunk) {
            uint8_t cur = __atomic_load_n(&c->cursor, __ATOMIC_RELAXED);
            /* A new chunk carries at least one byte, as it has a length of
             * at least one: one with nothing left (cursor == len) would let
             * a peer that keeps refilling its slots hold this loop for ever,
             * no byte ever counting toward max. */
            if (cur >= len) {
                rc = -EPROTO;
                break;
            }
            rx->cursor = cur;
            rx->in_chunk = true;
        } else if (rx->cursor > len) {
            rc = -EPROTO; /* len shrank under a partly read chunk */
            break;
        }
        size_t take = (size_t)(len - rx->cursor);
        if (take > max - total) take = max - total;
        if (staged + take > sizeof stage) {
            if (jet_iobuf_append(dst, stage, staged) < 0) return -ENOMEM;
            staged = 0;
        }
        memcpy(stage + staged, c->payload + rx->cursor, take);
        staged += take;
        total += take;
        rx->cursor = (uint8_t)(rx->cursor + take);
        c->cursor = rx->cursor;
        if (rx->cursor < len) break; /* max reached inside the chunk */
        __atomic_store_n(&c->flag, JET_UBRING_CHUNK_NONE, __ATOMIC_RELAXED);
        rx->in_chunk = false;
        last = rx->rpos;
        rx->rpos = rx->rpos + 1 == rx->cap ? 0 : rx->rpos + 1;
        rx->chunks++;
        /* Release: the copies out of the slot happen before the writer may
         * reuse it. */
        if (++consumed % RING_PUBLISH_EVERY == 0) jet__ubring_store32(&rx->peer->tail, last);
    }
    if (staged && jet_iobuf_append(dst, stage, staged) < 0) return -ENOMEM;
    if (consumed % RING_PUBLISH_EVERY) jet__ubring_store32(&rx->peer->tail, last);
    if (rc < 0) return rc;
    return (ssize_t)total;
}
