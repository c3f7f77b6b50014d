/* jet_iobuf: operations against a plain byte-array model, block sharing,
 * user blocks, reference array growth, read_fd/write_fd, allocation failure. */
#include "jetrpc/iobuf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "iobuf/block_pool.h"
#include "jetrpc/flags.h"
#include "testutil.h"

JET_FLAG_DECLARE_INT32(iobuf_max_mb);
JET_FLAG_DECLARE_INT32(iobuf_share_max);

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void)
{
    return jt_xorshift64(&rng_state);
}

static void fill_random(void *p, size_t n)
{
    unsigned char *c = p;
    uint64_t x = rnd();
    for (size_t i = 0; i < n; i++) {
        if ((i & 7) == 0) x = rnd();
        c[i] = (unsigned char)(x >> ((i & 7) * 8));
    }
}

static int all_idle(void)
{
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    return s.blocks_in_use[0] == 0 && s.blocks_in_use[1] == 0 && s.blocks_in_use[2] == 0;
}

static const jet_iobuf_ref_t *ref_at(const jet_iobuf_t *b, uint32_t i)
{
    return &b->refs[b->head + i];
}

/* Structure invariants: lengths add up, no empty reference, each reference
 * of a pool block lies within the bytes claimed in that block. */
static int structure_ok(const jet_iobuf_t *b)
{
    size_t sum = 0;
    if ((size_t)b->head + b->nref > b->cap) return 0;
    if ((b->refs == b->inline_refs) != (b->cap == JET_IOBUF_INLINE_REFS)) return 0;
    for (uint32_t i = 0; i < b->nref; i++) {
        const jet_iobuf_ref_t *r = ref_at(b, i);
        if (r->len == 0) return 0;
        if ((uint64_t)r->off + r->len > atomic_load(&r->block->used)) return 0;
        if (atomic_load(&r->block->used) > r->block->cap) return 0;
        if (atomic_load(&r->block->refcnt) == 0) return 0;
        sum += r->len;
    }
    return sum == b->len;
}

/* ---- the model --------------------------------------------------------- */

typedef struct model {
    unsigned char *d;
    size_t n, cap;
} model_t;

static void m_reserve(model_t *m, size_t n)
{
    if (m->n + n <= m->cap) return;
    size_t c = m->cap ? m->cap : 256;
    while (c < m->n + n)
        c *= 2;
    m->d = realloc(m->d, c);
    if (!m->d) abort();
    m->cap = c;
}

static void m_append(model_t *m, const void *p, size_t n)
{
    /* p may point into m itself (self append, rotation): kept as an
     * offset across the reallocation. */
    uintptr_t base = (uintptr_t)m->d, at = (uintptr_t)p;
    bool inside = m->d && at >= base && at < base + m->cap;
    m_reserve(m, n);
    if (inside) p = m->d + (at - base);
    if (n) memmove(m->d + m->n, p, n);
    m->n += n;
}

static void m_pop_front(model_t *m, size_t n)
{
    if (n > m->n) n = m->n;
    memmove(m->d, m->d + n, m->n - n);
    m->n -= n;
}

static void m_pop_back(model_t *m, size_t n)
{
    m->n -= n > m->n ? m->n : n;
}

static int user_created, user_freed;

static void user_free(void *data, void *arg)
{
    JT_CHECK(data == arg);
    free(data);
    user_freed++;
}

#define NBUF   4
#define MAXLEN (256 * KiB)

static size_t rand_len(void)
{
    unsigned k = (unsigned)(rnd() % 100);
    if (k < 60) return rnd() % 300;
    if (k < 90) return rnd() % (20 * KiB);
    if (k < 98) return rnd() % (70 * KiB);
    return 64 * KiB + rnd() % (150 * KiB);
}

