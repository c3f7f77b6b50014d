/* Compression (none/snappy/gzip/zlib) over iobufs, the max_out guard, and
 * CRC32C with brpc's mask. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "echo.pb-c.h"
#include "rpc/codec.h"
#include "rpc/compress.h"
#include "testutil.h"
#include "testutil_codec.h"

/* compress.c's portable CRC32C path, whatever the CPU (not in compress.h). */
uint32_t jet__crc32c_sw(uint32_t crc, const void *data, size_t n);

#define MAX_OUT (64u * 1024 * 1024)

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    return (uint32_t)(jt_xorshift64(&rng_state) >> 16);
}

static uint8_t *random_bytes(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
    return p;
}

/* Text-like bytes that compress well. */
static uint8_t *compressible_bytes(size_t n)
{
    static const char *words[] = {"alpha ", "beta ", "gamma ", "delta ", "rpc ", "frame "};
    uint8_t *p = malloc(n ? n : 1);
    size_t i = 0;
    while (i < n) {
        const char *w = words[rnd() % 6];
        for (size_t j = 0; w[j] && i < n; j++)
            p[i++] = (uint8_t)w[j];
    }
    return p;
}

/* Compresses data held in `in_piece`-byte blocks, re-splits the compressed
 * bytes into `z_piece`-byte blocks, decompresses, and compares. */
static void roundtrip_one(int type, const uint8_t *data, size_t n, size_t in_piece, size_t z_piece)
{
    jet_iobuf_t in, z, out;
    jt_iobuf_split(&in, data, n, in_piece);
    jet_iobuf_init(&z);
    jet_iobuf_init(&out);
    JT_CHECK_EQ(jet__compress(type, &in, &z), 0);
    JT_CHECK_EQ(jet_iobuf_len(&in), n); /* input untouched */
    size_t zl;
    uint8_t *zb = jt_iobuf_bytes(&z, &zl);
    if (type == 2) JT_CHECK(zl >= 2 && zb[0] == 0x1f && zb[1] == 0x8b);
    if (type == 3) JT_CHECK(zl >= 2 && zb[0] == 0x78 && ((zb[0] << 8) | zb[1]) % 31 == 0);
    if (type == 0) JT_CHECK(zl == n && memcmp(zb, data, n) == 0);

    jet_iobuf_t z2;
    jt_iobuf_split(&z2, zb, zl, z_piece);
    JT_CHECK_EQ(jet__decompress(type, &z2, &out, n + 1), 0);
    JT_CHECK_EQ(jet_iobuf_len(&out), n);
    JT_CHECK(jet_iobuf_equals(&out, data, n) == 0);

    /* An exact max_out passes; one byte less is refused with nothing appended. */
    jet_iobuf_clear(&out);
    JT_CHECK_EQ(jet__decompress(type, &z2, &out, n), 0);
    JT_CHECK_EQ(jet_iobuf_len(&out), n);
    if (n > 0) {
        jet_iobuf_clear(&out);
        JT_CHECK_EQ(jet_iobuf_append(&out, "keep", 4), 0);
        JT_CHECK_EQ(jet__decompress(type, &z2, &out, n - 1), -EMSGSIZE);
        JT_CHECK(jet_iobuf_equals(&out, "keep", 4) == 0);
    }
    free(zb);
    jet_iobuf_fini(&z2);
    jet_iobuf_fini(&in);
    jet_iobuf_fini(&z);
    jet_iobuf_fini(&out);
}

static void roundtrip_all_types(void)
{
    size_t mib = 1 << 20;
    uint8_t *rnd_mib = random_bytes(mib);
    uint8_t *txt_mib = compressible_bytes(mib);
    for (int type = 0; type <= 3; type++) {
        roundtrip_one(type, (const uint8_t *)"", 0, 1, 1);
        roundtrip_one(type, (const uint8_t *)"x", 1, 1, 1);
        roundtrip_one(type, (const uint8_t *)"hello hello hello hello", 23, 1, 1);
        /* Big blocks (one 1 MiB reference) and many small ones. */
        roundtrip_one(type, rnd_mib, mib, mib, mib);
        roundtrip_one(type, txt_mib, mib, mib, mib);
        roundtrip_one(type, rnd_mib, mib, 1000, 777);
        roundtrip_one(type, txt_mib, mib, 4096, 13);
        roundtrip_one(type, txt_mib, 70000, 1, 3);
    }
    free(rnd_mib);
    free(txt_mib);
}

