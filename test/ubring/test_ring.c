/* UBRing segment layout and ring arithmetic (UBRING.md §4-§6), in one
 * process: the "writer" segment holds the tail, the "reader" segment holds
 * the data queue. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "ubring/ubring_ring.h"
#include "ubring/ubring_shm.h"

typedef struct pair {
    void *wseg, *rseg; /* writer's own segment (tail), reader's own segment (queue) */
    size_t wlen, rlen;
    jet_ubring_tx_t tx;
    jet_ubring_rx_t rx;
} pair_t;

static void pair_init(pair_t *p, uint32_t cap)
{
    p->wlen = 64 + 64 * (size_t)cap; /* same shape for both */
    p->rlen = p->wlen;
    p->wseg = aligned_alloc(64, p->wlen);
    p->rseg = aligned_alloc(64, p->rlen);
    memset(p->wseg, 0, p->wlen);
    memset(p->rseg, 0, p->rlen);
    jet__ubring_tx_init(&p->tx, p->wseg, p->rseg, p->rlen);
    jet__ubring_rx_init(&p->rx, p->rseg, p->rlen, p->wseg);
    /* What the server writes at set-up (§3.3): tail = capacity - 1. */
    jet__ubring_ctrl(p->wseg)->tail = cap - 1;
}

static void pair_fini(pair_t *p)
{
    free(p->wseg);
    free(p->rseg);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)((i + 7 * seed) % 251);
}

static ssize_t write_bytes(pair_t *p, const uint8_t *data, size_t n)
{
    jet_iobuf_t b;
    jet_iobuf_init(&b);
    if (n) jet_iobuf_append(&b, data, n);
    jet_iobuf_t *bufs[1] = {&b};
    ssize_t r = jet__ubring_tx_write(&p->tx, bufs, 1, n);
    if (r > 0 && jet_iobuf_len(&b) != 0) r = -1000; /* must drop what it wrote */
    if (r < 0 && jet_iobuf_len(&b) != n) r = -2000; /* all-or-nothing */
    jet_iobuf_fini(&b);
    return r;
}

static void test_layout(void)
{
    JT_CHECK_EQ(sizeof(jet_ubring_ctrl_t), 64);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, tx_io_id), 0);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, tx_flag), 8);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, rx_io_id), 16);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, rx_flag), 24);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, tail), 32);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, timeout), 36);
    JT_CHECK_EQ(offsetof(jet_ubring_ctrl_t, heart_beat), 40);
    JT_CHECK_EQ(sizeof(jet_ubring_chunk_t), 64);
    JT_CHECK_EQ(offsetof(jet_ubring_chunk_t, flag), 60);
    JT_CHECK_EQ(offsetof(jet_ubring_chunk_t, len), 61);
    JT_CHECK_EQ(offsetof(jet_ubring_chunk_t, cursor), 62);
    JT_CHECK_EQ(offsetof(jet_ubring_chunk_t, reserved), 63);
    JT_CHECK_EQ(jet__ubring_capacity(4u << 20), 65535);
    JT_CHECK_EQ(jet__ubring_max_write(65535), 3932040);
    JT_CHECK_EQ(jet__ubring_capacity(64), 0);
    uint8_t seg[64 + 64 * 2];
    JT_CHECK((uint8_t *)jet__ubring_queue(seg) == seg + 64);
}

static void test_worked_example(void)
{
    JT_CHECK_EQ(jet__ubring_free_slots(8, 0, 7), 7);
    JT_CHECK_EQ(jet__ubring_free_slots(8, 7, 7), 0);
    JT_CHECK_EQ(jet__ubring_free_slots(8, 7, 0), 1);
    JT_CHECK_EQ(jet__ubring_free_slots(8, 3, 1), 6);
    JT_CHECK_EQ(jet__ubring_free_slots(8, 1, 3), 2);
    pair_t p;
    pair_init(&p, 8);
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 7);
    uint8_t data[7 * 60];
    fill(data, sizeof data, 1);
    JT_CHECK_EQ(write_bytes(&p, data, sizeof data), 420);
    JT_CHECK_EQ(p.tx.wpos, 7);
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 0);
    JT_CHECK_EQ(write_bytes(&p, data, 1), -EAGAIN); /* full */
    jet_iobuf_t got;
    jet_iobuf_init(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, 60), 60); /* slot 0 only */
    JT_CHECK_EQ(jet__ubring_ctrl(p.wseg)->tail, 0);
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 1);
    JT_CHECK_EQ(write_bytes(&p, data, 61), -EAGAIN); /* needs 2 */
    JT_CHECK_EQ(write_bytes(&p, data, 60), 60);      /* resumes */
    JT_CHECK_EQ(p.tx.wpos, 0);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), 420);
    JT_CHECK_EQ(jet_iobuf_len(&got), 480);
    uint8_t all[480];
    jet_iobuf_copy_to(&got, all, 480, 0);
    JT_CHECK(memcmp(all, data, 420) == 0 && memcmp(all + 420, data, 60) == 0);
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 7);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), 0);
    jet_iobuf_fini(&got);
    pair_fini(&p);
}