static void test_random_ops(void)
{
    jet_iobuf_t buf[NBUF];
    model_t mod[NBUF] = {0};
    for (int i = 0; i < NBUF; i++) {
        jet_iobuf_init(&buf[i]);
        m_reserve(&mod[i], 1); /* never a NULL model pointer, even when empty */
    }
    int pfd[2];
    JT_REQUIRE(pipe(pfd) == 0);
    unsigned char *tmp = malloc(MAXLEN * 2 + 300 * KiB);
    JT_REQUIRE(tmp);
    int counts[16] = {0};
    int ok = 1;

    for (int it = 0; it < 20000 && ok; it++) {
        int a = (int)(rnd() % NBUF), b = (int)(rnd() % NBUF);
        jet_iobuf_t *A = &buf[a], *B = &buf[b];
        model_t *MA = &mod[a], *MB = &mod[b];
        int op = (int)(rnd() % 14);
        counts[op]++;
        switch (op) {
        case 0: { /* append */
            size_t n = rand_len();
            fill_random(tmp, n);
            JT_CHECK_EQ(jet_iobuf_append(A, tmp, n), 0);
            m_append(MA, tmp, n);
            break;
        }
        case 1: { /* append_user */
            size_t n = rnd() % 3000;
            void *p = malloc(n ? n : 1);
            fill_random(p, n);
            m_append(MA, p, n);
            user_created++;
            JT_CHECK_EQ(jet_iobuf_append_user(A, p, n, user_free, p), 0);
            break;
        }
        case 2: /* append_iobuf, shares blocks; a == b appends to itself */
            JT_CHECK_EQ(jet_iobuf_append_iobuf(A, B), 0);
            m_append(MA, MB->d, MB->n);
            break;
        case 3: /* move */
            JT_CHECK_EQ(jet_iobuf_move(A, B), 0);
            if (a != b) {
                m_append(MA, MB->d, MB->n);
                MB->n = 0;
            }
            JT_CHECK(a == b || jet_iobuf_empty(B));
            break;
        case 4: { /* cutn from b to a; a == b rotates */
            size_t n = rnd() % (MB->n + 10);
            size_t want = n < MB->n ? n : MB->n;
            JT_CHECK_EQ(jet_iobuf_cutn(B, A, n), (ssize_t)want);
            if (a == b) {
                m_append(MA, MA->d, want);
                m_pop_front(MA, want);
            } else {
                m_append(MA, MB->d, want);
                m_pop_front(MB, want);
            }
            break;
        }
        case 5: {
            size_t n = rnd() % 2 ? rnd() % 200 : rnd() % (MA->n + 100);
            JT_CHECK_EQ(jet_iobuf_pop_front(A, n), n < MA->n ? n : MA->n);
            m_pop_front(MA, n);
            break;
        }
        case 6: {
            size_t n = rnd() % 2 ? rnd() % 200 : rnd() % (MA->n + 100);
            JT_CHECK_EQ(jet_iobuf_pop_back(A, n), n < MA->n ? n : MA->n);
            m_pop_back(MA, n);
            break;
        }
        case 7: { /* copy_to at an offset */
            size_t off = rnd() % (MA->n + 20);
            size_t n = rnd() % (MA->n + 20);
            size_t want = off >= MA->n ? 0 : (n < MA->n - off ? n : MA->n - off);
            JT_CHECK_EQ(jet_iobuf_copy_to(A, tmp, n, off), want);
            JT_CHECK(memcmp(tmp, MA->d + (want ? off : 0), want) == 0);
            break;
        }
        case 8: { /* cut_to */
            size_t n = rnd() % (MA->n + 20);
            size_t want = n < MA->n ? n : MA->n;
            JT_CHECK_EQ(jet_iobuf_cut_to(A, tmp, n), want);
            JT_CHECK(memcmp(tmp, MA->d, want) == 0);
            m_pop_front(MA, want);
            break;
        }
        case 9: { /* fetch */
            size_t n = rnd() % (MA->n + 20);
            const void *p = jet_iobuf_fetch(A, tmp, n);
            if (n > MA->n) {
                JT_CHECK(p == NULL);
            } else {
                JT_REQUIRE(p != NULL);
                JT_CHECK(memcmp(p, MA->d, n) == 0);
                if (A->nref && ref_at(A, 0)->len >= n && n)
                    JT_CHECK(p != tmp); /* no copy when the first reference holds it */
            }
            break;
        }
        case 10: /* equals must also say "different" */
            if (MA->n) {
                memcpy(tmp, MA->d, MA->n);
                tmp[rnd() % MA->n] ^= 0x40;
                JT_CHECK(jet_iobuf_equals(A, tmp, MA->n) != 0);
                JT_CHECK(jet_iobuf_equals(A, MA->d, MA->n - 1) != 0);
            }
            JT_CHECK(jet_iobuf_equals(A, MA->d, MA->n + 1) != 0 || MA->n == 0);
            break;
        case 11:
            if (rnd() % 4 == 0) {
                jet_iobuf_clear(A);
                MA->n = 0;
            } else { /* the references' data, in order, is the content */
                size_t off = 0, len;
                for (uint32_t i = 0; i < jet_iobuf_nref(A); i++) {
                    const void *p = jet_iobuf_ref_data(A, i, &len);
                    JT_CHECK(off + len <= MA->n && memcmp(p, MA->d + off, len) == 0);
                    off += len;
                }
                JT_CHECK_EQ(off, MA->n);
                JT_CHECK(jet_iobuf_ref_data(A, jet_iobuf_nref(A), &len) == NULL);
            }
            break;
        case 12: { /* through a pipe: front of b to the end of a */
            size_t n = rnd() % 60000;
            ssize_t w = jet_iobuf_write_fd(B, pfd[1], n);
            size_t want = n < MB->n ? n : MB->n;
            JT_CHECK_EQ(w, (ssize_t)want);
            if (w < 0) w = 0;
            ssize_t got = 0;
            while (got < w) {
                ssize_t r = jet_iobuf_read_fd(A, pfd[0], (size_t)(w - got) + (rnd() % 2) * 100);
                if (r <= 0) break;
                got += r;
            }
            JT_CHECK_EQ(got, w);
            if (a == b) {
                m_append(MA, MA->d, (size_t)w);
                m_pop_front(MA, (size_t)w);
            } else {
                m_append(MA, MB->d, (size_t)w);
                m_pop_front(MB, (size_t)w);
            }
            break;
        }
        case 13: /* fini/init */
            jet_iobuf_fini(A);
            jet_iobuf_init(A);
            MA->n = 0;
            break;
        }
        /* Keep sizes bounded. */
        for (int k = 0; k < NBUF; k++) {
            if (mod[k].n > MAXLEN) {
                size_t drop = mod[k].n - MAXLEN / 2;
                jet_iobuf_pop_front(&buf[k], drop);
                m_pop_front(&mod[k], drop);
            }
        }
        int ids[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            int i = ids[k];
            if (jet_iobuf_len(&buf[i]) != mod[i].n ||
                jet_iobuf_equals(&buf[i], mod[i].d, mod[i].n) || !structure_ok(&buf[i])) {
                fprintf(stderr,
                        "  mismatch after op %d at iteration %d (buffer %d, a=%d b=%d, len %zu "
                        "model %zu, structure %d)\n",
                        op, it, i, a, b, jet_iobuf_len(&buf[i]), mod[i].n, structure_ok(&buf[i]));
                JT_CHECK(!"buffer differs from the model");
                ok = 0;
                break;
            }
        }
    }
    for (int i = 0; i < NBUF; i++) {
        JT_CHECK(jet_iobuf_equals(&buf[i], mod[i].d, mod[i].n) == 0);
        jet_iobuf_fini(&buf[i]);
        free(mod[i].d);
    }
    for (int op = 0; op < 14 && ok; op++)
        JT_CHECK(counts[op] > 100);
    JT_CHECK_EQ(user_freed, user_created);
    JT_CHECK(all_idle());
    close(pfd[0]);
    close(pfd[1]);
    free(tmp);
}

/* ---- specific behaviours ------------------------------------------------ */

static void test_empty_and_small(void)
{
    jet_iobuf_t b;
    jet_iobuf_init(&b);
    char tmp[16];
    size_t len = 99;
    JT_CHECK(jet_iobuf_empty(&b));
    JT_CHECK_EQ(jet_iobuf_pop_front(&b, 10), 0);
    JT_CHECK_EQ(jet_iobuf_pop_back(&b, 10), 0);
    JT_CHECK_EQ(jet_iobuf_copy_to(&b, tmp, 10, 0), 0);
    JT_CHECK_EQ(jet_iobuf_cut_to(&b, tmp, 10), 0);
    JT_CHECK(jet_iobuf_fetch(&b, tmp, 1) == NULL);
    JT_CHECK(jet_iobuf_fetch(&b, tmp, 0) != NULL);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "", 0), 0);
    JT_CHECK(jet_iobuf_equals(&b, "x", 1) != 0);
    JT_CHECK(jet_iobuf_ref_data(&b, 0, &len) == NULL);
    JT_CHECK_EQ(len, 0);
    JT_CHECK_EQ(jet_iobuf_append(&b, NULL, 0), 0);
    JT_CHECK(jet_iobuf_empty(&b));
    JT_CHECK_EQ(jet_iobuf_nref(&b), 0);

    JT_CHECK_EQ(jet_iobuf_append(&b, "abc", 3), 0);
    JT_CHECK_EQ(jet_iobuf_append(&b, "def", 3), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 1); /* second append filled the same block */
    JT_CHECK_EQ(atomic_load(&ref_at(&b, 0)->block->used), 6);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "abcdef", 6), 0);
    JT_CHECK(jet_iobuf_fetch(&b, tmp, 6) == ref_at(&b, 0)->block->data);
    JT_CHECK_EQ(jet_iobuf_copy_to(&b, tmp, 100, 2), 4);
    JT_CHECK(memcmp(tmp, "cdef", 4) == 0);
    JT_CHECK_EQ(jet_iobuf_copy_to(&b, tmp, 100, 6), 0);
    JT_CHECK_EQ(jet_iobuf_pop_back(&b, 1), 1);
    JT_CHECK_EQ(jet_iobuf_pop_front(&b, 1), 1);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "bcde", 4), 0);
    /* pop_back never gives bytes back to the block: another buffer might
     * share them. The next append goes to a new reference. */
    JT_CHECK_EQ(atomic_load(&ref_at(&b, 0)->block->used), 6);
    JT_CHECK_EQ(jet_iobuf_append(&b, "Z", 1), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "bcdeZ", 5), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 2);

    /* A fetch across references is copied into tmp. */
    JT_CHECK(jet_iobuf_fetch(&b, tmp, 5) == tmp);
    JT_CHECK(memcmp(tmp, "bcdeZ", 5) == 0);
    jet_iobuf_clear(&b);
    JT_CHECK(jet_iobuf_empty(&b));
    JT_CHECK_EQ(jet_iobuf_append(&b, "again", 5), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "again", 5), 0);
    jet_iobuf_fini(&b);
    JT_CHECK(all_idle());
}

