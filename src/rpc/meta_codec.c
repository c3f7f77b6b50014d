/* Straight-line RpcMeta packing and unpacking (see meta_codec.h). The rules
 * are protobuf-c 1.4's: fields in number order; optional scalars and bytes
 * when their has_ flag is set, strings and sub-messages when non-NULL; a
 * required string that is NULL packs as ""; negative int32 as ten bytes. */
#include "rpc/meta_codec.h"

#include <stdbool.h>
#include <string.h>

/* Wire tags: field number << 3 | wire type (0 varint, 2 length-delimited). */
enum {
    TAG_META_REQUEST = 1 << 3 | 2,
    TAG_META_RESPONSE = 2 << 3 | 2,
    TAG_META_COMPRESS = 3 << 3,
    TAG_META_CID = 4 << 3,
    TAG_META_ATT = 5 << 3,
    TAG_META_AUTH = 7 << 3 | 2,
    TAG_META_CONTENT = 10 << 3,
    TAG_META_CKTYPE = 11 << 3,
    TAG_META_CKVALUE = 12 << 3 | 2,
    TAG_META_CKATT = 13 << 3,

    TAG_REQ_SERVICE = 1 << 3 | 2,
    TAG_REQ_METHOD = 2 << 3 | 2,
    TAG_REQ_LOG = 3 << 3,
    TAG_REQ_TRACE = 4 << 3,
    TAG_REQ_SPAN = 5 << 3,
    TAG_REQ_PARENT = 6 << 3,
    TAG_REQ_ID = 7 << 3 | 2,
    TAG_REQ_TIMEOUT = 8 << 3,

    TAG_RESP_CODE = 1 << 3,
    TAG_RESP_TEXT = 2 << 3 | 2,
};

/* ---- packing ----------------------------------------------------------- */

/* The writers and sizers are inlined into the field sequences, as the
 * readers below: a meta is a few dozen bytes, calls were most of its cost. */
#define WR_INLINE static inline __attribute__((always_inline))

WR_INLINE size_t varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

