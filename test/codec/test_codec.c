/* baidu_std framing: pack/cut round trips, partial input, guard pages,
 * malformed frames and the captured brpc bytes of BAIDU_STD.md. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "echo.pb-c.h"
#include "nest.pb-c.h"
#include "rpc/codec.h"
#include "rpc/pb_nesting.h"
#include "testutil.h"
#include "testutil_codec.h"

#define MAX_BODY (64u * 1024 * 1024)

/* ---- helpers ---- */

/* All of b (malloc'd); every byte must copy out. */
static uint8_t *iobuf_bytes(const jet_iobuf_t *b)
{
    size_t n;
    uint8_t *p = jt_iobuf_bytes(b, &n);
    JT_CHECK_EQ(n, jet_iobuf_len(b));
    return p;
}

static int iobuf_is(const jet_iobuf_t *b, const void *data, size_t n)
{
    return jet_iobuf_equals(b, data, n) == 0;
}

/* A frame from raw meta bytes and payload bytes (header computed). */
static size_t raw_frame(uint8_t *out, const void *meta, size_t meta_len, const void *payload,
                        size_t payload_len)
{
    memcpy(out, "PRPC", 4);
    jt_put_be32(out + 4, (uint32_t)(meta_len + payload_len));
    jt_put_be32(out + 8, (uint32_t)meta_len);
    if (meta_len) memcpy(out + 12, meta, meta_len);
    if (payload_len) memcpy(out + 12 + meta_len, payload, payload_len);
    return 12 + meta_len + payload_len;
}

/* Packs a frame and returns its bytes (malloc'd). */
static uint8_t *pack_bytes(const Brpc__Policy__RpcMeta *meta, const void *body, size_t blen,
                           const void *att, size_t alen, size_t *len_p)
{
    jet_iobuf_t out, b, a;
    jet_iobuf_init(&out);
    jt_iobuf_flat(&b, body, blen);
    jt_iobuf_flat(&a, att, alen);
    JT_CHECK_EQ(jet__baidu_pack(&out, meta, &b, &a), 0);
    JT_CHECK(jet_iobuf_empty(&b));
    JT_CHECK(jet_iobuf_empty(&a));
    *len_p = jet_iobuf_len(&out);
    uint8_t *p = iobuf_bytes(&out);
    jet_iobuf_fini(&out);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&a);
    return p;
}

/* Packs the meta alone (as bytes) for byte comparisons. */
static uint8_t *meta_bytes(const Brpc__Policy__RpcMeta *meta, size_t *len_p)
{
    *len_p = protobuf_c_message_get_packed_size(&meta->base);
    uint8_t *p = malloc(*len_p ? *len_p : 1);
    protobuf_c_message_pack(&meta->base, p);
    return p;
}

/* Every field brpc may send (§3.1), plus chunk_info for completeness. */
typedef struct full_req {
    Brpc__Policy__RpcMeta meta;
    Brpc__Policy__RpcRequestMeta req;
    Brpc__Policy__StreamSettings ss;
    Brpc__Policy__ChunkInfo chunk;
    Brpc__Policy__UserFieldsEntry uf[2];
    Brpc__Policy__UserFieldsEntry *ufp[2];
    int64_t extra[3];
    uint8_t auth[5];
    uint8_t csum[4];
} full_req_t;

static void full_req_init(full_req_t *h, int64_t cid, int32_t att_size)
{
    brpc__policy__rpc_meta__init(&h->meta);
    brpc__policy__rpc_request_meta__init(&h->req);
    brpc__policy__stream_settings__init(&h->ss);
    brpc__policy__chunk_info__init(&h->chunk);
    h->req.service_name = "example.EchoService";
    h->req.method_name = "Echo";
    h->req.has_log_id = 1;
    h->req.log_id = 0x1234567890;
    h->req.has_trace_id = 1;
    h->req.trace_id = -77;
    h->req.has_span_id = 1;
    h->req.span_id = INT64_MAX;
    h->req.has_parent_span_id = 1;
    h->req.parent_span_id = INT64_MIN;
    h->req.request_id = "req-42";
    h->req.has_timeout_ms = 1;
    h->req.timeout_ms = 1500;
    h->meta.request = &h->req;
    h->meta.has_compress_type = 1;
    h->meta.compress_type = 2;
    h->meta.has_correlation_id = 1;
    h->meta.correlation_id = cid;
    if (att_size) {
        h->meta.has_attachment_size = 1;
        h->meta.attachment_size = att_size;
    }
    h->chunk.stream_id = 5;
    h->chunk.chunk_id = 6;
    h->meta.chunk_info = &h->chunk;
    memcpy(h->auth, "\x00\x01secret", 5);
    h->meta.has_authentication_data = 1;
    h->meta.authentication_data.len = sizeof(h->auth);
    h->meta.authentication_data.data = h->auth;
    h->ss.stream_id = 99;
    h->ss.has_need_feedback = 1;
    h->ss.need_feedback = 1;
    h->ss.has_writable = 1;
    h->ss.writable = 1;
    h->extra[0] = 100;
    h->extra[1] = -1;
    h->extra[2] = 1ll << 40;
    h->ss.n_extra_stream_ids = 3;
    h->ss.extra_stream_ids = h->extra;
    h->meta.stream_settings = &h->ss;
    for (int i = 0; i < 2; i++) {
        brpc__policy__user_fields_entry__init(&h->uf[i]);
        h->ufp[i] = &h->uf[i];
    }
    h->uf[0].key = "k1";
    h->uf[0].value = "v1";
    h->uf[1].key = "key-two";
    h->uf[1].value = "";
    h->meta.n_user_fields = 2;
    h->meta.user_fields = h->ufp;
    h->meta.has_content_type = 1;
    h->meta.content_type = 0;
    h->meta.has_checksum_type = 1;
    h->meta.checksum_type = 1;
    memcpy(h->csum, "\x61\xf6\x3a\x7e", 4);
    h->meta.has_checksum_value = 1;
    h->meta.checksum_value.len = 4;
    h->meta.checksum_value.data = h->csum;
    h->meta.has_checksum_with_attachment = 1;
    h->meta.checksum_with_attachment = 1;
}

static void check_full_req(const Brpc__Policy__RpcMeta *m, int64_t cid, int32_t att_size)
{
    JT_REQUIRE(m != NULL);
    JT_REQUIRE(m->request != NULL);
    JT_CHECK(m->response == NULL);
    JT_CHECK(strcmp(m->request->service_name, "example.EchoService") == 0);
    JT_CHECK(strcmp(m->request->method_name, "Echo") == 0);
    JT_CHECK(m->request->has_log_id && m->request->log_id == 0x1234567890);
    JT_CHECK(m->request->has_trace_id && m->request->trace_id == -77);
    JT_CHECK(m->request->has_span_id && m->request->span_id == INT64_MAX);
    JT_CHECK(m->request->has_parent_span_id && m->request->parent_span_id == INT64_MIN);
    JT_CHECK(m->request->request_id && strcmp(m->request->request_id, "req-42") == 0);
    JT_CHECK(m->request->has_timeout_ms && m->request->timeout_ms == 1500);
    JT_CHECK(m->has_compress_type && m->compress_type == 2);
    JT_CHECK(m->has_correlation_id && m->correlation_id == cid);
    JT_CHECK_EQ(m->has_attachment_size, att_size != 0);
    if (att_size) JT_CHECK_EQ(m->attachment_size, att_size);
    JT_REQUIRE(m->chunk_info != NULL);
    JT_CHECK(m->chunk_info->stream_id == 5 && m->chunk_info->chunk_id == 6);
    JT_CHECK(m->has_authentication_data && m->authentication_data.len == 5 &&
             memcmp(m->authentication_data.data, "\x00\x01secret", 5) == 0);
    JT_REQUIRE(m->stream_settings != NULL);
    JT_CHECK_EQ(m->stream_settings->stream_id, 99);
    JT_CHECK(m->stream_settings->need_feedback && m->stream_settings->writable);
    JT_REQUIRE(m->stream_settings->n_extra_stream_ids == 3);
    JT_CHECK_EQ(m->stream_settings->extra_stream_ids[0], 100);
    JT_CHECK_EQ(m->stream_settings->extra_stream_ids[1], -1);
    JT_CHECK_EQ(m->stream_settings->extra_stream_ids[2], 1ll << 40);
    JT_REQUIRE(m->n_user_fields == 2);
    JT_CHECK(strcmp(m->user_fields[0]->key, "k1") == 0);
    JT_CHECK(strcmp(m->user_fields[0]->value, "v1") == 0);
    JT_CHECK(strcmp(m->user_fields[1]->key, "key-two") == 0);
    JT_CHECK(strcmp(m->user_fields[1]->value, "") == 0);
    JT_CHECK(m->has_content_type && m->content_type == 0);
    JT_CHECK(m->has_checksum_type && m->checksum_type == 1);
    JT_CHECK(m->has_checksum_value && m->checksum_value.len == 4 &&
             memcmp(m->checksum_value.data, "\x61\xf6\x3a\x7e", 4) == 0);
    JT_CHECK(m->has_checksum_with_attachment && m->checksum_with_attachment);
}