static void test_block_choice_and_merge(void)
{
    jet_iobuf_t a, b;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    size_t n = 200 * KiB + 123;
    unsigned char *data = malloc(n);
    JT_REQUIRE(data);
    fill_random(data, n);
    JT_CHECK_EQ(jet_iobuf_append(&a, data, 10), 0);
    JT_CHECK_EQ(jet_iobuf_append(&a, data + 10, n - 10), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&a, data, n), 0);
    /* 10 bytes + tail fill of the first 8 KiB block, then whole 64 KiB
     * pieces, then 8 KiB blocks for the rest. */
    int n64 = 0, n8 = 0;
    for (uint32_t i = 0; i < jet_iobuf_nref(&a); i++) {
        const jet_iobuf_ref_t *r = ref_at(&a, i);
        n64 += r->block->cls == JET_BLOCK_CLASS_64K;
        n8 += r->block->cls == JET_BLOCK_CLASS_8K;
        if (i + 1 < jet_iobuf_nref(&a)) JT_CHECK_EQ(r->len, r->block->cap); /* all full */
    }
    JT_CHECK_EQ(n64, (int)((n - JET_BLOCK_SIZE_8K) / JET_BLOCK_SIZE_64K));
    JT_CHECK_EQ(n64 + n8, (int)jet_iobuf_nref(&a));
    JT_CHECK(structure_ok(&a));

    /* Cutting a reference in pieces and appending them back in order merges
     * them into one reference again. */
    jet_iobuf_t c;
    jet_iobuf_init(&c);
    JT_CHECK_EQ(jet_iobuf_append(&c, data, 1000), 0);
    for (int i = 0; i < 10; i++)
        JT_CHECK_EQ(jet_iobuf_cutn(&c, &b, 100), 100);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 1);
    JT_CHECK_EQ(jet_iobuf_equals(&b, data, 1000), 0);
    JT_CHECK(jet_iobuf_empty(&c));
    JT_CHECK_EQ(atomic_load(&ref_at(&b, 0)->block->refcnt), 1);

    /* Appending a buffer to itself. */
    JT_CHECK_EQ(jet_iobuf_append_iobuf(&b, &b), 0);
    JT_CHECK_EQ(jet_iobuf_len(&b), 2000);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 2);
    JT_CHECK_EQ(jet_iobuf_copy_to(&b, data + n - 2000, 2000, 0), 2000);
    JT_CHECK(memcmp(data + n - 2000, data, 1000) == 0 && memcmp(data + n - 1000, data, 1000) == 0);
    JT_CHECK_EQ(atomic_load(&ref_at(&b, 0)->block->refcnt), 2);

    /* A rotation: cutn into itself. */
    jet_iobuf_clear(&b);
    JT_CHECK_EQ(jet_iobuf_append(&b, "0123456789", 10), 0);
    JT_CHECK_EQ(jet_iobuf_cutn(&b, &b, 4), 4);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "4567890123", 10), 0);
    JT_CHECK_EQ(jet_iobuf_cutn(&b, &b, 6), 6);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "0123456789", 10), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 1); /* the pieces merged back */

    jet_iobuf_fini(&a);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&c);
    free(data);
    JT_CHECK(all_idle());
}

/* Two buffers ending at the same place in a shared block: only one of them
 * may append into the block. */
static void test_share_then_append(void)
{
    jet_iobuf_t a, b;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    JT_CHECK_EQ(jet_iobuf_append(&a, "hello", 5), 0);
    JT_CHECK_EQ(jet_iobuf_append_iobuf(&b, &a), 0);
    jet_block_t *blk = ref_at(&a, 0)->block;
    JT_CHECK(ref_at(&b, 0)->block == blk);
    JT_CHECK_EQ(atomic_load(&blk->refcnt), 2);
    JT_CHECK_EQ(jet_iobuf_append(&a, " world", 6), 0);
    JT_CHECK_EQ(jet_iobuf_append(&b, " there", 6), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "hello world", 11), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "hello there", 11), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 1);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 2);
    JT_CHECK_EQ(atomic_load(&blk->used), 11);
    /* b's new tail block is its own; a keeps appending in place. */
    JT_CHECK_EQ(jet_iobuf_append(&b, "!", 1), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 2);
    JT_CHECK_EQ(jet_iobuf_append(&a, "?", 1), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "hello world?", 12), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "hello there!", 12), 0);

    /* A buffer that cut its front away still appends after its own end. */
    jet_iobuf_t c;
    jet_iobuf_init(&c);
    JT_CHECK_EQ(jet_iobuf_cutn(&a, &c, 6), 6);
    JT_CHECK_EQ(jet_iobuf_append(&c, "X", 1), 0); /* c ends at 6, used is 12: new block */
    JT_CHECK_EQ(jet_iobuf_append(&a, "Y", 1), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&c, "hello X", 7), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "world?Y", 7), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "hello there!", 12), 0);
    jet_iobuf_fini(&a);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&c);
    JT_CHECK(all_idle());
}

/* The same race between threads: each round, two buffers share a block's
 * tail and two threads append to them at once. */
#define SR_ROUNDS 500
static pthread_barrier_t sr_barrier;
static jet_iobuf_t sr_buf[2];

static void *sr_worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    char piece[97];
    memset(piece, 'A' + id, sizeof piece);
    for (int round = 0; round < SR_ROUNDS; round++) {
        pthread_barrier_wait(&sr_barrier);
        for (int i = 0; i < 40; i++)
            if (jet_iobuf_append(&sr_buf[id], piece, 1 + (size_t)(i * 7 + round) % sizeof piece))
                abort();
        pthread_barrier_wait(&sr_barrier);
    }
    return NULL;
}