/* A tail that claims slots still holding unread chunks (torn or stale: a
 * peer that stores it byte by byte passes through 0) is not believed:
 * nothing is overwritten, and the write goes once the real tail comes. */
static void test_tail_ahead_of_the_reader(void)
{
    pair_t p;
    pair_init(&p, 8);
    uint8_t data[7 * 60];
    fill(data, sizeof data, 5);
    JT_CHECK_EQ(write_bytes(&p, data, sizeof data), 420); /* slots 0-6: full */
    jet_iobuf_t got;
    jet_iobuf_init(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, 120), 120); /* slots 0-1, tail 1 */
    JT_CHECK_EQ(jet__ubring_ctrl(p.wseg)->tail, 1);
    /* The real tail allows 2 slots (7 and 0); a bogus 5 would allow 6, of
     * which 1-4 still hold unread chunks. */
    jet__ubring_ctrl(p.wseg)->tail = 5;
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 6);
    /* The room the flags confirm is the real one. */
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 100), 2);
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 2), 2);
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 1), 1);
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 0), 0);
    uint8_t more[3 * 60];
    fill(more, sizeof more, 6);
    JT_CHECK_EQ(write_bytes(&p, more, sizeof more), -EAGAIN);
    JT_CHECK_EQ(p.tx.wpos, 7);
    /* Two slots the bogus tail covers but the real one does too: written. */
    JT_CHECK_EQ(write_bytes(&p, more, 120), 120);
    /* Full now, by the real tail; the bogus one still claims 4 slots. */
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 4);
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 100), 0);
    jet__ubring_ctrl(p.wseg)->tail = 1; /* the real value again */
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 100), 0);
    jet__ubring_ctrl(p.wseg)->tail = 9; /* out of range */
    JT_CHECK_EQ(jet__ubring_tx_room(&p.tx, 1), -EPROTO);
    jet__ubring_ctrl(p.wseg)->tail = 1;
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), 300 + 120);
    uint8_t all[540];
    JT_REQUIRE(jet_iobuf_len(&got) == 540);
    jet_iobuf_copy_to(&got, all, 540, 0);
    JT_CHECK(memcmp(all, data, 420) == 0 && memcmp(all + 420, more, 120) == 0);
    jet_iobuf_fini(&got);
    pair_fini(&p);
}

static void test_exact_fit_and_emsgsize(void)
{
    pair_t p;
    pair_init(&p, 64);
    size_t max = jet__ubring_max_write(64);
    JT_CHECK_EQ(max, 63 * 60);
    uint8_t *data = malloc(max + 1);
    fill(data, max + 1, 3);
    JT_CHECK_EQ(write_bytes(&p, data, max + 1), -EMSGSIZE);
    JT_CHECK_EQ(p.tx.io_id, 0); /* no doorbell for a refused call */
    JT_CHECK_EQ(write_bytes(&p, data, max), (ssize_t)max);
    JT_CHECK_EQ(p.tx.io_id, 1);
    JT_CHECK_EQ(jet__ubring_ctrl(p.rseg)->rx_io_id, 1);
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), 0);
    /* Even an empty ring refuses a call that needs all C slots. */
    jet_iobuf_t got;
    jet_iobuf_init(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), (ssize_t)max);
    JT_CHECK_EQ(jet_iobuf_equals(&got, data, max), 0);
    JT_CHECK_EQ(write_bytes(&p, data, max + 1), -EMSGSIZE);
    JT_CHECK_EQ(write_bytes(&p, data, 0), 0);
    jet_iobuf_fini(&got);
    free(data);
    pair_fini(&p);
}

