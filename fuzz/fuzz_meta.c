/* The hand-written RpcMeta decoder and packer against protobuf-c on any
 * bytes: when the decoder accepts an input, protobuf-c accepts it too and both
 * decodings pack to the same bytes; whatever protobuf-c decodes, the packer
 * (when it takes the meta) packs exactly as protobuf-c does. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/meta_codec.h"

typedef struct arena {
    uint8_t *buf;
    size_t used, cap;
} arena_t;

static void *arena_alloc(void *data, size_t n)
{
    arena_t *a = data;
    size_t at = (a->used + 15) & ~(size_t)15;
    if (at > a->cap || n > a->cap - at) return NULL;
    a->used = at + n;
    return a->buf + at;
}

static void arena_free(void *data, void *p)
{
    (void)data;
    (void)p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    static uint8_t room[1 << 16];
    arena_t a = {room, 0, sizeof room};
    ProtobufCAllocator alloc = {.alloc = arena_alloc, .free = arena_free, .allocator_data = &a};
    Brpc__Policy__RpcMeta *mine = jet__meta_unpack(data, len, &alloc);
    Brpc__Policy__RpcMeta *ref = brpc__policy__rpc_meta__unpack(NULL, len, data);
    if (mine) {
        if (!ref) abort(); /* accepted what protobuf-c rejects */
        size_t n1 = brpc__policy__rpc_meta__get_packed_size(mine);
        size_t n2 = brpc__policy__rpc_meta__get_packed_size(ref);
        if (n1 != n2) abort();
        uint8_t *b1 = malloc(n1 + 1), *b2 = malloc(n2 + 1);
        brpc__policy__rpc_meta__pack(mine, b1);
        brpc__policy__rpc_meta__pack(ref, b2);
        if (memcmp(b1, b2, n1) != 0) abort();
        /* What we decoded, we also pack exactly as protobuf-c does. */
        size_t n3 = jet__meta_packed_size(mine);
        if (n3 != 0) {
            uint8_t *b3 = malloc(n3);
            jet__meta_pack(mine, b3);
            if (n3 != n1 || memcmp(b3, b1, n1) != 0) abort();
            free(b3);
        }
        free(b1);
        free(b2);
    }
    if (ref) {
        /* The hand-written packer on whatever protobuf-c decoded. */
        size_t n = jet__meta_packed_size(ref);
        if (n != 0) {
            size_t nr = brpc__policy__rpc_meta__get_packed_size(ref);
            uint8_t *mine_b = malloc(n), *ref_b = malloc(nr + 1);
            jet__meta_pack(ref, mine_b);
            brpc__policy__rpc_meta__pack(ref, ref_b);
            if (n != nr || memcmp(mine_b, ref_b, n) != 0) abort();
            free(mine_b);
            free(ref_b);
        }
        brpc__policy__rpc_meta__free_unpacked(ref, NULL);
    }
    return 0;
}