/* Packs an EchoRequest with the given message into an iobuf. */
static void echo_body(jet_iobuf_t *b, const char *msg)
{
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = (char *)msg;
    jet_iobuf_init(b);
    JT_CHECK_EQ(jet__pb_pack_iobuf(&req.base, b), 0);
    JT_CHECK_EQ(jet_iobuf_len(b), example__echo_request__get_packed_size(&req));
}

static jet_parse_result_t cut1(jet_iobuf_t *in, jet_baidu_frame_t *f, int *bad)
{
    jet__baidu_frame_init(f);
    return jet__baidu_cut(in, MAX_BODY, f, bad);
}

/* ---- round trips ---- */

static void roundtrip_request_all_fields(void)
{
    static const size_t att_sizes[] = {0, 1, 1024 * 1024 + 3};
    for (size_t k = 0; k < sizeof(att_sizes) / sizeof(att_sizes[0]); k++) {
        size_t alen = att_sizes[k];
        full_req_t h;
        full_req_init(&h, 0x100000002ll + (int64_t)k, (int32_t)alen);
        jet_iobuf_t body, att, out;
        echo_body(&body, "hello world");
        size_t blen = jet_iobuf_len(&body);
        uint8_t *abytes = malloc(alen + 1);
        for (size_t i = 0; i < alen; i++)
            abytes[i] = (uint8_t)(i * 7 + k);
        jt_iobuf_flat(&att, abytes, alen);
        jet_iobuf_init(&out);
        JT_REQUIRE(jet__baidu_pack(&out, &h.meta, &body, &att) == 0);
        JT_CHECK(jet_iobuf_empty(&body));
        JT_CHECK(jet_iobuf_empty(&att));
        size_t msize = protobuf_c_message_get_packed_size(&h.meta.base);
        JT_CHECK_EQ(jet_iobuf_len(&out), 12 + msize + blen + alen);

        uint32_t bs = 0, ms = 0;
        JT_CHECK_EQ(jet__baidu_peek(&out, MAX_BODY, &bs, &ms), JET_PARSE_OK);
        JT_CHECK_EQ(bs, msize + blen + alen);
        JT_CHECK_EQ(ms, msize);

        jet_baidu_frame_t f;
        int bad = -1;
        JT_CHECK_EQ(cut1(&out, &f, &bad), JET_PARSE_OK);
        JT_CHECK_EQ(bad, 0);
        JT_CHECK(jet_iobuf_empty(&out));
        check_full_req(f.meta, 0x100000002ll + (int64_t)k, (int32_t)alen);
        JT_CHECK_EQ(jet_iobuf_len(&f.body), blen);
        JT_CHECK(iobuf_is(&f.attachment, abytes, alen));
        Example__EchoRequest *er = (Example__EchoRequest *)jet__pb_unpack_iobuf(
            &example__echo_request__descriptor, &f.body, NULL);
        JT_CHECK(er && strcmp(er->message, "hello world") == 0);
        protobuf_c_message_free_unpacked(&er->base, NULL);

        /* The decoded meta packs back to the very same bytes. */
        size_t l1, l2;
        uint8_t *m1 = meta_bytes(&h.meta, &l1);
        uint8_t *m2 = f.meta ? meta_bytes(f.meta, &l2) : NULL;
        JT_CHECK(m2 && l1 == l2 && memcmp(m1, m2, l1) == 0);
        free(m1);
        free(m2);
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&out);
        jet_iobuf_fini(&body);
        jet_iobuf_fini(&att);
        free(abytes);
    }
}

static void roundtrip_response(void)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta resp = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    resp.has_error_code = 1;
    resp.error_code = 0;
    meta.response = &resp;
    meta.has_correlation_id = 1;
    meta.correlation_id = 7;
    meta.has_attachment_size = 1;
    meta.attachment_size = 3;
    size_t len;
    uint8_t *bytes = pack_bytes(&meta, "\x0a\x01x", 3, "att", 3, &len);
    jet_iobuf_t in;
    jt_iobuf_split(&in, bytes, len, 5);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_REQUIRE(f.meta && f.meta->response);
    JT_CHECK(f.meta->request == NULL);
    JT_CHECK(f.meta->response->has_error_code && f.meta->response->error_code == 0);
    JT_CHECK(f.meta->response->error_text == NULL);
    JT_CHECK_EQ(f.meta->correlation_id, 7);
    JT_CHECK(iobuf_is(&f.body, "\x0a\x01x", 3));
    JT_CHECK(iobuf_is(&f.attachment, "att", 3));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
    free(bytes);

    /* An error response: no message and no attachment, body_size == meta_size. */
    resp.error_code = 1002;
    resp.error_text = "[127.0.0.1:1][E1002]Fail to find method=a.B/C";
    meta.has_attachment_size = 0;
    bytes = pack_bytes(&meta, NULL, 0, NULL, 0, &len);
    JT_CHECK(memcmp(bytes + 4, bytes + 8, 4) == 0);
    jt_iobuf_flat(&in, bytes, len);
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_REQUIRE(f.meta && f.meta->response);
    JT_CHECK_EQ(f.meta->response->error_code, 1002);
    JT_CHECK(strcmp(f.meta->response->error_text, resp.error_text) == 0);
    JT_CHECK(jet_iobuf_empty(&f.body));
    JT_CHECK(jet_iobuf_empty(&f.attachment));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
    free(bytes);
}

/* NULL body/attachment, and a meta over the stack threshold (packed through
 * the streaming sink). */
static void pack_null_parts_and_large_meta(void)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta req = BRPC__POLICY__RPC_REQUEST_META__INIT;
    req.service_name = "s.S";
    req.method_name = "m";
    meta.request = &req;
    jet_iobuf_t out;
    jet_iobuf_init(&out);
    JT_CHECK_EQ(jet__baidu_pack(&out, &meta, NULL, NULL), 0);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&out, &f, &bad), JET_PARSE_OK);
    JT_CHECK(f.meta && strcmp(f.meta->request->method_name, "m") == 0);
    jet__baidu_frame_fini(&f);

    static const size_t sizes[] = {400, 500, 501, 4000, 100000};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint8_t *auth = malloc(sizes[k]);
        for (size_t i = 0; i < sizes[k]; i++)
            auth[i] = (uint8_t)(i ^ k);
        meta.has_authentication_data = 1;
        meta.authentication_data.data = auth;
        meta.authentication_data.len = sizes[k];
        Brpc__Policy__UserFieldsEntry e[40], *ep[40];
        char keys[40][8];
        for (int i = 0; i < 40; i++) {
            brpc__policy__user_fields_entry__init(&e[i]);
            snprintf(keys[i], sizeof keys[i], "k%d", i);
            e[i].key = keys[i];
            e[i].value = keys[i];
            ep[i] = &e[i];
        }
        meta.n_user_fields = 40;
        meta.user_fields = ep;
        jet_iobuf_t body;
        echo_body(&body, "x");
        /* out already holds bytes: the frame is appended after them. */
        JT_CHECK_EQ(jet_iobuf_append(&out, "junk", 4), 0);
        JT_REQUIRE(jet__baidu_pack(&out, &meta, &body, NULL) == 0);
        JT_CHECK_EQ(jet_iobuf_pop_front(&out, 4), 4);
        size_t l1, l2;
        uint8_t *m1 = meta_bytes(&meta, &l1);
        uint8_t *all = iobuf_bytes(&out);
        JT_CHECK(memcmp(all + 12, m1, l1) == 0);
        JT_CHECK_EQ(cut1(&out, &f, &bad), JET_PARSE_OK);
        JT_CHECK(jet_iobuf_empty(&out));
        uint8_t *m2 = f.meta ? meta_bytes(f.meta, &l2) : NULL;
        JT_CHECK(m2 && l1 == l2 && memcmp(m1, m2, l1) == 0);
        JT_CHECK(iobuf_is(&f.body, "\x0a\x01x", 3));
        free(m1);
        free(m2);
        free(all);
        free(auth);
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&body);
    }
    jet_iobuf_fini(&out);
}

static void negative_correlation_id(void)
{
    static const int64_t ids[] = {-5, -1, INT64_MIN, INT64_MAX, 0};
    for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
        Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
        Brpc__Policy__RpcResponseMeta resp = BRPC__POLICY__RPC_RESPONSE_META__INIT;
        meta.response = &resp;
        meta.has_correlation_id = 1;
        meta.correlation_id = ids[k];
        size_t len;
        uint8_t *bytes = pack_bytes(&meta, NULL, 0, NULL, 0, &len);
        if (ids[k] == -5) {
            static const uint8_t want[] = {0x12, 0x00, 0x20, 0xfb, 0xff, 0xff, 0xff,
                                           0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
            JT_CHECK_EQ(len, 12 + sizeof(want));
            JT_CHECK(memcmp(bytes + 12, want, sizeof(want)) == 0);
        }
        jet_iobuf_t in;
        jt_iobuf_flat(&in, bytes, len);
        jet_baidu_frame_t f;
        int bad;
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        JT_CHECK(f.meta && f.meta->has_correlation_id && f.meta->correlation_id == ids[k]);
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&in);
        free(bytes);
    }
}

