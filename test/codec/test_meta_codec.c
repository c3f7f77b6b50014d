/* The RpcMeta fast paths (rpc/meta_codec.h) against protobuf-c: generated
 * metas pack to the same bytes, decode to metas that pack back to the same
 * bytes, and on mutated input the fast decoder never accepts what
 * protobuf-c refuses nor decodes anything differently. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/meta_codec.h"
#include "testutil.h"

/* ---- an allocator that frees everything at once (like the codec's arena) */

typedef struct track {
    void *p[4096];
    int n;
    int fail_after; /* allocations left before failing (-1: never) */
} track_t;

static void *track_alloc(void *data, size_t size)
{
    track_t *t = data;
    if (t->fail_after == 0 || t->n == 4096) return NULL;
    if (t->fail_after > 0) t->fail_after--;
    void *p = malloc(size ? size : 1);
    if (p) t->p[t->n++] = p;
    return p;
}

static void track_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

static void track_release(track_t *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->p[i]);
    t->n = 0;
}

/* ---- generated metas --------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t any_int64(void)
{
    switch (next() % 5) {
    case 0:
        return 0;
    case 1:
        return (int64_t)(next() % 300);
    case 2:
        return -(int64_t)(next() % 300) - 1;
    case 3:
        return INT64_MIN + (int64_t)(next() % 3);
    default:
        return (int64_t)next();
    }
}

static int32_t any_int32(void)
{
    return (int32_t)any_int64();
}

typedef struct gen {
    Brpc__Policy__RpcMeta m;
    Brpc__Policy__RpcRequestMeta req;
    Brpc__Policy__RpcResponseMeta resp;
    char s[4][64];
    uint8_t b[2][300];
} gen_t;

static char *any_string(char *buf)
{
    if (next() % 6 == 0) return NULL;
    size_t n = next() % 63;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(1 + next() % 255); /* no NUL: protobuf-c packs strlen */
    buf[n] = 0;
    return buf;
}

static void gen_meta(gen_t *g)
{
    memset(g, 0, sizeof *g);
    brpc__policy__rpc_meta__init(&g->m);
    brpc__policy__rpc_request_meta__init(&g->req);
    brpc__policy__rpc_response_meta__init(&g->resp);
    Brpc__Policy__RpcMeta *m = &g->m;
    if (next() % 2) {
        m->request = &g->req;
        g->req.service_name = any_string(g->s[0]);
        g->req.method_name = any_string(g->s[1]);
        if (next() % 2) g->req.has_log_id = 1, g->req.log_id = any_int64();
        if (next() % 3 == 0) g->req.has_trace_id = 1, g->req.trace_id = any_int64();
        if (next() % 3 == 0) g->req.has_span_id = 1, g->req.span_id = any_int64();
        if (next() % 3 == 0) g->req.has_parent_span_id = 1, g->req.parent_span_id = any_int64();
        g->req.request_id = next() % 3 == 0 ? any_string(g->s[2]) : NULL;
        if (next() % 2) g->req.has_timeout_ms = 1, g->req.timeout_ms = any_int32();
    }
    if (next() % 2) {
        m->response = &g->resp;
        if (next() % 2) g->resp.has_error_code = 1, g->resp.error_code = any_int32();
        g->resp.error_text = next() % 2 ? any_string(g->s[3]) : NULL;
    }
    if (next() % 2) m->has_compress_type = 1, m->compress_type = any_int32();
    if (next() % 2) m->has_correlation_id = 1, m->correlation_id = any_int64();
    if (next() % 2) m->has_attachment_size = 1, m->attachment_size = any_int32();
    for (int k = 0; k < 2; k++) {
        if (next() % 3) continue;
        ProtobufCBinaryData *bd = k ? &m->checksum_value : &m->authentication_data;
        bd->len = next() % 300;
        for (size_t i = 0; i < bd->len; i++)
            g->b[k][i] = (uint8_t)next();
        bd->data = bd->len ? g->b[k] : NULL;
        if (k)
            m->has_checksum_value = 1;
        else
            m->has_authentication_data = 1;
    }
    if (next() % 2) m->has_content_type = 1, m->content_type = any_int32();
    if (next() % 2) m->has_checksum_type = 1, m->checksum_type = any_int32();
    if (next() % 3 == 0)
        m->has_checksum_with_attachment = 1, m->checksum_with_attachment = (int)(next() % 2);
}

