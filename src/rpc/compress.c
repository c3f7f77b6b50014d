/* Message compression and CRC32C (see compress.h for the contract). */
#include "rpc/compress.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <snappy-c.h>
#include <zlib.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

enum {
    COMPRESS_NONE = 0,
    COMPRESS_SNAPPY = 1,
    COMPRESS_GZIP = 2,
    COMPRESS_ZLIB = 3,
};

#define COMPRESS_CHUNK (16 * 1024)

bool jet__compress_supported(int type)
{
    return type >= COMPRESS_NONE && type <= COMPRESS_ZLIB;
}

const char *jet__compress_name(int type)
{
    switch (type) {
    case COMPRESS_NONE:
        return "none";
    case COMPRESS_SNAPPY:
        return "snappy";
    case COMPRESS_GZIP:
        return "gzip";
    case COMPRESS_ZLIB:
        return "zlib";
    default:
        return "unknown";
    }
}

static void compress_free_cb(void *data, void *arg)
{
    (void)arg;
    free(data);
}

/* The whole of in as one contiguous piece: in place when it is one reference,
 * else copied into *heap_p (which the caller frees). NULL on -ENOMEM. */
static const void *compress_flatten(const jet_iobuf_t *in, void **heap_p)
{
    size_t n = jet_iobuf_len(in);
    *heap_p = NULL;
    if (jet_iobuf_nref(in) == 1) {
        size_t len;
        return jet_iobuf_ref_data(in, 0, &len);
    }
    void *tmp = malloc(n ? n : 1);
    if (!tmp) return NULL;
    jet_iobuf_copy_to(in, tmp, n, 0);
    *heap_p = tmp;
    return tmp;
}

/* ---- snappy ---- */

static int compress_snappy(const jet_iobuf_t *in, jet_iobuf_t *out)
{
    void *heap;
    size_t n = jet_iobuf_len(in);
    const char *src = compress_flatten(in, &heap);
    if (!src) return -ENOMEM;
    size_t cap = snappy_max_compressed_length(n);
    char *dst = malloc(cap);
    int rc = -ENOMEM;
    if (!dst) goto out_free_heap;
    size_t dlen = cap;
    if (snappy_compress(src, n, dst, &dlen) != SNAPPY_OK) {
        rc = -ENOMEM; /* only fails on a short output buffer, which cap rules out */
        goto out_free_dst;
    }
    /* Copied into pool blocks rather than wrapped: outgoing bytes must live in
     * registered memory when a transport such as URMA sends them in place. */
    rc = jet_iobuf_append(out, dst, dlen);
out_free_dst:
    free(dst);
out_free_heap:
    free(heap);
    return rc;
}

static int decompress_snappy(const jet_iobuf_t *in, jet_iobuf_t *out, size_t max_out)
{
    void *heap;
    size_t n = jet_iobuf_len(in);
    const char *src = compress_flatten(in, &heap);
    if (!src) return -ENOMEM;
    size_t ulen;
    int rc;
    if (snappy_uncompressed_length(src, n, &ulen) != SNAPPY_OK) {
        rc = -EBADMSG;
        goto out_free_heap;
    }
    /* The length is the stream's claim, checked before anything is sized
     * from it: a bomb stops here. */
    if (ulen > max_out) {
        rc = -EMSGSIZE;
        goto out_free_heap;
    }
    /* No snappy element expands by more than 64/3 (a 3-byte copy of 64
     * bytes): a larger claim is a lie, refused before it is allocated. */
    if (ulen / 22 > n) {
        rc = -EBADMSG;
        goto out_free_heap;
    }
    char *dst = malloc(ulen ? ulen : 1);
    if (!dst) {
        rc = -ENOMEM;
        goto out_free_heap;
    }
    size_t dlen = ulen;
    if (snappy_uncompress(src, n, dst, &dlen) != SNAPPY_OK || dlen != ulen) {
        free(dst);
        rc = -EBADMSG;
        goto out_free_heap;
    }
    /* Incoming bytes are wrapped, not copied: one contiguous block lets the
     * protobuf decoder read the message in place. */
    rc = ulen ? jet_iobuf_append_user(out, dst, ulen, compress_free_cb, NULL) : (free(dst), 0);
out_free_heap:
    free(heap);
    return rc;
}

/* ---- gzip / zlib ---- */

static int compress_window_bits(int type)
{
    return type == COMPRESS_GZIP ? 15 + 16 : 15;
}