/* Unknown fields (numbers 100/101 and other wire types) in RpcMeta and in
 * RpcRequestMeta are skipped; the known fields still decode. */
static void unknown_fields_skipped(void)
{
    static const uint8_t meta[] = {
        0x0a, 0x0d,                                       /* request, 13 bytes */
        0x0a, 0x03, 's',  '.',  'S',  0x12, 0x01, 'm',    /* service, method */
        0xa0, 0x06, 0x01,                                 /* field 100 varint */
        0x18, 0x05,                                       /* log_id 5 */
        0xaa, 0x06, 0x03, 'a',  'b',  'c',                /* field 101 bytes */
        0x71, 1,    2,    3,    4,    5,    6,    7,   8, /* field 14 fixed64 */
        0x20, 0x2a,                                       /* correlation_id 42 */
        0x7d, 9,    9,    9,    9,                        /* field 15 fixed32 */
        0xf8, 0xff, 0xff, 0xff, 0x0f, 0x80, 0x01,         /* field 2^29-1 varint */
        0x28, 0x02,                                       /* attachment_size 2 */
    };
    uint8_t frame[128];
    size_t len = raw_frame(frame, meta, sizeof(meta), "BBAA", 4);
    jet_iobuf_t in;
    jt_iobuf_flat(&in, frame, len);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_CHECK_EQ(bad, 0);
    JT_REQUIRE(f.meta && f.meta->request);
    JT_CHECK(strcmp(f.meta->request->service_name, "s.S") == 0);
    JT_CHECK(strcmp(f.meta->request->method_name, "m") == 0);
    JT_CHECK(f.meta->request->has_log_id && f.meta->request->log_id == 5);
    JT_CHECK_EQ(f.meta->correlation_id, 42);
    JT_CHECK(iobuf_is(&f.body, "BB", 2));
    JT_CHECK(iobuf_is(&f.attachment, "AA", 2));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);

    /* Fields in reverse number order decode the same. */
    static const uint8_t rev[] = {0x28, 0x01, 0x20, 0x03, 0x0a, 0x08, 0x12,
                                  0x01, 'm',  0x0a, 0x03, 's',  '.',  'S'};
    len = raw_frame(frame, rev, sizeof(rev), "BA", 2);
    jt_iobuf_flat(&in, frame, len);
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_REQUIRE(f.meta && f.meta->request);
    JT_CHECK(strcmp(f.meta->request->service_name, "s.S") == 0);
    JT_CHECK_EQ(f.meta->correlation_id, 3);
    JT_CHECK(iobuf_is(&f.body, "B", 1));
    JT_CHECK(iobuf_is(&f.attachment, "A", 1));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
}

/* ---- the captured frames of BAIDU_STD.md §1 and §8.3 ---- */

static const uint8_t cap_req[78] = {
    0x50, 0x52, 0x50, 0x43, 0x00, 0x00, 0x00, 0x42, 0x00, 0x00, 0x00, 0x2f, 0x0a, 0x1d, 0x0a, 0x13,
    'e',  'x',  'a',  'm',  'p',  'l',  'e',  '.',  'E',  'c',  'h',  'o',  'S',  'e',  'r',  'v',
    'i',  'c',  'e',  0x12, 0x04, 'E',  'c',  'h',  'o',  0x18, 0x00, 0x18, 0x00, 0x20, 0x82, 0x80,
    0x80, 0x80, 0x10, 0x28, 0x06, 0x50, 0x00, 0x58, 0x00, 0x62, 0x00, 0x0a, 0x0b, 'h',  'e',  'l',
    'l',  'o',  ' ',  'w',  'o',  'r',  'l',  'd',  'A',  'T',  'T',  'A',  'C',  'H',
};

static const uint8_t cap_resp[51] = {
    0x50, 0x52, 0x50, 0x43, 0x00, 0x00, 0x00, 0x27, 0x00, 0x00, 0x00, 0x14, 0x12,
    0x02, 0x08, 0x00, 0x18, 0x00, 0x20, 0x82, 0x80, 0x80, 0x80, 0x10, 0x28, 0x06,
    0x50, 0x00, 0x58, 0x00, 0x62, 0x00, 0x0a, 0x0b, 'h',  'e',  'l',  'l',  'o',
    ' ',  'w',  'o',  'r',  'l',  'd',  'A',  'T',  'T',  'A',  'C',  'H',
};

/* The fields brpc's echo client sends (§3.1), in a meta ready to pack. */
typedef struct cap_meta {
    Brpc__Policy__RpcMeta meta;
    Brpc__Policy__RpcRequestMeta req;
    Brpc__Policy__RpcResponseMeta resp;
} cap_meta_t;

static void cap_meta_init(cap_meta_t *c, int is_request, int64_t cid, int32_t att)
{
    brpc__policy__rpc_meta__init(&c->meta);
    brpc__policy__rpc_request_meta__init(&c->req);
    brpc__policy__rpc_response_meta__init(&c->resp);
    if (is_request) {
        c->req.service_name = "example.EchoService";
        c->req.method_name = "Echo";
        c->req.has_log_id = 1;
        c->req.log_id = 0;
        c->meta.request = &c->req;
    } else {
        c->resp.has_error_code = 1;
        c->meta.response = &c->resp;
    }
    c->meta.has_compress_type = 1;
    c->meta.has_correlation_id = 1;
    c->meta.correlation_id = cid;
    if (att) {
        c->meta.has_attachment_size = 1;
        c->meta.attachment_size = att;
    }
    c->meta.has_content_type = 1;
    c->meta.has_checksum_type = 1;
    c->meta.has_checksum_value = 1; /* empty bytes: "62 00" */
}

static void captured_request_decodes(void)
{
    jet_iobuf_t in;
    jt_iobuf_flat(&in, cap_req, sizeof(cap_req));
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_CHECK(jet_iobuf_empty(&in));
    const Brpc__Policy__RpcMeta *m = f.meta;
    JT_REQUIRE(m && m->request);
    JT_CHECK(strcmp(m->request->service_name, "example.EchoService") == 0);
    JT_CHECK(strcmp(m->request->method_name, "Echo") == 0);
    JT_CHECK(m->request->has_log_id && m->request->log_id == 0);
    JT_CHECK(!m->request->has_trace_id && m->request->request_id == NULL);
    JT_CHECK(m->has_compress_type && m->compress_type == 0);
    JT_CHECK(m->has_correlation_id && m->correlation_id == 0x100000002ll);
    JT_CHECK(m->has_attachment_size && m->attachment_size == 6);
    JT_CHECK(m->has_content_type && m->content_type == 0);
    JT_CHECK(m->has_checksum_type && m->checksum_type == 0);
    JT_CHECK(m->has_checksum_value && m->checksum_value.len == 0);
    JT_CHECK(!m->has_checksum_with_attachment && m->response == NULL);
    JT_CHECK(iobuf_is(&f.body, "\x0a\x0bhello world", 13));
    JT_CHECK(iobuf_is(&f.attachment, "ATTACH", 6));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);

    /* The same fields pack to the captured bytes exactly. */
    cap_meta_t c;
    cap_meta_init(&c, 1, 0x100000002ll, 6);
    size_t len;
    uint8_t *bytes = pack_bytes(&c.meta, "\x0a\x0bhello world", 13, "ATTACH", 6, &len);
    JT_CHECK_EQ(len, sizeof(cap_req));
    JT_CHECK(len == sizeof(cap_req) && memcmp(bytes, cap_req, len) == 0);
    free(bytes);
}

static void captured_response_decodes(void)
{
    jet_iobuf_t in;
    jt_iobuf_split(&in, cap_resp, sizeof(cap_resp), 3);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    const Brpc__Policy__RpcMeta *m = f.meta;
    JT_REQUIRE(m && m->response);
    JT_CHECK(m->request == NULL);
    JT_CHECK(m->response->has_error_code && m->response->error_code == 0);
    JT_CHECK(m->response->error_text == NULL);
    JT_CHECK(m->correlation_id == 0x100000002ll && m->attachment_size == 6);
    JT_CHECK(iobuf_is(&f.body, "\x0a\x0bhello world", 13));
    JT_CHECK(iobuf_is(&f.attachment, "ATTACH", 6));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);

    cap_meta_t c;
    cap_meta_init(&c, 0, 0x100000002ll, 6);
    size_t len;
    uint8_t *bytes = pack_bytes(&c.meta, "\x0a\x0bhello world", 13, "ATTACH", 6, &len);
    JT_CHECK(len == sizeof(cap_resp) && memcmp(bytes, cap_resp, len) == 0);
    free(bytes);
}

