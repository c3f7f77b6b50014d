/* softub_seg.c: token ids, registered and imported segments.
 *
 * A registered segment gets an entry in its owner's segment table (in the
 * region) with its range, access bits, token and how peers reach its bytes:
 * - memory backed by a shared file mapping (memfd, shm_open, MAP_SHARED
 *   anonymous) is found in /proc/self/maps; softub keeps its own fd on the
 *   file, and peers map that file through /proc/<pid>/fd/<n> and copy with
 *   memcpy (atomics are real atomic instructions on the shared page);
 * - anything else (heap, posix_memalign, stack) is reached with
 *   process_vm_readv/writev on the owner's pid (documented limit: atomics
 *   on such memory are not atomic against the owner's own CPU accesses).
 * URMA atomics on any segment hold a lock word in its entry, so those that
 * use CPU atomics on a mapped page and those that read and write through
 * process_vm_* never interleave.
 *
 * An imported segment is a handle on that entry (owner, index, generation)
 * plus the token presented; nothing is validated at import, every access is
 * checked at the target when a WR executes, as on hardware. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "softub_internal.h"

/* One fd per backing file, shared by all segments on it. */
struct sub_backing {
    uint64_t dev;
    uint64_t ino;
    int fd;
    int refs;
    struct sub_backing *next;
};

static struct sub_backing *seg_backings; /* under softub__g.lock */

struct seg_probe {
    int kind;
    uint64_t dev; /* from fstat */
    uint64_t ino;
    uint64_t file_off;
    struct sub_backing *b;
};

void softub__seg_forget(void)
{
    seg_backings = NULL;
}

struct sub_tseg *softub__tseg_check(urma_target_seg_t *t)
{
    if (t == NULL || t->handle != (uint64_t)(uintptr_t)t)
        return NULL;
    struct sub_tseg *s = (struct sub_tseg *)t;
    return s->magic == SUB_MAGIC_TSEG ? s : NULL;
}

static struct sub_token *token_check(urma_token_id_t *t)
{
    if (t == NULL || t->handle != (uint64_t)(uintptr_t)t)
        return NULL;
    struct sub_token *k = (struct sub_token *)t;
    return k->magic == SUB_MAGIC_TOKEN ? k : NULL;
}

