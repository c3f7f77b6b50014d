#include "ubring/ubring_shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_DIR "/dev/shm/"

bool jet__ubring_shm_name_ok(const char *name)
{
    size_t n = strnlen(name, JET_UBRING_NAME_BUF);
    if (n == 0 || n >= JET_UBRING_NAME_BUF) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c <= ' ' || c >= 0x7f || c == '/') return false;
    }
    /* "." and ".." would name /dev/shm itself or its parent. */
    return strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

bool jet__ubring_shm_client_name_ok(const char *name)
{
    if (!jet__ubring_shm_name_ok(name)) return false;
    size_t n = strnlen(name, JET_UBRING_NAME_BUF);
    /* "UBRING_" + at least "h:p" + "_C", the port all digits. */
    if (n < 7 + 3 + 2 || memcmp(name, "UBRING_", 7) != 0 || memcmp(name + n - 2, "_C", 2) != 0)
        return false;
    size_t end = n - 2, colon = end;
    while (colon > 7 && name[colon - 1] != ':')
        colon--;
    if (colon <= 8 || colon == end) return false;
    for (size_t i = colon; i < end; i++)
        if (name[i] < '0' || name[i] > '9') return false;
    return true;
}

bool jet__ubring_shm_len_ok(uint64_t len)
{
    return len > 0 && len <= JET_UBRING_SHM_MAX && len % JET_UBRING_SHM_UNIT == 0;
}

int jet__ubring_shm_client_name(const char *local_ipport, char out[JET_UBRING_NAME_BUF])
{
    int n = snprintf(out, JET_UBRING_NAME_BUF, "UBRING_%s_C", local_ipport);
    if (n < 0) return -EINVAL;
    if (n >= JET_UBRING_NAME_BUF) {
        out[0] = 0;
        return -ENAMETOOLONG;
    }
    return jet__ubring_shm_name_ok(out) ? 0 : -EINVAL;
}

int jet__ubring_shm_server_name(const char *client_name, char out[JET_UBRING_NAME_BUF])
{
    if (!jet__ubring_shm_name_ok(client_name)) return -EINVAL;
    const char *us = strrchr(client_name, '_');
    if (!us) return -EINVAL;
    size_t keep = (size_t)(us - client_name);
    if (keep + 2 > JET_UBRING_NAME_BUF - 1) return -ENAMETOOLONG; /* + "_S" within 47 */
    memcpy(out, client_name, keep);
    memcpy(out + keep, "_S", 3);
    return jet__ubring_shm_name_ok(out) ? 0 : -EINVAL;
}

/* ---- stale segments ---- */

typedef struct ino_set {
    ino_t *v;
    size_t n, cap;
} ino_set_t;

static bool ino_set_has(const ino_set_t *set, ino_t ino)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->v[i] == ino) return true;
    return false;
}

static bool ino_set_add(ino_set_t *set, ino_t ino)
{
    if (ino_set_has(set, ino)) return true;
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 16;
        ino_t *v = realloc(set->v, cap * sizeof *v);
        if (!v) return false;
        set->v = v;
        set->cap = cap;
    }
    set->v[set->n++] = ino;
    return true;
}

/* Takes out of cand the inodes that /proc/<pid>/maps shows mapped. A
 * process whose maps cannot be read (it ended, or is protected from us) is
 * passed over: the age of a candidate is what rules out a live handshake,
 * the maps are a second look. */
static void unmark_mapped(int dirfd, const char *pid, ino_set_t *cand)
{
    char path[64];
    if (snprintf(path, sizeof path, "%.20s/maps", pid) >= (int)sizeof path) return;
    int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long ino;
        int at = 0;
        if (sscanf(line, "%*s %*s %*s %*s %llu %n", &ino, &at) != 1 || ino == 0) continue;
        if (strncmp(line + at, SHM_DIR "UBRING_", sizeof SHM_DIR - 1 + 7) != 0) continue;
        for (size_t i = 0; i < cand->n; i++)
            if (cand->v[i] == (ino_t)ino) cand->v[i] = 0;
    }
    fclose(f);
}

/* A UBRing segment name of ours, last modified min_age_s or more ago: its
 * inode and size. */
static bool shm_candidate(int dirfd, const char *name, int64_t min_age_s, struct stat *st)
{
    size_t n = strlen(name);
    if (n < 9 || memcmp(name, "UBRING_", 7) != 0 ||
        (strcmp(name + n - 2, "_C") != 0 && strcmp(name + n - 2, "_S") != 0) ||
        !jet__ubring_shm_name_ok(name))
        return false;
    if (fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st->st_mode) ||
        st->st_uid != geteuid())
        return false;
    return (int64_t)time(NULL) - (int64_t)st->st_mtime >= min_age_s;
}