static void test_chunk_format_and_doorbell(void)
{
    pair_t p;
    pair_init(&p, 16);
    uint8_t data[161];
    fill(data, sizeof data, 5);
    JT_CHECK_EQ(write_bytes(&p, data, 161), 161);
    jet_ubring_chunk_t *q = jet__ubring_queue(p.rseg);
    JT_CHECK_EQ(q[0].flag, JET_UBRING_CHUNK_EXIST);
    JT_CHECK_EQ(q[0].len, 60);
    JT_CHECK_EQ(q[1].flag, JET_UBRING_CHUNK_EXIST);
    JT_CHECK_EQ(q[1].len, 60);
    JT_CHECK_EQ(q[2].flag, JET_UBRING_CHUNK_EOF);
    JT_CHECK_EQ(q[2].len, 41);
    JT_CHECK_EQ(q[2].cursor, 0);
    JT_CHECK_EQ(q[2].reserved, 0);
    JT_CHECK_EQ(q[3].flag, 0);
    JT_CHECK(memcmp(q[2].payload, data + 120, 41) == 0);
    JT_CHECK_EQ(write_bytes(&p, data, 1), 1);
    JT_CHECK_EQ(jet__ubring_ctrl(p.rseg)->rx_io_id, 2); /* once per write call */
    JT_CHECK_EQ(jet__ubring_ctrl(p.wseg)->rx_io_id, 0);
    /* Two iobufs, several blocks: one call, bytes in order. */
    jet_iobuf_t a, b;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    jet_iobuf_append(&a, data, 10);
    jet_iobuf_append(&a, data + 10, 70);
    jet_iobuf_append(&b, data + 80, 81);
    jet_iobuf_t *bufs[2] = {&a, &b};
    JT_CHECK_EQ(jet__ubring_tx_write(&p.tx, bufs, 2, 100), 100);
    JT_CHECK_EQ(jet_iobuf_len(&a), 0);
    JT_CHECK_EQ(jet_iobuf_len(&b), 61);
    jet_iobuf_t got;
    jet_iobuf_init(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), 262);
    uint8_t all[262];
    jet_iobuf_copy_to(&got, all, sizeof all, 0);
    JT_CHECK(memcmp(all, data, 161) == 0);
    JT_CHECK_EQ(all[161], data[0]);
    JT_CHECK(memcmp(all + 162, data, 100) == 0);
    /* Consumed slots: flag 0, cursor == len. */
    JT_CHECK_EQ(q[2].flag, 0);
    JT_CHECK_EQ(q[2].cursor, 41);
    jet_iobuf_fini(&a);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&got);
    pair_fini(&p);
}

/* Every stream length 0 .. 3 ring lengths, written in calls as big as the
 * free slots allow and read back in reads of varying size: the positions
 * wrap at every offset. */
static void test_wrap_every_size(void)
{
    const uint32_t cap = 8;
    const size_t ring_bytes = cap * 60;
    uint8_t *data = malloc(3 * ring_bytes + 1);
    uint8_t *back = malloc(3 * ring_bytes + 1);
    pair_t p;
    pair_init(&p, cap);
    int bad = 0;
    for (size_t n = 0; n <= 3 * ring_bytes && bad < 5; n++) {
        fill(data, n, (unsigned)n);
        size_t sent = 0, recvd = 0;
        jet_iobuf_t got;
        jet_iobuf_init(&got);
        int guard = 0;
        while ((sent < n || recvd < n) && guard++ < 10000) {
            int64_t f = jet__ubring_tx_free(&p.tx);
            if (f < 0) break;
            size_t room = (size_t)f * 60, k = n - sent;
            if (k > room) k = room;
            if (k > 0) {
                ssize_t w = write_bytes(&p, data + sent, k);
                if (w != (ssize_t)k) break;
                sent += k;
            }
            ssize_t r = jet__ubring_rx_read(&p.rx, &got, 1 + (n + guard) % 97);
            if (r < 0) break;
            recvd += (size_t)r;
        }
        bool ok = sent == n && recvd == n && jet_iobuf_len(&got) == n;
        if (ok && n) {
            jet_iobuf_copy_to(&got, back, n, 0);
            ok = memcmp(back, data, n) == 0;
        }
        ok = ok && jet__ubring_tx_free(&p.tx) == cap - 1 && !jet__ubring_rx_ready(&p.rx);
        if (!ok) {
            char label[64];
            snprintf(label, sizeof label, "stream of %zu bytes", n);
            JT_CHECK_AT(label, ok);
            bad++;
        }
        jet_iobuf_fini(&got);
    }
    JT_CHECK(p.tx.io_id > 3 * ring_bytes / 60);
    pair_fini(&p);
    free(data);
    free(back);
}

