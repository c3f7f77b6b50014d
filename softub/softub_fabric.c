/* softub_fabric.c: the cross-process fabric.
 *
 * Directory: /dev/shm/softub.<uid>.<fabric>, created by whoever comes first
 * and initialised once through a CAS on its init word (a dead initialiser is
 * detected and replaced). It holds the process table and the id tables; it
 * is guarded by a spinlock word holding the owner's pid, which a waiter
 * steals when the owner died. Only control-plane calls take it.
 *
 * Region: one memfd per process ("softub-<pid>"), sized up front and sparse,
 * holding the shared halves of that process's objects. Peers open it through
 * /proc/<pid>/fd/<n> and map it MAP_SHARED. Blocks freed in the region are
 * reused only after a grace period, so a peer that read a descriptor just
 * before its owner deleted it still writes into dead memory, never into a
 * newer object.
 *
 * Peers: one struct per other process, created at import time (the data path
 * never opens or maps anything it could have mapped earlier). A peer found
 * dead (pid gone, zombie, or pid reused) is marked so; its mappings are torn
 * down once no data-path operation is inside it (users == 0). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "softub_internal.h"

/* A free block of the region: its pieces were freed from first_ns to
 * freed_ns, and it is reused once the newest one is past the grace period. */
struct sub_region_free {
    uint64_t off;
    uint64_t size;
    uint64_t first_ns;
    uint64_t freed_ns;
    struct sub_region_free *next;
};

struct sub_old_peer {
    struct sub_peer *p;
    struct sub_old_peer *next;
};

static struct sub_old_peer *fab_old_peers;
static void fab_peer_release(struct sub_peer *p);
static pthread_mutex_t fab_old_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------ */
/* Directory                                                                 */
/* ------------------------------------------------------------------------ */

static void fab_relax(uint64_t spins)
{
    if (spins < 64) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        return;
    }
    if (spins < 256) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

static void fab_dir_lock(struct sub_dir *d)
{
    uint64_t me = (uint64_t)getpid();
    for (uint64_t spins = 0;; spins++) {
        uint64_t exp = 0;
        if (atomic_compare_exchange_weak(&d->lock, &exp, me))
            return;
        fab_relax(spins);
        if ((spins & 255) == 255) {
            exp = atomic_load(&d->lock);
            /* The owner died holding the lock: steal it. Threads of this
             * process never steal from each other (same pid). */
            if (exp != 0 && exp != me && kill((pid_t)exp, 0) == -1 && errno == ESRCH) {
                if (atomic_compare_exchange_strong(&d->lock, &exp, me)) {
                    SUB_WARN("stole the fabric directory lock from dead pid %llu\n",
                             (unsigned long long)exp);
                    return;
                }
            }
        }
    }
}

static void fab_dir_unlock(struct sub_dir *d)
{
    atomic_store(&d->lock, 0);
}

static int fab_dir_init(struct sub_dir *d)
{
    uint64_t me = (uint64_t)getpid();
    for (uint64_t spins = 0;; spins++) {
        uint64_t v = atomic_load(&d->init);
        if ((v >> 32) == 2)
            break;
        if (v == 0) {
            uint64_t exp = 0;
            if (atomic_compare_exchange_strong(&d->init, &exp, (1ull << 32) | me)) {
                /* A fresh file is all zeroes; a previous initialiser that died
                 * half-way only set header fields, which are rewritten here. */
                d->magic = SUB_DIR_MAGIC;
                d->version = SUB_DIR_VERSION;
                d->hdr_size = (uint32_t)sizeof(struct sub_dir) / 4096u;
                d->qid_cursor = 0;
                d->tid_cursor = 0;
                d->uasid_next = 1;
                d->obj_gen_next = 1;
                atomic_store(&d->lock, 0);
                atomic_store(&d->init, 2ull << 32);
                break;
            }
            continue;
        }
        pid_t owner = (pid_t)(v & 0xffffffffu);
        if ((v >> 32) == 1 && kill(owner, 0) == -1 && errno == ESRCH) {
            uint64_t exp = v;
            (void)atomic_compare_exchange_strong(&d->init, &exp, 0);
            continue;
        }
        fab_relax(spins);
    }
    if (d->magic != SUB_DIR_MAGIC || d->version != SUB_DIR_VERSION ||
        d->hdr_size != (uint32_t)sizeof(struct sub_dir) / 4096u)
        return -EPROTO;
    return 0;
}

static int fab_slot_stale(struct sub_dir *d, const struct sub_dir_id *e)
{
    if (e->slot >= SUB_MAX_PROCS)
        return 1;
    const struct sub_dir_proc *pr = &d->procs[e->slot];
    return atomic_load(&pr->state) != SUB_PROC_ALIVE || atomic_load(&pr->gen) != e->slot_gen;
}

