/* softub_device.c: init/uninit, the one device, EIDs, contexts, logging and
 * small process helpers.
 *
 * One device (SOFTUB_DEVICE, default "softub0") of type URMA_TRANSPORT_UB,
 * so the UB rules (mandatory shared JFR, ...) apply, with one EID: the
 * host's first non-loopback IPv4 in IPv4-mapped form (127.0.0.1 when there
 * is none), or SOFTUB_EID. Every process of a fabric runs on the same host,
 * hence the same EID, as processes sharing one UB NIC do. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "softub_internal.h"

struct sub_global softub__g = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .prog = {.mu = PTHREAD_MUTEX_INITIALIZER},
    .dir_fd = -1,
    .region_fd = -1,
};

struct sub_device {
    urma_device_t base;
    urma_device_attr_t attr;
};

static struct sub_device dev_softub;
static pthread_once_t dev_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */
/* ------------------------------------------------------------------------ */

static _Atomic int log_level = URMA_VLOG_LEVEL_WARNING;
static urma_log_cb_t _Atomic log_cb;
static urma_loc_log_cb _Atomic log_loc_cb;

void softub__log(int level, const char *fmt, ...)
{
    if (level > atomic_load_explicit(&log_level, memory_order_relaxed))
        return;
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "softub[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof(buf))
        (void)vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
    va_end(ap);
    urma_log_cb_t cb = atomic_load(&log_cb);
    urma_loc_log_cb lcb = atomic_load(&log_loc_cb);
    if (cb != NULL)
        cb(level, buf);
    else if (lcb != NULL)
        lcb(level, "softub", "softub", 0, buf);
    else
        fputs(buf, stderr);
}

static void log_env_level(void)
{
    const char *s = getenv("URMA_LOG_LEVEL");
    if (s == NULL || *s == '\0')
        return;
    static const char *const names[] = {"EMERG", "ALERT", "CRIT", "ERR", "WARNING", "NOTICE",
                                        "INFO", "DEBUG"};
    for (int i = 0; i < 8; i++) {
        if (strcasecmp(s, names[i]) == 0 || (i == 3 && strcasecmp(s, "ERROR") == 0) ||
            (i == 4 && strcasecmp(s, "WARN") == 0)) {
            atomic_store(&log_level, i);
            return;
        }
    }
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end != s && *end == '\0' && v >= 0 && v < URMA_VLOG_LEVEL_MAX)
        atomic_store(&log_level, (int)v);
}

SUB_API urma_status_t urma_register_log_func(urma_log_cb_t func)
{
    if (func == NULL)
        return URMA_EINVAL;
    atomic_store(&log_cb, func);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_unregister_log_func(void)
{
    atomic_store(&log_cb, NULL);
    atomic_store(&log_loc_cb, NULL);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_register_loc_log_func(urma_loc_log_cb func)
{
    if (func == NULL)
        return URMA_EINVAL;
    atomic_store(&log_loc_cb, func);
    return URMA_SUCCESS;
}

SUB_API void urma_log_set_level(urma_vlog_level_t level)
{
    if ((int)level < URMA_VLOG_LEVEL_EMERG || (int)level >= URMA_VLOG_LEVEL_MAX)
        return;
    atomic_store(&log_level, (int)level);
}

SUB_API urma_vlog_level_t urma_log_get_level(void)
{
    return (urma_vlog_level_t)atomic_load(&log_level);
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

uint64_t softub__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* dev_stat could not read the file (out of descriptors, say): the process
 * may well live, and must not be taken for dead. */
#define DEV_STAT_UNKNOWN (UINT64_MAX - 1)

/* Reads /proc/<pid>/stat: returns the start time (field 22), 0 when the
 * process does not exist, UINT64_MAX when it is a zombie; *state_out (when
 * given) gets its state letter (field 3), '?' when unknown. */
static uint64_t dev_stat(pid_t pid, char *state_out)
{
    if (state_out != NULL)
        *state_out = '?';
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 0 : DEV_STAT_UNKNOWN;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name (field 2) may contain spaces and parentheses. */
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ')
        return 0;
    p += 2;
    char state = *p;
    if (state_out != NULL)
        *state_out = state;
    if (state == 'Z' || state == 'X' || state == 'x')
        return UINT64_MAX;
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (p == NULL)
            return 0;
        p++;
    }
    unsigned long long v = strtoull(p, NULL, 10);
    return v == 0 ? 1 : (uint64_t)v;
}

uint64_t softub__pid_start_time(pid_t pid)
{
    uint64_t v = dev_stat(pid, NULL);
    return v == UINT64_MAX || v == DEV_STAT_UNKNOWN ? 0 : v; /* 0: not compared */
}

int softub__pid_alive(pid_t pid, uint64_t start_time)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) == -1 && errno == ESRCH)
        return 0;
    uint64_t st = dev_stat(pid, NULL);
    if (st == 0 || st == UINT64_MAX)
        return 0;
    return start_time == 0 || st == DEV_STAT_UNKNOWN || st == start_time;
}