int softub__local_range(struct sub_tseg *ts, uint64_t addr, uint64_t len)
{
    if (ts == NULL || !ts->registered || ts->peer != softub__g.self)
        return -1;
    uint64_t va;
    memcpy(&va, (const uint8_t *)&ts->base.seg.ubva + offsetof(urma_ubva_t, va), sizeof(va));
    uint64_t slen = ts->base.seg.len;
    if (addr < va || addr - va > slen || len > slen - (addr - va))
        return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Token ids                                                                 */
/* ------------------------------------------------------------------------ */

/* Under softub__g.lock. */
static struct sub_token *token_alloc(struct sub_ctx *c, urma_token_id_flag_t flag)
{
    struct sub_token *k = calloc(1, sizeof(*k));
    if (k == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    uint32_t id = 0;
    if (softub__id_alloc(1, 0, SUB_T_TOKEN, 0, &id, NULL) != 0) {
        free(k);
        errno = ENOSPC;
        return NULL;
    }
    k->magic = SUB_MAGIC_TOKEN;
    k->ctx = c;
    k->base.urma_ctx = &c->base;
    k->base.token_id = id;
    k->base.handle = (uint64_t)(uintptr_t)&k->base;
    atomic_init(&k->base.ref, 0);
    k->base.flag = flag;
    atomic_fetch_add(&c->base.ref, 1);
    return k;
}

static void token_free(struct sub_token *k)
{
    softub__id_free(1, k->base.token_id);
    atomic_fetch_sub(&k->base.urma_ctx->ref, 1);
    k->magic = SUB_MAGIC_DEAD;
    k->base.handle = 0;
    free(k);
}

static urma_token_id_t *seg_alloc_token(urma_context_t *ctx, urma_token_id_flag_t flag)
{
    if (ctx == NULL) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (flag.bs.multi_seg && !softub__device_attr()->dev_cap.feature.bs.muti_seg_per_token_id) {
        SUB_INFO("device does not support token id table mode (multi_seg)\n");
        errno = EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&softub__g.lock);
    struct sub_token *k = token_alloc(c, flag);
    pthread_mutex_unlock(&softub__g.lock);
    return k != NULL ? &k->base : NULL;
}

SUB_API urma_token_id_t *urma_alloc_token_id(urma_context_t *ctx)
{
    urma_token_id_flag_t flag = {.value = 0};
    return seg_alloc_token(ctx, flag);
}

SUB_API urma_token_id_t *urma_alloc_token_id_ex(urma_context_t *ctx, urma_token_id_flag_t flag)
{
    return seg_alloc_token(ctx, flag);
}

SUB_API urma_status_t urma_free_token_id(urma_token_id_t *token_id)
{
    if (token_id == NULL)
        return URMA_EINVAL;
    if (atomic_load(&token_id->ref) != 0) {
        SUB_INFO("urma_free_token_id: %lu segment(s) still use token id %u\n",
                 (unsigned long)atomic_load(&token_id->ref), token_id->token_id);
        return URMA_EINVAL;
    }
    struct sub_token *k = token_check(token_id);
    if (k == NULL || softub__ctx_check(token_id->urma_ctx) == NULL)
        return URMA_EINVAL;
    pthread_mutex_lock(&softub__g.lock);
    token_free(k);
    pthread_mutex_unlock(&softub__g.lock);
    return URMA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Backing detection                                                         */
/* ------------------------------------------------------------------------ */

static int seg_fd_matches(int fd, uint64_t dev, uint64_t ino)
{
    struct stat st;
    return fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

/* An fd of our own on the file (dev, ino) mapped at [start, end). */
static int seg_open_backing(uint64_t start, uint64_t end, uint64_t dev, uint64_t ino,
                            const char *path)
{
    char p[96];
    snprintf(p, sizeof(p), "/proc/self/map_files/%" PRIx64 "-%" PRIx64, start, end);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        if (seg_fd_matches(fd, dev, ino))
            return fd;
        close(fd);
    }
    DIR *d = opendir("/proc/self/fd");
    if (d != NULL) {
        struct dirent *de;
        int found = -1;
        while ((de = readdir(d)) != NULL) {
            char *endp = NULL;
            long n = strtol(de->d_name, &endp, 10);
            if (endp == de->d_name || *endp != '\0' || n == dirfd(d))
                continue;
            if (seg_fd_matches((int)n, dev, ino)) {
                found = (int)n;
                break;
            }
        }
        closedir(d);
        if (found >= 0) {
            snprintf(p, sizeof(p), "/proc/self/fd/%d", found);
            fd = open(p, O_RDWR | O_CLOEXEC);
            if (fd >= 0 && seg_fd_matches(fd, dev, ino))
                return fd;
            if (fd >= 0)
                close(fd);
        }
    }
    size_t pl = strlen(path);
    if (path[0] == '/' && (pl < 10 || strcmp(path + pl - 10, " (deleted)") != 0)) {
        fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd >= 0) {
            if (seg_fd_matches(fd, dev, ino))
                return fd;
            close(fd);
        }
    }
    return -1;
}

/* Under softub__g.lock. Fills pr with kind SUB_MEM_FD when [va, va+len) is
 * covered by shared mappings of one file at contiguous offsets. */
static void seg_probe(uint64_t va, uint64_t len, struct seg_probe *pr)
{
    pr->kind = SUB_MEM_PVM;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return;
    char line[4352];
    uint64_t want = va, end_va = va + len;
    int have = 0;
    unsigned maj0 = 0, min0 = 0;
    uint64_t ino0 = 0, first_start = 0, first_end = 0;
    char path0[4096] = "";
    while (fgets(line, sizeof(line), f) != NULL) {
        uint64_t s, e, off, ino;
        char perms[8];
        unsigned maj, mn;
        int pos = 0;
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &s, &e,
                   perms, &off, &maj, &mn, &ino, &pos) < 7)
            continue;
        if (e <= want)
            continue;
        if (s > want)
            break; /* a hole */
        if (perms[3] != 's' || ino == 0)
            break;
        if (!have) {
            have = 1;
            maj0 = maj;
            min0 = mn;
            ino0 = ino;
            first_start = s;
            first_end = e;
            pr->file_off = off + (va - s);
            char *nl = strchr(line + pos, '\n');
            if (nl != NULL)
                *nl = '\0';
            snprintf(path0, sizeof(path0), "%s", line + pos);
        } else if (maj != maj0 || mn != min0 || ino != ino0 ||
                   off + (want - s) != pr->file_off + (want - va)) {
            break;
        }
        want = e;
        if (want >= end_va)
            break;
    }
    fclose(f);
    if (!have || want < end_va)
        return;
    uint64_t dev = (uint64_t)makedev(maj0, min0);
    for (struct sub_backing *b = seg_backings; b != NULL; b = b->next) {
        if (b->dev == dev && b->ino == ino0) {
            b->refs++;
            pr->b = b;
            pr->kind = SUB_MEM_FD;
            pr->dev = dev;
            pr->ino = ino0;
            return;
        }
    }
    int fd = seg_open_backing(first_start, first_end, dev, ino0, path0);
    if (fd < 0)
        return;
    struct sub_backing *b = malloc(sizeof(*b));
    if (b == NULL) {
        close(fd);
        return;
    }
    b->dev = dev;
    b->ino = ino0;
    b->fd = fd;
    b->refs = 1;
    b->next = seg_backings;
    seg_backings = b;
    pr->b = b;
    pr->kind = SUB_MEM_FD;
    pr->dev = dev;
    pr->ino = ino0;
}