/* Under the directory lock: frees the slots of processes that are gone. */
static void fab_sweep_locked(struct sub_dir *d)
{
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        struct sub_dir_proc *pr = &d->procs[i];
        if (atomic_load(&pr->state) != SUB_PROC_ALIVE)
            continue;
        if (softub__g.joined && i == softub__g.slot)
            continue;
        if (!softub__pid_alive(pr->pid, pr->start_time)) {
            atomic_fetch_add(&pr->gen, 1);
            atomic_store(&pr->state, SUB_PROC_FREE);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Join / leave                                                              */
/* ------------------------------------------------------------------------ */

static void fab_dir_name(char *name, size_t cap)
{
    snprintf(name, cap, "/softub.%u.%s", (unsigned)getuid(), softub__fault.fabric);
}

/* Every process that has the directory mapped holds a shared flock on it;
 * the last one to leave takes it exclusively and unlinks the name (see
 * fab_close_dir). A joiner that opened the old file just before that unlink
 * finds it unlinked once it gets its shared lock, and opens again. */
static int fab_open_dir(void)
{
    struct sub_global *g = &softub__g;
    char name[128];
    fab_dir_name(name, sizeof(name));
    for (int attempt = 0;; attempt++) {
        int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) {
            int e = errno;
            SUB_ERR("cannot open the fabric directory /dev/shm%s: %s\n", name, strerror(e));
            return -e;
        }
        int rc;
        while ((rc = flock(fd, LOCK_SH)) != 0 && errno == EINTR)
            ;
        struct stat st;
        if (rc != 0 || fstat(fd, &st) != 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (st.st_nlink == 0) {
            close(fd);
            if (attempt < 1000)
                continue;
            return -EAGAIN;
        }
        /* Everybody truncates to the same size, so racing creators agree; a
         * larger file is a newer layout and fails the version check below. */
        if ((uint64_t)st.st_size < sizeof(struct sub_dir) &&
            ftruncate(fd, (off_t)sizeof(struct sub_dir)) != 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        void *m = mmap(NULL, sizeof(struct sub_dir), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return -e;
        }
        rc = fab_dir_init(m);
        if (rc != 0) {
            SUB_ERR("fabric directory /dev/shm%s has an incompatible layout; remove it\n", name);
            munmap(m, sizeof(struct sub_dir));
            close(fd);
            return rc;
        }
        g->dir_fd = fd;
        g->dir = m;
        return 0;
    }
}

/* At a normal exit of a process that did not delete its contexts: remove
 * the directory name when no other process holds it (same rule as
 * fab_close_dir; nothing else is torn down, the kernel does that). */
__attribute__((destructor)) static void fab_at_exit(void)
{
    struct sub_global *g = &softub__g;
    if (g->dir != NULL && g->dir_fd >= 0 && flock(g->dir_fd, LOCK_EX | LOCK_NB) == 0) {
        char name[128];
        fab_dir_name(name, sizeof(name));
        (void)shm_unlink(name);
    }
}

/* Unmaps the directory; unlinks it when no other process holds it. */
static void fab_close_dir(void)
{
    struct sub_global *g = &softub__g;
    if (g->dir == NULL)
        return;
    munmap(g->dir, sizeof(struct sub_dir));
    g->dir = NULL;
    if (flock(g->dir_fd, LOCK_EX | LOCK_NB) == 0) {
        char name[128];
        fab_dir_name(name, sizeof(name));
        (void)shm_unlink(name);
    }
    close(g->dir_fd);
    g->dir_fd = -1;
}

static int fab_create_region(void)
{
    struct sub_global *g = &softub__g;
    char name[64];
    snprintf(name, sizeof(name), "softub-%d", (int)getpid());
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint64_t size = softub__fault.region_size;
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return -e;
    }
    struct sub_region_hdr *h = m;
    h->magic = SUB_REGION_MAGIC;
    h->version = SUB_REGION_VERSION;
    h->pid = (int32_t)getpid();
    h->size = size;
    atomic_init(&h->doorbell, 0);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&h->alive, &ma);
    pthread_mutexattr_destroy(&ma);
    g->region_fd = fd;
    g->region = m;
    g->region_size = size;
    g->bump = SUB_HEAP_OFF;
    g->free_list = NULL;
    g->seg_free = malloc(sizeof(uint32_t) * SUB_MAX_SEGS);
    if (g->seg_free == NULL) {
        munmap(m, size);
        close(fd);
        return -ENOMEM;
    }
    g->nseg_free = SUB_MAX_SEGS;
    for (uint32_t i = 0; i < SUB_MAX_SEGS; i++)
        g->seg_free[i] = SUB_MAX_SEGS - 1 - i;
    return 0;
}

int softub__join(void)
{
    struct sub_global *g = &softub__g;
    if (g->joined)
        return 0;
    softub__fault_load();
    int rc = 0;
    if (g->dir == NULL && (rc = fab_open_dir()) != 0)
        return rc;
    if ((rc = fab_create_region()) != 0) {
        SUB_ERR("cannot create the process region: %s\n", strerror(-rc));
        fab_close_dir();
        return rc;
    }
    g->objs = calloc(SUB_MAX_QIDS, sizeof(*g->objs));
    struct sub_peer *self = calloc(1, sizeof(*self));
    if (g->objs == NULL || self == NULL) {
        rc = -ENOMEM;
        goto err_free;
    }
    /* Peers reach heap memory with process_vm_readv/writev and duplicate
     * eventfds with pidfd_getfd: both need ptrace access, which Yama
     * (ptrace_scope 1) grants only to ancestors unless we say otherwise. */
    if (softub__fault.ptracer_any)
        (void)prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    uint64_t start = softub__pid_start_time(getpid());
    struct sub_dir *d = g->dir;
    fab_dir_lock(d);
    fab_sweep_locked(d);
    int slot = -1;
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        if (atomic_load(&d->procs[i].state) == SUB_PROC_FREE) {
            slot = i;
            break;
        }
    }
    if (slot < 0) {
        fab_dir_unlock(d);
        SUB_ERR("fabric %s is full (%d processes)\n", softub__fault.fabric, SUB_MAX_PROCS);
        rc = -ENOSPC;
        goto err_free;
    }
    uint32_t uasid = g->init_uasid;
    if (uasid == 0) {
        uasid = d->uasid_next++ & 0xffffffu;
        if (uasid == 0)
            uasid = d->uasid_next++ & 0xffffffu;
    }
    struct sub_dir_proc *pr = &d->procs[slot];
    pr->pid = (int32_t)getpid();
    pr->uasid = uasid;
    pr->start_time = start;
    pr->region_fd = g->region_fd;
    pr->region_size = g->region_size;
    uint32_t gen = atomic_fetch_add(&pr->gen, 1) + 1;
    atomic_store(&pr->state, SUB_PROC_ALIVE);
    fab_dir_unlock(d);

    self->slot = slot;
    self->gen = gen;
    self->pid = getpid();
    self->start_time = start;
    self->self = 1;
    self->region = g->region;
    self->region_size = g->region_size;
    self->pidfd = -1;
    pthread_mutex_init(&self->lock, NULL);
    g->self = self;
    g->slot = slot;
    g->slot_gen = gen;
    g->uasid = uasid;
    atomic_store(&g->peers[slot], self);
    g->joined = 1;
    SUB_INFO("joined fabric %s as slot %d (pid %d, uasid %u)\n", softub__fault.fabric, slot,
             (int)getpid(), uasid);
    return 0;

err_free:
    free(self);
    free(g->objs);
    g->objs = NULL;
    munmap(g->region, g->region_size);
    close(g->region_fd);
    g->region = NULL;
    free(g->seg_free);
    g->seg_free = NULL;
    fab_close_dir();
    return rc;
}

