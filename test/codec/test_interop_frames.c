/* The frames recorded between a real brpc client and server
 * (../shared/interop/baidu_std) cut and decode to the recorded fields. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "echo.pb-c.h"
#include "rpc/codec.h"
#include "rpc/compress.h"
#include "testutil.h"
#include "testutil_codec.h"

#define MAX_BODY (64u * 1024 * 1024)

typedef struct loaded {
    jet_baidu_frame_t f;
    uint8_t *raw;
    size_t raw_len;
    int ok;
} loaded_t;

/* Reads interop/baidu_std/<name> and cuts it as exactly one frame. */
static void load(loaded_t *l, const char *name)
{
    jet__baidu_frame_init(&l->f);
    l->ok = 0;
    l->raw = jt_interop_load(name, &l->raw_len);
    if (!l->raw) {
        JT_CHECK(l->raw != NULL);
        return;
    }
    jet_iobuf_t in;
    jet_iobuf_init(&in);
    JT_CHECK_EQ(jet_iobuf_append(&in, l->raw, l->raw_len), 0);
    int bad = -1;
    jet_parse_result_t r = jet__baidu_cut(&in, MAX_BODY, &l->f, &bad);
    JT_CHECK_EQ(r, JET_PARSE_OK);
    JT_CHECK_EQ(bad, 0);
    JT_CHECK_EQ(jet_iobuf_len(&in), 0);
    l->ok = r == JET_PARSE_OK && bad == 0 && l->f.meta != NULL;
    if (!l->ok) fprintf(stderr, "  in %s\n", name);
    jet_iobuf_fini(&in);
}

static void unload(loaded_t *l)
{
    jet__baidu_frame_fini(&l->f);
    free(l->raw);
}

/* <stem>.req.bin into q, <stem>.resp.bin into r. */
static void load_pair(const char *stem, loaded_t *q, loaded_t *r)
{
    char rq[128], rs[128];
    snprintf(rq, sizeof rq, "%s.req.bin", stem);
    snprintf(rs, sizeof rs, "%s.resp.bin", stem);
    load(q, rq);
    load(r, rs);
}

/* The decoded EchoRequest/EchoResponse message (both are {string message = 1}),
 * decompressed per the meta's compress_type. NULL when it does not decode. */
