#include "ubring/ubring_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