void softub__leave(void)
{
    struct sub_global *g = &softub__g;
    if (!g->joined)
        return;
    struct sub_dir *d = g->dir;
    fab_dir_lock(d);
    struct sub_dir_proc *pr = &d->procs[g->slot];
    if (atomic_load(&pr->gen) == g->slot_gen && pr->pid == (int32_t)getpid()) {
        atomic_fetch_add(&pr->gen, 1);
        atomic_store(&pr->state, SUB_PROC_FREE);
    }
    fab_dir_unlock(d);
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        struct sub_peer *p = atomic_exchange(&g->peers[i], NULL);
        if (p == NULL || p->self)
            continue;
        /* Nothing runs on the data path any more (no context is left). */
        for (int m = 0; m < atomic_load(&p->nmaps); m++)
            munmap(p->maps[m].base, p->maps[m].size);
        if (!atomic_load(&p->released) && p->region != NULL)
            munmap(p->region, p->region_size);
        for (int e = 0; e < p->nefds; e++)
            close(p->efds[e].local_fd);
        if (p->pidfd >= 0)
            close(p->pidfd);
        pthread_mutex_destroy(&p->lock);
        free(p);
    }
    pthread_mutex_lock(&fab_old_lock);
    while (fab_old_peers != NULL) {
        struct sub_old_peer *o = fab_old_peers;
        fab_old_peers = o->next;
        fab_peer_release(o->p);
        pthread_mutex_destroy(&o->p->lock);
        free(o->p);
        free(o);
    }
    pthread_mutex_unlock(&fab_old_lock);
    struct sub_region_free *f = g->free_list;
    while (f != NULL) {
        struct sub_region_free *n = f->next;
        free(f);
        f = n;
    }
    g->free_list = NULL;
    munmap(g->region, g->region_size);
    close(g->region_fd);
    g->region = NULL;
    free(g->seg_free);
    g->seg_free = NULL;
    free(g->objs);
    g->objs = NULL;
    pthread_mutex_destroy(&g->self->lock);
    free(g->self);
    g->self = NULL;
    g->joined = 0;
    fab_close_dir();
}

/* In the child of a fork: the parent's objects, threads and region are not
 * ours. Forget them (leaking the copies) so the child can start afresh. */
void softub__fork_child(void)
{
    struct sub_global *g = &softub__g;
    /* The inherited fd shares the parent's open file description, hence its
     * flock: drop our copy without touching the lock (closing one fd of a
     * description keeps the lock while the parent's fd is open). */
    if (g->dir != NULL) {
        munmap(g->dir, sizeof(struct sub_dir));
        close(g->dir_fd);
    }
    g->dir = NULL;
    g->dir_fd = -1;
    g->joined = 0;
    g->region = NULL;
    g->region_fd = -1;
    g->free_list = NULL;
    g->seg_free = NULL;
    g->objs = NULL;
    g->self = NULL;
    g->nctx = 0;
    g->ctxs = NULL;
    g->jfces = NULL;
    g->graves = NULL;
    g->prog.active = NULL;
    atomic_store(&g->prog.nactive, 0);
    pthread_mutex_init(&g->prog.mu, NULL);
    for (int i = 0; i < SUB_MAX_PROCS; i++)
        atomic_store(&g->peers[i], NULL);
    fab_old_peers = NULL;
    pthread_mutex_init(&fab_old_lock, NULL);
    softub__prog_forget();
    softub__seg_forget();
}

/* ------------------------------------------------------------------------ */
/* Region allocator (owner only, under softub__g.lock)                       */
/* ------------------------------------------------------------------------ */

static uint64_t fab_align(uint64_t v, uint64_t a)
{
    return (v + a - 1) & ~(a - 1);
}

/* Neighbours merge only when the pieces' free times stay within this of
 * each other: a merged block is reused when its newest piece is past the
 * grace period, so merging freely under steady churn (objects freed next to
 * each other, one after the other) would keep one block ever "just freed"
 * and push every allocation onto fresh memory. Blocks past the grace period
 * merge whatever their times (softub__ralloc). */
#define SUB_FREE_MERGE_NS (SUB_FREE_GRACE_NS / 16)

static bool fab_free_may_merge(const struct sub_region_free *f, uint64_t first_ns,
                               uint64_t freed_ns)
{
    uint64_t lo = f->first_ns < first_ns ? f->first_ns : first_ns;
    uint64_t hi = f->freed_ns > freed_ns ? f->freed_ns : freed_ns;
    return hi - lo <= SUB_FREE_MERGE_NS;
}

/* f absorbs its successor, which starts where f ends. */
static void fab_free_absorb_next(struct sub_region_free *f)
{
    struct sub_region_free *n = f->next;
    f->size += n->size;
    if (n->first_ns < f->first_ns)
        f->first_ns = n->first_ns;
    if (n->freed_ns > f->freed_ns)
        f->freed_ns = n->freed_ns;
    f->next = n->next;
    free(n);
}

