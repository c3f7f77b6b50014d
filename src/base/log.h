/* Leveled one-line logging to stderr.
 *
 * Each message is one line: "<L> <time> <tid> <file>:<line>] text". Level
 * from the flag "log_level" (0 debug, 1 info, 2 warning, 3 error); messages
 * below it cost one comparison. Connection messages name the peer address. */
#ifndef JET_BASE_LOG_H
#define JET_BASE_LOG_H

#include <stdatomic.h>

#include "jetrpc/flags.h"

enum { JET_LOG_DEBUG = 0, JET_LOG_INFO = 1, JET_LOG_WARN = 2, JET_LOG_ERROR = 3 };

JET_FLAG_DECLARE_INT32(log_level);

void jet__log(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define JET_LOG(level, ...)                                                                        \
    do {                                                                                           \
        if ((level) >= JET_FLAG(log_level)) jet__log(level, __FILE__, __LINE__, __VA_ARGS__);     \
    } while (0)
#define JET_DEBUG(...) JET_LOG(JET_LOG_DEBUG, __VA_ARGS__)
#define JET_INFO(...)  JET_LOG(JET_LOG_INFO, __VA_ARGS__)
#define JET_WARN(...)  JET_LOG(JET_LOG_WARN, __VA_ARGS__)
#define JET_ERROR(...) JET_LOG(JET_LOG_ERROR, __VA_ARGS__)

/* Logs at most once per call site for the life of the process. */
#define JET_LOG_ONCE(level, ...)                                                                   \
    do {                                                                                           \
        static _Atomic int jet_once_;                                                              \
        if (!atomic_exchange_explicit(&jet_once_, 1, memory_order_relaxed))                       \
            JET_LOG(level, __VA_ARGS__);                                                           \
    } while (0)

#endif
