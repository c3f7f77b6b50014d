/* Block pool: size classes, address lookup, registrar, threads, memory cap,
 * regions given back for other sizes, and re-mapping a region's memfd (the
 * cross-process sharing property). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "iobuf/block_pool.h"
#include "jetrpc/flags.h"
#include "testutil.h"

JET_FLAG_DECLARE_INT32(iobuf_region_mb_8k);
JET_FLAG_DECLARE_INT32(iobuf_region_mb_64k);
JET_FLAG_DECLARE_INT32(iobuf_region_mb_2m);
JET_FLAG_DECLARE_INT32(iobuf_max_mb);
JET_FLAG_DECLARE_INT32(iobuf_region_min_age_ms);

#define MiB ((size_t)1 << 20)

static jet_block_pool_stats_t stats(void)
{
    jet_block_pool_stats_t s;
    jet__block_pool_stats(&s);
    return s;
}

static int all_idle(void)
{
    jet_block_pool_stats_t s = stats();
    return s.blocks_in_use[0] == 0 && s.blocks_in_use[1] == 0 && s.blocks_in_use[2] == 0;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    return jt_xorshift64(&rng_state);
}

/* ---- classes --------------------------------------------------------- */

static void check_block(jet_block_t *b, int cls, uint32_t size)
{
    JT_REQUIRE(b != NULL);
    JT_CHECK_EQ(b->cls, cls);
    JT_CHECK_EQ(b->cap, size);
    JT_CHECK_EQ(atomic_load(&b->refcnt), 1);
    JT_CHECK_EQ(atomic_load(&b->used), 0);
    JT_REQUIRE(b->region != NULL);
    JT_CHECK_EQ(b->region->cls, cls);
    JT_CHECK_EQ(b->region->block_size, size);
    JT_CHECK(b->data >= b->region->base && b->data + size <= b->region->base + b->region->len);
    JT_CHECK_EQ((size_t)(b->data - b->region->base) % size, 0);
    memset(b->data, 0xa5, size); /* the whole block is payload */
}

static void test_class_selection(void)
{
    static const struct {
        size_t ask;
        int cls;
        uint32_t size;
    } cases[] = {
        {1, JET_BLOCK_CLASS_8K, JET_BLOCK_SIZE_8K},
        {JET_BLOCK_SIZE_8K, JET_BLOCK_CLASS_8K, JET_BLOCK_SIZE_8K},
        {JET_BLOCK_SIZE_8K + 1, JET_BLOCK_CLASS_64K, JET_BLOCK_SIZE_64K},
        {JET_BLOCK_SIZE_64K, JET_BLOCK_CLASS_64K, JET_BLOCK_SIZE_64K},
        {JET_BLOCK_SIZE_64K + 1, JET_BLOCK_CLASS_2M, JET_BLOCK_SIZE_2M},
        {JET_BLOCK_SIZE_2M, JET_BLOCK_CLASS_2M, JET_BLOCK_SIZE_2M},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jet_block_t *b = jet__block_alloc(cases[i].ask);
        check_block(b, cases[i].cls, cases[i].size);
        JT_CHECK_EQ(stats().blocks_in_use[cases[i].cls], 1);
        if (b) jet__block_unref(b);
        JT_CHECK_EQ(stats().blocks_in_use[cases[i].cls], 0);
    }
    jet_block_t *d = jet__block_alloc_default();
    check_block(d, JET_BLOCK_CLASS_8K, JET_BLOCK_SIZE_8K);
    if (d) jet__block_unref(d);

    errno = 0;
    JT_CHECK(jet__block_alloc(JET_BLOCK_SIZE_2M + 1) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    errno = 0;
    JT_CHECK(jet__block_alloc(0) == NULL);
    JT_CHECK_EQ(errno, EINVAL);
    errno = 0;
    JT_CHECK(jet__block_alloc(SIZE_MAX) == NULL);
    JT_CHECK_EQ(errno, EINVAL);

    /* Extra references keep a block out of the pool until the last drop. */
    jet_block_t *b = jet__block_alloc(100);
    JT_REQUIRE(b);
    jet__block_ref(b);
    jet__block_unref(b);
    JT_CHECK_EQ(stats().blocks_in_use[0], 1);
    jet__block_unref(b);
    JT_CHECK(all_idle());

    jet_block_pool_stats_t s = stats();
    JT_CHECK(s.regions >= 3);
    JT_CHECK(s.bytes_mapped >= 3 * MiB);
}

/* ---- lookup ------------------------------------------------------------ */

typedef struct blockset {
    jet_block_t **b;
    size_t n, cap;
} blockset_t;

static void bs_add(blockset_t *s, jet_block_t *b)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->b = realloc(s->b, s->cap * sizeof *s->b);
        if (!s->b) abort();
    }
    s->b[s->n++] = b;
}

