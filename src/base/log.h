/* Leveled one-line logging to stderr.
 *
 * Each message is one line: "<L> <time> <tid> <file>:<line>] text". Level
 * from the flag "log_level" (0 debug, 1 info, 2 warning, 3 error); messages
 * below it cost one comparison. Connection messages name the peer address. */
#ifndef JET_BASE_LOG_H
#define JET_BASE_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "jetrpc/flags.h"

enum { JET_LOG_DEBUG = 0, JET_LOG_INFO = 1, JET_LOG_WARN = 2, JET_LOG_ERROR = 3 };

JET_FLAG_DECLARE_INT32(log_level);

void jet__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define JET_LOG(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) >= JET_FLAG(log_level)) jet__log(level, __FILE__, __LINE__, __VA_ARGS__);      \
    } while (0)
#define JET_DEBUG(...) JET_LOG(JET_LOG_DEBUG, __VA_ARGS__)
#define JET_INFO(...)  JET_LOG(JET_LOG_INFO, __VA_ARGS__)
#define JET_WARN(...)  JET_LOG(JET_LOG_WARN, __VA_ARGS__)
#define JET_ERROR(...) JET_LOG(JET_LOG_ERROR, __VA_ARGS__)

/* Lines a remote peer can cause at will (its bad bytes, its hellos, its
 * deaths, at its connection rate) go through JET_WARN_PEER / JET_INFO_PEER:
 * per call site, a burst of 10 x log_peer_rate lines, then log_peer_rate
 * lines a second (a token bucket; 0: no limit). The next line printed after
 * some were dropped ends with their count, so nothing is lost silently. The
 * format must have at least one argument (the peer's address). */
JET_FLAG_DECLARE_INT32(log_peer_rate);

typedef struct jet_log_rate {
    _Atomic int64_t tat_us;      /* the bucket's "theoretical arrival time" (GCRA) */
    _Atomic uint32_t suppressed; /* lines dropped since the last one printed */
} jet_log_rate_t;

/* True when a line may be printed now; *suppressed_p is then the number of
 * lines dropped before it (and is reset). Any thread, lock-free. */
bool jet__log_rate_take(jet_log_rate_t *r, uint32_t *suppressed_p);

#define JET_LOG_PEER(level, fmt, ...)                                                              \
    do {                                                                                           \
        static jet_log_rate_t jet_rate_;                                                           \
        uint32_t jet_sup_;                                                                         \
        if ((level) >= JET_FLAG(log_level) && jet__log_rate_take(&jet_rate_, &jet_sup_)) {         \
            if (jet_sup_)                                                                          \
                jet__log(level, __FILE__, __LINE__,                                                \
                         fmt " [%u more like this not logged: --log_peer_rate]", __VA_ARGS__,      \
                         jet_sup_);                                                                \
            else                                                                                   \
                jet__log(level, __FILE__, __LINE__, fmt, __VA_ARGS__);                             \
        }                                                                                          \
    } while (0)
#define JET_INFO_PEER(fmt, ...) JET_LOG_PEER(JET_LOG_INFO, fmt, __VA_ARGS__)
#define JET_WARN_PEER(fmt, ...) JET_LOG_PEER(JET_LOG_WARN, fmt, __VA_ARGS__)

/* Logs at most once per call site for the life of the process. */
#define JET_LOG_ONCE(level, ...)                                                                   \
    do {                                                                                           \
        static _Atomic int jet_once_;                                                              \
        if (!atomic_exchange_explicit(&jet_once_, 1, memory_order_relaxed))                        \
            JET_LOG(level, __VA_ARGS__);                                                           \
    } while (0)

#endif
