#include "rpc/protocol.h"

#include <errno.h>
#include <stdio.h>

#include "rpc/compress.h"

JET_FLAG_DEFINE_INT64(max_body_size, 64 * 1024 * 1024,
                      "Largest baidu_std body (meta + message + attachment) accepted or sent "
                      "(0 or less, or more than 4294967295: 4294967295, the most a header can "
                      "announce)");

uint32_t jet__max_body_size(uint32_t opt)
{
    if (opt) return opt;
    int64_t v = JET_FLAG(max_body_size);
    if (v <= 0 || v > UINT32_MAX) return UINT32_MAX;
    return (uint32_t)v;
}

int jet__encode_message(const ProtobufCMessage *msg, int compress_type, jet_iobuf_t *body)
{
    if (!jet__compress_supported(compress_type)) return -EINVAL;
    if (compress_type == 0) return msg ? jet__pb_pack_iobuf(msg, body) : 0;
    jet_iobuf_t raw;
    jet_iobuf_init(&raw);
    int rc = msg ? jet__pb_pack_iobuf(msg, &raw) : 0;
    if (rc == 0) rc = jet__compress(compress_type, &raw, body);
    jet_iobuf_fini(&raw);
    return rc;
}

static bool protocol_checksum_ok(const Brpc__Policy__RpcMeta *meta, const jet_iobuf_t *body,
                                 const jet_iobuf_t *attachment)
{
    if (!meta->has_checksum_type || meta->checksum_type != 1) return true; /* unknown: skipped */
    if (!meta->has_checksum_value || meta->checksum_value.len != 4) return false;
    uint32_t crc = jet__crc32c_iobuf(0, body);
    if (meta->has_checksum_with_attachment && meta->checksum_with_attachment)
        crc = jet__crc32c_iobuf(crc, attachment);
    crc = jet__crc32c_mask(crc);
    const uint8_t *v = meta->checksum_value.data;
    uint32_t got = (uint32_t)v[0] << 24 | (uint32_t)v[1] << 16 | (uint32_t)v[2] << 8 | v[3];
    return got == crc;
}

ProtobufCMessage *jet__decode_message(const ProtobufCMessageDescriptor *desc,
                                      const Brpc__Policy__RpcMeta *meta, const jet_iobuf_t *body,
                                      const jet_iobuf_t *attachment, uint32_t max_size,
                                      ProtobufCAllocator *alloc, const char **why_p)
{
    int ctype = meta->has_compress_type ? meta->compress_type : 0;
    if (!jet__compress_supported(ctype)) {
        *why_p = "CompressType";
        return NULL;
    }
    if (!protocol_checksum_ok(meta, body, attachment)) {
        *why_p = "ChecksumType";
        return NULL;
    }
    /* JSON, proto3-JSON and text are not read; a value brpc's enum does not
     * know is an unknown field to it, and the message protobuf, as here. */
    if (meta->has_content_type && meta->content_type >= 1 && meta->content_type <= 3) {
        *why_p = "ContentType";
        return NULL;
    }
    if (ctype == 0) {
        ProtobufCMessage *m = jet__pb_unpack_iobuf(desc, body, alloc);
        if (!m) *why_p = "parse";
        return m;
    }
    jet_iobuf_t plain;
    jet_iobuf_init(&plain);
    ProtobufCMessage *m = NULL;
    if (jet__decompress(ctype, body, &plain, max_size) == 0) m = jet__pb_unpack_iobuf(desc, &plain, alloc);
    jet_iobuf_fini(&plain);
    if (!m) *why_p = "parse";
    return m;
}

void jet__format_parse_error(char *buf, size_t len, const char *what, const char *type_name,
                             const Brpc__Policy__RpcMeta *meta, size_t size)
{
    static const char *const content[] = {"pb", "json", "proto-json", "proto-text"};
    int ctype = meta->has_compress_type ? meta->compress_type : 0;
    int content_type = meta->has_content_type ? meta->content_type : 0;
    int ck = meta->has_checksum_type ? meta->checksum_type : 0;
    snprintf(buf, len, "Fail to parse %s=%s, ContentType=%s, CompressType=%s, ChecksumType=%s, %s_size=%zu",
             what, type_name,
             content_type >= 0 && content_type < 4 ? content[content_type] : "unknown",
             jet__compress_name(ctype), ck == 0 ? "none" : ck == 1 ? "crc32c" : "unknown", what,
             size);
}