static void test_share_append_threads(void)
{
    pthread_t th[2];
    pthread_barrier_init(&sr_barrier, NULL, 3);
    for (intptr_t i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, sr_worker, (void *)i);
    unsigned char *out = malloc(64 * KiB);
    int bad = 0;
    for (int round = 0; round < SR_ROUNDS; round++) {
        jet_iobuf_t base;
        jet_iobuf_init(&base);
        jet_iobuf_append(&base, "base", 4);
        for (int i = 0; i < 2; i++) {
            jet_iobuf_init(&sr_buf[i]);
            jet_iobuf_append_iobuf(&sr_buf[i], &base);
        }
        pthread_barrier_wait(&sr_barrier);
        pthread_barrier_wait(&sr_barrier);
        for (int i = 0; i < 2; i++) {
            size_t n = jet_iobuf_copy_to(&sr_buf[i], out, 64 * KiB, 0);
            size_t want = 4;
            for (int k = 0; k < 40; k++)
                want += 1 + (size_t)(k * 7 + round) % 97;
            if (n != want || memcmp(out, "base", 4) != 0 || !structure_ok(&sr_buf[i])) bad++;
            for (size_t k = 4; k < n; k++)
                if (out[k] != 'A' + i) {
                    bad++;
                    break;
                }
            jet_iobuf_fini(&sr_buf[i]);
        }
        jet_iobuf_fini(&base);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&sr_barrier);
    free(out);
    JT_CHECK_EQ(bad, 0);
    JT_CHECK(all_idle());
}

/* Small appends of many buffers share the thread's block: a queue of a
 * thousand 30-byte messages holds a handful of 8 KiB blocks, not a
 * thousand. Each message's bytes are its own; a buffer whose end is no
 * longer the block's (another buffer appended since) continues in a new
 * piece, and one whose end still is extends in place. */
static void test_small_appends_share_a_block(void)
{
    enum { N = 1000, M = 30 };
    jet_iobuf_t *q = calloc(N, sizeof *q);
    JT_REQUIRE(q);
    char msg[M];
    for (int i = 0; i < N; i++) {
        memset(msg, 'a' + i % 26, M);
        jet_iobuf_init(&q[i]);
        JT_CHECK_EQ(jet_iobuf_append(&q[i], msg, M), 0);
    }
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    /* In use: the full shared blocks, the first of them begun by earlier
     * appends (the current one counts as idle). */
    const size_t most = N * M / JET_BLOCK_SIZE_8K + 2;
    JT_CHECK(s.blocks_in_use[0] <= most);
    size_t distinct = 1;
    for (int i = 1; i < N; i++)
        distinct += ref_at(&q[i], 0)->block != ref_at(&q[i - 1], 0)->block;
    JT_CHECK(distinct <= most);
    for (int i = 0; i < N; i++) {
        memset(msg, 'a' + i % 26, M);
        JT_CHECK_EQ(jet_iobuf_equals(&q[i], msg, M), 0);
    }
    /* The last two share the current block: the older one's end is not
     * the block's any more. */
    jet_iobuf_t *x = &q[N - 2], *y = &q[N - 1];
    JT_REQUIRE(ref_at(x, 0)->block == ref_at(y, 0)->block);
    JT_CHECK_EQ(jet_iobuf_append(x, "+x", 2), 0);
    JT_CHECK_EQ(jet_iobuf_nref(x), 2);
    JT_CHECK_EQ(jet_iobuf_append(x, "!", 1), 0); /* its end is the block's again */
    JT_CHECK_EQ(jet_iobuf_nref(x), 2);
    memset(msg, 'a' + (N - 2) % 26, M);
    JT_CHECK_EQ(jet_iobuf_copy_to(x, msg, M, 0), M);
    char tail[3];
    JT_CHECK_EQ(jet_iobuf_copy_to(x, tail, 3, M), 3);
    JT_CHECK(memcmp(tail, "+x!", 3) == 0);
    for (int i = 0; i < N; i++)
        JT_CHECK(structure_ok(&q[i]));
    for (int i = 0; i < N; i++)
        jet_iobuf_fini(&q[i]);
    free(q);
    JT_CHECK(all_idle());
}

static void *small_append_main(void *arg)
{
    jet_iobuf_t *out = arg;
    jet_iobuf_t mine;
    jet_iobuf_init(&mine);
    (void)jet_iobuf_append(&mine, "dropped", 7);
    jet_iobuf_fini(&mine);
    (void)jet_iobuf_append(out, "kept", 4);
    return NULL;
}

/* A buffer in the thread's current shared block counts as in use: a
 * leaked small buffer shows in the statistics that leak checks read. */
static void test_shared_block_in_use_while_referenced(void)
{
    JT_REQUIRE(all_idle());
    jet_iobuf_t a;
    jet_iobuf_init(&a);
    JT_CHECK_EQ(jet_iobuf_append(&a, "thirty bytes of a small answer", 30), 0);
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    JT_CHECK_EQ(s.blocks_in_use[0], 1);
    jet_iobuf_fini(&a);
    JT_CHECK(all_idle());
}

/* A shared block filled byte by byte by different buffers hands out every
 * reference it took in advance, and is still the thread's own (it held one
 * more): freed by its buffers, it does not go back to the pool while the
 * thread still hands out its bytes, nor twice when the thread gives it up
 * (helper-125: the block was freed, reused and freed again, and two
 * allocations returned the same block). */
static void *byte_by_byte_main(void *arg)
{
    int *bad = arg;
    enum { N = JET_BLOCK_SIZE_8K };
    jet_iobuf_t *q = calloc(N, sizeof *q);
    if (!q) abort();
    /* One byte at a time until the thread takes a fresh shared block, whose
     * first byte q[0] then holds. */
    jet_iobuf_init(&q[0]);
    if (jet_iobuf_append(&q[0], "a", 1) != 0) (*bad)++;
    for (;;) {
        jet_iobuf_t next;
        jet_iobuf_init(&next);
        if (jet_iobuf_append(&next, "a", 1) != 0) (*bad)++;
        jet_block_t *was = jet_iobuf_nref(&q[0]) ? ref_at(&q[0], 0)->block : NULL;
        bool fresh = ref_at(&next, 0)->block != was;
        jet_iobuf_clear(&q[0]);
        if (jet_iobuf_move(&q[0], &next) != 0) (*bad)++;
        jet_iobuf_fini(&next);
        if (fresh) break;
    }
    /* The rest of that block, a byte for each buffer: it is full. */
    for (int i = 1; i < N; i++) {
        jet_iobuf_init(&q[i]);
        char c = (char)('a' + i % 26);
        if (jet_iobuf_append(&q[i], &c, 1) != 0) (*bad)++;
    }
    if (ref_at(&q[N - 1], 0)->block != ref_at(&q[0], 0)->block) (*bad)++;
    for (int i = 0; i < N; i++)
        jet_iobuf_fini(&q[i]);
    /* The blocks come back from the pool whole, each once. */
    jet_iobuf_t big, c;
    jet_iobuf_init(&big);
    jet_iobuf_init(&c);
    char fill[5000];
    memset(fill, 'B', sizeof fill);
    if (jet_iobuf_append(&big, fill, sizeof fill) != 0) (*bad)++;
    if (jet_iobuf_append(&c, "c", 1) != 0) (*bad)++;
    jet_iobuf_fini(&big);
    jet_block_t *x = jet__block_alloc_default(), *y = jet__block_alloc_default();
    if (!x || !y || x == y) (*bad)++;
    if (x) memset(x->data, 'D', x->cap);
    if (y) memset(y->data, 'D', y->cap);
    if (jet_iobuf_equals(&c, "c", 1) != 0) (*bad)++;
    if (x) jet__block_unref(x);
    if (y) jet__block_unref(y);
    jet_iobuf_fini(&c);
    free(q);
    return NULL;
}

