#include "urma/urma_usermem.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/log.h"
#include "jetrpc/urma.h"
#include "urma/urma_context.h"

typedef struct um_range {
    uintptr_t start, end; /* [start, end) */
    urma_target_seg_t *seg;
} um_range_t;

static pthread_rwlock_t um_lock = PTHREAD_RWLOCK_INITIALIZER;
static um_range_t um_ranges[JET_URMA_USERMEM_MAX]; /* sorted by start, disjoint */
static size_t um_n;

/* The index of the first range that ends after p (um_n when none). */
static size_t um_search(uintptr_t p)
{
    size_t lo = 0, hi = um_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (um_ranges[mid].end <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

urma_target_seg_t *jet__urma_usermem_find(const void *addr, size_t len)
{
    uintptr_t p = (uintptr_t)addr;
    urma_target_seg_t *seg = NULL;
    pthread_rwlock_rdlock(&um_lock);
    size_t i = um_search(p);
    if (i < um_n && um_ranges[i].start <= p && len <= um_ranges[i].end - p) seg = um_ranges[i].seg;
    pthread_rwlock_unlock(&um_lock);
    return seg;
}

/* -EEXIST when [p, p + len) overlaps a registered range, -ENOSPC when the
 * table is full, else 0 and *at_p the index it goes to. Lock held. */
static int um_place(uintptr_t p, size_t len, size_t *at_p)
{
    size_t i = um_search(p);
    if (i < um_n && um_ranges[i].start < p + len) return -EEXIST;
    if (um_n == JET_URMA_USERMEM_MAX) return -ENOSPC;
    *at_p = i;
    return 0;
}

int jet_urma_register_memory(void *addr, size_t len)
{
    uintptr_t p = (uintptr_t)addr;
    if (!addr || len == 0 || p + len < p) return -EINVAL;
    const jet_urma_ctx_t *c = jet__urma_ctx_get();
    if (!c) return -ENODEV;
    size_t i;
    pthread_rwlock_rdlock(&um_lock);
    int rc = um_place(p, len, &i);
    pthread_rwlock_unlock(&um_lock);
    if (rc < 0) return rc;
    /* Registered outside the lock (pinning a large range may take long;
     * sends look the table up meanwhile), placed after a second look. */
    urma_seg_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.va = (uint64_t)p;
    cfg.len = len;
    cfg.flag.bs.token_policy = URMA_TOKEN_NONE;
    cfg.flag.bs.cacheable = URMA_NON_CACHEABLE;
    cfg.flag.bs.access = URMA_ACCESS_LOCAL_ONLY;
    errno = 0;
    urma_target_seg_t *seg = JET_URMA_FN(c, urma_register_seg)(c->uctx, &cfg);
    if (!seg) {
        rc = errno ? -errno : -EIO;
        JET_WARN("URMA: registering %zu bytes of user memory at %p failed: %s", len, addr,
                 strerror(-rc));
        return rc;
    }
    pthread_rwlock_wrlock(&um_lock);
    rc = um_place(p, len, &i);
    if (rc == 0) {
        memmove(&um_ranges[i + 1], &um_ranges[i], (um_n - i) * sizeof um_ranges[0]);
        um_ranges[i] = (um_range_t){.start = p, .end = p + len, .seg = seg};
        um_n++;
    }
    pthread_rwlock_unlock(&um_lock);
    if (rc < 0) JET_URMA_FN(c, urma_unregister_seg)(seg); /* another thread placed one first */
    return rc;
}

int jet_urma_unregister_memory(void *addr)
{
    uintptr_t p = (uintptr_t)addr;
    urma_target_seg_t *seg = NULL;
    pthread_rwlock_wrlock(&um_lock);
    size_t i = um_search(p);
    if (i < um_n && um_ranges[i].start == p) {
        seg = um_ranges[i].seg;
        memmove(&um_ranges[i], &um_ranges[i + 1], (um_n - i - 1) * sizeof um_ranges[0]);
        um_n--;
    }
    pthread_rwlock_unlock(&um_lock);
    if (!seg) return -ENOENT;
    const jet_urma_ctx_t *c = jet__urma_ctx_get();
    JET_URMA_FN(c, urma_unregister_seg)(seg);
    return 0;
}
