/* User memory registered for zero-copy sends (jet_urma_register_memory):
 * a sorted table of ranges and their segments, read by the send path for
 * memory outside the block pool. */
#ifndef JET_URMA_URMA_USERMEM_H
#define JET_URMA_URMA_USERMEM_H

#include <stddef.h>

#include "urma/urma_api.h"

#define JET_URMA_USERMEM_MAX 1024

/* The segment of the registered range that holds all of [addr, addr + len),
 * or NULL. Any thread. */
urma_target_seg_t *jet__urma_usermem_find(const void *addr, size_t len);

#endif