WR_INLINE size_t put_varint(uint8_t *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* int32 travels sign-extended to 64 bits. */
static inline uint64_t i32_wire(int32_t v)
{
    return (uint64_t)(int64_t)v;
}

WR_INLINE size_t str_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* sl, ml: the lengths of the service and method names. */
WR_INLINE size_t request_size(const Brpc__Policy__RpcRequestMeta *r, size_t sl, size_t ml)
{
    if (r->base.n_unknown_fields) return 0;
    size_t n = 1 + varint_size(sl) + sl + 1 + varint_size(ml) + ml;
    if (r->has_log_id) n += 1 + varint_size((uint64_t)r->log_id);
    if (r->has_trace_id) n += 1 + varint_size((uint64_t)r->trace_id);
    if (r->has_span_id) n += 1 + varint_size((uint64_t)r->span_id);
    if (r->has_parent_span_id) n += 1 + varint_size((uint64_t)r->parent_span_id);
    if (r->request_id) {
        size_t il = strlen(r->request_id);
        n += 1 + varint_size(il) + il;
    }
    if (r->has_timeout_ms) n += 1 + varint_size(i32_wire(r->timeout_ms));
    return n;
}

WR_INLINE size_t response_size(const Brpc__Policy__RpcResponseMeta *r, int *declined)
{
    if (r->base.n_unknown_fields) {
        *declined = 1;
        return 0;
    }
    size_t n = 0;
    if (r->has_error_code) n += 1 + varint_size(i32_wire(r->error_code));
    if (r->error_text) {
        size_t tl = strlen(r->error_text);
        n += 1 + varint_size(tl) + tl;
    }
    return n;
}

size_t jet__meta_packed_size(const Brpc__Policy__RpcMeta *m)
{
    if (m->chunk_info || m->stream_settings || m->n_user_fields || m->base.n_unknown_fields)
        return 0;
    size_t n = 0;
    if (m->request) {
        size_t r = request_size(m->request, str_len(m->request->service_name),
                                str_len(m->request->method_name));
        if (r == 0) return 0; /* unknown fields (a request meta is never empty) */
        n += 1 + varint_size(r) + r;
    }
    if (m->response) {
        int declined = 0;
        size_t r = response_size(m->response, &declined);
        if (declined) return 0;
        n += 1 + varint_size(r) + r;
    }
    if (m->has_compress_type) n += 1 + varint_size(i32_wire(m->compress_type));
    if (m->has_correlation_id) n += 1 + varint_size((uint64_t)m->correlation_id);
    if (m->has_attachment_size) n += 1 + varint_size(i32_wire(m->attachment_size));
    if (m->has_authentication_data)
        n += 1 + varint_size(m->authentication_data.len) + m->authentication_data.len;
    if (m->has_content_type) n += 1 + varint_size(i32_wire(m->content_type));
    if (m->has_checksum_type) n += 1 + varint_size(i32_wire(m->checksum_type));
    if (m->has_checksum_value) n += 1 + varint_size(m->checksum_value.len) + m->checksum_value.len;
    if (m->has_checksum_with_attachment) n += 2;
    return n;
}

WR_INLINE size_t put_bytes(uint8_t *out, uint8_t tag, const void *data, size_t len)
{
    out[0] = tag;
    size_t n = 1 + put_varint(out + 1, len);
    if (len) memcpy(out + n, data, len);
    return n + len;
}

WR_INLINE size_t put_str(uint8_t *out, uint8_t tag, const char *s)
{
    return put_bytes(out, tag, s, str_len(s));
}

WR_INLINE size_t put_int(uint8_t *out, uint8_t tag, uint64_t v)
{
    out[0] = tag;
    return 1 + put_varint(out + 1, v);
}

void jet__meta_pack(const Brpc__Policy__RpcMeta *m, uint8_t *out)
{
    size_t n = 0;
    if (m->request) {
        const Brpc__Policy__RpcRequestMeta *r = m->request;
        size_t sl = str_len(r->service_name), ml = str_len(r->method_name);
        n += put_int(out + n, TAG_META_REQUEST, request_size(r, sl, ml));
        n += put_bytes(out + n, TAG_REQ_SERVICE, r->service_name, sl);
        n += put_bytes(out + n, TAG_REQ_METHOD, r->method_name, ml);
        if (r->has_log_id) n += put_int(out + n, TAG_REQ_LOG, (uint64_t)r->log_id);
        if (r->has_trace_id) n += put_int(out + n, TAG_REQ_TRACE, (uint64_t)r->trace_id);
        if (r->has_span_id) n += put_int(out + n, TAG_REQ_SPAN, (uint64_t)r->span_id);
        if (r->has_parent_span_id)
            n += put_int(out + n, TAG_REQ_PARENT, (uint64_t)r->parent_span_id);
        if (r->request_id) n += put_str(out + n, TAG_REQ_ID, r->request_id);
        if (r->has_timeout_ms) n += put_int(out + n, TAG_REQ_TIMEOUT, i32_wire(r->timeout_ms));
    }
    if (m->response) {
        const Brpc__Policy__RpcResponseMeta *r = m->response;
        int declined = 0;
        n += put_int(out + n, TAG_META_RESPONSE, response_size(r, &declined));
        if (r->has_error_code) n += put_int(out + n, TAG_RESP_CODE, i32_wire(r->error_code));
        if (r->error_text) n += put_str(out + n, TAG_RESP_TEXT, r->error_text);
    }
    if (m->has_compress_type) n += put_int(out + n, TAG_META_COMPRESS, i32_wire(m->compress_type));
    if (m->has_correlation_id) n += put_int(out + n, TAG_META_CID, (uint64_t)m->correlation_id);
    if (m->has_attachment_size) n += put_int(out + n, TAG_META_ATT, i32_wire(m->attachment_size));
    if (m->has_authentication_data)
        n += put_bytes(out + n, TAG_META_AUTH, m->authentication_data.data,
                       m->authentication_data.len);
    if (m->has_content_type) n += put_int(out + n, TAG_META_CONTENT, i32_wire(m->content_type));
    if (m->has_checksum_type) n += put_int(out + n, TAG_META_CKTYPE, i32_wire(m->checksum_type));
    if (m->has_checksum_value)
        n += put_bytes(out + n, TAG_META_CKVALUE, m->checksum_value.data, m->checksum_value.len);
    if (m->has_checksum_with_attachment) {
        out[n++] = TAG_META_CKATT;
        out[n++] = m->checksum_with_attachment ? 1 : 0;
    }
}

/* ---- unpacking --------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p, *end;
    ProtobufCAllocator *alloc;
} rd_t;

/* A varint of at most ten bytes; false at the end of input or past ten
 * bytes (protobuf-c rejects both). *any is true when a payload bit of any
 * byte is set, protobuf-c's notion of a true bool. */
/* The readers are inlined into the field loops (a meta is a few dozen
 * bytes: call overhead was a third of decoding it). */
#define RD_INLINE static inline __attribute__((always_inline))

RD_INLINE bool rd_varint(rd_t *r, uint64_t *v, bool *any)
{
    if (r->p < r->end && !(*r->p & 0x80)) { /* one byte: most fields */
        *v = *r->p++;
        if (any) *any = *v != 0;
        return true;
    }
    uint64_t x = 0;
    bool nz = false;
    for (int i = 0; i < 10; i++) {
        if (r->p == r->end) return false;
        uint8_t b = *r->p++;
        if (b & 0x7f) nz = true;
        x |= (uint64_t)(b & 0x7f) << (7 * i); /* bits past 64 drop, as in protobuf-c */
        if (!(b & 0x80)) {
            *v = x;
            if (any) *any = nz;
            return true;
        }
    }
    return false;
}

/* A length prefix (at most five bytes, as protobuf-c reads it) and the bytes
 * it announces. */
RD_INLINE bool rd_span(rd_t *r, const uint8_t **data, size_t *len)
{
    uint64_t n = 0;
    for (int i = 0;; i++) {
        if (i == 5 || r->p == r->end) return false;
        uint8_t b = *r->p++;
        n |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) break;
    }
    if (n > (uint64_t)(r->end - r->p)) return false;
    *data = r->p;
    *len = (size_t)n;
    r->p += n;
    return true;
}

