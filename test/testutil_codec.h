/* baidu_std test helpers for the codec group and above (library
 * jet_testutil_codec, which links jet_codec and the example echo messages;
 * nothing here may need the network or jetrpc):
 *
 * - iobufs from and to plain bytes, in blocks of a chosen size;
 * - frames packed with jetrpc's codec (src/rpc/codec.h), and frames written
 *   by hand (header bytes by hand, RpcMeta through protobuf-c);
 * - frames decoded, split from a stream, loaded from the recordings of a
 *   real brpc pair (JET_SHARED_DIR/interop/baidu_std);
 * - message parts decompressed with zlib and snappy themselves, not with
 *   jetrpc's compress.c, so that jetrpc's output is checked against the real
 *   formats. */
#ifndef JET_TESTUTIL_CODEC_H
#define JET_TESTUTIL_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "echo.pb-c.h"
#include "jetrpc/iobuf.h"
#include "rpc/codec.h"
#include "testutil.h"

/* The body_size limit the helpers decode with: above brpc's 64 MiB, so that
 * a frame over brpc's limit still decodes here. */
#define JT_MAX_FRAME (80u * 1024 * 1024)

/* ---- iobufs and plain bytes ----------------------------------------------- */

/* All of b, malloc'd (at least 1 byte); *len_p gets what was copied. */
uint8_t *jt_iobuf_bytes(const jet_iobuf_t *b, size_t *len_p);
/* Initialises b with data in pieces of `piece` bytes, each its own user
 * block, so that every piece boundary is a reference boundary. */
void jt_iobuf_split(jet_iobuf_t *b, const void *data, size_t n, size_t piece);
/* Initialises b with a copy of data (pool blocks). */
void jt_iobuf_flat(jet_iobuf_t *b, const void *data, size_t n);

/* ---- frames through jetrpc's codec ------------------------------------------ */

/* jet__baidu_pack of meta (attachment_size as given), body and attachment
 * bytes: the frame's bytes, malloc'd, or NULL when packing fails. */
uint8_t *jt_frame_pack(const Brpc__Policy__RpcMeta *meta, const void *body, size_t blen,
                       const void *att, size_t alen, size_t *len_p);
/* Decodes exactly one whole frame (jet__baidu_cut with JT_MAX_FRAME) from
 * p[0..n) into f (initialised, empty). true when it cut OK, with a sound
 * attachment_size, and nothing was left over. */
bool jt_frame_decode(const uint8_t *p, size_t n, jet_baidu_frame_t *f);
/* Splits a stream of whole frames into out[0..max) (initialised); returns
 * how many decoded, stopping at the first that does not. */
int jt_frame_split(const uint8_t *p, size_t n, jet_baidu_frame_t *out, int max);

/* ---- frames by hand ------------------------------------------------------------ */

/* A growable byte buffer; zero-initialise it ({0}); free(b.p) when done. */
typedef struct jt_bytes {
    uint8_t *p;
    size_t len, cap;
} jt_bytes_t;

void jt_bytes_add(jt_bytes_t *b, const void *data, size_t n);
/* Appends a 12-byte header "PRPC" + body_size + meta_size (big-endian). */
void jt_bytes_header(jt_bytes_t *b, uint32_t body_size, uint32_t meta_size);
/* Appends a frame: header, meta bytes, message bytes, attachment bytes. */
void jt_bytes_frame_raw(jt_bytes_t *b, const void *meta, size_t meta_len, const void *msg,
                        size_t msg_len, const void *att, size_t att_len);
/* The same with meta packed by protobuf-c itself. */
void jt_bytes_frame(jt_bytes_t *b, const Brpc__Policy__RpcMeta *meta, const void *msg,
                    size_t msg_len, const void *att, size_t att_len);

/* ---- echo messages -------------------------------------------------------------- */

/* Packed EchoRequest{message}: malloc'd (one spare byte). */
uint8_t *jt_echo_request_bytes(const char *message, size_t *len_p);
/* Appends a whole example.EchoService/Echo request frame: message msg,
 * attachment att[0..alen) (att NULL with alen > 0: zero bytes), correlation
 * id cid. */
void jt_bytes_echo_request(jt_bytes_t *b, int64_t cid, const char *msg, const void *att,
                           size_t alen);
/* A packed jettest.Node (test/proto/nest.proto) nested `depth` levels deep
 * through its `child` field: the top node is level 0, the node at level
 * `depth` holds value = depth. malloc'd. */
uint8_t *jt_nested_node_bytes(size_t depth, size_t *len_p);
/* Whether frame[0..len) (header included) is the echo service's answer to
 * "big:<n>" for correlation id cid: n attachment bytes of
 * jt_fill_pattern(seed 5). */
bool jt_big_answer_ok(const uint8_t *frame, size_t len, int64_t cid, size_t n);
/* f's message part, decompressed per its meta's compress_type with zlib and
 * snappy themselves (gzip must carry the RFC 1952 magic, zlib an RFC 1950
 * header): malloc'd, or NULL when it does not decompress. */
uint8_t *jt_frame_plain_body(const jet_baidu_frame_t *f, size_t *len_p);
/* message of f as an EchoRequest (request) or EchoResponse: strdup'd, or
 * NULL when it does not decode. */
char *jt_frame_echo_message(const jet_baidu_frame_t *f, bool request);

/* ---- the recordings ------------------------------------------------------------- */

/* The bytes of interop/baidu_std/<name> under the shared folder, malloc'd;
 * NULL (and a line on stderr) when it cannot be read. */
uint8_t *jt_interop_load(const char *name, size_t *len_p);
/* A recorded single-frame file, decoded into f (initialised, empty). */
bool jt_interop_load_frame(const char *name, jet_baidu_frame_t *f);

#endif
