/* Fast paths for brpc.policy.RpcMeta, the meta of every baidu_std frame.
 *
 * protobuf-c's generic packer and unpacker walk descriptors field by field
 * and cost about two thousand instructions for a 40-byte meta, a third of a
 * polled URMA call's own work. These two handle the fields calls use (the
 * request and response metas, compression, correlation id, attachment size,
 * authentication data, content and checksum fields) with straight-line code,
 * and decline anything else (user fields, stream settings, chunk info,
 * unknown fields, repeated sub-messages, malformed input), which then goes
 * through protobuf-c. Their results are protobuf-c's, byte for byte and
 * field for field: the tests compare the two on generated and mutated metas.
 */
#ifndef JET_RPC_META_CODEC_H
#define JET_RPC_META_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "rpc_meta.pb-c.h"

/* Bytes jet__meta_pack writes for meta, or 0 when meta needs protobuf-c. An
 * RpcMeta always has at least one field set in practice; an empty one also
 * answers 0 (protobuf-c packs it as zero bytes). */
size_t jet__meta_packed_size(const Brpc__Policy__RpcMeta *meta);

/* Writes the jet__meta_packed_size(meta) bytes of meta to out (which has
 * room for them), exactly as protobuf_c_message_pack would. */
void jet__meta_pack(const Brpc__Policy__RpcMeta *meta, uint8_t *out);

/* Decodes the len bytes at p into a meta whose memory comes from alloc (the
 * message first, then its sub-messages and strings), as
 * protobuf_c_message_unpack would. NULL when this decoder declines the input
 * (or alloc fails): the caller then asks protobuf-c, which decides whether it
 * is valid. What was allocated before declining is not given back to alloc:
 * callers pass an arena. */
Brpc__Policy__RpcMeta *jet__meta_unpack(const uint8_t *p, size_t len, ProtobufCAllocator *alloc);

#endif
