/* The nesting guard (rpc/pb_nesting.h) on any bytes read as jettest.Node, a
 * type that contains itself: whatever the guard lets through, protobuf-c
 * decodes (or refuses) without recursing deeper than the limit. The depth is
 * read off the stack: the allocator records the lowest stack address it is
 * called from, and a decode may go at most a little below what a message
 * nested exactly JET_PB_MAX_NESTING deep takes (measured at start-up). */
#include <stdint.h>
#include <stdlib.h>

#include "nest.pb-c.h"
#include "rpc/pb_nesting.h"

static uintptr_t g_low;

static __attribute__((noinline)) void *track_alloc(void *data, size_t n)
{
    (void)data;
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (sp < g_low) g_low = sp;
    return malloc(n);
}

static void track_free(void *data, void *p)
{
    (void)data;
    free(p);
}

static ProtobufCAllocator g_alloc = {.alloc = track_alloc, .free = track_free};

/* Stack bytes below the caller's frame that decoding p[0..n) took. */
static __attribute__((noinline)) size_t decode_depth(const uint8_t *p, size_t n)
{
    uintptr_t top = (uintptr_t)__builtin_frame_address(0);
    g_low = top;
    ProtobufCMessage *m = protobuf_c_message_unpack(&jettest__node__descriptor, &g_alloc, n, p);
    if (m) protobuf_c_message_free_unpacked(m, &g_alloc);
    return (size_t)(top - g_low);
}

/* A Node chain `depth` levels deep (each level: tag 0x0a and a length). */
static uint8_t *chain(size_t depth, size_t *len_p)
{
    size_t cap = 8 + depth * 6, pos = cap;
    uint8_t *b = malloc(cap);
    if (!b) abort();
    b[--pos] = 0x01;
    b[--pos] = 0x18; /* value = 1 */
    for (size_t i = 0; i < depth; i++) {
        size_t len = cap - pos;
        uint8_t v[5];
        size_t k = 0;
        do {
            v[k++] = (uint8_t)(len & 0x7f) | (len > 0x7f ? 0x80 : 0);
            len >>= 7;
        } while (len);
        pos -= k;
        for (size_t j = 0; j < k; j++)
            b[pos + j] = v[j];
        b[--pos] = 0x0a;
    }
    *len_p = cap - pos;
    uint8_t *out = malloc(*len_p);
    if (!out) abort();
    for (size_t i = 0; i < *len_p; i++)
        out[i] = b[pos + i];
    free(b);
    return out;
}

static size_t g_allowed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (!g_allowed) {
        size_t n;
        uint8_t *b = chain(JET_PB_MAX_NESTING, &n);
        if (!jet__pb_nesting_ok(&jettest__node__descriptor, b, n)) abort();
        /* Eight levels of slack for frames that differ by path. */
        g_allowed = decode_depth(b, n) * (JET_PB_MAX_NESTING + 8) / JET_PB_MAX_NESTING;
        free(b);
        b = chain(JET_PB_MAX_NESTING + 1, &n);
        if (jet__pb_nesting_ok(&jettest__node__descriptor, b, n)) abort();
        free(b);
    }
    if (!jet__pb_nesting_ok(&jettest__node__descriptor, data, len)) return 0;
    if (decode_depth(data, len) > g_allowed) abort(); /* recursed past the limit */
    return 0;
}
