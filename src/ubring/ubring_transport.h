/* The UBRing transport (socket mode JET_SOCKET_MODE_UBRING): same-host
 * shared-memory rings, byte-compatible with brpc's UBShmTransport (POSIX shm;
 * facts in shared/brpc/UBRING.md).
 *
 * It composes the TCP transport: every connection starts as TCP and the
 * handshake (64-byte hellos + 4-byte ACK, ubring_hello.h) runs on it. Tri-state
 * per connection, decided on the socket's loop thread:
 *   UNKNOWN  handshake in progress: data-path slots are TCP's;
 *   ON       data through two rings (ubring_ring.h) in two segments
 *            (ubring_shm.h); the TCP fd must stay silent: a byte fails the
 *            socket with EPROTO, EOF with EEOF (the normal close signal);
 *   OFF      plain TCP for the rest of the connection.
 *
 * Client (connect slot): names its segment UBRING_<local ip:port>_C, creates
 * it (ub_data_queue_size MiB) and sends the hello; any local failure (name
 * too long, e.g. IPv6; segment exists; ub_max_managed_num reached) -> no
 * hello, OFF. Server hello with versions (2, 1) -> map UBRING_<ip:port>_S
 * with length 64 * (own tail + 1) + 64, ACK 1, ON; a refusing hello or a
 * mapping failure -> ACK 0, OFF. EOF before any answer (a brpc TCP-only
 * server closes on the hello) -> the socket fails with JET__EHELLO_REFUSED:
 * the channel retries over TCP. An answer that is no valid hello (garbage,
 * msg_len < 64: a server of another protocol) -> JET__EHELLO_REFUSED too.
 * Server (first input bytes): not "UB" -> OFF, the bytes go to the protocol
 * parser. A hello -> map the client segment, create <name up to last _>_S,
 * initialise both (UBRING.md §3.3), answer; any failure or other versions ->
 * the zeroed un-negotiable hello, then ACK 0 -> OFF. ACK 1 -> ON.
 * Both sides unlink their own name once ON and on every failure path.
 *
 * Polling: rings are read on the socket's loop thread (connections gather on
 * the last ub_poller_num loops) by a loop poller that spins while there is
 * traffic and removes itself after ub_poller_idle_us without any; an idle
 * loop looks at its rings from a timer (about every millisecond), which also
 * runs heartbeats (the peer's byte written every second; ours checked every
 * ub_hb_timer_interval s; more than ub_hb_retry_cnt misses fail the socket
 * with ECONNRESET) and the close protocol (UBRING.md §8: active close when
 * the socket fails, acknowledgement awaited up to ub_disconnect_timeout s
 * without blocking the loop; a peer's close is acknowledged, its remaining
 * data delivered, and the socket fails with EEOF). Segments are unmapped
 * only once no reader or writer can be inside. */
#ifndef JET_UBRING_UBRING_TRANSPORT_H
#define JET_UBRING_UBRING_TRANSPORT_H

#include "net/transport.h"

extern const jet_transport_ops_t jet__ubring_transport;

#endif