static char *echo_message(const jet_baidu_frame_t *f, int is_request)
{
    jet_iobuf_t plain;
    jet_iobuf_init(&plain);
    int ct = f->meta->has_compress_type ? f->meta->compress_type : 0;
    int rc = jet__decompress(ct, &f->body, &plain, MAX_BODY);
    JT_CHECK_EQ(rc, 0);
    char *out = NULL;
    const ProtobufCMessageDescriptor *d =
        is_request ? &example__echo_request__descriptor : &example__echo_response__descriptor;
    ProtobufCMessage *m = rc == 0 ? jet__pb_unpack_iobuf(d, &plain, NULL) : NULL;
    JT_CHECK(m != NULL);
    if (m) {
        const char *s = is_request ? ((Example__EchoRequest *)m)->message
                                   : ((Example__EchoResponse *)m)->message;
        out = strdup(s);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    jet_iobuf_fini(&plain);
    return out;
}

static void check_request_meta(const Brpc__Policy__RpcMeta *m, const char *service,
                               int compress_type)
{
    JT_REQUIRE(m->request != NULL);
    JT_CHECK(strcmp(m->request->service_name, service) == 0);
    JT_CHECK(strcmp(m->request->method_name, "Echo") == 0);
    JT_CHECK(m->has_correlation_id);
    JT_CHECK(m->has_compress_type && m->compress_type == compress_type);
    JT_CHECK(m->has_content_type && m->content_type == 0);
    JT_CHECK(m->has_checksum_type && m->checksum_type == 0);
    JT_CHECK(m->response == NULL);
}

static void check_response_meta(const Brpc__Policy__RpcMeta *m, const Brpc__Policy__RpcMeta *req,
                                int error_code)
{
    JT_REQUIRE(m->response != NULL);
    JT_CHECK(m->request == NULL);
    JT_CHECK_EQ(m->response->has_error_code ? m->response->error_code : 0, error_code);
    JT_CHECK(m->has_correlation_id && m->correlation_id == req->correlation_id);
}

static int all_bytes(const jet_iobuf_t *b, uint8_t c)
{
    size_t n;
    uint8_t *p = jt_iobuf_bytes(b, &n);
    int ok = 1;
    for (size_t i = 0; i < n; i++)
        ok &= p[i] == c;
    free(p);
    return ok;
}

/* The plain echo cases: message text in, the same message and attachment out. */
static void echo_pair(const char *stem, const char *msg, size_t msg_len, size_t att_len,
                      int64_t log_id)
{
    loaded_t q, r;
    load_pair(stem, &q, &r);
    if (q.ok && r.ok) {
        check_request_meta(q.f.meta, "example.EchoService", 0);
        check_response_meta(r.f.meta, q.f.meta, 0);
        JT_CHECK(q.f.meta->request->has_log_id == (log_id != 0));
        if (log_id) JT_CHECK(q.f.meta->request->log_id == log_id);
        JT_CHECK_EQ(q.f.meta->has_attachment_size, att_len != 0);
        JT_CHECK_EQ(r.f.meta->has_attachment_size, att_len != 0);
        JT_CHECK_EQ(jet_iobuf_len(&q.f.attachment), att_len);
        JT_CHECK_EQ(jet_iobuf_len(&r.f.attachment), att_len);
        if (att_len) {
            uint8_t *a = malloc(att_len);
            jet_iobuf_copy_to(&q.f.attachment, a, att_len, 0);
            JT_CHECK(jet_iobuf_equals(&r.f.attachment, a, att_len) == 0);
            free(a);
        }
        char *qm = echo_message(&q.f, 1);
        char *rm = echo_message(&r.f, 0);
        if (msg) {
            JT_CHECK(qm && strcmp(qm, msg) == 0);
        } else {
            JT_CHECK(qm && strlen(qm) == msg_len);
        }
        JT_CHECK(qm && rm && strcmp(qm, rm) == 0);
        free(qm);
        free(rm);
    }
    unload(&q);
    unload(&r);
}

static void case_00_echo_small(void)
{
    echo_pair("00-echo_small", "hello", 5, 0, 0);
}
static void case_01_echo_empty(void)
{
    echo_pair("01-echo_empty", "", 0, 0, 0);
}
static void case_03_log_id(void)
{
    echo_pair("03-log_id", "logged", 6, 0, 0x1234567890);
}
static void case_04_message_1m(void)
{
    echo_pair("04-message_1m", NULL, 1 << 20, 0, 0);
}
static void case_12_after_timeout(void)
{
    echo_pair("12-after_timeout", "still alive", 11, 0, 0);
}

static void case_02_attachment_1k(void)
{
    echo_pair("02-attachment_1k", "with attachment", 15, 1024, 0);
    loaded_t q;
    load(&q, "02-attachment_1k.req.bin");
    if (q.ok) {
        JT_CHECK_EQ(q.f.meta->attachment_size, 1024);
        JT_CHECK(all_bytes(&q.f.attachment, 'a'));
    }
    unload(&q);
}

static void case_05_attachment_4m(void)
{
    echo_pair("05-attachment_4m", "big", 3, 4u << 20, 0);
    loaded_t q;
    load(&q, "05-attachment_4m.req.bin");
    if (q.ok) {
        JT_CHECK_EQ(q.f.meta->attachment_size, 4 << 20);
        JT_CHECK(all_bytes(&q.f.attachment, 'z'));
    }
    unload(&q);
}

/* gzip 2, zlib 3, snappy 1: the body decompresses into a 4096-byte message,
 * and the answer comes back compressed the same way. */
static void compressed_pair(const char *stem, int type)
{
    loaded_t q, r;
    load_pair(stem, &q, &r);
    if (q.ok && r.ok) {
        check_request_meta(q.f.meta, "example.EchoService", type);
        check_response_meta(r.f.meta, q.f.meta, 0);
        JT_CHECK(r.f.meta->has_compress_type && r.f.meta->compress_type == type);
        uint8_t head[2] = {0, 0};
        jet_iobuf_copy_to(&q.f.body, head, 2, 0);
        if (type == 2) JT_CHECK(head[0] == 0x1f && head[1] == 0x8b);
        if (type == 3) JT_CHECK(head[0] == 0x78);
        char *qm = echo_message(&q.f, 1);
        char *rm = echo_message(&r.f, 0);
        JT_CHECK(qm && strlen(qm) == 4096);
        if (qm) {
            size_t same = strspn(qm, (char[]){qm[0], 0});
            JT_CHECK_EQ(same, 4096);
        }
        JT_CHECK(qm && rm && strcmp(qm, rm) == 0);
        free(qm);
        free(rm);
        /* Nothing decompresses as the wrong type. */
        jet_iobuf_t out;
        jet_iobuf_init(&out);
        for (int t = 1; t <= 3; t++)
            if (t != type) JT_CHECK(jet__decompress(t, &q.f.body, &out, MAX_BODY) < 0);
        JT_CHECK(jet_iobuf_empty(&out));
        jet_iobuf_fini(&out);
    }
    unload(&q);
    unload(&r);
}

static void case_06_gzip(void)
{
    compressed_pair("06-gzip", 2);
}
static void case_07_zlib(void)
{
    compressed_pair("07-zlib", 3);
}
static void case_08_snappy(void)
{
    compressed_pair("08-snappy", 1);
}

static void error_pair(const char *stem, const char *service, int code, const char *text)
{
    loaded_t q, r;
    load_pair(stem, &q, &r);
    if (q.ok && r.ok) {
        check_request_meta(q.f.meta, service, 0);
        check_response_meta(r.f.meta, q.f.meta, code);
        const char *et = r.f.meta->response ? r.f.meta->response->error_text : NULL;
        JT_CHECK(et && strstr(et, text) != NULL);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "][E%d]", code);
        JT_CHECK(et && strstr(et, prefix) != NULL);
        JT_CHECK(jet_iobuf_empty(&r.f.body) && jet_iobuf_empty(&r.f.attachment));
        JT_CHECK(!r.f.meta->has_attachment_size);
    }
    unload(&q);
    unload(&r);
}