int jet__ubring_shm_sweep(int64_t min_age_s, uint64_t *bytes_p)
{
    if (bytes_p) *bytes_p = 0;
    DIR *d = opendir(SHM_DIR);
    if (!d) return 0;
    /* The candidates first: without any, /proc is not read at all. */
    ino_set_t cand = {0};
    struct dirent *e;
    struct stat st;
    bool ok = true;
    while (ok && (e = readdir(d)) != NULL)
        if (shm_candidate(dirfd(d), e->d_name, min_age_s, &st)) ok = ino_set_add(&cand, st.st_ino);
    DIR *p = ok && cand.n > 0 ? opendir("/proc") : NULL;
    ok = p != NULL;
    while (ok && (e = readdir(p)) != NULL)
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9') unmark_mapped(dirfd(p), e->d_name, &cand);
    if (p) closedir(p);
    int removed = 0;
    if (ok) {
        rewinddir(d);
        while ((e = readdir(d)) != NULL) {
            /* Looked at again just before the unlink: a name replaced since
             * the first look is not the candidate. */
            if (!shm_candidate(dirfd(d), e->d_name, min_age_s, &st) || st.st_ino == 0 ||
                !ino_set_has(&cand, st.st_ino) || shm_unlink(e->d_name) < 0)
                continue;
            removed++;
            if (bytes_p) *bytes_p += (uint64_t)st.st_size;
        }
    }
    closedir(d);
    free(cand.v);
    return removed;
}

int jet__ubring_shm_create(const char *name, size_t len, jet_ubring_shm_t *shm)
{
    int rc;
    memset(shm, 0, sizeof *shm);
    if (!jet__ubring_shm_name_ok(name) || !jet__ubring_shm_len_ok(len)) return -EINVAL;
    /* Owner only (brpc asks 0666, which the umask usually makes readable by
     * all): no other user reads the traffic before the name is unlinked. */
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    if (ftruncate(fd, (off_t)len) < 0) {
        rc = -errno;
        goto err_unlink;
    }
    /* Reserves the pages now: a full /dev/shm fails here, not with SIGBUS
     * on a later store into the ring. */
    rc = posix_fallocate(fd, 0, (off_t)len);
    if (rc != 0) {
        rc = -rc;
        goto err_unlink;
    }
    /* A new object reads as zeros (O_EXCL, ftruncate): nothing to clear.
     * Nor are its pages mapped ahead (MAP_POPULATE): a connection pays a
     * fault (about 10 us on a VM) for each page its traffic reaches, once,
     * rather than for all 1024 of each segment at connect, which a short
     * connection never uses. */
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        goto err_unlink;
    }
    close(fd);
    shm->base = p;
    shm->len = len;
    shm->created = true;
    memcpy(shm->name, name, strlen(name) + 1);
    return 0;
err_unlink:
    close(fd);
    shm_unlink(name);
    return rc;
}

int jet__ubring_shm_open(const char *name, size_t len, jet_ubring_shm_t *shm)
{
    int rc;
    memset(shm, 0, sizeof *shm);
    if (!jet__ubring_shm_name_ok(name) || !jet__ubring_shm_len_ok(len)) return -EINVAL;
    int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto err_close;
    }
    /* Only our own user's: whoever owns the object can shrink it under the
     * mapping at any time, and the next store into it (a heartbeat within a
     * second) ends this process with SIGBUS. A process of our user could as
     * well signal us; another user (a client's segment, 0666 under umask 0)
     * must not be able to. brpc's segments (0644) are writable only by
     * their user anyway. */
    if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
        rc = -EPERM;
        goto err_close;
    }
    /* Mapping past the end of the object would SIGBUS on first touch. */
    if (st.st_size < 0 || (uint64_t)st.st_size < len) {
        rc = -EINVAL;
        goto err_close;
    }
    /* The peer may have only ftruncated it (brpc does): its pages are
     * reserved now, so that a full /dev/shm fails this open, not a later
     * store into the ring with SIGBUS. Skipped when they all are already
     * (a jetrpc peer's): walking 1024 present pages costs about 0.4 ms. */
    if ((uint64_t)st.st_blocks * 512 < len) {
        rc = posix_fallocate(fd, 0, (off_t)len);
        if (rc != 0) {
            rc = -rc;
            goto err_close;
        }
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        goto err_close;
    }
    close(fd);
    shm->base = p;
    shm->len = len;
    memcpy(shm->name, name, strlen(name) + 1);
    return 0;
err_close:
    close(fd);
    return rc;
}

int jet__ubring_shm_unlink(jet_ubring_shm_t *shm)
{
    if (!shm->created || shm->unlinked) return 0;
    shm->unlinked = true;
    if (shm_unlink(shm->name) < 0 && errno != ENOENT) return -errno;
    return 0;
}

void jet__ubring_shm_unmap(jet_ubring_shm_t *shm)
{
    if (!shm->base) return;
    munmap(shm->base, shm->len);
    shm->base = NULL;
}
