/* Random mutations of valid frames fed to the parser (fixed seed): it never
 * crashes or reads past its input (each input ends before an unreadable
 * page), never consumes more than present, and its answers are consistent
 * with the header, with peek, and across different block splits. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/codec.h"
#include "testutil.h"
#include "testutil_codec.h"

#define ITERATIONS 20000
#define MAX_BODY   (64u * 1024 * 1024)

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void)
{
    return (uint32_t)(jt_xorshift64(&rng_state) >> 11);
}

/* ---- seed frames ---- */

typedef struct seed {
    uint8_t *data;
    size_t len;
} seed_t;

static seed_t seeds[8];
static size_t nseeds;

static void add_seed(const Brpc__Policy__RpcMeta *meta, const void *body, size_t blen,
                     const void *att, size_t alen)
{
    seeds[nseeds].data = jt_frame_pack(meta, body, blen, att, alen, &seeds[nseeds].len);
    if (!seeds[nseeds].data) abort();
    nseeds++;
}

static void make_seeds(void)
{
    Brpc__Policy__RpcMeta meta = BRPC__POLICY__RPC_META__INIT;
    Brpc__Policy__RpcRequestMeta req = BRPC__POLICY__RPC_REQUEST_META__INIT;
    Brpc__Policy__RpcResponseMeta resp = BRPC__POLICY__RPC_RESPONSE_META__INIT;
    Brpc__Policy__StreamSettings ss = BRPC__POLICY__STREAM_SETTINGS__INIT;
    Brpc__Policy__UserFieldsEntry uf = BRPC__POLICY__USER_FIELDS_ENTRY__INIT;
    Brpc__Policy__UserFieldsEntry *ufp[1] = {&uf};
    int64_t extra[2] = {3, -4};
    uint8_t att[200];
    for (int i = 0; i < 200; i++)
        att[i] = (uint8_t)(i * 13);

    /* brpc's echo request with a 6-byte attachment (BAIDU_STD.md §1). */
    req.service_name = "example.EchoService";
    req.method_name = "Echo";
    req.has_log_id = 1;
    meta.request = &req;
    meta.has_compress_type = 1;
    meta.has_correlation_id = 1;
    meta.correlation_id = 0x100000002ll;
    meta.has_attachment_size = 1;
    meta.attachment_size = 6;
    meta.has_content_type = 1;
    meta.has_checksum_type = 1;
    meta.has_checksum_value = 1;
    add_seed(&meta, "\x0a\x0bhello world", 13, "ATTACH", 6);

    /* Every optional field, a bigger attachment. */
    req.has_trace_id = req.has_span_id = req.has_parent_span_id = 1;
    req.trace_id = -1;
    req.span_id = 2;
    req.parent_span_id = 3;
    req.request_id = "rid";
    req.has_timeout_ms = 1;
    req.timeout_ms = 100;
    ss.stream_id = 8;
    ss.has_writable = 1;
    ss.writable = 1;
    ss.n_extra_stream_ids = 2;
    ss.extra_stream_ids = extra;
    meta.stream_settings = &ss;
    uf.key = "k";
    uf.value = "v";
    meta.n_user_fields = 1;
    meta.user_fields = ufp;
    meta.has_authentication_data = 1;
    meta.authentication_data.data = (uint8_t *)"auth";
    meta.authentication_data.len = 4;
    meta.checksum_type = 1;
    meta.checksum_value.data = (uint8_t *)"\x61\xf6\x3a\x7e";
    meta.checksum_value.len = 4;
    meta.attachment_size = 200;
    add_seed(&meta, "\x0a\x02hi", 4, att, sizeof att);

    /* A response and an error response. */
    Brpc__Policy__RpcMeta m2 = BRPC__POLICY__RPC_META__INIT;
    resp.has_error_code = 1;
    m2.response = &resp;
    m2.has_correlation_id = 1;
    m2.correlation_id = -5;
    add_seed(&m2, "\x0a\x03xyz", 5, NULL, 0);
    resp.error_code = 1003;
    resp.error_text = "[127.0.0.1:8100][E1003]asked to fail";
    add_seed(&m2, NULL, 0, NULL, 0);
}

/* ---- mutations ---- */

