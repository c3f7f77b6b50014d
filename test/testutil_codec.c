#include "testutil_codec.h"

#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- iobufs and plain bytes ----------------------------------------------- */

uint8_t *jt_iobuf_bytes(const jet_iobuf_t *b, size_t *len_p)
{
    size_t n = jet_iobuf_len(b);
    uint8_t *p = malloc(n ? n : 1);
    if (!p) abort();
    *len_p = jet_iobuf_copy_to(b, p, n, 0);
    return p;
}

static void tc_free_cb(void *data, void *arg)
{
    free(data);
}

void jt_iobuf_split(jet_iobuf_t *b, const void *data, size_t n, size_t piece)
{
    jet_iobuf_init(b);
    for (size_t off = 0; off < n; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        void *p = malloc(len);
        if (!p) abort();
        memcpy(p, (const char *)data + off, len);
        if (jet_iobuf_append_user(b, p, len, tc_free_cb, NULL) != 0) abort();
    }
}

void jt_iobuf_flat(jet_iobuf_t *b, const void *data, size_t n)
{
    jet_iobuf_init(b);
    if (n && jet_iobuf_append(b, data, n) != 0) abort();
}

/* ---- frames through jetrpc's codec ------------------------------------------ */

uint8_t *jt_frame_pack(const Brpc__Policy__RpcMeta *meta, const void *body, size_t blen,
                       const void *att, size_t alen, size_t *len_p)
{
    jet_iobuf_t out, b, a;
    jet_iobuf_init(&out);
    jet_iobuf_init(&b);
    jet_iobuf_init(&a);
    if (blen) jet_iobuf_append(&b, body, blen);
    if (alen) jet_iobuf_append(&a, att, alen);
    uint8_t *p = NULL;
    if (jet__baidu_pack(&out, meta, &b, &a) == 0) p = jt_iobuf_bytes(&out, len_p);
    jet_iobuf_fini(&out);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&a);
    return p;
}

bool jt_frame_decode(const uint8_t *p, size_t n, jet_baidu_frame_t *f)
{
    jet_iobuf_t in;
    jet_iobuf_init(&in);
    int bad = 0;
    jet_parse_result_t r = JET_PARSE_BAD_META;
    if (jet_iobuf_append(&in, p, n) == 0) r = jet__baidu_cut(&in, JT_MAX_FRAME, f, &bad);
    bool ok = r == JET_PARSE_OK && !bad && jet_iobuf_len(&in) == 0;
    jet_iobuf_fini(&in);
    return ok;
}

int jt_frame_split(const uint8_t *p, size_t n, jet_baidu_frame_t *out, int max)
{
    int k = 0;
    for (size_t off = 0; off + 12 <= n && k < max; k++) {
        size_t len = 12 + (size_t)jt_get_be32(p + off + 4);
        if (off + len > n || !jt_frame_decode(p + off, len, &out[k])) break;
        off += len;
    }
    return k;
}

/* ---- frames by hand ------------------------------------------------------------ */

void jt_bytes_add(jt_bytes_t *b, const void *data, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}

void jt_bytes_header(jt_bytes_t *b, uint32_t body_size, uint32_t meta_size)
{
    uint8_t h[12] = {'P', 'R', 'P', 'C'};
    jt_put_be32(h + 4, body_size);
    jt_put_be32(h + 8, meta_size);
    jt_bytes_add(b, h, sizeof h);
}

void jt_bytes_frame_raw(jt_bytes_t *b, const void *meta, size_t meta_len, const void *msg,
                        size_t msg_len, const void *att, size_t att_len)
{
    jt_bytes_header(b, (uint32_t)(meta_len + msg_len + att_len), (uint32_t)meta_len);
    jt_bytes_add(b, meta, meta_len);
    jt_bytes_add(b, msg, msg_len);
    jt_bytes_add(b, att, att_len);
}

void jt_bytes_frame(jt_bytes_t *b, const Brpc__Policy__RpcMeta *meta, const void *msg,
                    size_t msg_len, const void *att, size_t att_len)
{
    size_t n = brpc__policy__rpc_meta__get_packed_size(meta);
    uint8_t *m = malloc(n ? n : 1);
    if (!m) abort();
    brpc__policy__rpc_meta__pack(meta, m);
    jt_bytes_frame_raw(b, m, n, msg, msg_len, att, att_len);
    free(m);
}

/* ---- echo messages -------------------------------------------------------------- */

uint8_t *jt_echo_request_bytes(const char *message, size_t *len_p)
{
    Example__EchoRequest r = EXAMPLE__ECHO_REQUEST__INIT;
    r.message = (char *)message;
    *len_p = protobuf_c_message_get_packed_size(&r.base);
    uint8_t *p = malloc(*len_p + 1);
    if (!p) abort();
    protobuf_c_message_pack(&r.base, p);
    return p;
}

void jt_bytes_echo_request(jt_bytes_t *b, int64_t cid, const char *msg, const void *att,
                           size_t alen)
{
    Brpc__Policy__RpcMeta m = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta q = BRPC__POLICY__RPC_REQUEST_META__INIT;
    q.service_name = "example.EchoService";
    q.method_name = "Echo";
    m.request = &q;
    m.has_correlation_id = true;
    m.correlation_id = cid;
    if (alen) {
        m.has_attachment_size = true;
        m.attachment_size = (int32_t)alen;
    }
    uint8_t *zeros = att || !alen ? NULL : calloc(1, alen);
    if (alen && !att && !zeros) abort();
    size_t n;
    uint8_t *body = jt_echo_request_bytes(msg, &n);
    jt_bytes_frame(b, &m, body, n, att ? att : zeros, alen);
    free(body);
    free(zeros);
}