int softub__pid_stopped(pid_t pid)
{
    char state;
    if (pid <= 0 || dev_stat(pid, &state) == 0)
        return 0;
    return state == 'T' || state == 't';
}

uint64_t softub__uid(void)
{
    return atomic_fetch_add(&softub__g.uid_next, 1) + 1;
}

struct sub_grave {
    void *p;
    _Atomic uint32_t *pins; /* NULL: none */
    uint64_t at;
    struct sub_grave *next;
};
static pthread_mutex_t grave_lock = PTHREAD_MUTEX_INITIALIZER;

void softub__grave(void *p)
{
    softub__grave_pinned(p, NULL);
}

void softub__grave_pinned(void *p, _Atomic uint32_t *pins)
{
    struct sub_grave *gr = malloc(sizeof(*gr));
    if (gr == NULL)
        return; /* leak rather than risk a use after free */
    gr->p = p;
    gr->pins = pins;
    gr->at = softub__now_ns();
    pthread_mutex_lock(&grave_lock);
    gr->next = softub__g.graves;
    softub__g.graves = gr;
    pthread_mutex_unlock(&grave_lock);
    softub__grave_reap(0);
}

void softub__grave_reap(int all)
{
    uint64_t now = softub__now_ns();
    pthread_mutex_lock(&grave_lock);
    struct sub_grave **pp = &softub__g.graves;
    while (*pp != NULL) {
        struct sub_grave *gr = *pp;
        int pinned = gr->pins != NULL && atomic_load(gr->pins) != 0;
        if (!pinned && (all || now - gr->at >= SUB_FREE_GRACE_NS)) {
            *pp = gr->next;
            free(gr->p);
            free(gr);
        } else {
            pp = &gr->next;
        }
    }
    pthread_mutex_unlock(&grave_lock);
}

/* ------------------------------------------------------------------------ */
/* Fork                                                                      */
/* ------------------------------------------------------------------------ */

/* Both locks are held across fork() by the forking thread, so the child's
 * copy of each is in a known state that thread can release (re-initialising
 * a locked mutex is undefined). The order is the one every other path
 * takes them in: the global lock, then the graveyard's. */
static void dev_atfork_prepare(void)
{
    pthread_mutex_lock(&softub__g.lock);
    pthread_mutex_lock(&grave_lock);
}

static void dev_atfork_parent(void)
{
    pthread_mutex_unlock(&grave_lock);
    pthread_mutex_unlock(&softub__g.lock);
}

static void dev_atfork_child(void)
{
    pthread_mutex_unlock(&grave_lock);
    pthread_mutex_unlock(&softub__g.lock);
    softub__fork_child();
}

/* ------------------------------------------------------------------------ */
/* Device                                                                    */
/* ------------------------------------------------------------------------ */

SUB_API void urma_u32_to_eid(uint32_t ipv4, urma_eid_t *eid)
{
    if (eid == NULL)
        return;
    eid->in4.reserved = 0;
    eid->in4.prefix = htobe32(URMA_IPV4_MAP_IPV6_PREFIX);
    eid->in4.addr = htobe32(ipv4);
}

