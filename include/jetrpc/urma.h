/* URMA-specific calls. */
#ifndef JETRPC_URMA_H
#define JETRPC_URMA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Registers the user memory [addr, addr + len) for zero-copy sends over
 * URMA (brpc's RegisterMemoryForUrma): the bytes of user blocks appended
 * with jet_iobuf_append_user that lie inside it are sent straight from it;
 * other user memory is copied into the (registered) block pool first, as
 * always. Over other transports nothing changes. Loads URMA if no URMA
 * channel or server did yet. Local access only: no peer can read or write
 * the range. 0; -EINVAL (NULL addr, len 0, or a range that wraps); -EEXIST
 * (it overlaps a registered range); -ENOSPC (1024 ranges are registered);
 * -ENODEV (URMA is unavailable: see the log); or the provider's error. */
int jet_urma_register_memory(void *addr, size_t len);
/* Undoes the registration that starts at addr. Only once nothing sent
 * from the range is in flight any more, i.e. every iobuf block that
 * referenced it was released (its free callback ran): a send still queued
 * would fail its connection. 0 or -ENOENT. */
int jet_urma_unregister_memory(void *addr);

#ifdef __cplusplus
}
#endif
#endif
