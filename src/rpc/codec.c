/* baidu_std framing (see codec.h for the contract). */
#include "rpc/codec.h"
#include "rpc/meta_codec.h"
#include "rpc/pb_nesting.h"

#include "base/pool.h"

#include <errno.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of header + meta assembled on the stack; larger metas use the heap.
 * brpc's own metas are 20..100 bytes, so this covers every ordinary frame. */
#define CODEC_STACK_META 512

static inline uint32_t codec_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static inline void codec_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* True when the first n bytes of buf lie in its first reference, so that
 * jet_iobuf_fetch returns them in place and needs no scratch memory. */
static int codec_front_holds(const jet_iobuf_t *buf, size_t n)
{
    size_t len0 = 0;
    if (jet_iobuf_nref(buf) == 0) return 0;
    jet_iobuf_ref_data(buf, 0, &len0);
    return len0 >= n;
}

/* ---- arena for decoded metas ----
 *
 * protobuf-c allocates the RpcMeta, each sub-message, each string and array
 * separately; with the default allocator that is 4-8 mallocs per frame. The
 * arena serves them all from one chunk sized from meta_size (overflow goes to
 * malloc, linked so it is freed with the chunk) and frees nothing one by one:
 * frame_fini drops the whole arena. The chunk of an ordinary meta (up to
 * JET_FRAME_META_INLINE bytes) is the frame's own meta_room. Every allocation carries the arena's
 * address just before it, so frame_fini finds the arena from f->meta alone
 * and jet_baidu_frame_t needs no extra field. Consequently a frame's meta must
 * never be freed with protobuf_c_message_free_unpacked. */

#define ARENA_HDR 16 /* keeps max_align_t alignment after the prefix */

typedef struct arena_big {
    struct arena_big *next;
    size_t pad_;
    alignas(16) unsigned char data[];
} arena_big_t;

typedef struct arena {
    arena_big_t *big;
    size_t used;
    size_t cap;
    size_t in_frame;   /* lives in a frame's meta_room: nothing to give back */
    size_t spill_left; /* bytes the overflow may still take (codec.h's bound) */
    alignas(16) unsigned char data[];
} arena_t;

_Static_assert(offsetof(arena_t, data) % ARENA_HDR == 0, "arena data alignment");
_Static_assert(offsetof(arena_big_t, data) % ARENA_HDR == 0, "arena big alignment");

/* Arenas of the usual size come from a pool with thread-local caches: a loop
 * cuts and finishes its frames on its own thread, so they never reach malloc.
 * Only pooled arenas have exactly this capacity. */
#define ARENA_POOLED_CAP 1024
static jet_pool_t arena_pool = JET_POOL_INIT("meta_arena", sizeof(arena_t) + ARENA_POOLED_CAP);

_Static_assert(sizeof(arena_t) + 512 + JET_FRAME_META_INLINE * 3 / 2 <= JET_FRAME_META_ROOM,
              "a frame's meta_room holds the arena of an inline meta");

/* The arena of a frame's meta: in the frame itself for an ordinary meta. */
static arena_t *arena_in_frame(jet_baidu_frame_t *f)
{
    arena_t *a = (arena_t *)f->meta_room;
    a->big = NULL;
    a->used = 0;
    a->cap = JET_FRAME_META_ROOM - sizeof(arena_t);
    a->in_frame = 1;
    return a;
}

static arena_t *arena_create(size_t cap)
{
    arena_t *a;
    if (cap <= ARENA_POOLED_CAP) {
        cap = ARENA_POOLED_CAP;
        a = jet__pool_get(&arena_pool);
    } else {
        a = malloc(sizeof(*a) + cap);
    }
    if (!a) return NULL;
    a->big = NULL;
    a->used = 0;
    a->cap = cap;
    a->in_frame = 0;
    return a;
}

static void arena_destroy(arena_t *a)
{
    arena_big_t *b = a->big;
    while (b) {
        arena_big_t *next = b->next;
        free(b);
        b = next;
    }
    if (a->in_frame)
        a->big = NULL;
    else if (a->cap == ARENA_POOLED_CAP)
        jet__pool_put(&arena_pool, a);
    else
        free(a);
}

