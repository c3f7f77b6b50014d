#include "base/pool.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Under AddressSanitizer a free object is poisoned, so a use after put is
 * reported; only its two link words are opened while it sits on a list. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POOL_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POOL_POISON(p, n)   ((void)(p), (void)(n))
#define POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define POOL_ALIGN         16
#define POOL_SLAB_BYTES    (64 * 1024)
#define POOL_SLAB_MIN_OBJS 16
#define POOL_BATCH         (JET_POOL_TLS_MAX / 2)
#define POOL_MAX_OBJ       ((size_t)1 << 30)
/* The id of a pool created past JET_POOL_MAX: it works without thread caches. */
#define POOL_ID_UNCACHED JET_POOL_MAX

/* The first two words of a free object that is on the shared list: the next
 * object of its batch, and (in a batch's first object) the next batch. */
typedef struct pool_link {
    struct pool_link *next;
    struct pool_link *next_batch;
} pool_link_t;

typedef struct pool_slab {
    struct pool_slab *next;
} pool_slab_t;

#define POOL_SLAB_HDR ((sizeof(pool_slab_t) + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1))

typedef struct pool_cache {
    unsigned n;
    void *obj[JET_POOL_TLS_MAX];
} pool_cache_t;

static __thread pool_cache_t pool_tls[JET_POOL_MAX];
static __thread bool pool_tls_armed; /* the thread-exit destructor will run */

static pthread_mutex_t pool_ids_lock = PTHREAD_MUTEX_INITIALIZER;
static jet_pool_t *pool_by_id[JET_POOL_MAX];
static int pool_nids;
static pthread_key_t pool_key;
static bool pool_key_ok;

static inline size_t pool_stride(const jet_pool_t *p)
{
    size_t s = p->obj_size < sizeof(pool_link_t) ? sizeof(pool_link_t) : p->obj_size;
    return (s + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
}

/* Links objs into one batch; done before taking the lock, which then only
 * covers an O(1) push. */
static pool_link_t *pool_link_batch(void **objs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        pool_link_t *l = objs[i];
        POOL_UNPOISON(l, sizeof *l);
        l->next = i + 1 < n ? objs[i + 1] : NULL;
    }
    return objs[0];
}

static void pool_flush(jet_pool_t *p, void **objs, unsigned n)
{
    if (!n) return;
    pool_link_t *b = pool_link_batch(objs, n);
    pthread_mutex_lock(&p->lock);
    b->next_batch = p->free_list;
    p->free_list = b;
    pthread_mutex_unlock(&p->lock);
}

/* Hands a dead thread's cached objects back to the shared lists; without it
 * every thread that ever touched a pool would strand up to 64 objects. */
static void pool_thread_exit(void *arg)
{
    (void)arg;
    pool_tls_armed = false;
    for (int id = 0; id < JET_POOL_MAX; id++) {
        pool_cache_t *c = &pool_tls[id];
        if (!c->n) continue;
        jet_pool_t *p = __atomic_load_n(&pool_by_id[id], __ATOMIC_ACQUIRE);
        pool_flush(p, c->obj, c->n);
        c->n = 0;
    }
}

