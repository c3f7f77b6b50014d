/* Pieces of baidu_std shared by the server and the channel: meta building,
 * message encoding with compression and checksums, brpc's error texts. */
#ifndef JET_RPC_PROTOCOL_H
#define JET_RPC_PROTOCOL_H

#include "jetrpc/flags.h"
#include "jetrpc/iobuf.h"
#include "rpc/codec.h"

JET_FLAG_DECLARE_INT64(max_body_size);

/* The limit in force: opt when non-zero, else the flag. */
uint32_t jet__max_body_size(uint32_t opt);

/* Serialises msg (may be NULL: empty body) into body and compresses it with
 * type. 0, -EINVAL (unsupported type), -ENOMEM. */
int jet__encode_message(const ProtobufCMessage *msg, int compress_type, jet_iobuf_t *body);

/* Decompresses and verifies a received message part, then decodes it as
 * desc with alloc (NULL: protobuf-c's default). Returns the message, or NULL
 * with *why_p set to a static reason ("CompressType", "ChecksumType", "parse"). */
ProtobufCMessage *jet__decode_message(const ProtobufCMessageDescriptor *desc,
                                      const Brpc__Policy__RpcMeta *meta, const jet_iobuf_t *body,
                                      const jet_iobuf_t *attachment, uint32_t max_size,
                                      ProtobufCAllocator *alloc, const char **why_p);

/* brpc's text for a message that failed to decode:
 * "Fail to parse <what>=<type>, ContentType=pb, CompressType=none, ChecksumType=none, <what>_size=N" */
void jet__format_parse_error(char *buf, size_t len, const char *what, const char *type_name,
                             const Brpc__Policy__RpcMeta *meta, size_t size);

#endif