static void case_09_no_such_service(void)
{
    error_pair("09-no_such_service", "example.NoSuchService", 1002,
               "Fail to find method=example.NoSuchService/Echo");
}

static void case_10_handler_error(void)
{
    error_pair("10-handler_error", "example.EchoService", 1003, "asked to fail");
    loaded_t q;
    load(&q, "10-handler_error.req.bin");
    if (q.ok) {
        char *m = echo_message(&q.f, 1);
        JT_CHECK(m && strcmp(m, "fail") == 0);
        free(m);
    }
    unload(&q);
}

static void case_11_timeout_request(void)
{
    loaded_t q;
    load(&q, "11-timeout_sleep300.req.bin");
    if (q.ok) {
        check_request_meta(q.f.meta, "example.EchoService", 0);
        char *m = echo_message(&q.f, 1);
        JT_CHECK(m && strcmp(m, "sleep:300") == 0);
        free(m);
    }
    unload(&q);
}

/* ---- the pipelined stream ---- */

#define NPIPE 200

typedef struct pipe_frame {
    int64_t cid;
    char *msg;
    uint8_t *att;
    size_t att_len;
} pipe_frame_t;

/* Feeds the stream in reads of `chunk` bytes and cuts every frame as soon as
 * it is complete. Returns the number of frames (at most NPIPE are kept). */