static void test_shared_block_filled_byte_by_byte(void)
{
    int bad = 0;
    byte_by_byte_main(&bad); /* this thread, which goes on */
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, byte_by_byte_main, &bad) == 0);
    pthread_join(th, NULL); /* and one that exits */
    JT_CHECK_EQ(bad, 0);
    /* The free list is whole: 64 allocations, 64 blocks. */
    jet_block_t *b[64];
    int same = 0;
    for (int i = 0; i < 64; i++) {
        b[i] = jet__block_alloc_default();
        JT_REQUIRE(b[i]);
        for (int k = 0; k < i; k++)
            same += b[k] == b[i];
    }
    JT_CHECK_EQ(same, 0);
    for (int i = 0; i < 64; i++)
        jet__block_unref(b[i]);
    JT_CHECK(all_idle());
}

/* A thread's shared block is given back when the thread ends: what its
 * buffers still reference stays (a buffer handed to another thread), the
 * rest returns to the pool. */
static void test_shared_block_at_thread_exit(void)
{
    jet_iobuf_t out;
    jet_iobuf_init(&out);
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, small_append_main, &out) == 0);
    pthread_join(th, NULL);
    JT_CHECK_EQ(jet_iobuf_equals(&out, "kept", 4), 0);
    JT_CHECK_EQ(atomic_load(&ref_at(&out, 0)->block->refcnt), 1); /* out's only */
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    JT_CHECK_EQ(s.blocks_in_use[0], 1);
    jet_iobuf_fini(&out);
    JT_CHECK(all_idle());
}

/* ---- user blocks --------------------------------------------------------- */

static _Atomic int cb_count;
static void *cb_data, *cb_arg;
static pthread_t cb_thread;

static void count_cb(void *data, void *arg)
{
    atomic_fetch_add(&cb_count, 1);
    cb_data = data;
    cb_arg = arg;
    cb_thread = pthread_self();
}

static void *drop_worker(void *arg)
{
    jet_iobuf_fini(arg);
    return NULL;
}

static void test_user_blocks(void)
{
    static char mem[100];
    int tag;
    jet_iobuf_t a, b, c;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    jet_iobuf_init(&c);
    memset(mem, 'u', sizeof mem);
    atomic_store(&cb_count, 0);
    JT_CHECK_EQ(jet_iobuf_append(&a, "pre", 3), 0);
    JT_CHECK_EQ(jet_iobuf_append_user(&a, mem, sizeof mem, count_cb, &tag), 0);
    JT_CHECK_EQ(jet_iobuf_len(&a), 103);
    JT_CHECK(jet_iobuf_ref_data(&a, 1, NULL) == mem); /* no copy */
    JT_CHECK_EQ(jet_iobuf_append(&a, "post", 4), 0);  /* never written into user memory */
    JT_CHECK_EQ(mem[99], 'u');
    JT_CHECK_EQ(jet_iobuf_append_iobuf(&b, &a), 0);
    JT_CHECK_EQ(jet_iobuf_cutn(&a, &c, 50), 50);
    jet_iobuf_fini(&a);
    JT_CHECK_EQ(atomic_load(&cb_count), 0);
    JT_CHECK_EQ(jet_iobuf_pop_front(&b, 107), 107);
    JT_CHECK_EQ(atomic_load(&cb_count), 0);
    /* The last reference dropped on another thread runs the callback there. */
    pthread_t th;
    pthread_create(&th, NULL, drop_worker, &c);
    pthread_join(th, NULL);
    JT_CHECK_EQ(atomic_load(&cb_count), 1);
    JT_CHECK(cb_data == mem && cb_arg == &tag);
    JT_CHECK(pthread_equal(cb_thread, th));
    jet_iobuf_fini(&b);
    JT_CHECK_EQ(atomic_load(&cb_count), 1);

    /* Zero bytes: nothing to reference, the callback runs at once. */
    jet_iobuf_init(&a);
    JT_CHECK_EQ(jet_iobuf_append_user(&a, mem, 0, count_cb, &tag), 0);
    JT_CHECK_EQ(atomic_load(&cb_count), 2);
    JT_CHECK(jet_iobuf_empty(&a));
    /* A NULL callback is allowed. */
    JT_CHECK_EQ(jet_iobuf_append_user(&a, mem, 10, NULL, NULL), 0);
    jet_iobuf_fini(&a);

    /* On -ENOMEM the callback runs too, and the buffer is unchanged: a
     * length needing more references than a buffer can hold. */
    jet_iobuf_init(&a);
    JT_CHECK_EQ(jet_iobuf_append(&a, "keep", 4), 0);
    JT_CHECK_EQ(jet_iobuf_append_user(&a, mem, (size_t)1 << 62, count_cb, &tag), -ENOMEM);
    JT_CHECK_EQ(atomic_load(&cb_count), 3);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "keep", 4), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 1);
    jet_iobuf_fini(&a);
    JT_CHECK(all_idle());
}

/* User memory over 4 GiB becomes several blocks sharing one callback. */
static void test_user_block_huge(void)
{
    size_t len = 5 * ((size_t)1 << 30) + 12345;
    char *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "  (skipped: cannot reserve 5 GiB of address space)\n");
        return;
    }
    atomic_store(&cb_count, 0);
    jet_iobuf_t a, b;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    JT_CHECK_EQ(jet_iobuf_append_user(&a, m, len, count_cb, NULL), 0);
    JT_CHECK_EQ(jet_iobuf_len(&a), len);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 3);
    size_t l0, l2;
    JT_CHECK(jet_iobuf_ref_data(&a, 0, &l0) == m);
    JT_CHECK(jet_iobuf_ref_data(&a, 2, &l2) == m + 2 * ((size_t)1 << 31));
    JT_CHECK_EQ(l0 * 2 + l2, len);
    char tmp[8];
    JT_CHECK_EQ(jet_iobuf_copy_to(&a, tmp, 8, ((size_t)1 << 31) - 4), 8);
    /* Keep only a middle piece: the first part (the owner) is dropped from
     * every buffer first, the callback still waits for the last part. */
    JT_CHECK_EQ(jet_iobuf_pop_front(&a, ((size_t)1 << 31) + 10), ((size_t)1 << 31) + 10);
    JT_CHECK_EQ(jet_iobuf_cutn(&a, &b, 100), 100);
    jet_iobuf_fini(&a);
    JT_CHECK_EQ(atomic_load(&cb_count), 0);
    jet_iobuf_fini(&b);
    JT_CHECK_EQ(atomic_load(&cb_count), 1);
    JT_CHECK(cb_data == m);
    munmap(m, len);
}

