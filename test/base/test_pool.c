/* Object pool: reuse, alignment, cross-thread put, churn, thread exit and the
 * pool-count limit. Most checks are on nalloc (objects carved so far): an
 * object lost by the pool shows up as extra carving. */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "testutil.h"

static size_t pool_nalloc(jet_pool_t *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->nalloc;
    pthread_mutex_unlock(&p->lock);
    return n;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

static void test_get_put_reuse(void)
{
    static jet_pool_t pool = JET_POOL_INIT("reuse", 40);
    void *a = jet__pool_get(&pool);
    JT_REQUIRE(a);
    memset(a, 0xab, 40);
    jet__pool_put(&pool, a);
    /* The cache is LIFO: the object just put is the next one handed out. */
    void *b = jet__pool_get(&pool);
    JT_CHECK(a == b);
    jet__pool_put(&pool, b);

    /* Cycling many objects through one thread carves no more than it holds
     * at once plus one batch. */
    void *objs[200];
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 200; i++) {
            objs[i] = jet__pool_get(&pool);
            JT_REQUIRE(objs[i]);
            memset(objs[i], round, 40);
        }
        for (int i = 0; i < 200; i++)
            jet__pool_put(&pool, objs[i]);
    }
    JT_CHECK(pool_nalloc(&pool) <= 200 + JET_POOL_TLS_MAX);
    JT_CHECK(pool.id >= 0 && pool.id < JET_POOL_MAX);
    jet__pool_put(&pool, NULL); /* ignored */
}

static void check_layout(jet_pool_t *pool)
{
    size_t size = pool->obj_size;
    /* Several slabs' worth for small sizes. */
    enum { N = 300 };
    void **objs = malloc(N * sizeof *objs);
    JT_REQUIRE(objs);
    for (int i = 0; i < N; i++) {
        objs[i] = jet__pool_get(pool);
        JT_REQUIRE(objs[i]);
        JT_CHECK(((uintptr_t)objs[i] & 15) == 0);
        memset(objs[i], i & 0xff, size); /* ASan: the whole object is usable */
    }
    for (int i = 0; i < N; i++) {
        const unsigned char *c = objs[i];
        for (size_t k = 0; k < size; k++)
            if (c[k] != (unsigned char)(i & 0xff)) {
                JT_CHECK(!"object overwritten by a neighbour");
                break;
            }
    }
    qsort(objs, N, sizeof *objs, cmp_ptr);
    for (int i = 0; i + 1 < N; i++)
        JT_CHECK((uintptr_t)objs[i + 1] - (uintptr_t)objs[i] >= (size < 16 ? 16 : size));
    for (int i = 0; i < N; i++)
        jet__pool_put(pool, objs[i]);
    free(objs);
}

static void test_alignment(void)
{
    /* Pools are process-lifetime objects (their ids are never given back),
     * hence static. */
    static jet_pool_t pools[] = {JET_POOL_INIT("l1", 1),        JET_POOL_INIT("l8", 8),
                                 JET_POOL_INIT("l17", 17),      JET_POOL_INIT("l24", 24),
                                 JET_POOL_INIT("l100", 100),    JET_POOL_INIT("l4096", 4096),
                                 JET_POOL_INIT("l70000", 70000)};
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        check_layout(&pools[i]);
    /* Objects bigger than a 64 KiB slab still come 16 to a slab. */
    JT_CHECK_EQ(pools[6].per_slab, 16);
    JT_CHECK(pools[0].per_slab >= 16);
}

/* Cross-thread put: A gets, B puts, and after both exit the objects are
 * found again by a third thread without new carving. */
static jet_pool_t xpool = JET_POOL_INIT("cross", 64);
enum { XN = 1000 };
static void *xobjs[XN];

static void *x_getter(void *arg)
{
    for (int i = 0; i < XN; i++) {
        xobjs[i] = jet__pool_get(&xpool);
        if (xobjs[i]) memset(xobjs[i], 0x5a, 64);
    }
    return NULL;
}