static int pool_assign_id(jet_pool_t *p)
{
    pthread_mutex_lock(&pool_ids_lock);
    int id = p->id;
    if (id < 0) {
        if (!pool_key_ok && pthread_key_create(&pool_key, pool_thread_exit) == 0)
            pool_key_ok = true;
        if (pool_nids < JET_POOL_MAX) {
            id = pool_nids++;
            __atomic_store_n(&pool_by_id[id], p, __ATOMIC_RELEASE);
        } else {
            id = POOL_ID_UNCACHED;
            JET_WARN("pool '%s': more than %d pools, this one works without thread caches",
                     p->name ? p->name : "?", JET_POOL_MAX);
        }
        /* Published last: a thread that sees the id also sees pool_by_id[id]. */
        __atomic_store_n(&p->id, id, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pool_ids_lock);
    return id;
}

static inline int pool_id(jet_pool_t *p)
{
    int id = __atomic_load_n(&p->id, __ATOMIC_ACQUIRE);
    return id >= 0 ? id : pool_assign_id(p);
}

static void pool_arm_thread(void)
{
    if (pool_tls_armed || !pool_key_ok) return;
    /* Any non-NULL value makes the destructor run at thread exit. */
    if (pthread_setspecific(pool_key, (void *)1) == 0) pool_tls_armed = true;
}

/* Carves up to max never-used objects into out; allocates a slab when the
 * newest one is used up. Slabs are rare (one per 64 KiB), so the allocation
 * under the lock costs less than the race of allocating outside it. */
static unsigned pool_carve_locked(jet_pool_t *p, void **out, unsigned max)
{
    size_t stride = pool_stride(p);
    if (p->carve == p->carve_end) {
        if (!p->per_slab) {
            size_t per = (POOL_SLAB_BYTES - POOL_SLAB_HDR) / stride;
            p->per_slab = per < POOL_SLAB_MIN_OBJS ? POOL_SLAB_MIN_OBJS : per;
        }
        void *mem;
        if (posix_memalign(&mem, 64, POOL_SLAB_HDR + p->per_slab * stride) != 0) return 0;
        pool_slab_t *slab = mem;
        slab->next = p->slabs;
        p->slabs = slab;
        p->carve = (char *)mem + POOL_SLAB_HDR;
        p->carve_end = p->carve + p->per_slab * stride;
        POOL_POISON(p->carve, p->per_slab * stride);
    }
    unsigned n = 0;
    while (n < max && p->carve < p->carve_end) {
        out[n++] = p->carve;
        p->carve += stride;
    }
    p->nalloc += n;
    return n;
}

/* Fills an empty cache: one batch from the shared list, else fresh objects. */
static unsigned pool_refill(jet_pool_t *p, pool_cache_t *c)
{
    unsigned n = 0;
    pthread_mutex_lock(&p->lock);
    pool_link_t *b = p->free_list;
    if (b)
        p->free_list = b->next_batch;
    else
        n = pool_carve_locked(p, c->obj, POOL_BATCH);
    pthread_mutex_unlock(&p->lock);
    /* Flushes push at most JET_POOL_TLS_MAX objects, so a batch fits a cache;
     * a longer one would be a bug, and its tail goes back rather than astray. */
    for (; b && n < JET_POOL_TLS_MAX; b = b->next)
        c->obj[n++] = b;
    if (b) {
        pthread_mutex_lock(&p->lock);
        b->next_batch = p->free_list;
        p->free_list = b;
        pthread_mutex_unlock(&p->lock);
    }
    c->n = n;
    return n;
}

static void *pool_get_uncached(jet_pool_t *p)
{
    void *obj = NULL;
    pthread_mutex_lock(&p->lock);
    pool_link_t *b = p->free_list;
    if (b) {
        p->free_list = b->next_batch;
        if (b->next) {
            b->next->next_batch = p->free_list;
            p->free_list = b->next;
        }
        obj = b;
    } else {
        pool_carve_locked(p, &obj, 1);
    }
    pthread_mutex_unlock(&p->lock);
    return obj;
}

void *jet__pool_get(jet_pool_t *p)
{
    if (p->obj_size > POOL_MAX_OBJ) return NULL;
    int id = pool_id(p);
    void *obj;
    if (__builtin_expect(id == POOL_ID_UNCACHED, 0)) {
        obj = pool_get_uncached(p);
    } else {
        pool_cache_t *c = &pool_tls[id];
        if (!c->n) {
            pool_arm_thread();
            if (!pool_refill(p, c)) return NULL;
        }
        obj = c->obj[--c->n];
    }
    if (obj) POOL_UNPOISON(obj, p->obj_size);
    return obj;
}

void jet__pool_put(jet_pool_t *p, void *obj)
{
    if (!obj) return;
    int id = pool_id(p);
    POOL_POISON(obj, pool_stride(p));
    if (__builtin_expect(id == POOL_ID_UNCACHED, 0)) {
        pool_flush(p, &obj, 1);
        return;
    }
    pool_cache_t *c = &pool_tls[id];
    if (c->n == JET_POOL_TLS_MAX) {
        /* Hand back the coldest half and keep the recently freed (cache-hot)
         * objects for the next gets. */
        pool_flush(p, c->obj, POOL_BATCH);
        memmove(c->obj, c->obj + POOL_BATCH, (JET_POOL_TLS_MAX - POOL_BATCH) * sizeof(void *));
        c->n -= POOL_BATCH;
    } else if (!c->n) {
        pool_arm_thread();
    }
    c->obj[c->n++] = obj;
}
