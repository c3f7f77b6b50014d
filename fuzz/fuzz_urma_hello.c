/* The URMA hello parser (v2 binary, v3 protobuf) on any bytes: it never reads
 * past len, never reports more used than given, and a hello it accepts packs
 * back into bytes it accepts again as the same hello. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "urma/urma_handshake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    /* A copy of exactly len bytes: ASan sees any read past the input. */
    uint8_t *buf = malloc(len ? len : 1);
    memcpy(buf, data, len);
    jet_urma_hello_t h;
    size_t used = 0;
    jet_urma_hello_result_t r = jet__urma_hello_parse(buf, len, &h, &used);
    if ((r == JET_URMA_HELLO_OK || r == JET_URMA_HELLO_DECLINED) && (used == 0 || used > len))
        abort();
    if (r == JET_URMA_HELLO_OK) {
        uint8_t out[8192];
        int n = jet__urma_hello_pack(&h, out, sizeof out);
        if (n > 0) {
            jet_urma_hello_t h2;
            size_t used2 = 0;
            if (jet__urma_hello_parse(out, (size_t)n, &h2, &used2) != JET_URMA_HELLO_OK ||
                used2 != (size_t)n)
                abort();
            if (jet__urma_hello_pack(&h2, out + 4096, 4096) != n || memcmp(out, out + 4096, (size_t)n))
                abort();
        }
    }
    (void)jet__urma_hello_prefix(buf, len ? len : 0);
    free(buf);
    return 0;
}