static void seg_backing_put(struct sub_backing *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    for (struct sub_backing **pp = &seg_backings; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == b) {
            *pp = b->next;
            break;
        }
    }
    close(b->fd);
    free(b);
}

/* ------------------------------------------------------------------------ */
/* Register / unregister                                                     */
/* ------------------------------------------------------------------------ */

SUB_API urma_target_seg_t *urma_register_seg(urma_context_t *ctx, urma_seg_cfg_t *seg_cfg)
{
    if (ctx == NULL || seg_cfg == NULL || seg_cfg->va == 0) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL) {
        errno = EINVAL;
        return NULL;
    }
    urma_reg_seg_flag_t fl = seg_cfg->flag;
    uint32_t acc = fl.bs.access;
    if ((fl.bs.token_id_valid && seg_cfg->token_id == NULL) ||
        (!fl.bs.token_id_valid && seg_cfg->token_id != NULL)) {
        SUB_INFO("token_id must be set when token_id_valid is 1 and NULL otherwise\n");
        errno = EINVAL;
        return NULL;
    }
    if (((acc & URMA_ACCESS_LOCAL_ONLY) &&
         (acc & (URMA_ACCESS_READ | URMA_ACCESS_WRITE | URMA_ACCESS_ATOMIC))) ||
        ((acc & URMA_ACCESS_WRITE) && !(acc & URMA_ACCESS_READ)) ||
        ((acc & URMA_ACCESS_ATOMIC) &&
         !((acc & URMA_ACCESS_READ) && (acc & URMA_ACCESS_WRITE)))) {
        SUB_INFO("invalid segment access combination 0x%x\n", acc);
        errno = EINVAL;
        return NULL;
    }
    if (seg_cfg->len == 0 || seg_cfg->va + seg_cfg->len < seg_cfg->va) {
        SUB_INFO("invalid segment length %" PRIu64 "\n", seg_cfg->len);
        errno = EINVAL;
        return NULL;
    }
    struct sub_token *k = NULL;
    if (fl.bs.token_id_valid) {
        k = token_check(seg_cfg->token_id);
        if (k == NULL || k->ctx != c) {
            errno = EINVAL;
            return NULL;
        }
    }
    struct sub_tseg *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    int own = 0;
    if (k == NULL) {
        k = token_alloc(c, (urma_token_id_flag_t){.value = 0});
        if (k == NULL) {
            pthread_mutex_unlock(&g->lock);
            free(t);
            return NULL;
        }
        own = 1;
    }
    uint32_t idx;
    if (softub__seg_idx_alloc(&idx) != 0) {
        if (own)
            token_free(k);
        pthread_mutex_unlock(&g->lock);
        free(t);
        errno = ENOSPC;
        return NULL;
    }
    struct seg_probe pr = {0};
    seg_probe(seg_cfg->va, seg_cfg->len, &pr);
    struct sub_sseg *ss = softub__seg_entry(g->self, idx);
    uint32_t gen = atomic_load(&ss->gen) + 1;
    if (gen == 0)
        gen = 1;
    /* The writer's half of softub__seg_snap: peers that read this entry as
     * the previous registration see its freed state or bumped gen if they
     * see any field written below. The lock word stays the slot's: a holder
     * of the previous registration releases it itself. */
    atomic_thread_fence(memory_order_release);
#define SEG_STORE(f, v) __atomic_store_n(&ss->f, (v), __ATOMIC_RELAXED)
    SEG_STORE(token_id, k->base.token_id);
    SEG_STORE(token_value, seg_cfg->token_value.token);
    SEG_STORE(token_policy, fl.bs.token_policy);
    SEG_STORE(access, acc);
    SEG_STORE(kind, (uint32_t)pr.kind);
    SEG_STORE(fd, pr.kind == SUB_MEM_FD ? pr.b->fd : -1);
    SEG_STORE(va, seg_cfg->va);
    SEG_STORE(len, seg_cfg->len);
    SEG_STORE(file_off, pr.file_off);
    SEG_STORE(dev, pr.dev);
    SEG_STORE(ino, pr.ino);
    SEG_STORE(uasid, ctx->uasid);