/* ---- reference array ----------------------------------------------------- */

static void test_ref_array(void)
{
    static char mem[4000];
    for (size_t i = 0; i < sizeof mem; i++)
        mem[i] = (char)i;
    jet_iobuf_t a, b;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    JT_CHECK(a.refs == a.inline_refs);
    /* Distinct user blocks never merge: one reference each. */
    for (int i = 0; i < 1000; i++)
        JT_CHECK_EQ(jet_iobuf_append_user(&a, mem + i * 4, 4, NULL, NULL), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 1000);
    JT_CHECK(a.refs != a.inline_refs);
    JT_CHECK(a.cap >= 1000 && a.cap <= 2048);
    JT_CHECK_EQ(jet_iobuf_equals(&a, mem, 4000), 0);
    /* pop_front advances head instead of moving the array. */
    jet_iobuf_ref_t *refs = a.refs;
    JT_CHECK_EQ(jet_iobuf_pop_front(&a, 4 * 900 + 2), 4 * 900 + 2);
    JT_CHECK(a.refs == refs);
    JT_CHECK_EQ(a.head, 900);
    JT_CHECK_EQ(jet_iobuf_equals(&a, mem + 3602, 398), 0);

    /* Moving into an empty buffer takes the array as is. */
    JT_CHECK_EQ(jet_iobuf_move(&b, &a), 0);
    JT_CHECK(b.refs == refs);
    JT_CHECK(a.refs == a.inline_refs && jet_iobuf_empty(&a));
    JT_CHECK_EQ(jet_iobuf_equals(&b, mem + 3602, 398), 0);

    /* A queue (append one, pop one) stays in a small array. */
    jet_iobuf_clear(&b); /* frees a large array */
    JT_CHECK(b.refs == b.inline_refs);
    for (int i = 0; i < 3; i++)
        JT_CHECK_EQ(jet_iobuf_append_user(&b, mem + i * 4, 4, NULL, NULL), 0);
    for (int i = 3; i < 20000; i++) {
        JT_CHECK_EQ(jet_iobuf_append_user(&b, mem + (i % 1000) * 4, 4, NULL, NULL), 0);
        jet_iobuf_pop_front(&b, 4);
    }
    JT_CHECK_EQ(jet_iobuf_nref(&b), 3);
    JT_CHECK(b.cap <= 8);
    JT_CHECK(jet_iobuf_equals(&b, mem + ((20000 - 3) % 1000) * 4, 12) == 0);

    /* Moving into a non-empty buffer appends the references. */
    JT_CHECK_EQ(jet_iobuf_append(&a, "xy", 2), 0);
    JT_CHECK_EQ(jet_iobuf_move(&a, &b), 0);
    JT_CHECK_EQ(jet_iobuf_len(&a), 14);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 4);
    JT_CHECK(jet_iobuf_empty(&b));
    JT_CHECK_EQ(jet_iobuf_move(&a, &a), 0);
    JT_CHECK_EQ(jet_iobuf_len(&a), 14);
    jet_iobuf_fini(&a);
    jet_iobuf_fini(&b);
    JT_CHECK(all_idle());
}

/* ---- file descriptors ---------------------------------------------------- */

typedef struct pipe_writer {
    int fd;
    const unsigned char *data;
    size_t len;
    int err;
} pipe_writer_t;

static void *pipe_writer_run(void *arg)
{
    pipe_writer_t *w = arg;
    jet_iobuf_t b;
    jet_iobuf_init(&b);
    /* Many references: pieces of different sizes. */
    size_t off = 0, step = 1;
    while (off < w->len) {
        size_t k = step < w->len - off ? step : w->len - off;
        if (jet_iobuf_append(&b, w->data + off, k)) w->err = 1;
        off += k;
        step = step * 3 % 100003 + 1;
    }
    while (!jet_iobuf_empty(&b)) {
        ssize_t n = jet_iobuf_write_fd(&b, w->fd, SIZE_MAX);
        if (n <= 0) {
            w->err = 2;
            break;
        }
    }
    jet_iobuf_fini(&b);
    close(w->fd);
    return NULL;
}

static void test_pipe_large(void)
{
    int pfd[2];
    JT_REQUIRE(pipe(pfd) == 0);
    size_t len = 8 * MiB + 777;
    unsigned char *data = malloc(len);
    JT_REQUIRE(data);
    fill_random(data, len);
    pipe_writer_t w = {.fd = pfd[1], .data = data, .len = len};
    pthread_t th;
    pthread_create(&th, NULL, pipe_writer_run, &w);
    jet_iobuf_t in;
    jet_iobuf_init(&in);
    ssize_t n;
    int reads = 0;
    while ((n = jet_iobuf_read_fd(&in, pfd[0], 1 + rnd() % (300 * KiB))) > 0)
        reads++;
    JT_CHECK_EQ(n, 0); /* EOF */
    pthread_join(th, NULL);
    JT_CHECK_EQ(w.err, 0);
    JT_CHECK_EQ(jet_iobuf_len(&in), len);
    JT_CHECK(jet_iobuf_equals(&in, data, len) == 0);
    JT_CHECK(structure_ok(&in));
    JT_CHECK(reads > 10);
    /* EOF again, buffer unchanged. */
    JT_CHECK_EQ(jet_iobuf_read_fd(&in, pfd[0], 4096), 0);
    JT_CHECK_EQ(jet_iobuf_len(&in), len);
    close(pfd[0]);
    jet_iobuf_fini(&in);
    free(data);
    JT_CHECK(all_idle());
}

/* max is a limit, SIZE_MAX none: the read takes what the fd has. */
static void test_read_without_limit(void)
{
    int pfd[2];
    JT_REQUIRE(pipe(pfd) == 0);
    JT_REQUIRE(write(pfd[1], "hello", 5) == 5);
    jet_iobuf_t in;
    jet_iobuf_init(&in);
    JT_CHECK_EQ(jet_iobuf_read_fd(&in, pfd[0], SIZE_MAX), 5);
    JT_REQUIRE(write(pfd[1], "world!", 6) == 6);
    JT_CHECK_EQ(jet_iobuf_read_fd(&in, pfd[0], SIZE_MAX - 100), 6);
    JT_CHECK(jet_iobuf_equals(&in, "helloworld!", 11) == 0);
    close(pfd[0]);
    close(pfd[1]);
    jet_iobuf_fini(&in);
    JT_CHECK(all_idle());
}