static void *x_putter(void *arg)
{
    for (int i = 0; i < XN; i++)
        jet__pool_put(&xpool, xobjs[i]);
    return NULL;
}

static void test_cross_thread_put(void)
{
    pthread_t t;
    JT_REQUIRE(pthread_create(&t, NULL, x_getter, NULL) == 0);
    pthread_join(t, NULL);
    for (int i = 0; i < XN; i++)
        JT_REQUIRE(xobjs[i]);
    size_t carved = pool_nalloc(&xpool);
    JT_CHECK(carved >= XN && carved <= XN + JET_POOL_TLS_MAX);
    JT_REQUIRE(pthread_create(&t, NULL, x_putter, NULL) == 0);
    pthread_join(t, NULL);
    void **mine = malloc(carved * sizeof *mine);
    JT_REQUIRE(mine);
    /* Every carved object is back on the shared list (the threads' caches
     * were flushed at exit); this thread gets them all and carves none. */
    for (size_t i = 0; i < carved; i++) {
        mine[i] = jet__pool_get(&xpool);
        JT_REQUIRE(mine[i]);
    }
    JT_CHECK_EQ(pool_nalloc(&xpool), carved);
    qsort(mine, carved, sizeof *mine, cmp_ptr);
    for (size_t i = 0; i + 1 < carved; i++)
        JT_CHECK(mine[i] != mine[i + 1]);
    for (size_t i = 0; i < carved; i++)
        jet__pool_put(&xpool, mine[i]);
    free(mine);
}

/* A thread that ends with a full cache gives it back. */
static jet_pool_t epool = JET_POOL_INIT("exit", 32);
static void *e_objs[40];

static void *exit_worker(void *arg)
{
    for (int i = 0; i < 40; i++)
        e_objs[i] = jet__pool_get(&epool);
    for (int i = 0; i < 40; i++)
        jet__pool_put(&epool, e_objs[i]);
    return NULL; /* leaves every carved object in this thread's cache */
}

static void test_thread_exit_returns(void)
{
    pthread_t t;
    JT_REQUIRE(pthread_create(&t, NULL, exit_worker, NULL) == 0);
    pthread_join(t, NULL);
    size_t carved = pool_nalloc(&epool);
    JT_CHECK(carved >= 40 && carved <= JET_POOL_TLS_MAX);
    /* Without the exit flush this thread would have to carve new objects. */
    void *got[JET_POOL_TLS_MAX];
    for (size_t i = 0; i < carved; i++) {
        got[i] = jet__pool_get(&epool);
        JT_REQUIRE(got[i]);
    }
    JT_CHECK_EQ(pool_nalloc(&epool), carved);
    for (int k = 0; k < 40; k++) {
        bool found = false;
        for (size_t i = 0; i < carved; i++)
            found |= got[i] == e_objs[k];
        JT_CHECK(found);
    }
    for (size_t i = 0; i < carved; i++)
        jet__pool_put(&epool, got[i]);

    /* Many short threads in a row do not grow the pool. */
    for (int r = 0; r < 50; r++) {
        JT_REQUIRE(pthread_create(&t, NULL, exit_worker, NULL) == 0);
        pthread_join(t, NULL);
    }
    JT_CHECK(pool_nalloc(&epool) <= carved + JET_POOL_TLS_MAX);
}

/* Churn: threads take and give back random amounts; each object carries its
 * holder's stamp, so an object handed to two holders at once is caught. */
enum { CHURN_THREADS = 8, CHURN_HELD = 100, CHURN_ITERS = 20000, CHURN_SIZE = 48 };
static jet_pool_t cpool = JET_POOL_INIT("churn", CHURN_SIZE);
static _Atomic long churn_errors;

typedef struct churn_obj {
    uint64_t stamp[CHURN_SIZE / 8];
} churn_obj_t;