/* Output appended after what out already holds, and compressed output that is
 * smaller for compressible input. */
static void appends_and_ratio(void)
{
    size_t n = 100000;
    uint8_t *txt = compressible_bytes(n);
    for (int type = 1; type <= 3; type++) {
        jet_iobuf_t in, z, out;
        jt_iobuf_split(&in, txt, n, 8192);
        jet_iobuf_init(&z);
        jet_iobuf_init(&out);
        JT_CHECK_EQ(jet_iobuf_append(&z, "ab", 2), 0);
        JT_CHECK_EQ(jet__compress(type, &in, &z), 0);
        JT_CHECK(jet_iobuf_len(&z) < n / 2);
        jet_iobuf_pop_front(&z, 2);
        JT_CHECK_EQ(jet_iobuf_append(&out, "cd", 2), 0);
        JT_CHECK_EQ(jet__decompress(type, &z, &out, MAX_OUT), 0);
        JT_CHECK_EQ(jet_iobuf_len(&out), n + 2);
        jet_iobuf_pop_front(&out, 2);
        JT_CHECK(jet_iobuf_equals(&out, txt, n) == 0);
        jet_iobuf_fini(&in);
        jet_iobuf_fini(&z);
        jet_iobuf_fini(&out);
    }
    free(txt);
}

/* Output of zlib's own gzip/zlib writers (other settings than ours) and a
 * two-member gzip stream decode too. */
static void foreign_streams(void)
{
    size_t n = 50000;
    uint8_t *txt = compressible_bytes(n);
    for (int type = 2; type <= 3; type++) {
        for (int level = 1; level <= 9; level += 8) {
            z_stream zs;
            memset(&zs, 0, sizeof zs);
            JT_REQUIRE(deflateInit2(&zs, level, Z_DEFLATED, type == 2 ? 31 : 15, 9,
                                    Z_DEFAULT_STRATEGY) == Z_OK);
            size_t cap = deflateBound(&zs, n);
            uint8_t *zb = malloc(cap);
            zs.next_in = txt;
            zs.avail_in = (uInt)n;
            zs.next_out = zb;
            zs.avail_out = (uInt)cap;
            JT_CHECK_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
            size_t zl = cap - zs.avail_out;
            deflateEnd(&zs);
            jet_iobuf_t z, out;
            jt_iobuf_split(&z, zb, zl, 100);
            jet_iobuf_init(&out);
            JT_CHECK_EQ(jet__decompress(type, &z, &out, MAX_OUT), 0);
            JT_CHECK(jet_iobuf_equals(&out, txt, n) == 0);
            jet_iobuf_fini(&out);
            jet_iobuf_fini(&z);
            free(zb);
        }
    }
    /* gzip member "abc" followed by member "def" reads as "abcdef". */
    jet_iobuf_t a, b, z, out;
    jt_iobuf_split(&a, "abc", 3, 3);
    jt_iobuf_split(&b, "def", 3, 3);
    jet_iobuf_init(&z);
    jet_iobuf_init(&out);
    JT_CHECK_EQ(jet__compress(2, &a, &z), 0);
    JT_CHECK_EQ(jet__compress(2, &b, &z), 0);
    JT_CHECK_EQ(jet__decompress(2, &z, &out, 100), 0);
    JT_CHECK(jet_iobuf_equals(&out, "abcdef", 6) == 0);
    jet_iobuf_fini(&a);
    jet_iobuf_fini(&b);
    jet_iobuf_fini(&z);
    jet_iobuf_fini(&out);
    free(txt);
}

/* Bodies of the frames recorded from brpc decompress to EchoRequest with a
 * 4096-byte message. */
