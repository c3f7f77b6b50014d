/* The URMA handshake on the TCP control plane, byte-compatible with brpc's
 * URMA transport.
 *
 * v2: "URMA" + an 82-byte big-endian body (86 bytes, msg_len counts the
 * magic). v3: "URM3" + u32 BE pb_size + protobuf UrmaHello. After the
 * server's hello the client sends a 4-byte big-endian ACK whose bit 0 says
 * "I use URMA".
 *
 * Parsing is stateless: (bytes, length) in; "incomplete", "not a hello",
 * "invalid" or a parsed hello out, with the exact number of bytes the hello
 * occupies so the caller consumes one framed hello before deciding (a bad
 * hello never leaves half a message on the stream). Every field is checked
 * against brpc's rules before it is returned. */
#ifndef JET_URMA_HANDSHAKE_H
#define JET_URMA_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JET_URMA_MAGIC_V2      "URMA"
#define JET_URMA_MAGIC_V3      "URM3"
#define JET_URMA_MAGIC_LEN     4
#define JET_URMA_V2_LEN        86 /* whole packet, magic included */
#define JET_URMA_V2_MAX_LEN    4096
#define JET_URMA_V3_HDR_LEN    8
#define JET_URMA_V3_MAX_PB     4096
/* The longest well-framed hello of either version: a v3 one (4104 bytes). */
#define JET_URMA_HELLO_MAX_LEN (JET_URMA_V3_HDR_LEN + JET_URMA_V3_MAX_PB)
#define JET_URMA_HELLO_VER     2
#define JET_URMA_IMPL_VER      1
#define JET_URMA_ACK_LEN       4
#define JET_URMA_ACK_OK        0x1u
#define JET_URMA_MIN_BUFFER    1024
#define JET_URMA_MIN_RECV_CNT  3
#define JET_URMA_MAX_RECV_CNT  65535
#define JET_URMA_TP_CTP        1
#define JET_URMA_TP_MAX        1 /* RTP 0 and CTP 1 are reliable; UTP 2 is refused */

/* jetrpc capability bits. v2 carries them in the first pad byte (packet
 * offset 43), v3 in the optional field jet_caps (1000); brpc writes zeros
 * there and ignores both on read, so a brpc peer always shows 0. A feature
 * is used only when both hellos carry its bit. */
/* Bit 0: every data WR is a SEND_IMM whose 64-bit immediate carries the
 * credits being returned (low 32 bits) and the WR's sequence number (high 32
 * bits), so credits ride on data and a receiver detects a missing or
 * reordered WR (a send that failed mid-stream) before parsing past it;
 * standalone credit messages stay zero-length SEND_IMMs. */
#define JET_URMA_CAP_PIGGYBACK 0x01u
#define JET_URMA_CAPS          JET_URMA_CAP_PIGGYBACK
/* With any capability bit a jetrpc hello also carries its send queue depth
 * (v2: u16 BE at packet offset 44, the other pad bytes; v3: field jet_sq_size
 * 1001), so the receiver knows how many of its receives the peer can fill
 * and returns credits before the peer's window runs dry. */

typedef struct jet_urma_hello {
    int version;              /* 2 or 3 */
    uint32_t buffer_size;     /* bytes one receive buffer of the sender holds */
    uint32_t recv_buffer_cnt; /* the sender's posted receives - 1 */
    uint32_t jetty_id;
    uint8_t eid[16]; /* device EID */
    uint32_t uasid;
    uint32_t tp_type;
    uint8_t seg_eid[16];
    uint32_t seg_uasid;
    uint64_t seg_va;
    uint64_t seg_len;
    uint32_t seg_token_id;
    uint32_t jet_caps; /* JET_URMA_CAP_* (0 from brpc); v2 keeps only the low byte */
    uint32_t jet_sq;   /* the sender's SQ depth when jet_caps != 0 (v2: low 16 bits) */
} jet_urma_hello_t;

typedef enum jet_urma_hello_result {
    JET_URMA_HELLO_OK = 0,         /* parsed and valid; *used_p bytes belong to it */
    JET_URMA_HELLO_INCOMPLETE = 1, /* need more bytes */
    JET_URMA_HELLO_NOT_HELLO = 2,  /* first bytes are neither magic: not a URMA peer */
    JET_URMA_HELLO_DECLINED = 3,   /* a well-framed hello that does not negotiate URMA
                                      (the peer declines, or fields out of range);
                                      *used_p bytes belong to it */
    JET_URMA_HELLO_BAD_FRAME = 4,  /* the framing itself is broken (msg_len or pb_size
                                      out of range, undecodable protobuf): the stream
                                      cannot be resynchronised */
} jet_urma_hello_result_t;

/* Writes a hello of hello->version into buf (at least jet__urma_hello_size
 * bytes). Returns the bytes written, or -EINVAL. */
int jet__urma_hello_pack(const jet_urma_hello_t *hello, uint8_t *buf, size_t cap);
size_t jet__urma_hello_size(const jet_urma_hello_t *hello);
/* The declining hello a server sends when it does not use URMA (as v2 or
 * v3): hello_ver/impl_ver/jetty_id/buffer_size zero, so any brpc or jetrpc
 * client falls back to TCP. Returns bytes written or -EINVAL. */
int jet__urma_hello_pack_decline(int version, uint8_t *buf, size_t cap);

/* Parses a hello at the front of buf. *used_p is set for OK and DECLINED. */
jet_urma_hello_result_t jet__urma_hello_parse(const uint8_t *buf, size_t len,
                                              jet_urma_hello_t *hello, size_t *used_p);

/* True when buf (len >= 1) could be the start of a URMA hello: its first
 * min(len, 4) bytes are a prefix of "URMA" or "URM3". */
bool jet__urma_hello_prefix(const uint8_t *buf, size_t len);

static inline void jet__urma_ack_pack(uint8_t out[4], bool use_urma)
{
    out[0] = out[1] = out[2] = 0;
    out[3] = use_urma ? JET_URMA_ACK_OK : 0;
}
static inline uint32_t jet__urma_ack_parse(const uint8_t in[4])
{
    return (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
}

#endif