static int compress_deflate(int type, const jet_iobuf_t *in, jet_iobuf_t *out)
{
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, compress_window_bits(type), 8,
                     Z_DEFAULT_STRATEGY) != Z_OK)
        return -ENOMEM;

    size_t orig_len = jet_iobuf_len(out);
    uint8_t chunk[COMPRESS_CHUNK];
    uint32_t nref = jet_iobuf_nref(in);
    int rc = 0;
    for (uint32_t i = 0; i <= nref; i++) {
        int flush = i == nref ? Z_FINISH : Z_NO_FLUSH;
        if (i < nref) {
            size_t len;
            zs.next_in = (Bytef *)jet_iobuf_ref_data(in, i, &len);
            zs.avail_in = (uInt)len; /* references are at most 4 GiB - 1 */
        } else {
            zs.next_in = NULL;
            zs.avail_in = 0;
        }
        int zrc;
        do {
            zs.next_out = chunk;
            zs.avail_out = sizeof(chunk);
            zrc = deflate(&zs, flush);
            if (zrc == Z_STREAM_ERROR) {
                rc = -ENOMEM;
                goto err_end;
            }
            size_t produced = sizeof(chunk) - zs.avail_out;
            if (produced) {
                rc = jet_iobuf_append(out, chunk, produced);
                if (rc < 0) goto err_end;
            }
        } while (zs.avail_out == 0 || (flush == Z_FINISH && zrc != Z_STREAM_END));
    }
    deflateEnd(&zs);
    return 0;

err_end:
    deflateEnd(&zs);
    jet_iobuf_pop_back(out, jet_iobuf_len(out) - orig_len);
    return rc;
}

/* Output of inflate: one heap buffer grown by doubling and never beyond
 * max_out, so the message ends up contiguous (the decoder reads it in place)
 * and a bomb costs at most max_out bytes. */
typedef struct inflate_out {
    uint8_t *buf;
    size_t len;
    size_t cap;
    size_t first; /* size of the first allocation */
    size_t max;
} inflate_out_t;

static int inflate_out_grow(inflate_out_t *o)
{
    size_t cap = o->cap ? o->cap * 2 : o->first;
    if (cap < o->cap || cap > o->max) cap = o->max;
    uint8_t *p = realloc(o->buf, cap);
    if (!p) return -ENOMEM;
    o->buf = p;
    o->cap = cap;
    return 0;
}

/* One inflate call with room for output. At the limit the room is a single
 * scratch byte: any output there means the message exceeds max_out. */
static int inflate_step(z_stream *zs, inflate_out_t *o, int *ended_p)
{
    uint8_t probe;
    int at_limit = 0;
    if (o->len == o->cap) {
        if (o->cap >= o->max) {
            at_limit = 1;
        } else {
            int rc = inflate_out_grow(o);
            if (rc < 0) return rc;
        }
    }
    if (at_limit) {
        zs->next_out = &probe;
        zs->avail_out = 1;
    } else {
        size_t room = o->cap - o->len;
        zs->next_out = o->buf + o->len;
        zs->avail_out = room > UINT32_MAX ? UINT32_MAX : (uInt)room;
    }
    uInt before = zs->avail_out;
    int zrc = inflate(zs, Z_NO_FLUSH);
    size_t produced = before - zs->avail_out;
    if (at_limit && produced) return -EMSGSIZE;
    if (!at_limit) o->len += produced;
    switch (zrc) {
    case Z_STREAM_END:
        *ended_p = 1;
        return 0;
    case Z_OK:
    case Z_BUF_ERROR:
        return 0; /* the caller notices a lack of progress */
    case Z_MEM_ERROR:
        return -ENOMEM;
    default:
        return -EBADMSG; /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR */
    }
}

static int decompress_inflate(int type, const jet_iobuf_t *in, jet_iobuf_t *out, size_t max_out)
{
    size_t in_len = jet_iobuf_len(in);
    if (in_len == 0) return -EBADMSG; /* not even a header */
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, compress_window_bits(type)) != Z_OK) return -ENOMEM;

    /* Protobuf messages rarely shrink more than 4x; starting there saves most
     * regrowth copies. */
    inflate_out_t o = {.max = max_out};
    o.first = in_len > SIZE_MAX / 4 ? SIZE_MAX : in_len * 4;
    if (o.first < 4096) o.first = 4096;
    int rc = 0;
    int ended = 0;
    uint32_t nref = jet_iobuf_nref(in);
    for (uint32_t i = 0; i < nref; i++) {
        size_t len;
        zs.next_in = (Bytef *)jet_iobuf_ref_data(in, i, &len);
        zs.avail_in = (uInt)len; /* a reference holds less than 4 GiB */
        while (zs.avail_in > 0) {
            if (ended) {
                /* Concatenated members form one message, as protobuf's
                 * GzipInputStream (brpc's decoder) reads them. */
                if (inflateReset(&zs) != Z_OK) {
                    rc = -EBADMSG;
                    goto err_end;
                }
                ended = 0;
            }
            uInt in_before = zs.avail_in;
            size_t out_before = o.len;
            rc = inflate_step(&zs, &o, &ended);
            if (rc < 0) goto err_end;
            if (!ended && zs.avail_in == in_before && o.len == out_before) {
                rc = -EBADMSG;
                goto err_end;
            }
        }
    }
    /* Input is exhausted; inflate may still hold output it had no room for. */
    while (!ended) {
        size_t out_before = o.len;
        rc = inflate_step(&zs, &o, &ended);
        if (rc < 0) goto err_end;
        if (!ended && o.len == out_before) {
            rc = -EBADMSG; /* truncated stream */
            goto err_end;
        }
    }
    inflateEnd(&zs);
    if (o.len == 0) {
        free(o.buf);
        return 0;
    }
    if (o.cap - o.len > 4096 && o.cap - o.len > o.len / 4) {
        uint8_t *p = realloc(o.buf, o.len);
        if (p) o.buf = p;
    }
    /* Incoming bytes are wrapped, not copied, for the same reason as snappy's. */
    return jet_iobuf_append_user(out, o.buf, o.len, compress_free_cb, NULL);