/* §8.3: brpc's error responses for an unknown dotted / undotted service. */
static void captured_error_responses(void)
{
    static const struct {
        int32_t code;
        int64_t cid;
        const char *text;
        uint32_t size;
    } cases[] = {
        {1002, 9, "[127.0.0.1:18123][E1002]Fail to find method=example.NoSuchService/Echo", 0x57},
        {1001, 10, "[127.0.0.1:18123][E1001]Fail to find service=NoSuchService", 0x4b},
    };
    for (size_t k = 0; k < 2; k++) {
        uint8_t want[128];
        size_t tl = strlen(cases[k].text);
        uint8_t *p = want;
        memcpy(p, "PRPC", 4);
        jt_put_be32(p + 4, cases[k].size);
        jt_put_be32(p + 8, cases[k].size);
        p += 12;
        *p++ = 0x12;
        *p++ = (uint8_t)(tl + 5);
        *p++ = 0x08;
        *p++ = (uint8_t)(0x80 | (cases[k].code & 0x7f));
        *p++ = (uint8_t)(cases[k].code >> 7);
        *p++ = 0x12;
        *p++ = (uint8_t)tl;
        memcpy(p, cases[k].text, tl);
        p += tl;
        memcpy(p, "\x18\x00\x20", 3);
        p += 3;
        *p++ = (uint8_t)cases[k].cid;
        memcpy(p, "\x50\x00\x58\x00\x62\x00", 6);
        p += 6;
        JT_CHECK_EQ(p - want, 12 + cases[k].size);

        cap_meta_t c;
        cap_meta_init(&c, 0, cases[k].cid, 0);
        c.resp.error_code = cases[k].code;
        c.resp.error_text = (char *)cases[k].text;
        size_t len;
        uint8_t *bytes = pack_bytes(&c.meta, NULL, 0, NULL, 0, &len);
        JT_CHECK(len == (size_t)(p - want) && memcmp(bytes, want, len) == 0);
        free(bytes);

        jet_iobuf_t in;
        jt_iobuf_flat(&in, want, (size_t)(p - want));
        jet_baidu_frame_t f;
        int bad;
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        JT_REQUIRE(f.meta && f.meta->response);
        JT_CHECK_EQ(f.meta->response->error_code, cases[k].code);
        JT_CHECK(strcmp(f.meta->response->error_text, cases[k].text) == 0);
        JT_CHECK_EQ(f.meta->correlation_id, cases[k].cid);
        JT_CHECK(jet_iobuf_empty(&f.body) && jet_iobuf_empty(&f.attachment));
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&in);
    }
}

/* ---- partial input ---- */

/* A few frames of different shapes, as bytes. */
typedef struct frame_set {
    uint8_t *data[4];
    size_t len[4];
    size_t n;
} frame_set_t;

static void frame_set_make(frame_set_t *s)
{
    s->n = 0;
    s->data[s->n] = malloc(sizeof(cap_req));
    memcpy(s->data[s->n], cap_req, sizeof(cap_req));
    s->len[s->n++] = sizeof(cap_req);
    s->data[s->n] = malloc(sizeof(cap_resp));
    memcpy(s->data[s->n], cap_resp, sizeof(cap_resp));
    s->len[s->n++] = sizeof(cap_resp);
    full_req_t h;
    full_req_init(&h, -5, 300);
    uint8_t att[300];
    for (int i = 0; i < 300; i++)
        att[i] = (uint8_t)i;
    s->data[s->n] = pack_bytes(&h.meta, "\x0a\x02hi", 4, att, sizeof(att), &s->len[s->n]);
    s->n++;
    cap_meta_t c;
    cap_meta_init(&c, 0, 77, 0);
    c.resp.error_code = 1003;
    c.resp.error_text = "asked to fail";
    s->data[s->n] = pack_bytes(&c.meta, NULL, 0, NULL, 0, &s->len[s->n]);
    s->n++;
}

static void frame_set_free(frame_set_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->data[i]);
}

/* Decodes one frame's bytes with a flat iobuf: the reference result. */
static void reference_cut(const uint8_t *data, size_t len, uint8_t **meta_p, size_t *meta_len_p,
                          uint8_t **body_p, size_t *body_len_p, uint8_t **att_p, size_t *att_len_p)
{
    jet_iobuf_t in;
    jt_iobuf_flat(&in, data, len);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    *meta_p = f.meta ? meta_bytes(f.meta, meta_len_p) : NULL;
    *body_len_p = jet_iobuf_len(&f.body);
    *body_p = iobuf_bytes(&f.body);
    *att_len_p = jet_iobuf_len(&f.attachment);
    *att_p = iobuf_bytes(&f.attachment);
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
}

static void every_prefix_needs_more(void)
{
    frame_set_t s;
    frame_set_make(&s);
    for (size_t k = 0; k < s.n; k++) {
        for (size_t n = 0; n < s.len[k]; n++) {
            jet_iobuf_t in;
            jt_iobuf_split(&in, s.data[k], n, 7);
            jet_baidu_frame_t f;
            int bad;
            uint32_t bs = 0, ms = 0;
            JT_CHECK_EQ(jet__baidu_peek(&in, MAX_BODY, &bs, &ms), JET_PARSE_NEED_MORE);
            if (n >= 12) JT_CHECK_EQ(bs, s.len[k] - 12);
            JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_NEED_MORE);
            JT_CHECK_EQ(jet_iobuf_len(&in), n);
            JT_CHECK(f.meta == NULL && jet_iobuf_empty(&f.body));
            jet__baidu_frame_fini(&f);
            jet_iobuf_fini(&in);
        }
        jet_iobuf_t in;
        jt_iobuf_split(&in, s.data[k], s.len[k], 7);
        jet_baidu_frame_t f;
        int bad;
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        JT_CHECK(jet_iobuf_empty(&in));
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&in);
    }
    frame_set_free(&s);
}

/* Every frame (and every prefix of it) ends just before an unreadable page
 * and is read in place from user blocks, split at every point into two
 * blocks: the parser never reads past what it was given. */
static void guard_page_every_split(void)
{
    frame_set_t s;
    frame_set_make(&s);
    for (size_t k = 0; k < s.n; k++) {
        size_t len = s.len[k];
        uint8_t *rmeta, *rbody, *ratt;
        size_t rmeta_len = 0, rbody_len = 0, ratt_len = 0;
        reference_cut(s.data[k], len, &rmeta, &rmeta_len, &rbody, &rbody_len, &ratt, &ratt_len);

        for (size_t n = 1; n < len; n++) {
            uint8_t *g = jt_guard_alloc(s.data[k], n);
            jet_iobuf_t in;
            jet_iobuf_init(&in);
            JT_CHECK_EQ(jet_iobuf_append_user(&in, g, n, NULL, NULL), 0);
            jet_baidu_frame_t f;
            int bad;
            JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_NEED_MORE);
            jet__baidu_frame_fini(&f);
            jet_iobuf_fini(&in);
            jt_guard_free(g, n);
        }

        uint8_t *g = jt_guard_alloc(s.data[k], len);
        for (size_t split = 0; split <= len; split++) {
            jet_iobuf_t in;
            jet_iobuf_init(&in);
            if (split) JT_CHECK_EQ(jet_iobuf_append_user(&in, g, split, NULL, NULL), 0);
            if (split < len)
                JT_CHECK_EQ(jet_iobuf_append_user(&in, g + split, len - split, NULL, NULL), 0);
            jet_baidu_frame_t f;
            int bad;
            JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
            JT_CHECK(jet_iobuf_empty(&in));
            size_t ml = 0;
            uint8_t *m = f.meta ? meta_bytes(f.meta, &ml) : NULL;
            JT_CHECK(m && ml == rmeta_len && memcmp(m, rmeta, ml) == 0);
            JT_CHECK(iobuf_is(&f.body, rbody, rbody_len));
            JT_CHECK(iobuf_is(&f.attachment, ratt, ratt_len));
            free(m);
            jet__baidu_frame_fini(&f);
            jet_iobuf_fini(&in);
        }
        jt_guard_free(g, len);
        free(rmeta);
        free(rbody);
        free(ratt);
    }
    frame_set_free(&s);
}