static void fab_free_insert(uint64_t off, uint64_t size, uint64_t first_ns, uint64_t freed_ns)
{
    struct sub_global *g = &softub__g;
    if (size == 0)
        return;
    struct sub_region_free *prev = NULL, *next = g->free_list;
    while (next != NULL && next->off < off) {
        prev = next;
        next = next->next;
    }
    if (prev != NULL && prev->off + prev->size == off &&
        fab_free_may_merge(prev, first_ns, freed_ns)) {
        prev->size += size;
        if (first_ns < prev->first_ns)
            prev->first_ns = first_ns;
        if (freed_ns > prev->freed_ns)
            prev->freed_ns = freed_ns;
        if (next != NULL && prev->off + prev->size == next->off &&
            fab_free_may_merge(next, prev->first_ns, prev->freed_ns))
            fab_free_absorb_next(prev);
        return;
    }
    if (next != NULL && off + size == next->off && fab_free_may_merge(next, first_ns, freed_ns)) {
        next->off = off;
        next->size += size;
        if (first_ns < next->first_ns)
            next->first_ns = first_ns;
        if (freed_ns > next->freed_ns)
            next->freed_ns = freed_ns;
        return;
    }
    struct sub_region_free *n = malloc(sizeof(*n));
    if (n == NULL)
        return; /* leaks the block: harmless */
    n->off = off;
    n->size = size;
    n->first_ns = first_ns;
    n->freed_ns = freed_ns;
    n->next = next;
    if (prev != NULL)
        prev->next = n;
    else
        g->free_list = n;
}

uint64_t softub__ralloc(uint64_t size, uint64_t align)
{
    struct sub_global *g = &softub__g;
    if (align < 64)
        align = 64;
    size = fab_align(size, 64);
    uint64_t now = softub__now_ns();
    struct sub_region_free **pp = &g->free_list;
    while (*pp != NULL) {
        struct sub_region_free *f = *pp;
        bool old = now - f->freed_ns >= SUB_FREE_GRACE_NS;
        /* Neighbours past the grace period become one block again. */
        while (old && f->next != NULL && f->off + f->size == f->next->off &&
               now - f->next->freed_ns >= SUB_FREE_GRACE_NS)
            fab_free_absorb_next(f);
        uint64_t a = fab_align(f->off, align);
        if (old && a + size <= f->off + f->size) {
            uint64_t head_off = f->off, head_size = a - f->off;
            uint64_t tail_off = a + size, tail_size = f->off + f->size - (a + size);
            uint64_t first = f->first_ns, freed = f->freed_ns;
            *pp = f->next;
            free(f);
            fab_free_insert(head_off, head_size, first, freed);
            fab_free_insert(tail_off, tail_size, first, freed);
            memset(g->region + a, 0, size);
            return a;
        }
        pp = &f->next;
    }
    uint64_t a = fab_align(g->bump, align);
    if (a + size > g->region_size || a + size < a)
        return 0;
    fab_free_insert(g->bump, a - g->bump, 0, 0);
    g->bump = a + size;
    return a;
}

void softub__rfree(uint64_t off, uint64_t size)
{
    struct sub_global *g = &softub__g;
    if (off == 0)
        return;
    size = fab_align(size, 64);
    /* Give big blocks' pages back; peers that still look see zeroes, which
     * reads as SUB_OBJ_DEAD. */
    uint64_t ps = 4096;
    uint64_t a = fab_align(off, ps), e = (off + size) & ~(ps - 1);
    if (e > a && e - a >= 65536)
        (void)fallocate(g->region_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a,
                        (off_t)(e - a));
    uint64_t now = softub__now_ns();
    fab_free_insert(off, size, now, now);
}

/* ------------------------------------------------------------------------ */
/* Ids                                                                       */
/* ------------------------------------------------------------------------ */

static int fab_id_usable(struct sub_dir *d, const struct sub_dir_id *e)
{
    return atomic_load(&e->state) == SUB_ID_FREE || fab_slot_stale(d, e);
}

int softub__id_alloc(int tokens, uint32_t want, uint16_t type, uint64_t off, uint32_t *id,
                     uint32_t *obj_gen)
{
    struct sub_global *g = &softub__g;
    struct sub_dir *d = g->dir;
    struct sub_dir_id *tab = tokens ? d->tids : d->qids;
    uint32_t max = tokens ? SUB_MAX_TIDS : SUB_MAX_QIDS;
    fab_dir_lock(d);
    uint32_t *cursor = tokens ? &d->tid_cursor : &d->qid_cursor;
    uint32_t found = 0;
    if (want != 0 && want < max && fab_id_usable(d, &tab[want]))
        found = want;
    for (int pass = 0; found == 0 && pass < 2; pass++) {
        for (uint32_t n = 1; n < max; n++) {
            uint32_t i = (*cursor + n) % max;
            if (i == 0)
                continue;
            if (fab_id_usable(d, &tab[i])) {
                found = i;
                break;
            }
        }
        if (found == 0)
            fab_sweep_locked(d);
    }
    if (found == 0) {
        fab_dir_unlock(d);
        return -ENOSPC;
    }
    struct sub_dir_id *e = &tab[found];
    e->type = type;
    e->slot = (uint16_t)g->slot;
    e->slot_gen = g->slot_gen;
    e->obj_gen = d->obj_gen_next++;
    if (e->obj_gen == 0)
        e->obj_gen = d->obj_gen_next++;
    e->off = off;
    atomic_store(&e->state, SUB_ID_USED);
    *cursor = found;
    *id = found;
    if (obj_gen != NULL)
        *obj_gen = e->obj_gen;
    fab_dir_unlock(d);
    return 0;
}

