/* Message compression (baidu_std compress_type) and CRC32C checksums.
 *
 * Types: 0 none, 1 snappy (raw block format), 2 gzip (RFC 1952), 3 zlib
 * (RFC 1950); anything else is unsupported. Only the message part of a frame
 * is ever compressed. */
#ifndef JET_RPC_COMPRESS_H
#define JET_RPC_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jetrpc/iobuf.h"

bool jet__compress_supported(int type);
/* "none", "snappy", "gzip", "zlib" or "unknown" (brpc's spelling). */
const char *jet__compress_name(int type);

/* Appends the compressed form of in to out. 0, -EINVAL (unsupported type),
 * -ENOMEM. type 0 copies by sharing blocks. */
int jet__compress(int type, const jet_iobuf_t *in, jet_iobuf_t *out);
/* Appends the decompressed form of in to out, producing at most max_out
 * bytes. 0, -EINVAL (unsupported type), -EBADMSG (corrupt input), -EMSGSIZE
 * (output would exceed max_out), -ENOMEM. Nothing is appended on failure. */
int jet__decompress(int type, const jet_iobuf_t *in, jet_iobuf_t *out, size_t max_out);

/* CRC32C (Castagnoli): crc = jet__crc32c(0, data, n) for a fresh value;
 * pass the previous result to continue. */
uint32_t jet__crc32c(uint32_t crc, const void *data, size_t n);
uint32_t jet__crc32c_iobuf(uint32_t crc, const jet_iobuf_t *buf);
/* brpc's (LevelDB's) masked form: rotate right 15, add 0xa282ead8. */
static inline uint32_t jet__crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

#endif