static void two_frames_back_to_back(void)
{
    uint8_t buf[sizeof(cap_req) + sizeof(cap_resp) + 3];
    memcpy(buf, cap_req, sizeof(cap_req));
    memcpy(buf + sizeof(cap_req), cap_resp, sizeof(cap_resp));
    memcpy(buf + sizeof(cap_req) + sizeof(cap_resp), "PRP", 3);
    for (size_t piece = 1; piece <= sizeof(buf); piece += 13) {
        jet_iobuf_t in;
        jt_iobuf_split(&in, buf, sizeof(buf), piece);
        jet_baidu_frame_t f;
        int bad;
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        JT_CHECK(f.meta && f.meta->request);
        JT_CHECK(iobuf_is(&f.attachment, "ATTACH", 6));
        JT_CHECK_EQ(jet_iobuf_len(&in), sizeof(cap_resp) + 3);
        jet__baidu_frame_fini(&f);
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        JT_CHECK(f.meta && f.meta->response);
        JT_CHECK(iobuf_is(&f.body, "\x0a\x0bhello world", 13));
        JT_CHECK_EQ(jet_iobuf_len(&in), 3);
        jet__baidu_frame_fini(&f);
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_NEED_MORE);
        JT_CHECK(iobuf_is(&in, "PRP", 3));
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&in);
    }
}

/* ---- malformed input ---- */

static jet_parse_result_t cut_bytes(const void *data, size_t len, size_t *left_p)
{
    jet_iobuf_t in;
    jt_iobuf_flat(&in, data, len);
    jet_baidu_frame_t f;
    int bad;
    jet_parse_result_t r = cut1(&in, &f, &bad);
    *left_p = jet_iobuf_len(&in);
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
    return r;
}

static void garbage_first_bytes(void)
{
    static const struct {
        const char *s;
        size_t len; /* 0: strlen */
        jet_parse_result_t want;
    } cases[] = {
        {"", 0, JET_PARSE_NEED_MORE},
        {"P", 0, JET_PARSE_NEED_MORE},
        {"PR", 0, JET_PARSE_NEED_MORE},
        {"PRP", 0, JET_PARSE_NEED_MORE},
        {"PRPC", 0, JET_PARSE_NEED_MORE},
        {"PRPC\0\0\0", 7, JET_PARSE_NEED_MORE},
        {"X", 0, JET_PARSE_NOT_MINE},
        {"PX", 0, JET_PARSE_NOT_MINE},
        {"PRX", 0, JET_PARSE_NOT_MINE},
        {"PRPX", 0, JET_PARSE_NOT_MINE},
        {"prpc", 0, JET_PARSE_NOT_MINE},
        {"STRM", 0, JET_PARSE_NOT_MINE},
        {"GET / HTTP/1.1\r\n", 0, JET_PARSE_NOT_MINE},
        {"XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX", 0, JET_PARSE_NOT_MINE},
        {"XRPC\0\0\0\0\0\0\0\0", 12, JET_PARSE_NOT_MINE},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t len = cases[k].len ? cases[k].len : strlen(cases[k].s);
        for (size_t piece = 1; piece <= 2; piece++) {
            jet_iobuf_t in;
            jt_iobuf_split(&in, cases[k].s, len, piece);
            uint32_t bs, ms;
            JT_CHECK_EQ(jet__baidu_peek(&in, MAX_BODY, &bs, &ms), cases[k].want);
            jet_baidu_frame_t f;
            int bad;
            JT_CHECK_EQ(cut1(&in, &f, &bad), cases[k].want);
            JT_CHECK_EQ(jet_iobuf_len(&in), len);
            jet__baidu_frame_fini(&f);
            jet_iobuf_fini(&in);
        }
    }
}

static void too_big_on_header_alone(void)
{
    uint8_t hdr[12];
    memcpy(hdr, "PRPC", 4);
    size_t left;
    jt_put_be32(hdr + 4, MAX_BODY + 1);
    jt_put_be32(hdr + 8, 10);
    JT_CHECK_EQ(cut_bytes(hdr, 12, &left), JET_PARSE_TOO_BIG);
    JT_CHECK_EQ(left, 12);
    jt_put_be32(hdr + 4, 0xffffffffu);
    JT_CHECK_EQ(cut_bytes(hdr, 12, &left), JET_PARSE_TOO_BIG);
    /* Exactly at the limit waits for the body, and peek reports the sizes. */
    jt_put_be32(hdr + 4, MAX_BODY);
    JT_CHECK_EQ(cut_bytes(hdr, 12, &left), JET_PARSE_NEED_MORE);
    JT_CHECK_EQ(left, 12);
    jet_iobuf_t in;
    jt_iobuf_flat(&in, hdr, 12);
    uint32_t bs = 0, ms = 0;
    JT_CHECK_EQ(jet__baidu_peek(&in, MAX_BODY, &bs, &ms), JET_PARSE_NEED_MORE);
    JT_CHECK_EQ(bs, MAX_BODY);
    JT_CHECK_EQ(ms, 10);
    /* A smaller configured limit applies too. */
    JT_CHECK_EQ(jet__baidu_peek(&in, 1000, &bs, &ms), JET_PARSE_TOO_BIG);
    jet_iobuf_fini(&in);
    /* The 78-byte request under a limit of 65 (its body is 66). */
    jt_iobuf_flat(&in, cap_req, sizeof(cap_req));
    jet_baidu_frame_t f;
    int bad;
    jet__baidu_frame_init(&f);
    JT_CHECK_EQ(jet__baidu_cut(&in, 65, &f, &bad), JET_PARSE_TOO_BIG);
    JT_CHECK_EQ(jet_iobuf_len(&in), sizeof(cap_req));
    JT_CHECK_EQ(jet__baidu_cut(&in, 66, &f, &bad), JET_PARSE_OK);
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
}

static void meta_size_over_body_size(void)
{
    uint8_t buf[12 + 5 + sizeof(cap_resp)];
    memcpy(buf, "PRPC", 4);
    jt_put_be32(buf + 4, 5);
    jt_put_be32(buf + 8, 6);
    memcpy(buf + 12, "\x12\x02\x08\x00\x20", 5);
    memcpy(buf + 17, cap_resp, sizeof(cap_resp));
    /* Not before the whole frame is there (brpc waits for it too). */
    size_t left;
    JT_CHECK_EQ(cut_bytes(buf, 16, &left), JET_PARSE_NEED_MORE);
    JT_CHECK_EQ(left, 16);

    jet_iobuf_t in;
    jt_iobuf_split(&in, buf, sizeof(buf), 4);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_META_SIZE);
    JT_CHECK(f.meta == NULL && jet_iobuf_empty(&f.body) && jet_iobuf_empty(&f.attachment));
    JT_CHECK_EQ(jet_iobuf_len(&in), sizeof(cap_resp));
    jet__baidu_frame_fini(&f);
    /* What follows parses. */
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_CHECK(f.meta && f.meta->response);
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
}

static void undecodable_meta(void)
{
    static const struct {
        const char *what;
        const char *meta;
        size_t len;
    } cases[] = {
        {"length past the end", "\x0a\x7f\x0a\x01", 4},
        {"unterminated varint", "\x20\xff\xff\xff", 4},
        {"wire type 7", "\x0f\x00", 2},
        {"wire type 3 (group)", "\x0b\x0c", 2},
        {"field number 0", "\x00\x01", 2},
        {"request without method_name", "\x0a\x05\x0a\x03s.S\x20\x01", 9},
        {"request without service_name", "\x0a\x03\x12\x01m\x20\x01", 7},
        {"stream_settings without stream_id", "\x42\x02\x10\x01", 4},
        {"chunk_info missing chunk_id", "\x32\x02\x08\x01", 4},
        {"truncated request sub-message", "\x0a\x05\x0a\x03s.S\x12\x05m", 10},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint8_t buf[64 + sizeof(cap_req)];
        size_t len = raw_frame(buf, cases[k].meta, cases[k].len, "\x0a\x00", 2);
        memcpy(buf + len, cap_req, sizeof(cap_req));
        jet_iobuf_t in;
        jt_iobuf_flat(&in, buf, len + sizeof(cap_req));
        jet_baidu_frame_t f;
        int bad;
        jet_parse_result_t r = cut1(&in, &f, &bad);
        if (r != JET_PARSE_BAD_META) fprintf(stderr, "  case: %s\n", cases[k].what);
        JT_CHECK_EQ(r, JET_PARSE_BAD_META);
        JT_CHECK(f.meta == NULL && jet_iobuf_empty(&f.body));
        JT_CHECK_EQ(jet_iobuf_len(&in), sizeof(cap_req));
        jet__baidu_frame_fini(&f);
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&in);
    }

    /* No request at all decodes (brpc then answers ENOSERVICE), and so does
     * an empty meta. */
    uint8_t buf[32];
    size_t len = raw_frame(buf, "\x20\x01", 2, NULL, 0);
    jet_iobuf_t in;
    jt_iobuf_flat(&in, buf, len);
    jet_baidu_frame_t f;
    int bad;
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_CHECK(f.meta && !f.meta->request && f.meta->correlation_id == 1);
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
    len = raw_frame(buf, NULL, 0, "\x0a\x00", 2);
    jt_iobuf_flat(&in, buf, len);
    JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
    JT_CHECK(f.meta && !f.meta->request && !f.meta->has_correlation_id);
    JT_CHECK(iobuf_is(&f.body, "\x0a\x00", 2));
    jet__baidu_frame_fini(&f);
    jet_iobuf_fini(&in);
}