void softub__id_free(int tokens, uint32_t id)
{
    struct sub_global *g = &softub__g;
    struct sub_dir *d = g->dir;
    uint32_t max = tokens ? SUB_MAX_TIDS : SUB_MAX_QIDS;
    if (id == 0 || id >= max)
        return;
    struct sub_dir_id *e = tokens ? &d->tids[id] : &d->qids[id];
    fab_dir_lock(d);
    if (atomic_load(&e->state) == SUB_ID_USED && e->slot == g->slot && e->slot_gen == g->slot_gen)
        atomic_store(&e->state, SUB_ID_FREE);
    fab_dir_unlock(d);
}

int softub__id_lookup(int tokens, uint32_t id, struct sub_dir_id *out)
{
    struct sub_dir *d = softub__g.dir;
    uint32_t max = tokens ? SUB_MAX_TIDS : SUB_MAX_QIDS;
    if (d == NULL || id == 0 || id >= max)
        return -ENOENT;
    struct sub_dir_id *e = tokens ? &d->tids[id] : &d->qids[id];
    fab_dir_lock(d);
    int ok = atomic_load(&e->state) == SUB_ID_USED && !fab_slot_stale(d, e);
    if (ok) {
        atomic_init(&out->state, SUB_ID_USED);
        out->type = e->type;
        out->slot = e->slot;
        out->slot_gen = e->slot_gen;
        out->obj_gen = e->obj_gen;
        out->off = e->off;
    }
    fab_dir_unlock(d);
    return ok ? 0 : -ENOENT;
}

int softub__seg_idx_alloc(uint32_t *idx)
{
    struct sub_global *g = &softub__g;
    if (g->nseg_free == 0)
        return -ENOSPC;
    *idx = g->seg_free[--g->nseg_free];
    struct sub_region_hdr *h = (struct sub_region_hdr *)g->region;
    if (*idx >= atomic_load(&h->seg_hwm))
        atomic_store(&h->seg_hwm, *idx + 1);
    return 0;
}

void softub__seg_idx_free(uint32_t idx)
{
    struct sub_global *g = &softub__g;
    if (idx < SUB_MAX_SEGS && g->nseg_free < SUB_MAX_SEGS)
        g->seg_free[g->nseg_free++] = idx;
}

struct sub_sseg *softub__seg_entry(struct sub_peer *p, uint32_t idx)
{
    if (idx >= SUB_MAX_SEGS || p->region == NULL)
        return NULL;
    return (struct sub_sseg *)(p->region + SUB_SEG_TABLE_OFF + (uint64_t)idx * sizeof(struct sub_sseg));
}

#define SEG_LOAD(f) (out->f = __atomic_load_n(&ss->f, __ATOMIC_RELAXED))

int softub__seg_snap(const struct sub_sseg *ss, uint32_t gen, struct sub_sseg *out)
{
    /* A seqlock read: the owner's unregistration bumps gen, and its next
     * registration of the entry fences (release) before it rewrites fields. */
    if (ss == NULL || atomic_load_explicit(&ss->state, memory_order_acquire) != SUB_SEG_REG ||
        atomic_load_explicit(&ss->gen, memory_order_acquire) != gen)
        return 0;
    SEG_LOAD(token_id);
    SEG_LOAD(token_value);
    SEG_LOAD(token_policy);
    SEG_LOAD(access);
    SEG_LOAD(kind);
    SEG_LOAD(fd);
    SEG_LOAD(va);
    SEG_LOAD(len);
    SEG_LOAD(file_off);
    SEG_LOAD(dev);
    SEG_LOAD(ino);
    SEG_LOAD(uasid);
    atomic_init(&out->revoked, atomic_load_explicit(&ss->revoked, memory_order_relaxed));
    atomic_init(&out->state, SUB_SEG_REG);
    atomic_init(&out->gen, gen);
    atomic_init(&out->alock, 0);
    atomic_thread_fence(memory_order_acquire);
    return atomic_load_explicit(&ss->state, memory_order_relaxed) == SUB_SEG_REG &&
           atomic_load_explicit(&ss->gen, memory_order_relaxed) == gen;
}

void softub__seg_revoke(struct sub_peer *p, uint32_t token_id)
{
    if (p->region == NULL)
        return;
    uint32_t hwm = atomic_load(&((struct sub_region_hdr *)p->region)->seg_hwm);
    if (hwm > SUB_MAX_SEGS)
        hwm = SUB_MAX_SEGS;
    for (uint32_t i = 0; i < hwm; i++) {
        struct sub_sseg *ss = softub__seg_entry(p, i);
        struct sub_sseg snap;
        /* The registration seen, by its gen: a store that lands after the
         * owner re-registered the entry names an older gen and revokes
         * nothing (softub__seg_snap reads revoked == gen). */
        uint32_t gen = atomic_load_explicit(&ss->gen, memory_order_acquire);
        if (softub__seg_snap(ss, gen, &snap) && snap.token_id == token_id)
            atomic_store_explicit(&ss->revoked, gen, memory_order_release);
    }
}

_Static_assert(SUB_SEG_TABLE_OFF + (uint64_t)SUB_MAX_SEGS * sizeof(struct sub_sseg) <= SUB_HEAP_OFF,
               "segment table must fit below the heap");

/* ------------------------------------------------------------------------ */
/* Peers                                                                     */
/* ------------------------------------------------------------------------ */