/* protobuf-c's bytes for a meta (malloc'ed), and their length. */
static uint8_t *pc_pack(const Brpc__Policy__RpcMeta *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(&m->base);
    uint8_t *out = malloc(*len + 1);
    if (out) protobuf_c_message_pack(&m->base, out);
    return out;
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Bytes fields: the same presence, length and bytes, and NULL data exactly
 * when empty (protobuf-c's rule). */
static bool same_bytes(bool ha, const ProtobufCBinaryData *a, bool hb, const ProtobufCBinaryData *b)
{
    if (ha != hb) return false;
    if (!ha) return true;
    return a->len == b->len && (a->data == NULL) == (a->len == 0) &&
           (b->data == NULL) == (b->len == 0) &&
           (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

#define SAME_OPT(a, b, f) ((a)->has_##f == (b)->has_##f && (!(a)->has_##f || (a)->f == (b)->f))

/* Field by field, every field the fast path handles, and none of the others
 * set (the fast path declines those). */
static bool same_meta(const Brpc__Policy__RpcMeta *a, const Brpc__Policy__RpcMeta *b)
{
    if (!a->request != !b->request || !a->response != !b->response) return false;
    if (a->request) {
        const Brpc__Policy__RpcRequestMeta *x = a->request, *y = b->request;
        if (!same_str(x->service_name, y->service_name) ||
            !same_str(x->method_name, y->method_name) || !same_str(x->request_id, y->request_id) ||
            !SAME_OPT(x, y, log_id) || !SAME_OPT(x, y, trace_id) || !SAME_OPT(x, y, span_id) ||
            !SAME_OPT(x, y, parent_span_id) || !SAME_OPT(x, y, timeout_ms) ||
            x->base.n_unknown_fields || y->base.n_unknown_fields)
            return false;
    }
    if (a->response) {
        const Brpc__Policy__RpcResponseMeta *x = a->response, *y = b->response;
        if (!SAME_OPT(x, y, error_code) || !same_str(x->error_text, y->error_text) ||
            x->base.n_unknown_fields || y->base.n_unknown_fields)
            return false;
    }
    return SAME_OPT(a, b, compress_type) && SAME_OPT(a, b, correlation_id) &&
           SAME_OPT(a, b, attachment_size) && SAME_OPT(a, b, content_type) &&
           SAME_OPT(a, b, checksum_type) && SAME_OPT(a, b, checksum_with_attachment) &&
           same_bytes(a->has_authentication_data, &a->authentication_data,
                      b->has_authentication_data, &b->authentication_data) &&
           same_bytes(a->has_checksum_value, &a->checksum_value, b->has_checksum_value,
                      &b->checksum_value) &&
           !a->chunk_info && !b->chunk_info && !a->stream_settings && !b->stream_settings &&
           !a->n_user_fields && !b->n_user_fields && !a->base.n_unknown_fields &&
           !b->base.n_unknown_fields;
}

static void test_pack_matches_protobuf_c(void)
{
    for (int i = 0; i < 20000; i++) {
        gen_t g;
        gen_meta(&g);
        size_t want_len;
        uint8_t *want = pc_pack(&g.m, &want_len);
        JT_REQUIRE(want);
        size_t n = jet__meta_packed_size(&g.m);
        if (want_len == 0) {
            JT_CHECK_EQ(n, 0);
        } else {
            JT_CHECK_EQ(n, want_len);
            uint8_t *got = malloc(n);
            JT_REQUIRE(got);
            jet__meta_pack(&g.m, got);
            JT_CHECK(memcmp(got, want, n) == 0);
            free(got);
        }
        free(want);
    }
}

static void test_pack_declines_other_fields(void)
{
    gen_t g;
    do
        gen_meta(&g);
    while (!g.m.request);
    JT_REQUIRE(jet__meta_packed_size(&g.m) > 0);

    Brpc__Policy__UserFieldsEntry e = BRPC__POLICY__USER_FIELDS_ENTRY__INIT;
    Brpc__Policy__UserFieldsEntry *ep = &e;
    g.m.n_user_fields = 1;
    g.m.user_fields = &ep;
    JT_CHECK_EQ(jet__meta_packed_size(&g.m), 0);
    g.m.n_user_fields = 0;

    Brpc__Policy__StreamSettings ss = BRPC__POLICY__STREAM_SETTINGS__INIT;
    g.m.stream_settings = &ss;
    JT_CHECK_EQ(jet__meta_packed_size(&g.m), 0);
    g.m.stream_settings = NULL;

    Brpc__Policy__ChunkInfo ci = BRPC__POLICY__CHUNK_INFO__INIT;
    g.m.chunk_info = &ci;
    JT_CHECK_EQ(jet__meta_packed_size(&g.m), 0);
    g.m.chunk_info = NULL;

    ProtobufCMessageUnknownField uf = {
        .tag = 99, .wire_type = PROTOBUF_C_WIRE_TYPE_VARINT, .len = 1, .data = (uint8_t *)"\x01"};
    g.req.base.n_unknown_fields = 1;
    g.req.base.unknown_fields = &uf;
    JT_CHECK_EQ(jet__meta_packed_size(&g.m), 0);
    g.req.base.n_unknown_fields = 0;
    g.m.base.n_unknown_fields = 1;
    g.m.base.unknown_fields = &uf;
    JT_CHECK_EQ(jet__meta_packed_size(&g.m), 0);
    g.m.base.n_unknown_fields = 0;
    g.m.response = &g.resp;
    g.resp.base.n_unknown_fields = 1;
    g.resp.base.unknown_fields = &uf;
    JT_CHECK_EQ(jet__meta_packed_size(&g.m), 0);
}

/* Decodes p both ways. Returns 0 when both refuse or the fast decoder
 * declines, 1 when both accept the same meta, -1 on a disagreement. */
static int decode_both(const uint8_t *p, size_t n, bool *fast_took)
{
    track_t t = {.fail_after = -1};
    ProtobufCAllocator a = {.alloc = track_alloc, .free = track_free, .allocator_data = &t};
    Brpc__Policy__RpcMeta *fast = jet__meta_unpack(p, n, &a);
    Brpc__Policy__RpcMeta *ref = (Brpc__Policy__RpcMeta *)protobuf_c_message_unpack(
        &brpc__policy__rpc_meta__descriptor, NULL, n, p);
    int r = 0;
    if (fast && !ref)
        r = -1;
    else if (fast && !same_meta(fast, ref))
        r = -1;
    else if (fast)
        r = 1;
    if (fast_took) *fast_took = fast != NULL;
    if (ref) protobuf_c_message_free_unpacked(&ref->base, NULL);
    track_release(&t);
    return r;
}

static void test_unpack_matches_protobuf_c(void)
{
    int took = 0;
    for (int i = 0; i < 20000; i++) {
        gen_t g;
        gen_meta(&g);
        size_t n;
        uint8_t *bytes = pc_pack(&g.m, &n);
        JT_REQUIRE(bytes);
        bool fast_took = false;
        JT_CHECK(decode_both(bytes, n, &fast_took) >= 0);
        /* NULL names pack as "": every packed meta is complete. */
        JT_CHECK(fast_took);
        took += fast_took;
        free(bytes);
    }
    JT_CHECK_EQ(took, 20000);
}

static void test_unpack_mutations(void)
{
    int disagreements = 0, fast = 0, total = 0;
    for (int i = 0; i < 6000; i++) {
        gen_t g;
        gen_meta(&g);
        size_t n;
        uint8_t *bytes = pc_pack(&g.m, &n);
        JT_REQUIRE(bytes);
        uint8_t buf[1024];
        for (int k = 0; k < 30 && n > 0 && n < sizeof buf - 16; k++) {
            size_t m = n;
            memcpy(buf, bytes, n);
            switch (next() % 4) {
            case 0:
                buf[next() % m] ^= (uint8_t)(1u << (next() % 8));
                break;
            case 1:
                buf[next() % m] = (uint8_t)next();
                break;
            case 2:
                m = next() % m;
                break;
            default: {
                size_t at = next() % (m + 1);
                memmove(buf + at + 1, buf + at, m - at);
                buf[at] = (uint8_t)next();
                m++;
            }
            }
            bool took = false;
            int r = decode_both(buf, m, &took);
            if (r < 0) disagreements++;
            fast += took;
            total++;
        }
        free(bytes);
    }
    JT_CHECK_EQ(disagreements, 0);
    /* Most mutations still decode: the fast path did real work. */
    JT_CHECK(fast > total / 10);
}

static void test_unpack_edge_cases(void)
{
    bool took;
    /* checksum_with_attachment as a ten-byte varint whose only set bits are
     * past bit 63: true for protobuf-c, and for us. */
    static const uint8_t b10[] = {0x68, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7e};
    JT_CHECK_EQ(decode_both(b10, sizeof b10, &took), 1);
    /* Eleven-byte varint: refused by both. */
    static const uint8_t b11[] = {0x20, 0x80, 0x80, 0x80, 0x80, 0x80,
                                  0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    JT_CHECK_EQ(decode_both(b11, sizeof b11, &took), 0);
    JT_CHECK(!took);
    /* A negative int32 in ten bytes, and one in five (the high bits cut). */
    static const uint8_t neg[] = {0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0x01, 0x28, 0xff, 0xff, 0xff, 0xff, 0x7f};
    JT_CHECK_EQ(decode_both(neg, sizeof neg, &took), 1);
    /* A request meta without its method name: both refuse. */
    static const uint8_t noname[] = {0x0a, 0x03, 0x0a, 0x01, 'S'};
    JT_CHECK_EQ(decode_both(noname, sizeof noname, &took), 0);
    JT_CHECK(!took);
    /* Two request metas merge in protobuf-c: the fast path leaves it that. */
    static const uint8_t twice[] = {0x0a, 0x08, 0x0a, 0x01, 'S',  0x12, 0x01, 'M',  0x18,
                                    0x03, 0x0a, 0x06, 0x0a, 0x01, 'T',  0x12, 0x01, 'N'};
    int r = decode_both(twice, sizeof twice, &took);
    JT_CHECK(r == 0 && !took);
    /* A user field (9): declined, protobuf-c takes it. */
    static const uint8_t uf[] = {0x4a, 0x04, 0x0a, 0x00, 0x12, 0x00, 0x20, 0x07};
    JT_CHECK_EQ(decode_both(uf, sizeof uf, &took), 0);
    JT_CHECK(!took);
    /* Empty input: an empty meta both ways. */
    JT_CHECK_EQ(decode_both((const uint8_t *)"", 0, &took), 1);
    /* Bytes fields of length 0 (NULL data in both) and a string with a NUL
     * inside (both keep the bytes before it). */
    static const uint8_t z[] = {0x3a, 0x00, 0x62, 0x00, 0x12, 0x04, 0x12, 0x02, 'a', 0x00};
    JT_CHECK_EQ(decode_both(z, sizeof z, &took), 1);
}

static void test_unpack_out_of_memory(void)
{
    gen_t g;
    do
        gen_meta(&g);
    while (!g.m.request || !g.req.service_name || !g.req.method_name);
    size_t n;
    uint8_t *bytes = pc_pack(&g.m, &n);
    JT_REQUIRE(bytes);
    for (int k = 0; k < 6; k++) {
        track_t t = {.fail_after = k};
        ProtobufCAllocator a = {.alloc = track_alloc, .free = track_free, .allocator_data = &t};
        Brpc__Policy__RpcMeta *m = jet__meta_unpack(bytes, n, &a);
        if (m) JT_CHECK(k >= 3); /* message, request meta, two names */
        track_release(&t);
    }
    free(bytes);
}

int main(void)
{
    JT_RUN(test_pack_matches_protobuf_c);
    JT_RUN(test_pack_declines_other_fields);
    JT_RUN(test_unpack_matches_protobuf_c);
    JT_RUN(test_unpack_mutations);
    JT_RUN(test_unpack_edge_cases);
    JT_RUN(test_unpack_out_of_memory);
    return jt_finish();
}
