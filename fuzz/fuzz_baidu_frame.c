/* The baidu_std frame cutter on any bytes, delivered in three blocks split at
 * fuzzer-chosen points: frames are cut until it stops, it never consumes more
 * than it holds, each frame's parts add up to its body, and peek agrees with
 * cut. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 3) return 0;
    uint32_t max_body = data[0] & 1 ? 64u << 20 : 4096;
    size_t s1 = data[1], s2 = data[2];
    data += 3;
    len -= 3;
    if (s1 > len) s1 = len;
    if (s2 > len - s1) s2 = len - s1;
    jet_iobuf_t in;
    jet_iobuf_init(&in);
    if (jet_iobuf_append(&in, data, s1) < 0 || jet_iobuf_append(&in, data + s1, s2) < 0 ||
        jet_iobuf_append(&in, data + s1 + s2, len - s1 - s2) < 0)
        abort();
    for (;;) {
        size_t before = jet_iobuf_len(&in);
        uint32_t body = 0, meta = 0;
        jet_parse_result_t peek = jet__baidu_peek(&in, max_body, &body, &meta);
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int bad_att = 0;
        jet_parse_result_t r = jet__baidu_cut(&in, max_body, &f, &bad_att);
        size_t after = jet_iobuf_len(&in);
        if (after > before) abort();
        if (peek == JET_PARSE_NEED_MORE || peek == JET_PARSE_NOT_MINE || peek == JET_PARSE_TOO_BIG) {
            if (r != peek || after != before) abort();
        } else if (before - after != 12 + (size_t)body) {
            abort(); /* a cut frame, a bad meta or meta_size > body_size: the whole frame goes */
        }
        if (r == JET_PARSE_OK) {
            if (!f.meta) abort();
            size_t parts = jet_iobuf_len(&f.body) + jet_iobuf_len(&f.attachment);
            if (parts + meta != body) abort();
        }
        jet__baidu_frame_fini(&f);
        if (r != JET_PARSE_OK && r != JET_PARSE_BAD_META && r != JET_PARSE_META_SIZE) break;
    }
    jet_iobuf_fini(&in);
    return 0;
}
