/* The URMA transport (socket mode JET_SOCKET_MODE_URMA).
 *
 * It composes the TCP transport: every URMA connection starts as TCP, the
 * handshake runs on that TCP connection (byte-compatible with brpc's URMA
 * transport: v2/v3 hello, 4-byte ACK), and the connection ends in one of
 * three states, decided on the socket's loop thread:
 *   UNKNOWN  handshake in progress: every data-path slot is TCP's (nothing
 *            is written before the handshake ends anyway);
 *   ON       data over the URMA endpoint; the TCP fd must stay silent (a
 *            byte fails the socket with EPROTO, EOF with EEOF);
 *   OFF      plain TCP for the rest of the connection (fallback).
 *
 * Client (connect slot; returns 1 and ends with jet__socket_connected):
 * URMA unavailable or no jetty → no hello, OFF at once; else post the
 * receive queue, send the hello (version urma_client_handshake_version),
 * wait for the server's. A declining server hello → ACK 0, OFF; a valid one
 * → import, ACK 1, ON (an ACK is sent whenever the connection is kept:
 * brpc's client sends none when it falls back, which a server that waits
 * for it misreads). A valid hello that cannot be used (its import fails, or
 * it names this connection's own jetty) → ACK 0, OFF from a server whose
 * hello has jetrpc caps; from one without (brpc, which never gets ACK 0
 * from its own clients) the socket fails with JET__EHELLO_REFUSED instead.
 * EOF before any answer (brpc TCP-only servers close on a URMA hello) fails
 * the socket with JET__EHELLO_REFUSED: the channel retries over TCP.
 * The server's hello to a client whose hello has caps 0 carries none.
 * An answer that is no hello, or a broken frame (a server of another
 * protocol) → JET__EHELLO_REFUSED too. A client's broken frame → EPROTO at
 * the server.
 *
 * Server (first input bytes): not a hello prefix → OFF, the bytes go to the
 * protocol parser (TCP clients and brpc TCP clients work unchanged). A valid
 * hello → own hello (same version), a declined one (invalid fields, or no
 * URMA resources) → a declining hello; then the ACK: bit 0 → ON (only if
 * this side said yes; else EPROTO), 0 → OFF, and "PRPC" where the ACK should
 * be means the client fell back without an ACK (brpc) → OFF, bytes parsed.
 * A broken frame → EPROTO. Both sides bound the handshake by
 * urma_handshake_timeout_ms (the client also by its connect timeout). */
#ifndef JET_URMA_URMA_TRANSPORT_H
#define JET_URMA_URMA_TRANSPORT_H

#include "net/transport.h"

extern const jet_transport_ops_t jet__urma_transport;

#endif