#undef SEG_STORE
    atomic_store_explicit(&ss->revoked, 0, memory_order_relaxed);
    ss->eid = ctx->eid;
    atomic_store(&ss->gen, gen);
    atomic_store(&ss->state, SUB_SEG_REG);

    t->magic = SUB_MAGIC_TSEG;
    t->ctx = c;
    t->registered = 1;
    t->peer = g->self;
    t->seg_idx = idx;
    t->seg_gen = gen;
    t->token = seg_cfg->token_value.token;
    t->token_valid = 1;
    t->tid = k;
    t->own_tid = own;
    t->backing = pr.b;
    urma_seg_t *s = &t->base.seg;
    urma_ubva_t ubva;
    memset(&ubva, 0, sizeof(ubva));
    ubva.eid = ctx->eid;
    ubva.uasid = ctx->uasid;
    ubva.va = seg_cfg->va;
    memcpy(&s->ubva, &ubva, sizeof(ubva));
    s->len = seg_cfg->len;
    s->attr.value = 0;
    s->attr.bs.token_policy = fl.bs.token_policy;
    s->attr.bs.cacheable = fl.bs.cacheable;
    s->attr.bs.dsva = fl.bs.dsva;
    s->attr.bs.access = acc;
    s->attr.bs.non_pin = fl.bs.non_pin;
    s->attr.bs.user_iova = fl.bs.user_iova;
    s->attr.bs.user_token_id = fl.bs.token_id_valid;
    s->token_id = k->base.token_id;
    t->base.user_ctx = seg_cfg->user_ctx;
    t->base.mva = 0;
    t->base.urma_ctx = ctx;
    t->base.token_id = &k->base;
    t->base.handle = (uint64_t)(uintptr_t)&t->base;
    atomic_fetch_add(&k->base.ref, 1);
    atomic_fetch_add(&ctx->ref, 1);
    pthread_mutex_unlock(&g->lock);
    SUB_DBG("registered segment %u: va 0x%" PRIx64 " len %" PRIu64 " %s\n", idx, seg_cfg->va,
            seg_cfg->len, pr.kind == SUB_MEM_FD ? "file-backed" : "process_vm");
    return &t->base;
}

