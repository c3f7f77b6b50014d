/* Addresses: jet__addr_parse for every accepted form and the refused ones
 * (bad ports, over-long unix paths, NULL), jet__addr_format and its
 * truncation, parse/format round trips, and every prefix of valid inputs
 * parsed from just before an unreadable page. */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "net/socket.h"
#include "testutil.h"

static void check_in4(const char *text, const char *ip, int port)
{
    jet_addr_t a;
    int rc = jet__addr_parse(text, &a);
    JT_CHECK_EQ(rc, 0);
    if (rc != 0) {
        fprintf(stderr, "    input: \"%s\"\n", text);
        return;
    }
    JT_CHECK_EQ(a.u.sa.sa_family, AF_INET);
    JT_CHECK_EQ(a.len, sizeof(struct sockaddr_in));
    JT_CHECK_EQ(ntohs(a.u.in4.sin_port), port);
    struct in_addr want;
    JT_REQUIRE(inet_pton(AF_INET, ip, &want) == 1);
    JT_CHECK_EQ(a.u.in4.sin_addr.s_addr, want.s_addr);
}

static void check_bad(const char *text)
{
    jet_addr_t a;
    memset(&a, 0xa5, sizeof a);
    int rc = jet__addr_parse(text, &a);
    JT_CHECK_EQ(rc, -EINVAL);
    if (rc != -EINVAL) fprintf(stderr, "    accepted: \"%s\"\n", text ? text : "(null)");
}

static void test_ipv4(void)
{
    check_in4("1.2.3.4:80", "1.2.3.4", 80);
    check_in4("127.0.0.1:0", "127.0.0.1", 0);
    check_in4("255.255.255.255:65535", "255.255.255.255", 65535);
    check_in4("10.0.0.1:8002", "10.0.0.1", 8002);
}

static void test_any(void)
{
    check_in4(":80", "0.0.0.0", 80);
    check_in4("80", "0.0.0.0", 80);
    check_in4("*:80", "0.0.0.0", 80);
    check_in4("0", "0.0.0.0", 0);
    check_in4("65535", "0.0.0.0", 65535);
}

static void test_ipv6(void)
{
    jet_addr_t a;
    JT_REQUIRE(jet__addr_parse("[::1]:80", &a) == 0);
    JT_CHECK_EQ(a.u.sa.sa_family, AF_INET6);
    JT_CHECK_EQ(a.len, sizeof(struct sockaddr_in6));
    JT_CHECK_EQ(ntohs(a.u.in6.sin6_port), 80);
    JT_CHECK(IN6_IS_ADDR_LOOPBACK(&a.u.in6.sin6_addr));

    JT_REQUIRE(jet__addr_parse("[2001:db8::7]:65535", &a) == 0);
    JT_CHECK_EQ(a.u.sa.sa_family, AF_INET6);
    JT_CHECK_EQ(ntohs(a.u.in6.sin6_port), 65535);
    struct in6_addr want;
    JT_REQUIRE(inet_pton(AF_INET6, "2001:db8::7", &want) == 1);
    JT_CHECK(memcmp(&a.u.in6.sin6_addr, &want, sizeof want) == 0);

    /* Brackets are needed only to separate the port; the last colon does it too. */
    JT_REQUIRE(jet__addr_parse("::1:80", &a) == 0);
    JT_CHECK_EQ(a.u.sa.sa_family, AF_INET6);
    JT_CHECK_EQ(ntohs(a.u.in6.sin6_port), 80);

    check_bad("[::1]");
    check_bad("[::1]80");
    check_bad("[::1:80");
    check_bad("[::1]:");
    check_bad("[::1]:65536");
}