static void interop_bodies(void)
{
    static const struct {
        const char *file;
        int type;
    } cases[] = {
        {"interop/baidu_std/06-gzip.req.bin", 2},   {"interop/baidu_std/07-zlib.req.bin", 3},
        {"interop/baidu_std/08-snappy.req.bin", 1}, {"interop/baidu_std/06-gzip.resp.bin", 2},
        {"interop/baidu_std/07-zlib.resp.bin", 3},  {"interop/baidu_std/08-snappy.resp.bin", 1},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t len;
        uint8_t *raw = jt_read_file(jt_shared_path(cases[k].file), &len);
        JT_REQUIRE(raw != NULL);
        JT_REQUIRE(len > 12);
        uint32_t meta_size =
            (uint32_t)raw[8] << 24 | (uint32_t)raw[9] << 16 | (uint32_t)raw[10] << 8 | raw[11];
        JT_REQUIRE(12 + (size_t)meta_size <= len);
        const uint8_t *body = raw + 12 + meta_size;
        size_t blen = len - 12 - meta_size; /* no attachment in these cases */
        for (size_t piece = 1; piece <= blen; piece = piece * 3 + 1) {
            jet_iobuf_t in, out;
            jt_iobuf_split(&in, body, blen, piece);
            jet_iobuf_init(&out);
            JT_CHECK_EQ(jet__decompress(cases[k].type, &in, &out, MAX_OUT), 0);
            Example__EchoRequest *m = (Example__EchoRequest *)jet__pb_unpack_iobuf(
                &example__echo_request__descriptor, &out, NULL);
            JT_CHECK(m && strlen(m->message) == 4096);
            if (m) protobuf_c_message_free_unpacked(&m->base, NULL);
            jet_iobuf_clear(&out);
            JT_CHECK_EQ(jet__decompress(cases[k].type, &in, &out, 4098), -EMSGSIZE);
            JT_CHECK(jet_iobuf_empty(&out));
            jet_iobuf_fini(&in);
            jet_iobuf_fini(&out);
        }
        free(raw);
    }
}

static void corrupt_input(void)
{
    size_t n = 20000;
    uint8_t *txt = compressible_bytes(n);
    for (int type = 1; type <= 3; type++) {
        jet_iobuf_t in, z, out;
        jt_iobuf_split(&in, txt, n, n);
        jet_iobuf_init(&z);
        jet_iobuf_init(&out);
        JT_CHECK_EQ(jet__compress(type, &in, &z), 0);
        size_t zl;
        uint8_t *zb = jt_iobuf_bytes(&z, &zl);

        /* Truncated at several points (snappy: its length header no longer
         * matches the data; gzip/zlib: the stream has no end). */
        for (size_t cut = 0; cut < zl; cut += zl / 7 + 1) {
            jet_iobuf_t t;
            jt_iobuf_split(&t, zb, cut, 64);
            JT_CHECK_EQ(jet__decompress(type, &t, &out, MAX_OUT), -EBADMSG);
            JT_CHECK(jet_iobuf_empty(&out));
            jet_iobuf_fini(&t);
        }
        if (type != 1) {
            /* A flipped byte in the deflate data or the trailer's check. */
            size_t spots[] = {zl / 2, zl - 1, zl - 5};
            for (size_t s = 0; s < 3; s++) {
                zb[spots[s]] ^= 0x55;
                jet_iobuf_t t;
                jt_iobuf_split(&t, zb, zl, 1000);
                JT_CHECK_EQ(jet__decompress(type, &t, &out, MAX_OUT), -EBADMSG);
                JT_CHECK(jet_iobuf_empty(&out));
                jet_iobuf_fini(&t);
                zb[spots[s]] ^= 0x55;
            }
            /* Trailing garbage after the stream. */
            jet_iobuf_t t;
            jt_iobuf_split(&t, zb, zl, zl);
            JT_CHECK_EQ(jet_iobuf_append(&t, "\x01\x02\x03", 3), 0);
            JT_CHECK_EQ(jet__decompress(type, &t, &out, MAX_OUT), -EBADMSG);
            jet_iobuf_fini(&t);
        }
        jet_iobuf_fini(&in);
        jet_iobuf_fini(&z);
        jet_iobuf_fini(&out);
        free(zb);
    }
    free(txt);

    /* Hand-made bad streams. */
    static const struct {
        int type;
        const char *data;
        size_t len;
    } bad[] = {
        {1, "", 0},                         /* snappy: no length */
        {1, "\xff\xff\xff\xff\xff\xff", 6}, /* snappy: unterminated length varint */
        {1, "\x05\x00", 2},                 /* snappy: 5 bytes claimed, no data */
        {1, "\x04\x01\x01\x00", 4},         /* snappy: copy before any output */
        {2, "", 0},                         /* gzip: empty */
        {3, "", 0},                         /* zlib: empty */
        {2, "\x1f\x8c\x08\x00", 4},         /* gzip: bad magic */
        {3, "\x78\x9d", 2},                 /* zlib: header check fails */
        {3, "\x78\xbb\x00\x00\x00\x01", 6}, /* zlib: preset dictionary */
        {2, "hello", 5},
        {3, "hello", 5},
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        jet_iobuf_t t, out;
        jt_iobuf_split(&t, bad[k].data, bad[k].len, 1);
        jet_iobuf_init(&out);
        int rc = jet__decompress(bad[k].type, &t, &out, MAX_OUT);
        if (rc != -EBADMSG) fprintf(stderr, "  bad case %zu\n", k);
        JT_CHECK_EQ(rc, -EBADMSG);
        JT_CHECK(jet_iobuf_empty(&out));
        jet_iobuf_fini(&t);
        jet_iobuf_fini(&out);
    }
    /* gzip data labelled zlib and the reverse are refused, as brpc does. */
    jet_iobuf_t in, z, out;
    jt_iobuf_split(&in, "some message", 12, 12);
    jet_iobuf_init(&z);
    jet_iobuf_init(&out);
    JT_CHECK_EQ(jet__compress(2, &in, &z), 0);
    JT_CHECK_EQ(jet__decompress(3, &z, &out, MAX_OUT), -EBADMSG);
    jet_iobuf_clear(&z);
    JT_CHECK_EQ(jet__compress(3, &in, &z), 0);
    JT_CHECK_EQ(jet__decompress(2, &z, &out, MAX_OUT), -EBADMSG);
    JT_CHECK(jet_iobuf_empty(&out));
    jet_iobuf_fini(&in);
    jet_iobuf_fini(&z);
    jet_iobuf_fini(&out);
}