static int dev_str_to_u32(const char *s, uint32_t *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0') {
        errno = 0;
        v = strtoull(s, &end, 16);
        if (errno != 0 || end == s || *end != '\0')
            return -1;
    }
    if (v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

SUB_API int urma_str_to_eid(const char *buf, urma_eid_t *eid)
{
    if (buf == NULL || eid == NULL || strlen(buf) < 3)
        return -EINVAL;
    if (inet_pton(AF_INET6, buf, eid) > 0)
        return 0;
    uint32_t ipv4;
    if (inet_pton(AF_INET, buf, &ipv4) > 0) {
        urma_u32_to_eid(be32toh(ipv4), eid);
        return 0;
    }
    if (dev_str_to_u32(buf, &ipv4) == 0) {
        urma_u32_to_eid(ipv4, eid);
        return 0;
    }
    return -EINVAL;
}

static void dev_pick_eid(urma_eid_t *eid)
{
    if (softub__fault.eid[0] != '\0') {
        if (urma_str_to_eid(softub__fault.eid, eid) == 0)
            return;
        SUB_WARN("ignoring SOFTUB_EID=%s: not an EID\n", softub__fault.eid);
    }
    uint32_t addr = 0x7f000001u;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
            if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET)
                continue;
            if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
                continue;
            addr = be32toh(((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr);
            break;
        }
        freeifaddrs(ifs);
    }
    urma_u32_to_eid(addr, eid);
}

static void dev_init_once(void)
{
    softub__fault_load();
    log_env_level();
    struct sub_device *d = &dev_softub;
    memset(d, 0, sizeof(*d));
    snprintf(d->base.name, sizeof(d->base.name), "%.63s", softub__fault.device);
    snprintf(d->base.path, sizeof(d->base.path), "/dev/uburma/%.63s", d->base.name);
    d->base.type = URMA_TRANSPORT_UB;
    /* liburma checks these are non-NULL; nobody may dereference them. */
    d->base.ops = (struct urma_provider_ops *)(void *)d;
    d->base.sysfs_dev = (struct urma_sysfs_dev *)(void *)d;
    dev_pick_eid(&softub__g.eid);

    urma_device_attr_t *a = &d->attr;
    memcpy(a->guid, "softub-guid-0001", 16);
    urma_device_cap_t *c = &a->dev_cap;
    c->feature.bs.jfc_inline = 0;
    c->feature.bs.error_suspend = 0;
    c->feature.bs.outorder_comp = 1;
    c->max_jfc = SUB_MAX_JFC;
    c->max_jfs = SUB_MAX_QIDS - 1;
    c->max_jfr = SUB_MAX_QIDS - 1;
    c->max_jetty = SUB_MAX_QIDS - 1;
    c->max_jetty_grp = 0;
    c->max_jetty_in_jetty_grp = 0;
    c->max_jfc_depth = SUB_MAX_JFC_DEPTH;
    c->max_jfs_depth = SUB_MAX_JFS_DEPTH;
    c->max_jfr_depth = SUB_MAX_JFR_DEPTH;
    c->max_jfs_inline_len = SUB_MAX_INLINE;
    c->max_jfs_sge = SUB_MAX_JFS_SGE;
    c->max_jfs_rsge = SUB_MAX_JFS_RSGE;
    c->max_jfr_sge = SUB_MAX_JFR_SGE;
    c->max_msg_size = SUB_MAX_MSG;
    c->max_read_size = (uint32_t)SUB_MAX_MSG;
    c->max_write_size = (uint32_t)SUB_MAX_MSG;
    c->max_cas_size = 8;
    c->max_swap_size = 0;
    c->max_fetch_and_add_size = 8;
    c->atomic_feat.bs.cas = 1;
    c->atomic_feat.bs.fetch_and_add = 1;
    c->trans_mode = URMA_TM_RM | URMA_TM_RC | URMA_TM_UM;
    c->congestion_ctrl_alg = 0;
    c->ceq_cnt = SUB_CEQ_CNT;
    c->max_tp_in_tpg = 1;
    c->max_eid_cnt = 1;
    c->page_size_cap = (1ull << 12) | (1ull << 21);
    c->max_oor_cnt = 0;
    c->mn = 0;
    c->max_netaddr_cnt = 1;
    c->rm_order_cap.bs.oi = 1;
    c->rc_order_cap.bs.ot = 1;
    c->rc_order_cap.bs.ol = 1;
    c->rm_tp_cap.bs.rtp = 1;
    c->rm_tp_cap.bs.ctp = 1;
    c->rc_tp_cap.bs.rtp = 1;
    c->rc_tp_cap.bs.ctp = 1;
    c->um_tp_cap.bs.utp = 1;
    for (int i = 0; i < URMA_MAX_PRIORITY_CNT; i++) {
        c->priority_info[i].SL = (uint32_t)i;
        c->priority_info[i].tp_type.bs.rtp = 1;
        c->priority_info[i].tp_type.bs.ctp = 1;
        c->priority_info[i].tp_type.bs.utp = 1;
    }
    a->port_cnt = 1;
    a->port_attr[0].max_mtu = URMA_MTU_4096;
    a->port_attr[0].state = URMA_PORT_ACTIVE;
    a->port_attr[0].active_width = URMA_LINK_X1;
    a->port_attr[0].active_speed = URMA_SP_10M;
    a->port_attr[0].active_mtu = URMA_MTU_4096;
    a->reserved_jetty_id_min = 0;
    a->reserved_jetty_id_max = 0;

    (void)pthread_atfork(dev_atfork_prepare, dev_atfork_parent, dev_atfork_child);
}

