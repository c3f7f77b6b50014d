/* Fixed-size object pool: thread-local caches over a shared free list.
 *
 * Objects are carved from slabs that are never returned to the system while
 * the pool lives; get/put touch no lock on the common path (each thread keeps
 * up to JET_POOL_TLS_MAX free objects per pool and exchanges batches with the
 * shared list under a mutex). An object may be put by a thread other than the
 * one that got it. Memory returned by get is not zeroed. */
#ifndef JET_BASE_POOL_H
#define JET_BASE_POOL_H

#include <pthread.h>
#include <stddef.h>

#define JET_POOL_TLS_MAX 64
#define JET_POOL_MAX     32 /* pools per process */

typedef struct jet_pool {
    const char *name;
    size_t obj_size;
    size_t per_slab;
    int id; /* index of this pool's thread-local cache */
    pthread_mutex_t lock;
    void *free_list; /* stack of batches of free objects (under lock) */
    void *slabs;     /* every slab, for the life of the pool (under lock) */
    char *carve;     /* next never-used object of the newest slab (under lock) */
    char *carve_end;
    size_t nalloc; /* objects carved so far */
} jet_pool_t;

/* Static initializer: JET_POOL_INIT("call", sizeof(struct call)). */
#define JET_POOL_INIT(nm, size)                                                                    \
    {.name = (nm), .obj_size = (size), .per_slab = 0, .id = -1,                                    \
     .lock = PTHREAD_MUTEX_INITIALIZER}

/* NULL only when memory is exhausted. */
void *jet__pool_get(jet_pool_t *p);
void jet__pool_put(jet_pool_t *p, void *obj);

#endif