/* A small input that claims or inflates to far more than max_out stops at
 * max_out with -EMSGSIZE and appends nothing. */
static void decompression_bomb(void)
{
    size_t big = 32u << 20;
    uint8_t *zeros = calloc(1, big);
    for (int type = 1; type <= 3; type++) {
        jet_iobuf_t in, z, out;
        jt_iobuf_split(&in, zeros, big, 2u << 20);
        jet_iobuf_init(&z);
        jet_iobuf_init(&out);
        JT_CHECK_EQ(jet__compress(type, &in, &z), 0);
        JT_CHECK(jet_iobuf_len(&z) < big / 20);
        static const size_t limits[] = {0, 1, 4096, 1 << 20, (32u << 20) - 1};
        for (size_t k = 0; k < sizeof(limits) / sizeof(limits[0]); k++) {
            JT_CHECK_EQ(jet_iobuf_append(&out, "x", 1), 0);
            JT_CHECK_EQ(jet__decompress(type, &z, &out, limits[k]), -EMSGSIZE);
            JT_CHECK(jet_iobuf_equals(&out, "x", 1) == 0);
            jet_iobuf_clear(&out);
        }
        JT_CHECK_EQ(jet__decompress(type, &z, &out, big), 0);
        JT_CHECK_EQ(jet_iobuf_len(&out), big);
        jet_iobuf_fini(&in);
        jet_iobuf_fini(&z);
        jet_iobuf_fini(&out);
    }
    /* snappy whose header claims 4 GiB - 1: refused from the header. */
    jet_iobuf_t t, out;
    jt_iobuf_split(&t, "\xff\xff\xff\xff\x0f\x00", 6, 6);
    jet_iobuf_init(&out);
    JT_CHECK_EQ(jet__decompress(1, &t, &out, MAX_OUT), -EMSGSIZE);
    jet_iobuf_fini(&t);
    /* ... and one that claims 1 MiB from 6 bytes, under the limit, is
     * impossible (snappy expands at most 64/3) and refused unallocated. */
    jt_iobuf_split(&t, "\x80\x80\x40\x00\x00\x00", 6, 6);
    JT_CHECK_EQ(jet__decompress(1, &t, &out, MAX_OUT), -EBADMSG);
    JT_CHECK(jet_iobuf_empty(&out));
    jet_iobuf_fini(&t);
    /* none: the plain size counts. */
    jt_iobuf_split(&t, "12345", 5, 2);
    JT_CHECK_EQ(jet__decompress(0, &t, &out, 4), -EMSGSIZE);
    JT_CHECK_EQ(jet__decompress(0, &t, &out, 5), 0);
    JT_CHECK(jet_iobuf_equals(&out, "12345", 5) == 0);
    jet_iobuf_fini(&t);
    jet_iobuf_fini(&out);
    free(zeros);
}