static void bs_free(blockset_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        jet__block_unref(s->b[i]);
    free(s->b);
    memset(s, 0, sizeof *s);
}

static int static_var;

static void check_region_lookup(const jet_region_t *r)
{
    for (uint32_t i = 0; i < r->nblock; i++) {
        const char *p = r->descs[i].data;
        if (jet__block_pool_find(p) != r || jet__block_pool_find(p + r->block_size - 1) != r ||
            jet__block_pool_find(p + r->block_size / 2) != r) {
            JT_CHECK(!"block address not found in its region");
            return;
        }
    }
    /* Just outside the region: another (adjacent) region or nothing. */
    const jet_region_t *below = jet__block_pool_find(r->base - 1);
    JT_CHECK(below != r);
    if (below) JT_CHECK(below->base + below->len == r->base);
    const jet_region_t *above = jet__block_pool_find(r->base + r->len);
    JT_CHECK(above != r);
    if (above) JT_CHECK(above->base == r->base + r->len);
}

static void test_lookup(void)
{
    blockset_t set = {0};
    /* Enough blocks to span several regions of each class (small regions are
     * configured in main). */
    for (int i = 0; i < 600; i++)
        bs_add(&set, jet__block_alloc(1 + rnd() % JET_BLOCK_SIZE_8K));
    for (int i = 0; i < 60; i++)
        bs_add(&set, jet__block_alloc(JET_BLOCK_SIZE_64K));
    for (int i = 0; i < 7; i++)
        bs_add(&set, jet__block_alloc(JET_BLOCK_SIZE_2M));
    for (size_t i = 0; i < set.n; i++)
        JT_REQUIRE(set.b[i] != NULL);
    JT_CHECK(stats().regions >= 10);

    const jet_region_t *seen[1024];
    size_t nseen = 0;
    for (size_t i = 0; i < set.n; i++) {
        jet_block_t *b = set.b[i];
        JT_CHECK(jet__block_pool_find(b->data) == b->region);
        JT_CHECK(jet__block_pool_find(b->data + b->cap - 1) == b->region);
        size_t k = 0;
        while (k < nseen && seen[k] != b->region)
            k++;
        if (k == nseen && nseen < 1024) seen[nseen++] = b->region;
    }
    for (size_t k = 0; k < nseen; k++)
        check_region_lookup(seen[k]);

    int local = 0;
    void *heap = malloc(64);
    JT_CHECK(jet__block_pool_find(&local) == NULL);
    JT_CHECK(jet__block_pool_find(heap) == NULL);
    JT_CHECK(jet__block_pool_find(&static_var) == NULL);
    JT_CHECK(jet__block_pool_find(NULL) == NULL);
    JT_CHECK(jet__block_pool_find((void *)~(uintptr_t)0) == NULL);
    free(heap);

    /* A user block is not pool memory. */
    char mem[16];
    jet_block_t *u = jet__block_wrap_user(mem, sizeof mem, NULL, NULL);
    JT_REQUIRE(u);
    JT_CHECK(u->region == NULL);
    JT_CHECK_EQ(u->cls, JET_BLOCK_CLASS_USER);
    JT_CHECK_EQ(u->cap, sizeof mem);
    JT_CHECK_EQ(atomic_load(&u->used), sizeof mem);
    JT_CHECK(jet__block_pool_find(mem) == NULL);
    jet__block_unref(u);

    bs_free(&set);
    JT_CHECK(all_idle());
}

/* Readers search the table while a writer keeps adding regions. */
#define LG_MAX 4096
static jet_block_t *lg_blocks[LG_MAX];
static _Atomic size_t lg_n;
static _Atomic int lg_stop;
static _Atomic long lg_bad, lg_lookups;

static void *lg_reader(void *arg)
{
    uint64_t x = (uintptr_t)arg * 7919 + 1;
    while (!atomic_load(&lg_stop)) {
        size_t n = atomic_load_explicit(&lg_n, memory_order_acquire);
        if (n == 0) continue;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        jet_block_t *b = lg_blocks[(x >> 33) % n];
        if (jet__block_pool_find(b->data + (x >> 20) % b->cap) != b->region)
            atomic_fetch_add(&lg_bad, 1);
        atomic_fetch_add_explicit(&lg_lookups, 1, memory_order_relaxed);
    }
    return NULL;
}

