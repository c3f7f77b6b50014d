/* UBRing handshake messages on the TCP connection (brpc UBRING.md §2).
 *
 * Contract (also for raw test clients):
 *  - Hello, both directions, exactly JET_UBRING_HELLO_LEN (64) bytes, big-endian,
 *    packed: 0 "UB" | 2 msg_len u16 | 4 hello_ver u16 | 6 impl_ver u16 |
 *    8 len u64 (size in bytes of the sender's own segment) |
 *    16 shm_name[48] (NUL-padded, no terminator required). The client sends
 *    its own segment name; the server echoes the client's name.
 *  - Un-negotiable (refusing) hello: "UB", msg_len 64, versions 0/0, bytes
 *    8..63 zero (brpc sends stack garbage there; we never do).
 *  - ACK: 4 bytes, u32 big-endian, client -> server only; bit 0
 *    (JET_UBRING_ACK_ON) = "UBRing on". Sent once after the server's hello.
 *  - Valid versions are (2, 1); other versions are a refusal, not an error.
 *    msg_len < 64 is a protocol error; msg_len > 64 means the frame carries
 *    msg_len bytes in all, the extra ones are drained and ignored (at most
 *    JET_UBRING_HELLO_MAX).
 * All functions are pure (no I/O, no allocation). */
#ifndef JET_UBRING_UBRING_HELLO_H
#define JET_UBRING_UBRING_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define JET_UBRING_HELLO_LEN 64
#define JET_UBRING_HELLO_MAX 4096 /* largest msg_len accepted (extra bytes drained) */
#define JET_UBRING_ACK_LEN   4
#define JET_UBRING_HELLO_VER 2
#define JET_UBRING_IMPL_VER  1
#define JET_UBRING_NAME_BUF  48 /* wire field; a usable name has 1..47 characters */
#define JET_UBRING_ACK_ON    0x1u

typedef struct jet_ubring_hello {
    uint16_t msg_len;
    uint16_t hello_ver;
    uint16_t impl_ver;
    uint64_t len;
    char shm_name[JET_UBRING_NAME_BUF + 1]; /* always NUL-terminated after unpack */
} jet_ubring_hello_t;

/* Encodes h into exactly 64 bytes. shm_name is copied up to 48 bytes and
 * NUL-padded; msg_len is written as given (64 for every hello we send). */
void jet__ubring_hello_pack(const jet_ubring_hello_t *h, uint8_t out[JET_UBRING_HELLO_LEN]);
/* The un-negotiable hello: "UB", 64, versions 0/0, bytes 8..63 zero. */
void jet__ubring_hello_pack_refuse(uint8_t out[JET_UBRING_HELLO_LEN]);
/* Decodes the hello at the front of buf[0..len). Returns the length of the
 * whole frame (msg_len, 64..JET_UBRING_HELLO_MAX; the caller drops that many
 * bytes) when it is complete, -EAGAIN when more bytes are needed, -EPROTO when
 * the magic is not "UB" or msg_len is < 64 or > JET_UBRING_HELLO_MAX. *h is
 * written only on success. */
ssize_t jet__ubring_hello_unpack(const uint8_t *buf, size_t len, jet_ubring_hello_t *h);
/* True while buf[0..len) may still be the start of a "UB" hello (len 0: true). */
bool jet__ubring_hello_prefix(const uint8_t *buf, size_t len);
/* Versions (2, 1): the sender is willing to use UBRing. */
bool jet__ubring_hello_versions_ok(const jet_ubring_hello_t *h);

void jet__ubring_ack_pack(uint8_t out[JET_UBRING_ACK_LEN], bool on);
uint32_t jet__ubring_ack_unpack(const uint8_t in[JET_UBRING_ACK_LEN]);

#endif