RD_INLINE char *rd_string(rd_t *r)
{
    const uint8_t *d;
    size_t n;
    if (!rd_span(r, &d, &n)) return NULL;
    char *s = r->alloc->alloc(r->alloc->allocator_data, n + 1);
    if (!s) return NULL;
    memcpy(s, d, n);
    s[n] = 0;
    return s;
}

RD_INLINE bool rd_bytes(rd_t *r, ProtobufCBinaryData *out)
{
    const uint8_t *d;
    size_t n;
    if (!rd_span(r, &d, &n)) return false;
    out->len = n;
    out->data = NULL;
    if (n) {
        out->data = r->alloc->alloc(r->alloc->allocator_data, n);
        if (!out->data) return false;
        memcpy(out->data, d, n);
    }
    return true;
}

static Brpc__Policy__RpcRequestMeta *rd_request(rd_t *outer)
{
    const uint8_t *d;
    size_t n;
    if (!rd_span(outer, &d, &n)) return NULL;
    rd_t r = {d, d + n, outer->alloc};
    Brpc__Policy__RpcRequestMeta *q = r.alloc->alloc(r.alloc->allocator_data, sizeof *q);
    if (!q) return NULL;
    brpc__policy__rpc_request_meta__init(q);
    uint64_t v;
    while (r.p < r.end) {
        uint8_t tag = *r.p++;
        switch (tag) {
        case TAG_REQ_SERVICE:
            if (!(q->service_name = rd_string(&r))) return NULL;
            break;
        case TAG_REQ_METHOD:
            if (!(q->method_name = rd_string(&r))) return NULL;
            break;
        case TAG_REQ_ID:
            if (!(q->request_id = rd_string(&r))) return NULL;
            break;
        case TAG_REQ_LOG:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            q->has_log_id = 1, q->log_id = (int64_t)v;
            break;
        case TAG_REQ_TRACE:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            q->has_trace_id = 1, q->trace_id = (int64_t)v;
            break;
        case TAG_REQ_SPAN:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            q->has_span_id = 1, q->span_id = (int64_t)v;
            break;
        case TAG_REQ_PARENT:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            q->has_parent_span_id = 1, q->parent_span_id = (int64_t)v;
            break;
        case TAG_REQ_TIMEOUT:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            q->has_timeout_ms = 1, q->timeout_ms = (int32_t)(uint32_t)v;
            break;
        default:
            return NULL; /* unknown field, other wire type or a long tag */
        }
    }
    /* Both names are required: protobuf-c refuses a meta without them. */
    if (!q->service_name || !q->method_name) return NULL;
    return q;
}

