#include <errno.h>
#include <limits.h>
#include <string.h>

#include "base/status.h"
#include "jetrpc/errors.h"

const char *jet_strerror(int code)
{
    /* -INT_MIN overflows; no code has that value. */
    if (code == INT_MIN) return "Unknown error";
    if (code < 0) code = -code;
    switch (code) {
#define JET_ERR_TEXT_(name, num, text)                                                             \
    case num:                                                                                      \
        return text;
        JET_RPC_ERRNO_MAP(JET_ERR_TEXT_)
#undef JET_ERR_TEXT_
    case 0:
        return "OK";
    case JET__EHELLO_REFUSED:
        return "The server refused the transport's hello (closed, or answered with no hello)";
    default:
        break;
    }
    /* glibc's texts of errno values are static; an unknown code would get
     * its per-thread "Unknown error N" buffer, which the next call
     * overwrites (two in one log line would print the same text). */
    if (code > 0 && code < 4096 && strerrorname_np(code) != NULL) return strerror(code);
    return "Unknown error code";
}

const char *jet_err_name(int code)
{
    if (code == INT_MIN) return "UNKNOWN";
    if (code < 0) code = -code;
    switch (code) {
#define JET_ERR_NAME_(name, num, text)                                                             \
    case num:                                                                                      \
        return #name;
        JET_RPC_ERRNO_MAP(JET_ERR_NAME_)
#undef JET_ERR_NAME_
    case 0:
        return "OK";
    default: {
        const char *n = strerrorname_np(code);
        return n ? n : "UNKNOWN";
    }
    }
}