static void test_hostname(void)
{
    jet_addr_t a;
    JT_REQUIRE(jet__addr_parse("localhost:80", &a) == 0);
    if (a.u.sa.sa_family == AF_INET) {
        JT_CHECK_EQ(a.len, sizeof(struct sockaddr_in));
        JT_CHECK_EQ(ntohs(a.u.in4.sin_port), 80);
        JT_CHECK_EQ(ntohl(a.u.in4.sin_addr.s_addr) >> 24, 127);
    } else {
        JT_REQUIRE(a.u.sa.sa_family == AF_INET6);
        JT_CHECK_EQ(a.len, sizeof(struct sockaddr_in6));
        JT_CHECK_EQ(ntohs(a.u.in6.sin6_port), 80);
        JT_CHECK(IN6_IS_ADDR_LOOPBACK(&a.u.in6.sin6_addr));
    }
    /* A host name is resolved before the port is applied: a bad port still fails. */
    check_bad("localhost:");
    check_bad("localhost:99999");
}

static void test_unix(void)
{
    jet_addr_t a;
    JT_REQUIRE(jet__addr_parse("unix:/tmp/x", &a) == 0);
    JT_CHECK_EQ(a.u.sa.sa_family, AF_UNIX);
    JT_CHECK(strcmp(a.u.un.sun_path, "/tmp/x") == 0);
    JT_CHECK_EQ(a.len, offsetof(struct sockaddr_un, sun_path) + strlen("/tmp/x") + 1);

    /* A relative path is a path too. */
    JT_REQUIRE(jet__addr_parse("unix:rel.sock", &a) == 0);
    JT_CHECK(strcmp(a.u.un.sun_path, "rel.sock") == 0);

    check_bad("unix:");

    /* sun_path holds 108 bytes with its NUL: 107 characters fit, 108 do not. */
    char text[5 + sizeof a.u.un.sun_path + 8];
    size_t max = sizeof a.u.un.sun_path - 1;
    memcpy(text, "unix:/", 6);
    memset(text + 6, 'p', max - 1);
    text[5 + max] = 0;
    JT_CHECK_EQ(strlen(text + 5), max);
    JT_REQUIRE(jet__addr_parse(text, &a) == 0);
    JT_CHECK_EQ(strlen(a.u.un.sun_path), max);
    JT_CHECK_EQ(a.len, sizeof(struct sockaddr_un));
    text[5 + max] = 'p';
    text[5 + max + 1] = 0;
    check_bad(text);
    memset(text + 6, 'q', sizeof text - 7);
    text[sizeof text - 1] = 0;
    check_bad(text);
}

static void test_bad_ports(void)
{
    check_bad("1.2.3.4:-1");
    check_bad("1.2.3.4:65536");
    check_bad("1.2.3.4:99999999999999999999999");
    check_bad("1.2.3.4:");
    check_bad("1.2.3.4:x");
    check_bad("1.2.3.4:80x");
    check_bad("1.2.3.4:8 0");
    check_bad("-1");
    check_bad("65536");
    check_bad("");
    check_bad("x");
    check_bad(":");
    check_bad(":x");
    check_bad("1.2.3.4");
    check_bad("1.2.3.4:0x50");
}

static void test_bad_hosts(void)
{
    /* (Malformed names that would reach the resolver are left out: the test
     * must not depend on DNS.) A host longer than any buffer the parser keeps is refused, not
     * truncated. */
    char text[600];
    memset(text, '1', sizeof text);
    memcpy(text + sizeof text - 4, ":80", 4);
    check_bad(text);
    text[0] = '[';
    memcpy(text + sizeof text - 5, "]:80", 5);
    check_bad(text);
}

static void test_null(void)
{
    check_bad(NULL);
    jet_addr_t a;
    memset(&a, 0xa5, sizeof a);
    JT_CHECK_EQ(jet__addr_parse(NULL, &a), -EINVAL);
    /* The output is left zeroed, not half-written. */
    JT_CHECK_EQ(a.len, 0);
    JT_CHECK_EQ(a.u.sa.sa_family, 0);
}