static int cut_stream(const char *name, size_t chunk, int is_request, pipe_frame_t *out)
{
    char rel[256];
    snprintf(rel, sizeof rel, "interop/baidu_std/%s", name);
    size_t len = 0;
    uint8_t *raw = jt_read_file(jt_shared_path(rel), &len);
    if (!raw) {
        JT_CHECK(raw != NULL);
        return -1;
    }
    jet_iobuf_t in;
    jet_iobuf_init(&in);
    int n = 0;
    for (size_t off = 0; off < len;) {
        size_t c = len - off < chunk ? len - off : chunk;
        JT_CHECK_EQ(jet_iobuf_append(&in, raw + off, c), 0);
        off += c;
        for (;;) {
            jet_baidu_frame_t f;
            jet__baidu_frame_init(&f);
            int bad = -1;
            jet_parse_result_t r = jet__baidu_cut(&in, MAX_BODY, &f, &bad);
            if (r == JET_PARSE_NEED_MORE) {
                jet__baidu_frame_fini(&f);
                break;
            }
            JT_CHECK_EQ(r, JET_PARSE_OK);
            JT_CHECK_EQ(bad, 0);
            if (r != JET_PARSE_OK) {
                jet__baidu_frame_fini(&f);
                goto out;
            }
            if (n < NPIPE) {
                out[n].cid = f.meta->correlation_id;
                JT_CHECK(f.meta->has_correlation_id);
                if (is_request) {
                    JT_CHECK(f.meta->request && strcmp(f.meta->request->method_name, "Echo") == 0);
                } else {
                    JT_CHECK(f.meta->response && f.meta->response->error_code == 0);
                }
                out[n].msg = echo_message(&f, is_request);
                out[n].att_len = jet_iobuf_len(&f.attachment);
                out[n].att = malloc(out[n].att_len + 1);
                jet_iobuf_copy_to(&f.attachment, out[n].att, out[n].att_len, 0);
            }
            n++;
            jet__baidu_frame_fini(&f);
        }
    }
    JT_CHECK(jet_iobuf_empty(&in));
out:
    jet_iobuf_fini(&in);
    free(raw);
    return n;
}

static void pipe_free(pipe_frame_t *p, int n)
{
    for (int i = 0; i < n && i < NPIPE; i++) {
        free(p[i].msg);
        free(p[i].att);
    }
}

static void pipelined_200(void)
{
    static const size_t chunks[] = {65536, 4093, 1 << 30};
    for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
        pipe_frame_t *q = calloc(NPIPE, sizeof(*q));
        pipe_frame_t *r = calloc(NPIPE, sizeof(*r));
        int nq = cut_stream("pipelined_200.req.stream", chunks[c], 1, q);
        int nr = cut_stream("pipelined_200.resp.stream", chunks[c], 0, r);
        JT_CHECK_EQ(nq, NPIPE);
        JT_CHECK_EQ(nr, NPIPE);
        if (nq == NPIPE && nr == NPIPE) {
            for (int i = 0; i < NPIPE; i++) {
                char want[32];
                snprintf(want, sizeof want, "pipelined-%d", i);
                JT_CHECK(q[i].msg && strcmp(q[i].msg, want) == 0);
                JT_CHECK_EQ(q[i].att_len, (size_t)i * 37);
                for (int j = 0; j < i; j++)
                    JT_CHECK(q[j].cid != q[i].cid);
            }
            /* Matched by correlation_id only. (The README says brpc answered
             * out of order; this recording is in fact in request order.) */
            int matched[NPIPE] = {0};
            for (int k = 0; k < NPIPE; k++) {
                int i = 0;
                while (i < NPIPE && q[i].cid != r[k].cid)
                    i++;
                JT_CHECK(i < NPIPE);
                if (i == NPIPE) continue;
                JT_CHECK_EQ(matched[i], 0);
                matched[i] = 1;
                JT_CHECK(r[k].msg && q[i].msg && strcmp(r[k].msg, q[i].msg) == 0);
                JT_CHECK_EQ(r[k].att_len, q[i].att_len);
                JT_CHECK(memcmp(r[k].att, q[i].att, q[i].att_len) == 0);
            }
        }
        pipe_free(q, nq);
        pipe_free(r, nr);
        free(q);
        free(r);
    }
}

int main(void)
{
    JT_RUN(case_00_echo_small);
    JT_RUN(case_01_echo_empty);
    JT_RUN(case_02_attachment_1k);
    JT_RUN(case_03_log_id);
    JT_RUN(case_04_message_1m);
    JT_RUN(case_05_attachment_4m);
    JT_RUN(case_06_gzip);
    JT_RUN(case_07_zlib);
    JT_RUN(case_08_snappy);
    JT_RUN(case_09_no_such_service);
    JT_RUN(case_10_handler_error);
    JT_RUN(case_11_timeout_request);
    JT_RUN(case_12_after_timeout);
    JT_RUN(pipelined_200);
    return jt_finish();
}
