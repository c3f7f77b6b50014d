/* baidu_std framing: 12-byte header "PRPC" + body_size (u32 BE) +
 * meta_size (u32 BE), then RpcMeta, message, attachment.
 *
 * The parser is stateless and zero-copy: it looks at the front of an input
 * iobuf, and either reports "need more", "not mine", an error, or cuts one
 * whole frame off (the payload blocks move, they are not copied). It refuses
 * a body_size over the limit from the header alone, before the body arrives.
 * The decoded meta is bounded too, whatever a peer sends: a meta over
 * JET_BAIDU_META_MAX bytes is refused (JET_PARSE_BAD_META), and so is one
 * whose decoding would spill more than 64 KiB plus JET_BAIDU_META_EXPANSION
 * times its size past the arena's first chunk (protobuf-c gives each 2-byte
 * empty entry or unknown field a struct of its own: 60 to 68 bytes per
 * byte). With that chunk (at most 64 KiB) and a flat copy of the meta, a
 * meta takes at most 128 KiB plus 49 bytes per byte while it is decoded.
 * brpc's metas are tens of bytes; the most a legitimate one takes is about
 * 40 bytes per byte (only user_fields entries with an empty key and value,
 * 6 bytes each, as brpc writes them). */
#ifndef JET_RPC_CODEC_H
#define JET_RPC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "jetrpc/iobuf.h"
#include "rpc_meta.pb-c.h"

#define JET_BAIDU_HEADER_SIZE 12
#define JET_BAIDU_MAGIC       "PRPC"
#define JET_BAIDU_META_MAX       (1u << 20)
#define JET_BAIDU_META_EXPANSION 48

typedef enum jet_parse_result {
    JET_PARSE_OK = 0,        /* a frame was cut */
    JET_PARSE_NEED_MORE = 1, /* a prefix of a valid frame; wait for bytes */
    JET_PARSE_NOT_MINE = 2,  /* the first bytes are not PRPC */
    JET_PARSE_TOO_BIG = 3,   /* body_size over the limit: close the connection */
    JET_PARSE_BAD_META = 4,  /* RpcMeta does not decode, or is over the limits above
                                (frame consumed): close */
    JET_PARSE_META_SIZE = 5, /* meta_size > body_size (frame consumed): brpc drops the
                                frame and keeps the connection */
} jet_parse_result_t;

/* Room in the frame for the decoded meta of an ordinary frame (the structs
 * and strings of a meta of up to JET_FRAME_META_INLINE bytes), so that
 * cutting a frame allocates nothing; larger metas get memory of their own.
 * The meta may point into the frame: a frame is never copied or moved. */
#define JET_FRAME_META_ROOM   768
#define JET_FRAME_META_INLINE 128

typedef struct jet_baidu_frame {
    Brpc__Policy__RpcMeta *meta; /* decoded meta; free with jet__baidu_frame_fini */
    jet_iobuf_t body;            /* message bytes (still compressed, if they are) */
    jet_iobuf_t attachment;
    _Alignas(16) unsigned char meta_room[JET_FRAME_META_ROOM];
} jet_baidu_frame_t;

void jet__baidu_frame_init(jet_baidu_frame_t *f);
void jet__baidu_frame_fini(jet_baidu_frame_t *f);

/* Checks the header at the front of in (which may hold fewer than 12 bytes).
 * On OK, *body_size_p and *meta_size_p are set. NEED_MORE when in holds a
 * proper prefix of a header (or a full header and fewer than 12+body_size
 * bytes: then the sizes are set too), NOT_MINE, TOO_BIG. */
jet_parse_result_t jet__baidu_peek(const jet_iobuf_t *in, uint32_t max_body_size,
                                   uint32_t *body_size_p, uint32_t *meta_size_p);

/* Cuts one frame from the front of in into f (f initialised, empty). On OK
 * the frame's bytes are consumed, meta decoded, body and attachment split
 * (attachment_size over the payload is reported as OK with
 * *bad_attachment_p = 1 and the whole payload in body: the caller answers
 * EREQUEST/ERESPONSE). On META_SIZE (meta_size > body_size) the frame's
 * bytes are consumed and nothing is decoded; on BAD_META (undecodable meta)
 * the frame's bytes are consumed too. NEED_MORE, NOT_MINE and TOO_BIG consume
 * nothing. */
