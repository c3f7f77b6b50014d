/* UBRing shared-memory segments (brpc UBRING.md §3), POSIX shm backend.
 *
 * Contract (also for raw test clients):
 *  - Names: client "UBRING_<local ip:port>_C"; server = the client name up
 *    to (not including) its last '_' + "_S". A usable name has 1..47
 *    characters (the 48-byte hello field keeps a NUL), no '/', printable
 *    ASCII; longer names are refused (-ENAMETOOLONG), never truncated. No
 *    leading '/' in the name: glibc maps it to /dev/shm/<name>.
 *  - Size: a non-zero multiple of 4 MiB, at most JET_UBRING_SHM_MAX.
 *  - create: shm_open(O_CREAT|O_EXCL|O_RDWR, 0600), ftruncate,
 *    posix_fallocate, mmap shared RW, close the fd, zero the whole segment.
 *    On failure nothing is left behind (the name is unlinked). A name that
 *    exists already is -EEXIST.
 *  - sweep: removes the stale segments: UBRING_*_C and _S of this user, not
 *    modified for min_age_s, that no process maps (as far as their
 *    /proc/<pid>/maps can be read). Names outlive their handshake only when
 *    their maker died before unlinking them (established rings and failed
 *    handshakes unlink theirs); such a name keeps its memory and makes the
 *    next connection from the same ip:port fall back to TCP. The age is
 *    what rules out a live handshake (min_age_s must exceed any); the maps,
 *    unreadable for some processes and unseen for other pid namespaces, are
 *    a second look.
 *  - open: shm_open(O_RDWR); a regular file of this process's effective
 *    user (else -EPERM: its owner could shrink it under the mapping), fstat
 *    size >= len (else -EINVAL); mmap len bytes. A missing name is -ENOENT.
 *  - unlink: removes the name if this side created it and has not removed it
 *    yet (ENOENT ignored); the mapping stays valid. unmap: munmap once.
 *    Both are idempotent; a zeroed jet_ubring_shm_t is "nothing held".
 * Not for fast paths: every call is a system call or several. */
#ifndef JET_UBRING_UBRING_SHM_H
#define JET_UBRING_UBRING_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ubring/ubring_hello.h"

#define JET_UBRING_SHM_UNIT ((uint64_t)4 << 20)
#define JET_UBRING_SHM_MAX  ((uint64_t)1 << 30)

typedef struct jet_ubring_shm {
    void *base; /* NULL when not mapped */
    size_t len;
    char name[JET_UBRING_NAME_BUF];
    bool created;  /* this side created the name */
    bool unlinked; /* ... and has removed it */
} jet_ubring_shm_t;

/* "UBRING_" + local_ipport + "_C" into out. 0 or -ENAMETOOLONG / -EINVAL. */
int jet__ubring_shm_client_name(const char *local_ipport, char out[JET_UBRING_NAME_BUF]);
/* The server's name derived from a client's. 0, -EINVAL (no '_' or bad name)
 * or -ENAMETOOLONG. */
int jet__ubring_shm_server_name(const char *client_name, char out[JET_UBRING_NAME_BUF]);
bool jet__ubring_shm_name_ok(const char *name);
/* A name of the form clients make: "UBRING_" + host + ":" + port digits + "_C". */
bool jet__ubring_shm_client_name_ok(const char *name);
bool jet__ubring_shm_len_ok(uint64_t len);

/* 0 or a negative code (-EINVAL for a bad name or size, -EEXIST, -errno).
 * Both reserve the object's first len bytes (posix_fallocate: -ENOSPC when
 * /dev/shm is full), so that no store into the mapping can meet an
 * unbacked page. */
int jet__ubring_shm_create(const char *name, size_t len, jet_ubring_shm_t *shm);
int jet__ubring_shm_open(const char *name, size_t len, jet_ubring_shm_t *shm);
int jet__ubring_shm_unlink(jet_ubring_shm_t *shm);
/* Removes the stale segments (see the contract); returns how many, their
 * bytes in *bytes_p (may be NULL). Reads every visible process's maps when
 * there is a candidate: call it off the loops. */
int jet__ubring_shm_sweep(int64_t min_age_s, uint64_t *bytes_p);
void jet__ubring_shm_unmap(jet_ubring_shm_t *shm);

#endif
