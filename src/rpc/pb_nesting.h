/* The nesting guard of decoded messages.
 *
 * protobuf-c decodes a sub-message by recursion, with no limit of its own:
 * a message type that contains itself (directly or through others) lets a
 * peer send a body of a few hundred kilobytes nested a hundred thousand
 * levels deep, and the decoding thread's stack overflows (SIGSEGV). brpc's
 * protobuf refuses messages nested deeper than its recursion limit, 100;
 * this guard refuses the same ones before protobuf-c sees them.
 *
 * The bytes are scanned only when the type can nest deeper than the limit
 * (it is recursive, or its chain of sub-message types is longer): for any
 * other type the answer is known from the descriptors, and is remembered per
 * thread, so that the usual call pays a lookup and no scan.
 */
#ifndef JET_RPC_PB_NESTING_H
#define JET_RPC_PB_NESTING_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deepest sub-message accepted: the top-level message is level 0, each
 * sub-message one more (protobuf's default recursion limit, as brpc). */
#define JET_PB_MAX_NESTING 100

/* Whether a message of type desc can nest deeper than the limit, so that
 * its bytes are scanned: its type graph has a cycle or a chain of more than
 * JET_PB_MAX_NESTING sub-message types (or over 256 types). */
bool jet__pb_nesting_may_exceed(const ProtobufCMessageDescriptor *desc);

/* False when the n bytes at p, read as desc, hold a sub-message nested more
 * than JET_PB_MAX_NESTING levels deep. True otherwise, malformed input
 * included: the scan stops at the first malformation, which protobuf-c
 * refuses before it recurses past it. */
bool jet__pb_nesting_ok(const ProtobufCMessageDescriptor *desc, const uint8_t *p, size_t n);

#endif
