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
/* A name found taken by create is replaced when it was last modified more
 * than this long ago (its maker maps it right after creating it). */
#define SHM_TAKEN_MIN_AGE_S 2

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

/* Adds the inodes of the UBRing segments /proc/<pid>/maps shows mapped. */
static void mapped_by(const char *pid, ino_set_t *set)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%s/maps", pid);
    FILE *f = fopen(path, "re");
    if (!f) return; /* gone, or another user's */
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long ino;
        int at = 0;
        if (sscanf(line, "%*s %*s %*s %*s %llu %n", &ino, &at) != 1 || ino == 0) continue;
        if (strncmp(line + at, SHM_DIR "UBRING_", sizeof SHM_DIR - 1 + 7) != 0) continue;
        if (ino_set_has(set, (ino_t)ino)) continue;
        if (set->n == set->cap) {
            size_t cap = set->cap ? set->cap * 2 : 64;
            ino_t *v = realloc(set->v, cap * sizeof *v);
            if (!v) break;
            set->v = v;
            set->cap = cap;
        }
        set->v[set->n++] = (ino_t)ino;
    }
    fclose(f);
}

/* The inodes of the UBRing segments mapped by the processes we can see;
 * false when /proc cannot be read (then nothing may be called stale). */
static bool mapped_inodes(ino_set_t *set)
{
    memset(set, 0, sizeof *set);
    DIR *d = opendir("/proc");
    if (!d) return false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] >= '1' && e->d_name[0] <= '9') mapped_by(e->d_name, set);
    closedir(d);
    return true;
}

/* name's segment is ours, unchanged for min_age_s and mapped by no process in
 * set. */
static bool shm_stale(const char *name, const ino_set_t *set, int64_t min_age_s, off_t *size_p)
{
    char path[sizeof SHM_DIR + JET_UBRING_NAME_BUF];
    snprintf(path, sizeof path, SHM_DIR "%s", name);
    struct stat st;
    if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) return false;
    if ((int64_t)time(NULL) - (int64_t)st.st_mtime < min_age_s) return false;
    if (ino_set_has(set, st.st_ino)) return false;
    if (size_p) *size_p = st.st_size;
    return true;
}

bool jet__ubring_shm_stale(const char *name, int64_t min_age_s)
{
    if (!jet__ubring_shm_name_ok(name)) return false;
    ino_set_t set;
    if (!mapped_inodes(&set)) return false;
    bool stale = shm_stale(name, &set, min_age_s, NULL);
    free(set.v);
    return stale;
}

int jet__ubring_shm_sweep(int64_t min_age_s, uint64_t *bytes_p)
{
    if (bytes_p) *bytes_p = 0;
    DIR *d = opendir(SHM_DIR);
    if (!d) return 0;
    ino_set_t set;
    if (!mapped_inodes(&set)) {
        closedir(d);
        return 0;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 9 || memcmp(e->d_name, "UBRING_", 7) != 0 ||
            (strcmp(e->d_name + n - 2, "_C") != 0 && strcmp(e->d_name + n - 2, "_S") != 0) ||
            !jet__ubring_shm_name_ok(e->d_name))
            continue;
        off_t size = 0;
        if (!shm_stale(e->d_name, &set, min_age_s, &size) || shm_unlink(e->d_name) < 0) continue;
        removed++;
        if (bytes_p) *bytes_p += (uint64_t)size;
    }
    closedir(d);
    free(set.v);
    return removed;
}

static int shm_create_excl(const char *name)
{
    /* Owner only (brpc asks 0666, which the umask usually makes readable by
     * all): no other user reads the traffic before the name is unlinked. */
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || errno != EEXIST) return fd < 0 ? -errno : fd;
    /* A name left by a process that died: replaced, once. */
    if (!jet__ubring_shm_stale(name, SHM_TAKEN_MIN_AGE_S)) return -EEXIST;
    shm_unlink(name);
    fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    return fd < 0 ? -errno : fd;
}

int jet__ubring_shm_create(const char *name, size_t len, jet_ubring_shm_t *shm)
{
    int rc;
    memset(shm, 0, sizeof *shm);
    if (!jet__ubring_shm_name_ok(name) || !jet__ubring_shm_len_ok(len)) return -EINVAL;
    int fd = shm_create_excl(name);
    if (fd < 0) return fd;
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
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        rc = -errno;
        goto err_unlink;
    }
    close(fd);
    memset(p, 0, len);
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
    /* Mapping past the end of the object would SIGBUS on first touch. */
    if (st.st_size < 0 || (uint64_t)st.st_size < len) {
        rc = -EINVAL;
        goto err_close;
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