/* Writes the varint v just before *pos (building from the end). */
static void tc_varint_before(uint8_t *buf, size_t *pos, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
        v >>= 7;
    } while (v);
    *pos -= n;
    memcpy(buf + *pos, tmp, n);
}

uint8_t *jt_nested_node_bytes(size_t depth, size_t *len_p)
{
    /* Inside out: each level adds a tag byte and a length of at most 10. */
    size_t cap = 16 + depth * 11;
    uint8_t *buf = malloc(cap);
    if (!buf) abort();
    size_t pos = cap;
    tc_varint_before(buf, &pos, depth);
    buf[--pos] = 0x18; /* value = 3, varint */
    for (size_t level = 0; level < depth; level++) {
        tc_varint_before(buf, &pos, cap - pos);
        buf[--pos] = 0x0a; /* child = 1, length-delimited */
    }
    *len_p = cap - pos;
    memmove(buf, buf + pos, *len_p);
    return buf;
}

bool jt_big_answer_ok(const uint8_t *frame, size_t len, int64_t cid, size_t n)
{
    if (len < 12 || memcmp(frame, "PRPC", 4) != 0) return false;
    uint32_t body = jt_get_be32(frame + 4), meta_size = jt_get_be32(frame + 8);
    if (body != len - 12 || meta_size > body || body - meta_size < n) return false;
    Brpc__Policy__RpcMeta *m = brpc__policy__rpc_meta__unpack(NULL, meta_size, frame + 12);
    bool ok = m && m->has_correlation_id && m->correlation_id == cid && m->has_attachment_size &&
              (size_t)m->attachment_size == n;
    if (m) brpc__policy__rpc_meta__free_unpacked(m, NULL);
    uint8_t *want = malloc(n ? n : 1);
    if (!want) abort();
    jt_fill_pattern(want, n, 5);
    ok = ok && memcmp(frame + len - n, want, n) == 0;
    free(want);
    return ok;
}

uint8_t *jt_frame_plain_body(const jet_baidu_frame_t *f, size_t *len_p)
{
    size_t n;
    uint8_t *raw = jt_iobuf_bytes(&f->body, &n);
    int ct = f->meta->has_compress_type ? f->meta->compress_type : 0;
    if (ct == 0) {
        *len_p = n;
        return raw;
    }
    uint8_t *out = NULL;
    if (ct == 1) {
        size_t ulen;
        if (snappy_uncompressed_length((const char *)raw, n, &ulen) == SNAPPY_OK) {
            out = malloc(ulen + 1);
            if (snappy_uncompress((const char *)raw, n, (char *)out, &ulen) != SNAPPY_OK) {
                free(out);
                out = NULL;
            }
            *len_p = ulen;
        }
    } else if (ct == 2 || ct == 3) {
        bool form_ok = ct == 2
                           ? n >= 2 && raw[0] == 0x1f && raw[1] == 0x8b
                           : n >= 2 && (raw[0] & 0x0f) == 8 && ((raw[0] << 8) | raw[1]) % 31 == 0;
        z_stream z;
        memset(&z, 0, sizeof z);
        size_t cap = 4 * n + 1024, used = 0;
        out = malloc(cap);
        int zr = form_ok ? inflateInit2(&z, ct == 2 ? 16 + 15 : 15) : Z_DATA_ERROR;
        if (zr == Z_OK) {
            z.next_in = raw;
            z.avail_in = (uInt)n;
            do {
                if (cap - used < 4096) {
                    cap *= 2;
                    out = realloc(out, cap);
                }
                z.next_out = out + used;
                z.avail_out = (uInt)(cap - used);
                zr = inflate(&z, Z_NO_FLUSH);
                used = cap - z.avail_out;
            } while (zr == Z_OK);
            inflateEnd(&z);
        }
        if (zr != Z_STREAM_END || z.avail_in != 0) {
            free(out);
            out = NULL;
        }
        *len_p = used;
    }
    free(raw);
    return out;
}

char *jt_frame_echo_message(const jet_baidu_frame_t *f, bool request)
{
    size_t n;
    uint8_t *p = jt_frame_plain_body(f, &n);
    if (!p) return NULL;
    const ProtobufCMessageDescriptor *d =
        request ? &example__echo_request__descriptor : &example__echo_response__descriptor;
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, n, p);
    free(p);
    if (!m) return NULL;
    char *s = strdup(request ? ((Example__EchoRequest *)m)->message
                             : ((Example__EchoResponse *)m)->message);
    protobuf_c_message_free_unpacked(m, NULL);
    return s;
}

/* ---- the recordings ------------------------------------------------------------- */

uint8_t *jt_interop_load(const char *name, size_t *len_p)
{
    char rel[256];
    snprintf(rel, sizeof rel, "interop/baidu_std/%s", name);
    uint8_t *p = jt_read_file(jt_shared_path(rel), len_p);
    if (!p) fprintf(stderr, "  cannot read %s\n", jt_shared_path(rel));
    return p;
}

bool jt_interop_load_frame(const char *name, jet_baidu_frame_t *f)
{
    size_t n;
    uint8_t *p = jt_interop_load(name, &n);
    bool ok = p && jt_frame_decode(p, n, f);
    if (p && !ok) fprintf(stderr, "  %s does not decode\n", name);
    free(p);
    return ok;
}
