/* jetrpc status codes.
 *
 * One convention everywhere: a function returns 0 on success or a negative
 * code on failure; data calls return bytes (>= 0) or a negative code. A code
 * is either a system errno (-EINVAL, -EAGAIN, ...) or one of the RPC codes
 * below, which are brpc's numbers so that both ends of a brpc/jetrpc pair
 * agree on the wire (RpcResponseMeta.error_code carries the positive value).
 * jet_strerror() and jet_err_name() accept either sign. */
#ifndef JETRPC_ERRORS_H
#define JETRPC_ERRORS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, number, text): the RPC error table (brpc's enum brpc.Errno). */
#define JET_RPC_ERRNO_MAP(X)                                                                       \
    X(ENOSERVICE, 1001, "Service not found")                                                       \
    X(ENOMETHOD, 1002, "Method not found")                                                         \
    X(EREQUEST, 1003, "Bad request")                                                               \
    X(ERPCAUTH, 1004, "Unauthorized")                                                              \
    X(ETOOMANYFAILS, 1005, "Too many sub calls failed")                                            \
    X(EPCHANFINISH, 1006, "ParallelChannel finished")                                              \
    X(EBACKUPREQUEST, 1007, "Sending backup request")                                              \
    X(ERPCTIMEDOUT, 1008, "RPC call timed out")                                                    \
    X(EFAILEDSOCKET, 1009, "Broken socket")                                                        \
    X(EHTTP, 1010, "Bad http call")                                                                \
    X(EOVERCROWDED, 1011, "The server is overcrowded")                                             \
    X(ERTMPPUBLISHABLE, 1012, "RtmpRetryingClientStream is publishable")                           \
    X(ERTMPCREATESTREAM, 1013, "createStream was rejected by the RTMP server")                     \
    X(EEOF, 1014, "Got EOF")                                                                       \
    X(EUNUSED, 1015, "The socket was not needed")                                                  \
    X(ESSL, 1016, "SSL related operation failed")                                                  \
    X(EH2RUNOUTSTREAMS, 1017, "The H2 socket was run out of streams")                              \
    X(EREJECT, 1018, "The Request is rejected")                                                    \
    X(EPROGREADTIMEOUT, 1019, "Progressive read timeout")                                          \
    X(EINTERNAL, 2001, "Internal server error")                                                    \
    X(ERESPONSE, 2002, "Bad response")                                                             \
    X(ELOGOFF, 2003, "Server is stopping")                                                         \
    X(ELIMIT, 2004, "Reached server's max_concurrency")                                            \
    X(ECLOSE, 2005, "Close socket initiatively")                                                   \
    X(EITP, 2006, "Failed Itp response")                                                           \
    X(ESHUTDOWNWRITE, 2007, "Shutdown write of the socket")                                        \
    X(ERDMA, 3001, "RDMA verbs error")                                                             \
    X(ERDMAMEM, 3002, "Memory not registered for RDMA")

enum {
#define JET_ERRNO_ENUM_(name, num, text) JET_##name = num,
    JET_RPC_ERRNO_MAP(JET_ERRNO_ENUM_)
#undef JET_ERRNO_ENUM_
};

/* Text of a code (either sign): the RPC table, else strerror(). Never NULL;
 * the string is static. */
const char *jet_strerror(int code);
/* Symbolic name ("ERPCTIMEDOUT", "EAGAIN", ...) of a code (either sign);
 * "UNKNOWN" for a code with no name. */
const char *jet_err_name(int code);

#ifdef __cplusplus
}
#endif
#endif