SUB_API urma_status_t urma_unregister_seg(urma_target_seg_t *target_seg)
{
    if (target_seg == NULL || target_seg->urma_ctx == NULL || target_seg->urma_ctx->dev == NULL)
        return URMA_EINVAL;
    struct sub_tseg *t = softub__tseg_check(target_seg);
    if (t == NULL || !t->registered || softub__ctx_check(target_seg->urma_ctx) == NULL)
        return URMA_EINVAL;
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    struct sub_sseg *ss = softub__seg_entry(g->self, t->seg_idx);
    atomic_store(&ss->state, SUB_SEG_FREE);
    atomic_fetch_add(&ss->gen, 1);
    softub__seg_idx_free(t->seg_idx);
    seg_backing_put(t->backing);
    atomic_fetch_sub(&t->tid->base.ref, 1);
    if (t->own_tid)
        token_free(t->tid);
    atomic_fetch_sub(&target_seg->urma_ctx->ref, 1);
    /* Atomic: a queued WR's retry reads it without the lock. */
    __atomic_store_n(&t->magic, SUB_MAGIC_DEAD, __ATOMIC_RELEASE);
    target_seg->handle = 0;
    pthread_mutex_unlock(&g->lock);
    softub__grave_pinned(t, &t->pins);
    return URMA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Import                                                                    */
/* ------------------------------------------------------------------------ */

/* Under softub__g.lock: finds the entry of a peer's segment table that the
 * exchanged urma_seg_t describes. */
static int seg_resolve(const urma_seg_t *seg, struct sub_peer **pp, uint32_t *idx, uint32_t *gen)
{
    struct sub_dir_id e;
    if (softub__id_lookup(1, seg->token_id, &e) != 0)
        return -1;
    struct sub_peer *p = softub__peer_get(e.slot, e.slot_gen);
    if (p == NULL || softub__peer_enter(p) != 0)
        return -1;
    urma_ubva_t ubva;
    memcpy(&ubva, &seg->ubva, sizeof(ubva));
    int rc = -1;
    const struct sub_region_hdr *h = (const struct sub_region_hdr *)p->region;
    uint32_t hwm = atomic_load(&((struct sub_region_hdr *)h)->seg_hwm);
    if (hwm > SUB_MAX_SEGS)
        hwm = SUB_MAX_SEGS;
    for (uint32_t i = 0; i < hwm; i++) {
        struct sub_sseg *ss = softub__seg_entry(p, i);
        if (ss == NULL)
            break;
        struct sub_sseg snap;
        if (!softub__seg_snap(ss, atomic_load(&ss->gen), &snap) ||
            snap.token_id != seg->token_id || snap.va != ubva.va || snap.len != seg->len)
            continue;
        *pp = p;
        *idx = i;
        *gen = atomic_load(&snap.gen);
        rc = 0;
        break;
    }
    softub__peer_leave(p);
    return rc;
}

SUB_API urma_target_seg_t *urma_import_seg(urma_context_t *ctx, urma_seg_t *seg,
                                           urma_token_t *token_value, uint64_t addr,
                                           urma_import_seg_flag_t flag)
{
    if (ctx == NULL || seg == NULL) {
        errno = EINVAL;
        return NULL;
    }
    if (seg->attr.bs.token_policy != URMA_TOKEN_NONE && token_value == NULL) {
        SUB_INFO("token value must be set when token policy is not URMA_TOKEN_NONE\n");
        errno = EINVAL;
        return NULL;
    }
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL) {
        errno = EINVAL;
        return NULL;
    }
    softub__fault_sleep_us(softub__fault.import_delay_us, "import_seg");
    struct sub_tseg *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    struct sub_peer *p = NULL;
    uint32_t idx = 0, gen = 0;
    if (seg_resolve(seg, &p, &idx, &gen) == 0) {
        t->peer = p;
        atomic_fetch_add(&p->imports, 1);
        t->seg_idx = idx;
        t->seg_gen = gen;
        /* Map the backing file now, so the data path never has to. */
        struct sub_sseg snap;
        if (!p->self && softub__peer_enter(p) == 0) {
            if (softub__seg_snap(softub__seg_entry(p, idx), gen, &snap) &&
                snap.kind == SUB_MEM_FD)
                t->map_base = softub__peer_map(p, &snap, snap.file_off + snap.len);
            softub__peer_leave(p);
        }
        if (flag.bs.mapping && p->self) {
            urma_ubva_t ubva;
            memcpy(&ubva, &seg->ubva, sizeof(ubva));
            t->base.mva = ubva.va;
        } else if (flag.bs.mapping && t->map_base != NULL) {
            t->base.mva = (uint64_t)(uintptr_t)(t->map_base + snap.file_off);
        }
    } else {
        /* Unknown segment: the import succeeds (it is local on hardware
         * too) and every access through it fails at the target. */
        SUB_INFO("imported segment (token id %u) is not registered on this fabric\n",
                 seg->token_id);
        t->peer = NULL;
    }
    t->magic = SUB_MAGIC_TSEG;
    t->ctx = c;
    t->registered = 0;
    t->token = token_value != NULL ? token_value->token : 0;
    t->token_valid = token_value != NULL;
    t->base.seg = *seg;
    t->base.user_ctx = 0;
    (void)addr;
    t->base.urma_ctx = ctx;
    t->base.token_id = NULL;
    t->base.handle = (uint64_t)(uintptr_t)&t->base;
    atomic_fetch_add(&ctx->ref, 1);
    pthread_mutex_unlock(&g->lock);
    return &t->base;
}

SUB_API urma_status_t urma_unimport_seg(urma_target_seg_t *tseg)
{
    if (tseg == NULL)
        return URMA_EINVAL;
    struct sub_tseg *t = softub__tseg_check(tseg);
    if (t == NULL || t->registered || softub__ctx_check(tseg->urma_ctx) == NULL)
        return URMA_EINVAL;
    pthread_mutex_lock(&softub__g.lock);
    /* Checked again under the lock, as urma_unimport_jetty. */
    if (__atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) != SUB_MAGIC_TSEG) {
        pthread_mutex_unlock(&softub__g.lock);
        return URMA_EINVAL;
    }
    atomic_fetch_sub(&tseg->urma_ctx->ref, 1);
    __atomic_store_n(&t->magic, SUB_MAGIC_DEAD, __ATOMIC_RELEASE);
    /* After the magic, as urma_unimport_jetty. */
    if (t->peer != NULL) atomic_fetch_sub(&t->peer->imports, 1);
    tseg->handle = 0;
    pthread_mutex_unlock(&softub__g.lock);
    softub__grave_pinned(t, &t->pins);
    return URMA_SUCCESS;
}