static void *arena_alloc(void *data, size_t size)
{
    arena_t *a = data;
    unsigned char *p;
    if (size > SIZE_MAX / 2) return NULL;
    size_t need = ARENA_HDR + ((size + 15) & ~(size_t)15);
    if (need <= a->cap - a->used) {
        p = a->data + a->used;
        a->used += need;
    } else {
        if (sizeof(arena_big_t) + need > a->spill_left) return NULL; /* the unpack fails */
        a->spill_left -= sizeof(arena_big_t) + need;
        arena_big_t *b = malloc(sizeof(*b) + need);
        if (!b) return NULL;
        b->next = a->big;
        a->big = b;
        p = b->data;
    }
    memcpy(p, &a, sizeof(a));
    return p + ARENA_HDR;
}

static void arena_free(void *data, void *ptr)
{
    (void)data;
    (void)ptr; /* released with the whole arena */
}

static arena_t *arena_of(const void *ptr)
{
    arena_t *a;
    memcpy(&a, (const unsigned char *)ptr - ARENA_HDR, sizeof(a));
    return a;
}

/* Room for the decoded meta: the structs (RpcMeta ~150 B, request meta ~100 B
 * plus prefixes) and strings that are at most meta_size bytes in total. Unknown
 * fields and repeated entries can expand more; they spill to malloc. */
static size_t arena_size_for(uint32_t meta_size)
{
    size_t cap = 512 + (size_t)meta_size + meta_size / 2;
    return cap > 65536 ? 65536 : cap;
}

static void *msg_arena_alloc(void *data, size_t size)
{
    jet_msg_arena_t *a = data;
    size_t need = (size + 15) & ~(size_t)15;
    /* A zero-byte piece from a full arena would point just past buf, and
     * msg_arena_free would hand it to free(): such pieces go to malloc. */
    if (size > 0 && size <= sizeof a->buf && need <= sizeof a->buf - a->used) {
        void *p = a->buf + a->used;
        a->used += need;
        return p;
    }
    void *p = malloc(size);
    if (p) a->spilled++;
    return p;
}

static void msg_arena_free(void *data, void *ptr)
{
    jet_msg_arena_t *a = data;
    unsigned char *p = ptr;
    if (p >= a->buf && p < a->buf + sizeof a->buf) return; /* reclaimed by the reset */
    if (ptr) a->spilled--;
    free(ptr);
}

void jet__msg_arena_init(jet_msg_arena_t *a)
{
    a->pa = (ProtobufCAllocator){.alloc = msg_arena_alloc, .free = msg_arena_free, .allocator_data = a};
    a->used = 0;
    a->spilled = 0;
}

/* ---- frames ---- */

void jet__baidu_frame_init(jet_baidu_frame_t *f)
{
    f->meta = NULL;
    jet_iobuf_init(&f->body);
    jet_iobuf_init(&f->attachment);
}

void jet__baidu_frame_fini(jet_baidu_frame_t *f)
{
    if (f->meta) {
        arena_destroy(arena_of(f->meta));
        f->meta = NULL;
    }
    jet_iobuf_fini(&f->body);
    jet_iobuf_fini(&f->attachment);
}

jet_parse_result_t jet__baidu_peek(const jet_iobuf_t *in, uint32_t max_body_size,
                                   uint32_t *body_size_p, uint32_t *meta_size_p)
{
    uint8_t copy[JET_BAIDU_HEADER_SIZE];
    const uint8_t *hdr = copy;
    size_t n = jet_iobuf_len(in);
    size_t have = n < sizeof(copy) ? n : sizeof(copy);
    if (have == sizeof(copy) && codec_front_holds(in, sizeof(copy))) {
        size_t len0 = 0;
        hdr = jet_iobuf_ref_data(in, 0, &len0); /* in place: the usual case */
    } else {
        jet_iobuf_copy_to(in, copy, have, 0);
    }

    /* Compare only the magic bytes present, as brpc does: a prefix of PRPC
     * must wait, anything else is for another protocol. */
    size_t nmagic = have < 4 ? have : 4;
    if (memcmp(hdr, JET_BAIDU_MAGIC, nmagic) != 0) return JET_PARSE_NOT_MINE;
    if (have < sizeof(copy)) return JET_PARSE_NEED_MORE;

    uint32_t body_size = codec_get_be32(hdr + 4);
    uint32_t meta_size = codec_get_be32(hdr + 8);
    if (body_size > max_body_size) return JET_PARSE_TOO_BIG;
    *body_size_p = body_size;
    *meta_size_p = meta_size;
    if (n - sizeof(copy) < body_size) return JET_PARSE_NEED_MORE;
    return JET_PARSE_OK;
}

/* Decodes header + meta from the front of in; NULL if it does not decode
 * (or on out of memory: the frame is dropped either way). */