static void test_partial_reads_cursor(void)
{
    pair_t p;
    pair_init(&p, 8);
    uint8_t data[100];
    fill(data, sizeof data, 9);
    JT_CHECK_EQ(write_bytes(&p, data, 100), 100);
    jet_ubring_chunk_t *q = jet__ubring_queue(p.rseg);
    jet_iobuf_t got;
    jet_iobuf_init(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, 7), 7);
    JT_CHECK_EQ(q[0].cursor, 7);
    JT_CHECK_EQ(q[0].flag, JET_UBRING_CHUNK_EXIST); /* not consumed yet */
    JT_CHECK_EQ(jet__ubring_ctrl(p.wseg)->tail, 7); /* unchanged: C - 1 */
    JT_CHECK(jet__ubring_rx_ready(&p.rx));
    size_t total = 7;
    while (total < 100) {
        ssize_t r = jet__ubring_rx_read(&p.rx, &got, 13);
        JT_REQUIRE(r > 0 && r <= 13);
        total += (size_t)r;
    }
    JT_CHECK_EQ(jet_iobuf_equals(&got, data, 100), 0);
    JT_CHECK_EQ(q[0].flag, 0);
    JT_CHECK_EQ(q[1].flag, 0);
    JT_CHECK_EQ(q[1].cursor, 40);
    JT_CHECK_EQ(jet__ubring_ctrl(p.wseg)->tail, 1);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, 13), 0);
    /* A writer-set cursor is honoured (brpc reads len - cursor bytes). */
    JT_CHECK_EQ(write_bytes(&p, data, 30), 30);
    q[2].cursor = 10;
    jet_iobuf_clear(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), 20);
    JT_CHECK_EQ(jet_iobuf_equals(&got, data + 10, 20), 0);
    jet_iobuf_fini(&got);
    pair_fini(&p);
}

static void test_corrupt_chunks(void)
{
    static const struct {
        const char *what;
        uint8_t flag, len, cursor;
    } cases[] = {
        {"len 0", 2, 0, 0},   {"len 61", 2, 61, 0}, {"len 255", 1, 255, 0},
        {"flag 3", 3, 10, 0}, {"flag 7", 7, 10, 0}, {"cursor > len", 2, 10, 11},
        {"cursor == len (no byte)", 2, 10, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pair_t p;
        pair_init(&p, 8);
        jet_ubring_chunk_t *q = jet__ubring_queue(p.rseg);
        q[0].len = cases[i].len;
        q[0].cursor = cases[i].cursor;
        q[0].flag = cases[i].flag;
        jet_iobuf_t got;
        jet_iobuf_init(&got);
        JT_CHECK_AT(cases[i].what, jet__ubring_rx_read(&p.rx, &got, SIZE_MAX) == -EPROTO);
        JT_CHECK_AT(cases[i].what, jet_iobuf_len(&got) == 0);
        JT_CHECK_AT(cases[i].what, jet__ubring_ctrl(p.wseg)->tail == 7);
        jet_iobuf_fini(&got);
        pair_fini(&p);
    }
    /* Good chunks before a bad one are delivered, the bad one is an error. */
    pair_t p;
    pair_init(&p, 8);
    uint8_t data[60];
    fill(data, sizeof data, 2);
    JT_CHECK_EQ(write_bytes(&p, data, 60), 60);
    jet_ubring_chunk_t *q = jet__ubring_queue(p.rseg);
    q[1].len = 0;
    q[1].flag = 2;
    jet_iobuf_t got;
    jet_iobuf_init(&got);
    JT_CHECK_EQ(jet__ubring_rx_read(&p.rx, &got, SIZE_MAX), -EPROTO);
    JT_CHECK_EQ(jet__ubring_ctrl(p.wseg)->tail, 0);
    jet_iobuf_fini(&got);
    /* A tail out of range is refused by the writer. */
    jet__ubring_ctrl(p.wseg)->tail = 8;
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), -EPROTO);
    JT_CHECK_EQ(write_bytes(&p, data, 1), -EPROTO);
    jet__ubring_ctrl(p.wseg)->tail = UINT32_MAX;
    JT_CHECK_EQ(jet__ubring_tx_free(&p.tx), -EPROTO);
    pair_fini(&p);
}

int main(void)
{
    JT_RUN(test_layout);
    JT_RUN(test_worked_example);
    JT_RUN(test_tail_ahead_of_the_reader);
    JT_RUN(test_exact_fit_and_emsgsize);
    JT_RUN(test_chunk_format_and_doorbell);
    JT_RUN(test_wrap_every_size);
    JT_RUN(test_partial_reads_cursor);
    JT_RUN(test_corrupt_chunks);
    return jt_finish();
}