struct sub_peer *softub__peer_get(int slot, uint32_t slot_gen)
{
    struct sub_global *g = &softub__g;
    if (slot < 0 || slot >= SUB_MAX_PROCS)
        return NULL;
    if (slot == g->slot && slot_gen == g->slot_gen)
        return g->self;
    struct sub_peer *p = atomic_load(&g->peers[slot]);
    if (p != NULL && p->gen == slot_gen)
        return p;
    struct sub_dir *d = g->dir;
    fab_dir_lock(d);
    struct sub_dir_proc pr;
    const struct sub_dir_proc *src = &d->procs[slot];
    int ok = atomic_load(&src->state) == SUB_PROC_ALIVE && atomic_load(&src->gen) == slot_gen;
    pr.pid = src->pid;
    pr.start_time = src->start_time;
    pr.region_fd = src->region_fd;
    pr.region_size = src->region_size;
    fab_dir_unlock(d);
    if (!ok)
        return NULL;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pr.pid, (int)pr.region_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        SUB_WARN("cannot open peer %d's region (%s): %s\n", (int)pr.pid, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= pr.region_size)
        m = mmap(NULL, pr.region_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    const struct sub_region_hdr *h = m;
    if (h->magic != SUB_REGION_MAGIC || h->version != SUB_REGION_VERSION || h->pid != pr.pid) {
        munmap(m, pr.region_size);
        return NULL;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        munmap(m, pr.region_size);
        return NULL;
    }
    p->slot = slot;
    p->gen = slot_gen;
    p->pid = pr.pid;
    p->start_time = pr.start_time;
    p->region = m;
    p->region_size = pr.region_size;
    p->pidfd = -1;
    pthread_mutex_init(&p->lock, NULL);
    struct sub_peer *old = atomic_exchange(&g->peers[slot], p);
    /* Our progress thread may sleep with no deadline: from now on it looks
     * at its peers once a second (their deaths, the event slots they left). */
    softub__doorbell_ring(g->self);
    if (old != NULL && !old->self) {
        /* Its process is gone (the slot was reused): imports and data-path
         * threads may still hold the pointer, so the struct is kept until
         * the progress thread finds it unused (softub__peers_release_dead).
         * Released before it is listed: that thread destroys the lock of a
         * listed peer, which this one must no longer be holding. */
        softub__peer_mark_dead(old);
        fab_peer_release(old);
        struct sub_old_peer *o = malloc(sizeof(*o));
        if (o != NULL) {
            o->p = old;
            pthread_mutex_lock(&fab_old_lock);
            o->next = fab_old_peers;
            fab_old_peers = o;
            pthread_mutex_unlock(&fab_old_lock);
        }
    }
    return p;
}

void *softub__peer_ptr(struct sub_peer *p, uint64_t off, uint64_t size)
{
    if (p->region == NULL || off < SUB_HEAP_OFF || off > p->region_size ||
        size > p->region_size - off)
        return NULL;
    return p->region + off;
}

uint8_t *softub__peer_map_find(struct sub_peer *p, uint64_t dev, uint64_t ino, uint64_t need_end)
{
    int n = atomic_load_explicit(&p->nmaps, memory_order_acquire);
    for (int i = n - 1; i >= 0; i--) {
        const struct sub_pmap *m = &p->maps[i];
        if (m->dev == dev && m->ino == ino && m->size >= need_end)
            return m->base;
    }
    return NULL;
}

uint8_t *softub__peer_map(struct sub_peer *p, const struct sub_sseg *ss, uint64_t need_end)
{
    int n = atomic_load_explicit(&p->nmaps, memory_order_acquire);
    for (int i = n - 1; i >= 0; i--) {
        const struct sub_pmap *m = &p->maps[i];
        if (m->dev == ss->dev && m->ino == ss->ino && m->size >= need_end)
            return m->base;
    }
    if (atomic_load(&p->dead))
        return NULL;
    uint8_t *base = NULL;
    pthread_mutex_lock(&p->lock);
    n = atomic_load(&p->nmaps);
    for (int i = n - 1; i >= 0; i--) {
        const struct sub_pmap *m = &p->maps[i];
        if (m->dev == ss->dev && m->ino == ss->ino && m->size >= need_end) {
            base = m->base;
            goto out;
        }
    }
    if (n >= SUB_PEER_MAPS)
        goto out;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)p->pid, (int)ss->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        goto out;
    struct stat st;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_dev == ss->dev && (uint64_t)st.st_ino == ss->ino &&
        (uint64_t)st.st_size >= need_end && st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
            p->maps[n].dev = ss->dev;
            p->maps[n].ino = ss->ino;
            p->maps[n].base = m;
            p->maps[n].size = (uint64_t)st.st_size;
            atomic_store_explicit(&p->nmaps, n + 1, memory_order_release);
            base = m;
        }
    }
    close(fd);
out:
    pthread_mutex_unlock(&p->lock);
    return base;
}

_Static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0, "the robust futex word");

/* The owner's progress thread died holding `alive`: the process is gone (or
 * going), even if the liveness check has not run yet. */
static int fab_owner_died(const struct sub_peer *p)
{
    const struct sub_region_hdr *h = (const struct sub_region_hdr *)p->region;
    return (__atomic_load_n((const uint32_t *)(const void *)&h->alive, __ATOMIC_ACQUIRE) &
            FUTEX_OWNER_DIED) != 0;
}

int softub__peer_enter(struct sub_peer *p)
{
    if (p->self)
        return 0;
    atomic_fetch_add(&p->users, 1);
    /* A dead owner is marked by the liveness check (the directory's state,
     * mappings), which runs on the progress thread; here it is only refused. */
    if (atomic_load(&p->dead) || fab_owner_died(p)) {
        atomic_fetch_sub(&p->users, 1);
        return -1;
    }
    return 0;
}

void softub__peer_leave(struct sub_peer *p)
{
    if (!p->self)
        atomic_fetch_sub(&p->users, 1);
}