static void unsupported_type(void)
{
    jet_iobuf_t in, out;
    jt_iobuf_split(&in, "abc", 3, 3);
    jet_iobuf_init(&out);
    static const int types[] = {4, 5, -1, 1000};
    for (size_t k = 0; k < 4; k++) {
        JT_CHECK(!jet__compress_supported(types[k]));
        JT_CHECK(strcmp(jet__compress_name(types[k]), "unknown") == 0);
        JT_CHECK_EQ(jet__compress(types[k], &in, &out), -EINVAL);
        JT_CHECK_EQ(jet__decompress(types[k], &in, &out, MAX_OUT), -EINVAL);
        JT_CHECK(jet_iobuf_empty(&out));
    }
    static const char *names[] = {"none", "snappy", "gzip", "zlib"};
    for (int t = 0; t <= 3; t++) {
        JT_CHECK(jet__compress_supported(t));
        JT_CHECK(strcmp(jet__compress_name(t), names[t]) == 0);
    }
    jet_iobuf_fini(&in);
    jet_iobuf_fini(&out);
}

/* ---- CRC32C ---- */

static void crc32c_vectors(void)
{
    JT_CHECK_EQ(jet__crc32c(0, "123456789", 9), 0xE3069283u);
    JT_CHECK_EQ(jet__crc32c_sw(0, "123456789", 9), 0xE3069283u);
    JT_CHECK_EQ(jet__crc32c(0, "", 0), 0);
    /* RFC 3720 (iSCSI) B.4. */
    uint8_t buf[32];
    memset(buf, 0, 32);
    JT_CHECK_EQ(jet__crc32c(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, 32);
    JT_CHECK_EQ(jet__crc32c(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    JT_CHECK_EQ(jet__crc32c(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    JT_CHECK_EQ(jet__crc32c(0, buf, 32), 0x113FDB5Cu);
    JT_CHECK_EQ(jet__crc32c_sw(0, buf, 32), 0x113FDB5Cu);

    /* §6: brpc accepted this checksum_value for the message "hello". */
    static const uint8_t msg[] = {0x0a, 0x05, 0x68, 0x65, 0x6c, 0x6c, 0x6f};
    JT_CHECK_EQ(jet__crc32c_mask(jet__crc32c(0, msg, sizeof msg)), 0x61f63a7eu);
    /* LevelDB's mask: rotate right 15, add 0xa282ead8. */
    JT_CHECK_EQ(jet__crc32c_mask(0), 0xa282ead8u);
    JT_CHECK_EQ(jet__crc32c_mask(0x8000u), 0xa282ead9u);
}

/* Hardware and software paths agree at every length and alignment, and a
 * computation continued piece by piece equals the one-shot value. */
static void crc32c_paths_agree(void)
{
    size_t n = 4096 + 64;
    uint8_t *data = random_bytes(n);
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len < 200; len++)
            JT_CHECK_EQ(jet__crc32c(0, data + off, len), jet__crc32c_sw(0, data + off, len));
        JT_CHECK_EQ(jet__crc32c(7, data + off, 4096), jet__crc32c_sw(7, data + off, 4096));
    }
    uint32_t whole = jet__crc32c(0, data, n);
    for (size_t split = 0; split <= n; split += 97) {
        uint32_t c = jet__crc32c(0, data, split);
        JT_CHECK_EQ(jet__crc32c(c, data + split, n - split), whole);
        uint32_t s = jet__crc32c_sw(0, data, split);
        JT_CHECK_EQ(jet__crc32c_sw(s, data + split, n - split), whole);
    }
    free(data);
}

static void crc32c_iobuf_split(void)
{
    size_t n = 300000;
    uint8_t *data = random_bytes(n);
    uint32_t flat = jet__crc32c(0, data, n);
    static const size_t pieces[] = {1, 3, 8, 1000, 8192, 300000};
    for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
        jet_iobuf_t b;
        jt_iobuf_split(&b, data, pieces[k] == 1 ? 5000 : n, pieces[k]);
        uint32_t want = pieces[k] == 1 ? jet__crc32c(0, data, 5000) : flat;
        JT_CHECK_EQ(jet__crc32c_iobuf(0, &b), want);
        jet_iobuf_fini(&b);
    }
    jet_iobuf_t e;
    jet_iobuf_init(&e);
    JT_CHECK_EQ(jet__crc32c_iobuf(0, &e), 0);
    JT_CHECK_EQ(jet__crc32c_iobuf(0x1234, &e), 0x1234);
    jet_iobuf_fini(&e);
    free(data);
}

/* ---- brpc's checksum checklist (BAIDU_STD.md §13), at the CRC level ----
 * checksum_value = mask(crc32c(message [, attachment])) as 4 bytes BE. */

static void csum_value(const jet_iobuf_t *body, const jet_iobuf_t *att, int with_att,
                       uint8_t out[4])
{
    uint32_t c = jet__crc32c_iobuf(0, body);
    if (with_att) c = jet__crc32c_iobuf(c, att);
    c = jet__crc32c_mask(c);
    out[0] = (uint8_t)(c >> 24);
    out[1] = (uint8_t)(c >> 16);
    out[2] = (uint8_t)(c >> 8);
    out[3] = (uint8_t)c;
}

static int csum_verify(const jet_iobuf_t *body, const jet_iobuf_t *att, int with_att,
                       const uint8_t want[4])
{
    uint8_t got[4];
    csum_value(body, att, with_att, got);
    return memcmp(got, want, 4) == 0;
}

static void checksum_checklist(void)
{
    uint8_t *bdata = random_bytes(5000);
    uint8_t *adata = random_bytes(3000);
    jet_iobuf_t body, att, empty;
    jt_iobuf_split(&body, bdata, 5000, 777);
    jt_iobuf_split(&att, adata, 3000, 500);
    jet_iobuf_init(&empty);
    uint8_t v_body[4], v_both[4];

    /* verify_succeeds_when_body_only */
    csum_value(&body, &att, 0, v_body);
    JT_CHECK(csum_verify(&body, &att, 0, v_body));
    JT_CHECK(csum_verify(&body, &empty, 0, v_body));
    /* §6 vector through the iobuf path: 61 f6 3a 7e. */
    jet_iobuf_t hello;
    jt_iobuf_split(&hello, "\x0a\x05hello", 7, 2);
    uint8_t v_hello[4];
    csum_value(&hello, &empty, 0, v_hello);
    JT_CHECK(memcmp(v_hello, "\x61\xf6\x3a\x7e", 4) == 0);

    /* verify_succeeds_when_attachment_included */
    csum_value(&body, &att, 1, v_both);
    JT_CHECK(csum_verify(&body, &att, 1, v_both));
    JT_CHECK(memcmp(v_body, v_both, 4) != 0);
    /* one value over the concatenation */
    uint8_t *cat = malloc(8000);
    memcpy(cat, bdata, 5000);
    memcpy(cat + 5000, adata, 3000);
    uint32_t c = jet__crc32c_mask(jet__crc32c(0, cat, 8000));
    JT_CHECK_EQ(((uint32_t)v_both[0] << 24 | (uint32_t)v_both[1] << 16 | (uint32_t)v_both[2] << 8 |
                 v_both[3]),
                c);

    /* verify_fails_when_attachment_corrupted: each of a few single flips */
    for (size_t pos = 0; pos < 3000; pos += 599) {
        adata[pos] ^= 0x01;
        jet_iobuf_t bad;
        jt_iobuf_split(&bad, adata, 3000, 500);
        JT_CHECK(!csum_verify(&body, &bad, 1, v_both));
        jet_iobuf_fini(&bad);
        adata[pos] ^= 0x01;
    }
    /* verify_fails_when_attachment_dropped */
    JT_CHECK(!csum_verify(&body, &empty, 1, v_both));
    JT_CHECK(!csum_verify(&body, &att, 0, v_both));
    /* verify_fails_when_body_and_attachment_swapped */
    JT_CHECK(!csum_verify(&att, &body, 1, v_both));
    /* checksum_without_attachment_still_works: the flag off ignores it */
    jet_iobuf_t other;
    jt_iobuf_split(&other, "zzz", 3, 1);
    JT_CHECK(csum_verify(&body, &other, 0, v_body));

    jet_iobuf_fini(&other);
    jet_iobuf_fini(&hello);
    jet_iobuf_fini(&body);
    jet_iobuf_fini(&att);
    jet_iobuf_fini(&empty);
    free(cat);
    free(bdata);
    free(adata);
}

int main(void)
{
    JT_RUN(roundtrip_all_types);
    JT_RUN(appends_and_ratio);
    JT_RUN(foreign_streams);
    JT_RUN(interop_bodies);
    JT_RUN(corrupt_input);
    JT_RUN(decompression_bomb);
    JT_RUN(unsupported_type);
    JT_RUN(crc32c_vectors);
    JT_RUN(crc32c_paths_agree);
    JT_RUN(crc32c_iobuf_split);
    JT_RUN(checksum_checklist);
    return jt_finish();
}