err_end:
    inflateEnd(&zs);
    free(o.buf);
    return rc;
}

/* ---- dispatch ---- */

int jet__compress(int type, const jet_iobuf_t *in, jet_iobuf_t *out)
{
    switch (type) {
    case COMPRESS_NONE:
        return jet_iobuf_append_iobuf(out, in);
    case COMPRESS_SNAPPY:
        return compress_snappy(in, out);
    case COMPRESS_GZIP:
    case COMPRESS_ZLIB:
        return compress_deflate(type, in, out);
    default:
        return -EINVAL;
    }
}

int jet__decompress(int type, const jet_iobuf_t *in, jet_iobuf_t *out, size_t max_out)
{
    switch (type) {
    case COMPRESS_NONE:
        if (jet_iobuf_len(in) > max_out) return -EMSGSIZE;
        return jet_iobuf_append_iobuf(out, in);
    case COMPRESS_SNAPPY:
        return decompress_snappy(in, out, max_out);
    case COMPRESS_GZIP:
    case COMPRESS_ZLIB:
        return decompress_inflate(type, in, out, max_out);
    default:
        return -EINVAL;
    }
}

/* ---- CRC32C ----
 *
 * Software: slicing-by-8 over tables built once. x86-64 with SSE4.2: the
 * crc32 instruction, 8 bytes at a time. The choice is made on first use and
 * kept in a function pointer, so later calls pay one indirect call. */

#define CRC32C_POLY 0x82f63b78u /* reflected Castagnoli */

typedef uint32_t (*crc32c_fn_t)(uint32_t crc, const uint8_t *p, size_t n);

static uint32_t crc32c_table[8][256];

static void crc32c_build_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1)));
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc32c_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc32c_table[0][c & 0xff] ^ (c >> 8);
            crc32c_table[t][i] = c;
        }
    }
}

/* Raw (un-inverted) update over n bytes. */
static uint32_t crc32c_sw_raw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = crc32c_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        uint32_t lo = (uint32_t)w ^ c;
        uint32_t hi = (uint32_t)(w >> 32);
        c = crc32c_table[7][lo & 0xff] ^ crc32c_table[6][(lo >> 8) & 0xff] ^
            crc32c_table[5][(lo >> 16) & 0xff] ^ crc32c_table[4][lo >> 24] ^
            crc32c_table[3][hi & 0xff] ^ crc32c_table[2][(hi >> 8) & 0xff] ^
            crc32c_table[1][(hi >> 16) & 0xff] ^ crc32c_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = crc32c_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw_raw(uint32_t c, const uint8_t *p,
                                                                size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8(c, *p++);
        n--;
    }
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT;
static crc32c_fn_t crc32c_selected;

static void crc32c_select(void)
{
    crc32c_build_tables();
    crc32c_selected = crc32c_sw_raw;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) crc32c_selected = crc32c_hw_raw;
#endif
}

static uint32_t crc32c_resolve(uint32_t c, const uint8_t *p, size_t n);
static _Atomic(crc32c_fn_t) crc32c_impl = crc32c_resolve;

static uint32_t crc32c_resolve(uint32_t c, const uint8_t *p, size_t n)
{
    pthread_once(&crc32c_once, crc32c_select);
    atomic_store_explicit(&crc32c_impl, crc32c_selected, memory_order_release);
    return crc32c_selected(c, p, n);
}

uint32_t jet__crc32c(uint32_t crc, const void *data, size_t n)
{
    crc32c_fn_t fn = atomic_load_explicit(&crc32c_impl, memory_order_acquire);
    return ~fn(~crc, data, n);
}

/* The portable path, whatever the CPU: for tests that compare both paths
 * (declared where it is used; see the report on compress.h). */
uint32_t jet__crc32c_sw(uint32_t crc, const void *data, size_t n);
uint32_t jet__crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc32c_once, crc32c_select);
    return ~crc32c_sw_raw(~crc, data, n);
}

uint32_t jet__crc32c_iobuf(uint32_t crc, const jet_iobuf_t *buf)
{
    crc32c_fn_t fn = atomic_load_explicit(&crc32c_impl, memory_order_acquire);
    uint32_t c = ~crc;
    uint32_t nref = jet_iobuf_nref(buf);
    for (uint32_t i = 0; i < nref; i++) {
        size_t len;
        const uint8_t *p = jet_iobuf_ref_data(buf, i, &len);
        c = fn(c, p, len);
    }
    return ~c;
}