void softub__peer_mark_dead(struct sub_peer *p)
{
    if (p->self || atomic_exchange(&p->dead, 1))
        return;
    SUB_INFO("peer pid %d (slot %d) is gone\n", (int)p->pid, p->slot);
    struct sub_dir *d = softub__g.dir;
    fab_dir_lock(d);
    struct sub_dir_proc *pr = &d->procs[p->slot];
    if (atomic_load(&pr->state) == SUB_PROC_ALIVE && atomic_load(&pr->gen) == p->gen &&
        pr->pid == (int32_t)p->pid) {
        atomic_fetch_add(&pr->gen, 1);
        atomic_store(&pr->state, SUB_PROC_FREE);
    }
    fab_dir_unlock(d);
    atomic_fetch_add(&softub__g.peers_died, 1);
}

/* Writes one to an eventfd owned by p: directly when it is ours, through a
 * cached pidfd_getfd duplicate otherwise, or through the owner's doorbell
 * (its progress thread writes the eventfd) when duplication is refused. */
int softub__peer_signal(struct sub_peer *p, uint64_t obj_off, uint32_t obj_gen, int remote_fd,
                        _Atomic uint32_t *pending)
{
    uint64_t one = 1;
    if (p->self) {
        ssize_t w = write(remote_fd, &one, sizeof(one));
        return w == (ssize_t)sizeof(one) ? 0 : -1;
    }
    int lfd = -1;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->nefds; i++) {
        if (p->efds[i].off == obj_off && p->efds[i].gen == obj_gen &&
            p->efds[i].remote_fd == remote_fd) {
            lfd = p->efds[i].local_fd;
            break;
        }
    }
    if (softub__fault.no_pidfd)
        p->getfd_failed = 1;
    if (lfd < 0 && !p->getfd_failed && !atomic_load(&p->dead)) {
        if (p->pidfd < 0) {
            p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
            if (p->pidfd < 0 && errno == ESRCH) {
                pthread_mutex_unlock(&p->lock);
                softub__peer_mark_dead(p);
                return -1;
            }
        }
        if (p->pidfd >= 0)
            lfd = (int)syscall(SYS_pidfd_getfd, p->pidfd, remote_fd, 0);
        if (lfd >= 0) {
            if (p->nefds == SUB_PEER_EFDS) {
                close(p->efds[0].local_fd);
                memmove(&p->efds[0], &p->efds[1], sizeof(p->efds[0]) * (SUB_PEER_EFDS - 1));
                p->nefds--;
            }
            p->efds[p->nefds].off = obj_off;
            p->efds[p->nefds].gen = obj_gen;
            p->efds[p->nefds].remote_fd = remote_fd;
            p->efds[p->nefds].local_fd = lfd;
            p->nefds++;
        } else {
            SUB_INFO("pidfd_getfd on pid %d refused (%s): signalling through its doorbell\n",
                     (int)p->pid, strerror(errno));
            p->getfd_failed = 1;
        }
    }
    int rc = 0;
    if (lfd >= 0) {
        rc = write(lfd, &one, sizeof(one)) == (ssize_t)sizeof(one) ? 0 : -1;
        pthread_mutex_unlock(&p->lock);
        return rc;
    }
    pthread_mutex_unlock(&p->lock);
    atomic_fetch_add(pending, 1);
    softub__doorbell_ring(p);
    return 0;
}

void softub__peers_check(uint64_t now)
{
    (void)now;
    struct sub_global *g = &softub__g;
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        struct sub_peer *p = atomic_load(&g->peers[i]);
        if (p == NULL || p->self || atomic_load(&p->dead))
            continue;
        /* The word first: a load, where the kernel's answer costs system
         * calls; the kernel for a process that died before its word said so. */
        if (fab_owner_died(p) || !softub__pid_alive(p->pid, p->start_time))
            softub__peer_mark_dead(p);
    }
}

int softub__pid_gone(uint32_t pid)
{
    /* A live peer with that pid is asked by its start time (the entries of
     * dead peers stay until their slot is reused, and the pid may have been
     * given to a new peer since). */
    struct sub_global *g = &softub__g;
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        struct sub_peer *p = atomic_load(&g->peers[i]);
        if (p != NULL && !p->self && (uint32_t)p->pid == pid && !atomic_load(&p->dead))
            return !softub__pid_alive(p->pid, p->start_time);
    }
    return !softub__pid_alive((pid_t)pid, 0);
}

/* Tears down a dead peer's mappings once no data-path operation is inside
 * it; the struct itself stays while pointers to it may live on. */
static void fab_peer_release(struct sub_peer *p)
{
    if (p->self || !atomic_load(&p->dead) || atomic_load(&p->released) ||
        atomic_load(&p->users) != 0)
        return;
    pthread_mutex_lock(&p->lock);
    if (atomic_load(&p->released)) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    int n = atomic_load(&p->nmaps);
    for (int m = 0; m < n; m++)
        munmap(p->maps[m].base, p->maps[m].size);
    atomic_store(&p->nmaps, 0);
    if (p->region != NULL)
        munmap(p->region, p->region_size);
    p->region = NULL;
    for (int e = 0; e < p->nefds; e++)
        close(p->efds[e].local_fd);
    p->nefds = 0;
    if (p->pidfd >= 0)
        close(p->pidfd);
    p->pidfd = -1;
    atomic_store(&p->released, 1);
    pthread_mutex_unlock(&p->lock);
}