static Brpc__Policy__RpcMeta *codec_decode_meta(const jet_iobuf_t *in, uint32_t meta_size,
                                                jet_baidu_frame_t *f)
{
    uint8_t stack[CODEC_STACK_META];
    size_t n = JET_BAIDU_HEADER_SIZE + (size_t)meta_size;
    uint8_t *tmp = stack;
    if (n > sizeof(stack) && !codec_front_holds(in, n)) {
        tmp = malloc(n);
        if (!tmp) return NULL;
    }
    Brpc__Policy__RpcMeta *meta = NULL;
    const uint8_t *p = jet_iobuf_fetch(in, tmp, n);
    arena_t *a = !p                                 ? NULL
                 : meta_size <= JET_FRAME_META_INLINE ? arena_in_frame(f)
                                                      : arena_create(arena_size_for(meta_size));
    if (!a) goto out_free_tmp;
    a->spill_left = 65536 + (size_t)meta_size * JET_BAIDU_META_EXPANSION;

    ProtobufCAllocator alloc = {.alloc = arena_alloc, .free = arena_free, .allocator_data = a};
    /* The usual meta first; protobuf-c for what the fast path declines. */
    meta = jet__meta_unpack(p + JET_BAIDU_HEADER_SIZE, meta_size, &alloc);
    if (!meta)
        meta = (Brpc__Policy__RpcMeta *)protobuf_c_message_unpack(
            &brpc__policy__rpc_meta__descriptor, &alloc, meta_size, p + JET_BAIDU_HEADER_SIZE);
    if (!meta) arena_destroy(a);
out_free_tmp:
    if (tmp != stack) free(tmp);
    return meta;
}

jet_parse_result_t jet__baidu_cut(jet_iobuf_t *in, uint32_t max_body_size, jet_baidu_frame_t *f,
                                  int *bad_attachment_p)
{
    uint32_t body_size = 0, meta_size = 0;
    *bad_attachment_p = 0;
    jet_parse_result_t r = jet__baidu_peek(in, max_body_size, &body_size, &meta_size);
    if (r != JET_PARSE_OK) return r;

    size_t frame_len = JET_BAIDU_HEADER_SIZE + (size_t)body_size;
    if (meta_size > body_size) {
        jet_iobuf_pop_front(in, frame_len);
        return JET_PARSE_META_SIZE;
    }
    Brpc__Policy__RpcMeta *meta =
        meta_size <= JET_BAIDU_META_MAX ? codec_decode_meta(in, meta_size, f) : NULL;
    if (!meta) {
        jet_iobuf_pop_front(in, frame_len);
        return JET_PARSE_BAD_META;
    }
    jet_iobuf_pop_front(in, JET_BAIDU_HEADER_SIZE + (size_t)meta_size);

    size_t payload = body_size - meta_size;
    size_t att = 0;
    if (meta->has_attachment_size) {
        if (meta->attachment_size < 0 || (size_t)meta->attachment_size > payload)
            *bad_attachment_p = 1;
        else
            att = (size_t)meta->attachment_size;
    }
    /* cutn only fails on -ENOMEM growing a reference array; the frame is then
     * dropped whole, like an undecodable one, so in stays at a frame boundary. */
    size_t left = payload;
    if (jet_iobuf_cutn(in, &f->body, payload - att) < 0) goto err_drop;
    left = att;
    if (att && jet_iobuf_cutn(in, &f->attachment, att) < 0) goto err_drop;
    f->meta = meta;
    return JET_PARSE_OK;

err_drop:
    jet_iobuf_pop_front(in, left);
    jet_iobuf_clear(&f->body);
    arena_destroy(arena_of(meta));
    *bad_attachment_p = 0;
    return JET_PARSE_BAD_META;
}

/* ---- packing ---- */

/* A ProtobufCBuffer that gathers protobuf-c's many small appends (tags,
 * varints) in a stack buffer and hands the iobuf large pieces; big fields
 * (strings, bytes) go to the iobuf directly. */
typedef struct codec_sink {
    ProtobufCBuffer base;
    jet_iobuf_t *out;
    int err;
    size_t n;
    uint8_t buf[256];
} codec_sink_t;

static void codec_sink_flush(codec_sink_t *s)
{
    if (s->n && !s->err) s->err = jet_iobuf_append(s->out, s->buf, s->n);
    s->n = 0;
}

static void codec_sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    codec_sink_t *s = (codec_sink_t *)b;
    /* protobuf-c hands empty bytes fields over as (0, NULL). */
    if (s->err || len == 0) return;
    if (len <= sizeof(s->buf) - s->n) {
        memcpy(s->buf + s->n, data, len);
        s->n += len;
        return;
    }
    codec_sink_flush(s);
    if (len < sizeof(s->buf)) {
        memcpy(s->buf, data, len);
        s->n = len;
    } else if (!s->err) {
        s->err = jet_iobuf_append(s->out, data, len);
    }
}

