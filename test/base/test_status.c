/* Status codes: names and texts of RPC codes and system errnos, either sign. */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "base/status.h"
#include "jetrpc/errors.h"
#include "testutil.h"

#define STREQ(a, b) (strcmp((a), (b)) == 0)

static void test_rpc_codes(void)
{
    JT_CHECK_EQ(JET_ENOSERVICE, 1001);
    JT_CHECK_EQ(JET_ERPCTIMEDOUT, 1008);
    JT_CHECK_EQ(JET_EEOF, 1014);
    JT_CHECK_EQ(JET_EINTERNAL, 2001);
    JT_CHECK(STREQ(jet_err_name(JET_ERPCTIMEDOUT), "ERPCTIMEDOUT"));
    JT_CHECK(STREQ(jet_err_name(-JET_ERPCTIMEDOUT), "ERPCTIMEDOUT"));
    JT_CHECK(STREQ(jet_strerror(JET_ERPCTIMEDOUT), "RPC call timed out"));
    JT_CHECK(STREQ(jet_strerror(-JET_ERPCTIMEDOUT), "RPC call timed out"));
    JT_CHECK(STREQ(jet_err_name(-1002), "ENOMETHOD"));
    JT_CHECK(STREQ(jet_strerror(-1002), "Method not found"));
    JT_CHECK(STREQ(jet_err_name(JET_ERDMAMEM), "ERDMAMEM"));

    /* Every entry of the table, both signs. */
    int n = 0;
#define CHECK_ENTRY(name, num, text)                                                               \
    JT_CHECK(STREQ(jet_err_name(num), #name));                                                     \
    JT_CHECK(STREQ(jet_err_name(-(num)), #name));                                                  \
    JT_CHECK(STREQ(jet_strerror(num), text));                                                      \
    JT_CHECK(STREQ(jet_strerror(-(num)), text));                                                   \
    JT_CHECK_EQ(JET_##name, num);                                                                  \
    n++;
    JET_RPC_ERRNO_MAP(CHECK_ENTRY)
#undef CHECK_ENTRY
    JT_CHECK_EQ(n, 28);
}

static void test_system_codes(void)
{
    JT_CHECK(STREQ(jet_err_name(-EAGAIN), "EAGAIN"));
    JT_CHECK(STREQ(jet_err_name(EAGAIN), "EAGAIN"));
    JT_CHECK(STREQ(jet_err_name(-EINVAL), "EINVAL"));
    JT_CHECK(STREQ(jet_err_name(-ETIMEDOUT), "ETIMEDOUT"));
    JT_CHECK(STREQ(jet_err_name(-ECONNRESET), "ECONNRESET"));
    JT_CHECK(STREQ(jet_strerror(-EINVAL), strerror(EINVAL)));
    JT_CHECK(STREQ(jet_strerror(EPIPE), strerror(EPIPE)));
    JT_CHECK(STREQ(jet_strerror(-ENOMEM), "Cannot allocate memory"));
}

static void test_zero_and_unknown(void)
{
    JT_CHECK(STREQ(jet_err_name(0), "OK"));
    JT_CHECK(STREQ(jet_strerror(0), "OK"));
    static const int unknown[] = {999, -999, 1000, 1020, -2008, 3003, 99999, INT_MAX, INT_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        int c = unknown[i];
        JT_CHECK(STREQ(jet_err_name(c), "UNKNOWN"));
        const char *t = jet_strerror(c);
        JT_REQUIRE(t);
        JT_CHECK(strlen(t) > 0);
        JT_CHECK(strstr(t, "nknown") != NULL);
    }
    /* Static, as errors.h says: a later call does not rewrite an earlier
     * text (two in one log line). */
    const char *a = jet_strerror(5000);
    char before[64];
    snprintf(before, sizeof before, "%s", a);
    (void)jet_strerror(5002);
    JT_CHECK(STREQ(a, before));
}

/* Internal codes never reach a caller but do reach log lines: named. */
static void test_internal_codes(void)
{
    JT_CHECK(strstr(jet_strerror(-JET__EHELLO_REFUSED), "hello") != NULL);
    JT_CHECK(strstr(jet_strerror(JET__EHELLO_REFUSED), "hello") != NULL);
}

int main(void)
{
    JT_RUN(test_rpc_codes);
    JT_RUN(test_system_codes);
    JT_RUN(test_zero_and_unknown);
    JT_RUN(test_internal_codes);
    return jt_finish();
}