static void test_socketpair_nonblocking(void)
{
    int sv[2];
    JT_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    size_t len = 6 * MiB + 5;
    unsigned char *data = malloc(len);
    JT_REQUIRE(data);
    fill_random(data, len);
    jet_iobuf_t out, in;
    jet_iobuf_init(&out);
    jet_iobuf_init(&in);
    JT_CHECK_EQ(jet_iobuf_append(&out, data, len), 0);

    /* Nothing to read yet: -EAGAIN, and nothing kept. */
    JT_CHECK_EQ(jet_iobuf_read_fd(&in, sv[1], 65536), -EAGAIN);
    JT_CHECK(jet_iobuf_empty(&in));
    JT_CHECK_EQ(jet_iobuf_nref(&in), 0);

    int eagain_w = 0, partial = 0, eagain_r = 0;
    size_t written = 0;
    while (jet_iobuf_len(&in) < len) {
        /* Twice in a row: the second call usually finds the socket full. */
        for (int k = 0; k < 2; k++) {
            size_t offer = jet_iobuf_len(&out);
            ssize_t w = jet_iobuf_write_fd(&out, sv[0], SIZE_MAX);
            if (w == -EAGAIN) {
                eagain_w++;
            } else {
                JT_REQUIRE(w >= 0);
                written += (size_t)w;
                if (offer && (size_t)w < offer) partial++;
            }
        }
        JT_CHECK_EQ(jet_iobuf_len(&out), len - written);
        for (int k = 0; k < 3; k++) {
            ssize_t r = jet_iobuf_read_fd(&in, sv[1], 1 + rnd() % (200 * KiB));
            if (r == -EAGAIN) {
                eagain_r++;
                break;
            }
            JT_REQUIRE(r > 0);
        }
    }
    JT_CHECK(eagain_w > 0);
    JT_CHECK(partial > 0);
    JT_CHECK(eagain_r > 0);
    JT_CHECK(jet_iobuf_empty(&out));
    JT_CHECK(jet_iobuf_equals(&in, data, len) == 0);
    JT_CHECK(structure_ok(&in));

    size_t nref = jet_iobuf_nref(&in);
    JT_CHECK_EQ(jet_iobuf_read_fd(&in, sv[1], 65536), -EAGAIN);
    JT_CHECK_EQ(jet_iobuf_nref(&in), nref);
    JT_CHECK_EQ(jet_iobuf_len(&in), len);
    close(sv[0]);
    JT_CHECK_EQ(jet_iobuf_read_fd(&in, sv[1], 65536), 0);
    JT_CHECK_EQ(jet_iobuf_len(&in), len);
    close(sv[1]);
    jet_iobuf_fini(&out);
    jet_iobuf_fini(&in);
    free(data);
    JT_CHECK(all_idle());
}

/* Reading continues in the tail block and gives back what it did not fill. */
static void test_read_into_tail(void)
{
    int pfd[2];
    JT_REQUIRE(pipe(pfd) == 0);
    jet_iobuf_t a, b;
    jet_iobuf_init(&a);
    jet_iobuf_init(&b);
    JT_CHECK_EQ(jet_iobuf_append(&a, "0123456789", 10), 0);
    jet_block_t *blk = ref_at(&a, 0)->block;
    JT_CHECK_EQ(write(pfd[1], "abcdef", 6), 6);
    JT_CHECK_EQ(jet_iobuf_read_fd(&a, pfd[0], 100000), 6);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 1);
    JT_CHECK_EQ(atomic_load(&blk->used), 16);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "0123456789abcdef", 16), 0);

    /* b shares the block and ends where a ends: whichever claims first owns
     * the space, the other goes to a new block. */
    JT_CHECK_EQ(jet_iobuf_append_iobuf(&b, &a), 0);
    JT_CHECK_EQ(write(pfd[1], "XYZ", 3), 3);
    JT_CHECK_EQ(jet_iobuf_read_fd(&b, pfd[0], 100), 3);
    JT_CHECK_EQ(jet_iobuf_nref(&b), 1);
    JT_CHECK_EQ(atomic_load(&blk->used), 19);
    JT_CHECK_EQ(jet_iobuf_append(&a, "!", 1), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 2);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "0123456789abcdef!", 17), 0);
    JT_CHECK_EQ(jet_iobuf_equals(&b, "0123456789abcdefXYZ", 19), 0);

    /* A read larger than the tail's free space spans into fresh blocks;
     * unused fresh blocks go back to the pool. */
    size_t big = 20000;
    unsigned char *data = malloc(big);
    fill_random(data, big);
    JT_CHECK_EQ(write(pfd[1], data, big), (ssize_t)big);
    ssize_t got = 0;
    while (got < (ssize_t)big) {
        ssize_t r = jet_iobuf_read_fd(&b, pfd[0], 1 * MiB);
        JT_REQUIRE(r > 0);
        got += r;
    }
    JT_CHECK_EQ(atomic_load(&blk->used), blk->cap);
    JT_CHECK(structure_ok(&b));
    unsigned char *all = malloc(19 + big);
    jet_iobuf_copy_to(&b, all, 19 + big, 0);
    JT_CHECK(memcmp(all, "0123456789abcdefXYZ", 19) == 0 && memcmp(all + 19, data, big) == 0);
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    JT_CHECK_EQ(s.blocks_in_use[0], jet_iobuf_nref(&b) + 1); /* a's "!" block */

    /* max caps the read. */
    JT_CHECK_EQ(write(pfd[1], "0123456789", 10), 10);
    JT_CHECK_EQ(jet_iobuf_read_fd(&a, pfd[0], 4), 4);
    JT_CHECK_EQ(jet_iobuf_read_fd(&a, pfd[0], 0), 0);
    JT_CHECK_EQ(jet_iobuf_read_fd(&a, pfd[0], 100), 6);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "0123456789abcdef!0123456789", 27), 0);
    close(pfd[0]);
    close(pfd[1]);
    jet_iobuf_fini(&a);
    jet_iobuf_fini(&b);
    free(data);
    free(all);
    JT_CHECK(all_idle());
}