static void test_lookup_during_growth(void)
{
    pthread_t th[2];
    atomic_store(&lg_n, 0);
    atomic_store(&lg_stop, 0);
    for (long i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, lg_reader, (void *)i);
    size_t regions0 = stats().regions;
    /* 64 KiB regions hold 16 blocks here: every 16th allocation adds one. */
    for (size_t i = 0; i < 400; i++) {
        jet_block_t *b = jet__block_alloc(JET_BLOCK_SIZE_64K);
        if (!b) break;
        lg_blocks[i] = b;
        atomic_store_explicit(&lg_n, i + 1, memory_order_release);
        if (i % 16 == 0) {
            /* Let the readers search this table before it grows again (a loaded
             * machine may not schedule them otherwise); bounded, never timed. */
            long seen = atomic_load(&lg_lookups);
            uint64_t until = jt_now_us() + 2000000;
            while (atomic_load(&lg_lookups) == seen && jt_now_us() < until) sched_yield();
        }
    }
    atomic_store(&lg_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    JT_CHECK_EQ(atomic_load(&lg_n), 400);
    JT_CHECK(stats().regions >= regions0 + 20);
    JT_CHECK_EQ(atomic_load(&lg_bad), 0);
    JT_CHECK(atomic_load(&lg_lookups) > 0);
    for (size_t i = 0; i < atomic_load(&lg_n); i++)
        jet__block_unref(lg_blocks[i]);
    JT_CHECK(all_idle());
}

/* ---- registrar --------------------------------------------------------- */

#define FR_MAX 1024
typedef struct fr_entry {
    void *base;
    size_t len;
    int memfd;
    int live;
} fr_entry_t;

typedef struct fake_reg {
    int nreg, ndereg, nfail;
    int nslot;      /* entries of r[] ever used; a deregistered one is reused */
    int fail_after; /* fail the call after this many successes; -1 never */
    int fail_code;
    fr_entry_t r[FR_MAX];
} fake_reg_t;

static int fr_reg(void *ctx, void *base, size_t len, int memfd, void **reg_p)
{
    fake_reg_t *f = ctx;
    if (f->fail_after == 0) {
        f->nfail++;
        return f->fail_code;
    }
    if (f->fail_after > 0) f->fail_after--;
    int i = 0;
    while (i < f->nslot && f->r[i].live)
        i++;
    if (i == FR_MAX) return -ENOSPC;
    if (i == f->nslot) f->nslot++;
    f->nreg++;
    f->r[i].base = base;
    f->r[i].len = len;
    f->r[i].memfd = memfd;
    f->r[i].live = 1;
    *reg_p = &f->r[i];
    return 0;
}

static void fr_dereg(void *ctx, void *reg)
{
    fake_reg_t *f = ctx;
    f->ndereg++;
    if (!reg) return;
    int *live = &((fr_entry_t *)reg)->live;
    if (*live != 1) f->nfail += 1000; /* dereg of something not registered */
    *live = 0;
}

static fake_reg_t fr;

static jet_registrar_t fr_registrar(fake_reg_t *f)
{
    return (jet_registrar_t){.name = "fake", .reg = fr_reg, .dereg = fr_dereg, .ctx = f};
}

static int fr_live(const fake_reg_t *f)
{
    int n = 0;
    for (int i = 0; i < f->nslot; i++)
        n += f->r[i].live;
    return n;
}

/* Checks that the region holding b carries the registration made for it. */
static void fr_check_block(const fake_reg_t *f, jet_block_t *b)
{
    const jet_region_t *g = jet__block_pool_find(b->data);
    JT_REQUIRE(g != NULL && g->reg != NULL);
    const fr_entry_t *e = g->reg;
    JT_CHECK(e >= &f->r[0] && e < &f->r[f->nslot]);
    JT_CHECK(e->live == 1);
    JT_CHECK(e->base == g->base);
    JT_CHECK_EQ(e->len, g->len);
    JT_CHECK_EQ(e->memfd, g->memfd);
}

static void test_registrar(void)
{
    blockset_t held = {0};
    /* Some blocks of every class exist before the registrar. */
    bs_add(&held, jet__block_alloc(1));
    bs_add(&held, jet__block_alloc(JET_BLOCK_SIZE_64K));
    bs_add(&held, jet__block_alloc(JET_BLOCK_SIZE_2M));
    size_t regions0 = stats().regions;
    JT_REQUIRE(regions0 >= 3);

    memset(&fr, 0, sizeof fr);
    fr.fail_after = -1;
    jet_registrar_t r = fr_registrar(&fr);
    JT_REQUIRE(jet__block_pool_set_registrar(&r) == 0);
    JT_CHECK_EQ(fr.nreg, (int)regions0);
    for (size_t i = 0; i < held.n; i++)
        fr_check_block(&fr, held.b[i]);

    fake_reg_t other = {.fail_after = -1};
    jet_registrar_t r2 = fr_registrar(&other);
    JT_CHECK_EQ(jet__block_pool_set_registrar(&r2), -EBUSY);
    JT_CHECK_EQ(other.nreg, 0);
    JT_CHECK_EQ(jet__block_pool_set_registrar(NULL), -EINVAL);

    /* Growth: every new region is registered before its first block is used. */
    for (int i = 0; i < 5000 && stats().regions < regions0 + 3; i++) {
        jet_block_t *b = jet__block_alloc(JET_BLOCK_SIZE_64K);
        JT_REQUIRE(b);
        bs_add(&held, b);
        fr_check_block(&fr, b);
    }
    size_t regions1 = stats().regions;
    JT_CHECK_EQ(regions1, regions0 + 3);
    JT_CHECK_EQ(fr.nreg, (int)regions1);

    /* A failing registration: the region is not used and the allocation that
     * needed it fails; the next one grows again. */
    fr.fail_after = 0;
    fr.fail_code = -EIO;
    jet_block_pool_stats_t before = stats();
    jet_block_t *b;
    int got = 0;
    while (got < 100 && (b = jet__block_alloc(JET_BLOCK_SIZE_2M)) != NULL) {
        bs_add(&held, b);
        got++;
    }
    JT_CHECK(b == NULL);
    JT_CHECK_EQ(errno, ENOMEM);
    JT_CHECK_EQ(fr.nfail, 1);
    jet_block_pool_stats_t after = stats();
    JT_CHECK_EQ(after.regions, before.regions);
    JT_CHECK_EQ(after.bytes_mapped, before.bytes_mapped);
    fr.fail_after = -1;
    b = jet__block_alloc(JET_BLOCK_SIZE_2M);
    JT_REQUIRE(b);
    bs_add(&held, b);
    fr_check_block(&fr, b);
    JT_CHECK_EQ(stats().regions, before.regions + 1);

    /* Clear deregisters every region exactly once. */
    size_t regions2 = stats().regions;
    JT_CHECK_EQ(fr_live(&fr), (int)regions2);
    jet__block_pool_clear_registrar();
    JT_CHECK_EQ(fr.ndereg, (int)regions2);
    JT_CHECK_EQ(fr_live(&fr), 0);
    JT_CHECK(fr.nfail < 1000);
    for (size_t i = 0; i < held.n; i++)
        JT_CHECK(jet__block_pool_find(held.b[i]->data)->reg == NULL);
    jet__block_pool_clear_registrar(); /* nothing installed: no-op */
    JT_CHECK_EQ(fr.ndereg, (int)regions2);

    /* Blocks stay usable and the pool grows without a registrar. */
    b = jet__block_alloc(JET_BLOCK_SIZE_2M);
    JT_REQUIRE(b);
    bs_add(&held, b);
    JT_CHECK(jet__block_pool_find(b->data)->reg == NULL);

    /* A failure during install leaves nothing installed and undoes the
     * registrations it made. */
    size_t regions3 = stats().regions;
    memset(&fr, 0, sizeof fr);
    fr.fail_after = 2;
    fr.fail_code = -ENOSPC;
    JT_CHECK_EQ(jet__block_pool_set_registrar(&r), -ENOSPC);
    JT_CHECK_EQ(fr.nreg, 2);
    JT_CHECK_EQ(fr.ndereg, 2);
    JT_CHECK_EQ(fr_live(&fr), 0);
    JT_CHECK(jet__block_pool_find(held.b[0]->data)->reg == NULL);
    /* ... so a new install is accepted and covers every region. */
    memset(&other, 0, sizeof other);
    other.fail_after = -1;
    JT_REQUIRE(jet__block_pool_set_registrar(&r2) == 0);
    JT_CHECK_EQ(other.nreg, (int)regions3);
    for (size_t i = 0; i < held.n; i++)
        fr_check_block(&other, held.b[i]);
    jet__block_pool_clear_registrar();
    JT_CHECK_EQ(other.ndereg, (int)regions3);
    JT_CHECK_EQ(fr_live(&other), 0);

    bs_free(&held);
    JT_CHECK(all_idle());
}

/* ---- threads ------------------------------------------------------------ */

#define CH_THREADS 4
#define CH_SLOTS   64
static jet_block_t *_Atomic ch_slots[CH_SLOTS]; /* blocks handed between threads */
static _Atomic long ch_bad;

static void ch_stamp(jet_block_t *b, uint64_t tag)
{
    memcpy(b->data, &tag, sizeof tag);
    memcpy(b->data + b->cap - sizeof tag, &tag, sizeof tag);
    atomic_store_explicit(&b->used, (uint32_t)(tag & 0xffff), memory_order_relaxed);
}

static void ch_verify_and_free(jet_block_t *b, uint64_t tag)
{
    uint64_t a, z;
    memcpy(&a, b->data, sizeof a);
    memcpy(&z, b->data + b->cap - sizeof z, sizeof z);
    if (a != tag || z != tag || atomic_load(&b->used) != (uint32_t)(tag & 0xffff))
        atomic_fetch_add(&ch_bad, 1);
    jet__block_unref(b);
}

static void *ch_worker(void *arg)
{
    uint64_t id = (uintptr_t)arg;
    uint64_t x = 0x1234567 + id * 0x9e3779b9;
    jet_block_t *mine[256];
    uint64_t tags[256];
    int n = 0;
    uint64_t seq = 0;
    for (int it = 0; it < 40000; it++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned op = x % 16;
        if (op < 8 && n < 256) {
            size_t size = op < 6 ? 1 + x % JET_BLOCK_SIZE_8K
                                 : (op < 7 ? JET_BLOCK_SIZE_64K : JET_BLOCK_SIZE_64K + 1);
            jet_block_t *b = jet__block_alloc(size);
            if (!b) {
                atomic_fetch_add(&ch_bad, 1);
                continue;
            }
            tags[n] = (id << 56) | ++seq;
            ch_stamp(b, tags[n]);
            mine[n++] = b;
        } else if (op < 14 && n > 0) {
            int k = (int)((x >> 8) % (unsigned)n);
            ch_verify_and_free(mine[k], tags[k]);
            mine[k] = mine[--n];
            tags[k] = tags[n];
        } else if (n > 0) {
            /* Hand a block to another thread through a slot: it may be
             * freed there, into that thread's cache. The tag travels in
             * the block itself. */
            jet_block_t *b = mine[--n];
            jet_block_t *old = atomic_exchange(&ch_slots[(x >> 8) % CH_SLOTS], b);
            if (old) {
                uint64_t tag;
                memcpy(&tag, old->data, sizeof tag);
                ch_verify_and_free(old, tag);
            }
        }
    }
    for (int k = 0; k < n; k++)
        ch_verify_and_free(mine[k], tags[k]);
    return NULL;
}

static void test_threads_churn(void)
{
    JT_REQUIRE(all_idle());
    pthread_t th[CH_THREADS];
    for (long i = 0; i < CH_THREADS; i++)
        pthread_create(&th[i], NULL, ch_worker, (void *)(i + 1));
    for (int i = 0; i < CH_THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CH_SLOTS; i++) {
        jet_block_t *b = atomic_exchange(&ch_slots[i], NULL);
        if (b) {
            uint64_t tag;
            memcpy(&tag, b->data, sizeof tag);
            ch_verify_and_free(b, tag);
        }
    }
    JT_CHECK_EQ(atomic_load(&ch_bad), 0);
    JT_CHECK(all_idle());
}

/* A thread's cached 8 KiB blocks go back to the shared list when it exits. */
#define TE_N 40
static jet_block_t *te_blocks[TE_N];

static void *te_worker(void *arg)
{
    for (int i = 0; i < TE_N; i++)
        te_blocks[i] = jet__block_alloc_default();
    for (int i = 0; i < TE_N; i++)
        if (te_blocks[i]) jet__block_unref(te_blocks[i]);
    return NULL;
}

static void test_thread_exit_flush(void)
{
    pthread_t th;
    pthread_create(&th, NULL, te_worker, NULL);
    pthread_join(th, NULL);
    for (int i = 0; i < TE_N; i++)
        JT_REQUIRE(te_blocks[i]);
    JT_CHECK(all_idle());
    size_t regions0 = stats().regions;
    /* The exited thread's blocks sit on top of the shared list: they come
     * out once this thread's own cache (at most 64) is used up. */
    jet_block_t *got[64 + TE_N + 64];
    int ngot = 0, found = 0;
    while (found < TE_N && ngot < (int)(sizeof got / sizeof got[0])) {
        jet_block_t *b = jet__block_alloc_default();
        JT_REQUIRE(b);
        got[ngot++] = b;
        for (int i = 0; i < TE_N; i++)
            found += te_blocks[i] == b;
    }
    JT_CHECK_EQ(found, TE_N);
    JT_CHECK_EQ(stats().regions, regions0);
    JT_CHECK_EQ(stats().blocks_in_use[0], (size_t)ngot);
    for (int i = 0; i < ngot; i++)
        jet__block_unref(got[i]);
    JT_CHECK(all_idle());
}

/* ---- memory cap --------------------------------------------------------- */

static void test_memory_cap(void)
{
    int32_t cap0 = JET_FLAG(iobuf_max_mb);
    jet_block_pool_stats_t s0 = stats();
    size_t cap_mb = (s0.bytes_mapped + MiB - 1) / MiB + 3;
    JET_FLAG_STORE(iobuf_max_mb, (int32_t)cap_mb);
    blockset_t held = {0};
    jet_block_t *b;
    errno = 0;
    while (held.n < 100000 && (b = jet__block_alloc(JET_BLOCK_SIZE_64K)) != NULL)
        bs_add(&held, b);
    JT_CHECK(b == NULL);
    JT_CHECK_EQ(errno, ENOMEM);
    jet_block_pool_stats_t s1 = stats();
    JT_CHECK(s1.bytes_mapped <= cap_mb * MiB);
    /* Up to the cap, memory was mapped: at most one 64 KiB short of it. */
    JT_CHECK(s1.bytes_mapped + JET_BLOCK_SIZE_64K > cap_mb * MiB);
    JT_CHECK(s1.regions > s0.regions);
    JT_CHECK_EQ(s1.blocks_in_use[1], held.n);
    /* 2 MiB blocks: whatever is free is handed out, then ENOMEM too. */
    size_t n2 = 0;
    while (n2 < 1000 && (b = jet__block_alloc(JET_BLOCK_SIZE_2M)) != NULL) {
        bs_add(&held, b);
        n2++;
    }
    JT_CHECK(b == NULL);
    JT_CHECK_EQ(errno, ENOMEM);
    JT_CHECK(stats().bytes_mapped <= cap_mb * MiB);

    /* Raising the cap lets the pool grow again. */
    JET_FLAG_STORE(iobuf_max_mb, cap0);
    b = jet__block_alloc(JET_BLOCK_SIZE_2M);
    JT_CHECK(b != NULL);
    if (b) bs_add(&held, b);
    bs_free(&held);
    JT_CHECK(all_idle());
}

/* ---- giving regions back ----------------------------------------------- */

/* The flags a case changes, as they were. */
typedef struct pool_limits {
    int32_t cap_mb, min_age_ms;
} pool_limits_t;

/* Sets the cap extra_mb above what is mapped now (*cap_p: the cap in bytes)
 * and the regions' minimum age; pool_limits_restore puts both back. */
static pool_limits_t pool_limits_set(size_t extra_mb, int32_t min_age_ms, size_t *cap_p)
{
    pool_limits_t was = {JET_FLAG(iobuf_max_mb), JET_FLAG(iobuf_region_min_age_ms)};
    size_t cap_mb = (stats().bytes_mapped + MiB - 1) / MiB + extra_mb;
    JET_FLAG_STORE(iobuf_max_mb, (int32_t)cap_mb);
    JET_FLAG_STORE(iobuf_region_min_age_ms, min_age_ms);
    if (cap_p) *cap_p = cap_mb * MiB;
    return was;
}

static void pool_limits_restore(pool_limits_t was)
{
    JET_FLAG_STORE(iobuf_max_mb, was.cap_mb);
    JET_FLAG_STORE(iobuf_region_min_age_ms, was.min_age_ms);
}

/* Allocates blocks of size until the pool says ENOMEM (at most 100,000). */
static size_t fill(blockset_t *s, size_t size)
{
    size_t n = 0;
    jet_block_t *b;
    errno = 0;
    while (n < 100000 && (b = jet__block_alloc(size)) != NULL) {
        bs_add(s, b);
        n++;
    }
    JT_CHECK(n < 100000);
    JT_CHECK_EQ(errno, ENOMEM);
    return n;
}

/* After a fill of one class, every byte under the cap is that class's but
 * less than one block: regions of the others were given back for it, all
 * but those too small together to hold one more block. */
static void check_filled(int cls, size_t cap, bool registrar)
{
    static const size_t size[] = {JET_BLOCK_SIZE_8K, JET_BLOCK_SIZE_64K, JET_BLOCK_SIZE_2M};
    jet_block_pool_stats_t s = stats();
    JT_CHECK(s.bytes_mapped <= cap);
    JT_CHECK(s.blocks_in_use[cls] * size[cls] + size[cls] > cap);
    size_t others = 0;
    for (int k = 0; k < JET_BLOCK_NCLASS; k++)
        if (k != cls) others += s.bytes_mapped_class[k];
    JT_CHECK(others < size[cls]);
    /* Every region mapped is registered once, and only those. */
    if (registrar) JT_CHECK_EQ(fr_live(&fr), (int)s.regions);
    JT_CHECK(fr.nfail < 1000);
}

static void test_give_back_for_other_sizes(void)
{
    JT_REQUIRE(all_idle());
    memset(&fr, 0, sizeof fr);
    fr.fail_after = -1;
    jet_registrar_t r = fr_registrar(&fr);
    JT_REQUIRE(jet__block_pool_set_registrar(&r) == 0);
    jet_block_pool_stats_t s0 = stats();
    size_t cap;
    pool_limits_t was = pool_limits_set(16, 0, &cap);

    /* Each class in turn takes all the memory the previous one freed.
     * Without giving back, a class could use only what it mapped before the
     * cap was reached: the 64 KiB fill would get nothing of the 16 MiB the
     * 2 MiB blocks held. */
    static const size_t order[] = {JET_BLOCK_SIZE_2M, JET_BLOCK_SIZE_64K, JET_BLOCK_SIZE_8K,
                                   JET_BLOCK_SIZE_2M};
    static const int order_cls[] = {2, 1, 0, 2};
    size_t given0 = s0.regions_given_back;
    for (int i = 0; i < 4; i++) {
        blockset_t held = {0};
        fill(&held, order[i]);
        check_filled(order_cls[i], cap, true);
        for (size_t j = 0; j < held.n; j += 97)
            fr_check_block(&fr, held.b[j]);
        size_t given = stats().regions_given_back;
        JT_CHECK(given > given0);
        JT_CHECK_EQ((size_t)fr.ndereg, given - s0.regions_given_back);
        given0 = given;
        bs_free(&held);
        JT_CHECK(all_idle());
    }

    /* A held block keeps its region: a fill of another class around it
     * leaves that region mapped, registered and found. */
    jet_block_t *keep = jet__block_alloc(JET_BLOCK_SIZE_64K);
    JT_REQUIRE(keep);
    memset(keep->data, 0x5a, keep->cap);
    blockset_t held = {0};
    fill(&held, JET_BLOCK_SIZE_2M);
    JT_CHECK(jet__block_pool_find(keep->data) == keep->region);
    fr_check_block(&fr, keep);
    JT_CHECK_EQ(stats().bytes_mapped_class[1], keep->region->len);
    bs_free(&held);
    jet__block_unref(keep);

    pool_limits_restore(was);
    jet__block_pool_clear_registrar();
    JT_CHECK_EQ(fr_live(&fr), 0);
    JT_CHECK(all_idle());
}

/* A region is given back only once it is iobuf_region_min_age_ms old: two
 * classes that take turns at the cap do not take a region from each other
 * on every allocation. */
static void test_give_back_spares_young_regions(void)
{
    pool_limits_t was = pool_limits_set(8, 300, NULL);
    blockset_t held = {0};
    jet_block_pool_stats_t s0 = stats();
    /* At least 8 MiB of new (young) 2 MiB regions, then all free. */
    fill(&held, JET_BLOCK_SIZE_2M);
    bs_free(&held);
    jet_block_pool_stats_t s1 = stats();
    size_t young = s1.bytes_mapped_class[2] - s0.bytes_mapped_class[2];
    JT_CHECK(young >= 8 * MiB);
    /* The 64 KiB class may take older regions, not those. */
    fill(&held, JET_BLOCK_SIZE_64K);
    JT_CHECK(stats().bytes_mapped_class[2] >= young);
    size_t n64 = held.n;
    bs_free(&held);
    /* Old enough now: given back for the 64 KiB class. */
    usleep(350000);
    fill(&held, JET_BLOCK_SIZE_64K);
    JT_CHECK(stats().bytes_mapped_class[2] < young);
    JT_CHECK(held.n > n64);
    bs_free(&held);
    pool_limits_restore(was);
    JT_CHECK(all_idle());
}

/* Regions that would not make room for the block asked for stay: a 1 MiB
 * region of 8 KiB blocks is not given back for a 2 MiB block it cannot
 * hold (each failed allocation gave it back, and the next 8 KiB one mapped
 * it again). */
static void test_give_back_none_when_short(void)
{
    size_t cap;
    pool_limits_t was = pool_limits_set(8, 0, &cap);
    blockset_t held = {0};
    fill(&held, JET_BLOCK_SIZE_8K); /* every byte under the cap is 8 KiB blocks */
    check_filled(0, cap, false);
    /* One whole region of them freed: 1 MiB (regions of 1 MiB here). */
    const jet_region_t *r = held.b[held.n / 2]->region;
    JT_REQUIRE(r->len == MiB);
    size_t kept = 0;
    for (size_t i = 0; i < held.n; i++) {
        if (held.b[i]->region == r)
            jet__block_unref(held.b[i]);
        else
            held.b[kept++] = held.b[i];
    }
    held.n = kept;
    size_t given0 = stats().regions_given_back;
    for (int i = 0; i < 20; i++) {
        errno = 0;
        JT_CHECK(jet__block_alloc(JET_BLOCK_SIZE_2M) == NULL);
        JT_CHECK_EQ(errno, ENOMEM);
    }
    JT_CHECK_EQ(stats().regions_given_back, given0);
    JT_CHECK(jet__block_pool_find(r->descs[0].data) == r);
    jet_block_t *b = jet__block_alloc(JET_BLOCK_SIZE_8K);
    JT_REQUIRE(b);
    JT_CHECK(b->region == r);
    jet__block_unref(b);
    bs_free(&held);
    pool_limits_restore(was);
    JT_CHECK(all_idle());
}

/* Readers search the table for blocks they hold while the main thread makes
 * the pool give regions back and map new ones, again and again. */
static void test_lookup_during_give_back(void)
{
    pthread_t th[2];
    /* Held 8 KiB blocks, spread over regions, for the readers. */
    size_t nheld = 0;
    for (size_t i = 0; i < 256; i++) {
        jet_block_t *b = jet__block_alloc(JET_BLOCK_SIZE_8K);
        JT_REQUIRE(b);
        lg_blocks[nheld++] = b;
    }
    atomic_store(&lg_n, nheld);
    atomic_store(&lg_stop, 0);
    atomic_store(&lg_bad, 0);
    atomic_store(&lg_lookups, 0);
    for (long i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, lg_reader, (void *)i);
    pool_limits_t was = pool_limits_set(12, 0, NULL);
    size_t given0 = stats().regions_given_back;
    for (int round = 0; round < 20; round++) {
        blockset_t held = {0};
        fill(&held, round % 2 ? JET_BLOCK_SIZE_64K : JET_BLOCK_SIZE_2M);
        bs_free(&held);
    }
    atomic_store(&lg_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    pool_limits_restore(was);
    JT_CHECK(stats().regions_given_back >= given0 + 19);
    JT_CHECK_EQ(atomic_load(&lg_bad), 0);
    JT_CHECK(atomic_load(&lg_lookups) > 0);
    for (size_t i = 0; i < nheld; i++)
        jet__block_unref(lg_blocks[i]);
    JT_CHECK(all_idle());
}

/* ---- memfd sharing ------------------------------------------------------ */

typedef struct remap_arg {
    pid_t parent;
    int memfd;
    size_t len, off;
} remap_arg_t;

/* Child process: maps the parent's memfd through /proc and writes into the
 * parent's block. */
static int remap_child(void *p)
{
    remap_arg_t *a = p;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)a->parent, a->memfd);
    int fd = open(path, O_RDWR);
    if (fd < 0) return 2;
    char *m = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return 3;
    if (memcmp(m + a->off, "parent wrote this", 17) != 0) return 4;
    memcpy(m + a->off + 100, "child wrote this", 16);
    munmap(m, a->len);
    return 0;
}

