#include "rpc/pb_nesting.h"

/* ---- what the descriptors allow ---- */

/* Types a walk keeps apart; a type graph larger than this is scanned. */
#define PB_TYPES_MAX 256
/* Sub-message levels that may exceed the limit (a cycle, a long chain). */
#define PB_DEEP (JET_PB_MAX_NESTING + 1)

enum { PB_ON_PATH = 1, PB_DONE = 2 };

typedef struct pb_type {
    const ProtobufCMessageDescriptor *desc;
    int state;
    int depth; /* PB_DONE: sub-message levels below this type, at most PB_DEEP */
} pb_type_t;

typedef struct pb_walk {
    pb_type_t t[PB_TYPES_MAX];
    unsigned n;
} pb_walk_t;

/* Deepest sub-message level below desc that its descriptors allow, PB_DEEP
 * for a type on a cycle or beyond the walk's room. Each type is walked once:
 * a type reached again reuses its depth (or, still on the path, is a cycle). */
static int pb_static_depth(pb_walk_t *w, const ProtobufCMessageDescriptor *desc, int level)
{
    if (level > JET_PB_MAX_NESTING) return PB_DEEP;
    for (unsigned i = 0; i < w->n; i++)
        if (w->t[i].desc == desc) return w->t[i].state == PB_ON_PATH ? PB_DEEP : w->t[i].depth;
    if (w->n == PB_TYPES_MAX) return PB_DEEP;
    unsigned self = w->n++;
    w->t[self] = (pb_type_t){.desc = desc, .state = PB_ON_PATH, .depth = 0};
    int deepest = 0;
    for (unsigned i = 0; i < desc->n_fields && deepest < PB_DEEP; i++) {
        const ProtobufCFieldDescriptor *f = &desc->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE) continue;
        int d = pb_static_depth(w, f->descriptor, level + 1);
        deepest = d >= PB_DEEP ? PB_DEEP : d + 1 > deepest ? d + 1 : deepest;
    }
    w->t[self].state = PB_DONE;
    w->t[self].depth = deepest;
    return deepest;
}

/* Per thread, by descriptor address: the answers of jet__pb_nesting_may_exceed. */
#define PB_CACHE 16

static __thread struct {
    const ProtobufCMessageDescriptor *desc;
    bool scan;
} pb_cache[PB_CACHE];

bool jet__pb_nesting_may_exceed(const ProtobufCMessageDescriptor *desc)
{
    unsigned h = (unsigned)(((uintptr_t)desc >> 4) % PB_CACHE);
    if (pb_cache[h].desc == desc) return pb_cache[h].scan;
    pb_walk_t w;
    w.n = 0;
    bool scan = pb_static_depth(&w, desc, 0) > JET_PB_MAX_NESTING;
    pb_cache[h].desc = desc;
    pb_cache[h].scan = scan;
    return scan;
}

/* ---- the bytes ---- */

/* A varint of at most 10 bytes; false when it is longer or cut short. */
static bool pb_varint(const uint8_t **pp, const uint8_t *end, uint64_t *v_p)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70 && p < end; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *v_p = v;
            return true;
        }
    }
    return false;
}

/* False when a sub-message below level is nested too deep. A malformation
 * sets *stop and ends the scan with true: protobuf-c checks every level's
 * tags and lengths before it decodes that level's sub-messages, so it
 * refuses the input no deeper than where the scan stopped. */
static bool pb_scan(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                    int level, bool *stop)
{
    while (p < end) {
        uint64_t key, v;
        if (!pb_varint(&p, end, &key)) break;
        switch (key & 7) {
        case PROTOBUF_C_WIRE_TYPE_VARINT:
            if (!pb_varint(&p, end, &v)) goto malformed;
            continue;
        case PROTOBUF_C_WIRE_TYPE_64BIT:
            if (end - p < 8) goto malformed;
            p += 8;
            continue;
        case PROTOBUF_C_WIRE_TYPE_32BIT:
            if (end - p < 4) goto malformed;
            p += 4;
            continue;
        case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED: {
            if (!pb_varint(&p, end, &v) || v > (uint64_t)(end - p)) goto malformed;
            const ProtobufCFieldDescriptor *f =
                key >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
                    : NULL;
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (level + 1 > JET_PB_MAX_NESTING) return false;
                if (!pb_scan(f->descriptor, p, p + v, level + 1, stop)) return false;
                if (*stop) return true;
            }
            p += v;
            continue;
        }
        default: /* groups and unknown wire types: protobuf-c refuses them */
            goto malformed;
        }
    }
    if (p == end) return true;
malformed:
    *stop = true;
    return true;
}

bool jet__pb_nesting_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t n)
{
    if (!jet__pb_nesting_may_exceed(desc)) return true;
    bool stop = false;
    return pb_scan(desc, p, p + n, 0, &stop);
}
