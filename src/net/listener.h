/* jet_listener: a listening socket on one event loop that hands every
 * accepted connection to a callback (which owns the fd from then on). */
#ifndef JET_NET_LISTENER_H
#define JET_NET_LISTENER_H

#include "event/loop.h"
#include "net/socket.h"

typedef struct jet_listener jet_listener_t;

/* Loop thread of the listener. fd is non-blocking and close-on-exec. */
typedef void (*jet_accept_cb_t)(jet_listener_t *l, int fd, const jet_addr_t *peer, void *arg);

/* Binds and listens on addr. A unix path that holds a socket nobody
 * listens on is unlinked first; any other file there, or a live socket, is
 * -EADDRINUSE. 0 or -errno. */
int jet__listener_create(const jet_addr_t *addr, jet_accept_cb_t cb, void *arg,
                         jet_listener_t **l_p);
/* The bound port (inet), or 0. */
int jet__listener_port(const jet_listener_t *l);
/* Stops accepting and closes the socket; returns once no callback can run.
 * Not callable from the listener's loop thread. */
void jet__listener_destroy(jet_listener_t *l);

#endif
