/* Internal status codes: never on the wire, never in a call's error code;
 * jet_strerror() still names them for log lines. */
#ifndef JET_BASE_STATUS_H
#define JET_BASE_STATUS_H

/* The peer closed the connection on the transport's application hello
 * without answering (a brpc TCP-only server closes on a URMA or UBRing
 * hello). See src/net/transport.h for what a channel does with it. */
#define JET__EHELLO_REFUSED 4097

#endif