/* Cuts a frame of this meta (malloc'd copy, flat) followed by a captured
 * request; the captured request must parse after it whatever happened. */
static jet_parse_result_t cut_meta_then_request(const uint8_t *meta, size_t meta_len,
                                                jet_baidu_frame_t *f)
{
    size_t cap = 12 + meta_len + 2 + sizeof(cap_req);
    uint8_t *buf = malloc(cap);
    if (!buf) abort();
    size_t len = raw_frame(buf, meta, meta_len, "\x0a\x00", 2);
    memcpy(buf + len, cap_req, sizeof(cap_req));
    jet_iobuf_t in;
    jt_iobuf_flat(&in, buf, len + sizeof(cap_req));
    free(buf);
    int bad;
    jet_parse_result_t r = cut1(&in, f, &bad);
    JT_CHECK_EQ(jet_iobuf_len(&in), sizeof(cap_req));
    jet_baidu_frame_t next;
    JT_CHECK_EQ(cut1(&in, &next, &bad), JET_PARSE_OK);
    jet__baidu_frame_fini(&next);
    jet_iobuf_fini(&in);
    return r;
}

/* What a peer's meta can make the decoder take is bounded (codec.h): a
 * meta of 2-byte empty user_fields entries or unknown fields, which
 * protobuf-c would decode into about 60-68 bytes per byte, is refused, and so
 * is a meta over JET_BAIDU_META_MAX bytes; legitimate large metas (many
 * small user_fields, even with empty keys and values, large authentication
 * data up to the limit) decode. */
static void meta_decode_bounded(void)
{
    enum { N = 128 * 1024 };
    uint8_t *m = malloc(2 * N + 64);
    JT_REQUIRE(m);
    static const uint8_t bombs[][2] = {{0x4a, 0x00}, {0x78, 0x00}};
    for (size_t k = 0; k < 2; k++) {
        for (size_t i = 0; i < N; i++)
            memcpy(m + 2 * i, bombs[k], 2);
        jet_baidu_frame_t f;
        JT_CHECK_EQ(cut_meta_then_request(m, 2 * N, &f), JET_PARSE_BAD_META);
        JT_CHECK(f.meta == NULL);
        jet__baidu_frame_fini(&f);
    }
    free(m);

    /* 20000 user_fields with an empty key and value, as brpc writes them
     * (both fields present: 6 bytes each), the most a meta brpc sends
     * decodes into. */
    enum { NE = 20000 };
    m = malloc(6 * NE);
    JT_REQUIRE(m);
    for (size_t i = 0; i < NE; i++)
        memcpy(m + 6 * i, "\x4a\x04\x0a\x00\x12\x00", 6);
    {
        jet_baidu_frame_t f;
        JT_CHECK_EQ(cut_meta_then_request(m, 6 * NE, &f), JET_PARSE_OK);
        JT_CHECK(f.meta && f.meta->n_user_fields == NE && f.meta->user_fields[NE - 1]->key &&
                 f.meta->user_fields[NE - 1]->key[0] == '\0');
        jet__baidu_frame_fini(&f);
    }
    free(m);

    /* 3000 user_fields of a few bytes each, and a request. */
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta req = BRPC__POLICY__RPC_REQUEST_META__INIT;
    req.service_name = "s.S";
    req.method_name = "m";
    meta.request = &req;
    enum { NF = 3000 };
    Brpc__Policy__UserFieldsEntry *e = calloc(NF, sizeof *e);
    Brpc__Policy__UserFieldsEntry **ep = calloc(NF, sizeof *ep);
    char(*keys)[8] = calloc(NF, sizeof *keys);
    JT_REQUIRE(e && ep && keys);
    for (int i = 0; i < NF; i++) {
        brpc__policy__user_fields_entry__init(&e[i]);
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        e[i].key = keys[i];
        e[i].value = keys[i] + 1;
        ep[i] = &e[i];
    }
    meta.n_user_fields = NF;
    meta.user_fields = ep;
    size_t mlen = brpc__policy__rpc_meta__get_packed_size(&meta);
    m = malloc(mlen);
    JT_REQUIRE(m);
    brpc__policy__rpc_meta__pack(&meta, m);
    jet_baidu_frame_t f;
    JT_CHECK_EQ(cut_meta_then_request(m, mlen, &f), JET_PARSE_OK);
    JT_CHECK(f.meta && f.meta->n_user_fields == NF && f.meta->request &&
             strcmp(f.meta->user_fields[NF - 1]->value, keys[NF - 1] + 1) == 0);
    jet__baidu_frame_fini(&f);
    free(m);
    meta.n_user_fields = 0;
    meta.user_fields = NULL;

    /* Authentication data: the meta at the limit decodes, one byte more is
     * refused. */
    size_t base = brpc__policy__rpc_meta__get_packed_size(&meta);
    for (int over = 0; over <= 1; over++) {
        size_t auth = JET_BAIDU_META_MAX - base - 4 + (size_t)over; /* tag + 3-byte length */
        meta.has_authentication_data = 1;
        meta.authentication_data.len = auth;
        meta.authentication_data.data = calloc(1, auth);
        JT_REQUIRE(meta.authentication_data.data);
        mlen = brpc__policy__rpc_meta__get_packed_size(&meta);
        JT_CHECK_EQ(mlen, (size_t)JET_BAIDU_META_MAX + (size_t)over);
        m = malloc(mlen);
        JT_REQUIRE(m);
        brpc__policy__rpc_meta__pack(&meta, m);
        JT_CHECK_EQ(cut_meta_then_request(m, mlen, &f),
                    over ? JET_PARSE_BAD_META : JET_PARSE_OK);
        JT_CHECK(over ? f.meta == NULL : f.meta && f.meta->authentication_data.len == auth);
        jet__baidu_frame_fini(&f);
        free(m);
        free(meta.authentication_data.data);
    }
    free(e);
    free(ep);
    free(keys);
}

static void attachment_size_checks(void)
{
    static const struct {
        uint8_t varint[11];
        size_t vlen;
        int bad;
        size_t body, att;
    } cases[] = {
        {{0x05}, 1, 1, 4, 0},                         /* 5 > 4 */
        {{0x04}, 1, 0, 0, 4},                         /* == payload */
        {{0x00}, 1, 0, 4, 0},                         /* 0 */
        {{0xff, 0xff, 0xff, 0xff, 0x07}, 5, 1, 4, 0}, /* INT32_MAX */
        {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 10, 1, 4, 0}, /* -1 */
        {{0x80, 0x80, 0x80, 0x80, 0xf8, 0xff, 0xff, 0xff, 0xff, 0x01}, 10, 1, 4, 0}, /* INT32_MIN */
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        uint8_t meta[32] = {0x20, 0x01, 0x28};
        memcpy(meta + 3, cases[k].varint, cases[k].vlen);
        uint8_t buf[64];
        size_t len = raw_frame(buf, meta, 3 + cases[k].vlen, "MMAA", 4);
        jet_iobuf_t in;
        jt_iobuf_flat(&in, buf, len);
        jet_baidu_frame_t f;
        int bad = -1;
        JT_CHECK_EQ(cut1(&in, &f, &bad), JET_PARSE_OK);
        JT_CHECK_EQ(bad, cases[k].bad);
        JT_CHECK(jet_iobuf_empty(&in));
        JT_CHECK(f.meta != NULL);
        JT_CHECK_EQ(jet_iobuf_len(&f.body), cases[k].body);
        JT_CHECK_EQ(jet_iobuf_len(&f.attachment), cases[k].att);
        if (cases[k].body == 4) JT_CHECK(iobuf_is(&f.body, "MMAA", 4));
        jet__baidu_frame_fini(&f);
        jet_iobuf_fini(&in);
    }
}

/* ---- protobuf helpers over iobufs ---- */

