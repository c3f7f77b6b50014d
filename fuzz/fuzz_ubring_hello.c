/* The UBRing hello and ACK parsers on any bytes: no read past len, and a
 * hello they accept packs back to the bytes it came from. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ubring/ubring_hello.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    uint8_t *buf = malloc(len ? len : 1);
    memcpy(buf, data, len);
    jet_ubring_hello_t h;
    ssize_t n = jet__ubring_hello_unpack(buf, len, &h);
    if (n > (ssize_t)len) abort();
    if (n > 0) {
        if (n < JET_UBRING_HELLO_LEN || n > JET_UBRING_HELLO_MAX) abort();
        static uint8_t out[JET_UBRING_HELLO_MAX], again[JET_UBRING_HELLO_LEN];
        memset(out, 0, sizeof out);
        jet__ubring_hello_pack(&h, out);
        jet_ubring_hello_t h2;
        if (jet__ubring_hello_unpack(out, sizeof out, &h2) != n) abort();
        jet__ubring_hello_pack(&h2, again);
        if (memcmp(out, again, JET_UBRING_HELLO_LEN) != 0) abort();
        (void)jet__ubring_hello_versions_ok(&h);
    }
    if (len) (void)jet__ubring_hello_prefix(buf, len);
    if (len >= JET_UBRING_ACK_LEN) (void)jet__ubring_ack_unpack(buf);
    free(buf);
    return 0;
}
