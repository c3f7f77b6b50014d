/* Decompression of a peer's message bytes (snappy, gzip, zlib) on any input,
 * split over two blocks at a fuzzer-chosen point: no crash, no output past
 * max_out, nothing appended on failure, and what decompresses compresses and
 * decompresses back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/compress.h"

enum { MAX_OUT = 1 << 20 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 2) return 0;
    int type = 1 + data[0] % 3;
    size_t split = len > 2 ? data[1] % (len - 1) : 0;
    data += 2;
    len -= 2;
    if (split > len) split = len;
    jet_iobuf_t in, out, again, back;
    jet_iobuf_init(&in);
    jet_iobuf_init(&out);
    jet_iobuf_init(&again);
    jet_iobuf_init(&back);
    if (jet_iobuf_append(&in, data, split) < 0 || jet_iobuf_append(&in, data + split, len - split) < 0)
        abort();
    int rc = jet__decompress(type, &in, &out, MAX_OUT);
    if (rc != 0 && !jet_iobuf_empty(&out)) abort();
    if (jet_iobuf_len(&out) > MAX_OUT) abort();
    if (rc == 0) {
        size_t n = jet_iobuf_len(&out);
        uint8_t *a = malloc(n + 1), *b = malloc(n + 1);
        jet_iobuf_copy_to(&out, a, n, 0);
        if (jet__compress(type, &out, &again) != 0) abort();
        if (jet__decompress(type, &again, &back, MAX_OUT) != 0 || jet_iobuf_len(&back) != n) abort();
        jet_iobuf_copy_to(&back, b, n, 0);
        if (memcmp(a, b, n) != 0) abort();
        free(a);
        free(b);
    }
    jet_iobuf_fini(&in);
    jet_iobuf_fini(&out);
    jet_iobuf_fini(&again);
    jet_iobuf_fini(&back);
    return 0;
}