static void pb_iobuf_helpers(void)
{
    size_t n = 300000;
    char *msg = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        msg[i] = (char)('a' + i % 26);
    msg[n] = 0;
    jet_iobuf_t b;
    echo_body(&b, msg);
    uint8_t *flat = iobuf_bytes(&b);
    size_t len = jet_iobuf_len(&b);
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = msg;
    uint8_t *want = malloc(len);
    JT_CHECK_EQ(example__echo_request__pack(&req, want), len);
    JT_CHECK(memcmp(flat, want, len) == 0);
    /* Packing appends after what the buffer holds. */
    jet_iobuf_t b2;
    jt_iobuf_flat(&b2, "abc", 3);
    JT_CHECK_EQ(jet__pb_pack_iobuf(&req.base, &b2), 0);
    JT_CHECK_EQ(jet_iobuf_len(&b2), 3 + len);
    jet_iobuf_pop_front(&b2, 3);
    JT_CHECK(iobuf_is(&b2, want, len));

    static const size_t pieces[] = {1 << 20, 4096, 1000, 1};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        if (pieces[k] == 1) {
            /* One-byte blocks: a short message only. */
            Example__EchoRequest s = EXAMPLE__ECHO_REQUEST__INIT;
            s.message = "short one";
            uint8_t sb[32];
            size_t sl = example__echo_request__pack(&s, sb);
            jet_iobuf_t in;
            jt_iobuf_split(&in, sb, sl, 1);
            Example__EchoRequest *r = (Example__EchoRequest *)jet__pb_unpack_iobuf(
                &example__echo_request__descriptor, &in, NULL);
            JT_CHECK(r && strcmp(r->message, "short one") == 0);
            if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
            jet_iobuf_fini(&in);
            continue;
        }
        jet_iobuf_t in;
        jt_iobuf_split(&in, want, len, pieces[k]);
        Example__EchoRequest *r =
            (Example__EchoRequest *)jet__pb_unpack_iobuf(&example__echo_request__descriptor, &in, NULL);
        JT_CHECK(r && strcmp(r->message, msg) == 0);
        if (r) protobuf_c_message_free_unpacked(&r->base, NULL);
        jet_iobuf_fini(&in);
    }
    /* Empty input misses the required field; garbage does not decode. */
    jet_iobuf_t e;
    jet_iobuf_init(&e);
    JT_CHECK(jet__pb_unpack_iobuf(&example__echo_request__descriptor, &e, NULL) == NULL);
    jt_iobuf_flat(&e, "\x0a\x05hi", 4);
    JT_CHECK(jet__pb_unpack_iobuf(&example__echo_request__descriptor, &e, NULL) == NULL);
    jet_iobuf_fini(&e);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&b2);
    free(flat);
    free(want);
    free(msg);
}

static bool in_arena(const jet_msg_arena_t *a, const void *p)
{
    const unsigned char *c = p;
    return c >= a->buf && c < a->buf + sizeof a->buf;
}

/* Decoding into a call's message arena: small messages stay in it, large
 * pieces spill to malloc and are freed by free_unpacked (ASan checks the
 * leaks), a failed decode leaves nothing behind, reset reuses the space. */
/* A Node decoded from bytes in pieces of `piece` (0: one block); NULL when
 * it does not decode. */
static Jettest__Node *node_decode(const uint8_t *p, size_t n, size_t piece)
{
    jet_iobuf_t in;
    if (piece)
        jt_iobuf_split(&in, p, n, piece);
    else
        jt_iobuf_flat(&in, p, n);
    ProtobufCMessage *m = jet__pb_unpack_iobuf(&jettest__node__descriptor, &in, NULL);
    jet_iobuf_fini(&in);
    return (Jettest__Node *)m;
}

/* Sub-messages nested deeper than brpc's protobuf allows are refused before
 * protobuf-c, which has no limit, recurses into them (a Node of ~600 kB
 * nested 200,000 deep overflowed the stack); up to the limit they decode.
 * Only types whose descriptors allow such depths are scanned. */
static void nesting_guarded(void)
{
    JT_CHECK(jet__pb_nesting_may_exceed(&jettest__node__descriptor));
    JT_CHECK(!jet__pb_nesting_may_exceed(&jettest__branch__descriptor));
    JT_CHECK(!jet__pb_nesting_may_exceed(&jettest__twig__descriptor));
    JT_CHECK(!jet__pb_nesting_may_exceed(&example__echo_request__descriptor));
    JT_CHECK(!jet__pb_nesting_may_exceed(&brpc__policy__rpc_meta__descriptor));
    /* Asked again (the per-thread answers): the same. */
    JT_CHECK(jet__pb_nesting_may_exceed(&jettest__node__descriptor));
    JT_CHECK(!jet__pb_nesting_may_exceed(&jettest__branch__descriptor));

    static const size_t fine[] = {0, 1, 99, JET_PB_MAX_NESTING};
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++) {
        size_t n;
        uint8_t *b = jt_nested_node_bytes(fine[i], &n);
        for (size_t piece = 0; piece <= 7; piece += 7) {
            Jettest__Node *top = node_decode(b, n, piece);
            JT_CHECK(top != NULL);
            if (!top) continue;
            const Jettest__Node *x = top;
            size_t levels = 0;
            while (x->child) {
                x = x->child;
                levels++;
            }
            JT_CHECK_EQ(levels, fine[i]);
            JT_CHECK(x->has_value && (size_t)x->value == fine[i]);
            jettest__node__free_unpacked(top, NULL);
        }
        free(b);
    }
    static const size_t deep[] = {JET_PB_MAX_NESTING + 1, 1000, 200000};
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        size_t n;
        uint8_t *b = jt_nested_node_bytes(deep[i], &n);
        JT_CHECK(!jet__pb_nesting_ok(&jettest__node__descriptor, b, n));
        for (size_t piece = 0; piece <= 4096; piece += 4096)
            JT_CHECK(node_decode(b, n, piece) == NULL);
        /* Cut short: refused too (protobuf-c stops at the cut). */
        JT_CHECK(node_decode(b, n - 1, 0) == NULL);
        free(b);
    }

    /* Behind a shallow sibling in the repeated field: kids[1] holds a chain
     * of `chain` levels, its innermost node at level chain + 1. */
    for (size_t chain = JET_PB_MAX_NESTING - 2; chain <= JET_PB_MAX_NESTING + 1; chain++) {
        size_t n;
        uint8_t *inner = jt_nested_node_bytes(chain, &n);
        jt_bytes_t b = {0};
        static const uint8_t shallow[] = {0x12, 0x02, 0x18, 0x07}; /* kids { value: 7 } */
        jt_bytes_add(&b, shallow, sizeof shallow);
        uint8_t hdr[6] = {0x12};
        size_t h = 1;
        for (size_t v = n;; v >>= 7) {
            hdr[h++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
            if (v <= 0x7f) break;
        }
        jt_bytes_add(&b, hdr, h);
        jt_bytes_add(&b, inner, n);
        Jettest__Node *top = node_decode(b.p, b.len, 0);
        if (chain + 1 <= JET_PB_MAX_NESTING) {
            JT_CHECK(top && top->n_kids == 2 && top->kids[0]->value == 7);
        } else {
            JT_CHECK(top == NULL);
        }
        if (top) jettest__node__free_unpacked(top, NULL);
        free(inner);
        free(b.p);
    }
}