urma_device_t *softub__device(void)
{
    (void)pthread_once(&dev_once, dev_init_once);
    return &dev_softub.base;
}

const urma_device_attr_t *softub__device_attr(void)
{
    (void)pthread_once(&dev_once, dev_init_once);
    return &dev_softub.attr;
}

static int dev_is_ours(urma_device_t *dev)
{
    return dev != NULL && dev == softub__device();
}

SUB_API urma_status_t urma_init(urma_init_attr_t *conf)
{
    (void)softub__device();
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    if (g->inited) {
        pthread_mutex_unlock(&g->lock);
        SUB_INFO("urma_init has been called before\n");
        return URMA_EEXIST;
    }
    g->inited = 1;
    g->init_uasid = conf != NULL ? conf->uasid & 0xffffffu : 0;
    pthread_mutex_unlock(&g->lock);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_uninit(void)
{
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    if (!g->inited) {
        pthread_mutex_unlock(&g->lock);
        SUB_INFO("urma has not been initialized\n");
        return URMA_SUCCESS;
    }
    g->inited = 0;
    if (g->nctx > 0)
        SUB_WARN("urma_uninit with %d context(s) still alive\n", g->nctx);
    pthread_mutex_unlock(&g->lock);
    return URMA_SUCCESS;
}

SUB_API urma_device_t **urma_get_device_list(int *num_devices)
{
    if (num_devices == NULL) {
        errno = EINVAL;
        return NULL;
    }
    urma_device_t *dev = softub__device();
    pthread_mutex_lock(&softub__g.lock);
    int inited = softub__g.inited;
    pthread_mutex_unlock(&softub__g.lock);
    if (!inited) {
        *num_devices = 0;
        errno = ENODEV;
        return NULL;
    }
    urma_device_t **list = calloc(2, sizeof(*list));
    if (list == NULL) {
        *num_devices = 0;
        errno = ENOMEM;
        return NULL;
    }
    list[0] = dev;
    *num_devices = 1;
    return list;
}

SUB_API void urma_free_device_list(urma_device_t **device_list)
{
    free(device_list);
}

SUB_API urma_device_t *urma_get_device_by_name(char *dev_name)
{
    if (dev_name == NULL || strnlen(dev_name, URMA_MAX_NAME) >= URMA_MAX_NAME) {
        errno = EINVAL;
        return NULL;
    }
    int n = 0;
    urma_device_t **list = urma_get_device_list(&n);
    if (list == NULL)
        return NULL;
    urma_device_t *found = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i]->name, dev_name) == 0)
            found = list[i];
    }
    urma_free_device_list(list);
    if (found == NULL)
        errno = ENODEV;
    return found;
}

