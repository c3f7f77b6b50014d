/* Names of liburma completion statuses, for log lines and tool output.
 * Header-only so that programs linking nothing of jetrpc (softub's tools)
 * share it with the URMA transport. */
#ifndef JET_URMA_NAMES_H
#define JET_URMA_NAMES_H

#include <stddef.h>

/* "REM_ACCESS_ABORT_ERR" for URMA_CR_REM_ACCESS_ABORT_ERR...; "UNKNOWN" otherwise. */
static inline const char *jet__urma_cr_status_name(int status)
{
    static const char *const names[] = {
        "SUCCESS",
        "UNSUPPORTED_OPCODE_ERR",
        "LOC_LEN_ERR",
        "LOC_OPERATION_ERR",
        "LOC_ACCESS_ERR",
        "REM_RESP_LEN_ERR",
        "REM_UNSUPPORTED_REQ_ERR",
        "REM_OPERATION_ERR",
        "REM_ACCESS_ABORT_ERR",
        "ACK_TIMEOUT_ERR",
        "RNR_RETRY_CNT_EXC_ERR",
        "WR_FLUSH_ERR",
        "WR_SUSPEND_DONE",
        "WR_FLUSH_ERR_DONE",
        "WR_UNHANDLED",
        "LOC_DATA_POISON",
        "REM_DATA_POISON",
    };
    return status >= 0 && (size_t)status < sizeof names / sizeof names[0] ? names[status]
                                                                          : "UNKNOWN";
}

#endif