static size_t mutate(uint8_t *buf, size_t len, size_t cap)
{
    int nmut = 1 + (int)(rnd() % 4);
    for (int m = 0; m < nmut; m++) {
        switch (rnd() % 10) {
        case 0: /* flip a bit */
            if (len) buf[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 1: /* random byte */
            if (len) buf[rnd() % len] = (uint8_t)rnd();
            break;
        case 2: /* truncate */
            if (len) len = rnd() % len;
            break;
        case 3: /* insert random bytes */
        {
            size_t n = 1 + rnd() % 8;
            if (len + n > cap) break;
            size_t at = len ? rnd() % (len + 1) : 0;
            memmove(buf + at + n, buf + at, len - at);
            for (size_t i = 0; i < n; i++)
                buf[at + i] = (uint8_t)rnd();
            len += n;
            break;
        }
        case 4: /* delete bytes */
        {
            if (!len) break;
            size_t at = rnd() % len;
            size_t n = 1 + rnd() % 8;
            if (n > len - at) n = len - at;
            memmove(buf + at, buf + at + n, len - at - n);
            len -= n;
            break;
        }
        case 5: /* body_size: random, off by a little, or extreme */
            if (len >= 8) {
                uint32_t v = jt_get_be32(buf + 4);
                static const uint32_t extremes[] = {0,          1,        0x7fffffff,
                                                    0xffffffff, MAX_BODY, MAX_BODY + 1};
                uint32_t r = rnd() % 3;
                v = r == 0 ? v + (rnd() % 9) - 4 : r == 1 ? rnd() % 512 : extremes[rnd() % 6];
                jt_put_be32(buf + 4, v);
            }
            break;
        case 6: /* meta_size likewise */
            if (len >= 12) {
                uint32_t v = jt_get_be32(buf + 8);
                uint32_t r = rnd() % 3;
                v = r == 0 ? v + (rnd() % 9) - 4 : r == 1 ? rnd() % 512 : 0xffffffff - rnd() % 4;
                jt_put_be32(buf + 8, v);
            }
            break;
        case 7: /* a byte inside the meta, where varints and lengths live */
            if (len > 12) {
                uint32_t ms = jt_get_be32(buf + 8);
                size_t span = ms && ms < len - 12 ? ms : len - 12;
                static const uint8_t hot[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x0a, 0x12, 0x28};
                buf[12 + rnd() % span] = hot[rnd() % sizeof hot];
            }
            break;
        case 8: /* duplicate a chunk (repeated fields, second frames) */
        {
            if (!len) break;
            size_t at = rnd() % len;
            size_t n = 1 + rnd() % 32;
            if (n > len - at) n = len - at;
            if (len + n > cap) break;
            memmove(buf + len, buf + at, n);
            len += n;
            break;
        }
        default: /* make the sizes consistent with the length again */
            if (len >= 12) jt_put_be32(buf + 4, (uint32_t)(len - 12));
            break;
        }
    }
    return len;
}

/* ---- checks ---- */

typedef struct outcome {
    jet_parse_result_t r;
    size_t consumed;
    int bad_att;
    size_t body_len, att_len;
    int has_meta;
} outcome_t;

/* Cuts repeatedly from in until it stops; checks every step against the
 * header. Returns the first step's outcome. */
static outcome_t drive(jet_iobuf_t *in, const uint8_t *data, size_t len, uint32_t max_body)
{
    outcome_t first = {0};
    size_t pos = 0;
    for (int step = 0; step < 64; step++) {
        size_t before = jet_iobuf_len(in);
        JT_CHECK_EQ(before, len - pos);
        uint32_t pbs = 0, pms = 0;
        jet_parse_result_t pr = jet__baidu_peek(in, max_body, &pbs, &pms);
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int bad = -1;
        jet_parse_result_t r = jet__baidu_cut(in, max_body, &f, &bad);
        size_t after = jet_iobuf_len(in);
        JT_CHECK(after <= before);
        size_t consumed = before - after;

        const uint8_t *h = data + pos;
        size_t have = len - pos;
        uint32_t bs = have >= 12 ? jt_get_be32(h + 4) : 0;
        uint32_t ms = have >= 12 ? jt_get_be32(h + 8) : 0;
        switch (r) {
        case JET_PARSE_NEED_MORE:
        case JET_PARSE_NOT_MINE:
        case JET_PARSE_TOO_BIG:
            JT_CHECK_EQ(consumed, 0);
            JT_CHECK_EQ(pr, r);
            JT_CHECK(f.meta == NULL && jet_iobuf_empty(&f.body));
            if (r == JET_PARSE_NOT_MINE) {
                size_t nm = have < 4 ? have : 4;
                JT_CHECK(memcmp(h, "PRPC", nm) != 0);
            } else {
                JT_CHECK(memcmp(h, "PRPC", have < 4 ? have : 4) == 0);
            }
            if (r == JET_PARSE_TOO_BIG) JT_CHECK(have >= 12 && bs > max_body);
            if (r == JET_PARSE_NEED_MORE)
                JT_CHECK(have < 12 || (bs <= max_body && have < 12 + (size_t)bs));
            break;
        case JET_PARSE_META_SIZE:
            JT_CHECK(ms > bs);
            /* fall through */
        case JET_PARSE_BAD_META:
            JT_CHECK_EQ(pr, JET_PARSE_OK);
            JT_CHECK_EQ(consumed, 12 + (size_t)bs);
            JT_CHECK(f.meta == NULL && jet_iobuf_empty(&f.body) && jet_iobuf_empty(&f.attachment));
            break;
        case JET_PARSE_OK: {
            JT_CHECK_EQ(pr, JET_PARSE_OK);
            JT_CHECK_EQ(consumed, 12 + (size_t)bs);
            JT_CHECK(ms <= bs);
            JT_CHECK(f.meta != NULL);
            if (!f.meta) {
                jet__baidu_frame_fini(&f);
                return first;
            }
            size_t payload = bs - ms;
            size_t bl = jet_iobuf_len(&f.body), al = jet_iobuf_len(&f.attachment);
            JT_CHECK_EQ(bl + al, payload);
            if (bad) {
                JT_CHECK_EQ(bad, 1);
                JT_CHECK(
                    f.meta->has_attachment_size &&
                    (f.meta->attachment_size < 0 || (size_t)f.meta->attachment_size > payload));
                JT_CHECK_EQ(al, 0);
            } else {
                JT_CHECK_EQ(bad, 0);
                JT_CHECK_EQ(al, f.meta->has_attachment_size ? (size_t)f.meta->attachment_size : 0);
                /* The parts are the frame's bytes, in place and in order. */
                JT_CHECK(jet_iobuf_equals(&f.body, h + 12 + ms, bl) == 0);
                JT_CHECK(jet_iobuf_equals(&f.attachment, h + 12 + ms + bl, al) == 0);
            }
            if (f.meta->request) {
                JT_CHECK(f.meta->request->service_name && f.meta->request->method_name);
            }
            break;
        }
        default:
            JT_CHECK(!"unknown result");
        }
        if (step == 0) {
            first.r = r;
            first.consumed = consumed;
            first.bad_att = bad;
            first.body_len = jet_iobuf_len(&f.body);
            first.att_len = jet_iobuf_len(&f.attachment);
            first.has_meta = f.meta != NULL;
        }
        jet__baidu_frame_fini(&f);
        pos += consumed;
        if (r != JET_PARSE_OK && r != JET_PARSE_BAD_META && r != JET_PARSE_META_SIZE) break;
        if (jt_case_failed) break;
    }
    return first;
}

static void fuzz_cut(void)
{
    make_seeds();
    size_t cap = 4096;
    uint8_t *buf = malloc(cap);
    size_t counts[6] = {0};
    for (int it = 0; it < ITERATIONS && !jt_case_failed; it++) {
        const seed_t *s = &seeds[rnd() % nseeds];
        size_t len = s->len;
        memcpy(buf, s->data, len);
        /* Sometimes two frames back to back, so a mutation can straddle. */
        if (rnd() % 4 == 0) {
            const seed_t *s2 = &seeds[rnd() % nseeds];
            memcpy(buf + len, s2->data, s2->len);
            len += s2->len;
        }
        len = mutate(buf, len, cap);
        uint32_t max_body = rnd() % 8 == 0 ? rnd() % 600 : MAX_BODY;

        /* Split into up to four user blocks over one guarded allocation. */
        uint8_t *g = jt_guard_alloc(buf, len);
        size_t cuts[5] = {0};
        int npieces = 1 + (int)(rnd() % 4);
        for (int p = 1; p < npieces; p++)
            cuts[p] = len ? rnd() % (len + 1) : 0;
        cuts[npieces] = len;
        for (int a = 1; a < npieces; a++)
            for (int b = a + 1; b < npieces; b++)
                if (cuts[b] < cuts[a]) {
                    size_t t = cuts[a];
                    cuts[a] = cuts[b];
                    cuts[b] = t;
                }
        jet_iobuf_t in;
        jet_iobuf_init(&in);
        for (int p = 0; p < npieces; p++)
            if (cuts[p + 1] > cuts[p])
                JT_CHECK_EQ(
                    jet_iobuf_append_user(&in, g + cuts[p], cuts[p + 1] - cuts[p], NULL, NULL), 0);
        outcome_t o1 = drive(&in, g, len, max_body);
        jet_iobuf_fini(&in);

        /* The same bytes in one flat buffer give the same first answer. */
        jet_iobuf_init(&in);
        if (len) JT_CHECK_EQ(jet_iobuf_append(&in, buf, len), 0);
        outcome_t o2 = drive(&in, buf, len, max_body);
        jet_iobuf_fini(&in);
        JT_CHECK_EQ(o1.r, o2.r);
        JT_CHECK_EQ(o1.consumed, o2.consumed);
        JT_CHECK_EQ(o1.bad_att, o2.bad_att);
        JT_CHECK_EQ(o1.body_len, o2.body_len);
        JT_CHECK_EQ(o1.att_len, o2.att_len);
        JT_CHECK_EQ(o1.has_meta, o2.has_meta);
        counts[o1.r]++;
        jt_guard_free(g, len);
    }
    fprintf(stderr,
            "  first results: ok %zu, need_more %zu, not_mine %zu, too_big %zu, bad_meta %zu, "
            "meta_size %zu\n",
            counts[0], counts[1], counts[2], counts[3], counts[4], counts[5]);
    /* The mutations reach every outcome (else the fuzzer tests little). */
    for (int i = 0; i < 6; i++)
        JT_CHECK(counts[i] > 0);
    free(buf);
    for (size_t i = 0; i < nseeds; i++)
        free(seeds[i].data);
}

int main(void)
{
    JT_RUN(fuzz_cut);
    return jt_finish();
}