void softub__peers_release_dead(void)
{
    struct sub_global *g = &softub__g;
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        struct sub_peer *p = atomic_load(&g->peers[i]);
        if (p != NULL)
            fab_peer_release(p);
    }
    pthread_mutex_lock(&fab_old_lock);
    for (struct sub_old_peer **pp = &fab_old_peers; *pp != NULL;) {
        struct sub_old_peer *o = *pp;
        fab_peer_release(o->p);
        /* Out of softub__g.peers, so no new import finds it; released with
         * no operation inside it and no import naming it: only a thread
         * that read the pointer just before may still look at it, which the
         * graveyard's grace period outlasts. */
        if (!atomic_load(&o->p->released) || atomic_load(&o->p->users) != 0 ||
            atomic_load(&o->p->imports) != 0) {
            pp = &o->next;
            continue;
        }
        *pp = o->next;
        pthread_mutex_destroy(&o->p->lock);
        softub__grave(o->p);
        free(o);
    }
    pthread_mutex_unlock(&fab_old_lock);
}

/* ------------------------------------------------------------------------ */
/* Doorbell: a futex word in each region wakes its owner's progress thread   */
/* ------------------------------------------------------------------------ */

int softub__doorbell_wait(uint32_t seen, uint64_t timeout_ns)
{
    struct sub_region_hdr *h = (struct sub_region_hdr *)softub__g.region;
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    return (int)syscall(SYS_futex, &h->doorbell, FUTEX_WAIT, seen,
                        timeout_ns == UINT64_MAX ? NULL : &ts, NULL, 0);
}

void softub__doorbell_ring(struct sub_peer *p)
{
    struct sub_region_hdr *h = (struct sub_region_hdr *)p->region;
    if (h == NULL)
        return;
    atomic_fetch_add(&h->doorbell, 1);
    (void)syscall(SYS_futex, &h->doorbell, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* ------------------------------------------------------------------------ */
/* Diagnostics (softub_info)                                                 */
/* ------------------------------------------------------------------------ */

static const char *fab_type_name(uint16_t t)
{
    switch (t) {
    case SUB_T_JFC:
        return "jfc";
    case SUB_T_JFS:
        return "jfs";
    case SUB_T_JFR:
        return "jfr";
    case SUB_T_JETTY:
        return "jetty";
    case SUB_T_TOKEN:
        return "token";
    default:
        return "?";
    }
}

static void fab_dump_ids(FILE *out, const struct sub_dir *d, const struct sub_dir_id *tab,
                         uint32_t max, const char *what)
{
    unsigned n = 0;
    for (uint32_t i = 1; i < max; i++) {
        const struct sub_dir_id *e = &tab[i];
        if (atomic_load(&e->state) != SUB_ID_USED)
            continue;
        int stale = fab_slot_stale((struct sub_dir *)d, e);
        int pid = e->slot < SUB_MAX_PROCS ? d->procs[e->slot].pid : 0;
        fprintf(out, "  %-5s %-6u slot %-3u pid %-7d off 0x%-10llx gen %-8u%s\n",
                fab_type_name(e->type), i, e->slot, stale ? 0 : pid, (unsigned long long)e->off,
                e->obj_gen, stale ? " (stale: owner gone)" : "");
        n++;
    }
    fprintf(out, "  %u %s id(s) in use\n", n, what);
}

/* Prints the directory of the fabric named by SOFTUB_FABRIC. Never creates
 * it; needs no urma_init. 0 or a negative errno. Exported for softub_info. */
SUB_API int softub_fabric_dump(FILE *out)
{
    if (out == NULL)
        return -EINVAL;
    softub__fault_load();
    char name[128];
    fab_dir_name(name, sizeof(name));
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        if (e == ENOENT)
            fprintf(out, "no fabric %s (/dev/shm%s)\n", softub__fault.fabric, name);
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < sizeof(struct sub_dir)) {
        close(fd);
        fprintf(out, "fabric %s: directory too small or unreadable\n", softub__fault.fabric);
        return -EPROTO;
    }
    const struct sub_dir *d = mmap(NULL, sizeof(struct sub_dir), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (d == MAP_FAILED)
        return -errno;
    int rc = 0;
    uint64_t init = atomic_load(&((struct sub_dir *)d)->init);
    if ((init >> 32) != 2 || d->magic != SUB_DIR_MAGIC || d->version != SUB_DIR_VERSION) {
        fprintf(out, "fabric %s: not initialised or incompatible (magic 0x%llx version %u)\n",
                softub__fault.fabric, (unsigned long long)d->magic, d->version);
        rc = -EPROTO;
        goto out;
    }
    fprintf(out, "fabric %s (/dev/shm%s): magic 0x%llx version %u, lock holder %llu\n",
            softub__fault.fabric, name, (unsigned long long)d->magic, d->version,
            (unsigned long long)atomic_load(&((struct sub_dir *)d)->lock));
    fprintf(out, "counters: qid cursor %u, token id cursor %u, next uasid %u, next gen %u\n",
            d->qid_cursor, d->tid_cursor, d->uasid_next, d->obj_gen_next);
    fprintf(out, "processes:\n");
    unsigned np = 0;
    for (int i = 0; i < SUB_MAX_PROCS; i++) {
        const struct sub_dir_proc *pr = &d->procs[i];
        if (atomic_load(&pr->state) != SUB_PROC_ALIVE)
            continue;
        int alive = softub__pid_alive(pr->pid, pr->start_time);
        fprintf(out, "  slot %-3d pid %-7d %-5s start %-10llu uasid %-8u gen %-6u region fd %d, %llu MiB\n",
                i, pr->pid, alive ? "alive" : "dead", (unsigned long long)pr->start_time, pr->uasid,
                atomic_load(&pr->gen), pr->region_fd, (unsigned long long)(pr->region_size >> 20));
        np++;
    }
    fprintf(out, "  %u process(es)\n", np);
    fprintf(out, "queue ids:\n");
    fab_dump_ids(out, d, d->qids, SUB_MAX_QIDS, "queue");
    fprintf(out, "token ids:\n");
    fab_dump_ids(out, d, d->tids, SUB_MAX_TIDS, "token");
out:
    munmap((void *)d, sizeof(struct sub_dir));
    return rc;
}