jet_parse_result_t jet__baidu_cut(jet_iobuf_t *in, uint32_t max_body_size, jet_baidu_frame_t *f,
                                  int *bad_attachment_p);

/* Appends one frame to out: header, packed meta (attachment_size is taken
 * from meta as given: the caller sets it), then body and attachment, which
 * are moved (left empty). body and attachment may be NULL. 0 or -ENOMEM,
 * -EMSGSIZE when the frame would exceed 4 GiB, -EOVERFLOW when the meta is
 * over JET_BAIDU_META_MAX (its user fields, mostly), which jetrpc's parser
 * refuses. The other packers below return the same. */
int jet__baidu_pack(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta, jet_iobuf_t *body,
                    jet_iobuf_t *attachment);

/* jet__baidu_pack with msg packed (uncompressed) as the body: a small frame's
 * header, meta and message are written in one piece, a larger one goes
 * through jet__baidu_pack. msg may be NULL (empty body). Same results. */
int jet__baidu_pack_msg(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                        const ProtobufCMessage *msg, jet_iobuf_t *attachment);

/* jet__baidu_pack that leaves body and attachment as they are (a retry sends
 * them again): a small body is copied into the frame's first piece, a larger
 * one and the attachment are shared (block references). 0, -ENOMEM or
 * -EMSGSIZE, out unchanged on failure. */
int jet__baidu_pack_shared(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                           const jet_iobuf_t *body, const jet_iobuf_t *attachment);

/* jet__baidu_pack_msg that leaves the attachment as it is (shared): a
 * synchronous call packs its request straight into each attempt's frame.
 * msg_size is protobuf_c_message_get_packed_size(msg), which the caller
 * measured already (ignored when msg is NULL). */
int jet__baidu_pack_msg_shared(jet_iobuf_t *out, const Brpc__Policy__RpcMeta *meta,
                               const ProtobufCMessage *msg, size_t msg_size,
                               const jet_iobuf_t *attachment);

/* Serialises a protobuf-c message at the end of out (no intermediate copy). */
int jet__pb_pack_iobuf(const ProtobufCMessage *msg, jet_iobuf_t *out);
/* Decodes a message from the whole of in (copies only when in spans several
 * blocks) with alloc (NULL: protobuf-c's default). NULL when it does not
 * decode, or nests sub-messages deeper than JET_PB_MAX_NESTING (pb_nesting.h).
 * Free with protobuf_c_message_free_unpacked and the same allocator. */
ProtobufCMessage *jet__pb_unpack_iobuf(const ProtobufCMessageDescriptor *desc,
                                       const jet_iobuf_t *in, ProtobufCAllocator *alloc);

/* An allocator for one decoded message at a time: allocations come from
 * buf while it has room, the rest from malloc. Freeing a piece of buf does
 * nothing; jet__msg_arena_reset makes the whole of buf available again and
 * may be called only when no message allocated from it is alive (after
 * protobuf_c_message_free_unpacked with a.pa). Embedded in the call object,
 * it saves the mallocs and frees of every decoded request and response. */
#define JET_MSG_ARENA_SIZE 512
typedef struct jet_msg_arena {
    ProtobufCAllocator pa;
    size_t used;
    uint32_t spilled; /* pieces from malloc, not freed yet */
    _Alignas(16) unsigned char buf[JET_MSG_ARENA_SIZE];
} jet_msg_arena_t;

void jet__msg_arena_init(jet_msg_arena_t *a);
static inline void jet__msg_arena_reset(jet_msg_arena_t *a) { a->used = 0; }
/* Frees msg (NULL: none), decoded with a's allocator, and resets a. A
 * message that lies wholly in the arena needs no walk over its fields. */
static inline void jet__msg_arena_release(jet_msg_arena_t *a, ProtobufCMessage *msg)
{
    if (msg && a->spilled) protobuf_c_message_free_unpacked(msg, &a->pa);
    a->used = 0;
}

#endif