static void test_fd_limits_and_errors(void)
{
    static char mem[20000];
    for (size_t i = 0; i < sizeof mem; i++)
        mem[i] = (char)(i * 13);
    int pfd[2];
    JT_REQUIRE(pipe(pfd) == 0);
    jet_iobuf_t a;
    jet_iobuf_init(&a);
    for (int i = 0; i < 2000; i++)
        JT_CHECK_EQ(jet_iobuf_append_user(&a, mem + i * 10, 10, NULL, NULL), 0);
    /* At most IOV_MAX pieces per call. */
    JT_CHECK_EQ(jet_iobuf_write_fd(&a, pfd[1], SIZE_MAX), IOV_MAX * 10);
    JT_CHECK_EQ(jet_iobuf_len(&a), 20000 - IOV_MAX * 10);
    /* At most max bytes, cutting a piece in the middle. */
    JT_CHECK_EQ(jet_iobuf_write_fd(&a, pfd[1], 15), 15);
    JT_CHECK_EQ(jet_iobuf_equals(&a, mem + IOV_MAX * 10 + 15, 20000 - IOV_MAX * 10 - 15), 0);
    JT_CHECK_EQ(jet_iobuf_write_fd(&a, pfd[1], 0), 0);
    char back[IOV_MAX * 10 + 15];
    JT_CHECK_EQ(read(pfd[0], back, sizeof back), (ssize_t)sizeof back);
    JT_CHECK(memcmp(back, mem, sizeof back) == 0);

    /* Errors leave the buffer as it was. */
    size_t len = jet_iobuf_len(&a);
    JT_CHECK_EQ(jet_iobuf_write_fd(&a, -1, SIZE_MAX), -EBADF);
    JT_CHECK_EQ(jet_iobuf_read_fd(&a, -1, 100), -EBADF);
    JT_CHECK_EQ(jet_iobuf_len(&a), len);
    close(pfd[0]);
    signal(SIGPIPE, SIG_IGN);
    JT_CHECK_EQ(jet_iobuf_write_fd(&a, pfd[1], SIZE_MAX), -EPIPE);
    JT_CHECK_EQ(jet_iobuf_len(&a), len);
    close(pfd[1]);
    jet_iobuf_t e;
    jet_iobuf_init(&e);
    JT_CHECK_EQ(jet_iobuf_write_fd(&e, -1, SIZE_MAX), 0); /* nothing to write */
    jet_iobuf_fini(&e);
    jet_iobuf_fini(&a);
    JT_CHECK(all_idle());
}

/* ---- allocation failure -------------------------------------------------- */

typedef struct held {
    jet_block_t **b;
    size_t n, cap;
} held_t;

static void hold_all(held_t *h, size_t size)
{
    jet_block_t *b;
    while ((b = jet__block_alloc(size)) != NULL) {
        if (h->n == h->cap) {
            h->cap = h->cap ? h->cap * 2 : 1024;
            h->b = realloc(h->b, h->cap * sizeof *h->b);
            if (!h->b) abort();
        }
        h->b[h->n++] = b;
    }
}

static void test_enomem(void)
{
    int pfd[2];
    JT_REQUIRE(pipe(pfd) == 0);
    jet_iobuf_t a, e;
    jet_iobuf_init(&a);
    jet_iobuf_init(&e);
    JT_CHECK_EQ(jet_iobuf_append(&a, "0123456789", 10), 0);
    jet_block_t *tail = ref_at(&a, 0)->block;

    /* No more mapping, and every free block taken. */
    int32_t cap0 = JET_FLAG(iobuf_max_mb);
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    JET_FLAG_STORE(iobuf_max_mb, (int32_t)((s.bytes_mapped + MiB - 1) / MiB));
    held_t held = {0};
    hold_all(&held, JET_BLOCK_SIZE_8K);
    hold_all(&held, JET_BLOCK_SIZE_64K);
    JT_CHECK(jet__block_alloc_default() == NULL);

    /* Needs the tail's free space and more blocks: nothing changes, and the
     * tail space claimed on the way is given back. */
    size_t big = 30000;
    unsigned char *data = malloc(big);
    fill_random(data, big);
    JT_CHECK_EQ(jet_iobuf_append(&a, data, big), -ENOMEM);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "0123456789", 10), 0);
    JT_CHECK_EQ(jet_iobuf_nref(&a), 1);
    JT_CHECK_EQ(atomic_load(&tail->used), 10);
    JT_CHECK(structure_ok(&a));
    JT_CHECK_EQ(jet_iobuf_append(&e, "x", 1), -ENOMEM);
    JT_CHECK(jet_iobuf_empty(&e) && jet_iobuf_nref(&e) == 0);

    /* What fits in the tail block still works; so does sharing and user
     * memory, which need no block. */
    JT_CHECK_EQ(jet_iobuf_append(&a, "ab", 2), 0);
    JT_CHECK_EQ(jet_iobuf_append_iobuf(&e, &a), 0);
    JT_CHECK_EQ(jet_iobuf_append_user(&e, data, 100, NULL, NULL), 0);
    JT_CHECK_EQ(jet_iobuf_len(&e), 112);

    /* read_fd: with tail space it reads into it; without, -ENOMEM and the
     * bytes stay in the pipe. */
    JT_CHECK_EQ(write(pfd[1], "pipe", 4), 4);
    jet_iobuf_t f;
    jet_iobuf_init(&f);
    JT_CHECK_EQ(jet_iobuf_read_fd(&f, pfd[0], 100), -ENOMEM);
    JT_CHECK(jet_iobuf_empty(&f));
    JT_CHECK_EQ(jet_iobuf_read_fd(&a, pfd[0], 100), 4);
    JT_CHECK_EQ(jet_iobuf_equals(&a, "0123456789abpipe", 16), 0);

    for (size_t i = 0; i < held.n; i++)
        jet__block_unref(held.b[i]);
    free(held.b);
    JET_FLAG_STORE(iobuf_max_mb, cap0);
    JT_CHECK_EQ(jet_iobuf_append(&a, data, big), 0);
    JT_CHECK_EQ(jet_iobuf_len(&a), 16 + big);
    jet_iobuf_fini(&a);
    jet_iobuf_fini(&e);
    jet_iobuf_fini(&f);
    close(pfd[0]);
    close(pfd[1]);
    free(data);
    JT_CHECK(all_idle());
}

/* Cases that look at where appends put their bytes (offsets, block counts,
 * reference counts) run with blocks of their own for every append, as
 * buffers had before the thread's shared block (iobuf_share_max 0). */
#define JT_RUN_PRIVATE(fn)                                                                         \
    do {                                                                                           \
        int32_t share_ = JET_FLAG(iobuf_share_max);                                                \
        JET_FLAG_STORE(iobuf_share_max, 0);                                                        \
        JT_RUN(fn);                                                                                \
        JET_FLAG_STORE(iobuf_share_max, share_);                                                   \
    } while (0)

int main(void)
{
    JT_RUN(test_empty_and_small);
    JT_RUN_PRIVATE(test_block_choice_and_merge);
    JT_RUN_PRIVATE(test_share_then_append);
    JT_RUN(test_share_append_threads);
    JT_RUN(test_small_appends_share_a_block);
    JT_RUN(test_shared_block_in_use_while_referenced);
    JT_RUN(test_shared_block_at_thread_exit);
    JT_RUN(test_shared_block_filled_byte_by_byte);
    JT_RUN(test_user_blocks);
    JT_RUN(test_user_block_huge);
    JT_RUN(test_ref_array);
    JT_RUN(test_random_ops);
    JT_RUN(test_pipe_large);
    JT_RUN(test_read_without_limit);
    JT_RUN(test_socketpair_nonblocking);
    JT_RUN_PRIVATE(test_read_into_tail);
    JT_RUN(test_fd_limits_and_errors);
    JT_RUN_PRIVATE(test_enomem);
    return jt_finish();
}