static void *churn_worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    unsigned seed = (unsigned)id * 7919u + 1;
    churn_obj_t *held[CHURN_HELD];
    int n = 0;
    for (int it = 0; it < CHURN_ITERS; it++) {
        int want = rand_r(&seed) % (CHURN_HELD + 1);
        while (n < want) {
            churn_obj_t *o = jet__pool_get(&cpool);
            if (!o) {
                churn_errors++;
                break;
            }
            uint64_t stamp = id << 32 | (uint64_t)it;
            for (int k = 0; k < CHURN_SIZE / 8; k++)
                o->stamp[k] = stamp;
            held[n++] = o;
        }
        while (n > want) {
            churn_obj_t *o = held[--n];
            uint64_t s = o->stamp[0];
            if (s >> 32 != id) churn_errors++;
            for (int k = 1; k < CHURN_SIZE / 8; k++)
                if (o->stamp[k] != s) churn_errors++;
            jet__pool_put(&cpool, o);
        }
        if ((it & 255) == 0) sched_yield();
    }
    while (n > 0)
        jet__pool_put(&cpool, held[--n]);
    return NULL;
}

static void test_many_threads_churn(void)
{
    pthread_t th[CHURN_THREADS];
    for (int i = 0; i < CHURN_THREADS; i++)
        JT_REQUIRE(pthread_create(&th[i], NULL, churn_worker, (void *)(uintptr_t)(i + 1)) == 0);
    for (int i = 0; i < CHURN_THREADS; i++)
        pthread_join(th[i], NULL);
    JT_CHECK_EQ(churn_errors, 0);
    /* Carving happens only when the shared list and the cache are empty, so
     * carved objects never exceed what is held or cached by all threads,
     * plus one batch per thread. */
    size_t carved = pool_nalloc(&cpool);
    JT_CHECK(carved <= (size_t)CHURN_THREADS * (CHURN_HELD + 2 * JET_POOL_TLS_MAX));
    /* All threads are gone: everything is on the shared list. */
    churn_obj_t **all = malloc(carved * sizeof *all);
    JT_REQUIRE(all);
    for (size_t i = 0; i < carved; i++)
        all[i] = jet__pool_get(&cpool);
    JT_CHECK_EQ(pool_nalloc(&cpool), carved);
    for (size_t i = 0; i < carved; i++)
        jet__pool_put(&cpool, all[i]);
    free(all);
}

/* Past JET_POOL_MAX pools the rest work without thread caches. Runs last:
 * it uses up the process's pool ids. */
static void *uncached_worker(void *arg)
{
    jet_pool_t *p = arg;
    void *o[10];
    for (int r = 0; r < 1000; r++) {
        for (int i = 0; i < 10; i++) {
            o[i] = jet__pool_get(p);
            if (o[i]) memset(o[i], 1, 24);
        }
        for (int i = 0; i < 10; i++)
            jet__pool_put(p, o[i]);
    }
    return NULL;
}

static void test_pool_limit(void)
{
    enum { NPOOLS = JET_POOL_MAX + 4 };
    static jet_pool_t pools[NPOOLS];
    for (int i = 0; i < NPOOLS; i++)
        pools[i] = (jet_pool_t)JET_POOL_INIT("many", 24);
    int uncached = 0;
    for (int i = 0; i < NPOOLS; i++) {
        void *o = jet__pool_get(&pools[i]);
        JT_REQUIRE(o);
        jet__pool_put(&pools[i], o);
        if (pools[i].id >= JET_POOL_MAX) uncached++;
    }
    JT_CHECK(uncached >= 4);
    jet_pool_t *last = &pools[NPOOLS - 1];
    JT_CHECK(last->id >= JET_POOL_MAX);
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        JT_REQUIRE(pthread_create(&th[i], NULL, uncached_worker, last) == 0);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    /* Without caches nothing is held between rounds: 3 threads x 10. */
    JT_CHECK(pool_nalloc(last) <= 31);
    void *a = jet__pool_get(last);
    jet__pool_put(last, a);
    JT_CHECK(jet__pool_get(last) == a);
}

int main(void)
{
    JT_RUN(test_get_put_reuse);
    JT_RUN(test_alignment);
    JT_RUN(test_cross_thread_put);
    JT_RUN(test_thread_exit_returns);
    JT_RUN(test_many_threads_churn);
    JT_RUN(test_pool_limit);
    return jt_finish();
}