/* Packs msg at the end of out; on failure out is restored to orig_len. */
static int codec_pack_sink(const ProtobufCMessage *msg, jet_iobuf_t *out, size_t orig_len)
{
    codec_sink_t s = {.base = {.append = codec_sink_append}, .out = out};
    protobuf_c_message_pack_to_buffer(msg, &s.base);
    codec_sink_flush(&s);
    if (s.err) {
        jet_iobuf_pop_back(out, jet_iobuf_len(out) - orig_len);
        return s.err;
    }
    return 0;
}

int jet__pb_pack_iobuf(const ProtobufCMessage *msg, jet_iobuf_t *out)
{
    return codec_pack_sink(msg, out, jet_iobuf_len(out));
}

ProtobufCMessage *jet__pb_unpack_iobuf(const ProtobufCMessageDescriptor *desc,
                                       const jet_iobuf_t *in, ProtobufCAllocator *alloc)
{
    size_t n = jet_iobuf_len(in);
    static const uint8_t empty[1];
    if (n == 0) return protobuf_c_message_unpack(desc, alloc, 0, empty);

    uint8_t stack[1024];
    uint8_t *tmp = stack;
    if (n > sizeof(stack) && !codec_front_holds(in, n)) {
        tmp = malloc(n);
        if (!tmp) return NULL;
    }
    const uint8_t *p = jet_iobuf_fetch(in, tmp, n);
    ProtobufCMessage *msg =
        p && jet__pb_nesting_ok(desc, p, n) ? protobuf_c_message_unpack(desc, alloc, n, p) : NULL;
    if (tmp != stack) free(tmp);
    return msg;
}

int jet__baidu_pack(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta, jet_iobuf_t *body,
                    jet_iobuf_t *attachment)
{
    size_t fast = jet__meta_packed_size(meta);
    size_t meta_size = fast ? fast : protobuf_c_message_get_packed_size(&meta->base);
    size_t blen = body ? jet_iobuf_len(body) : 0;
    size_t alen = attachment ? jet_iobuf_len(attachment) : 0;
    /* No jetrpc peer would decode it (jet__baidu_cut): refused here, where
     * the sender can still say why. */
    if (meta_size > JET_BAIDU_META_MAX) return -EOVERFLOW;
    if (blen > UINT32_MAX || alen > UINT32_MAX || meta_size + blen + alen > UINT32_MAX)
        return -EMSGSIZE;

    size_t orig_len = jet_iobuf_len(out);
    uint8_t stack[CODEC_STACK_META];
    codec_put_be32(stack + 4, (uint32_t)(meta_size + blen + alen));
    codec_put_be32(stack + 8, (uint32_t)meta_size);
    memcpy(stack, JET_BAIDU_MAGIC, 4);
    int rc;
    if (JET_BAIDU_HEADER_SIZE + meta_size <= sizeof(stack)) {
        if (fast)
            jet__meta_pack(meta, stack + JET_BAIDU_HEADER_SIZE);
        else
            protobuf_c_message_pack(&meta->base, stack + JET_BAIDU_HEADER_SIZE);
        rc = jet_iobuf_append(out, stack, JET_BAIDU_HEADER_SIZE + meta_size);
        if (rc < 0) return rc;
    } else {
        rc = jet_iobuf_append(out, stack, JET_BAIDU_HEADER_SIZE);
        if (rc < 0) return rc;
        rc = codec_pack_sink(&meta->base, out, orig_len);
        if (rc < 0) return rc;
    }

    /* With both parts present, the body is shared rather than moved so that a
     * failure to move the attachment can still leave both inputs untouched. */
    if (blen) {
        rc = alen ? jet_iobuf_append_iobuf(out, body) : jet_iobuf_move(out, body);
        if (rc < 0) goto err_rollback;
    }
    if (alen) {
        rc = jet_iobuf_move(out, attachment);
        if (rc < 0) goto err_rollback;
        if (blen) jet_iobuf_clear(body);
    }
    return 0;

err_rollback:
    jet_iobuf_pop_back(out, jet_iobuf_len(out) - orig_len);
    return rc;
}

/* Frames up to this size (header, meta, message) are built on the stack. */
#define CODEC_STACK_FRAME 512

/* Header and (fast-packed) meta of a frame whose body after the meta is
 * `rest` bytes, at the start of piece; the body goes right after them. */