static void msg_arena_decode(void)
{
    jet_msg_arena_t a;
    jet__msg_arena_init(&a);
    Example__EchoRequest s = EXAMPLE__ECHO_REQUEST__INIT;
    s.message = "small";
    uint8_t sb[64];
    size_t sl = example__echo_request__pack(&s, sb);
    jet_iobuf_t in;
    jt_iobuf_flat(&in, sb, sl);
    Example__EchoRequest *r =
        (Example__EchoRequest *)jet__pb_unpack_iobuf(&example__echo_request__descriptor, &in, &a.pa);
    JT_REQUIRE(r != NULL);
    JT_CHECK(strcmp(r->message, "small") == 0);
    JT_CHECK(in_arena(&a, r) && in_arena(&a, r->message));
    size_t used_one = a.used;
    JT_CHECK(used_one > 0 && used_one % 16 == 0);
    protobuf_c_message_free_unpacked(&r->base, &a.pa);
    jet__msg_arena_reset(&a);
    Example__EchoRequest *r2 =
        (Example__EchoRequest *)jet__pb_unpack_iobuf(&example__echo_request__descriptor, &in, &a.pa);
    JT_CHECK(r2 == r && a.used == used_one);
    /* Wholly in the arena: released without a walk, and reset. */
    JT_CHECK_EQ(a.spilled, 0u);
    jet__msg_arena_release(&a, r2 ? &r2->base : NULL);
    JT_CHECK_EQ(a.used, 0u);
    jet_iobuf_fini(&in);

    /* A string larger than the arena: the struct inside, the string outside. */
    size_t big = 3 * JET_MSG_ARENA_SIZE;
    char *msg = malloc(big + 1);
    JT_REQUIRE(msg != NULL);
    memset(msg, 'q', big);
    msg[big] = 0;
    s.message = msg;
    size_t bl = example__echo_request__get_packed_size(&s);
    uint8_t *bb = malloc(bl);
    JT_REQUIRE(bb != NULL);
    example__echo_request__pack(&s, bb);
    jt_iobuf_split(&in, bb, bl, 3);
    r = (Example__EchoRequest *)jet__pb_unpack_iobuf(&example__echo_request__descriptor, &in, &a.pa);
    JT_REQUIRE(r != NULL);
    JT_CHECK(in_arena(&a, r) && !in_arena(&a, r->message));
    JT_CHECK(strcmp(r->message, msg) == 0);
    /* The spilled string is freed by the release (ASan checks the leak). */
    JT_CHECK_EQ(a.spilled, 1u);
    jet__msg_arena_release(&a, &r->base);
    JT_CHECK_EQ(a.spilled, 0u);
    JT_CHECK_EQ(a.used, 0u);
    jet_iobuf_fini(&in);

    /* Filled by several messages without a reset: the later ones spill. */
    Example__EchoRequest *keep[64];
    int nk = 0;
    jt_iobuf_flat(&in, sb, sl);
    for (; nk < 64; nk++) {
        keep[nk] = (Example__EchoRequest *)jet__pb_unpack_iobuf(&example__echo_request__descriptor,
                                                                 &in, &a.pa);
        JT_REQUIRE(keep[nk] != NULL);
    }
    JT_CHECK(in_arena(&a, keep[0]) && !in_arena(&a, keep[63]));
    JT_CHECK(a.used <= sizeof a.buf);
    JT_CHECK(a.spilled > 0);
    for (int i = 0; i < nk; i++) {
        JT_CHECK(strcmp(keep[i]->message, "small") == 0);
        protobuf_c_message_free_unpacked(&keep[i]->base, &a.pa);
    }
    JT_CHECK_EQ(a.spilled, 0u);
    jet__msg_arena_reset(&a);
    jet_iobuf_fini(&in);

    /* Truncated: the decoder frees what it took; nothing leaks. */
    jt_iobuf_flat(&in, bb, bl / 2);
    JT_CHECK(jet__pb_unpack_iobuf(&example__echo_request__descriptor, &in, &a.pa) == NULL);
    JT_CHECK_EQ(a.spilled, 0u);
    jet_iobuf_fini(&in);
    free(bb);

    /* Failing after a spill: an RpcMeta whose request meta carries a name
     * larger than the arena (parsed, spilled) and whose response meta does
     * not parse. The decoder frees the spilled name on its way out. */
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta rq = BRPC__POLICY__RPC_REQUEST_META__INIT;
    rq.service_name = msg;
    rq.method_name = "m";
    meta.request = &rq;
    size_t ml = brpc__policy__rpc_meta__get_packed_size(&meta);
    uint8_t *mb = malloc(ml + 4);
    JT_REQUIRE(mb != NULL);
    brpc__policy__rpc_meta__pack(&meta, mb);
    /* response (field 2, length-delimited): a varint field cut short */
    mb[ml] = 0x12;
    mb[ml + 1] = 2;
    mb[ml + 2] = 0x08;
    mb[ml + 3] = 0x80;
    jt_iobuf_flat(&in, mb, ml + 4);
    jet__msg_arena_reset(&a);
    JT_CHECK(jet__pb_unpack_iobuf(&brpc__policy__rpc_meta__descriptor, &in, &a.pa) == NULL);
    JT_CHECK_EQ(a.spilled, 0u);
    jet_iobuf_fini(&in);
    /* The same bytes without the broken field decode, with the name spilled. */
    jt_iobuf_flat(&in, mb, ml);
    ProtobufCMessage *ok = jet__pb_unpack_iobuf(&brpc__policy__rpc_meta__descriptor, &in, &a.pa);
    JT_REQUIRE(ok != NULL);
    JT_CHECK(a.spilled > 0);
    jet__msg_arena_release(&a, ok);
    JT_CHECK_EQ(a.spilled, 0u);
    jet_iobuf_fini(&in);
    free(mb);
    free(msg);
}

/* The one-piece frames of jet__baidu_pack_msg, jet__baidu_pack_shared and
 * jet__baidu_pack_msg_shared are byte for byte what packing the message into
 * a body and jet__baidu_pack give, and the shared ones leave body and
 * attachment as they were: no message, small ones, around the stack frame's
 * size, with and without an attachment, and a meta only protobuf-c can pack
 * (a user field). */
static void pack_msg_matches_pack(void)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcResponseMeta rm = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    meta.response = &rm;
    rm.has_error_code = 1;
    meta.has_correlation_id = 1;
    meta.correlation_id = 987654321012345LL;
    meta.has_compress_type = 1;
    Brpc__Policy__UserFieldsEntry uf = BRPC__POLICY__USER_FIELDS_ENTRY__INIT;
    Brpc__Policy__UserFieldsEntry *ufs[1] = {&uf};
    uf.key = "k";
    uf.value = "v";
    static const size_t sizes[] = {0, 1, 16, 300, 470, 480, 490, 500, 511, 512, 600, 5000};
    char *text = malloc(6000);
    JT_REQUIRE(text != NULL);
    for (int user = 0; user < 2; user++) {
        meta.n_user_fields = user ? 1 : 0;
        meta.user_fields = user ? ufs : NULL;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            for (int with_att = 0; with_att < 2; with_att++) {
                for (int null_msg = 0; null_msg < 2; null_msg++) {
                    memset(text, 'a' + (int)(i % 26), sizes[i]);
                    text[sizes[i]] = 0;
                    Example__EchoResponse msg = EXAMPLE__ECHO_RESPONSE__INIT;
                    msg.message = text;
                    const ProtobufCMessage *m = null_msg ? NULL : &msg.base;
                    uint8_t abytes[100];
                    jt_fill_pattern(abytes, sizeof abytes, (uint32_t)i);
                    meta.has_attachment_size = with_att;
                    meta.attachment_size = with_att ? (int32_t)sizeof abytes : 0;
                    jet_iobuf_t a1, a2, body, f1, f2;
                    jet_iobuf_init(&body);
                    jet_iobuf_init(&f1);
                    jet_iobuf_init(&f2);
                    jt_iobuf_flat(&a1, abytes, with_att ? sizeof abytes : 0);
                    jt_iobuf_flat(&a2, abytes, with_att ? sizeof abytes : 0);
                    JT_CHECK_EQ(jet__baidu_pack_msg(&f1, &meta, m, with_att ? &a1 : NULL), 0);
                    if (m) JT_CHECK_EQ(jet__pb_pack_iobuf(m, &body), 0);
                    jet_iobuf_t f3;
                    jet_iobuf_init(&f3);
                    size_t blen = jet_iobuf_len(&body), alen = jet_iobuf_len(&a2);
                    JT_CHECK_EQ(jet__baidu_pack_shared(&f3, &meta, &body, &a2), 0);
                    JT_CHECK(jet_iobuf_len(&body) == blen && jet_iobuf_len(&a2) == alen);
                    jet_iobuf_t f4;
                    jet_iobuf_init(&f4);
                    size_t msz = m ? protobuf_c_message_get_packed_size(m) : 0;
                    JT_CHECK_EQ(jet__baidu_pack_msg_shared(&f4, &meta, m, msz, &a2), 0);
                    JT_CHECK(jet_iobuf_len(&a2) == alen);
                    JT_CHECK_EQ(jet__baidu_pack(&f2, &meta, &body, with_att ? &a2 : NULL), 0);
                    size_t n = jet_iobuf_len(&f2);
                    uint8_t *want = malloc(n ? n : 1);
                    JT_REQUIRE(want != NULL);
                    jet_iobuf_copy_to(&f2, want, n, 0);
                    JT_CHECK_AT("same frame", jet_iobuf_equals(&f1, want, n) == 0);
                    JT_CHECK_AT("same shared frame", jet_iobuf_equals(&f3, want, n) == 0);
                    JT_CHECK_AT("same shared message frame", jet_iobuf_equals(&f4, want, n) == 0);
                    jet_iobuf_fini(&f3);
                    jet_iobuf_fini(&f4);
                    JT_CHECK(jet_iobuf_empty(&a1));
                    free(want);
                    jet_iobuf_fini(&a1);
                    jet_iobuf_fini(&a2);
                    jet_iobuf_fini(&body);
                    jet_iobuf_fini(&f1);
                    jet_iobuf_fini(&f2);
                }
            }
        }
    }
    free(text);
}

int main(void)
{
    JT_RUN(roundtrip_request_all_fields);
    JT_RUN(roundtrip_response);
    JT_RUN(pack_null_parts_and_large_meta);
    JT_RUN(negative_correlation_id);
    JT_RUN(unknown_fields_skipped);
    JT_RUN(captured_request_decodes);
    JT_RUN(captured_response_decodes);
    JT_RUN(captured_error_responses);
    JT_RUN(every_prefix_needs_more);
    JT_RUN(guard_page_every_split);
    JT_RUN(two_frames_back_to_back);
    JT_RUN(garbage_first_bytes);
    JT_RUN(too_big_on_header_alone);
    JT_RUN(meta_size_over_body_size);
    JT_RUN(undecodable_meta);
    JT_RUN(meta_decode_bounded);
    JT_RUN(attachment_size_checks);
    JT_RUN(pb_iobuf_helpers);
    JT_RUN(nesting_guarded);
    JT_RUN(msg_arena_decode);
    JT_RUN(pack_msg_matches_pack);
    return jt_finish();
}