static Brpc__Policy__RpcResponseMeta *rd_response(rd_t *outer)
{
    const uint8_t *d;
    size_t n;
    if (!rd_span(outer, &d, &n)) return NULL;
    rd_t r = {d, d + n, outer->alloc};
    Brpc__Policy__RpcResponseMeta *q = r.alloc->alloc(r.alloc->allocator_data, sizeof *q);
    if (!q) return NULL;
    brpc__policy__rpc_response_meta__init(q);
    uint64_t v;
    while (r.p < r.end) {
        uint8_t tag = *r.p++;
        switch (tag) {
        case TAG_RESP_CODE:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            q->has_error_code = 1, q->error_code = (int32_t)(uint32_t)v;
            break;
        case TAG_RESP_TEXT:
            if (!(q->error_text = rd_string(&r))) return NULL;
            break;
        default:
            return NULL;
        }
    }
    return q;
}

Brpc__Policy__RpcMeta *jet__meta_unpack(const uint8_t *p, size_t len, ProtobufCAllocator *alloc)
{
    rd_t r = {p, p + len, alloc};
    Brpc__Policy__RpcMeta *m = alloc->alloc(alloc->allocator_data, sizeof *m);
    if (!m) return NULL;
    brpc__policy__rpc_meta__init(m);
    uint64_t v;
    bool any;
    while (r.p < r.end) {
        uint8_t tag = *r.p++;
        switch (tag) {
        case TAG_META_REQUEST:
            /* A repeated sub-message merges in protobuf-c: its business. */
            if (m->request || !(m->request = rd_request(&r))) return NULL;
            break;
        case TAG_META_RESPONSE:
            if (m->response || !(m->response = rd_response(&r))) return NULL;
            break;
        case TAG_META_COMPRESS:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            m->has_compress_type = 1, m->compress_type = (int32_t)(uint32_t)v;
            break;
        case TAG_META_CID:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            m->has_correlation_id = 1, m->correlation_id = (int64_t)v;
            break;
        case TAG_META_ATT:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            m->has_attachment_size = 1, m->attachment_size = (int32_t)(uint32_t)v;
            break;
        case TAG_META_AUTH:
            if (!rd_bytes(&r, &m->authentication_data)) return NULL;
            m->has_authentication_data = 1;
            break;
        case TAG_META_CONTENT:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            m->has_content_type = 1, m->content_type = (int32_t)(uint32_t)v;
            break;
        case TAG_META_CKTYPE:
            if (!rd_varint(&r, &v, NULL)) return NULL;
            m->has_checksum_type = 1, m->checksum_type = (int32_t)(uint32_t)v;
            break;
        case TAG_META_CKVALUE:
            if (!rd_bytes(&r, &m->checksum_value)) return NULL;
            m->has_checksum_value = 1;
            break;
        case TAG_META_CKATT:
            if (!rd_varint(&r, &v, &any)) return NULL;
            m->has_checksum_with_attachment = 1, m->checksum_with_attachment = any;
            break;
        default:
            return NULL;
        }
    }
    return m;
}