static void test_memfd_remap(void)
{
    jet_block_t *b = jet__block_alloc(JET_BLOCK_SIZE_64K);
    JT_REQUIRE(b);
    const jet_region_t *g = jet__block_pool_find(b->data);
    JT_REQUIRE(g == b->region);
    size_t off = (size_t)(b->data - g->base);
    for (uint32_t i = 0; i < b->cap; i++)
        b->data[i] = (char)(i * 31 + 7);

    /* Through the fd itself. */
    char *m = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_SHARED, g->memfd, 0);
    JT_REQUIRE(m != MAP_FAILED);
    JT_CHECK(m != g->base);
    JT_CHECK(memcmp(m + off, b->data, b->cap) == 0);
    m[off + 5] = 'Z';
    JT_CHECK_EQ(b->data[5], 'Z');
    munmap(m, g->len);

    /* Through /proc/self/fd/N, as a peer process would open it. */
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", g->memfd);
    int fd = open(path, O_RDONLY);
    JT_REQUIRE(fd >= 0);
    m = mmap(NULL, g->len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    JT_REQUIRE(m != MAP_FAILED);
    JT_CHECK(memcmp(m + off, b->data, b->cap) == 0);
    munmap(m, g->len);

    /* From another process. */
    memcpy(b->data, "parent wrote this", 17);
    remap_arg_t a = {.parent = getpid(), .memfd = g->memfd, .len = g->len, .off = off};
    pid_t pid = jt_fork(remap_child, &a);
    JT_CHECK_EQ(jt_wait(pid), 0);
    JT_CHECK(memcmp(b->data + 100, "child wrote this", 16) == 0);

    /* The memfd is close-on-exec: it never leaks into exec'ed programs. */
    JT_CHECK(fcntl(g->memfd, F_GETFD) & FD_CLOEXEC);
    jet__block_unref(b);
    JT_CHECK(all_idle());
}

int main(void)
{
    /* Small regions so that growth, many regions and the cap are cheap. */
    JET_FLAG_STORE(iobuf_region_mb_8k, 1);
    JET_FLAG_STORE(iobuf_region_mb_64k, 1);
    JET_FLAG_STORE(iobuf_region_mb_2m, 4);
    JT_RUN(test_class_selection);
    JT_RUN(test_lookup);
    JT_RUN(test_lookup_during_growth);
    JT_RUN(test_registrar);
    JT_RUN(test_threads_churn);
    JT_RUN(test_thread_exit_flush);
    JT_RUN(test_memory_cap);
    JT_RUN(test_give_back_for_other_sizes);
    JT_RUN(test_give_back_spares_young_regions);
    JT_RUN(test_give_back_none_when_short);
    JT_RUN(test_lookup_during_give_back);
    JT_RUN(test_memfd_remap);
    return jt_finish();
}