SUB_API urma_device_t *urma_get_device_by_eid(urma_eid_t eid, urma_transport_type_t type)
{
    int n = 0;
    urma_device_t **list = urma_get_device_list(&n);
    if (list == NULL)
        return NULL;
    urma_device_t *found = NULL;
    for (int i = 0; i < n; i++) {
        if (list[i]->type == type && memcmp(&softub__g.eid, &eid, sizeof(eid)) == 0)
            found = list[i];
    }
    urma_free_device_list(list);
    if (found == NULL)
        errno = ENODEV;
    return found;
}

SUB_API urma_status_t urma_query_device(urma_device_t *dev, urma_device_attr_t *dev_attr)
{
    if (!dev_is_ours(dev) || dev_attr == NULL) {
        errno = EINVAL;
        return URMA_EINVAL;
    }
    memcpy(dev_attr, softub__device_attr(), sizeof(urma_device_attr_t));
    return URMA_SUCCESS;
}

SUB_API urma_eid_info_t *urma_get_eid_list(urma_device_t *dev, uint32_t *cnt)
{
    if (!dev_is_ours(dev) || cnt == NULL) {
        errno = EINVAL;
        return NULL;
    }
    uint32_t max = softub__device_attr()->dev_cap.max_eid_cnt;
    urma_eid_info_t *list = calloc(max, sizeof(*list));
    if (list == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    list[0].eid = softub__g.eid;
    list[0].eid_index = 0;
    *cnt = 1;
    return list;
}

SUB_API void urma_free_eid_list(urma_eid_info_t *eid_list)
{
    free(eid_list);
}

SUB_API urma_status_t urma_get_uasid(uint32_t *uasid)
{
    if (uasid == NULL)
        return URMA_EINVAL;
    (void)softub__device();
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    int rc = 0;
    if (!g->joined)
        rc = softub__join();
    uint32_t v = g->uasid;
    pthread_mutex_unlock(&g->lock);
    if (rc != 0)
        return URMA_FAIL;
    *uasid = v;
    return URMA_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */

struct sub_ctx *softub__ctx_check(urma_context_t *ctx)
{
    if (ctx == NULL || ctx->dev == NULL || ctx->ops != (struct urma_ops *)(void *)ctx)
        return NULL;
    struct sub_ctx *c = (struct sub_ctx *)ctx;
    return c->magic == SUB_MAGIC_CTX ? c : NULL;
}

SUB_API urma_context_t *urma_create_context(urma_device_t *dev, uint32_t eid_index)
{
    if (!dev_is_ours(dev)) {
        errno = EINVAL;
        return NULL;
    }
    struct sub_global *g = &softub__g;
    pthread_mutex_lock(&g->lock);
    if (!g->inited) {
        pthread_mutex_unlock(&g->lock);
        SUB_INFO("urma_create_context before urma_init\n");
        errno = EINVAL;
        return NULL;
    }
    if (eid_index != 0) {
        pthread_mutex_unlock(&g->lock);
        errno = EIO;
        return NULL;
    }
    int err = EIO;
    int rc = softub__join();
    if (rc != 0) {
        pthread_mutex_unlock(&g->lock);
        errno = EIO;
        return NULL;
    }
    struct sub_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        err = ENOMEM;
        goto err_leave;
    }
    c->sh_off = softub__ralloc(sizeof(struct sub_sctx), 64);
    uint32_t asz = (uint32_t)(8 + sizeof(struct sub_aevt));
    uint64_t aoff = softub__ralloc(sub_ring_bytes(SUB_ASYNC_RING_CAP, asz), 64);
    if (c->sh_off == 0 || aoff == 0) {
        err = ENOMEM;
        goto err_free_region;
    }
    int afd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
    if (afd < 0) {
        err = errno;
        goto err_free_region;
    }
    int dfd = open("/dev/null", O_RDWR | O_CLOEXEC);
    c->aring = softub__rptr(aoff);
    sub_ring_init(c->aring, SUB_ASYNC_RING_CAP, asz);
    c->sh = softub__rptr(c->sh_off);
    c->sh->h.type = SUB_T_NONE;
    c->sh->h.gen = (uint32_t)softub__uid();
    c->sh->async_fd = afd;
    c->sh->async_ring_off = aoff;
    atomic_store(&c->sh->h.state, SUB_OBJ_LIVE);
    c->magic = SUB_MAGIC_CTX;
    c->tpn_next = 1;
    pthread_mutex_init(&c->lock, NULL);
    urma_context_t *b = &c->base;
    b->dev = dev;
    b->ops = (struct urma_ops *)(void *)c;
    b->dev_fd = dfd;
    b->async_fd = afd;
    pthread_mutex_init(&b->mutex, NULL);
    b->eid = g->eid;
    b->eid_index = eid_index;
    b->uasid = g->uasid;
    atomic_init(&b->ref, 1);
    b->aggr_mode = URMA_AGGR_MODE_STANDALONE;
    g->nctx++;
    c->next = g->ctxs;
    g->ctxs = c;
    if (softub__prog_start() != 0)
        SUB_WARN("cannot start the progress thread: RNR retries and liveness checks stall\n");
    pthread_mutex_unlock(&g->lock);
    return b;

err_free_region:
    softub__rfree(aoff, aoff ? sub_ring_bytes(SUB_ASYNC_RING_CAP, asz) : 0);
    softub__rfree(c->sh_off, c->sh_off ? sizeof(struct sub_sctx) : 0);
    free(c);
err_leave:
    if (g->nctx == 0)
        softub__leave();
    pthread_mutex_unlock(&g->lock);
    errno = err;
    return NULL;
}

SUB_API urma_status_t urma_delete_context(urma_context_t *ctx)
{
    struct sub_ctx *c = softub__ctx_check(ctx);
    if (c == NULL)
        return URMA_EINVAL;
    unsigned long ref = atomic_load(&ctx->ref);
    if (ref > 1) {
        SUB_INFO("urma_delete_context: context in use (ref %lu)\n", ref);
        return URMA_EAGAIN;
    }
    struct sub_global *g = &softub__g;
    int last = 0;
    pthread_mutex_lock(&g->lock);
    c->magic = SUB_MAGIC_DEAD;
    ctx->ops = NULL;
    for (struct sub_ctx **pp = &g->ctxs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    atomic_store(&c->sh->h.state, SUB_OBJ_DEAD);
    uint32_t asz = (uint32_t)(8 + sizeof(struct sub_aevt));
    softub__rfree(c->sh->async_ring_off, sub_ring_bytes(SUB_ASYNC_RING_CAP, asz));
    softub__rfree(c->sh_off, sizeof(struct sub_sctx));
    g->nctx--;
    last = g->nctx == 0;
    pthread_mutex_unlock(&g->lock);
    if (last)
        softub__prog_stop();
    pthread_mutex_lock(&g->lock);
    if (last && g->nctx == 0) {
        softub__grave_reap(1);
        softub__leave();
    }
    pthread_mutex_unlock(&g->lock);
    if (ctx->async_fd >= 0)
        close(ctx->async_fd);
    if (ctx->dev_fd >= 0)
        close(ctx->dev_fd);
    pthread_mutex_destroy(&ctx->mutex);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return URMA_SUCCESS;
}

SUB_API urma_status_t urma_user_ctl(urma_context_t *ctx, urma_user_ctl_in_t *in,
                                    urma_user_ctl_out_t *out)
{
    if (ctx == NULL || in == NULL || out == NULL || softub__ctx_check(ctx) == NULL)
        return URMA_EINVAL;
    /* Driver-specific ioctls exist only on UB hardware. */
    return URMA_FAIL;
}