static uint8_t *codec_head(uint8_t *piece, const Brpc__Policy__RpcMeta *meta, size_t meta_size,
                           size_t rest)
{
    memcpy(piece, JET_BAIDU_MAGIC, 4);
    codec_put_be32(piece + 4, (uint32_t)(meta_size + rest));
    codec_put_be32(piece + 8, (uint32_t)meta_size);
    jet__meta_pack(meta, piece + JET_BAIDU_HEADER_SIZE);
    return piece + JET_BAIDU_HEADER_SIZE + meta_size;
}

/* Appends the frame's first piece, then the attachment (moved, or shared
 * when `share`); out is as it was when either fails. */
static int codec_append_frame(jet_iobuf_t *out, const uint8_t *piece, size_t len,
                              jet_iobuf_t *attachment, bool share)
{
    size_t orig_len = jet_iobuf_len(out);
    int rc = jet_iobuf_append(out, piece, len);
    if (rc < 0 || !attachment || jet_iobuf_empty(attachment)) return rc;
    rc = share ? jet_iobuf_append_iobuf(out, attachment) : jet_iobuf_move(out, attachment);
    if (rc < 0) jet_iobuf_pop_back(out, jet_iobuf_len(out) - orig_len);
    return rc;
}

/* The attachment is moved, or shared when `share` (then never written).
 * msz: msg's packed size (0 without msg). */
static int codec_pack_msg(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                          const ProtobufCMessage *msg, size_t msz, jet_iobuf_t *attachment,
                          bool share)
{
    size_t meta_size = jet__meta_packed_size(meta);
    size_t alen = attachment ? jet_iobuf_len(attachment) : 0;
    size_t head = JET_BAIDU_HEADER_SIZE + meta_size + msz;
    if (meta_size == 0 || head > CODEC_STACK_FRAME || alen > UINT32_MAX - meta_size - msz) {
        jet_iobuf_t body;
        jet_iobuf_init(&body);
        int rc = msg ? jet__pb_pack_iobuf(msg, &body) : 0;
        if (rc == 0)
            rc = share ? jet__baidu_pack_shared(out, meta, &body, attachment)
                       : jet__baidu_pack(out, meta, &body, attachment);
        jet_iobuf_fini(&body);
        return rc;
    }
    uint8_t piece[CODEC_STACK_FRAME];
    uint8_t *at = codec_head(piece, meta, meta_size, msz + alen);
    if (msz) protobuf_c_message_pack(msg, at);
    return codec_append_frame(out, piece, head, attachment, share);
}

int jet__baidu_pack_msg(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                        const ProtobufCMessage *msg, jet_iobuf_t *attachment)
{
    size_t msz = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    return codec_pack_msg(out, meta, msg, msz, attachment, false);
}

int jet__baidu_pack_msg_shared(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                               const ProtobufCMessage *msg, size_t msg_size,
                               const jet_iobuf_t *attachment)
{
    /* Shared, never written: the cast only serves the common helper. */
    return codec_pack_msg(out, meta, msg, msg ? msg_size : 0, (jet_iobuf_t *)attachment, true);
}

int jet__baidu_pack_shared(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                           const jet_iobuf_t *body, const jet_iobuf_t *attachment)
{
    size_t meta_size = jet__meta_packed_size(meta);
    size_t blen = body ? jet_iobuf_len(body) : 0;
    size_t alen = attachment ? jet_iobuf_len(attachment) : 0;
    size_t head = JET_BAIDU_HEADER_SIZE + meta_size + blen;
    if (meta_size == 0 || head > CODEC_STACK_FRAME || alen > UINT32_MAX - meta_size - blen) {
        jet_iobuf_t b, a;
        jet_iobuf_init(&b);
        jet_iobuf_init(&a);
        int rc = blen ? jet_iobuf_append_iobuf(&b, body) : 0;
        if (rc == 0 && alen) rc = jet_iobuf_append_iobuf(&a, attachment);
        if (rc == 0) rc = jet__baidu_pack(out, meta, &b, &a);
        jet_iobuf_fini(&b);
        jet_iobuf_fini(&a);
        return rc;
    }
    uint8_t piece[CODEC_STACK_FRAME];
    uint8_t *at = codec_head(piece, meta, meta_size, blen + alen);
    if (blen) jet_iobuf_copy_to(body, at, blen, 0);
    /* Shared, never written: the cast only serves the common helper. */
    return codec_append_frame(out, piece, head, (jet_iobuf_t *)attachment, true);
}
