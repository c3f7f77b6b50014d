/* Registration of the transports that live below the RPC layer but above
 * net (URMA): net's registry knows only TCP, so the RPC layer registers the
 * others, explicitly, before the first server or channel looks a mode up. */
#ifndef JET_RPC_TRANSPORTS_H
#define JET_RPC_TRANSPORTS_H

/* Registers every built-in transport once (later calls return at once). */
void jet__rpc_transports_init(void);

#endif