static void check_format(const char *text, const char *want)
{
    jet_addr_t a;
    JT_REQUIRE(jet__addr_parse(text, &a) == 0);
    char buf[160];
    memset(buf, 'z', sizeof buf);
    jet__addr_format(&a, buf, sizeof buf);
    JT_CHECK(strcmp(buf, want) == 0);
    if (strcmp(buf, want) != 0) fprintf(stderr, "    \"%s\" formats as \"%s\"\n", text, buf);
    /* Round trip: the formatted text parses back to the same address. */
    jet_addr_t b;
    JT_REQUIRE(jet__addr_parse(buf, &b) == 0);
    JT_CHECK_EQ(a.len, b.len);
    JT_CHECK(memcmp(&a.u, &b.u, a.len) == 0);
}

static void test_format(void)
{
    check_format("1.2.3.4:80", "1.2.3.4:80");
    check_format(":80", "0.0.0.0:80");
    check_format("80", "0.0.0.0:80");
    check_format("[::1]:80", "[::1]:80");
    check_format("[2001:db8:0:0:0:0:0:7]:443", "[2001:db8::7]:443");
    check_format("unix:/tmp/x", "unix:/tmp/x");
    check_format("255.255.255.255:65535", "255.255.255.255:65535");
}

static void test_format_truncates(void)
{
    jet_addr_t a;
    JT_REQUIRE(jet__addr_parse("[2001:db8::7]:65535", &a) == 0);
    /* The output buffer sits just before an unreadable page: a byte past len crashes. */
    char zeros[24] = {0};
    for (size_t len = 1; len <= sizeof zeros; len++) {
        char *buf = jt_guard_alloc(zeros, len);
        jet__addr_format(&a, buf, len);
        JT_CHECK_EQ(strlen(buf), len - 1 < 19 ? len - 1 : 19);
        JT_CHECK(strncmp(buf, "[2001:db8::7]:65535", len - 1) == 0);
        jt_guard_free(buf, len);
    }
    jet_addr_t none;
    memset(&none, 0, sizeof none);
    char buf[8];
    jet__addr_format(&none, buf, sizeof buf);
    JT_CHECK(strcmp(buf, "?") == 0);

    char path[120];
    snprintf(path, sizeof path, "unix:/%0100d", 7);
    JT_REQUIRE(jet__addr_parse(path, &a) == 0);
    char small[16];
    jet__addr_format(&a, small, sizeof small);
    JT_CHECK_EQ(strlen(small), sizeof small - 1);
    JT_CHECK(strncmp(small, path, sizeof small - 1) == 0);
}

/* Every prefix of each input, NUL-terminated right before an unreadable page:
 * the parser must never read past the terminator, and the answer is 0 or
 * -EINVAL (never a crash, never another code). */
static void test_prefixes_guarded(void)
{
    static const char *const inputs[] = {
        "1.2.3.4:80", "[::1]:8080", "[2001:db8::7]:65535", "unix:/tmp/jet.sock",
        ":80",        "*:1",        "localhost:80",
    };
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++) {
        size_t n = strlen(inputs[i]);
        for (size_t k = 0; k <= n; k++) {
            char tmp[64];
            memcpy(tmp, inputs[i], k);
            tmp[k] = 0;
            char *p = jt_guard_alloc(tmp, k + 1);
            jet_addr_t a;
            int rc = jet__addr_parse(p, &a);
            JT_CHECK(rc == 0 || rc == -EINVAL);
            if (rc == 0) JT_CHECK(a.len > 0 && a.len <= sizeof a.u);
            jt_guard_free(p, k + 1);
        }
    }
}

int main(void)
{
    JT_RUN(test_ipv4);
    JT_RUN(test_any);
    JT_RUN(test_ipv6);
    JT_RUN(test_hostname);
    JT_RUN(test_unix);
    JT_RUN(test_bad_ports);
    JT_RUN(test_bad_hosts);
    JT_RUN(test_null);
    JT_RUN(test_format);
    JT_RUN(test_format_truncates);
    JT_RUN(test_prefixes_guarded);
    return jt_finish();
}
